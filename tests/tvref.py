"""torchvision.transforms.v2.functional as the specification: replay gpudecode params."""
from __future__ import annotations

import torch
import torchvision.transforms.v2.functional as F

OPS = [("brightness", F.adjust_brightness), ("contrast", F.adjust_contrast),
       ("saturation", F.adjust_saturation), ("hue", F.adjust_hue)]


def torchvision_apply(img: torch.Tensor, p: dict, out_size, *, mean=None, std=None, resize=False,
                      antialias=True, pixel=()) -> torch.Tensor:
    """img uint8 [C, H, W] -> float32 [3, h, w] with torchvision's functional ops; `pixel`:
    (params key, function) of the per-pixel ops after ColorJitter, in their order."""
    x = F.to_dtype(img, torch.float32, scale=True)
    if x.shape[0] == 1:
        x = x.expand(3, -1, -1)
    if resize:
        x = F.resize(x, list(p["resize"]), antialias=antialias)
        if "crop" in p:
            x = F.center_crop(x, list(out_size))
    elif "crop" in p:  # RandomCrop's padding: F.crop pads with zeros outside the image
        t, l, h, w = p["crop"]
        x = F.resized_crop(x, t, l, h, w, list(out_size), antialias=antialias)
    if p.get("flip"):
        x = F.horizontal_flip(x)
    if p.get("vflip"):
        x = F.vertical_flip(x)
    for op in p.get("order", []):
        name, fn = OPS[op]
        if p.get(name) is not None:
            x = fn(x, p[name])
    for key, fn in pixel:
        if p.get(key):
            x = fn(x)
    if mean is not None:
        x = F.normalize(x, mean, std)
    return x


def pack_hwc(imgs, geom, sizes):
    """The uint8 CHW tensors `imgs` packed HWC one after another, as the decoders leave
    them, with geom's OFFSET and stride columns filled in: the kernels' `src`."""
    import numpy as np

    from gpudecode.kernels import fused

    off = 0
    for k, (h, w) in enumerate(sizes):
        geom[k, fused.OFFSET] = off
        geom[k, fused.SY], geom[k, fused.SX], geom[k, fused.SC] = w * 3, 3, 1
        off += h * w * 3
    return np.concatenate([i.permute(1, 2, 0).reshape(-1).numpy() for i in imgs])
