"""The Loader's arguments checked and made into its parts (`pipeline_config`, the source
a torch Dataset stands for, the default seed), what a saved state must agree on
(`resume_keys`) and what `Loader.describe()` says: what loader.py's class would otherwise
hold besides its own work."""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import os
import sys
import warnings
from typing import TYPE_CHECKING, Any

import torch

from ._manifest import _read_json, manifest_path
from .decode import check_device, check_spec
from .errors import GpuDecodeError, LabelError, Skipped, TransformError
from .fields import FieldSpec, field_specs
from .transforms.targets import ConvertBoundingBoxFormat, SanitizeBoundingBoxes
from .io import files as _files
from .io.files import file_cap
from .io import shards as _shards
from .io.epoch import Source
from .io.reader import ShardReader, split_exts
from .mixing import BatchTransform, CutMix, MixUp, RandomChoice, as_batch_transform
from .pipeline import PipelineConfig
from .transforms import Compose, Views
from .transforms.base import fingerprint_text, step_name
from .transforms.convert import carries_compose
from .transforms.masks import refusal as mask_refusal
from .transforms.stored import RECORD

if TYPE_CHECKING:
    from .loader import Loader


def views(transform: Any) -> Compose | list[Compose]:
    """A Compose (converted from torchvision's), or a list of them: several views of each
    image, each with its own fixed output size (the views' batches are stacked apart).
    None: no augmentation (images decoded as they are: uint8, each at its own size)."""
    if transform is None:
        return Compose([])
    if isinstance(transform, (list, tuple)):
        whole = [isinstance(t, Compose) or type(t).__name__ == "Compose" or carries_compose(t) for t in transform]
        if transform and not any(whole):  # a list of steps (a Compose's .transforms): one transform
            return _one(list(transform))
        if not all(whole):
            raise TransformError(
                "transform=[...] mixes whole transforms and single steps: give one Compose (a list of steps is "
                "read as one), or one Compose per view for several views of each image")
        views = [v for t in transform for v in ([t] if isinstance(t, Compose) else Views.from_torchvision(t))]
        if not views:
            raise TransformError("transform=[]: give one transform, or one per view")
        for v, tf in enumerate(views):
            if tf.plan.out_size is None:
                raise TransformError(f"view {v} has no size of its own (no RandomResizedCrop, CenterCrop, RandomCrop "
                                     "or Resize to a fixed size): with several views each needs one")
        return views
    return transform if isinstance(transform, Compose) else _one(transform)


def _one(transform: Any) -> Compose | list[Compose]:
    """One transform of torchvision's (or a list of steps) converted: a Compose, or, where it
    holds a FiveCrop or TenCrop, one view a crop (transforms.crops)."""
    views = Views.from_torchvision(transform)
    return views[0] if len(views) == 1 else list(views)


# DataLoader's arguments the Loader does not take, and what it does in their place
DATALOADER_ONLY = {
    "sampler": "the Loader orders and splits an epoch itself: shuffle= and seed= (each rank's share from "
               "rank=/world_size= or torchrun's), repeated_augs= for RASampler, split='elastic' to resume on "
               "another world size; for an order of your own, give the samples in that order (a list of paths)",
    "batch_sampler": "the Loader makes batches of batch_size itself (drop_last= for the last one)",
    "collate_fn": "the fused kernel writes each batch as one tensor; a step on each finished batch (MixUp, "
                  "CutMix, a callable of yours) is batch_transform=",
    "worker_init_fn": "the Loader's workers are threads of this process: nothing to initialise; seed= fixes "
                      "every draw",
    "generator": "seed= fixes every draw (with the epoch and the sample's position)",
    "multiprocessing_context": "the Loader's workers are threads, not processes",
    "timeout": "a read that stalls is the remote= options' (timeouts and retries of remote shards)",
    "pin_memory_device": "batches are made on device= itself",
    "in_order": "batches always come in order (the same for any number of threads)",
}


