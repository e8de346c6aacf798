"""Image files as they lie: an ImageFolder tree, a list file of `path label` lines, or a
Python list of paths (or (path, label) pairs), read beside tar shards.

Each source becomes one *file list*: to the reader it is one more shard whose samples are
its files, counted without reading them, so ranks, DataLoader workers, `even`,
`state_dict` and `on_error` work on it as on shards. A file's sample has one image field,
named by its extension in lower case (`.JPEG` -> `jpeg`), and a `cls` field with its
label (the class index of an ImageFolder tree, the number of a list line). Its key is its
path relative to the tree (or list file) without the extension; errors name the file.

An ImageFolder tree is read as torchvision's `ImageFolder` reads it: classes are the
sorted names of the root's subfolders (class i is `classes[i]`, the same indices), every
file below a class folder with one of torchvision's image extensions (in any case) is a
sample, in torchvision's order, and a class with no image is an error. Sample i of
`Loader.dataset` is `ImageFolder(root)[i]`'s file.

Shuffling: a file list is not read in pieces like a shard: with shuffle on, its order is
a fresh permutation of every file per epoch (seed, epoch), split over ranks as
DistributedSampler splits its permutation. Without shuffle, files come in the list's order.
"""
from __future__ import annotations

import functools
import os
import random
import re
import stat
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..errors import RESOURCE_ERRNOS, LabelError, LocatedError, ShardReadError, resource_error

# torchvision.datasets.folder.IMG_EXTENSIONS
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
# the image fields a Loader (and precache) reads by default: torchvision's image extensions,
# and tensor samples (.npy) of gpudecode precache
DEFAULT_IMAGE_EXTS = ("jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "ppm", "pgm", "npy",
                      # through Pillow's AVIF and the [formats] extra's plugins (refused by name without them)
                      "avif", "heic", "heif", "jxl")
PREFIX = "files:"  # the name of a file list among shard URLs starts with this
# a list line's label, as gpudecode.labels reads a .cls member's (not Python's int(): no "1_0", no "７")
_LABEL = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class FileList:
    """Files read as samples: `paths[i]` with label `labels[i]` (None: no label) and key
    `keys[i]`. `name` stands for the list among the reader's shards; `classes` are an
    ImageFolder tree's class names (index = label)."""

    name: str
    paths: tuple[str, ...]
    labels: tuple[int | None, ...]
    keys: tuple[str, ...]
    classes: tuple[str, ...] = ()
    root: str = ""
    _exts: tuple[str, ...] = field(default=(), repr=False)
    # a made list (generated): make(i) -> (the sample's bytes, its label) instead of reading paths[i]
    make: Callable[[int], tuple[bytes, int | None]] | None = field(default=None, repr=False, compare=False)
    # a made list's recipe, (function, args) that make it again: what pickles in its place (its
    # make is a closure over the set; torch's DataLoader sends Loader.dataset to spawned workers)
    rebuild: tuple[Callable[..., Any], tuple] | None = field(default=None, repr=False, compare=False)
    # a made list's other values by name (a Hugging Face Dataset's other columns): extra(i, names)
    # -> {name: value} of those asked for (a Loader's fields=); `extra_names` lists them all
    extra: Callable[[int, frozenset[str]], dict[str, Any]] | None = field(default=None, repr=False, compare=False)
    extra_names: tuple[str, ...] = ()
    # every image has one channel (a grey set's array: MNIST's): the Loader's output then has one, as torchvision's
    grey: bool = False

    def __reduce_ex__(self, protocol: Any) -> Any:
        if self.make is not None:
            if self.rebuild is None:
                raise TypeError(f"{self.name[len(PREFIX):]}: a made list without a recipe does not pickle")
            return self.rebuild
        return super().__reduce_ex__(protocol)

    def __len__(self) -> int:
        return len(self.paths)

    def ext(self, i: int) -> str:
        return self._exts[i]

    def part(self, start: int, stop: int) -> "FileList":
        """Files start..stop-1, with their keys and labels (a precache unit)."""
        if self.make is not None:
            raise ValueError(f"{self.name} is made, not read from files: it is not cut into precache units")
        return FileList(f"{self.name}#{start}:{stop}", self.paths[start:stop], self.labels[start:stop],
                        self.keys[start:stop], self.classes, self.root, self._exts[start:stop])

    def order(self, *, shuffle: bool, seed: int, epoch: int) -> list[int]:
        """The epoch's order of the files: as listed, or a permutation from (seed, epoch)."""
        idx = list(range(len(self.paths)))
        if shuffle:
            random.Random(f"gpudecode-files:{seed}:{epoch}:{self.name}").shuffle(idx)
        return idx


