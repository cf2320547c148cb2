"""Delayed delivery (rmqcore/schedule.py): the delay-level rewrite of CommitLog.putMessage, ScheduleMessageService's
delivery (due units only, in order, the real message restored), delayOffset.json in fastjson's form, and a SIGKILL
test with a real child: every delayed message delivered after restart, none twice (the deliveries made after the
last persisted progress are found in the commitlog at the reopen).

Sources of the rules (apache/rocketmq, rocketmq-all-4.9.7): store/.../CommitLog.java asyncPutMessage (delay branch),
store/.../schedule/ScheduleMessageService.java (messageTimeup, executeOnTimeup, correctDeliverTimestamp,
correctDelayOffset, DelayOffsetSerializeWrapper); 5.3.3 broker/.../util/HookUtils.java transformDelayLevelMessage.
"""
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import rmqcore

from rmqcore import GetStatus, Message, MessageIllegalError, MessageStore, PutStatus, StoreConfig
from rmqcore._codec import java_hash_code
from rmqcore.errors import StoreLayoutError
from rmqcore.schedule import (SCHEDULE_TOPIC, ScheduleMessageService, decode_delay_offsets, encode_delay_offsets,
                              rewrite_delay)
from store_util import queue_messages

# The directory holding the rmqcore imported here (a source tree, or site-packages for an installed build):
# child processes import that one, never the sources beside the tests (uncompiled in an unpacked sdist).
SRC = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))
LEVELS = "1s 5s 10s 30s 1m"


def cfg(**kw):
    base = dict(mapped_file_size_commit_log=256 * 1024, mapped_file_size_consume_queue=20 * 50,
                max_message_size=16 * 1024, max_hash_slot_num=101, max_index_num=4000,
                warm_mapped_file_enable=False, message_delay_level=LEVELS, schedule_message_service_enable=False)
    base.update(kw)
    return StoreConfig(**base)


class FakeClock:
    def __init__(self):
        self.now = time.time_ns() // 1_000_000

    def __call__(self):
        return self.now


def put_delayed(store, msg):
    # The store's put rewrites a DELAY message into the schedule topic itself (CommitLog.putMessage's branch).
    real_topic, real_qid = msg.topic, msg.queue_id
    r = store.put(msg)
    assert r.status is PutStatus.PUT_OK
    assert msg.topic == "SCHEDULE_TOPIC_XXXX" and msg.properties["REAL_TOPIC"] == real_topic
    assert msg.properties["REAL_QID"] == str(real_qid)
    return r


def read_queue(store, topic, qid):
    return [m.as_dict() | {"tags_code": m.tags_code} for m in queue_messages(store, topic, qid)]


# -- the rewrite ---------------------------------------------------------------------------------------------------

def test_rewrite_moves_to_schedule_queue_and_keeps_real_destination():
    m = Message("Orders", b"x", 3, tags="A", properties={"DELAY": "2"})
    assert rewrite_delay(m, 18)
    assert (m.topic, m.queue_id) == (SCHEDULE_TOPIC, 1)
    assert m.properties["REAL_TOPIC"] == "Orders" and m.properties["REAL_QID"] == "3"
    assert m.properties["DELAY"] == "2" and m.tags == "A"


def test_rewrite_clamps_levels_above_max_as_set_delay_time_level():
    m = Message("Orders", b"x", 0, properties={"DELAY": "99"})
    assert rewrite_delay(m, 18)
    assert m.queue_id == 17 and m.properties["DELAY"] == "18"


@pytest.mark.parametrize("delay", [None, "0", "-3"])
def test_no_rewrite_without_a_positive_level(delay):
    props = {} if delay is None else {"DELAY": delay}
    m = Message("Orders", b"x", 2, properties=props)
    assert not rewrite_delay(m, 18)
    assert (m.topic, m.queue_id) == ("Orders", 2) and "REAL_TOPIC" not in m.properties


@pytest.mark.parametrize("tran, rewritten", [(0x0, True), (0x8, True), (0x4, False), (0xC, False)])
def test_prepared_and_rollback_messages_are_never_delayed(tran, rewritten):
    m = Message("Orders", b"x", 0, properties={"DELAY": "1"}, sys_flag=tran)
    assert rewrite_delay(m, 18) is rewritten
    assert (m.topic == SCHEDULE_TOPIC) is rewritten


def test_a_store_without_delay_levels_refuses_delayed_messages():
    m = Message("Orders", b"x", 1, properties={"DELAY": "1"})
    with pytest.raises(MessageIllegalError, match="no delay levels"):
        rewrite_delay(m, 0)
    assert m.topic == "Orders"


