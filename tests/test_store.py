"""MessageStore: put/get/query/offset-by-time as RocketMQ's DefaultMessageStore (ported test intents), long
polling, locking, reopening, threads, and a differential check of consume queues and index against the commitlog."""
import os
import random
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rmqcore import (CorruptRecordError, GetStatus, Message, MessageStore, PutStatus, StoreClosedError, StoreConfig,
                     StoreLockedError)
from rmqcore import reference as R
from rmqcore.consume_queue import CQ_DTYPE


def cfg(**kw):
    base = dict(mapped_file_size_commit_log=256 * 1024, mapped_file_size_consume_queue=20 * 64,
                max_message_size=32 * 1024, max_hash_slot_num=97, max_index_num=300,
                warm_mapped_file_enable=False, flush_interval_commit_log=50, flush_interval_consume_queue=50)
    base.update(kw)
    return StoreConfig(**base)


@pytest.fixture
def store(tmp_path):
    s = MessageStore.open(str(tmp_path / "store"), cfg())
    yield s
    s.close()


def put_n(store, n, topic="TopicA", queue_id=0, **kw):
    return [store.put(Message(topic, f"body-{i}".encode(), queue_id, keys=[f"key-{i}"], **kw)) for i in range(n)]


def test_layout_is_rocketmq_s(store):
    put_n(store, 3)
    store.wait_dispatched()
    for name in ("commitlog", "consumequeue", "index", "checkpoint", "abort", "lock"):
        assert os.path.exists(os.path.join(store.path, name)), name
    assert os.listdir(os.path.join(store.path, "consumequeue", "TopicA")) == ["0"]
    assert os.path.getsize(os.path.join(store.path, "checkpoint")) == 4096


def test_write_and_read_back(store):
    results = put_n(store, 200, queue_id=1)
    assert all(r.status is PutStatus.PUT_OK for r in results)
    store.wait_dispatched()
    assert store.max_offset("TopicA", 1) == 200 and store.min_offset("TopicA", 1) == 0
    got, offset = [], 0
    while True:
        g = store.get_messages("g", "TopicA", 1, offset, 32)
        if g.status is not GetStatus.FOUND:
            assert g.status is GetStatus.OFFSET_OVERFLOW_ONE
            break
        assert len(g.messages) <= 32 and g.next_begin_offset == offset + len(g.messages)
        got.extend(g.messages)
        offset = g.next_begin_offset
    assert [bytes(m.body) for m in got] == [f"body-{i}".encode() for i in range(200)]
    assert [m.queue_offset for m in got] == list(range(200))
    assert [m.commitlog_offset for m in got] == [r.commitlog_offset for r in results]


