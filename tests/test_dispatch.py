"""The reput scan's split into consume-queue runs (rmqcore._dispatch.queue_runs) against a plain Python grouping of
the records the reference decoder reads."""
import time

import numpy as np
from hypothesis import given, note, strategies as st

from rmqcore import reference as R
from rmqcore._dispatch import queue_runs, scan_for_dispatch
from rmqcore.consume_queue import CQ_DTYPE

records = st.lists(st.tuples(st.sampled_from(["A", "B", "Topic_c", "%RETRY%g|x"]), st.integers(0, 3),
                             st.sampled_from([0x0, 0x4, 0x8, 0xC]), st.integers(0, 5),
                             st.sampled_from([None, "TagA", "TagB"]), st.binary(max_size=50)),
                   max_size=80)


def reference_runs(buf):
    """(topic, queue_id) → [(offset, size, tags_code, queue_offset, store_ts)], runs in order of first record."""
    runs: dict = {}
    for pos, _, _ in R.iterate_records(buf):
        rec = R.decode_message(buf, pos)
        if rec["sys_flag"] & 0xC not in (0x0, 0x8):        # prepared and rolled-back records go to no queue
            continue
        tags = rec["properties"].get("TAGS")
        runs.setdefault((rec["topic"], rec["queue_id"]), []).append(
            (pos, rec["store_size"], R.tags_code(tags), rec["queue_offset"], rec["store_timestamp"]))
    return runs


@given(records)
def test_queue_runs_group_like_the_reference(recs):
    buf = bytearray()
    next_offset: dict = {}
    for i, (topic, qid, tran, gap, tags, body) in enumerate(recs):
        qo = next_offset.get((topic, qid), 0) + (gap if gap > 3 else 0)     # now and then a hole in the offsets
        next_offset[(topic, qid)] = qo + 1
        props = {"UNIQ_KEY": f"U{i}"} | ({"TAGS": tags} if tags else {})
        buf += R.encode_message(topic=topic, body=body, queue_id=qid, sys_flag=tran, queue_offset=qo,
                                physical_offset=len(buf), store_timestamp=1000 + i, properties=props)
    batch = scan_for_dispatch(bytes(buf), 0, 0, -1, 1000, 4000)
    assert batch.n == len(recs)
    expected = reference_runs(bytes(buf))
    got = queue_runs(batch, CQ_DTYPE)
    assert [(t, q) for t, q, *_ in got] == list(expected)
    for topic, qid, units, queue_offsets, ends, contiguous, last_ts in got:
        want = expected[(topic, qid)]
        assert units.dtype == CQ_DTYPE
        assert units.tobytes() == b"".join(R.encode_cq_unit(o, s, t) for o, s, t, _, _ in want)
        assert queue_offsets.tolist() == [w[3] for w in want]
        assert ends.tolist() == [o + s for o, s, *_ in want]
        assert contiguous == all(b - a == 1 for a, b in zip(queue_offsets.tolist(), queue_offsets.tolist()[1:]))
        assert last_ts == want[-1][4]


def test_queue_runs_of_an_empty_batch_and_a_wrong_unit_type():
    batch = scan_for_dispatch(b"", 0)
    assert batch.n == 0 and queue_runs(batch, CQ_DTYPE) == []
    rec = R.encode_message(topic="T", body=b"x")
    try:
        queue_runs(scan_for_dispatch(rec, 0), np.dtype(np.int64))
    except ValueError as e:
        assert "20 bytes" in str(e)
    else:
        raise AssertionError("a unit type of the wrong size was accepted")


