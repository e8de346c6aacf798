"""The fused kernels: CUDA (simulator here, or a real GPU) == CPU twin == numpy oracle,
and every CUDA kernel compiles to PTX for sm_80 and sm_90."""
from __future__ import annotations

import concurrent.futures
import json
import re
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from gpudecode.kernels import fused, reference

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def _ptxas() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas-blackwell")
    return path if os.access(path, os.X_OK) else None


def assemble_without_spills(ptxas: str, ptx: str, arch: str, path) -> int:
    """`ptx` assembled for `arch` by `ptxas -v` (written to `path` first): it assembles, with
    no spill stores or loads; the kernel's most registers."""
    path.write_text(ptx)
    out = subprocess.run([ptxas, f"-arch={arch}", "-v", str(path), "-o", os.devnull], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, (path.name, out.stderr[-2000:])
    regs = [int(m) for m in re.findall(r"Used (\d+) registers", out.stderr)]
    spills = [int(m) for m in re.findall(r"(\d+) bytes spill (?:stores|loads)", out.stderr)]
    assert regs and not any(spills), (path.name, out.stderr[-2000:])
    return max(regs)


@pytest.mark.slow  # over 20 s on 2 cores (make test's --durations)
def test_compile_ptx_sm80_sm90_and_ptxas(tmp_path):
    """Real type inference and code generation for every kernel variant (no GPU needed),
    then each variant's PTX (sm_80: every output dtype and layout; sm_90: two) assembled to
    machine code by the ptxas torch's triton ships (`-v`: registers, spills): no spill
    stores or loads, and no fewer blocks an SM than measured (resample 70 registers on
    sm_80: 3 blocks of 256, 37.5% occupancy; segment 64 on sm_80 with AugMix's ops: 4
    blocks; segment_ragged, the segment kernel for samples of their own sizes, which holds
    each sample's size: 3), so a change that costs occupancy is seen. Prints each kernel's
    registers (bench/RESULTS.md records them). Each kernel and variant is typed and
    lowered once, its IR made PTX for each cc by NVVM (cuda_program._ptx_each_cc); two
    processes side by side, three variants each, then ptxas two at a time."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    # sm_90 for the two variants that differ most (float32 in NCHW, uint8 in NHWC: both layouts' index
    # arithmetic, the widest and the narrowest store), one in each process
    halves = [{"float32-C": ((8, 0), (9, 0)), "float16-A": ((8, 0),), "uint8-C": ((8, 0),)},
              {"uint8-A": ((8, 0), (9, 0)), "float16-C": ((8, 0),), "float32-A": ((8, 0),)}]
    procs = []
    for half in halves:
        code = ("import json; from gpudecode.kernels import fused\n"
                f"out = fused.compile_ptx_all(ccs=((8, 0), (9, 0)), text=True, variants={half!r})\n"
                "print(json.dumps({'|'.join(map(str, k)): v for k, v in out.items()}))")
        procs.append(subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    ptxs = {}
    for p in procs:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-3000:]
        ptxs.update(json.loads(out.strip().splitlines()[-1]))
    assert len(ptxs) == 3 * (6 + 2) and all(len(v) > 1000 for v in ptxs.values())
    archs = {key: "sm_" + "".join(c for c in key.split("|")[1] if c.isdigit()) for key in ptxs}
    assert all(f".target {archs[key]}" in ptx for key, ptx in ptxs.items())  # (each made for its own target)
    ptxas = _ptxas()
    if ptxas is None:
        pytest.skip("PTX compiled; torch's triton package ships no ptxas-blackwell here to assemble it")
    def assemble(key: str) -> int:
        kernel, _, variant = key.split("|")
        return assemble_without_spills(ptxas, ptxs[key], archs[key], tmp_path / f"{kernel}-{archs[key]}-{variant}.ptx")

    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # (ptxas is a process: two at a time)
        report = dict(zip(ptxs, pool.map(assemble, ptxs)))
    print("ptxas registers:", json.dumps(report))
    assert len(report) == 3 * (6 + 2), report
    # occupancy from registers: 64K an SM, allocated 8 a thread at a time, 256-thread blocks
    blocks = {k: 65536 // (256 * -(-v // 8) * 8) for k, v in report.items()}
    least = {"resample": 3, "segment": 4, "segment_ragged": 3}
    assert all(b >= least[k.split("|")[0]] for k, b in blocks.items()), (report, blocks)


@pytest.mark.parametrize("rows,cols", [(1, 1), (8, 8), (8, 17), (23, 8), (13, 29), (224, 900), (64, 3)])
def test_vector_transpose_equals_numpy(rows, cols):
    """The CPU twin's 8x8 shuffle transpose (kernels/_simd.py), with offsets, row strides
    wider than the matrix, and the Normalize affine, against numpy's .T."""
    from gpudecode.kernels import _simd

    rng = np.random.default_rng(rows * 1000 + cols)
    sstride, dstride, soff, doff = cols + 3, rows + 5, 7, 11
    src = rng.random(soff + rows * sstride).astype(np.float32)
    mat = src[soff:soff + rows * sstride].reshape(rows, sstride)[:, :cols]
    dst = np.full(doff + cols * dstride, -1.0, np.float32)
    _simd.transpose(src, soff, sstride, dst, doff, dstride, rows, cols, False, np.float32(0), np.float32(1))
    view = dst[doff:].reshape(cols, dstride)
    np.testing.assert_array_equal(view[:, :rows], mat.T)
    assert (dst[:doff] == -1).all() and (view[:, rows:] == -1).all()  # nothing written outside
    sub, mul = np.float32(0.485), np.float32(1) / np.float32(0.229)
    _simd.transpose(src, soff, sstride, dst, doff, dstride, rows, cols, True, sub, mul)
    np.testing.assert_array_equal(view[:, :rows], (mat.T - sub) * mul)
    with pytest.raises(IndexError):
        _simd.transpose(src, soff, sstride, dst, doff, dstride + 1, rows, cols + 1, False, sub, mul)


@pytest.mark.parametrize("rows,cols", [(224, 224), (40, 24), (23, 16), (16, 9), (8, 8)])
def test_vector_transpose_streams_whole_lines_equal_to_numpy(rows, cols):
    """The affine transpose into 64-byte aligned destination rows (the kernel's final
    output: non-temporal stores of whole lines, sixteen source rows a step, then an 8-row
    block and scalar edges) against numpy's (.T - sub) * mul, bit for bit."""
    from gpudecode.kernels import _simd

    rng = np.random.default_rng(rows * 7 + cols)
    sstride, dstride = cols + 5, -(-rows // 16) * 16 + 16  # destination rows of whole lines
    src = rng.random(3 + rows * sstride).astype(np.float32)
    mat = src[3:3 + rows * sstride].reshape(rows, sstride)[:, :cols]
    raw = np.full(32 + 16 + cols * dstride, -1.0, np.float32)
    base = (-(raw.ctypes.data // 4)) % 16  # the first element on a 64-byte boundary
    doff = base + 16
    sub, mul = np.float32(0.406), np.float32(1) / np.float32(0.225)
    _simd.transpose(src, 3, sstride, raw, doff, dstride, rows, cols, True, sub, mul)
    view = raw[doff:doff + cols * dstride].reshape(cols, dstride)
    np.testing.assert_array_equal(view[:, :rows], (mat.T - sub) * mul)
    assert (raw[:doff] == -1).all() and (view[:, rows:] == -1).all()  # nothing written outside


_CACHE_PROBE = """
import json, sys, numpy as np
sys.path.insert(0, {tests!r})
from test_kernels import _batch, MEAN, STD
from gpudecode.kernels import fused
src, geom, factors, order, _ = _batch(0, 2, 16, 16)
out = np.zeros((2, 3, 16, 16), np.float32)
fused.fused_cpu(src, geom, factors, order, MEAN, STD, out, normalize=True)
stats = fused.cpu_kernel().stats
print(fused.__file__)
print(json.dumps([stats.cache_hits.total(), stats.cache_misses.total(), out.tolist()]))
"""


@pytest.mark.slow  # a compile of the kernel when it is the first here (the run's cache), two process starts
def test_compiled_cpu_kernel_is_cached_on_disk(tmp_path):
    """Other processes load the CPU twin from GPUDECODE_CACHE_DIR instead of compiling it
    (over a minute on 2 cores), also when they run another install of the same package
    (another virtualenv: the copy below, made later, at another path); GPUDECODE_CACHE_DIR=0
    turns the cache off. The kernel is compiled (or loaded) here first, into the run's
    cache (conftest's), so the suite pays for one compile of it, not one more."""
    import shutil

    import gpudecode

    cache_dir = os.environ.get("GPUDECODE_CACHE_DIR", "")
    if cache_dir in ("", "0"):  # (conftest sets one unless the run chose its own)
        pytest.skip("GPUDECODE_CACHE_DIR=0: this run turned the kernel cache off")
    src, geom, factors, order, _ = _batch(0, 2, 16, 16)
    here = np.zeros((2, 3, 16, 16), np.float32)
    fused.fused_cpu(src, geom, factors, order, MEAN, STD, here, normalize=True)  # compiled or loaded, and saved
    assert any(p.suffix == ".nbc" for p in pathlib.Path(cache_dir).rglob("*"))
    code = _CACHE_PROBE.format(tests=os.path.dirname(__file__))
    other = tmp_path / "other-env"
    shutil.copytree(os.path.dirname(gpudecode.__file__), other / "gpudecode")
    for path in (None, str(other)):
        env = dict(os.environ, GPUDECODE_CACHE_DIR=cache_dir)
        if path:
            env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        lines = res.stdout.strip().splitlines()
        assert lines[-2].startswith(path or os.path.dirname(gpudecode.__file__))  # the install it was meant to run
        hits, misses, out = json.loads(lines[-1])
        assert (hits, misses) == (1, 0), (path, hits, misses)  # loaded, not compiled
        assert out == here.tolist()
    # cache off: no cache directory, so cpu_jit passes cache=False (checked without another compile)
    off = subprocess.run([sys.executable, "-c", "from gpudecode.kernels import _compile; "
                          "print(_compile.cache_dir(), _compile._register_locator())"],
                         env=dict(os.environ, GPUDECODE_CACHE_DIR="0"), capture_output=True, text=True, timeout=300)
    assert off.returncode == 0 and off.stdout.split() == ["None", "False"], off.stdout + off.stderr[-2000:]


_BOUNDS_PROBE = """
import numpy as np, torch
from gpudecode import transforms as T
rng = np.random.default_rng(0)
norm = [T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
pipelines = [
    [T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1)] + norm,
    [T.CenterCrop(40), T.RandomHorizontalFlip()] + norm,  # (1:1 reads, padded where the image is smaller)
    [T.RandomCrop(32, padding=4, pad_if_needed=True, fill=(9, 8, 7)), T.RandomHorizontalFlip()] + norm,
    [T.Resize((20, 50)), T.RandomVerticalFlip(), T.GaussianBlur(5), T.RandomAffine(15, (0.1, 0.1), (0.8, 1.2))],
    [T.RandomRotation(30, expand=True), T.Resize((30, 30)), T.RandomPerspective(p=1.0), T.TrivialAugmentWide()],
    [T.RandomZoomOut(p=1.0), T.RandomResizedCrop(28, interpolation="bicubic"),
     T.ToDtype(torch.uint8)],
    [T.Resize((30, 26), interpolation="nearest"), T.ElasticTransform(20.0)],
]
for steps in pipelines:
    for layout in ("NCHW", "NHWC"):
        tf = T.Compose(steps, layout=layout)
        for trial in range(12):
            h, w = int(rng.integers(1, 70)), int(rng.integers(1, 70))
            hwc = torch.from_numpy(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
            for im in (hwc.permute(2, 0, 1), hwc.permute(2, 0, 1).contiguous(), hwc[:, :, 1:2].permute(2, 0, 1)):
                tf(im, seed=trial)  # one image: read through its own storage, exactly its bytes
print("in bounds")
"""


@pytest.mark.slow  # three compiles with bounds checks (over a minute on 2 cores)
def test_the_cpu_kernel_reads_only_inside_each_image():
    """Every read the CPU kernel makes lies inside the image it reads (numba's bounds
    checks on, each image alone in its storage): what lets a direct call read a list of
    separate images through one view of the address space they lie in (compose._sources).
    (The checks were seen to work: a source 10 bytes short of its image raises IndexError.)"""
    # (NUMBA_OPT=0: LLVM's passes skipped, a quarter of the test's time; no check is optimised away)
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_OPT="0", GPUDECODE_CACHE_DIR="0")
    res = subprocess.run([sys.executable, "-c", _BOUNDS_PROBE], env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0 and res.stdout.strip().endswith("in bounds"), res.stderr[-3000:]


def test_cache_stamp_covers_every_kernel_source(tmp_path, monkeypatch):
    """Editing any kernels/*.py (helpers are inlined from other files) invalidates the
    cached kernels, not only an edit of the file that defines them."""
    import shutil

    from gpudecode.kernels import _compile

    for name in os.listdir(_compile.KERNEL_DIR):
        if name.endswith(".py"):
            shutil.copy(os.path.join(_compile.KERNEL_DIR, name), tmp_path / name)
    monkeypatch.setattr(_compile, "KERNEL_DIR", str(tmp_path))
    stamps = []
    for edit in (None, "_pixel.py", "_simd.py"):
        if edit:
            with open(tmp_path / edit, "a") as f:
                f.write("\n# edited\n")
        _compile._sources_stamp.cache_clear()
        stamps.append(_compile._sources_stamp())
    _compile._sources_stamp.cache_clear()
    assert len(set(stamps)) == 3


def _case(rng, h, w, oh, ow, kind, chw=False, gray=False):
    """One sample: image, geom row (offset 0), and the oracle's geometry arguments."""
    c = 1 if gray else 3
    img = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
    g = np.zeros(fused.GEOM, np.int64)
    g[fused.H], g[fused.W] = h, w
    if chw:
        flat = np.ascontiguousarray(img.transpose(2, 0, 1)).reshape(-1)
        g[fused.SY], g[fused.SX], g[fused.SC] = w, 1, h * w
    else:
        flat = img.reshape(-1)
        g[fused.SY], g[fused.SX], g[fused.SC] = w * c, c, 1
    if gray:
        g[fused.SC] = 0
    if kind == "rrc":
        bh, bw = rng.integers(1, h + 1), rng.integers(1, w + 1)
        t, l = rng.integers(0, h - bh + 1), rng.integers(0, w - bw + 1)
        box, vsize, voff = (t, l, bh, bw), (oh, ow), (0, 0)
    else:  # resize + centre crop, possibly padding
        vh, vw = int(rng.integers(max(1, oh - 5), oh + 9)), int(rng.integers(max(1, ow - 5), ow + 9))
        box, vsize, voff = (0, 0, h, w), (vh, vw), ((vh - oh) // 2, (vw - ow) // 2)
    g[fused.TOP:fused.BW + 1] = box
    g[fused.VH], g[fused.VW] = vsize
    g[fused.OY], g[fused.OX] = voff
    g[fused.FLIP] = int(rng.integers(0, 2))
    rgb = np.repeat(img, 3, axis=2) if gray else img
    return flat, g, (rgb, box, vsize, voff)


def _batch(seed, n, oh, ow, **kw):
    rng = np.random.default_rng(seed)
    flats, geoms, refs = [], [], []
    off = 0
    for k in range(n):
        h, w = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        kind = "rrc" if k % 2 == 0 else "resize"
        flat, g, ref = _case(rng, h, w, oh, ow, kind, chw=kw.get("chw", False) and k % 2 == 1,
                             gray=kw.get("gray", False) and k == 0)
        g[fused.OFFSET] = off
        off += flat.size
        flats.append(flat)
        geoms.append(g)
        refs.append(ref)
    factors = np.stack([np.array([rng.uniform(0.6, 1.4), rng.uniform(0.6, 1.4), rng.uniform(0.6, 1.4),
                                  rng.uniform(-0.1, 0.1)], np.float32) for _ in range(n)])
    order = np.stack([rng.permutation(4).astype(np.int32) for _ in range(n)])
    order[0, 2:] = -1  # a sample with only two ops
    return np.concatenate(flats), np.stack(geoms), factors, order, refs


@pytest.mark.parametrize("normalize", [True, False])
def test_cpu_matches_numpy_oracle(normalize):
    src, geom, factors, order, refs = _batch(0, 6, 13, 17, chw=True, gray=True)
    out = np.zeros((6, 3, 13, 17), np.float32)
    fused.fused_cpu(src, geom, factors, order, MEAN, STD, out, normalize=normalize)
    for k, (img, box, vsize, voff) in enumerate(refs):
        ref = reference.fused_reference(img, box, vsize, voff, (13, 17), bool(geom[k, fused.FLIP]), order[k],
                                        factors[k], MEAN if normalize else None, STD if normalize else None)
        np.testing.assert_allclose(out[k], ref, atol=2e-5 if normalize else 5e-6, rtol=0)


def test_bicubic_samples_match_the_oracle_on_both_targets():
    """A bicubic sample (FILTER set, beside bilinear ones in one batch): Keys' a = -0.5
    filter with antialias (ATen's and PIL's), the overshoot clipped to [0, 1], on the CPU
    twin and under the CUDA simulator, against the float64 numpy oracle; the bilinear
    samples of the batch unchanged by their neighbours' filter."""
    # (16 columns: one block of the CUDA kernel, which the simulator runs thread by thread)
    src, geom, factors, order, refs = _batch(4, 6, 13, 16, chw=True)
    geom[::2, fused.FILTER] = 1
    out = np.zeros((6, 3, 13, 16), np.float32)
    fused.fused_cpu(src, geom, factors, order, MEAN, STD, out, normalize=True)
    alone = np.zeros((6, 3, 13, 16), np.float32)
    bilinear = geom.copy()
    bilinear[:, fused.FILTER] = 0
    fused.fused_cpu(src, bilinear, factors, order, MEAN, STD, alone, normalize=True)
    np.testing.assert_array_equal(out[1::2], alone[1::2])
    for k, (img, box, vsize, voff) in enumerate(refs):
        ref = reference.fused_reference(img, box, vsize, voff, (13, 16), bool(geom[k, fused.FLIP]), order[k],
                                        factors[k], MEAN, STD, cubic=bool(geom[k, fused.FILTER]))
        np.testing.assert_allclose(out[k], ref, atol=2e-5, rtol=0)
    assert np.abs(out[::2] - alone[::2]).max() > 1e-3  # the filter made a difference
    # the simulator runs each thread in Python: one bicubic sample, as small as the batch makes it
    gpu = np.zeros((1, 3, 13, 16), np.float32)
    fused.fused_cuda(src, geom[:1], factors[:1], order[:1], MEAN, STD, gpu, normalize=True)
    np.testing.assert_allclose(gpu, out[:1], atol=1e-5, rtol=0)


def _padded(g, oh, ow):
    """[oh, ow] True where output pixel (y, x) of sample g lies outside its resized frame."""
    ys = np.arange(oh)
    xs = np.arange(ow)
    vy = (oh - 1 - ys if g[fused.VFLIP] else ys) + g[fused.OY]
    vx = (ow - 1 - xs if g[fused.FLIP] else xs) + g[fused.OX]
    return ~(((vy >= 0) & (vy < g[fused.VH]))[:, None] & ((vx >= 0) & (vx < g[fused.VW]))[None, :])


def test_padding_takes_the_fill_colour_on_both_targets():
    """FILLR/G/B colour the padding (outside the resized frame: CenterCrop larger than the
    image, RandomCrop's padding, timm's CenterCropOrPad); every other pixel is the
    zero-fill run's, bit for bit; the CUDA kernel (simulator) and the identity fast path
    agree."""
    src, geom, factors, order, refs = _batch(5, 6, 13, 16, chw=True)  # (16 columns: one simulated CUDA block)
    order[:] = -1  # (the fill shows as it is: no ColorJitter over it)
    zero = np.zeros((6, 3, 13, 16), np.float32)
    fused.fused_cpu(src, geom, factors, order, MEAN, STD, zero, normalize=True)
    filled = geom.copy()
    filled[:, fused.FILLR:fused.FILLB + 1] = (124, 116, 104)
    out = np.zeros_like(zero)
    fused.fused_cpu(src, filled, factors, order, MEAN, STD, out, normalize=True)
    fill = (np.array([124, 116, 104], np.float32) * np.float32(1 / 255) - MEAN) / STD
    seen = 0
    for k in range(6):
        pad = _padded(geom[k], 13, 16)
        seen += pad.sum()
        np.testing.assert_array_equal(out[k][:, ~pad], zero[k][:, ~pad])
        np.testing.assert_allclose(out[k][:, pad], np.broadcast_to(fill[:, None], (3, pad.sum())), atol=1e-6)
    assert seen > 0  # (the batch has padded samples)
    k = next(k for k in range(6) if _padded(geom[k], 13, 16).any())  # (the simulator: one sample)
    gpu = np.zeros((1, 3, 13, 16), np.float32)
    fused.fused_cuda(src, filled[k:k + 1], factors[k:k + 1], order[k:k + 1], MEAN, STD, gpu, normalize=True)
    np.testing.assert_allclose(gpu[0], out[k], atol=1e-5, rtol=0)
    isrc, igeom, ifac, iorder, _ = _identity_batch(6, 12, 12, 17)
    igeom[:, fused.FILLR:fused.FILLB + 1] = (9, 200, 255)
    fast = np.zeros((12, 3, 12, 17), np.float32)
    slow = np.zeros_like(fast)
    fused.fused_cpu(isrc, igeom, ifac, iorder, MEAN, STD, fast, normalize=True)
    fused.fused_cpu(isrc, igeom, ifac, iorder, MEAN, STD, slow, normalize=True, fast_identity=False)
    np.testing.assert_array_equal(fast, slow)


def _identity_batch(seed, n, oh, ow):
    """Samples read 1:1 (no resampling, no ColorJitter): crop boxes of the output's size,
    whole images cut at random offsets, padded where the window leaves them (CenterCrop
    and RandomCrop with padding), flipped or not; packed HWC."""
    rng = np.random.default_rng(seed)
    flats, geoms, refs = [], [], []
    off = 0
    for k in range(n):
        h, w = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        g = np.zeros(fused.GEOM, np.int64)
        g[fused.OFFSET], g[fused.H], g[fused.W] = off, h, w
        g[fused.SY], g[fused.SX], g[fused.SC] = 3 * w, 3, 1
        if k % 3 == 0 and h >= oh and w >= ow:  # a box of exactly the output's size
            t, l = int(rng.integers(0, h - oh + 1)), int(rng.integers(0, w - ow + 1))
            box, vsize, voff = (t, l, oh, ow), (oh, ow), (0, 0)
        else:
            box, vsize = (0, 0, h, w), (h, w)
            voff = (int(rng.integers(-oh, h + 1)), int(rng.integers(-ow, w + 1)))
        g[fused.TOP:fused.BW + 1] = box
        g[fused.VH], g[fused.VW] = vsize
        g[fused.OY], g[fused.OX] = voff
        g[fused.FLIP] = k % 2
        flats.append(img.reshape(-1))
        geoms.append(g)
        refs.append((img, box, vsize, voff))
        off += img.size
    factors = np.ones((n, 4), np.float32)
    factors[:, 3] = 0
    order = np.full((n, 4), -1, np.int32)
    return np.concatenate(flats), np.stack(geoms), factors, order, refs


@pytest.mark.parametrize("pad", [1, 2, 3])
def test_identity_fast_path_reads_a_padding_mode_as_the_general_path(pad):
    """Samples read 1:1 whose padding reads the frame (PAD: edge, reflect, symmetric) take
    the fast path too: bit for bit what the general path gives, packed HWC and planar CHW,
    flipped or not, windows reaching past every side (and wholly past one)."""
    src, geom, factors, order, refs = _identity_batch(5, 40, 12, 17)
    geom[:, fused.PAD] = pad
    fast = np.full((40, 3, 12, 17), np.nan, np.float32)
    slow = np.full((40, 3, 12, 17), np.nan, np.float32)
    fused.fused_cpu(src, geom, factors, order, MEAN, STD, fast, normalize=True, num_threads=2)
    fused.fused_cpu(src, geom, factors, order, MEAN, STD, slow, normalize=True, num_threads=2, fast_identity=False)
    np.testing.assert_array_equal(fast, slow)
    assert not np.isnan(fast).any()
    planar = []  # (the same images as CHW planes)
    g2 = geom.copy()
    off = 0
    for k, (img, *_rest) in enumerate(refs):
        h, w = img.shape[:2]
        planar.append(np.ascontiguousarray(img.transpose(2, 0, 1)).reshape(-1))
        g2[k, fused.OFFSET], g2[k, fused.SY], g2[k, fused.SX], g2[k, fused.SC] = off, w, 1, h * w
        off += img.size
    psrc = np.concatenate(planar)
    pfast = np.full_like(fast, np.nan)
    fused.fused_cpu(psrc, g2, factors, order, MEAN, STD, pfast, normalize=True, num_threads=2)
    np.testing.assert_array_equal(pfast, slow)


@pytest.mark.parametrize("normalize,ow", [(True, 17), (False, 17), (True, 9), (True, 32)])
def test_identity_fast_path_equals_general_path_and_oracle(normalize, ow):
    """Samples read 1:1 take the CPU twin's fast path (a row scaled, split into channels
    eight columns at a time, the last eight again where the width is no multiple of 8,
    flipped and padded on the way): bit for bit what the general path (resampling with a
    unit tap) gives, and the numpy oracle's values; windows of every width from 0 to the
    output's (17, 9 and 32 columns)."""
    src, geom, factors, order, refs = _identity_batch(3, 40, 12, ow)
    fast = np.full((40, 3, 12, ow), np.nan, np.float32)
    slow = np.full((40, 3, 12, ow), np.nan, np.float32)
    fused.fused_cpu(src, geom, factors, order, MEAN, STD, fast, normalize=normalize, num_threads=2)
    fused.fused_cpu(src, geom, factors, order, MEAN, STD, slow, normalize=normalize, num_threads=2,
                    fast_identity=False)
    np.testing.assert_array_equal(fast, slow)
    for k, (img, box, vsize, voff) in enumerate(refs):
        ref = reference.fused_reference(img, box, vsize, voff, (12, ow), bool(geom[k, fused.FLIP]), order[k],
                                        factors[k], MEAN if normalize else None, STD if normalize else None)
        np.testing.assert_allclose(fast[k], ref, atol=2e-6, rtol=0)
    if ow != 17:
        return
    # the CUDA kernel (simulator) on the same samples
    gpu = np.zeros_like(fast)
    fused.fused_cuda(src, geom[:6], factors[:6], order[:6], MEAN, STD, gpu[:6], normalize=normalize)
    np.testing.assert_allclose(gpu[:6], fast[:6], atol=1e-5, rtol=0)


def test_cpu_kernel_refuses_pixels_that_are_not_uint8():
    """The CPU kernel reads packed uint8 pixels (the 1:1 path splits their bytes): any
    other dtype is refused by name, before numba would fail to type it."""
    src, geom, factors, order, _ = _identity_batch(3, 2, 12, 17)
    out = np.zeros((2, 3, 12, 17), np.float32)
    with pytest.raises(TypeError, match="uint8 pixels, not float32"):
        fused.fused_cpu(src.astype(np.float32), geom, factors, order, MEAN, STD, out, normalize=True)
    assert not out.any()


@pytest.mark.slow  # over 20 s on 2 cores under coverage (35-47 s each, 2026-11-25)
@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.float16])
def test_cuda_kernels_equal_cpu(dtype):
    """Under NUMBA_ENABLE_CUDASIM=1 (no GPU) the CUDA kernels run in the simulator."""
    normalize = dtype != np.uint8
    src, geom, factors, order, refs = _batch(1, 3, 11, 9, chw=True, gray=True)
    cpu = np.zeros((3, 3, 11, 9), np.float32 if dtype == np.float16 else dtype)
    fused.fused_cpu(src, geom, factors, order, MEAN, STD, cpu, normalize=normalize)
    gpu = np.zeros((3, 3, 11, 9), dtype)
    fused.fused_cuda(src, geom, factors, order, MEAN, STD, gpu, normalize=normalize)
    # the CUDA kernel against the float64 numpy oracle itself, not only against its CPU twin
    for k, (img, box, vsize, voff) in enumerate(refs):
        ref = reference.fused_reference(img, box, vsize, voff, (11, 9), bool(geom[k, fused.FLIP]), order[k],
                                        factors[k], MEAN if normalize else None, STD if normalize else None)
        if dtype == np.uint8:  # the oracle's [0, 1] values, rounded to levels by the kernel
            assert np.abs(gpu[k].astype(float) - ref * 255).max() <= 1.0
        else:
            np.testing.assert_allclose(gpu[k].astype(np.float32), ref, atol=5e-3 if dtype == np.float16 else 2e-5,
                                       rtol=1e-3 if dtype == np.float16 else 0)
    if dtype == np.uint8:
        assert np.abs(cpu.astype(int) - gpu.astype(int)).max() <= 1
        assert (cpu == gpu).mean() > 0.99
    elif dtype == np.float16:
        np.testing.assert_allclose(gpu.astype(np.float32), cpu, atol=5e-3, rtol=1e-3)
    else:
        np.testing.assert_allclose(gpu, cpu, atol=1e-5, rtol=0)


def test_planar_and_grey_pixels_resample_as_packed_bit_for_bit():
    """The vertical pass reads planar pixels (a contiguous CHW image, channel planes with a
    gap between them, grey read as RGB) three unit-stride rows at a time, and the 1:1 path
    reads their channel rows straight from the planes: the same arithmetic in the same
    order as for packed HWC pixels, so the output is the same bits, for every tap count
    (1:1, padded, upscaled: 2, bicubic: 4, downscaled: many), in both filters, flipped or
    not, and equal to the resampling path's with the 1:1 path off."""
    rng = np.random.default_rng(11)
    h, w, oh, ow = 37, 29, 12, 10
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    grey = img[..., 1].copy()
    gap = 5  # bytes between the channel planes of the second planar copy
    planes = np.zeros(3 * (h * w + gap), np.uint8)
    for c in range(3):
        planes[c * (h * w + gap):c * (h * w + gap) + h * w] = img[..., c].reshape(-1)
    layouts = {  # name -> (bytes, (SY, SX, SC), the RGB image they hold)
        "packed": (img.reshape(-1), (3 * w, 3, 1), img),
        "planar": (np.ascontiguousarray(img.transpose(2, 0, 1)).reshape(-1), (w, 1, h * w), img),
        "planar with gaps": (planes, (w, 1, h * w + gap), img),
        "grey": (grey.reshape(-1), (w, 1, 0), np.repeat(grey[..., None], 3, axis=2)),
        "grey as packed RGB": (np.repeat(grey[..., None], 3, axis=2).reshape(-1), (3 * w, 3, 1), None),
    }
    # (box, (OY, OX)): read 1:1 (the 1:1 path, padded where the offset leaves the box), or resampled
    boxes = [((3, 2, oh, ow), (0, 0)), ((3, 2, oh, ow), (-3, 2)), ((0, 1, oh, ow), (4, -5)), ((0, 0, h, w), (0, 0)),
             ((5, 4, 7, 6), (0, 0)), ((1, 3, 30, 25), (0, 0)), ((2, 1, 12, 3), (0, 0)), ((4, 0, 1, 29), (0, 0))]
    for cubic, normalize in ((0, True), (1, True), (0, False)):
        outs = {}
        for name, (flat, (sy, sx, sc), _) in layouts.items():
            geom = np.zeros((2 * len(boxes), fused.GEOM), np.int64)
            for k, (box, offset) in enumerate(boxes * 2):  # each box unflipped and flipped
                geom[k, fused.H], geom[k, fused.W] = h, w
                geom[k, fused.TOP:fused.BW + 1] = box
                geom[k, fused.VH], geom[k, fused.VW] = box[2:] if box[2:] == (oh, ow) else (oh, ow)
                geom[k, fused.OY], geom[k, fused.OX] = offset
                geom[k, fused.SY], geom[k, fused.SX], geom[k, fused.SC] = sy, sx, sc
                geom[k, fused.FLIP] = k >= len(boxes)
                geom[k, fused.FILTER] = cubic
                geom[k, fused.FILLR:fused.FILLB + 1] = (10, 128, 250)
            order = np.full((len(geom), 1), -1, np.int32)
            out = np.zeros((len(geom), 3, oh, ow), np.float32)
            fused.fused_cpu(flat, geom, np.zeros((len(geom), 4), np.float32), order, MEAN, STD, out,
                            normalize=normalize)
            general = np.zeros_like(out)  # (every sample through the resampling path: the same bits)
            fused.fused_cpu(flat, geom, np.zeros((len(geom), 4), np.float32), order, MEAN, STD, general,
                            normalize=normalize, fast_identity=False)
            np.testing.assert_array_equal(out, general, err_msg=name)
            outs[name] = out
        for name in ("planar", "planar with gaps"):
            np.testing.assert_array_equal(outs[name], outs["packed"], err_msg=name)
        np.testing.assert_array_equal(outs["grey"], outs["grey as packed RGB"])
        assert not np.array_equal(outs["grey"], outs["packed"])  # (the grey image is not the colour one)


@pytest.mark.parametrize("h,w", [(7, 10), (16, 24)])
def test_nhwc_view_equals_nchw(h, w):
    """Outputs are written through strides: an NHWC buffer is a [N, 3, H, W] view (the
    CPU twin writes a contiguous one directly, streaming where aligned: 16x24 rows are).
    A non-contiguous view goes through the staging path. (The simulator cannot move
    strided host arrays; PTX for strided outputs is compiled above and the GPU test
    covers torch views on a device.)"""
    src, geom, factors, order, _ = _batch(2, 2, h, w)
    for normalize in (True, False):
        nchw = np.zeros((2, 3, h, w), np.float32)
        fused.fused_cpu(src, geom, factors, order, MEAN, STD, nchw, normalize=normalize)
        nhwc = _at_alignment((2, h, w, 3), 0)
        fused.fused_cpu(src, geom, factors, order, MEAN, STD, nhwc.transpose(0, 3, 1, 2), normalize=normalize)
        np.testing.assert_array_equal(nhwc.transpose(0, 3, 1, 2), nchw)
        wide = np.zeros((2, h, w, 5), np.float32)  # channels padded to 5: strided, not contiguous
        fused.fused_cpu(src, geom, factors, order, MEAN, STD, wide[..., 1:4].transpose(0, 3, 1, 2),
                        normalize=normalize)
        np.testing.assert_array_equal(wide[..., 1:4].transpose(0, 3, 1, 2), nchw)
        assert (wide[..., [0, 4]] == 0).all()


def _at_alignment(shape, misalign):
    """A float32 C-contiguous array whose data starts `misalign` bytes past 32."""
    count = int(np.prod(shape))
    raw = np.zeros(count + 16, np.float32)
    start = (-raw.ctypes.data % 32 + misalign) // 4
    return raw[start:start + count].reshape(shape)


def test_streamed_output_equals_regular_stores():
    """Rows that are 32-byte aligned go out with non-temporal vector stores; a buffer 4
    bytes off takes ordinary stores. Same values, and both equal the numpy oracle."""
    src, geom, factors, order, refs = _batch(5, 4, 16, 24)
    outs = []
    for misalign in (0, 4):
        out = _at_alignment((4, 3, 16, 24), misalign)
        assert out.ctypes.data % 32 == misalign
        fused.fused_cpu(src, geom, factors, order, MEAN, STD, out, normalize=True)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    from gpudecode.kernels import _simd

    a = np.zeros(64, np.float32)  # compiled here too (the kernel itself may come from the disk cache)
    _simd.transpose(a, 0, 8, a, 0, 8, 8, 8, True, np.float32(0), np.float32(1))
    assert any("!nontemporal" in ir for ir in _simd.transpose.inspect_llvm().values())
    for k, (img, box, vsize, voff) in enumerate(refs):
        ref = reference.fused_reference(img, box, vsize, voff, (16, 24), bool(geom[k, fused.FLIP]), order[k],
                                        factors[k], MEAN, STD)
        np.testing.assert_allclose(outs[0][k], ref, atol=2e-5, rtol=0)


def test_zero_batch_and_no_mutation():
    src, geom, factors, order, _ = _batch(3, 2, 5, 5)
    before = [a.copy() for a in (src, geom, factors, order)]
    out = np.zeros((2, 3, 5, 5), np.float32)
    fused.fused_cpu(src, geom, factors, order, MEAN, STD, out, normalize=True)
    for a, b in zip(before, (src, geom, factors, order)):
        np.testing.assert_array_equal(a, b)
    # zero-size batches: nothing written, nothing read, the (empty) output stays its shape;
    # the output of the batch above is untouched by them
    kept = out.copy()
    empty = np.zeros((0, 3, 5, 5), np.float32)
    fused.fused_cpu(src, geom[:0], factors[:0], order[:0], MEAN, STD, empty, normalize=True)
    fused.fused_cuda(src, geom[:0], factors[:0], order[:0], MEAN, STD, empty, normalize=True)
    assert empty.shape == (0, 3, 5, 5)
    np.testing.assert_array_equal(out, kept)
    for a, b in zip(before, (src, geom, factors, order)):
        np.testing.assert_array_equal(a, b)


def test_cpu_thread_count_does_not_change_output():
    src, geom, factors, order, _ = _batch(4, 8, 20, 24)
    outs = []
    for threads in (1, 2, 3, 8):
        out = np.zeros((8, 3, 20, 24), np.float32)
        fused.fused_cpu(src, geom, factors, order, MEAN, STD, out, normalize=True, num_threads=threads)
        outs.append(out)
    for o in outs[1:]:
        np.testing.assert_array_equal(outs[0], o)


def test_concurrent_callers():
    """Two threads running the CPU twin at once get what each gets alone."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = [_batch(s, 6, 15, 12) for s in (10, 11)]
    alone = []
    for src, geom, factors, order, _ in jobs:
        out = np.zeros((6, 3, 15, 12), np.float32)
        fused.fused_cpu(src, geom, factors, order, MEAN, STD, out, normalize=True)
        alone.append(out)

    def run(job):
        src, geom, factors, order, _ = job
        out = np.zeros((6, 3, 15, 12), np.float32)
        for _ in range(5):
            fused.fused_cpu(src, geom, factors, order, MEAN, STD, out, normalize=True, num_threads=2)
        return out

    with ThreadPoolExecutor(2) as ex:
        together = list(ex.map(run, jobs))
    for a, b in zip(alone, together):
        np.testing.assert_array_equal(a, b)


@pytest.mark.gpu
def test_real_gpu_equals_cpu():
    import torch
    if not torch.cuda.is_available() or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")
    from gpudecode.kernels import cuda_launch

    src, geom, factors, order, _ = _batch(5, 4, 31, 33)
    cpu = np.zeros((4, 3, 31, 33), np.float32)
    fused.fused_cpu(src, geom, factors, order, MEAN, STD, cpu, normalize=True)
    out = torch.empty((4, 3, 31, 33), device="cuda")
    cuda_launch.run(torch.from_numpy(src).cuda(), geom, factors, order, MEAN, STD, out, normalize=True,
                    antialias=True)
    np.testing.assert_allclose(out.cpu().numpy(), cpu, atol=1e-5)


def test_a_cuda_launch_sends_its_arrays_in_one_copy_and_converts_them_once(photos):
    """cuda_launch.launch_arrays, which makes a CUDA launch's eleven array arguments, run on
    CPU tensors (numpy as the conversion) under the simulator, launch after launch through
    one workspace: the kernels given its arrays write what they write given fresh arrays
    of their own, bit for bit, with the per-sample arrays and the statistics' starting
    values sent as one packed buffer, a smaller batch between, and programs with barriers
    (equalize's histograms zeroed, the statistics started again, each launch); a launch
    after a shape's first converts only the source and the output."""
    import torch

    from gpudecode import transforms as T
    from gpudecode.kernels import cuda_launch
    from gpudecode.kernels.workspace import ALIGN, Workspace
    from tvref import pack_hwc

    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("the simulator's form of a launch (on a GPU, tests/test_gpu.py launches for real)")
    plain = T.Compose([T.RandomResizedCrop((6, 8)), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    barriers = T.Compose([T.RandomResizedCrop((6, 8)), T.RandomEqualize(1.0), T.Normalize(MEAN, STD)])
    names = ["astronaut", "coffee", "chelsea", "rocket"]
    ws = Workspace()
    converted, sent = [], []

    def convert(t):
        sent.append(tuple(t.shape))
        return t.numpy()

    # (the last launch the one before it again: nothing of that launch may stay behind)
    launches = [(plain, 3, 0), (plain, 3, 1), (plain, 2, 2), (barriers, 1, 3), (barriers, 1, 3)]
    for k, (tf, n, seed) in enumerate(launches):
        imgs = [torch.from_numpy(np.ascontiguousarray(photos[k][40 + 3 * seed:60 + 3 * seed, 50:72].transpose(2, 0, 1)))
                for k in names[:n]]
        sizes = [tuple(i.shape[1:]) for i in imgs]
        geom, args, order = tf.encode(tf.make_params(sizes, seed), sizes)
        src = pack_hwc(imgs, geom, sizes)
        mean, std = tf._norm_arrays()
        if k == 0 or launches[k] != launches[k - 1]:
            want = np.full((n, 3, 6, 8), np.nan, np.float32)
            fused.fused_cuda(src, geom, args, order, mean, std, want, normalize=True)
        got = torch.full((n, 3, 6, 8), float("nan"))
        before, sent[:] = ws.converted, []
        arrays, levels = cuda_launch.launch_arrays(torch.from_numpy(src), geom, args, order, mean, std, got, ws, convert)
        assert levels == fused.barrier_levels(order) and (levels > 0) == (tf is barriers)
        fused.fused_cuda(*arrays[:7], normalize=True, scratch=arrays[7], stats=arrays[8], hist=arrays[9],
                         aux=arrays[10], levels=levels)
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"launch {k}")
        converted.append((ws.converted - before, list(sent)))
        # the per-sample arrays: views of the one buffer sent (each part at its own ALIGN-byte start)
        bases = {a.__array_interface__["data"][0] for a in arrays[1:6] + (arrays[8],)}
        packed = ws._tensors[("launch", "cpu")]
        assert all(0 <= b - packed.data_ptr() < packed.numel() and (b - packed.data_ptr()) % ALIGN == 0
                   for b in bases) and len(bases) == 6
        np.testing.assert_array_equal(arrays[1], fused.own_sizes(geom, 6, 8)[0])  # (OH, OW: the batch's)
        assert (arrays[1][:, fused.OH:fused.OW + 1] == (6, 8)).all() and arrays[11] is False
    # first launch: the six parts and the three buffers; then none until a shape changes (the
    # batch of 3: the parts after the first, which start elsewhere; the barrier batch: the parts,
    # its scratch and histograms), and none at the barrier batch's second launch, which converts
    # the source and the output alone
    counts = [c for c, _ in converted]
    assert counts[0] == 9 and counts[1] == 0 and 4 <= counts[2] <= 6 and counts[4] == 0, converted
    assert (1, 1, 3, 6, 8) in converted[3][1]  # (the barrier batch's scratch: one image a sample)
    assert converted[4][1] == [(20 * 22 * 3,), (1, 3, 6, 8)], converted


def test_a_first_call_that_compiles_says_so(monkeypatch, capsys):
    """The first call of a kernel variant still running after NOTICE_AFTER_S (compiling,
    not loading the cached kernel) prints a line while it runs and one when done; later
    calls and quick first calls print nothing. (The timer is made to fire at once.)"""
    from gpudecode.kernels import fused

    class AtOnce:
        def __init__(self, interval, fn):
            self.fn = fn
            self.daemon = False

        def start(self):
            self.fn()

        def cancel(self):
            pass

    from gpudecode.kernels import _compile

    monkeypatch.setattr(_compile, "_SEEN", set())
    monkeypatch.setattr(_compile.threading, "Timer", AtOnce)
    with fused.first_use(("a variant",)):
        pass
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("gpudecode: compiling the CPU kernel for this machine (it takes up to a minute or so, once: "
                             "the result is kept in ")
    assert err[1].startswith("gpudecode: CPU kernel compiled in ") and len(err) == 2
    with fused.first_use(("a variant",)):  # seen: nothing said
        pass
    assert capsys.readouterr().err == ""
    # two threads' first calls of one variant at once (precache's decode threads): said once
    import threading

    inside, gate = threading.Event(), threading.Event()

    def first() -> None:
        with fused.first_use(("shared",)):
            inside.set()
            gate.wait(10)

    t = threading.Thread(target=first)
    t.start()
    assert inside.wait(10)
    with fused.first_use(("shared",)):
        pass
    gate.set()
    t.join(10)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("gpudecode: compiling") and err[1].startswith("gpudecode: CPU kernel")
