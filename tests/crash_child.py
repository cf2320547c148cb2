"""Child process for tests/test_crash.py: opens a store and puts messages until it is killed (or the disk fills).

Run as ``python tests/crash_child.py '<json spec>'``. The spec holds ``path``, ``seed``, ``run`` (an id that keeps
the messages of successive children of one store apart), ``flush`` (SYNC_FLUSH / ASYNC_FLUSH), ``threads``,
``config`` (StoreConfig overrides), ``mode`` ("put" until killed; the same with 8 puts in flight per thread through
"put_async" futures, "aput" futures of an asyncio loop per thread, or "nowait": messages with WAIT "false" and one
``wait_flushed`` for the last of every 8; "fill" until the disk is full, then read back and close) and ``fsize``
(RLIMIT_FSIZE set after the first put, "fill" mode).

After every acknowledged put (PUT_OK returned) one line goes to stdout, flushed at once:

    msg_id commitlog_offset queue_offset uniq_key flushed_where topic queue_id gen

``flushed_where`` is the commitlog's flushed offset read right after the put returned; ``gen`` names the message
(``run:thread:seq``) and is also its first key, so the parent can rebuild the exact message (``make_message``) of
any record it reads back, acknowledged or not. Lines starting with ``#`` are status lines.
"""
import asyncio
import collections
import json
import os
import random
import resource
import signal
import sys
import threading

TOPICS = [("CrashA", 0), ("CrashA", 1), ("CrashA", 2), ("CrashB", 0), ("CrashC", 3)]


def make_message(seed, gen):
    """The message named ``gen`` ("run:thread:seq"): (topic, queue_id, body, keys, tags), all from the seed."""
    rng = random.Random(f"{seed}/{gen}")
    topic, qid = TOPICS[rng.randrange(len(TOPICS))]
    body = rng.randbytes(rng.randrange(1, 600))
    keys = [gen] + [f"k{rng.randrange(50)}" for _ in range(rng.randrange(3))]
    tags = rng.choice([None, "TagA", "TagB"])
    return topic, qid, body, keys, tags


def main():
    spec = json.loads(sys.argv[1])
    sys.path.insert(0, spec["src"])     # the rmqcore the test imports (installed or a source tree)
    from rmqcore import Message, MessageStore, PutStatus, StoreConfig

    if spec.get("fsize"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)    # a write past the limit fails with EFBIG, no signal death
    config = StoreConfig(flush_disk_type=spec.get("flush", "SYNC_FLUSH"), **spec.get("config", {}))
    seed, run = spec["seed"], spec["run"]
    out_lock = threading.Lock()
    out = sys.stdout

    def emit(line):
        with out_lock:
            out.write(line + "\n")
            out.flush()

    store = MessageStore.open(spec["path"], config)
    emit(f"#READY {os.getpid()} {json.dumps(store.runtime_info()['recovery'], default=str)}")
    stop = threading.Event()
    failures = []

    def report(gen, topic, qid, r, acknowledged=True):
        if r.status is PutStatus.PUT_OK and acknowledged:
            emit(f"{r.msg_id} {r.commitlog_offset} {r.queue_offset} {r.uniq_key} "
                 f"{store.commit_log.flushed_where} {topic} {qid} {gen}")
        else:
            status = r.status.name if r.status is not PutStatus.PUT_OK else "FLUSH_NOT_CONFIRMED"
            failures.append(status)
            emit(f"#FAIL {gen} {status}")

    def next_message(tid, seq, **properties):
        gen = f"{run}:{tid}:{seq}"
        topic, qid, body, keys, tags = make_message(seed, gen)
        return gen, topic, qid, Message(topic, body, qid, keys=keys, tags=tags, properties=properties or None)

    def fill_window(tid, seq, window, put):
        # up to 8 puts in flight; returns the next sequence number
        while len(window) < 8:
            gen, topic, qid, msg = next_message(tid, seq)
            seq += 1
            window.append((gen, topic, qid, put(msg)))
        return seq

    def windowed_producer(tid):
        # put_async (RocketMQ's asyncPutMessage): a put is acknowledged when its Future completes PUT_OK, which
        # under SYNC_FLUSH means a flush covered it.
        seq, window = 0, collections.deque()
        while not stop.is_set():
            seq = fill_window(tid, seq, window, store.put_async)
            gen, topic, qid, future = window.popleft()
            report(gen, topic, qid, future.result())

    def aput_producer(tid):
        # store.aput in this thread's own event loop, acknowledged when its future completes.
        async def main():
            seq, window = 0, collections.deque()
            while not stop.is_set():
                seq = fill_window(tid, seq, window, store.aput)
                gen, topic, qid, future = window.popleft()
                report(gen, topic, qid, await future)
        asyncio.run(main())

    def nowait_producer(tid):
        # WAIT "false": put returns once appended; 8 puts are acknowledged together when wait_flushed confirms
        # that a flush covered the last of them.
        seq = 0
        while not stop.is_set():
            window = []
            for _ in range(8):
                gen, topic, qid, msg = next_message(tid, seq, WAIT="false")
                seq += 1
                window.append((gen, topic, qid, store.put(msg)))
            ok = [r for *_, r in window if r.status is PutStatus.PUT_OK]
            flushed = not ok or store.wait_flushed(ok[-1].commitlog_offset + ok[-1].wrote_bytes)
            for gen, topic, qid, r in window:
                report(gen, topic, qid, r, flushed)

    def producer(tid):
        mode = spec.get("mode")
        if mode == "put_async":
            return windowed_producer(tid)
        if mode == "aput":
            return aput_producer(tid)
        if mode == "nowait":
            return nowait_producer(tid)
        seq = 0
        while not stop.is_set():
            gen, topic, qid, msg = next_message(tid, seq)
            seq += 1
            try:
                r = store.put(msg)
            except Exception as e:                       # a clear exception is an allowed answer to a full disk
                failures.append(f"EXC {type(e).__name__}: {e}")
                emit(f"#EXC {gen} {type(e).__name__}: {e}".replace("\n", " "))
                if mode == "fill":
                    stop.set()
                continue
            report(gen, topic, qid, r)
            if r.status is PutStatus.PUT_OK:
                if spec.get("fsize") and tid == 0 and seq == 1:
                    resource.setrlimit(resource.RLIMIT_FSIZE, (spec["fsize"], resource.RLIM_INFINITY))
                    emit(f"#FSIZE {spec['fsize']}")
            elif mode == "fill":
                stop.set()

    threads = [threading.Thread(target=producer, args=(t,), daemon=True) for t in range(spec.get("threads", 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # "fill" mode only from here on (a "put" child is killed before): a few more tries, read back, close.
    for i in range(3):
        topic, qid, body, keys, tags = make_message(seed, f"{run}:after:{i}")
        try:
            r = store.put(Message(topic, body, qid, keys=keys, tags=tags))
            emit(f"#AFTER {r.status.name}")
        except Exception as e:
            emit(f"#AFTER EXC {type(e).__name__}: {e}".replace("\n", " "))
    store.wait_dispatched(5)
    n = 0
    for topic, qid in TOPICS:
        offset = store.min_offset(topic, qid)
        while offset >= 0:
            g = store.get_messages("g", topic, qid, offset, 32)
            if not g.messages:
                break
            n += len(g.messages)
            offset = g.next_begin_offset
    emit(f"#READ {n}")
    store.close()
    emit("#CLOSED")


if __name__ == "__main__":
    main()
