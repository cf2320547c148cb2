"""verify() / rmqcore verify / rmqcore repair check what reads rely on (issue 28 item 4, issue 31 items 2, 3, 9).

Each reproducer damages one field a read depends on, shows the read going wrong, shows verify() and ``rmqcore
verify`` reporting it (never crashing), and shows ``rmqcore repair`` rebuilding it so the read is right again. A store
another process writes is judged up to what its dispatcher had done, never FAILED for records not yet dispatched.
"""
import json
import os
import random
import struct
import subprocess
import sys
import time

import pytest

from rmqcore import Message, MessageStore, StoreConfig
from rmqcore import reference as R
from rmqcore._index_file import IndexFile, index_key_hash
from rmqcore.cli import main
from rmqcore.recovery import MissingKey, verify_store

MIB = 1 << 20
N = 200
TOPIC = "TopicV"
LONG_MAX = (1 << 63) - 1


def cfg(**kw):
    base = dict(mapped_file_size_commit_log=MIB, mapped_file_size_consume_queue=20 * 50, max_hash_slot_num=101,
                max_index_num=404, warm_mapped_file_enable=False)
    base.update(kw)
    return StoreConfig(**base)


def fill(path, config=None, n=N):
    """n messages in one queue, each with a tag (TagA / TagB alternating) and a key k<i>."""
    with MessageStore.open(path, config or cfg()) as s:
        for i in range(n):
            s.put(Message(TOPIC, b"body-%d" % i, 0, tags="TagA" if i % 2 == 0 else "TagB", keys=[f"k{i}"]))
        s.wait_dispatched()


def index_files(path):
    d = os.path.join(path, "index")
    return [os.path.join(d, n) for n in sorted(os.listdir(d))]


