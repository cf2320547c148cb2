"""Transactional messages: RocketMQ's TransactionalMessageBridge, TransactionalMessageServiceImpl, the
EndTransactionProcessor's commit / rollback and the TransactionalMessageCheckService, over a MessageStore.

A prepared (half) message is stored in RMQ_SYS_TRANS_HALF_TOPIC queue 0 with its real topic and queue in
REAL_TOPIC / REAL_QID and its transaction type reset to NOT (so it has a consume-queue unit, invisible to consumers
of the real topic). Ending the transaction writes an op record to RMQ_SYS_TRANS_OP_HALF_TOPIC (same queue id as the
half: 0), body = the half message's queue offset as decimal text, tag "d" — 4.9.7's one-offset form, which 5.x
reads too; 5.x's batched bodies ("12,13,") are read as well. A commit first re-puts the real message with the
COMMIT transaction type and the half's commitlog offset as its preparedTransactionOffset.

The check pass walks the half queue from the progress of the system group CID_RMQ_SYS_TRANS (MixAll's
CID_SYS_RMQ_TRANS), skips halves the op queue marks done, asks ``checker(message_ext)`` about halves older than
``transaction_timeout``: True commits, False rolls back, None leaves it open. As Java, a half it asks about is
first re-put at the end of the half queue with TRANSACTION_CHECK_TIMES + 1 (the answer ends that copy), and past
``transaction_check_max`` checks (or older than the store's file_reserved_time) it is moved to
TRANS_CHECK_MAX_TIME_TOPIC, as 5.x's DefaultTransactionalMessageCheckListener does. The check progress is kept, as
Java keeps it, as consumer offsets of CID_RMQ_SYS_TRANS on the half and op topics: in the Broker's consumer offset
manager when one is given (``offset_store`` with ``query_offset`` / ``commit_offset``), else in this service's own
``config/transactionCheckOffset.json`` (consumerOffset.json's shape, "topic@group" keys).

Differences from Java, on purpose:
- The checker is called in the check pass (Java sends the check to the producer and its answer comes back later
  as an END_TRANSACTION request); its answer is applied at once to the re-put copy, as that request would.
- A check pass never reads past the half queue's end as it was when the pass began (Java stops at the first half
  stored after the pass began: the same point with a real clock, and still right with an injected one).
- Before check progress is persisted, the commitlog is flushed past the re-puts it relies on.
- Before the first check pass, halves past the persisted progress that were committed (the op record cut off by a
  kill) or put back are closed with the op record they lacked (``recover``): Java asks about them again, and a
  producer answering "commit" commits them twice.
- The committed record's properties no longer hold REAL_TOPIC, REAL_QID and TRAN_MSG, as EndTransactionProcessor
  clears them from the message it builds (Java freezes the properties string first, so a Java broker's committed
  record still carries them in its bytes).
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time

import numpy as np

from .._schedule import FACT_COLUMNS, FACT_PHYS, FACT_PREPARED, FACT_SIZE, PROVENANCE_COMMITTED, record_keys
from ..errors import MessageIllegalError, RmqStoreError, StoreClosedError, StoreLayoutError
from ..schedule import (fact_hashes, flush_past, load_config_file, read_fastjson, read_units, same_message,
                        scan_commitlog, write_config_file)
from ..message import Message
from ..status import GetStatus, PutStatus

log = logging.getLogger(__name__)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"            # TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"           # TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"  # TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC (5.x)
SYSTEM_GROUP = "CID_RMQ_SYS_TRANS"                 # MixAll.CID_SYS_RMQ_TRANS
REMOVE_TAG = "d"                                    # TransactionalMessageUtil.REMOVETAG
OFFSET_SEPARATOR = ","                              # 5.x's batched op bodies
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_DELAY = "DELAY"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
OFFSET_FILE = "transactionCheckOffset.json"

MAX_PROCESS_TIME_LIMIT_MS = 60000      # TransactionalMessageServiceImpl.MAX_PROCESS_TIME_LIMIT
UNRESOLVED_READ_LIMIT = 10_000         # halves of CHECK_MAX_TIME_TOPIC read to name their producer groups


class _NoProducer:
    """What a checker answers when no live producer of the half's group can be asked (RocketMQ's check finds no
    channel of PGROUP in ProducerManager and only logs): unknown, and counted apart so it can be reported."""

    def __repr__(self) -> str:
        return "NO_PRODUCER"


NO_PRODUCER = _NoProducer()
MAX_RETRY_COUNT_WHEN_HALF_NULL = 1
OP_PULL_BATCH = 32


class TransactionError(RmqStoreError, ValueError):
    """An end_transaction the broker refuses (EndTransactionProcessor's checkPrepareMessage): nothing written."""


def reset_transaction_value(sys_flag: int, tran_type: int) -> int:
    """MessageSysFlag.resetTransactionValue."""
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | tran_type


def _java_long(text):
    # TransactionalMessageServiceImpl.getLong: Long.parseLong, -1 on error.
    if isinstance(text, str) and re.fullmatch(r"[+-]?[0-9]+", text):
        v = int(text)
        if -(1 << 63) <= v < (1 << 63):
            return v
    return -1


def _java_int(text):
    v = _java_long(text)
    return v if -(1 << 31) <= v < (1 << 31) else -1


class _OffsetFile:
    """Consumer offsets of the system group when no Broker offset manager is given: consumerOffset.json's shape
    (``{"offsetTable":{"topic@group":{0:12}}}``) in config/transactionCheckOffset.json, written atomically."""

    def __init__(self, path: str):
        self.path = path
        self.table: dict[str, dict[int, int]] = {}
        loaded = load_config_file(path, self._decode)
        if loaded:
            self.table = loaded

    @staticmethod
    def _decode(text, path):
        data = read_fastjson(text, path)
        table = data.get("offsetTable") if isinstance(data, dict) else None
        if not isinstance(table, dict):
            raise StoreLayoutError(f"{path}: offsetTable must be an object")
        out = {}
        for key, queues in table.items():
            if not isinstance(queues, dict) or "@" not in key:
                raise StoreLayoutError(f"{path}: offsetTable[{key!r}] must map queue ids to offsets")
            row = {}
            for q, off in queues.items():
                if isinstance(off, bool) or not isinstance(off, int) or off < 0 or not str(q).lstrip("-").isdigit():
                    raise StoreLayoutError(f"{path}: offsetTable[{key!r}][{q}] = {off!r} is not an offset")
                row[int(q)] = off
            out[key] = row
        return out

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self.table.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(f"{topic}@{group}", {})[queue_id] = offset

    def persist(self) -> None:
        if not self.table and not os.path.exists(self.path):
            return
        parts = []
        for key, row in sorted(self.table.items()):
            inner = ",".join(f"{q}:{o}" for q, o in sorted(row.items()))
            parts.append(f'"{key}":{{{inner}}}')
        write_config_file(self.path, '{"offsetTable":{' + ",".join(parts) + "}}")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionalMessageService:
    """Half messages, commit / rollback, and the check service over ``store`` (a MessageStore)."""

    def __init__(self, store, *, checker=None, transaction_timeout: int = 6000, transaction_check_max: int = 15,
                 transaction_check_interval: int = 60000, clock=None, offset_store=None,
                 offset_persist_interval: int = 5000):
        for name, v in (("transaction_timeout", transaction_timeout), ("transaction_check_max",
                        transaction_check_max), ("transaction_check_interval", transaction_check_interval)):
            if v <= 0:
                raise ValueError(f"{name} must be > 0, got {v}")
        self.store = store
        self.checker = checker
        self.transaction_timeout = transaction_timeout
        self.transaction_check_max = transaction_check_max
        self.transaction_check_interval = transaction_check_interval
        self.clock = clock or _now_ms
        self._own_offsets = offset_store is None
        # Our own offsets file is written at the end of every pass and, inside a long pass, every
        # offset_persist_interval ms (ConsumerOffsetManager's flushConsumerOffsetInterval, 5 s): a crash re-checks
        # (and a producer answering "commit" re-commits) only the halves resolved since.
        self.offset_persist_interval = offset_persist_interval
        self._last_offset_persist = time.monotonic()
        self.offsets = offset_store if offset_store is not None else _OffsetFile(
            os.path.join(store.path, "config", OFFSET_FILE))
        self._end_lock = threading.Lock()
        self._check_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = None
        self._last_put_end = 0
        self._recovered = False
        self.stats = {"checked": 0, "committed_by_check": 0, "rolled_back_by_check": 0, "unknown": 0,
                      "no_producer": 0, "discarded": 0, "passes": 0, "recovered_commits": 0,
                      "recovered_put_backs": 0}
        self._no_producer_groups: dict[str, int] = {}       # this pass: producer group -> halves nobody could answer

    # -- prepare / end ------------------------------------------------------------------------------------------

    def prepare(self, msg: Message):
        """Store ``msg`` as a half message (TransactionalMessageBridge.parseHalfMessageInner) → its PutResult.

        Needs the PGROUP property (the producer group that may end it). TRAN_MSG is set to "true" as the client
        sets it; a DELAY property is dropped, as the Java producer drops it from transactional sends.
        """
        props = msg.properties
        group = props.get(PROPERTY_PRODUCER_GROUP)
        if not group:
            raise MessageIllegalError(f"properties[{PROPERTY_PRODUCER_GROUP}]",
                                      "a transactional message needs its producer group", None)
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props.pop(PROPERTY_DELAY, None)
        self._check_later_puts(msg)
        props[PROPERTY_REAL_TOPIC] = msg.topic
        props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
        msg.sys_flag = reset_transaction_value(msg.sys_flag, TRANSACTION_NOT_TYPE)
        msg.topic = HALF_TOPIC
        msg.queue_id = 0
        return self._put(msg)

    def _check_later_puts(self, msg) -> None:
        """Refuse now (MessageIllegalError naming the field) a transactional message whose commit, or whose half
        put back by the check, the store would refuse later: the half would be acknowledged and then never
        become visible (issue 28). ``msg`` is the producer's message before it becomes a half."""
        props = msg.properties
        committed = {k: v for k, v in props.items() if k != PROPERTY_TRANSACTION_PREPARED}
        self.store.check_put(Message(msg.topic, msg.body, msg.queue_id, properties=committed, flag=msg.flag,
                                     sys_flag=reset_transaction_value(msg.sys_flag, TRANSACTION_COMMIT_TYPE),
                                     born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                                     reconsume_times=msg.reconsume_times))
        # The half as the check service puts it back at the latest: its counters at their widest.
        half = dict(props, **{PROPERTY_REAL_TOPIC: msg.topic, PROPERTY_REAL_QUEUE_ID: str(msg.queue_id),
                              PROPERTY_TRANSACTION_CHECK_TIMES: str((1 << 31) - 1),
                              PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET: str((1 << 63) - 1)})
        self.store.check_delivery(Message(HALF_TOPIC, msg.body, 0, properties=half, flag=msg.flag,
                                          sys_flag=reset_transaction_value(msg.sys_flag, TRANSACTION_NOT_TYPE),
                                          born_timestamp=msg.born_timestamp, born_host=msg.born_host),
                                  "transaction check")

    def _put(self, msg):
        r = self.store.put(msg)
        if r.status is PutStatus.PUT_OK:
            self._last_put_end = max(self._last_put_end, r.commitlog_offset + r.wrote_bytes)
        return r

    def _put_committed(self, msg):
        r = self.store.put_delivered([msg])[0]
        if r.status is PutStatus.PUT_OK:
            self._last_put_end = max(self._last_put_end, r.commitlog_offset + r.wrote_bytes)
        return r

    def _half_at(self, commit_log_offset: int):
        half = self.store.look_message(commit_log_offset)
        if half is None:
            raise TransactionError(f"commit_log_offset {commit_log_offset}: no message starts there "
                                   "(Find prepared transaction message failed)")
        if half.topic != HALF_TOPIC:
            raise TransactionError(f"commit_log_offset {commit_log_offset}: a message of {half.topic!r}, not a "
                                   "half message")
        return half

    def end_transaction(self, commit_log_offset: int, producer_group: str, commit: bool):
        """EndTransactionProcessor for the half message at ``commit_log_offset`` (its send's PutResult gives it):
        commit re-puts the real message and returns its PutResult; rollback returns None. Both then write the op
        record marking the half done. Raises TransactionError (nothing written) for an offset that holds no half
        message or a producer group that is not the half's."""
        half = self._half_at(commit_log_offset)
        props = half.properties
        if props.get(PROPERTY_PRODUCER_GROUP) != producer_group:
            raise TransactionError(f"producer_group {producer_group!r} is not the half message's "
                                   f"{props.get(PROPERTY_PRODUCER_GROUP)!r} (The producer group wrong)")
        return self._end(half, commit)

    def _end(self, half, commit: bool):
        result = None
        if commit:
            # The real message goes through the store's topic rule, not the broker's (as EndTransactionProcessor's
            # sendFinalMessage puts it through the store): a half another broker stored for a topic its send path
            # took (支付) commits; a half this broker took was checked against the broker's rule at prepare.
            result = self._put_committed(self._committed_message(half))
            if result.status not in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT):
                # sendFinalMessage failed: no op record, the half stays open for the check service.
                return result
        self._put_op(half)
        return result

    @staticmethod
    def _committed_message(half) -> Message:
        """endMessageTransaction + the processor's changes: real topic and queue, COMMIT type, the half's offset
        as preparedTransactionOffset; REAL_TOPIC, REAL_QID and TRAN_MSG cleared."""
        props = dict(half.properties)
        topic = props.pop(PROPERTY_REAL_TOPIC, None)
        qid = props.pop(PROPERTY_REAL_QUEUE_ID, None)
        props.pop(PROPERTY_TRANSACTION_PREPARED, None)
        queue_id = _java_int(qid)
        if topic is None or queue_id < 0:
            raise TransactionError(f"half message at {half.commitlog_offset} has no usable REAL_TOPIC / REAL_QID "
                                   f"({topic!r}, {qid!r})")
        return Message(topic, half.body, queue_id, properties=props, flag=half.flag,
                       sys_flag=reset_transaction_value(half.sys_flag, TRANSACTION_COMMIT_TYPE),
                       born_timestamp=half.born_timestamp, born_host=half.born_host,
                       reconsume_times=half.reconsume_times, prepared_transaction_offset=half.commitlog_offset)

    def _put_op(self, half):
        """addRemoveTagInTransactionOp: new Message(OP_TOPIC, "d", queueOffset) in the op queue of the half's
        queue. Java's op properties are what that constructor sets, in its HashMap's order: WAIT "true", TAGS."""
        op = Message(OP_TOPIC, str(half.queue_offset).encode(), half.queue_id,
                     properties={PROPERTY_WAIT_STORE_MSG_OK: "true", "TAGS": REMOVE_TAG})
        r = self._put(op)
        if r.status is not PutStatus.PUT_OK:
            log.error("op record for half %d (queue offset %d) not written: %s", half.commitlog_offset,
                      half.queue_offset, r.status.name)
        return r

    # -- the check --------------------------------------------------------------------------------------------

    def _pull(self, topic, queue_id, offset, n):
        g = self.store.get_messages(SYSTEM_GROUP, topic, queue_id, offset, n)
        st = g.status
        if st is GetStatus.FOUND:
            return "FOUND", g
        if st is GetStatus.NO_MATCHED_MESSAGE:
            return "NO_MATCHED_MSG", g
        if st in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.OFFSET_OVERFLOW_ONE):
            return "NO_NEW_MSG", g
        return "OFFSET_ILLEGAL", g

    def _fetch_offset(self, topic, queue_id):
        off = self.offsets.query_offset(SYSTEM_GROUP, topic, queue_id)
        if off == -1:
            # getMinOffsetInQueue; Java's findConsumeQueue creates a missing queue, so that is 0.
            off = max(0, self.store.min_offset(topic, queue_id))
        return off

    def _fill_op_remove_map(self, remove, op_halves, op_queue, op_offset, mini_offset, done_ops):
        """fillOpRemoveMap: read up to 32 op records from ``op_offset``; halves below ``mini_offset`` are done
        already (their op offsets go to ``done_ops``); the others go to ``remove`` (half offset → op offset)."""
        status, g = self._pull(OP_TOPIC, op_queue, op_offset, OP_PULL_BATCH)
        if status in ("OFFSET_ILLEGAL", "NO_MATCHED_MSG"):
            (log.debug if g.status is GetStatus.NO_MATCHED_LOGIC_QUEUE else log.warning)("op queue %d: offset %d is illegal (%s), moving to %d", op_queue, op_offset, g.status.name,
                        g.next_begin_offset)
            self.offsets.commit_offset(SYSTEM_GROUP, OP_TOPIC, op_queue, g.next_begin_offset)
            return status, g, None
        if status == "NO_NEW_MSG":
            return status, g, None
        ops = []
        for op in g.messages:
            ops.append((op.queue_offset, op.born_timestamp))
            if op.tags != REMOVE_TAG:       # 5.x: logged and counted done, so the op progress moves on
                log.error("op record at %d has tag %r, not %r", op.commitlog_offset, op.tags, REMOVE_TAG)
                done_ops.add(op.queue_offset)
                continue
            halves = [_java_long(p) for p in bytes(op.body).decode("utf-8", "replace").split(OFFSET_SEPARATOR)
                      if p]
            pending = 0
            for h in halves:
                if h < mini_offset:
                    continue
                if h in remove:
                    # A second op for the same half (it was ended twice): the first op is done with it. Java
                    # overwrites the entry and its op progress then never passes the first op.
                    self._mark_removed(remove, op_halves, done_ops, h)
                remove[h] = op.queue_offset
                pending += 1
            if pending:
                op_halves[op.queue_offset] = op_halves.get(op.queue_offset, 0) + pending
            else:
                done_ops.add(op.queue_offset)
        return status, g, ops

    @staticmethod
    def _mark_removed(remove, op_halves, done_ops, half_offset):
        op_off = remove.pop(half_offset)
        left = op_halves.get(op_off, 1) - 1
        if left <= 0:
            op_halves.pop(op_off, None)
            done_ops.add(op_off)
        else:
            op_halves[op_off] = left

    @staticmethod
    def _calculate_op_offset(done_ops, old):
        new = old
        for o in sorted(done_ops):
            if o == new:
                new += 1
            elif o > new:
                break
        return new

    # -- what was done after the last persisted check progress ---------------------------------------------------

    def recover(self) -> int:
        """Close the halves that were ended or put back after the check progress was last persisted, by writing
        the op record the kill cut off; the first check pass runs it (once per service). Returns how many op
        records it wrote.

        RocketMQ persists the check progress (CID_RMQ_SYS_TRANS's offsets) every few seconds and writes the op
        record after the committed message, so a kill between them, or after a pass put halves back, makes the
        next pass ask about those halves again, and a producer answering "commit" commits them twice. What the
        commitlog holds says otherwise, in RocketMQ's own formats:
        - a committed message carries its half's commitlog offset as its preparedTransactionOffset: a half with
          no op record whose commit is stored (same body, born time and host, flag, UNIQ_KEY, in the half's
          REAL_TOPIC / REAL_QID) was ended;
        - a half put back (putBackHalfMsgQueue) has its copy later in the half queue (the same message with
          TRANSACTION_CHECK_TIMES one higher): the copy carries the check on, the original is done.
        A check-immunity copy (TRAN_PREPARED_QUEUE_OFFSET names its original, and an op record for the original
        ends it while its immunity lasts) is never taken for a put-back; the original it names gets its op record
        when its commit is stored, even if the progress passed it."""
        written = 0
        for queue_id in self.store.topics().get(HALF_TOPIC, []):
            try:
                written += self._recover_queue(queue_id)
            except StoreClosedError:
                raise
            except (RmqStoreError, OSError) as e:
                # Finding them only spares second commits: without it the pass asks as RocketMQ's does.
                log.error("half queue %d: halves ended after the check progress not looked for (%s)", queue_id, e)
        if written:
            self.store.wait_dispatched()       # the pass reads the op queue: the new op records must be in it
        self._recovered = True
        return written

    def _recover_queue(self, queue_id) -> int:
        store = self.store
        cq = store.find_consume_queue(HALF_TOPIC, queue_id, create=False)
        if cq is None:
            return 0
        half_offset = max(self._fetch_offset(HALF_TOPIC, queue_id), cq.min_offset_in_queue)
        end = cq.max_offset_in_queue
        if half_offset >= end:
            return 0
        # The halves the op queue marks done (what fillOpRemoveMap would read, all of it).
        closed = set()
        off = self._fetch_offset(OP_TOPIC, queue_id)
        while True:
            g = store.get_messages(SYSTEM_GROUP, OP_TOPIC, queue_id, off, 1024)
            if g.status is not GetStatus.FOUND:
                break
            for op in g.messages:
                if op.tags == REMOVE_TAG:
                    closed.update(_java_long(p) for p in bytes(op.body).decode("utf-8", "replace")
                                  .split(OFFSET_SEPARATOR) if p)
            off = g.next_begin_offset
        # Per half from the progress on: its record's offset and the hash of what a copy keeps (16 bytes a half,
        # read in steps: a long unchecked backlog is not held as whole facts).
        files = store.commit_log.mapped_file_queue.mapped_files
        phys_parts, hash_parts = [], []
        step = 1 << 16
        for first in range(half_offset, end, step):
            units = read_units(cq, first, min(step, end - first))
            if units is None:
                break
            facts = np.empty((len(units), FACT_COLUMNS), np.int64)
            record_keys(units.view(np.uint8), files, store.config.mapped_file_size_commit_log, facts)
            phys_parts.append(np.where(facts[:, FACT_SIZE] >= 0, facts[:, FACT_PHYS], -1))
            hash_parts.append(fact_hashes(facts))
        if not phys_parts:
            return 0
        phys_of = np.concatenate(phys_parts)
        hashes = np.concatenate(hash_parts)
        n = len(phys_of)
        offsets = np.arange(half_offset, half_offset + n)
        readable = phys_of >= 0
        is_open = readable & ~np.isin(offsets, np.fromiter(closed, np.int64, len(closed)))
        if not is_open.any():
            return 0
        look = store.commit_log.look_message
        written = 0
        # Put back: a later half with the same hash of what a copy keeps, then compared in full.
        order = np.lexsort((offsets, hashes))
        later = np.zeros(n, bool)
        same_next = (hashes[order][1:] == hashes[order][:-1]) & readable[order][1:]
        later[order[:-1][same_next]] = True
        nxt = np.full(n, -1, np.int64)
        nxt[order[:-1]] = order[1:]
        still_open = []
        for i in np.flatnonzero(is_open).tolist():
            if later[i]:
                half, copy = look(int(phys_of[i])), look(int(phys_of[nxt[i]]))
                if self._is_put_back(half, copy):
                    log.warning("half %d (queue %d offset %d) was put back as offset %d after the check progress "
                                "was persisted: marked done", half.commitlog_offset, queue_id, half.queue_offset,
                                copy.queue_offset)
                    if self._put_op(half).status is PutStatus.PUT_OK:
                        written += 1
                        self.stats["recovered_put_backs"] += 1
                    continue
            still_open.append(i)
        if not still_open:
            return written
        # Ended: a committed message naming the half, stored after it. A check-immunity copy (its
        # TRAN_PREPARED_QUEUE_OFFSET names the original, which the progress may have passed) is ended by the op
        # record of that original: a commit of the original counts for it.
        by_phys = {int(phys_of[i]): i for i in still_open}
        for i in still_open:
            h = look(int(phys_of[i]))
            text = h.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET) if h is not None else None
            original = _java_long(text) if text is not None else -1
            if original < 0 or original in closed or original >= half_offset:
                continue           # none, ended already, or among the halves looked at above
            units = cq.get_units(original, 1)
            if units is not None and len(units):
                by_phys.setdefault(int(units["offset"][0]), -1)
        for rows in scan_commitlog(store, min(by_phys), PROVENANCE_COMMITTED):
            for phys, prepared in rows[:, [FACT_PHYS, FACT_PREPARED]].tolist():
                if prepared not in by_phys or prepared >= phys:
                    continue
                half, committed = look(prepared), look(phys)
                props = half.properties if half is not None else {}
                topic = props.get(PROPERTY_REAL_TOPIC)
                if (half is None or half.topic != HALF_TOPIC or half.queue_id != queue_id or topic is None
                        or not same_message(committed, half, topic, _java_int(props.get(PROPERTY_REAL_QUEUE_ID)))):
                    continue
                del by_phys[prepared]
                log.warning("half %d (queue %d offset %d) was committed at %d but its op record is missing: "
                            "written now", prepared, queue_id, half.queue_offset, phys)
                if self._put_op(half).status is PutStatus.PUT_OK:
                    written += 1
                    self.stats["recovered_commits"] += 1
            if not by_phys:
                break
        return written

    @staticmethod
    def _is_put_back(half, copy) -> bool:
        """``copy`` is ``half`` as renewHalfMessageInner re-puts it: the same message and destination, one more
        check, no check-immunity link."""
        if half is None or copy is None or copy.queue_offset <= half.queue_offset:
            return False
        hp, cp = half.properties, copy.properties
        if PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET in hp or PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET in cp:
            return False
        times = _java_int(hp.get(PROPERTY_TRANSACTION_CHECK_TIMES, "0"))
        return (same_message(copy, half, half.topic, half.queue_id)
                and _java_int(cp.get(PROPERTY_TRANSACTION_CHECK_TIMES)) == times + 1
                and all(cp.get(k) == hp.get(k) for k in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID,
                                                           PROPERTY_PRODUCER_GROUP)))

    def check_once(self) -> dict:
        """One pass of TransactionalMessageServiceImpl.check over every half queue. Returns this pass's counts."""
        with self._check_lock:
            if not self._recovered:
                self.recover()
            counts = {"checked": 0, "committed": 0, "rolled_back": 0, "unknown": 0, "no_producer": 0,
                      "discarded": 0, "skipped": 0}
            self._no_producer_groups = {}
            queues = self.store.topics().get(HALF_TOPIC, [])
            for queue_id in queues:
                self._check_queue(queue_id, counts)
            self._persist_offsets()
            self.stats["passes"] += 1
            for k_from, k_to in (("checked", "checked"), ("committed", "committed_by_check"),
                                 ("rolled_back", "rolled_back_by_check"), ("unknown", "unknown"),
                                 ("no_producer", "no_producer"), ("discarded", "discarded")):
                self.stats[k_to] += counts[k_from]
            if self._no_producer_groups:
                # One line a pass, not one per half (Java logs "channel is null" for each).
                log.warning("transaction check: no live producer to ask about %d open half message(s) of producer "
                            "group(s) %s; after %d checks each is moved to %s", counts["no_producer"],
                            ", ".join(f"{g} ({n})" for g, n in sorted(self._no_producer_groups.items())[:20]),
                            self.transaction_check_max, CHECK_MAX_TIME_TOPIC)
            return counts

    def _check_queue(self, queue_id, counts):
        start_real = _now_ms()        # the store's clock: compared with store and op born times, as Java
        timeout = self.transaction_timeout
        half_offset = self._fetch_offset(HALF_TOPIC, queue_id)
        op_queue = queue_id
        op_offset = self._fetch_offset(OP_TOPIC, op_queue)
        if half_offset < 0 or op_offset < 0:
            log.error("half queue %d: illegal offsets (half %d, op %d); skipped", queue_id, half_offset, op_offset)
            return
        end = self.store.max_offset(HALF_TOPIC, queue_id)     # never past the queue's end as the pass began
        remove, op_halves, done_ops = {}, {}, set()
        status, pull, ops = self._fill_op_remove_map(remove, op_halves, op_queue, op_offset, half_offset, done_ops)
        null_count = 1
        new_offset = i = half_offset
        while i < end:
            if _now_ms() - start_real > MAX_PROCESS_TIME_LIMIT_MS:
                break
            if i in remove:
                self._mark_removed(remove, op_halves, done_ops, i)
                counts["skipped"] += 1
                new_offset = i = i + 1
                continue
            hstatus, g = self._pull(HALF_TOPIC, queue_id, i, 1)
            msg = g.messages[0] if hstatus == "FOUND" and g.messages else None
            if msg is None:
                null_count += 1
                if null_count > MAX_RETRY_COUNT_WHEN_HALF_NULL + 1 or hstatus == "NO_NEW_MSG":
                    break
                i = new_offset = g.next_begin_offset
                continue
            props = msg.properties          # this record's own parse: changed below as needDiscard does
            if self._need_discard(props) or self._need_skip(msg):
                self._resolve_discard(msg)
                counts["discarded"] += 1
                new_offset = i = i + 1
                continue
            if msg.store_timestamp >= start_real:
                break
            age = self.clock() - msg.born_timestamp
            immunity = timeout
            immunity_text = props.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
            if immunity_text is not None:
                immunity = self._immunity_time(immunity_text, timeout)
                if age < immunity:
                    if self._check_prepare_queue_offset(remove, op_halves, done_ops, msg):
                        new_offset = i = i + 1
                        continue
            elif 0 <= age < immunity:
                break
            need_check = ((ops is None and age > immunity)
                          or (ops is not None and ops[-1][1] - start_real > timeout)
                          or age <= -1)
            if need_check:
                renewed = self._put_back(msg)
                if renewed is None:
                    continue                   # Java retries the same offset
                self._resolve(renewed, counts)
            else:
                status, pull, ops = self._fill_op_remove_map(remove, op_halves, op_queue, pull.next_begin_offset,
                                                             half_offset, done_ops)
                continue
            new_offset = i = i + 1
            if self._own_offsets and \
                    (time.monotonic() - self._last_offset_persist) * 1000 >= self.offset_persist_interval:
                self._commit_progress(queue_id, half_offset, new_offset, op_queue, op_offset, done_ops)
                self._persist_offsets()
        self._commit_progress(queue_id, half_offset, new_offset, op_queue, op_offset, done_ops)

    def _commit_progress(self, queue_id, half_offset, new_offset, op_queue, op_offset, done_ops):
        if new_offset != half_offset:
            self.offsets.commit_offset(SYSTEM_GROUP, HALF_TOPIC, queue_id, new_offset)
        new_op = self._calculate_op_offset(done_ops, op_offset)
        if new_op != op_offset:
            self.offsets.commit_offset(SYSTEM_GROUP, OP_TOPIC, op_queue, new_op)

    def _need_discard(self, props) -> bool:
        text = props.get(PROPERTY_TRANSACTION_CHECK_TIMES)
        times = 1
        if text is not None:
            times = _java_int(text)
            if times >= self.transaction_check_max:
                return True
            times += 1
        props[PROPERTY_TRANSACTION_CHECK_TIMES] = str(times)
        return False

    def _need_skip(self, msg) -> bool:
        reserved_ms = self.store.config.file_reserved_time * 3600 * 1000
        return self.clock() - msg.born_timestamp > reserved_ms

    @staticmethod
    def _immunity_time(text, timeout):
        # 5.x TransactionalMessageUtil.getImmunityTime: seconds, never below the transaction timeout.
        v = _java_long(text)
        ms = v * 1000 if v != -1 else 0
        return max(ms, timeout)

    def _check_prepare_queue_offset(self, remove, op_halves, done_ops, msg) -> bool:
        text = msg.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)
        if text is None:
            return self._put_immunity_back(msg)
        prepared = _java_long(text)
        if prepared == -1:
            return False
        if prepared in remove:
            self._mark_removed(remove, op_halves, done_ops, prepared)
            return True
        return self._put_immunity_back(msg)

    def _renew(self, msg, props) -> Message:
        # renewHalfMessageInner: the same half (topic, queue, body, sys flag, born time and host, properties).
        return Message(msg.topic, msg.body, msg.queue_id, properties=props, flag=msg.flag, sys_flag=msg.sys_flag,
                       born_timestamp=msg.born_timestamp, born_host=msg.born_host)

    def _put_immunity_back(self, msg) -> bool:
        props = dict(msg.properties)
        if PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET not in props:
            props[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(msg.queue_offset)
        return self._put(self._renew(msg, props)).status is PutStatus.PUT_OK

    def _put_back(self, msg):
        """putBackHalfMsgQueue: the half (with its incremented TRANSACTION_CHECK_TIMES) at the end of the half
        queue → the new copy as stored, or None when the put failed."""
        r = self._put(self._renew(msg, dict(msg.properties)))
        if r.status is not PutStatus.PUT_OK:
            log.error("half message at %d could not be put back: %s", msg.commitlog_offset, r.status.name)
            return None
        return self.store.look_message(r.commitlog_offset)

    def _resolve(self, renewed, counts):
        """resolveHalfMsg: ask the producer (the checker) and apply its answer to the renewed copy."""
        counts["checked"] += 1
        answer = None
        if self.checker is not None:
            try:
                answer = self.checker(renewed)
            except Exception:                 # a failing check is an unknown answer: checked again later
                log.exception("transaction checker failed for half %d", renewed.commitlog_offset)
        if answer is NO_PRODUCER:
            counts["no_producer"] += 1
            group = renewed.properties.get(PROPERTY_PRODUCER_GROUP, "")
            self._no_producer_groups[group] = self._no_producer_groups.get(group, 0) + 1
            return
        if answer is None:
            counts["unknown"] += 1
            return
        self._end(renewed, bool(answer))
        counts["committed" if answer else "rolled_back"] += 1

    def _resolve_discard(self, msg):
        """5.x resolveDiscardMsg: checked too often (or too old): moved to TRANS_CHECK_MAX_TIME_TOPIC queue 0, where
        ``unresolved_halves`` reports it (the console, /metrics, ``rmqcore inspect``)."""
        log.error("half message at %d checked %s times: moved to %s", msg.commitlog_offset,
                  msg.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES), CHECK_MAX_TIME_TOPIC)
        m = Message(CHECK_MAX_TIME_TOPIC, msg.body, 0, properties=dict(msg.properties), flag=msg.flag,
                    sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                    reconsume_times=msg.reconsume_times)
        self._put(m)

    def _persist_offsets(self):
        if not self._own_offsets:
            return
        if self._last_put_end and not flush_past(self.store, self._last_put_end):
            log.warning("transaction check progress not persisted: the commitlog did not flush")
            return
        self.offsets.persist()
        self._last_offset_persist = time.monotonic()

    # -- the check service ------------------------------------------------------------------------------------

    def start(self) -> None:
        """TransactionalMessageCheckService: check_once every transaction_check_interval ms."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="TransactionalMessageCheckService", daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            self._wake.wait(self.transaction_check_interval / 1000)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.check_once()
            except Exception:
                log.exception("transaction check pass failed")

    def wakeup(self) -> None:
        self._wake.set()

    def shutdown(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._wake.set()
            self._thread.join()
            self._thread = None
        with self._check_lock:
            self._persist_offsets()


def unresolved_halves(store, limit: int = UNRESOLVED_READ_LIMIT) -> dict:
    """The half messages no check could resolve, as RocketMQ leaves them: moved to TRANS_CHECK_MAX_TIME_TOPIC after
    ``transaction_check_max`` checks (never committed nor rolled back). ``store``: a MessageStore or an
    admin.StoreReader. → ``{"topic", "count", "read", "producer_groups": {group: {"halves", "topics"}}}``; ``count``
    from the queue's offsets, the groups from the last ``limit`` halves read (``read`` says how many)."""
    live = hasattr(store, "get_messages")
    qids = store.topics().get(CHECK_MAX_TIME_TOPIC, [])
    count = read = 0
    groups: dict[str, dict] = {}
    for qid in qids:
        if live:
            lo, hi = max(0, store.min_offset(CHECK_MAX_TIME_TOPIC, qid)), store.max_offset(CHECK_MAX_TIME_TOPIC, qid)
        else:
            cq = store.consume_queues[(CHECK_MAX_TIME_TOPIC, qid)]
            lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
        count += max(0, hi - lo)
        off = max(lo, hi - max(0, limit - read))
        while off < hi:
            msgs = (store.get_messages("", CHECK_MAX_TIME_TOPIC, qid, off, 32).messages if live
                    else store.get(CHECK_MAX_TIME_TOPIC, qid, off, 32))
            if not msgs:
                break
            for m in msgs:
                props = m.properties
                g = groups.setdefault(props.get(PROPERTY_PRODUCER_GROUP, ""), {"halves": 0, "topics": set()})
                g["halves"] += 1
                g["topics"].add(props.get(PROPERTY_REAL_TOPIC, ""))
            read += len(msgs)
            off = msgs[-1].queue_offset + 1
    return {"topic": CHECK_MAX_TIME_TOPIC, "count": count, "read": read,
            "producer_groups": {g: {"halves": v["halves"], "topics": sorted(v["topics"])}
                                for g, v in sorted(groups.items())}}
