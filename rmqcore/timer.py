"""Exact-time delivery: RocketMQ 5.x's timer messages (``__STARTDELIVERTIME`` / ``TIMER_DELIVER_MS``,
``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS``) with a timing wheel of rmqcore's own.

``rewrite_timer`` is 5.x's HookUtils.transformTimerMessage on a ``Message``: a message asking for a time in the
future is stored in ``rmq_sys_wheel_timer`` queue 0 with TIMER_OUT_MS (the delivery time), REAL_TOPIC and REAL_QID,
exactly as a 5.x broker stores it, so such records move between rmqcore and a 5.x store's commitlog. What is NOT
5.x's: the wheel. 5.x keeps its own ``timerwheel`` and ``timerlog`` files and a ``timercheck`` checkpoint; rmqcore
keeps no wheel files at all: the timer topic's consume queue and the commitlog are the log, the wheel is rebuilt in
memory at start, and ``config/timerProgress.json`` (rmqcore's own, written atomically) says where to rebuild from:

- ``scanFromOffset`` S: every timer-queue entry below S was delivered;
- ``loadedBelowOffset`` L and ``deliveredTimeMs`` T: every entry in [S, L) due before T was delivered.

At start, entries from S on are read back; one in [S, L) due before T is skipped, every other one goes into the
wheel (and is delivered at once when already due). What was delivered after the last persist
(``timer_flush_interval_ms``, 1 s) is then found in the commitlog and taken out of the wheel
(``recover_progress``): a kill delivers nothing twice, and what the commitlog lost is delivered again, never lost. 5.x rounds delivery times down to
``timerPrecisionMs`` (1 s by default, so it delivers up to a second early); rmqcore keeps the exact ms and never
delivers early: the wheel has 10 ms slots and a slot is delivered once its last ms has passed.

Delivery keeps Python off the per-message path: TIMER_OUT_MS is read from the records in C (``timer_out_times``)
and a due slot is rebuilt in C straight into an encode buffer and appended in one call (``schedule.redeliver``,
the delay levels' ``time_up_into`` in its timer mode). The delivery thread never waits for a disk: progress is
persisted by a thread of its own (the persist waits for an msync past the re-puts and fsyncs the file).
"""
from __future__ import annotations

import heapq
import logging
import os
import threading
import time
from array import array

import numpy as np

from ._message import Message
from ._encoder import EncodeBuffer
from ._pull import select_messages
from ._schedule import (FACT_COLUMNS, FACT_PHYS, FACT_SIZE, FACT_STORE_TS, NO_RECORD, PROVENANCE_TIMED, record_keys,
                        timer_out_times)
from .errors import MessageIllegalError, RmqStoreError, StoreClosedError, StoreLayoutError
from .schedule import (PERSIST_SLACK_MS, PROPERTY_DELAY, PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC,
                       RECOVERY_CLOCK_SLACK_MS, persisted_at,
                       TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_TYPE_MASK, fact_hashes, flush_past,
                       load_config_file, parse_java_int, put_in_order, read_fastjson, redeliver, same_message,
                       scan_commitlog, write_config_file)

log = logging.getLogger(__name__)

TIMER_TOPIC = "rmq_sys_wheel_timer"                # TimerMessageStore.TIMER_TOPIC (SYSTEM_TOPIC_PREFIX + ...)
PROPERTY_START_DELIVER_TIME = "__STARTDELIVERTIME"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROGRESS_FILE = "timerProgress.json"
SLOT_MS = 10
# How often an idle wheel looks for new timer messages: a store without any costs 20 wake-ups a second, and a
# message due sooner than this after its put is at most this late.
IDLE_POLL_MS = 50
_LONG_MAX = (1 << 63) - 1


