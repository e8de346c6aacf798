"""`gpudecode precache`: image shards -> tensor shards of decoded, downsized pixels.

Each image is decoded once, brought to its stored size (antialiased bilinear as
torchvision's Resize, rounded to uint8) and kept as a `.npy` field (uint8 RGB, HWC; see
gpudecode.tensors) in the same WebDataset layout, with the sample's other fields (labels,
metadata) copied as they are. The Loader reads these shards like any others: the random
crop, flip and ColorJitter still happen at train time, on pixels that need no decoding.
Where an image is resized or cut, a record of how (`.gpudecode.json`: transforms.stored)
is written beside it, so that the members which lie on the image, a Mask's pixels and
Boxes' coordinates, are moved onto the stored image when the Loader reads them; the
members named in `masks=` are moved here instead, once (moved_mask), and the record says
so.

Stored size: `size=S` brings the shorter side down to S (never up); with `crop="center"`
the S x S centre is then cut (zero-padded, as torchvision's CenterCrop, where an image is
smaller); `size=(H, W)` resizes to exactly that.

The work is one unit per source shard. A unit writes its own output shards (split by
`shard_size` samples or `shard_bytes`), named by unit and part: `OUT/shard-UUUUUU-PPP.tar`
for a directory OUT, or a pattern such as `cache/train-%06d.tar` filled with
unit * 1000 + part. A unit is done when its record (in a `.precache` folder beside the
shards) is written, after its shards; so:

- resume (`resume=True`) keeps every unit whose record is there and whose shards check
  out (present, size, sha256) and redoes the others: the result is byte-identical to an
  uninterrupted run, wherever the run was stopped (SIGKILL included);
- ranks (given, or from torchrun / SLURM / a SLURM array) take units round-robin and need
  no coordinator; the last to finish (or `gpudecode precache --merge OUT`) writes the
  manifest of the whole dataset;
- `executor="ray"` runs the same units as Ray tasks.

A run's settings are kept with its records: an OUT holding another run is refused, and
so is resuming with other settings, so shards of two runs never mix. The manifest records
the format version, the producing transform, dtype and layout, every shard's count, bytes
and sha256, the sources, and every skipped sample; `verify(out)` checks a folder against it.
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from . import transforms as T
from ._probe import DEFAULT_MAX_PIXELS
from ._threads import one_torch_thread
from .io.files import DEFAULT_IMAGE_EXTS
from ._version import __version__
from .decode import check_device, choose
from .errors import (ErrorPolicy, FieldError, GpuDecodeError, OnError, ShardFormatError, Skipped,
                     check_on_error)
from .io import shards as _shards
from .io import files
from .io.cache import file_sha256
from .io.reader import Sample, ShardReader, split_exts
from .pipeline import Pipeline, PipelineConfig
from .io.writer import ShardWriter, check_key, pattern_head
from ._manifest import MAX_PARTS, Layout, _read_json, manifest_path, verify, write_json_atomic  # noqa: F401
from .tensors import npy_parts
from ._record import Record, image_record
from .transforms.stored import RECORD, downsizing, made, stored_size

IMAGE_EXTS = DEFAULT_IMAGE_EXTS  # torchvision's image extensions and .npy
FORMAT_VERSION = 3  # 3: a record of each resized image's steps beside it (transforms.stored.RECORD)
_NO_LIMIT = 1 << 62
_CHUNK = 64  # samples a batch through the pipeline


# -- settings, layout ----------------------------------------------------------------------------


def parse_size(size: int | str | Sequence[int]) -> int | tuple[int, int]:
    """256 / "256" (shorter side) or (224, 224) / "224x224" (exactly).

    Raises:
        ValueError: anything else, or a size below 1.
    """
    if isinstance(size, str):
        m = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+)\s*)?", size)
        if m is None:
            raise ValueError(f"size must be S or HxW, not {size!r}")
        size = int(m.group(1)) if m.group(2) is None else (int(m.group(1)), int(m.group(2)))
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        if size < 1:
            raise ValueError(f"size must be >= 1, not {size}")
        return int(size)
    if isinstance(size, Sequence) and len(size) == 2 and all(isinstance(s, (int, np.integer)) for s in size):
        h, w = int(size[0]), int(size[1])
        if h < 1 or w < 1:
            raise ValueError(f"size must be >= 1, not {size}")
        return h, w
    raise ValueError(f"size must be S or (H, W), not {size!r}")


def parse_bytes(text: str | int | None) -> int | None:
    """"1GB", "512MiB", "2e9", 1000000 -> bytes; None stays None.

    Raises:
        ValueError: not a size.
    """
    if text is None or isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([\d.e+]+)\s*([kmgt]?i?b?)?\s*", text.lower())
    if m is None:
        raise ValueError(f"not a byte size: {text!r} (e.g. 1GB, 512MiB)")
    unit = (m.group(2) or "").rstrip("b")
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
             "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}.get(unit)
    try:
        value = float(m.group(1)) * scale if scale is not None else math.nan
    except ValueError:  # ("1e", "..", "1.2.3": the pattern's characters, not a number)
        value = math.nan
    if not math.isfinite(value):  # (also "1e309": past a float, never a size)
        raise ValueError(f"not a byte size: {text!r} (e.g. 1GB, 512MiB)")
    return int(value)


# -- one unit ------------------------------------------------------------------------------------


@dataclass
class Settings:
    """What fixes a run's output bytes (kept with its records: a resume must match)."""

    sources: list[str]
    size: int | tuple[int, int]
    crop: str
    shard_size: int | None
    shard_bytes: int | None
    image_exts: list[str]
    max_pixels: int
    device: str  # "cpu" or "cuda" (not the index)
    decoder: str
    on_error: str
    # the GPU model decoding ("" on the CPU): GPU decoders differ by model (A100 and H100 have a
    # hardware JPEG decoder, others decode with CUDA), so one run's outputs come from one model
    device_model: str = ""
    masks: list[str] = field(default_factory=list)  # the members moved with their images (masks=)

    def doc(self) -> dict:
        doc = {"format_version": FORMAT_VERSION, "gpudecode": __version__, "sources": self.sources,
               "size": list(self.size) if isinstance(self.size, tuple) else self.size, "crop": self.crop,
               "shard_size": self.shard_size, "shard_bytes": self.shard_bytes, "image_exts": self.image_exts,
               "max_pixels": self.max_pixels, "device": self.device, "decoder": self.decoder,
               "on_error": self.on_error, "device_model": self.device_model}
        if self.masks:  # (only where given: a run without it resumes as it was made)
            doc["masks"] = self.masks
        return doc


