"""Expanded exact turns and several RandomChoices in one Compose (each refused before):

- `RandomRotation((a, a), expand=True)` with a a multiple of 90 and no centre is
  torch.rot90's pixels (F.rotate takes a transpose). A half turn (or none) keeps every
  image's size, so it is no canvas step; a quarter turn keeps a square's, so it fuses after
  a geometry step that makes squares, as the non-expanded turn does. Satellite, pathology
  and microscopy scripts write the dihedral group so:
  `[Resize((224, 224)), RandomChoice([hflip, vflip]), RandomChoice([RandomRotation((90, 90),
  expand=True), ...])]`.
- A Compose's second RandomChoice draws its index under "choice2" (its third "choice3"):
  one sample's make_params hold one draw a key.

Pixels against torchvision's functional ops replaying each image's draws on real
photographs, bit for bit (uint8, no resampling); the Loader against the Compose; the draws'
frequencies; the refusals that stay."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as tv1
import torchvision.transforms.v2.functional as F

from gpudecode import transforms as T
from gpudecode.errors import TransformError
from conftest import loader_is_compose

DIHEDRAL = [tv1.RandomChoice([tv1.RandomHorizontalFlip(), tv1.RandomVerticalFlip()]),
            tv1.RandomChoice([tv1.RandomRotation((a, a), expand=True) for a in (90, 180, 270)])]


def _chw(photos, crop=None):
    out = []
    for k, p in enumerate(photos.values()):
        x = p if crop is None else p[5 * k:5 * k + crop[0], 7 * k:7 * k + crop[1]]
        out.append(torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1))))
    return out


def test_torchvision_turns_an_expanded_quarter_turn_exactly(photos):
    """The premise, on this torchvision: F.rotate(expand=True) by a multiple of 90 degrees
    is torch.rot90 (any size), and on a square the non-expanded turn; a half turn keeps any
    size."""
    for x in _chw(photos, (40, 56)) + _chw(photos, (48, 48)):
        for a in (0, 90, 180, 270, -90, 360):
            turned = F.rotate(x, a, expand=True)
            assert torch.equal(turned, torch.rot90(x, (a % 360) // 90, (1, 2))), a
            if a % 180 == 0 or x.shape[1] == x.shape[2]:
                assert torch.equal(turned, F.rotate(x, a)), a


def test_the_dihedral_recipe_after_a_square_crop(photos):
    """`[CenterCrop(48), RandomChoice([hflip, vflip]), RandomChoice([expanded turns by 90,
    180, 270])]`: torchvision's ops replayed with each image's draws, bit for bit; the
    second choice draws under "choice2"; every option drawn about as often as p says."""
    tf = T.Compose.from_torchvision(tv1.Compose([tv1.CenterCrop(48), *DIHEDRAL]))
    imgs = _chw(photos)
    firsts, seconds = [], []
    for seed in range(8):
        params = tf.make_params([tuple(x.shape[1:]) for x in imgs], seed)
        got = tf(imgs, params)
        for k, (img, p) in enumerate(zip(imgs, params)):
            x = F.center_crop(img, [48, 48])
            x = F.horizontal_flip(x) if p.get("flip") else F.vertical_flip(x) if p.get("vflip") else x
            want = F.rotate(x, p["rotation"]["angle"], expand=True)
            assert torch.equal(got[k], want), (seed, k, p)
            firsts.append(p["choice"])
            seconds.append(p["choice2"])
            assert p["rotation"]["angle"] == (90, 180, 270)[p["choice2"]]
    for drawn, n in ((firsts, 2), (seconds, 3)):
        counts = np.bincount(drawn, minlength=n)
        assert counts.min() > len(drawn) / (2 * n), counts


def test_the_dihedral_recipe_in_the_loader(tmp_path, photos):
    """The Loader's batches are the Compose's with the Loader's draws (two epochs)."""
    tf = T.Compose.from_torchvision(tv1.Compose([tv1.Resize((32, 32)), tv1.RandomHorizontalFlip(), *DIHEDRAL[1:],
                                                 tv1.PILToTensor()]))
    loader_is_compose(tmp_path, [p[:96, :128] for p in photos.values()], tf, seed=5)


