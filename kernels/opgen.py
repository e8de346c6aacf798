"""The kernels' code that follows the op table (kernels/ops.py), generated from it, so an op
is declared in one place: its row in `OPS`.

Generated, between `# <generated: NAME>` and `# </generated: NAME>` lines:
- ops.py's `constants`: each op's id as a module constant (BRIGHTNESS = 0, ...);
- _pixel.py's `imports`: those constants and the table's masks, for the kernels compiled
  from _pixel's namespace;
- _colour.py's `pixel ops` and `apply_op`: the dispatch over the one-factor per-pixel ops
  (the table's `pixel` ops), each to its `op_<name>` function there, and their ids;
- _barrier.py's `barrier ops` and `barrier_pixel`: the dispatch over the barrier ops (the
  table's `barrier` flag), each to its `barrier_<name>` function there, and their ids.

`make ops-table` writes them (`write()`); tests/test_registry.py checks that the files
hold what the table generates (`stale()` is empty) and that every `pixel` op has its
function. A new per-pixel op is then its row in OPS, its `op_<name>` in _colour.py (a
barrier op: its `barrier_<name>` in _barrier.py; its statistic, if any, is reduced by the
kind its row names), the transform that emits it, its tests, and these generated lines.
"""
from __future__ import annotations

import importlib.util
import os
from types import ModuleType

HERE = os.path.dirname(os.path.abspath(__file__))
MASKS = ("ARGS", "AUX_MASK", "BARRIER_MASK", "HISTOGRAM_MASK", "MEAN_MASK", "NUM_OPS", "RANGE_MASK")


def load_table(folder: str = HERE) -> ModuleType:
    """The op table as `folder`'s ops.py declares it (read from the file, so that `make
    ops-table` in a checkout generates from the checkout's table, not an installed one)."""
    path = os.path.join(folder, "ops.py")
    spec = importlib.util.spec_from_file_location("_op_table", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no op table to read at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def constants(ops: ModuleType) -> list[str]:
    return [f"{op.name} = {i}" for i, op in enumerate(ops.OPS)]


def imports(ops: ModuleType) -> list[str]:
    names = sorted([op.name for op in ops.OPS] + list(MASKS))
    lines: list[str] = []
    line = "from .ops import ("
    for n in names:
        piece = f"{n}, "
        if len(line) + len(piece) > (60 if not lines else 110):  # (the first line carries the noqa comment)
            lines.append(line.rstrip())
            line = "                  "
        line += piece
    lines.append(line.rstrip().rstrip(",") + ")")
    lines[0] += "  # noqa: F401  (the kernels compiled from this namespace read them)"
    return lines


def _dispatch(ops: ModuleType, kind: str, head: list[str], prefix: str, args: str, otherwise: str) -> list[str]:
    """A function whose branches send each op of the table with flag `kind` to its
    `<prefix><name>(<args>)`; `otherwise` for any other op."""
    out = list(head)
    for op in ops.OPS:
        if getattr(op, kind):
            out += [f"    if op == {op.name}:", f"        return {prefix}{op.name.lower()}({args})"]
    return out + [f"    {otherwise}"]


def _ids(ops: ModuleType, kind: str) -> list[str]:
    """The ids a dispatch tests, an import a line (a new op is a line more)."""
    return [f"from .ops import {op.name}" for op in ops.OPS if getattr(op, kind)]


def apply_op(ops: ModuleType) -> list[str]:
    return _dispatch(ops, "pixel", [
        "def apply_op(op, r, g, b, factor, mean):",
        '    """One per-pixel op (the op table\'s `pixel` ops) on one pixel; `mean` is the image\'s',
        '    grey mean (CONTRAST\'s). An op that is not one returns the pixel as it is."""'],
        "op_", "r, g, b, factor, mean", "return r, g, b")


def pixel_ops(ops: ModuleType) -> list[str]:
    return _ids(ops, "pixel")


def barrier_ops(ops: ModuleType) -> list[str]:
    return _ids(ops, "barrier")


def barrier_pixel(ops: ModuleType) -> list[str]:
    return _dispatch(ops, "barrier", [
        "def barrier_pixel(op, a, img, y, x, oh, ow, st, lut, wts):",
        '    """Barrier op `op` (the op table\'s `barrier` ops) at output pixel (y, x) of img, the image',
        '    before it: its barrier_<name> (see above). An op that is not one reads the pixel as it is."""'],
        "barrier_", "a, img, y, x, oh, ow, st, lut, wts",
        "return fetch(img, 0, y, x), fetch(img, 1, y, x), fetch(img, 2, y, x)")


REGIONS = {"ops.py": {"constants": constants}, "_pixel.py": {"imports": imports},
           "_colour.py": {"pixel ops": pixel_ops, "apply_op": apply_op},
           "_barrier.py": {"barrier ops": barrier_ops, "barrier_pixel": barrier_pixel}}


def _fill(text: str, regions: dict, ops: ModuleType) -> str:
    for name, make in regions.items():
        begin, end = f"# <generated: {name}>\n", f"# </generated: {name}>"
        a, b = text.index(begin) + len(begin), text.index(end)
        text = text[:a] + "\n".join(make(ops)) + "\n" + text[b:]
    return text


def stale(folder: str = HERE) -> list[str]:
    """The kernel files of `folder` whose generated lines differ from what its table generates."""
    ops, out = load_table(folder), []
    for name, regions in REGIONS.items():
        with open(os.path.join(folder, name)) as f:
            text = f.read()
        if _fill(text, regions, ops) != text:
            out.append(name)
    return out


def write(folder: str = HERE) -> None:
    """Writes the generated lines into `folder`'s ops.py and _pixel.py (a checkout's kernels/)."""
    ops = load_table(folder)
    for name, regions in REGIONS.items():
        path = os.path.join(folder, name)
        with open(path) as f:
            text = f.read()
        new = _fill(text, regions, ops)
        if new != text:
            with open(path, "w") as f:
                f.write(new)
            print(f"wrote {path}'s generated lines")
