"""The batch writer of the ``rocketmq-store`` data source (``df.write.format("rocketmq-store")``): each task writes
a small piece store, the driver replays the pieces into one store per broker in partition order. Below the source
and the streaming sink, which both use it."""
from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from .arrow import SegmentRead, iter_segment_batches
from .layout import list_segments
from .schema import arrow_schema

log = logging.getLogger(__name__)


@dataclass
class StoreWritten(WriterCommitMessage):
    root: str
    stores: dict          # broker → this task's piece (a small temporary store)
    counts: dict          # broker → messages written
    partition: int = 0    # the task's partition: pieces of one broker are merged in partition order


_WRITE_OPTIONS = {"path", "broker", "storeconfig"}
_PIECE_COMMIT_LOG = 16 << 20
_PIECE_CONSUME_QUEUE = 20 * 20000


def _store_config(options):
    from ..config import StoreConfig
    raw = options.get("storeconfig")
    return StoreConfig(**json.loads(raw)) if raw else StoreConfig()


def _piece_config(cfg):
    """A task's piece: a store only the driver's merge reads, so small files (a 1 GiB commitlog and a 420 MB
    index per task and broker would be paid by every task) and no index (the merge builds the real one)."""
    commit_log = max(min(cfg.mapped_file_size_commit_log, _PIECE_COMMIT_LOG), 2 * cfg.max_message_size + 4096)
    return cfg.replace(mapped_file_size_commit_log=commit_log,
                       mapped_file_size_consume_queue=min(cfg.mapped_file_size_consume_queue, _PIECE_CONSUME_QUEUE),
                       message_index_enable=False, warm_mapped_file_enable=False)


# The columns a piece is read back with for the merge: everything the task's put kept.
_REPLAY_COLUMNS = ["topic", "queue_id", "body", "tags", "keys", "uniq_key", "properties", "flag", "born_timestamp",
                   "born_host", "reconsume_times"]


