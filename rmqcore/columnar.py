"""The columnar put: Arrow record batches in, RocketMQ records out, no Python object per message.

``put_arrow`` takes a pyarrow RecordBatch or Table with columns ``topic`` (string), ``queue_id`` (int32), ``body``
(binary), and optional ``tags`` (string), ``keys`` (list<string>), ``properties`` (map<string, string>),
``born_timestamp`` (timestamp, or int64 ms), ``flag`` (int32), and, for records copied from another store,
``uniq_key`` (string), ``born_host`` ("ip:port") and ``reconsume_times`` (int32). Each column is brought to one canonical Arrow
type (64-bit offsets) here, vectorised; the Cython encoder (``MessageEncoder.encode_arrow``) then reads the raw
buffers and writes the same records ``put_batch`` would write for the same messages, and the writer appends them
as ``put_batch`` does. The result is a RecordBatch: ``status`` (PutStatus names), ``commitlog_offset``,
``queue_offset``, ``wrote_bytes``, ``store_timestamp``, ``uniq_key``, one row per input row.

pyarrow is an optional dependency (the ``spark`` extra installs it); it is imported on the first call.
"""
from __future__ import annotations

import numpy as np

from ._codec import host_to_bytes
from ._encoder import EncodeBuffer
from .errors import MessageIllegalError
from .status import PutStatus

# Properties that reroute a message (delay levels, timer wheel): rows carrying them go through the Message path,
# which applies those rules.
REROUTING_PROPERTIES = ("DELAY", "__STARTDELIVERTIME", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
                        "TRAN_MSG")
REQUIRED = ("topic", "queue_id", "body")
ARROW_ROWS = 2048          # rows encoded and appended per step: ~2.4 MB of 1 KiB records, warm in cache
OPTIONAL = ("tags", "keys", "properties", "born_timestamp", "flag", "uniq_key", "born_host", "reconsume_times")


def _pa():
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError as e:          # pragma: no cover - depends on the environment
        raise ImportError("put_arrow needs pyarrow: pip install 'rmqcore[spark]' (or pyarrow)") from e
    return pa, pc


def _batches(data):
    pa, _ = _pa()
    if isinstance(data, pa.Table):
        return data.to_batches()      # chunk by chunk: combining them would copy every body
    if isinstance(data, pa.RecordBatch):
        return [data]
    raise TypeError(f"put_arrow takes a pyarrow RecordBatch or Table, got {type(data).__name__}")


def _cast(col, name, typ):
    try:
        return col.cast(typ)
    except Exception as e:   # pyarrow raises ArrowInvalid / ArrowNotImplementedError
        raise MessageIllegalError(name, f"column of type {col.type} cannot be read as {typ}: {e}", None) from None


def _text(col, name, binary: bool = False):
    """A string column (``binary``: a binary one, where strings are taken too) as Arrow holds it when its layout
    is already offsets + bytes (32- or 64-bit offsets), else cast to the large type: casting string to
    large_string copied every byte (every body, for the body column)."""
    pa, _ = _pa()
    t = col.type
    if (pa.types.is_string(t) or pa.types.is_large_string(t)
            or (binary and (pa.types.is_binary(t) or pa.types.is_large_binary(t)))):
        return col
    return _cast(col, name, pa.large_binary() if binary else pa.large_string())


def _varlen(arr):
    """(offsets int64[len + 1] into data, data uint8) of a string/binary array (32- or 64-bit offsets): the data
    zero-copy, 32-bit offsets widened (4 bytes a row)."""
    pa, _ = _pa()
    bufs = arr.buffers()
    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    offsets = np.frombuffer(bufs[1], dtype=np.int64 if wide else np.int32)[arr.offset:arr.offset + len(arr) + 1]
    if not wide:
        offsets = offsets.astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size else np.zeros(1, np.uint8)
    return offsets, data


def _valid(arr):
    """A uint8 mask of valid rows, or None when the array has no nulls."""
    if arr.null_count == 0:
        return None
    return np.ascontiguousarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=np.uint8)


def _first_null(arr) -> int:
    return int(np.flatnonzero(~arr.is_valid().to_numpy(zero_copy_only=False))[0])


