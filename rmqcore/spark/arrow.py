"""Segment → Arrow record batches: rmqcore._segment's numpy buffers wrapped with ``pa.Array.from_buffers``.

Fixed-width columns, string/binary offsets and data, validity bitmaps: every buffer the Cython decoder filled is
handed to Arrow as is (``pa.py_buffer`` over the numpy array), so the only copy of a body is the one from the
mapped file into its batch. Works without Spark (``iter_segment_batches``), which is also how the Spark reader
uses it on executors.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from .._codec import record_error
from .._segment import (BATCH_FULL, COLUMN_BITS, SEGMENT_BLANK, SEGMENT_END, SYNC_FOUND, SYNC_NONE, decode_segment,
                        sync_record)
from . import fs
from .schema import arrow_schema

_TS_UTC = pa.timestamp("us", tz="UTC")
_FIXED = {"queue_id", "queue_offset", "commitlog_offset", "store_size", "store_timestamp", "born_timestamp",
          "sys_flag", "flag", "reconsume_times", "prepared_transaction_offset", "body_crc"}
_STRINGS = {"topic", "born_host", "store_host", "tags", "uniq_key", "body"}
_PROVENANCE = {"broker", "segment"}


class CorruptSegmentError(RuntimeError):
    """A record whose structure is broken stopped the reading of a segment (onCorrupt=fail)."""

    def __init__(self, path: str, offset: int, detail: str):
        super().__init__(f"{path}: corrupt record at commitlog offset {offset}: {detail}")
        self.path = path
        self.offset = offset


def columns_mask(names) -> int:
    """Decoder column bits needed for the output columns ``names`` (provenance needs none)."""
    mask = 0
    for n in names:
        if n not in _PROVENANCE:
            mask |= COLUMN_BITS[n]
    return mask


def _buf(a: np.ndarray):
    return pa.py_buffer(a)


def _constant_strings(value: str, n: int) -> pa.Array:
    # One value repeated: offsets 0, L, 2L, ... over the value's bytes repeated (no Python object per row).
    b = value.encode("utf-8")
    offsets = (np.arange(n + 1, dtype=np.int64) * len(b)).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, _buf(offsets), pa.py_buffer(b * n)])


def _string(arrays, name, n, typ) -> pa.Array:
    validity = arrays.get(name + ".validity")
    return pa.Array.from_buffers(typ, n, [None if validity is None else _buf(validity),
                                          _buf(arrays[name + ".offsets"]), _buf(arrays[name + ".data"])],
                                 null_count=0 if validity is None else -1)


def build_batch(result: dict, schema: pa.Schema, broker: str = "", segment: str = "") -> pa.RecordBatch:
    """The RecordBatch of ``schema``'s columns from one ``decode_segment`` result."""
    n = result["n"]
    arrays = result["arrays"]
    cols = []
    for f in schema:
        name, typ = f.name, f.type
        if name == "broker":
            cols.append(_constant_strings(broker, n))
        elif name == "segment":
            cols.append(_constant_strings(segment, n))
        elif n == 0:
            cols.append(pa.array([], type=typ))
        elif name in _FIXED:
            cols.append(pa.Array.from_buffers(typ, n, [None, _buf(arrays[name])], null_count=0))
        elif name in _STRINGS:
            cols.append(_string(arrays, name, n, typ))
        elif name == "crc_ok":
            cols.append(pa.Array.from_buffers(typ, n, [_buf(arrays["crc_ok.validity"]),
                                                       _buf(arrays["crc_ok.values"])], null_count=-1))
        elif name == "keys":
            items = arrays["keys.item.offsets"]
            child = pa.Array.from_buffers(typ.value_type, len(items) - 1,
                                          [None, _buf(items), _buf(arrays["keys.item.data"])], null_count=0)
            cols.append(pa.Array.from_buffers(typ, n, [None, _buf(arrays["keys.offsets"])], null_count=0,
                                              children=[child]))
        elif name == "properties":
            k_off = arrays["properties.key.offsets"]
            m = len(k_off) - 1
            keys = pa.Array.from_buffers(pa.string(), m, [None, _buf(k_off), _buf(arrays["properties.key.data"])],
                                         null_count=0)
            values = pa.Array.from_buffers(pa.string(), m, [None, _buf(arrays["properties.value.offsets"]),
                                                            _buf(arrays["properties.value.data"])], null_count=0)
            entries = pa.StructArray.from_arrays([keys, values], fields=[typ.key_field, typ.item_field])
            cols.append(pa.Array.from_buffers(typ, n, [None, _buf(arrays["properties.offsets"])], null_count=0,
                                              children=[entries]))
        else:
            raise ValueError(f"no column {name!r}")
    return pa.RecordBatch.from_arrays(cols, schema=schema)


