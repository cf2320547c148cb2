"""What the distributions carry: the sdist holds everything its tests need, wheels carry no debug info, the
headers the .pxd files extern are shipped, the license is an SPDX string, and the workflow GitHub runs is the
one in the repository root."""
import glob
import os
import re
import struct
import subprocess
import sys
import tomllib
from shutil import which as shutil_which

import pytest

import rmqcore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.dirname(os.path.abspath(rmqcore.__file__))
IN_SOURCE_TREE = os.path.exists(os.path.join(ROOT, "setup.py"))
# The compiled modules, dotted under rmqcore (setup.py's MODULES).
COMPILED = ["_crc", "_codec", "_message", "_encoder", "_commit_log", "_pull", "_mapped_file", "_flush", "_index_file", "_dispatch", "_segment", "_schedule", "broker._send", "server._converter", "remoting._remoting_codec", "remoting._send_message", "remoting._pull_message"]


def test_license_is_an_spdx_string():
    if not IN_SOURCE_TREE:
        pytest.skip("needs the source tree")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["license"] == "Apache-2.0"
    assert os.path.exists(os.path.join(ROOT, "LICENSE"))


def test_the_workflow_github_runs_is_the_root_one():
    root, gh = os.path.join(ROOT, "wheels.yml"), os.path.join(ROOT, ".github", "workflows", "wheels.yml")
    if not os.path.exists(root):
        pytest.skip("needs the source tree")
    assert open(gh, encoding="utf-8").read() == open(root, encoding="utf-8").read()


def test_headers_the_pxd_files_extern_are_shipped():
    inc = rmqcore.get_include()
    externed = set()
    for pxd in glob.glob(os.path.join(PKG, "*.pxd")):
        externed |= set(re.findall(r'cdef extern from "([^"]+\.h)"', open(pxd, encoding="utf-8").read()))
    assert externed, "the .pxd files extern C headers"
    missing = sorted(h for h in externed if not os.path.exists(os.path.join(inc, h)))
    assert missing == []


def _elf_section_names(path: str) -> set[str]:
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"\x7fELF" and data[4] == 2, f"{path}: not a 64-bit ELF file"
    end = "<" if data[5] == 1 else ">"
    shoff, = struct.unpack_from(end + "Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x3A)
    def header(i):
        return struct.unpack_from(end + "IIQQQQIIQQ", data, shoff + i * shentsize)
    strtab_off = header(shstrndx)[4]
    names = set()
    for i in range(shnum):
        name_off = header(i)[0]
        names.add(data[strtab_off + name_off:data.index(b"\0", strtab_off + name_off)].decode())
    return names


@pytest.mark.skipif(sys.platform != "linux", reason="ELF")
def test_compiled_modules_carry_no_debug_info():
    if os.environ.get("RMQCORE_DEBUG"):
        pytest.skip("a debug build on purpose")
    sos = glob.glob(os.path.join(PKG, "_*.so")) + glob.glob(os.path.join(PKG, "*", "_*.so"))
    assert len(sos) >= len(COMPILED)
    for so in sos:
        debug = sorted(n for n in _elf_section_names(so) if n.startswith(".debug"))
        assert debug == [], f"{os.path.basename(so)}: {debug}"


def test_sdist_holds_what_its_tests_need(tmp_path):
    """The file list setuptools makes for the sdist (SOURCES.txt) holds every test helper, the stubs, the
    headers, the license and both workflow files."""
    if not IN_SOURCE_TREE:
        pytest.skip("needs the source tree")
    pytest.importorskip("Cython")
    r = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    sources = set(open(tmp_path / "rmqcore.egg-info" / "SOURCES.txt", encoding="utf-8").read().split())
    needed = {os.path.relpath(os.path.join(d, f), ROOT) for d, _, files in os.walk(os.path.join(ROOT, "tests"))
              if "__pycache__" not in d for f in files if not f.endswith((".pyc", ".pyo"))}
    needed |= {"tests/stubtest_allowlist.txt", "LICENSE", "README.md", "wheels.yml", ".github/workflows/wheels.yml",
               "pyspark_rmqcore.py"}
    needed |= {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "include", "*.h"))}
    for pattern in ("*.pyi", "*.pxd", "*.pyx"):
        needed |= {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "rmqcore", "**", pattern),
                                                              recursive=True)}
    assert sorted(needed - sources) == []
    assert not [s for s in sources if s.endswith((".so", ".c")) and s.startswith("rmqcore/")]


