"""An epoch as a plan: what one consumer (a rank, or a rank's DataLoader worker) reads in
one epoch, and in what order; and the elastic split, whose global order of samples is the
same for any number of ranks.

`ShardReader.plan(epoch)` gives an `EpochPlan`. The split modes ("shard", "sample") are
gpudecode.io.shards.plan_share's; "elastic" is planned here.

The elastic split
-----------------
The epoch's global order depends on (seed, epoch, the sources and their sample counts)
and on nothing else: not on the world size, the rank or the thread count.

1. Every source (a shard, or a file list in its epoch order) is cut into *blocks* of
   BLOCK consecutive samples (the last of a source shorter).
2. The blocks are shuffled from (seed, epoch) (kept in source order without shuffle).
3. Consecutive blocks form *windows* of WINDOW blocks (one block without shuffle). A
   window's samples are interleaved: row t holds sample t of each of its blocks that has
   one, in block order; the window's order is row 0, row 1, ... So any run of c
   consecutive positions draws about c / WINDOW consecutive samples from each of up to
   WINDOW blocks (from as many shards).

The epoch is consumed from a start position (0, or where a resumed job stood) in rounds:
round k gives consumer r the `chunk` positions start + (k * consumers + r) * chunk ... (the
Loader's chunk is its batch size, so a global batch is a run of the global order, and a
job with any world size that has consumed P positions has consumed the same P samples).
The last, partial round is split evenly: ceil(R / consumers) each under even="pad" (the
positions past the end wrap to the start of the order: repeats), floor under "drop", and
contiguous unequal parts under None.

The trade-off (against whole shards per rank, "shard"): each rank reads every shard, a
run of about chunk / WINDOW samples at a time (16 samples of a batch of 256 at the
defaults): local and cached shards are entered at the run's first sample (their sample
offsets are kept from the count), so a run costs a seek; a remote shard without a cache
is streamed from its start to each run (use cache_dir, or "shard" where elasticity is not
needed). A batch holds samples of up to WINDOW blocks; samples within a block keep their
shard's order, so shards written in class order (an ImageFolder packed unshuffled) mix
less than `gpudecode shard`'s shuffled ones.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from .shards import Segment

BLOCK = 64    # samples of a source in one block
WINDOW = 16   # blocks interleaved in one window (with shuffle)


@dataclass(frozen=True)
class EpochPlan:
    """What one consumer reads in one epoch.

    Attributes:
        epoch, rank, world_size: the epoch, and this process's place among the ranks.
        consumer, consumers: this reader's index among ranks x DataLoader workers.
        mode: "shard", "sample", "elastic" or "repeated" (repeated augmentation).
        even: the even policy in force ("pad", "drop" or None).
        segments: the runs of samples read, in reading order.
        count: samples the segments hold (None: unknown, shard mode without counts).
        target: samples yielded (the count, padded or trimmed for `even`), or None.
        start: elastic: the global position the plan starts at (a resumed job's place).
        chunk: elastic: consecutive global positions taken at a time.
        total: elastic: samples in the epoch's global order.
        chunks: elastic: the global position of each chunk this consumer takes, in order.
    """

    epoch: int
    rank: int
    world_size: int
    consumer: int
    consumers: int
    mode: str
    even: str | None
    segments: tuple[Segment, ...]
    count: int | None
    target: int | None
    start: int = 0
    chunk: int = 1
    total: int | None = None
    chunks: tuple[int, ...] = ()
    # elastic: for each part of a chunk (its positions within one window), the number of
    # segments it reads and the row of each one's first sample (for the interleaved order)
    parts: tuple[tuple[int, tuple[int, ...]], ...] = field(default=(), repr=False)

    def order(self) -> Iterator[tuple[str, int]]:
        """(source, sample index in it) of every sample read, in the order yielded (before
        a shuffle buffer, which the shard and sample modes add with shuffle); a source's
        sample index counts its samples (a file list: in its epoch order)."""
        if self.mode != "elastic":
            for seg in self.segments:
                stop = seg.stop if seg.stop is not None else None
                if stop is None:
                    raise ValueError("order() needs the sources' sample counts (a plan with counts)")
                yield from ((seg.url, i) for i in range(seg.start, stop))
            return
        rows = [[(seg.url, i) for i in range(seg.start, seg.stop)] for seg in self.segments]  # type: ignore[arg-type]
        for run_lists in self.by_part(rows):
            yield from interleave(*run_lists)

    def by_part(self, per_segment: Sequence) -> Iterator[tuple[list, tuple[int, ...]]]:
        """Elastic: per part, (the items of its segments, their first rows)."""
        at = 0
        for n, rows in self.parts:
            yield list(per_segment[at:at + n]), rows
            at += n


def interleave(runs: list[list], rows: tuple[int, ...]) -> Iterator:
    """The items of a part's runs in the window's interleaved order: by row, then by block
    (run k's item j is at row rows[k] + j). A run cut short (samples skipped under
    on_error) gives what it has."""
    if not runs:
        return
    lo = min(rows)
    hi = max(r + len(x) for r, x in zip(rows, runs))
    for t in range(lo, hi):
        for k, run in enumerate(runs):
            j = t - rows[k]
            if 0 <= j < len(run):
                yield run[j]


def _blocks(order: Sequence[str], counts: dict[str, int], block: int) -> list[tuple[str, int, int]]:
    return [(u, a, min(a + block, counts[u])) for u in order for a in range(0, counts[u], block)]


def layout(urls: Sequence[str], counts: dict[str, int], *, shuffle: bool, seed: int, epoch: int,
           block: int = BLOCK, window: int = WINDOW) -> tuple[list[tuple[str, int, int]], int, list[int]]:
    """The epoch's blocks in global order, the window size in blocks, and each window's
    first global position (with the total at the end)."""
    blocks = _blocks(list(urls), counts, block)
    if shuffle:
        random.Random(f"gpudecode-elastic:{seed}:{epoch}").shuffle(blocks)
    win = window if shuffle else 1
    starts = [0]
    for w in range(0, len(blocks), win):
        starts.append(starts[-1] + sum(b - a for _, a, b in blocks[w:w + win]))
    return blocks, win, starts


def _window_runs(lengths: np.ndarray, lx: int, ly: int) -> list[tuple[int, int, int]]:
    """Positions [lx, ly) of a window whose blocks have `lengths`, interleaved: (block,
    first row, end row) for each block with samples there, in block order."""
    top = int(lengths.max())
    t = np.arange(top + 1)
    # samples before row t: sum over blocks of min(length, t)
    before = np.minimum(lengths[None, :], t[:, None]).sum(axis=1)
    out = []
    alive = lengths[None, :] > t[:-1, None]  # [rows, blocks]: block has a sample at row t
    rank_in_row: np.ndarray = np.cumsum(alive, axis=1) - alive  # blocks before it in its row
    for m, n in enumerate(lengths.tolist()):
        pos = before[:n] + rank_in_row[:n, m]  # increasing in t
        t0, t1 = int(np.searchsorted(pos, lx)), int(np.searchsorted(pos, ly))
        if t1 > t0:
            out.append((m, t0, t1))
    return out


def plan_elastic(urls: Sequence[str], counts: dict[str, int], *, consumer: int, consumers: int, chunk: int,
                 even: str | None, shuffle: bool, seed: int, epoch: int, start: int = 0,
                 rank: int = 0, world_size: int = 1, block: int = BLOCK, window: int = WINDOW) -> EpochPlan:
    """Consumer `consumer`'s share of the epoch's global order from position `start` (see
    the module doc).

    Raises:
        ValueError: a bad chunk or start, or fewer samples than consumers.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, not {chunk}")
    blocks, win, wstarts = layout(urls, counts, shuffle=shuffle, seed=seed, epoch=epoch, block=block, window=window)
    total = wstarts[-1]
    if not 0 <= start <= total:
        raise ValueError(f"start {start} is outside the epoch's {total} samples")
    if total < consumers and even is not None:
        raise ValueError(f"{total} samples cannot be split over {consumers} consumers (ranks x workers): "
                         "each needs at least one")
    rem = total - start
    rounds = rem // (consumers * chunk)
    mine: list[tuple[int, int]] = [(start + (k * consumers + consumer) * chunk, chunk) for k in range(rounds)]
    base = start + rounds * consumers * chunk
    last = rem - rounds * consumers * chunk
    if last:
        if even == "pad":
            q = -(-last // consumers)
            a, b = base + consumer * q, base + (consumer + 1) * q
        elif even == "drop":
            q = last // consumers
            a, b = base + consumer * q, base + (consumer + 1) * q
        else:
            a, b = base + consumer * last // consumers, base + (consumer + 1) * last // consumers
        if b > a:
            mine.append((a, b - a))
    segments: list[Segment] = []
    parts: list[tuple[int, tuple[int, ...]]] = []
    cache: dict[int, np.ndarray] = {}
    for pos, n in mine:
        for a, b in _unwrapped(pos, pos + n, total):
            w = int(np.searchsorted(wstarts, a, side="right")) - 1
            while a < b:
                w_end = wstarts[w + 1]
                lx, ly = a - wstarts[w], min(b, w_end) - wstarts[w]
                wb = blocks[w * win:(w + 1) * win]
                if w not in cache:
                    cache[w] = np.array([y - x for _, x, y in wb], np.int64)
                runs = _window_runs(cache[w], lx, ly)
                for m, t0, t1 in runs:
                    u, x, _ = wb[m]
                    segments.append(Segment(u, x + t0, x + t1))
                parts.append((len(runs), tuple(t0 for _, t0, _ in runs)))
                a = min(b, w_end)
                w += 1
    count = sum(n for _, n in mine)
    return EpochPlan(epoch=epoch, rank=rank, world_size=world_size, consumer=consumer, consumers=consumers,
                     mode="elastic", even=even, segments=tuple(segments), count=count, target=count, start=start,
                     chunk=chunk, total=total, chunks=tuple(p for p, _ in mine), parts=tuple(parts))


def _unwrapped(a: int, b: int, total: int) -> list[tuple[int, int]]:
    """Positions [a, b) as ranges within [0, total): past the end wraps to the start."""
    out = []
    while a < b:
        p = a % total
        take = min(b - a, total - p)
        out.append((p, p + take))
        a += take
    return out
