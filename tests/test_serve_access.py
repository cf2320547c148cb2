"""`rmqcore serve` against a hostile client (issue 36, items 1 and 10): no system topic over gRPC or through the
console's message reads, the accounts' topic permissions on those reads, signatures whose date is checked, the
group permission on Heartbeat, Telemetry and NotifyClientTermination, and receipt handles that cannot be forged.
Real clients where one can show a case, raw stubs for forged requests."""
from __future__ import annotations

import base64
import hmac
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from hashlib import sha1

import pytest

pytest.importorskip("rocketmq")
grpc = pytest.importorskip("grpc")

from rocketmq import FilterExpression, Producer, SimpleConsumer  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as d  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as s  # noqa: E402

from serve_util import FAST_CONF, ServerProcess, config, message, prepare  # noqa: E402

SERVICE = "/apache.rocketmq.v2.MessagingService/"
# TopicValidator.SYSTEM_TOPIC_SET and the rmq_sys_ prefix (the timer wheel's topic among them)
SYSTEM_TOPICS = ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "rmq_sys_wheel_timer", "rmq_sys_x",
                 "TBW102", "RMQ_SYS_TRACE_TOPIC", "SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX_V2", "BenchmarkTest",
                 "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT")


def utc_date(at: float | None = None) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if at is None else at))


def signed(ak: str, sk: str, date: str | None, cid: str = "raw-client") -> tuple:
    """The headers a RocketMQ 5 client sends, signing ``date`` (None: no x-mq-date-time header at all)."""
    sig = hmac.new(sk.encode(), (date or "").encode(), sha1).hexdigest()
    md = [("x-mq-client-id", cid),
          ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}")]
    if date is not None:
        md.append(("x-mq-date-time", date))
    return tuple(md)


class Raw:
    def __init__(self, endpoint: str):
        self.channel = grpc.insecure_channel(endpoint)
        self.md = (("x-mq-client-id", "raw-client"),)

    def __call__(self, method, req, resp_type, stream=False, md=None):
        kind = self.channel.unary_stream if stream else self.channel.unary_unary
        fn = kind(SERVICE + method, request_serializer=type(req).SerializeToString,
                  response_deserializer=resp_type.FromString)
        out = fn(req, metadata=md or self.md, timeout=10)
        return list(out) if stream else out

    def receive(self, group, topic, batch=32, invisible_s=30, poll_s=1, md=None):
        req = s.ReceiveMessageRequest(group=d.Resource(name=group), batch_size=batch)
        req.message_queue.topic.name = topic
        req.invisible_duration.seconds = invisible_s
        req.long_polling_timeout.seconds = poll_s
        out = self("ReceiveMessage", req, s.ReceiveMessageResponse, stream=True, md=md)
        status = [r.status for r in out if r.HasField("status")][0]
        return status, [r.message for r in out if r.HasField("message")]

    def receive_some(self, group, topic, want=1, deadline_s=10, **kw):
        end = time.monotonic() + deadline_s
        got = []
        while len(got) < want and time.monotonic() < end:
            got += self.receive(group, topic, **kw)[1]
        return got

    def close(self):
        self.channel.close()


def send_req(topic, body=b"x", mtype=d.NORMAL, **sp):
    req = s.SendMessageRequest()
    m = req.messages.add()
    m.topic.name = topic
    m.body = body
    m.system_properties.message_id = sp.pop("message_id", "0102FC0000000" + str(time.monotonic_ns() % 10))
    m.system_properties.message_type = mtype
    for k, v in sp.items():
        getattr(m.system_properties, k).CopyFrom(v) if hasattr(v, "CopyFrom") else setattr(m.system_properties, k, v)
    return req


def rolled_back_half(raw, topic, body, md=None) -> str:
    """A transaction message sent and rolled back: its transaction id (the half's offset message id)."""
    r = raw("SendMessage", send_req(topic, body, d.TRANSACTION), s.SendMessageResponse, md=md)
    assert r.status.code == d.OK, r.status
    tid = r.entries[0].transaction_id
    end = s.EndTransactionRequest(topic=d.Resource(name=topic), transaction_id=tid, resolution=d.ROLLBACK,
                                  message_id=r.entries[0].message_id, source=d.SOURCE_CLIENT)
    assert raw("EndTransaction", end, s.EndTransactionResponse, md=md).status.code == d.OK
    return tid


