"""`rmqcore serve` driven by the official RocketMQ 5 Python client (rocketmq-python-client): producers (normal,
FIFO, delay, transactions with the orphan check), simple consumers (receive, ack, change of invisible time,
redelivery, DLQ), a push consumer, tag and SQL filters. The server runs in a child process on 127.0.0.1."""
from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("rocketmq")
pytest.importorskip("grpc")

from rocketmq import (ConsumeResult, FilterExpression, MessageListener, Producer, PushConsumer,  # noqa: E402
                      SimpleConsumer, TransactionChecker, TransactionResolution)
from rocketmq.grpc_protocol import FilterType  # noqa: E402
from rocketmq.v5.exception import BadRequestException  # noqa: E402

from serve_util import FAST_CONF, ServerProcess, config, message, prepare, receive_all  # noqa: E402

TOPICS = {"fifo_t": ("FIFO", 4), "fifo_push_t": ("FIFO", 2), "delay_t": ("DELAY", 2), "tx_t": ("TRANSACTION", 2), "tx_orphan": ("TRANSACTION", 2)}
GROUPS = {"fifo_g": {"fifo": True}, "fifo_push_g": {"fifo": True}, "dlq_g": {"retry_max_times": 1}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("serve") / "store")
    prepare(store, TOPICS, GROUPS)
    with ServerProcess(store, FAST_CONF) as s:
        yield s
        assert s.terminate() == 0


@pytest.fixture
def producer(server):
    made = []

    def make(*topics, checker=None):
        p = Producer(config(server.endpoint), topics, checker=checker)
        p.startup()
        made.append(p)
        return p
    yield make
    for p in made:
        p.shutdown()


@pytest.fixture
def consumer(server):
    made = []

    def make(group, subscription, await_s=1):
        c = SimpleConsumer(config(server.endpoint), group, subscription, await_s)
        c.startup()
        made.append(c)
        return c
    yield make
    for c in made:
        c.shutdown()


def test_starts_within_a_second(server):
    # from spawning the child (interpreter start and imports included) to "listening on", RPCs accepted, on an
    # existing store: well under 1 s on a quiet machine; 3 s leaves room for a loaded CI runner
    print(f"ready after {server.ready_after:.2f} s")
    assert server.ready_after < 3.0
    assert server.port > 0


def test_send_receive_ack(producer, consumer):
    p = producer("normal_t")
    sent = {}
    for i in range(20):
        r = p.send(message("normal_t", f"body-{i}".encode(), tag="TagA", keys=f"k{i}", props={"n": str(i)}))
        sent[r.message_id] = i
    c = consumer("normal_g", {"normal_t": FilterExpression("*")})
    got = receive_all(c, 20)
    assert sorted(sent[m.message_id] for m in got) == list(range(20))
    for m in got:
        i = sent[m.message_id]
        assert m.body == f"body-{i}".encode()
        assert m.tag == "TagA" and m.keys == {f"k{i}"} and m.properties == {"n": str(i)}
        assert m.delivery_attempt == 1 and not m.corrupted
    # acked: nothing comes back, even after the invisible time
    time.sleep(1.2)
    assert c.receive(32, 1) == []


def test_unacked_comes_back_with_attempt_counted_and_change_invisible(producer, consumer):
    p = producer("redeliver_t")
    p.send(message("redeliver_t", b"again"))
    c = consumer("redeliver_g", {"redeliver_t": FilterExpression("*")})
    first = receive_all(c, 1, invisible=1, ack=False)
    assert len(first) == 1 and first[0].delivery_attempt == 1
    second = receive_all(c, 1, invisible=1, ack=False, deadline_s=10)
    assert [m.body for m in second] == [b"again"] and second[0].delivery_attempt == 2
    # the first delivery's handle expired: the proxy's INVALID_RECEIPT_HANDLE
    with pytest.raises(BadRequestException):
        c.ack(first[0])
    # more invisible time for the second delivery: not back after its original 1 s
    c.change_invisible_duration(second[0], 4)
    time.sleep(1.5)
    assert c.receive(32, 1) == []
    third = receive_all(c, 1, invisible=5, ack=False, deadline_s=10)
    assert [m.delivery_attempt for m in third] == [3]
    c.ack(third[0])


