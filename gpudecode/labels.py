"""Class labels of samples: one strict rule for every label field.

A label is an integer that fits int64:
- `.json`: an object whose "label" is a JSON integer (`{"label": 7}`); floats (`7.0`,
  `1e400`), booleans, strings and anything nested deeper are refused;
- any other extension (`.cls`, `.label`, ...): the integer as ASCII text, optionally
  signed, with surrounding whitespace (`b"7\\n"`); `3.7`, `true`, `1_000` are refused.
Everything else is a `LabelError` naming shard and key; nothing is rounded or coerced.
A `.json` with the key "label" twice is refused (JSON parsers keep the last silently). A
negative label is refused unless allowed: -1 and -100 are CrossEntropyLoss's ignore_index
(the sample would train on nothing); with `num_classes`, a label must be below it.
"""
from __future__ import annotations

import json
import re
from typing import Sequence

from .errors import LabelError

_INT64 = (-(1 << 63), (1 << 63) - 1)
_TEXT_INT = re.compile(rb"\s*[+-]?[0-9]+\s*")
_MAX_TEXT = 64  # a label longer than this is not an int64


def _refuse(why: str, shard: str, key: str) -> LabelError:
    return LabelError(why, shard=shard, key=key)


def parse_label(fields: dict[str, bytes], label_exts: Sequence[str], *, shard: str, key: str,
                allow_negative: bool = False, num_classes: int | None = None) -> int:
    """The label of a sample: the first of `label_exts` present in `fields`.

    Raises:
        LabelError: no label field, one that is not an int64 integer, a negative one
            (unless `allow_negative`), or one not below `num_classes` (names shard and key).
    """
    for ext in label_exts:
        data = fields.get(ext)
        if data is None:
            continue
        if ext == "json":
            value = _json_label(data, shard, key)
        else:
            try:
                value = parse_text_int(data, fits=False)
            except ValueError as e:
                raise _refuse(f"label .{ext} {e}", shard, key) from None
        if not _INT64[0] <= value <= _INT64[1]:
            raise _refuse(f"label .{ext} = {value} does not fit int64", shard, key)
        if value < 0 and not allow_negative:
            raise _refuse(f"label .{ext} = {value} is negative (-1 and -100 are CrossEntropyLoss's ignore_index: "
                          "the sample would train on nothing); allow_negative_labels=True takes such labels", shard, key)
        if num_classes is not None and value >= num_classes:
            raise _refuse(f"label .{ext} = {value} is not below num_classes={num_classes}", shard, key)
        return value
    raise _refuse(f"no label (looked for .{', .'.join(label_exts)})", shard, key)


def parse_text_int(data: bytes, *, fits: bool = True) -> int:
    """An integer written as ASCII text (optionally signed, surrounded by whitespace: the
    module doc's rule), fitting int64 where `fits`.

    Raises:
        ValueError: not such an integer ("is not an integer: ..."), or one over int64."""
    if len(data) > _MAX_TEXT or _TEXT_INT.fullmatch(data) is None:
        raise ValueError(f"is not an integer: {bytes(data[:40])!r}")
    value = int(data)
    if fits and not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"= {value} does not fit int64")
    return value


class _Repeated(Exception):
    pass


def _no_repeated_label(pairs: list) -> dict:
    if sum(1 for k, _ in pairs if k == "label") > 1:
        raise _Repeated
    return dict(pairs)


def _json_label(data: bytes, shard: str, key: str) -> int:
    try:
        doc = json.loads(data, object_pairs_hook=_no_repeated_label)
    except _Repeated:
        raise _refuse('label .json has the key "label" more than once (which one is meant?)', shard, key) from None
    except (ValueError, RecursionError, MemoryError) as e:  # bad JSON, huge ints, deep nesting
        raise _refuse(f"label .json is not valid JSON ({type(e).__name__}: {str(e)[:80]})", shard, key) from e
    if not isinstance(doc, dict) or "label" not in doc:
        raise _refuse('label .json has no "label" (expected {"label": <integer>})', shard, key)
    value = doc["label"]
    if type(value) is not int:  # bool is an int subclass: refused too
        raise _refuse(f'label .json "label" is not an integer: {str(value)[:40]!r} ({type(value).__name__})',
                      shard, key)
    return value
