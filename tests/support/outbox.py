"""An outbox that keeps what the writer's snapshot code puts into a transaction, for unit
tests of it without Kafka (``producers.writer.journal.Outbox``'s ``put``)."""

from __future__ import annotations

from typing import Any

from producers.writer.journal import SNAPSHOT
from producers.writer.restore import CHECKPOINT_KEY
from schemas import WriterSnapshot, decode_snapshot


class SnapshotOutbox:
    def __init__(self) -> None:
        self.snapshots: list[tuple[bytes | None, bytes | None]] = []

    def put(self, serves: int, topic: str, value: bytes | None, key: bytes | None,
            partition: int, kind: Any, request_id: bytes | None = None) -> None:  # fmt: skip
        if kind == SNAPSHOT:
            self.snapshots.append((key, value))

    def checkpoints(self) -> list[WriterSnapshot]:
        return [decode_snapshot(v or b"") for k, v in self.snapshots if k == CHECKPOINT_KEY]
