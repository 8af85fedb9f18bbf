"""How the CLI prints sessions for a person: one line per message or log event (`dsh show`,
`dsh tail`), and `dsh demo`'s report of the three read models side by side with the log."""

from __future__ import annotations

import json
import textwrap
from typing import TYPE_CHECKING, Any

from dsh.messages import projects_to_nothing

if TYPE_CHECKING:
    from cli.demo import DemoRun
    from projectors.read_api import SurfaceView


def _clip(s: str, width: int) -> str:
    s = " ".join(s.split())
    return s if len(s) <= width else s[: width - 1] + "…"


def seq_list(seqs: list[int], most: int = 10) -> str:
    """Seqs for a header line: all of a short list, the ends of a long one with the count."""
    if len(seqs) <= most:
        return f"{len(seqs)} {_seqs_word(seqs)} {seqs}"
    half = most // 2
    head = ", ".join(map(str, seqs[:half]))
    tail = ", ".join(map(str, seqs[-half:]))
    return f"{len(seqs):,} {_seqs_word(seqs)} [{head}, … {tail}]"


def _seqs_word(seqs: list[int]) -> str:
    return "node" if len(seqs) == 1 else "nodes"


def message_line(message: Any, width: int = 88) -> str:
    parts = []
    for block in message.get("content", []):
        kind = block.get("type")
        if kind == "text":
            parts.append(block["text"])
        elif kind == "tool-call":
            parts.append(f"→ {block['name']}({block['arguments']})")
        elif kind == "tool-result":
            inner = " ".join(b.get("text", f"[{b.get('type')}]") for b in block["content"])
            parts.append(f"← {inner}" + (" (error)" if block.get("isError") else ""))
        else:
            parts.append(f"[{kind}]")
    return _clip(" ".join(parts), width)


def event_message(event: dict[str, Any]) -> Any:
    data = event.get("data") or {}
    return data if event["type"] == "user/message" else data.get("message")


def event_summary(event: dict[str, Any], width: int = 100) -> str:
    """One log event in a line: its message's text when it carries one, else its data."""
    message = event_message(event)
    if isinstance(message, dict):
        return message_line(message, width)
    return _clip(json.dumps(event.get("data")), width)


def transcript_line(event: dict[str, Any]) -> str:
    t, data = event["type"], event.get("data") or {}
    message = event_message(event)
    if isinstance(message, dict):
        role = message.get("role", "")
        return f"{role:<9} {message_line(message, 76)}"
    if t == "turn/start":
        return f"── turn {data['turn']} ──"
    if t == "turn/end":
        return f"   turn {data['turn']} {data['reason']['kind']}"
    if t == "assistant/attempt":
        error = data.get("error", {}).get("code", "")
        return f"   attempt failed ({error}), retried" if error else "   attempt"
    if t == "tool/call":
        return f"   tool call {data['name']}({data['arguments']})"
    return f"   {_clip(json.dumps(data), 70)}"


def render_demo(run: DemoRun) -> str:
    out: list[str] = []
    s = run.script
    surface = run.surface
    out.append("")
    out.append(
        f"1. WHAT THE MODEL SEES NEXT  (dsh show surface {run.session_id}): "
        f"{len(surface.messages)} messages from {len(surface.nodes)} surface nodes, "
        f"replace generation {surface.replace_generation}, content generation "
        f"{surface.content_generation}"
    )
    for seq, message in zip(_visible_nodes(surface), surface.messages, strict=True):
        note = ""
        if seq == s.summary_seq:
            note = f"   (summary: replaced {len(s.summarized)} nodes)"
        elif seq == s.image_seq:
            note = "   (image offloaded)"
        elif seq == s.rewrite_seq:
            note = f"   (rewrite of seq {s.rewritten_result_seq})"
        out.append(f"  seq {seq:>3}  {message['role']:<9} {message_line(message, 70)}{note}")
    out.append("")
    kept = [e for e in run.transcript if e.type not in ("step/start", "step/end")]
    out.append(
        f"2. WHAT THE HUMAN TRANSCRIPT SHOWS  (dsh tail {run.session_id}): "
        f"{len(run.transcript)} entries, every turn kept (step markers left out here)"
    )
    for e in kept:
        out.append(f"  seq {e.seq:>3}  {transcript_line(e.event)}")
    out.append(
        f"  (the compaction, seqs {s.summary_seq - 1}..{s.summary_seq + 1}, changed what the model "
        "sees, not what happened: no turn is lost here)"
    )
    out.append("")
    replaced = run.audit.replaced(s.summary_seq)
    out.append(
        f"3. PROVENANCE OF THE SUMMARY  (dsh show audit {run.session_id}): seq {s.summary_seq} "
        f"replaced {len(replaced)} surface nodes, each cited, each still in the log:"
    )
    summary = run.surface.node_messages[s.summary_seq]["message"]
    out.extend("  " + line for line in textwrap.wrap(f'"{message_line(summary, 1000)}"', width=96))
    turn_of = {seq: turn for turn, seqs in s.turn_nodes.items() for seq in seqs}
    by_turn: dict[int, list[str]] = {}
    for record in replaced:
        kind = record["type"].split("/")[0]
        by_turn.setdefault(turn_of.get(record["seq"], 0), []).append(f"{record['seq']} {kind}")
    for turn, items in sorted(by_turn.items()):
        out.append(f"  turn {turn:>2}: {', '.join(items)}")
    out.append("")
    fork = run.fork_surface
    out.append(
        f"4. THE FORK  {run.fork_id}: the parent's {s.last_seq + 1} events inherited + its own "
        f"turn; it sees {len(fork.messages)} messages, the last two its own:"
    )
    for message in fork.messages[-2:]:
        out.append(f"  {message['role']:<9} {message_line(message, 80)}")
    out.append("")
    out.append(
        f"appended {s.last_seq + 1 + run.fork_last_seq + 1} events in {run.append_seconds:.1f}s; "
        f"projections caught up {run.catch_up_seconds:.1f}s later"
    )
    for key, value in run.where.items():
        if isinstance(value, dict):
            out.append(f"{key}:")
            out.extend(f"  {name:<19} {v}" for name, v in value.items())
    out.append(
        f"next: dsh verify {run.session_id} | dsh tail {run.session_id} | dsh down (stops it all)"
    )
    return "\n".join(out)


def _visible_nodes(surface: SurfaceView) -> list[int]:
    """The node seq of each message ``surface.messages`` lists (empty ones are dropped)."""
    out = []
    for seq in surface.nodes:
        node = surface.node_messages[seq]
        if projects_to_nothing(node["type"], node["message"]):
            continue
        out.append(seq)
    return out
