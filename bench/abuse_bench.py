"""`python -m bench --only abuse`: a normal client's send latency while `rmqcore serve` is abused (issue 36's aim:
its p99 stays within a few ms during each abuse on this machine).

One normal client (a raw gRPC stub in this process, one 1 KiB message at a time to an existing topic, paced at
~500 sends/s, the way a light producer sends) is timed over a window, alone and then during each abuse, which
runs in a child process of its own (so it competes for the machine's cores as an attacker would, not for this
process's GIL):

- **topic-creation storm**: QueryRoute on ever new topic names from 8 concurrent streams, against a server with no
  creation limit (``topicCreatePerSecond=0``: what each creation costs the server, with how many were made and
  the attacker's own time per creation over its first and last 500: a creation's cost should not grow with the
  topics that exist), and against the default limit (100 at once, 10 a second per client host);
- **idle-connection flood**: 1,000 TCP connections from 127.0.0.2 that never speak (the per-peer cap closes all
  but 256 within half a second, the handshake timeout the rest after 10 s);
- **gzip bomb**: requests of 16 GZIP bodies of ~4 KiB that each inflate one byte past the default
  max_message_size, 2 in flight (each refused having inflated 64 KiB, its gzip trailer saying the rest is too
  large; a body whose trailer lies is inflated up to max_message_size, no further), with the server's resident
  memory idle and its peak (VmHWM) before and after the bomb (issue 36's aim: peak RSS under the bomb within 2x
  idle). This is the one gzip-bomb benchmark (bench/gzip_bomb_bench.py, which sent the issue's 2.5 MB requests of
  4 MiB gzip files back to back, was folded in here).

Refused requests past a host's refusal budget are answered late: 200 ms, doubled while the host keeps asking, up
to 1.6 s (refusalBurst, refusalPerSecond, refusalDelayMs, refusalMaxDelayMs; serve/flow_control.RefusalThrottle):
the storm under the default limit and the bomb are refused, so their closed loops send about refusalPerSecond +
(concurrency / 1.6 s) requests a second once past the budget.

Every server runs in a child process on 127.0.0.1 port 0 with a fresh store. ``--quick``: shorter windows.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from bench.serve_bench import SERVICE, Child, _pct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WINDOW_S, QUICK_WINDOW_S = 4.0, 2.0
PACE_S = 0.002                  # the normal client's gap between sends

STORM = r"""
import sys, threading, time, grpc
from rmqcore.server import messaging_pb2 as pb
endpoint, seconds, tag = sys.argv[1], float(sys.argv[2]), sys.argv[3]
ch = grpc.insecure_channel(endpoint)
route = ch.unary_unary("/apache.rocketmq.v2.MessagingService/QueryRoute",
                       request_serializer=pb.QueryRouteRequest.SerializeToString,
                       response_deserializer=pb.QueryRouteResponse.FromString)
md = (("x-mq-client-id", "storm"),)
ok, refused, times, lock = [0], [0], [], threading.Lock()
stop = time.monotonic() + seconds
def worker(w):
    i = 0
    while time.monotonic() < stop:
        t0 = time.perf_counter()
        r = route(pb.QueryRouteRequest(topic=pb.Resource(name=f"storm_{tag}_{w}_{i}")), metadata=md, timeout=30)
        dt = time.perf_counter() - t0
        i += 1
        with lock:
            if r.status.code == pb.OK:
                ok[0] += 1
                times.append(dt)
            else:
                refused[0] += 1
