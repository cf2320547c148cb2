"""Structured Streaming over stores (rmqcore.spark.stream, rmqcore.spark.sink): a producer process writing a live
store while queries follow it, restarts from checkpoints (a driver killed with SIGKILL), startingOffsets,
admission limits, data loss, damaged input, the sink's exactly-once commit. The reader's planning and reading
are also called directly (no JVM) where Spark adds nothing to what is checked."""
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("pyspark", reason="pyspark not installed (pip install -e '.[spark]')")
pa = pytest.importorskip("pyarrow", reason="pyarrow not installed (pip install -e '.[spark]')")

from rmqcore import Message  # noqa: E402
from rmqcore.store import MessageStore  # noqa: E402

from test_spark import PKG_PARENT, SMALL_JSON, small_config, spark  # noqa: E402,F401  (the session fixture)

HERE = os.path.dirname(os.path.abspath(__file__))
FORMAT = "rocketmq-store"


def java_or_skip():
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime")


def queue_messages(st, topic, q):
    out, off = [], st.min_offset(topic, q)
    while off < st.max_offset(topic, q):
        r = st.get_messages("test", topic, q, off, 256)
        out += r.messages
        off = r.next_begin_offset
    return out


def put_ids(store, ids, topic_of, qid_of, tags_of=lambda i: None, pad=0):
    for i in ids:
        r = store.put(Message(topic_of(i), str(i).encode().ljust(pad), qid_of(i), tags=tags_of(i),
                              keys=[f"id-{i}"]))
        assert r.status.name == "PUT_OK"


