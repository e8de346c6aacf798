"""nvImageCodec: NVIDIA's batched decoder front end (nvJPEG, the A100/H100 hardware JPEG
decoder, nvJPEG2000, nvTIFF, and CPU codecs), the decoder DALI itself uses.

Each batch's crop windows are decoded as regions of interest in one call: JPEG, PNG,
WebP, TIFF, BMP, JPEG 2000 ... come out RGB, HWC, one Image per window, on the GPU
(device "cuda") or the host (device "cpu", which tests use). The Images are not copied
into a packed buffer: the batch's pixels are a view spanning them (gpudecode.decode._span)
and the DecodedBatch keeps them alive. Tensor samples (.npy) are windows copied from
their bytes (and uploaded, on a GPU, all of a batch's in one copy from pinned memory).
What nvImageCodec cannot decode is tried by the host decoders (Pillow, pyspng), and if
they fail too the image's error says why.

What decodes is found out, not assumed: on a GPU the decoder tries each of nvImageCodec's
GPU backends alone on a small JPEG when it is made (`backend` says which work); when
none does (its nvJPEG extension dlopens libnvjpeg.so.13, and without it every image would
go to the CPU codecs while still coming back in device buffers) it refuses to be made.

Regions of interest are not used on a GPU with nvImageCodec 0.9 (whole images are
decoded and the kernel reads the crop inside them): its GPU ROI decoding fails on
ordinary in-bounds regions, with SIGSEGV on H100 and B200 (NVIDIA/nvImageCodec#55, open
as of 2026-11; 0.8 was good). GPUDECODE_NVIMGCODEC_ROI=1 or =0 overrides the choice.

Output buffers are reused (a ring, see the class); before a reused buffer is decoded into,
its first bytes are set to a marker, and an image that comes back with the marker intact
was not written: its error says so (DecodedBatch.settle), never its stale pixels.

hw_load: the share of each batch given to the hardware JPEG decoder where the GPU has
one (A100, H100, ...; default 0.65 as DALI's default suggests, unmeasured here); the rest
goes to the CUDA nvJPEG decoder. `backends=("hw",)` or `("cuda",)` makes a decoder of one
GPU backend alone: the split decoder (decode/split.py) makes one of each that works here,
each an engine whose share it measures, in place of nvImageCodec's fixed hint.
"""
from __future__ import annotations

import io
import os
from typing import Any, Sequence

import numpy as np
import torch

from ..errors import BackendUnavailableError
from ._base import DecodedBatch, Request
from ._span import CANARY_BYTES, poison, span, unwritten, upload
from .cpu import host_rgb

# nvImageCodec releases whose GPU region-of-interest decoding fails or crashes (see the module doc)
ROI_BROKEN = ("0.9.",)


def _module():
    try:
        from nvidia import nvimgcodec
    except ImportError as e:
        raise BackendUnavailableError(f"decoder 'nvimgcodec' needs NVIDIA nvImageCodec ({e}): "
                                      "pip install 'gpudecode[gpu]'") from e
    return nvimgcodec


def roi_usable(version: str, device_type: str, index: int = 0) -> bool:
    """Whether windows are decoded as regions of interest with this nvImageCodec `version`
    on a `device_type` ("cpu" or "cuda") device. GPUDECODE_NVIMGCODEC_ROI=1 or =0 forces
    the answer; =probe finds it out on GPU `index` in a child process (roi_probe)."""
    env = os.environ.get("GPUDECODE_NVIMGCODEC_ROI")
    if env in ("0", "1"):
        return env == "1"
    if device_type == "cpu":
        return True
    if env == "probe":
        return roi_probe(index)[0]
    return not version.startswith(ROI_BROKEN)


