"""`python -m bench --only serve`: `rmqcore serve` through the official client and a raw gRPC stub, against a no-op
server of the same service in the same run (the transport's ceiling on this machine).

- official client (rocketmq-python-client): send from 1 thread and from 8 threads, SimpleConsumer receive + ack;
- raw stub (grpc.aio, this process): 64 requests in flight with 1 message each, and with 32 messages each;
- server CPU per message (the server process's utime + stime over the raw 1-message run);
- SYNC_FLUSH: 16 concurrent raw senders against 1, with the puts per flush of each: sends acknowledged over the
  delta of ``rmqcore_flushes`` on the server's /metrics (``rmqcore serve --http``), which shows directly whether
  concurrent sends share flushes; and the same 16 senders against an ASYNC_FLUSH twin of that server (what
  durability costs once flushes are shared).

Method: best of interleaved rounds. The machine is 2 shared vCPUs and noisy; measured once per server, with all the
no-op runs first, the same ratio swung by ±10 % from run to run (8-thread sends 0.75, 0.82, 0.93× back to back).
So every server starts once and stays up for the whole run (an idle one costs next to nothing), and each scenario
runs ROUNDS rounds that alternate the servers, the order rotating every round (no-op, serve / serve, no-op / ...),
so both sides see the same minutes of the machine. Per server the best round counts (highest rate; its p50/p99 are
that round's): noise on a shared core only ever slows a round down, so the best is the least disturbed, and the
ratio of the bests compares like with like. Each row also gives the range of the per-round ratios. ``--quick``:
one shorter round.

Every server runs in a child process on 127.0.0.1 port 0. ``python -m bench.serve_bench noop`` is the no-op server.
"""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVICE = "/apache.rocketmq.v2.MessagingService/"
BODY = b"x" * 1024
ROUNDS, ROUND_SECONDS = 5, 3.0          # ~3.5 min for the whole case; a round sends thousands of messages
QUICK_ROUNDS, QUICK_SECONDS = 1, 1.5


# -- the no-op server -------------------------------------------------------------------------------------------

def _noop_main(listen: str) -> int:
    import grpc

    from rmqcore.server import messaging_pb2 as pb
    host, port = listen.rsplit(":", 1)

    def ok(status):
        status.code = pb.OK
        status.message = "OK"

    canned = pb.Message()
    canned.topic.name = "bench"
    canned.body = BODY
    sp = canned.system_properties
    sp.message_id = "0" * 32
    sp.body_encoding = pb.IDENTITY
    sp.message_type = pb.NORMAL
    sp.receipt_handle = "r1:0:0:0:0:30000"
    sp.body_digest.type = pb.CRC32
    sp.body_digest.checksum = format(__import__("zlib").crc32(BODY) & 0xFFFFFFFF, "08X")
    sp.delivery_attempt = 1

    def endpoints(port_):
        ep = pb.Endpoints(scheme=pb.IPv4)
        ep.addresses.add(host=host, port=port_)
        return ep

    state = {}

    async def query_route(req, ctx):
        r = pb.QueryRouteResponse()
        ok(r.status)
        for q in range(4):
            mq = r.message_queues.add(id=q, permission=pb.READ_WRITE, accept_message_types=[pb.NORMAL])
            mq.topic.CopyFrom(req.topic)
            mq.broker.name = "noop"
            mq.broker.endpoints.CopyFrom(endpoints(state["port"]))
        return r

    async def send(req, ctx):
        r = pb.SendMessageResponse()
        ok(r.status)
        for m in req.messages:
            e = r.entries.add(message_id=m.system_properties.message_id)
            ok(e.status)
        return r

    async def receive(req, ctx):
        r = pb.ReceiveMessageResponse()
        ok(r.status)
        yield r
        for _ in range(min(req.batch_size, 32)):
            yield pb.ReceiveMessageResponse(message=canned)
        d = pb.ReceiveMessageResponse()
        d.delivery_timestamp.seconds = int(time.time())
        yield d

    async def ack(req, ctx):
        r = pb.AckMessageResponse()
        ok(r.status)
        for e in req.entries:
            ok(r.entries.add(message_id=e.message_id, receipt_handle=e.receipt_handle).status)
        return r

    def simple(resp_type):
        async def fn(req, ctx):
            r = resp_type()
            ok(r.status)
            return r
        return fn

    async def telemetry(it, ctx):
        async for cmd in it:
            if cmd.WhichOneof("command") == "settings":
                out = pb.TelemetryCommand()
                ok(out.status)
                out.settings.CopyFrom(cmd.settings)
                if cmd.settings.client_type == pb.PRODUCER:
                    out.settings.publishing.max_body_size = 4 * 1024 * 1024
                    out.settings.publishing.validate_message_type = True
                yield out

    def uu(fn, req, resp):
        return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=req.FromString,
                                                   response_serializer=resp.SerializeToString)
    handlers = {
        "QueryRoute": uu(query_route, pb.QueryRouteRequest, pb.QueryRouteResponse),
        "SendMessage": uu(send, pb.SendMessageRequest, pb.SendMessageResponse),
        "AckMessage": uu(ack, pb.AckMessageRequest, pb.AckMessageResponse),
        "Heartbeat": uu(simple(pb.HeartbeatResponse), pb.HeartbeatRequest, pb.HeartbeatResponse),
        "NotifyClientTermination": uu(simple(pb.NotifyClientTerminationResponse), pb.NotifyClientTerminationRequest,
                                      pb.NotifyClientTerminationResponse),
        "ReceiveMessage": grpc.unary_stream_rpc_method_handler(
            receive, request_deserializer=pb.ReceiveMessageRequest.FromString,
            response_serializer=pb.ReceiveMessageResponse.SerializeToString),
        "Telemetry": grpc.stream_stream_rpc_method_handler(
            telemetry, request_deserializer=pb.TelemetryCommand.FromString,
            response_serializer=pb.TelemetryCommand.SerializeToString),
    }

    async def main():
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("apache.rocketmq.v2.MessagingService",
                                                                              handlers),))
        state["port"] = server.add_insecure_port(f"{host}:{port}")
        await server.start()
        print(f"listening on {host}:{state['port']}", flush=True)
        await server.wait_for_termination()
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    return 0


