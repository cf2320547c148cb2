"""Structured Streaming over live stores: ``spark.readStream.format("rocketmq-store")``.

A stream follows consume queues the way Spark's Kafka source follows partitions. Its offset is the next
consume-queue offset of every (broker, topic, queue)::

    {"broker-a": {"orders": {"0": 1200, "1": 1187}}}

A micro-batch [start, end) of a queue is read on an executor through that queue's units (20 bytes each:
commitlog offset, size, tagsCode) into the commitlog, decoded by the batch source's Cython reader in point mode
(``arrow.iter_segment_batches`` with ``positions``) into the same Arrow batches and schema. Every decoded row is
checked against its unit (topic, queue id, queue offset): a unit that points at no record of its queue is an
error (``onCorrupt=fail``) or a logged skip (``onCorrupt=stop``), never a silent gap.

A unit is read only once it is complete: the driver's scan ends a queue at its first unit with size 0 (the
preallocated tail) and checks that the record its last unit points at has that unit's size (a unit's 20 bytes
are written in order: offset, size, tagsCode). The store is never locked: a store a running broker holds
(rmqcore's or RocketMQ's Java broker) is read live, since everything a complete unit points at was written before
the unit (RocketMQ's dispatch order: commitlog append, then ReputMessageService).

The driver side (``RocketMQStreamReader``) lives as long as the query in Spark's planning worker, so its scan
keeps where each queue ended last time and reads only new units (one ``pread`` per quiet queue).
"""
from __future__ import annotations

import bisect
import json
import logging
import os
import re
import struct
from dataclasses import dataclass, field

import numpy as np
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
try:        # PySpark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxBytes, ReadMaxRows,
                                                  SupportsTriggerAvailableNow)
except ImportError:   # pragma: no cover - PySpark 4.0/4.1 call latestOffset() without a limit
    from dataclasses import dataclass as _dc

    class SupportsTriggerAvailableNow:                      # type: ignore[no-redef]
        pass

    @_dc
    class ReadAllAvailable:                                 # type: ignore[no-redef]
        pass

    @_dc
    class ReadMaxRows:                                      # type: ignore[no-redef]
        max_rows: int

    @_dc
    class ReadMaxBytes:                                     # type: ignore[no-redef]
        max_bytes: int

from .._codec import java_hash_code
from . import fs
from .arrow import SegmentRead, iter_segment_batches
from .layout import is_segment_name, lock_held, parse_stores
from .options import DEFAULT_SPLIT_SIZE
from .schema import arrow_schema

log = logging.getLogger("rmqcore.spark.stream")

UNIT_SIZE = 20
UNITS = np.dtype([("off", ">i8"), ("size", ">i4"), ("tags", ">i8")])
_UNIT = struct.Struct(">qiq")
FILLER_SIZE = 0x7FFFFFFF          # RocketMQ's blank units before a queue's first real one
PROBE_UNITS = 3276                # units read per pread when looking for a queue's new end (64 KiB)
# Tasks of a micro-batch. Every Spark task costs ~65 ms of CPU whatever it reads (bench/README, issue 13), about
# what the point decoder spends on ~20,000 small messages, so a micro-batch up to that many messages is one task
# (the freshness case: a few thousand new messages). A larger one is cut as the batch source cuts a store: one
# task per ``splitSize`` bytes of records (128 MiB by default, the batch source's), counted from the units' sizes.
# Tasks of 100,000 messages (33 MB of 256-byte messages) made a 500 k micro-batch five tasks on two cores.
SMALL_BATCH = 20_000


class DataLossError(RuntimeError):
    """Messages a query still needed are gone (files cleaned, a queue deleted) and ``failOnDataLoss`` is true."""


class ConsumeQueueError(RuntimeError):
    """A consume-queue unit points at no record of its queue (past the commitlog's end, a damaged record, a
    record of another queue)."""


