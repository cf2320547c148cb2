"""MessageStore.put_arrow (rmqcore.columnar + MessageEncoder.encode_arrow) against put_batch: for any rows, the
same records byte for byte (but the store time), the same queue offsets and results; bad rows refused by column and
row before anything is written."""
import os

import pytest
from hypothesis import given, settings, strategies as st

pa = pytest.importorskip("pyarrow")

from rmqcore import Message, MessageIllegalError, MessageStore, StoreConfig  # noqa: E402
from rmqcore.status import PutStatus  # noqa: E402
from strategies import without_store_time  # noqa: E402

SCHEMA = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("body", pa.binary()), ("tags", pa.string()),
                    ("keys", pa.list_(pa.string())), ("properties", pa.map_(pa.string(), pa.string())),
                    ("born_timestamp", pa.int64()), ("flag", pa.int32()), ("uniq_key", pa.string()),
                    ("born_host", pa.string()), ("reconsume_times", pa.int32())])
text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=8)
names = st.sampled_from(["a", "b", "TAGS", "KEYS", "UNIQ_KEY", "ID", "é"])
rows = st.lists(st.fixed_dictionaries({
    "topic": st.sampled_from(["T0", "T1", "Topic-x", "%RETRY%g"]),
    "queue_id": st.integers(0, 3),
    "body": st.one_of(st.none(), st.binary(max_size=300)),
    "tags": st.one_of(st.none(), text),
    "keys": st.one_of(st.none(), st.lists(st.one_of(st.none(), text), max_size=3)),
    "properties": st.one_of(st.none(), st.lists(st.tuples(names, st.one_of(st.none(), text)), max_size=4)),
    "born_timestamp": st.integers(1, 1 << 41),          # 0 is "now": test_born_zero_is_now
    "flag": st.integers(-(1 << 31), (1 << 31) - 1),
    "uniq_key": st.one_of(st.none(), st.text("0123456789ABCDEF", min_size=1, max_size=40)),
    "born_host": st.sampled_from([None, "10.1.2.3:45678", "[::1]:9876", "192.168.0.9:1"]),
    "reconsume_times": st.integers(0, 16),
}), min_size=1, max_size=40)


def config():
    return StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 100,
                       max_hash_slot_num=97, max_index_num=400)


def as_message(row, uniq_key):
    props = {}
    for k, v in row["properties"] or []:
        if v is not None:
            props[k] = v
    m = Message(row["topic"], row["body"] or b"", row["queue_id"], tags=row["tags"],
                keys=[k for k in row["keys"] if k is not None] if row["keys"] is not None else None,
                properties=props, flag=row["flag"], born_timestamp=row["born_timestamp"],
                born_host=row.get("born_host"), reconsume_times=row.get("reconsume_times") or 0)
    if row.get("uniq_key") is not None:                 # the producer's key replaces the map's, else goes last
        m.properties["UNIQ_KEY"] = row["uniq_key"]
    m.properties.setdefault("UNIQ_KEY", uniq_key)
    return m