def _arrow_parts(batch, default_broker: str) -> dict:
    """{broker: RecordBatch} of the rows of an Arrow batch, with the columns MessageStore.put_arrow takes (the bulk
    columnar put: no Python object per row)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from ..columnar import OPTIONAL, REQUIRED
    names = [n for n in batch.schema.names if n in REQUIRED + OPTIONAL]
    if "queue_id" not in names:
        batch = batch.append_column("queue_id", pa.nulls(batch.num_rows, pa.int32()).fill_null(0))
        names.append("queue_id")
    if "broker" not in batch.schema.names:
        return {default_broker: batch.select(names)}
    brokers = pc.fill_null(batch.column("broker"), default_broker)
    out = {}
    for b in pc.unique(brokers).to_pylist():
        out[b] = batch.filter(pc.equal(brokers, b)).select(names)
    return out


def _put_arrow(store, broker: str, part) -> None:
    import pyarrow.compute as pc
    status = store.put_arrow(part).column("status").cast("string")
    failed = pc.not_equal(status, "PUT_OK")
    if len(status) and pc.any(failed).as_py():
        raise RuntimeError(f"broker {broker}: put failed with {pc.filter(status, failed)[0].as_py()}")


class RocketMQStoreWriter(DataSourceArrowWriter):
    """One store per broker, however the rows are partitioned: each task writes its rows of each broker into a
    small temporary piece (``root/.{broker}.piece-…``); the driver's commit merges a broker's pieces, in
    partition order, into ``root/.{broker}.tmp-…`` with the asked geometry (``storeConfig``) and renames it to
    ``root/{broker}``. A failed task deletes its pieces, an aborted job every piece of the job (also those of tasks
    Spark killed, once they are gone: each task holds a lock in its pieces while it writes), a failed commit what
    it made. Save modes: append and the default (errorifexists) write new brokers only; overwrite replaces them."""

    def __init__(self, options: dict, columns: list[str], overwrite: bool):
        o = {k.lower(): v for k, v in options.items()}
        unknown = sorted(set(o) - _WRITE_OPTIONS)
        if unknown:
            raise ValueError(f"rocketmq-store writer: unknown option(s) {unknown}; known: {sorted(_WRITE_OPTIONS)}")
        if not o.get("path"):
            raise ValueError("rocketmq-store writer needs save(root)")
        for need in ("topic", "body"):
            if need not in columns:
                raise ValueError(f"rocketmq-store writer needs a {need!r} column")
        self.root = os.path.abspath(o["path"])
        self.job = uuid.uuid4().hex[:12]        # made on the driver: names every piece of this job's tasks
        self.options = o
        self.overwrite = overwrite
        self.columns = columns
        _store_config(o).validate()

    def write(self, iterator):
        from pyspark import TaskContext

        from ..store import MessageStore
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx else 0
        default_broker = self.options.get("broker") or f"broker-{partition}"
        cfg = _piece_config(_store_config(self.options))
        os.makedirs(self.root, exist_ok=True)
        stores: dict = {}
        dirs: dict = {}
        counts: dict = {}
        locks: list = []
        try:
            for batch in iterator:
                for broker, part in _arrow_parts(batch, default_broker).items():
                    if broker not in stores:
                        d = os.path.join(self.root, f".{broker}{_PIECE}{self.job}-{partition:05d}-"
                                                    f"{uuid.uuid4().hex[:12]}")
                        dirs[broker] = d
                        stores[broker] = MessageStore.open(d, cfg)
                        locks.append(_hold(os.path.join(d, _WRITING)))
                        counts[broker] = 0
                    _put_arrow(stores[broker], broker, part)
                    counts[broker] += part.num_rows
            for s in stores.values():
                s.close()
        except BaseException:
            for s in stores.values():
                s.close()
            for d in dirs.values():
                shutil.rmtree(d, ignore_errors=True)
            raise
        finally:
            for fd in locks:
                os.close(fd)
        return StoreWritten(self.root, dirs, counts, partition)

    def commit(self, messages):
        pieces: dict = {}
        for m in sorted((m for m in messages if m is not None), key=lambda m: m.partition):
            for broker, d in m.stores.items():
                pieces.setdefault(broker, []).append(d)
        made: list = []
        try:
            for broker in pieces:
                target = os.path.join(self.root, broker)
                if os.path.exists(target) and not self.overwrite:
                    raise FileExistsError(f"{target} exists; append (and the default save mode) write new brokers "
                                          "only, use mode('overwrite') to replace it")
            for broker, dirs in pieces.items():
                tmp = os.path.join(self.root, f".{broker}.tmp-{uuid.uuid4().hex[:12]}")
                made.append(tmp)
                self._merge(broker, dirs, tmp)
            for broker, tmp in zip(pieces, made):
                target = os.path.join(self.root, broker)
                if os.path.exists(target):
                    old = f"{target}.old-{uuid.uuid4().hex[:8]}"
                    os.rename(target, old)
                    os.rename(tmp, target)
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    os.rename(tmp, target)
        finally:
            for d in made + [d for dirs in pieces.values() for d in dirs]:
                shutil.rmtree(d, ignore_errors=True)

    def _merge(self, broker: str, dirs: list, out: str) -> None:
        from ..store import MessageStore
        with MessageStore.open(out, _store_config(self.options)) as store:
            replay_pieces(store, broker, dirs)

    def abort(self, messages):
        for m in messages:
            if m is not None:
                for tmp in m.stores.values():
                    shutil.rmtree(tmp, ignore_errors=True)
        # Pieces no message names: tasks Spark killed when the job failed (their Python worker may still be
        # writing, or was killed mid-write) or that ended after it. Each is removed once its task lets go of it.
        for _ in range(5):
            if not _remove_pieces(self.root, self.job):
                break


def replay_pieces(store, broker: str, dirs: list, transform=None) -> int:
    """Put the records of task pieces ``dirs`` (in order) into the open ``store``; ``transform`` may rewrite each
    Arrow batch first. Returns how many records were put."""
    schema = arrow_schema([(c, True) for c in _REPLAY_COLUMNS])
    n = 0
    for d in dirs:
        for seg in list_segments(d):
            for batch in iter_segment_batches(SegmentRead(seg, broker), schema):
                if transform is not None:
                    batch = transform(batch)
                for _, part in _arrow_parts(batch, broker).items():
                    _put_arrow(store, broker, part)
                    n += part.num_rows
    return n


_PIECE = ".piece-"
_WRITING = ".writing"                       # a task holds an exclusive flock on it while it writes its piece


def _hold(path: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _remove_pieces(root: str, job: str, wait: float = 60.0) -> int:
    """Delete the pieces of ``job`` under ``root``, each once no task holds it (at most ``wait`` s); how many."""
    try:
        names = [n for n in os.listdir(root) if n.startswith(".") and f"{_PIECE}{job}-" in n]
    except FileNotFoundError:
        return 0
    for name in names:
        path = os.path.join(root, name)
        try:
            fd = os.open(os.path.join(path, _WRITING), os.O_RDWR)
        except OSError:
            fd = None                           # not locked yet (or gone): its task fails when the piece goes
        if fd is not None:
            try:
                deadline = time.monotonic() + wait
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            break
                        time.sleep(0.05)
            finally:
                os.close(fd)
        shutil.rmtree(path, ignore_errors=True)
    return len(names)


def _to_ms(ts) -> int:
    # Spark hands TimestampType to Python as datetime (aware in UTC through Arrow, or naive local).
    import datetime
    if isinstance(ts, datetime.datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=datetime.timezone.utc)
        return int(round(ts.timestamp() * 1000))
    return int(ts)
