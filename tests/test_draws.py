"""The batch draws (gpudecode.transforms.draws): the native columns against the Python path (each
sample's draws in Python over its own stream, `Compose._python_params`), draw by draw,
for every plan the native call takes; the kernel arrays made from the columns against
`Compose.encode` of the dicts; the plans it leaves to Python; and the pixels."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudecode import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _geometry() -> st.SearchStrategy:
    side = st.integers(1, 300)
    size = st.one_of(side, st.tuples(side, side))
    lo_hi = st.tuples(st.floats(0.01, 1.0), st.floats(0.01, 1.0)).map(sorted)
    ratio = st.tuples(st.floats(0.2, 5.0), st.floats(0.2, 5.0)).map(sorted)
    pad = st.one_of(st.none(), st.integers(0, 9), st.tuples(*[st.integers(0, 9)] * 4))
    return st.one_of(
        st.just([]),
        st.builds(lambda s, sc, r: [T.RandomResizedCrop(s, scale=tuple(sc), ratio=tuple(r))], size, lo_hi, ratio),
        st.builds(lambda s: [T.Resize(s)], st.tuples(side, side)),
        st.builds(lambda s: [T.CenterCrop(s)], size),
        st.builds(lambda s, p: [T.RandomCrop(s, padding=p, pad_if_needed=True)], size, pad),
        st.builds(lambda s, m, c: [T.Resize(s, max_size=m), T.CenterCrop(c)], side,
                  st.one_of(st.none(), st.integers(301, 400)), size),
        st.builds(lambda s, c, p: [T.Resize(s), T.RandomCrop(c, padding=p, pad_if_needed=True)], side, size, pad),
        st.builds(lambda p: [T.Pad(p)], st.integers(0, 9)),
        # (a crop of a RandomResizedCrop's output: its window, in columns of their own)
        st.builds(lambda s, c: [T.RandomResizedCrop(s), T.CenterCrop(c)], size, size),
        st.builds(lambda s, c, p: [T.RandomResizedCrop(s), T.RandomCrop(c, padding=p, pad_if_needed=True)], size, size,
                  pad),
        st.builds(lambda s, p: [T.Resize(s), T.Pad(p)], st.one_of(side, st.tuples(side, side)),
                  st.tuples(*[st.integers(0, 9)] * 4)),
        # (a crop of a crop, unpadded and inside it: one crop, the offsets added; after a Resize too)
        st.builds(_nested, size, pad, st.floats(0.05, 1.0), st.booleans(), st.booleans(), st.one_of(st.none(), side)),
    )


def _nested(a, pad, part, centred_first, centred_second, resize):
    a = (a, a) if isinstance(a, int) else a
    first = T.CenterCrop(a) if centred_first else T.RandomCrop(a, padding=pad, pad_if_needed=True)
    b = (max(1, int(a[0] * part)), max(1, int(a[1] * part)))
    second = T.CenterCrop(b) if centred_second else T.RandomCrop(b)
    return ([T.Resize(resize)] if resize else []) + [first, second]


def _jitter() -> st.SearchStrategy:
    factor = st.one_of(st.just(0), st.floats(0.0, 0.9), st.tuples(st.floats(0, 2), st.floats(0, 2)).map(sorted))
    hue = st.one_of(st.just(0), st.floats(0.0, 0.5), st.tuples(st.floats(-0.5, 0.5), st.floats(-0.5, 0.5)).map(sorted))
    return st.one_of(st.just([]), st.builds(lambda b, c, s, h: [T.ColorJitter(b, c, s, h)], factor, factor, factor, hue))


@st.composite
def _plans(draw) -> T.Compose:
    steps = list(draw(_geometry()))
    flips = []
    if draw(st.booleans()):
        flips.append(T.RandomHorizontalFlip(draw(st.sampled_from([0.0, 0.5, 1.0, 0.3]))))
    if draw(st.booleans()):
        flips.append(T.RandomVerticalFlip(draw(st.sampled_from([0.0, 0.5, 1.0]))))
    # (the flips before the geometry, or after it: before, its windows are mirrored on flipped samples)
    steps = flips + steps if draw(st.booleans()) else steps + flips
    program = list(draw(_jitter()))
    grey = draw(st.sampled_from([None, 1, 3]))  # (a Grayscale draws nothing: the native path encodes its op)
    if grey is not None:
        program.insert(draw(st.integers(0, len(program))), T.Grayscale(grey))
    steps += program
    source = draw(st.booleans())  # (images of one channel: the ops after it made one channel's)
    if draw(st.booleans()):
        steps.append(T.Normalize([0.5] * 3, [0.25] * 3) if grey == 1 or source else T.Normalize(MEAN, STD))
    return T.Compose(steps, grey=source)


def _same_arrays(a: tuple, b: tuple) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


@settings(max_examples=250, deadline=None)
@given(_plans(), st.lists(st.tuples(st.integers(1, 700), st.integers(1, 700)), min_size=1, max_size=12),
       st.integers(0, 2 ** 64 - 1), st.integers(0, 7), st.integers(-(2 ** 62), 2 ** 62), st.data())
def test_native_draws_are_the_python_paths(tf, sizes, seed, epoch, first, data):
    assert tf.native_spec is not None
    if tf.plan.out_size is None:  # no geometry (or a Pad alone, a Resize of the shorter side): a batch has one size
        sizes = [sizes[0]] * len(sizes)
    indices = [first + 3 * k for k in range(len(sizes))]
    drawn = tf.draw_batch(sizes, seed, epoch=epoch, indices=np.array(indices, np.int64))
    assert drawn.columns is not None
    reference = tf._python_params(sizes, seed, epoch=epoch, indices=indices)
    got = drawn.dicts()
    assert got == reference
    for g, r in zip(got, reference):  # the same keys in the same order, the same types
        assert list(g) == list(r)
        assert all(type(g[k]) is type(r[k]) for k in g)
        assert all(math.copysign(1, g[k]) == math.copysign(1, r[k]) for k in g if isinstance(g[k], float))
    assert drawn.boxes().dtype == np.int64
    assert drawn.boxes().tolist() == [list(b) for b in tf.decode_boxes(reference, sizes)]
    assert tf.decode_boxes(drawn, sizes) == tf.decode_boxes(reference, sizes)
    rows = np.array(data.draw(st.lists(st.integers(0, len(sizes) - 1), min_size=1, max_size=16)), np.int64)
    try:
        expected = tf.encode([reference[k] for k in rows], [sizes[k] for k in rows])
    except ValueError as e:  # (an empty crop: RandomResizedCrop's fallback on a sliver, as torchvision's)
        with pytest.raises(ValueError, match=re.escape(str(e))):
            drawn.encode(rows)
    else:
        _same_arrays(drawn.encode(rows), expected)
    assert tf.make_params(sizes, seed, epoch=epoch, indices=indices) == reference


@pytest.mark.parametrize("sizes", [[(1, 1)], [(1, 1000), (1000, 1)], [(2, 3), (3, 2), (9, 10), (375, 500)]])
@pytest.mark.parametrize("steps", [[T.RandomResizedCrop(8)], [T.RandomResizedCrop(8, scale=(1.0, 1.0), ratio=(1, 1))],
                                   [T.RandomResizedCrop(8, scale=(0.0, 0.01), ratio=(0.01, 100))],
                                   [T.Resize(7), T.CenterCrop(9)], [T.CenterCrop(9)], [T.Resize(3, max_size=4)]])
def test_native_draws_at_the_edges(steps, sizes):
    """RandomResizedCrop's fallback (ten tries missed), padding crops, degenerate sizes,
    indices at the edges of 64 bits."""
    tf = T.Compose(steps + [T.CenterCrop(5)] if isinstance(steps[-1], T.Resize) else steps)
    for seed in range(40):
        indices = [0, 2 ** 63 - 1, -1, -(2 ** 63)][:len(sizes)]
        drawn = tf.draw_batch(sizes, seed, indices=np.array(indices, np.int64))
        assert drawn.columns is not None
        assert drawn.dicts() == tf._python_params(sizes, seed, indices=indices)


def test_plans_the_native_draws_leave_to_python():
    """A program step other than a plain ColorJitter, RandomErasing, a subclass of a
    step: the Python path draws (the same dicts through the same Draws)."""
    class MyFlip(T.RandomHorizontalFlip):
        pass

    for steps in ([T.RandomResizedCrop(8), T.RandomGrayscale()], [T.CenterCrop(8), T.RandomErasing()],
                  [T.RandomResizedCrop(8), MyFlip()], [T.RandomApply([T.ColorJitter(0.4)], p=0.8)]):
        tf = T.Compose(steps)
        assert tf.native_spec is None
        drawn = tf.draw_batch([(20, 30), (31, 17)], 5, epoch=1, indices=[3, 4])
        assert drawn.columns is None
        assert drawn == tf._python_params([(20, 30), (31, 17)], 5, epoch=1, indices=[3, 4])


def test_samples_the_native_draws_cannot_draw_get_the_python_paths_error():
    tf = T.Compose([T.RandomCrop(40)])
    with pytest.raises(ValueError, match=r"the image \(10x50, 10x50 padded\) is smaller than the crop"):
        tf.draw_batch([(60, 60), (10, 50)], 0)
    with pytest.raises(ValueError, match=r"image size must be positive, got \(0, 50\)"):
        T.Compose([T.RandomResizedCrop(8)]).make_params([(0, 50)], 0)
    assert len(T.Compose([T.RandomResizedCrop(8)]).draw([], 0)) == 0


def test_draws_is_a_sequence_of_the_dicts():
    tf = T.Compose([T.RandomResizedCrop(8), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1)])
    sizes = [(20, 30), (31, 17), (40, 40)]
    drawn = tf.draw_batch(sizes, 11)
    reference = tf._python_params(sizes, 11)
    assert len(drawn) == 3 and drawn[1] == reference[1] and drawn[-2:] == reference[-2:]
    assert list(drawn) == reference and drawn == reference
    assert "crop" in repr(drawn)


@pytest.mark.parametrize("steps", [
    [T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.Normalize(MEAN, STD)],
    [T.Resize(40), T.CenterCrop(32), T.RandomVerticalFlip(), T.Normalize(MEAN, STD)],
    [T.RandomCrop(28, padding=4), T.RandomHorizontalFlip()],
])
def test_pixels_from_the_columns_are_the_dicts(steps, photo_batch):
    """The kernel run from the columns (Draws.encode) and from the dicts (Compose.encode)
    on real photographs: the same pixels."""
    tf = T.Compose(steps)
    images = photo_batch
    sizes = [(int(im.shape[1]), int(im.shape[2])) for im in images]
    drawn = tf.draw_batch(sizes, 123, epoch=2)
    assert drawn.columns is not None
    a = tf(images, drawn)
    b = tf(images, [dict(p) for p in drawn])
    assert torch.equal(a, b)


@pytest.fixture
def photo_batch() -> list[torch.Tensor]:
    """Crops of scikit-image's photographs, of several sizes (tiny: the simulator)."""
    from skimage import data

    out = []
    for k, img in enumerate((data.astronaut(), data.coffee(), data.chelsea())):
        h, w = 36 + 5 * k, 44 - 3 * k
        out.append(torch.from_numpy(np.ascontiguousarray(img[100:100 + h, 150:150 + w])).permute(2, 0, 1).contiguous())
    return out