# -- harness ----------------------------------------------------------------------------------------------------

# Loopback only: an opener with no proxy handler, whatever http_proxy says.
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Child:
    """A server in a child process; ``endpoint`` once it prints ``listening on``, ``console`` (its base URL) when it
    printed ``console on`` first (``rmqcore serve --http``)."""

    def __init__(self, cmd, log_path):
        self.log_path = log_path
        with open(log_path, "w") as err:          # a file, not a pipe nobody reads: the child can never block on it
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
        self.console = None
        while True:
            line = self.proc.stdout.readline()
            if line.startswith("console on "):
                self.console = line.split()[-1].rstrip("/")
                continue
            if line.startswith("listening on"):
                break
            self.stop()
            with open(log_path) as f:
                tail = f.read()[-2000:]
            raise RuntimeError(f"{cmd}: {line!r}; stderr: {tail}")
        self.endpoint = line.split()[-1]

    def cpu(self) -> float:
        """Seconds of CPU (user + system) the child has used so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def metrics(self) -> dict[str, float]:
        """The child's /metrics, each series name summed over its label sets."""
        with _LOOPBACK.open(self.console + "/metrics", timeout=10) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name = re.split(r"[{\s]", line, maxsplit=1)[0]
            out[name] = out.get(name, 0.0) + float(line.rsplit(None, 1)[-1])
        return out

    def flush_counts(self) -> tuple[float, float]:
        """(group-commit flushes, puts they served) so far. prometheus_client exposes a counter family
        ``rmqcore_flushes`` as the sample ``rmqcore_flushes_total``; both spellings are accepted."""
        m = self.metrics()

        def get(name):
            for key in (name + "_total", name):
                if key in m:
                    return m[key]
            raise KeyError(f"{name} not in {self.console}/metrics (is the store SYNC_FLUSH?)")
        return get("rmqcore_flushes"), get("rmqcore_flush_requests")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _serve(base, name, flush=None, http=False) -> Child:
    store = os.path.join(base, name)
    cmd = [sys.executable, "-m", "rmqcore", "serve", store, "--listen", "127.0.0.1:0"]
    if flush:
        conf = store + ".conf"
        with open(conf, "w") as f:
            f.write(f"flushDiskType={flush}\n")
        cmd += ["--config", conf]
    if http:
        cmd += ["--http", "127.0.0.1:0"]
    return Child(cmd, store + ".log")


