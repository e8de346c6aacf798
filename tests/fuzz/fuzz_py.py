#!/usr/bin/env python3
"""atheris entry point for the Python fuzz targets of harness.py:

    python tests/fuzz/fuzz_py.py TARGET [libFuzzer flags] [corpus dirs]

TARGET is one of harness.TARGETS. gpudecode's own modules are instrumented for coverage."""
from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# numba compiles the kernels from their bytecode, which must not carry atheris's tracing
# calls (a cold numba cache failed every png_halves input with a TypingError): imported
# first, they stay as written (the CPU twin's too: the boxes target's ElasticTransform blurs
# its field with it)
import gpudecode.kernels.png  # noqa: E402,F401
import gpudecode.kernels.cpu_passes  # noqa: E402,F401
import gpudecode.kernels.cpu_twin  # noqa: E402,F401

# (Pillow's PNG chunk reader too: the mask target's PNGs go through it after the PNG walker)
with atheris.instrument_imports(include=["gpudecode", "PIL.PngImagePlugin"]):
    import gpudecode.io.reader  # noqa: F401
    import gpudecode.io.shards  # noqa: F401
    import gpudecode.io.tario  # noqa: F401
    import gpudecode.labels  # noqa: F401
    import gpudecode.tensors  # noqa: F401
    import gpudecode._probe  # noqa: F401
    import gpudecode.decode.cpu  # noqa: F401
    import gpudecode.decode.png  # noqa: F401
    import gpudecode.io.parquet  # noqa: F401
    import gpudecode.fields  # noqa: F401
    import gpudecode.transforms.boxes  # noqa: F401
    import gpudecode.transforms.warped  # noqa: F401
    import gpudecode._record  # noqa: F401
    import gpudecode.transforms.stored  # noqa: F401
    import PIL.PngImagePlugin  # noqa: F401

import harness  # noqa: E402


def main() -> None:
    # The target travels in the environment: libFuzzer re-runs this command line for
    # -merge and -fork, and would take a bare name for a corpus directory.
    if len(sys.argv) > 1 and sys.argv[1] in harness.TARGETS:
        os.environ["GPUDECODE_FUZZ_TARGET"] = sys.argv.pop(1)
    name = os.environ.get("GPUDECODE_FUZZ_TARGET")
    if name not in harness.TARGETS:
        sys.exit(f"usage: fuzz_py.py {{{'|'.join(harness.TARGETS)}}} [libFuzzer flags] [corpus dirs]")
    atheris.Setup(sys.argv, getattr(harness, name))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
