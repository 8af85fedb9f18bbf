"""The generated record readers, compiled to native code with Cython when built.

:mod:`schemas.reader_source` writes each record's reader as Python source. ``python -m
schemas.native_build`` (run by ``make setup`` and by the image's build, ``deploy/Dockerfile``)
takes the source of every reader of the packaged schemas, compiles it with Cython into
``schemas/_native_codec`` and keys each function by a digest of its source. When the codec
generates a reader whose digest the module holds, it takes the native function instead of
``exec``-ing the source; any other reader (a schema added since the build, a store of the
caller's own) is the Python one. Same source, same values,
same errors: the tests decode with both and compare.

Only two things are declared for C: the reader's arguments (``bytes data``, ``Py_ssize_t
pos``) and its two scratch integers (``b``, a byte; ``z``, a two-byte varint below 2**14).
Everything else stays Python objects with Python semantics, so a corrupt record fails the
same way (an ``IndexError`` past the end, an ``OverflowError`` for a length beyond any buffer,
both reported by the codec as a ``CorruptRecordError``).

Whether the native readers are used is the process's choice (``configure``; the services
take it from ``DSH_CODEC_NATIVE``, see ``servicekit.settings.CodecSettings``). By default they are,
when built. The process logs which readers it decodes with when it compiles its first reader
(logger ``schemas.native``, INFO), and :func:`describe` says it on demand.

The build also holds a compiled copy of :mod:`schemas.avro_read` (the varint, string and
JsonValue readers every record reader calls), keyed by a digest of that file's source:
:func:`read_primitives` gives the copy when the digest matches, and the Python module
otherwise.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from schemas import avro_read

MODULE = "schemas._native_codec"

_log = logging.getLogger(__name__)


class Source(NamedTuple):
    """One generated reader as the build needs it."""

    fn: str
    args: str
    body: tuple[str, ...]
    names: tuple[str, ...]  # what its namespace binds (helpers, nested readers, constants)

    @property
    def key(self) -> str:
        return source_key(self.fn, self.args, self.body)


@dataclass
class _State:
    module: ModuleType | None = None
    factories: dict[str, Callable[[dict[str, Any]], Callable[..., Any]]] | None = None
    loaded: bool = False
    enabled: bool = True  # the process's choice (configure)
    suspended: bool = False  # inside disabled(): a test's or benchmark's reference readers
    recorder: list[Source] | None = None
    missing: str = ""  # why the build did not load
    reported: bool = False


_state = _State()


def source_key(fn: str, args: str, body: Sequence[str]) -> str:
    """What identifies a generated function: its name, arguments and body, exactly."""
    text = f"{fn}({args})\n" + "\n".join(body)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def configure(enabled: bool) -> None:
    """Use the native readers (when built) for readers compiled from now on, or not."""
    _state.enabled = enabled


def _factories() -> dict[str, Callable[[dict[str, Any]], Callable[..., Any]]]:
    if not _state.enabled or _state.suspended:
        return {}
    if not _state.loaded:
        _state.loaded = True
        try:
            _state.module = importlib.import_module(MODULE)
            _state.factories = dict(_state.module.FACTORIES)
        except ImportError as exc:  # not built here: the Python readers, as before
            _state.factories = None
            _state.missing = str(exc)
    return _state.factories or {}


def primitives_source() -> str:
    """:mod:`schemas.avro_read`'s source, which the build compiles as it is."""
    return Path(avro_read.__file__).read_text(encoding="utf-8")


def primitives_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:32]


_primitives_key = ""  # of this install's avro_read, once read


def read_primitives() -> ModuleType:
    """What readers compiled from now on call to read varints, strings and JsonValues: the
    build's compiled copy of :mod:`schemas.avro_read` when it was built from this very source
    (and native readers are on), else that module itself. Either has the same functions."""
    global _primitives_key
    if not _factories() or _state.module is None:
        return avro_read
    if not _primitives_key:
        _primitives_key = primitives_key(primitives_source())
    if getattr(_state.module, "PRIMITIVES_KEY", None) != _primitives_key:
        return avro_read  # built from another avro_read: stale, and a rebuild says so
    return _state.module


def describe() -> str:
    """Which readers this process decodes with (readers compiled from now on), in one line."""
    if not _state.enabled:
        return "Python (the native readers are turned off: DSH_CODEC_NATIVE=off)"
    factories = _factories()
    if factories:
        primitives = "native" if read_primitives() is not avro_read else "Python: stale build"
        return (
            f"native ({len(factories)} compiled readers in {MODULE}; read primitives {primitives})"
        )
    if _state.suspended:
        return "Python (inside native.disabled())"
    return f"Python (no native build: {_state.missing or 'it holds no readers'})"


def _report() -> None:
    """Say once per process which readers it decodes with: production must run the code the
    benchmarks measured, and a missing build would otherwise only show as a slower service."""
    if not (_state.reported or _state.suspended):
        _state.reported = True
        _log.info("codec readers: %s", describe())


def compiled(
    fn: str, args: str, body: Sequence[str], ns: dict[str, Any]
) -> Callable[..., Any] | None:
    """The native build of this generated reader, bound to ``ns``; None if there is none."""
    if _state.recorder is not None:
        _state.recorder.append(Source(fn, args, tuple(body), _names(ns, body)))
    else:
        _report()
    factory = _factories().get(source_key(fn, args, body))
    if factory is None:
        return None
    try:
        return factory(ns)
    except KeyError:  # the build binds a name this codec no longer has: stale, use Python
        return None


def available() -> bool:
    """Whether readers compiled from now on may be native (built, and not disabled)."""
    return bool(_factories())


@contextmanager
def disabled() -> Iterator[None]:
    """Readers compiled inside are the Python ones (the tests' reference)."""
    saved = _state.suspended
    _state.suspended = True
    try:
        yield
    finally:
        _state.suspended = saved


@contextmanager
def recording() -> Iterator[list[Source]]:
    """Every reader generated inside, in the order generated (Python readers: the build's
    input)."""
    sources: list[Source] = []
    _state.recorder = sources
    try:
        with disabled():
            yield sources
    finally:
        _state.recorder = None


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _names(ns: dict[str, Any], body: Sequence[str]) -> tuple[str, ...]:
    """The namespace's names the body uses (helpers, nested readers, constants)."""
    used = {name for line in body for name in _IDENTIFIER.findall(line)}
    return tuple(k for k in ns if k in used)
