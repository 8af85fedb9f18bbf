"""docs/settings.md is what the settings classes generate, and every setting describes itself."""

from __future__ import annotations

import re

from pydantic_settings import BaseSettings

from cli.settings_reference import REGENERATE, SETTINGS_CLASSES, render
from servicekit.settings import StrictSettings
from tests.docs_blocks import ROOT


def test_the_reference_is_what_the_settings_classes_generate() -> None:
    committed = (ROOT / "docs" / "settings.md").read_text()
    assert committed == render(), (
        f"docs/settings.md is not what the settings classes generate; regenerate it: {REGENERATE}"
    )


def _subclasses(cls: type[BaseSettings]) -> set[type[BaseSettings]]:
    direct = set(cls.__subclasses__())
    return direct.union(*(_subclasses(c) for c in direct))


def test_every_settings_class_is_in_the_reference() -> None:
    # The classes imported by cli.settings_reference are all there are: the layers let no
    # other package define one that it could not import.
    found = {c for c in _subclasses(StrictSettings) if not c.__module__.startswith("tests.")}
    assert found == set(SETTINGS_CLASSES)


def test_every_setting_says_what_it_is_for_in_a_sentence_or_two() -> None:
    for cls in SETTINGS_CLASSES:
        for name, field in cls.model_fields.items():
            description = field.description or ""
            assert description, f"{cls.__name__}.{name}: add a docstring under the field"
            assert len(description) <= 300, f"{cls.__name__}.{name}: keep it to two sentences"
            assert not re.search(r"BENCHMARKS|\bround\b", description, flags=re.I), (
                f"{cls.__name__}.{name}: the why belongs in docs/operations.md"
            )
