"""Offline jobs over many stores on Spark: verify, stats, export, rebuild.

Each is a function ``job(spark, stores, ...)`` where ``stores`` is a list of store roots, a list of
``(broker, root)`` pairs or a ``{broker: root}`` dict; ``python -m rmqcore.spark JOB ...`` runs the same code.

* ``verify``: one Spark task per commitlog segment walks every record (structure and CRC, in Cython) and
  reports bad records with file and offset.
* ``stats``: the data source with a narrow schema (no bodies), grouped per broker/topic/queue.
* ``export``: the data source to Parquet, partitioned by topic and UTC date.
* ``rebuild``: one task per store replays its commitlog through rmqcore's own dispatch (ReputMessageService →
  ConsumeQueue / IndexService) into a new directory: the files are the ones the store itself writes.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

from .._codec import record_error
from .._segment import SEGMENT_END, verify_segment
from . import fs
from .layout import check_not_live, check_store_root, list_segments, snapshot_end
from .source import FORMAT


def normalize_stores(stores) -> list[tuple[str, str]]:
    if isinstance(stores, dict):
        pairs = [(str(b), str(r)) for b, r in stores.items()]
    else:
        pairs = []
        for s in ([stores] if isinstance(stores, (str, os.PathLike)) else stores):
            if isinstance(s, (tuple, list)):
                pairs.append((str(s[0]), str(s[1])))
            else:
                s = os.fspath(s)
                pairs.append((fs.basename(s), s))
    out = [(b, fs.normalize(r)) for b, r in pairs]
    for b, r in out:
        check_store_root(b, r)
    return out


def brokers_option(stores) -> str:
    """The reader's ``brokers`` option for ``stores``."""
    return json.dumps(dict(normalize_stores(stores)))


def read_stores(spark, stores, schema=None, **options):
    """``spark.read.format("rocketmq-store")`` over ``stores`` with ``options``; ``schema`` narrows columns."""
    r = spark.read.format(FORMAT).option("brokers", brokers_option(stores))
    for k, v in options.items():
        if v is not None:
            r = r.option(k, v)
    if schema is not None:
        r = r.schema(schema)
    return r.load()


def write_stores(df, root: str, mode: str = "errorifexists", **options) -> str:
    """``df`` written as RocketMQ stores under ``root`` (one per broker; see RocketMQStoreWriter), with every save
    mode. Spark (4.0-4.3) itself refuses any mode but append and overwrite for Python data sources
    (``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``, before the writer is asked), so a plain ``.save()`` cannot work;
    this function gives the default mode its meaning: ``errorifexists`` fails when ``root`` already holds a
    store, ``ignore`` then writes nothing; both write through append."""
    mode = mode.lower()
    if mode in ("errorifexists", "error", "default", "ignore"):
        held = sorted(n for n in os.listdir(root) if not n.startswith(".")) if os.path.isdir(root) else []
        if held:
            if mode == "ignore":
                return root
            raise FileExistsError(f"{root} already holds {held}; save mode {mode} writes into a new or empty root: "
                                  "use mode append (new brokers only) or overwrite")
        mode = "append"
    w = df.write.format(FORMAT).mode(mode)
    for k, v in options.items():
        if v is not None:
            w = w.option(k, v)
    w.save(root)
    return root


# -- progress -----------------------------------------------------------------------------------------------------

