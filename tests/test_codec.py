"""The commitlog record codec: golden bytes from the format table, and Cython == reference.py for any message."""
import struct

import pytest
from hypothesis import given, settings, strategies as st

from rmqcore import CorruptRecordError, Message, MessageIllegalError, PutStatus
from rmqcore import _codec as C
from rmqcore import _encoder, _message, _pull
from rmqcore import reference as R
from strategies import hosts, int32, int64, property_text, topics

STORE_HOST = "10.1.2.3:10911"


def encode(msg, store_host=STORE_HOST, **kw):
    enc = _encoder.MessageEncoder(store_host, **kw)
    return enc.encode(msg).record(0)


# -- golden layout ---------------------------------------------------------------------------------------------------

def test_golden_record_layout_field_by_field():
    msg = Message("TopicA", b"hello", 3, properties={"UNIQ_KEY": "U1", "TAGS": "TagA"}, flag=7, sys_flag=0,
                  born_timestamp=1_700_000_000_123, born_host="192.168.0.9:5555", reconsume_times=2,
                  prepared_transaction_offset=99)
    rec = encode(msg)
    props = b"UNIQ_KEY\x01U1\x02TAGS\x01TagA\x02"
    assert len(rec) == 91 + 5 + 6 + len(props)
    assert struct.unpack_from(">i", rec, 0)[0] == len(rec)                      # 1 totalSize @0
    assert struct.unpack_from(">I", rec, 4)[0] == 0xDAA320A7                   # 2 magic @4
    assert struct.unpack_from(">i", rec, 8)[0] == R.crc32(b"hello")            # 3 bodyCRC @8
    assert struct.unpack_from(">i", rec, 12)[0] == 3                           # 4 queueId @12
    assert struct.unpack_from(">i", rec, 16)[0] == 7                           # 5 flag @16
    assert struct.unpack_from(">q", rec, 20)[0] == 0                           # 6 queueOffset @20 (set at append)
    assert struct.unpack_from(">q", rec, 28)[0] == 0                           # 7 physicalOffset @28
    assert struct.unpack_from(">i", rec, 36)[0] == 0                           # 8 sysFlag @36
    assert struct.unpack_from(">q", rec, 40)[0] == 1_700_000_000_123           # 9 bornTimestamp @40
    assert rec[48:52] == bytes([192, 168, 0, 9]) and struct.unpack_from(">i", rec, 52)[0] == 5555  # 10 bornHost
    assert struct.unpack_from(">q", rec, 56)[0] == 0                           # 11 storeTimestamp @56
    assert rec[64:68] == bytes([10, 1, 2, 3]) and struct.unpack_from(">i", rec, 68)[0] == 10911    # 12 storeHost
    assert struct.unpack_from(">i", rec, 72)[0] == 2                           # 13 reconsumeTimes @72
    assert struct.unpack_from(">q", rec, 76)[0] == 99                          # 14 preparedTransactionOffset @76
    assert struct.unpack_from(">i", rec, 84)[0] == 5 and rec[88:93] == b"hello"  # 15 body
    assert rec[93] == 6 and rec[94:100] == b"TopicA"                           # 16 topic, 1-byte length
    assert struct.unpack_from(">h", rec, 100)[0] == len(props) and rec[102:] == props  # 17 properties


def test_ipv6_hosts_set_sysflag_bits_and_widen_fields():
    msg = Message("T", b"x", 0, properties={"UNIQ_KEY": "U"}, born_host="[::1]:7")
    rec = encode(msg, store_host="[fe80::2]:10911")
    sys_flag = struct.unpack_from(">i", rec, 36)[0]
    assert sys_flag & 0x10 and sys_flag & 0x20
    assert rec[48:64] == bytes(15) + b"\x01" and struct.unpack_from(">i", rec, 64)[0] == 7
    assert len(rec) == C.cal_msg_length(0x30, 1, 1, len(b"UNIQ_KEY\x01U\x02"))
    m = _message.decode_message(rec)
    assert m.born_host == "[::1]:7" and m.store_host == "[fe80::2]:10911"


