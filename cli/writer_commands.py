"""`dsh writer`: run the single-writer service until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    writer = commands.add_parser(
        "writer",
        help="run the single-writer service (validates commands, publishes events exactly once)",
        description="Settings: DSH_KAFKA_* (how to reach Kafka), DSH_WRITER_* (group, "
        "batching, limits, snapshots, metrics port, projections) and DSH_LOG_* (level; format "
        "json, logfmt or text; lines on stderr).",
    )
    writer.add_argument(
        "--log-level", default=None, help="DEBUG, INFO, WARNING or ERROR (default DSH_LOG_LEVEL)"
    )
    writer.set_defaults(handler=_writer)


def _writer(args: argparse.Namespace) -> int:
    from cli.endpoints import kafka_settings
    from cli.wiring import serve_writer
    from servicekit.logs import configure_logging

    # Before the service starts: its own logging.basicConfig is then a no-op.
    settings = configure_logging("writer", args.log_level)
    return serve_writer(kafka_settings(), settings.level)
