"""Cleaning: RocketMQ's CleanCommitLogService and CleanConsumeQueueService (DefaultMessageStore, 4.9.7).

CleanCommitLogService deletes commitlog files whose last modification is older than ``file_reserved_time`` hours,
oldest first and never the file being written, when one of these holds:

- it is ``delete_when`` o'clock (local time; "04", or a list "01;04") — UtilAll.isItTimeToDo;
- the disk of the commitlog (or of the consume queues) is used past ``disk_max_used_space_ratio`` % (or the usage
  cannot be measured) — isSpaceToDelete;
- a manual delete was asked for (``execute_delete_files_manually``: the next 20 runs delete).

Only expired files go, even when the disk is filling up, unless the usage passes RocketMQ's forced-clean threshold
``disk_space_clean_forcibly_ratio`` (0.85; system property rocketmq.broker.diskSpaceCleanForciblyRatio): then
files are deleted whatever their age (cleanImmediately, with ``cleanFileForciblyEnable``, on by default). Past
``disk_space_warning_level_ratio`` (0.90) RocketMQ also marks the disk full (RunningFlags) and refuses puts; this
service exposes that verdict as ``disk_full``.

CleanConsumeQueueService then follows the commitlog's new min offset: consume-queue files whose last unit points
below it are deleted (never a queue's last file) and every queue's min offset is corrected, so a get below it
answers OFFSET_TOO_SMALL; index files whose end offset is below it are deleted (never the last one).

Time and disk usage are injectable (``clock``: epoch ms; ``disk_usage``: path → used fraction in [0, 1], or -1
when it cannot be measured, as UtilAll.getDiskPartitionSpaceUsedPercent), so both services can be driven by tests.
``run_once()`` does one pass; the store calls it on a PeriodicService thread (RocketMQ: every
``cleanResourceInterval`` 10 s).
"""
from __future__ import annotations

import logging
import math
import os
import time

log = logging.getLogger(__name__)

MAX_MANUAL_DELETE_FILE_TIMES = 20
DISK_SPACE_WARNING_LEVEL_RATIO = 0.90
DISK_SPACE_CLEAN_FORCIBLY_RATIO = 0.85


def now_millis() -> int:
    return int(time.time() * 1000)


def disk_partition_space_used_percent(path: str) -> float:
    """UtilAll.getDiskPartitionSpaceUsedPercent: the used fraction (0..1, rounded up to the percent) of the
    partition holding ``path``, counting only the space an unprivileged user may use as free; -1 when the path
    does not exist or cannot be measured."""
    if not path or not os.path.exists(path):
        return -1
    try:
        st = os.statvfs(path)
    except OSError:
        return -1
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1
    used = total - st.f_bfree * st.f_frsize
    usable = st.f_bavail * st.f_frsize
    entire = used + usable
    if entire <= 0:
        return -1
    return math.ceil(used * 100 / entire) / 100.0


def parse_delete_when(when: str) -> list[int]:
    """``delete_when`` ("04", "01;04") → hours of the day. RocketMQ parses each with Integer.parseInt."""
    hours = []
    for part in str(when).split(";"):
        part = part.strip()
        if not part:
            continue
        try:
            hour = int(part)
        except ValueError:
            raise ValueError(f"delete_when: {part!r} is not an hour of the day (\"04\" or \"01;04\")") from None
        hours.append(hour)
    return hours


def is_it_time_to_do(when: str, now_ms: int) -> bool:
    """UtilAll.isItTimeToDo: is the local hour of ``now_ms`` one of the hours in ``when``?"""
    hour = time.localtime(now_ms / 1000).tm_hour
    return hour in parse_delete_when(when)


