"""Build gpudecode: the Python package, `kernels/` as `gpudecode.kernels`, and the
C++ module `gpudecode._native` through CMakeLists.txt (pybind11 + libjpeg-turbo)."""
import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def read_version() -> str:
    ns: dict = {}
    exec((ROOT / "gpudecode" / "_version.py").read_text(), ns)
    return ns["__version__"]


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        import pybind11

        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_temp = Path(self.build_temp).resolve() / ext.name
        build_temp.mkdir(parents=True, exist_ok=True)
        cfg = "Debug" if self.debug else "Release"
        configure = [
            "cmake", str(ROOT),
            f"-DCMAKE_BUILD_TYPE={cfg}",
            f"-DGPUDECODE_OUTPUT_DIR={out_dir}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        ]
        subprocess.run(configure, cwd=build_temp, check=True)
        jobs = str(os.cpu_count() or 2)
        subprocess.run(["cmake", "--build", ".", "--config", cfg, "-j", jobs], cwd=build_temp, check=True)


setup(
    name="gpudecode",
    version=read_version(),
    description="GPU-side image decoding and augmentation for PyTorch training",
    long_description=(ROOT / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=["gpudecode", "gpudecode.io", "gpudecode.decode", "gpudecode.kernels"],
    package_dir={"gpudecode.kernels": "kernels"},
    package_data={"gpudecode": ["py.typed", "_native.pyi"]},
    ext_modules=[CMakeExtension("gpudecode._native")],
    cmdclass={"build_ext": CMakeBuild},
    install_requires=[
        "numpy>=1.24",
        "torch>=2.4,<3",
        "torchvision>=0.19",
        "numba>=0.60",
        "numba-cuda[cu13]>=0.20",
        "nvidia-dali-cuda130>=2.0",
        "pillow>=10",
        "pyspng>=0.1.2",
        "braceexpand>=0.1.7",
        "fsspec[http]>=2023.1",
        "tqdm>=4.60",
    ],
    extras_require={
        "gpu": ["cupy-cuda13x>=13"],
        "test": ["pytest>=8", "webdataset>=0.2.90", "scikit-image>=0.22", "scipy>=1.10", "psutil>=5.9", "ruff>=0.5", "mypy>=1.8"],
    },
    entry_points={"console_scripts": ["gpudecode=gpudecode.cli:main"]},
    zip_safe=False,
)
