"""Store discovery and pruning: which commitlog segments (and which records in them) a read needs.

Everything here reads metadata only: directory listings, the first record header of each segment, consume-queue
units and index files. No commitlog record is decoded. Used on the driver (Spark's planning worker).
"""
from __future__ import annotations

import datetime
import json
import os

import numpy as np

from .._index_file import IndexFile, index_key_hash
from .._mapped_file import MappedFile
from .._segment import first_store_timestamp
from ..consume_queue import CQ_DTYPE
from ..index_service import build_key, is_index_file_name

LONG_MAX = (1 << 63) - 1


def is_segment_name(name: str) -> bool:
    return len(name) == 20 and name.isdigit() and name.isascii()


def parse_stores(options) -> list[tuple[str, str]]:
    """``[(broker, root), ...]`` from the reader/job options (keys lower-cased, as Spark passes them).

    ``brokers``: JSON ``{"broker-a": "/path/a", ...}``; otherwise ``paths`` (JSON list, from ``load([...])``) or
    ``path`` (``load("/p")``, or several separated by commas), each named after its directory. A broker name
    must be unique: ``commitlog_offset`` only identifies a record within one broker."""
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
        stores = [(os.path.basename(os.path.normpath(r)), r) for r in roots]
    if not stores:
        raise ValueError("rocketmq-store needs store roots: load(path), load([paths]) or option brokers "
                         '= JSON {"broker-a": "/path/a"}')
    names = [b for b, _ in stores]
    dup = {b for b in names if names.count(b) > 1}
    if dup:
        raise ValueError(f"broker names must be unique, got {sorted(dup)} more than once; name the stores "
                         'with option brokers = JSON {"name": "/path"}')
    for b, root in stores:
        if not os.path.isdir(os.path.join(root, "commitlog")):
            raise FileNotFoundError(f"{root} (broker {b}) is not a store root: no commitlog/ directory")
    return [(b, os.path.abspath(r)) for b, r in stores]


def list_segments(root: str) -> list[str]:
    """Paths of the commitlog segments of a store, in offset order."""
    d = os.path.join(root, "commitlog")
    return [os.path.join(d, n) for n in sorted(os.listdir(d)) if is_segment_name(n)]


def segment_first_timestamp(path: str):
    size = os.path.getsize(path)
    if size == 0:
        return None
    mf = MappedFile(path, size, read_only=True)
    view = mf.view()
    try:
        return first_store_timestamp(view)
    finally:
        view.release()
        mf.close()


def parse_time(value) -> int | None:
    """ms since the epoch from an int-like string, or an ISO 8601 time (UTC when it has no zone)."""
    if value is None or value == "":
        return None
    s = str(value).strip()
    if s.lstrip("-").isdigit():
        return int(s)
    dt = datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
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


def _cq_units(root: str, topic: str, queue_id: int) -> np.ndarray:
    d = os.path.join(root, "consumequeue", topic, str(queue_id))
    if not os.path.isdir(d):
        return np.empty(0, dtype=CQ_DTYPE)
    parts = []
    for name in sorted(os.listdir(d)):
        if not is_segment_name(name):
            continue
        with open(os.path.join(d, name), "rb") as f:
            raw = f.read()
        units = np.frombuffer(raw[:len(raw) // 20 * 20], dtype=CQ_DTYPE)
        valid = (units["offset"] >= 0) & (units["size"] > 0) & (units["size"] != 0x7FFFFFFF)
        # A queue's units end at the first zero unit (the preallocated tail).
        stop = np.flatnonzero((units["offset"] == 0) & (units["size"] == 0))
        if len(stop):
            valid[int(stop[0]):] = False
        parts.append(units[valid])
    return np.concatenate(parts) if parts else np.empty(0, dtype=CQ_DTYPE)


def _queue_ids(root: str, topic: str) -> list[int]:
    d = os.path.join(root, "consumequeue", topic)
    if not os.path.isdir(d):
        return []
    return sorted(int(q) for q in os.listdir(d) if q.isdigit())


def _dispatched_end(root: str) -> int:
    # The end of what the consume queues cover, over all queues: segments past it were not dispatched yet
    # and must be scanned whatever the queues say.
    end = 0
    cq_root = os.path.join(root, "consumequeue")
    if not os.path.isdir(cq_root):
        return 0
    for topic in os.listdir(cq_root):
        for qid in _queue_ids(root, topic):
            units = _cq_units(root, topic, qid)
            if len(units):
                end = max(end, int((units["offset"] + units["size"]).max()))
    return end


def prune_by_queues(root: str, segments: list[str], topics: list[str] | None,
                    queue_ids: list[int] | None) -> list[str]:
    """Keep the segments the selected consume queues point into, plus every segment past the end of what the
    consume queues cover (not dispatched yet). Prepared/rollback transaction records have no consume-queue unit,
    so segments holding only those for the selection are dropped (use pruneByConsumeQueue=false to scan)."""
    if topics is None and queue_ids is None:
        return segments
    cq_root = os.path.join(root, "consumequeue")
    all_topics = sorted(os.listdir(cq_root)) if os.path.isdir(cq_root) else []
    wanted_topics = all_topics if topics is None else [t for t in topics if t in all_topics]
    offsets = []
    for t in wanted_topics:
        for q in _queue_ids(root, t):
            if queue_ids is None or q in queue_ids:
                offsets.append(_cq_units(root, t, q)["offset"])
    hit = np.unique(np.concatenate(offsets)) if offsets else np.empty(0, dtype=np.int64)
    tail = _dispatched_end(root)
    keep = []
    bases = [int(os.path.basename(p)) for p in segments]
    for i, p in enumerate(segments):
        lo = bases[i]
        hi = bases[i + 1] if i + 1 < len(bases) else LONG_MAX
        j = np.searchsorted(hit, lo)
        if (j < len(hit) and hit[j] < hi) or hi > tail:
            keep.append(p)
    return keep


def index_geometry(path: str) -> tuple[int, int]:
    """(hash_slot_num, index_num) of an index file when the options do not say: the header does not hold them,
    but the file size is 40 + slots×4 + items×20, and RocketMQ always sizes items = 4 × slots."""
    size = os.path.getsize(path)
    if size > 40 and (size - 40) % 84 == 0:
        slots = (size - 40) // 84
        return slots, 4 * slots
    raise ValueError(f"{path}: {size} bytes is not a RocketMQ-proportioned index file (items = 4 × slots); set "
                     "options indexHashSlotNum and indexNum to the store's maxHashSlotNum and maxIndexNum")


def index_positions(root: str, topic: str, keys: list[str], hash_slot_num: int | None, index_num: int | None,
                    begin: int = 0, end: int = LONG_MAX, max_hits: int = 1 << 20) -> list[int]:
    """Commitlog offsets the index files give for ``topic#key`` (hash matches: the reader keeps exact ones).
    ``hash_slot_num``/``index_num`` None: taken from each file's size (see index_geometry)."""
    d = os.path.join(root, "index")
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

