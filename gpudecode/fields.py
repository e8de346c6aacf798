"""A sample's other members, handed out beside its image and label:
`Loader(..., fields=...)` (a caption for CLIP-style training, a JSON record, a mask or an
embedding as .npy, a second class index).

Each field is one more element of the batch tuple, in the order given:
`(images, labels, *fields)`, or `(images, *fields)` under `labels=False`, as a
DataLoader over a Dataset returning `(image, label, caption)` or `(image, caption)`
batches them. A field names a member by its extension ("txt"), with alternatives tried
in order ("txt;caption", as `label_ext`); a dict {extension: function} also runs the
function on each decoded value (a tokenizer, a parser of one's own) on a thread of the
Loader's own while the batch decodes (pipeline.py), not the trainer's.

Members are decoded by their last extension as webdataset's default decoders decode
them, where that is safe:

| extension | value | in a batch |
|---|---|---|
| txt, text, transcript | str (strict UTF-8) | list of str |
| cls, cls2, class, count, index, inx, id | int (labels.py's strict integer) | int64 tensor [N] |
| json, jsn | the parsed JSON value | list |
| npy | numpy array (no pickled objects; its header checked against its bytes) | tensor [N, ...] |
| any other | bytes | list of bytes |

pickle, pyd, pkl, pth and pt members would run code from the shard when read: they are
refused unless a function reads them (it is given the bytes). A function's values are
batched by the first value's kind: tensors and arrays stacked (every one of the batch's
shape and dtype), Python ints, floats and bools as a tensor (int64, float64, bool, as
DataLoader's default_collate makes them), anything else as a list.
Tensors go to the Loader's device, as labels do.

A Parquet file's fields are its other columns, by name (any case), their values as
pyarrow gives them (io/parquet.py reads them beside the image column), and so are a
Hugging Face Dataset's given as it is (parquet.hf_dataset); a null is no field.

A sample whose field is missing, cannot be decoded, or whose function raises is that
sample's FieldError, naming its shard and key (skipped under on_error="skip", as a bad
label is); so is one whose array differs in shape or dtype from its batch's first.
"""
from __future__ import annotations

import concurrent.futures
import functools
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from .errors import FieldError, TransformError, known
from .io.members import split_exts
from .labels import parse_text_int
from .transforms.boxes import Stored, as_boxes, box_moves, check_format, kept, move_boxes, on_canvas, target, warped_boxes
from .transforms.geometry_choice import crops_resized
from .transforms.iou_crop import emptied
from ._record import RECORD, Record, image_record
from .transforms.stored import stored_boxes, stored_mask
from .transforms.masks import MASK_DTYPES, as_mask, drawn_warps, fill_fits, mask_indices, move_mask, places

__all__ = ["FieldSpec", "Mask", "Boxes", "batched", "field_specs", "read_fields", "follow_targets", "disagreeing",
           "collate"]

TEXT = frozenset({"txt", "text", "transcript"})
INTS = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})
JSON = frozenset({"json", "jsn"})
UNSAFE = frozenset({"pickle", "pyd", "pkl", "pth", "pt"})
_MAX_JSON_DEPTH = 64


class Mask:
    """A field that is the sample's segmentation mask: one class index a pixel, moved with
    its image by the image's own draws (cropped, resized by nearest neighbour, padded with
    `fill`, flipped; rotated, warped by RandomAffine or RandomPerspective by nearest
    neighbour, `fill` outside) as torchvision.transforms.v2 moves a tv_tensors.Mask beside
    its image: `fields={"png": gpudecode.Mask(fill=255)}` (255: the ignore index of
    torchvision's segmentation reference). In a batch, a tensor [N, h, w] of the images'
    output size (a list of them, one a view, under several views), of `dtype` (default:
    the mask's own: uint8 for an 8-bit PNG), on the Loader's device.

    The member is a PNG of one channel (a palette image's indices, not its colours; grey
    values; 16-bit grey as int32), its values as Pillow's np.array gives them, or an .npy
    array [H, W] of integers or bools. A mask of another
    size than its image, of several channels, or that does not decode is its sample's
    FieldError. ElasticTransform is followed too (its field, by nearest neighbour). A
    transform that moves pixels otherwise (the policies' geometric ops, as torchvision's
    AutoAugment family refuses masks) and MixUp / CutMix are refused when the Loader is
    made."""

    def __init__(self, fill: int = 0, dtype: torch.dtype | None = None) -> None:
        if isinstance(fill, bool) or not isinstance(fill, (int, np.integer)):
            raise TypeError(f"Mask(fill=) is a class index (an int), not {fill!r}")
        if dtype is not None and dtype not in MASK_DTYPES:
            raise TypeError(f"Mask(dtype=) is one of {', '.join(str(d) for d in MASK_DTYPES)}, not {dtype!r}")
        self.fill, self.dtype = int(fill), dtype
        if dtype is not None and not fill_fits(self.fill, dtype):
            raise ValueError(f"Mask(fill={fill}) does not fit {dtype}")

    def __repr__(self) -> str:
        return f"Mask(fill={self.fill}" + (f", dtype={self.dtype})" if self.dtype is not None else ")")

    def __call__(self, value: Any) -> Any:  # (a Mask is applied by follow_masks, with the image's draws)
        raise TypeError("a Mask is moved with its image by the Loader (fields.follow_masks), not called")


