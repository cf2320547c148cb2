"""``python -m rmqcore.spark JOB STORE... [options]``: verify, stats, export, rebuild on Spark.

STORE is ``PATH`` (broker = the directory name) or ``BROKER=PATH``. ``--master`` defaults to ``local[*]``.
"""
from __future__ import annotations

import argparse
import json
import re
import sys

# The errors a user can act on (a path that is no store, a live store, a bad option, a damaged file): one line on
# stderr, exit status 2. Anything else is a bug and keeps its traceback.
_USER_ERRORS = ("FileNotFoundError", "NotADirectoryError", "PermissionError", "IsADirectoryError", "OSError",
                "ValueError", "StoreInUseError", "CorruptSegmentError", "CorruptRecordError", "StoreLayoutError")


def _one_line(e: BaseException) -> str | None:
    """The message of a user error, also from inside a Spark exception (a data source's error, raised in a Python
    worker, reaches the driver as text: its last "Name: message" line); None for anything else."""
    if type(e).__name__ in _USER_ERRORS or isinstance(e, (OSError, ValueError)):
        return str(e)
    try:
        from pyspark.errors import PySparkException
    except ImportError:
        return None
    if not isinstance(e, PySparkException):
        return None
    inner = []
    for line in str(e).splitlines():
        # "rmqcore.spark.layout.StoreInUseError: ...", alone on a line (a traceback's last) or after Spark's prefix
        for m in re.finditer(r"(?:\w+\.)*(\w+): ", line):
            if m.group(1) in _USER_ERRORS:
                inner.append(line[m.end():].split(" SQLSTATE: ")[0].strip())
                break
    return inner[-1] if inner else None


def _stores(specs):
    out = []
    for s in specs:
        broker, sep, path = s.partition("=")
        out.append((broker, path) if sep else s)
    from .jobs import normalize_stores
    return normalize_stores(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m rmqcore.spark", description=__doc__.splitlines()[0])
    p.add_argument("--master", default="local[*]")
    sub = p.add_subparsers(dest="job", required=True)
    v = sub.add_parser("verify", help="check every record's structure and CRC; exit 1 when any is bad")
    v.add_argument("stores", nargs="+")
    v.add_argument("--no-crc", action="store_true", help="structure only")
    v.add_argument("--json", action="store_true", help="print the whole report as JSON")
    s = sub.add_parser("stats", help="per broker/topic/queue: messages, bytes, time range, max offsets")
    s.add_argument("stores", nargs="+")
    s.add_argument("--json", action="store_true")
    e = sub.add_parser("export", help="to Parquet, partitioned by topic and UTC date")
    e.add_argument("out")
    e.add_argument("stores", nargs="+")
    e.add_argument("--mode", default="errorifexists", choices=["errorifexists", "overwrite", "append", "ignore"])
    e.add_argument("--topics")
    e.add_argument("--start", help="store time from (ms or ISO 8601)")
    e.add_argument("--end", help="store time before (ms or ISO 8601)")
    r = sub.add_parser("rebuild", help="consume queues and index rebuilt from the commitlog into OUT/BROKER/")
    r.add_argument("out")
    r.add_argument("stores", nargs="+")
    r.add_argument("--cq-file-size", type=int, help="consume-queue file size in bytes (default: the source's)")
    r.add_argument("--index-hash-slots", type=int, help="index hash slots (default: the source's)")
    r.add_argument("--index-num", type=int, help="index items per file (default: the source's)")
    for sp in (v, s, e):
        sp.add_argument("--snapshot", action="store_true",
                        help="read stores open by a broker (or with an abort file) up to the end of data now")
    a = p.parse_args(argv)
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as e:
        from ..admin_views import EXIT_ERROR, missing_extra
        print(f"{p.prog}: error: {missing_extra(p.prog, 'spark', e)}", file=sys.stderr)
        return EXIT_ERROR
    try:
        return _run(a)
    except Exception as e:
        msg = _one_line(e)
        if msg is None:
            raise
        print(f"{p.prog} {a.job}: error: {msg}", file=sys.stderr)
        return 2


def _run(a: argparse.Namespace) -> int:
    live = "snapshot" if getattr(a, "snapshot", False) else "fail"
    stores = _stores(a.stores)
    if live == "fail":
        # Refused here, before a JVM starts, with the same words the data source would use.
        from .layout import check_not_live
        for broker, root in stores:
            check_not_live(broker, root)

    from pyspark.sql import SparkSession

    from . import jobs, register, session
    existing = SparkSession.getActiveSession()
    if existing is not None:
        spark = existing            # called from a running application: use its session, leave it running
        register(spark)
    else:
        spark = session(a.master, f"rmqcore {a.job}")
    try:
        if a.job == "verify":
            rep = jobs.verify(spark, stores, check_crc=not a.no_crc, on_live=live)
            if a.json:
                print(json.dumps(rep, indent=2, default=str))
            else:
                print(f"{rep['segments']} segments, {rep['records']} records, {rep['bytes']} bytes: "
                      f"{'OK' if rep['ok'] else str(len(rep['bad'])) + ' problem(s)'}")
                for b in rep["bad"]:
                    print(f"  {b['broker']} {b['file']} offset {b['offset']} {b['field']}: {b['message']}")
            return 0 if rep["ok"] else 1
        if a.job == "stats":
            with jobs.Progress(spark, "stats", "splits"):
                rows = [r.asDict() for r in jobs.stats(spark, stores, onLiveStore=live).collect()]
            if a.json:
                print(json.dumps(rows, indent=2, default=str))
            else:
                for row in rows:
                    print("  ".join(f"{k}={v}" for k, v in row.items()))
            return 0
        if a.job == "export":
            jobs.export(spark, stores, a.out, a.mode, topics=a.topics, startTime=a.start, endTime=a.end,
                        onLiveStore=live)
            print(a.out)
            return 0
        if a.job == "rebuild":
            changes = {k: v for k, v in (("mapped_file_size_consume_queue", a.cq_file_size),
                                         ("max_hash_slot_num", a.index_hash_slots),
                                         ("max_index_num", a.index_num)) if v is not None}
            for rep in jobs.rebuild(spark, stores, a.out, geometry=changes):
                print(json.dumps(rep, default=str))
            return 0
        raise AssertionError(a.job)
    finally:
        if existing is None:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
