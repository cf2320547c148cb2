"""rmqcore.spark's planning and reading without a JVM: splits inside segments, live stores, stores on an
S3-protocol server (moto's, on 127.0.0.1), geometry read from the store. The Spark-level checks of the same
features are in test_spark.py (one SparkSession for the run)."""
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pa = pytest.importorskip("pyarrow", reason="pyarrow not installed (pip install -e '.[spark]')")
pytest.importorskip("pyspark", reason="pyspark not installed (pip install -e '.[spark]')")

from rmqcore import Message, StoreConfig  # noqa: E402
from rmqcore import reference as R  # noqa: E402
from rmqcore import _segment as S  # noqa: E402
from rmqcore.store import MessageStore  # noqa: E402
from rmqcore.spark.layout import StoreInUseError, index_geometry  # noqa: E402
from rmqcore.spark.schema import COLUMN_NAMES  # noqa: E402
from rmqcore.spark.source import ReadOptions, _read_partition, plan_partitions  # noqa: E402

import rmqcore  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The directory holding the rmqcore imported here (a source tree, or site-packages for an installed build):
# child processes import that one, never the sources beside the tests (uncompiled in an unpacked sdist).
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))
FIELDS = [(c, True) for c in COLUMN_NAMES]


def small_config(**kw):
    return StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 50,
                       max_message_size=16 * 1024, max_hash_slot_num=101, max_index_num=404,
                       warm_mapped_file_enable=False, **kw)


@pytest.fixture(scope="module")
def odd_store(tmp_path_factory):
    """Records of odd, random sizes (bodies 0..2999 bytes, some keys and tags) over several 64 KiB segments."""
    path = str(tmp_path_factory.mktemp("odd") / "broker-odd")
    rnd = random.Random(7)
    with MessageStore.open(path, small_config()) as st:
        for i in range(260):
            st.put(Message(f"T{i % 3}", rnd.randbytes(rnd.randrange(0, 3000)), i % 2,
                           tags=f"t{i % 5}" if i % 4 else None, keys=[f"k{i}"] if i % 3 else None,
                           born_host="[2001:db8::1]:9" if i % 5 == 0 else "10.1.2.3:4"))
        st.wait_dispatched()
    return path


def read_table(options) -> pa.Table:
    opts = ReadOptions.parse(options)
    parts = plan_partitions(opts)
    batches = [b for p in parts for b in _read_partition(p.read, FIELDS, opts)]
    return pa.Table.from_batches(batches, schema=batches[0].schema if batches else None), parts


@pytest.mark.parametrize("split", ["97", "1000", "4099", "40k"])
def test_split_reads_equal_unsplit(odd_store, split):
    whole, parts = read_table({"path": odd_store, "splitSize": "0"})
    assert whole.num_rows == 260 and len(parts) == len(os.listdir(os.path.join(odd_store, "commitlog")))
    got, split_parts = read_table({"path": odd_store, "splitSize": split})
    assert len(split_parts) > len(parts)
    # Every record exactly once, in commitlog order, every column equal.
    assert got.column("commitlog_offset").to_pylist() == whole.column("commitlog_offset").to_pylist()
    assert got.equals(whole)


def _seg(records, size=None):
    buf = b"".join(records)
    return buf + b"\0" * ((size or len(buf)) - len(buf))


def _rec(off, body=b"x", **kw):
    return R.encode_message(topic="T", body=body, queue_id=0, physical_offset=off, store_timestamp=1,
                            born_timestamp=1, **kw)


def test_sync_skips_forged_headers_in_bodies():
    base = 1 << 20
    body_at = 88                        # v1 record, IPv4 hosts: the body starts after 88 header bytes
    assert _rec(0, b"probe")[body_at:body_at + 5] == b"probe"
    # First body: a whole encoded record naming another offset. Second body: a record that names its own offset
    # (it would pass the offset check) but is followed by body bytes, not by another header.
    first = _rec(base, b"A" * 40 + _rec(12345, b"inner"))
    at = 100
    fake_pos = len(first) + body_at + at
    fake = _rec(base + fake_pos, b"z")
    second_body = bytearray(b"C" * 300)
    second_body[at:at + len(fake)] = fake
    second = _rec(base + len(first), bytes(second_body))
    assert second[body_at + at:body_at + at + len(fake)] == fake
    third = _rec(base + len(first) + len(second), b"tail")
    seg = _seg([first, second, third], 1 << 14)
    starts = [0, len(first), len(first) + len(second)]
    for start in range(1, len(seg) - 8):
        pos, status = S.sync_record(seg, start, len(seg), base)
        want = next((s for s in starts if s >= start), None)
        if want is None:
            assert status == S.SYNC_NONE, start
        else:
            assert (pos, status) == (want, S.SYNC_FOUND), start


