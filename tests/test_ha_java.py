"""Real Java RocketMQ 4.9.7 brokers on either side of rmqcore's HA replication: a Java SLAVE of an rmqcore SYNC_MASTER
(the Java HAClient's reports, rmqcore's frames), and an rmqcore SLAVE of a Java master (fed by the harness's Java
producer). The slave's commitlog files must end byte-identical to the master's.

Needs a JDK and the Java broker harness (tests/java_util.py: ../shared/java-broker, built once by its prebuilt.sh);
skipped, saying which is missing, otherwise. No name
server for the Java slave: it is given haMasterAddress (4.9.7's BrokerController then never asks a name server
for it); its metadata pulls (SlaveSynchronize) need rmqcore's remoting front and are not tested here."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

pytest.importorskip("rocketmq")
pytest.importorskip("grpc")

from test_ha_serve import TOPIC, _files, _free_port, _send  # noqa: E402
from serve_util import ServerProcess, prepare  # noqa: E402
from java_util import build_dir, ensure_build, harness  # noqa: E402

BUILD = build_dir()
HARNESS = harness() or ""
FILE = 1024 * 1024


@pytest.fixture(autouse=True, scope="module")
def _java_broker():
    ensure_build()

JFLAGS = ["-XX:+UseG1GC", "-Dfile.encoding=UTF-8", "--add-opens", "java.base/java.nio=ALL-UNNAMED",
          "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
          "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/java.lang=ALL-UNNAMED",
          "--add-opens", "java.base/java.util=ALL-UNNAMED", "--add-exports", "java.base/sun.security.x509=ALL-UNNAMED",
          "-Drocketmq.bind.addr=127.0.0.1"]


def _java_slave(run_dir, ha_master):
    home = os.path.join(run_dir, "home")
    os.makedirs(os.path.join(home, "conf"), exist_ok=True)
    shutil.copy(os.path.join(BUILD, "src", "distribution", "conf", "logback_broker.xml"), os.path.join(home, "conf"))
    port = _free_port()
    conf = os.path.join(home, "conf", "broker.conf")
    with open(conf, "w") as f:
        f.write(f"brokerClusterName=HaCluster\nbrokerName=broker-a\nbrokerId=1\nbrokerRole=SLAVE\n"
                f"brokerIP1=127.0.0.1\nlistenPort={port}\nstorePathRootDir={run_dir}/store\n"
                f"storePathCommitLog={run_dir}/store/commitlog\nmappedFileSizeCommitLog={FILE}\n"
                f"haMasterAddress={ha_master}\nhaSendHeartbeatInterval=1000\n")
    cp = os.path.join(BUILD, "classes") + ":" + open(os.path.join(BUILD, "cp.txt")).read().strip()
    out = open(os.path.join(run_dir, "broker.out"), "w")
    proc = subprocess.Popen(["java", "-Xms256m", "-Xmx256m", "-Xmn128m", "-cp", cp, *JFLAGS,
                             f"-Duser.home={run_dir}", "org.apache.rocketmq.broker.BrokerStartup", "-c", conf],
                            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "ROCKETMQ_HOME": home,
                                                                       "LC_ALL": "C.UTF-8"})
    deadline = time.monotonic() + 90
    while "boot success" not in open(out.name).read():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the Java slave did not start: " + open(out.name).read()[-3000:])
        time.sleep(0.3)
    return proc


def test_java_slave_of_an_rmqcore_sync_master(tmp_path):
    mstore = str(tmp_path / "master")
    prepare(mstore, {TOPIC: ("NORMAL", 2)})
    ha_port = _free_port()
    master = ServerProcess(mstore, {"brokerRole": "SYNC_MASTER", "haListenPort": str(ha_port),
                                    "mappedFileSizeCommitLog": str(FILE), "syncFlushTimeout": "5000"})
    java = None
    try:
        assert master.proc.stdout.readline().strip() == f"ha on 127.0.0.1:{ha_port}"
        java = _java_slave(str(tmp_path / "java"), f"127.0.0.1:{ha_port}")
        deadline = time.monotonic() + 30
        while True:         # until the Java slave has connected and reported (its first report: a heartbeat)
            try:
                sent = _send(master.endpoint, 1, "first")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        # every send below is answered only once the Java slave acknowledged its record
        sent += _send(master.endpoint, 2500, "j")          # ~2.5 MiB: three commitlog files, two blank ends
        assert master.terminate() == 0
        master = None
        java.send_signal(signal.SIGTERM)                  # its shutdown hook flushes
        java.wait(60)
        java = None
    finally:
        if master is not None:
            master.kill()
        if java is not None:
            java.kill()
            java.wait(30)
    m_files, j_files = _files(mstore), _files(str(tmp_path / "java" / "store"))
    assert len(m_files) >= 3 and m_files.keys() == j_files.keys()
    for name in m_files:
        assert m_files[name] == j_files[name], f"commitlog/{name} differs"


def _harness(*args, env):
    return subprocess.run(["bash", os.path.join(HARNESS, "run.sh"), *args], env=env, capture_output=True, text=True,
                          timeout=300)


def test_rmqcore_slave_of_a_java_master(tmp_path):
    from rmqcore import MessageStore, StoreConfig
    from store_util import queue_messages
    run_dir = str(tmp_path / "jrun")
    ns, bp = _free_port(), _free_port()
    env = {**os.environ, "BUILD": BUILD, "RUN_DIR": run_dir, "NS_PORT": str(ns), "BROKER_PORT": str(bp),
           "COMMITLOG_SIZE": str(FILE), "SERVER_HEAP": "256m", "CLIENT_HEAP": "256m"}
    r = _harness("start", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    sstore = str(tmp_path / "slave")
    slave = None
    try:
        slave = ServerProcess(sstore, {"brokerRole": "SLAVE", "brokerId": "1", "mappedFileSizeCommitLog": str(FILE),
                                       "haMasterAddress": f"127.0.0.1:{bp + 1}", "haSendHeartbeatInterval": "1000"})
        assert slave.proc.stdout.readline().startswith("ha slave of")
        n = 2500
        r = _harness("bench", f"ns=127.0.0.1:{ns}", "phases=sync1", f"n={n}", "warm=0", "queues=2",
                     env=env)
        assert r.returncode == 0 and "RESULT" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
        mdir = os.path.join(run_dir, "store", "commitlog")
        deadline = time.monotonic() + 60
        while True:         # until the slave holds every non-empty file of the master, byte for byte
            m_files = {k: v for k, v in _files(os.path.join(run_dir, "store")).items() if any(v)}
            s_files = _files(sstore) if os.path.isdir(os.path.join(sstore, "commitlog")) else {}
            if m_files and all(s_files.get(k) == v for k, v in m_files.items()):
                break
            assert time.monotonic() < deadline, f"slave has {sorted(s_files)}, master {sorted(m_files)} in {mdir}"
            time.sleep(0.5)
        assert len(m_files) >= 3
        assert slave.terminate() == 0
        slave = None
    finally:
        if slave is not None:
            slave.kill()
        _harness("stop", env=env)
    topic = next(t for t in os.listdir(os.path.join(sstore, "consumequeue")) if t.startswith("bench-"))
    with MessageStore.open(sstore, StoreConfig(mapped_file_size_commit_log=FILE, broker_role="SLAVE")) as s:
        got = [m for q in range(2) for m in queue_messages(s, topic, q)]
        report = s.verify()
    assert len(got) == n and report["ok"], report
