"""Who owns what (issue 37): the Loader is configuration, state and two threads; nothing
outside loader.py touches its private names (tests included), the Loader class stays
within 300 lines, and its phase is one value (gpudecode.cursor). ruff's SLF001 (in `make
test`) keeps loader.py and every other library module out of other modules' privates."""
from __future__ import annotations

import ast
import pathlib
import warnings

import pytest

from gpudecode.cursor import STATE_FORMAT, Cursor, Phase

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOADER = ROOT / "gpudecode" / "loader.py"


def _loader_class() -> ast.ClassDef:
    tree = ast.parse(LOADER.read_text())
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Loader")


def _private_names(cls: ast.ClassDef) -> set[str]:
    """The Loader's own underscored names: methods and attributes set on self."""
    names = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.Assign)) and hasattr(n, "name")}
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_nothing_outside_loader_py_touches_the_loaders_private_names():
    private = _private_names(_loader_class())
    assert {"_pipe", "_active", "_iter_lock"} <= private  # (the scan sees what the class keeps)
    found = []
    for top in ("gpudecode", "kernels", "bench", "examples", "tests"):
        for path in (ROOT / top).rglob("*.py"):
            if path == LOADER:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute) and node.attr in private and not (
                        isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    assert not found, "reach-ins into the Loader:\n" + "\n".join(found)


def test_the_loader_class_is_at_most_300_lines():
    cls = _loader_class()
    assert cls.end_lineno - cls.lineno + 1 <= 300


def test_the_cursor_phases_as_the_module_doc_says():
    c = Cursor()
    assert (c.phase, c.next_epoch()) == (Phase.READY, 0)
    s = c.start()
    assert (c.phase, s.epoch, s.position, s.run) == (Phase.RUNNING, 0, 0, 1)
    c.on_batch(s.run, 8)
    c.on_batch(s.run + 1, 99)  # another run's report: nothing
    assert (c.position, c.yielded) == (8, 1)
    assert c.next_epoch() == 1  # a dropped iterator: the next iteration is the next epoch
    c.on_end(s.run)
    assert c.finished and c.next_epoch() == 1
    saved = c.to_state({"seed": 1})
    assert saved["dataset_state"]["format"] == STATE_FORMAT and saved["_iterator_finished"]
    c.choose(3)  # after an end: f from its beginning, no warning
    assert (c.phase, c.epoch, c.position, c.yielded, c.finished) == (Phase.READY, 3, 0, 0, False)
    c.resume(3, position=12, yielded=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c.choose(3)  # the same epoch keeps the loaded place
    assert (c.phase, c.position) == (Phase.RESUMING, 12)
    with pytest.warns(RuntimeWarning, match=r"set_epoch\(4\) .* 3 batches into epoch 3"):
        c.choose(4)
    s = c.start()
    assert (s.epoch, s.position, s.yielded) == (4, 0, 0)
    other = Cursor()
    with pytest.raises(ValueError, match="seed=1, this loader has seed=2"):
        other.from_state(saved, [("seed", 2)])
    other.from_state(saved, [("seed", 1)])
    assert (other.phase, other.epoch) == (Phase.READY, 1)
    with pytest.raises(ValueError, match="not a gpudecode Loader state"):
        Cursor.saved({"dataset_state": {"format": "another"}})


def _photo_shard(tmp_path, photos, n=48):
    from conftest import encode, make_shard

    names = list(photos)
    samples = [{"__key__": f"{i:03d}", "jpg": encode(photos[names[i % len(names)]][:200, :240]), "cls": b"1"}
               for i in range(n)]
    return make_shard(tmp_path / "ws.tar", samples)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "elastic-after"])
def test_no_buffer_is_made_per_launch_after_the_first_batch(tmp_path, photos, monkeypatch, dtype):
    """The kernel's buffers are declared (kernels.workspace) and held by the Loader's
    pipeline, one workspace per view: over the ten batches after the first nothing is made,
    neither by the workspaces nor by the kernels' own numpy calls (counted here). float16
    and bfloat16 go through the float32 staging the kernels need (numba has no such stores); an
    ElasticTransform after the crop through the float images it warps."""
    import numpy as np
    import torch

    from gpudecode import Loader
    from gpudecode import transforms as T
    from gpudecode.kernels import cpu_twin

    made: list[tuple] = []

    class CountingNumpy:  # the kernels' numpy, every np.empty counted
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def empty(shape, *args, **kw):
            made.append(tuple(np.atleast_1d(shape)))
            return np.empty(shape, *args, **kw)

    steps = [T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
             T.RandomEqualize(1.0), T.Normalize([0.5] * 3, [0.25] * 3)]
    if dtype in ("float16", "bfloat16"):
        steps.append(T.ToDtype(getattr(torch, dtype)))
    if dtype == "elastic-after":
        steps[3:4] = [T.ElasticTransform(20.0, 2.0)]  # (in place of the equalize: it comes last)
    ld = Loader(_photo_shard(tmp_path, photos), batch_size=4, transform=T.Compose(steps), device="cpu", seed=3,
                num_workers=2)
    it = iter(ld)
    next(it)
    before = [ws.made for ws in ld.pipeline.ring.workspaces]
    assert all(before), "the first batch made the workspace's buffers"
    monkeypatch.setattr(cpu_twin, "np", CountingNumpy())  # (where fused_cpu makes its rows)
    for _ in range(10):
        next(it)
    it.close()
    assert [ws.made for ws in ld.pipeline.ring.workspaces] == before
    assert not made, made  # no work rows, no staging made per launch


