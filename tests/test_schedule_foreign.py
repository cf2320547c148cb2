"""Delayed and timer messages another broker stored are delivered to their real topics whatever those topics'
characters (a store written by RocketMQ must never lose a record on open).

RocketMQ's store checks a topic's length only (rocketmq-all-4.9.7 DefaultMessageStore.checkMessage: more than
Byte.MAX_VALUE is MESSAGE_ILLEGAL; 5.3.3 HookUtils.checkBeforePutMessage: more than 127 UTF-8 bytes); the
character rule ^[%|a-zA-Z0-9_-]+$ (TopicValidator) runs in the broker's send processor. A broker whose send path
took ``支付``, ``java-主题`` or ``odd topic.v1`` has delayed messages for them in SCHEDULE_TOPIC_XXXX (REAL_TOPIC /
REAL_QID) and 5.x timer messages in rmq_sys_wheel_timer, and its ScheduleMessageService (messageTimeup ->
writeMessageStore.putMessage) and TimerMessageStore (convertMessage -> doPut -> messageStore.putMessage) deliver
them through the store. So does rmqcore (MessageStore.put_delivered), in the bulk path (rmqcore._schedule) and the
per-message one, while every send keeps the broker's rule.

The stores here are written record by record with the reference encoder (rmqcore.reference.encode_message), no
put involved, then opened after an abort so recovery dispatches them: what another broker's files hold.
"""
import json
import os
import time

import numpy as np
import pytest

from rmqcore import Message, MessageIllegalError, MessageStore, StoreConfig
from rmqcore import reference as R
from rmqcore._codec import topic_is_dispatchable
from rmqcore._encoder import EncodeBuffer
from rmqcore._schedule import MAX_PAIRS, time_up_into
from rmqcore.schedule import SCHEDULE_TOPIC
from rmqcore.timer import TIMER_TOPIC
from store_util import queue_messages  # noqa: E402

FILE = 256 * 1024
LEVELS = "1s 5s 10s"
FOREIGN = ["支付", "java-主题", "odd topic.v1"]     # taken by the store, refused by the broker's send rule


def config(**kw):
    base = dict(mapped_file_size_commit_log=FILE, mapped_file_size_consume_queue=20 * 50, max_message_size=16 * 1024,
                max_hash_slot_num=101, max_index_num=4000, warm_mapped_file_enable=False, message_delay_level=LEVELS,
                schedule_message_service_enable=False, timer_wheel_enable=False)
    base.update(kw)
    return StoreConfig(**base)


def now_ms():
    return time.time_ns() // 1_000_000


def write_foreign_store(path, records, crc=False):
    """Write ``records`` — dicts of topic, queue_id, body, properties, born_timestamp, store_timestamp — back to back
    into a commitlog file as another broker's store leaves them (queue offsets counted per topic and queue), with an
    abort file: the open recovers the log and dispatches every record. Returns their commitlog offsets."""
    data, offsets, queue_offsets = bytearray(), [], {}
    for r in records:
        key = (r["topic"], r["queue_id"])
        qo = queue_offsets.get(key, 0)
        queue_offsets[key] = qo + 1
        offsets.append(len(data))
        data += R.encode_message(topic=r["topic"], body=r["body"], queue_id=r["queue_id"], flag=r.get("flag", 0),
                                 queue_offset=qo, physical_offset=len(data), born_timestamp=r["born_timestamp"],
                                 born_host="10.1.2.3:41000", store_timestamp=r["store_timestamp"],
                                 store_host="10.9.9.9:10911", reconsume_times=r.get("reconsume_times", 0),
                                 properties=r["properties"], append_crc_property=crc)
    assert len(data) < FILE - 8
    os.makedirs(os.path.join(path, "commitlog"))
    with open(os.path.join(path, "commitlog", "0" * 20), "wb") as f:
        f.write(bytes(data).ljust(FILE, b"\0"))
    open(os.path.join(path, "abort"), "w").close()
    return offsets


def delayed(real_topic, real_qid, body, i, *, level=1, extra=None, stored=None):
    """A delayed message as a 4.9.7 broker's CommitLog.putMessage leaves it in SCHEDULE_TOPIC_XXXX: the producer's
    properties plus DELAY, REAL_TOPIC and REAL_QID, in queue level - 1; stored a minute ago (due at once)."""
    props = {"TAGS": f"tag{i % 2}", "KEYS": f"key-{i}", "UNIQ_KEY": f"0A010203A0B418B4AAC2{i:012X}", "WAIT": "true",
             "订单": f"值{i}", "DELAY": str(level), "REAL_TOPIC": real_topic, "REAL_QID": str(real_qid)}
    props.update(extra or {})
    return dict(topic=SCHEDULE_TOPIC, queue_id=level - 1, body=body, properties=props, flag=i,
                born_timestamp=1_700_000_000_000 + i, store_timestamp=stored or now_ms() - 60_000,
                reconsume_times=i % 3)


