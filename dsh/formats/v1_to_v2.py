"""v1 → v2: fold ``assistant/chunk`` events into the stream of the event they belong to.

A v1 ``assistant/message`` cites its chunks in ``sourceEventSeqs``; v2 keeps the deltas in the
message's ``stream`` and forbids the citation. Chunks no message claims were a failed or
abandoned attempt: each run of them becomes one ``assistant/attempt``.

Choices the contract leaves open, made so nothing is guessed:

- A stream lists the chunks in log order (the order they were delivered), whatever order the
  message cited them in.
- An attempt is a maximal run of consecutive unclaimed chunks of one turn and step; any other
  event ends it (a retry always logs something, e.g. its ``request/header``). The attempt takes
  the place and time of the run's last chunk, when the attempt was over.
- A message citing anything but an earlier chunk of its own turn and step, a chunk claimed
  twice, and a reference from any other event to a chunk cannot be expressed in v2: FormatError.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dsh.formats.log import Entry, data_object, renumber, untranslatable
from dsh.formats.wire import is_int

VERSION = 1
CHUNK, MESSAGE, ATTEMPT = "assistant/chunk", "assistant/message", "assistant/attempt"


def _turn_step(entry: Entry, data: dict[str, Any]) -> tuple[int, int]:
    turn, step = data.get("turn"), data.get("step")
    if not (is_int(turn) and is_int(step)):
        raise untranslatable(entry, VERSION, f"{entry.event['type']} needs int turn and step")
    return turn, step


def _chunks(entries: Sequence[Entry]) -> dict[int, tuple[Entry, tuple[int, int], Any]]:
    found = {}
    for entry in entries:
        if entry.event["type"] == CHUNK:
            data = data_object(entry, VERSION)
            if "chunk" not in data:
                raise untranslatable(entry, VERSION, "assistant/chunk data has no chunk")
            found[entry.event["seq"]] = (entry, _turn_step(entry, data), data["chunk"])
    return found


def _claims(
    entries: Sequence[Entry], chunks: dict[int, tuple[Entry, tuple[int, int], Any]]
) -> dict[int, list[int]]:
    """Message seq → the chunk seqs it claims, in log order."""
    claims: dict[int, list[int]] = {}
    owner: dict[int, int] = {}
    for entry in entries:
        event = entry.event
        if event["type"] != MESSAGE or "sourceEventSeqs" not in event:
            continue
        seq, data = event["seq"], data_object(entry, VERSION)
        where = _turn_step(entry, data)
        if "stream" in data:
            raise untranslatable(entry, VERSION, "assistant/message has both a stream and chunks")
        cited = event["sourceEventSeqs"]
        if not isinstance(cited, list):
            raise untranslatable(entry, VERSION, "sourceEventSeqs must be a list of seqs")
        for chunk_seq in cited:
            if not (is_int(chunk_seq) and chunk_seq in chunks and chunk_seq < seq):
                raise untranslatable(
                    entry,
                    VERSION,
                    f"assistant/message cites seq {chunk_seq!r}, not an earlier "
                    "assistant/chunk; only chunks can be folded into its stream",
                )
            if chunk_seq in owner:
                raise untranslatable(
                    entry,
                    VERSION,
                    f"assistant/chunk {chunk_seq} is already claimed by seq {owner[chunk_seq]}",
                )
            if chunks[chunk_seq][1] != where:
                raise untranslatable(
                    entry,
                    VERSION,
                    f"assistant/chunk {chunk_seq} belongs to turn/step "
                    f"{chunks[chunk_seq][1]}, the message to {where}",
                )
            owner[chunk_seq] = seq
        claims[seq] = sorted(cited)
    return claims


def _attempt(run: list[Entry], turn_step: tuple[int, int], stream: list[Any]) -> Entry:
    first, last = run[0], run[-1]
    turn, step = turn_step
    event = {
        "type": ATTEMPT,
        "seq": None,
        "time": last.event.get("time"),
        "data": {"turn": turn, "step": step, "stream": stream},
    }
    return Entry(event, first.line, inserted=True)


def migrate(entries: Sequence[Entry]) -> list[Entry]:
    chunks = _chunks(entries)
    claims = _claims(entries, chunks)
    claimed = {c for seqs in claims.values() for c in seqs}
    out: list[Entry] = []
    run: list[Entry] = []
    run_key: tuple[int, int] | None = None
    run_stream: list[Any] = []

    def end_run() -> None:
        nonlocal run, run_key, run_stream
        if run and run_key is not None:
            out.append(_attempt(run, run_key, run_stream))
        run, run_key, run_stream = [], None, []

    for entry in entries:
        event = entry.event
        seq = event["seq"]
        if seq in chunks and seq not in claimed:
            _, key, delta = chunks[seq]
            if key != run_key:
                end_run()
                run_key = key
            run.append(entry)
            run_stream.append(delta)
            continue
        end_run()
        if seq in claimed:
            continue
        if event["type"] == MESSAGE:
            data = dict(data_object(entry, VERSION))
            if seq in claims:
                data["stream"] = [chunks[c][2] for c in claims[seq]]
            else:
                data.setdefault("stream", [])
            event = {k: v for k, v in event.items() if k != "sourceEventSeqs"}
            event["data"] = data
            entry = Entry(event, entry.line, entry.inserted)
        out.append(entry)
    end_run()
    return renumber(out, VERSION, ("start", "end"))
