"""What a DataLoader user counts on without reading a line of documentation (issue 35's two
silent traps):

- a yielded batch is the caller's: keeping every batch of an epoch, without `.clone()`,
  gives the tensors a cloning user gets (the Loader's output ring takes new memory for a
  buffer whose batch is still held; `reuse_buffers=True` is the FFCV/DALI opt-out);
- every order of load_state_dict, set_epoch and iteration continues exactly, starts the
  asked epoch from its beginning (with a warning naming both epochs when a loaded place is
  dropped), or raises: never an epoch started at another epoch's place. The README's
  "Resuming" table, row by row.
"""
from __future__ import annotations

import collections
import contextlib
import gc
import warnings

import numpy as np
import pytest
import torch

from gpudecode import ConcurrentIterationError, Loader
from gpudecode import transforms as T

from conftest import encode, make_shard

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@contextlib.contextmanager
def counted_references_only():
    """No cyclic collection within: a batch let go must be freed by its count of
    references alone, as soon as the last one goes (nothing cyclic may hold a batch), not
    whenever the collector happens to run. (gc.collect() after each batch asserted less
    and took 0.3-1 s a call in a full test process.)"""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@pytest.fixture(scope="module")
def urls(photos, tmp_path_factory):
    d = tmp_path_factory.mktemp("promises")
    names = list(photos)
    samples = []
    for k in range(48):
        img = photos[names[k % len(names)]]
        crop = np.ascontiguousarray(img[k:k + 90, 2 * k:2 * k + 110])
        samples.append({"__key__": f"s{k:03d}", "jpg": encode(crop, "JPEG", quality=90), "cls": str(k % 5).encode()})
    return [make_shard(d / f"p-{j}.tar", samples[j * 16:(j + 1) * 16]) for j in range(3)]


def tf(size=24):
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])


# ---------------------------------------------------------------------------------------
# a yielded batch is the caller's


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_keeping_every_batch_gives_what_cloning_gives(urls, layout):
    kw = dict(batch_size=4, transform=T.Compose(list(tf().transforms), layout=layout), device="cpu", seed=3,
              prefetch_factor=1)
    cloned = [(b.keys, b.images.clone(), b.labels.clone()) for b in Loader(urls, **kw)]
    ld = Loader(urls, **kw)
    kept = list(ld)  # 12 batches, a ring of 4: each slot came round three times
    assert len(kept) == 12 and ld.pipeline.config.ring == 4
    assert ld.pipeline.ring.fresh_slots == 12 - 4
    for (keys, img, lab), b in zip(cloned, kept):
        assert b.keys == keys
        assert torch.equal(b.images, img) and torch.equal(b.labels, lab)


def test_a_kept_view_or_slice_of_a_batch_is_kept_too(urls):
    ld = Loader(urls, batch_size=4, transform=tf(), device="cpu", seed=3, prefetch_factor=1)
    ref = [b.images.clone() for b in Loader(urls, batch_size=4, transform=tf(), device="cpu", seed=3)]
    parts = []
    for k, b in enumerate(ld):
        parts.append(b.images[1:3] if k % 2 else b.images.permute(0, 2, 3, 1))  # the batch itself is dropped
    for k, p in enumerate(parts):
        assert torch.equal(p, ref[k][1:3] if k % 2 else ref[k].permute(0, 2, 3, 1)), k


def test_the_usual_loop_reuses_the_ring(urls):
    """A loop that lets each batch go gets the ring's memory over and over: no new memory
    after the first round, two epochs long."""
    ld = Loader(urls, batch_size=4, transform=tf(), device="cpu", seed=3, prefetch_factor=1)
    ptrs = set()
    with counted_references_only():
        for _ in range(2):
            for b in ld:
                ptrs.add(b.images.data_ptr())
                del b
    assert ld.pipeline.ring.fresh_slots == 0 and len(ptrs) <= ld.pipeline.config.ring


