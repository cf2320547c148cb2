# Extension list and compiler flags only: all logic lives in the package.
import glob
import os
import shutil
import sysconfig

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# -g0 after the interpreter's own -g: wheels carry no debug info (RMQCORE_DEBUG=1 builds keep it).
CFLAGS = ["-O3", "-g0", "-std=c11", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function"]
LDFLAGS = ["-Wl,--strip-debug"]
if os.environ.get("RMQCORE_DEBUG"):
    CFLAGS = ["-O0", "-g", "-std=c11", "-Wall"]
    LDFLAGS = []

# Dotted names under rmqcore (broker._send is rmqcore/broker/_send.pyx).
MODULES = ["_crc", "_codec", "_message", "_encoder", "_commit_log", "_pull", "_mapped_file", "_flush", "_index_file", "_dispatch", "_segment", "_schedule", "broker._send"]
HEADERS = sorted(glob.glob("include/*.h"))
PXDS = sorted(glob.glob("rmqcore/*.pxd"))

extensions = [
    Extension(
        f"rmqcore.{name}",
        [f"rmqcore/{name.replace('.', '/')}.pyx"],
        include_dirs=["include", numpy.get_include()],
        extra_compile_args=CFLAGS,
        extra_link_args=LDFLAGS,
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"), ("_GNU_SOURCE", "1")],
        depends=HEADERS + PXDS,
    )
    for name in MODULES
]


class BuildExt(build_ext):
    """Reuse a module already compiled in the source tree (an editable install or ``build_ext --inplace`` put it
    there) when it is newer than everything it is built from, so README's second install compiles nothing."""

    def build_extension(self, ext):
        built_here = os.path.join(*ext.name.split(".")) + sysconfig.get_config_var("EXT_SUFFIX")
        target = self.get_ext_fullpath(ext.name)
        inputs = list(ext.sources) + list(ext.depends) + [os.path.abspath(__file__)]
        if (not self.inplace and not os.environ.get("RMQCORE_DEBUG") and os.path.exists(built_here)
                and all(os.path.getmtime(built_here) > os.path.getmtime(p) for p in inputs if os.path.exists(p))):
            print(f"reusing {built_here} (newer than its sources)")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(built_here, target)
            return
        super().build_extension(ext)


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": 3, "embedsignature": True},
        include_path=["rmqcore"],
    ),
)
