"""A real Java RocketMQ 4.9.7 broker as the SLAVE of an rmqcore SYNC_MASTER (the HA protocol both ways: the Java
HAClient's reports, rmqcore's frames). Its commitlog files must end byte-identical to rmqcore's.

Needs the Java broker built by ``../shared/java-broker/prebuilt.sh`` (BUILD=DIR) and ``RMQCORE_JBROKER_BUILD=DIR``;
skipped otherwise. No name server: the slave is given haMasterAddress (4.9.7's BrokerController then never asks a
name server for it); its metadata pulls (SlaveSynchronize) need rmqcore's remoting front and are not tested here."""
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

BUILD = os.environ.get("RMQCORE_JBROKER_BUILD", "")
FILE = 1024 * 1024

pytestmark = pytest.mark.skipif(
    not (BUILD and os.path.isfile(os.path.join(BUILD, "cp.txt")) and shutil.which("java")),
    reason="needs a JDK and the Java 4.9.7 broker from ../shared/java-broker/prebuilt.sh (set RMQCORE_JBROKER_BUILD)")

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
