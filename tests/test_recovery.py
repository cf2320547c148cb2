"""Recovery as RocketMQ's DefaultMessageStore.recover (4.9.7): normal (no abort file: the last three commitlog files
are scanned) and abnormal (abort file present: the scan starts at the last file whose first message is no newer
than the checkpoint's min timestamp, CRCs checked); consume queues cut back to the commitlog's end; consume-queue
units and index keys missing on disk rebuilt by dispatch before open returns; 5.x records with the ``__CRC32#``
property recovered and verified. Each case ends with verify() clean and the store taking new puts."""
import os
import shutil
import struct
import time

import pytest

from rmqcore import GetStatus, Message, MessageStore, PutStatus, StoreConfig
from rmqcore import reference as R
from rmqcore.recovery import verify_store

FILE = 16 * 1024
QUEUES = [("RecA", 0), ("RecA", 1), ("RecB", 0)]


def cfg(**kw):
    base = dict(mapped_file_size_commit_log=FILE, mapped_file_size_consume_queue=20 * 32,
                max_message_size=4 * 1024, max_hash_slot_num=97, max_index_num=100,
                warm_mapped_file_enable=False, flush_interval_commit_log=50, flush_interval_consume_queue=50)
    base.update(kw)
    return StoreConfig(**base)


def build(path, n=400, config=None):
    """A closed store of n messages over QUEUES and several files, first messages of files stored ms apart."""
    results = []
    with MessageStore.open(path, config or cfg()) as store:
        last_file = -1
        for i in range(n):
            topic, qid = QUEUES[i % 3]
            r = store.put(Message(topic, b"m%05d." % i * 30, qid, keys=[f"key{i}"], tags="x" if i % 2 else None))
            assert r.status is PutStatus.PUT_OK
            if r.commitlog_offset // FILE != last_file:
                last_file = r.commitlog_offset // FILE
                time.sleep(0.003)
            results.append(r)
        files = store.commit_log.files()
    assert len(files) >= 6
    return results, files


def set_checkpoint(path, physic=None, logics=None, index=None):
    with open(os.path.join(path, "checkpoint"), "r+b") as f:
        raw = bytearray(f.read(24))
        for at, v in ((0, physic), (8, logics), (16, index)):
            if v is not None:
                raw[at:at + 8] = struct.pack(">q", v)
        f.seek(0)
        f.write(raw)


def read_checkpoint(path):
    with open(os.path.join(path, "checkpoint"), "rb") as f:
        return struct.unpack(">qqq", f.read(24))


def crash_marker(path):
    open(os.path.join(path, "abort"), "w").close()


def check_all(store, results, upto=None):
    """Every message below ``upto`` readable by queue, by offset and by key; nothing at or past it."""
    upto = store.commit_log.max_offset if upto is None else upto
    kept = [(i, r) for i, r in enumerate(results) if r.commitlog_offset < upto]
    for q, (topic, qid) in enumerate(QUEUES):
        mine = [r for i, r in kept if i % 3 == q]
        assert store.max_offset(topic, qid) == len(mine)
        got, offset = [], 0
        while offset < len(mine):
            g = store.get_messages("g", topic, qid, offset, 32)
            assert g.status is GetStatus.FOUND
            got += g.messages
            offset = g.next_begin_offset
        assert [m.commitlog_offset for m in got] == [r.commitlog_offset for r in mine]
    for i, r in kept[::7]:
        hits = store.query_message(QUEUES[i % 3][0], f"key{i}")
        assert [m.commitlog_offset for m in hits] == [r.commitlog_offset], i
        assert [m.commitlog_offset for m in store.query_message(QUEUES[i % 3][0], r.uniq_key)] == [r.commitlog_offset]
    for i, r in enumerate(results):
        if r.commitlog_offset >= upto:
            assert store.query_message(QUEUES[i % 3][0], f"key{i}") == []
    report = store.verify()
    assert report["ok"], report
    # queue offsets go on from the recovered queues
    for topic, qid in QUEUES:
        before = store.max_offset(topic, qid)
        assert store.put(Message(topic, b"next", qid)).queue_offset == before


def test_normal_recovery_scans_last_three_files(tmp_path):
    path = str(tmp_path / "s")
    results, files = build(path)
    assert not os.path.exists(os.path.join(path, "abort"))
    # the directory may hold the next file, pre-made and empty (AllocateMappedFileService): it counts, as in RocketMQ
    on_disk = sorted(os.listdir(os.path.join(path, "commitlog")))
    with MessageStore.open(path, cfg()) as store:
        rec = store.runtime_info()["recovery"]
        assert rec["last_exit_ok"] is True
        assert rec["scan_from"] == int(on_disk[-3])
        assert rec["process_offset"] == store.commit_log.max_offset == results[-1].commitlog_offset + \
            results[-1].wrote_bytes
        assert rec["rebuilt_units"] == 0 and rec["rebuilt_keys"] == 0
        assert rec["stop"] == "end of data"
        for key in ("records", "truncated_bytes", "seconds"):
            assert key in rec
        check_all(store, results)