def test_service_settings_are_checked(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        with pytest.raises(ValueError, match="flush_delay_offset_interval"):
            ScheduleMessageService(store, flush_delay_offset_interval=0)
        with pytest.raises(ValueError, match="batch_size"):
            ScheduleMessageService(store, batch_size=0)


@pytest.mark.parametrize("bad", ["abc", "1.5", " 1", "1_0", "99999999999", ""])
def test_bad_delay_is_refused_precisely_and_leaves_the_message(bad):
    m = Message("Orders", b"x", 1, properties={"DELAY": bad})
    with pytest.raises(MessageIllegalError) as e:
        rewrite_delay(m, 18)
    assert e.value.field == "properties[DELAY]"
    assert (m.topic, m.queue_id) == ("Orders", 1) and "REAL_TOPIC" not in m.properties


# -- delayOffset.json ----------------------------------------------------------------------------------------------

def test_reads_fastjson_text_as_java_writes_it():
    # DelayOffsetSerializeWrapper.toJson: fastjson leaves Integer map keys unquoted, compact or pretty.
    assert decode_delay_offsets('{"offsetTable":{1:0,2:35}}', "f") == {1: 0, 2: 35}
    assert decode_delay_offsets('{\n\t"offsetTable":{\n\t\t1:7,\n\t\t18:2\n\t}\n}', "f") == {1: 7, 18: 2}
    assert decode_delay_offsets('{"offsetTable":{"3":4}}', "f") == {3: 4}
    assert decode_delay_offsets('{"offsetTable":{}}', "f") == {}
    # 5.x's DelayOffsetSerializeWrapper adds a dataVersion (DataVersion's fields): read past it.
    assert decode_delay_offsets('{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000},'
                                '"offsetTable":{1:12,2:0}}', "f") == {1: 12, 2: 0}


def test_written_text_is_what_fastjson_reads():
    text = encode_delay_offsets({2: 35, 1: 0})
    assert text == '{\n\t"offsetTable":{1:0,2:35\n\t}\n}'     # the Java broker's text (fastjson, pretty)
    assert decode_delay_offsets(text, "f") == {1: 0, 2: 35}


@pytest.mark.parametrize("text, field", [('{"offsetTable":{1:-1}}', "offsetTable[1]"),
                                         ('{"offsetTable":{1:"x"}}', "offsetTable[1]"),
                                         ('{"offsetTable":[1]}', "offsetTable must"),
                                         ('{"offsetTable":{1:0', "not the JSON"),
                                         ('{"offsetTable":{1:true}}', "offsetTable[1]")])
def test_hostile_delay_offset_file_names_the_field(text, field):
    with pytest.raises(StoreLayoutError, match=field.replace("[", r"\[")):
        decode_delay_offsets(text, "/x/delayOffset.json")


def test_corrupt_file_falls_back_to_bak_and_both_corrupt_refuses_to_open(tmp_path, caplog):
    path = tmp_path / "s"
    with MessageStore.open(str(path), cfg(schedule_message_service_enable=True)):
        pass
    conf = path / "config"
    conf.mkdir(exist_ok=True)
    (conf / "delayOffset.json").write_text('{"offsetTable":{1:')
    (conf / "delayOffset.json.bak").write_text('{"offsetTable":{1:0}}')
    with MessageStore.open(str(path), cfg(schedule_message_service_enable=True)) as store:
        assert store.schedule_service.offset_table == {1: 0}
    assert "backup" in caplog.text
    (conf / "delayOffset.json").write_text('garbage')
    (conf / "delayOffset.json.bak").write_text('{"offsetTable":{1:"x"}}')
    with pytest.raises(StoreLayoutError, match="delayOffset.json"):
        MessageStore.open(str(path), cfg(schedule_message_service_enable=True))
    (conf / "delayOffset.json").write_text('{"offsetTable":{1:0}}')      # fixed: the store opens again
    MessageStore.open(str(path), cfg(schedule_message_service_enable=True)).close()


# -- delivery ------------------------------------------------------------------------------------------------------

def test_due_messages_are_delivered_as_message_timeup_builds_them(tmp_path):
    clock = FakeClock()
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        svc = ScheduleMessageService(store, clock=clock)
        svc.load()
        sent = []
        for i in range(5):
            m = Message("Orders", f"body{i}".encode(), 2, tags=f"T{i % 2}", keys=[f"k{i}"],
                        properties={"DELAY": "2", "a": str(i)}, flag=7, born_timestamp=1234 + i,
                        born_host="10.0.0.9:4321", reconsume_times=3)
            sent.append(put_delayed(store, m))
        store.wait_dispatched()
        # The schedule queue's tagsCode is the delivery time: store time + the level's 5 s.
        sched = store.find_consume_queue(SCHEDULE_TOPIC, 1).get_units(0)
        assert [int(u["tags_code"]) for u in sched] == [r.store_timestamp + 5000 for r in sent]
        assert store.get_messages("g", "Orders", 2, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        clock.now = sent[0].store_timestamp + 5000 - 1
        assert svc.deliver_due() == 0                                      # nothing due yet
        clock.now = sent[-1].store_timestamp + 5000
        assert svc.deliver_due() == 5
        store.wait_dispatched()
        got = read_queue(store, "Orders", 2)
        assert [g["body"] for g in got] == [f"body{i}".encode() for i in range(5)]
        for i, g in enumerate(got):
            assert g["topic"] == "Orders" and g["queue_id"] == 2 and g["queue_offset"] == i
            assert g["flag"] == 7 and g["born_timestamp"] == 1234 + i and g["born_host"] == "10.0.0.9:4321"
            assert g["reconsume_times"] == 3 and g["sys_flag"] == 0
            assert g["tags_code"] == java_hash_code(f"T{i % 2}")
            p = g["properties"]
            assert "DELAY" not in p and p["REAL_TOPIC"] == "Orders" and p["REAL_QID"] == "2"
            assert p["a"] == str(i) and p["KEYS"] == f"k{i}" and p["UNIQ_KEY"] == sent[i].uniq_key
        # Tag filtering on the real queue works with the restored tags code.
        g = store.get_messages("g", "Orders", 2, 0, 32, tags="T1")
        assert [bytes(m.body) for m in g.messages] == [b"body1", b"body3"]
        assert svc.offset_table == {2: 5}
        assert svc.deliver_due() == 0


def test_scan_stops_at_the_first_unit_not_yet_due(tmp_path):
    clock = FakeClock()
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        svc = ScheduleMessageService(store, clock=clock)
        svc.load()
        first = [put_delayed(store, Message("A", b"a%d" % i, 0, properties={"DELAY": "1"})) for i in range(3)]
        time.sleep(0.005)
        later = [put_delayed(store, Message("A", b"b%d" % i, 0, properties={"DELAY": "1"})) for i in range(3)]
        assert later[0].store_timestamp > first[-1].store_timestamp
        store.wait_dispatched()
        clock.now = first[-1].store_timestamp + 1000
        assert svc.deliver_due() == 3
        assert svc.offset_table[1] == 3
        clock.now = later[-1].store_timestamp + 1000
        assert svc.deliver_due() == 3
        store.wait_dispatched()
        assert [bytes(m["body"]) for m in read_queue(store, "A", 0)] == [b"a0", b"a1", b"a2", b"b0", b"b1", b"b2"]


def test_levels_are_independent_and_a_clock_gone_back_delivers_now(tmp_path):
    clock = FakeClock()
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        svc = ScheduleMessageService(store, clock=clock)
        svc.load()
        r5 = put_delayed(store, Message("A", b"long", 0, properties={"DELAY": "5"}))     # 1 m
        r1 = put_delayed(store, Message("A", b"short", 1, properties={"DELAY": "1"}))    # 1 s
        store.wait_dispatched()
        clock.now = r1.store_timestamp + 1000
        assert svc.deliver_due() == 1
        assert svc.offset_table == {1: 1}
        # correctDeliverTimestamp: a delivery time further than the level's delay from now means the clock went
        # back; the message is due at once.
        clock.now = r5.store_timestamp - 10 * 60 * 1000
        assert svc.deliver_due() == 1
        store.wait_dispatched()
        assert [bytes(m["body"]) for m in read_queue(store, "A", 0)] == [b"long"]


def test_many_due_messages_cross_consume_queue_files_in_batches(tmp_path):
    clock = FakeClock()
    with MessageStore.open(str(tmp_path / "s"), cfg(mapped_file_size_commit_log=1024 * 1024)) as store:
        svc = ScheduleMessageService(store, clock=clock, batch_size=64)
        svc.load()
        msgs = [Message("Bulk", b"%05d" % i, i % 3, properties={"DELAY": "1"}) for i in range(700)]
        for m in msgs:
            rewrite_delay(m, 5)
        rs = store.put_batch(msgs)
        store.wait_dispatched()
        clock.now = rs[-1].store_timestamp + 1000
        assert svc.deliver_due() == 700          # 14 consume-queue files of 50 units, batches of 64
        store.wait_dispatched()
        bodies = [m["body"] for q in range(3) for m in read_queue(store, "Bulk", q)]
        assert sorted(bodies) == sorted(b"%05d" % i for i in range(700))


def test_bad_records_are_skipped_not_stuck(tmp_path):
    clock = FakeClock()
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        svc = ScheduleMessageService(store, clock=clock)
        svc.load()
        # Written straight into the schedule topic, as a foreign writer could: no REAL_QID, then the half topic.
        store.put(Message(SCHEDULE_TOPIC, b"noqid", 0, properties={"DELAY": "1", "REAL_TOPIC": "A"}))
        store.put(Message(SCHEDULE_TOPIC, b"half", 0, properties={"DELAY": "1", "REAL_TOPIC":
                                                                   "RMQ_SYS_TRANS_HALF_TOPIC", "REAL_QID": "0"}))
        # A real topic the store refuses (128 bytes: no v1 record holds it): the whole batch is refused, the
        # service goes one by one. (A topic only the broker's send rule refuses is delivered:
        # test_schedule_foreign.py.)
        store.put(Message(SCHEDULE_TOPIC, b"illegal", 0, properties={"DELAY": "1", "REAL_TOPIC": "x" * 128,
                                                                      "REAL_QID": "0"}))
        r = put_delayed(store, Message("A", b"good", 0, properties={"DELAY": "1"}))
        store.wait_dispatched()
        clock.now = r.store_timestamp + 1000
        assert svc.deliver_due() == 1
        assert svc.skipped == 3 and svc.delivered == 1 and svc.offset_table[1] == 4
        store.wait_dispatched()
        assert [m["body"] for m in read_queue(store, "A", 0)] == [b"good"]


def test_a_failed_append_stops_progress_at_the_first_message_not_written(tmp_path):
    """No new commitlog file can be made mid-delivery (CREATE_MAPPED_FILE_FAILED): the level's progress stops at
    the first message not written, and the next turn delivers the rest, each message exactly once."""
    clock = FakeClock()
    with MessageStore.open(str(tmp_path / "s"), cfg(mapped_file_size_commit_log=64 * 1024)) as store:
        svc = ScheduleMessageService(store, clock=clock)
        svc.load()
        msgs = [Message("A", b"%04d" % i + b"." * 1000, 0, properties={"DELAY": "1", "i": str(i)}) for i in range(40)]
        for m in msgs:
            rewrite_delay(m, 5)
        rs = store.put_batch(msgs)
        store.wait_dispatched()
        mfq = store.commit_log.mapped_file_queue
        make = mfq.get_last_mapped_file
        mfq.get_last_mapped_file = lambda *a, **kw: None          # as when the disk is full
        clock.now = rs[-1].store_timestamp + 1000
        first = svc.deliver_due()
        room = (64 * 1024 - rs[-1].commitlog_offset % (64 * 1024) - rs[-1].wrote_bytes) // rs[0].wrote_bytes
        assert 0 < first < 40 and first in (room, room - 1)        # what fitted the current file
        assert svc.offset_table[1] == first and svc.delivered == first
        mfq.get_last_mapped_file = make
        assert svc.deliver_due() == 40 - first
        assert svc.offset_table[1] == 40
        store.wait_dispatched()
        assert [bytes(m["body"])[:4] for m in read_queue(store, "A", 0)] == [b"%04d" % i for i in range(40)]


def test_progress_persists_at_close_and_delivery_resumes_without_duplicates(tmp_path):
    path = str(tmp_path / "s")
    clock = FakeClock()
    with MessageStore.open(path, cfg()) as store:
        svc = ScheduleMessageService(store, clock=clock)
        svc.load()
        rs = [put_delayed(store, Message("A", b"%d" % i, 0, properties={"DELAY": "1"})) for i in range(4)]
        store.wait_dispatched()
        clock.now = rs[1].store_timestamp + 1000
        delivered = svc.deliver_due()
        svc.persist()
    text = (Path(path) / "config" / "delayOffset.json").read_text()
    assert decode_delay_offsets(text, "f") == {1: delivered}
    clock.now = rs[-1].store_timestamp + 1000
    with MessageStore.open(path, cfg()) as store:
        svc = ScheduleMessageService(store, clock=clock)
        svc.load()
        assert svc.offset_table == {1: delivered}
        assert svc.deliver_due() == 4 - delivered
        store.wait_dispatched()
        assert [m["body"] for m in read_queue(store, "A", 0)] == [b"0", b"1", b"2", b"3"]


def test_offsets_outside_the_queue_are_corrected_on_load(tmp_path):
    path = tmp_path / "s"
    with MessageStore.open(str(path), cfg()) as store:
        put_delayed(store, Message("A", b"x", 0, properties={"DELAY": "1"}))
    (path / "config").mkdir(exist_ok=True)
    (path / "config" / "delayOffset.json").write_text('{"offsetTable":{1:99,7:3}}')
    with MessageStore.open(str(path), cfg()) as store:
        svc = ScheduleMessageService(store, clock=FakeClock())
        svc.load()
        assert svc.offset_table == {1: 1, 7: 3}     # level 7 has no queue here: kept as it is, as Java does


def test_store_runs_the_service_and_persists_at_close(tmp_path):
    """The StoreConfig switch: a DELAY message put through rewrite_delay arrives in its real queue ~1 s later."""
    path = str(tmp_path / "s")
    with MessageStore.open(path, cfg(schedule_message_service_enable=True)) as store:
        r = put_delayed(store, Message("Late", b"x", 0, properties={"DELAY": "1"}))
        g = store.get_messages("g", "Late", 0, 0, 1, wait=5.0)
        assert g.status is GetStatus.FOUND
        waited = g.messages[0].store_timestamp - r.store_timestamp
        assert 1000 <= waited < 1500
    assert decode_delay_offsets((Path(path) / "config" / "delayOffset.json").read_text(), "f") == {1: 1}
    # A store that never saw a delayed message writes no delayOffset.json.
    with MessageStore.open(str(tmp_path / "t"), cfg(schedule_message_service_enable=True)):
        pass
    assert not (tmp_path / "t" / "config" / "delayOffset.json").exists()


def test_deliveries_after_the_persisted_progress_are_found_at_reopen(tmp_path):
    """A crash after deliveries but before delayOffset.json caught up (here: the file kept stale, as a kill leaves
    it): the reopen finds those deliveries in the commitlog and moves each level past them, so none is delivered
    twice."""
    path = str(tmp_path / "s")
    conf = cfg(message_delay_level="1s 2s")
    with MessageStore.open(path, conf) as store:
        svc = ScheduleMessageService(store)
        svc.load()
        for i in range(200):
            store.put(Message("A", b"%d" % i, i % 2, properties={"DELAY": str(1 + i % 2)}))
        store.wait_dispatched()
        time.sleep(1.1)
        first = svc.deliver_due()
        svc.persist()
        stale = (Path(path) / "config" / "delayOffset.json").read_text()
        for i in range(200, 400):
            store.put(Message("A", b"%d" % i, i % 2, properties={"DELAY": str(1 + i % 2)}))
        store.wait_dispatched()
        time.sleep(2.1)
        svc.deliver_due()
        assert svc.offset_table == {1: 200, 2: 200}
    (Path(path) / "config" / "delayOffset.json").write_text(stale)
    assert decode_delay_offsets(stale, "f") == {1: first}
    with MessageStore.open(path, conf) as store:
        svc = ScheduleMessageService(store)
        svc.load()
        assert svc.recovered == 400 - first
        assert svc.offset_table == {1: 200, 2: 200}
        # Not written by the load (an open failing later leaves the file as it was): by the thread's first turn.
        assert (Path(path) / "config" / "delayOffset.json").read_text() == stale
        assert svc.deliver_due() == 0
        store.wait_dispatched()
        bodies = [m["body"] for q in range(2) for m in read_queue(store, "A", q)]
        assert sorted(bodies) == sorted(b"%d" % i for i in range(400))
    # The store's own service (its thread) writes the table it recovered at its first turn.
    with MessageStore.open(path, cfg(message_delay_level="1s 2s", schedule_message_service_enable=True)) as store:
        assert store.schedule_service.recovered == 400 - first
        deadline = time.monotonic() + 5
        while (time.monotonic() < deadline and
               (Path(path) / "config" / "delayOffset.json").read_text() == stale):
            time.sleep(0.02)
        assert decode_delay_offsets((Path(path) / "config" / "delayOffset.json").read_text(), "f") == \
            {1: 200, 2: 200}


def test_deliveries_the_commitlog_lost_are_delivered_again_never_skipped(tmp_path):
    """A power loss takes back the tail of the commitlog: only the deliveries still there count, the units whose
    delivery was lost are delivered again (none lost, none twice)."""
    path = tmp_path / "s"
    with MessageStore.open(str(path), cfg()) as store:
        svc = ScheduleMessageService(store)
        svc.load()
        for i in range(200):
            store.put(Message("A", b"%d" % i, 0, properties={"DELAY": "1"}))
        store.wait_dispatched()
        svc.persist()
        time.sleep(1.1)
        assert svc.deliver_due() == 200
        store.wait_dispatched()
        cut = read_queue(store, "A", 0)[120]["commitlog_offset"]    # deliveries 120.. are lost
        svc.persist = lambda: None
    offsets = path / "config" / "delayOffset.json"
    assert not offsets.exists() or decode_delay_offsets(offsets.read_text(), "f").get(1, 0) == 0
    size = cfg().mapped_file_size_commit_log
    name = path / "commitlog" / f"{cut // size * size:020d}"
    with open(name, "r+b") as f:                     # what the disk had not been given: zeros from the cut on
        f.seek(cut % size)
        f.write(bytes(size - cut % size))
    for later in sorted((path / "commitlog").iterdir()):
        if int(later.name) > int(name.name):
            later.unlink()
    (path / "abort").touch()
    with MessageStore.open(str(path), cfg()) as store:
        svc = ScheduleMessageService(store)
        svc.load()
        assert svc.recovered == 120 and svc.offset_table == {1: 120}
        assert svc.deliver_due() == 80
        store.wait_dispatched()
        assert sorted(int(m["body"]) for m in read_queue(store, "A", 0)) == list(range(200))


def test_a_message_sent_twice_is_delivered_twice_across_the_recovery(tmp_path):
    """The same message put twice (a producer's retry: same UNIQ_KEY, body and born time), only the first copy
    delivered and counted by delayOffset.json: that delivery is the first copy's, so the second copy is still
    delivered after the reopen (not taken for delivered and skipped)."""
    path = str(tmp_path / "s")
    clock = FakeClock()
    props = {"DELAY": "1", "UNIQ_KEY": "7F00000100002A9F0000000000000001"}
    with MessageStore.open(path, cfg()) as store:
        svc = ScheduleMessageService(store, clock=clock)
        svc.load()
        first = put_delayed(store, Message("A", b"same", 0, properties=dict(props), born_timestamp=1700000000000))
        time.sleep(0.01)
        put_delayed(store, Message("A", b"same", 0, properties=dict(props), born_timestamp=1700000000000))
        store.wait_dispatched()
        clock.now = first.store_timestamp + 1000            # the first copy is due, the second not yet
        assert svc.deliver_due() == 1
        svc.persist()
    with MessageStore.open(path, cfg()) as store:
        svc = ScheduleMessageService(store, clock=clock)
        svc.load()
        assert svc.recovered == 0 and svc.offset_table == {1: 1}
        clock.now += 1000
        assert svc.deliver_due() == 1
        store.wait_dispatched()
        assert [m["body"] for m in read_queue(store, "A", 0)] == [b"same", b"same"]


def test_a_look_alike_record_is_not_taken_for_a_delivery(tmp_path):
    path = str(tmp_path / "s")
    with MessageStore.open(path, cfg()) as store:
        svc = ScheduleMessageService(store)
        svc.load()
        r = put_delayed(store, Message("A", b"x", 0, properties={"DELAY": "1"}))
        store.wait_dispatched()
        svc.persist()
        src = read_queue(store, SCHEDULE_TOPIC, 0)[0]
        props = dict(src["properties"], UNIQ_KEY="7F0000010000000000000000000000AA")
        props.pop("DELAY")
        # Same body, born time and host, destination and REAL_TOPIC / REAL_QID: only the UNIQ_KEY differs.
        store.put(Message("A", b"x", 0, properties=props, born_timestamp=src["born_timestamp"]))
        store.wait_dispatched()
    time.sleep(max(0, (r.store_timestamp + 1100 - time.time() * 1000) / 1000))
    with MessageStore.open(path, cfg()) as store:
        svc = ScheduleMessageService(store)
        svc.load()
        assert svc.recovered == 0 and svc.offset_table.get(1, 0) == 0
        assert svc.deliver_due() == 1


# -- SIGKILL ------------------------------------------------------------------------------------------------------

CHILD = r'''
import json, sys, time
spec = json.loads(sys.argv[1])
sys.path.insert(0, spec["src"])
from rmqcore import Message, MessageStore, StoreConfig
from rmqcore.schedule import rewrite_delay
store = MessageStore.open(spec["path"], StoreConfig(**spec["config"]))
print("#READY", flush=True)
for burst in range(spec["bursts"]):
    msgs = []
    for i in range(spec["per_burst"]):
        m = Message("Real", b"%d:%d" % (burst, i), i % 2, properties={"DELAY": "1", "ID": f"{burst}:{i}"})
        rewrite_delay(m, 1)
        msgs.append(m)
    store.put_batch(msgs)
    print("#PUT", burst, flush=True)
    time.sleep(spec["gap"])
print("#DONE", flush=True)
time.sleep(60)
'''


def _real_ids(store):
    return [m["properties"]["ID"] for q in range(2) for m in read_queue(store, "Real", q)]


@pytest.mark.parametrize("seed", [1, 2])
def test_sigkill_during_delivery_loses_nothing_and_duplicates_nothing(tmp_path, seed):
    rng = random.Random(seed)
    path = str(tmp_path / "s")
    conf = dict(mapped_file_size_commit_log=512 * 1024, mapped_file_size_consume_queue=20 * 100,
                max_hash_slot_num=101, max_index_num=20000, warm_mapped_file_enable=False,
                message_delay_level="1s", flush_delay_offset_interval=150, schedule_message_service_enable=True)
    bursts, per_burst = 12, 150
    spec = dict(src=SRC, path=path, config=conf, bursts=bursts, per_burst=per_burst, gap=0.15)
    err = tempfile.TemporaryFile()
    p = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(spec)], stdout=subprocess.PIPE, stderr=err)
    lines = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = p.stdout.readline().decode()
        lines.append(line)
        if line.startswith("#PUT") and int(line.split()[1]) == bursts - 1:
            break
    assert lines[-1].startswith("#PUT"), (lines, err.seek(0) or err.read().decode())
    # All puts are in; deliveries run from ~1 s after the first burst to ~1 s after the last. Kill in between.
    time.sleep(rng.uniform(0.05, 0.8))
    p.send_signal(signal.SIGKILL)
    p.wait()
    expected = {f"{b}:{i}" for b in range(bursts) for i in range(per_burst)}

    offset_file = Path(path) / "config" / "delayOffset.json"
    persisted = decode_delay_offsets(offset_file.read_text(), "f").get(1, 0) if offset_file.exists() else 0
    inspect = dict(conf, schedule_message_service_enable=False)
    with MessageStore.open(path, StoreConfig(**inspect)) as store:
        assert store.runtime_info()["recovery"]["last_exit_ok"] is False
        sched = read_queue(store, SCHEDULE_TOPIC, 0)
        assert {m["properties"]["ID"] for m in sched} == expected          # every delayed message stored
        first_run = _real_ids(store)
        assert len(first_run) == len(set(first_run))                        # no duplicate before the crash
        assert persisted <= len(sched)
        # Delivered before the kill but after the last persisted progress: these will be delivered again.
        redo = {m["properties"]["ID"] for m in sched[persisted:]} & set(first_run)
        assert {m["properties"]["ID"] for m in sched[:persisted]} <= set(first_run)
    with MessageStore.open(path, StoreConfig(**conf)) as store:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ids = _real_ids(store)
            if set(ids) == expected:
                break
            time.sleep(0.1)
        store.wait_dispatched()
        ids = _real_ids(store)
    counts = Counter(ids)
    assert set(counts) == expected                                         # nothing lost
    dups = {k for k, c in counts.items() if c > 1}
    # The deliveries made after the last persisted progress (``redo``, which RocketMQ delivers again) are found in
    # the commitlog at the reopen (ScheduleMessageService.recover_progress): none is delivered twice.
    assert not dups, (len(dups), len(redo))
    print(f"seed {seed}: {len(first_run)} delivered before the kill, progress persisted at {persisted}, "
          f"{len(redo)} delivered past it, {len(dups)} duplicates after restart")


