

def test_native_calls_timed_times_native_calls_and_restores_them():
    """The documented hook the GIL bench measures with: inside the block each call into
    the C++ module (here: header probes of a batch of PNGs, as the pipeline makes them)
    adds its time to the clock; after it gpudecode's functions are its own again."""
    import io

    import numpy as np
    from PIL import Image

    from gpudecode import _native
    from gpudecode.kernels import fused
    from gpudecode.profiling import NativeClock, native_calls_timed

    buf = io.BytesIO()
    Image.fromarray(np.zeros((64, 80, 3), np.uint8)).save(buf, "PNG")
    items = [buf.getvalue()] * 2000
    before, kernel = _native.probe_sizes, fused.cpu_kernel
    clock = NativeClock()
    with native_calls_timed(clock):
        assert _native.probe_sizes is not before
        got = _native.probe_sizes(items)
    assert clock.seconds > 0 and got[0][1:] == (64, 80)
    assert _native.probe_sizes is before and fused.cpu_kernel is kernel
    seconds = clock.seconds
    _native.probe_sizes(items)  # outside the block: not timed
    assert clock.seconds == seconds