def test_a_window_of_kept_batches_reuses_the_memory_it_lets_go(urls):
    """A caller who keeps its last 3 batches (a ring of 4, the batches made ahead beside
    them, so the ring's slots come round while their batches are kept and take other
    memory): the memory given up is taken again once its batch leaves the window. Over two
    epochs (48 batches) the outputs made stay within the ring and its spares (5-6 made in
    runs here, where each slot given other memory would have made one: 31-39); every batch
    kept is what cloning gives."""
    kw = dict(batch_size=2, transform=tf(), device="cpu", seed=3, prefetch_factor=1)
    cloning = Loader(urls, **kw)
    ref = []
    for epoch in range(2):
        cloning.set_epoch(epoch)
        ref += [(b.keys, b.images.clone()) for b in cloning]
    ld = Loader(urls, **kw)
    ring = ld.pipeline.ring
    window: collections.deque = collections.deque(maxlen=3)
    ptrs, made = [], []  # each batch's memory; outputs made so far (not taken from the spares)
    with counted_references_only():
        for epoch in range(2):
            ld.set_epoch(epoch)
            for b in ld:
                window.append(b)
                ptrs.append(b.images.data_ptr())
                del b
                made.append(ld.pipeline.config.ring + ring.fresh_slots - ring.spares_reused)
                first = len(ptrs) - len(window)
                for j, kept in enumerate(window):  # nothing kept was written again
                    assert kept.keys == ref[first + j][0] and torch.equal(kept.images, ref[first + j][1])
    assert ld.pipeline.config.ring == 4 and len(ptrs) == len(ref) == 48
    assert ring.fresh_slots >= 8  # slots came round while their batch was kept ...
    assert made[-1] <= 4 + 4  # ... and took the spares' memory: the ring and at most as many spares made
    assert len(set(ptrs)) <= made[-1]


def test_pinned_slots_wait_for_the_trainers_copies(urls, monkeypatch):
    """pin_memory=True (host outputs the trainer copies with non_blocking=True): asking for
    batch k records an event on the trainer's stream for the slots of batches k-2 and
    before, and a slot is written again only after the host has waited for the event
    recorded once the trainer had its last batch and asked for the one after. (No CUDA here:
    the ring's bookkeeping with stand-in events.)"""
    import torch

    from gpudecode.streams import SlotRelease

    received = [0]

    class Event:
        def record(self, stream=None):
            self.at = received[0]  # batches the trainer had when it was recorded

        def synchronize(self):
            pass

    monkeypatch.setattr(torch.cuda, "Event", lambda *a, **k: Event())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    ld = Loader(urls, batch_size=2, transform=tf(), device="cpu", seed=3, prefetch_factor=1)
    ring = ld.pipeline.ring
    assert ring.pinned is None  # (no CUDA here: no pinned outputs)
    written, waits = [0], []

    class Logged(SlotRelease):
        def wait_free(self, slot):
            done = self.slot_free[slot]
            waits.append((written[0] - 1, slot, None if done is None else done.at))
            super().wait_free(slot)

    ring.pinned = Logged(ld.pipeline.config.ring)
    output = ring._output

    def counted(slot, n, size):
        written[0] += 1
        return output(slot, n, size)

    monkeypatch.setattr(ring, "_output", counted)
    got = []
    with counted_references_only():
        for b in ld:
            received[0] += 1
            got.append((b.keys, b.images.clone()))
            del b
    ref = [(b.keys, b.images.clone()) for b in Loader(urls, batch_size=2, transform=tf(), device="cpu", seed=3)]
    assert [k for k, _ in got] == [k for k, _ in ref] and all(torch.equal(a, r) for (_, a), (_, r) in zip(got, ref))
    n = ld.pipeline.config.ring
    assert len(got) == 24 and [k for k, _, _ in waits] == list(range(n, 24))  # every reuse of a slot waited ...
    for k, slot, at in waits:  # ... for the event recorded after the trainer had its last batch
        assert slot == k % n and at is not None and at >= k - n + 2, (k, slot, at)


