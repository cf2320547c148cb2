"""The streaming sink: ``df.writeStream.format("rocketmq-store").option("checkpointLocation", c).start(root)``.

Each micro-batch is appended to one store per broker (``root/{broker}``; the ``broker`` column, else option
``broker``, else ``broker-a``), exactly once per batch id:

* Tasks write their rows into small temporary pieces, as the batch writer does (nothing in the store yet).
* The driver's commit, per broker: reads the store's sink record ``config/sparkStreamSink.json`` (sink id, last
  committed batch id, commitlog end after it). A batch id at or below the last one was committed before (Spark
  re-runs the last batch after a restart): its pieces are dropped. Otherwise a store whose data goes past the
  recorded end holds a half-written batch (the driver died while merging): those records are cut back, after
  checking that every one of them carries this sink's batch property (``SPARK_SINK_BATCH`` = ``sinkId:batchId``)
  for a batch after the last committed one, so no record the sink did not write in an uncommitted batch is ever
  cut (otherwise the commit fails, naming the first such record). Then the pieces are put into the store, the
  store is closed (flushed), and the record is replaced (written to a temporary file, synced, renamed).
* The cut: the commitlog bytes past the recorded end are zeroed (later files removed) and the store's abort
  file is created, so the next open recovers abnormally and cuts consume queues and index past the end, as
  after a crash (``rmqcore.recovery``); the store's own recovery never cuts valid records.

So after any crash the store holds each batch whole, once, as soon as the batch is committed again. Readers that
follow the store *while* a batch is merged see its first records before it commits; should the driver die then,
those records are cut and written again (a reader that keeps the consume-queue offsets it read may see them
twice). The store must not be open elsewhere while the query runs (the merge opens it, taking its lock).
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass

import numpy as np
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from ..config_manager import file2string, string2file
from .arrow import SegmentRead, iter_segment_batches
from .layout import list_segments, snapshot_end
from .schema import arrow_schema
from .writer import RocketMQStoreWriter, _store_config, replay_pieces

SINK_FILE = "sparkStreamSink.json"
BATCH_PROPERTY = "SPARK_SINK_BATCH"
DEFAULT_BROKER = "broker-a"
_STREAM_ONLY = {"checkpointlocation", "queryname", "outputmode"}


class SinkCutRefused(RuntimeError):
    """A store holds records past the sink's last commit that are not those of a half-written batch of this sink."""


@dataclass
class SinkState:
    sink_id: str
    last_batch: int
    end: int

    @classmethod
    def load(cls, store_dir: str) -> "SinkState | None":
        text = file2string(os.path.join(store_dir, "config", SINK_FILE))
        if text is None:
            return None
        d = json.loads(text)
        return cls(str(d["sinkId"]), int(d["lastBatchId"]), int(d["end"]))

    def save(self, store_dir: str) -> None:
        string2file(json.dumps({"sinkId": self.sink_id, "lastBatchId": self.last_batch, "end": self.end}),
                    os.path.join(store_dir, "config", SINK_FILE))


def data_end(store_dir: str) -> int:
    """Where the commitlog's records end (a closed store)."""
    return snapshot_end(list_segments(store_dir))


def with_property(batch, key: str, value: str):
    """``batch`` with ``key=value`` added to every row's properties (map column), without a Python object per row."""
    import pyarrow as pa
    col = batch.column("properties")
    n = len(col)
    offs = col.offsets.to_numpy().astype(np.int64)
    if col.null_count:
        valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        counts = np.where(valid, np.diff(offs), 0)
    else:
        counts = np.diff(offs)
    new_offs = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts + 1, out=new_offs[1:])
    total = int(new_offs[-1])
    keys, items = col.keys, col.items
    idx = np.empty(total, dtype=np.int64)
    is_new = np.zeros(total, dtype=bool)
    is_new[new_offs[1:] - 1] = True
    starts = np.repeat(offs[:-1], counts)
    # Position of each old entry in the old child arrays: its row's start plus its rank within the row.
    rank = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    idx[~is_new] = starts + rank
    idx[is_new] = len(keys) + np.arange(n)
    all_keys = pa.concat_arrays([keys.cast(pa.string()), pa.array([key] * n, pa.string())])
    all_items = pa.concat_arrays([items.cast(pa.string()), pa.array([value] * n, pa.string())])
    take = pa.array(idx)
    props = pa.MapArray.from_arrays(pa.array(new_offs, pa.int32()), all_keys.take(take), all_items.take(take))
    return batch.set_column(batch.schema.get_field_index("properties"), "properties", props)


