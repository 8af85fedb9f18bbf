"""`dsh import` and `dsh export`: session files in, Avro or Parquet files out.

Handlers import the services lazily: `import dsh` stays free of Kafka and the codec.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli.arguments import seconds
from cli.progress import for_a_person
from servicekit.progress import Progress

IMPORT_HELP = """\
Publish a session file (JSON Lines, format v0..v3; older versions are migrated to v3) as a
session, through the writer: every event is validated exactly like a live append. The file is
checked locally first, so a bad line or an invalid event fails before anything is published.

The session id is the file's own unless --session-id is given. If that session already exists:
when its events are a prefix of the file's (an interrupted import), the import resumes after
them; when they are all of them, nothing is appended; otherwise the import is refused
(SESSION_EXISTS) -- import under another id with --session-id NEW.

The session's turn-invariants mode is the file's: "invariants": false in its header (as `dsh
export --format jsonl` writes for a bare session) imports it without them; otherwise they are
on. --invariants on|off chooses. DSH itself creates sessions without invariants unless asked
and does not record it: a DSH file that breaks the turn rules is refused naming the seq, and
imports with --invariants off. The mode is fixed when the session is created.

Each event is also checked against the writer's size limit (DSH_WRITER_MAX_EVENT_BYTES).
Event times are assigned by the writer at import; the file's times are not preserved.
A writer must be running: the local stack runs one (`dsh up`), or start `dsh writer`."""

EXPORT_HELP = """\
Write the events topic (read_committed, every partition) to files by date, for analytics
engines: DIR/date=YYYY-MM-DD/part-<partition>-<firstOffset>-<lastOffset>.<ext> (hive style).
DIR/_offsets.json is the checkpoint: a re-run exports only records after it, and a crashed run
never leaves duplicates behind. --from-beginning re-exports everything and replaces the
directory's files. A directory holds one format: another one's export is refused
(MANIFEST_FORMAT).

--format avro (default): Avro object container files with the wire SessionEvent schema
  embedded, records copied as they are on the topic (its data type is recursive: engines such
  as DuckDB, Polars and Spark cannot read it; fastavro and Java Avro can).
