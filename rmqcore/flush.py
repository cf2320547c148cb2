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

from ._flush import CALLBACK, FLUSHED, FlushedFutures, GroupCommit

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


class GroupCommitService(threading.Thread):
    """SYNC_FLUSH: a put waits until a flush covers its record, and all puts waiting at that moment share one msync.

    The first waiting put finding no flush running leads one itself; the others wait behind it, all in C without
    the GIL (rmqcore._flush.GroupCommit). This thread leads flushes for requests nobody waits for (WAIT=false,
    put_async, aput); put_async completions are made by a second thread (_FlushedFutures) so no flush waits for
    Python callbacks.
    """

    def __init__(self, commit_log, on_flushed=None):
        super().__init__(name="GroupCommitService", daemon=True)
        self._commit_log = commit_log
        self._on_flushed = on_flushed      # e.g. move the checkpoint's physicMsgTimestamp, as RocketMQ's doCommit
        mfq = commit_log.mapped_file_queue
        flushed = commit_log.flushed_where
        self.core = GroupCommit(flushed, self._flush_all, mfq.find_mapped_file_by_offset(flushed))
        self._futures: _FlushedFutures | None = None
        self._futures_lock = threading.Lock()

    @property
    def last_error(self) -> str | None:
        return self.core.last_error

    @property
    def flushes(self) -> int:
        return self.core.flushes

    @property
    def requests_served(self) -> int:
        """Blocking waits that ended flushed (MessageStore.put under SYNC_FLUSH)."""
        return self.core.served

    @property
    def requests(self) -> int:
        """Flush requests ever made: blocking waits and requests nobody waits for in the caller (put_async, aput,
        when_flushed, as the gRPC server's sends ask)."""
        return self.core.arrivals

    @property
    def store_timestamp(self) -> int:
        """Store time (ms) of the last record a flush covered, for the checkpoint's physicMsgTimestamp."""
        return self.core.flushed_store_timestamp

    def wait_flushed(self, offset: int, timeout: float) -> bool:
        """Lead or wait for a flush covering ``offset``: True, or False after ``timeout`` s / a failed flush."""
        return self.core.sync(offset, timeout) == FLUSHED

    def when_flushed(self, offset: int, timeout: float, callback, loop=None) -> None:
        """Call ``callback(flushed: bool)`` once a flush covers ``offset``, or with False after ``timeout`` s or a
        failed flush: from the completing thread, or with an asyncio ``loop``, in that loop (every completion a
        flush makes for one loop goes in one call_soon_threadsafe); never from the caller's frame."""
        self.completer().add(offset, timeout, callback, CALLBACK, loop)

    def complete_when_flushed(self, offset: int, timeout: float, future, result, loop=None) -> None:
        """put_async's and aput's acknowledgement: ``future.set_result(result)`` once a flush covers ``offset``,
        ``result`` with FLUSH_DISK_TIMEOUT after ``timeout`` s or a failed flush (a future already done or
        cancelled is left alone: the record is stored either way); in ``loop`` when given, as when_flushed."""
        self.completer().add(offset, timeout, future, result, loop)

    def completer(self) -> FlushedFutures:
        """The completions' entries (``add`` is complete_when_flushed without this method's frame: the store keeps
        it for aput and put_async); its thread starts on first use."""
        futures = self._futures
        if futures is None:
            with self._futures_lock:
                if self._futures is None:
                    self._futures = _FlushedFutures(self.core)
                    self._futures.start()
                futures = self._futures
        return futures.entries

    def _flush_all(self):
        # The slow path of whichever thread leads a flush (GroupCommit calls it with the GIL): every file, then the
        # file that now holds the flushed offset, for the plain path of the next flushes.
        flushed = self._commit_log.flush(0)
        if self._on_flushed is not None:
            self._on_flushed()
        return flushed, self._commit_log.mapped_file_queue.find_mapped_file_by_offset(flushed)

    def run(self) -> None:
        core = self.core
        try:
            core.serve()
        except Exception:                       # keep the store answering: waits fail instead of hanging
            log.exception("group commit service failed")
            core.fail()
        try:
            core.publish(self._flush_all()[0])
        except OSError as e:
            log.error("group commit: final flush failed: %s", e)
            core.fail()
        core.close()

    def shutdown(self) -> None:
        """Flush what was appended, release every waiter, stop both threads."""
        self.core.stop()
        if self.is_alive():
            self.join()
        else:
            self.core.close()
        if self._futures is not None:
            self._futures.shutdown()


class _FlushedFutures(threading.Thread):
    """Completes put_async and aput futures (and when_flushed callbacks) as flushes cover their offsets, or their
    timeouts pass: the loop is rmqcore._flush.FlushedFutures.run, in C but for the completions themselves.

    Producers only append an entry and ask the C core for a flush; this thread sleeps without the GIL on the flush
    of the oldest entry, or on the next request when there is none, and completes everything a flush covered in one
    go: one wake-up per flush, however many puts it carried, and one call_soon_threadsafe per event loop.
    """

    def __init__(self, core):
        super().__init__(name="GroupCommitFutures", daemon=True)
        self.entries = FlushedFutures(core)

    def run(self) -> None:
        self.entries.run()

    def shutdown(self) -> None:
        self.entries.stopped = True
        if self.is_alive():
            self.join()