def dataset_source(urls: Any, transform: Any, place: int | None = None) -> tuple[Any, Any]:
    """A torch Dataset given as the source, as the list of samples the reader reads
    (vision_sets.py, own_sets.py), with its `transform` when none is given (taken off the
    set: the Loader runs it): torchvision's ImageFolder or DatasetFolder read as it lies, its
    `samples` ((path, label) pairs: its classes, extensions and is_valid_file already
    applied) on the reader threads; FakeData's images made; torchvision's in-memory sets
    (CIFAR10, MNIST, ...) and a TensorDataset read from their arrays, its sets of files
    named in private lists (Food101, ...) from their files; a Hugging Face
    `datasets.Dataset`'s rows from its Arrow table (io/parquet.hf_dataset); a Subset is its
    set's samples at its indices, a ConcatDataset or a list of datasets (or a mixture of
    Sources of them) each one's; any other map-style Dataset (a script's own, a set whose
    items are not its files', an object with `__getitem__` and `__len__` that is no
    Dataset, as DataLoader takes) through its own `__getitem__`; an IterableDataset refused.
    A tensor or array of images, or a value that names no source, is refused. Anything else
    passes as it is. `place`: the set's place in a list of them, in the
    name of a set read through `__getitem__` (two sets of one class, told apart)."""
    import numpy as np
    import torch.utils.data

    if _hf_dataset(urls):
        from .io.parquet import hf_dataset

        return hf_dataset(urls), transform
    if isinstance(urls, torch.utils.data.ConcatDataset):
        return _several(list(urls.datasets), transform)
    if isinstance(urls, (list, tuple)) and any(_is_dataset(u) or isinstance(u, Source) and _is_dataset(u.urls)
                                               for u in urls):
        return _several(list(urls), transform)
    if type(urls).__name__ in ("DatasetDict", "IterableDatasetDict") and type(urls).__module__.startswith("datasets"):
        raise TypeError(f"Loader() reads one split of a Hugging Face {type(urls).__name__}: give "
                        f"ds[{next(iter(urls), 'train')!r}] (its splits: {', '.join(map(str, urls))})")
    if isinstance(urls, torch.Tensor) or (isinstance(urls, np.ndarray) and urls.dtype.kind in "biuf"):
        raise TypeError(f"Loader() reads images held in one {type(urls).__name__} as torch.utils.data.TensorDataset("
                        "images, labels): uint8 [N, 3, H, W], [N, H, W, 3] or [N, H, W] (give labels=False for "
                        "images alone)")
    if not _is_dataset(urls):
        if not isinstance(urls, (str, os.PathLike, ShardReader)) and not hasattr(urls, "__iter__"):
            raise TypeError(f"Loader() reads shards, image folders, files or a Dataset, not a value of type "
                            f"{type(urls).__name__}")
        return urls, transform
    if isinstance(urls, torch.utils.data.Subset):  # random_split's parts: the set's samples at its indices
        return subset_source(urls, transform)
    if isinstance(urls, torch.utils.data.TensorDataset):  # images and labels as tensors of one's own
        from .vision_sets import tensor_set

        return tensor_set(urls, place), transform
    if isinstance(urls, torch.utils.data.IterableDataset):
        raise TypeError(f"Loader() reads a Dataset by index, not an IterableDataset ({type(urls).__name__}): give "
                        "its shards, image folder, files or (path, label) pairs")
    from .own_sets import items_set, path_set, plain_copy
    from .vision_sets import file_set, folder_set, timm_set, vision_set

    samples = getattr(urls, "samples", None)
    made: Any
    if isinstance(samples, list) and all(isinstance(s, tuple) and len(s) == 2 for s in samples[:1]):
        made = folder_set(urls)  # ImageFolder, DatasetFolder: its files
    else:
        made = vision_set(urls)  # FakeData (`--dummy`), CIFAR10, MNIST, ...: no files, images made or in memory
        if made is None and getattr(urls, "loader", None) in (None, _torchvision_loader()):
            made = file_set(urls)  # Food101, Flowers102, ...: files named in a private list
        if made is None:
            made = timm_set(urls)  # timm's create_dataset(name, root) for a folder
        if made is None:  # a script's own Dataset: from its files where it names them, else through __getitem__
            plain = plain_copy(urls)
            made = path_set(urls, place, plain)
            made = items_set(urls, place=place, plain=plain) if made is None else made
    return made, transform if transform is not None else getattr(urls, "transform", None)


def _torchvision_loader() -> Any:
    """torchvision's default_loader (what a set given no loader= opens its files with), or
    a stand-in where torchvision is not installed."""
    try:
        from torchvision.datasets.folder import default_loader
    except ImportError:
        return object()
    return default_loader


def _hf_dataset(x: Any) -> bool:
    return type(x).__name__ == "Dataset" and type(x).__module__.startswith("datasets")  # Hugging Face's


def _is_dataset(x: Any) -> bool:
    """A torch Dataset, a Hugging Face one, or an object of a class of its own with
    `__getitem__` and `__len__` that is not a kind of source the Loader names otherwise
    (DataLoader takes such an object as a map-style set)."""
    import numpy as np
    import torch.utils.data

    if isinstance(x, ShardReader):
        return False
    if isinstance(x, torch.utils.data.Dataset) or _hf_dataset(x):
        return True
    named = (str, bytes, os.PathLike, list, tuple, dict, Source, np.ndarray, torch.Tensor)
    listed = type(x).__module__.startswith("pandas") and type(x).__name__ in ("Series", "Index")  # (paths, as a list)
    return not isinstance(x, named) and not isinstance(x, type) and not listed and \
        hasattr(type(x), "__getitem__") and hasattr(type(x), "__len__")


