"""The broker layer's costs: offset commits per second, persisting consumerOffset.json for 10,000 groups x 16
queues, and the Broker facade's send against MessageStore.put (issue 14's aim: < 10 % overhead per message).

    python bench/broker_bench.py [--messages N] [--body-sizes 256,4096] [--groups G] [--queues Q]

Prints one markdown table. Single run on a shared machine: read figures to about +-30 %, ratios measured in the
same run are steadier (the send comparison pairs both paths round by round on one store for that reason, and
reads its overhead from the calling thread's CPU time).
"""
from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from rmqcore import Message, StoreConfig  # noqa: E402
from rmqcore.broker import Broker, BrokerConfig, ConsumerOffsetManager  # noqa: E402


def bench_commits(broker, n: int) -> tuple[float, float]:
    """(ConsumerOffsetManager.commit_offset per second, Broker.commit_offset per second, with its checks)."""
    com = broker.consumer_offset_manager
    t0 = time.perf_counter()
    for i in range(n):
        com.commit_offset("bench-group", "bench-commits", i & 3, i)
    raw = n / (time.perf_counter() - t0)
    limit = broker.store.max_offset("bench-commits", 0)
    t0 = time.perf_counter()
    for i in range(n):
        broker.commit_offset("bench-group", "bench-commits", 0, i % limit)
    checked = n / (time.perf_counter() - t0)
    return raw, checked


def bench_persist(root: str, groups: int, queues: int) -> dict:
    com = ConsumerOffsetManager(root)
    for g in range(groups):
        group = f"group-{g:05d}"
        for q in range(queues):
            com.commit_offset(group, f"topic-{g % 100:03d}", q, 1_000_000 + g * queues + q)
    t0 = time.perf_counter()
    text = com.encode(pretty=True)
    encode_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    com.persist()
    persist_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    com.persist()                               # the second one also links the .bak
    persist2_s = time.perf_counter() - t0
    again = ConsumerOffsetManager(root)
    t0 = time.perf_counter()
    again.load()
    load_s = time.perf_counter() - t0
    assert again.offset_table == com.offset_table
    # A commit while a persist runs waits at most for the snapshot (the copy under the lock), not the write.
    return {"encode_s": encode_s, "persist_s": min(persist_s, persist2_s), "load_s": load_s,
            "bytes": len(text.encode()), "entries": groups * queues}


def _timed(fn, messages) -> tuple[float, float]:
    """(wall seconds, seconds of this thread's CPU) per message of ``fn(messages)``, the cyclic GC paused."""
    gc.collect()
    gc.disable()
    try:
        t0, c0 = time.perf_counter(), time.thread_time()
        fn(messages)
        c1, t1 = time.thread_time(), time.perf_counter()
    finally:
        gc.enable()
    return (t1 - t0) / len(messages), (c1 - c0) / len(messages)


PAIRS = (("put", "send"), ("put_batch", "send_batch"))


