"""How a Loader's threads end: exhaustion, close(), `with`, Ctrl-C, an exception in the
training loop, process exit with an unfinished iterator; and that 20 epochs leave no
threads, file descriptors or memory behind."""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from gpudecode import ConcurrentIterationError, Loader
from gpudecode import transforms as T

from conftest import encode, make_shard


def is_pipeline(name: str) -> bool:
    """A Loader's or ShardReader's own threads (pools owned by decoders and the CPU kernel,
    idle between calls like torch's, are not: they go with their owner)."""
    return name in ("gpudecode-decode", "gpudecode-augment") or name.startswith("gpudecode-reader-")


def pipeline_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if is_pipeline(t.name) and t.is_alive())


def tf():
    return T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)])


@pytest.fixture(scope="module")
def shards(photos, tmp_path_factory):
    d = tmp_path_factory.mktemp("life")
    img = photos["astronaut"]
    out = []
    for j in range(4):
        samples = [{"__key__": f"k{j}{i:03d}", "jpg": encode(np.ascontiguousarray(img[i:i + 200, i:i + 260])),
                    "cls": b"%d" % (i % 3)} for i in range(24)]
        out.append(make_shard(d / f"s{j}.tar", samples))
    return out


def test_a_second_iterator_ends_the_first(shards):
    """iter(loader) while an iterator is active ends that one (as DataLoader's persistent
    workers do, and as Lightning expects: it starts a new iterator without exhausting the
    last); the old one's next() is then an error, never a batch of the new epoch."""
    ld = Loader(shards, batch_size=8, transform=tf(), device="cpu")
    it = iter(ld)
    kept = next(it)
    it2 = iter(ld)
    with pytest.raises(ConcurrentIterationError, match="started a newer one"):
        next(it)
    assert kept.images.shape[0] == 8 and not it.active and it2.active
    assert sum(b[0].shape[0] for b in it2) == 96  # the new one: a whole epoch
    it.close()
    assert sum(b[0].shape[0] for b in ld) == 96
    for _ in ld:  # break: CPython drops (and so closes) the loop's iterator at once
        break
    assert sum(1 for _ in ld) == 12
    assert pipeline_threads() == []
    ld.close()


def test_with_block_and_close_release_threads(shards):
    with Loader(shards, batch_size=8, transform=tf(), device="cpu") as ld:
        it = iter(ld)
        next(it)
        assert pipeline_threads()  # running
    assert pipeline_threads() == []
    assert not it.active
    assert sum(b[0].shape[0] for b in ld) == 96  # usable again after close: made anew
    ld.close()


def test_exception_in_the_training_loop_stops_everything(shards):
    ld = Loader(shards, batch_size=8, transform=tf(), device="cpu")
    with pytest.raises(KeyError):
        for _ in ld:
            raise KeyError("a bug in the training step")
    assert pipeline_threads() == []
    assert sum(1 for _ in ld) == 12
    ld.close()


def test_twenty_epochs_leave_nothing_behind(shards):
    import psutil  # in the [test] extra: a missing one is a broken install, not a skip
    proc = psutil.Process()
    ld = Loader(shards, batch_size=8, transform=tf(), device="cpu")

    def epoch(e):
        ld.set_epoch(e)
        assert sum(b[0].shape[0] for b in ld) == 96

    folder = os.path.dirname(shards[0])

    def shard_fds() -> list[str]:  # this Loader's open files, not whatever else the process holds
        out = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:  # closed meanwhile
                continue
            if target.startswith(folder):
                out.append(target)
        return sorted(out)

    for e in range(2):
        epoch(e)
    gc.collect()
    fds, rss = shard_fds(), proc.memory_info().rss
    for e in range(2, 22):
        epoch(e)
        assert pipeline_threads() == []  # every epoch's threads joined when it ends
    gc.collect()
    assert shard_fds() == fds  # the shards' descriptors do not pile up over epochs
    assert proc.memory_info().rss - rss < 64 << 20  # a generous bound: a leak per epoch would pass it
    ld.close()
    assert shard_fds() == []  # close() lets every shard go


SCRIPT = """
import sys, time, threading, gpudecode
from gpudecode import transforms as T
tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)])
ld = gpudecode.Loader({urls!r}, batch_size=8, transform=tf, device="cpu", remote=gpudecode.RemoteOptions(read_timeout=60))
"""


def _warm_kernel(shards) -> None:
    """SCRIPT's kernel variant compiled here, into the run's kernel cache (the scripts
    inherit GPUDECODE_CACHE_DIR): four scripts at once would each compile it (a minute
    each on 2 cores), which under a loaded CI ran past their timeout."""
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)])
    with Loader(shards, batch_size=8, transform=tf, device="cpu") as ld:
        next(iter(ld))


