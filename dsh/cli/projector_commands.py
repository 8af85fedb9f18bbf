"""`dsh project`, `dsh show`, `dsh verify`, `dsh replay`: the projectors and their read models.

Handlers import the services lazily: `import dsh` stays free of Kafka and Redis.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

PROJECTIONS = ("surface", "transcript", "audit")


def register(commands: Any) -> None:
    project = commands.add_parser(
        "project", help="run a projector: events topic → Redis read model (until SIGTERM)"
    )
    project.add_argument("projection", choices=PROJECTIONS)
    project.set_defaults(handler=_project)

    show = commands.add_parser("show", help="print one session's read model from Redis")
    show.add_argument("projection", choices=PROJECTIONS)
    show.add_argument("session")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.add_argument(
        "--follow", action="store_true", help="transcript: keep printing new entries (XREAD BLOCK)"
    )
    show.set_defaults(handler=_show)

    verify = commands.add_parser(
        "verify",
        help="restore a session from the events topic and compare it with all three read models",
    )
    verify.add_argument("session")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
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
    replay.set_defaults(handler=_replay)


def _services() -> Any:
    import projectors

    return projectors.service


def _project(args: argparse.Namespace) -> int:
    _services().run(args.projection)
    return 0


def _reader() -> Any:
    return _services().reader_from_env()


def _show(args: argparse.Namespace) -> int:
    reader = _reader()
    if args.projection == "surface":
        view = reader.surface(args.session)
        if args.json:
            print(json.dumps(view.to_json(), indent=2))
        else:
            _print_surface(view)
    elif args.projection == "transcript":
        entries = reader.tail(args.session) if args.follow else reader.transcript(args.session)
        if args.json and not args.follow:
            print(json.dumps([e.event | {"kind": e.kind} for e in entries], indent=2))
            return 0
        for e in entries:
            if args.json:
                print(json.dumps(e.event | {"kind": e.kind}), flush=True)
            else:
                print(f"{e.seq:>6}  {e.type:<20} {_summary(e.event)}", flush=True)
    else:
        audit = reader.audit(args.session)
        if args.json:
            print(json.dumps(audit.to_json(), indent=2))
        else:
            _print_audit(audit)
    return 0


def _summary(event: dict[str, Any]) -> str:
    data = event.get("data")
    message = data if event["type"] == "user/message" else (data or {}).get("message")
    if isinstance(message, dict):
        parts = []
        for block in message.get("content", []):
            kind = block.get("type")
            if kind == "text":
                parts.append(block["text"])
            elif kind == "tool-call":
                parts.append(f"→ {block['name']}({block['arguments']})")
            elif kind == "tool-result":
                parts.append(
                    f"← result {block['toolCallId']}" + (" (error)" if block.get("isError") else "")
                )
            else:
                parts.append(f"[{kind}]")
        return " ".join(parts)[:100]
    return json.dumps(data)[:100]


def _blocked_line(blocked: dict[str, Any]) -> str:
    return f"BLOCKED at seq {blocked['seq']}: [{blocked['code']}] {blocked['message']}"


def _print_surface(view: Any) -> None:
    print(
        f"applied seq {view.applied}; generations replace={view.replace_generation} "
        f"content={view.content_generation}; nodes {view.nodes}"
    )
    if view.blocked:
        print(_blocked_line(view.blocked))
    for message in view.messages:
        print(f"  {message['role']:<9} {_summary({'type': 'user/message', 'data': message})}")


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
    report = _services().verify_from_env(args.session)
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
    projections = PROJECTIONS if args.projection == "all" else (args.projection,)
    result = _services().replay_from_env(projections, args.sessions, not args.json)
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
            f"\nreplayed {summary['records']} records of {summary['sessions']} sessions into "
            f"{', '.join(projections)} in {summary['seconds']}s "
            f"({summary['recordsPerSecond']:,} records/s)"
        )
    return 0
