"""`dsh demo`: the whole pipeline end to end on the local stack.

Brings up Kafka, Redis, the writer and the three projectors (`dsh up`), appends the scripted
agent session of :mod:`cli.demo_script` through ``SessionClient`` (validated by the writer,
committed exactly once), forks it, waits until the projectors caught up, and prints the three
read models side by side with the log: what the model sees next, what the human transcript
shows, and what the compaction summary replaced. Each run uses a new session id.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dsh
from cli import demo_script
from dsh.messages import projects_to_nothing

if TYPE_CHECKING:
    from producers import SessionClient
    from projectors.read_api import AuditView, Reader, SurfaceView, TranscriptEntry

DEMO_HELP = """\
Start the local stack with its services (as `dsh up`), then drive a scripted agent session
through the pipeline: twelve turns with streamed answers, a failed-then-retried model attempt,
tool calls, a screenshot offloaded from the surface (image/offload), an oversized tool result
rewritten, a compaction of turns 1-10 into one summary, and a fork. It waits for the three
projections and prints what the model sees next, the human transcript (compacted turns
included) and the provenance of the summary. Re-runnable: each run is a new session.

--no-up uses the pipeline the DSH_KAFKA_* / DSH_REDIS_* settings point at instead (a writer
and the three projectors must run there, with the image/offload interpreter
interpreters.image_offload:offload_images registered)."""


def register(commands: Any) -> None:
    demo = commands.add_parser(
        "demo",
        help="start the local pipeline and run a scripted agent session through it",
        description=DEMO_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument("--json", action="store_true", help="print the result as JSON")
    demo.add_argument(
        "--no-up",
        action="store_true",
        help="do not start the local stack: use the running pipeline DSH_KAFKA_*/DSH_REDIS_* name",
    )
    demo.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for the broker, the writer and the projectors (default 30)",
    )
    demo.set_defaults(handler=_demo)


@dataclass
class DemoRun:
    session_id: str
    fork_id: str
    script: demo_script.Result
    fork_last_seq: int
    append_seconds: float
    catch_up_seconds: float
    surface: SurfaceView
    fork_surface: SurfaceView
    transcript: list[TranscriptEntry]
    audit: AuditView
    where: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session_id,
            "fork": self.fork_id,
            "events": self.script.last_seq + 1,
            "forkEvents": self.fork_last_seq + 1,
            "appendSeconds": round(self.append_seconds, 3),
            "catchUpSeconds": round(self.catch_up_seconds, 3),
            "surface": self.surface.to_json(),
            "forkSurface": self.fork_surface.to_json(),
            "transcript": [e.event | {"kind": e.kind} for e in self.transcript],
            "summary": {
                "seq": self.script.summary_seq,
                "replaced": self.audit.replaced(self.script.summary_seq),
            },
            **self.where,
        }


def new_session_id() -> str:
    return f"demo-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"


class Pipelined:
    """Appends to one session as an agent runtime that owns it would: each event is checked
    by a local copy of the session first (the core gives its seq at once, and a mistake fails
    here, before anything is sent), then sent with ``append_async`` and ``expected_seq`` = that
    seq, many in flight; the writer commits them in order, validating each again. A session
    someone else appended to meanwhile fails with EXPECTED_SEQ_MISMATCH, never diverges."""

    def __init__(self, client: SessionClient, session: dsh.Session, timeout_s: float) -> None:
        self.client = client
        self.session = session
        self.timeout_s = timeout_s
        self.futures: list[Future[dsh.Event]] = []

    def __call__(self, type_: str, data: Any, op: Any, sources: Any) -> dsh.Event:
        ev = self.session.append(type_, data, surface_op=op, source_event_seqs=sources)
        self.futures.append(
            self.client.append_async(
                self.session.id,
                type_,
                data,
                surface_op=op,
                source_event_seqs=sources,
                expected_seq=ev.seq,
                timeout=self.timeout_s,
            )
        )
        return ev

    def wait(self) -> list[dsh.Event]:
        """The committed events; the first rejection or timeout raises (the rest, queued
        behind it, fail their expected seq and commit nothing)."""
        return [f.result() for f in self.futures]


def run_demo(
    client: SessionClient,
    reader: Reader,
    *,
    session_id: str | None = None,
    timeout_s: float = 30.0,
    progress: Any = None,
) -> DemoRun:
    """Append the script and its fork through ``client``, wait for ``reader``'s projections."""
    from interpreters import offload_images

    say = progress or (lambda _line: None)
    session_id = session_id or new_session_id()
    fork_id = f"{session_id}-fork"

    say(f"appending session {session_id} through SessionClient -> dsh writer ...")
    started = time.monotonic()
    parent = dsh.Session.create(session_id)
    parent.register_message_projection("image/offload", offload_images)
    append = Pipelined(client, parent, timeout_s)
    script = demo_script.run_script(append)
    committed = append.wait()
    # The fork: forked by the core at the parent's end, published as the child's first
    # command (all-or-nothing, only at seq 0), then continued with a turn of its own.
    child = parent.fork(fork_id)
    # A draft is an event's wire form without the seq and time the writer assigns.
    drafts = [
        {k: v for k, v in e.to_json().items() if k not in ("seq", "time")} for e in child.events()
    ]
    client.append_many(fork_id, drafts, expected_seq=0, timeout=timeout_s)
    fork_append = Pipelined(client, child, timeout_s)
    fork_last = demo_script.fork_turn(fork_append, len(demo_script.TURNS) + 1)
    fork_append.wait()
    append_seconds = time.monotonic() - started
    say(
        f"  {len(committed)} events committed, and fork {fork_id} "
        f"({fork_last + 1} events) in {append_seconds:.1f}s"
    )

    say("waiting for the surface, transcript and audit projectors ...")
    started = time.monotonic()
    wait_projected(reader, {session_id: script.last_seq, fork_id: fork_last}, timeout_s)
    catch_up = time.monotonic() - started
    say(f"  caught up in {catch_up:.1f}s")
    return DemoRun(
        session_id=session_id,
        fork_id=fork_id,
        script=script,
        fork_last_seq=fork_last,
        append_seconds=append_seconds,
        catch_up_seconds=catch_up,
        surface=reader.surface(session_id),
        fork_surface=reader.surface(fork_id),
        transcript=reader.transcript(session_id),
        audit=reader.audit(session_id),
    )