def bench_send(broker, messages: int, body_size: int, rounds: int = 20) -> dict:
    """MessageStore.put / Broker.send one by one and put_batch / send_batch (batches of 64), on one store.

    Each round times both sides of a pair back to back, in an order that alternates round by round, after the
    dispatcher has caught up (so it does not steal the GIL from one side only). Returned: per path the best
    round's wall seconds per message, and per pair the facade's overhead as the median over the rounds of the
    paired ratio, of the calling thread's CPU time ("cpu", what the facade adds: it waits on nothing) and of wall
    time ("wall"). Paired ratios cancel the machine's slow swings; the median drops the rounds another process
    disturbed; thread CPU time leaves out the time the thread was not running at all."""
    store = broker.store
    body = os.urandom(body_size)
    broker.create_topic("bench-put", queue_nums=4)
    broker.create_topic("bench-send", queue_nums=4)
    per = max(64, messages // rounds // 64 * 64)

    def one_by_one(fn):
        def run(msgs):
            for m in msgs:
                fn(m)
        return run

    def batched(fn):
        def run(msgs):
            for i in range(0, len(msgs), 64):
                fn(msgs[i:i + 64])
        return run

    paths = {"put": ("bench-put", one_by_one(store.put)), "send": ("bench-send", one_by_one(broker.send)),
             "put_batch": ("bench-put", batched(store.put_batch)),
             "send_batch": ("bench-send", batched(broker.send_batch))}
    wall = {name: [] for name in paths}
    cpu = {name: [] for name in paths}
    for r in range(rounds):
        for pair in PAIRS:
            for name in (pair if r % 2 == 0 else pair[::-1]):
                topic, fn = paths[name]
                msgs = [Message(topic, body, i & 3, tags="t") for i in range(per)]
                store.wait_dispatched(60)
                w, c = _timed(fn, msgs)
                wall[name].append(w)
                cpu[name].append(c)
    out = {"best": {name: min(v) for name, v in wall.items()}, "rounds": rounds, "per_round": per}
    for kind, times in (("cpu", cpu), ("wall", wall)):
        out[kind] = {pair: statistics.median(f / p for p, f in zip(times[pair[0]], times[pair[1]])) - 1
                     for pair in PAIRS}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--body-sizes", default="256,4096", help="comma-separated body sizes for the send comparison")
    ap.add_argument("--commits", type=int, default=500_000)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--queues", type=int, default=16)
    args = ap.parse_args(argv)
    root = tempfile.mkdtemp(prefix="rmqcore-broker-bench-")
    try:
        store_config = StoreConfig(mapped_file_size_commit_log=256 * 1024 * 1024,
                                   mapped_file_size_consume_queue=300000 * 20,
                                   max_hash_slot_num=500_000, max_index_num=2_000_000)
        with Broker.open(os.path.join(root, "store"), BrokerConfig(broker_name="bench"),
                         store_config=store_config) as broker:
            sizes = [int(x) for x in args.body_sizes.split(",")]
            sends = [(size, bench_send(broker, args.messages, size)) for size in sizes]
            broker.create_topic("bench-commits", queue_nums=4)
            broker.store.put_batch([Message("bench-commits", b"x", q) for q in range(4) for _ in range(1000)])
            broker.store.wait_dispatched(60)
            raw, checked = bench_commits(broker, args.commits)
        p = bench_persist(os.path.join(root, "offsets"), args.groups, args.queues)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    r0 = sends[0][1]
    print(f"Send comparisons: {args.messages:,} messages per path and size ({r0['rounds']} rounds of "
          f"{r0['per_round']:,}), ASYNC_FLUSH, one store; Broker.send adds the CLUSTER property as RocketMQ does. "
          "us/msg: the best round's wall time; overhead: the median over the rounds of the paired ratio of the "
          "calling thread's CPU time (wall time's in brackets).")
    print()
    print("| broker operation | figure | note |")
    print("|---|---|---|")
    print(f"| offset commit (ConsumerOffsetManager) | {raw:,.0f}/s | {args.commits:,} commits, 4 queues |")
    print(f"| offset commit (Broker.commit_offset) | {checked:,.0f}/s | with group/topic/queue/max-offset checks |")
    print(f"| persist consumerOffset.json | {p['persist_s'] * 1000:,.1f} ms | {args.groups:,} groups x "
          f"{args.queues} queues ({p['entries']:,} offsets, {p['bytes'] / 1e6:.1f} MB), encode "
          f"{p['encode_s'] * 1000:,.1f} ms + write, fsync, .bak, rename |")
    print(f"| load consumerOffset.json | {p['load_s'] * 1000:,.1f} ms | same file, parsed and validated |")
    for size, t in sends:
        for pair in PAIRS:
            plain, facade = pair
            best = t["best"]
            print(f"| {plain} vs {facade}, {size} B | {best[plain] * 1e6:,.2f} vs {best[facade] * 1e6:,.2f} us/msg | "
                  f"facade overhead {t['cpu'][pair] * 100:+.1f} % of CPU ({t['wall'][pair] * 100:+.1f} % wall); "
                  "aim < 10 % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
