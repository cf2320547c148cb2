"""The remoting front's compiled common send (rmqcore/remoting/_send_message.pyx) against the Python path it skips
(RemotingConnection._send): the same requests, fed to two servers over two stores, one with the compiled path and
one without, give equal answer frames (every header field and extFields entry) and byte-equal records (but the
store timestamp and the UNIQ_KEY the store makes for a message without one), refusals included."""
import asyncio
import os
import random
import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqcore.broker.broker import Broker
from rmqcore.broker.broker_config import BrokerConfig
from rmqcore.broker.topic_config import TopicConfig
from rmqcore.config import StoreConfig
from rmqcore.remoting import remoting_command as rc
from rmqcore.remoting._remoting_codec import encode_header
from rmqcore.remoting._send_message import SendMessage, send_response
from rmqcore.remoting.server import V2_NAMES, RemotingConnection, RemotingServer

MAX_BODY = 2048
BLANK_MAGIC_CODE = -875286124
GENERATED_UNIQ_KEY = re.compile(rb"UNIQ_KEY\x01[0-9A-F]{32}\x02")
SHORT_NAMES = {v: k for k, v in V2_NAMES.items()}


class _Transport:
    """What a RemotingConnection writes to, kept (no socket: it writes through writelines)."""

    def __init__(self):
        self.out = bytearray()

    def get_extra_info(self, key, default=None):
        return ("127.0.0.1", 5555) if key == "peername" else default

    def set_write_buffer_limits(self, high=None):
        pass

    def writelines(self, bufs):
        for b in bufs:
            self.out += b

    def get_write_buffer_size(self):
        return 0

    def is_closing(self):
        return False

    def close(self):
        pass


class _Side:
    def __init__(self, path, loop, fast):
        self.broker = b = Broker.open(path, BrokerConfig(), StoreConfig(
            mapped_file_size_commit_log=64 << 20, max_message_size=MAX_BODY, enabled_append_prop_crc=False))
        b.create_topic("t4", 4)
        b.create_topic("t1", 1)
        b.create_topic("ro", 4, perm=4)
        b.update_topic(TopicConfig("multi", topic_filter_type="MULTI_TAG"))
        self.loop = loop
        self.server = RemotingServer(b, port=0, address="127.0.0.1:10911")
        loop.run_until_complete(self.server.start())
        assert isinstance(self.server.send_message, SendMessage)
        if not fast:
            self.server.send_message = None
        self.transport = _Transport()
        self.conn = RemotingConnection(self.server)
        self.conn.connection_made(self.transport)
        self.pos = 0

    def feed(self, data, seed):
        random.seed(seed)           # a negative queue id is picked at random: the same pick on both sides
        self.conn.data_received(data)
        self.loop.run_until_complete(asyncio.sleep(0))
        out = bytes(self.transport.out)
        self.transport.out.clear()
        return out

    def records(self):
        """The commitlog's records written since the last call, each with its store timestamp zeroed (it is the
        put's clock)."""
        path = os.path.join(self.broker.store.path, "commitlog", "0" * 20)
        out = []
        if not os.path.exists(path):        # made by the first put
            return out
        with open(path, "rb") as f:
            while True:
                f.seek(self.pos)
                size, magic = struct.unpack(">ii", f.read(8))
                if size <= 0:
                    return out
                assert magic != BLANK_MAGIC_CODE, "the test's records filled the commitlog file: make it larger"
                f.seek(self.pos)
                rec = bytearray(f.read(size))
                (sys_flag,) = struct.unpack_from(">i", rec, 36)
                ts = 48 + (20 if sys_flag & 0x10 else 8)     # after the born host (IPv6: 16 + 4 bytes)
                rec[ts:ts + 8] = bytes(8)
                # the UNIQ_KEY the store gives a message that has none (MessageClientIDSetter: time and counter)
                out.append(GENERATED_UNIQ_KEY.sub(b"UNIQ_KEY\x01generated\x02", bytes(rec)))
                self.pos += size

    def close(self):
        self.loop.run_until_complete(self.server.stop())
        self.broker.close()


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    loop = asyncio.new_event_loop()
    fast = _Side(str(tmp_path_factory.mktemp("fast") / "store"), loop, True)
    slow = _Side(str(tmp_path_factory.mktemp("slow") / "store"), loop, False)
    yield fast, slow
    fast.close()
    slow.close()
    loop.close()


