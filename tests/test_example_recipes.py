"""examples/recipes.py, as a user runs it: torchvision's reference recipe (with MixUp/CutMix)
and DINO's multi-crop, passed as torchvision Composes, through the Loader on shards of
photographs it makes."""
from __future__ import annotations

import os
import re

import pytest

import forkrun

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "examples", "recipes.py")


@pytest.mark.parametrize("recipe,want", [
    ("reference", r"step 2: images \(8, 3, 48, 48\) on cpu, labels \(8, 3\)"),  # soft labels: MixUp/CutMix ran
    ("dino", r"step 2: images \[\(8, 3, 48, 48\), \(8, 3, 48, 48\)(, \(8, 3, 20, 20\)){6}\] on cpu, labels \(8,\)"),
])
def test_recipe_example_runs(recipe, want):
    r = forkrun.run([SCRIPT, "--demo", "--recipe", recipe, "--size", "48", "--batch-size", "8"], timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(want, r.stdout), r.stdout[-2000:]
    fused = ["TrivialAugmentWide", "RandomErasing"] if recipe == "reference" else ["RandomApply", "RandomSolarize"]
    assert all(name in r.stdout for name in fused), r.stdout[:2000]  # describe(): what ran fused
