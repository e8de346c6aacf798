"""torchvision v2's RGB, and the function CLIP's preprocess writes for it
(`_convert_image_to_rgb(image): return image.convert("RGB")`): one channel made three equal
ones where it stands, three channels left as they are. References: torchvision's own
transforms on the same images (CLIP's preprocess as written, on PIL images of real
photographs), and the 3-channel pipeline on the same images given as three channels."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F
from PIL import Image
from torch.utils.data import TensorDataset

import gpudecode
from gpudecode import transforms as T
from gpudecode.errors import TransformError
from gpudecode.transforms.base import fingerprint_text
from gpudecode.transforms.convert import converts_to_rgb

CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


def _convert_image_to_rgb(image):
    """CLIP's (clip/clip.py), as its preprocess holds it."""
    return image.convert("RGB")


def _annotated(image: Image.Image) -> Image.Image:
    return image.convert('RGB')


def _clip_preprocess(n_px: int) -> v1.Compose:
    """CLIP's `_transform(n_px)`, as written there."""
    return v1.Compose([v1.Resize(n_px, interpolation=v1.InterpolationMode.BICUBIC), v1.CenterCrop(n_px),
                       _convert_image_to_rgb, v1.ToTensor(), v1.Normalize(CLIP_MEAN, CLIP_STD)])


def test_which_functions_are_taken_for_rgb():
    """By the function's bytecode: its whole body `return <argument>.convert("RGB")` (or
    `.repeat(3, 1, 1)`, `.expand(3, -1, -1)` of it), under any name, as a function, a
    lambda, or either Lambda's; nothing else."""
    global_image = Image.new("RGB", (2, 2))
    yes = [_convert_image_to_rgb, _annotated, lambda img: img.convert("RGB"),
           v1.Lambda(lambda x: x.convert("RGB")), tv.Lambda(_convert_image_to_rgb),
           v1.Lambda(lambda x: x.repeat(3, 1, 1)), lambda t: t.expand(3, -1, -1)]
    assert all(converts_to_rgb(f) for f in yes)

    def two_steps(image):
        rgb = image.convert("RGB")
        return rgb

    def keyword(image):
        return image.convert(mode="RGB")

    no = [lambda img: img.convert("L"), lambda img: img.convert("RGB").rotate(90), lambda img: img,
          lambda img, mode="RGB": img.convert(mode), lambda img: global_image.convert("RGB"),
          lambda *a: a[0].convert("RGB"), two_steps, keyword, v1.Lambda(lambda x: x.repeat(1, 1, 3)),
          lambda x: x.repeat(3, 1), lambda x: x.expand(3, 8, 8), lambda x: x.repeat(3, 1, 1).float(),
          tv.CenterCrop(4), len, "RGB"]
    assert not any(converts_to_rgb(f) for f in no)
    with pytest.raises(TransformError, match=r"a Lambda runs Python per image"):
        T.Compose.from_torchvision(v1.Compose([v1.CenterCrop(4), v1.Lambda(lambda x: x.convert("L"))]))


def test_clips_preprocess_converts_and_gives_clips_values(photos):
    """CLIP's preprocess (bicubic Resize, CenterCrop, the RGB function, ToTensor,
    Normalize) on PIL images of real photographs: within a level of its own output on
    99.9% of pixels (the timm eval's bound: PIL clips its first pass's overshoot to uint8,
    the kernel once at the end); a grey PIL image gives three channels, as CLIP's does,
    with grey=True or without."""
    pre = _clip_preprocess(224)
    ours = T.Compose.from_torchvision(pre)
    assert [type(t).__name__ for t in ours.transforms] == ["Resize", "CenterCrop", "RGB", "ToDtype", "Normalize"]
    std = torch.tensor(CLIP_STD).view(3, 1, 1)
    images = [Image.fromarray(p) for p in photos.values()]
    images.append(Image.fromarray(np.ascontiguousarray(next(iter(photos.values()))[..., 1])))  # ("L")
    for im in images:
        ref = pre(im)
        for tf in (ours, T.Compose.from_torchvision(pre, grey=True)) if im.mode == "L" else (ours,):
            got = tf(im)
            assert got.shape == ref.shape == (3, 224, 224)
            d = ((got - ref) * std * 255).abs()
            assert (d <= 1 + 1e-3).float().mean().item() >= 0.999 and d.max().item() <= 16, (im.mode, d.max())


