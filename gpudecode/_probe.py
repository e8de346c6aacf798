"""Image header probe: size and encoding without decoding (native, GIL released), and the
sample-level probe the Loader and precache share: which field is the image, its size,
and the pixel limit (decompression bombs are refused before any decoding)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from . import _native
from .decode._base import Request, Requests, missing_plugin, pillow_formats
from .errors import DecodeError, LocatedError, wrap_data_error

if TYPE_CHECKING:
    from .io.reader import Sample

DEFAULT_MAX_PIXELS = 2 * 89_478_485  # Pillow's decompression-bomb error threshold
# probe_columns refuses a JPEG whose data ends before its end-of-image marker with a message
# that starts so (csrc/probe.cpp JPEG_CUT_MESSAGE): a truncated file is named as one on every
# decoder (GPU decoders do not promise to notice, the CPU one may not reach the cut)
JPEG_CUT = "truncated JPEG: no end-of-image marker"
# and one of more than 256 scans (csrc/probe.h kMaxJpegScans)
JPEG_SCANS = "JPEG refused: a progressive JPEG of more than"


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """What the first bytes of a JPEG, PNG or tensor sample (.npy) say.

    `channels` counts the components stored in the file (JPEG 1/3/4; PNG 1 gray or
    palette, 2 gray+alpha, 3 RGB, 4 RGBA; npy 3). `subsampling` is JPEG only;
    `color_type` and `interlaced` are PNG only; `bit_depth` is the sample precision;
    `data_offset` is npy only (where the pixels start). The native probe reads .npy
    headers as numpy writes them for uint8 [H, W, 3]; others go to numpy's parser.
    """

    format: str
    height: int
    width: int
    channels: int
    bit_depth: int
    color_space: str
    subsampling: str | None
    progressive: bool
    arithmetic: bool
    color_type: int | None
    interlaced: bool
    data_offset: int = 0  # npy: where the pixels start


def probe(data: bytes, *, shard: str | None = None, key: str | None = None) -> ImageInfo:
    """Header facts of one JPEG or PNG.

    Raises:
        DecodeError: the data is not a JPEG/PNG header it can read; names shard and key.
    """
    try:
        return ImageInfo(**_native.probe(data))
    except ValueError as e:
        raise DecodeError(str(e), shard=shard, key=key) from None


def probe_batch(items: Sequence[bytes], *, num_threads: int = 1) -> list[ImageInfo | str]:
    """Probe many images; an entry is the ImageInfo, or the error message."""
    return [ImageInfo(**r) if isinstance(r, dict) else r for r in _native.probe_batch(list(items), num_threads)]


def probe_format(data: bytes, *, shard: str | None = None, key: str | None = None,
                 why: str | None = None) -> tuple[str, int, int]:
    """(format, height, width) of any image the decoders take: "jpeg"/"png" (native
    probe), "npy" (a tensor sample, see gpudecode.tensors) or "other" (what Pillow
    opens). `why`: the native probe's message when the caller already ran it.

    Raises:
        DecodeError: none of them reads it; names shard and key.
    """
    import io

    from PIL import Image, UnidentifiedImageError

    from .tensors import MAGIC, npy_layout

    if why is None:
        try:
            info = _native.probe(data)
            return info["format"], info["height"], info["width"]
        except ValueError as e:
            why = str(e)
    if bytes(data[:6]) == MAGIC:
        try:
            h, w, _ = npy_layout(data)
        except Exception as e:  # numpy's header parser raises ValueError, SyntaxError, ...
            raise DecodeError(f"not a readable tensor sample ({e})", shard=shard, key=key) from None
        return "npy", h, w
    try:
        with Image.open(io.BytesIO(data), formats=pillow_formats()) as im:
            return "other", im.height, im.width
    except (UnidentifiedImageError, OSError, ValueError):
        missing = missing_plugin(data)
        raise DecodeError(missing or f"not a readable image ({why})", shard=shard, key=key) from None
    except Image.DecompressionBombError as e:  # Pillow's own limit, met while opening
        raise DecodeError(f"over Pillow's decompression-bomb limit ({e})", shard=shard, key=key) from None
    except Exception as e:  # any other failure of a Pillow plugin on hostile bytes
        raise wrap_data_error(e, DecodeError, "not a readable image", shard=shard, key=key) from e


@dataclass(slots=True)
class ProbedImage:
    """A sample whose image was probed: the image's bytes, format ("jpeg", "png",
    "npy" or "other"), size, and what the caller's `extra` returned for the sample."""

    sample: "Sample"
    data: bytes
    format: str
    height: int
    width: int
    extra: Any = None

    def request(self, box: tuple[int, int, int, int] | None = None) -> Request:
        """What a decoder is asked for: `box` (top, left, height, width) of this image, the
        whole image when None; the shard and key name it in any error."""
        return Request(self.data, self.format, self.height, self.width, box or (0, 0, self.height, self.width),
                       self.sample.shard, self.sample.key)


