"""SYNC_FLUSH group commit: the C meeting point (rmqcore._flush.GroupCommit) on its own, its flush loop over a
mapped file, and the store's put / put_async / aput on top of it, with real threads."""
import asyncio
import os
import random
import threading
import time

import pytest

from rmqcore import Message, MessageStore, PutStatus, StoreConfig
from rmqcore._flush import CLOSED, FAILED, FLUSHED, STOPPED, TIMEOUT, GroupCommit
from rmqcore._mapped_file import MappedFile
from rmqcore.flush import GroupCommitService


def start(fn, *args):
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


def named_puts(flush):
    """A GroupCommit whose flush is ``flush(requested)`` (the ends asked for so far), and put(name, end, timeout),
    which asks for ``end`` and records the sync's code under ``name`` in the results dict."""
    requested: list = []
    results: dict = {}
    g = GroupCommit(0, lambda: flush(requested))

    def put(name, end, timeout):
        requested.append(end)
        results[name] = g.sync(end, timeout)
    return g, results, put


# -- the C meeting point: leader/follower ------------------------------------------------------------------------------

class Log:
    """A mapped file appended under a lock, as the commitlog's put lock serialises appends."""

    def __init__(self, tmp_path, size=1 << 20, start=0):
        self.mf = MappedFile(str(tmp_path / ("%020d" % start)), size)
        self.start = start
        self.lock = threading.Lock()

    def append(self, n=100):
        with self.lock:
            assert self.mf.append(os.urandom(n))
            return self.start + self.mf.wrote_position


def test_wait_returns_at_once_when_already_flushed():
    g = GroupCommit(1000)
    assert g.wait_flushed(1000, 0) == FLUSHED
    assert g.wait_flushed(1, 5) == FLUSHED
    assert g.served == 2 and g.requested == 1000 and g.flushes == 0   # nothing asked for beyond what is flushed


def test_a_lone_put_leads_its_own_flush(tmp_path):
    log = Log(tmp_path)
    g = GroupCommit(0, None, log.mf)
    for i in range(5):
        end = log.append()
        assert g.sync(end, 5) == FLUSHED
        assert log.mf.flushed_position == log.mf.wrote_position == end
    assert g.flushes == g.led_by_puts == 5          # no other thread took part


@pytest.mark.parametrize("spin", [True, False], ids=["on-deck", "one-at-a-time"])
@pytest.mark.parametrize("seed", range(3))
def test_many_waiters_each_released_by_a_flush_that_covers_them(tmp_path, seed, spin):
    # Producers append and sync concurrently: every one must come back FLUSHED with its record on disk, none may
    # sleep through the flush that covered it (that would be a 10 s timeout here), and they must share flushes;
    # with puts going on deck (spinning for their turn) and without.
    rng = random.Random(seed)
    log = Log(tmp_path, 4 << 20)
    g = GroupCommit(0, None, log.mf)
    g.spin_ns = 20_000 if spin else 0
    bad = []

    def producer(n):
        for _ in range(n):
            end = log.append(rng.randint(1, 500))
            rc = g.sync(end, 10)
            if rc != FLUSHED or log.mf.flushed_position < end or g.flushed_where < end:
                bad.append((end, rc))

    producers = [start(producer, 60) for _ in range(12)]
    for p in producers:
        p.join(60)
    assert not bad, bad[:5]
    assert g.served == 12 * 60
    assert g.flushes < 12 * 60, "waiting puts shared no flush"
    if not spin:
        assert g.catches == 0
    elif len(os.sched_getaffinity(0)) > 1:
        assert g.catches > 0, "no put ever caught its turn on deck"    # typically 3 in 4 here


def test_timeout_failure_and_close_codes(tmp_path):
    # Every flush goes through Python here (no plain file): a slow one lets a follower time out; a failed one
    # fails its leader and the followers at once; close releases a follower waiting behind a running flush.
    behaviour = {"delay": 0.3, "fail": False}
    flushed = [0]

    def flush_all(requested):
        time.sleep(behaviour["delay"])
        if behaviour["fail"]:
            raise OSError(5, "Input/output error")
        flushed[0] = max(requested)
        return flushed[0], None

    g, results, put = named_puts(flush_all)

    leader = start(put, "leader", 10, 5)
    time.sleep(0.05)
    put("follower", 20, 0.05)                       # the leader's flush runs 0.3 s: the follower times out
    assert results["follower"] == TIMEOUT
    leader.join(5)
    assert results["leader"] == FLUSHED and g.flushed_where >= 10

    behaviour["fail"] = True
    leader = start(put, "leader", 30, 5)
    time.sleep(0.05)
    put("follower", 40, 5)
    leader.join(5)
    assert results["leader"] == FAILED and results["follower"] == FAILED
    assert "Input/output error" in g.last_error
    assert g.flushed_where < 30

    behaviour.update(fail=False, delay=0.3)
    leader = start(put, "leader", 50, 5)
    time.sleep(0.05)
    follower = start(put, "follower", 1 << 40, 5)    # never covered by the leader's flush
    time.sleep(0.05)
    g.close()
    follower.join(5)
    leader.join(5)
    assert results["follower"] == CLOSED
    assert g.wait_flushed(1 << 41, 10) == CLOSED     # after close nothing waits
    assert g.closed


