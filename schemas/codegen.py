"""Generated record code for the compiled codec (see :mod:`schemas.binary`).

Like dataclasses, we build each record's writer and reader as Python source once, at schema
compile time: straight-line code with the common cases inlined (strings, longs, absent optional
fields, one- and two-byte varints, flat branches of tagged unions) runs about twice as fast as
a generic loop over the fields, and records are most of what the codec does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dsh.json_snapshot import FrozenDict, FrozenList
from schemas import native
from schemas.avro_io import (
    ABSENT,
    FALSE,
    SMALL,
    TRUE,
    Reader,
    Writer,
    bad_index,
    long_bytes,
    read_block_count,
    read_long,
    read_null,
    write_str,
)
from schemas.convert import NoFit
from schemas.errors import CorruptRecordError

# A tagged union: (tag field, tag value → (index bytes, record writer), and for its flat
# branches tag value → (index bytes, [(field, "string" | "long")])).
Tagged = tuple[str, dict[str, tuple[bytes, Writer]], dict[str, tuple[bytes, list[tuple[str, str]]]]]

_MISSING = object()


def _no_fit(record: str, what: str) -> NoFit:
    return NoFit(f"{record}: {what}")


def _unexpected(record: str, v: Mapping[str, Any], known: frozenset[str]) -> NoFit:
    return NoFit(f"{record}: unexpected keys {sorted(set(v) - known)}")


def _overrun(pos: int, n: int) -> CorruptRecordError:
    return CorruptRecordError(f"string length {n} at offset {pos} is negative")


def _int_range(pos: int) -> CorruptRecordError:
    return CorruptRecordError(f"int out of range before offset {pos}")


def _as_dict(v: Any, record: str) -> dict[str, Any]:
    if isinstance(v, Mapping):
        return dict(v)
    raise NoFit(f"{record}: expected an object")


_WRITE_CHECKS = {
    "string": "type(x) is str",
    "long": "type(x) is int and -9223372036854775808 <= x <= 9223372036854775807",
    "int": "type(x) is int and -2147483648 <= x <= 2147483647",
    "boolean": "type(x) is bool",
}
_PY_TYPE = {"string": "str", "long": "int"}
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def _write_lines(kind: str, var: str) -> list[str]:
    """Write ``var``, already checked to be of ``kind``."""
    if kind == "string":
        return [
            f"b = {var}.encode()",
            "n = len(b)",
            "buf += SMALL[n] if n < 4096 else long_bytes(n)",
            "buf += b",
        ]
    if kind == "boolean":
        return [f"buf += TRUE if {var} else FALSE"]
    return [f"buf += SMALL[{var}] if 0 <= {var} < 4096 else long_bytes({var})"]  # long, int


def _varint_lines(target: str) -> list[str]:
    """Read a zigzag varint into ``target``: one- and two-byte values inline (lengths under
    8 KiB, small counts and numbers), longer ones through read_long."""
    return [
        "b = data[pos]",
        "if b < 0x80:",
        f"    {target} = (b >> 1) ^ -(b & 1)",
        "    pos += 1",
        "elif data[pos + 1] < 0x80:",
        "    z = (b & 0x7F) | (data[pos + 1] << 7)",
        f"    {target} = (z >> 1) ^ -(z & 1)",
        "    pos += 2",
        "else:",
        f"    {target}, pos = read_long(data, pos)",
    ]


def _read_lines(kind: str, target: str) -> list[str]:
    if kind == "long":
        return _varint_lines(target)
    if kind == "int":
        return [
            *_varint_lines(target),
            f"if not -2147483648 <= {target} <= 2147483647:",
            "    raise int_range(pos)",
        ]
    return [
        *_varint_lines("n"),
        "if n < 0:",
        "    raise overrun(pos, n)",
        "end = pos + n",
        f"{target} = data[pos:end].decode()",
        "pos = end",
    ]


class RecordSource:
    """Accumulates the source of one record's writer and reader."""

    def __init__(self, record: str, frozen: bool = False, top: bool = False) -> None:
        self.record = record
        # Frozen readers build the core's immutable containers (FrozenDict / FrozenList) so
        # that ``dsh.Event`` shares them instead of deep-copying (see Codec.decode_frozen);
        # the top record itself stays a plain dict (callers take envelope fields out of it).
        self.frozen = frozen
        self.frozen_out = frozen and not top
        self.names: list[str] = []
        self.ns: dict[str, Any] = {
            "NoFit": NoFit,
            "MISSING": _MISSING,
            "ABSENT": ABSENT,
            "SMALL": SMALL,
            "TRUE": TRUE,
            "FALSE": FALSE,
            "long_bytes": long_bytes,
            "read_long": read_long,
            "no_fit": _no_fit,
            "unexpected": _unexpected,
            "as_dict": _as_dict,
            "overrun": _overrun,
            "int_range": _int_range,
            "bad_index": bad_index,
            "block_count": read_block_count,
            "r_null": read_null,
            "RECORD": record,
            "NULL_BRANCH": SMALL[0],  # union index 0, null: the key is absent
            "SECOND_BRANCH": SMALL[1],
            "FD": FrozenDict,
            "FL": FrozenList,
        }
        self.w: list[str] = []
        self.r: list[str] = []
        self.locals: list[tuple[str, str]] = []
        self.n_required = 0
        self.inline = 0
        self.flushed = False

    def _bind(self, obj: Any) -> str:
        name = f"F{len(self.ns)}"
        self.ns[name] = obj
        return name

    def _get_required(self, fname: str) -> None:
        self.names.append(fname)
        self.n_required += 1
        self.w += [
            "try:",
            f"    x = v[{fname!r}]",
            "except KeyError:",
            f"    raise no_fit(RECORD, 'missing {fname}') from None",
        ]

    def _get(self, fname: str) -> None:
        self.names.append(fname)
        self.w.append(f"x = v.get({fname!r}, MISSING)")

    # writer pieces
    def required_primitive(self, fname: str, kind: str) -> None:
        self._get_required(fname)
        self.w += [
            f"if not ({_WRITE_CHECKS[kind]}):",
            f"    raise no_fit(RECORD, {fname!r} + ': expected {kind}, got ' + repr(x))",
            *_write_lines(kind, "x"),
        ]

    def optional_primitive(self, fname: str, kind: str) -> None:
        self._get(fname)
        self.w += [
            "if x is MISSING:",
            "    buf += NULL_BRANCH",
            "else:",
            f"    if not ({_WRITE_CHECKS[kind]}):",
            f"        raise no_fit(RECORD, {fname!r} + ': expected {kind}, got ' + repr(x))",
            "    buf += SECOND_BRANCH",
            *("    " + line for line in _write_lines(kind, "x")),
            "    seen += 1",
        ]

    def optional(self, fname: str, writer: Writer) -> None:
        self._get(fname)
        w = self._bind(writer)
        self.w += [
            "if x is MISSING:",
            "    buf += NULL_BRANCH",
            "else:",
            f"    {w}(x, buf)",
            "    seen += 1",
        ]

    def defaulted(self, fname: str, writer: Writer, default: bytes) -> None:
        self._get(fname)
        w, d = self._bind(writer), self._bind(default)
        self.w += [
            "if x is MISSING:",
            f"    buf += {d}",
            "else:",
            f"    {w}(x, buf)",
            "    seen += 1",
        ]

    def required(self, fname: str, writer: Writer) -> None:
        self._get_required(fname)
        w = self._bind(writer)
        self.w += [
            f"{w}(x, buf)",
        ]

    def _tagged_lines(self, target: str, tagged: Tagged, general: Writer) -> list[str]:
        """Write ``target`` through its tagged branch; on a misfit (rare) the general union
        writer starts over and ends in the JsonValue branch. Flat branches (records of
        required strings and longs) are checked and written inline, saving a call each."""
        field, table, simple = tagged
        t, g = self._bind(table), self._bind(general)
        lines = [f"tag = {target}.get({field!r}) if type({target}) is dict else None"]
        for i, (value, (index, fields)) in enumerate(simple.items()):
            conds = [f"tag == {value!r}", f"len({target}) == {len(fields)}"]
            body: list[str] = []
            for fname, kind in fields:
                if fname == field:  # the tag itself: constant bytes
                    const = bytearray(b"" if body else index)
                    write_str(value, const)
                    body.append(f"buf += {self._bind(bytes(const))}")
                    continue
                local = f"a{self.inline}"
                self.inline += 1
                cond = f"type({local} := {target}.get({fname!r})) is {_PY_TYPE[kind]}"
                if kind == "long":
                    cond += f" and {LONG_MIN} <= {local} <= {LONG_MAX}"
                conds.append(cond)
                if not body:
                    body.append(f"buf += {self._bind(index)}")
                body += _write_lines(kind, local)
            lines.append(f"{'if' if i == 0 else 'elif'} " + " and ".join(conds) + ":")
            lines += ["    " + line for line in body]
        general_lines = [
            f"br = {t}.get(tag) if type(tag) is str else None",
            "if br is None:",
            f"    {g}({target}, buf)",
            "else:",
            "    mark = len(buf)",
            "    buf += br[0]",
            "    try:",
            f"        br[1]({target}, buf)",
            "    except NoFit:",
            "        del buf[mark:]",
            f"        {g}({target}, buf)",
        ]
        if simple:
            return [*lines, "else:", *("    " + line for line in general_lines)]
        return lines + general_lines

    def required_tagged(self, fname: str, tagged: Tagged, general: Writer) -> None:
        self._get_required(fname)
        self.w += [
            *self._tagged_lines("x", tagged, general),
        ]

    def required_array(
        self,
        fname: str,
        tagged: Tagged | None,
        item: Writer,
    ) -> None:
        self._get_required(fname)
        if tagged is not None:
            write_item = self._tagged_lines("y", tagged, item)
        else:
            write_item = [f"{self._bind(item)}(y, buf)"]
        self.w += [
            "if type(x) is not list and not isinstance(x, (list, tuple)):",
            f"    raise no_fit(RECORD, '{fname}: expected an array')",
            "if x:",
            "    n = len(x)",
            "    buf += SMALL[n] if n < 4096 else long_bytes(n)",
            "    for y in x:",
            *("        " + line for line in write_item),
            "buf += NULL_BRANCH",  # the 0 that ends the array
        ]

    def data_field(self, fname: str, writer: Callable[[Any, Any, bytearray], None]) -> None:
        self._get_required(fname)
        w = self._bind(writer)
        self.w += [
            f"{w}(v.get('type'), x, buf)",
        ]

    def build_writer(self) -> Writer:
        known = self._bind(frozenset(self.names))
        body = [
            "if type(v) is not dict:",
            "    v = as_dict(v, RECORD)",
            f"seen = {self.n_required}",  # every required key was found or we raised
            *self.w,
            "if seen != len(v):",
            f"    raise unexpected(RECORD, v, {known})",
        ]
        return self._compile("w_record", "v, buf", body)

    # reader pieces
    # Required fields are read into locals and the dict is built by one literal at the first
    # optional field (or the end): cheaper than a store per key, and keys keep schema order.
    def _target(self, fname: str) -> str:
        if self.flushed:
            return f"out[{fname!r}]"
        local = f"v{len(self.locals)}"
        self.locals.append((fname, local))
        return local

    def _flush(self) -> None:
        if not self.flushed:
            self.r.append("out = {" + ", ".join(f"{f!r}: {v}" for f, v in self.locals) + "}")
            self.flushed = True

    def read_primitive(self, fname: str, kind: str) -> None:
        self.r += _read_lines(kind, self._target(fname))

    def read_optional_primitive(self, fname: str, kind: str) -> None:
        self._flush()
        self.r += [
            "b = data[pos]",
            "if b == 0:",
            "    pos += 1",
            "elif b == 2:",
            "    pos += 1",
            *("    " + line for line in _read_lines(kind, f"out[{fname!r}]")),
            "else:",
            "    raise bad_index(pos)",
        ]

    def read_optional(self, fname: str, reader: Reader) -> None:
        self._flush()
        r = self._bind(reader)
        self.r += [
            "b = data[pos]",
            "if b == 0:",
            "    pos += 1",
            "elif b == 2:",
            f"    out[{fname!r}], pos = {r}(data, pos + 1)",
            "else:",
            "    raise bad_index(pos)",
        ]

    def _dispatch(
        self,
        table: tuple[Reader | None, ...],
        simple: Mapping[int, Sequence[tuple[str, str, str | None]]],
        enums: Mapping[int, tuple[str, ...]] | None = None,
    ) -> list[str]:
        """Lines that read one union value into ``x``. Branches that are flat records of
        strings and longs (blocks, sources, deltas) are read inline, saving a call each."""
        t = self._bind(table)
        lines = ["b = data[pos]"]
        for i, (byte, fields) in enumerate(sorted(simple.items())):
            lines += [f"{'if' if i == 0 else 'elif'} b == {byte}:", "    pos += 1"]
            names = []
            for fname, kind, expected in fields:
                local = f"s{self.inline}"
                self.inline += 1
                names.append((fname, local))
                read = _read_lines(kind, local)
                if expected is not None:
                    # The tag is almost always the expected constant: compare bytes in place
                    # instead of slicing and decoding them.
                    const = bytearray()
                    write_str(expected, const)
                    read = [
                        f"if data.startswith({self._bind(bytes(const))}, pos):",
                        f"    {local} = {expected!r}",
                        f"    pos += {len(const)}",
                        "else:",
                        *("    " + line for line in read),
                    ]
                lines += ["    " + line for line in read]
            literal = "{" + ", ".join(f"{f!r}: {v}" for f, v in names) + "}"
            lines.append(f"    x = FD({literal})" if self.frozen else f"    x = {literal}")
        for j, (byte, symbols) in enumerate(sorted((enums or {}).items())):
            first = not simple and j == 0
            syms = self._bind(
                tuple(symbols[i >> 1] if i < 2 * len(symbols) else None for i in range(0, 128, 2))
            )
            lines += [
                f"{'if' if first else 'elif'} b == {byte}:",
                "    e = data[pos + 1]",
                f"    x = {syms}[e >> 1] if e < 0x80 and not e & 1 else None",
                "    if x is None:",
                "        raise bad_index(pos + 1)",
                "    pos += 2",
            ]
        general = [
            f"r = {t}[b] if b < 128 else None",
            "if r is None:",
            "    raise bad_index(pos)",
            "x, pos = r(data, pos + 1)",
        ]
        if simple or enums:
            lines += ["else:", *("    " + line for line in general)]
        else:
            lines += general
        return lines

    def read_union(
        self,
        fname: str,
        table: tuple[Reader | None, ...],
        has_null: bool,
        simple: Mapping[int, Sequence[tuple[str, str, str | None]]],
        enums: Mapping[int, tuple[str, ...]],
    ) -> None:
        if has_null:
            # Null (absent) first: it is the common case of optional unions.
            self._flush()
            self.r += [
                "if data[pos] == 0:",
                "    pos += 1",
                "else:",
                *("    " + line for line in self._dispatch(table, simple, enums)),
                "    if x is not ABSENT:",
                f"        out[{fname!r}] = x",
            ]
        else:
            self.r += self._dispatch(table, simple, enums)
            self.r.append(f"{self._target(fname)} = x")

    def read_array(
        self,
        fname: str,
        general: Reader,
        item_table: tuple[Reader | None, ...] | None,
        item: Reader,
        simple: Mapping[int, Sequence[tuple[str, str, str | None]]],
    ) -> None:
        """Inline the usual case, a first block with a small count; anything else (counts of 64
        or more, negative counts) goes to the general array reader."""
        g, it = self._bind(general), self._bind(item)
        if item_table is not None:
            read_item = ["    " + line for line in self._dispatch(item_table, simple)]
        else:
            read_item = [f"    x, pos = {it}(data, pos)"]
        target = self._target(fname)
        empty, made = ("FL()", "FL(items)") if self.frozen else ("[]", "items")
        self.r += [
            "n = data[pos]",
            "if n == 0:",
            f"    {target} = {empty}",
            "    pos += 1",
            "elif n < 0x80 and not n & 1:",
            "    pos += 1",
            "    items = []",
            "    for _ in range(n >> 1):",
            *("    " + line for line in read_item),
            "        items.append(x)",
            "    while data[pos] != 0:",  # more blocks: legal, rare
            "        m, pos = block_count(data, pos)",
            "        for _ in range(m):",
            f"            x, pos = {it}(data, pos)",
            "            items.append(x)",
            "    pos += 1",
            f"    {target} = {made}",
            "else:",
            f"    {target}, pos = {g}(data, pos)",
        ]

    def read(self, fname: str, reader: Reader) -> None:
        r = self._bind(reader)
        self.r.append(f"{self._target(fname)}, pos = {r}(data, pos)")

    def build_reader(self) -> Reader:
        self._flush()
        body = [*self.r, "return FD(out), pos" if self.frozen_out else "return out, pos"]
        return self._compile("r_record", "data, pos", body)

    def _compile(self, fn: str, args: str, body: list[str]) -> Callable[..., Any]:
        built = native.compiled(fn, args, body, self.ns)
        if built is not None:
            return built
        src = f"def {fn}({args}):\n" + "".join(f"    {line}\n" for line in body)
        exec(compile(src, f"<schemas.binary {self.record} {fn}>", "exec"), self.ns)
        return self.ns[fn]  # type: ignore[no-any-return]
