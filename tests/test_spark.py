"""rmqcore.spark on a real local[2] SparkSession (one for the whole run): reader, pruning options, corruption,
pushdown safety, writer, jobs. Skipped only when Java or pyspark/pyarrow is missing."""
import datetime
import os
import shutil
import subprocess
import sys

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark not installed (pip install -e '.[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow not installed (pip install -e '.[spark]')")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime: Spark needs java on PATH or JAVA_HOME", allow_module_level=True)

from rmqcore import Message, StoreConfig  # noqa: E402
from rmqcore.store import MessageStore  # noqa: E402

import rmqcore  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The directory holding the rmqcore imported here (a source tree, or site-packages for an installed build):
# Spark's Python workers and child processes import that one, never the sources beside the tests (uncompiled in an unpacked sdist).
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))
UTC = datetime.timezone.utc


def small_config(**kw):
    return StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 50,
                       max_message_size=16 * 1024, max_hash_slot_num=101, max_index_num=404,
                       warm_mapped_file_enable=False, **kw)


SMALL_JSON = ('{"mapped_file_size_commit_log": 65536, "mapped_file_size_consume_queue": 1000, '
              '"max_message_size": 16384, "max_hash_slot_num": 101, "max_index_num": 404, '
              '"warm_mapped_file_enable": false}')
INDEX = {"indexHashSlotNum": "101", "indexNum": "404"}


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    # Workers run this interpreter (it has rmqcore and pyarrow) and find rmqcore and the top-level
    # pyspark_rmqcore module (which the distribution installs beside rmqcore) in the checkout, so the format is
    # found by PySpark's auto-registration: no register() call here.
    from spark_s3 import set_credentials
    set_credentials()                  # S3 tests talk to a local moto server; workers inherit these
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [PKG_PARENT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    if PKG_PARENT not in sys.path:
        sys.path.insert(0, PKG_PARENT)
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2]").appName("rmqcore-tests")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


def make_store(path, n=400, topics=("T0", "T1", "T2"), seed=0):
    """A multi-segment store written by rmqcore: IPv4 and IPv6 born hosts, empty and 3 KiB bodies, tags, keys,
    properties with non-ASCII text."""
    cfg = small_config()
    with MessageStore.open(str(path), cfg) as st:
        for i in range(n):
            st.put(Message(topics[i % len(topics)], b"" if i % 7 == 0 else bytes([(i + seed) % 256]) * (i * 13 % 3000),
                           i % 4, tags=f"tag{i % 4}" if i % 5 else None,
                           keys=[f"key-{seed}-{i}", "common"] if i % 2 else None,
                           properties={"p": str(i), "ü": "ö€"},
                           born_host="[2001:db8::7]:4321" if i % 3 == 0 else "10.0.0.9:777", flag=i,
                           born_timestamp=1_700_000_000_000 + i))
        st.wait_dispatched()
    return str(path)


@pytest.fixture(scope="module")
def store_and_messages(tmp_path_factory):
    # MessageStore.open recovers a store (it may drop an empty pre-created last segment), so the expected
    # messages are read once, before Spark plans anything over the files.
    path = make_store(tmp_path_factory.mktemp("stores") / "broker-a")
    return path, store_messages(path)


@pytest.fixture(scope="module")
def store(store_and_messages):
    return store_and_messages[0]


@pytest.fixture(scope="module")
def expected(store_and_messages):
    return store_and_messages[1]


def naive_utc(ms):
    # collect() gives naive datetimes in the session time zone, which the fixture sets to UTC.
    return datetime.datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)


