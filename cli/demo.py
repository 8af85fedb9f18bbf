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
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dsh
from cli import demo_script
from cli.arguments import seconds
from cli.render import render_demo

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
        type=seconds,
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
    """Until every projection applied each session up to its last seq: read-your-writes reads
    (:class:`~projectors.views.Views`), so a blocked session or a projector that does not keep
    up is an error naming the projection, seq and reason rather than a silent wait."""
    from projectors.views import Views

    views = Views(reader.client, reader.keys)
    deadline = time.monotonic() + timeout_s
    for session_id, last in last_seqs.items():
        for projection in ("surface", "transcript", "audit"):
            left = max(0.0, deadline - time.monotonic())
            getattr(views, projection)(session_id, at_least=last, timeout_s=left)


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
    from cli.endpoints import kafka_settings, redis_settings
    from producers import SessionClient
    from projectors.keys import Keys
    from projectors.read_api import Reader
    from projectors.settings import ProjectorSettings
    from servicekit.redis_clients import redis_client

    def say(line: str) -> None:
        if not args.json:
            print(line, flush=True)

    where: dict[str, Any] = {}
    if args.no_up:
        kafka = kafka_settings()
        store: redis.Redis | redis.RedisCluster = redis_client(redis_settings())  # or a cluster
    else:
        from deploy.local.record import resolved_settings
        from deploy.local.stack import LocalStack

        stack = LocalStack(resolved_settings())
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
        print(render_demo(run))
    return 0


if __name__ == "__main__":  # pragma: no cover - `python -m cli.demo` for a quick look
    from cli import main

    sys.exit(main(["demo", *sys.argv[1:]]))
