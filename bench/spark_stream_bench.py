"""Speed of the streaming source (rmqcore.spark.stream), issue 39's aims:

* catch-up: a streaming query (Trigger.AvailableNow, maxMessagesPerTrigger = a quarter of the backlog) draining a
  backlog into Spark's noop sink, against the batch source reading the same store into the same sink (rows/s,
  wall clock; aim: streaming >= 0.8x batch);
* planning: latestOffset + partitions over many queues, as Spark's planning worker calls them between
  micro-batches, a few new messages in every queue each round (ms per micro-batch; aim <= 50 ms for 1,000 queues);
* freshness: a producer process at a steady rate, a processing-time trigger of 0, per message the time from its
  store time to its row reaching foreachBatch (p50/p99; aim p50 <= 1.5 s, p99 <= 3 s at 5,000 msg/s), after a
  warm-up at the same rate whose rows are not counted (the query's first micro-batches start the JVM's code
  paths and the Python workers: a cost once per query, not freshness), with the micro-batches' median phases.

    python bench/spark_stream_bench.py [--messages 400000] [--body 256] [--queues 1000] [--rate 5000]
                                       [--seconds 10] [--only catch-up|freshness|planning] [--no-spark]

Prints rows for bench/README. Single runs: read the ratios to about +-20 %.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rmqcore import Message, StoreConfig  # noqa: E402
from rmqcore.store import MessageStore  # noqa: E402


def build_store(path, n, body, topics=8, queues=4):
    cfg = StoreConfig(mapped_file_size_commit_log=64 << 20, warm_mapped_file_enable=False)
    payload = os.urandom(body)
    with MessageStore.open(path, cfg) as st:
        batch = []
        for i in range(n):
            batch.append(Message(f"topic-{i % topics}", payload, (i // topics) % queues, keys=[f"k{i}"]))
            if len(batch) == 1000:
                st.put_batch(batch)
                batch = []
        if batch:
            st.put_batch(batch)
        st.wait_dispatched(120)


def bench_planning(tmp, queues, rounds=20):
    from rmqcore.spark.schema import spark_schema
    from rmqcore.spark.stream import RocketMQStreamReader, StreamOptions
    path = os.path.join(tmp, "many-queues")
    topics = max(1, queues // 8)
    cfg = StoreConfig(mapped_file_size_commit_log=64 << 20, warm_mapped_file_enable=False)
    st = MessageStore.open(path, cfg)
    try:
        def put_round():
            st.put_batch([Message(f"t{t}", b"x" * 64, q) for t in range(topics) for q in range(8)])
            st.wait_dispatched(60)
        put_round()
        r = RocketMQStreamReader(StreamOptions.parse({"path": path, "startingOffsets": "earliest",
                                                      "maxMessagesPerTrigger": str(queues * 4)}), spark_schema())
        t0 = time.perf_counter()
        start = r.initialOffset()
        end = r.latestOffset(start, r.getDefaultReadLimit())
        r.partitions(start, end)
        cold = time.perf_counter() - t0
        times = []
        for _ in range(rounds):
            start = end
            put_round()
            t0 = time.perf_counter()
            end = r.latestOffset(start, r.getDefaultReadLimit())
            parts = r.partitions(start, end)
            times.append(time.perf_counter() - t0)
        assert sum(len(t.ranges) for t in parts) == topics * 8
        print(f"planning over {topics * 8} queues: first micro-batch {cold * 1000:.0f} ms, then median "
              f"{statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms (latestOffset + partitions)")
    finally:
        st.close()


def _session():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2]").appName("stream-bench").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    return s


def _tree_cpu(spark) -> float:
    """CPU seconds so far of this process and Spark's whole process tree (the JVM, its Python daemon, workers and
    planning workers; exited ones through their parent's children times): a measure the other jobs on a shared
    machine do not inflate, unlike the wall clock."""
    tick = os.sysconf("SC_CLK_TCK")
    kids: dict = {}
    stats: dict = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(d)] = fields
        kids.setdefault(int(fields[1]), []).append(int(d))
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        f = stats.get(pid)
        if f is None:
            continue
        total += sum(int(x) for x in f[11:15]) / tick      # utime stime cutime cstime
        todo.extend(kids.get(pid, ()))
    return total


def bench_catch_up(spark, tmp, n, body):
    path = os.path.join(tmp, "broker-a")
    build_store(path, n, body)
    cols = ["topic", "queue_id", "queue_offset", "body"]
    # warm: the first query of a session pays for Python workers
    spark.read.format("rocketmq-store").load(path).select(*cols).limit(10).collect()
    t0, c0 = time.perf_counter(), _tree_cpu(spark)
    spark.read.format("rocketmq-store").load(path).select(*cols).write.format("noop").mode("overwrite").save()
    batch_s, batch_cpu = time.perf_counter() - t0, _tree_cpu(spark) - c0
    ck = os.path.join(tmp, "ck")
    t0, c0 = time.perf_counter(), _tree_cpu(spark)
    q = (spark.readStream.format("rocketmq-store").option("startingOffsets", "earliest")
         .option("maxMessagesPerTrigger", str(n // 4)).load(path).select(*cols)
         .writeStream.format("noop").option("checkpointLocation", ck).trigger(availableNow=True).start())
    q.awaitTermination()
    stream_s, stream_cpu = time.perf_counter() - t0, _tree_cpu(spark) - c0
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    assert rows == n, rows
    for p in q.recentProgress:
        d = p["durationMs"]
        print(f"  micro-batch {p['batchId']}: {p['numInputRows']} rows, " + ", ".join(
            f"{k} {v} ms" for k, v in sorted(d.items()) if v))
    print(f"catch-up of {n} messages ({body} B bodies, 32 queues): batch {n / batch_s:,.0f} rows/s, "
          f"stream ({len(q.recentProgress)} micro-batches of <= {n // 4}) {n / stream_s:,.0f} rows/s: "
          f"{batch_s / stream_s:.2f}x; per CPU-second (process tree) batch {n / batch_cpu:,.0f}, stream "
          f"{n / stream_cpu:,.0f} rows: {batch_cpu / stream_cpu:.2f}x")


PRODUCER = r"""
import sys, time
sys.path.insert(0, sys.argv[4])
from rmqcore import Message, StoreConfig
from rmqcore.store import MessageStore
rate, seconds = int(sys.argv[2]), float(sys.argv[3])
with MessageStore.open(sys.argv[1], StoreConfig(warm_mapped_file_enable=False)) as st:
    t0, sent = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        due = int((time.monotonic() - t0) * rate)
        if due > sent:
            st.put_batch([Message("fresh", b"x" * 256, i % 4) for i in range(sent, due)])
            sent = due
        time.sleep(0.002)
    st.wait_dispatched()
