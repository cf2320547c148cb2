"""``python -m bench``: run every measurement directly (no pytest), with repeats, and print one markdown table.

Every "vs" figure is a ratio of two figures measured in this same run, on this same machine: the machine is a
noisy shared VM, so ratios travel, absolute figures do not. Throughputs are the best of N repeats (the least
disturbed run); latencies are percentiles over all samples. Progress goes to stderr, the table to stdout.

    python -m bench                 # full run (a few minutes)
    python -m bench --quick         # smoke run, well under a minute
    python -m bench --only put,crc  # some cases only (names: see --list)
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import random
import sys
import time
import traceback
import zlib
from dataclasses import dataclass

from bench import workloads as W
from bench.machine import cpu_model

MiB = W.MiB


@dataclass
class Params:
    repeats: int
    crc_calls_1k: int
    crc_calls_64k: int
    codec_records: int
    put_msgs: int
    put_batch_msgs: int
    thread_msgs: int          # per thread
    get_msgs: int
    keys: int
    latency_samples: int
    dispatch_msgs: int
    file_size: int
    memcpy_bytes: int
    sync_seconds: float       # per SYNC_FLUSH variant per round
    sync_rounds: int
    recovery_bytes: int       # commitlog written for the recovery case
    recovery_file_size: int
    crash_msgs: int           # acknowledged SYNC_FLUSH puts before the SIGKILL
    crash_runs: int
    store_msgs: int           # end-to-end store variants (issue workload)
    peer_msgs: int            # the peers comparison


FULL = Params(repeats=7, crc_calls_1k=200_000, crc_calls_64k=4_000, codec_records=50_000, put_msgs=100_000,
              put_batch_msgs=200_000, thread_msgs=50_000, get_msgs=100_000, keys=1_000_000,
              latency_samples=2_000, dispatch_msgs=300_000, file_size=512 * MiB, memcpy_bytes=256 * MiB,
              sync_seconds=2.0, sync_rounds=3, recovery_bytes=1024 * MiB, recovery_file_size=256 * MiB,
              crash_msgs=50_000, crash_runs=3, store_msgs=500_000, peer_msgs=1_000_000)
QUICK = Params(repeats=3, crc_calls_1k=20_000, crc_calls_64k=500, codec_records=10_000, put_msgs=20_000,
               put_batch_msgs=50_000, thread_msgs=10_000, get_msgs=20_000, keys=100_000,
               latency_samples=300, dispatch_msgs=50_000, file_size=256 * MiB, memcpy_bytes=256 * MiB,
               sync_seconds=1.0, sync_rounds=2, recovery_bytes=128 * MiB, recovery_file_size=64 * MiB,
               crash_msgs=10_000, crash_runs=1, store_msgs=100_000, peer_msgs=50_000)


class Ctx:
    def __init__(self, params: Params, base_dir: str | None):
        self.p = params
        self.dir = base_dir
        self.r: dict = {}          # measurement name -> value
        self.notes: list[str] = []
        self.load_start = _loadavg()
        self.quick = False         # --quick (self.p is a copy of QUICK, never QUICK itself)


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def best_time(fn, repeats: int, setup=None) -> float:
    """Smallest wall time of ``repeats`` calls of ``fn(setup())`` (or ``fn()``), GC paused while timed."""
    best = float("inf")
    for _ in range(repeats):
        arg = setup() if setup is not None else None
        with W.gc_paused():
            t0 = time.perf_counter()
            if setup is not None:
                fn(arg)
            else:
                fn()
            elapsed = time.perf_counter() - t0
        best = min(best, elapsed)
        del arg
    return best


def latencies_us(fn, args) -> list[float]:
    """Per-call latency of ``fn(*a)`` for each ``a`` in ``args``, in µs, sorted."""
    out = []
    clock = time.perf_counter_ns
    with W.gc_paused():
        for a in args:
            t0 = clock()
            fn(*a)
            out.append((clock() - t0) / 1000.0)
    out.sort()
    return out


# -- cases ---------------------------------------------------------------------------------------------------------

def case_memcpy(ctx: Ctx) -> None:
    import numpy as np
    n = ctx.p.memcpy_bytes
    src = np.full(n, 7, dtype=np.uint8)
    dst = np.zeros(n, dtype=np.uint8)
    dst[:] = 1                                   # touched: warm pages, as a pre-faulted mapped file
    t = best_time(lambda: np.copyto(dst, src), max(ctx.p.repeats, 5))
    ctx.r["memcpy_gbps"] = n / t / 1e9


def case_crc(ctx: Ctx) -> None:
    from rmqcore import _crc
    ours = _crc.crc32
    for label, size, calls in (("1k", 1024, ctx.p.crc_calls_1k), ("64k", 64 * 1024, ctx.p.crc_calls_64k)):
        data = os.urandom(size)
        if ours(data) != zlib.crc32(data):
            raise AssertionError(f"rmqcore._crc.crc32 disagrees with zlib.crc32 on {size} bytes")
        loop = range(calls)

        def run_ours():
            for _ in loop:
                ours(data)

        def run_zlib(crc=zlib.crc32):
            for _ in loop:
                crc(data)

        # interleave the two so both see the same machine weather
        t_ours = t_zlib = float("inf")
        for _ in range(max(ctx.p.repeats, 3)):
            t_ours = min(t_ours, best_time(run_ours, 1))
            t_zlib = min(t_zlib, best_time(run_zlib, 1))
        ctx.r[f"crc_{label}_gbps"] = size * calls / t_ours / 1e9
        ctx.r[f"crc_{label}_ns"] = t_ours / calls * 1e9
        ctx.r[f"zlib_{label}_gbps"] = size * calls / t_zlib / 1e9
        if label == "64k" and _crc.implementation() == "vpclmul":
            # the 128-bit path the 512-bit one replaced, for the same bytes (crc32_with's name check is noise
            # at 64 KiB)
            def run_pclmul(crc=_crc.crc32_with):
                for _ in loop:
                    crc(data, 0, "pclmul")

            ctx.r["crc_64k_pclmul_gbps"] = size * calls / best_time(run_pclmul, max(ctx.p.repeats, 3)) / 1e9


def interleaved_best(variants: dict, rounds: int) -> dict:
    """Best (smallest) wall time of each variant over ``rounds`` rounds; every round runs every variant once, in
    a rotating order, so related figures see the same machine weather and their ratio is fair.

    ``variants``: name -> (fn, setup). ``fn(setup())`` (or ``fn()`` without setup) is timed with the GC paused;
    when it returns a float, that is taken as its own elapsed time (threads measure from their common start).
    """
    names = list(variants)
    best = {name: float("inf") for name in names}
    for i in range(rounds):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            fn, setup = variants[name]
            arg = setup() if setup is not None else None
            with W.gc_paused():
                t0 = time.perf_counter()
                own = fn(arg) if setup is not None else fn()
                elapsed = time.perf_counter() - t0
            if isinstance(own, float):
                elapsed = own
            best[name] = min(best[name], elapsed)
            del arg
    return best


def case_codec(ctx: Ctx) -> None:
    from rmqcore._encoder import EncodeBuffer, MessageEncoder
    n = ctx.p.codec_records
    buf = W.record_buffer(n, base_dir=ctx.dir)
    nbytes = len(buf) - 8
    if W.decode_all(buf) != n or W.decode_all(buf, True) != n or W.scan_all(buf, True) != n:
        raise AssertionError("record buffer does not decode to the records written")
    # encode: validate + UNIQ_KEY + CRC + encode into the reusable buffer in batches of 1000 (what put_messages
    # does before taking the lock), on fresh messages each round
    enc = MessageEncoder()
    out = EncodeBuffer()

    def encode(batches):
        for b in batches:
            enc.encode_batch(b, out)

    def fresh():
        msgs = W.make_messages(n)
        return [msgs[i:i + 1000] for i in range(0, n, 1000)]

    t = interleaved_best({
        "decode": (lambda: W.decode_all(buf), None),
        "decode_crc": (lambda: W.decode_all(buf, True), None),
        "scan": (lambda: W.scan_all(buf, False), None),
        "scan_crc": (lambda: W.scan_all(buf, True), None),
        "encode": (encode, fresh),
    }, max(9, 3 * ctx.p.repeats))
    ctx.r["decode_rps"] = n / t["decode"]
    ctx.r["decode_gbps"] = nbytes / t["decode"] / 1e9
    ctx.r["decode_crc_rps"] = n / t["decode_crc"]
    ctx.r["scan_rps"] = n / t["scan"]
    ctx.r["scan_crc_rps"] = n / t["scan_crc"]
    ctx.r["scan_crc_gbps"] = nbytes / t["scan_crc"] / 1e9
    ctx.r["encode_rps"] = n / t["encode"]
    ctx.r["encode_gbps"] = nbytes / t["encode"] / 1e9


class _LogPool:
    """Hands out a warmed CommitLog with room for ``need`` bytes, replacing it (outside any timing) when full."""

    def __init__(self, ctx: Ctx):
        self.ctx = ctx
        self.wcl = None
        self.logs = 0

    def get(self, need: int):
        if self.wcl is not None and self.wcl.capacity() < need:
            self.wcl.close()
            self.wcl = None
        if self.wcl is None:
            size = self.ctx.p.file_size
            while size < need + 16 * MiB:
                size *= 2
            self.wcl = W.WarmCommitLog(size, self.ctx.dir)
            self.logs += 1
        return self.wcl.cl

    def close(self):
        if self.wcl is not None:
            self.wcl.close()
            self.wcl = None


def _run_put_each(arg):
    cl, msgs = arg
    W.put_each(cl, msgs)


def _run_put_batches(arg):
    cl, batches = arg
    W.put_batches_presliced(cl.put_messages, batches)


def _run_put_threads(arg):
    cl, lists = arg
    return W.put_threads(cl, lists)


PUT_VARIANTS = ("put", "put_batch", "put_2threads")


def case_put(ctx: Ctx, variants=PUT_VARIANTS) -> None:
    """CommitLog appends on pre-faulted files: one call per message, batches of 1000, two threads; the
    variants run interleaved, round by round, each on fresh messages (built outside the timing)."""
    rec = W.record_size()
    ctx.r["record_bytes"] = rec
    pool = _LogPool(ctx)
    p = ctx.p
    n_put, n_batch, per_thread = p.put_msgs, p.put_batch_msgs, p.thread_msgs

    def setup_put():
        msgs = W.make_messages(n_put)
        return pool.get(n_put * rec + MiB), msgs

    def setup_batch():
        msgs = W.make_messages(n_batch)
        return pool.get(n_batch * rec + MiB), [msgs[i:i + 1000] for i in range(0, n_batch, 1000)]

    def setup_threads():
        lists = [W.make_messages(per_thread), W.make_messages(per_thread)]
        return pool.get(2 * per_thread * rec + MiB), lists

    table = {"put": (_run_put_each, setup_put), "put_batch": (_run_put_batches, setup_batch),
             "put_2threads": (_run_put_threads, setup_threads)}
    try:
        t = interleaved_best({v: table[v] for v in variants}, p.repeats)
    finally:
        pool.close()
    log(f"  {pool.logs} warmed commit log(s) used")
    if "put" in t:
        ctx.r["put_mps"] = n_put / t["put"]
        ctx.r["put_mbps"] = n_put * rec / t["put"] / 1e6
    if "put_batch" in t:
        ctx.r["put_batch_mps"] = n_batch / t["put_batch"]
        ctx.r["put_batch_mbps"] = n_batch * rec / t["put_batch"] / 1e6
    if "put_2threads" in t:
        ctx.r["put_2t_mps"] = 2 * per_thread / t["put_2threads"]
        ctx.r["put_2t_mbps"] = 2 * per_thread * rec / t["put_2threads"] / 1e6


def case_get(ctx: Ctx) -> None:
    n = ctx.p.get_msgs
    rec = W.record_size()
    size = ctx.p.file_size
    while size < n * rec + 16 * MiB:
        size *= 2
    cfg = W.bench_config(size)
    with W.temp_dir(ctx.dir) as root:
        store = W.open_store(root, cfg)
        try:
            W.prewarm_store(store)
            start = store.max_offset(W.TOPIC, 0)
            W.fill_store(store, n)
            end = store.max_offset(W.TOPIC, 0)
            got = W.get_all(store, W.TOPIC, 0, start, end)
            if got != end - start:
                raise AssertionError(f"get_messages returned {got} messages, expected {end - start}")
            t = best_time(lambda: W.get_all(store, W.TOPIC, 0, start, end), ctx.p.repeats)
            ctx.r["get_mps"] = (end - start) / t
            ctx.r["get_mbps"] = (end - start) * rec / t / 1e6
        finally:
            store.close()


def case_query(ctx: Ctx) -> None:
    """1M keyed messages written as a bare commitlog, then opened as a store: the dispatcher catches up (timed:
    consume-queue units + 2 index keys per record), then query_message / look_message / offset_by_time latencies."""
    n = ctx.p.keys
    samples = ctx.p.latency_samples
    queues = 8
    cfg = W.bench_config(256 * MiB)
    ctx.r["keys"] = n
    with W.temp_dir(ctx.dir) as root:
        t = time.perf_counter()
        W.write_keyed_commitlog(root, cfg, n, queues=queues, body_size=128)
        log(f"  wrote {n:,} keyed messages in {time.perf_counter() - t:.1f} s")
        # The dispatcher's catch-up is timed from the open (a store may dispatch its backlog inside open, before
        # it is handed out, or in the background after): records dispatched / (open → nothing left behind).
        with W.gc_paused():
            t0 = time.perf_counter()
            store = W.open_store(root, cfg)
            t_open = time.perf_counter()
            try:
                ok = store.wait_dispatched(1800)
            except BaseException:
                store.close()
                raise
            t1 = time.perf_counter()
        try:
            if not ok:
                raise RuntimeError("dispatch did not catch up within 30 min")
            info = W.dispatch_info(store)
            if info.get("dispatch_error"):
                raise RuntimeError(f"dispatch error: {info['dispatch_error']}")
            dispatched = info["dispatched_records"]
            recovery_s = float((getattr(store, "recovery", None) or {}).get("seconds") or 0.0)
            ctx.r["catchup_rps"] = dispatched / (t1 - t0) if dispatched else float("nan")
            ctx.r["catchup_records"] = dispatched
            ctx.r["catchup_s"] = t1 - t0
            ctx.r["catchup_recovery_s"] = recovery_s
            log(f"  open {t_open - t0:.2f} s (recovery {recovery_s:.2f} s), all {dispatched:,} records "
                f"dispatched {t1 - t0:.2f} s after the open began")

            rng = random.Random(20261122)
            keys = [(W.TOPIC, f"key-{rng.randrange(n):08d}", 32) for _ in range(samples)]
            found: list = []

            def query(topic, key, max_num):
                found.append(store.query_message(topic, key, max_num))

            ctx.r["query_us"] = latencies_us(query, keys)
            misses = sum(1 for r in found if len(r) != 1)
            if misses:
                raise AssertionError(f"{misses} of {len(found)} key queries did not return exactly one message")
            offsets = [(r[0].commitlog_offset,) for r in found]
            del found[:]
            ctx.r["look_us"] = latencies_us(store.look_message, offsets)

            first = store.get_messages("bench", W.TOPIC, 0, 0, 1).messages[0].store_timestamp
            last_off = store.max_offset(W.TOPIC, queues - 1) - 1
            last = store.get_messages("bench", W.TOPIC, queues - 1, last_off, 1).messages[0].store_timestamp
            args = [(W.TOPIC, rng.randrange(queues), rng.randint(first, last)) for _ in range(samples)]
            ctx.r["obt_us"] = latencies_us(store.offset_by_time, args)
            ctx.r["obt_span_ms"] = last - first
        finally:
            store.close()


def case_dispatch(ctx: Ctx) -> None:
    """Full-speed put_batch (batches of 1000, 1 KiB bodies, 4 queues, a tag and a key each) into a live store;
    the dispatcher follows. Dispatch rate = records / (first put → last record dispatched)."""
    n = ctx.p.dispatch_msgs
    queues = 4
    rec = W.record_size() + 20   # + KEYS and TAGS properties
    size = ctx.p.file_size
    while size < n * rec + 16 * MiB:       # one pre-faulted file holds the whole run
        size *= 2
    cfg = W.bench_config(size)
    with W.temp_dir(ctx.dir) as root:
        store = W.open_store(root, cfg)
        try:
            W.prewarm_store(store, queues=queues)
            msgs = W.make_messages(n, queues=queues, keys=True, tags="TagA", start=1_000_000_000)
            batches = [msgs[i:i + 1000] for i in range(0, n, 1000)]
            del msgs
            d0 = W.dispatch_info(store)["dispatched_records"]
            sampler = W.LagSampler(store, baseline=d0)
            put = store.put_batch
            with W.gc_paused():
                sampler.start()
                t0 = time.perf_counter()
                for b in batches:
                    put(b)
                t_put = time.perf_counter()
                ok = store.wait_dispatched(600)
                t_done = time.perf_counter()
                sampler.stop()
            if not ok:
                raise RuntimeError("dispatch did not catch up within 10 min")
            info = W.dispatch_info(store)
            if info.get("dispatch_error"):
                raise RuntimeError(f"dispatch error: {info['dispatch_error']}")
            dispatched = info["dispatched_records"] - d0
            ctx.r["live_put_mps"] = n / (t_put - t0)
            ctx.r["live_dispatch_rps"] = dispatched / (t_done - t0)
            ctx.r["live_drain_ms"] = (t_done - t_put) * 1000
            ctx.r["live_max_lag_ms"] = sampler.max_lag_ms
            ctx.r["live_max_behind_mb"] = sampler.max_behind_bytes / 1e6
            ctx.r["live_samples"] = sampler.samples
        finally:
            store.close()


def case_reput(ctx: Ctx) -> None:
    """Single puts paced at 1,000 and 4,000 msgs/s, as `rmqcore serve` drives the store: the dispatcher thread's
    CPU per message and per pass, and put -> readable latency for a long-polling reader (bench/dispatch_bench.py)."""
    from bench import dispatch_bench
    quick = ctx.p is QUICK
    ctx.r["reput_rows"] = dispatch_bench.rows(dispatch_bench.run(
        (1000, 4000), 2.0 if quick else 4.0, ctx.dir, 1 if quick else 3))


def case_sync_flush(ctx: Ctx) -> None:
    """SYNC_FLUSH puts (each returns once a group-commit msync covers it) with 1, 4 and 16 producer threads, and
    the one-fdatasync-per-message loop, interleaved round by round; a fresh store per variant and round."""
    p = ctx.p
    secs = p.sync_seconds
    # p<k>: k threads calling put (each waits for its flush); a16 / n16: 16 threads with W.SYNC_WINDOW puts in
    # flight each, through put_async futures / WAIT=false puts + one wait_flushed per window; c16: 16 asyncio
    # tasks with W.SYNC_WINDOW aput futures in flight each.
    names = ["fsync"] + [f"p{k}" for k in W.SYNC_PRODUCERS] + ["a16", "n16", "c16"]
    best = {name: 0.0 for name in names}
    totals = {name: {"puts": 0, "flushes": 0, "served": 0} for name in names}
    lat: list[float] = []
    with W.temp_dir(ctx.dir, "rmqbench-fsync-") as probe_dir:
        for i in range(p.sync_rounds):
            k = i % len(names)
            for name in names[k:] + names[:k]:
                if name == "fsync":
                    with W.gc_paused():
                        n, elapsed, l = W.fsync_per_message(probe_dir, secs)
                    lat += l
                    best[name] = max(best[name], n / elapsed)
                    continue
                producers = int(name[1:])
                with W.sync_store(ctx.dir) as (store, cap):
                    with W.gc_paused():
                        if name[0] == "p":
                            r = W.sync_put_run(store, producers, secs, cap // p.sync_rounds)
                        elif name[0] == "c":
                            r = W.aio_put_run(store, producers, W.SYNC_WINDOW, secs, cap // p.sync_rounds)
                        else:
                            r = W.async_put_run(store, producers, W.SYNC_WINDOW, secs, cap // p.sync_rounds,
                                                nowait=name[0] == "n")
                best[name] = max(best[name], r["puts"] / r["elapsed"])
                for key in ("puts", "flushes", "served"):
                    totals[name][key] += r[key]
            log("  round %d: %s" % (i + 1, ", ".join(f"{nm} {best[nm]:,.0f}/s" for nm in names)))
    lat.sort()
    ctx.r["wake_us"] = min(W.wake_latency() for _ in range(3))
    ctx.r["fsync_mps"] = best["fsync"]
    ctx.r["fsync_p50_us"] = W.percentile(lat, 50)
    ctx.r["fsync_p99_us"] = W.percentile(lat, 99)
    for name in names[1:]:
        t = totals[name]
        ctx.r[f"sync_{name}_mps"] = best[name]
        ctx.r[f"sync_{name}_per_flush"] = t["served"] / t["flushes"] if t["flushes"] else float("nan")
    ctx.r["sync_seconds"] = secs
    ctx.r["sync_rounds"] = p.sync_rounds


def case_recovery(ctx: Ctx) -> None:
    """A commitlog of recovery_bytes (1 KiB bodies, 8 queues) written with CommitLog.put_messages; scan_records
    + CRC over its mapped files; then MessageStore.open with the abort file and no checkpoint (abnormal recovery:
    CRC scan of every file + dispatch of every record), then, after a clean close, open with the abort file again
    (abnormal recovery from the checkpoint, queues and index already there)."""
    p = ctx.p
    cfg = W.bench_config(p.recovery_file_size)
    with W.temp_dir(ctx.dir, "rmqbench-recovery-") as root:
        t = time.perf_counter()
        size, records = W.write_commitlog(root, cfg, p.recovery_bytes)
        log(f"  wrote {size / MiB:,.0f} MiB ({records:,} records) in {time.perf_counter() - t:.1f} s")
        mc = W.MappedCommitLog(root)
        try:
            with W.gc_paused():               # first pass: fresh mappings (minor faults on page-cache pages)
                t0 = time.perf_counter()
                got, nbytes = mc.scan(True)
                first = time.perf_counter() - t0
            if got != records:
                raise AssertionError(f"scan_records found {got:,} records, {records:,} were written")
            lengths = mc.lengths()
            files = sum(1 for length in lengths if length)     # not the empty, preallocated next file
            tb = interleaved_best({"scan_crc": (lambda: mc.scan(True), None),
                                   "scan": (lambda: mc.scan(False), None),
                                   "crc": (lambda: mc.crc(lengths), None)}, p.repeats)
        finally:
            mc.close()
        ctx.r.update(rec_bytes=nbytes, rec_records=records, rec_files=files, rec_file_size=p.recovery_file_size,
                     rec_first_gbps=nbytes / first / 1e9, rec_scan_crc_gbps=nbytes / tb["scan_crc"] / 1e9,
                     rec_scan_gbps=nbytes / tb["scan"] / 1e9, rec_crc_gbps=nbytes / tb["crc"] / 1e9)

        W.mark_crashed(root, drop_checkpoint=True)
        with W.gc_paused():
            t0 = time.perf_counter()
            store = W.open_store(root, cfg)
            reopen = time.perf_counter() - t0
        try:
            info = dict(store.recovery)
            units = W.queue_records(store, W.TOPIC, 8)
        finally:
            store.close()
        if info.get("records") != records or units != records:
            raise AssertionError(f"abnormal reopen scanned {info.get('records')} records and holds {units} units, "
                                 f"{records} were written")
        log(f"  abnormal reopen, no checkpoint: {reopen:.2f} s (recovery scan {info.get('seconds', 0):.2f} s), "
            f"{info.get('rebuilt_units', 0):,} units, {info.get('rebuilt_keys', 0):,} keys rebuilt")
        ctx.r.update(rec_reopen_s=reopen, rec_reopen_scan_s=float(info.get("seconds") or 0.0),
                     rec_reopen_units=info.get("rebuilt_units", 0), rec_reopen_keys=info.get("rebuilt_keys", 0))

        W.mark_crashed(root)
        with W.gc_paused():
            t0 = time.perf_counter()
            store = W.open_store(root, cfg)
            reopen2 = time.perf_counter() - t0
        try:
            info2 = dict(store.recovery)
            units2 = W.queue_records(store, W.TOPIC, 8)
        finally:
            store.close()
        if units2 != records:
            raise AssertionError(f"second abnormal reopen holds {units2} units, {records} were written")
        ctx.r.update(rec_reopen2_s=reopen2, rec_reopen2_scan_s=float(info2.get("seconds") or 0.0),
                     rec_reopen2_records=info2.get("records", 0),
                     rec_reopen2_scanned=size - int(info2.get("scan_from") or 0),
                     rec_reopen2_units=info2.get("rebuilt_units", 0), rec_reopen2_keys=info2.get("rebuilt_keys", 0))


def case_crash_reopen(ctx: Ctx) -> None:
    """A child process puts with SYNC_FLUSH and is killed with SIGKILL mid-put once crash_msgs puts were
    acknowledged; MessageStore.open of its store is timed (abnormal recovery + dispatch catch-up)."""
    p = ctx.p
    runs = []
    for i in range(p.crash_runs):
        with W.temp_dir(ctx.dir, "rmqbench-crash-") as root:
            acked = W.crashed_store(root, p.crash_msgs)
            with W.gc_paused():
                t0 = time.perf_counter()
                store = W.open_store(root, W.crash_config())
                seconds = time.perf_counter() - t0
            try:
                info = store.runtime_info()["recovery"]
                recovered = W.queue_records(store)
                size = store.commit_log.max_offset
                ok = store.verify()["ok"]
            finally:
                store.close()
        if recovered < acked:
            raise AssertionError(f"{acked:,} puts were acknowledged before the kill, {recovered:,} recovered")
        if not ok:
            raise AssertionError("verify() found errors after the reopen")
        runs.append(dict(seconds=seconds, acked=acked, recovered=recovered, bytes=size, **{
            k: info.get(k, 0) for k in ("records", "truncated_bytes", "rebuilt_units", "rebuilt_keys", "scan_from")},
            scan_s=float(info.get("seconds") or 0.0)))
        log(f"  run {i + 1}: open {seconds:.3f} s, {recovered:,} records ({acked:,} acked), "
            f"{info.get('rebuilt_units', 0):,} units / {info.get('rebuilt_keys', 0):,} keys rebuilt")
    runs.sort(key=lambda r: r["seconds"])
    ctx.r["crash_runs"] = runs


E2E_TOPICS, E2E_QUEUES = 4, 4


def _e2e_messages(lo: int, hi: int, body: bytes):
    from rmqcore import Message
    return [Message(f"perf-{i % E2E_TOPICS}", body, (i // E2E_TOPICS) % E2E_QUEUES, tags=f"t{i % 8}",
                    keys=[f"k{i}"]) for i in range(lo, hi)]


def case_store(ctx: Ctx) -> None:
    """The store end to end as a user drives it (issue workload): 1 KiB bodies, 4 topics x 4 queues, a tag and a
    key per message, default StoreConfig (1 GiB files with the write runway), a fresh store per variant, counted
    until wait_dispatched() returns (every message readable by queue and key). Variants: the Python loop that only
    builds the Messages; that loop + put_batch of 1,000; one put per Message; put_arrow of a prebuilt Arrow batch;
    two producer threads each building + put_batch. Best of ``repeats`` rounds, variants interleaved."""
    import threading
    from rmqcore import StoreConfig
    n = ctx.p.store_msgs
    body = W.body()

    def build_only(_):
        for k in range(0, n, 1000):
            _e2e_messages(k, min(n, k + 1000), body)

    def with_store(fn, **config):
        def run(_):
            with W.temp_dir(ctx.dir) as root:
                store = W.open_store(root, StoreConfig(**config))
                try:
                    t0 = time.perf_counter()
                    fn(store)
                    if not store.wait_dispatched(600):
                        raise RuntimeError("dispatch did not catch up")
                    return time.perf_counter() - t0
                finally:
                    store.close()
        return run

    def batches(store):
        for k in range(0, n, 1000):
            store.put_batch(_e2e_messages(k, min(n, k + 1000), body))

    def single(store):
        put = store.put
        for k in range(0, n, 1000):
            for m in _e2e_messages(k, min(n, k + 1000), body):
                put(m)

    def two_threads(store):
        def half(lo, hi):
            for k in range(lo, hi, 1000):
                store.put_batch(_e2e_messages(k, min(hi, k + 1000), body))
        mid = (n // 2000) * 1000
        ts = [threading.Thread(target=half, args=(0, mid)), threading.Thread(target=half, args=(mid, n))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    table = None
    try:
        import pyarrow as pa
        table = pa.table({"topic": [f"perf-{i % E2E_TOPICS}" for i in range(n)],
                          "queue_id": pa.array([(i // E2E_TOPICS) % E2E_QUEUES for i in range(n)], pa.int32()),
                          "body": pa.array([body] * n, pa.binary()), "tags": [f"t{i % 8}" for i in range(n)],
                          "keys": [[f"k{i}"] for i in range(n)]})
    except ImportError:
        ctx.notes.append("put_arrow row skipped: pyarrow is not installed")

    variants = {"build": build_only, "batch": with_store(batches), "single": with_store(single),
                "two": with_store(two_threads), "nocrc": with_store(batches, enabled_append_prop_crc=False)}
    if table is not None:
        variants["arrow"] = with_store(lambda store: store.put_arrow(table))
    best = {name: float("inf") for name in variants}
    for i in range(max(2, ctx.p.repeats // 2)):
        names = list(variants)
        k = i % len(names)
        for name in names[k:] + names[:k]:
            with W.gc_paused():
                t0 = time.perf_counter()
                inner = variants[name](None)
                took = inner if inner is not None else time.perf_counter() - t0
            best[name] = min(best[name], took)
        log("  round %d: %s" % (i + 1, ", ".join(f"{nm} {n / best[nm]:,.0f}/s" for nm in names)))
    for name, t in best.items():
        ctx.r[f"e2e_{name}_mps"] = n / t
    ctx.r["e2e_msgs"] = n


def case_footprint(ctx: Ctx) -> None:
    """What a default StoreConfig() store costs: open + close of an empty store (ms), and for a store holding one
    message the disk it uses (du, while open and after close) and the resident memory it adds. Each in a fresh
    child interpreter with rmqcore imported, so earlier cases do not count."""
    import json
    import subprocess
    code = r"""