def _several(items: list, transform: Any) -> tuple[Any, Any]:
    """A list (or ConcatDataset) of datasets, other sources beside them, or a mixture of
    gpudecode.Source whose urls are datasets: each dataset read as dataset_source reads it
    (its own list: its own labels, as ConcatDataset gives them); their transform, the one
    they agree on when none is given.

    Raises:
        TypeError: datasets with different transforms and no transform= given."""
    out: list = []
    theirs: list = []
    whose: dict[str, Any] = {}  # a made list's name -> the set it was made of
    for k, item in enumerate(items):
        src = item.urls if isinstance(item, Source) else item
        if _is_dataset(src):
            got, tf = dataset_source(src, None)
            name = getattr(got, "name", None)
            if name in whose and whose[name] is not src:  # (two sets of one class read through __getitem__)
                got, tf = dataset_source(src, None, place=k)
            whose[getattr(got, "name", "")] = src
            theirs.append(tf)
            src = got
        out.append(dataclasses.replace(item, urls=src) if isinstance(item, Source) else src)
    if transform is None:
        distinct = {repr(t): t for t in theirs if t is not None}
        if len(distinct) > 1 or (distinct and None in theirs):
            raise TypeError("Loader() was given datasets with different transforms (" +
                            "; ".join(repr(t).replace("\n", " ") for t in theirs) + "): give the one to run as "
                            "transform=")
        transform = next(iter(distinct.values()), None)
    return out, transform


def subset_source(sub: Any, transform: Any = None) -> tuple[Any, Any]:
    """A torch Subset (random_split's parts) of any Dataset dataset_source reads: its set's
    samples at its indices, in their order (files.taken); the set's transform when none is
    given, as the Subset's items have it.

    Raises:
        TypeError: the set is not one a Loader reads. IndexError: an index out of range."""
    from .io.files import FileList, taken

    base, tf = dataset_source(sub.dataset, transform)
    if not isinstance(base, FileList):
        raise TypeError(f"Loader() reads a Subset of a Dataset, not of a {type(sub.dataset).__name__}")
    return taken(base, sub.indices, rebuild=(_subset_list, (sub,))), tf


def _subset_list(sub: Any) -> Any:
    """A Subset's made list again (what one pickles as)."""
    return subset_source(sub)[0]


def refuse_dataloader_only(given: dict) -> None:
    """DataLoader's arguments the Loader does not take are refused with what it does
    instead; any other unknown argument as Python refuses it."""
    for name in given:
        if name in DATALOADER_ONLY:
            raise TypeError(f"Loader() takes no {name}= (a DataLoader argument): {DATALOADER_ONLY[name]}.")
        raise TypeError(f"Loader() got an unexpected keyword argument {name!r}")


def resume_keys(reader: ShardReader, config: PipelineConfig, ds: dict, batch_size: int, seed: int | None,
                 strict: bool) -> tuple[list[tuple[str, object]], bool]:
    """What a saved state must agree on to resume on this Loader, and whether an elastic
    state is regridded (another world size or batch size: split="elastic" allows it)."""
    rank, world = reader.placement()
    elastic = reader.resumes_anywhere and ds.get("split") == reader.mode()
    mine: list[tuple[str, object]] = [("split", reader.mode()), ("shards", len(reader.urls)), ("shuffle", reader.shuffle)]
    if not elastic:  # an elastic state resumes on another world size and batch size (and the even policy that
        mine += [("world_size", world), ("batch_size", batch_size), ("even", reader.even)]  # goes with its own)
    if seed is not None:
        mine.append(("seed", seed))
    if "fingerprint" in ds:  # (states saved before it was kept have none)
        mine.append(("fingerprint", reader.inputs.fingerprint()))
    if "transform" in ds and strict:
        mine.append(("transform", transforms_fingerprint(config)))
    return mine, elastic and (ds.get("world_size"), ds.get("batch_size")) != (world, batch_size)


def loader_reader(urls: Any, config: PipelineConfig, policy: Any, **options: Any) -> ShardReader:
    """The Loader's ShardReader of `urls` (its `options`: shuffle, seed, ranks, split, ...):
    the members the pipeline reads (images, labels, fields; where masks or boxes follow the
    images, the record of a precached image's resize: transforms.stored), each image kind
    read the way the kernel reads it cheapest."""
    fields = [e for f in config.fields for e in f.exts] + ([RECORD] if config.follows else [])
    return ShardReader(urls, num_threads=2, policy=policy,
                       extensions=[*config.image_exts, *config.label_exts, *fields],
                       # tensor samples stay in the mapped shard: the kernel reads them there
                       map_extensions=[e for e in config.image_exts if e == "npy"],
                       # the others are read into recycled memory (no page faults a read)
                       pool_extensions=[e for e in config.image_exts if e != "npy"],
                       # an image file is read only up to what an image of max_pixels can take
                       max_file_bytes=file_cap(config.max_pixels), chunk=config.batch_size, **options)