class Boxes:
    """A field that is the sample's bounding boxes (and their labels), moved with its image
    by the image's own draws as torchvision.transforms.v2 moves a tv_tensors.BoundingBoxes
    beside its image (cropped, scaled, shifted by the padding, clamped to the output,
    flipped; through a rotation, an affine or a perspective warp, the box around its
    corners' new places, clamped), then, after the last step, the boxes whose width or
    height falls under `min_size`, or area under `min_area`, dropped with their labels, as
    SanitizeBoundingBoxes drops them (1 and 1 by default; 0 and 0 keep every box).
    `format`: the boxes' format as stored, "XYXY", "XYWH" (COCO's) or "CXCYWH";
    `out_format`: as handed out (default: `format`; torchvision's detection models take
    "XYXY"). A transform's SanitizeBoundingBoxes and ConvertBoundingBoxFormat set these
    where the field leaves them (`following`: a torchvision detection pipeline converts as
    written).

    In a batch, a list of one dict a sample, as torchvision's detection models take their
    targets: {"boxes": float32 [K, 4], "labels": int64 [K]} ("labels" where the member has
    them), on the Loader's device (one copy a batch); under several views, a list of such
    lists, one a view (each view's boxes moved with that view's image). The member is read by its bytes: JSON
    (a list of boxes; {"boxes": [...], "labels": [...]}, or "bbox" and "category" as a
    Hugging Face detection set's objects; a list of COCO annotations, each with "bbox" and
    "category_id") or an .npy [K, 4]; a Parquet struct or list column the same way. A
    member that is none of these, or holds a box that is not finite or of negative width or
    height, is its sample's FieldError. ElasticTransform moves boxes as torchvision's
    elastic_bounding_boxes does. A transform that moves pixels otherwise (the policies'
    geometric ops) and MixUp / CutMix are refused when the Loader is made."""

    def __init__(self, format: str = "XYXY", *, out_format: str | None = None, min_size: float | None = None,
                 min_area: float | None = None) -> None:
        self.format = check_format(format)
        self.out_format = self.format if out_format is None else check_format(out_format)
        for name, v in (("min_size", min_size), ("min_area", min_area)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                  or v < 0):
                raise ValueError(f"Boxes({name}=) is a number of pixels, 0 or more, not {v!r}")
        self.min_size = 1.0 if min_size is None else float(min_size)
        self.min_area = 1.0 if min_area is None else float(min_area)
        self._given = (out_format is not None, min_size is not None or min_area is not None)

    def following(self, plan: Any) -> "Boxes":
        """These Boxes with what a transform's plan says of its boxes (transforms.targets):
        ConvertBoundingBoxFormat's format handed out, SanitizeBoundingBoxes' sizes.

        Raises:
            TransformError: the field gives one of them otherwise than the transform."""
        fmt, sizes = getattr(plan, "box_format", None), getattr(plan, "box_sizes", None)
        out_format, min_size, min_area = self.out_format, self.min_size, self.min_area
        if fmt is not None:
            if self._given[0] and fmt != out_format:
                raise TransformError(f"{self!r} hands its boxes out as {out_format}, and the transform's "
                                     f"ConvertBoundingBoxFormat as {fmt}: give one of them")
            out_format = fmt
        if sizes is not None:
            if self._given[1] and sizes != (min_size, min_area):
                raise TransformError(f"{self!r} drops boxes under min_size={min_size:g}, min_area={min_area:g}, and "
                                     f"the transform's SanitizeBoundingBoxes under {sizes[0]:g}, {sizes[1]:g}: give "
                                     "one of them")
            min_size, min_area = sizes
        return Boxes(self.format, out_format=out_format, min_size=min_size, min_area=min_area)

    def __repr__(self) -> str:
        out = f", out_format={self.out_format!r}" if self.out_format != self.format else ""
        return f"Boxes({self.format!r}{out}, min_size={self.min_size:g}, min_area={self.min_area:g})"

    def __call__(self, value: Any) -> Any:  # (Boxes are applied by follow_targets, with the image's draws)
        raise TypeError("Boxes are moved with their image by the Loader (fields.follow_targets), not called")


# Pillow's one-channel modes, as a mask's indices: palette indices, grey, 1-bit, 16-bit and 32-bit grey
_MASK_MODES = frozenset({"P", "L", "1", "I;16", "I;16B", "I;16L", "I"})


@dataclass(frozen=True)
class FieldSpec:
    """One field: the member extensions tried in order (the first present is read), and
    the function run on its decoded value (None: the value as decoded)."""

    exts: tuple[str, ...]
    fn: Callable[[Any], Any] | None = None

    @property
    def name(self) -> str:
        return ";".join(self.exts)

    @property
    def mask(self) -> "Mask | None":
        return self.fn if isinstance(self.fn, Mask) else None

    @property
    def boxes(self) -> "Boxes | None":
        return self.fn if isinstance(self.fn, Boxes) else None


