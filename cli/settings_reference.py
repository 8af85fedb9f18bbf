"""`dsh settings`: every setting of every process, as the Markdown of ``docs/settings.md``.

Generated from the typed settings classes, so the reference cannot drift from the code: a
field's docstring is its description, its annotation and default are read from the class
(``tests/unit/test_settings_reference.py`` fails when the committed file is not this output).
Here in ``cli``, the one layer that may import the writer, the projectors and the local stack
together.
"""

from __future__ import annotations

import argparse
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import SecretStr
from pydantic.fields import FieldInfo

from deploy.local.settings import REPO_ROOT, LocalStackSettings
from producers.writer.settings import WriterSettings
from projectors.export.budget import ExportSettings
from projectors.settings import ProjectorSettings
from serve.settings import ServeSettings
from servicekit.health import ServiceSettings
from servicekit.logs import LogSettings
from servicekit.settings import CodecSettings, KafkaSettings, RedisSettings, StrictSettings

# In the order a reader meets them: connections, services, then the local stack.
SETTINGS_CLASSES: tuple[type[StrictSettings], ...] = (
    KafkaSettings,
    RedisSettings,
    WriterSettings,
    ProjectorSettings,
    ServeSettings,
    LogSettings,
    ServiceSettings,
    CodecSettings,
    ExportSettings,
    LocalStackSettings,
)
REGENERATE = "python -m cli settings > docs/settings.md"

HEADER = f"""\
<!-- Generated from the settings classes by `{REGENERATE}`: edit their field docstrings,
not this file. -->
# Settings reference

Every process reads its settings from environment variables into typed settings classes when
it starts. A variable that carries a known prefix but names no setting stops the process with
`UNKNOWN_SETTING`, so a typo never falls back to a default; a value of the wrong type or out of
range stops it too. Secrets are masked in `repr` and in every log line. When which setting
matters, and why the defaults are what they are: [operations](operations.md).
"""


def register(commands: Any) -> None:
    settings = commands.add_parser(
        "settings",
        help="print every DSH_* setting with its default and meaning (Markdown)",
    )
    settings.set_defaults(handler=_print)


def _print(args: argparse.Namespace) -> int:
    print(render(), end="")
    return 0


def render(classes: Iterable[type[StrictSettings]] = SETTINGS_CLASSES) -> str:
    return HEADER + "".join(_section(cls) for cls in classes)


def prefix_of(cls: type[StrictSettings]) -> str:
    prefix = cls.model_config.get("env_prefix")
    assert isinstance(prefix, str) and prefix, cls
    return prefix


def _section(cls: type[StrictSettings]) -> str:
    rows = [
        f"| `{prefix_of(cls)}{name.upper()}` | {_default(field.default)} | "
        f"{_values(field)} | {_cell(field.description or '')} |"
        for name, field in cls.model_fields.items()
    ]
    return "\n".join(
        [
            "",
            f"## `{prefix_of(cls)}*`",
            "",
            f"{_text(cls.__doc__ or '')} Class `{cls.__name__}` in `{_source(cls)}`.",
            "",
            "| variable | default | values | meaning |",
            "|---|---|---|---|",
            *rows,
            "",
        ]
    )


def _source(cls: type) -> str:
    return cls.__module__.replace(".", "/") + ".py"


def _text(docstring: str) -> str:
    """A docstring as one Markdown paragraph (reStructuredText's double backticks as single)."""
    return " ".join(docstring.split()).replace("``", "`")


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|")


def _default(value: Any) -> str:
    if isinstance(value, SecretStr):
        value = value.get_secret_value()  # a default is in the source: nothing to hide
    if value is None or value == "":
        return "*(none)*"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Path):
        # Machine-independent: the checkout's own state dir, or the user's cache.
        if value.is_relative_to(REPO_ROOT):
            value = value.relative_to(REPO_ROOT)
        elif value.is_relative_to(Path.home()):
            value = Path("~") / value.relative_to(Path.home())
    return f"`{_cell(str(value))}`"


def _values(field: FieldInfo) -> str:
    kind = _kind(field.annotation)
    low = next((m.ge for m in field.metadata if isinstance(m, annotated_types.Ge)), None)
    high = next((m.le for m in field.metadata if isinstance(m, annotated_types.Le)), None)
    if low is not None and high is not None:
        return f"{kind}, {low} to {high}"
    if low is not None:
        return f"{kind} ≥ {low}"
    return kind


def _kind(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        kinds = [_kind(a) for a in get_args(annotation) if a is not type(None)]
        return ", ".join(kinds)
    if origin is Literal:
        return " ".join(f"`{v}`" for v in get_args(annotation))
    names = {
        bool: "`true` `false`",
        int: "integer",
        float: "number",
        str: "text",
        SecretStr: "secret text",
        Path: "path",
    }
    return names[annotation]