def _columns(batch, first_row: int = 0):
    """The encoder's arguments for one RecordBatch (after the checks that need no row loop)."""
    pa, pc = _pa()
    names = batch.schema.names
    for name in REQUIRED:
        if name not in names:
            raise MessageIllegalError(name, "put_arrow needs the columns topic, queue_id and body", None)
    unknown = [n for n in names if n not in REQUIRED + OPTIONAL]
    if unknown:
        raise MessageIllegalError(unknown[0], f"unknown column; known: {', '.join(REQUIRED + OPTIONAL)}", None)
    col = {n: batch.column(n) for n in names}
    topic = _text(col["topic"], "topic")
    if topic.null_count:
        raise MessageIllegalError(f"topic[{first_row + _first_null(topic)}]", "must not be null", None)
    queue_id = col["queue_id"]
    if queue_id.null_count:
        raise MessageIllegalError(f"queue_id[{first_row + _first_null(queue_id)}]", "must not be null", None)
    if pa.types.is_integer(queue_id.type) and len(queue_id):
        lo, hi = pc.min_max(queue_id).values()
        if lo.as_py() < -(1 << 31) or hi.as_py() >= (1 << 31):
            bad = int(np.flatnonzero((queue_id.to_numpy() < -(1 << 31)) | (queue_id.to_numpy() >= (1 << 31)))[0])
            raise MessageIllegalError(f"queue_id[{first_row + bad}]", "outside the Java int range", (1 << 31) - 1)
    queue_id = np.ascontiguousarray(_cast(queue_id, "queue_id", pa.int32()).to_numpy(), dtype=np.int32)
    body = _text(col["body"], "body", binary=True)
    if body.null_count:
        body = pc.fill_null(body, b"")
    args = [_varlen(topic), queue_id, _varlen(body)]

    tags = col.get("tags")
    if tags is not None:
        tags = _text(tags, "tags")
        args.append((_valid(tags),) + _varlen(tags))
    else:
        args.append((None, None, None))

    keys = col.get("keys")
    if keys is not None:
        if not ((pa.types.is_list(keys.type) or pa.types.is_large_list(keys.type))
                and (pa.types.is_string(keys.type.value_type) or pa.types.is_large_string(keys.type.value_type))):
            keys = _cast(keys, "keys", pa.large_list(pa.large_string()))
        values = keys.values
        args.append((_valid(keys), np.ascontiguousarray(keys.offsets.to_numpy(), dtype=np.int64), _valid(values))
                    + _varlen(values))
    else:
        args.append((None,) * 5)

    props = col.get("properties")
    if props is not None:
        props = _cast(props, "properties", pa.map_(pa.large_string(), pa.large_string()))
        names_ = props.keys
        items = props.items
        args.append((_valid(props), np.ascontiguousarray(props.offsets.to_numpy(), dtype=np.int64))
                    + _varlen(names_) + (_valid(items),) + _varlen(items))
    else:
        args.append((None,) * 7)

    born = col.get("born_timestamp")
    if born is not None:
        if pa.types.is_timestamp(born.type):
            born = _cast(born, "born_timestamp", pa.timestamp("ms", tz=born.type.tz))
        born = pc.fill_null(_cast(born, "born_timestamp", pa.int64()), 0)
        args.append(np.ascontiguousarray(born.to_numpy(), dtype=np.int64))
    else:
        args.append(None)
    flag = col.get("flag")
    if flag is not None:
        flag = pc.fill_null(_cast(flag, "flag", pa.int32()), 0)
        args.append(np.ascontiguousarray(flag.to_numpy(), dtype=np.int32))
    else:
        args.append(None)
    extra = {}
    uniq = col.get("uniq_key")
    if uniq is not None:
        uniq = _text(uniq, "uniq_key")
        extra["uniq_valid"] = _valid(uniq)
        extra["uniq_in_off"], extra["uniq_in_data"] = _varlen(uniq)
    host = col.get("born_host")
    if host is not None:
        # A few distinct hosts in many rows: each parsed once (host_to_bytes), rows point at them.
        encoded = _cast(host, "born_host", pa.string()).dictionary_encode()
        hosts = encoded.dictionary.to_pylist()
        table = np.zeros(max(1, len(hosts)) * 20, np.uint8)
        lengths = np.zeros(max(1, len(hosts)), np.int32)
        for i, h in enumerate(hosts):
            try:
                raw = host_to_bytes(h)
            except (ValueError, TypeError) as e:
                bad = int(np.flatnonzero(pc.equal(encoded.indices, i).to_numpy(zero_copy_only=False))[0])
                raise MessageIllegalError(f"born_host[{first_row + bad}]", f"{h!r}: {e}", None) from None
            table[i * 20:i * 20 + len(raw)] = np.frombuffer(raw, np.uint8)
            lengths[i] = len(raw)
        extra["born_host_idx"] = np.ascontiguousarray(
            pc.fill_null(encoded.indices, -1).cast(pa.int32()).to_numpy(), dtype=np.int32)
        extra["host_table"], extra["host_len"] = table, lengths
    rc = col.get("reconsume_times")
    if rc is not None:
        rc = pc.fill_null(_cast(rc, "reconsume_times", pa.int32()), 0)
        extra["reconsume"] = np.ascontiguousarray(rc.to_numpy(), dtype=np.int32)
    args.append(extra)
    return args, props