def test_clean_restart_reports_nothing_truncated(tmp_path):
    # After a clean shutdown nothing is cut: the zeros after the last record (and the empty pre-made next file) are
    # no data, so runtime_info()["recovery"]["truncated_bytes"] must not report them as truncated.
    path = str(tmp_path / "s")
    results, files = build(path)
    with MessageStore.open(path, cfg()) as store:
        rec = store.runtime_info()["recovery"]
        assert rec["truncated_bytes"] == 0, rec


def test_sync_flush_moves_checkpoint_physic_timestamp(tmp_path):
    # RocketMQ's GroupCommitService sets the checkpoint's physicMsgTimestamp after each flush (as the async
    # FlushRealTimeService does); without it a crashed SYNC_FLUSH store always rescans its whole commitlog. What
    # counts is the checkpoint file on disk while the store runs (a crash never reaches close()).
    path = str(tmp_path / "s")
    config = cfg(flush_disk_type="SYNC_FLUSH", flush_interval_consume_queue=10,
                 flush_consume_queue_thorough_interval=10)
    with MessageStore.open(path, config) as store:
        r = None
        for i in range(30):
            r = store.put(Message("RecA", b"x" * 300, 0))
            assert r.status is PutStatus.PUT_OK
        deadline = time.monotonic() + 10
        while True:
            with open(os.path.join(path, "checkpoint"), "rb") as f:
                physic = struct.unpack(">q", f.read(8))[0]
            if physic >= r.store_timestamp or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert physic >= r.store_timestamp


def test_abnormal_recovery_starts_at_checkpoint_file(tmp_path):
    path = str(tmp_path / "s")
    results, files = build(path)
    firsts = [next(r for r in results if r.commitlog_offset >= int(name)) for name in files]
    k = 3
    ts = firsts[k].store_timestamp
    # checkpoint: min(physic, logics) - 3 s and the index time decide; put file k's first message exactly there
    set_checkpoint(path, physic=ts + 3000, logics=ts + 3000, index=ts + 10 ** 6)
    crash_marker(path)
    with MessageStore.open(path, cfg()) as store:
        rec = store.runtime_info()["recovery"]
        assert rec["last_exit_ok"] is False
        expect = max(i for i, f in enumerate(firsts) if f.store_timestamp <= ts)
        assert rec["scan_from"] == int(files[expect])
        assert rec["process_offset"] == store.commit_log.max_offset
        assert rec["rebuilt_units"] == 0, "units already on disk are not built twice"
        check_all(store, results)
    assert not os.path.exists(os.path.join(path, "abort"))


def test_abnormal_recovery_with_empty_checkpoint_scans_everything(tmp_path):
    path = str(tmp_path / "s")
    results, files = build(path)
    set_checkpoint(path, 0, 0, 0)
    crash_marker(path)
    with MessageStore.open(path, cfg()) as store:
        rec = store.runtime_info()["recovery"]
        assert rec["scan_from"] == 0 and rec["records"] >= len(results)
        check_all(store, results)


@pytest.mark.parametrize("abort", [False, True])
def test_consume_queues_cut_back_to_commitlog_end(tmp_path, abort):
    """The commitlog lost its tail (zeros from a record start on) but consume queues and index still point there:
    recovery cuts the queues (truncateDirtyLogicFiles) and the lost messages are not found by key any more."""
    path = str(tmp_path / "s")
    results, files = build(path)
    cut = results[len(results) - 25].commitlog_offset
    name = os.path.join(path, "commitlog", "%020d" % (cut - cut % FILE))
    with open(name, "r+b") as f:
        f.seek(cut % FILE)
        f.write(bytes(FILE - cut % FILE))
    for later in files:
        if int(later) > cut:
            with open(os.path.join(path, "commitlog", later), "r+b") as f:
                f.write(bytes(FILE))
    if abort:
        crash_marker(path)
        set_checkpoint(path, 0, 0, 0)
    with MessageStore.open(path, cfg()) as store:
        rec = store.runtime_info()["recovery"]
        assert rec["process_offset"] == cut == store.commit_log.max_offset
        check_all(store, results, upto=cut)