@dataclass(slots=True)
class Probed:
    """The samples of a read batch with a readable image, as columns (probe_columns):
    sample, image bytes, format, height, width and the caller's `extra`, one entry per
    kept sample, in order."""

    samples: list
    datas: list
    formats: list[str]
    heights: list[int]
    widths: list[int]
    extras: list

    def __len__(self) -> int:
        return len(self.samples)

    def keep(self, rows: Sequence[int]) -> "Probed":
        """Only entries `rows`, in that order."""
        return Probed([self.samples[k] for k in rows], [self.datas[k] for k in rows],
                      [self.formats[k] for k in rows], [self.heights[k] for k in rows],
                      [self.widths[k] for k in rows], [self.extras[k] for k in rows])

    def images(self) -> list[ProbedImage]:
        return [ProbedImage(*row) for row in zip(self.samples, self.datas, self.formats, self.heights, self.widths,
                                                 self.extras)]

    def requests(self, boxes: Sequence[tuple[int, int, int, int]] | np.ndarray) -> Requests:
        """What a decoder is asked for: box k of image k (shard and key name it in errors)."""
        return Requests(self.datas, self.formats, self.heights, self.widths, boxes,
                        [s.shard for s in self.samples], [s.key for s in self.samples])


def probe_samples(chunk: Sequence["Sample"], image_exts: Sequence[str], max_pixels: int,
                  fail: Callable[[LocatedError], None], extra: Callable[["Sample"], Any] | None = None, *,
                  label_exts: Sequence[str] | None = None,
                  fits: Callable[[int], bool] = lambda v: True) -> list[ProbedImage]:
    """probe_columns' samples as ProbedImages (one object each)."""
    return probe_columns(chunk, image_exts, max_pixels, fail, extra, label_exts=label_exts, fits=fits).images()


def probe_columns(chunk: Sequence["Sample"], image_exts: Sequence[str], max_pixels: int,
                  fail: Callable[[LocatedError], None], extra: Callable[["Sample"], Any] | None = None, *,
                  label_exts: Sequence[str] | None = None,
                  fits: Callable[[int], bool] = lambda v: True) -> Probed:
    """The samples of `chunk` with a readable image (the first of `image_exts` present)
    of at most `max_pixels` (0: any), in order, each with what `extra` returns for it
    (None without one).
    Each failure, extra's errors included, goes to `fail` (which raises, or records and
    returns) as a LocatedError naming shard and key: any exception met on the data is
    turned into one; the samples with no image are reported first.

    A JPEG must hold its end-of-image marker (the data is all there): one cut off is
    refused here (JPEG_CUT), before any decoder sees it.

    One native call for the read batch finds the image fields and probes them; with
    `label_exts` (the fields `extra` reads a label from: parse_label's), it also parses
    the labels that are ASCII integers, and a parsed label that `fits` is taken without
    calling `extra` (`fits` tells whether a label is in range, an interval: a batch's
    least and greatest labels are what it is asked about). What the native call does not take (a .json label, one it refuses or
    `fits` refuses, an image it cannot probe) goes through `extra` and probe_format, so
    every outcome and message is the same, in the same order."""
    images, fmts, hs, ws, errs, labels, label_ok = _native.probe_fields(
        [s.fields for s in chunk], list(image_exts), list(label_exts) if label_exts is not None else [], 1)
    hl, wl, ll, okl = hs.tolist(), ws.tolist(), labels.tolist(), label_ok.tolist()
    if (None not in images and errs.count(None) == len(errs)
            and (not max_pixels or not (hs * ws > max_pixels).any())
            and (extra is None or (label_exts is not None and all(okl) and fits(min(ll)) and fits(max(ll))))):
        # every image present and probed, every label parsed (the common batch): the columns as they are
        extras = [None] * len(chunk) if extra is None else ll
        return Probed(list(chunk), images, fmts, hl, wl, extras)  # type: ignore[arg-type]
    for s, d in zip(chunk, images):
        if d is None:
            fail(DecodeError(f"no image (looked for .{', .'.join(image_exts)})", shard=s.shard, key=s.key))
    out = Probed([], [], [], [], [], [])
    for i, (s, d) in enumerate(zip(chunk, images)):
        if d is None:
            continue
        try:
            try:
                why = errs[i]
                if why is None:
                    fmt, h, w = fmts[i], hl[i], wl[i]
                elif why.startswith((JPEG_CUT, JPEG_SCANS)):  # a JPEG refused as one: no other reader should try it
                    raise DecodeError(why, shard=s.shard, key=s.key)
                else:
                    fmt, h, w = probe_format(d, shard=s.shard, key=s.key, why=why)
                if max_pixels and h * w > max_pixels:
                    raise DecodeError(f"image of {w}x{h} pixels is over the limit of {max_pixels} pixels",
                                      shard=s.shard, key=s.key)
                value = None if extra is None else ll[i] if okl[i] and fits(ll[i]) else extra(s)
            except LocatedError:
                raise
            except Exception as e:
                raise wrap_data_error(e, DecodeError, "probing the image failed", shard=s.shard, key=s.key) from e
        except LocatedError as e:
            fail(e)
            continue
        out.samples.append(s)
        out.datas.append(d)
        out.formats.append(fmt)  # type: ignore[arg-type]  # (a str where the probe succeeded)
        out.heights.append(h)
        out.widths.append(w)
        out.extras.append(value)
    return out