import json, os, subprocess, sys, tempfile, time
from rmqcore import Message, MessageStore
def rss():
    with open('/proc/self/status') as f:
        return next(int(l.split()[1]) for l in f if l.startswith('VmRSS')) * 1024
def du(p):
    return int(subprocess.run(['du', '-sk', p], capture_output=True, text=True).stdout.split()[0]) * 1024
root = tempfile.mkdtemp(dir=sys.argv[1] if len(sys.argv) > 1 else None)
MessageStore.open(os.path.join(root, 'warm')).close()          # imports the store's modules once
t0 = time.perf_counter(); MessageStore.open(os.path.join(root, 'e')).close(); oc = time.perf_counter() - t0
r0 = rss()
s = MessageStore.open(os.path.join(root, 's'))
s.put(Message('T', b'x' * 1024, 0, keys=['k'])); s.wait_dispatched()
out = {'open_close_ms': oc * 1e3, 'rss_mb': (rss() - r0) / 2**20, 'du_open_mb': du(os.path.join(root, 's')) / 2**20}
s.close()
out['du_closed_mb'] = du(os.path.join(root, 's')) / 2**20
subprocess.run(['rm', '-rf', root])
print(json.dumps(out))
"""
    runs = []
    for _ in range(3):
        res = subprocess.run([sys.executable, "-c", code] + ([ctx.dir] if ctx.dir else []), capture_output=True,
                             text=True, check=True)
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    for key in runs[0]:
        ctx.r[f"foot_{key}"] = sorted(r[key] for r in runs)[1]       # the median of three


def case_peers(ctx: Ctx) -> None:
    """rmqcore against the Python stores a user would otherwise pick (bench/peers.py): the same workload on each."""
    from bench import peers
    ctx.r["peers_rows"] = peers.run_peers(ctx.p.peer_msgs, ctx.quick)
    ctx.r["peers_n"] = ctx.p.peer_msgs


def case_serve(ctx: Ctx) -> None:
    """`rmqcore serve` through the official client and a raw stub, against a no-op server (bench/serve_bench.py);
    needs rmqcore[server] and rocketmq-python-client."""
    from bench import serve_bench
    ctx.r["serve_rows"] = serve_bench.run(ctx.quick)


def case_remoting(ctx: Ctx) -> None:
    """`rmqcore serve --remoting` against the Java 4.9.7 broker and a no-store echo server, through the Java client
    (bench/remoting_bench.py); needs a JDK and the java-broker harness's build."""
    from bench import remoting_bench
    ctx.r["remoting_rows"] = remoting_bench.run(ctx.quick, ctx.dir)