def test_cal_msg_length_fixed_overhead_is_91():
    assert C.cal_msg_length(0, 0, 0, 0) == 91 == R.cal_msg_length(0, 0, 0, 0)
    assert C.cal_msg_length(0, 0, 0, 0, version=2) == 92
    assert C.cal_msg_length(0x30, 10, 5, 7) == 91 + 24 + 22


def test_uniq_key_added_when_absent_like_the_producer():
    msg = Message("T", b"x")
    assert msg.uniq_key is None
    rec = encode(msg)
    key = msg.uniq_key
    assert len(key) == 32 and key == key.upper() and int(key, 16) >= 0
    assert key.startswith("0A010203")                 # ip of the store host
    assert _message.decode_message(rec).uniq_key == key
    given_key = Message("T", b"x", properties={"UNIQ_KEY": "MINE"})
    encode(given_key)
    assert given_key.uniq_key == "MINE"


def test_offset_msg_id_round_trip():
    assert C.offset_msg_id("10.1.2.3:10911", 1234) == R.offset_msg_id("10.1.2.3:10911", 1234)
    msg_id = C.offset_msg_id("10.1.2.3:10911", 1 << 40)
    assert len(msg_id) == 32
    assert C.decode_offset_msg_id(msg_id) == ("10.1.2.3:10911", 1 << 40)


def test_blank_record_and_end_of_data_are_not_messages():
    with pytest.raises(CorruptRecordError, match="blank"):
        _message.decode_message(R.blank_record(100) + bytes(92))
    with pytest.raises(CorruptRecordError, match="end of data"):
        _message.decode_message(bytes(200))
    it = _message.RecordIterator(encode(Message("T", b"a")) + R.blank_record(64) + bytes(56))
    assert len(list(it)) == 1 and it.hit_blank


# -- differential: Cython vs reference -------------------------------------------------------------------------------

text = property_text(20)
prop_names = text.filter(lambda s: len(s) > 0)


@st.composite
def messages(draw):
    topic = draw(topics)
    props = draw(st.dictionaries(prop_names, text, max_size=6))
    props["UNIQ_KEY"] = draw(st.text(alphabet="0123456789ABCDEF", min_size=1, max_size=32))
    return dict(
        topic=topic,
        body=draw(st.one_of(st.binary(max_size=300), st.just(b""), st.binary(min_size=5000, max_size=9000))),
        queue_id=draw(st.integers(0, (1 << 31) - 1)),
        flag=draw(int32),
        sys_flag=draw(st.integers(0, 0x7FF)),   # every bit of RocketMQ's sysFlag; the v6 bits follow the hosts
        born_timestamp=draw(st.integers(1, (1 << 63) - 1)),
        born_host=draw(hosts),
        reconsume_times=draw(int32),
        prepared_transaction_offset=draw(int64),
        properties=props,
    )


@given(messages(), hosts)
def test_encode_matches_reference_byte_for_byte(fields, store_host):
    msg = Message(fields["topic"], fields["body"], fields["queue_id"], properties=fields["properties"],
                  flag=fields["flag"], sys_flag=fields["sys_flag"], born_timestamp=fields["born_timestamp"],
                  born_host=fields["born_host"], reconsume_times=fields["reconsume_times"],
                  prepared_transaction_offset=fields["prepared_transaction_offset"])
    ours = _encoder.MessageEncoder(store_host, check_topic_chars=False).encode(msg).record(0)
    ref = R.encode_message(store_host=store_host, **fields)
    assert ours == ref


@given(messages(), hosts, st.integers(0, (1 << 62)), st.integers(0, (1 << 62)), st.integers(0, (1 << 62)),
       st.sampled_from([1, 2]), st.booleans())
