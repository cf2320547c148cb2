"""The remoting front's compiled common pull (rmqcore/remoting/_pull_message.pyx) against the Python path it skips
(RemotingConnection._pull): each request is fed to one server twice, with the compiled path and without it, from
the same consumer offsets; both give the same answer frames (every header field, the records byte for byte) and
leave the same offsets committed, refusals, empty answers and moved offsets included."""
import asyncio
import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqcore import Message
from rmqcore.broker.broker import Broker
from rmqcore.broker.broker_config import BrokerConfig
from rmqcore.broker.subscription_group_config import SubscriptionGroupConfig
from rmqcore.config import StoreConfig
from rmqcore.remoting import remoting_command as rc
from rmqcore.remoting._pull_message import PullMessage
from rmqcore.remoting.server import RemotingConnection, RemotingServer
from test_remoting_send_fast import _Transport

PER_QUEUE = 40          # messages in each queue of t4 and t1


class _Side:
    def __init__(self, path, loop):
        self.broker = b = Broker.open(path, BrokerConfig(), StoreConfig(mapped_file_size_commit_log=64 << 20))
        b.create_topic("t4", 4)
        b.create_topic("t1", 1)
        b.create_topic("wo", 4, perm=2)            # write only: a pull is refused
        groups = b.subscription_group_manager
        groups.update_subscription_group_config(SubscriptionGroupConfig("g_off", consume_enable=False))
        for g in ("g", "g_push", "g_tag", "g_sql"):      # as their consumers' heartbeats made them
            groups.update_subscription_group_config(SubscriptionGroupConfig(g))
        for topic, queues in (("t4", 4), ("t1", 1), ("wo", 4)):
            for i in range(PER_QUEUE * queues):
                tag = ("TagA", "TagB", "")[i % 3]
                props = {"TAGS": tag} if tag else {}
                b.send(Message(topic, bytes([65 + i % 26]) * (1 + i * 37 % 2000), i % queues,
                               properties={**props, "KEYS": f"k{i}", "a": str(i % 2)}))
        b.store.wait_dispatched(10)
        self.loop = loop
        self.server = RemotingServer(b, port=0, address="127.0.0.1:10911")
        loop.run_until_complete(self.server.start())
        self.compiled = self.server.pull_message
        assert isinstance(self.compiled, PullMessage)
        self.transport = _Transport()
        self.conn = RemotingConnection(self.server)
        self.conn.connection_made(self.transport)
        # a push consumer's subscriptions, as its heartbeat registers them (a pull without FLAG_SUBSCRIPTION
        # reads them): every tag for g_push, TagA for g_tag, SQL92 for g_sql
        self.server.consumers.update({
            "g_push": {self.conn: {"t4": ("TAG", "*", 1), "t1": ("TAG", "", 1)}},
            "g_tag": {self.conn: {"t4": ("TAG", "TagA", 1)}},
            "g_sql": {self.conn: {"t4": ("SQL92", "a = '1'", 1)}}})

    def feed(self, data, compiled: bool):
        self.server.pull_message = self.compiled if compiled else None
        self.conn.data_received(data)
        self.loop.run_until_complete(asyncio.sleep(0))
        out = bytes(self.transport.out)
        self.transport.out.clear()
        return out

    @property
    def offsets(self):
        return self.broker.consumer_offset_manager.offset_table

    def close(self):
        self.server.pull_message = self.compiled
        self.loop.run_until_complete(self.server.stop())
        self.broker.close()


@pytest.fixture(scope="module")
def side(tmp_path_factory):
    loop = asyncio.new_event_loop()
    s = _Side(str(tmp_path_factory.mktemp("pullfast") / "store"), loop)
    yield s
    s.close()
    loop.close()


def _answers(data):
    cmds, used = rc.decode_frames(data)
    assert used == len(data)
    return [c.astuple() for c in cmds]


def _usually(draw, common, odd):
    return draw(common if draw(st.integers(0, 9)) else odd)


numbers = st.sampled_from(["0", "1", "3", "-1", "4", "+1", " 1", "1_0", "abc", "", "٣", "2147483648", "0001", "-0",
                           "99999999999999999999"])
offsets = st.sampled_from(["0", "1", "5", "31", "32", "33", str(PER_QUEUE - 1), str(PER_QUEUE),
                           str(PER_QUEUE + 1), "1000000000"])