class CleanCommitLogService:
    """``CleanCommitLogService(store, *, clock=None, disk_usage=None, disk_space_warning_level_ratio=0.90,
    disk_space_clean_forcibly_ratio=0.85)``; ``run_once() -> int`` (commitlog files deleted).

    ``store`` needs ``config`` (StoreConfig), ``commit_log`` and ``path``. ``clock()`` returns epoch ms (default
    the wall clock); ``disk_usage(path)`` returns the used fraction of the partition holding ``path`` (default
    :func:`disk_partition_space_used_percent`). ``last_run`` holds what the last pass saw and did.
    """

    def __init__(self, store, *, clock=None, disk_usage=None,
                 disk_space_warning_level_ratio: float = DISK_SPACE_WARNING_LEVEL_RATIO,
                 disk_space_clean_forcibly_ratio: float = DISK_SPACE_CLEAN_FORCIBLY_RATIO):
        self.store = store
        self.clock = clock or now_millis
        self.disk_usage = disk_usage or disk_partition_space_used_percent
        self.disk_space_warning_level_ratio = disk_space_warning_level_ratio
        self.disk_space_clean_forcibly_ratio = disk_space_clean_forcibly_ratio
        parse_delete_when(store.config.delete_when)        # a bad setting fails here, not every 10 s in a thread
        self.manual_delete_file_several_times = 0
        self.clean_immediately = False
        self.disk_full = False
        self.deleted_total = 0
        self.last_run: dict = {}

    # -- paths ----------------------------------------------------------------------------------------------------

    def _existing(self, *parts: str) -> str:
        path = os.path.join(self.store.path, *parts)
        return path if os.path.exists(path) else self.store.path

    @property
    def store_path_physic(self) -> str:
        return self._existing("commitlog")

    @property
    def store_path_logic(self) -> str:
        return self._existing("consumequeue")

    # -- the pass -------------------------------------------------------------------------------------------------

    def execute_delete_files_manually(self) -> None:
        """executeDeleteFilesManually: the next 20 passes delete expired files whatever the hour or the disk."""
        self.manual_delete_file_several_times = MAX_MANUAL_DELETE_FILE_TIMES
        log.info("executeDeleteFilesManually was invoked")

    def run_once(self) -> int:
        """One pass of deleteExpiredFiles; returns how many commitlog files were deleted. Never raises (as the
        scheduled task in RocketMQ): a failure is logged and reported in ``last_run["error"]``."""
        try:
            return self.delete_expired_files()
        except Exception as e:       # a scheduled task must survive its failures
            log.warning("CleanCommitLogService failed: %s", e, exc_info=True)
            self.last_run["error"] = f"{type(e).__name__}: {e}"
            return 0

    def __call__(self, thorough: bool = False) -> None:
        self.run_once()

    def delete_expired_files(self) -> int:
        cfg = self.store.config
        now = self.clock()
        timeup = self.is_time_to_delete(now)
        spacefull = self.is_space_to_delete()
        manual = self.manual_delete_file_several_times > 0
        deleted = 0
        clean_at_once = False
        if timeup or spacefull or manual:
            if manual:
                self.manual_delete_file_several_times -= 1
            clean_at_once = bool(getattr(cfg, "clean_file_forcibly_enable", True)) and self.clean_immediately
            log.info("begin to delete files older than %d hours; timeup: %s spacefull: %s manual: %d "
                     "cleanAtOnce: %s", cfg.file_reserved_time, timeup, spacefull,
                     self.manual_delete_file_several_times, clean_at_once)
            mfq = self.store.commit_log.mapped_file_queue
            deleted = mfq.delete_expired_file_by_time(
                int(cfg.file_reserved_time * 60 * 60 * 1000), cfg.delete_commit_log_files_interval, clean_at_once,
                now_ms=now, batch_max=cfg.delete_file_batch_max)
            if deleted == 0 and spacefull:
                log.warning("disk space will be full soon, but no commitlog file could be deleted")
        self.deleted_total += deleted
        self.last_run.update(now_ms=now, timeup=timeup, spacefull=spacefull, manual=manual,
                             clean_at_once=clean_at_once, deleted=deleted, disk_full=self.disk_full, error=None)
        return deleted

    def is_time_to_delete(self, now_ms: int | None = None) -> bool:
        when = self.store.config.delete_when
        if is_it_time_to_do(when, self.clock() if now_ms is None else now_ms):
            log.info("it's time to reclaim disk space, %s", when)
            return True
        return False

    def _judge(self, ratio: float, what: str) -> None:
        # Sets clean_immediately / disk_full from one partition's usage, as isSpaceToDelete does per path.
        if ratio > self.disk_space_warning_level_ratio:
            if not self.disk_full:
                log.error("%s disk maybe full soon %.2f, so mark disk full", what, ratio)
            self.disk_full = True
            self.clean_immediately = True
        elif ratio > self.disk_space_clean_forcibly_ratio:
            self.clean_immediately = True
        else:
            if self.disk_full:
                log.info("%s disk space OK %.2f, so mark disk ok", what, ratio)
            self.disk_full = False

    def is_space_to_delete(self) -> bool:
        """isSpaceToDelete: is the commitlog's (or else the consume queues') partition used past
        ``disk_max_used_space_ratio`` %? Also decides ``clean_immediately`` (past the forced-clean ratio) and
        ``disk_full`` (past the warning ratio)."""
        ratio = self.store.config.disk_max_used_space_ratio / 100.0
        self.clean_immediately = False
        physic = self.disk_usage(self.store_path_physic)
        self._judge(physic, "physic")
        self.last_run.update(physic_ratio=physic)
        if physic < 0 or physic > ratio:
            log.info("physic disk maybe full soon, so reclaim space, %s", physic)
            return True
        logics = self.disk_usage(self.store_path_logic)
        self._judge(logics, "logics")
        self.last_run.update(logics_ratio=logics)
        if logics < 0 or logics > ratio:
            log.info("logics disk maybe full soon, so reclaim space, %s", logics)
            return True
        return False

    def is_space_full(self) -> bool:
        """isSpaceFull (RocketMQ checks it every 10 s): the commitlog's partition past the warning ratio."""
        physic = self.disk_usage(self.store_path_physic)
        self.disk_full = physic > self.disk_space_warning_level_ratio
        return self.disk_full