def test_decode_matches_reference(fields, store_host, qoff, phys, store_ts, version, crc_prop):
    rec = R.encode_message(store_host=store_host, queue_offset=qoff, physical_offset=phys,
                           store_timestamp=store_ts, version=version, append_crc_property=crc_prop, **fields)
    ref = R.decode_message(rec, check_crc=True)
    m = _message.decode_message(rec, check_crc=True)
    assert m.as_dict() == ref
    assert m.version == version
    assert m.tags_code == R.tags_code(ref["properties"].get("TAGS"))
    assert bytes(m.body) == fields["body"]
    # zero-copy: the body is a view into the source buffer
    assert m.body.obj is rec or isinstance(m.body, memoryview)
    # the whole record, from bytes and from a view of them (a mapped file's case)
    assert bytes(m.record()) == rec and [bytes(v) for v in _message.record_views([m])] == [rec]
    framed = memoryview(b"\0" * 7 + rec + b"\0" * 3)
    assert [bytes(v) for v in _message.record_views([_message.decode_message(framed, 7)])] == [rec]


def assert_same_verdict(buf):
    """The Cython decoder accepts exactly what the reference accepts, with the same fields, and rejects the rest
    naming the same field."""
    try:
        ref = R.decode_message(buf, check_crc=True)
    except CorruptRecordError as e:
        with pytest.raises(CorruptRecordError) as ours:
            _message.decode_message(buf, check_crc=True)
        assert ours.value.field == e.field
    else:
        assert _message.decode_message(buf, check_crc=True).as_dict() == ref


@given(st.binary(max_size=400), st.integers(0, 399))
def test_decoder_never_trusts_bytes(junk, cut):
    """Random bytes: the Cython decoder and the reference agree on accept/reject, and never read out of bounds."""
    for data in (junk, junk[:cut]):
        assert_same_verdict(data)


@given(messages(), st.data())
def test_corrupted_records_are_rejected_with_the_reference_verdict(fields, data):
    rec = bytearray(R.encode_message(store_host=STORE_HOST, **fields))
    mode = data.draw(st.sampled_from(["flip", "truncate", "length"]))
    if mode == "flip":
        pos = data.draw(st.integers(0, len(rec) - 1))
        rec[pos] ^= data.draw(st.integers(1, 255))
    elif mode == "truncate":
        rec = rec[:data.draw(st.integers(0, len(rec) - 1))]
    else:
        field_pos = data.draw(st.sampled_from([0, 84]))
        struct.pack_into(">i", rec, field_pos, data.draw(int32))
    assert_same_verdict(bytes(rec))


def test_port_is_read_signed_like_java_getint():
    # the body CRC does not cover the hosts, so a flipped high bit of a port decodes; Java shows it negative
    rec = bytearray(R.encode_message(topic="T", body=b"", born_host="10.0.0.1:9876"))
    rec[52] ^= 0x80
    m = _message.decode_message(bytes(rec), check_crc=True)
    assert m.born_host == "10.0.0.1:%d" % (9876 - (1 << 31)) == R.decode_message(bytes(rec))["born_host"]


def test_body_crc_mismatch_is_reported_by_field():
    rec = bytearray(encode(Message("T", b"payload", properties={"UNIQ_KEY": "U"})))
    rec[90] ^= 0xFF
    _message.decode_message(bytes(rec))                       # structure is fine without the CRC check
    with pytest.raises(CorruptRecordError) as e:
        _message.decode_message(bytes(rec), check_crc=True)
    assert e.value.field == "bodyCRC"


def test_v5_crc_property_is_verified():
    rec = bytearray(R.encode_message(topic="T", body=b"abc", properties={"A": "1"}, append_crc_property=True))
    assert rec[-20:-11] == b"__CRC32#\x01" and rec[-1] == 2
    assert _message.decode_message(bytes(rec), check_crc=True).properties["A"] == "1"
    rec[50] ^= 1   # inside the born host: not covered by the body CRC
    with pytest.raises(CorruptRecordError) as e:
        _message.decode_message(bytes(rec), check_crc=True)
    assert e.value.field == "__CRC32#"