def refused(status, code=d.ILLEGAL_TOPIC, text="cannot access system topic"):
    return status.code == code and text in status.message


def test_system_topics_are_illegal_on_every_rpc(tmp_path):
    store = str(tmp_path / "store")
    prepare(store, {"tx_t": ("TRANSACTION", 1), "delay_t": ("DELAY", 1)}, {"sys_g": {}})
    with ServerProcess(store, FAST_CONF) as srv:
        raw = Raw(srv.endpoint)
        try:
            # what a consumer of the system topics would have got: a rolled-back transaction's body (in the half
            # topic) and a message delayed by a minute (in the timer wheel's topic)
            rolled_back_half(raw, "tx_t", b"rolled back, never to be read")
            later = d.Message().system_properties.delivery_timestamp
            later.seconds = int(time.time()) + 60
            r = raw("SendMessage", send_req("delay_t", b"not before a minute", d.DELAY, delivery_timestamp=later),
                    s.SendMessageResponse)
            assert r.status.code == d.OK, r.status
            for topic in SYSTEM_TOPICS:
                res = d.Resource(name=topic)
                mq = d.MessageQueue(id=0, topic=res)
                group = d.Resource(name="sys_g")
                route = raw("QueryRoute", s.QueryRouteRequest(topic=res), s.QueryRouteResponse)
                assert refused(route.status) and not route.message_queues, (topic, route)
                # twice: the second send would take the common (compiled) path if the first had let it in
                for _ in range(2):
                    sent = raw("SendMessage", send_req(topic, b"to a system topic"), s.SendMessageResponse)
                    assert refused(sent.status), (topic, sent.status)
                status, got = raw.receive("sys_g", topic, poll_s=0)
                assert refused(status) and got == [], (topic, status)
                ack = s.AckMessageRequest(group=group, topic=res)
                ack.entries.add(message_id="m", receipt_handle="r")
                for method, req, resp in (
                        ("QueryAssignment", s.QueryAssignmentRequest(topic=res, group=group),
                         s.QueryAssignmentResponse),
                        ("AckMessage", ack, s.AckMessageResponse),
                        ("ChangeInvisibleDuration", s.ChangeInvisibleDurationRequest(
                            group=group, topic=res, receipt_handle="r"), s.ChangeInvisibleDurationResponse),
                        ("ForwardMessageToDeadLetterQueue", s.ForwardMessageToDeadLetterQueueRequest(
                            group=group, topic=res, receipt_handle="r"), s.ForwardMessageToDeadLetterQueueResponse),
                        ("EndTransaction", s.EndTransactionRequest(topic=res, transaction_id="0" * 32,
                                                                   resolution=d.COMMIT), s.EndTransactionResponse),
                        ("UpdateOffset", s.UpdateOffsetRequest(group=group, message_queue=mq, offset=0),
                         s.UpdateOffsetResponse),
                        ("GetOffset", s.GetOffsetRequest(group=group, message_queue=mq), s.GetOffsetResponse),
                        ("QueryOffset", s.QueryOffsetRequest(message_queue=mq, query_offset_policy=d.END),
                         s.QueryOffsetResponse)):
                    assert refused(raw(method, req, resp).status), (topic, method)
            # the broker's own consumer groups are refused the same way (MixAll.isSysConsumerGroup)
            status, _got = raw.receive("CID_RMQ_SYS_TRANS", "delay_t", poll_s=0)
            assert refused(status, d.ILLEGAL_CONSUMER_GROUP, "cannot use system consumer group"), status
            # a dead-letter topic is not a system topic: its group reads it (see test_serve_security)
            status, _got = raw.receive("sys_g", "%DLQ%sys_g", poll_s=0)
            assert status.code in (d.TOPIC_NOT_FOUND, d.MESSAGE_NOT_FOUND), status
            # the official client: a producer of a system topic cannot send to it (its route is refused)
            p = Producer(config(srv.endpoint), ("TBW102",))
            try:
                with pytest.raises(Exception, match="TBW102"):
                    p.startup()
                    p.send(message("TBW102", b"into the template"))
            finally:
                try:
                    p.shutdown()
                except Exception:
                    pass
            # ... and a consumer of the half topic receives nothing
            c = SimpleConsumer(config(srv.endpoint), "sys_g",
                               {"RMQ_SYS_TRANS_HALF_TOPIC": FilterExpression("*")}, 5)
            try:
                with pytest.raises(Exception):
                    c.startup()
                    c.receive(32, 5)
            finally:
                try:
                    c.shutdown()
                except Exception:
                    pass
        finally:
            raw.close()
        assert srv.terminate() == 0
    from rmqcore.broker import Broker
    with Broker.open(store) as b:
        # nothing was created for the names asked about
        assert b.topic_config_manager.select_topic_config("rmq_sys_x") is None