def test_schedule_topic_units_carry_their_delivery_time():
    # CommitLog.checkMessageAndReturnSize: a SCHEDULE_TOPIC_XXXX record's tagsCode is store time + the delay of its
    # DELAY level (Integer.parseInt: a leading '+' is fine), levels past the last count as the last, level <= 0
    # or an unreadable one keep the tags' hash; other topics ignore DELAY.
    delays = [0, 1000, 5000, 10000]                       # level -> ms, index 0 unused
    cases = [("SCHEDULE_TOPIC_XXXX", "2", 7_000 + 5000), ("SCHEDULE_TOPIC_XXXX", "+1", 7_000 + 1000),
             ("SCHEDULE_TOPIC_XXXX", "9", 7_000 + 10000), ("SCHEDULE_TOPIC_XXXX", "0", R.tags_code("T")),
             ("SCHEDULE_TOPIC_XXXX", "x2", R.tags_code("T")), ("SCHEDULE_TOPIC_XXXX", "-3", R.tags_code("T")),
             ("Other", "2", R.tags_code("T"))]
    buf = bytearray()
    for topic, level, _ in cases:
        buf += R.encode_message(topic=topic, body=b"b", physical_offset=len(buf), store_timestamp=7_000,
                                properties={"DELAY": level, "TAGS": "T"})
    batch = scan_for_dispatch(bytes(buf), 0, 0, -1, 100, 400, False, None, None, delays)
    assert batch.tags_code.tolist() == [want for _, _, want in cases]
    assert [batch.topics[i] for i in batch.topic_idx] == [c[0] for c in cases]
    plain = scan_for_dispatch(bytes(buf), 0, 0, -1, 100, 400)      # no delay table: tags hashes throughout
    assert plain.tags_code.tolist() == [R.tags_code("T")] * len(cases)


prop_names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "a", "", "x\x02TAGS", "KEYS\x02KEYS", "\x02UNIQ_KEY"])
prop_values = st.text(st.sampled_from("ab \x01é"), max_size=6)


@given(st.lists(st.dictionaries(prop_names, prop_values, max_size=5), min_size=1, max_size=20))
def test_scan_reads_tags_and_keys_as_string2messageProperties_does(props_list):
    # One walk over the pairs finds TAGS, KEYS, UNIQ_KEY and DELAY (dispatch_properties): the same values as the
    # reference parse, including repeated names (the last wins), empty names or values and pairs without \x01.
    buf = bytearray()
    want_tags, want_keys = [], []
    for i, props in enumerate(props_list):
        topic = "T%d" % (i % 2)
        buf += R.encode_message(topic=topic, body=b"b", physical_offset=len(buf), store_timestamp=1000 + i,
                                properties=props)
        parsed = R.string_to_properties(R.properties_to_string(props))
        want_tags.append(R.tags_code(parsed.get("TAGS")))
        keys = ([parsed["UNIQ_KEY"]] if "UNIQ_KEY" in parsed else []) + \
            [k for k in parsed.get("KEYS", "").split(" ") if k]
        want_keys += [R.index_key_hash(f"{topic}#{k}") for k in keys]
    batch = scan_for_dispatch(bytes(buf), 0, 0, -1, 1000, 4000)
    assert batch.n == len(props_list)
    assert list(batch.tags_code) == want_tags
    assert list(batch.key_hash) == want_keys


def _apply_runs(runs, find):
    # What MessageStore._apply_dispatch does with the runs queue_runs returns (the general way).
    import bisect
    for topic, qid, units, queue_offsets, ends, contiguous, last_ts in runs:
        cq = find(topic, qid)
        start = 0 if ends[0] > cq.max_physic_offset else bisect.bisect_right(ends, cq.max_physic_offset)
        units, queue_offsets = units[start:], queue_offsets[start:]
        if not len(units):
            continue
        if contiguous:
            cq.append_units(units, int(queue_offsets[0]), last_ts)
        else:
            for u, qo in zip(units, queue_offsets):
                cq.put_message_position_info(int(u["offset"]), int(u["size"]), int(u["tags_code"]), int(qo), last_ts)


