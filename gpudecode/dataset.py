"""`Loader.dataset`: the samples of a Loader's shards by index, as a map-style dataset.

Index i is the i-th sample of the shards in their given (unshuffled) order, counted as
the reader counts them. `dataset[i]` reads that sample, decodes its image on the CPU and
applies the Loader's transform (its random draws fixed by (seed, epoch 0, i)), giving
(image [3, h, w], label) as torchvision's ImageFolder would. It is what DataLoader code
reaches for beside a loader: `len(loader.dataset)`, `torch.utils.data.Subset(loader.dataset,
...)` for the remainder of a distributed evaluation, a plain DataLoader over it.

Local shards are indexed once per process (the last 64 kept); a remote shard is read
through up to the sample (give the Loader a cache_dir to make that a local read).
"""
from __future__ import annotations

import bisect
import os
import threading
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np
import torch

from . import _native
from .errors import ErrorPolicy, ShardReadError
from .io import shards as _shards
from .io.files import iter_files
from .io.reader import Grouper, Sample, ShardReader, iter_shard
from .io.tario import index_file, split_key

_INDEXES = 64


class ShardDataset(torch.utils.data.Dataset):
    """Every sample of a reader's shards by index (see the module doc)."""

    def __init__(self, reader: ShardReader, transform: Any, *, image_exts: Sequence[str],
                 label_exts: Sequence[str], labels: bool, max_pixels: int, seed: int,
                 allow_negative_labels: bool = False, num_classes: int | None = None) -> None:
        self.reader = reader
        self.transform = transform
        self.image_exts = list(image_exts)
        self.label_exts = list(label_exts)
        self.labels = labels
        self.max_pixels = max_pixels
        self.seed = seed
        self.allow_negative_labels = allow_negative_labels
        self.num_classes = num_classes
        counts = reader.sample_counts()
        self._starts: list[int] = []
        total = 0
        for u in reader.urls:
            self._starts.append(total)
            total += counts[u]
        self._total = total
        self._local()

    @property
    def classes(self) -> list[str]:
        """The class names, as torchvision's ImageFolder gives them (class i is
        classes[i]): an ImageFolder tree's folders, or for shards the class index that
        `gpudecode shard` wrote beside them (`<prefix>-classes.json`); [] when neither."""
        names = self.reader.classes
        if names:
            return names
        return _shard_classes(self.reader.urls)

    @property
    def class_to_idx(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.classes)}

    def _local(self) -> None:  # per-process state, made anew after unpickling
        self._lock = threading.Lock()
        self._indexes: OrderedDict[str, list] = OrderedDict()
        self._decoder: Any = None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_indexes", "_decoder")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._local()

    def __len__(self) -> int:
        return self._total

    def locate(self, index: int) -> tuple[str, int]:
        """(shard, sample index in that shard) of dataset index `index`."""
        if not -self._total <= index < self._total:
            raise IndexError(f"index {index} is out of range for {self._total} samples")
        index %= self._total
        k = bisect.bisect_right(self._starts, index) - 1
        while self.reader.sample_counts()[self.reader.urls[k]] == 0:  # empty shards share a start
            k += 1
        return self.reader.urls[k], index - self._starts[k]

    def _members(self, url: str) -> list:
        """Per sample of a local shard: its members (name, offset, size, type)."""
        with self._lock:
            found = self._indexes.get(url)
            if found is not None:
                self._indexes.move_to_end(url)
                return found
        with open(_shards.local_path(url), "rb") as f:
            members, _, _ = index_file(f.fileno(), os.fstat(f.fileno()).st_size)
        grouper = Grouper()
        by_sample: list[list] = []
        for m in members:
            g = grouper.group(m.name)
            if g is None:
                continue
            if g == len(by_sample):
                by_sample.append([])
            by_sample[g].append(m)
        with self._lock:
            self._indexes[url] = by_sample
            while len(self._indexes) > _INDEXES:
                self._indexes.popitem(last=False)
        return by_sample

    def sample(self, index: int) -> Sample:
        """The raw sample at `index` (bytes of its image and label fields)."""
        url, j = self.locate(index)
        wanted = set(self.image_exts) | set(self.label_exts)
        flist = self.reader.files.get(url)
        if flist is not None:  # an image file: index j of its list
            for path, _, fields, err in iter_files(flist, [j], 0, 1, extensions=frozenset(wanted),
                                                   max_bytes=self.reader.max_file_bytes):
                if err is not None:
                    raise err
                return Sample(flist.keys[j], fields, path, j)
        if _shards.is_local(url) and not url.endswith((".tgz", ".tar.gz")):
            members = self._members(url)[j]
            key = split_key(members[0].name)[0]  # type: ignore[index]
            exts = [(split_key(m.name) or ("", ""))[1] for m in members]
            take = [(e, m) for e, m in zip(exts, members) if e in wanted and m.type == "0"]
            with open(_shards.local_path(url), "rb") as f:  # the reader's native ranged read
                datas, got, error = _native.read_ranges(f.fileno(), np.array([m.offset for _, m in take], np.int64),
                                                        np.array([m.size for _, m in take], np.int64))
            if len(datas) < len(take):  # the shard shrank (or failed) since it was indexed
                m = take[len(datas)][1]
                raise ShardReadError(error or f"shard shrank while being read: member {m.name!r} needs {m.size} "
                                     f"bytes at offset {m.offset}, {got} left", shard=url, key=key)
            return Sample(key, {e: d for (e, _), d in zip(take, datas)}, url, j)
        for item in iter_shard(url, extensions=frozenset(wanted), remote=self.reader.remote, start=j, stop=j + 1,
                               cache=self.reader.cache):
            if isinstance(item, Sample):
                return item
            raise item.error
        raise IndexError(f"sample {j} of shard {url!r} is not there (the shard changed since it was counted)")

    def __getitem__(self, index: int) -> tuple[Any, int]:
        """(the image transformed, its label): the sample through the Loader's pipeline
        (pipeline.Pipeline, one image a batch, every error raised), on the CPU, drawn as
        the Loader draws its epoch 0 (index `index`, seed, view seeds)."""
        from .decode.cpu import CpuDecoder
        from .pipeline import Pipeline

        s = self.sample(index)
        if self._decoder is None:  # (full-scale windows: no DCT scaling, as the kernel's reference)
            self._decoder = CpuDecoder(num_threads=1, max_pixels=self.max_pixels, buffers=8)
        # a pipeline a call: its one output slot is the item handed out, never written again
        pipe = Pipeline(self.transform, batch_size=1, device="cpu", decoder=self._decoder,
                        image_exts=self.image_exts, label_exts=self.label_exts, labels=self.labels,
                        num_classes=self.num_classes, allow_negative_labels=self.allow_negative_labels,
                        policy=ErrorPolicy("raise"), ring=1, num_threads=1, max_pixels=self.max_pixels,
                        fast_decode=False, pin_memory=False)
        pipe.ensure_decoder()
        ready = pipe.finish(pipe.prepare([s], seed=self.seed, epoch=0, position=index % self._total))
        assert ready is not None  # (under "raise", a sample that fails raises)
        label = int(ready.batch.labels[0]) if ready.batch.labels is not None else 0
        if isinstance(self.transform, list):  # several views: each drawn as the Loader draws it
            return [out[0] for out in ready.batch.images], label
        return ready.batch.images[0], label


def _shard_classes(urls: Sequence[str]) -> list[str]:
    """The class index `gpudecode shard` wrote beside local shards named like
    `train-000000.tar` (`train-classes.json`), as a list by index; [] when there is none."""
    from ._manifest import _read_json
    from .folder import class_index_beside
    from .io import shards as _shards

    for u in urls:
        if not _shards.is_local(u):
            continue
        doc = _read_json(class_index_beside(_shards.local_path(u)))
        try:
            return [c for c, _ in sorted(doc.items(), key=lambda kv: kv[1])] if doc else []
        except TypeError:  # not an index of ours (values that do not sort)
            return []
    return []
