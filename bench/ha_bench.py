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

SYNC_MASTER sends (``sync_master_rows``, the section at the end): the harness's Java `Bench` from 8 threads and from
1 against Java SYNC_MASTER + Java SLAVE, rmqcore SYNC_MASTER + Java SLAVE and Java SYNC_MASTER + rmqcore SLAVE.

Needs the JDK and the harness build (tests/java_util.py: $RMQCORE_JBROKER_BUILD, default ~/.cache/rmqcore/jbroker,
made by ../shared/java-broker/prebuilt.sh); without them the row says so. ``--quick``: 30,000 records (~35 MiB) in
a 64 MiB file; full: 300,000 (~350 MiB) in a 512 MiB file.
"""
from __future__ import annotations

import json
import os
import re
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
        # the restarted master answers once it is up (-1 before: the harness's start returns when its port is
        # open, the runtime info may come a moment later); its end is the one the Bench left
        deadline = time.monotonic() + 60
        while _max_offset(f"127.0.0.1:{bp}") < 0 and time.monotonic() < deadline:
            time.sleep(0.1)
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


# -- SYNC_MASTER sends ----------------------------------------------------------------------------------------------
# The harness's Java `Bench` (RocketMQ 4.9.7's DefaultMQProducer, retryTimesWhenSendFailed 0, so a
# FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE answer is returned to Bench, not retried) against a SYNC_MASTER whose
# slave must have each record before the send is answered (CommitLog.submitReplicaRequest / GroupTransferService in
# 4.9.7). One Java name server; the master registers with it (Bench finds it there); the slave is given
# haMasterAddress, as in the catch-up rows. ASYNC_FLUSH on every broker: the rows compare replication, not disk
# flush.

SYNC_PAIRS = (("jj", "Java SYNC_MASTER + Java SLAVE"), ("rj", "rmqcore SYNC_MASTER + Java SLAVE"),
              ("jr", "Java SYNC_MASTER + rmqcore SLAVE"))
_SYNC_CONF = {"brokerClusterName": "HaSyncBench", "brokerName": "broker-a", "flushDiskType": "ASYNC_FLUSH",
              "brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1", "autoCreateTopicEnable": "true"}
# the Java broker only (rmqcore's remoting front has no send-queue timeout): a send waiting longer than this in the
# send queue is refused (SYSTEM_BUSY), 200 ms by default; raised so that a loaded 2-core machine's refusals do not
# count as the pair's failures
_SYNC_JAVA_CONF = {"waitTimeMillsInSendQueue": "5000"}


class _Rmqcore:
    """`rmqcore serve --remoting` (``_rmqcore``) with the ``pid`` Bench reads the server's CPU from."""

    def __init__(self, store, conf, log_path, port):
        self.proc = _rmqcore(store, conf, log_path, port)
        self.pid = self.proc.pid

    def stop(self):
        _stop(self.proc)


def _sync_broker(kind, role, cp, build, run_dir, ns, file_size, ha_master=None):
    """A Java ("j") or rmqcore ("r") broker of the pair (``role``: a master's, or SLAVE): (its process, its remoting
    address)."""
    port = _ports()
    conf = {**_SYNC_CONF, "brokerRole": role, "brokerId": 1 if role == "SLAVE" else 0, "listenPort": port,
            "mappedFileSizeCommitLog": file_size}
    if role != "SLAVE":
        conf["namesrvAddr"] = ns
    else:
        conf["haMasterAddress"] = ha_master
    if kind == "j":
        conf.update(storePathRootDir=f"{run_dir}/store", storePathCommitLog=f"{run_dir}/store/commitlog",
                    **_SYNC_JAVA_CONF)
        proc = _Java(cp, run_dir, conf, build)
        proc.pid = proc.proc.pid
    else:
        os.makedirs(run_dir, exist_ok=True)
        proc = _Rmqcore(os.path.join(run_dir, "store"), {k: str(v) for k, v in conf.items()},
                        os.path.join(run_dir, "serve.log"), port)
    return proc, f"127.0.0.1:{port}"


def _sync_bench(harness, build, run_dir, ns, pid, threads, n, warm, timeout_s) -> dict:
    """One Bench run: ``threads`` 1 -> its sync1 phase (stops at the first answer that is not SEND_OK, which it
    prints), else syncN (counts them); {"msgs", "errors", "msgs_per_s", "p50_us", "p99_us", ..., "failure"}."""
    phase = "sync1" if threads == 1 else "syncN"
    env = {**os.environ, "BUILD": build, "RUN_DIR": run_dir, "CLIENT_HEAP": "256m"}
    os.makedirs(run_dir, exist_ok=True)
    out_path, err_path = os.path.join(run_dir, "bench.out"), os.path.join(run_dir, "bench.err")
    with open(out_path, "w") as out, open(err_path, "w") as err:
        # run.sh execs java: this pid is the JVM's
        p = subprocess.Popen(["bash", os.path.join(harness, "run.sh"), "java", "Bench", f"ns={ns}",
                              f"broker_pid={pid}", f"phases={phase}", f"n={n}", f"warm={warm}",
                              f"threads={threads}", "queues=4", "size=1024", f"timeout_s={timeout_s}"],
                             env=env, stdout=out, stderr=err, text=True)
    deadline = time.monotonic() + timeout_s + 120
    failed = None
    while p.poll() is None:
        # Bench's main throws on a warm-up or sync1 answer that is not SEND_OK (IllegalStateException naming the
        # SendResult); the producer's non-daemon threads then keep the JVM up: stop it, with what it said
        said = open(err_path).read()
        if 'Exception in thread "main"' in said:
            time.sleep(0.5)             # the rest of the stack trace
            failed = open(err_path).read()
        elif time.monotonic() > deadline:
            failed = f"Bench did not end in {timeout_s + 120} s"
        if failed is not None:
            p.kill()
            break
        time.sleep(0.2)
    p.wait(30)
    text = open(out_path).read()
    line = next((ln for ln in text.splitlines() if ln.startswith("RESULT ")), None)
    if failed is not None or line is None:
        said = failed or (text + open(err_path).read())
        why = next((ln for ln in said.splitlines() if "sendStatus=" in ln or "Exception" in ln), said[-300:])
        m = re.search(r"([\w-]+): SendResult \[sendStatus=(\w+)", why)
        return {"msgs": 0, "errors": 1, "msgs_per_s": 0.0,
                "failure": f"{m[1]} send answered {m[2]}" if m else why.strip()[:300]}
    res = json.loads(line[len("RESULT "):])
    return res["sync1" if threads == 1 else f"sync{threads}"]