def _script(tmp_path, name, urls, body):
    path = tmp_path / name
    path.write_text(SCRIPT.format(urls=urls) + textwrap.dedent(body))
    return str(path)


def test_exit_with_an_unfinished_iterator_never_aborts(shards, tmp_path):
    """The process ends holding a started iterator whose threads are mid-decode: it must
    exit normally every time, however it ends (it used to abort with "terminate called
    without an active exception" in about 3 runs of 4: 8 clean runs in a row would
    happen by chance with probability 2e-5)."""
    endings = {"": 0, "sys.exit(0)": 0, "raise SystemExit(3)": 3, "raise KeyError('x')": 1}
    _warm_kernel(shards)
    paths = {end: _script(tmp_path, f"exit{i}.py", shards * 10, f"""
        it = iter(ld)
        next(it)
        {end}
        """) for i, end in enumerate(endings)}
    runs = [end for end in endings for _ in range(2)]
    for k in range(0, len(runs), 4):  # 4 processes at a time
        procs = [(end, subprocess.Popen([sys.executable, paths[end]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)) for end in runs[k:k + 4]]
        for end, p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == endings[end], (end, err[-2000:])
            assert "terminate" not in err and "Fatal Python" not in err, (end, err[-2000:])


def _sigint_latency(path, env=None, *, running=None):
    """Ctrl-C to the script once it runs its loop: once it says it took a batch, or once
    `running()` says so (e.g. the server began to stall); no sleep stands for either."""
    args = [path] if isinstance(path, str) else list(path)
    p = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = p.stdout.readline()
        assert line.startswith("ready"), line + p.stderr.read()
        if running is None:
            line = p.stdout.readline()
            assert line.startswith("looping"), line + p.stderr.read()
        else:
            assert running(), "the script never got going"
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        watchdog = threading.Timer(30, p.kill)  # a lost signal fails the test, never hangs it
        watchdog.start()
        try:
            caught = p.stdout.readline()
        finally:
            watchdog.cancel()
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert caught.startswith("caught"), caught + err
    _, t, names = caught.split(" ", 2)
    return float(t) - t0, names.strip(), p.returncode, err


SIGINT_BODY = """
    import signal
    # Python's own Ctrl-C handler, as in a terminal: a process started in the background by
    # a shell without job control inherits SIGINT ignored, and would never see it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print("ready", flush=True)
    said = False
    try:
        for epoch in range(1000):
            for b in ld:
                if not said:
                    print("looping", flush=True)
                    said = True
                time.sleep({step})
    except KeyboardInterrupt:
        t = time.monotonic()
        names = sorted(th.name for th in threading.enumerate() if th.is_alive() and (
            th.name in ("gpudecode-decode", "gpudecode-augment") or th.name.startswith("gpudecode-reader-")))
        print(f"caught {{t:.6f}} {{names}}", flush=True)
    """


def test_ctrl_c_reaches_the_loop_within_a_second(shards, tmp_path):
    path = _script(tmp_path, "sigint.py", shards * 20, SIGINT_BODY.format(step=0.15))
    latency, names, rc, err = _sigint_latency(path)
    # a watchdog (5x the README's second, for loaded CI cores): what it guards against took
    # 10 s (a reader blocked in the network) or never ended
    assert latency < 5.0 and names == "[]" and rc == 0, (latency, names, err[-2000:])


def test_ctrl_c_while_a_remote_shard_stalls(shards, tmp_path, http_server):
    """The reader is blocked in a network read (the server stopped sending mid-shard,
    read timeout 60 s): Ctrl-C still ends everything at once (it used to take 10 s and
    leave the reader and decode threads running)."""
    from httpfault import Fault

    with open(shards[0], "rb") as f:
        http_server.files["/s.tar"] = f.read()
    http_server.faults["/s.tar"] = [Fault("stall", after=40_000)]
    path = _script(tmp_path, "sigint_http.py", [http_server.url("/s.tar")], SIGINT_BODY.format(step=0.0))
    latency, names, rc, err = _sigint_latency(path, running=lambda: http_server.stalling.wait(30))
    # a watchdog (5x the README's second, for loaded CI cores): what it guards against took
    # 10 s (a reader blocked in the network) or never ended
    assert latency < 5.0 and names == "[]" and rc == 0, (latency, names, err[-2000:])


def _fork_child(q, shard_urls, what, ld, it):
    import torch

    try:
        if what == "transforms":  # the kernel's thread pool, used by the parent, in the child
            t = tf()
            imgs = [torch.zeros(3, 20, 20, dtype=torch.uint8)] * 8
            q.put(("ok", tuple(t(imgs, t.make_params([(20, 20)] * 8, 0)).shape)))
        elif what == "new loader":
            q.put(("ok", sum(b.images.shape[0] for b in Loader(shard_urls, batch_size=8, transform=tf(),
                                                               device="cpu", num_workers=2))))
        elif what == "parent's loader":  # the child's copy, iterated anew
            q.put(("ok", sum(b.images.shape[0] for b in ld)))
        elif what == "parent's iterator":
            q.put(("ok", next(it).images.shape[0]))
    except BaseException as e:  # noqa: BLE001 (reported to the parent)
        q.put(("err", f"{type(e).__name__}: {e}"))


@pytest.mark.parametrize("what", ["transforms", "new loader", "parent's loader", "parent's iterator"])
def test_forked_children_work_or_are_told(shards, what):
    """After a Loader ran in the parent (its kernel pool, decoder and reader threads
    started), a forked child (a DataLoader worker, a multiprocessing pool): the
    transforms, a new Loader and the parent's Loader iterated anew work; continuing the
    parent's iterator is refused with a clear error. (Each used to hang or corrupt.)"""
    import multiprocessing as mp

    ld = Loader(shards[:1], batch_size=8, transform=tf(), device="cpu", num_workers=2)
    assert sum(b.images.shape[0] for b in ld) == 24
    it = iter(ld)
    next(it)
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_fork_child, args=(q, shards[:1], what, ld, it))
    p.start()
    p.join(120)  # a watchdog: seconds when it works
    if p.is_alive():
        p.kill()
        pytest.fail(f"the forked child hung ({what})")
    it.close()
    status, value = q.get(timeout=10)
    if what == "parent's iterator":
        assert status == "err" and value.startswith("ConcurrentIterationError: this iterator was started in process")
        assert "start one in the child with iter(loader)" in value
    else:
        assert status == "ok", value
        assert value == ((8, 3, 32, 32) if what == "transforms" else 24)
    ld.close()


