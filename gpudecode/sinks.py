"""Where a pipeline's finished images go: the output ring the Loader hands batches from
(`OutputRing`, with the held-batch rule and `even`'s make-up), and host images at their
own sizes (`HostImages`, precache's). Pipeline.finish and Pipeline.finish_images put a
prepared batch's decoded images into one of them."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import time
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import torch

from .batches import Batch, PipelineConfig, Prepared, Ready
from .decode import DecodedBatch
from .errors import DecodeError, Skipped
from .fields import Views, collate, is_views
from .io.reader import Sample
from .kernels.workspace import Workspace
from .mixing import BatchTransform, batch_rng
from .streams import SlotRelease, Streams, event
from .transforms import CenterCrop, Compose, Normalize, RaggedBatch, Resize

__all__ = ["Sink", "OutputRing", "HostImages", "view_part"]


class Sink(Protocol):
    """Where Pipeline.finish_into puts a prepared batch: `take` gets the batch, the rows of
    its images that decoded (`ok`; `whole`: all of them, in order; the failures already
    went to the error policy) and the CUDA side (None on the CPU), and gives what the
    caller wants of them: the output ring, precache's host images, the resident store's
    fill (resident._Keep: whole images kept); a new sink is one more class with `take`."""

    # take(p: Prepared, ok: list[int], whole: bool, gpu: Streams | None, **the sink's own options) -> Any
    @property
    def take(self) -> Callable[..., Any]: ...


class OutputRing:
    """The Loader's sink: `config.ring` output slots (each view's output tensor), written in
    turn and kept across epochs (a new epoch never writes into the pixels of the last
    batches the trainer still reads), and the one owner of the two rules a finished batch
    keeps:
    - a held batch is never written again (DataLoader's promise: a yielded batch is yours):
      a slot whose last batch the caller still holds, or a view or slice of it, gets other
      memory (`fresh_slots` counts them); `reuse_held` turns that off (FFCV's and DALI's
      way: the ring overwrites). On the CPU (not pinned) the memory given up so is kept as
      a spare (up to `config.ring` of them) and taken again once the caller lets its batch go
      (`spares_reused` counts those): a caller who keeps a window of a few recent batches
      reuses their memory instead of taking new memory each time (held memory: at most
      twice the ring's);
    - `even` (equal steps on every rank): images lost to on_error="skip" are made up by
      repeats of the batch's others, a batch whose every image failed by the images of the
      batch before.
    The kernel writes into a slot with one workspace per view (kernels.workspace: what it
    declares is kept from one batch to the next)."""

    def __init__(self, config: PipelineConfig) -> None:
        self.config, self.views = config, config.views
        self.multi = isinstance(config.transform, tuple)
        self.ragged = not self.multi and self.views[0].ragged  # (several views with it: refused by loader_setup)
        self.fresh_slots = 0  # slots given other memory because the caller kept their last batch
        self.spares_reused = 0  # ... of which taken from the spares (memory the caller had let go)
        self.clear()

    def clear(self) -> None:
        """Lets go of the slots, the workspaces and the last batch (made anew when needed)."""
        self.outputs: list[list[tuple[torch.Tensor, torch.Tensor]] | None] = [None] * self.config.ring  # [slot][view]
        self._own_refs: list[list[int] | None] = [None] * self.config.ring  # [slot][view]: its own tensors on it
        self._sizes: list[Any] = [None] * self.config.ring  # [slot]: the size its outputs were made for
        self.slot = 0  # the slot the next batch goes to (kept across epochs)
        # outputs given up by slots whose batch the caller kept, to take again once let go:
        # (pairs, their own tensors' counts, the size they were made for)
        self._spares: list[tuple[list[tuple[torch.Tensor, torch.Tensor]], list[int], Any]] = []
        self.workspaces = [Workspace() for _ in self.views]
        c = self.config
        host = torch.device(c.device).type == "cpu"
        # pinned host outputs: the trainer's non_blocking copies from a slot done before it is
        # written again (events the iterator records as the trainer asks for batches)
        self.pinned = SlotRelease(c.ring) if host and c.pin_memory and torch.cuda.is_available() else None
        # spares only of pageable host memory: a copy or kernel the trainer queued on a stream
        # may still read a CUDA or pinned output after its batch is let go
        self._keep_spares = host and self.pinned is None
        # the last batch handed on, as handed: (images, n, keys, labels, fields), for `even` to repeat
        self._last_good: tuple[Any, int, list[str], torch.Tensor | None, list] | None = None

    def after_fork(self) -> None:
        self._last_good = None
        self.workspaces = [Workspace() for _ in self.views]
        self.pinned = None  # (the parent's CUDA events; a forked child makes no CUDA calls of them)

    def take(self, p: Prepared, ok: list[int], whole: bool, gpu: Streams | None, *, even: str | None = None,
             size: tuple[int, int] | None = None, skipped: Sequence[Skipped] = ()) -> Ready | None:
        """Images `ok` of a prepared batch (`whole`: all of them, in order) through each
        view's kernel into the next slot, with their labels; None when none is left and
        `even` does not make the batch up."""
        t0 = time.perf_counter()
        if even is not None and ok and len(ok) < p.taken:
            ok, whole = [ok[i % len(ok)] for i in range(p.taken)], False
        decoded = p.decoded
        if not ok or decoded is None:
            if even is None or not p.taken:
                return None
            if self._last_good is None:
                last = skipped[-1] if skipped else None  # the batch's last failure, named
                raise DecodeError(f"all {p.taken} images of this Loader's first batch failed (they are in "
                                  f"loader.skipped): with even={even!r} there is no image of this rank "
                                  "yet to make it up from, and leaving it out would give this rank fewer steps "
                                  "than the others", shard=last.shard if last else None,
                                  key=last.key if last else None)
            return self._made_up(p, t0, gpu, size)
        slot, ready = self.slot, None
        stream = gpu.augment if gpu is not None else None
        own = None
        if self.ragged:  # (each image its own size: the batch padded to its largest)
            own = p.params[0].out_sizes(None if whole else ok)
            size = (int(own[:, 0].max()), int(own[:, 1].max()))
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            if gpu is not None:
                stream.wait_event(p.ready)  # type: ignore[union-attr]  # decoded (and uploaded)
                if gpu.slot_free[slot] is not None:
                    stream.wait_event(gpu.slot_free[slot])  # type: ignore[union-attr]  # the trainer is done
            outs = self._output(slot, len(ok), size)
            start = event(stream) if stream is not None else None
            for v, (tf, (_, view)) in enumerate(zip(self.views, outs)):
                part = decoded if not self.multi else view_part(decoded, p, v)
                tf.apply(part, p.params[v], p.sizes, view, rows=None if whole else ok, stream=stream,
                         num_threads=self.config.num_threads, workspace=self.workspaces[v])
            if start is not None:
                p.timing.gpu["augment"] = (start, event(stream))
            lab = self._labels(p, ok, whole)
            fields = [collate(col if whole else [col[k] for k in ok], self.config.device, getattr(spec.mask, "dtype", None),
                              targets=spec.boxes is not None) for col, spec in zip(p.fields, self.config.fields)]
            if own is not None:  # (a Mask's batch, each at its image's own size: views of it, as the images)
                fields = [RaggedBatch(v, own) if spec.mask is not None else v for v, spec in zip(fields, self.config.fields)]
            images: Any = ([_handed(out) for out, _ in outs] if self.multi else _handed(outs[0][0]) if own is None
                           else RaggedBatch(_handed(outs[0][0]), own, self.views[0].layout))
            if isinstance(self.config.batch_transform, BatchTransform):  # ours: on the finished batch, on its stream
                _, lab = self.config.batch_transform(outs[0][1], lab, rng=batch_rng(*p.draw))  # type: ignore[arg-type]
            # (a user's callable runs on the trainer's thread, seeded: Pipeline.user_step)
            if gpu is not None:
                ready = torch.cuda.Event()
                ready.record(stream)
                gpu.retire(p.seq, ready, decoded)  # its buffers live until the kernel is done
        if p.keys is not None:
            keys = p.keys if whole else [p.keys[k] for k in ok]
        else:
            keys = [s.key for s in p.samples] if whole else [p.samples[k].key for k in ok]
        return self._handed_on(p, images, len(ok), keys, lab, ready, t0, fields)

    def _labels(self, p: Prepared, ok: list[int], whole: bool) -> torch.Tensor | None:
        if not self.config.labels:
            return None
        # (from a numpy array: torch.tensor over a list of ints costs ~0.7 us an element)
        lab = torch.from_numpy(np.array(p.labels, np.int64) if whole else np.asarray(p.labels, np.int64)[ok])
        if self.config.device != "cpu":
            lab = lab.pin_memory().to(self.config.device, non_blocking=True)
        return lab

    def _handed_on(self, p: Prepared, images: Any, n: int, keys: list[str], lab: torch.Tensor | None, ready: Any,
                   t0: float, fields: list) -> Ready:
        p.timing.augment = time.perf_counter() - t0
        p.timing.size = n
        head = (images, lab) if self.config.labels or not self.config.fields else (images,)
        batch = Batch.named(self.config.batch_names)(*head, *fields, keys=keys)
        self._last_good = (images, n, keys, lab, fields)
        slot = self.slot
        self.slot = (slot + 1) % self.config.ring
        return Ready(batch, p.timing, p.position, slot, ready, p.draw)

    def _made_up(self, p: Prepared, t0: float, gpu: Streams | None, size: tuple[int, int] | None) -> Ready:
        """A batch whose every image failed, under an even policy: made up of the rank's
        images of the batch before (repeated to the batch's size), so every rank keeps
        its step count; the failures are in `skipped` and the repeats keep their keys."""
        src, n, keys, labels, fields = self._last_good  # type: ignore[misc]
        idx = [i % n for i in range(p.taken)]
        slot, ready = self.slot, None
        stream = gpu.augment if gpu is not None else None
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            if gpu is not None and gpu.slot_free[slot] is not None:
                stream.wait_event(gpu.slot_free[slot])  # type: ignore[union-attr]
            made = []
            if isinstance(src, RaggedBatch):  # (its padded batch's size, its images' own sizes)
                hw = src.padded.shape[1:3] if src.layout == "NHWC" else src.padded.shape[2:4]
                size = (int(hw[0]), int(hw[1]))
            for (out, _), img in zip(self._output(slot, p.taken, size), src if self.multi else [src]):
                whole_img = img.padded if isinstance(img, RaggedBatch) else img
                pick = torch.tensor(idx, device=whole_img.device)
                out.copy_(whole_img[:n][pick])  # (the batch before came from these slots: the same image shape)
                made.append(_handed(out) if not isinstance(img, RaggedBatch)
                            else RaggedBatch(_handed(out), img.sizes[idx], img.layout))
            lab = labels[pick.to(labels.device)] if labels is not None else None
            again = [_repeated(v, pick, idx) for v in fields]
            if gpu is not None:
                ready = torch.cuda.Event()
                ready.record(stream)
        return self._handed_on(p, made if self.multi else made[0], p.taken, [keys[i] for i in idx], lab, ready, t0,
                               again)

    def _output(self, slot: int, n: int, size: tuple[int, int] | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(output, its [N, 3, h, w] view) of each view, for the first n images of `slot`,
        under the held-batch rule (see the class doc)."""
        c = self.config
        if self.ragged:
            return self._ragged_output(slot, n, size)  # type: ignore[arg-type]
        pairs = self._free_slot(slot, spare=True)
        if pairs is None:
            spare = next((k for k, (prs, own, made) in enumerate(self._spares)
                          if made == size and not _used(prs, own)), None)
            if spare is not None:
                pairs, self._own_refs[slot], _ = self._spares.pop(spare)
                self.outputs[slot] = pairs
                self.spares_reused += 1
            else:
                pairs = self.outputs[slot] = [tf.new_output(c.batch_size, c.device, pin_memory=c.pin_memory,
                                                            size=size) for tf in self.views]
                self._own_refs[slot] = [_tensors_on(out) for out, _ in pairs]
            self._sizes[slot] = size
        if n == self.config.batch_size:  # (a full batch: the slot as it is, without slicing)
            return pairs
        return [(out[:n], view[:n]) for out, view in pairs]

    def _ragged_output(self, slot: int, n: int, size: tuple[int, int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """_output for images of their own sizes (a batch padded to its largest, which
        changes from batch to batch): the slot's memory is one flat buffer, grown when a
        batch needs more (by a quarter more than asked: a few growths, then none), each
        batch a view of its start; the held-batch rule as for the others (no spares)."""
        c, tf = self.config, self.views[0]
        pairs = self._free_slot(slot, spare=False)
        h, w = size
        need = c.batch_size * 3 * h * w
        if pairs is None or pairs[0][0].numel() < need:
            grown = need if pairs is None else max(need, pairs[0][0].numel() * 5 // 4)
            pin = c.pin_memory and torch.device(c.device).type == "cpu" and torch.cuda.is_available()
            flat = torch.empty(grown, dtype=tf.plan.dtype, device=c.device, pin_memory=pin)
            pairs = self.outputs[slot] = [(flat, flat)]
            self._own_refs[slot] = [_tensors_on(flat)]
        flat = pairs[0][0]
        if tf.layout == "NHWC":
            out = flat[:n * 3 * h * w].view(n, h, w, 3)
            return [(out, out.permute(0, 3, 1, 2))]
        out = flat[:n * 3 * h * w].view(n, 3, h, w)
        return [(out, out)]

    def _free_slot(self, slot: int, spare: bool) -> list | None:
        """The outputs of `slot` to write the next batch into, once the trainer's copies
        from it are done; None where the batch handed out from it is still held (the held
        rule: a fresh slot is made, and the held one, with `spare`, kept as a spare)."""
        pairs = self.outputs[slot]
        if pairs is not None and not self.config.reuse_held and self._held(slot):
            if spare and self._keep_spares and len(self._spares) < self.config.ring:
                self._spares.append((pairs, self._own_refs[slot], self._sizes[slot]))  # type: ignore[arg-type]
            pairs = self.outputs[slot] = None
            self.fresh_slots += 1
        if pairs is not None and self.pinned is not None:
            self.pinned.wait_free(slot)  # the trainer's copies from it are done
        return pairs

    def _held(self, slot: int) -> bool:
        """Whether a tensor other than the slot's own (out and its view) still uses the
        memory of `slot`: the batch handed out from it, or a view of it, kept by the caller."""
        own = self._own_refs[slot]
        pairs = self.outputs[slot]
        if own is None or pairs is None:
            return False
        return _used(pairs, own)


def _repeated(value: Any, pick: torch.Tensor, idx: list[int]) -> Any:
    """A field's batch value (a tensor, a list of values, or a Mask's list of tensors, one a
    view) at rows `idx` (`pick` as a tensor)."""
    if isinstance(value, RaggedBatch):  # (a Mask's masks at their images' sizes)
        return RaggedBatch(value.padded[pick.to(value.padded.device)], value.sizes[idx], value.layout)
    if isinstance(value, torch.Tensor):
        return value[pick.to(value.device)]
    if is_views(value):
        out = [v[pick.to(v.device)] if isinstance(v, torch.Tensor) else [copy.deepcopy(v[i]) for i in idx]
               for v in value]
        return Views(out) if isinstance(value, Views) else out
    return [copy.deepcopy(value[i]) for i in idx]  # (each its own: a Boxes target's tensors, a JSON record)


def view_part(decoded: DecodedBatch, p: Prepared, v: int) -> DecodedBatch:
    """The decoded batch as view v's kernel reads it: each image's box moved from the
    window decoded (the union of the views') to view v's own box inside it."""
    boxes = decoded.boxes.copy()
    for k, (window, mine) in enumerate(zip(p.windows, p.view_boxes[v])):
        t0, l0, h0, w0 = window
        if (int(boxes[k][2]), int(boxes[k][3])) != (h0, w0):
            raise ValueError(f"decoder gave a {boxes[k][2]}x{boxes[k][3]} window for one of {h0}x{w0}: several "
                             "views need windows decoded at full scale")
        boxes[k] = (boxes[k][0] + mine[0] - t0, boxes[k][1] + mine[1] - l0, mine[2], mine[3])
    return dataclasses.replace(decoded, boxes=boxes)


class HostImages:
    """finish_images' sink: decoded images to host uint8 HWC arrays, each at its own size,
    straight from the decoder's memory (any layout, CPU or CUDA) with the transforms'
    kernel (Compose.apply), one launch a plan (resize to, centre crop to), rounded to
    nearest. An image neither resized nor cropped is copied out as it is."""

    # Normalize with mean -0.5/255 and std 1/255 turns the kernel's [0, 1] result v into
    # 255 * v + 0.5, so truncating to uint8 rounds to nearest, as torchvision's Resize on
    # uint8 images does: one float pass and one cast, no separate scale and round passes.
    _ROUND = Normalize([-0.5 / 255] * 3, [1 / 255] * 3)

    def take(self, p: Prepared, ok: list[int], whole: bool, gpu: Streams | None, *,
             plan: Any) -> list[tuple[Sample, np.ndarray, tuple[int, int]]]:
        """The decoded images `ok` of a prepared batch, each brought to what `plan(h, w)`
        says (Pipeline.finish_images), with their samples and the size each was decoded at,
        in order."""
        decoded = p.decoded
        if not ok or decoded is None:
            return []
        sizes = [(int(decoded.boxes[k][2]), int(decoded.boxes[k][3])) for k in ok]
        plans = [plan(h, w) for h, w in sizes]
        stream = gpu.augment if gpu is not None else None
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            if gpu is not None:
                stream.wait_event(p.ready)  # type: ignore[union-attr]  # decoded (and uploaded)
            images = self(decoded, ok, plans, stream=stream)  # (host arrays: synchronized)
        return [(p.samples[k], img, hw) for k, img, hw in zip(ok, images, sizes)]

    def __init__(self, num_threads: int) -> None:
        self.num_threads = num_threads
        self._tfs: dict[tuple, Compose] = {}
        self.workspace = Workspace()  # (one launch at a time: the pipeline's finishing thread, its stream)

    def _compose(self, resize: tuple[int, int] | None, crop: tuple[int, int] | None) -> Compose:
        key = (resize, crop)
        tf = self._tfs.get(key)
        if tf is None:
            steps: list[Any] = []
            if resize is not None:
                steps.append(Resize(resize))
            if crop is not None:
                steps.append(CenterCrop(crop))
            tf = self._tfs[key] = Compose([*steps, self._ROUND], layout="NHWC")
        return tf

    def __call__(self, decoded: DecodedBatch, ks: Sequence[int],
                 plans: Sequence[tuple[tuple[int, int] | None, tuple[int, int] | None]],
                 stream: Any = None) -> list[np.ndarray]:
        """Images ks of `decoded`, each by its plan, as host uint8 HWC arrays."""
        out: list[np.ndarray | None] = [None] * len(ks)
        groups: dict[tuple, list[int]] = {}
        for j, (k, plan) in enumerate(zip(ks, plans)):
            if plan == (None, None):  # kept as it is
                out[j] = self._host_window(decoded, k)
            else:
                groups.setdefault(plan, []).append(j)
        n = len(decoded.boxes)
        for (resize, crop), idx in groups.items():
            tf = self._compose(resize, crop)
            rows = [ks[j] for j in idx]
            sizes: list = [None] * n  # the box (the whole image) is what is resized
            params: list = [None] * n
            boxes = [(int(decoded.boxes[k][2]), int(decoded.boxes[k][3])) for k in rows]
            for k, box, prm in zip(rows, boxes, tf.make_params(boxes, 0)):
                sizes[k], params[k] = box, prm
            # (the float output kept between batches: only its uint8 cast leaves here)
            res = self.workspace.tensor("host-images", (len(idx), *tf.out_size, 3), torch.float32,  # type: ignore[misc]
                                        decoded.pixels.device)
            view = res.permute(0, 3, 1, 2)
            tf.apply(decoded, params, sizes, view, rows=rows, stream=stream, num_threads=self.num_threads,
                     workspace=self.workspace)
            u8 = res.to(torch.uint8).cpu().numpy()  # values in [0.5, 255.5]: truncation rounds
            for i, j in enumerate(idx):
                out[j] = u8[i]
        return out  # type: ignore[return-value]

    @staticmethod
    def _host_window(decoded: DecodedBatch, k: int) -> np.ndarray:
        t, l, bh, bw = (int(v) for v in decoded.boxes[k])
        sy, sx, sc = (int(v) for v in decoded.strides[k])
        start = int(decoded.offsets[k]) + t * sy + l * sx
        img = decoded.pixels[start:].as_strided((bh, bw, 3), (sy, sx, sc))  # any layout the decoder gave
        return img.cpu().numpy().copy()


def _handed(out: torch.Tensor) -> torch.Tensor:
    """The tensor the caller gets for an output slot's `out`: a tensor of its own over the
    same memory (so that whether the caller still holds it can be told, _tensors_on)."""
    return out.view(out.shape)


def _used(pairs: list[tuple[torch.Tensor, torch.Tensor]], own: list[int]) -> bool:
    """Whether a tensor other than the outputs' own (out and its view) uses their memory,
    or that cannot be told."""
    return any(mine < 0 or _tensors_on(out) > mine for (out, _), mine in zip(pairs, own))


def _tensors_on(t: torch.Tensor) -> int:
    """How many tensors use t's memory (views and slices of it included); -1 where this
    torch cannot tell (the slot then always gets new memory: never a batch overwritten)."""
    try:
        # (less the storage object made here; torch has no public count)
        return int(torch._C._storage_Use_Count(t.untyped_storage()._cdata)) - 1  # noqa: SLF001
    except (AttributeError, RuntimeError, TypeError):
        return -1
