"""python bench/against.py REV [--outputs] [--speed] [--rounds N]: this checkout against
commit REV, side by side on this machine, for a refactor that must change nothing.

REV's Python (gpudecode/ and kernels/) is laid over a copy of the installed package (the
native module must be the same: refused if csrc/ or CMakeLists.txt differ), and each
measurement runs in its own process, REV's and this checkout's alternated:

- --outputs: a hash of every batch a Loader yields (images, labels, keys) for a set of
  plans (JPEG, PNG and tensor shards, two views, MixUp/CutMix, every op of the kernel,
  eval, the canvas steps and the warp after the kernel, 2 and 3 ranks, a state loaded
  mid-epoch), and precache's shards (their sha256): equal, or the plans that differ;
- --speed: Loader img/s (JPEG training with ColorJitter, with a rotation and an affine
  warp, and torchvision's reference recipe; tensor shards at 224 and 256) and precache img/s,
  the best epoch a process, the best of N rounds, and their ratio.

Run it from the repository root with the virtualenv `make setup` made (.venv/bin/python).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

_PLANS = r'''
import glob, hashlib, io, json, os, sys
import numpy as np, torch
from PIL import Image
import gpudecode
from gpudecode import transforms as T

D = sys.argv[1]
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
jpg, png = sorted(glob.glob(f"{D}/jpg-*.tar")), sorted(glob.glob(f"{D}/png-*.tar"))
ten = sorted(glob.glob(f"{D}/tensor/*.tar"))
train = lambda: T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                           T.Normalize(MEAN, STD)])

def digest(batches):
    h, n = hashlib.sha256(), 0
    for b in batches:
        imgs = b.images if isinstance(b.images, torch.Tensor) else torch.cat([v.flatten() for v in b.images])
        h.update(imgs.contiguous().numpy().tobytes()); h.update(b.labels.numpy().tobytes())
        h.update("|".join(b.keys).encode()); n += 1
    return f"{n}:{h.hexdigest()[:16]}"

out = {}
def run(name, urls, epochs=(0, 1), **kw):
    kw.setdefault("transform", train()); kw.setdefault("batch_size", 8)
    ld = gpudecode.Loader(urls, device="cpu", seed=5, num_workers=2, **kw)
    for e in epochs:
        ld.set_epoch(e)
        out[f"{name}/e{e}"] = digest(ld)
    ld.close()

run("jpeg", jpg)
run("png", png)
run("tensor", ten)
run("views", jpg, transform=[train(), T.Compose([T.RandomResizedCrop(32), T.Normalize(MEAN, STD)])])
run("mixup", jpg, batch_transform=T.RandomChoice([T.MixUp(alpha=0.2, num_classes=7), T.CutMix(alpha=1.0, num_classes=7)]))
# every op of the kernel's op table, on both of its paths (the per-pixel ops and the barriers)
run("ops", jpg, transform=T.Compose([T.RandomResizedCrop(64), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
    T.RandomGrayscale(0.3), T.RandomSolarize(0.6, 0.3), T.RandomInvert(0.3), T.RandomPosterize(3, 0.3),
    T.RandomAutocontrast(0.3), T.RandomEqualize(0.3), T.RandomAdjustSharpness(2.0, 0.3), T.GaussianBlur(5, (0.1, 2.0)),
    T.RandomRotation(15), T.Normalize(MEAN, STD)]))
run("augmix", jpg, transform=T.Compose([T.RandomResizedCrop(64), T.AugMix(), T.TrivialAugmentWide(),
    T.Normalize(MEAN, STD)]))
run("eval", jpg, transform=T.Compose([T.Resize(72), T.CenterCrop(64), T.Normalize(MEAN, STD)]), shuffle=False,
    even=None, epochs=(0,))
# the canvas steps (each image made anew before the geometry) and the warp after the kernel
run("zoomout", jpg, transform=T.Compose([T.RandomZoomOut((123, 117, 104), (1.0, 2.5), p=0.7), T.RandomResizedCrop(64),
    T.Normalize(MEAN, STD)]), epochs=(0,))
run("rotate-expand", jpg, transform=T.Compose([T.RandomRotation(30, "bilinear", expand=True, fill=(9, 99, 199)),
    T.RandomResizedCrop(64), T.Normalize(MEAN, STD)]), epochs=(0,))
run("elastic", jpg, transform=T.Compose([T.ElasticTransform(30.0, 3.0), T.RandomResizedCrop(64),
    T.Normalize(MEAN, STD)]), epochs=(0,))
run("elastic-after", jpg, transform=T.Compose([T.RandomResizedCrop(64), T.ElasticTransform(30.0, 3.0),
    T.Normalize(MEAN, STD)]), epochs=(0,))
for world in (2, 3):
    for r in range(world):
        run(f"ranks{world}/r{r}", jpg, rank=r, world_size=world)
ld = gpudecode.Loader(jpg, device="cpu", seed=5, num_workers=2, transform=train(), batch_size=8)
ld.set_epoch(1)
it = iter(ld)
first = [next(it) for _ in range(3)]
state = ld.state_dict(); it.close(); ld.close()
again = gpudecode.Loader(jpg, device="cpu", seed=5, num_workers=2, transform=train(), batch_size=8)
again.load_state_dict(state)
out["resumed/first3"], out["resumed/rest"], out["resumed/next_epoch"] = digest(first), digest(again), digest(again)
from gpudecode.precache import precache
import tempfile
with tempfile.TemporaryDirectory() as d:
    m = json.load(open(precache(jpg + png, d, size=96, crop="none").manifest))
    out["precache/shards"] = hashlib.sha256(json.dumps([(s["path"], s["sha256"]) for s in m["shards"]]).encode()).hexdigest()[:16]
print(json.dumps(out, sort_keys=True))
'''

_SPEED = r'''
import json, sys, time, tempfile, os
import gpudecode
from gpudecode import transforms as T
kind, urls = sys.argv[1], json.loads(sys.argv[2])
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
if kind == "precache256":
    from gpudecode.precache import precache
    with tempfile.TemporaryDirectory() as d:
        precache(urls[:1], os.path.join(d, "warm"), size=256, crop="center")
        t = time.perf_counter()
        r = precache(urls, os.path.join(d, "out"), size=256, crop="center")
        print(json.dumps({"img_s": r.written / (time.perf_counter() - t)}))
    sys.exit(0)
full = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                  T.Normalize(MEAN, STD)])
warps = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.RandomRotation(15, "bilinear"),
                   T.RandomAffine(0, (0.1, 0.1), (0.9, 1.1), 5), T.Normalize(MEAN, STD)])
import torch
reference = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.TrivialAugmentWide(),
                       T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD), T.RandomErasing(0.25)])
tf = T.Compose([T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]) if kind == "tensor224" else \
    warps if kind == "jpeg-warps" else reference if kind == "jpeg-reference" else full
mix = T.RandomChoice([T.MixUp(alpha=0.2, num_classes=1000), T.CutMix(alpha=1.0, num_classes=1000)]) \
    if kind == "jpeg-reference" else None
ld = gpudecode.Loader(urls, batch_size=64, transform=tf, device="cpu", num_workers=2, seed=0, batch_transform=mix)
for b in ld:
    pass
best = 0.0
for _ in range(3):
    t = time.perf_counter()
    n = sum(b.images.shape[0] for b in ld)
    best = max(best, n / (time.perf_counter() - t))
print(json.dumps({"img_s": best}))
'''


def overlay(rev: str, work: pathlib.Path) -> pathlib.Path:
    """A copy of the installed gpudecode with REV's Python laid over it."""
    changed = subprocess.run(["git", "diff", "--quiet", rev, "--", "csrc", "CMakeLists.txt"], cwd=ROOT).returncode
    if changed:
        sys.exit(f"{rev}'s native module differs from this checkout's (csrc/, CMakeLists.txt): build it apart")
    import gpudecode

    pkg = work / "rev" / "gpudecode"
    shutil.copytree(os.path.dirname(gpudecode.__file__), pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for p in list(pkg.rglob("*.py")):  # REV's files only: none of this checkout's new modules
        p.unlink()
    src = work / "src"
    src.mkdir()
    archive = subprocess.run(["git", "archive", rev, "gpudecode", "kernels"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    for top, dest in (("gpudecode", pkg), ("kernels", pkg / "kernels")):
        for f in (src / top).rglob("*.py"):
            t = dest / f.relative_to(src / top)
            t.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, t)
    return work / "rev"


def in_process(code: str, args: list[str], path: pathlib.Path | None, cwd: pathlib.Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    r = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, cwd=cwd)
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def data(folder: pathlib.Path) -> None:
    """60 JPEGs and 60 PNGs of crops of scikit-image's photographs in 3 shards each, and
    the JPEGs precached at 128 (by this checkout)."""
    import io

    import numpy as np
    from PIL import Image
    from skimage import data as skd

    from gpudecode.io.writer import ShardWriter
    from gpudecode.precache import precache

    photos = [skd.astronaut(), skd.coffee(), skd.chelsea(), skd.rocket()]
    for fmt, ext in (("JPEG", "jpg"), ("PNG", "png")):
        with ShardWriter(str(folder / f"{ext}-%06d.tar"), maxcount=20) as w:
            for s in range(3):
                for i in range(20):
                    img = np.ascontiguousarray(photos[(s * 20 + i) % 4][i * 3:i * 3 + 200, i * 2:i * 2 + 260, :3])
                    b = io.BytesIO()
                    Image.fromarray(img).save(b, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
                    w.write({"__key__": f"s{s}-{i:03d}", ext: b.getvalue(), "cls": str(i % 7).encode()})
    precache(sorted(str(p) for p in folder.glob("jpg-*.tar")), str(folder / "tensor"), size=128, crop="center")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev")
    ap.add_argument("--outputs", action="store_true")
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kinds", help="--speed: only these (comma-separated: jpeg, jpeg-warps, tensor224, ...)")
    a = ap.parse_args()
    if not (a.outputs or a.speed):
        ap.error("give --outputs, --speed or both")
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        rev = overlay(a.rev, work)
        sides = (("before", rev), ("after", None))
        if a.outputs:
            folder = work / "plans"
            folder.mkdir()
            data(folder)
            got = {name: in_process(_PLANS, [str(folder)], path, work) for name, path in sides}
            differ = sorted(k for k in got["before"] if got["before"][k] != got["after"].get(k))
            print(f"outputs: {len(got['before'])} plans, " + ("identical" if not differ and got["before"] ==
                                                              got["after"] else f"differ: {differ}"))
        if a.speed:
            os.environ.setdefault("GPUDECODE_BENCH_OUT", str(ROOT / "bench" / "_out"))
            from gpudecode.bench.suite.loader import build
            from gpudecode.precache import precache

            shards, _ = build(1024)
            # (ColorJitter; the barrier ops: rotation, affine; torchvision's reference recipe: TrivialAugment,
            # erasing, MixUp/CutMix)
            sets = {"jpeg": shards, "jpeg-warps": shards, "jpeg-reference": shards}
            for size in (224, 256):
                out = ROOT / "bench" / "_out" / f"against-t{size}"
                if not list(out.glob("*.tar")):
                    precache(shards, str(out), size=size, crop="center")
                sets[f"tensor{size}"] = sorted(str(p) for p in out.glob("*.tar"))
            sets["precache256"] = shards
            if a.kinds:
                sets = {k: v for k, v in sets.items() if k in a.kinds.split(",")}
            best: dict = {}
            for _ in range(a.rounds):
                for kind, urls in sets.items():
                    for name, path in sides:
                        r = in_process(_SPEED, [kind, json.dumps(urls)], path, work)["img_s"]
                        best[(kind, name)] = max(best.get((kind, name), 0.0), r)
            print(f"{'':12s} {'before':>9s} {'after':>9s} {'after/before':>13s}   (img/s, best of {a.rounds} rounds)")
            for kind in sets:
                b, f = best[(kind, "before")], best[(kind, "after")]
                print(f"{kind:12s} {b:9.0f} {f:9.0f} {f / b:13.2f}")


if __name__ == "__main__":
    main()
