"""CommitLog: puts, END_OF_FILE blanks and rolling, queue offsets, reads, recovery of a torn tail, bad input."""
import os
import struct

import pytest

from rmqcore import CorruptRecordError, Message, MessageIllegalError, PutStatus, StoreConfig
from rmqcore import reference as R
from rmqcore.commit_log import CommitLog

FILE = 8 * 1024


@pytest.fixture
def config():
    return StoreConfig(mapped_file_size_commit_log=FILE, max_message_size=4096, warm_mapped_file_enable=False)


def open_log(tmp_path, config):
    return CommitLog.open(str(tmp_path / "commitlog"), config)


def test_put_and_look(tmp_path, config):
    cl = open_log(tmp_path, config)
    r = cl.put_message(Message("TopicA", b"body-1", 2, tags="TagA", keys=["k1"]))
    assert r.status is PutStatus.PUT_OK and r.ok
    assert (r.commitlog_offset, r.queue_offset) == (0, 0)
    m = cl.look_message(0)
    assert (m.topic, m.queue_id, bytes(m.body), m.tags, m.keys) == ("TopicA", 2, b"body-1", "TagA", ["k1"])
    assert m.store_timestamp == r.store_timestamp and m.commitlog_offset == 0
    assert m.msg_id == r.msg_id
    r2 = cl.put_message(Message("TopicA", b"body-2", 2))
    assert r2.commitlog_offset == r.wrote_bytes and r2.queue_offset == 1
    assert cl.look_message(5) is None            # not a record start
    cl.close()


def test_roll_writes_blank_record_at_file_end(tmp_path, config):
    cl = open_log(tmp_path, config)
    body = b"z" * 1000
    results = [cl.put_message(Message("T", body, 0)) for _ in range(20)]
    size = results[0].wrote_bytes
    per_file = (FILE - 8) // size if (FILE - 8) % size == 0 else FILE // size
    first_in_second = next(r for r in results if r.commitlog_offset >= FILE)
    assert first_in_second.commitlog_offset == FILE
    last_in_first = max(r.commitlog_offset for r in results if r.commitlog_offset < FILE)
    blank_at = last_in_first + size
    raw = open(os.path.join(cl.store_path, "00000000000000000000"), "rb").read()
    assert struct.unpack_from(">ii", raw, blank_at) == (FILE - blank_at, R.BLANK_MAGIC_CODE)
    assert [r.queue_offset for r in results] == list(range(20))
    assert len(list(cl.iterate(0, check_crc=True))) == 20
    assert per_file >= 1
    cl.close()


def test_put_batch_spans_files_and_keeps_order(tmp_path, config):
    cl = open_log(tmp_path, config)
    msgs = [Message(f"T{i % 3}", os.urandom(300), i % 2) for i in range(100)]
    results = cl.put_messages(msgs)
    assert all(r.ok for r in results) and len(cl.files()) > 3
    offsets = [r.commitlog_offset for r in results]
    assert offsets == sorted(offsets)
    for r, m in zip(results, msgs):
        got = cl.look_message(r.commitlog_offset, check_crc=True)
        assert bytes(got.body) == m.body and got.topic == m.topic and got.queue_offset == r.queue_offset
    assert cl.topic_queue_table[("T0", 0)] == len([i for i in range(100) if i % 3 == 0 and i % 2 == 0])
    cl.close()


def test_transaction_prepared_and_rollback_take_no_queue_offset(tmp_path, config):
    cl = open_log(tmp_path, config)
    a = cl.put_message(Message("T", b"a"))
    p = cl.put_message(Message("T", b"p", sys_flag=0x4))
    rb = cl.put_message(Message("T", b"r", sys_flag=0xC))
    c = cl.put_message(Message("T", b"c", sys_flag=0x8))
    assert [a.queue_offset, p.queue_offset, rb.queue_offset, c.queue_offset] == [0, 0, 0, 1]
    assert cl.look_message(p.commitlog_offset).queue_offset == 0
    cl.close()


def test_bad_input_changes_nothing(tmp_path, config):
    cl = open_log(tmp_path, config)
    cl.put_message(Message("T", b"ok"))
    before = (cl.max_offset, dict(cl.topic_queue_table))
    bad = [Message("bad topic", b"x"), Message("T", b"x" * 5000), Message("T", b"x", -1),
           Message("T", b"x", properties={"k": "a\x01b"})]
    for m in bad:
        with pytest.raises(MessageIllegalError):
            cl.put_message(m)
    with pytest.raises(MessageIllegalError):
        cl.put_messages([Message("T", b"fine"), Message("", b"x")])   # one bad → none written
    assert (cl.max_offset, dict(cl.topic_queue_table)) == before
    assert cl.put_message(Message("T", b"still usable")).queue_offset == 1
    cl.close()


