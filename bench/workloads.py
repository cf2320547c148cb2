"""Workloads shared by the pytest-benchmark cases and the ``python -m bench`` runner.

Everything here sets up state (messages, warmed commit logs, filled stores, record buffers) or runs one timed
kernel; nothing asserts on time. Stores live in temporary directories that the callers always delete.
"""
from __future__ import annotations

import collections
import contextlib
import gc
import os
import shutil
import tempfile
import threading
import time

MiB = 1024 * 1024
BODY_SIZE = 1024
TOPIC = "BenchTopic"
_BODY = os.urandom(BODY_SIZE)

# Index sizes for benchmark stores: 2,000,003 slots and 4,000,000 items make an 88 MB index file, room for
# 1,000,000 messages indexed under a key and their UNIQ_KEY. The 420 MB default is never used here.
INDEX_SLOTS = 2_000_003
INDEX_ITEMS = 4_000_000


def body(size: int = BODY_SIZE) -> bytes:
    return _BODY if size == BODY_SIZE else os.urandom(size)


def make_messages(n: int, *, body_size: int = BODY_SIZE, queues: int = 1, start: int = 0, keys: bool = False,
                  tags: str | None = None, topic: str = TOPIC) -> list:
    """``n`` fresh Messages (no UNIQ_KEY yet: the store generates it at put, as for a Message built by hand).

    Messages must not be reused across timed runs: the first encode stores the UNIQ_KEY in the message's
    properties, so a second put of the same object skips the key generation a real put pays for.
    """
    from rmqcore import Message
    b = body(body_size)
    if keys:
        return [Message(topic, b, (start + i) % queues, tags, f"key-{start + i:08d}") for i in range(n)]
    if queues == 1:
        return [Message(topic, b, 0, tags) for _ in range(n)]
    return [Message(topic, b, (start + i) % queues, tags) for i in range(n)]


def bench_config(file_size: int = 256 * MiB, **kw):
    from rmqcore import StoreConfig
    kw.setdefault("flush_disk_type", "ASYNC_FLUSH")
    kw.setdefault("warm_mapped_file_enable", True)
    kw.setdefault("max_hash_slot_num", INDEX_SLOTS)
    kw.setdefault("max_index_num", INDEX_ITEMS)
    return StoreConfig(mapped_file_size_commit_log=file_size, **kw)


@contextlib.contextmanager
def temp_dir(base: str | None = None, prefix: str = "rmqbench-"):
    """A temporary directory, always removed (even when the benchmark fails)."""
    path = tempfile.mkdtemp(prefix=prefix, dir=base)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def gc_paused():
    """Timed sections run with the cyclic GC off (collected just before), so a collection of the millions of
    set-up objects does not land in one repeat and not another."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# -- warmed commit logs --------------------------------------------------------------------------------------------

def wait_allocations(mfq, timeout: float = 120.0) -> None:
    """Wait for the background allocation (create + pre-fault) of the next mapped file, then warm it again
    (a no-op when the allocator already did: the pages are present)."""
    pending = getattr(mfq, "_pending", None)
    if pending:
        for nxt in list(pending.values()):
            nxt = nxt.result(timeout=timeout) if hasattr(nxt, "result") else nxt
            nxt.warm_up()
    else:   # the allocate thread keeps a runway ahead instead: give it a moment
        time.sleep(0.5)


def prewarm(mfq, put_few) -> None:
    """Put a few records (which creates the first file and starts allocating the next), pre-fault the rest of the
    current file, and wait until the next file is allocated and pre-faulted: timed puts then only write warm pages."""
    put_few()
    mf = mfq.get_last_mapped_file()
    mf.warm_up()
    wait_allocations(mfq)


def warm_capacity(mfq) -> int:
    """Bytes that can still be appended to the current (pre-faulted) file. The next file is pre-faulted too, but
    the first append into it makes the allocator start creating and pre-faulting the file after it, on a
    background thread that would compete with the timed puts for the 2 cores: timed runs stay in one file."""
    last = mfq.last()
    return last.file_from_offset + mfq.mapped_file_size - mfq.get_max_wrote_position() - 4096


def record_size(body_size: int = BODY_SIZE, queues: int = 1) -> int:
    """Bytes one benchmark message takes in the commitlog (encoded with a generated UNIQ_KEY)."""
    from rmqcore._encoder import MessageEncoder
    enc = MessageEncoder()
    buf = enc.encode_batch(make_messages(1, body_size=body_size, queues=queues))
    return buf.length(0)


class WarmCommitLog:
    """A CommitLog on fresh, pre-faulted files in a temporary directory; ``close()`` deletes everything."""

    def __init__(self, file_size: int = 256 * MiB, base_dir: str | None = None):
        from rmqcore.commit_log import CommitLog
        self.dir = tempfile.mkdtemp(prefix="rmqbench-cl-", dir=base_dir)
        try:
            self.cl = CommitLog.open(os.path.join(self.dir, "commitlog"), bench_config(file_size))
            prewarm(self.cl.mapped_file_queue, lambda: self.cl.put_messages(make_messages(8)))
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def capacity(self) -> int:
        return warm_capacity(self.cl.mapped_file_queue)

    def close(self) -> None:
        try:
            self.cl.destroy()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def put_each(cl, messages) -> int:
    """One put_message call per message; returns the bytes written."""
    put = cl.put_message
    total = 0
    for m in messages:
        total += put(m).wrote_bytes
    return total


def put_batches(cl, messages, batch: int = 1000) -> int:
    put = cl.put_messages
    total = 0
    for i in range(0, len(messages), batch):
        for r in put(messages[i:i + batch]):
            total += r.wrote_bytes
    return total


def put_batches_presliced(put, batches) -> int:
    """put_messages over batches sliced in advance (the slicing is the caller's, not the store's, cost)."""
    n = 0
    for b in batches:
        n += len(put(b))
    return n


def put_threads(cl, per_thread: list[list]) -> float:
    """Each list of messages put by its own thread, one put_message per message, all starting together.
    Returns the seconds from the common start to the last thread's end."""
    barrier = threading.Barrier(len(per_thread) + 1)
    errors: list = []

    def worker(msgs):
        try:
            put = cl.put_message
            barrier.wait()
            for m in msgs:
                put(m)
        except BaseException as e:  # reported after join
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(msgs,)) for msgs in per_thread]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed


# -- record buffers ------------------------------------------------------------------------------------------------

def record_buffer(n: int, body_size: int = BODY_SIZE, base_dir: str | None = None) -> bytearray:
    """``n`` real commitlog records (1 KiB bodies by default) back to back in ordinary (warm) memory, written by
    a CommitLog and copied out, followed by 8 zero bytes (end of data)."""
    from rmqcore.commit_log import CommitLog
    per = record_size(body_size) + 64
    size = max(16 * MiB, 1 << (n * per + 2 * MiB).bit_length())
    with temp_dir(base_dir, "rmqbench-records-") as d:
        cl = CommitLog.open(os.path.join(d, "commitlog"), bench_config(size, warm_mapped_file_enable=False))
        try:
            for i in range(0, n, 1000):
                cl.put_messages(make_messages(min(1000, n - i), body_size=body_size))
            mf = cl.mapped_file_queue.first()
            view = mf.select(0, mf.read_position)
            try:
                out = bytearray(view)
            finally:
                view.release()
        finally:
            cl.destroy()
    out += bytes(8)
    return out


def decode_all(buf, check_crc: bool = False) -> int:
    """Decode every record of ``buf`` into MessageExt objects (RecordIterator); returns how many."""
    from rmqcore._message import RecordIterator
    it = RecordIterator(buf, 0, -1, check_crc, 0)
    n = 0
    for _ in it:
        n += 1
    return n


def scan_all(buf, check_crc: bool = True) -> int:
    from rmqcore._codec import scan_records
    _pos, count, _code = scan_records(buf, 0, -1, check_crc)
    return count


# -- stores --------------------------------------------------------------------------------------------------------

def open_store(path: str, config):
    from rmqcore import MessageStore
    return MessageStore.open(path, config)


def prewarm_store(store, topic: str = TOPIC, queues: int = 1) -> None:
    """Put a few messages so the first commitlog file exists, pre-fault it, wait for the next file, and let the
    dispatcher build the queues' first consume-queue files and the index file."""
    cl = store.commit_log
    prewarm(cl.mapped_file_queue, lambda: store.put_batch(make_messages(max(8, queues), queues=queues,
                                                                        topic=topic)))
    store.wait_dispatched(60)


def fill_store(store, n: int, *, queues: int = 1, batch: int = 1000, body_size: int = BODY_SIZE,
               keys: bool = False, start: int = 0) -> None:
    for i in range(0, n, batch):
        store.put_batch(make_messages(min(batch, n - i), body_size=body_size, queues=queues, keys=keys,
                                      start=start + i))
    store.wait_dispatched(600)


