"""Conversion by declaration: each of our classes says which torchvision or timm
transforms it stands for (`converts=`) and converts them itself; the table of
conversions and transforms.__all__'s ops are derived from those declarations, and a
declaration without its conversion, a name declared twice or a name of neither package
fails when the class is defined, as does one that does not say where it may stand
in a Compose (its group); `gpudecode ops` lists the declarations."""
from __future__ import annotations

import importlib
import pathlib

import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2

from gpudecode.transforms import base as _steps, containers, convert as _convert, ops_table
from gpudecode import transforms as T
from gpudecode.transforms.base import fingerprint_text


def _find(name: str):
    package, cls = name.split(".", 1)
    modules = (["torchvision.transforms.v2", "torchvision.transforms"] if package == "torchvision" else
               ["timm.data", "timm.data.transforms", "timm.data.random_erasing", "timm.data.auto_augment"])
    for m in modules:
        try:
            found = getattr(importlib.import_module(m), cls, None)
        except ImportError:  # (timm is optional)
            continue
        if isinstance(found, type):
            return found
    return None


def test_each_declared_name_is_a_transform_of_that_package():
    for name, cls in _steps.CONVERTS.items():
        if name.startswith("timm."):
            pytest.importorskip("timm")
        found = _find(name)
        assert found is not None, f"{cls.__name__} declares {name}, which does not exist"
        assert _convert.key(found.__new__(found)) == name  # (the key conversion looks it up by)


def test_the_declarations_are_checked_where_the_class_is_defined():
    with pytest.raises(TypeError, match="declares converts=.* but defines no convert"):
        class NoConversion(T.Transform, converts="torchvision.JPEG"):
            pass
    with pytest.raises(TypeError, match="converted already \\(by Resize\\)"):
        class Twice(T.Transform, converts="torchvision.Resize"):
            group = "geometry"

            @classmethod
            def convert(cls, t, floats):
                return cls()
    with pytest.raises(TypeError, match="is not torchvision.<Name> or timm.<Name>"):
        class Elsewhere(T.Transform, converts="kornia.Resize"):
            group = "geometry"

            @classmethod
            def convert(cls, t, floats):
                return cls()
    with pytest.raises(TypeError, match="its group '' is not one of"):
        class Nowhere(T.Transform, converts="torchvision.JPEG"):
            @classmethod
            def convert(cls, t, floats):
                return cls()
    assert "torchvision.JPEG" not in _steps.CONVERTS  # (a failed declaration registers nothing)


def test_all_names_each_op_class_of_a_torchvision_name():
    ops = {cls.__name__ for name, cls in _steps.CONVERTS.items() if name == f"torchvision.{cls.__name__}"}
    assert ops <= set(T.__all__) and all(hasattr(T, n) for n in T.__all__)
    assert len(T.__all__) == len(set(T.__all__))
    assert {"RandomResizedCrop", "ColorJitter", "GaussianBlur", "AugMix", "RandomOrder", "ToDtype"} <= ops


@pytest.mark.parametrize("tv,ours", [
    (v2.RandomHorizontalFlip(0.3), T.RandomHorizontalFlip),
    (v1.RandomGrayscale(0.2), T.RandomGrayscale),
    (v2.RandomChoice([v2.RandomInvert(), v2.RandomEqualize()]), containers.SampleRandomChoice),
    (v2.ToDtype(torch.float16, scale=True), T.ToDtype),
    (v1.ToTensor(), T.ToDtype),
    (v2.RandomPerspective(0.3, 0.4, fill=5), T.RandomPerspective),
])
def test_a_transform_converts_through_the_class_that_declared_it(tv, ours):
    steps = _convert.convert(tv)
    assert len(steps) == 1 and type(steps[0]) is ours


def test_input_conversions_are_dropped_and_the_rest_refused_with_their_reason():
    assert _convert.convert(v2.Compose([v2.ToImage(), v2.PILToTensor(), v2.ToPureTensor()])) == []
    # (RGB is a step: a grey image made three channels; on RGB images it changes nothing, so its fingerprint is the
    # Compose's without it, as before it was a step)
    assert [type(t) for t in _convert.convert(v2.Compose([v2.RGB(), v2.Identity()]))] == [T.RGB]
    with_them = T.Compose.from_torchvision(v2.Compose([v2.RGB(), v2.RandomCrop(8), v2.Identity(), v2.RandomInvert()]))
    without = T.Compose.from_torchvision(v2.Compose([v2.RandomCrop(8), v2.RandomInvert()]))
    assert fingerprint_text(with_them) == fingerprint_text(without)
    assert repr(with_them.plan.program) == repr(without.plan.program)
    with pytest.raises(T.TransformError, match=r"torchvision.transforms.v2.JPEG cannot be fused \(step 2 of 2\): "
                                               r"it re-encodes each image"):
        _convert.convert(v2.Compose([v2.RandomInvert(), v2.JPEG(50)]))