class CleanConsumeQueueService:
    """``CleanConsumeQueueService(store)``; ``run_once() -> int`` (consume-queue files deleted).

    ``store`` needs ``commit_log``, ``config``, ``index_service`` and its consume queues (``_all_consume_queues()``).
    Works only when the commitlog's min offset moved since the last pass, as RocketMQ's lastPhysicalMinOffset.
    """

    def __init__(self, store, *, sleep=time.sleep):
        self.store = store
        self.sleep = sleep
        self.last_physical_min_offset = 0
        self.deleted_total = 0
        self.last_run: dict = {}

    def _consume_queues(self) -> list:
        store = self.store
        if hasattr(store, "_all_consume_queues"):
            return store._all_consume_queues()
        return [store.find_consume_queue(t, q, create=False) for t, qs in store.topics().items() for q in qs]

    def run_once(self) -> int:
        try:
            return self.delete_expired_files()
        except Exception as e:
            log.warning("CleanConsumeQueueService failed: %s", e, exc_info=True)
            self.last_run["error"] = f"{type(e).__name__}: {e}"
            return 0

    def __call__(self, thorough: bool = False) -> None:
        self.run_once()

    def delete_expired_files(self) -> int:
        interval = self.store.config.delete_consume_queue_files_interval
        min_offset = self.store.commit_log.min_offset
        deleted = 0
        index_before = index_after = None
        if min_offset > self.last_physical_min_offset:
            self.last_physical_min_offset = min_offset
            for cq in self._consume_queues():
                if cq is None:
                    continue
                n = cq.delete_expired_file(min_offset)
                deleted += n
                if n > 0 and interval > 0:
                    self.sleep(interval / 1000)
            index = getattr(self.store, "index_service", None)
            if index is not None:
                index_before = len(index.index_files)
                index.delete_expired_file(min_offset)
                index_after = len(index.index_files)
        self.deleted_total += deleted
        self.last_run = {"min_offset": min_offset, "deleted": deleted,
                         "index_deleted": (index_before - index_after) if index_before is not None else 0,
                         "error": None}
        return deleted


class CleanFilesService:
    """cleanFilesPeriodically: the commitlog pass, then the consume-queue/index pass.

    ``CleanFilesService(store, *, clock=None, disk_usage=None)``; ``run_once() -> (commitlog files, consume-queue
    files)`` deleted; callable as ``service(thorough)`` so it can be a PeriodicService's work.
    """

    def __init__(self, store, *, clock=None, disk_usage=None, **ratios):
        self.commit_log = CleanCommitLogService(store, clock=clock, disk_usage=disk_usage, **ratios)
        self.consume_queue = CleanConsumeQueueService(store)

    def run_once(self) -> tuple[int, int]:
        return self.commit_log.run_once(), self.consume_queue.run_once()

    def __call__(self, thorough: bool = False) -> None:
        self.run_once()
