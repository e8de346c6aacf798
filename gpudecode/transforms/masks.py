"""Dense targets moved with their images: a segmentation mask (one class index a pixel)
cropped, resized, padded and flipped exactly as the fused kernel moves the image it
belongs to, with the image's own draws.

torchvision.transforms.v2 moves a `tv_tensors.Mask` beside its image with the same
parameters, resizing it by nearest neighbour whatever the image's interpolation (ATen's
"nearest": source index floor(dst * in / out) in float32, capped at in - 1; exact copies
at scale 1 and 2), and padding it with the fill given for masks. This module does the
same from the kernel's geometry columns (kernels/layout.py: the box of the source, the
size it is resized to, the output window's offset in it, the flips), so that whatever
the kernel does to a sample's image its mask follows: one index per output row and one
per output column, gathered (on the mask's device: the CPU or a CUDA device alike).

A canvas step that places the image unchanged on a larger canvas (RandomZoomOut) is
followed too: the mask is placed as its image is, the canvas around it the mask's fill.
The warps (RandomRotation, expanded or not, RandomAffine, RandomPerspective, also inside
RandomApply, RandomChoice and RandomOrder) are followed by nearest neighbour on the
image's own sampling grid (transforms.warped: `drawn_warps` gathers a batch's), and so
is ElasticTransform (first, on the image; or last, on the kernel's output), by its field.
What moves pixels otherwise (the policies' geometric ops, as torchvision's AutoAugment
family refuses masks) is not followed: `refusal` names it, and a mask is refused with
such a transform rather than handed out misaligned.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch

from ..errors import TransformError
from ..kernels import fused
from .warped import Drawn, Flipped, Mirrored, mirrored
from .canvas import shown

if TYPE_CHECKING:
    from .draws import Draws
    from .plan import _Plan

__all__ = ["refusal", "places", "drawn_warps", "move_mask", "mask_indices", "as_mask", "fill_fits", "warp_mask",
           "warp_masks", "resize_mask",
           "MASK_DTYPES"]

# the dtypes a mask may have (an index a pixel), and what a numpy array of another
# integer dtype becomes (torch has no unsigned types past uint8 for indexing and losses)
MASK_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)
_WIDER = {np.dtype(np.uint16): np.int32, np.dtype(np.uint32): np.int64}


def refusal(plan: "_Plan") -> str | None:
    """Why a mask cannot follow images under `plan` (the step that moves pixels in a way
    the geometry columns do not say), or None where it can."""
    canvas = plan.canvas
    if canvas is not None and not (getattr(canvas, "places", False) or getattr(canvas, "follows", False)):
        return f"{shown(canvas)} makes each image a canvas of its own"
    if plan.first_resize is not None:
        return f"{type(plan.first_resize).__name__} before {type(plan.canvas or plan.geometry[0]).__name__} resizes " \
            "each whole image first"
    moved = next((type(u).__name__ for t in plan.first for u in t.inner() if u.moves and len(u.inner()) == 1), None)
    if moved is not None:
        return f"{moved} before the geometry moves pixels in each whole image"
    if plan.post is not None and not getattr(plan.post, "follows", False):
        return f"{type(plan.post).__name__} warps the kernel's output"
    moving = next((type(u).__name__ for t in plan.program for u in t.inner()
                   if u.moves and not u.follows and len(u.inner()) == 1), None)  # (the step itself, not its wrapper)
    if moving is not None:
        return f"{moving} moves pixels in each sample's program"
    return None


def places(plan: "_Plan", draws: "Draws") -> np.ndarray | None:
    """Each image's place on its canvas [N, 6] (top, left, the image's height and width,
    the canvas's) where `plan` begins with a canvas step that places it (RandomZoomOut),
    else None: the kernel's geometry columns are then the canvas's."""
    canvas: Any = plan.canvas
    if canvas is None or not getattr(canvas, "places", False):  # (an expanded rotation's: drawn_warps)
        return None
    out = np.zeros((len(draws), 6), np.int64)
    for k, (p, (h, w)) in enumerate(zip(draws.dicts(), draws.sizes)):
        out[k] = (*canvas.place(p), h, w, *canvas.canvas_size(p, (h, w)))
    return out


def drawn_warps(plan: "_Plan",
                draws: "Draws") -> tuple[list[list[Drawn]] | None, list[list[Drawn | Mirrored]] | None]:
    """The warps each image's boxes and mask follow under `plan` and `draws`: (before the
    geometry, the canvas step's at the image's size: an expanded rotation; after it, the
    program's at the output's size, in order), one list an image, each None where the plan
    has no such warp."""
    canvas: Any = plan.canvas
    warps_canvas = canvas is not None and getattr(canvas, "follows", False)
    warps_after = any(u.moves for t in plan.program for u in t.inner()) or plan.post is not None
    if not (warps_canvas or warps_after) or not len(draws):
        return None, None
    dicts = draws.dicts()
    before = [canvas.drawn(p, (int(h), int(w))) for p, (h, w) in zip(dicts, draws.sizes)] if warps_canvas else None
    if before is not None and any(plan.canvas_flip):  # (the image flipped before its canvas: its targets alike)
        flips = [(plan.canvas_flip[0] and bool(p.get("flip")), plan.canvas_flip[1] and bool(p.get("vflip")))
                 for p in dicts]
        before = [[Flipped((int(h), int(w)), *f), *b] if any(f) else b
                  for b, f, (h, w) in zip(before, flips, draws.sizes)]
    after = None
    if warps_after:
        if plan.ragged:  # (each image's own output size)
            outs = [(int(h), int(w)) for h, w in draws.out_sizes().tolist()]
        else:
            sizes = draws.sizes if canvas is None else [canvas.canvas_size(p, s) for p, s in zip(dicts, draws.sizes)]
            outs = [plan.output_size(sizes)] * len(dicts)
        post: Any = plan.post  # (last: ElasticTransform on the kernel's output, its field at the output's size)
        after = [[mirrored(d, *plan.mirrored_at(i, p)) for i, t in enumerate(plan.program) for d in t.drawn(p, out)]
                 + (post.drawn(p, out) if post is not None else [])
                 for p, out in zip(dicts, outs)]
    return before, after


def _nearest(v: np.ndarray, n_in: np.ndarray, n_out: np.ndarray) -> np.ndarray:
    """ATen's nearest source index of output index v, for a side of n_in resized to n_out
    (arrays that broadcast)."""
    scale = n_in.astype(np.float32) / n_out.astype(np.float32)
    near = np.minimum(np.floor(v.astype(np.float32) * scale).astype(np.int64), n_in - 1)
    return np.where(n_out == n_in, v, np.where(n_out == 2 * n_in, v >> 1, near))


def frame_indices(v: np.ndarray, size: np.ndarray, pad: np.ndarray) -> np.ndarray:
    """kernels' frame_index over arrays: where each index of a frame of `size` reads it
    under its padding mode `pad` (0: as it is)."""
    low, high = v < 0, v >= size
    out = np.where(pad == 2, np.where(low, -v, np.where(high, 2 * (size - 1) - v, v)), v)
    out = np.where(pad == 3, np.where(low, -v - 1, np.where(high, 2 * size - 1 - v, v)), out)
    return np.where(pad != 0, np.clip(out, 0, np.maximum(size - 1, 0)), v)


def _axis(n: int, flip: np.ndarray, offset: np.ndarray, vsize: np.ndarray, start: np.ndarray,
          size: np.ndarray, own: np.ndarray, pad: np.ndarray | None = None,
          first: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One axis of mask_indices over the batch's `n`; `own`: each sample's own output size
    along it (0: the batch's), past which it is outside (a sample at the top-left of a
    padded batch; a flip mirrors it within its own size). `first`: the flip came before
    the geometry (plan.mirror; the window mirrored in `offset` or `start`): a flipped
    sample's mask is picked as torchvision picks it from the flipped mask, whose nearest
    neighbours are not the mirror of the unflipped one's."""
    o = np.arange(n, dtype=np.int64)
    m = np.where(own > 0, own, n)[:, None]
    flipped = flip[:, None] != 0
    back = flipped & first  # (indices in the flipped frame, mirrored back at the end)
    v = np.where(back, o + vsize[:, None] - m - offset[:, None],
                 np.where(flipped, m - 1 - o, o) + offset[:, None])
    if pad is not None and (pad != 0).any():  # (a padding that reads the frame: where the kernel reads it)
        v = frame_indices(v, vsize[:, None], pad[:, None])
    inside = (v >= 0) & (v < vsize[:, None]) & (o < m)
    v = np.clip(v, 0, np.maximum(vsize - 1, 0)[:, None])
    near = _nearest(v, size[:, None], vsize[:, None])
    return start[:, None] + np.where(back, size[:, None] - 1 - near, near), inside


