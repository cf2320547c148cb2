"""Transactional messages (rmqcore/broker/transaction.py): half records as TransactionalMessageBridge stores them,
commit / rollback as EndTransactionProcessor writes them (op record: body = the half's queue offset, tag "d"), the
check pass of TransactionalMessageServiceImpl, and SIGKILL tests with real children.

Golden layouts are decoded here with struct straight from the record table of CommitLog (4.9.7
MessageExtEncoder.encode / MessageDecoder.decode), not through rmqcore's codec. Sources (apache/rocketmq,
rocketmq-all-4.9.7 and 5.3.3): broker/.../transaction/queue/TransactionalMessageBridge.java (parseHalfMessageInner,
addRemoveTagInTransactionOp, makeOpMessageInner, renewHalfMessageInner), TransactionalMessageServiceImpl.java
(check, fillOpRemoveMap, needDiscard, calculateOpOffset), processor/EndTransactionProcessor.java
(endMessageTransaction, checkPrepareMessage), 5.3.3 DefaultTransactionalMessageCheckListener.resolveDiscardMsg.
"""
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter

import pytest

import rmqcore

from rmqcore import GetStatus, Message, MessageIllegalError, MessageStore, PutStatus, StoreConfig
from rmqcore._codec import java_hash_code
from rmqcore.broker.transaction import (CHECK_MAX_TIME_TOPIC, HALF_TOPIC, OP_TOPIC, SYSTEM_GROUP,
                                        TransactionalMessageService, TransactionError)
from store_util import queue_messages

# The directory holding the rmqcore imported here (a source tree, or site-packages for an installed build):
# child processes import that one, never the sources beside the tests (uncompiled in an unpacked sdist).
SRC = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))
CONF = dict(mapped_file_size_commit_log=256 * 1024, mapped_file_size_consume_queue=20 * 50,
            max_message_size=16 * 1024, max_hash_slot_num=101, max_index_num=8000, warm_mapped_file_enable=False,
            schedule_message_service_enable=False)



def check_pass(tx):
    """One check pass. A pass leaves alone halves stored in its own millisecond or later (Java's storeTimestamp >=
    startTime rule): step past the millisecond of the puts just made, so a fast machine checks them."""
    time.sleep(0.002)
    return tx.check_once()

def cfg(**kw):
    return StoreConfig(**dict(CONF, **kw))


def parse_record(raw: bytes) -> dict:
    """The v1 commitlog record, field by field, as MessageDecoder.decode reads it (IPv4 hosts)."""
    f = {}
    (f["total_size"], f["magic"], f["body_crc"], f["queue_id"], f["flag"], f["queue_offset"], f["physical_offset"],
     f["sys_flag"], f["born_ts"]) = struct.unpack_from(">iiiiiqqiq", raw, 0)
    assert f["sys_flag"] & 0x30 == 0
    f["born_host"] = raw[48:56]
    f["store_ts"], = struct.unpack_from(">q", raw, 56)
    f["store_host"] = raw[64:72]
    f["reconsume_times"], f["prepared_offset"], body_len = struct.unpack_from(">iqi", raw, 72)
    pos = 88
    f["body"] = raw[pos:pos + body_len]
    pos += body_len
    tlen = raw[pos]
    f["topic"] = raw[pos + 1:pos + 1 + tlen].decode()
    pos += 1 + tlen
    plen, = struct.unpack_from(">h", raw, pos)
    f["props_raw"] = raw[pos + 2:pos + 2 + plen]
    f["props"] = dict(kv.split("\x01") for kv in f["props_raw"].decode().split("\x02") if kv)
    assert pos + 2 + plen == f["total_size"] == len(raw)
    return f


def raw_at(store, offset):
    return parse_record(bytes(store.look_message(offset).record()))


queue = queue_messages