def store_messages(path):
    """Every message of a store through MessageStore (offsets from the consume queues), by commitlog offset."""
    out = {}
    with MessageStore.open(path, small_config()) as st:
        for topic, qids in st.topics().items():
            for q in qids:
                off = 0
                while True:
                    g = st.get_messages("g", topic, q, off, 32)
                    if not g.messages:
                        break
                    for m in g.messages:
                        out[m.commitlog_offset] = {
                            "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
                            "commitlog_offset": m.commitlog_offset, "store_size": m.store_size,
                            "store_timestamp": naive_utc(m.store_timestamp),
                            "born_timestamp": naive_utc(m.born_timestamp),
                            "born_host": m.born_host, "store_host": m.store_host, "sys_flag": m.sys_flag,
                            "flag": m.flag, "reconsume_times": m.reconsume_times,
                            "prepared_transaction_offset": m.prepared_transaction_offset, "body_crc": m.body_crc,
                            "crc_ok": True, "tags": m.tags, "keys": m.keys, "uniq_key": m.uniq_key,
                            "properties": dict(m.properties), "body": bytes(m.body)}
                    off = g.next_begin_offset
    return out


def spark_rows(df):
    out = {}
    for r in df.collect():
        d = r.asDict()
        d["properties"] = dict(d["properties"])
        d["body"] = bytes(d["body"])
        out[d["commitlog_offset"]] = d
    return out


def test_rows_equal_message_store_field_by_field(spark, store, expected):
    df = spark.read.format("rocketmq-store").load(store)          # auto-registered, broker = dir name
    segments = sorted(os.listdir(os.path.join(store, "commitlog")))
    assert len(segments) >= 3 and df.rdd.getNumPartitions() == len(segments)
    got = spark_rows(df)
    want = expected
    assert len(got) == len(want) == 400
    for off, w in want.items():
        g = dict(got[off])
        assert g.pop("broker") == "broker-a"
        seg = g.pop("segment")
        assert int(seg) <= off < int(seg) + 64 * 1024
        assert g == w, off


def test_narrow_schema_decodes_only_those_columns(spark, store):
    df = spark.read.format("rocketmq-store").schema("topic STRING, queue_offset BIGINT, keys ARRAY<STRING>").load(store)
    assert df.columns == ["topic", "queue_offset", "keys"]
    rows = df.collect()
    assert len(rows) == 400 and {r.topic for r in rows} == {"T0", "T1", "T2"}
    with pytest.raises(Exception, match="no column"):
        spark.read.format("rocketmq-store").schema("nope STRING").load(store).collect()


def test_pruning_options_equal_spark_side_filters(spark, store):
    from pyspark.sql import functions as F
    base = spark.read.format("rocketmq-store").load(store)
    ts = sorted(r.store_timestamp for r in base.select("store_timestamp").collect())
    # Records put together share a millisecond: the window must not be empty (startTime < endTime is required).
    start = ts[100]
    end = max(ts[250], start + datetime.timedelta(milliseconds=1))

    def key(df):
        return sorted(r.commitlog_offset for r in df.select("commitlog_offset").collect())

    pruned = (spark.read.format("rocketmq-store").option("topics", "T1").option("queueIds", "1,2")
              .option("startTime", start.isoformat()).option("endTime", int(end.timestamp() * 1000)).load(store))
    filtered = base.where((F.col("topic") == "T1") & F.col("queue_id").isin(1, 2)
                          & (F.col("store_timestamp") >= start) & (F.col("store_timestamp") < end))
    assert key(pruned) == key(filtered) and key(filtered)
    assert pruned.rdd.getNumPartitions() < base.rdd.getNumPartitions()   # segments dropped before any decode
    by_key = (spark.read.format("rocketmq-store").options(**INDEX).option("topics", "T1")
              .option("keys", "key-0-7,common").load(store))
    assert key(by_key) == key(base.where((F.col("topic") == "T1") &
                                         (F.array_contains("keys", "key-0-7") | F.array_contains("keys", "common"))))
    one = (spark.read.format("rocketmq-store").options(**INDEX).option("topics", "T1").option("keys", "key-0-7")
           .load(store).collect())
    assert [r.keys for r in one] == [["key-0-7", "common"]]


