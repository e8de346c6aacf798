"""`Loader.dataset`: the samples of a Loader's shards by index, as a map-style dataset.

Index i is the i-th sample of the shards in their given (unshuffled) order, counted as
the reader counts them. `dataset[i]` reads that sample, decodes its image on the CPU and
applies the Loader's transform (its random draws fixed by (seed, epoch 0, i)), giving
(image [3, h, w], label) as torchvision's ImageFolder would. It is what DataLoader code
reaches for beside a loader: `len(loader.dataset)`, `torch.utils.data.Subset(loader.dataset,
...)` for the remainder of a distributed evaluation, a plain DataLoader over it.

A sample is read by the reader's one read-by-index path (ShardReader.read_sample): a
counted local shard is entered at the sample's offset (kept from the count) and only its
members are indexed; a remote shard is read through up to the sample (give the Loader a
cache_dir to make that a local read).
"""
from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import torch

from .errors import ErrorPolicy, ShardReadError, known
from .fields import row
from .io import shards as _shards
from .decode.cpu import CpuDecoder
from .io.reader import Sample, ShardReader
from .pipeline import Pipeline, PipelineConfig

if TYPE_CHECKING:
    from .loader import Loader



class ShardDataset(torch.utils.data.Dataset):
    """Every sample of a reader's shards by index (see the module doc)."""

    def __init__(self, reader: ShardReader, config: PipelineConfig, *, seed: int) -> None:
        self.reader = reader
        # the Loader's pipeline configuration, one image a batch on the CPU decoder (full-scale
        # windows: no DCT scaling, as the kernel's reference); the decoder is made per process
        self.config = config.replace(batch_size=1, device="cpu", decoder="cpu", ring=1, num_threads=1,
                                     fast_decode=False, pin_memory=False, batch_transform=None, reuse_held=False)
        self.transform = config.transform
        self.seed = seed
        counts = reader.sample_counts()
        self._starts = reader.inputs.starts(counts)
        self._total = sum(counts[u] for u in reader.urls)
        self._targets: list[int] | None = None  # (read when first asked; kept, and pickled with the rest)
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
    def targets(self) -> list[int]:
        """Each sample's label by index, as torchvision's ImageFolder and CIFAR10 give
        `targets` (for class counts, a weighted or stratified draw): the labels the Loader
        trains on (a mixture source's label_offset added). A file list's come from the list;
        a shard's are read from its label members alone, once, then kept.

        Raises:
            ValueError: the Loader reads no labels (labels=False).
            LabelError: a sample without a label, or with one the Loader refuses (named).
        """
        if self._targets is None:
            self._targets = self._read_targets()
        return self._targets

    def _read_targets(self) -> list[int]:
        from .io.assembly import iter_shard
        from .pipeline import trained_label

        cfg = self.config
        if not cfg.labels:
            raise ValueError("the Loader reads no labels (labels=False): there are no targets")
        out: list[int] = []
        counts = self.reader.sample_counts()
        for url in self.reader.urls:
            flist = self.reader.inputs.files.get(url)
            if flist is not None:  # (its labels given as the reader hands them on: a .cls field)
                out += [trained_label(cfg, {} if v is None else {"cls": str(v).encode()}, shard=flist.paths[i],
                                      key=flist.keys[i]) for i, v in enumerate(flist.labels)]
                continue
            got = 0
            for s in iter_shard(url, extensions=frozenset(e.lower() for e in cfg.label_exts),
                                remote=self.reader.segments.remote, cache=self.reader.cache):
                if not isinstance(s, Sample):
                    raise s.error
                out.append(trained_label(cfg, s.fields, shard=url, key=s.key))
                got += 1
            if got != counts[url]:
                raise ShardReadError(f"the shard holds {got} samples now, {counts[url]} when it was counted (it "
                                     "changed since)", shard=url)
        return out

    @property
    def class_to_idx(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.classes)}

    def _local(self) -> None:  # per-process state, made anew after unpickling
        self._decoder: Any = None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_decoder"}

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

    def sample(self, index: int) -> Sample:
        """The raw sample at `index` (bytes of its image and label fields), read by the
        reader's one read-by-index path (ShardReader.read_sample)."""
        url, j = self.locate(index)
        return self.reader.read_sample(url, j)

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        """(the image transformed, its label), then its fields where the Loader has any (its
        label left out under labels=False): the sample through the Loader's pipeline
        (pipeline.Pipeline, one image a batch, every error raised), on the CPU, drawn as
        the Loader draws its epoch 0 (index `index`, seed, view seeds)."""
        s = self.sample(index)
        if self._decoder is None:
            self._decoder = CpuDecoder(num_threads=1, max_pixels=self.config.max_pixels, buffers=8)
        # a pipeline a call: its one output slot is the item handed out, never written again
        pipe = Pipeline(self.config.replace(decoder=self._decoder), policy=ErrorPolicy("raise"))
        pipe.fields_aside = False  # (one item: its fields read here, no thread made for them)
        pipe.ensure_decoder()
        ready = pipe.finish(pipe.prepare([s], seed=self.seed, epoch=0, position=index % self._total))
        batch = known(ready, "a batch of one under on_error='raise'").batch  # (a sample that fails raises)
        label = int(batch.labels[0]) if batch.labels is not None else 0
        image = [out[0] for out in batch.images] if pipe.multi else batch.images[0]  # (several views: a list)
        if self.config.fields:  # (its fields after it, as a batch holds them)
            return (image, *([label] if self.config.labels else []), *(row(v, 0) for v in batch.fields.values()))
        return image, label


def _shard_classes(urls: Sequence[str]) -> list[str]:
    """The class index `gpudecode shard` wrote beside local shards named like
    `train-000000.tar` (`train-classes.json`), as a list by index; [] when there is none."""
    from ._manifest import _read_json
    from .folder import class_index_beside

    for u in urls:
        if not _shards.is_local(u):
            continue
        doc = _read_json(class_index_beside(_shards.local_path(u)))
        try:
            return [c for c, _ in sorted(doc.items(), key=lambda kv: kv[1])] if doc else []
        except TypeError:  # not an index of ours (values that do not sort)
            return []
    return []


class LoaderSampler:
    """A Loader's share for this rank, where DistributedSampler stands beside a DataLoader:
    `len()` is the samples this rank yields per epoch, `set_epoch(e)` sets the Loader's
    epoch, and iteration gives this rank's dataset indices (the shards' unshuffled order)
    for the current epoch, before the sample shuffle."""

    def __init__(self, loader: Loader) -> None:
        self._loader = loader

    def __len__(self) -> int:
        return self._loader.num_samples

    def set_epoch(self, epoch: int) -> None:
        self._loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        reader = self._loader.reader
        counts = reader.sample_counts()
        base = dict(zip(reader.urls, reader.inputs.starts(counts)))
        epoch = self._loader.current_epoch
        files = {u: reader.file_order(u, epoch) for u in reader.files}
        for url, i in reader.plan(epoch).read_order(counts):  # (elastic: the plan's interleaved order)
            yield base[url] + (files[url][i] if url in files else i)
