"""Images of their own sizes in one batch (Compose(ragged=True)): what torchvision's
detection references batch (their collate keeps a tuple of images; the models pad them
themselves), made here as one padded tensor that the kernel writes once."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch


class RaggedBatch(list):
    """A list of images, each [3, h, w] at its own size (or [h, w, 3] in NHWC; a Mask
    field's masks [h, w], their padded batch [N, H, W] with the mask's fill around each), as
    torchvision's detection models take them (`model(list_of_images, targets)`); each a
    view of one padded batch:

        padded  [N, 3, H, W] (NHWC: [N, H, W, 3]), H and W the batch's largest; each
                image at its top-left, zeros around it (after Normalize too: where
                torchvision's detection models pad, GeneralizedRCNNTransform.batch_images)
        sizes   int64 [N, 2], each image's (h, w), on the CPU

    `mask()` gives DETR's padding mask ([N, H, W], True on the padding); `to()` and
    `pin_memory()` move the padded batch in one copy. Indexing and
    iterating give the views; a slice gives a plain list of them. The images are the
    caller's, as a DataLoader batch is (the Loader's held-batch rule covers the views)."""

    def __init__(self, padded: torch.Tensor, sizes: Any, layout: str = "NCHW") -> None:
        sizes = torch.as_tensor(np.asarray(sizes, np.int64).reshape(-1, 2))
        if len(sizes) and int(sizes.min()) < 0:
            raise ValueError(f"sizes must not be negative, got {tuple(sizes.min(0).values.tolist())} at least")
        if len(sizes) != padded.shape[0]:
            raise ValueError(f"{len(sizes)} sizes for a padded batch of {padded.shape[0]}")
        h_at, w_at = (1, 2) if layout == "NHWC" else (padded.ndim - 2, padded.ndim - 1)
        if len(sizes) and (int(sizes[:, 0].max()) > padded.shape[h_at] or int(sizes[:, 1].max()) > padded.shape[w_at]):
            raise ValueError(f"sizes up to {tuple(sizes.max(0).values.tolist())} for a padded batch of "
                             f"{tuple(padded.shape)}")
        if layout == "NHWC":
            views = [padded[k, :h, :w] for k, (h, w) in enumerate(sizes.tolist())]
        else:
            views = [padded[k, ..., :h, :w] for k, (h, w) in enumerate(sizes.tolist())]
        super().__init__(views)
        self.padded = padded
        self.sizes = sizes
        self.layout = layout

    def mask(self) -> torch.Tensor:
        """[N, H, W] bool on the padded batch's device: True where a pixel is padding
        (DETR's NestedTensor mask), False on each image."""
        h_at, w_at = (1, 2) if self.layout == "NHWC" else (self.padded.ndim - 2, self.padded.ndim - 1)
        hh, ww = self.padded.shape[h_at], self.padded.shape[w_at]
        dev = self.padded.device
        sizes = self.sizes.to(dev)
        rows = torch.arange(hh, device=dev).view(1, hh, 1) >= sizes[:, 0].view(-1, 1, 1)
        cols = torch.arange(ww, device=dev).view(1, 1, ww) >= sizes[:, 1].view(-1, 1, 1)
        return rows | cols

    def to(self, *args: Any, **kwargs: Any) -> "RaggedBatch":
        """The batch moved or cast as `Tensor.to` does it, in one copy of the padded batch
        (not one an image, as `[im.to(device) for im in batch]` makes)."""
        return RaggedBatch(self.padded.to(*args, **kwargs), self.sizes, self.layout)

    def pin_memory(self) -> "RaggedBatch":
        """The batch in pinned host memory (for a non_blocking copy to a GPU)."""
        return RaggedBatch(self.padded.pin_memory(), self.sizes, self.layout)

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.padded.shape))
        return (f"RaggedBatch({len(self)} images of their own sizes, padded {shape} {self.padded.dtype} on "
                f"{self.padded.device})")

    def __reduce__(self) -> tuple:  # (pickled as its padded tensor and sizes: the views follow)
        return (RaggedBatch, (self.padded, self.sizes.numpy(), self.layout))