# -- the bulk path (rmqcore/_schedule.pyx) against the per-message path ---------------------------------------------

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from rmqcore import reference  # noqa: E402
from rmqcore._message import decode_message  # noqa: E402
from rmqcore._encoder import EncodeBuffer  # noqa: E402
from rmqcore._pull import select_messages  # noqa: E402
from rmqcore._mapped_file import MappedFile  # noqa: E402
from rmqcore._schedule import NO_RECORD, time_up_into, timer_out_times  # noqa: E402
from rmqcore.timer import TimerMessageService, rewrite_timer  # noqa: E402

from strategies import hosts, int32, int64, property_text, topics  # noqa: E402


def _raw_record(props: bytes, *, body, flag, sys_flag, born_timestamp, born_host, reconsume_times, version,
                physical_offset=0):
    """A schedule-topic record as any writer could leave it, with ``props`` as raw bytes (duplicates, empty
    values, invalid UTF-8: what no Message dict can hold)."""
    rec = bytearray(reference.encode_message(
        topic=SCHEDULE_TOPIC, body=body, queue_id=0, flag=flag, sys_flag=sys_flag, born_timestamp=born_timestamp,
        born_host=born_host, store_timestamp=1, reconsume_times=reconsume_times, prepared_transaction_offset=77,
        version=version, physical_offset=physical_offset))
    assert rec[-2:] == b"\0\0"
    rec[-2:] = len(props).to_bytes(2, "big") + props
    rec[0:4] = len(rec).to_bytes(4, "big")
    return bytes(rec)