def test_many_brokers_by_option_and_by_paths(spark, tmp_path, store):
    b = make_store(tmp_path / "broker-b", n=50, seed=1)
    df = spark.read.format("rocketmq-store").option("brokers", f'{{"east": "{store}", "west": "{b}"}}').load()
    counts = {r.broker: r["count"] for r in df.groupBy("broker").count().collect()}
    assert counts == {"east": 400, "west": 50}
    df2 = spark.read.format("rocketmq-store").load([store, b])
    assert {r.broker for r in df2.select("broker").distinct().collect()} == {"broker-a", "broker-b"}


def corrupt_copy(store, dst, how):
    shutil.copytree(store, dst, ignore=shutil.ignore_patterns("lock"))
    seg = os.path.join(dst, "commitlog", sorted(os.listdir(os.path.join(dst, "commitlog")))[1])
    from rmqcore import reference as R
    with open(seg, "rb") as f:
        data = bytearray(f.read())
    recs = [r for r in R.iterate_records(data) if len(R.decode_message(data, r[0])["body"]) > 2]
    off, size, _ = recs[3]
    if how == "body":
        sf = R.decode_message(data, off)["sys_flag"]
        body_pos = off + 48 + (20 if sf & 0x10 else 8) + 8 + (20 if sf & 0x20 else 8) + 16
        data[body_pos + 1] ^= 0xFF
    elif how == "header":
        data[off + 4] ^= 0x01                                        # magic code
    with open(seg, "wb") as f:
        f.write(data if how != "truncate" else data[:off + size // 2])
    return seg, int(os.path.basename(seg)) + off


@pytest.mark.parametrize("how", ["body", "header", "truncate"])
def test_corruption_is_reported_with_file_and_offset(spark, tmp_path, store, how):
    from rmqcore.spark import verify
    dst = str(tmp_path / "broker-x")
    seg, bad_off = corrupt_copy(store, dst, how)
    rep = verify(spark, [dst])
    assert not rep["ok"] and rep["segments"] == len(os.listdir(os.path.join(dst, "commitlog")))
    field = {"body": "bodyCRC", "header": "magicCode", "truncate": "totalSize"}[how]
    assert [(b["file"], b["offset"]) for b in rep["bad"] if b["field"] == field] == [(seg, bad_off)], rep["bad"]
    if how == "truncate":   # the file is shorter than the store's segments, and does not end with a blank
        assert {b["field"] for b in rep["bad"]} == {"totalSize", "fileSize"}
    df = spark.read.format("rocketmq-store").load(dst)
    if how == "body":
        bad = df.where("NOT crc_ok").select("commitlog_offset").collect()
        assert [r.commitlog_offset for r in bad] == [bad_off] and df.count() == 400
        return
    with pytest.raises(Exception, match=f"corrupt record at commitlog offset {bad_off}"):
        df.count()
    kept = spark.read.format("rocketmq-store").option("onCorrupt", "stop").load(dst)
    offs = [r.commitlog_offset for r in kept.select("commitlog_offset").collect()]
    assert bad_off not in offs and max(o for o in offs if o < bad_off + 1) < bad_off
    assert all(r.crc_ok for r in kept.select("crc_ok").collect())


def test_pushdown_reused_dataframe_is_never_stale(spark, store):
    # PySpark 4.1-4.3 caches the read plan in the relation; a pushdown replaces it and a later filter-less scan of
    # the same DataFrame reuses it (spark.md 1.3). The opt-in pushdown source must still count everything.
    from rmqcore.spark import register
    register(spark, pushdown=True)
    df = spark.read.format("rocketmq-store-pushdown").load(store)
    assert df.count() == 400
    assert df.where("topic = 'T1'").count() == 133
    assert df.where("topic IN ('T1', 'T2') AND queue_id = 1").count() == \
        spark.read.format("rocketmq-store").load(store).where("topic IN ('T1','T2') AND queue_id = 1").count()
    assert df.count() == 400
    assert df.select("topic").distinct().count() == 3


def test_pushdown_translation_is_exact(store):
    from pyspark.sql.datasource import EqualTo, GreaterThan, In

    from rmqcore.spark.schema import spark_schema
    from rmqcore.spark.source import ReadOptions, RocketMQStorePushdownReader, _read_partition
    opts = ReadOptions.parse({"path": store})
    reader = RocketMQStorePushdownReader(opts, spark_schema(), force=True)
    rest = list(reader.pushFilters([EqualTo(("topic",), "T1"), In(("queue_id",), (0, 2)),
                                    GreaterThan(("flag",), 3), EqualTo(("topic",), 7)]))
    assert rest == [GreaterThan(("flag",), 3), EqualTo(("topic",), 7)]
    rows = [r for p in reader.partitions() for b in _read_partition(p.read, reader.fields, opts)
            for r in b.to_pylist()]
    assert len(rows) == sum(1 for i in range(400) if i % 3 == 1 and i % 4 in (0, 2)) > 0
    assert {(r["topic"], r["queue_id"]) for r in rows} == {("T1", 0), ("T1", 2)}
    reader = RocketMQStorePushdownReader(ReadOptions.parse({"path": store}), spark_schema(), force=True)
    assert list(reader.pushFilters([In(("topic",), ("T1", "T2")), EqualTo(("queue_id",), 1)])) == []
    rows = [r for p in reader.partitions() for b in _read_partition(p.read, reader.fields, reader.opts)
            for r in b.to_pylist()]
    assert len(rows) == sum(1 for i in range(400) if i % 3 in (1, 2) and i % 4 == 1)
    assert {(r["topic"], r["queue_id"]) for r in rows} == {("T1", 1), ("T2", 1)}
    unsafe = RocketMQStorePushdownReader(ReadOptions.parse({"path": store}), spark_schema())
    assert list(unsafe.pushFilters([EqualTo(("topic",), "T1")])) == [EqualTo(("topic",), "T1")]


def test_writer_round_trip_through_message_store(spark, tmp_path, store, expected):
    src = spark.read.format("rocketmq-store").load(store)
    out = str(tmp_path / "restored")
    (src.drop("broker").withColumn("broker", src.topic.substr(2, 1)).repartition(2, "broker")
        .write.format("rocketmq-store").mode("overwrite").option("storeConfig", SMALL_JSON).save(out))
    assert sorted(os.listdir(out)) == ["0", "1", "2"]           # temp dirs renamed, nothing left behind
    want = expected
    fields = ("topic", "queue_id", "body", "tags", "keys", "uniq_key", "flag", "born_timestamp", "born_host",
              "properties")
    def comparable(v):
        # __CRC32# covers the store time, which the writer stamps anew (as any put does)
        return {k: ({p: x for p, x in v[k].items() if p != "__CRC32#"} if k == "properties" else v[k])
                for k in fields}
    got = []
    for b in ("0", "1", "2"):
        got += [comparable(v) for v in store_messages(os.path.join(out, b)).values()]
    key = lambda d: d["uniq_key"]  # noqa: E731
    assert sorted(got, key=key) == sorted((comparable(v) for v in want.values()), key=key)
    again = spark.read.format("rocketmq-store").load(os.path.join(out, "1"))
    assert again.count() == 133 and again.where("NOT crc_ok").count() == 0
    with pytest.raises(Exception, match="exists"):
        src.drop("broker").limit(3).write.format("rocketmq-store").mode("append").option("broker", "1").save(out)
    assert sorted(os.listdir(out)) == ["0", "1", "2"]           # the failed job's temp store was removed


def test_rebuild_is_byte_identical_to_the_stores_own_files(spark, tmp_path, store):
    from rmqcore.spark import rebuild
    # No config: file sizes and index slots/items are read from the source store.
    reps = rebuild(spark, [store], str(tmp_path / "rebuilt"))
    assert reps[0]["records"] == 400 and reps[0]["error"] is None
    out = tmp_path / "rebuilt" / "broker-a"

    def files(root, sub):
        base = os.path.join(root, sub)
        return {os.path.relpath(os.path.join(d, f), base): open(os.path.join(d, f), "rb").read()
                for d, _, fs in os.walk(base) for f in fs}
    assert files(store, "consumequeue") == files(str(out), "consumequeue")
    ours = [v for _, v in sorted(files(store, "index").items())]
    theirs = [v for _, v in sorted(files(str(out), "index").items())]
    assert len(ours) >= 2 and ours == theirs     # index files are named by creation time: compare in order


def test_stats_export_and_cli(spark, tmp_path, store, expected, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from rmqcore.spark import export, stats
    from rmqcore.spark.__main__ import main
    rows = {(r.topic, r.queue_id): r for r in stats(spark, [store]).collect()}
    want = expected
    t1q1 = [m for m in want.values() if (m["topic"], m["queue_id"]) == ("T1", 1)]
    r = rows[("T1", 1)]
    assert r.messages == len(t1q1) and r.bytes == sum(m["store_size"] for m in t1q1)
    assert r.max_queue_offset == len(t1q1) - 1 and r.max_commitlog_offset == max(m["commitlog_offset"] for m in t1q1)
    out = str(tmp_path / "parquet")
    export(spark, [store], out, topics="T0,T2", progress=0.2)
    assert "[rmqcore export] done: " in capsys.readouterr().err
    files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs if f.endswith(".parquet")]
    assert pq.read_schema(files[0]).field("store_timestamp").type == pa.timestamp("us", tz="UTC")   # not INT96
    back = spark.read.parquet(out)
    assert back.count() == 267 and {r.topic for r in back.select("topic").distinct().collect()} == {"T0", "T2"}
    day = datetime.datetime.now(UTC).date()
    assert {r.date for r in back.select("date").distinct().collect()} <= {day, day - datetime.timedelta(days=1)}
    assert main(["verify", f"a={store}"]) == 0
    out_err = capsys.readouterr()
    assert "400 records" in out_err.out
    assert "[rmqcore verify] done: " in out_err.err and "records/s" in out_err.err


def test_python_m_entry_point_runs():
    # The CLI parses without a JVM; a full run is covered above in-process (it reuses the session).
    r = subprocess.run([sys.executable, "-m", "rmqcore.spark", "--help"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=PKG_PARENT), timeout=60)
    assert r.returncode == 0 and "verify" in r.stdout and "rebuild" in r.stdout


def test_splits_inside_segments(spark, store, expected):
    df = spark.read.format("rocketmq-store").option("splitSize", "15000").load(store)
    segments = len(os.listdir(os.path.join(store, "commitlog")))
    assert df.rdd.getNumPartitions() >= 3 * segments
    rows = spark_rows(df)
    assert len(rows) == 400
    for off, w in expected.items():
        g = dict(rows[off])
        g.pop("broker"), g.pop("segment")
        assert g == w, off


def test_store_on_s3_reads_like_the_local_one(spark, store):
    from spark_s3 import S3Server
    server = S3Server()
    try:
        uri = server.upload(store, "broker-a")
        cols = "commitlog_offset BIGINT, topic STRING, keys ARRAY<STRING>, properties MAP<STRING,STRING>, body BINARY"
        local = spark.read.format("rocketmq-store").schema(cols).load(store)
        remote = spark.read.format("rocketmq-store").schema(cols).option("splitSize", "20000").load(uri)
        def rows(df):
            return sorted(((r.commitlog_offset, r.topic, r["keys"], sorted(r.properties.items()), bytes(r.body))
                           for r in df.collect()), key=lambda t: t[0])
        got = rows(remote)
        assert len(got) == 400 and got == rows(local)
        from rmqcore.spark import verify
        rep = verify(spark, {"remote": uri}, progress=None)
        assert rep["ok"] and rep["records"] == 400 and rep["bad"] == []
    finally:
        server.stop()


def test_live_store_is_refused_with_the_option_to_use(spark, tmp_path):
    path = str(tmp_path / "broker-live")
    with MessageStore.open(path, small_config()) as st:
        st.put(Message("T", b"x", 0))
        with pytest.raises(Exception, match="onLiveStore=snapshot"):
            spark.read.format("rocketmq-store").load(path).count()
        assert spark.read.format("rocketmq-store").option("onLiveStore", "snapshot").load(path).count() == 1
        from rmqcore.spark import rebuild, verify
        from rmqcore.spark.layout import StoreInUseError
        with pytest.raises(StoreInUseError, match="lock file is held"):
            verify(spark, [path], progress=None)
        with pytest.raises(StoreInUseError, match="lock file is held"):
            rebuild(spark, [path], str(tmp_path / "rebuilt"), progress=None)
        rep = verify(spark, [path], progress=None, on_live="snapshot")
        assert rep["ok"] and rep["records"] == 1, rep["bad"]


def test_writer_one_store_per_broker_across_tasks(spark, tmp_path, store, expected):
    # One broker's rows spread over 3 tasks: the pieces are merged, in partition order, into one store.
    src = spark.read.format("rocketmq-store").load(store).drop("broker").repartition(3)
    assert src.rdd.getNumPartitions() == 3
    out = str(tmp_path / "merged")
    from rmqcore.spark import write_stores
    write_stores(src, out, broker="solo", storeConfig=SMALL_JSON)      # the default save mode, errorifexists
    assert os.listdir(out) == ["solo"]                               # pieces and temp stores gone
    with pytest.raises(FileExistsError, match="errorifexists"):
        write_stores(src, out, broker="solo2")
    assert write_stores(src, out, "ignore", broker="solo2") == out and os.listdir(out) == ["solo"]
    msgs = store_messages(os.path.join(out, "solo"))
    assert sorted(m["uniq_key"] for m in msgs.values()) == sorted(m["uniq_key"] for m in expected.values())
    for (t, q) in {(m["topic"], m["queue_id"]) for m in msgs.values()}:
        offs = sorted(m["queue_offset"] for m in msgs.values() if (m["topic"], m["queue_id"]) == (t, q))
        assert offs == list(range(len(offs)))                          # one queue, contiguous offsets
    # A task that fails leaves nothing behind (here: a topic name RocketMQ refuses).
    from pyspark.sql import functions as F
    bad = src.withColumn("topic", F.when(F.col("queue_offset") == 5, F.lit("bad topic!")).otherwise(F.col("topic")))
    with pytest.raises(Exception):
        bad.write.format("rocketmq-store").mode("append").option("broker", "other").save(out)
    assert os.listdir(out) == ["solo"]


def test_abort_removes_the_pieces_of_killed_tasks_once_they_let_go(tmp_path):
    # A task Spark kills when the job fails sends no commit message: its piece is found by the job's name, and
    # removed only once the task lets go of it (here a child process holding the piece's lock for 0.5 s, then
    # exiting as a killed worker would). Another job's piece is left alone.
    import time
    from rmqcore.spark.writer import RocketMQStoreWriter, _WRITING
    root = tmp_path / "out"
    root.mkdir()
    w = RocketMQStoreWriter({"path": str(root)}, ["topic", "body"], False)
    mine = root / f".b.piece-{w.job}-00001-0123456789ab"
    other = root / ".b.piece-ffffffffffff-00000-0123456789ab"
    for d in (mine, other):
        d.mkdir()
        (d / _WRITING).touch()
        (d / "commitlog").mkdir()
    child = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                              "fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX)\n"
                              "print('held', flush=True); time.sleep(0.5)", str(mine / _WRITING)],
                             stdout=subprocess.PIPE)
    assert child.stdout.readline() == b"held\n"
    t0 = time.monotonic()
    w.abort([])
    assert time.monotonic() - t0 >= 0.3                 # it waited for the task
    child.wait(10)
    assert os.listdir(root) == [other.name]
