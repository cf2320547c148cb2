"""`rmqcore serve`: authentication (AccessKey/SecretKey signatures, topic and group permissions), TLS, and bad
input answered with the protocol's status codes, never a crash or a hang."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("rocketmq")
grpc = pytest.importorskip("grpc")

from rocketmq import FilterExpression, Producer, SimpleConsumer  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as d  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as s  # noqa: E402
from rocketmq.v5.exception import ForbiddenException  # noqa: E402

from serve_util import FAST_CONF, ROOT, ServerProcess, config, message, prepare  # noqa: E402

SERVICE = "/apache.rocketmq.v2.MessagingService/"


def _acl(tmp_path) -> str:
    path = str(tmp_path / "acl.json")
    with open(path, "w") as f:
        json.dump({"accounts": [
            {"accessKey": "app", "secretKey": "app-secret", "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY",
             "topicPerms": ["auth_t=PUB|SUB", "readonly_t=SUB"], "groupPerms": ["auth_g=SUB"]},
            {"accessKey": "root", "secretKey": "root-secret", "admin": True},
        ]}, f)
    return path


def test_auth(tmp_path):
    with ServerProcess(str(tmp_path / "store"), FAST_CONF, args=["--acl", _acl(tmp_path)]) as srv:
        p = Producer(config(srv.endpoint, "app", "app-secret"), ("auth_t",))
        p.startup()
        try:
            p.send(message("auth_t", b"allowed"))
            with pytest.raises(ForbiddenException):
                p.send(message("readonly_t", b"no PUB"))
            # no permission on the topic at all: its route query is refused (FORBIDDEN, before anything is
            # created), so the client has no route to send on
            with pytest.raises(Exception, match="route"):
                p.send(message("other_t", b"default DENY"))
        finally:
            p.shutdown()
        c = SimpleConsumer(config(srv.endpoint, "app", "app-secret"), "auth_g", {"auth_t": FilterExpression("*")}, 1)
        c.startup()
        try:
            got = c.receive(32, 5)
            assert [m.body for m in got] == [b"allowed"]
            c.ack(got[0])
        finally:
            c.shutdown()
        # a group the account may not use
        c = SimpleConsumer(config(srv.endpoint, "app", "app-secret"), "other_g", {"auth_t": FilterExpression("*")}, 1)
        c.startup()
        try:
            with pytest.raises(ForbiddenException):
                c.receive(1, 5)
        finally:
            c.shutdown()
        # wrong secret, unknown key, no key: nothing gets through (the route query is refused) ...
        for ak, sk in (("app", "wrong"), ("nobody", "x"), ("", "")):
            bad = Producer(config(srv.endpoint, ak, sk), ("auth_t",))
            with pytest.raises(Exception):
                bad.startup()
                bad.send(message("auth_t", b"never stored"))
            try:
                bad.shutdown()
            except Exception:
                pass
            # ... and the answer is UNAUTHORIZED, over the client's own signed headers
            from rocketmq.v5.util.signature import Signature
            md = Signature.metadata(config(srv.endpoint, ak, sk), "raw-client")
            with grpc.insecure_channel(srv.endpoint) as ch:
                r = ch.unary_unary(SERVICE + "QueryRoute", request_serializer=s.QueryRouteRequest.SerializeToString,
                                   response_deserializer=s.QueryRouteResponse.FromString)(
                    s.QueryRouteRequest(topic=d.Resource(name="auth_t")), metadata=md, timeout=5)
            assert r.status.code == d.UNAUTHORIZED, r.status
        # the admin may do anything
        root = Producer(config(srv.endpoint, "root", "root-secret"), ("other_t",))
        root.startup()
        try:
            root.send(message("other_t", b"admin"))
        finally:
            root.shutdown()
        assert srv.terminate() == 0


def test_tls(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       capture_output=True)
    if r.returncode:
        pytest.skip(f"openssl cannot make a certificate here: {r.stderr[-200:]!r}")
    with ServerProcess(str(tmp_path / "store"), FAST_CONF, args=["--tls-cert", cert, "--tls-key", key]) as srv:
        # the client trusts the system roots only: point gRPC's roots at our certificate, in a fresh process
        script = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})
            from rocketmq import Producer, SimpleConsumer, FilterExpression
            from serve_util import config, message
            p = Producer(config({srv.endpoint!r}), ("tls_t",), tls_enable=True)
            p.startup()
            p.send(message("tls_t", b"over tls"))
            p.shutdown()
            c = SimpleConsumer(config({srv.endpoint!r}), "tls_g", {{"tls_t": FilterExpression("*")}}, 1,
                               tls_enable=True)
            c.startup()
            got = c.receive(32, 5)
            c.ack(got[0])
            c.shutdown()
            print("GOT", got[0].body.decode())
        """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": cert})
        assert "GOT over tls" in out.stdout, out.stderr[-2000:]
        # a plaintext client cannot talk to it
        with grpc.insecure_channel(srv.endpoint) as ch:
            call = ch.unary_unary(SERVICE + "QueryRoute", request_serializer=s.QueryRouteRequest.SerializeToString,
                                  response_deserializer=s.QueryRouteResponse.FromString)
            with pytest.raises(grpc.RpcError):
                call(s.QueryRouteRequest(topic=d.Resource(name="tls_t")), timeout=3)
        assert srv.terminate() == 0


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("raw") / "store")
    conf = dict(FAST_CONF, maxMessageSize="4096", autoCreateSubscriptionGroup="false", maxRequestBytes="1048576")
    prepare(store, groups={"raw_g": {}})
    with ServerProcess(store, conf) as srv:
        ch = grpc.insecure_channel(srv.endpoint)
        md = (("x-mq-client-id", "raw-client"), ("x-mq-date-time", "20260101T000000Z"))

        def call(method, req, resp_type, stream=False):
            kind = ch.unary_stream if stream else ch.unary_unary
            fn = kind(SERVICE + method, request_serializer=type(req).SerializeToString,
                      response_deserializer=resp_type.FromString)
            out = fn(req, metadata=md, timeout=10)
            return list(out) if stream else out
        call.channel = ch
        call.server = srv
        yield call
        ch.close()
        assert srv.terminate() == 0