def test_sync_in_a_window_asks_for_more_bytes():
    base = 0
    recs = [_rec(0, b"a" * 500)]
    recs.append(_rec(len(recs[0]), b"b" * 500))
    seg = _seg(recs, 4096)
    pos, status = S.sync_record(seg[:600], 10, 4096, base, file_end=4096, more_after=True)
    assert (pos, status) == (len(recs[0]), S.SYNC_MORE)
    assert S.sync_record(seg, 10, 4096, base) == (len(recs[0]), S.SYNC_FOUND)
    assert S.data_end(seg) == len(recs[0]) + len(recs[1])


WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from rmqcore import Message, StoreConfig
    from rmqcore.store import MessageStore
    cfg = StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=1000,
                      max_message_size=16 * 1024, max_hash_slot_num=101, max_index_num=404,
                      warm_mapped_file_enable=False)
    st = MessageStore.open({path!r}, cfg)
    i = 0
    while True:
        st.put_batch([Message("live", b"x" * (i % 700), i % 2) for _ in range(20)])
        i += 1
        if i == 5:
            print("ready", flush=True)
        time.sleep(0.002)
""")


def test_live_store_refused_by_default_and_snapshot_is_stable(tmp_path):
    path = str(tmp_path / "broker-live")
    child = subprocess.Popen([sys.executable, "-c", WRITER.format(root=PKG_PARENT, path=path)], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        with pytest.raises(StoreInUseError, match="lock file is held.*onLiveStore=snapshot"):
            plan_partitions(ReadOptions.parse({"path": path}))
        opts = ReadOptions.parse({"path": path, "onLiveStore": "snapshot", "splitSize": "5000"})
        parts = plan_partitions(opts)
        counts = []
        for _ in range(2):
            time.sleep(0.2)                          # the producer keeps writing between the two reads
            rows = [r for p in parts for b in _read_partition(p.read, [("commitlog_offset", True),
                                                                        ("crc_ok", True)], opts)
                    for r in b.to_pylist()]
            assert all(r["crc_ok"] for r in rows)
            offs = [r["commitlog_offset"] for r in rows]
            assert offs == sorted(set(offs))
            counts.append(len(rows))
        assert counts[0] == counts[1] > 0
        later = plan_partitions(ReadOptions.parse({"path": path, "onLiveStore": "snapshot"}))
        later_rows = sum(b.num_rows for p in later for b in _read_partition(p.read, [("queue_id", True)], opts))
        assert later_rows > counts[0]                # a new plan takes a new snapshot
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # Killed: the lock is gone, the abort file stays.
    with pytest.raises(StoreInUseError, match="abort file"):
        plan_partitions(ReadOptions.parse({"path": path}))
    opts = ReadOptions.parse({"path": path, "onLiveStore": "snapshot"})
    assert sum(b.num_rows for p in plan_partitions(opts) for b in _read_partition(p.read, FIELDS, opts)) > 0


def test_store_open_in_this_process_is_refused(tmp_path):
    path = str(tmp_path / "broker-open")
    with MessageStore.open(path, small_config()) as st:
        st.put(Message("T", b"x", 0))
        with pytest.raises(StoreInUseError, match="broker-open"):
            plan_partitions(ReadOptions.parse({"path": path}))
    opts = ReadOptions.parse({"path": path})      # closed: read as usual
    assert sum(b.num_rows for p in plan_partitions(opts) for b in _read_partition(p.read, FIELDS, opts)) == 1


def test_java_brokers_record_lock_is_seen(tmp_path):
    # RocketMQ's broker holds FileChannel.tryLock on the lock file: a POSIX record lock, not a flock.
    from rmqcore.spark.layout import lock_held
    root = str(tmp_path / "java-store")
    os.makedirs(os.path.join(root, "commitlog"))
    lock = os.path.join(root, "lock")
    open(lock, "w").close()
    assert lock_held(root) is False
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({lock!r}, os.O_RDWR)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        print("locked", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert lock_held(root) is True
        with pytest.raises(StoreInUseError, match="lock file is held"):
            plan_partitions(ReadOptions.parse({"path": root}))
    finally:
        holder.kill()
        holder.wait()
    assert lock_held(root) is False


def test_option_errors_name_the_option(odd_store):
    for options, name in (({"startTime": "yesterday"}, "startTime"), ({"endTime": "2026-13-01"}, "endTime"),
                          ({"queueIds": "1,x"}, "queueIds"), ({"splitSize": "big"}, "splitSize"),
                          ({"onLiveStore": "ignore"}, "onLiveStore")):
        with pytest.raises(ValueError, match=f"option {name}"):
            ReadOptions.parse(dict(options, path=odd_store))


def test_index_geometry_read_from_the_file(odd_store):
    d = os.path.join(odd_store, "index")
    names = sorted(os.listdir(d))
    assert names and all(index_geometry(os.path.join(d, n)) == (101, 404) for n in names)


def test_topic_pruning_drops_the_last_segment(odd_store, tmp_path):
    # A topic written only at the start: the last segment holds none of it, and it is fully dispatched.
    path = str(tmp_path / "broker-p")
    with MessageStore.open(path, small_config()) as st:
        for i in range(40):
            st.put(Message("early" if i < 5 else "late", b"y" * 2000, 0))
        st.wait_dispatched()
    segs = os.listdir(os.path.join(path, "commitlog"))
    parts = plan_partitions(ReadOptions.parse({"path": path, "topics": "early"}))
    assert len(segs) > 1 and [os.path.basename(p.read.path) for p in parts] == [sorted(segs)[0]]


# -- S3 ----------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3(odd_store):
    from spark_s3 import S3Server
    server = S3Server()
    yield server.upload(odd_store, "broker-odd")
    server.stop()


def test_s3_reads_equal_local_reads(odd_store, s3):
    local, parts = read_table({"path": odd_store, "splitSize": "20000", "topics": "T0,T1,T2"})
    remote, rparts = read_table({"path": s3, "splitSize": "20000", "topics": "T0,T1,T2"})
    assert len(rparts) == len(parts) and {p.read.broker for p in rparts} == {"broker-odd"}
    assert remote.drop(["segment"]).equals(local.drop(["segment"]))
    # Small ranged-read windows: records cut by a window's end are read again whole.
    opts = ReadOptions.parse({"path": s3})
    import dataclasses
    small = [b for p in plan_partitions(opts)
             for b in _read_partition(dataclasses.replace(p.read, window=700), FIELDS, opts)]
    assert pa.Table.from_batches(small).equals(local)
    snap, _ = read_table({"path": s3, "onLiveStore": "snapshot", "startTime": "0"})
    assert snap.equals(local)


def test_s3_windows_snapshot_end_and_point_reads(odd_store, s3, monkeypatch):
    from rmqcore.spark import layout
    from rmqcore.spark.arrow import SegmentRead, iter_segment_batches
    local_segs = layout.list_segments(odd_store)
    remote_segs = layout.list_segments(s3)
    want = layout.snapshot_end(local_segs)
    monkeypatch.setattr(layout, "SNAPSHOT_WINDOW", 500)   # records and the end blank cut by windows
    assert layout.snapshot_end(remote_segs) == want == layout.snapshot_end(local_segs)
    assert layout.snapshot_end(remote_segs[:2]) == int(os.path.basename(local_segs[2]))   # ends with a blank


def test_snapshot_skips_an_empty_newest_segment(odd_store, tmp_path):
    # A broker may create the next segment before it fills the current one: the data ends in the one before.
    import shutil
    from rmqcore.spark import layout
    copy = str(tmp_path / "broker-c")
    shutil.copytree(odd_store, copy, ignore=shutil.ignore_patterns("lock"))
    segs = layout.list_segments(copy)
    bases = [int(os.path.basename(p)) for p in segs]
    want = layout.snapshot_end(segs)
    k = max(i for i, b in enumerate(bases) if b < want)            # the segment the data ends in
    assert layout.snapshot_end(segs[:k]) == bases[k]              # the one before ends with its blank
    nxt = os.path.join(copy, "commitlog", f"{bases[-1] + 65536:020d}")
    with open(nxt, "wb") as f:
        f.truncate(65536)                                          # created, nothing written yet
    assert layout.snapshot_end(layout.list_segments(copy)) == want
    with open(segs[k], "r+b") as f:                                # as if nothing were written there yet
        f.truncate(0)
        f.truncate(65536)
    assert layout.snapshot_end(layout.list_segments(copy)) == bases[k]


def test_consume_queue_listing_skips_what_is_no_queue(tmp_path):
    # The store's own rule (consume_queue.queue_id_of): "-1", "٣" (not ASCII), "007" (queue 7 lives in "7") and a
    # topic that is no safe directory name are not queues.
    from rmqcore.spark import layout
    root = tmp_path / "s"
    with MessageStore.open(str(root), small_config()) as st:
        st.put_batch([Message("T", b"x", 0), Message("T", b"y", 1)])
        st.wait_dispatched()
    cq = root / "consumequeue"
    for bad in ("T/-1", "T/\u0663", "bad\x07topic/0"):      # a control character: no topic directory
        (cq / bad).mkdir(parents=True)
        (cq / bad / ("%020d" % 0)).write_bytes(bytes(20))
    (cq / "T" / "007").mkdir()
    (cq / "T" / "007" / ("%020d" % 0)).write_bytes(bytes(20))
    assert sorted(layout.consume_queues(str(root))) == [("T", 0), ("T", 1)]
