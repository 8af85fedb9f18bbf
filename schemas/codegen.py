"""Generated record code for the compiled codec: what record writers
(:mod:`schemas.writer_source`) and record readers (:mod:`schemas.reader_source`) share.

Like dataclasses, we build each record's writer and reader as Python source once, at schema
compile time: straight-line code with the common cases inlined (strings, longs, absent optional
fields, one- and two-byte varints, flat branches of tagged unions) runs about twice as fast as
a generic loop over the fields, and records are most of what the codec does. The source names
everything else it calls or compares with through its namespace (:meth:`Source.bind`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schemas.avro_io import SMALL, long_bytes


class Source:
    """The namespace and compilation of one record's generated function."""

    def __init__(self, record: str, helpers: dict[str, Any]) -> None:
        self.record = record
        self.ns: dict[str, Any] = {
            "RECORD": record,
            "SMALL": SMALL,
            "long_bytes": long_bytes,
            "NULL_BRANCH": SMALL[0],  # union index 0, null: the key is absent
            "SECOND_BRANCH": SMALL[1],
            **helpers,
        }
        self.inline = 0  # locals made for inlined values: a0, s1, …

    def bind(self, obj: Any) -> str:
        """A name in the namespace for ``obj`` (a helper, nested writer or reader, constant)."""
        name = f"F{len(self.ns)}"
        self.ns[name] = obj
        return name

    def local(self, prefix: str) -> str:
        name = f"{prefix}{self.inline}"
        self.inline += 1
        return name

    def compile(self, fn: str, args: str, body: list[str]) -> Callable[..., Any]:
        src = f"def {fn}({args}):\n" + "".join(f"    {line}\n" for line in body)
        exec(compile(src, f"<schemas {self.record} {fn}>", "exec"), self.ns)
        return self.ns[fn]  # type: ignore[no-any-return]


def indent(lines: list[str], depth: int = 1) -> list[str]:
    pad = "    " * depth
    return [pad + line for line in lines]
