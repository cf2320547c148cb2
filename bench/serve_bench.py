"""`python -m bench --only serve`: `rmqcore serve` through the official client and a raw gRPC stub, against a no-op
server of the same service in the same run (the transport's ceiling on this machine).

- official client (rocketmq-python-client): send from 1 thread and from 8 threads, SimpleConsumer receive + ack;
- raw stub (grpc.aio, this process): 64 requests in flight with 1 message each, and with 32 messages each;
- server CPU per message (the server process's utime + stime over the raw 1-message run);
- SYNC_FLUSH: 16 concurrent raw senders against 1 (flushes shared by concurrent sends).

Every server runs in a child process on 127.0.0.1 port 0. ``python -m bench.serve_bench noop`` is the no-op server.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVICE = "/apache.rocketmq.v2.MessagingService/"
BODY = b"x" * 1024


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

class Child:
    def __init__(self, cmd):
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on"):
            self.proc.kill()
            raise RuntimeError(f"{cmd}: {line!r}")
        self.endpoint = line.split()[-1]

    def cpu(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _serve(store, sync=False) -> Child:
    cmd = [sys.executable, "-m", "rmqcore", "serve", store, "--listen", "127.0.0.1:0"]
    if sync:
        conf = store + ".conf"
        with open(conf, "w") as f:
            f.write("flushDiskType=SYNC_FLUSH\n")
        cmd += ["--config", conf]
    return Child(cmd)


def _noop() -> Child:
    return Child([sys.executable, "-m", "bench.serve_bench", "noop", "127.0.0.1:0"])


def _pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def client_send(endpoint, threads: int, seconds: float):
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
    return len(all_lat) / elapsed, _pct(all_lat, 0.5) * 1e3, _pct(all_lat, 0.99) * 1e3


def client_receive_ack(endpoint, seconds: float):
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
    return n / elapsed, _pct(lat, 0.5) * 1e3, _pct(lat, 0.99) * 1e3


async def _raw(endpoint, in_flight: int, per_request: int, seconds: float):
    import grpc

    from rmqcore.server import messaging_pb2 as pb
    async with grpc.aio.insecure_channel(endpoint) as ch:
        send = ch.unary_unary(SERVICE + "SendMessage", request_serializer=pb.SendMessageRequest.SerializeToString,
                              response_deserializer=pb.SendMessageResponse.FromString)
        md = (("x-mq-client-id", "bench-raw"),)
        lat = []
        count = [0]
        stop = time.perf_counter() + seconds

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
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        elapsed = time.perf_counter() - t0
    return count[0] / elapsed, _pct(lat, 0.5) * 1e3, _pct(lat, 0.99) * 1e3


def raw_send(endpoint, in_flight, per_request, seconds):
    return asyncio.run(_raw(endpoint, in_flight, per_request, seconds))


def run(quick: bool = False) -> list[tuple[str, str, str, str]]:
    seconds = 2.0 if quick else 5.0
    base = tempfile.mkdtemp(prefix="rmqcore-serve-bench-")
    rows = []
    try:
        results = {}
        for name, start in (("noop", _noop), ("serve", lambda: _serve(os.path.join(base, "async")))):
            child = start()
            try:
                r = results[name] = {}
                r["send1"] = client_send(child.endpoint, 1, seconds)
                r["send8"] = client_send(child.endpoint, 8, seconds)
                cpu0 = child.cpu()
                r["raw1"] = raw_send(child.endpoint, 64, 1, seconds)
                r["cpu_us"] = (child.cpu() - cpu0) / max(1, r["raw1"][0] * seconds) * 1e6
                r["raw32"] = raw_send(child.endpoint, 64, 32, seconds)
                r["recv"] = client_receive_ack(child.endpoint, seconds)
            finally:
                child.stop()
        labels = {"send1": "official client send, 1 thread", "send8": "official client send, 8 threads",
                  "recv": "official client receive + ack (SimpleConsumer, 32 per receive)",
                  "raw1": "raw stub SendMessage, 64 in flight, 1 message per request",
                  "raw32": "raw stub SendMessage, 64 in flight, 32 messages per request"}
        for key, label in labels.items():
            s, n = results["serve"][key], results["noop"][key]
            rows.append((f"serve: {label}", f"{s[0]:,.0f}", "msgs/s",
                         f"{s[0] / n[0]:.2f}× the no-op server ({n[0]:,.0f}); p50 {s[1]:.2f} ms, p99 {s[2]:.2f} ms "
                         f"(no-op {n[1]:.2f} / {n[2]:.2f})"))
        rows.append(("serve: server CPU per message (raw stub, 1 per request)", f"{results['serve']['cpu_us']:.0f}",
                     "µs", f"no-op server {results['noop']['cpu_us']:.0f} µs"))
        child = _serve(os.path.join(base, "sync"), sync=True)
        try:
            one = raw_send(child.endpoint, 1, 1, seconds)
            many = raw_send(child.endpoint, 16, 1, seconds)
        finally:
            child.stop()
        rows.append(("serve: SYNC_FLUSH, 16 concurrent raw senders, 1 message each", f"{many[0]:,.0f}", "msgs/s",
                     f"{many[0] / one[0]:.2f}× 1 sender ({one[0]:,.0f}); p50 {many[1]:.2f} ms, p99 {many[2]:.2f} ms"))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return rows


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "noop":
        sys.exit(_noop_main(sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1:0"))
    for row in run("--quick" in sys.argv):
        print(" | ".join(row))
