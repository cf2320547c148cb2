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
    """Calls ``work(thorough)`` every ``interval_ms``; ``thorough`` every ``thorough_ms``; once more on stop."""

    def __init__(self, name: str, work, interval_ms: int, thorough_ms: int):
        super().__init__(name=name, daemon=True)
        self._work = work
        self._interval = max(1, interval_ms) / 1000
        self._thorough = thorough_ms / 1000
        self._stop_event = threading.Event()
        self._last_thorough = time.monotonic()
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
        self._work(True)