def is_image_file(name: str) -> bool:
    return name.lower().endswith(IMG_EXTENSIONS)


def _split_ext(path: str) -> tuple[str, str]:
    stem, ext = os.path.splitext(path)
    return stem, ext[1:].lower()


def path_key(rel: str) -> str:
    """A sample key made of a file's path (relative, '/'-separated): the extension goes,
    and dots left in the last component (which would move the split between key and
    extension in a tar) become '_'. `gpudecode shard --key path` writes the same keys."""
    stem, _, _ = rel.rpartition(".")
    stem = stem or rel
    head, _, last = stem.rpartition("/")
    last = last.replace(".", "_")
    return f"{head}/{last}" if head else last


class _Numbered(Sequence[Any]):
    """item(i) for i in range(n), made when asked (a made list of a million samples keeps
    no million strings)."""

    def __init__(self, n: int, item: Callable[[int], Any], costly: bool = False) -> None:
        self.n, self.item, self.costly = n, item, costly  # costly: each item a sample made (made's labels)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return tuple(self.item(k) for k in range(*i.indices(self.n)))
        k = i + self.n if i < 0 else i
        if not 0 <= k < self.n:
            raise IndexError(i)
        return self.item(k)


def made(name: str, n: int, make: Callable[[int], tuple[bytes, int | None]], ext: str | Callable[[int], str], *,
         label: Callable[[int], int | None] | None = None, classes: Sequence[str] = (),
         rebuild: tuple[Callable[..., Any], tuple] | None = None, costly: bool = False,
         extra: Callable[[int, frozenset[str]], dict[str, Any]] | None = None,
         extra_names: Sequence[str] = (), grey: bool = False) -> FileList:
    """A list of `n` samples made by make(i) -> (bytes of format `ext`, label): a
    synthetic set (torchvision's FakeData) or a Hugging Face Dataset's rows read as a file
    list is, keys their numbers. `ext` a format, or ext(i) each sample's; `label`: label(i)
    where it is cheaper than make's (`costly`: it is not: it reads another made list's);
    `classes`: the labels' names; `rebuild`: (function, args) that make the list again,
    what pickles in its place; `extra`: extra(i, names), sample i's other values of
    `names` (fields=), `extra_names` all it has; `grey`: every image has one channel."""
    def made_label(i: int) -> int | None:
        return make(i)[1]

    exts = (lambda i: ext) if isinstance(ext, str) else ext
    return FileList(f"{PREFIX}{name}", _Numbered(n, lambda i: f"{name}/{i}"),  # type: ignore[arg-type]
                    _Numbered(n, label or made_label, costly or label is None),  # type: ignore[arg-type]
                    _Numbered(n, lambda i: f"{i:09d}"),  # type: ignore[arg-type]
                    tuple(classes), "", _Numbered(n, exts), make=make, rebuild=rebuild,  # type: ignore[arg-type]
                    extra=extra, extra_names=tuple(extra_names), grey=grey)