def _mostly(common, rare):
    """``common`` four draws in five, else ``rare``: hostile records mixed among ordinary ones."""
    return st.integers(0, 4).flatmap(lambda k: rare if k == 4 else common)    # (shrinks towards common)


_qids = _mostly(st.integers(0, 40).map(str), st.sampled_from(["+3", "007", "-1", "2147483647", "2147483648",
                                                              "-2147483649", "", "x", "1 ", "٣", "+", "-0"]))
# Topics the broker's send rule refuses but the store takes (a delivery is held to the store's): "has space",
# "支付", "a/b" (stored undispatchable), "é" * 63 (126 bytes); refused by the store: "a" * 128, "é" * 64.
_topic_values = _mostly(topics, st.sampled_from(["RMQ_SYS_TRANS_HALF_TOPIC", "has space", "a" * 128, "é", "支付",
                                                 "a/b", "é" * 63, "é" * 64, "odd topic.v1"]))
_names = _mostly(property_text(8).map(lambda s: s.encode()),
                 st.sampled_from([b"DELAY", b"TIMER_DELIVER_MS", b"TIMER_DELAY_SEC", b"__STARTDELIVERTIME",
                                  b"TIMER_DELAY_MS", b"UNIQ_KEY", b"TAGS", b"KEYS", b"REAL_TOPIC", b"REAL_QID",
                                  b"__CRC32#", b"\xff\xfe", b"a\x01b", b"TIMER_OUT_MS"]))