@pytest.mark.parametrize("abort", [False, True])
def test_deleted_consumequeue_dir_is_rebuilt(tmp_path, abort):
    path = str(tmp_path / "s")
    results, files = build(path)
    shutil.rmtree(os.path.join(path, "consumequeue"))
    if abort:
        crash_marker(path)
    with MessageStore.open(path, cfg()) as store:
        rec = store.runtime_info()["recovery"]
        assert rec["rebuilt_units"] == len(results)
        check_all(store, results)
    report = verify_store(path, cfg())
    assert report["ok"] and report["cq_units"] == len(results) + 3


def test_index_files_newer_than_checkpoint_are_rebuilt(tmp_path):
    """After a crash RocketMQ deletes index files whose end time is past the checkpoint's indexMsgTimestamp and
    indexes those messages again from the checkpoint's file on."""
    path = str(tmp_path / "s")
    results, files = build(path)
    index_dir = os.path.join(path, "index")
    names = sorted(os.listdir(index_dir))
    assert len(names) >= 4
    with open(os.path.join(index_dir, names[1]), "rb") as f:
        end_ts = struct.unpack(">q", f.read(16)[8:16])[0]
    physic, logics, _ = read_checkpoint(path)
    set_checkpoint(path, index=end_ts)        # only the first two index files were flushed before the "crash"
    crash_marker(path)
    with MessageStore.open(path, cfg()) as store:
        rec = store.runtime_info()["recovery"]
        assert rec["rebuilt_keys"] > 0
        kept = sorted(os.path.basename(f.file_name) for f in store.index_service.index_files)
        assert kept[:2] == names[:2]
        check_all(store, results)


def test_deleted_index_dir_with_unflushed_checkpoint_is_rebuilt(tmp_path):
    path = str(tmp_path / "s")
    results, files = build(path)
    shutil.rmtree(os.path.join(path, "index"))
    set_checkpoint(path, index=0)        # no index file was ever flushed: every key must be indexed again
    crash_marker(path)
    with MessageStore.open(path, cfg()) as store:
        rec = store.runtime_info()["recovery"]
        assert rec["rebuilt_keys"] == 2 * len(results)            # UNIQ_KEY and one key per message
        check_all(store, results)


def test_crash_while_nothing_was_flushed_yet(tmp_path):
    # A store that crashed right after it was made: empty checkpoint, abort file, files of zeros.
    path = str(tmp_path / "s")
    with MessageStore.open(path, cfg()) as store:
        pass
    crash_marker(path)
    os.makedirs(os.path.join(path, "commitlog"), exist_ok=True)
    with open(os.path.join(path, "commitlog", "%020d" % 0), "wb") as f:
        f.write(bytes(FILE))
    with MessageStore.open(path, cfg()) as store:
        assert store.commit_log.max_offset == 0
        r = store.put(Message("RecA", b"first", 0))
        assert r.commitlog_offset == 0 and r.queue_offset == 0


# -- 5.x records ----------------------------------------------------------------------------------------------------

def write_v2_store(path, n=120, corrupt_at=None):
    """A commitlog segment as a 5.x broker writes it (v2 magic, 2-byte topic length, __CRC32# property), by hand;
    no consume queues, no index. Returns [(offset, topic, qid, queue_offset, body, key, uniq)]."""
    os.makedirs(os.path.join(path, "commitlog"))
    data = bytearray()
    records = []
    qo = {}
    base_ts = int(time.time() * 1000) - 60_000
    files = []
    for i in range(n):
        topic, qid = QUEUES[i % 3]
        body = b"v2-%04d|" % i * 12
        uniq = "%032X" % (0xABC000 + i)
        rec = R.encode_message(topic=topic, body=body, queue_id=qid, queue_offset=qo.get((topic, qid), 0),
                               physical_offset=len(files) * FILE + len(data), born_timestamp=base_ts + i,
                               store_timestamp=base_ts + i, version=2, append_crc_property=True,
                               properties={"KEYS": f"v2key{i}", "UNIQ_KEY": uniq, "TAGS": "t"})
        if len(data) + len(rec) + 8 > FILE:
            data += R.blank_record(FILE - len(data))
            files.append(bytes(data.ljust(FILE, b"\0")))
            data = bytearray()
            rec = R.encode_message(topic=topic, body=body, queue_id=qid, queue_offset=qo.get((topic, qid), 0),
                                   physical_offset=len(files) * FILE, born_timestamp=base_ts + i,
                                   store_timestamp=base_ts + i, version=2, append_crc_property=True,
                                   properties={"KEYS": f"v2key{i}", "UNIQ_KEY": uniq, "TAGS": "t"})
        offset = len(files) * FILE + len(data)
        records.append((offset, topic, qid, qo.get((topic, qid), 0), body, f"v2key{i}", uniq))
        qo[(topic, qid)] = qo.get((topic, qid), 0) + 1
        data += rec
    files.append(bytes(data.ljust(FILE, b"\0")))
    for k, content in enumerate(files):
        with open(os.path.join(path, "commitlog", "%020d" % (k * FILE)), "wb") as f:
            f.write(content)
    if corrupt_at is not None:
        off = records[corrupt_at][0]
        with open(os.path.join(path, "commitlog", "%020d" % (off - off % FILE)), "r+b") as f:
            pos = off % FILE + 88 + len(records[corrupt_at][4]) + 2 + 1     # in the topic: only __CRC32# covers it
            f.seek(pos)
            c = f.read(1)
            f.seek(pos)
            f.write(bytes([c[0] ^ 0x20]))
    return records