def taken(flist: FileList, indices: Sequence[int], rebuild: tuple[Callable[..., Any], tuple]) -> FileList:
    """A list's samples at `indices` (a torch Subset's, random_split's), in that order:
    sample k is flist's sample indices[k], with its label, format and key (a made list's
    keys are its new numbers); `rebuild` makes a made one again (what it pickles as).

    Raises:
        IndexError: an index out of range."""
    idx = [int(i) for i in indices]
    n, name = len(flist), flist.name[len(PREFIX):]
    bad = next((i for i in idx if not 0 <= i < n), None)
    if bad is not None:
        raise IndexError(f"index {bad} is out of range for {name} ({n} samples)")
    if flist.make is None:
        return dataclasses.replace(flist, name=f"{flist.name}[{len(idx)} of {n}]",
                                   paths=tuple(flist.paths[i] for i in idx), labels=tuple(flist.labels[i] for i in idx),
                                   keys=tuple(flist.keys[i] for i in idx), _exts=tuple(flist.ext(i) for i in idx))
    make, extra = flist.make, flist.extra
    return made(f"{name}[{len(idx)} of {n}]", len(idx), lambda k: make(idx[k]), lambda k: flist.ext(idx[k]),
                label=lambda k: flist.labels[idx[k]], classes=flist.classes, rebuild=rebuild, costly=costly_labels(flist),
                extra=None if extra is None else (lambda k, names: extra(idx[k], names)), extra_names=flist.extra_names,
                grey=flist.grey)


def costly_labels(flist: FileList) -> bool:
    """Whether each of the list's labels costs a sample made (a set read through its
    __getitem__, FakeData): not read whole before training."""
    return bool(getattr(flist.labels, "costly", False))


def shifted(flist: FileList, offset: int) -> FileList:
    """`flist` with `offset` added to its labels (a mixture Source's label_offset): a made
    list's too, whose labels its make gives."""
    if flist.make is None:
        return dataclasses.replace(flist, labels=tuple(None if v is None else v + offset for v in flist.labels))
    make = flist.make

    def moved(i: int) -> tuple[bytes, int | None]:
        data, label = make(i)
        return data, None if label is None else label + offset

    def label(i: int) -> int | None:
        v = flist.labels[i]
        return None if v is None else v + offset

    return made(flist.name[len(PREFIX):], len(flist), moved, flist.ext, label=label, classes=flist.classes,
                rebuild=(shifted, (flist, offset)), costly=costly_labels(flist), extra=flist.extra,
                extra_names=flist.extra_names, grey=flist.grey)


def _make(name: str, root: str, items: Sequence[tuple[str, int | None]], classes: Sequence[str] = (),
          given: str = "") -> FileList:
    """The list of `items` ((path, label) pairs), keys their paths under `root` (absolute;
    `given`: the same folder as its set named it, which its paths may start with)."""
    paths, labels, keys, exts = [], [], [], []
    prefixes = tuple({p.rstrip(os.sep) + os.sep for p in (root, given) if p})
    for path, label in items:
        rel = _under(path, prefixes)  # (relpath's answer by prefix where the path is plain: relpath is slow per path)
        if rel is None:
            rel = os.path.relpath(path, root) if root else path
            if ".." in Path(rel).parts:  # (a list line "../imgs/x.jpg"): no key may climb, its absolute path names it
                rel = os.path.abspath(path).lstrip(os.sep)
        paths.append(path)
        labels.append(label)
        keys.append(path_key(rel.replace(os.sep, "/")))
        exts.append(_split_ext(path)[1])
    return FileList(name, tuple(paths), tuple(labels), tuple(keys), tuple(classes), root, tuple(exts))


def _under(path: str, prefixes: tuple[str, ...]) -> str | None:
    """`path` after the folder prefix it starts with, where what follows is plain (no empty,
    "." or ".." part, no part starting with a dot, no trailing separator): what relpath
    would give; else None."""
    for pre in prefixes:
        if path.startswith(pre):
            rest = path[len(pre):]
            sep = os.sep
            if rest and not rest.startswith((".", sep)) and sep + "." not in rest and sep + sep not in rest and \
                    not rest.endswith(sep):
                return rest
    return None


