"""The `dsh` command.

This is the one module of the ``dsh`` package that wires services together. Each command
imports what it needs inside its handler, so ``import dsh`` stays pure and fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dsh.cli import io_commands, projector_commands, stack_commands, writer_commands
from dsh.errors import SessionError

DESCRIPTION = """\
dsh-pipeline: an append-only, validated event log for AI-agent sessions on Kafka.

Local stack (real Apache Kafka in KRaft mode + Redis, state under .state/):
  dsh up        start it (downloads Kafka's jars and installs redis-server once)
  dsh status    show what runs where and whether it is healthy
  dsh down      stop it
  dsh demo      bring the stack up and report it healthy

Settings come from the environment: DSH_LOCAL_* for the local stack (ports, state dir,
broker count), DSH_KAFKA_* and DSH_REDIS_* for how services connect.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsh", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    stack_commands.register(commands)
    projector_commands.register(commands)
    writer_commands.register(commands)
    io_commands.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.handler(args)
    except SessionError as exc:
        print(f"dsh: error [{exc.code}]: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return result
