"""MessageStore: sequential get_messages in batches of 32, query_message by key with RMQ_BENCH_KEYS (1,000,000)
keys indexed, offset_by_time, and dispatch keeping up with full-speed put_batch."""
import random

import pytest

from bench import workloads as W
from bench.workloads import record_rate as rate


@pytest.mark.benchmark(group="store get")
def test_get_messages_32(benchmark, filled_store):
    store, n = filled_store
    end = store.max_offset(W.TOPIC, 0)
    state = {"offset": 0}

    def pull():
        off = state["offset"]
        if off >= end:
            off = 0
        g = store.get_messages("bench-group", W.TOPIC, 0, off, 32)
        state["offset"] = g.next_begin_offset
        return len(g.messages)

    assert benchmark(pull) > 0
    rate(benchmark, 32, "msgs_per_s")


@pytest.mark.benchmark(group="store get")
def test_get_messages_whole_queue(benchmark, filled_store):
    store, n = filled_store
    end = store.max_offset(W.TOPIC, 0)
    got = benchmark.pedantic(W.get_all, args=(store, W.TOPIC, 0, 0, end), rounds=5, warmup_rounds=1)
    assert got == end
    rate(benchmark, end, "msgs_per_s")


@pytest.mark.benchmark(group="store index")
def test_query_message(benchmark, keyed_store):
    store, n = keyed_store
    rng = random.Random(7)
    keys = [f"key-{rng.randrange(n):08d}" for _ in range(4096)]
    state = {"i": 0}

    def query():
        i = state["i"]
        state["i"] = (i + 1) & 4095
        return len(store.query_message(W.TOPIC, keys[i], 32))

    benchmark.extra_info["keys_indexed"] = n
    assert benchmark(query) == 1


@pytest.mark.benchmark(group="store index")
def test_look_message(benchmark, keyed_store):
    store, n = keyed_store
    rng = random.Random(8)
    offsets = [m.commitlog_offset for k in range(256)
               for m in store.query_message(W.TOPIC, f"key-{rng.randrange(n):08d}", 1)]
    state = {"i": 0}

    def look():
        i = state["i"]
        state["i"] = (i + 1) % len(offsets)
        return store.look_message(offsets[i])

    assert benchmark(look) is not None


@pytest.mark.benchmark(group="store index")
def test_offset_by_time(benchmark, keyed_store):
    store, n = keyed_store
    first = store.get_messages("bench", W.TOPIC, 0, 0, 1).messages[0].store_timestamp
    last_off = store.max_offset(W.TOPIC, 7) - 1
    last = store.get_messages("bench", W.TOPIC, 7, last_off, 1).messages[0].store_timestamp
    rng = random.Random(9)
    args = [(rng.randrange(8), rng.randint(first, last)) for _ in range(4096)]
    state = {"i": 0}

    def lookup():
        i = state["i"]
        state["i"] = (i + 1) & 4095
        qid, ts = args[i]
        return store.offset_by_time(W.TOPIC, qid, ts)

    assert benchmark(lookup) >= 0


@pytest.fixture
def live_stores(bench_dir):
    """Stores opened by the dispatch benchmark's rounds; whatever a round leaves open is closed here."""
    opened = []
    yield opened
    for store, d in opened:
        store.close()
        d.__exit__(None, None, None)


@pytest.mark.benchmark(group="store dispatch")
def test_dispatch_under_full_speed_put_batch(benchmark, bench_dir, live_stores):
    n = 50_000
    info = {}

    def setup():
        d = W.temp_dir(bench_dir)
        root = d.__enter__()
        store = W.open_store(root, W.bench_config(256 * W.MiB))
        live_stores.append((store, d))
        W.prewarm_store(store, queues=4)
        msgs = W.make_messages(n, queues=4, keys=True, tags="TagA", start=10_000_000)
        batches = [msgs[i:i + 1000] for i in range(0, n, 1000)]
        return (store, batches), {}

    def put_and_dispatch(store, batches):
        sampler = W.LagSampler(store)
        sampler.start()
        for b in batches:
            store.put_batch(b)
        ok = store.wait_dispatched(300)
        sampler.stop()
        info["max_lag_ms"] = max(info.get("max_lag_ms", 0), sampler.max_lag_ms)
        info["max_behind_bytes"] = max(info.get("max_behind_bytes", 0), sampler.max_behind_bytes)
        return ok

    def teardown(store, batches):
        for i, (s, d) in enumerate(live_stores):
            if s is store:
                live_stores.pop(i)
                s.close()
                d.__exit__(None, None, None)
                break

    assert benchmark.pedantic(put_and_dispatch, setup=setup, teardown=teardown, rounds=3)
    benchmark.extra_info.update(info)
    rate(benchmark, n, "records_per_s")
