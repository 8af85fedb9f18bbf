"""What ``dsh export`` fails with: one class per cause, each with a stable code."""

from __future__ import annotations

from dsh.errors import SessionError, register_error


@register_error
class ExportError(SessionError):
    default_code = "EXPORT"


@register_error
class ExportManifestError(ExportError):
    """``MANIFEST_CORRUPT``, ``MANIFEST_TOPIC`` (another topic's export), ``MANIFEST_AHEAD``
    (the topic was recreated or is another cluster), ``MANIFEST_FORMAT`` (another format's export)
    or ``MANIFEST_PENDING_LOST``."""

    default_code = "MANIFEST_CORRUPT"


@register_error
class ExportDirectoryError(ExportError):
    """``EXPORT_DIR_INVALID``: the export directory cannot be made or written (a file of that
    name, no permission); ``EXPORT_WRITE_FAILED``: a file of the run could not be written (a
    full disk); ``EXPORT_OUTPUT_INVALID``: ``--format jsonl``'s file cannot be written."""

    default_code = "EXPORT_DIR_INVALID"


@register_error
class ExportBusyError(ExportError):
    default_code = "EXPORT_BUSY"


@register_error
class ExportRecordError(ExportError):
    """A record that does not decode as a SessionEvent; nothing of the run was committed."""

    default_code = "RECORD_UNDECODABLE"


@register_error
class ExportFormatError(ExportError):
    """``EXPORT_FORMAT``: no such format, or a codec the format does not take (``CODEC``)."""

    default_code = "EXPORT_FORMAT"


@register_error
class ExportDependencyError(ExportError):
    """A format's optional library is missing: ``ANALYTICS_EXTRA_MISSING`` (pyarrow)."""

    default_code = "ANALYTICS_EXTRA_MISSING"
