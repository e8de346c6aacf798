"""Decoders: compressed bytes in, RGB uint8 pixels out, behind one protocol (_base.py).

- "cpu": libjpeg-turbo decoding only each crop's window (gpudecode._native, native
  threads), PNG natively (libpng's pixels; libpng itself where its direct path cannot be sure;
  pyspng without libpng), Pillow for the rest; bit-exact with Pillow. Always there.
- "nvimgcodec": NVIDIA nvImageCodec, batched ROI decoding (nvJPEG, the hardware JPEG
  decoder) into Images the kernel reads in place (extra `gpudecode[gpu]`).
- "dali": NVIDIA DALI's decoders.image_slice ("mixed" on a GPU) (extra `gpudecode[dali]`).
- "torchcodec": PyTorch's torchcodec decode_jpeg, batched, whole images (extra `gpudecode[gpu]`).
- "split": every engine at once (decode/split.py): each batch's images shared among
  several of the above by their measured rates, decoded concurrently into one batch.

Every backend also runs on the CPU (nvImageCodec's and torchcodec's CPU codecs, DALI's
"cpu" pipeline), which is how this repository tests them without a GPU.

"auto" on a CUDA device is the split of every engine that works there: nvImageCodec's
hardware JPEG engine and its nvJPEG on CUDA, each an engine of its own (one whose backend
cannot be made is passed over with a warning saying why; without nvImageCodec, the first
of dali, torchcodec), and the CPU decoder on the Loader's threads, tuned: each subset of
them is measured for a few batches and the fastest decodes (engines slow each other down:
which set is fastest depends on the GPU and the threads; bench/RESULTS.md). A machine where only one engine
works gets that engine alone. On the CPU "auto" is "cpu", the fastest
measured there (one core, 500x375 JPEGs: whole images 1,410 img/s against nvImageCodec's
1,300 and torchcodec's 1,310; RandomResizedCrop windows 1,690-1,810 against 1,690-1,700
and 1,190-1,330; bench/RESULTS.md). A tuple of engine names (ENGINES) makes a split of
those, {name: share} one with pinned shares. make_decoder is the one place a decoder is
chosen and made (the Loader, loader.dataset and precache all come here).
"""
from __future__ import annotations

import importlib
import importlib.util
import math
from typing import Any, Literal

from ..errors import BackendUnavailableError
from ._base import DecodedBatch, Decoder, Request, Requests, hwc_strides

DecoderName = Literal["auto", "split", "cpu", "nvimgcodec", "dali", "torchcodec"]
NAMES = ("cpu", "nvimgcodec", "dali", "torchcodec")
GPU_ORDER = ("nvimgcodec", "dali", "torchcodec")
_MODULES = {"nvimgcodec": ("nvidia.nvimgcodec", "gpu"), "dali": ("nvidia.dali", "dali"),
            "torchcodec": ("torchcodec.decoders", "gpu")}


def available(name: str) -> tuple[bool, str]:
    """(usable here, why not): the backend's package imports (any device; a CUDA device
    is checked by check_device)."""
    if name in ("cpu", "png"):  # (png: gpudecode's own; on a GPU nvCOMP is used where it imports)
        return True, ""
    if name not in _MODULES:
        return False, f"unknown decoder {name!r} (one of {', '.join(NAMES)}, or 'auto')"
    module, extra = _MODULES[name]
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # ImportError, or a library built for another torch/CUDA
        return False, f"{module} is not importable ({type(e).__name__}: {e}); pip install 'gpudecode[{extra}]'"
    if name == "torchcodec":  # an older torchcodec (one that matches an older torch) may lack the batch API
        from .torchcodec import missing_api

        why = missing_api(mod)
        if why:
            return False, why
    return True, ""


def check_device(device: Any) -> str:
    """"auto" -> "cuda" or "cpu"; a torch.device as its name ("cuda:1"); refuses other
    names, and a CUDA device that is not there.

    Raises:
        ValueError: not "auto", "cpu", "cuda[:N]" or a torch.device of those.
        BackendUnavailableError: a CUDA device was asked for and torch sees none.
    """
    import torch

    if isinstance(device, torch.device):  # PyTorch users pass devices as objects
        device = str(device)
    if not isinstance(device, str):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda[:N]' or a torch.device, not {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', not {device!r}")
    if device != "cpu" and not torch.cuda.is_available():
        raise BackendUnavailableError(f"device {device!r} asked for, but torch sees no CUDA device "
                                      "(torch.cuda.is_available() is False)")
    if device != "cpu" and importlib.util.find_spec("numba_cuda") is None:
        # numba's own CUDA target is deprecated and lacks CUDA 13's NVVM: the kernels need numba-cuda
        raise BackendUnavailableError(f"device {device!r} needs numba-cuda for its kernels: "
                                      "pip install 'gpudecode[gpu]'")
    return device


