"""Store discovery and planning: which commitlog segments (and which byte ranges and records in them) a read
needs, and whether a store is open by a broker.

Everything here reads metadata only: directory listings, the first record header of each segment, a few
consume-queue units (binary searches, never whole files), index files, and in snapshot mode the record headers of
the last segment. No commitlog record is decoded. Used on the driver (Spark's planning worker). Stores are local
paths or URIs (``rmqcore.spark.fs``).
"""
from __future__ import annotations

import bisect
import datetime
import errno
import json
import os
import struct


from .._index_file import IndexFile, index_key_hash
from .._segment import data_end, first_store_timestamp
from ..consume_queue import queue_id_of
from ..index_service import build_key, is_index_file_name
from . import fs

LONG_MAX = (1 << 63) - 1
SNAPSHOT_WINDOW = 32 << 20      # remote stores: bytes per ranged read while finding the end of data
_UNIT = struct.Struct(">qiq")


class StoreInUseError(RuntimeError):
    """A store is open by a broker (its lock is held) or was not shut down cleanly (its abort file exists)."""


def is_segment_name(name: str) -> bool:
    return len(name) == 20 and name.isdigit() and name.isascii()


def parse_stores(options) -> list[tuple[str, str]]:
    """``[(broker, root), ...]`` from the reader/job options (keys lower-cased, as Spark passes them).

    ``brokers``: JSON ``{"broker-a": "/path/a", ...}``; otherwise ``paths`` (JSON list, from ``load([...])``) or
    ``path`` (``load("/p")``, or several separated by commas), each named after its directory. Roots are local
    paths or filesystem URIs (``s3://bucket/store``). A broker name must be unique: ``commitlog_offset`` only
    identifies a record within one broker."""
    stores: list[tuple[str, str]] = []
    if options.get("brokers"):
        mapping = json.loads(options["brokers"])
        if not isinstance(mapping, dict):
            raise ValueError('option brokers must be a JSON object {"broker-name": "/store/root", ...}')
        stores = [(str(k), str(v)) for k, v in mapping.items()]
    else:
        roots: list[str] = []
        if options.get("paths"):
            roots = [str(p) for p in json.loads(options["paths"])]
        elif options.get("path"):
            roots = [p.strip() for p in options["path"].split(",") if p.strip()]
        stores = [(fs.basename(r), r) for r in roots]
    if not stores:
        raise ValueError("rocketmq-store needs store roots: load(path), load([paths]) or option brokers "
                         '= JSON {"broker-a": "/path/a"}')
    names = [b for b, _ in stores]
    dup = {b for b in names if names.count(b) > 1}
    if dup:
        raise ValueError(f"broker names must be unique, got {sorted(dup)} more than once; name the stores "
                         'with option brokers = JSON {"name": "/path"}')
    out = []
    for b, root in stores:
        root = fs.normalize(root)
        check_store_root(b, root)
        out.append((b, root))
    return out


def check_store_root(broker: str, root: str) -> None:
    """FileNotFoundError unless ``root`` (normalized) holds a commitlog/ directory: a missing or mistyped path is an
    error, never an empty store with nothing wrong in it."""
    if not fs.isdir(fs.join(root, "commitlog")):
        raise FileNotFoundError(f"{fs.display(root)} (broker {broker}) is not a store root: no commitlog/ directory")


def list_segments(root: str) -> list[str]:
    """Paths (URIs) of the commitlog segments of a store, in offset order."""
    d = fs.join(root, "commitlog")
    return [fs.join(d, n) for n in fs.listdir(d) if is_segment_name(n)]


def segment_first_timestamp(path: str):
    with fs.open_file(path) as f:
        if f.size == 0:
            return None
        if f.local:
            return first_store_timestamp(f.view())
        head = f.read_at(0, 4)
        total = int.from_bytes(bytes(head), "big", signed=True) if len(head) == 4 else 0
        if total <= 0 or total > f.size:
            return None
        return first_store_timestamp(f.read_at(0, total))


def parse_time(value, option: str = "startTime/endTime") -> int | None:
    """ms since the epoch from an int-like string, or an ISO 8601 time (UTC when it has no zone)."""
    if value is None or value == "":
        return None
    s = str(value).strip()
    if s.lstrip("-").isdigit():
        return int(s)
    try:
        dt = datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"option {option}: {value!r} is neither ms since the epoch nor an ISO 8601 time "
                         "(e.g. 2026-11-01T00:00:00Z)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return int(dt.timestamp() * 1000)


