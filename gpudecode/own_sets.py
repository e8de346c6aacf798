"""A torch Dataset of a script's own given to the Loader as it is, as the reader's list
(io/files): read from its image files where it names them in a column and its items are
those files' images (path_set), else through its own `__getitem__` on the reader threads
(items_set; a set holding an open file called one item at a time). And what every set
given as it is shares: its copy without its transform (plain_copy: the Loader runs it),
its labels through its target_transform (labels_of), an item's image as uint8 HWC RGB
(item_pixels).
"""
from __future__ import annotations

import copy
import os
import threading
import warnings
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from .decode._base import is_pil
from .errors import ShardReadError
from .io.files import FileList, is_image_file, made, named_files
from .tensors import encode_npy


def drawn(plain: Any, indices: list[int]) -> tuple[dict[int, Any], bool]:
    """The set's items at `indices`, and whether its __getitem__ drew random numbers while
    it made them (Python's, numpy's or torch's own generator, or one the set holds): an
    augmentation of its own that its items at these indices may not show."""
    before = _rng_states(plain)
    items = {i: plain[i] for i in indices}
    return items, _rng_states(plain) != before


def _rng_states(plain: Any) -> list[bytes]:
    """The states of the random generators a __getitem__ may draw from: Python's, numpy's
    and torch's global ones, and the generators the set holds (its attributes)."""
    import pickle
    import random

    out = [pickle.dumps(random.getstate()), pickle.dumps(np.random.get_state()),
           torch.get_rng_state().numpy().tobytes()]
    for v in list(getattr(plain, "__dict__", {}).values()):
        if isinstance(v, random.Random):
            out.append(pickle.dumps(v.getstate()))
        elif isinstance(v, np.random.Generator):
            out.append(pickle.dumps(v.bit_generator.state))
        elif isinstance(v, np.random.RandomState):
            out.append(pickle.dumps(v.get_state()))
        elif isinstance(v, torch.Generator):
            out.append(v.get_state().numpy().tobytes())
    return out


_LABEL_NAMES = ("targets", "labels", "label", "y", "target", "class_ids")  # where a set of its own keeps its labels


