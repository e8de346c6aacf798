"""torchvision's datasets (and timm's, and torch's TensorDataset) given to the Loader as
they are, as the reader's lists (io/files): FakeData (its images made by its own draws)
and the sets held in memory as one array of images (CIFAR10, CIFAR100, SVHN, STL10, MNIST
and its kin, USPS), each image read from the array, as made lists; a TensorDataset of
uint8 images and labels; and the sets of image files (ImageFolder, Food101, Flowers102,
Caltech101, ..., timm's ImageDataset over a folder) read from their files, as an
ImageFolder's are.

A set's sample is the image its own `__getitem__` gives (a PIL image, as uint8 HWC RGB
.npy bytes) with its label: an array's layout and labels, or a list's files, are checked
against `__getitem__` when the list is made, and a set they do not match is read through
its `__getitem__` itself (own_sets.items_set). Its `transform` is taken off (the Loader
runs it) and its `target_transform` kept (own_sets.plain_copy, labels_of). Each made list
pickles as its recipe (the set, its transform taken off).
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from .decode._base import is_pil
from .errors import ShardReadError
from .io.files import FileList, made
from .own_sets import (as_numpy, class_names, drawn, is_int, item_pixels, items_of, items_set, label_array, label_attr,
                       labels_of, plain_copy, root_note)
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
        return items_of(plain_copy(ds), "FakeData", f"{tuple(getattr(ds, 'image_size', ()))}, seed offset "
                                                    f"{getattr(ds, 'random_offset', 0)}")
    arr = _array(getattr(ds, "data", None))
    if arr is None or len(arr) != len(ds) or len(arr) == 0:
        return None
    return image_arrays(plain_copy(ds))


def tensor_set(ds: Any, place: int | None = None) -> FileList:
    """torch's TensorDataset(images, labels) (or images alone): uint8 images [N, 3, H, W]
    (torch's layout, looked for first), [N, H, W, 3] or grey [N, H, W] (the Loader's output
    then has one channel, as torchvision's), labels an integer vector. `place`: where it
    stands in a list of sets given together (in its name: two TensorDatasets of one shape
    in a list are two lists).

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
        found = label_array(tensors[1], len(arr))
        if not isinstance(found, np.ndarray):
            raise TypeError(f"Loader() reads a TensorDataset's second tensor as one integer label a sample, not "
                            f"{tensors[1].dtype} {list(tensors[1].shape)}")
        labels = found
    images = _ArrayImages(arr, layout, labels)
    h, w = images.pixels(0).shape[:2] if len(arr) else (0, 0)
    where = "" if place is None else f", item {place} of the list"
    return made(f"TensorDataset({len(arr)} images of {h}x{w}{where})", len(arr), images, "npy", label=images.label,
                rebuild=(tensor_set, (ds, place)), grey=_is_grey(arr, layout))


def file_set(ds: Any) -> FileList | None:
    """A torchvision set of image files that names them in a private list: its (path,
    label) pairs from `_samples` (StanfordCars, GTSRB, Imagenette), `imgs` (Places365), or
    `_image_files` / `_images` beside `_labels` (Food101, Flowers102, DTD, FGVCAircraft,
    SUN397, OxfordIIITPet), or built from its fields as its `__getitem__` builds them
    (Caltech101, Caltech256, INaturalist, CelebA: _named_by_fields), read as an
    ImageFolder's `samples` are (folder_set); None where it has none."""
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
    if not all(is_int(y) for _, y in pairs):
        return items_set(ds, "its labels are not integers")
    check = check or not str(getattr(type(ds).__getitem__, "__module__", "")).startswith("torchvision")
    plain = plain_copy(ds)
    ys = labels_of(ds, [int(y) for _, y in pairs])
    if check and pairs and not _reads_its_files(ds, plain, pairs, ys):  # (the copy probed, read on: one copy)
        return items_set(ds, "its items are not its files' images with their labels", plain=plain)
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
            got_items, drew = drawn(plain, [i])
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
        if got is None or not np.array_equal(got, want) or not is_int(y) or int(y) != ys[i]:  # type: ignore[arg-type]
            return False
    return True


def _array(data: Any) -> np.ndarray | None:
    """A set's `data` as a uint8 numpy array of images ([N, H, W], [N, H, W, C] or
    [N, C, H, W]), or None."""
    data = as_numpy(data)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim not in (3, 4):
        return None
    return data


def _layout(arr: np.ndarray, *, chw_first: bool) -> str:
    """"grey" [N, H, W], "hwc" [N, H, W, 1|3] or "chw" [N, 1|3, H, W] ("" if none): which
    of the two 4-D layouts is looked for first where both fit (torch's own, for tensors)."""
    if arr.ndim == 3:
        return "grey"
    order = ("chw", "hwc") if chw_first else ("hwc", "chw")
    return next((k for k in order if arr.shape[1 if k == "chw" else 3] in (1, 3)), "")


def _is_grey(arr: np.ndarray, layout: str) -> bool:
    """The set's images have one channel (MNIST's [N, H, W]): the Loader's output then has
    one, as torchvision's."""
    return layout == "grey" or arr.shape[1 if layout == "chw" else 3] == 1


def _split(ds: Any) -> str:
    if isinstance(getattr(ds, "train", None), bool):
        return "train" if ds.train else "test"
    split = getattr(ds, "split", None)
    return split if isinstance(split, str) else ""


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
    images; else through `__getitem__` (items_of)."""
    from .decode.cpu import pil_pixels

    arr, name, split = _array(plain.data), type(plain).__name__, _split(plain)
    if arr is None:  # (its data no longer an array of images: rebuilt after it changed)
        return items_of(plain, name, split)
    n, layout = len(arr), _layout(arr, chw_first=False)
    labels = label_attr(plain, n)
    if not layout or labels is False:
        return items_of(plain, name, split)
    if isinstance(labels, np.ndarray) and getattr(plain, "target_transform", None) is not None:
        labels = np.asarray(labels_of(plain, labels.tolist()), dtype=np.int64)
    images = _ArrayImages(arr, layout, labels if isinstance(labels, np.ndarray) else None)
    for i in sorted({0, n // 2, n - 1}):
        img, y = plain[i]
        if not is_pil(img) or not np.array_equal(pil_pixels(img), images.pixels(i)) or \
                (images.labels is not None and (not is_int(y) or int(y) != images.labels[i])):
            return items_of(plain, name, split)
    h, w = images.pixels(0).shape[:2]
    return made(f"{name}({n} images of {h}x{w}{', ' + split if split else ''}{root_note(plain)})", n, images, "npy",
                label=images.label, classes=class_names(plain),
                rebuild=(image_arrays, (plain,)), grey=_is_grey(arr, layout))