@pytest.mark.parametrize("abort", [False, True])
def test_v2_records_with_crc_property_recover_and_verify(tmp_path, abort):
    path = str(tmp_path / "s")
    records = write_v2_store(path)
    assert len(os.listdir(os.path.join(path, "commitlog"))) >= 2
    if abort:
        crash_marker(path)
    with MessageStore.open(path, cfg()) as store:
        rec = store.runtime_info()["recovery"]
        assert rec["stop"] == "end of data"
        assert rec["rebuilt_units"] == len(records) and rec["rebuilt_keys"] == 2 * len(records)
        report = store.verify()
        assert report["ok"] and report["records"] == len(records), report
        for off, topic, qid, qo, body, key, uniq in records:
            m = store.look_message(off)
            assert (m.topic, m.queue_id, m.queue_offset, bytes(m.body), m.uniq_key) == (topic, qid, qo, body, uniq)
            assert "__CRC32#" in m.properties
            assert [x.commitlog_offset for x in store.query_message(topic, key)] == [off]
        for topic, qid in QUEUES:
            n = sum(1 for r in records if (r[1], r[2]) == (topic, qid))
            g = store.get_messages("g", topic, qid, 0, 32)
            assert g.status is GetStatus.FOUND and g.max_offset == n
            r = store.put(Message(topic, b"v1 after v2", qid))
            assert r.queue_offset == n
        assert store.verify()["ok"]


def test_v2_record_crc_property_catches_corruption_outside_the_body(tmp_path):
    """A flipped byte in a 5.x record's topic: the body CRC cannot see it, the __CRC32# property can. Abnormal
    recovery with check_crc_on_recover stops there and cuts the rest (as 5.x's checkMessageAndReturnSize)."""
    path = str(tmp_path / "s")
    records = write_v2_store(path, corrupt_at=50)
    crash_marker(path)
    with MessageStore.open(path, cfg(check_crc_on_recover=True)) as store:
        rec = store.runtime_info()["recovery"]
        bad = records[50][0]
        assert rec["process_offset"] == bad == store.commit_log.max_offset
        assert "__CRC32#" in rec["stop"] and str(bad) in rec["stop"], rec["stop"]
        report = store.verify()
        assert report["ok"] and report["records"] == 50, report


def test_record_crc_catches_damage_outside_the_body(tmp_path):
    # enabled_append_prop_crc (default): every record ends with __CRC32#; zeroing bytes of a key inside KEYS (which
    # the v1 body CRC does not cover) makes recovery cut there and verify() report it.
    from rmqcore import MessageStore, StoreConfig
    cfg = StoreConfig(mapped_file_size_commit_log=1 << 20, max_hash_slot_num=101, max_index_num=404)
    path = tmp_path / "s"
    with MessageStore.open(str(path), cfg) as s:
        rs = [s.put(Message("T", b"body %d" % i, 0, keys=[f"order-{i}"])) for i in range(5)]
        assert bytes(s.look_message(rs[0].commitlog_offset).record()).endswith(b"\x02")
        assert s.look_message(rs[0].commitlog_offset).properties.keys() >= {"__CRC32#", "KEYS", "UNIQ_KEY"}
    log = path / "commitlog" / ("%020d" % 0)
    data = bytearray(log.read_bytes())
    at = data.index(b"order-3")
    data[at:at + 7] = bytes(7)
    log.write_bytes(bytes(data))
    (path / "abort").write_text("")
    with MessageStore.open(str(path), cfg) as s:
        assert s.max_offset("T", 0) == 3                    # cut at the damaged record
        assert s.query_message("T", "order-2") and not s.query_message("T", "order-3")
        assert s.runtime_info()["recovery"]["truncated_bytes"] > 0
