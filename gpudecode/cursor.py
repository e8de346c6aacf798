"""Where a Loader stands in its epochs: one phase value, the epoch, and the place in it.

The Loader's lifecycle used to be five flags (started, finished, epoch chosen, a resume
pending, its global start) whose combinations meant a phase; a combination no one meant
(an epoch run to its end, then `set_epoch(f)`, then `state_dict()`) saved "f, finished"
and a job resumed from it skipped f. One phase, written only here:

    READY     the next iteration runs `epoch` from its beginning (a new Loader, or
              set_epoch chose it, or a loaded state said so)
    RESUMING  the next iteration continues `epoch` after `position` samples
              (load_state_dict of a state saved mid-epoch)
    RUNNING   an iteration of `epoch` started; it has not run to its end (its iterator
              may still be active, or may have been dropped)
    ENDED     `epoch` ran to its end

The iterator reports through `on_batch` and `on_end`, for the run it was started for
only: a report from an iterator that set_epoch or load_state_dict made stale changes
nothing.
"""
from __future__ import annotations

from typing import Any

import enum
import warnings
from dataclasses import dataclass

__all__ = ["Cursor", "Phase", "STATE_FORMAT"]

STATE_FORMAT = "gpudecode.Loader/1"


class Phase(enum.Enum):
    READY = "ready"
    RESUMING = "resuming"
    RUNNING = "running"
    ENDED = "ended"


@dataclass
class Start:
    """What an iteration starts with: the epoch, the sample position in this rank's share
    it starts at, the batches yielded before it (a resumed epoch's), and split="elastic"'s
    global position the epoch starts from."""

    epoch: int
    position: int
    yielded: int
    global_start: int
    run: int