print("ready", flush=True)
sys.stdin.readline()
ts = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
for t in ts: t.start()
for t in ts: t.join()
first = sorted(times[:500]); last = sorted(times[-500:])
med = lambda xs: xs[len(xs) // 2] * 1e3 if xs else float("nan")
print("done", ok[0], refused[0], f"{med(first):.2f}", f"{med(last):.2f}", flush=True)
"""

FLOOD = r"""
import socket, sys, time
port, n, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
socks = []
for i in range(n):
    s = socket.socket()
    try:
        s.bind(("127.0.0.2", 0))
        s.settimeout(2)
        s.connect(("127.0.0.1", port))
        socks.append(s)
    except OSError:
        s.close()
time.sleep(seconds)
print("done", len(socks), flush=True)
"""


BOMB = r"""
import sys, threading, time, uuid, zlib, grpc
from rmqcore.server import messaging_pb2 as pb
endpoint, seconds, per_request = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
# gzip of 4 MiB + 1 of zeros: ~4 KiB on the wire, one byte past the default max_message_size once inflated
co = zlib.compressobj(9, zlib.DEFLATED, 31)
bomb = co.compress(bytes((4 << 20) + 1)) + co.flush()
ch = grpc.insecure_channel(endpoint, options=[("grpc.max_send_message_length", -1)])
send = ch.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage",
                      request_serializer=pb.SendMessageRequest.SerializeToString,
                      response_deserializer=pb.SendMessageResponse.FromString)
md = (("x-mq-client-id", "bomb"),)
def request():
    req = pb.SendMessageRequest()
    for _ in range(per_request):
        m = req.messages.add()
        m.topic.name = "bench_t"
        m.body = bomb
        m.system_properties.message_id = uuid.uuid4().hex.upper()
        m.system_properties.message_type = pb.NORMAL
        m.system_properties.body_encoding = pb.GZIP
    return req
sent, stored, lock = [0], [0], threading.Lock()
stop = time.monotonic() + seconds
def worker():
    while time.monotonic() < stop:
        r = send(request(), metadata=md, timeout=60)
        with lock:
            sent[0] += 1
            stored[0] += r.status.code == pb.OK
print("ready", flush=True)
sys.stdin.readline()
ts = [threading.Thread(target=worker) for _ in range(2)]
for t in ts: t.start()
for t in ts: t.join()
print("done", sent[0], stored[0], len(bomb), flush=True)
"""


def _serve(base: str, name: str, conf: dict) -> Child:
    store = os.path.join(base, name)
    from rmqcore.broker import Broker
    with Broker.open(store) as b:
        b.create_topic("bench_t", 8)
    path = store + ".conf"
    with open(path, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in conf.items()))
    return Child([sys.executable, "-m", "rmqcore", "serve", store, "--listen", "127.0.0.1:0", "--config", path],
                 store + ".log")


def normal_client(endpoint: str, seconds: float, during=None) -> tuple[float, float, int, str]:
    """(p50 ms, p99 ms, sends, what ``during`` said): the normal client's sends over ``seconds``, with ``during``
    (a callable started just before the window and joined after it) running alongside."""
    import grpc

    from rmqcore.server import messaging_pb2 as pb
    with grpc.insecure_channel(endpoint) as ch:
        send = ch.unary_unary(SERVICE + "SendMessage", request_serializer=pb.SendMessageRequest.SerializeToString,
                              response_deserializer=pb.SendMessageResponse.FromString)
        md = (("x-mq-client-id", "bench-normal"),)

        def request():
            req = pb.SendMessageRequest()
            m = req.messages.add()
            m.topic.name = "bench_t"
            m.body = b"x" * 1024
            m.system_properties.message_id = uuid.uuid4().hex.upper()
            m.system_properties.message_type = pb.NORMAL
            return req
        warm = time.perf_counter() + 0.5                        # channel, route and the store's pages warm:
        while time.perf_counter() < warm:                       # the first sends of a window were 10-20 ms
            send(request(), metadata=md, timeout=30)
            time.sleep(PACE_S)
        said = [""]
        helper = None
        if during is not None:
            helper = threading.Thread(target=lambda: said.__setitem__(0, during()), daemon=True)
            helper.start()
            time.sleep(0.3)                                     # the abuse under way before the window opens
        lat = []
        failed = 0
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                r = send(request(), metadata=md, timeout=30)
                ok = r.status.code == pb.OK
            except grpc.RpcError:
                ok = False
            dt = time.perf_counter() - t0
            lat.append(dt)
            failed += not ok
            time.sleep(max(0.0, PACE_S - dt))
        if helper is not None:
            helper.join()
    note = said[0] + (f"; {failed} sends failed" if failed else "")
    return _pct(lat, 0.5) * 1e3, _pct(lat, 0.99) * 1e3, len(lat), note


def _memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid``, MiB."""
    with open(f"/proc/{pid}/status") as f:
        return {k: int(v.split()[0]) // 1024 for k, _, v in (line.partition(":") for line in f)
                if k in ("VmRSS", "VmHWM")}