@st.composite
def requests(draw):
    u = lambda common, odd: _usually(draw, common, odd)     # noqa: E731
    code = u(st.sampled_from([11, 361]), st.sampled_from([11, 361, 12]))
    flag_subscription = draw(st.booleans())
    sys_flag = draw(st.sampled_from([0, 1, 2, 3])) | (4 if flag_subscription else 0)
    fields = {"consumerGroup": u(st.sampled_from(["g", "g_push"]),
                                 st.sampled_from(["g_tag", "g_sql", "g_off", "bad group", "", "%RETRY%x", None])
                                 | st.from_regex(r"\Agnew[0-9]{1,3}\Z")),
              "topic": u(st.sampled_from(["t4", "t1"]), st.sampled_from(["wo", "missing", "bad topic", "", None])),
              "queueId": u(st.sampled_from(["0", "1", "3"]), numbers | st.none()),
              "queueOffset": u(offsets, numbers | st.none()),
              "maxMsgNums": u(st.sampled_from(["32", "1", "7"]), st.sampled_from(["0", "-5", "100000"]) | numbers),
              "sysFlag": u(st.just(str(sys_flag)), numbers | st.none()),
              # (past the queue's end: not committed)
              "commitOffset": u(st.sampled_from(["-1", "0", "3", str(PER_QUEUE), str(PER_QUEUE + 1)]),
                                st.just("99") | numbers | st.none()),
              # no wait: a parked pull would be answered after the test's read (FLAG_SUSPEND with 0 answers now)
              "suspendTimeoutMillis": u(st.just("0"), st.sampled_from(["-1", "abc"]) | st.none()),
              "subVersion": u(st.sampled_from(["0", "1700000000000"]), numbers | st.none())}
    if flag_subscription or draw(st.booleans()):
        fields["subscription"] = u(st.sampled_from(["*", None]), st.sampled_from(["", " * ", "TagA", "TagA || TagB",
                                                                                 "a = '1'"]))
        fields["expressionType"] = u(st.sampled_from(["TAG", None]), st.sampled_from(["", "SQL92", "tag"]))
    fields = {k: v for k, v in fields.items() if v is not None}
    return rc.RemotingCommand(code=code, language="JAVA", version=407, opaque=draw(st.integers(0, 1 << 20)),
                              flag=draw(st.sampled_from([0, 0, 0, rc.ONEWAY_FLAG])), remark=None, ext_fields=fields,
                              serialize_type=draw(st.sampled_from([rc.JSON, rc.JSON, rc.ROCKETMQ])), body=b"")


@settings(max_examples=400, deadline=None)
@given(st.lists(requests(), min_size=1, max_size=5))
def test_the_compiled_pull_answers_and_commits_as_the_python_path(side, reqs):
    data = b"".join(rc.encode_request(r) for r in reqs)
    before = copy.deepcopy(side.offsets)
    a = side.feed(data, True)
    after_compiled = copy.deepcopy(side.offsets)
    side.offsets.clear()
    side.offsets.update(copy.deepcopy(before))
    b = side.feed(data, False)
    assert _answers(a) == _answers(b)
    assert after_compiled == side.offsets


def test_the_common_pull_takes_the_compiled_path(side):
    calls = []
    real = side.compiled

    class Spy:
        def pull(self, conn, cmd):
            calls.append(real.pull(conn, cmd))
            return calls[-1]
    ext = {"consumerGroup": "g_push", "topic": "t4", "queueId": "2", "queueOffset": "4", "maxMsgNums": "32",
           "sysFlag": "3", "commitOffset": "4", "suspendTimeoutMillis": "15000", "subVersion": "1700000000000"}
    data = b"".join(rc.encode_request(rc.RemotingCommand(11, "JAVA", 407, i, 0, None, e, rc.JSON, b"")) for i, e in
                    enumerate([ext, {**ext, "consumerGroup": "g_tag"}, {**ext, "queueOffset": str(PER_QUEUE)}]))
    side.server.pull_message = Spy()
    try:
        side.conn.data_received(data)
    finally:
        side.server.pull_message = real
    out = bytes(side.transport.out)
    side.transport.out.clear()
    # a pull of every tag that finds messages is compiled; a tag subscription's, and one with nothing to find yet
    # (it waits), take the Python path
    assert calls == [True, False, False]
    first = rc.decode_frames(out)[0][0]
    assert (first.code, first.remark, first.ext_fields) == (0, "FOUND", {
        "suggestWhichBrokerId": "0", "nextBeginOffset": "36", "minOffset": "0", "maxOffset": str(PER_QUEUE)})
    assert side.broker.consumer_offset_manager.query_offset("g_push", "t4", 2) == 4
    assert side.server.events.messages_out[("t4", "g_push")] >= 32
    for t in list(side.conn.pulls):         # the parked third pull
        t.cancel()
    side.loop.run_until_complete(asyncio.sleep(0))
    side.transport.out.clear()