@given(records, st.integers(1, 9), st.integers(1, 12))
def test_runs_appended_in_c_leave_the_queues_the_general_way_does(tmp_path_factory, recs, units_per_file, chunk):
    # queue_runs(find_queue=...) appends the runs that continue their queue's last file itself; the queues must end
    # byte for byte as when every run goes through ConsumeQueue.append_units, with small files (runs that do not
    # fit), holes in the queue offsets, passes of ``chunk`` records, and everything dispatched twice (a rebuild:
    # nothing appended again).
    from rmqcore.consume_queue import ConsumeQueue
    buf = bytearray()
    next_offset: dict = {}
    for i, (topic, qid, tran, gap, tags, body) in enumerate(recs):
        qo = next_offset.get((topic, qid), 0) + (gap if gap > 3 else 0)
        next_offset[(topic, qid)] = qo + 1
        props = {"UNIQ_KEY": f"U{i}"} | ({"TAGS": tags} if tags else {})
        buf += R.encode_message(topic=topic, body=body, queue_id=qid, sys_flag=tran, queue_offset=qo,
                                physical_offset=len(buf), store_timestamp=1000 + i, properties=props)
    batches = []
    pos = 0
    while pos < len(buf):
        batches.append(scan_for_dispatch(bytes(buf), 0, pos, -1, chunk, 4 * chunk))
        pos = batches[-1].end_offset
    roots = [tmp_path_factory.mktemp("fast"), tmp_path_factory.mktemp("general")]
    queues: list[dict] = [{}, {}]

    def finder(k):
        def find(topic, qid):
            if (topic, qid) not in queues[k]:
                queues[k][(topic, qid)] = ConsumeQueue(topic, qid, str(roots[k]), 20 * units_per_file)
            return queues[k][(topic, qid)]
        return find

    fast_runs = 0
    for _ in range(2):
        for batch in batches:
            left = queue_runs(batch, CQ_DTYPE, finder(0))
            fast_runs += len(queue_runs(batch, CQ_DTYPE)) - len(left)
            _apply_runs(left, finder(0))
            _apply_runs(queue_runs(batch, CQ_DTYPE), finder(1))
    assert queues[0].keys() == queues[1].keys()
    for key, fast in queues[0].items():
        general = queues[1][key]
        assert (fast.max_physic_offset, fast.min_offset_in_queue, fast.max_offset_in_queue) == \
            (general.max_physic_offset, general.min_offset_in_queue, general.max_offset_in_queue)
        assert [(mf.file_from_offset, bytes(mf.select(0, mf.wrote_position) or b""))
                for mf in fast.mapped_file_queue._files] == \
            [(mf.file_from_offset, bytes(mf.select(0, mf.wrote_position) or b""))
             for mf in general.mapped_file_queue._files]
        fast.close()
        general.close()
    note(f"{fast_runs} runs appended in C")


# -- the dispatch ring: what the writer hands the dispatcher instead of the commitlog bytes -----------------------

from types import SimpleNamespace  # noqa: E402

from rmqcore import Message, StoreConfig  # noqa: E402
from rmqcore._dispatch import drain_dispatch_ring, ring_next_offset  # noqa: E402
from rmqcore._codec import RESULT_END  # noqa: E402
from rmqcore._commit_log import DispatchRing  # noqa: E402
from rmqcore.commit_log import CommitLog  # noqa: E402
from rmqcore import dispatch as dispatch_module  # noqa: E402
from rmqcore.dispatch import ReputMessageService  # noqa: E402
from rmqcore.store import parse_delay_levels  # noqa: E402

DELAYS = parse_delay_levels(StoreConfig().message_delay_level)

ring_messages = st.lists(st.tuples(
    st.sampled_from(["A", "Topic_b", "%RETRY%g", "SCHEDULE_TOPIC_XXXX"]),
    st.integers(0, 3),
    st.sampled_from([0x0, 0x4, 0x8, 0xC]),                         # transaction types: some go to no queue
    st.sampled_from([None, "TagA", "x"]),
    st.lists(st.sampled_from(["k1", "k 2", "key three", "  "]), max_size=3),
    st.dictionaries(st.sampled_from(["DELAY", "p"]), st.sampled_from(["1", "+2", "99", "x"]), max_size=2),
    st.integers(0, 600),                                          # body length
    st.booleans(),                                                # an IPv6 born host (a longer header)
    st.integers(0, 3)), min_size=1, max_size=60)                  # 0: a put, else a batch of that many