def grey_output(reader: Any, config: PipelineConfig) -> PipelineConfig:
    """`config` with its transforms for images of one channel (Compose(grey=True)) where
    every source is a grey set's array (MNIST's, a TensorDataset of [N, H, W] images): the
    output has one channel, as torchvision's has for them. A grey set beside sources of
    three channels stays three equal channels, said (torchvision's batch would mix them)."""
    inputs = reader.inputs
    grey = [u for u in inputs.urls if u in inputs.files and inputs.files[u].grey]
    if not grey:
        return config
    if len(grey) < len(inputs.urls):
        warnings.warn(f"{inputs.files[grey[0]].name[len(_files.PREFIX):]}'s images are grey and other sources' have "
                      f"3 channels: the Loader gives the grey ones as 3 equal channels", RuntimeWarning, stacklevel=3)
        return config
    tf = config.transform
    return config.replace(transform=tf.for_grey() if isinstance(tf, Compose) else [v.for_grey() for v in tf])


def check_sources(reader: Any, config: PipelineConfig) -> None:
    """What can be told of the data before reading it, refused now: precached images of
    several sizes for a transform without one; a mixture's sources whose class names
    collide (two trees without label_offset); tree labels a label_offset moves out of range
    (taken later for bad data, a whole source would be skipped under on_error="skip").

    Raises:
        ValueError, TransformError: the reason, naming the source and label_offset."""
    sized = isinstance(config.transform, Compose) and config.transform.plan.out_size is None and config.batch_size > 1
    if sized or config.follows:
        stored = _precached(reader)
        if sized:
            _check_stored_sizes(stored)
        if config.follows:
            _check_stored_records(stored + _remote_precached(reader))
    if config.fields:
        _fields_read_here(reader, config)
    if not config.labels:
        return
    for flist in reader.files.values():
        got = flist.labels[:1] if _files.costly_labels(flist) else flist.labels
        if len(flist) and all(v is None for v in got):
            raise LabelError("its samples have no labels (images alone): give labels=False to read images alone",
                             shard=flist.name[len(_files.PREFIX):])
    if reader.sources is None:
        return
    reader.classes  # noqa: B018  (a label two sources' trees name differently: refused, naming label_offset)
    for src, urls in zip(reader.sources, reader.source_urls):
        labels = [v for u in urls if u in reader.files and not _files.costly_labels(reader.files[u])
                  for v in reader.files[u].labels if v is not None]
        if not src.label_offset or not labels:
            continue
        lo, hi = min(labels), max(labels)  # (a tree's labels carry their offset)
        if (lo < 0 and not config.allow_negative_labels) or (config.num_classes is not None and hi >= config.num_classes):
            bound = "negative" if lo < 0 and not config.allow_negative_labels else f"not below num_classes={config.num_classes}"
            raise ValueError(f"Source {src.label}: label_offset={src.label_offset} makes its labels {lo}..{hi}, "
                             f"{bound}: every one of its samples would be a LabelError")


def _fields_read_here(reader: Any, config: PipelineConfig) -> None:
    """`fields` are a tar sample's other members, or a Parquet file's other columns:
    sources without them (images as they lie, Datasets) are refused, naming the first, and
    so is a Parquet file with no column a field names.

    Raises:
        ValueError: the source, and what it has instead."""
    from .io.parquet import IMAGE_COLUMNS, column_names, is_parquet

    for url in reader.urls:
        flist = reader.files.get(url)
        if flist is None:
            continue
        name = flist.name[len(_files.PREFIX):]
        if flist.extra is None:
            raise ValueError(f"fields: {name!r} is images as they lie (a folder, a list of files or a Dataset), whose "
                             "samples have an image and a label only: fields are read from tar shards "
                             "(WebDataset's layout), whose samples' members they name, from Parquet files' and "
                             "Hugging Face Datasets' columns")
        have = {n.lower() for n in flist.extra_names}
        for f in config.fields:
            if not have.intersection(f.exts):
                raise ValueError(f"fields: {name} has no column {f.name!r} (its other columns: "
                                 f"{', '.join(flist.extra_names) or 'none'})")
    first = next((u for u in reader.urls if is_parquet(u)), None)
    if first is None:
        return
    names = column_names(first)
    have = {n.lower() for n in names if n.lower() not in IMAGE_COLUMNS}
    for f in config.fields:
        if not have.intersection(f.exts):
            raise ValueError(f"fields: the Parquet file {first!r} has no column {f.name!r} (its columns: "
                             f"{', '.join(names)})")


