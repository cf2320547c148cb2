"""IndexService: the ``index/`` directory of a store, as RocketMQ's ``store/index/IndexService.java``.

A list of IndexFiles named by creation time (``yyyyMMddHHmmssSSS``, local time), oldest first. Keys go into the
last file; a full file makes the next one, which carries the previous end offset and time. Queries walk the files
newest first. ``lock`` guards the list (RocketMQ's read-write lock); puts are serialized by their own lock (RocketMQ
has a single reput thread).
"""
from __future__ import annotations

import datetime
import errno
import logging
import os
import threading
import time

import numpy as np

from ._dispatch import index_batch
from ._index_file import HASH_SLOT_SIZE, INDEX_HEADER_SIZE, INDEX_SIZE, IndexFile, index_key_hash, query_files
from .errors import StoreLayoutError, StoreSpaceError
from .mapped_file_queue import TMP_DIR, free_bytes, holes

log = logging.getLogger(__name__)


MAX_TRY_IDX_CREATE = 3            # IndexService.MAX_TRY_IDX_CREATE
MAX_MSGS_NUM_BATCH = 64           # MessageStoreConfig.maxMsgsNumBatch
KEY_SEPARATOR = " "               # MessageConst.KEY_SEPARATOR
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_ROLLBACK_TYPE = 0xC
_NAME_LEN = 17


def build_key(topic: str, key: str) -> str:
    """IndexService.buildKey: ``topic#key``."""
    return topic + "#" + key


