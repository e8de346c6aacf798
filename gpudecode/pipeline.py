"""The per-batch pipeline of a Loader: one owner of the work between samples read and a
finished batch, and of the buffers that work cycles through.

    prepare(chunk):   probe (header sizes, labels) -> draw the params (seeded) ->
                      decode requests -> decode (only the windows the crops need)
    finish(prepared): the error policy -> the fused kernel into an output slot -> Batch

The Loader keeps the configuration, the epoch and resume state, and the threads that
drive the two stages (loader.py's module doc has the thread and CUDA stream design);
`Pipeline` holds the decoder, the sink finished batches go to (sinks.py: the
`OutputRing` of output slots, used in turn and kept across epochs, with the held-batch
rule and `even`'s make-up; precache's `HostImages`), the CUDA side (`Streams`,
streams.py: streams, upload ring, events) and what the error policy skipped. What passes
between the stages (`PipelineConfig`, `Prepared`, `Ready`, `Batch`) is batches.py's.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import time
from typing import Any, Sequence

import numpy as np
import torch

from ._builtins import import_numba
from ._probe import Probed, probe_columns
from ._threads import one_torch_thread
from .batches import IN_FLIGHT, MID_QUEUE, Batch, PipelineConfig, Prepared, Ready, SizeRows
from .decode import choose, make_decoder
from .errors import DecodeError, ErrorPolicy, LabelError, Skipped
from .fields import disagreeing, follow_targets, read_fields
from .io.reader import Sample
from .labels import parse_label
from .mixing import BatchTransform, seeded_call
from .sinks import HostImages, OutputRing, Sink
from .streams import Streams, event
from .stats import BatchTiming
from .transforms import Compose
from .transforms.draws import Draws, draw_batch
from .transforms.rng import view_seed

__all__ = ["Pipeline", "PipelineConfig", "Batch", "Ready", "MID_QUEUE", "IN_FLIGHT"]



class Pipeline:
    """Prepares read batches and finishes them into output slots (see the module doc),
    built from a PipelineConfig; `policy` says what happens to images and labels that fail
    (errors.ErrorPolicy: a Loader shares its one with its reader, so one list holds all
    that was skipped)."""

    def __init__(self, config: PipelineConfig, *, policy: ErrorPolicy) -> None:
        import_numba()  # (now: a script may have replaced builtins.print by the first batch, _builtins.py)
        self.config = config
        # several views of each image (a tuple of Composes): each image is decoded once, over
        # the union of the views' windows, and each view's kernel reads its own part of it
        self.multi = isinstance(config.transform, tuple)
        self.views: list[Compose] = config.views
        if not self.views:
            raise ValueError("transform: a Compose, or a non-empty list of them (one per view)")
        self.transform = self.views[0]
        self.policy = policy
        self._decoder: Any = None  # made on first use: no CUDA context before workers fork
        self._size: tuple[int, int] | None = None  # the images' one size, for a transform without geometry
        # the sink finished batches go to: output slots (`ring` of them, used in turn and kept across
        # epochs) with the held-batch rule, `even`'s make-up and the kernel's workspaces (one a view)
        self.ring = OutputRing(config)
        self.seq = 0    # batches decoded so far (the rings' turn; kept across epochs)
        self.gpu: Streams | None = None
        self._images: HostImages | None = None  # finish_images' sink, made on first use
        # the samples' fields (fields.read_fields: a tokenizer of the user's, ...) are read on a
        # thread of their own while the batch decodes (the decoders release the GIL): made on first use
        self._fields_thread: concurrent.futures.ThreadPoolExecutor | None = None
        # the masks (fields.Mask) are decoded and moved on num_threads threads, a part of the batch each
        self._mask_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.fields_aside = True  # (False: read in the stage's own thread, for a pipeline of one item: Loader.dataset)
        # a view whose crops are drawn from the samples' boxes (RandomIoUCrop): the Boxes field's place, whose
        # values are read before the draws (loader_setup checks there is one)
        self._drawn_from = (next((f for f, spec in enumerate(config.fields) if spec.boxes is not None), None)
                            if any(tf.plan.reads_boxes for tf in self.views) else None)

    @property
    def in_flight(self) -> int:
        """Decoded batches alive at once: one in the kernel, `depth` queued, one being decoded."""
        return self.config.depth + 2

    @property
    def owns_decoder(self) -> bool:
        """The decoder is made here (from a name, names or shares), not handed in."""
        return isinstance(self.config.decoder, (str, tuple, dict))

    @property
    def decoder(self) -> Any:
        """The decoder; None before ensure_decoder()."""
        return self._decoder

    def decoder_name(self) -> str:
        """The decoder's name, without making it."""
        if self._decoder is not None:
            return self._decoder.name
        if not self.owns_decoder:
            return self.config.decoder.name
        return choose(self.config.decoder, self.config.device)

    def ensure_decoder(self) -> None:
        """The decoder (made on first use, by decode.make_decoder: no CUDA context before
        workers fork) and, on a GPU, the streams."""
        if self._decoder is None:
            if self.owns_decoder:
                c = self.config
                self._decoder = make_decoder(c.decoder, device=c.device, num_threads=c.num_threads,
                                             max_pixels=c.max_pixels, fast=c.fast_decode, buffers=self.in_flight,
                                             # (no DCT scaling with several views: they share a window; nor
                                             # where a box is not resized down: plan.decode_frame)
                                             out_size=None if self.multi else self.transform.plan.decode_frame)
            else:
                self._decoder = self.config.decoder  # a decoder instance (e.g. DaliDecoder(device="cpu"))
        buffers = getattr(self._decoder, "buffers", None)
        if buffers is not None and buffers < self.in_flight:  # a decoder handed in: it says how many it keeps
            raise ValueError(f"decoder {getattr(self._decoder, 'name', '?')!r} keeps {buffers} results valid at once; the Loader "
                             f"holds {self.in_flight} (give it buffers={self.in_flight} or more)")
        if self.gpu is None and self.config.device.startswith("cuda"):
            self.gpu = Streams(self.config.device, self.config.ring, self.in_flight)

    def after_fork(self) -> None:
        """In a forked child: the decoder's threads and the CUDA streams stayed in the parent."""
        if self.owns_decoder:
            self._decoder = None
        self.gpu = None
        self._fields_thread = self._mask_pool = None  # (their threads stayed in the parent)
        self.ring.after_fork()

    def close(self) -> None:
        """Releases the decoder (when made here), the output slots and the CUDA side; they
        are made anew when needed. On a GPU it first waits for the work already enqueued on
        the pipeline's own streams (the last decodes and kernels still read the decoder's
        buffers); the trainer's stream is not waited for."""
        if self.gpu is not None:
            self.gpu.wait_idle()
        if self._decoder is not None and self.owns_decoder and hasattr(self._decoder, "close"):
            self._decoder.close()
        if self.owns_decoder:
            self._decoder = None
        if self.gpu is not None:  # what the trainer may still read is done before its buffers go
            self.gpu.release_handed(keep=0)
        self.gpu = None  # (after wait_idle: no kernel still works in the workspaces)
        self.ring.clear()
        for pool in (self._fields_thread, self._mask_pool):
            if pool is not None:
                pool.shutdown(wait=True)
        self._fields_thread = self._mask_pool = None

    @property
    def skipped(self) -> list[Skipped]:
        """What the error policy passed over (its list: shared with the reader's)."""
        return self.policy.skipped

    def probe(self, chunk: list[Sample]) -> Probed:
        """Samples with a readable image header (and label, in `extras`): probe_batch."""
        return probe_batch(self.config, self.policy, chunk)

    def _one_size(self, probed: Probed) -> Probed:
        """A transform that leaves the size to the images: the images of the one output size
        (see _same_size)."""
        if self._size is not None and not self.transform.plan.geometry and \
                probed.heights.count(self._size[0]) == len(probed) and probed.widths.count(self._size[1]) == len(probed):
            return probed
        keep = self._same_size(list(zip(probed.samples, probed.heights, probed.widths)))
        return probed if len(keep) == len(probed) else probed.keep(keep)

    def prepare(self, chunk: list[Sample], *, seed: int, epoch: int, position: int, rank: int = 0,
                world: int = 1) -> Prepared:
        """Stage A: probe, draw the params, decode (only the windows the crops need).
        `position` is the epoch index of chunk[0]; with rank and world it makes each
        sample's global index, which with `seed` and `epoch` fixes its draws."""
        timing = BatchTiming(size=0)
        t0 = time.perf_counter()
        probed = self.probe(chunk)
        if self.transform.out_size is None and len(probed) and not self.config.each_size and not self.transform.ragged:
            probed = self._one_size(probed)
        samples = probed.samples
        sizes = list(zip(probed.heights, probed.widths))
        labels = probed.extras
        # unique over ranks: (seed, epoch, global index) fixes each sample's draws; each view
        # draws from its own seed (view 0 from `seed` itself)
        if len(probed) == len(chunk):  # (none failed: probed[i] is chunk[i])
            indices: Any = np.arange(position, position + len(chunk), dtype=np.int64) * world + rank
        else:
            index = {id(s): position + i for i, s in enumerate(chunk)}
            indices = [index[id(s)] * world + rank for s in samples]
        at = self._drawn_from
        first = self._fields_first(samples, sizes) if at is not None else None
        keep, params, view_boxes, boxes = self._draw(samples, sizes, indices, seed, epoch,
                                                     targets=None if first is None or at is None else first[0][at])
        if keep is not None:  # (images the transform cannot take: each its sample's error)
            probed = probed.keep(keep)
            samples, sizes, labels = probed.samples, [sizes[i] for i in keep], probed.extras
            if first is not None:
                first = _kept_fields(first, keep)
        requests = probed.requests(boxes)
        fields = self._read_fields(samples, sizes, params, first) if self.config.fields else None
        t1 = time.perf_counter()
        timing.probe = t1 - t0
        decoded = None
        ready = None
        timing.encoded_bytes = sum(map(len, probed.datas))
        seq = self.seq
        if requests:
            self.seq += 1
            gpu = self.gpu
            if gpu is not None:
                gpu.before_decode(seq)  # the rings' turn of batch seq - in_flight is free
            with torch.cuda.stream(gpu.decode) if gpu is not None else contextlib.nullcontext():
                ev = [event(gpu.decode)] if gpu is not None else []
                decoded = self._decoder.decode(requests)  # type: ignore[union-attr]
                if decoded.engines:
                    timing.engines = decoded.engines
                if gpu is not None:
                    ev.append(event(gpu.decode))
                    if decoded.pixels.device.type != "cuda":  # host pixels (the CPU decoder): upload
                        timing.h2d_bytes = decoded.pixels.numel()
                        decoded = gpu.upload(decoded, seq)
                    ev.append(event(gpu.decode))
                    timing.gpu["decode"] = (ev[0], ev[1])
                    timing.gpu["h2d"] = (ev[1], ev[2])
                    ready = ev[2]  # the augment stream waits for this
        timing.decode = time.perf_counter() - t1
        values, failed = fields.result() if fields is not None else ([], {})
        return Prepared(samples, params, sizes, labels, decoded, timing, taken=len(chunk), seq=seq, ready=ready,
                         draw=(seed, epoch, rank, position), windows=boxes, view_boxes=view_boxes,
                         fields=values, field_errors=failed)

    def _fields_first(self, samples: list[Sample], sizes: Sequence[tuple[int, int]]
                      ) -> tuple[list[list[Any]], dict[int, Any]]:
        """read_fields(samples) here, before the draws, where a view draws from the boxes
        (RandomIoUCrop): (values, errors), masks checked against `sizes`, none moved yet."""
        c = self.config
        return read_fields(c.fields, samples, sizes=sizes, max_pixels=c.max_pixels, on_host=c.device == "cpu",
                           pool=self.mask_pool() if c.masks else None)

    def _read_fields(self, samples: list[Sample], sizes: Sequence[tuple[int, int]], params: list[Draws],
                     first: tuple[list[list[Any]], dict[int, Any]] | None = None) -> "concurrent.futures.Future":
        """read_fields(samples) started on the fields' thread (it runs while the batch decodes),
        or read here where `fields_aside` is off; masks checked against `sizes` and moved by
        each view's `params`. `first`: the fields read before the draws (_fields_first),
        moved here."""
        c = self.config
        if first is not None:
            values, failed = first
            follow_targets(c.fields, values, failed, samples, [tf.plan for tf in self.views], params,
                           pool=self.mask_pool() if c.masks else None, on_host=c.device == "cpu")
            done_first: concurrent.futures.Future = concurrent.futures.Future()
            done_first.set_result((values, failed))
            return done_first
        kw: dict[str, Any] = dict(sizes=sizes, max_pixels=c.max_pixels, on_host=c.device == "cpu",
                                  follow=([tf.plan for tf in self.views], params) if c.follows else None)
        if c.masks and self.fields_aside:
            kw["pool"] = self.mask_pool()
        if not self.fields_aside:
            done: concurrent.futures.Future = concurrent.futures.Future()
            done.set_result(read_fields(c.fields, samples, **kw))
            return done
        if self._fields_thread is None:
            self._fields_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gpudecode-fields",
                                                                     initializer=one_torch_thread)
        return self._fields_thread.submit(read_fields, c.fields, samples, **kw)

    def mask_pool(self) -> concurrent.futures.ThreadPoolExecutor | None:
        """The threads masks are decoded and moved on (made on first use; None with one thread)."""
        if self._mask_pool is None and self.config.num_threads > 1:
            self._mask_pool = concurrent.futures.ThreadPoolExecutor(self.config.num_threads,
                                                                    thread_name_prefix="gpudecode-masks",
                                                                    initializer=one_torch_thread)
        return self._mask_pool

    def prepare_resident(self, rows: np.ndarray, store: Any, *, seed: int, epoch: int, position: int, rank: int = 0,
                         world: int = 1, places: np.ndarray | None = None, taken: int | None = None) -> Prepared:
        """Stage A for samples kept resident (gpudecode.resident): rows `rows` of `store`,
        drawn as prepare() draws them (the same positions, the same seeds), read in place:
        no read, probe or decode. `places`: each row's place in the chunk of the epoch's
        order it came from (default 0, 1, ...: a chunk whose samples all decoded), `taken`:
        that chunk's length. A store in RAM feeding a GPU uploads the batch's crop windows,
        packed, in one copy."""
        timing = BatchTiming(size=0)
        t0 = time.perf_counter()
        samples: list[Any] = store.sample_array[rows].tolist()
        shapes = store.shapes[rows]
        sizes: Sequence[tuple[int, int]] = SizeRows(shapes)
        labels = store.labels[rows] if store.labels is not None else np.zeros(len(rows), np.int64)
        at = np.arange(len(rows), dtype=np.int64) if places is None else np.asarray(places, np.int64)
        if self.transform.out_size is None and len(rows) and not self.config.each_size and not self.transform.ragged:
            # (a batch of the one size, the usual case, checked on the array: no Python a sample)
            if self._size is None or self.transform.plan.geometry or not (shapes == self._size).all():
                same = self._same_size([(s, h, w) for s, (h, w) in zip(samples, sizes)])
                if len(same) < len(rows):
                    rows, samples, at, shapes = rows[same], [samples[k] for k in same], at[same], shapes[same]
                    sizes, labels = SizeRows(shapes), labels[same]
        indices: Any = (position + at) * world + rank
        drawn, params, view_boxes, boxes = self._draw(
            samples, sizes, indices, seed, epoch, shapes,
            targets=None if self._drawn_from is None else store.fields[self._drawn_from][rows].tolist())
        if drawn is not None:  # (images the transform cannot take: each its sample's error)
            rows, samples, shapes = rows[drawn], [samples[k] for k in drawn], shapes[drawn]
            sizes, labels = SizeRows(shapes), labels[drawn]
        keys = store.key_array[rows].tolist()
        t1 = time.perf_counter()
        timing.probe = t1 - t0
        seq = self.seq
        decoded = None
        ready = None
        if len(rows):
            self.seq += 1
            gpu = self.gpu
            on_host = store.pixels.device.type != "cuda"
            if gpu is not None:
                gpu.before_decode(seq)  # the rings' turn of batch seq - in_flight is free
            if gpu is not None and on_host:  # (packed straight into the upload's page-locked staging)
                decoded = store.gathered(rows, boxes, into=lambda n: gpu.uploads.staging_buffer(seq, n))
            else:
                decoded = store.batch(rows, boxes)
            if gpu is not None:
                with torch.cuda.stream(gpu.decode):
                    ev = [event(gpu.decode)]
                    if on_host:  # a RAM store feeding a GPU: the windows, packed, in one upload
                        timing.h2d_bytes = decoded.pixels.numel()
                        decoded = gpu.upload(decoded, seq)
                    ev.append(event(gpu.decode))
                    timing.gpu["h2d"] = (ev[0], ev[1])
                    ready = ev[1]
        timing.decode = time.perf_counter() - t1
        values: list[list[Any]] = [list(col[rows]) for col in store.fields]
        failed: dict[int, Any] = {}
        if self.config.follows:  # (masks and boxes kept as decoded, moved here by the batch's draws)
            follow_targets(self.config.fields, values, failed, samples, [tf.plan for tf in self.views], params,
                           pool=self.mask_pool() if self.config.masks else None, on_host=self.config.device == "cpu")
        return Prepared(samples, params, sizes, labels, decoded, timing, taken=len(rows) if taken is None else taken,
                         seq=seq, ready=ready, draw=(seed, epoch, rank, position), windows=boxes, view_boxes=view_boxes,
                         keys=keys, fields=values, field_errors=failed)

    def _same_size(self, items: list[tuple[Any, int, int]]) -> list[int]:
        """A transform without geometry keeps each image's size, and one with a Resize of the
        shorter side alone its shape; a batch has one size: the first image seen fixes it,
        an image of another output size is a bad sample (named)."""
        plan, limit = self.transform.plan, self.config.max_pixels
        outs = [plan.image_output(h, w) for _, h, w in items]
        big = {k for k, (oh, ow) in enumerate(outs) if limit and oh * ow > limit}  # (a sliver made huge by Resize(int))
        for k in sorted(big):
            s, h, w = items[k]
            self.policy(DecodeError(f"image is {h}x{w}, resized to {outs[k][0]}x{outs[k][1]}: over the limit of {limit} "
                                    "pixels (max_pixels)", shard=s.shard, key=s.key))
        if self._size is None:
            self._size = next((o for k, o in enumerate(outs) if k not in big), None)
        if self._size is None:
            return []
        sh, sw = self._size
        keep = []
        for k, ((s, h, w), out) in enumerate(zip(items, outs)):
            if k in big:
                continue
            if out == self._size:
                keep.append(k)
            elif plan.geometry:
                self.policy(DecodeError(f"image is {h}x{w}, resized to {out[0]}x{out[1]}, the others to {sh}x{sw}: "
                                        f"{plan.one_size_why}, so all must have one ({plan.one_size_fix})",
                                        shard=s.shard, key=s.key))
            else:
                self.policy(DecodeError(f"image is {h}x{w}, the others {sh}x{sw}: the transform has no geometry "
                                        "step, so every image keeps its size and all must have one (add "
                                        "CenterCrop, RandomCrop or Resize)", shard=s.shard, key=s.key))
        return keep

    def _draw(self, samples: list[Any], sizes: Sequence[tuple[int, int]], indices: Any, seed: int,
              epoch: int, size_array: np.ndarray | None = None, targets: list[Any] | None = None
              ) -> tuple[list[int] | None, list[Draws], list[np.ndarray], np.ndarray]:
        """Each view's draws for a batch (the common plans natively, as columns: see
        transforms.draws), each view's boxes and the boxes decoded (their union over the
        views): (the images kept, or None when all are, params, view boxes, boxes). An image
        the transform cannot take (a crop larger than it, ...) is its sample's DecodeError
        under the policy and the rest are drawn again, as they would be in a batch alone.
        `targets`: the Boxes field's values as read (transforms.boxes.Stored; None where a
        sample's fields failed), where a view draws from them (RandomIoUCrop)."""
        keep = None
        size_array = np.asarray(sizes, np.int64).reshape(-1, 2) if size_array is None else size_array
        xyxy = None if targets is None else [_NO_BOX if t is None else t.xyxy for t in targets]
        try:  # (the plan's draws: boxes as read, XYXY already, not checked again as Compose.draw_batch checks a caller's)
            params = [draw_batch(tf.plan, sizes, view_seed(seed, v), epoch=epoch, indices=indices,
                                 size_array=size_array, boxes=xyxy) for v, tf in enumerate(self.views)]
        except (ValueError, ArithmeticError):
            keep = _drawable(self.views, self.policy, samples, sizes, indices, seed, epoch, xyxy)
            if len(keep) == len(samples):
                raise  # not one image's: the batch's own failure
            sizes, indices, xyxy, params = _redrawn(self.views, keep, sizes, indices, xyxy, seed, epoch)
        big = self._too_large(params, sizes)  # (ragged: each image's output its own, drawn)
        if big:
            at = list(range(len(samples))) if keep is None else keep
            for i, out in big.items():
                s = samples[at[i]]
                self.policy(DecodeError(f"image is {sizes[i][0]}x{sizes[i][1]}, made {out[0]}x{out[1]} by the transform: "
                                        f"over the limit of {self.config.max_pixels} pixels (max_pixels)",
                                        shard=s.shard, key=s.key))
            rest = [i for i in range(len(sizes)) if i not in big]
            keep = [at[i] for i in rest]
            sizes, indices, xyxy, params = _redrawn(self.views, rest, sizes, indices, xyxy, seed, epoch)
        # [view]: int64 [N, 4] (top, left, height, width); on the CPU a warp's canvas may read a part of each image
        view_boxes = [pv.boxes(host=self.config.device == "cpu") for pv in params]
        return keep, params, view_boxes, view_boxes[0] if not self.multi else _union(view_boxes)

    def _too_large(self, params: list[Draws], sizes: Sequence[tuple[int, int]]) -> dict[int, tuple[int, int]]:
        """The images whose output, their own under a ragged view, is over max_pixels:
        {place: (h, w)} (a Resize of a sliver's shorter side, as _same_size says it for
        the plans of one size)."""
        limit = self.config.max_pixels
        big: dict[int, tuple[int, int]] = {}
        for tf, pv in zip(self.views, params):
            if limit and tf.plan.ragged and tf.plan.out_size is None and len(sizes):
                for i, (oh, ow) in enumerate(pv.out_sizes().tolist()):
                    if oh * ow > limit:
                        big.setdefault(i, (oh, ow))
        return big

    def finish(self, p: Prepared, even: str | None = None) -> Ready | None:
        """Stage B: the error policy, the fused kernel into the next output slot (the
        OutputRing), and the labels; None when no image of the batch is left (and `even`
        does not make it up)."""
        return self.finish_into(self.ring, p, even=even, size=self._size, skipped=self.skipped)

    def finish_images(self, p: Prepared, plan: Any) -> list[tuple[Sample, np.ndarray, tuple[int, int]]]:
        """Stage B for a sink of host images at their own sizes (precache's), in place of
        the output ring: the error policy as finish() applies it, then each decoded image
        brought to what `plan(h, w)` says (resize to (h, w), then centre crop to (h, w); None:
        that step not taken) by the transforms' kernel (HostImages), as uint8 HWC arrays,
        with their samples and the (h, w) each was decoded at, in order."""
        if self._images is None:
            self._images = HostImages(self.config.num_threads)
        return self.finish_into(self._images, p, plan=plan)

    def finish_into(self, sink: Sink, p: Prepared, *, agree: bool = True, **options: Any) -> Any:
        """Stage B into `sink` (sinks.Sink): the decoder's deferred checks and the error
        policy for each image that failed, then for each sample whose fields failed (and,
        with `agree`, whose array field differs from its batch's first: fields.disagreeing),
        then the rest handed to the sink."""
        ok, whole = self._decoded(p)
        if self.config.fields and ok:
            kept = set(ok)
            bad = {k: e for k, e in p.field_errors.items() if k in kept}
            for k in sorted(bad):
                self.policy(bad[k])
            rest = [k for k in ok if k not in bad]
            if agree:
                worse = disagreeing(self.config.fields, p.fields, rest, p.samples)
                for k in sorted(worse):
                    self.policy(worse[k])
                bad.update(worse)
            if bad:
                ok, whole = [k for k in ok if k not in bad], False
        return sink.take(p, ok, whole, self.gpu, **options)

    def user_step(self, batch: "Batch", draw: tuple) -> "Batch":
        """A user's batch callable (not one of ours) on a batch handed over: on the caller's
        thread, its generators seeded from the batch's draw (mixing.seeded_call)."""
        step = self.config.batch_transform
        if step is None or isinstance(step, BatchTransform):
            return batch
        images, labels = seeded_call(step, batch.images, batch.labels, draw)
        return batch.with_(images, labels)

    def _decoded(self, p: Prepared) -> tuple[list[int], bool]:
        """The images of a prepared batch that decoded (each one that did not is its
        sample's DecodeError under the policy), and whether that is all of them, in order."""
        if p.decoded is None:
            return [], False
        errors = p.decoded.settle().errors  # (the decoder's deferred checks: an image never written is an error)
        if errors.count(None) == len(errors):
            return list(range(len(errors))), True
        for k, err in enumerate(errors):
            if err is not None:
                self.policy(DecodeError(err, shard=p.samples[k].shard, key=p.samples[k].key))
        return [k for k, err in enumerate(errors) if err is None], False


