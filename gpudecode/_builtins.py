"""numba imported as if no script had replaced a builtin.

Training scripts that copy torchvision's reference (`utils.setup_for_distributed`) replace
`builtins.print` on every rank but the first, with a function of their own module. numba,
when imported, registers every builtin by looking it up again in the module it says it
comes from (`utils.print`), finds nothing there and fails: `AttributeError: module 'utils'
has no attribute 'print'`, on every rank. gpudecode imports numba late (the kernels are
compiled on first use), so the import would come after the script's replacement. Here the
builtins as they were when gpudecode was imported are put back for the time of that import
(under a lock), then the script's are restored: numba registers Python's own print, the
script keeps its own.
"""
from __future__ import annotations

import builtins
import contextlib
import sys
import threading
from typing import Iterator

_AT_IMPORT = dict(vars(builtins))  # the builtins when gpudecode was imported
_LOCK = threading.Lock()


@contextlib.contextmanager
def as_imported() -> Iterator[None]:
    """The builtins gpudecode was imported with, for the time of the block (the ones a
    script replaced since then put back after it)."""
    with _LOCK:
        now = vars(builtins)
        changed = {k: now[k] for k, v in _AT_IMPORT.items() if k in now and now[k] is not v}
        for k in changed:
            now[k] = _AT_IMPORT[k]
        try:
            yield
        finally:
            now.update(changed)


def import_numba() -> None:
    """Imports numba (once) with the builtins gpudecode was imported with."""
    if "numba" in sys.modules:
        return
    with as_imported():
        import numba  # noqa: F401
