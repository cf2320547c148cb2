"""Timed delivery and transactions: delayed delivery rate, end_transaction rate, check pass time.

    python bench/schedule_bench.py [--delayed N] [--tx N] [--halves N] [--timer N --spread S] [--only-timer]

Rows (best of ``--repeat`` runs, each on a fresh store; ASYNC_FLUSH, 1 KiB bodies):
- delayed delivery: N messages already in SCHEDULE_TOPIC_XXXX level 1, all due; the time ScheduleMessageService
  takes to re-put them all in their real queues (one deliver_due() call), against put_batch of the same messages
  from Message objects (delivery reads, rebuilds and re-puts each message, but rebuilds it in C from its record);
- end_transaction: N half messages, then commit each one (real message + op record: two puts per call), against
  store.put of one message (the per-put floor);
- check pass: N half messages, none ended, all older than transaction_timeout; one check_once() that puts each
  back and commits it through the checker (three puts per half);
- timer wheel: N messages with TIMER_DELIVER_MS spread evenly over S seconds, put ahead of time through the
  store (timer_wheel_enable); lateness = delivered record's store time - asked time (p50 / p99 / max, ms): when
  the wheel appended it (the writer stamps the store time at append). A consumer thread polling the 8 queues
  (a pass every 2 ms, as a long-polling consumer would be woken) also records, for each message, the wall time it
  first read it - asked time: the readable lateness, which adds the dispatcher's lag (consume-queue unit written)
  and the poll interval.
The defaults are scaled down from the issue's 1,000,000 halves and 1,000,000 timed messages over a minute for the
shared 2-core machine (limits.md).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from rmqcore import Message, MessageStore, StoreConfig  # noqa: E402
from rmqcore.broker.transaction import TransactionalMessageService  # noqa: E402
from rmqcore.schedule import ScheduleMessageService, rewrite_delay  # noqa: E402
from rmqcore.timer import rewrite_timer  # noqa: E402

BODY = b"x" * 1024


def config():
    return StoreConfig(message_delay_level="1s", schedule_message_service_enable=False,
                       mapped_file_size_commit_log=256 * 1024 * 1024)


def fresh(parent):
    return tempfile.mkdtemp(prefix="rmq-sched-bench-", dir=parent)


def delayed(parent, n):
    path = fresh(parent)
    try:
        with MessageStore.open(path, config()) as store:
            msgs = []
            for i in range(n):
                m = Message("Real", BODY, i % 8, tags="TagA", keys=[f"k{i}"], properties={"DELAY": "1"})
                rewrite_delay(m, 1)
                msgs.append(m)
            for s in range(0, n, 4096):
                store.put_batch(msgs[s:s + 4096])
            store.wait_dispatched(120)
            svc = ScheduleMessageService(store, clock=lambda: time.time_ns() // 1_000_000 + 2000)
            svc.load()
            t = time.perf_counter()
            done = svc.deliver_due()
            dt = time.perf_counter() - t
            assert done == n, (done, n)
            plain = [Message("Plain", BODY, i % 8, tags="TagA", keys=[f"k{i}"],
                             properties={"REAL_TOPIC": "Real", "REAL_QID": "1"}) for i in range(n)]
            t = time.perf_counter()
            for s in range(0, n, 8192):
                store.put_batch(plain[s:s + 8192])
            ceiling = time.perf_counter() - t
        return n / dt, n / ceiling
    finally:
        shutil.rmtree(path, ignore_errors=True)


def end_transaction(parent, n):
    path = fresh(parent)
    try:
        with MessageStore.open(path, config()) as store:
            tx = TransactionalMessageService(store)
            halves = [tx.prepare(Message("Pay", BODY, i % 8, properties={"PGROUP": "pg"})).commitlog_offset
                      for i in range(n)]
            t = time.perf_counter()
            for off in halves:
                tx.end_transaction(off, "pg", True)
            dt = time.perf_counter() - t
            t = time.perf_counter()
            for i in range(n):
                store.put(Message("Plain", BODY, i % 8))
            floor = time.perf_counter() - t
        return n / dt, n / floor
    finally:
        shutil.rmtree(path, ignore_errors=True)


def check_pass(parent, n):
    path = fresh(parent)
    try:
        with MessageStore.open(path, config()) as store:
            tx = TransactionalMessageService(store, checker=lambda m: True,
                                             clock=lambda: time.time_ns() // 1_000_000 + 60_000)
            for i in range(n):
                tx.prepare(Message("Pay", BODY, i % 8, properties={"PGROUP": "pg"}))
            store.wait_dispatched(120)
            t = time.perf_counter()
            counts = tx.check_once()
            dt = time.perf_counter() - t
            assert counts["committed"] == n, counts
        return dt
    finally:
        shutil.rmtree(path, ignore_errors=True)


def timer_wheel(parent, n, spread_s):
    path = fresh(parent)
    try:
        cfg = StoreConfig(schedule_message_service_enable=False, mapped_file_size_commit_log=256 * 1024 * 1024)
        with MessageStore.open(path, cfg) as store:
            now = time.time_ns() // 1_000_000
            first = now + max(2000, n * 30 // 1000)  # time to put them all before the first is due
            step = spread_s * 1000 / n
            msgs = []
            for i in range(n):
                m = Message("Timed", BODY[:128], i % 8,
                            properties={"TIMER_DELIVER_MS": str(first + int(i * step))})
                rewrite_timer(m, now)
                msgs.append(m)
            for s in range(0, n, 4096):
                store.put_batch(msgs[s:s + 4096])
            readable, stop = [], threading.Event()

            def consume():
                offsets = [0] * 8
                while not stop.is_set():
                    for q in range(8):
                        while True:
                            g = store.get_messages("r", "Timed", q, offsets[q], 256)
                            if not g.messages:
                                break
                            now_ms = time.time_ns() // 1_000_000
                            readable.extend(now_ms - int(m.properties["TIMER_OUT_MS"]) for m in g.messages)
                            offsets[q] = g.next_begin_offset
                    time.sleep(0.002)

            consumer = threading.Thread(target=consume, daemon=True)
            consumer.start()
            deadline = time.monotonic() + spread_s + 30
            while time.monotonic() < deadline and store.timer_service.delivered < n:
                time.sleep(0.2)
            store.wait_dispatched(60)
            while len(readable) < n and time.monotonic() < deadline:
                time.sleep(0.05)
            stop.set()
            consumer.join()
            late = []
            for q in range(8):
                off = 0
                while True:
                    g = store.get_messages("b", "Timed", q, off, 32)
                    if not g.messages:
                        break
                    late += [m.store_timestamp - int(m.properties["TIMER_OUT_MS"]) for m in g.messages]
                    off = g.next_begin_offset
        late.sort()
        readable.sort()
        assert len(late) == n == len(readable), (len(late), len(readable), n)
        return late[n // 2], late[int(n * 0.99)], late[-1], late[0], readable[int(n * 0.99)], readable[-1]
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delayed", type=int, default=200_000)
    ap.add_argument("--tx", type=int, default=20_000)
    ap.add_argument("--halves", type=int, default=100_000)
    ap.add_argument("--timer", type=int, default=100_000)
    ap.add_argument("--spread", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--only-timer", action="store_true", help="the timer wheel row only")
    a = ap.parse_args(argv)
    rows = []
    if not a.only_timer:
        best = max((delayed(a.dir, a.delayed) for _ in range(a.repeat)), key=lambda r: r[0])
        rows.append((f"delayed delivery, {a.delayed:,} due, 1 KiB", f"{best[0]:,.0f} msg/s",
                     f"put_batch of the same {best[1]:,.0f} msg/s ({best[0] / best[1]:.2f}x)"))
        best = max((end_transaction(a.dir, a.tx) for _ in range(a.repeat)), key=lambda r: r[0])
        rows.append((f"end_transaction commit, {a.tx:,}, 1 KiB", f"{best[0]:,.0f} ends/s",
                     f"store.put {best[1]:,.0f} msg/s ({best[0] / best[1]:.2f}x; an end is 2 puts)"))
        dt = min(check_pass(a.dir, a.halves) for _ in range(a.repeat))
        rows.append((f"check pass, {a.halves:,} open halves", f"{dt:.2f} s",
                     f"{a.halves / dt:,.0f} halves/s (each: put back + commit + op)"))
    p50, p99, mx, mn, r99, rmx = timer_wheel(a.dir, a.timer, a.spread)
    rows.append((f"timer wheel, {a.timer:,} over {a.spread} s", f"late p50 {p50} / p99 {p99} / max {mx} ms",
                 f"aim: within 100 ms; earliest {mn} ms (never early); readable p99 {r99} / max {rmx} ms"))
    print("| case | rmqcore | reference |")
    print("|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