def _acl(tmp_path) -> str:
    path = str(tmp_path / "acl.json")
    with open(path, "w") as f:
        json.dump({"accounts": [
            {"accessKey": "app", "secretKey": "app-secret", "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY",
             "topicPerms": ["auth_t=PUB|SUB", "readonly_t=SUB"], "groupPerms": ["auth_g=SUB"]},
            {"accessKey": "deny", "secretKey": "deny-secret", "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY"},
            {"accessKey": "root", "secretKey": "root-secret", "admin": True},
        ]}, f)
    return path


def test_signature_dates_and_group_permissions(tmp_path):
    store = str(tmp_path / "store")
    prepare(store, groups={"auth_g": {}, "other_g": {}})
    # The server runs in UTC+8 ("CST-8", a POSIX zone needing no tzdata): RocketMQ 5's clients write their local
    # clock with a 'Z', so both a client on UTC (this test's official client) and one in the server's zone pass.
    with ServerProcess(store, FAST_CONF, args=["--acl", _acl(tmp_path)], env={"TZ": "CST-8"}) as srv:
        raw = Raw(srv.endpoint)
        try:
            route = s.QueryRouteRequest(topic=d.Resource(name="auth_t"))
            now = time.time()
            for date in (utc_date(now), time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now + 8 * 3600))):
                r = raw("QueryRoute", route, s.QueryRouteResponse, md=signed("app", "app-secret", date))
                assert r.status.code == d.OK, (date, r.status)
            # far off, malformed, absent, captured ten minutes ago, or in another zone (UTC-5): refused
            for date in ("20000101T000000Z", "20990101T000000Z", "garbage", None, utc_date(now - 600),
                         utc_date(now - 5 * 3600)):
                r = raw("QueryRoute", route, s.QueryRouteResponse, md=signed("app", "app-secret", date))
                assert r.status.code == d.UNAUTHORIZED, (date, r.status)
                assert "x-mq-date-time" in r.status.message
            # the official client signs with its clock: it works
            p = Producer(config(srv.endpoint, "app", "app-secret"), ("auth_t",))
            p.startup()
            try:
                p.send(message("auth_t", b"signed now"))
            finally:
                p.shutdown()

            ok = signed("app", "app-secret", utc_date())
            # Heartbeat and NotifyClientTermination of a group the account may not use: FORBIDDEN
            hb = raw("Heartbeat", s.HeartbeatRequest(group=d.Resource(name="other_g"), client_type=d.SIMPLE_CONSUMER),
                     s.HeartbeatResponse, md=ok)
            assert hb.status.code == d.FORBIDDEN and "other_g" in hb.status.message, hb.status
            hb = raw("Heartbeat", s.HeartbeatRequest(group=d.Resource(name="auth_g"), client_type=d.SIMPLE_CONSUMER),
                     s.HeartbeatResponse, md=ok)
            assert hb.status.code == d.OK, hb.status
            bye = raw("NotifyClientTermination", s.NotifyClientTerminationRequest(group=d.Resource(name="other_g")),
                      s.NotifyClientTerminationResponse, md=ok)
            assert bye.status.code == d.FORBIDDEN, bye.status
            bye = raw("NotifyClientTermination", s.NotifyClientTerminationRequest(group=d.Resource(name="auth_g")),
                      s.NotifyClientTerminationResponse, md=ok)
            assert bye.status.code == d.OK, bye.status

            # Telemetry: a consumer's group, a producer's topics (the transaction check sends half messages to the
            # producers of a topic), each authorized as the matching RPC is
            def settings(cmd):
                call = raw.channel.stream_stream(SERVICE + "Telemetry",
                                                 request_serializer=s.TelemetryCommand.SerializeToString,
                                                 response_deserializer=s.TelemetryCommand.FromString)
                stream = call(iter([cmd]), metadata=signed("app", "app-secret", utc_date(), "tel-client"),
                              timeout=10)
                try:
                    return next(stream).status
                finally:
                    stream.cancel()

            def consumer(group, topic="auth_t"):
                cmd = s.TelemetryCommand()
                cmd.settings.client_type = d.SIMPLE_CONSUMER
                cmd.settings.subscription.group.name = group
                cmd.settings.subscription.subscriptions.add().topic.name = topic
                return cmd

            def producer(*topics):
                cmd = s.TelemetryCommand()
                cmd.settings.client_type = d.PRODUCER
                for t in topics:
                    cmd.settings.publishing.topics.add().name = t
                return cmd
            assert settings(consumer("auth_g")).code == d.OK
            assert settings(consumer("other_g")).code == d.FORBIDDEN
            assert settings(consumer("auth_g", "other_t")).code == d.FORBIDDEN
            assert settings(producer("auth_t")).code == d.OK
            assert settings(producer("auth_t", "readonly_t")).code == d.FORBIDDEN
            assert refused(settings(producer("RMQ_SYS_TRANS_HALF_TOPIC")))
        finally:
            raw.close()
        assert srv.terminate() == 0


