"""Child process of test_broker_crash: a broker committing consumer offsets until the parent SIGKILLs it.

Usage: broker_crash_child.py STORE_DIR SEED INTERVAL_MS EXPLICIT
       broker_crash_child.py loop STORE_DIR SEED ROUND      (the broker loop: see ``loop_main``)

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


# -- the broker loop ------------------------------------------------------------------------------------------------

LOOP_QUEUES = 4
LOOP_STORE = dict(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=20 * 4000,
                  max_hash_slot_num=1000, max_index_num=4000, warm_mapped_file_enable=False,
                  message_index_enable=False, message_delay_level="1s 2s", schedule_message_service_enable=True)
# RocketMQ's persist intervals (delayOffset.json every 10 s, consumer offsets every 5 s): a kill a few seconds in
# leaves the broker's progress files well behind what it did.
LOOP_BROKER = dict(broker_name="crash-broker", transaction_timeout=300, transaction_check_interval=100)


def tx_commits(i: int) -> bool:
    """What the producer decides for transaction ``i`` (and answers when checked): commit or roll back."""
    return (i // 4) % 2 == 0


def loop_checker(m):
    return tx_commits(int(m.properties["ID"].split(":")[1]))


def loop_main(root: str, seed: int, round_: int) -> None:
    """Sends, until killed, in turn: two delayed messages (topic "Late", DELAY level 1 or 2; every other second
    one a 5.x timer message to "Timed", TIMER_DELAY_MS 100-1500, printed ``T id``), a transactional
    half ("Pay"; ended at once by commit or rollback, or every third one left to the check service, which runs
    every 100 ms and answers as the producer decides) and a plain message ("Plain") followed by an offset commit
    of group "g". Each acknowledged step is printed: ``D id`` (delayed put), ``H id`` (half put), ``E id``
    (transaction ended), ``O queue offset`` (offset committed); ids are ``ROUND:i``."""
    from rmqcore.status import PutStatus
    rng = random.Random(seed)
    broker = Broker.open(root, BrokerConfig(**LOOP_BROKER), store_config=StoreConfig(**LOOP_STORE),
                         transaction_checker=loop_checker)
    for topic in ("Late", "Timed", "Pay", "Plain"):
        if broker.topic_config_manager.select_topic_config(topic) is None:
            broker.create_topic(topic, queue_nums=LOOP_QUEUES)
    print("READY", flush=True)
    i = 0
    while True:
        ident = f"{round_}:{i}"
        kind = i % 4
        q = rng.randrange(LOOP_QUEUES)
        if kind == 1 and (i // 4) % 2:
            r = broker.send(Message("Timed", b"w" * rng.randint(1, 300), queue_id=q,
                                    properties={"TIMER_DELAY_MS": str(rng.randint(100, 1500)), "ID": ident}))
            if r.status is PutStatus.PUT_OK:
                print("T", ident, flush=True)
        elif kind < 2:
            r = broker.send(Message("Late", b"d" * rng.randint(1, 300), queue_id=q,
                                    properties={"DELAY": str(1 + rng.randrange(2)), "ID": ident}))
            if r.status is PutStatus.PUT_OK:
                print("D", ident, flush=True)
        elif kind == 2:
            r = broker.send(Message("Pay", b"t" * rng.randint(1, 300), queue_id=q,
                                    properties={"TRAN_MSG": "true", "PGROUP": "pg", "ID": ident}))
            if r.status is PutStatus.PUT_OK:
                print("H", ident, flush=True)
                if (i // 4) % 3 != 0:
                    broker.end_transaction(r.commitlog_offset, "pg", tx_commits(i))
                    print("E", ident, flush=True)
        else:
            broker.send(Message("Plain", b"p", queue_id=q, properties={"ID": ident}))
            hi = broker.store.max_offset("Plain", q)
            off = rng.randint(max(0, broker.query_offset("g", "Plain", q)), hi)
            broker.commit_offset("g", "Plain", q, off)
            print("O", q, off, flush=True)
        i += 1
        time.sleep(0.0005)


if __name__ == "__main__":
    if sys.argv[1] == "loop":
        loop_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
