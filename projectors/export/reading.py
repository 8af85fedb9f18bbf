"""An export read back, as an analytics engine would: fastavro and each file's own schema."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from projectors.export.errors import ExportManifestError
from projectors.export.files import part_files
from projectors.export.manifest import Manifest
from schemas import SESSION_EVENT, EventRecord, default_store


@cache
def _json_of_datum() -> Callable[[Any], Any]:
    from schemas.convert import compile_codec

    decode: Callable[[Any], Any] = compile_codec(default_store().current(SESSION_EVENT).schema)[1]
    return decode


def read_export(directory: str | Path) -> Iterator[EventRecord]:
    """Every exported event as an ``EventRecord`` (wire JSON), file by file. Reads with fastavro
    and the schema embedded in each file, as an analytics engine would."""
    import fastavro

    root = Path(directory)
    manifest = Manifest.load(root)
    if manifest is not None and manifest.export_format != "avro":
        raise ExportManifestError(
            f"{root} holds a --format {manifest.export_format} export: read it with an "
            "analytics engine (docs/operations.md#export)",
            code="MANIFEST_FORMAT",
        )
    to_json = _json_of_datum()
    for path in part_files(root):
        with open(path, "rb") as fh:
            for datum in fastavro.reader(fh, return_record_name=True):
                wire = dict(to_json(datum))
                yield EventRecord(wire.pop("sessionId"), wire, wire.pop("formatVersion"))
