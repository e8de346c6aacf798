"""The epoch planner: for every way an epoch is shared out, what one consumer reads and in
what order (`EpochPlanner.plan` -> gpudecode.io.epoch.EpochPlan), the order its samples
come out in (`arranged`: `even`'s padding or trim, the shuffle buffer, a resumed start),
and the keys of that order without reading a sample (`epoch_keys`).

The split modes ("shard", "sample": gpudecode.io.shards.plan_share), the elastic split
(gpudecode.io.epoch.plan_elastic) and repeated augmentation (`ra_indices`) are chosen here
and nowhere else: the reader and the Loader iterate the plan they are given.
"""
from __future__ import annotations

import itertools
import math
import os
import random
import warnings
from typing import Container, Iterator, Literal, Sequence, TypeVar

import numpy as np

from .. import _native
from ..errors import ErrorPolicy, ShardReadError
from . import epoch as _epoch
from . import shards as _shards
from .cache import ShardCache
from .counts import forget_count, shard_counts
from .remote import RemoteOptions
from .sources import Sources

Even = Literal["pad", "drop"]

_PAD_HEAD = 1024  # samples kept to make up a short share under `even`
_SHUFFLE_INITIAL = 100  # samples in the shuffle buffer before it gives out the first

__all__ = ["EpochPlanner", "SampleCounts", "ra_indices"]

_T = TypeVar("_T")


class SampleCounts:
    """Samples per source: a file list's length, a shard's count (a header scan of a
    local shard, kept on disk; see gpudecode.io.counts.shard_counts), counted once and
    again at the next epoch for a local shard whose size or modification time changed,
    or a cached remote one that changed (`changed`, the cache's hook)."""

    def __init__(self, inputs: Sources, *, remote: RemoteOptions | None, policy: ErrorPolicy) -> None:
        self.inputs, self.remote, self.policy = inputs, remote, policy
        self.cache: ShardCache | None = None
        self._counts: dict[str, int] | None = None
        self._stats: list[tuple[int, int] | None] = []
        self._epoch = 0
        self._recount = False

    def get(self, epoch: int) -> dict[str, int]:
        """Samples per url, as of `epoch`.

        Raises:
            ShardFormatError, ShardReadError: a shard cannot be counted, under on_error="raise".
        """
        if self._counts is not None and self._epoch != epoch:
            self._epoch = epoch  # once per epoch: a local shard replaced or rewritten since is counted again
            if self._local_stats() != self._stats or self._recount:
                self._counts = None
        if self._counts is None:
            self._recount = False
            self._stats = self._local_stats()
            self._epoch = epoch
            files = self.inputs.files
            shards = [u for u in self.inputs.urls if u not in files]
            counts = shard_counts(shards, remote=self.remote, tolerant=self.policy.on_error != "raise",
                                  cache=self.cache)
            self._counts = {u: len(files[u]) if u in files else counts[u] for u in self.inputs.urls}
        return self._counts

    def changed(self, url: str) -> None:
        """A cached remote shard changed: forget its count; all are checked at the next epoch."""
        forget_count(url)
        self._recount = True

    def _local_stats(self) -> list[tuple[int, int] | None]:
        out: list[tuple[int, int] | None] = []
        for u in self.inputs.urls:
            if u in self.inputs.files or not _shards.is_local(u):
                out.append(None)
                continue
            try:
                st = os.stat(_shards.local_path(u))
                out.append((st.st_size, st.st_mtime_ns))
            except OSError:
                out.append(None)
        return out


