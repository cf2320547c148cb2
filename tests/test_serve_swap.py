"""The store handed to another broker and back (issue 36, item 3): consumerOffset.json written by someone else
after `rmqcore serve` stopped holds offsets newer than the pop journal (config/popJournal.log), and they win; a
consumerOffset.json of this server's own that is older than the journal loses to it. `rmqcore serve` in a child
process, the official rocketmq-python-client."""
from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("rocketmq")

from rmqcore import fastjson  # noqa: E402
from rocketmq import FilterExpression, Producer, SimpleConsumer  # noqa: E402

from serve_util import FAST_CONF, ServerProcess, config, message, prepare, receive_all  # noqa: E402

TOPIC = "swap_t"
GROUP = "swap_g"


def _clients(endpoint):
    producer = Producer(config(endpoint), (TOPIC,))
    producer.startup()
    consumer = SimpleConsumer(config(endpoint), GROUP, {TOPIC: FilterExpression("*")}, 1)
    consumer.startup()
    return producer, consumer


def _shutdown(*clients):
    for c in clients:
        try:
            c.shutdown()
        except Exception:
            pass


def _first_run(store, n=10, ack=4):
    """Send ``n``, receive them all, ack ``ack`` of them (the rest stay in flight), SIGTERM."""
    with ServerProcess(store, FAST_CONF) as s:
        producer, consumer = _clients(s.endpoint)
        try:
            for i in range(n):
                producer.send(message(TOPIC, f"m{i}".encode()))
            got = receive_all(consumer, n, invisible=2, ack=False)
            assert len(got) == n
            for m in got[:ack]:
                consumer.ack(m)
        finally:
            _shutdown(producer, consumer)
        assert s.terminate() == 0
    return sorted(m.body for m in got[:ack])


def _offsets_file(store):
    return os.path.join(store, "config", "consumerOffset.json")


def _queue_ends(store):
    from rmqcore.admin import StoreReader
    with StoreReader(store) as r:
        return {q: r.consume_queues[(TOPIC, q)].max_offset_in_queue for q in r.topics()[TOPIC]}


def _after_restart(store, expect_new: bytes):
    """Serve again: what comes back in 3 s of receiving (past the 2 s invisible time of anything in flight),
    then a new message must be the next one delivered (the consumer works and its cursor is where it should be)."""
    with ServerProcess(store, FAST_CONF) as s:
        producer, consumer = _clients(s.endpoint)
        try:
            again = receive_all(consumer, 100, invisible=2, deadline_s=3)
            producer.send(message(TOPIC, expect_new))
            new = receive_all(consumer, 1, invisible=2)
        finally:
            _shutdown(producer, consumer)
        assert s.terminate() == 0
    return sorted(m.body for m in again), [m.body for m in new]


def test_offsets_another_broker_advanced_win_over_the_journal(tmp_path):
    store = str(tmp_path / "s")
    prepare(store, topics={TOPIC: ("NORMAL", 4)})
    _first_run(store)
    # What a Java broker leaves after its consumers took the rest: the group at every queue's end.
    # (fastjson's text, as RocketMQ's ConsumerOffsetManager.encode(true) writes it)
    path = _offsets_file(store)
    with open(path) as f:
        doc = fastjson.loads(f.read())
    doc["offsetTable"][f"{TOPIC}@{GROUP}"] = _queue_ends(store)
    with open(path, "w") as f:
        f.write(fastjson.dumps(doc, True))
    again, new = _after_restart(store, b"after-swap")
    assert again == []                          # the 6 in flight before the swap were consumed there
    assert new == [b"after-swap"]


def test_offsets_older_than_the_journal_lose_to_it(tmp_path):
    store = str(tmp_path / "s")
    prepare(store, topics={TOPIC: ("NORMAL", 4)})
    acked = _first_run(store)
    older = str(tmp_path / "consumerOffset.older")
    shutil.copy(_offsets_file(store), older)
    # Serve again: the 6 left come back after their invisible time and are acked now.
    with ServerProcess(store, FAST_CONF) as s:
        producer, consumer = _clients(s.endpoint)
        try:
            rest = receive_all(consumer, 6, invisible=2)
        finally:
            _shutdown(producer, consumer)
        assert s.terminate() == 0
    assert sorted(acked + [m.body for m in rest]) == sorted(f"m{i}".encode() for i in range(10))
    # This server's own earlier consumerOffset.json (a restored backup, or one a kill left 5 s behind): the
    # journal is newer, and nothing acked comes back.
    shutil.copy(older, _offsets_file(store))
    again, new = _after_restart(store, b"after-restore")
    assert again == []
    assert new == [b"after-restore"]