def make_store(path, n, topics=("T0", "T1"), queues=3, tags=None, pad=0):
    with MessageStore.open(str(path), small_config()) as st:
        put_ids(st, range(n), lambda i: topics[i % len(topics)], lambda i: (i // len(topics)) % queues,
                tags or (lambda i: None), pad)
        st.wait_dispatched()
    return str(path)


# -- the reader without Spark ----------------------------------------------------------------------------------

def reader(path, **options):
    from rmqcore.spark.schema import spark_schema
    from rmqcore.spark.stream import RocketMQStreamReader, StreamOptions
    opts = {"path": str(path), **{k: str(v) for k, v in options.items()}}
    return RocketMQStreamReader(StreamOptions.parse(opts), spark_schema())


def read_all(r, start, end):
    rows = []
    for p in r.partitions(start, end):
        for b in r.read(p):
            rows.extend(zip(b.column("topic").to_pylist(), b.column("queue_id").to_pylist(),
                            b.column("queue_offset").to_pylist(), b.column("body").to_pylist()))
    return rows


def test_offsets_are_consume_queue_offsets_and_batches_read_units_in_order(tmp_path):
    path = make_store(tmp_path / "broker-a", 300)
    r = reader(path, startingOffsets="earliest")
    start = r.initialOffset()
    assert start == {"broker-a": {"T0": {"0": 0, "1": 0, "2": 0}, "T1": {"0": 0, "1": 0, "2": 0}}}
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert end == {"broker-a": {"T0": {"0": 50, "1": 50, "2": 50}, "T1": {"0": 50, "1": 50, "2": 50}}}
    rows = read_all(r, start, end)
    assert sorted(int(b) for *_, b in rows) == list(range(300))
    per_queue = collections.defaultdict(list)
    for t, q, off, _ in rows:
        per_queue[(t, q)].append(off)
    assert all(v == list(range(50)) for v in per_queue.values())
    # latest: nothing before; JSON: per queue, -2 earliest / -1 latest, queues not named start at earliest
    assert reader(path, startingOffsets="latest").initialOffset() == end
    j = reader(path, startingOffsets=json.dumps({"broker-a": {"T0": {"0": 40, "1": -1, "2": -2}}})).initialOffset()
    assert j["broker-a"]["T0"] == {"0": 40, "1": 50, "2": 0} and j["broker-a"]["T1"] == {"0": 0, "1": 0, "2": 0}


def test_starting_timestamp_finds_the_first_message_stored_at_or_after_it(tmp_path):
    path = str(tmp_path / "broker-a")
    with MessageStore.open(path, small_config()) as st:
        put_ids(st, range(20), lambda i: "T", lambda i: 0)
        time.sleep(0.05)
        cut = int(time.time() * 1000)
        time.sleep(0.05)
        put_ids(st, range(20, 35), lambda i: "T", lambda i: 0)
        st.wait_dispatched()
    r = reader(path, startingTimestamp=cut)
    start = r.initialOffset()
    assert start == {"broker-a": {"T": {"0": 20}}}
    assert sorted(int(b) for *_, b in read_all(r, start, r.latestOffset(start, r.getDefaultReadLimit()))) == \
        list(range(20, 35))


def test_admission_limits_are_fair_over_queues_and_never_exceeded(tmp_path):
    from rmqcore.spark.stream import ReadAllAvailable, flatten
    path = make_store(tmp_path / "broker-a", 300)
    r = reader(path, startingOffsets="earliest", maxMessagesPerTrigger=40)
    start = r.initialOffset()
    seen = []
    while True:
        end = r.latestOffset(start, r.getDefaultReadLimit())
        if end == start:
            break
        s, e = flatten(start), flatten(end)
        taken = {k: e[k] - s.get(k, 0) for k in e}
        assert sum(taken.values()) <= 40
        if sum(taken.values()) == 40:
            assert max(taken.values()) - min(taken.values()) <= 1     # 6 queues share 40 evenly
        seen += read_all(r, start, end)
        start = end
    assert sorted(int(b) for *_, b in seen) == list(range(300))
    # ReadAllAvailable (the engine's choice, e.g. for a trigger that ignores limits) takes everything
    r0 = r.initialOffset()
    assert r.latestOffset(r0, ReadAllAvailable()) == end
    # bytes: each batch at most the budget (one whole message at least)
    rb = reader(path, startingOffsets="earliest", maxBytesPerTrigger=2000)
    start, total = rb.initialOffset(), 0
    while True:
        end = rb.latestOffset(start, rb.getDefaultReadLimit())
        if end == start:
            break
        p = rb.partitions(start, end)
        size = sum(sum(b.column("store_size").to_pylist()) for x in p for b in rb.read(x))
        assert size <= 2000
        total += sum(x.end - x.start for t in p for x in t.ranges)
        start = end
    assert total == 300


def test_available_now_stops_at_the_ends_seen_when_it_started(tmp_path):
    path = str(tmp_path / "broker-a")
    st = MessageStore.open(path, small_config())        # held open: a live store, read without its lock
    try:
        put_ids(st, range(30), lambda i: "T", lambda i: i % 2)
        st.wait_dispatched()
        r = reader(path, startingOffsets="earliest", maxMessagesPerTrigger=10)
        r.prepareForTriggerAvailableNow()
        put_ids(st, range(30, 60), lambda i: "T", lambda i: i % 2)
        st.wait_dispatched()
        start, rows = r.initialOffset(), []
        while (end := r.latestOffset(start, r.getDefaultReadLimit())) != start:
            rows += read_all(r, start, end)
            start = end
        assert sorted(int(b) for *_, b in rows) == list(range(30))
    finally:
        st.close()


def test_tasks_share_small_ranges_and_split_large_ones(tmp_path):
    from rmqcore.spark.stream import QueueRange, plan_tasks
    small = [QueueRange("b", "/r", "T", q, 0, 10) for q in range(50)]
    tasks = plan_tasks(small, 100_000, None)
    assert len(tasks) == 1 and len(tasks[0].ranges) == 50
    tasks = plan_tasks(small + [QueueRange("b", "/r", "U", 0, 5, 1005)], 300, 2)
    sizes = [sum(r.end - r.start for r in t.ranges) for t in tasks]
    assert len(tasks) == 5 and max(sizes) <= 300 and sum(sizes) == 1500
    covered = sorted((r.topic, r.queue_id, r.start, r.end) for t in tasks for r in t.ranges if r.topic == "U")
    assert covered[0][2] == 5 and covered[-1][3] == 1005 and all(a[3] == b[2] for a, b in zip(covered, covered[1:]))
    path = make_store(tmp_path / "broker-a", 300)
    r = reader(path, startingOffsets="earliest", minPartitions=4)
    start = r.initialOffset()
    assert len(r.partitions(start, r.latestOffset(start, r.getDefaultReadLimit()))) == 4


def test_a_large_micro_batch_is_cut_by_bytes_as_the_batch_source_splits_and_a_small_one_is_one_task(tmp_path):
    from rmqcore.spark.stream import SMALL_BATCH
    n = SMALL_BATCH + 4000
    path = str(tmp_path / "broker-a")
    with MessageStore.open(path, small_config()) as st:
        for a in range(0, n, 1000):
            st.put_batch([Message(f"T{i % 2}", str(i).encode().ljust(200), (i // 2) % 3) for i in range(a, a + 1000)])
        st.wait_dispatched()
    r = reader(path, startingOffsets="earliest", splitSize="1m")
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    parts = r.partitions(start, end)
    sizes = [v for p in parts for b in r.read(p) for v in b.column("store_size").to_pylist()]
    assert len(sizes) == n and len(parts) == -(-sum(sizes) // (1 << 20)) > 1
    rows = read_all(r, start, end)
    assert sorted(int(b) for *_, b in rows) == list(range(n))
    # the whole micro-batch as one task with the default split (128 MiB); a small micro-batch is one task anyway
    assert len(reader(path, startingOffsets="earliest").partitions(start, end)) == 1
    r = reader(path, startingOffsets="earliest", splitSize="1k", maxMessagesPerTrigger=SMALL_BATCH)
    assert len(r.partitions(start, r.latestOffset(start, r.getDefaultReadLimit()))) == 1


def test_tags_filter_by_tags_code_then_exactly(tmp_path):
    path = make_store(tmp_path / "broker-a", 90, tags=lambda i: ["A", "B", "C"][i % 3])
    r = reader(path, startingOffsets="earliest", tags="A || C")
    start = r.initialOffset()
    got = sorted(int(b) for *_, b in read_all(r, start, r.latestOffset(start, r.getDefaultReadLimit())))
    assert got == [i for i in range(90) if i % 3 != 1]


def test_topics_pattern_and_new_queues_start_at_their_earliest(tmp_path):
    path = str(tmp_path / "broker-a")
    st = MessageStore.open(path, small_config())
    try:
        put_ids(st, range(10), lambda i: "P0", lambda i: 0)
        put_ids(st, range(10, 15), lambda i: "other", lambda i: 0)
        st.wait_dispatched()
        r = reader(path, startingOffsets="latest", topicPattern="P.*")
        start = r.initialOffset()
        assert start == {"broker-a": {"P0": {"0": 10}}}
        put_ids(st, range(15, 20), lambda i: "P0", lambda i: 1)        # a new queue
        put_ids(st, range(20, 25), lambda i: "P1", lambda i: 3)        # a new topic
        put_ids(st, range(25, 30), lambda i: "other2", lambda i: 0)    # does not match
        st.wait_dispatched()
        end = r.latestOffset(start, r.getDefaultReadLimit())
        assert end == {"broker-a": {"P0": {"0": 10, "1": 5}, "P1": {"3": 5}}}
        assert sorted(int(b) for *_, b in read_all(r, start, end)) == list(range(15, 25))
    finally:
        st.close()


def remove_first_files(path, n_segments):
    """What a clean does: the oldest commitlog files, and consume-queue files whose units all point below."""
    seg_dir = os.path.join(path, "commitlog")
    segs = sorted(os.listdir(seg_dir))
    for s in segs[:n_segments]:
        os.remove(os.path.join(seg_dir, s))
    new_min = int(segs[n_segments])
    import numpy as np
    from rmqcore.spark.stream import UNITS
    for topic in os.listdir(os.path.join(path, "consumequeue")):
        for q in os.listdir(os.path.join(path, "consumequeue", topic)):
            qd = os.path.join(path, "consumequeue", topic, q)
            files = sorted(os.listdir(qd))
            for f in files[:-1]:
                units = np.fromfile(os.path.join(qd, f), dtype=UNITS)
                if (units["off"] + units["size"] <= new_min).all():
                    os.remove(os.path.join(qd, f))
    return new_min


def test_fail_on_data_loss_both_ways(tmp_path):
    from rmqcore.spark.stream import DataLossError
    path = make_store(tmp_path / "broker-a", 400, topics=("T",), queues=1, pad=1000)
    r = reader(path, startingOffsets="earliest")
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    remove_first_files(path, 2)
    r2 = reader(path, startingOffsets="earliest")
    mn = r2.initialOffset()["broker-a"]["T"]["0"]
    assert 0 < mn < 400
    with pytest.raises(DataLossError, match=rf"broker broker-a, topic T, queue 0: {mn} message\(s\) from queue "
                                            r"offset 0 are gone"):
        r.partitions(start, end)
    skip = reader(path, startingOffsets="earliest", failOnDataLoss="false")
    rows = read_all(skip, start, end)
    assert sorted(int(b) for *_, b in rows) == list(range(mn, 400)) and skip.lost == mn


def test_skipped_messages_counted_once_and_logged_once_per_queue(tmp_path, caplog):
    # failOnDataLoss=false: a gap seen by latestOffset and again by partitions (and by a re-planned batch) is one
    # gap, logged once for its queue and reported beside the queues' ends (the progress's latestOffset).
    path = make_store(tmp_path / "broker-a", 400, topics=("T",), queues=1, pad=1000)
    remove_first_files(path, 2)
    mn = reader(path, startingOffsets="earliest").initialOffset()["broker-a"]["T"]["0"]
    assert 0 < mn < 400
    r = reader(path, failOnDataLoss="false", startingOffsets=json.dumps({"broker-a": {"T": {"0": 0}}}))
    start = r.initialOffset()
    assert start == {"broker-a": {"T": {"0": 0}}}
    with caplog.at_level("WARNING", logger="rmqcore.spark.stream"):
        for _ in range(2):
            end = r.latestOffset(start, r.getDefaultReadLimit())
            rows = read_all(r, start, end)
    assert sorted(int(b) for *_, b in rows) == list(range(mn, 400))
    assert r.lost == mn
    assert r.reportLatestOffset() == {"broker-a": {"T": {"0": 400}}, "$skipped": {"broker-a": {"T": {"0": mn}}}}
    warned = [m for m in caplog.messages if "are gone" in m]
    assert len(warned) == 1 and f"{mn} message(s) from queue offset 0" in warned[0]


def test_skipped_messages_in_the_query_progress(spark, tmp_path):
    java_or_skip()
    path = make_store(tmp_path / "broker-a", 400, topics=("T",), queues=1, pad=1000)
    remove_first_files(path, 2)
    mn = reader(path, startingOffsets="earliest").initialOffset()["broker-a"]["T"]["0"]
    assert 0 < mn < 400
    q, batches = collect_by_batch(spark, path, str(tmp_path / "ck"), {"availableNow": True},
                                  startingOffsets=json.dumps({"broker-a": {"T": {"0": 0}}}), failOnDataLoss="false")
    q.awaitTermination(300)
    assert q.exception() is None
    assert sorted(i for b in batches.values() for i in b) == list(range(mn, 400))
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    latest = json.loads(progress[0]["sources"][0]["latestOffset"])
    assert latest["$skipped"] == {"broker-a": {"T": {"0": mn}}}


def test_damaged_record_and_unit_past_the_commitlog_end(tmp_path):
    from rmqcore.spark.stream import ConsumeQueueError
    path = make_store(tmp_path / "broker-a", 30, topics=("T",), queues=1)
    r = reader(path, startingOffsets="earliest")
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    seg = os.path.join(path, "commitlog", sorted(os.listdir(os.path.join(path, "commitlog")))[0])
    with MessageStore.open(path, small_config()) as st:
        off = queue_messages(st, "T", 0)[10].commitlog_offset
    with open(seg, "r+b") as f:                 # record 10's magic code
        f.seek(off + 4)
        f.write(b"\x00\x00\x00\x00")
    with pytest.raises(ConsumeQueueError, match=r"queue 0: the consume-queue unit at queue offset 10 points at "
                                                 rf"commitlog offset {off}, a damaged record .*magicCode"):
        read_all(r, start, end)
    rows = read_all(reader(path, startingOffsets="earliest", onCorrupt="stop"), start, end)
    assert sorted(int(b) for *_, b in rows) == [i for i in range(30) if i != 10]
    # a unit pointing past the end of data: the next unit's bytes written by hand
    qfile = os.path.join(path, "consumequeue", "T", "0", sorted(os.listdir(os.path.join(path, "consumequeue", "T", "0")))[-1])
    import struct
    units = os.path.getsize(qfile)
    with open(qfile, "r+b") as f:
        data = f.read()
        n = next(i for i in range(units // 20) if data[i * 20 + 8:i * 20 + 12] == b"\0\0\0\0")
        last_off, last_size, _ = struct.unpack_from(">qiq", data, (n - 1) * 20)
        f.seek(n * 20)
        f.write(struct.pack(">qiq", last_off + last_size + 5000, last_size, 0))
    r3 = reader(path, startingOffsets="earliest", onCorrupt="stop")
    start3 = {"broker-a": {"T": {"0": 29}}}
    # the scan does not even offer it: a unit whose record does not have its size is not complete
    assert r3.latestOffset(start3, r3.getDefaultReadLimit()) == {"broker-a": {"T": {"0": 30}}}
    with pytest.raises(ConsumeQueueError, match="queue offset 30 points at commitlog offset .*past the commitlog's "
                                                "end of data"):
        read_all(reader(path), {"broker-a": {"T": {"0": 29}}}, {"broker-a": {"T": {"0": 31}}})


def test_vanished_store_and_deleted_queue(tmp_path):
    from rmqcore.spark.stream import DataLossError
    path = make_store(tmp_path / "broker-a", 30, topics=("T",), queues=1)
    r = reader(path, startingOffsets="earliest")
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    parts = r.partitions(start, end)
    assert len(parts) == 1 and len(parts[0].ranges) == 1
    shutil.rmtree(os.path.join(path, "consumequeue", "T"))
    with pytest.raises(DataLossError, match="topic T, queue 0: 30 message"):
        list(r.read(parts[0]))
    shutil.rmtree(path)
    with pytest.raises(FileNotFoundError, match="broker-a.*is gone"):
        r.latestOffset(end, r.getDefaultReadLimit())


def test_consumer_group_offsets_written_after_commit(tmp_path):
    from rmqcore.broker.consumer_offset_manager import ConsumerOffsetManager
    path = make_store(tmp_path / "broker-a", 60)
    r = reader(path, startingOffsets="earliest", consumerGroup="spark-job")
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    r.commit(end)
    m = ConsumerOffsetManager(path)
    m.load()
    assert m.query_offsets("spark-job", "T0") == {0: 10, 1: 10, 2: 10}
    assert m.query_offsets("spark-job", "T1") == {0: 10, 1: 10, 2: 10}
    # a store a running broker holds: left alone (the broker would overwrite the file)
    with MessageStore.open(path, small_config()):
        r.commit({"broker-a": {"T0": {"0": 1}}})
    m.load()
    assert m.query_offsets("spark-job", "T0")[0] == 10


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="unknown option"):
        reader("/nonexistent", nope="1")


# -- the sink without Spark ------------------------------------------------------------------------------------

def batch_of(ids, topic="S"):
    return pa.RecordBatch.from_pydict({"topic": [topic] * len(ids), "queue_id": pa.array([i % 2 for i in ids],
                                       pa.int32()), "body": [str(i).encode() for i in ids]})


def sink_bodies(root, broker="broker-a"):
    out = []
    with MessageStore.open(os.path.join(root, broker), small_config()) as st:
        for q in (0, 1):
            out += [int(m.body) for m in queue_messages(st, "S", q)]
    return sorted(out)


def test_sink_commits_each_batch_once_and_cuts_back_a_half_written_one(tmp_path):
    from rmqcore.spark.sink import BATCH_PROPERTY, RocketMQStoreStreamWriter, SinkCutRefused, SinkState
    root = str(tmp_path / "out")
    opts = {"path": root, "storeConfig": SMALL_JSON}
    cols = ["topic", "queue_id", "body"]
    w = RocketMQStoreStreamWriter(opts, cols)
    w.commit([w.write(iter([batch_of(range(0, 50))]))], 0)
    w.commit([w.write(iter([batch_of(range(50, 80))]))], 1)
    # Spark re-runs batch 1 after a restart: nothing is added
    w2 = RocketMQStoreStreamWriter(opts, cols)
    w2.commit([w2.write(iter([batch_of(range(50, 80))]))], 1)
    assert sink_bodies(root) == list(range(80))
    # the driver died while merging batch 2: part of it is in the store, the sink record still says batch 1
    state = SinkState.load(os.path.join(root, "broker-a"))
    with MessageStore.open(os.path.join(root, "broker-a"), small_config()) as st:
        for i in range(80, 90):
            st.put(Message("S", str(i).encode(), i % 2, properties={BATCH_PROPERTY: f"{state.sink_id}:2"}))
        st.wait_dispatched()
    assert sink_bodies(root) == list(range(90))
    w3 = RocketMQStoreStreamWriter(opts, cols)
    w3.commit([w3.write(iter([batch_of(range(80, 120))]))], 2)
    assert sink_bodies(root) == list(range(120))
    # a record the sink did not write past its last commit is never cut
    with MessageStore.open(os.path.join(root, "broker-a"), small_config()) as st:
        st.put(Message("S", b"999", 0))
    w4 = RocketMQStoreStreamWriter(opts, cols)
    with pytest.raises(SinkCutRefused, match="not part of a later batch"):
        w4.commit([w4.write(iter([batch_of(range(120, 130))]))], 3)
    assert not [n for n in os.listdir(root) if n.startswith(".")]        # no piece left behind


# -- Spark ---------------------------------------------------------------------------------------------------------

PRODUCER = r"""
import sys, time
sys.path.insert(0, sys.argv[3])
from rmqcore import Message, StoreConfig
from rmqcore.store import MessageStore
n = int(sys.argv[2])
cfg = StoreConfig(mapped_file_size_commit_log=65536, mapped_file_size_consume_queue=1000, max_message_size=16384,
                  max_hash_slot_num=101, max_index_num=404, warm_mapped_file_enable=False)
with MessageStore.open(sys.argv[1], cfg) as st:
    for i in range(n):
        # first half: topic P0, queues 0-1; second half: a new topic P1 on queues 0-3 (new queues, new topic)
        topic, qid = ("P0", i % 2) if i < n // 2 else ("P1", i % 4)
        st.put(Message(topic, str(i).encode(), qid, keys=[f"id-{i}"]))
        if i % 20 == 19:
            time.sleep(float(sys.argv[4]))   # 20 messages per pause
    st.wait_dispatched()
"""


def collect_by_batch(spark, path, ckpt, trigger, **options):
    batches = {}

    def fb(df, bid):
        batches[bid] = [int(r.body) for r in df.select("body").collect()]     # per batch id: a re-run replaces it
    r = spark.readStream.format(FORMAT)
    for k, v in options.items():
        r = r.option(k, str(v))
    q = r.load(path).writeStream.foreachBatch(fb).option("checkpointLocation", ckpt).trigger(**trigger).start()
    return q, batches


def test_live_producer_processing_time_and_available_now_exactly_once(spark, tmp_path):
    java_or_skip()
    path = str(tmp_path / "broker-a")
    n = 400
    MessageStore.open(path, small_config()).close()
    prod = subprocess.Popen([sys.executable, "-c", PRODUCER, path, str(n), PKG_PARENT, "0.5"])
    try:
        # One query at a time (each has its own planning worker; the machine has 2 cores).
        # AvailableNow while the producer writes: what was there when it started, once.
        an, an_batches = collect_by_batch(spark, path, str(tmp_path / "ck-an"), {"availableNow": True},
                                          startingOffsets="earliest", topicPattern="P[0-9]")
        an.awaitTermination(300)
        assert an.exception() is None
        first = collections.Counter(i for b in an_batches.values() for i in b)
        assert all(c == 1 for c in first.values())
        # A processing-time query following the producer to its end, admission-limited in every batch.
        q, batches = collect_by_batch(spark, path, str(tmp_path / "ck"), {"processingTime": "300 milliseconds"},
                                      startingOffsets="earliest", topicPattern="P.*", maxMessagesPerTrigger=150)
        assert prod.wait(300) == 0
        deadline = time.monotonic() + 300
        while sum(len(b) for b in batches.values()) < n and time.monotonic() < deadline and q.isActive:
            time.sleep(0.3)
        q.stop()
        assert q.exception() is None
        seen = collections.Counter(i for b in batches.values() for i in b)
        assert sorted(seen) == list(range(n)) and set(seen.values()) == {1}
        assert all(len(b) <= 150 for b in batches.values())
        # AvailableNow again on its checkpoint, now that the producer is done: the rest, once
        an2, an_batches2 = collect_by_batch(spark, path, str(tmp_path / "ck-an"), {"availableNow": True},
                                            startingOffsets="earliest", topicPattern="P[0-9]")
        an2.awaitTermination(300)
        total = collections.Counter(i for bs in (an_batches, an_batches2) for b in bs.values() for i in b)
        assert sorted(total) == list(range(n)) and set(total.values()) == {1}
        offsets = json.loads(an2.lastProgress["sources"][0]["endOffset"])
        assert offsets == {"broker-a": {"P0": {"0": n // 4, "1": n // 4},
                                        "P1": {str(k): n // 8 for k in range(4)}}}
    finally:
        if prod.poll() is None:
            prod.kill()
            prod.wait()


def test_driver_killed_and_restarted_from_its_checkpoint_is_exactly_once_into_the_store_sink(tmp_path):
    java_or_skip()
    src = make_store(tmp_path / "broker-a", 600, topics=("K",), queues=4)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ck")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PKG_PARENT, HERE]))
    state_file = os.path.join(out, "broker-a", "config", "sparkStreamSink.json")

    def last_batch():
        try:
            with open(state_file) as f:
                return json.load(f)["lastBatchId"]
        except (OSError, ValueError):
            return -1

    def driver():
        return subprocess.Popen([sys.executable, os.path.join(HERE, "spark_stream_driver.py"), src, out, ckpt, "100"],
                                env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kills = 0
    # One kill keeps this test near a minute (each driver start is a new JVM, ~20-30 s here); the sink's cut-back of
    # a half-written batch is tested deterministically above.
    for kill_after in (2,):
        d = driver()
        try:
            deadline = time.monotonic() + 300
            while last_batch() < kill_after and d.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if d.poll() is None:
                os.killpg(d.pid, signal.SIGKILL)       # the driver and the JVM it started
                kills += 1
        finally:
            if d.poll() is None:
                os.killpg(d.pid, signal.SIGKILL)
            d.wait()
    assert kills == 1
    for _ in range(3):
        # Restarted from the checkpoint until it ends: on a loaded machine a start can fail on its own ("Python
        # worker failed to connect back"), which is one more restart of the same query.
        d = driver()
        try:
            if d.wait(600) == 0:
                break
        finally:
            if d.poll() is None:
                os.killpg(d.pid, signal.SIGKILL)
                d.wait()
    assert d.returncode == 0
    with MessageStore.open(os.path.join(out, "broker-a"), small_config()) as st:
        bodies = [int(m.body) for q in range(4) for m in queue_messages(st, "K", q)]
    assert sorted(bodies) == list(range(600))
    assert last_batch() >= 5                         # 600 messages, 100 per trigger


def test_consumer_group_offsets_through_a_running_serve(tmp_path):
    pytest.importorskip("grpc")
    from serve_util import FAST_CONF, ServerProcess, prepare

    from rmqcore.broker.consumer_offset_manager import ConsumerOffsetManager
    path = str(tmp_path / "broker-a")
    prepare(path, topics={"G": ("NORMAL", 2)}, groups={"spark-g": {}})
    with MessageStore.open(path) as st:
        put_ids(st, range(20), lambda i: "G", lambda i: i % 2)
        st.wait_dispatched()
    with ServerProcess(path, FAST_CONF) as srv:
        # the store is held by the server: read live, offsets committed through its UpdateOffset RPC
        r = reader(path, startingOffsets="earliest", topics="G", consumerGroup="spark-g",
                   consumerGroupEndpoints=srv.endpoint)
        start = r.initialOffset()
        end = r.latestOffset(start, r.getDefaultReadLimit())
        assert sorted(int(b) for *_, b in read_all(r, start, end)) == list(range(20))
        r.commit(end)
        assert srv.terminate() == 0
    m = ConsumerOffsetManager(path)
    m.load()
    assert m.query_offsets("spark-g", "G") == {0: 10, 1: 10}


def test_a_store_written_by_rocketmqs_java_store_reads_as_a_stream(tmp_path):
    # RocketMQ 4.9.7's own DefaultMessageStore wrote it (tests/golden, see test_foreign_topics): every message its
    # consume queues hold is read once, with the queue offsets and commitlog offsets Java read back.
    import tarfile
    from test_foreign_topics import GOLDEN
    with tarfile.open(GOLDEN) as t:
        t.extractall(tmp_path, filter="data")
    with open(tmp_path / "java-read.tsv", encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        rows = [dict(zip(header, line.rstrip("\n").split("\t"))) for line in f]
    path = str(tmp_path / "store")
    r = reader(path, startingOffsets="earliest", topicPattern=".*", maxMessagesPerTrigger=50)
    start, got = r.initialOffset(), []
    while (end := r.latestOffset(start, r.getDefaultReadLimit())) != start:
        for p in r.partitions(start, end):
            for b in r.read(p):
                got += zip(b.column("queue_id").to_pylist(), b.column("queue_offset").to_pylist(),
                           b.column("commitlog_offset").to_pylist())
        start = end
    java = {(int(x["queueId"]), int(x["queueOffset"]), int(x["commitLogOffset"])) for x in rows}
    assert len(got) == len(set(got)) > 0 and set(got) <= java
    # all but the control-character topic's, whose directory the store's rule never names (consume_queue.queue_id_of)
    assert set(got) == {(int(x["queueId"]), int(x["queueOffset"]), int(x["commitLogOffset"])) for x in rows
                        if x["topic"] != "ctl\\u00010"}
    # every message of every queue directory the store has
    assert len(got) == sum(n for qs in flatten_counts(end) for n in qs)


def flatten_counts(offsets):
    return [list(qs.values()) for topics in offsets.values() for qs in topics.values()]


def java_peer_or_skip():
    """RocketMQ 4.9.7's own store, driven by the java-peer harness (../shared/java-peer beside the repository, or
    $JAVA_PEER; its build, made by its build.sh, in $JAVA_PEER/build or $JAVA_PEER_BUILD)."""
    java_or_skip()
    peer = os.environ.get("JAVA_PEER") or os.path.join(os.path.dirname(PKG_PARENT), "..", "shared", "java-peer")
    if not os.path.isfile(os.path.join(peer, "jp.sh")):
        peer = os.path.join(PKG_PARENT, "..", "shared", "java-peer")
    if not os.path.isfile(os.path.join(peer, "jp.sh")):
        pytest.skip("no java-peer harness (set JAVA_PEER to the java-peer directory)")
    build = os.environ.get("JAVA_PEER_BUILD") or os.path.join(peer, "build")
    if not os.path.isfile(os.path.join(build, "classes", "JavaPeer.class")):
        pytest.skip(f"java-peer not built in {build} (run its build.sh, or set JAVA_PEER_BUILD)")
    return os.path.join(peer, "jp.sh"), build


def test_java_written_store_read_live_while_java_writes_exactly_once(request, tmp_path):
    jp, build = java_peer_or_skip()
    spark = request.getfixturevalue("spark")          # after the skip: no JVM started for nothing
    path = str(tmp_path / "broker-j")
    env = dict(os.environ, BUILD=build, JAVA_OPTS="-Xms128m -Xmx384m", JP_HOME=str(tmp_path))
    n = 150_000
    writers, alive_batches = [], []
    batches = {}

    def write(prefix):
        # RocketMQ's DefaultMessageStore (small files: compat=1), its own dispatch; keys "k<i>", one per message
        return subprocess.Popen([jp, "write", path, f"n={n}", "size=100", "compat=1", "topics=2", "queues=3",
                                 "schedule=0", f"topicprefix={prefix}"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def fb(df, bid):
        writing = any(w.poll() is None for w in writers)
        batches[bid] = [f"{r.topic}/{r.keys[0]}" for r in df.select("topic", "keys").collect()]
        if writing and batches[bid]:
            alive_batches.append(bid)

    writers.append(write("j0-"))
    try:
        deadline = time.monotonic() + 120
        while not os.path.isdir(os.path.join(path, "consumequeue")) and time.monotonic() < deadline:
            time.sleep(0.05)
        q = (spark.readStream.format(FORMAT).option("topicPattern", "j[0-9]+-.*").option("startingOffsets", "earliest")
             .load(path).writeStream.foreachBatch(fb).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="200 milliseconds").start())
        # Java writers one after another (each reopens the store: its recovery, then more appends under new topics)
        # until a batch with rows ran while Java was writing; the harness has no pace option of its own.
        rounds = 1
        while True:
            assert writers[-1].wait(300) == 0
            if alive_batches or rounds == 6 or not q.isActive:
                break
            writers.append(write(f"j{rounds}-"))
            rounds += 1
        total = rounds * n
        deadline = time.monotonic() + 300
        while sum(len(b) for b in batches.values()) < total and time.monotonic() < deadline and q.isActive:
            time.sleep(0.3)
        q.stop()
        assert q.exception() is None
        assert alive_batches, "no micro-batch read rows while the Java store was being written"
        seen = collections.Counter(i for b in batches.values() for i in b)
        want = {f"j{r}-{t}/k{i}" for r in range(rounds) for i in range(n) for t in [i % 2]}
        assert set(seen) == want and set(seen.values()) == {1}
    finally:
        for w in writers:
            if w.poll() is None:
                w.kill()
                w.wait()
