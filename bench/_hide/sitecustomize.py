"""Hides Python packages from this interpreter, as if they were not installed: the modules
named in $GPUDECODE_HIDE (comma-separated, e.g. "nvidia.dali,torchcodec") and everything
under them raise ModuleNotFoundError on import. `make gpu-check REHEARSE=1` puts this
folder first on PYTHONPATH to run the GPU check in the shape of the GPU machine's image
(no DALI, no torchcodec) on a machine that has both."""
from __future__ import annotations

import os
import sys
from importlib.abc import MetaPathFinder

_HIDDEN = tuple(m.strip() for m in os.environ.get("GPUDECODE_HIDE", "").split(",") if m.strip())


class _Hide(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == m or name.startswith(m + ".") for m in _HIDDEN):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by GPUDECODE_HIDE)", name=name)
        return None


if _HIDDEN:
    sys.meta_path.insert(0, _Hide())