class Progress:
    """Progress of a job on the driver: every ``interval`` seconds (and once at the end) a line on ``out`` with
    the tasks done (segments, splits or stores) from Spark's status tracker and, when the tasks count them into
    ``records`` (an accumulator), records and records/s. ``interval`` None: silent."""

    def __init__(self, spark, job: str, unit: str, interval: float | None = 5.0, out=None):
        self.sc = spark.sparkContext
        self.job, self.unit, self.interval = job, unit, interval
        self.out = out or sys.stderr
        self.records = self.sc.accumulator(0)
        self.group = f"rmqcore-{job}-{id(self)}"
        self._stop = threading.Event()
        self._thread = None
        self.t0 = 0.0

    def _counts(self):
        done = total = 0
        tracker = self.sc.statusTracker()
        for job_id in tracker.getJobIdsForGroup(self.group):
            info = tracker.getJobInfo(job_id)
            for stage_id in (info.stageIds if info else []):
                st = tracker.getStageInfo(stage_id)
                if st is not None:
                    done += st.numCompletedTasks
                    total += st.numTasks
        return done, total

    def line(self, final: bool = False) -> str:
        done, total = self._counts()
        dt = max(time.monotonic() - self.t0, 1e-9)
        n = self.records.value
        rate = f", {n} records, {n / dt:,.0f} records/s" if n else ""
        return f"[rmqcore {self.job}] {'done' if final else 'running'}: {done}/{total} {self.unit}{rate}, {dt:.1f} s"

    def _loop(self):
        while not self._stop.wait(self.interval):
            print(self.line(), file=self.out, flush=True)

    def __enter__(self):
        self.t0 = time.monotonic()
        self.sc.setJobGroup(self.group, f"rmqcore {self.job}")
        if self.interval:
            self._thread = threading.Thread(target=self._loop, name="rmqcore-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            print(self.line(final=True), file=self.out, flush=True)
        self.sc.setLocalProperty("spark.jobGroup.id", None)
        return False


# -- verify --------------------------------------------------------------------------------------------------------

def verify_segment_file(broker: str, path: str, expected_size: int | None, is_last: bool,
                        check_crc: bool = True, limit: int | None = None) -> dict:
    """Verify one segment file (runs in a Spark task; usable alone). A local file is mapped; a remote one
    (``rmqcore.spark.fs``) is read whole into memory. ``limit``: verify only the bytes before it (a snapshot of
    a live store's last segment)."""
    name = fs.basename(path)
    base = int(name)
    size = fs.getsize(path)
    uri, path = path, fs.display(path)
    out = {"broker": broker, "file": path, "segment": name, "records": 0, "bytes": 0, "bad": [],
           "first_timestamp": None, "last_timestamp": None}

    def bad(offset, field, message):
        out["bad"].append({"broker": broker, "file": path, "offset": int(offset), "field": field,
                           "message": message})

    if expected_size is not None and size != expected_size:
        bad(base + size, "fileSize", f"file has {size} bytes, the store's segments have {expected_size} "
            "(truncated or grown file)")
    if size == 0:
        return out
    with fs.open_file(uri) as f:
        data = f.view() if f.local else f.read_at(0, size if limit is None else limit)
        r = verify_segment(data, base, -1 if limit is None else limit, check_crc)
        del data
    out.update(records=r["records"], bytes=r["bytes"], first_timestamp=r["first_timestamp"],
               last_timestamp=r["last_timestamp"])
    for off, code in r["bad"]:
        err = record_error(code, off, path)
        bad(off, err.field, str(err))
    if r["bad_total"] > len(r["bad"]):
        bad(base + r["bytes"], "record", f"{r['bad_total'] - len(r['bad'])} more bad records not listed")
    if r["stray"] >= 0:
        bad(r["stray"], "totalSize", "non-zero bytes after the end of data: records the walk cannot reach "
            "(a zeroed or overwritten record header?)")
    if r["code"] == SEGMENT_END and not is_last:
        bad(base + r["bytes"], "totalSize", "data ends before the segment does, without the end-of-file blank "
            "record (every segment but the last must end with one)")
    return out


def _segment_tasks(stores, on_live: str = "fail") -> list[tuple]:
    tasks = []
    for broker, root in normalize_stores(stores):
        segs = list_segments(root)
        limit = None
        if on_live == "snapshot":
            limit = snapshot_end(segs)
            segs = [p for p in segs if int(fs.basename(p)) < limit]
        else:
            check_not_live(broker, root)
        sizes = [fs.getsize(p) for p in segs]
        # All segments of a store have the same size; the most common one is the store's.
        expected = max(set(sizes), key=sizes.count) if len(sizes) > 1 else None
        for i, p in enumerate(segs):
            base = int(fs.basename(p))
            seg_limit = limit - base if limit is not None and base + sizes[i] > limit else None
            tasks.append((broker, p, expected, i == len(segs) - 1, seg_limit))
    return tasks


def verify(spark, stores, check_crc: bool = True, progress: float | None = 5.0, on_live: str = "fail") -> dict:
    """Every record of every segment of every store, checked in parallel (one task per segment); progress
    (segments done, records/s) printed on the driver every ``progress`` seconds (None: silent). A store open by
    a broker (or with an abort file) is refused, as by the reader; ``on_live="snapshot"`` verifies it up to the
    end of data fixed now.

    Returns ``{"ok", "segments", "records", "bytes", "bad": [{"broker", "file", "offset", "field",
    "message"}], "per_segment": [...]}``."""
    tasks = _segment_tasks(stores, on_live)
    if not tasks:
        return {"ok": True, "segments": 0, "records": 0, "bytes": 0, "bad": [], "per_segment": []}
    with Progress(spark, "verify", "segments", progress) as prog:
        records = prog.records

        def run(t):
            r = verify_segment_file(t[0], t[1], t[2], t[3], check_crc, t[4])
            records.add(r["records"])
            return r
        results = spark.sparkContext.parallelize(tasks, len(tasks)).map(run).collect()
    bad = [b for r in results for b in r["bad"]]
    return {"ok": not bad, "segments": len(results), "records": sum(r["records"] for r in results),
            "bytes": sum(r["bytes"] for r in results), "bad": bad,
            "per_segment": [{k: v for k, v in r.items() if k != "bad"} for r in results]}


# -- stats ---------------------------------------------------------------------------------------------------------

STATS_SCHEMA = ("broker STRING, topic STRING, queue_id INT, queue_offset BIGINT, commitlog_offset BIGINT, "
                "store_size INT, store_timestamp TIMESTAMP")


def stats(spark, stores, **options):
    """Per broker/topic/queue: messages, bytes, first/last store time, min/max queue offset, max commitlog
    offset. A DataFrame (bodies are never decoded: the read uses a narrow schema); run its action inside
    ``Progress(spark, "stats", "splits")`` for progress lines."""
    from pyspark.sql import functions as F
    df = read_stores(spark, stores, STATS_SCHEMA, checkCrc="false", **options)
    return (df.groupBy("broker", "topic", "queue_id")
              .agg(F.count(F.lit(1)).alias("messages"), F.sum("store_size").alias("bytes"),
                   F.min("store_timestamp").alias("first_store_time"),
                   F.max("store_timestamp").alias("last_store_time"),
                   F.min("queue_offset").alias("min_queue_offset"),
                   F.max("queue_offset").alias("max_queue_offset"),
                   F.max("commitlog_offset").alias("max_commitlog_offset"))
              .orderBy("broker", "topic", "queue_id"))


# -- export --------------------------------------------------------------------------------------------------------

def export(spark, stores, out: str, mode: str = "errorifexists", schema=None, progress: float | None = 5.0,
           **options) -> str:
    """Write the messages of ``stores`` as Parquet under ``out``, partitioned by ``topic`` and ``date`` (the
    UTC date of store_timestamp, independent of the session time zone). Timestamps are written as Parquet
    TIMESTAMP(MICROS, isAdjustedToUTC=true), not Spark's default, the deprecated INT96."""
    from pyspark.sql import functions as F
    df = read_stores(spark, stores, schema, **options)
    day = F.date_from_unix_date(F.floor(F.unix_micros("store_timestamp") / F.lit(86_400_000_000)).cast("int"))
    key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "TIMESTAMP_MICROS")
    try:
        with Progress(spark, "export", "splits", progress):
            df.withColumn("date", day).write.partitionBy("topic", "date").mode(mode).parquet(out)
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)
    return out


