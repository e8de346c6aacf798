"""Transforms of a whole batch and its labels, after the fused kernel: torchvision v2's
MixUp and CutMix (the same arithmetic, so the same numbers for the same draws) and
RandomChoice over them, e.g. torchvision's reference recipe

    Loader(..., transform=..., batch_transform=T.RandomChoice([T.MixUp(alpha=0.2, num_classes=1000),
                                                               T.CutMix(alpha=1.0, num_classes=1000)]))

They run on the finished batch, on its device (the Loader's augment stream on a GPU),
in place in the output slot; the labels become soft labels [N, num_classes] (float32).
Their draws come from the batch's own seeded generator (seed, epoch, rank, the batch's
first sample), never from torch's global one, so a resumed run mixes as the first did.
`make_params` gives torchvision's parameter names (`lam`; `box`, `lam_adjusted`).

Any other callable `f(images, labels) -> (images, labels)` may stand in for them (a
torchvision v1 RandomChoice over the reference scripts' RandomMixUp/RandomCutMix, timm's
Mixup): it runs as written, on the trainer's thread when the batch is handed over, with
Python's, numpy's and torch's generators seeded from the batch's draw (and put back after:
`seeded_call`), so a resumed run mixes alike; `Loader.describe()` lists it.
"""
from __future__ import annotations

import math
import random
from typing import Any, Callable, Sequence

import torch

from .errors import TransformError


