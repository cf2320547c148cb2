"""`python -m bench --only ha`: how fast a fresh slave catches up with its master over RocketMQ 4.9.7's HA protocol,
rmqcore on either side against the Java → Java pair, on the same records.

The records: the Java harness's `Bench` (async phase, 1 KiB bodies) fills a Java 4.9.7 master; its store is copied
for an rmqcore master (rmqcore opens the Java store as it is), so every pair moves the same bytes. The commitlog
file holds them all: a fresh slave asks for offset 0 and is sent the master's last file onward (WriteSocketService),
so that file is the whole log here. Each pair: the master up, a fresh slave started; timed from the first
report of a nonzero max offset by the slave (GET_BROKER_RUNTIME_INFO's commitLogMaxOffset, polled every 10 ms) to
the report of the master's end, so neither side's start-up (a JVM's, a Python's) is counted.

- Java → Java: Java master, Java slave;
- Java slave ← rmqcore master: `rmqcore serve --remoting` on the copy, a Java slave;
- rmqcore slave ← Java master: the Java master, `rmqcore serve` as SLAVE.

SYNC_MASTER sends (``sync_master_rows``): the harness's Java `Bench` (RocketMQ 4.9.7's producer; phases sync1 and
sync8, 1 KiB bodies; each send answered once the slave has it) against a Java SYNC_MASTER + Java slave with a Java
name server, and against `rmqcore serve` as SYNC_MASTER (its embedded name server) + the same Java slave. Each pair
starts on fresh stores; the Bench starts once a probe send is acknowledged (the slave connected). ``--quick``: 2,000
sends per phase; full: 20,000.

Needs the JDK and the harness build (tests/java_util.py: $RMQCORE_JBROKER_BUILD, default ~/.cache/rmqcore/jbroker,
made by ../shared/java-broker/prebuilt.sh); without them the row says so. ``--quick``: 30,000 records (~35 MiB) in
a 64 MiB file; full: 300,000 (~350 MiB) in a 512 MiB file.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1024 * 1024
JFLAGS = ["-XX:+UseG1GC", "-Dfile.encoding=UTF-8", "--add-opens", "java.base/java.nio=ALL-UNNAMED",
          "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
          "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/java.lang=ALL-UNNAMED",
          "--add-opens", "java.base/java.util=ALL-UNNAMED", "--add-exports", "java.base/sun.security.x509=ALL-UNNAMED",
          "-Drocketmq.bind.addr=127.0.0.1"]


def _harness() -> str | None:
    env = os.environ.get("RMQCORE_JAVA_BROKER")
    for d in ([env] if env else []) + [os.path.join(ROOT, "..", "shared", "java-broker"),
                                       os.path.join(ROOT, "..", "..", "shared", "java-broker")]:
        if d and os.path.exists(os.path.join(d, "run.sh")):
            return os.path.abspath(d)
    return None


def _ports() -> int:
    """A listen port P with P - 2 and P + 1 free too (a broker binds all three)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if not 1026 < p < 65000:
            continue
        try:
            for q in (p - 2, p + 1):
                with socket.socket() as t:
                    t.bind(("127.0.0.1", q))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port with its neighbours free")


def _call(addr: str, code: int) -> bytes:
    from rmqcore.remoting import remoting_command as rc
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(rc.encode_request(rc.RemotingCommand(code, "JAVA", 407, 1, 0, None, {}, rc.JSON)))
        buf = b""
        while True:
            data = s.recv(1 << 20)
            if not data:
                raise ConnectionError(f"{addr} closed")
            buf += data
            cmds, _ = rc.decode_frames(buf)
            if cmds:
                return cmds[0].body


def _max_offset(addr: str) -> int:
    """GET_BROKER_RUNTIME_INFO's commitLogMaxOffset (-1 while the broker does not answer)."""
    try:
        return int(json.loads(_call(addr, 28))["table"]["commitLogMaxOffset"])
    except (OSError, ValueError, KeyError):
        return -1


def _catch_up(slave_addr: str, end: int, timeout: float = 300.0) -> tuple[float, int]:
    """(seconds, bytes) from the slave's first nonzero max offset to ``end``."""
    deadline = time.monotonic() + timeout
    first = t0 = None
    while True:
        off = _max_offset(slave_addr)
        now = time.monotonic()
        if off > 0 and first is None:
            first, t0 = off, now
        if off >= end:
            return now - t0, end - first
        if now > deadline:
            raise RuntimeError(f"slave {slave_addr} at {off} of {end} after {timeout} s")
        time.sleep(0.01)


