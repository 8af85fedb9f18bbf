"""The compiled writers: wire JSON → Avro bytes of a schema, compiled once per schema.

fastavro interprets the schema for every value it writes, and on a 2-core machine that costs
about half a microsecond per field: a 1 KB event is 40 to 90 fields. Here records are generated
straight-line functions (:mod:`schemas.writer_source`), everything else closures over the
primitives of :mod:`schemas.avro_io`; each checks a value against the typed record and writes
its bytes in one pass, by the rule of :mod:`schemas.rules`. It implements exactly the Avro
features our schemas use (records, enums, arrays, maps, unions, null, boolean, int, long,
double, string); anything else is refused when the schema is compiled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from schemas.avro_io import PRIMITIVE_WRITERS, Writer, long_bytes, write_json_value, write_str
from schemas.errors import UnencodableError
from schemas.rules import JSON_VALUE, Names, NoFit, tag, union_tags
from schemas.writer_source import RecordWriterSource, Tagged

_PLAIN = frozenset({dict, list, tuple, str, int, float, bool, type(None)})
_FITTING = {
    "string": frozenset({str}),
    "long": frozenset({int}),
    "int": frozenset({int}),
    "boolean": frozenset({bool}),
    "double": frozenset({float}),
}


def _fitting_types(node: Any) -> frozenset[type] | None:
    """The plain Python types a value of this schema can have (None: unknown, try it)."""
    if isinstance(node, str):
        return _FITTING.get(node)
    kind = node.get("type")
    if kind == "enum":
        return frozenset({str})
    if kind in ("record", "map"):
        return frozenset({dict})
    if kind == "array":
        return frozenset({list, tuple})
    return None


class _WriterCompiler:
    def __init__(self, schema: dict[str, Any]) -> None:
        self.names = Names(schema, compiled=True)
        self.resolve = self.names.resolve
        self.writers: dict[str, Writer] = {}

    def writer(self, node: Any) -> Writer:
        node = self.resolve(node)
        if isinstance(node, list):
            return self._union_writer(node)
        if isinstance(node, str):
            return PRIMITIVE_WRITERS[node]
        kind = node["type"]
        if kind == "record":
            name = node["name"]
            if name == JSON_VALUE:
                return write_json_value
            if name not in self.writers:
                self.writers[name] = lambda v, buf: self.writers[name](v, buf)  # recursion
                self.writers[name] = self._record_writer(node)
            return self.writers[name]
        if kind == "enum":
            return _enum_writer(node["symbols"])
        if kind == "array":
            return _array_writer(self.writer(node["items"]))
        if kind == "map":
            return _map_writer(self.writer(node["values"]))
        raise ValueError(f"unsupported schema {node!r}")

    def _branches(
        self, branches: Sequence[Any]
    ) -> tuple[list[tuple[bytes, Writer, Any]], bytes | None]:
        """Typed (non-null, non-JsonValue) branches as (index bytes, writer, schema node), and
        JsonValue's index bytes."""
        typed: list[tuple[bytes, Writer, Any]] = []
        json_index: bytes | None = None
        for i, b in enumerate(branches):
            node = self.resolve(b)
            if node == "null":
                continue
            if isinstance(node, dict) and node.get("name") == JSON_VALUE:
                json_index = long_bytes(i)
            else:
                typed.append((long_bytes(i), self.writer(node), node))
        return typed, json_index

    def _union_writer(self, branches: list[Any]) -> Writer:
        typed, json_index = self._branches(branches)
        tag_field, by_tag = union_tags([node for _, _, node in typed])
        tagged = {value: (typed[i][0], typed[i][1]) for value, i in by_tag.items()}
        # Untagged branches, with the Python types that can fit them: trying a branch that
        # cannot fit costs an exception, so skip those up front.
        untagged = [(index, w, _fitting_types(node)) for index, w, node in typed if not tag(node)]

        def w_union(v: Any, buf: bytearray) -> None:
            if tag_field is not None and type(v) is dict:
                t = v.get(tag_field)
                branch = tagged.get(t) if type(t) is str else None
                if branch is not None:
                    mark = len(buf)
                    buf += branch[0]
                    try:
                        branch[1](v, buf)
                        return
                    except NoFit:
                        del buf[mark:]
            t = type(v)
            for index, w, types in untagged:
                if types is not None and t not in types and t in _PLAIN:
                    continue
                mark = len(buf)
                buf += index
                try:
                    w(v, buf)
                    return
                except NoFit:
                    del buf[mark:]
            if json_index is None:
                raise NoFit(f"{type(v).__name__} fits no branch")
            buf += json_index
            write_json_value(v, buf)

        return w_union

    def _data_writer(self, branches: list[Any]) -> Callable[[Any, Any, bytearray], None]:
        """The ``data`` union: the record of the event's type if the value fits it, else
        JsonValue."""
        names = [
            self.resolve(b).get("name") if isinstance(b, (str, dict)) else None for b in branches
        ]
        json_index = long_bytes(names.index(JSON_VALUE))
        by_type = {
            t: (long_bytes(names.index(name)), self.writer(name))
            for t, name in self.names.event_types.items()
            if name in names
        }

        def w_data(event_type: Any, v: Any, buf: bytearray) -> None:
            typed = by_type.get(event_type) if type(event_type) is str else None
            if typed is not None:
                mark = len(buf)
                buf += typed[0]
                try:
                    typed[1](v, buf)
                    return
                except NoFit:
                    del buf[mark:]
            buf += json_index
            write_json_value(v, buf)

        return w_data

    def _record_writer(self, node: dict[str, Any]) -> Writer:
        src = RecordWriterSource(node["name"])
        for f in node["fields"]:
            fname, ftype = f["name"], f["type"]
            rt = self.resolve(ftype)
            if fname == "data" and self.names.is_data_union(ftype):
                src.data_field(fname, self._data_writer(ftype))
            elif isinstance(rt, list) and rt and self.resolve(rt[0]) == "null":
                inner = self.resolve(rt[1]) if len(rt) == 2 else None
                if isinstance(inner, str) and inner in ("string", "long", "boolean"):
                    src.optional_primitive(fname, inner)
                else:
                    src.optional(fname, self._union_writer(rt))
            elif "default" in f:
                default = bytearray()
                self.writer(ftype)(f["default"], default)
                src.optional(fname, self.writer(ftype), bytes(default))
            elif isinstance(rt, str) and rt in ("string", "long", "int", "boolean"):
                src.required_primitive(fname, rt)
            elif isinstance(rt, list) and (tagged := self._tagged(rt)) is not None:
                src.required_tagged(fname, tagged, self.writer(rt))
            elif isinstance(rt, dict) and rt["type"] == "array":
                items = self.resolve(rt["items"])
                tagged = self._tagged(items) if isinstance(items, list) else None
                src.required_array(fname, tagged, self.writer(items))
            else:
                src.required(fname, self.writer(ftype))
        return src.build()

    def _tagged(self, branches: list[Any]) -> Tagged | None:
        """The tagged-union description of ``branches`` (see writer_source.Tagged), else None."""
        typed, _ = self._branches(branches)
        field, by_tag = union_tags([node for _, _, node in typed])
        if field is None:
            return None
        flat = {}
        for value, i in by_tag.items():
            index, _, node = typed[i]
            kinds = [(f["name"], self.resolve(f["type"])) for f in node["fields"]]
            if all(k in ("string", "long") for _, k in kinds):
                flat[value] = (index, kinds)
        return field, {value: (typed[i][0], typed[i][1]) for value, i in by_tag.items()}, flat