def _noop(base) -> Child:
    return Child([sys.executable, "-m", "bench.serve_bench", "noop", "127.0.0.1:0"], os.path.join(base, "noop.log"))


def _console_missing() -> str | None:
    """Why ``rmqcore serve --http`` cannot start here (the ``console`` extra not installed), or None."""
    try:
        from rmqcore.console import serve_console  # noqa: F401
    except ImportError as e:
        return str(e)
    return None


def _pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


@dataclass
class Round:
    """One timed run of one scenario against one server."""
    rate: float                 # messages per second
    p50: float                  # ms
    p99: float                  # ms
    messages: int
    probe: tuple | None = None  # (before, after) of a probe taken around the timed window


def client_send(endpoint, threads: int, seconds: float) -> Round:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer
    p = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), ("bench",))
    p.startup()
    lat = [[] for _ in range(threads)]
    stop = time.perf_counter() + seconds

    def work(i):
        while time.perf_counter() < stop:
            m = Message()
            m.topic = "bench"
            m.body = BODY
            t0 = time.perf_counter()
            p.send(m)
            lat[i].append(time.perf_counter() - t0)
    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    p.shutdown()
    all_lat = [x for part in lat for x in part]
    return Round(len(all_lat) / elapsed, _pct(all_lat, 0.5) * 1e3, _pct(all_lat, 0.99) * 1e3, len(all_lat))


def client_receive_ack(endpoint, seconds: float) -> Round:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
    c = SimpleConsumer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), "bench_g",
                       {"bench": FilterExpression("*")}, 5)
    c.startup()
    n = 0
    lat = []
    stop = time.perf_counter() + seconds
    t0 = time.perf_counter()
    while time.perf_counter() < stop:
        for m in c.receive(32, 30):
            a = time.perf_counter()
            c.ack(m)
            lat.append(time.perf_counter() - a)
            n += 1
    elapsed = time.perf_counter() - t0
    c.shutdown()
    return Round(n / elapsed, _pct(lat, 0.5) * 1e3, _pct(lat, 0.99) * 1e3, n)


async def _raw(endpoint, in_flight: int, per_request: int, seconds: float, probe=None) -> Round:
    import grpc

    from rmqcore.server import messaging_pb2 as pb
    async with grpc.aio.insecure_channel(endpoint) as ch:
        send = ch.unary_unary(SERVICE + "SendMessage", request_serializer=pb.SendMessageRequest.SerializeToString,
                              response_deserializer=pb.SendMessageResponse.FromString)
        md = (("x-mq-client-id", "bench-raw"),)
        lat = []
        count = [0]

        def request():
            req = pb.SendMessageRequest()
            for _ in range(per_request):
                m = req.messages.add()
                m.topic.name = "bench"
                m.body = BODY
                m.system_properties.message_id = uuid.uuid4().hex.upper()
                m.system_properties.message_type = pb.NORMAL
            return req

        async def worker():
            while time.perf_counter() < stop:
                req = request()
                t0 = time.perf_counter()
                r = await send(req, metadata=md, timeout=30)
                lat.append(time.perf_counter() - t0)
                if r.status.code == pb.OK:
                    count[0] += per_request
        await send(request(), metadata=md, timeout=30)            # route and topic created, channel warm
        # The probe brackets only the timed window: the warm-up request and channel set-up stay outside it.
        before = probe() if probe is not None else None
        t0 = time.perf_counter()
        stop = t0 + seconds
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        elapsed = time.perf_counter() - t0
        after = probe() if probe is not None else None
    return Round(count[0] / elapsed, _pct(lat, 0.5) * 1e3, _pct(lat, 0.99) * 1e3, count[0],
                 (before, after) if probe is not None else None)


def raw_send(endpoint, in_flight, per_request, seconds, probe=None) -> Round:
    return asyncio.run(_raw(endpoint, in_flight, per_request, seconds, probe))


def interleave(contenders: dict, rounds: int, seconds: float, turn: int = 0) -> dict[str, list[Round]]:
    """``rounds`` rounds of every contender (name -> fn(seconds) -> Round), one after the other, the order rotated
    each round (a, b / b, a / a, b ...) so that neither side always runs first, or always in the same minute of
    whatever else the shared cores are doing; ``turn`` is where the rotation starts."""
    names = list(contenders)
    out: dict[str, list[Round]] = {n: [] for n in names}
    for i in range(turn, turn + rounds):
        k = i % len(names)
        for n in names[k:] + names[:k]:
            out[n].append(contenders[n](seconds))
    return out


