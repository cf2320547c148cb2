"""ConsumeQueue: one topic-queue's index into the commitlog, 20-byte units (offset 8, size 4, tagsCode 8).

Entry i of a queue lives at logical byte offset i × 20 across a MappedFileQueue under
``consumequeue/{topic}/{queueId}/``. Units are appended by the dispatcher with RocketMQ's putMessagePositionInfo
rules and read back as zero-copy numpy structured arrays over the mapped file.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from ._codec import topic_is_dispatchable
from ._pull import check_units, offset_in_queue_by_time, pickup_store_timestamp
from .mapped_file_queue import TMP_DIR, MappedFileQueue, data_end

log = logging.getLogger(__name__)

CQ_STORE_UNIT_SIZE = 20
CQ_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
# The filler RocketMQ writes before the first entry of a queue that starts at a non-zero offset.
_BLANK_UNIT = np.array([(0, 0x7FFFFFFF, 0)], dtype=CQ_DTYPE).tobytes()


QUEUE_ID_MAX = (1 << 31) - 1


def queue_id_of(topic: str, name: str) -> int | None:
    """The queue id the consume-queue directory ``topic/name`` stands for, or None when it is none: a topic that
    is not a safe directory name (topic_is_dispatchable), or a name that is not a queue id written the way a queue's directory is named (ASCII
    digits, no leading zero: "007" would be read as queue 7, whose files RocketMQ looks for in "7")."""
    if topic_is_dispatchable(topic) and name.isascii() and name.isdigit() and int(name) <= QUEUE_ID_MAX \
            and name == str(int(name)):
        return int(name)
    return None


def queue_dirs(root: str) -> list[tuple[str, int]]:
    """(topic, queue id) of every consume-queue directory under ``root`` (``consumequeue/``), sorted.

    As RocketMQ's loadConsumeQueue, entries that are not a queue directory are skipped (a file among the topics, a
    queue directory not named by a number), and so are topic names that are no safe directory name (topic_is_dispatchable):
    a directory name is only ever joined to ``root`` after that check. Each skip is logged.
    """
    out = []
    if not os.path.isdir(root):
        return out
    for topic in sorted(os.listdir(root)):
        tdir = os.path.join(root, topic)
        if not os.path.isdir(tdir) or os.path.islink(tdir) or not topic_is_dispatchable(topic):
            log.warning("%s: not a consume-queue topic directory, skipped", tdir)
            continue
        for name in sorted(os.listdir(tdir)):
            qid = queue_id_of(topic, name)
            if qid is None or not os.path.isdir(os.path.join(tdir, name)):
                log.warning("%s: not a queue directory (named by its queue id), skipped", os.path.join(tdir, name))
                continue
            out.append((topic, qid))
    return out


# Runs of at least this many bytes (a pass behind a fast producer, a rebuild) go into a queue's file through pwrite,
# smaller ones are copied into its mapping: a pass of a few single puts appended a run of a unit or two to each of
# several queues, and a pwrite per run (a system call and a file time update) was a third of such a pass.
CQ_PWRITE_MIN = 4096


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, root: str, mapped_file_size: int, *, read_only: bool = False,
                 runway: int = 0):
        if mapped_file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError(f"consume queue file size {mapped_file_size} is not a multiple of 20")
        # The topic and queue id become a path under root: never one that leaves it (they come from records and
        # directory names, which a damaged or hostile store controls).
        if not topic_is_dispatchable(topic):
            raise ValueError(f"topic {topic!r}: not a name a queue directory may have (1..255 bytes of UTF-8, not "
                             "'.' or '..', no control character, '/' or '\\')")
        if not 0 <= queue_id <= QUEUE_ID_MAX:
            raise ValueError(f"queue_id {queue_id}: outside [0, {QUEUE_ID_MAX}]")
        self.topic = topic
        self.queue_id = queue_id
        self.mapped_file_size = mapped_file_size
        self.store_path = os.path.join(root, topic, str(queue_id))
        self.mapped_file_queue = MappedFileQueue(
            self.store_path, mapped_file_size, read_only=read_only, runway=runway, pwrite_min=CQ_PWRITE_MIN,
            tmp_dir=None if read_only else os.path.join(os.path.dirname(os.path.abspath(root)), TMP_DIR))
        self.max_physic_offset = -1      # end (offset + size) of the last record this queue points at
        self.min_logic_offset = 0        # byte offset of the first valid unit
        self.repeated_builds = 0
        self.order_errors = 0
        self.damaged = False             # recover() found units after an invalid one

    # -- load / recover -----------------------------------------------------------------------------------------

    def load(self) -> None:
        self.mapped_file_queue.load()

    def recover(self) -> None:
        """Keep the units up to the first invalid one (offset < 0 or size <= 0), scanning the last three files."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            return
        index = max(0, len(files) - 3)
        process_offset = files[index].file_from_offset
        self.damaged = False
        for mf in files[index:]:
            # Only as far as the file has blocks: the sparse rest reads as zeros (the end of the units), and
            # reading it through the mapping would allocate it on tmpfs, or SIGBUS on a full one (issue 36).
            limit = data_end(mf.file_name, mf.file_size)
            n = min(mf.file_size // CQ_STORE_UNIT_SIZE, -(-limit // CQ_STORE_UNIT_SIZE))
            units = np.frombuffer(mf.view(), dtype=CQ_DTYPE, count=n)
            valid = (units["offset"] >= 0) & (units["size"] > 0)
            bad = np.flatnonzero(~valid)
            count = int(bad[0]) if len(bad) else len(units)
            # Units after the first invalid one: a damaged queue, not its end (zeros). Recovery rebuilds them.
            if count < len(units) and np.frombuffer(mf.view(), dtype=np.uint8,
                                                    count=n * CQ_STORE_UNIT_SIZE)[count * CQ_STORE_UNIT_SIZE:].any():
                self.damaged = True
            real = np.flatnonzero(units["size"][:count] != 0x7FFFFFFF)
            if len(real):
                last = units[int(real[-1])]
                self.max_physic_offset = int(last["offset"]) + int(last["size"])
            del units, valid
            process_offset = mf.file_from_offset + count * CQ_STORE_UNIT_SIZE
            if count < self.mapped_file_size // CQ_STORE_UNIT_SIZE:
                break
        self.mapped_file_queue.truncate_dirty_files(process_offset)
        self.mapped_file_queue.set_flushed_where(process_offset)

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop the units that point at or past ``phy_offset`` (the commitlog was cut there by recovery): files
        whose first unit does are deleted, the last kept file is cut after its last unit below it."""
        self.max_physic_offset = -1
        while True:
            mf = self.mapped_file_queue.last()
            if mf is None:
                return
            units = np.frombuffer(mf.view(), dtype=CQ_DTYPE)
            offsets, sizes = units["offset"], units["size"]
            if int(offsets[0]) >= phy_offset:
                del units, offsets, sizes
                self.mapped_file_queue.delete_last_mapped_file()
                continue
            keep = (offsets >= 0) & (sizes > 0) & (offsets < phy_offset)
            keep[0] = True
            stop = np.flatnonzero(~keep)
            count = int(stop[0]) if len(stop) else len(units)
            # Blank fillers (offset 0, size MAX_INT) say nothing about the commitlog: skip them for the max.
            real = np.flatnonzero(sizes[:count] != 0x7FFFFFFF)
            if len(real):
                i = int(real[-1])
                self.max_physic_offset = int(offsets[i]) + int(sizes[i])
            del units, offsets, sizes, keep
            mf.truncate_to(count * CQ_STORE_UNIT_SIZE)
            self.mapped_file_queue.set_flushed_where(mf.file_from_offset + count * CQ_STORE_UNIT_SIZE)
            return

    def cut_units_not_matching(self, commitlog_files: list, commitlog_file_size: int, min_phy_offset: int):
        """Recovery's cross-check of the units in the last three files (the ones ``recover`` scans): cut the queue
        at the first unit that does not point at its own record (see _pull.check_units: no record there, another
        size, topic, queue or queue offset). Returns the index cut at, or None when every unit matched."""
        files = self.mapped_file_queue.mapped_files
        topic = self.topic.encode("utf-8")
        for mf in files[max(0, len(files) - 3):]:
            n = mf.read_position // CQ_STORE_UNIT_SIZE
            view = mf.select(0, n * CQ_STORE_UNIT_SIZE) if n else None
            if view is None:
                continue
            first = mf.file_from_offset // CQ_STORE_UNIT_SIZE
            try:
                good = check_units(view, first, commitlog_files, commitlog_file_size, topic, self.queue_id,
                                   min_phy_offset)
            finally:
                view.release()
            if good < n:
                log.warning("consume queue %s-%d: unit %d does not point at its record; the queue is cut there",
                            self.topic, self.queue_id, first + good)
                self.truncate_units_from(first + good)
                return first + good
        return None

    def truncate_units_from(self, index: int) -> None:
        """Drop unit ``index`` and every unit after it; max_physic_offset follows the last unit kept."""
        offset = index * CQ_STORE_UNIT_SIZE
        self.mapped_file_queue.truncate_dirty_files(offset)
        self.mapped_file_queue.set_flushed_where(offset)
        prev = self.get_unit(index - 1) if index > 0 else None
        self.max_physic_offset = prev[0] + prev[1] if prev is not None and prev[1] != 0x7FFFFFFF else -1

    # -- append -------------------------------------------------------------------------------------------------

    def put_message_position_info(self, offset: int, size: int, tags_code: int, cq_offset: int,
                                  store_timestamp: int = 0) -> bool:
        """Append one unit with RocketMQ's rules: skip a unit already built (repeat build after recovery), fill
        blank units before the first entry of a queue that starts past 0, report (and still write) a unit whose
        logical offset is not the next one."""
        if offset + size <= self.max_physic_offset:
            self.repeated_builds += 1
            return True
        units = np.array([(offset, size, tags_code)], dtype=CQ_DTYPE)
        return self.append_units(units, cq_offset, store_timestamp) == 1

    def append_units(self, units: np.ndarray, first_cq_offset: int, store_timestamp: int = 0) -> int:
        """Append consecutive units whose first has queue offset ``first_cq_offset`` (the dispatcher's batch
        path). Returns how many were written."""
        n = len(units)
        written = 0
        mfq = self.mapped_file_queue
        while written < n:
            cq_offset = first_cq_offset + written
            expect = cq_offset * CQ_STORE_UNIT_SIZE
            mf = mfq.get_last_mapped_file(expect)
            if mf is None:
                log.error("consume queue %s-%d: cannot create a file at %d", self.topic, self.queue_id, expect)
                return written
            if len(mfq) == 1 and cq_offset != 0 and mf.wrote_position == 0 and mf.file_from_offset < expect:
                self.min_logic_offset = expect
                mfq.set_flushed_where(expect)
                mf.append(_BLANK_UNIT * ((expect - mf.file_from_offset) // CQ_STORE_UNIT_SIZE))
            current = mf.file_from_offset + mf.wrote_position
            if cq_offset != 0 and expect != current:
                if expect < current:
                    # Built already: skip the units this file holds.
                    skip = min(n - written, (current - expect) // CQ_STORE_UNIT_SIZE)
                    self.repeated_builds += skip
                    written += skip
                    continue
                self.order_errors += 1
                log.error("[BUG] consume queue %s-%d order: expected logic offset %d, wrote position %d",
                          self.topic, self.queue_id, expect, current)
            room = (self.mapped_file_size - mf.wrote_position) // CQ_STORE_UNIT_SIZE
            take = min(room, n - written)
            chunk = units[written:written + take]
            if not mf.append(chunk.tobytes() if not chunk.flags.c_contiguous else chunk.view(np.uint8)):
                return written
            last = chunk[-1]
            self.max_physic_offset = int(last["offset"]) + int(last["size"])
            if store_timestamp:
                mf.set_store_timestamp(store_timestamp)
            written += take
        return written

    # -- read ---------------------------------------------------------------------------------------------------

    @property
    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    @property
    def max_offset_in_queue(self) -> int:
        return self.mapped_file_queue.get_max_offset() // CQ_STORE_UNIT_SIZE

    def get_units(self, start_index: int, max_count: int | None = None) -> np.ndarray | None:
        """Zero-copy units from ``start_index`` to the end of the file holding it (RocketMQ's getIndexBuffer),
        at most ``max_count``; None when the index is below the first file or at/after the end."""
        view = self.get_unit_bytes(start_index, max_count)
        return None if view is None else np.frombuffer(view, dtype=CQ_DTYPE)

    def get_unit_bytes(self, start_index: int, max_count: int | None = None):
        """get_units as raw bytes (a zero-copy memoryview of whole units), for the Cython pull loop; None likewise."""
        offset = start_index * CQ_STORE_UNIT_SIZE
        if offset < self.min_logic_offset:
            return None
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        readable = mf.read_position - pos
        if readable <= 0:
            return None
        if max_count is not None:
            readable = min(readable, max_count * CQ_STORE_UNIT_SIZE)
        return mf.select(pos, readable - readable % CQ_STORE_UNIT_SIZE)

    def get_unit(self, index: int):
        units = self.get_units(index, 1)
        if units is None or len(units) == 0:
            return None
        u = units[0]
        return int(u["offset"]), int(u["size"]), int(u["tags_code"])

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """After commitlog files are deleted: the first unit still pointing into the commitlog becomes the min."""
        mf = self.mapped_file_queue.first()
        if mf is None:
            return
        units = np.frombuffer(mf.select(0), dtype=CQ_DTYPE) if mf.read_position else None
        if units is None or len(units) == 0:
            return
        hit = np.flatnonzero((units["offset"] >= phy_min_offset) & (units["size"] != 0x7FFFFFFF))
        if len(hit):
            self.min_logic_offset = max(self.min_logic_offset,
                                        mf.file_from_offset + int(hit[0]) * CQ_STORE_UNIT_SIZE)
        else:
            self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + mf.read_position)

    def get_offset_in_queue_by_time(self, timestamp: int, commitlog_files: list, commitlog_file_size: int,
                                    min_physic_offset: int) -> int:
        """RocketMQ's getOffsetInQueueByTime: the file found by time, then a binary search on the store times of
        the records its units point at (in Cython); with no exact hit, the nearer of the two neighbours."""
        mf = self._file_by_time(timestamp, commitlog_files, commitlog_file_size)
        if mf is None:
            return 0
        view = mf.select(0)
        if view is None or len(view) < CQ_STORE_UNIT_SIZE:
            return 0
        low = self.min_logic_offset - mf.file_from_offset if self.min_logic_offset > mf.file_from_offset else 0
        offset = offset_in_queue_by_time(view[:len(view) - len(view) % CQ_STORE_UNIT_SIZE], low, commitlog_files,
                                         commitlog_file_size, timestamp, min_physic_offset)
        if offset < 0:
            return 0
        return (mf.file_from_offset + offset) // CQ_STORE_UNIT_SIZE

    def _file_by_time(self, timestamp: int, commitlog_files: list, commitlog_file_size: int):
        # The first file whose last unit's record was stored at or after ``timestamp``. RocketMQ compares file
        # mtimes, which a reopen, a copy or a late flush moves; the record's own store time does not move.
        files = self.mapped_file_queue.mapped_files
        for mf in files:
            unit = self.get_unit((mf.file_from_offset + mf.read_position) // CQ_STORE_UNIT_SIZE - 1) \
                if mf.read_position >= CQ_STORE_UNIT_SIZE else None
            if unit is None:
                continue
            t = pickup_store_timestamp(commitlog_files, commitlog_file_size, unit[0], unit[1])
            if t >= timestamp:
                return mf
        return files[-1] if files else None

    def flush(self, least_pages: int = 0) -> bool:
        return self.mapped_file_queue.flush(least_pages)

    def delete_expired_file(self, min_commitlog_offset: int) -> int:
        """Delete whole files whose last unit points below the commitlog's min offset (never the last file), then
        correct the min offset, as RocketMQ's deleteExpiredFileByOffset + correctMinOffset."""
        deleted = 0
        mfq = self.mapped_file_queue
        while len(mfq) > 1:
            mf = mfq.first()
            if mf.read_position < mf.file_size:
                break
            last = np.frombuffer(mf.select(mf.file_size - CQ_STORE_UNIT_SIZE, CQ_STORE_UNIT_SIZE), dtype=CQ_DTYPE)
            last_offset = int(last[0]["offset"])
            del last
            if last_offset >= min_commitlog_offset:
                break
            mfq.delete_files_below(mf.file_from_offset + mf.file_size)
            deleted += 1
        self.correct_min_offset(min_commitlog_offset)
        return deleted

    def close(self) -> None:
        self.mapped_file_queue.shutdown()

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()
        self.max_physic_offset = -1
        self.min_logic_offset = 0
