"""The GPU path's defects that can be shown without a GPU: numba-cuda's performance
warnings under the suite's warnings-as-errors, EXIF orientation on every decoder (their
CPU builds), DALI's pipeline after a failed run, output slots across an epoch boundary,
the protocol that keeps decoded buffers alive until their kernels are done (stand-in
events), and the precache record of the GPU model."""
from __future__ import annotations

import io
import time
import warnings

import numpy as np
import pytest
from PIL import Image

from gpudecode.decode import Request
from gpudecode.decode._base import strip_exif
from gpudecode.decode.cpu import CpuDecoder

from conftest import GPU_BACKENDS, encode, make_shard


def test_numba_cuda_performance_warnings_are_not_test_errors():
    """numba-cuda raises its own NumbaPerformanceWarning (not numba's) for launches of fewer
    than 128 blocks and host arrays given to kernels; under pytest's "error" filter they
    would fail the augment thread on a GPU. The suite ignores exactly these two."""
    from numba.cuda.core.errors import NumbaPerformanceWarning

    warnings.warn(NumbaPerformanceWarning("Grid size 4 will likely result in GPU under-utilization due to low "
                                          "occupancy."), stacklevel=1)
    warnings.warn(NumbaPerformanceWarning("Host array used in CUDA kernel will incur copy overhead to/from device."),
                  stacklevel=1)
    # on the GPU machine numba colours its messages (terminal escapes before the text): the first
    # GPU run failed this test on exactly that
    warnings.warn(NumbaPerformanceWarning("\x1b[1mGrid size 1 will likely result in GPU under-utilization due to "
                                          "low occupancy.\x1b[0m"), stacklevel=1)
    with pytest.raises(NumbaPerformanceWarning):  # anything else of the class still fails a test
        warnings.warn(NumbaPerformanceWarning("some other performance problem"), stacklevel=1)


