"""Every saved fuzzing input (tests/fuzz/corpus/, the minimized corpora) and every input
that once crashed a fuzzer (tests/fuzz/regressions/) replayed through the Python fuzz
targets (tests/fuzz/harness.py). The C++ harnesses replay the same files under ASan and
UBSan in `make test` (tests/fuzz/run.py replay)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parent / "fuzz"
sys.path.insert(0, str(FUZZ))

import harness  # noqa: E402

# the C++ targets' inputs also exercise the Python side: (python target, bytes to skip)
_FROM_CPP = {"tar": ("tar_stream", 0), "probe": ("image", 0), "jpeg": ("image", 8), "png": ("png_halves", 8),
             "png_walk": ("png_halves", 0), "warp": ("warp_pick", 0)}


def _inputs():
    out = []
    for kind in ("corpus", "regressions"):
        root = FUZZ / kind
        if not root.is_dir():
            continue
        for d in sorted(p for p in root.iterdir() if p.is_dir()):
            target, skip = (d.name, 0) if d.name in harness.TARGETS else _FROM_CPP.get(d.name, (None, 0))
            if target is None:
                continue
            out.append(pytest.param(target, skip, sorted(d.iterdir()), id=f"{kind}/{d.name}"))
    return out


@pytest.mark.parametrize("target, skip, files", _inputs())
def test_saved_fuzz_inputs(target, skip, files):
    fn = getattr(harness, target)
    for f in files:
        fn(f.read_bytes()[skip:])


def test_every_regression_is_replayed():
    """Each finding is kept where a replay picks it up."""
    names = {p.parent.name for p in (FUZZ / "regressions").rglob("*") if p.is_file()}
    assert names <= set(harness.TARGETS) | set(_FROM_CPP) | {"batch"}
