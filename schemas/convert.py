"""The bridge to fastavro: wire JSON ⇄ fastavro's datum of a record, compiled once per schema.

fastavro resolves bytes of another writer version of a record against the reader's version
(``Codec`` takes this path for them), reads Avro container files (``projectors.export``), and
is the independent reference the tests and ``bench.codec_bench`` compare the compiled codec
with. Its datum is mapped to wire JSON by the rule of :mod:`schemas.rules`: a JsonValue is its
``value`` (BigInt as the integer its decimal text spells), an enum is its symbol, any other
union is its branch's value, and a null field is an absent key.

fastavro is driven with union *tuple notation* ``(branch name, value)`` so it never has to
guess a branch by validating nested values (slow, and ambiguous for look-alike records), and
read with ``return_record_name=True`` so decoding knows which record branch was written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from schemas.avro_io import plain_json
from schemas.errors import UnencodableError
from schemas.rules import BIG_INT, JSON_VALUE, LONG_MAX, LONG_MIN, Names, NoFit, union_tags

Encoder = Callable[[Any], Any]
Decoder = Callable[[Any], Any]


# --- JsonValue: the hot recursive case, hand-written -------------------------------------


def encode_json_value(v: Any) -> dict[str, Any]:
    t = type(v)
    if t is str:
        return {"value": ("string", v)}
    if t is int:
        if LONG_MIN <= v <= LONG_MAX:
            return {"value": ("long", v)}
        return {"value": (BIG_INT, {"decimal": str(v)})}
    if t is dict:
        for k in v:
            if type(k) is not str:
                raise UnencodableError(f"JSON object key must be a string, got {k!r}")
        return {"value": ("map", {k: encode_json_value(x) for k, x in v.items()})}
    if t is list or t is tuple:
        return {"value": ("array", [encode_json_value(x) for x in v])}
    if t is bool:
        return {"value": ("boolean", v)}
    if t is float:
        if not math.isfinite(v):
            raise UnencodableError(f"JSON has no {v!r}: only finite floats are lossless")
        return {"value": ("double", v)}
    if v is None:
        return {"value": None}
    # Subclasses and other mappings/sequences (e.g. the core's immutable views).
    return encode_json_value(plain_json(v))


def decode_json_value(d: dict[str, Any]) -> Any:
    v = d["value"]
    t = type(v)
    if t is dict:
        return {k: decode_json_value(x) for k, x in v.items()}
    if t is list:
        return [decode_json_value(x) for x in v]
    if t is tuple:
        return int(v[1]["decimal"])
    return v


# --- generic compilation ------------------------------------------------------------------


def _branch_name(node: Any) -> str:
    if isinstance(node, str):
        return node
    kind = node["type"]
    return str(node["name"]) if kind in ("record", "enum", "fixed") else str(kind)


class _Compiler:
    """Walks one self-contained (expanded) schema; named types are compiled once each."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.names = Names(schema, compiled=False)
        self.resolve = self.names.resolve
        self.enc_cache: dict[str, Encoder] = {}
        self.dec_cache: dict[str, Decoder | None] = {}

    # encoders ---------------------------------------------------------------------------

    def encoder(self, node: Any) -> Encoder:
        node = self.resolve(node)
        if isinstance(node, list):
            return self._union_encoder(node)
        if isinstance(node, str):
            return _PRIMITIVE_ENCODERS[node]
        kind = node["type"]
        if kind == "record":
            name = node["name"]
            if name == JSON_VALUE:
                return encode_json_value
            if name not in self.enc_cache:
                # Recursive records refer to themselves through this trampoline.
                self.enc_cache[name] = self._late_encoder(name)
                self.enc_cache[name] = self._record_encoder(node)
            return self.enc_cache[name]
        if kind == "enum":
            symbols = frozenset(node["symbols"])

            def enc_enum(v: Any) -> Any:
                if type(v) is not str or v not in symbols:
                    raise NoFit(f"{v!r} is not one of {sorted(symbols)}")
                return v

            return enc_enum
        if kind == "array":
            return self._array_encoder(node["items"])
        if kind == "map":
            values = self.encoder(node["values"])

            def enc_map(v: Any) -> Any:
                if not isinstance(v, Mapping) or not all(type(k) is str for k in v):
                    raise NoFit("expected an object with string keys")
                return {k: values(x) for k, x in v.items()}

            return enc_map
        return _PRIMITIVE_ENCODERS[kind]

    def _late_encoder(self, name: str) -> Encoder:
        return lambda v: self.enc_cache[name](v)

    def _late_decoder(self, name: str) -> Decoder:
        def late(d: Any) -> Any:
            dec = self.dec_cache[name]
            assert dec is not None
            return dec(d)

        return late

    def _array_encoder(self, items_node: Any) -> Encoder:
        items = self.encoder(items_node)
        if items is _enc_long:

            def enc_longs(v: Any) -> Any:
                if type(v) is not list and type(v) is not tuple:
                    raise NoFit("expected an array")
                for x in v:
                    if type(x) is not int or not LONG_MIN <= x <= LONG_MAX:
                        raise NoFit(f"array item {x!r} is not a long")
                return v

            return enc_longs

        def enc_array(v: Any) -> Any:
            if type(v) is not list and type(v) is not tuple:
                raise NoFit("expected an array")
            return [items(x) for x in v]

        return enc_array

    def _union_encoder(self, branches: list[Any]) -> Encoder:
        typed: list[tuple[str, Encoder, Any]] = []
        has_json = False
        for b in branches:
            node = self.resolve(b)
            name = _branch_name(node)
            if name == "null":
                continue  # null means "absent"; the record handles absence
            if name == JSON_VALUE:
                has_json = True
                continue
            typed.append((name, self.encoder(b), node))
        tag_field, by_tag = union_tags([node for _, _, node in typed])
        tagged = {value: typed[i][:2] for value, i in by_tag.items()}
        untagged = [
            (name, enc) for i, (name, enc, _) in enumerate(typed) if i not in by_tag.values()
        ]

        def enc_union(v: Any) -> Any:
            if tag_field is not None and isinstance(v, Mapping):
                tag = v.get(tag_field)
                branch = tagged.get(tag) if type(tag) is str else None
                if branch is not None:
                    try:
                        return (branch[0], branch[1](v))
                    except NoFit:
                        pass
            for name, enc in untagged:
                try:
                    return (name, enc(v))
                except NoFit:
                    continue
            if has_json:
                return (JSON_VALUE, encode_json_value(v))
            raise NoFit(f"{type(v).__name__} fits no branch of {[n for n, _, _ in typed]}")

        return enc_union

    def _data_encoder(self, branches: list[Any]) -> Callable[[str, Any], Any]:
        """The ``data`` union: the record for the event's type if it fits, else JsonValue."""
        by_type = {t: (name, self.encoder(name)) for t, name in self.names.event_types.items()}
        by_type = {t: b for t, b in by_type.items() if b[0] in map(_branch_name, branches)}

        def enc_data(event_type: Any, v: Any) -> Any:
            typed = by_type.get(event_type)
            if typed is not None:
                try:
                    return (typed[0], typed[1](v))
                except NoFit:
                    pass
            return (JSON_VALUE, encode_json_value(v))

        return enc_data

    def _record_encoder(self, node: dict[str, Any]) -> Encoder:
        name = node["name"]
        required: list[tuple[str, Encoder]] = []
        optional: list[tuple[str, Encoder]] = []
        data_enc: Callable[[str, Any], Any] | None = None
        for f in node["fields"]:
            ftype = f["type"]
            if f["name"] == "data" and self.names.is_data_union(ftype):
                data_enc = self._data_encoder(ftype)
                continue
            nullable = isinstance(ftype, list) and "null" in ftype
            (optional if nullable or "default" in f else required).append(
                (f["name"], self.encoder(ftype))
            )
        known = frozenset(f["name"] for f in node["fields"])

        def enc_record(v: Any) -> Any:
            if type(v) is not dict:
                if not isinstance(v, Mapping):
                    raise NoFit(f"{name}: expected an object")
                v = dict(v)
            if not known.issuperset(v):
                raise NoFit(f"{name}: unexpected keys {sorted(set(v) - known)}")
            out: dict[str, Any] = {}
            for fname, enc in required:
                try:
                    x = v[fname]
                except KeyError:
                    raise NoFit(f"{name}: missing {fname}") from None
                out[fname] = enc(x)
            for fname, enc in optional:
                if fname in v:
                    out[fname] = enc(v[fname])
            if data_enc is not None:
                if "data" not in v:
                    raise NoFit(f"{name}: missing data")
                out["data"] = data_enc(v.get("type"), v["data"])
            return out

        return enc_record

    # decoders (None means: fastavro's value already is the wire value) -------------------

    def decoder(self, node: Any) -> Decoder | None:
        node = self.resolve(node)
        if isinstance(node, list):
            return self._union_decoder(node)
        if isinstance(node, str):
            return None
        kind = node["type"]
        if kind == "record":
            name = node["name"]
            if name == JSON_VALUE:
                return decode_json_value
            if name not in self.dec_cache:
                self.dec_cache[name] = self._late_decoder(name)
                self.dec_cache[name] = self._record_decoder(node)
            return self.dec_cache[name]
        if kind == "array":
            items = self.decoder(node["items"])
            if items is None:
                return None
            return lambda d: [items(x) for x in d]
        if kind == "map":
            values = self.decoder(node["values"])
            if values is None:
                return None
            return lambda d: {k: values(x) for k, x in d.items()}
        return None

    def _union_decoder(self, branches: list[Any]) -> Decoder | None:
        by_name: dict[str, Decoder] = {}
        array_dec: Decoder | None = None
        map_dec: Decoder | None = None
        for b in branches:
            node = self.resolve(b)
            name = _branch_name(node)
            dec = self.decoder(node)
            if isinstance(node, dict) and node["type"] == "record":
                by_name[name] = dec or _identity
            elif name == "array":
                array_dec = dec
            elif name == "map":
                map_dec = dec
        if not by_name and array_dec is None and map_dec is None:
            return None

        def dec_union(d: Any) -> Any:
            t = type(d)
            if t is tuple:
                return by_name[d[0]](d[1])
            if t is list and array_dec is not None:
                return array_dec(d)
            if t is dict and map_dec is not None:
                return map_dec(d)
            return d

        return dec_union

    def _record_decoder(self, node: dict[str, Any]) -> Decoder:
        fields = [(f["name"], self.decoder(f["type"])) for f in node["fields"]]

        def dec_record(d: dict[str, Any]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for fname, dec in fields:
                x = d.get(fname)
                if x is not None:
                    out[fname] = x if dec is None else dec(x)
            return out

        return dec_record


def _identity(d: Any) -> Any:
    return d


def _enc_long(v: Any) -> Any:
    if type(v) is not int or not LONG_MIN <= v <= LONG_MAX:
        raise NoFit(f"{v!r} is not a long")
    return v


def _enc_int(v: Any) -> Any:
    if type(v) is not int or not -(2**31) <= v < 2**31:
        raise NoFit(f"{v!r} is not an int")
    return v


def _enc_string(v: Any) -> Any:
    if type(v) is not str:
        raise NoFit(f"{v!r} is not a string")
    return v


def _enc_boolean(v: Any) -> Any:
    if type(v) is not bool:
        raise NoFit(f"{v!r} is not a boolean")
    return v


def _enc_double(v: Any) -> Any:
    if type(v) is not float:
        raise NoFit(f"{v!r} is not a double")
    if not math.isfinite(v):
        raise UnencodableError(f"JSON has no {v!r}: only finite floats are lossless")
    return v


def _enc_null(v: Any) -> Any:
    if v is not None:
        raise NoFit(f"{v!r} is not null")
    return None


_PRIMITIVE_ENCODERS: dict[str, Encoder] = {
    "null": _enc_null,
    "boolean": _enc_boolean,
    "int": _enc_int,
    "long": _enc_long,
    "double": _enc_double,
    "float": _enc_double,
    "string": _enc_string,
}


def compile_codec(schema: dict[str, Any]) -> tuple[Encoder, Decoder]:
    """Encoder (wire JSON → datum; raises UnencodableError) and decoder for a top-level record."""
    c = _Compiler(schema)
    enc = c.encoder(schema)
    dec = c.decoder(schema)
    assert dec is not None  # a record always has a decoder
    name = schema["name"]

    def encode(v: Any) -> Any:
        try:
            return enc(v)
        except NoFit as e:
            raise UnencodableError(f"{name}: {e}") from None

    return encode, dec