# Decodes regions of a JPEG on a GPU with nvImageCodec, as the decoder would (argv: the GPU
# index): prints OK when every region came back at its size; a crash kills only this child.
ROI_PROBE = """
import io, sys
import numpy as np
from PIL import Image
from nvidia import nvimgcodec as n
y, x = np.mgrid[0:375, 0:500]
b = io.BytesIO()
Image.fromarray(np.stack([x % 256, y % 256, (x + y) % 256], -1).astype(np.uint8)).save(b, format="JPEG", quality=90)
index = int(sys.argv[1])
dec = n.Decoder(device_id=index, backends=[n.Backend(n.BackendKind.HW_GPU_ONLY), n.Backend(n.BackendKind.GPU_ONLY),
                                           n.Backend(n.BackendKind.HYBRID_CPU_GPU)])
params = n.DecodeParams(apply_exif_orientation=False, color_spec=n.ColorSpec.SRGB, sample_format=n.SampleFormat.I_RGB)
regions = [(0, 0, 224, 224), (13, 29, 300, 411), (100, 250, 375, 500), (1, 1, 2, 2)]
streams = [n.CodeStream(b.getvalue()).get_sub_code_stream(region=n.Region(*r)) for r in regions]
out = dec.decode(streams, params=params)
for img, (t, l, bottom, right) in zip(out, regions):
    if img is None or tuple(img.shape[:2]) != (bottom - t, right - l):
        print("WRONG", None if img is None else tuple(img.shape[:2]), (bottom - t, right - l))
        sys.exit(3)
print("OK")
"""