def path_set(ds: Any, place: int | None = None, plain: Any = None) -> FileList | None:
    """A set of its own (or torchvision's: LFWPeople) that names its images' files in a
    column, one a sample: a list (or array, or a pandas DataFrame's column) of their paths,
    or of their names under a folder it names (`self.img_dir`, `self.root`, ...), or of
    (path, label) pairs; its labels in another column (`targets`, `labels`, `y`, ..., or
    the DataFrame's), the one that gives its items' labels. Read from those files, as an
    ImageFolder's are (the files decoded here, keys their paths under that folder, or the
    set's `root`, or their common folder), where its first, second, middle and last items
    are those files' images with those labels (through its target_transform) and its
    __getitem__ drew no random number making them (drawn); else None. `plain`: the set
    without its transform (plain_copy), where one is made already."""
    try:
        n = len(ds)
    except TypeError:  # (no length: items_set says so)
        return None
    if n == 0:
        return None
    plain = plain_copy(ds) if plain is None else plain
    probe = sorted({0, min(1, n - 1), n // 2, n - 1})  # (the second too: a set that treats odd items apart)
    try:
        items, drew = drawn(plain, probe)
    except Exception:  # (its own error: items_set names it)
        return None
    if drew:  # (an augmentation of its own, under another name than `transform`: its items are not its files')
        return None
    labelled = all(isinstance(x, (tuple, list)) and len(x) == 2 for x in items.values())
    if not labelled and any(isinstance(x, (tuple, list)) for x in items.values()):
        return None
    images = {i: item_pixels(x[0] if labelled else x) for i, x in items.items()}
    if any(v is None for v in images.values()) or (labelled and not all(is_int(x[1]) for x in items.values())):
        return None
    columns = _columns(ds, n)
    folders = [""] + [os.fspath(v) for v in getattr(ds, "__dict__", {}).values()
                      if isinstance(v, (str, os.PathLike)) and v and os.path.isdir(v)]
    found = _file_column(columns, folders, probe, images)
    if found is None:
        return None
    paths, theirs, root = found
    ys: list[int] | None = None
    if labelled:
        want = [int(items[i][1]) for i in probe]
        named = [c for k, c in columns if k in _LABEL_NAMES] + [c for k, c in columns if k not in _LABEL_NAMES]
        for col in ([theirs] if theirs is not None else []) + named:
            try:
                if not all(is_int(col[i]) for i in probe) or labels_of(ds, [int(col[i]) for i in probe]) != want:
                    continue
            except Exception:  # (its target_transform refuses another column's values: not its labels)
                continue
            got = label_array(list(col), n)
            if isinstance(got, np.ndarray):
                ys = labels_of(ds, got.tolist())
                break
        if ys is None:
            return None
    if not root:  # (paths named whole: under the set's root, or their common folder)
        whole = [os.path.abspath(p) for p in paths]
        own = getattr(ds, "root", None)
        root = os.path.abspath(os.fspath(own)) if isinstance(own, (str, os.PathLike)) and own else ""
        if not root or not all(p.startswith(root + os.sep) for p in whole):
            root = os.path.commonpath(whole)
            root = os.path.dirname(root) if os.path.isfile(root) else root  # (one file, or one named throughout)
    where = "" if place is None else f", item {place} of the list"
    return named_files(f"{type(ds).__name__}({n} files{where}, in {os.path.abspath(root)})", root,
                       list(zip(paths, ys if ys is not None else [None] * n)), class_names(ds))


def _columns(ds: Any, n: int) -> list[tuple[str, Any]]:
    """The set's attributes that hold one value a sample: lists, tuples and 1-D arrays of
    length n, and a pandas DataFrame's columns (by attribute, then column name; each read
    as a list only when it is taken: a frame may hold many)."""
    out: list[tuple[str, Any]] = []
    for k, v in list(getattr(ds, "__dict__", {}).items()):
        if isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.ndim == 1):
            if len(v) == n:
                out.append((k, v))
        elif type(v).__name__ == "DataFrame" and type(v).__module__.startswith("pandas") and len(v) == n:
            out += [(str(c), _FrameColumn(v, j)) for j, c in enumerate(v.columns)]
    return out


class _FrameColumn(Sequence[Any]):
    """Column j of a pandas DataFrame as a sequence: a value by position, the whole column
    read once, when iterated."""

    def __init__(self, frame: Any, j: int) -> None:
        self.frame, self.j = frame, j

    def __len__(self) -> int:
        return len(self.frame)

    def __getitem__(self, i):  # type: ignore[override]
        return self.frame.iat[i, self.j]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.frame.iloc[:, self.j].tolist())


def _file_column(columns: list[tuple[str, Any]], folders: list[str], probe: list[int],
                 images: dict[int, Any]) -> tuple[list[str], Any, str] | None:
    """The column that names the probed items' files (paths, names under one of
    `folders`, or (path, label) pairs) whose images, as Pillow opens them, are `images`:
    (every sample's path, the pairs' labels or None, the folder or ""); None where none
    does (or where another of its entries is not a path)."""
    from PIL import Image

    from .decode.cpu import pil_pixels

    for _, col in columns:
        pairs = all(isinstance(col[i], tuple) and len(col[i]) == 2 for i in probe)
        names = [col[i][0] if pairs else col[i] for i in probe]
        if not all(isinstance(x, (str, os.PathLike)) for x in names):
            continue
        for folder in folders:
            if not all(_is_image_path(os.path.join(folder, x)) for x in names):
                continue
            try:
                same = True
                for i, x in zip(probe, names):
                    with Image.open(os.path.join(folder, x)) as im:
                        same = same and np.array_equal(pil_pixels(im), images[i])
            except OSError:
                same = False
            if same:
                try:
                    paths = [os.path.join(folder, os.fspath(x[0] if pairs else x)) for x in col]
                except (TypeError, IndexError):  # (a value that names no file: a NaN of a DataFrame)
                    return None
                return paths, [x[1] for x in col] if pairs else None, folder
    return None


