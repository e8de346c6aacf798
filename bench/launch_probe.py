"""What one launch of the fused kernel costs the host (issue 55's CIFAR target: at 1,000,000
img/s a batch of 1024 leaves the host 1 ms for its whole step, the launch included).

    python bench/launch_probe.py [--batch 1024] [--size 32] [--repeats 200]

The CIFAR recipe (RandomCrop(32, padding=4) + flip + Normalize) on a packed batch of
--batch random --size images on the device, as a resident epoch launches it; each row the
median host time of one call, over --repeats calls, nothing synchronized in between:

- the launch's eleven array arguments made as kernels/cuda_launch.py makes them
  (`launch_arrays`: the six small arrays in one packed copy, the workspace's views and
  their numba wrappers kept from launch to launch), against the same work done as it was
  before (each small array its own staging and copy, every one of the eleven tensors
  converted by numba's `as_cuda_array` at every launch: the buffers kept as then);
- on a GPU, the pieces: one `as_cuda_array`, one `cuda.external_stream`, the device
  contexts a launch enters, the kernels' dispatch with the arguments ready, and the whole
  launch (`Compose.run` with the Loader's workspace), with the GPU's own time per launch
  (CUDA events over the same launches): whether the host or the GPU binds.

Without CUDA the first two rows run on CPU tensors (numpy arrays as the conversion, as the
CUDA simulator's tests use them) and it says so: no GPU figure is made up. Prints a table
and one line of JSON.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable


def timed(fn: Callable[[], object], repeats: int) -> float:
    """The median of `repeats` calls' host times, microseconds (after 5 calls unmeasured)."""
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def probe(batch: int, size: int, repeats: int) -> dict:
    import numpy as np
    import torch

    from gpudecode import transforms as T
    from gpudecode.kernels import cuda_launch, fused
    from gpudecode.kernels.workspace import Workspace

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    mean = np.array([0.4914, 0.4822, 0.4465], np.float32)
    std = np.array([0.2470, 0.2435, 0.2616], np.float32)
    tf = T.Compose([T.RandomCrop(size, padding=4), T.RandomHorizontalFlip(), T.Normalize(mean.tolist(), std.tolist())])
    sizes = [(size, size)] * batch
    geom, args, order = tf.encode(tf.make_params(sizes, 0), sizes)
    geom[:, fused.OFFSET] = np.arange(batch) * size * size * 3
    geom[:, fused.SY], geom[:, fused.SX], geom[:, fused.SC] = size * 3, 3, 1
    if args.ndim == 2:
        args = fused.step_args(args, order)
    src = torch.randint(0, 256, (batch * size * size * 3,), dtype=torch.uint8, device=dev)
    out, view = tf.new_output(batch, dev)
    if cuda:
        from numba import cuda as nb

        convert: Callable = nb.as_cuda_array
    else:
        def convert(t):
            return t.numpy()

    ws = Workspace()
    before = Workspace()
    copied: list = []

    def as_before() -> None:
        """The launch's arguments made as before this probe's change (kernels/cuda_launch.py
        at 47894ea): a staging and a copy for each small array, eleven conversions."""
        from gpudecode.kernels.ops import AUX_MASK, HISTOGRAM_MASK, has

        levels = fused.barrier_levels(order)
        equalize = bool(has(order, HISTOGRAM_MASK).any())
        ups = []
        if copied:
            copied.pop().synchronize()  # (the last copy out of the pinned buffers done)
        for name, x in (("geom", geom), ("args", args), ("order", order), ("mean", mean), ("std", std),
                        ("stats", fused.stats_init(batch, levels))):
            x = np.ascontiguousarray(x)
            staged = before.tensor(name + "/host", x.shape, torch.from_numpy(x[:0]).dtype, "cpu", pin_memory=cuda)
            staged.numpy()[...] = x
            d = before.tensor(name, x.shape, staged.dtype, dev)
            d.copy_(staged, non_blocking=True)
            ups.append(d)
        if cuda:
            copied.append(torch.cuda.Event())
            copied[0].record()
        scratch = before.tensor("scratch", fused.scratch_shape(batch, levels, size, size), torch.float32, dev)
        hist = before.tensor("hist", fused.hist_shape(batch, levels, equalize), torch.int32, dev, zero=True)
        aux = before.tensor("aux", fused.aux_shape(batch, bool(has(order, AUX_MASK).any()), size, size),
                            torch.float32, dev)
        [convert(t) for t in (src, *ups[:5], view, scratch, ups[5], hist, aux)]

    def now() -> None:
        cuda_launch.launch_arrays(src, geom, args, order, mean, std, view, ws, convert)

    rows = {"arguments made as before (six copies, eleven conversions)": timed(as_before, repeats),
            "arguments made now (launch_arrays: one copy, two conversions)": timed(now, repeats)}
    report: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu (no CUDA device: no GPU figure)",
                    "batch": batch, "size": size, "repeats": repeats}
    if cuda:
        from numba import cuda as nb

        index = torch.cuda.current_device()
        stream = torch.cuda.current_stream()
        rows["one as_cuda_array"] = timed(lambda: nb.as_cuda_array(view), repeats)
        rows["one cuda.external_stream"] = timed(lambda: nb.external_stream(stream.cuda_stream), repeats)

        def contexts() -> None:
            with torch.cuda.device(index), nb.gpus[index]:
                pass

        rows["the device contexts a launch enters"] = timed(contexts, repeats)
        arrays, levels = cuda_launch.launch_arrays(src, geom, args, order, mean, std, view, ws, convert)
        nb_stream = nb.external_stream(stream.cuda_stream)
        rows["the kernels' dispatch, arguments ready"] = timed(
            lambda: fused.fused_cuda(*arrays[:7], normalize=True, stream=nb_stream, scratch=arrays[7], stats=arrays[8],
                                     hist=arrays[9], aux=arrays[10], levels=levels), repeats)
        launch = Workspace()

        def whole() -> None:
            tf.run(src, geom, args, order, view, workspace=launch)

        rows["the whole launch (Compose.run, the Loader's workspace)"] = timed(whole, repeats)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t = time.perf_counter()
        start.record()
        for _ in range(repeats):
            whole()
        end.record()
        end.synchronize()
        wall = (time.perf_counter() - t) / repeats * 1e6
        report["gpu_us_a_launch"] = start.elapsed_time(end) * 1e3 / repeats
        report["wall_us_a_launch"] = wall
    report["host_us"] = rows
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=200)
    a = p.parse_args(argv)
    r = probe(a.batch, a.size, a.repeats)
    print(f"launch probe on {r['device']}: batch {a.batch} of {a.size}x{a.size}, median of {a.repeats} calls")
    for name, us in r["host_us"].items():
        print(f"  {name:<66} {us:9.1f} us")
    if "gpu_us_a_launch" in r:
        print(f"  a launch's GPU time {r['gpu_us_a_launch']:.1f} us; launches back to back {r['wall_us_a_launch']:.1f} "
              "us each (the larger binds)")
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
