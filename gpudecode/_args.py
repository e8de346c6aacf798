"""argparse types for gpudecode's command lines and its benchmark scripts: a value that is
not one is argparse's usage error naming the option (exit 2), never a traceback."""
from __future__ import annotations

import argparse
import math
from typing import Any


def _whole(low: int, high: int = 1 << 40) -> Any:
    """An argparse type: a whole number in [low, high] (argparse then names the option;
    the bound keeps a typo like 99999999999999999999 from overflowing a size far inside)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"{v} is below {low}")
        if v > high:
            raise argparse.ArgumentTypeError(f"{v} is above {high}")
        return v
    parse.__name__ = f"whole number >= {low}"
    return parse


def _number(*, positive: bool, high: float = math.inf) -> Any:
    """An argparse type: a finite number, > 0 (positive) or >= 0, at most `high`."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(v) or (v <= 0 if positive else v < 0):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number {'> 0' if positive else '>= 0'}")
        if v > high:
            raise argparse.ArgumentTypeError(f"{text} is above {high:g}")
        return v
    parse.__name__ = "number"
    return parse


COUNT, NONNEG, POSITIVE = _whole(1), _whole(0), _number(positive=True)
DURATION = _number(positive=False, high=3_600_000)  # milliseconds: at most an hour (a sleep that long is a typo)
KIB = _whole(1, 1 << 20)  # a read size: at most 1 GiB


def _counts(text: str) -> list[int]:
    """A comma-separated list of whole numbers >= 1 (`64,128,256`)."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers")
    return [COUNT(p) for p in parts]


_counts.__name__ = "list of whole numbers"
COUNTS = _counts
