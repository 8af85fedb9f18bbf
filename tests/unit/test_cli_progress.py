"""The progress line: rate, time left, and a finished bar that ends its own line."""

from __future__ import annotations

import io

from cli.progress import progress_bar


def test_the_bar_shows_the_time_left_then_fills_and_ends_its_line() -> None:
    now = [0.0]
    out = io.StringIO()
    show = progress_bar("records", stream=out, width=10, clock=lambda: now[0])
    now[0] = 10.0
    show(1_000, 4_000)
    assert "[##........] 1,000/4,000 records 100/s, 30s left" in out.getvalue()
    assert not out.getvalue().endswith("\n")
    now[0] = 10.01
    show(1_001, 4_000)  # redrawn at most ten times a second
    assert "1,001" not in out.getvalue()
    now[0] = 39.0
    show(3_950, 3_950)  # the estimate replaced by the real count: full, and a new line
    assert out.getvalue().endswith("[##########] 3,950/3,950 records 101/s, in 39s\033[K\n")


def test_long_waits_read_in_minutes_and_hours() -> None:
    now = [0.0]
    out = io.StringIO()
    show = progress_bar("events", stream=out, width=4, clock=lambda: now[0])
    now[0] = 1.0
    show(1, 7_300)
    assert "2h01m left" in out.getvalue()
    now[0] = 2.0
    show(2, 250)
    assert "4m08s left" in out.getvalue()
