"""`dsh writer`: run the single-writer service until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    writer = commands.add_parser(
        "writer",
        help="run the single-writer service (validates commands, publishes events exactly once)",
        description="Settings: DSH_KAFKA_* (how to reach Kafka) and DSH_WRITER_* (group, "
        "batching, limits, snapshots, metrics port).",
    )
    writer.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    writer.set_defaults(handler=_writer)


def _writer(args: argparse.Namespace) -> int:
    # The package, not a submodule: the CLI's one sanctioned edge into a service.
    import producers

    return producers.serve_writer(args.log_level)
