"""TransientStorePool: preallocated write buffers, one per commitlog file being written.

Appends land in a buffer (locked in RAM where the OS allows) and the commit service copies them into the mapped
file, so a put never waits on a page fault of the file mapping. Buffers go back to the pool when their file is
full and committed.
"""
from __future__ import annotations

import logging
import mmap
import threading

from ._mapped_file import lock_memory

log = logging.getLogger(__name__)


class TransientStorePool:
    def __init__(self, pool_size: int, file_size: int):
        if pool_size <= 0 or file_size <= 0:
            raise ValueError("pool_size and file_size must be > 0")
        self.pool_size = pool_size
        self.file_size = file_size
        self._available: list[mmap.mmap] = []
        self._lock = threading.Lock()
        self.locked_in_memory = False
        self.lock_error: str | None = None

    def init(self) -> None:
        """Allocate every buffer and try to mlock it; say clearly (log + ``lock_error``) when the OS refuses."""
        errors = []
        for _ in range(self.pool_size):
            buf = mmap.mmap(-1, self.file_size)
            err = lock_memory(buf)
            if err:
                errors.append(err)
            self._available.append(buf)
        self.locked_in_memory = not errors
        if errors:
            self.lock_error = (f"mlock of {self.pool_size} x {self.file_size} bytes failed ({errors[0]}); the "
                               "buffers work but may be paged out: raise RLIMIT_MEMLOCK (ulimit -l) to lock them")
            log.warning("TransientStorePool: %s", self.lock_error)

    def borrow_buffer(self):
        with self._lock:
            if not self._available:
                log.warning("TransientStorePool: no buffer left, the file is written directly")
                return None
            return self._available.pop()

    def return_buffer(self, buf) -> None:
        with self._lock:
            self._available.append(buf)

    def available_buffer_nums(self) -> int:
        with self._lock:
            return len(self._available)

    def destroy(self) -> None:
        with self._lock:
            for buf in self._available:
                buf.close()
            self._available.clear()
