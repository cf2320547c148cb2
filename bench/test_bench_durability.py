"""Durability: SYNC_FLUSH puts through group commit (1, 4, 16 producers) beside one fdatasync per message, the
recovery scan (scan_records + CRC) over a commitlog, the abnormal reopen of that store, and the reopen of a store
whose SYNC_FLUSH producer process was killed with SIGKILL. Rounds are fixed and small; nothing asserts on time.
``python -m bench --only sync_flush,recovery,crash_reopen`` measures the same with same-run ratios."""
import os
import shutil
import tempfile

import pytest

from bench import workloads as W
from bench.workloads import record_rate as rate

SYNC_PUTS_PER_PRODUCER = 100
REC_BYTES = 128 * W.MiB


@pytest.mark.benchmark(group="sync flush")
def test_fdatasync_per_message(benchmark, bench_dir):
    n = 200
    got = benchmark.pedantic(lambda: W.fsync_per_message(bench_dir, float("inf"), n)[0], rounds=5, warmup_rounds=1)
    assert got == n
    rate(benchmark, n, "msgs_per_s")


@pytest.mark.benchmark(group="sync flush")
@pytest.mark.parametrize("producers", W.SYNC_PRODUCERS)
def test_sync_flush_put(benchmark, bench_dir, producers):
    n = SYNC_PUTS_PER_PRODUCER * producers
    runs = []
    with W.sync_store(bench_dir) as (store, cap):
        assert cap > 7 * n

        def run():
            r = W.sync_put_run(store, producers, float("inf"), n)
            runs.append(r)
            return r["puts"]

        assert benchmark.pedantic(run, rounds=5, warmup_rounds=1) == n
    rate(benchmark, n, "msgs_per_s")
    benchmark.extra_info["puts_per_flush"] = round(sum(r["served"] for r in runs) /
                                                   max(1, sum(r["flushes"] for r in runs)), 2)


@pytest.mark.benchmark(group="sync flush")
@pytest.mark.parametrize("how", ["put_async", "wait_false", "aput"])
def test_sync_flush_pipelined(benchmark, bench_dir, how):
    # 16 producers with SYNC_WINDOW puts in flight each; a put counts once a flush covered it.
    n = 16 * W.SYNC_WINDOW * 8

    def run(store):
        if how == "aput":
            return W.aio_put_run(store, 16, W.SYNC_WINDOW, float("inf"), n)["puts"]
        return W.async_put_run(store, 16, W.SYNC_WINDOW, float("inf"), n, nowait=how == "wait_false")["puts"]

    with W.sync_store(bench_dir) as (store, cap):
        assert cap > 7 * n
        got = benchmark.pedantic(lambda: run(store), rounds=5, warmup_rounds=1)
        assert got == n
    rate(benchmark, n, "msgs_per_s")


@pytest.fixture(scope="module")
def written_commitlog(bench_dir):
    """A store directory holding only a ~128 MiB commitlog (64 MiB files) of 1 KiB-body records."""
    with W.temp_dir(bench_dir, "rmqbench-recovery-") as root:
        cfg = W.bench_config(64 * W.MiB)
        size, records = W.write_commitlog(root, cfg, REC_BYTES)
        yield root, cfg, size, records


@pytest.mark.benchmark(group="recovery")
def test_recovery_scan_crc(benchmark, written_commitlog):
    root, _cfg, size, records = written_commitlog
    mc = W.MappedCommitLog(root)
    try:
        got, nbytes = benchmark(mc.scan, True)
    finally:
        mc.close()
    assert got == records and 0 < nbytes <= size
    rate(benchmark, nbytes, "bytes_per_s")


@pytest.mark.benchmark(group="recovery")
def test_abnormal_reopen_no_checkpoint(benchmark, written_commitlog):
    """MessageStore.open with the abort file and no checkpoint: CRC scan of every file + dispatch of every record
    (the consume queues and index of the previous round are deleted first)."""
    root, cfg, size, records = written_commitlog
    opened = []

    def setup():
        while opened:
            opened.pop().close()
        for sub in ("consumequeue", "index"):
            shutil.rmtree(os.path.join(root, sub), ignore_errors=True)
        W.mark_crashed(root, drop_checkpoint=True)
        return (), {}

    def reopen():
        store = W.open_store(root, cfg)
        opened.append(store)
        return store.recovery.get("records")

    try:
        assert benchmark.pedantic(reopen, setup=setup, rounds=3) == records
    finally:
        while opened:
            opened.pop().close()
    rate(benchmark, size, "bytes_per_s")


@pytest.mark.benchmark(group="recovery")
def test_reopen_after_sigkill(benchmark, bench_dir):
    """A child puts with SYNC_FLUSH (batches of 100) and is SIGKILLed after 10,000 acknowledged puts; the parent's
    MessageStore.open of that store is timed."""
    n = 10_000
    state = {"root": None, "store": None, "acked": 0}
    found = []

    def cleanup():
        if state["store"] is not None:
            state["store"].close()
            state["store"] = None
        if state["root"] is not None:
            shutil.rmtree(state["root"], ignore_errors=True)
            state["root"] = None

    def setup():
        cleanup()
        state["root"] = tempfile.mkdtemp(prefix="rmqbench-crash-", dir=bench_dir)
        state["acked"] = W.crashed_store(state["root"], n)
        return (), {}

    def reopen():
        state["store"] = store = W.open_store(state["root"], W.crash_config())
        found.append((W.queue_records(store), state["acked"]))
        return store.runtime_info()["recovery"]

    try:
        info = benchmark.pedantic(reopen, setup=setup, rounds=3)
    finally:
        cleanup()
    assert all(recovered >= acked for recovered, acked in found)
    benchmark.extra_info.update({k: info.get(k) for k in ("records", "truncated_bytes", "rebuilt_units",
                                                          "rebuilt_keys")})
