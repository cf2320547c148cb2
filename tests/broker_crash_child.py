"""Child process of test_broker_crash: a broker committing consumer offsets until the parent SIGKILLs it.

Usage: broker_crash_child.py STORE_DIR SEED INTERVAL_MS EXPLICIT

Fills four queues of "orders" (first run only), then commits increasing offsets of group "g" round-robin over the
queues. After each commit it prints ``C <queue> <offset>``; with EXPLICIT 1, every 25 commits it also persists the
offset table itself and prints ``P <offset> ...`` (the offsets that persist covered, one per queue) once the persist
returned. The broker's own timer persists every INTERVAL_MS in any case (with EXPLICIT 0 it is the only writer).
"""
import random
import sys
import time

from rmqcore import Message, StoreConfig
from rmqcore.broker import Broker, BrokerConfig

QUEUES = 4
PER_QUEUE = 3000


def main() -> None:
    root, seed, interval, explicit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    rng = random.Random(seed)
    store_config = StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=20 * 4000,
                               max_hash_slot_num=1000, max_index_num=4000, warm_mapped_file_enable=False,
                               message_index_enable=False)
    broker = Broker.open(root, BrokerConfig(broker_name="crash-broker", flush_consumer_offset_interval=interval),
                         store_config=store_config)
    if broker.store.max_offset("orders", 0) == 0:
        broker.create_topic("orders", queue_nums=QUEUES)
        broker.store.put_batch([Message("orders", b"m", queue_id=q) for q in range(QUEUES) for _ in range(PER_QUEUE)])
        broker.store.wait_dispatched()
    start = [max(broker.query_offset("g", "orders", q), 0) for q in range(QUEUES)]
    print("READY " + " ".join(map(str, start)), flush=True)
    offsets = list(start)
    n = 0
    while True:
        q = n % QUEUES
        offsets[q] = min(offsets[q] + rng.randint(1, 3), PER_QUEUE)
        broker.commit_offset("g", "orders", q, offsets[q])
        print(f"C {q} {offsets[q]}", flush=True)
        n += 1
        if explicit and n % 25 == 0:
            snapshot = list(offsets)
            broker.consumer_offset_manager.persist()
            print("P " + " ".join(map(str, snapshot)), flush=True)
        time.sleep(0.001)


if __name__ == "__main__":
    main()
