"""The export's checkpoint, ``DIR/_offsets.json``: per partition the next offset to export, and
the renames and deletes a committed run still owes (``pending``), and the format its files are in
(``exportFormat``; a checkpoint written before there were formats has none, and exported Avro).

Saving it is a run's commit point; :meth:`Manifest.roll_forward` then does what it owes, and
the next run does it again (idempotently) when a crash came in between."""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsh.formats.jsonl import fsync_directory, replace_atomically
from projectors.export.errors import ExportManifestError

MANIFEST = "_offsets.json"
MANIFEST_FORMAT = 1
# What a checkpoint without ``exportFormat`` (written before there were formats) exported.
LEGACY_FORMAT = "avro"


@dataclass
class Manifest:
    topic: str
    offsets: dict[int, int] = field(default_factory=dict)  # partition -> next offset to export
    renames: list[tuple[str, str]] = field(default_factory=list)  # owed: (temporary, final)
    deletes: list[str] = field(default_factory=list)  # owed: files a full re-export replaced
    export_format: str = LEGACY_FORMAT

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "topic": self.topic,
            "exportFormat": self.export_format,
            "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
            "pending": {"renames": [list(r) for r in self.renames], "deletes": self.deletes},
            "updatedAt": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }

    @classmethod
    def load(cls, directory: Path) -> Manifest | None:
        path = directory / MANIFEST
        try:
            value = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ExportManifestError(
                f"{path}: unreadable checkpoint ({exc}); export into a new directory",
                code="MANIFEST_CORRUPT",
            ) from None
        try:
            if value["format"] != MANIFEST_FORMAT:
                raise ValueError(f"format {value['format']!r}")
            pending = value.get("pending", {})
            return cls(
                str(value["topic"]),
                {int(p): int(o) for p, o in value["offsets"].items()},
                [(str(a), str(b)) for a, b in pending.get("renames", [])],
                [str(d) for d in pending.get("deletes", [])],
                str(value.get("exportFormat", LEGACY_FORMAT)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ExportManifestError(
                f"{path}: not a dsh export checkpoint ({exc}); export into a new directory",
                code="MANIFEST_CORRUPT",
            ) from None

    def save(self, directory: Path) -> None:
        text = json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n"
        replace_atomically(directory / MANIFEST, [text.encode()])

    def roll_forward(self, directory: Path) -> None:
        """Do the renames and deletes the committed checkpoint owes (idempotent), then record
        that nothing is owed any more."""
        if not self.renames and not self.deletes:
            return
        touched: set[Path] = set()
        finals = set()
        for tmp, final in self.renames:
            src, dst = directory / tmp, directory / final
            finals.add(final)
            if src.exists():
                os.replace(src, dst)
            elif not dst.exists():
                raise ExportManifestError(
                    f"{directory / MANIFEST} owes {final} but neither it nor {tmp} exists; "
                    "re-export with --from-beginning",
                    code="MANIFEST_PENDING_LOST",
                )
            touched.add(dst.parent)
        for rel in self.deletes:
            if rel not in finals:
                (directory / rel).unlink(missing_ok=True)
                touched.add((directory / rel).parent)
        for d in touched:
            fsync_directory(d)
        self.renames, self.deletes = [], []
        self.save(directory)
