"""The GPU path's own checks, run here on the CPU (issue 34): what a first GPU run needs to
give figures and not tracebacks, and the promises that keep a GPU pipeline honest.

- gpu-check's tooling: the hidden-backend rehearsal, streaming logs, the time budget, the
  junit summary;
- decoders say what decodes (`backend`), an image a decoder reports decoded but never
  wrote is refused (the canary on reused buffers), nvImageCodec's broken ROI releases
  decode whole images with the same pixels, a torchcodec without the batch API is refused
  by name, "auto" passes over a GPU decoder whose GPU backend does not work;
- a JPEG whose data ends before its end-of-image marker is refused at the probe, on every
  decoder (GPU decoders do not promise to notice);
- RandomErasing, MixUp and CutMix in their batch forms (what runs on CUDA) equal the
  per-image forms bit for bit, in a number of operations and uploads that does not grow
  with the batch; host windows go up in one copy a batch;
- the CUDA kernels' disk cache is registered with numba-cuda's own caching machinery.
"""
from __future__ import annotations

import functools
import io
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import decoded_image, encode, make_shard

ROOT = Path(__file__).resolve().parents[1]


class OpCounter(TorchDispatchMode):
    """Counts the aten operations run under it that do work (each one a kernel launch on a
    GPU); views (a new shape or slice of the same memory) launch nothing and are not
    counted: how torch forms an indexing may add one (a one-image erase: one more view)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


# ---------------------------------------------------------------------------------------
# gpu-check's tooling


def _gpu_check():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu_check
    finally:
        sys.path.pop(0)
    return gpu_check


def test_hidden_packages_do_not_import():
    """The rehearsal's shape of the GPU machine: GPUDECODE_HIDE makes packages absent."""
    env = dict(os.environ, GPUDECODE_HIDE="nvidia.dali,torchcodec",
               PYTHONPATH=str(ROOT / "bench" / "_hide"))
    code = ("import importlib.util as u\n"
            "for m in ('torchcodec', 'nvidia.dali'):\n"
            "    try:\n        __import__(m); print(m, 'imported')\n"
            "    except ModuleNotFoundError as e: print(m, 'hidden', 'GPUDECODE_HIDE' in str(e))\n"
            "import numpy; print('numpy imported')\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60).stdout
    assert "torchcodec hidden True" in out and "nvidia.dali hidden True" in out and "numpy imported" in out


def test_streamed_output_is_logged_as_it_comes_and_cut_at_the_deadline(tmp_path):
    gc = _gpu_check()
    log = gc.Log(tmp_path / "gpu-check.log")
    code = "import time\nprint('first', flush=True)\ntime.sleep(60)\nprint('never')"
    t = time.monotonic()
    status, cut = gc.run_streamed([sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), log=log,
                                  deadline=time.monotonic() + 2)
    log.close()
    assert cut and status != 0 and time.monotonic() - t < 30
    text = (tmp_path / "gpu-check.log").read_text()
    assert "first" in text and "never" not in text


def test_junit_summary_names_failures_and_skip_reasons(tmp_path):
    gc = _gpu_check()
    (tmp_path / "test_x.py").write_text("import pytest\n"
                                        "def test_ok(): pass\n"
                                        "def test_bad(): assert 1 == 2, 'one is not two'\n"
                                        "@pytest.mark.skip(reason='needs a CUDA GPU')\n"
                                        "def test_skipped(): pass\n")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=r.xml", "test_x.py"],
                   cwd=tmp_path, capture_output=True, timeout=120)
    r = gc.junit(tmp_path / "r.xml")
    assert r["passed"] == 1
    assert [f["test"].split("::")[-1] for f in r["failed"]] == ["test_bad"] and "one is not two" in r["failed"][0]["why"]
    assert r["skipped"][0]["why"] == "needs a CUDA GPU"


def test_preflight_names_the_installed_package_and_what_decodes(tmp_path):
    gc = _gpu_check()
    facts = {"python": "3.12", "cuda": False, "gpudecode": {"version": "0", "path": str(ROOT / "gpudecode"),
                                                            "source_tree": True},
             "decoders": {"cpu": {"usable": True, "backend": "the CPU", "pixels_on": "cpu"},
                          "dali": {"usable": False, "why": "not installed"}}}
    lines = "\n".join(gc.preflight_lines(facts))
    assert "THE SOURCE TREE" in lines and "decoder dali: not usable here: not installed" in lines
    assert "source tree" in gc.preflight_failed(facts)
    facts["gpudecode"]["source_tree"] = False
    assert gc.preflight_failed(facts) is None
    facts.update(cuda=True, kernels={"ok": False, "error": "NvvmSupportError"})
    assert "kernels" in gc.preflight_failed(facts)


