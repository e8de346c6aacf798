"""`gpudecode shard`: an ImageFolder tree (one subfolder per class) into shuffled shards."""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from . import _native
from .decode._base import pillow_formats
from .errors import ShardReadError
from .io.files import IMG_EXTENSIONS, class_files, find_classes, is_image_file, path_key, read_file, warn_loops
from .io.writer import ShardWriter, format_pattern, pattern_head, written_by

_PIL_EXT = {"JPEG": "jpg", "WEBP": "webp", "GIF": "gif", "BMP": "bmp", "TIFF": "tiff", "PPM": "ppm"}  # (PGM and PBM are "PPM")


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
        with Image.open(io.BytesIO(data), formats=pillow_formats()) as im:
            im.verify()
            return _PIL_EXT.get(im.format or "")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        return None


def class_index_path(pattern: str) -> str:
    """`out/train-%06d.tar` -> `out/train-classes.json`: one class index per output pattern,
    so train and val written into one folder keep their own."""
    head = pattern_head(pattern)
    if not head or head.endswith("/"):
        return head + "classes.json"
    return head.rstrip("-_.") + "-classes.json"


def class_index_beside(shard: str) -> str:
    """The class index `shard_folder` writes beside a shard it wrote: `out/train-000007.tar`
    -> `out/train-classes.json` (class_index_path of the pattern the shard's name comes from)."""
    import re

    return class_index_path(re.sub(r"[0-9]+(\.tar(?:\.gz)?)$", r"%06d\1", shard))


def shard_folder(src: str | os.PathLike, pattern: str, *, shard_size: int = 1000, seed: int = 0,
                 progress: bool = True, key: str = "seq", overwrite: bool = False) -> ShardReport:
    """Packs `src/<class>/<file>` into shards of `shard_size` samples, in a shuffled order
    fixed by `seed`. Each sample holds the image (`.jpg`/`.png`/... by content), `.cls` (the
    class index as text) and `.json` ({"path": the file's path in the tree, "label": index,
    "class": name}), so a batch's keys lead back to the files. `key`: "seq" (000000000,
    000000001, ...) or "path" (the file's path in the tree, without its extension). The
    class index ({class name: index}, classes sorted by name as torchvision's ImageFolder
    does) is written beside the shards as `<prefix>-classes.json` (see class_index_path);
    an existing one that differs is refused. Samples are the files torchvision's
    ImageFolder takes (its image extensions); the others, files that are not images by
    their bytes, symbolic links to nothing and FIFOs or devices are reported, not packed.

    An output that already holds shards of this pattern (an earlier run, whose tail a
    smaller run would leave behind) is refused; `overwrite` removes them and their class
    index first.

    Raises:
        FileNotFoundError: src is not a folder. ValueError: no class folders, a bad key
        choice, two files with the same path key, or a different class index in the way.
        FileExistsError: shards of this pattern are there already (without `overwrite`).
    """
    if key not in ("seq", "path"):
        raise ValueError(f"key must be 'seq' or 'path', not {key!r}")
    src = Path(src)
    if not src.is_dir():
        raise FileNotFoundError(f"{src} is not a directory")
    format_pattern(pattern, 0)
    classes = find_classes(str(src))
    if not classes:
        raise ValueError(f"{src} has no class subfolders")
    index = {c: i for i, c in enumerate(classes)}
    class_file = Path(class_index_path(pattern))
    old = written_by(pattern)
    if old and not overwrite:
        more = f" ... {os.path.basename(old[-1])}" if len(old) > 1 else ""
        raise FileExistsError(f"{len(old)} shard(s) of {pattern} are there from an earlier run "
                              f"({os.path.basename(old[0])}{more}): a new run would leave some of them beside its "
                              "own; remove them, or pass --overwrite (overwrite=True) to have them removed first")
    for f in old:
        os.remove(f)
    if old and class_file.exists():
        class_file.unlink()
    if class_file.exists():
        try:
            existing = json.loads(class_file.read_text())
        except ValueError:
            existing = None
        if existing != index:
            raise ValueError(f"{class_file} holds another class index (written for other shards): remove it or "
                             "write these shards under another name")
    files = []
    rejected: list[tuple[str, str]] = []
    loops: list[str] = []
    for c in classes:  # what torchvision's ImageFolder takes as samples (links followed); the rest named, not packed
        for p in map(Path, class_files(str(src / c), loops)):
            if not is_image_file(p.name):
                rejected.append((str(p), "not an image file by its extension (torchvision's ImageFolder skips it: "
                                         f"{', '.join(IMG_EXTENSIONS)})"))
            elif p.is_symlink() and not p.exists():
                rejected.append((str(p), "a symbolic link to nothing"))
            elif not p.is_file():
                rejected.append((str(p), "not a regular file (a FIFO, a device or a socket)"))
            else:
                files.append((p, index[c]))
    warn_loops(str(src), loops, "packed", stacklevel=2)
    if key == "path":
        keys: dict[str, Path] = {}
        for p, _ in files:
            k = path_key(p.relative_to(src).as_posix())
            if k in keys:
                raise ValueError(f"{p} and {keys[k]} would both have the key {k!r}")
            keys[k] = p
    random.Random(seed).shuffle(files)
    report = ShardReport([], 0, index, rejected)
    from tqdm import tqdm

    with ShardWriter(pattern, maxcount=shard_size) as w:
        for path, label in tqdm(files, desc="shard", unit="img", disable=not progress):
            try:
                data = read_file(str(path))
            except ShardReadError as e:  # unreadable, or changed into something else since the scan: named
                report.rejected.append((str(path), e.reason))
                continue
            ext = image_extension(data)
            rel = path.relative_to(src).as_posix()
            if ext is None:
                report.rejected.append((str(path), "not an image"))
                continue
            k = f"{report.written:09d}" if key == "seq" else path_key(rel)
            meta = {"path": rel, "label": label, "class": classes[label]}
            w.write({"__key__": k, ext: data, "cls": str(label), "json": json.dumps(meta)})
            report.written += 1
    report.shards = w.shards
    class_file.parent.mkdir(parents=True, exist_ok=True)
    class_file.write_text(json.dumps(index, indent=1))
    report.class_index = str(class_file)
    return report
