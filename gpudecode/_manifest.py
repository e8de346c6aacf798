"""A precache output's layout and manifest, and `verify`: what the CLI's `verify` needs,
without torch (it starts in a fraction of a second). gpudecode.precache writes them."""
from __future__ import annotations

import contextlib
import json
import os

from ._record import RECORD, read_record
from .errors import ShardWriteError
from .io.cache import file_sha256
from .io.writer import format_pattern, pattern_head
from .tensors import npy_layout

MAX_PARTS = 1000  # output shards per source shard (a pattern's number is unit * 1000 + part)


class Layout:
    """Where a run's files go: OUT a directory (shards named inside it) or a shard pattern."""

    def __init__(self, out: str | os.PathLike) -> None:
        out = os.fspath(out)
        self.out = out
        self.pattern = out if ("%" in out or "{" in out) else None
        if self.pattern is not None:
            format_pattern(self.pattern, 0)
            head = os.path.basename(pattern_head(self.pattern)).rstrip("-_.") or "shards"
            self.folder = os.path.dirname(os.path.abspath(self.pattern))
            self.state = os.path.join(self.folder, f".precache-{head}")
            self.manifest = manifest_path(self.pattern)
        else:
            self.folder = os.path.abspath(out)
            self.state = os.path.join(self.folder, ".precache")
            self.manifest = os.path.join(self.folder, "manifest.json")

    def shard(self, unit: int, part: int) -> str:
        if part >= MAX_PARTS:
            raise ValueError(f"source shard {unit} would need more than {MAX_PARTS} output shards: give a larger "
                             "--shard-size / --shard-bytes")
        if self.pattern is not None:
            return format_pattern(self.pattern, unit * MAX_PARTS + part)
        return os.path.join(self.folder, f"shard-{unit:06d}-{part:03d}.tar")

    def record(self, unit: int) -> str:
        return os.path.join(self.state, f"unit-{unit:06d}.json")

    @property
    def run(self) -> str:
        return os.path.join(self.state, "run.json")


def manifest_path(pattern: str) -> str:
    """`out/train-%06d.tar` -> `out/train-manifest.json`."""
    head = pattern_head(pattern)
    return head + "manifest.json" if head.endswith(("-", "_", "/")) or not head else head + "-manifest.json"


def write_json_atomic(path: str, doc: dict) -> None:
    """Writes `doc` to `path` through a temporary name and a rename.

    Raises:
        ShardWriteError: it could not be written (names the path; nothing partial is left).
    """
    tmp = f"{path}.{os.getpid()}.partial"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ShardWriteError(f"cannot write {os.path.basename(path)}: {e.strerror or e}", shard=path) from e


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as f:
            doc = json.load(f)
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return None


def verify(out: str | os.PathLike, *, checksums: bool = True) -> list[str]:
    """Checks a precache output against its manifest: every shard present, with its size,
    sha256 (unless `checksums` is False) and sample count, no key twice in a shard, every
    sample's pixels a valid array of the stored shape, and of the size its record (where it
    has one: _record) says it was stored at; the counts add up to the manifest's
    total; no shard in the folder that the manifest does not list. Returns the problems
    found (empty: all good)."""
    from .io.reader import Failure, iter_shard

    layout = Layout(out)
    doc = _read_json(layout.manifest)
    if doc is None:
        return [f"no readable manifest at {layout.manifest}"]
    problems: list[str] = []
    shape = doc.get("pixels", {}).get("shape")
    most = doc.get("pixels", {}).get("shorter_side_at_most")
    listed = set()
    for s in doc.get("shards", []):
        path = os.path.join(layout.folder, s["path"])
        listed.add(os.path.abspath(path))
        if not os.path.isfile(path):
            problems.append(f"{s['path']}: missing")
            continue
        if os.path.getsize(path) != s["bytes"]:
            problems.append(f"{s['path']}: {os.path.getsize(path)} bytes, the manifest says {s['bytes']}")
            continue
        if checksums and file_sha256(path) != s["sha256"]:
            problems.append(f"{s['path']}: sha256 differs from the manifest's")
            continue
        count = 0
        keys: set[str] = set()
        for item in iter_shard(path, on_error="skip"):  # (every member: a record may name one moved, from any run)
            if isinstance(item, Failure):
                problems.append(f"{s['path']}: {item.error}")
                break
            count += 1
            if item.key in keys:
                problems.append(f"{s['path']}: sample {item.key!r} twice")
            keys.add(item.key)
            try:
                h, w, _ = npy_layout(item.fields.get("npy", b""))
            except ValueError as e:
                problems.append(f"{s['path']}: sample {item.key!r}: {e}")
                continue
            record = item.fields.get(RECORD)
            try:
                rec = None if record is None else read_record(record)
            except ValueError as e:
                problems.append(f"{s['path']}: sample {item.key!r}: member .{RECORD} {e}")
                continue
            stored = None if rec is None else rec.size
            for name, steps in rec.moved if rec is not None else ():
                said, size = rec.size_after(steps), _plane_size(item.fields.get(name))  # type: ignore[union-attr]
                if size != said:
                    problems.append(f"{s['path']}: sample {item.key!r}: member .{name} is "
                                    f"{'x'.join(map(str, size)) if size else 'missing or not a PNG or .npy'}, its "
                                    f".{RECORD} says it was moved to {said[0]}x{said[1]}")
            if stored is not None and stored != (h, w):
                problems.append(f"{s['path']}: sample {item.key!r} is {h}x{w}, its .{RECORD} says {stored[0]}x{stored[1]}")
            elif shape is not None and [h, w, 3] != list(shape):
                problems.append(f"{s['path']}: sample {item.key!r} is {h}x{w}, the manifest says {shape[0]}x{shape[1]}")
            elif most is not None and min(h, w) > most:
                problems.append(f"{s['path']}: sample {item.key!r} is {h}x{w}, over the stored size {most}")
        if count != s["samples"]:
            problems.append(f"{s['path']}: {count} samples, the manifest says {s['samples']}")
    total = sum(int(s.get("samples", 0)) for s in doc.get("shards", []))
    if total != doc.get("samples"):
        problems.append(f"the shards' counts add up to {total} samples, the manifest says {doc.get('samples')}")
    if os.path.isdir(layout.folder):
        extra = []
        for n in sorted(os.listdir(layout.folder)):
            p = os.path.abspath(os.path.join(layout.folder, n))
            if n.endswith(".tar") and p not in listed and (layout.pattern is None or _matches(layout, n)):
                extra.append(n)
        problems += [f"{n}: a shard the manifest does not list (another run's?)" for n in extra]
    return problems


def _plane_size(data: bytes | None) -> tuple[int, int] | None:
    """A mask member's (height, width) from its header (a PNG's IHDR, an .npy's shape [H,
    W]), or None where it is neither."""
    import struct

    if data is None:
        return None
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24 and data[12:16] == b"IHDR":
        w, h = struct.unpack(">II", data[16:24])
        return int(h), int(w)
    if data[:6] == b"\x93NUMPY":
        import io

        import numpy as np

        try:
            fp = io.BytesIO(data)
            version = np.lib.format.read_magic(fp)
            read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            shape = read[version](fp)[0]
        except Exception:  # (numpy's header parser: ValueError, SyntaxError, TypeError, EOFError ...; KeyError)
            return None
        return (int(shape[0]), int(shape[1])) if len(shape) == 2 else None
    return None


def _matches(layout: Layout, name: str) -> bool:
    head = os.path.basename(pattern_head(layout.pattern or ""))
    return name.startswith(head)