def roi_probe(index: int = 0, *, timeout: float = 180.0, command: Sequence[str] | None = None) -> tuple[bool, str]:
    """Whether nvImageCodec decodes regions of interest on GPU `index`: tried in a child
    process, since a release whose ROI decoding is broken crashes with SIGSEGV
    (nvImageCodec#55), which would end this process; (works, what the child did).
    `command`: the child's command line (tests give their own)."""
    import signal
    import subprocess
    import sys

    cmd = list(command) if command is not None else [sys.executable, "-c", ROI_PROBE, str(index)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"the ROI probe did not finish in {timeout:g} s"
    except OSError as e:
        return False, f"the ROI probe could not run: {e}"
    if p.returncode < 0:
        try:
            name = signal.Signals(-p.returncode).name
        except ValueError:
            name = f"signal {-p.returncode}"
        return False, f"the ROI probe was killed by {name} (a crash in nvImageCodec's region decoding)"
    if p.returncode or "OK" not in p.stdout:
        tail = (p.stdout + p.stderr).strip().splitlines()[-1:] or ["no output"]
        return False, f"the ROI probe exited with {p.returncode}: {tail[0][:300]}"
    return True, "regions decoded at their sizes"


def _probe_jpeg() -> bytes:
    """A small baseline 4:2:0 JPEG (what every JPEG backend decodes)."""
    from PIL import Image

    y, x = np.mgrid[0:256, 0:256]
    img = np.stack([x, y, (x + y) // 2], axis=-1).astype(np.uint8)
    b = io.BytesIO()
    Image.fromarray(img).save(b, format="JPEG", quality=90)
    return b.getvalue()


class NvImageCodecDecoder:
    """Decodes into a ring of `buffers` sets of Images, reused turn by turn (nvImageCodec
    resizes an Image's buffer in place): no allocation per image once the ring is warm. A
    batch's Images are valid until the decoder's turn comes round to them again (the
    Loader keeps that many batches in flight, and waits for a batch's kernel before
    its turn is reused).

    Raises:
        BackendUnavailableError: on a GPU, none of nvImageCodec's GPU backends decodes
            (every image would silently go to its CPU codecs).
    """

    name = "nvimgcodec"

    def __init__(self, *, device: str = "cuda", num_threads: int = 0, max_pixels: int = 0,
                 hw_load: float = 0.65, buffers: int = 3, backends: Sequence[str] = ("hw", "cuda")) -> None:
        if not 0.0 <= hw_load <= 1.0:
            raise ValueError(f"hw_load must be in [0, 1], not {hw_load}")
        backends = tuple(backends)
        if not backends or any(b not in ("hw", "cuda") for b in backends):
            raise ValueError(f"backends must name 'hw' and/or 'cuda', not {backends!r}")
        if backends == ("hw",):
            hw_load = 1.0
        if buffers < 1:
            raise ValueError("buffers must be >= 1")
        self.buffers = buffers
        self._ring: list[list[Any]] = [[] for _ in range(buffers)]
        self._turn = 0
        n = _module()
        self._n = n
        self.version = str(getattr(n, "__version__", "?"))
        self.device = device
        self.max_pixels = max_pixels
        self.hw_load = hw_load
        self._dev = torch.device(device)
        self.roi = roi_usable(self.version, self._dev.type, self._dev.index or 0)
        self._params = n.DecodeParams(apply_exif_orientation=False, color_spec=n.ColorSpec.SRGB,
                                      sample_format=n.SampleFormat.I_RGB)
        # Pillow-exact JPEG: fancy upsampling (libjpeg's default, and nvImageCodec's CPU codec's)
        self._options = ":fancy_upsampling=1"
        if self._dev.type == "cpu":
            self._decoder = n.Decoder(device_id=n.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=num_threads,
                                      backends=[n.Backend(n.BackendKind.CPU_ONLY)], options=self._options)
            self.working = {"cpu": True}
            self.backend = f"nvImageCodec {self.version}, its CPU codecs (device cpu)"
            return
        index = self._dev.index if self._dev.index is not None else torch.cuda.current_device()
        self._dev = torch.device("cuda", index)
        self.working, self.why = _working(index, lambda: self._probe_backends(index))
        if not any(self.working[b] for b in backends):
            if any(self.working.values()):  # the other backend works: this one alone does not
                raise BackendUnavailableError(
                    f"decoder 'nvimgcodec' on cuda:{index}: its {' and '.join(backends)} backend does not decode a "
                    f"JPEG here ({'; '.join(f'{b}: {self.why.get(b)}' for b in backends)})")
            raise BackendUnavailableError(
                f"decoder 'nvimgcodec' on cuda:{index}: none of nvImageCodec {self.version}'s GPU backends decodes "
                "a JPEG (its nvJPEG extension loads libnvjpeg.so.13: pip install nvidia-nvjpeg-cu13), so every image "
                "would be decoded by its CPU codecs; use decoder='cpu' (the fast CPU path) or install libnvjpeg; "
                + "; ".join(f"{b}: {w}" for b, w in self.why.items()))
        chosen = [n.Backend(n.BackendKind.CPU_ONLY)]
        if "cuda" in backends:
            chosen[:0] = [n.Backend(n.BackendKind.GPU_ONLY, load_hint=1.0), n.Backend(n.BackendKind.HYBRID_CPU_GPU)]
        if "hw" in backends and hw_load > 0:
            chosen.insert(0, n.Backend(n.BackendKind.HW_GPU_ONLY, load_hint=hw_load))
        self._decoder = n.Decoder(device_id=index, max_num_cpu_threads=num_threads, backends=chosen,
                                  options=self._options)
        parts = [name for name, ok in (("hardware JPEG decoder", "hw" in backends and self.working["hw"] and hw_load > 0),
                                       ("nvJPEG on CUDA", "cuda" in backends and self.working["cuda"])) if ok]
        self.backend = (f"nvImageCodec {self.version} on cuda:{index}: {' + '.join(parts)} (CPU codecs for the "
                        f"formats those lack); regions of interest {'on' if self.roi else 'off'}")
        if not self.roi:
            self.backend += " (whole images decoded: nvImageCodec 0.9's GPU ROI decoding crashes, nvImageCodec#55)"

    @property
    def decodes_windows(self) -> bool:
        """Whether only each request's box is decoded (regions of interest), not the whole image."""
        return self.roi

    def _probe_backends(self, index: int) -> tuple[dict[str, bool], dict[str, str]]:
        """Which GPU backends decode a small JPEG here, each tried alone: ({"hw": ..., "cuda":
        ...}, why each one that does not, does not). nvJPEG's CUDA decoder is registered
        as HYBRID_CPU_GPU (the entropy decoding on the host, the rest on the GPU;
        nvImageCodec#26): a decoder of GPU_ONLY alone has no JPEG decoder and is not made
        ("Could not create decoder. Code: 7", the H200 run's preflight), so "cuda" is tried
        as the two together, as the CUDA engine decodes."""
        n = self._n
        data = _probe_jpeg()
        out = {}
        why: dict[str, str] = {}
        tries = (("hw", [n.BackendKind.HW_GPU_ONLY]),
                 ("cuda", [n.BackendKind.GPU_ONLY, n.BackendKind.HYBRID_CPU_GPU]))
        for name, kinds in tries:
            try:
                dec = n.Decoder(device_id=index, backends=[n.Backend(k) for k in kinds], options=self._options)
                img = dec.decode(n.CodeStream(data), params=self._params, cuda_stream=self._stream())
                out[name] = img is not None and img.buffer_kind == img.buffer_kind.STRIDED_DEVICE
                if not out[name]:
                    why[name] = "decoded nothing on the device" if img is None else "decoded into host memory"
            except Exception as e:  # a backend that cannot even be made here is not working
                out[name] = False
                why[name] = f"{type(e).__name__}: {e}"
        return out, why

    def _stream(self) -> int:
        return torch.cuda.current_stream(self._dev).cuda_stream if self._dev.type == "cuda" else 0

    def decode(self, requests: Sequence[Request]) -> DecodedBatch:
        n = self._n
        count = len(requests)
        errors: list[str | None] = [None] * count
        images: dict[int, Any] = {}  # k -> an nvImageCodec Image, or a tensor (HWC uint8)
        host: dict[int, np.ndarray] = {}  # k -> its window decoded on the host, uploaded below
        whole: set[int] = set()  # decoded whole (no region of interest): the kernel reads the box inside
        streams, ks = [], []
        for k, r in enumerate(requests):
            if self.max_pixels and r.height * r.width > self.max_pixels:
                errors[k] = f"image of {r.width}x{r.height} pixels is over the limit of {self.max_pixels} pixels"
            elif r.format == "npy":
                self._host_window(r, errors, k, host)
            else:
                try:
                    cs = n.CodeStream(r.data)
                    t, l, h, w = r.box
                    if (t, l, h, w) != (0, 0, r.height, r.width):
                        if self.roi:
                            cs = cs.get_sub_code_stream(region=n.Region(t, l, t + h, l + w))
                        else:
                            whole.add(k)
                    streams.append(cs)
                    ks.append(k)
                except Exception as e:  # an unreadable stream: the host decoders have a go
                    self._host_window(r, errors, k, host, why=f"nvImageCodec: {e}")
        pending = None
        if streams:
            self._turn = (self._turn + 1) % self.buffers
            reuse = self._ring[self._turn]
            marked: list[int] = []
            lengths: list[int] = []
            if len(reuse) >= len(streams):
                targets = reuse[:len(streams)]
                # the Loader waited for the kernel that last read them: marked before they are decoded into
                marked = [_layout(img)[0] for img in targets]
                lengths = [min(CANARY_BYTES, int(img.capacity)) for img in targets]
                poison(marked, lengths, self._dev)
                out = self._decoder.decode(streams, images=targets, params=self._params, cuda_stream=self._stream())
            else:  # the ring's turn is smaller than this batch: new Images, kept for next time
                out = self._decoder.decode(streams, params=self._params, cuda_stream=self._stream())
                self._ring[self._turn] = [img for img in out if img is not None]
            check: tuple[list[int], list[int], list[int]] = ([], [], [])
            for j, (k, img) in enumerate(zip(ks, out)):
                if img is None:  # not decodable here: the host decoders have a go, and say why not
                    whole.discard(k)
                    self._host_window(requests[k], errors, k, host, why="nvImageCodec could not decode it")
                    continue
                images[k] = img
                addr, shape, _ = _layout(img)
                if marked and addr == marked[j]:  # (a buffer nvImageCodec grew is new memory: nothing to check)
                    check[0].append(addr)
                    check[1].append(min(lengths[j], 3 * shape[1]))
                    check[2].append(k)
            if check[0]:
                pending = unwritten(check[0], check[1], check[2], self._dev)
        if host:  # tensor samples and host fallbacks: one upload for the batch
            order = sorted(host)
            images.update(zip(order, upload([host[k] for k in order], self._dev)))
        addresses, sizes, shapes, strides, kept = [], [], [], [], []
        for k in range(count):
            img = images.get(k)
            if img is None or errors[k] is not None:
                continue
            addr, shape, st = _layout(img)
            if k in whole and shape != (requests[k].height, requests[k].width):
                errors[k] = f"decoded size {shape} differs from the header's {(requests[k].height, requests[k].width)}"
                continue
            addresses.append(addr)
            sizes.append(st[0] * (shape[0] - 1) + st[1] * (shape[1] - 1) + st[2] * 2 + 1)  # to its last byte
            shapes.append(shape)
            strides.append(st)
            kept.append(k)
        pixels, offs = span(addresses, sizes, self._dev)
        offsets = np.zeros(count, np.int64)
        shape_arr = np.zeros((count, 2), np.int64)
        stride_arr = np.zeros((count, 3), np.int64)
        for k, o, sh, st in zip(kept, offs, shapes, strides):
            offsets[k], shape_arr[k], stride_arr[k] = o, sh, st
        boxes = np.zeros((count, 4), np.int64)
        boxes[:, 2:] = shape_arr  # a window decoded is read whole
        for k in whole:  # a whole image decoded: the kernel reads the requested box inside it
            boxes[k] = requests[k].box
        return DecodedBatch(pixels, offsets, shape_arr, stride_arr, boxes, errors, owner=images, pending=pending)

    def _host_window(self, r: Request, errors: list, k: int, out: dict[int, np.ndarray],
                     why: str | None = None) -> None:
        """The request's window decoded on the host into out[k] (tensor samples; what
        nvImageCodec cannot read); errors[k] set instead if it cannot be."""
        try:
            img = host_rgb(r, self.max_pixels)
            if img.shape[:2] != (r.height, r.width):
                raise ValueError(f"decoded size {img.shape[:2]} differs from the header's {(r.height, r.width)}")
            t, l, h, w = r.box
            out[k] = img[t:t + h, l:l + w]
        except Exception as e:  # this image's error, not the batch's
            errors[k] = (f"{why}; " if why else "") + f"{type(e).__name__}: {e}"

    def close(self) -> None:
        self._decoder = None


_WORKING: dict[int, tuple[dict[str, bool], dict[str, str]]] = {}


def _working(index: int, probe: Any) -> tuple[dict[str, bool], dict[str, str]]:
    """Which GPU backends decode on GPU `index`, and why the others do not (probe() once a
    process: each engine of a split decoder is a decoder of its own, and the answer does
    not change)."""
    if index not in _WORKING:
        _WORKING[index] = probe()
    working, why = _WORKING[index]
    return dict(working), dict(why)


def _layout(img: Any) -> tuple[int, tuple[int, int], tuple[int, int, int]]:
    """(address, (height, width), byte strides (row, column, channel)) of an HWC uint8
    image: an nvImageCodec Image or a torch tensor."""
    if isinstance(img, torch.Tensor):
        h, w = int(img.shape[0]), int(img.shape[1])
        sy, sx, sc = (int(s) for s in img.stride())
        return img.data_ptr(), (h, w), (sy, sx, sc)
    on_device = img.buffer_kind == img.buffer_kind.STRIDED_DEVICE
    iface = img.__cuda_array_interface__ if on_device else img.__array_interface__
    h, w = int(iface["shape"][0]), int(iface["shape"][1])
    st = iface.get("strides")
    sy, sx, sc = (int(s) for s in st) if st else (3 * w, 3, 1)
    return int(iface["data"][0]), (h, w), (sy, sx, sc)
