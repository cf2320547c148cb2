"""``python -m rmqcore.console STORE`` (console/standalone.py) and ``python -m rmqcore.spark`` under a newcomer's
mistakes: one line on stderr naming the problem and what to change or install, the command line's exit statuses
(2), no traceback, and no store directory left that the command made."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

import rmqcore
from rmqcore import MessageStore

PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))


def run_module(module: str, *args, block: str | None = None) -> subprocess.CompletedProcess:
    """``python -m module args``; ``block`` makes that top-level package unimportable, as if not installed."""
    code = "import runpy, sys\n"
    if block:
        code += f"sys.modules[{block!r}] = None\n"
    code += f"sys.argv = [{module!r}, *sys.argv[1:]]\nrunpy.run_module({module!r}, run_name='__main__')\n"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=PKG_PARENT,
                          timeout=120)


def one_line_error(r: subprocess.CompletedProcess, prog: str, *words: str) -> None:
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"{prog}: error: "), r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


CONSOLE = "python -m rmqcore.console"


def test_console_store_path_mistakes_are_one_line(tmp_path):
    pytest.importorskip("aiohttp")
    pytest.importorskip("jinja2")
    afile = tmp_path / "afile"
    afile.write_text("x")
    one_line_error(run_module("rmqcore.console", str(afile), "--http", "127.0.0.1:0"), CONSOLE,
                   str(afile), "not a directory")
    missing = tmp_path / "nosuch" / "store"
    one_line_error(run_module("rmqcore.console", str(missing), "--http", "127.0.0.1:0"), CONSOLE,
                   "parent directory", str(missing.parent))
    held = tmp_path / "held"
    store = MessageStore.open(str(held))                    # this process holds the store's lock
    try:
        one_line_error(run_module("rmqcore.console", str(held), "--http", "127.0.0.1:0"), CONSOLE, str(held))
    finally:
        store.close()


def test_console_port_in_use_is_one_line_and_leaves_no_store(tmp_path):
    pytest.importorskip("aiohttp")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        r = run_module("rmqcore.console", str(tmp_path / "s"), "--http", address)
    one_line_error(r, CONSOLE, f"--http: cannot listen on {address}", "in use")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("extra", ["jinja2", "aiohttp"])
def test_console_without_its_extra_names_what_to_install(tmp_path, extra):
    pytest.importorskip({"jinja2": "aiohttp", "aiohttp": "jinja2"}[extra])   # only the blocked one is missing
    r = run_module("rmqcore.console", str(tmp_path / "s"), "--http", "127.0.0.1:0", block=extra)
    one_line_error(r, CONSOLE, extra, "console extra", "pip install")
    assert not (tmp_path / "s").exists()                    # refused before the store was opened


def test_spark_without_pyspark_names_what_to_install(tmp_path):
    pytest.importorskip("pyarrow")                          # only pyspark is missing (pyarrow is asked first)
    r = run_module("rmqcore.spark", "stats", str(tmp_path), block="pyspark")
    one_line_error(r, "python -m rmqcore.spark", "pyspark", "spark extra", "pip install")