def _send_req(topic, body=b"x", **sp):
    req = s.SendMessageRequest()
    m = req.messages.add()
    m.topic.name = topic
    m.body = body
    m.system_properties.message_id = sp.pop("message_id", "0102FC00000001")
    m.system_properties.message_type = d.NORMAL
    for k, v in sp.items():
        setattr(m.system_properties, k, v)
    return req


def test_bad_requests_get_the_protocols_codes(raw):
    r = raw("SendMessage", _send_req("bad topic!"), s.SendMessageResponse)
    assert r.status.code == d.ILLEGAL_TOPIC
    r = raw("SendMessage", _send_req("raw_t", b"y" * 5000), s.SendMessageResponse)
    assert r.status.code == d.MESSAGE_BODY_TOO_LARGE
    r = raw("SendMessage", _send_req("raw_t", b""), s.SendMessageResponse)
    assert r.status.code == d.MESSAGE_BODY_EMPTY
    r = raw("SendMessage", _send_req("raw_t", message_id=""), s.SendMessageResponse)
    assert r.status.code == d.ILLEGAL_MESSAGE_ID
    r = raw("SendMessage", _send_req("raw_t", tag="a|b"), s.SendMessageResponse)
    assert r.status.code == d.ILLEGAL_MESSAGE_TAG
    r = raw("SendMessage", s.SendMessageRequest(), s.SendMessageResponse)
    assert r.status.code == d.BAD_REQUEST
    req = _send_req("raw_t")
    req.messages[0].user_properties["UNIQ_KEY"] = "x"
    assert raw("SendMessage", req, s.SendMessageResponse).status.code == d.ILLEGAL_MESSAGE_PROPERTY_KEY
    req = _send_req("raw_t")
    req.messages[0].system_properties.delivery_timestamp.seconds = 2 ** 40
    assert raw("SendMessage", req, s.SendMessageResponse).status.code == d.ILLEGAL_DELIVERY_TIME
    assert raw("SendMessage", _send_req("raw_t"), s.SendMessageResponse).status.code == d.OK

    ack = s.AckMessageRequest(group=d.Resource(name="raw_g"), topic=d.Resource(name="raw_t"))
    ack.entries.add(message_id="m", receipt_handle="garbage")
    assert raw("AckMessage", ack, s.AckMessageResponse).status.code == d.INVALID_RECEIPT_HANDLE
    end = s.EndTransactionRequest(topic=d.Resource(name="raw_t"), transaction_id="nope", resolution=d.COMMIT)
    assert raw("EndTransaction", end, s.EndTransactionResponse).status.code == d.INVALID_TRANSACTION_ID
    end.transaction_id = "0" * 32                 # well formed, but no half message there
    assert raw("EndTransaction", end, s.EndTransactionResponse).status.code == d.INVALID_TRANSACTION_ID
    route = raw("QueryRoute", s.QueryRouteRequest(topic=d.Resource(name="raw_t")), s.QueryRouteResponse)
    assert route.status.code == d.OK and len(route.message_queues) == 4
    assert all(list(q.accept_message_types) == [d.NORMAL] for q in route.message_queues)