def _is_image_path(x: Any) -> bool:
    """A path (str or PathLike) of an image file that is there."""
    if not isinstance(x, (str, os.PathLike)):
        return False
    p = os.fspath(x)
    return isinstance(p, str) and is_image_file(p) and os.path.isfile(p)


def labels_of(ds: Any, labels: list[int]) -> list[int]:
    """A set's labels, read from its list or array, through its target_transform (run
    once a label, here, as its `__getitem__` runs it on each item's); as they are where
    it has none.

    Raises:
        TypeError: a target_transform that gives a label that is not an integer."""
    tt = getattr(ds, "target_transform", None)
    if tt is None:
        return labels
    out = []
    for y in labels:
        got = tt(y)
        if not is_int(got):
            raise TypeError(f"this {type(ds).__name__}'s target_transform makes label {y} {kind_of(got)}, not an "
                            "integer: the Loader trains on one integer label a sample (map it to yours in your loop)")
        out.append(int(got))
    return out


def plain_copy(ds: Any) -> Any:
    """A shallow copy of `ds` without its transform (the Loader runs it: Loader() takes
    the set's transform when given none); its target_transform kept (a VisionDataset's
    `transforms`, both together, made the target's alone; a `transforms` of another kind
    is the set's own, left)."""
    plain = copy.copy(ds)
    if getattr(plain, "transform", None) is not None:
        try:
            plain.transform = None
        except AttributeError:  # (a property of its own: its items then say what they are, _Items)
            pass
    both = getattr(plain, "transforms", None)
    if type(both).__name__ == "StandardTransform" and type(both).__module__.startswith("torchvision"):
        from torchvision.datasets.vision import StandardTransform  # (VisionDataset's transform and target_transform)

        tt = getattr(plain, "target_transform", None)
        plain.transforms = None if tt is None else StandardTransform(None, tt)
    return plain


def as_numpy(x: Any) -> Any:
    """A torch tensor as a numpy array (on the CPU); anything else as it is."""
    if type(x).__module__.startswith("torch") and hasattr(x, "numpy"):
        return x.detach().cpu().numpy()
    return x


def label_attr(ds: Any, n: int) -> np.ndarray | None | bool:
    """The set's labels as int64 [n] (`targets`, or `labels` as SVHN and STL10 name them);
    None: it has none; False: an attribute this does not read as one label a sample
    (QMNIST's rows of eight)."""
    for attr in ("targets", "labels"):
        t = getattr(ds, attr, None)
        if t is not None:
            return label_array(t, n)
    return None


def label_array(t: Any, n: int) -> np.ndarray | bool:
    """Labels `t` (a list, array or tensor) as int64 [n], or False where they are not one
    integer a sample."""
    a = np.asarray(as_numpy(t))
    return a.astype(np.int64) if a.ndim == 1 and len(a) == n and a.dtype.kind in "iub" else False


class _Items:
    """Sample i of a set through its own `__getitem__`: (an image, a label), or an image
    alone where `labelled` is False."""

    def __init__(self, plain: Any, labelled: bool = True) -> None:
        self.plain, self.labelled = plain, labelled
        self.lock: threading.Lock | None = None  # one call at a time (a set holding an open file: _shared_handles)

    def __call__(self, i: int) -> tuple[bytes, int | None]:
        if self.lock is None:
            return self.sample(i, self.plain[i])
        with self.lock:
            item = self.plain[i]
        return self.sample(i, item)

    def sample(self, i: int, item: Any) -> tuple[bytes, int | None]:
        """Item i as the sample's (.npy bytes, label)."""
        pair = isinstance(item, (tuple, list)) and len(item) == 2
        img, label = item if self.labelled and pair else (item, None)
        got = item_pixels(img)
        if got is None or (self.labelled and not (pair and is_int(label))) or \
                (not self.labelled and isinstance(item, (tuple, list))):
            want = "(an image, an integer label)" if self.labelled else "an image"
            have = f"({', '.join(kind_of(x) for x in item)})" if isinstance(item, (tuple, list)) else kind_of(item)
            floats = " (float pixels: the Loader reads uint8 images and runs the transform itself; it takes a set's " \
                     "`transform` off and runs it, so a transform the set runs under another name must go)" if getattr(img, "dtype", None) is not None and \
                str(img.dtype).replace("torch.", "").startswith(("float", "bfloat")) else ""
            raise TypeError(f"item {i} is {have}, not {want}: an image is a PIL image, a uint8 tensor [C, H, W] or "
                            f"a uint8 array [H, W, C] of 1 or 3 channels{floats}")
        return encode_npy(got), None if label is None else int(label)