def _answers(data):
    cmds, used = rc.decode_frames(data)
    assert used == len(data)
    return [c.astuple() for c in cmds]


numbers = st.sampled_from(["0", "1", "3", "-1", "4", "99", "+1", " 1", "1_0", "abc", "", "٣", "2147483648",
                           "-2147483649", "0001", "-0", "99999999999999999999"])
props = st.dictionaries(
    st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "TRAN_MSG", "DELAY", "MAX_OFFSET", "a",
                     "é"]),
    # (delays of an hour or more: a delivery during the test would be written at a different time on each side)
    st.sampled_from(["true", "false", "TagA", "17", "3600", "k1 k2", "", "x\x01y"]), max_size=4)


def _usually(draw, common, odd):
    """``common`` (a strategy) nine times in ten, else ``odd``: a third of the requests are the common send, the
    rest differ from it in a field or more."""
    return draw(common if draw(st.integers(0, 9)) else odd)


@st.composite
def requests(draw):
    code = _usually(draw, st.sampled_from([310, 10]), st.sampled_from([310, 10, 320]))
    u = lambda common, odd: _usually(draw, common, odd)     # noqa: E731
    fields = {"producerGroup": u(st.just("pg"), st.none()),
              "topic": u(st.sampled_from(["t4", "t1"]),
                         st.sampled_from(["ro", "multi", "new-topic", "%RETRY%g", "bad topic", "", None])),
              "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
              "queueId": u(st.sampled_from(["0", "1", "3"]), numbers | st.none()),
              "sysFlag": u(st.just("0"), st.sampled_from(["1", "4", "8", "16"]) | numbers | st.none()),
              # (not 0: the store stamps a born time 0 with its clock)
              "bornTimestamp": u(st.sampled_from(["1700000000000", "1"]),
                                 numbers.filter(lambda v: v.strip("-0")) | st.none()),
              "flag": u(st.just("0"), st.just("7") | numbers | st.none()),
              "properties": u(props.map(lambda d: "".join(f"{k}\x01{v}\x02" for k, v in d.items())),
                              st.none() | st.sampled_from(["\x02", "a", "\x01", "a\x01b"])),
              "reconsumeTimes": u(st.sampled_from(["0", "2"]), numbers | st.none()),
              "unitMode": "false",
              "batch": u(st.sampled_from([None, "false"]), st.sampled_from(["true", "TRUE", "1"]))}
    fields = {k: v for k, v in fields.items() if v is not None}
    if code != 10:
        fields = {SHORT_NAMES.get(k, k): v for k, v in fields.items()}
        if draw(st.integers(0, 9)) == 0:
            fields["topic"] = draw(st.sampled_from(["t1", "t4"]))        # a long name beside the short ones
    body = draw(st.sampled_from([b"x" * 1024, b"", b"\x1f\x8bzz", b"y" * (MAX_BODY + 1)]) | st.binary(max_size=64))
    return rc.RemotingCommand(code=code, language="JAVA", version=395, opaque=draw(st.integers(0, 1 << 20)),
                              flag=draw(st.sampled_from([0, 0, 0, rc.ONEWAY_FLAG])), remark=None, ext_fields=fields,
                              serialize_type=draw(st.sampled_from([rc.JSON, rc.JSON, rc.ROCKETMQ])), body=body)


