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
needed). Measured (bench/reader.py, 10 KB samples in the page cache, batch 256): 0.30x the
"sample" split's read rate, 24,600 samples/s on a 2-core VM (bench/RESULTS.md). A batch holds samples of up to WINDOW blocks; samples within a block keep their
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

    @property
    def interleaved(self) -> bool:
        """Whether the segments' samples are given out interleaved by `parts` (the elastic
        order) rather than one segment after another."""
        return self.mode == "elastic"

    def draw_at(self, position: int, batch_size: int) -> int | None:
        """Where the batch this consumer gives out at `position` (its samples so far) stands
        in the epoch's global order, for its random draws: elastic plans only (batch k is
        chunk k of this consumer's; past its chunks, runs follow on), None otherwise (each
        consumer draws by its own position)."""
        if not self.interleaved:
            return None
        k = position // batch_size
        chunks = self.chunks
        if k < len(chunks):
            return chunks[k]
        return (chunks[-1] if chunks else self.start) + batch_size * (k - len(chunks) + 1)

    def order(self) -> Iterator[tuple[str, int]]:
        """(source, sample index in it) of every sample read, in the order yielded (before
        a shuffle buffer, which the shard and sample modes add with shuffle); a source's
        sample index counts its samples (a file list: in its epoch order)."""
        if self.mode != "elastic":
            for seg in self.segments:
                if seg.stop is None:
                    raise ValueError("order() needs the sources' sample counts (a plan with counts)")
                yield from ((seg.url, i) for i in range(seg.start, seg.stop))
            return
        rows = [[(seg.url, i) for i in range(seg.start, seg.stop)] for seg in self.segments]  # type: ignore[arg-type]
        for run_lists in self.by_part(rows):
            yield from interleave(*run_lists)

    def read_order(self, counts: dict[str, int]) -> Iterator[tuple[str, int]]:
        """order() for every split: a segment without an end (the shard mode) ends at its
        source's count in `counts`, and at most `target` samples come (what the reader
        yields before a pad); the elastic order as it is."""
        if self.mode == "elastic":
            yield from self.order()
            return
        n = 0
        for seg in self.segments:
            stop = counts[seg.url] if seg.stop is None else seg.stop
            for i in range(seg.start, stop):
                if self.target is not None and n >= self.target:
                    return
                yield seg.url, i
                n += 1

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
           block: int = BLOCK, window: int = WINDOW, blocks: list[tuple[str, int, int]] | None = None
           ) -> tuple[list[tuple[str, int, int]], int, list[int]]:
    """The epoch's blocks in global order, the window size in blocks, and each window's
    first global position (with the total at the end). `blocks`: the epoch's blocks as
    drawn already (a mixture's, see mixture_blocks), else every source's, once."""
    blocks = _blocks(list(urls), counts, block) if blocks is None else list(blocks)
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
                 rank: int = 0, world_size: int = 1, block: int = BLOCK, window: int = WINDOW,
                 blocks: list[tuple[str, int, int]] | None = None) -> EpochPlan:
    """Consumer `consumer`'s share of the epoch's global order from position `start` (see
    the module doc).

    Raises:
        ValueError: a bad chunk or start, or fewer samples than consumers.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, not {chunk}")
    blocks, win, wstarts = layout(urls, counts, shuffle=shuffle, seed=seed, epoch=epoch, block=block, window=window,
                                  blocks=blocks)
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
    # chunks that follow one another in the global order (one consumer's, or the last
    # round's) are read as one range: a window's runs then as long as the range allows
    ranges: list[list[int]] = []
    for pos, n in mine:
        if ranges and ranges[-1][0] + ranges[-1][1] == pos:
            ranges[-1][1] += n
        else:
            ranges.append([pos, n])
    for pos, n in ranges:
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


# -- mixing sources ---------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One source of a mixture (`Loader([Source(...), Source(...)], ...)`).

    Args:
        urls: what it reads: a shard pattern, a folder (shards or an ImageFolder tree), a
            list file, or image paths: anything a Loader takes.
        weight: its proportion of each epoch's samples, among the weighted sources (the
            epoch's size: the Loader's `epoch_size`).
        repeat: its samples per epoch as a multiple of its size (3: every sample three
            times; 0.5: half of them, another half each epoch as the draw falls).
        choose: exactly this many of its samples per epoch.
        label_offset: added to its labels (a second dataset's classes after the first's:
            the first's class count). Without it, labels are the source's own.
        name: how describe() and the stats name it (default: its urls as given).

    One of weight, repeat and choose, or none (its samples once an epoch: repeat=1).
    """

    urls: object
    weight: float | None = None
    repeat: float | None = None
    choose: int | None = None
    label_offset: int = 0
    name: str | None = None

    def __post_init__(self) -> None:
        given = [k for k in ("weight", "repeat", "choose") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"a Source takes one of weight, repeat and choose, not {' and '.join(given)}")
        for k in ("weight", "repeat"):
            v = getattr(self, k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0
                                  or v != v or v == float("inf")):
                raise ValueError(f"Source {k} must be a finite number >= 0, not {v!r}")
        if self.choose is not None and (isinstance(self.choose, bool) or not isinstance(self.choose, int)
                                        or self.choose < 0):
            raise ValueError(f"Source choose must be an int >= 0, not {self.choose!r}")
        if isinstance(self.label_offset, bool) or not isinstance(self.label_offset, int):
            raise ValueError(f"Source label_offset must be an int, not {self.label_offset!r}")
        if not -(1 << 62) <= self.label_offset < (1 << 62):
            raise ValueError(f"Source label_offset must be within +-2**62 (labels are int64), not {self.label_offset}")

    @property
    def label(self) -> str:
        return self.name if self.name is not None else str(self.urls)