def _child_abuse(script: str, *args) -> str:
    p = subprocess.Popen([sys.executable, "-c", script, *map(str, args)], cwd=ROOT, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("ready")
    p.stdin.write("go\n")
    p.stdin.flush()
    out = p.stdout.readline().split()
    p.wait(60)
    return " ".join(out)


def run(quick: bool = False) -> list[tuple[str, str, str, str]]:
    seconds = QUICK_WINDOW_S if quick else WINDOW_S
    base = tempfile.mkdtemp(prefix="rmqcore-abuse-bench-")
    rows = []
    servers: list[Child] = []
    try:
        # one server at a time: a server left running after its abuse (the unlimited storm's thousands of topics)
        # disturbs the next one's measurement on these 2 cores
        limited = _serve(base, "limited", {})
        servers.append(limited)

        def row(what, res, note=""):
            p50, p99, n, said = res
            rows.append((f"abuse: normal client's send p50 / p99, {what}", f"{p50:.2f} / {p99:.2f}", "ms",
                         "; ".join(x for x in (f"{n:,} sends paced at {PACE_S * 1e3:.0f} ms", note, said) if x)))

        row("alone", normal_client(limited.endpoint, seconds))
        idle_rss = _memory(limited.proc.pid)["VmRSS"]

        def storm(server, tag):
            def go():
                _, ok, refused, first, last = _child_abuse(STORM, server.endpoint, seconds + 0.6, tag).split()
                return (f"{int(ok):,} topics created, {int(refused):,} refused; a creation took {first} ms "
                        f"(first 500) and {last} ms (last 500), median, as the attacker saw it")
            return go
        row("topic-creation storm, default limit", normal_client(limited.endpoint, seconds, storm(limited, "l")),
            "8 concurrent QueryRoutes on new names; topicCreateBurst 100, topicCreatePerSecond 10")
        port = int(limited.endpoint.rsplit(":", 1)[1])

        def flood():
            out = _child_abuse(FLOOD, port, 1000, seconds + 0.6).split()
            return f"{int(out[1]):,} connections opened from 127.0.0.2"
        row("1,000 idle connections from one peer", normal_client(limited.endpoint, seconds, flood),
            "never speaking; --max-connections-per-peer 256")

        def bomb():
            _, sent, stored, size = _child_abuse(BOMB, limited.endpoint, seconds + 0.6, 16).split()
            return (f"{int(sent):,} requests of 16 bodies of {int(size):,} bytes each inflating past 4 MiB, "
                    f"{int(stored):,} accepted")
        peak_before = _memory(limited.proc.pid)["VmHWM"]
        res = normal_client(limited.endpoint, seconds, bomb)
        peak_after = _memory(limited.proc.pid)["VmHWM"]
        row("gzip bomb", res, f"2 concurrent requests; server RSS idle {idle_rss} MiB, peak (VmHWM) "
                              f"{peak_before} MiB before the bomb, {peak_after} MiB after")
        servers.remove(limited)
        limited.stop()
        # what each creation costs the server when nothing limits them (not the default: topicCreatePerSecond=0)
        unlimited = _serve(base, "unlimited", {"topicCreatePerSecond": "0"})
        servers.append(unlimited)
        row("topic-creation storm, no creation limit", normal_client(unlimited.endpoint, seconds,
                                                                     storm(unlimited, "u")),
            "8 concurrent QueryRoutes on new names; topicCreatePerSecond=0 (not the default)")
    finally:
        for s in servers:
            s.stop()
    return rows


if __name__ == "__main__":
    for r in run("--quick" in sys.argv):
        print(" | ".join(r))
