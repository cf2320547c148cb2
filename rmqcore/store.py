"""MessageStore: RocketMQ's DefaultMessageStore as a Python facade over the Cython core.

Open creates the layout (commitlog/, consumequeue/, index/, checkpoint, abort, lock), takes the lock, loads and
recovers, then starts the services: dispatch (ReputMessageService), flush, consume-queue flush. Puts go to the
commit log; the dispatcher builds consume queues and the index behind it; gets read consume queues and decode
the commitlog records they point at, zero-copy.
"""
from __future__ import annotations

import asyncio
import bisect
import fcntl
import logging
import os
import re
import threading
import time
from concurrent.futures import Future
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._codec import PROPERTIES_MAX_LENGTH, current_millis, java_hash_code
from ._message import Message
from ._pull import (SELECT_FOUND, SELECT_MESSAGE_WAS_REMOVING, SELECT_NO_MATCHED_MESSAGE, look_record,
                    pickup_store_timestamp, query_messages, select_queue)
from ._dispatch import queue_runs
from ._flush import DurablePuts
from .checkpoint import StoreCheckpoint
from .commit_log import END_FILE_MIN_BLANK_LENGTH, CommitLog
from .schedule import (PROPERTY_DELAY, PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, PROPERTY_TIMER_DELAY_SEC,
                       PROPERTY_TIMER_DELIVER_MS, rewrite_delay)
from .timer import rewrite_timer
from .config import StoreConfig
from .clean import CleanFilesService
from .consume_queue import CQ_DTYPE, CQ_STORE_UNIT_SIZE, ConsumeQueue, queue_dirs
from .dispatch import ReputMessageService
from .errors import BrokerRoleError, ReplicaError, StoreClosedError, StoreLayoutError, StoreLockedError
from .mapped_file_queue import clear_tmp_dir
from .geometry import is_store_dir, read_geometry
from .flush import GroupCommitService, PeriodicService
from .index_service import IndexService
from . import recovery
from .message import GetResult
from .status import GetStatus, PutStatus
from .transient_store_pool import TransientStorePool

if TYPE_CHECKING:
    from ._encoder import EncodeBuffer
    from ._message import Message, MessageExt, PutResult

log = logging.getLogger(__name__)
# A topic the encoder takes (TopicValidator's characters, at most 127 bytes): a delayed message's real topic.
_LEGAL_TOPIC = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")

_WAITABLE = (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MATCHED_LOGIC_QUEUE)
_SELECT_STATUS = {SELECT_FOUND: GetStatus.FOUND, SELECT_NO_MATCHED_MESSAGE: GetStatus.NO_MATCHED_MESSAGE,
                  SELECT_MESSAGE_WAS_REMOVING: GetStatus.MESSAGE_WAS_REMOVING}     # the pull loop's codes


