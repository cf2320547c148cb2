"""CommitLog appends with 1 KiB bodies, async flush, on pre-faulted 256 MiB files: one put_message call per
message, put_messages in batches of 1000, and two threads calling put_message at once. Each round puts fresh
messages (built outside the timing); the rounds are fixed so the run stays inside the warmed files."""
import pytest

from bench import workloads as W
from bench.workloads import record_rate as rate

PER_ROUND = 1000


def _fresh(n=PER_ROUND):
    return lambda: ((W.make_messages(n),), {})


@pytest.mark.benchmark(group="commitlog put")
def test_put_message_1k(benchmark, warm_log):
    cl = warm_log.cl
    before = warm_log.capacity()
    benchmark.pedantic(lambda msgs: W.put_each(cl, msgs), setup=_fresh(), rounds=30, warmup_rounds=2)
    assert warm_log.capacity() < before
    rate(benchmark, PER_ROUND, "msgs_per_s")


@pytest.mark.benchmark(group="commitlog put")
def test_put_messages_batch_1000(benchmark, warm_log):
    cl = warm_log.cl

    def put(msgs):
        results = cl.put_messages(msgs)
        return len(results)

    assert benchmark.pedantic(put, setup=_fresh(), rounds=50, warmup_rounds=2) == PER_ROUND
    rate(benchmark, PER_ROUND, "msgs_per_s")


@pytest.mark.benchmark(group="commitlog put")
def test_put_message_two_threads(benchmark, warm_log):
    cl = warm_log.cl
    per_thread = 2500

    def setup():
        return ([W.make_messages(per_thread), W.make_messages(per_thread)],), {}

    benchmark.pedantic(lambda lists: W.put_threads(cl, lists), setup=setup, rounds=10, warmup_rounds=1)
    rate(benchmark, 2 * per_thread, "msgs_per_s")