def test_the_loaders_threads_run_torch_ops_on_one_thread(shards, monkeypatch):
    """A Loader's threads run torch's CPU ops (a canvas's warp here) on themselves alone,
    as DataLoader's workers run theirs, so they do not start torch's intra-op threads
    beside the decoder's on the same cores; the trainer's thread, and threads made later,
    keep torch's count."""
    import torch

    from gpudecode.transforms import canvas

    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        pytest.skip("torch's CPU ops do not run on OpenMP here: their count is the process's")
    seen: list = []
    build = canvas.build

    def spy(*args, **kwargs):
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        return build(*args, **kwargs)

    monkeypatch.setattr(canvas, "build", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # (more than one, whatever the machine)
    try:
        rotate = T.Compose([T.RandomRotation(30), T.RandomResizedCrop(32), T.Normalize([0.5] * 3, [0.25] * 3)])
        with Loader(shards[:2], batch_size=8, transform=rotate, device="cpu", num_workers=2) as ld:
            assert sum(len(b[0]) for b in ld) == 48
        assert seen and {name for name, _ in seen} == {"gpudecode-augment"} and {n for _, n in seen} == {1}
        later: list = []
        t = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
        t.start()
        t.join()
        assert torch.get_num_threads() == 2 and later == [2]
    finally:
        torch.set_num_threads(before)


def test_two_threads_one_loader(shards, monkeypatch):
    """Two threads asking iter(loader) at the same moment: both get one, and exactly one
    of them is active (ending the older and starting the newer are one step). next() on
    one iterator from a second thread while the first waits in it is refused too; and
    close() from another thread while the loop waits for its first batch ends the loop
    cleanly. (The rule: one iterator, one thread; the README says so.)"""
    from gpudecode.decode.cpu import CpuDecoder

    ld = Loader(shards[:1], batch_size=8, transform=tf(), device="cpu", num_workers=1)
    for _ in range(10):
        barrier = threading.Barrier(2)
        got: list = []

        def claim(barrier=barrier, got=got):
            barrier.wait()
            try:
                got.append(iter(ld))
            except ConcurrentIterationError as e:
                got.append(e)

        threads = [threading.Thread(target=claim) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(got) == 2 and not any(isinstance(g, ConcurrentIterationError) for g in got), got
        live = [g for g in got if g.active]
        assert len(live) == 1, got
        ended = next(g for g in got if g is not live[0])
        with pytest.raises(ConcurrentIterationError, match="started a newer one"):
            next(ended)
        live[0].close()
    # next() from a second thread while the first is inside it
    release = threading.Event()
    real = CpuDecoder.decode

    def held(self, requests):
        release.wait(60)
        return real(self, requests)

    monkeypatch.setattr(CpuDecoder, "decode", held)
    it = iter(ld)
    out: list = []
    first = threading.Thread(target=lambda: out.append(next(it)))
    first.start()
    deadline = time.monotonic() + 60
    while not it._busy.locked() and time.monotonic() < deadline:  # until the first thread waits in next()
        time.sleep(0.001)
    with pytest.raises(ConcurrentIterationError, match="from two threads at once"):
        next(it)
    release.set()
    first.join(60)
    assert out and out[0].images.shape[0] == 8
    it.close()
    # close() from another thread while the loop waits for its first batch
    release.clear()
    it = iter(ld)
    ended: list = []

    def loop():
        try:
            ended.append(sum(1 for _ in it))
        except BaseException as e:  # noqa: BLE001
            ended.append(e)

    t = threading.Thread(target=loop)
    t.start()
    deadline = time.monotonic() + 60
    while not it._busy.locked() and time.monotonic() < deadline:
        time.sleep(0.001)
    closer = threading.Thread(target=it.close)
    closer.start()
    release.set()
    closer.join(60)
    t.join(60)
    assert len(ended) == 1 and isinstance(ended[0], int) and ended[0] <= 1, ended
    ld.close()


def test_ctrl_c_while_huge_pngs_decode_on_native_threads(tmp_path):
    """Ctrl-C while the decode thread is inside one native call decoding 16 PNGs of
    8000x8000 (about 10 s on one thread): the native threads look at the stop flag between
    rows, so the loop ends at once (it used to wait for the whole batch: 20 s and more)."""
    from gpudecode import _native

    if not _native.has_png:
        pytest.skip("this build has no libpng")
    big = np.zeros((8000, 8000, 3), np.uint8)
    big[:, :, 0] = (np.arange(8000) * 7) % 256
    big[:, :, 1] = (np.arange(8000)[:, None] * 3) % 256
    big_png, small_png = encode(big, "PNG", compress_level=1), encode(big[:40, :40], "PNG")
    samples = [{"__key__": f"k{i:03d}", "png": small_png if i < 16 else big_png, "cls": b"1"} for i in range(48)]
    shard = make_shard(tmp_path / "big.tar", samples)
    path = _script(tmp_path, "sigint_png.py", [shard], SIGINT_BODY.format(step=0.0).replace(
        'print("ready"', 'ld = gpudecode.Loader([sys.argv[1]], batch_size=16, transform=T.CenterCrop(32), '
        'device="cpu", num_threads=1, shuffle=False)\n    print("ready"'))
    latency, names, rc, err = _sigint_latency([path, shard])
    assert latency < 5.0 and names == "[]" and rc == 0, (latency, names, err[-2000:])


def test_ctrl_c_on_the_first_line_of_next_still_ends_the_threads(shards, monkeypatch):
    """Python raises KeyboardInterrupt at whatever line the main thread runs when the
    signal is handled: also the checks at the top of next(), before it waits for a batch
    (seen 1 time in 12 with a real Ctrl-C). The iterator is closed and its threads joined
    there too; the traceback (which holds the iterator) must not keep them running."""
    import types

    import gpudecode.epoch_run as loader_mod  # (where the iterator lives)

    ld = Loader(shards, batch_size=8, transform=tf(), device="cpu")
    it = iter(ld)
    next(it)
    calls = []

    def getpid() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt  # as if the signal was handled on this call
        return os.getpid()

    monkeypatch.setattr(loader_mod, "os", types.SimpleNamespace(getpid=getpid, cpu_count=os.cpu_count))
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert pipeline_threads() == [] and not it.active
    monkeypatch.undo()
    with pytest.raises(StopIteration):
        next(it)
    assert sum(b[0].shape[0] for b in ld) == 96  # the Loader goes on with a new iterator


def test_ctrl_c_while_an_epochs_threads_start_stops_them_before_the_handler_runs(shards, monkeypatch):
    """A Ctrl-C that lands in iter(loader) after the epoch's first thread started (what CI
    met once under load: the remote-stall test's handler found the decode, augment and
    reader threads alive): the threads are stopped before the caller's `except
    KeyboardInterrupt` runs, whose traceback still holds the half-made iterator."""
    from gpudecode import _threads

    real = _threads.ThreadGroup.start

    def start(self, target, *args, name):
        t = real(self, target, *args, name=name)
        if name == "augment":
            raise KeyboardInterrupt  # as if the signal landed just after the threads started
        return t

    monkeypatch.setattr(_threads.ThreadGroup, "start", start)
    ld = Loader(shards, batch_size=4, transform=T.Compose([T.Resize((16, 16))]), device="cpu")
    try:
        iter(ld)
    except KeyboardInterrupt:
        alive = [t.name for t in threading.enumerate() if t.is_alive() and t.name in
                 ("gpudecode-decode", "gpudecode-augment")]
        assert alive == []
    else:
        raise AssertionError("the KeyboardInterrupt was swallowed")
    monkeypatch.setattr(_threads.ThreadGroup, "start", real)
    assert len(list(ld)) > 0  # the Loader goes on
    ld.close()
