"""Builds the longseq Python package with the project's own CMake (docs/python.md).

    python3 -m venv --system-site-packages venv && venv/bin/pip install --no-build-isolation .

The extension is CMake's `longseq_python` target, built in build-pip/ (kept between installs, so
a second install only relinks) for the interpreter running this script; the package directory
CMake assembles (build-pip/python/longseq) is copied whole into the wheel, with the presets,
hardware profiles and default corpus the planner and trainer read (longseq/data). Needs what
scripts/setup.sh installs: a C++20 compiler, CMake, pybind11-dev, libdlpack-dev and the engine's
libraries. LONGSEQ_CMAKE_ARGS adds CMake arguments (e.g. -DLONGSEQ_CUDA=OFF).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(ROOT, "build-pip"), exist_ok=True)  # setuptools' trees go there


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(longseq .*VERSION ([0-9.]+)\)", f.read()).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("LONGSEQ_PIP_BUILD_DIR", os.path.join(ROOT, "build-pip"))
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        cfg = ["cmake", "-S", ROOT, "-B", build, *gen, "-DCMAKE_BUILD_TYPE=Release",
               f"-DPython3_EXECUTABLE={sys.executable}", "-DLONGSEQ_PYTHON=ON",
               "-DLONGSEQ_BUILD_TESTS=OFF", "-DLONGSEQ_BUILD_BENCH=OFF",
               *shlex.split(os.environ.get("LONGSEQ_CMAKE_ARGS", ""))]
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")) or \
                os.environ.get("LONGSEQ_CMAKE_ARGS"):
            subprocess.check_call(cfg)
        subprocess.check_call(["cmake", "--build", build, "-j", str(os.cpu_count() or 1),
                               "--target", "longseq_python"])
        # The whole package CMake assembled, beside where setuptools wants the extension.
        dest = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        src = os.path.join(build, "python", "longseq")
        os.makedirs(dest, exist_ok=True)
        for name in os.listdir(src):
            if name.endswith(".py") or name.startswith("_core"):
                shutil.copy2(os.path.join(src, name), os.path.join(dest, name))
        data = os.path.join(dest, "data")
        shutil.rmtree(data, ignore_errors=True)
        for sub in ("presets", "hardware"):
            shutil.copytree(os.path.join(ROOT, "data", sub), os.path.join(data, sub))
        shutil.copy2(os.path.join(ROOT, "data", "kjv-genesis-exodus.txt"), data)


setup(
    version=version(),
    packages=["longseq"],
    package_dir={"longseq": "python/longseq"},
    ext_modules=[Extension("longseq._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' own build tree out of build/, which is CMake's.
    options={"build": {"build_base": os.path.join("build-pip", "setuptools")},
             "egg_info": {"egg_base": "build-pip"}},
    zip_safe=False,
)