def rewrite_timer(msg, now_ms: int, max_delay_sec: int = 3 * 24 * 3600) -> bool:
    """HookUtils.checkIfTimerMessage + transformTimerMessage → True when the message went to the timer topic.

    Only NOT / COMMIT transaction types. A DELAY level wins: the timer properties are then dropped (5.x). A
    message already carrying TIMER_OUT_MS (one the wheel re-puts) is left alone. TIMER_DELAY_SEC, then
    TIMER_DELAY_MS, then TIMER_DELIVER_MS / __STARTDELIVERTIME give the time; a value Long.parseLong refuses, or a
    time more than ``max_delay_sec`` ahead (timerMaxDelaySec), raises MessageIllegalError
    (WHEEL_TIMER_MSG_ILLEGAL) and leaves the message as it was. A time not in the future is delivered at once:
    the message is not rewritten.
    """
    if msg.sys_flag & TRANSACTION_TYPE_MASK not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
        return False
    props = msg.properties
    if not props or msg.topic == TIMER_TOPIC or PROPERTY_TIMER_OUT_MS in props:
        return False
    names = (PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELIVER_MS,
             PROPERTY_START_DELIVER_TIME)
    if not any(n in props for n in names):
        return False
    delay = props.get(PROPERTY_DELAY)
    if delay is not None and parse_java_int(delay, f"properties[{PROPERTY_DELAY}]") > 0:
        for n in names:
            props.pop(n, None)
        return False
    if PROPERTY_TIMER_DELAY_SEC in props:
        deliver = now_ms + parse_java_int(props[PROPERTY_TIMER_DELAY_SEC], f"properties[{PROPERTY_TIMER_DELAY_SEC}]", 64) \
            * 1000
    elif PROPERTY_TIMER_DELAY_MS in props:
        deliver = now_ms + parse_java_int(props[PROPERTY_TIMER_DELAY_MS], f"properties[{PROPERTY_TIMER_DELAY_MS}]", 64)
    else:
        name = PROPERTY_TIMER_DELIVER_MS if PROPERTY_TIMER_DELIVER_MS in props else PROPERTY_START_DELIVER_TIME
        deliver = parse_java_int(props[name], f"properties[{name}]", 64)
    if deliver <= now_ms:
        return False
    if deliver - now_ms > max_delay_sec * 1000:
        raise MessageIllegalError("properties", f"delivery time {deliver} is more than timerMaxDelaySec "
                                  f"{max_delay_sec} s ahead", max_delay_sec)
    props[PROPERTY_TIMER_OUT_MS] = str(deliver)
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    msg.topic = TIMER_TOPIC
    msg.queue_id = 0
    return True


