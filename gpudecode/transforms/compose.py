"""Compose: a fused pipeline (plan, draws, launch on the CPU or a CUDA device)."""
from __future__ import annotations

import os
import random
from typing import Any, Literal, Sequence

import numpy as np
import torch

from ..decode._base import DecodedBatch, is_pil
from ..decode._span import span
from ..errors import DecodeError, TransformError
from ..kernels import fused
from ..kernels.cpu_twin import each_on_threads
from ..kernels.launch import launch
from ..kernels.workspace import Workspace, huge_pages
from . import canvas, first
from .base import Transform, in_fingerprint
from .colour import RGB
from .convert import convert
from .draws import CANVAS_MAX_PIXELS, Draws, as_draws, draw_batch, encode_dicts, python_params
from .boxes import check_format, entries, warp_boxes
from .masks import warp_masks
from .leading import with_flips_moved_back
from .plan import _plan
from .ragged import RaggedBatch

Layout = Literal["NCHW", "NHWC"]


def _on(stream: Any, device: torch.device) -> Any:
    """torch's ops on `stream` (a torch CUDA stream, as the launch takes it) on a CUDA
    device; nothing to do on the CPU or without one (torch's current stream)."""
    import contextlib

    if device.type != "cuda" or stream is None:
        return contextlib.nullcontext()
    return torch.cuda.stream(stream)


def _flat(transforms: Sequence[Transform]) -> list[Transform]:
    """The steps, a Compose among them spread out in its place (torchvision's Compose in a
    Compose runs its steps there, one after the other); its own layout, ragged and grey
    are the outermost Compose's to give."""
    out: list[Transform] = []
    for t in transforms:
        if isinstance(t, Compose):
            if (t.layout, t.ragged, t.grey) != ("NCHW", False, False):
                raise TransformError(f"a Compose inside a Compose takes steps only: give layout=, ragged= and grey= "
                                     f"to the outermost one, not to {t!r}")
            out.extend(t.transforms)
        else:
            out.append(t)
    return out


