"""Fused augmentation kernels (installed as gpudecode.kernels).

- `_pixel`: per-pixel math in plain Python, compiled for both targets by `_compile`.
- `fused`: the CUDA kernels, the CPU twin and their launchers on arrays.
- `cuda_launch`: launching on torch CUDA tensors and torch's stream.
- `reference`: a numpy version of the same math, used only as a test oracle.
"""
