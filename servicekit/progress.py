"""How long work (an import, an export, a replay, a partition scan) reports progress:
``progress(done, total)`` now and then, and a last call with ``done == total`` at the real count
(a total known only roughly at the start, such as offsets holding aborted records, is corrected
there)."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int], None]