def best(rs: list[Round]) -> Round:
    """The least disturbed round: on a noisy machine noise only ever slows a round down."""
    return max(rs, key=lambda r: r.rate)


def _spread(a: list[Round], b: list[Round]) -> str:
    """The per-round ratios a/b (rounds paired by index), so a reader sees how far one round could mislead."""
    if len(a) < 2:
        return "1 round"
    ratios = [x.rate / max(y.rate, 1e-9) for x, y in zip(a, b)]
    return f"best of {len(a)} interleaved rounds; round ratios {min(ratios):.2f}–{max(ratios):.2f}"


def _per_flush(r: Round) -> tuple[float, int, int, int] | None:
    """(puts per flush, flushes, puts, rmqcore_flush_requests' delta) over a round's timed window.

    The puts are the sends the server acknowledged in the window, each only once a flush covered it (SYNC_FLUSH),
    and the probe brackets exactly that window (no send in flight at either end), so every flush counted served
    them. rmqcore_flush_requests' delta is returned too (a send asks twice: its put, then the completion the server
    awaits), not used as the count of puts."""
    if r.probe is None or None in r.probe:
        return None
    (f0, q0), (f1, q1) = r.probe
    flushes = int(f1 - f0)
    return r.messages / max(flushes, 1), flushes, r.messages, int(q1 - q0)


def _log(msg: str) -> None:
    print(f"[bench] serve: {msg}", file=sys.stderr, flush=True)