def tx_message(i, topic="Pay", qid=1, sys_flag=0, **extra):
    return Message(topic, b"order-%d" % i, qid, tags="T%d" % (i % 2), keys=[f"k{i}"],
                   properties=dict({"PGROUP": "pg", "ID": str(i)}, **extra), flag=5, born_host="10.1.2.3:5555",
                   sys_flag=sys_flag)


class Clock:
    def __init__(self, ahead_ms=0):
        self.ahead = ahead_ms

    def __call__(self):
        return time.time_ns() // 1_000_000 + self.ahead


# -- prepare / end ---------------------------------------------------------------------------------------------

def test_half_record_is_the_bridge_s_layout(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        tx = TransactionalMessageService(store)
        r = tx.prepare(tx_message(7, sys_flag=0x4 | 0x2))    # the client's PREPARED flag (+ MULTI_TAGS)
        assert r.status is PutStatus.PUT_OK and r.queue_offset == 0
        f = raw_at(store, r.commitlog_offset)
        assert f["magic"] == -626843481 and f["physical_offset"] == r.commitlog_offset
        assert f["topic"] == HALF_TOPIC and f["queue_id"] == 0 and f["queue_offset"] == 0
        assert f["sys_flag"] == 0x2                          # resetTransactionValue(..., NOT): type bits cleared
        assert f["body"] == b"order-7" and f["body_crc"] == zlib.crc32(b"order-7") & 0x7FFFFFFF
        assert f["flag"] == 5 and f["born_host"] == bytes([10, 1, 2, 3]) + struct.pack(">i", 5555)
        assert f["prepared_offset"] == 0 and f["reconsume_times"] == 0
        p = f["props"]
        assert p["REAL_TOPIC"] == "Pay" and p["REAL_QID"] == "1" and p["TRAN_MSG"] == "true"
        assert p["PGROUP"] == "pg" and p["TAGS"] == "T1" and p["KEYS"] == "k7"
        store.wait_dispatched()
        assert store.get_messages("c", "Pay", 1, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE   # invisible
        assert [m.commitlog_offset for m in queue(store, HALF_TOPIC)] == [r.commitlog_offset]


def test_commit_re_puts_the_real_message_and_writes_the_op_record(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        tx = TransactionalMessageService(store)
        tx.prepare(tx_message(0))
        half = tx.prepare(tx_message(1, DELAY="3"))          # a transactional send is never delayed
        done = tx.end_transaction(half.commitlog_offset, "pg", True)
        assert done.status is PutStatus.PUT_OK
        c = raw_at(store, done.commitlog_offset)
        assert c["topic"] == "Pay" and c["queue_id"] == 1 and c["queue_offset"] == 0
        assert c["sys_flag"] == 0x8                          # TRANSACTION_COMMIT_TYPE
        assert c["prepared_offset"] == half.commitlog_offset
        assert c["body"] == b"order-1" and c["flag"] == 5 and c["born_host"][:4] == bytes([10, 1, 2, 3])
        h = raw_at(store, half.commitlog_offset)
        assert c["born_ts"] == h["born_ts"]
        assert not {"REAL_TOPIC", "REAL_QID", "TRAN_MSG", "DELAY"} & set(c["props"])
        assert c["props"]["PGROUP"] == "pg" and c["props"]["UNIQ_KEY"] == h["props"]["UNIQ_KEY"]
        op = raw_at(store, done.commitlog_offset + done.wrote_bytes)
        assert op["topic"] == OP_TOPIC and op["queue_id"] == 0 and op["queue_offset"] == 0
        assert op["body"] == b"1"                            # the half's queue offset, decimal
        assert op["sys_flag"] == 0 and op["prepared_offset"] == 0 and op["born_host"] == op["store_host"]
        # new Message(topic, "d", body): TAGS and WAIT "true", in Java's HashMap order (WAIT's bucket first);
        # rmqcore's encoder adds the UNIQ_KEY that Java sets only after freezing the properties string.
        assert op["props_raw"].startswith(b"WAIT\x01true\x02TAGS\x01d\x02")
        store.wait_dispatched()
        got = queue(store, "Pay", 1)
        assert [bytes(m.body) for m in got] == [b"order-1"] and got[0].tags_code == java_hash_code("T1")
        units = store.find_consume_queue(OP_TOPIC, 0).get_units(0)
        assert int(units[0]["tags_code"]) == java_hash_code("d")


def test_rollback_writes_only_the_op_record(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        tx = TransactionalMessageService(store)
        half = tx.prepare(tx_message(3))
        end_before = store.commit_log.max_offset
        assert tx.end_transaction(half.commitlog_offset, "pg", False) is None
        op = raw_at(store, end_before)
        assert op["topic"] == OP_TOPIC and op["body"] == b"0" and op["props"]["TAGS"] == "d"
        store.wait_dispatched()
        assert queue(store, "Pay", 1) == []


def test_bad_end_transaction_is_refused_and_writes_nothing(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        tx = TransactionalMessageService(store)
        plain = store.put(Message("Pay", b"x", 0))
        half = tx.prepare(tx_message(1))
        end = store.commit_log.max_offset
        with pytest.raises(TransactionError, match="producer group"):
            tx.end_transaction(half.commitlog_offset, "other", True)
        with pytest.raises(TransactionError, match="not a half message"):
            tx.end_transaction(plain.commitlog_offset, "pg", True)
        with pytest.raises(TransactionError, match="no message starts there"):
            tx.end_transaction(half.commitlog_offset + 3, "pg", True)
        assert store.commit_log.max_offset == end
        with pytest.raises(MessageIllegalError, match="PGROUP"):
            tx.prepare(Message("Pay", b"x", 0))
        assert store.commit_log.max_offset == end


# -- the check -------------------------------------------------------------------------------------------------

def test_check_pass_resolves_open_halves_through_the_checker(tmp_path):
    clock = Clock()
    asked = []

    def checker(m):
        asked.append(m.properties["ID"])
        return {"0": True, "1": False}.get(m.properties["ID"])     # 2: unknown

    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        tx = TransactionalMessageService(store, checker=checker, clock=clock)
        halves = [tx.prepare(tx_message(i)) for i in range(4)]
        tx.end_transaction(halves[3].commitlog_offset, "pg", True)   # ended by its producer: never checked
        store.wait_dispatched()
        assert check_pass(tx)["checked"] == 0                       # younger than transaction_timeout
        assert asked == []
        clock.ahead = 6001
        counts = check_pass(tx)
        assert sorted(asked) == ["0", "1", "2"]
        assert (counts["committed"], counts["rolled_back"], counts["unknown"]) == (1, 1, 1)
        store.wait_dispatched()
        assert sorted(m.properties["ID"] for m in queue(store, "Pay", 1)) == ["0", "3"]
        # Every checked half was put back with TRANSACTION_CHECK_TIMES 1; only "2" is still open.
        again = [m for m in queue(store, HALF_TOPIC) if m.queue_offset >= 4]
        assert [(m.properties["ID"], m.properties["TRANSACTION_CHECK_TIMES"]) for m in again] == \
            [("0", "1"), ("1", "1"), ("2", "1")]
        asked.clear()
        check_pass(tx)
        assert asked == ["2"]
        # Progress as Java keeps it: CID_RMQ_SYS_TRANS's consumer offsets on the half and op topics.
        text = (tmp_path / "s" / "config" / "transactionCheckOffset.json").read_text()
        table = json.loads(text.replace("{0:", '{"0":'))["offsetTable"]
        assert set(table) == {f"{HALF_TOPIC}@{SYSTEM_GROUP}", f"{OP_TOPIC}@{SYSTEM_GROUP}"}
        assert table[f"{HALF_TOPIC}@{SYSTEM_GROUP}"]["0"] == 7      # 0..3, then the copies of 0, 1 and 2 (4..6)
        assert table[f"{OP_TOPIC}@{SYSTEM_GROUP}"]["0"] == 3        # ops for 3, 4 and 5 are all behind it


def test_halves_checked_too_often_go_to_trans_check_max_time_topic(tmp_path):
    clock = Clock(ahead_ms=10_000)
    asked = []
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        tx = TransactionalMessageService(store, checker=lambda m: asked.append(1), clock=clock,
                                         transaction_check_max=3)
        tx.prepare(tx_message(9))
        store.wait_dispatched()
        for _ in range(6):
            check_pass(tx)
            store.wait_dispatched()
        assert len(asked) == 3
        moved = queue(store, CHECK_MAX_TIME_TOPIC)
        assert len(moved) == 1 and moved[0].properties["ID"] == "9"
        assert moved[0].properties["TRANSACTION_CHECK_TIMES"] == "3" and moved[0].properties["REAL_TOPIC"] == "Pay"
        assert tx.stats["discarded"] == 1 and queue(store, "Pay", 1) == []


def test_halves_nobody_can_answer_are_counted_and_reported_live_and_offline(tmp_path):
    """A checker answering NO_PRODUCER (no live producer of the half's group): counted apart from "unknown", and
    once moved to TRANS_CHECK_MAX_TIME_TOPIC the halves are what unresolved_halves reports, on the open store and
    through the offline reader alike (issue 36)."""
    from rmqcore.admin import StoreReader
    from rmqcore.broker.transaction import NO_PRODUCER, unresolved_halves
    clock = Clock(ahead_ms=10_000)
    path = str(tmp_path / "s")
    with MessageStore.open(path, cfg()) as store:
        tx = TransactionalMessageService(store, checker=lambda m: NO_PRODUCER, clock=clock, transaction_check_max=2)
        for i in range(3):
            tx.prepare(tx_message(i))
        store.wait_dispatched()
        assert unresolved_halves(store)["count"] == 0
        for _ in range(4):
            check_pass(tx)
            store.wait_dispatched()
        assert tx.stats["no_producer"] == 6 and tx.stats["unknown"] == 0 and tx.stats["discarded"] == 3
        live = unresolved_halves(store)
        limited = unresolved_halves(store, limit=2)
    assert live == {"topic": CHECK_MAX_TIME_TOPIC, "count": 3, "read": 3,
                    "producer_groups": {"pg": {"halves": 3, "topics": ["Pay"]}}}
    assert limited["count"] == 3 and limited["read"] == 2
    with StoreReader(path, cfg()) as r:
        assert unresolved_halves(r) == live


def test_op_records_in_5x_batched_form_are_honoured(tmp_path):
    clock = Clock(ahead_ms=10_000)
    asked = []
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        tx = TransactionalMessageService(store, checker=lambda m: asked.append(m.properties["ID"]), clock=clock)
        for i in range(4):
            tx.prepare(tx_message(i))
        # 5.x's TransactionalOpBatchService: one op record for many halves, offsets joined by ",".
        store.put(Message(OP_TOPIC, b"0,2,", 0, properties={"TAGS": "d"}))
        store.wait_dispatched()
        check_pass(tx)
        assert sorted(asked) == ["1", "3"]
        assert tx.offsets.query_offset(SYSTEM_GROUP, OP_TOPIC, 0) == 1


def test_twice_ended_halves_and_foreign_op_tags_do_not_stall_the_op_progress(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        tx = TransactionalMessageService(store, checker=lambda m: True, clock=Clock(10_000))
        h = [tx.prepare(tx_message(i)) for i in range(3)]
        tx.end_transaction(h[0].commitlog_offset, "pg", False)
        tx.end_transaction(h[0].commitlog_offset, "pg", False)            # op 1: the same half again
        store.put(Message(OP_TOPIC, b"1", 0, properties={"TAGS": "x"}))   # op 2: not a remove tag
        tx.end_transaction(h[1].commitlog_offset, "pg", False)            # op 3
        tx.end_transaction(h[2].commitlog_offset, "pg", False)            # op 4
        store.wait_dispatched()
        counts = check_pass(tx)
        assert counts["checked"] == 0 and counts["skipped"] == 3
        assert tx.offsets.query_offset(SYSTEM_GROUP, HALF_TOPIC, 0) == 3
        assert tx.offsets.query_offset(SYSTEM_GROUP, OP_TOPIC, 0) == 5


def test_offsets_go_to_a_given_offset_store(tmp_path):
    class Offsets:                       # the Broker's query_offset / commit_offset contract (issue 14)
        def __init__(self):
            self.t = {}

        def query_offset(self, group, topic, qid):
            return self.t.get((group, topic, qid), -1)

        def commit_offset(self, group, topic, qid, offset):
            self.t[(group, topic, qid)] = offset

    offsets = Offsets()
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        tx = TransactionalMessageService(store, checker=lambda m: True, clock=Clock(10_000), offset_store=offsets)
        tx.prepare(tx_message(1))
        store.wait_dispatched()
        check_pass(tx)
        assert offsets.t[(SYSTEM_GROUP, HALF_TOPIC, 0)] == 1
    assert not (tmp_path / "s" / "config" / "transactionCheckOffset.json").exists()


def test_background_check_service(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        tx = TransactionalMessageService(store, checker=lambda m: True, clock=Clock(10_000),
                                         transaction_check_interval=20)
        tx.prepare(tx_message(5))
        tx.start()
        try:
            g = store.get_messages("c", "Pay", 1, 0, 1, wait=5.0)
            assert g.status is GetStatus.FOUND and g.messages[0].properties["ID"] == "5"
        finally:
            tx.shutdown()
        assert tx.stats["committed_by_check"] == 1


def test_a_commit_whose_op_record_was_cut_off_is_not_committed_again(tmp_path):
    """end_transaction writes the committed message, then the op record; a process that dies in between leaves the
    half open. The next check finds the commit in the commitlog (its preparedTransactionOffset names the half),
    writes the op record and asks nobody; a half whose commit is not stored is still asked about."""
    path = str(tmp_path / "s")

    class Killed(BaseException):
        pass

    with MessageStore.open(path, cfg()) as store:
        tx = TransactionalMessageService(store)
        h = [tx.prepare(tx_message(i)) for i in range(3)]

        def die(half):
            raise Killed

        tx._put_op = die
        for r in h[:2]:
            with pytest.raises(Killed):
                tx.end_transaction(r.commitlog_offset, "pg", True)
        store.wait_dispatched()
        assert [m.properties["ID"] for m in queue(store, "Pay", 1)] == ["0", "1"]
        assert queue(store, OP_TOPIC) == []
    asked = []
    with MessageStore.open(path, cfg()) as store:
        tx = TransactionalMessageService(store, checker=lambda m: asked.append(m.properties["ID"]) or True,
                                         clock=Clock(10_000))
        check_pass(tx)
        assert asked == ["2"]
        assert tx.stats["recovered_commits"] == 2
        store.wait_dispatched()
        assert sorted(m.properties["ID"] for m in queue(store, "Pay", 1)) == ["0", "1", "2"]
        assert sorted(int(bytes(m.body)) for m in queue(store, OP_TOPIC)) == [0, 1, 3]   # 3: the copy of 2
        asked.clear()
        check_pass(tx)
        assert asked == []


def test_a_commit_cut_off_before_its_op_record_ends_the_check_immunity_copy_too(tmp_path):
    """A half with CHECK_IMMUNITY_TIME_IN_SECONDS is passed by the check and put back as a copy naming it
    (TRAN_PREPARED_QUEUE_OFFSET), which the original's op record ends while the immunity lasts. The producer's
    commit of the original, cut off before its op record, still counts after the restart: the op record is
    written and the copy is not asked about."""
    path = str(tmp_path / "s")

    class Killed(BaseException):
        pass

    asked = []
    clock = Clock(ahead_ms=8_000)                  # older than transaction_timeout, within its 60 s immunity
    with MessageStore.open(path, cfg()) as store:
        tx = TransactionalMessageService(store, checker=lambda m: asked.append(m.properties["ID"]) or True,
                                         clock=clock)
        r = tx.prepare(tx_message(1, CHECK_IMMUNITY_TIME_IN_SECONDS="60"))
        store.wait_dispatched()
        check_pass(tx)
        copies = queue(store, HALF_TOPIC)
        assert asked == [] and [m.properties.get("TRAN_PREPARED_QUEUE_OFFSET") for m in copies] == [None, "0"]
        assert tx.offsets.query_offset(SYSTEM_GROUP, HALF_TOPIC, 0) == 1      # the original is passed

        def die(half):
            raise Killed

        tx._put_op = die
        with pytest.raises(Killed):
            tx.end_transaction(r.commitlog_offset, "pg", True)
    with MessageStore.open(path, cfg()) as store:
        tx = TransactionalMessageService(store, checker=lambda m: asked.append(m.properties["ID"]) or True,
                                         clock=clock)
        check_pass(tx)
        assert tx.stats["recovered_commits"] == 1 and asked == []
        store.wait_dispatched()
        assert [m.properties["ID"] for m in queue(store, "Pay", 1)] == ["1"]
        assert [int(bytes(m.body)) for m in queue(store, OP_TOPIC)] == [0]


# -- SIGKILL ---------------------------------------------------------------------------------------------------

CHILD = r'''
import json, sys, time
spec = json.loads(sys.argv[1])
sys.path.insert(0, spec["src"])
from rmqcore import Message, MessageStore, StoreConfig
from rmqcore.broker.transaction import TransactionalMessageService
store = MessageStore.open(spec["path"], StoreConfig(**spec["config"]))
def checker(m):
    time.sleep(0.001)
    print("#ASK", m.properties["ID"], flush=True)
    return int(m.properties["ID"]) % 2 == 0
tx = TransactionalMessageService(store, checker=checker, offset_persist_interval=100,
                                 clock=lambda: time.time_ns() // 1_000_000 + 60_000)
print("#READY", flush=True)
if spec["mode"] == "produce":
    i = spec["first"]
    while True:
        r = tx.prepare(Message("Pay", b"%d" % i, i % 2, properties={"PGROUP": "pg", "ID": str(i)}))
        print("#HALF", i, r.commitlog_offset, flush=True)
        tx.end_transaction(r.commitlog_offset, "pg", i % 2 == 0)
        print("#END", i, flush=True)
        i += 1
else:
    while True:
        tx.check_once()
        print("#PASS", flush=True)
'''


def run_child(path, mode, kill_after, first=0, count_from=b"#READY"):
    """SIGKILL the child ``kill_after`` s after it printed its first ``count_from`` line (the timer starts at the
    child's first real step, so a slow machine's start-up does not eat it)."""
    spec = dict(src=SRC, path=path, config=CONF, mode=mode, first=first)
    err = tempfile.TemporaryFile()
    p = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(spec)], stdout=subprocess.PIPE, stderr=err)
    head = []
    for line in p.stdout:
        head.append(line)
        if line.startswith(count_from):
            break
    assert head and head[0].startswith(b"#READY"), err.seek(0) or err.read().decode()
    time.sleep(kill_after)
    p.send_signal(signal.SIGKILL)
    out, _ = p.communicate()
    return (b"".join(head) + out).decode().split("\n")[:-1]   # complete lines only: the kill may tear the last one


def drain_checks(path, crashed=True):
    """Reopen after the kill and let the check service (the producer answers by parity) end every open half."""
    with MessageStore.open(path, cfg()) as store:
        assert store.runtime_info()["recovery"]["last_exit_ok"] is not crashed
        tx = TransactionalMessageService(store, checker=lambda m: int(m.properties["ID"]) % 2 == 0,
                                         clock=Clock(120_000))
        for _ in range(10):
            store.wait_dispatched()
            if check_pass(tx)["checked"] == 0 and \
                    tx.offsets.query_offset(SYSTEM_GROUP, HALF_TOPIC, 0) == store.max_offset(HALF_TOPIC, 0):
                break
        store.wait_dispatched()
        halves = {m.properties["ID"] for m in queue(store, HALF_TOPIC)}
        delivered = Counter(m.properties["ID"] for q in (0, 1) for m in queue(store, "Pay", q))
    return halves, delivered


@pytest.mark.parametrize("seed", [3, 4])
def test_sigkill_between_half_and_end(tmp_path, seed):
    path = str(tmp_path / "s")
    lines = run_child(path, "produce", random.Random(seed).uniform(0.3, 0.9), count_from=b"#END")
    halves_acked = {int(line.split()[1]) for line in lines if line.startswith("#HALF")}
    ended = {int(line.split()[1]) for line in lines if line.startswith("#END")}
    assert len(ended) > 10
    halves, delivered = drain_checks(path)
    stored = {int(i) for i in halves}
    assert halves_acked <= stored
    assert {int(i) for i in delivered} == {i for i in stored if i % 2 == 0}    # no commit lost, no rollback
    assert {i for i in ended if i % 2 == 0} <= {int(i) for i in delivered}
    dups = sum(c - 1 for c in delivered.values())
    # A kill between the committed message and its op record leaves the half open; the check finds the commit in
    # the commitlog (TransactionalMessageService.recover) instead of asking the producer again.
    assert dups == 0
    print(f"seed {seed}: {len(stored)} halves, {len(ended)} ended before the kill, {dups} duplicate commits")


@pytest.mark.parametrize("seed", [5, 6])
def test_sigkill_during_a_check_pass(tmp_path, seed):
    path = str(tmp_path / "s")
    n = 400
    with MessageStore.open(path, cfg()) as store:
        tx = TransactionalMessageService(store)
        for i in range(n):
            tx.prepare(Message("Pay", b"%d" % i, i % 2, properties={"PGROUP": "pg", "ID": str(i)}))
        # a few ended by their producers before the check: never checked, never re-delivered
        for m in queue(store, HALF_TOPIC)[:10]:
            tx.end_transaction(m.commitlog_offset, "pg", int(m.properties["ID"]) % 2 == 0)
    # killed inside the first pass: 0.05-0.25 s after its first question, where each of the ~390 questions
    # sleeps 1 ms (the timer starts at that question, whatever a slow machine spent opening the store)
    lines = run_child(path, "check", random.Random(seed).uniform(0.05, 0.25), count_from=b"#ASK")
    assert "#PASS" not in lines
    asked = {line.split()[1] for line in lines if line.startswith("#ASK")}
    assert asked
    with MessageStore.open(path, cfg()) as store:         # the copies the killed pass put back (offsets >= n)
        assert store.runtime_info()["recovery"]["last_exit_ok"] is False
        copied = {m.properties["ID"] for m in queue(store, HALF_TOPIC) if m.queue_offset >= n}
    assert asked <= copied
    halves, delivered = drain_checks(path, crashed=False)
    assert {int(i) for i in halves} == set(range(n))
    assert {int(i) for i in delivered} == set(range(0, n, 2))    # every commit there, no rollback delivered
    dups = {i for i, c in delivered.items() if c > 1}
    # The halves the killed pass put back after its last persisted progress (up to 100 ms of them) are not asked
    # about again: their copies later in the half queue carry the check on (TransactionalMessageService.recover);
    # RocketMQ checks the original again and a producer answering "commit" commits it twice.
    assert not dups
    print(f"seed {seed}: {len(copied)} halves put back before the kill, {len(dups)} duplicate commits")