@pytest.mark.parametrize("case", ["base", "barriers", "trivial", "identity", "bicubic-float16"])
def test_the_cpu_kernel_allocates_nothing_a_sample(photos, case):
    """The CPU twin's per-sample scratch (the axes' filter weights and indices, the
    program's statistic, tables and histogram, a blur's padded row) is the workspace's,
    declared by reserve_cpu: numba's runtime counts the same allocations for a launch of
    2 samples as for one of 16 (those of the call itself: its array arguments' wrappers),
    and the workspace makes nothing after the first launch."""
    import numpy as np
    import torch
    from numba.core.runtime import _nrt_python, rtsys  # (numba's own allocation counters)

    from gpudecode import transforms as T
    from gpudecode.kernels import fused
    from gpudecode.kernels.workspace import Workspace

    norm = T.Normalize([0.5] * 3, [0.25] * 3)
    steps = {"base": [T.RandomResizedCrop(64), T.RandomHorizontalFlip(), norm],
             "barriers": [T.RandomResizedCrop(64), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomEqualize(1.0),
                          T.RandomAutocontrast(1.0), T.RandomAdjustSharpness(2.0, 1.0), T.GaussianBlur(5, 1.5),
                          T.RandomRotation(20), norm],
             "trivial": [T.RandomResizedCrop(64), T.TrivialAugmentWide(), norm],
             "identity": [T.CenterCrop(64), norm],
             "bicubic-float16": [T.RandomResizedCrop(64, interpolation="bicubic"), norm, T.ToDtype(torch.float16)],
             }[case]
    tf = T.Compose(steps)
    img = photos["astronaut"][::2, ::2]
    h, w = img.shape[:2]
    packed = torch.from_numpy(np.concatenate([img.reshape(-1)] * 16))
    enabled = _nrt_python.memsys_stats_enabled()
    _nrt_python.memsys_enable_stats()
    try:
        def launch(seed: int, n: int, view, ws) -> None:
            sizes = [(h, w)] * n
            geom, f, o = tf.encode(tf.make_params(sizes, seed), sizes)
            geom[:, fused.OFFSET] = np.arange(n) * h * w * 3
            geom[:, fused.SY], geom[:, fused.SX], geom[:, fused.SC] = w * 3, 3, 1
            tf.run(packed, geom, f, o, view, num_threads=1, workspace=ws)

        counts, made = {}, {}
        for n in (2, 16):
            out, view = tf.new_output(n)
            ws = Workspace()
            fused.reserve_cpu(ws, 1, w, tuple(view.shape), max(h, w))
            launch(0, n, view, ws)
            first, before = ws.made, rtsys.get_allocation_stats().alloc
            for seed in range(1, 11):  # ten launches after the first
                launch(seed, n, view, ws)
            counts[n], made[n] = rtsys.get_allocation_stats().alloc - before, ws.made - first
    finally:
        if not enabled:
            _nrt_python.memsys_disable_stats()
    assert counts[2] == counts[16], counts
    assert made == {2: 0, 16: 0}, made


def test_a_workspace_grows_by_half_again_and_keeps_its_memory():
    import numpy as np

    from gpudecode.kernels.workspace import Workspace

    ws = Workspace()
    a = ws.array("w", (2, 100))
    b = ws.array("w", (2, 90))  # smaller: a view of the same memory
    assert b.base is a.base and ws.made == 1
    c = ws.array("w", (2, 120))  # larger: made again, half as large again (300 elements)
    assert ws.made == 2 and c.base.size == 300 and ws.array("w", (3, 100)).base is c.base
    assert ws.array("w", (2, 90), np.int32).dtype == np.int32 and ws.made == 3  # another dtype: its own


