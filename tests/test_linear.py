"""LinearTransformation (a whitening) on the kernel's output, against torchvision's own:
on photographs with a ZCA matrix of their crops, after RandomErasing, in NHWC and 16-bit
outputs, through the Loader; and its refusals."""
from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2 as tv
from torchvision import tv_tensors

from conftest import encode, make_shard
from gpudecode import Loader
from gpudecode.errors import TransformError
from gpudecode.transforms import Compose, LinearTransformation

SIDE = 20  # (D = 3 x 20 x 20 = 1,200)


def _zca(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The ZCA whitening matrix and mean of float images [N, 3, h, w] (as torchvision's
    docs make one), float32."""
    x = images.reshape(images.shape[0], -1).double()
    mean = x.mean(0)
    cov = (x - mean).T @ (x - mean) / x.shape[0]
    u, s, _ = torch.linalg.svd(cov)
    return (u @ torch.diag(1.0 / torch.sqrt(s + 1e-2)) @ u.T).float(), mean.float()


@pytest.fixture(scope="module")
def crops(photos):
    """Crops of the photographs at SIDE x SIDE, uint8 [N, 3, SIDE, SIDE], and their ZCA."""
    out = []
    for a in photos.values():
        t = torch.from_numpy(a).permute(2, 0, 1)
        for y in range(0, t.shape[1] - SIDE, 37):
            for x in range(0, t.shape[2] - SIDE, 53):
                out.append(t[:, y:y + SIDE, x:x + SIDE])
    images = torch.stack(out[:400]).contiguous()
    return images, _zca(images.float() / 255)


def test_whitening_equals_torchvisions_on_photographs(crops):
    """The steps before it and LinearTransformation after ToDtype (and after Normalize)
    equal torchvision's, image by image; NHWC gives the same values; on a float16 output,
    the float16 image whitened in float32, rounded once."""
    images, (matrix, mean) = crops
    for head in ([tv.ToDtype(torch.float32, scale=True)],
                 [tv.ToDtype(torch.float32, scale=True), tv.Normalize([0.5] * 3, [0.25] * 3)]):
        steps = [tv.RandomHorizontalFlip(p=1.0), *head, tv.LinearTransformation(matrix, mean)]
        ours = Compose.from_torchvision(tv.Compose(steps))
        got = ours(images[:64])
        want = torch.stack([tv.Compose(steps)(tv_tensors.Image(im)) for im in images[:64]])
        assert got.shape == want.shape and got.dtype == torch.float32
        torch.testing.assert_close(got, want.as_subclass(torch.Tensor), atol=2e-3, rtol=1e-4)
        nhwc = Compose.from_torchvision(tv.Compose(steps), layout="NHWC")(images[:64])
        torch.testing.assert_close(nhwc.permute(0, 3, 1, 2), got, atol=1e-5, rtol=0)
        f16 = [*steps[:-1], tv.ToDtype(torch.float16)]  # (the float16 image whitened, as torchvision's order says)
        half = Compose.from_torchvision(tv.Compose([*f16, steps[-1]]))(images[:64])
        before = Compose.from_torchvision(tv.Compose(f16))(images[:64])
        want = ((before.reshape(64, -1).float() - mean) @ matrix).view(before.shape).to(torch.float16)
        assert half.dtype == torch.float16 and torch.equal(half, want)


def test_after_random_erasing_and_its_draws(crops):
    """After RandomErasing (the order torchvision's would run), on the erased image: the
    output is the un-whitened output with the same draws, whitened."""
    images, (matrix, mean) = crops
    lt = LinearTransformation(matrix, mean)
    plain = Compose.from_torchvision(tv.Compose([tv.ToDtype(torch.float32, scale=True), tv.RandomErasing(p=0.7)]))
    whitened = Compose([*plain.transforms, lt])
    p = plain.make_params([(SIDE, SIDE)] * 32, 4)
    assert sum(q.get("erase") is not None for q in p) >= 10
    base = plain(images[:32], p)
    want = ((base.reshape(32, -1) - mean) @ matrix).view(base.shape)
    torch.testing.assert_close(whitened(images[:32], p), want, atol=1e-5, rtol=1e-5)


def test_the_loader_whitens_each_batch(tmp_path, crops):
    """Through the Loader (PNG shards of the crops, CIFAR's shape): each batch equals
    torchvision's pipeline on the decoded images."""
    images, (matrix, mean) = crops
    samples = [{"__key__": f"s{i:03d}", "png": encode(im.permute(1, 2, 0).numpy(), "PNG"), "cls": str(i % 10).encode()}
               for i, im in enumerate(images[:40])]
    url = make_shard(tmp_path / "a.tar", samples)
    steps = tv.Compose([tv.ToDtype(torch.float32, scale=True), tv.LinearTransformation(matrix, mean)])
    seen = 0
    for b in Loader([url], batch_size=16, transform=steps, device="cpu", shuffle=False):
        idx = [int(k[1:]) for k in b.keys]
        want = torch.stack([steps(tv_tensors.Image(images[i])) for i in idx]).as_subclass(torch.Tensor)
        torch.testing.assert_close(b.images, want, atol=2e-3, rtol=1e-4)
        seen += len(idx)
    assert seen == 40


def test_refusals_and_its_fingerprint(crops):
    """On uint8 images, at another output size, under ragged=True, with a step after it,
    with a matrix that is not square or not finite: refused, naming why. Its repr (a saved
    state's fingerprint) tells two matrices apart, whatever their size."""
    _, (matrix, mean) = crops
    lt = LinearTransformation(matrix, mean)
    f32 = tv.ToDtype(torch.float32, scale=True)
    for steps, said in (([lt], "on uint8 images"),
                        ([tv.CenterCrop(SIDE - 2), f32, lt], "3 x 18 x 18 = 972 values"),
                        ([f32, lt, tv.Normalize([0.5] * 3, [0.2] * 3)], "Normalize after LinearTransformation")):
        with pytest.raises(TransformError, match=said):
            Compose.from_torchvision(tv.Compose(steps))
    with pytest.raises(TransformError, match="ragged=True"):
        Compose([Compose.from_torchvision(f32).transforms[0], lt], ragged=True)
    with pytest.raises(ValueError, match="square"):
        LinearTransformation(torch.zeros(3, 4), torch.zeros(3))
    with pytest.raises(ValueError, match="finite"):
        LinearTransformation(torch.full((2, 2), float("nan")), torch.zeros(2))
    other = matrix.clone()
    other[600, 601] += 1e-3  # (a value torch's repr of the tensor would not show)
    assert repr(lt) != repr(LinearTransformation(other, mean)) and "D=1200" in repr(lt)
    # (without a geometry step the size is the images': checked when it runs)
    with pytest.raises(TransformError, match="values"):
        Compose.from_torchvision(tv.Compose([f32, lt]))(torch.zeros(2, 3, 8, 8, dtype=torch.uint8))