class EpochPlanner:
    """Plans each epoch of a reader's sources for one consumer (this process's rank, and
    its DataLoader worker); the arguments are ShardReader's of the same names."""

    def __init__(self, inputs: Sources, counts: SampleCounts, *, shuffle: bool = False, seed: int = 0,
                 buffer_size: int = 1000, rank: int | None = None, world_size: int | None = None,
                 even: Even | Literal["auto"] | None = "auto", split: str = "auto", chunk: int = 1,
                 repeated_augs: int = 1) -> None:
        if inputs.mixture is not None:
            if split not in ("auto", "elastic"):
                raise ValueError(f"a mixture of sources is split elastically (its epoch is drawn from the sources "
                                 f"as one global order): split={split!r} cannot be used with Source lists")
            split = "elastic"
        if buffer_size < 1:
            raise ValueError("buffer_size must be >= 1")
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if world_size is not None and not 0 <= rank < world_size:  # type: ignore[operator]
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        if even not in ("auto", None, "pad", "drop"):
            raise ValueError(f"even must be 'auto', None, 'pad' or 'drop', not {even!r}")
        _shards.choose_mode(split, 1, 1, None)  # checks the name
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk must be an int >= 1, not {chunk!r}")
        if isinstance(repeated_augs, bool) or not isinstance(repeated_augs, int) or not 1 <= repeated_augs <= 256:
            raise ValueError(f"repeated_augs must be an int in 1..256 (torchvision's and DeiT's use 3), not "
                             f"{repeated_augs!r}")
        if repeated_augs > 1 and split == "elastic":
            raise ValueError("repeated_augs and split='elastic' are two orders of an epoch: choose one")
        if repeated_augs > 1 and (len(inputs.urls) != 1 or inputs.urls[0] not in inputs.files):
            raise ValueError(f"repeated_augs={repeated_augs} reads samples by index, as torchvision's RASampler: give "
                             "one ImageFolder tree, list file or list of paths (shards are read in order)")
        self.inputs, self.counts = inputs, counts
        self.shuffle, self.seed, self.buffer_size = shuffle, seed, buffer_size
        self.rank, self.world_size = rank, world_size
        self.even_policy, self.split, self.chunk, self.repeated_augs = even, split, chunk, repeated_augs
        self._warned_even = self._warned_unequal = False
        if split == "shard":
            self.mode()  # (fewer shards than consumers: refused now, not after an epoch of nothing)
        if repeated_augs > 1:
            _warn_ra_epoch(len(inputs.files[inputs.urls[0]]), repeated_augs, self.consumer()[1])

    def placement(self) -> tuple[int, int]:
        """(this process's rank, the world size): as given, else detected now
        (torch.distributed, torchrun, SLURM; see gpudecode.io.shards.detect_rank)."""
        if self.rank is not None:
            return self.rank, self.world_size  # type: ignore[return-value]
        return _shards.detect_rank()

    def consumer(self) -> tuple[int, int]:
        """(this consumer's index, consumers): ranks x DataLoader workers."""
        r, n = self.placement()
        w, nw = _shards.detect_worker()
        return r * nw + w, n * nw

    @property
    def even(self) -> Even | None:
        """The even policy in force: "auto" resolved for this process's ranks."""
        if self.even_policy == "auto":
            return "pad" if self.placement()[1] > 1 else None
        return self.even_policy  # type: ignore[return-value]

    def mode(self) -> str:
        """"shard", "sample" or "elastic": how an epoch is split (see ShardReader's `split`)."""
        return _shards.choose_mode(self.split, len(self.inputs.urls), self.consumer()[1], self.even)

    @property
    def resumes_anywhere(self) -> bool:
        """Whether an epoch is one global order that a job resumes on any world size and
        batch size (split="elastic")."""
        return self.mode() == "elastic"

    def plan(self, epoch: int, *, start: int = 0, consumer: int | None = None) -> _epoch.EpochPlan:
        """What this consumer (or `consumer`) reads in `epoch`, in what order. `start`: with
        split="elastic", the global position to start from (a resumed job's place)."""
        rank, world = self.placement()
        c, n = self.consumer()
        c = c if consumer is None else consumer
        if self.mode() == "elastic":
            counts = self.counts.get(epoch)
            blocks = None
            if self.inputs.mixture is not None:  # the epoch's draw from each source, exact
                wants = self.inputs.mixture_counts(counts)[1]
                blocks = _epoch.mixture_blocks(self.inputs.source_urls, counts, wants, seed=self.seed, epoch=epoch)
            return _epoch.plan_elastic(self.inputs.urls, counts, consumer=c, consumers=n, chunk=self.chunk,
                                       even=self.even, shuffle=self.shuffle, seed=self.seed, epoch=epoch,
                                       start=start, rank=rank, world_size=world, blocks=blocks)
        if start:
            raise ValueError("start= is a global position of split='elastic' (other splits skip samples of the "
                             "consumer's own share: iter_epoch(start=))")
        share = self._share(epoch, c, n)
        mode = "repeated" if self.repeated_augs > 1 else self.mode()
        return _epoch.EpochPlan(epoch=epoch, rank=rank, world_size=world, consumer=c, consumers=n, mode=mode,
                                even=self.even, segments=share.segments, count=share.count, target=share.target)

    def _share(self, epoch: int, c: int, n: int, counted: bool = False) -> _shards.Share:
        if self.repeated_augs > 1:  # the rank's indices are the whole of its share, all ranks alike
            url = self.inputs.urls[0]
            n_own = len(self.file_order(url, epoch))
            return _shards.Share((_shards.Segment(url, 0, n_own),), n_own, n_own if self.even is not None else None)
        mode, even = self.mode(), self.even
        counts = self.counts.get(epoch) if counted or mode == "sample" or even is not None else None
        share = _shards.plan_share(self.inputs.urls, consumer=c, consumers=n, mode=mode, even=even,
                                   shuffle=self.shuffle, seed=self.seed, epoch=epoch, counts=counts)
        if even is not None and counts is not None and not self._warned_even:
            self._warned_even = True
            cost = _shards.even_cost(self.inputs.urls, counts, consumers=n, mode=mode, even=even,
                                     shuffle=self.shuffle, seed=self.seed, epoch=epoch)
            total = sum(counts.values())
            if total and cost > max(0.02 * total, 0):
                what = "repeats" if even == "pad" else "leaves out"
                warnings.warn(f"even={even!r} {what} {cost} of {total} samples per epoch "
                              f"({100 * cost / total:.1f}%) to give {n} consumers equal counts", RuntimeWarning,
                              stacklevel=4)
        return share

    def file_order(self, name: str, epoch: int) -> list[int]:
        """The order in which file list `name` is read in `epoch` (see gpudecode.io.files);
        with repeated_augs, this rank's indices (ra_indices)."""
        if self.repeated_augs > 1:
            rank, world = self.consumer()
            return ra_indices(len(self.inputs.files[name]), epoch=epoch, seed=self.seed, rank=rank, world_size=world,
                              repetitions=self.repeated_augs, shuffle=self.shuffle)
        return self.inputs.files[name].order(shuffle=self.shuffle, seed=self.seed, epoch=epoch)

    def orders(self, plan: _epoch.EpochPlan) -> dict[str, list[int]]:
        """The epoch orders of the file lists a plan reads."""
        files = self.inputs.files
        return {u: self.file_order(u, plan.epoch) for u in dict.fromkeys(s.url for s in plan.segments) if u in files}

    def samples(self, epoch: int) -> int:
        """Samples this consumer yields in `epoch` (before on_error="skip" under even=None)."""
        plan = self.plan(epoch)
        if plan.target is not None:
            return plan.target
        if plan.count is not None:
            return plan.count
        counts = self.counts.get(epoch)  # (whole shards, not counted to plan them)
        return sum(counts[seg.url] for seg in plan.segments)

    def warn_unequal(self, epoch: int) -> None:
        """even=None asked for with several ranks: say before the first sample when their
        sample counts differ (DDP would hang or fail on the step count). Local sources only
        (their counts are a header scan, kept on disk)."""
        ranks = self.placement()[1]
        if self._warned_unequal or self.even_policy is not None or ranks < 2:
            return
        self._warned_unequal = True
        if not all(u in self.inputs.files or _shards.is_local(u) for u in self.inputs.urls):
            return
        _, nw = _shards.detect_worker()
        per_rank = [0] * ranks
        for c in range(ranks * nw):  # (shares with their counts: in shard mode too)
            count = (self.plan(epoch, consumer=c) if self.mode() == "elastic"
                     else self._share(epoch, c, ranks * nw, counted=True)).count
            per_rank[c // nw] += count or 0
        if len(set(per_rank)) > 1:
            shown = ", ".join(f"rank {r}: {n}" for r, n in enumerate(per_rank[:4]))
            more = ", ..." if ranks > 4 else ""
            warnings.warn(f"even=None: the {ranks} ranks read unequal sample counts in epoch {epoch} ({shown}{more}); "
                          "DDP training hangs or fails on unequal step counts: even='pad' (the default with several "
                          "ranks) or 'drop' give every rank the same", RuntimeWarning, stacklevel=4)

    def mixture(self, epoch: int) -> list[dict]:
        """A mixture's epoch: per source, its name, its samples, and how many of them the
        epoch draws (exact: the counts add up to the epoch)."""
        if self.inputs.mixture is None:
            return []
        sizes, wants = self.inputs.mixture_counts(self.counts.get(epoch))
        out = []
        for src, n, k in zip(self.inputs.mixture, sizes, wants):
            how = ({"weight": src.weight} if src.weight is not None else {"repeat": src.repeat}
                   if src.repeat is not None else {"choose": src.choose} if src.choose is not None else {})
            out.append({"source": src.label, "samples": n, "per_epoch": k, **how,
                        **({"label_offset": src.label_offset} if src.label_offset else {})})
        return out

    def arranged(self, it: Iterator[_T], plan: _epoch.EpochPlan, start: int = 0) -> Iterator[_T]:
        """A plan's samples (or keys) as the consumer gives them out: made up or cut to the
        plan's target under `even`, through the shuffle buffer where shards are shuffled
        (file lists and the elastic order come permuted), from position `start` on."""
        if plan.even is not None and plan.target is not None:
            it = _evened(it, plan.target)
        if not plan.interleaved and self.shuffle and not self.inputs.all_file_lists:
            it = _shuffled(it, self.buffer_size, random.Random(self._shuffle_seed(plan)))
        return itertools.islice(it, start, None) if start else it

    def epoch_keys(self, plan: _epoch.EpochPlan, *, start: int = 0,
                   missing: Container[tuple[str, int]] = frozenset()) -> list[tuple[str, int]]:
        """(shard, index) of each sample the reader yields for `plan` from `start`, in order,
        without reading one; `missing` (known unreadable) left out where the reader would
        leave them out (on_error="skip")."""
        orders = self.orders(plan)
        runs = [[k for k in self.segment_keys(seg, orders, plan.epoch) if k not in missing] if missing
                else list(self.segment_keys(seg, orders, plan.epoch)) for seg in plan.segments]
        base = list(itertools.chain.from_iterable(runs))
        return [base[i] for i in self.positions(plan, [len(r) for r in runs], start).tolist()]

    def positions(self, plan: _epoch.EpochPlan, lengths: Sequence[int], start: int = 0) -> np.ndarray:
        """Where each sample the consumer gives out for `plan` stands among its segments'
        runs laid end to end (run k: plan.segments[k]'s samples less those missing,
        lengths[k] of them), in the order given out: interleaved by the plan's parts
        (elastic), made up or cut to its target under `even`, through the shuffle buffer
        where shards are shuffled (its draws made natively: shuffle_order), from `start`.
        arranged() gives the same order a sample at a time, as the reader reads."""
        if plan.interleaved:
            runs, at = [], 0
            for n in lengths:
                runs.append(range(at, at + n))
                at += n
            pos = np.fromiter(itertools.chain.from_iterable(
                _epoch.interleave(part, rows) for part, rows in plan.by_part(runs)), np.int64)
        else:
            pos = np.arange(sum(lengths), dtype=np.int64)
        if plan.even is not None and plan.target is not None:
            pos = _evened_positions(pos, plan.target)
        if not plan.interleaved and self.shuffle and not self.inputs.all_file_lists:
            pos = pos[shuffle_order(len(pos), self.buffer_size, random.Random(self._shuffle_seed(plan)))]
        return pos[start:] if start else pos

    def _shuffle_seed(self, plan: _epoch.EpochPlan) -> str:
        return f"gpudecode-samples:{self.seed}:{plan.epoch}:{plan.consumer}"

    def segment_keys(self, seg: _shards.Segment, orders: dict[str, list[int]], epoch: int
                     ) -> Iterator[tuple[str, int]]:
        """(shard, sample index) of a segment's samples, in reading order, as their Samples
        name them (a file list's sample: its file's path and its index in the list)."""
        order, end = self._span(seg, orders, epoch)
        if order is not None:
            paths = self.inputs.files[seg.url].paths
            return ((paths[order[i]], order[i]) for i in range(seg.start, end))
        return zip(itertools.repeat(seg.url), range(seg.start, end))  # (the tuples made in C)

    def segment_indices(self, seg: _shards.Segment, orders: dict[str, list[int]], epoch: int) -> np.ndarray:
        """segment_keys' sample indices alone (int64): each sample's index in its source."""
        order, end = self._span(seg, orders, epoch)
        if order is not None:
            return np.asarray(order[seg.start:end], np.int64)
        return np.arange(seg.start, end, dtype=np.int64)

    def _span(self, seg: _shards.Segment, orders: dict[str, list[int]], epoch: int) -> tuple[list[int] | None, int]:
        """(a file list's epoch order, or None for a shard; where the segment ends)."""
        order = orders.get(seg.url)
        if order is not None:
            return order, len(order) if seg.stop is None else seg.stop
        return None, self.counts.get(epoch)[seg.url] if seg.stop is None else seg.stop

    def every_key(self, epoch: int) -> Iterator[tuple[str, int]]:
        """(shard, index) of every sample of every source once, as their Samples name them."""
        counts = self.counts.get(epoch)
        for u in dict.fromkeys(self.inputs.urls):
            flist = self.inputs.files.get(u)
            if flist is not None:
                yield from ((p, i) for i, p in enumerate(flist.paths))
            else:
                yield from ((u, i) for i in range(counts[u]))


def _warn_ra_epoch(n: int, repetitions: int, consumers: int) -> None:
    """torchvision's RASampler gives each rank floor(n // 256 * 256 / world_size) samples an
    epoch, whatever the repetitions: on few ranks, or a set of a few hundred images, far
    fewer than n; said once, as the Loader follows it exactly (its place in scripts)."""
    per_rank = int(n // 256 * 256 / consumers)
    if per_rank * consumers < n:
        warnings.warn(f"repeated_augs={repetitions}: each of the {consumers} consumers reads {per_rank} samples an "
                      f"epoch ({per_rank * consumers} of the {n}), as torchvision's RASampler gives them "
                      "(floor(n / 256) * 256 / world_size); without repeated_augs every sample is read once",
                      RuntimeWarning, stacklevel=5)


def ra_indices(n: int, *, epoch: int, seed: int, rank: int, world_size: int, repetitions: int,
               shuffle: bool = True) -> list[int]:
    """The indices torchvision's (and DeiT's) RASampler gives `rank` in `epoch`: the
    epoch's permutation of range(n) (torch.randperm, a generator seeded with seed + epoch),
    each index `repetitions` times in a row, padded from its head to a multiple of the
    ranks, every world_size-th from `rank`, the first floor(n / 256) * 256 / world_size."""
    import torch

    per_rank = int(math.ceil(n * float(repetitions) / world_size))
    total = per_rank * world_size
    selected = int(math.floor(n // 256 * 256 / world_size))
    if shuffle:
        g = torch.Generator()
        g.manual_seed(seed + epoch)
        order = torch.randperm(n, generator=g).tolist()
    else:
        order = list(range(n))
    rep = [i for i in order for _ in range(repetitions)]
    rep += rep[: total - len(rep)]
    return rep[rank:total:world_size][:selected]


def _evened(it: Iterator[_T], target: int) -> Iterator[_T]:
    """Exactly `target` samples: the first `target` of `it`, then repeats of the first
    ones where `it` runs short (samples lost to on_error="skip", or padding)."""
    head: list[_T] = []
    n = 0
    for s in it:
        if n >= target:
            break
        if len(head) < _PAD_HEAD:
            head.append(s)
        yield s
        n += 1
    if n < target and not head:
        raise ShardReadError(f"no sample could be read to make up {target - n} of {target} samples")
    while n < target:
        yield head[n % len(head)]
        n += 1


def _evened_positions(pos: np.ndarray, target: int) -> np.ndarray:
    """_evened of a whole epoch's positions: the first `target`, made up from the head."""
    if len(pos) >= target:
        return pos[:target]
    if not len(pos):
        raise ShardReadError(f"no sample could be read to make up {target} of {target} samples")
    head = pos[:_PAD_HEAD]
    return np.concatenate([pos, head[np.arange(len(pos), target) % len(head)]])


def shuffle_order(n: int, size: int, rng: random.Random, initial: int = _SHUFFLE_INITIAL) -> np.ndarray:
    """The order in which _shuffled gives out 0..n-1 drawing from `rng` (int64 [n]): in
    one native call from rng's MT19937 state (csrc/shuffle.h; rng itself is not advanced),
    where the buffer is under 2**32 samples, else by _shuffled."""
    _, state, _ = rng.getstate()
    try:
        return _native.shuffle_order(n, size, initial, np.array(state[:624], np.uint32), state[624])
    except ValueError:
        return np.fromiter(_shuffled(iter(range(n)), size, rng, initial), np.int64, n)


def _shuffled(it: Iterator[_T], size: int, rng: random.Random, initial: int = _SHUFFLE_INITIAL
              ) -> Iterator[_T]:
    """A shuffle buffer of `size` samples that starts giving them out once it holds
    `initial` (webdataset's convention): while it fills, two samples go in for each one
    out, so an epoch's first batch waits for `initial` samples rather than `size`. Every
    sample comes out exactly once (samples are never None)."""
    buf: list[_T] = []
    start = max(1, min(initial, size))
    it = iter(it)
    # randrange(n) is _randbelow(n) for n > 0: the same draws without randrange's checks
    below = getattr(rng, "_randbelow", rng.randrange)
    for s in it:
        buf.append(s)
        if len(buf) < size:
            nxt = next(it, None)
            if nxt is not None:
                buf.append(nxt)
        if len(buf) >= start:
            i = below(len(buf))
            buf[i], buf[-1] = buf[-1], buf[i]
            yield buf.pop()
    rng.shuffle(buf)
    yield from buf
