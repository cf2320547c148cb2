"""What the dispatcher (ReputMessageService) costs while a producer puts single messages at a steady pace, the way
`rmqcore serve` drives it: one put at a time, a few thousand a second, each pass of the dispatcher taking a handful
of records. The pass, not the record, is what costs there, so this reports per message and per pass.

    python bench/dispatch_bench.py [--rates 1000,4000] [--seconds 4] [--repeats 3]
    python -m bench --only reput

For each rate, two runs on a fresh ASYNC_FLUSH store (1 KiB bodies with a tag and a key, one queue):
- "no reader": the producer alone. The dispatcher thread's CPU per message (its own CPU clock,
  ``pthread_getcpuclockid``), its passes per second (``ReputMessageService.passes``), and the producer's mean put
  call (wall time: a put that pokes a sleeping dispatcher pays for the poke).
- "long-poll reader": a consumer thread long-polls ``get_messages(wait=1)`` at the next offset; the same figures,
  plus put -> readable latency p50/p99 (from just before ``put`` to the reader's return with the message).

On a shared VM a single run's CPU figures move by +-30 % (a timed 1 ms sleep alone costs 13-30 us of CPU there,
with the load): the medians of a few rounds are steadier; compare before/after from runs interleaved on one machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench import workloads as W  # noqa: E402

MiB = W.MiB
TOPIC = "BenchReput"


def thread_cpu_s(thread: threading.Thread) -> float:
    """CPU seconds (user + system) ``thread`` has used: its pthread CPU clock (ns resolution), else
    /proc/self/task/<tid>/stat's utime + stime (clock ticks)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError):
        with open(f"/proc/self/task/{thread.native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], p: float) -> float:
    return W.percentile(sorted(values), p)


def paced_run(root: str, rate: int, seconds: float, reader: bool) -> dict:
    """One run on a fresh store under ``root``: ``rate`` puts/s for ``seconds`` from one thread."""
    from rmqcore import Message
    cfg = W.bench_config(64 * MiB, max_hash_slot_num=500_009, max_index_num=1_000_000)
    store = W.open_store(root, cfg)
    try:
        W.prewarm_store(store, topic=TOPIC)
        reput = store.reput
        n = int(rate * seconds)
        base = store.max_offset(TOPIC, 0)
        body = W.body()
        msgs = [Message(TOPIC, body, 0, "TagA", f"key-{i:08d}") for i in range(n)]
        put_t = [0.0] * n
        seen_t = [0.0] * n
        stop = threading.Event()

        def consume():
            off = base
            get = store.get_messages
            clock = time.perf_counter
            while off < base + n and not stop.is_set():
                g = get("bench-reput", TOPIC, 0, off, 32, None, 1.0)
                t = clock()
                for m in g.messages:
                    seen_t[m.queue_offset - base] = t
                if g.messages:
                    off = g.next_begin_offset

        consumer = threading.Thread(target=consume, name="bench-reader", daemon=True) if reader else None
        if consumer is not None:
            consumer.start()
        time.sleep(0.05)
        put = store.put
        clock = time.perf_counter
        interval = 1.0 / rate
        cpu0, passes0, disp0 = thread_cpu_s(reput), reput.passes, reput.dispatched
        put_s = 0.0
        with W.gc_paused():
            t0 = clock()
            for i in range(n):
                due = t0 + i * interval
                now = clock()
                if due > now:
                    time.sleep(due - now)
                put_t[i] = t = clock()
                put(msgs[i])
                put_s += clock() - t
            t_put = clock()
            if not store.wait_dispatched(30):
                raise RuntimeError("dispatch did not catch up within 30 s")
            time.sleep(0.01)                # the last pass's own tail (its notify) inside the measured window
            cpu1, passes1, disp1 = thread_cpu_s(reput), reput.passes, reput.dispatched
            t_end = clock()
        stop.set()
        if consumer is not None:
            consumer.join(5)
        dispatched = disp1 - disp0
        if dispatched != n:
            raise RuntimeError(f"dispatched {dispatched} records, put {n}")
        out = {
            "rate": n / (t_put - t0),
            "cpu_us_per_msg": (cpu1 - cpu0) / n * 1e6,
            "passes_per_s": (passes1 - passes0) / (t_end - t0),
            "cpu_us_per_pass": (cpu1 - cpu0) / max(1, passes1 - passes0) * 1e6,
            "put_us": put_s / n * 1e6,      # the producer's put call, wall time (a poke of the dispatcher is in it)
        }
        if reader:
            lat = [(s - p) * 1000 for s, p in zip(seen_t, put_t) if s > 0]
            if len(lat) != n:
                raise RuntimeError(f"the reader saw {len(lat)} of {n} messages")
            out["p50_ms"] = _pct(lat, 50)
            out["p99_ms"] = _pct(lat, 99)
        return out
    finally:
        store.close()


def run(rates=(1000, 4000), seconds: float = 4.0, base_dir: str | None = None, repeats: int = 1) -> list[dict]:
    """Each (rate, reader) case ``repeats`` times, rounds interleaved; per case the median of the CPU and pass
    figures and the latency percentiles of the round with the median p50 (one disturbed round shows in its own
    p99 only)."""
    rounds: dict = {}
    for _ in range(repeats):
        for rate in rates:
            for reader in (False, True):
                with W.temp_dir(base_dir, prefix="rmqbench-reput-") as root:
                    rounds.setdefault((rate, reader), []).append(paced_run(root, rate, seconds, reader))
    results = []
    for (rate, reader), runs in rounds.items():
        r = {k: statistics.median(x[k] for x in runs) for k in ("rate", "cpu_us_per_msg", "passes_per_s",
                                                                  "cpu_us_per_pass", "put_us")}
        if reader:
            mid = sorted(runs, key=lambda x: x["p50_ms"])[len(runs) // 2]
            r["p50_ms"], r["p99_ms"] = mid["p50_ms"], mid["p99_ms"]
        r["target"], r["reader"], r["repeats"] = rate, reader, len(runs)
        results.append(r)
    return results


def rows(results: list[dict]) -> list[tuple[str, str, str, str]]:
    out = []
    for r in results:
        who = "long-poll reader" if r["reader"] else "no reader"
        extra = (f"; put -> readable p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms" if r["reader"] else "")
        out.append((f"dispatcher CPU per message, single puts at {r['target']:,}/s ({who})",
                    f"{r['cpu_us_per_msg']:.1f}", "µs",
                    f"{r['passes_per_s']:,.0f} passes/s, {r['cpu_us_per_pass']:.1f} µs a pass, put call "
                    f"{r['put_us']:.1f} µs{extra}"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="1000,4000", help="puts per second, comma-separated")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=3, help="rounds of every case (medians are reported)")
    ap.add_argument("--dir", default=None, help="parent directory for the temporary stores")
    args = ap.parse_args(argv)
    rates = [int(x) for x in args.rates.split(",") if x.strip()]
    results = run(rates, args.seconds, args.dir, args.repeats)
    print("| operation | result | unit | detail |")
    print("|---|---:|---|---|")
    for row in rows(results):
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