def _format_name(dt: datetime.datetime) -> str:
    # UtilAll.timeMillisToHumanString: %04d%02d%02d%02d%02d%02d%03d of the local calendar.
    return "%04d%02d%02d%02d%02d%02d%03d" % (dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second,
                                             dt.microsecond // 1000)


def _parse_name(name: str) -> datetime.datetime:
    return datetime.datetime(int(name[0:4]), int(name[4:6]), int(name[6:8]), int(name[8:10]), int(name[10:12]),
                             int(name[12:14]), int(name[14:17]) * 1000)


def is_index_file_name(name: str) -> bool:
    return len(name) == _NAME_LEN and name.isdigit() and name.isascii()


class IndexService:
    """``IndexService(store_path_index_dir, hash_slot_num, index_num)``.

    ``checkpoint`` (optional, a StoreCheckpoint) gets ``index_msg_timestamp`` = a full file's end time once that file
    is flushed, as RocketMQ's flush(IndexFile) does; ``index_msg_timestamp`` on the service holds the same figure.
    """

    def __init__(self, store_path_index_dir: str, hash_slot_num: int = 5_000_000, index_num: int = 5_000_000 * 4,
                 *, max_msgs_num_batch: int = MAX_MSGS_NUM_BATCH, checkpoint=None, read_only: bool = False,
                 retry_interval: float = 1.0, runway: int = 0):
        self.store_path = os.fspath(store_path_index_dir)
        self.runway = runway                      # IndexFile's write runway (0: new files allocated whole)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.max_msgs_num_batch = max_msgs_num_batch
        self.checkpoint = checkpoint
        self.read_only = read_only
        self.retry_interval = retry_interval
        self.lock = threading.RLock()            # guards index_file_list
        self._put_lock = threading.Lock()         # one writer at a time
        self._checkpoint_lock = threading.Lock()
        self._flushed_full: set[str] = set()       # full files already flushed
        self.index_file_list: list[IndexFile] = []
        self.index_msg_timestamp = 0
        self.index_file_error: BaseException | None = None   # RunningFlags.makeIndexFileError
        self._flush_threads: list[threading.Thread] = []

    # -- load / life cycle ----------------------------------------------------------------------------------------

    def load(self, last_exit_ok: bool, index_msg_timestamp: int = 0) -> bool:
        """Open every file of the directory, oldest first. After a crash, files holding keys newer than the
        checkpoint's indexMsgTimestamp are deleted (recovery indexes those messages again)."""
        if not os.path.isdir(self.store_path):
            return True
        names = sorted(os.listdir(self.store_path))
        for name in names:
            path = os.path.join(self.store_path, name)
            if not is_index_file_name(name) or not os.path.isfile(path):
                raise StoreLayoutError(f"{path}: not an index file (index files are named yyyyMMddHHmmssSSS)")
        if names and not self.read_only:
            last = os.path.join(self.store_path, names[-1])
            if os.path.getsize(last) == 0:
                # A crash between creating the newest file and allocating it: it never held a key.
                log.warning("index file %s is empty (its creation was interrupted): deleted", last)
                os.unlink(last)
                names.pop()
        loaded = []
        try:
            for name in names:
                path = os.path.join(self.store_path, name)
                # Read-only first (issue 36): only the newest file is ever written, and a writable open allocates
                # what the file holds (RocketMQ's are sparse); that one is reopened for writing below.
                f = IndexFile(path, self.hash_slot_num, self.index_num, 0, 0, read_only=True)
                if not last_exit_ok and f.end_timestamp > index_msg_timestamp:
                    if self.read_only:
                        f.close()
                    else:
                        log.info("index file %s ends at %d, past the checkpoint's %d: deleted", path,
                                 f.end_timestamp, index_msg_timestamp)
                        f.destroy()
                    continue
                log.info("load index file OK, %s", path)
                loaded.append(f)
            if loaded and not self.read_only and not loaded[-1].is_write_full():
                last = loaded.pop()
                last.close()
                used = INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE + last.index_count * INDEX_SIZE
                loaded.append(self._open_writable(last.file_name, used))
        except BaseException:
            for f in loaded:
                f.close()
            raise
        with self.lock:
            self.index_file_list.extend(loaded)
        return True

    def _open_writable(self, path: str, used: int) -> IndexFile:
        """The newest index file, for the puts to come. Without the space to allocate what it holds: one line
        naming the bytes it needs and those free (StoreSpaceError); nothing stays allocated."""
        try:
            return IndexFile(path, self.hash_slot_num, self.index_num, 0, 0, runway=self.runway)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            need = holes(path, used)
            free = free_bytes(self.store_path)
            raise StoreSpaceError(
                f"not enough free space to open the store: index file {path} needs {need} more bytes "
                f"({need / 2**20:.1f} MiB) allocated for its header, hash slots and items (the file is sparse, as "
                f"the broker that wrote it left it); {free} bytes ({free / 2**20:.1f} MiB) are free", need,
                free) from None

    def _join_flushers(self) -> None:
        for t in self._flush_threads:
            t.join()
        self._flush_threads.clear()

    def shutdown(self) -> None:
        """5.x IndexService.shutdown: flush and close every file."""
        self._join_flushers()
        with self.lock:
            for f in self.index_file_list:
                try:
                    if f.file_name in self._flushed_full:
                        f.close()
                    else:
                        f.shutdown()
                except Exception:
                    log.exception("shutdown %s", f.file_name)
            self.index_file_list.clear()
            self._flushed_full.clear()

    def destroy(self) -> None:
        """Delete every index file."""
        self._join_flushers()
        with self.lock:
            for f in self.index_file_list:
                f.destroy()
            self.index_file_list.clear()
            self._flushed_full.clear()

    def flush(self, index_file: IndexFile | None = None, active: bool = True) -> int:
        """IndexService.flush(f) for one file; without one, every file not yet flushed full, and the one being
        written only when ``active``. RocketMQ msyncs that one at shutdown alone: after a crash ``load`` deletes it
        and dispatch rebuilds it, while an msync every second would write-protect (a TLB shootdown each) and then
        refault every hash-slot page the random keys dirtied.
        A full file's end time becomes indexMsgTimestamp (and the checkpoint's, when the service has one); returns
        that time: the end time of the newest full file flushed so far, 0 before any file filled up. As in RocketMQ
        only full files move it, so after a crash ``load`` deletes the file that was being written, whole."""
        if index_file is not None:
            files = [index_file]
        else:
            with self.lock:
                # A full file is written no more: once flushed after filling up it needs no further msync.
                files = [f for f in self.index_file_list if f.file_name not in self._flushed_full
                         and (active or f.is_write_full())]
        for f in files:
            full = f.is_write_full()
            index_msg_timestamp = f.end_timestamp if full else 0
            f.flush()
            if full:
                self._flushed_full.add(f.file_name)
            if index_msg_timestamp > 0:
                # RocketMQ flushes each full file on its own thread and sets the time unconditionally; threads that
                # finish out of order could move it back, so here it only moves forward.
                with self._checkpoint_lock:
                    if index_msg_timestamp <= self.index_msg_timestamp:
                        continue
                    self.index_msg_timestamp = index_msg_timestamp
                    if self.checkpoint is not None:
                        self.checkpoint.index_msg_timestamp = max(self.checkpoint.index_msg_timestamp,
                                                                  index_msg_timestamp)
                        self.checkpoint.flush()
        return self.index_msg_timestamp

    @property
    def index_files(self) -> list[IndexFile]:
        """A snapshot of the file list, oldest first."""
        with self.lock:
            return list(self.index_file_list)

    # -- figures -----------------------------------------------------------------------------------------------------

    def get_last_index_timestamp(self) -> int:
        """End time of the newest file (0 without files): the store time of the last message indexed."""
        with self.lock:
            return self.index_file_list[-1].end_timestamp if self.index_file_list else 0

    def get_last_index_phy_offset(self) -> int:
        with self.lock:
            return self.index_file_list[-1].end_phy_offset if self.index_file_list else 0

    def get_total_size(self) -> int:
        with self.lock:
            if not self.index_file_list:
                return 0
            return self.index_file_list[0].file_size * len(self.index_file_list)

    # -- files -------------------------------------------------------------------------------------------------------

    def _new_file_path(self) -> str:
        dt = datetime.datetime.now()
        with self.lock:
            last = os.path.basename(self.index_file_list[-1].file_name) if self.index_file_list else None
        if last is not None and is_index_file_name(last) and _format_name(dt) <= last:
            # Two files in one millisecond, or a clock that went back: keep names unique and in creation order.
            try:
                dt = _parse_name(last) + datetime.timedelta(milliseconds=1)
            except ValueError:       # a name that is no calendar time: only uniqueness can be kept
                pass
        path = os.path.join(self.store_path, _format_name(dt))
        while os.path.exists(path):
            dt += datetime.timedelta(milliseconds=1)
            path = os.path.join(self.store_path, _format_name(dt))
        return path

    def get_and_create_last_index_file(self) -> IndexFile | None:
        """The last file when it has room, else a new one continuing the full one (None when creating fails)."""
        prev = None
        last_end_phy_offset = 0
        last_end_timestamp = 0
        with self.lock:
            if self.index_file_list:
                tmp = self.index_file_list[-1]
                if not tmp.is_write_full():
                    return tmp
                last_end_phy_offset = tmp.end_phy_offset
                last_end_timestamp = tmp.end_timestamp
                prev = tmp
        if self.read_only:
            raise PermissionError(f"{self.store_path}: index service is read-only")
        try:
            os.makedirs(self.store_path, exist_ok=True)
            path = self._new_file_path()
            # Made under a temporary name in the store's rmqcore-tmp/ and renamed into place (IndexFile says why).
            tmp_dir = os.path.join(os.path.dirname(os.path.abspath(self.store_path)), TMP_DIR)
            os.makedirs(tmp_dir, exist_ok=True)
            f = IndexFile(path, self.hash_slot_num, self.index_num, last_end_phy_offset,
                          last_end_timestamp, runway=self.runway,
                          tmp_path=os.path.join(tmp_dir, f"index-{os.path.basename(path)}.{os.getpid()}.tmp"))
        except OSError as e:
            log.error("create index file in %s failed: %s", self.store_path, e)
            self.index_file_error = e
            return None
        with self.lock:
            self.index_file_list.append(f)
        if prev is not None:
            t = threading.Thread(target=self._flush_quietly, args=(prev,), name="FlushIndexFileThread", daemon=True)
            self._flush_threads = [x for x in self._flush_threads if x.is_alive()]
            self._flush_threads.append(t)
            t.start()
        return f

    def _flush_quietly(self, f: IndexFile) -> None:
        try:
            self.flush(f)
        except Exception:
            log.exception("flush index file %s", f.file_name)

    def retry_get_and_create_index_file(self) -> IndexFile | None:
        for times in range(MAX_TRY_IDX_CREATE):
            f = self.get_and_create_last_index_file()
            if f is not None:
                self.index_file_error = None
                return f
            log.info("tried to create index file %d times", times)
            if times + 1 < MAX_TRY_IDX_CREATE:
                time.sleep(self.retry_interval)
        log.error("mark index file cannot build flag")
        return None

    # -- build -------------------------------------------------------------------------------------------------------

    def _put(self, f: IndexFile, key_hash: int, phy_offset: int, store_timestamp: int) -> IndexFile | None:
        while not f.put_key_hash(key_hash, phy_offset, store_timestamp):
            log.warning("index file [%s] is full, trying to create another one", f.file_name)
            f = self.retry_get_and_create_index_file()
            if f is None:
                return None
        return f

    def build_index(self, topic: str, commitlog_offset: int, store_timestamp: int, uniq_key: str | None,
                    keys, sys_flag: int) -> bool:
        """IndexService.buildIndex for one dispatched message. ``keys``: the KEYS property (space-separated) or an
        iterable of keys. Returns False when no index file could be had (the message is then not indexed)."""
        with self._put_lock:
            f = self.retry_get_and_create_index_file()
            if f is None:
                log.error("build index error, stop building index")
                return False
            if commitlog_offset < f.end_phy_offset:
                return True      # already indexed (recovery replays from the checkpoint)
            # RocketMQ indexes NOT_TYPE, PREPARED and COMMIT messages; only ROLLBACK ones are left out.
            if sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_ROLLBACK_TYPE:
                return True
            if uniq_key is not None:
                f = self._put(f, index_key_hash(build_key(topic, uniq_key)), commitlog_offset, store_timestamp)
                if f is None:
                    log.error("putKey error commitlog %d uniqkey %s", commitlog_offset, uniq_key)
                    return False
            if keys:
                key_list = keys.split(KEY_SEPARATOR) if isinstance(keys, str) else keys
                for key in key_list:
                    if key:
                        f = self._put(f, index_key_hash(build_key(topic, key)), commitlog_offset, store_timestamp)
                        if f is None:
                            log.error("putKey error commitlog %d uniqkey %s", commitlog_offset, uniq_key)
                            return False
            return True

    def build_index_hashes(self, key_hashes, phy_offsets, timestamps) -> int:
        """Batch buildIndex for keys the dispatcher has already hashed (``indexKeyHashMethod(topic#key)``), in
        commitlog order, rollback messages already left out: contiguous int32 / int64 / int64 arrays. Keys of
        messages below the last file's end offset are skipped (already indexed), as buildIndex does per message;
        full files roll over. Returns how many entries were consumed (all of them, unless no file could be had)."""
        key_hashes = np.ascontiguousarray(key_hashes, dtype=np.int32)
        phy_offsets = np.ascontiguousarray(phy_offsets, dtype=np.int64)
        timestamps = np.ascontiguousarray(timestamps, dtype=np.int64)
        n = len(key_hashes)
        if len(phy_offsets) != n or len(timestamps) != n:
            raise ValueError(f"build_index_hashes: arrays differ in length "
                             f"({n}, {len(phy_offsets)}, {len(timestamps)})")
        if n == 0:
            return 0
        return self._put_keys(n, lambda f, done: f.put_hashes(key_hashes[done:], phy_offsets[done:],
                                                              timestamps[done:], skip_indexed=True))

    def build_index_batch(self, batch) -> int:
        """build_index_hashes of a dispatcher batch's keys (rmqcore._dispatch.DispatchBatch), read in place: the
        dispatcher's way, which for a pass of a few keys cost less than the arrays' checks and slices did."""
        return self._put_keys(batch.nkeys, lambda f, done: index_batch(batch, f, done))

    def _put_keys(self, n: int, put) -> int:
        """The build loop of both: ``put(file, done)`` puts keys from ``done`` on into ``file`` and says how many
        it took (fewer only when the file filled up); full files roll over. The last file is taken as it is while
        it has room (get_and_create_last_index_file's lock and frame were most of a pass of a few keys)."""
        done = 0
        with self._put_lock:
            files = self.index_file_list
            f = files[-1] if files else None
            while done < n:
                if f is None or f.is_write_full():
                    f = self.retry_get_and_create_index_file()
                    if f is None:
                        log.error("build index error, stop building index")
                        return done
                done += put(f, done)
                if done < n and f.alloc_error:
                    raise OSError(f.alloc_error, f"index file runway: {os.strerror(f.alloc_error)}", f.file_name)
                if done < n and not f.is_write_full():
                    # put_hashes stops early only on a full file; anything else would loop forever.
                    raise RuntimeError(f"{f.file_name}: put_hashes stopped at {done} of {n} with room left")
        return done

    # -- query -------------------------------------------------------------------------------------------------------

    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int):
        """IndexService.queryOffset: (phy_offsets, index_last_update_timestamp, index_last_update_phy_offset).
        Newest file first; maxNum is capped at maxMsgsNumBatch; stops at a file that began before ``begin`` or when
        maxNum offsets are found."""
        with self.lock:
            files = self.index_file_list
            if not files:
                return [], 0, 0
            return (query_files(files, topic, key, min(max_num, self.max_msgs_num_batch), begin, end),
                    files[-1].end_timestamp, files[-1].end_phy_offset)

    # -- clean -------------------------------------------------------------------------------------------------------

    def delete_expired_file(self, offset: int) -> None:
        """IndexService.deleteExpiredFile: delete the oldest files wholly below commitlog ``offset``; never the
        last one."""
        with self.lock:
            if not self.index_file_list:
                return
            if self.index_file_list[0].end_phy_offset >= offset:
                return
            files = list(self.index_file_list)
            expired = []
            for f in files[:-1]:
                if f.end_phy_offset < offset:
                    expired.append(f)
                else:
                    break
            for f in expired:
                f.destroy()
                self.index_file_list.remove(f)
                self._flushed_full.discard(f.file_name)
                log.info("deleted expired index file %s", f.file_name)