STOP_CRITERIA = ("all_exhausted", "first_exhausted")


def mixture_counts(sizes: Sequence[int], sources: Sequence[Source], epoch_size: int | str | None) -> list[int]:
    """Samples each source gives an epoch: `choose`, `round(repeat x size)`, and the
    weighted sources' shares of their part of the epoch by largest remainder (exact: the
    counts add up). The weighted part: epoch_size less the others' counts; or, as
    torchdata.nodes' stop criteria name it, "all_exhausted" (default: as many as lets every
    weighted source give each of its samples at least once: max size / proportion) or
    "first_exhausted" (none repeats a sample: min size / proportion).

    Raises:
        ValueError: weights that sum to 0, an epoch_size below the fixed counts, a weighted
            source with no samples.
    """
    fixed = [0] * len(sources)
    weighted = [i for i, s in enumerate(sources) if s.weight is not None]
    for i, s in enumerate(sources):
        if s.choose is not None:
            fixed[i] = s.choose
        elif s.repeat is not None:
            fixed[i] = int(round(s.repeat * sizes[i]))
        elif s.weight is None:
            fixed[i] = sizes[i]
    if not weighted:
        if epoch_size is not None:
            raise ValueError("epoch_size sizes the weighted sources' part of an epoch: no Source has a weight")
        return fixed
    weights = {i: float(sources[i].weight or 0.0) for i in weighted}
    wsum = sum(weights.values())
    if not wsum > 0:
        raise ValueError("the sources' weights sum to 0")
    props = {i: w / wsum for i, w in weights.items()}
    if epoch_size is None or isinstance(epoch_size, str):
        crit = epoch_size or "all_exhausted"
        if crit not in STOP_CRITERIA:
            raise ValueError(f"epoch_size must be an int or one of {STOP_CRITERIA}, not {epoch_size!r}")
        empty = [sources[i].label for i in weighted if sizes[i] == 0 and props[i] > 0]
        if empty:
            raise ValueError(f"weighted source {empty[0]} has no samples")
        need = [sizes[i] / props[i] for i in weighted if props[i] > 0]
        part = int(round(max(need) if crit == "all_exhausted" else min(need)))
    else:
        if isinstance(epoch_size, bool) or not isinstance(epoch_size, int) or epoch_size < 1:
            raise ValueError(f"epoch_size must be an int >= 1 or one of {STOP_CRITERIA}, not {epoch_size!r}")
        part = epoch_size - sum(fixed)
        if part < 0:
            raise ValueError(f"epoch_size {epoch_size} is below the {sum(fixed)} samples the sources with "
                             "repeat, choose or neither give an epoch")
    exact = {i: props[i] * part for i in weighted}
    counts = dict.fromkeys(weighted, 0)
    for i in weighted:
        counts[i] = int(exact[i])
    left = part - sum(counts.values())
    for i in sorted(weighted, key=lambda i: (-(exact[i] - counts[i]), i))[:left]:
        counts[i] += 1
    for i in weighted:
        if counts[i] and not sizes[i]:
            raise ValueError(f"weighted source {sources[i].label} has no samples")
        fixed[i] = counts[i]
    return fixed


def mixture_blocks(source_urls: Sequence[Sequence[str]], counts: dict[str, int], wants: Sequence[int], *,
                   seed: int, epoch: int, block: int = BLOCK) -> list[tuple[str, int, int]]:
    """The epoch's blocks of a mixture: source i's blocks (in an order drawn from (seed,
    epoch, i)) taken whole `wants[i] // size` times, then as many more as its remainder
    needs, the last one cut: exactly wants[i] samples of it."""
    out: list[tuple[str, int, int]] = []
    for i, (urls, want) in enumerate(zip(source_urls, wants)):
        blocks = _blocks(list(urls), counts, block)
        size = sum(b - a for _, a, b in blocks)
        if not want or not size:
            continue
        rng = random.Random(f"gpudecode-mix:{seed}:{epoch}:{i}")
        rng.shuffle(blocks)
        out += blocks * (want // size)
        rest = want % size
        for u, a, b in blocks:
            if rest <= 0:
                break
            take = min(rest, b - a)
            out.append((u, a, a + take))
            rest -= take
    return out
