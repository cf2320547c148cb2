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
import logging
from dataclasses import dataclass, field

from pyspark.sql.datasource import DataSource, DataSourceReader, EqualTo, In, InputPartition

from .arrow import SegmentRead, iter_segment_batches
from . import fs
from .layout import (check_not_live, dispatched_end, index_positions, list_segments, parse_stores, parse_time,
                     prune_by_queues, prune_by_time, snapshot_end, split_ranges)
from .options import DEFAULT_SPLIT_SIZE, _bool, _csv, _ints, parse_size  # noqa: F401  (also read by the stream source)
from .schema import DDL, arrow_schema
from .writer import RocketMQStoreWriter

log = logging.getLogger("rmqcore.spark")

FORMAT = "rocketmq-store"
PUSHDOWN_FORMAT = "rocketmq-store-pushdown"


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