def find_classes(root: str) -> list[str]:
    """torchvision's find_classes: the sorted names of root's subfolders."""
    with os.scandir(root) as it:
        return sorted(e.name for e in it if e.is_dir())


def class_files(folder: str, loops: list[str]) -> list[str]:
    """The paths of every file under a class folder (any name: the caller picks the
    images), in torchvision's ImageFolder order: its folders walked following symbolic
    links, sorted, each one's files sorted. A folder reached again through a link (a loop,
    or a second link to a folder seen) is listed once; each is added to `loops`."""
    visited: set[str] = set()
    walked = []
    for dirpath, dirnames, fnames in os.walk(folder, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in visited:  # (torchvision's ImageFolder lists its files again at each pass round a loop)
            loops.append(dirpath)
            dirnames[:] = []
            continue
        visited.add(real)
        walked.append((dirpath, fnames))
    return [os.path.join(dirpath, f) for dirpath, fnames in sorted(walked) for f in sorted(fnames)]


def warn_loops(root: str, loops: list[str], verb: str, stacklevel: int) -> None:
    """Says which folders class_files reached again through symbolic links, if any."""
    if loops:
        import warnings

        warnings.warn(f"ImageFolder tree {root}: {len(loops)} folder(s) reached again through symbolic links (e.g. "
                      f"{loops[0]}) are {verb} once, not again (torchvision's ImageFolder would list their files "
                      "again at each pass round the loop)", RuntimeWarning, stacklevel=stacklevel + 1)


def scan_tree(root: str) -> FileList:
    """An ImageFolder tree (see the module doc).

    Raises:
        ShardReadError: no class folder, or a class folder with no image.
    """
    root = os.path.abspath(root)
    classes = find_classes(root)
    if not classes:
        raise ShardReadError("is neither shards nor an ImageFolder tree: it holds no .tar/.tgz/.tar.gz shards, "
                             "no Parquet files and no class folders (an ImageFolder tree has one subfolder of images per class)",
                             shard=root)
    items: list[tuple[str, int | None]] = []
    empty = []
    loops: list[str] = []
    for index, cls in enumerate(classes):
        before = len(items)
        items.extend((f, index) for f in class_files(os.path.join(root, cls), loops) if is_image_file(f))
        if len(items) == before:
            empty.append(cls)
    warn_loops(root, loops, "read", stacklevel=3)
    if empty:
        more = f" and {len(empty) - 3} more" if len(empty) > 3 else ""
        raise ShardReadError(f"ImageFolder tree: no image in class folder(s) {', '.join(map(repr, empty[:3]))}{more} "
                             f"(images end in {', '.join(IMG_EXTENSIONS)})", shard=root)
    return _make(PREFIX + root, root, items, classes)


def looks_like_file_list(path: Path) -> bool:
    """A list file of `path label` lines (or paths of images alone), not of shard URLs:
    its first entry names an image file."""
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        return names_images(f)


def names_images(lines: Iterable[str]) -> bool:
    """Whether a list file's first entry (`lines`, comments and blank lines passed over)
    names an image file, alone or followed by a label."""
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            head = line.rsplit(None, 1)
            return is_image_file(head[0]) or (len(head) == 2 and is_image_file(line))
    return False


def read_list(path: Path) -> FileList:
    """A text file of `path label` lines (or image paths alone: no labels); relative
    paths are taken from the file's folder; `#` starts a comment line.

    Raises:
        LabelError: a line that is not `path label` with an integer label (ASCII digits).
        ShardReadError: the file names no image.
    """
    path = Path(os.path.abspath(path))
    base = str(path.parent)
    items: list[tuple[str, int | None]] = []
    with open(path, encoding="utf-8-sig") as f:  # (a byte-order mark is not part of the first path)
        for n, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.rsplit(None, 1)
            label: int | None = None
            if len(parts) == 2 and not is_image_file(line):
                if not _LABEL.fullmatch(parts[1]):  # as a .cls member is read: ASCII digits, nothing else
                    raise LabelError(f"line {n}: {line!r} is not `path label` with an integer label (ASCII digits, "
                                     "an optional sign)", shard=str(path))
                label = int(parts[1])
                line = parts[0]
            items.append((os.path.normpath(os.path.join(base, line)), label))
    if not items:
        raise ShardReadError("the list file names no image", shard=str(path))
    return _make(PREFIX + str(path), base, items)


def from_items(items: Sequence[Any]) -> FileList:
    """A Python list of image paths, or of (path, label) pairs."""
    pairs: list[tuple[str, int | None]] = []
    for it in items:
        if isinstance(it, (tuple, list)) and len(it) == 2:
            path, label = os.fspath(it[0]), it[1]
            if isinstance(label, bool) or not isinstance(label, int):
                raise TypeError(f"a (path, label) pair needs an int label, not {label!r} (for {path!r})")
            pairs.append((path, int(label)))
        else:
            pairs.append((os.fspath(it), None))
    return _make(f"{PREFIX}<list of {len(pairs)} files>", "", pairs)


def folder_samples(ds: Any, pairs: Sequence[tuple[Any, int]] | None = None, *, root: Any = None,
                   classes: Any = None) -> FileList:
    """A torchvision ImageFolder's (or DatasetFolder's) `samples` (or `pairs` of another
    set of files), with its `classes`, as the Loader reads its root (`root`, `classes`:
    where the set keeps them elsewhere): keys the paths under the root, named as the root's
    tree (so the same tree given twice, as a folder and as a dataset, is refused as read
    twice)."""
    given = root if root is not None else getattr(ds, "root", None)
    given = os.fspath(given) if isinstance(given, (str, os.PathLike)) else ""
    top = os.path.abspath(given) if given else ""
    classes = classes if classes is not None else getattr(ds, "classes", None)
    names = tuple(classes) if isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes) else ()
    pairs = [(os.fspath(p), int(y)) for p, y in (ds.samples if pairs is None else pairs)]
    return _make(f"{PREFIX}{top or type(ds).__name__ + f'({len(pairs)} files)'}", top, pairs, names, given)


