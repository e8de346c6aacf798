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


def _groups(root: Path) -> tuple[dict[str, dict[str, list[Path]]], dict[str, int]]:
    """The shards and small files under `root`, by format where `root` is a `gpudecode
    bench make-data` dataset (shards/<fmt>, files/<fmt>), else as one group."""
    import json

    desc = root / "dataset.json"
    if desc.is_file():
        doc = json.loads(desc.read_text())
        groups = {f: {"shards": sorted((root / "shards" / f).glob("*.tar")),
                      "files": sorted(p for p in (root / "files" / f).rglob("*") if p.is_file())}
                  for f in doc.get("formats", [])}
        return groups, {f: int(doc["count"]) for f in groups}
    shards, files = [], []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            if p.suffix == ".tar":
                shards.append(p)
            elif p.suffix not in _SKIP:
                files.append(p)
    counts = {}
    if shards:  # how many images the shards hold (their headers, read once), for img/s
        from ..io.reader import ShardReader

        counts["all"] = ShardReader([str(p) for p in shards], shuffle=False, rank=0, world_size=1).total_samples
    return {"all": {"shards": shards, "files": files}}, counts


def _loader_epoch(source: str, threads: int, batch: int) -> tuple[float, int]:
    """One epoch of a gpudecode Loader (CPU, the training transforms at 224) over
    `source`: seconds and images."""
    from .. import Loader
    from .. import transforms as T

    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    loader = Loader(source, batch_size=batch, transform=tf, device="cpu", num_workers=threads, seed=0)
    t = time.perf_counter()
    n = sum(b.images.shape[0] for b in loader)
    return time.perf_counter() - t, n


def _loader_rows(root: Path, mode: str, groups: dict, threads: int, batch: int) -> list[dict]:
    """A make-data dataset's images through the whole Loader, from its shards and from its
    ImageFolder tree of files (read as they lie): what sharding buys end to end."""
    rows: list[dict] = []
    for fmt in ("jpg", "png"):
        tree = root / "files" / fmt
        if fmt not in groups or not tree.is_dir() or not groups[fmt]["shards"]:
            continue
        for access, source, paths in (("Loader, shards", str(root / "shards" / fmt), groups[fmt]["shards"]),
                                      ("Loader, files", str(tree), sorted(p for p in tree.rglob("*") if p.is_file()))):
            # an untimed epoch first: the kernel loaded, shard counts taken (and, warm, the pages cached)
            _loader_epoch(source, threads, batch)
            if mode == "cold":
                _drop(paths)
            dt, n = _loader_epoch(source, threads, batch)
            total = sum(p.stat().st_size for p in paths)
            rows.append({"tier": f"local disk ({mode})", "format": fmt, "access": access, "cache": "none",
                         "files": len(paths), "images": n, "bytes": total, "seconds": dt,
                         "mb_per_s": total / dt / 1e6 if dt > 0 else float("inf"),
                         "img_per_s": n / dt if dt > 0 else float("inf")})
    return rows


def run_io(path: str | os.PathLike, out: str | os.PathLike, *, block: int = 1 << 20, max_files: int = 20000,
           seed: int = 0, tiers: bool = False, threads: int = 8, link_mb_s: float = 100.0,
           first_byte_ms: float = 20.0, nfs_latency_ms: float = 1.0, tier_files: int = 512,
           loader_threads: int = 2, loader_batch: int = 32) -> dict:
    """Measures the .tar shards and the other files under `path` (per format for a
    make-data dataset) on the local disk, cold and warm; with `tiers`, also on the
    object-store and NFS stand-ins of gpudecode.bench.tiers. For a make-data dataset, its
    JPEG and PNG images also go through the whole Loader (`loader_threads`, the training
    transforms at 224) from the shards and from the files as they lie, cold and warm.
    Writes io.json, io.md and io.png into `out`.

    Raises:
        ValueError: `path` holds neither shards nor files.
    """
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"{root} is not a directory")
    groups, samples = _groups(root)
    if not any(g["shards"] or g["files"] for g in groups.values()):
        raise ValueError(f"{root} holds no shards and no files to read")
    rng = random.Random(seed)
    for g in groups.values():
        rng.shuffle(g["files"])
        g["files"] = g["files"][:max_files]
    rows: list[dict] = []
    for mode in ("cold", "warm"):
        for fmt, g in groups.items():
            for access, paths in (("shards", g["shards"]), ("small files", g["files"])):
                if not paths:
                    continue
                if mode == "cold":
                    _drop(paths)
                dt, total = _read_all(paths, block)
                n = len(paths) if access == "small files" else samples.get(fmt, 0)
                rows.append({"tier": f"local disk ({mode})", "format": fmt, "access": access, "cache": "none",
                             "files": len(paths), "images": n, "bytes": total, "seconds": dt,
                             "mb_per_s": total / dt / 1e6 if dt > 0 else float("inf"),
                             "img_per_s": n / dt if dt > 0 else float("inf")})
        if (root / "dataset.json").is_file():
            rows += _loader_rows(root, mode, groups, loader_threads, loader_batch)
    settings: dict = {"block": block, "loader_threads": loader_threads}
    if tiers:
        from .tiers import Link, run_tiers

        link = Link(link_mb_s, first_byte_ms)
        settings.update({"threads": threads, "link_mb_s": link_mb_s, "first_byte_ms": first_byte_ms,
                         "nfs_latency_ms": nfs_latency_ms, "tier_files": tier_files})
        rows += run_tiers(groups, root, threads=threads, link=link, nfs_latency_ms=nfs_latency_ms,
                          max_files=tier_files, samples=samples)
    doc = {"command": "io", "machine": machine(), "path": str(root), "settings": settings, "rows": rows}
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    write_json(outdir / "io.json", doc)
    md = markdown(doc)
    (outdir / "io.md").write_text(md + "\n")
    doc["markdown"] = md
    try:
        from .. import plots

        doc["plots"] = [plots.io_figure(doc, outdir / "io.png")]
        write_json(outdir / "io.json", doc)
    except ImportError as e:
        doc["plots"] = f"no plots: {e}"
    return doc


def markdown(doc: dict) -> str:
    st = doc["settings"]
    head = f"{doc['path']}: reads of {st['block'] // 1024} KiB on the local disk"
    if "threads" in st:
        head += (f"; object-store stand-in: HTTP on 127.0.0.1 at {st['link_mb_s']:g} MB/s per connection, "
                 f"{st['first_byte_ms']:g} ms to the first byte; NFS stand-in: {st['nfs_latency_ms']:g} ms per "
                 f"request (open, each 1 MiB read); {st['threads']} concurrent reads; at most "
                 f"{st['tier_files']} small files per format on the stand-ins")
    rows = [[r["tier"], r["format"], r["access"], r["cache"], r["images"], float(r["bytes"]) / 1e6, r["mb_per_s"],
             r["img_per_s"] if r["images"] else None] for r in doc["rows"]]
    return head + "\n\n" + table(["tier", "format", "access", "cache", "images", "MB", "MB/s", "img/s"], rows)
