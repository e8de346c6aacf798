"""Where a pipeline's finished batches go (gpudecode/sinks.py): a sink is a class with
`take`; the Pipeline hands it the images that decoded, the failures already named under
its error policy. Checked against Pillow's own decode of the same PNGs."""
from __future__ import annotations

import io
import zlib

import numpy as np
from PIL import Image

from conftest import decoded_image, encode
from gpudecode import transforms as T
from gpudecode.batches import PipelineConfig
from gpudecode.errors import ErrorPolicy
from gpudecode.io.reader import Sample
from gpudecode.pipeline import Pipeline


class _Windows:
    """A sink of its own: each decoded window as HWC uint8, with its sample's key."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], bool]] = []

    def take(self, p, ok, whole, gpu, *, tag: str):
        self.calls.append((list(ok), whole))
        return tag, [(p.samples[k].key, decoded_image(p.decoded, k)) for k in ok]


def _bad_crc(png: bytes) -> bytes:
    """The PNG with its first IDAT chunk's CRC wrong (the header still reads)."""
    at = png.index(b"IDAT") - 4
    n = int.from_bytes(png[at:at + 4], "big")
    crc = at + 8 + n
    good = zlib.crc32(png[at + 4:crc])
    return png[:crc] + ((good ^ 1) & 0xFFFFFFFF).to_bytes(4, "big") + png[crc + 4:]


def test_a_sink_of_its_own_takes_the_decoded_images_and_the_failures_are_named(photos):
    imgs = [photos[n][:96, :128] for n in sorted(photos)[:3]]
    pngs = [encode(img, "PNG") for img in imgs]
    pngs[1] = _bad_crc(pngs[1])
    samples = [Sample(f"k{i}", {"png": b, "cls": str(i).encode()}, "mem.tar", i) for i, b in enumerate(pngs)]
    policy = ErrorPolicy("skip")
    config = PipelineConfig(T.Compose([T.CenterCrop((64, 80))]), batch_size=3, device="cpu", decoder="cpu",
                            image_exts=("png",), label_exts=("cls",))
    pipe = Pipeline(config, policy=policy)
    pipe.ensure_decoder()
    sink = _Windows()
    tag, got = pipe.finish_into(sink, pipe.prepare(samples, seed=0, epoch=0, position=0), tag="mine")
    assert tag == "mine" and sink.calls == [([0, 2], False)]
    assert [k for k, _ in got] == ["k0", "k2"]
    assert [s.key for s in policy.skipped] == ["k1"] and policy.skipped[0].shard == "mem.tar"
    for (_, window), k in zip(got, (0, 2)):
        ref = np.asarray(Image.open(io.BytesIO(pngs[k])).convert("RGB"))
        assert np.array_equal(window, ref)  # (a PNG is decoded whole; the kernel reads the crop in it)
    pipe.close()


def test_the_output_ring_is_a_sink_and_finish_goes_through_it(photos):
    imgs = [photos[n][:64, :64] for n in sorted(photos)[:2]]
    samples = [Sample(f"k{i}", {"png": encode(img, "PNG"), "cls": b"0"}, "mem.tar", i) for i, img in enumerate(imgs)]
    config = PipelineConfig(T.Compose([T.CenterCrop(32)]), batch_size=2, device="cpu", decoder="cpu",
                            image_exts=("png",), label_exts=("cls",), ring=2)
    pipe = Pipeline(config, policy=ErrorPolicy("raise"))
    pipe.ensure_decoder()
    ready = pipe.finish(pipe.prepare(samples, seed=0, epoch=0, position=0))
    assert ready is not None and ready.slot == 0 and pipe.ring.slot == 1
    for k, img in enumerate(imgs):
        assert np.array_equal(ready.batch.images[k].permute(1, 2, 0).numpy(), img[16:48, 16:48])
    pipe.close()