def reroutes(props) -> bool:
    """Whether any row's properties name a delay, timer or transaction property (those go the Message way)."""
    if props is None or len(props) == 0:
        return False
    pa, pc = _pa()
    return bool(pc.any(pc.is_in(props.keys, pa.array(REROUTING_PROPERTIES, pa.large_string()))).as_py() or False)


def _rows(a, start: int, n: int, offsets: bool = False):
    """Rows [start, start + n) of a per-row array (an offsets array: n + 1 entries), None stays None."""
    if a is None:
        return None
    return a[start:start + n + 1] if offsets else a[start:start + n]


class Columns:
    """One RecordBatch read for the encoder once (the checks that need no row loop, the raw buffers), then
    encoded slice by slice: ``encode(encoder, eb, start, n)`` passes views of rows [start, start + n) and reads the
    data buffers in place. ``reroute``: some row names a delay, timer or transaction property, so the batch goes
    the Message way (``messages``)."""

    def __init__(self, batch, first_row: int = 0):
        self.batch = batch
        self.first_row = first_row
        self.num_rows = batch.num_rows
        self.args, props = _columns(batch, first_row)
        self.reroute = reroutes(props)

    def _slice(self, start: int, n: int):
        (t_off, t_data), queue_id, (b_off, b_data), tags, keys, prop, born, flag, extra = self.args
        tags = (_rows(tags[0], start, n), _rows(tags[1], start, n, True), tags[2])
        keys = (_rows(keys[0], start, n), _rows(keys[1], start, n, True)) + tuple(keys[2:])
        prop = (_rows(prop[0], start, n), _rows(prop[1], start, n, True)) + tuple(prop[2:])
        extra = {k: (_rows(v, start, n, k == "uniq_in_off") if k in _PER_ROW else v) for k, v in extra.items()}
        return ([_rows(t_off, start, n, True), t_data, _rows(queue_id, start, n), _rows(b_off, start, n, True),
                 b_data, *tags, *keys, *prop, _rows(born, start, n), _rows(flag, start, n)], extra)

    def check(self, encoder):
        """Every check on every row, nothing written: (row of the longest record, its length)."""
        args, extra = self._slice(0, self.num_rows)
        return encoder.encode_arrow(EncodeBuffer(), self.num_rows, *args, None, None, self.first_row, True,
                                    **extra)

    def encode(self, encoder, eb, start: int, n: int, uniq, uniq_off):
        """Rows [start, start + n) into ``eb`` (cleared first); their UNIQ_KEYs into ``uniq``/``uniq_off``."""
        args, extra = self._slice(start, n)
        eb.clear()
        encoder.encode_arrow(eb, n, *args, uniq, uniq_off, self.first_row + start, False, **extra)


_PER_ROW = ("uniq_valid", "uniq_in_off", "born_host_idx", "reconsume")