def test_an_expanded_half_turn_first_is_no_canvas(photos):
    """`[RandomRotation((180, 180), expand=True), RandomCrop(32)]` on oblong photographs:
    the image turned (its size kept), then cropped, as torchvision does it."""
    tf = T.Compose.from_torchvision(tv1.Compose([tv1.RandomRotation((180, 180), expand=True), tv1.RandomCrop(32)]))
    imgs = _chw(photos, (40, 56))
    params = tf.make_params([tuple(x.shape[1:]) for x in imgs], 3)
    got = tf(imgs, params)
    for k, (img, p) in enumerate(zip(imgs, params)):
        assert torch.equal(got[k], F.crop(F.rotate(img, 180, expand=True), *p["crop"])), k


def test_several_choices_each_draw_their_own(photos):
    """Three RandomChoices over colour ops: each its own key, each image the ops of the
    options it drew, torchvision's, bit for bit."""
    ops = {("choice", 0): lambda x: F.solarize(x, 128), ("choice", 1): lambda x: x,
           ("choice2", 0): F.equalize, ("choice2", 1): lambda x: x,
           ("choice3", 0): F.invert, ("choice3", 1): lambda x: x}
    tf = T.Compose.from_torchvision(tv1.Compose([  # (the options of p=0: none, each of another key)
        tv1.CenterCrop(40), tv1.RandomChoice([tv1.RandomSolarize(128, 1.0), tv1.RandomAutocontrast(0.0)]),
        tv1.RandomChoice([tv1.RandomEqualize(1.0), tv1.RandomGrayscale(0.0)]),
        tv1.RandomChoice([tv1.RandomInvert(1.0), tv1.RandomPosterize(4, 0.0)])]))
    imgs = _chw(photos)
    seen = set()
    for seed in range(4):
        params = tf.make_params([tuple(x.shape[1:]) for x in imgs], seed)
        got = tf(imgs, params)
        for k, (img, p) in enumerate(zip(imgs, params)):
            x = F.center_crop(img, [40, 40])
            for key in ("choice", "choice2", "choice3"):
                x = ops[key, p[key]](x)
                seen.add((key, p[key]))
            assert torch.equal(got[k], x), (seed, k, p)
    assert seen == set(ops)


def test_what_stays_refused():
    """A quarter turn expanded where the size is not a square one, or not known; an
    expanded turn by another angle after the geometry; a RandomChoice inside another's
    option drawing under the same key."""
    turns = [tv1.RandomRotation((a, a), expand=True) for a in (90, 270)]
    for steps in ([tv1.Resize((40, 56)), tv1.RandomChoice(turns)], [tv1.RandomChoice(turns), tv1.Resize((48, 48))],
                  [tv1.Resize(48), tv1.RandomChoice(turns)], [tv1.CenterCrop((48, 40)), turns[0]]):
        with pytest.raises(TransformError, match=r"changes\s+the\s+image's\s+size\s+\(a\s+quarter\s+turn\s+keeps"):
            T.Compose.from_torchvision(tv1.Compose(steps))
    with pytest.raises(TransformError, match=r"changes\s+the\s+image's\s+size,\s+so\s+it\s+comes\s+first"):
        T.Compose.from_torchvision(tv1.Compose([tv1.CenterCrop(48), tv1.RandomRotation((45, 45), expand=True)]))
    nested = tv1.RandomChoice([tv1.RandomInvert(), tv1.RandomChoice([tv1.RandomSolarize(9), tv1.RandomPosterize(4)])])
    with pytest.raises(TransformError, match=r"a RandomChoice inside another\s+container"):
        T.Compose.from_torchvision(tv1.Compose([tv1.CenterCrop(48), nested]))


def test_a_bare_expanded_quarter_turn_after_a_square_resize(photos):
    """`[CenterCrop(48), RandomRotation((90, 90), expand=True)]`: the turn, as torchvision's."""
    tf = T.Compose.from_torchvision(tv1.Compose([tv1.CenterCrop(48), tv1.RandomRotation((-90, -90), expand=True)]))
    imgs = _chw(photos)
    got = tf(imgs, tf.make_params([tuple(x.shape[1:]) for x in imgs], 0))
    for k, img in enumerate(imgs):
        assert torch.equal(got[k], torch.rot90(F.center_crop(img, [48, 48]), 3, (1, 2))), k
