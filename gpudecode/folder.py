"""`gpudecode shard`: an ImageFolder tree (one subfolder per class) into shuffled shards."""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from . import _native
from .io.writer import ShardWriter, format_pattern

_PIL_EXT = {"WEBP": "webp", "GIF": "gif", "BMP": "bmp", "TIFF": "tiff"}


@dataclass
class ShardReport:
    shards: list[str]
    written: int
    classes: dict[str, int]
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    class_index: str = ""


def image_extension(data: bytes) -> str | None:
    """The extension a sample should carry for these bytes, by content (a PNG named
    .jpg is stored as .png); None if it is not an image."""
    try:
        fmt = _native.probe(data)["format"]
        return "jpg" if fmt == "jpeg" else "png"
    except ValueError:
        pass
    import io

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.verify()
            return _PIL_EXT.get(im.format or "")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        return None


def shard_folder(src: str | os.PathLike, pattern: str, *, shard_size: int = 1000, seed: int = 0,
                 progress: bool = True) -> ShardReport:
    """Packs `src/<class>/<file>` into shards of `shard_size` samples (`<key>.jpg|png` +
    `<key>.cls`), in a shuffled order fixed by `seed`, and writes `classes.json`
    ({class name: index}, classes sorted by name as torchvision's ImageFolder does)
    beside the shards. Files that are not images are reported, not packed."""
    src = Path(src)
    if not src.is_dir():
        raise FileNotFoundError(f"{src} is not a directory")
    format_pattern(pattern, 0)
    classes = sorted(d.name for d in src.iterdir() if d.is_dir())
    if not classes:
        raise ValueError(f"{src} has no class subfolders")
    index = {c: i for i, c in enumerate(classes)}
    files = [(p, index[c]) for c in classes for p in sorted((src / c).rglob("*")) if p.is_file()]
    random.Random(seed).shuffle(files)
    report = ShardReport([], 0, index)
    from tqdm import tqdm

    with ShardWriter(pattern, maxcount=shard_size) as w:
        for path, label in tqdm(files, desc="shard", unit="img", disable=not progress):
            data = path.read_bytes()
            ext = image_extension(data)
            if ext is None:
                report.rejected.append((str(path), "not an image"))
                continue
            w.write({"__key__": f"{report.written:09d}", ext: data, "cls": str(label)})
            report.written += 1
    report.shards = w.shards
    out_dir = Path(format_pattern(pattern, 0)).parent
    report.class_index = str(out_dir / "classes.json")
    Path(report.class_index).write_text(json.dumps(index, indent=1))
    return report