def item_pixels(img: Any) -> np.ndarray | None:
    """An item's image as uint8 HWC RGB (contiguous): a PIL image as every image here is
    read (decode.cpu.pil_pixels); a uint8 tensor [C, H, W] (torchvision's layout: read_image,
    ToImage, tv_tensors.Image) or [H, W], a uint8 numpy array [H, W, C] or [H, W], of 1 or 3
    channels (one made three, as a grey file is); None for anything else."""
    from .decode.cpu import pil_pixels

    if is_pil(img):
        return np.ascontiguousarray(pil_pixels(img))
    is_tensor = isinstance(img, torch.Tensor)
    a = as_numpy(img)
    if not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.ndim not in (2, 3) or 0 in a.shape:
        return None
    if a.ndim == 2:
        a = a[:, :, None]
    elif is_tensor:
        a = a.transpose(1, 2, 0)
    if a.shape[2] not in (1, 3):
        return None
    return np.ascontiguousarray(np.broadcast_to(a, (*a.shape[:2], 3)) if a.shape[2] == 1 else a)


def kind_of(x: Any) -> str:
    """What a value is, for a message: its type, with a tensor's or array's dtype and shape."""
    shape = getattr(x, "shape", None)
    if shape is not None and getattr(x, "dtype", None) is not None:
        return f"{type(x).__name__} {str(x.dtype).replace('torch.', '')} {list(shape)}"
    return type(x).__name__


def items_of(plain: Any, name: str, detail: str) -> FileList:
    """A set read through its `__getitem__`, item by item; its first item checked here
    (its items (image, label), or images alone); its labels from its own `targets` where
    they agree (_own_labels); called one item at a time where it holds an open file
    (_shared_handles), said.

    Raises:
        TypeError: its first item is not an image, alone or with an integer label."""
    whole = f"{name}({len(plain)}{', ' + detail if detail else ''}{root_note(plain)})"
    try:
        first = plain[0] if len(plain) else None
    except Exception as e:  # (its own code's error, as a sample's is when streaming: named)
        raise ShardReadError(f"{name}'s item 0 cannot be read: {type(e).__name__}: {e}", shard=whole) from e
    make = _Items(plain, isinstance(first, (tuple, list)))
    if len(plain):
        try:
            make.sample(0, first)  # (the item read above: a PIL image opened lazily is read, its file closed)
        except TypeError as e:
            raise TypeError(f"Loader() reads a {name} as (image, label) items: {e}") from None
    label = _own_labels(plain, make) if make.labelled and len(plain) else None
    shared = _shared_handles(plain)  # (after its first item: a file it opens at its first call is open now)
    if shared:
        make.lock = threading.Lock()
        warnings.warn(f"{name}'s __getitem__ is called one item at a time, not on every reader thread at once: it "
                      f"holds {', '.join(shared)}, which threads would share (a seek and a read of one thread "
                      "between another's); open the file in each call, or read it with os.pread, to read on "
                      "every thread", RuntimeWarning, stacklevel=5)
    return made(whole, len(plain), make, "npy", label=label, classes=class_names(plain),
                rebuild=(items_of, (plain, name, detail)))


