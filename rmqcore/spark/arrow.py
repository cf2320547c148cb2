"""Segment → Arrow record batches: rmqcore._segment's numpy buffers wrapped with ``pa.Array.from_buffers``.

Fixed-width columns, string/binary offsets and data, validity bitmaps: every buffer the Cython decoder filled is
handed to Arrow as is (``pa.py_buffer`` over the numpy array), so the only copy of a body is the one from the
mapped file into its batch. Works without Spark (``iter_segment_batches``), which is also how the Spark reader
uses it on executors.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from .._codec import record_error
from .._mapped_file import MappedFile
from .._segment import (BATCH_FULL, COLUMN_BITS, SEGMENT_BLANK, SEGMENT_END, decode_segment)
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
    """What to read from one commitlog segment (a picklable plan: Spark ships it inside an InputPartition)."""
    path: str
    broker: str = ""
    topics: list | None = None            # topic names (str)
    queue_ids: list | None = None
    min_timestamp: int | None = None      # ms, inclusive
    max_timestamp: int | None = None      # ms, exclusive
    positions: list | None = None         # point reads: record starts inside the file
    key_filter: tuple | None = None       # (topic, key): keep rows whose KEYS or UNIQ_KEY equals key
    extra: dict = field(default_factory=dict)

    @property
    def segment(self) -> str:
        return os.path.basename(self.path)


def iter_segment_batches(read: SegmentRead, schema: pa.Schema | list, *, check_crc: bool = True,
                         batch_rows: int = 8192, batch_bytes: int = 16 << 20, on_corrupt: str = "fail",
                         log=None):
    """Yield RecordBatches of ``schema`` for one segment, each at most ``batch_rows`` rows / about
    ``batch_bytes`` of variable-width data.

    A record with a sound structure but a wrong CRC is a row with ``crc_ok`` false. A broken structure ends the
    segment (nothing after it can be located): ``on_corrupt="fail"`` raises CorruptSegmentError naming the file
    and offset after yielding the rows before it; ``"stop"`` logs a warning and ends the segment there.
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
    size = os.path.getsize(read.path)
    if size == 0:
        return
    mf = MappedFile(read.path, size, read_only=True)
    base = mf.file_from_offset
    view = mf.view()
    try:
        kw = dict(end=-1, base_offset=base, columns=mask, max_rows=batch_rows, max_bytes=batch_bytes,
                  check_crc=check_crc, topics=None if read.topics is None else [t.encode() for t in read.topics],
                  queue_ids=read.queue_ids)
        if read.min_timestamp is not None:
            kw["min_timestamp"] = read.min_timestamp
        if read.max_timestamp is not None:
            kw["max_timestamp"] = read.max_timestamp
        if read.positions is not None:
            kw["positions"] = np.asarray(sorted(set(read.positions)), dtype=np.int64)
        nxt = 0
        while True:
            r = decode_segment(view, nxt, **kw)
            if r["n"]:
                batch = build_batch(r, key_schema, read.broker, read.segment)
                if read.key_filter is not None:
                    batch = _exact_key_rows(batch, read.key_filter, names)
                if batch.num_rows:
                    yield batch
            code = r["code"]
            if code == BATCH_FULL:
                nxt = r["next"]
                continue
            if code in (SEGMENT_END, SEGMENT_BLANK):
                return
            where = r["next"] if read.positions is None else int(kw["positions"][r["next"]])
            err = record_error(code, base + where, read.path)
            if on_corrupt == "fail":
                raise CorruptSegmentError(read.path, base + where, str(err))
            if log is not None:
                log.warning("rocketmq-store: %s; the rest of the segment is skipped (onCorrupt=stop)", err)
            if read.positions is None:
                return
            nxt = r["next"] + 1          # point mode: the other positions are independent records
            if nxt >= len(kw["positions"]):
                return
    finally:
        view.release()
        mf.close()


def _exact_key_rows(batch: pa.RecordBatch, key_filter, names) -> pa.RecordBatch:
    topic, key = key_filter
    topics = batch.column("topic").to_pylist()
    keys = batch.column("keys").to_pylist()
    uniq = batch.column("uniq_key").to_pylist()
    mask = [t == topic and (key in k or u == key) for t, k, u in zip(topics, keys, uniq)]
    return batch.filter(pa.array(mask, type=pa.bool_())).select(names)
