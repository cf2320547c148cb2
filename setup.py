# Extension list and compiler flags only: all logic lives in the package.
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

CFLAGS = ["-O3", "-std=c11", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function"]
if os.environ.get("RMQCORE_DEBUG"):
    CFLAGS = ["-O0", "-g", "-std=c11", "-Wall"]

MODULES = ["_crc", "_codec", "_mapped_file", "_flush", "_index_file", "_dispatch", "_segment"]

extensions = [
    Extension(
        f"rmqcore.{name}",
        [f"rmqcore/{name}.pyx"],
        include_dirs=["include", numpy.get_include()],
        extra_compile_args=CFLAGS,
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"), ("_GNU_SOURCE", "1")],
    )
    for name in MODULES
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": 3, "embedsignature": True},
        include_path=["rmqcore"],
    )
)