def _grey_set(photos, n: int = 3) -> torch.Tensor:
    return torch.stack([torch.from_numpy(np.ascontiguousarray(p[:48, :40, 1])) for p in photos.values()] * n)


def test_a_grey_set_with_rgb_gives_torchvisions_three_channels(photos):
    """A grey set ([N, H, W] images) through v2's ToImage, RGB, CenterCrop, ToDtype and
    ImageNet's Normalize: [N, 3, h, w], each image torchvision's own, in the Loader
    (streamed and kept) and in a grey Compose's call."""
    grey = _grey_set(photos, 1)
    steps = tv.Compose([tv.ToImage(), tv.RGB(), tv.CenterCrop(32), tv.ToDtype(torch.float32, scale=True),
                        tv.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    want = torch.stack([steps(g[None]) for g in grey])
    assert want.shape == (len(grey), 3, 32, 32)
    for keep in (None, "ram"):
        ld = gpudecode.Loader(TensorDataset(grey, torch.arange(len(grey))), transform=steps, batch_size=2,
                              shuffle=False, **({} if keep is None else {"keep": keep}))
        assert ld.transform.grey and ld.transform.channels == 3 and ld.describe()["channels"] == 3
        got = torch.cat([b for b, _ in ld])
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    direct = T.Compose.from_torchvision(steps, grey=True)
    torch.testing.assert_close(direct(grey[:, None]), want, atol=1e-5, rtol=0)
    # without RGB the same set gives one channel (torchvision's [1, h, w])
    assert T.Compose.from_torchvision(tv.Compose([tv.CenterCrop(32)]), grey=True).channels == 1


@pytest.mark.parametrize("keep", [None, "ram"])
def test_random_steps_after_rgb_act_on_three_equal_channels(photos, keep):
    """RGB before the geometry, or after it before the jitter: the grey set's batches equal
    the 3-channel pipeline's on the same images given as three equal channels (its
    contrast takes the grey of three channels, as torchvision's does), batch for batch."""
    grey = _grey_set(photos)
    rgb = grey[:, None].expand(-1, 3, -1, -1).contiguous()

    def loader(images, at):
        steps = [tv.RandomCrop(32, padding=2), tv.RandomHorizontalFlip(), tv.ColorJitter(0.3, 0.4, 0.5, 0.1),
                 tv.ToDtype(torch.float32, scale=True), tv.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])]
        if at is not None:
            steps.insert(at, tv.RGB())
        return gpudecode.Loader(TensorDataset(images, torch.arange(len(images))), transform=tv.Compose(steps),
                                batch_size=4, seed=9, shuffle=True, **({} if keep is None else {"keep": keep}))

    for at in (0, 2):
        seen = 0
        for (a, la), (b, lb) in zip(loader(grey, at), loader(rgb, None)):
            assert a.shape == (len(la), 3, 32, 32) and torch.equal(la, lb)
            assert torch.equal(a, b), at
            seen += len(la)
        assert seen == len(grey)