def wait_projected(reader: Reader, last_seqs: dict[str, int], timeout_s: float) -> None:
    """Until every projection applied each session up to its last seq; a blocked session is
    an error naming the projection, seq and reason rather than a silent wait."""
    from cli.checks import blocked_message
    from projectors.errors import SessionBlockedError

    deadline = time.monotonic() + timeout_s
    pending = {(p, s) for s in last_seqs for p in ("surface", "transcript", "audit")}
    while pending:
        for projection, session_id in sorted(pending):
            blocked = reader.blocked(projection, session_id)
            if blocked is not None:
                raise SessionBlockedError(blocked_message(projection, session_id, blocked))
            if _applied(reader, projection, session_id) >= last_seqs[session_id]:
                pending.discard((projection, session_id))
        if not pending:
            return
        if time.monotonic() > deadline:
            names = ", ".join(sorted({p for p, _ in pending}))
            raise SessionBlockedError(
                f"the {names} projector(s) did not catch up within {timeout_s:g}s; are they "
                "running? `dsh status` shows them and their logs",
                code="PROJECTION_LAG",
            )
        time.sleep(0.05)


def _applied(reader: Reader, projection: str, session_id: str) -> int:
    raw = reader.client.hget(reader.keys.meta(projection, session_id), "applied")
    return -1 if raw is None else int(raw)


# -- printing ---------------------------------------------------------------------------------


def _clip(s: str, width: int) -> str:
    s = " ".join(s.split())
    return s if len(s) <= width else s[: width - 1] + "…"


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
            parts.append(f"← {inner}")
        else:
            parts.append(f"[{kind}]")
    return _clip(" ".join(parts), width)


def _event_message(event: dict[str, Any]) -> Any:
    data = event.get("data") or {}
    return data if event["type"] == "user/message" else data.get("message")


def transcript_line(event: dict[str, Any]) -> str:
    t, data = event["type"], event.get("data") or {}
    message = _event_message(event)
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


def render(run: DemoRun) -> str:
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


# -- the command ------------------------------------------------------------------------------


def _shown(path: Path) -> str:
    """A path as a user would type it: relative when it is under the current directory."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _demo(args: argparse.Namespace) -> int:
    import redis

    from cli.checks import require_kafka
    from producers import SessionClient
    from projectors.keys import Keys
    from projectors.read_api import Reader
    from projectors.settings import ProjectorSettings
    from servicekit.redis_clients import redis_client
    from servicekit.settings import KafkaSettings, RedisSettings

    def say(line: str) -> None:
        if not args.json:
            print(line, flush=True)

    where: dict[str, Any] = {}
    if args.no_up:
        kafka = KafkaSettings()
        store: redis.Redis | redis.RedisCluster = redis_client(RedisSettings())  # or a cluster
    else:
        from deploy.local.stack import LocalStack

        stack = LocalStack()
        say(
            f"starting the local stack: Kafka, Redis, the writer and three projectors "
            f"(state in {stack.settings.state_dir}) ..."
        )
        started = time.monotonic()
        stack.up(services=True)
        stack.services.wait_writer_serving(stack.settings.partitions, args.timeout)
        say(f"  ready in {time.monotonic() - started:.1f}s")
        kafka = stack.kafka_settings()
        store = redis.Redis.from_url(stack.settings.redis_url())
        where = {
            "metrics": {
                s.name: s.metrics_url() for s in stack.services.all if s.metrics_url() is not None
            },
            "logs": {
                **{s.name: _shown(s.log_file) for s in stack.services.all},
                "kafka": _shown(stack.kafka.nodes[0].home / "logs" / "server.log"),
                "redis": _shown(stack.redis.process.log_file),
            },
        }
    require_kafka(kafka, ("commands", "events", "replies"), args.timeout)
    reader = Reader(store, Keys(ProjectorSettings().key_prefix))
    with SessionClient(settings=kafka, timeout=args.timeout) as client:
        run = run_demo(client, reader, timeout_s=args.timeout, progress=say)
    run.where = where
    if args.json:
        print(json.dumps(run.to_json()))
    else:
        print(render(run))
    return 0


if __name__ == "__main__":  # pragma: no cover - `python -m cli.demo` for a quick look
    from cli import main

    sys.exit(main(["demo", *sys.argv[1:]]))
