"""The ``rocketmq-store`` PySpark data source: RocketMQ store directories ⇄ DataFrames.

Reading: one partition per commitlog segment (records never straddle segments), decoded on the executor by
``rmqcore._segment`` straight into Arrow record batches of bounded size. Only the columns of the schema Spark
passes are decoded (PySpark does no column pruning for Python sources: ``.schema("topic STRING, ...")`` is the
way to ask for fewer). Explicit options prune before any decode:

=====================  ==============================================================================
``path``/``paths``     store roots (``load(p)`` / ``load([p, ...])``); broker = the root's directory name
``brokers``            JSON ``{"broker-a": "/store/a", ...}`` instead of paths
``topics``             comma-separated topics: segments chosen through the consume queues, rows filtered
``queueIds``           comma-separated queue ids (same)
``startTime/endTime``  store-time window [start, end): ms or ISO 8601 (UTC when no zone); segments pruned by
                       their first record's store time, rows filtered exactly
``keys``               comma-separated message keys (or uniq keys) looked up in the index files (needs
                       ``topics``); only the matching records are read, hash collisions removed
``checkCrc``           true (default): fill ``crc_ok``; false: skip CRC work, ``crc_ok`` is null
``onCorrupt``          ``fail`` (default): a record with a broken structure fails the task, naming file and
                       offset; ``stop``: log it and end that segment there
``batchRows``          rows per Arrow batch (default 65536); ``batchBytes``: variable-width bytes per batch
                       (default 16 MiB)
``pruneByConsumeQueue`` true (default). Prepared/rollback transaction records have no consume-queue unit:
                       with ``topics``/``queueIds`` they are only seen in segments that are read anyway;
                       false scans every segment
``indexHashSlotNum``/``indexNum``  the store's index geometry; by default read from the index files
``splitSize``          bytes per task (``64m``, ``128MiB``, ``1g`` or a number; default 128 MiB; 0: one task per
                       segment). A task syncs to the first record starting in its range (a sound record that
                       stores its own offset, followed by another) and reads the records that start in it
``onLiveStore``        ``fail`` (default): a store whose lock is held by a running broker (rmqcore's flock or
                       the Java broker's record lock) or that has an ``abort`` file is refused, naming it;
                       ``snapshot``: read it up to the end of its last complete record, fixed once at planning
                       (every split and segment uses the same end, so repeated reads of one plan agree)
=====================  ==============================================================================

Store roots are local paths or filesystem URIs (``s3://bucket/stores/broker-a?endpoint_override=…``, ``gs://``,
``hdfs://``, ``abfs://``; see ``rmqcore.spark.fs``): local files are mapped, remote ones read in ranges into the
same decoders. Every executor must reach the same roots.

Writing (``df.write.format("rocketmq-store").mode("append"|"overwrite").save(root)``, or
``rmqcore.spark.write_stores(df, root)`` for every save mode: Spark refuses the default errorifexists for Python
sources): one store per broker name (the ``broker`` column, else option ``broker``, else ``broker-<partition>``)
however the rows are partitioned. Each task writes its rows into small temporary pieces through rmqcore's own
MessageStore; the driver's commit merges each broker's pieces in partition order into ``root/{broker}`` with the
``storeConfig`` geometry (see RocketMQStoreWriter). Append refuses to touch an existing store; overwrite
replaces it.

Filter pushdown is opt-in (``register(spark, pushdown=True)`` registers ``rocketmq-store-pushdown``); see
``RocketMQStorePushdownDataSource`` for why it is exact and safe on reused DataFrames.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field

from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceReader, EqualTo, In,
                                    InputPartition, WriterCommitMessage)

from .arrow import SegmentRead, iter_segment_batches
from . import fs
from .layout import (check_not_live, dispatched_end, index_positions, list_segments, parse_stores, parse_time,
                     prune_by_queues, prune_by_time, snapshot_end, split_ranges)
from .schema import DDL, arrow_schema

log = logging.getLogger("rmqcore.spark")

FORMAT = "rocketmq-store"
PUSHDOWN_FORMAT = "rocketmq-store-pushdown"

# Default splitSize. Every task costs Spark ~65 ms of CPU whatever it reads (measured on PySpark 4.3, 2 vCPUs:
# ~40 ms in the JVM, ~25 ms in the Python worker; see bench/README, issue 13), about what rmqcore's decoder
# spends on 64 MiB of full rows or 300 MiB of narrow ones. 128 MiB halves that overhead against 64 MiB and still
# gives a 1 GiB segment eight tasks.
DEFAULT_SPLIT_SIZE = 128 << 20


def _bool(v, default: bool) -> bool:
    if v is None:
        return default
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {v!r}")


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_size(v, option: str) -> int:
    s = str(v).strip().lower()
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz ")
    unit = s[len(num):].strip()
    try:
        n = int(num) * _SIZE_UNITS[unit]
    except (ValueError, KeyError):
        raise ValueError(f"option {option}: {v!r} is not a size (bytes, or a number with k/m/g)") from None
    if n < 0:
        raise ValueError(f"option {option} must be >= 0, got {v!r}")
    return n


def _ints(v, option: str) -> list[int] | None:
    items = _csv(v)
    if items is None:
        return None
    try:
        return [int(x) for x in items]
    except ValueError:
        raise ValueError(f"option {option}: {v!r} is not a comma-separated list of integers") from None


def _csv(v) -> list[str] | None:
    if v is None or str(v).strip() == "":
        return None
    return [x.strip() for x in str(v).split(",") if x.strip()]


@dataclass
class SegmentPartition(InputPartition):
    """One task: a byte range of one segment (all of it, a split, or the records at ``read.positions``)."""
    read: SegmentRead
    value: object = None

    def __post_init__(self):
        self.value = self.read.path


@dataclass
class ReadOptions:
    stores: list
    topics: list | None = None
    queue_ids: list | None = None
    start: int | None = None
    end: int | None = None
    keys: list | None = None
    check_crc: bool = True
    on_corrupt: str = "fail"
    batch_rows: int = 65536
    batch_bytes: int = 16 << 20
    prune_by_cq: bool = True
    hash_slot_num: int | None = None      # None: from the index files' size
    index_num: int | None = None
    split_size: int = DEFAULT_SPLIT_SIZE
    on_live: str = "fail"
    extra: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, options) -> "ReadOptions":
        o = {k.lower(): v for k, v in dict(options).items()}
        known = {"path", "paths", "brokers", "topics", "queueids", "starttime", "endtime", "keys", "checkcrc",
                 "oncorrupt", "batchrows", "batchbytes", "prunebyconsumequeue", "indexhashslotnum", "indexnum",
                 "splitsize", "onlivestore"}
        unknown = sorted(set(o) - known)
        if unknown:
            raise ValueError(f"rocketmq-store: unknown option(s) {unknown}; known: {sorted(known)}")
        r = cls(stores=parse_stores(o))
        r.topics = _csv(o.get("topics"))
        r.queue_ids = _ints(o.get("queueids"), "queueIds")
        r.start = parse_time(o.get("starttime"), "startTime")
        r.end = parse_time(o.get("endtime"), "endTime")
        if r.start is not None and r.end is not None and r.start >= r.end:
            raise ValueError(f"option startTime ({o.get('starttime')}) must be before option endTime "
                             f"({o.get('endtime')})")
        r.keys = _csv(o.get("keys"))
        if r.keys is not None and not r.topics:
            raise ValueError("option keys needs option topics: the index is keyed by topic#key")
        r.check_crc = _bool(o.get("checkcrc"), True)
        r.on_corrupt = str(o.get("oncorrupt", "fail")).lower()
        if r.on_corrupt not in ("fail", "stop"):
            raise ValueError(f"onCorrupt must be fail or stop, got {r.on_corrupt!r}")
        # Batches are bounded by bytes first; many rows per batch keep narrow reads (no body) from paying
        # Spark's per-batch cost (Arrow IPC to the JVM) every few hundred KB.
        r.batch_rows = _ints(o.get("batchrows", "65536"), "batchRows")[0]
        r.batch_bytes = parse_size(o.get("batchbytes", 16 << 20), "batchBytes")
        if r.batch_rows <= 0 or r.batch_bytes <= 0:
            raise ValueError("batchRows and batchBytes must be > 0")
        r.prune_by_cq = _bool(o.get("prunebyconsumequeue"), True)
        if ("indexhashslotnum" in o) != ("indexnum" in o):
            raise ValueError("give both indexHashSlotNum and indexNum, or neither")
        if "indexhashslotnum" in o:
            r.hash_slot_num = _ints(o["indexhashslotnum"], "indexHashSlotNum")[0]
            r.index_num = _ints(o["indexnum"], "indexNum")[0]
        r.split_size = parse_size(o.get("splitsize", DEFAULT_SPLIT_SIZE), "splitSize")
        r.on_live = str(o.get("onlivestore", "fail")).lower()
        if r.on_live not in ("fail", "snapshot"):
            raise ValueError(f"option onLiveStore must be fail or snapshot, got {o.get('onlivestore')!r}")
        return r


def plan_partitions(opts: ReadOptions) -> list[SegmentPartition]:
    """Every (pruned) segment of every store as partitions (``splitSize`` byte ranges), in broker then offset
    order. Live stores are refused, or read up to a snapshot end fixed here (``onLiveStore``)."""
    parts = []
    for broker, root in opts.stores:
        segments = list_segments(root)
        limit = None
        if opts.on_live == "fail":
            check_not_live(broker, root)
        else:
            limit = snapshot_end(segments)
            segments = [p for p in segments if int(fs.basename(p)) < limit]
        if opts.prune_by_cq and opts.keys is None:
            segments = prune_by_queues(root, segments, opts.topics, opts.queue_ids, limit)
        segments = prune_by_time(segments, opts.start, opts.end)
        positions_by_segment = None
        if opts.keys is not None:
            positions_by_segment = {}
            bases = [int(fs.basename(p)) for p in segments]
            for topic in opts.topics:
                for off in index_positions(root, topic, opts.keys, opts.hash_slot_num, opts.index_num):
                    for i in range(len(segments) - 1, -1, -1):
                        if off >= bases[i]:
                            positions_by_segment.setdefault(segments[i], []).append(off - bases[i])
                            break
        last = list_segments(root)[-1:] if segments else []
        for path in segments:
            base = int(fs.basename(path))
            size = fs.getsize(path)
            seg_limit = None if limit is None or base + size <= limit else limit - base
            read = SegmentRead(path, broker, opts.topics, opts.queue_ids, opts.start, opts.end, limit=seg_limit)
            if positions_by_segment is not None:
                if path not in positions_by_segment:
                    continue
                read.positions = positions_by_segment[path]
                if len(opts.keys) == 1 and len(opts.topics) == 1:
                    read.key_filter = (opts.topics[0], opts.keys[0])
                else:
                    read.extra["key_filters"] = [(t, k) for t in opts.topics for k in opts.keys]
                parts.append(SegmentPartition(read))
                continue
            span = size if seg_limit is None else seg_limit
            hint = None
            if seg_limit is None and path in last and span > opts.split_size > 0:
                # The last segment is preallocated: lay splits over the dispatched data only, one for the rest.
                hint = dispatched_end(root) - base
            for a, b in split_ranges(span, opts.split_size, hint):
                parts.append(SegmentPartition(dataclasses.replace(read, start=a, stop=b)))
    return parts


class RocketMQStoreReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema):
        self.opts = opts
        self.fields = [(f.name, f.nullable) for f in schema.fields]
        arrow_schema(self.fields)     # unknown column names fail at planning, not in a task

    def partitions(self):
        # The 4.x planner wants a list; an empty one becomes one InputPartition(None), handled in read().
        return plan_partitions(self.opts)

    def read(self, partition):
        if not isinstance(partition, SegmentPartition):
            return iter(())
        return _read_partition(partition.read, self.fields, self.opts)


def _read_partition(read: SegmentRead, fields, opts: ReadOptions):
    schema = arrow_schema(fields)
    key_filters = read.extra.get("key_filters")
    if key_filters:
        # Several topics/keys: one pass per (topic, key) over the same positions, each record emitted once.
        seen = set()
        for kf in key_filters:
            sub = dataclasses.replace(read, key_filter=kf, extra={})
            wanted = schema if "commitlog_offset" in schema.names else arrow_schema(
                list(fields) + [("commitlog_offset", True)])
            for b in iter_segment_batches(sub, wanted, check_crc=opts.check_crc, batch_rows=opts.batch_rows,
                                          batch_bytes=opts.batch_bytes, on_corrupt=opts.on_corrupt, log=log):
                offs = b.column("commitlog_offset").to_pylist()
                mask = [o not in seen for o in offs]
                seen.update(offs)
                b = b.filter(mask).select(schema.names)
                if b.num_rows:
                    yield b
        return
    yield from iter_segment_batches(read, schema, check_crc=opts.check_crc, batch_rows=opts.batch_rows,
                                    batch_bytes=opts.batch_bytes, on_corrupt=opts.on_corrupt, log=log)


class RocketMQStoreDataSource(DataSource):
    """``spark.read.format("rocketmq-store")`` / ``df.write.format("rocketmq-store")``."""

    @classmethod
    def name(cls):
        return FORMAT

    def schema(self):
        return DDL

    def reader(self, schema):
        return RocketMQStoreReader(ReadOptions.parse(self.options), schema)

    def writer(self, schema, overwrite):
        return RocketMQStoreWriter(dict(self.options), [f.name for f in schema.fields], overwrite)

    def streamWriter(self, schema, overwrite):
        # writeStream: append each micro-batch to one store per broker, once per batch id (rmqcore.spark.sink).
        from .sink import RocketMQStoreStreamWriter
        return RocketMQStoreStreamWriter(dict(self.options), [f.name for f in schema.fields])

    def streamReader(self, schema):
        # spark.readStream: follows live stores through their consume queues (rmqcore.spark.stream).
        from .stream import RocketMQStreamReader, StreamOptions
        return RocketMQStreamReader(StreamOptions.parse(self.options), schema)


# ---------------------------------------------------------------------------------------------------------------
# Opt-in filter pushdown

# Spark versions whose Python data source planning is known not to reuse a pushed-down reader for later scans
# of the same DataFrame. PySpark 4.1–4.3.0 caches the read plan in the relation (PythonDataSourceV2.readInfo):
# a pushdown overwrites it, and a later scan without filters (pushdown is skipped when there are none) reuses
# the filtered plan, silently returning the previous query's rows (reproduced here, see
# tests/test_spark.py::test_pushdown_reused_dataframe). Until a fixed version is known, the pushdown reader
# prunes nothing there and hands every filter back to Spark.
PUSHDOWN_SAFE_SPARK_VERSIONS: tuple = ()


def _pushdown_is_safe() -> bool:
    try:
        import pyspark
    except ImportError:   # pragma: no cover - this module imports pyspark already
        return False
    return pyspark.__version__ in PUSHDOWN_SAFE_SPARK_VERSIONS


class RocketMQStorePushdownReader(RocketMQStoreReader):
    def __init__(self, opts, schema, force: bool = False):
        super().__init__(opts, schema)
        self.force = force          # tests of the translation itself (never set by the data source)

    def pushFilters(self, filters):
        """Take ``topic``/``queue_id`` equality and IN filters into the partition plan (segments through the
        consume queues, rows in Cython); return the others. Applied only when the running Spark cannot reuse
        this reader for a scan without the filters (see PUSHDOWN_SAFE_SPARK_VERSIONS); otherwise every filter
        is returned, so results stay exact and Spark filters the rows itself."""
        if not (self.force or _pushdown_is_safe()):
            yield from filters
            return
        for f in filters:
            values = None
            if isinstance(f, EqualTo):
                values = (f.value,)
            elif isinstance(f, In):
                values = tuple(f.value)
            if values is not None and f.attribute == ("topic",) and all(isinstance(v, str) for v in values):
                prev = self.opts.topics
                self.opts.topics = sorted(set(values) if prev is None else set(values) & set(prev))
                continue
            if values is not None and f.attribute == ("queue_id",) and all(isinstance(v, int) for v in values):
                prev = self.opts.queue_ids
                self.opts.queue_ids = sorted(set(values) if prev is None else set(values) & set(prev))
                continue
            yield f


class RocketMQStorePushdownDataSource(RocketMQStoreDataSource):
    """``rocketmq-store-pushdown``: the same source with ``pushFilters`` (needs
    ``spark.sql.python.filterPushdown.enabled=true``, which ``register(spark, pushdown=True)`` sets)."""

    @classmethod
    def name(cls):
        return PUSHDOWN_FORMAT

    def reader(self, schema):
        return RocketMQStorePushdownReader(ReadOptions.parse(self.options), schema)


# ---------------------------------------------------------------------------------------------------------------
# Writer

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