def case_abuse(ctx: Ctx) -> None:
    """A normal client's send p50/p99 while `rmqcore serve` is abused: topic-creation storms, an idle-connection
    flood, gzip bombs (with the server's peak RSS) (bench/abuse_bench.py); needs rmqcore[server]."""
    from bench import abuse_bench
    ctx.r["abuse_rows"] = abuse_bench.run(ctx.quick)


def case_ha(ctx: Ctx) -> None:
    """A fresh slave catching up over the HA protocol, rmqcore on either side against Java → Java, on the same
    records (bench/ha_bench.py); needs a JDK and the java-broker harness build."""
    from bench import ha_bench
    ctx.r["ha_rows"] = ha_bench.run(ctx.quick)


CASES = [
    ("memcpy", case_memcpy),
    ("crc", case_crc),
    ("codec", case_codec),
    ("put", case_put),
    ("get", case_get),
    ("query", case_query),
    ("dispatch", case_dispatch),
    ("reput", case_reput),
    ("store", case_store),
    ("sync_flush", case_sync_flush),
    ("recovery", case_recovery),
    ("crash_reopen", case_crash_reopen),
    ("footprint", case_footprint),
    ("peers", case_peers),
    ("serve", case_serve),
    ("remoting", case_remoting),
    ("abuse", case_abuse),
    ("ha", case_ha),
]


