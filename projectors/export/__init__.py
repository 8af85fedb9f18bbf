"""``dsh export DIR``: the events topic as files by date, for analytics engines.

Layout: ``DIR/date=YYYY-MM-DD/part-<partition>-<firstOffset>-<lastOffset>.<ext>`` (the UTC date of
the events' ``time``, hive style). Formats (:mod:`.formats`): ``avro``, containers with the
``dsh.v1.SessionEvent`` schema embedded and records copied as they are on the topic;
``parquet`` and ``avro-flat``, one flat row per event (:mod:`.rows`) that DuckDB, Polars and
Spark read (the wire schema's recursive ``JsonValue`` is what they refuse). ``DIR/_offsets.json``
is the checkpoint: per partition, the next offset to export, and the directory's format (one per
directory). Engines that skip ``_``/``.`` names (Spark, Hive, Trino, DuckDB globs on
``part-*``) never see it or the temporary files.

Idempotent by offset ranges: a run reads each partition (``read_committed``) from its
checkpoint to the end as of the start of the run, writes files under temporary names and
fsyncs them, then commits the checkpoint *with the renames it owes* (``pending``), then renames.
A crash before the checkpoint commit leaves only temporary files (deleted by the next run,
which re-exports the same records); a crash after it is rolled forward by the next run. So a
record is in exactly one visible file once its run finished, and never in two.

Its parts, each a module:

- :mod:`.run`: one run, from the lock to the renames (:func:`export`), for every format;
- :mod:`.manifest`: the checkpoint, its commit and roll-forward;
- :mod:`.files`: the files' names, one file being written, and the sink interface formats write
  through;
- :mod:`.formats`: the formats and the codecs each takes;
- :mod:`.avro_files`: the wire and the flat Avro sinks; :mod:`.analytics`: the Parquet one
  (pyarrow, the ``analytics`` extra);
- :mod:`.rows`: the flat row of one event, and its columns;
- :mod:`.budget`: the bytes the open files hold in memory, bounded across partitions
  (``DSH_EXPORT_BUFFER_BYTES``);
- :mod:`.reading`: a wire Avro export read back (:func:`read_export`);
- :mod:`.session_file`: one session as a session file (``--format jsonl``);
- :mod:`.errors`: what an export fails with, by code.
"""

from projectors.export.budget import ExportSettings
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
    "ExportSettings",
    "Manifest",
    "Progress",
    "export",
    "export_session",
    "read_export",
]