def decode_progress(text: str, path: str) -> dict:
    data = read_fastjson(text, path)
    if not isinstance(data, dict):
        raise StoreLayoutError(f"{path}: top level must be an object")
    out = {}
    for key in ("scanFromOffset", "loadedBelowOffset", "deliveredTimeMs"):
        v = data.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _LONG_MAX:
            raise StoreLayoutError(f"{path}: {key} = {v!r} is not a non-negative long")
        out[key] = v
    if out["scanFromOffset"] > out["loadedBelowOffset"]:
        raise StoreLayoutError(f"{path}: scanFromOffset {out['scanFromOffset']} is past loadedBelowOffset "
                               f"{out['loadedBelowOffset']}")
    return out


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TimerMessageService:
    """Delivers rmq_sys_wheel_timer messages at their TIMER_OUT_MS. Owned by the store (``timer_wheel_enable``);
    tests drive it with an injected ``clock`` (ms) and ``run_once()``."""

    def __init__(self, store, *, clock=None, flush_interval_ms: int | None = None, load_batch: int = 8192):
        self.store = store
        self.clock = clock or _now_ms
        self.flush_interval_ms = (flush_interval_ms if flush_interval_ms is not None
                                  else getattr(store.config, "timer_flush_interval_ms", 1000))
        if self.flush_interval_ms <= 0 or load_batch < 1:
            raise ValueError(f"timer_flush_interval_ms must be > 0 and load_batch >= 1, got "
                             f"{self.flush_interval_ms} and {load_batch}")
        self.load_batch = load_batch
        self._slots: dict[int, array] = {}     # slot → flat int64 (deliver_ms, queue_offset, phy, size) * n
        self._slot_heap: list[int] = []
        self.loaded_below = 0                  # next timer-queue offset to read into the wheel
        self.delivered_time = 0                # every loaded entry due before this was delivered
        self.scan_from = 0
        self.delivered = 0
        self.skipped = 0
        self.persists = 0
        self.recovered = 0                     # entries found delivered after the persisted progress (load)
        self.pending = 0
        self.last_error = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = None
        self._loaded = False
        self._delivered_end = 0
        self._persist_thread = None
        self._more = False                     # the last read stopped with timer-queue entries left
        self._encoded = EncodeBuffer()         # due records rebuilt for their real queues (schedule.redeliver)
        self._topics: dict[str, str] = {}

    @property
    def progress_path(self) -> str:
        return os.path.join(self.store.path, "config", PROGRESS_FILE)

    # -- the wheel ------------------------------------------------------------------------------------------

    def _add(self, rows) -> None:
        """Put ``rows`` (int64 (deliver_ms, queue_offset, phy, size), in queue-offset order) into their slots. A
        slot's rows stay in queue-offset order (read in order; a slot put back is sorted again), so its first row
        holds its lowest queue offset (``persist``)."""
        slots = rows[:, 0] // SLOT_MS
        order = np.argsort(slots, kind="stable")
        rows, slots = rows[order], slots[order]
        cuts = np.flatnonzero(np.diff(slots)) + 1
        for part, slot in zip(np.split(rows, cuts), slots[np.r_[0, cuts]].tolist()):
            a = self._slots.get(slot)
            if a is None:
                a = self._slots[slot] = array("q")
                heapq.heappush(self._slot_heap, slot)
            a.frombytes(part.tobytes())
        self.pending += len(rows)

    def _read(self, skip_below: int = 0, skip_before_ms: int = 0, max_batches: int | None = None) -> int:
        """Read new timer-queue entries into the wheel (their TIMER_OUT_MS read from the records in C,
        ``timer_out_times``), at most ``max_batches`` batches of ``load_batch``; entries below ``skip_below`` due
        before ``skip_before_ms`` were delivered before a restart and are skipped. ``self._more`` tells whether
        it stopped at the limit with entries left."""
        store = self.store
        self._more = False
        cq = store.find_consume_queue(TIMER_TOPIC, 0, create=False)
        if cq is None:
            return 0
        if self.loaded_below < cq.min_offset_in_queue:
            self.loaded_below = cq.min_offset_in_queue
        n = batches = 0
        while True:
            if max_batches is not None and batches == max_batches:
                self._more = self.loaded_below < cq.max_offset_in_queue
                return n
            units = cq.get_units(self.loaded_below, self.load_batch)
            if units is None or len(units) == 0:
                return n
            batches += 1
            deliver = np.empty(len(units), np.int64)
            timer_out_times(units.view(np.uint8), store.commit_log.mapped_file_queue.mapped_files,
                            store.config.mapped_file_size_commit_log, deliver)
            base = self.loaded_below
            rows = np.empty((len(units), 4), np.int64)
            rows[:, 0] = deliver
            rows[:, 1] = np.arange(base, base + len(units))
            rows[:, 2] = units["offset"]
            rows[:, 3] = units["size"]
            keep = deliver != NO_RECORD       # no record there (any more): as select_messages, skipped
            if skip_below:
                keep &= ~((rows[:, 1] < skip_below) & (deliver < skip_before_ms))
            rows = rows[keep]
            if len(rows):
                self._add(rows)
            n += len(rows)
            self.loaded_below = base + len(units)
            del units

    def load(self) -> None:
        """Rebuild the wheel from the persisted progress (see the module docstring)."""
        progress = load_config_file(self.progress_path, decode_progress)
        if progress:
            self.scan_from = progress["scanFromOffset"]
            self.loaded_below = self.scan_from
            self._read(progress["loadedBelowOffset"], progress["deliveredTimeMs"])
            self.delivered_time = progress["deliveredTimeMs"]
        else:
            self._read()               # no progress yet (killed before the first persist): read it all
        try:
            self.recovered = self.recover_progress()
        except (RmqStoreError, OSError) as e:
            # Finding them only spares duplicates: without it the persisted progress holds.
            log.error("timer: deliveries after timerProgress.json not looked for (%s); they may come again", e)
        self._loaded = True

    def _rows(self):
        """Every entry of the wheel, as one int64 array of (deliver_ms, queue_offset, phy, size) rows."""
        parts = [np.frombuffer(a, dtype=np.int64).reshape(-1, 4) for a in self._slots.values() if len(a)]
        return np.concatenate(parts) if parts else np.empty((0, 4), np.int64)

    def _written_from(self, when_ms: int) -> int:
        """The start of the last commitlog file whose first record was stored before ``when_ms`` (0 when none
        is known): no record stored at or after ``when_ms`` lies before it."""
        best = 0
        for mf in self.store.commit_log.mapped_file_queue.mapped_files:
            first = self.store.commit_log.look_message(mf.file_from_offset)
            if first is None or first.store_timestamp >= when_ms:
                break
            best = mf.file_from_offset
        return best

    def recover_progress(self) -> int:
        """After a restart: take out of the wheel the entries delivered after timerProgress.json was last written
        (every ``timer_flush_interval_ms``), which the progress alone would deliver again. A delivery is the timer
        record re-put in its REAL_TOPIC / REAL_QID with TIMER_OUT_MS kept (convertMessage clears only REAL_TOPIC and
        REAL_QID) and its body, born time and host, flag and UNIQ_KEY unchanged, stored after the record and not
        before its time: the commitlog from there is walked in C for records carrying TIMER_OUT_MS outside the
        timer topic, paired with the due entries by a hash of what a re-put keeps, and each pair decoded and
        compared in full; each delivery takes out one entry. Returns how many entries it took out."""
        store = self.store
        rows = self._rows()
        if not len(rows):
            return 0
        now = max(_now_ms(), self.clock())       # an injected clock may run ahead: what it made due counts too
        due = rows[rows[:, 0] <= now + RECOVERY_CLOCK_SLACK_MS]
        if not len(due):
            return 0
        since = int(due[:, 0].min())
        written = persisted_at(self.progress_path)
        if written is not None:        # every delivery the progress does not count came after it was taken
            since = max(since, written - PERSIST_SLACK_MS)
        start = max(int(due[:, 2].min()), self._written_from(since - RECOVERY_CLOCK_SLACK_MS))
        found = list(scan_commitlog(store, start, PROVENANCE_TIMED))
        if not found:
            return 0
        copies = np.concatenate(found)
        units = np.zeros(len(due), dtype=[("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
        units["offset"] = due[:, 2]
        units["size"] = due[:, 3]
        facts = np.empty((len(due), FACT_COLUMNS), np.int64)
        record_keys(units.view(np.uint8), store.commit_log.mapped_file_queue.mapped_files,
                    store.config.mapped_file_size_commit_log, facts)
        ok = facts[:, FACT_SIZE] >= 0
        src_hash = fact_hashes(facts)
        order = np.flatnonzero(ok)[np.argsort(src_hash[ok], kind="stable")]
        sorted_hash = src_hash[order]
        copy_hash = fact_hashes(copies)
        maybe = np.flatnonzero(np.isin(copy_hash, sorted_hash))
        lo = np.searchsorted(sorted_hash, copy_hash[maybe], "left")
        hi = np.searchsorted(sorted_hash, copy_hash[maybe], "right")
        look = store.commit_log.look_message
        taken = set()                    # indexes into ``due``
        for k, a, b in zip(maybe.tolist(), lo.tolist(), hi.tolist()):
            phys = int(copies[k, FACT_PHYS])
            copy = None
            for j in order[a:b].tolist():
                if j in taken or due[j, 2] >= phys or copies[k, FACT_STORE_TS] < due[j, 0] - RECOVERY_CLOCK_SLACK_MS:
                    continue
                if copy is None:
                    copy = look(phys)
                source = look(int(due[j, 2]))
                props = source.properties if source is not None else {}
                try:
                    qid = parse_java_int(props.get(PROPERTY_REAL_QUEUE_ID), PROPERTY_REAL_QUEUE_ID)
                except MessageIllegalError:
                    continue
                if (same_message(copy, source, props.get(PROPERTY_REAL_TOPIC), qid)
                        and copy.properties.get(PROPERTY_TIMER_OUT_MS) == props.get(PROPERTY_TIMER_OUT_MS)
                        and PROPERTY_REAL_TOPIC not in copy.properties):
                    taken.add(j)
                    break
        if not taken:
            return 0
        gone = set(due[sorted(taken), 1].tolist())        # their timer-queue offsets
        for slot in list(self._slots):
            a = np.frombuffer(self._slots[slot], dtype=np.int64).reshape(-1, 4)
            keep = ~np.isin(a[:, 1], np.fromiter(gone, np.int64, len(gone)))
            if keep.all():
                continue
            if keep.any():
                self._slots[slot] = array("q", a[keep].tobytes())
            else:
                del self._slots[slot]
        self._slot_heap = list(self._slots)
        heapq.heapify(self._slot_heap)
        self.pending -= len(gone)
        log.warning("timer: %d entries were delivered after timerProgress.json was written (found in the "
                    "commitlog); not delivered again", len(gone))
        return len(gone)

    def run_once(self, max_batches: int | None = None) -> int:
        """Read what arrived (at most ``max_batches`` batches of ``load_batch``: the thread reads a burst of new
        timer messages in steps, delivering what is due between them), then deliver every entry whose time has
        come. Returns how many were delivered."""
        with self._lock:
            self._read(max_batches=max_batches)
            now = self.clock()
            total = 0
            while self._slot_heap and (self._slot_heap[0] + 1) * SLOT_MS - 1 <= now:
                slot = heapq.heappop(self._slot_heap)
                raw = self._slots.pop(slot)
                entries = np.frombuffer(raw, dtype=np.int64).reshape(-1, 4)
                entries = entries[np.lexsort((entries[:, 1], entries[:, 0]))]
                try:
                    done = self._deliver(entries)
                except BaseException:
                    # The put raised (the store closing or not open yet): the slot goes back, nothing is lost.
                    self._slots[slot] = raw
                    heapq.heappush(self._slot_heap, slot)
                    raise
                total += done
                if done < len(entries):              # a put failed: keep the rest for the next turn
                    rest = entries[done:]
                    self._slots[slot] = array("q", rest[np.argsort(rest[:, 1], kind="stable")].tobytes())
                    heapq.heappush(self._slot_heap, slot)
                    break
            else:
                # Every slot that ended by now is delivered: so is every loaded entry due before the current slot.
                self.delivered_time = (now + 1) // SLOT_MS * SLOT_MS
            return total

    def _deliver(self, entries) -> int:
        """Re-put the messages of ``entries`` (rows of the wheel, in delivery order) → how many leading ones are
        done. Rebuilt in C as the per-message path (``_time_up``) builds them (schedule.redeliver: no Python
        object per message, the GIL held for a fraction of the time), so a slot of due messages is appended in
        one call."""
        units = np.zeros(len(entries), dtype=[("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
        units["offset"] = entries[:, 2]
        units["size"] = entries[:, 3]
        delivered = self.delivered
        done = redeliver(self, units, self._deliver_per_message, timer=True)
        # Units neither delivered nor failed had no readable record any more (or one the store refused).
        skipped = done - (self.delivered - delivered)
        if skipped > 0:
            self.skipped += skipped
            log.error("%d timer records not delivered (no longer readable: deleted commitlog files?); skipped",
                      skipped)
        self.pending -= done
        return done

    def _deliver_per_message(self, units, files, file_size):
        """convertMessage per message for ``units`` → None when all are done, else the index of the first unit
        not done (its put failed)."""
        n = len(units)
        found = select_messages(units.view(np.uint8), files, file_size, n, 1 << 62, n + 1)[0]
        batch, exts = self._time_up(found)
        if not batch:
            return None
        ok, end, illegal = put_in_order(self.store, batch)
        self._delivered_end = max(self._delivered_end, end)
        self.delivered += ok - illegal
        if ok == len(batch):
            return None
        return int(np.flatnonzero(units["offset"] == exts[ok].commitlog_offset)[0])

    def _time_up(self, found):
        """5.x TimerMessageStore.convertMessage for each due record → (Messages to put, their source records): the
        real topic and queue from REAL_TOPIC / REAL_QID, both cleared, every other property kept."""
        batch, exts = [], []
        for m in found:
            props = m.properties
            topic = props.pop(PROPERTY_REAL_TOPIC, None)
            qid = props.pop(PROPERTY_REAL_QUEUE_ID, None)
            try:
                if topic is None or qid is None:
                    raise MessageIllegalError("properties", "REAL_TOPIC / REAL_QID missing", None)
                queue_id = parse_java_int(qid, f"properties[{PROPERTY_REAL_QUEUE_ID}]")
            except MessageIllegalError as e:
                log.error("timer record at %d cannot be delivered (%s); skipped", m.commitlog_offset, e)
                continue
            batch.append(Message(topic, m.body, queue_id, None, None, props, flag=m.flag, sys_flag=m.sys_flag,
                                 born_timestamp=m.born_timestamp, born_host=m.born_host,
                                 reconsume_times=m.reconsume_times))
            exts.append(m)
        return batch, exts

    # -- progress ----------------------------------------------------------------------------------------------

    def persist(self) -> None:
        with self._lock:
            # A slot's first row has its lowest queue offset (_add): one look per slot, not per entry.
            scan_from = min((a[1] for a in self._slots.values() if len(a)), default=self.loaded_below)
            scan_from = min(scan_from, self.loaded_below)
            state = {"scanFromOffset": scan_from, "loadedBelowOffset": self.loaded_below,
                     "deliveredTimeMs": self.delivered_time}
            end = self._delivered_end
        if state["loadedBelowOffset"] == 0 and not os.path.exists(self.progress_path):
            return
        if end and not flush_past(self.store, end):
            log.warning("timerProgress.json not persisted: the commitlog did not flush past %d", end)
            return
        write_config_file(self.progress_path, "{" + ",".join(f'"{k}":{v}' for k, v in state.items()) + "}")
        self.scan_from = scan_from
        self.persists += 1

    # -- thread ------------------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        if not self._loaded:
            self.load()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="TimerMessageService", daemon=True)
        self._thread.start()
        # Progress is persisted by a thread of its own: a persist waits for the commitlog to flush past the
        # re-puts (an msync) and fsyncs the file, tens of ms on this machine and once 155 ms; done by the
        # delivery thread, every slot due meanwhile was that much late.
        self._persist_thread = threading.Thread(target=self._run_persist, name="TimerProgressPersist", daemon=True)
        self._persist_thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            wait_ms = IDLE_POLL_MS
            try:
                # One batch read per turn: a burst of new timer messages is read between deliveries.
                self.run_once(max_batches=1)
                if self._more:
                    wait_ms = 0
                elif self._slot_heap:
                    wait_ms = max(1, min(IDLE_POLL_MS, (self._slot_heap[0] + 1) * SLOT_MS - 1 - self.clock()))
            except StoreClosedError:
                if self._stop.is_set() or self.store._closed:
                    return
                wait_ms = 10
            except Exception as e:
                self.last_error = f"{type(e).__name__}: {e}"
                log.exception("timer delivery failed")
                wait_ms = 1000
            if wait_ms:
                self._wake.wait(wait_ms / 1000)
                self._wake.clear()

    def _run_persist(self) -> None:
        while not self._stop.wait(self.flush_interval_ms / 1000):
            try:
                self.persist()
            except StoreClosedError:
                if self._stop.is_set() or self.store._closed:
                    return
            except Exception as e:
                self.last_error = f"{type(e).__name__}: {e}"
                log.exception("timer progress persist failed")

    def wakeup(self) -> None:
        self._wake.set()

    def shutdown(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._wake.set()
        self._thread.join()
        self._persist_thread.join()
        self._thread = self._persist_thread = None
        self.persist()