def patch(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def found_keys(path, config=None):
    with MessageStore.open(path, config or cfg()) as s:
        return sum(1 for i in range(N) if s.query_message(TOPIC, f"k{i}"))


def tagged(path, tags, config=None):
    """Queue offsets of the messages get_messages(tags=...) returns, pulling the whole queue."""
    out = []
    with MessageStore.open(path, config or cfg()) as s:
        offset = s.min_offset(TOPIC, 0)
        while True:
            r = s.get_messages("G", TOPIC, 0, offset, 32, tags=tags)
            out += [m.queue_offset for m in r.messages]
            if r.next_begin_offset <= offset or r.next_begin_offset >= s.max_offset(TOPIC, 0):
                break
            offset = r.next_begin_offset
    return out


def cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def repair_then_check(capsys, path):
    """rmqcore repair rebuilds what verify reported: exit 0, 'OK after repair', and verify passes afterwards."""
    code, out, err = cli(capsys, "repair", path)
    assert code == 0, out + err
    assert "OK after repair" in out
    assert "other file sizes than configured" not in err
    code, out, err = cli(capsys, "verify", "-q", path)
    assert code == 0 and out.startswith("OK"), out + err
    assert verify_store(path, cfg())["ok"]
    return out


# -- index header ranges ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [-1, LONG_MAX])
def test_an_index_header_begin_timestamp_that_hides_every_key_is_reported_and_repaired(tmp_path, capsys, value):
    path = str(tmp_path / "s")
    fill(path)
    assert found_keys(path) == N
    for f in index_files(path):
        patch(f, 0, struct.pack(">q", value))                 # beginTimestamp
    assert found_keys(path) == 0                               # what a user sees: no key is found
    with MessageStore.open(path, cfg()) as s:
        report = s.verify()
    assert not report["ok"]
    assert any("beginTimestamp" in e for e in report["index_errors"])
    assert report["index_missing_count"] == N + N              # every KEYS and UNIQ_KEY entry
    assert all(isinstance(m, MissingKey) for m in report["index_missing"])
    assert {m.key for m in report["index_missing"]} >= {f"k{i}" for i in range(N)}
    code, out, err = cli(capsys, "verify", "-q", path)
    assert code == 1 and out.startswith("FAILED") and "beginTimestamp" in out and err == ""
    assert f"{TOPIC}#k0 (record at " in out
    repair_then_check(capsys, path)
    assert found_keys(path) == N


@pytest.mark.parametrize("field, at", [("endTimestamp", 8), ("beginPhyOffset", 16), ("endPhyOffset", 24)])
def test_every_index_header_range_is_checked_against_the_items_records(tmp_path, capsys, field, at):
    path = str(tmp_path / "s")
    fill(path)
    first = index_files(path)[0]
    with open(first, "rb") as f:
        (old,) = struct.unpack_from(">q", f.read(40), at)
    patch(first, at, struct.pack(">q", old + 12345))
    report = verify_store(path, cfg())
    assert not report["ok"] and any(field in e for e in report["index_errors"]), report["index_errors"]
    code, out, _ = cli(capsys, "verify", "-q", "--json", path)
    assert code == 1 and any(field in e for e in json.loads(out)["index_errors"])
    repair_then_check(capsys, path)


def test_an_overwritten_item_time_is_a_key_a_query_window_misses(tmp_path):
    path = str(tmp_path / "s")
    fill(path)
    f = index_files(path)[0]
    with open(f, "rb") as fh:
        raw = fh.read()
    item = 40 + 101 * 4 + 5 * 20                               # item 5
    (phy,) = struct.unpack_from(">q", raw, item + 4)
    patch(f, item + 12, struct.pack(">i", 3600))               # an hour after its record
    with MessageStore.open(path, cfg()) as s:
        m = s.look_message(phy)
        key = next(k for k in [m.uniq_key] + list(m.keys) if index_key_hash(f"{TOPIC}#{k}") == struct.unpack_from(
            ">i", raw, item)[0])
        ts = m.store_timestamp
        assert phy not in [x.commitlog_offset for x in s.query_message(TOPIC, key, begin=ts - 5000, end=ts + 5000)]
        report = s.verify()
    assert not report["ok"] and report["index_missing_count"] >= 1 and report["index_bad_times"] >= 1
    assert any(k.record_offset == phy for k in report["index_missing"])


def test_zeroed_slot_table_verify_lists_keys_and_repair_rebuilds_them(tmp_path, capsys):
    # Issue 31 item 2: verify crashed unpacking its own report; repair then rebuilt 0 keys and the store still failed.
    path = str(tmp_path / "s")
    fill(path)
    f = index_files(path)[0]
    patch(f, 40, bytes(101 * 4))                               # the slot table
    assert found_keys(path) < N
    code, out, err = cli(capsys, "verify", path)
    assert code == 1 and "not findable" in out and "error" not in err, out + err
    code, out, err = cli(capsys, "verify", "--json", path)
    missing = json.loads(out)["index_missing"]
    assert code == 1 and missing and set(missing[0]) == {"topic", "key", "record_offset", "key_hash"}
    out = repair_then_check(capsys, path)
    code, out, _ = cli(capsys, "repair", "--json", path)       # a second repair finds nothing to do
    assert code == 0 and json.loads(out)["rebuilt_keys"] == 0 and json.loads(out)["found"] == "nothing wrong"
    assert found_keys(path) == N


def test_repair_reports_keys_it_rebuilt(tmp_path, capsys):
    path = str(tmp_path / "s")
    fill(path)
    patch(index_files(path)[0], 40, bytes(101 * 4))
    code, out, _ = cli(capsys, "repair", "--json", path)
    r = json.loads(out)
    assert code == 0 and r["ok"] and r["rebuilt_index"] and r["rebuilt_keys"] == 2 * N
    assert "not findable" in r["found"]


# -- consume-queue units ---------------------------------------------------------------------------------------------

def test_an_overwritten_tags_code_is_reported_and_repaired(tmp_path, capsys):
    path = str(tmp_path / "s")
    fill(path)
    assert tagged(path, "TagA") == list(range(0, N, 2))
    cq = os.path.join(path, "consumequeue", TOPIC, "0", "0" * 20)
    patch(cq, 4 * 20 + 12, struct.pack(">q", 12345))          # unit 4 (TagA) gets another tagsCode
    assert 4 not in tagged(path, "TagA")                       # the tag filter skips it
    with MessageStore.open(path, cfg()) as s:
        report = s.verify()
    assert not report["ok"] and report["damaged_queues"] == [(TOPIC, 0)]
    assert any(f"{TOPIC}/0@4: tagsCode 12345" in e for e in report["cq_errors"])
    code, out, _ = cli(capsys, "verify", "-q", path)
    assert code == 1 and "tagsCode 12345" in out
    repair_then_check(capsys, path)
    assert tagged(path, "TagA") == list(range(0, N, 2))


def test_a_deleted_first_consume_queue_file_is_noticed_and_rebuilt(tmp_path, capsys):
    path = str(tmp_path / "s")
    fill(path)                                                 # 50 units a file: 4 files
    qdir = os.path.join(path, "consumequeue", TOPIC, "0")
    assert len(os.listdir(qdir)) == 4
    os.unlink(os.path.join(qdir, "0" * 20))
    with MessageStore.open(path, cfg()) as s:
        assert s.min_offset(TOPIC, 0) == 50                    # units 0..49 silently gone
        report = s.verify()
    assert not report["ok"] and report["cq_error_count"] == 50
    assert any("first consume-queue file(s) are missing" in e and "0..49" in e for e in report["cq_errors"])
    code, out, _ = cli(capsys, "verify", "-q", path)
    assert code == 1 and "first consume-queue file(s) are missing" in out
    repair_then_check(capsys, path)
    with MessageStore.open(path, cfg()) as s:
        assert s.min_offset(TOPIC, 0) == 0
        assert [m.queue_offset for m in s.get_messages("G", TOPIC, 0, 0, 32).messages] == list(range(32))


def test_schedule_units_are_checked_with_and_without_the_delay_levels(tmp_path):
    path = str(tmp_path / "s")
    with MessageStore.open(path, cfg(schedule_message_service_enable=False)) as s:
        for i in range(10):
            s.put(Message("TopicD", b"x", 0, properties={"DELAY": "3"}))
        s.wait_dispatched()
        assert s.verify()["ok"]
    assert verify_store(path, cfg())["ok"]                     # offline: one delay per schedule queue
    cq = os.path.join(path, "consumequeue", "SCHEDULE_TOPIC_XXXX", "2", "0" * 20)
    patch(cq, 3 * 20 + 12, struct.pack(">q", 1))               # delivered at once
    report = verify_store(path, cfg())
    assert not report["ok"] and any("SCHEDULE_TOPIC_XXXX/2@3: tagsCode 1" in e for e in report["cq_errors"])
    with MessageStore.open(path, cfg(schedule_message_service_enable=False)) as s:
        report = s.verify()
    assert not report["ok"] and any("SCHEDULE_TOPIC_XXXX/2@3: tagsCode 1" in e for e in report["cq_errors"])


# -- the command line ------------------------------------------------------------------------------------------------

def test_verify_refuses_a_negative_limit(tmp_path, capsys):
    path = str(tmp_path / "s")
    fill(path, n=5)
    code, out, err = cli(capsys, "verify", "--limit", "-1", path)
    assert code == 2 and "--limit must be >= 0" in err and out == ""


def test_repair_of_a_store_with_other_file_sizes_does_not_warn(tmp_path, capsys, caplog):
    path = str(tmp_path / "s")
    fill(path, n=5)                                            # not the default sizes
    with MessageStore.open(path) as s:                         # what an open with the defaults says
        assert s.geometry_adopted
    assert any("other file sizes than configured" in r.getMessage() for r in caplog.records)
    caplog.clear()
    code, out, err = cli(capsys, "repair", path)
    assert code == 0 and "OK after repair" in out
    assert "other file sizes" not in err
    assert not [r for r in caplog.records if "other file sizes" in r.getMessage()]


def test_a_sound_store_verifies_ok_with_every_check(tmp_path, capsys):
    path = str(tmp_path / "s")
    fill(path, cfg(max_hash_slot_num=10, max_index_num=40))    # many index files (4 x slots: the CLI reads the sizes)
    with MessageStore.open(path, cfg(max_hash_slot_num=10, max_index_num=40)) as s:
        report = s.verify()
        assert len(s.index_service.index_file_list) > 5
    assert report["ok"] and report["index_errors"] == [] and report["index_bad_times"] == 0, report
    assert report["judged_to"] is not None and report["not_judged"] == 0 and not report["live"]
    code, out, _ = cli(capsys, "verify", "-q", path)
    assert code == 0 and "live store" not in out


# -- a store another process writes ----------------------------------------------------------------------------------

WRITER = r"""
import sys, time
from rmqcore import Message, MessageStore, StoreConfig
path = sys.argv[1]
cfg = StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=20 * 1000,
                  max_hash_slot_num=101, max_index_num=404, warm_mapped_file_enable=False)
with MessageStore.open(path, cfg) as s:
    print("open", flush=True)
    i = 0
    while True:
        s.put_batch([Message("Live%d" % (j % 3), b"x" * 300, j % 4, tags="T", keys=["k%d" % (i + j)])
                     for j in range(50)])
        i += 50
        time.sleep(0.002)
"""


def test_verify_of_a_store_a_child_process_writes_judges_up_to_dispatch(tmp_path, capsys):
    path = str(tmp_path / "s")
    child = subprocess.Popen([sys.executable, "-c", WRITER, path], stdout=subprocess.PIPE, cwd=os.getcwd())
    try:
        assert child.stdout.readline().strip() == b"open"
        time.sleep(0.3)
        judged = []
        for _ in range(6):
            code, out, err = cli(capsys, "verify", "-q", "--json", path)
            r = json.loads(out)
            assert code == 0 and r["ok"], (r["cq_errors"][:5], r["index_missing"][:5], r["index_errors"][:5],
                                           r["commitlog_errors"][:5], err)
            assert r["live"] and r["judged_to"] > 0 and r["records"] > 0
            judged.append(r["judged_to"])
            code, out, _ = cli(capsys, "verify", "-q", path)
            assert code == 0 and out.startswith("OK") and "live store" in out and "judged up to" in out
            code, out, _ = cli(capsys, "inspect", "--json", path)
            info = json.loads(out)
            assert code == 0 and info["dispatch"]["dispatched_offset"] <= info["commitlog"]["max_offset"]
        assert judged == sorted(judged) and judged[-1] > judged[0]    # the writer went on; so did the point
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()
    # After the kill: repair recovers, and the whole store verifies.
    code, out, err = cli(capsys, "repair", path)
    assert code == 0 and "OK after repair" in out, out + err


IDLE_HOLDER = r"""
import sys, time
from rmqcore import Message, MessageStore
with MessageStore.open(sys.argv[1]) as s:
    for i in range(5):
        s.put(Message("Idle", b"x" * 100, 0, keys=["k%d" % i, "j%d" % i]))
    s.wait_dispatched(10)
    print("idle", flush=True)
    time.sleep(600)
"""


def test_verify_of_an_idle_live_store_judges_every_record(tmp_path, capsys):
    """A server holding an idle store: every record is written, dispatched and indexed, so verify judges them all.
    (The index header's endPhyOffset is the last keyed record's start: read as its end, that record was always
    left "not judged".)"""
    path = str(tmp_path / "s")
    child = subprocess.Popen([sys.executable, "-c", IDLE_HOLDER, path], stdout=subprocess.PIPE, cwd=os.getcwd())
    try:
        assert child.stdout.readline().strip() == b"idle"
        code, out, err = cli(capsys, "verify", "-q", "--json", path)
        r = json.loads(out)
        assert code == 0 and r["ok"] and r["live"], err
        assert r["records"] == 5 and r["not_judged"] == 0 and r["keys"] == 15       # 2 KEYS and a UNIQ_KEY each
        code, out, err = cli(capsys, "inspect", "--json", path)
        assert r["judged_to"] == json.loads(out)["commitlog"]["max_offset"]
        code, out, _ = cli(capsys, "verify", "-q", path)
        assert code == 0 and "not judged" not in out
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_records_dispatch_had_not_reached_are_not_judged_on_a_live_store_only(tmp_path):
    # The queue's last 30 units are zeroed, as a reader of a live store sees them when dispatch is behind: live, the
    # store is judged up to the first record without its unit; closed, it FAILS.
    from rmqcore.admin import StoreReader
    path = str(tmp_path / "s")
    fill(path)
    patch(os.path.join(path, "consumequeue", TOPIC, "0", "%020d" % (150 * 20)), 20 * 20, bytes(30 * 20))
    with StoreReader(path, cfg()) as r:
        first_missing = r.get(TOPIC, 0, 150 + 19)[0].commitlog_offset + r.get(TOPIC, 0, 169)[0].store_size
        r.locked = True
        live = r.verify_parts()
    assert live["ok"] and live["judged_to"] == first_missing and live["not_judged"] == 30, live
    closed = verify_store(path, cfg())
    assert not closed["ok"] and sum("has no consume-queue unit" in e for e in closed["cq_errors"]) == 30


def test_keys_past_the_index_header_are_not_judged_on_a_live_store_only(tmp_path):
    # The newest index file's header is set back 40 items, as a reader sees it between a writer's item and header
    # writes (the slots already point at the newer items): live, judged up to the record after the one at the
    # header's endPhyOffset (the start of the last record indexed: its keys are in the file); closed, the header is
    # wrong for its slots and keys are missing.
    from rmqcore.admin import StoreReader
    path = str(tmp_path / "s")
    fill(path, cfg(max_hash_slot_num=100000, max_index_num=400000))     # one index file
    f = index_files(path)[0]
    with IndexFile(f, 100000, 400000, read_only=True) as idx:
        count = idx.index_count
        _h, end_phy, _d, _p = idx.item(count - 41)
    with StoreReader(path, cfg(max_hash_slot_num=100000, max_index_num=400000)) as r:
        end_ts = r.look_message(end_phy).store_timestamp
        next_record = end_phy + r.look_message(end_phy).store_size
    with open(f, "rb") as fh:
        (begin_phy,) = struct.unpack_from(">q", fh.read(40), 16)
    patch(f, 8, struct.pack(">qqq", end_ts, begin_phy, end_phy))      # endTimestamp, beginPhyOffset, endPhyOffset
    patch(f, 36, struct.pack(">i", count - 40))
    with StoreReader(path, cfg(max_hash_slot_num=100000, max_index_num=400000)) as r:
        r.locked = True
        live = r.verify_parts()
    assert live["ok"] and live["judged_to"] == next_record and live["not_judged"] == 20, live   # 2 keys a record
    closed = verify_store(path, cfg(max_hash_slot_num=100000, max_index_num=400000))
    assert not closed["ok"] and closed["index_problems"] > 0 and closed["index_missing_count"] > 0


def test_verify_in_process_while_another_thread_puts(tmp_path):
    import threading
    path = str(tmp_path / "s")
    stop = threading.Event()
    with MessageStore.open(path, cfg()) as s:
        def put():
            i = 0
            while not stop.is_set() and i < 30_000:
                s.put(Message(TOPIC, b"y" * 100, i % 4, tags="T", keys=[f"p{i}"]))
                i += 1
                if i % 20 == 0:
                    time.sleep(0.001)
        t = threading.Thread(target=put)
        t.start()
        try:
            time.sleep(0.1)
            for _ in range(20):
                report = s.verify()
                assert report["ok"], (report["cq_errors"][:3], report["index_missing"][:3], report["index_errors"],
                                      report["commitlog_errors"][:3])
                assert report["records"] > 0
        finally:
            stop.set()
            t.join()


# -- reachable_items: the Cython walk and its pure-Python twin ------------------------------------------------------

def test_reachable_items_matches_the_reference_on_hostile_files(tmp_path):
    rng = random.Random(28)
    slots, items = 7, 24
    ref = R.IndexFileRef.create(slots, items, 0, 1_000_000)
    for i in range(items - 4):
        assert ref.put_key(f"T#k{i}", i * 100, 1_000_000 + i * 1500)
    pristine = bytes(ref.buf)
    path = str(tmp_path / "idx")
    for round_ in range(300):
        data = bytearray(pristine)
        for _ in range(rng.randint(0, 5)):
            at = rng.choice([36, 40 + 4 * rng.randrange(slots),
                             40 + 4 * slots + 20 * rng.randrange(items) + rng.choice([0, 12, 16]),
                             rng.randrange(len(data) - 4)])
            data[at:at + 4] = struct.pack(">I", rng.choice([0, 1, 2, 5, 23, 24, 25, 0x7FFFFFFF, 0x80000000,
                                                            0xFFFFFFFF, rng.randrange(1 << 32)]))
        with open(path, "wb") as fh:
            fh.write(data)
        bound = rng.choice([0, 0, items])
        want = R.IndexFileRef.open(bytearray(data), slots, items).reachable_items(bound)
        with IndexFile(path, slots, items, read_only=True) as f:
            h, p, problems, d = f.reachable_items(bound=bound, with_times=True)
            got = (list(memoryview(h).cast("i")), list(memoryview(p).cast("q")), problems,
                   list(memoryview(d).cast("i")))
            for i in (1, items // 2, items - 1):
                assert f.item(i) == R.IndexFileRef.open(bytearray(data), slots, items).item(i)
        assert got == want, round_


STALLED_WRITER = r"""
import signal, sys
from rmqcore import Message, MessageStore, StoreConfig
path = sys.argv[1]
cfg = StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=20 * 1000,
                  max_hash_slot_num=101, max_index_num=404, warm_mapped_file_enable=False)
s = MessageStore.open(path, cfg)
s.put_batch([Message("Kill%d" % (j % 3), b"x" * 300, j % 4, tags="T", keys=["k%d" % j]) for j in range(200)])
s.wait_dispatched()
# The dispatcher stalls (its pass lock held, as while a pass runs) and the next puts are not dispatched when the
# process is killed: a kill at any moment can leave such a tail.
s.reput._lock.acquire()
s.put_batch([Message("Kill%d" % (j % 3), b"y" * 300, j % 4, tags="T", keys=["t%d" % j]) for j in range(100)])
print("ready", flush=True)
signal.pause()
"""


def test_verify_after_a_kill_reports_the_undispatched_tail_as_such_not_as_damage(tmp_path, capsys):
    """A store whose process was killed (SIGKILL) before its dispatcher reached the last puts: the records are
    sound and the next open builds their units and keys, so verify says OK and counts them "not yet dispatched",
    as inspect does (issue 36); a unit missing below that point is still damage."""
    path = str(tmp_path / "s")
    child = subprocess.Popen([sys.executable, "-c", STALLED_WRITER, path], stdout=subprocess.PIPE, cwd=os.getcwd())
    try:
        assert child.stdout.readline().strip() == b"ready"
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    code, out, err = cli(capsys, "inspect", "--json", path)
    behind = json.loads(out)["dispatch"]["behind_bytes"]
    assert code == 0 and behind > 0
    code, out, err = cli(capsys, "verify", "-q", "--json", path)
    r = json.loads(out)
    assert code == 0 and r["ok"], (r["cq_errors"][:3], r["index_missing"][:3], r["commitlog_errors"][:3])
    # the 100 records put after the stall (and the last one dispatched before it, whose keys are judged as the
    # live rule does: the index header's endPhyOffset is that record's start)
    assert r["not_dispatched"] in (100, 101) and r["records"] == 300 and not r["live"]
    code, out, err = cli(capsys, "verify", "-q", path)
    assert code == 0 and out.startswith("OK") and f"{r['not_dispatched']} record(s) from commitlog offset" in out \
        and "not yet dispatched (built at the next open)" in out, out
    # The next open dispatches the tail; then nothing is left undispatched.
    with MessageStore.open(path, cfg()) as s:
        assert sum(s.max_offset("Kill%d" % t, q) for t in range(3) for q in range(4)) == 300
    code, out, err = cli(capsys, "verify", "-q", "--json", path)
    r = json.loads(out)
    assert code == 0 and r["ok"] and r["not_dispatched"] == 0 and r["records"] == 300


def test_a_unit_missing_below_where_a_killed_store_dispatches_again_is_still_damage(tmp_path):
    # The same store judged as killed: a record without its unit past the point its next open dispatches from is
    # "not dispatched"; the same record below that point is an error, since no open would rebuild its unit.
    from rmqcore.admin import StoreReader
    from rmqcore.recovery import verify_parts
    path = str(tmp_path / "s")
    fill(path)
    patch(os.path.join(path, "consumequeue", TOPIC, "0", "%020d" % (150 * 20)), 20 * 20, bytes(30 * 20))
    with StoreReader(path, cfg()) as r:
        first_missing = r.get(TOPIC, 0, 169)[0].commitlog_offset + r.get(TOPIC, 0, 169)[0].store_size
        args = (r.commit_log, list(r.consume_queues.values()), r.index_service)
        rebuilt = verify_parts(*args, redispatch_from=first_missing)
        not_rebuilt = verify_parts(*args, redispatch_from=r.max_offset)
    assert rebuilt["ok"] and rebuilt["not_dispatched"] == 30 and rebuilt["judged_to"] == first_missing, rebuilt
    assert not not_rebuilt["ok"] and not_rebuilt["not_dispatched"] == 0
    assert sum("has no consume-queue unit" in e for e in not_rebuilt["cq_errors"]) == 30