def test_receipt_handles_cannot_be_forged(tmp_path):
    store = str(tmp_path / "store")
    prepare(store, {"handle_t": ("NORMAL", 1)}, {"handle_g": {}, "thief_g": {}})
    with ServerProcess(store, FAST_CONF) as srv:
        raw = Raw(srv.endpoint)
        try:
            assert raw("SendMessage", send_req("handle_t", b"mine"), s.SendMessageResponse).status.code == d.OK
            (m,) = raw.receive_some("handle_g", "handle_t")
            handle = m.system_properties.receipt_handle
            # the fields a handle shows (version, queue, offset, nonce, pop time, invisible time), then its MAC
            version, q, off, nonce, pop_time, _inv, *rest = handle.split(":")
            mac = "".join(f":{p}" for p in rest)
            now = int(time.time() * 1000)
            forged = [f"r1:0:0:1:{now}:99999999", f"r1:{q}:{off}:{nonce}:{now}:99999999",
                      f"{version}:{q}:{off}:{nonce}:{now}:99999999{mac}",              # a later pop time
                      f"{version}:{q}:{off}:{nonce}:{pop_time}:99999999{mac}",         # a longer invisible time
                      f"{version}:{q}:{off}:{nonce}:{now}:99999999:{'0' * 32}"]
            topic, group = d.Resource(name="handle_t"), d.Resource(name="handle_g")
            for text in forged:
                ack = s.AckMessageRequest(group=group, topic=topic)
                ack.entries.add(message_id=m.system_properties.message_id, receipt_handle=text)
                assert raw("AckMessage", ack, s.AckMessageResponse).status.code == d.INVALID_RECEIPT_HANDLE, text
                change = s.ChangeInvisibleDurationRequest(group=group, topic=topic, receipt_handle=text,
                                                          message_id=m.system_properties.message_id)
                change.invisible_duration.seconds = 60
                r = raw("ChangeInvisibleDuration", change, s.ChangeInvisibleDurationResponse)
                assert r.status.code == d.INVALID_RECEIPT_HANDLE, text
            # the real handle, in another group's hands
            ack = s.AckMessageRequest(group=d.Resource(name="thief_g"), topic=topic)
            ack.entries.add(message_id=m.system_properties.message_id, receipt_handle=handle)
            assert raw("AckMessage", ack, s.AckMessageResponse).status.code == d.INVALID_RECEIPT_HANDLE
            # none of that acked it: the consumer's own handle still holds the message
            change = s.ChangeInvisibleDurationRequest(group=group, topic=topic, receipt_handle=handle,
                                                      message_id=m.system_properties.message_id)
            change.invisible_duration.seconds = 60
            r = raw("ChangeInvisibleDuration", change, s.ChangeInvisibleDurationResponse)
            assert r.status.code == d.OK, r.status
            renewed = r.receipt_handle
        finally:
            raw.close()
        assert srv.terminate() == 0
    # a handle the server issued still acks after a restart (its key is kept with the pop state)
    with ServerProcess(store, FAST_CONF) as srv:
        raw = Raw(srv.endpoint)
        try:
            ack = s.AckMessageRequest(group=group, topic=topic)
            ack.entries.add(message_id=m.system_properties.message_id, receipt_handle=renewed)
            assert raw("AckMessage", ack, s.AckMessageResponse).status.code == d.OK
            change.receipt_handle = renewed
            r = raw("ChangeInvisibleDuration", change, s.ChangeInvisibleDurationResponse)
            assert r.status.code == d.INVALID_RECEIPT_HANDLE and "not in flight" in r.status.message
        finally:
            raw.close()
        assert srv.terminate() == 0


