"""MessageStore.put_batch(messages, properties=...): properties common to a batch, encoded once (RocketMQ's
MessageExtBatchEncoder appends its batch's batchPropData to every inner record), against put_batch of the same
messages with the same properties set in each message's dict: the same records byte for byte (but the store time
and the __CRC32# digits that cover it), the batch's value replacing a message's own; bad batch properties refused
by name before anything is written."""
import pytest
from hypothesis import given, settings, strategies as st

from rmqcore import Message, MessageIllegalError, MessageStore, StoreConfig
from rmqcore._message import decode_message
from rmqcore._encoder import MessageEncoder
from rmqcore.status import PutStatus

from strategies import property_text, without_store_time

# Names shared by messages and batches (so that overrides happen), UNIQ_KEY and TAGS among them.
names = st.sampled_from(["a", "b", "CLUSTER", "TAGS", "UNIQ_KEY", "KEYS", "é"])
values = property_text(6)
messages = st.lists(st.fixed_dictionaries({
    "topic": st.sampled_from(["T0", "T1"]),
    "queue_id": st.integers(0, 2),
    "body": st.binary(max_size=300),
    # None values are in a message's dict but not in its record (a batch value replaces them).
    "properties": st.one_of(st.none(), st.lists(st.tuples(names, st.one_of(st.none(), values)), max_size=4)),
    "born_timestamp": st.integers(1, 1 << 41),
}), min_size=1, max_size=20)
# Up to 8 names are matched against a message's as bytes, more through a dict: both kinds of batch.
batch_props = st.one_of(st.dictionaries(names, values, max_size=3),
                        st.dictionaries(st.one_of(names, st.sampled_from([f"n{i}" for i in range(10)])), values,
                                        min_size=9, max_size=14))


def build(row):
    props = None if row["properties"] is None else dict(row["properties"])
    m = Message(row["topic"], row["body"], row["queue_id"], born_timestamp=row["born_timestamp"])
    m.properties = props
    return m


def with_batch_in_dict(row, batch, generated_uniq):
    """The message put_batch without ``properties`` must see to write the same record: the batch's names set in
    its dict in order, and the UNIQ_KEY the batch put generated (if it did) after them, where the put puts it."""
    m = build(row)
    if m.properties is None:
        m.properties = {}
    for k, v in batch.items():
        m.properties[k] = v
    if generated_uniq is not None:
        assert "UNIQ_KEY" not in m.properties
        m.properties["UNIQ_KEY"] = generated_uniq
    return m


def generated(row, batch, m_after):
    # The UNIQ_KEY the put made for this message: none when the message or the batch brought one.
    own = dict(row["properties"] or {})
    if "UNIQ_KEY" in own or "UNIQ_KEY" in batch:
        return None
    return m_after.properties["UNIQ_KEY"]


@settings(max_examples=150, deadline=None)
@given(messages, batch_props, st.booleans())
def test_encoder_writes_the_records_of_the_properties_set_in_each_dict(rows, batch, prop_crc):
    enc = MessageEncoder("10.0.0.1:10911")
    enc.append_prop_crc = prop_crc
    msgs = [build(r) for r in rows]
    own_before = [None if m.properties is None else dict(m.properties) for m in msgs]
    got = enc.encode_batch(msgs, properties=batch)
    want = enc.encode_batch([with_batch_in_dict(r, batch, generated(r, batch, m)) for r, m in zip(rows, msgs)])
    assert len(got) == len(want) == len(rows)
    for i in range(len(rows)):
        assert got.record(i) == want.record(i)
    for m, before in zip(msgs, own_before):     # the dicts keep their own properties; only a made UNIQ_KEY joins
        assert {k: v for k, v in m.properties.items() if k != "UNIQ_KEY"} == \
            {k: v for k, v in (before or {}).items() if k != "UNIQ_KEY"}


def config():
    return StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 100,
                       max_hash_slot_num=97, max_index_num=400)


@settings(max_examples=30, deadline=None)
@given(messages, batch_props)
def test_put_batch_with_properties_writes_what_put_batch_writes(tmp_path_factory, rows, batch):
    root = tmp_path_factory.mktemp("bp")
    with MessageStore.open(str(root / "a"), config()) as a, MessageStore.open(str(root / "b"), config()) as b:
        msgs = [build(r) for r in rows]
        got = a.put_batch(msgs, properties=batch)
        want = b.put_batch([with_batch_in_dict(r, batch, generated(r, batch, m)) for r, m in zip(rows, msgs)])
        for g, w in zip(got, want, strict=True):
            assert g.status is w.status is PutStatus.PUT_OK
            assert (g.commitlog_offset, g.queue_offset, g.wrote_bytes) == \
                (w.commitlog_offset, w.queue_offset, w.wrote_bytes)
            ma, mb = a.look_message(g.commitlog_offset), b.look_message(w.commitlog_offset)
            assert without_store_time(ma) == without_store_time(mb)
        a.wait_dispatched()
        for r, g in zip(rows, got):                     # dispatched as any put: the batch's TAGS count
            m = a.get_messages("g", r["topic"], r["queue_id"], g.queue_offset, 1).messages[0]
            assert m.commitlog_offset == g.commitlog_offset
            for k, v in batch.items():
                assert m.properties.get(k, "") == v     # an empty value is not read back (RocketMQ's reader)


