"""MappedFileQueue: a directory of equal-size mapped files named by their start offsets, as one log.

Offsets are global: file N starts at N × file size. The queue loads and checks a directory (a foreign file, a gap
or a wrong size is a StoreLayoutError, never a guess), finds the file for an offset or a time, creates the next
file, truncates dirty tails and deletes expired files.

Files are sparse with a write runway (``runway`` > 0, rmq_runway.h): only a stretch ahead of the write position is
allocated and pre-faulted. With ``allocate`` on, a thread (RocketMQ's AllocateMappedFileService) keeps that
stretch ahead of the writer, woken by the writer without the GIL, and prepares the next file once the current one
is nearly full; without it, appends extend the runway themselves.
"""
from __future__ import annotations

import errno
import itertools
import logging
import os
import threading
import time

from ._mapped_file import MappedFile, WakeEvent, offset_to_file_name
from .errors import StoreLayoutError

log = logging.getLogger(__name__)


# Where a store makes new files before renaming them into place: a folder of the store root RocketMQ never lists.
TMP_DIR = "rmqcore-tmp"
_tmp_seq = itertools.count()


def clear_tmp_dir(store_root: str) -> int:
    """Remove what a process killed while making a file left in the store's temporary folder (called at open,
    under the store's lock); how many files were removed."""
    d = os.path.join(store_root, TMP_DIR)
    if not os.path.isdir(d) or os.path.islink(d):
        return 0
    n = 0
    for name in os.listdir(d):
        p = os.path.join(d, name)
        if os.path.isfile(p) and not os.path.islink(p):
            log.warning("%s: left by a file creation that was interrupted; removed", p)
            os.unlink(p)
            n += 1
    return n



def holes(path: str, end: int) -> int:
    """Bytes of ``path`` before ``end`` that hold no block (SEEK_HOLE / SEEK_DATA): what allocating them costs."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        total, pos = 0, 0
        while pos < end:
            try:
                hole = os.lseek(fd, pos, os.SEEK_HOLE)
            except OSError:
                return max(0, end - pos) + total
            if hole >= end:
                break
            try:
                data = os.lseek(fd, hole, os.SEEK_DATA)
            except OSError:                  # ENXIO: no data after the hole
                data = end
            total += min(data, end) - hole
            pos = data
        return total
    finally:
        os.close(fd)


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def data_extents(path: str, start: int, end: int) -> list[tuple[int, int]]:
    """The stretches of ``path`` within [start, end) that have blocks (SEEK_DATA / SEEK_HOLE); the rest are holes,
    which read as zeros. [(start, end)] where the filesystem cannot say."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return [(start, end)]
    out = []
    try:
        pos = start
        while pos < end:
            try:
                lo = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:       # only a hole from here
                    break
                return [(start, end)]
            if lo >= end:
                break
            hi = min(end, os.lseek(fd, lo, os.SEEK_HOLE))
            out.append((lo, hi))
            pos = hi
        return out
    except OSError:
        return [(start, end)]
    finally:
        os.close(fd)