def field_specs(fields: Any, image_exts: Sequence[str]) -> tuple[FieldSpec, ...]:
    """The Loader's `fields` argument, checked: None, an extension, a list of them, or a
    dict {extension: function}.

    Raises:
        ValueError: an empty name, a field that is the image itself, one named twice, a
            pickled member without a function to read it; TypeError: a value of another
            type, a function that is not callable."""
    if fields is None:
        return ()
    if isinstance(fields, str):
        items: list[tuple[Any, Any]] = [(fields, None)]
    elif isinstance(fields, Mapping):
        items = list(fields.items())
    elif isinstance(fields, Sequence):
        items = [(f, None) for f in fields]
    else:
        raise TypeError(f"fields: an extension, a list of them or a dict {{extension: function}}, not "
                        f"{type(fields).__name__}")
    specs = []
    for name, fn in items:
        if not isinstance(name, str):
            raise TypeError(f"fields: each field is named by an extension (a str), not {name!r}")
        exts = tuple(split_exts(name))
        if not exts:
            raise ValueError(f"fields: {name!r} names no extension")
        if fn is not None and not callable(fn):
            raise TypeError(f"fields: the function given for {name!r} is not callable ({type(fn).__name__})")
        if exts[0] in ("images", "labels"):
            raise ValueError(f"fields: a field is named by its first extension, and {exts[0]!r} is the name of the "
                             f"batch's own {exts[0]} (a member .labels that holds the label is label_ext=\"labels\")")
        image = [e for e in exts if e in image_exts]
        if image:
            raise ValueError(f"fields: .{image[0]} is one of the image extensions given (image_ext): the image is "
                             "the batch's first element already")
        unsafe = [e for e in exts if _last(e) in UNSAFE]
        if unsafe and fn is None:
            raise ValueError(f"fields: .{unsafe[0]} is a pickled member, and unpickling runs code from the shard: "
                             f"give a function that reads its bytes (fields={{{name!r}: fn}}) if you trust the data")
        specs.append(FieldSpec(exts, fn))
    seen: set[str] = set()
    for s in specs:
        again = seen.intersection(s.exts)
        if again:
            raise ValueError(f"fields: .{sorted(again)[0]} is named by two fields")
        seen.update(s.exts)
    return tuple(specs)


def _last(ext: str) -> str:
    return ext.rsplit(".", 1)[-1]