def _precached(reader: Any) -> list[tuple[str, dict]]:
    """The precache manifests beside the reader's local shards that list one of them (in at
    most 16 folders): [(path, manifest)]; a manifest that is not precache's, or a damaged
    one, says nothing here and is left out."""
    names = {os.path.basename(v) for v in reader.urls}
    found: list[tuple[str, dict]] = []
    seen: set[str] = set()
    for u in reader.urls:
        if u in reader.files or not _shards.is_local(u):
            continue
        folder = os.path.dirname(os.path.abspath(_shards.local_path(u)))
        if folder in seen or len(seen) >= 16:
            continue
        seen.add(folder)
        try:
            manifests = [n for n in sorted(os.listdir(folder)) if n.endswith("manifest.json")]
        except OSError:
            continue
        for name in manifests:
            doc = _read_json(os.path.join(folder, name))
            if doc is not None and _manifest_doc(doc, names):  # (not JSON, not a manifest: says nothing here)
                found.append((os.path.join(folder, name), doc))
    return found


def _manifest_doc(doc: Any, names: set[str]) -> bool:
    """Whether `doc` (a JSON document) is a precache manifest listing one of the shards
    `names` (their base names)."""
    try:
        doc["pixels"].get("shape"), doc["transform"]["size"], int(doc["version"])
        return any(os.path.basename(x.get("path", "")) in names for x in doc["shards"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _remote_precached(reader: Any) -> list[tuple[str, dict]]:
    """The precache manifests beside the reader's HTTP(S) shards that list one of them (in
    at most 16 folders): `manifest.json` there, or the one a shard pattern names
    (`train-manifest.json` beside `train-000000-000.tar`), each read once (at most 16 MiB;
    one that is not there, or not a manifest, says nothing). Read only where a Mask or
    Boxes field follows the images: an older set's boxes must not be read unmoved."""
    import json
    import re

    from .io.remote import open_remote

    names = {u.rsplit("/", 1)[-1] for u in reader.urls}
    found: list[tuple[str, dict]] = []
    seen: set[str] = set()
    for u in reader.urls:
        if u.split("://", 1)[0].lower() not in ("http", "https"):
            continue
        folder, name = u.rsplit("/", 1)
        head = re.match(r"(.*?)\d", name)
        pattern = f"{head.group(1) if head else ''}%06d.tar"  # (precache's names: a pattern's manifest beside it)
        for url in dict.fromkeys([f"{folder}/manifest.json", f"{folder}/{manifest_path(pattern)}"]):
            if url in seen or len(seen) >= 32:
                continue
            seen.add(url)
            try:
                with open_remote(url, getattr(reader, "remote", None)) as f:
                    doc = json.loads(f.read(1 << 24))
            except (GpuDecodeError, OSError, ValueError):  # (not there, not JSON: says nothing here)
                continue
            if _manifest_doc(doc, names):
                found.append((url, doc))
    return found


def _check_stored_sizes(stored: list[tuple[str, dict]]) -> None:
    """A transform without a size batches images only of one size: precached shards whose
    manifest says their images differ (crop none) are refused now, not at the first batch."""
    for path, doc in stored:
        if doc["pixels"].get("shape") is None:
            raise TransformError(
                f"these shards were precached with crop none ({path}): their images differ in size (shorter side "
                f"at most {doc['transform']['size']}), and this transform gives them no size to batch at: add a "
                "RandomResizedCrop, CenterCrop or RandomCrop, or precache with --crop center")


def _check_stored_records(stored: list[tuple[str, dict]]) -> None:
    """Masks and boxes follow a precached image by the record precache writes beside it
    (transforms.stored) since the manifest's version 3: shards precached before it, whose
    resized images have none, are refused now, not trained on with boxes where their images
    were before the resize."""
    for path, doc in stored:
        if int(doc["version"]) < 3:
            raise ValueError(
                f"these shards were precached by an older gpudecode ({path}: version {doc['version']}), which did not "
                "record how it resized each image: a Mask or Boxes field cannot be moved onto the stored images; "
                "precache them again with this version")


def _batch_step(step: Any, transform: Compose, labels: bool, num_classes: int | None) -> Any:
    """The batch transform, checked against the rest now (not at the first batch)."""
    if step is None:
        return None
    step = as_batch_transform(step)
    if isinstance(step, BatchTransform):
        step = copy.deepcopy(step)  # num_classes may be filled in below: the caller's object stays as given
        if not labels:
            raise TransformError(f"{step!r} mixes labels too: it needs labels=True")
        if not transform.plan.dtype.is_floating_point:
            raise TransformError(f"{step!r} mixes float images, and this transform ends in {transform.plan.dtype}: "
                                 "end it with Normalize or ToDtype(torch.float32, scale=True)")
        def mixes(s: BatchTransform) -> list[BatchTransform]:
            return [m for t in s.transforms for m in mixes(t)] if isinstance(s, RandomChoice) else [s]

        mixers = [m for m in mixes(step) if isinstance(m, (MixUp, CutMix))]
        given = {m.num_classes for m in mixers if m.num_classes is not None}
        if num_classes is not None:
            given.add(num_classes)
        if len(given) > 1:  # (torch's one_hot would fail at the first batch, naming no sample)
            said = ", ".join(f"{m!r}" for m in mixers) + (f", Loader(num_classes={num_classes})" if num_classes else "")
            raise TransformError(f"the batch transform and the Loader disagree on the number of classes ({said}): "
                                 "give them one num_classes")
        for m in mixers:
            if m.num_classes is None:
                if num_classes is None:
                    raise TransformError(f"{m!r} turns labels into [N, num_classes]: give it num_classes= (or the "
                                         "Loader's num_classes=)")
                m.num_classes = num_classes
    return step


def _mix_classes(step: Any) -> int | None:
    """The num_classes a batch transform (ours, checked by _batch_step) mixes labels into."""
    if isinstance(step, RandomChoice):
        return next((c for c in map(_mix_classes, step.transforms) if c is not None), None)
    return step.num_classes if isinstance(step, (MixUp, CutMix)) else None


def default_seed(world_size: int) -> int:
    """torch.initial_seed(), made the same on every rank: rank 0's is broadcast when
    torch.distributed is initialized (every rank builds its Loader, as it must to read
    its part); otherwise each rank's own is used, and a warning says they must agree."""
    seed = int(torch.initial_seed()) % (1 << 63)
    if world_size <= 1:
        return seed
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        box = [seed]
        dist.broadcast_object_list(box, src=0)
        return int(box[0])
    warnings.warn("gpudecode.Loader(seed=None) with several ranks and torch.distributed not initialized: every "
                  "rank must call torch.manual_seed with the same seed (or pass seed=), or ranks disagree on the "
                  "split", RuntimeWarning, stacklevel=3)
    return seed


def transforms_fingerprint(config: PipelineConfig) -> str:
    """The transforms (views and batch transform) by their repr: a state saved with other
    transforms is refused."""
    parts = [fingerprint_text(v) for v in config.views] + [fingerprint_text(config.batch_transform)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _mix(reader: ShardReader, epoch: int, skipped: list[Skipped]) -> list[dict]:
    """A mixture's sources: their samples, what `epoch` draws of each, and what on_error
    passed over in each this epoch."""
    mix = reader.mixture(epoch)
    for m in mix:
        m["skipped"] = 0
    for sk in skipped:
        i = reader.source_of(sk.shard) if sk.shard else None
        if i is not None:
            mix[i]["skipped"] += 1
    return mix


def pipeline_config(transform: Any, batch_transform: Any, *, batch_size: int, device: Any, decoder: Any,
                     image_ext: Any, label_ext: Any, labels: bool, num_classes: int | None,
                     allow_negative_labels: bool, workers: tuple[int | None, int | None],
                     ahead: tuple[int | None, int | None], max_pixels: int, fast_decode: bool, pin_memory: bool,
                     reuse_buffers: bool, fields: Any = None) -> PipelineConfig:
    """The Loader's arguments for its pipeline, checked (a missing decoder extra, a batch
    transform that cannot mix this transform's output: said now, not at the first batch).
    `workers`: (num_workers, num_threads), `ahead`: (prefetch_factor, prefetch), each pair
    a name and its older one."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
    if None not in workers and workers[0] != workers[1]:
        raise ValueError("give num_workers or num_threads (its older name), not both")
    if None not in ahead and ahead[0] != ahead[1]:
        raise ValueError("give prefetch_factor or prefetch (its older name), not both")
    threads = workers[0] if workers[0] is not None else workers[1]
    if threads is not None and threads < 0:
        raise ValueError(f"num_workers must be >= 0, not {threads}")
    prefetch = ahead[0] if ahead[0] is not None else (ahead[1] if ahead[1] is not None else 2)
    if prefetch < 1:
        raise ValueError(f"prefetch_factor must be >= 1, not {prefetch}")
    device = check_device(device)
    transform = views(transform)
    if isinstance(transform, list) and batch_transform is not None:
        raise TransformError("batch_transform with several views is not supported (MixUp and CutMix mix one "
                             "view's batch): use one transform, or mix each view's batch in your loop")
    check_spec(decoder, device)  # (a name, names or shares: refused now, with the reason; nothing made yet)
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                    or num_classes < 1):
        raise ValueError(f"num_classes must be a positive int, not {num_classes!r}")
    step = None if isinstance(transform, list) else _batch_step(batch_transform, transform, labels, num_classes)
    if num_classes is None and step is not None:
        # MixUp/CutMix's classes bound the labels: one past them is that sample's LabelError, not torch's
        num_classes = _mix_classes(step)
    if pin_memory and device == "cpu" and not torch.cuda.is_available():
        warnings.warn("pin_memory=True, but torch sees no CUDA device: batches come in ordinary (pageable) "
                      "memory", UserWarning, stacklevel=3)
    image_exts = tuple(split_exts(image_ext))
    default = image_exts == tuple(_files.DEFAULT_IMAGE_EXTS)
    # (a field named by one of the default image extensions, npy most often, is that field: the
    # images are the other extensions; an image_ext given that names it is refused, by field_specs)
    specs = field_specs(fields, () if default else image_exts)
    if default:
        taken = {e for f in specs for e in f.exts}
        image_exts = tuple(e for e in image_exts if e not in taken)
    if any(f.mask is not None for f in specs):
        _masks_follow(transform, step)
    if any(f.boxes is not None for f in specs):
        _boxes_follow(transform, step)
    _boxes_drawn_from(specs, transform)
    _ragged_alone(transform, step)
    for v, tf in enumerate(transform if isinstance(transform, list) else [transform]):
        why = tf.plan.over_limit(max_pixels)  # (the images' own sizes: each batch's, Pipeline._same_size)
        if why is not None:
            at = f"view {v}: " if isinstance(transform, list) else ""
            raise TransformError(f"{at}{why} (max_pixels): raise the Loader's max_pixels to allow them")
    specs = _box_steps(specs, transform)
    return PipelineConfig(transform, batch_size=batch_size, device=device, decoder=decoder,
                          image_exts=image_exts, fields=specs,
                          label_exts=tuple(split_exts(label_ext)) if labels else (), labels=labels,
                          num_classes=num_classes, allow_negative_labels=bool(allow_negative_labels),
                          ring=prefetch + 3, num_threads=max(1, threads) if threads is not None else (os.cpu_count() or 1),
                          max_pixels=max_pixels, fast_decode=fast_decode, pin_memory=bool(pin_memory),
                          batch_transform=step, reuse_held=bool(reuse_buffers))


def _masks_follow(transform: Any, step: Any) -> None:
    """A Mask field follows its image through crops, resizes, padding, flips and warps: a
    transform that moves pixels otherwise, and a batch transform that mixes images, are
    refused (TransformError), with the step named."""
    for v, tf in enumerate(transform if isinstance(transform, list) else [transform]):
        why = mask_refusal(tf.plan)
        if why is not None:
            at = f" (view {v})" if isinstance(transform, list) else ""
            raise TransformError(f"fields: a Mask cannot follow its image{at}: {why}; a mask follows crops, "
                                 "resizes, padding, flips, RandomZoomOut's canvas, rotations, affine and "
                                 "perspective warps and ElasticTransform")
    if isinstance(step, BatchTransform):
        raise TransformError(f"fields: a Mask cannot follow its image through {step!r}, which mixes images "
                             "(a mixed image has no one mask): mix in your loop where your masks allow it")


def _boxes_follow(transform: Any, step: Any) -> None:
    """Boxes follow their image through crops, resizes, padding, flips and warps, in each
    view: a transform that moves pixels otherwise, and a batch transform that mixes images,
    are refused (TransformError), with the step named."""
    for v, tf in enumerate(transform if isinstance(transform, list) else [transform]):
        why = mask_refusal(tf.plan)
        if why is None:
            continue
        at = f" (view {v})" if isinstance(transform, list) else ""
        raise TransformError(f"fields: Boxes cannot follow their image{at}: {why}; boxes follow crops, resizes, "
                             "padding, flips, RandomZoomOut's canvas, rotations, affine and perspective "
                             "warps and ElasticTransform")
    if isinstance(step, BatchTransform):
        raise TransformError(f"fields: Boxes cannot follow their image through {step!r}, which mixes images: mix "
                             "in your loop where your boxes allow it")


def _ragged_alone(transform: Any, step: Any) -> None:
    """A transform whose images keep their own sizes (Compose(ragged=True)) gives batches of
    one view as RaggedBatch lists, with Boxes and Mask fields (a Mask's batch a RaggedBatch
    too) and labels: several views and a batch transform of ours (which mixes a batch
    tensor) are refused with it (TransformError)."""
    tfs = transform if isinstance(transform, list) else [transform]
    if not any(getattr(tf, "ragged", False) for tf in tfs):
        return
    if isinstance(transform, list):
        raise TransformError("a Compose with ragged=True gives one view's images at their own sizes: several views "
                             "are not supported with it (give one transform)")
    if isinstance(step, BatchTransform):
        raise TransformError(f"batch_transform {step!r} mixes a batch tensor, and ragged=True gives images of their "
                             "own sizes (a RaggedBatch): mix in your loop where the sizes allow it")


def _boxes_drawn_from(specs: tuple[FieldSpec, ...], transform: Any) -> None:
    """A transform that draws its crops from the samples' boxes (RandomIoUCrop) needs one
    Boxes field to draw them from: none, or several, is refused (TransformError)."""
    if not any(tf.plan.reads_boxes for tf in (transform if isinstance(transform, list) else [transform])):
        return
    boxed = [f.name for f in specs if f.boxes is not None]
    if len(boxed) != 1:
        raise TransformError("fields: RandomIoUCrop draws its crop from each sample's boxes, and "
                             + ("no field is one: name the boxes member, e.g. fields={\"json\": "
                                "gpudecode.Boxes(\"XYWH\")}" if not boxed else
                                f"{len(boxed)} fields are ({', '.join(boxed)}): give one Boxes field"))


def _box_steps(specs: tuple[FieldSpec, ...], transform: Any) -> tuple[FieldSpec, ...]:
    """The fields with what the transform says of its boxes (SanitizeBoundingBoxes,
    ConvertBoundingBoxFormat: transforms.targets) in its Boxes field.

    Raises:
        TransformError: such steps and no Boxes field (nothing moves the boxes they are
            about), or a Boxes field that says otherwise."""
    plans = [tf.plan for tf in (transform if isinstance(transform, list) else [transform])]
    said = next((p for p in plans if p.box_format is not None or p.box_sizes is not None), None)
    if said is None:
        return specs
    if len({(p.box_format, p.box_sizes) for p in plans}) > 1:
        raise TransformError("fields: the views' SanitizeBoundingBoxes and ConvertBoundingBoxFormat differ: one Boxes "
                             "field hands out one format and drops boxes by one rule, so give every view the same")
    if not any(f.boxes is not None for f in specs):
        steps = [type(t).__name__ for t in said.steps if isinstance(t, (SanitizeBoundingBoxes, ConvertBoundingBoxFormat))]
        raise TransformError(f"fields: the transform's {' and '.join(dict.fromkeys(steps))} set what a "
                             "gpudecode.Boxes field hands out, and no field is one: name the boxes member, e.g. "
                             "fields={\"json\": gpudecode.Boxes(\"XYWH\")}")
    return tuple(FieldSpec(f.exts, f.boxes.following(said)) if f.boxes is not None else f for f in specs)


def describe(loader: Loader) -> dict:
    """Loader.describe(), from the Loader's public attributes."""
    pipe, reader = loader.pipeline, loader.reader
    plans, multi = [tf.plan for tf in pipe.views], pipe.multi
    return {"device": loader.device, "decoder": pipe.decoder_name(),
            # what actually decodes (the library, GPU, hardware or CPU), once the decoder is made
            "decoder_backend": getattr(pipe.decoder, "backend", None) if pipe.decoder is not None else None,
            # a split decoder's engines: each one's images, share, rate and idle time so far
            **({"decoder_engines": pipe.decoder.engine_stats()} if hasattr(pipe.decoder, "engine_stats") else {}),
            # what the decoder sent elsewhere (the PNG decoder: interlaced images to libpng, ...)
            **({"decoder_detours": pipe.decoder.detours()} if hasattr(pipe.decoder, "detours") else {}),
            # a tuned split (decoder="auto" on CUDA): the engines decoding now, each subset's measured rate
            **({"decoder_tuning": pipe.decoder.tuning()} if getattr(pipe.decoder, "tuning", lambda: None)() else {}),
            "num_threads": loader.num_threads, "prefetch": loader.prefetch,
            "batch_size": loader.batch_size, **reader.inputs.describe(), "split": reader.mode(),
            # (None: each image its own size; "ragged": batches of them, RaggedBatch lists of one padded batch)
            "out_size": [p.out_size for p in plans] if multi else "ragged" if plans[0].ragged else plans[0].out_size,
            "dtype": [str(p.dtype) for p in plans] if multi else str(plans[0].dtype),
            # the images' channels: 1 after a Grayscale(1), or for a grey set (MNIST's), as torchvision's; else 3
            "channels": [p.channels for p in plans] if multi else plans[0].channels,
            # what runs fused, per view (several views: one list each)
            "transform": ([[step_name(t) for t in p.steps] for p in plans] if multi
                          else [step_name(t) for t in plans[0].steps]),
            "views": len(plans), "fast_decode": pipe.config.fast_decode,
            # each element of a batch, by name: images, labels, then each field (fields=)
            "batch": list(pipe.config.batch_names),
            **({"mix": _mix(reader, loader.current_epoch, loader.skipped)} if reader.sources is not None else {}),
            # what runs after the fused kernel, on the finished batch
            "after": [] if loader.batch_transform is None else [repr(loader.batch_transform)],
            # where the set lives between epochs (keep=): the store's tier and bytes, or why it streams
            "keep": loader.keeper.describe()}
