"""rmqcore on Spark as a user meets it after README's install: the jobs' command line answers a missing or live
store with one line and exit status 2 (before a JVM starts), and README's Spark snippet runs from outside the
source tree, where PySpark finds the ``rocketmq-store`` format through the installed ``pyspark_rmqcore`` module
alone, with no warning about a replaced registration and one-line errors from ``rmqcore.spark.session()``."""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pyspark", reason="pyspark not installed (pip install -e '.[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow not installed (pip install -e '.[spark]')")

import rmqcore  # noqa: E402
from rmqcore import Message, MessageStore, StoreConfig  # noqa: E402
from rmqcore.spark.__main__ import main  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
# The directory holding the rmqcore imported here (a source tree or site-packages): subprocesses import that one.
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))
PROG = "python -m rmqcore.spark"


def small_config():
    return StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 50,
                       max_hash_slot_num=101, max_index_num=404, warm_mapped_file_enable=False)


def make_store(path, topic="orders", n=30):
    with MessageStore.open(str(path), small_config()) as st:
        for i in range(n):
            st.put(Message(topic, f"body-{i}".encode(), i % 2, keys=[f"k-{i}"]))
        st.wait_dispatched()
    return str(path)


def test_verify_of_a_missing_store_is_an_error_not_an_empty_ok():
    env = dict(os.environ, PYTHONPATH=PKG_PARENT)
    r = subprocess.run([sys.executable, "-m", "rmqcore.spark", "verify", "/nonexistent-rmq/store"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ""
    assert r.stderr == (f"{PROG} verify: error: /nonexistent-rmq/store (broker store) is not a store root: "
                        "no commitlog/ directory\n")


@pytest.mark.parametrize("job", ["verify", "stats", "export", "rebuild"])
def test_a_live_store_is_refused_in_one_line(tmp_path, capsys, job):
    path = make_store(tmp_path / "live")
    with MessageStore.open(path, small_config()):
        argv = [job, path] if job in ("verify", "stats") else [job, str(tmp_path / "out"), path]
        assert main(argv) == 2
        out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"{PROG} {job}: error: {path} (broker live) is open by a running broker: its lock file "
                          "is held"), err
    assert not os.path.exists(tmp_path / "out")


def test_a_missing_store_in_a_list_is_refused_before_any_job(tmp_path, capsys):
    good = make_store(tmp_path / "good")
    assert main(["stats", good, f"b={tmp_path / 'typo'}"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"{PROG} stats: error: {tmp_path / 'typo'} (broker b) is not a store root: no " \
                                "commitlog/ directory\n"


def test_one_line_from_a_spark_exception_keeps_only_a_user_error():
    from pyspark.errors import AnalysisException

    from rmqcore.spark.__main__ import _one_line
    text = ("[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source reader: Traceback (most recent "
            "call last):\n  File \"source.py\", line 300, in reader\n    raise FileNotFoundError(...)\n"
            "FileNotFoundError: /x (broker x) is not a store root: no commitlog/ directory SQLSTATE: 38000")
    assert _one_line(AnalysisException(text)) == "/x (broker x) is not a store root: no commitlog/ directory"
    hidden = ("[PYTHON_DATA_SOURCE_ERROR] Failed to generate Python data source read partitions: "
              "rmqcore.spark.layout.StoreInUseError: /s (broker s) is open by a running broker\n SQLSTATE: 38000")
    assert _one_line(AnalysisException(hidden)) == "/s (broker s) is open by a running broker"
    bug = text.replace("FileNotFoundError: /x", "TypeError: /x")
    assert _one_line(AnalysisException(bug)) is None            # a bug keeps its traceback
    assert _one_line(TypeError("x")) is None


def _installed_rmqcore_file(cwd) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", "import rmqcore; print(rmqcore.__file__)"], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=120)
    return os.path.realpath(r.stdout.strip()) if r.returncode == 0 else ""


SCRIPT = '''
import json, os, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").appName("readme").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
spark.sparkContext.setLogLevel("WARN")
exec(compile(SNIPPET, "README Spark snippet", "exec"))
from rmqcore.admin import StoreReader
counts = {}
for broker in sorted(os.listdir(OUT)):
    with StoreReader(os.path.join(OUT, broker)) as r:
        counts[broker] = sum(1 for _ in r.iterate())
spark.stop()

from rmqcore import MessageStore
from rmqcore.spark import session
spark = session("local[1]")
spark.sparkContext.setLogLevel("WARN")
with MessageStore.open(LIVE, create=False):
    try:
        spark.read.format("rocketmq-store").load(LIVE).count()
        error = None
    except Exception as e:
        error = str(e)
spark.stop()
print("RESULT " + json.dumps({"counts": counts, "error": error}))
'''


def test_readme_spark_snippet_runs_outside_the_source_tree(tmp_path):
    """Run as a user runs it: from another directory, no PYTHONPATH, the installed package only."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime: Spark needs java on PATH or JAVA_HOME")
    if not os.path.exists(README):
        pytest.skip("needs README.md")
    if _installed_rmqcore_file(tmp_path) != os.path.realpath(rmqcore.__file__):
        pytest.skip("the rmqcore tested here is not the one installed for this interpreter (another checkout)")
    text = open(README, encoding="utf-8").read()
    start = text.index("\n## Many stores on Spark")
    snippet = re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)
    a, b, out = make_store(tmp_path / "a"), make_store(tmp_path / "b", n=12), str(tmp_path / "out")
    assert '"/stores/a"' in snippet and '"/stores/b"' in snippet and '"/stores/out"' in snippet
    snippet = (snippet.replace('"/stores/a"', json.dumps(a)).replace('"/stores/b"', json.dumps(b))
               .replace('"/stores/out"', repr(out)).replace("2026-11-01T00:00:00Z", "2000-01-01T00:00:00Z"))
    live = make_store(tmp_path / "live", n=3)
    script = (f"SNIPPET = {snippet!r}\nOUT = {out!r}\nLIVE = {live!r}\n" + textwrap.dedent(SCRIPT))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    work = tmp_path / "elsewhere"
    work.mkdir()
    r = subprocess.run([sys.executable, "-c", script], cwd=work, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert "DATA_SOURCE_NOT_FOUND" not in r.stderr
    assert "replaced a statically registered data source" not in r.stderr, r.stderr[-3000:]
    result = json.loads(r.stdout.split("RESULT ", 1)[1])
    assert result["counts"] == {"broker-a": 30, "broker-b": 12}
    error = result["error"]
    assert error is not None and "is open by a running broker" in error
    # One line: the error itself (Spark adds its SQLSTATE on a line of its own), no worker traceback.
    assert "Traceback" not in error, error
    assert [ln for ln in error.splitlines()[1:] if not ln.strip().startswith("SQLSTATE")] == [], error