def decode_member(ext: str, data: Any, *, raw: bool = False) -> Any:
    """A member's value by its last extension (the module doc's table); `raw`: its bytes
    (a pickled member, read by the caller's function). A value that is not bytes (a
    Parquet column's) is taken as it is.

    Raises:
        ValueError: the bytes are not what the extension says, with the reason."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        return data  # (a Parquet column's value, as pyarrow gives it: a str, an int, a list)
    kind = _last(ext)
    if raw or kind in UNSAFE:
        return bytes(data)
    if kind in TEXT:
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"is not UTF-8 text ({e.reason} at byte {e.start})") from None
    if kind in INTS:
        return parse_text_int(bytes(data))
    if kind in JSON:
        return _json(bytes(data))
    if kind == "npy":
        return _npy(bytes(data))
    return bytes(data)


def _json(data: bytes) -> Any:
    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError("is JSON nested too deeply") from None
    except (ValueError, MemoryError) as e:
        raise ValueError(f"is not valid JSON ({type(e).__name__}: {str(e)[:80]})") from None
    if _depth(value) > _MAX_JSON_DEPTH:
        raise ValueError(f"is JSON nested deeper than {_MAX_JSON_DEPTH} levels")
    return value


def _depth(v: Any) -> int:
    depth, level = 0, [v]
    while level:
        nxt: list[Any] = []
        for x in level:
            t = type(x)  # (json.loads makes dicts and lists of these exact types)
            if t is dict:
                nxt.extend(x.values())
            elif t is list:
                nxt.extend(x)
        depth, level = depth + 1, nxt
        if depth > _MAX_JSON_DEPTH:
            break
    return depth


def _npy(data: bytes) -> np.ndarray:
    """An .npy member as numpy reads it, its header checked first: no object dtype (that
    is a pickle), and the bytes it declares present (a header claiming more than the
    member holds would otherwise allocate it)."""
    import io

    fp = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
        else:
            raise ValueError(f"version {version}")
    except Exception as e:  # (numpy's header parser on hostile bytes: ValueError, SyntaxError, TokenError, ...)
        raise ValueError(f"is not a .npy array ({type(e).__name__}: {str(e)[:80]})") from None
    if dtype.hasobject:
        raise ValueError("is a .npy of Python objects (a pickle): refused, it would run code from the shard")
    if any(type(d) is not int for d in shape):  # (numpy's parser takes True / False as dimensions; reshape does not)
        raise ValueError(f"is a .npy whose header gives a dimension that is not an integer: {shape}")
    if any(d < 0 for d in shape):
        raise ValueError(f"is a .npy whose header gives a negative dimension: {shape}")
    count = math.prod(shape)
    need = count * dtype.itemsize
    start = fp.tell()
    if len(data) - start < need:
        raise ValueError(f"is a .npy whose header says {shape} {dtype} ({need} bytes) but holds "
                         f"{len(data) - start}")
    arr = np.frombuffer(data, dtype, count, start)
    return arr.reshape(shape[::-1]).T.copy() if fortran else arr.reshape(shape).copy()


def decode_mask(data: Any, max_pixels: int = 0) -> torch.Tensor:
    """A Mask member's value, by its bytes, whatever its extension or column is named: a
    PNG of one channel, its values as Pillow's np.array gives them (_png_mask: its chunks
    checked first by the PNG walker, so what libpng refuses, and a size over `max_pixels`,
    is refused before any pixel is read), or an .npy [H, W] of integers or bools. A Parquet
    value {"bytes": ...} (a Hugging Face Image column) is its bytes.

    Raises:
        ValueError: anything else, with the reason."""
    if isinstance(data, Mapping) and "bytes" in data:
        data = data["bytes"]
    if isinstance(data, (np.ndarray, torch.Tensor)):
        raw: Any = data
    elif not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"is a {type(data).__name__}, not a mask (a PNG or .npy)")
    elif bytes(data[:8]) == b"\x89PNG\r\n\x1a\n":
        raw = _png_mask(bytes(data), max_pixels)
    elif bytes(data[:6]) == b"\x93NUMPY":
        raw = _npy(bytes(data))
    else:
        raise ValueError("is not a mask: a mask is a PNG or an .npy array")
    try:
        mask = as_mask(raw)
    except TypeError as e:
        raise ValueError(f"is not a mask: {e}") from None
    if max_pixels > 0 and mask.numel() > max_pixels:
        raise ValueError(f"is a mask of {mask.shape[0]}x{mask.shape[1]}, over the limit of {max_pixels} pixels")
    return mask


def decode_boxes(data: Any, fmt: str = "XYXY") -> Stored:
    """A Boxes member's value, by its bytes, whatever its extension: an .npy [K, 4], else
    JSON (checked as any JSON field is); a value that is not bytes (a Parquet column's) as
    it is. Returns the boxes as_boxes reads, XYXY (transforms.boxes.Stored).

    Raises:
        ValueError: anything else, with the reason."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = _npy(bytes(data)) if bytes(data[:6]) == b"\x93NUMPY" else _json(bytes(data))
    return Stored(*as_boxes(data, fmt))


_PIL_MODES = {2: "RGB", 4: "LA", 6: "RGBA"}  # (Pillow's mode of a PNG of several channels, by colour type)


def _png_mask(data: bytes, max_pixels: int) -> np.ndarray:
    """A one-channel PNG's samples as Pillow's np.array gives them: natively where the
    CPU decoder's direct path is sure of the image (_native.png_samples: walk, inflate and
    unfilter with the GIL released; taken as libpng takes it, as every PNG here is, where
    Pillow would refuse a file without IEND or with a broken chunk after the image data),
    else by Pillow itself (interlaced images, streams the direct path leaves to libpng)."""
    import io

    from PIL import Image

    from . import _native
    from .decode.png import read_png

    try:
        layout = read_png(data, max_pixels)
    except ValueError as e:
        raise ValueError(f"is not a PNG that decodes ({e})") from None
    if layout.color in _PIL_MODES:
        raise ValueError(f"is a PNG of mode {_PIL_MODES[layout.color]}: a mask has one channel a pixel (a palette or "
                         "grey PNG)")
    dtype = np.int32 if layout.depth == 16 else np.bool_ if layout.color == 0 and layout.depth == 1 else np.uint8
    out: np.ndarray = np.empty((layout.height, layout.width), dtype)
    if _native.has_png and _native.png_samples(data, max_pixels, out):  # (built with the PNG decoder)
        return out
    try:
        with Image.open(io.BytesIO(data), formats=["PNG"]) as im:
            mode = im.mode
            arr = np.array(im) if mode in _MASK_MODES else None
    except Exception as e:  # (Pillow on a stream cut short or corrupt: OSError, SyntaxError, ValueError, ...)
        raise ValueError(f"is not a PNG that decodes ({type(e).__name__}: {str(e)[:80]})") from None
    if arr is None:
        raise ValueError(f"is a PNG of mode {mode}: a mask has one channel a pixel (a palette or grey PNG)")
    return arr


class batched:
    """A field's function that takes the batch's values as one list and gives one result
    a value (a tokenizer's list form: OpenCLIP's `tokenizer(texts)` -> [N, 77], Hugging
    Face's batch encoding): `fields={"txt": gpudecode.fields.batched(tokenizer)}`. It is
    called once a batch, on the fields' thread. Where it raises, it is called again on
    each value alone, so that only the samples it fails on are their FieldErrors."""

    def __init__(self, fn: Callable[[list], Any]) -> None:
        if not callable(fn):
            raise TypeError(f"batched() takes a function, not {type(fn).__name__}")
        self.fn = fn
        self.__qualname__ = f"batched({_fn_name(fn)})"

    def __call__(self, values: list) -> Any:
        return self.fn(values)

    def __repr__(self) -> str:
        return self.__qualname__


def read_fields(specs: Sequence[FieldSpec], samples: Sequence[Any], *, sizes: Sequence[tuple[int, int]] | None = None,
                follow: tuple[Sequence[Any], Sequence[Any]] | None = None, max_pixels: int = 0,
                pool: concurrent.futures.Executor | None = None,
                on_host: bool = True) -> tuple[list[list[Any]], dict[int, FieldError]]:
    """Each field's value for each sample ([field][sample]), and the samples whose fields
    failed, by their place: {k: the FieldError of sample k} (its value there is None). A
    `batched` function runs once over the values of the samples that have not failed.
    `sizes`: the images' (height, width), which each Mask must have; `follow`: (the views'
    plans, their draws) to move the masks and boxes by (follow_targets); `max_pixels`: a
    mask's limit; `pool`: threads the masks are decoded and moved on, a part of the batch
    each (Pillow's inflate and numpy's gathers release the GIL), else here; `on_host`: the
    batch stays on the host (follow_masks)."""
    values: list[list[Any]] = [[None] * len(samples) for _ in specs]
    errors: dict[int, FieldError] = {}
    records = _records(specs, samples, sizes, errors)  # (once a sample, for its masks and boxes alike)
    for k, s in enumerate(samples):
        if k in errors:
            continue
        for f, spec in enumerate(specs):
            if spec.mask is not None:
                continue  # (below, on the pool)
            try:
                values[f][k] = v = _one(spec, s.fields, max_pixels)
                if spec.boxes is not None and k in records:  # (boxes on the image before precache stored it)
                    values[f][k] = Stored(stored_boxes(records[k], v.xyxy), v.labels)
            except _Failed as e:
                errors[k] = FieldError(str(e), shard=s.shard, key=s.key)
                errors[k].__cause__ = e.__cause__  # (a function's own exception, where one raised)
                break
    for f, spec in enumerate(specs):
        if isinstance(spec.fn, batched):
            _run_batched(spec, values[f], errors, samples)
    masked = [f for f, spec in enumerate(specs) if spec.mask is not None]
    if masked:
        def decode(part: list[int]) -> list[tuple[int, int, Any]]:
            out: list[tuple[int, int, Any]] = []
            for k in part:
                s = samples[k]
                for f in masked:
                    try:
                        v = _one(specs[f], s.fields, max_pixels)
                        if k in records:
                            v = _stored_mask(records[k], v, specs[f])
                        if sizes is not None:
                            _same_size(v, sizes[k], specs[f])
                    except _Failed as e:
                        out.append((k, f, FieldError(str(e), shard=s.shard, key=s.key)))
                        break
                    out.append((k, f, v))
            return out

        for k, f, v in _parts_on(pool, decode, [k for k in range(len(samples)) if k not in errors]):
            if isinstance(v, FieldError):
                errors[k] = v
            else:
                values[f][k] = v
    if follow is not None:
        follow_targets(specs, values, errors, samples, *follow, pool=pool, on_host=on_host)
    return values, errors


def _parts_on(pool: concurrent.futures.Executor | None, fn: Callable[[list[int]], list], rows: list[int]) -> list:
    """fn over `rows` in parts of at least 4 rows (at most 16 parts) on `pool`'s threads
    (here where there is none, or too few rows), its results joined in order."""
    parts = min(16, len(rows) // 4)
    if pool is None or parts < 2:
        return fn(rows)
    step = -(-len(rows) // parts)
    return [r for out in pool.map(fn, [rows[i:i + step] for i in range(0, len(rows), step)]) for r in out]


def _records(specs: Sequence[FieldSpec], samples: Sequence[Any], sizes: Sequence[tuple[int, int]] | None,
             errors: dict[int, FieldError]) -> dict[int, Record]:
    """Where a Mask or Boxes field follows the images: each sample's record of how precache
    stored its image (_record), by its place, checked against the image's (height, width)
    where `sizes` are known; a sample whose record is not one, or not its image's, is its
    FieldError in `errors`. Samples without a record are not in the result."""
    out: dict[int, Record] = {}
    if not any(spec.mask is not None or spec.boxes is not None for spec in specs):
        return out
    for k, s in enumerate(samples):
        data = s.fields.get(RECORD)
        if data is None:
            continue
        try:
            out[k] = image_record(data, None if sizes is None else sizes[k])
        except ValueError as e:
            errors[k] = FieldError(str(e), shard=s.shard, key=s.key)
    return out


def _stored_mask(rec: Record, mask: torch.Tensor, spec: FieldSpec) -> torch.Tensor:
    try:
        return stored_mask(rec, mask, rec.done(spec.name))  # (precache may have moved it, through some steps)
    except ValueError as e:
        raise _Failed(f"field .{spec.name} {e}") from None


def _same_size(mask: torch.Tensor, size: tuple[int, int], spec: FieldSpec) -> None:
    h, w = (int(v) for v in size)
    if tuple(mask.shape) != (h, w):
        raise _Failed(f"field .{spec.name} is a mask of {mask.shape[0]}x{mask.shape[1]}, its image {h}x{w}: a "
                      "mask has its image's size")


@dataclass(frozen=True)
class _Geometry:
    """A view's moves for a batch: the kernel's geometry columns [N, GEOM], each image's
    place on its canvas (transforms.masks.places; None without a canvas step), the output
    size (h, w), each image's warps before the geometry and after it (drawn_warps; None
    where there are none)."""

    geom: np.ndarray
    placed: np.ndarray | None
    out_size: Any  # (h, w); int64 [N, 2] where each image has its own (ragged=True)
    before: list | None = None
    after: list | None = None
    crops: list[dict] | None = None  # each image's draws, where its crop was drawn from its boxes (RandomIoUCrop)
    mirror: tuple[bool, bool] = (False, False)  # the plan's: a flip before the geometry (masks.mask_indices)
    cropped: Any = False  # the plan's rrc (one an image with a choice): a crop resized, the boxes clamped to it


def follow_targets(specs: Sequence[FieldSpec], values: list[list[Any]], errors: dict[int, FieldError],
                   samples: Sequence[Any], plans: Sequence[Any], draws: Sequence[Any], *,
                   pool: concurrent.futures.Executor | None = None, on_host: bool = True) -> None:
    """Each Mask's and Boxes' values (as decoded) replaced by their moves under each view's
    plan and draws (one draw a sample, in order): follow_masks, follow_boxes, from each
    view's geometry, worked out once."""
    if not len(samples) or not any(spec.mask is not None or spec.boxes is not None for spec in specs):
        return
    views = [_Geometry(d.encode()[0], places(plan, d), d.out_sizes() if plan.ragged else plan.output_size(d.sizes),
                       *drawn_warps(plan, d),
                       crops=d.dicts() if plan.reads_boxes else None, mirror=plan.masks_mirrored, cropped=crops_resized(plan, d))
             for plan, d in zip(plans, draws)]
    follow_masks(specs, values, errors, samples, views, pool=pool, on_host=on_host)
    follow_boxes(specs, values, errors, samples, views)


def follow_boxes(specs: Sequence[FieldSpec], values: list[list[Any]], errors: dict[int, FieldError],
                 samples: Sequence[Any], views: Sequence[_Geometry]) -> None:
    """Each Boxes field's values (decode_boxes') replaced by the sample's target, its boxes
    moved as the kernel moves its image, those too small dropped with their labels
    (transforms.boxes): all the batch's boxes in one pass a view; under several views, a
    tuple of targets, one a view."""
    for spec, column in zip(specs, values):
        boxes = spec.boxes
        if boxes is None:
            continue
        rows = [k for k in range(len(samples)) if k not in errors]
        if not rows:
            continue
        stored = [column[k] for k in rows]
        moved = [_boxes_in_view(stored, rows, view, boxes) for view in views]
        for i, k in enumerate(rows):
            column[k] = moved[0][i] if len(views) == 1 else tuple(m[i] for m in moved)


def _boxes_in_view(stored: list[Stored], rows: list[int], view: _Geometry, boxes: Boxes) -> list[dict]:
    """The targets of the samples `rows` (their boxes as read, `stored`) in one view."""
    out_size, placed = view.out_size, view.placed  # (placed: a RandomZoomOut's canvases, the boxes on them)
    counts = np.array([len(s.xyxy) for s in stored])
    if isinstance(out_size, np.ndarray):  # (each image its own output size: each box its image's)
        out_size = np.repeat(out_size[rows], counts, axis=0)
    xyxy = np.concatenate([s.xyxy for s in stored]).reshape(-1, 4)
    if placed is not None:
        xyxy = on_canvas(xyxy, np.repeat(placed[rows], counts, axis=0))
    if view.before is not None:  # (an expanded rotation's canvas)
        xyxy = warped_boxes(xyxy, counts, [view.before[k] for k in rows])
    if view.crops is not None:  # (RandomIoUCrop's: the boxes whose centres its crop leaves out, emptied)
        xyxy = np.concatenate([emptied(xyxy[start:start + n], view.crops[k])
                               for k, start, n in zip(rows, np.cumsum(counts) - counts, counts)]).reshape(-1, 4)
    moved, ok = move_boxes(xyxy, np.repeat(box_moves(view.geom, view.cropped)[rows], counts, axis=0), out_size,
                           min_size=boxes.min_size, min_area=boxes.min_area)
    if view.after is not None:  # (the program's warps, then what SanitizeBoundingBoxes keeps)
        moved = warped_boxes(moved, counts, [view.after[k] for k in rows])
        ok = kept(moved, min_size=boxes.min_size, min_area=boxes.min_area)
    out = []
    for s, start, n in zip(stored, np.cumsum(counts) - counts, counts):
        keep = np.flatnonzero(ok[start:start + n])
        out.append(target(moved[start:start + n][keep], None if s.labels is None else s.labels[keep], boxes.out_format))
    return out


def follow_masks(specs: Sequence[FieldSpec], values: list[list[Any]], errors: dict[int, FieldError],
                 samples: Sequence[Any], views: Sequence[_Geometry], *,
                 pool: concurrent.futures.Executor | None = None, on_host: bool = True) -> None:
    """Each Mask field's values (decoded masks, each its image's size) replaced by the mask
    moved as the kernel moves its image in each view (transforms.masks): a tensor [h, w],
    or a tuple of them, one a view,
    under several views; on `pool`'s threads, a part of the batch each, where given. The
    rows are written into one batch tensor a view (each value a row of it, which collate
    hands out as it is): in Mask.dtype where the batch stays on the host (`on_host`), else
    in the masks' own dtype (converted on the device, after a copy of fewer bytes). A fill
    the mask's dtype cannot hold is its sample's FieldError."""
    masked = [f for f, spec in enumerate(specs) if spec.mask is not None]
    if not masked:
        return
    # (each image its own size, ragged=True: the batch's largest, each mask at its top-left, the fill around it)
    sizes = [(int(v.out_size[:, 0].max()), int(v.out_size[:, 1].max())) if isinstance(v.out_size, np.ndarray)
             else v.out_size for v in views]
    moves = [(*mask_indices(v.geom, size, v.placed, v.mirror), v.before, v.after) for v, size in zip(views, sizes)]
    for f in masked:
        spec, column = specs[f], values[f]
        mask = known(spec.mask, "a Mask field's spec")
        rows = [k for k in range(len(samples)) if k not in errors]
        into = _batch_dtype(mask, [column[k].dtype for k in rows], on_host)
        outs = [torch.empty((len(samples), *size), dtype=into) for size in sizes] if into is not None else None
        move = functools.partial(_moved, column=column, name=spec.name, mask=mask, samples=samples, moves=moves,
                                 outs=outs)
        for k, v in _parts_on(pool, move, rows):
            if isinstance(v, FieldError):
                errors[k] = v
                column[k] = None
            else:
                column[k] = v


def _batch_dtype(mask: Mask, dtypes: list[torch.dtype], on_host: bool) -> torch.dtype | None:
    """The dtype a Mask field's batch tensor is written in (None: no batch tensor, each mask
    its own, for disagreeing() to name masks of several dtypes without Mask(dtype=)):
    Mask.dtype on the host; on the way to a device, the masks' one dtype where it holds the
    fill (collate converts the batch there, after a copy of fewer bytes), else Mask.dtype."""
    one = dtypes[0] if dtypes and dtypes.count(dtypes[0]) == len(dtypes) else None
    if mask.dtype is None or (not on_host and one is not None and fill_fits(mask.fill, one)):
        return one
    return mask.dtype


def _moved(part: list[int], *, column: list[Any], name: str, mask: Mask, samples: Sequence[Any],
           moves: Sequence[tuple[Any, ...]], outs: list[torch.Tensor] | None) -> list[tuple[int, Any]]:
    """follow_masks for the rows `part` of Mask field `name`'s column: (row, its mask moved,
    or its FieldError), each written into row k of `outs` (one a view, converted as written)
    where given."""
    out: list[tuple[int, Any]] = []
    for k in part:
        m = column[k]
        held = outs[0].dtype if outs is not None else m.dtype  # (the dtype the fill is written in)
        if not fill_fits(mask.fill, held):
            s = samples[k]
            out.append((k, FieldError(f"field .{name} is a {held} mask, which cannot hold the fill "
                                      f"{mask.fill}: give Mask(dtype=) one that does", shard=s.shard, key=s.key)))
            continue
        moved = tuple(move_mask(m, (r[k], ri[k], c[k], ci[k]), mask.fill, before and before[k], after and after[k],
                                None if outs is None else outs[v][k])
                      for v, (r, ri, c, ci, before, after) in enumerate(moves))
        out.append((k, moved[0] if len(moved) == 1 else moved))
    return out


def _run_batched(spec: FieldSpec, column: list[Any], errors: dict[int, FieldError], samples: Sequence[Any]) -> None:
    """column[k] (sample k's decoded value) replaced by its part of spec.fn's result over
    the column's values whose samples have not failed; each sample the function fails on
    alone is its FieldError."""
    fn = spec.fn
    rows = [k for k in range(len(column)) if k not in errors]
    if not rows:
        return
    try:
        result = fn([column[k] for k in rows])  # type: ignore[misc]
    except Exception:  # (one value it cannot take: each alone, each failure its sample's)
        out: list[Any] = []
        for k in rows:
            try:
                one = fn([column[k]])  # type: ignore[misc]
            except Exception as e:
                s = samples[k]
                errors[k] = FieldError(_raised(spec.name, fn, e), shard=s.shard, key=s.key)
                errors[k].__cause__ = e
                out.append(None)
            else:
                out.append(_parts(one, 1, fn)[0])
    else:
        out = _parts(result, len(rows), fn)
    for k, v in zip(rows, out):
        column[k] = v


def _raised(name: str, fn: Any, e: BaseException) -> str:
    """What a sample's FieldError says of a function of the user's that raised on it."""
    return f"field .{name}: {_fn_name(fn)} raised {type(e).__name__}: {str(e)[:120]}"


def _parts(result: Any, n: int, fn: Any) -> list[Any]:
    """A batched function's result as one value a sample: a tensor's or array's rows, a
    sequence's items.

    Raises:
        TypeError: a result that is not n values (the function's fault, not a sample's)."""
    if isinstance(result, torch.Tensor):
        parts: list[Any] = list(result.unbind(0)) if result.dim() else []
    elif isinstance(result, np.ndarray):
        parts = list(result) if result.ndim else []
    elif isinstance(result, (list, tuple)):
        parts = list(result)
    else:
        raise TypeError(f"{fn!r} gave a {type(result).__name__}: a batched function gives a tensor, an array or "
                        f"a list, one value for each of the {n} it was given")
    if len(parts) != n:
        raise TypeError(f"{fn!r} gave {len(parts)} values for the {n} it was given: a batched function gives one "
                        "for each")
    return parts


class _Failed(Exception):
    pass


def _one(spec: FieldSpec, fields: Mapping[str, Any], max_pixels: int = 0) -> Any:
    for ext in spec.exts:
        data = fields.get(ext)
        if data is None:
            continue
        try:
            if spec.mask is not None:
                return decode_mask(data, max_pixels)
            if spec.boxes is not None:
                return decode_boxes(data, spec.boxes.format)
            value = decode_member(ext, data, raw=spec.fn is not None and _last(ext) in UNSAFE)
        except ValueError as e:
            raise _Failed(f"field .{ext} {e}") from None
        if spec.fn is None or isinstance(spec.fn, batched):
            return value  # (a batched function runs on the batch's values: read_fields)
        try:
            return spec.fn(value)
        except Exception as e:  # (the caller's code: its error is this sample's, named)
            raise _Failed(_raised(ext, spec.fn, e)) from e
    raise _Failed(f"no field .{spec.name} (looked for .{', .'.join(spec.exts)})")


def _fn_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _kind(v: Any) -> Any:
    """What values batched together must share: an array's or tensor's type, shape and
    dtype; a Python number's type; None for anything else (batched as a list)."""
    if isinstance(v, torch.Tensor):
        return ("tensor", tuple(v.shape), v.dtype, v.device)
    if isinstance(v, np.ndarray):
        return ("array", v.shape, v.dtype)
    if type(v) in (bool, int, float):
        return type(v)
    if type(v) is tuple and v and all(isinstance(x, torch.Tensor) for x in v):  # (a Mask under several views)
        return ("views", *(_kind(x) for x in v))
    return None


def disagreeing(specs: Sequence[FieldSpec], values: list[list[Any]], rows: Sequence[int],
                samples: Sequence[Any]) -> dict[int, FieldError]:
    """Rows `rows` of a batch whose value of a field is not of the kind of the batch's
    first row (_kind): {row: its FieldError}."""
    bad: dict[int, FieldError] = {}
    if not rows:
        return bad
    for f, spec in enumerate(specs):
        first = _kind(values[f][rows[0]])
        if first is None:
            continue
        for k in rows[1:]:
            if k not in bad and _kind(values[f][k]) != first:
                s, s0 = samples[k], samples[rows[0]]
                bad[k] = FieldError(f"field .{spec.name} is {_said(values[f][k])}, where its batch's first sample "
                                    f"{s0.key!r} has {_said(values[f][rows[0]])}: a batch stacks one kind",
                                    shard=s.shard, key=s.key)
    return bad


def _said(v: Any) -> str:
    if isinstance(v, (torch.Tensor, np.ndarray)):
        return f"{type(v).__name__} {tuple(v.shape)} {v.dtype}"
    if type(v) is tuple and v and all(isinstance(x, torch.Tensor) for x in v):
        return "(" + ", ".join(_said(x) for x in v) + ")"
    return type(v).__name__


class Views(list):
    """A Boxes field's batch value under several views: one list of targets a view (a list
    type of its own: a field's plain batch value may be a list of lists)."""


def is_views(value: Any) -> bool:
    """Whether a field's batch value is one a view: a Mask's, one tensor a view (a batch's
    values that are tensors are stacked, never a list of them), or Boxes' (Views)."""
    return isinstance(value, Views) or (isinstance(value, list) and bool(value)
                                        and all(isinstance(v, torch.Tensor) for v in value))


def row(value: Any, k: int) -> Any:
    """Sample k's value of a field's batch value (a tensor's row, a list's item, each view's row)."""
    return [v[k] for v in value] if is_views(value) else value[k]


def _whole(values: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The batch tensor whose rows `values` are, all of its rows in order (follow_masks'),
    or None: a tensor over their one storage, which holds exactly them."""
    first = values[0]
    step = first.numel() * first.element_size()
    storage = first.untyped_storage()
    start = storage.data_ptr()
    if storage.nbytes() != len(values) * step or not all(
            v.is_contiguous() and v.untyped_storage().data_ptr() == start and v.data_ptr() == start + i * step
            for i, v in enumerate(values)):
        return None
    shape = (len(values), *first.shape)
    strides = [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape))]
    return torch.empty(0, dtype=first.dtype, device=first.device).set_(storage, 0, shape, strides)


def collate(values: Sequence[Any], device: str, dtype: torch.dtype | None = None, *, targets: bool = False) -> Any:
    """A batch's values of one field (agreeing, as disagreeing() checked): tensors and
    arrays stacked, numbers as a tensor (on `device`), anything else a list. `dtype`: a
    Mask's, its batch made so on `device` (after the copy there); `targets`: a Boxes
    field's, a list of its dicts (_targets_to)."""
    if targets:
        if len(values) and type(values[0]) is tuple:  # (Boxes under several views: a list of targets a view)
            return Views(_targets_to([v[i] for v in values], device) for i in range(len(values[0])))
        return _targets_to(values, device)
    kind = _kind(values[0]) if len(values) else None
    if kind is None:
        return list(values)
    if isinstance(kind, tuple) and kind[0] == "views":  # (a Mask under several views: a batch a view)
        return [collate([v[i] for v in values], device, dtype) for i in range(len(kind) - 1)]
    if isinstance(kind, tuple) and kind[0] == "tensor":
        out = _whole(values)  # (a Mask's batch, written in place by follow_masks: handed out as it is)
        if out is None:
            out = torch.stack(list(values))
    elif isinstance(kind, tuple):
        out = torch.from_numpy(np.stack(values))
    else:  # (Python numbers as DataLoader's default_collate makes them: float64, int64, bool)
        out = torch.tensor(list(values), dtype={float: torch.float64, int: torch.int64, bool: torch.bool}[kind])
    if device != "cpu" and out.device.type == "cpu":
        out = _to_device(out, device)
    return out if dtype is None else out.to(dtype)


def _to_device(t: torch.Tensor, device: str) -> torch.Tensor:
    """A host tensor copied to `device`: through pinned memory, without waiting, where CUDA is."""
    return t.pin_memory().to(device, non_blocking=True) if torch.cuda.is_available() else t.to(device)


def _targets_to(values: Sequence[dict[str, torch.Tensor]], device: str) -> list[dict[str, torch.Tensor]]:
    """A Boxes field's batch: its targets, each a dict of tensors, as a list on `device`
    (the batch's boxes, and its labels, each moved in one copy and handed out in parts)."""
    out = [dict(v) for v in values]
    if device == "cpu" or not out:
        return out
    for key in ("boxes", "labels"):
        have = [t for t in out if key in t]
        if not have:
            continue
        whole = _to_device(torch.cat([t[key] for t in have]), device)
        for t, part in zip(have, whole.split([len(t[key]) for t in have])):
            t[key] = part
    return out