def _enum_writer(symbols: list[str]) -> Writer:
    index = {s: long_bytes(i) for i, s in enumerate(symbols)}

    def w_enum(v: Any, buf: bytearray) -> None:
        b = index.get(v) if type(v) is str else None
        if b is None:
            raise NoFit(f"{v!r} is not one of {symbols}")
        buf += b

    return w_enum


def _array_writer(items: Writer) -> Writer:
    def w_array(v: Any, buf: bytearray) -> None:
        if not isinstance(v, (list, tuple)):
            raise NoFit("expected an array")
        if v:
            buf += long_bytes(len(v))
            for x in v:
                items(x, buf)
        buf += b"\x00"

    return w_array


def _map_writer(values: Writer) -> Writer:
    def w_map(v: Any, buf: bytearray) -> None:
        if not isinstance(v, dict):
            raise NoFit("expected an object")
        if v:
            buf += long_bytes(len(v))
            for k, x in v.items():
                if type(k) is not str:
                    raise NoFit(f"object key {k!r} is not a string")
                write_str(k, buf)
                values(x, buf)
        buf += b"\x00"

    return w_map


def compile_writer(schema: dict[str, Any], prefix: bytes = b"") -> Callable[[Any], bytes]:
    """``encode(wire JSON) -> prefix + body bytes``; UnencodableError for a value that is not
    lossless JSON or does not fit the record.

    The prefix (the single-object header) is written into the same buffer as the body, which
    saves a copy of every record.
    """
    w = _WriterCompiler(schema).writer(schema)
    name = schema["name"]

    def encode(v: Any) -> bytes:
        buf = bytearray(prefix)
        try:
            w(v, buf)
        except NoFit as e:
            raise UnencodableError(f"{name}: {e}") from None
        except UnicodeEncodeError as e:
            raise UnencodableError(
                f"{name}: string is not valid Unicode (lone surrogate?): {e.reason}"
            ) from None
        except RecursionError:
            raise UnencodableError(f"{name}: value nested too deeply") from None
        return bytes(buf)

    return encode
