"""Files are untrusted input (issue 10): every reproducer of the hostile-user report as a regression test.

A record's topic is checked before it becomes a directory name (a record whose topic is no safe directory name is
kept, readable by offset, and not dispatched; only checksums and lengths prove damage); one damaged byte never bricks a store; a failed
open gives back the lock, maps and threads and raises its own error; fields no CRC covers (physicalOffset,
consume-queue units) are checked against the records; verify() is one linear pass; bad API inputs name the field;
a closed store refuses every call.
"""
import os
import struct
import threading

import pytest

from rmqcore import GetStatus, Message, MessageIllegalError, MessageStore, StoreClosedError, StoreConfig
from rmqcore import _codec as C
from rmqcore import _message
from rmqcore import reference as R
from rmqcore.errors import CorruptRecordError
from rmqcore.recovery import verify_store

MIB = 1 << 20


def cfg(**kw):
    base = dict(mapped_file_size_commit_log=MIB, mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=101,
                max_index_num=404, warm_mapped_file_enable=False)  # 4 x slots: RocketMQ's proportion
    base.update(kw)
    return StoreConfig(**base)


def commitlog(path):
    return os.path.join(path, "commitlog", "0" * 20)


def patch(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def crash_marker(path):
    open(os.path.join(path, "abort"), "w").close()


def tree(root):
    """Every path under ``root`` (to prove nothing was created outside a store)."""
    out = set()
    for d, dirs, files in os.walk(root):
        out.update(os.path.relpath(os.path.join(d, n), root) for n in dirs + files)
    return out


def two_topics(path, config=None):
    with MessageStore.open(path, config or cfg()) as s:
        a = s.put(Message("AAAAAAAAAA", b"first", 0, keys=["ka"]))
        b = s.put(Message("BBBBBBBBBB", b"second", 0, keys=["kb"]))
    return a, b


def topic_position(path, topic: bytes):
    with open(commitlog(path), "rb") as f:
        data = f.read(4096)
    return data.index(topic)


# -- 1. a record's topic never steers a path ------------------------------------------------------------------------

@pytest.mark.parametrize("abort", [True, False])
@pytest.mark.parametrize("prop_crc", [True, False])
@pytest.mark.parametrize("hostile", [b"../../PWND", b"..\x2f..\x2fPW", b"/tmp/PWND!"])
def test_a_topic_read_from_a_file_never_becomes_a_path_outside_the_store(tmp_path, abort, prop_crc, hostile):
    path = str(tmp_path / "s")
    a, b = two_topics(path, cfg(enabled_append_prop_crc=prop_crc))
    # The consume queue of the second record must be rebuilt from the record (as after a crash that lost it).
    import shutil
    shutil.rmtree(os.path.join(path, "consumequeue", "BBBBBBBBBB"))
    patch(commitlog(path), topic_position(path, b"BBBBBBBBBB"), hostile.ljust(10, b"/")[:10])
    if abort:
        crash_marker(path)
    before = tree(str(tmp_path))
    with MessageStore.open(path, cfg(enabled_append_prop_crc=prop_crc)) as s:
        assert list(s.topics()) == ["AAAAAAAAAA"]
        assert [m.body.tobytes() for m in s.get_messages("g", "AAAAAAAAAA", 0, 0).messages] == [b"first"]
        if prop_crc:
            # __CRC32# covers the topic: the changed bytes are damage, and recovery cuts the record (abort) or
            # reads stop at it.
            assert s.look_message(b.commitlog_offset) is None
            if abort:
                assert s.commit_log.max_offset == b.commitlog_offset
                assert s.verify()["ok"]
        else:
            # Nothing proves damage (the v1 body CRC does not cover the topic): the record is kept and readable
            # by offset, and dispatch passes over it instead of making a directory of its topic.
            assert s.look_message(b.commitlog_offset).topic.encode() == hostile.ljust(10, b"/")[:10]
            assert s.commit_log.max_offset == b.commitlog_offset + b.wrote_bytes
            report = s.verify()
            assert report["ok"] and report["undispatchable"] == 1
            assert report["undispatchable_offsets"] == [b.commitlog_offset]
            assert s.runtime_info()["recovery"]["undispatchable_offsets"] == [b.commitlog_offset]
    after = tree(str(tmp_path))
    assert {p for p in after - before if not p.startswith("s" + os.sep)} == set()
    assert not (tmp_path / "PWND").exists() and not os.path.exists("/tmp/PWND!")


def test_any_topic_length_java_reads_decodes_and_dispatchability_is_a_separate_question():
    # RocketMQ's store writes any topic of 1..127 bytes (the broker's send path alone applies ^[%|a-zA-Z0-9_-]+$),
    # so both decoders read every one; whether it may name a consume-queue directory is topic_is_dispatchable's.
    for topic, dispatchable in [(b"T", True), (b"%RETRY%g|x-_9", True), (b"", False), (b".", False), (b"..", False),
                                (b"...", True), (b"a/b", False), (b"a\\b", False), (b"a\x00", False),
                                (b"a\x7f", False), (b"\xc2\x85", False), (b"\xc3\xa9", True), (b"x" * 127, True),
                                ("支付 orders.v1|%".encode(), True), (b"\xff", False), (b"\xed\xa0\x80", False),
                                (b"\xc0\xaf", False), (b"\xf4\x90\x80\x80", False), ("😀".encode(), True)]:
        fields = dict(topic="T", body=b"b")
        rec = bytearray(R.encode_message(**fields))
        at = rec.index(b"\x01T") + 1          # the 1-byte topic length, then the topic
        rec[at - 1:at + 1] = bytes([len(topic)]) + topic
        struct.pack_into(">i", rec, 0, len(rec))
        ours, ref = _message.decode_message(bytes(rec), check_crc=True), R.decode_message(bytes(rec), check_crc=True)
        assert ours.topic == ref["topic"] == topic.decode("utf-8", "replace")
        assert C.topic_is_dispatchable(topic) is R.topic_is_dispatchable(topic) is dispatchable, topic
    # A v1 length byte of 128..255 is a negative length to Java's reader: damage, in both decoders.
    rec = bytearray(R.encode_message(topic="T", body=b"b"))
    at = rec.index(b"\x01T")
    rec[at:at + 2] = b"\x80T"
    with pytest.raises(CorruptRecordError) as e1:
        _message.decode_message(bytes(rec))
    with pytest.raises(CorruptRecordError) as e2:
        R.decode_message(bytes(rec))
    assert e1.value.field in ("topicLength", "totalSize") and e2.value.field in ("topicLength", "totalSize")
    # v2 (5.x) records carry longer topics: up to Short.MAX_VALUE bytes (past NAME_MAX: kept, not dispatched).
    long = R.encode_message(topic="L" * 300, body=b"b", version=2)
    assert _message.decode_message(long).topic == "L" * 300
    assert not C.topic_is_dispatchable("L" * 300) and C.topic_is_dispatchable("L" * 255)


def test_consume_queue_directories_with_illegal_names_are_skipped_not_followed(tmp_path):
    path = str(tmp_path / "s")
    two_topics(path)
    root = os.path.join(path, "consumequeue")
    os.makedirs(os.path.join(root, "bad\x07name", "0"))     # a control character: no topic directory
    os.makedirs(os.path.join(root, "AAAAAAAAAA", "notaqueue"))
    os.makedirs(os.path.join(root, "AAAAAAAAAA", str(1 << 31)))
    open(os.path.join(root, "junk.txt"), "w").close()
    os.symlink(str(tmp_path), os.path.join(root, "Escape"))
    with MessageStore.open(path, cfg()) as s:
        assert s.topics() == {"AAAAAAAAAA": [0], "BBBBBBBBBB": [0]}
        assert s.verify()["ok"]
    report = verify_store(path, cfg())      # issue: int('notaqueue') raised here while open() went on
    assert report["ok"] and report["cq_units"] == 2
    with pytest.raises(ValueError, match="topic"):
        from rmqcore.consume_queue import ConsumeQueue
        ConsumeQueue("../x", 0, root, 20 * 1000)


# -- 2. one zero byte does not brick the store ----------------------------------------------------------------------

@pytest.mark.parametrize("check_crc", [True, False])
def test_a_zero_byte_in_the_last_topic_never_bricks_the_store(tmp_path, check_crc):
    path = str(tmp_path / "s")
    a, b = two_topics(path)
    patch(commitlog(path), topic_position(path, b"BBBBBBBBBB") + 4, b"\x00")
    crash_marker(path)
    with MessageStore.open(path, cfg(check_crc_on_recover=check_crc)) as s:
        assert s.look_message(a.commitlog_offset).topic == "AAAAAAAAAA"
        if check_crc:
            # The record's __CRC32# no longer holds: damage, cut.
            assert s.commit_log.max_offset == b.commitlog_offset
            assert "__CRC32#" in s.runtime_info()["recovery"]["stop"]
            assert s.verify()["ok"]
        else:
            # Recovery was told not to check CRCs: nothing it checks proves damage, so the record stays (and is
            # not dispatched: its topic holds a NUL); verify, which always checks CRCs, reports it.
            assert s.commit_log.max_offset == b.commitlog_offset + b.wrote_bytes
            assert s.runtime_info()["recovery"]["undispatchable"] == 1
            report = s.verify()
            assert not report["ok"] and report["commitlog_errors"][0]["field"] == "__CRC32#"
            assert list(s.topics()) == ["AAAAAAAAAA", "BBBBBBBBBB"]
        r = s.put(Message("BBBBBBBBBB", b"again", 0))
        assert r.queue_offset == 0          # the unit that pointed at the changed record was cut with it
    crash_marker(path)
    with MessageStore.open(path, cfg(check_crc_on_recover=check_crc)) as s:     # and it opens again after that
        assert s.look_message(r.commitlog_offset).body.tobytes() == b"again"


@pytest.mark.parametrize("prop_crc", [True, False])
def test_a_negative_queue_id_read_from_a_file_never_becomes_a_consume_queue(tmp_path, prop_crc):
    # Found by the fuzzer: the v1 body CRC does not cover queueId, and dispatch turned -2147483437 into a consume
    # queue (a directory name), which then refused to exist and failed every open.
    path = str(tmp_path / "s")
    a, b = two_topics(path, cfg(enabled_append_prop_crc=prop_crc))
    patch(commitlog(path), b.commitlog_offset + 12, struct.pack(">i", -(1 << 31) + 211))
    if prop_crc:
        with pytest.raises(CorruptRecordError, match="__CRC32#"):
            with open(commitlog(path), "rb") as f:
                _message.decode_message(f.read(), b.commitlog_offset, check_crc=True)
    crash_marker(path)
    with MessageStore.open(path, cfg(enabled_append_prop_crc=prop_crc)) as s:
        if prop_crc:                        # __CRC32# covers the queue id: damage, cut
            assert s.commit_log.max_offset == b.commitlog_offset
        else:                               # nothing proves damage: kept, readable, not dispatched
            assert s.look_message(b.commitlog_offset).queue_id == -(1 << 31) + 211
            assert s.runtime_info()["recovery"]["undispatchable_offsets"] == [b.commitlog_offset]
        assert s.max_offset("BBBBBBBBBB", 0) == 0 and s.verify()["ok"]
        assert not any(q < 0 for qs in s.topics().values() for q in qs)


def test_dump_reports_damage_before_the_last_files_instead_of_raising(tmp_path, capsys):
    # Found by the fuzzer: a cleanly closed store is recovered from its last three files only, so damage in an
    # older file reached the dump loop as a traceback.
    from rmqcore.cli import main
    path = str(tmp_path / "s")
    config = cfg(mapped_file_size_commit_log=4096)
    with MessageStore.open(path, config) as s:
        rs = [s.put(Message("T", b"x" * 500, 0)) for _ in range(40)]
    patch(os.path.join(path, "commitlog", "0" * 20), rs[1].commitlog_offset + 100, b"\xff")
    assert main(["dump", path, "--count", "100"]) == 1          # the file size is read from the files
    out = capsys.readouterr()
    assert f"BAD RECORD: record at offset {rs[1].commitlog_offset}: bodyCRC" in out.out
    assert out.out.count("T/0@") == 39                            # reported and skipped, the rest shown


# -- 3. a failed open releases everything and raises its own error --------------------------------------------------

def test_a_failed_open_raises_its_own_error_and_releases_the_lock(tmp_path):
    path = str(tmp_path / "s")
    two_topics(path)
    os.unlink(os.path.join(path, "checkpoint"))
    os.mkdir(os.path.join(path, "checkpoint"))
    for _ in range(2):                      # the second open sees the same error, not StoreLockedError
        with pytest.raises(IsADirectoryError):
            MessageStore.open(path, cfg())
    os.rmdir(os.path.join(path, "checkpoint"))
    with MessageStore.open(path, cfg()) as s:
        assert s.topics() == {"AAAAAAAAAA": [0], "BBBBBBBBBB": [0]}


def test_a_late_failure_in_open_stops_the_threads_it_started(tmp_path, monkeypatch):
    import rmqcore.store as store_mod
    path = str(tmp_path / "s")
    two_topics(path, cfg(flush_disk_type="SYNC_FLUSH"))
    baseline = {t.ident for t in threading.enumerate()}

    class Boom(RuntimeError):
        pass

    def explode(*a, **k):
        raise Boom("clean service could not start")

    # CleanFilesService is built after dispatch, group commit and flush threads have started.
    monkeypatch.setattr(store_mod, "CleanFilesService", explode)
    with pytest.raises(Boom):
        MessageStore.open(path, cfg(flush_disk_type="SYNC_FLUSH"))
    left = [t for t in threading.enumerate() if t.ident not in baseline and t.is_alive()]
    assert left == []
    monkeypatch.undo()
    with MessageStore.open(path, cfg()) as s:
        assert s.max_offset("BBBBBBBBBB", 0) == 1


# -- 4. fields outside the body CRC -----------------------------------------------------------------------------------

def test_a_physical_offset_that_is_not_the_records_position_is_corruption(tmp_path):
    # Without the record CRC (which would catch the change first) the field's own check must.
    path = str(tmp_path / "s")
    a, b = two_topics(path, cfg(enabled_append_prop_crc=False))
    patch(commitlog(path), b.commitlog_offset + 28, struct.pack(">q", a.commitlog_offset))
    report = verify_store(path, cfg())
    assert not report["ok"]
    assert [(e["offset"], e["field"]) for e in report["commitlog_errors"]] == [(b.commitlog_offset, "physicalOffset")]
    crash_marker(path)
    with MessageStore.open(path, cfg()) as s:
        assert s.commit_log.max_offset == b.commitlog_offset
        assert "physicalOffset" in s.runtime_info()["recovery"]["stop"]
        assert s.verify()["ok"]


def test_damaged_keys_are_caught_when_the_record_crc_is_written(tmp_path):
    # The v1 body CRC does not cover properties: only 5.x's __CRC32# (written on put by default once
    # enabled_append_prop_crc lands) lets recovery see zeroed KEYS.
    if "enabled_append_prop_crc" not in StoreConfig.__dataclass_fields__:
        pytest.skip("the put path does not write __CRC32# yet (StoreConfig.enabled_append_prop_crc)")
    path = str(tmp_path / "s")
    config = cfg(enabled_append_prop_crc=True, check_crc_on_recover=True)
    with MessageStore.open(path, config) as s:
        rs = [s.put(Message("T", b"x%d" % i, 0, keys=[f"order-{i}"])) for i in range(50)]
    with open(commitlog(path), "rb") as f:
        at = f.read(MIB).index(b"order-42")
    patch(commitlog(path), at, b"\0" * 8)
    assert not verify_store(path, config)["ok"]
    crash_marker(path)
    with MessageStore.open(path, config) as s:
        assert s.commit_log.max_offset == rs[42].commitlog_offset
        assert s.verify()["ok"]
        assert [m.queue_offset for m in s.query_message("T", "order-41")] == [41]


def put_many(path, config, n=60):
    with MessageStore.open(path, config) as s:
        return [s.put(Message(("Ta", "Tb")[i % 2], b"m%d" % i, i % 3, keys=[f"k{i}"])) for i in range(n)]


def cq_file(path, topic, qid):
    return os.path.join(path, "consumequeue", topic, str(qid), "0" * 20)


@pytest.mark.parametrize("damage", ["nowhere", "other_queue", "other_size", "zeroed"])
def test_consume_queue_units_are_checked_against_their_records_on_open(tmp_path, damage):
    path = str(tmp_path / "s")
    rs = put_many(path, cfg())
    mine = [r for i, r in enumerate(rs) if i % 2 == 0 and i % 3 == 0]        # Ta/0
    other = rs[1]                                                             # Tb/1
    unit = 4 * 20
    if damage == "nowhere":
        patch(cq_file(path, "Ta", 0), unit, struct.pack(">q", mine[4].commitlog_offset + 3))
    elif damage == "other_queue":
        patch(cq_file(path, "Ta", 0), unit, struct.pack(">qi", other.commitlog_offset, other.wrote_bytes))
    elif damage == "other_size":
        patch(cq_file(path, "Ta", 0), unit + 8, struct.pack(">i", mine[4].wrote_bytes + 1))
    else:
        patch(cq_file(path, "Ta", 0), unit, b"\0" * 20 * 3)
    assert not verify_store(path, cfg())["ok"]
    with MessageStore.open(path, cfg()) as s:
        g = s.get_messages("g", "Ta", 0, 0, 64)
        assert [m.commitlog_offset for m in g.messages] == [r.commitlog_offset for r in mine]
        assert [m.queue_offset for m in g.messages] == list(range(len(mine)))
        assert s.verify()["ok"]
    assert verify_store(path, cfg())["ok"]


# -- 5. verify() is linear, reports progress, and still finds what is missing ---------------------------------------

def test_verify_reports_progress_and_finds_damage_in_one_pass(tmp_path):
    path = str(tmp_path / "s")
    config = cfg(max_hash_slot_num=7, max_index_num=40)      # many small index files
    rs = put_many(path, config, n=120)
    calls = []
    with MessageStore.open(path, config) as s:
        report = s.verify(progress=lambda *a: calls.append(a))
        nindex = len(s.index_service.index_file_list)
    assert report["ok"] and report["records"] == 120 and report["keys"] == 240 and nindex > 5
    phases = {}
    for phase, done, total in calls:
        assert done <= total and done >= phases.get(phase, (0, 0))[0]
        phases[phase] = (done, total)
    assert set(phases) == {"commitlog", "consumequeue", "index"}
    assert all(done == total for done, total in phases.values())
    assert phases["index"][1] == nindex
    # An index chain looped back on itself: the walk ends, the loop is reported, the keys behind it are missing.
    idx_dir = os.path.join(path, "index")
    first = os.path.join(idx_dir, sorted(os.listdir(idx_dir))[0])
    with open(first, "r+b") as f:
        raw = bytearray(f.read())
        count = struct.unpack_from(">i", raw, 36)[0]
        items = 40 + 7 * 4
        for i in range(1, count):
            struct.pack_into(">i", raw, items + i * 20 + 16, i)         # every item its own predecessor
        f.seek(0)
        f.write(raw)
    report = verify_store(path, config)
    assert not report["ok"] and report["index_problems"] > 0 and report["index_missing_count"] > 0
    assert report["commitlog_errors"] == [] and report["cq_errors"] == [] and rs


# -- 6. bad inputs name the field; a closed store refuses everything ------------------------------------------------

@pytest.mark.parametrize("kw, field", [(dict(queue_id=1 << 31), "queue_id"), (dict(flag=1 << 40), "flag"),
                                       (dict(sys_flag=-(1 << 31) - 1), "sys_flag"),
                                       (dict(born_timestamp=1 << 63), "born_timestamp"),
                                       (dict(reconsume_times=1 << 32), "reconsume_times"),
                                       (dict(prepared_transaction_offset=-(1 << 64)), "prepared_transaction_offset")])
def test_out_of_range_message_fields_are_illegal_messages_naming_the_field(kw, field):
    with pytest.raises(MessageIllegalError) as ei:
        Message("T", b"x", **kw)
    assert ei.value.field == field and field in str(ei.value)
    m = Message("T", b"x")                      # set after construction: the same check, the field unchanged
    with pytest.raises(MessageIllegalError) as ei:
        setattr(m, field, kw[field])
    assert ei.value.field == field and getattr(m, field) == 0
    setattr(m, field, 7)
    assert getattr(m, field) == 7


def test_out_of_range_read_arguments_raise_value_error_naming_the_argument(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as s:
        s.put(Message("T", b"x"))
        s.wait_dispatched()
        for call, name in [(lambda: s.offset_by_time("T", 0, 1 << 63), "timestamp_ms"),
                           (lambda: s.get_messages("g", "T", 1 << 31, 0), "queue_id"),
                           (lambda: s.get_messages("g", "T", 0, 1 << 63), "offset"),
                           (lambda: s.look_message(1 << 64), "commitlog_offset"),
                           (lambda: s.query_message("T", "k", begin=-(1 << 70)), "begin"),
                           (lambda: s.query_message("T", "k", end=1 << 63), "end"),
                           (lambda: s.query_message("T", "k", 1 << 64), "max_num")]:
            with pytest.raises(ValueError, match=name):
                call()
        for call, name in [(lambda: s.look_message(1.5), "commitlog_offset"),
                           (lambda: s.query_message("T", "k", end="soon"), "end"),
                           (lambda: s.query_message("T", "k", None), "max_num"),
                           (lambda: s.query_message("T", "k", 2.0), "max_num"),
                           (lambda: s.query_message("T", "k", begin=0.5), "begin"),
                           (lambda: s.query_message("T", 7), "key")]:
            with pytest.raises(TypeError, match=name):
                call()
        import numpy as np
        assert [m.body.tobytes() for m in s.query_message("T", s.look_message(np.int64(0)).uniq_key, np.int32(4),
                                                           True, np.int64(1 << 62))] == [b"x"]
        assert s.get_messages("g", "T", 0, 0).status is GetStatus.FOUND      # and the store still serves


def test_every_call_on_a_closed_store_raises_store_closed_error(tmp_path):
    s = MessageStore.open(str(tmp_path / "s"), cfg())
    s.put(Message("T", b"x"))
    s.close()
    calls = [lambda: s.put(Message("T", b"y")), lambda: s.put_batch([Message("T", b"y")]),
             lambda: s.put_async(Message("T", b"y")), lambda: s.get_messages("g", "T", 0, 0),
             lambda: s.max_offset("T", 0), lambda: s.min_offset("T", 0), lambda: s.offset_by_time("T", 0, 0),
             lambda: s.look_message(0), lambda: s.query_message("T", "k"), lambda: s.topics(),
             lambda: s.runtime_info(), lambda: s.verify(), lambda: s.wait_flushed(0),
             lambda: s.wait_dispatched(), lambda: s.pickup_store_timestamp(0, 10), lambda: s.start()]
    for call in calls:
        with pytest.raises(StoreClosedError):
            call()
    with MessageStore.open(str(tmp_path / "s"), cfg()) as again:
        assert again.max_offset("T", 0) == 1