def test_a_packed_upload_sends_each_part_as_it_is_and_keeps_its_views():
    """Workspace.upload_packed (a CUDA launch's per-sample arrays in one copy), on the CPU:
    each part arrives equal to numpy's array (any dtype, a strided one too) at its own
    ALIGN-byte start of one buffer; the same parts again reuse the buffer and the views'
    converted forms; more bytes make the buffer again, and the views with it."""
    import numpy as np

    from gpudecode.kernels.workspace import ALIGN, Workspace

    rng = np.random.default_rng(0)

    def parts(n: int) -> list[np.ndarray]:
        return [rng.integers(-2**40, 2**40, (n, 20)), rng.random((n, 3, 4), np.float32),
                rng.integers(-1, 9, (n, 5)).astype(np.int32), np.arange(3, dtype=np.float32),
                rng.random((4, n)).T, np.zeros(0, np.float32)]

    ws, seen = Workspace(), []

    def convert(t):
        seen.append(tuple(t.shape))
        return t.numpy()

    first = None
    for n in (8, 8, 5, 40):
        sent = parts(n)
        got = ws.upload_packed("p", sent, "cpu", convert=convert)
        plain = ws.upload_packed("q", sent, "cpu")
        buf = ws._tensors[("p", "cpu")]
        for a, g, t in zip(sent, got, plain):
            np.testing.assert_array_equal(g, a)
            np.testing.assert_array_equal(t.numpy(), a)
            assert g.dtype == a.dtype and (a.size == 0 or (g.ctypes.data - buf.data_ptr()) % ALIGN == 0)
        if first is None:
            first = (ws.made, list(seen))
        elif n == 8:  # the same shapes again: nothing made, nothing converted
            assert (ws.made, seen) == first
    assert len(seen) > 6 and ws._tensors[("p", "cpu")].numel() >= 40 * 20 * 8


def _smaps(address: int, field: str) -> str | None:
    """The `field` line's value (after its name) in /proc/self/smaps for the mapping of this
    process that holds `address` (None: no such mapping)."""
    lines = pathlib.Path("/proc/self/smaps").read_text().splitlines()
    inside = False
    for line in lines:
        head = line.split()
        if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            inside = lo <= address < hi
        elif inside and line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return None


def _huge_kib(address: int) -> int | None:
    """AnonHugePages (KiB) of the mapping that holds `address` (None: no such mapping)."""
    got = _smaps(address, "AnonHugePages")
    return None if got is None else int(got.split()[0])


def test_large_host_buffers_are_advised_into_huge_pages(monkeypatch):
    """kernels.workspace.huge_pages: a batch output on the CPU (Compose.new_output), a large
    workspace array and the CPU decoder's ring come in 2 MiB pages where the kernel gives
    them to madvised memory (their first touch: a fault per 2 MiB); small, pinned and
    strided memory are left alone, and all of it with GPUDECODE_HUGE_PAGES=0; the memory's
    contents and identity are the caller's."""
    import numpy as np
    import torch

    from gpudecode import transforms as T
    from gpudecode.decode.cpu import CpuDecoder
    from gpudecode.kernels.workspace import HUGE_FROM, Workspace, huge_pages

    mode = pathlib.Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not mode.exists() or "[never]" in mode.read_text():
        pytest.skip("this kernel gives no transparent huge pages")
    small = np.empty(HUGE_FROM // 2, np.uint8)
    assert huge_pages(small) is small
    strided = np.empty((HUGE_FROM, 2), np.uint8)[:, 0]
    assert huge_pages(strided) is strided  # (left alone: not one run of memory)
    out, view = T.Compose([T.CenterCrop(224), T.Normalize([0.5] * 3, [0.2] * 3)]).new_output(64)
    arr = Workspace().array("w", (8 << 20,), np.float32)
    dec = CpuDecoder()
    ring = dec._next_buffer(16 << 20)
    given = 0
    for t in (out.view(-1), torch.from_numpy(arr), torch.from_numpy(ring)):
        t.view(torch.uint8).fill_(7)  # (the first touch)
        middle = t.data_ptr() + t.numel() * t.element_size() // 2  # (its first and last pages: 4 KiB ones)
        # advised (the mapping's "hg" flag): ours; given 2 MiB pages at the touch: the kernel's, best effort (a
        # machine whose memory is fragmented by a parallel test run may give 4 KiB ones)
        assert "hg" in (_smaps(middle, "VmFlags") or "").split(), t.numel()
        given += (_huge_kib(middle) or 0) >= 2048
        assert int(t.view(torch.uint8)[:: 1 << 20].min()) == 7
    print(f"{given} of 3 buffers in 2 MiB pages")
    dec.close()
    monkeypatch.setenv("GPUDECODE_HUGE_PAGES", "0")  # (turned off: left in 4 KiB pages)
    import mmap

    import gpudecode._native

    advised = []
    monkeypatch.setattr(gpudecode._native, "huge_pages", lambda m: advised.append(m))
    # a fresh mapping (torch.empty may reuse memory an earlier test advised, and be huge already)
    fresh = mmap.mmap(-1, 8 << 20)
    off = huge_pages(torch.from_numpy(np.frombuffer(fresh, np.uint8))).fill_(1)
    assert _huge_kib(off.data_ptr() + (4 << 20)) == 0 and advised == []
    del off


def _import_graph() -> dict[str, set[str]]:
    """gpudecode's modules (kernels/ as gpudecode.kernels) -> the modules each imports,
    anywhere in it (a function's lazy import too; a TYPE_CHECKING block's not), from the
    source tree."""

    root = pathlib.Path(__file__).resolve().parents[1]
    mods: dict[str, pathlib.Path] = {}
    for base, pkg in ((root / "gpudecode", ("gpudecode",)), (root / "kernels", ("gpudecode", "kernels"))):
        for p in base.rglob("*.py"):
            parts = pkg + p.relative_to(base).with_suffix("").parts
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        tree = ast.parse(p.read_text())
        typing_only = {id(sub) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in
                       ast.dump(node.test) for stmt in node.body for sub in ast.walk(stmt)}  # (not its else)
        here = m.split(".") if p.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom):
                base_parts = here[:len(here) - node.level + 1] if node.level else []
                target = ".".join(base_parts + ([node.module] if node.module else []))
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                found = subs if len(subs) == len(node.names) else [target, *subs]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            edges[m] |= {t for t in found if t in mods and t != m and not m.startswith(t + ".")}
    return edges