def _records(batch):
    # A batch as plain rows, topic names instead of ids (each pass interns in its own order).
    recs = list(zip(batch.phys.tolist(), batch.size.tolist(), batch.tags_code.tolist(), batch.store_ts.tolist(),
                    batch.queue_offset.tolist(), batch.queue_id.tolist(), batch.sys_flag.tolist(),
                    [batch.topics[i] for i in batch.topic_idx.tolist()]))
    keys = list(zip(batch.key_hash.tolist(), batch.key_phys.tolist(), batch.key_ts.tolist(),
                    [batch.phys[r] for r in batch.key_record.tolist()]))
    return recs, keys


def _scan_all(cl):
    # The whole commitlog the way recovery reads it: file by file, no ring.
    recs, keys = [], []
    for mf in cl.mapped_file_queue.mapped_files:
        view = mf.select(0, mf.read_position)
        batch = scan_for_dispatch(view, mf.file_from_offset, 0, -1, 100000, 400000, False, None, None, DELAYS)
        view.release()
        r, k = _records(batch)
        recs += r
        keys += k
    return recs, keys


def _put_all(cl, msgs, after_each=lambda: None):
    i = 0
    while i < len(msgs):
        topic, qid, tran, tags, keys, props, body_len, v6, group = msgs[i]
        group = max(1, group)
        batch = [Message(t, b"b" * n, q, tags=tg, keys=k or None, properties=dict(p), sys_flag=tr,
                         born_host="[::1]:9876" if v else "10.0.0.1:9876")
                 for t, q, tr, tg, k, p, n, v, _ in msgs[i:i + group]]
        if len(batch) == 1:
            assert cl.put_message(batch[0]).ok
        else:
            assert all(r.ok for r in cl.put_messages(batch))
        i += group
        after_each()


@given(ring_messages, st.sampled_from([4096, 8192, 1 << 20]), st.integers(0, 3))
def test_the_dispatcher_builds_from_the_ring_what_it_builds_from_the_commitlog(tmp_path_factory, msgs, ring_size,
                                                                               every):
    # The real dispatcher loop (ReputMessageService.do_reput) over a ring that fills, wraps and drops entries
    # (small sizes), drained now and then while puts go on (``every``), across file rolls (8 KiB files): what it
    # hands to the store equals a scan of the whole commitlog, record for record and key for key.
    cl = CommitLog.open(str(tmp_path_factory.mktemp("ring") / "commitlog"),
                        StoreConfig(mapped_file_size_commit_log=8192, max_message_size=4096,
                                    warm_mapped_file_enable=False))
    got_recs, got_keys = [], []

    def apply(batch):
        r, k = _records(batch)
        got_recs.extend(r)
        got_keys.extend(k)

    store = SimpleNamespace(commit_log=cl, delay_level_ms=DELAYS, _apply_dispatch=apply)
    reput = ReputMessageService(store, 0, max_records=7, ring_size=ring_size)
    puts = [0]

    def maybe_drain():
        puts[0] += 1
        if every and puts[0] % every == 0:
            reput.do_reput()

    scanned = [0]

    def counting_scan(*args):
        batch = scan_for_dispatch(*args)
        scanned[0] += batch.n
        return batch

    dispatch_module.scan_for_dispatch = counting_scan
    try:
        _put_all(cl, msgs, maybe_drain)
        reput.do_reput()
    finally:
        dispatch_module.scan_for_dispatch = scan_for_dispatch
    want_recs, want_keys = _scan_all(cl)
    assert got_recs == want_recs
    assert got_keys == want_keys
    assert reput.reput_from_offset == cl.max_offset
    if ring_size == 1 << 20:        # never full here: the commitlog is read for no record
        assert scanned[0] == 0 and reput.ring.dropped == 0
    cl.close()


