"""The OpenAPI document of the API, as checked in at docs/openapi.json:
``python -m serve.openapi > docs/openapi.json`` (tests/unit/test_serve_openapi.py fails when
the file is not this output)."""

from __future__ import annotations

import json
from typing import Any

from serve.app import create_app
from serve.settings import ServeSettings

REGENERATE = "python -m serve.openapi > docs/openapi.json"


def document() -> dict[str, Any]:
    # Defaults, not this machine's environment: the document describes the API, not a
    # deployment.
    return create_app(ServeSettings.model_construct()).openapi()


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(render(), end="")
