"""A service's ``/livez`` or ``/readyz`` as a test sees it: the status and the JSON body."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:  # 503: not ready, with the checks that failed
        return exc.code, json.loads(exc.read())
