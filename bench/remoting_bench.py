"""`python -m bench --only remoting`: `rmqcore serve --remoting` against the Java RocketMQ 4.9.7 broker, through the
same Java client, in the same run (issue 37's aims).

- The client: the java-broker harness's ``Bench`` (RocketMQ 4.9.7's own DefaultMQProducer, DefaultLitePullConsumer
  and DefaultMQPushConsumer; ../shared/java-broker, its build in ~/.cache/rmqcore/jbroker as tests/java_util.py
  finds it): sync send from 1 thread, from 8 threads, async with 64 in flight, lite-pull consume (32 a pull),
  push consume, 1 KiB bodies, 4 queues.
- The servers, each in a child process on 127.0.0.1 with its own store in a temp dir:
  * the Java 4.9.7 name server + broker (``run.sh start``: ASYNC_FLUSH, ASYNC_MASTER);
  * ``rmqcore serve STORE --remoting 127.0.0.1:0 --namesrv 127.0.0.1:0`` (ASYNC_FLUSH, the default);
  * an echo server (``python -m bench.remoting_bench echo``): a pure asyncio stub with rmqcore's compiled framing
    (FrameDecoder, encode_header) and no store, answering a send with a canned SendResult and a route with itself:
    the protocol's floor on this machine. Sends only.
- Server CPU per message: utime + stime of the server process over each phase (Bench reads /proc/PID/stat of
  ``broker_pid``), divided by the messages of that phase. The Java name server is not counted (idle in the phases).
- Pull copies: an in-process rmqcore RemotingServer answers lite pulls from a raw socket client; tracemalloc's peak
  over each pull answer, per byte of records it sent (a join of the records into one bytes object would show ~1.0;
  records written from the mapped files, ~0).

Method: every server starts once; each round runs Bench once per server (all phases), the order rotating from round
to round (java, rmqcore, echo / rmqcore, echo, java / ...), so each sees the same minutes of the shared machine.
Per server and phase the best round counts (highest rate; its CPU figure is that round's). ``--quick``: one round of
2,000 messages a phase (~1 min: the Java broker starts in 10-25 s). ``RMQCORE_REMOTING_BASELINE=DIR`` adds the serve of another checkout of rmqcore, built in
place (e.g. the commit before a change), to the same rounds: before/after from one run.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# 30,000 messages a phase after 5,000 untimed sends, as the Java broker's figures in issue 37 and
# ../shared/reference/remoting.md were taken: a phase of 10,000 lasted 0.1-0.7 s in the async and consume phases and
# measured mostly the warm-up of the client's new JVM and the push consumer's start, the same on every server.
FULL = {"rounds": 3, "n": 30_000, "warm": 5_000}
QUICK = {"rounds": 1, "n": 2_000, "warm": 500}
SEND_PHASES = ("sync1", "sync8", "async_w64")
PHASES = SEND_PHASES + ("consume", "push")
# Bench's phases= names -> the keys of its RESULT line (threads=8, window=64)
BENCH_PHASES = {"sync1": "sync1", "sync8": "syncN", "async_w64": "async", "consume": "consume", "push": "push"}
LABELS = {"sync1": "sync send, 1 thread", "sync8": "sync send, 8 threads", "async_w64": "async send, 64 in flight",
          "consume": "lite-pull consume (32 a pull)", "push": "push consume"}
# issue 37's aims
AIM_RATE, AIM_CPU, AIM_ECHO = 1.3, 0.5, 2.0


def _log(msg: str) -> None:
    print(f"[bench] remoting: {msg}", file=sys.stderr, flush=True)


# -- the echo server --------------------------------------------------------------------------------------------

def _echo_main(listen: str) -> int:
    """The no-store floor: rmqcore's framing, a canned answer per request, routes naming itself."""
    from rmqcore.remoting._remoting_codec import FrameDecoder, encode_header
    from rmqcore.remoting.codes import (GET_ROUTEINFO_BY_TOPIC, SEND_MESSAGE, SEND_MESSAGE_V2, SUCCESS)
    from rmqcore.remoting.remoting_command import ONEWAY_FLAG, RESPONSE_FLAG
    host, port = listen.rsplit(":", 1)
    state = {"offset": 0}

    def route(addr: str) -> bytes:
        return json.dumps({"brokerDatas": [{"brokerAddrs": {"0": addr}, "brokerName": "echo", "cluster": "echo"}],
                           "filterServerTable": {}, "queueDatas": [
                               {"brokerName": "echo", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                                "writeQueueNums": 4}]}, separators=(",", ":")).encode()

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.t = transport
            self.dec = FrameDecoder()

        def data_received(self, data):
            out = []
            for cmd in self.dec.feed(data):
                if cmd.flag & (ONEWAY_FLAG | RESPONSE_FLAG):
                    continue
                body = b""
                ext = None
                if cmd.code in (SEND_MESSAGE_V2, SEND_MESSAGE):
                    e = cmd.ext_fields
                    state["offset"] += 1
                    ext = {"msgId": "7F00000100002A9F0000000000000000",
                           "queueId": e.get("e") or e.get("queueId") or "0", "queueOffset": str(state["offset"]),
                           "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
                elif cmd.code == GET_ROUTEINFO_BY_TOPIC:
                    body = state["route"]
                out.append(encode_header(cmd.serialize_type, SUCCESS, cmd.opaque, RESPONSE_FLAG, None, ext,
                                         len(body)) + body)
            if out:
                self.t.write(b"".join(out))

    async def main():
        srv = await asyncio.get_running_loop().create_server(Echo, host, int(port))
        bound = srv.sockets[0].getsockname()[1]
        state["route"] = route(f"{host}:{bound}")
        print(f"remoting on {host}:{bound}", flush=True)
        await srv.serve_forever()
    from rmqcore.serve.cli import _loop_factory
    try:
        with asyncio.Runner(loop_factory=_loop_factory("auto")) as runner:   # serve's own loop: a fair floor
            runner.run(main())
    except KeyboardInterrupt:
        pass
    return 0


# -- servers ----------------------------------------------------------------------------------------------------

class Server:
    """A server in a child process: ``namesrv`` (host:port for Bench's ``ns=``), ``pid`` (the process whose CPU
    counts)."""
    name: str
    namesrv: str
    pid: int

    def stop(self) -> None:
        raise NotImplementedError


class PyServer(Server):
    def __init__(self, name: str, cmd: list[str], log_path: str, env=None, cwd: str = ROOT):
        self.name = name
        self.log_path = log_path
        with open(log_path, "w") as err:    # a file nobody has to read: the child never blocks on it
            self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=err, text=True,
                                         env=env)
        lines = {}
        while "namesrv" not in lines and "remoting" not in lines or ("--namesrv" in cmd and "namesrv" not in lines):
            line = self.proc.stdout.readline()
            if not line:
                self.stop()
                with open(log_path) as f:
                    raise RuntimeError(f"{name} did not start: {f.read()[-2000:]}")
            word, _, addr = line.strip().partition(" on ")
            lines[word] = addr
        self.namesrv = lines.get("namesrv") or lines["remoting"]
        self.pid = self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _free_port_block() -> int:
    """A port p with p-2, p, p+1 free (the Java broker also binds its VIP and HA ports), and p+100 for its name
    server."""
    for _ in range(200):
        p = random.randint(20_000, 50_000)
        socks = []
        try:
            for q in (p - 2, p, p + 1, p + 100):
                s = socket.socket()
                s.bind(("127.0.0.1", q))
                socks.append(s)
            return p
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port block for the Java broker")