def _label_ok(config: PipelineConfig, v: int) -> bool:
    """A label the Loader trains on (its sign and num_classes checked, int64)."""
    return ((v >= 0 or config.allow_negative_labels) and (config.num_classes is None or v < config.num_classes)
            and -(1 << 63) <= v < (1 << 63))


def trained_label(config: PipelineConfig, fields: dict, *, shard: str, key: str) -> int:
    """A sample's label as it is trained on: parsed from its label member (parse_label),
    its source's label_offset added, checked with the offset (a label_offset that moves it
    out of range is named). The one rule for the Loader's batches and `dataset.targets`."""
    shift = config.label_offsets.get(shard, 0)
    if not shift:
        return parse_label(fields, config.label_exts, shard=shard, key=key,
                           allow_negative=config.allow_negative_labels, num_classes=config.num_classes)
    v = parse_label(fields, config.label_exts, shard=shard, key=key, allow_negative=True)
    if not _label_ok(config, v + shift):
        bound = "negative" if v + shift < 0 else f"not below num_classes={config.num_classes}"
        raise LabelError(f"label {v} + its source's label_offset {shift} = {v + shift} is {bound}",
                         shard=shard, key=key)
    return v + shift


def probe_batch(config: PipelineConfig, policy: ErrorPolicy, chunk: list[Sample]) -> Probed:
    """Samples with a readable image header (and label, in `extras`), in one native
    call for the batch (see probe_columns); a label that call does not parse, or that
    fails the checks (sign, num_classes), is trained_label's, which says why."""
    exts, offsets = config.label_exts, config.label_offsets
    shifts = set(offsets.values()) | {0}  # (a shard without an offset: 0)

    def label(s: Sample) -> int:  # (as stored: the offsets are added below, to every label at once)
        return trained_label(config, s.fields, shard=s.shard, key=s.key) - offsets.get(s.shard, 0)

    def fits(v: int) -> bool:  # (native labels: in range with every offset, else label() decides)
        return all(_label_ok(config, v + shift) for shift in shifts)

    if not config.labels:
        return probe_columns(chunk, config.image_exts, config.max_pixels, policy)
    probed = probe_columns(chunk, config.image_exts, config.max_pixels, policy, label, label_exts=exts,
                           fits=fits)
    if offsets:  # a mixture's sources with label offsets (gpudecode.Source)
        probed.extras = [v + offsets.get(s.shard, 0) for v, s in zip(probed.extras, probed.samples)]
    return probed