def mask_indices(geom: np.ndarray, out_size: tuple[int, int], placed: np.ndarray | None = None,
                 mirror: tuple[bool, bool] = (False, False)) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each sample of the kernel's geometry `geom` [N, GEOM] and the output (h, w):
    the source row of each output row [N, h] and whether it is inside the resized image
    (not padding) [N, h], and the same for the columns [N, w] — the mask's rows and
    columns under the image's crop, resize, padding and flips (a sample of its own size,
    OH and OW, at the top-left of the batch's: outside past it). `placed` (places'): the
    geometry is of canvases, each image at its place on its own; a row or column of the
    canvas around the image is outside too. `mirror`: the plan's (a flip before the
    geometry)."""
    g = np.asarray(geom, np.int64).reshape(-1, fused.GEOM)
    oh, ow = out_size
    rows, rin = _axis(oh, g[:, fused.VFLIP], g[:, fused.OY], g[:, fused.VH], g[:, fused.TOP], g[:, fused.BH],
                      g[:, fused.OH], g[:, fused.PAD], mirror[1])
    cols, cin = _axis(ow, g[:, fused.FLIP], g[:, fused.OX], g[:, fused.VW], g[:, fused.LEFT], g[:, fused.BW],
                      g[:, fused.OW], g[:, fused.PAD], mirror[0])
    if placed is not None:  # (canvas rows and columns to the image's own)
        rows, rin = _on_image(rows, rin, placed[:, 0], placed[:, 2])
        cols, cin = _on_image(cols, cin, placed[:, 1], placed[:, 3])
    return rows, rin, cols, cin


def _on_image(v: np.ndarray, inside: np.ndarray, start: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = v - start[:, None]
    inside = inside & (v >= 0) & (v < size[:, None])
    return np.clip(v, 0, np.maximum(size - 1, 0)[:, None]), inside


def fill_fits(fill: int, dtype: torch.dtype) -> bool:
    """Whether a mask of `dtype` can hold the class index `fill`."""
    if dtype == torch.bool:
        return fill in (0, 1)
    info = torch.iinfo(dtype)
    return info.min <= fill <= info.max


def as_mask(mask: Any) -> torch.Tensor:
    """A mask [H, W] (or [1, H, W]) as a tensor of one of MASK_DTYPES.

    Raises:
        TypeError: not 2-D, or not of an integer (or bool) dtype, with what it is."""
    if isinstance(mask, np.ndarray):
        if not mask.dtype.isnative:  # (a big-endian 16-bit PNG's, an .npy's)
            mask = mask.astype(mask.dtype.newbyteorder("="))
        if mask.dtype in _WIDER:
            mask = mask.astype(_WIDER[mask.dtype])
        if mask.dtype.kind not in "iub" or mask.dtype.itemsize > 8:
            raise TypeError(f"a mask is [H, W] of class indices (an integer or bool dtype), not "
                            f"{mask.shape} {mask.dtype}")
        mask = torch.from_numpy(np.ascontiguousarray(mask))
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"a mask is a tensor or array [H, W] of class indices, not {type(mask).__name__}")
    if mask.ndim == 3 and mask.shape[0] == 1:
        mask = mask[0]
    if mask.ndim != 2 or mask.dtype not in MASK_DTYPES:
        raise TypeError(f"a mask is [H, W] of class indices (an integer or bool dtype), not "
                        f"{tuple(mask.shape)} {mask.dtype}")
    return mask


def warp_mask(mask: torch.Tensor, rows: np.ndarray, rin: np.ndarray, cols: np.ndarray, cin: np.ndarray,
              fill: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """One mask [H, W] gathered at (rows x cols) (mask_indices' rows for one sample), and
    `fill` where a row or column is outside the resized image: a new tensor [h, w] on the
    mask's device, or written into `out` ([h, w], on that device, of any mask dtype: the
    values converted as they are written) and returned."""
    if mask.device.type == "cpu":  # (numpy's row-then-column gather: several times torch's index_select on the CPU)
        a = mask.numpy()[rows][:, cols]
        dst = a if out is None else out.numpy()
        if out is not None:
            dst[...] = a
        if not rin.all():
            dst[~rin] = fill
        if not cin.all():
            dst[:, ~cin] = fill
        return torch.from_numpy(a) if out is None else out
    dev = mask.device
    res = mask.index_select(0, torch.from_numpy(rows).to(dev)).index_select(1, torch.from_numpy(cols).to(dev))
    if out is not None:
        res = out.copy_(res)
    if not rin.all():
        res[torch.from_numpy(~rin).to(dev)] = fill
    if not cin.all():
        res[:, torch.from_numpy(~cin).to(dev)] = fill
    return res


def warp_masks(plan: "_Plan", masks: Sequence[Any], draws: "Draws", *, fill: int = 0,
               dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    """Each mask moved as the kernel moves its image under `draws` (the images' draws,
    one a mask, in order): a list of [h, w] tensors, each of `dtype` (default: the
    mask's own), on the mask's device.

    Raises:
        TransformError: a plan whose steps move pixels a mask cannot follow (refusal);
        ValueError: a mask whose size is not its image's, or a fill its dtype cannot hold."""
    why = refusal(plan)
    if why is not None:
        raise TransformError(f"masks cannot follow the images: {why}")
    if len(masks) != len(draws):
        raise ValueError(f"{len(masks)} masks for {len(draws)} images")
    ms = [as_mask(m) for m in masks]
    for k, (m, (h, w)) in enumerate(zip(ms, draws.sizes)):
        if tuple(m.shape) != (int(h), int(w)):
            raise ValueError(f"mask {k} is {m.shape[0]}x{m.shape[1]}, its image {h}x{w}")
    if not ms:
        return []
    geom = draws.encode()[0]
    out_size = batch_size(plan, draws)
    rows, rin, cols, cin = mask_indices(geom, out_size, places(plan, draws), plan.masks_mirrored)
    before, after = drawn_warps(plan, draws)
    out = []
    for k, m in enumerate(ms):
        m = m if dtype is None else m.to(dtype)
        if not fill_fits(int(fill), m.dtype):
            raise ValueError(f"fill {fill} does not fit mask {k}'s {m.dtype}: give a dtype that holds it")
        out.append(move_mask(m, (rows[k], rin[k], cols[k], cin[k]), int(fill), None if before is None else before[k],
                             None if after is None else after[k]))
    return out


def batch_size(plan: "_Plan", draws: "Draws") -> tuple[int, int]:
    """The batch's output (h, w): the plan's one, or (ragged) its largest image's."""
    if not plan.ragged:
        return plan.output_size(draws.sizes)
    own = draws.out_sizes()
    return (int(own[:, 0].max()), int(own[:, 1].max())) if len(own) else (1, 1)


def move_mask(mask: torch.Tensor, index: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], fill: int,
              before: Sequence[Drawn] | None = None, after: Sequence[Drawn | Mirrored] | None = None,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """One mask moved as its image: through the warps `before` the geometry (an expanded
    rotation's canvas), gathered at `index` (its rows of mask_indices: the crop, resize,
    padding and flips), then through the program's warps `after`; `fill` wherever the
    image has none of its own pixels. Into `out` where given (warp_mask's)."""
    for d in before or ():
        mask = d.mask(mask, fill)
    if not after:
        return warp_mask(mask, *index, fill, out)
    moved = warp_mask(mask, *index, fill)
    for warp in after:
        moved = warp.mask(moved, fill)
    return moved if out is None else out.copy_(moved)


def resize_mask(mask: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """A mask [H, W] resized to `size` (h, w) by nearest neighbour, as torchvision resizes
    a tv_tensors.Mask (the resident store's keep_size, where its image was resized)."""
    h, w = size
    g = np.zeros((1, fused.GEOM), np.int64)
    g[0, fused.BH], g[0, fused.BW], g[0, fused.VH], g[0, fused.VW] = mask.shape[0], mask.shape[1], h, w
    rows, rin, cols, cin = mask_indices(g, (h, w))
    return warp_mask(mask, rows[0], rin[0], cols[0], cin[0], 0)