@given(st.text(alphabet=st.sampled_from("ab\x01\x02é😀"), max_size=40))
def test_properties_parse_like_java(s):
    assert C.string_to_properties(s) == R.string_to_properties(s)


@given(st.dictionaries(prop_names, text, max_size=5))
def test_properties_round_trip(props):
    s = C.properties_to_string(props)
    assert s == R.properties_to_string(props)
    assert C.string_to_properties(s) == {k: v for k, v in props.items() if v}


def test_message_tags_and_keys_shorthands():
    m = Message("T", b"", tags="TagA", keys=["k1", "k2"])
    assert m.properties == {"TAGS": "TagA", "KEYS": "k1 k2"}
    assert m.tags == "TagA" and m.keys == ["k1", "k2"]
    m.keys = "single key"
    assert m.keys == ["single", "key"]


# -- bad input --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("topic, field", [
    ("", "topic"), ("x" * 128, "topic"), ("bad topic", "topic"), ("tópico", "topic"), ("a/b", "topic"),
])
def test_illegal_topics(topic, field):
    with pytest.raises(MessageIllegalError) as e:
        encode(Message(topic, b"x"))
    assert e.value.field == field and e.value.status is PutStatus.MESSAGE_ILLEGAL


def test_topic_of_127_bytes_is_accepted():
    assert _message.decode_message(encode(Message("T" * 127, b"x"))).topic == "T" * 127


def test_illegal_properties_and_sizes():
    with pytest.raises(MessageIllegalError) as e:
        encode(Message("T", b"x", properties={"a\x01": "v"}))
    assert e.value.field == "properties['a\\x01']"
    with pytest.raises(MessageIllegalError):
        encode(Message("T", b"x", properties={"a": "v\x02"}))
    with pytest.raises(MessageIllegalError) as e:
        encode(Message("T", b"x", properties={"big": "v" * 33000}))
    assert e.value.status is PutStatus.PROPERTIES_SIZE_EXCEEDED and e.value.limit == 32767
    with pytest.raises(MessageIllegalError) as e:
        encode(Message("T", b"x" * 2000), max_message_size=1000)
    assert e.value.field == "body" and e.value.limit == 1000
    with pytest.raises(MessageIllegalError) as e:
        encode(Message("T", b"x", queue_id=-1))
    assert e.value.field == "queue_id"
    with pytest.raises(MessageIllegalError):
        encode(Message("T", b"x", properties={"a": 1}))


def test_host_parsing_errors_are_clear():
    with pytest.raises(ValueError, match="ip:port"):
        C.host_to_bytes("nohost")
    with pytest.raises(ValueError):
        C.host_to_bytes("300.1.1.1:80")


# -- the pull loop: select_messages / select_queue == reference.select_messages ----------------------------------------

PULL_FILE = 4096
PULL_TAGS = ["TagA", "TagB", "Aa", "BB", None]     # "Aa" and "BB": one Java hash code, told apart by exact_tags


@st.composite
def pull_cases(draw):
    """Commitlog files (records, then a blank) and the units a consume queue could hold for them: each record's
    own unit, and hostile ones (mid-record, wrong size, outside the files, non-positive size, a stranger's tags)."""
    nfiles = draw(st.integers(1, 3))
    first_from = draw(st.sampled_from([0, PULL_FILE * 5]))
    files, records = [], []
    for f in range(nfiles):
        data = bytearray()
        for k in range(draw(st.integers(0, 6))):
            body = draw(st.binary(max_size=500))
            tag = draw(st.sampled_from(PULL_TAGS))
            offset = first_from + f * PULL_FILE + len(data)
            rec = R.encode_message(topic="Pull", body=body, queue_id=0, physical_offset=offset, queue_offset=k,
                                   properties={"TAGS": tag} if tag else None, version=draw(st.sampled_from([1, 2])))
            if len(data) + len(rec) + 8 > PULL_FILE:
                break
            data += rec
            records.append((offset, len(rec), R.tags_code(tag)))
        files.append(bytes(data))
    unit_choices = st.one_of(
        st.sampled_from(records) if records else st.nothing(),
        st.builds(lambda r, d: (r[0] + d, r[1], r[2]), st.sampled_from(records) if records else st.nothing(),
                  st.integers(-40, 40)),
        st.builds(lambda r, d: (r[0], r[1] + d, r[2]), st.sampled_from(records) if records else st.nothing(),
                  st.sampled_from([-1, 1, -100])),
        st.tuples(st.integers(-10, first_from + (nfiles + 2) * PULL_FILE), st.integers(-5, 2000),
                  st.sampled_from([R.tags_code(t) for t in PULL_TAGS] + [0, -1])),
    )
    units = draw(st.lists(unit_choices, max_size=24))
    if draw(st.booleans()):
        units = sorted(units)                   # a queue's units point forward
    closed = draw(st.sampled_from([None] + list(range(nfiles))))
    return first_from, files, units, closed