def cut_back(store_dir: str, state: SinkState) -> int:
    """Remove the records a half-written batch left past ``state.end`` (see the module doc); how many bytes."""
    segments = list_segments(store_dir)
    end = snapshot_end(segments)
    if end <= state.end:
        return 0
    schema = arrow_schema([("properties", True), ("commitlog_offset", True)])
    prefix = f"{state.sink_id}:"
    for path in segments:
        base = int(os.path.basename(path))
        size = os.path.getsize(path)
        if base + size <= state.end or base >= end:
            continue
        start = max(0, state.end - base)
        for b in iter_segment_batches(SegmentRead(path, start=start, limit=end - base), schema):
            for props, off in zip(b.column("properties").to_pylist(), b.column("commitlog_offset").to_pylist()):
                tag = dict(props or ()).get(BATCH_PROPERTY, "")
                ok = tag.startswith(prefix) and tag[len(prefix):].isdigit() and \
                    int(tag[len(prefix):]) > state.last_batch
                if not ok:
                    raise SinkCutRefused(
                        f"{store_dir}: the record at commitlog offset {off} lies past the stream sink's last commit "
                        f"(batch {state.last_batch}, end {state.end}) but is not part of a later batch of this "
                        f"sink ({BATCH_PROPERTY}={tag or 'absent'}): the store was written by something else; "
                        "refusing to cut it")
    for path in segments:
        base = int(os.path.basename(path))
        size = os.path.getsize(path)
        if base >= end or base + size <= state.end:
            continue
        if base >= state.end and base > 0:
            os.remove(path)
            continue
        start = max(0, state.end - base)
        stop = min(size, end - base)
        with open(path, "r+b") as f:
            f.seek(start)
            f.write(b"\0" * (stop - start))
            f.flush()
            os.fsync(f.fileno())
    # The next open recovers as after a crash: consume queues and index are cut to the commitlog's end.
    with open(os.path.join(store_dir, "abort"), "w"):
        pass
    return end - state.end


class RocketMQStoreStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict, columns: list[str]):
        o = {k.lower(): v for k, v in options.items() if k.lower() not in _STREAM_ONLY}
        o.setdefault("broker", DEFAULT_BROKER)
        self.pieces = RocketMQStoreWriter(o, columns, overwrite=False)
        self.root = self.pieces.root
        self.options = o

    def write(self, iterator):
        return self.pieces.write(iterator)

    def commit(self, messages, batchId):
        from ..store import MessageStore
        pieces: dict = {}
        for m in sorted((m for m in messages if m is not None), key=lambda m: m.partition):
            for broker, d in m.stores.items():
                pieces.setdefault(broker, []).append(d)
        try:
            for broker in sorted(pieces):
                target = os.path.join(self.root, broker)
                state = SinkState.load(target) if os.path.isdir(target) else None
                if state is not None and batchId <= state.last_batch:
                    continue                    # committed before this re-run: add nothing
                cfg = _store_config(self.options)
                if state is None:
                    if os.path.isdir(target):
                        end = data_end(target)
                    else:
                        MessageStore.open(target, cfg).close()
                        end = 0
                    state = SinkState(uuid.uuid4().hex[:12], -1, end)
                    state.save(target)
                else:
                    cut_back(target, state)
                tag = f"{state.sink_id}:{batchId}"
                with MessageStore.open(target, cfg) as store:
                    replay_pieces(store, broker, pieces[broker],
                                  lambda b: with_property(b, BATCH_PROPERTY, tag))
                    store.wait_dispatched()
                    new_end = store.commit_log.max_offset
                state.last_batch, state.end = batchId, new_end
                state.save(target)
        finally:
            for dirs in pieces.values():
                for d in dirs:
                    shutil.rmtree(d, ignore_errors=True)

    def abort(self, messages, batchId):
        self.pieces.abort(messages)