def _exif_jpeg(img: np.ndarray, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(img, "JPEG", quality=90, exif=exif.tobytes())


def test_strip_exif(photos):
    img = np.ascontiguousarray(photos["chelsea"][:64, :96])
    data = _exif_jpeg(img, 6)
    with Image.open(io.BytesIO(data)) as im:
        assert im.getexif().get(0x0112) == 6
    out = strip_exif(data)
    assert len(out) < len(data)
    with Image.open(io.BytesIO(out)) as im:
        assert im.getexif().get(0x0112) is None
        assert np.array_equal(np.asarray(im.convert("RGB")), np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
    plain = encode(img, "JPEG")
    assert strip_exif(plain) is plain  # nothing to cut: the same object, no copy
    for odd in (b"", b"\xff\xd8", b"\xff\xd8\xff\xe1\x00", b"not a jpeg", data[:30], b"\xff\xd8\x00" + data[3:]):
        assert strip_exif(odd) == odd  # what cannot be walked is left to the decoder


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_no_decoder_applies_exif_orientation(photos, backend, orientation):
    """DALI applies EXIF orientation by default and torchcodec always does; gpudecode never
    does (as torchvision's ImageFolder with Pillow): every backend gives the stored pixels,
    the CPU decoder's, at the header's size (90-degree turns would swap it), crops included."""
    from conftest import cpu_built_decoder, decoded_image

    img = np.ascontiguousarray(photos["astronaut"][:120, :200])
    data = _exif_jpeg(img, orientation)
    reqs = [Request(data, "jpeg", 120, 200, (0, 0, 120, 200)), Request(data, "jpeg", 120, 200, (10, 30, 50, 70))]
    a = CpuDecoder().decode(reqs)
    b = cpu_built_decoder(backend).decode(reqs)
    for k in range(2):
        assert b.errors[k] is None, b.errors[k]
        got = decoded_image(b, k)
        assert got.shape == decoded_image(a, k).shape
        np.testing.assert_array_equal(got, decoded_image(a, k))


def test_dali_rebuilds_its_pipeline_after_a_failed_run(photos):
    """A run that raised leaves older DALI releases' pipeline unusable: the decoder builds a
    new one and never relies on it; earlier outputs are copied out before another run."""
    from conftest import cpu_built_decoder, decoded_image

    good = [encode(np.ascontiguousarray(photos[n][:100, :140]), "JPEG") for n in ("coffee", "rocket", "camera")]
    bad = good[1][: len(good[1]) // 3]
    reqs = [Request(good[0], "jpeg", 100, 140, (0, 0, 100, 140)), Request(bad, "jpeg", 100, 140, (0, 0, 100, 140)),
            Request(good[2], "jpeg", 100, 140, (5, 5, 60, 60))]
    dec = cpu_built_decoder("dali")
    out = dec.decode(reqs)
    assert out.errors[0] is None and out.errors[2] is None and out.errors[1] is not None
    assert dec.builds >= 3  # the batch's run and the bad image's own run failed: two rebuilds
    ref = CpuDecoder().decode(reqs)
    for k in (0, 2):
        np.testing.assert_array_equal(decoded_image(out, k), decoded_image(ref, k))
    again = dec.decode([reqs[0]])  # the rebuilt pipeline works
    np.testing.assert_array_equal(decoded_image(again, 0), decoded_image(ref, 0))


def test_output_slots_carry_over_an_epoch_boundary(tmp_path, photos):
    """The last batch of an epoch stays intact while the trainer works on the next epoch's
    first batch, however far the producer runs ahead (the slot counter used to restart at 0
    each epoch and overwrite it)."""
    from gpudecode import Loader
    from gpudecode import transforms as T

    samples = [{"__key__": f"{i:04d}", "jpg": encode(np.ascontiguousarray(photos["coffee"][i:i + 64, i:i + 80])),
                "cls": str(i % 3).encode()} for i in range(12)]
    url = make_shard(tmp_path / "s.tar", samples)
    tf = T.Compose([T.CenterCrop(32), T.Normalize([0.5] * 3, [0.25] * 3)])
    ld = Loader([url], batch_size=4, transform=tf, device="cpu", shuffle=False, prefetch_factor=2, num_workers=1)
    assert ld.pipeline.config.ring == 5
    first = list(ld)  # 3 batches: slots 0, 1, 2
    last, kept = first[-1], first[-1].images.clone()
    it = iter(ld)
    nxt = next(it)
    deadline = time.monotonic() + 60  # watchdog: the producer fills its queue (2 batches) well before
    while it._ep.queue.qsize() < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert it._ep.queue.qsize() == 2, "the producer did not run ahead"
    assert torch_equal(last.images, kept)  # batches 2 and 3 of this epoch went to slots 4 and 0, not 2
    assert nxt.keys == first[0].keys
    rest = list(it)
    assert [b.keys for b in rest] == [b.keys for b in first[1:]]
    assert ld.pipeline.ring.slot == 6 % 5


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


class _Event:
    """A stand-in CUDA event: done or not; counts host waits."""

    def __init__(self, done: bool = True) -> None:
        self.done = done
        self.waited = 0

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.waited += 1
        self.done = True

    def record(self, stream=None) -> None:
        pass


def _streams():
    import threading

    from gpudecode.batches import IN_FLIGHT
    from gpudecode.streams import Streams

    st = object.__new__(Streams)  # no CUDA here: the bookkeeping alone
    st._lock = threading.Lock()
    st._retired = []
    st.handed = []
    st.slot_free = [None] * 5
    st.device = "cuda:0"
    st.in_flight = IN_FLIGHT  # the default depth's
    return st


def test_decoded_buffers_live_until_their_kernels_are_done():
    """Before batch j is decoded into the rings' turn of batch j - IN_FLIGHT, the host waits
    for that batch's kernel (the hardware JPEG decoder does not follow stream order); a
    finished batch's buffers go only once its event has completed."""
    from gpudecode.pipeline import IN_FLIGHT, MID_QUEUE

    assert IN_FLIGHT == MID_QUEUE + 2
    st = _streams()
    ev = [_Event(done=False), _Event(done=True), _Event(done=False), _Event(done=False)]
    owners = [object() for _ in ev]
    for j in range(4):
        st.retire(j, ev[j], owners[j])
    st.before_decode(IN_FLIGHT + 1)  # batch 4 reuses batch 1's turn, batch 3 would reuse 0's
    assert ev[0].waited == 1  # batch 0 <= 4 - 3: waited for on the host
    assert ev[1].waited == 1  # batch 1 <= 4 - 3 too
    assert ev[2].waited == 0 and ev[3].waited == 0  # later ones are not waited for...
    assert [s for s, _, _ in st._retired] == [2, 3]  # ...and kept while their kernels run
    ev[2].done = True
    st.before_decode(IN_FLIGHT + 2)
    assert [s for s, _, _ in st._retired] == [3]


def test_slots_are_released_on_the_trainers_stream(monkeypatch):
    """Asking for batch k releases every handed slot but the last; the images, labels and
    field tensors handed over carry record_stream for the trainer's stream."""
    import torch

    st = _streams()
    streams = []

    class Stream:
        def wait_event(self, e):
            streams.append(("wait", e))

    monkeypatch.setattr(torch.cuda, "Event", lambda *a, **k: _Event())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda dev=None: Stream())

    class T:
        device = torch.device("cuda")

        def __init__(self):
            self.recorded = []

        def record_stream(self, s):
            self.recorded.append(s)

    from types import SimpleNamespace

    for slot in (3, 4):
        batch = SimpleNamespace(images=T(), labels=T(), fields={"npy": T(), "txt": ["a caption"]})
        st.hand_over(SimpleNamespace(ready=_Event(), batch=batch, slot=slot))
        assert len(batch.images.recorded) == 1 and len(batch.labels.recorded) == 1
        assert len(batch.fields["npy"].recorded) == 1  # (a field's tensor too; a list has nothing to record)
    assert st.handed == [3, 4]
    st.release_handed(keep=1)
    assert st.handed == [4] and st.slot_free[3] is not None and st.slot_free[4] is None
    st.release_handed(keep=0)  # the Loader closes: nothing is still read
    assert st.handed == [] and st.slot_free[4] is not None


def test_precache_records_the_device_model(tmp_path, photos):
    import json

    from gpudecode.precache import Settings, device_model, precache, run_unit

    samples = [{"__key__": f"k{i}", "jpg": encode(np.ascontiguousarray(photos["rocket"][:64, :64])),
                "cls": b"1"} for i in range(3)]
    src = make_shard(tmp_path / "src.tar", samples)
    r = precache([src], str(tmp_path / "out"), size=32, num_threads=1)
    with open(r.manifest) as f:
        manifest = json.load(f)
    assert manifest["settings"]["decoder"] == "cpu" and manifest["settings"]["device_model"] == ""
    assert device_model("cpu") == ""
    other = Settings(sources=manifest["settings"]["sources"], size=32, crop="none", shard_size=None,
                     shard_bytes=None, image_exts=["jpg"], max_pixels=0, device="cpu", decoder="cpu",
                     on_error="raise", device_model="NVIDIA H100 80GB HBM3")
    with pytest.raises(ValueError, match="decoders differ by GPU model"):
        run_unit(other, str(tmp_path / "out2"), 0, threads=1)


def test_nvimgcodec_decodes_into_a_ring_of_images(photos):
    """nvImageCodec 0.9 decodes into Images it is given: a ring of `buffers` turns, reused
    once warm (no allocation per image), each batch still equal to the CPU decoder's."""
    from conftest import cpu_built_decoder, decoded_image

    enc = [encode(np.ascontiguousarray(photos[n][:96, :128]), "JPEG") for n in ("coffee", "rocket", "chelsea")]
    dec = cpu_built_decoder("nvimgcodec")
    assert dec.buffers == 3
    sizes = [3, 2, 3, 3, 1, 3, 2]
    seen: list[list[int]] = []
    for turn, m in enumerate(sizes):
        reqs = [Request(enc[(turn + k) % 3], "jpeg", 96, 128, (k, 2 * k, 96 - 2 * k, 128 - 3 * k)) for k in range(m)]
        out, ref = dec.decode(reqs), CpuDecoder().decode(reqs)
        for k in range(m):
            np.testing.assert_array_equal(decoded_image(out, k), decoded_image(ref, k))
        seen.append([id(img) for img in dec._ring[dec._turn]])
    # turns 0, 3 and 6 share a ring entry; once it held 3 Images, later batches reuse them
    assert seen[3] == seen[0] and seen[6] == seen[3]
