"""``rmqcore demo broker``: the broker's state layer at work on a store directory.

Producers send through the Broker (the topic is created on its first send), a consumer group pulls every queue and
commits its offsets, a second group fails on some messages and sends them back: they go through its retry topic and,
past the group's retry max times, into its dead-letter topic. Then the broker closes and the config files it left
are shown (the same text a Java broker writes), and the broker is reopened to show the offsets came back.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time

from .. import Message, StoreConfig
from ..status import GetStatus
from .broker import Broker
from .broker_config import BrokerConfig
from .subscription_group_config import SubscriptionGroupConfig

TOPIC = "DemoOrders"
GOOD_GROUP = "billing"
BAD_GROUP = "flaky-audit"
PRODUCERS = 4
QUEUES = 4
FAILURE_EVERY = 1000       # the flaky group fails on one message in this many
RETRY_MAX_TIMES = 3


def _drain(broker, group, topic, queue_id, handle) -> int:
    """Pull one queue from the group's committed offset to its end, handing each message to ``handle``, committing
    after each batch, as a push consumer does. Returns how many messages it saw."""
    seen = 0
    offset = max(broker.query_offset(group, topic, queue_id), 0)
    while True:
        r = broker.pull(group, topic, queue_id, offset, max_count=32)
        if r.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
            offset = r.next_begin_offset            # RocketMQ's PULL_OFFSET_MOVED: carry on where the broker says
            continue
        if r.status is not GetStatus.FOUND:
            return seen
        for m in r.messages:
            handle(m)
        seen += len(r.messages)
        offset = r.next_begin_offset
        del r
        broker.commit_offset(group, topic, queue_id, offset)


def run(path: str | None = None, messages: int = 10_000) -> int:
    """Run the demo on ``path`` (a new temporary directory when None). Returns the exit status."""
    if messages < 1:
        print(f"rmqcore demo broker: messages must be >= 1, got {messages}")
        return 2
    root = path or tempfile.mkdtemp(prefix="rmqcore-broker-demo-")
    store_config = StoreConfig(mapped_file_size_commit_log=64 * 1024 * 1024,
                               mapped_file_size_consume_queue=300000 * 20,
                               max_hash_slot_num=100_000, max_index_num=400_000)
    config = BrokerConfig(broker_name="demo-broker")
    print(f"rmqcore demo broker: {messages:,} messages from {PRODUCERS} producers into {root}")
    with Broker.open(root, config, store_config=store_config) as broker:
        # -- producers ----------------------------------------------------------------------------------------
        errors = []

        def produce(p: int) -> None:
            try:
                for i in range(p, messages, PRODUCERS):
                    broker.send(Message(TOPIC, b"order %d" % i, queue_id=-1, tags="created", keys=[f"order-{i}"]))
            except Exception as e:                    # shown below, and the demo fails
                errors.append(e)
        t0 = time.perf_counter()
        threads = [threading.Thread(target=produce, args=(p,)) for p in range(PRODUCERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            print(f"  send failed: {errors[0]!r}")
            return 1
        took = time.perf_counter() - t0
        broker.store.wait_dispatched(60)
        tc = broker.topics()[TOPIC]
        print(f"  send        {messages:,} messages in {took:.2f} s ({messages / took:,.0f}/s); topic {TOPIC} "
              f"auto-created with {tc.write_queue_nums} queues, perm {tc.perm}")

        # -- a consumer group that succeeds -------------------------------------------------------------------
        t0 = time.perf_counter()
        consumed = sum(_drain(broker, GOOD_GROUP, TOPIC, q, lambda m: None) for q in range(tc.read_queue_nums))
        took = time.perf_counter() - t0
        offsets = {q: broker.query_offset(GOOD_GROUP, TOPIC, q) for q in range(tc.read_queue_nums)}
        print(f"  consume     group {GOOD_GROUP}: {consumed:,} messages pulled in {took:.2f} s, committed offsets "
              f"{offsets}, lag {broker.lag(GOOD_GROUP)}")

        # -- a consumer group that fails on some messages -----------------------------------------------------
        broker.update_group(SubscriptionGroupConfig(BAD_GROUP, retry_max_times=RETRY_MAX_TIMES))

        def flaky(m) -> None:
            key = m.keys[0] if m.keys else ""
            if int(key.rsplit("-", 1)[1]) % FAILURE_EVERY == 0:
                broker.send_back(m, BAD_GROUP)      # "RECONSUME_LATER"

        for q in range(tc.read_queue_nums):
            _drain(broker, BAD_GROUP, TOPIC, q, flaky)
        failing = len(range(0, messages, FAILURE_EVERY))
        retry_topic = f"%RETRY%{BAD_GROUP}"
        rounds = 0
        while True:
            broker.store.wait_dispatched(60)
            n = _drain(broker, BAD_GROUP, retry_topic, 0, flaky)
            if n == 0:
                break
            rounds += 1
            print(f"  retry       round {rounds}: {n} messages redelivered from {retry_topic} "
                  f"(reconsume times {rounds}), failed again")
        broker.store.wait_dispatched(60)
        dlq_topic = f"%DLQ%{BAD_GROUP}"
        dead = broker.store.max_offset(dlq_topic, 0)
        r = broker.pull(BAD_GROUP, dlq_topic, 0, 0, max_count=1)
        sample = r.messages[0] if r.messages else None
        print(f"  DLQ         {dead} of {failing} failing messages in {dlq_topic} after {RETRY_MAX_TIMES} retries"
              + (f"; one of them: reconsume times {sample.reconsume_times}, RETRY_TOPIC "
                 f"{sample.properties.get('RETRY_TOPIC')}, ORIGIN_MESSAGE_ID "
                 f"{sample.properties.get('ORIGIN_MESSAGE_ID')}" if sample is not None else ""))
        del r, sample
        print("  note        retry messages carry DELAY (3 + reconsume times) as RocketMQ sets it; until the store's "
              "ScheduleMessageService is in, they are due at once")
        if dead != failing:
            print(f"  expected {failing} messages in the DLQ, found {dead}")
            return 1

    # -- the files it left ----------------------------------------------------------------------------------------
    config_dir = os.path.join(root, "config")
    print(f"  files       {config_dir}:")
    for name in sorted(os.listdir(config_dir)):
        full = os.path.join(config_dir, name)
        print(f"    {name:<28} {os.path.getsize(full):>8,} bytes")
    with open(os.path.join(config_dir, "consumerOffset.json"), encoding="utf-8") as f:
        text = f.read()
    print("  consumerOffset.json (RocketMQ's fastjson text: integer queue ids unquoted):")
    for line in text.splitlines()[:12]:
        print("    " + line.replace("\t", "  "))
    with Broker.open(root, config, store_config=store_config) as broker:
        back = {q: broker.query_offset(GOOD_GROUP, TOPIC, q) for q in range(QUEUES)}
    print(f"  reopen      offsets of {GOOD_GROUP} read back: {back}")
    if back != offsets:
        print("  offsets differ after reopen")
        return 1
    return 0


if __name__ == "__main__":
    import sys
    raise SystemExit(run(sys.argv[1] if len(sys.argv) > 1 else None,
                         int(sys.argv[2]) if len(sys.argv) > 2 else 10_000))
