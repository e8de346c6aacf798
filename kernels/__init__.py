"""Fused augmentation kernels (installed as gpudecode.kernels).

- `_pixel`: per-pixel math in plain Python, compiled for both targets by `_compile`
  (`_colour`: the colour math and the one-factor per-pixel ops).
- `ops`: the op table; `opgen` writes the code that follows it (op ids, the per-pixel
  dispatch). `layout`: the arrays' columns and the buffers' shapes.
- `fused`: the one face of the kernels and their launchers on arrays: `cuda_program`
  (the CUDA kernels), `cpu_passes` and `cpu_resample` (the CPU twin's passes and
  resample), `cpu_twin` (its compilation and thread pool).
- `cuda_launch`: launching on torch CUDA tensors and torch's stream.
- `reference`: a numpy version of the same math, used only as a test oracle.
"""

import numpy as _np

# numba-cuda 0.30 registers an overload of np.row_stack when its CUDA target first compiles;
# NumPy removed that alias (it guards trapz and in1d, not this one), so on a NumPy without it
# every CUDA kernel failed with AttributeError (seen on the first GPU run, NumPy >= 2.5 with
# numba-cuda 0.30.4). np.vstack is the same function; the alias is put back only where absent.
if not hasattr(_np, "row_stack"):
    _np.row_stack = _np.vstack