print(sent)
"""


def _iso_s(ts: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def bench_freshness(spark, tmp, rate, seconds, warmup=5.0):
    """Latency from store time to foreachBatch, once the query is warm: the first micro-batches pay for the JVM's
    code paths and the Python workers' start (seconds, once per query), which is not freshness. The query
    starts, a warm-up producer writes for ``warmup`` seconds at the same rate, the bench waits until its rows
    are all through (they are not counted), then the measured producer runs."""
    path = os.path.join(tmp, "fresh")
    with MessageStore.open(path, StoreConfig(warm_mapped_file_enable=False)) as st:
        st.put(Message("init", b"x", 0))          # the store's directories exist before the query starts
    seen = []                                     # (time the batch reached foreachBatch, store times)

    def fb(df, bid):
        ts = [r.store_timestamp.timestamp() for r in df.select("store_timestamp").collect()]
        seen.append((time.time(), ts))
    q = (spark.readStream.format("rocketmq-store").option("startingOffsets", "latest").option("topics", "fresh")
         .load(path)
         .writeStream.foreachBatch(fb).option("checkpointLocation", os.path.join(tmp, "ck-fresh"))
         .trigger(processingTime="0 seconds").start())
    warm = subprocess.run([sys.executable, "-c", PRODUCER, path, str(rate), str(warmup), ROOT], check=True,
                          capture_output=True, text=True)
    warm_sent, deadline = int(warm.stdout.strip()), time.monotonic() + 120
    while sum(len(ts) for _, ts in list(seen)) < warm_sent and time.monotonic() < deadline:
        time.sleep(0.1)                           # every warm-up row through: the query is warm
    warm_batches = len(q.recentProgress)
    t_prod = time.time()                          # rows stored from here on are measured
    c0 = _tree_cpu(spark)
    import resource
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    prod = subprocess.run([sys.executable, "-c", PRODUCER, path, str(rate), str(seconds), ROOT], check=True,
                          capture_output=True, text=True)
    sent = int(prod.stdout.strip())
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    producer_cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    deadline = time.monotonic() + 60

    def measured():
        return [now - t for now, ts in list(seen) for t in ts if t >= t_prod]
    while len(measured()) < sent and time.monotonic() < deadline:
        time.sleep(0.2)
    cpu = _tree_cpu(spark) - c0 - producer_cpu
    wall = time.time() - t_prod
    q.stop()
    lags = measured()
    progress = [p for p in q.recentProgress[warm_batches:] if p["numInputRows"]]
    lags.sort()
    p = lambda f: lags[min(len(lags) - 1, int(f * len(lags)))]  # noqa: E731
    print(f"freshness at {rate} msg/s for {seconds:.0f} s after a {warmup:.0f} s warm-up ({len(lags)} of {sent} rows "
          f"seen): store -> foreachBatch p50 {p(0.5):.2f} s, p99 {p(0.99):.2f} s, max {lags[-1]:.2f} s")
    if progress:
        keys = sorted({k for pr in progress for k in pr["durationMs"]})
        med = {k: statistics.median(pr["durationMs"].get(k, 0) for pr in progress) for k in keys}
        print(f"  {len(progress)} micro-batches with rows in {wall:.0f} s ({cpu:.1f} CPU-s of the Spark process "
              f"tree, {cpu / len(progress):.2f} a micro-batch, the producer's {producer_cpu:.1f} not included), median "
              f"{statistics.median(pr['numInputRows'] for pr in progress):.0f} rows; median ms: "
              + ", ".join(f"{k} {v:.0f}" for k, v in med.items() if v))
        print("  micro-batches (start s, rows, ms): " + ", ".join(
            f"{_iso_s(pr['timestamp']) - t_prod:.1f}/{pr['numInputRows']}/{pr['durationMs'].get('triggerExecution', 0)}"
            for pr in progress))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=400_000)
    ap.add_argument("--body", type=int, default=256)
    ap.add_argument("--queues", type=int, default=1000)
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--only", choices=["catch-up", "freshness", "planning"])
    ap.add_argument("--no-spark", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rmq-stream-bench-")
    want = lambda name: a.only in (None, name)  # noqa: E731
    try:
        if want("planning"):
            bench_planning(tmp, a.queues)
        if not a.no_spark and a.only != "planning":
            spark = _session()
            if want("catch-up"):
                bench_catch_up(spark, tmp, a.messages, a.body)
            if want("freshness"):
                bench_freshness(spark, tmp, a.rate, a.seconds)
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