@dataclass
class SegmentRead:
    """What to read from one commitlog segment (a picklable plan: Spark ships it inside an InputPartition).

    ``path`` is a local path or a URI (``rmqcore.spark.fs``). ``start``/``stop``: a split, the records that
    *start* in [start, stop) of the file (a record may end past ``stop``); a split that does not begin at 0
    first syncs to the first record start at or after ``start`` (``_segment.sync_record``), so consecutive
    splits read every record once. ``limit``: no byte at or past it is read (a snapshot of a live store)."""
    path: str
    broker: str = ""
    topics: list | None = None            # topic names (str)
    queue_ids: list | None = None
    min_timestamp: int | None = None      # ms, inclusive
    max_timestamp: int | None = None      # ms, exclusive
    positions: object = None              # point reads: record starts inside the file (list or int64 array)
    key_filter: tuple | None = None       # (topic, key): keep rows whose KEYS or UNIQ_KEY equals key
    extra: dict = field(default_factory=dict)
    start: int = 0
    stop: int | None = None               # None: the end of the file (or of ``limit``)
    limit: int | None = None              # None: the file's size
    window: int = 32 << 20                # remote files: bytes per ranged read (grown for a larger record)

    @property
    def segment(self) -> str:
        return fs.basename(self.path)


class _Windows:
    """Buffers over [0, limit) of a segment: local files give their whole mapping at once; remote ones give
    ranged reads of ``size`` bytes (or more, for a record that does not fit)."""

    def __init__(self, src: fs.FileSource, limit: int, size: int):
        self.src, self.limit, self.size = src, limit, size

    def at(self, pos: int, need: int = 0):
        """(buffer, buffer's file offset, whether the file's data goes on past the buffer)."""
        if self.src.local:
            return self.src.view()[:self.limit], 0, False
        n = min(max(self.size, need), self.limit - pos)
        return self.src.read_at(pos, n), pos, pos + n < self.limit

    def total_at(self, pos: int) -> int:
        hdr = bytes(self.src.read_at(pos, 4))
        return int.from_bytes(hdr, "big", signed=True) if len(hdr) == 4 else 0


def _sync(win: _Windows, start: int, stop: int, file_size: int, base: int):
    """The file position of the first record starting in [start, stop), or None."""
    pos, need = start, 0
    while True:
        buf, off, more = win.at(pos, need)
        hit, status = sync_record(buf, pos - off, stop - off, base + off, file_end=file_size - off,
                                  more_after=more)
        if status == SYNC_FOUND:
            return off + hit
        if status == SYNC_NONE:
            return None
        # SYNC_MORE: a candidate runs past the window; read from it, growing the window if it already did.
        need = 2 * len(buf) if off + hit == pos else 0
        pos = off + hit