def prune_by_time(segments: list[str], start: int | None, end: int | None) -> list[str]:
    """Keep the segments that can hold a record stored in [start, end).

    Store times only grow along the commitlog (stamped under the put lock), so segment i holds times in
    [first(i), first(i+1)]. A segment whose first record cannot be read is kept (the reader reports it)."""
    if start is None and end is None:
        return segments
    firsts = [segment_first_timestamp(p) for p in segments]
    keep = []
    for i, p in enumerate(segments):
        lo = firsts[i]
        hi = next((t for t in firsts[i + 1:] if t is not None), None)
        if lo is None:
            keep.append(p)
            continue
        if end is not None and lo >= end:
            continue
        if start is not None and hi is not None and hi < start:
            continue
        keep.append(p)
    return keep


# -- consume queues, by binary search --------------------------------------------------------------------------

class QueueUnits:
    """The units of one consume queue (``consumequeue/{topic}/{queueId}/``), read by index: a few 20-byte
    probes per question, through 64 KiB blocks (cached), never the whole files. Units are in commitlog order;
    RocketMQ's filler units (size INT_MAX, before a queue's first real unit) read as offset -1."""

    BLOCK = 64 * 1024

    def __init__(self, qdir: str, files: list[tuple[str, int]]):
        # files: (name, size) sorted by name; the name is the logical byte offset of the file's first unit.
        self.qdir = qdir
        self.files = [(int(n) // 20, fs.join(qdir, n), size // 20) for n, size in files if is_segment_name(n)]
        self._starts = [f[0] for f in self.files]
        self._src: dict = {}
        self._blocks: dict = {}
        self.lo = self.files[0][0] if self.files else 0
        self.hi = self.lo
        if self.files:
            first, _, cap = self.files[-1]
            # The last file's units end at the first all-zero unit (the preallocated tail).
            a, b = 0, cap
            while a < b:
                m = (a + b) // 2
                if self._raw(len(self.files) - 1, m)[1] == 0:
                    b = m
                else:
                    a = m + 1
            self.hi = first + a

    def _raw(self, fi: int, k: int):
        start, uri, cap = self.files[fi]
        blk = (k * 20) // self.BLOCK
        key = (fi, blk)
        data = self._blocks.get(key)
        if data is None:
            src = self._src.get(fi)
            if src is None:
                src = self._src[fi] = fs.open_file(uri)
            data = self._blocks[key] = bytes(src.read_at(blk * self.BLOCK, self.BLOCK))
        at = k * 20 - blk * self.BLOCK
        if at + 20 > len(data):
            return (0, 0, 0)
        return _UNIT.unpack_from(data, at)

    def unit(self, i: int) -> tuple[int, int]:
        """(commitlog offset, size) of unit i (lo <= i < hi); offset -1 for a filler unit."""
        j = max(bisect.bisect_right(self._starts, i) - 1, 0)
        start, _, cap = self.files[j]
        if i - start >= cap:
            return (-1, 0)                  # a gap between files (cleaned or missing): no unit
        off, size, _ = self._raw(j, i - start)
        return (-1, size) if size == 0x7FFFFFFF or off < 0 else (off, size)

    def lower_bound(self, offset: int) -> int:
        a, b = self.lo, self.hi
        while a < b:
            m = (a + b) // 2
            if self.unit(m)[0] < offset:
                a = m + 1
            else:
                b = m
        return a

    def end(self) -> int:
        """The end (offset + size) of the queue's last unit, 0 when empty."""
        if self.hi <= self.lo:
            return 0
        off, size = self.unit(self.hi - 1)
        return off + size if off >= 0 else 0

    def touches(self, lo: int, hi: int) -> bool:
        """Does a unit point into [lo, hi)?"""
        i = self.lower_bound(lo)
        return i < self.hi and self.unit(i)[0] < hi

    def close(self):
        for s in self._src.values():
            s.close()
        self._src.clear()
        self._blocks.clear()


def consume_queues(root: str) -> dict:
    """``{(topic, queue_id): QueueUnits}`` for every queue of a store, from one (recursive) listing."""
    cq = fs.join(root, "consumequeue")
    files: dict = {}
    # The store's own rule for which directories are queues (consume_queue.queue_id_of): a name that is no queue
    # id, or a topic no record could carry, is skipped, never joined to a path.
    if fs.is_local(root):
        base = fs.local_path(cq)
        for topic in (os.listdir(base) if os.path.isdir(base) else []):
            tdir = os.path.join(base, topic)
            for name in (os.listdir(tdir) if os.path.isdir(tdir) else []):
                qid, qdir = queue_id_of(topic, name), os.path.join(tdir, name)
                if qid is not None and os.path.isdir(qdir):
                    files[(topic, qid)] = [(n, os.path.getsize(os.path.join(qdir, n)))
                                           for n in sorted(os.listdir(qdir))]
    else:
        from pyarrow import fs as pafs
        f, path = fs._filesystem(cq)
        for info in f.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=True)):
            rel = info.path[len(path.rstrip("/")) + 1:].split("/")
            qid = queue_id_of(rel[0], rel[1]) if len(rel) == 3 else None
            if info.type == pafs.FileType.File and qid is not None:
                files.setdefault((rel[0], qid), []).append((rel[2], int(info.size)))
    return {k: QueueUnits(fs.join(cq, k[0], str(k[1])), sorted(v)) for k, v in sorted(files.items())}


