"""What a reader reads, fixed when it is made: the shards and image-file lists, a
mixture's sources, label offsets and class names (`Sources`).

`Sources.build(urls)` expands any form `gpudecode.io.shards.expand_urls` takes (a shard, a
pattern, an ImageFolder tree, a list file, image paths, a Parquet file) or a mixture (a list
of `gpudecode.Source`), and refuses what cannot be read as one data set: missing shards,
ImageFolder trees whose class folders differ, a shard in two sources. The epoch planner
(gpudecode.io.planner) and the reader's threads (gpudecode.io.segments) take it as it is.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any, Sequence

from .._text import plural
from ..errors import GpuDecodeError, ShardReadError, known
from . import epoch as _epoch
from . import shards as _shards
from .files import PREFIX as _files_prefix, FileList, shifted
from .parquet import classes as parquet_classes, is_parquet

__all__ = ["Sources", "MAX_EPOCH"]

MAX_EPOCH = 10**9  # samples in a mixture's epoch: a billion (past it the epoch's blocks do not fit in memory)


@dataclasses.dataclass(frozen=True)
class Sources:
    """The sources of one reader (not changed after `build`).

    Attributes:
        urls: every shard and file list, in order (a mixture's: source by source).
        files: url -> FileList for the urls that are lists of image files (a tree, a list
            file, paths, a Parquet file read by row); the other urls are tar shards.
        mixture: the gpudecode.Source list of a mixture, else None.
        source_urls: a mixture's urls, per source ([] otherwise).
        label_offsets: shard -> a mixture source's label_offset (file lists carry theirs in
            their labels).
        epoch_size: a mixture's samples per epoch (None: the sources' own sizes).
    """

    urls: list[str]
    files: dict[str, FileList]
    mixture: list[_epoch.Source] | None = None
    source_urls: list[list[str]] = dataclasses.field(default_factory=list)
    label_offsets: dict[str, int] = dataclasses.field(default_factory=dict)
    epoch_size: int | str | None = None
    owner: dict[str, int] = dataclasses.field(default_factory=dict, repr=False)  # shard or file -> source

    @classmethod
    def build(cls, urls: Any, epoch_size: int | str | None = None) -> Sources:
        """`urls` expanded and checked (see the module's doc).

        Raises:
            ShardReadError: no shard, or shards or files that do not exist (named).
            ValueError: a mixture mixed with plain entries, a shard in two sources, trees
                with different classes, an epoch_size out of range.
        """
        files: dict[str, FileList] = {}
        if isinstance(urls, (list, tuple)) and urls and all(isinstance(u, _epoch.Source) for u in urls):
            mixture = list(urls)
            found = _expand_sources(mixture, files)
            expanded = [u for g in found[0] for u in g]
            made = cls(expanded, files, mixture, found[0], found[1], epoch_size, _owners(found[0], files))
        elif isinstance(urls, (list, tuple)) and any(isinstance(u, _epoch.Source) for u in urls):
            raise ValueError("a mixture is a list of gpudecode.Source alone: wrap the other entries in Source(...)")
        else:
            if epoch_size is not None:
                raise ValueError("epoch_size sizes a mixture of gpudecode.Source: give the sources as Source(...)")
            made = cls(_shards.expand_urls(urls, files=files), files)
        _check_epoch_size(epoch_size, made.mixture)
        made._check_classes()
        made._check_exist(urls)
        return made

    @property
    def all_file_lists(self) -> bool:
        """Every source is a list of image files (no tar shard)."""
        return all(u in self.files for u in self.urls)

    def source_of(self, shard: str) -> int | None:
        """Which source of a mixture a sample's shard (or image file) belongs to."""
        return self.owner.get(shard) if self.mixture is not None else None

    @property
    def classes(self) -> list[str]:
        """The class names of the ImageFolder trees read (class i is classes[i], as
        torchvision's ImageFolder numbers them); [] when none is read. A mixture's: each
        source's tree's classes from its label_offset on ("" where no tree names a label).
        A Parquet set's ClassLabel names where no tree is read."""
        if self.mixture is not None:
            named: dict[int, str] = {}
            for src, g in zip(self.mixture, self.source_urls):
                for f in (self.files[u] for u in g if u in self.files):
                    for j, c in enumerate(f.classes):
                        k = src.label_offset + j
                        if named.setdefault(k, c) != c:
                            raise ValueError(f"label {k} is class {named[k]!r} in one source and {c!r} in "
                                             f"{src.label}: set the sources apart with label_offset")
            return [named.get(k, "") for k in range(max(named) + 1)] if named else []
        out: list[str] = []
        for f in self.files.values():
            if f.classes:
                if out and list(f.classes) != out:
                    raise ValueError("the ImageFolder trees read have different classes")
                out = list(f.classes)
        if not out:  # (datasets writes its ClassLabel names into every file's schema)
            for u in self.urls:
                if is_parquet(u):
                    try:
                        return list(parquet_classes(u))
                    except GpuDecodeError:
                        return []
        return out

    def starts(self, counts: dict[str, int]) -> list[int]:
        """Each url's first index in the sources' samples numbered in their given order
        (what `Loader.dataset` and its sampler index)."""
        out, pos = [], 0
        for u in self.urls:
            out.append(pos)
            pos += counts[u]
        return out

    def fingerprint(self) -> str:
        """The shards (or files) read, in their order, by name: the same data wherever it is
        mounted, other data (other shards, another order, a tree with other files) differs."""
        h = hashlib.sha256()
        if self.mixture is not None:  # a mixture: its terms are part of what is read
            h.update(repr([(s.weight, s.repeat, s.choose, s.label_offset, len(g)) for s, g in
                           zip(self.mixture, self.source_urls)] + [self.epoch_size]).encode())
        for u in self.urls:
            flist = self.files.get(u)
            # (names as the file system gives them: a name that is not UTF-8 keeps its bytes)
            if flist is None:
                h.update(os.fsencode(os.path.basename(u.rstrip("/"))) + b"\0")
            else:
                h.update(f"files:{len(flist)}\0".encode())
                for k in flist.keys:
                    h.update(k.encode("utf-8", "surrogateescape") + b"\0")
        return h.hexdigest()[:16]

    def describe(self) -> dict:
        """What is read: shards, and image files as they lie (their trees, list files, or
        the sets that name them: each list by its name)."""
        out: dict = {"shards": sum(1 for u in self.urls if u not in self.files)}
        if self.files:
            out["image_files"] = sum(len(f) for f in self.files.values())
            out["file_sources"] = [u.removeprefix(_files_prefix) for u in self.files]
        return out

    def mixture_counts(self, counts: dict[str, int]) -> tuple[list[int], list[int]]:
        """(samples per source, samples an epoch draws from each) for a mixture's counts."""
        mixture = known(self.mixture, "the sources' mixture")
        sizes = [sum(counts[u] for u in g) for g in self.source_urls]
        return sizes, _epoch.mixture_counts(sizes, mixture, self.epoch_size)

    def _check_classes(self) -> None:
        # one label means one class: trees with other class folders would mix them up (within
        # a source of a mixture; its sources keep their own, label_offset sets them apart)
        groups = ([[self.files[u] for u in g if u in self.files] for g in self.source_urls]
                  if self.mixture is not None else [list(self.files.values())])
        for group in groups:
            trees = [f for f in group if f.classes]
            for f in trees[1:]:
                if f.classes != trees[0].classes:
                    a, b = trees[0], f
                    raise ValueError(f"the ImageFolder trees {a.root} ({_names(a.classes)}) and {b.root} "
                                     f"({_names(b.classes)}) have different classes: label 0 would be "
                                     f"{a.classes[0]!r} in one and {b.classes[0]!r} in the other. Read trees with "
                                     "the same class folders (or one tree; in a mixture, each as its own Source)")

    def _check_exist(self, given: Any) -> None:
        if not self.urls:
            raise ShardReadError(f"no shards: {given!r} names none", shard=str(given))
        missing = [u for u in self.urls if u not in self.files and _shards.is_local(u)
                   and not os.path.isfile(_shards.local_path(u))]
        if missing and len(self.urls) == 1:  # one path, not a pattern's list: it may have meant a folder
            path = _shards.local_path(missing[0])
            what = "shard" if path.endswith((".tar", ".tar.gz", ".tgz")) else "file or folder"
            raise ShardReadError(f"no such {what}: {path} (a source is a shard, a shard pattern, an ImageFolder "
                                 "tree, a list file or image paths)", shard=missing[0])
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise ShardReadError(f"{len(missing)} of {plural(len(self.urls), 'shard')} "
                                 f"{'does' if len(missing) == 1 else 'do'} not exist: "
                                 f"{', '.join(missing[:3])}{more}", shard=missing[0])


def _expand_sources(sources: list[_epoch.Source], files: dict[str, FileList]
                    ) -> tuple[list[list[str]], dict[str, int]]:
    """Each source's urls, and the label offsets of shards; a shard or file in two
    sources is refused (its samples' source would be ambiguous); file lists of a source
    with a label_offset carry it in their labels (into `files`)."""
    per_source: list[list[str]] = []
    offsets: dict[str, int] = {}
    owner: dict[str, int] = {}
    for i, src in enumerate(sources):
        found: dict[str, FileList] = {}
        try:
            urls = _shards.expand_urls(src.urls, files=found)  # type: ignore[arg-type]
        except ShardReadError as e:
            raise type(e)(f"Source {src.label}: {e.reason}", shard=e.shard) from None
        for u in urls:
            if u in owner:
                raise ValueError(f"{u} is in two sources ({sources[owner[u]].label} and {src.label}): a sample "
                                 "must belong to one")
            owner[u] = i
            if u in found:
                f = found[u]
                if src.label_offset:
                    f = shifted(f, src.label_offset)
                files[u] = f
            elif src.label_offset:
                offsets[u] = src.label_offset
        per_source.append(list(urls))
    return per_source, offsets


def _owners(source_urls: list[list[str]], files: dict[str, FileList]) -> dict[str, int]:
    own: dict[str, int] = {}
    for i, g in enumerate(source_urls):
        for u in g:
            own[u] = i
            if u in files:
                own.update(dict.fromkeys(files[u].paths, i))
    return own


def _check_epoch_size(epoch_size: Any, sources: Sequence[_epoch.Source] | None) -> None:
    """A mixture's epoch_size and weights, checked where they are given (they were refused
    only at len() or the first batch, and an epoch of 10**12 samples ran out of memory)."""
    if epoch_size is not None and not (isinstance(epoch_size, str) and epoch_size in _epoch.STOP_CRITERIA):
        if isinstance(epoch_size, bool) or not isinstance(epoch_size, int) or not 1 <= epoch_size <= MAX_EPOCH:
            raise ValueError(f"epoch_size must be an int in 1..{MAX_EPOCH:,} or one of {_epoch.STOP_CRITERIA}, not "
                             f"{epoch_size!r}")
    weighted = [s for s in sources or () if s.weight is not None]
    if weighted and not sum(float(s.weight or 0.0) for s in weighted) > 0:
        raise ValueError("the sources' weights sum to 0: give some source a weight above 0")


def _names(classes: Sequence[str], show: int = 4) -> str:
    more = f", ... ({len(classes)} classes)" if len(classes) > show else ""
    return ", ".join(classes[:show]) + more
