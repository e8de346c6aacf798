"""The record precache writes beside an image it resizes or cuts (the member RECORD):
the size the sample's other members were made for, then each step (a resize, a centre
cut), and the members precache moved onto the stored image itself (`precache(masks=)`),
with the steps each has been through. Here, at the foundation, so that the manifest's check (verify) and the transforms
(transforms.stored: the moves of a mask and of boxes by it) both read it; a record is a
shard's data, read as untrusted."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

RECORD = "gpudecode.json"  # the member (extension) of a sample's record
_VERSION = 1
_MAX_STEPS = 16  # steps a record may hold
_MAX_SIDE = (1 << 31) - 1
_MAX_BYTES = 4096
_MAX_NAME = 64  # a moved member's name (its extension in the sample)


@dataclass(frozen=True)
class Record:
    """How a stored image was made from the image its sample's other members lie on:
    `source` (height, width), then `steps`, each ("resize", h, w) (torchvision's Resize to
    exactly (h, w)) or ("crop", h, w) (CenterCrop: cut, or zero-padded where smaller);
    `moved`: (member, n) for each member precache moved itself, through the first n steps
    (all of them where it moved it last), sorted by name."""

    source: tuple[int, int]
    steps: tuple[tuple[str, int, int], ...]
    moved: tuple[tuple[str, int], ...] = ()

    def done(self, member: str) -> int:
        """How many of the steps `member` has been through already (0: it is as it came)."""
        return dict(self.moved).get(member, 0)

    def size_after(self, n: int) -> tuple[int, int]:
        """The image's (height, width) after its first n steps."""
        return (self.steps[n - 1][1], self.steps[n - 1][2]) if n else self.source

    def with_moved(self, members: Any) -> "Record":
        """This record with `members` moved through every step."""
        moved = dict(self.moved)
        moved.update((m, len(self.steps)) for m in members)
        return Record(self.source, self.steps, tuple(sorted(moved.items())))

    @property
    def size(self) -> tuple[int, int]:
        """The stored image's (height, width)."""
        return (self.steps[-1][1], self.steps[-1][2]) if self.steps else self.source

    def then(self, resize: tuple[int, int] | None, cut: tuple[int, int] | None) -> "Record":
        """This record with a further downsizing (resize, then centre cut) after it."""
        more = [("resize", *resize)] if resize is not None else []
        if cut is not None:
            more.append(("crop", *cut))
        return Record(self.source, (*self.steps, *more), self.moved)

    def member(self) -> bytes:
        """The record as the member precache writes (compact JSON)."""
        doc: dict[str, Any] = {"version": _VERSION, "from": list(self.source),
                               "steps": [{op: [h, w]} for op, h, w in self.steps]}
        if self.moved:
            doc["moved"] = dict(self.moved)
        return json.dumps(doc, separators=(",", ":")).encode()


def made(height: int, width: int, resize: tuple[int, int] | None, cut: tuple[int, int] | None,
         earlier: Record | None = None) -> Record | None:
    """The record of an image of (height, width) downsized by (resize, cut) (downsizing's),
    after `earlier` (the record it came with: an image stored once already); None where
    the image is kept as it is and came with none."""
    if resize is None and cut is None:
        return earlier
    if earlier is None:
        earlier = Record((int(height), int(width)), ())
    return earlier.then(resize, cut)


def read_record(data: Any) -> Record:
    """A sample's RECORD member, checked (it is a shard's data, read as untrusted).

    Raises:
        ValueError: not a record this version reads, with the reason."""
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) > _MAX_BYTES:
        raise ValueError(f"is not a record of how its image was stored (not JSON bytes of at most {_MAX_BYTES})")
    try:
        doc = json.loads(bytes(data))
    except (ValueError, RecursionError):
        raise ValueError("is not a record of how its image was stored (not JSON)") from None
    if not isinstance(doc, dict) or set(doc) - {"moved"} != {"version", "from", "steps"}:
        raise ValueError('is not a record of how its image was stored ({"version", "from", "steps"}, and "moved")')
    if doc["version"] != _VERSION or isinstance(doc["version"], bool):
        raise ValueError(f"is a record of version {doc['version']!r}: this gpudecode reads version {_VERSION}")
    source = _size(doc["from"], "from")
    steps = doc["steps"]
    if not isinstance(steps, list) or len(steps) > _MAX_STEPS:
        raise ValueError(f"is a record whose steps are not a list of at most {_MAX_STEPS}")
    out = []
    for step in steps:
        if not isinstance(step, dict) or len(step) != 1 or next(iter(step)) not in ("resize", "crop"):
            raise ValueError(f'is a record with a step {str(step)[:40]}: a step is {{"resize": [h, w]}} or '
                             '{"crop": [h, w]}')
        (op, size), = step.items()
        out.append((op, *_size(size, op)))
    return Record(source, tuple(out), _moved(doc.get("moved", {}), len(out)))


def _moved(v: Any, steps: int) -> tuple[tuple[str, int], ...]:
    """A record's "moved": {member: the steps it has been through, 1..steps}, at most
    _MAX_STEPS members, each a name a sample's member may have."""
    if not isinstance(v, dict) or len(v) > _MAX_STEPS:
        raise ValueError(f"is a record whose moved is not a mapping of at most {_MAX_STEPS} members")
    for name, n in v.items():
        if (not name or len(name) > _MAX_NAME or not all(c.isascii() and (c.isalnum() or c in "._-") for c in name) or name[0] == "."
                or name == RECORD):
            raise ValueError(f"is a record that moved a member named {name[:40]!r}, not a member's name")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= steps:
            raise ValueError(f"is a record that moved .{name} through {str(n)[:20]} steps, not 1 to its {steps}")
    return tuple(sorted(v.items()))


def image_record(data: Any, size: tuple[int, int] | None) -> Record:
    """read_record of a sample's member, its stored size checked against the image's
    (height, width) `size` where given.

    Raises:
        ValueError: not a record, or not this image's, the member named."""
    try:
        rec = read_record(data)
    except ValueError as e:
        raise ValueError(f"member .{RECORD} {e}") from None
    if size is None:
        return rec
    h, w = int(size[0]), int(size[1])
    if rec.size != (h, w):
        raise ValueError(f"member .{RECORD} says its image was stored at {rec.size[0]}x{rec.size[1]}, the image is "
                         f"{h}x{w}: the record is not this image's")
    return rec


def _size(v: Any, what: str) -> tuple[int, int]:
    if (not isinstance(v, list) or len(v) != 2 or any(isinstance(x, bool) or not isinstance(x, int) for x in v)
            or not all(1 <= x <= _MAX_SIDE for x in v)):
        raise ValueError(f"is a record whose {what} is {str(v)[:40]}, not a size [height, width]")
    return int(v[0]), int(v[1])