def _http(url: str, auth: tuple[str, str] | None):
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_console_message_reads_follow_topic_permissions_and_no_system_topic(tmp_path):
    pytest.importorskip("aiohttp")                          # --http: the console extra
    pytest.importorskip("jinja2")
    store = str(tmp_path / "store")
    prepare(store, {"secret_t": ("NORMAL", 1), "tx_t": ("TRANSACTION", 1), "auth_t": ("NORMAL", 1)})
    with ServerProcess(store, FAST_CONF, args=["--acl", _acl(tmp_path), "--http", "127.0.0.1:0"]) as srv:
        api = srv.console_url + "/api/v1"
        raw = Raw(srv.endpoint)
        root = signed("root", "root-secret", utc_date())
        try:
            r = raw("SendMessage", send_req("secret_t", b"for readers of secret_t"), s.SendMessageResponse, md=root)
            assert r.status.code == d.OK
            secret_id = r.entries[0].message_id
            r = raw("SendMessage", send_req("auth_t", b"for app"), s.SendMessageResponse, md=root)
            assert r.status.code == d.OK
            tid = rolled_back_half(raw, "tx_t", b"rolled back", md=root)
        finally:
            raw.close()
        half_offset = int(tid[-16:], 16)
        deny, app, admin = ("deny", "deny-secret"), ("app", "app-secret"), ("root", "root-secret")

        def found(auth, **q):
            status, body = _http(api + "/messages?" + urllib.parse.urlencode(q), auth)
            assert status == 200, body
            return body["items"]
        end = time.monotonic() + 10
        while not found(admin, topic="secret_t") and time.monotonic() < end:
            time.sleep(0.1)
        (row,) = found(admin, topic="secret_t")
        status, body = _http(f"{api}/messages/{row['commitlog_offset']}", admin)
        assert status == 200 and body["text"] == "for readers of secret_t"
        # an account denied every topic reads none of it: not by topic, not by offset, not by id, not by queue
        assert _http(api + "/messages?topic=secret_t", deny)[0] == 403
        status, body = _http(f"{api}/messages/{row['commitlog_offset']}", deny)
        assert status == 403 and "for readers" not in json.dumps(body)
        assert found(deny, msg_id=secret_id) == []
        assert found(deny, msg_id=row["msg_id"]) == []
        assert _http(api + "/topics/secret_t/queues/0/messages", deny)[0] == 403
        # an account with SUB on a topic reads that topic only
        assert [m["topic"] for m in found(app, topic="auth_t")] == ["auth_t"]
        assert _http(api + "/messages?topic=secret_t", app)[0] == 403
        # a transaction's half is in a system topic: nobody reads it, the admin included
        for auth in (deny, app, admin):
            status, body = _http(f"{api}/messages/{half_offset}", auth)
            assert status == 403 and "rolled back" not in json.dumps(body), (auth, body)
            assert _http(api + "/messages?topic=RMQ_SYS_TRANS_HALF_TOPIC", auth)[0] == 403
            assert _http(api + "/topics/RMQ_SYS_TRANS_HALF_TOPIC/queues/0/messages", auth)[0] == 403
            assert found(auth, msg_id=tid) == []
        assert srv.terminate() == 0


def test_console_without_accounts_reads_no_system_topic(tmp_path):
    pytest.importorskip("aiohttp")                          # --http: the console extra
    pytest.importorskip("jinja2")
    store = str(tmp_path / "store")
    prepare(store, {"tx_t": ("TRANSACTION", 1)})
    with ServerProcess(store, FAST_CONF, args=["--http", "127.0.0.1:0"]) as srv:
        api = srv.console_url + "/api/v1"
        raw = Raw(srv.endpoint)
        try:
            tid = rolled_back_half(raw, "tx_t", b"rolled back")
        finally:
            raw.close()
        status, body = _http(f"{api}/messages/{int(tid[-16:], 16)}", None)
        assert status == 403 and "cannot access system topic" in body["error"]
        assert _http(api + "/messages?topic=RMQ_SYS_TRANS_HALF_TOPIC", None)[0] == 403
        assert srv.terminate() == 0