def test_max_attempts_go_to_dlq(server, producer, consumer, tmp_path):
    p = producer("dlq_t")
    p.send(message("dlq_t", b"poison"))
    c = consumer("dlq_g", {"dlq_t": FilterExpression("*")})
    attempts = []
    end = time.monotonic() + 15
    while time.monotonic() < end and len(attempts) < 3:
        for m in c.receive(32, 1):
            attempts.append(m.delivery_attempt)
    # retry_max_times 1: two deliveries (max attempts 2), then the DLQ instead of a third
    assert attempts == [1, 2]
    d = consumer("dlq_reader", {"%DLQ%dlq_g": FilterExpression("*")})
    dead = receive_all(d, 1, deadline_s=10)
    assert [m.body for m in dead] == [b"poison"]


def test_fifo_order_and_queue_held_while_unacked(producer, consumer):
    p = producer("fifo_t")
    for i in range(10):
        for g in ("A", "B", "C"):
            p.send(message("fifo_t", f"{g}{i}".encode(), group=g))
    c = consumer("fifo_g", {"fifo_t": FilterExpression("*")})
    seen: dict[str, list[int]] = {}
    end = time.monotonic() + 30
    while sum(map(len, seen.values())) < 30 and time.monotonic() < end:
        batch = c.receive(32, 5)
        if not batch:
            continue
        # nothing more from these queues until the batch is acked
        again = c.receive(32, 5)
        assert not {m.message_group for m in again} & {m.message_group for m in batch}
        for m in batch + again:
            seen.setdefault(m.message_group, []).append(int(m.body[1:]))
            c.ack(m)
    assert seen == {g: list(range(10)) for g in ("A", "B", "C")}


def test_delay_message_not_before_its_time(producer, consumer):
    p = producer("delay_t")
    at = int(time.time()) + 3
    p.send(message("delay_t", b"later", deliver_at=at))
    c = consumer("delay_g", {"delay_t": FilterExpression("*")})
    early = c.receive(32, 5)
    assert early == [] or time.time() >= at
    got = receive_all(c, 1, deadline_s=15)
    assert [m.body for m in got] == [b"later"]
    assert time.time() >= at - 0.05
    assert got[0].delivery_timestamp == at * 1000


def test_a_delivery_time_in_milliseconds_is_refused_naming_the_unit(producer):
    """The Python client's Message.delivery_timestamp is seconds since the epoch (README): a millisecond value
    is refused, and the refusal says which unit is expected."""
    p = producer("delay_t")
    with pytest.raises(BadRequestException) as e:
        p.send(message("delay_t", b"later", deliver_at=int(time.time() * 1000) + 3000))
    assert "seconds since the epoch" in str(e.value) and "milliseconds were given" in str(e.value)


class _Checker(TransactionChecker):
    def __init__(self, answer):
        self.answer = answer
        self.asked = []

    def check(self, message):
        self.asked.append(message.message_id)
        return self.answer


def test_transaction_commit_and_rollback(producer, consumer):
    p = producer("tx_t", checker=_Checker(TransactionResolution.ROLLBACK))
    t1 = p.begin_transaction()
    p.send(message("tx_t", b"committed"), t1)
    t2 = p.begin_transaction()
    p.send(message("tx_t", b"rolled back"), t2)
    c = consumer("tx_g", {"tx_t": FilterExpression("*")})
    assert c.receive(32, 5) == []             # halves are invisible
    t1.commit()
    t2.rollback()
    got = receive_all(c, 1, deadline_s=5)
    time.sleep(0.5)
    got += c.receive(32, 5)
    assert [m.body for m in got] == [b"committed"]


def test_orphan_transaction_checked_through_telemetry(producer, consumer):
    checker = _Checker(TransactionResolution.COMMIT)
    p = producer("tx_orphan", checker=checker)
    t = p.begin_transaction()
    r = p.send(message("tx_orphan", b"orphan"), t)
    # never ended by the producer: the server's check asks it over Telemetry, it answers COMMIT
    c = consumer("tx_orphan_g", {"tx_orphan": FilterExpression("*")})
    got = receive_all(c, 1, deadline_s=20)
    assert [m.body for m in got] == [b"orphan"]
    assert r.message_id in checker.asked


def test_tag_and_sql_filters(producer, consumer):
    p = producer("filter_t")
    for i in range(12):
        p.send(message("filter_t", f"m{i}".encode(), tag=("TagA", "TagB", "TagC")[i % 3],
                       props={"n": str(i), "region": "eu" if i % 2 else "us"}))
    tags = consumer("tag_g", {"filter_t": FilterExpression("TagA || TagC")})
    got = receive_all(tags, 8, deadline_s=10)
    assert sorted(int(m.body[1:]) for m in got) == [i for i in range(12) if i % 3 != 1]
    sql = consumer("sql_g", {"filter_t": FilterExpression("n BETWEEN 3 AND 9 AND region = 'eu' AND TAGS <> 'TagB'",
                                                          FilterType.SQL)})
    got = receive_all(sql, 3, deadline_s=10)
    time.sleep(0.2)
    got += sql.receive(32, 5)
    assert sorted(int(m.body[1:]) for m in got) == [3, 5, 9]


