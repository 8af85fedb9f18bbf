"""`dsh project`, `dsh show`, `dsh tail`, `dsh verify`, `dsh replay`: the projectors and their
read models.

Handlers import Kafka, Redis and the services lazily, so `dsh --help` starts quickly.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli.arguments import lines, seconds
from cli.render import event_summary, message_line, seq_list
from projectors.catalog import PROJECTIONS

_TIMEOUT_HELP = "how long to wait for the broker before giving up (default 10)"


def register(commands: Any) -> None:
    project = commands.add_parser(
        "project", help="run a projector: events topic → Redis read model (until SIGTERM)"
    )
    project.add_argument("projection", choices=PROJECTIONS)
    project.add_argument(
        "--log-level", default=None, help="DEBUG, INFO, WARNING or ERROR (default DSH_LOG_LEVEL)"
    )
    project.set_defaults(handler=_project)

    show = commands.add_parser("show", help="print one session's read model from Redis")
    show.add_argument("projection", choices=PROJECTIONS)
    show.add_argument("session")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.add_argument(
        "--follow", action="store_true", help="transcript: keep printing new entries (XREAD BLOCK)"
    )
    show.set_defaults(handler=_show)

    tail = commands.add_parser(
        "tail",
        help="follow one session's human transcript live (Ctrl-C to stop)",
        description="Print the last entries of the session's transcript read model, then each "
        "new one as the transcript projector applies it (Redis XREAD BLOCK). A session that is "
        "not there yet is waited for; a blocked one is an error saying why.",
    )
    tail.add_argument("session")
    tail.add_argument(
        "-n",
        "--lines",
        type=lines,
        default=20,
        metavar="N",
        help="entries to print before following (default 20; -1: all)",
    )
    tail.add_argument("--json", action="store_true", help="one JSON object per line")
    tail.set_defaults(handler=_tail)

    verify = commands.add_parser(
        "verify",
        help="restore a session from the events topic and compare it with all three read models",
    )
    verify.add_argument("session")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument(
        "--timeout", type=seconds, default=10.0, metavar="SECONDS", help=_TIMEOUT_HELP
    )
    verify.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    verify.set_defaults(handler=_verify)

    replay = commands.add_parser(
        "replay",
        help="rebuild read models from the events topic (named sessions, or all), each session "
        "switched atomically",
    )
    replay.add_argument("sessions", nargs="*", metavar="SESSION", help="default: every session")
    replay.add_argument(
        "--projection", choices=(*PROJECTIONS, "all"), default="all", help="default: all three"
    )
    replay.add_argument("--json", action="store_true", help="print the result as JSON")
    replay.add_argument(
        "--timeout", type=seconds, default=10.0, metavar="SECONDS", help=_TIMEOUT_HELP
    )
    replay.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    replay.set_defaults(handler=_replay)


def _services() -> Any:
    from cli import wiring

    return wiring


def _project(args: argparse.Namespace) -> int:
    from servicekit.logs import configure_logging

    # Before the service starts: its own logging.basicConfig is then a no-op.
    configure_logging(f"project-{args.projection}", args.log_level)
    from cli.endpoints import kafka_settings, redis_settings

    _services().serve_projector(args.projection, kafka_settings(), redis_settings())
    return 0


def _reader() -> Any:
    return _services().reader_from_env()


def _show(args: argparse.Namespace) -> int:
    reader = _reader()
    if args.projection == "transcript" and args.follow:
        return _follow(reader, args.session, -1, args.json)
    from projectors.errors import SessionBlockedError, SessionRebuildingError
    from projectors.views import Views

    views = Views(reader.client, reader.keys, timeout_s=0)
    # An unknown id fails before anything is printed; a blocked session or one under rebuild
    # is printed as it stands (up to the block, or maybe stale) and the exit status says why.
    stopped: SessionBlockedError | SessionRebuildingError | None = None
    try:
        view = getattr(views, args.projection)(args.session)
    except (SessionBlockedError, SessionRebuildingError) as exc:
        view, stopped = exc.view, exc
    if args.projection == "surface":
        if args.json:
            print(json.dumps(view.to_json(), indent=2))
        else:
            _print_surface(view)
    elif args.projection == "transcript":
        if args.json:
            print(json.dumps([e.event | {"kind": e.kind} for e in view.entries], indent=2))
        else:
            for e in view.entries:
                _print_entry(e, False)
    elif args.json:
        print(json.dumps(view.to_json(), indent=2))
    else:
        _print_audit(view)
    if stopped is not None:
        raise stopped
    return 0


def _print_entry(e: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(e.event | {"kind": e.kind}), flush=True)
    else:
        print(f"{e.seq:>6}  {e.type:<20} {event_summary(e.event)}", flush=True)


def _tail(args: argparse.Namespace) -> int:
    reader = _reader()
    entries = reader.transcript(args.session)
    shown = (
        entries if args.lines < 0 else entries[len(entries) - args.lines :] if args.lines else []
    )
    for e in shown:
        _print_entry(e, args.json)
    if not entries and reader.blocked("transcript", args.session) is None:
        print(
            f"waiting for session {args.session}: its transcript has no entry yet (Ctrl-C to stop)",
            file=sys.stderr,
            flush=True,
        )
    return _follow(reader, args.session, entries[-1].seq if entries else -1, args.json)


def _follow(reader: Any, session_id: str, after: int, as_json: bool) -> int:
    """New transcript entries after seq ``after`` until Ctrl-C; a blocked session stops it
    with the reason (no entry would ever come)."""
    from projectors.views import follow

    for e in follow(reader, session_id, after):
        if e is not None:
            _print_entry(e, as_json)
    return 0  # follow() never ends but by an error


def _blocked_line(blocked: dict[str, Any]) -> str:
    return f"BLOCKED at seq {blocked['seq']}: [{blocked['code']}] {blocked['message']}"


def _print_surface(view: Any) -> None:
    print(
        f"applied seq {view.applied}; generations replace={view.replace_generation} "
        f"content={view.content_generation}; {seq_list(view.nodes)}"
    )
    if view.blocked:
        print(_blocked_line(view.blocked))
    for message in view.messages:
        print(f"  {message['role']:<9} {message_line(message, 100)}")


def _print_audit(audit: Any) -> None:
    print(f"applied seq {audit.applied}")
    if audit.blocked:
        print(_blocked_line(audit.blocked))
    for seq, record in sorted(audit.events.items()):
        notes = []
        if "sourceEventSeqs" in record:
            notes.append(f"cites {record['sourceEventSeqs']}")
        if "shadowed" in record:
            notes.append(f"replaced {record['shadowed']}")
        if seq in audit.shadowed_by:
            notes.append(f"replaced by {audit.shadowed_by[seq]}")
        if audit.cited_by.get(seq):
            notes.append(f"cited by {audit.cited_by[seq]}")
        if "error" in record:
            notes.append(f"error {json.dumps(record['error'])}")
        print(f"{seq:>6}  {record['type']:<20} {'; '.join(notes)}")


def _verify(args: argparse.Namespace) -> int:
    from cli.checks import default_interpreters, require_kafka
    from cli.endpoints import kafka_settings

    default_interpreters()
    kafka = kafka_settings()
    require_kafka(kafka, ("events",), args.timeout)
    from cli.progress import for_a_person

    progress = for_a_person("records of its partition", not (args.json or args.no_progress))
    report = _services().verify_from_env(args.session, progress)
    if report.events == 0 and report.ok:
        from projectors.errors import SessionUnknownError

        raise SessionUnknownError(
            f"the events topic {kafka.topic('events')} has no event of session "
            f"{args.session}, and no read model has any: check the id and DSH_KAFKA_TOPIC_PREFIX"
        )
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif report.ok:
        print(
            f"session {args.session}: {report.events} events; surface, transcript and audit "
            "match the core"
        )
    else:
        print(f"session {args.session}: {len(report.differences)} difference(s)", file=sys.stderr)
        for line in report.differences:
            print(line, file=sys.stderr)
    return 0 if report.ok else 1


def _replay(args: argparse.Namespace) -> int:
    from cli.checks import default_interpreters, require_kafka
    from cli.endpoints import kafka_settings

    default_interpreters()
    require_kafka(kafka_settings(), ("events",), args.timeout)
    projections = PROJECTIONS if args.projection == "all" else (args.projection,)
    from cli.progress import for_a_person

    progress = for_a_person("records", not (args.json or args.no_progress))
    result = _services().replay_from_env(projections, args.sessions, progress)
    summary = {
        "sessions": result.sessions,
        "records": result.records,
        "applied": result.applied,
        "seconds": round(result.seconds, 3),
        "recordsPerSecond": round(result.records_per_second),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"replayed {summary['records']} records of {summary['sessions']} sessions into "
            f"{', '.join(projections)} in {summary['seconds']}s "
            f"({summary['recordsPerSecond']:,} records/s)"
        )
    return 0
