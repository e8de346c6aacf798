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

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from .errors import FieldError
from .io.members import split_exts
from .labels import parse_text_int

__all__ = ["FieldSpec", "batched", "field_specs", "read_fields", "disagreeing", "collate"]

TEXT = frozenset({"txt", "text", "transcript"})
INTS = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})
JSON = frozenset({"json", "jsn"})
UNSAFE = frozenset({"pickle", "pyd", "pkl", "pth", "pt"})
_MAX_JSON_DEPTH = 64


@dataclass(frozen=True)
class FieldSpec:
    """One field: the member extensions tried in order (the first present is read), and
    the function run on its decoded value (None: the value as decoded)."""

    exts: tuple[str, ...]
    fn: Callable[[Any], Any] | None = None

    @property
    def name(self) -> str:
        return ";".join(self.exts)


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
            if isinstance(x, dict):
                nxt.extend(x.values())
            elif isinstance(x, list):
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


def read_fields(specs: Sequence[FieldSpec], samples: Sequence[Any]) -> tuple[list[list[Any]], dict[int, FieldError]]:
    """Each field's value for each sample ([field][sample]), and the samples whose fields
    failed, by their place: {k: the FieldError of sample k} (its value there is None). A
    `batched` function runs once over the values of the samples that have not failed."""
    values: list[list[Any]] = [[None] * len(samples) for _ in specs]
    errors: dict[int, FieldError] = {}
    for k, s in enumerate(samples):
        for f, spec in enumerate(specs):
            try:
                values[f][k] = _one(spec, s.fields)
            except _Failed as e:
                errors[k] = FieldError(str(e), shard=s.shard, key=s.key)
                errors[k].__cause__ = e.__cause__  # (a function's own exception, where one raised)
                break
    for f, spec in enumerate(specs):
        if isinstance(spec.fn, batched):
            _run_batched(spec, values[f], errors, samples)
    return values, errors


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


def _one(spec: FieldSpec, fields: Mapping[str, Any]) -> Any:
    for ext in spec.exts:
        data = fields.get(ext)
        if data is None:
            continue
        try:
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
    return type(v).__name__


def collate(values: Sequence[Any], device: str) -> Any:
    """A batch's values of one field (agreeing, as disagreeing() checked): tensors and
    arrays stacked, numbers as a tensor (on `device`), anything else a list."""
    kind = _kind(values[0]) if len(values) else None
    if kind is None:
        return list(values)
    if isinstance(kind, tuple) and kind[0] == "tensor":
        out = torch.stack(list(values))
    elif isinstance(kind, tuple):
        out = torch.from_numpy(np.stack(values))
    else:  # (Python numbers as DataLoader's default_collate makes them: float64, int64, bool)
        out = torch.tensor(list(values), dtype={float: torch.float64, int: torch.int64, bool: torch.bool}[kind])
    if device != "cpu" and out.device.type == "cpu":
        out = out.pin_memory().to(device, non_blocking=True) if torch.cuda.is_available() else out.to(device)
    return out