def test_the_batch_value_wins_and_is_written_once():
    # RocketMQ appends batchPropData after each inner message's properties and its reader keeps a name's last
    # value, the batch's; here the name is written once, where the message had it.
    enc = MessageEncoder()
    enc.append_prop_crc = False
    m = Message("T", b"x", properties={"a": "1", "CLUSTER": "spoofed", "UNIQ_KEY": "AB"})
    rec = enc.encode_batch([m], properties={"CLUSTER": "DefaultCluster", "z": "9"}).record(0)
    assert rec.endswith(b"a\x011\x02CLUSTER\x01DefaultCluster\x02UNIQ_KEY\x01AB\x02z\x019\x02")
    assert decode_message(rec).properties == {"a": "1", "CLUSTER": "DefaultCluster", "UNIQ_KEY": "AB", "z": "9"}
    assert m.properties == {"a": "1", "CLUSTER": "spoofed", "UNIQ_KEY": "AB"}


def test_a_made_uniq_key_follows_the_batch_properties():
    enc = MessageEncoder()
    enc.append_prop_crc = False
    m = Message("T", b"x", tags="t")
    rec = enc.encode_batch([m], properties={"CLUSTER": "c"}).record(0)
    assert rec.endswith(b"TAGS\x01t\x02CLUSTER\x01c\x02UNIQ_KEY\x01" + m.properties["UNIQ_KEY"].encode() + b"\x02")


@pytest.mark.parametrize("props, field, status", [
    ({"a": 1}, "properties['a']", PutStatus.MESSAGE_ILLEGAL),
    ({1: "a"}, "properties[1]", PutStatus.MESSAGE_ILLEGAL),
    ({"": "a"}, "properties", PutStatus.MESSAGE_ILLEGAL),
    ({"a\x01": "a"}, "properties['a\\x01']", PutStatus.MESSAGE_ILLEGAL),
    ({"a": "x\x02"}, "properties['a']", PutStatus.MESSAGE_ILLEGAL),
    ({"DELAY": "3"}, "properties['DELAY']", PutStatus.MESSAGE_ILLEGAL),
    ({"TIMER_DELAY_MS": "100"}, "properties['TIMER_DELAY_MS']", PutStatus.MESSAGE_ILLEGAL),
    ({"big": "v" * 32767}, "properties", PutStatus.PROPERTIES_SIZE_EXCEEDED),
])
def test_bad_batch_properties_are_refused_and_nothing_is_written(tmp_path, props, field, status):
    with MessageStore.open(str(tmp_path / "s"), config()) as s:
        with pytest.raises(MessageIllegalError) as e:
            s.put_batch([Message("T", b"x")], properties=props)
        assert e.value.field == field and e.value.status is status
        assert s.commit_log.max_offset == 0
        assert s.put_batch([Message("T", b"ok")], properties={"a": "b"})[0].ok       # still usable


def test_batch_and_message_properties_together_over_the_limit_refuse_the_batch(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), config()) as s:
        ok = Message("T", b"ok")
        big = Message("T", b"x", properties={"p": "v" * 32000})
        with pytest.raises(MessageIllegalError) as e:
            s.put_batch([ok, big], properties={"q": "w" * 1000})
        assert e.value.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
        assert s.commit_log.max_offset == 0


def test_a_batch_wait_false_does_not_wait_for_the_flush(tmp_path):
    cfg = StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 100,
                      max_hash_slot_num=97, max_index_num=400, flush_disk_type="SYNC_FLUSH")
    with MessageStore.open(str(tmp_path / "s"), cfg) as s:
        rs = s.put_batch([Message("T", b"x"), Message("T", b"y")], properties={"WAIT": "false"})
        assert [r.status for r in rs] == [PutStatus.PUT_OK] * 2
        assert s.look_message(rs[1].commitlog_offset).properties["WAIT"] == "false"


def test_a_delayed_message_of_the_batch_is_rerouted_with_the_batch_properties_in_its_dict(tmp_path):
    # The schedule reroute rewrites a delayed message's properties (REAL_TOPIC, REAL_QID); it sees the batch's as
    # it would have, had the caller put them into the dict, and the record is the same.
    def msgs():
        return [Message("T", b"now", properties={"UNIQ_KEY": "A1"}, born_timestamp=1),
                Message("T", b"later", 1, properties={"DELAY": "2", "CLUSTER": "own", "UNIQ_KEY": "A2"},
                        born_timestamp=2)]
    with MessageStore.open(str(tmp_path / "a"), config()) as a, MessageStore.open(str(tmp_path / "b"), config()) as b:
        got = a.put_batch(msgs(), properties={"CLUSTER": "c", "x": "y"})
        plain = msgs()
        for m in plain:
            m.properties.update({"CLUSTER": "c", "x": "y"})
        want = b.put_batch(plain)
        for g, w in zip(got, want, strict=True):
            ma, mb = a.look_message(g.commitlog_offset), b.look_message(w.commitlog_offset)
            assert without_store_time(ma) == without_store_time(mb)
        delayed = a.look_message(got[1].commitlog_offset)
        assert delayed.topic == "SCHEDULE_TOPIC_XXXX"
        assert (delayed.properties["REAL_TOPIC"], delayed.properties["CLUSTER"]) == ("T", "c")