def choose(name: Any, device: str) -> str:
    """The decoder's name that `name` (a name, several names, or {name: share}) means on
    `device`, without making it: "auto" on a CUDA device is "split" (every engine at once)
    when a GPU decoder imports, else "cpu"; on the CPU, "cpu"."""
    if not isinstance(name, str):
        return "split"
    if name != "auto":
        return name
    if device.startswith("cuda"):
        return "split" if any(available(n)[0] for n in GPU_ORDER) else "cpu"
    return "cpu"


def check_spec(spec: Any, device: str) -> None:
    """Refuses, without making anything (no CUDA context), a decoder spec that cannot be
    made on `device`: an unknown name, a backend whose package is missing, a split whose
    names or shares are wrong. Decoder instances pass (they are the caller's)."""
    if not isinstance(spec, (str, list, tuple, dict)):
        return  # a decoder instance
    if isinstance(spec, str):
        if spec == "nvjpeg":
            raise ValueError(_NVJPEG)
        if spec not in ("auto", "split") and spec not in NAMES:
            raise ValueError(f"unknown decoder {spec!r} (one of {', '.join(NAMES)}, 'split' or 'auto')")
        name = choose(spec, device)
        if name not in ("split", "cpu"):
            ok, why = available(name)
            if not ok:
                raise BackendUnavailableError(f"decoder {spec!r} cannot be used here: {why}")
        return
    names = list(spec)
    if not names:
        raise ValueError("decoder: a split needs at least one engine's name")
    for n in names:
        if not isinstance(n, str) or n not in ENGINES:
            raise ValueError(f"decoder: a split's engines are named from {', '.join(ENGINES)}, not {n!r}")
        if n in GPU_ONLY_ENGINES and not device.startswith("cuda"):
            raise ValueError(f"decoder: engine {n!r} decodes on a GPU; device is {device!r}")
        ok, why = available(ENGINES[n])
        if not ok:
            raise BackendUnavailableError(f"decoder: engine {n!r} cannot be used here: {why}")
    if len(set(names)) != len(names):
        raise ValueError(f"decoder: a split names each engine once, not {names}")
    if isinstance(spec, dict):
        _check_shares(spec)


def _check_shares(shares: dict) -> None:
    for k, v in shares.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"decoder: the share of {k!r} must be a finite number >= 0, not {v!r}")
    if sum(shares.values()) <= 0:
        raise ValueError("decoder: shares must give some engine a share above 0")


_NVJPEG = ("decoder 'nvjpeg' (torchvision.io's, deprecated there) is gone: use 'torchcodec' (the same nvJPEG "
           "through PyTorch's torchcodec) or 'nvimgcodec'")

# The engines a split decoder is made of, by name: which decoder each is (decode/split.py)
ENGINES = {"cpu": "cpu", "nvimgcodec-hw": "nvimgcodec", "nvimgcodec-cuda": "nvimgcodec", "nvimgcodec": "nvimgcodec",
           "dali": "dali", "torchcodec": "torchcodec", "png": "png"}
# png: PNG in two halves on the split's device (decode/png.py: nvCOMP's inflate and CUDA
# kernels on a GPU, zlib and their CPU twin on the CPU); it takes PNG only
GPU_ONLY_ENGINES = ("nvimgcodec-hw", "nvimgcodec-cuda")  # (the others have CPU builds: how the split is tested here)


def make_decoder(name: Any, *, device: str, num_threads: int, max_pixels: int, fast: bool = False,
                 hw_load: float = 0.65, buffers: int = 3, out_size: tuple[int, int] | None = None,
                 zero_copy: bool | None = None) -> Decoder:
    """The decoder `name` means on `device`: the one place decoders are chosen and made.

    `name`: "cpu", "nvimgcodec", "dali", "torchcodec"; "split" or "auto" (on a CUDA device
    every engine that works here at once: the hardware JPEG engine and nvJPEG on CUDA, each
    an nvImageCodec decoder of its own, and the CPU decoder on its threads; a split of one
    is that engine itself; on the CPU, "auto" is the CPU decoder); a tuple of engine names
    (ENGINES) for a split of those; or {engine name: share} for a split with pinned shares
    (decode/split.py). `num_threads`: the CPU threads the decode stage may use (the CPU
    decoder alone takes one more: the stage's own thread runs each batch's Python between
    decodes, and the extra native thread keeps the cores busy meanwhile); `buffers`: how
    many results stay valid at once (Decoder.buffers); `out_size`: the least size each box is
    resized to (the plan's decode_frame), for the CPU decoder's DCT scaling in fast mode; `zero_copy`: the CPU decoder reads tensor
    samples in place (default: on the CPU; on a GPU they are packed for one upload).
    A GPU backend that cannot decode here (nvImageCodec without libnvjpeg) is passed over
    by "auto" with a warning saying why; `decoder.backend` says what decodes.

    Raises:
        ValueError: an unknown name, or a split's wrong names or shares.
        BackendUnavailableError: its package is missing (names the extra to install), or
            it cannot decode on `device` (says why).
    """
    check_spec(name, device)
    common: dict[str, Any] = dict(device=device, num_threads=num_threads, max_pixels=max_pixels, fast=fast, hw_load=hw_load,
                  buffers=buffers, out_size=out_size, zero_copy=device == "cpu" if zero_copy is None else zero_copy)
    if isinstance(name, (list, tuple, dict)):
        return _split([_engine(n, **common) for n in name], device, dict(name) if isinstance(name, dict) else None,
                      buffers)
    if name in ("auto", "split") and device.startswith("cuda"):
        return _every_engine(name == "auto", common)
    if name == "split":  # on the CPU: one engine, the CPU decoder
        return _make("cpu", **common)
    return _make(choose(name, device), **common)