def test_a_second_build_reuses_the_modules_compiled_in_place(tmp_path):
    """README's second command (pip install -e '.[test,spark]') must not compile again. Each of pip's isolated
    builds installs a fresh Cython whose own .pxd files are newer than anything compiled before: here a copy of
    the same Cython with new modification times stands for it, and the build must still Cythonize nothing and
    compile nothing, taking every module setup.py compiled into the tree (recorded by content in build/)."""
    if not IN_SOURCE_TREE:
        pytest.skip("needs the source tree")
    Cython = pytest.importorskip("Cython")
    import hashlib
    import json
    import shutil
    import sysconfig
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    stamps_path = os.path.join(ROOT, "build", "rmqcore-compiled.json")
    if not os.path.exists(stamps_path):
        pytest.skip("the modules here were not compiled by setup.py (build_ext --inplace or pip install -e .)")
    stamps = json.load(open(stamps_path, encoding="utf-8"))
    for m in COMPILED:
        so = os.path.join(ROOT, "rmqcore", *m.split(".")) + suffix
        assert m in stamps and stamps[m]["so"] == hashlib.sha256(open(so, "rb").read()).hexdigest(), \
            f"{m}{suffix} is not the module setup.py last compiled here"
    fresh = tmp_path / "site"
    shutil.copytree(os.path.dirname(Cython.__file__), fresh / "Cython", copy_function=shutil.copy,
                    ignore=shutil.ignore_patterns("__pycache__", "Tests", "Debugger"))
    c_files = {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(ROOT, "rmqcore", "**", "*.c"), recursive=True)}
    env = dict(os.environ, PYTHONPATH=str(fresh))
    r = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib", str(tmp_path / "lib"),
                        "--build-temp", str(tmp_path / "tmp")], cwd=ROOT, capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("reusing rmqcore/") == len(COMPILED), r.stdout + r.stderr
    assert "Compiling " not in r.stdout and "gcc" not in r.stdout and "cc " not in r.stdout, r.stdout
    assert {p: os.stat(p).st_mtime_ns for p in c_files} == c_files, "Cython regenerated C sources"
    assert len(glob.glob(str(tmp_path / "lib" / "rmqcore" / "**" / f"*{suffix}"), recursive=True)) == len(COMPILED)


def test_the_compiled_modules_build_without_compiler_warnings():
    """Every module's generated C compiles warning-free with setup.py's flags (a warning here once hid a read of
    an uninitialized variable and a literal C reads as unsigned); -Werror turns any warning into a failure."""
    if not IN_SOURCE_TREE:
        pytest.skip("needs the source tree")
    import sysconfig
    from concurrent.futures import ThreadPoolExecutor
    numpy = pytest.importorskip("numpy")
    cc = shutil_which("gcc") or shutil_which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    sources = [os.path.join(ROOT, "rmqcore", *m.split(".")) + ".c" for m in COMPILED]
    if not all(os.path.exists(c) for c in sources):
        pytest.skip("the generated C sources are not here (compile in place first)")
    flags = ["-O3", "-g0", "-std=c11", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function", "-Werror", "-fPIC",
             "-D_GNU_SOURCE=1", "-DNPY_NO_DEPRECATED_API=NPY_1_7_API_VERSION", "-I" + os.path.join(ROOT, "include"),
             "-I" + sysconfig.get_paths()["include"], "-I" + numpy.get_include()]

    def compile_one(c):
        return c, subprocess.run([cc, *flags, "-c", c, "-o", os.devnull], capture_output=True, text=True,
                                 timeout=600)

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        failed = {os.path.basename(c): r.stderr[-2000:] for c, r in pool.map(compile_one, sources) if r.returncode}
    assert failed == {}
