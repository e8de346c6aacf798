"""The data set kept where it is cheapest to read: decoded images resident in RAM or on the
GPU, so that epochs after the first do no per-sample host work.

The talks this project comes from give a rule for where a training set should live:
under 8 GB on the GPU, under 128 GB in RAM, and only then on local SSD or the network.
`Loader(..., keep="ram" | "gpu" | "auto")` follows it:

- The store is filled once, before the first batch: every sample of every source read
  (the whole set on every rank: a rank's share changes from epoch to epoch), its image
  decoded whole and exactly (no DCT scaling: the pixels the CPU decoder gives, Pillow's),
  kept as uint8 HWC in one buffer, with its label; each image is written once, into its
  place in that buffer (a mapping reserved at the budget's size, committed as written),
  so the fill's peak memory is the store, not twice it. A sample that fails is the error
  policy's, as when streaming; under "skip" it is left out of every epoch's order.
- Each epoch's order is the reader's own (`ShardReader.epoch_keys`: the same shuffle,
  rank split, `even`, elastic plan and resume position as streaming, without reading),
  as rows of the store; a batch is a gather of those rows: the fused kernel reads each
  crop in place from the store. No read, no probe, no decode, no host copy of pixels (a
  "ram" store feeding a GPU packs each batch's crop windows straight into the upload's
  page-locked staging buffer and uploads them in one copy; the store is not pinned).
- The same seed gives the same batches as streaming the same samples (bit for bit on the
  CPU: the kernel reads the same pixels, drawn by the same positions), except that a
  sample left out under on_error="skip" is left out of the order itself, so the batches
  after it shift by one where streaming would have given a batch one image short.
- The budget: "ram" at most half of the memory available now (/proc/meminfo), "gpu" at
  most half of the device's free memory (torch.cuda.mem_get_info), each also under
  `keep_budget` bytes when given; "auto" takes "gpu" for a set under 8 GB that fits there
  (on a CUDA device), else "ram" under 128 GB, else streams. A set that does not fit is
  never an out-of-memory in the middle of an epoch: the fill stops as soon as the set is
  seen (or estimated from the samples read so far) to exceed the budget, and the Loader
  streams instead, with a one-line warning that says why (`describe()["keep"]`).
"""
from __future__ import annotations

import functools
import itertools
import mmap
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Sequence

import numpy as np
import torch

from .batches import Prepared
from .decode import DecodedBatch, hwc_strides, make_decoder
from .errors import known
from .fields import read_fields
from .stats import BatchTiming
from .transforms.boxes import Stored, scale_boxes
from .transforms.masks import resize_mask
from .transforms.stored import downsizing

if TYPE_CHECKING:
    from .io.reader import Sample
    from .pipeline import Pipeline

Keep = Literal["ram", "gpu", "auto"]
KEEPS = ("ram", "gpu", "auto")
GPU_RULE = 8 << 30     # the talks' rule: a set under 8 GB lives on the GPU
RAM_RULE = 128 << 30   # and one under 128 GB in RAM
_FILL_CHUNK = 256      # samples probed and decoded at a time while filling
UNREAD = -1            # a store's code for a sample the reader could not read (epoch_rows)
FAILED = -2            # FAILED - j: the j-th sample that failed while filling (Resident.failed_keys)
_ESTIMATE_AFTER = 1024  # samples read before the set's size is estimated (and refused early)


@dataclass(frozen=True, slots=True)
class StoredSample:
    """What a batch needs of a stored sample besides its pixels: its key and shard (the
    Batch's keys; errors name them)."""

    key: str
    shard: str
    index: int