def test_reuse_buffers_is_the_ffcv_way(urls):
    """reuse_buffers=True: the ring overwrites whatever the caller holds (documented)."""
    ld = Loader(urls, batch_size=4, transform=tf(), device="cpu", seed=3, prefetch_factor=1, reuse_buffers=True)
    kept = list(ld)
    assert ld.pipeline.ring.fresh_slots == 0
    assert len({b.images.data_ptr() for b in kept}) <= ld.pipeline.config.ring
    ref = [b.images.clone() for b in Loader(urls, batch_size=4, transform=tf(), device="cpu", seed=3)]
    assert not all(torch.equal(a.images, r) for a, r in zip(kept, ref))  # what the opt-out costs


def test_kept_batches_with_a_batch_transform_and_views(urls):
    mix = T.MixUp(alpha=0.4, num_classes=5)
    kw = dict(batch_size=4, transform=tf(), device="cpu", seed=3, prefetch_factor=1, batch_transform=mix)
    ref = [(b.images.clone(), b.labels.clone()) for b in Loader(urls, **kw)]
    kept = list(Loader(urls, **kw))
    assert all(torch.equal(b.images, i) and torch.equal(b.labels, lab) for b, (i, lab) in zip(kept, ref))
    views = [tf(24), tf(16)]
    kw = dict(batch_size=4, transform=views, device="cpu", seed=3, prefetch_factor=1)
    ref2 = [[v.clone() for v in b.images] for b in Loader(urls, **kw)]
    kept2 = list(Loader(urls, **kw))
    for b, r in zip(kept2, ref2):
        assert all(torch.equal(v, w) for v, w in zip(b.images, r))


# ---------------------------------------------------------------------------------------
# resuming: every order


def _keys(batches) -> list[list[str]]:
    return [list(b.keys) for b in batches]


def _epoch(urls, epoch: int, **kw) -> list[list[str]]:
    ld = Loader(urls, **kw)
    ld.set_epoch(epoch)
    return _keys(ld)


def _state_after(urls, epoch: int, batches: int, **kw) -> dict:
    ld = Loader(urls, **kw)
    ld.set_epoch(epoch)
    it = iter(ld)
    for _ in range(batches):
        next(it)
    state = ld.state_dict()
    it.close()
    return state


KW = dict(batch_size=4, transform=tf(16), device="cpu", seed=11)


def test_row_load_then_iterate_continues(urls):
    state = _state_after(urls, 1, 3, **KW)
    ld = Loader(urls, **KW)
    ld.load_state_dict(state)
    assert _keys(ld) == _epoch(urls, 1, **KW)[3:]


def test_row_load_then_set_epoch_same_continues(urls):
    state = _state_after(urls, 1, 3, **KW)
    ld = Loader(urls, **KW)
    ld.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ld.set_epoch(1)
    assert _keys(ld) == _epoch(urls, 1, **KW)[3:]


def test_row_load_then_set_epoch_other_starts_it_whole_and_says_so(urls):
    """The trap this table closes: epoch 2 used to start at its 4th batch (24 samples lost)."""
    state = _state_after(urls, 1, 3, **KW)
    ld = Loader(urls, **KW)
    ld.load_state_dict(state)
    with pytest.warns(RuntimeWarning, match=r"set_epoch\(2\).*3 batches into epoch 1.*epoch 2 starts from its "
                                            r"beginning.*rest of epoch 1 is not read"):
        ld.set_epoch(2)
    got = _keys(ld)
    assert got == _epoch(urls, 2, **KW) and len(got) == 12
    assert ld.state_dict()["dataset_state"]["epoch"] == 2


def test_row_state_dict_right_after_load_gives_the_state_back(urls):
    state = _state_after(urls, 1, 3, **KW)
    ld = Loader(urls, **KW)
    ld.load_state_dict(state)
    again = ld.state_dict()
    assert again["dataset_state"]["position"] == state["dataset_state"]["position"] == 12
    assert again["dataset_state"]["epoch"] == 1 and again["_num_yielded"] == 3 and not again["_iterator_finished"]
    fresh = Loader(urls, **KW)
    fresh.load_state_dict(again)  # a checkpoint saved before the first batch loses nothing
    assert _keys(fresh) == _epoch(urls, 1, **KW)[3:]