@pytest.mark.parametrize("past_target", [False, True])
def test_puts_that_came_during_a_flush_get_the_next_one(past_target):
    # Puts arriving while a flush runs are not covered by it: when it ends one of them is woken to lead the next
    # (one that timed out meanwhile must not take that turn with it), or all of them when the flush went past its
    # target and may cover them. Either way they come back FLUSHED long before their timeout.
    def flush_all(requested):
        target = max(requested)
        time.sleep(0.2)
        return (max(requested) if past_target else target), None

    g, results, put = named_puts(flush_all)

    leader = start(put, "leader", 10, 5)
    time.sleep(0.05)
    quitter = start(put, "quitter", 20, 0.05)        # gives up while the leader's flush runs
    late = [start(put, f"late{i}", 30 + i, 10) for i in range(3)]
    t0 = time.monotonic()
    for t in [leader, quitter, *late]:
        t.join(15)
    assert results["leader"] == FLUSHED and results["quitter"] == TIMEOUT
    assert [results[f"late{i}"] for i in range(3)] == [FLUSHED] * 3
    assert time.monotonic() - t0 < 3 and g.flushed_where >= 32
    assert g.flushes == (1 if past_target else 2)


def test_covered_puts_whose_peers_stopped_putting_come_back_on_their_own():
    # A flush led by a put wakes none of the puts it covered: that put passes them the baton at its next wait, one
    # at a time. Here every thread puts once and leaves, so nobody passes it: each covered put must wake on its own
    # shortly after the flush ends, not at its 30 s timeout.
    def flush_all(requested):
        time.sleep(0.1)
        return max(requested), None             # past the target: the puts that came meanwhile are covered too

    g, results, put = named_puts(flush_all)
    leader = start(put, "leader", 10, 30)
    time.sleep(0.03)
    late = [start(put, f"late{i}", 20 + i, 30) for i in range(6)]
    t0 = time.monotonic()
    for t in [leader, *late]:
        t.join(40)
    assert [results[f"late{i}"] for i in range(6)] == [FLUSHED] * 6 and results["leader"] == FLUSHED
    assert time.monotonic() - t0 < 2
    assert g.flushes == 1 and g.stalls >= 1


def test_a_leader_passes_the_baton_before_it_lingers_for_its_group(tmp_path):
    # Four producers put in turn: a flush covers several of them, its leader comes back, appends, wakes one covered
    # peer (the baton) and leads the next flush, lingering for as many requests as the last one served. The peer
    # it lingers for is the one it woke, so that wake-up must be made before the leader lingers, not after:
    # otherwise the rounds wait for the peers' own stall timers (each one counted in stalls).
    log = Log(tmp_path, 4 << 20)
    g = GroupCommit(0, None, log.mf)
    g.linger_ns = 50_000_000
    bad = []

    def producer(n):
        for _ in range(n):
            end = log.append(200)
            if g.sync(end, 10) != FLUSHED:
                bad.append(end)

    producers = [start(producer, 200) for _ in range(4)]
    for p in producers:
        p.join(60)
    assert not bad and g.served == 800
    assert g.flushes < 600, "the producers shared no flush"
    assert g.stalls < 60, f"{g.stalls} of 800 puts woke on their own timer: nobody passed them the baton"


def test_the_service_thread_flushes_requests_nobody_waits_for(tmp_path):
    log = Log(tmp_path)
    g = GroupCommit(0, None, log.mf)
    codes = []
    server = start(lambda: codes.append(g.serve()))
    for _ in range(20):
        g.request(log.append())                      # WAIT=false puts: nobody waits, the service flushes
    end = log.start + log.mf.wrote_position
    assert g.wait_only(end, 5) == FLUSHED            # wait_only never leads: the service did it
    assert log.mf.flushed_position == log.mf.wrote_position
    assert g.led_by_puts == 0 and g.flushes >= 1
    g.stop()
    server.join(5)
    assert codes == [STOPPED]


