"""Shared fixtures: real photographs (scikit-image's bundled ones, offline) and shard
builders. Kernel tests run under the numba CUDA simulator when there is no GPU. Every
test run has its own gpudecode cache (compiled kernels, shard counts): a warm cache of
an earlier run cannot hide a bug (set GPUDECODE_CACHE_DIR to choose one)."""
from __future__ import annotations

import io
import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterator

# OpenMP's idle threads sleep at once instead of spinning first (set before torch loads its OpenMP,
# which reads it): make test runs two test processes on two cores, each with torch's threads, and
# one process's spinning threads held the cores the other's working threads waited for
# (bench/RESULTS.md, "forty-fifth session", has the cost). The thread counts stay as they were.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# before anything imports gpudecode (its compiled-kernel cache is looked up on first use)
_RUN_CACHE = None
if "GPUDECODE_CACHE_DIR" not in os.environ:
    _RUN_CACHE = tempfile.mkdtemp(prefix="gpudecode-test-cache-")
    os.environ["GPUDECODE_CACHE_DIR"] = _RUN_CACHE

# The simulator must be chosen before numba is imported; on a machine with a GPU the
# same tests run on the real device (set NUMBA_ENABLE_CUDASIM=1 to force the simulator).
if "NUMBA_ENABLE_CUDASIM" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        import sys

        if "numba" in sys.modules:  # imported already (pytest resolves the filterwarnings categories first)
            from numba.core import config

            config.reload_config()  # else numba.cuda reads the old value unless a compile reloaded it
if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":  # (its scheduler yields to the block's threads: simulator.py)
    import simulator

    simulator.quicken()
import untraced  # noqa: E402  (numba's compiles without coverage's tracer: tests/untraced.py)

untraced.untrace_compiles()

import numpy as np
import pytest
from PIL import Image

PHOTO_NAMES = ["astronaut", "coffee", "chelsea", "rocket", "camera", "hubble_deep_field", "immunohistochemistry"]


def _load(name: str) -> np.ndarray:
    from skimage import data

    img = getattr(data, name)()
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return np.ascontiguousarray(img[..., :3].astype(np.uint8))


@pytest.fixture(scope="session")
def photos() -> dict[str, np.ndarray]:
    """Real photographs, HWC uint8 RGB, of several sizes and aspect ratios."""
    return {n: _load(n) for n in PHOTO_NAMES}


def encode(img: np.ndarray, fmt: str = "JPEG", **kw) -> bytes:
    b = io.BytesIO()
    mode = kw.pop("mode", None)
    im = Image.fromarray(img)
    if mode:
        im = im.convert(mode)
    im.save(b, format=fmt, **kw)
    return b.getvalue()