_values = _mostly(property_text(12).map(lambda s: s.encode()),
                  st.sampled_from([b"", b"v\x01w", b"\xc3", b"1", b"-9223372036854775808", b"9223372036854775808",
                                   b"+-5", b"+12", b"-0"]))


@st.composite
def _sources(draw, timer=False):
    pairs = []
    if draw(st.integers(0, 5)) < 5:                       # as the store's delay (timer) rewrite leaves it
        pairs += [(b"REAL_TOPIC", draw(_topic_values).encode()), (b"REAL_QID", draw(_qids).encode()),
                  (b"TIMER_OUT_MS", b"1700000000000") if timer else (b"DELAY", b"1")]
    if draw(st.booleans()):
        pairs.append((b"UNIQ_KEY", b"7F0000010001" + draw(st.binary(min_size=10, max_size=10)).hex().encode()))
    pairs += draw(st.lists(st.tuples(_names, _values), max_size=5))
    pairs = draw(st.permutations(pairs))
    if pairs and draw(st.integers(0, 4)) == 4:
        pairs.append(draw(st.sampled_from(pairs)))        # a name twice: first place, last value
    props = b"".join(n + b"\x01" + v + b"\x02" for n, v in pairs)
    if props and draw(st.integers(0, 5)) == 5:
        props = props[:-1]                                # no trailing separator
    born = draw(st.one_of(st.just(0), int64))
    body = draw(_mostly(st.binary(max_size=300), st.binary(min_size=850, max_size=1100)))    # limit: 1024
    fields = dict(body=body, flag=draw(int32), sys_flag=draw(st.integers(0, 0x3FF)) & ~0x30,
                  born_timestamp=born, born_host=draw(hosts), reconsume_times=draw(int32),
                  version=draw(st.sampled_from([1, 2])))
    return lambda offset: _raw_record(props, physical_offset=offset, **fields)


