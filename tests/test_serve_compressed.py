"""Compressed bodies through `rmqcore serve` (a child process on 127.0.0.1), received by the official RocketMQ 5
Python client (rocketmq-python-client): a 4.x producer's compressed record (sysFlag COMPRESSED, ZLIB/LZ4/ZSTD in
bits 8-10) reaches a 5.x consumer as the bytes the producer sent; one that does not inflate never reaches it as
anything else and ends in the DLQ as stored; GZIP bodies sent over gRPC cannot make the server inflate more than
max_message_size a request (its peak RSS stays within twice its idle one under a request of bombs)."""
from __future__ import annotations

import gzip
import os
import signal
import time
import zlib

import pytest

pytest.importorskip("rocketmq")
grpc = pytest.importorskip("grpc")

from rocketmq import FilterExpression, SimpleConsumer  # noqa: E402

from serve_util import FAST_CONF, ServerProcess, config, prepare, receive_all  # noqa: E402
from test_compression import lz4_java, zlib_java, zstd_java  # noqa: E402

from rmqcore.broker import Broker  # noqa: E402
from rmqcore.message import Message  # noqa: E402
from rmqcore.server import messaging_pb2 as pb  # noqa: E402

SERVICE = "/apache.rocketmq.v2.MessagingService/"
MIB = 1024 * 1024