def test_ring_drops_what_does_not_fit_and_the_scan_takes_those_records(tmp_path):
    cl = CommitLog.open(str(tmp_path / "commitlog"), StoreConfig(warm_mapped_file_enable=False))
    ring = DispatchRing(4096)
    cl.writer.set_dispatch_ring(ring)
    for i in range(100):
        assert cl.put_message(Message("T", b"x" * 100, 0, tags="t", keys=[f"k{i}"])).ok
    assert ring.dropped > 0 and 0 < ring.pending_bytes <= 4096
    mf = cl.mapped_file_queue.mapped_files[0]
    end = mf.read_position
    view = mf.select(0, end)
    # The ring holds the first records, as a scan of the commitlog reads them ...
    batch = drain_dispatch_ring(ring, 0, end, 1000, 4000)
    held = batch.end_offset
    assert 0 < batch.n < 100 and _records(batch) == _records(scan_for_dispatch(view, 0, 0, held, 1000, 4000))
    assert ring.pending_bytes == 0
    # ... and none of the rest: the dispatcher scans from there. Puts fill the emptied ring again, after the gap.
    assert ring_next_offset(ring, held) == -1 and drain_dispatch_ring(ring, held, end).n == 0
    r = cl.put_message(Message("T", b"y", 0))
    assert ring_next_offset(ring, held) == r.commitlog_offset == end
    assert drain_dispatch_ring(ring, held, end + r.wrote_bytes).n == 0
    assert drain_dispatch_ring(ring, end, end + r.wrote_bytes).queue_offset.tolist() == [100]
    view.release()
    cl.close()


def test_ring_entries_wait_until_their_records_are_readable(tmp_path):
    cl = CommitLog.open(str(tmp_path / "commitlog"), StoreConfig(warm_mapped_file_enable=False))
    ring = DispatchRing(1 << 16)
    cl.writer.set_dispatch_ring(ring)
    sizes = [cl.put_message(Message("T", b"x" * n, 0)).wrote_bytes for n in (10, 20, 30)]
    # Readable up to the middle of the second record: only the first is taken, the rest stays in the ring.
    batch = drain_dispatch_ring(ring, 0, sizes[0] + sizes[1] - 1)
    assert batch.n == 1 and batch.end_offset == sizes[0] and batch.code == RESULT_END
    batch = drain_dispatch_ring(ring, sizes[0], sum(sizes))
    assert batch.n == 2 and batch.end_offset == sum(sizes)
    assert batch.queue_offset.tolist() == [1, 2]
    assert drain_dispatch_ring(ring, sum(sizes), sum(sizes)).n == 0 and ring_next_offset(ring, sum(sizes)) == -1
    cl.close()


def test_a_too_small_dispatch_ring_is_refused():
    try:
        DispatchRing(100)
    except ValueError as e:
        assert "4096" in str(e)
    else:
        raise AssertionError("a 100-byte ring was made")