@settings(max_examples=400, deadline=None)
@given(pull_cases(), st.integers(1, 8), st.integers(1, 4000), st.integers(1, 8),
       st.sampled_from([None, ["TagA"], ["TagA", "TagB"], ["TagC"], ["Aa"]]), st.integers(0, 3))
def test_pull_loop_is_the_reference(tmp_path_factory, case, max_count, max_bytes, max_transfer_count, tags, skip):
    from rmqcore._mapped_file import MappedFile
    first_from, datas, units, closed = case
    root = tmp_path_factory.mktemp("pull")
    files = []
    for f, data in enumerate(datas):
        mf = MappedFile(str(root / ("%020d" % (first_from + f * PULL_FILE))), PULL_FILE, runway=0)
        if data:
            assert mf.append(data)
        files.append(mf)
    raw = b"".join(struct.pack(">qiq", o, s, t) for o, s, t in units)
    codes = None if tags is None else {R.tags_code(t) for t in tags}
    exact = None if tags is None else set(tags)
    try:
        if closed is not None:
            files[closed].close()
        ref_files = [(first_from + f * PULL_FILE, None if f == closed else data) for f, data in enumerate(datas)]
        want = R.select_messages(raw, ref_files, PULL_FILE, max_count, max_bytes, max_transfer_count, codes, exact)
        msgs, *rest = _pull.select_messages(raw, files, PULL_FILE, max_count, max_bytes, max_transfer_count, codes, exact)
        assert ([m.commitlog_offset for m in msgs], *rest) == (want[0], *want[1:])
        assert all(bytes(m.body) == R.decode_message(ref_files[(m.commitlog_offset - first_from) // PULL_FILE][1],
                                                     m.commitlog_offset % PULL_FILE)["body"] for m in msgs)
        # a pull's body: each record as stored, views whose lengths add up to the loop's total
        stored = []
        for m in msgs:
            data, at = ref_files[(m.commitlog_offset - first_from) // PULL_FILE][1], m.commitlog_offset % PULL_FILE
            stored.append(data[at:at + struct.unpack_from(">i", data, at)[0]])
        views = _message.record_views(msgs)
        assert [bytes(v) for v in views] == [bytes(m.record()) for m in msgs] == stored
        assert sum(len(v) for v in views) == rest[2]
        del views
        # the same units read in place from a consume-queue file, from unit ``skip`` on
        (root / "cq").mkdir()
        cq = MappedFile(str(root / "cq" / ("%020d" % 0)), 20 * 32, runway=0)
        if raw:
            assert cq.append(raw)
        got = _pull.select_queue(cq, skip * 20, files, PULL_FILE, max_count, max_bytes, max_transfer_count, codes, exact)
        tail = raw[skip * 20:]
        if not tail:
            assert got is None
        else:
            want = R.select_messages(tail, ref_files, PULL_FILE, max_count, max_bytes, max_transfer_count, codes,
                                     exact)
            assert ([m.commitlog_offset for m in got[0]], *got[1:]) == (want[0], *want[1:])
        cq.close()
    finally:
        for mf in files:
            mf.close()
