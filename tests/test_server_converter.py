"""The compiled converter (rmqcore/server/_converter.pyx, what SendMessage runs) against the Python reference
(rmqcore/server/converter.py), differentially: for any protocol Message — good, bad and odd — both give equal store
Messages (every field, the properties in the same order, the same record bytes) or the same refusal (type, code,
text); both build the same SendMessage answer from the same put results. And the compiled one imports without
protobuf (the core's install has none)."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
import zlib
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("google.protobuf")

from rmqcore._encoder import MessageEncoder  # noqa: E402
from rmqcore.message import PutResult  # noqa: E402
from rmqcore.server import _converter as compiled  # noqa: E402
from rmqcore.server import converter as reference  # noqa: E402
from rmqcore.server import messaging_pb2 as pb  # noqa: E402
from rmqcore.status import PutStatus  # noqa: E402

import rmqcore  # noqa: E402

# The directory holding the rmqcore package imported here (a source tree, or site-packages), for a child process.
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))
NOW_NS = 1_764_000_000_123_456_789          # time.time_ns() while converting: a message without a born time
FIELDS = ("topic", "body", "queue_id", "flag", "sys_flag", "born_timestamp", "born_host", "reconsume_times",
          "prepared_transaction_offset")
ENCODER = MessageEncoder("10.0.0.1:10911")

# Text as a client may send it: anything protobuf carries (no lone surrogates), and the edges the checks draw.
any_text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12)
edge_text = st.sampled_from(["", " ", "\t \u3000", "\x1c", "a|b", "|", "a\x00b", "\x01", "x\x02", "a\nb", "\r", "a\rb",
                             "ключ", "\u200b", "é\u0301", "a b", "\x7f"])
text = st.one_of(any_text, edge_text)
# What well-behaved clients send: every check passes.
good_text = st.text(alphabet="abcXYZ019_-.:é ключ", min_size=1, max_size=10).filter(str.strip)
long_text = st.one_of(st.sampled_from([1024, 1025]), st.integers(60, 1100)).map(lambda n: "t" * n)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
seconds = st.one_of(st.integers(-10, 10), st.integers(1_600_000_000, 1_900_000_000), int64)
nanos = st.one_of(st.integers(0, 999_999_999), int32)
prop_keys = st.one_of(text, st.sampled_from(sorted(reference.SYSTEM_PROPERTIES)))
message_ids = st.one_of(st.sampled_from(["", "id\x7f", "id\u0085", "x" * 128, "x" * 129]), any_text)
topics = st.one_of(st.sampled_from(["TopicTest", "t%1", "bad topic", ""]), any_text)
born_hosts = st.one_of(
    st.tuples(*[st.integers(0, 300)] * 4).map(lambda t: ".".join(map(str, t))),
    st.sampled_from(["", "10.0.0.1", "1.2.3.255", "1.2.3.256", "256.1.2.3", "10.0.0.1:8080", "host:port", "::1",
                     "[::1]:10911", "1.2.3", "1.2.3.4.5",
                     "1.2.3.", ".1.2.3", "001.002.003.004", "1.2.3.0256", "1.2.3.²", "1.2.3.١", "localhost",
                     "1.2.3.4:", ":", "a:b:c"]),
    any_text)
raw_bodies = st.binary(min_size=1, max_size=64)
# Fields of SystemProperties that protobuf kept as unknown (the compiled converter reads the system properties in
# their wire form, where these are written back): an unknown number, known numbers in the wrong wire type, unknown
# fields inside a Timestamp, and a group (which the wire reader cannot skip: it reads by attribute instead).
UNKNOWN_FIELDS = {
    "unknown varint": b"\x98\x06\x05",
    "message_id as a varint": b"\x18\x07",
    "tag as a varint": b"\x08\x01",
    "body_encoding as bytes": b"\x2a\x01\x02",
    "unknown in born_timestamp": b"\x3a\x04\x08\x01\x28\x05",
    "a group": b"\x9b\x06\x1a\x02zz\x9c\x06",      # holding what reads as a message_id, were it not in a group
}


@st.composite
def mostly(draw, good, odd):
    """``good`` seven times in eight: so that the checks after the first one are reached too."""
    return draw(odd) if draw(st.integers(0, 7)) == 7 else draw(good)


@st.composite
def bodies(draw, encoding):
    raw = draw(raw_bodies)
    if encoding != pb.GZIP:
        return draw(mostly(st.just(raw), st.one_of(st.just(b""), st.binary(min_size=65, max_size=80))))
    packed = gzip.compress(raw)
    deflated = zlib.compress(raw, 5)                # what RocketMQ's clients write under GZIP: stored as it came
    return draw(mostly(st.sampled_from([packed, deflated]), st.sampled_from([
        raw,                                        # neither gzip nor zlib (or, by chance, a zlib header)
        packed[:len(packed) // 2],                  # cut short (EOFError)
        packed[:10] + b"\xff" * 12,                 # a gzip header over a stream that is not deflate (zlib.error)
        packed + b"trailing garbage",
        deflated[:len(deflated) // 2],              # a zlib header: stored as it came (the reader inflates)
        b"\x78\x9d" + deflated[2:],                 # check bits wrong: not a zlib header
        b"\x78\xbb" + deflated[2:],                 # a preset dictionary: not a body Java inflates
        b"",
    ])))


@st.composite
def proto_messages(draw):
    m = pb.Message()
    m.topic.name = draw(mostly(st.sampled_from(["TopicTest", "%RETRY%g_1"]), topics))
    for k, v in draw(st.dictionaries(mostly(good_text, prop_keys), mostly(good_text, text), max_size=4)).items():
        m.user_properties[k] = v
    if draw(st.integers(0, 9)) == 9:                # user properties of about MAX_USER_PROPERTY_SIZE
        m.user_properties["big"] = "v" * (reference.MAX_USER_PROPERTY_SIZE - 3 + draw(st.integers(-2, 2)))
    sp = m.system_properties
    if draw(st.booleans()):
        sp.tag = draw(mostly(good_text, st.one_of(text, long_text)))
    sp.keys.extend(draw(st.lists(mostly(good_text, text), max_size=3)))
    sp.message_id = draw(mostly(st.sampled_from(["01C0A8010100002A9F0000000000000001", "m"]), message_ids))
    sp.message_type = draw(st.sampled_from([pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION, 0, 5, 6, 77]))
    if draw(st.booleans()):
        long_group = st.sampled_from([64, 65, 70]).map(lambda n: "g" * n)
        sp.message_group = draw(mostly(good_text, st.one_of(text, long_group)))
    if draw(st.booleans()):
        sp.delivery_timestamp.seconds = draw(seconds)
        sp.delivery_timestamp.nanos = draw(nanos)
    if draw(st.booleans()):
        sp.orphaned_transaction_recovery_duration.seconds = draw(st.one_of(st.integers(-5, 100), int64))
    if draw(st.booleans()):
        sp.trace_context = draw(text)
    sp.body_encoding = draw(st.sampled_from([0, pb.IDENTITY, pb.GZIP]))
    m.body = draw(bodies(sp.body_encoding))
    if draw(st.booleans()):
        sp.born_timestamp.seconds = draw(seconds)
        sp.born_timestamp.nanos = draw(nanos)
    elif draw(st.booleans()):
        sp.born_timestamp.SetInParent()             # set, and zero: born at 0, not "now"
    sp.born_host = draw(born_hosts)
    if draw(st.integers(0, 3)) == 3:
        sp.MergeFromString(draw(st.sampled_from(sorted(UNKNOWN_FIELDS.values()))))
    return m


def outcome(fn, *args):
    """What a call gives, comparable: each (Message, type) as its fields, its properties in order and its record
    (or the error encoding it raises), or the error the call raises."""
    with mock.patch("time.time_ns", return_value=NOW_NS):
        try:
            got = fn(*args)
        except Exception as e:  # noqa: BLE001  (any error must be the same one)
            return ("raised", type(e), getattr(e, "code", None), str(e))
    return ("returned", [describe(pair) for pair in (got if isinstance(got, list) else [got])])


def describe(pair):
    msg, mtype = pair
    fields = [getattr(msg, f) for f in FIELDS]
    try:
        msg.queue_id = 0                            # as SendMessage does before the put
        if msg.born_timestamp == 0:                 # (compared above) the encoder would write "now" for 0
            msg.born_timestamp = 1
        record = bytes(ENCODER.encode(msg).record(0))
    except Exception as e:  # noqa: BLE001
        record = (type(e), str(e))
    return (type(msg), mtype, fields, list(msg.properties.items()), record)


def _valid(**sp):
    m = pb.Message(body=b"hello", system_properties=pb.SystemProperties(**{"message_id": "01AB", "tag": "TagA", **sp}))
    m.topic.name = "TopicTest"
    return m


# Each limit on both sides of its edge, and each character a check looks for inside an otherwise good text: the
# random messages below may miss an exact edge.
EDGES = [
    *[dict(tag="t" * n) for n in (1024, 1025)],
    *[dict(message_group="g" * n) for n in (64, 65)],
    *[dict(message_id="i" * n) for n in (128, 129)],
    *[dict(born_host=h) for h in ("1.2.3.255", "1.2.3.256", "255.2.3.4", "256.2.3.4", "1.2.3.25a", "1.2.3.4:5")],
    *[dict(tag=f"a{c}b") for c in "\x00\x01\x02\n\r|\t"],
    *[dict(keys=[f"a{c}b"]) for c in "\x00\x01\x02\n\r|\t"],
    *[dict(message_group=f"a{c}b") for c in "\x00\x01\x02\n\r|\t"],
    *[dict(delivery_timestamp={"seconds": s, "nanos": n}) for s, n in ((0, 1_000_000), (0, 999_999), (1, -1))],
    # set but empty (a refusal, or born at 0) against not set (nothing, or born now)
    dict(tag=""), dict(message_group=""), dict(trace_context=""), dict(born_timestamp={}), dict(delivery_timestamp={}),
    dict(keys=["a", "b", "c"], trace_context="t", body_encoding=pb.IDENTITY, born_host="10.0.0.1",
         born_timestamp={"seconds": 1_700_000_000, "nanos": 7_000_000}),
    dict(message_type=pb.TRANSACTION, orphaned_transaction_recovery_duration={"seconds": 5}),
    dict(message_type=pb.TRANSACTION), dict(message_type=-1),
]


@pytest.mark.parametrize("unknown", [None, *UNKNOWN_FIELDS])
@pytest.mark.parametrize("fields", EDGES, ids=repr)
def test_each_edge_converts_as_the_reference_converts_it(fields, unknown):
    def edge():
        m = _valid(**fields)
        if unknown:
            m.system_properties.MergeFromString(UNKNOWN_FIELDS[unknown])
        return m
    m = edge()
    assert outcome(compiled.to_store_message, m) == outcome(reference.to_store_message, m)
    for k, v in (("k", "v" * (reference.MAX_USER_PROPERTY_SIZE - 1)), ("k", "v\x01"), ("k\x02", "v"), ("", "v")):
        m = edge()
        m.user_properties[k] = v
        assert outcome(compiled.to_store_message, m) == outcome(reference.to_store_message, m)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(proto_messages())
@example(pb.Message(body=b"x", system_properties=pb.SystemProperties(message_id="m", tag="")))
@example(pb.Message(body=b"x", system_properties=pb.SystemProperties(message_id="m", message_group="",
                                                                      trace_context="")))
def test_a_message_converts_as_the_reference_converts_it(m):
    before = m.SerializeToString(deterministic=True)
    got = outcome(compiled.to_store_message, m)
    assert got == outcome(reference.to_store_message, m)
    # Reading a field that is not set (born_timestamp, then HasField) must not set it.
    assert m.SerializeToString(deterministic=True) == before


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(proto_messages(), min_size=1, max_size=4), st.integers(1, 80))
def test_a_request_converts_as_the_reference_converts_it(messages, max_body):
    req = pb.SendMessageRequest(messages=messages)
    assert outcome(compiled.to_store_messages, req.messages, max_body) == \
        outcome(reference.to_store_messages, req.messages, max_body)


def test_the_request_is_refused_on_any_body_before_any_message_is_converted():
    bad_id = _valid(message_id="")
    for bad_body, code in ((b"", pb.MESSAGE_BODY_EMPTY), (b"x" * 11, pb.MESSAGE_BODY_TOO_LARGE)):
        late = _valid()
        late.body = bad_body
        for convert in (compiled.to_store_messages, reference.to_store_messages):
            with pytest.raises(reference.InvalidMessage) as e:
                convert([bad_id, late], 10)
            assert e.value.code == code
    with pytest.raises(reference.InvalidMessage, match="more than 10 \\(max_message_size\\)"):
        compiled.to_store_messages([_valid(), late], 10)


def test_a_good_message_becomes_the_store_message_a_producer_expects():
    m = _valid(keys=["k1", "k2"], message_type=pb.TRANSACTION, born_host="10.1.2.3", trace_context="tc")
    m.user_properties["color"] = "red"
    m.system_properties.born_timestamp.seconds = 1_700_000_000
    m.system_properties.born_timestamp.nanos = 5_000_000
    m.system_properties.orphaned_transaction_recovery_duration.seconds = 30
    msg, mtype = compiled.to_store_message(m)
    assert mtype == pb.TRANSACTION
    assert (msg.topic, bytes(msg.body), msg.queue_id, msg.born_timestamp, msg.born_host) == \
        ("TopicTest", b"hello", -1, 1_700_000_000_005, "10.1.2.3:0")
    assert list(msg.properties.items()) == [
        ("color", "red"), ("TAGS", "TagA"), ("KEYS", "k1 k2"), ("UNIQ_KEY", "01AB"), ("TRAN_MSG", "true"),
        ("PGROUP", "TopicTest"), ("CHECK_IMMUNITY_TIME_IN_SECONDS", "30"), ("TRACE_CONTEXT", "tc")]


def test_a_message_without_a_born_time_is_born_now():
    m = _valid()
    before = time.time_ns() // 1_000_000
    msg, _t = compiled.to_store_message(m)
    assert before <= msg.born_timestamp <= time.time_ns() // 1_000_000
    m.system_properties.born_timestamp.SetInParent()
    assert compiled.to_store_message(m)[0].born_timestamp == 0


def test_a_corrupt_gzip_body_is_refused_as_corrupted_not_an_internal_error():
    m = _valid(body_encoding=pb.GZIP)
    m.body = gzip.compress(b"payload")[:10] + b"\xff" * 12     # a gzip header, then no deflate stream
    for convert in (compiled.to_store_message, reference.to_store_message):
        with pytest.raises(reference.InvalidMessage) as e:
            convert(m)
        assert e.value.code == pb.MESSAGE_CORRUPTED
    m.body = gzip.compress(b"payload")
    assert bytes(compiled.to_store_message(m)[0].body) == b"payload"


def test_a_gzip_body_that_expands_past_the_limit_is_refused_without_expanding_it_whole():
    # 256 MiB of zeros gzip to ~250 KiB: a request well under every transport limit. Refused as too large once
    # the decompressed body passes max_message_size, having expanded no more than that.
    import tracemalloc
    m = _valid(body_encoding=pb.GZIP)
    m.body = gzip.compress(bytes(256 * 1024 * 1024), compresslevel=1)
    assert len(m.body) < 2 * 1024 * 1024
    for convert in (compiled.to_store_messages, reference.to_store_messages):
        tracemalloc.start()
        try:
            with pytest.raises(reference.InvalidMessage) as e:
                convert([m], 4 * 1024 * 1024)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert e.value.code == pb.MESSAGE_BODY_TOO_LARGE and "expands past 4194304" in str(e.value)
        assert peak < 64 * 1024 * 1024
    m.body = gzip.compress(b"y" * (4 * 1024 * 1024))                 # exactly the limit: taken
    for convert in (compiled.to_store_messages, reference.to_store_messages):
        assert len(convert([m], 4 * 1024 * 1024)[0][0].body) == 4 * 1024 * 1024


def test_a_zlib_body_under_gzip_is_stored_as_it_came_flagged_compressed():
    # What RocketMQ 5's clients write under GZIP (a Deflater stream), stored as the proxy stores it: the bytes as
    # sent, sysFlag COMPRESSED (what a 4.x consumer inflates), nothing inflated on the way in.
    packed = zlib.compress(b"z" * 6000, 5)
    m = _valid(body_encoding=pb.GZIP)
    m.body = packed
    for convert in (compiled.to_store_message, reference.to_store_message):
        msg = convert(m)[0]
        assert bytes(msg.body) == packed and msg.sys_flag == 0x1
    m.body = b"\x00\x01 neither"
    for convert in (compiled.to_store_message, reference.to_store_message):
        with pytest.raises(reference.InvalidMessage, match="neither a zlib stream") as e:
            convert(m)
        assert e.value.code == pb.MESSAGE_CORRUPTED


def test_the_gzip_bodies_of_a_request_expand_to_no_more_than_max_message_size_together():
    # Each body expands to 1 MiB, under the 4 MiB limit of one; a request of 64 would store 64 MiB from ~70 KiB
    # sent. The request as a whole is held to max_message_size (RocketMQ's limit on a batch): refused at the fifth,
    # having expanded no more than the limit.
    import tracemalloc
    one = _valid(body_encoding=pb.GZIP)
    one.body = gzip.compress(bytes(1024 * 1024))
    limit = 4 * 1024 * 1024
    for convert in (compiled.to_store_messages, reference.to_store_messages):
        assert len(convert([one] * 4, limit)) == 4                   # 4 MiB in all: taken
        tracemalloc.start()
        try:
            with pytest.raises(reference.InvalidMessage) as e:
                convert([one] * 64, limit)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert e.value.code == pb.MESSAGE_BODY_TOO_LARGE
        assert str(e.value) == ("gzip bodies of the request expand past 4194304 bytes together (max_message_size, "
                                "for a request as a whole)")
        assert peak < 16 * 1024 * 1024
    # zlib bodies are not expanded at all: any number of them is taken, as sent
    deflated = _valid(body_encoding=pb.GZIP)
    deflated.body = zlib.compress(bytes(1024 * 1024))
    for convert in (compiled.to_store_messages, reference.to_store_messages):
        got = convert([deflated] * 64, limit)
        assert len(got) == 64 and all(m.sys_flag == 1 and bytes(m.body) == deflated.body for m, _t in got)



def test_a_gzip_bomb_is_refused_by_its_trailer_having_inflated_only_a_probe():
    # The bomb of `python -m bench --only abuse`: ~4 KiB on the wire, one byte past max_message_size inflated. Its
    # gzip trailer (ISIZE) says so: refused having inflated GZIP_PROBE (64 KiB), not the 4 MiB it was inflated to
    # before it could be judged. A body whose trailer lies is still held to the limit; a small body that happens
    # to end in a large ISIZE-like number (bytes after the stream) is judged as before, by inflating it.
    import tracemalloc
    from rmqcore.server.message_const import GZIP_PROBE
    limit = 4 * 1024 * 1024
    bomb = _valid(body_encoding=pb.GZIP)
    bomb.body = gzip.compress(bytes(limit + 1), 9)
    assert int.from_bytes(bomb.body[-4:], "little") == limit + 1 and len(bomb.body) < 8192
    liar = _valid(body_encoding=pb.GZIP)
    liar.body = gzip.compress(bytes(2 * limit), 9)[:-4] + (100).to_bytes(4, "little")     # says 100 bytes
    tail = _valid(body_encoding=pb.GZIP)
    tail.body = gzip.compress(b"small") + b"\xff" * 8                     # ends in 0xffffffff, after the stream
    for convert in (compiled.to_store_messages, reference.to_store_messages):
        for m, most in ((bomb, 1 << 20), (liar, 16 << 20)):
            tracemalloc.start()
            try:
                with pytest.raises(reference.InvalidMessage) as e:
                    convert([m], limit)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert e.value.code == pb.MESSAGE_BODY_TOO_LARGE and "expands past 4194304" in str(e.value)
            assert peak < most, (peak, most)           # the bomb: before, the 4 MiB + 1 inflated (peak > limit)
        with pytest.raises(reference.InvalidMessage) as e:
            convert([tail], limit)
        assert e.value.code == pb.MESSAGE_CORRUPTED
        # a body bigger than the probe, within the limit, whose trailer tells the truth: taken whole
        ok = _valid(body_encoding=pb.GZIP)
        ok.body = gzip.compress(b"q" * (GZIP_PROBE * 3))
        assert bytes(convert([ok], limit)[0][0].body) == b"q" * (GZIP_PROBE * 3)

# -- the answer ---------------------------------------------------------------------------------------------------

class DuckResult:
    """A put result that is not a PutResult (the compiled path reads those by attribute)."""

    def __init__(self, r: PutResult):
        self.status, self.queue_offset, self.commitlog_offset, self.msg_id = \
            r.status, r.queue_offset, r.commitlog_offset, r.msg_id


@st.composite
def put_results(draw):
    r = PutResult(draw(st.sampled_from(list(PutStatus))), draw(st.one_of(st.just(-1), int64)),
                  draw(st.one_of(st.just(0), int64)), 100, 0, None,
                  draw(st.one_of(st.none(), st.binary(min_size=8, max_size=8))))
    return DuckResult(r) if draw(st.integers(0, 3)) == 0 else r


def answer(fill, resp, messages, converted, results):
    got = fill(resp, messages, converted, results)
    return got, resp.SerializeToString(deterministic=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(any_text, message_ids), st.binary(max_size=20),
                          st.sampled_from([pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION, 0]), put_results()),
                max_size=6),
       st.booleans())
def test_the_answer_is_the_references(rows, answered_before):
    messages = [pb.Message(body=body, system_properties=pb.SystemProperties(message_id=mid))
                for mid, body, _t, _r in rows]
    converted = [(None, mtype) for _mid, _b, mtype, _r in rows]
    results = [r for *_x, r in rows]
    resp_c, resp_py = pb.SendMessageResponse(), pb.SendMessageResponse()
    if answered_before:         # entries are appended to what the response holds
        for resp in (resp_c, resp_py):
            resp.entries.add(message_id="earlier", offset=7)
    got = answer(compiled.fill_send_entries, resp_c, messages, converted, results)
    assert got == answer(reference.fill_send_entries, resp_py, messages, converted, results)
    assert resp_c == resp_py
    assert len(resp_c.entries) == len(rows) + answered_before


def test_the_answer_says_what_each_put_did():
    host = bytes([10, 0, 0, 1, 0, 0, 0x2A, 0x9F])
    results = [PutResult(PutStatus.PUT_OK, 4096, 5, 100, 0, None, host),
               PutResult(PutStatus.PUT_OK, 8192, 6, 100, 0, None, None),
               PutResult(PutStatus.FLUSH_DISK_TIMEOUT, 9000, 7, 100, 0, None, host),
               PutResult(PutStatus.OS_PAGECACHE_BUSY)]
    messages = [pb.Message(body=b"x" * (i + 1), system_properties=pb.SystemProperties(message_id=f"id{i}"))
                for i in range(4)]
    converted = [(None, pb.TRANSACTION), (None, pb.TRANSACTION), (None, pb.NORMAL), (None, pb.NORMAL)]
    resp = pb.SendMessageResponse()
    sizes, code, text = compiled.fill_send_entries(resp, messages, converted, results)
    assert (sizes, code, text) == ([1, 2], pb.INTERNAL_SERVER_ERROR, "put failed: OS_PAGECACHE_BUSY")
    e = resp.entries
    assert [x.message_id for x in e] == ["id0", "id1", "id2", "id3"]
    assert [(x.status.code, x.offset) for x in e] == [(pb.OK, 5), (pb.OK, 6), (pb.MASTER_PERSISTENCE_TIMEOUT, 0),
                                                      (pb.INTERNAL_SERVER_ERROR, 0)]
    assert e[0].transaction_id == results[0].msg_id and len(e[0].transaction_id) == 32
    assert e[1].transaction_id == f"{8192:032X}"         # no store host: the offset alone
    assert e[2].status.message == "stored, but no flush covered it in time"


# -- packaging ----------------------------------------------------------------------------------------------------

def test_the_compiled_converter_imports_without_protobuf_or_grpc():
    code = ("import sys\n"
            "for name in ('google', 'google.protobuf', 'grpc'):\n"
            "    sys.modules[name] = None\n"
            "from rmqcore.server import _converter\n"
            "print(sorted(m for m in sys.modules if m.startswith(('google', 'grpc')) and sys.modules[m]))\n")
    env = dict(os.environ, PYTHONPATH=PKG_PARENT)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PKG_PARENT, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