def device_model(device: str) -> str:
    """The GPU model behind `device` ("" for the CPU), as the manifest records it."""
    if not device.startswith("cuda"):
        return ""

    return torch.cuda.get_device_name(torch.device(device))


def _clear_unit(layout: Layout, unit: int) -> None:
    """Removes whatever an earlier, unfinished attempt at `unit` left (its parts, partial files)."""
    with contextlib.suppress(OSError):
        os.unlink(layout.record(unit))
    for part in range(MAX_PARTS):
        path = layout.shard(unit, part)
        gone = 0
        for p in (path, path + ".partial"):
            try:
                os.unlink(p)
            except FileNotFoundError:
                gone += 1
        if gone == 2 and part > 0:
            break


FILE_UNIT = 1000  # image files (a tree, a list file) per precache unit


def run_unit(settings: Settings, out: str, unit: int, *, threads: int = 0, device: str | None = None,
             decoder: Any = None, progress: Callable[[int], None] | None = None) -> dict:
    """Precaches source shard `unit` into its output shards and writes its record; returns the
    record. Deterministic: the same settings give the same bytes, wherever it runs.

    Raises:
        DecodeError, ShardFormatError, ShardReadError: bad input, with on_error="raise".
        ShardWriteError: an output could not be written.
    """
    layout = Layout(out)
    threads = max(1, threads or os.cpu_count() or 1)
    dev = device or settings.device
    here = device_model(dev)
    if here != settings.device_model:
        raise ValueError(f"this run decodes on {settings.device_model or 'the CPU'}, this worker on "
                         f"{here or 'the CPU'}: decoders differ by GPU model (the hardware JPEG decoder), so one "
                         "run's outputs must all come from one model; run it on that model, or start another run")
    _clear_unit(layout, unit)
    url = settings.sources[unit]
    source: Any = files.reopen(url) if url.startswith(files.PREFIX) else [url]
    fail = ErrorPolicy(settings.on_error, who="gpudecode precache")  # the reader's and the decoder's
    reader = ShardReader(source, shuffle=False, policy=fail, num_threads=1, rank=0, world_size=1)
    exts = settings.image_exts
    # the Loader's pipeline (probe, decode, the policy, the kernel), its images each at their
    # stored size (the host sink: Pipeline.finish_images); the decoder made for this unit
    # and closed after it, or the one handed in
    pipe = Pipeline(PipelineConfig(T.Compose([]), batch_size=_CHUNK, device=dev,
                                   decoder=decoder if decoder is not None else settings.decoder, image_exts=tuple(exts),
                                   label_exts=(), labels=False, num_threads=threads, max_pixels=settings.max_pixels,
                                   each_size=True), policy=fail)
    pipe.ensure_decoder()
    written = 0
    pending: Any = None  # the last chunk's write (a future of the writing thread)

    def plan(h: int, w: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
        return downsizing(h, w, settings.size, settings.crop)

    def _record(s: Sample, h: int, w: int) -> tuple[bytes | None, dict[str, bytes]]:
        """The sample's record of how its image was stored (transforms.stored), after the
        one it came with (an image precached before), or None where neither resized it;
        and its `masks` members moved onto the stored image (the record says so)."""
        data = s.fields.get(RECORD)
        try:
            earlier = None if data is None else image_record(data, (h, w))
            rec = made(h, w, *plan(h, w), earlier)
            if rec is None:
                return None, {}
            moved = {}
            for e in settings.masks:
                if e in s.fields and rec.done(e) < len(rec.steps):  # (one moved through every step: as it is)
                    try:
                        moved[e] = moved_mask(s.fields[e], rec, rec.done(e), settings.max_pixels)
                    except ValueError as why:
                        raise ValueError(f"member .{e} {why}") from None
        except ValueError as e:
            raise FieldError(str(e), shard=s.shard, key=s.key) from None
        return rec.with_moved(moved).member(), moved

    def put(done: list[tuple[Sample, np.ndarray, bytes | None, dict[str, bytes]]],
            writer: ShardWriter) -> None:  # (the writing thread)
        for s, img, record, moved in done:
            kept = {e: moved.get(e, d) for e, d in s.fields.items() if e not in exts and e != RECORD}
            if record is not None:
                kept[RECORD] = record
            writer.write({"__key__": s.key, "npy": npy_parts(img), **kept})

    def flush(chunk: list[Sample], writer: ShardWriter, behind: Any) -> None:
        """The chunk decoded and resized here, then handed to the writing thread once the
        chunk before it is written (in order: one chunk is written while the next decodes)."""
        nonlocal written, pending
        if not chunk:
            return
        prepared = pipe.prepare(chunk, seed=0, epoch=0, position=0)
        done = []
        for s, img, (h, w) in pipe.finish_images(prepared, plan):
            try:
                check_key(s.key)
                record, moved = _record(s, h, w)
            except FieldError as e:  # (a record it came with that is not one, or not its image's)
                fail(e)
                continue
            except ValueError as e:  # a key the reader takes but no shard may hold (`a/../k`, a newline)
                fail(ShardFormatError(f"sample key cannot be written to a shard: {e}", shard=s.shard, key=s.key))
                continue
            done.append((s, img, record, moved))
        if pending is not None:
            pending.result()  # (its ShardWriteError, if any, is raised here)
        pending = behind.submit(put, done, writer)
        written += len(done)
        if progress is not None:
            progress(len(chunk))

    writer = ShardWriter(namer=lambda part: layout.shard(unit, part), maxcount=settings.shard_size or _NO_LIMIT,
                         maxsize=settings.shard_bytes or _NO_LIMIT, fsync=False)
    # (no fsync per shard: nothing here is trusted without its sha256, which a resume checks
    # for every shard it keeps, so a shard lost in a crash is redone; this saves a fifth of
    # the time on a small VM disk and lets the system write back while the next unit runs)
    # The writing (npy encoding, tar members, sha256, the file) runs on a thread of its own,
    # one chunk behind the decoding: it is serial, and most of it lets go of the GIL.
    try:
        with writer, ThreadPoolExecutor(1, thread_name_prefix="gpudecode-precache-write") as behind:
            read_all = False
            try:
                chunk: list[Sample] = []
                for sample in reader:
                    chunk.append(sample)
                    if len(chunk) == _CHUNK:
                        flush(chunk, writer, behind)
                        chunk = []
                flush(chunk, writer, behind)
                read_all = True
            finally:
                if pending is not None:  # (done before the writer finishes or discards its shard)
                    error = pending.exception()
                    if error is not None and read_all:
                        raise error
    finally:
        pipe.close()
    skipped = fail.skipped  # in the order met (the reader's failures are recorded in this thread too)
    shards = [{"path": os.path.relpath(p, layout.folder), "samples": n, "bytes": os.path.getsize(p), "sha256": sha}
              for p, n, sha in zip(writer.shards, writer.counts, writer.sha256s)]  # (hashed as written)
    record = {"unit": unit, "source": url, "samples": written, "shards": shards,
              "skipped": [{"shard": s.shard, "key": s.key, "offset": s.offset, "reason": s.reason, "error": s.error}
                          for s in skipped]}
    write_json_atomic(layout.record(unit), record)
    return record


def moved_mask(data: Any, rec: Record, done: int, max_pixels: int) -> bytes:
    """A mask member (a PNG of one channel or an .npy, as a Mask field reads it) moved
    onto the stored image by `rec`, through the steps after its first `done`
    (transforms.stored.stored_mask: nearest neighbour, 0 where a cut pads), written back
    in its own form: a PNG of its mode (a palette image keeps its palette, 16-bit grey its
    16 bits), an .npy of its dtype; the values the Mask field reads are the moved mask's.

    Raises:
        ValueError: not a mask, or not of its image's size (the member's FieldError)."""
    import io

    from PIL import Image

    from .fields import _npy, decode_mask
    from .transforms.stored import stored_mask

    arr = stored_mask(rec, decode_mask(data, max_pixels), done).numpy()
    raw = bytes(data["bytes"] if isinstance(data, dict) else data)
    out = io.BytesIO()
    if raw[:6] == b"\x93NUMPY":
        np.save(out, arr.astype(_npy(raw).dtype), allow_pickle=False)
        return out.getvalue()
    with Image.open(io.BytesIO(raw)) as im:
        mode, palette = im.mode, (im.getpalette() if im.mode == "P" else None)
    kind = bool if mode == "1" else np.uint8 if mode in ("L", "P") else np.uint16  # (the 16-bit greys: I;16, I)
    img = Image.fromarray(np.ascontiguousarray(arr.astype(kind)))
    if palette is not None:
        img.putpalette(palette)
    img.save(out, "PNG")
    return out.getvalue()


def _unit_done(layout: Layout, unit: int, *, check_sha: bool) -> dict | None:
    """The unit's record if it is there and its shards check out (present, size, sha256)."""
    rec = _read_json(layout.record(unit))
    if rec is None:
        return None
    for s in rec.get("shards", []):
        path = os.path.join(layout.folder, s["path"])
        try:
            if os.path.getsize(path) != s["bytes"]:
                return None
        except OSError:
            return None
        if check_sha and file_sha256(path) != s["sha256"]:
            return None
    return rec


# -- the run -------------------------------------------------------------------------------------


@dataclass
class PrecacheReport:
    """What one precache call did: its share of the output (this rank's source shards,
    those written now and those a resume kept)."""

    shards: list[str]
    samples: int
    manifest: str | None  # None until every source shard is done (other ranks may still be running)
    skipped: list[Skipped] = field(default_factory=list)
    units: list[int] = field(default_factory=list)  # source shards written by this call
    kept: list[int] = field(default_factory=list)  # source shards a resume found done (checked)
    bytes: int = 0
    seconds: float = 0.0
    written: int = 0  # samples written by this call (the others were kept)


def _start(layout: Layout, settings: Settings, units: list[int], *, resume: bool) -> None:
    """Claims OUT for this run, or joins it: ranks started at any time (a SLURM array's
    elements run when they run) share one run.json, the same settings. Without `resume`,
    a rank whose source shards (`units`) were done before is refused, so that finished
    work is never redone by accident.

    Raises:
        ValueError: OUT holds another run's output, or other files; a re-run of units
            already done without resume.
    """
    mine = settings.doc()
    theirs = _read_json(layout.run)
    if theirs is None:
        taken = _foreign_files(layout)
        theirs = _read_json(layout.run)  # another rank may have claimed it meanwhile
        if theirs is None:
            if taken:
                raise ValueError(f"{layout.out} is not empty ({taken[0]}{' and more' if len(taken) > 1 else ''}): "
                                 "precache writes into an empty folder or a shard pattern no file matches, "
                                 "or resumes its own run")
            write_json_atomic(layout.run, mine)
            return
    if theirs != mine:
        diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        raise ValueError(f"{layout.out} holds another precache run (settings differ: {', '.join(diff)}): "
                         "use another output, or remove it")
    if not resume:
        done = [u for u in units if os.path.exists(layout.record(u))]
        if done:
            raise ValueError(f"{layout.out} holds this run, with {len(done)} of this rank's {len(units)} source "
                             "shards done: pass --resume to keep them and do the rest (or remove it to start over)")


def _foreign_files(layout: Layout) -> list[str]:
    if not os.path.isdir(layout.folder):
        return []
    if layout.pattern is None:
        return sorted(n for n in os.listdir(layout.folder) if not n.startswith("."))
    probe = os.path.basename(pattern_head(layout.pattern))
    return sorted(n for n in os.listdir(layout.folder)
                  if n.startswith(probe) and (n.endswith(".tar") or n == os.path.basename(layout.manifest)))


def precache(sources: str | Sequence[str], out: str | os.PathLike, *, size: int | str | Sequence[int] = 256,
             crop: str = "none", shard_size: int | None = None, shard_bytes: int | str | None = None,
             image_ext: str | Sequence[str] = IMAGE_EXTS, num_threads: int | None = None, on_error: OnError = "raise",
             max_pixels: int = DEFAULT_MAX_PIXELS, device: Any = "cpu", decoder: Any = "auto",
             rank: int | None = None, world_size: int | None = None, resume: bool = False,
             executor: str = "local", ray_address: str | None = None,
             progress: Callable[[int, int | None], None] | None = None, masks: Sequence[str] = ()) -> PrecacheReport:
    """Writes tensor shards of the images in `sources` (any shard list ShardReader takes)
    into `out` (a directory, or a shard pattern such as `cache/train-%06d.tar`), and the
    manifest once every source shard is done (see the module doc).

    Args:
        size, crop: the stored size (module doc); crop "none" or "center".
        shard_size, shard_bytes: split a source shard's output after this many samples or
            bytes ("1GB"); default: one output shard per source shard.
        num_threads: decode and resize threads (default: all cores).
        on_error: "raise" stops at the first bad shard or image, naming shard and key;
            "skip"/"warn" leave it out and list it in the manifest.
        device, decoder: "cuda" decodes (decoder "auto": nvImageCodec, DALI, torchcodec)
            and resizes on the GPU; "cpu" (default) uses libjpeg-turbo and the CPU kernel.
            `decoder` may be a decoder instance (local executor).
        rank, world_size: this process's share of the source shards (default: torchrun,
            SLURM or a SLURM array's variables, else the whole).
        resume: keep the units already done (checked) and do the rest.
        executor: "local" (this process) or "ray" (Ray tasks on the cluster at
            `ray_address`, or a local Ray started here; the same output).
        progress: called as progress(done, total) with the source samples handled so far
            and the number to do (None where not known up front: remote shards).
        masks: members that are segmentation masks (e.g. "seg.png"): where an image is
            resized or cut, its mask is moved with it here, once (nearest neighbour, as
            the Loader would move it each epoch), written back in its own form, and the
            record says so; the Loader's Mask field then reads it at the stored size.
            Other members are copied as they are.

    Raises:
        ValueError: bad arguments; `out` holds another run; a resume with other settings.
        DecodeError, ShardFormatError, ShardReadError: bad input, with on_error="raise".
        ShardWriteError: an output could not be written (nothing partial is left under a
            shard's name; resume redoes that source shard).
    """
    t0 = time.perf_counter()
    stored, limit = _checked(size, crop, shard_size, shard_bytes, on_error, executor)
    dev = check_device(device)
    threads = max(1, num_threads or os.cpu_count() or 1)
    urls = _units(sources)
    name = choose(decoder, dev) if isinstance(decoder, (str, tuple, list, dict)) else decoder.name
    # local sources by absolute path: the same run whatever the working directory (a resume, a Ray worker)
    sources = [os.path.abspath(_shards.local_path(u)) if _shards.is_local(u) and not u.startswith(files.PREFIX)
               else u for u in urls]
    settings = Settings(sources=sources, size=stored, crop=crop, shard_size=shard_size, shard_bytes=limit,
                        image_exts=split_exts(image_ext), max_pixels=max_pixels,
                        device="cuda" if dev.startswith("cuda") else "cpu", decoder=name, on_error=on_error,
                        device_model=device_model(dev), masks=_masks(masks, split_exts(image_ext)))
    layout = Layout(out)
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither")
    r, w = (rank, world_size) if rank is not None else _shards.detect_rank(array=True)
    if not 0 <= r < w:  # type: ignore[operator]
        raise ValueError(f"rank {r} is outside world size {w}")
    mine = list(range(r, len(urls), w))  # type: ignore[arg-type]
    _start(layout, settings, mine, resume=resume)
    kept = _kept(layout, mine, threads) if resume else []
    todo = [u for u in mine if u not in kept]
    tick = _Progress(progress, [urls[u] for u in todo])
    if executor == "ray":
        if not isinstance(decoder, str):
            raise ValueError("executor='ray' takes a decoder name, not an instance (it runs in other processes)")
        records = _run_ray(settings, layout.out, todo, num_threads or 1, ray_address, tick)
    else:
        records = _run_local(settings, layout.out, todo, threads, dev, decoder, tick)
    return _report(layout, records, kept, todo, t0)


def _masks(masks: Sequence[str] | str, image_exts: list[str]) -> list[str]:
    """precache's masks=, checked: member names (a sample's extensions), none an image's.

    Raises:
        ValueError: a name no member may have, or an image's extension."""
    names = [masks] if isinstance(masks, str) else list(masks)
    for m in names:
        if (not isinstance(m, str) or not m or len(m) > 64 or m.startswith(".") or m == RECORD
                or not all(c.isascii() and (c.isalnum() or c in "._-") for c in m)):
            raise ValueError(f"masks= names members by their extension (e.g. 'seg.png'), not {m!r}")
        if m.lower() in image_exts:
            raise ValueError(f"masks= names {m!r}, an image extension here: the image is not its own mask")
    return sorted(set(names))


def _checked(size: Any, crop: str, shard_size: int | None, shard_bytes: int | str | None, on_error: str,
             executor: str) -> tuple[int | tuple[int, int], int | None]:
    """precache's arguments checked: the stored size and the byte limit, parsed."""
    stored = parse_size(size)
    if crop not in ("none", "center"):
        raise ValueError(f"crop must be 'none' or 'center', not {crop!r}")
    if crop == "center" and not isinstance(stored, int):
        raise ValueError("crop='center' goes with a shorter-side size (S), not an exact HxW")
    if shard_size is not None and shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, not {shard_size}")
    limit = parse_bytes(shard_bytes)
    if limit is not None and limit < 1:
        raise ValueError("shard_bytes must be positive")
    check_on_error(on_error)
    if executor not in ("local", "ray"):
        raise ValueError(f"executor must be 'local' or 'ray', not {executor!r}")
    return stored, limit


def _units(sources: str | Sequence[str]) -> list[str]:
    """The units of work: each source shard, and image files as they lie in units of
    FILE_UNIT files (in the list's order)."""
    listing = ShardReader(sources, shuffle=False, rank=0, world_size=1)
    urls: list[str] = []
    for named in listing.urls:
        flist = listing.files.get(named)
        if flist is None:
            urls.append(named)
            continue
        if not flist.root and not flist.name.startswith(files.PREFIX + "/"):
            files.reopen(flist.name)  # raises: a Python list cannot be named in the settings
        urls += [flist.part(a, min(a + FILE_UNIT, len(flist))).name for a in range(0, len(flist), FILE_UNIT)]
    return urls


def _kept(layout: Layout, units: list[int], threads: int) -> list[int]:
    """The units a resume keeps: each one's shards read back and checked (sha256), on all
    threads."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads, thread_name_prefix="gpudecode-check") as pool:
        done = pool.map(lambda u: _unit_done(layout, u, check_sha=True) is not None, units)
        return [u for u, ok in zip(units, done) if ok]


def _report(layout: Layout, records: list[dict], kept: list[int], todo: list[int], t0: float) -> PrecacheReport:
    manifest = _merge_if_complete(layout)
    recs = {int(rec["unit"]): rec for rec in records}
    for u in kept:
        recs[u] = _read_json(layout.record(u)) or {}
    shard_paths = [os.path.join(layout.folder, s["path"]) for u in sorted(recs) for s in recs[u].get("shards", [])]
    skipped = [Skipped(s["shard"], s["key"], s["offset"], s["reason"], s["error"])
               for u in sorted(recs) for s in recs[u].get("skipped", [])]
    return PrecacheReport(shards=shard_paths, samples=sum(int(recs[u].get("samples", 0)) for u in recs),
                          manifest=manifest, skipped=skipped, units=todo, kept=kept,
                          bytes=sum(os.path.getsize(p) for p in shard_paths), seconds=time.perf_counter() - t0,
                          written=sum(int(rec["samples"]) for rec in records))


def _run_local(settings: Settings, out: str, units: list[int], threads: int, device: str, decoder: Any,
               tick: Callable[[int], None]) -> list[dict]:
    """The units in this process. On the CPU, `threads` units run side by side, one
    thread each (decode, resize, tar writing and hashing of one unit overlap the
    others'; one unit at a time on many threads leaves cores idle in its serial parts);
    a GPU (or a decoder given as an instance) takes one unit at a time. The first failure
    stops the units not started and is raised once the running ones are done."""
    if not isinstance(decoder, str) or device != "cpu" or threads == 1 or len(units) < 2:
        dec = decoder if not isinstance(decoder, str) else None
        return [run_unit(settings, out, u, threads=threads, device=device, decoder=dec, progress=tick) for u in units]
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    workers = min(threads, len(units))
    with ThreadPoolExecutor(workers, thread_name_prefix="gpudecode-precache", initializer=one_torch_thread) as pool:
        futures = [pool.submit(run_unit, settings, out, u, threads=1, device=device, progress=tick) for u in units]
        wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            f.cancel()
        return [f.result() for f in futures]


class _Progress:
    """Calls progress(done, total) as source samples are handled; total is the samples in
    the shards still to do (counted up front where the shards are local, else None)."""

    def __init__(self, progress: Callable[[int, int | None], None] | None, urls: list[str]) -> None:
        self.progress = progress
        self._lock = threading.Lock()
        self.done = 0
        self.total: int | None = None
        if progress is None:
            return
        listed = [u for u in urls if u.startswith(files.PREFIX)]
        shards = [u for u in urls if not u.startswith(files.PREFIX)]
        if not urls:
            self.total = 0
        elif all(_shards.is_local(u) for u in shards):
            from .io.reader import shard_counts

            try:
                self.total = sum(shard_counts(shards, tolerant=True).values()) + sum(len(files.reopen(u)) for u in listed)
            except (GpuDecodeError, ValueError):
                self.total = None
        progress(0, self.total)

    def __call__(self, n: int) -> None:
        with self._lock:  # units run on several threads
            self.done += n
            if self.progress is not None:
                self.progress(self.done, self.total)


def _run_ray(settings: Settings, out: str, units: list[int], threads: int, address: str | None,
             tick: Callable[[int], None]) -> list[dict]:
    """The units as Ray tasks (`threads` CPUs each, and a GPU each for device="cuda"): on the
    cluster at `address`, on the Ray already initialized in this process, or on a local Ray
    started (and stopped) here. Every node must see `out` (a shared file system)."""
    try:
        import ray
    except ImportError as e:
        from .errors import BackendUnavailableError

        raise BackendUnavailableError(f"executor='ray' needs Ray ({e}): pip install 'gpudecode[ray]'") from e
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, log_to_driver=False, include_dashboard=False)
    try:
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        opts: dict[str, Any] = {"num_cpus": min(threads, cpus), "max_retries": 0}
        if settings.device == "cuda":
            opts["num_gpus"] = 1
        task = ray.remote(**opts)(run_unit)
        refs = [task.remote(settings, os.path.abspath(out), u, threads=threads)  # type: ignore[call-arg]
                for u in units]
        records: dict[int, dict] = {}
        pending = list(refs)
        try:
            while pending:  # in the order they finish, for the progress; the first failure is raised here
                ready, pending = ray.wait(pending, num_returns=1)
                try:
                    rec = ray.get(ready[0])
                except ray.exceptions.RayTaskError as e:  # the task's own error (DecodeError, ...), as raised there
                    cause = e.as_instanceof_cause()
                    raise (cause.cause if isinstance(getattr(cause, "cause", None), BaseException) else cause) from None
                records[int(rec["unit"])] = rec
                tick(int(rec["samples"]) + len(rec["skipped"]))
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
        return [records[u] for u in units]
    finally:
        if started:
            ray.shutdown()


def _merge_if_complete(layout: Layout) -> str | None:
    """Writes the manifest if every unit is done; its path, or None."""
    try:
        return merge(layout.out)
    except _Incomplete:
        return None


class _Incomplete(ValueError):
    pass


def merge(out: str | os.PathLike) -> str:
    """Assembles the manifest of a precache output from its units' records (what the last
    rank to finish does itself); returns its path.

    Raises:
        ValueError: not a precache output, or units not done yet (named).
    """
    layout = Layout(out)
    run = _read_json(layout.run)
    if run is None:
        raise ValueError(f"{layout.out} is not a precache output (no {os.path.relpath(layout.run, layout.folder)})")
    n = len(run["sources"])
    records = [_read_json(layout.record(u)) for u in range(n)]
    missing = [u for u, rec in enumerate(records) if rec is None]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise _Incomplete(f"{len(missing)} of {n} source shards are not done: units "
                          f"{', '.join(map(str, missing[:5]))}{more}")
    size = run["size"]
    fixed = [size, size, 3] if run["crop"] == "center" else ([*size, 3] if isinstance(size, list) else None)
    doc = {
        "format": "gpudecode tensor shards", "version": FORMAT_VERSION, "created_by": f"gpudecode {run['gpudecode']}",
        "transform": {"size": size, "crop": run["crop"], "interpolation": "bilinear, antialiased (torchvision Resize)",
                      "rounding": "to nearest uint8", "upscaled": isinstance(size, list)},
        "pixels": {"field": "npy", "dtype": "uint8", "layout": "HWC", "channels": 3, "shape": fixed,
                   "shorter_side_at_most": size if isinstance(size, int) else None},
        "settings": run, "sources": run["sources"],
        "samples": sum(int(rec["samples"]) for rec in records if rec),
        "shards": [{**s, "unit": rec["unit"], "source": rec["source"]} for rec in records if rec for s in rec["shards"]],
        "skipped": [s for rec in records if rec for s in rec["skipped"]],
    }
    write_json_atomic(layout.manifest, doc)
    return layout.manifest


__all__ = ["precache", "merge", "verify", "run_unit", "PrecacheReport", "Settings", "Layout", "stored_size",
           "parse_size", "parse_bytes", "manifest_path", "write_json_atomic"]