class _Java:
    def __init__(self, cp, run_dir, conf, build, main="org.apache.rocketmq.broker.BrokerStartup"):
        home = os.path.join(run_dir, "home")
        os.makedirs(os.path.join(home, "conf"), exist_ok=True)
        for name in ("logback_broker.xml", "logback_namesrv.xml"):
            shutil.copy(os.path.join(build, "src", "distribution", "conf", name), os.path.join(home, "conf"))
        path = os.path.join(home, "conf", "broker.conf")
        with open(path, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in conf.items()))
        self.log = os.path.join(run_dir, "out.log")
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(["java", "-Xms512m", "-Xmx512m", "-Xmn256m", "-cp", cp, *JFLAGS,
                                          f"-Duser.home={run_dir}", main, "-c", path], stdout=out,
                                         stderr=subprocess.STDOUT,
                                         env={**os.environ, "ROCKETMQ_HOME": home, "LC_ALL": "C.UTF-8"})
        deadline = time.monotonic() + 120
        while "boot success" not in open(self.log).read():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{main} did not start: " + open(self.log).read()[-2000:])
            time.sleep(0.2)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(60)


def _java_slave(cp, build, run_dir, ha_master, file_size) -> tuple[_Java, str]:
    port = _ports()
    conf = {"brokerClusterName": "HaBench", "brokerName": "broker-a", "brokerId": 1, "brokerRole": "SLAVE",
            "brokerIP1": "127.0.0.1", "listenPort": port, "storePathRootDir": f"{run_dir}/store",
            "storePathCommitLog": f"{run_dir}/store/commitlog", "mappedFileSizeCommitLog": file_size,
            "haMasterAddress": ha_master}
    return _Java(cp, run_dir, conf, build), f"127.0.0.1:{port}"