def get_all(store, topic: str, queue_id: int, offset: int, end: int, max_count: int = 32,
            group: str = "bench-group") -> int:
    """Pull a queue from ``offset`` to ``end`` in batches of ``max_count``; returns how many messages came back."""
    get = store.get_messages
    n = 0
    while offset < end:
        g = get(group, topic, queue_id, offset, max_count)
        got = len(g.messages)
        if got == 0:
            break
        n += got
        offset = g.next_begin_offset
    return n


def write_keyed_commitlog(root: str, config, n_keys: int, *, queues: int = 8, body_size: int = 128,
                          batch: int = 1000) -> None:
    """A store directory holding only a commitlog of ``n_keys`` messages, each with one key ``key-%08d`` (and
    its UNIQ_KEY), round-robin over ``queues`` queues. Opening it as a MessageStore dispatches it all."""
    from rmqcore.commit_log import CommitLog
    cl = CommitLog.open(os.path.join(root, "commitlog"), config)
    try:
        for i in range(0, n_keys, batch):
            cl.put_messages(make_messages(min(batch, n_keys - i), body_size=body_size, queues=queues, keys=True,
                                          start=i))
    finally:
        cl.close()


def percentile(sorted_values, p: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, int(round(p / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def dispatch_info(store) -> dict:
    """dispatched_records, dispatch_lag_ms, dispatch_behind_bytes and dispatch_error from ``runtime_info()``; the
    same figures straight from the reput service if runtime_info itself fails."""
    try:
        info = store.runtime_info()
        return {k: info.get(k) for k in ("dispatched_records", "dispatch_lag_ms", "dispatch_behind_bytes",
                                         "dispatch_error")}
    except Exception:
        reput = store.reput
        return {"dispatched_records": reput.dispatched, "dispatch_lag_ms": reput.lag_ms,
                "dispatch_behind_bytes": reput.behind(), "dispatch_error": reput.last_error}


class LagSampler(threading.Thread):
    """Polls the dispatch figures of ``store.runtime_info()`` every ``interval`` seconds; keeps the worst dispatch
    lag and backlog. ``dispatch_lag_ms`` is only updated when a batch is dispatched, so lag samples count only once
    the dispatcher has dispatched past ``baseline`` records (the count when timing began): before that it still
    shows the age of the set-up records."""

    def __init__(self, store, interval: float = 0.002, baseline: int | None = None):
        super().__init__(name="bench-lag-sampler", daemon=True)
        self.store = store
        self.interval = interval
        self.baseline = dispatch_info(store)["dispatched_records"] if baseline is None else baseline
        self.stop_event = threading.Event()
        self.max_lag_ms = 0
        self.max_behind_bytes = 0
        self.samples = 0

    def sample(self):
        info = dispatch_info(self.store)
        if (info.get("dispatched_records") or 0) > self.baseline:
            self.max_lag_ms = max(self.max_lag_ms, int(info.get("dispatch_lag_ms") or 0))
        self.max_behind_bytes = max(self.max_behind_bytes, int(info.get("dispatch_behind_bytes") or 0))
        self.samples += 1

    def run(self):
        while not self.stop_event.is_set():
            self.sample()
            self.stop_event.wait(self.interval)

    def stop(self):
        self.stop_event.set()
        self.join()
        self.sample()   # the lag of the last dispatched batch


# -- durability: group commit, recovery scan, reopen after a crash ---------------------------------------------------

SYNC_PRODUCERS = (1, 4, 16)
SYNC_QUEUES = 4
SYNC_WINDOW = 64        # puts in flight per pipelining producer


def sync_config(file_size: int = 256 * MiB, **kw):
    """A SYNC_FLUSH store config with the default write runway (no whole-file warm-up, which under SYNC_FLUSH
    writes the file's zeros to disk and competes with the group commit's syncs)."""
    kw.setdefault("flush_disk_type", "SYNC_FLUSH")
    kw.setdefault("warm_mapped_file_enable", False)
    return bench_config(file_size, **kw)


def fsync_per_message(directory: str, seconds: float, max_n: int = 1_000_000) -> tuple[int, float, list[float]]:
    """The one-sync-per-message baseline: a loop of ``os.pwrite`` (4 KiB, 256 rotating page offsets) +
    ``os.fdatasync`` on a file in ``directory`` whose 1 MiB was written and synced first (so, as for a warmed
    SYNC_FLUSH commitlog file, every sync writes data only, no block allocation). Runs ``seconds`` (or ``max_n``
    syncs); returns (syncs, elapsed seconds, sorted per-sync latencies in µs)."""
    path = os.path.join(directory, f"fsync-probe-{os.getpid()}-{threading.get_ident()}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.pwrite(fd, bytes(MiB), 0)
        os.fsync(fd)
        page = os.urandom(4096)
        lat = []
        clock = time.perf_counter
        n = 0
        t0 = clock()
        deadline = t0 + seconds
        t = t0
        while t < deadline and n < max_n:
            os.pwrite(fd, page, (n & 255) * 4096)
            os.fdatasync(fd)
            now = clock()
            lat.append((now - t) * 1e6)
            t = now
            n += 1
        elapsed = t - t0
    finally:
        os.close(fd)
        os.unlink(path)
    lat.sort()
    return n, elapsed, lat


@contextlib.contextmanager
def sync_store(base: str | None = None, file_size: int = 256 * MiB):
    """A fresh SYNC_FLUSH store in a temporary directory: one message put (which creates the first file, warmed
    and written), the next file allocated and written in the background and waited for, so the timed puts only
    append into the first file and msync. Yields (store, messages the first file can still take); deleted after."""
    with temp_dir(base, "rmqbench-sync-") as root:
        store = open_store(root, sync_config(file_size))
        try:
            r = store.put(make_messages(1)[0])
            if not r.ok:
                raise RuntimeError(f"first SYNC_FLUSH put: {r.status}")
            wait_allocations(store.commit_log.mapped_file_queue)
            cap = warm_capacity(store.commit_log.mapped_file_queue) // (record_size() + 8) - 1000
            yield store, cap
        finally:
            store.close()


def _fill_window(pending, put, queue_id: int, window: int, sent: int, limit: int) -> int:
    """Top ``pending`` up to ``window`` puts in flight (fresh 1 KiB-body messages), ``limit`` puts in all; returns
    how many were sent."""
    from rmqcore import Message
    b = body()
    while len(pending) < window and sent < limit:
        pending.append(put(Message(TOPIC, b, queue_id)))
        sent += 1
    return sent


def _producer_threads(store, producers: int, seconds: float, produce, served_by_flushes: bool) -> dict:
    """Run ``produce(k, deadline) -> puts`` on ``producers`` threads released together by a barrier, until each
    returns; the result shape of the SYNC_FLUSH runs: puts, elapsed (release → last thread's end), flushes by the
    GroupCommitService meanwhile, and puts served by them (its own count, or the puts when ``served_by_flushes``
    is false: acknowledgements that skip the group commit's wait)."""
    gc_ = store.group_commit
    barrier = threading.Barrier(producers + 1)
    counts = [0] * producers
    errors: list = []
    state = {"deadline": float("inf")}

    def worker(k):
        try:
            barrier.wait()
            counts[k] = produce(k, state["deadline"])
        except BaseException as e:   # reported after join
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(k,), name=f"bench-producer-{k}") for k in range(producers)]
    for t in threads:
        t.start()
    flushes0, served0 = gc_.flushes, gc_.requests_served
    t0 = time.perf_counter()
    state["deadline"] = t0 + seconds
    try:
        barrier.wait()
    except threading.BrokenBarrierError:   # a producer failed before the start: its error is raised below
        pass
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    puts = sum(counts)
    return {"puts": puts, "elapsed": elapsed, "flushes": gc_.flushes - flushes0,
            "served": gc_.requests_served - served0 if served_by_flushes else puts}


def sync_put_run(store, producers: int, seconds: float, max_msgs: int) -> dict:
    """``producers`` threads each calling ``store.put`` (one fresh 1 KiB-body message per call, queue = thread %
    4) until ``seconds`` have passed or ``max_msgs`` puts are done in all, released together by a barrier. Each put
    returns only once a group-commit msync covers it. Returns puts, elapsed (release → last thread's end),
    flushes and requests served by the GroupCommitService during the run."""
    from rmqcore import Message
    per_thread = max(1, max_msgs // producers)
    b = body()

    def produce(k, deadline):
        put = store.put
        q = k % SYNC_QUEUES
        clock = time.perf_counter
        n = 0
        while n < per_thread and clock() < deadline:
            r = put(Message(TOPIC, b, q))
            if not r.ok:
                raise RuntimeError(f"SYNC_FLUSH put: {r.status}")
            n += 1
        return n

    return _producer_threads(store, producers, seconds, produce, True)


def async_put_run(store, producers: int, window: int, seconds: float, max_msgs: int, *,
                  nowait: bool = False) -> dict:
    """``producers`` threads each keeping ``window`` puts in flight (RocketMQ's async send: a producer does not
    wait for one message before sending the next); a put counts once a flush covered it. Default: put_async
    futures, the oldest's result taken when the window is full. ``nowait``: puts of messages with WAIT "false"
    (return once appended), then one ``store.wait_flushed`` for the last of every ``window``. Same shape of result
    as sync_put_run."""
    from rmqcore import Message
    per_thread = max(window, max_msgs // producers)
    b = body()

    def produce_nowait(k, deadline):
        put, wait_flushed, props = store.put, store.wait_flushed, {"WAIT": "false"}
        q = k % SYNC_QUEUES
        clock = time.perf_counter
        n = 0
        while n < per_thread and clock() < deadline:
            for _ in range(window):
                r = put(Message(TOPIC, b, q, properties=props))
                if not r.ok:
                    raise RuntimeError(f"SYNC_FLUSH put (WAIT false): {r.status}")
            if not wait_flushed(r.commitlog_offset + r.wrote_bytes):
                raise RuntimeError("SYNC_FLUSH wait_flushed timed out")
            n += window
        return n

    def produce_futures(k, deadline):
        q = k % SYNC_QUEUES
        clock = time.perf_counter
        pending = collections.deque()
        sent = n = 0
        while sent < per_thread and clock() < deadline:
            sent = _fill_window(pending, store.put_async, q, window, sent, per_thread)
            r = pending.popleft().result()
            if not r.ok:
                raise RuntimeError(f"SYNC_FLUSH put_async: {r.status}")
            n += 1
        for f in pending:
            if not f.result().ok:
                raise RuntimeError("SYNC_FLUSH put_async failed")
            n += 1
        return n

    return _producer_threads(store, producers, seconds, produce_nowait if nowait else produce_futures, False)


def aio_put_run(store, producers: int, window: int, seconds: float, max_msgs: int) -> dict:
    """``producers`` asyncio tasks in one thread, each keeping ``window`` ``store.aput`` futures in flight and
    awaiting the oldest when its window is full (an asyncio broker's connections); a put counts once a flush covered
    it. Same shape of result as sync_put_run."""
    import asyncio

    gc_ = store.group_commit
    per_thread = max(window, max_msgs // producers)

    async def producer(k, deadline):
        q = k % SYNC_QUEUES
        clock = time.perf_counter
        pending = collections.deque()
        sent = n = 0
        while sent < per_thread and clock() < deadline:
            sent = _fill_window(pending, store.aput, q, window, sent, per_thread)
            r = await pending.popleft()
            if not r.ok:
                raise RuntimeError(f"SYNC_FLUSH aput: {r.status}")
            n += 1
        for f in pending:
            if not (await f).ok:
                raise RuntimeError("SYNC_FLUSH aput failed")
            n += 1
        return n

    async def main():
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(producer(k, t0 + seconds) for k in range(producers)))
        return sum(counts), time.perf_counter() - t0

    flushes0 = gc_.flushes
    puts, elapsed = asyncio.run(main())
    return {"puts": puts, "elapsed": elapsed, "flushes": gc_.flushes - flushes0, "served": puts}


def wake_latency(n: int = 2000) -> float:
    """One thread-to-thread wake-up through the group commit's own primitive, in µs: two threads take turns
    (publish on one GroupCommit, wait on the other), round trip / 2. Every put that waits behind another's flush
    costs at least one, and the GIL hand-off after it another (a put that leads its own flush costs neither)."""
    from rmqcore._flush import GroupCommit
    ping, pong = GroupCommit(0), GroupCommit(0)

    def other():
        for i in range(1, n + 1):
            ping.wait_only(i, 10)
            pong.publish(i)

    t = threading.Thread(target=other)
    t.start()
    t0 = time.perf_counter()
    for i in range(1, n + 1):
        ping.publish(i)
        pong.wait_only(i, 10)
    elapsed = time.perf_counter() - t0
    t.join()
    return elapsed / n / 2 * 1e6


def write_commitlog(root: str, config, target_bytes: int, *, queues: int = 8, batch: int = 1000) -> tuple[int, int]:
    """A store directory holding only a commitlog of 1 KiB-body messages (round-robin over ``queues`` queues,
    UNIQ_KEY each), as many batches of ``batch`` as fit in ``target_bytes``, written with
    ``CommitLog.put_messages`` and closed (flushed). Returns (bytes, records)."""
    from rmqcore.commit_log import CommitLog
    cl = CommitLog.open(os.path.join(root, "commitlog"), config)
    records = 0
    per_batch = batch * record_size()
    try:
        while cl.max_offset + per_batch <= target_bytes:       # stay within target_bytes (4 files for 1 GiB)
            records += len(cl.put_messages(make_messages(batch, queues=queues, start=records)))
        size = cl.max_offset
    finally:
        cl.close()
    return size, records


class MappedCommitLog:
    """Every commitlog file of a store mapped read-only (Python mmap), for timing the bare recovery scan."""

    def __init__(self, root: str):
        import mmap
        d = os.path.join(root, "commitlog")
        self.maps = []
        self.views = []
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as f:
                m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self.maps.append(m)
            self.views.append(memoryview(m))

    def scan(self, check_crc: bool = True) -> tuple[int, int]:
        """scan_records over every file: (records, bytes walked)."""
        from rmqcore._codec import RESULT_BLANK, RESULT_END, scan_records
        records = nbytes = 0
        for v in self.views:
            pos, count, code = scan_records(v, 0, -1, check_crc)
            if code not in (RESULT_END, RESULT_BLANK):
                raise AssertionError(f"scan_records stopped with code {code} at {pos}")
            records += count
            nbytes += pos
        return records, nbytes

    def crc(self, lengths) -> int:
        """rmqcore._crc.crc32 over the first ``lengths[i]`` bytes of each file (the bytes the scan walks)."""
        from rmqcore._crc import crc32
        n = 0
        for v, length in zip(self.views, lengths):
            crc32(v[:length])
            n += length
        return n

    def lengths(self) -> list[int]:
        from rmqcore._codec import scan_records
        return [scan_records(v, 0, -1, False)[0] for v in self.views]

    def close(self) -> None:
        for v in self.views:
            v.release()
        for m in self.maps:
            m.close()
        self.views, self.maps = [], []


def mark_crashed(root: str, *, drop_checkpoint: bool = False) -> None:
    """Make the next open of a closed store an abnormal recovery: create the ``abort`` file, as a process that
    died with the store open leaves it. ``drop_checkpoint`` also removes the checkpoint (as for a store whose
    checkpoint was never flushed), so recovery scans from the first commitlog file."""
    with open(os.path.join(root, "abort"), "w"):
        pass
    if drop_checkpoint:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(root, "checkpoint"))


CRASH_FILE_SIZE = 64 * MiB


def crash_config():
    return sync_config(CRASH_FILE_SIZE)


def crashed_store(root: str, n: int, *, timeout: float = 300.0, after_s: float = 0.05) -> int:
    """Run ``bench/crash_child.py`` on the store ``root``: it puts 1 KiB-body messages (a key each, 4 queues)
    with SYNC_FLUSH in batches of 100 (``put_batch``: one group-commit wait per batch) and says when ``n`` have
    been acknowledged; ``after_s`` later, while it is still putting, it is killed with SIGKILL. Returns how many
    puts it had acknowledged when it said so (all of them must survive)."""
    import signal
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(here) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.Popen([sys.executable, os.path.join(here, "crash_child.py"), root, str(n)],
                         stdout=subprocess.PIPE, text=True, env=env)
    watchdog = threading.Timer(timeout, p.kill)
    watchdog.start()
    try:
        line = p.stdout.readline().split()
        if not line or line[0] != "acked":
            p.kill()
            p.wait()
            raise RuntimeError(f"crash child exited with {p.returncode} before putting {n} messages")
        acked = int(line[1])
        time.sleep(after_s)
        p.send_signal(signal.SIGKILL)
        p.wait()
    finally:
        watchdog.cancel()
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
    if p.returncode != -signal.SIGKILL:
        raise RuntimeError(f"crash child ended with {p.returncode}, not SIGKILL")
    return acked


def queue_records(store, topic: str = TOPIC, queues: int = SYNC_QUEUES) -> int:
    return sum(store.max_offset(topic, q) - store.min_offset(topic, q) for q in range(queues))


# -- pytest-benchmark helper ----------------------------------------------------------------------------------------

def record_rate(benchmark, items: int, name: str = "items_per_s") -> None:
    """Record items/s (from the median round) in the benchmark's extra_info, for --benchmark-json readers."""
    benchmark.extra_info["items_per_round"] = items
    try:
        median = benchmark.stats.stats.median
    except AttributeError:   # --benchmark-disable: no stats
        return
    if median:
        benchmark.extra_info[name] = round(items / median)