class BatchTransform:
    """A step on (images [N, C, H, W] float, labels [N] int64 or [N, classes] float)."""

    def make_params(self, shape: tuple[int, ...], rng: random.Random) -> dict:
        raise NotImplementedError

    def apply(self, images: torch.Tensor, labels: torch.Tensor, params: dict, *, batched: bool | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """In place on `images`. `batched`: whole-batch operations (the default on CUDA
        tensors: a fixed number of launches) or image by image (the default on the CPU: no
        copy of the batch); the same values bit for bit either way."""
        raise NotImplementedError

    def __call__(self, images: torch.Tensor, labels: torch.Tensor, *, rng: random.Random | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draws (from `rng`, or a fresh unseeded one) and applies, in place on `images`."""
        return self.apply(images, labels, self.make_params(tuple(images.shape), rng or random.Random()))


class _MixBase(BatchTransform):
    def __init__(self, *, alpha: float = 1.0, num_classes: int | None = None) -> None:
        if not alpha > 0:
            raise TransformError(f"{type(self).__name__} alpha must be > 0, not {alpha!r}")
        if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                        or num_classes < 1):
            raise TransformError(f"num_classes must be a positive int, not {num_classes!r}")
        self.alpha = float(alpha)
        self.num_classes = num_classes

    def _lam(self, rng: random.Random) -> float:
        # Beta(alpha, alpha) as torch.distributions.Beta draws it: in float32
        return float(torch.tensor(rng.betavariate(self.alpha, self.alpha), dtype=torch.float32))

    def _mix_labels(self, labels: torch.Tensor, lam: float) -> torch.Tensor:
        # torchvision's _mixup_label, operation for operation
        if labels.ndim == 1:
            if self.num_classes is None:
                raise TransformError(f"{type(self).__name__} needs num_classes= for integer labels")
            labels = torch.nn.functional.one_hot(labels, num_classes=self.num_classes)
        elif self.num_classes is not None and labels.shape[-1] != self.num_classes:
            raise TransformError(f"labels of {labels.shape[-1]} classes, num_classes={self.num_classes}")
        if not labels.dtype.is_floating_point:
            labels = labels.float()
        return labels.roll(1, 0).mul_(1.0 - lam).add_(labels.mul(lam))

    @staticmethod
    def _check(images: torch.Tensor, labels: torch.Tensor) -> None:
        if images.ndim != 4 or not images.dtype.is_floating_point:
            raise TransformError(f"MixUp and CutMix mix float image batches [N, C, H, W], not {images.dtype} "
                                 f"{tuple(images.shape)}: end the transform with Normalize or ToDtype(float32)")
        if labels.shape[0] != images.shape[0]:
            raise TransformError(f"{labels.shape[0]} labels for {images.shape[0]} images")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(alpha={self.alpha}, num_classes={self.num_classes})"


class MixUp(_MixBase):
    """torchvision.transforms.v2.MixUp: each image becomes lam * itself + (1 - lam) * the
    previous one in the batch (lam ~ Beta(alpha, alpha), one per batch), the labels alike."""

    def make_params(self, shape: tuple[int, ...], rng: random.Random) -> dict:
        return {"lam": self._lam(rng)}

    def apply(self, images: torch.Tensor, labels: torch.Tensor, params: dict, *, batched: bool | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        self._check(images, labels)
        lam = params["lam"]
        # torchvision: x.roll(1, 0).mul_(1 - lam).add_(x.mul(lam)). The same products and sums
        # (a + b == b + a, bit for bit). On a GPU (or batched=True) as whole-batch operations
        # on one copy of the batch (a few launches, not three an image); on the CPU image by
        # image from the last, so that no copy of the batch is made: image i - 1 is still
        # unmixed when image i takes it
        n = images.shape[0]
        if n and (batched if batched is not None else images.device.type == "cuda"):
            previous = images.roll(1, 0).mul_(1.0 - lam)  # (a copy, taken before images change)
            images.mul_(lam).add_(previous)
        elif n:
            last = images[n - 1].mul(1.0 - lam)
            scaled = torch.empty_like(last)  # one image's scratch for all (no allocation an image)
            for i in range(n - 1, 0, -1):
                torch.mul(images[i - 1], 1.0 - lam, out=scaled)
                images[i].mul_(lam).add_(scaled)
            images[0].mul_(lam).add_(last)
        return images, self._mix_labels(labels, lam)


class CutMix(_MixBase):
    """torchvision.transforms.v2.CutMix: a box of each image (its size from lam ~
    Beta(alpha, alpha), its centre uniform, one per batch) is replaced by the previous
    image's, and the labels are mixed by the area kept (`lam_adjusted`)."""

    def make_params(self, shape: tuple[int, ...], rng: random.Random) -> dict:
        lam = self._lam(rng)
        H, W = shape[-2], shape[-1]
        r_x, r_y = rng.randrange(W), rng.randrange(H)
        r = 0.5 * math.sqrt(1.0 - lam)
        r_w_half, r_h_half = int(r * W), int(r * H)
        x1, y1 = max(r_x - r_w_half, 0), max(r_y - r_h_half, 0)
        x2, y2 = min(r_x + r_w_half, W), min(r_y + r_h_half, H)
        return {"box": (x1, y1, x2, y2), "lam_adjusted": float(1.0 - (x2 - x1) * (y2 - y1) / (W * H))}

    def apply(self, images: torch.Tensor, labels: torch.Tensor, params: dict, *, batched: bool | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        self._check(images, labels)
        x1, y1, x2, y2 = params["box"]
        n = images.shape[0]
        if n and x2 > x1 and y2 > y1 and (batched if batched is not None else images.device.type == "cuda"):
            box = images[..., y1:y2, x1:x2]  # on a GPU: the boxes of the batch in two launches
            box.copy_(box.roll(1, 0))
        elif n and x2 > x1 and y2 > y1:  # only the box moves, image i - 1's into image i, from the last
            box = images[..., y1:y2, x1:x2]
            last = box[n - 1].clone()
            for i in range(n - 1, 0, -1):
                box[i].copy_(box[i - 1])
            box[0].copy_(last)
        return images, self._mix_labels(labels, params["lam_adjusted"])


class RandomChoice(BatchTransform):
    """torchvision.transforms.v2.RandomChoice over batch transforms: one of them per batch,
    with probabilities `p` (default equal)."""

    def __init__(self, transforms: Sequence[BatchTransform], p: Sequence[float] | None = None) -> None:
        steps: list[Any] = [as_batch_transform(t) for t in transforms]
        if not steps:
            raise TransformError("RandomChoice needs at least one transform")
        if not all(isinstance(t, BatchTransform) for t in steps):
            raise TransformError("RandomChoice of batch transforms takes MixUp, CutMix or RandomChoice")
        if p is None:
            p = [1.0] * len(steps)
        if len(p) != len(steps) or any(x < 0 for x in p) or not sum(p) > 0:
            raise TransformError(f"p must give one non-negative weight per transform, not {p!r}")
        self.transforms: list[BatchTransform] = steps
        self.p = [float(x) / sum(p) for x in p]

    def make_params(self, shape: tuple[int, ...], rng: random.Random) -> dict:
        k = rng.choices(range(len(self.transforms)), weights=self.p)[0]
        return {"index": k, "params": self.transforms[k].make_params(shape, rng)}

    def apply(self, images: torch.Tensor, labels: torch.Tensor, params: dict, *, batched: bool | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.transforms[params["index"]].apply(images, labels, params["params"], batched=batched)

    def __repr__(self) -> str:
        return f"RandomChoice({self.transforms}, p={self.p})"


def as_batch_transform(t: Any) -> BatchTransform | Callable[..., Any]:
    """Ours as they are; torchvision v2's MixUp, CutMix and RandomChoice (of those) as ours
    (so that their draws are seeded); any other callable as it is (it runs after, as is)."""
    if isinstance(t, BatchTransform):
        return t
    name, module = type(t).__name__, type(t).__module__
    if module.startswith("torchvision.transforms"):
        if name in ("MixUp", "CutMix"):  # (a labels_getter has nothing to find: the Loader hands both)
            return (MixUp if name == "MixUp" else CutMix)(alpha=t.alpha, num_classes=t.num_classes)
        if name == "RandomChoice":
            inner = [as_batch_transform(x) for x in t.transforms]
            if all(isinstance(x, BatchTransform) for x in inner):
                return RandomChoice(inner, t.p)  # type: ignore[arg-type]
            return t  # over the user's own callables (torchvision's reference RandomMixUp): run as written
        raise TransformError(f"{module}.{name} is not a batch transform (batch_transform= takes MixUp, CutMix and "
                             "RandomChoice over them, or a callable (images, labels) -> (images, labels))")
    if not callable(t):
        raise TransformError(f"batch_transform must be MixUp, CutMix, RandomChoice or a callable, not {t!r}")
    return t


def seeded_call(step: Callable[..., Any], images: Any, labels: Any, draw: tuple) -> tuple[Any, Any]:
    """A user's batch callable, `step(images, labels)`, run with Python's, numpy's and
    torch's generators (the CPU's and the images' CUDA device's) seeded from the batch's own
    draw (batch_rng), and put back as they were after: the same batch mixes alike in a
    resumed run, and the caller's own draws go on as if nothing ran. The Loader calls it on
    the trainer's thread (in next()), where nothing else draws from those generators."""
    import numpy as np

    seed = batch_rng(*draw).getrandbits(32)
    device = images.device if isinstance(images, torch.Tensor) else torch.device("cpu")
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    py, npy = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=cuda):
            torch.default_generator.manual_seed(seed)
            for d in cuda:
                torch.cuda.default_generators[d].manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed)
            return step(images, labels)
    finally:
        random.setstate(py)
        np.random.set_state(npy)


def batch_rng(seed: int, epoch: int, rank: int, first: int) -> random.Random:
    """The draws of the batch whose first sample is `first` (in this rank's epoch order)."""
    return random.Random(f"gpudecode-batch:{seed}:{epoch}:{rank}:{first}")


__all__ = ["BatchTransform", "MixUp", "CutMix", "RandomChoice", "as_batch_transform", "batch_rng", "seeded_call"]