def test_row_load_of_a_finished_epoch_starts_the_next(urls):
    ld = Loader(urls, **KW)
    ld.set_epoch(1)
    list(ld)
    state = ld.state_dict()
    assert state["_iterator_finished"]
    again = Loader(urls, **KW)
    again.load_state_dict(state)
    assert _keys(again) == _epoch(urls, 2, **KW)
    again = Loader(urls, **KW)
    again.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is dropped: no warning
        again.set_epoch(5)
    assert _keys(again) == _epoch(urls, 5, **KW)


def test_row_set_epoch_before_load_the_load_decides(urls):
    state = _state_after(urls, 1, 3, **KW)
    ld = Loader(urls, **KW)
    ld.set_epoch(7)
    ld.load_state_dict(state)
    assert _keys(ld) == _epoch(urls, 1, **KW)[3:]


def test_row_load_while_iterating_raises(urls):
    state = _state_after(urls, 1, 3, **KW)
    ld = Loader(urls, **KW)
    it = iter(ld)
    next(it)
    with pytest.raises(ConcurrentIterationError, match="load_state_dict"):
        ld.load_state_dict(state)
    it.close()
    ld.load_state_dict(state)  # once the iterator is closed
    assert _keys(ld) == _epoch(urls, 1, **KW)[3:]


def test_row_load_twice_the_second_wins_without_a_warning(urls):
    a = _state_after(urls, 1, 3, **KW)
    b = _state_after(urls, 2, 5, **KW)
    ld = Loader(urls, **KW)
    ld.load_state_dict(a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ld.load_state_dict(b)
    assert _keys(ld) == _epoch(urls, 2, **KW)[5:]


def test_row_resumed_epoch_then_the_next_runs_whole(urls):
    """After the resumed epoch ends, the next iteration is the next epoch, whole (and a
    set_epoch for it changes nothing)."""
    state = _state_after(urls, 1, 3, **KW)
    for call_set_epoch in (False, True):
        ld = Loader(urls, **KW)
        ld.load_state_dict(state)
        assert _keys(ld) == _epoch(urls, 1, **KW)[3:]
        if call_set_epoch:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                ld.set_epoch(2)
        assert _keys(ld) == _epoch(urls, 2, **KW)


def test_row_checkpoint_after_set_epoch_of_the_next_epoch_runs_that_epoch(urls):
    """A checkpoint taken between set_epoch(f) and the first batch of f (a loop that saves at
    the top of each epoch): f runs whole after the load. It used to save "f, finished", and
    a job resumed from it began f + 1: epoch f's 48 samples were never read."""
    ld = Loader(urls, **KW)
    list(ld)  # epoch 0 to its end
    ld.set_epoch(1)
    state = ld.state_dict()
    ds = state["dataset_state"]
    assert (ds["epoch"], ds["position"], state["_num_yielded"], state["_iterator_finished"]) == (1, 0, 0, False)
    again = Loader(urls, **KW)
    again.load_state_dict(state)
    got = _keys(again)
    assert got == _epoch(urls, 1, **KW)
    assert sorted(k for b in got for k in b) == sorted(f"s{k:03d}" for k in range(48))  # every sample, once


def test_an_iterator_a_set_epoch_made_stale_changes_no_record(urls):
    """set_epoch(f) while an iterator of e is still active: the rest of e's batches are no
    longer recorded (the record is f's, from its beginning), and its end does not mark f ended."""
    ld = Loader(urls, **KW)
    it = iter(ld)
    next(it)
    ld.set_epoch(4)
    rest = list(it)  # the old iterator runs out its epoch
    assert len(rest) == 11
    state = ld.state_dict()
    assert (state["dataset_state"]["epoch"], state["dataset_state"]["position"], state["_iterator_finished"]) == \
        (4, 0, False)
    assert ld.cursor.phase.value == "ready" and ld.current_epoch == 4
    assert _keys(ld) == _epoch(urls, 4, **KW)
