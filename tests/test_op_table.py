"""The kernel's op table (kernels/ops.py) is the one place an op's facts live: the ids
are the table's positions, the argument width is the widest op's, the barrier test and
the statistic sizing read its flags (no ranges of ids), each op has its part in each
interpreter and a transform that emits it, and a step that emits more arguments than its op reads is refused."""
from __future__ import annotations

import inspect
import numpy as np
import pytest

from gpudecode import transforms as T
from gpudecode.errors import TransformError
from gpudecode.kernels import _barrier, _pixel, cpu_passes, cuda_program, fused, ops


def test_the_ids_are_the_tables_positions_and_the_width_the_widest_ops():
    assert [ops.ID[op.name] for op in ops.OPS] == list(range(len(ops.OPS))) == list(range(ops.NUM_OPS))
    for i, op in enumerate(ops.OPS):
        assert getattr(ops, op.name) == i and getattr(_pixel, op.name) == i  # the kernels' constants
        assert op.statistic in ("", ops.MEAN, ops.RANGE, ops.HISTOGRAM)
        assert not op.statistic or op.barrier  # a statistic of the whole image is waited for
    assert ops.ARGS == max(op.args for op in ops.OPS) == _pixel.ARGS == fused.ARGS
    assert ops.OPS_ARGS == tuple(op.args for op in ops.OPS)


def test_the_barrier_test_and_the_sizing_read_the_flags():
    order = np.array([[i, -1] for i in range(ops.NUM_OPS)] + [[-1, -1]], np.int32)
    barrier = [op.barrier for op in ops.OPS] + [False]
    assert ops.has(order[:, :1], ops.BARRIER_MASK)[:, 0].tolist() == barrier
    assert [bool(_pixel.is_barrier(i)) for i in range(ops.NUM_OPS)] == barrier[:-1]  # (the Python form)
    assert fused.barrier_levels(order) == 1
    assert fused.barrier_levels(np.array([[i for i, op in enumerate(ops.OPS) if op.barrier]], np.int32)) == \
        sum(op.barrier for op in ops.OPS)
    hist = [op.statistic == ops.HISTOGRAM for op in ops.OPS] + [False]
    assert ops.has(order[:, :1], ops.HISTOGRAM_MASK)[:, 0].tolist() == hist
    assert ops.has(order[:, :1], ops.AUX_MASK)[:, 0].tolist() == [op.aux for op in ops.OPS] + [False]
    assert not ops.has(np.full((2, 3), -1, np.int32), ops.BARRIER_MASK).any()


def _source(fn) -> str:
    return inspect.getsource(fn)


@pytest.mark.parametrize("op", ops.OPS, ids=lambda op: op.name)
def test_each_op_has_its_part_in_both_interpreters(op):
    """A per-pixel op has its formula in apply_op/apply_ops, a barrier in
    _barrier.barrier_pixel (both targets'), with its statistic reduced by the mask of its
    kind on each target; neither interpreter's schedule names a barrier op (the CPU's
    vectorized passes are optional: tests/test_barrier_interpreter.py)."""
    per_pixel = _source(_pixel.apply_op) + _source(_pixel.apply_ops)
    if op.barrier:
        assert op.name in _source(_barrier.barrier_pixel), f"{op.name}: no barrier formula"
        assert callable(getattr(_barrier, f"barrier_{op.name.lower()}", None)), f"{op.name}: no barrier_<name>"
        assert op.name not in _source(cpu_passes._program) + _source(cuda_program._segment_body)
    else:
        assert op.name in per_pixel, f"{op.name}: no per-pixel form"
    if op.statistic:  # reduced by the mask of its kind, not by its name
        mask = {ops.MEAN: "MEAN_MASK", ops.RANGE: "RANGE_MASK", ops.HISTOGRAM: "HISTOGRAM_MASK"}[op.statistic]
        assert mask in _source(cuda_program._block_reduce)
        assert mask in _source(cpu_passes._statistic)


def _composes():
    from timm.data.auto_augment import rand_augment_transform
    from torchvision.transforms import v2

    yield T.Compose([T.Resize((16, 16)), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomGrayscale(1.0),
                     T.RandomSolarize(0.5, 1.0), T.RandomInvert(1.0), T.RandomPosterize(2, 1.0),
                     T.RandomAutocontrast(1.0), T.RandomEqualize(1.0), T.RandomAdjustSharpness(2.0, 1.0),
                     T.GaussianBlur(3, (0.1, 2.0)), T.RandomRotation(10), T.RandomPerspective(0.5, 1.0),
                     T.RandomChannelPermutation(), T.GaussianNoise()])
    yield T.Compose.from_torchvision(v2.Compose([v2.Resize((16, 16)), v2.AugMix()]))
    yield T.Compose.from_torchvision(v2.Compose([v2.Resize((16, 16)), rand_augment_transform(
        "rand-m9-n3-mstd0.5-inc1", {"img_mean": (124, 116, 104)})]))


def test_every_op_of_the_table_is_emitted_by_a_transform():
    """No op of the table without a transform that draws it (the Python draws, which
    the native ones equal), and no op emitted that the table lacks."""
    seen: set[int] = set()
    sizes = [(24, 32)] * 8
    for compose in _composes():
        for seed in range(30):
            _, _, order = compose.encode(compose._python_params(sizes, seed), sizes)
            seen |= set(order[order >= 0].tolist())
    assert seen == set(range(ops.NUM_OPS)), [ops.OPS[i].name for i in set(range(ops.NUM_OPS)) - seen]


def test_a_step_that_emits_more_arguments_than_its_op_reads_is_refused():
    compose = T.Compose([T.Resize((8, 8)), T.RandomPosterize(bits=2, p=1.0)])
    sizes = [(16, 16)]
    params = compose._python_params(sizes, 0)
    geom, args, order = compose.encode(params, sizes)
    assert order[0, 0] == ops.POSTERIZE and args[0, 0, 0] == 4.0  # 2 ** bits
    step = compose.plan.program[0]
    step.emit = lambda p, size, prog: prog.append((ops.POSTERIZE, (4.0, 1.0)))  # emit and table disagree
    with pytest.raises(TransformError, match="POSTERIZE reads 1 argument"):
        compose.encode(params, sizes)