# -- rebuild -------------------------------------------------------------------------------------------------------

def source_geometry(src_root: str) -> dict:
    """The file geometry of a store, read from its files: commitlog and consume-queue file sizes, index hash
    slots and items (``layout.index_geometry``). Keys are StoreConfig fields; missing files leave keys out."""
    from ..index_service import is_index_file_name
    from .layout import index_geometry
    geo = {}
    segs = list_segments(src_root)
    if segs:
        geo["mapped_file_size_commit_log"] = os.path.getsize(segs[0])
    cq = os.path.join(src_root, "consumequeue")
    for topic in sorted(os.listdir(cq)) if os.path.isdir(cq) else []:
        for qid in sorted(os.listdir(os.path.join(cq, topic))):
            names = sorted(os.listdir(os.path.join(cq, topic, qid)))
            if names:
                geo["mapped_file_size_consume_queue"] = os.path.getsize(os.path.join(cq, topic, qid, names[0]))
                break
        if "mapped_file_size_consume_queue" in geo:
            break
    idx = os.path.join(src_root, "index")
    names = sorted(n for n in os.listdir(idx) if is_index_file_name(n)) if os.path.isdir(idx) else []
    if names:
        geo["max_hash_slot_num"], geo["max_index_num"] = index_geometry(os.path.join(idx, names[0]))
    return geo