def _rmqcore(store, conf, log_path, port, args=()) -> subprocess.Popen:
    path = store.rstrip("/") + ".broker.conf"
    with open(path, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in conf.items()))
    err = open(log_path, "w")
    p = subprocess.Popen([sys.executable, "-m", "rmqcore", "serve", store, "--remoting", f"127.0.0.1:{port}",
                          "--config", path, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
    err.close()
    line = p.stdout.readline()
    if not line.startswith("remoting on"):
        p.kill()
        raise RuntimeError(f"rmqcore serve did not start: {line!r} {open(log_path).read()[-2000:]}")
    return p


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(30)


def _build() -> tuple[str | None, str | None]:
    """(the harness, its build) or (None, None) when the JDK, the harness or its build is missing."""
    harness = _harness()
    build = os.environ.get("RMQCORE_JBROKER_BUILD", os.path.expanduser("~/.cache/rmqcore/jbroker"))
    if not shutil.which("java") or harness is None or not os.path.exists(os.path.join(build, "cp.txt")):
        return None, None
    return harness, build


NOT_RUN = "not run: needs a JDK and the java-broker harness build (../shared/java-broker/prebuilt.sh)"


def run(quick: bool = False) -> list[tuple[str, str, str, str]]:
    return catch_up_rows(quick) + sync_master_rows(quick)


def _probe_send(addr: str, deadline_s: float = 90.0) -> None:
    """One SEND_MESSAGE_V2 (310) to the master, again until it answers SUCCESS: the slave connected and acknowledged."""
    from rmqcore.remoting import remoting_command as rc
    host, port = addr.rsplit(":", 1)
    ext = {"a": "ha_probe", "b": "ha_probe", "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}
    end = time.monotonic() + deadline_s
    code = None
    while time.monotonic() < end:
        try:
            with socket.create_connection((host, int(port)), timeout=10) as s:
                s.sendall(rc.encode_request(rc.RemotingCommand(310, "JAVA", 407, 1, 0, None, ext, rc.JSON, b"probe")))
                buf = b""
                while True:
                    data = s.recv(1 << 16)
                    if not data:
                        raise ConnectionError(f"{addr} closed")
                    buf += data
                    cmds, _ = rc.decode_frames(buf)
                    if cmds:
                        code = cmds[0].code
                        break
            if code == 0:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"no acknowledged probe send to {addr} in {deadline_s} s (last code {code})")


def _bench(harness, build, run_dir, ns, n) -> dict:
    env = {**os.environ, "BUILD": build, "RUN_DIR": run_dir, "CLIENT_HEAP": "256m"}
    r = subprocess.run(["bash", os.path.join(harness, "run.sh"), "bench", f"ns={ns}", "phases=sync1,syncN",
                        f"n={n}", "warm=200", "queues=4", "size=1024", "threads=8"], env=env, capture_output=True,
                       text=True, timeout=600)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if r.returncode != 0 or line is None:
        raise RuntimeError(f"Bench: {r.stdout[-1500:]} {r.stderr[-1500:]}")
    return json.loads(line[len("RESULT "):])


def sync_master_rows(quick: bool = False) -> list[tuple[str, str, str, str]]:
    """The Java Bench's SYNC_MASTER send rate: rmqcore master + Java slave against Java master + Java slave."""
    harness, build = _build()
    if harness is None:
        return [("SYNC_MASTER sends (ha)", "-", "", NOT_RUN)]
    n, file_size = (2_000, 64 * MiB) if quick else (20_000, 256 * MiB)
    cp = os.path.join(build, "classes") + ":" + open(os.path.join(build, "cp.txt")).read().strip()
    base = tempfile.mkdtemp(prefix="rmqcore-ha-sync-bench-")
    procs: list = []
    res = {}
    try:
        ns_port, mport = _ports(), _ports()
        jdir = os.path.join(base, "jns")
        procs.append(_Java(cp, jdir, {"listenPort": ns_port, "kvConfigPath": f"{jdir}/kv.json",
                                      "configStorePath": f"{jdir}/namesrv.properties"}, build,
                           "org.apache.rocketmq.namesrv.NamesrvStartup"))
        mdir = os.path.join(base, "jmaster")
        procs.append(_Java(cp, mdir, {
            "brokerClusterName": "HaBench", "brokerName": "broker-a", "brokerId": 0, "brokerRole": "SYNC_MASTER",
            "namesrvAddr": f"127.0.0.1:{ns_port}", "brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1",
            "listenPort": mport, "storePathRootDir": f"{mdir}/store", "storePathCommitLog": f"{mdir}/store/commitlog",
            "mappedFileSizeCommitLog": file_size, "autoCreateTopicEnable": "true",
            # a shared 2-core machine: the default 200 ms in the send queue refuses sends (TIMEOUT_CLEAN_QUEUE)
            "waitTimeMillsInSendQueue": 5000}, build))
        js, _ = _java_slave(cp, build, os.path.join(base, "jslave1"), f"127.0.0.1:{mport + 1}", file_size)
        procs.append(js)
        _probe_send(f"127.0.0.1:{mport}")
        res["java"] = _bench(harness, build, os.path.join(base, "bench1"), f"127.0.0.1:{ns_port}", n)
        for p in reversed(procs):
            p.stop()
        procs.clear()

        rport, rns = _ports(), _ports()
        rm = _rmqcore(os.path.join(base, "rmaster"), {
            "brokerClusterName": "HaBench", "brokerName": "broker-r", "brokerRole": "SYNC_MASTER",
            "brokerIP1": "127.0.0.1", "listenPort": str(rport), "mappedFileSizeCommitLog": str(file_size)},
            os.path.join(base, "rmaster.log"), rport, ("--namesrv", f"127.0.0.1:{rns}"))
        procs.append(rm)
        js, _ = _java_slave(cp, build, os.path.join(base, "jslave2"), f"127.0.0.1:{rport + 1}", file_size)
        procs.append(js)
        _probe_send(f"127.0.0.1:{rport}")
        res["rmqcore"] = _bench(harness, build, os.path.join(base, "bench2"), f"127.0.0.1:{rns}", n)
    finally:
        for p in reversed(procs):
            if isinstance(p, _Java):
                p.stop()
            else:
                _stop(p)
        shutil.rmtree(base, ignore_errors=True)
    rows = []
    for phase, label in (("sync1", "1 thread"), ("sync8", "8 threads")):
        base_rate = res["java"][phase]["msgs_per_s"]
        rate = res["rmqcore"][phase]["msgs_per_s"]
        rows.append((f"SYNC_MASTER sends, Java Bench {label}, Java master + Java slave ({n:,} × 1 KiB)",
                     f"{base_rate:,.0f}", "msg/s", "the Java pair, the reference for the row below"))
        rows.append((f"SYNC_MASTER sends, Java Bench {label}, rmqcore master + Java slave", f"{rate:,.0f}", "msg/s",
                     f"{rate / base_rate:.2f}× the Java pair (aim ≥ 1×)"))
    return rows


def catch_up_rows(quick: bool = False) -> list[tuple[str, str, str, str]]:
    harness, build = _build()
    if harness is None:
        return [("replication catch-up (ha)", "-", "", NOT_RUN)]
    n, file_size = (30_000, 64 * MiB) if quick else (300_000, 512 * MiB)
    cp = os.path.join(build, "classes") + ":" + open(os.path.join(build, "cp.txt")).read().strip()
    base = tempfile.mkdtemp(prefix="rmqcore-ha-bench-")
    jrun = os.path.join(base, "jmaster")
    ns, bp = _ports(), _ports()
    env = {**os.environ, "BUILD": build, "RUN_DIR": jrun, "NS_PORT": str(ns), "BROKER_PORT": str(bp),
           "COMMITLOG_SIZE": str(file_size), "SERVER_HEAP": "512m", "CLIENT_HEAP": "256m"}
    sh = os.path.join(harness, "run.sh")
    rows = []
    procs: list = []
    try:
        r = subprocess.run(["bash", sh, "start"], env=env, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"harness start: {r.stdout[-1500:]} {r.stderr[-1500:]}")
        r = subprocess.run(["bash", sh, "bench", f"ns=127.0.0.1:{ns}", "phases=async", f"n={n}", "warm=0",
                            "queues=4", "size=1024"], env=env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"harness bench: {r.stdout[-1500:]} {r.stderr[-1500:]}")
        end = _max_offset(f"127.0.0.1:{bp}")
        subprocess.run(["bash", sh, "stop"], env=env, capture_output=True, timeout=120)
        rstore = os.path.join(base, "rmaster")
        shutil.copytree(os.path.join(jrun, "store"), rstore)
        r = subprocess.run(["bash", sh, "start"], env={**env, "KEEP_STORE": "1"}, capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"harness restart: {r.stdout[-1500:]} {r.stderr[-1500:]}")
        assert _max_offset(f"127.0.0.1:{bp}") == end
        res = {}
        js, saddr = _java_slave(cp, build, os.path.join(base, "jslave1"), f"127.0.0.1:{bp + 1}", file_size)
        procs.append(js)
        res["jj"] = _catch_up(saddr, end)
        js.stop()
        sport = _ports()
        rs = _rmqcore(os.path.join(base, "rslave"), {"brokerRole": "SLAVE", "brokerId": "1",
                                                     "brokerIP1": "127.0.0.1", "listenPort": str(sport),
                                                     "mappedFileSizeCommitLog": str(file_size),
                                                     "haMasterAddress": f"127.0.0.1:{bp + 1}"},
                      os.path.join(base, "rslave.log"), sport)
        procs.append(rs)
        res["jr"] = _catch_up(f"127.0.0.1:{sport}", end)
        _stop(rs)
        subprocess.run(["bash", sh, "stop"], env=env, capture_output=True, timeout=120)
        mport = _ports()
        rm = _rmqcore(rstore, {"brokerRole": "ASYNC_MASTER", "brokerIP1": "127.0.0.1", "listenPort": str(mport),
                               "mappedFileSizeCommitLog": str(file_size)}, os.path.join(base, "rmaster.log"), mport)
        procs.append(rm)
        assert _max_offset(f"127.0.0.1:{mport}") == end
        js, saddr = _java_slave(cp, build, os.path.join(base, "jslave2"), f"127.0.0.1:{mport + 1}", file_size)
        procs.append(js)
        res["rj"] = _catch_up(saddr, end)
        js.stop()
        _stop(rm)
        base_rate = res["jj"][1] / res["jj"][0] / 1e6
        what = f"{end / MiB:,.0f} MiB of {n:,} 1 KiB records, fresh slave, one file"
        rows.append((f"replication catch-up, Java master → Java slave ({what})", f"{base_rate:,.0f}", "MB/s",
                     "the Java pair, the reference for the two rows below"))
        for key, label in (("rj", "rmqcore master → Java slave"), ("jr", "Java master → rmqcore slave")):
            rate = res[key][1] / res[key][0] / 1e6
            rows.append((f"replication catch-up, {label}", f"{rate:,.0f}", "MB/s",
                         f"{rate / base_rate:.2f}× Java → Java"))
        return rows
    finally:
        for p in procs:
            if isinstance(p, _Java):
                p.stop()
            else:
                _stop(p)
        subprocess.run(["bash", sh, "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(base, ignore_errors=True)