def test_bad_sql_filter_is_refused(server, consumer):
    c = consumer("badsql_g", {"normal_t": FilterExpression("a >", FilterType.SQL)})
    with pytest.raises(BadRequestException) as e:
        c.receive(1, 5)
    assert "expected" in str(e.value)


class _Listener(MessageListener):
    def __init__(self, fail_first: bool = False):
        self.bodies = []
        self.attempts = {}
        self.fail_first = fail_first
        self.lock = threading.Lock()

    def consume(self, message):
        with self.lock:
            self.attempts[message.body] = message.delivery_attempt
            if self.fail_first and message.delivery_attempt == 1:
                return ConsumeResult.FAILURE
            self.bodies.append(message.body)
        return ConsumeResult.SUCCESS


def test_push_consumer(server, producer):
    p = producer("push_t")
    for i in range(30):
        p.send(message("push_t", f"p{i}".encode()))
    listener = _Listener()
    pc = PushConsumer(config(server.endpoint), "push_g", listener, {"push_t": FilterExpression("*")})
    pc.startup()
    try:
        end = time.monotonic() + 30
        while len(listener.bodies) < 30 and time.monotonic() < end:
            time.sleep(0.1)
    finally:
        pc.shutdown()
    assert sorted(listener.bodies) == sorted(f"p{i}".encode() for i in range(30))


def test_push_consumer_fifo_keeps_each_groups_order(server, producer):
    p = producer("fifo_push_t")
    for i in range(8):
        for g in ("X", "Y"):
            p.send(message("fifo_push_t", f"{g}{i}".encode(), group=g))
    listener = _Listener()
    pc = PushConsumer(config(server.endpoint), "fifo_push_g", listener, {"fifo_push_t": FilterExpression("*")})
    pc.startup()
    try:
        end = time.monotonic() + 30
        while len(listener.bodies) < 16 and time.monotonic() < end:
            time.sleep(0.1)
    finally:
        pc.shutdown()
    for g in (b"X", b"Y"):
        assert [int(b[1:]) for b in listener.bodies if b[:1] == g] == list(range(8))


def test_push_consumer_failure_is_retried_with_the_attempt_counted(server, producer):
    p = producer("push_retry_t")
    for i in range(5):
        p.send(message("push_retry_t", f"r{i}".encode()))
    listener = _Listener(fail_first=True)
    pc = PushConsumer(config(server.endpoint), "push_retry_g", listener, {"push_retry_t": FilterExpression("*")})
    pc.startup()
    try:
        end = time.monotonic() + 30
        while len(listener.bodies) < 5 and time.monotonic() < end:
            time.sleep(0.1)
    finally:
        pc.shutdown()
    # every message failed once (nack: a new invisible time), came back as attempt 2 and succeeded
    assert sorted(listener.bodies) == [f"r{i}".encode() for i in range(5)]
    assert set(listener.attempts.values()) == {2}


