"""SendMessage's common request answered in one compiled call (rmqcore/server/_converter.pyx, CommonSend) against the
service's general path (MessagingService._unary and SendMessage): for any request — good, bad and odd — two
servers, one with the common send and one without, give the same answer and store the same records. And the common
send is what answers the common request, declines every other one without a trace, and leaves the store to the
server's loop to dispatch (the dispatcher thread only sweeping behind it)."""
from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("grpc")
pytest.importorskip("google.protobuf")

from rmqcore.broker import Broker  # noqa: E402
from rmqcore.broker.broker_config import BrokerConfig  # noqa: E402
from rmqcore.config import StoreConfig  # noqa: E402
from rmqcore.message import Message  # noqa: E402
from rmqcore.server import messaging_pb2 as pb  # noqa: E402
from rmqcore.server.server import MessagingServer, ServerConfig  # noqa: E402
from rmqcore.server.service import SERVICE, MessagingService  # noqa: E402

from store_util import queue_messages  # noqa: E402
from test_server_converter import NOW_NS, proto_messages  # noqa: E402

MD = (("x-mq-client-id", "client-1"), ("x-mq-client-version", "5.1.2"), ("x-mq-language", "PYTHON"))


class Context:
    """What grpc.aio gives a handler about its call: the metadata, the peer, the time left (no deadline)."""

    def __init__(self, md=MD):
        self._md = md

    def invocation_metadata(self):
        return self._md

    def peer(self):
        return "ipv4:127.0.0.1:40000"

    def time_remaining(self):
        return None


class Counting:
    """The service's CommonSend, counting the requests it answered."""

    def __init__(self, common):
        self.common, self.answered = common, 0

    def answer(self, req, context):
        resp = self.common.answer(req, context)
        self.answered += resp is not None
        return resp


class Side:
    """One server's service around its own broker, its SendMessage called as grpc.aio calls it."""

    def __init__(self, path, common: bool, queues: int = 1, **store):
        # One queue a topic: the round robin then picks the same queue on both sides whatever each path consumed.
        self.broker = Broker.open(path, BrokerConfig(client_default_topic_queue_nums=queues),
                                  StoreConfig(**store) if store else None)
        # refusals answered at once (their answers are compared here; RefusalThrottle is test_serve_limits')
        self.server = MessagingServer(self.broker, port=0, config=ServerConfig(refusal_per_second=0))
        self.service = MessagingService(self.server)
        self.server._service = self.service
        if not common:
            self.service._common = None
        elif self.service._common is not None:
            self.service._common = Counting(self.service._common)
        details = SimpleNamespace(method=f"/{SERVICE}/SendMessage", invocation_metadata=MD)
        self.send = self.service.handler().service(details).unary_unary

    def records(self):
        """Every stored message as a user reads it, but for the store's own time: its store timestamp, the
        record's __CRC32# (which covers it), and a born time of 0, which the store writes as its time of writing
        (the encoder's "now", read apart from store_timestamp: they may differ by a millisecond)."""
        out = []
        store = self.broker.store
        for topic, queue_ids in sorted(store.topics().items()):
            for q in queue_ids:
                for m in queue_messages(store, topic, q):
                    props = sorted((k, v) for k, v in m.properties.items() if k != "__CRC32#")
                    born = "now" if abs(m.born_timestamp - m.store_timestamp) <= 1 else m.born_timestamp
                    out.append((m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, bytes(m.body), m.flag,
                                m.sys_flag, born, m.born_host, props, m.msg_id))
        return out

    def close(self):
        self.broker.close()


def run(coro):
    return asyncio.run(coro)


async def send_both(sides, req):
    answers = []
    for side in sides:
        with mock.patch("time.time_ns", return_value=NOW_NS):
            resp = await side.send(req, Context())
        answers.append(resp.SerializeToString(deterministic=True))
    for side in sides:
        side.broker.store.wait_dispatched(10)
    return answers


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    base = tmp_path_factory.mktemp("common_send")
    pair = (Side(str(base / "common"), True), Side(str(base / "general"), False))
    yield pair
    for s in pair:
        s.close()


@st.composite
def common_messages(draw):
    """A random message made common (NORMAL, to TopicTest, no group, no delivery time) but for its other fields:
    so that most reach the common send, which then converts (or declines) whatever else they hold."""
    m = draw(proto_messages())
    m.topic.name = "TopicTest"
    sp = m.system_properties
    sp.message_type = pb.NORMAL
    sp.ClearField("message_group")
    sp.ClearField("delivery_timestamp")
    return m


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(messages=st.one_of(st.lists(common_messages(), min_size=1, max_size=1),
                          st.lists(proto_messages(), min_size=1, max_size=2)), repeat=st.integers(1, 3))