@settings(max_examples=300, deadline=None)
@given(st.lists(requests(), min_size=1, max_size=6), st.integers(0, 1 << 30))
def test_the_compiled_send_answers_and_stores_as_the_python_path(sides, reqs, seed):
    fast, slow = sides
    data = b"".join(rc.encode_request(r) for r in reqs)
    a, b = fast.feed(data, seed), slow.feed(data, seed)
    assert _answers(a) == _answers(b)
    assert fast.records() == slow.records()


def test_the_common_send_takes_the_compiled_path(sides):
    fast, slow = sides
    calls = []
    real = fast.server.send_message

    class Spy:
        def send(self, conn, cmd):
            calls.append(real.send(conn, cmd))
            return calls[-1]

        def count(self):
            real.count()
    fast.server.send_message = Spy()
    try:
        ext = {"a": "pg", "b": "t4", "c": "TBW102", "d": "4", "e": "2", "f": "0", "g": "1700000000000", "h": "0",
               "i": "TAGS\x01a\x02WAIT\x01true\x02", "j": "0", "k": "false", "m": "false"}
        data = rc.encode_request(rc.RemotingCommand(310, "JAVA", 395, 9, 0, None, ext, rc.JSON, b"z"))
        data += rc.encode_request(rc.RemotingCommand(310, "JAVA", 395, 10, 0, None, {**ext, "b": "%RETRY%g"},
                                                     rc.JSON, b"z"))
        out = fast.feed(data, 1)
    finally:
        fast.server.send_message = real
    assert calls == [True, False]           # the common send is compiled; a retry topic's takes the Python path
    assert _answers(out) == _answers(slow.feed(data, 1))
    assert fast.records() == slow.records()
    first = rc.decode_frames(out)[0][0]
    assert (first.code, first.ext_fields["queueId"]) == (0, "2")


@given(st.sampled_from([rc.JSON, rc.ROCKETMQ]), st.integers(-(1 << 31), (1 << 31) - 1),
       st.sampled_from(["7F00000100002A9F0000000000000000", "abc", "\"", "é"]),
       st.integers(-(1 << 31), (1 << 31) - 1), st.integers(-(1 << 63), (1 << 63) - 1))
def test_the_send_answer_template_is_encode_headers_bytes(stype, opaque, msg_id, queue_id, offset):
    ext = {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(offset), "MSG_REGION": "DefaultRegion",
           "TRACE_ON": "true"}
    assert send_response(stype, opaque, msg_id, queue_id, offset) == \
        encode_header(stype, 0, opaque, rc.RESPONSE_FLAG, None, ext, 0)


def test_sends_are_counted_for_the_console_and_metrics_as_the_python_path_counts_them(sides):
    """The compiled send counts its messages once a read (SendMessage.count, called after the read's requests):
    after each read, ServerEvents holds what the Python path's per-send count holds."""
    fast, slow = sides
    ext = {"a": "pg", "b": "t1", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1700000000000", "h": "0",
           "i": "TAGS\x01a\x02", "j": "0", "k": "false", "m": "false"}

    def figures(side):
        ev = side.server.events
        return ev.messages_in.get(("t1", "NORMAL"), 0), ev.bytes_in.get("t1", 0), list(ev.message_size)

    before = figures(fast), figures(slow)
    for n, body in ((5, b"x" * 10), (1, b"y" * 1500), (3, b"z" * 100)):
        data = b"".join(rc.encode_request(rc.RemotingCommand(310, "JAVA", 395, i, 0, None, ext, rc.JSON, body))
                        for i in range(n))
        fast.feed(data, 1)
        slow.feed(data, 1)
        assert figures(fast)[0] - before[0][0] == figures(slow)[0] - before[1][0]
        assert figures(fast)[1] - before[0][1] == figures(slow)[1] - before[1][1]
    assert figures(fast)[0] - before[0][0] == 9
    assert [a - b for a, b in zip(figures(fast)[2], before[0][2])] == \
        [a - b for a, b in zip(figures(slow)[2], before[1][2])]
    fast.records()
    slow.records()