# ---------------------------------------------------------------------------------------
# decoders: what decodes, and what they must not hand on


def _requests(photos, n=4, box=True):
    from gpudecode.decode import Request

    rng = np.random.default_rng(1)
    reqs = []
    for name in list(photos)[:n]:
        img = photos[name]
        h, w = img.shape[:2]
        bh, bw = (int(rng.integers(h // 3, h)), int(rng.integers(w // 3, w))) if box else (h, w)
        top, left = int(rng.integers(0, h - bh + 1)), int(rng.integers(0, w - bw + 1))
        reqs.append(Request(encode(img, "JPEG", quality=90), "jpeg", h, w, (top, left, bh, bw), "s.tar", name))
    return reqs


def test_every_decoder_says_what_decodes():
    from conftest import cpu_built_decoder
    from gpudecode.decode.cpu import CpuDecoder

    assert "libjpeg-turbo" in CpuDecoder().backend
    for name in ("nvimgcodec", "dali", "torchcodec"):
        dec = cpu_built_decoder(name)
        assert dec.backend and ("cpu" in dec.backend.lower() or "libjpeg" in dec.backend), (name, dec.backend)


class _SkipsOne:
    """nvImageCodec's decoder, except that image `skip` of a batch decoded into reused
    Images is handed back without being written (as Blackwell's hardware decoder was seen to)."""

    def __init__(self, real, skip: int) -> None:
        self.real, self.skip = real, skip

    def decode(self, streams, *, images=None, params=None, cuda_stream=0):
        if images is None:
            return self.real.decode(streams, params=params, cuda_stream=cuda_stream)
        keep = [j for j in range(len(streams)) if j != self.skip]
        done = self.real.decode([streams[j] for j in keep], images=[images[j] for j in keep], params=params,
                                cuda_stream=cuda_stream)
        out = list(done)
        out.insert(self.skip, images[self.skip])  # "decoded": the old buffer, untouched
        return out


def test_an_image_the_decoder_never_wrote_is_refused_not_stale(photos):
    """A decoder that reuses its buffers and reports an image decoded without writing it
    would hand on the pixels of an image of an earlier batch: the canary catches it, and
    the image's error says so; the others are decoded right."""
    pytest.importorskip("nvidia.nvimgcodec")
    from gpudecode.decode.cpu import CpuDecoder
    from gpudecode.decode.nvimgcodec import NvImageCodecDecoder

    dec = NvImageCodecDecoder(device="cpu", num_threads=1, buffers=1)
    first = _requests(photos, 4)
    dec.decode(first).settle()  # the ring's Images are made
    again = dec.decode(first).settle()  # reused: no false alarm on real photographs
    assert again.errors == [None] * 4
    later = list(reversed(_requests(photos, 4, box=False)))  # other images into the same buffers
    dec._decoder = _SkipsOne(dec._decoder, skip=2)
    out = dec.decode(later)
    assert out.pending is not None
    out.settle()
    assert out.errors[2] is not None and "never wrote it" in out.errors[2]
    ref = CpuDecoder().decode(later)
    for k in (0, 1, 3):
        assert out.errors[k] is None
        np.testing.assert_array_equal(decoded_image(out, k), decoded_image(ref, k))


def test_an_unwritten_image_becomes_that_samples_decode_error_in_the_loader(tmp_path, photos):
    """Through the Loader (on_error="skip"): the image is skipped with its key named, the
    batch carries on, no stale pixels."""
    pytest.importorskip("nvidia.nvimgcodec")
    from gpudecode import Loader
    from gpudecode import transforms as T
    from gpudecode.decode.nvimgcodec import NvImageCodecDecoder

    samples = [{"__key__": f"k{i}", "jpg": encode(np.ascontiguousarray(photos["astronaut"][i * 7:i * 7 + 90, :120])),
                "cls": b"1"} for i in range(12)]
    url = make_shard(tmp_path / "s.tar", samples)
    dec = NvImageCodecDecoder(device="cpu", num_threads=1, buffers=3)
    ld = Loader([url], batch_size=4, transform=T.Compose([T.CenterCrop(32), T.ToDtype(torch.float32, scale=True)]),
                device="cpu", decoder=dec, shuffle=False, on_error="skip", num_workers=1)
    assert len([b for b in ld]) == 3 and not ld.skipped  # each of the decoder's 3 turns has its Images
    dec._decoder = _SkipsOne(dec._decoder, skip=1)
    got = [b for b in ld]  # the ring is warm: every batch now reuses buffers
    assert [b.keys for b in got] == [["k0", "k2", "k3"], ["k4", "k6", "k7"], ["k8", "k10", "k11"]]
    assert sorted(s.key for s in ld.skipped) == ["k1", "k5", "k9"]
    assert all("never wrote it" in s.reason and s.error == "DecodeError" for s in ld.skipped)


def test_without_regions_of_interest_the_same_pixels(photos, monkeypatch):
    """nvImageCodec releases whose GPU ROI decoding crashes (0.9: nvImageCodec#55) decode
    whole images and the kernel reads the box inside: the same pixels as the windows."""
    pytest.importorskip("nvidia.nvimgcodec")
    from gpudecode.decode.cpu import CpuDecoder
    from gpudecode.decode.nvimgcodec import NvImageCodecDecoder, roi_usable

    assert not roi_usable("0.9.0", "cuda") and roi_usable("0.8.0", "cuda") and roi_usable("0.9.0", "cpu")
    monkeypatch.setenv("GPUDECODE_NVIMGCODEC_ROI", "1")
    assert roi_usable("0.9.1", "cuda")
    monkeypatch.setenv("GPUDECODE_NVIMGCODEC_ROI", "0")
    dec = NvImageCodecDecoder(device="cpu", num_threads=1)
    assert not dec.roi
    reqs = _requests(photos, 5)
    out = dec.decode(reqs).settle()
    ref = CpuDecoder().decode(reqs)
    for k, r in enumerate(reqs):
        assert out.errors[k] is None
        assert tuple(out.shapes[k]) == (r.height, r.width) and tuple(out.boxes[k]) == r.box  # whole, box inside
        np.testing.assert_array_equal(decoded_image(out, k), decoded_image(ref, k))


def test_a_torchcodec_without_the_batch_api_is_refused_by_name():
    import types

    from gpudecode.decode.torchcodec import missing_api

    assert "no decoders.decode_jpeg" in missing_api(types.SimpleNamespace())
    assert "device=" in missing_api(types.SimpleNamespace(decode_jpeg=lambda source, *, mode="RGB": None))
    assert missing_api(types.SimpleNamespace(decode_jpeg=lambda source, *, mode="RGB", device="cpu": None)) == ""


def test_auto_passes_over_a_gpu_decoder_that_cannot_decode_there(monkeypatch):
    """decoder="auto" on CUDA: nvImageCodec without a working GPU backend (no GPU here, or
    no libnvjpeg) is passed over with a warning saying why, not used to decode on its CPU
    codecs behind device buffers."""
    pytest.importorskip("nvidia.nvimgcodec")
    import gpudecode.decode as D
    from gpudecode import BackendUnavailableError

    monkeypatch.setattr(D, "available", lambda name: (name in ("cpu", "nvimgcodec"), "hidden"))
    with pytest.warns(RuntimeWarning, match="none of nvImageCodec .*GPU backends decodes"):
        dec = D.make_decoder("auto", device="cuda:0", num_threads=1, max_pixels=0)
    assert dec.name == "cpu"
    with pytest.raises(BackendUnavailableError, match="libnvjpeg"):
        D.make_decoder("nvimgcodec", device="cuda:0", num_threads=1, max_pixels=0)


# ---------------------------------------------------------------------------------------
# truncated JPEGs


def _jpeg_with_thumbnail(img: np.ndarray) -> bytes:
    """A JPEG whose EXIF holds a JPEG thumbnail (an FF D9 before the main image's scans)."""
    from PIL import Image

    thumb = io.BytesIO()
    Image.fromarray(img[:16, :16]).save(thumb, format="JPEG")
    exif = Image.Exif()
    b = io.BytesIO()
    Image.fromarray(img).save(b, format="JPEG", exif=exif.tobytes() + thumb.getvalue())
    return b.getvalue()


def test_a_jpeg_cut_short_is_refused_at_the_probe_on_every_decoder(photos):
    """Its header is whole, its scans are cut: refused before decoding (GPU decoders do not
    promise to notice; the CPU decoder may not read as far as the cut), with Pillow's
    verdict; bytes after the end-of-image marker are allowed, as Pillow allows them; an
    end-of-image marker inside an EXIF thumbnail does not count."""
    from PIL import Image

    from gpudecode._probe import JPEG_CUT, probe_columns
    from gpudecode.errors import DecodeError
    from gpudecode.io.reader import Sample

    img = np.ascontiguousarray(photos["chelsea"])
    whole = encode(img, "JPEG", quality=90)
    progressive = encode(img, "JPEG", quality=90, progressive=True)
    thumb = _jpeg_with_thumbnail(img)
    cases = {"whole": whole, "cut": whole[:len(whole) * 2 // 3], "trailing": whole + b"\0" * 100 + b"junk",
             "progressive-cut": progressive[:len(progressive) // 2], "thumbnail-cut": thumb[:len(thumb) - 500],
             "thumbnail": thumb, "no-eoi": whole[:-2]}
    for name, data in cases.items():  # Pillow, the reference, on each
        try:
            with Image.open(io.BytesIO(data)) as im:
                im.load()
            pillow_ok = True
        except OSError:
            pillow_ok = False
        assert pillow_ok == (name in ("whole", "trailing", "thumbnail")), name
    failed: list[DecodeError] = []
    chunk = [Sample(k, {"jpg": v}, "s.tar", i) for i, (k, v) in enumerate(cases.items())]
    probed = probe_columns(chunk, ["jpg"], 0, failed.append)
    assert sorted(s.key for s in probed.samples) == ["thumbnail", "trailing", "whole"]
    assert sorted(e.key for e in failed) == ["cut", "no-eoi", "progressive-cut", "thumbnail-cut"]
    assert all(str(e).startswith(JPEG_CUT) and e.shard == "s.tar" for e in failed)


@pytest.mark.parametrize("decoder", ["cpu", "nvimgcodec"])
def test_a_cut_jpeg_is_a_named_error_through_the_loader(tmp_path, photos, decoder):
    from conftest import cpu_built_decoder
    from gpudecode import DecodeError, Loader
    from gpudecode import transforms as T

    good = encode(np.ascontiguousarray(photos["coffee"][:200, :200]))
    samples = [{"__key__": "good", "jpg": good, "cls": b"0"},
               {"__key__": "cut", "jpg": good[:len(good) - len(good) // 10], "cls": b"0"}]
    url = make_shard(tmp_path / "s.tar", samples)
    dec = "cpu" if decoder == "cpu" else cpu_built_decoder(decoder)
    tf = T.Compose([T.RandomResizedCrop(32, scale=(0.05, 0.06)), T.ToDtype(torch.float32, scale=True)])
    ld = Loader([url], batch_size=2, transform=tf, device="cpu", decoder=dec, shuffle=False, on_error="skip")
    assert [b.keys for b in ld] == [["good"]]
    assert [(s.key, s.shard, s.error) for s in ld.skipped] == [("cut", url, "DecodeError")]
    assert ld.skipped[0].reason.startswith("truncated JPEG")
    with pytest.raises(DecodeError, match="truncated JPEG.*cut"):
        list(Loader([url], batch_size=2, transform=tf, device="cpu", decoder=dec, shuffle=False))


# ---------------------------------------------------------------------------------------
# batch forms: the same numbers in a fixed number of operations and copies


def _erase_params(n: int, size: tuple[int, int], value, seed: int, p: float = 0.6) -> tuple:
    from gpudecode import transforms as T

    er = T.RandomErasing(p=p, value=value)
    rng = random.Random(seed)
    return er, [er.draw(rng, size) for _ in range(n)]


@pytest.mark.parametrize("value", [0.0, (0.1, -0.5, 2.0), "random"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_erasing_batch_form_equals_per_image(value, dtype):
    size = (23, 31)
    er, params = _erase_params(9, size, value, seed=3)
    assert sum(p["erase"] is not None for p in params) >= 3
    base = torch.randn(9, 3, *size).to(dtype)
    a, b = base.clone(), base.clone()
    er.erase(a, params, batched=False)
    er.erase(b, params, batched=True)
    assert torch.equal(a, b)
    assert not torch.equal(a, base)
    # a non-contiguous view (an NHWC output, a view's part of a slot)
    c = base.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    er.erase(c, params, batched=True)
    assert torch.equal(c, a)


def _count(fn) -> tuple[int, int]:
    """(aten operations, uploads through decode._span.to_device) of fn()."""
    import gpudecode.decode._span as span_mod

    calls = []
    real = span_mod.to_device

    def counting(host, device):
        calls.append(host.numel())
        return real(host, device)

    span_mod.to_device = counting
    try:
        with OpCounter() as c:
            fn()
    finally:
        span_mod.to_device = real
    return len(c.ops), len(calls)


@pytest.mark.parametrize("value", [0.0, "random"])
@pytest.mark.parametrize("size", [(24, 24), (32, 32)])
def test_erasing_batch_form_costs_the_same_for_any_batch(value, size):
    """RandomErasing(p=0.25) on a batch of 256 issues as many operations, and uploads, as on a
    batch of 16 (what runs on CUDA: no per-image launch, no host synchronization); at
    (32, 32) the batch of 16 erases one image only (test_gpu.py's case: torch indexes a
    single image with one more view, no more work)."""
    counts = {}
    for n in (16, 256):
        er, params = _erase_params(n, size, value, seed=n, p=0.25)
        view = torch.zeros(n, 3, 24, 24)
        payload = er.erase_payload(params)  # the host side: draws and packing, no device work
        counts[n] = _count(functools.partial(er.erase_on_device, view, *payload))
    assert counts[16] == counts[256], counts
    assert counts[256][1] == 1  # one upload: boxes (and noise)


@pytest.mark.parametrize("kind", ["mixup", "cutmix"])
def test_mixing_batch_form_equals_per_image_in_constant_operations(kind):
    from gpudecode.mixing import CutMix, MixUp

    step = MixUp(alpha=0.4, num_classes=7) if kind == "mixup" else CutMix(alpha=1.0, num_classes=7)
    counts = {}
    for n in (16, 256):
        images = torch.randn(n, 3, 20, 24)
        labels = torch.randint(0, 7, (n,))
        params = step.make_params(tuple(images.shape), random.Random(n))
        a, b = images.clone(), images.clone()
        la = step.apply(a, labels, params, batched=False)[1]
        with OpCounter() as c:
            lb = step.apply(b, labels, params, batched=True)[1]
        counts[n] = len(c.ops)
        assert torch.equal(a, b) and torch.equal(la, lb)
        ref_lab = labels
        assert not torch.equal(a, images) or kind == "cutmix" and params["box"][0] == params["box"][2]
        del ref_lab
    assert counts[16] == counts[256], counts


def test_host_windows_go_up_in_one_copy_a_batch(photos, monkeypatch):
    """Tensor samples (and host-decoded fallbacks) in the GPU decoders: one staging buffer
    and one copy for a batch of 256, not one synchronizing copy each."""
    from gpudecode.decode import Request, _span

    arrays = [np.ascontiguousarray(photos["rocket"][i:i + 10, i:i + 12]) for i in range(256)]
    arrays[5] = photos["rocket"][::2, ::3][:10, :12]  # a strided window
    n_ops, n_up = _count(lambda: _span.stage(arrays, torch.device("cpu")))
    assert n_up == 1
    flat = _span.stage(arrays, torch.device("cpu"))
    assert torch.equal(flat[:arrays[0].size], torch.from_numpy(arrays[0].reshape(-1)))
    at = sum(a.size for a in arrays[:5])
    assert torch.equal(flat[at:at + arrays[5].size], torch.from_numpy(np.ascontiguousarray(arrays[5]).reshape(-1)))
    # each decoder stages its host windows once a batch
    from gpudecode.tensors import encode_npy

    reqs = [Request(encode_npy(a), "npy", *a.shape[:2], (1, 2, 5, 6), "s", f"k{i}") for i, a in
            enumerate(arrays[:256:8])]
    for mod_name in ("nvimgcodec", "torchcodec"):
        pytest.importorskip({"nvimgcodec": "nvidia.nvimgcodec", "torchcodec": "torchcodec"}[mod_name])
        mod = __import__(f"gpudecode.decode.{mod_name}", fromlist=["upload"])
        calls = []
        real = mod.upload
        monkeypatch.setattr(mod, "upload", lambda arrs, dev, calls=calls, real=real: calls.append(len(arrs)) or real(arrs, dev))
        from conftest import cpu_built_decoder

        out = cpu_built_decoder(mod_name).decode(reqs).settle()
        assert calls == [len(reqs)], mod_name
        assert out.errors == [None] * len(reqs)
        np.testing.assert_array_equal(decoded_image(out, 3), arrays[24][1:6, 2:8])


def test_the_cuda_kernels_disk_cache_is_registered_with_numba_cuda(tmp_path, monkeypatch):
    """numba-cuda keeps its own caching machinery: the kernels' locator is registered there,
    answers for kernels/ files only, and keeps them under GPUDECODE_CACHE_DIR (a GPU run
    checks that a second process loads them: make gpu-check's preflight, test_gpu.py)."""
    pytest.importorskip("numba_cuda")
    from numba.cuda.core import caching

    from gpudecode.kernels import _compile, cuda_program

    if not _compile.cuda_cache():
        pytest.skip("no writable cache directory")
    loc = caching.CacheImpl._locator_classes[0]
    assert loc.__name__ == "KernelCacheLocator"
    path = loc.from_function(cuda_program._resample_body, cuda_program.__file__)
    assert path is not None and path.get_cache_path().startswith(os.environ["GPUDECODE_CACHE_DIR"])
    assert "numba-cuda-" in path.get_cache_path()
    assert loc.from_function(test_the_cuda_kernels_disk_cache_is_registered_with_numba_cuda, __file__) is None


def test_cuda_kernels_compile_on_a_numpy_without_row_stack():
    """The first GPU run failed in every CUDA kernel: numba-cuda 0.30 registers an overload
    of np.row_stack when its CUDA target loads, and the GPU image's NumPy has no such alias.
    gpudecode.kernels puts it back (as np.vstack, the same function) where it is absent:
    reproduced here by removing it before numba-cuda's array overloads load."""
    import subprocess
    import sys

    code = ("import numpy as np\n"
            "del np.row_stack\n"
            "import gpudecode.kernels\n"
            "from numba.cuda.np import arrayobj  # where numba-cuda 0.30 names np.row_stack\n"
            "assert np.row_stack is np.vstack\n"
            "print('LOADED')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, NUMBA_ENABLE_CUDASIM="0"))
    assert "LOADED" in p.stdout, p.stderr[-2000:]


# ---------------------------------------------------------------------------------------
# nvImageCodec's regions of interest, probed in a child process


def test_the_roi_probe_reports_a_crash_a_wrong_answer_and_a_hang_without_suffering_them():
    import sys

    from gpudecode.decode.nvimgcodec import ROI_PROBE, roi_probe

    compile(ROI_PROBE, "roi-probe", "exec")  # (the real probe's script is Python)
    ok, why = roi_probe(command=[sys.executable, "-c", "print('OK')"])
    assert ok and "regions decoded" in why
    ok, why = roi_probe(command=[sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    assert not ok and "SIGSEGV" in why
    ok, why = roi_probe(command=[sys.executable, "-c", "import sys; print('WRONG (2, 3) (4, 5)'); sys.exit(3)"])
    assert not ok and "exited with 3: WRONG" in why
    ok, why = roi_probe(command=[sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert not ok and "did not finish" in why


def test_the_roi_probe_without_a_gpu_says_so(monkeypatch):
    pytest.importorskip("nvidia.nvimgcodec")
    from gpudecode.decode.nvimgcodec import roi_probe, roi_usable

    ok, why = roi_probe(0)  # (the real script: no GPU here, so it fails, in the child)
    assert not ok and why.startswith("the ROI probe")
    monkeypatch.setenv("GPUDECODE_NVIMGCODEC_ROI", "probe")
    assert roi_usable("0.8.0", "cpu")  # (the CPU codecs decode regions: nothing to probe)
    assert not roi_usable("0.8.0", "cuda")
