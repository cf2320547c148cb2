"""Crash tests with real child processes (tests/crash_child.py), no mocks.

A child opens a store (small files, so commitlog, consume-queue and index files roll), puts messages from three
threads and prints one line per acknowledged put; the parent SIGKILLs it at a seeded random moment, reopens the store
and checks what a RocketMQ user is promised:

- SYNC_FLUSH: every acknowledged message is there byte for byte (look_message by offset, get_messages by queue,
  query_message by UNIQ_KEY and by key), its record ended at or below the flushed offset the child saw right after
  the put returned, verify() is clean, queue offsets continue, the store takes new puts;
- ASYNC_FLUSH: a process kill loses nothing acknowledged either (the page cache survives it), nothing corrupt;
- power loss (the page cache gone): the commitlog past the last flushed offset a child reported is replaced by
  zeros, random bytes or a torn half record; recovery (abort file present) keeps everything up to that offset and
  nothing after it, and consume queues and index agree;
- a record corrupted in the middle of an old file: RocketMQ's recoverAbnormally stops the scan at the first record
  failing its checks and truncates the commitlog there, losing every record after it; rmqcore does the same and says
  where and why in runtime_info()["recovery"]["stop"];
- a full disk (tmpfs, RLIMIT_FSIZE): a put answers CREATE_MAPPED_FILE_FAILED or raises a clear error, the store
  stays readable and reopens cleanly.

Every child is seeded; ``RMQCORE_SOAK=1`` runs a much longer kill loop (test_soak_kill9).
"""
import importlib.util
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import pytest

import rmqcore
from rmqcore import GetStatus, Message, MessageStore, PutStatus, StoreConfig

CHILD = Path(__file__).with_name("crash_child.py")
_spec = importlib.util.spec_from_file_location("rmqcore_crash_child", CHILD)
child = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(child)

SRC = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))
CONFIG = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 64,
              max_message_size=8 * 1024, max_hash_slot_num=97, max_index_num=300, warm_mapped_file_enable=False,
              flush_interval_commit_log=20, flush_commit_log_thorough_interval=200,
              flush_interval_consume_queue=20, flush_consume_queue_thorough_interval=100)


def store_config(flush="SYNC_FLUSH", **kw):
    return StoreConfig(flush_disk_type=flush, **dict(CONFIG, **kw))


class Ack:
    __slots__ = ("msg_id", "offset", "queue_offset", "uniq_key", "flushed", "topic", "queue_id", "gen")

    def __init__(self, line):
        f = line.split()
        self.msg_id, self.uniq_key, self.topic, self.gen = f[0], f[3], f[5], f[7]
        self.offset, self.queue_offset, self.flushed, self.queue_id = int(f[1]), int(f[2]), int(f[4]), int(f[6])


class ChildRun:
    def __init__(self, acks, status, returncode, stderr):
        self.acks, self.status, self.returncode, self.stderr = acks, status, returncode, stderr


