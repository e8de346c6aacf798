"""The CUDA side of one Loader's pipeline (`Streams`): its decode and augment streams, the
upload ring, the output slots' release events and the decoded batches kept alive until
their kernels are done; gpudecode.loader's module doc has the protocol."""
from __future__ import annotations

import dataclasses
import threading
from typing import Any

import torch

from .batches import IN_FLIGHT, Ready
from .decode import DecodedBatch
from .decode._upload import UploadRing

__all__ = ["SlotRelease", "Streams", "event"]


def event(stream: Any) -> Any:
    """A timing CUDA event recorded on `stream` now."""
    e = torch.cuda.Event(enable_timing=True)
    e.record(stream)
    return e


class SlotRelease:
    """The output slots handed to the trainer and the events that free them: asking for a
    batch, the trainer has enqueued its work on the slots handed before on its CUDA stream
    (the current one of `device`; None: the current device's), and an event recorded there
    then marks the end of that work. A slot is written again only after its event: on the
    GPU the augment stream waits for it (Streams), for pinned host outputs the host does
    (`wait_free`: a non_blocking copy the trainer queued may still be reading the slot)."""

    def __init__(self, ring: int, device: Any = None) -> None:
        self.device = device
        self.slot_free: list[Any] = [None] * ring  # recorded on the trainer's stream when done with a slot
        self.handed: list[int] = []                # slots handed over whose release is not recorded yet

    def release_handed(self, *, keep: int) -> None:
        """The trainer is done with every handed slot but the last `keep`: events on its
        stream guard their reuse."""
        if len(self.handed) <= keep:
            return
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(self.device))
        for slot in self.handed[:len(self.handed) - keep]:
            self.slot_free[slot] = done
        del self.handed[:len(self.handed) - keep]

    def wait_free(self, slot: int) -> None:
        """Waits on the host until the trainer's work on `slot` is done (where it was
        released: a slot still handed is the caller's to avoid)."""
        done = self.slot_free[slot]
        if done is not None:
            done.synchronize()


class Streams(SlotRelease):
    """The CUDA side of one Loader, kept from one epoch to the next: the decode and augment
    streams, the upload ring (device buffers and their pinned staging), the output slots'
    release events and the slots handed to the trainer (SlotRelease), and the decoded
    batches kept alive until their kernels are done (see the module doc for the protocol)."""

    def __init__(self, device: str, ring: int, in_flight: int = IN_FLIGHT) -> None:
        dev = torch.device(device)
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        super().__init__(ring, dev)
        self.decode = torch.cuda.Stream(device=self.device)
        self.augment = torch.cuda.Stream(device=self.device)
        self.in_flight = in_flight  # decoded batches alive at once (Pipeline.in_flight)
        self.uploads = UploadRing(self.device, in_flight)  # host-decoded pixels onto the device
        self._lock = threading.Lock()
        self._retired: list[tuple[int, Any, Any]] = []  # (seq, consumed event, what it keeps alive)

    def wait_idle(self) -> None:
        """Waits (on the host) for everything enqueued on the decode and augment streams:
        nothing of ours reads a buffer after this."""
        self.decode.synchronize()
        self.augment.synchronize()
        with self._lock:
            self._retired = []

    def before_decode(self, seq: int) -> None:
        """Batch `seq` is about to reuse the rings' turn of batch seq - in_flight: wait (on
        the host) for that batch's kernel, and let go of the batches whose kernels are done."""
        with self._lock:
            keep = []
            for item in self._retired:
                s, consumed, _ = item
                if s <= seq - self.in_flight:
                    consumed.synchronize()
                elif not consumed.query():
                    keep.append(item)
            self._retired = keep

    def retire(self, seq: int, consumed: Any, owner: Any) -> None:
        """`owner` (a DecodedBatch) stays alive until `consumed` has completed."""
        with self._lock:
            self._retired.append((seq, consumed, owner))

    def upload(self, decoded: DecodedBatch, seq: int) -> DecodedBatch:
        """Host pixels onto the device on the decode stream (current here): copied into this
        turn's pinned staging buffer, then uploaded without blocking the host."""
        dev, _ = self.uploads.upload(decoded.pixels, seq)
        return dataclasses.replace(decoded, pixels=dev, owner=(decoded.owner, dev))

    def hand_over(self, r: Ready) -> None:
        """Batch `r` to the trainer's stream: it waits for the kernel; the images and labels
        are kept from the caching allocator until the trainer's work on them is done."""
        trainer = torch.cuda.current_stream(self.device)
        trainer.wait_event(r.ready)
        # made on the augment stream, used on the trainer's: the caching allocator must not hand
        # their memory to the augment stream again before the trainer's work on them is done
        # (the labels are new each batch; an output slot's memory is freed by close())
        for images in r.batch.images if isinstance(r.batch.images, list) else [r.batch.images]:
            images.record_stream(trainer)
        for t in [r.batch.labels, *r.batch.fields.values()]:  # (the labels, and each field that is a tensor)
            if hasattr(t, "record_stream") and t.device.type == "cuda":
                t.record_stream(trainer)
        self.handed.append(r.slot)