def test_a_request_is_answered_and_stored_as_the_general_path_answers_and_stores_it(sides, messages, repeat):
    req = pb.SendMessageRequest(messages=messages)
    for _ in range(repeat):         # the first send to a topic checks (and creates) it, the next go the common way
        a, b = run(send_both(sides, req))
        assert pb.SendMessageResponse.FromString(a) == pb.SendMessageResponse.FromString(b)
    assert sides[0].records() == sides[1].records()
    ev = [s.server.events.snapshot() for s in sides]
    for key in ("rpc_count", "messages_in", "bytes_in", "message_size"):
        assert ev[0][key] == ev[1][key]


def test_the_common_request_is_answered_by_the_common_send(sides):
    """(Else the test above would compare the general path with itself.)"""
    m = pb.Message(body=b"x" * 100, system_properties=pb.SystemProperties(message_id="01AB", tag="TagA",
                                                                           keys=["k1"], message_type=pb.NORMAL))
    m.topic.name = "common_t"
    counting = sides[0].service._common
    before = counting.answered
    for _ in range(3):
        a, b = run(send_both(sides, pb.SendMessageRequest(messages=[m])))
        assert a == b and pb.SendMessageResponse.FromString(a).status.code == pb.OK
    # the first send created the topic (general path); the broker's send cache then clears the next two
    assert counting.answered - before == 2
    assert sides[0].records() == sides[1].records()


def _message(topic="decline_t", **sp):
    m = pb.Message(body=b"hello", system_properties=pb.SystemProperties(**{"message_id": "01AB",
                                                                           "message_type": pb.NORMAL, **sp}))
    m.topic.name = topic
    return m


DECLINED = {
    "two messages": lambda: [_message(), _message()],
    "a namespace": lambda: [pb.Message(topic=pb.Resource(name="decline_t", resource_namespace="ns"), body=b"x",
                                       system_properties=pb.SystemProperties(message_id="01AB",
                                                                             message_type=pb.NORMAL))],
    "a message group": lambda: [_message(message_group="g1")],
    "an empty message group": lambda: [_message(message_group="")],
    "a delivery time": lambda: [_message(delivery_timestamp={"seconds": 1_900_000_000})],
    "a FIFO message": lambda: [_message(message_type=pb.FIFO)],
    "a transaction half": lambda: [_message(message_type=pb.TRANSACTION)],
    "a topic not yet sent to": lambda: [_message(topic="fresh_t")],
    "a topic of type FIFO": lambda: [_message(topic="fifo_t")],
    "a retry topic": lambda: [_message(topic="%RETRY%g1")],
    "an empty body": lambda: [pb.Message(topic=pb.Resource(name="decline_t"), body=b"",
                                         system_properties=pb.SystemProperties(message_id="01AB",
                                                                             message_type=pb.NORMAL))],
    "a bad tag": lambda: [_message(tag="a|b")],
    "no message id": lambda: [_message(message_id="")],
}


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_every_other_request_is_left_to_the_general_path_untouched(tmp_path, case):
    side = Side(str(tmp_path / "s"), True, queues=4)
    try:
        side.broker.create_topic("fifo_t", 4, message_type="FIFO")
        run(side.send(pb.SendMessageRequest(messages=[_message()]), Context()))      # decline_t checked, cached
        fifo = run(side.send(pb.SendMessageRequest(messages=[_message("fifo_t", message_type=pb.FIFO,
                                                                      message_group="g1")]), Context()))
        assert fifo.status.code == pb.OK and "fifo_t" in side.broker.send_entries     # checked, cached too
        side.broker.store.wait_dispatched(10)
        common = side.service._common.common
        store = side.broker.store
        before = (store.commit_log.max_offset, next(side.service._rr), side.server.events.snapshot())

        async def call():
            return common.answer(pb.SendMessageRequest(messages=DECLINED[case]()), Context())
        assert run(call()) is None
        after = (store.commit_log.max_offset, next(side.service._rr), side.server.events.snapshot())
        # nothing stored, no queue taken from the round robin (the two next() calls), nothing counted
        assert after[0] == before[0] and after[1] == before[1] + 1 and after[2] == before[2]
    finally:
        side.close()


def test_no_common_send_with_accounts_or_under_sync_flush(tmp_path):
    side = Side(str(tmp_path / "sync"), True, flush_disk_type="SYNC_FLUSH")
    try:
        assert side.service._common is None             # the answer waits for its flush: the general path
    finally:
        side.close()
    broker = Broker.open(str(tmp_path / "acl"))
    try:
        server = MessagingServer(broker, port=0, acl=SimpleNamespace())
        assert MessagingService(server)._common is None   # every request is authorized: the general path
    finally:
        broker.close()


