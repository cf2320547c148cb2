"""Offline administration of a store directory, read-only: what ``rmqcore inspect/verify/get/query/dump/stats/
export`` run on (RocketMQ's mqadmin reads through a broker; this reads the files).

``StoreReader`` maps every file read-only with the geometry read from the files (never the configured one) and
changes no byte: no lock is taken, no abort file written, nothing truncated. A store held open by a running
process can be read too (its figures move while you read); ``repair`` is the one command that writes, and it goes
through ``MessageStore.open`` (lock, recovery) like any opener.
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ._codec import RESULT_END, decode_offset_msg_id, record_error, scan_records
from ._message import MessageExt, decode_message
from ._segment import SEGMENT_END, verify_segment
from .checkpoint import StoreCheckpoint
from .commit_log import CommitLog
from .config import StoreConfig
from .consume_queue import ConsumeQueue, queue_dirs
from .errors import CorruptRecordError, StoreLayoutError
from .geometry import Geometry, is_store_dir, read_geometry
from .index_service import IndexService

# Big-endian magic codes at record offset 4: v1 (4.x), v2 (5.x, 2-byte topic length). Used to find the next record
# after a damaged one.
_MAGICS = ((-626843481) & 0xFFFFFFFF).to_bytes(4, "big"), ((-626843477) & 0xFFFFFFFF).to_bytes(4, "big")

_BLANK = ((-875286124) & 0xFFFFFFFF).to_bytes(4, "big")

Progress = Callable[[int], None]

# A walk tells its progress callback the bytes of records it has passed every this many bytes (and at each file's
# end), so a bar moves in steps a person sees even through one 1 GiB file.
PROGRESS_STEP = 1 << 20


def lock_held(path: str) -> bool:
    """True when a process holds the store's lock file (a MessageStore is open on it). Probed with a shared,
    non-blocking flock that is released at once."""
    try:
        fd = os.open(os.path.join(path, "lock"), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def parse_time_ms(text: str) -> int:
    """Milliseconds since the epoch from a digit string, or from an ISO 8601 time (UTC when it has no zone; a
    trailing Z too). ValueError for anything else: callers name their field."""
    import datetime
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    dt = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return int(dt.timestamp() * 1000)


def check_store_path(path: str) -> str:
    """``path`` made absolute, or FileNotFoundError / StoreLayoutError saying why it is not a store."""
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such directory")
    if not os.path.isdir(path):
        raise StoreLayoutError(f"{path} is not a directory")
    if not is_store_dir(path):
        raise StoreLayoutError(f"{path} is not a message store (no commitlog/, consumequeue/, index/ or checkpoint)")
    return path


class NewStoreDir:
    """``with NewStoreDir(path) as made: ... made.served = True``: a store directory a server command (``rmqcore
    serve``, ``python -m rmqcore.console``) opens, creating it when missing. When the command fails before it served
    (a port taken, a bad address, a config refused), the directory it created is removed again: a mistyped command
    leaves nothing behind. A directory that existed, or a store that served, is never touched."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.made = not os.path.lexists(self.path)
        self.served = False

    def __enter__(self) -> "NewStoreDir":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and self.made and not self.served:
            import shutil
            shutil.rmtree(self.path, ignore_errors=True)
        return False


@dataclass
class BadRecord:
    """A record a walk could not decode: where, which field, why."""
    offset: int
    field: str
    message: str
    file: str = ""

    def as_dict(self) -> dict:
        return {"offset": self.offset, "field": self.field, "message": self.message, "file": self.file}


@dataclass
class SegmentReport:
    """What ``verify_segment`` found in one commitlog file."""
    file: str
    file_from_offset: int
    records: int = 0
    bytes: int = 0
    first_timestamp: int | None = None
    last_timestamp: int | None = None
    bad: list[BadRecord] = field(default_factory=list)


