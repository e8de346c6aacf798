"""The steps after the program: Normalize and ToDtype (the kernel's output), and
RandomErasing on the kernel's output, last."""
from __future__ import annotations

import copy
import math
import random
from typing import Any, Sequence

import numpy as np
import torch

from ..errors import TransformError
from .base import Transform, in_fingerprint
from .convert import key


class Normalize(Transform, converts="torchvision.Normalize"):
    group = "then"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.mean, t.std)

    def __init__(self, mean: Sequence[float] | float, std: Sequence[float] | float, inplace: bool = False, *,
                 levels: bool = False) -> None:
        mean, std = _per_channel(mean), _per_channel(std)
        if len(mean) != 3 or len(std) != 3:
            raise TransformError("Normalize needs three means and three stds (RGB), or one of each for all three")
        if any(s == 0 for s in std):
            raise ValueError("std evaluated to zero, leading to division by zero")
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        self._levels = levels  # (out of the repr)

    @property
    def levels(self) -> bool:
        """The plan's own Normalize for ToDtype(float) without scale: the kernel's [0, 1]
        floats made 0 to 255 (plan.after)."""
        return self._levels


def _per_channel(v: Sequence[float] | float) -> list[float]:
    """One value serves every channel, as torchvision's Normalize broadcasts it (MNIST's
    Normalize((0.1307,), (0.3081,)) on a grey image made RGB)."""
    v = [v] if isinstance(v, (int, float)) else list(v)
    return v * 3 if len(v) == 1 else v


OUTPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.uint8)


class ToDtype(Transform, converts=("torchvision.ToTensor", "torchvision.ConvertImageDtype", "torchvision.ToDtype",
                                   "timm.ToTensor", "timm.MaybeToTensor")):
    """Output dtype: torch.float32, torch.float16 or torch.bfloat16 (scale=True: [0, 1]) or
    torch.uint8. A 16-bit float output is the float32 value rounded once (to nearest, ties
    to even: torch's cast); torchvision computes in the 16-bit type itself (a level of it
    apart, at most, where the two roundings differ)."""

    group = "then"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        """ToTensor (torchvision's, timm's, timm's MaybeToTensor): float32 in [0, 1]."""
        name = key(t)
        if name == "torchvision.ToDtype":
            return cls(t.dtype if isinstance(t.dtype, torch.dtype) else t.dtype.get(torch.Tensor, None), scale=t.scale)
        if name == "torchvision.ConvertImageDtype":
            return cls(t.dtype, scale=True)
        return cls(torch.float32, scale=True)

    def __init__(self, dtype: torch.dtype, scale: bool = False) -> None:
        if dtype not in OUTPUT_DTYPES:
            raise TransformError(f"ToDtype({dtype}) is not supported: use float32, float16, bfloat16 or uint8")
        self.dtype = dtype
        self.scale = bool(scale)

    @property
    def makes_floats(self) -> bool:  # type: ignore[override]
        """The steps after it see floats of 0 to 1 (their fills and thresholds are read so);
        without scale, a uint8 image's levels stay 0 to 255 (a fill after it is a level)."""
        return self.dtype.is_floating_point and self.scale