def test_a_store_whose_ring_overflows_still_dispatches_every_message(tmp_path, monkeypatch):
    # One batch far larger than the ring: most records are dropped from it and read back from the commitlog, the
    # store's queues and index come out complete and in order all the same, and runtime_info counts the drops.
    from rmqcore import MessageStore
    monkeypatch.setattr(ReputMessageService, "RING_SIZE", 4096)
    with MessageStore.open(str(tmp_path / "s")) as store:
        results = store.put_batch([Message(f"T{i % 2}", f"body {i}".encode(), i % 3, tags=f"tag{i % 5}",
                                           keys=[f"key-{i}"]) for i in range(300)])
        assert all(r.ok for r in results)
        assert store.wait_dispatched(30)
        info = store.runtime_info()
        assert info["dispatch_ring_dropped"] > 0 and info["dispatched_records"] == 300
        for topic in ("T0", "T1"):
            for q in range(3):
                got, offset = [], 0
                while True:         # pulls of up to 32 (maxTransferCountOnMessageInMemory)
                    pulled = store.get_messages("g", topic, q, offset, 32)
                    if not pulled.messages:
                        break
                    got += pulled.messages
                    offset = pulled.next_begin_offset
                want = [i for i in range(300) if f"T{i % 2}" == topic and i % 3 == q]
                assert [bytes(m.body) for m in got] == [f"body {i}".encode() for i in want]
                assert [m.queue_offset for m in got] == list(range(len(want)))
        for i in (0, 150, 299):
            found = store.query_message(f"T{i % 2}", f"key-{i}")
            assert [bytes(m.body) for m in found] == [f"body {i}".encode()]


def test_one_pass_indexes_every_key_across_full_index_files(tmp_path):
    # The dispatcher hands a pass's keys to the index in place (IndexService.build_index_batch): a batch whose
    # keys fill several small index files must leave every key findable, each file full before the next begins.
    from rmqcore import MessageStore
    cfg = StoreConfig(mapped_file_size_commit_log=1 << 20, max_hash_slot_num=11, max_index_num=40,
                      warm_mapped_file_enable=False)
    store = MessageStore.open(str(tmp_path / "s"), cfg)
    try:
        results = store.put_batch([Message("Idx", b"m%d" % i, i % 2, keys=[f"k-{i}", f"both-{i % 3}"])
                                   for i in range(60)])
        assert store.wait_dispatched(10)
        files = store.index_service.index_files
        # 60 messages x (UNIQ_KEY + 2 keys) = 180 entries; 39 items a file (item 0 is unused, as in RocketMQ).
        assert len(files) == 5 and all(f.is_write_full() for f in files[:-1])
        for i, r in enumerate(results):
            hits = store.query_message("Idx", f"k-{i}")
            assert [m.commitlog_offset for m in hits] == [r.commitlog_offset]
            assert [m.commitlog_offset for m in store.query_message("Idx", r.uniq_key)] == [r.commitlog_offset]
        assert len(store.query_message("Idx", "both-1", max_num=64)) == 20
    finally:
        store.close()


def test_a_driver_runs_the_passes_and_the_thread_sweeps_behind_it(tmp_path, monkeypatch):
    # drive_externally: the driver's try_reput dispatches what was put, -1 while a pass of the thread holds the
    # lock; the thread, not poked by puts meanwhile, still takes every put within its sweep; and taken back, it
    # paces itself again.
    from rmqcore import MessageStore
    with MessageStore.open(str(tmp_path / "s")) as store:
        reput = store.reput
        reput.drive_externally(True)
        monkeypatch.setattr(reput, "SWEEP", 3600.0)        # no sweep meanwhile: the driver's pass is what counts
        reput._wake.poke()
        time.sleep(0.05)                                    # the thread takes up the hour-long sweep
        assert store.put(Message("drv", b"one", 0)).ok
        assert reput.try_reput() == 1
        assert store.get_messages("g", "drv", 0, 0).messages[0].body == b"one"
        with reput._lock:                                   # a pass of the thread's runs
            assert reput.try_reput() == -1
        monkeypatch.setattr(reput, "SWEEP", 0.01)
        reput._wake.poke()
        assert store.put(Message("drv", b"two", 0)).ok
        assert store.wait_dispatched(5)                     # the sweep took it: no driver pass
        assert [bytes(m.body) for m in store.get_messages("g", "drv", 0, 0).messages] == [b"one", b"two"]
        reput.drive_externally(False)
        assert store.put(Message("drv", b"three", 0)).ok
        assert store.wait_dispatched(5)
        assert len(store.get_messages("g", "drv", 0, 0).messages) == 3