def test_receive_refusals(raw):
    def receive(group="raw_g", topic="raw_t", batch=1, invisible_ms=None, sql=None):
        req = s.ReceiveMessageRequest(group=d.Resource(name=group), batch_size=batch)
        req.message_queue.topic.name = topic
        if invisible_ms is not None:
            req.invisible_duration.seconds = invisible_ms // 1000
            req.invisible_duration.nanos = invisible_ms % 1000 * 1_000_000
        if sql is not None:
            req.filter_expression.type = d.SQL
            req.filter_expression.expression = sql
        req.long_polling_timeout.seconds = 1
        out = raw("ReceiveMessage", req, s.ReceiveMessageResponse, stream=True)
        return [r.status.code for r in out if r.HasField("status")][0]
    raw("SendMessage", _send_req("raw_t"), s.SendMessageResponse)
    # autoCreateSubscriptionGroup=false: an unknown group
    assert receive(group="nobody_g") == d.CONSUMER_GROUP_NOT_FOUND
    assert receive(group="bad group!") == d.ILLEGAL_CONSUMER_GROUP
    assert receive(topic="no_such_topic") == d.TOPIC_NOT_FOUND
    assert receive(invisible_ms=500) == d.ILLEGAL_INVISIBLE_TIME
    assert receive(batch=0) == d.BAD_REQUEST
    assert receive(sql="a = = 1") == d.ILLEGAL_FILTER_EXPRESSION


def test_garbage_and_vanishing_clients_do_not_hurt_the_server(raw):
    ch = raw.channel
    junk = ch.unary_unary(SERVICE + "SendMessage")          # raw bytes in and out
    with pytest.raises(grpc.RpcError):
        junk(b"\xff\xff\xff\xff\x0f garbage", timeout=5)
    with pytest.raises(grpc.RpcError) as e:
        ch.unary_unary(SERVICE + "NoSuchMethod")(b"", timeout=5)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # a request past max_request_bytes is refused by the transport before it is read whole
    with pytest.raises(grpc.RpcError) as e:
        raw("SendMessage", _send_req("raw_t", b"z" * (2 << 20)), s.SendMessageResponse)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # a receive whose client goes away mid long-poll
    req = s.ReceiveMessageRequest(group=d.Resource(name="raw_g"), batch_size=1)
    req.message_queue.topic.name = "empty_t"
    raw("SendMessage", _send_req("empty_t"), s.SendMessageResponse)
    first = raw("ReceiveMessage", req, s.ReceiveMessageResponse, stream=True)     # takes the one message
    assert any(r.HasField("message") for r in first)
    stream = ch.unary_stream(SERVICE + "ReceiveMessage", request_serializer=s.ReceiveMessageRequest.SerializeToString,
                             response_deserializer=s.ReceiveMessageResponse.FromString)(
        req, metadata=(("x-mq-client-id", "gone"),), timeout=10)
    stream.cancel()
    # still serving
    r = raw("QueryRoute", s.QueryRouteRequest(topic=d.Resource(name="raw_t")), s.QueryRouteResponse)
    assert r.status.code == d.OK
    assert raw.server.proc.poll() is None


