"""The reput scan's split into consume-queue runs (rmqcore._dispatch.queue_runs) against a plain Python grouping of
the records the reference decoder reads."""
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