class StoreReader:
    """A store directory opened read-only: commitlog, consume queues, index files and checkpoint."""

    def __init__(self, path: str, config: StoreConfig | None = None):
        self.path = check_store_path(path)
        configured = config or StoreConfig()
        self.geometry: Geometry = read_geometry(self.path, configured)
        self.geometry_differences = self.geometry.differences(configured)
        self.config = self.geometry.apply(configured)
        self.locked = lock_held(self.path)
        self.aborted = os.path.exists(self._p("abort"))
        self.commit_log = CommitLog(self._p("commitlog"), self.config, read_only=True)
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.index_service: IndexService | None = None
        self.checkpoint: StoreCheckpoint | None = None
        try:
            # Queues and index before the commitlog: a store another process writes is appended to first and
            # dispatched after, so the commitlog read last holds every record the queues and index point at (its
            # end of data is never behind what they show dispatched).
            self._load_consume_queues()
            if os.path.isdir(self._p("index")):
                self.index_service = IndexService(self._p("index"), self.config.max_hash_slot_num,
                                                  self.config.max_index_num, read_only=True)
                self.index_service.load(True)
            if os.path.isdir(self._p("commitlog")):
                self.commit_log.load()      # every file mapped whole: a walk can pass a damaged record
            self._data_end = self._find_data_end()
            for cq in self.consume_queues.values():
                cq.correct_min_offset(self.commit_log.min_offset)
            if os.path.exists(self._p("checkpoint")):
                self.checkpoint = StoreCheckpoint(self._p("checkpoint"), read_only=True)
        except BaseException:
            self.close()
            raise

    def _p(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    def _load_consume_queues(self) -> None:
        root = self._p("consumequeue")
        if not os.path.isdir(root):
            return
        # The directories an open loads, by the same rule (consume_queue.queue_dirs): a topic directory whose name
        # no record could be dispatched to (a control character, ...) or a queue directory not named by its id is
        # skipped and logged, never joined to a path.
        for topic, qid in queue_dirs(root):
            cq = ConsumeQueue(topic, qid, root, self.config.mapped_file_size_consume_queue, read_only=True)
            self.consume_queues[(topic, qid)] = cq      # registered first: close() releases a failed load
            cq.load()
            cq.recover()

    def close(self) -> None:
        for cq in self.consume_queues.values():
            cq.close()
        self.consume_queues = {}
        if self.index_service is not None:
            self.index_service.shutdown()
            self.index_service = None
        if self.checkpoint is not None:
            self.checkpoint.shutdown()
            self.checkpoint = None
        self.commit_log.mapped_file_queue.shutdown()

    def __enter__(self) -> "StoreReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- figures ------------------------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def max_offset(self) -> int:
        """The end of data: where a structure-only walk of the newest file holding data stops (what normal
        recovery keeps when the tail is sound)."""
        return self._data_end

    def _find_data_end(self) -> int:
        for mf in reversed(self.commit_log.mapped_file_queue.mapped_files):
            view = mf.view()
            try:
                pos, _count, code = scan_records(view, 0, -1, False)
            finally:
                view.release()
            if pos or code != RESULT_END:
                return mf.file_from_offset + pos
        return self.commit_log.min_offset

    def dispatched_offset(self) -> int:
        """The end of the last record any consume queue points at: how far dispatch got (-1: none)."""
        return max((cq.max_physic_offset for cq in self.consume_queues.values()), default=-1)

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, qid in self.consume_queues:
            out.setdefault(topic, []).append(qid)
        return out

    def first_and_last_timestamp(self) -> tuple[int | None, int | None]:
        files = self.commit_log.mapped_file_queue.mapped_files
        first = last = None
        for mf in files:
            m = self.look_message(mf.file_from_offset)
            if m is not None:
                first = m.store_timestamp
                break
        if self.checkpoint is not None and self.checkpoint.physic_msg_timestamp:
            last = self.checkpoint.physic_msg_timestamp
        for mf in reversed(files):     # the newest record: walk the last file holding data (in C)
            view = mf.view()
            try:
                ts = verify_segment(view, mf.file_from_offset, -1, False, 1)["last_timestamp"]
            finally:
                view.release()
            if ts is not None:
                last = ts
                break
        return first, last

    # -- reading ------------------------------------------------------------------------------------------------

    def look_message(self, offset: int, check_crc: bool = False) -> MessageExt | None:
        if offset < 0:
            return None
        return self.commit_log.look_message(offset, check_crc)

    def get(self, topic: str, queue_id: int, offset: int, count: int = 1) -> list[MessageExt]:
        """Up to ``count`` messages of one queue from logical ``offset``; KeyError for an unknown queue,
        IndexError for an offset outside the queue's [min, max)."""
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None:
            known = ", ".join(f"{t}/{q}" for t, q in sorted(self.consume_queues)[:8]) or "none"
            raise KeyError(f"no consume queue {topic}/{queue_id} in {self.path} (queues: {known})")
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
        if not lo <= offset < hi:
            raise IndexError(f"offset {offset} is outside queue {topic}/{queue_id}'s [{lo}, {hi})")
        out = []
        for qo in range(offset, min(hi, offset + count)):
            unit = cq.get_unit(qo)
            if unit is None:
                break
            m = self.look_message(unit[0])
            if m is not None:
                out.append(m)
        return out

    def by_msg_id(self, msg_id: str) -> list[MessageExt]:
        """RocketMQ's queryMsgById: an offset msg id (store host + commitlog offset) first, else a UNIQ_KEY looked
        up through the index in every topic."""
        try:
            _host, offset = decode_offset_msg_id(msg_id)
        except ValueError:
            offset = -1
        m = self.look_message(offset)
        if m is not None and m.msg_id.upper() == msg_id.upper():
            return [m]
        out = []
        for topic in sorted(self.topics()):
            out += [m for m in self.query_key(topic, msg_id, 32) if m.uniq_key == msg_id]
        return out

    def query_key(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                  end: int = (1 << 63) - 1) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` among their KEYS or as UNIQ_KEY, stored in [begin, end] (ms)."""
        if self.index_service is None or max_num <= 0:
            return []
        offsets, _, _ = self.index_service.query_offset(topic, key, max_num * 4, begin, end)
        out, seen = [], set()
        for off in offsets:
            m = self.look_message(off)
            if m is None or off in seen or m.topic != topic or (key not in m.keys and m.uniq_key != key):
                continue
            seen.add(off)
            out.append(m)
            if len(out) >= max_num:
                break
        return out

    def query_time(self, topic: str, begin: int, end: int, queue_id: int | None = None,
                   max_num: int = 32) -> list[MessageExt]:
        """Messages of ``topic`` (one queue or all) stored in [begin, end] ms, found through the consume queues'
        time lookup (getOffsetInQueueByTime), oldest first."""
        out = []
        files = self.commit_log.mapped_file_queue.mapped_files
        for (t, qid), cq in sorted(self.consume_queues.items()):
            if t != topic or (queue_id is not None and qid != queue_id):
                continue
            start = cq.get_offset_in_queue_by_time(begin, files, self.config.mapped_file_size_commit_log,
                                                   self.commit_log.min_offset)
            # The lookup answers an offset near ``begin``; step back to the first message stored at or after it
            # (many messages share a millisecond).
            qo = max(cq.min_offset_in_queue, min(start, cq.max_offset_in_queue - 1))
            while qo > cq.min_offset_in_queue:
                unit = cq.get_unit(qo - 1)
                prev = self.look_message(unit[0]) if unit is not None else None
                if prev is None or prev.store_timestamp < begin:
                    break
                qo -= 1
            taken = 0
            while qo < cq.max_offset_in_queue and taken < max_num:
                unit = cq.get_unit(qo)
                qo += 1
                m = self.look_message(unit[0]) if unit is not None else None
                if m is None or m.store_timestamp < begin:
                    continue
                if m.store_timestamp > end:
                    break
                out.append(m)
                taken += 1
        out.sort(key=lambda m: (m.store_timestamp, m.commitlog_offset))
        return out[:max_num]

    def iterate(self, progress: Progress | None = None, check_crc: bool = False) -> Iterator[MessageExt]:
        """Every readable message in commitlog order; a damaged stretch is skipped (see walk)."""
        for item in self.walk(self.min_offset, check_crc, progress):
            if isinstance(item, MessageExt):
                yield item

    # -- robust walking -----------------------------------------------------------------------------------------

    def locate(self, offset: int) -> None:
        """Check that a record starts at ``offset``: ValueError naming what is there instead."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        lo, hi = self.min_offset, self.max_offset
        mf = self.commit_log.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None or offset < lo:
            raise ValueError(f"offset {offset} is outside the commitlog, whose files cover [{lo}, "
                             f"{self._files_end()}) and whose data ends at {hi}")
        view = mf.view()
        try:
            pos = offset - mf.file_from_offset
            try:
                decode_message(view, pos, False, mf.file_from_offset)
                return
            except CorruptRecordError as e:
                reason = e
            # Where does the record around ``offset`` start? Walk the file from its first record.
            cur = 0
            while cur < pos:
                try:
                    m = decode_message(view, cur, False, mf.file_from_offset)
                except CorruptRecordError:
                    break
                if cur + m.store_size > pos:
                    raise ValueError(f"offset {offset} is inside the record at {mf.file_from_offset + cur} "
                                     f"({m.store_size} bytes, {m.topic}/{m.queue_id}@{m.queue_offset}): "
                                     f"start from {mf.file_from_offset + cur}") from None
                cur += m.store_size
                del m
        finally:
            view.release()
        if offset >= hi:
            raise ValueError(f"offset {offset} is past the end of data ({hi})")
        raise ValueError(f"no record starts at offset {offset}: {reason}")

    def _files_end(self) -> int:
        last = self.commit_log.mapped_file_queue.last()
        return last.file_from_offset + last.file_size if last is not None else 0

    def data_bytes(self, offset: int | None = None) -> int:
        """The commitlog bytes from ``offset`` (default: the first) to the end of data: what a walk passes, the
        total of its progress (files' apparent sizes count their preallocated, unwritten tails too)."""
        start = self.min_offset if offset is None else max(offset, self.min_offset)
        return max(0, self.max_offset - start)

    def walk(self, offset: int, check_crc: bool = True, progress: Progress | None = None,
             step: int | None = None) -> Iterator[MessageExt | BadRecord]:
        """Records from ``offset`` (a record start) to the end of data: each a MessageExt, or a BadRecord for a
        damaged one, after which the walk resumes at the next place a whole valid record (magic code, sizes,
        CRC with ``check_crc``, physicalOffset equal to its position) starts. ``progress(bytes)`` is told the
        commitlog bytes passed, every ``step`` bytes and at each file's end; they add up to ``data_bytes(offset)``."""
        step = step or PROGRESS_STEP
        told = max(offset, self.min_offset)      # the commitlog offset progress has been told up to
        data_end = self.max_offset
        for mf in self.commit_log.mapped_file_queue.mapped_files:
            end = mf.file_from_offset + mf.file_size
            if end <= offset:
                continue
            view = mf.view()
            try:
                pos = max(0, offset - mf.file_from_offset)
                while pos + 4 <= mf.file_size:
                    head = bytes(view[pos:pos + 8])
                    if len(head) == 8 and head[4:] == _BLANK:
                        break                        # end-of-file blank: the next file goes on
                    if head[:4] == b"\0\0\0\0" and not np.frombuffer(view, dtype=np.uint8)[pos:].any():
                        break                        # end of data: zeros to the end of the file
                    try:
                        m = decode_message(view, pos, check_crc, mf.file_from_offset)
                    except CorruptRecordError as e:
                        yield BadRecord(mf.file_from_offset + pos, e.field, str(e), mf.file_name)
                        nxt = self._resync(view, pos + 1, mf.file_from_offset, check_crc)
                        if nxt < 0:
                            break
                        pos = nxt
                        continue
                    pos += m.store_size
                    if progress is not None and mf.file_from_offset + pos - told >= step:
                        upto = min(mf.file_from_offset + pos, data_end)
                        if upto > told:
                            progress(upto - told)
                            told = upto
                    yield m
                    del m
            finally:
                view.release()
            if progress is not None and min(end, data_end) > told:
                progress(min(end, data_end) - told)
                told = min(end, data_end)

    @staticmethod
    def _resync(view, start: int, base: int, check_crc: bool) -> int:
        raw = memoryview(view)
        if raw.format != "B":
            raw = raw.cast("B")
        n = len(raw)
        best = -1
        for magic in _MAGICS:
            i = start + 4
            while True:
                i = _find(raw, magic, i)
                if i < 0:
                    break
                cand = i - 4
                try:
                    m = decode_message(raw, cand, check_crc, base)
                    if m.commitlog_offset == base + cand:
                        best = cand if best < 0 else min(best, cand)
                        del m
                        break
                    del m
                except CorruptRecordError:
                    pass
                i += 1
                if i >= n:
                    break
        return best

    # -- verification -------------------------------------------------------------------------------------------

    def verify_segments(self, check_crc: bool = True, progress: Progress | None = None) -> list[SegmentReport]:
        """Every commitlog file walked in C (structure and CRCs: the walk goes on after a CRC failure, stops at a
        structural one), with RocketMQ's end-of-file rules checked."""
        files = self.commit_log.mapped_file_queue.mapped_files
        results = []
        for mf in files:
            view = mf.view()
            try:
                results.append(verify_segment(view, mf.file_from_offset, -1, check_crc))
            finally:
                view.release()
            if progress is not None:
                # The file's share of the data (its preallocated tail past the end of data is no work).
                share = (min(mf.file_from_offset + mf.file_size, self.max_offset)
                         - max(mf.file_from_offset, self.min_offset))
                if share > 0:
                    progress(share)
        # The files after the last one holding data are preallocated (empty) ones: the end-of-file rule applies
        # to the files before it.
        last_with_data = max((i for i, r in enumerate(results) if r["bytes"] or r["code"] != SEGMENT_END),
                             default=-1)
        out = []
        for i, (mf, r) in enumerate(zip(files, results)):
            rep = SegmentReport(mf.file_name, mf.file_from_offset, r["records"], r["bytes"], r["first_timestamp"],
                                r["last_timestamp"])
            for off, code in r["bad"]:
                err = record_error(code, off, mf.file_name)
                rep.bad.append(BadRecord(off, err.field, str(err), mf.file_name))
            if r["bad_total"] > len(r["bad"]):
                rep.bad.append(BadRecord(mf.file_from_offset + r["bytes"], "record",
                                         f"{r['bad_total'] - len(r['bad'])} more bad records not listed",
                                         mf.file_name))
            if r["stray"] >= 0:
                rep.bad.append(BadRecord(r["stray"], "totalSize", "non-zero bytes after the end of data: records "
                                         "the walk cannot reach", mf.file_name))
            if r["code"] == SEGMENT_END and i < last_with_data:
                rep.bad.append(BadRecord(mf.file_from_offset + r["bytes"], "totalSize",
                                         "data ends before the file does, without the end-of-file blank record",
                                         mf.file_name))
            out.append(rep)
        return out

    def verify_parts(self, progress: Callable[[str, int, int], None] | None = None) -> dict:
        """recovery.verify_parts over this reader's files: units against records, keys against the index;
        ``progress(phase, done, total)`` as there. A store open in another process (``locked``) is judged up to what
        its dispatcher had done when the queues and index were read (``report["judged_to"]``), not past it; a store
        killed without a close (``aborted``), up to where its next open dispatches again (``not_dispatched``)."""
        from .recovery import crash_redispatch_from, verify_parts
        cqs = list(self.consume_queues.values())
        # A killed store (abort file, no lock): what its dispatcher had not reached is rebuilt by the next open.
        redispatch = None
        if self.aborted and not self.locked and self.checkpoint is not None:
            redispatch = crash_redispatch_from(self, self.commit_log.mapped_file_queue.mapped_files, cqs)
        return verify_parts(self.commit_log, cqs, self.index_service, progress,
                            index_enabled=self.config.message_index_enable, live=self.locked,
                            redispatch_from=redispatch)


def repair(path: str, config: StoreConfig | None = None) -> dict:
    """Repair a store offline (``rmqcore repair``): recover it as an open does, verify it, rebuild what verify
    found damaged, verify again.

    The open takes the store's lock (StoreLockedError when another process has it) and runs RocketMQ's recovery:
    records after the last good one are cut, units and keys missing after it are dispatched again. What recovery
    does not look at (an index file's header or slots, a unit's tagsCode, a queue's first files, anything before
    the files it scans) is found by ``MessageStore.verify``: each damaged queue is deleted whole and every index
    file when any is damaged, and a second open dispatches them again from the commitlog's first record. Records
    themselves are never rewritten: a bad record recovery did not cut stays reported.

    The store is opened with the file sizes its files have, whatever ``config`` says. Returns what recovery found
    (``recovery``), what the first verify found (``found``), what was deleted for rebuilding (``rebuilt_queues``,
    ``rebuilt_index``), the units and keys dispatched again (``rebuilt_units``, ``rebuilt_keys``, both opens) and the
    final verify's report (``verify``; ``ok``)."""
    import shutil

    from .store import MessageStore
    path = check_store_path(path)
    configured = config or StoreConfig()
    cfg = read_geometry(path, configured).apply(configured)
    crashed = os.path.exists(os.path.join(path, "abort"))
    with MessageStore.open(path, cfg, create=False) as store:
        info = store.runtime_info()
        found = store.verify()
    index_damaged = bool(found["index_missing"] or found["index_errors"] or found["index_problems"])
    queues = [tuple(q) for q in found["damaged_queues"]]
    rec = dict(info["recovery"])
    rebuilt_units, rebuilt_keys = rec.get("rebuilt_units", 0), rec.get("rebuilt_keys", 0)
    final = found
    if index_damaged or queues:
        for topic, qid in queues:
            qdir = os.path.join(path, "consumequeue", topic, str(qid))
            if os.path.isdir(qdir):
                shutil.rmtree(qdir)
        if index_damaged:
            idir = os.path.join(path, "index")
            for name in os.listdir(idir) if os.path.isdir(idir) else []:
                os.unlink(os.path.join(idir, name))
        store = MessageStore(path, cfg, create=False)
        store._rebuild_from = 0
        store.start()
        with store:
            again = store.runtime_info()["recovery"]
            final = store.verify()
        rebuilt_units += again.get("rebuilt_units", 0)
        rebuilt_keys += again.get("rebuilt_keys", 0)
    return {"store": path, "crashed": crashed, "recovery": rec, "commitlog_max_offset": info["commitlog_max_offset"],
            "found": found, "rebuilt_queues": queues, "rebuilt_index": index_damaged, "rebuilt_units": rebuilt_units,
            "rebuilt_keys": rebuilt_keys, "verify": final, "ok": final["ok"]}


def _find(raw: memoryview, needle: bytes, start: int) -> int:
    """bytes.find over a memoryview without copying the whole tail at once (4 MiB windows)."""
    n = len(raw)
    window = 4 << 20
    i = start
    while i < n:
        chunk = bytes(raw[i:min(n, i + window + len(needle) - 1)])
        j = chunk.find(needle)
        if j >= 0:
            return i + j
        i += window
    return -1