def run(quick: bool = False, rounds: int | None = None) -> list[tuple[str, str, str, str]]:
    rounds = rounds or (QUICK_ROUNDS if quick else ROUNDS)
    seconds = QUICK_SECONDS if quick else ROUND_SECONDS
    base = tempfile.mkdtemp(prefix="rmqcore-serve-bench-")
    no_console = _console_missing()
    rows = []
    children: list[Child] = []

    def start(fn, *args, **kw) -> Child:
        c = fn(*args, **kw)
        children.append(c)
        return c
    try:
        # Every server lives for the whole run; an idle one costs next to nothing, and a fresh start per round
        # would measure start-up and a cold store instead.
        noop = start(_noop, base)
        serve = start(_serve, base, "async")
        sync = start(_serve, base, "sync", "SYNC_FLUSH", http=no_console is None)
        # The same server as `sync` but for flushDiskType: 16 senders on each give the price of durability.
        async16 = start(_serve, base, "async16", "ASYNC_FLUSH", http=no_console is None)
        servers = {"noop": noop, "serve": serve}

        scenarios = {
            "send1": lambda c, s: client_send(c.endpoint, 1, s),
            "send8": lambda c, s: client_send(c.endpoint, 8, s),
            "raw1": lambda c, s: raw_send(c.endpoint, 64, 1, s, probe=c.cpu),
            "raw32": lambda c, s: raw_send(c.endpoint, 64, 32, s),
            "recv": lambda c, s: client_receive_ack(c.endpoint, s),    # last: the sends above filled the store
        }
        results = {}
        for turn, (key, fn) in enumerate(scenarios.items()):
            t = time.perf_counter()
            # The rotation goes on from one scenario to the next, so with an odd R each server leads as often.
            results[key] = interleave({n: (lambda s, c=c, fn=fn: fn(c, s)) for n, c in servers.items()},
                                      rounds, seconds, turn * rounds)
            _log(f"{key}: {rounds} round(s) × 2 servers in {time.perf_counter() - t:.1f} s")
        labels = {"send1": "official client send, 1 thread", "send8": "official client send, 8 threads",
                  "recv": "official client receive + ack (SimpleConsumer, 32 per receive)",
                  "raw1": "raw stub SendMessage, 64 in flight, 1 message per request",
                  "raw32": "raw stub SendMessage, 64 in flight, 32 messages per request"}
        for key, label in labels.items():
            ss, nn = results[key]["serve"], results[key]["noop"]
            s, n = best(ss), best(nn)
            rows.append((f"serve: {label}", f"{s.rate:,.0f}", "msgs/s",
                         f"{s.rate / n.rate:.2f}× the no-op server ({n.rate:,.0f}); p50 {s.p50:.2f} ms, "
                         f"p99 {s.p99:.2f} ms (no-op {n.p50:.2f} / {n.p99:.2f}); {_spread(ss, nn)}"))

        def cpu_us(r: Round) -> float:
            before, after = r.probe
            return (after - before) / max(1, r.messages) * 1e6
        s_cpu, n_cpu = cpu_us(best(results["raw1"]["serve"])), cpu_us(best(results["raw1"]["noop"]))
        rows.append(("serve: server CPU per message (raw stub, 1 per request)", f"{s_cpu:.0f}", "µs",
                     f"no-op server {n_cpu:.0f} µs (utime + stime of each server over its best raw-1 round)"))

        # SYNC_FLUSH: 1 sender, 16 senders, and 16 senders on the ASYNC_FLUSH twin, interleaved the same way.
        scrape_errors: list[str] = []

        def flushes(c):
            if c.console is None:
                return None

            def probe():
                # A failed scrape costs the row its flush counts, not the bench its other figures.
                try:
                    return c.flush_counts()
                except (OSError, KeyError, ValueError) as e:
                    scrape_errors.append(f"{type(e).__name__}: {e}")
                    return None
            return probe
        t = time.perf_counter()
        sy = interleave({"sync1": lambda s: raw_send(sync.endpoint, 1, 1, s, probe=flushes(sync)),
                         "sync16": lambda s: raw_send(sync.endpoint, 16, 1, s, probe=flushes(sync)),
                         "async16": lambda s: raw_send(async16.endpoint, 16, 1, s)}, rounds, seconds)
        _log(f"SYNC_FLUSH: {rounds} round(s) × 3 in {time.perf_counter() - t:.1f} s")
        one, many, asy = best(sy["sync1"]), best(sy["sync16"]), best(sy["async16"])
        pf_one, pf_many = _per_flush(one), _per_flush(many)
        note = ""
        if not (pf_one and pf_many):
            why = (f"rmqcore serve --http needs the console extra: {no_console}" if no_console
                   else f"/metrics: {scrape_errors[-1] if scrape_errors else 'no probe'}")
            note = f"; no flush counts ({why})"
        # What no server could exceed here: the no-op server's single-message rate (64 in flight) over one sender.
        ceiling = best(results["raw1"]["noop"]).rate / one.rate
        rows.append(("serve: SYNC_FLUSH, 16 concurrent raw senders, 1 message each", f"{many.rate:,.0f}", "msgs/s",
                     f"{many.rate / one.rate:.2f}× 1 sender ({one.rate:,.0f}; the no-op server's own ceiling for "
                     f"1-message requests is {ceiling:.1f}× that); p50 {many.p50:.2f} ms, "
                     f"p99 {many.p99:.2f} ms; {_spread(sy['sync16'], sy['sync1'])}{note}"))
        if pf_one and pf_many:
            rows.append(("serve: SYNC_FLUSH puts per flush, 16 concurrent raw senders vs 1",
                         f"{pf_many[0]:.2f} vs {pf_one[0]:.2f}", "puts/flush",
                         f"sends acknowledged / rmqcore_flushes' delta on /metrics over each best round: "
                         f"{pf_many[2]:,} puts in {pf_many[1]:,} flushes vs {pf_one[2]:,} in {pf_one[1]:,}; "
                         "each sender waits for its own flush, so at most 16 share one"))
        rows.append(("serve: SYNC_FLUSH vs ASYNC_FLUSH, 16 concurrent raw senders, 1 message each",
                     f"{many.rate:,.0f}", "msgs/s",
                     f"{many.rate / asy.rate:.2f}× ASYNC_FLUSH ({asy.rate:,.0f}, the same server but for "
                     f"flushDiskType); p50 {many.p50:.2f} / {asy.p50:.2f} ms, p99 {many.p99:.2f} / {asy.p99:.2f} ms; "
                     f"{_spread(sy['sync16'], sy['async16'])}"))
    finally:
        for c in children:
            c.stop()
        shutil.rmtree(base, ignore_errors=True)
    return rows


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "noop":
        sys.exit(_noop_main(sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1:0"))
    for row in run("--quick" in sys.argv):
        print(" | ".join(row))
