"""The `dsh` command.

This is the one module of the ``dsh`` package that wires services together. Each command
imports what it needs inside its handler, so ``import dsh`` stays pure and fast.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from cli import (
    checks,
    demo,
    io_commands,
    projector_commands,
    serve_commands,
    settings_reference,
    stack_commands,
    writer_commands,
)
from dsh.errors import SessionError

DESCRIPTION = """\
dsh-pipeline: an append-only, validated event log for AI-agent sessions on Kafka.
Every runtime fact is an event in a per-session log; what the model sees next (the surface),
what a human sees (the transcript) and what an auditor asks (provenance) are projections.

Local stack (real Apache Kafka in KRaft mode, Redis, and the services; state under .state/):
  dsh demo      start everything and run a scripted agent session through it
  dsh up        start Kafka, Redis, the writer and the three projectors (--no-services:
                only Kafka and Redis); installs Kafka's jars and redis-server once
  dsh status    what runs where (pids, ports, /metrics, logs) and whether it is healthy
  dsh down      stop all of it; leaves no processes
  dsh setup     only install what the stack runs on
  dsh kafka TOOL ...  one of Kafka's own tools (consumer-groups, topics, configs, …)

Services (run until SIGTERM; `dsh up` starts them for you):
  dsh writer                         validate commands, publish events exactly once
  dsh project surface|transcript|audit   build a read model in Redis
  dsh serve                          the HTTP API: append, read, follow (docs/http-api.md)

Reading sessions (every read command takes --json):
  dsh show surface|transcript|audit SESSION   one read model
  dsh tail SESSION       the live human transcript (Ctrl-C to stop)
  dsh verify SESSION     rebuild from the events topic, compare with all three read models
  dsh replay [SESSION…]  rebuild read models from the events topic

Moving sessions in and out:
  dsh import FILE.jsonl  publish a session file (v0..v3) through the writer
  dsh export DIR         the events topic as date-partitioned Avro or Parquet files
                         (incremental)
  dsh export --format jsonl SESSION   one session as a session file DSH reads

Settings come from the environment: DSH_LOCAL_* for the local stack (ports, state dir,
broker count), DSH_KAFKA_* and DSH_REDIS_* for how services and commands connect,
DSH_WRITER_*, DSH_PROJECTOR_*, DSH_SERVE_* and DSH_LOG_* for the services; `dsh settings`
lists them all.
Errors print as `dsh: error [CODE]: message` and exit 1.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsh", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # Not required: `dsh` alone prints the help, and `dsh --bogus` names the flag rather than
    # only saying that a command is missing.
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo.register(commands)
    stack_commands.register(commands)
    projector_commands.register(commands)
    writer_commands.register(commands)
    serve_commands.register(commands)
    io_commands.register(commands)
    settings_reference.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        if sys.argv[1:] if argv is None else argv:
            parser.error("no COMMAND given; `dsh` alone lists them")
        parser.print_help()
        return 0
    try:
        status = _run(args)
        sys.stdout.flush()  # here, where a reader that went away is handled, not at exit
        return status
    except BrokenPipeError:
        # The reader went away (`dsh show … | head`): that ends the command, quietly, with
        # the status a process killed by SIGPIPE has. stdout is pointed at /dev/null so the
        # interpreter's own flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _run(args: argparse.Namespace) -> int:
    try:
        from servicekit.settings import configure_codec
        from servicekit.stacks import dump_stacks_on_signal

        # From the start, not once a service is up: a process that hangs while it starts
        # (connecting, loading scripts, joining its group) can be looked into too.
        dump_stacks_on_signal()
        configure_codec()
        result: int = args.handler(args)
    except SessionError as exc:
        print(f"dsh: error [{exc.code}]: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # Infrastructure failures that escape a command (e.g. Redis down under `dsh show`)
        # become the error naming the fix; anything else is a bug and keeps its traceback.
        translated = checks.translate(exc)
        if translated is None:
            raise
        print(f"dsh: error [{translated.code}]: {translated.message}", file=sys.stderr)
        return 1
    return result