class Compose(Transform):
    """A fused pipeline. Call it on a uint8 image [3, H, W] (or [1, H, W]: grey, read
    as RGB; with grey=True, kept one channel), a list of such images of any sizes, or a
    batch [N, 3, H, W], on the CPU or a CUDA device; it returns [N, 3, h, w] ([3, h, w]
    for one image; NHWC with layout="NHWC"; one channel after Grayscale(1) or with
    grey=True) on the same device, made for the call, or written into `out=` (a
    tensor of that shape and the output's dtype, returned; reusing one saves the first
    touch of fresh memory, a large part of a CPU call: bench/RESULTS.md). Images are read
    where they lie, in any strides (a batch tensor, CHW views of HWC memory such as
    `torch.from_numpy(hwc).permute(2, 0, 1)`, a list of separate images on the CPU or one
    CUDA device). PIL images, alone or in a list, are read as torchvision's PILToTensor
    makes RGB and L ones (a copy of their pixels), so a torchvision dataset takes the
    Compose as its transform; other modes become RGB as the decoders make them (a
    palette expanded, alpha dropped, 16-bit grey by its high byte). On the CPU a call uses
    torch.get_num_threads() threads (1 in a DataLoader worker).

    Args:
        transforms: the steps (see the module docstring for what can be fused).
        layout: "NCHW" (default) or "NHWC".
        ragged: each image keeps a size of its own, as torchvision's detection recipes
            leave them (no geometry; Resize(int), RandomShortestSize, RandomResize,
            ScaleJitter alone; RandomIoUCrop alone, after RandomZoomOut or not): a call
            (and a Loader batch) gives a `RaggedBatch`, a list of images of their own
            sizes, each a view of one padded batch (its `padded`, `sizes`, `mask()`); a
            Mask field's batch, and `masks()`, a RaggedBatch of the masks so.
        grey: the images have one channel, as torchvision's grey sets give them (MNIST's
            [1, H, W]; the Loader sets it for such sets): the output has one channel, as
            torchvision's on such images (saturation, hue and grayscale change nothing,
            contrast blends with the channel's mean), unless a Grayscale(3) makes three.
            A call then takes images of one channel only ([1, H, W], a batch [N, 1, H, W],
            PIL "L" images).
    """

    def __init__(self, transforms: Sequence[Transform], *, layout: Layout = "NCHW", ragged: bool = False,
                 grey: bool = False, _inner: bool = False) -> None:
        if layout not in ("NCHW", "NHWC"):
            raise ValueError("layout must be 'NCHW' or 'NHWC'")
        self.transforms = _flat(transforms)
        self.layout = layout
        self._ragged = bool(ragged)  # (in the plan: a saved state's fingerprint holds the steps)
        self._grey = bool(grey)
        self.plan = with_flips_moved_back(_plan, self.transforms, self._ragged, self._grey,  # (`[Pad(4), flip, ...]`)
                                          _inner)  # (a first pass's: transforms.first)
        _fits(self.plan, None)
        self._rng = random.Random()

    @property
    def ragged(self) -> bool:
        """Each image keeps its own size: batches are RaggedBatch lists (see Args)."""
        return self._ragged

    @property
    def grey(self) -> bool:
        """The images have one channel (see Args)."""
        return self._grey

    def for_grey(self) -> "Compose":
        """This Compose for images of one channel (grey=True), steps and layout kept."""
        return self if self._grey else Compose(self.transforms, layout=self.layout, ragged=self._ragged, grey=True)

    @property
    def channels(self) -> int:
        """The output's channels: 3, or 1 (a Grayscale(1), or grey images)."""
        return self.plan.channels

    def __repr__(self) -> str:
        """torchvision's form, a step a line (the layout where it is not NCHW); it makes
        this Compose again."""
        if in_fingerprint():  # (saved states' form: every attribute, the plan too)
            if not self._grey and any(isinstance(t, RGB) for t in self.transforms):  # (no step on three channels:
                return repr(Compose([t for t in self.transforms if not isinstance(t, RGB)],  # dropped before RGB was
                                    layout=self.layout, ragged=self._ragged))  # one, as the form saved then)
            return super().__repr__()
        steps = "".join(f"    {t!r},\n" for t in self.transforms)
        layout = f", layout={self.layout!r}" if self.layout != "NCHW" else ""
        ragged = ", ragged=True" if self._ragged else ""
        grey = ", grey=True" if self._grey else ""
        return f"Compose([\n{steps}]{layout}{ragged}{grey})"

    @property
    def first_pass(self) -> "Compose | None":
        """The steps before the geometry that run first, on each whole image at its size
        (plan.first; transforms.first), as a Compose of their own: no geometry (a Resize
        before a RandomResizedCrop is resized after them: first.resized_images), images of
        several sizes in one launch (ragged), uint8; None without them."""
        steps = [t for t in self.plan.first if t is not self.plan.first_resize]  # (first.resized_images')
        if not steps:
            return None
        made = self.__dict__.get("_first_pass")  # (made once; out of the repr, as every _ attribute)
        if made is None:
            made = self._first_pass = Compose(steps, ragged=True, grey=self._grey, _inner=True)
        return made

    @property
    def rrc(self) -> bool:
        """The geometry is a RandomResizedCrop (the window the kernel reads is its crop)."""
        return self.plan.rrc

    @property
    def out_size(self) -> tuple[int, int] | None:
        """(h, w) of every output; None without a geometry step (images keep their size)."""
        return self.plan.out_size

    @property
    def native_spec(self) -> tuple | None:
        """The plan as the native draws read it; None: the Python path draws it."""
        return self.plan.native_spec

    def output_size(self, sizes: Sequence[tuple[int, int]]) -> tuple[int, int]:
        """The output (h, w) for images of `sizes` (see _Plan.output_size)."""
        return self.plan.output_size(sizes)

    @property
    def dtype(self) -> torch.dtype:
        return self.plan.dtype

    def make_params(self, sizes: Sequence[tuple[int, int]], seed: int, *, epoch: int = 0,
                    indices: Sequence[int] | None = None, boxes: Sequence[Any] | None = None) -> list[dict]:
        """One dict per image of size (height, width), with torchvision's names: `crop`
        (top, left, height, width) (for Resize + CenterCrop: in the resized image, whose
        size is `resize`; after a flip before the geometry: in the flipped image), `flip`,
        `brightness`, `contrast`, `saturation`, `hue` (None when off), `order`
        (torchvision's fn_idx). (seed, epoch, index) fixes each draw.
        `boxes`: see draw_batch."""
        return self.draw_batch(sizes, seed, epoch=epoch, indices=indices, boxes=boxes).dicts()

    def draw_batch(self, sizes: Sequence[tuple[int, int]], seed: int, *, epoch: int = 0,
                   indices: Sequence[int] | np.ndarray | None = None, size_array: np.ndarray | None = None,
                   boxes: Sequence[Any] | None = None, format: str = "XYXY") -> Draws:
        """make_params' draws as a `Draws` (a sequence of its dicts, made when read; the
        kernel's arrays made without them): for the common plans in one native call for
        the batch, else by the Python path (see transforms.draws). `size_array`: `sizes`
        as int64 [N, 2], where the caller has it. `boxes`: each image's boxes (anything
        Compose.boxes takes, in `format`), which a Compose with RandomIoUCrop draws its
        crops from (the Loader gives its Boxes field's)."""
        xyxy = None
        if boxes is not None and self.plan.reads_boxes:
            xyxy = [b for b, _ in entries(boxes, check_format(format))]
        return draw_batch(self.plan, sizes, seed, epoch=epoch, indices=indices, size_array=size_array, boxes=xyxy)

    def _python_params(self, sizes: Sequence[tuple[int, int]], seed: int, *, epoch: int = 0,
                       indices: Sequence[int] | np.ndarray | None = None) -> list[dict]:
        """make_params drawn in Python, a sample at a time (the native draws' reference)."""
        return python_params(self.plan, sizes, seed, epoch=epoch, indices=indices)

    def encode(self, params: Sequence[dict], sizes: Sequence[tuple[int, int]]) -> tuple[np.ndarray, ...]:
        """Kernel arrays for `params` (geom, args, order: see transforms.draws.encode_dicts)."""
        return encode_dicts(self.plan, params, sizes)

    def decode_boxes(self, params: Sequence[dict], sizes: Sequence[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
        """The window (top, left, height, width) of each image the kernel reads, for a
        decoder to decode no more than that: RandomResizedCrop's crop; the whole image for
        Resize/CenterCrop (every source pixel can reach the output through the filter)."""
        return [tuple(b) for b in as_draws(self.plan, params, sizes).boxes().tolist()]  # type: ignore[misc]

    def masks(self, masks: Sequence[Any], params: Sequence[dict], *, fill: int = 0,
              dtype: torch.dtype | None = None) -> torch.Tensor:
        """The images' masks moved as this Compose moves the images under `params` (the
        images' own draws: make_params, draw_batch), as torchvision.transforms.v2 moves a
        tv_tensors.Mask beside its image: cropped, resized by nearest neighbour, padded with
        `fill`, flipped, and rotated or warped (RandomRotation, RandomAffine,
        RandomPerspective) by nearest neighbour with `fill` outside. `masks`: one [H, W]
        tensor or array of class indices an image (its size), on the CPU or a CUDA device;
        returns [N, h, w] of `dtype` (default: the masks' own) on their device (with
        ragged=True a RaggedBatch: each mask at its image's own size, `fill` around it in
        `padded`). A Compose
        that moves pixels otherwise (the policies' geometric ops) is refused
        (transforms.masks); ElasticTransform is followed, by its field."""
        sizes = params.sizes if isinstance(params, Draws) else [tuple(m.shape[-2:]) for m in masks]
        draws = as_draws(self.plan, params, sizes)
        out = warp_masks(self.plan, masks, draws, fill=fill, dtype=dtype)
        if not out:
            raise ValueError("no masks given")
        if self.plan.ragged:  # (each at its image's own size: views of the padded batch, `fill` around each)
            return RaggedBatch(torch.stack(out), draws.out_sizes())  # type: ignore[return-value]
        return torch.stack(out)

    def boxes(self, boxes: Sequence[Any], params: Sequence[dict], *, sizes: Sequence[tuple[int, int]] | None = None,
              format: str = "XYXY", out_format: str | None = None, min_size: float | None = None,
              min_area: float | None = None) -> list[dict[str, torch.Tensor]]:
        """The images' bounding boxes moved as this Compose moves the images under `params`
        (the images' own draws, with their sizes: draw_batch), as torchvision.transforms.v2
        moves a tv_tensors.BoundingBoxes beside its image and SanitizeBoundingBoxes then
        drops the boxes under `min_size` / `min_area` with their labels after the last step
        (a warp moves a box's four corners and takes the box around them, as torchvision
        does; transforms.warped). `boxes`: one entry an
        image, [K, 4] in `format` or a record with labels (transforms.boxes.as_boxes says
        which); `sizes`: the images' (height, width), where `params` are dicts (draw_batch's
        Draws carry them). Returns one {"boxes", "labels"} dict an image, on the CPU, its
        boxes in `out_format`. Where not given, `out_format` is this Compose's
        ConvertBoundingBoxFormat's (else `format`), and min_size and min_area are its
        SanitizeBoundingBoxes' (else 1 and 1). A Compose that moves pixels otherwise is
        refused, as for masks."""
        if isinstance(params, Draws):
            sizes = params.sizes
        elif sizes is None:
            raise TypeError("Compose.boxes needs the images' sizes: give sizes=, or draw_batch's draws")
        draws = as_draws(self.plan, params, sizes)
        out_format = out_format if out_format is not None else self.plan.box_format
        said = self.plan.box_sizes or (1.0, 1.0)
        return warp_boxes(self.plan, boxes, draws, fmt=check_format(format),
                          out_fmt=None if out_format is None else check_format(out_format),
                          min_size=said[0] if min_size is None else min_size,
                          min_area=said[1] if min_area is None else min_area)

    def apply(self, decoded: "DecodedBatch", params: Sequence[dict], sizes: Sequence[tuple[int, int]],
              view: torch.Tensor, *, rows: Sequence[int] | None = None, stream: Any = None,
              num_threads: int | None = None, workspace: Workspace | None = None) -> None:
        """The fused kernel on decoded images: output i of `view` ([N, 3, h, w], any
        strides) is image rows[i] of `decoded` (default: every image, in order; a row may
        come more than once) transformed with params[rows[i]]; `sizes` are the full images'
        sizes (what the params were drawn for). The geometry the kernel reads is built here,
        once, from the decoder's offsets, strides and boxes. `workspace`: see run().

        Raises:
            ValueError: params that do not fit their image (a crop outside it).
            KernelLaunchError: the CUDA kernel could not be compiled or launched (names the
                batch shape and device; the driver's error as __cause__).
        """
        idx = np.arange(len(params)) if rows is None else np.asarray(rows, np.int64)
        if len(idx) != view.shape[0]:
            raise ValueError(f"{len(idx)} images for an output of {view.shape[0]}")
        if len(idx) == 0:
            return
        draws = as_draws(self.plan, params, sizes)
        # every image in order: slices (views) where a copy by `idx` would be the same rows
        pick: Any = slice(None) if rows is None and len(decoded.boxes) == len(idx) else idx
        if stream is None and workspace is not None and decoded.pixels.device.type == "cpu":
            # the CPU twin's work rows, declared for the batch's widest image (no crop it draws is
            # wider) and its filter weights for its largest side: a run of images of one size
            # never makes them again, whatever the crops
            hw = (draws.size_array[pick] if isinstance(params, Draws)  # (a caller's dicts may size only `rows`)
                  else np.asarray([sizes[k] for k in idx.tolist()], np.int64).reshape(-1, 2))
            fused.reserve_cpu(workspace, num_threads or (os.cpu_count() or 1), int(hw[:, 1].max()),
                              tuple(view.shape), int(hw.max()))
        geom, args, order = draws.encode(None if rows is None else idx)
        if not self.plan.makes_images:
            read = pick
            geom[:, fused.TOP:fused.BW + 1] = decoded.boxes[pick]  # (the window the decoder gave)
        else:  # the kernel reads the images the first pass or the canvas step made, in them the boxes encoded
            made, made_params, made_sizes = idx, params, sizes
            if self.plan.first:  # (each whole image through the steps before the geometry: transforms.first)
                decoded = first.build(self.first_pass, decoded, draws.dicts(), sizes, idx, stream=stream,
                                      resize=self.plan.first_resize,
                                      num_threads=num_threads, workspace=workspace)
                made, made_params, made_sizes = (np.arange(len(idx)), [draws[k] for k in idx.tolist()],
                                                 [(int(h), int(w)) for h, w in decoded.shapes.tolist()])
            if self.plan.canvas is not None:  # (only the part of each canvas the crop reads, where it can)
                windows = canvas.windows(self.plan, geom, (int(view.shape[2]), int(view.shape[3])))
                decoded = canvas.build(self.plan.canvas, decoded, made_params, made_sizes, made, workspace, windows,
                                      num_threads=num_threads or (os.cpu_count() or 1), flips=self.plan.canvas_flip,
                                      parts=canvas.reads_parts(self.plan))
            read = np.arange(len(idx))
        geom[:, fused.OFFSET] = decoded.offsets[read]
        geom[:, fused.H:fused.W + 1] = decoded.shapes[read]
        geom[:, fused.SY:fused.SC + 1] = decoded.strides[read]
        if self.plan.post is None:
            self.run(decoded.pixels, geom, args, order, view, stream=stream, num_threads=num_threads,
                     workspace=workspace)
        else:
            self._run_then_warp(decoded.pixels, geom, args, order, view, [params[k] for k in idx], stream,
                                num_threads, workspace)
        own = view[:, :1] if self.plan.channels == 1 else view  # (the output's own channels)
        if self.plan.erase is not None:  # after the kernel, on its output (and its stream)
            self.plan.erase.erase(own, [params[k] for k in idx])
        if self.plan.linear is not None:  # last, on the output (erased or not), on the kernel's stream
            with _on(stream, view.device):
                self.plan.linear.transform_batch(own)

    def _run_then_warp(self, src: torch.Tensor, geom: np.ndarray, args: np.ndarray, order: np.ndarray,
                       view: torch.Tensor, params: list[dict], stream: Any, num_threads: int | None,
                       workspace: Workspace | None) -> None:
        """The kernel into float32 images on the [0, 1] scale, the plan's `post` warp of
        them (torch's ops on their device, on `stream`), then Normalize and the dtype as
        the kernel writes them (kernels/_pixel.encode_output) into `view`. On the CPU the
        samples after the kernel are shared out to up to `num_threads` threads (torch's
        ops on one thread each)."""
        n, _, oh, ow = view.shape
        images = (workspace.tensor("post-images", (n, 3, oh, ow), torch.float32, view.device) if workspace is not None
                  else torch.empty((n, 3, oh, ow), dtype=torch.float32, device=view.device))
        ones = np.ones(3, np.float32)
        launch(src, geom, args, order, np.zeros(3, np.float32), ones, images, normalize=False,
               antialias=self.plan.antialias, stream=stream, num_threads=num_threads, workspace=workspace)

        def finish(a: int, b: int) -> None:  # (samples a to b - 1)
            part, out = images[a:b], view[a:b]
            self.plan.post.warp_output(part, params[a:b], self.plan.post_levels)  # type: ignore[union-attr]
            if self.plan.normalize is not None:
                mean, inv = self._norm_tensors(view.device)
                part.sub_(mean).mul_(inv)
            elif view.dtype == torch.uint8:
                part.mul_(255.999).floor_()
            if self.plan.channels == 1:  # (the view's channels are one memory: the first written)
                out[:, :1].copy_(part[:, :1])
            else:
                out.copy_(part)

        if view.device.type == "cpu":
            threads = max(1, min(n, num_threads or (os.cpu_count() or 1)))
            cuts = np.linspace(0, n, threads + 1).astype(int)
            each_on_threads(lambda t: finish(int(cuts[t]), int(cuts[t + 1])), threads, threads)
        else:
            with _on(stream, view.device):
                finish(0, n)

    def _norm_tensors(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalize's mean and 1/std as [1, 3, 1, 1] float32 tensors on `device`, made once
        a device (no host-to-device copy a batch)."""
        cache: dict = self.__dict__.setdefault("_norm_on", {})
        got = cache.get(str(device))
        if got is None:
            mean, std = self._norm_arrays()
            got = cache[str(device)] = (torch.from_numpy(mean).view(1, 3, 1, 1).to(device),
                                        (1.0 / torch.from_numpy(std)).view(1, 3, 1, 1).to(device))
        return got

    def _norm_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        nz = self.plan.normalize
        mean = np.asarray(nz.mean if nz else (0.0, 0.0, 0.0), np.float32)
        std = np.asarray(nz.std if nz else (1.0, 1.0, 1.0), np.float32)
        return mean, std

    def new_output(self, n: int, device: torch.device | str = "cpu", *, pin_memory: bool = False,
                   size: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(output tensor in `layout`, its [N, 3, h, w] view that the kernel writes);
        pinned host memory with `pin_memory` on the CPU (where CUDA is present). `size`:
        the images' size, for a Compose without geometry. An output of one channel
        (Grayscale(1)) is [N, 1, h, w] (NHWC: [N, h, w, 1]), its view that channel three
        times (stride 0)."""
        if self.plan.out_size is None and size is None:
            raise ValueError("a Compose without a geometry step needs the images' size for its output")
        oh, ow = self.plan.out_size or size  # type: ignore[misc]
        _fits(self.plan, (oh, ow))
        pin = pin_memory and torch.device(device).type == "cpu" and torch.cuda.is_available()
        # (a large host output in 2 MiB pages where the kernel gives them: kernels.workspace.huge_pages)
        c = self.plan.channels
        if self.layout == "NHWC":
            out = huge_pages(torch.empty((n, oh, ow, c), dtype=self.plan.dtype, device=device, pin_memory=pin),
                             touch=True)
            return out, _three(out.permute(0, 3, 1, 2))
        out = huge_pages(torch.empty((n, c, oh, ow), dtype=self.plan.dtype, device=device, pin_memory=pin), touch=True)
        return out, _three(out)

    def run(self, src: torch.Tensor, geom: np.ndarray, args: np.ndarray, order: np.ndarray,
            view: torch.Tensor, *, stream: Any = None, num_threads: int | None = None,
            workspace: Workspace | None = None) -> None:
        """Runs the fused kernel on a packed uint8 buffer `src` (1-D, CPU or CUDA) with
        complete geom rows, writing the [N, 3, h, w] view of the output (on the CPU with
        `num_threads` threads, default all cores; on CUDA on `stream`). `workspace`
        (kernels.workspace.Workspace): the buffers the kernel works in, kept by the caller
        between launches (a Pipeline holds one per view); without one they are made for
        this call. The kernel alone: what runs before it (a first pass, a canvas step) or
        after it (a warp of the output, the erasing) is apply()'s."""
        mean, std = self._norm_arrays()
        launch(src, geom, args, order, mean, std, view, normalize=self.plan.normalize is not None,
               antialias=self.plan.antialias, stream=stream, num_threads=num_threads, workspace=workspace)

    def __call__(self, images: torch.Tensor | Sequence[torch.Tensor] | Any, params: Sequence[dict] | None = None,
                 *, seed: int | None = None, out: torch.Tensor | None = None) -> Any:
        if not isinstance(images, (torch.Tensor, list, tuple)):  # (one PIL image, as torchvision's are called)
            images = _pil_tensor(images, 0) if is_pil(images) else images
        single = isinstance(images, torch.Tensor) and images.ndim == 3
        if isinstance(images, torch.Tensor) and images.ndim == 4:  # a batch tensor: no per-image work
            device, sizes, shapes, (src, offsets, strides) = _batch_source(images)
            owners: Sequence[torch.Tensor] = [images]
        else:
            if isinstance(images, torch.Tensor) and images.ndim != 3:
                raise ValueError(f"expected an image [C, H, W] or a batch [N, C, H, W], got shape {tuple(images.shape)}")
            owners = batch = [images] if isinstance(images, torch.Tensor) else list(images)
            sizes, devices, dense = [], set(), True  # (one pass: a direct call of one image pays each step)
            for k, im in enumerate(batch):
                if not isinstance(im, torch.Tensor) and is_pil(im):
                    im = batch[k] = _pil_tensor(im, k)
                if (not isinstance(im, torch.Tensor) or im.dtype != torch.uint8 or im.ndim != 3
                        or im.shape[0] not in (1, 3)):
                    raise TypeError(f"image {k}: expected a uint8 tensor [3, H, W] or [1, H, W] or a PIL image, "
                                    f"got {getattr(im, 'dtype', type(im))} {tuple(getattr(im, 'shape', ()))}")
                devices.add(im.device)
                dense = dense and im.layout == torch.strided
                sizes.append((im.shape[1], im.shape[2]))
            if len(devices) > 1:
                raise ValueError(f"images are on several devices: {devices}")
            device = batch[0].device if batch else torch.device("cpu")
            _check_device(device, dense, batch[0].layout if batch else torch.strided)
            shapes = np.asarray(sizes, np.int64).reshape(len(batch), 2)
            src, offsets, strides = _sources(batch, device)
        n = len(sizes)
        if self._grey and (strides[:, 2] != 0).any():  # (three channels of their own: not grey)
            k = int(np.flatnonzero(strides[:, 2] != 0)[0])
            raise ValueError(f"image {k} has 3 channels: Compose(grey=True) takes images of one channel ([1, H, W])")
        if params is None:  # (kept as the draws' columns: no dicts made and read back)
            params = self.draw_batch(sizes, self._rng.getrandbits(63) if seed is None else seed, size_array=shapes)
        elif len(params) != n:
            raise ValueError(f"{len(params)} params for {n} images")
        draws = as_draws(self.plan, params, sizes)
        # whole images: the box of each is the window the transform needs, inside it
        decoded = DecodedBatch(src, offsets, shapes, strides, draws.boxes(), [None] * n)
        if self.plan.ragged:
            return self._ragged_call(decoded, draws, sizes, device, single, out)
        if out is None:
            out, view = self.new_output(n, device, size=self.output_size(sizes))
        else:
            view = self._given_output(out, n, device, self.output_size(sizes), single, owners)
        self.apply(decoded, draws, sizes, view, num_threads=torch.get_num_threads() if device.type == "cpu" else None)
        return out[0] if single and out.ndim == 4 else out

    def _ragged_call(self, decoded: DecodedBatch, draws: Draws, sizes: Sequence[tuple[int, int]], device: torch.device,
                     single: bool, out: Any) -> Any:
        """A call under ragged=True: a RaggedBatch of the images at their own sizes (one image:
        its tensor, at its size)."""
        if out is not None:
            raise ValueError("out= is not taken with ragged=True: each call's padded batch has the size of its "
                             "largest image")
        own = draws.out_sizes()
        size = (int(own[:, 0].max()), int(own[:, 1].max())) if len(own) else (1, 1)
        padded, view = self.new_output(len(own), device, size=size)
        self.apply(decoded, draws, sizes, view, num_threads=torch.get_num_threads() if device.type == "cpu" else None)
        batch = RaggedBatch(padded, own, self.layout)
        return batch[0] if single else batch

    def _given_output(self, out: torch.Tensor, n: int, device: torch.device, size: tuple[int, int], single: bool,
                      batch: Sequence[torch.Tensor]) -> torch.Tensor:
        """The [N, 3, h, w] view the kernel writes of a caller's `out=`, or a ValueError
        saying what it should be."""
        oh, ow = size
        c = self.plan.channels
        shape = (n, oh, ow, c) if self.layout == "NHWC" else (n, c, oh, ow)
        want = shape[1:] if single else shape
        if tuple(out.shape) != want or out.dtype != self.plan.dtype or out.device != device:
            raise ValueError(f"out= must be a {self.plan.dtype} tensor of shape {list(want)} on {device} "
                             f"(this call's {self.layout} output), got {out.dtype} {list(out.shape)} on {out.device}")
        if out.requires_grad or out.layout != torch.strided:
            raise ValueError("out= must be a dense tensor that does not require grad")
        if any(out.untyped_storage().data_ptr() == im.untyped_storage().data_ptr() for im in batch):
            raise ValueError("out= shares memory with the images being transformed")
        full = out.unsqueeze(0) if single else out
        return _three(full.permute(0, 3, 1, 2) if self.layout == "NHWC" else full)

    @classmethod
    def from_torchvision(cls, tv: Any, *, layout: Layout = "NCHW", ragged: bool = False,
                         grey: bool = False) -> "Compose":
        """The fused equivalent of a torchvision (v1 or v2) Compose, or a clear refusal.
        ToImage/PILToTensor/ToTensor-style input conversions are dropped (the loader
        feeds uint8 tensors); ToTensor becomes ToDtype(float32, scale=True). `ragged`: see
        the class doc (a detection recipe that leaves each image its own size); `grey`:
        images of one channel (MNIST's, as a dataset's transform: see the class doc)."""
        return cls(convert(tv), layout=layout, ragged=ragged, grey=grey)


def _three(view: torch.Tensor) -> torch.Tensor:
    """The [N, 3, h, w] view the kernel writes of an output [N, C, h, w]: itself, or one
    channel three times (stride 0: the kernel writes three equal values to it)."""
    return view if view.shape[1] == 3 else view.expand(view.shape[0], 3, view.shape[2], view.shape[3])


def _pil_tensor(image: Any, k: int) -> torch.Tensor:
    """A PIL image as the kernel reads it: its pixels as the decoders make every image
    (decode.cpu.pil_pixels: RGB; grey kept as one channel, read as RGB; a palette expanded,
    alpha dropped, 16-bit levels by their high byte), copied, as a CHW view of HWC memory."""
    from ..decode.cpu import pil_pixels

    try:  # (a lazily opened image is decoded here: a cut or corrupt file fails here)
        array = pil_pixels(image, grey=True)
    except (OSError, SyntaxError, ValueError) as e:
        name = getattr(image, "filename", None) or None
        raise DecodeError(f"image {k}: PIL could not read its pixels ({type(e).__name__}: {e}).", key=name) from e
    pixels = torch.from_numpy(array if array.flags.writeable else array.copy())
    return pixels.permute(2, 0, 1)


def _check_device(device: torch.device, dense: bool, layout: torch.layout) -> None:
    if device.type not in ("cpu", "cuda") or not dense:
        raise ValueError(f"images must be dense tensors on the CPU or a CUDA device, not {device.type} {layout}")


def _storage_bytes(image: torch.Tensor) -> torch.Tensor:
    """The whole storage of a uint8 tensor as a 1-D view from its start (a byte an element)."""
    return image.as_strided((image.untyped_storage().nbytes(),), (1,), 0)


def _batch_source(images: torch.Tensor) -> tuple[torch.device, list[tuple[int, int]], np.ndarray,
                                                  tuple[torch.Tensor, np.ndarray, np.ndarray]]:
    """A batch tensor [N, C, H, W] as _sources gives images, with no work per image (a
    batch of 1024 CIFAR images a call): (device, sizes, shapes [N, 2], (its storage as
    bytes, each image's offset in it, strides [N, 3]))."""
    if images.dtype != torch.uint8 or images.shape[1] not in (1, 3):
        raise TypeError(f"expected a uint8 batch [N, 3, H, W] or [N, 1, H, W], got {images.dtype} "
                        f"{tuple(images.shape)}")
    _check_device(images.device, images.layout == torch.strided, images.layout)
    n, c, h, w = images.shape
    sn, sc, sy, sx = images.stride()
    shapes = np.empty((n, 2), np.int64)
    shapes[:] = (h, w)
    strides = np.empty((n, 3), np.int64)
    strides[:] = (sy, sx, sc if c == 3 else 0)
    offsets = int(images.storage_offset()) + int(sn) * np.arange(n, dtype=np.int64)
    return images.device, [(h, w)] * n, shapes, (_storage_bytes(images), offsets, strides)


def _sources(batch: Sequence[torch.Tensor], device: torch.device) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """The images of a direct call as the kernel reads them: one 1-D uint8 buffer, each
    image's offset in it and its (row, column, channel) strides in bytes (a grey image's
    channel stride 0: read as RGB). Images are read where they lie, in any strides, on
    either device: those sharing one storage (a batch tensor, a CHW view of HWC memory)
    through it; separate images through a view of the stretch of address space they lie
    in (decode._span: the kernel reads only each image's own bytes, nothing between them;
    a device's allocations share one virtual address space, as the GPU decoders' do)."""
    n = len(batch)
    strides = np.zeros((n, 3), np.int64)
    for k, im in enumerate(batch):
        sc, sy, sx = im.stride()
        strides[k] = (sy, sx, sc if im.shape[0] == 3 else 0)
    if not batch:
        return torch.empty(0, dtype=torch.uint8, device=device), np.zeros(0, np.int64), strides
    if len({im.untyped_storage().data_ptr() for im in batch}) == 1:
        return _storage_bytes(batch[0]), np.asarray([im.storage_offset() for im in batch], np.int64), strides
    extents = [1 + sum((size - 1) * st for size, st in zip(im.shape, im.stride())) if im.numel() else 0
               for im in batch]
    read = [k for k, e in enumerate(extents) if e]  # (an empty image is never read: offset 0)
    pixels, rel = span([batch[k].data_ptr() for k in read], [extents[k] for k in read], device)
    offsets = np.zeros(n, np.int64)
    offsets[read] = rel
    return pixels, offsets, strides


def _fits(plan: Any, size: tuple[int, int] | None) -> None:
    """Outputs over CANVAS_MAX_PIXELS an image (twice Pillow's bomb limit, the Loader's
    default max_pixels) refused before anything is made: when the Compose is made where
    its size is its own, at the batch where the images give it (`Pad(30000)`)."""
    why = plan.over_limit(CANVAS_MAX_PIXELS, size)
    if why is not None:
        raise TransformError(f"{why}, twice Pillow's decompression-bomb limit: crop to a smaller size")
