"""``dsh export DIR``: the events topic as Avro object container files, for analytics engines.

Layout: ``DIR/date=YYYY-MM-DD/part-<partition>-<firstOffset>-<lastOffset>.avro`` (the UTC date of
the events' ``time``), each file a container with the ``dsh.v1.SessionEvent`` schema embedded,
so any Avro reader needs nothing else. ``DIR/_offsets.json`` is the checkpoint: per partition,
the next offset to export. Engines that skip ``_``/``.`` names (Spark, Hive, Trino, DuckDB
globs on ``part-*``) never see it or the temporary files.

Idempotent by offset ranges: a run reads each partition (``read_committed``) from its
checkpoint to the end as of the start of the run, writes files under temporary names and
fsyncs them, then commits the checkpoint *with the renames it owes* (``pending``), then renames.
A crash before the checkpoint commit leaves only temporary files (deleted by the next run,
which re-exports the same records); a crash after it is rolled forward by the next run. So a
record is in exactly one visible file once its run finished, and never in two.

Its parts, each a module:

- :mod:`.run`: one run, from the lock to the renames (:func:`export`);
- :mod:`.manifest`: the checkpoint, its commit and roll-forward;
- :mod:`.files`: the files' names and one container being written;
- :mod:`.reading`: an export read back (:func:`read_export`);
- :mod:`.session_file`: one session as a session file (``--format jsonl``);
- :mod:`.errors`: what an export fails with, by code.
"""

from projectors.export.errors import (
    ExportBusyError,
    ExportDependencyError,
    ExportDirectoryError,
    ExportError,
    ExportFormatError,
    ExportManifestError,
    ExportRecordError,
)
from projectors.export.formats import FORMATS, ExportFormat
from projectors.export.manifest import MANIFEST, Manifest
from projectors.export.reading import read_export
from projectors.export.run import CODECS, ExportResult, export
from projectors.export.session_file import export_session
from servicekit.progress import Progress

__all__ = [
    "CODECS",
    "FORMATS",
    "MANIFEST",
    "ExportBusyError",
    "ExportDependencyError",
    "ExportDirectoryError",
    "ExportError",
    "ExportFormat",
    "ExportFormatError",
    "ExportManifestError",
    "ExportRecordError",
    "ExportResult",
    "Manifest",
    "Progress",
    "export",
    "export_session",
    "read_export",
]
