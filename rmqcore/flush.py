"""Flush services: background threads that msync what the put path appended.

FlushRealTimeService (async commitlog flush: every ``flush_interval_commit_log`` ms when at least
``flush_commit_log_least_pages`` pages are dirty, everything every ``flush_commit_log_thorough_interval`` ms),
CommitRealTimeService (write buffers → file, with the TransientStorePool) and FlushConsumeQueueService (consume
queues, index files and the checkpoint). The msync itself runs with the GIL released (MappedFile.flush).
"""
from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)


class PeriodicService(threading.Thread):
    """Calls ``work(thorough)`` every ``interval_ms``; ``thorough`` every ``thorough_ms``; once more, thorough, on
    stop when ``final_run`` (flushes must cover everything at shutdown; cleaning need not run then)."""

    def __init__(self, name: str, work, interval_ms: int, thorough_ms: int, final_run: bool = True):
        super().__init__(name=name, daemon=True)
        self._work = work
        self._interval = max(1, interval_ms) / 1000
        self._thorough = thorough_ms / 1000
        self._stop_event = threading.Event()
        self._last_thorough = time.monotonic()
        self._final_run = final_run
        self.errors = 0

    def wakeup(self) -> None:
        pass

    def run(self) -> None:
        while not self._stop_event.wait(self._interval):
            now = time.monotonic()
            thorough = now - self._last_thorough >= self._thorough
            if thorough:
                self._last_thorough = now
            try:
                self._work(thorough)
            except Exception:
                self.errors += 1
                log.exception("%s failed", self.name)

    def shutdown(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join()
        if self._final_run:
            self._work(True)


class GroupCommitRequest:
    """One producer waiting for its record to be on disk; ``future`` completes with True (flushed) or False."""
    __slots__ = ("next_offset", "future")

    def __init__(self, next_offset: int, future):
        self.next_offset = next_offset
        self.future = future


class GroupCommitService(threading.Thread):
    """SYNC_FLUSH: a put waits until a flush covers its record. Requests that arrive while an msync runs are
    served together by the next one, so N producers share one fdatasync instead of paying one each."""

    def __init__(self, commit_log, on_flushed=None):
        super().__init__(name="GroupCommitService", daemon=True)
        self._commit_log = commit_log
        self._on_flushed = on_flushed      # e.g. move the checkpoint's physicMsgTimestamp, as RocketMQ's doCommit
        self._cond = threading.Condition()
        self._requests: list[GroupCommitRequest] = []
        self._stopped = False
        self.flushes = 0
        self.requests_served = 0
        self.last_error: str | None = None
        self.linger = 0.0002

    def put_request(self, request: GroupCommitRequest) -> None:
        with self._cond:
            if self._stopped:
                request.future.set_result(self._commit_log.flushed_where >= request.next_offset)
                return
            self._requests.append(request)
            self._cond.notify()

    def run(self) -> None:
        last_batch = 0
        while True:
            with self._cond:
                while not self._requests and not self._stopped:
                    self._cond.wait()
                if not self._requests and self._stopped:
                    return
                # Producers woken by the previous flush are still coming back with their next record: when that
                # flush served several, linger a moment (a fraction of one fdatasync) so this flush serves them all.
                if last_batch > 1 and len(self._requests) < last_batch and not self._stopped:
                    self._cond.wait(self.linger)
                batch, self._requests = self._requests, []
            last_batch = len(batch)
            self._serve(batch)

    def _serve(self, batch) -> None:
        try:
            flushed = self._commit_log.flush(0)
            self.flushes += 1
            if self._on_flushed is not None:
                self._on_flushed()
        except OSError as e:   # EIO and friends: the waiting puts report FLUSH_DISK_TIMEOUT, nothing is claimed
            self.last_error = f"flush failed: {e}"
            log.error("group commit flush failed: %s", e)
            flushed = self._commit_log.flushed_where
        for req in batch:
            if not req.future.done():
                req.future.set_result(flushed >= req.next_offset)
        self.requests_served += len(batch)

    def shutdown(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self.is_alive():
            self.join()