def _own_labels(plain: Any, make: _Items) -> Any:
    """label(i) from the set's own `targets` (or `labels`: one integer a sample, through its
    target_transform) where its first, middle and last items have those labels: a label
    without the item made (`loader.dataset.targets`, a label_offset's check); else None."""
    n = len(plain)
    found = label_attr(plain, n)
    if not isinstance(found, np.ndarray):
        return None
    try:
        ys = np.asarray(labels_of(plain, found.tolist()), dtype=np.int64)
        if any(make(i)[1] != ys[i] for i in sorted({0, n // 2, n - 1})):
            return None
    except Exception:  # (an item or a target_transform that fails: labels from the items, each its own error)
        return None
    return _LabelOf(ys)


class _LabelOf:
    def __init__(self, ys: np.ndarray) -> None:
        self.ys = ys

    def __call__(self, i: int) -> int:
        return int(self.ys[i])


def _shared_handles(plain: Any) -> list[str]:
    """What in a set (its attributes, and theirs or their items one level down) is a
    handle that calls on several threads at once would share with no lock of its own: an
    open Python file or stream (a seek and a read are two steps), a tarfile.TarFile over
    one, an LMDB transaction or cursor; as "self.NAME (Type)". Zip files (ZipFile locks its
    reads), h5py files (h5py's lock), mmaps and anything closed are not."""
    import io
    import tarfile

    def unsafe(v: Any) -> bool:
        if isinstance(v, io.IOBase):
            return not v.closed
        if isinstance(v, tarfile.TarFile):
            return not getattr(v, "closed", False)
        return type(v).__module__.split(".")[0] == "lmdb" and type(v).__name__ in ("Transaction", "Cursor")

    def below(name: str, v: Any) -> list[tuple[str, Any]]:
        if isinstance(v, dict):
            return [(f"self.{name}[{k!r}]", x) for k, x in list(v.items())[:100]]
        if isinstance(v, (list, tuple)):
            return [(f"self.{name}[{k}]", x) for k, x in enumerate(v[:100])]
        if hasattr(v, "__dict__") and not isinstance(v, (io.IOBase, tarfile.TarFile, type)):
            return [(f"self.{name}.{k}", x) for k, x in list(vars(v).items())[:100]]
        return []

    found: list[str] = []
    for name, v in list(getattr(plain, "__dict__", {}).items()):
        for where, x in [(f"self.{name}", v)] + below(name, v):
            if unsafe(x) and len(found) < 3:
                found.append(f"{where} ({type(x).__name__})")
    return found


def items_set(ds: Any, why: str = "", place: int | None = None, plain: Any = None) -> FileList:
    """Any map-style Dataset the Loader has no faster way to read (a script's own class,
    torchvision's PCAM, a set whose items are not its files'): its items through its
    own `__getitem__`, on the reader threads (its own code opens and decodes each image),
    each (an image, an integer label) or an image alone; its `transform` taken off, its
    target_transform kept (plain_copy). `why` says why it is read this way, `place` where it
    stands in a list of sets given together (both in its name: two sets of one class in a
    list are two lists); `plain`: the set without its transform, where one is made already
    (one copy: a file its first calls open is one file).

    Raises:
        TypeError: a set with no length, or a first item that is not an image (alone or
            with an integer label)."""
    name = type(ds).__name__
    try:
        len(ds)
    except TypeError:
        raise TypeError(f"Loader() reads a Dataset by index and needs its length: this {name} has no __len__") \
            from None
    where = "" if place is None else f", item {place} of the list"
    return items_of(plain_copy(ds) if plain is None else plain, name,
                    f"read through its __getitem__{': ' + why if why else ''}{where}")


def root_note(ds: Any) -> str:
    """", in ROOT" for a set read from a folder (two sets of one kind and split, from two
    folders, are two lists), else ""."""
    root = getattr(ds, "root", None)
    return f", in {os.path.abspath(os.fspath(root))}" if isinstance(root, (str, os.PathLike)) and root else ""


def is_int(y: Any) -> bool:
    return isinstance(y, (int, np.integer)) or (getattr(y, "ndim", None) == 0 and getattr(y, "dtype", None) is not None
                                                and str(y.dtype).replace("torch.", "").startswith(("int", "uint")))


def class_names(ds: Any) -> tuple[str, ...]:
    """The set's class names (`classes`, a list of strings), or ()."""
    classes = getattr(ds, "classes", None)
    ok = isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes)
    return tuple(classes) if ok else ()  # type: ignore[arg-type]
