"""Generated record readers (see :mod:`schemas.codegen`): straight-line Python that turns a
record's Avro bytes back into wire JSON, plain or frozen. A reader of the packaged schemas is
taken from the native build when it holds this exact source (:mod:`schemas.native`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType

from dsh.json_snapshot import FrozenDict, FrozenList
from schemas import avro_read, native
from schemas.avro_io import ABSENT, Reader, bad_index, write_str
from schemas.codegen import Source, indent
from schemas.errors import CorruptRecordError

# Per union branch index byte: the fields (name, "string" | "long", expected tag value or
# None) of a flat record read inline.
Flat = Mapping[int, Sequence[tuple[str, str, str | None]]]


def _overrun(pos: int, n: int) -> CorruptRecordError:
    return CorruptRecordError(f"string length {n} at offset {pos} is negative")


def _int_range(pos: int) -> CorruptRecordError:
    return CorruptRecordError(f"int out of range before offset {pos}")


_HELPERS = {
    "ABSENT": ABSENT,
    "overrun": _overrun,
    "int_range": _int_range,
    "bad_index": bad_index,
    "FD": FrozenDict,
    "FL": FrozenList,
}


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


def _null_or(present: list[str]) -> list[str]:
    """A ``["null", T]`` union: branch 0 (null) only steps past the index, branch 1 runs
    ``present`` at the byte after the branch index."""
    return [
        "b = data[pos]",
        "if b == 0:",
        "    pos += 1",
        "elif b == 2:",
        *indent(present),
        "else:",
        "    raise bad_index(pos)",
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


class RecordReaderSource(Source):
    """Accumulates the source of one record's reader, field by field.

    Required fields are read into locals and the dict is built by one literal at the first
    optional field (or the end): cheaper than a store per key, and keys keep schema order.
    Frozen readers build the core's immutable containers (FrozenDict / FrozenList) so that
    ``dsh.Event`` shares them instead of deep-copying (see Codec.decode_frozen); the ``top``
    record itself stays a plain dict (callers take envelope fields out of it).
    """

    def __init__(
        self,
        record: str,
        frozen: bool = False,
        top: bool = False,
        primitives: ModuleType = avro_read,
    ) -> None:
        """``primitives``: where ``read_long`` and ``block_count`` come from (the native copy
        of :mod:`schemas.avro_read` when the caller has it)."""
        helpers = {
            **_HELPERS,
            "read_long": primitives.read_long,
            "block_count": primitives.read_block_count,
        }
        super().__init__(record, helpers)
        self.frozen = frozen
        self.frozen_out = frozen and not top
        self.r: list[str] = []
        self.locals: list[tuple[str, str]] = []
        self.flushed = False

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

    def primitive(self, fname: str, kind: str) -> None:
        self.r += _read_lines(kind, self._target(fname))

    def optional_primitive(self, fname: str, kind: str) -> None:
        self._flush()
        self.r += _null_or(["pos += 1", *_read_lines(kind, f"out[{fname!r}]")])

    def optional(self, fname: str, reader: Reader) -> None:
        self._flush()
        self.r += _null_or([f"out[{fname!r}], pos = {self.bind(reader)}(data, pos + 1)"])

    def _flat_lines(self, fields: Sequence[tuple[str, str, str | None]]) -> list[str]:
        """Read a flat record of strings and longs into ``x``."""
        lines: list[str] = []
        names = []
        for fname, kind, expected in fields:
            local = self.local("s")
            names.append((fname, local))
            read = _read_lines(kind, local)
            if expected is not None:
                # The tag is almost always the expected constant: compare bytes in place
                # instead of slicing and decoding them.
                const = bytearray()
                write_str(expected, const)
                read = [
                    f"if data.startswith({self.bind(bytes(const))}, pos):",
                    f"    {local} = {expected!r}",
                    f"    pos += {len(const)}",
                    "else:",
                    *indent(read),
                ]
            lines += read
        literal = "{" + ", ".join(f"{f!r}: {v}" for f, v in names) + "}"
        return [*lines, f"x = FD({literal})" if self.frozen else f"x = {literal}"]

    def _dispatch(
        self,
        table: tuple[Reader | None, ...],
        flat: Flat,
        enums: Mapping[int, tuple[str, ...]] | None = None,
    ) -> list[str]:
        """Lines that read one union value into ``x``. Branches that are flat records of
        strings and longs (blocks, sources, deltas) and enums are read inline, saving a call
        each; the rest through ``table``, the readers by index byte."""
        t = self.bind(table)
        lines = ["b = data[pos]"]
        for i, (byte, fields) in enumerate(sorted(flat.items())):
            lines += [f"{'if' if i == 0 else 'elif'} b == {byte}:", "    pos += 1"]
            lines += indent(self._flat_lines(fields))
        for j, (byte, symbols) in enumerate(sorted((enums or {}).items())):
            first = not flat and j == 0
            syms = self.bind(
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
        if flat or enums:
            return [*lines, "else:", *indent(general)]
        return lines + general

    def union(
        self,
        fname: str,
        table: tuple[Reader | None, ...],
        has_null: bool,
        flat: Flat,
        enums: Mapping[int, tuple[str, ...]],
    ) -> None:
        if has_null:
            # Null (absent) first: it is the common case of optional unions.
            self._flush()
            self.r += [
                "if data[pos] == 0:",
                "    pos += 1",
                "else:",
                *indent(self._dispatch(table, flat, enums)),
                "    if x is not ABSENT:",
                f"        out[{fname!r}] = x",
            ]
        else:
            self.r += self._dispatch(table, flat, enums)
            self.r.append(f"{self._target(fname)} = x")

    def array(
        self,
        fname: str,
        general: Reader,
        item_table: tuple[Reader | None, ...] | None,
        item: Reader,
        flat: Flat,
    ) -> None:
        """Inline the usual case, a first block with a small count; anything else (counts of 64
        or more, negative counts) goes to the general array reader."""
        g, it = self.bind(general), self.bind(item)
        if item_table is not None:
            read_item = self._dispatch(item_table, flat)
        else:
            read_item = [f"x, pos = {it}(data, pos)"]
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
            *indent(read_item, 2),
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

    def field(self, fname: str, reader: Reader) -> None:
        self.r.append(f"{self._target(fname)}, pos = {self.bind(reader)}(data, pos)")

    def build(self) -> Reader:
        self._flush()
        body = [*self.r, "return FD(out), pos" if self.frozen_out else "return out, pos"]
        built = native.compiled("r_record", "data, pos", body, self.ns)
        return built or self.compile("r_record", "data, pos", body)
