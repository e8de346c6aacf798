"""Compose: a fused pipeline (plan, draws, launch on the CPU or a CUDA device)."""
from __future__ import annotations

import random
from typing import Any, Literal, Sequence

import numpy as np
import torch

from .. import _native
from ..decode._base import DecodedBatch
from ..errors import KernelLaunchError, TransformError
from ..kernels import fused
from ..kernels.ops import ARGS, OPS, OPS_ARGS
from ..kernels.workspace import Workspace
from .base import Transform
from .convert import convert
from .draws import Draws, native_spec
from .geometry import RandomResizedCrop
from .plan import _plan
from .rng import _epoch_key, _SampleRandom

Layout = Literal["NCHW", "NHWC"]


MAX_CUDA_BATCH = 65535  # the kernels' grid is (columns, rows, images): gridDim.z's limit


def launch_failure(err: BaseException, shape: tuple[int, ...], device: str) -> KernelLaunchError | None:
    """`err`, raised launching the fused CUDA kernel, as a KernelLaunchError when it is
    the driver's, the compiler's or numba's (a bad launch, an unsupported GPU or PTX, a
    typing error), naming the output shape and device; None for anything else (out of
    memory, a bug), which stays what it is."""
    from numba.core.errors import NumbaError
    from numba.cuda.cudadrv import driver, error

    names = ("CudaAPIError", "CudaDriverError", "CudaSupportError", "LinkerError", "CudaRuntimeError", "NvvmError",
             "NvrtcError")  # (the simulator's driver module has only some of them)
    kinds = (NumbaError, *{k for m in (driver, error) for n in names if isinstance(k := getattr(m, n, None), type)})
    if not isinstance(err, kinds):
        return None
    detail = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return KernelLaunchError(f"the fused CUDA kernel could not be launched on {device} for an output of "
                             f"{list(shape)}: {type(err).__name__}{': ' + detail if detail else ''}")


