"""Argument types the commands share: a number that makes no sense is refused by the parser,
naming its option, before any command starts."""

from __future__ import annotations

import argparse
import math


def seconds(text: str) -> float:
    """A duration in seconds: finite and above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text!r}")
    return value


def lines(text: str) -> int:
    """A count of lines: 0 or more, or -1 for all of them."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < -1:
        raise argparse.ArgumentTypeError(f"must be 0 or more (-1: all), got {text!r}")
    return value