def iter_segment_batches(read: SegmentRead, schema: pa.Schema | list, *, check_crc: bool = True,
                         batch_rows: int = 8192, batch_bytes: int = 16 << 20, on_corrupt: str = "fail",
                         log=None):
    """Yield RecordBatches of ``schema`` for one segment (or split of it), each at most ``batch_rows`` rows /
    about ``batch_bytes`` of variable-width data.

    A record with a sound structure but a wrong CRC is a row with ``crc_ok`` false. A broken structure ends the
    segment (split) (nothing after it can be located): ``on_corrupt="fail"`` raises CorruptSegmentError naming
    the file and offset after yielding the rows before it; ``"stop"`` logs a warning and ends it there.
    """
    if not isinstance(schema, pa.Schema):
        schema = arrow_schema(schema)
    if on_corrupt not in ("fail", "stop"):
        raise ValueError(f"onCorrupt must be 'fail' or 'stop', got {on_corrupt!r}")
    names = schema.names
    mask = columns_mask(names)
    key_schema = schema
    if read.key_filter is not None:
        # Index hits are hash matches: decode keys and uniq key too, keep exact matches, then drop the extras.
        mask |= COLUMN_BITS["keys"] | COLUMN_BITS["uniq_key"] | COLUMN_BITS["topic"]
        extra = [n for n in ("topic", "keys", "uniq_key") if n not in names]
        key_schema = arrow_schema([(f.name, f.nullable) for f in schema] + [(n, True) for n in extra])
    kw = dict(columns=mask, max_rows=batch_rows, max_bytes=batch_bytes, check_crc=check_crc,
              topics=None if read.topics is None else [t.encode() for t in read.topics], queue_ids=read.queue_ids)
    if read.min_timestamp is not None:
        kw["min_timestamp"] = read.min_timestamp
    if read.max_timestamp is not None:
        kw["max_timestamp"] = read.max_timestamp
    shown = fs.display(read.path)
    base = int(read.segment)

    def emit(r):
        batch = build_batch(r, key_schema, read.broker, read.segment)
        if read.key_filter is not None:
            batch = _exact_key_rows(batch, read.key_filter, names)
        return batch

    def corrupt(code, where):
        err = record_error(code, base + where, shown)
        if on_corrupt == "fail":
            raise CorruptSegmentError(shown, base + where, str(err))
        if log is not None:
            log.warning("rocketmq-store: %s; the rest of the segment (split) is skipped (onCorrupt=stop)", err)

    with fs.open_file(read.path) as src:
        size = src.size
        limit = size if read.limit is None else max(0, min(size, read.limit))
        if limit == 0:
            return
        if read.positions is not None:
            yield from _point_batches(src, read, limit, kw, emit, corrupt)
            return
        stop = limit if read.stop is None else min(read.stop, limit)
        win = _Windows(src, limit, read.window)
        pos = read.start
        if pos > 0:
            pos = _sync(win, pos, stop, size, base)
            if pos is None:
                return
        if pos >= stop:
            return
        buf, off, more = win.at(pos)
        while True:
            r = decode_segment(buf, pos - off, end=len(buf), stop=max(0, stop - off), base_offset=base + off, **kw)
            if r["n"]:
                batch = emit(r)
                if batch.num_rows:
                    yield batch
            code = r["code"]
            pos = off + r["next"]
            if code == BATCH_FULL:
                continue
            if code == SEGMENT_BLANK:
                return
            if code == SEGMENT_END:
                if pos >= stop or not more or pos < off + len(buf):
                    return                    # the split's end, or the end of data (totalSize 0)
                buf, off, more = win.at(pos)  # the window's end: read on
                continue
            if more:
                # A record cut by the window's end reads as truncated (or as a blank of the wrong size): read
                # again from it with room for its whole totalSize before calling it corrupt.
                total = win.total_at(pos)
                need = total if 0 < total <= limit - pos else 0
                if off != pos or len(buf) < max(need, min(win.size, limit - pos)):
                    buf, off, more = win.at(pos, need)
                    continue
            corrupt(code, pos)
            return


def _point_batches(src, read: SegmentRead, limit: int, kw: dict, emit, corrupt):
    """Point mode: the records at ``read.positions``. Local files are decoded in place; remote ones are fetched
    record by record (two ranged reads each) into one buffer and decoded there."""
    wanted = np.asarray(read.positions, dtype=np.int64)
    wanted = wanted[(wanted >= 0) & (wanted < limit)]
    if len(wanted) > 1 and not (wanted[1:] > wanted[:-1]).all():
        # Sorted, each record once (np.unique hashes: 4x the cost of a sort for the already sorted case).
        wanted = np.sort(wanted)
        wanted = wanted[np.concatenate(([True], wanted[1:] != wanted[:-1]))]
    if src.local:
        buf, where = src.view()[:limit], wanted
    else:
        parts, where, cur = [], [], 0
        for p in wanted.tolist():
            hdr = bytes(src.read_at(p, 4))
            total = int.from_bytes(hdr, "big", signed=True) if len(hdr) == 4 else 0
            rec = bytes(src.read_at(p, total)) if 0 < total <= limit - p else hdr
            parts.append(rec)
            where.append(cur)
            cur += len(rec)
        buf, where = b"".join(parts), np.asarray(where, dtype=np.int64)
    nxt = 0
    while nxt < len(where):
        r = decode_segment(buf, nxt, base_offset=int(read.segment), positions=where, **kw)
        if r["n"]:
            batch = emit(r)
            if batch.num_rows:
                yield batch
        code = r["code"]
        if code == BATCH_FULL:
            nxt = r["next"]
            continue
        if code in (SEGMENT_END, SEGMENT_BLANK):
            return
        corrupt(code, int(wanted[r["next"]]))
        nxt = r["next"] + 1          # point mode: the other positions are independent records


def _exact_key_rows(batch: pa.RecordBatch, key_filter, names) -> pa.RecordBatch:
    topic, key = key_filter
    topics = batch.column("topic").to_pylist()
    keys = batch.column("keys").to_pylist()
    uniq = batch.column("uniq_key").to_pylist()
    mask = [t == topic and (key in k or u == key) for t, k, u in zip(topics, keys, uniq)]
    return batch.filter(pa.array(mask, type=pa.bool_())).select(names)