def run_child(path, seed, run, *, flush="SYNC_FLUSH", kill_after=None, threads=3, mode="put", fsize=None,
              config=None, timeout=60.0, after_first_ack=False):
    """Start a child on ``path``; SIGKILL it ``kill_after`` s after it reported the store open (None: let it end),
    or after its first acknowledged put with ``after_first_ack`` (a test that needs acks must not depend on how long a
    slow machine takes over the first durable put)."""
    spec = dict(path=str(path), seed=seed, run=run, flush=flush, threads=threads, mode=mode, fsize=fsize,
                config=dict(CONFIG, **(config or {})), src=SRC)
    err = tempfile.TemporaryFile()
    p = subprocess.Popen([sys.executable, str(CHILD), json.dumps(spec)], stdout=subprocess.PIPE, stderr=err)
    lines = []
    ready = threading.Event()
    acked = threading.Event()

    def reader():
        for raw in p.stdout:
            if raw.endswith(b"\n"):          # a complete line is an acknowledged put; a torn one is not
                lines.append(raw.decode())
                if raw.startswith(b"#READY"):
                    ready.set()
                elif not raw.startswith(b"#"):
                    acked.set()
        ready.set()
        acked.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        if not ready.wait(timeout):
            raise AssertionError("child did not open the store in time")
        if after_first_ack and not acked.wait(timeout):
            raise AssertionError("child acknowledged no put in time")
        if kill_after is not None and p.poll() is None:
            time.sleep(kill_after)
            p.send_signal(signal.SIGKILL)
        p.wait(timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        t.join(10)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
        err.close()
    if not any(line.startswith("#READY") for line in lines):
        raise AssertionError(f"child failed before opening the store (rc {p.returncode}):\n{stderr[-3000:]}")
    acks = [Ack(line) for line in lines if not line.startswith("#")]
    status = [line.strip() for line in lines if line.startswith("#")]
    return ChildRun(acks, status, p.returncode, stderr)


def expected_message(seed, gen):
    """(topic, queue_id, body, keys, tags) of the message with first key ``gen`` (child or parent put)."""
    if gen.startswith("parent/"):
        _, topic, qid, n = gen.split("/")
        return topic, int(qid), gen.encode() * 3, [gen], None
    return child.make_message(seed, gen)


def assert_message(seed, m, gen=None):
    gen = gen or m.keys[0]
    topic, qid, body, keys, tags = expected_message(seed, gen)
    assert (m.topic, m.queue_id, m.keys, m.tags) == (topic, qid, keys, tags), gen
    assert bytes(m.body) == body, f"{gen}: body differs at commitlog offset {m.commitlog_offset}"
    assert m.body_crc == zlib.crc32(bytes(m.body)) & 0x7FFFFFFF


def check_store(path, config, seed, acks, *, sync, expect_abnormal=True, max_offset=None, parent_run=0):
    """Reopen a crashed store and check everything acknowledged, the queues, the index, and new puts."""
    assert os.path.exists(os.path.join(path, "abort")) == expect_abnormal
    store = MessageStore.open(str(path), config)
    try:
        rec = store.runtime_info()["recovery"]
        assert rec["last_exit_ok"] is (not expect_abnormal)
        report = store.verify()
        assert report["ok"], repr({k: v[:5] if isinstance(v, list) else v for k, v in report.items() if v})
        if max_offset is not None:
            assert store.commit_log.max_offset == max_offset, rec
        by_queue = {}
        for a in acks:
            m = store.look_message(a.offset)
            assert m is not None, f"acknowledged {a.gen} at {a.offset} is lost (recovery: {rec})"
            assert_message(seed, m, a.gen)
            assert (m.queue_offset, m.uniq_key, m.msg_id) == (a.queue_offset, a.uniq_key, a.msg_id)
            if sync:
                assert a.offset + m.store_size <= a.flushed, f"SYNC put of {a.gen} returned before its flush"
            by_queue.setdefault((a.topic, a.queue_id), {})[a.queue_offset] = a.offset
        for topic, qid in child.TOPICS:
            lo, hi = store.min_offset(topic, qid), store.max_offset(topic, qid)
            acked = by_queue.get((topic, qid), {})
            assert not acked or max(acked) < hi
            got, offset = [], max(lo, 0)
            while offset < hi:
                g = store.get_messages("g", topic, qid, offset, 32)
                assert g.status is GetStatus.FOUND, (topic, qid, offset, g.status)
                got.extend(g.messages)
                offset = g.next_begin_offset
            assert [m.queue_offset for m in got] == list(range(max(lo, 0), hi))
            for m in got:
                assert_message(seed, m)
                if m.queue_offset in acked:
                    assert m.commitlog_offset == acked[m.queue_offset]
                if max_offset is not None:
                    assert m.commitlog_offset < max_offset
        rng = random.Random(seed)
        for a in rng.sample(acks, min(len(acks), 150)):
            for key in (a.uniq_key, a.gen):
                hits = store.query_message(a.topic, key)
                assert [h.commitlog_offset for h in hits] == [a.offset], (a.gen, key)
        # queue offsets continue where the recovered queues end, and the store takes new puts
        for topic, qid in child.TOPICS:
            gen = f"parent/{topic}/{qid}/{parent_run}"
            t, q, body, keys, tags = expected_message(seed, gen)
            before = store.max_offset(topic, qid)
            r = store.put(Message(t, body, q, keys=keys))
            assert r.status is PutStatus.PUT_OK and r.queue_offset == before
        store.wait_dispatched()
        assert store.verify()["ok"]
        return rec
    finally:
        store.close()


def assert_rocketmq_loadable(path):
    """Every file RocketMQ's load lists has the length it insists on ("length not matched" otherwise refuses the
    whole store): a kill must never leave a file half made (new files are made under rmqcore-tmp/ and renamed)."""
    cl = os.path.join(path, "commitlog")
    for name in os.listdir(cl) if os.path.isdir(cl) else []:      # (killed before its first file: none yet)
        assert os.path.getsize(os.path.join(cl, name)) == CONFIG["mapped_file_size_commit_log"], name
    root = os.path.join(path, "consumequeue")
    for topic in os.listdir(root) if os.path.isdir(root) else []:
        for qid in os.listdir(os.path.join(root, topic)):
            for name in os.listdir(os.path.join(root, topic, qid)):
                size = os.path.getsize(os.path.join(root, topic, qid, name))
                assert size == CONFIG["mapped_file_size_consume_queue"], (topic, qid, name, size)
    index = os.path.join(path, "index")
    want = 40 + CONFIG["max_hash_slot_num"] * 4 + CONFIG["max_index_num"] * 20
    for name in os.listdir(index) if os.path.isdir(index) else []:
        assert os.path.getsize(os.path.join(index, name)) == want, name


def kill_rounds(tmp_path, seed, rounds, flush, kill_range=(0.05, 0.5), mode="put"):
    """``rounds`` crash → check cycles on one store; every other round two children crash back to back before the
    parent looks (the second one recovers the first one's crash itself and goes on writing)."""
    path = tmp_path / f"store-{seed}"
    rng = random.Random(seed)
    all_acks = []
    kills = 0
    run = 0
    for r in range(rounds):
        chained = 2 if r % 2 else 1
        for _ in range(chained):
            res = run_child(path, seed, run, flush=flush, kill_after=rng.uniform(*kill_range), mode=mode)
            assert res.returncode == -signal.SIGKILL, res.stderr[-2000:]
            assert_rocketmq_loadable(str(path))
            all_acks += res.acks
            run += 1
            kills += 1
        check_store(path, store_config(flush), seed, all_acks, sync=flush == "SYNC_FLUSH", parent_run=run)
    assert len(all_acks) > 0
    return kills, len(all_acks)


@pytest.mark.parametrize("seed", range(5))
def test_sync_flush_kill9(tmp_path, seed):
    kills, acked = kill_rounds(tmp_path, seed, 3, "SYNC_FLUSH")      # 4 kills a seed, 20 across seeds
    assert kills == 4


@pytest.mark.parametrize("seed,mode", [(50, "put_async"), (51, "put_async"), (52, "aput"), (53, "nowait")])
def test_sync_flush_pipelined_kill9(tmp_path, seed, mode):
    # Puts in flight: put_async and aput futures complete PUT_OK only once a flush covered the record, and a
    # WAIT=false put is acknowledged only by a wait_flushed that covered it: every acknowledged one survives.
    kills, acked = kill_rounds(tmp_path, seed, 2, "SYNC_FLUSH", mode=mode)
    assert kills == 3


@pytest.mark.parametrize("seed", [100, 101])
def test_async_flush_kill9_loses_nothing_acknowledged(tmp_path, seed):
    # A process kill is not a power loss: what was appended to the mapping is in the page cache, so ASYNC_FLUSH
    # loses nothing acknowledged either.
    kills, acked = kill_rounds(tmp_path, seed, 2, "ASYNC_FLUSH", kill_range=(0.05, 0.3))
    assert kills == 3


_TORN_CHILD = r"""
import ctypes, mmap, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from rmqcore import Message
from rmqcore._encoder import MessageEncoder
from rmqcore._commit_log import AppendMessageCallback
from rmqcore._mapped_file import MappedFile
page = mmap.PAGESIZE
mf = MappedFile(sys.argv[1], 4 * page, pwrite_min=-1)     # the copy through the mapping (one message's path)
mf.append(bytes(page - 1000))                    # the next record starts 1,000 bytes before the first page ends
base = np.frombuffer(mf.view(), np.uint8).ctypes.data
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(base + page, page, mmap.PROT_READ) == 0     # ... and its properties end on a read-only one
enc = MessageEncoder()
rec = enc.encode(Message("Torn", b"body" * 100, 0, keys=["k1"], properties={"PAD": "p" * 2000}))
AppendMessageCallback(enc.store_host_bytes).append(mf, rec, 0, 1234)
"""


def test_a_record_whose_copy_is_cut_leaves_no_size(tmp_path):
    # A process killed while a record is copied into the commitlog must leave a zero size where the record starts
    # (recovery: end of data), never a size in front of a record whose properties, which the body CRC does not
    # cover, are still zeros. The child's record ends on a write-protected page: its copy stops there for good,
    # as at a kill, and whatever it wrote is in the file for the parent to read.
    path = tmp_path / ("%020d" % 0)
    p = subprocess.run([sys.executable, "-c", _TORN_CHILD, str(path), SRC], capture_output=True, timeout=60)
    assert p.returncode in (-signal.SIGSEGV, -signal.SIGBUS), p.stderr.decode()[-2000:]
    data = path.read_bytes()
    start = os.sysconf("SC_PAGESIZE") - 1000
    assert data[start:start + 4] == bytes(4)
    assert rmqcore._codec.scan_records(data, start) == (start, 0, rmqcore._codec.RESULT_END)


@pytest.mark.skipif(os.environ.get("RMQCORE_SOAK") != "1", reason="soak run: set RMQCORE_SOAK=1")
@pytest.mark.soak
@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_soak_kill9(tmp_path, flush):
    rounds = int(os.environ.get("RMQCORE_SOAK_ROUNDS", "60"))
    modes = ["put", "put_async", "aput", "nowait"] if flush == "SYNC_FLUSH" else ["put"]
    for seed in range(1000, 1000 + max(1, rounds // 10)):
        kill_rounds(tmp_path, seed, 10, flush, mode=modes[seed % len(modes)])


# -- power loss -----------------------------------------------------------------------------------------------------

def record_size_at(path, offset, file_size):
    name = os.path.join(path, "commitlog", "%020d" % (offset - offset % file_size))
    with open(name, "rb") as f:
        f.seek(offset % file_size)
        head = f.read(8)
    size, magic = struct.unpack(">ii", head)
    return size if magic in (-626843481, -626843477) and 0 < size < file_size else None


def read_commitlog(path, offset, size, file_size):
    name = os.path.join(path, "commitlog", "%020d" % (offset - offset % file_size))
    with open(name, "rb") as f:
        f.seek(offset % file_size)
        return f.read(size)


def lose_page_cache(path, flushed, variant, rng, file_size, fallback_record):
    """Replace every commitlog byte at or after ``flushed`` as a power loss might leave it."""
    torn = None
    if variant == "torn":
        size = record_size_at(path, flushed, file_size) if flushed % file_size else None
        src = read_commitlog(path, flushed, size, file_size) if size else fallback_record
        torn = src[:len(src) // 2]
    cdir = os.path.join(path, "commitlog")
    for name in sorted(os.listdir(cdir)):
        start = int(name)
        if start + file_size <= flushed:
            continue
        cut = max(flushed, start) - start
        n = file_size - cut
        if variant == "random":
            data = rng.randbytes(n)
        else:
            data = bytearray(n)
            if torn is not None and cut < file_size and start <= flushed:
                data[:len(torn)] = torn[:n]
        with open(os.path.join(cdir, name), "r+b") as f:
            f.seek(cut)
            f.write(data)


@pytest.mark.parametrize("variant,seed", [("zeros", 200), ("random", 201), ("torn", 202),
                                          ("zeros", 203), ("random", 204), ("torn", 205)])
def test_power_loss_after_sync_flush(tmp_path, variant, seed):
    path = tmp_path / "store"
    rng = random.Random(seed)
    res = run_child(path, seed, 0, flush="SYNC_FLUSH", kill_after=rng.uniform(0.1, 0.4),
                    after_first_ack=True)
    assert res.returncode == -signal.SIGKILL and res.acks
    flushed = max(a.flushed for a in res.acks)
    last = max(res.acks, key=lambda a: a.offset)
    last_record = read_commitlog(path, last.offset, record_size_at(path, last.offset, CONFIG[
        "mapped_file_size_commit_log"]), CONFIG["mapped_file_size_commit_log"])
    lose_page_cache(str(path), flushed, variant, rng, CONFIG["mapped_file_size_commit_log"], last_record)
    rec = check_store(path, store_config(), seed, res.acks, sync=True, max_offset=flushed)
    assert rec["process_offset"] == flushed
    # keys of messages put after the cut (never acknowledged) find nothing, or the intact record that is still there
    with MessageStore.open(str(path), store_config()) as store:
        for tid in range(3):
            seqs = [int(a.gen.split(":")[2]) for a in res.acks if a.gen.split(":")[1] == str(tid)]
            for seq in range(max(seqs, default=-1) + 1, max(seqs, default=-1) + 6):
                gen = f"0:{tid}:{seq}"
                topic = child.make_message(seed, gen)[0]
                for m in store.query_message(topic, gen):
                    assert m.commitlog_offset < flushed
                    assert_message(seed, m, gen)


# -- a corrupted old record ---------------------------------------------------------------------------------------

def test_flipped_bytes_in_old_record_stop_abnormal_recovery(tmp_path):
    """RocketMQ (CommitLog.recoverAbnormally, checkCRCOnRecover=true) scans from the checkpoint's file and stops at
    the first record whose CRC (or magic, or size) fails: the commitlog is truncated after the last good record,
    consume queues and index are cut to match, and every message after it is gone (it logs, it does not skip). The
    queue offsets of the lost messages are handed out again by the next puts."""
    path = str(tmp_path / "store")
    cfg = store_config("ASYNC_FLUSH", check_crc_on_recover=True)
    with MessageStore.open(path, cfg) as store:
        results = [store.put(Message("Flip", b"body-%05d" % i * 20, i % 2, keys=[f"f{i}"])) for i in range(800)]
        assert all(r.ok for r in results)
        files = store.commit_log.files()
    assert len(files) >= 3
    file_size = cfg.mapped_file_size_commit_log
    victim = next(r for r in results if r.commitlog_offset >= file_size + 1000)     # in the second file
    with open(os.path.join(path, "commitlog", files[1]), "r+b") as f:
        # v1 record, IPv4 hosts: 84 bytes of fixed fields, the body length (4), then the body
        pos = victim.commitlog_offset - file_size + 88 + 10
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0xFF]))
    open(os.path.join(path, "abort"), "w").close()     # the last run "crashed"
    with MessageStore.open(path, cfg) as store:
        rec = store.runtime_info()["recovery"]
        assert rec["last_exit_ok"] is False
        assert rec["process_offset"] == victim.commitlog_offset
        assert "bodyCRC" in rec["stop"] and str(victim.commitlog_offset) in rec["stop"], rec["stop"]
        assert rec["truncated_bytes"] > 0
        assert store.commit_log.max_offset == victim.commitlog_offset
        assert store.commit_log.files() == files[:2]
        kept = [r for r in results if r.commitlog_offset < victim.commitlog_offset]
        for q in (0, 1):
            assert store.max_offset("Flip", q) == sum(1 for i, r in enumerate(kept) if i % 2 == q)
        assert store.look_message(victim.commitlog_offset) is None
        assert store.query_message("Flip", f"f{results.index(victim)}") == []
        assert [m.commitlog_offset for m in store.query_message("Flip", "f0")] == [0]
        report = store.verify()
        assert report["ok"], report
        r = store.put(Message("Flip", b"again", results.index(victim) % 2))
        assert r.queue_offset == victim.queue_offset and r.commitlog_offset == victim.commitlog_offset


# -- a full disk ----------------------------------------------------------------------------------------------------

def check_fill_child(res, path, seed, config, commit_fails=False):
    # commit_fails: the limit hits a SYNC_FLUSH commit of the write ring (a pwrite into the file), not the making
    # of a file: the puts it covers fail as a failed flush does (FLUSH_DISK_TIMEOUT, never acknowledged), and the
    # close's last flush fails too, so the store is left to check its end at the next open (abort file kept).
    assert res.returncode == 0, (f"child died (rc {res.returncode}, -7 = SIGBUS, -25 = SIGXFSZ) instead of "
                                 f"reporting the full disk:\n{res.status[-5:]}\n{res.stderr[-3000:]}")
    fails = [s for s in res.status if s.startswith(("#FAIL", "#EXC"))]
    assert fails, res.status
    for s in fails:
        assert ("CREATE_MAPPED_FILE_FAILED" in s or "No space left" in s or "File too large" in s
                or commit_fails and "FLUSH_DISK_TIMEOUT" in s), s
    if commit_fails:
        assert "File too large" in res.stderr, res.stderr[-2000:]     # the close's flush names the cause
    assert "#CLOSED" in res.status
    reads = [s for s in res.status if s.startswith("#READ ")]
    assert reads and int(reads[0].split()[1]) >= len(res.acks)
    with MessageStore.open(str(path), config) as store:
        assert store.runtime_info()["recovery"]["last_exit_ok"] is not commit_fails
        report = store.verify()
        assert report["ok"], repr({k: v[:5] if isinstance(v, list) else v for k, v in report.items() if v})
        for a in res.acks:
            m = store.look_message(a.offset)
            assert m is not None
            assert_message(seed, m, a.gen)


@pytest.fixture
def small_tmpfs():
    d = tempfile.mkdtemp(prefix="rmqcore-tmpfs-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", d], capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(d)
        pytest.skip(f"cannot mount a 2 MiB tmpfs to fill up (needs root/CAP_SYS_ADMIN): {r.stderr.strip()}")
    try:
        yield Path(d)
    finally:
        subprocess.run(["umount", "-l", d], check=False)
        os.rmdir(d)


# Consume-queue and index files big enough to be made once, at the start: then the commitlog is what fills the disk,
# whatever the thread interleaving. (A consume-queue or index file failing first is not covered here.)
FILL_TMPFS = dict(mapped_file_size_consume_queue=20 * 2000, max_index_num=20000)


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_disk_full_tmpfs(small_tmpfs, flush):
    path = small_tmpfs / "store"
    res = run_child(path, 300, 0, flush=flush, mode="fill", threads=2, timeout=120, config=FILL_TMPFS)
    assert "consume queue" not in res.stderr and "index file" not in res.stderr, res.stderr[-2000:]
    check_fill_child(res, path, 300, store_config(flush, **FILL_TMPFS))


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_disk_full_rlimit_fsize(tmp_path, flush):
    # RLIMIT_FSIZE (set in the child after its first put, SIGXFSZ ignored) lets consume-queue and index files be
    # made (a few KiB) but no new 64 KiB commitlog file: the put that needs one must fail cleanly. Under
    # SYNC_FLUSH the first write past 32 KiB fails before that: the write ring's commit is a pwrite.
    path = tmp_path / "store"
    res = run_child(path, 301, 0, flush=flush, mode="fill", threads=1, fsize=32 * 1024, timeout=120)
    assert "#FSIZE 32768" in res.status
    check_fill_child(res, path, 301, store_config(flush), commit_fails=flush == "SYNC_FLUSH")