def load_script(path, name: str):
    """A script (an example's train.py) imported as module `name`, its main() not run."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def make_shard(path, samples: list[dict]) -> str:
    import webdataset as wds

    with wds.TarWriter(str(path)) as w:
        for s in samples:
            w.write(s)
    return str(path)


def drawn_outputs(tf, images: list, seeds) -> Iterator[tuple]:
    """(image, its draws, its output) for each of `images` (CHW tensors) through the Compose
    `tf`, with each seed's draws in turn: what a test replays torchvision's ops against."""
    sizes = [tuple(i.shape[1:]) for i in images]
    for seed in seeds:
        params = tf.make_params(sizes, seed)
        yield from zip(images, params, tf(images, params))


def loader_is_compose(tmp_path, imgs: list[np.ndarray], tf, seed: int, **kw):
    """A PNG shard of `imgs` (HWC uint8) through a Loader with `tf` (their one batch, in
    order, two epochs): each epoch's batch value for value the Compose's call on the images
    (a PNG's pixels as given) with the Loader's draws. Returns the Loader (`kw`: its own)."""
    import torch

    import gpudecode

    shard = make_shard(tmp_path / "l-000000.tar", [{"__key__": f"{i:03d}", "png": encode(a, "PNG"), "cls": b"1"}
                                                    for i, a in enumerate(imgs)])
    decoded = [torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1))) for a in imgs]
    loader = gpudecode.Loader(shard, batch_size=len(imgs), transform=tf, device="cpu", shuffle=False, seed=seed, **kw)
    for epoch in range(2):
        loader.set_epoch(epoch)
        (batch,) = list(loader)
        params = tf.make_params([tuple(d.shape[1:]) for d in decoded], seed, epoch=epoch, indices=list(range(len(imgs))))
        assert torch.equal(batch.images, tf(decoded, params)), epoch
    return loader


GPU_BACKENDS = ("nvimgcodec", "dali", "torchcodec")


def cpu_built_decoder(backend: str, **kw):
    """A GPU decoder built for the CPU: nvImageCodec's CPU codecs, DALI's "cpu" pipeline,
    torchcodec's CPU decode_jpeg (the test extra installs all three). A backend this
    machine lacks (the GPU machine's image has no DALI) skips the test, with the reason."""
    from gpudecode.decode import available, make_decoder

    ok, why = available(backend)
    if not ok:
        pytest.skip(f"decoder {backend!r} is not usable here: {why}")

    if backend == "dali":
        from gpudecode.decode.dali import DaliDecoder

        return DaliDecoder(device="cpu", num_threads=1, **kw)
    return make_decoder(backend, device="cpu", num_threads=1, max_pixels=kw.get("max_pixels", 0))


def decoded_image(out, k: int) -> np.ndarray:
    """Image k of a DecodedBatch as HWC uint8 (its requested box), whatever the layout."""
    t, l, h, w = (int(v) for v in out.boxes[k])
    sy, sx, sc = (int(v) for v in out.strides[k])
    start = int(out.offsets[k]) + t * sy + l * sx
    return out.pixels[start:].as_strided((h, w, 3), (sy, sx, sc)).cpu().numpy().copy()


@pytest.fixture
def http_server():
    """A loopback HTTP server (tests/httpfault.py) for the test, closed afterwards."""
    from httpfault import FaultServer

    srv = FaultServer()
    yield srv
    srv.close()


# The tests that take longest on 2 cores (make test's --durations), run first: with
# `pytest -n 2` (make test) the other worker takes the many short ones meanwhile, and no
# long one is left to run alone at the end.
HEAVY_FIRST = (
    "test_gpu_call.py::", "test_kernels.py::test_the_cpu_kernel_reads_only_inside_each_image",
    "test_kernels.py::test_compile_ptx_sm80_sm90_and_ptxas",
    "test_augment.py::test_cuda_kernel_equals_cpu_twin_under_the_simulator", "test_example_detection.py::",
    "test_example_imagenet.py::", "test_ragged.py::test_cuda_kernels_run_each_sample_at_its_own_size",
    "test_precache_runs.py::test_sigkill_at_random_points_then_resume_is_byte_identical",
    "test_example_elastic.py::", "test_example_parquet.py::", "test_example_lightning.py::",
    "test_lifecycle.py::test_exit_with_an_unfinished_iterator_never_aborts",
    "test_png_halves.py::test_the_cuda_kernels_equal_the_cpu_twin_under_the_simulator",
    "test_dataloader_promises.py::test_a_window_of_kept_batches_reuses_the_memory_it_lets_go",
    "test_plan.py::test_cli_the_issue_command",
)


def pytest_collection_modifyitems(session, config, items) -> None:
    def rank(item) -> int:
        at = item.nodeid.split("/")[-1]
        return next((i for i, h in enumerate(HEAVY_FIRST) if at.startswith(h)), len(HEAVY_FIRST))

    items.sort(key=rank)  # (stable: the rest keep their order)


def pytest_sessionfinish(session, exitstatus) -> None:
    if _RUN_CACHE is not None:
        shutil.rmtree(_RUN_CACHE, ignore_errors=True)


def seeded_bytes(n: int, *key) -> bytes:
    """`n` bytes that look random and are the same in every run for the same key (a
    failure can be reproduced, unlike with os.urandom)."""
    return random.Random(repr(key)).randbytes(n)


def tar_samples(path) -> list[tuple[str, dict[str, bytes]]]:
    """A shard read by Python's tarfile alone (an independent reference for what our
    writers wrote): [(key, {ext: bytes})] in order, keys as webdataset makes them (the
    name up to the first dot of its last path part)."""
    import tarfile

    out: list[tuple[str, dict[str, bytes]]] = []
    with tarfile.open(path) as t:
        for m in t.getmembers():
            if not m.isfile():
                continue
            folder, _, base = m.name.rpartition("/")
            stem, _, ext = base.partition(".")
            key = f"{folder}/{stem}" if folder else stem
            if not out or out[-1][0] != key:
                out.append((key, {}))
            out[-1][1][ext] = t.extractfile(m).read()  # type: ignore[union-attr]
    return out


@pytest.fixture(scope="session")
def rect_shards(tmp_path_factory):
    """Images of one flat rectangle (test_boxes._rectangles) with its box as JSON: 24, of
    five heights and three widths."""
    from test_boxes import _rectangles

    d = tmp_path_factory.mktemp("rects")
    samples = []
    for i in range(24):
        img, box = _rectangles(i, 60 + (i % 5) * 9, 70 + (i % 3) * 13)
        samples.append({"__key__": f"r{i:03d}", "png": encode(img, "PNG"),
                        "json": json.dumps({"boxes": box.tolist(), "labels": [i]}).encode()})
    return [make_shard(d / "rects-000000.tar", samples)]


@pytest.fixture(scope="session")
def block_shards(tmp_path_factory):
    """Images of flat blocks with their masks (test_masks._blocks) as PNGs: 24, of five
    heights and three widths."""
    from test_masks import _blocks, png

    d = tmp_path_factory.mktemp("blocks")
    samples = []
    for i in range(24):
        img, mask = _blocks(i, 60 + (i % 5) * 9, 70 + (i % 3) * 13)
        samples.append({"__key__": f"b{i:03d}", "png": encode(img, "PNG"), "cls": "0", "mask.png": png(mask)})
    return [make_shard(d / "blocks-000000.tar", samples)]


def replace_members(shard: str, changed: dict, manifest: str | None = None) -> None:
    """Rewrites the tar `shard` with the members named in `changed` (full member names)
    holding those bytes, the rest as they were; and, where given, the precache manifest's
    entry for it (bytes, sha256) brought up to date, so that only the content differs."""
    import tarfile

    from gpudecode.io.cache import file_sha256

    new = shard + ".new"
    with tarfile.open(shard) as src, tarfile.open(new, "w", format=tarfile.USTAR_FORMAT) as dst:
        for member in src.getmembers():
            data = changed.get(member.name, src.extractfile(member).read())
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    os.replace(new, shard)
    if manifest is not None:
        with open(manifest) as f:
            doc = json.load(f)
        entry = next(s for s in doc["shards"] if os.path.basename(s["path"]) == os.path.basename(shard))
        entry.update(bytes=os.path.getsize(shard), sha256=file_sha256(shard))
        with open(manifest, "w") as f:
            json.dump(doc, f)