class RandomErasing(Transform, converts=("torchvision.RandomErasing", "timm.RandomErasing")):
    """torchvision.transforms.v2.RandomErasing, as the last step (after Normalize or
    ToDtype): with probability p, a rectangle of each output image, of `scale` of its area
    and aspect in `ratio` (10 tries, else nothing), is set to `value`: a number, one per
    channel, or "random" (standard normal noise). Drawn with torchvision's steps from the
    sample's seeded draws, after every other step's; `make_params` gives torchvision's
    names under "erase": {"i", "j", "h", "w"} (None: not erased). Runs on the kernel's
    output, on its device. `noise="box"` (with value="random"): one normal colour a box
    instead of a value a pixel (timm's RandomErasing mode "rand"). `count=(lo, hi)`:
    timm's min_count/max_count, several boxes an image (their number drawn in [lo, hi]
    after the coin, each box's area drawn as a 1/count share, 10 tries each, in turn:
    a later box overwrites an earlier one where they meet); their params are then a list
    under "erase_boxes" (each {"i", "j", "h", "w", "noise"})."""

    group = "last"
    # (mean, std) of the Normalize after it (before_normalize); a class default: an instance pickled before it
    # existed reads None
    _normalized: tuple[tuple[float, ...], tuple[float, ...]] | None = None

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        """timm's (timm.data.random_erasing): its draw (the coin, the number of boxes in
        [min_count, max_count], then for each box 10 tries of an area uniform in
        [min_area, max_area] of the image over the count, a log-uniform aspect, h and w
        rounded, a uniform corner), in mode "pixel" per-pixel normal noise (torchvision's
        value="random"), in mode "rand" one normal colour a box (noise="box"), and in mode
        "const" zeros (value=0). Refused: aug splits (num_splits: the batch's first part left
        clean, which a per-sample transform cannot know)."""
        if key(t) == "timm.RandomErasing":
            mode = (getattr(t, "mode", "const") or "const").lower()
            lo_c, hi_c = int(getattr(t, "min_count", 1)), int(getattr(t, "max_count", 1) or 1)
            if mode not in ("pixel", "const", "rand") or int(getattr(t, "num_splits", 0)) > 1:
                why = f"mode {mode!r}" if mode not in ("pixel", "const", "rand") else f"num_splits={t.num_splits}"
                raise TransformError(f"timm.data.random_erasing.RandomErasing with {why} cannot be fused: the "
                                     "kernel erases with noise a pixel, a colour a box, or a fixed value (timm's "
                                     "--remode pixel, rand or const), every image of the batch (no --aug-splits)")
            lo, hi = t.log_aspect_ratio
            return cls(float(t.probability), (float(t.min_area), float(t.max_area)), (math.exp(lo), math.exp(hi)),
                       "random" if mode != "const" else 0.0, noise="box" if mode == "rand" else "pixel",
                       count=(lo_c, hi_c))
        value = t.value if t.value is not None else "random"  # v2 keeps a list of floats, or None for "random"
        return cls(t.p, t.scale, t.ratio, value[0] if isinstance(value, list) and len(value) == 1 else value)

    def __init__(self, p: float = 0.5, scale: Sequence[float] = (0.02, 0.33), ratio: Sequence[float] = (0.3, 3.3),
                 value: Any = 0.0, inplace: bool = False, *, noise: str = "pixel",
                 count: tuple[int, int] = (1, 1)) -> None:
        if noise not in ("pixel", "box"):
            raise ValueError(f"noise must be 'pixel' or 'box', not {noise!r}")
        if not (isinstance(count, (tuple, list)) and len(count) == 2 and all(isinstance(c, int) for c in count)
                and 1 <= count[0] <= count[1]):
            raise ValueError(f"count must be (lo, hi) with 1 <= lo <= hi, not {count!r}")
        self.count = (int(count[0]), int(count[1]))
        if not 0.0 <= p <= 1.0:
            raise ValueError("probability should be between 0 and 1")
        if isinstance(value, str) and value != "random":
            raise ValueError("If value is str, it should be 'random'")
        if not isinstance(value, (int, float, str, tuple, list)):
            raise TypeError("Argument value should be either a number or str or a sequence")
        if isinstance(value, (tuple, list)) and len(value) not in (1, 3):
            raise ValueError("If value is a sequence, it should have either a single value or 3 (number of inpt "
                             "channels)")
        if scale[0] < 0 or scale[1] > 1:
            raise ValueError("Scale should be between 0 and 1")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise TransformError("Scale and ratio should be of kind (min, max)")
        if not (ratio[0] > 0 and math.isfinite(ratio[1])):  # its log is drawn from (torchvision fails at the first image)
            raise TransformError(f"RandomErasing ratio must be positive and finite, not {tuple(ratio)!r}")
        self.p = float(p)
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.value: list[float] | None = (None if isinstance(value, str) else [float(value)]
                                          if isinstance(value, (int, float)) else [float(v) for v in value])
        if noise == "box" and self.value is not None:
            raise ValueError("noise='box' draws the value: give value='random'")
        self.noise = noise

    def before_normalize(self, norm: "Normalize") -> "RandomErasing":
        """This erasing where a Normalize follows it (`[ToTensor(), RandomErasing(),
        Normalize(...)]`, as many scripts write it), made on the normalized output: each
        value it writes (the fill, or the noise) is normalized as torchvision's Normalize
        then makes it, (value - mean) / std in float32; the draws are the same."""
        out = copy.copy(self)
        vars(out)["_normalized"] = (norm.mean, norm.std)
        return out

    @property
    def normalized(self) -> bool:
        """A Normalize follows it (before_normalize)."""
        return self._normalized is not None

    def _as_normalized(self, v: torch.Tensor) -> torch.Tensor:
        """`v` [c, ...] (float32) as the Normalize after this erasing makes it."""
        if self._normalized is None:
            return v
        c = v.shape[0]
        mean, std = (torch.tensor(x[:c], dtype=torch.float32).view(c, *[1] * (v.dim() - 1)) for x in self._normalized)
        return (v - mean) / std

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        # torchvision: the coin (_RandomApplyTransform), then make_params' tries
        several = self.count != (1, 1)
        if not rng.random() < self.p:
            return {"erase": None, "erase_boxes": []} if several else {"erase": None}
        if not several:
            return {"erase": self._box(rng, size, 1)}
        # timm's _erase: the number of boxes, then each box's tries (its area a 1/count share)
        lo_c, hi_c = self.count
        count = lo_c if lo_c == hi_c else rng.randint(lo_c, hi_c)
        boxes = [b for b in (self._box(rng, size, count) for _ in range(count)) if b is not None]
        return {"erase": None, "erase_boxes": boxes}

    def _box(self, rng: random.Random, size: tuple[int, int], count: int) -> dict | None:
        """One box: 10 tries of an area (a 1/count share) and an aspect, else None."""
        img_h, img_w = size
        area = img_h * img_w
        lo, hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(10):
            erase_area = area * rng.uniform(*self.scale) if count == 1 else rng.uniform(*self.scale) * area / count
            aspect = math.exp(rng.uniform(lo, hi))
            h = int(round(math.sqrt(erase_area * aspect)))
            w = int(round(math.sqrt(erase_area / aspect)))
            if not (h < img_h and w < img_w):
                continue
            i, j = rng.randrange(img_h - h + 1), rng.randrange(img_w - w + 1)
            return {"i": i, "j": j, "h": h, "w": w, "noise": rng.getrandbits(63) if self.value is None else None}
        return None

    @staticmethod
    def boxes(p: dict) -> list[dict]:
        """An image's boxes, in the order they are erased (one, or count's list)."""
        if "erase_boxes" in p:
            return p["erase_boxes"]
        return [p["erase"]] if p.get("erase") is not None else []

    def erase(self, view: torch.Tensor, params: Sequence[dict], *, batched: bool | None = None) -> None:
        """Erases in place the rectangles `params` drew, image k of `view` [N, C, h, w]
        (C 3, or 1 after Grayscale(1)) with params[k]. On a CUDA tensor (or with batched=True) in a fixed number of
        operations and one upload for the batch (erase_batch), however many images are
        erased; on the CPU image by image (no host-device traffic to save there, and no
        pass over the whole batch). Both give the same values bit for bit."""
        if batched if batched is not None else view.device.type == "cuda":
            self.erase_batch(view, params)
            return
        c = view.shape[1]
        fill = None if self.value is None else self._fill_values(c)[:, None, None]
        for k, p in enumerate(params):
            for e in self.boxes(p):
                i, j, h, w = e["i"], e["j"], e["h"], e["w"]
                if fill is None:  # "random": the sample's own noise, torchvision's shape and law
                    v = self._noise(e, c)
                else:
                    v = fill
                view[k, :, i:i + h, j:j + w] = v.to(view.device, view.dtype)

    def _noise(self, e: dict, c: int = 3) -> torch.Tensor:
        g = torch.Generator().manual_seed(e["noise"])
        if self.noise == "box":  # one colour for the box (timm's "rand")
            box = torch.empty((c, 1, 1), dtype=torch.float32).normal_(generator=g)
            return self._as_normalized(box).expand(c, e["h"], e["w"])
        return self._as_normalized(torch.empty((c, e["h"], e["w"]), dtype=torch.float32).normal_(generator=g))

    def _fill_values(self, c: int) -> torch.Tensor:
        """The fill of an image of c channels (one value repeated; after Grayscale(1) the
        plan has checked that the values are equal)."""
        values = self.value or [0.0]
        return self._as_normalized(torch.tensor((values * 3 if len(values) == 1 else values)[:c], dtype=torch.float32))

    def erase_batch(self, view: torch.Tensor, params: Sequence[dict]) -> None:
        """erase() for a whole batch on its device without a host synchronization: the
        erased images' boxes (and, for value="random", their noise, drawn on the host as
        erase() draws it) go up in one copy from pinned memory, and each erased image is
        rewritten by a fixed number of whole-tensor operations (a mask of its box, the
        fill or its noise gathered into place). Several boxes an image: one round a box
        ordinal (each image's first boxes, then its second...), so an image is written once
        a round and a later box overwrites an earlier one, as erase() does."""
        boxes = [self.boxes(p) for p in params]
        for r in range(max(map(len, boxes), default=0)):
            payload = self.erase_payload([{"erase": b[r] if r < len(b) else None} for b in boxes], view.shape[1])
            if payload is not None:
                self.erase_on_device(view, *payload)

    def erase_payload(self, params: Sequence[dict], c: int = 3) -> tuple[int, list[np.ndarray]] | None:
        """The host side of erase_batch: (erased images, [boxes [m, 5] (k, i, j, h, w) int64,
        then noise offsets int64 and the noise float32, or the fill float32 [c]], as bytes),
        None when nothing is erased; c: the images' channels."""
        erased = [(k, p["erase"]) for k, p in enumerate(params) if p.get("erase") is not None]
        if not erased:
            return None
        boxes = np.array([[k, e["i"], e["j"], e["h"], e["w"]] for k, e in erased], np.int64)
        pieces = [boxes.view(np.uint8).reshape(-1)]
        if self.value is None:
            sizes = boxes[:, 3] * boxes[:, 4] * c
            pieces.append(np.asarray(np.cumsum(sizes) - sizes, np.int64).view(np.uint8))
            pieces.append(torch.cat([self._noise(e, c).reshape(-1) for _, e in erased]).numpy().view(np.uint8))
        else:
            pieces.append(self._fill_values(c).numpy().view(np.uint8))
        return len(erased), pieces

    def erase_on_device(self, view: torch.Tensor, m: int, pieces: list[np.ndarray]) -> None:
        """The device side of erase_batch: one upload, a fixed number of operations."""
        from ..decode._span import stage

        n, c, oh, ow = view.shape
        dev = view.device
        moved = stage(pieces, dev)  # one copy: boxes, then noise offsets and noise, or the fill
        boxes_nbytes = 5 * 8 * m
        b = moved[:boxes_nbytes].view(torch.int64).view(m, 5)
        at = boxes_nbytes
        k_, i_, j_, h_, w_ = (b[:, q] for q in range(5))
        ys = torch.arange(oh, device=dev).view(1, oh, 1)
        xs = torch.arange(ow, device=dev).view(1, 1, ow)
        ry = ys - i_.view(m, 1, 1)
        rx = xs - j_.view(m, 1, 1)
        inside = (ry >= 0) & (ry < h_.view(m, 1, 1)) & (rx >= 0) & (rx < w_.view(m, 1, 1))  # [m, oh, ow]
        inside = inside.unsqueeze(1)  # [m, 1, oh, ow]
        if self.value is None:
            starts_t = moved[at:at + 8 * m].view(torch.int64)
            noise = moved[at + 8 * m:].view(torch.float32)
            # image q's noise is [3, h, w] in C order from starts[q]: its pixel (c, y, x) at
            # starts[q] + (c * h + (y - i)) * w + (x - j) for (y, x) inside its box
            cs = torch.arange(c, device=dev).view(1, c, 1, 1)
            hh, ww = h_.view(m, 1, 1, 1), w_.view(m, 1, 1, 1)
            at_ = starts_t.view(m, 1, 1, 1) + (cs * hh + ry.unsqueeze(1)) * ww + rx.unsqueeze(1)
            values = noise[torch.where(inside, at_, 0)].to(view.dtype)
        else:
            values = moved[at:at + 4 * c].view(torch.float32).view(1, c, 1, 1).to(view.dtype)
        imgs = view[k_]  # [m, C, oh, ow] (a gather: the erased images only)
        view[k_] = torch.where(inside, values, imgs)

    def __repr__(self) -> str:
        value = "random" if self.value is None else self.value
        if in_fingerprint():  # (saved states' form: the names unquoted)
            box = ", noise=box" if self.noise == "box" else ""
            count = f", count={self.count}" if self.count != (1, 1) else ""
            return f"RandomErasing(p={self.p}, scale={self.scale}, ratio={self.ratio}, value={value}{box}{count})"
        box = ", noise='box'" if self.noise == "box" else ""
        count = f", count={self.count}" if self.count != (1, 1) else ""
        return f"RandomErasing(p={self.p}, scale={self.scale}, ratio={self.ratio}, value={value!r}{box}{count})"