def prune_by_queues(root: str, segments: list[str], topics: list[str] | None,
                    queue_ids: list[int] | None, limit: int | None = None) -> list[str]:
    """Keep the segments the selected consume queues point into, plus the data past the end of what the consume
    queues cover (not dispatched yet). Each queue answers "does a unit point into this segment?" by binary
    search, so planning costs queues × segments × log(units) probes, not the consume-queue bytes. Prepared and
    rollback transaction records have no consume-queue unit, so segments holding only those for the selection
    are dropped (use pruneByConsumeQueue=false to scan)."""
    if topics is None and queue_ids is None:
        return segments
    queues = consume_queues(root)
    try:
        tail = max((q.end() for q in queues.values()), default=0)
        wanted = [q for (t, qid), q in queues.items()
                  if (topics is None or t in topics) and (queue_ids is None or qid in queue_ids)]
        bases = [int(fs.basename(p)) for p in segments]
        keep = []
        for i, p in enumerate(segments):
            lo = bases[i]
            hi = bases[i + 1] if i + 1 < len(bases) else lo + fs.getsize(p)
            if limit is not None:
                hi = min(hi, limit)
            if any(q.touches(lo, hi) for q in wanted) or _undispatched(p, lo, hi, tail):
                keep.append(p)
        return keep
    finally:
        for q in queues.values():
            q.close()


def _undispatched(path: str, lo: int, hi: int, tail: int) -> bool:
    """Can segment [lo, hi) hold records past the dispatched end ``tail``? Not when it ends before it, nor when
    the record slot at ``tail`` is the end of data (totalSize 0) or the end-of-file blank."""
    if hi <= tail:
        return False
    at = max(tail - lo, 0)
    head = bytes(fs.read_bytes(path, at, 8))
    if len(head) < 8:
        return False
    total = int.from_bytes(head[:4], "big", signed=True)
    magic = int.from_bytes(head[4:], "big", signed=False)
    return not (total == 0 or magic == 0xCBD43194)


def dispatched_end(root: str) -> int:
    """The end of what the consume queues cover (the last unit of every queue)."""
    queues = consume_queues(root)
    try:
        return max((q.end() for q in queues.values()), default=0)
    finally:
        for q in queues.values():
            q.close()


# -- live stores and snapshots ---------------------------------------------------------------------------------

def lock_held(root: str) -> bool | None:
    """Is the store's ``lock`` file locked by a running store? True/False for local stores; None when it cannot
    be known (no lock file, a remote filesystem). rmqcore holds an exclusive ``flock``; RocketMQ's Java broker
    holds ``FileChannel.tryLock`` (a POSIX record lock): both are tested, neither is taken."""
    if not fs.is_local(root):
        return None
    import fcntl
    path = os.path.join(fs.local_path(root), "lock")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            # A shared flock conflicts with the holder's exclusive one; taken and dropped at once.
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return True
            raise
        # POSIX record locks: ask (F_GETLK / F_OFD_GETLK take nothing) whether a write lock could be set.
        cmd = getattr(fcntl, "F_OFD_GETLK", None) or fcntl.F_GETLK
        req = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        res = fcntl.fcntl(fd, cmd, req)
        return struct.unpack("hhqqi4x", res)[0] != fcntl.F_UNLCK
    finally:
        os.close(fd)


def check_not_live(broker: str, root: str) -> None:
    """Fail when a store is open by a broker (lock held) or not shut down cleanly (abort file present)."""
    shown = fs.display(root)
    if lock_held(root):
        raise StoreInUseError(
            f"{shown} (broker {broker}) is open by a running broker: its lock file is held, so its end of data "
            "moves while Spark reads it. Stop the broker, read a copy, or set option onLiveStore=snapshot to read "
            "it up to the end of data fixed when the query is planned")
    if fs.exists(fs.join(root, "abort")):
        raise StoreInUseError(
            f"{shown} (broker {broker}) has an abort file: a broker has it open (or a copy was taken while it "
            "ran) or it crashed, so its last records may be partial. Set option onLiveStore=snapshot to read it "
            "up to the last complete record, fixed when the query is planned")


