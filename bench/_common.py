"""The scripts' own bit: where they write (bench/_out). Timing, machine facts and JSON
come from gpudecode.bench.common, the one home of the benchmarks' helpers."""
from __future__ import annotations

from pathlib import Path

from gpudecode.bench.common import machine, rate, timeit, write_json  # noqa: F401

OUT = Path(__file__).resolve().parent / "_out"


def save(name: str, result: dict) -> Path:
    """bench/_out/<name>.json"""
    return write_json(OUT / f"{name}.json", result)
