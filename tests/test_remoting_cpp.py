"""PyPI ``rocketmq==0.4.4`` (a wheel bundling rocketmq-client-cpp, the classic C++ client) against
`rmqcore serve --remoting --namesrv` in a child process: sync, oneway and orderly sends, its pull consumer, push
consumers, and a restart in between that keeps the group's offsets.

It ships a top-level ``rocketmq`` package that clashes with the official 5.x client the test extra installs, so it
lives in its own virtual environment, made once under $RMQCORE_CPP_VENV (default ~/.cache/rmqcore/rocketmq-0.4.4)
with ``python -m venv`` and ``pip install rocketmq==0.4.4``; tests/cpp/remoting_cpp_client.py runs there as a
subprocess. Where pip cannot install it (no index, not x86_64 Linux) the tests skip and say so.
"""
import os
import subprocess
import sys

import pytest

from remoting_util import Client, RemotingProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "cpp", "remoting_cpp_client.py")


@pytest.fixture(scope="module")
def venv_python():
    venv = os.environ.get("RMQCORE_CPP_VENV", os.path.expanduser("~/.cache/rmqcore/rocketmq-0.4.4"))
    py = os.path.join(venv, "bin", "python")
    ok = os.path.exists(py) and subprocess.run([py, "-c", "import rocketmq.client"], capture_output=True).returncode == 0
    if not ok:
        r = subprocess.run([sys.executable, "-m", "venv", "--clear", venv], capture_output=True, text=True)
        if r.returncode == 0:
            r = subprocess.run([py, "-m", "pip", "install", "-q", "rocketmq==0.4.4"], capture_output=True, text=True,
                               timeout=600)
        if r.returncode != 0 or subprocess.run([py, "-c", "import rocketmq.client"],
                                               capture_output=True).returncode != 0:
            pytest.skip(f"pip could not install rocketmq==0.4.4 into {venv}: {(r.stderr or r.stdout)[-400:]}")
    return py


def run(py, ns, *args):
    r = subprocess.run([py, SCRIPT, ns, *map(str, args)], capture_output=True, text=True, timeout=180)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and "OK" in lines, r.stdout[-3000:] + r.stderr[-2000:]
    return lines


def got(lines):
    return {ln[4:] for ln in lines if ln.startswith("GOT ")}


def test_cpp_client_sends_pulls_and_pushes_with_offsets_kept_across_a_restart(venv_python, tmp_path):
    store = str(tmp_path / "store")
    sent = {f"body-{i}" for i in range(30)} | {"last"}
    with RemotingProcess(store) as s:
        lines = run(venv_python, s.namesrv, "produce", "ct", 30)
        assert "SENT 31" in lines
        assert got(run(venv_python, s.namesrv, "pull", "ct", 31)) == sent
        assert got(run(venv_python, s.namesrv, "push", "ct", 31)) == sent
        # a group that consumes everything, then the server restarts: the group resumes after what it consumed
        assert got(run(venv_python, s.namesrv, "push", "ct", 31, "CLUSTERING", "keep")) == sent
        assert s.terminate() == 0
    with RemotingProcess(store) as s:
        run(venv_python, s.namesrv, "produce", "ct", 3)
        after = {"body-0", "body-1", "body-2", "last"}
        assert got(run(venv_python, s.namesrv, "push", "ct", 4, "CLUSTERING", "keep")) == after
        assert s.terminate() == 0


def test_cpp_broadcasting_consumers_each_get_every_message(venv_python, tmp_path):
    """Two BROADCASTING push consumers of one group (two processes: two client ids) each get every message; their
    offsets are their own (a local file each, under $HOME)."""
    import threading
    with RemotingProcess(str(tmp_path / "store")) as s:
        run(venv_python, s.namesrv, "send", "cbc", 1, "first")      # the topic and its route exist
        env = {**os.environ, "HOME": str(tmp_path)}
        procs = [subprocess.Popen([venv_python, SCRIPT, s.namesrv, "push", "cbc", "20", "BROADCASTING", "cpp-bc"],
                                  stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
        outs = [[], []]
        readers = [threading.Thread(target=lambda p=p, o=o: o.extend(p.stdout), daemon=True)
                   for p, o in zip(procs, outs)]
        for t in readers:
            t.start()
        try:
            # a broadcasting consumer with no local offset starts at the queues' end (CONSUME_FROM_LAST_OFFSET):
            # send warm-ups until both have one, so what follows is sent after both took their queues
            for k in range(120):
                if all(any(ln.startswith("GOT warm") for ln in o) for o in outs):
                    break
                run(venv_python, s.namesrv, "send", "cbc", 1, f"warm{k}")
            run(venv_python, s.namesrv, "send", "cbc", 20, "bc")
            for p in procs:
                assert p.wait(120) == 0
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        for t in readers:
            t.join(10)
        # the broker holds no offset of the group (GET_CONSUME_STATS lists the queues it has offsets for)
        c = Client(s.address)
        a = c.call(208, {"consumerGroup": "cpp-bc"})
        c.close()
        assert a.code == 0 and b'"offsetTable":{}' in a.body, a.body
        for o in outs:
            assert "OK\n" in o, o
            assert {ln.split()[1] for ln in o if ln.startswith("GOT bc-")} == {f"bc-{i}" for i in range(20)}


def test_cpp_orderly_consumer_locks_its_queues_and_keeps_their_order(venv_python, tmp_path):
    with RemotingProcess(str(tmp_path / "store")) as s:
        run(venv_python, s.namesrv, "produce", "corder", 30)
        lines = run(venv_python, s.namesrv, "orderly", "corder", 31)
    queues = {int(ln.split()[1]): ln.split()[2:] for ln in lines if ln.startswith("QUEUE ")}
    assert sorted(b for bodies in queues.values() for b in bodies) == sorted([f"body-{i}" for i in range(30)] +
                                                                             ["last"])
    for bodies in queues.values():
        # each queue in the order it was stored ("last" was sent last)
        numbers = [int(b[5:]) if b != "last" else 1 << 30 for b in bodies]
        assert numbers == sorted(numbers), bodies
