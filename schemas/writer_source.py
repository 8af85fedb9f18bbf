"""Generated record writers (see :mod:`schemas.codegen`): straight-line Python that checks a
record's wire JSON against the typed record and writes its Avro bytes in one pass."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from schemas.avro_io import FALSE, TRUE, Writer, write_str
from schemas.codegen import Source, indent
from schemas.rules import LONG_MAX, LONG_MIN, NoFit

# A tagged union: (tag field, tag value → (index bytes, record writer), and for its flat
# branches tag value → (index bytes, [(field, "string" | "long")])).
Tagged = tuple[str, dict[str, tuple[bytes, Writer]], dict[str, tuple[bytes, list[tuple[str, str]]]]]

_MISSING = object()


def _no_fit(record: str, what: str) -> NoFit:
    return NoFit(f"{record}: {what}")


def _unexpected(record: str, v: Mapping[str, Any], known: frozenset[str]) -> NoFit:
    return NoFit(f"{record}: unexpected keys {sorted(set(v) - known)}")


def _as_dict(v: Any, record: str) -> dict[str, Any]:
    if isinstance(v, Mapping):
        return dict(v)
    raise NoFit(f"{record}: expected an object")


_HELPERS = {
    "NoFit": NoFit,
    "MISSING": _MISSING,
    "TRUE": TRUE,
    "FALSE": FALSE,
    "no_fit": _no_fit,
    "unexpected": _unexpected,
    "as_dict": _as_dict,
}
_CHECKS = {
    "string": "type(x) is str",
    "long": f"type(x) is int and {LONG_MIN} <= x <= {LONG_MAX}",
    "int": "type(x) is int and -2147483648 <= x <= 2147483647",
    "boolean": "type(x) is bool",
}
_PY_TYPE = {"string": "str", "long": "int"}


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


class RecordWriterSource(Source):
    """Accumulates the source of one record's writer, field by field."""

    def __init__(self, record: str) -> None:
        super().__init__(record, _HELPERS)
        self.names: list[str] = []
        self.n_required = 0
        self.w: list[str] = []

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

    def required_primitive(self, fname: str, kind: str) -> None:
        self._get_required(fname)
        self.w += [
            f"if not ({_CHECKS[kind]}):",
            f"    raise no_fit(RECORD, {fname!r} + ': expected {kind}, got ' + repr(x))",
            *_write_lines(kind, "x"),
        ]

    def optional_primitive(self, fname: str, kind: str) -> None:
        self._get(fname)
        self.w += [
            "if x is MISSING:",
            "    buf += NULL_BRANCH",
            "else:",
            f"    if not ({_CHECKS[kind]}):",
            f"        raise no_fit(RECORD, {fname!r} + ': expected {kind}, got ' + repr(x))",
            "    buf += SECOND_BRANCH",
            *indent(_write_lines(kind, "x")),
            "    seen += 1",
        ]

    def optional(self, fname: str, writer: Writer, absent: bytes = b"\x00") -> None:
        """An optional (null first) or defaulted field: ``absent`` is written for a missing key."""
        self._get(fname)
        w = self.bind(writer)
        missing = "NULL_BRANCH" if absent == b"\x00" else self.bind(absent)
        self.w += [
            "if x is MISSING:",
            f"    buf += {missing}",
            "else:",
            f"    {w}(x, buf)",
            "    seen += 1",
        ]

    def required(self, fname: str, writer: Writer) -> None:
        self._get_required(fname)
        self.w.append(f"{self.bind(writer)}(x, buf)")

    def _tagged_lines(self, target: str, tagged: Tagged, general: Writer) -> list[str]:
        """Write ``target`` through its tagged branch; on a misfit (rare) the general union
        writer starts over and ends in the JsonValue branch. Flat branches (records of
        required strings and longs) are checked and written inline, saving a call each."""
        field, table, simple = tagged
        t, g = self.bind(table), self.bind(general)
        lines = [f"tag = {target}.get({field!r}) if type({target}) is dict else None"]
        for i, (value, (index, fields)) in enumerate(simple.items()):
            conds = [f"tag == {value!r}", f"len({target}) == {len(fields)}"]
            body: list[str] = []
            for fname, kind in fields:
                if fname == field:  # the tag itself: constant bytes
                    const = bytearray(b"" if body else index)
                    write_str(value, const)
                    body.append(f"buf += {self.bind(bytes(const))}")
                    continue
                local = self.local("a")
                cond = f"type({local} := {target}.get({fname!r})) is {_PY_TYPE[kind]}"
                if kind == "long":
                    cond += f" and {LONG_MIN} <= {local} <= {LONG_MAX}"
                conds.append(cond)
                if not body:
                    body.append(f"buf += {self.bind(index)}")
                body += _write_lines(kind, local)
            lines.append(f"{'if' if i == 0 else 'elif'} " + " and ".join(conds) + ":")
            lines += indent(body)
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
            return [*lines, "else:", *indent(general_lines)]
        return lines + general_lines

    def required_tagged(self, fname: str, tagged: Tagged, general: Writer) -> None:
        self._get_required(fname)
        self.w += self._tagged_lines("x", tagged, general)

    def required_array(self, fname: str, tagged: Tagged | None, item: Writer) -> None:
        self._get_required(fname)
        if tagged is not None:
            write_item = self._tagged_lines("y", tagged, item)
        else:
            write_item = [f"{self.bind(item)}(y, buf)"]
        self.w += [
            "if type(x) is not list and not isinstance(x, (list, tuple)):",
            f"    raise no_fit(RECORD, '{fname}: expected an array')",
            "if x:",
            "    n = len(x)",
            "    buf += SMALL[n] if n < 4096 else long_bytes(n)",
            "    for y in x:",
            *indent(write_item, 2),
            "buf += NULL_BRANCH",  # the 0 that ends the array
        ]

    def data_field(self, fname: str, writer: Callable[[Any, Any, bytearray], None]) -> None:
        """An event's ``data``: ``writer`` takes the event's type too."""
        self._get_required(fname)
        self.w.append(f"{self.bind(writer)}(v.get('type'), x, buf)")

    def build(self) -> Writer:
        known = self.bind(frozenset(self.names))
        body = [
            "if type(v) is not dict:",
            "    v = as_dict(v, RECORD)",
            f"seen = {self.n_required}",  # every required key was found or we raised
            *self.w,
            "if seen != len(v):",
            f"    raise unexpected(RECORD, v, {known})",
        ]
        return self.compile("w_record", "v, buf", body)