def test_record_larger_than_a_file_is_refused(tmp_path):
    # max_message_size allows it, but a record must fit one file with its 8-byte end-of-file blank.
    cfg = StoreConfig(mapped_file_size_commit_log=4096, max_message_size=64 * 1024, warm_mapped_file_enable=False)
    cl = CommitLog.open(str(tmp_path / "cl"), cfg)
    with pytest.raises(MessageIllegalError, match="does not fit") as e:
        cl.put_message(Message("T", b"x" * 4050))
    assert e.value.limit == 4096 - 8
    assert cl.put_message(Message("T", b"x" * 3900)).ok
    cl.close()


def test_reopen_recovers_table_and_offsets(tmp_path, config):
    cl = open_log(tmp_path, config)
    for i in range(30):
        cl.put_message(Message("T", b"x" * 500, i % 3))
    end = cl.max_offset
    cl.close()
    cl = open_log(tmp_path, config)
    assert cl.max_offset == end
    assert cl.topic_queue_table == {("T", 0): 10, ("T", 1): 10, ("T", 2): 10}
    r = cl.put_message(Message("T", b"next", 0))
    assert r.queue_offset == 10 and r.commitlog_offset >= end
    cl.close()


def test_torn_tail_is_cut_on_recovery(tmp_path, config):
    cl = open_log(tmp_path, config)
    results = [cl.put_message(Message("T", b"x" * 200)) for _ in range(5)]
    cl.close()
    last = results[-1]
    path = os.path.join(str(tmp_path / "commitlog"), "00000000000000000000")
    with open(path, "r+b") as f:                 # tear the last record: garbage over its second half
        f.seek(last.commitlog_offset + last.wrote_bytes // 2)
        f.write(os.urandom(last.wrote_bytes // 2))
    cl = open_log(tmp_path, config)
    assert cl.max_offset == last.commitlog_offset
    assert cl.last_recovery["records"] == 4
    assert f"record at offset {last.commitlog_offset}" in cl.last_recovery["stop"]
    assert len(list(cl.iterate(0, check_crc=True))) == 4
    assert cl.put_message(Message("T", b"after")).queue_offset == 4
    cl.close()


def test_iterate_reports_corrupt_record_with_file_and_offset(tmp_path, config):
    cl = open_log(tmp_path, config)
    rs = [cl.put_message(Message("T", b"y" * 100)) for _ in range(3)]
    mf = cl.mapped_file_queue.first()
    mf.write_at(rs[1].commitlog_offset + 4, b"\0\0\0\0")      # kill the magic of record 2
    with pytest.raises(CorruptRecordError) as e:
        list(cl.iterate(0))
    assert e.value.offset == rs[1].commitlog_offset and e.value.field == "magicCode"
    assert e.value.path.endswith("00000000000000000000")
    cl.close()


def test_foreign_file_in_commitlog_dir_is_a_clear_error(tmp_path, config):
    d = tmp_path / "commitlog"
    d.mkdir()
    (d / "readme.md").write_text("x")
    from rmqcore import StoreLayoutError
    with pytest.raises(StoreLayoutError, match="readme.md"):
        CommitLog.open(str(d), config)


def test_appends_poke_the_dispatcher_only_while_it_idles(tmp_path, config):
    # The writer wakes an idle dispatcher itself, in C: a put after a quiet spell is dispatched at once rather
    # than after the dispatcher's longest sleep, and a busy dispatcher costs a put nothing.
    from rmqcore._mapped_file import WakeEvent
    cl = open_log(tmp_path, config)
    w = cl.writer
    ev = WakeEvent()
    w.set_dispatcher(ev)
    msg = Message("TopicA", b"x", 0)
    cl.put_message(msg)
    assert ev.wait(0) == 0                               # not idle: no poke
    w.dispatcher_idle(True)
    w.put(msg)
    assert ev.wait(0) == 1 and ev.wait(0) == 0           # one poke, consumed by the wait
    w.put_batch([msg, msg])
    assert ev.wait(0) == 1
    w.dispatcher_idle(False)
    w.put_batch([msg])
    assert ev.wait(0) == 0
    assert w.put_messages == 5
    cl.close()
