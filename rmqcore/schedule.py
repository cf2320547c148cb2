"""Delayed delivery: RocketMQ's delay-level rewrite (CommitLog.putMessage's delay branch) and ScheduleMessageService.

A message put with the DELAY property at level n > 0 is stored in SCHEDULE_TOPIC_XXXX, queue n - 1, with its real
topic and queue kept in REAL_TOPIC / REAL_QID (``rewrite_delay``); dispatch writes its delivery time (store time +
the level's delay) as the consume-queue unit's tagsCode. ``ScheduleMessageService`` follows each level's queue from
its persisted progress and re-puts every due message in its real topic and queue, as messageTimeup builds it; the
progress per level goes to ``config/delayOffset.json`` (fastjson's ``{"offsetTable":{1:0,2:35}}``) every
``flush_delay_offset_interval`` ms and at shutdown.

Differences from the Java service, on purpose:
- Due messages are re-put in batches, not one ``putMessage`` per message: their records are rebuilt in C straight
  from the schedule records into an encode buffer (rmqcore._schedule, no Python object per message) and appended
  in one call (``MessageStore.put_encoded``: one put lock; with SYNC_FLUSH the flush is asked for, not awaited, as
  messageTimeup's waitStoreMsgOK false). The few records a plain rebuild would get wrong (a timer property that
  reroutes again, a bad REAL_TOPIC / REAL_QID, a size limit, properties that are not UTF-8) go through
  ``_time_up`` and ``put_batch`` one run at a time, in order. A level's progress moves only past messages that
  were written, as syncDeliver's PUT_OK, so a failed put is retried (100 ms later), never skipped.
- One timer thread runs the per-level delivery tasks in turn (each level keeps its own progress and its own "next
  due" time, as Java's per-level DeliverDelayedMessageTimerTask does); under the GIL a thread per level would only
  contend. A level delivers at most ``batch_size`` messages per turn, so a backlog in one level does not starve the
  others.
- Before progress is persisted, the commitlog is flushed past the last re-put, so a persisted offset never covers a
  delivery that a power loss could take back (Java persists without that flush).
- At open, the deliveries made after delayOffset.json was last written are found in the commitlog and each level
  moves past them (``recover_progress``): Java delivers them again after a kill (everything of the last 10 s).
- A record whose REAL_TOPIC / REAL_QID is missing or unparsable is logged and skipped; Java's messageTimeup throws
  there and the level stays stuck on that record for good. So is a message the store refuses (MESSAGE_ILLEGAL: a
  real topic over 127 bytes, a record over a size limit), which Java's syncDeliver retries forever.
- The delivery is held to the store's topic rule, as Java's messageTimeup re-puts through the store's putMessage
  (which checks only the topic's length), not to the broker's ^[%|a-zA-Z0-9_-]+$ (the send processor's): a delayed
  message another broker stored for ``支付`` or ``odd topic.v1`` reaches that topic (``MessageStore.put_delivered``);
  one whose real topic names no directory (``a/b``) is stored and kept undispatchable, as every such record.
- The delivered record's properties no longer hold DELAY (nor 5.x's TIMER_DELIVER_MS / TIMER_DELAY_SEC), as
  messageTimeup clears them. (Java freezes the properties string before it clears them, so a Java broker's
  delivered record still carries DELAY in its bytes; the in-memory message it builds does not.)
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time

import numpy as np

from . import fastjson
from ._message import Message
from ._encoder import EncodeBuffer
from ._pull import select_messages
from ._schedule import (FACT_BODY_CRC, FACT_BODY_LEN, FACT_BORN_TS, FACT_COLUMNS, FACT_FLAG, FACT_PHYS, FACT_SIZE,
                        PROVENANCE_DELAYED, record_keys, scan_provenance, time_up_into)
from .config_manager import file2string, string2file
from .errors import ConfigFileError, MessageIllegalError, RmqStoreError, StoreClosedError, StoreLayoutError
from .status import PutStatus

log = logging.getLogger(__name__)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"           # TopicValidator.RMQ_SYS_SCHEDULE_TOPIC
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"    # TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC
PROPERTY_DELAY = "DELAY"                         # MessageConst.PROPERTY_DELAY_TIME_LEVEL
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TRANSACTION_TYPE_MASK = 0xC                       # MessageSysFlag: bits 2-3
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_COMMIT_TYPE = 0x8
DELAY_OFFSET_FILE = "delayOffset.json"

DELAY_FOR_A_WHILE_MS = 100       # ScheduleMessageService.DELAY_FOR_A_WHILE: idle poll of a level
# How far the wall clock may have stepped back between a unit falling due and its delivery being stored, for
# recover_progress's bound on where deliveries start (a bound too late costs duplicates, never a loss).
RECOVERY_CLOCK_SLACK_MS = 10_000
# How long before its file's mtime a persisted progress table may have been taken (a persist first waits for the
# commitlog to flush past the re-puts it counts).
PERSIST_SLACK_MS = 60_000
_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def delay_level_to_queue_id(level: int) -> int:
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    return queue_id + 1


def parse_java_int(value, field: str, bits: int = 32) -> int:
    """Java's Integer.parseInt (``bits`` 64: Long.parseLong): one optional sign and ASCII digits, within the type's
    range (Python's int() is laxer); else MessageIllegalError naming ``field``."""
    name, kind = ("Integer.parseInt", "int") if bits == 32 else ("Long.parseLong", "long")
    if not isinstance(value, str) or not _JAVA_INT.fullmatch(value):
        raise MessageIllegalError(field, f"{value!r} is not an integer ({name})", None)
    n = int(value)
    hi = (1 << (bits - 1)) - 1
    if not -hi - 1 <= n <= hi:
        raise MessageIllegalError(field, f"{value} is outside Java's {kind} range", hi)
    return n


def rewrite_delay(msg, max_level: int) -> bool:
    """CommitLog.putMessage's delay branch on a ``Message``: True when the message was moved to the schedule topic.

    A message whose transaction type is NOT or COMMIT (a prepared or rollback message never is delayed) with a DELAY
    property above 0 goes to SCHEDULE_TOPIC_XXXX, queue level - 1; a level above ``max_level`` becomes
    ``max_level`` (the DELAY property too, as setDelayTimeLevel does); REAL_TOPIC and REAL_QID keep where it was
    headed. A DELAY that Integer.parseInt refuses raises MessageIllegalError (field ``properties[DELAY]``) and
    leaves the message as it was.
    """
    if msg.sys_flag & TRANSACTION_TYPE_MASK not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
        return False
    if msg.topic == SCHEDULE_TOPIC:
        return False        # rewritten already (Java would rewrite again and lose the real topic)
    props = msg.properties
    raw = props.get(PROPERTY_DELAY) if props else None
    if raw is None:
        return False
    level = parse_java_int(raw, f"properties[{PROPERTY_DELAY}]")
    if level <= 0:
        return False
    if max_level < 1:
        raise MessageIllegalError(f"properties[{PROPERTY_DELAY}]", "the store has no delay levels "
                                  "(message_delay_level is empty)", max_level)
    if level > max_level:
        level = max_level
        props[PROPERTY_DELAY] = str(level)
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    msg.topic = SCHEDULE_TOPIC
    msg.queue_id = delay_level_to_queue_id(level)
    return True


# -- delayOffset.json -------------------------------------------------------------------------------------------

def read_fastjson(text: str, path: str):
    """Parse the text fastjson writes (bare integer map keys: ``{1:0,2:35}``, which Python's json refuses);
    StoreLayoutError naming the file when it is not."""
    try:
        return fastjson.loads(text)
    except fastjson.FastjsonDecodeError as e:
        raise StoreLayoutError(f"{path}: not the JSON fastjson writes: {e}") from None


def decode_delay_offsets(text: str, path: str) -> dict[int, int]:
    """DelayOffsetSerializeWrapper → {level: offset}; every key an int level, every value an offset >= 0."""
    return _decode_delay_document(text, path)[0]


def _decode_delay_document(text: str, path: str):
    # (offset table, the rest of the document: 5.x's dataVersion, kept as it was when the table is written back)
    data = read_fastjson(text, path)
    if not isinstance(data, dict):
        raise StoreLayoutError(f"{path}: top level must be an object, got {type(data).__name__}")
    table = data.get("offsetTable", {})
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise StoreLayoutError(f"{path}: offsetTable must be an object, got {type(table).__name__}")
    out = {}
    for k, v in table.items():
        try:
            level = int(k)
        except ValueError:
            raise StoreLayoutError(f"{path}: offsetTable key {k!r} is not a delay level") from None
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < (1 << 63):
            raise StoreLayoutError(f"{path}: offsetTable[{level}] = {v!r} is not a queue offset (0 .. 2^63-1)")
        out[level] = v
    return out, {k: v for k, v in data.items() if k != "offsetTable"}


def encode_delay_offsets(table: dict[int, int], rest: dict | None = None, pretty: bool = True) -> str:
    """fastjson's pretty form of DelayOffsetSerializeWrapper (ConfigManager.persist encodes pretty), as the Java
    broker writes it (rmqcore.fastjson): bare integer keys, fields sorted; ``rest`` holds other fields read with
    the table (5.x's dataVersion). ``pretty`` False: the compact form (ScheduleMessageService.encode(), what a
    master answers GET_ALL_DELAY_OFFSET with)."""
    return fastjson.dumps(dict(rest or {}, offsetTable={int(k): int(v) for k, v in table.items()}), pretty=pretty)


def write_config_file(path: str, text: str) -> None:
    """MixAll.string2File, crash-safe (rmqcore.config_manager): the old or the new file at every instant, the
    previous version kept as ``.bak``."""
    string2file(text, path)


def load_config_file(path: str, decode):
    """ConfigManager.load: the file, or its ``.bak`` when the file is missing or unreadable (logged); None when
    neither exists. Raises StoreLayoutError when what exists cannot be read (never an emptied table)."""
    errors = []
    for candidate in (path, path + ".bak"):
        try:
            # file2string: a directory or fifo in the file's place is an error naming it, not a hang or a raw
            # IsADirectoryError, and no descriptor is left open.
            text = file2string(candidate)
        except ConfigFileError as e:
            errors.append(str(e))
            continue
        if text is None:
            continue
        if not text.strip():
            errors.append(f"{candidate}: empty")
            continue
        try:
            value = decode(text, candidate)
        except StoreLayoutError as e:
            errors.append(str(e))
            continue
        if candidate != path:
            log.warning("%s is %s; loaded its backup %s", path, "unreadable" if errors else "missing", candidate)
        return value
    if errors:
        raise StoreLayoutError("; ".join(errors))
    return None


def flush_past(store, end: int) -> bool:
    """True once the commitlog is on disk below ``end``. Asks MessageStore.wait_flushed again while each call
    makes progress: with ASYNC_FLUSH one call may stop at a file boundary."""
    last = -1
    while not store.wait_flushed(end):
        where = store.commit_log.flushed_where
        if where <= last:
            return False
        last = where
    return True


def put_in_order(store, batch) -> tuple[int, int, int]:
    """Re-put ``batch`` in order through ``store.put_delivered`` (the store's topic rule, as RocketMQ's delivery
    puts through its store, not the broker's send check); when the store refuses a message as illegal (the whole
    batch is then refused), one by one, logging and skipping the illegal ones. Returns (how many leading messages
    are done, commitlog end of the last one put, how many were skipped as illegal); it stops at the first put that
    does not answer PUT_OK, so that one and the rest are retried."""
    try:
        results = store.put_delivered(batch)
    except MessageIllegalError:
        done = end = illegal = 0
        for msg in batch:
            try:
                r = store.put_delivered([msg])[0]
            except MessageIllegalError as e:
                log.error("re-put to %s/%d refused by the store (%s); skipped", msg.topic, msg.queue_id, e)
                illegal += 1
                done += 1
                continue
            if r.status is not PutStatus.PUT_OK:
                break
            end = r.commitlog_offset + r.wrote_bytes
            done += 1
        return done, end, illegal
    done = 0
    for r in results:
        if r.status is not PutStatus.PUT_OK:
            break
        done += 1
    end = results[done - 1].commitlog_offset + results[done - 1].wrote_bytes if done else 0
    return done, end, 0


def redeliver(svc, units, per_message, *, timer: bool = False) -> int:
    """Re-put the messages of ``units`` (consume-queue units of the schedule topic, or of the timer topic with
    ``timer``) in order → how many leading units are done (all of them unless a put failed). Runs of records are
    rebuilt in C straight into ``svc._encoded`` (an EncodeBuffer; ``svc._topics`` interns the real topics) and
    appended in one call (rmqcore._schedule.time_up_into, MessageStore.put_encoded): no Python object per
    message. A run time_up_into leaves to the per-message path goes to ``per_message(units, files, file_size)``,
    which returns None when all of them are done, else the index of the first one not done. ``svc.delivered`` and
    ``svc._delivered_end`` count the bulk puts (the per-message path counts its own). Shared by the delay levels
    (ScheduleMessageService) and the timer wheel (rmqcore.timer)."""
    store = svc.store
    encoder = store.commit_log.encoder
    files = store.commit_log.mapped_file_queue.mapped_files
    file_size = store.config.mapped_file_size_commit_log
    raw_units = units.view(np.uint8)
    n = len(units)
    unit_of = np.empty(n, np.int64)
    i = 0
    while i < n:
        nxt, slow = time_up_into(svc._encoded, raw_units, i, files, file_size, encoder.store_host_bytes,
                                 encoder.max_message_size, encoder.append_prop_crc, encoder.reroute is not None,
                                 encoder.uniq_keys, unit_of, svc._topics, timer=timer)
        if not slow and len(svc._encoded):
            try:
                failed = _put_encoded(svc, unit_of)
            except MessageIllegalError:      # a record longer than a commitlog file: told apart one by one
                slow = True
            else:
                if failed is not None:
                    return failed
        if slow:
            failed = per_message(units[i:nxt], files, file_size)
            if failed is not None:
                return i + failed
        i = nxt
    return n


def _put_encoded(svc, unit_of):
    """Append ``svc._encoded``; None when every record went in, else the unit index of the first that did not (no
    commitlog file could be made)."""
    eb = svc._encoded
    k = len(eb)
    result = np.empty((k, 4), np.int64)
    svc.store.put_encoded(eb, result)
    written = result[:, 1] >= 0
    ok = k if written.all() else int(np.argmin(written))
    if ok:
        svc.delivered += ok
        svc._delivered_end = max(svc._delivered_end, int(result[ok - 1, 1] + result[ok - 1, 3]))
    return None if ok == k else int(unit_of[ok])


# -- what was done after the last persist ------------------------------------------------------------------------

def scan_commitlog(store, start: int, mode: int, batch: int = 65536):
    """The facts (rmqcore._schedule's ``FACT_*`` columns) of the records from commitlog offset ``start`` to the end
    that ``mode`` (``PROVENANCE_*``) asks for, as int64 arrays of rows in commitlog order. The walk is in C; a file
    is left at its blank tail or at a record that does not parse (recovery truncated the log at the first bad
    record, so that is the end of the data)."""
    out = np.empty((batch, FACT_COLUMNS), np.int64)
    for mf in store.commit_log.mapped_file_queue.mapped_files:
        base = mf.file_from_offset
        if base + mf.file_size <= start:
            continue
        view = mf.select(0)
        if view is None:
            continue
        pos = max(0, start - base)
        while pos < len(view):
            rows, pos, code = scan_provenance(view, base, pos, mode, out)
            if rows:
                yield out[:rows].copy()
            if code != 1:
                break
        del view


def persisted_at(path: str) -> int | None:
    """When a progress file (or its .bak, whichever is older) was last written, in ms; None when neither exists.
    What it holds was taken at most a persist's duration before that."""
    times = []
    for candidate in (path, path + ".bak"):
        try:
            times.append(os.stat(candidate).st_mtime_ns // 1_000_000)
        except OSError:
            pass
    return min(times) if times else None


def read_units(cq, start: int, count: int):
    """Up to ``count`` units of ``cq`` from ``start`` (across its files) as one array; None when there are none."""
    parts, n, dtype = [], 0, None
    while n < count:
        units = cq.get_units(start + n, count - n)
        if units is None or len(units) == 0:
            break
        dtype = units.dtype
        parts.append(units.view(np.uint8).copy())      # as bytes: concatenate would make them native-endian
        n += len(units)
    return np.concatenate(parts).view(dtype) if parts else None


def fact_hashes(facts):
    """One 64-bit hash per row of what a re-put keeps from its source (born time, body CRC and length, flag): a
    delivery and the record it came from hash alike, so numpy pairs them before anything is decoded."""
    with np.errstate(over="ignore"):
        h = facts[:, FACT_BORN_TS].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        h ^= facts[:, FACT_BODY_CRC].astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
        h ^= facts[:, FACT_BODY_LEN].astype(np.uint64) * np.uint64(0x165667B19E3779F9)
        h ^= facts[:, FACT_FLAG].astype(np.uint64) * np.uint64(0xFF51AFD7ED558CCD)
    return h


def same_message(copy, source, topic: str | None, queue_id: int | None) -> bool:
    """True when the record ``copy`` is ``source`` re-put (a delivery, a commit): the same body, born time and host,
    flag, reconsume times and UNIQ_KEY, in ``topic`` / ``queue_id`` (None: not compared)."""
    if copy is None or source is None:
        return False
    if topic is not None and (copy.topic != topic or copy.queue_id != queue_id):
        return False
    if (copy.born_timestamp != source.born_timestamp or copy.flag != source.flag
            or copy.reconsume_times != source.reconsume_times or copy.born_host != source.born_host
            or bytes(copy.body) != bytes(source.body)):
        return False
    uniq = source.properties.get("UNIQ_KEY")
    return uniq is None or copy.properties.get("UNIQ_KEY") == uniq


# -- the service ------------------------------------------------------------------------------------------------

def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class ScheduleMessageService:
    """Delivers the messages of SCHEDULE_TOPIC_XXXX when due. Owned by the store (``StoreConfig``'s
    ``schedule_message_service_enable``); tests drive it with an injected ``clock`` (ms) and ``deliver_due()``.

    ``offset_table`` maps level → the next schedule-queue offset to deliver (RocketMQ's offsetTable).
    """

    def __init__(self, store, *, clock=None, flush_delay_offset_interval: int | None = None,
                 batch_size: int = 8192):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        interval = (flush_delay_offset_interval if flush_delay_offset_interval is not None
                    else getattr(store.config, "flush_delay_offset_interval", 10000))
        if interval <= 0:
            raise ValueError(f"flush_delay_offset_interval must be > 0 ms, got {interval}")
        self.store = store
        self.clock = clock or _now_ms
        self.flush_delay_offset_interval = interval
        self.batch_size = batch_size
        self.delay_level_ms = list(store.delay_level_ms)      # index 0 unused, as parseDelayLevel's table
        self.max_delay_level = len(self.delay_level_ms) - 1
        self.offset_table: dict[int, int] = {}
        self.delivered = 0            # messages re-put since start
        self.skipped = 0              # records that could not be re-put (no real topic, half topic): logged
        self.persists = 0
        self.recovered = 0            # deliveries found after the persisted progress at open (recover_progress)
        self._persist_soon = False    # the table moved at load: the delivery thread writes it at once
        self.last_error: str | None = None
        self._lock = threading.Lock()        # one delivery pass at a time (the thread, or a test's deliver_due)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._last_persist = 0.0
        self._delivered_end = 0       # commitlog end of the last re-put: flushed before progress is persisted
        self._next_due: dict[int, int] = {}
        self._encoded = EncodeBuffer()        # due records rebuilt for their real queues, reused by every turn
        self._topics: dict[str, str] = {}     # real topics seen: one str each for the writer's queue table

    @property
    def config_path(self) -> str:
        return os.path.join(self.store.path, "config", DELAY_OFFSET_FILE)

    # -- lifecycle ------------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Read delayOffset.json (or its .bak), then correctDelayOffset: an offset below its queue's min or above
        its max is moved into range (logged)."""
        loaded = load_config_file(self.config_path, _decode_delay_document)
        table, self._document_rest = loaded if loaded is not None else ({}, {})
        self.offset_table = dict(table)
        for level in range(1, self.max_delay_level + 1):
            cq = self.store.find_consume_queue(SCHEDULE_TOPIC, delay_level_to_queue_id(level), create=False)
            current = self.offset_table.get(level)
            if current is None or cq is None:
                continue
            lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
            fixed = min(max(current, lo), hi)
            if fixed != current:
                log.error("delay level %d: offset %d outside its queue [%d, %d], corrected to %d", level, current,
                          lo, hi, fixed)
                self.offset_table[level] = fixed
        self._loaded = True
        # Every open, not only after a crash: an open with the service off (a tool, an inspection) may have ended
        # cleanly in between, and after a clean shutdown the walk is short (see recover_progress).
        try:
            self.recovered = self.recover_progress()
        except (RmqStoreError, OSError) as e:
            # Finding them only spares duplicates: without it the persisted progress holds (RocketMQ's behaviour).
            log.error("delay levels: deliveries after delayOffset.json not looked for (%s); they may come again", e)
            self.recovered = 0
        # Written by the first turn of the delivery thread, not here: an open that fails later leaves the file as
        # it found it.
        self._persist_soon = self.recovered > 0

    def _written_before(self, when_ms: int) -> int:
        """A commitlog offset every record stored at or after ``when_ms`` lies past (0 when none is known): the
        latest schedule record stored before then, found by bisecting each level's queue on its tagsCode."""
        best = 0
        for level in range(1, self.max_delay_level + 1):
            cq = self.store.find_consume_queue(SCHEDULE_TOPIC, delay_level_to_queue_id(level), create=False)
            if cq is None:
                continue
            cut = when_ms + self.delay_level_ms[level]          # tagsCode = store time + the level's delay
            lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue - 1
            found = None
            while lo <= hi:                     # the last unit whose record was stored before ``cut``
                mid = (lo + hi) // 2
                units = cq.get_units(mid, 1)
                if units is None or len(units) == 0:
                    break
                if int(units["tags_code"][0]) < cut:
                    found = int(units["offset"][0])
                    lo = mid + 1
                else:
                    hi = mid - 1
            if found is not None:
                best = max(best, found)
        return best

    def recover_progress(self) -> int:
        """After a crash: move each level's progress past the messages it delivered after delayOffset.json was
        last written (every ``flush_delay_offset_interval`` ms, as in RocketMQ, which re-delivers them all).

        A delivery is the level's record re-put in its real topic and queue with REAL_TOPIC / REAL_QID kept (as
        messageTimeup keeps them) and its body, born time and host, flag and UNIQ_KEY unchanged; a level delivers
        its queue in order, so when unit ``i`` of a level was delivered, every unit before it was done (delivered
        or skipped). The commitlog from the first undelivered unit's record on is walked in C for records that
        carry REAL_TOPIC outside the system topics; they are paired with the levels' next units by a hash of what
        a re-put keeps, then each pair is decoded and compared in full, in commitlog order, each level's units
        taken in order. Returns how many deliveries were found (0 leaves the table as it was).

        Only what the store holds counts: a delivery lost in the crash is not found, so its unit is delivered
        again, never skipped; a record that merely looks like a delivery must match its unit in every field a
        re-put keeps."""
        store = self.store
        files = store.commit_log.mapped_file_queue.mapped_files
        file_size = store.config.mapped_file_size_commit_log
        pending = {}
        for level in range(1, self.max_delay_level + 1):
            cq = store.find_consume_queue(SCHEDULE_TOPIC, delay_level_to_queue_id(level), create=False)
            if cq is None:
                continue
            off = max(self.offset_table.get(level, 0), cq.min_offset_in_queue)
            if off < cq.max_offset_in_queue:
                pending[level] = (cq, off)
        if not pending:
            return 0
        # A delivery is appended after the record it re-puts: nothing before the first pending unit's record is one.
        # Nor before the moment the first pending unit fell due (a delivery's store time is at or after its unit's
        # time): the levels' own units say where the commitlog was then (their tagsCode is store time + delay).
        firsts, due = [], []
        for level, (cq, off) in pending.items():
            units = cq.get_units(off, 1)
            if units is not None and len(units):
                firsts.append(int(units["offset"][0]))
                due.append(int(units["tags_code"][0]))
        if not firsts:
            return 0
        since = min(due)
        written = persisted_at(self.config_path)
        if written is not None:
            # Nor before the table was taken: every delivery it does not count came after that.
            since = max(since, written - PERSIST_SLACK_MS)
        start = max(min(firsts), self._written_before(since - RECOVERY_CLOCK_SLACK_MS))
        found = [rows for rows in scan_commitlog(store, start, PROVENANCE_DELAYED)]
        if not found:
            return 0
        copies = np.concatenate(found)
        # A level delivers at most one message per unit: the pending units worth looking at are as many as the
        # candidate deliveries (plus room for units skipped without a delivery). The walk also meets deliveries of
        # units the table counts already: as many units before the persisted offset are paired too, so that such
        # a delivery pairs with its own unit, never with a later unit that is the same message sent twice (a
        # producer's retry), which would then be taken for delivered.
        window = len(copies) + 1024
        levels, indexes, sources, firsts = [], [], [], {}
        for level, (cq, off) in pending.items():
            first = max(cq.min_offset_in_queue, off - len(copies))
            units = read_units(cq, first, min(off - first + window, cq.max_offset_in_queue - first))
            if units is None:
                continue
            firsts[level] = first
            facts = np.empty((len(units), FACT_COLUMNS), np.int64)
            record_keys(units.view(np.uint8), files, file_size, facts)
            ok = facts[:, FACT_SIZE] >= 0
            idx = np.flatnonzero(ok)
            levels.append(np.full(len(idx), level, np.int64))
            indexes.append(idx)
            sources.append(facts[ok])
        if not sources:
            return 0
        src_level = np.concatenate(levels)
        src_index = np.concatenate(indexes)
        src = np.concatenate(sources)
        src_hash = fact_hashes(src)
        order = np.argsort(src_hash, kind="stable")
        sorted_hash = src_hash[order]
        copy_hash = fact_hashes(copies)
        maybe = np.flatnonzero(np.isin(copy_hash, sorted_hash))
        lo = np.searchsorted(sorted_hash, copy_hash[maybe], "left")
        hi = np.searchsorted(sorted_hash, copy_hash[maybe], "right")
        done = {level: 0 for level in firsts}         # units paired per level, from its first unit looked at
        found_n = 0
        for k, a, b in zip(maybe.tolist(), lo.tolist(), hi.tolist()):
            phys = int(copies[k, FACT_PHYS])
            # The candidates: each level's first unit not yet paired, whose record lies before this one.
            best = {}
            for j in order[a:b].tolist():
                level, i = int(src_level[j]), int(src_index[j])
                if i >= done[level] and src[j, FACT_PHYS] < phys and (level not in best or i < best[level][0]):
                    best[level] = (i, j)
            if not best:
                continue
            copy = store.commit_log.look_message(phys)
            for level, (i, j) in sorted(best.items(), key=lambda e: src[e[1][1], FACT_PHYS]):
                source = store.commit_log.look_message(int(src[j, FACT_PHYS]))
                props = source.properties if source is not None else {}
                try:
                    qid = parse_java_int(props.get(PROPERTY_REAL_QUEUE_ID), PROPERTY_REAL_QUEUE_ID)
                except MessageIllegalError:
                    continue
                topic = props.get(PROPERTY_REAL_TOPIC)
                if (same_message(copy, source, topic, qid)
                        and copy.properties.get(PROPERTY_REAL_TOPIC) == topic
                        and copy.properties.get(PROPERTY_REAL_QUEUE_ID) == props.get(PROPERTY_REAL_QUEUE_ID)):
                    done[level] = i + 1
                    found_n += firsts[level] + i >= pending[level][1]
                    break
        for level, n in done.items():
            before = pending[level][1]
            after = firsts[level] + n
            if after > before:
                self.offset_table[level] = after
                log.warning("delay level %d: %d units at and after offset %d were delivered after delayOffset.json "
                            "was written (found in the commitlog); progress %d -> %d", level, after - before,
                            before, before, after)
        return found_n

    def start(self) -> None:
        if self._started:
            return
        if not self._loaded:
            self.load()
        self._started = True
        self._stop.clear()
        self._last_persist = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="ScheduleMessageTimerThread", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop delivering, then persist the progress (the store must still be open)."""
        if not self._started:
            return
        self._started = False
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.persist()

    def wakeup(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            wait_ms = DELAY_FOR_A_WHILE_MS
            try:
                self.deliver_due()
                now = self.clock()
                pending = [t - now for t in self._next_due.values() if t is not None]
                if pending:
                    wait_ms = max(1, min(wait_ms, min(pending)))
                if self._persist_soon or \
                        (time.monotonic() - self._last_persist) * 1000 >= self.flush_delay_offset_interval:
                    self.persist()
                    self._persist_soon = False
            except StoreClosedError:
                if self._stop.is_set() or self.store._closed:
                    return
                wait_ms = 10            # the store is still opening: it takes puts once open() returns
            except Exception as e:              # keep delivering: log and retry after a period, as Java does
                self.last_error = f"{type(e).__name__}: {e}"
                log.exception("schedule delivery failed")
                wait_ms = 10000 if not self._stop.is_set() else 0
            self._wake.wait(wait_ms / 1000)
            self._wake.clear()

    # -- delivery ---------------------------------------------------------------------------------------------

    def deliver_due(self) -> int:
        """One turn over every level: re-put what is due now (at most ``batch_size`` per level per call, repeated
        while a level fills its batch). Returns how many messages were delivered."""
        total = 0
        with self._lock:
            for level in range(1, self.max_delay_level + 1):
                while not self._stop.is_set():
                    n, full = self._deliver_level(level)
                    total += n
                    if not full:
                        break
        return total

    def _deliver_level(self, level: int) -> tuple[int, bool]:
        """DeliverDelayedMessageTimerTask.executeOnTimeup for one level → (delivered, batch was full)."""
        store = self.store
        cq = store.find_consume_queue(SCHEDULE_TOPIC, delay_level_to_queue_id(level), create=False)
        self._next_due[level] = None
        if cq is None:
            return 0, False
        offset = self.offset_table.get(level, 0)
        units = cq.get_units(offset, self.batch_size)
        if units is None or len(units) == 0:
            lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
            if offset < lo or offset > hi:
                fixed = lo if offset < lo else hi
                log.error("delay level %d: offset %d outside its queue [%d, %d], moved to %d", level, offset, lo,
                          hi, fixed)
                self.offset_table[level] = fixed
            return 0, False
        now = self.clock()
        deliver_at = units["tags_code"].astype(np.int64)
        # correctDeliverTimestamp: a time further ahead than the level's delay (the clock went back) is due now.
        due = (deliver_at <= now) | (deliver_at > now + self.delay_level_ms[level])
        n_due = len(units) if due.all() else int(np.argmin(due))
        if n_due == 0:
            self._next_due[level] = int(deliver_at[0])
            return 0, False
        if n_due < len(units):
            self._next_due[level] = int(deliver_at[n_due])
        fetched = len(units)
        units = units[:n_due]
        delivered_before = self.delivered
        delivered_units = self._deliver_units(level, units)
        if delivered_units < n_due:
            # Progress stops at the first message whose put failed: it is retried on the next turn.
            self._next_due[level] = now + DELAY_FOR_A_WHILE_MS
        del units
        self.offset_table[level] = offset + delivered_units
        # Everything fetched was due and delivered: there may be more right behind (or in the next file).
        return self.delivered - delivered_before, n_due == fetched and delivered_units == n_due

    def _deliver_units(self, level: int, units) -> int:
        """Re-put the real messages of the due ``units`` in order → how many leading units are done (all of them
        unless a put failed): rebuilt in C (``redeliver``), messageTimeup per message (``_time_up``) for records
        that need more than a rebuild."""
        return redeliver(self, units, lambda part, files, file_size:
                         self._deliver_per_message(level, part, files, file_size))

    def _deliver_per_message(self, level: int, units, files, file_size):
        """messageTimeup per message for ``units`` → None when all are done, else the index of the first unit not
        done (its put failed)."""
        n = len(units)
        found = select_messages(units.view(np.uint8), files, file_size, n, 1 << 62, n + 1)[0]
        batch, exts = self._time_up(found, level)
        if not batch:
            return None
        ok = self._put(batch)
        self.delivered += ok
        if ok == len(batch):
            return None
        return int(np.flatnonzero(units["offset"] == exts[ok].commitlog_offset)[0])

    def _time_up(self, found, level):
        """messageTimeup for each due record → (Messages to put, their source records)."""
        batch, exts = [], []
        queue_ids: dict[str, int] = {}      # REAL_QID text → queue id: a level's messages share a few
        for m in found:
            props = m.properties            # parsed for this record only: ours to change
            props.pop(PROPERTY_DELAY, None)
            if PROPERTY_TIMER_DELIVER_MS in props or PROPERTY_TIMER_DELAY_SEC in props:
                props.pop(PROPERTY_TIMER_DELIVER_MS, None)
                props.pop(PROPERTY_TIMER_DELAY_SEC, None)
            topic = props.get(PROPERTY_REAL_TOPIC)
            qid = props.get(PROPERTY_REAL_QUEUE_ID)
            queue_id = queue_ids.get(qid)
            if queue_id is None or topic is None or topic == TRANS_HALF_TOPIC:
                try:
                    if topic is None or qid is None:
                        raise MessageIllegalError("properties", "REAL_TOPIC / REAL_QID missing", None)
                    queue_id = queue_ids[qid] = parse_java_int(qid, f"properties[{PROPERTY_REAL_QUEUE_ID}]")
                except MessageIllegalError as e:
                    self.skipped += 1
                    log.error("delay level %d: record at %d cannot be delivered (%s); skipped", level,
                              m.commitlog_offset, e)
                    continue
                if topic == TRANS_HALF_TOPIC:
                    self.skipped += 1
                    log.error("delay level %d: record at %d names the half topic as its real topic; discarded",
                              level, m.commitlog_offset)
                    continue
            batch.append(Message(topic, m.body, queue_id, None, None, props, flag=m.flag, sys_flag=m.sys_flag,
                                 born_timestamp=m.born_timestamp, born_host=m.born_host,
                                 reconsume_times=m.reconsume_times))
            exts.append(m)
        return batch, exts

    def _put(self, batch) -> int:
        done, end, illegal = put_in_order(self.store, batch)
        self.skipped += illegal
        self.delivered -= illegal          # counted as done (progress moves past them), not as delivered
        self._delivered_end = max(self._delivered_end, end)
        return done

    # -- progress -----------------------------------------------------------------------------------------------

    def persist(self) -> None:
        """Write delayOffset.json, after making sure every re-put it counts as delivered is on disk. Nothing is
        written while the table is empty and no file exists (a store that never saw a delayed message)."""
        with self._lock:
            table = dict(self.offset_table)
            end = self._delivered_end
        if not table and not os.path.exists(self.config_path):
            self._last_persist = time.monotonic()
            return
        if end:
            if not flush_past(self.store, end):
                log.warning("delayOffset.json not persisted: the commitlog did not flush past %d", end)
                return
        write_config_file(self.config_path, encode_delay_offsets(table, getattr(self, "_document_rest", None)))
        self.persists += 1
        self._last_persist = time.monotonic()

    def running_stats(self) -> dict:
        """buildRunningStats: per level "progress,max offset", plus this service's counters."""
        stats = {}
        for level in range(1, self.max_delay_level + 1):
            if level in self.offset_table:
                stats[f"scheduleMessageOffset_{level}"] = (
                    f"{self.offset_table[level]},"
                    f"{self.store.max_offset(SCHEDULE_TOPIC, delay_level_to_queue_id(level))}")
        stats.update(delivered=self.delivered, skipped=self.skipped, persists=self.persists)
        return stats