def _pread(path: str, offset: int, n: int) -> bytes:
    if fs.is_local(path):
        fd = os.open(fs.local_path(path), os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.pread(fd, n, offset)
        finally:
            os.close(fd)
    return fs.read_bytes(path, offset, n)


def _segments(root: str) -> list[int]:
    """Bases of the commitlog segments (sorted)."""
    return [int(n) for n in fs.listdir(fs.join(root, "commitlog")) if is_segment_name(n)]


def record_total_size(root: str, bases: list[int], offset: int) -> int | None:
    """totalSize of the record at commitlog ``offset`` (None when no segment holds it)."""
    i = bisect.bisect_right(bases, offset) - 1
    if i < 0:
        return None
    head = _pread(fs.join(root, "commitlog", f"{bases[i]:020d}"), offset - bases[i], 4)
    return int.from_bytes(head, "big", signed=True) if len(head) == 4 else None


def _store_timestamp(root: str, bases: list[int], offset: int) -> int | None:
    from .._segment import first_store_timestamp
    i = bisect.bisect_right(bases, offset) - 1
    if i < 0:
        return None
    path = fs.join(root, "commitlog", f"{bases[i]:020d}")
    total = record_total_size(root, bases, offset)
    if not total or total <= 0:
        return None
    return first_store_timestamp(_pread(path, offset - bases[i], total))


# -- consume queues on the driver ------------------------------------------------------------------------------

class QueueFiles:
    """One consume queue's files: ``[(first unit, path, capacity in units)]`` from a listing."""

    def __init__(self, qdir: str, cq_file_size: int | None = None):
        self.qdir = qdir
        names = [n for n in fs.listdir(qdir) if is_segment_name(n)]
        self.files = []
        for n in names:
            path = fs.join(qdir, n)
            size = cq_file_size or fs.getsize(path)
            self.files.append((int(n) // UNIT_SIZE, path, size // UNIT_SIZE))
        self.starts = [f[0] for f in self.files]

    def units(self, a: int, b: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """Units [a, b) as a UNITS array, and the sub-ranges no file holds any more (cleaned or deleted)."""
        parts, missing = [], []
        i = a
        while i < b:
            j = bisect.bisect_right(self.starts, i) - 1
            if j < 0 or i >= self.files[j][0] + self.files[j][2]:
                nxt = self.starts[j + 1] if j + 1 < len(self.starts) else b
                nxt = min(max(nxt, i + 1), b)
                missing.append((i, nxt))
                i = nxt
                continue
            start, path, cap = self.files[j]
            hi = min(b, start + cap)
            try:
                raw = _pread(path, (i - start) * UNIT_SIZE, (hi - i) * UNIT_SIZE)
            except FileNotFoundError:
                raw = b""
            got = len(raw) // UNIT_SIZE
            if got:
                parts.append(np.frombuffer(raw[:got * UNIT_SIZE], dtype=UNITS))
            if got < hi - i:
                missing.append((i + got, hi))
            i = hi
        arr = np.concatenate(parts) if parts else np.zeros(0, dtype=UNITS)
        return arr, missing


class _Maps:
    """Read-only maps of the files the driver probes every micro-batch (each queue's last consume-queue file,
    the commitlog segments): a probe is a slice, not an open + pread + close. Local files only; the mapping of a
    file deleted meanwhile still reads its old bytes, so callers re-list when a probe says a file is done."""

    def __init__(self):
        self._m: dict = {}

    def read(self, path: str, offset: int, n: int) -> bytes:
        if not fs.is_local(path):
            return _pread(path, offset, n)
        m = self._m.get(path)
        if m is None:
            import mmap
            fd = os.open(fs.local_path(path), os.O_RDONLY | os.O_CLOEXEC)
            try:
                size = os.fstat(fd).st_size
                if size == 0:
                    return b""
                m = self._m[path] = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
        return m[offset:offset + n]

    def drop(self, path: str) -> None:
        m = self._m.pop(path, None)
        if m is not None:
            m.close()

    def close(self) -> None:
        for m in self._m.values():
            m.close()
        self._m.clear()


class StoreScan:
    """Where every consume queue of one store begins and ends, rescanned cheaply between micro-batches."""

    def __init__(self, broker: str, root: str):
        self.broker, self.root = broker, root
        self._ends: dict = {}          # qdir → (file path, file's first unit, units known complete in it, capacity)
        self._mins: dict = {}          # qdir → ((first file path, commitlog min), min offset)
        self._maps = _Maps()
        self._seg_paths: dict = {}     # commitlog base → path (planning between micro-batches is per queue)
        self._qdirs: dict = {}         # (topic, queue id) → qdir, from the last listing

    def __getstate__(self):
        # Planning state only: never shipped with maps (Spark pickles the reader to its Python workers).
        return {"broker": self.broker, "root": self.root, "_ends": {}, "_mins": {}, "_seg_paths": {}, "_qdirs": {}}

    def __setstate__(self, d):
        self.__dict__.update(d)
        self._maps = _Maps()

    def record_size(self, bases: list[int], offset: int) -> int | None:
        i = bisect.bisect_right(bases, offset) - 1
        if i < 0:
            return None
        path = self._seg_paths.get(bases[i])
        if path is None:
            path = self._seg_paths[bases[i]] = fs.join(self.root, "commitlog", f"{bases[i]:020d}")
        head = self._maps.read(path, offset - bases[i], 4)
        return int.from_bytes(head, "big", signed=True) if len(head) == 4 else None

    def min_offset(self, qdir: str, bases: list[int]) -> int:
        mn = self._min_known(qdir, bases)
        if mn is None:
            q = QueueFiles(qdir)
            mn = self._min(qdir, q, bases) if q.files else 0
        return mn

    def queue_dirs(self) -> dict:
        """{(topic, queue id): qdir} of every queue on disk now."""
        from ..consume_queue import queue_id_of
        cq = fs.join(self.root, "consumequeue")
        out = {}
        for topic in fs.listdir(cq):
            tdir = fs.join(cq, topic)
            for name in fs.listdir(tdir):
                qid = queue_id_of(topic, name)
                if qid is not None:
                    out[(topic, qid)] = self._qdirs.get((topic, qid)) or fs.join(tdir, name)
        self._qdirs = out
        return out

    def qdir(self, topic: str, qid: int) -> str:
        d = self._qdirs.get((topic, qid))
        return d if d is not None else fs.join(self.root, "consumequeue", topic, str(qid))

    def bounds(self, qdir: str, bases: list[int]) -> tuple[int, int]:
        """(min, max) consume-queue offsets of a queue: min is its first unit pointing at a commitlog segment
        still present (RocketMQ's ConsumeQueue.correctMinOffset), max is one past its last complete unit."""
        mx = self._max_known(qdir, bases)
        mn = self._min_known(qdir, bases)
        if mx is not None and mn is not None:
            return mn, mx
        q = QueueFiles(qdir)
        if not q.files:
            self._ends.pop(qdir, None)
            self._mins.pop(qdir, None)
            return 0, 0
        return self._min(qdir, q, bases), self._max(qdir, q, bases)

    def _max_known(self, qdir: str, bases: list[int]) -> int | None:
        """The end from where it was last time, without listing the directory: while the last file is not full,
        new units can only go into it (the next file is used once it is full). None: list and search."""
        known = self._ends.get(qdir)
        if known is None or known[2] >= known[3]:
            return None
        try:
            return self._advance(qdir, known[0], known[1], known[2], known[3], bases)
        except FileNotFoundError:
            return None

    def _min_known(self, qdir: str, bases: list[int]) -> int | None:
        cached = self._mins.get(qdir)
        cl_min = bases[0] if bases else 0
        # Consume-queue files are cleaned after the commitlog files they point into, so the commitlog's first file
        # moving is what invalidates a min (units gone by other means are found missing by the task reading them).
        if cached is None or cached[0][1] != cl_min:
            return None
        return cached[1]

    def _max(self, qdir: str, q: QueueFiles, bases: list[int]) -> int:
        start, path, cap = q.files[-1]
        known = self._ends.get(qdir)
        k = known[2] if known and known[0] == path else self._search_end(path, cap)
        return self._advance(qdir, path, start, k, cap, bases, verify=True)

    def _advance(self, qdir: str, path: str, start: int, k: int, cap: int, bases: list[int],
                 verify: bool = False) -> int:
        k0 = k
        if not verify and k < cap:
            head = self._maps.read(path, k * UNIT_SIZE + 8, 4)
            if head == b"\0\0\0\0" or len(head) < 4:
                return start + k            # nothing new: the common case between micro-batches
        # Most queues gained a few units since the last micro-batch: look at 16 first (no numpy: its per-call
        # cost is what planning over 1,000 queues paid), then at up to PROBE_UNITS at a time.
        raw = self._maps.read(path, k * UNIT_SIZE, min(16, cap - k) * UNIT_SIZE)
        n = len(raw) // UNIT_SIZE
        j = 0
        while j < n and raw[j * UNIT_SIZE + 8:j * UNIT_SIZE + 12] != b"\0\0\0\0":
            j += 1
        k += j
        while j == n and n and k < cap:
            raw = self._maps.read(path, k * UNIT_SIZE, min(PROBE_UNITS, cap - k) * UNIT_SIZE)
            n = len(raw) // UNIT_SIZE
            if n == 0:
                break
            sizes = np.frombuffer(raw[:n * UNIT_SIZE], dtype=UNITS)["size"]
            zero = np.flatnonzero(sizes == 0)
            if len(zero):
                k += int(zero[0])
                break
            k += n
        # The last unit must be whole: the record it points at has its size (a unit being written shows its
        # size only after its offset, so a size that matches the record means offset and size are in).
        while k > 0 and (k > k0 or verify):
            off, size, _ = _UNIT.unpack(self._maps.read(path, (k - 1) * UNIT_SIZE, UNIT_SIZE))
            if size == FILLER_SIZE or off < 0 or self.record_size(bases, off) == size:
                break
            k -= 1
        old = self._ends.get(qdir)
        if old is not None and old[0] != path:
            self._maps.drop(old[0])
        if k >= cap:
            self._maps.drop(path)           # full: the next probe lists the directory for the next file
        self._ends[qdir] = (path, start, k, cap)
        return start + k

    @staticmethod
    def _search_end(path: str, cap: int) -> int:
        a, b = 0, cap
        while a < b:
            m = (a + b) // 2
            raw = _pread(path, m * UNIT_SIZE, UNIT_SIZE)
            if len(raw) < UNIT_SIZE or int.from_bytes(raw[8:12], "big", signed=True) == 0:
                b = m
            else:
                a = m + 1
        return a

    def _min(self, qdir: str, q: QueueFiles, bases: list[int]) -> int:
        cl_min = bases[0] if bases else 0
        start, path, cap = q.files[0]
        key = (path, cl_min)
        cached = self._mins.get(qdir)
        if cached and cached[0] == key:
            return cached[1]
        # Units of a file: fillers, units pointing below the commitlog's first file (cleaned), live units, the
        # zero tail. "zero, or a live unit" is false then true along it: a binary search of ~log2(cap) probes.
        a, b = 0, cap
        while a < b:
            m = (a + b) // 2
            raw = _pread(path, m * UNIT_SIZE, UNIT_SIZE)
            if len(raw) < UNIT_SIZE:
                b = m
                continue
            off, size, _ = np.frombuffer(raw, dtype=UNITS)[0].tolist()
            if size == 0 or (size != FILLER_SIZE and off >= cl_min):
                b = m
            else:
                a = m + 1
        result = start + a
        self._mins[qdir] = (key, result)
        return result


# -- options ---------------------------------------------------------------------------------------------------

def _int_option(o: dict, name: str, lo: int, default=None):
    v = o.get(name.lower())
    if v is None or str(v).strip() == "":
        return default
    try:
        n = int(str(v).strip())
    except ValueError:
        raise ValueError(f"option {name}: {v!r} is not an integer") from None
    if n < lo:
        raise ValueError(f"option {name} must be >= {lo}, got {n}")
    return n


def parse_tags(expr: str | None) -> list[str] | None:
    """A consumer's subscription expression (``A || B``, ``*``) as tag names; None for every message."""
    if expr is None or expr.strip() in ("", "*"):
        return None
    tags = [t.strip() for t in expr.split("||") if t.strip()]
    if not tags:
        raise ValueError(f"option tags: {expr!r} names no tag (use 'A || B', or '*' for all)")
    return tags


@dataclass
class StreamOptions:
    stores: list
    topics: list | None = None
    topic_pattern: object = None
    queue_ids: list | None = None
    tags: list | None = None
    starting: str = "latest"               # earliest | latest | json
    starting_json: dict | None = None
    starting_timestamp: int | None = None
    max_messages: int | None = None
    max_bytes: int | None = None
    min_partitions: int | None = None
    max_per_partition: int | None = None
    split_size: int = DEFAULT_SPLIT_SIZE
    fail_on_data_loss: bool = True
    consumer_group: str | None = None
    group_endpoints: dict = field(default_factory=dict)    # broker → "host:port" of the rmqcore serve holding it
    check_crc: bool = True
    on_corrupt: str = "fail"
    batch_rows: int = 65536
    batch_bytes: int = 16 << 20
    extra: dict = field(default_factory=dict)

    KNOWN = {"path", "paths", "brokers", "topics", "topicpattern", "queueids", "tags", "startingoffsets",
             "startingtimestamp", "maxmessagespertrigger", "maxbytespertrigger", "minpartitions",
             "maxmessagesperpartition", "splitsize", "failondataloss", "consumergroup", "consumergroupendpoints",
             "checkcrc", "oncorrupt", "batchrows", "batchbytes"}

    @classmethod
    def parse(cls, options) -> "StreamOptions":
        from .options import _bool, _csv, _ints, parse_size
        from .layout import parse_time
        o = {k.lower(): v for k, v in dict(options).items()}
        unknown = sorted(set(o) - cls.KNOWN)
        if unknown:
            raise ValueError(f"rocketmq-store stream: unknown option(s) {unknown}; known: {sorted(cls.KNOWN)}")
        r = cls(stores=parse_stores(o))
        r.topics = _csv(o.get("topics"))
        if o.get("topicpattern"):
            if r.topics is not None:
                raise ValueError("give option topics or option topicPattern, not both")
            try:
                r.topic_pattern = re.compile(o["topicpattern"])
            except re.error as e:
                raise ValueError(f"option topicPattern: {o['topicpattern']!r} is not a regular expression: {e}") \
                    from None
        r.queue_ids = _ints(o.get("queueids"), "queueIds")
        r.tags = parse_tags(o.get("tags"))
        s = str(o.get("startingoffsets", "latest")).strip()
        if s.lower() in ("earliest", "latest"):
            r.starting = s.lower()
        else:
            try:
                r.starting_json = json.loads(s)
            except ValueError:
                raise ValueError(f"option startingOffsets must be earliest, latest or JSON "
                                 f'{{"broker": {{"topic": {{"0": 12}}}}}}, got {s!r}') from None
            _check_offsets(r.starting_json, "startingOffsets", allow_special=True)
            r.starting = "json"
        if o.get("startingtimestamp") is not None:
            if "startingoffsets" in o:
                raise ValueError("give option startingOffsets or option startingTimestamp, not both")
            r.starting_timestamp = parse_time(o["startingtimestamp"], "startingTimestamp")
            r.starting = "timestamp"
        r.max_messages = _int_option(o, "maxMessagesPerTrigger", 1)
        if o.get("maxbytespertrigger") is not None:
            r.max_bytes = parse_size(o["maxbytespertrigger"], "maxBytesPerTrigger")
            if r.max_bytes <= 0:
                raise ValueError("option maxBytesPerTrigger must be > 0")
        r.min_partitions = _int_option(o, "minPartitions", 1)
        r.max_per_partition = _int_option(o, "maxMessagesPerPartition", 1)
        r.split_size = parse_size(o.get("splitsize", DEFAULT_SPLIT_SIZE), "splitSize")
        if r.split_size <= 0:
            raise ValueError("option splitSize must be > 0")
        r.fail_on_data_loss = _bool(o.get("failondataloss"), True)
        r.consumer_group = (o.get("consumergroup") or "").strip() or None
        ep = (o.get("consumergroupendpoints") or "").strip()
        if ep:
            if r.consumer_group is None:
                raise ValueError("option consumerGroupEndpoints needs option consumerGroup")
            if ep.startswith("{"):
                r.group_endpoints = {str(k): str(v) for k, v in json.loads(ep).items()}
            elif len(r.stores) == 1:
                r.group_endpoints = {r.stores[0][0]: ep}
            else:
                raise ValueError('option consumerGroupEndpoints: with several stores give JSON {"broker": "host:port"}')
            unknown = sorted(set(r.group_endpoints) - {b for b, _ in r.stores})
            if unknown:
                raise ValueError(f"option consumerGroupEndpoints names brokers the query does not read: {unknown}")
        r.check_crc = _bool(o.get("checkcrc"), True)
        r.on_corrupt = str(o.get("oncorrupt", "fail")).lower()
        if r.on_corrupt not in ("fail", "stop"):
            raise ValueError(f"option onCorrupt must be fail or stop, got {o.get('oncorrupt')!r}")
        r.batch_rows = _int_option(o, "batchRows", 1, 65536)
        r.batch_bytes = parse_size(o.get("batchbytes", 16 << 20), "batchBytes")
        return r

    def wants(self, topic: str, qid: int) -> bool:
        if self.queue_ids is not None and qid not in self.queue_ids:
            return False
        if self.topics is not None:
            return topic in self.topics
        if self.topic_pattern is not None:
            return self.topic_pattern.fullmatch(topic) is not None
        from ..broker.topic_validator import is_system_topic
        # Every user topic: not RocketMQ's system topics nor a group's retry and dead-letter queues.
        return not (is_system_topic(topic) or topic.startswith(("%RETRY%", "%DLQ%")))


def _check_offsets(doc, name: str, allow_special: bool = False) -> None:
    lo = -2 if allow_special else 0
    if not isinstance(doc, dict):
        raise ValueError(f'option {name}: expected {{"broker": {{"topic": {{"queueId": offset}}}}}}')
    for b, topics in doc.items():
        if not isinstance(topics, dict):
            raise ValueError(f"option {name}: broker {b!r} must map topics to queues")
        for t, queues in topics.items():
            if not isinstance(queues, dict):
                raise ValueError(f"option {name}: {b}/{t} must map queue ids to offsets")
            for q, off in queues.items():
                if not str(q).isdigit() or type(off) is not int or off < lo:
                    raise ValueError(f"option {name}: {b}/{t}/{q}: offset {off!r} must be an integer >= {lo}"
                                     + (" (-2 earliest, -1 latest)" if allow_special else ""))


# -- offsets ---------------------------------------------------------------------------------------------------

def flatten(doc: dict) -> dict:
    return {(b, t, int(q)): int(o) for b, topics in doc.items() for t, qs in topics.items() for q, o in qs.items()}


def nest(flat: dict) -> dict:
    out: dict = {}
    for (b, t, q), o in sorted(flat.items()):
        out.setdefault(b, {}).setdefault(t, {})[str(q)] = o
    return out


def fair_take(avail: dict, budget: int) -> dict:
    """Spread ``budget`` over queues with ``avail[k]`` each: every queue gets an equal share, what a queue cannot
    use goes to the others (water-filling), in a fixed key order so the split is reproducible."""
    take = {k: 0 for k in avail}
    active = sorted(k for k, n in avail.items() if n > 0)
    remaining = budget
    while remaining > 0 and active:
        share = max(1, remaining // len(active))
        nxt = []
        for k in active:
            t = min(avail[k] - take[k], share, remaining)
            take[k] += t
            remaining -= t
            if take[k] < avail[k]:
                nxt.append(k)
            if remaining == 0:
                break
        active = nxt
    return take


def fair_take_bytes(sizes: dict, budget: int) -> dict:
    """The same over bytes: ``sizes[k]`` the record sizes of queue k's next units; each queue takes whole units.
    At least one unit is taken overall, so a message larger than the budget does not stop the stream."""
    cums = {k: np.cumsum(s, dtype=np.int64) for k, s in sizes.items()}
    take = {k: 0 for k in sizes}
    used = {k: 0 for k in sizes}
    active = sorted(k for k in sizes if len(sizes[k]))
    remaining = budget
    while remaining > 0 and active:
        share = max(1, remaining // len(active))
        nxt, moved = [], False
        for k in active:
            c = cums[k]
            n = int(np.searchsorted(c, used[k] + min(share, remaining), side="right"))
            if n > take[k]:
                remaining -= int(c[n - 1]) - used[k]
                used[k] = int(c[n - 1])
                take[k] = n
                moved = True
            if take[k] < len(c):
                nxt.append(k)
        active = nxt
        if not moved:
            break
    if not any(take.values()) and active:
        take[active[0]] = 1
    return take


# -- partitions ------------------------------------------------------------------------------------------------

@dataclass
class QueueRange:
    """Units [start, end) of one consume queue."""
    broker: str
    root: str
    topic: str
    queue_id: int
    start: int
    end: int


@dataclass
class QueueRanges(InputPartition):
    """One task: ranges of one or more queues, read in turn."""
    ranges: list
    value: object = None

    def __post_init__(self):
        self.value = ",".join(f"{r.broker}/{r.topic}/{r.queue_id}[{r.start},{r.end})" for r in self.ranges[:4])


def plan_tasks(ranges: list[QueueRange], max_per: int | None, min_parts: int | None,
               nbytes: int = 0, split_size: int = DEFAULT_SPLIT_SIZE) -> list[QueueRanges]:
    """Queue ranges packed in order into tasks of about equal size: as many tasks as ``split_size`` bytes each
    need (``nbytes``: the records' bytes, 0 when not counted), as ``max_per`` units each need, and at least
    ``min_parts`` (a large queue range is split across tasks, as the Kafka source's minPartitions splits large
    offset ranges); several small ranges share a task."""
    import dataclasses
    import math
    total = sum(r.end - r.start for r in ranges)
    if total == 0:
        return []
    n = max(min_parts or 1, math.ceil(nbytes / split_size), math.ceil(total / max_per) if max_per else 1)
    cap = max(1, math.ceil(total / n))
    tasks, cur, used = [], [], 0
    for r in ranges:
        a = r.start
        while a < r.end:
            take = min(r.end - a, cap - used)
            cur.append(r if take == r.end - r.start else dataclasses.replace(r, start=a, end=a + take))
            used += take
            a += take
            if used >= cap:
                tasks.append(QueueRanges(cur))
                cur, used = [], 0
    if cur:
        tasks.append(QueueRanges(cur))
    return tasks


def ranges_bytes(ranges: list[QueueRange]) -> int:
    """The records' bytes the ranges' units point at (their sizes; fillers and missing units count 0)."""
    total = 0
    for r in ranges:
        units, _ = QueueFiles(fs.join(r.root, "consumequeue", r.topic, str(r.queue_id))).units(r.start, r.end)
        sz = units["size"].astype(np.int64)
        total += int(sz[(sz != FILLER_SIZE) & (sz > 0)].sum())
    return total


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: StreamOptions, schema):
        self.opts = opts
        self.fields = [(f.name, f.nullable) for f in schema.fields]
        arrow_schema(self.fields)
        self._scans = {b: StoreScan(b, root) for b, root in opts.stores}
        self._target: dict | None = None      # Trigger.AvailableNow: the ends seen when the query started
        # Messages skipped because they were gone (failOnDataLoss=false), per (broker, topic, qid) and the start
        # offset they were missed from: latestOffset and partitions of one batch both see the same gap, and a
        # re-planned batch sees it again, so a gap is keyed by where it starts and counted once.
        self._gaps: dict = {}
        self._logged: set = set()              # queues whose loss was logged: once per queue, not per batch
        self._wants: dict = {}                 # (topic, queue id) → selected: options do not change in a query

    # -- driver --------------------------------------------------------------------------------------------
    def _bounds(self) -> dict:
        """{(broker, topic, qid): (min, max)} of the selected queues now. A store that vanished fails here."""
        out = {}
        for broker, root in self.opts.stores:
            if not fs.isdir(fs.join(root, "commitlog")):
                raise FileNotFoundError(f"{fs.display(root)} (broker {broker}) is gone: no commitlog/ directory")
            scan = self._scans[broker]
            bases = _segments(root)
            for (topic, qid), qdir in scan.queue_dirs().items():
                w = self._wants.get((topic, qid))
                if w is None:
                    w = self._wants[(topic, qid)] = self.opts.wants(topic, qid)
                if w:
                    out[(broker, topic, qid)] = scan.bounds(qdir, bases)
        return out

    def initialOffset(self):
        bounds = self._bounds()
        o = self.opts
        flat = {}
        if o.starting == "json":
            given = flatten(o.starting_json)
            for k, (mn, mx) in bounds.items():
                v = given.get(k, -2)
                flat[k] = mn if v == -2 else mx if v == -1 else v
            for k, v in given.items():
                if k not in bounds and v >= 0:
                    flat[k] = v
        elif o.starting == "timestamp":
            for k, (mn, mx) in bounds.items():
                flat[k] = self._offset_by_time(k, mn, mx, o.starting_timestamp)
        else:
            flat = {k: (mn if o.starting == "earliest" else mx) for k, (mn, mx) in bounds.items()}
        return nest(flat)

    def _offset_by_time(self, key, mn: int, mx: int, ts: int) -> int:
        """The first unit whose record was stored at or after ``ts`` (RocketMQ's getOffsetInQueueByTime), by
        binary search over the queue's units and their records' store times."""
        broker, topic, qid = key
        root = dict(self.opts.stores)[broker]
        bases = _segments(root)
        q = QueueFiles(fs.join(root, "consumequeue", topic, str(qid)))
        a, b = mn, mx
        while a < b:
            m = (a + b) // 2
            units, _ = q.units(m, m + 1)
            t = _store_timestamp(root, bases, int(units["off"][0])) if len(units) else None
            if t is None or t < ts:
                a = m + 1
            else:
                b = m
        return a

    def prepareForTriggerAvailableNow(self):
        self._target = {k: mx for k, (mn, mx) in self._bounds().items()}

    def getDefaultReadLimit(self):
        if self.opts.max_messages is not None:
            return ReadMaxRows(self.opts.max_messages)
        if self.opts.max_bytes is not None:
            return ReadMaxBytes(self.opts.max_bytes)
        return ReadAllAvailable()

    @property
    def lost(self) -> int:
        """Messages this query skipped because their files were gone (failOnDataLoss=false)."""
        return sum(self._gaps.values())

    def _skipped(self, broker: str, topic: str, qid: int, offset: int, gone: int) -> None:
        k = (broker, topic, qid)
        self._gaps[(k, offset)] = gone
        if k not in self._logged:
            self._logged.add(k)
            report_data_loss(self.opts, broker, topic, qid, offset, gone)

    def reportLatestOffset(self):
        # PySpark (4.3 included) gives a Python stream reader no source metrics in the query's progress; this is
        # its only report there (SourceProgress.latestOffset). Skipped messages go beside the queues' ends under
        # "$skipped" (a key no broker directory is named by here: the stream's brokers come from its paths).
        out = nest({k: mx for k, (mn, mx) in self._bounds().items()})
        if self._gaps:
            per_queue: dict = {}
            for (k, _), gone in self._gaps.items():
                per_queue[k] = per_queue.get(k, 0) + gone
            out["$skipped"] = nest(per_queue)
        return out

    def latestOffset(self, start=None, limit=None):
        # PySpark 4.0/4.1 ask latestOffset() alone: then the last known end is the start and no limit applies.
        if start is None:
            start = getattr(self, "_last_end", None) or self.initialOffset()
        if limit is None:
            limit = self.getDefaultReadLimit()
        bounds = self._bounds()
        begin = flatten(start or {})
        end = dict(begin)
        avail = {}
        for k, (mn, mx) in bounds.items():
            if self._target is not None:
                if k not in self._target:
                    continue                 # AvailableNow: nothing that appeared after the query started
                mx = min(mx, self._target[k])
            s = begin.get(k, 0)
            end[k] = max(s, end.get(k, s))
            eff = max(s, mn)
            if s < mn and not self.opts.fail_on_data_loss:
                self._skipped(*k, s, mn - s)      # counted now, so this batch's progress shows it
            if mx > eff:
                avail[k] = (s, eff, mx)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        if max_rows is not None or max_bytes is not None:
            # The engine passes one limit (getDefaultReadLimit's); the other option, when both are set, applies
            # too. ReadAllAvailable (or any other limit) means every available message, options or not.
            max_rows = max_rows if max_rows is not None else self.opts.max_messages
            max_bytes = max_bytes if max_bytes is not None else self.opts.max_bytes
        else:
            for k, (s, eff, mx) in avail.items():
                end[k] = mx
            self._last_end = nest(end)
            return self._last_end
        counts = {k: mx - eff for k, (s, eff, mx) in avail.items()}
        if max_rows is not None:
            counts = fair_take(counts, max_rows)
        if max_bytes is not None:
            sizes = {}
            for k, n in counts.items():
                if n:
                    broker, topic, qid = k
                    root = dict(self.opts.stores)[broker]
                    eff = avail[k][1]
                    units, _ = QueueFiles(fs.join(root, "consumequeue", topic, str(qid))).units(eff, eff + n)
                    sz = units["size"].astype(np.int64)
                    sizes[k] = np.where((sz == FILLER_SIZE) | (sz < 0), 0, sz)
            counts = {k: 0 for k in counts} | fair_take_bytes(sizes, max_bytes)
        for k, n in counts.items():
            if n:
                end[k] = avail[k][1] + n
        self._last_end = nest(end)
        return self._last_end

    def partitions(self, start, end):
        begin = flatten(start or {})
        stores = dict(self.opts.stores)
        ranges = []
        lost_here = []
        bases_of: dict = {}
        for k, e in sorted(flatten(end).items()):
            s = begin.get(k, 0)
            if e <= s:
                continue
            broker, topic, qid = k
            root = stores.get(broker)
            if root is None:
                continue
            if broker not in bases_of:
                bases_of[broker] = _segments(root)
            scan = self._scans[broker]
            mn = scan.min_offset(scan.qdir(topic, qid), bases_of[broker])
            if s < mn:
                gone = min(mn, e) - s
                lost_here.append((broker, topic, qid, s, gone))
                s = min(mn, e)
            if e > s:
                ranges.append(QueueRange(broker, root, topic, qid, s, e))
        for broker, topic, qid, s, gone in lost_here:
            if self.opts.fail_on_data_loss:
                report_data_loss(self.opts, broker, topic, qid, s, gone)
            self._skipped(broker, topic, qid, s, gone)
        o = self.opts
        # Counting bytes reads the ranges' units: only for a micro-batch that may need more than one task.
        nbytes = ranges_bytes(ranges) if sum(r.end - r.start for r in ranges) > SMALL_BATCH else 0
        return plan_tasks(ranges, o.max_per_partition, o.min_partitions, nbytes, o.split_size)

    def commit(self, end):
        if self.opts.consumer_group:
            write_consumer_offsets(self.opts, flatten(end))

    # -- executors -----------------------------------------------------------------------------------------
    def read(self, partition):
        # An empty plan may reach here as InputPartition(None).
        yield from read_queue_ranges(getattr(partition, "ranges", ()), self.fields, self.opts)


def report_data_loss(opts: StreamOptions, broker: str, topic: str, qid: int, offset: int, gone: int) -> None:
    msg = (f"broker {broker}, topic {topic}, queue {qid}: {gone} message(s) from queue offset {offset} are gone "
           "(their files were cleaned or deleted) before the query read them")
    if opts.fail_on_data_loss:
        raise DataLossError(msg + "; set option failOnDataLoss=false to skip them")
    log.warning("rocketmq-store stream: %s; skipped (failOnDataLoss=false)", msg)


def read_queue_ranges(ranges: list[QueueRange], fields, opts: StreamOptions):
    """The rows of units [r.start, r.end) of every queue range of one task, as Arrow batches of ``fields``.

    One pass per store, as the batch source reads a segment: the units of all the task's ranges are read first,
    sorted by commitlog offset, and each commitlog segment is decoded once at all their positions into batches
    of ``batchRows`` (a queue's rows keep queue order: its units point forward). Reading range by range, segment
    by segment made batches of a few hundred rows, each paying Arrow and Spark's per-batch cost: a catch-up ran
    at a third of the batch source's speed (bench/README, Spark streaming catch-up)."""
    by_root: dict = {}
    for r in ranges:
        by_root.setdefault((r.broker, r.root), []).append(r)
    for (broker, root), rs in by_root.items():
        yield from _read_store_ranges(broker, root, rs, fields, opts)


def _read_store_ranges(broker: str, root: str, ranges: list[QueueRange], fields, opts: StreamOptions):
    import pyarrow as pa
    import pyarrow.compute as pc
    names = [n for n, _ in fields]
    check = ["topic", "queue_id", "queue_offset", "commitlog_offset"] + (["tags"] if opts.tags else [])
    wanted = arrow_schema(list(fields) + [(n, True) for n in check if n not in names])
    if not fs.isdir(fs.join(root, "commitlog")):
        raise FileNotFoundError(f"{fs.display(root)} (broker {broker}) is gone: no commitlog/ directory")
    codes = np.array([java_hash_code(t) for t in opts.tags], dtype=np.int64) if opts.tags else None
    offs_l, sizes_l, qoffs_l, rix_l = [], [], [], []
    for i, p in enumerate(ranges):
        qdir = fs.join(root, "consumequeue", p.topic, str(p.queue_id))
        units, missing = QueueFiles(qdir).units(p.start, p.end)
        for a, b in missing:
            # Cleaned between planning and this task (or the queue directory was deleted).
            report_data_loss(opts, broker, p.topic, p.queue_id, a, b - a)
        qoffs = np.arange(p.start, p.end, dtype=np.int64)
        if missing:
            keep = np.ones(len(qoffs), dtype=bool)
            for a, b in missing:
                keep[a - p.start:b - p.start] = False
            qoffs = qoffs[keep]
        offs, sizes = units["off"].astype(np.int64), units["size"].astype(np.int64)
        ok = (sizes != FILLER_SIZE) & (sizes > 0) & (offs >= 0)
        if codes is not None:
            # The broker's filter (ConsumeQueue tagsCode = String.hashCode of the tag), then the exact tag below,
            # as a RocketMQ consumer re-checks the tag string.
            ok &= np.isin(units["tags"].astype(np.int64), codes)
        offs_l.append(offs[ok])
        sizes_l.append(sizes[ok])
        qoffs_l.append(qoffs[ok])
        rix_l.append(np.full(int(ok.sum()), i, dtype=np.int32))
    if not offs_l:
        return
    offs, sizes, qoffs, rix = (np.concatenate(x) for x in (offs_l, sizes_l, qoffs_l, rix_l))
    if not len(offs):
        return
    order = np.argsort(offs, kind="stable")
    offs, sizes, qoffs, rix = offs[order], sizes[order], qoffs[order], rix[order]
    # Per unit, what its record must say: topic (as an index into the task's topics), queue id, queue offset.
    topic_names = sorted({r.topic for r in ranges})
    topic_ix = np.array([topic_names.index(r.topic) for r in ranges], dtype=np.int32)[rix]
    qids = np.array([r.queue_id for r in ranges], dtype=np.int64)[rix]
    topic_values = pa.array(topic_names, type=pa.string())
    bases = _segments(root)
    seg = np.searchsorted(np.asarray(bases, dtype=np.int64), offs, side="right") - 1
    bad = (seg < 0) | (offs < (bases[0] if bases else 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        _bad_unit(opts, ranges[rix[i]], int(qoffs[i]), int(offs[i]), "below the commitlog's first file (cleaned)")
        offs, sizes, qoffs, rix, seg, topic_ix, qids = (x[~bad] for x in (offs, sizes, qoffs, rix, seg, topic_ix,
                                                                           qids))
    tagset = pa.array(sorted(opts.tags or ()), type=pa.string())
    for s in np.unique(seg).tolist():
        lo, hi = np.searchsorted(seg, [s, s + 1])          # seg is sorted with offs
        base = bases[s]
        path = fs.join(root, "commitlog", f"{base:020d}")
        phys = offs[lo:hi]
        fsize = fs.getsize(path)
        live = np.ones(hi - lo, dtype=bool)
        past = phys - base + sizes[lo:hi] > fsize
        if past.any():
            i = int(np.flatnonzero(past)[0])
            _bad_unit(opts, ranges[rix[lo + i]], int(qoffs[lo + i]), int(phys[i]), "past the end of its commitlog file")
            live &= ~past
        matched = np.zeros(hi - lo, dtype=bool)
        read = SegmentRead(path, broker, positions=phys[live] - base)
        batches = iter_segment_batches(read, wanted, check_crc=opts.check_crc, batch_rows=opts.batch_rows,
                                       batch_bytes=opts.batch_bytes, on_corrupt=opts.on_corrupt, log=log)
        for b in _naming_the_unit(batches, broker, root, ranges, phys, qoffs[lo:hi], rix[lo:hi], bases):
            got = b.column("commitlog_offset").to_numpy(zero_copy_only=False)
            j = np.minimum(np.searchsorted(phys, got), len(phys) - 1)
            t = pc.index_in(b.column("topic"), value_set=topic_values).to_numpy(zero_copy_only=False)
            ok = ((phys[j] == got) & (t == topic_ix[lo:hi][j])
                  & (b.column("queue_id").to_numpy(zero_copy_only=False) == qids[lo:hi][j])
                  & (b.column("queue_offset").to_numpy(zero_copy_only=False) == qoffs[lo:hi][j]))
            matched[j[ok]] = True
            keep = pa.array(ok)
            if len(tagset):
                keep = pc.and_(keep, pc.fill_null(pc.is_in(b.column("tags"), tagset), False))
            b = b.filter(keep)
            if b.num_rows:
                yield b.select(names)
        absent = np.flatnonzero(live & ~matched)
        if len(absent):
            i = int(absent[0])
            _bad_unit(opts, ranges[rix[lo + i]], int(qoffs[lo + i]), int(phys[i]),
                      f"no record of this queue there ({len(absent)} such unit(s) in this task: past the "
                      "commitlog's end of data, a damaged record, or a record of another queue)")


def _naming_the_unit(batches, broker: str, root: str, ranges: list[QueueRange], phys: np.ndarray,
                     qoffs: np.ndarray, rix: np.ndarray, bases: list[int]):
    """The batches, with a broken record (onCorrupt=fail) reported as the unit that points at it: broker, topic,
    queue, queue offset, and whether it lies past the commitlog's end of data or is a damaged record."""
    from .arrow import CorruptSegmentError
    try:
        yield from batches
    except CorruptSegmentError as e:
        i = np.flatnonzero(phys == e.offset)
        qoff = int(qoffs[i[0]]) if len(i) else -1
        p = ranges[int(rix[i[0]])] if len(i) else ranges[0]
        total = record_total_size(root, bases, e.offset)
        why = ("past the commitlog's end of data (nothing written there)" if not total
               else f"a damaged record ({e})")
        raise ConsumeQueueError(f"broker {broker}, topic {p.topic}, queue {p.queue_id}: the consume-queue unit at "
                                f"queue offset {qoff} points at commitlog offset {e.offset}, {why}; set option "
                                "onCorrupt=stop to skip such units") from None


def _bad_unit(opts: StreamOptions, p: QueueRange, qoff: int, phy: int, why: str) -> None:
    msg = (f"broker {p.broker}, topic {p.topic}, queue {p.queue_id}: the consume-queue unit at queue offset {qoff} "
           f"points at commitlog offset {phy}, {why}")
    if opts.on_corrupt == "fail":
        raise ConsumeQueueError(msg + "; set option onCorrupt=stop to skip such units")
    log.warning("rocketmq-store stream: %s; skipped (onCorrupt=stop)", msg)


# -- consumer group --------------------------------------------------------------------------------------------

def write_consumer_offsets(opts: StreamOptions, offsets: dict) -> None:
    """Write a committed batch's end offsets as consumer group ``opts.consumer_group``'s offsets, so
    ``rmqcore group``, the console and /metrics show the query as a consumer group with its lag. A store with an
    endpoint in ``consumerGroupEndpoints`` (the ``rmqcore serve`` holding it) gets them through RocketMQ 5's
    ``MessagingService.UpdateOffset`` RPC; any other store through ``config/consumerOffset.json`` while no broker
    holds it (a broker keeps offsets in memory and would overwrite the file: such a store is skipped with a
    warning). Spark's checkpoint, not these offsets, is what a restarted query resumes from, so a failure here
    is logged, not raised."""
    from ..broker.consumer_offset_manager import ConsumerOffsetManager
    group = opts.consumer_group
    for broker, root in opts.stores:
        mine = {(t, q): o for (b, t, q), o in offsets.items() if b == broker}
        if not mine:
            continue
        endpoint = opts.group_endpoints.get(broker)
        try:
            if endpoint:
                update_offsets_rpc(endpoint, group, mine)
                continue
            if not fs.is_local(root):
                continue
            local = fs.local_path(root)
            if lock_held(local):
                log.warning("rocketmq-store stream: %s (broker %s) is held by a running broker: consumer group %s's "
                            "offsets are not written there (give its endpoint in consumerGroupEndpoints)", local,
                            broker, group)
                continue
            m = ConsumerOffsetManager(local)
            m.load()
            for (t, q), o in sorted(mine.items()):
                m.commit_offset(group, t, q, o)
            m.persist()
        except Exception as e:      # noqa: BLE001 - reported, the batch itself is committed
            log.warning("rocketmq-store stream: consumer group %s's offsets not written to broker %s: %s", group,
                        broker, e)


def update_offsets_rpc(endpoint: str, group: str, offsets: dict, timeout: float = 10.0) -> None:
    """UpdateOffset for each (topic, queue) → offset, over gRPC to ``endpoint`` (``host:port``)."""
    import grpc

    from ..server import messaging_pb2 as pb
    with grpc.insecure_channel(endpoint) as ch:
        call = ch.unary_unary("/apache.rocketmq.v2.MessagingService/UpdateOffset",
                              request_serializer=pb.UpdateOffsetRequest.SerializeToString,
                              response_deserializer=pb.UpdateOffsetResponse.FromString)
        md = (("x-mq-client-id", f"rmqcore-spark-{group}"), ("x-mq-language", "PYTHON"))
        for (t, q), o in sorted(offsets.items()):
            req = pb.UpdateOffsetRequest(offset=o)
            req.group.name = group
            req.message_queue.topic.name = t
            req.message_queue.id = q
            resp = call(req, metadata=md, timeout=timeout)
            if resp.status.code != pb.OK:
                raise RuntimeError(f"UpdateOffset {t}/{q}={o} refused: {pb.Code.Name(resp.status.code)} "
                                   f"{resp.status.message}")