def _total_physical_memory() -> int:
    """StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE: the machine's physical memory in bytes (Long.MAX_VALUE's role, never
    suggesting a slave, where it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


TOTAL_PHYSICAL_MEMORY_SIZE = _total_physical_memory()
_UNIT = {"s": 1000, "m": 60 * 1000, "h": 3600 * 1000, "d": 24 * 3600 * 1000}


def parse_delay_levels(spec: str) -> list[int]:
    """messageDelayLevel ("1s 5s 10s ...") → ms per level, index 0 unused (levels start at 1)."""
    out = [0]
    for token in spec.split():
        m = re.fullmatch(r"(\d+)([smhd])", token)
        if not m:
            raise ValueError(f"message_delay_level: bad level {token!r}")
        out.append(int(m.group(1)) * _UNIT[m.group(2)])
    return out


INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


def _int_arg(name: str, value, lo: int, hi: int) -> int:
    """An integer argument headed for a Java int/long field: a ValueError naming it, not an OverflowError from C."""
    if type(value) is int and lo <= value <= hi:      # the common case, without a method call
        return value
    try:
        value = value.__index__()
    except AttributeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None
    if not lo <= value <= hi:
        raise ValueError(f"{name} {value} is outside [{lo}, {hi}]")
    return value


def parse_tag_filter(tags):
    """A subscription: None or "*" (everything), "TagA || TagB", or an iterable of tags → (codes, tags) or None."""
    if tags is None:
        return None
    if isinstance(tags, str):
        if tags.strip() in ("", "*"):
            return None
        items = [t.strip() for t in tags.split("||")]
    else:
        items = [str(t).strip() for t in tags]
    items = {t for t in items if t}
    if not items or "*" in items:
        return None
    return {java_hash_code(t) for t in items}, items


class MessageStore:
    """A RocketMQ store directory, open for reading and writing. Use ``MessageStore.open(path, config)``."""

    _rebuild_from: int | None = None      # set by admin.repair before start(): dispatch again from this offset
    _keep_offset = False                  # set by open: see _get
    _in_memory_max = 1 << 62

    def __init__(self, path: str, config: StoreConfig | None = None, create: bool = True):
        self.path = os.path.abspath(path)
        self.config = config or StoreConfig()
        self.config.validate()
        self.create = create
        # {field: (configured, on disk)} for every file size the existing store fixes differently (see open).
        self.geometry_adopted: dict[str, tuple[int, int]] = {}
        self.transient_store_pool: TransientStorePool | None = None   # set by _load_and_recover when enabled
        self.delay_level_ms = parse_delay_levels(self.config.message_delay_level)
        self._lock_fd: int | None = None
        self._running = False
        self._closed = False
        self._cq_lock = threading.RLock()
        self._commit_lock = threading.Lock()
        self._consume_queues: dict[str, dict[int, ConsumeQueue]] = {}
        self._arrived = threading.Condition()
        self._arrived_waiters = 0       # readers in get_messages' wait (changed under _arrived)
        self._services: list = []
        self.commit_log: CommitLog | None = None
        self.index_service: IndexService | None = None
        self.checkpoint: StoreCheckpoint | None = None
        self.transient_store_pool: TransientStorePool | None = None
        self.reput: ReputMessageService | None = None
        self.group_commit: GroupCommitService | None = None
        self.recovery: dict = {}
        self._start_time = time.time()

    # -- open / close -------------------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], config: StoreConfig | None = None,
             create: bool = True) -> "MessageStore":
        """Open the store at ``path`` (taking its lock, recovering after a crash) and start its services.

        ``path`` must be an existing store, or, with ``create`` (the default), an empty directory or a missing one
        whose parent exists; a non-empty directory that is not a store is refused (StoreLayoutError) and nothing is
        written into it. An existing store keeps the file sizes it was written with: commitlog, consume-queue and
        index sizes are read from its files and override ``config``'s (``runtime_info()["geometry_adopted"]``
        lists each override as configured → on disk). Raises StoreLockedError when the store is open elsewhere.
        Use it as a context manager, or call ``close()``.
        """
        store = cls(os.fspath(path), config, create=create)
        store.start()
        return store

    def _path(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    def _prepare_directory(self) -> None:
        """Refuse what is not a store before writing a byte: a file, a non-empty foreign directory, a path whose
        parent is missing (a typo should not grow a tree), or anything missing or empty when ``create`` is off."""
        path = self.path
        if os.path.exists(path) and not os.path.isdir(path):
            raise StoreLayoutError(f"{path} is not a directory")
        if os.path.isdir(path):
            if is_store_dir(path):
                return
            entries = sorted(os.listdir(path))
            if entries:
                shown = ", ".join(entries[:5]) + (" ..." if len(entries) > 5 else "")
                raise StoreLayoutError(f"{path} is not a message store (no commitlog/, consumequeue/, index/, "
                                       f"checkpoint) and is not empty ({shown}): refusing to write into it")
            if not self.create:
                raise StoreLayoutError(f"{path} is an empty directory, not a message store (create=False)")
            return
        if not self.create:
            raise FileNotFoundError(f"{path}: no such message store (create=False)")
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"{path}: its parent directory {parent} does not exist (only the store "
                                    "directory itself is created)")
        try:
            os.mkdir(path)
        except FileExistsError:        # made by someone else in between: check it again
            self._prepare_directory()

    def _take_lock(self) -> None:
        self._prepare_directory()
        fd = os.open(self._path("lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            # flock, not fcntl record locks: flock locks belong to the open file, so a second open of the same
            # store in this very process is refused too.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(f"{self.path} is already open (its lock file is held by another MessageStore "
                                   "in this or another process)") from None
        self._lock_fd = fd

    def start(self) -> None:
        """Take the lock, load and recover, start the services (``open`` calls it; idempotent)."""
        if self._running:
            return
        if self._closed:
            raise StoreClosedError(f"message store {self.path} was closed; open it again with MessageStore.open")
        self._take_lock()
        try:
            self._load_and_recover()
            self._start_services()
        except BaseException:
            # Whatever failed (a directory where the checkpoint belongs, a full disk, a bad file), the caller sees
            # that error, and the lock, maps, pool and threads taken so far are given back: the next open in this
            # process does not find the store locked. The abort file stays (the next open recovers abnormally),
            # unless the store was closed cleanly before and this open dispatched nothing: then the failure (an
            # unreadable delayOffset.json, say) changed nothing, and the store is left as it was found.
            self._closed = True
            self._stop_services()
            untouched = (self.recovery.get("last_exit_ok", False) and self.reput is not None
                         and self.reput.dispatched == 0)
            self._release_everything(clean=untouched)
            raise
        self._running = True
        self._puts_ok = not self.config.is_slave

    def _load_and_recover(self) -> None:
        # A store is read with the file sizes it was written with, whatever the config says (RocketMQ records
        # them nowhere but in the files): adopt them, and say so in runtime_info.
        geometry = read_geometry(self.path, self.config)
        self.geometry_adopted = geometry.differences(self.config)
        if self.geometry_adopted:
            log.warning("%s was written with other file sizes than configured; using the store's: %s", self.path,
                        ", ".join(f"{k} {v[0]} -> {v[1]}" for k, v in self.geometry_adopted.items()))
            self.config = geometry.apply(self.config)
        cfg = self.config
        self._keep_offset = cfg.is_slave and not cfg.offset_check_in_slave
        self._in_memory_max = TOTAL_PHYSICAL_MEMORY_SIZE * cfg.access_message_in_memory_max_ratio // 100
        # Files a process killed mid-creation left under their temporary names (never in a directory RocketMQ
        # lists: see MappedFile).
        clear_tmp_dir(self.path)
        last_exit_ok = not os.path.exists(self._path("abort"))
        self.checkpoint = StoreCheckpoint(self._path("checkpoint"))
        self.transient_store_pool = None
        if cfg.transient_store_pool_enable and not cfg.sync_flush:
            # RocketMQ's isTransientStorePoolEnable: ASYNC_FLUSH only (a sync put must reach the file anyway).
            # Appends land in preallocated (mlock'ed where allowed) buffers; CommitRealTimeService copies them into
            # the files. Readers and dispatch see a record once it is committed, as in RocketMQ.
            self.transient_store_pool = TransientStorePool(cfg.transient_store_pool_size,
                                                           cfg.mapped_file_size_commit_log)
            self.transient_store_pool.init()
        self.commit_log = CommitLog(self._path("commitlog"), cfg, pool=self.transient_store_pool)
        # CommitLog.putMessage's rewrites: a DELAY level to the schedule topic, a delivery time to the timer topic.
        self.commit_log.encoder.reroute = self._reroute
        self.commit_log.load()
        self._load_consume_queues()
        self.index_service = IndexService(self._path("index"), cfg.max_hash_slot_num, cfg.max_index_num,
                                          checkpoint=self.checkpoint, runway=cfg.index_file_runway)
        self.index_service.load(last_exit_ok, self.checkpoint.index_msg_timestamp)
        self.recovery = recovery.recover(self, last_exit_ok)
        self._reput_from = self.recovery["reput_from"]
        if cfg.is_slave and not last_exit_ok:
            self._cut_unconfirmed_replica_tail()
        if self._rebuild_from is not None:
            # admin.repair deleted consume queues or index files verify found damaged: dispatch again from here
            # (units and keys still on disk are skipped by their repeat checks).
            self._reput_from = min(self._reput_from, max(self._rebuild_from, self.commit_log.min_offset))

    def _cut_unconfirmed_replica_tail(self) -> None:
        """A slave killed while a record arrived in pieces keeps its first piece, and zeros where the rest was to go;
        when the zeros fall in its properties no checksum tells (a 4.x record has only the body's), so recovery may
        keep it as whole. After a crash a slave therefore keeps only what its consume queues cover (records the
        dispatcher saw whole) and fetches the rest again from its master, which sends from the slave's max offset.
        (A clean close cuts a partial tail itself: close.)"""
        cl = self.commit_log
        covered = max([cl.min_offset] + [cq.max_physic_offset for cq in self._all_consume_queues()])
        if covered < cl.max_offset:
            log.warning("slave %s after a crash: commitlog cut from %d to %d (what its consume queues cover); the "
                        "master sends it again", self.path, cl.max_offset, covered)
            self._truncate_commit_log(covered)
            self.recovery["replica_cut_from"] = covered
            self._reput_from = min(self._reput_from, covered)

    def _truncate_commit_log(self, offset: int) -> None:
        mfq = self.commit_log.mapped_file_queue
        mfq.truncate_dirty_files(offset)
        mfq.set_flushed_where(offset)
        self.commit_log.writer.reset()

    def _load_consume_queues(self) -> None:
        root = self._path("consumequeue")
        for topic, qid in queue_dirs(root):
            cq = ConsumeQueue(topic, qid, root, self.config.mapped_file_size_consume_queue,
                              runway=self.config.mapped_file_runway_consume_queue)
            self._consume_queues.setdefault(topic, {})[qid] = cq     # registered first: a failed load releases it
            cq.load()

    def _all_consume_queues(self) -> list[ConsumeQueue]:
        with self._cq_lock:
            return [cq for queues in self._consume_queues.values() for cq in queues.values()]

    def _recover_topic_queue_table(self) -> None:
        table = {}
        min_phy = self.commit_log.min_offset
        for cq in self._all_consume_queues():
            table[(cq.topic, cq.queue_id)] = cq.max_offset_in_queue
            cq.correct_min_offset(min_phy)
        self.commit_log.callback.topic_queue_table = table

    def _start_services(self) -> None:
        cfg = self.config
        with open(self._path("abort"), "w"):
            pass
        self._writer = self.commit_log.writer
        self._sync_flush = cfg.sync_flush
        self._sync_timeout = cfg.sync_flush_timeout / 1000
        self.reput = ReputMessageService(self, self._reput_from)
        # Dispatch everything recovery left behind before the store is handed out, so consume queues and index
        # agree with the commitlog from the first call; then take the queue offsets from the queues.
        units_before = self._count_units()
        keys_before = self._count_keys()
        while self.reput.do_reput():
            pass
        self.recovery["rebuilt_units"] = self._count_units() - units_before
        self.recovery["rebuilt_keys"] = self._count_keys() - keys_before
        # Records this open's dispatch passed over (kept, readable by offset, but their topic or queue id names
        # no directory): how many, and where the first ones are.
        self.recovery["undispatchable"] = self.reput.undispatchable
        self.recovery["undispatchable_offsets"] = list(self.reput.undispatchable_offsets)
        self._recover_topic_queue_table()
        r = self.recovery
        log.info("%s recovery of %s: %d records scanned from offset %d, %d bytes truncated (%s), "
                 "%d consume-queue units and %d index keys rebuilt", "normal" if r["last_exit_ok"] else "abnormal",
                 self.path, r.get("records", 0), r.get("scan_from", 0), r.get("truncated_bytes", 0),
                 r.get("stop", "end of data"), r["rebuilt_units"], r["rebuilt_keys"])
        # Delayed and timed delivery (schedule.py, timer.py): their progress is loaded and checked against the
        # queues before any thread runs, so an unreadable delayOffset.json / timerProgress.json fails the open.
        self.schedule_service = self.timer_service = None
        # A slave delivers nothing itself: its master's deliveries arrive in the commitlog (RocketMQ starts these
        # services on a master only).
        if cfg.schedule_message_service_enable and not cfg.is_slave:
            from .schedule import ScheduleMessageService
            self.schedule_service = ScheduleMessageService(self)
            self.schedule_service.load()
        if cfg.timer_wheel_enable and not cfg.is_slave:
            from .timer import TimerMessageService
            self.timer_service = TimerMessageService(self)
            self.timer_service.load()
        self.reput.start()
        self.group_commit = (GroupCommitService(self.commit_log, self._note_physic_timestamp)
                             if cfg.sync_flush else None)
        if self.group_commit is not None:
            self.group_commit.start()
            self._durable = DurablePuts(self._writer.put, self.group_commit.core, self.group_commit.completer,
                                        self._flush_timed_out, self._sync_timeout)
        if cfg.broker_role == "SYNC_MASTER":
            # CommitLog.submitReplicaRequest: a put answers once a slave has its record (ha_service.ReplicaPuts).
            from .ha_service import ReplicaPuts
            self._replica = ReplicaPuts(self, self._durable if self._durable is not None else self._writer)
            self._durable = self._replica
        self._services = []
        if self.transient_store_pool is not None:
            self._services.append(PeriodicService(
                "CommitRealTimeService", self._commit_commit_log, cfg.commit_interval_commit_log,
                cfg.commit_commit_log_thorough_interval))
        if not cfg.sync_flush:
            self._services.append(PeriodicService(
                "FlushRealTimeService", self._flush_commit_log, cfg.flush_interval_commit_log,
                cfg.flush_commit_log_thorough_interval))
        self.clean_service = CleanFilesService(self)
        self._services += [
            PeriodicService("FlushConsumeQueueService", self._flush_consume_queues,
                            cfg.flush_interval_consume_queue, cfg.flush_consume_queue_thorough_interval),
            PeriodicService("CleanFilesService", self.clean_service, cfg.clean_resource_interval,
                            cfg.clean_resource_interval, final_run=False),
        ]
        for s in self._services:
            s.start()
        for delivery in (self.schedule_service, self.timer_service):    # started last, stopped first: they put
            if delivery is not None:
                delivery.start()

    def _commit_commit_log(self, thorough: bool) -> None:
        mfq = self.commit_log.mapped_file_queue
        least = 0 if thorough else self.config.commit_commit_log_least_pages
        with self._commit_lock:            # CommitRealTimeService, or a caller that needs its puts readable now
            while not mfq.commit(least):   # a full file commits whole, then the next one gets its turn
                pass

    def _flush_commit_log(self, thorough: bool) -> None:
        self.commit_log.flush(0 if thorough else self.config.flush_commit_log_least_pages)
        self._note_physic_timestamp()

    def _note_physic_timestamp(self) -> None:
        # The store time of the last message known flushed: abnormal recovery starts from the file holding it.
        ts = self.commit_log.mapped_file_queue.store_timestamp
        if self.group_commit is not None:      # its C flush loop does not go through the mapped file queue
            ts = max(ts, self.group_commit.store_timestamp)
        if ts > self.checkpoint.physic_msg_timestamp:
            self.checkpoint.physic_msg_timestamp = ts

    def _flush_consume_queues(self, thorough: bool) -> None:
        least = 0 if thorough else self.config.flush_consume_queue_least_pages
        logics_ts = self._last_dispatched_ts
        for cq in self._all_consume_queues():
            cq.flush(least)
        # Moves the checkpoint's indexMsgTimestamp when a full file is flushed (its own thread normally has).
        self.index_service.flush(active=thorough)
        if logics_ts:
            self.checkpoint.logics_msg_timestamp = logics_ts
        if self.group_commit is not None:
            self._note_physic_timestamp()
        if thorough:
            self.checkpoint.flush()

    _last_dispatched_ts = 0

    def close(self) -> None:
        """Stop the services, dispatch what is left, flush everything, delete the abort file, release the lock."""
        if self._closed:
            return
        flush_failed = False
        progress_error = None
        if self.ha_service is not None:     # first: a slave's client appends, a master's connections read the log
            self.ha_service.shutdown()
        for delivery in (getattr(self, "schedule_service", None), getattr(self, "timer_service", None)):
            if delivery is not None:       # persists its progress: needs the store still open
                try:
                    delivery.shutdown()
                except Exception as e:
                    # Its progress file could not be written (a directory in its place, a full disk): the next
                    # open re-delivers from the last persisted progress. The store still closes, and says so.
                    log.error("closing %s: %s could not persist its progress: %s", self.path,
                              type(delivery).__name__, e)
                    progress_error = progress_error or e
        self._closed = True
        was_running, self._running = self._running, False     # puts and gets are refused from here on
        self._puts_ok = False
        with self._arrived:
            self._arrived.notify_all()
        if was_running:
            self.reput.shutdown()
            if self.group_commit is not None:
                self.group_commit.shutdown()
            for s in self._services:
                s.shutdown()
            try:
                self.commit_log.flush(0)
            except OSError as e:
                # Nothing it failed to write was acknowledged; the abort file stays, so the next open checks the
                # commitlog's end record by record instead of trusting it.
                log.error("closing %s: the commitlog's last flush failed: %s", self.path, e)
                flush_failed = True
            if self.config.is_slave and self.reput.last_error is None and \
                    self.reput.reput_from_offset < self.commit_log.max_offset:
                # A record the master had sent only part of: cut, so the next open's log ends on a whole record
                # (recovery cannot always tell a torn 4.x record) and the master sends the record again from there.
                with self.commit_log.put_lock:
                    self._truncate_commit_log(self.reput.reput_from_offset)
            self.checkpoint.physic_msg_timestamp = max(self.checkpoint.physic_msg_timestamp,
                                                       self.commit_log.mapped_file_queue.store_timestamp)
            self._flush_consume_queues(True)
        # Leave the abort file when dispatch could not finish (e.g. no room for a consume-queue file): the next
        # open then recovers abnormally and re-dispatches from the checkpoint instead of trusting the queues.
        dispatched = not was_running or self.reput.behind() == 0
        if not dispatched:
            log.error("closing with %d commitlog bytes not dispatched: the next open will re-dispatch them",
                      self.reput.behind())
        self._release_everything(clean=dispatched and not flush_failed)
        if progress_error is not None:
            raise progress_error

    def _stop_services(self) -> None:
        """Stop the threads a failed start got to start (never raises: the start's own error is the one to see)."""
        for part in [self.reput, self.group_commit, *self._services]:
            if part is None:
                continue
            try:
                part.shutdown()
            except Exception:
                log.exception("stopping %s after a failed open", getattr(part, "name", part))

    def _release_everything(self, clean: bool = False) -> None:
        """Give back what open took: maps, files, the write-buffer pool, the lock. Runs with any subset of the
        parts built (a failed open), and every step runs even when one before it fails: the lock is always
        released. Errors are logged, not raised, so a failed open raises its own error."""
        steps = [cq.close for cq in self._all_consume_queues()]
        if self.index_service is not None:
            steps.append(self.index_service.shutdown)
        if self.commit_log is not None:
            steps.append(self.commit_log.mapped_file_queue.shutdown)
        if self.checkpoint is not None:
            steps.append(self.checkpoint.shutdown)
        if self.transient_store_pool is not None:
            steps.append(self.transient_store_pool.destroy)
        if clean:
            steps.append(self._delete_abort_file)
        steps.append(self._release_lock)
        for step in steps:
            try:
                step()
            except Exception:
                log.exception("releasing %s: %s failed", self.path, getattr(step, "__qualname__", step))

    def _delete_abort_file(self) -> None:
        try:
            os.unlink(self._path("abort"))
        except FileNotFoundError:
            pass

    def _release_lock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_running(self) -> None:
        if self._closed or not self._running:
            raise StoreClosedError(f"message store {self.path} is closed")

    _puts_ok = False    # running and a master: the one flag every put checks (a slave's puts are refused)

    def _check_puts(self) -> None:
        self._check_running()
        if self.config.is_slave:
            # DefaultMessageStore.checkStoreStatus: "message store is slave mode, so putMessage is forbidden"
            # (PutMessageStatus.SERVICE_NOT_AVAILABLE there); raised here so the caller sees why.
            raise BrokerRoleError(f"message store {self.path} is a SLAVE (broker_role): puts are refused; its "
                                  "commitlog takes only what its master sends (append_to_commit_log)")

    # -- put ----------------------------------------------------------------------------------------------------

    def _count_keys(self) -> int:
        with self.index_service.lock:
            return sum(max(0, f.index_count - 1) for f in self.index_service.index_file_list)

    def _count_units(self) -> int:
        return sum(cq.max_offset_in_queue - cq.min_offset_in_queue for cq in self._all_consume_queues())

    def _reroute(self, msg, broker_topic_rule: bool = True) -> None:
        # Called by the encoder only for messages that carry a delay or timer property. A message the schedule or
        # timer service could not deliver later (its real topic illegal, the delivered record too large: under its
        # real topic a record is larger than under the 19-byte schedule topic) is refused now, as RocketMQ's
        # checkMessage refuses it on the real topic before the rewrite, instead of being acknowledged and then
        # skipped at delivery (issue 28). A refused message is left as it was. ``broker_topic_rule`` False: the
        # message is itself a delivery (put_delivered), held to the store's topic rule, and so is its next one.
        topic, queue_id = msg.topic, msg.queue_id
        if self._surely_deliverable(topic, msg):
            if self.config.timer_wheel_enable:
                rewrite_timer(msg, current_millis(), self.config.timer_max_delay_sec)
            rewrite_delay(msg, len(self.delay_level_ms) - 1)
            return
        saved = dict(msg.properties)
        timed = False
        if self.config.timer_wheel_enable:
            timed = rewrite_timer(msg, current_millis(), self.config.timer_max_delay_sec)
        delayed = rewrite_delay(msg, len(self.delay_level_ms) - 1)
        if not (timed or delayed):
            return
        # What the delivery will put (ScheduleMessageService.messageTimeup drops DELAY and the 5.x timer fields
        # and keeps REAL_TOPIC/REAL_QID; the wheel's convertMessage drops REAL_TOPIC/REAL_QID), checked exactly.
        props = dict(msg.properties)
        for name in ((PROPERTY_DELAY, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC) if delayed
                     else (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID)):
            props.pop(name, None)
        try:
            self.check_delivery(Message(topic, msg.body, queue_id, properties=props, flag=msg.flag,
                                        sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
                                        born_host=msg.born_host, reconsume_times=msg.reconsume_times),
                                broker_topic_rule=broker_topic_rule)
        except BaseException:
            msg.topic, msg.queue_id = topic, queue_id
            msg.properties.clear()
            msg.properties.update(saved)
            raise

    def _surely_deliverable(self, topic: str, msg) -> bool:
        """A cheap bound, on the message before its rewrite, that clears almost every delayed message without
        encoding it again: a legal topic and a record that fits even with every character of its properties at 4
        UTF-8 bytes, plus what the rewrite adds (REAL_TOPIC, REAL_QID, TIMER_OUT_MS), a UNIQ_KEY, the CRC property
        and a header with IPv6 hosts. (A topic outside the broker's rule is left to check_delivery, which knows
        whether the message is a delivery held to the store's rule.)"""
        if type(topic) is not str or _LEGAL_TOPIC.fullmatch(topic) is None:
            return False
        try:
            props_bound = 4 * (sum(len(k) + len(v) + 2 for k, v in msg.properties.items()) + len(topic) + 96) + 84
            body_n = memoryview(msg.body).nbytes
        except TypeError:
            return False          # a property that is not a str, a body that is not a buffer: the encoder says which
        limit = min(self.config.max_message_size,
                    self.config.mapped_file_size_commit_log - END_FILE_MIN_BLANK_LENGTH)
        return props_bound <= PROPERTIES_MAX_LENGTH and body_n + len(topic) + props_bound + 256 <= limit

    _probe_encoder = None

    def check_delivery(self, msg: Message, what: str = "delivery", *, broker_topic_rule: bool = True) -> None:
        """Raise MessageIllegalError (field prefixed ``delivery: ``) when the store would refuse ``msg`` as it
        stands, without the delay/timer rewrite and without writing anything: the checks of a put (topic,
        queue id, properties, record size against max_message_size and the commitlog file) on a scratch copy.
        Used for the message a later delivery will put (a delayed or timed message's real topic) and by the
        broker for a message it will put on its own later (a transaction's commit). ``broker_topic_rule`` False:
        the topic is held to the store's rule only, as put_delivered holds it."""
        from ._encoder import EncodeBuffer, MessageEncoder
        from .errors import MessageIllegalError
        enc = self._probe_encoder
        if enc is None:
            cfg = self.config
            max_record = min(cfg.max_message_size, cfg.mapped_file_size_commit_log - END_FILE_MIN_BLANK_LENGTH)
            enc = MessageEncoder(cfg.store_host, max_record)
            enc.append_prop_crc = cfg.enabled_append_prop_crc
            self._probe_encoder = enc
        # A copy: the encoder adds a UNIQ_KEY to the properties it is given.
        copy = Message(msg.topic, msg.body, msg.queue_id, properties=dict(msg.properties or {}), flag=msg.flag,
                       sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                       reconsume_times=msg.reconsume_times)
        try:
            enc.encode_into(copy, EncodeBuffer(), None, broker_topic_rule)
        except MessageIllegalError as e:
            raise MessageIllegalError(f"{what}: {e.field}" if what else e.field, str(e).split(": ", 1)[-1],
                                      e.limit, e.status) from None

    def check_put(self, msg: Message) -> None:
        """Raise MessageIllegalError when ``put(msg)`` would be refused now or when its delayed or timed delivery
        would be; writes nothing and leaves ``msg`` as it was. For a caller that must answer a refusal before it
        changes any state of its own (the broker's send-back creates a retry topic only for a message the store
        takes)."""
        copy = Message(msg.topic, msg.body, msg.queue_id, properties=dict(msg.properties or {}), flag=msg.flag,
                       sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                       reconsume_times=msg.reconsume_times)
        if copy.properties:
            self._reroute(copy)          # refuses what its delivery would not store
        self.check_delivery(copy, "")

    def append_to_commit_log(self, offset: int, data) -> int:
        """A slave's append (RocketMQ's DefaultMessageStore.appendToCommitLog): ``data``, bytes of the master's
        commitlog from its physical ``offset``, written raw (not re-encoded) at the same offset of this store's
        commitlog through the write path every put takes (write position, runway, flush, checkpoint). The bytes
        need not end on a record: the dispatcher builds consume queues and index from complete records only, and
        a record that arrives in pieces is dispatched once its last piece is here. Returns the new max offset.

        ReplicaError (nothing written) when the bytes do not continue this log: ``offset`` is not its max offset
        (an empty log takes any file start), or they would cross one of its file ends (a master never sends across
        its own file end, so its commitlog file size differs). BrokerRoleError when the store is not a SLAVE."""
        self._check_running()
        if not self.config.is_slave:
            raise BrokerRoleError(f"message store {self.path} is a {self.config.broker_role} (broker_role): only a "
                                  "SLAVE appends a master's bytes")
        view = memoryview(data).cast("B")
        n = len(view)
        cl = self.commit_log
        mfq = cl.mapped_file_queue
        size = mfq.mapped_file_size
        with cl.put_lock:
            end = mfq.get_max_wrote_position()
            if mfq.last() is None:
                if offset < 0 or offset % size:
                    raise ReplicaError(f"master bytes at offset {offset}: an empty commitlog starts at a file start "
                                       f"(a multiple of mapped_file_size_commit_log {size}); the master's commitlog "
                                       "file size differs from this store's", offset, end)
            elif offset != end:
                raise ReplicaError(f"master bytes at offset {offset} do not continue this commitlog, which ends at "
                                   f"{end}", offset, end)
            if n == 0:
                return end
            if offset % size + n > size:
                raise ReplicaError(f"master bytes at offset {offset}, {n} long, cross this commitlog's file end at "
                                   f"{offset - offset % size + size}: the master's commitlog file size differs from "
                                   f"mapped_file_size_commit_log {size} (a master never sends across its file end)",
                                   offset, end)
            mf = mfq.get_last_mapped_file(offset)
            if mf is None:
                raise OSError(f"commitlog file for offset {offset} could not be made (disk full?)")
            if not mf.append(view):         # checked above; a file that is not where the offset says
                raise ReplicaError(f"master bytes at offset {offset} do not fit commitlog file {mf.file_name}",
                                   offset, end)
            # The physic timestamp the checkpoint keeps: that of the last record dispatched, no later than these
            # bytes' records, so an abnormal recovery starts early enough.
            if self._last_dispatched_ts > mf.store_timestamp:
                mf.set_store_timestamp(self._last_dispatched_ts)
            end = offset + n
        if self.group_commit is not None:
            self.group_commit.core.request(end)     # SYNC_FLUSH: flushed (and readable) by the group commit
        self.reput.wakeup()
        return end

    def put(self, msg: Message) -> PutResult:
        """Store one message. Returns a PutResult (with SYNC_FLUSH only once a flush covers it, or
        FLUSH_DISK_TIMEOUT, unless the message's WAIT property is "false": see wait_flushed); raises
        MessageIllegalError (nothing written) for a message RocketMQ refuses."""
        if not self._puts_ok:
            self._check_puts()
        if self._durable is None:
            return self._writer.put(msg)        # counted, and the dispatcher woken, by the writer (in C)
        return self._durable.put(msg)

    _durable = None     # SYNC_FLUSH: put, put_async and aput below this frame (rmqcore._flush.DurablePuts)
    _replica = None     # SYNC_MASTER: the same, waiting for a slave after the flush (ha_service.ReplicaPuts)
    ha_service = None   # start_ha: the master's HAService or the slave's HAClient

    def start_ha(self, host: str = "127.0.0.1", port: int | None = None, master_address: str | None = None):
        """Start replication for this store's broker_role (RocketMQ's DefaultMessageStore starts its HAService
        with the store; here it is asked for, so a store opened for other work binds no port). A master
        (ASYNC_MASTER, SYNC_MASTER) listens on ``host:port`` (default ha_listen_port; 0: a free one, see
        ``ha_service.port``) for slaves; a SLAVE connects to ``master_address`` (default ha_master_address;
        ``ha_service.update_master_address`` changes it later) and replicates its commitlog. Returns the service."""
        self._check_running()
        if self.ha_service is not None:
            raise RuntimeError(f"replication of {self.path} is already started")
        from .ha_service import HAClient, HAService
        if self.config.is_slave:
            svc = HAClient(self, master_address)
            svc.start()
        else:
            svc = HAService(self, host, port).start()
        self.ha_service = svc
        return svc

    def put_batch(self, messages: Sequence[Message], *, properties: dict[str, str] | None = None) -> list[PutResult]:
        """Store many messages under one lock and one flush wait; all are validated before any is written.

        ``properties``: properties common to every message of the call (the broker's CLUSTER, say), validated and
        encoded once and copied into each record, as RocketMQ's batch encoder appends a batch's properties to its
        inner messages. Each record is the one put_batch writes after ``msg.properties[name] = value`` for each of
        them in order: the batch's value wins over a message's own, as RocketMQ's reader sees a batch record. The
        messages' dicts are left as they were (but a delayed or timed message's, which its reroute rewrites: it gets
        them set in its dict first). A delay or timer property is refused here (it is per message)."""
        return self._put_batch(messages, properties, True)

    def put_delivered(self, messages: Sequence[Message]) -> list[PutResult]:
        """put_batch for the messages the schedule and timer services deliver to their real topics (rmqcore.schedule
        and rmqcore.timer), held to RocketMQ's store-level topic rule, not the broker's: 1..127 UTF-8 bytes, any
        characters. A delayed or timer message another broker stored may name a topic its own send path took
        (``支付``, ``odd topic.v1``) that ^[%|a-zA-Z0-9_-]+$ refuses; RocketMQ's delivery re-puts it through
        DefaultMessageStore.putMessage, which checks the length only (4.9.7 checkMessage; 5.x
        HookUtils.checkBeforePutMessage), and so does this. A topic that names no directory (``a/b``) is stored
        all the same and kept undispatchable, as every such record. Every other check of a put applies; sends
        (put, put_batch, put_arrow) keep the broker's rule."""
        return self._put_batch(messages, None, False)

    def _put_batch(self, messages, properties, broker_topic_rule: bool) -> list[PutResult]:
        if not self._puts_ok:
            self._check_puts()
        results = self._writer.put_batch(messages, properties, broker_topic_rule)
        if self._sync_flush and results and results[-1].status is PutStatus.PUT_OK:
            wait = properties.get("WAIT") if properties else None      # a batch's WAIT is every message's
            if (wait == "false" if wait is not None
                    else all(m.properties.get("WAIT") == "false" for m in messages)):
                self.group_commit.core.request(results[-1].commitlog_offset + results[-1].wrote_bytes)
                return results
            done = self._wait_flushed(results[-1], True)
            if done is not True:
                results = [r.replace_status(PutStatus.FLUSH_DISK_TIMEOUT) if r.ok else r for r in results]
        if self._replica is not None and results:
            wait = properties.get("WAIT") if properties else None
            results = self._replica.settle(results, wait != "false" if wait is not None else
                                           not all(m.properties.get("WAIT") == "false" for m in messages))
        # The dispatcher is not woken per put: it polls every millisecond (as RocketMQ's reput service sleeps
        # 1 ms), so records that arrive together are dispatched together.
        return results

    def put_arrow(self, data: Any) -> Any:
        """Store the rows of a pyarrow RecordBatch or Table in one call, no Python object per message (columns and
        result: rmqcore.columnar): the records and offsets put_batch would give for the same messages. Returns a
        RecordBatch with status, commitlog_offset, queue_offset, wrote_bytes, store_timestamp and uniq_key per row.
        Every row is checked before any is written (MessageIllegalError names the column and row). SYNC_FLUSH:
        returns once a flush covers the last row (else its rows say FLUSH_DISK_TIMEOUT)."""
        if not self._puts_ok:
            self._check_puts()
        result = self.commit_log.put_arrow(data, self.put_batch)
        n = result.num_rows
        if self._sync_flush and n:
            import pyarrow.compute as pc
            ends = pc.add(result.column("commitlog_offset"), result.column("wrote_bytes").cast("int64"))
            end = pc.max(ends).as_py()
            if end > 0 and not self.group_commit.wait_flushed(end, self._sync_timeout):
                status = result.column("status").cast("string")
                timed_out = pc.if_else(pc.equal(status, PutStatus.PUT_OK.name), PutStatus.FLUSH_DISK_TIMEOUT.name,
                                       status).dictionary_encode()
                result = result.set_column(0, "status", timed_out)
        return result

    def put_encoded(self, encoded: EncodeBuffer, result: np.ndarray) -> None:
        """Append records already encoded into an EncodeBuffer (rmqcore._schedule.time_up_into: delayed messages
        coming due) through the writer's path for encoded rows, as put_arrow appends its rows: queue offsets,
        dispatch and index as for put_batch. Row i of ``result`` (an int64 array of at least (len(encoded), 4))
        receives record i's store time, commitlog offset (-1: no file could be made, CREATE_MAPPED_FILE_FAILED),
        queue offset and size. MessageIllegalError (nothing written) when a record does not fit a file.
        SYNC_FLUSH: the flush is asked for, not awaited, as RocketMQ re-puts a due message with waitStoreMsgOK
        false; the caller flushes before it relies on the records being on disk."""
        if not self._puts_ok:
            self._check_puts()
        self._writer.put_arrow_rows(encoded, result)
        n = len(encoded)
        if self._sync_flush and n:
            written = np.flatnonzero(result[:n, 1] >= 0)
            if len(written):
                last = written[-1]
                self.group_commit.core.request(int(result[last, 1] + result[last, 3]))

    def _wait_flushed(self, last, ok_value):
        if self.group_commit.wait_flushed(last.commitlog_offset + last.wrote_bytes, self._sync_timeout):
            return ok_value
        return self._flush_timed_out(last)

    def _flush_timed_out(self, last):
        log.warning("sync flush did not cover offset %d within %d ms%s", last.commitlog_offset,
                    self.config.sync_flush_timeout,
                    f" ({self.group_commit.last_error})" if self.group_commit.last_error else "")
        return last.replace_status(PutStatus.FLUSH_DISK_TIMEOUT)

    def put_async(self, msg: Message) -> Future[PutResult]:
        """Like RocketMQ's asyncPutMessage: the record is appended now; the returned Future completes with the
        PutResult once it is flushed (SYNC_FLUSH) or at once (ASYNC_FLUSH, or WAIT "false")."""
        if not self._puts_ok:
            self._check_puts()
        if self._durable is not None:
            return self._durable.put_async(msg)
        out: Future[PutResult] = Future()
        out.set_result(self._writer.put(msg))
        return out

    def wait_flushed(self, offset: int, timeout: float | None = None) -> bool:
        """True once the commitlog is on disk below ``offset`` (a PutResult's ``commitlog_offset + wrote_bytes``).

        With messages put with the WAIT property "false" (RocketMQ's waitStoreMsgOK off: put returns as soon as
        the record is appended) a producer acknowledges a whole run of puts with one wait for its last record.
        SYNC_FLUSH: waits for the group commit, at most ``timeout`` s (default ``sync_flush_timeout``); False when
        no flush covered ``offset`` in time. ASYNC_FLUSH: flushes now. ``offset`` must not pass the commitlog's end.
        """
        self._check_running()
        # (appended, not readable: under SYNC_FLUSH a record is readable once a flush has committed it)
        end = self.commit_log.mapped_file_queue.get_max_wrote_position()
        if offset > end:
            raise ValueError(f"offset {offset} is beyond the commitlog's end {end}")
        if offset <= self.commit_log.flushed_where:
            return True
        if self.group_commit is not None:
            return self.group_commit.wait_flushed(offset, self._sync_timeout if timeout is None else timeout)
        return self.commit_log.flush(0) >= offset

    def aput(self, msg: Message) -> asyncio.Future[PutResult]:
        """asyncio form of put_async, to await in the running loop: the record is appended now, in the caller
        (which waits for nothing but the put lock), and the future completes in the loop once a flush covers it.
        The completions of one flush reach a loop in one call_soon_threadsafe, not one per message. Raises
        RuntimeError, writing nothing, outside a running loop."""
        if not self._puts_ok:
            self._check_puts()
        if self._durable is not None:
            return self._durable.aput(msg)
        out: asyncio.Future[PutResult] = asyncio.get_running_loop().create_future()
        out.set_result(self._writer.put(msg))
        return out

    def verify(self, progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
        """Check the open store end to end in one linear pass (see recovery.verify_parts); waits for dispatch to
        catch up first. Records put meanwhile by other threads, past what dispatch had done, are not judged
        (``report["judged_to"]``, ``report["not_judged"]``). ``progress(phase, done, total)`` is called as it goes
        (phases "commitlog" in bytes, "consumequeue" in queues, "index" in files)."""
        self._check_running()
        self.wait_dispatched()
        # Puts from other threads may go on: judge what dispatch had done when verify looked (every record below
        # the reput offset has its units and keys; the reput thread moves the offset after applying a batch).
        return recovery.verify_parts(self.commit_log, self._all_consume_queues(), self.index_service, progress,
                                     self.config.message_index_enable, delay_level_ms=self.delay_level_ms,
                                     judged_to=self.reput.reput_from_offset)

    # -- dispatch (called by the ReputMessageService) -----------------------------------------------------------

    def find_consume_queue(self, topic: str, queue_id: int, create: bool = True) -> ConsumeQueue | None:
        """The ConsumeQueue of (topic, queue_id), made on first use unless ``create`` is False (then None)."""
        queues = self._consume_queues.get(topic)
        if queues is not None:
            cq = queues.get(queue_id)
            if cq is not None:
                return cq
        if not create:
            return None
        with self._cq_lock:
            queues = self._consume_queues.setdefault(topic, {})
            cq = queues.get(queue_id)
            if cq is None:
                cq = ConsumeQueue(topic, queue_id, self._path("consumequeue"),
                                  self.config.mapped_file_size_consume_queue,
                                  runway=self.config.mapped_file_runway_consume_queue)
                queues[queue_id] = cq
            return cq

    def _apply_dispatch(self, batch) -> None:
        # No numpy on whole runs here: its ufuncs release and retake the GIL, and under a full-speed producer
        # every retake waits out a switch interval (see _dispatch.queue_runs). The runs that continue their
        # queue's last file were appended by queue_runs itself; these are the others.
        for topic, queue_id, units, queue_offsets, ends, contiguous, last_ts in queue_runs(
                batch, CQ_DTYPE, self.find_consume_queue, self._consume_queues):
            cq = self.find_consume_queue(topic, queue_id)
            # Units the queue already holds (a rebuild after recovery) are a prefix of the run: commitlog order.
            built = cq.max_physic_offset
            start = 0 if ends[0] > built else bisect.bisect_right(ends, built)
            if start:
                cq.repeated_builds += start
                if start == len(units):
                    continue
                units, queue_offsets = units[start:], queue_offsets[start:]
            if contiguous:
                if cq.append_units(units, int(queue_offsets[0]), last_ts) < len(units):
                    # No room for a consume-queue file (disk full): fail the pass so the reput offset stays here and
                    # the units are built on the next try instead of being skipped for good.
                    raise OSError(f"consume queue {topic}/{queue_id} could not take {len(units)} units")
            else:
                for u, qo in zip(units, queue_offsets):
                    cq.put_message_position_info(int(u["offset"]), int(u["size"]), int(u["tags_code"]), int(qo),
                                                 last_ts)
        if self.config.message_index_enable and batch.nkeys:
            self.index_service.build_index_batch(batch)
        self._last_dispatched_ts = batch.last_store_ts
        # Only when a reader waits (most passes have none; the Condition's lock and notify were ~1 us of a pass of
        # a few records). A reader counts itself in before it checks its queue (get_messages), so either it sees
        # these units or this sees it waiting.
        if self._arrived_waiters:
            with self._arrived:
                self._arrived.notify_all()

    # -- get ----------------------------------------------------------------------------------------------------

    def get_messages(self, group: str, topic: str, queue_id: int, offset: int, max_count: int = 32,
                     tags: str | Iterable[str] | None = None,
                     wait: float = 0.0) -> GetResult:
        """Pull up to ``max_count`` messages of one queue from logical ``offset`` (RocketMQ's getMessage, same
        statuses and next_begin_offset). ``tags`` filters by tag ("TagA || TagB"); ``wait`` > 0 long-polls: it
        returns as soon as a message at ``offset`` arrives, or at the timeout."""
        if not (type(queue_id) is int and type(offset) is int and type(max_count) is int        # the common case
                and INT_MIN <= queue_id <= INT_MAX and 0 <= offset <= LONG_MAX and 0 < max_count <= INT_MAX):
            queue_id = _int_arg("queue_id", queue_id, INT_MIN, INT_MAX)
            offset = _int_arg("offset", offset, LONG_MIN, LONG_MAX)
            max_count = _int_arg("max_count", max_count, INT_MIN, INT_MAX)
            if offset < 0:
                raise ValueError(f"offset must be >= 0, got {offset}")
            if max_count <= 0:
                raise ValueError(f"max_count must be > 0, got {max_count}")
        tag_filter = None if tags is None else parse_tag_filter(tags)
        deadline = time.monotonic() + wait if wait > 0 else None
        while True:
            if self._closed or not self._running:
                self._check_running()
            result = self._get(topic, queue_id, offset, max_count, tag_filter)
            if deadline is None or result.status not in _WAITABLE:
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return result
            with self._arrived:
                if self._closed:
                    raise StoreClosedError(f"message store {self.path} closed while waiting")
                self._arrived_waiters += 1
                try:
                    cq = self.find_consume_queue(topic, queue_id, create=False)
                    if cq is None or cq.max_offset_in_queue <= offset:
                        self._arrived.wait(min(remaining, 0.5))
                finally:
                    self._arrived_waiters -= 1

    def _get(self, topic, queue_id, offset, max_count, tag_filter) -> GetResult:
        queues = self._consume_queues.get(topic)          # find_consume_queue(create=False) without its frame
        cq = queues.get(queue_id) if queues is not None else None
        # DefaultMessageStore.nextOffsetCorrection: a SLAVE (offsetCheckInSlave off) never moves a consumer's
        # offset, it may only be behind its master: every corrected next offset is the one asked for.
        keep = self._keep_offset
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, offset if keep else 0, 0, 0)
        # ConsumeQueue's min/max offsets and get_unit_bytes inline: a pull of a few messages (a caught-up consumer)
        # paid more for their frames and the units' memoryview than for reading its messages.
        cq_files = cq.mapped_file_queue
        min_logic = cq.min_logic_offset
        min_offset = min_logic // CQ_STORE_UNIT_SIZE
        max_offset = cq_files.get_max_offset() // CQ_STORE_UNIT_SIZE
        if max_offset == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, offset if keep else 0, min_offset, max_offset)
        if offset < min_offset:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, offset if keep else min_offset, min_offset, max_offset)
        if offset == max_offset:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        if offset > max_offset:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY,
                             offset if keep else min_offset if min_offset == 0 else max_offset, min_offset, max_offset)
        unit_offset = offset * CQ_STORE_UNIT_SIZE
        mf = cq_files.find_mapped_file_by_offset(unit_offset) if unit_offset >= min_logic else None
        cfg = self.config
        codes, exact = tag_filter if tag_filter is not None else (None, None)
        found = None if mf is None else select_queue(
            mf, unit_offset - mf.file_from_offset, self.commit_log.mapped_file_queue._files,   # read only, whole
            cfg.mapped_file_size_commit_log, max_count, cfg.max_transfer_bytes_on_message_in_memory,
            cfg.max_transfer_count_on_message_in_memory, codes, exact)
        if found is None:
            nxt = (unit_offset // cq.mapped_file_size + 1) * cq.mapped_file_size // CQ_STORE_UNIT_SIZE
            return GetResult(GetStatus.OFFSET_FOUND_NULL, offset if keep else nxt, min_offset, max_offset)
        messages, consumed, code, total, max_phy = found
        # DefaultMessageStore.getMessage: the last record looked at lies further behind the commitlog's end than
        # accessMessageInMemoryMaxRatio of memory: it is read from disk, a slave should serve this consumer.
        far = (self.commit_log.max_offset - max_phy) > self._in_memory_max
        return GetResult(_SELECT_STATUS[code], offset + consumed, min_offset, max_offset, messages, total, far)

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The queue's max logical offset: one past its last message (0 for an unknown queue)."""
        self._check_running()
        cq = self.find_consume_queue(topic, queue_id, create=False)
        return cq.max_offset_in_queue if cq is not None else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The queue's first logical offset still readable (-1 for an unknown queue)."""
        self._check_running()
        cq = self.find_consume_queue(topic, queue_id, create=False)
        return cq.min_offset_in_queue if cq is not None else -1

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The queue offset whose message was stored nearest to ``timestamp_ms`` (getOffsetInQueueByTime)."""
        self._check_running()
        timestamp_ms = _int_arg("timestamp_ms", timestamp_ms, LONG_MIN, LONG_MAX)
        cq = self.find_consume_queue(topic, queue_id, create=False)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(timestamp_ms, self.commit_log.mapped_file_queue.mapped_files,
                                              self.config.mapped_file_size_commit_log, self.commit_log.min_offset)

    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        """Store time of the record at ``offset`` read straight from its header, -1 when not readable."""
        self._check_running()
        offset = _int_arg("offset", offset, LONG_MIN, LONG_MAX)
        size = _int_arg("size", size, INT_MIN, INT_MAX)
        if offset < self.commit_log.min_offset:
            return -1
        return pickup_store_timestamp(self.commit_log.mapped_file_queue.mapped_files,
                                      self.config.mapped_file_size_commit_log, offset, size)

    def look_message(self, commitlog_offset: int) -> MessageExt | None:
        """The message whose record starts at ``commitlog_offset``, or None."""
        if self._closed or not self._running:
            self._check_running()
        if type(commitlog_offset) is not int:     # Cython would truncate a float: only ints (and __index__)
            commitlog_offset = _int_arg("commitlog_offset", commitlog_offset, LONG_MIN, LONG_MAX)
        mfq = self.commit_log.mapped_file_queue
        try:
            return look_record(mfq._files, mfq.mapped_file_size, commitlog_offset)
        except OverflowError:
            _int_arg("commitlog_offset", commitlog_offset, LONG_MIN, LONG_MAX)    # names the bad argument
            raise

    def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                      end: int | None = None) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` among their KEYS or as UNIQ_KEY, newest index file first, stored
        between ``begin`` and ``end`` (ms; None: now + 1 s). Hash collisions are filtered out by comparing the key
        itself."""
        if self._closed or not self._running:
            self._check_running()
        # DefaultMessageStore.queryMessage (up to three rounds, see query_messages) in one Cython call over the
        # live file lists: no intermediate offset list, lock or Python frame per round. The call converts the
        # ints itself (an out-of-range one takes the except branch, which names it); other types go through
        # _int_arg first, since Cython would truncate a float.
        if type(max_num) is not int or type(begin) is not int or (end is not None and type(end) is not int):
            begin = _int_arg("begin", begin, LONG_MIN, LONG_MAX)
            end = None if end is None else _int_arg("end", end, LONG_MIN, LONG_MAX)
            max_num = _int_arg("max_num", max_num, LONG_MIN, LONG_MAX)
        index_service = self.index_service
        try:
            return query_messages(index_service.index_file_list, self.commit_log.mapped_file_queue._files,
                                  self.config.mapped_file_size_commit_log, topic, key, max_num, begin, end,
                                  index_service.max_msgs_num_batch)
        except OverflowError:
            _int_arg("begin", begin, LONG_MIN, LONG_MAX)
            if end is not None:
                _int_arg("end", end, LONG_MIN, LONG_MAX)
            _int_arg("max_num", max_num, LONG_MIN, LONG_MAX)
            raise

    # -- information --------------------------------------------------------------------------------------------

    def wait_dispatched(self, timeout: float = 10.0) -> bool:
        """Block until every put so far can be read (by queue and by key): True, or False after ``timeout`` s.
        With the write-buffer pool, and under SYNC_FLUSH (the write ring), the appended bytes are committed to the
        files first (readers see committed bytes only, as in RocketMQ)."""
        self._check_running()
        deadline = time.monotonic() + timeout
        target = self.commit_log.mapped_file_queue.get_max_wrote_position()
        committed = True
        if self.transient_store_pool is not None or self.config.sync_flush:
            try:
                self._commit_commit_log(True)
            except OSError as e:
                # The puts past the committed bytes cannot become readable (none of them was acknowledged): wait
                # for the rest, and say False.
                log.warning("wait_dispatched: commit of %s failed: %s", self.path, e)
                target, committed = self.commit_log.max_offset, False
        while self.reput.reput_from_offset < target:
            if time.monotonic() > deadline:
                return False
            self.reput.wakeup()
            time.sleep(0.0005)
        return committed

    def topics(self) -> dict[str, list[int]]:
        """Every topic with a consume queue, with its queue ids."""
        self._check_running()
        with self._cq_lock:
            return {t: sorted(q) for t, q in self._consume_queues.items()}

    def runtime_info(self) -> dict[str, Any]:
        """Figures of the open store: offsets, files, dispatch and flush state, what recovery found (``recovery``)
        and the file sizes taken from the store instead of the config (``geometry_adopted``)."""
        self._check_running()
        cl = self.commit_log
        mfq = cl.mapped_file_queue
        return {
            "store_path": self.path,
            "commitlog_min_offset": cl.min_offset,
            "commitlog_max_offset": cl.max_offset,
            "commitlog_flushed_offset": self.commit_log.flushed_where,
            "commitlog_files": len(mfq),
            "consume_queues": len(self._all_consume_queues()),
            "index_files": len(self.index_service.index_file_list) if self.index_service else 0,
            "dispatch_behind_bytes": self.reput.behind() if self.reput else 0,
            "dispatch_reput_offset": self.reput.reput_from_offset if self.reput else 0,
            "dispatched_records": self.reput.dispatched if self.reput else 0,
            "dispatch_lag_ms": self.reput.lag_ms if self.reput else 0,
            # Records the writer could not hand the dispatcher (its ring was full): read back from the commitlog.
            "dispatch_ring_dropped": self.reput.ring.dropped if self.reput and self.reput.ring else 0,
            "dispatch_error": self.reput.last_error if self.reput else None,
            # Records dispatch passed over since the open (topic no safe directory name, negative queue id).
            "dispatch_undispatchable": self.reput.undispatchable if self.reput else 0,
            "put_calls": self.commit_log.writer.put_messages,
            "recovery": dict(self.recovery),
            "checkpoint": self.checkpoint.as_dict() if self.checkpoint else {},
            "broker_role": self.config.broker_role,
            "ha": self.ha_service.runtime_info() if self.ha_service is not None else None,
            "flush_disk_type": self.config.flush_disk_type,
            "geometry_adopted": dict(self.geometry_adopted),
            "uptime_s": round(time.time() - self._start_time, 3),
        }
