"""The console's /metrics scrape, as a benchmark (it was a timed test: a time limit belongs here, not in the
suite, on a shared 2-core machine). Run with ``python -m pytest bench/test_bench_console.py --benchmark-only``."""
import pytest

pytest.importorskip("prometheus_client")


def test_metrics_scrape(benchmark, tmp_path):
    """A broker with 12 topics x 8 queues, 12 groups with offsets in 3 topics each (288 queue offsets), 30
    clients and 12 RPC series (about 450 series in all): what one /metrics scrape costs (1 % of a core at one
    scrape a second is 10 ms). The cost grows with the series (most of it is prometheus_client writing each line)."""
    from prometheus_client.exposition import generate_latest

    from rmqcore import Message
    from rmqcore.broker import Broker, SubscriptionGroupConfig
    from rmqcore.console.metrics import make_registry
    from rmqcore.console.standalone import BrokerHost
    from rmqcore import StoreConfig
    config = StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=20 * 1000,
                         max_hash_slot_num=1001, max_index_num=4000, warm_mapped_file_enable=False)
    with Broker.open(str(tmp_path / "store"), store_config=config) as broker:
        host = BrokerHost(broker)
        for t in range(12):
            broker.create_topic(f"topic-{t}", 8)
            for i in range(16):
                broker.send(Message(f"topic-{t}", b"x" * 100, i % 8))
            host.events.on_messages_in(f"topic-{t}", [100] * 16)
        broker.store.wait_dispatched()
        for g in range(12):
            broker.update_group(SubscriptionGroupConfig(f"group-{g}"))
            for t in range(g % 10, g % 10 + 3):
                for qid in range(8):
                    broker.commit_offset(f"group-{g}", f"topic-{t}", qid, 1)
                host.events.on_messages_out(f"topic-{t}", f"group-{g}", 8, 800)
        for c in range(30):
            host.events.on_client(f"c{c}", kind="PUSH_CONSUMER", group=f"group-{c % 12}", language="JAVA")
        for m in range(12):
            host.events.on_rpc(f"Method{m}", "OK", 0.002)
        registry = make_registry(host)
        benchmark.group = "console /metrics scrape"
        text = benchmark(generate_latest, registry)
        benchmark.extra_info["lines"] = text.count(b"\n")
        assert text.count(b'rocketmq_consumer_lag_messages{') == 36