--format parquet: one row per event: the envelope typed (time a UTC timestamp), data as JSON
  text, typed columns pulled out of data (turn, step, role, provider, model, usage tokens,
  tool name and call id, error code, end reason) and lineage (inherited: a fork's copy of its
  parent's event; partition, offset). Needs pyarrow: pip install 'dsh-pipeline[analytics]'.
--format avro-flat: the same rows as Avro with no recursive type.
Columns: docs/operations.md#export. --codec: deflate|snappy|null for Avro (default deflate),
zstd|snappy|null for Parquet (default zstd).

Memory: DSH_EXPORT_BUFFER_BYTES (default 128 MiB) bounds the rows waiting for their row
group or block, across all partitions' files, and the records the Kafka consumer prefetched:
the consumer gets 1/8 (or 2 MiB per broker leading the topic's partitions plus 2 MiB, if more),
the rows the rest (at least half); past their share, the file holding the most writes them
out, a smaller row group or block. From 4 MiB per leader plus 4 MiB up (8 MiB with one) the two
stay within the setting; docs/operations.md#export. --json reports the most the rows held as
bufferedPeakBytes.

--format jsonl SESSION writes one session, as committed in the events topic, as a session
file DSH reads (a v3 header and events): SESSION.jsonl, or --output FILE."""


def register(commands: Any) -> None:
    imp = commands.add_parser(
        "import",
        help="publish a session file (v0..v3) as a session through the writer",
        description=IMPORT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    imp.add_argument("file", metavar="FILE.jsonl")
    imp.add_argument("--session-id", metavar="ID", help="default: the id in the file's header")
    imp.add_argument(
        "--invariants",
        choices=("on", "off"),
        default=None,
        help="the session's turn-invariants mode (default: the file's header, else on)",
    )
    imp.add_argument("--json", action="store_true", help="print the result as JSON")
    imp.add_argument(
        "--timeout",
        type=seconds,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for the broker before giving up (default 10)",
    )
    imp.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    imp.add_argument(
        "--projections",
        metavar="SPEC",
        default=None,
        help="message-projection interpreters the writer has, 'type=module:function,...' "
        "(default: the reference image/offload one, as the local stack's writer)",
    )
    imp.set_defaults(handler=_import)

    exp = commands.add_parser(
        "export",
        help="write the events topic to date-partitioned Avro or Parquet files (incremental)",
        description=EXPORT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    exp.add_argument("directory", metavar="DIR|SESSION", help="DIR; with --format jsonl, SESSION")
    exp.add_argument(
        "--format",
        choices=("avro", "avro-flat", "parquet", "jsonl"),
        default="avro",
        help="avro (default; the wire schema), avro-flat or parquet (one flat row per event): "
        "the whole topic into DIR; jsonl: one session as a session file",
    )
    exp.add_argument("--output", metavar="FILE", help="with --format jsonl (default SESSION.jsonl)")
    exp.add_argument(
        "--from-beginning",
        action="store_true",
        help="ignore the checkpoint: export every record again, replacing DIR's files",
    )
    exp.add_argument(
        "--codec",
        choices=("deflate", "snappy", "zstd", "null"),
        default=None,
        help="compression: Avro deflate (default), snappy (needs cramjam) or null; Parquet "
        "zstd (default), snappy or null",
    )
    exp.add_argument("--json", action="store_true", help="print the result as JSON")
    exp.add_argument(
        "--timeout",
        type=seconds,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for the broker before giving up (default 10)",
    )
    exp.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    exp.set_defaults(handler=_export)


def _progress(args: argparse.Namespace, unit: str) -> Progress | None:
    return for_a_person(unit, not (args.no_progress or args.json))


def _kafka() -> Any:
    from cli.endpoints import kafka_settings

    return kafka_settings()


def _import(args: argparse.Namespace) -> int:
    from cli.endpoints import writer_hint
    from interpreters import OFFLOAD_SPEC
    from producers.importer import import_file
    from producers.writer.settings import WriterSettings
    from servicekit.interpreters import parse_interpreters

    result = import_file(
        args.file,
        kafka=_kafka(),
        session_id=args.session_id,
        connect_timeout=args.timeout,
        progress=_progress(args, "events"),
        projections=parse_interpreters(
            OFFLOAD_SPEC if args.projections is None else args.projections
        ),
        writer_hint=writer_hint(),
        max_event_bytes=WriterSettings().max_event_bytes,  # the pipeline's writer's limit
        invariants=None if args.invariants is None else args.invariants == "on",
    )
    if args.json:
        print(json.dumps({"file": args.file, **result.to_json()}))
        return 0
    migrated = f", migrated from v{result.source_version}" if result.source_version != 3 else ""
    resumed = (
        f" ({result.already_present} were already there: resumed)" if result.already_present else ""
    )
    bare = "" if result.invariants else " (invariants off)"
    print(
        f"imported {args.file}{migrated} as session {result.session_id}{bare}: "
        f"{result.published} events published, final seq {result.final_seq}{resumed} "
        f"in {result.seconds:.2f}s"
    )
    return 0


def _export(args: argparse.Namespace) -> int:
    _refuse_ignored_options(args)
    if args.format == "jsonl":
        return _export_session(args)
    from projectors.export import export

    result = export(
        args.directory,
        kafka=_kafka(),
        from_beginning=args.from_beginning,
        format=args.format,
        codec=args.codec,
        connect_timeout=args.timeout,
        progress=_progress(args, "records"),
    )
    summary = result.to_json()
    if args.json:
        print(json.dumps(summary))
        return 0
    for p, lost in sorted(result.skipped.items()):
        print(
            f"warning: partition {p}: {lost} records were deleted by retention before export",
            file=sys.stderr,
        )
    if not result.records:
        print(f"{args.directory}: up to date with {result.topic}, nothing new to export")
        return 0
    print(
        f"exported {result.records} records of {result.topic} into {len(result.files)} file(s) "
        f"under {args.directory} ({result.bytes:,} bytes) in {result.seconds:.2f}s "
        f"({summary['recordsPerSecond']:,} records/s)"
    )
    for name in result.files:
        print(f"  {name}")
    return 0


def _refuse_ignored_options(args: argparse.Namespace) -> None:
    """An option the chosen format has no use for is a mistake, not a no-op: `--output F`
    without --format jsonl exported the whole topic into DIR and never wrote F."""
    from projectors.export import ExportFormatError

    session = args.format == "jsonl"
    ignored = [
        option
        for option, given, used in (
            ("--output", args.output is not None, session),
            ("--codec", args.codec is not None, not session),
            ("--from-beginning", args.from_beginning, not session),
        )
        if given and not used
    ]
    if ignored:
        scope = "only without --format jsonl" if session else "only with --format jsonl"
        raise ExportFormatError(
            f"{', '.join(ignored)}: {'applies' if len(ignored) == 1 else 'apply'} {scope}",
            code="EXPORT_OPTION",
        )


def _export_session(args: argparse.Namespace) -> int:
    from projectors.export import export_session

    session_id = args.directory
    path = args.output or f"{session_id}.jsonl"
    count = export_session(
        session_id,
        path,
        kafka=_kafka(),
        progress=_progress(args, "records"),
        connect_timeout=args.timeout,
    )
    if args.json:
        print(json.dumps({"sessionId": session_id, "file": path, "events": count}))
    else:
        print(f"exported session {session_id} ({count} events) to {path}")
    return 0