def test_rgb_after_grayscale_1_and_where_it_is_refused(photos):
    """Grayscale(1), then RGB: three equal channels, the steps after them on three (as
    torchvision's: saturation changes nothing there either); on three channels RGB is no
    step. Refused: one channel again after RGB made three; RGB after the last steps of one
    channel's image."""
    imgs = [torch.from_numpy(np.ascontiguousarray(p.transpose(2, 0, 1))) for p in photos.values()]
    sizes = [tuple(i.shape[1:]) for i in imgs]
    tf = T.Compose([T.CenterCrop(24), T.Grayscale(), T.RGB(), T.ColorJitter(contrast=0.5, saturation=0.5),
                    T.ToDtype(torch.float32, scale=True)])
    assert tf.channels == 3
    params = tf.make_params(sizes, 3)
    got = tf(imgs, params)
    for k, (img, p) in enumerate(zip(imgs, params)):
        x = F.grayscale_to_rgb(F.rgb_to_grayscale(F.to_dtype(F.center_crop(img, [24, 24]), torch.float32, scale=True)))
        for op in p["order"]:
            name = ["brightness", "contrast", "saturation", "hue"][op]
            if p.get(name) is not None:
                x = getattr(F, f"adjust_{name}")(x, p[name])
        assert (got[k] - x).abs().max() < 1e-5, (k, p)
    plain = T.Compose([T.CenterCrop(24), T.ColorJitter(contrast=0.5), T.ToDtype(torch.float32, scale=True)])
    noop = T.Compose([T.RGB(), T.CenterCrop(24), T.RGB(), T.ColorJitter(contrast=0.5), T.RGB(),
                      T.ToDtype(torch.float32, scale=True), T.RGB()])
    params = plain.make_params(sizes, 4)
    assert torch.equal(noop(imgs, params), plain(imgs, params)) and noop.channels == 3
    with pytest.raises(TransformError, match="after RGB made three channels of one"):
        T.Compose([T.CenterCrop(8), T.RGB(), T.Grayscale()], grey=True)
    with pytest.raises(TransformError, match="RGB after RandomErasing on an image of one channel"):
        T.Compose([T.CenterCrop(8), T.ToDtype(torch.float32, scale=True), T.RandomErasing(), T.RGB()], grey=True)
    assert T.Compose([T.CenterCrop(8), T.ToDtype(torch.float32, scale=True), T.RandomErasing(), T.RGB()]).channels == 3


def test_rgb_around_the_crops_of_views(photos):
    """RGB before or after FiveCrop/TenCrop (no draw: each crop's view takes it)."""
    img = Image.fromarray(np.ascontiguousarray(next(iter(photos.values()))[..., 0]))
    pre = v1.Compose([v1.Resize(40), _convert_image_to_rgb, v1.FiveCrop(32), v1.Lambda(
        lambda crops: torch.stack([v1.ToTensor()(c) for c in crops]))])
    with pytest.raises(TransformError, match="put the steps it runs on each crop"):
        T.Views.from_torchvision(pre)
    views = T.Views.from_torchvision(tv.Compose([tv.Resize(40), tv.RGB(), tv.FiveCrop(32), tv.RGB(),
                                                 tv.ToDtype(torch.float32, scale=True)]))
    got = views(img)
    theirs = tv.FiveCrop(32)(F.to_dtype(F.resize(F.grayscale_to_rgb(F.pil_to_tensor(img)), [40]), torch.float32,
                                        scale=True))
    assert len(got) == 5 and all(g.shape == (3, 32, 32) for g in got)
    assert all((g - t).abs().max() < 2 / 255 for g, t in zip(got, theirs))


def test_rgb_keeps_the_fingerprint_states_were_saved_with():
    """v2.RGB was dropped before it was a step: on three channels (no step) a Compose's
    fingerprint is the one without it, so a state saved then resumes strictly; on a grey
    set it makes three channels, and its fingerprint differs."""
    with_rgb = [T.RGB(), T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.2] * 3)]
    without = [t for t in with_rgb if not isinstance(t, T.RGB)]
    assert fingerprint_text(T.Compose(with_rgb)) == fingerprint_text(T.Compose(without))
    assert fingerprint_text(T.Compose(with_rgb, grey=True)) != fingerprint_text(T.Compose(without, grey=True))
    assert repr(T.Compose(with_rgb)).splitlines()[1] == "    RGB(),"


def test_mnist_for_an_imagenet_model_repeats_its_channel(photos):
    """MNIST given to a ResNet as scripts write it: `[Resize(224)..., ToTensor(), Lambda(x:
    x.repeat(3, 1, 1)), Normalize(ImageNet's)]` on a grey set: torchvision's [3, h, w]."""
    grey = _grey_set(photos, 1)
    steps = v1.Compose([v1.Resize(36), v1.CenterCrop(32), v1.ToTensor(), v1.Lambda(lambda x: x.repeat(3, 1, 1)),
                        v1.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ld = gpudecode.Loader(TensorDataset(grey, torch.arange(len(grey))), transform=steps, batch_size=3, shuffle=False)
    got = torch.cat([b for b, _ in ld])
    want = torch.stack([steps(Image.fromarray(g.numpy())) for g in grey])  # (PIL "L" images, as MNIST gives them)
    assert got.shape == want.shape == (len(grey), 3, 32, 32)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    assert float(((got - want) * std * 255).abs().max()) <= 1.0 + 1e-3  # (PIL's resize rounds to uint8)