def _text(n: int, seed: int) -> bytes:
    # a body that compresses as a real one does (not all one byte)
    words = [b"order", b"paid", b"shipped", b"%d" % seed, os.urandom(4).hex().encode()]
    return b" ".join(words[(i * 7 + seed) % len(words)] for i in range(n // 6))[:n]


def _put(store: str, topic: str, records: list[tuple[str, bytes, int]]) -> None:
    """Records as a 4.x producer's send leaves them: (UNIQ_KEY, the body as sent on the wire, sysFlag)."""
    with Broker.open(store) as b:
        for key, body, sys_flag in records:
            r = b.send(Message(topic, body, 0, tags="TagA", properties={"UNIQ_KEY": key}, sys_flag=sys_flag))
            assert r.ok, r


def _vm(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def test_a_4x_compressed_body_reaches_a_5x_consumer_as_sent(tmp_path):
    store = str(tmp_path / "store")
    prepare(store, {"zip_t": ("NORMAL", 1)}, {"zip_g": {"retry_max_times": 1}})
    sent = {f"ZLIB-{i}": _text(6000 + 997 * i, i) for i in range(3)}      # the 6,000 bytes, and more
    sent["LZ4"] = _text(9000, 7)
    sent["ZSTD"] = _text(300 * 1024, 8)
    records = [("ZLIB-0", zlib_java(sent["ZLIB-0"]), 0x1),            # a producer before 4.9.5: no type bits
               ("ZLIB-1", zlib_java(sent["ZLIB-1"]), 0x301), ("ZLIB-2", zlib_java(sent["ZLIB-2"]), 0x301),
               ("LZ4", lz4_java(sent["LZ4"]), 0x101), ("ZSTD", zstd_java(sent["ZSTD"]), 0x201),
               ("plain", b"not compressed", 0)]
    sent["plain"] = b"not compressed"
    # none of these can be read: never handed out as something else, each ends in the DLQ as it is stored
    bad = [("bomb", zlib_java(bytes(64 * MIB)), 0x301),                   # inflates past max_message_size
           ("cut", zlib_java(sent["ZLIB-1"])[:-8], 0x301),
           ("unknown-type", zlib_java(b"x" * 5000), 0x501)]
    _put(store, "zip_t", records + bad)
    with ServerProcess(store, FAST_CONF) as srv:
        c = SimpleConsumer(config(srv.endpoint), "zip_g", {"zip_t": FilterExpression("*")}, 1)
        c.startup()
        try:
            got = receive_all(c, len(sent), invisible=1, deadline_s=20)
            # the bad ones: delivered neither now nor after their invisible time (attempts 1 and 2), then DLQ'd
            end = time.monotonic() + 4
            while time.monotonic() < end:
                got += [m for m in c.receive(32, 1) if c.ack(m) or True]
        finally:
            c.shutdown()
        srv.proc.send_signal(signal.SIGTERM)
        log = srv.proc.communicate(timeout=30)[1]
        assert srv.proc.returncode == 0
    by_key = {m.message_id: m for m in got}
    assert sorted(by_key) == sorted(sent) and len(got) == len(sent)
    for key, body in sent.items():
        m = by_key[key]
        assert m.body == body, (key, len(m.body), m.body[:8].hex())
        assert not m.corrupted and m.tag == "TagA"
    for key, _b, _f in bad:
        assert f"message {key} of zip_t" in log
    assert "inflates past 4194304 bytes" in log and "cut short" in log and "compression type 5" in log
    from rmqcore.admin import StoreReader
    with StoreReader(store) as r:
        dlq = r.get("%DLQ%zip_g", 0, 0, 10)
        assert sorted((m.uniq_key, bytes(m.body), m.sys_flag & 0x701) for m in dlq) == sorted(bad)


def _send(ch, messages, timeout=30):
    call = ch.unary_unary(SERVICE + "SendMessage", request_serializer=pb.SendMessageRequest.SerializeToString,
                          response_deserializer=pb.SendMessageResponse.FromString)
    return call(pb.SendMessageRequest(messages=messages), metadata=(("x-mq-client-id", "bomber"),), timeout=timeout)


def _receive(ch, group: str, topic: str, batch: int) -> list:
    call = ch.unary_stream(SERVICE + "ReceiveMessage", request_serializer=pb.ReceiveMessageRequest.SerializeToString,
                           response_deserializer=pb.ReceiveMessageResponse.FromString)
    req = pb.ReceiveMessageRequest(batch_size=batch)
    req.group.name = group
    req.message_queue.topic.name = topic
    req.message_queue.id = -1
    req.invisible_duration.seconds = 60
    req.long_polling_timeout.seconds = 1
    return [r.message for r in call(req, metadata=(("x-mq-client-id", "bomber"),), timeout=30)
            if r.HasField("message")]


def _gzip_message(topic: str, body: bytes, i: int) -> "pb.Message":
    m = pb.Message(body=body)
    m.topic.name = topic
    m.system_properties.message_id = f"GZ{i:030d}"
    m.system_properties.body_encoding = pb.GZIP
    m.system_properties.message_type = pb.NORMAL
    return m


def test_gzip_bodies_are_stored_as_sent_and_a_request_of_bombs_does_not_take_the_servers_memory(tmp_path):
    store = str(tmp_path / "store")
    prepare(store, {"gz_t": ("NORMAL", 1)}, {"gz_g": {}})
    with ServerProcess(store, FAST_CONF) as srv, \
            grpc.insecure_channel(srv.endpoint, options=[("grpc.max_receive_message_length", -1)]) as ch:
        # A 5.x producer's GZIP (a zlib stream, Java's compressBytesGzip) and a gzip file: both read back as sent.
        zipped, gzipped = _text(20000, 1), _text(30000, 2)
        r = _send(ch, [_gzip_message("gz_t", zlib.compress(zipped, 5), 0)])
        assert r.status.code == pb.OK, r.status
        r = _send(ch, [_gzip_message("gz_t", gzip.compress(gzipped), 1)])
        assert r.status.code == pb.OK, r.status
        c = SimpleConsumer(config(srv.endpoint), "gz_g", {"gz_t": FilterExpression("*")}, 1)
        c.startup()
        try:
            got = receive_all(c, 2, deadline_s=20)
            assert sorted(m.body for m in got) == sorted([zipped, gzipped])
            idle = _vm(srv.proc.pid, "VmHWM")                 # the peak so far: started, sent, received
            # The bombs: a 2.5 MB request of gzip files, each 4 MiB of zeros (the limit of one body),
            # together 2.4 GB; then as many zlib streams, stored as sent (a 4 MiB inflation each, later).
            bomb = gzip.compress(bytes(4 * MIB), 9)
            many = [_gzip_message("gz_t", bomb, 10 + i) for i in range(2_500_000 // len(bomb))]
            r = _send(ch, many)
            assert r.status.code == pb.MESSAGE_BODY_TOO_LARGE and "together" in r.status.message, r.status
            deflated = zlib.compress(bytes(4 * MIB), 9)
            r = _send(ch, [_gzip_message("gz_t", deflated, 5000 + i) for i in range(16)])
            assert r.status.code == pb.OK, r.status
            # ... which a consumer then receives, 4 to an answer, each inflated to its 4 MiB (built one at a time).
            # (Over gRPC itself: the official client takes seconds over each 4 MiB body it decodes.)
            bombs = []
            end = time.monotonic() + 60
            while len(bombs) < 16 and time.monotonic() < end:
                for m in _receive(ch, "gz_g", "gz_t", 4):
                    assert m.body == bytes(4 * MIB) and m.system_properties.body_encoding == pb.IDENTITY
                    bombs.append(m.system_properties.message_id)
            assert len(set(bombs)) == 16
            peak = _vm(srv.proc.pid, "VmHWM")
        finally:
            c.shutdown()
        print(f"server peak RSS {idle / MIB:.0f} MiB idle, {peak / MIB:.0f} MiB after the bombs")
        assert peak <= 2 * idle
        assert srv.terminate() == 0