@dataclass
class Resident:
    """The filled store: image k's pixels (y, x, c) at `pixels[offsets[k] + (y*w + x)*3 + c]`
    (packed HWC), its size `shapes[k]`, label `labels[k]`; `rows` maps a sample's (shard,
    index) to its k; `failed` holds the samples whose image or label failed while filling
    (with what the error policy recorded), `unread` those the reader could not read."""

    tier: str
    pixels: torch.Tensor
    offsets: np.ndarray
    shapes: np.ndarray
    labels: np.ndarray | None
    samples: list[StoredSample]
    rows: dict[tuple[str, int], int]
    failed: dict[tuple[str, int], list] = field(default_factory=dict)  # sample -> its Skipped (probe, decode)
    size: int | None = None  # the shorter side's most pixels (keep_size), or None: as decoded
    unread: set[tuple[str, int]] = field(default_factory=set)  # samples the reader could not read
    read_skips: list = field(default_factory=list)  # the reader's Skipped for those
    fill_seconds: float = 0.0
    fields: list[np.ndarray] = field(default_factory=list)  # [field]: an object array of each row's value

    def __post_init__(self) -> None:
        self.strides = hwc_strides(self.shapes)
        self.heights = self.shapes[:, 0].copy()
        self.widths = self.shapes[:, 1].copy()
        # (object arrays: a batch's samples and keys gathered by its rows in C, not a loop)
        self.sample_array = np.empty(len(self.samples), object)
        self.sample_array[:] = self.samples
        self.key_array = np.array([s.key for s in self.samples], object)
        # each sample's code: its row, or FAILED - j for the j-th that failed while filling, or
        # UNREAD; per shard a code array by sample index (a file list's: list_codes, on first use)
        self.failed_keys = list(self.failed)
        self._failed_codes = {k: FAILED - j for j, k in enumerate(self.failed_keys)}
        self._list_codes: dict[str, np.ndarray] = {}
        most: dict[str, int] = {}
        for shard, index in itertools.chain(self.rows, self.failed, self.unread):
            most[shard] = max(most.get(shard, -1), index)
        self.source_codes = {shard: np.full(top + 1, UNREAD, np.int64) for shard, top in most.items()}
        for (shard, index), code in itertools.chain(self.rows.items(), self._failed_codes.items()):
            self.source_codes[shard][index] = code

    @property
    def nbytes(self) -> int:
        return int(self.pixels.numel())

    def __len__(self) -> int:
        return len(self.samples)

    def code(self, key: tuple[str, int]) -> int:
        """Sample `key`'s code (see epoch_rows)."""
        row = self.rows.get(key)
        return row if row is not None else self._failed_codes.get(key, UNREAD)

    def codes_of(self, keys: Sequence[tuple[str, int]]) -> np.ndarray:
        """The codes of samples `keys`, in order."""
        return np.fromiter(map(self.code, keys), np.int64, len(keys))

    def list_codes(self, name: str, paths: Sequence[str]) -> np.ndarray:
        """File list `name`'s codes by its index (its samples are (paths[i], i)), made once."""
        got = self._list_codes.get(name)
        if got is None:
            got = self._list_codes[name] = self.codes_of([(p, i) for i, p in enumerate(paths)])
        return got

    def batch(self, rows: np.ndarray, boxes: np.ndarray) -> DecodedBatch:
        """Rows `rows` as a decoded batch whose box k is `boxes[k]` (the window each image's
        crops need) inside the stored image: the kernel reads them in place."""
        n = len(rows)
        return DecodedBatch(self.pixels, self.offsets[rows], self.shapes[rows], self.strides[rows],
                            np.asarray(boxes, np.int64).reshape(n, 4).copy(), [None] * n, owner=self)

    def gathered(self, rows: np.ndarray, boxes: np.ndarray,
                 into: Callable[[int], torch.Tensor] | None = None) -> DecodedBatch:
        """Rows `rows`' windows `boxes` packed one after the other into a host buffer (a RAM
        store feeding a GPU: one upload of what the kernel reads, not of the images),
        copied natively with the GIL released (no Python a sample). `into(n)`: the uint8
        CPU tensor of n bytes to pack them in (the upload's staging buffer, so that nothing
        is copied again before the upload); default a new one."""
        rows = np.asarray(rows, np.int64)
        boxes = np.asarray(boxes, np.int64).reshape(len(rows), 4)
        heights, widths = self.heights[rows], self.widths[rows]
        t, l, h, w = boxes.T
        outside = (t < 0) | (l < 0) | (h < 0) | (w < 0) | (t + h > heights) | (l + w > widths)
        if outside.any():
            k = int(np.flatnonzero(outside)[0])
            raise ValueError(f"window {tuple(boxes[k].tolist())} is outside stored image {int(rows[k])} "
                             f"({int(heights[k])}x{int(widths[k])})")
        sizes = h * w * 3
        ends = np.cumsum(sizes)
        total = max(int(ends[-1]) if len(ends) else 0, 1)
        pixels = into(total) if into is not None else torch.empty(total, dtype=torch.uint8)
        if pixels.dtype != torch.uint8 or pixels.device.type != "cpu" or pixels.numel() != total:
            raise ValueError(f"into({total}) gave a {pixels.dtype} tensor of {pixels.numel()} on {pixels.device}: "
                             f"{total} uint8 bytes on the CPU were asked")
        _gather()(self.pixels.numpy(), self.offsets[rows], widths, boxes, pixels.numpy(), ends - sizes)
        shapes = boxes[:, 2:].copy()
        windows = np.zeros_like(boxes)
        windows[:, 2:] = shapes
        return DecodedBatch(pixels, ends - sizes, shapes, hwc_strides(shapes), windows, [None] * len(rows))

    def describe(self) -> dict:
        return {"tier": self.tier, "bytes": self.nbytes, "images": len(self), "size": self.size,
                "left_out": len(self.failed) + len(self.unread),
                "fill_s": round(self.fill_seconds, 3)}


