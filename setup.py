# Extension list and compiler flags only: all logic lives in the package.
import glob
import hashlib
import json
import os
import shutil
import sys
import sysconfig

import Cython
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
MACROS = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"), ("_GNU_SOURCE", "1")]
DIRECTIVES = {"language_level": 3, "embedsignature": True}

# Dotted names under rmqcore (broker._send is rmqcore/broker/_send.pyx).
MODULES = ["_crc", "_codec", "_message", "_encoder", "_commit_log", "_pull", "_mapped_file", "_flush", "_index_file", "_dispatch", "_segment", "_schedule", "broker._send", "server._converter", "remoting._remoting_codec", "remoting._send_message", "remoting._pull_message"]
HEADERS = sorted(glob.glob("include/*.h"))
PXDS = sorted(glob.glob("rmqcore/**/*.pxd", recursive=True))
# What setup.py last compiled, per module: a digest of everything the module is made from and the digest of the
# .so it made. build/ is the build's own scratch directory (never shipped, never committed).
STAMPS = os.path.join("build", "rmqcore-compiled.json")


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def inputs_digest(name):
    """Everything a compiled module is made from, by content: its .pyx, every .pxd and header it may cimport or
    include, the Cython and numpy versions (their own .pxd files and headers come with the version), the flags and
    the interpreter's ABI. Modification times are no guide: every isolated build (pip's default) installs a fresh
    Cython whose files are newer than any module compiled before, so the mtime test said "rebuild" every time."""
    h = hashlib.sha256()
    pyx = f"rmqcore/{name.replace('.', '/')}.pyx"
    for path in [pyx] + HEADERS + PXDS:
        h.update(path.encode() + b"\0" + _sha256(path).encode() + b"\0")
    h.update(json.dumps([Cython.__version__, numpy.__version__, CFLAGS, LDFLAGS, MACROS, DIRECTIVES,
                         sysconfig.get_config_var("EXT_SUFFIX"), sys.version]).encode())
    return h.hexdigest()


def _load_stamps():
    try:
        with open(STAMPS, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def in_tree(name):
    """Where an editable install or ``build_ext --inplace`` leaves module ``name``'s .so in the source tree."""
    return os.path.join("rmqcore", *name.split(".")) + sysconfig.get_config_var("EXT_SUFFIX")


STAMPED = _load_stamps()
DIGESTS = {name: inputs_digest(name) for name in MODULES}
# A module is reused when the .so in the tree is byte for byte the one setup.py made from these very inputs:
# README's second command (another isolated build) then neither Cythonizes nor compiles anything.
REUSABLE = {name for name in MODULES
            if name in STAMPED and STAMPED[name]["inputs"] == DIGESTS[name] and os.path.exists(in_tree(name))
            and _sha256(in_tree(name)) == STAMPED[name]["so"]}


def extension(name, source):
    return Extension(f"rmqcore.{name}", [source], include_dirs=["include", numpy.get_include()],
                     extra_compile_args=CFLAGS, extra_link_args=LDFLAGS, define_macros=MACROS,
                     depends=HEADERS + PXDS)


class BuildExt(build_ext):
    """Takes a module from the source tree when ``REUSABLE`` says it was compiled from exactly these inputs;
    compiles the others on every core, and records what it compiled for the next build."""

    def finalize_options(self):
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def run(self):
        self._made = {}
        # Cythonized here, only for a build (not for egg_info or sdist) and only the modules to compile, on every
        # core; Cython's own build_extension then finds C sources and leaves them.
        todo = [e for e in self.extensions if e.name.removeprefix("rmqcore.") not in REUSABLE]
        if todo:
            made = {e.name: e for e in cythonize(todo, compiler_directives=DIRECTIVES, include_path=["rmqcore"],
                                                 nthreads=os.cpu_count() or 1, force=self.force)}
            for e in todo:
                e.sources = made[e.name].sources
        super().run()
        # Recorded only for builds whose modules land in the source tree (build_ext --inplace, editable installs):
        # a wheel or sdist build elsewhere leaves the tree's modules and their record alone.
        if self._made and (self.inplace or getattr(self, "editable_mode", False)):
            stamps = _load_stamps()
            stamps.update(self._made)
            os.makedirs(os.path.dirname(STAMPS), exist_ok=True)
            with open(STAMPS + ".tmp", "w", encoding="utf-8") as f:
                json.dump(stamps, f, indent=1, sort_keys=True)
            os.replace(STAMPS + ".tmp", STAMPS)

    def build_extension(self, ext):
        name = ext.name.removeprefix("rmqcore.")
        target = self.get_ext_fullpath(ext.name)
        if name in REUSABLE:
            print(f"reusing {in_tree(name)} (compiled from these very sources)")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.abspath(in_tree(name)) != os.path.abspath(target):
                shutil.copy2(in_tree(name), target)
            return
        super().build_extension(ext)
        self._made[name] = {"inputs": DIGESTS[name], "so": _sha256(target)}


# A reused module is never Cythonized: build_extension copies its .so.
setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[extension(n, f"rmqcore/{n.replace('.', '/')}.pyx") for n in MODULES],
)