def test_sync_flush_sends_from_many_threads(tmp_path):
    store = str(tmp_path / "store")
    with ServerProcess(store, dict(FAST_CONF, flushDiskType="SYNC_FLUSH")) as s:
        p = Producer(config(s.endpoint), ("sync_t",))
        p.startup()
        errors = []

        def send(k):
            try:
                for i in range(10):
                    p.send(message("sync_t", f"{k}-{i}".encode()))
            except Exception as e:          # pragma: no cover - reported below
                errors.append(e)
        threads = [threading.Thread(target=send, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        p.shutdown()
        assert not errors
        c = SimpleConsumer(config(s.endpoint), "sync_g", {"sync_t": FilterExpression("*")}, 1)
        c.startup()
        got = receive_all(c, 40, deadline_s=15)
        c.shutdown()
        assert sorted(m.body for m in got) == sorted(f"{k}-{i}".encode() for k in range(4) for i in range(10))
        assert all("WAIT" not in m.properties for m in got)
        assert s.terminate() == 0


def test_namespace_wraps_topics_and_groups(server):
    p = Producer(config(server.endpoint, namespace="ns1"), ("nst",))
    p.startup()
    try:
        p.send(message("nst", b"in ns1"))
    finally:
        p.shutdown()
    inside = SimpleConsumer(config(server.endpoint, namespace="ns1"), "nsg", {"nst": FilterExpression("*")}, 1)
    inside.startup()
    try:
        got = receive_all(inside, 1, deadline_s=10)
        assert [(m.body, m.topic) for m in got] == [(b"in ns1", "nst")]
    finally:
        inside.shutdown()
    # the broker keeps it as RocketMQ does: topic ns1%nst (another group, no namespace, reads it there)
    outside = SimpleConsumer(config(server.endpoint), "plain_g", {"ns1%nst": FilterExpression("*")}, 1)
    outside.startup()
    try:
        assert [m.body for m in receive_all(outside, 1, deadline_s=10)] == [b"in ns1"]
        assert outside.receive(32, 5) == []
    finally:
        outside.shutdown()


def test_halves_of_a_4x_producer_are_not_checked_by_5x_producers_and_are_reported(tmp_path):
    """Halves another broker stored for a 4.x producer (PGROUP its own group): as RocketMQ 5, the check goes only to
    a producer registered under that group, and a 5.x producer is registered under its topics (its EndTransaction
    carries the topic as producer group, which the broker would refuse for them). Nobody can answer them under
    serve: after transaction_check_max checks they are in TRANS_CHECK_MAX_TIME_TOPIC, and /metrics, the console's
    overview and `rmqcore inspect` say so. A 5.x producer's own orphan half is still checked and committed."""
    pytest.importorskip("aiohttp")                          # --http: the console extra
    pytest.importorskip("jinja2")
    import json
    import signal
    import subprocess
    import sys
    import urllib.request
    from rmqcore import Message
    from rmqcore.broker import Broker
    from serve_util import PKG_PARENT
    store = str(tmp_path / "store")
    prepare(store, {"tx_legacy": ("TRANSACTION", 2)})
    with Broker.open(store) as b:
        for i in range(3):      # what a 4.x TransactionMQProducer of group legacy_pg left open
            r = b.send(Message("tx_legacy", f"legacy-{i}".encode(), i % 2,
                               properties={"TRAN_MSG": "true", "PGROUP": "legacy_pg"}))
            assert r.ok
    conf = dict(FAST_CONF, transactionCheckMax="3")
    with ServerProcess(store, conf, args=("--http", "127.0.0.1:0")) as s:
        checker = _Checker(TransactionResolution.COMMIT)
        p = Producer(config(s.endpoint), ("tx_legacy",), checker=checker)
        p.startup()
        try:
            t = p.begin_transaction()
            mine = p.send(message("tx_legacy", b"five"), t)         # never ended: the check asks this producer
            c = SimpleConsumer(config(s.endpoint), "tx_legacy_g", {"tx_legacy": FilterExpression("*")}, 1)
            c.startup()
            try:
                got = receive_all(c, 1, deadline_s=20)
            finally:
                c.shutdown()
            assert [m.body for m in got] == [b"five"]
            unresolved = 0
            end = time.monotonic() + 30
            while unresolved < 3 and time.monotonic() < end:
                time.sleep(0.2)
                text = urllib.request.urlopen(s.console_url + "/metrics", timeout=5).read().decode()
                for line in text.splitlines():
                    if line.startswith("rmqcore_transaction_unresolved_halves{"):
                        unresolved = float(line.rsplit(" ", 1)[1])
            assert unresolved == 3
            assert set(checker.asked) == {mine.message_id}          # never asked about legacy_pg's halves
            assert "rmqcore_transaction_checks_without_producer_total" in text
            overview = json.loads(urllib.request.urlopen(s.console_url + "/api/v1/overview", timeout=5).read())
            report = overview["transactions"]["unresolved_halves"]
            assert report["count"] == 3 and report["producer_groups"] == {
                "legacy_pg": {"halves": 3, "topics": ["tx_legacy"]}}
            assert any("TRANS_CHECK_MAX_TIME_TOPIC" in pr and "legacy_pg (3)" in pr
                       for pr in overview["health"]["problems"])
        finally:
            p.shutdown()
        s.proc.send_signal(signal.SIGTERM)
        err = s.proc.stderr.read()
        assert s.proc.wait(30) == 0
        # one line a check pass, naming the group, not one per half
        assert "no live producer to ask about" in err and "legacy_pg (3)" in err
    out = subprocess.run([sys.executable, "-m", "rmqcore", "inspect", store], cwd=PKG_PARENT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("transactions"))
    assert "3 half message(s) never resolved" in line and "legacy_pg 3 (tx_legacy)" in line


def test_overflowing_timestamps_and_deep_filters_get_their_own_codes(tmp_path):
    """Malformed requests that answered INTERNAL_ERROR with a traceback in the log each (issue 36): a born_timestamp
    or a QueryOffset timestamp whose milliseconds pass a Java long (BAD_REQUEST), an SQL92 filter nested past the
    parser's depth (ILLEGAL_FILTER_EXPRESSION). Nothing is logged for them; the server goes on."""
    import signal
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as d
    from rocketmq.grpc_protocol import service_pb2 as sv
    service = "/apache.rocketmq.v2.MessagingService/"
    store = str(tmp_path / "store")
    prepare(store, {"raw_t": ("NORMAL", 2)}, {"raw_g": {}})
    with ServerProcess(store, FAST_CONF) as s, grpc.insecure_channel(s.endpoint) as ch:
        md = (("x-mq-client-id", "raw-client"),)

        def call(method, req, resp_type, stream=False):
            kind = ch.unary_stream if stream else ch.unary_unary
            out = kind(service + method, request_serializer=type(req).SerializeToString,
                       response_deserializer=resp_type.FromString)(req, metadata=md, timeout=10)
            return list(out) if stream else out

        def send(born=None):
            req = sv.SendMessageRequest()
            m = req.messages.add(body=b"x")
            m.topic.name = "raw_t"
            m.system_properties.message_id = "0102FC00000001"
            m.system_properties.message_type = d.NORMAL
            if born is not None:
                m.system_properties.born_timestamp.seconds, m.system_properties.born_timestamp.nanos = born
            return call("SendMessage", req, sv.SendMessageResponse).status

        for born in ((2 ** 62, 0), (-(2 ** 62), 0), (2 ** 63 - 1, 999_999_999), (9_223_372_036_854_776, 0)):
            st = send(born)
            assert st.code == d.BAD_REQUEST and "born_timestamp" in st.message, (born, st)
        assert send((9_223_372_036_854_775, 0)).code == d.OK           # the last second that fits
        for seconds in (2 ** 62, -(2 ** 62), 2 ** 63 - 1):
            req = sv.QueryOffsetRequest(message_queue=d.MessageQueue(topic=d.Resource(name="raw_t"), id=0),
                                        query_offset_policy=d.TIMESTAMP)
            req.timestamp.seconds = seconds
            st = call("QueryOffset", req, sv.QueryOffsetResponse).status
            assert st.code == d.BAD_REQUEST and "timestamp" in st.message, (seconds, st)
        req = sv.ReceiveMessageRequest(group=d.Resource(name="raw_g"),
                                       message_queue=d.MessageQueue(topic=d.Resource(name="raw_t"), id=-1),
                                       batch_size=1, auto_renew=True)
        req.long_polling_timeout.seconds = 1
        for expr in ("(" * 1400 + "a = 1" + ")" * 1400, "NOT " * 1000 + "a = 1"):    # both under 4096 characters
            req.filter_expression.CopyFrom(d.FilterExpression(type=d.SQL, expression=expr))
            got = [r.status for r in call("ReceiveMessage", req, sv.ReceiveMessageResponse, stream=True)
                   if r.HasField("status")]
            assert [st.code for st in got] == [d.ILLEGAL_FILTER_EXPRESSION], got
        s.proc.send_signal(signal.SIGTERM)
        err = s.proc.stderr.read()
        assert s.proc.wait(30) == 0
    assert "Traceback" not in err and "failed" not in err, err


def test_unexpected_errors_are_logged_one_line_per_kind_with_a_count(caplog):
    """An RPC failing the same way again and again: one line for the first (with where it was raised, no
    traceback), then at most one line per kind and interval, with how many came since."""
    import logging
    from rmqcore.server.service import ErrorLog
    now = [0.0]
    errors = ErrorLog(interval=60, clock=lambda: now[0])

    def fail(n):
        try:
            raise OverflowError(f"boom {n}")
        except OverflowError as e:
            return e
    with caplog.at_level(logging.ERROR, logger="rmqcore.server.service"):
        for i in range(500):
            errors.error("SendMessage", fail(i))
        errors.error("QueryOffset", fail(0))                     # another kind: its own first line
        now[0] = 61
        errors.error("SendMessage", fail(500))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and not any(r.exc_info for r in caplog.records)
    assert lines[0].startswith("SendMessage failed: OverflowError: boom 0 at test_serve.py:") \
        and lines[0].endswith("(1 so far)")
    assert lines[1].startswith("QueryOffset failed: OverflowError: boom 0")
    assert lines[2].startswith("SendMessage failed 500 times in the last 60 s: OverflowError: boom 500") \
        and lines[2].endswith("(501 so far)")