class LinearTransformation(Transform, converts="torchvision.LinearTransformation"):
    """torchvision's LinearTransformation (a whitening, ZCA's): each output image,
    flattened in C, H, W order, less `mean_vector`, times `transformation_matrix` (D x D,
    D = 3 x h x w of the output), as the last step, on the kernel's float output and its
    device (one matrix product a batch). It needs a float output (ToDtype(float32,
    scale=True) or Normalize before it) of one size. On a 16-bit output the product is taken
    in float32 and rounded once (torchvision takes it in the 16-bit type)."""

    group = "last"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.transformation_matrix, t.mean_vector)

    def __init__(self, transformation_matrix: Any, mean_vector: Any) -> None:
        m = torch.as_tensor(transformation_matrix).detach()
        v = torch.as_tensor(mean_vector).detach()
        if m.ndim != 2 or m.shape[0] != m.shape[1]:
            raise ValueError(f"transformation_matrix should be square. Got {tuple(m.shape)} rectangular matrix.")
        if v.ndim != 1 or v.shape[0] != m.shape[0]:
            raise ValueError(f"mean_vector should have the same length {tuple(v.shape)} as any one of the "
                             f"dimensions of the transformation_matrix [{tuple(m.shape)}]")
        if not (m.is_floating_point() and v.is_floating_point()):
            raise ValueError("transformation_matrix and mean_vector must be float tensors")
        self._matrix = m.to("cpu", torch.float32).contiguous()
        self._mean = v.to("cpu", torch.float32).contiguous()
        if not (torch.isfinite(self._matrix).all() and torch.isfinite(self._mean).all()):
            raise ValueError("transformation_matrix and mean_vector must be finite")
        import hashlib

        # (the values by their digest, made once: a saved state's fingerprint tells two matrices apart)
        self._digest = hashlib.sha256(self._matrix.numpy().tobytes() + self._mean.numpy().tobytes()).hexdigest()[:16]
        self._on: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def transformation_matrix(self) -> torch.Tensor:
        return self._matrix

    @property
    def mean_vector(self) -> torch.Tensor:
        return self._mean

    def __repr__(self) -> str:
        return f"LinearTransformation(D={self._matrix.shape[0]}, sha256={self._digest})"

    def check_size(self, size: tuple[int, int], channels: int = 3) -> None:
        """Refuses an output size whose images are not D values (TransformError)."""
        if channels * size[0] * size[1] != self._matrix.shape[0]:
            raise TransformError(f"LinearTransformation's matrix is {self._matrix.shape[0]} square, and the output "
                                 f"images are {channels} x {size[0]} x {size[1]} = {channels * size[0] * size[1]} "
                                 "values")

    def transform_batch(self, view: torch.Tensor) -> None:
        """The whitening of every image of `view` ([N, C, h, w], float, any strides), in
        place, with torch's ops on its device (the caller's stream current)."""
        n, c, h, w = view.shape
        self.check_size((h, w), c)
        got = self._on.get(str(view.device))
        if got is None:
            got = self._on[str(view.device)] = (self._matrix.to(view.device), self._mean.to(view.device))
        matrix, mean = got
        flat = view.reshape(n, c * h * w).float() - mean
        view.copy_(torch.mm(flat, matrix).view(n, c, h, w))