@settings(max_examples=40, deadline=None)
@given(rows)
def test_put_arrow_writes_what_put_batch_writes(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("col")
    # A slice (array offsets > 0) of 32-bit-offset columns, which put_arrow reads in place.
    batch = pa.RecordBatch.from_pylist(data[-1:] * 3 + data, schema=SCHEMA).slice(3)
    with MessageStore.open(str(root / "a"), config()) as a, MessageStore.open(str(root / "b"), config()) as b:
        got = a.put_arrow(batch)
        assert got.num_rows == len(data)
        assert set(got.schema.names) == {"status", "commitlog_offset", "queue_offset", "wrote_bytes",
                                         "store_timestamp", "uniq_key"}
        results = got.to_pylist()
        want = b.put_batch([as_message(r, res["uniq_key"]) for r, res in zip(data, results)])
        for res, w in zip(results, want):
            assert res["status"] == w.status.name == "PUT_OK"
            assert (res["commitlog_offset"], res["queue_offset"], res["wrote_bytes"]) == \
                (w.commitlog_offset, w.queue_offset, w.wrote_bytes)
            ma, mb = a.look_message(res["commitlog_offset"]), b.look_message(w.commitlog_offset)
            assert without_store_time(ma) == without_store_time(mb)
            assert ma.store_timestamp == res["store_timestamp"]
        a.wait_dispatched()
        for r, res in zip(data, results):        # dispatched like any put: by queue, by key
            g = a.get_messages("g", r["topic"], r["queue_id"], res["queue_offset"], 1)
            assert g.messages and g.messages[0].commitlog_offset == res["commitlog_offset"]


def test_put_arrow_of_a_table_and_large_types_crosses_files(tmp_path):
    n = 500
    body = os.urandom(700)
    table = pa.table({"topic": pa.array(["Big"] * n, pa.large_string()),
                      "queue_id": pa.array([i % 2 for i in range(n)], pa.int64()),
                      "body": pa.array([body] * n, pa.large_binary()),
                      "keys": pa.array([[f"k{i}"] for i in range(n)])})
    table = pa.concat_tables([table.slice(0, 123), table.slice(123)])        # two chunks
    with MessageStore.open(str(tmp_path / "s"), config()) as store:
        got = store.put_arrow(table)
        assert got.column("status").to_pylist() == ["PUT_OK"] * n
        assert len(store.commit_log.files()) > 4                              # 64 KiB files: many rolls
        assert got.column("queue_offset").to_pylist() == [i // 2 for i in range(n)]
        store.wait_dispatched()
        assert [bytes(m.body) for m in store.query_message("Big", "k77")] == [body]
        assert store.verify()["ok"]


@pytest.mark.parametrize("rows, field", [
    ([{"topic": "", "queue_id": 0, "body": b""}], r"topic\[0\]"),
    ([{"topic": "ok", "queue_id": 0, "body": b""}, {"topic": "bad topic", "queue_id": 0, "body": b""}],
     r"topic\[1\]"),
    ([{"topic": "T", "queue_id": -1, "body": b""}], r"queue_id\[0\]"),
    ([{"topic": "T", "queue_id": 0, "body": b"x" * 70_000}], r"body\[0\]"),
    ([{"topic": "T", "queue_id": 0, "body": b""}] * 3000 + [{"topic": "T", "queue_id": 2**31, "body": b""}],
     r"queue_id\[3000\]"),
    ([{"topic": "T", "queue_id": 0, "body": b""}] * 3000 + [{"topic": "T", "queue_id": 0, "body": b"x" * 70_000}],
     r"body\[3000\]"),
    ([{"topic": "T", "queue_id": 0, "body": b"", "tags": "a\x01b"}], r"tags\[0\]"),
    ([{"topic": "T", "queue_id": 0, "body": b"", "properties": [("", "v")]}], r"properties\[0\]"),
])
def test_bad_rows_are_refused_by_column_and_row_and_nothing_is_written(tmp_path, rows, field):
    with MessageStore.open(str(tmp_path / "s"), config()) as store:
        with pytest.raises(MessageIllegalError, match=field):
            schema = pa.schema([pa.field("queue_id", pa.int64()) if f.name == "queue_id" else f   # room for 2**31
                                 for f in SCHEMA if f.name in rows[-1]])
            store.put_arrow(pa.RecordBatch.from_pylist(rows, schema=schema))
        assert store.commit_log.max_offset == 0
        assert store.put(Message("T", b"after")).status is PutStatus.PUT_OK     # and the store goes on


def test_missing_and_unknown_columns(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), config()) as store:
        with pytest.raises(MessageIllegalError, match="body"):
            store.put_arrow(pa.RecordBatch.from_pylist([{"topic": "T", "queue_id": 0}]))
        with pytest.raises(MessageIllegalError, match="colour"):
            store.put_arrow(pa.RecordBatch.from_pylist([{"topic": "T", "queue_id": 0, "body": b"", "colour": 1}]))
        with pytest.raises(TypeError):
            store.put_arrow([{"topic": "T"}])


def test_rows_with_a_delay_go_to_the_schedule_topic(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), config()) as store:
        got = store.put_arrow(pa.RecordBatch.from_pylist(
            [{"topic": "Real", "queue_id": 1, "body": b"later", "properties": [("DELAY", "2")]}],
            schema=pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("body", pa.binary()),
                              ("properties", pa.map_(pa.string(), pa.string()))])))
        m = store.look_message(got.column("commitlog_offset")[0].as_py())
        assert m.topic == "SCHEDULE_TOPIC_XXXX" and m.queue_id == 1
        assert m.properties["REAL_TOPIC"] == "Real" and m.properties["REAL_QID"] == "1"


def test_sync_flush_put_arrow_returns_flushed(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), StoreConfig(flush_disk_type="SYNC_FLUSH",
                                                            mapped_file_size_commit_log=1 << 20)) as store:
        got = store.put_arrow(pa.RecordBatch.from_pylist([{"topic": "T", "queue_id": 0, "body": b"x" * 100}] * 50))
        assert got.column("status").to_pylist() == ["PUT_OK"] * 50
        last = got.to_pylist()[-1]
        assert store.commit_log.flushed_where >= last["commitlog_offset"] + last["wrote_bytes"]


def test_born_zero_is_now(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), config()) as store:
        got = store.put_arrow(pa.RecordBatch.from_pylist([{"topic": "T", "queue_id": 0, "body": b"", "born_timestamp": 0},
                                                          {"topic": "T", "queue_id": 0, "body": b""}]))
        for off, ts in zip(got.column("commitlog_offset").to_pylist(), got.column("store_timestamp").to_pylist()):
            assert abs(store.look_message(off).born_timestamp - ts) < 5000
