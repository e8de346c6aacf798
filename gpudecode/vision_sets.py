"""Datasets given to the Loader as they are, as made file lists (io/files.made):
torchvision's FakeData (its images made by its own draws) and its sets held in memory as
one array of images (CIFAR10, CIFAR100, SVHN, STL10, MNIST and its kin, USPS), each image
read from the array; torch's TensorDataset of uint8 images and labels; torchvision's sets
of image files named in private lists (Food101, Flowers102, ...: read as an ImageFolder's
files are); and any other map-style Dataset (a script's own class, Caltech101, a set whose
items are not its files' or its array's), read through its own `__getitem__`.

A torchvision set's sample is the image its own `__getitem__` gives (a PIL image, as uint8
HWC RGB .npy bytes) with its label: an array's layout and labels, or a list's files, are
checked against `__getitem__` when the list is made, and a set they do not match is read
through its `__getitem__` itself. A set's `transform` is taken off (the Loader runs it);
its `target_transform` is kept: it runs in `__getitem__` where items are read that way,
and once a label where labels are read from the set's list or array (labels_of). Each
list pickles as its recipe (the set, its transform taken off).
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


def vision_set(ds: Any) -> FileList | None:
    """`ds` as a made list, if it is a torchvision dataset without files (FakeData, or an
    in-memory set); None for any other (ImageFolder: its files are read).

    Raises:
        TypeError: items that are not (an image, an integer label), or a target_transform
            that does not give an integer label.
    """
    if not any(c.__module__.startswith("torchvision.datasets") for c in type(ds).__mro__):
        return None
    if any(c.__name__ == "FakeData" for c in type(ds).__mro__):
        return _items(plain_copy(ds), "FakeData", f"{tuple(getattr(ds, 'image_size', ()))}, seed offset "
                                              f"{getattr(ds, 'random_offset', 0)}")
    arr = _array(getattr(ds, "data", None))
    if arr is None or len(arr) != len(ds) or len(arr) == 0:
        return None
    return image_arrays(plain_copy(ds))


def tensor_set(ds: Any) -> FileList:
    """torch's TensorDataset(images, labels) (or images alone): uint8 images [N, 3, H, W]
    (torch's layout, looked for first), [N, H, W, 3] or grey [N, H, W] (one channel made
    three, said), labels an integer vector.

    Raises:
        TypeError: images that are not uint8 images of one of those layouts, more than two
            tensors, or labels that are not one integer a sample.
    """
    tensors = list(ds.tensors)
    arr = _array(tensors[0]) if tensors else None
    layout = "" if arr is None else _layout(arr, chw_first=True)
    if len(tensors) not in (1, 2) or arr is None or not layout:
        first = f", the first {tensors[0].dtype} {list(tensors[0].shape)}" if tensors else ""
        floats = " (floats: give the images as uint8, x.mul(255).round().to(torch.uint8), and ToDtype and " \
                 "Normalize in the transform)" if tensors and tensors[0].is_floating_point() else ""
        raise TypeError(f"Loader() reads a TensorDataset of uint8 images ([N, 3, H, W], [N, H, W, 3] or [N, H, W]) "
                        f"and integer labels beside them; this one holds {len(tensors)} tensor(s){first}{floats}")
    labels: np.ndarray | None = None
    if len(tensors) == 2:
        found = _label_array(tensors[1], len(arr))
        if not isinstance(found, np.ndarray):
            raise TypeError(f"Loader() reads a TensorDataset's second tensor as one integer label a sample, not "
                            f"{tensors[1].dtype} {list(tensors[1].shape)}")
        labels = found
    images = _ArrayImages(arr, layout, labels)
    _say_grey(arr, layout, "TensorDataset", "images[:, :1] is the one channel")
    h, w = images.pixels(0).shape[:2] if len(arr) else (0, 0)
    return made(f"TensorDataset({len(arr)} images of {h}x{w})", len(arr), images, "npy", label=images.label,
                rebuild=(tensor_set, (ds,)))


def file_set(ds: Any) -> FileList | None:
    """A torchvision set of image files that names them in a private list: its (path,
    label) pairs from `_samples` (StanfordCars, GTSRB, Imagenette), `imgs` (Places365), or
    `_image_files` / `_images` beside `_labels` (Food101, Flowers102, DTD, FGVCAircraft,
    SUN397, OxfordIIITPet), or built from its fields as its `__getitem__` builds them
    (Caltech101, Caltech256, INaturalist, CelebA: _named_by_fields), read as an ImageFolder's `samples`
    are (folder_set); None where it has none."""
    pairs = _named_by_fields(ds)
    for attr in ("_samples", "imgs"):
        v = getattr(ds, attr, None)
        if pairs is None and isinstance(v, list) and v and all(isinstance(x, tuple) and len(x) == 2 for x in v[:1]):
            pairs = list(v)
            break
    labels = getattr(ds, "_labels", None)
    for attr in ("_image_files", "_images"):
        files = getattr(ds, attr, None)
        if pairs is None and isinstance(files, list) and isinstance(labels, list) and files and \
                len(files) == len(labels):
            pairs = list(zip(files, labels))
    if pairs is None or len(pairs) != len(ds):
        return None
    return folder_set(ds, pairs, check=True)


def _named_by_fields(ds: Any) -> list[tuple[str, int]] | None:
    """The (path, label) pairs of a torchvision set whose `__getitem__` builds each file's
    path from its fields, as it builds it: Caltech101 (category targets), Caltech256,
    INaturalist (one target type), CelebA (identity targets); None for any other (or a set
    without those fields)."""
    names = {c.__name__ for c in type(ds).__mro__ if c.__module__.startswith("torchvision.datasets")}
    root = getattr(ds, "root", None)
    if not isinstance(root, (str, os.PathLike)):
        return None
    root = os.fspath(root)
    try:
        if "Caltech101" in names and list(getattr(ds, "target_type", ())) == ["category"]:
            base = os.path.join(root, "101_ObjectCategories")
            return [(os.path.join(base, ds.categories[y], f"image_{k:04d}.jpg"), int(y)) for y, k in zip(ds.y, ds.index)]
        if "Caltech256" in names:
            base = os.path.join(root, "256_ObjectCategories")
            return [(os.path.join(base, ds.categories[y], f"{y + 1:03d}_{k:04d}.jpg"), int(y))
                    for y, k in zip(ds.y, ds.index)]
        if "INaturalist" in names and len(ds.target_type) == 1 and getattr(ds, "loader", None) is None:
            kind = ds.target_type[0]
            return [(os.path.join(root, ds.all_categories[c], f), int(c if kind == "full" else ds.categories_map[c][kind]))
                    for c, f in ds.index]
        if "CelebA" in names and list(getattr(ds, "target_type", ())) == ["identity"]:
            base = os.path.join(root, ds.base_folder, "img_align_celeba")
            return [(os.path.join(base, f), int(t)) for f, t in zip(ds.filename, ds.identity[:, 0].tolist())]
    except (AttributeError, TypeError, IndexError):  # (a version whose fields are others: read through __getitem__)
        return None
    return None


def timm_set(ds: Any) -> FileList | None:
    """timm's ImageDataset over a folder (what timm.data.create_dataset gives for one,
    train.py's): its reader's (path, label) `samples`, root and classes, read as an
    ImageFolder's files are (folder_set, its first, middle and last items checked against its
    `__getitem__`); None for any other set (its tar reader, bytes asked for, features
    beside the image)."""
    if not type(ds).__module__.startswith("timm") or getattr(ds, "load_bytes", False) or \
            getattr(ds, "additional_features", None) is not None:
        return None
    reader = getattr(ds, "reader", None)
    pairs = getattr(reader, "samples", None)
    if not isinstance(pairs, list) or not pairs or not all(
            isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], (str, os.PathLike)) for x in pairs[:1]) or \
            len(pairs) != len(ds):
        return None
    index = getattr(reader, "class_to_idx", None)
    classes = sorted(index, key=index.__getitem__) if isinstance(index, dict) and \
        sorted(index.values()) == list(range(len(index))) else None
    return folder_set(ds, pairs, check=True, root=getattr(reader, "root", None), classes=classes)


def folder_set(ds: Any, pairs: list[tuple[Any, Any]] | None = None, *, check: bool = False, root: Any = None,
               classes: Any = None) -> FileList:
    """A set of image files (torchvision's ImageFolder or DatasetFolder, its `samples`; or
    `pairs`, another set's (path, label) list, with its `root` and `classes` where they
    are not the set's attributes) read as its root's tree is (files.folder_samples: the
    files decoded here, its classes kept), its labels through its
    target_transform (labels_of). Where `check` is asked, or its class has a
    `__getitem__` of its own, its first, middle and last items are checked against that
    `__getitem__` (the file's image, that label) when the list is made; a set whose
    items are not its files' (another target type, items it changes, a loader= of its
    own) is read through its `__getitem__` (items_set).

    Raises:
        ShardReadError: a file it names, checked, that cannot be read (named).
        TypeError: labels that are not integers (or that its target_transform does not
            make integers).
    """
    from .io.files import folder_samples

    pairs = list(ds.samples if pairs is None else pairs)
    own = getattr(ds, "loader", None)
    if own is not None and not str(getattr(own, "__module__", "")).startswith("torchvision"):
        return items_set(ds, "its own loader= opens its files")
    if not all(_is_int(y) for _, y in pairs):
        return items_set(ds, "its labels are not integers")
    check = check or not str(getattr(type(ds).__getitem__, "__module__", "")).startswith("torchvision")
    plain = plain_copy(ds)
    ys = labels_of(ds, [int(y) for _, y in pairs])
    if check and pairs and not _reads_its_files(ds, plain, pairs, ys):
        return items_set(ds, "its items are not its files' images with their labels")
    return folder_samples(ds, list(zip((p for p, _ in pairs), ys)), root=root, classes=classes)


def _reads_its_files(ds: Any, plain: Any, pairs: list, ys: list[int]) -> bool:
    """Whether items 0, n/2 and n-1 of the set (transform taken off) are its files'
    images, as Pillow opens them, with labels `ys`, made with no random number drawn.

    Raises:
        ShardReadError: a file that cannot be read (named)."""
    from PIL import Image

    from .decode.cpu import pil_pixels

    for i in sorted({0, len(pairs) // 2, len(pairs) - 1}):
        path = pairs[i][0]
        try:
            got_items, drew = _drawn(plain, [i])
            if drew:
                return False
            item = got_items[i]
            with Image.open(path) as own:
                want = pil_pixels(own)
        except OSError as e:  # (a file named that is not there, or not an image: the set's, named)
            raise ShardReadError(f"{type(ds).__name__}'s item {i} cannot be read: {type(e).__name__}: {e}",
                                 shard=os.fspath(path)) from e
        img, y = item if isinstance(item, (tuple, list)) and len(item) == 2 else (None, None)
        got = item_pixels(img)
        if got is None or not np.array_equal(got, want) or not _is_int(y) or int(y) != ys[i]:  # type: ignore[arg-type]
            return False
    return True


def _drawn(plain: Any, indices: list[int]) -> tuple[dict[int, Any], bool]:
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
    __getitem__ drew no random number making them (_drawn); else None. `plain`: the set
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
        items, drew = _drawn(plain, probe)
    except Exception:  # (its own error: items_set names it)
        return None
    if drew:  # (an augmentation of its own, under another name than `transform`: its items are not its files')
        return None
    labelled = all(isinstance(x, (tuple, list)) and len(x) == 2 for x in items.values())
    if not labelled and any(isinstance(x, (tuple, list)) for x in items.values()):
        return None
    images = {i: item_pixels(x[0] if labelled else x) for i, x in items.items()}
    if any(v is None for v in images.values()) or (labelled and not all(_is_int(x[1]) for x in items.values())):
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
                if not all(_is_int(col[i]) for i in probe) or labels_of(ds, [int(col[i]) for i in probe]) != want:
                    continue
            except Exception:  # (its target_transform refuses another column's values: not its labels)
                continue
            got = _label_array(list(col), n)
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
                       list(zip(paths, ys if ys is not None else [None] * n)), _names(ds))


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
        if not _is_int(got):
            raise TypeError(f"this {type(ds).__name__}'s target_transform makes label {y} {_kind(got)}, not an "
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


def _array(data: Any) -> np.ndarray | None:
    """A set's `data` as a uint8 numpy array of images ([N, H, W], [N, H, W, C] or
    [N, C, H, W]), or None."""
    data = _numpy(data)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim not in (3, 4):
        return None
    return data


def _numpy(x: Any) -> Any:
    """A torch tensor as a numpy array (on the CPU); anything else as it is."""
    if type(x).__module__.startswith("torch") and hasattr(x, "numpy"):
        return x.detach().cpu().numpy()
    return x


def _layout(arr: np.ndarray, *, chw_first: bool) -> str:
    """"grey" [N, H, W], "hwc" [N, H, W, 1|3] or "chw" [N, 1|3, H, W] ("" if none): which
    of the two 4-D layouts is looked for first where both fit (torch's own, for tensors)."""
    if arr.ndim == 3:
        return "grey"
    order = ("chw", "hwc") if chw_first else ("hwc", "chw")
    return next((k for k in order if arr.shape[1 if k == "chw" else 3] in (1, 3)), "")


def _say_grey(arr: np.ndarray, layout: str, name: str, theirs: str) -> None:
    """The one-channel images of a set come as 3 equal channels: said."""
    if layout == "grey" or arr.shape[1 if layout == "chw" else 3] == 1:
        warnings.warn(f"{name}'s images are grey: the Loader gives them as 3 equal channels, as for every image "
                      f"({theirs})", RuntimeWarning, stacklevel=5)


def _split(ds: Any) -> str:
    if isinstance(getattr(ds, "train", None), bool):
        return "train" if ds.train else "test"
    split = getattr(ds, "split", None)
    return split if isinstance(split, str) else ""


def _labels(ds: Any, n: int) -> np.ndarray | None | bool:
    """The set's labels as int64 [n] (`targets`, or `labels` as SVHN and STL10 name them);
    None: it has none; False: an attribute this does not read as one label a sample
    (QMNIST's rows of eight)."""
    for attr in ("targets", "labels"):
        t = getattr(ds, attr, None)
        if t is not None:
            return _label_array(t, n)
    return None


def _label_array(t: Any, n: int) -> np.ndarray | bool:
    """Labels `t` (a list, array or tensor) as int64 [n], or False where they are not one
    integer a sample."""
    a = np.asarray(_numpy(t))
    return a.astype(np.int64) if a.ndim == 1 and len(a) == n and a.dtype.kind in "iub" else False


_HWC_COPY = 1 << 30  # an array of images in another layout, up to this many bytes, is copied once as HWC


class _ArrayImages:
    """Sample i of an in-memory set: image i of `arr` as HWC RGB .npy bytes ("hwc",
    "chw" or "grey" layout; one channel repeated in three, as PIL's convert("RGB") does)
    and label i."""

    def __init__(self, arr: np.ndarray, layout: str, labels: np.ndarray | None) -> None:
        if layout in ("hwc", "chw") and arr.nbytes <= _HWC_COPY:  # (CIFAR10's array is a strided view of planes)
            hwc = arr.transpose(0, 2, 3, 1) if layout == "chw" else arr
            if not hwc.flags.c_contiguous:  # made HWC once: each image then a slice, not a gather of 3 planes
                arr, layout = np.ascontiguousarray(hwc), "hwc"
        self.arr, self.layout, self.labels = arr, layout, labels

    def pixels(self, i: int) -> np.ndarray:
        a = self.arr[i]
        if self.layout == "hwc" and a.flags.c_contiguous and a.shape[2] == 3:
            return a
        if self.layout == "chw":
            a = a.transpose(1, 2, 0)
        elif self.layout == "grey":
            a = a[:, :, None]
        if a.shape[2] == 1:
            a = np.broadcast_to(a, (a.shape[0], a.shape[1], 3))
        return np.ascontiguousarray(a)

    def label(self, i: int) -> int | None:
        return int(self.labels[i]) if self.labels is not None else None

    def __call__(self, i: int) -> tuple[bytes, int | None]:
        return encode_npy(self.pixels(i)), self.label(i)


def image_arrays(plain: Any) -> FileList:
    """An in-memory set (transforms taken off: plain_copy) read from its array, where its
    layout and labels give what its `__getitem__` gives for its first, middle and last
    images; else through `__getitem__` (_items)."""
    from .decode.cpu import pil_pixels

    arr = _array(plain.data)
    assert arr is not None
    n, name, split = len(arr), type(plain).__name__, _split(plain)
    layout = _layout(arr, chw_first=False)
    labels = _labels(plain, n)
    if not layout or labels is False:
        return _items(plain, name, split)
    if isinstance(labels, np.ndarray) and getattr(plain, "target_transform", None) is not None:
        labels = np.asarray(labels_of(plain, labels.tolist()), dtype=np.int64)
    images = _ArrayImages(arr, layout, labels if isinstance(labels, np.ndarray) else None)
    for i in sorted({0, n // 2, n - 1}):
        img, y = plain[i]
        if not is_pil(img) or not np.array_equal(pil_pixels(img), images.pixels(i)) or \
                (images.labels is not None and (not _is_int(y) or int(y) != images.labels[i])):
            return _items(plain, name, split)
    _say_grey(arr, layout, name, f"torchvision's {name} gives 1: images[:, :1] is that")
    h, w = images.pixels(0).shape[:2]
    return made(f"{name}({n} images of {h}x{w}{', ' + split if split else ''}{_root(plain)})", n, images, "npy",
                label=images.label, classes=_names(plain),
                rebuild=(image_arrays, (plain,)))


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
        if got is None or (self.labelled and not (pair and _is_int(label))) or \
                (not self.labelled and isinstance(item, (tuple, list))):
            want = "(an image, an integer label)" if self.labelled else "an image"
            have = f"({', '.join(_kind(x) for x in item)})" if isinstance(item, (tuple, list)) else _kind(item)
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
    a = _numpy(img)
    if not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.ndim not in (2, 3) or 0 in a.shape:
        return None
    if a.ndim == 2:
        a = a[:, :, None]
    elif is_tensor:
        a = a.transpose(1, 2, 0)
    if a.shape[2] not in (1, 3):
        return None
    return np.ascontiguousarray(np.broadcast_to(a, (*a.shape[:2], 3)) if a.shape[2] == 1 else a)


def _kind(x: Any) -> str:
    """What a value is, for a message: its type, with a tensor's or array's dtype and shape."""
    shape = getattr(x, "shape", None)
    if shape is not None and getattr(x, "dtype", None) is not None:
        return f"{type(x).__name__} {str(x.dtype).replace('torch.', '')} {list(shape)}"
    return type(x).__name__


def _items(plain: Any, name: str, detail: str) -> FileList:
    """A set read through its `__getitem__`, item by item; its first item checked here
    (its items (image, label), or images alone).

    Raises:
        TypeError: its first item is not an image, alone or with an integer label."""
    whole = f"{name}({len(plain)}{', ' + detail if detail else ''}{_root(plain)})"
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
    return made(whole, len(plain), make, "npy", label=label, classes=_names(plain),
                rebuild=(_items, (plain, name, detail)))


def _own_labels(plain: Any, make: _Items) -> Any:
    """label(i) from the set's own `targets` (or `labels`: one integer a sample, through its
    target_transform) where its first, middle and last items have those labels: a label
    without the item made (`loader.dataset.targets`, a label_offset's check); else None."""
    n = len(plain)
    found = _labels(plain, n)
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
    torchvision's Caltech101, a set whose items are not its files'): its items through its
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
    return _items(plain_copy(ds) if plain is None else plain, name,
                  f"read through its __getitem__{': ' + why if why else ''}{where}")


def _root(ds: Any) -> str:
    """", in ROOT" for a set read from a folder (two sets of one kind and split, from two
    folders, are two lists), else ""."""
    root = getattr(ds, "root", None)
    return f", in {os.path.abspath(os.fspath(root))}" if isinstance(root, (str, os.PathLike)) and root else ""


def _is_int(y: Any) -> bool:
    return isinstance(y, (int, np.integer)) or (getattr(y, "ndim", None) == 0 and getattr(y, "dtype", None) is not None
                                                and str(y.dtype).replace("torch.", "").startswith(("int", "uint")))


def _names(ds: Any) -> tuple[str, ...]:
    """The set's class names (`classes`, a list of strings), or ()."""
    classes = getattr(ds, "classes", None)
    ok = isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes)
    return tuple(classes) if ok else ()  # type: ignore[arg-type]