def test_a_put_the_store_refuses_is_answered_as_the_general_path_answers_it(tmp_path):
    """A put that raises stores nothing: the common send declines, and the general path gives the refusal."""
    side = Side(str(tmp_path / "s"), True, max_message_size=4096)
    try:
        run(side.send(pb.SendMessageRequest(messages=[_message()]), Context()))     # the topic checked, cached
        whole = _message()
        whole.body = b"b" * 4096        # within the converter's limit (the body alone), past the record's
        answered = side.service._common.answered
        resp = run(side.send(pb.SendMessageRequest(messages=[whole]), Context()))
        assert resp.status.code == pb.BAD_REQUEST and "exceeds max_message_size 4096" in resp.status.message
        assert side.service._common.answered == answered
        side.broker.store.wait_dispatched(5)
        assert [r[4] for r in side.records()] == [b"hello"]      # only the first message is stored
    finally:
        side.close()


def readable(store, topic, count, queues=1, timeout=5.0):
    """The topic's messages once ``count`` are readable (or at the timeout), looking without waking the dispatcher."""
    end = time.monotonic() + timeout
    while True:
        got = [m for q in range(queues) for m in queue_messages(store, topic, q)]
        if len(got) >= count or time.monotonic() > end:
            return got
        time.sleep(0.002)


def test_the_loop_dispatches_its_sends_and_the_thread_sweeps_the_puts_of_others(tmp_path):
    broker = Broker.open(str(tmp_path / "store"))
    reput = broker.store.reput
    box = {}
    ready = threading.Event()

    async def main():
        async with MessagingServer(broker, host="127.0.0.1", port=0) as server:
            box["loop"], box["stop"] = asyncio.get_running_loop(), asyncio.Event()
            box["service"] = server._service
            ready.set()
            await box["stop"].wait()
        box["external_after"] = reput._external

    t = threading.Thread(target=asyncio.run, args=(main(),))
    t.start()
    try:
        assert ready.wait(10)
        assert reput._external                          # the loop runs the passes
        # a put from another thread than the loop's (a delivery, a check's commit): the thread's sweep takes it,
        # unpoked (wait_dispatched would poke it)
        r = broker.send(Message("swept_t", b"from a thread", 0))
        assert r.ok and [bytes(m.body) for m in readable(broker.store, "swept_t", 1)] == [b"from a thread"]
        # a send in the loop becomes readable too (the loop's own pass alone: the failing-pass test below)
        req = pb.SendMessageRequest(messages=[_message(topic="loop_t")])
        fut = asyncio.run_coroutine_threadsafe(box["service"].SendMessage(req, pb.SendMessageResponse(), {},
                                                                           Context(), None), box["loop"])
        fut.result(10)
        assert len(readable(broker.store, "loop_t", 1, queues=4)) == 1
    finally:
        if "loop" in box:
            box["loop"].call_soon_threadsafe(box["stop"].set)
        t.join(30)
    try:
        assert box["external_after"] is False           # a stopped server hands the passes back to the thread
        r = broker.send(Message("after_t", b"after the server", 0))
        assert r.ok and broker.store.wait_dispatched(5)
    finally:
        broker.close()


def test_a_failing_dispatch_pass_in_the_loop_is_said_once_and_retried(tmp_path, caplog, monkeypatch):
    side = Side(str(tmp_path / "s"), True)
    reput = side.broker.store.reput
    monkeypatch.setattr(reput, "SWEEP", 3600.0)         # the loop's passes only, as under a running server
    reput.drive_externally(True)
    try:
        def full():
            raise OSError(28, "No space left on device")

        async def send_then_passes(n):
            resp = await side.send(pb.SendMessageRequest(messages=[_message("full_t")]), Context())
            for _ in range(n):
                side.service._dispatch()
            return resp
        time.sleep(0.1)                                 # the thread took up its sweep pace
        reput._do_reput = full                          # the pass fails (a consume-queue file it cannot make)
        with caplog.at_level("ERROR"):
            assert run(send_then_passes(3)).status.code == pb.OK      # the send is stored and answered
        said = [r for r in caplog.records if "dispatch" in r.getMessage() and "failed" in r.getMessage()]
        assert len(said) == 1 and "No space left" in side.broker.store.runtime_info()["dispatch_error"]
        assert queue_messages(side.broker.store, "full_t") == []
        del reput._do_reput                             # room again: the next pass dispatches the send

        async def passes():
            side.service._dispatch()
        run(passes())
        assert [bytes(m.body) for m in queue_messages(side.broker.store, "full_t")] == [b"hello"]
    finally:
        reput.drive_externally(False)
        side.close()