def _redrawn(views: Sequence[Compose], rows: list[int], sizes: Sequence[tuple[int, int]], indices: Any,
             xyxy: list[np.ndarray] | None, seed: int, epoch: int) -> tuple[list[tuple[int, int]], np.ndarray, Any, list[Draws]]:
    """The batch's images `rows` alone: their sizes, indices and boxes, and each view's
    draws of them (the same draws as in the whole batch: each sample's are its own)."""
    sizes = [sizes[i] for i in rows]
    indices = np.asarray([int(indices[i]) for i in rows], np.int64)
    xyxy = None if xyxy is None else [xyxy[i] for i in rows]
    params = [draw_batch(tf.plan, sizes, view_seed(seed, v), epoch=epoch, indices=indices, boxes=xyxy)
              for v, tf in enumerate(views)]
    return sizes, indices, xyxy, params


def _drawable(views: Sequence[Compose], policy: ErrorPolicy, samples: list[Sample], sizes: Sequence[tuple[int, int]],
              indices: Any, seed: int, epoch: int, xyxy: list[np.ndarray] | None = None) -> list[int]:
    """The images of a batch whose draws can be made, each drawn alone (the same draws
    as in a batch); each one that cannot is its sample's DecodeError under the policy."""
    keep = []
    for i, (s, hw) in enumerate(zip(samples, sizes)):
        try:
            for v, tf in enumerate(views):
                draw_batch(tf.plan, [hw], view_seed(seed, v), epoch=epoch, indices=np.asarray([int(indices[i])]),
                           boxes=None if xyxy is None else [xyxy[i]])
            keep.append(i)
        except (ValueError, ArithmeticError) as e:
            policy(DecodeError(f"the transform cannot take this image of {hw[0]}x{hw[1]}: {e}",
                                    shard=s.shard, key=s.key))
    return keep


_NO_BOX = np.zeros((0, 4), np.float32)  # (a sample whose fields failed: drawn without boxes, then skipped)


def _kept_fields(first: tuple[list[list[Any]], dict[int, Any]], keep: list[int]
                 ) -> tuple[list[list[Any]], dict[int, Any]]:
    """Fields read for a batch (values [field][sample], errors by place) for the samples
    `keep` only, in order."""
    values, failed = first
    place = {k: i for i, k in enumerate(keep)}
    return [[col[k] for k in keep] for col in values], {place[k]: e for k, e in failed.items() if k in place}


def _union(boxes: Sequence[np.ndarray]) -> np.ndarray:
    """Row k: the smallest box (top, left, height, width) holding row k of every [N, 4]
    array of boxes given."""
    b = np.stack(boxes)  # [views, N, 4]
    top, left = b[:, :, 0].min(0), b[:, :, 1].min(0)
    bottom, right = (b[:, :, 0] + b[:, :, 2]).max(0), (b[:, :, 1] + b[:, :, 3]).max(0)
    return np.stack([top, left, bottom - top, right - left], axis=1)