class Results:
    """The put_arrow result, filled slice by slice and built once at the end: rows of (store time, commitlog
    offset, queue offset, size) as the writer fills them and UNIQ_KEY bytes, or, for a slice that went the
    Message way, its PutResults."""

    def __init__(self):
        self._parts: list = []          # (raw rows, uniq bytes, uniq lengths) or a list of PutResults

    def add_rows(self, raw, uniq, uniq_off):
        n = len(raw)
        self._parts.append((raw, uniq[:uniq_off[n]].copy(), np.diff(uniq_off[:n + 1])))

    def add_put_results(self, results):
        self._parts.append(list(results))

    def batch(self):
        out = []
        run: list = []
        for part in self._parts + [None]:
            if isinstance(part, tuple):
                run.append(part)
                continue
            if run:
                raw = np.concatenate([r[0] for r in run]) if len(run) > 1 else run[0][0]
                uniq = np.concatenate([r[1] for r in run]) if len(run) > 1 else run[0][1]
                lens = np.concatenate([r[2] for r in run]) if len(run) > 1 else run[0][2]
                offsets = np.zeros(len(lens) + 1, np.int64)
                np.cumsum(lens, out=offsets[1:])
                out.append(result_batch(raw, uniq, offsets))
                run = []
            if part is not None:
                out.append(results_from_put_results(part))
        return concat(out)


def result_batch(raw: np.ndarray, uniq: np.ndarray, uniq_off: np.ndarray, ok_status=PutStatus.PUT_OK):
    """The put_arrow result, one row per input row: ``raw`` rows are (store time, commitlog offset, queue offset,
    size) as the writer fills them; a commitlog offset of -1 is a row no file could be made for."""
    pa, _ = _pa()
    n = len(raw)
    codes = (raw[:, 1] < 0).astype(np.int8)
    names = pa.array([ok_status.name, PutStatus.CREATE_MAPPED_FILE_FAILED.name])
    if uniq_off[n] < (1 << 31):        # the result's string type, built in place
        uniq_arr = pa.StringArray.from_buffers(n, pa.py_buffer(uniq_off[:n + 1].astype(np.int32)),
                                               pa.py_buffer(uniq))
    else:
        uniq_arr = pa.LargeStringArray.from_buffers(n, pa.py_buffer(uniq_off[:n + 1]),
                                                    pa.py_buffer(uniq)).cast(pa.string())
    return pa.RecordBatch.from_arrays(
        [pa.DictionaryArray.from_arrays(pa.array(codes), names), pa.array(raw[:, 1]), pa.array(raw[:, 2]),
         pa.array(raw[:, 3].astype(np.int32)), pa.array(raw[:, 0]), uniq_arr],
        names=["status", "commitlog_offset", "queue_offset", "wrote_bytes", "store_timestamp", "uniq_key"])


def concat(batches):
    pa, _ = _pa()
    if not batches:
        return results_from_put_results([])
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches([b.cast(batches[0].schema) if b.schema != batches[0].schema else b
                                   for b in batches])
    return table.combine_chunks().unify_dictionaries().to_batches()[0]


def results_from_put_results(results):
    """The same result shape from PutResults (the Message path)."""
    pa, _ = _pa()
    return pa.RecordBatch.from_pydict({
        "status": pa.array([r.status.name for r in results], pa.string()).dictionary_encode(),
        "commitlog_offset": pa.array([r.commitlog_offset for r in results], pa.int64()),
        "queue_offset": pa.array([r.queue_offset for r in results], pa.int64()),
        "wrote_bytes": pa.array([r.wrote_bytes for r in results], pa.int32()),
        "store_timestamp": pa.array([r.store_timestamp for r in results], pa.int64()),
        "uniq_key": pa.array([r.uniq_key for r in results], pa.string()),
    })


def messages(batch):
    """The Message objects of a batch's rows (the path for rows that reroute)."""
    from ._message import Message
    out = []
    for row in batch.to_pylist():
        props = dict(row.get("properties") or [])
        born = row.get("born_timestamp")
        if born is not None and not isinstance(born, int):
            born = int(born.timestamp() * 1000)
        out.append(Message(row["topic"], row["body"] or b"", row["queue_id"], tags=row.get("tags"),
                           keys=[k for k in row["keys"] if k is not None] if row.get("keys") is not None else None,
                           properties={k: v for k, v in props.items() if v is not None},
                           flag=row.get("flag") or 0, born_timestamp=born or 0))
    return out