def test_a_flush_beyond_the_plain_file_goes_through_python(tmp_path):
    size = 4096
    log = Log(tmp_path, size)
    log.append()
    calls = []

    def flush_all():
        calls.append(1)
        log.mf.flush()
        return size + 10, None

    g = GroupCommit(0, flush_all, log.mf)
    assert g.sync(size + 10, 5) == FLUSHED            # a record in the next file: Python flushes every file
    assert calls == [1] and log.mf.flushed_position == log.mf.wrote_position


def test_arrival_wait():
    g = GroupCommit(0)
    seen = g.arrivals
    assert g.wait_arrival(seen, 0.02) == seen             # nothing arrived: returns after the timeout
    start(lambda: (time.sleep(0.05), g.request(100)))
    assert g.wait_arrival(seen, 5) == seen + 1
    assert g.requested == 100


# -- the store ----------------------------------------------------------------------------------------------------

def cfg(**kw):
    base = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 512,
                max_message_size=16 * 1024, max_hash_slot_num=97, max_index_num=2000, flush_disk_type="SYNC_FLUSH",
                warm_mapped_file_enable=False)
    base.update(kw)
    return StoreConfig(**base)


def test_sync_puts_from_threads_across_file_ends(tmp_path):
    # 8 producers over 64 KiB files: records land on both sides of file ends, where the C loop hands over to Python.
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        results = []
        lock = threading.Lock()

        def producer(k):
            for i in range(120):
                r = store.put(Message("GC", os.urandom(random.randint(10, 900)), k % 4, keys=[f"k{k}-{i}"]))
                with lock:
                    results.append(r)

        threads = [start(producer, k) for k in range(8)]
        for t in threads:
            t.join(60)
        assert len(results) == 960 and all(r.status is PutStatus.PUT_OK for r in results)
        assert len(store.commit_log.files()) > 4
        end = max(r.commitlog_offset + r.wrote_bytes for r in results)
        assert store.commit_log.flushed_where >= end
        gc = store.group_commit
        assert gc.requests_served >= 960 and gc.flushes < 960, "no flush was shared"
        assert store.verify()["ok"]