def named_files(name: str, root: str, pairs: Sequence[tuple[str, int | None]], classes: Sequence[str] = ()) -> FileList:
    """A list named `name` of the files `pairs` ((path, label or None)), keys their paths
    under `root` (as the set named it)."""
    return _make(PREFIX + name, os.path.abspath(root) if root else "", pairs, classes, root)


def is_file_item(item: Any) -> bool:
    """An entry of a user's list that names an image file (or a (path, label) pair)."""
    if isinstance(item, (tuple, list)):
        return len(item) == 2 and isinstance(item[0], (str, os.PathLike)) and is_image_file(os.fspath(item[0]))
    return isinstance(item, (str, os.PathLike)) and is_image_file(os.fspath(item))


# The most bytes one image file may have when no pixel limit gives one (file_cap).
MAX_FILE_BYTES = 1 << 32


def file_cap(max_pixels: int) -> int:
    """The most bytes an image file (or shard member) of at most `max_pixels` pixels may
    have: 8 bytes a pixel (a 16-bit RGBA image stored without compression) and 64 MiB of
    metadata; MAX_FILE_BYTES (4 GiB) without a pixel limit (0)."""
    return 8 * max_pixels + (64 << 20) if max_pixels > 0 else MAX_FILE_BYTES


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def read_file(path: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """A regular file's bytes, at most `max_bytes` of them. A missing, unreadable,
    oversized or irregular file (a FIFO, a device such as /dev/zero, a socket, through a
    symlink or not) is the sample's fault, named, and nothing is read from it: opening
    never waits for a writer and reading never runs the process out of memory. What the
    machine ran out of (descriptors, memory) is raised as it is, never taken for bad data."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, for ever
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno in RESOURCE_ERRNOS:
            raise resource_error(e, f"cannot read the image file {path!r}") from e
        raise ShardReadError(f"cannot read the image file: {e.strerror or e}", shard=path) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((what for test, what in _KINDS if test(st.st_mode)), "not a regular file")
            raise ShardReadError(f"is {kind}, not a regular file: not read as an image", shard=path)
        if st.st_size > max_bytes:
            raise ShardReadError(f"is {st.st_size:,} bytes, over the {max_bytes:,} an image file may have here "
                                 "(file_cap of the Loader's max_pixels): not read", shard=path)
        chunks, left = [], max_bytes + 1
        while left > 0:  # (a file that grows while it is read is read up to the cap, then refused)
            b = os.read(fd, min(left, 1 << 24))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        if left <= 0:
            raise ShardReadError(f"grew past the {max_bytes:,} bytes an image file may have while it was read",
                                 shard=path)
        return b"".join(chunks) if len(chunks) != 1 else chunks[0]
    except OSError as e:
        if e.errno in RESOURCE_ERRNOS:
            raise resource_error(e, f"cannot read the image file {path!r}") from e
        raise ShardReadError(f"cannot read the image file: {e.strerror or e}", shard=path) from e
    finally:
        os.close(fd)


def iter_files(flist: FileList, order: Sequence[int], start: int, stop: int | None, *,
               extensions: frozenset[str] | None, max_bytes: int = MAX_FILE_BYTES
               ) -> Iterator[tuple[str, int, dict[str, bytes], LocatedError | None]]:
    """(path, index, fields, error) for positions start..stop-1 of `order`; each file's
    failure is its own (read_file), the others are read."""
    end = len(order) if stop is None else stop
    for pos in range(start, end):
        i = order[pos]
        path = flist.paths[i]
        fields: dict[str, bytes] = {}
        ext = flist.ext(i)
        if flist.make is not None:  # a made sample
            try:
                data, label = flist.make(i)
            except Exception as e:  # the set's own code failed: this sample's error, named
                yield path, i, fields, ShardReadError(f"could not make the sample: {type(e).__name__}: {e}",
                                                      shard=path, key=flist.keys[i])  # (as its decode errors)
                continue
            if extensions is None or ext in extensions:
                fields[ext] = data
            if label is not None and (extensions is None or "cls" in extensions):
                fields["cls"] = str(label).encode()
            if flist.extra is not None and extensions:  # (its other values that fields= names)
                try:
                    for k, v in flist.extra(i, extensions).items():
                        fields.setdefault(k, v)  # (never in place of the image or the label)
                except Exception as e:
                    yield path, i, {}, ShardReadError(f"could not read the sample's other values: {type(e).__name__}: "
                                                      f"{e}", shard=path, key=flist.keys[i])
                    continue
            yield path, i, fields, None
            continue
        try:
            if extensions is None or ext in extensions:
                fields[ext] = read_file(path, max_bytes)
        except ShardReadError as e:
            yield path, i, fields, ShardReadError(e.reason, shard=path, key=flist.keys[i])
            continue
        label = flist.labels[i]
        if label is not None and (extensions is None or "cls" in extensions):
            fields["cls"] = str(label).encode()
        yield path, i, fields, None


def reopen(name: str) -> FileList:
    """The file list (or the part of one) that `name` stands for, read again: a tree
    scanned, a list file read (what a precache unit names; scans are kept per process).

    Raises:
        ValueError: a Python list of files (it has no name to read it again by).
    """
    base, _, part = name.partition("#")
    whole = _reopen_whole(base)
    if not part:
        return whole
    a, b = (int(v) for v in part.split(":"))
    return whole.part(a, b)


@functools.lru_cache(maxsize=8)
def _reopen_whole(name: str) -> FileList:
    path = name[len(PREFIX):]
    if os.path.isdir(path):
        return scan_tree(path)
    if os.path.isfile(path):
        return read_list(Path(path))
    raise ValueError(f"{path!r} is neither an ImageFolder tree nor a list file (a Python list of files cannot be "
                     "precached: write its `path label` lines to a list file)")