def test_offset_rpcs(raw):
    for _ in range(3):
        r = raw("SendMessage", _send_req("offset_t"), s.SendMessageResponse)
        assert r.status.code == d.OK
    # the topic's queues: find one holding messages
    # (a queue's end counts dispatched messages: the store dispatches within milliseconds of the send)
    end = time.monotonic() + 5
    while True:
        ends = {}
        for q in range(4):
            mq = d.MessageQueue(id=q)
            mq.topic.name = "offset_t"
            ends[q] = raw("QueryOffset", s.QueryOffsetRequest(message_queue=mq, query_offset_policy=d.END),
                          s.QueryOffsetResponse).offset
            assert raw("QueryOffset", s.QueryOffsetRequest(message_queue=mq, query_offset_policy=d.BEGINNING),
                       s.QueryOffsetResponse).offset == 0
        if sum(ends.values()) == 3 or time.monotonic() > end:
            break
    assert sum(ends.values()) == 3
    q = max(ends, key=ends.get)
    mq = d.MessageQueue(id=q)
    mq.topic.name = "offset_t"
    got = raw("GetOffset", s.GetOffsetRequest(group=d.Resource(name="raw_g"), message_queue=mq), s.GetOffsetResponse)
    assert got.status.code == d.OFFSET_NOT_FOUND
    up = raw("UpdateOffset", s.UpdateOffsetRequest(group=d.Resource(name="raw_g"), message_queue=mq, offset=1),
             s.UpdateOffsetResponse)
    assert up.status.code == d.OK
    got = raw("GetOffset", s.GetOffsetRequest(group=d.Resource(name="raw_g"), message_queue=mq), s.GetOffsetResponse)
    assert (got.status.code, got.offset) == (d.OK, 1)
    # past the queue's end: refused
    up = raw("UpdateOffset", s.UpdateOffsetRequest(group=d.Resource(name="raw_g"), message_queue=mq, offset=10 ** 6),
             s.UpdateOffsetResponse)
    assert up.status.code == d.ILLEGAL_OFFSET
    bad = d.MessageQueue(id=99)
    bad.topic.name = "offset_t"
    r = raw("GetOffset", s.GetOffsetRequest(group=d.Resource(name="raw_g"), message_queue=bad), s.GetOffsetResponse)
    assert r.status.code == d.BAD_REQUEST
    # a heartbeat from a consumer of a group that does not exist (autoCreateSubscriptionGroup=false)
    hb = raw("Heartbeat", s.HeartbeatRequest(group=d.Resource(name="ghost_g"), client_type=d.SIMPLE_CONSUMER),
             s.HeartbeatResponse)
    assert hb.status.code == d.CONSUMER_GROUP_NOT_FOUND


def test_forward_to_dead_letter_queue(raw):
    def receive(topic):
        req = s.ReceiveMessageRequest(group=d.Resource(name="raw_g"), batch_size=32)
        req.message_queue.topic.name = topic
        req.invisible_duration.seconds = 30
        req.long_polling_timeout.seconds = 1
        out = raw("ReceiveMessage", req, s.ReceiveMessageResponse, stream=True)
        return [r.message for r in out if r.HasField("message")]
    raw("SendMessage", _send_req("fwd_t", b"give up"), s.SendMessageResponse)
    end = time.monotonic() + 5
    got = []
    while not got and time.monotonic() < end:
        got = receive("fwd_t")
    assert [m.body for m in got] == [b"give up"]
    handle = got[0].system_properties.receipt_handle
    fwd = s.ForwardMessageToDeadLetterQueueRequest(group=d.Resource(name="raw_g"), topic=d.Resource(name="fwd_t"),
                                                   receipt_handle=handle, message_id=got[0].system_properties.message_id,
                                                   delivery_attempt=1, max_delivery_attempts=16)
    assert raw("ForwardMessageToDeadLetterQueue", fwd, s.ForwardMessageToDeadLetterQueueResponse).status.code == d.OK
    # done for the group (an ack after it changes nothing), and stored in %DLQ%raw_g
    again = raw("ForwardMessageToDeadLetterQueue", fwd, s.ForwardMessageToDeadLetterQueueResponse)
    assert again.status.code == d.INVALID_RECEIPT_HANDLE
    fwd.receipt_handle = "not-a-handle"
    bad = raw("ForwardMessageToDeadLetterQueue", fwd, s.ForwardMessageToDeadLetterQueueResponse)
    assert bad.status.code == d.INVALID_RECEIPT_HANDLE
    dead = []
    end = time.monotonic() + 5
    while not dead and time.monotonic() < end:
        dead = receive("%DLQ%raw_g")
    assert [m.body for m in dead] == [b"give up"]
    assert dead[0].system_properties.message_id == got[0].system_properties.message_id