def _every_engine(auto: bool, common: dict[str, Any]) -> Decoder:
    """Every engine that works on this CUDA device, as one split decoder (or the one engine
    there is): nvImageCodec's hardware and CUDA backends, each alone, else the first other
    GPU decoder that can be made; and the CPU decoder."""
    from .split import Engine

    engines: list[Engine] = []
    passed = []
    if available("nvimgcodec")[0]:
        for n in ("nvimgcodec-hw", "nvimgcodec-cuda"):
            try:
                engines.append(_engine(n, **common))
            except BackendUnavailableError as e:
                passed.append(str(e))
    if not engines:
        for candidate in GPU_ORDER[1:]:
            if not available(candidate)[0]:
                continue
            try:
                engines.append(_engine(candidate, **common))
                break
            except BackendUnavailableError as e:
                passed.append(str(e))
    if passed and auto:
        import warnings

        gpu = ", ".join(e.name for e in engines) or "none"
        warnings.warn(f"decoder='auto': GPU engines that decode here: {gpu}; passed over: "
                      + "; ".join(dict.fromkeys(passed)),
                      RuntimeWarning, stacklevel=3)
    engines.append(_engine("cpu", **common))
    # tune: which of them decode is measured, not assumed (engines slow each other down, so
    # a split can lose to its best engine alone)
    return _split(engines, common["device"], None, common["buffers"], tune=True)


def _split(engines: list, device: str, shares: dict | None, buffers: int, tune: bool = False) -> Decoder:
    from .split import SplitDecoder

    if len(engines) == 1 and shares is None:
        return engines[0].decoder
    if shares is not None:
        _check_shares(shares)
    return SplitDecoder(engines, device=device, shares=shares, buffers=buffers, tune=tune)


def _engine(name: str, **common: Any) -> Any:
    """Engine `name` (ENGINES) of a split decoder."""
    from .split import Engine

    kind = ENGINES[name]
    if kind == "png":
        from .png import PngDecoder

        return Engine(PngDecoder(device=common["device"], num_threads=common["num_threads"],
                                 max_pixels=common["max_pixels"]), name=name, formats=("png",))
    if kind == "cpu":
        cuda = common["device"].startswith("cuda")
        # on a GPU its pixels are uploaded in one copy: packed (no zero copy) into page-locked memory
        dec = _make("cpu", **{**common, "zero_copy": common["zero_copy"] and not cuda}, pinned=cuda, split=True)
        return Engine(dec, name=name)
    if kind == "nvimgcodec" and name != "nvimgcodec":
        backend = name.split("-")[1]
        dec = _make("nvimgcodec", **common, backends=(backend,))
        return Engine(dec, name=name, formats=("jpeg",))
    return Engine(_make(kind, **common), name=name)


def _make(name: str, *, device: str, num_threads: int, max_pixels: int, fast: bool, hw_load: float,
          buffers: int, out_size: tuple[int, int] | None = None, zero_copy: bool = True, pinned: bool = False,
          split: bool = False, backends: tuple[str, ...] = ("hw", "cuda")) -> Decoder:
    if name not in NAMES:
        raise ValueError(f"unknown decoder {name!r} (one of {', '.join(NAMES)}, 'split' or 'auto')")
    ok, why = available(name)
    if not ok:
        raise BackendUnavailableError(f"decoder {name!r} cannot be used here: {why}")
    if name == "cpu":
        from .cpu import CpuDecoder

        # alone, one native thread more than num_threads (see make_decoder); in a split the
        # stage's thread only waits for the engines
        return CpuDecoder(num_threads=num_threads + (0 if split else 1), max_pixels=max_pixels, fast=fast,
                          out_size=out_size, zero_copy=zero_copy, pinned=pinned, buffers=buffers)
    if name == "nvimgcodec":
        from .nvimgcodec import NvImageCodecDecoder

        return NvImageCodecDecoder(device=device, num_threads=num_threads, max_pixels=max_pixels, hw_load=hw_load,
                                   buffers=buffers, backends=backends)
    if name == "dali":
        from .dali import DaliDecoder

        return DaliDecoder(device=device, num_threads=num_threads, max_pixels=max_pixels, hw_load=hw_load,
                           buffers=buffers)
    from .torchcodec import TorchcodecDecoder

    return TorchcodecDecoder(device=device, max_pixels=max_pixels)


__all__ = ["Decoder", "DecodedBatch", "Request", "Requests", "hwc_strides", "make_decoder", "available", "check_device",
           "choose", "check_spec", "DecoderName", "NAMES", "ENGINES"]