def test_put_async_and_aput_complete_when_flushed(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        futures = [store.put_async(Message("GA", b"x" * 200, i % 2)) for i in range(500)]
        results = [f.result(10) for f in futures]
        assert all(r.status is PutStatus.PUT_OK for r in results)
        assert store.commit_log.flushed_where >= max(r.commitlog_offset + r.wrote_bytes for r in results)
        assert [r.queue_offset for r in results[:4]] == [0, 0, 1, 1]

        async def main():
            return await asyncio.gather(*(store.aput(Message("GA", b"y" * 100, 0)) for _ in range(50)))

        assert all(r.ok for r in asyncio.run(main()))
        done = []
        store.put_async(Message("GA", b"z", 1)).add_done_callback(lambda f: done.append(f.result().status))
        deadline = time.monotonic() + 10
        while not done and time.monotonic() < deadline:
            time.sleep(0.005)
        assert done == [PutStatus.PUT_OK]


class _CountingLoop(asyncio.SelectorEventLoop):
    """A real event loop that counts the calls other threads make into it."""
    threadsafe_calls = 0

    def call_soon_threadsafe(self, *args, **kw):
        self.threadsafe_calls += 1
        return super().call_soon_threadsafe(*args, **kw)


def test_aput_completes_in_its_loop_with_one_call_per_flush(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        loop = _CountingLoop()
        completed_on = set()

        async def main():
            futures = [store.aput(Message("GA", b"y" * 100, i % 3)) for i in range(2000)]
            for f in futures:
                f.add_done_callback(lambda _: completed_on.add(threading.get_ident()))
            return await asyncio.gather(*futures)

        flushes = store.group_commit.flushes
        try:
            results = loop.run_until_complete(main())
        finally:
            loop.close()
        assert all(r.status is PutStatus.PUT_OK for r in results)
        assert store.commit_log.flushed_where >= results[-1].commitlog_offset + results[-1].wrote_bytes
        assert completed_on == {threading.get_ident()}          # the loop's thread, never the completer's
        assert loop.threadsafe_calls <= store.group_commit.flushes - flushes < 2000


def test_aput_outside_a_running_loop_writes_nothing(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        end = store.commit_log.max_offset
        with pytest.raises(RuntimeError):
            store.aput(Message("GA", b"y", 0))
        assert store.commit_log.max_offset == end and store.topics() == {}


def test_a_cancelled_wait_leaves_the_record_stored(tmp_path, caplog):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        f = store.put_async(Message("GA", b"kept-1", 0))
        f.cancel()

        async def main():
            a = store.aput(Message("GA", b"kept-2", 0))
            a.cancel()
            return await store.aput(Message("GA", b"last", 0))

        last = asyncio.run(main())
        assert last.ok and store.wait_flushed(last.commitlog_offset + last.wrote_bytes)
        store.wait_dispatched()
        got = store.get_messages("G", "GA", 0, 0, 3)
        assert [bytes(m.body) for m in got.messages] == [b"kept-1", b"kept-2", b"last"]
        assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")]



class _FakeCommitLog:
    """A commit log whose flush never gets anywhere: what a hung disk looks like to the group commit."""

    def __init__(self):
        self.flushed_where = 0
        self.mapped_file_queue = self

    def find_mapped_file_by_offset(self, offset):
        return None

    def flush(self, least_pages=0):
        time.sleep(0.01)
        return 0


def test_put_async_reports_flush_disk_timeout_when_no_flush_comes():
    svc = GroupCommitService(_FakeCommitLog())
    svc.start()
    try:
        got = []
        svc.when_flushed(500, 0.1, got.append)
        t0 = time.monotonic()
        while not got and time.monotonic() - t0 < 5:
            time.sleep(0.005)
        assert got == [False]
        assert svc.wait_flushed(600, 0.05) is False

        async def in_loop():                        # aput's form: the callback runs in the loop
            fut = asyncio.get_running_loop().create_future()
            svc.when_flushed(700, 0.1, fut.set_result, asyncio.get_running_loop())
            return await asyncio.wait_for(fut, 5)

        assert asyncio.run(in_loop()) is False
    finally:
        svc.shutdown()


def test_put_async_and_aput_futures_get_flush_disk_timeout_when_no_flush_comes():
    # The futures' own path (complete_when_flushed): the PutResult with FLUSH_DISK_TIMEOUT in place of PUT_OK once
    # sync_flush_timeout passed; a future already cancelled is left alone; a done one is not completed twice.
    from concurrent.futures import Future
    from rmqcore._message import PutResult
    svc = GroupCommitService(_FakeCommitLog())
    svc.start()
    try:
        ok = PutResult(PutStatus.PUT_OK, 1000, 7, 100, 1)
        plain, cancelled = Future(), Future()
        cancelled.cancel()
        t0 = time.monotonic()
        svc.complete_when_flushed(1100, 0.1, plain, ok)
        svc.complete_when_flushed(1100, 0.1, cancelled, ok)
        r = plain.result(5)
        assert time.monotonic() - t0 >= 0.09
        assert r.status is PutStatus.FLUSH_DISK_TIMEOUT and (r.commitlog_offset, r.queue_offset) == (1000, 7)
        assert ok.status is PutStatus.PUT_OK and cancelled.cancelled()

        async def in_loop():
            loop = asyncio.get_running_loop()
            futs = [loop.create_future() for _ in range(3)]
            futs[1].set_result("mine")
            for f in futs:
                svc.complete_when_flushed(1200, 0.1, f, ok, loop)
            return await asyncio.wait_for(asyncio.gather(*futs), 5)

        got = asyncio.run(in_loop())
        assert got[1] == "mine" and [g.status for g in (got[0], got[2])] == [PutStatus.FLUSH_DISK_TIMEOUT] * 2
    finally:
        svc.shutdown()


def test_linger_and_spin_are_tunable_and_checked(tmp_path):
    gc = GroupCommit(0)
    assert gc.linger_ns == 200_000
    with pytest.raises(ValueError, match="linger_ns"):
        gc.linger_ns = -1
    assert gc.linger_ns == 200_000
    # a put spins for its turn only where another CPU can run the put it waits for
    assert gc.spin_ns == (20_000 if len(os.sched_getaffinity(0)) > 1 else 0)
    with pytest.raises(ValueError, match="spin_ns"):
        gc.spin_ns = -5
    gc.spin_ns = 0
    assert gc.spin_ns == 0 and gc.catches == 0
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        store.group_commit.core.linger_ns = 0         # a leader flushes at once, whatever its last group was
        results = []
        threads = [threading.Thread(target=lambda: results.extend(store.put(Message("GL", b"l" * 64, 0))
                                                                  for _ in range(50))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(results) == 200 and all(r.status is PutStatus.PUT_OK for r in results)
        assert store.commit_log.flushed_where >= max(r.commitlog_offset + r.wrote_bytes for r in results)


def test_flush_error_fails_the_waiting_puts_at_once():
    class Broken(_FakeCommitLog):
        def flush(self, least_pages=0):
            raise OSError(5, "Input/output error")

    svc = GroupCommitService(Broken())
    svc.start()
    try:
        t0 = time.monotonic()
        assert svc.wait_flushed(100, 10) is False
        assert time.monotonic() - t0 < 5                  # answered by the failure, not by the timeout
        assert "Input/output error" in svc.last_error
    finally:
        svc.shutdown()


def test_every_sync_put_path_answers_after_the_group_commit_closed(tmp_path, caplog):
    # The store's SYNC_FLUSH paths (put, put_async, aput: one Cython call each) with the group commit closed under
    # them, as during a close: no wait may hang (the completer thread may have stopped already: an entry added
    # then is answered at once), and each answer is true: FLUSH_DISK_TIMEOUT, or PUT_OK only for a record the last
    # flush covered. The records stay stored; a WAIT=false put does not wait and reports PUT_OK.
    store = MessageStore.open(str(tmp_path / "s"), cfg())
    try:
        first = store.put(Message("GT", b"a" * 10, 0))
        assert first.status is PutStatus.PUT_OK
        store.group_commit.core.close()
        results = [store.put(Message("GT", b"b" * 10, 0))]
        results.append(store.put(Message("GT", b"c" * 10, 0, properties={"WAIT": "false"})))
        assert results[-1].status is PutStatus.PUT_OK
        results.append(store.put_async(Message("GT", b"d" * 10, 0)).result(5))

        async def aput():
            return await asyncio.wait_for(store.aput(Message("GT", b"e" * 10, 0)), 5)

        results.append(asyncio.run(aput()))
        flushed = store.group_commit.core.flushed_where
        for r in results[:1] + results[2:]:
            assert r.status is PutStatus.FLUSH_DISK_TIMEOUT or (
                r.status is PutStatus.PUT_OK and flushed >= r.commitlog_offset + r.wrote_bytes), r
        assert results[0].status is PutStatus.FLUSH_DISK_TIMEOUT      # closed before anything flushed it
        assert "sync flush did not cover offset %d" % results[0].commitlog_offset in caplog.text
        assert [r.queue_offset for r in results] == [1, 2, 3, 4]
        assert store.wait_dispatched()
        got = store.get_messages("g", "GT", 0, 0, 10).messages
        assert [bytes(m.body)[:1] for m in got] == [b"a", b"b", b"c", b"d", b"e"]
    finally:
        store.close()


def test_close_answers_pending_async_puts(tmp_path):
    store = MessageStore.open(str(tmp_path / "s"), cfg())
    futures = [store.put_async(Message("GC", b"q" * 50, 0)) for _ in range(100)]
    store.close()                                          # flushes what was appended, then answers everybody
    assert all(f.done() and f.result().status is PutStatus.PUT_OK for f in futures)


def test_wait_false_puts_return_appended_and_one_wait_acknowledges_them(tmp_path):
    # RocketMQ's WAIT property ("false": waitStoreMsgOK off): a SYNC_FLUSH put returns once appended; the flush is
    # asked for, and wait_flushed on the last record's end acknowledges every put before it.
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        results = [store.put(Message("GW", b"w" * 300, 0, properties={"WAIT": "false"})) for _ in range(200)]
        assert all(r.status is PutStatus.PUT_OK for r in results)
        end = results[-1].commitlog_offset + results[-1].wrote_bytes
        assert store.wait_flushed(end, 10) is True
        assert store.commit_log.flushed_where >= end
        batch = store.put_batch([Message("GW", b"b", 1, properties={"WAIT": "false"}) for _ in range(10)])
        f = store.put_async(Message("GW", b"a", 1, properties={"WAIT": "false"}))
        assert f.done() and f.result().status is PutStatus.PUT_OK
        assert store.wait_flushed(f.result().commitlog_offset + f.result().wrote_bytes, 10)
        assert store.commit_log.flushed_where >= batch[-1].commitlog_offset
        with pytest.raises(ValueError, match="beyond the commitlog's end"):
            store.wait_flushed(store.commit_log.max_offset + 1)
        assert store.verify()["ok"]


def test_wait_flushed_under_async_flush_flushes_now(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg(flush_disk_type="ASYNC_FLUSH",
                                                   flush_interval_commit_log=60_000)) as store:
        r = store.put(Message("GW", b"x" * 100, 0))
        end = r.commitlog_offset + r.wrote_bytes
        assert store.wait_flushed(end) is True and store.commit_log.flushed_where >= end
