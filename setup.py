"""Builds the extension ps._ps with the repository's CMake build for
`pip install .` (pyproject.toml): configures a build folder for the
interpreter running pip (PS_PYTHON), builds only the `_ps` target (and
the libraries it links), and puts the module into the package. The
folder is build/pip, or $PS_PIP_BUILD_DIR."""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("PS_PIP_BUILD_DIR", os.path.join(ROOT, "build", "pip"))
        subprocess.run(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                        "-DPS_BUILD_TESTS=OFF", "-DPS_BUILD_BENCHMARKS=OFF",
                        "-DPS_PYTHON=" + sys.executable], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "_ps", "-j",
                        str(os.cpu_count() or 1)], check=True)
        built = glob.glob(os.path.join(build, "python", "ps", "_ps*.so"))
        if len(built) != 1:
            raise RuntimeError("the CMake build made %s in %s/python/ps; expected one _ps module"
                               % (built or "no module", build))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


setup(ext_modules=[Extension("ps._ps", sources=[])],
      package_data={"ps": ["*.pyi", "py.typed"]},
      cmdclass={"build_ext": CMakeBuild})
