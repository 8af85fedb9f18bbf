"""What `dsh export` checks before it reads anything: the format, the codec it takes, the
library it needs; and what a checkpoint says it exported."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from projectors.export import ExportDependencyError, ExportFormatError, Manifest
from projectors.export.formats import resolve


@pytest.mark.parametrize(
    ("fmt", "codec", "expected"),
    [
        ("avro", None, "deflate"),
        ("avro-flat", None, "deflate"),
        ("parquet", None, "zstd"),
        ("parquet", "snappy", "snappy"),
        ("avro-flat", "null", "null"),
    ],
)
def test_each_format_has_a_default_codec(fmt: str, codec: str | None, expected: str) -> None:
    assert resolve(fmt, codec)[1] == expected


@pytest.mark.parametrize(
    ("fmt", "codec", "code"),
    [("orc", None, "EXPORT_FORMAT"), ("parquet", "deflate", "CODEC"), ("avro", "zstd", "CODEC")],
)
def test_a_format_or_codec_it_does_not_take_is_refused(fmt: str, codec: str, code: str) -> None:
    with pytest.raises(ExportFormatError) as info:
        resolve(fmt, codec)
    assert info.value.code == code and "choose one of" in info.value.message


def test_parquet_without_pyarrow_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    with pytest.raises(ExportDependencyError) as info:
        resolve("parquet", None)
    assert info.value.code == "ANALYTICS_EXTRA_MISSING"
    assert "pip install 'dsh-pipeline[analytics]'" in info.value.message
    assert resolve("avro-flat", None)[0].ext == "avro"  # the Avro formats need no pyarrow


def test_a_checkpoint_records_its_format_and_one_without_exported_avro(tmp_path: Path) -> None:
    Manifest("t", {0: 5}, export_format="parquet").save(tmp_path)
    saved = Manifest.load(tmp_path)
    assert saved is not None and saved.export_format == "parquet"
    legacy = json.loads((tmp_path / "_offsets.json").read_text())
    del legacy["exportFormat"]
    (tmp_path / "_offsets.json").write_text(json.dumps(legacy))
    loaded = Manifest.load(tmp_path)
    assert loaded is not None and (loaded.export_format, loaded.offsets) == ("avro", {0: 5})