def test_no_import_circle():
    """No module imports one that imports it back, at any depth, lazily or not (issue 54:
    io/assembly <-> io/counts, transforms/draws <-> plan, transforms/convert -> the package
    were the last): each module's place in the layers is one."""
    edges = _import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append({a: sorted(b for b in edges[a] if b in comp) for a in sorted(comp)})

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert len(edges) > 80 and not circles, circles


LAYERS = [  # ARCHITECTURE.md's layers, lowest first: (package prefixes or modules) a layer
    ("errors", "_args", "_builtins", "_cache", "_text", "_threads", "_version", "_native", "labels", "tensors",
     "plots", "_report", "_record"),
    ("kernels",),
    ("io", "_manifest"),
    ("decode", "_probe"),
    ("transforms", "mixing", "_ops_table"),
    ("pipeline", "batches", "sinks", "streams", "resident", "stats", "cursor", "dataset", "folder", "planning", "fields",
     "vision_sets", "own_sets"),
    ("loader", "loader_setup", "epoch_run", "precache", "profiling", "cli", "demo", "bench", ""),
]


def _layer(module: str) -> int:
    name = module.split(".", 1)[1] if "." in module else ""
    top = name.split(".")[0]
    for k, names in enumerate(LAYERS):
        if top in names:
            return k
    raise AssertionError(f"{module} is in no layer of ARCHITECTURE.md's: add it there and to LAYERS")


def test_no_module_imports_from_a_layer_above_its_own():
    """ARCHITECTURE.md's layers hold (issue 54: at most 6 imports upward; none now): each
    import, lazy ones included, goes to the module's own layer or below."""
    import re

    edges = _import_graph()
    up = sorted((a, b) for a, bs in edges.items() for b in bs if _layer(a) < _layer(b))
    assert len(edges) > 80 and not up, up
    text = (pathlib.Path(__file__).resolve().parents[1] / "ARCHITECTURE.md").read_text()
    rows = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d)\. [^|]+\| (.+) \|$", text, re.M)}
    assert sorted(rows) == list(range(len(LAYERS)))
    for k, names in enumerate(LAYERS):  # (the document's table says the same)
        assert all(re.search(rf"\b{re.escape(n)}\b", rows[k]) for n in names if n), (k, rows[k])


def test_every_file_architecture_md_names_exists():
    """ARCHITECTURE.md true to the code: each file it names (a path, or a module's name
    within its package) is there."""
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    text = (root / "ARCHITECTURE.md").read_text()
    named = sorted({n.lstrip("/") for n in re.findall(r"[A-Za-z0-9_/]+\.py\b", text)})
    everywhere = [p.relative_to(root).as_posix() for d in ("gpudecode", "kernels", "tests", "bench")
                  for p in (root / d).rglob("*.py")]
    missing = [n for n in named if not any(p == n or p.endswith("/" + n) for p in everywhere)]
    assert len(named) > 30 and not missing, missing
