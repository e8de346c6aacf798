"""Datasets that hold no files to read, as made file lists (io/files.made): torchvision's
FakeData (its images made by its own draws) and its sets held in memory as one array of
images (CIFAR10, CIFAR100, SVHN, STL10, MNIST and its kin, USPS), each image read from the
array; and torch's TensorDataset of uint8 images and labels.

A torchvision set's sample is the image its own `__getitem__` gives (a PIL image, as uint8
HWC RGB .npy bytes) with its label: an array's layout and labels are checked against
`__getitem__` when the list is made, and a set they do not match is read through its
`__getitem__` itself. Each list pickles as its recipe (the set, transforms taken off).
"""
from __future__ import annotations

import copy
import os
import warnings
from typing import Any

import numpy as np

from .decode._base import is_pil
from .errors import ShardReadError
from .io.files import FileList, made
from .tensors import encode_npy


def vision_set(ds: Any) -> FileList | None:
    """`ds` as a made list, if it is a torchvision dataset without files (FakeData, or an
    in-memory set); None for any other (ImageFolder: its files are read).

    Raises:
        TypeError: a target_transform set (the labels are the set's own), or items that
            are not (a PIL image, an integer label).
    """
    if not any(c.__module__.startswith("torchvision.datasets") for c in type(ds).__mro__):
        return None
    if any(c.__name__ == "FakeData" for c in type(ds).__mro__):
        return _items(_plain(ds), "FakeData", f"{tuple(getattr(ds, 'image_size', ()))}, seed offset "
                                              f"{getattr(ds, 'random_offset', 0)}")
    arr = _array(getattr(ds, "data", None))
    if arr is None or len(arr) != len(ds) or len(arr) == 0:
        return None
    return image_arrays(_plain(ds))


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
    SUN397, OxfordIIITPet), read as an ImageFolder's `samples` are (the files decoded here,
    its classes kept); None where it has none. Its first and last items are checked
    against its own `__getitem__` (that image, that label) when the list is made.

    Raises:
        TypeError: its items are not its files' images with integer labels (another
            target type, or a set that changes them: give the (path, label) pairs).
    """
    from .io.files import folder_samples

    pairs = None
    for attr in ("_samples", "imgs"):
        v = getattr(ds, attr, None)
        if isinstance(v, list) and v and all(isinstance(x, tuple) and len(x) == 2 for x in v[:1]):
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
    plain = _plain(ds)
    from PIL import Image

    for i in sorted({0, len(pairs) - 1}):
        path, label = pairs[i]
        try:
            img, y = plain[i]
            with Image.open(path) as own:
                same = is_pil(img) and np.array_equal(np.asarray(img.convert("RGB")), np.asarray(own.convert("RGB")))
        except OSError as e:  # (a file named that is not there, or not an image: the set's, named)
            raise ShardReadError(f"{type(ds).__name__}'s item {i} cannot be read: {type(e).__name__}: {e}",
                                 shard=os.fspath(path)) from e
        if not same or not _is_int(y) or not _is_int(label) or int(y) != int(label):
            raise TypeError(f"Loader() reads a {type(ds).__name__} from its image files, but its item {i} is not "
                            f"({os.fspath(path)!r}, {label!r}) as read (another target type, or items it changes): "
                            "give the (path, label) pairs yourself")
    return folder_samples(ds, [(p, int(y)) for p, y in pairs])


def _plain(ds: Any) -> Any:
    """A shallow copy of `ds` without its transform (the Loader runs it: Loader() takes
    the set's transform when given none)."""
    if getattr(ds, "target_transform", None) is not None:
        raise TypeError(f"Loader() cannot apply this {type(ds).__name__}'s target_transform (labels are read as the "
                        "set gives them): map the labels in your loop.")
    plain = copy.copy(ds)
    plain.transform = None
    if getattr(plain, "transforms", None) is not None:  # (VisionDataset's transform and target_transform together)
        plain.transforms = None
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
    """An in-memory set (transforms taken off: _plain) read from its array, where its
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
    """Sample i of a set through its own `__getitem__`: (a PIL image, a label)."""

    def __init__(self, plain: Any) -> None:
        self.plain = plain

    def __call__(self, i: int) -> tuple[bytes, int]:
        from .decode.cpu import pil_pixels

        img, label = self.plain[i]
        if not is_pil(img) or not _is_int(label):
            raise TypeError(f"item {i} is ({type(img).__name__}, {type(label).__name__}), not (a PIL image, an "
                            "integer label)")
        return encode_npy(np.ascontiguousarray(pil_pixels(img))), int(label)


def _items(plain: Any, name: str, detail: str) -> FileList:
    """A set read through its `__getitem__`, item by item; its first item checked here.

    Raises:
        TypeError: its items are not (a PIL image, an integer label)."""
    make = _Items(plain)
    if len(plain):
        try:
            make(0)
        except TypeError as e:
            raise TypeError(f"Loader() reads a {name} as (image, label) items: {e}") from None
    return made(f"{name}({len(plain)}{', ' + detail if detail else ''}{_root(plain)})", len(plain), make, "npy",
                classes=_names(plain), rebuild=(_items, (plain, name, detail)))


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
