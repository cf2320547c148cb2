"""`python -m bench.gzip_bomb_bench [SECONDS]`: a normal client's send latency (one 1 KiB message, raw gRPC stub)
against `rmqcore serve`, alone and while another client sends GZIP bombs back to back (issue 36 item 5: a 2.5 MB
request of gzip files, each 4 MiB of zeros, 2.4 GB in all; refused once the request's gzip bodies pass
max_message_size together), and the server's peak RSS (VmHWM) before and after. The server runs in a child process
on 127.0.0.1 port 0. Prints one markdown table; ~2 x SECONDS (default 10) plus start-up."""
from __future__ import annotations

import gzip
import os
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))


def _message(pb, topic: str, body: bytes, i: int, encoding: int):
    m = pb.Message(body=body)
    m.topic.name = topic
    m.system_properties.message_id = f"B{i:031d}"
    m.system_properties.body_encoding = encoding
    m.system_properties.message_type = pb.NORMAL
    return m


def _pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000 if values else float("nan")


def run(seconds: float = 10.0) -> list[tuple[str, str]]:
    import grpc

    from rmqcore.server import messaging_pb2 as pb
    from serve_util import ServerProcess, prepare
    base = tempfile.mkdtemp(prefix="rmq-gzbomb-")
    store = os.path.join(base, "store")
    prepare(store, {"bomb_t": ("NORMAL", 4)}, {})
    path = "/apache.rocketmq.v2.MessagingService/SendMessage"
    with ServerProcess(store) as srv, grpc.insecure_channel(srv.endpoint) as ch, \
            grpc.insecure_channel(srv.endpoint) as bomb_ch:
        send = ch.unary_unary(path, request_serializer=pb.SendMessageRequest.SerializeToString,
                              response_deserializer=pb.SendMessageResponse.FromString)
        bomb_send = bomb_ch.unary_unary(path, request_serializer=pb.SendMessageRequest.SerializeToString,
                                        response_deserializer=pb.SendMessageResponse.FromString)
        md = (("x-mq-client-id", "normal"),)

        def normal(duration):
            lat, i, end = [], 0, time.monotonic() + duration
            while time.monotonic() < end:
                t = time.perf_counter()
                r = send(pb.SendMessageRequest(messages=[_message(pb, "bomb_t", b"x" * 1024, i, pb.IDENTITY)]),
                         metadata=md, timeout=30)
                lat.append(time.perf_counter() - t)
                assert r.status.code == pb.OK, r.status
                i += 1
            return lat

        def hwm():
            with open(f"/proc/{srv.proc.pid}/status") as f:
                return next(int(x.split()[1]) // 1024 for x in f if x.startswith("VmHWM:"))

        alone = normal(seconds)
        idle = hwm()
        bomb = gzip.compress(bytes(4 * 1024 * 1024), 9)
        req = pb.SendMessageRequest(messages=[_message(pb, "bomb_t", bomb, 10_000 + i, pb.GZIP)
                                              for i in range(2_500_000 // len(bomb))])
        stop, bombs, bomb_lat = threading.Event(), [0], []

        def bomber():
            while not stop.is_set():
                t = time.perf_counter()
                r = bomb_send(req, metadata=(("x-mq-client-id", "bomber"),), timeout=60)
                bomb_lat.append(time.perf_counter() - t)
                assert r.status.code == pb.MESSAGE_BODY_TOO_LARGE, r.status
                bombs[0] += 1
        th = threading.Thread(target=bomber)
        th.start()
        try:
            during = normal(seconds)
        finally:
            stop.set()
            th.join()
        peak = hwm()
        srv.terminate()
    return [("normal send p50 / p99, alone", f"{_pct(alone, .5):.2f} / {_pct(alone, .99):.2f} ms"),
            ("normal send p50 / p99, during GZIP bombs", f"{_pct(during, .5):.2f} / {_pct(during, .99):.2f} ms"),
            (f"bomb requests refused ({len(req.SerializeToString()) / 1e6:.2f} MB each)",
             f"{bombs[0]}, {_pct(bomb_lat, .5):.0f} ms p50 each"),
            ("server peak RSS before / after", f"{idle} / {peak} MiB")]


if __name__ == "__main__":
    rows = run(float(sys.argv[1]) if len(sys.argv) > 1 else 10.0)
    print("| measure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