def many_pairs(i):
    # More property pairs than the bulk path rebuilds (MAX_PAIRS): the record takes the per-message path.
    return {f"p{k}": f"v{i}.{k}" for k in range(MAX_PAIRS + 2)}


read_queue = queue_messages


def wait_for(cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def own(props):
    return {k: v for k, v in props.items() if k != "__CRC32#"}


def bulk_or_per_message(store, topic, qid, n):
    """For each of the ``n`` units of ``topic``/``qid``: True when the bulk path (time_up_into) rebuilds its record,
    False when it hands it to the per-message path."""
    enc = store.commit_log.encoder
    units = store.find_consume_queue(topic, qid, create=False).get_units(0, n).view(np.uint8)
    files = store.commit_log.mapped_file_queue.mapped_files
    out, i = [], 0
    while i < n:
        nxt, slow = time_up_into(EncodeBuffer(), units, i, files, FILE, enc.store_host_bytes, enc.max_message_size,
                                 enc.append_prop_crc, enc.reroute is not None, enc.uniq_keys, np.empty(n, np.int64),
                                 {}, timer=topic == TIMER_TOPIC)
        out += [not slow] * (nxt - i)
        i = nxt
    return out


def check_delivered(m, src, real_topic, real_qid, queue_offset, *, timer=False):
    assert (m.topic, m.queue_id, m.queue_offset) == (real_topic, real_qid, queue_offset)
    assert bytes(m.body) == src["body"]
    assert (m.flag, m.born_timestamp, m.born_host, m.reconsume_times) == (
        src["flag"], src["born_timestamp"], "10.1.2.3:41000", src["reconsume_times"])
    want = dict(src["properties"])
    if timer:
        # 5.x TimerMessageStore.convertMessage: REAL_TOPIC / REAL_QID cleared, the rest (TIMER_OUT_MS too) kept.
        del want["REAL_TOPIC"], want["REAL_QID"]
    else:
        # messageTimeup: DELAY cleared, REAL_TOPIC / REAL_QID kept.
        del want["DELAY"]
    assert own(m.properties) == want
    assert m.tags == src["properties"]["TAGS"] and m.keys == [src["properties"]["KEYS"]]


@pytest.mark.parametrize("path_kind", ["bulk", "per-message"])
def test_delayed_messages_another_broker_stored_reach_their_real_topics(tmp_path, path_kind):
    path = str(tmp_path / "s")
    plan = [("支付", 0), ("java-主题", 1), ("支付", 0), ("odd topic.v1", 2), ("plain-Topic", 0), ("java-主题", 1)]
    extra = many_pairs if path_kind == "per-message" else (lambda i: None)
    records = [delayed(t, q, f"body-{i}-{t}".encode() * (i + 1), i, extra=extra(i)) for i, (t, q) in enumerate(plan)]
    write_foreign_store(path, records)

    # The path the test is about is the one these records take.
    with MessageStore.open(path, config()) as s:
        assert s.max_offset(SCHEDULE_TOPIC, 0) == len(plan)
        assert bulk_or_per_message(s, SCHEDULE_TOPIC, 0, len(plan)) == [path_kind == "bulk"] * len(plan)

    with MessageStore.open(path, config(schedule_message_service_enable=True)) as s:
        svc = s.schedule_service
        wait_for(lambda: svc.offset_table.get(1) == len(plan))
        assert (svc.delivered, svc.skipped) == (len(plan), 0)
        s.wait_dispatched()
        seen = {}
        for i, (topic, qid) in enumerate(plan):
            got = read_queue(s, topic, qid)
            k = seen.get((topic, qid), 0)
            seen[(topic, qid)] = k + 1
            check_delivered(got[k], records[i], topic, qid, k)
            # Found by key through the index, as any message of the topic.
            assert [m.commitlog_offset for m in s.query_message(topic, f"key-{i}")] == [got[k].commitlog_offset]
        for (topic, qid), k in seen.items():
            assert len(read_queue(s, topic, qid)) == k
        assert set(FOREIGN) <= set(s.topics())
        assert s.verify()["ok"]
    with open(os.path.join(path, "config", "delayOffset.json")) as f:
        assert f.read().replace(" ", "").replace("\n", "").replace("\t", "") == '{"offsetTable":{1:%d}}' % len(plan)

    # Reopened with the service running: nothing is delivered again.
    with MessageStore.open(path, config(schedule_message_service_enable=True)) as s:
        svc = s.schedule_service
        assert svc.offset_table[1] == len(plan)
        assert svc.deliver_due() == 0
        s.wait_dispatched()
        for (topic, qid), k in seen.items():
            assert s.max_offset(topic, qid) == k


def test_a_real_topic_that_names_no_directory_is_kept_undispatchable_not_redelivered(tmp_path):
    # "a/b" and ".." are topics RocketMQ's store takes (1..127 bytes) but no consume-queue directory can be named
    # after: the delivery is stored, counted undispatchable, and the level moves on. A real topic of 128 bytes is
    # one the store itself refuses (MESSAGE_ILLEGAL): logged and skipped, not retried forever (Java's syncDeliver
    # would retry it every 100 ms for good). The message behind them is delivered.
    path = str(tmp_path / "s")
    plan = [("a/b", 0), ("..", 1), ("x" * 128, 0), ("支付", 3)]
    records = [delayed(t, q, b"payload-%d" % i, i) for i, (t, q) in enumerate(plan)]
    write_foreign_store(path, records)
    with MessageStore.open(path, config(schedule_message_service_enable=True)) as s:
        svc = s.schedule_service
        wait_for(lambda: svc.offset_table.get(1) == len(plan))
        assert (svc.delivered, svc.skipped) == (3, 1)
        s.wait_dispatched()
        report = s.verify()
        assert report["ok"] and report["undispatchable"] == 2
        kept = [s.look_message(off) for off in report["undispatchable_offsets"]]
        assert [(m.topic, m.queue_id, bytes(m.body)) for m in kept] == [("a/b", 0, b"payload-0"),
                                                                         ("..", 1, b"payload-1")]
        assert [own(m.properties) for m in kept] == [
            {k: v for k, v in records[i]["properties"].items() if k != "DELAY"} for i in (0, 1)]
        check_delivered(read_queue(s, "支付", 3)[0], records[3], "支付", 3, 0)
        assert all(topic_is_dispatchable(t) for t in s.topics())
    assert sorted(os.listdir(os.path.join(path, "consumequeue"))) == [SCHEDULE_TOPIC, "支付"]
    with MessageStore.open(path, config(schedule_message_service_enable=True)) as s:
        assert s.schedule_service.offset_table[1] == len(plan)
        assert s.schedule_service.deliver_due() == 0
        s.wait_dispatched()
        assert s.verify()["undispatchable"] == 2 and s.max_offset("支付", 3) == 1


def test_timer_messages_another_broker_stored_reach_their_real_topics(tmp_path):
    # 5.x HookUtils.transformTimerMessage leaves a timer message in rmq_sys_wheel_timer queue 0 with TIMER_OUT_MS,
    # REAL_TOPIC and REAL_QID (the producer's TIMER_DELIVER_MS kept); a 5.x store ends each record with __CRC32#.
    path = str(tmp_path / "s")
    due = now_ms() - 5_000
    plan = [("支付", 1), ("java-主题", 0), ("odd topic.v1", 0), ("支付", 1), ("a/b", 0)]
    records = []
    for i, (topic, qid) in enumerate(plan):
        props = {"TAGS": f"tag{i % 2}", "KEYS": f"key-{i}", "UNIQ_KEY": f"0A010203A0B418B4AAC2{i:012X}",
                 "TIMER_DELIVER_MS": str(due + i), "TIMER_OUT_MS": str(due + i), "REAL_TOPIC": topic,
                 "REAL_QID": str(qid)}
        records.append(dict(topic=TIMER_TOPIC, queue_id=0, body=f"timed-{i}-{topic}".encode(), properties=props,
                            flag=i, born_timestamp=1_700_000_000_000 + i, store_timestamp=due - 60_000,
                            reconsume_times=0))
    write_foreign_store(path, records, crc=True)
    with MessageStore.open(path, config()) as s:
        assert bulk_or_per_message(s, TIMER_TOPIC, 0, len(plan)) == [True] * len(plan)
    with MessageStore.open(path, config(timer_wheel_enable=True)) as s:
        timer = s.timer_service
        wait_for(lambda: timer.delivered == len(plan))
        assert timer.skipped == 0 and timer.pending == 0
        s.wait_dispatched()
        seen = {}
        for i, (topic, qid) in enumerate(plan):
            if topic == "a/b":
                continue
            k = seen.get((topic, qid), 0)
            seen[(topic, qid)] = k + 1
            check_delivered(read_queue(s, topic, qid)[k], records[i], topic, qid, k, timer=True)
        report = s.verify()
        assert report["undispatchable"] == 1
        assert bytes(s.look_message(report["undispatchable_offsets"][0]).body) == b"timed-4-a/b"
    with open(os.path.join(path, "config", "timerProgress.json")) as f:
        assert json.load(f)["scanFromOffset"] == len(plan)
    with MessageStore.open(path, config(timer_wheel_enable=True)) as s:
        assert s.timer_service.pending == 0 and s.timer_service.run_once() == 0
        s.wait_dispatched()
        assert {key: s.max_offset(*key) for key in seen} == seen
        assert s.verify()["undispatchable"] == 1


def test_a_delivery_timed_again_stays_under_the_stores_rule(tmp_path):
    # A delayed message that also carries TIMER_DELAY_MS: 5.x's messageTimeup clears DELAY, and the put moves it to
    # the timer topic (HookUtils.handleScheduleMessage); the wheel then delivers it. Both puts are deliveries.
    path = str(tmp_path / "s")
    records = [delayed("支付", 0, b"twice-timed", 0, extra={"TIMER_DELAY_MS": "300"})]
    write_foreign_store(path, records)
    with MessageStore.open(path, config(schedule_message_service_enable=True, timer_wheel_enable=True)) as s:
        wait_for(lambda: s.timer_service.delivered == 1)
        assert s.schedule_service.skipped == 0 and s.timer_service.skipped == 0
        s.wait_dispatched()
        [parked] = read_queue(s, TIMER_TOPIC, 0)
        assert parked.properties["REAL_TOPIC"] == "支付" and "DELAY" not in parked.properties
        [m] = read_queue(s, "支付", 0)
        assert bytes(m.body) == b"twice-timed" and m.queue_offset == 0
        assert int(m.properties["TIMER_OUT_MS"]) <= m.store_timestamp


def test_a_send_to_a_topic_outside_the_brokers_rule_is_still_refused(tmp_path):
    from rmqcore.broker import Broker, BrokerConfig, IllegalNameError
    with MessageStore.open(str(tmp_path / "s"), config(schedule_message_service_enable=True,
                                                       timer_wheel_enable=True)) as s:
        for props in ({}, {"DELAY": "1"}, {"TIMER_DELAY_SEC": "5"}):
            with pytest.raises(MessageIllegalError) as e:
                s.put(Message("支付", b"x", 0, properties=dict(props)))
            assert e.value.field == "topic" and "illegal character at byte 0" in str(e.value)
            with pytest.raises(MessageIllegalError, match="illegal character at byte 3"):
                s.put_batch([Message("odd topic.v1", b"x", 0, properties=dict(props))])
        # The store's own rule holds for a delivery too: a topic no v1 record can hold.
        with pytest.raises(MessageIllegalError) as e:
            s.put_delivered([Message("x" * 128, b"x", 0)])
        assert e.value.field == "topic" and e.value.limit == 127
        assert s.commit_log.max_offset == 0
    b = Broker.open(str(tmp_path / "b"), BrokerConfig(broker_name="broker-a"), store_config=config())
    try:
        with pytest.raises(IllegalNameError, match="illegal characters"):
            b.send(Message("支付", b"x"))
        with pytest.raises(IllegalNameError, match="illegal characters"):
            b.send(Message("java-主题", b"x", properties={"DELAY": "1"}))
    finally:
        b.close()


def test_a_half_message_another_broker_stored_for_a_foreign_topic_commits(tmp_path):
    # A transaction's half another broker stored for 支付 (its send path took the topic): committing it re-puts the
    # real message through the store, as RocketMQ's EndTransactionProcessor does, so it reaches 支付 instead of
    # being refused by the broker's character rule and left for the check to discard.
    from rmqcore.broker import Broker
    from rmqcore.broker.errors import IllegalNameError
    from rmqcore.broker.transaction import HALF_TOPIC
    path = str(tmp_path / "s")
    props = {"TRAN_MSG": "true", "PGROUP": "pg", "KEYS": "k-half", "UNIQ_KEY": "0A010203A0B418B4AAC2000000000001",
             "WAIT": "true", "REAL_TOPIC": "支付", "REAL_QID": "1"}
    (offset,) = write_foreign_store(path, [dict(topic=HALF_TOPIC, queue_id=0, body=b"pay-1", properties=props,
                                                born_timestamp=1_700_000_000_000, store_timestamp=now_ms())])
    with Broker.open(path, store_config=config()) as b:
        r = b.end_transaction(offset, "pg", True)
        assert r is not None and r.status.name == "PUT_OK"
        b.store.wait_dispatched()
        (m,) = read_queue(b.store, "支付", 1)
        assert bytes(m.body) == b"pay-1" and m.properties["KEYS"] == "k-half"
        assert "TRAN_MSG" not in m.properties and "REAL_TOPIC" not in m.properties
        assert m.prepared_transaction_offset == offset
        with pytest.raises(IllegalNameError):         # a send of its own to 支付 is still the broker's to refuse
            b.send(Message("支付", b"x", 0))