def java_harness() -> tuple[str, str]:
    """(harness dir, build dir) of ../shared/java-broker, set up as the Java tests set it up
    (tests/java_util.prepare_build); RuntimeError saying what is missing."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    try:
        import java_util
    finally:
        sys.path.pop(0)
    build, why = java_util.prepare_build()
    if build is None:
        raise RuntimeError(why)
    return java_util.harness(), build


class JavaServer(Server):
    """The Java 4.9.7 name server + broker by the harness's ``run.sh start`` (ASYNC_FLUSH), on free ports."""

    def __init__(self, harness: str, build: str, run_dir: str):
        self.name = "java"
        port = _free_port_block()
        self.env = {**os.environ, "BUILD": build, "RUN_DIR": run_dir, "NS_PORT": str(port + 100),
                    "BROKER_PORT": str(port), "FLUSH": "ASYNC_FLUSH", "COMMITLOG_SIZE": str(256 << 20)}
        self.run_sh = os.path.join(harness, "run.sh")
        r = subprocess.run(["bash", self.run_sh, "start"], env=self.env, capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            self.stop()
            raise RuntimeError(f"the Java broker did not start: {r.stdout[-1500:]} {r.stderr[-1500:]}")
        with open(os.path.join(run_dir, "broker.pid")) as f:
            self.pid = int(f.read())
        self.namesrv = f"127.0.0.1:{port + 100}"

    def stop(self) -> None:
        subprocess.run(["bash", self.run_sh, "stop"], env=self.env, capture_output=True, timeout=120)


def bench_once(harness: str, env: dict, server: Server, phases, n: int, warm: int) -> dict:
    """One Bench run against ``server``: {phase: its JSON figures}."""
    args = ["bash", os.path.join(harness, "run.sh"), "java", "Bench", f"ns={server.namesrv}",
            f"broker_pid={server.pid}", f"phases={','.join(BENCH_PHASES[p] for p in phases)}", f"n={n}", f"warm={warm}", "threads=8",
            "window=64", "queues=4", "size=1024", "timeout_s=120"]
    try:
        r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"Bench against {server.name} did not end in 300 s") from None
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if r.returncode != 0 or line is None:
        raise RuntimeError(f"Bench against {server.name} failed ({r.returncode}): {r.stdout[-1500:]} "
                           f"{r.stderr[-1500:]}")
    return json.loads(line[len("RESULT "):])