class Compose(Transform):
    """A fused pipeline. Call it on a uint8 image [3, H, W] (or [1, H, W]: grey, read
    as RGB), a list of such images of any sizes, or a batch [N, 3, H, W], on the CPU or
    a CUDA device; it returns [N, 3, h, w] ([3, h, w] for one image; NHWC with
    layout="NHWC") on the same device.

    Args:
        transforms: the steps (see the module docstring for what can be fused).
        layout: "NCHW" (default) or "NHWC".
    """

    def __init__(self, transforms: Sequence[Transform], *, layout: Layout = "NCHW") -> None:
        if layout not in ("NCHW", "NHWC"):
            raise ValueError("layout must be 'NCHW' or 'NHWC'")
        self.transforms = list(transforms)
        self.layout = layout
        self.plan = _plan(self.transforms)
        self._rng = random.Random()
        self.native_spec = native_spec(self.plan)  # None: the Python path draws (see transforms.draws)

    @property
    def rrc(self) -> bool:
        """The geometry is a RandomResizedCrop (the window the kernel reads is its crop)."""
        return bool(self.plan.geometry) and isinstance(self.plan.geometry[0], RandomResizedCrop)

    @property
    def out_size(self) -> tuple[int, int] | None:
        """(h, w) of every output; None without a geometry step (images keep their size)."""
        return self.plan.out_size

    def output_size(self, sizes: Sequence[tuple[int, int]]) -> tuple[int, int]:
        """The output (h, w) for images of `sizes`.

        Raises:
            ValueError: no geometry step and the images differ in size.
        """
        if self.plan.out_size is not None:
            return self.plan.out_size
        distinct = sorted(set(map(tuple, sizes)))
        if len(distinct) > 1:
            raise ValueError(f"images of {len(distinct)} sizes ({distinct[0]}, {distinct[1]}, ...): without a "
                             "geometry step each image keeps its size, so a batch needs one size (add "
                             "CenterCrop, RandomCrop or Resize)")
        return (int(distinct[0][0]), int(distinct[0][1])) if distinct else (1, 1)

    @property
    def dtype(self) -> torch.dtype:
        return self.plan.dtype

    def make_params(self, sizes: Sequence[tuple[int, int]], seed: int, *, epoch: int = 0,
                    indices: Sequence[int] | None = None) -> list[dict]:
        """One dict per image of size (height, width), with torchvision's names: `crop`
        (top, left, height, width) (for Resize + CenterCrop: in the resized image, whose
        size is `resize`), `flip`, `brightness`, `contrast`, `saturation`, `hue` (None
        when off), `order` (torchvision's fn_idx). (seed, epoch, index) fixes each draw."""
        return self.draw_batch(sizes, seed, epoch=epoch, indices=indices).dicts()

    def draw_batch(self, sizes: Sequence[tuple[int, int]], seed: int, *, epoch: int = 0,
                   indices: Sequence[int] | np.ndarray | None = None) -> Draws:
        """make_params' draws as a `Draws` (a sequence of its dicts, made when read; the
        kernel's arrays made without them): for the common plans in one native call for
        the batch, else by the Python path (see transforms.draws)."""
        if self.native_spec is not None and len(sizes):
            idx = np.arange(len(sizes), dtype=np.int64) if indices is None else np.asarray(indices)
            if idx.dtype == np.int64 and idx.shape == (len(sizes),):  # (Python ints beyond int64: the Python path)
                size_array = np.asarray(sizes, np.int64).reshape(-1, 2)
                cols = _native.draw_batch(self.native_spec, size_array, idx, _epoch_key(seed, epoch))
                if cols is not None:  # (None: a sample it cannot draw; the Python path names why)
                    return Draws(self, sizes, columns=cols, size_array=size_array)
        return Draws(self, sizes, dicts=self._python_params(sizes, seed, epoch=epoch, indices=indices))

    def _python_params(self, sizes: Sequence[tuple[int, int]], seed: int, *, epoch: int = 0,
                       indices: Sequence[int] | np.ndarray | None = None) -> list[dict]:
        """make_params drawn in Python, a sample at a time: every plan (the reference of
        the native draws)."""
        if indices is None:
            indices = range(len(sizes))
        elif isinstance(indices, np.ndarray):
            indices = indices.tolist()
        out = []
        key = _epoch_key(seed, epoch)
        for (h, w), idx in zip(sizes, indices):
            if h <= 0 or w <= 0:
                raise ValueError(f"image size must be positive, got {(h, w)}")
            rng = _SampleRandom(key, idx)  # sample_rng(seed, epoch, idx)
            p: dict = {"flip": False, "brightness": None, "contrast": None, "saturation": None, "hue": None,
                       "order": [0, 1, 2, 3]}
            size = (h, w)
            for t in self.plan.geometry:
                d = t.draw(rng, size)
                if "resize" in d:
                    size = d["resize"]
                p.update(d)
            if self.plan.flip is not None:
                p.update(self.plan.flip.draw(rng, size))
            if self.plan.vflip is not None:
                p.update(self.plan.vflip.draw(rng, size))
            osize = self.plan.out_size or (h, w)  # the image the program's steps see
            for step in self.plan.program:  # in the Compose's order
                p.update(step.draw(rng, osize))
            if self.plan.erase is not None:  # drawn last: the other steps' draws are unchanged
                p.update(self.plan.erase.draw(rng, self.plan.out_size or (h, w)))
            out.append(p)
        return out

    def encode(self, params: Sequence[dict], sizes: Sequence[tuple[int, int]]) -> tuple[np.ndarray, ...]:
        """Kernel arrays for `params`: geom int64 [N, GEOM] (the box, resize and window
        columns and FLIP; OFFSET, H, W and strides are the caller's), args float32
        [N, K, ARGS] and order int32 [N, K] (each sample's program: the ops its steps
        drew, in order, K the longest program of the batch)."""
        n = len(params)
        oh, ow = self.output_size(sizes)
        rrc = self.rrc
        program = self.plan.program
        G, H, W, VH, VW, OY, OX = fused.GEOM, fused.H, fused.W, fused.VH, fused.VW, fused.OY, fused.OX
        box, FLIP, VFLIP, CUBIC = slice(fused.TOP, fused.BW + 1), fused.FLIP, fused.VFLIP, fused.CUBIC
        cubic = self.plan.cubic
        FILL, fill = slice(fused.FILLR, fused.FILLB + 1), self.plan.pad_fill
        rows: list[list[int]] = []  # (built as lists: a numpy item assignment costs more than the list's)
        progs: list[list] = []
        for p, (h, w) in zip(params, sizes):
            g = [0] * G
            g[H], g[W] = h, w
            if rrc:
                t, l, bh, bw = p["crop"]
                if t < 0 or l < 0 or bh <= 0 or bw <= 0 or t + bh > h or l + bw > w:
                    raise ValueError(f"crop {p['crop']} is outside the {h}x{w} image")
                g[box] = (t, l, bh, bw)
                g[VH], g[VW] = oh, ow
            else:
                g[box] = (0, 0, h, w)
                g[VH], g[VW] = p.get("resize", (h, w))
                if "crop" in p:
                    g[OY], g[OX] = p["crop"][0], p["crop"][1]
            g[FLIP] = 1 if p.get("flip", False) else 0
            g[VFLIP] = 1 if p.get("vflip", False) else 0
            g[CUBIC] = 1 if p.get("cubic", cubic) else 0
            g[FILL] = fill
            rows.append(g)
            if program:
                prog: list = []
                for step in program:
                    step.emit(p, (oh, ow), prog)
                progs.append(prog)
        geom = np.array(rows, np.int64).reshape(n, G)
        width = max([1, *map(len, progs)])
        order = np.full((n, width), -1, np.int32)
        args = np.zeros((n, width, ARGS), np.float32)
        for k, prog in enumerate(progs):
            for j, (op, a) in enumerate(prog):
                if len(a) > OPS_ARGS[op]:  # (a step whose emit and the op table disagree: a bug, named)
                    raise TransformError(f"{OPS[op].name} reads {OPS_ARGS[op]} argument(s), a step emitted {len(a)}")
                order[k, j] = op
                args[k, j, :len(a)] = a
        return geom, args, order

    def decode_boxes(self, params: Sequence[dict], sizes: Sequence[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
        """The window (top, left, height, width) of each image the kernel reads, for a
        decoder to decode no more than that: RandomResizedCrop's crop; the whole image for
        Resize/CenterCrop (every source pixel can reach the output through the filter)."""
        if isinstance(params, Draws) and params.columns is not None:
            return [tuple(b) for b in params.boxes().tolist()]
        if self.rrc:
            return [tuple(p["crop"]) for p in params]  # type: ignore[misc]
        return [(0, 0, h, w) for h, w in sizes]

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
        if isinstance(params, Draws):
            geom, args, order = params.encode(idx)
        else:
            geom, args, order = self.encode([params[k] for k in idx], [sizes[k] for k in idx])
        geom[:, fused.OFFSET] = decoded.offsets[idx]
        geom[:, fused.H:fused.W + 1] = decoded.shapes[idx]
        geom[:, fused.SY:fused.SC + 1] = decoded.strides[idx]
        geom[:, fused.TOP:fused.BW + 1] = decoded.boxes[idx]
        self.run(decoded.pixels, geom, args, order, view, stream=stream, num_threads=num_threads,
                 workspace=workspace)
        if self.plan.erase is not None:  # after the kernel, on its output (and its stream)
            self.plan.erase.erase(view, [params[k] for k in idx])

    def _norm_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        nz = self.plan.normalize
        mean = np.asarray(nz.mean if nz else (0.0, 0.0, 0.0), np.float32)
        std = np.asarray(nz.std if nz else (1.0, 1.0, 1.0), np.float32)
        return mean, std

    def new_output(self, n: int, device: torch.device | str = "cpu", *, pin_memory: bool = False,
                   size: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(output tensor in `layout`, its [N, 3, h, w] view that the kernel writes);
        pinned host memory with `pin_memory` on the CPU (where CUDA is present). `size`:
        the images' size, for a Compose without geometry."""
        if self.plan.out_size is None and size is None:
            raise ValueError("a Compose without a geometry step needs the images' size for its output")
        oh, ow = self.plan.out_size or size  # type: ignore[misc]
        pin = pin_memory and torch.device(device).type == "cpu" and torch.cuda.is_available()
        if self.layout == "NHWC":
            out = torch.empty((n, oh, ow, 3), dtype=self.plan.dtype, device=device, pin_memory=pin)
            return out, out.permute(0, 3, 1, 2)
        out = torch.empty((n, 3, oh, ow), dtype=self.plan.dtype, device=device, pin_memory=pin)
        return out, out

    def run(self, src: torch.Tensor, geom: np.ndarray, args: np.ndarray, order: np.ndarray,
            view: torch.Tensor, *, stream: Any = None, num_threads: int | None = None,
            workspace: Workspace | None = None) -> None:
        """Runs the fused kernel on a packed uint8 buffer `src` (1-D, CPU or CUDA) with
        complete geom rows, writing the [N, 3, h, w] view of the output (on the CPU with
        `num_threads` threads, default all cores; on CUDA on `stream`). `workspace`
        (kernels.workspace.Workspace): the buffers the kernel works in, kept by the caller
        between launches (a Pipeline holds one per view); without one they are made for
        this call."""
        mean, std = self._norm_arrays()
        normalize = self.plan.normalize is not None
        if src.is_cuda:
            from ..kernels import cuda_launch

            if view.shape[0] > MAX_CUDA_BATCH:
                raise KernelLaunchError(f"a batch of {view.shape[0]} images is over the {MAX_CUDA_BATCH} one CUDA "
                                        "grid holds (its z dimension): use a smaller batch_size")
            try:
                cuda_launch.run(src, geom, args, order, mean, std, view, normalize=normalize,
                                antialias=self.plan.antialias, stream=stream, workspace=workspace)
            except Exception as e:
                failed = launch_failure(e, tuple(view.shape), str(src.device))
                if failed is None:
                    raise
                raise failed from e
            return
        out_np = view.numpy() if view.dtype != torch.float16 else None
        if out_np is None:  # numba CPU has no float16 stores: compute float32, cast
            tmp = torch.from_numpy(workspace.array("float16-staging", tuple(view.shape)) if workspace is not None
                                   else np.empty(tuple(view.shape), np.float32))
            fused.fused_cpu(src.numpy(), geom, args, order, mean, std, tmp.numpy(), normalize=normalize,
                            antialias=self.plan.antialias, num_threads=num_threads, workspace=workspace)
            view.copy_(tmp)
            return
        fused.fused_cpu(src.numpy(), geom, args, order, mean, std, out_np, normalize=normalize,
                        antialias=self.plan.antialias, num_threads=num_threads, workspace=workspace)

    def __call__(self, images: torch.Tensor | Sequence[torch.Tensor], params: Sequence[dict] | None = None,
                 *, seed: int | None = None) -> torch.Tensor:
        single = isinstance(images, torch.Tensor) and images.ndim == 3
        if isinstance(images, torch.Tensor):
            batch = [images] if images.ndim == 3 else list(images.unbind(0))
            if images.ndim not in (3, 4):
                raise ValueError(f"expected an image [C, H, W] or a batch [N, C, H, W], got shape {tuple(images.shape)}")
        else:
            batch = list(images)
        for k, im in enumerate(batch):
            if not isinstance(im, torch.Tensor) or im.dtype != torch.uint8 or im.ndim != 3 or im.shape[0] not in (1, 3):
                raise TypeError(f"image {k}: expected a uint8 tensor [3, H, W] or [1, H, W], got "
                                f"{getattr(im, 'dtype', type(im))} {tuple(getattr(im, 'shape', ()))}")
        devices = {im.device for im in batch}
        if len(devices) > 1:
            raise ValueError(f"images are on several devices: {devices}")
        device = batch[0].device if batch else torch.device("cpu")
        sizes = [(int(im.shape[1]), int(im.shape[2])) for im in batch]
        if params is None:
            params = self.make_params(sizes, self._rng.getrandbits(63) if seed is None else seed)
        elif len(params) != len(batch):
            raise ValueError(f"{len(params)} params for {len(batch)} images")
        flat = [im.contiguous().reshape(-1) for im in batch]
        n = len(batch)
        offsets = np.zeros(n, np.int64)
        strides = np.zeros((n, 3), np.int64)
        offset = 0
        for k, (im, f) in enumerate(zip(batch, flat)):
            c, h, w = im.shape
            offsets[k] = offset
            strides[k] = (w, 1, h * w if c == 3 else 0)  # CHW; one grey channel read as RGB
            offset += f.numel()
        if len(flat) == 1:
            src = flat[0]
        elif flat:
            src = torch.cat(flat)
        else:
            src = torch.empty(0, dtype=torch.uint8, device=device)
        shapes = np.asarray(sizes, np.int64).reshape(n, 2)
        # whole images: the box of each is the window the transform needs, inside it
        boxes = np.asarray(self.decode_boxes(params, sizes), np.int64).reshape(n, 4)
        decoded = DecodedBatch(src, offsets, shapes, strides, boxes, [None] * n)
        out, view = self.new_output(n, device, size=self.output_size(sizes))
        self.apply(decoded, params, sizes, view)
        return out[0] if single else out

    @classmethod
    def from_torchvision(cls, tv: Any, *, layout: Layout = "NCHW") -> "Compose":
        """The fused equivalent of a torchvision (v1 or v2) Compose, or a clear refusal.
        ToImage/PILToTensor/ToTensor-style input conversions are dropped (the loader
        feeds uint8 tensors); ToTensor becomes ToDtype(float32, scale=True)."""
        return cls(convert(tv), layout=layout)
