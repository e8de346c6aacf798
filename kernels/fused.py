"""The fused augment kernel: crop + antialiased resize + flip, then each sample's program
of ops (ColorJitter's four, grayscale, solarize, invert, posterize, autocontrast, equalize,
sharpness, Gaussian blur, affine warps) + Normalize.

Data layout, shared by both targets:
    src      uint8 [total]     every image of the batch, packed; sample n starts at
                               geom[n, OFFSET] and pixel (y, x, c) is at
                               offset + y*SY + x*SX + c*SC (HWC or CHW, by strides)
    geom     int64 [N, GEOM]   per-sample geometry (columns named below)
    args     float32 [N, K, ARGS]  step k's arguments (the op table, kernels/ops.py, says what they mean)
    order    int32 [N, K]      op ids in application order, -1 after the last
    mean,std float32 [3]       Normalize
    out      [N, 3, H, W]      float32/float16/uint8; any strides (NHWC is a view)
(`factors` float32 [N, NUM_OPS] by op id, the older form, is still taken: see step_args.)

Geometry: the box (TOP, LEFT, BH, BW) of the source is resized to (VH, VW) and the
output is the window at (OY, OX) of that resized image (the fill outside it, as
torchvision's padding CenterCrop; or, PAD, the frame's edge or a reflection of it, as a
RandomCrop's padding_mode): RandomResizedCrop is box=crop, V=out size, O=0;
Resize+CenterCrop is box=whole image, V=resized size, O=crop offset. FLIP mirrors x,
VFLIP mirrors y (of the output: torchvision flips the transformed image). OH, OW (when
set): the sample's own output size, at the top-left of the batch's, which is zero around
it (a batch of images of their own sizes); every op, flip and statistic sees that size.

A program is cut at its barrier ops (the op table's barrier flag: they read the whole
image or a neighbourhood of the image before them). On CUDA, kernel 1 resamples and runs the ops
up to the first barrier; kernel 2, launched once per barrier level s = 1, 2, ..., runs
barrier s and the per-pixel ops after it. Between them the image sits in a float32
scratch (two, alternating) and the statistic the next barrier needs (grey sum, channel
min and max, histograms: the op table's statistic) is reduced per block and added atomically. A sample whose
program ends in a launch writes its output there; later launches skip it.

The kernel's parts, one module each: layout.py (the columns, arguments and buffers'
shapes above), cuda_program.py (the CUDA kernels and their launch on arrays),
cpu_passes.py and cpu_resample.py (the CPU twin's passes, its interpreter and its
resample), cpu_twin.py (its compilation and its launch on a pool of threads), _pixel.py
(the per-pixel formulas both targets share), _barrier.py (the barrier ops' formulas, both
targets') and ops.py (the op table). This module is
their one face: what the launchers and the tests import.
"""
from __future__ import annotations

from ._compile import first_use
from .cpu_twin import axis_taps, cpu_kernel, cpu_stages, cpu_work_shape, fused_cpu, reserve_cpu
from .cuda_program import compile_ptx_all, cuda_kernels, fused_cuda
from .layout import (BH, BW, FILTER, FILLB, FILLG, FILLR, FLIP, GEOM, GEOM_NAMES, LEFT, OFFSET, OH, OW, OX, OY, PAD, SC, STATS,
                     SX, SY, THREADS_PER_BLOCK, TOP, VFLIP, VH, VW, H, W, aux_shape, barrier_levels, hist_shape,
                     launch_geometry, own_sizes, scratch_shape, stats_init, step_args)
from ._pixel import ARGS

__all__ = ["first_use", "axis_taps", "cpu_kernel", "cpu_stages", "cpu_work_shape", "fused_cpu", "reserve_cpu", "compile_ptx_all",
           "cuda_kernels", "fused_cuda", "BH", "BW", "FILTER", "FILLB", "FILLG", "FILLR", "FLIP", "GEOM", "GEOM_NAMES",
           "LEFT", "OFFSET", "OH", "OW", "OX", "OY", "PAD", "SC", "STATS", "SX", "SY", "THREADS_PER_BLOCK", "TOP", "VFLIP", "VH", "VW",
           "H", "W", "aux_shape", "barrier_levels", "hist_shape", "launch_geometry", "own_sizes", "scratch_shape", "stats_init",
           "step_args", "ARGS"]