@functools.cache
def _gather() -> Any:
    """gather(src, offsets, widths, boxes, out, starts): window k of packed HWC image k (at
    src[offsets[k]:], widths[k] wide) copied row by row to out[starts[k]:] (the caller
    checks the windows lie inside their images)."""
    import numba

    from .kernels._compile import cpu_jit

    U = numba.uint64  # (unsigned indices: no negative-index wrap to test, so the copy vectorizes)

    @cpu_jit()
    def gather(src, offsets, widths, boxes, out, starts):  # pragma: no cover (numba)
        for k in range(boxes.shape[0]):
            stride = widths[k] * 3
            n = boxes[k, 3] * 3
            rows = boxes[k, 2]
            p = offsets[k] + boxes[k, 0] * stride + boxes[k, 1] * 3
            o = starts[k]
            if n == stride:  # whole rows: one run
                n, rows = n * rows, 1
            for _ in range(rows):
                for i in range(n):  # (an index loop: LLVM makes it a vector copy; a slice a row cost more)
                    out[U(o + i)] = src[U(p + i)]
                o += n
                p += stride

    return gather


def available_ram() -> int:
    """Bytes of memory available now (MemAvailable), or 0 where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0


def budgets(keep: str, device: str, cap: int | None) -> dict[str, int]:
    """The bytes each tier `keep` may use here: {"gpu": ..., "ram": ...} (tiers it cannot
    use left out)."""
    out = {}
    if keep in ("gpu", "auto") and device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        out["gpu"] = free // 2 if keep == "gpu" else min(free // 2, GPU_RULE)
    if keep in ("ram", "auto"):
        out["ram"] = available_ram() // 2 if keep == "ram" else min(available_ram() // 2, RAM_RULE)
    if cap is not None:
        out = {k: min(v, cap) for k, v in out.items()}
    return out


def check_keep(keep: Any, budget: Any, device: str, size: Any = None) -> None:
    """Refuses a keep=, keep_budget= or keep_size= that cannot be used (said where given)."""
    if keep is None:
        for name, v in (("keep_budget", budget), ("keep_size", size)):
            if v is not None:
                raise ValueError(f"{name}= is about a resident store: give keep='ram', 'gpu' or 'auto' too")
        return
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ValueError(f"keep_size must be a positive int (the shorter side's most pixels), not {size!r}")
    if keep not in KEEPS:
        raise ValueError(f"keep must be None (stream every epoch), 'ram', 'gpu' or 'auto', not {keep!r}")
    if keep == "gpu" and not device.startswith("cuda"):
        raise ValueError(f"keep='gpu' keeps the set in GPU memory: device is {device!r} (use keep='ram')")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise ValueError(f"keep_budget must be a positive number of bytes, not {budget!r}")


class Keeper:
    """A Loader's keep= and keep_budget= (checked here), and its store: filled once, on
    first use, or the one-line reason the Loader streams instead."""

    def __init__(self, keep: Any, budget: Any, device: str, size: Any = None) -> None:
        check_keep(keep, budget, device, size)
        self.keep, self.budget, self.device, self.size = keep, budget, device, size
        self.resident: Resident | str | None = None  # the store once filled, or why the Loader streams

    def store(self, pipe: "Pipeline", reader: Any, stop: Any = None) -> Resident | None:
        """The store, filled from `reader` through `pipe`'s probe and decoder the first time
        (None when streaming: keep=None, or the set does not fit, said once, warned)."""
        if self.keep is None or isinstance(self.resident, str):
            return None
        if self.resident is None:
            try:
                self.resident = fill(pipe, reader.read_every(stop), every_key=reader.every_key(), keep=self.keep,
                                     device=self.device, cap=self.budget, stop=stop, size=self.size)
            except DoesNotFit as e:
                self.resident = f"streams: {e}"
                warnings.warn(f"keep={self.keep!r}: the Loader {self.resident}", RuntimeWarning, stacklevel=3)
                return None
        return self.resident

    def describe(self) -> dict:
        """Where the set lives between epochs: the store's tier, bytes, images and fill
        time; {"tier": None} when streaming (with "why" when keep= was given)."""
        if self.keep is None:
            return {"tier": None}
        if isinstance(self.resident, str):
            return {"tier": None, "why": self.resident}
        if self.resident is None:
            return {"tier": None, "why": f"keep={self.keep!r}: filled at the first epoch (not yet)"}
        return self.resident.describe()


class DoesNotFit(Exception):
    """The set exceeds the budget (the message says by how much): the Loader streams."""


class _Stopped(Exception):
    """The fill was stopped (its Loader's iterator closed): filled again next time."""


def fill(pipe: "Pipeline", samples: Any, *, every_key: Any, keep: str, device: str, cap: int | None,
         stop: Any = None, size: int | None = None) -> Resident | None:
    """Reads `samples` (every sample once: ShardReader.read_every), decodes each image
    whole and exactly with the pipeline's decoder spec, and keeps them in the tier
    `keep` chooses; `every_key`: (shard, index) of every sample there is (the set's size
    for the early estimate, and what the reader could not read is told from it); `size`:
    an image whose shorter side is longer is resized to it first, as `gpudecode precache
    --size` stores it (the same pixels: its resize step, Pipeline.finish_images' HostImages).

    Raises:
        DoesNotFit: the set (or its estimate) exceeds every usable tier's budget.
        DecodeError, LabelError, ...: a bad sample under on_error="raise".

    Returns None when `stop` was set before the store was full.
    """
    try:
        return _fill(pipe, samples, every_key=list(every_key), keep=keep, device=device, cap=cap, stop=stop,
                     size=size)
    except _Stopped:
        return None


def _fill(pipe: "Pipeline", samples: Any, *, every_key: list, keep: str, device: str, cap: int | None,
          stop: Any, size: int | None) -> Resident:
    total = len(every_key)
    t0 = time.perf_counter()
    limits = budgets(keep, device, cap)
    most = max(limits.values(), default=0)
    c = pipe.config
    spec = c.decoder if isinstance(c.decoder, (str, tuple, dict)) else None
    # exact whole images (no DCT scaling), on the device the Pipeline decodes on
    decoder = make_decoder(spec, device=c.device, num_threads=c.num_threads, max_pixels=c.max_pixels,
                           buffers=2) if spec is not None else c.decoder
    images = _Arena(limits)
    kept: list[StoredSample] = []
    labels: list[int] = []
    fields: list[list] = [[] for _ in c.fields]
    missing: dict[tuple[str, str | None], tuple[str, int]] = {}  # (shard, key) -> (shard, index) of what failed
    seen = used = 0
    policy = pipe.policy
    resize = _Resizer(size, c.num_threads) if size is not None else None
    before = len(policy.skipped)
    try:
        chunk: list[Sample] = []
        for s in samples:
            chunk.append(s)
            if len(chunk) == _FILL_CHUNK:
                used += _decode_chunk(pipe, decoder, chunk, images, kept, labels, fields, missing, resize)
                seen += len(chunk)
                chunk = []
                _check(used, seen, total, most, limits)
            if stop is not None and stop.is_set():
                raise _Stopped()
        if stop is not None and stop.is_set():  # (the reader ends early when stopped)
            raise _Stopped()
        if chunk:
            used += _decode_chunk(pipe, decoder, chunk, images, kept, labels, fields, missing, resize)
            seen += len(chunk)
        _check(used, seen, seen, most, limits)
    finally:
        if spec is not None:
            decoder.close()
    tier = _tier(keep, used, limits)
    shapes = np.array(images.shapes, np.int64).reshape(-1, 2)
    pixels = images.tensor(tier, device)
    sizes = shapes[:, 0] * shapes[:, 1] * 3
    offsets = np.cumsum(sizes) - sizes
    rows = {(s.shard, s.index): k for k, s in enumerate(kept)}
    # what the policy recorded while filling: each failed sample's own records, and the reader's
    failed: dict[tuple[str, int], list] = {k: [] for k in missing.values()}
    read_skips = []
    for sk in policy.skipped[before:]:
        k = missing.get((sk.shard, sk.key))
        if k is not None:
            failed[k].append(sk)
        else:
            read_skips.append(sk)
    unread = set(every_key) - rows.keys() - failed.keys()
    del policy.skipped[before:]  # (kept by the store: each epoch records what its order meets, epoch_chunks)
    return Resident(tier, pixels, offsets, shapes, np.array(labels, np.int64) if c.labels else None, kept,
                    rows, failed, size, unread, read_skips, time.perf_counter() - t0,
                    [_objects(col) for col in fields])


def _objects(values: list) -> np.ndarray:
    """`values` as a 1-d object array (a batch's gathered by its rows in C)."""
    out = np.empty(len(values), object)
    out[:] = values
    return out


def _tier(keep: str, used: int, limits: dict[str, int]) -> str:
    for tier in ("gpu", "ram"):
        if tier in limits and used <= limits[tier]:
            return tier
    raise DoesNotFit(_too_big(used, limits))


def _too_big(used: int, limits: dict[str, int]) -> str:
    where = ", ".join(f"{t} {v / 2**30:.2f} GiB" for t, v in limits.items()) or "no tier usable here"
    return f"the decoded set needs {used / 2**30:.2f} GiB, over the budget ({where})"


def _check(used: int, seen: int, total: int, most: int, limits: dict[str, int]) -> None:
    """Refuses as soon as what is decoded exceeds the largest budget, or (after enough
    samples) its estimate for the whole set does by more than a quarter."""
    if used > most:
        raise DoesNotFit(_too_big(used, limits))
    if seen >= _ESTIMATE_AFTER and total > seen and used / seen * total > 1.25 * most:
        raise DoesNotFit(f"the decoded set is estimated at {used / seen * total / 2**30:.2f} GiB from its first "
                         f"{seen} samples, over the budget ({_too_big(used, limits).split('(')[-1]}")


class _Resizer:
    """Images whose shorter side is over `size` brought down to it, as precache stores them."""

    def __init__(self, size: int, num_threads: int) -> None:
        from .pipeline import HostImages

        self.size = size
        self.host = HostImages(num_threads)

    def __call__(self, decoded: DecodedBatch, ks: list[int]) -> dict[int, np.ndarray]:
        plans = [downsizing(int(decoded.boxes[k][2]), int(decoded.boxes[k][3]), self.size, "none") for k in ks]
        big = [(k, p) for k, p in zip(ks, plans) if p != (None, None)]
        if not big:
            return {}
        return dict(zip([k for k, _ in big], self.host(decoded, [k for k, _ in big], [p for _, p in big])))


def _decode_chunk(pipe: "Pipeline", decoder: Any, chunk: list, images: "_Arena", kept: list, labels: list,
                  fields: list, missing: dict, resize: _Resizer | None = None) -> int:
    """A chunk's images decoded whole and handed to the store's sink (_Keep) through the
    pipeline's stage B (Pipeline.finish_into: what fails is the policy's); a sample whose
    header does not probe is named in `missing` too. Returns the bytes kept."""
    probed = pipe.probe(chunk)
    if len(probed) < len(chunk):
        ok = {id(s) for s in probed.samples}
        missing.update(((s.shard, s.key), (s.shard, s.index)) for s in chunk if id(s) not in ok)
    if not len(probed):
        return 0
    boxes = np.zeros((len(probed), 4), np.int64)
    boxes[:, 2] = probed.heights
    boxes[:, 3] = probed.widths
    decoded = decoder.decode(probed.requests(boxes))
    sizes = list(zip(probed.heights, probed.widths))
    values, failed = read_fields(pipe.config.fields, probed.samples, sizes=sizes, max_pixels=pipe.config.max_pixels,
                                 pool=pipe.mask_pool() if pipe.config.masks else None) if pipe.config.fields else ([], {})
    p = Prepared(probed.samples, [], sizes, list(probed.extras), decoded,
                 BatchTiming(size=0), taken=len(chunk), fields=values, field_errors=failed)
    # (each value kept as it is: a batch's values are checked against each other as they are
    # batched, every epoch, as a streamed batch's are)
    masks = [f.mask is not None for f in pipe.config.fields]
    boxed = [f.boxes is not None for f in pipe.config.fields]
    return pipe.finish_into(_Keep(resize, pipe.config.labels, masks, boxed), p, agree=False, images=images, kept=kept,
                            labels=labels, fields=fields, missing=missing)


class _Keep:
    """The resident store's sink (sinks.Sink): each decoded whole image copied out of the
    decoder's buffers (which it reuses) as a host uint8 HWC array, resized first to the
    stored size where one is set, with its sample and label; a sample whose image failed
    is named in `missing` (its error is already the policy's)."""

    def __init__(self, resize: _Resizer | None, with_labels: bool, masks: Sequence[bool] = (),
                 boxes: Sequence[bool] = ()) -> None:
        self.resize, self.with_labels = resize, with_labels
        self.masks = list(masks) or None  # [field]: whether it is a Mask (resized with its image; its bytes kept)
        self.boxes = list(boxes) or None  # [field]: whether it is Boxes (scaled with its image)

    def take(self, p: Prepared, ok: list[int], whole: bool, gpu: Any, *, images: "_Arena", kept: list,
             labels: list, fields: list, missing: dict) -> int:
        decoded = known(p.decoded, "a prepared batch's decoded pixels")
        good = set(ok)
        for k, s in enumerate(p.samples):
            if k not in good:
                missing[(s.shard, s.key)] = (s.shard, s.index)
        resized = self.resize(decoded, ok) if self.resize is not None and ok else {}
        used = 0
        for k in ok:
            s = p.samples[k]
            if k in resized:
                img = resized[k]
                h, w = img.shape[:2]
            else:
                t, l, h, w = (int(v) for v in decoded.boxes[k])
                sy, sx, sc = (int(v) for v in decoded.strides[k])
                start = int(decoded.offsets[k]) + t * sy + l * sx
                img = decoded.pixels[start:].as_strided((h, w, 3), (sy, sx, sc)).cpu().numpy()
            images.append(img)  # (copied out of the decoder's buffers, which it reuses)
            kept.append(StoredSample(s.key, s.shard, s.index))
            if self.with_labels:
                labels.append(int(p.labels[k]))
            for f, (col, values) in enumerate(zip(fields, p.fields)):
                value = values[k]
                if self.masks is not None and self.masks[f]:
                    if k in resized:  # (its image resized to the stored size: the mask with it)
                        value = resize_mask(value, (h, w))
                    used += value.numel() * value.element_size()
                elif self.boxes is not None and self.boxes[f]:
                    if k in resized:  # (its image resized to the stored size: the boxes with it)
                        value = Stored(scale_boxes(value.xyxy, p.sizes[k], (h, w)), value.labels)
                    used += value.xyxy.nbytes + (value.labels.nbytes if value.labels is not None else 0)
                col.append(value)
            used += h * w * 3
        return used


def _reserve(size: int) -> mmap.mmap:
    """`size` bytes of address space, private and anonymous, committed only as written."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0))


class _Arena:
    """The store's bytes, each image written once, where it will stay, as it is decoded:
    an anonymous mapping the size of the largest budget, reserved but not committed
    (MAP_NORESERVE: a page takes memory when written), so that the fill's peak is the
    store itself, not the store twice (decoded images kept apart, then packed). Where the
    system refuses such a mapping (strict overcommit), the images are kept apart and
    packed at the end, as before."""

    def __init__(self, limits: dict[str, int]) -> None:
        self.limits = limits
        most = max(limits.values(), default=0)
        self.at = 0
        self.shapes: list[tuple[int, int]] = []
        self.parts: list[np.ndarray] = []
        self.flat: np.ndarray | None = None
        self._map: mmap.mmap | None = None
        try:
            self._map = _reserve(max(int(most), 1))
            self.flat = np.frombuffer(self._map, np.uint8)
        except (OSError, OverflowError, ValueError):
            self._map = None
            return
        try:  # (fewer TLB misses where the kernel reads the store: transparent huge pages, if on)
            self._map.madvise(mmap.MADV_HUGEPAGE)  # type: ignore[union-attr]
        except (AttributeError, OSError):
            pass

    def append(self, img: np.ndarray) -> None:
        """Image `img` (uint8 [h, w, 3], any strides) copied in after the last."""
        h, w = img.shape[:2]
        n = h * w * 3
        if self.flat is not None:
            if self.at + n > len(self.flat):  # (the mapping is the largest budget)
                raise DoesNotFit(_too_big(self.at + n, self.limits))
            self.flat[self.at:self.at + n].reshape(h, w, 3)[...] = img
        else:
            self.parts.append(np.array(img, order="C", copy=True))
        self.shapes.append((h, w))
        self.at += n

    def tensor(self, tier: str, device: str) -> torch.Tensor:
        """The images one after the other in one uint8 tensor of the tier: the mapping's
        written part as it is (RAM: also where a CUDA device reads the store, whose
        batches are gathered into the upload's page-locked staging, Resident.gathered), or
        copied from it to device memory ("gpu")."""
        total = max(self.at, 1)
        if self.flat is not None:
            mapped = torch.from_numpy(self.flat[:total])  # (it keeps the mapping alive)
            if tier == "ram":
                return mapped
            self.flat = self._map = None
            return mapped.to(torch.device(device))  # (straight from the mapping: no host copy)
        host = torch.empty(total, dtype=torch.uint8)  # (no mapping: the images kept apart, packed now)
        flat = host.numpy()
        at = 0
        for img in self.parts:
            flat[at:at + img.size] = img.reshape(-1)
            at += img.size
        self.parts.clear()
        return host.to(torch.device(device)) if tier == "gpu" else host


def epoch_chunks(reader: Any, store: Resident, epoch: int, *, start: int, plan: Any, batch_size: int,
                 policy: Any) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """`epoch`'s batches from position `start` as (the store's rows, their places in the
    batch's chunk of the order, the chunk's length): the reader's own order
    (ShardReader.epoch_keys, without reading), cut in chunks of `batch_size` as a streamed
    epoch is. A sample that failed while filling keeps its place in its chunk, as when
    streaming (its batch is one image short), and what the policy recorded for it is
    recorded again, as a streamed epoch records it; what the reader could not read is left
    out of the order, as the reader leaves it out."""
    policy.skipped.extend(store.read_skips)
    order = epoch_rows(reader, store, epoch, start=start, plan=plan)
    for a in range(0, len(order), batch_size):
        rows = order[a:a + batch_size]
        n = len(rows)
        good = rows >= 0
        if good.all():
            yield rows, np.arange(n, dtype=np.int64), n
            continue
        for code in rows[~good].tolist():
            policy.skipped.extend(store.failed[store.failed_keys[FAILED - code]])
        places = np.flatnonzero(good)
        yield rows[places], places.astype(np.int64), n


def epoch_rows(reader: Any, store: Resident, epoch: int, *, start: int = 0, plan: Any = None) -> np.ndarray:
    """The store's codes of the samples `reader` gives out in `epoch` from `start`, in
    order (ShardReader.epoch_keys' order, made from arrays): a row, or FAILED - j for the
    j-th sample that failed while filling (it keeps its place); what the reader could not
    read is left out, as the reader leaves it out. A shard's samples are sliced from its
    code array, a file list's gathered from its own by the list's epoch order: no Python
    per sample."""
    planner = reader.planner
    plan = plan if plan is not None else planner.plan(epoch)
    orders = planner.orders(plan)
    runs = []
    for seg in plan.segments:
        idx = planner.segment_indices(seg, orders, plan.epoch)
        codes = (store.list_codes(seg.url, planner.inputs.files[seg.url].paths) if seg.url in orders
                 else store.source_codes.get(seg.url, np.zeros(0, np.int64)))
        run = (codes[idx] if not len(idx) or int(idx.max()) < len(codes)
               else store.codes_of(list(planner.segment_keys(seg, orders, plan.epoch))))
        runs.append(run[run != UNREAD])
    base = np.concatenate(runs) if runs else np.zeros(0, np.int64)
    return base[planner.positions(plan, [len(r) for r in runs], start)]