def test_the_ops_listing_is_generated_from_the_declarations():
    """`gpudecode ops` (and the refusal messages) list what the classes declare; the
    listing is a generated module (the CLI answers without torch): stale, this fails."""
    from gpudecode import _ops_table

    with open(_ops_table.__file__) as f:
        assert f.read() == ops_table.table_source(), "`make ops-table` regenerates gpudecode/_ops_table.py"
    readme = pathlib.Path(__file__).resolve().parents[1] / "README.md"
    text = readme.read_text()
    assert ops_table.with_readme_block(text) == text, "`make ops-table` regenerates the README's list"
    package = pathlib.Path(ops_table.PACKAGE_FILE).read_text()
    assert ops_table.with_doc_block(package) == package, "`make ops-table` regenerates the package doc's list"
    assert "GaussianNoise" in T.__doc__ and "timm's RandAugment" in T.__doc__
    text = dict(_steps.OPS)
    assert text["flips (any order; after the geometry, or first, before it)"].startswith(
        "RandomHorizontalFlip, RandomVerticalFlip (first: ")
    assert "timm's RandAugment, AutoAugment, AugMixAugment" in text["policies"]
    assert all(f"timm's {n}" in _steps.SUPPORTED or n in _steps.SUPPORTED
               for n in (name.split(".", 1)[1] for name in _steps.CONVERTS))


def test_the_kernels_op_ids_and_dispatch_are_generated_from_the_op_table(tmp_path):
    """An op is declared once, by its row in kernels/ops.py's table: its id constant, the
    kernels' imports, the per-pixel dispatch (`apply_op`) and the barriers' (`barrier_pixel`)
    are generated from it (`make ops-table`, kernels/opgen.py); stale, this fails. Rows added
    to a copy of the table come out in the copy's generated lines, each dispatched to its
    `op_<name>` or `barrier_<name>`."""
    import shutil

    import numpy as np

    from gpudecode.kernels import _colour, _pixel, ops, opgen

    assert opgen.stale() == []
    pixel = [op for op in ops.OPS if op.pixel]
    assert {op.name for op in pixel} >= {"BRIGHTNESS", "CONTRAST", "HUE", "INVERT", "PERMUTE_CHANNELS"}
    for i, op in enumerate(ops.OPS):
        assert getattr(ops, op.name) == i and getattr(_pixel, op.name) == i
    rng = np.random.default_rng(0)
    for op in pixel:  # the dispatch gives what the op's own function gives (plain Python: the source both compile)
        fn = getattr(_colour, f"op_{op.name.lower()}")
        for _ in range(20):
            r, g, b, mean = (np.float32(v) for v in rng.random(4))
            factor = np.float32(rng.choice([0.3, 1.7, 0.25, 5.0, 21.0])) if op.name != "HUE" else np.float32(0.1)
            assert _pixel.apply_op(ops.ID[op.name], r, g, b, factor, mean) == fn(r, g, b, factor, mean), op.name
    r, g, b = np.float32(0.2), np.float32(0.5), np.float32(0.9)
    assert _pixel.apply_op(ops.AFFINE, r, g, b, np.float32(2.0), np.float32(0.0)) == (r, g, b)  # not a pixel op

    copy = tmp_path / "kernels"
    copy.mkdir()
    for name in ("ops.py", "_pixel.py", "_colour.py", "_barrier.py"):
        shutil.copy(pathlib.Path(opgen.HERE) / name, copy / name)
    table = (copy / "ops.py").read_text()
    row = '    Op("GAUSSIAN_NOISE",'
    table = table.replace(row, '    Op("GAMMA", 1, pixel=True, doc="a test op"),\n'
                                '    Op("GLOW", 1, True, doc="a test barrier op"),\n' + row)
    (copy / "ops.py").write_text(table)
    assert opgen.stale(str(copy)) == ["ops.py", "_pixel.py", "_colour.py", "_barrier.py"]
    opgen.write(str(copy))
    assert opgen.stale(str(copy)) == []
    made = (copy / "_colour.py").read_text()
    assert "    if op == GAMMA:\n        return op_gamma(r, g, b, factor, mean)" in made and "import GAMMA\n" in made
    assert "GAMMA, " in (copy / "_pixel.py").read_text()
    barrier = (copy / "_barrier.py").read_text()
    assert "    if op == GLOW:\n        return barrier_glow(a, img, y, x, oh, ow, st, lut, wts)" in barrier
    assert "from .ops import GLOW\n" in barrier and "op_glow" not in made
    ids = (copy / "ops.py").read_text()
    gamma = next(i for i, op in enumerate(opgen.load_table(str(copy)).OPS) if op.name == "GAMMA")
    assert f"GAMMA = {gamma}\nGLOW = {gamma + 1}\nGAUSSIAN_NOISE = {gamma + 2}" in ids