class Cursor:
    """The phase, the epoch and the place in it (see the module doc). `run` numbers the
    iterations started: reports carry the number of the run they belong to."""

    def __init__(self) -> None:
        self.phase = Phase.READY
        self.epoch = 0
        self.position = 0        # samples of this rank's share consumed (RESUMING: where it continues)
        self.yielded = 0         # batches handed over in this epoch
        self.global_start = 0    # split="elastic": the global position the epoch starts (or started) at
        self.epoch_total: int | None = None  # split="elastic": the running epoch's samples, once planned
        self.run = 0

    # -- what the next iteration runs ----------------------------------------------------

    def next_epoch(self) -> int:
        """The epoch the next iteration will run."""
        return self.epoch if self.phase in (Phase.READY, Phase.RESUMING) else self.epoch + 1

    @property
    def finished(self) -> bool:
        return self.phase is Phase.ENDED

    def choose(self, epoch: int) -> None:
        """set_epoch(epoch): a state loaded mid-epoch keeps its place for the same epoch;
        any other choice starts `epoch` from its beginning (a loaded place given up is said,
        with both epochs named). A negative epoch is refused (ValueError): epochs count from 0."""
        if epoch < 0:
            raise ValueError(f"epoch must be a whole number >= 0, not {epoch}")
        if self.phase is Phase.RESUMING:
            if epoch == self.epoch:
                return
            warnings.warn(f"set_epoch({epoch}) after load_state_dict() of a state saved {self.yielded} batches into "
                          f"epoch {self.epoch}: epoch {epoch} starts from its beginning, and the rest of epoch "
                          f"{self.epoch} is not read (set_epoch({self.epoch}), or no set_epoch, continues it)",
                          RuntimeWarning, stacklevel=3)
        self.ready(epoch)

    def ready(self, epoch: int) -> None:
        """The next iteration runs `epoch` from its beginning."""
        self.phase, self.epoch = Phase.READY, epoch
        self.position = self.yielded = self.global_start = 0
        self.epoch_total = None

    def resume(self, epoch: int, *, position: int, yielded: int, global_start: int = 0) -> None:
        """load_state_dict of a state saved mid-epoch: the next iteration continues there."""
        self.phase, self.epoch = Phase.RESUMING, epoch
        self.position, self.yielded, self.global_start = position, yielded, global_start
        self.epoch_total = None

    def start(self) -> Start:
        """An iteration starts: the epoch it runs and where in it."""
        if self.phase in (Phase.RUNNING, Phase.ENDED):
            self.ready(self.epoch + 1)
        self.phase = Phase.RUNNING
        self.run += 1
        return Start(self.epoch, self.position, self.yielded, self.global_start, self.run)

    # -- reports of the running iteration ------------------------------------------------

    def planned(self, run: int, total: int | None) -> None:
        """split="elastic": the running epoch's plan holds `total` samples."""
        if self._current(run):
            self.epoch_total = total

    def on_batch(self, run: int, position: int) -> None:
        """A batch was handed over; `position` samples of the share are consumed."""
        if self._current(run):
            self.yielded += 1
            self.position = position

    def on_end(self, run: int) -> None:
        """The run's epoch ran to its end."""
        if self._current(run):
            self.phase = Phase.ENDED

    def _current(self, run: int) -> bool:
        return run == self.run and self.phase is Phase.RUNNING

    # -- split="elastic" ---------------------------------------------------------------

    def global_position(self, *, batch_size: int, consumers: int, total: int) -> int:
        """How many positions of the epoch's global order the job has consumed, the same on
        every rank at a step: the epoch's start, plus whole rounds (a batch of every
        consumer's) for the batches this rank has had, the last round partial; 0 once the
        epoch ended."""
        if self.phase is Phase.ENDED:
            return 0
        b, local = batch_size, self.position
        done = self.global_start + (local // b) * consumers * b + (local % b) * consumers
        return min(done, total)

    # -- the saved form ----------------------------------------------------------------

    def to_state(self, identity: dict) -> dict:
        """This place as a plain, picklable dict in the layout of torchdata's
        StatefulDataLoader (`_num_yielded`, `_iterator_finished`, ...), gpudecode's own under
        `dataset_state`: the epoch, the position, and `identity` (what a Loader must match to
        resume from it: seed, ranks, split, shards, transforms...)."""
        return {
            "_index_sampler_state": None, "_sampler_iter_state": None, "_sampler_iter_yielded": self.yielded,
            "_num_yielded": self.yielded, "_IterableDataset_len_called": None, "_shared_seed": None,
            "fetcher_state": {"dataset_iter_state": None, "fetcher_ended": self.finished},
            "dataset_state": {"format": STATE_FORMAT, "epoch": self.epoch, "position": self.position, **identity},
            "_iterator_finished": self.finished,
        }

    @staticmethod
    def saved(state: object) -> dict:
        """The `dataset_state` of a state that to_state made; ValueError for anything else."""
        ds = state.get("dataset_state") if isinstance(state, dict) else None
        if not isinstance(ds, dict) or ds.get("format") != STATE_FORMAT:
            raise ValueError("not a gpudecode Loader state (expected Loader.state_dict()'s output)")
        return ds

    def from_state(self, state: dict, mine: list[tuple[str, object]], *, regrid: bool = False,
                   size: Any = None) -> None:
        """Takes a saved place, once its fields are whole numbers in range and every (name,
        value) of `mine` equals the state's (a ValueError names the first that is not).
        `regrid`: split="elastic" on another world size or batch size: this rank's part of
        the rest of the epoch, from the job's global position. `size(epoch)`: the samples
        this rank reads in an epoch (a saved position past it is refused)."""
        ds = self.saved(state)
        _check_fields(state, ds, regrid)
        for name, value in mine:
            if ds.get(name) != value:
                what = {"fingerprint": "other shards or files (their names and order)",
                        "transform": "other transforms"}.get(name)
                saved = what if what else f"{name}={ds.get(name)!r}"
                here = "" if what else f", this loader has {name}={value!r}"
                hint = " (split='elastic' resumes on another world size)" if name == "world_size" else ""
                if name == "transform":
                    hint = " (load_state_dict(state, strict=False) resumes with the transforms changed on purpose)"
                raise ValueError(f"this state was saved with {saved}{here}: it cannot resume here{hint}")
        epoch = int(ds["epoch"])
        if size is not None and not regrid and not state.get("_iterator_finished") and ds["position"] > size(epoch):
            raise ValueError(f"this state's position {ds['position']} is past the {size(epoch)} samples this rank "
                             f"reads in epoch {epoch}: it cannot resume here")
        if state.get("_iterator_finished"):
            self.ready(epoch + 1)
        elif regrid:
            self.resume(epoch, position=0, yielded=0, global_start=int(ds["global_position"]))
        else:
            self.resume(epoch, position=int(ds["position"]), yielded=int(state.get("_num_yielded", 0)),
                        global_start=int(ds.get("global_start", 0)))


def _check_fields(state: dict, ds: dict, regrid: bool) -> None:
    """A saved state's places are whole numbers >= 0 and its flag a bool (a truncated or
    tampered state is a ValueError naming the field, never a sample read twice)."""
    def whole(where: dict, name: str, required: bool = True) -> None:
        if name not in where:
            if required:
                raise ValueError(f"this state has no {name!r}: it is not a whole Loader.state_dict()")
            return
        v = where[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"this state's {name!r} must be a whole number >= 0, not {v!r}")

    whole(ds, "epoch")
    whole(ds, "position", required=not regrid)
    whole(ds, "global_start", required=False)
    whole(ds, "global_position", required=regrid)
    whole(state, "_num_yielded", required=False)
    finished = state.get("_iterator_finished", False)
    if not isinstance(finished, bool):
        raise ValueError(f"this state's '_iterator_finished' must be True or False, not {finished!r}")