def _replicated(master: str, slave: str, timeout: float = 60.0) -> tuple[int, int]:
    """(master's max offset, slave's) once the slave reached it, or at ``timeout``."""
    end = _max_offset(master)
    deadline = time.monotonic() + timeout
    while (off := _max_offset(slave)) < end and time.monotonic() < deadline:
        time.sleep(0.1)
    return end, off


def sync_master_rows(quick: bool = False) -> list[tuple[str, str, str, str]]:
    """The rows of the SYNC_MASTER sends: each pair of SYNC_PAIRS, Bench with 8 threads then 1 thread."""
    harness, build = _build()
    if harness is None:
        return [("SYNC_MASTER sends (ha)", "-", "", NOT_RUN)]
    # n per Bench phase; timeout_s caps a slow pair's phase (its rate is then over the sends it made)
    n8, n1, warm, timeout_s = (6_000, 1_500, 500, 20) if quick else (40_000, 8_000, 3_000, 60)
    file_size = 128 * MiB
    cp = os.path.join(build, "classes") + ":" + open(os.path.join(build, "cp.txt")).read().strip()
    base = tempfile.mkdtemp(prefix="rmqcore-ha-sync-bench-")
    procs: list = []
    res = {}
    try:
        ns_port = _ports()
        procs.append(_Java(cp, os.path.join(base, "ns"), {"listenPort": ns_port,
                                                         "kvConfigPath": f"{base}/ns/kv.json",
                                                         "configStorePath": f"{base}/ns/namesrv.properties"},
                           build, main="org.apache.rocketmq.namesrv.NamesrvStartup"))
        ns = f"127.0.0.1:{ns_port}"
        for key, _ in SYNC_PAIRS:
            d = os.path.join(base, key)
            master, maddr = _sync_broker(key[0], "SYNC_MASTER", cp, build, d + "-master", ns, file_size)
            procs.append(master)
            mport = int(maddr.rsplit(":", 1)[1])
            slave, saddr = _sync_broker(key[1], "SLAVE", cp, build, d + "-slave", ns, file_size,
                                        ha_master=f"127.0.0.1:{mport + 1}")
            procs.append(slave)
            out = res[key] = {}
            # a fresh pair's first put creates the first commitlog file on both sides (the Java broker's 128 MiB
            # mapping and its slave's take seconds on a loaded machine: the Java pair's first send was answered
            # FLUSH_SLAVE_TIMEOUT in 3 runs of 5, and Bench's warm-up stops at it): one send first, again until
            # SEND_OK (3 tries), what it was answered shown in the rows
            out["primed"] = []
            for _ in range(3):
                first = _sync_bench(harness, build, d + f"-prime{len(out['primed'])}", ns, master.pid, 1, 1, 0, 30)
                if "failure" not in first:
                    break
                out["primed"].append(first["failure"])
            for threads, n in ((8, n8), (1, n1)):
                out[threads] = _sync_bench(harness, build, d + f"-bench{threads}", ns, master.pid, threads, n, warm,
                                           timeout_s)
            out["offsets"] = _replicated(maddr, saddr)
            for p in (slave, master):
                p.stop()
                procs.remove(p)
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(base, ignore_errors=True)
    rows = []
    for threads in (8, 1):
        ref = res["jj"][threads]["msgs_per_s"]
        for key, label in SYNC_PAIRS:
            ph = res[key][threads]
            m_end, s_end = res[key]["offsets"]
            checks = [f"{ph['msgs']:,} sends, {ph.get('errors', 0)} not SEND_OK"
                      + (f" ({ph['failure']})" if "failure" in ph else ""),
                      "slave at master's max offset" if s_end >= m_end else
                      f"slave NOT caught up: {s_end:,} of {m_end:,}"]
            if res[key]["primed"]:
                checks.append(f"the pair's first send(s) before Bench: {'; '.join(res[key]['primed'])}")
            if ph.get("p50_us") is not None:
                checks.append(f"p50/p99 {ph['p50_us'] / 1e3:.1f}/{ph['p99_us'] / 1e3:.1f} ms")
            if ph.get("broker_cpu_pct", -1) >= 0:
                checks.append(f"master CPU {ph['broker_cpu_pct']} %")
            vs = "the reference pair" if key == "jj" else (f"{ph['msgs_per_s'] / ref:.2f}× the Java pair" if ref
                                                           else "the Java pair failed")
            rows.append((f"SYNC_MASTER sends, {label} (Java Bench, {threads} thread{'s' * (threads > 1)}, 1 KiB, "
                         "ASYNC_FLUSH)", f"{ph['msgs_per_s']:,.0f}", "msg/s", f"{vs}; " + "; ".join(checks)))
    return rows
