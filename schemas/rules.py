"""The JSON ⇄ Avro rule of our schemas, in one place for every codec that applies it: the
compiled writers and readers (:mod:`schemas.writers`, :mod:`schemas.readers`) and the fastavro
bridge (:mod:`schemas.convert`).

* A record is a JSON object of its fields; a null field is an absent key.
* A value takes a typed branch of a union only when it fits that branch exactly (:class:`NoFit`
  otherwise), else the union's JsonValue branch.
* Look-alike records are told apart by a tag, never by first fit: a record with
  ``"dsh.when": {"kind": "model"}`` is the branch for values whose ``kind`` is "model".
* The event ``data`` union is chosen by the event's type: the record whose ``dsh.eventType``
  names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schemas.store import JSON_VALUE

BIG_INT = "dsh.v1.BigInt"
EVENT_TYPE_ATTR = "dsh.eventType"
WHEN_ATTR = "dsh.when"
LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# What the compiled codec implements; the fastavro bridge takes any Avro.
_COMPILED = frozenset({"null", "boolean", "int", "long", "double", "string"})

__all__ = [
    "BIG_INT",
    "EVENT_TYPE_ATTR",
    "JSON_VALUE",
    "LONG_MAX",
    "LONG_MIN",
    "WHEN_ATTR",
    "Names",
    "NoFit",
    "tag",
    "union_tags",
]


class NoFit(Exception):
    """The value does not fit this typed branch exactly; try the next one."""


def tag(node: Any) -> dict[str, str] | None:
    """A record's ``dsh.when`` tag ({field: value}), or None."""
    if isinstance(node, dict) and isinstance(node.get(WHEN_ATTR), dict):
        return node[WHEN_ATTR]  # type: ignore[no-any-return]
    return None


def union_tags(nodes: Sequence[Any]) -> tuple[str | None, dict[str, int]]:
    """The tag field of a union's tagged records and tag value → position in ``nodes``."""
    field: str | None = None
    by_tag: dict[str, int] = {}
    for i, node in enumerate(nodes):
        when = tag(node)
        if when is None:
            continue
        ((key, value),) = when.items()
        if field not in (None, key):
            raise ValueError(f"one union tags its records by both {field!r} and {key!r}")
        field = key
        by_tag[value] = i
    return field, by_tag


class Names:
    """The named types of one self-contained (expanded) schema, and which record is the data
    of which event type. ``compiled``: refuse what the compiled codec does not implement (it
    implements exactly what our schemas use), when the schema is compiled, not per value."""

    def __init__(self, schema: Any, *, compiled: bool) -> None:
        self.named: dict[str, dict[str, Any]] = {}
        self.event_types: dict[str, str] = {}  # event type → data record name
        self._compiled = compiled
        self._register(schema)

    def _register(self, node: Any) -> None:
        if isinstance(node, list):
            for b in node:
                self._register(b)
            return
        if not isinstance(node, dict):
            return
        kind = node["type"]
        if kind in ("record", "enum", "fixed"):
            if self._compiled and kind == "fixed":
                raise ValueError(f"schema feature not supported by the compiled codec: {kind}")
            if self._compiled and kind == "enum" and len(node["symbols"]) > 63:
                # Enum and union indexes are read as one byte; ours are tiny.
                raise ValueError(f"enums of more than 63 symbols are not supported: {node['name']}")
            self.named[node["name"]] = node
            if EVENT_TYPE_ATTR in node:
                self.event_types[node[EVENT_TYPE_ATTR]] = node["name"]
            for f in node.get("fields", ()):
                self._register(f["type"])
        elif kind == "array":
            self._register(node["items"])
        elif kind == "map":
            self._register(node["values"])
        elif self._compiled and kind not in _COMPILED:
            raise ValueError(f"schema feature not supported by the compiled codec: {kind}")

    def resolve(self, node: Any) -> Any:
        """A named type's definition for its name, a primitive's name for ``{"type": name}``."""
        if isinstance(node, str):
            return self.named.get(node, node)
        if isinstance(node, dict) and node["type"] in PRIMITIVES:
            return node["type"]
        return node

    def is_data_union(self, branches: Any) -> bool:
        """Whether a field of this type is an event's ``data``: a union with event-type records."""
        return isinstance(branches, list) and any(
            isinstance(n, dict) and EVENT_TYPE_ATTR in n for n in map(self.resolve, branches)
        )
