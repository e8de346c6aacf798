"""Each sample's generator: random.Random's methods over a SplitMix64 stream keyed by
(seed, epoch, index)."""
from __future__ import annotations

import hashlib
import random
from typing import Any

from .. import _native

_M64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment (2^64 / golden ratio)


def _mix64(z: int) -> int:
    """SplitMix64's finalizer (Stafford's variant 13): a bijection of 64-bit words."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


class _SampleRandom(random.Random):
    """random.Random's methods (uniform, randint, shuffle, ...) over a SplitMix64 stream
    keyed by one sample's (seed, epoch, index). random.Random seeds a 624-word Mersenne
    Twister state, about 5-6 µs a sample, longer than all the sample's draws together;
    this one starts in a fraction of a microsecond. SplitMix64 passes BigCrush; each
    sample's stream starts at its own key (seed, epoch and index mixed), so two samples'
    streams meet only with probability ~2^-64 per draw."""

    def __init__(self, key: int, index: int, *, native: bool = True) -> None:  # no super(): nothing to seed
        self.gauss_next = None  # (what random.Random's seeding sets, and gauss() reads)
        if native:
            # the stream runs natively (a draw costs ~0.1 us there, ~1 us in Python's big
            # ints): its two primitives are bound on the instance, where random.Random's
            # methods (uniform, randint, shuffle, ...) look them up. native=False keeps the
            # methods below, the same stream in Python: the reference the tests compare.
            g = _native.SplitMix(key, index)
            self.random = g.random  # type: ignore[method-assign]
            self.getrandbits = g.getrandbits  # type: ignore[method-assign]
        else:
            self._state = _mix64(key ^ ((index & _M64) * 0xD1B54A32D192ED03 & _M64))

    def seed(self, *args: Any, **kwargs: Any) -> None:  # random.Random's own seeding is not used
        raise TypeError("a sample's generator is fixed by (seed, epoch, index)")

    def _next64(self) -> int:
        self._state = (self._state + _GAMMA) & _M64
        return _mix64(self._state)

    def random(self) -> float:
        return (self._next64() >> 11) * (1.0 / 9007199254740992.0)

    def getrandbits(self, k: int) -> int:
        if k < 0:
            raise ValueError("number of bits must be non-negative")
        bits = got = 0
        while got < k:
            bits |= self._next64() << got
            got += 64
        return bits & ((1 << k) - 1)


def sample_rng(seed: int, epoch: int, index: int) -> random.Random:
    """The generator of one sample's random choices, fixed by (seed, epoch, index): a
    random.Random (uniform, randint, shuffle, ... as usual) over a SplitMix64 stream."""
    return _SampleRandom(_epoch_key(seed, epoch), index)


def _epoch_key(seed: int, epoch: int) -> int:
    return _mix64(_mix64((seed & _M64) ^ _GAMMA) ^ ((epoch & _M64) * _GAMMA & _M64))


def view_seed(seed: int, view: int) -> int:
    """The seed view `view` draws from: `seed` itself for view 0 (one view draws as a
    plain transform does), an independent one for each other view."""
    if view == 0:
        return seed
    return int.from_bytes(hashlib.sha256(f"gpudecode-view:{seed}:{view}".encode()).digest()[:8], "little") >> 1