def snapshot_end(segments: list[str]) -> int:
    """The global offset of the end of data: the end of the last complete record of the newest segment that
    holds one (a header walk of that segment). A broker may create the next segment before it fills the current
    one, so an empty newest file does not say where the data ends: the walk goes back to the segment that has
    data. Everything below the result was written before planning and no longer changes."""
    for path in reversed(segments):
        base = int(fs.basename(path))
        with fs.open_file(path) as f:
            end = _data_end(f) if f.size else 0
        if end > 0:
            return base + end
    return int(fs.basename(segments[0])) if segments else 0


def _data_end(f) -> int:
    if f.local:
        return data_end(f.view())
    pos, need = 0, 0
    while True:
        n = min(max(SNAPSHOT_WINDOW, need), f.size - pos)
        buf = f.read_at(pos, n)
        e = data_end(buf)
        head = bytes(buf[e:e + 4])
        total = int.from_bytes(head, "big", signed=True) if len(head) == 4 else -1
        if pos + n >= f.size or total == 0 or 0 < total <= n - e:
            return pos + e              # the file's end, the end of data, or a bad record: not a window's cut
        pos, need = pos + e, max(total, 8)


# -- splits ----------------------------------------------------------------------------------------------------

def split_ranges(size: int, split: int, data_hint: int | None = None) -> list[tuple[int, int]]:
    """[start, stop) byte ranges of a segment for ``split``-byte splits (0: one split). ``data_hint`` (where
    the data of the last segment ends, about): splits are laid up to it and the last one runs to ``size``, so
    the unwritten tail of a preallocated segment costs one split, not many."""
    if split <= 0 or size <= split:
        return [(0, size)]
    top = size if data_hint is None else max(0, min(size, data_hint))
    cuts = list(range(0, top, split)) or [0]
    return [(a, b) for a, b in zip(cuts, cuts[1:] + [size])]


def index_geometry(path: str) -> tuple[int, int]:
    """(hash_slot_num, index_num) of an index file, read from the file: the header holds neither, but the file
    is 40 + slots×4 + items×20 bytes, RocketMQ sizes items = 4 × slots (maxIndexNum / maxHashSlotNum), and the
    header's beginPhyOffset/endPhyOffset are the offsets of items 1 and indexCount-1: a geometry is accepted
    only when those items are where it puts them."""
    with fs.open_file(path) as f:
        size = f.size
        header = bytes(f.read_at(0, 40))
        if size > 40 and (size - 40) % 84 == 0 and len(header) == 40:
            slots = (size - 40) // 84
            begin_phy, end_phy, _, count = struct.unpack_from(">qqii", header, 16)
            items = 4 * slots
            if count <= 1:
                return slots, items                      # no item yet: the size is all there is
            if count <= items:
                first = bytes(f.read_at(40 + 4 * slots + 20 + 4, 8))
                last = bytes(f.read_at(40 + 4 * slots + 20 * (count - 1) + 4, 8))
                if (len(first) == len(last) == 8 and struct.unpack(">q", first)[0] == begin_phy
                        and struct.unpack(">q", last)[0] == end_phy):
                    return slots, items
    raise ValueError(f"{fs.display(path)}: {size} bytes is not an index file of RocketMQ's proportions (items = 4 × "
                     "slots, items 1 and indexCount-1 at the header's begin/end offsets); set options "
                     "indexHashSlotNum and indexNum to the store's maxHashSlotNum and maxIndexNum")


def index_positions(root: str, topic: str, keys: list[str], hash_slot_num: int | None, index_num: int | None,
                    begin: int = 0, end: int = LONG_MAX, max_hits: int = 1 << 20) -> list[int]:
    """Commitlog offsets the index files give for ``topic#key`` (hash matches: the reader keeps exact ones).
    ``hash_slot_num``/``index_num`` None: taken from each file's size (see index_geometry)."""
    if not fs.is_local(root):
        raise ValueError(f"option keys: {fs.display(root)} is not on a local filesystem; index lookups map the "
                         "index files, so they need a local (or mounted) store path")
    d = os.path.join(fs.local_path(root), "index")
    if not os.path.isdir(d):
        return []
    out = set()
    for name in sorted(os.listdir(d)):
        if not is_index_file_name(name):
            continue
        path = os.path.join(d, name)
        slots, items = (hash_slot_num, index_num) if hash_slot_num and index_num else index_geometry(path)
        f = IndexFile(path, slots, items, 0, 0, read_only=True)
        try:
            if not f.is_time_matched(begin, end):
                continue
            for k in keys:
                out.update(f.select_phy_offsets_by_hash(index_key_hash(build_key(topic, k)), max_hits, begin, end))
        finally:
            f.close()
    return sorted(out)