def test_pulls_that_cross_commitlog_files_keep_every_body(tmp_path):
    # A pull holds one commitlog file's view at a time (a file switch drops the last one): every message of a pull
    # spanning files must still read its own body afterwards, from whichever file it lies in.
    with MessageStore.open(str(tmp_path / "s"), cfg(mapped_file_size_commit_log=64 * 1024)) as store:
        bodies = [bytes([i % 251]) * 2000 for i in range(150)]
        for i, b in enumerate(bodies):
            assert store.put(Message("Span", b, 0)).ok
            store.put(Message("Other", b"x" * 500, 0))         # another queue's records in between
        store.wait_dispatched()
        assert len(store.commit_log.mapped_file_queue._files) >= 6
        pulls, offset = [], 0
        while offset < len(bodies):
            g = store.get_messages("g", "Span", 0, offset, 32)
            assert g.status is GetStatus.FOUND
            pulls.append(g.messages)
            offset = g.next_begin_offset
        file_size = 64 * 1024
        assert any(len({m.commitlog_offset // file_size for m in msgs}) > 1 for msgs in pulls)
        assert [bytes(m.body) for msgs in pulls for m in msgs] == bodies


def test_get_statuses(store):
    put_n(store, 5)
    store.wait_dispatched()
    g = store.get_messages("g", "Nope", 0, 0)
    assert g.status is GetStatus.NO_MATCHED_LOGIC_QUEUE and g.next_begin_offset == 0
    g = store.get_messages("g", "TopicA", 0, 5)
    assert g.status is GetStatus.OFFSET_OVERFLOW_ONE and g.next_begin_offset == 5 and g.max_offset == 5
    g = store.get_messages("g", "TopicA", 0, 9)
    assert g.status is GetStatus.OFFSET_OVERFLOW_BADLY and g.next_begin_offset == 0   # min offset is 0
    g = store.get_messages("g", "TopicA", 0, 2, 2)
    assert g.status is GetStatus.FOUND and [m.queue_offset for m in g.messages] == [2, 3]
    assert g.next_begin_offset == 4 and (g.min_offset, g.max_offset) == (0, 5)
    with pytest.raises(ValueError):
        store.get_messages("g", "TopicA", 0, -1)


def test_max_transfer_count_and_bytes(tmp_path):
    s = MessageStore.open(str(tmp_path / "s"), cfg(max_transfer_count_on_message_in_memory=8,
                                                    max_transfer_bytes_on_message_in_memory=3000))
    try:
        for i in range(40):
            s.put(Message("T", b"x" * 500, 0))
        s.wait_dispatched()
        g = s.get_messages("g", "T", 0, 0, 32)
        size = g.messages[0].store_size
        assert len(g.messages) == min(8, 3000 // size) and g.buffer_total_size == len(g.messages) * size
    finally:
        s.close()


def test_tag_filter_matches_hash_then_exact_tag(store):
    # "Aa" and "BB" have the same Java hashCode: the hash matches both, the exact check keeps only one.
    assert R.java_hash_code("Aa") == R.java_hash_code("BB")
    for tag in ["Aa", "BB", "Cc", "Aa", "BB"]:
        store.put(Message("T", tag.encode(), 0, tags=tag))
    store.wait_dispatched()
    g = store.get_messages("g", "T", 0, 0, 32, tags="Aa")
    assert [m.tags for m in g.messages] == ["Aa", "Aa"] and g.next_begin_offset == 5
    g = store.get_messages("g", "T", 0, 0, 32, tags="Cc || BB")
    assert [m.tags for m in g.messages] == ["BB", "Cc", "BB"]
    g = store.get_messages("g", "T", 0, 0, 32, tags="Zz")
    assert g.status is GetStatus.NO_MATCHED_MESSAGE and g.next_begin_offset == 5
    assert len(store.get_messages("g", "T", 0, 0, 32, tags="*").messages) == 5
    unit = store.find_consume_queue("T", 0).get_unit(0)
    assert unit[2] == R.java_hash_code("Aa")                 # tagsCode in the consume queue


def test_query_message_by_key_and_uniq_key(store):
    results = put_n(store, 50, topic="Orders")
    store.wait_dispatched()
    hits = store.query_message("Orders", "key-7")
    assert [bytes(m.body) for m in hits] == [b"body-7"]
    uniq = results[9].uniq_key
    assert [m.uniq_key for m in store.query_message("Orders", uniq)] == [uniq]
    assert store.query_message("Orders", "key-7", begin=0, end=1) == []     # time window excludes it
    assert store.query_message("Other", "key-7") == []
    for _ in range(3):
        store.put(Message("Orders", b"dup", 0, keys=["same"]))
    store.wait_dispatched()
    assert len(store.query_message("Orders", "same", max_num=2)) == 2
    assert len(store.query_message("Orders", "same")) == 3


def test_offset_by_time_nearest_side(store):
    stamps = []
    for i in range(6):
        r = store.put(Message("T", b"x", 0))
        stamps.append(r.store_timestamp)
        time.sleep(0.02)
    store.wait_dispatched()
    for i, ts in enumerate(stamps):
        assert store.offset_by_time("T", 0, ts) == i
    assert store.offset_by_time("T", 0, stamps[2] + 3) == 2            # nearer to the left
    assert store.offset_by_time("T", 0, stamps[3] - 2) == 3            # nearer to the right
    assert store.offset_by_time("T", 0, 0) == 0
    assert store.offset_by_time("T", 0, stamps[-1] + 10_000) == 5
    assert store.offset_by_time("Nope", 0, stamps[0]) == 0


def test_look_message(store):
    r = put_n(store, 3)[1]
    m = store.look_message(r.commitlog_offset)
    assert m.msg_id == r.msg_id and m.keys == ["key-1"]
    assert store.look_message(r.commitlog_offset + 1) is None
    assert store.look_message(-5) is None
    assert store.look_message(10 ** 12) is None


def test_long_polling_returns_when_a_message_arrives(store):
    put_n(store, 1)
    store.wait_dispatched()
    threading.Timer(0.2, lambda: store.put(Message("TopicA", b"late", 0))).start()
    t0 = time.monotonic()
    g = store.get_messages("g", "TopicA", 0, 1, 32, wait=5)
    assert g.status is GetStatus.FOUND and bytes(g.messages[0].body) == b"late"
    assert 0.15 < time.monotonic() - t0 < 3
    t0 = time.monotonic()
    g = store.get_messages("g", "TopicA", 0, 2, 32, wait=0.3)
    assert g.status is GetStatus.OFFSET_OVERFLOW_ONE and time.monotonic() - t0 >= 0.29


def test_every_long_polling_reader_is_woken_by_the_dispatch_of_its_message(store):
    # The dispatcher wakes readers only when some wait (a count kept by get_messages): each of several readers
    # waiting at once, round after round, must return with its message as soon as it is dispatched, not at the
    # 0.5 s re-check a missed wake-up would leave it to.
    put_n(store, 1)
    store.wait_dispatched()
    queues = 3
    offsets = [store.max_offset("TopicA", q) for q in range(queues)]
    for rnd in range(8):
        got = {}

        def read(q):
            t = time.monotonic()
            g = store.get_messages("g", "TopicA", q, offsets[q], 32, wait=5)
            got[q] = (g, time.monotonic() - t)

        readers = [threading.Thread(target=read, args=(q,)) for q in range(queues)]
        for t in readers:
            t.start()
        time.sleep(0.05)                 # the readers wait by now
        for q in range(queues):
            assert store.put(Message("TopicA", b"round-%d" % rnd, q)).ok
        for t in readers:
            t.join(10)
        for q in range(queues):
            g, took = got[q]
            assert g.status is GetStatus.FOUND and bytes(g.messages[0].body) == b"round-%d" % rnd
            assert took < 0.45, f"round {rnd}, queue {q}: the reader returned after {took:.3f} s"
            offsets[q] += 1


def test_wait_on_closing_store_raises(tmp_path):
    s = MessageStore.open(str(tmp_path / "s"), cfg())
    errors = []

    def pull():
        try:
            s.get_messages("g", "T", 0, 0, 32, wait=10)
        except StoreClosedError as e:
            errors.append(e)

    t = threading.Thread(target=pull)
    t.start()
    time.sleep(0.2)
    s.close()
    t.join(5)
    assert not t.is_alive() and len(errors) == 1
    with pytest.raises(StoreClosedError):
        s.put(Message("T", b"x"))


def test_second_open_is_refused(tmp_path):
    path = str(tmp_path / "s")
    s = MessageStore.open(path, cfg())
    try:
        with pytest.raises(StoreLockedError):
            MessageStore.open(path, cfg())
        assert s.put(Message("T", b"still fine")).ok
    finally:
        s.close()


def test_reopen_keeps_queues_index_and_offsets(tmp_path):
    path = str(tmp_path / "s")
    with MessageStore.open(path, cfg()) as s:
        put_n(s, 120, topic="A", queue_id=2)
    assert not os.path.exists(os.path.join(path, "abort"))
    with MessageStore.open(path, cfg()) as s:
        assert s.max_offset("A", 2) == 120
        assert [bytes(m.body) for m in s.query_message("A", "key-99")] == [b"body-99"]
        r = s.put(Message("A", b"next", 2))
        assert r.queue_offset == 120
        s.wait_dispatched()
        g = s.get_messages("g", "A", 2, 118, 32)
        assert [m.queue_offset for m in g.messages] == [118, 119, 120]


def test_threads_put_and_get_at_once(store):
    n_threads, per = 4, 300
    errors = []

    def producer(k):
        try:
            for i in range(per):
                assert store.put(Message("MT", f"{k}-{i}".encode(), k % 2, keys=[f"k{k}-{i}"])).ok
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def consumer():
        offset = 0
        deadline = time.time() + 20
        while offset < n_threads * per // 2 and time.time() < deadline:
            g = store.get_messages("g", "MT", 0, offset, 32, wait=0.5)
            if g.status is GetStatus.FOUND:
                offset = g.next_begin_offset

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(n_threads)]
    threads.append(threading.Thread(target=consumer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    store.wait_dispatched()
    assert store.max_offset("MT", 0) + store.max_offset("MT", 1) == n_threads * per
    for q in (0, 1):
        bodies, off = set(), 0
        while True:
            g = store.get_messages("g", "MT", q, off, 32)
            if g.status is not GetStatus.FOUND:
                break
            assert [m.queue_offset for m in g.messages] == list(range(off, off + len(g.messages)))
            bodies.update(bytes(m.body) for m in g.messages)
            off = g.next_begin_offset
        assert len(bodies) == n_threads * per // 2


def check_consistent(store, expected):
    """Every consume-queue unit points at a record with its topic, queue, queue offset and size; every key of
    every message is found through the index; the reference readers agree with the Cython ones."""
    store.wait_dispatched()
    for (topic, qid), msgs in expected.items():
        cq = store.find_consume_queue(topic, qid, create=False)
        assert cq.max_offset_in_queue == len(msgs)
        units = []
        for mf in cq.mapped_file_queue.mapped_files:
            raw = bytes(mf.select(0))
            units += R.decode_cq_units(raw)
            assert [tuple(u) for u in np.frombuffer(raw, dtype=CQ_DTYPE)] == R.decode_cq_units(raw)
        assert len(units) == len(msgs)
        for i, ((off, size, tags_code), (msg, result)) in enumerate(zip(units, msgs)):
            rec = R.decode_message(bytes(store.commit_log.get_data(off, size)), 0, check_crc=True)
            assert (rec["topic"], rec["queue_id"], rec["queue_offset"], rec["store_size"]) == (topic, qid, i, size)
            assert off == result.commitlog_offset
            assert tags_code == R.tags_code(msg.tags)
            for key in msg.keys + [result.uniq_key]:
                assert result.commitlog_offset in [m.commitlog_offset
                                                   for m in store.query_message(topic, key, max_num=64)]


@settings(max_examples=8, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["A", "B", "Topic_c"]), st.integers(0, 2), st.binary(max_size=400),
                          st.lists(st.text(alphabet="abcdef-é😀", min_size=1, max_size=6), max_size=3),
                          st.sampled_from([None, "TagA", "TagB", "标签"])), min_size=1, max_size=120))
def test_differential_queues_and_index_against_commitlog(tmp_path_factory, puts):
    path = str(tmp_path_factory.mktemp("diff") / "s")
    with MessageStore.open(path, cfg()) as s:
        expected = {}
        for topic, qid, body, keys, tags in puts:
            msg = Message(topic, body, qid, tags=tags, keys=keys or None)
            expected.setdefault((topic, qid), []).append((msg, s.put(msg)))
        check_consistent(s, expected)
    with MessageStore.open(path, cfg()) as s:       # and again after a reopen
        check_consistent(s, expected)


def test_runtime_info(store):
    put_n(store, 10)
    store.wait_dispatched()
    info = store.runtime_info()
    assert info["commitlog_max_offset"] > 0 and info["consume_queues"] == 1
    assert info["dispatch_behind_bytes"] == 0 and info["put_calls"] == 10
    assert info["recovery"]["last_exit_ok"] is True


def test_transient_store_pool_write_buffers(tmp_path):
    path = str(tmp_path / "s")
    config = cfg(transient_store_pool_enable=True, transient_store_pool_size=2, commit_interval_commit_log=20)
    with MessageStore.open(path, config) as s:
        assert s.transient_store_pool.available_buffer_nums() <= 2
        results = [s.put(Message("T", os.urandom(2000), 0, keys=[f"k{i}"])) for i in range(300)]  # rolls files
        assert s.wait_dispatched(10)          # readers see records once the commit service copied them
        g = s.get_messages("g", "T", 0, 0, 32)
        assert g.status is GetStatus.FOUND and g.messages[0].commitlog_offset == results[0].commitlog_offset
        assert s.verify()["ok"]
        assert len(s.commit_log.files()) > 2
    with MessageStore.open(path, cfg()) as s:
        assert s.max_offset("T", 0) == 300
        assert bytes(s.look_message(results[-1].commitlog_offset).body) == bytes(
            s.query_message("T", "k299")[0].body)


def test_offset_by_time_across_consume_queue_files_after_reopen(tmp_path):
    path = str(tmp_path / "s")
    stamps = []
    with MessageStore.open(path, cfg()) as s:         # 64 units per consume-queue file: 3 files
        for i in range(150):
            stamps.append(s.put(Message("T", b"x", 0)).store_timestamp)
            if i % 10 == 0:
                time.sleep(0.003)
    with MessageStore.open(path, cfg()) as s:
        assert len(s.find_consume_queue("T", 0).mapped_file_queue) == 3
        for i in (0, 10, 70, 140, 149):
            found = s.offset_by_time("T", 0, stamps[i])
            assert stamps[found] == stamps[i] and (found == 0 or stamps[found - 1] < stamps[i] or found <= i)


def test_interrupted_file_creation_is_recovered(tmp_path):
    # kill -9 between creating a file and allocating it leaves an empty newest file: it holds nothing and goes.
    path = str(tmp_path / "s")
    with MessageStore.open(path, cfg()) as s:
        results = put_n(s, 20)
    commitlog = os.path.join(path, "commitlog")
    newest = sorted(os.listdir(commitlog))[-1]
    open(os.path.join(commitlog, "%020d" % (int(newest) + 256 * 1024)), "wb").close()
    open(os.path.join(path, "index", "29991231235959999"), "wb").close()
    open(os.path.join(path, "abort"), "wb").close()
    with MessageStore.open(path, cfg()) as s:
        assert s.max_offset("TopicA", 0) == 20 and s.verify()["ok"]
        assert [bytes(m.body) for m in s.query_message("TopicA", "key-3")] == [b"body-3"]
        assert s.put(Message("TopicA", b"next", 0)).queue_offset == 20
    assert results


def test_lock_refuses_another_process(tmp_path):
    import subprocess
    import sys
    path = str(tmp_path / "s")
    code = ("import sys; from rmqcore import MessageStore, StoreLockedError\n"
            "try:\n    MessageStore.open(sys.argv[1])\nexcept StoreLockedError as e:\n    print('locked', e)\n")
    with MessageStore.open(path, cfg()) as s:
        s.put(Message("T", b"x"))
        out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60)
        assert out.stdout.startswith("locked"), out.stderr
        assert s.put(Message("T", b"y")).queue_offset == 1      # the holder is undisturbed
    assert not os.path.exists(os.path.join(path, "abort"))


def test_wait_dispatched_means_readable_with_write_buffers(tmp_path):
    # With the write-buffer pool a put sits in the buffer until committed; wait_dispatched must not return before
    # every put so far can be read (the commit service alone runs every 10 s here).
    config = cfg(transient_store_pool_enable=True, transient_store_pool_size=2, commit_interval_commit_log=10_000,
                 commit_commit_log_thorough_interval=10_000)
    with MessageStore.open(str(tmp_path / "s"), config) as s:
        for round_ in range(3):
            results = [s.put(Message("T", b"r%d-%d" % (round_, i), 0, keys=[f"k{round_}-{i}"])) for i in range(50)]
            assert s.wait_dispatched(5)
            assert s.max_offset("T", 0) == results[-1].queue_offset + 1
            assert bytes(s.query_message("T", f"k{round_}-49")[0].body) == b"r%d-49" % round_


def test_query_message_matches_the_key_itself(tmp_path):
    # "T#Aa" and "T#BB" have the same Java hash: the index finds both, the query returns only the asked key's
    # message; a key that is a prefix of another ("k1" / "k12") or the same key under another topic does not match.
    with MessageStore.open(str(tmp_path / "s"), cfg()) as s:
        a = s.put(Message("T", b"aa", 0, keys=["Aa", "k12"]))
        b = s.put(Message("T", b"bb", 0, keys=["x", "BB"]))
        s.put(Message("U", b"other topic", 0, keys=["Aa"]))
        u = s.put(Message("T", b"by uniq", 1))
        s.wait_dispatched()
        assert [bytes(m.body) for m in s.query_message("T", "Aa")] == [b"aa"]
        assert [bytes(m.body) for m in s.query_message("T", "BB")] == [b"bb"]
        assert s.query_message("T", "k1") == [] and s.query_message("T", "k12")[0].commitlog_offset == a.commitlog_offset
        assert [bytes(m.body) for m in s.query_message("T", u.uniq_key)] == [b"by uniq"]
        assert [m.commitlog_offset for m in s.query_message("T", b.uniq_key)] == [b.commitlog_offset]
        assert len(s.query_message("U", "Aa")) == 1
        for i in range(40):
            s.put(Message("T", b"%d" % i, 2, keys=["many"]))
        s.wait_dispatched()
        got = s.query_message("T", "many", max_num=10)
        assert [bytes(m.body) for m in got] == [b"%d" % i for i in range(39, 29, -1)]     # newest first
        assert len(s.query_message("T", "many", max_num=1 << 40)) == 40     # no buffer of max_num made


def _reference_look(store):
    """look(offset) for reference.query_message: the pure decoder's view of the record starting at ``offset``."""
    def look(offset):
        view = store.commit_log.get_data(offset)
        if view is None or len(view) == 0:
            return None
        try:
            return R.decode_message(view, 0)
        except CorruptRecordError:
            return None
    return look


_QUERY_KEYS = ["Aa", "BB", "k", "k1", "k12", "é", "x😀"]     # "T#Aa" and "T#BB" share a Java hash


@settings(max_examples=20, deadline=None)
@given(slots=st.integers(1, 13), items=st.integers(4, 40), batch=st.integers(1, 70),
       puts=st.lists(st.tuples(st.sampled_from(["T", "U"]), st.lists(st.sampled_from(_QUERY_KEYS), max_size=3),
                               st.integers(0, 300)), min_size=1, max_size=60),
       bogus=st.lists(st.tuples(st.sampled_from(_QUERY_KEYS), st.integers(-3, 3), st.integers(0, 59)), max_size=6),
       queries=st.lists(st.tuples(st.sampled_from(["T", "U", "V"]), st.sampled_from(_QUERY_KEYS + ["uniq"]),
                                  st.integers(-1, 70), st.integers(-1, 61), st.integers(-1, 61)),
                        min_size=1, max_size=12))
def test_query_message_differential_against_reference(tmp_path_factory, slots, items, batch, puts, bogus, queries):
    # Tiny index files (collisions in few slots, many files rolled over), small commitlog files, index entries
    # that point into the middle of records or past the data: query_message (one Cython call) must answer as
    # reference.query_message, RocketMQ's queryMessage loop written plainly over the pure decoder.
    path = str(tmp_path_factory.mktemp("q") / "s")
    with MessageStore.open(path, cfg(max_hash_slot_num=slots, max_index_num=items,
                                     mapped_file_size_commit_log=4096, max_message_size=1024)) as s:
        results = [s.put(Message(topic, b"b" * size, 0, keys=keys or None)) for topic, keys, size in puts]
        assert s.wait_dispatched()
        last = s.index_service.index_files[-1]
        for key, delta, i in bogus:
            r = results[i % len(results)]
            last.put_key(f"{puts[i % len(puts)][0]}#{key}", r.commitlog_offset + delta * 7, r.store_timestamp)
        s.index_service.max_msgs_num_batch = batch
        stamps = sorted(r.store_timestamp for r in results)
        look = _reference_look(s)
        for topic, key, max_num, b, e in queries:
            if key == "uniq":
                key = results[max_num % len(results)].uniq_key
            begin = 0 if b < 0 else stamps[b % len(stamps)] - (b % 3) * 1000
            end = (1 << 62) if e < 0 else stamps[e % len(stamps)] + (e % 3) * 500
            got = s.query_message(topic, key, max_num, begin, end)
            expected = R.query_message(s.index_service.index_files, look, topic, key, max_num, begin, end, batch)
            assert [m.commitlog_offset for m in got] == expected
            for m in got:
                assert m.topic == topic and (key in m.keys or m.uniq_key == key)


def test_query_message_rounds_reach_hits_older_than_a_batch(tmp_path):
    # One "Aa" message, then 70 "BB" ones a second apart ("T#Aa" and "T#BB" share a Java hash). A round of 32 hits
    # holds only BB's; as in DefaultMessageStore.queryMessage the next round ends its window at the store time of
    # the round's lowest offset, so the third one reaches the "Aa" entry past the 64 newest.
    path = str(tmp_path / "s")
    os.makedirs(os.path.join(path, "commitlog"))
    base = int(time.time() * 1000) - 600_000
    data = bytearray()
    for i, key in enumerate(["Aa"] + ["BB"] * 70):
        data += R.encode_message(topic="T", body=b"m%d" % i, queue_offset=i, physical_offset=len(data),
                                 born_timestamp=base, store_timestamp=base + i * 1000,
                                 properties={"KEYS": key, "UNIQ_KEY": "%032X" % i})
    with open(os.path.join(path, "commitlog", "%020d" % 0), "wb") as f:
        f.write(bytes(data.ljust(256 * 1024, b"\0")))
    with MessageStore.open(path, cfg(max_hash_slot_num=97, max_index_num=1000)) as s:
        assert s.wait_dispatched()
        assert [bytes(m.body) for m in s.query_message("T", "Aa")] == [b"m0"]
        assert [bytes(m.body) for m in s.query_message("T", "BB", 3)] == [b"m70", b"m69", b"m68"]
        # Rounds stop once the window ends before ``begin``: "Aa" is older than the window.
        assert s.query_message("T", "Aa", 32, base + 5_000) == []
        assert R.query_message(s.index_service.index_files, _reference_look(s), "T", "Aa", 32, 0, 1 << 62) == [0]


def test_query_message_while_puts_roll_index_files_over(tmp_path):
    # The dispatcher writes index items without the GIL and starts a new index file every ~25 keys while a reader
    # walks the files in lockstep: every hit must be the asked key's own message, and all are found once dispatched.
    with MessageStore.open(str(tmp_path / "s"), cfg(max_hash_slot_num=7, max_index_num=50)) as s:
        results: list = []
        errors: list = []
        done = threading.Event()

        def producer():
            try:
                for i in range(1500):
                    results.append(s.put(Message("Q", b"%d" % i, i % 2, keys=[f"q{i}"])))
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)
            finally:
                done.set()

        def reader():
            try:
                rnd = random.Random(3)
                while not done.is_set() or rnd.random() < 0.999:
                    if not results:
                        continue
                    i = rnd.randrange(len(results))
                    for m in s.query_message("Q", f"q{i}", 4):
                        assert bytes(m.body) == b"%d" % i and m.commitlog_offset == results[i].commitlog_offset
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=producer), threading.Thread(target=reader)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
        assert s.wait_dispatched()
        assert len(s.index_service.index_files) > 50
        for i in range(0, 1500, 7):
            assert [m.commitlog_offset for m in s.query_message("Q", f"q{i}")] == [results[i].commitlog_offset]


def test_a_dispatcher_that_cannot_move_backs_off(store):
    # A pass that cannot move (a bad record ahead: the commitlog's end stays where it is, the dispatcher behind it)
    # must back off to its idle sleep, not spin: each pass takes the GIL from whoever runs.
    import threading
    store.put(Message("T", b"x", 0))
    assert store.wait_dispatched(5)
    reput = store.reput
    calls = []
    stuck = threading.Event()

    def stuck_pass():
        calls.append(time.monotonic())
        return 0 if stuck.is_set() else type(reput).do_reput(reput)

    stuck.set()
    reput.do_reput = stuck_pass
    saved = reput.reput_from_offset
    reput.reput_from_offset = 0                     # behind the end, and no pass gets any further
    try:
        time.sleep(0.6)
        n = len(calls)
        assert 3 <= n <= 60, n                      # 1, 2, 4 ... 50 ms apart; a spin makes thousands
    finally:
        reput.reput_from_offset = saved
        stuck.clear()
        del reput.do_reput
    assert store.wait_dispatched(5)
