"""Speed of rmqcore.spark: the Cython segment decoder alone (into Arrow) and the data source on local[2].

    python bench/spark_bench.py [--messages 200000] [--body 1024]

Prints rows for bench/README: decoder GB/s and records/s (1 KiB bodies, all columns, into pyarrow batches),
and Spark rows/s for count() and groupBy(topic).count() (warm, second run of each), next to spark.md's toy
ceiling (0.64 M rows/s for count with 1 KiB bodies on local[2]).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rmqcore import Message, StoreConfig  # noqa: E402
from rmqcore.store import MessageStore  # noqa: E402


def build_store(path, n, body):
    cfg = StoreConfig(mapped_file_size_commit_log=64 << 20, warm_mapped_file_enable=False)
    payload = os.urandom(body)
    with MessageStore.open(path, cfg) as st:
        batch = []
        for i in range(n):
            batch.append(Message(f"topic-{i % 8}", payload, i % 4, tags=f"t{i % 3}", keys=[f"k{i}"]))
            if len(batch) == 1000:
                st.put_batch(batch)
                batch = []
        if batch:
            st.put_batch(batch)
        st.wait_dispatched(120)


def bench_decoder(path):
    from rmqcore.spark.arrow import SegmentRead, iter_segment_batches
    from rmqcore.spark.schema import COLUMN_NAMES
    segs = sorted(os.listdir(os.path.join(path, "commitlog")))
    fields = [(c, True) for c in COLUMN_NAMES]
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        rows = nbytes = 0
        for s in segs:
            for b in iter_segment_batches(SegmentRead(os.path.join(path, "commitlog", s), "b"), fields):
                rows += b.num_rows
                nbytes += sum(b.column("store_size").to_numpy())
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return rows, nbytes, best


# spark.md's ceiling was measured with these 7 message-shaped columns.
TOY_SHAPE = ("topic STRING, queue_id INT, queue_offset BIGINT, commitlog_offset BIGINT, store_timestamp TIMESTAMP, "
             "tags STRING, body BINARY")


def bench_spark(path):
    from rmqcore.spark import session
    spark = session("local[2]", "rmqcore-bench", conf={"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    out = {}
    try:
        full = spark.read.format("rocketmq-store").load(path)
        toy = spark.read.format("rocketmq-store").schema(TOY_SHAPE).load(path)
        for name, fn in (("all 22 columns, count()", lambda: full.count()),
                         ("all 22 columns, groupBy(topic).count()", lambda: full.groupBy("topic").count().collect()),
                         ("spark.md's 7 columns, count()", lambda: toy.count()),
                         ("spark.md's 7 columns, groupBy(topic).count()",
                          lambda: toy.groupBy("topic").count().collect())):
            fn()                                 # cold run: worker start-up, planning
            t0 = time.perf_counter()
            fn()
            out[name] = time.perf_counter() - t0
        n = full.count()
    finally:
        spark.stop()
    return n, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--no-spark", action="store_true")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="rmq-spark-bench-")
    try:
        root = os.path.join(d, "broker-a")
        build_store(root, a.messages, a.body)
        rows, nbytes, dt = bench_decoder(root)
        print(f"| Cython segment decoder → Arrow (1 core, all 22 columns, {a.body} B bodies) | "
              f"{nbytes / dt / 1e9:.2f} GB/s | {rows / dt / 1e6:.2f} M records/s |")
        if not a.no_spark:
            n, res = bench_spark(root)
            for name, t in res.items():
                print(f"| rocketmq-store on Spark local[2], {name}, warm, {n} rows | {n / t / 1e6:.2f} M rows/s "
                      f"| toy ceiling (spark.md 1.4): 0.64 M rows/s count, 0.62 M rows/s groupBy |")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
