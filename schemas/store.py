"""The local schema store: the ``.avsc`` files, their fingerprints and fastavro's parsed forms.

Files are read in a fixed order and share one name table, like ``org.apache.avro.Schema.Parser``
fed the same files in the same order: a file may use any named type an earlier file defined,
and a later definition of a name shadows the earlier one for the files after it (that is how a
test adds an evolved version of a record). Every file whose top level is a record becomes a
*message schema*: something that can be framed with the single-object header. Its fingerprint
is CRC-64-AVRO of the parsing canonical form of the record with every named type inlined at
its first use, which is what Java's ``SchemaNormalization.parsingFingerprint64`` computes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import fingerprint as _fingerprint
from fastavro.schema import to_parsing_canonical_form

from schemas.errors import UnknownFingerprintError

SCHEMA_DIR = Path(__file__).resolve().parent

# Load order: a file only references names defined by the files before it (or itself).
SCHEMA_FILES: tuple[str, ...] = (
    "json_value.avsc",
    "vocabulary.avsc",
    "session_event.avsc",
    "append_command.avsc",
    "append_reply.avsc",
    "writer_snapshot.avsc",
)

# Earlier versions of the file set, oldest first, each a directory of the files above as they
# shipped: never edited. Records on the topics written with them keep decoding (into the
# current version, by Avro resolution) for as long as the topics keep them.
HISTORY_DIR = SCHEMA_DIR / "history"
HISTORY: tuple[str, ...] = ("v1",)

SINGLE_OBJECT_MARKER = b"\xc3\x01"

SESSION_EVENT = "dsh.v1.SessionEvent"
APPEND_COMMAND = "dsh.v1.AppendCommand"
APPEND_REPLY = "dsh.v1.AppendReply"
WRITER_SNAPSHOT = "dsh.v1.WriterSnapshot"
JSON_VALUE = "dsh.v1.JsonValue"

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "enum", "fixed"})

Schema = Any  # a JSON schema node: str, list (union) or dict


@dataclass(frozen=True, eq=False)
class MessageSchema:
    """One version of a top-level record, ready to frame, write and read."""

    name: str
    source: str  # file it came from, for error messages
    schema: dict[str, Any]  # self-contained: named types inlined at first use
    canonical: str
    fingerprint: bytes  # 8 bytes, little-endian, as in the single-object header
    header: bytes  # marker + fingerprint
    parsed: Any = field(repr=False)  # fastavro's parsed schema, parsed once

    @property
    def fingerprint_hex(self) -> str:
        return self.fingerprint.hex()


def _fullname(node: Mapping[str, Any], namespace: str | None) -> str:
    name = str(node["name"])
    if "." in name:
        return name
    ns = node.get("namespace", namespace)
    return f"{ns}.{name}" if ns else name


def _collect(node: Schema, namespace: str | None, names: dict[str, dict[str, Any]]) -> None:
    """Register every named type defined inside ``node`` (later definitions shadow)."""
    if isinstance(node, list):
        for branch in node:
            _collect(branch, namespace, names)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind in _NAMED:
        full = _fullname(node, namespace)
        names[full] = node
        inner_ns = full.rpartition(".")[0] or None
        for f in node.get("fields", ()):
            _collect(f["type"], inner_ns, names)
    elif kind == "array":
        _collect(node["items"], namespace, names)
    elif kind == "map":
        _collect(node["values"], namespace, names)
    elif isinstance(kind, (dict, list)):
        _collect(kind, namespace, names)


def _resolve_ref(ref: str, namespace: str | None, names: Mapping[str, Any]) -> str:
    if ref in names:
        return ref
    if namespace and f"{namespace}.{ref}" in names:
        return f"{namespace}.{ref}"
    raise ValueError(f"unknown Avro type name {ref!r}")


def _expand(
    node: Schema, namespace: str | None, names: Mapping[str, dict[str, Any]], seen: set[str]
) -> Schema:
    """Inline named types at their first use (depth first, in field order), full names only."""
    if isinstance(node, str):
        if node in _PRIMITIVES:
            return node
        full = _resolve_ref(node, namespace, names)
        if full in seen:
            return full
        return _expand(names[full], namespace, names, seen)
    if isinstance(node, list):
        return [_expand(b, namespace, names, seen) for b in node]
    kind = node["type"]
    if kind in _NAMED:
        full = _fullname(node, namespace)
        seen.add(full)
        inner_ns = full.rpartition(".")[0] or None
        out = {k: v for k, v in node.items() if k not in ("name", "namespace", "fields")}
        out["name"] = full
        if kind == "record":
            out["fields"] = [
                {**f, "type": _expand(f["type"], inner_ns, names, seen)} for f in node["fields"]
            ]
        return out
    if kind == "array":
        return {**node, "items": _expand(node["items"], namespace, names, seen)}
    if kind == "map":
        return {**node, "values": _expand(node["values"], namespace, names, seen)}
    if isinstance(kind, (str, list, dict)) and kind not in _PRIMITIVES:
        return _expand(kind, namespace, names, seen)
    return node


class SchemaStore:
    """Fingerprint → writer schema, and record name → the reader (newest) schema."""

    def __init__(self) -> None:
        self._names: dict[str, dict[str, Any]] = {}
        self._by_fingerprint: dict[bytes, MessageSchema] = {}
        self._current: dict[str, MessageSchema] = {}

    @classmethod
    def from_files(cls, paths: Iterable[Path | str]) -> SchemaStore:
        store = cls()
        for path in paths:
            store.add_file(path)
        return store

    def add_file(self, path: Path | str, *, reader: bool = True) -> MessageSchema | None:
        p = Path(path)
        source = str(p.relative_to(SCHEMA_DIR)) if p.is_relative_to(SCHEMA_DIR) else p.name
        return self.add(json.loads(p.read_text(encoding="utf-8")), source=source, reader=reader)

    def add(
        self, schema: Schema, *, source: str = "<memory>", reader: bool = True
    ) -> MessageSchema | None:
        """Add one schema document; returns its message schema when its top level is a record.

        With ``reader`` (the default) it becomes the schema this store reads that record
        name into; without, it is only known as a writer schema. That is how a consumer is
        rolled out ahead of producers: it learns the new version's fingerprint first and keeps
        reading into the version its code understands.
        """
        _collect(schema, None, self._names)
        if not (isinstance(schema, dict) and schema.get("type") == "record"):
            return None
        expanded = _expand(schema, None, self._names, set())
        canonical = to_parsing_canonical_form(expanded)
        fp = bytes.fromhex(_fingerprint(canonical, "CRC-64-AVRO"))
        message = MessageSchema(
            name=expanded["name"],
            source=source,
            schema=expanded,
            canonical=canonical,
            fingerprint=fp,
            header=SINGLE_OBJECT_MARKER + fp,
            # A fresh name table per version: two versions of one record must not collide.
            parsed=fastavro.parse_schema(expanded, named_schemas={}),
        )
        self._by_fingerprint[fp] = message
        if reader or message.name not in self._current:
            self._current[message.name] = message
        return message

    def by_fingerprint(self, fp: bytes) -> MessageSchema:
        try:
            return self._by_fingerprint[fp]
        except KeyError:
            raise UnknownFingerprintError(
                f"unknown writer schema fingerprint {fp.hex()}: not in the local schema store",
                fingerprint=fp.hex(),
            ) from None

    def current(self, name: str) -> MessageSchema:
        return self._current[name]

    def schemas(self) -> tuple[MessageSchema, ...]:
        return tuple(self._by_fingerprint.values())


@cache
def default_store() -> SchemaStore:
    """The store built from the packaged ``.avsc`` files (built once per process): the earlier
    versions as writer schemas only, then the current one, which records are read into."""
    store = SchemaStore()
    for version in HISTORY:
        for name in SCHEMA_FILES:
            store.add_file(HISTORY_DIR / version / name, reader=False)
    for name in SCHEMA_FILES:
        store.add_file(SCHEMA_DIR / name)
    return store