def data_end(path: str, size: int) -> int:
    """Where the blocks of ``path`` end when all of them come before its first hole (a file written front to back,
    its preallocated tail sparse), else ``size``: the bytes past it read as zeros without being read. Reading a
    hole through a shared mapping allocates a page on tmpfs (and SIGBUS on a full one), so a scan stops there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return size
    try:
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
        if hole >= size:
            return size
        try:
            os.lseek(fd, hole, os.SEEK_DATA)
            return size                      # blocks after a hole: read the file whole
        except OSError:
            return hole                      # ENXIO: nothing but the hole after it
    except OSError:
        return size                          # no SEEK_HOLE here
    finally:
        os.close(fd)


class MappedFileQueue:
    def __init__(self, store_path: str, mapped_file_size: int, *, allocate: bool = False, warm: bool = False,
                 warm_flush: bool = False, pool=None, read_only: bool = False, runway: int = 0,
                 sync_writes: bool = False, pwrite_min: int = 0, ring=None, tmp_dir: str | None = None):
        if mapped_file_size <= 0:
            raise ValueError(f"mapped_file_size must be > 0, got {mapped_file_size}")
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.read_only = read_only
        self._files: list[MappedFile] = []
        self._lock = threading.RLock()
        self._warm = warm
        self._warm_flush = warm_flush
        self._pool = pool
        self._runway_size = runway
        self._sync_writes = sync_writes
        self._pwrite_min = pwrite_min       # MappedFile's: appends this large go through pwrite (-1: none)
        self._ring = ring                   # the WriteRing appends wait in until a flush commits them (SYNC_FLUSH)
        # The next file, made ahead by the allocate thread; _create_lock orders its making against the writer's
        # taking it (lock order: _lock, then _create_lock; the allocate thread takes only _create_lock).
        self._pending: dict[int, MappedFile] = {}
        self._create_lock = threading.Lock()
        self._runway = WakeEvent() if allocate and not read_only else None
        self._allocator: threading.Thread | None = None
        self.allocate_error: str | None = None
        self._attached: MappedFile | None = None
        self.flushed_where = 0
        self.committed_where = 0
        self.store_timestamp = 0
        # New files are made under a temporary name here and renamed into place (MappedFile says why); None: in
        # place, as before (a queue without a store around it).
        self.tmp_dir = tmp_dir

    # -- loading ------------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Map every file of the directory; positions are set to the full size (recovery truncates later)."""
        if not os.path.isdir(self.store_path):
            if self.read_only:
                raise StoreLayoutError(f"{self.store_path}: no such directory")
            return
        names = sorted(os.listdir(self.store_path))
        foreign = [n for n in names if not (len(n) == 20 and n.isdigit())]
        if names and not foreign and not self.read_only:
            last = os.path.join(self.store_path, names[-1])
            if os.path.getsize(last) == 0:
                # A crash between creating the newest file and allocating it (posix_fallocate): it holds nothing.
                log.warning("mapped file %s is empty (its creation was interrupted): deleted", last)
                os.unlink(last)
                names.pop()
        if foreign:
            raise StoreLayoutError(
                f"{self.store_path}: holds files that are not mapped files named by a 20-digit offset: "
                f"{', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''}")
        files = []
        try:
            expected = None
            for name in names:
                path = os.path.join(self.store_path, name)
                start = int(name)
                if start % self.mapped_file_size:
                    raise StoreLayoutError(f"{path}: start offset is not a multiple of the file size "
                                           f"{self.mapped_file_size}")
                if expected is not None and start != expected:
                    raise StoreLayoutError(f"{self.store_path}: gap between {offset_to_file_name(expected)} "
                                           f"and {name}: files are missing")
                size = os.path.getsize(path)
                if size != self.mapped_file_size:
                    raise StoreLayoutError(f"{path}: size {size} differs from the configured mapped file size "
                                           f"{self.mapped_file_size}")
                mf = MappedFile(path, self.mapped_file_size, read_only=self.read_only, runway=self._runway_size,
                                sync_writes=self._sync_writes, pwrite_min=self._pwrite_min, ring=self._ring)
                mf.set_positions(self.mapped_file_size)
                files.append(mf)
                expected = start + self.mapped_file_size
        except BaseException:
            for mf in files:
                mf.close()
            raise
        with self._lock:
            self._files = files

    # -- access -------------------------------------------------------------------------------------------------

    @property
    def mapped_files(self) -> list[MappedFile]:
        with self._lock:
            return list(self._files)

    def __len__(self) -> int:
        return len(self._files)

    def first(self) -> MappedFile | None:
        with self._lock:
            return self._files[0] if self._files else None

    def last(self) -> MappedFile | None:
        with self._lock:
            return self._files[-1] if self._files else None

    def get_last_mapped_file(self, start_offset: int = 0, need_create: bool = True) -> MappedFile | None:
        """The file to append to: the last one unless it is full, else a new one (None if none can be made)."""
        with self._lock:
            last = self._files[-1] if self._files else None
            if last is not None and not last.is_full():
                if last is not self._attached:
                    self._attach(last)
                return last
            if not need_create:
                return last
            if last is None:
                create_offset = start_offset - start_offset % self.mapped_file_size
            else:
                create_offset = last.file_from_offset + self.mapped_file_size
            return self._create(create_offset)

    def _path(self, offset: int) -> str:
        return os.path.join(self.store_path, offset_to_file_name(offset))

    def _new_file(self, offset: int) -> MappedFile:
        os.makedirs(self.store_path, exist_ok=True)
        files = self._files
        # The first stretch of runway made for the appends the file before saw (copies or pwrites) and their pace
        # (zeros or none: MappedFile).
        copies_expected = files[-1].runway_mapped if files else True
        zeros_expected = files[-1].runway_zeroed if files else False
        tmp = None
        if self.tmp_dir is not None:
            os.makedirs(self.tmp_dir, exist_ok=True)
            tmp = os.path.join(self.tmp_dir, f"{offset_to_file_name(offset)}.{os.getpid()}.{next(_tmp_seq)}.tmp")
        mf = MappedFile(self._path(offset), self.mapped_file_size, pool=self._pool, runway=self._runway_size,
                        sync_writes=self._sync_writes, pwrite_min=self._pwrite_min,
                        copies_expected=copies_expected, zeros_expected=zeros_expected, ring=self._ring,
                        tmp_path=tmp)
        if self._warm:
            mf.warm_up(self._warm_flush)      # RocketMQ's warmMappedFile: the whole file, off by default
        return mf

    def _create(self, offset: int) -> MappedFile | None:
        if self.read_only:
            return None
        with self._create_lock:
            mf = self._pending.pop(offset, None)
            if mf is None:
                try:
                    mf = self._new_file(offset)
                except OSError as e:
                    log.error("create mapped file %s failed: %s", self._path(offset), e)
                    return None
        self._files.append(mf)
        self._attach(mf)
        return mf

    def _attach(self, mf: MappedFile) -> None:
        # The file being written: its appends wake the allocate thread, started with the first such file.
        self._attached = mf
        if self._runway is None:
            return
        mf.set_allocator(self._runway)
        if self._allocator is None:
            self._allocator = threading.Thread(target=self._allocate_loop, name="AllocateMappedFileService",
                                               daemon=True)
            self._allocator.start()
        self._runway.poke()

    def _allocate_loop(self) -> None:
        """AllocateMappedFileService: keep the runway of the file being written ahead of the writer; once it
        reaches the file's end, make the next file (with its first stretch of runway) before the writer needs it."""
        runway = self._runway
        while runway.wait(0.2) >= 0:
            mf = self.last()
            if mf is None or mf.closed:
                continue
            try:
                if mf.prepare_runway():
                    nxt = mf.file_from_offset + self.mapped_file_size
                    files = self._files          # no _lock under _create_lock (the writer takes them the other way)
                    with self._create_lock:
                        if (nxt not in self._pending and files and files[-1] is mf
                                and not os.path.exists(self._path(nxt))):
                            self._pending[nxt] = self._new_file(nxt)
                self.allocate_error = None
            except OSError as e:       # the writer then allocates itself, and reports a full disk as it happens
                if self.allocate_error != str(e):
                    log.warning("allocate service: %s", e)
                self.allocate_error = str(e)

    def find_mapped_file_by_offset(self, offset: int, return_first_on_not_found: bool = False):
        # Without the lock, as RocketMQ reads its CopyOnWriteArrayList: every pull and dispatch pass asks, and the
        # lock was half of a 32-message pull's Python time. Each list access is atomic under the GIL; a file
        # deleted meanwhile only shifts the indexes, which the range check below catches (or reads as closed).
        files = self._files
        try:
            first = files[0]
        except IndexError:
            return None
        index = (offset - first.file_from_offset) // self.mapped_file_size
        if 0 <= index < len(files) and offset >= first.file_from_offset:
            try:
                mf = files[index]
            except IndexError:           # files deleted since len()
                mf = None
            if mf is not None and mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                return mf
        return first if return_first_on_not_found else None

    def get_mapped_file_by_time(self, timestamp_ms: int):
        """The first file whose last store time is at or after ``timestamp_ms`` (RocketMQ's getMappedFileByTime)."""
        with self._lock:
            files = list(self._files)
        for mf in files:
            # The last store time appended in this run, else the file's mtime (RocketMQ's lastModifiedTimestamp).
            last = mf.store_timestamp or int(os.path.getmtime(mf.file_name) * 1000)
            if last >= timestamp_ms:
                return mf
        return files[-1] if files else None

    def get_min_offset(self) -> int:
        with self._lock:
            return self._files[0].file_from_offset if self._files else -1

    def get_max_offset(self) -> int:
        try:
            last = self._files[-1]       # without the lock, as find_mapped_file_by_offset
        except IndexError:
            return 0
        return last.file_from_offset + last.read_position

    def get_max_wrote_position(self) -> int:
        with self._lock:
            if not self._files:
                return 0
            last = self._files[-1]
            return last.file_from_offset + last.wrote_position

    # -- commit / flush -----------------------------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> bool:
        """Flush the file holding flushed_where; returns True when nothing was flushed (RocketMQ's convention)."""
        mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        if mf is None:
            return True
        ts = mf.store_timestamp
        where = mf.file_from_offset + mf.flush(least_pages)
        result = where == self.flushed_where
        self.flushed_where = where
        if least_pages == 0:
            self.store_timestamp = ts
        return result

    def commit(self, least_pages: int = 0) -> bool:
        mf = self.find_mapped_file_by_offset(self.committed_where, self.committed_where == 0)
        if mf is None:
            return True
        where = mf.file_from_offset + mf.commit(least_pages)
        result = where == self.committed_where
        self.committed_where = where
        return result

    # -- truncation and deletion --------------------------------------------------------------------------------

    def truncate_dirty_files(self, offset: int) -> None:
        """Keep data below ``offset``: the file holding it is cut there, files wholly above it are deleted."""
        with self._lock:
            keep = []
            for mf in self._files:
                end = mf.file_from_offset + self.mapped_file_size
                if end > offset:
                    if offset >= mf.file_from_offset:
                        mf.truncate_to(offset - mf.file_from_offset)
                        keep.append(mf)
                    elif self.read_only:          # never delete from a store opened for reading
                        mf.close()
                    else:
                        mf.destroy()
                else:
                    keep.append(mf)
            self._files = keep
            self.flushed_where = min(self.flushed_where, offset) if self.flushed_where else offset
            self.committed_where = min(self.committed_where, offset) if self.committed_where else offset

    def set_flushed_where(self, offset: int) -> None:
        self.flushed_where = offset
        self.committed_where = offset

    def delete_last_mapped_file(self) -> None:
        with self._lock:
            if self._files:
                self._files.pop().destroy()

    def delete_expired_file_by_time(self, expired_time_ms: int, delete_files_interval_ms: int = 0,
                                    clean_immediately: bool = False, now_ms: int | None = None,
                                    batch_max: int = 10) -> int:
        """Delete files whose last modification is older than ``expired_time_ms`` (or all when cleaning at once),
        oldest first and stopping at the first young one, never the last file, which is being written; at most
        ``batch_max`` per call (RocketMQ's deleteFileBatchMax: a pass never stalls the disk for long), sleeping
        ``delete_files_interval_ms`` between two deletions. Returns how many were deleted."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        deleted = 0
        with self._lock:
            candidates = self._files[:-1]
        for i, mf in enumerate(candidates):
            live_max = int(os.path.getmtime(mf.file_name) * 1000) + expired_time_ms
            if not (now >= live_max or clean_immediately):
                break
            with self._lock:
                if self._files and self._files[0] is mf:
                    self._files.pop(0)
                else:
                    break
            mf.destroy()
            deleted += 1
            if deleted >= batch_max:
                break
            if delete_files_interval_ms > 0 and i + 1 < len(candidates):
                time.sleep(delete_files_interval_ms / 1000)
        return deleted

    def delete_files_below(self, offset: int) -> int:
        """Delete the files that end at or below ``offset`` (consume queues and index after commitlog cleaning)."""
        deleted = 0
        with self._lock:
            while len(self._files) > 1 and self._files[0].file_from_offset + self.mapped_file_size <= offset:
                self._files.pop(0).destroy()
                deleted += 1
        return deleted

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        if self._runway is not None:
            self._runway.stop()
            if self._allocator is not None:
                self._allocator.join()
        with self._create_lock:
            for mf in self._pending.values():
                # A next file made ahead and never written: removed, so a closed store holds only what it wrote.
                mf.destroy()
            self._pending.clear()
        with self._lock:
            for mf in self._files:
                mf.close()

    def destroy(self) -> None:
        self.shutdown()
        with self._lock:
            for mf in self._files:
                mf.destroy()
            self._files = []
        try:
            os.rmdir(self.store_path)
        except OSError:
            pass