def rebuild_store(src_root: str, out_root: str, config=None, geometry: dict | None = None) -> dict:
    """Consume queues and index files of the store at ``src_root`` rebuilt from its commitlog into
    ``out_root/consumequeue`` and ``out_root/index``, by rmqcore's own dispatch path: ReputMessageService scans
    the commitlog and MessageStore._apply_dispatch appends consume-queue units and index keys, as a live store
    does. The source is only read (commitlog mapped read-only). File sizes and index slots/items are the
    source's (``source_geometry``) over ``config``'s; ``geometry`` (StoreConfig field -> value) overrides both."""
    from ..commit_log import CommitLog
    from ..config import StoreConfig
    from ..dispatch import ReputMessageService
    from ..index_service import IndexService
    from ..store import MessageStore

    cfg = (config or StoreConfig()).replace(**dict(source_geometry(src_root), **(geometry or {})))
    for sub in ("consumequeue", "index"):
        d = os.path.join(out_root, sub)
        if os.path.exists(d) and os.listdir(d):
            raise FileExistsError(f"{d} is not empty")
        os.makedirs(d, exist_ok=True)
    target = MessageStore(out_root, cfg)          # the facade only: no lock, no services, no commitlog of its own
    target.commit_log = CommitLog(os.path.join(src_root, "commitlog"), cfg, read_only=True)
    target.commit_log.load()
    target.index_service = IndexService(os.path.join(out_root, "index"), cfg.max_hash_slot_num, cfg.max_index_num)
    reput = ReputMessageService(target, target.commit_log.min_offset)
    try:
        while reput.do_reput():
            pass
        for cq in target._all_consume_queues():
            cq.flush(0)
        return {"src": src_root, "out": out_root, "records": reput.dispatched, "error": reput.last_error,
                "queues": sorted(f"{cq.topic}/{cq.queue_id}" for cq in target._all_consume_queues()),
                "index_files": len(target.index_service.index_file_list)}
    finally:
        for cq in target._all_consume_queues():
            cq.close()
        target.index_service.shutdown()
        target.commit_log.mapped_file_queue.shutdown()


def rebuild(spark, stores, out: str, config=None, geometry: dict | None = None,
            progress: float | None = 5.0) -> list[dict]:
    """Rebuild every store's consume queues and index into ``out/{broker}/`` (one Spark task per store: a
    store's queues and index follow one commitlog order, so the store is the unit of parallelism). Geometry as
    in ``rebuild_store``; progress (stores done, records/s) printed on the driver."""
    pairs = normalize_stores(stores)
    for b, r in pairs:
        if not fs.is_local(r):
            raise ValueError(f"rebuild: {fs.display(r)} is not on a local filesystem (rebuild maps the commitlog)")
        check_not_live(b, r)       # a moving commitlog would give queues that end anywhere
    tasks = [(b, r, os.path.join(os.path.abspath(out), b)) for b, r in pairs]
    cfg, geo = config, geometry
    with Progress(spark, "rebuild", "stores", progress) as prog:
        records = prog.records

        def run(t):
            rep = dict(rebuild_store(t[1], t[2], cfg, geo), broker=t[0])
            records.add(rep["records"])
            return rep
        return spark.sparkContext.parallelize(tasks, max(1, len(tasks))).map(run).collect()
