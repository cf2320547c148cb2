"""CommitLog: every message of every topic, appended in order to a MappedFileQueue of RocketMQ records.

A put encodes and CRCs the message outside the put lock (MessageEncoder), then under the lock takes the queue
offset from the topic-queue table and copies the record to the wrote position (AppendMessageCallback, Cython);
when the record does not fit, the rest of the file becomes a blank record and the message goes to the next file.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time

import numpy as np

from ._codec import RESULT_BLANK, RESULT_END, record_error, scan_records
from ._message import PutResult, RecordIterator
from ._encoder import EncodeBuffer, MessageEncoder
from ._commit_log import AppendMessageCallback, CommitLogWriter
from ._pull import look_record
from ._mapped_file import WriteRing
from .config import StoreConfig
from .errors import CorruptRecordError, StoreClosedError
from .mapped_file_queue import TMP_DIR, MappedFileQueue, data_extents
from .status import PutStatus

log = logging.getLogger(__name__)

END_FILE_MIN_BLANK_LENGTH = 8


# Appends of at least this many bytes (a put_batch, a put_arrow slice) go through pwrite; one message is copied
# into the mapping (a system call per put cost it 20 %; MappedFile explains the choice).
PWRITE_MIN = 4096

# SYNC_FLUSH: appends wait in a ring of this many bytes until the flush that covers them commits them with pwrite
# (rmq_ring.h says why); an append of more than a quarter of it goes into the file directly.
WRITE_RING_SIZE = 16 * 1024 * 1024

# Where recovery keeps what it cuts beyond a torn tail, inside the store root: a folder RocketMQ's store ignores.
CUT_DIR = "rmqcore-cut"


def keep_cut(store_root: str, offset: int, extents, reason: str, clean: bool) -> str:
    """Copy the bytes a recovery cut at commitlog ``offset`` removes (``extents``: CommitLog.cut_extents) into
    ``store_root/rmqcore-cut/<offset>-<time>/``, one ``<commitlog file name>.part`` per file with ``report.json``
    saying where each part came from and why it was cut, synced to disk before the caller truncates: a wrong cut
    can always be undone by writing the parts back (``dd``, or Python) at their ``file_offset``. Returns the
    folder."""
    folder = os.path.join(store_root, CUT_DIR, f"{offset:020d}-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}")
    n = 0
    while os.path.exists(folder if n == 0 else f"{folder}.{n}"):
        n += 1
    folder = folder if n == 0 else f"{folder}.{n}"
    os.makedirs(folder)
    parts = []
    for mf, start, length in extents:
        name = os.path.basename(mf.file_name)
        view = mf.view()
        try:
            with open(os.path.join(folder, name + ".part"), "wb") as f:
                f.write(view[start:start + length])
                f.flush()
                os.fsync(f.fileno())
        finally:
            view.release()
        parts.append({"file": f"commitlog/{name}", "part": name + ".part", "file_offset": start,
                      "commitlog_offset": mf.file_from_offset + start, "length": length})
    report = {"cut_from_commitlog_offset": offset, "reason": reason,
              "shutdown": "clean" if clean else "crash (abort file present)",
              "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "bytes": sum(p["length"] for p in parts), "parts": parts,
              "undo": "write each part back into its file at file_offset, with the store closed, then open it"}
    with open(os.path.join(folder, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    for d in (folder, os.path.dirname(folder)):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return folder


class CommitLog:
    def __init__(self, store_path: str, config: StoreConfig | None = None, *, pool=None, read_only: bool = False):
        self.config = config or StoreConfig()
        self.store_path = store_path
        self.read_only = read_only
        self.encoder = MessageEncoder(self.config.store_host, self.config.max_message_size)
        self.encoder.append_prop_crc = self.config.enabled_append_prop_crc
        self.callback = AppendMessageCallback(self.encoder.store_host_bytes)
        sync_writes = self.config.sync_flush and self.config.mapped_file_runway_commit_log > 0
        self.mapped_file_queue = MappedFileQueue(
            store_path, self.config.mapped_file_size_commit_log, allocate=not read_only,
            warm=self.config.warm_mapped_file_enable, warm_flush=self.config.sync_flush, pool=pool,
            read_only=read_only, runway=self.config.mapped_file_runway_commit_log,
            sync_writes=sync_writes, pwrite_min=PWRITE_MIN,
            ring=WriteRing(WRITE_RING_SIZE) if self.config.sync_flush and not read_only and pool is None else None,
            tmp_dir=None if read_only else os.path.join(os.path.dirname(os.path.abspath(store_path)), TMP_DIR))
        self.put_lock = threading.Lock()
        self._closed = False
        file_size = self.config.mapped_file_size_commit_log
        # One record must fit a file with room for the end-of-file blank after it.
        max_record = min(self.config.max_message_size, file_size - END_FILE_MIN_BLANK_LENGTH)
        self.writer = CommitLogWriter(self.encoder, self.callback, self.put_lock, self.mapped_file_queue,
                                      max_record, file_size,
                                      lambda: PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED))
        self.last_recovery: dict = {}

    # -- open ---------------------------------------------------------------------------------------------------

    @classmethod
    def open(cls, store_path: str, config: StoreConfig | None = None, **kw) -> "CommitLog":
        """Load, recover and rebuild the topic-queue table by scanning (standalone use; the MessageStore restores
        the table from its consume queues instead)."""
        log_ = cls(store_path, config, **kw)
        log_.load()
        log_.recover(check_crc=log_.config.check_crc_on_recover)
        log_.rebuild_topic_queue_table()
        return log_

    def load(self) -> None:
        self.mapped_file_queue.load()

    def find_recovery_end(self, check_crc: bool = True, from_file_index: int | None = None) -> tuple[int, int, str]:
        """(offset where valid data ends, records scanned, why the scan stopped) from the third-last file (or
        ``from_file_index``), changing nothing: what ``recover`` would keep. Corruption stops the scan there, as
        RocketMQ's does."""
        files = self.mapped_file_queue.mapped_files
        index = max(0, len(files) - 3) if from_file_index is None else from_file_index
        process_offset = files[index].file_from_offset
        records = 0
        stop_reason = "end of data"
        for mf in files[index:]:
            view = mf.view()
            try:
                pos, count, code = scan_records(view, 0, -1, check_crc, mf.file_from_offset)
            finally:
                view.release()
            records += count
            process_offset = mf.file_from_offset + pos
            if code == RESULT_BLANK:
                continue
            if code != RESULT_END:
                stop_reason = str(record_error(code, mf.file_from_offset + pos, mf.file_name))
            break
        return process_offset, records, stop_reason

    def recover(self, check_crc: bool = True, from_file_index: int | None = None, clean: bool = True) -> int:
        """Find the end of valid data (``find_recovery_end``), then cut every byte after it. Returns the recovered
        max offset. Bytes cut beyond a torn tail are first copied aside (``keep_cut``)."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            self.last_recovery = {"records": 0, "process_offset": 0, "truncated_bytes": 0}
            return 0
        process_offset, records, stop_reason = self.find_recovery_end(check_crc, from_file_index)
        if stop_reason != "end of data":
            log.warning("commitlog recovery stops at %s", stop_reason)
        extents = self.cut_extents(process_offset) if stop_reason != "end of data" or not clean else []
        truncated = sum(n for _, _, n in extents)
        kept = None
        if truncated and not self.read_only and (clean or not self.is_torn_tail(process_offset, extents)):
            kept = keep_cut(os.path.dirname(os.path.abspath(self.store_path)), process_offset, extents,
                            stop_reason, clean)
            log.warning("commitlog recovery cut %d bytes from offset %d (%s); they are kept in %s", truncated,
                        process_offset, stop_reason, kept)
        self.mapped_file_queue.truncate_dirty_files(process_offset)
        self.mapped_file_queue.set_flushed_where(process_offset)
        self.writer.reset()
        self.last_recovery = {"records": records, "process_offset": process_offset,
                              "truncated_bytes": truncated, "stop": stop_reason, "cut_kept_in": kept}
        return process_offset

    def cut_extents(self, offset: int) -> list:
        """What a cut at ``offset`` removes: (mapped file, first byte, length) per file up to its last non-zero
        byte (a preallocated tail of zeros is no data). Files are read backwards in chunks, so the zeros of a
        preallocated tail cost one pass and nothing else."""
        chunk = 4 << 20
        out = []
        for mf in self.mapped_file_queue.mapped_files:
            start = max(0, offset - mf.file_from_offset)
            if start >= mf.file_size:
                continue
            arr = np.frombuffer(mf.view(), dtype=np.uint8)
            # only the stretches that have blocks, newest first: holes read as zeros, and reading one through the
            # mapping would allocate it on tmpfs (SIGBUS on a full one: issue 36)
            found = False
            for lo_extent, end in reversed(data_extents(mf.file_name, start, mf.file_size)):
                while end > lo_extent and not found:
                    lo = max(lo_extent, end - chunk)
                    part = arr[lo:end]
                    if part.any():
                        out.append((mf, start, lo + int(np.flatnonzero(part)[-1]) + 1 - start))
                        found = True
                    end = lo
                if found:
                    break
            del arr
        return out

    def is_torn_tail(self, offset: int, extents) -> bool:
        """Whether what a cut at ``offset`` removes is only the record a crash tore there: every non-zero byte after
        ``offset`` lies within the size that record's header claims (at most max_message_size), so nothing beyond
        one interrupted append is lost. Anything else (data past a hole, a damaged record with records after it)
        may hold messages, and is kept aside before the cut."""
        if not extents:
            return True
        mf, start, _ = extents[0]
        last_mf, last_start, last_len = extents[-1]
        end = last_mf.file_from_offset + last_start + last_len
        claimed = 0
        if mf.file_from_offset + start == offset and start + 4 <= mf.file_size:
            view = mf.view()
            try:
                claimed = int.from_bytes(view[start:start + 4], "big", signed=True)
            finally:
                view.release()
        return 0 < claimed <= self.config.max_message_size and end - offset <= claimed

    def rebuild_topic_queue_table(self) -> dict:
        table: dict = {}
        for m in self.iterate(self.min_offset):
            if m.transaction_type in (0x4, 0xC):
                continue
            key = (m.topic, m.queue_id)
            table[key] = max(table.get(key, 0), m.queue_offset + 1)
        self.callback.topic_queue_table = table
        return table

    # -- put ----------------------------------------------------------------------------------------------------

    def _check_open(self):
        if self._closed:
            raise StoreClosedError("commit log is closed")
        if self.read_only:
            raise PermissionError(f"{self.store_path} is opened read-only")

    def put_message(self, msg) -> PutResult:
        """Append one message; MessageIllegalError (nothing written) for a message RocketMQ would refuse."""
        if self._closed or self.read_only:
            self._check_open()
        return self.writer.put(msg)

    def put_messages(self, messages, properties: dict[str, str] | None = None) -> list[PutResult]:
        """Append many messages under one lock. All are validated and encoded first, so a bad one raises before
        anything is written. If a new file cannot be made midway, the rest get CREATE_MAPPED_FILE_FAILED.
        ``properties``: common to every message, encoded once (MessageStore.put_batch says how they apply)."""
        if self._closed or self.read_only:
            self._check_open()
        return self.writer.put_batch(messages, properties)

    def put_arrow(self, data, put_messages=None):
        """Append the rows of a pyarrow RecordBatch or Table (rmqcore.columnar): one result RecordBatch. A batch
        with rows that reroute (delay, timer, transaction properties) goes through ``put_messages`` (default: this
        log's put_messages) as Message objects."""
        from . import columnar
        if self._closed or self.read_only:
            self._check_open()
        batches = []
        rows_before = 0
        for batch in columnar._batches(data):
            batches.append(columnar.Columns(batch, rows_before))
            rows_before += batch.num_rows
        # First pass: every check on every row, nothing written, so a bad row fails the call before any is stored
        # (put_batch's promise); it costs a fraction of the encoding, which the second pass does slice by slice.
        for cols in batches:
            if not cols.reroute:
                longest_row, longest = cols.check(self.encoder)
                self.writer.check_record_length(longest, longest_row)
        results = columnar.Results()
        eb = EncodeBuffer()
        uniq = np.empty(columnar.ARROW_ROWS * 64, np.uint8)
        uniq_off = np.empty(columnar.ARROW_ROWS + 1, np.int64)
        for cols in batches:
            # Slices of ARROW_ROWS rows through one reused buffer: its pages stay warm (a whole batch in one buffer
            # page-faulted a fresh allocation per call, slower than the encoding itself).
            for start in range(0, cols.num_rows, columnar.ARROW_ROWS):
                n = min(columnar.ARROW_ROWS, cols.num_rows - start)
                if cols.reroute:
                    part = cols.batch.slice(start, n)
                    put = put_messages or self.put_messages
                    results.add_put_results(put(columnar.messages(part)))
                    continue
                cols.encode(self.encoder, eb, start, n, uniq, uniq_off)
                raw = np.empty((n, 4), np.int64)
                self.writer.put_arrow_rows(eb, raw, cols.first_row + start)
                results.add_rows(raw, uniq, uniq_off)
        return results.batch()

    @property
    def topic_queue_table(self) -> dict:
        return self.callback.topic_queue_table

    # -- read ---------------------------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        mf = self.mapped_file_queue.first()
        return mf.file_from_offset if mf is not None else 0

    @property
    def max_offset(self) -> int:
        return self.mapped_file_queue.get_max_offset()

    def get_data(self, offset: int, size: int = -1):
        """Zero-copy view of ``size`` readable bytes at global ``offset`` (to the read position when < 0)."""
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        return mf.select(offset - mf.file_from_offset, size)

    def look_message(self, offset: int, check_crc: bool = False):
        """The message whose record starts at ``offset``, or None when no readable record starts there."""
        return look_record(self.mapped_file_queue._files, self.mapped_file_queue.mapped_file_size, offset, check_crc)

    def iterate(self, from_offset: int = 0, check_crc: bool = False):
        """Every message from ``from_offset`` (a record start) to the end, across files. A corrupt record raises
        CorruptRecordError naming its offset and file."""
        files = self.mapped_file_queue.mapped_files
        for mf in files:
            end = mf.file_from_offset + mf.read_position
            if end <= from_offset:
                continue
            start = max(0, from_offset - mf.file_from_offset)
            view = mf.select(0, mf.read_position)
            if view is None:
                continue
            try:
                yield from RecordIterator(view, start, -1, check_crc, mf.file_from_offset)
            except CorruptRecordError as e:
                e.path = mf.file_name
                raise

    # -- flush / close ------------------------------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> int:
        """Flush (and commit, with write buffers) everything appended so far; returns the flushed offset."""
        mfq = self.mapped_file_queue
        while True:
            mfq.commit(least_pages)
            done = mfq.flush(least_pages)
            if done or mfq.flushed_where >= mfq.get_max_wrote_position():
                return mfq.flushed_where

    @property
    def flushed_where(self) -> int:
        """The offset below which everything is on disk. SYNC_FLUSH's C flush loop (rmqcore._flush) moves the
        file's flushed position without going through the queue, so the file holding the queue's mark is asked."""
        mfq = self.mapped_file_queue
        where = mfq.flushed_where
        mf = mfq.find_mapped_file_by_offset(where)
        if mf is not None:
            where = max(where, mf.file_from_offset + mf.flushed_position)
        return where

    def close(self) -> None:
        if self._closed:
            return
        if not self.read_only:
            self.flush(0)
        self._closed = True
        self.mapped_file_queue.shutdown()

    def destroy(self) -> None:
        self._closed = True
        self.mapped_file_queue.destroy()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def files(self) -> list[str]:
        return [os.path.basename(mf.file_name) for mf in self.mapped_file_queue.mapped_files]
