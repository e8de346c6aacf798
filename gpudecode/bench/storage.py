"""`gpudecode bench io PATH`: read bandwidth where the data lives — sequential reads of
whole shards (large reads, in order) against random reads of small files (one open and
read per image, in random order): why shards.

Each is measured cold (every file first dropped from the page cache with
POSIX_FADV_DONTNEED; best effort: a cache below the file system, such as a VM host's,
may still serve it) and warm (the same reads again, from the page cache)."""
from __future__ import annotations

import os
import random
import time
from pathlib import Path

from .common import machine, table, write_json

_SKIP = {".json", ".md", ".png", ".txt"}


def _drop(paths: list[Path]) -> None:
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fdatasync(fd)  # pages written lately are dirty, and a dirty page is not dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except (OSError, AttributeError):
            pass
        finally:
            os.close(fd)


def _read_all(paths: list[Path], block: int) -> tuple[float, int]:
    buf = bytearray(block)
    view = memoryview(buf)
    total = 0
    t = time.perf_counter()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                n = f.readinto(view)
                if not n:
                    break
                total += n
    return time.perf_counter() - t, total


def run_io(path: str | os.PathLike, out: str | os.PathLike, *, block: int = 1 << 20, max_files: int = 20000,
           seed: int = 0) -> dict:
    """Measures the .tar shards and the other files under `path`; writes io.json, io.md
    and io.png into `out`.

    Raises:
        ValueError: `path` holds neither shards nor files.
    """
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"{root} is not a directory")
    shards, files = [], []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            if p.suffix == ".tar":
                shards.append(p)
            elif p.suffix not in _SKIP:
                files.append(p)
    if not shards and not files:
        raise ValueError(f"{root} holds no shards and no files to read")
    random.Random(seed).shuffle(files)
    files = files[:max_files]
    results: dict[str, dict] = {}
    for mode in ("cold", "warm"):
        for kind, paths, blk in (("sequential shard reads", shards, block), ("random small-file reads", files, block)):
            if not paths:
                continue
            if mode == "cold":
                _drop(paths)
            dt, total = _read_all(paths, blk)
            results[f"{mode}: {kind}"] = {"mode": mode, "kind": kind, "files": len(paths), "bytes": total,
                                          "seconds": dt, "mb_per_s": total / dt / 1e6 if dt > 0 else float("inf"),
                                          "files_per_s": len(paths) / dt if dt > 0 else float("inf")}
    doc = {"command": "io", "machine": machine(), "path": str(root), "block": block, "results": results}
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    write_json(outdir / "io.json", doc)
    md = (f"{root}: {len(shards)} shards, {len(files)} small files; reads of {block // 1024} KiB\n\n"
          + table(["mode", "access", "files", "MB", "MB/s", "files/s"],
                  [[r["mode"], r["kind"], r["files"], float(r["bytes"]) / 1e6, r["mb_per_s"], r["files_per_s"]]
                   for r in results.values()]))
    (outdir / "io.md").write_text(md + "\n")
    doc["markdown"] = md
    try:
        from . import plots

        doc["plots"] = [plots.io_figure(doc, outdir / "io.png")]
        write_json(outdir / "io.json", doc)
    except ImportError as e:
        doc["plots"] = f"no plots: {e}"
    return doc