def _old_path(svc, store, units, files, file_size):
    """The per-message path: {unit index: record bytes as put_delivered would encode them (the store's topic
    rule), or None (skipped / refused)}."""
    n = len(units) // 20
    found = select_messages(units, files, file_size, n, 1 << 62, n + 1)[0]
    batch, exts = svc._time_up(found) if isinstance(svc, TimerMessageService) else svc._time_up(found, 1)
    by_offset = {}
    for msg, ext in zip(batch, exts):
        eb = EncodeBuffer()
        try:
            store.commit_log.encoder.encode_into(msg, eb, None, False)
        except MessageIllegalError:
            continue
        by_offset[ext.commitlog_offset] = (eb.record(0), msg)
    offsets = [int.from_bytes(units[i * 20:i * 20 + 8], "big") for i in range(n)]
    return {i: by_offset.get(off) for i, off in enumerate(offsets)}


@pytest.mark.parametrize("timer", [False, True], ids=["delay level", "timer wheel"])
def test_bulk_records_are_the_per_message_paths_byte_for_byte(tmp_path, timer):
    """Differential: for any record in the schedule topic, what time_up_into writes is exactly what messageTimeup
    + put_batch's encoder write (before the put's own fields); what it leaves to the per-message path is a run of
    units, in order. Records of a plain delayed send are always rebuilt in bulk. The same for the timer wheel's
    records (``timer``: its per-message path, convertMessage) and its plain timed sends; there timer_out_times
    reads each record's TIMER_OUT_MS as the per-message path parses it."""
    conf = cfg(max_message_size=1024, mapped_file_size_commit_log=1 << 20, timer_wheel_enable=timer)
    with MessageStore.open(str(tmp_path / "s"), conf) as store:
        svc = TimerMessageService(store) if timer else ScheduleMessageService(store, clock=FakeClock())
        encoder = store.commit_log.encoder
        reroute = encoder.reroute
        file_size = 4 << 20
        seq = iter(range(1 << 30))
        seen = Counter()

        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(st.lists(_sources(timer), min_size=1, max_size=12), st.booleans(), st.booleans(),
               st.sampled_from([1, 1500, 1 << 25]), st.data())
        def check(sources, crc, rerouting, max_bytes, data):
            encoder.append_prop_crc = crc
            encoder.reroute = reroute if rerouting else None
            d = tmp_path / f"cl{next(seq)}"
            d.mkdir()
            mf = MappedFile(str(d / "00000000000000000000"), file_size)
            try:
                unit_list, records = [], []
                for source in sources:
                    off = mf.wrote_position
                    rec = source(off)
                    records.append(rec)
                    assert mf.append(rec)
                    size = len(rec)
                    if data.draw(st.integers(0, 9)) == 9:
                        size += 1                               # a unit whose record is not there: skipped
                    unit_list.append(off.to_bytes(8, "big") + size.to_bytes(4, "big") + bytes(8))
                units = b"".join(unit_list)
                n = len(unit_list)
                t0 = time.time_ns() // 1_000_000
                old = _old_path(svc, store, units, [mf], file_size)
                eb, unit_of, i, per_message = EncodeBuffer(), np.empty(n, np.int64), 0, set()
                new = {}
                while i < n:
                    nxt, slow = time_up_into(eb, units, i, [mf], file_size, encoder.store_host_bytes,
                                             encoder.max_message_size, encoder.append_prop_crc,
                                             encoder.reroute is not None, encoder.uniq_keys, unit_of, {}, max_bytes,
                                             timer=timer)
                    assert nxt > i
                    if slow:
                        assert len(eb) == 0
                        per_message.update(range(i, nxt))
                    for k in range(len(eb)):
                        new[int(unit_of[k])] = eb.record(k)
                    i = nxt
                t1 = time.time_ns() // 1_000_000
                if timer:
                    out = np.empty(n, np.int64)
                    timer_out_times(units, [mf], file_size, out)
                    found = {m.commitlog_offset for m in select_messages(units, [mf], file_size, n, 1 << 62,
                                                                         n + 1)[0]}
                    for u in range(n):
                        if int.from_bytes(units[u * 20:u * 20 + 8], "big") not in found:
                            assert out[u] == NO_RECORD
                            continue
                        text = decode_message(records[u]).properties.get("TIMER_OUT_MS", "")
                        want_ms = int(text) if re.fullmatch("[+-]?[0-9]+", text, re.ASCII) else 0
                        want_ms = want_ms if -(1 << 63) <= want_ms < 1 << 63 else 0
                        assert out[u] == max(want_ms, NO_RECORD + 1), text      # Long.MIN_VALUE: due at once
                for u, rec in new.items():
                    assert u not in per_message
                    assert old[u] is not None, f"unit {u}: the per-message path skips it, the bulk path wrote it"
                    want, msg = old[u]
                    if "UNIQ_KEY" not in decode_message(records[u]).properties:
                        # Both generated a key, last: the same length, another counter value.
                        start = rec.rindex(b"UNIQ_KEY\x01") + 9
                        end = rec.index(b"\x02", start)
                        rec = rec[:start] + msg.properties["UNIQ_KEY"].encode() + rec[end:]
                    if int.from_bytes(records[u][40:48], "big") == 0:     # born now: both took the clock
                        assert t0 <= int.from_bytes(rec[40:48], "big") <= t1
                        rec = rec[:40] + want[40:48] + rec[48:]
                    assert rec == want, u
                seen["bulk"] += len(new)
                seen["per message"] += len(per_message)
                seen["generated key"] += sum("UNIQ_KEY" not in decode_message(records[u]).properties for u in new)
                # Units the bulk path neither wrote nor handed over had no valid record: the old path skips them.
                for u in set(range(n)) - set(new) - per_message:
                    assert old[u] is None
            finally:
                mf.destroy()

        check()
        encoder.append_prop_crc, encoder.reroute = conf.enabled_append_prop_crc, reroute
        # The comparison ran on both kinds of records (not only on ones the bulk path hands over).
        assert seen["bulk"] >= 100 and seen["per message"] >= 100 and seen["generated key"] >= 10, seen

        # A plain delayed (timed) send (dict properties, a legal destination) never takes the per-message path.
        now = time.time_ns() // 1_000_000
        msgs = [Message(f"T{i % 3}", os.urandom(100 + i), i % 4, tags="a", keys=["k", f"k{i}"],
                        properties={"TIMER_DELIVER_MS": str(now + 3_600_000 + i), "p": "é" * i} if timer
                        else {"DELAY": "2", "p": "é" * i}, born_host="[::1]:7", reconsume_times=i)
                for i in range(50)]
        for m in msgs:
            assert rewrite_timer(m, now) if timer else rewrite_delay(m, 5)
        store.put_batch(msgs)
        store.wait_dispatched()
        queue = store.find_consume_queue(*(("rmq_sys_wheel_timer", 0) if timer else (SCHEDULE_TOPIC, 1)))
        units = queue.get_units(0).view(np.uint8)
        files = store.commit_log.mapped_file_queue.mapped_files
        if timer:
            out = np.empty(51, np.int64)
            timer_out_times(np.concatenate([units, np.frombuffer(bytes(8) + b"\0\0\0\x10" + bytes(8), np.uint8)]),
                            files, conf.mapped_file_size_commit_log, out)
            assert out.tolist() == [now + 3_600_000 + i for i in range(50)] + [NO_RECORD]
        eb = EncodeBuffer()
        nxt, slow = time_up_into(eb, units, 0, files, conf.mapped_file_size_commit_log, encoder.store_host_bytes,
                                 encoder.max_message_size, encoder.append_prop_crc, True, encoder.uniq_keys,
                                 np.empty(50, np.int64), {}, timer=timer)
        assert (nxt, slow, len(eb)) == (50, False, 50)
        old = _old_path(svc, store, bytes(units), files, conf.mapped_file_size_commit_log)
        assert [eb.record(k) for k in range(50)] == [old[k][0] for k in range(50)]
