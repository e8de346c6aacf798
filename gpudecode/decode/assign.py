"""Who decodes which image of a batch in the split decoder (decode/split.py's module doc
says how): by measured rates, each image to the engine that finishes it soonest; by pinned
shares; and, tuned, which subset of the engines decodes at all (`_Tuner`)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from ._base import Requests

if TYPE_CHECKING:
    from .split import Engine

__all__ = ["Assigner"]


class Assigner:
    """The assignment of a split decoder's images to its `engines` (shared with it: their
    rates and failures are the decoder's), by `shares` when pinned, else by rate; `tuner`
    chooses the engines that decode, when given."""

    def __init__(self, engines: Sequence[Engine], shares: Mapping[str, float] | None, tuner: _Tuner | None) -> None:
        self.engines, self.shares, self._tuner = engines, shares, tuner
        self._using: tuple[int, ...] | None = None  # the subset of engines this batch (tuning)

    def active(self) -> list[int]:
        """The engines that may decode: not left out after a failure, not pinned to share 0."""
        return [i for i, e in enumerate(self.engines) if e.excluded is None
                and (self.shares is None or self.shares.get(e.name, 0.0) > 0)]

    def chosen(self, i: int) -> bool:
        """Whether engine i was among those the tuning chose for the last batch (always, untuned)."""
        return self._tuner is None or i in (self._using or ())

    def record(self, images: int, seconds: float) -> None:
        """A batch of `images` decoded in `seconds` (the host span of decode()), for the tuning."""
        if self._tuner is not None and self._using is not None:
            self._tuner.record(self._using, images, seconds)

    def tuning(self) -> dict | None:
        """With tune=True: the engines decoding now, and each subset measured (images a
        second of decode(), the engines' names joined by '+'); else None."""
        if self._tuner is None:
            return None
        name = lambda k: "+".join(self.engines[i].name for i in k)  # noqa: E731
        t = self._tuner
        return {"using": name(t.current) if t.current else None, "measuring": name(t.queue[0]) if t.queue else None,
                "measured_images_per_s": {name(k): v for k, v in sorted(t.measured.items(), key=lambda kv: -kv[1])}}

    def assign(self, rq: Requests) -> np.ndarray:
        """The engine (its index in `engines`) each request goes to."""
        n = len(rq)
        active = self.active()
        if not active:
            raise RuntimeError("every engine of the split decoder failed: " +
                               "; ".join(f"{e.name}: {e.excluded}" for e in self.engines))
        fmts = rq.formats
        if self._tuner is not None:
            self._using = self._tuner.pick(active)
            # an image no chosen engine takes goes to one that does
            untaken = {f for f in fmts if not any(self.engines[i].accepts(f) for i in self._using)}
            active = [i for i in active if i in self._using or any(self.engines[i].accepts(f) for f in untaken)]
        takes = {i: [self.engines[i].accepts(f) for f in fmts] for i in active}
        if self.shares is not None:
            return self._by_shares(n, active, takes)
        costs = {i: self.engines[i].costs(rq) for i in active}
        known = [r for r in (self.engines[i].rate for i in active) if r]
        prior = float(np.mean(known)) if known else 1.0  # an engine not measured yet: the others' mean
        rates = {i: self.engines[i].rate or prior for i in active}
        secs = {i: (costs[i] / rates[i]).tolist() for i in active}
        # largest first (by the cheapest engine's time for it), each to the engine that finishes it soonest
        cheapest = np.min(np.stack([costs[i] / rates[i] for i in active]), axis=0)
        load = {i: 0.0 for i in active}
        out = np.empty(n, np.int64)
        count = {i: 0 for i in active}
        for k in np.argsort(-cheapest, kind="stable").tolist():
            best, when = -1, math.inf
            for i in active:
                if takes[i][k]:
                    t = load[i] + secs[i][k]
                    if t < when:
                        best, when = i, t
            if best < 0:  # no engine takes this format: the first one says why it cannot decode it
                best = active[0]
            out[k] = best
            load[best] += secs[best][k]
            count[best] += 1
        self._explore(out, active, takes, secs, count)
        return out

    @staticmethod
    def _explore(out: np.ndarray, active: list[int], takes: dict, secs: dict, count: dict) -> None:
        """Every active engine gets at least one image it takes (its cheapest), from an
        engine that holds more than one, so that a rate stays measured."""
        for i in active:
            if count[i] or len(active) > len(out):
                continue
            choices = [k for k in range(len(out)) if takes[i][k] and count[int(out[k])] > 1]
            if not choices:
                continue
            k = min(choices, key=lambda k: secs[i][k])
            count[int(out[k])] -= 1
            out[k] = i
            count[i] += 1

    def _by_shares(self, n: int, active: list[int], takes: dict) -> np.ndarray:
        """Pinned shares: each image in batch order to the engine furthest behind its share
        (among those that take its format)."""
        weight = {i: self.shares[self.engines[i].name] for i in active}  # type: ignore[index]
        total = sum(weight.values())
        given = {i: 0 for i in active}
        out = np.empty(n, np.int64)
        for k in range(n):
            best, behind = active[0], -math.inf
            seen = sum(given.values()) + 1
            for i in active:
                if takes[i][k]:
                    d = weight[i] / total * seen - given[i]
                    if d > behind:
                        best, behind = i, d
            out[k] = best
            given[best] += 1
        return out


class _Tuner:
    """Which subset of the engines decodes (see the module doc): a tournament of every
    subset, `trial` batches each, then the best; every `retune` batches the two best
    others measured again."""

    def __init__(self, trial: int, retune: int) -> None:
        self.trial, self.retune = trial, retune
        self.measured: dict[tuple[int, ...], float] = {}  # subset -> images a second of decode()
        self.current: tuple[int, ...] | None = None
        self.queue: list[tuple[int, ...]] = []  # subsets to measure, the first one now
        self._done = 0  # batches of the subset measured now
        self._acc = [0, 0.0]  # its counted images and seconds
        self._since = 0  # batches since the last measuring ended

    @staticmethod
    def subsets(active: Sequence[int]) -> list[tuple[int, ...]]:
        a = list(active)
        return [tuple(i for b, i in enumerate(a) if m >> b & 1) for m in range(1, 1 << len(a))]

    def pick(self, active: list[int]) -> tuple[int, ...]:
        """The engines for the next batch."""
        if len(active) <= 1:
            return tuple(active)
        alive = set(active)
        self.queue = [q for q in self.queue if set(q) <= alive]
        if not self.queue:
            if self.current is None or not set(self.current) <= alive:  # the first batches, or an engine failed
                self.measured = {k: v for k, v in self.measured.items() if set(k) <= alive}
                self.queue = [k for k in self.subsets(active) if k not in self.measured]
                if not self.queue:  # (each subset left was measured: the failed engine's are gone)
                    self.current = max(self.measured, key=lambda k: self.measured[k])
                    self._since = 0
            elif self._since >= self.retune:
                others = sorted((k for k in self.measured if k != self.current and set(k) <= alive),
                                key=lambda k: -self.measured[k])
                self.queue = others[:2]
                self._since = 0
        return self.queue[0] if self.queue else self.current  # type: ignore[return-value]

    def record(self, subset: tuple[int, ...], images: int, seconds: float) -> None:
        """A batch of `images` decoded by `subset` in `seconds`."""
        self._since += 1
        if not self.queue or subset != self.queue[0]:
            if subset == self.current and seconds > 0 and images:  # the one in use: its figure kept fresh
                old = self.measured.get(subset)
                now = images / seconds
                self.measured[subset] = now if old is None else 0.9 * old + 0.1 * now
            return
        self._done += 1
        if self._done > 1:  # (the first batch of a trial warms the subset up: not counted)
            self._acc[0] += images
            self._acc[1] += seconds
        if self._done < self.trial:
            return
        self.measured[subset] = self._acc[0] / self._acc[1] if self._acc[1] > 0 else 0.0
        self.queue.pop(0)
        self._done, self._acc = 0, [0, 0.0]
        if not self.queue:
            self.current = max(self.measured, key=lambda k: self.measured[k])
            self._since = 0