def cpu_us(ph: dict) -> float:
    """Server CPU per message of one phase (µs); Bench gives the server's CPU as a % of the phase's wall time."""
    pct = ph.get("broker_cpu_pct", -1)
    msgs = ph.get("ok", ph.get("msgs", 0))
    sec = ph.get("sec", ph.get("sec_incl_start", 0))
    if pct < 0 or not msgs:
        return float("nan")
    return pct / 100 * sec / msgs * 1e6


# -- pull copies ------------------------------------------------------------------------------------------------

def pull_copies(base: str, messages: int = 2_000, per_pull: int = 32) -> dict:
    """tracemalloc's peak over the handling of each pull request (RemotingConnection.data_received: decode, the
    store's get, the answer written to the transport, which is where asyncio joins or buffers what it is given), per
    byte of records the answer carried, in an in-process RemotingServer.

    The server's loop runs in a thread; a blocking raw client (rmqcore.remoting.remoting_command's reference
    encoder) sends one PULL_MESSAGE at a time and reads its answer. A server that joins the records into one bytes
    object peaks at >= the records' size: >= 1.0 per pulled byte; one that hands the kernel views of the mapped
    files, at the header and per-request objects only. (The peak is taken around data_received, not the whole
    round trip: asyncio's socket read allocates a 256 KiB buffer per recv, which is not a copy of records.)"""
    import threading
    import tracemalloc

    from rmqcore import Message
    from rmqcore.broker import Broker
    from rmqcore.remoting import remoting_command as rc
    from rmqcore.remoting.codes import PULL_MESSAGE, SUCCESS
    from rmqcore.remoting.server import RemotingConnection, RemotingServer

    broker = Broker.open(os.path.join(base, "pullcopy"))
    topic = "pullcopy"
    broker.create_topic(topic, 1)
    for i in range(messages):
        broker.send(Message(topic, b"x" * 1024, 0, properties={"KEYS": f"k{i}"}))
    broker.store.wait_dispatched(10.0)
    peaks: list[int] = []

    class Measured(RemotingConnection):
        def data_received(self, data):
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            super().data_received(data)
            peaks.append(tracemalloc.get_traced_memory()[1] - before)

    class Server(RemotingServer):
        async def start(self):
            self.loop = asyncio.get_running_loop()
            srv = await self.loop.create_server(lambda: Measured(self), self.host, 0)
            self.port = srv.sockets[0].getsockname()[1]
            self._servers.append(srv)
            return self
    loop = asyncio.new_event_loop()
    srv = Server(broker, host="127.0.0.1", port=0)
    ready = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(srv.start())
        ready.set()
        loop.run_forever()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    ready.wait(10)
    s = socket.create_connection(("127.0.0.1", srv.port))
    ratios, sent = [], 0
    offset, opaque = 0, 0
    try:
        tracemalloc.start()
        while offset < messages:
            opaque += 1
            s.sendall(rc.encode_request(rc.RemotingCommand(PULL_MESSAGE, opaque=opaque, ext_fields={
                "consumerGroup": "pullcopy_g", "topic": topic, "queueId": "0", "queueOffset": str(offset),
                "maxMsgNums": str(per_pull), "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
                "subVersion": "0"})))
            data = b""
            while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise RuntimeError("the server closed the pull connection")
                data += chunk
            (resp,), _ = rc.decode_frames(data)
            if resp.code != SUCCESS:
                raise RuntimeError(f"pull at {offset}: code {resp.code} {resp.remark}")
            offset = int(resp.ext_fields["nextBeginOffset"])
            # the answer can arrive before data_received has returned and recorded its peak (writev)
            for _ in range(1000):
                if len(peaks) >= opaque:
                    break
                time.sleep(0.001)
            ratios.append(peaks[opaque - 1] / len(resp.body))
            sent += len(resp.body)
    finally:
        tracemalloc.stop()
        s.close()
        asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        th.join(10)
        broker.close()
    ratios.sort()
    return {"pulls": len(ratios), "bytes": sent, "median": ratios[len(ratios) // 2],
            "p90": ratios[int(len(ratios) * 0.9)]}


# -- the run ----------------------------------------------------------------------------------------------------

def run(quick: bool = False, base_dir: str | None = None) -> list[tuple[str, str, str, str]]:
    cfg = QUICK if quick else FULL
    harness, build = java_harness()
    base = tempfile.mkdtemp(prefix="rmqcore-remoting-bench-", dir=base_dir)
    servers: dict[str, Server] = {}
    rows = []
    try:
        t = time.perf_counter()
        servers["java"] = JavaServer(harness, build, os.path.join(base, "java"))
        servers["rmqcore"] = PyServer("rmqcore", [sys.executable, "-m", "rmqcore", "serve", os.path.join(base, "rmq"),
                                                  "--remoting", "127.0.0.1:0", "--namesrv", "127.0.0.1:0"],
                                      os.path.join(base, "rmq.log"))
        servers["echo"] = PyServer("echo", [sys.executable, "-m", "bench.remoting_bench", "echo", "127.0.0.1:0"],
                                   os.path.join(base, "echo.log"))
        baseline = os.environ.get("RMQCORE_REMOTING_BASELINE")
        if baseline:
            # another checkout of rmqcore (built in place), e.g. before a change: its serve in the same rounds
            servers["baseline"] = PyServer(
                "baseline", [sys.executable, "-m", "rmqcore", "serve", os.path.join(base, "baseline"), "--remoting",
                             "127.0.0.1:0", "--namesrv", "127.0.0.1:0"], os.path.join(base, "baseline.log"),
                env={**os.environ, "PYTHONPATH": baseline}, cwd=baseline)
        _log(f"servers up in {time.perf_counter() - t:.1f} s")
        env = {**os.environ, "BUILD": build, "RUN_DIR": os.path.join(base, "client")}
        names = list(servers)
        results: dict[str, list[dict]] = {n: [] for n in names}
        loads = []
        failed: list[str] = []
        for i in range(cfg["rounds"]):
            k = i % len(names)
            for name in names[k:] + names[:k]:
                phases = SEND_PHASES if name == "echo" else PHASES
                t = time.perf_counter()
                loads.append(os.getloadavg()[0])
                try:
                    res = bench_once(harness, env, servers[name], phases, cfg["n"], cfg["warm"])
                except RuntimeError as e:     # one failed round costs its figures, not the others'
                    failed.append(f"round {i + 1} {name}: {str(e)[:200]}")
                    _log(failed[-1])
                    continue
                results[name].append(res)
                _log(f"round {i + 1}: {name} in {time.perf_counter() - t:.1f} s: " + ", ".join(
                    f"{k} {v['msgs_per_s']:,.0f}/s {cpu_us(v):.1f} µs" for k, v in res.items()
                    if isinstance(v, dict) and "msgs_per_s" in v))

        def best(name, phase):
            rs = [r[phase] for r in results[name] if phase in r]
            return max(rs, key=lambda ph: ph["msgs_per_s"]) if rs else None
        load = f"load {min(loads):.2f}–{max(loads):.2f}"
        for phase in PHASES:
            j, r, e = best("java", phase), best("rmqcore", phase), best("echo", phase)
            if j is None or r is None:
                rows.append((f"remoting: Java client {LABELS[phase]}: no figure", "—", "—",
                             "; ".join(failed) or "no round ran"))
                continue
            cj, cr = cpu_us(j), cpu_us(r)
            note = (f"{r['msgs_per_s'] / j['msgs_per_s']:.2f}× the Java 4.9.7 broker ({j['msgs_per_s']:,.0f}; aim "
                    f"≥ {AIM_RATE}×); server CPU {cr:.1f} µs/msg = {cr / cj:.2f}× Java's {cj:.1f} (aim ≤ {AIM_CPU}×)")
            if e is not None:
                ce = cpu_us(e)
                note += (f"; echo floor {e['msgs_per_s']:,.0f} msg/s, {ce:.1f} µs/msg (rmqcore {cr / ce:.2f}× its "
                         f"CPU, aim ≤ {AIM_ECHO}×)")
            b = best("baseline", phase) if "baseline" in results else None
            if b is not None:
                note += (f"; baseline ({os.environ['RMQCORE_REMOTING_BASELINE']}) {b['msgs_per_s']:,.0f} msg/s, "
                         f"{cpu_us(b):.1f} µs/msg")
            if "p50_us" in r:
                note += f"; p50 {r['p50_us']:.0f} µs (Java {j['p50_us']:.0f})"
            rows.append((f"remoting: Java client {LABELS[phase]}, 1 KiB, rmqcore serve --remoting",
                         f"{r['msgs_per_s']:,.0f}", "msgs/s", f"{note}; best of {cfg['rounds']}, {load}"))
        for f in failed:
            rows.append(("remoting: a failed round", "—", "—", f.replace("|", "/")))
        try:
            pc = pull_copies(base)
        except Exception as e:                  # reported as a row: the rows above stand
            rows.append(("remoting: bytes copied per pulled byte: FAILED", "—", "—",
                         f"{type(e).__name__}: {e}".replace("|", "/")[:200]))
            return rows
        rows.append(("remoting: bytes copied per pulled byte (tracemalloc peak over a pull answer / record bytes "
                     "sent)", f"{pc['median']:.3f}", "ratio",
                     f"median of {pc['pulls']} pulls of 32 × 1 KiB records ({pc['bytes']:,} bytes), 90th percentile "
                     f"{pc['p90']:.3f}; a join of the records would be ≥ 1.0"))
    finally:
        for s in servers.values():
            try:
                s.stop()
            except Exception as e:          # pragma: no cover - reported, the others still stop
                _log(f"stopping {s.name}: {e}")
        shutil.rmtree(base, ignore_errors=True)
    return rows


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "echo":
        sys.exit(_echo_main(sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1:0"))
    for row in run("--quick" in sys.argv):
        print(" | ".join(row))
