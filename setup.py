"""gpudecode builds with scikit-build-core (pyproject.toml: the package, `kernels/` as
`gpudecode.kernels`, and the C++ module `gpudecode._native` through CMakeLists.txt).
This file remains for tools and habits that look for one:

    python setup.py install      ->  pip install .
    python setup.py develop      ->  pip install -e .   (editable)
    python setup.py --version    ->  the version

Extras: pip install '.[gpu]' (numba-cuda, nvImageCodec, torchcodec), '.[dali]', '.[test]'.
"""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        print(re.search(r'"(.+)"', (ROOT / "gpudecode" / "_version.py").read_text()).group(1))
        return 0
    if argv[:1] in (["install"], ["develop"]):
        target = ["-e", str(ROOT)] if argv[0] == "develop" else [str(ROOT)]
        return subprocess.call([sys.executable, "-m", "pip", "install", *target, *argv[1:]])
    print(__doc__)
    return 0 if not argv else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