# -- table ---------------------------------------------------------------------------------------------------------

def _n(v: float) -> str:
    return f"{v:,.0f}"


def _g(v: float) -> str:
    return f"{v:.2f}"


def _us(v: float) -> str:
    return f"{v:,.1f}"


def _x(a: float, b: float) -> str:
    return f"{a / b:.2f}×"


def _pct(a: float, b: float) -> str:
    return f"{100 * a / b:.1f} %"


def build_rows(ctx: Ctx) -> list[tuple[str, str, str, str]]:
    r = ctx.r
    rows = []
    mem = r.get("memcpy_gbps")

    def vs_mem(gbps):
        return f"{_pct(gbps, mem)} of memcpy" if mem else "memcpy not run"

    for label, size in (("1k", "1 KiB"), ("64k", "64 KiB")):
        if f"crc_{label}_gbps" in r:
            rows.append((f"crc32 {size} (rmqcore._crc, {r[f'crc_{label}_ns']:,.0f} ns/call)",
                         _g(r[f"crc_{label}_gbps"]), "GB/s",
                         f"{_x(r[f'crc_{label}_gbps'], r[f'zlib_{label}_gbps'])} zlib.crc32 "
                         f"({_g(r[f'zlib_{label}_gbps'])} GB/s)"
                         + (f"; 128-bit pclmul path {_g(r['crc_64k_pclmul_gbps'])} GB/s"
                            if label == "64k" and "crc_64k_pclmul_gbps" in r else "")))
    if "encode_rps" in r:
        rows.append(("encode 1 KiB-body records (encode_batch, 1000/call)", _n(r["encode_rps"]), "records/s",
                     f"{_g(r['encode_gbps'])} GB/s, {vs_mem(r['encode_gbps'])}"))
    if "decode_rps" in r:
        rows.append(("decode 1 KiB-body records (RecordIterator → MessageExt)", _n(r["decode_rps"]), "records/s",
                     f"{_x(r['decode_rps'], r['scan_rps'])} scan_records (no objects)"))
        rows.append(("decode 1 KiB-body records (RecordIterator → MessageExt)", _g(r["decode_gbps"]), "GB/s",
                     vs_mem(r["decode_gbps"])))
        rows.append(("decode + body CRC check (RecordIterator, check_crc)", _n(r["decode_crc_rps"]), "records/s",
                     f"{_x(r['decode_crc_rps'], r['decode_rps'])} decode without CRC"))
        rows.append(("scan_records + CRC (recovery walk, no objects)", _g(r["scan_crc_gbps"]), "GB/s",
                     f"{_x(r['scan_crc_gbps'], r['crc_64k_gbps'])} crc32 64 KiB" if "crc_64k_gbps" in r
                     else vs_mem(r["scan_crc_gbps"])))
    if "put_mps" in r:
        rows.append(("CommitLog.put_message, 1 KiB body, 1 call/msg, warm files", _n(r["put_mps"]), "msgs/s",
                     f"{1e6 / r['put_mps']:.2f} µs/msg"))
        rows.append(("CommitLog.put_message, 1 KiB body, 1 call/msg, warm files", _n(r["put_mbps"]), "MB/s",
                     vs_mem(r["put_mbps"] / 1000)))
    if "put_batch_mps" in r:
        rows.append(("CommitLog.put_messages, batches of 1000, 1 KiB body", _n(r["put_batch_mps"]), "msgs/s",
                     f"{_x(r['put_batch_mps'], r['put_mps'])} put_message" if "put_mps" in r else "put not run"))
        rows.append(("CommitLog.put_messages, batches of 1000, 1 KiB body", _n(r["put_batch_mbps"]), "MB/s",
                     vs_mem(r["put_batch_mbps"] / 1000)))
    if "put_2t_mps" in r:
        rows.append(("CommitLog.put_message, 2 threads at once, 1 KiB body", _n(r["put_2t_mps"]), "msgs/s",
                     f"{_x(r['put_2t_mps'], r['put_mps'])} 1 thread" if "put_mps" in r else "put not run"))
    if "get_mps" in r:
        rows.append(("MessageStore.get_messages, 32/call, sequential, 1 KiB body", _n(r["get_mps"]), "msgs/s",
                     f"{_x(r['get_mps'], r['decode_rps'])} RecordIterator decode" if "decode_rps" in r
                     else f"{_n(r['get_mbps'])} MB/s"))
    if "query_us" in r:
        q, lk = r["query_us"], r["look_us"]
        keys = f"{r['keys']:,} keys"
        look50 = W.percentile(lk, 50)
        rows.append((f"query_message p50 ({keys} indexed)", _us(W.percentile(q, 50)), "µs",
                     f"{_x(W.percentile(q, 50), look50)} look_message p50 ({_us(look50)} µs)"))
        rows.append((f"query_message p99 ({keys} indexed)", _us(W.percentile(q, 99)), "µs",
                     f"{_x(W.percentile(q, 99), W.percentile(lk, 99))} look_message p99 "
                     f"({_us(W.percentile(lk, 99))} µs)"))
        o = r["obt_us"]
        rows.append((f"offset_by_time p50 ({r['keys'] // 8:,} msgs/queue)", _us(W.percentile(o, 50)), "µs",
                     f"p99 {_us(W.percentile(o, 99))} µs; {_x(W.percentile(o, 50), look50)} look_message p50"))
        rows.append((f"dispatch catch-up at open ({r['catchup_records']:,} records, 2 index keys each)",
                     _n(r["catchup_rps"]), "records/s",
                     (f"{_x(r['catchup_rps'], r['put_batch_mps'])} put_messages rate; " if "put_batch_mps" in r
                      else "") + f"{r['catchup_s']:.2f} s incl. {r['catchup_recovery_s']:.2f} s recovery"))
    if "live_dispatch_rps" in r:
        rows.append(("dispatch under full-speed put_batch (1 KiB, key+tag)", _n(r["live_dispatch_rps"]),
                     "records/s", f"{_x(r['live_dispatch_rps'], r['live_put_mps'])} the store puts it followed "
                                  f"({_n(r['live_put_mps'])} msgs/s"
                                  + (f" = {_x(r['live_put_mps'], r['put_batch_mps'])} CommitLog.put_messages)"
                                     if "put_batch_mps" in r else ")")))
        rows.append(("dispatch max lag under full-speed put_batch", _n(r["live_max_lag_ms"]), "ms",
                     f"max backlog {r['live_max_behind_mb']:.1f} MB; drained {r['live_drain_ms']:.0f} ms "
                     f"after the last put"))
    rows.extend(r.get("reput_rows", []))
    if "e2e_batch_mps" in r:
        b, build = r["e2e_batch_mps"], r["e2e_build_mps"]
        rows.append((f"Python loop building a Message per message (no store), 1 KiB body, tag + key",
                     _n(build), "msgs/s", "what a caller pays before the store"))
        rows.append((f"that loop + MessageStore.put_batch of 1,000, until dispatched (default StoreConfig)", _n(b),
                     "msgs/s", f"{_x(b, build)} the loop alone; {b * W.record_size() / 1e6:,.0f} MB/s"))
        rows.append(("the same without the record CRC (enabled_append_prop_crc=False)", _n(r["e2e_nocrc_mps"]),
                     "msgs/s", f"the default __CRC32# costs {(1 - b / r['e2e_nocrc_mps']) * 100:+.0f} %"))
        rows.append(("one MessageStore.put per Message, until dispatched", _n(r["e2e_single_mps"]), "msgs/s",
                     f"{_x(r['e2e_single_mps'], build)} the loop alone"))
        rows.append(("2 producer threads, each loop + put_batch of 1,000, until dispatched", _n(r["e2e_two_mps"]),
                     "msgs/s", f"{_x(r['e2e_two_mps'], b)} 1 thread"))
        if "e2e_arrow_mps" in r:
            a = r["e2e_arrow_mps"]
            rows.append(("MessageStore.put_arrow of a prebuilt Arrow table, until dispatched", _n(a), "msgs/s",
                         f"{a * W.record_size() / 1e9:.2f} GB/s; {_x(a, b)} loop + put_batch"))
    if "foot_du_open_mb" in r:
        rows.append(("default StoreConfig(): open + close of an empty store", f"{r['foot_open_close_ms']:.1f}",
                     "ms", "median of 3 fresh interpreters"))
        rows.append(("default StoreConfig(), one message: disk used (du) open / closed",
                     f"{r['foot_du_open_mb']:.0f} / {r['foot_du_closed_mb']:.0f}", "MiB",
                     f"apparent size 1 GiB commitlog + 420 MB index (sparse); resident "
                     f"+{r['foot_rss_mb']:.0f} MiB"))
    rows.extend(r.get("serve_rows", []))
    rows.extend(r.get("remoting_rows", []))
    rows.extend(r.get("abuse_rows", []))
    rows.extend(r.get("ha_rows", []))
    for row in r.get("peers_rows", []):
        vals = row["values"]
        me = vals.get("rmqcore")
        if me is None:
            continue
        fmt = (lambda v: _n(v)) if row.get("higher_is_better") else (lambda v: f"{v:.1f}")
        others = ", ".join(f"{k} {fmt(v)}" for k, v in vals.items() if k != "rmqcore" and v is not None)
        rows.append((f"vs Python stores, {row['operation']} ({r['peers_n']:,} msgs)", fmt(me), row["unit"],
                     (f"{row['ratio']:.2f}× best ({row['best_peer']}); " if row.get("ratio") is not None else "")
                     + others))
    if "fsync_mps" in r:
        base = r["fsync_mps"]
        rows.append(("one fdatasync per message (4 KiB pwrite + fdatasync, same filesystem)", _n(base), "msgs/s",
                     f"baseline; fdatasync p50 {_us(r['fsync_p50_us'])} µs, p99 {_us(r['fsync_p99_us'])} µs"))
        one = r.get("sync_p1_mps")
        for k in W.SYNC_PRODUCERS:
            rate = r[f"sync_p{k}_mps"]
            extra = f", {_x(rate, one)} 1 producer" if k != 1 and one else ""
            if k > 1:    # each waits for its own flush: at most k puts share one
                extra += f"; ceiling {k}× (k puts per flush, each flush one fdatasync)"
            rows.append((f"SYNC_FLUSH MessageStore.put, {k} producer thread{'s' if k > 1 else ''}, 1 KiB body",
                         _n(rate), "msgs/s", f"{_x(rate, base)} one fdatasync per message{extra}; "
                                             f"{r[f'sync_p{k}_per_flush']:.1f} puts per flush"))
        w = W.SYNC_WINDOW
        for name, what in (("a16", f"16 producer threads, put_async, {w} futures in flight each"),
                           ("n16", f"16 producer threads, put with WAIT=false + one wait_flushed per {w}"),
                           ("c16", f"16 asyncio producer tasks in one thread, aput, {w} in flight each")):
            rate = r[f"sync_{name}_mps"]
            rows.append((f"SYNC_FLUSH, {what}, 1 KiB body", _n(rate), "msgs/s",
                         f"{_x(rate, base)} one fdatasync per message; {r[f'sync_{name}_per_flush']:.1f} puts "
                         f"per flush; counted when flushed"))
        rows.append(("limit: one thread wake-up (GroupCommit ping-pong, GIL included)", f"{r['wake_us']:.0f}",
                     "µs", "every blocking put pays one, and its GIL hand-off another"))
    if "rec_scan_crc_gbps" in r:
        mb = r["rec_bytes"] / MiB
        rows.append((f"recovery scan: scan_records + CRC over a {mb:,.0f} MiB commitlog ({r['rec_files']} files of "
                     f"{r['rec_file_size'] // MiB} MiB, {r['rec_records']:,} records, page cache)",
                     _g(r["rec_scan_crc_gbps"]), "GB/s",
                     f"{_x(r['rec_scan_crc_gbps'], r['rec_crc_gbps'])} crc32 alone over the same bytes "
                     f"({_g(r['rec_crc_gbps'])} GB/s); no CRC {_g(r['rec_scan_gbps'])} GB/s; first pass on fresh "
                     f"mappings {_g(r['rec_first_gbps'])} GB/s"))
        gbps = r["rec_bytes"] / r["rec_reopen_s"] / 1e9
        rows.append((f"abnormal reopen, no checkpoint: CRC scan of all {mb:,.0f} MiB + dispatch of every record",
                     f"{r['rec_reopen_s']:.2f}", "s",
                     f"{_g(gbps)} GB/s = {_x(gbps, r['rec_scan_crc_gbps'])} the bare scan; recovery scan "
                     f"{r['rec_reopen_scan_s']:.2f} s; {r['rec_reopen_units']:,} units, "
                     f"{r['rec_reopen_keys']:,} keys rebuilt"))
        rows.append(("abnormal reopen of that store after a clean close + abort file (from the checkpoint)",
                     f"{r['rec_reopen2_s']:.2f}", "s",
                     f"{_x(r['rec_reopen2_s'], r['rec_reopen_s'])} the reopen without checkpoint; scanned "
                     f"{r['rec_reopen2_scanned'] / MiB:,.0f} MiB ({r['rec_reopen2_records']:,} records) in "
                     f"{r['rec_reopen2_scan_s']:.2f} s; {r['rec_reopen2_units']:,} units, "
                     f"{r['rec_reopen2_keys']:,} keys rebuilt"))
    if "crash_runs" in r:
        runs = r["crash_runs"]
        m = runs[len(runs) // 2]
        spread = (f"median of {len(runs)} ({runs[0]['seconds']:.2f}–{runs[-1]['seconds']:.2f} s); "
                  if len(runs) > 1 else "")
        rows.append((f"reopen after SIGKILL of a SYNC_FLUSH producer ({m['bytes'] / MiB:,.0f} MiB, "
                     f"{m['acked']:,}+ puts acknowledged)", f"{m['seconds']:.2f}", "s",
                     f"{spread}{m['recovered']:,} records recovered, {m['records']:,} scanned (CRC) in "
                     f"{m['scan_s']:.2f} s, {m['truncated_bytes']:,} bytes cut, {m['rebuilt_units']:,} units / "
                     f"{m['rebuilt_keys']:,} keys rebuilt, verify clean"))
    if mem:
        rows.append(("limit: memcpy into warm memory (numpy copyto, "
                     f"{ctx.p.memcpy_bytes // MiB} MiB)", _g(mem), "GB/s", "ceiling for append/decode"))
    return rows


def render(rows) -> str:
    head = ("operation", "result", "unit", "vs peer/limit (same run)")
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---|---|"]
    for row in rows:
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def header(ctx: Ctx, quick: bool) -> str:
    from rmqcore import _crc
    try:
        impl = _crc.implementation()
    except Exception as e:  # pragma: no cover - reported, not fatal
        impl = f"unknown ({e})"
    proc = platform.processor()
    cpu = cpu_model()
    return "\n".join([
        f"rmqcore bench ({'quick' if quick else 'full'} run, best of {ctx.p.repeats})",
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- cpu: {cpu}" + (f" (platform.processor(): {proc})" if proc and proc != cpu else "")
        + f", {os.cpu_count()} logical cores",
        f"- python: {platform.python_version()} ({platform.python_implementation()}), {platform.platform()}",
        f"- crc32 implementation: {impl}; zlib {zlib.ZLIB_RUNTIME_VERSION}",
        f"- record: {ctx.r.get('record_bytes', W.record_size())} bytes per 1 KiB-body message",
        f"- load average (1 min) at start / end: {ctx.load_start:.2f} / {_loadavg():.2f} "
        f"(other work on this {os.cpu_count()}-core VM disturbs the absolute figures)",
    ])


def _loadavg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller N: a smoke run in well under a minute")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="run only these cases (repeatable or comma-separated); memcpy always runs")
    ap.add_argument("--dir", default=None, help="parent directory for the temporary stores (default: the "
                                                "system temp dir); they are always deleted")
    ap.add_argument("--repeats", type=int, default=None, help="override the number of repeats")
    ap.add_argument("--keys", type=int, default=None, help="override the number of keys for the query case")
    ap.add_argument("--list", action="store_true", help="list the case names and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join([name for name, _ in CASES] + [f"{v} (one put variant)" for v in PUT_VARIANTS[1:]]))
        return 0
    params = dataclasses.replace(QUICK if args.quick else FULL)
    if args.repeats:
        params.repeats = args.repeats
    if args.keys:
        params.keys = args.keys
    wanted = {w.strip() for item in args.only for w in item.split(",") if w.strip()}
    known = {name for name, _ in CASES} | set(PUT_VARIANTS)
    unknown = wanted - known
    if unknown:
        ap.error(f"unknown case(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    ctx = Ctx(params, args.dir)
    ctx.quick = args.quick
    failures = []
    t_all = time.perf_counter()
    # "put" runs the three put variants interleaved; "put_batch" / "put_2threads" alone run just those
    put_variants = PUT_VARIANTS
    if "put" not in wanted and wanted & set(PUT_VARIANTS):
        put_variants = tuple(v for v in PUT_VARIANTS if v in wanted)
        wanted.add("put")
    for name, fn in CASES:
        if wanted and name not in wanted and name != "memcpy":
            continue
        log(f"{name} ...")
        t = time.perf_counter()
        try:
            if name == "put":
                fn(ctx, put_variants)
            else:
                fn(ctx)
        except Exception as e:
            traceback.print_exc()
            failures.append((name, f"{type(e).__name__}: {e}"))
        log(f"{name} done in {time.perf_counter() - t:.1f} s")
    log(f"all done in {time.perf_counter() - t_all:.1f} s")
    rows = build_rows(ctx)
    for name, err in failures:
        rows.append((f"{name}: FAILED", "—", "—", err.replace("|", "/")[:200]))
    print(header(ctx, args.quick))
    print()
    print(render(rows))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
