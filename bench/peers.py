"""rmqcore against the Python stores a user would otherwise pick, on one workload (issue 15).

    python -m bench.peers                      # N = 1,000,000 (a few minutes), one markdown table on stdout
    python -m bench.peers --quick              # N = 100,000, 2,000 latency samples
    python -m bench.peers --only rmqcore,lmdb  # some stores only (rmqcore, sqlite3, lmdb, rocksdict, appendlog)
    python -m bench.peers --durable            # every batch synced to disk in every store

The stores: rmqcore's ``MessageStore`` (default ``StoreConfig``: 1 GiB commitlog files, warmed), sqlite3 in WAL mode
(stdlib), LMDB (PyPI ``lmdb``), RocksDB through ``rocksdict`` (PyPI, raw mode, default options) and a plain
append-only file written as a user would (``AppendLog`` below). A peer whose package is missing is skipped with a
note. Each store lives in its own temporary directory under ``--dir`` (default: the system temp dir, so all share
one filesystem), is closed and deleted before the next store starts.

Workload, the same for every store:

- N messages, id ``i`` = 0 … N-1; 1 KiB incompressible bodies: ``os.urandom`` fills a 1 MiB pool once per run and
  message ``i``'s body is its id (8 bytes, little endian) followed by the 1,016 pool bytes at ``i * 1031`` (mod the
  pool): every body differs, and no two bodies close in key order share bytes, so block compression (RocksDB's
  default) finds nothing to squeeze. Building the bodies is inside every store's timed write loop alike.
- 16 topic-queues: 4 topics × 4 queues; message ``i`` goes to topic-queue ``i % 16`` (topic ``(i // 4) % 4``, queue
  ``i % 4``) at queue offset ``i // 16``.
- one unique key per message, ``key-%010d``.
- writes in batches of 1,000 into a fresh store, timed from the first write to "done" (below); msgs/s and MB/s of
  bodies (10^6 B/s). A fresh rmqcore store creates and pre-faults its first 1 GiB commitlog file at the first put
  (RocketMQ's warm-up, on by default) and allocates the next one in the background, so the row "after the first
  batch" (from the end of the first batch to done, N - 1,000 messages) shows every store without its start-up.
- sequential read: every topic-queue from its first message to its last, 16 queues one after the other, msgs/s.
- point read: the message of a random id, by the handle a writer holds for it (rmqcore: the commitlog offset its
  ``PutResult`` returned, ``look_message``; peers: the primary key ``(topic-queue, queue offset)`` / the id);
  p50 / p99 over 10,000 random ids (2,000 with ``--quick``), after 1,000 (200) warm-up reads of other ids.
- key read: the message of a random key (rmqcore ``query_message(topic, key)``; peers: the secondary index written
  in the same batch as the message, then the message); p50 / p99 over the same number of samples.

Between the writes and the reads (untimed) each store's background work started by the writes is let finish:
rmqcore's allocation of its next commitlog file (started when the writes entered the last one), RocksDB's memtable
flushes and compactions; the write rows count that work only as far as it overlapped the writes. The others have
none: a commit's work is done when it returns.

Every read hands the caller a ``bytes`` copy of the body (the peers' APIs return one; rmqcore's ``MessageExt.body``
is a zero-copy view, so the bench takes ``bytes(m.body)``), so no store is timed for a lazy view it never read.
Reads are checked untimed: counts, bytes, the first and last id of each queue, the id inside every sampled body.

"Done" for the writes, and what each read does. Default mode: no store syncs to disk per batch; when a store says
done, the batch is in the page cache, readable by any reader and safe from a crash of the writing process (not
from a power loss):

- rmqcore: ``put_batch`` of 1,000 ``Message(topic, body, queue_id, keys=[key])`` built per batch (ASYNC_FLUSH: the
  records are in the mapped commitlog), counted until ``wait_dispatched()`` returns True after the last batch: every
  message then has its consume-queue unit and index entries, so ``get_messages`` and ``query_message`` find it.
  Reads: ``get_messages(group, topic, queue, offset, 32)`` loops, ``look_message(offset)``, ``query_message``.
- sqlite3: one transaction per batch (``BEGIN``, ``executemany`` INSERT, ``COMMIT``) into ``msg(id INTEGER PRIMARY
  KEY, key TEXT, body BLOB)`` with an index on ``key``; ``journal_mode=WAL``, ``synchronous=OFF`` (the commit is in
  the WAL file, no fsync). The rowid is ``topic-queue << 32 | queue offset``, so a queue is one rowid range. Reads:
  a range ``SELECT`` per queue, ``SELECT body … WHERE id=?``, ``SELECT body … WHERE key=?`` (each its own
  autocommit read, as independent requests are).
- lmdb: one write transaction per batch putting the bodies (``msgs`` db, key = big-endian ``topic-queue, queue
  offset``) and the key → primary key mapping (``keys`` db) with ``putmulti``; ``sync=False, metasync=False`` (the
  commit writes the pages, no fsync). Reads: one read transaction and a cursor range per queue; a read transaction
  per point or key read (a fresh snapshot sees the latest writes, as the other stores' reads do).
- rocksdict: one ``WriteBatch`` per batch holding the bodies (default column family, the same big-endian primary
  key) and the key → primary key mapping (column family ``keys``), written with the WAL on and
  ``WriteOptions.sync=False`` (in the WAL file, no fsync). Reads: ``values(from_key, iterate_upper_bound)`` per
  queue, ``get(pk)``, ``keys.get(key)`` then ``get(pk)``. Flushes and compactions run in RocksDB's background
  threads during and after the writes, as they do for a user.
- appendlog: each record ``<u32 length, u32 crc32>`` + ``<u64 id, u8 topic-queue, u16 key length>`` + key + body,
  appended through a 1 MiB-buffered file; in memory an ``array`` id → file offset, one per topic-queue and a dict
  key → offset; done = ``flush()`` after the batch (the bytes were ``write``-n to the file). Reads go through an
  ``mmap`` of the file taken after the writes: header, then body slice; a sequential read walks the queue's offsets.
  The CRC is checked when the log is scanned (recovery, ``AppendLog.scan``), not on every read, as rmqcore's reads
  do not check the body CRC either.

``--durable``: each batch is on disk before the next starts, in every store: rmqcore ``SYNC_FLUSH`` (``put_batch``
returns once the group commit's msync covers the batch), sqlite ``synchronous=FULL`` (fsync of the WAL at each
commit), lmdb ``sync=True, metasync=True`` (its default), rocksdict ``WriteOptions.sync=True``, appendlog
``flush()`` + ``os.fdatasync`` per batch.

Figures: throughputs are of one run (N is large; rerun to see the spread). The CPU-time rows
(``time.process_time``: user + system time of every thread of the process, so RocksDB's flush and compaction
threads and rmqcore's dispatcher and file allocator count) move less than the wall-clock rows when other work shares
the machine. The last column is rmqcore's figure divided by the best peer's as a speed ratio (for latencies and CPU
times the peer's figure over rmqcore's), so > 1 means rmqcore is faster. All stores run in this process one after the
other, with the cyclic GC paused while timed.
"""
from __future__ import annotations

import argparse
import array
import datetime
import gc
import importlib
import importlib.metadata
import mmap
import os
import platform
import random
import sqlite3
import struct
import sys
import tempfile
import time
import traceback
import zlib

if __package__ in (None, ""):      # run as a script (python bench/peers.py): make the repo root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import workloads as W  # noqa: E402
from bench.machine import cpu_model  # noqa: E402

STORES = ("rmqcore", "sqlite3", "lmdb", "rocksdict", "appendlog")
TOPICS = tuple(f"PeerTopic{t}" for t in range(4))
QUEUES = 4
TOPIC_QUEUES = len(TOPICS) * QUEUES
BATCH = 1000
BODY_SIZE = 1024
POOL_SIZE = 1 << 20
POOL_STRIDE = 1031          # > BODY_SIZE: windows of neighbouring ids never overlap
GROUP = "peers-bench"
DEFAULT_N = 1_000_000
QUICK_N = 100_000
SAMPLES, QUICK_SAMPLES = 10_000, 2_000


def log(msg: str) -> None:
    print(f"[peers] {msg}", file=sys.stderr, flush=True)


# -- the workload ----------------------------------------------------------------------------------------------------

class _Case:
    """The hooks a store case may need around its writes; by default none (a commit's work is done when it
    returns)."""

    def writes_done(self) -> None:
        pass

    def after_writes(self, wl: "Workload") -> None:
        pass

    def settle(self) -> None:
        pass


class Workload:
    """Message ``i``: its body, key, topic-queue and queue offset (see the module docstring)."""

    def __init__(self, n: int, seed: int = 15):
        if n < TOPIC_QUEUES:
            raise ValueError(f"messages must be >= {TOPIC_QUEUES} (one per topic-queue), got {n}")
        self.n = n
        self.pool = memoryview(os.urandom(POOL_SIZE))
        self.seed = seed

    def bodies(self, start: int, end: int) -> list[bytes]:
        pool, span = self.pool, POOL_SIZE - BODY_SIZE
        return [i.to_bytes(8, "little") + pool[i * POOL_STRIDE % span:i * POOL_STRIDE % span + BODY_SIZE - 8]
                for i in range(start, end)]

    @staticmethod
    def key(i: int) -> str:
        return f"key-{i:010d}"

    @staticmethod
    def topic(i: int) -> str:
        """Message ``i``'s topic: topic-queue ``i % 16`` is topic ``(i >> 2) & 3``, queue ``i & 3`` (the write loops
        inline this)."""
        return TOPICS[(i >> 2) & 3]

    def queue_length(self, tq: int) -> int:
        return (self.n - tq + TOPIC_QUEUES - 1) // TOPIC_QUEUES

    def samples(self, count: int, salt: int) -> list[int]:
        return random.Random(self.seed * 1000 + salt).choices(range(self.n), k=count)


def body_id(body) -> int:
    return int.from_bytes(body[:8], "little")


def primary_key(i: int) -> bytes:
    """The KV peers' primary key: big-endian (topic-queue, queue offset), so one queue is one contiguous range."""
    return (i % TOPIC_QUEUES).to_bytes(1, "big") + (i // TOPIC_QUEUES).to_bytes(8, "big")


def queue_range(tq: int) -> tuple[bytes, bytes]:
    return tq.to_bytes(1, "big") + bytes(8), (tq + 1).to_bytes(1, "big") + bytes(8)


def sql_rowid(i: int) -> int:
    return (i % TOPIC_QUEUES) << 32 | (i // TOPIC_QUEUES)


# -- the stores ------------------------------------------------------------------------------------------------------
# Each: open(dir, durable); write_batch(wl, start, end) (timed, in a loop) and writes_done() (timed, once);
# after_writes(wl) (untimed: read handles); settle() (untimed: the writes' background work ends);
# scan_queue(tq) -> (count, bytes, first body, last body) (timed, all 16 together);
# point_args(ids) / key_args(ids) (untimed) and point(arg) / by_key(arg) -> body bytes (timed per call); close().

class RmqcoreCase(_Case):
    name = "rmqcore"

    def __init__(self, root: str, durable: bool, config: dict | None = None):
        from rmqcore import Message, MessageStore, StoreConfig
        self._message = Message
        cfg = dict(config or {})
        cfg["flush_disk_type"] = "SYNC_FLUSH" if durable else "ASYNC_FLUSH"
        self.store = MessageStore.open(root, StoreConfig(**cfg))
        self.results: list = []
        self.offsets = None

    @staticmethod
    def version() -> str:
        import rmqcore
        return rmqcore.__version__

    def write_batch(self, wl: Workload, start: int, end: int) -> None:
        message, key, topics = self._message, wl.key, TOPICS
        bodies = wl.bodies(start, end)
        msgs = [message(topics[(i >> 2) & 3], b, i & 3, keys=[key(i)]) for i, b in zip(range(start, end), bodies)]
        self.results.append(self.store.put_batch(msgs))

    def writes_done(self) -> None:
        if not self.store.wait_dispatched(1800):
            raise RuntimeError("rmqcore: wait_dispatched() did not return True within 1800 s")

    def after_writes(self, wl: Workload) -> None:
        offsets = array.array("q")
        for res in self.results:
            for r in res:
                if not r.ok:
                    raise RuntimeError(f"rmqcore put failed: {r.status}")
                offsets.append(r.commitlog_offset)
        self.results = []
        if len(offsets) != wl.n:
            raise RuntimeError(f"rmqcore: {len(offsets)} put results for {wl.n} messages")
        self.offsets = offsets

    def settle(self) -> None:
        # The put that entered the last commitlog file asked the allocator for the next one (create + pre-fault
        # 1 GiB in a background thread): let it finish, so the reads are not timed against it.
        W.wait_allocations(self.store.commit_log.mapped_file_queue, timeout=600)

    def scan_queue(self, tq: int):
        get, topic, q = self.store.get_messages, TOPICS[tq // QUEUES], tq % QUEUES
        offset = count = nbytes = 0
        first = last = None
        while True:
            msgs = get(GROUP, topic, q, offset, 32)
            batch = msgs.messages
            if not batch:
                break
            if first is None:
                first = bytes(batch[0].body)
            for m in batch:
                last = bytes(m.body)
                nbytes += len(last)
            count += len(batch)
            offset = msgs.next_begin_offset
        return count, nbytes, first, last

    def point_args(self, ids):
        return [self.offsets[i] for i in ids]

    def point(self, offset):
        return bytes(self.store.look_message(offset).body)

    def key_args(self, ids):
        return [(Workload.topic(i), Workload.key(i)) for i in ids]

    def by_key(self, arg):
        found = self.store.query_message(arg[0], arg[1])
        if len(found) != 1:
            raise RuntimeError(f"rmqcore query_message{arg}: {len(found)} messages, expected 1")
        return bytes(found[0].body)

    def close(self) -> None:
        self.store.close()
        self.store = None


class Sqlite3Case(_Case):
    name = "sqlite3"

    def __init__(self, root: str, durable: bool):
        self.con = con = sqlite3.connect(os.path.join(root, "msgs.db"), isolation_level=None)
        if con.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
            raise RuntimeError("sqlite3: journal_mode=WAL refused")
        con.execute(f"PRAGMA synchronous={'FULL' if durable else 'OFF'}")
        con.execute("CREATE TABLE msg (id INTEGER PRIMARY KEY, key TEXT NOT NULL, body BLOB NOT NULL)")
        con.execute("CREATE INDEX msg_key ON msg (key)")

    @staticmethod
    def version() -> str:
        return f"SQLite {sqlite3.sqlite_version}"

    def write_batch(self, wl: Workload, start: int, end: int) -> None:
        key, con = wl.key, self.con
        rows = [((i % TOPIC_QUEUES) << 32 | (i // TOPIC_QUEUES), key(i), b)
                for i, b in zip(range(start, end), wl.bodies(start, end))]
        con.execute("BEGIN")
        con.executemany("INSERT INTO msg VALUES (?, ?, ?)", rows)
        con.execute("COMMIT")

    def scan_queue(self, tq: int):
        count = nbytes = 0
        first = last = None
        for (last,) in self.con.execute("SELECT body FROM msg WHERE id >= ? AND id < ? ORDER BY id",
                                         (tq << 32, (tq + 1) << 32)):
            if first is None:
                first = last
            nbytes += len(last)
            count += 1
        return count, nbytes, first, last

    def point_args(self, ids):
        return [sql_rowid(i) for i in ids]

    def point(self, rowid):
        return self.con.execute("SELECT body FROM msg WHERE id = ?", (rowid,)).fetchone()[0]

    def key_args(self, ids):
        return [Workload.key(i) for i in ids]

    def by_key(self, key):
        rows = self.con.execute("SELECT body FROM msg WHERE key = ?", (key,)).fetchall()
        if len(rows) != 1:
            raise RuntimeError(f"sqlite3 key {key}: {len(rows)} rows, expected 1")
        return rows[0][0]

    def close(self) -> None:
        self.con.close()
        self.con = None


class LmdbCase(_Case):
    name = "lmdb"

    def __init__(self, root: str, durable: bool, n: int):
        import lmdb
        # Room for the bodies on ~3 per 4 KiB leaf page, the keys db, and the copy-on-write pages of a commit.
        map_size = max(256 * W.MiB, n * 3 * BODY_SIZE)
        self.env = lmdb.open(os.path.join(root, "lmdb"), map_size=map_size, max_dbs=2, sync=durable,
                             metasync=durable)
        self.msgs = self.env.open_db(b"msgs")
        self.keys = self.env.open_db(b"keys")

    @staticmethod
    def version() -> str:
        import lmdb
        return f"py-lmdb {lmdb.__version__}, LMDB {'.'.join(map(str, lmdb.version()))}"

    def write_batch(self, wl: Workload, start: int, end: int) -> None:
        pks = [primary_key(i) for i in range(start, end)]
        keys = [wl.key(i).encode() for i in range(start, end)]
        with self.env.begin(write=True) as txn:
            txn.cursor(self.msgs).putmulti(zip(pks, wl.bodies(start, end)))
            txn.cursor(self.keys).putmulti(zip(keys, pks))

    def scan_queue(self, tq: int):
        lo, hi = queue_range(tq)
        count = nbytes = 0
        first = last = None
        with self.env.begin(db=self.msgs) as txn:
            cur = txn.cursor()
            if cur.set_range(lo):
                for k, v in cur:
                    if k >= hi:
                        break
                    if first is None:
                        first = v
                    last = v
                    nbytes += len(v)
                    count += 1
        return count, nbytes, first, last

    def point_args(self, ids):
        return [primary_key(i) for i in ids]

    def point(self, pk):
        with self.env.begin(db=self.msgs) as txn:
            return txn.get(pk)

    def key_args(self, ids):
        return [Workload.key(i).encode() for i in ids]

    def by_key(self, key):
        with self.env.begin() as txn:
            return txn.get(txn.get(key, db=self.keys), db=self.msgs)

    def close(self) -> None:
        self.env.close()
        self.env = None


class RocksdictCase(_Case):
    name = "rocksdict"

    def __init__(self, root: str, durable: bool):
        from rocksdict import Options, Rdict, ReadOptions, WriteBatch, WriteOptions
        self._write_batch = WriteBatch
        self._read_options = ReadOptions
        self.db = Rdict(os.path.join(root, "rocks"), Options(raw_mode=True))
        self.keys = self.db.create_column_family("keys", Options(raw_mode=True))
        self.keys_cf = self.db.get_column_family_handle("keys")
        self.wo = WriteOptions()
        self.wo.sync = durable

    @staticmethod
    def version() -> str:
        return f"rocksdict {importlib.metadata.version('rocksdict')}"

    def write_batch(self, wl: Workload, start: int, end: int) -> None:
        wb = self._write_batch(raw_mode=True)
        put, cf, key = wb.put, self.keys_cf, wl.key
        for i, b in zip(range(start, end), wl.bodies(start, end)):
            pk = primary_key(i)
            put(pk, b)
            put(key(i).encode(), pk, cf)
        self.db.write(wb, self.wo)

    def settle(self, timeout: float = 600.0) -> None:
        # Memtable flushes and compactions the writes started run in RocksDB's background threads: let them end,
        # so the reads are not timed against them.
        deadline = time.monotonic() + timeout
        props = ("rocksdb.num-running-compactions", "rocksdb.num-running-flushes")
        per_cf = ("rocksdb.compaction-pending", "rocksdb.mem-table-flush-pending")
        while any(self.db.property_int_value(p) for p in props) or any(
                cf.property_int_value(p) for cf in (self.db, self.keys) for p in per_cf):
            if time.monotonic() > deadline:
                raise RuntimeError(f"rocksdict: background flushes/compactions still running after {timeout} s")
            time.sleep(0.05)

    def scan_queue(self, tq: int):
        lo, hi = queue_range(tq)
        ro = self._read_options()
        ro.set_iterate_upper_bound(hi)
        count = nbytes = 0
        first = last = None
        for last in self.db.values(from_key=lo, read_opt=ro):
            if first is None:
                first = last
            nbytes += len(last)
            count += 1
        return count, nbytes, first, last

    def point_args(self, ids):
        return [primary_key(i) for i in ids]

    def point(self, pk):
        return self.db.get(pk)

    def key_args(self, ids):
        return [Workload.key(i).encode() for i in ids]

    def by_key(self, key):
        return self.db.get(self.keys.get(key))

    def close(self) -> None:
        self.keys.close()
        self.db.close()
        self.keys = self.keys_cf = self.db = None


class AppendLog:
    """A plain append-only file as a user writes one: per record ``<u32 payload length, u32 crc32(payload)>`` then
    the payload ``<u64 id, u8 topic-queue, u16 key length>`` + key + body, appended through a buffered file; in
    memory the file offset of every id, of every topic-queue's records in order, and of every key."""

    HEADER = struct.Struct("<II")
    META = struct.Struct("<QBH")

    def __init__(self, path: str, durable: bool):
        self.path = path
        self.durable = durable
        self.file = open(path, "wb", buffering=W.MiB)
        self.pos = 0
        self.by_id = array.array("q")
        self.by_queue = [array.array("q") for _ in range(TOPIC_QUEUES)]
        self.by_key: dict[bytes, int] = {}
        self.map = None

    def append(self, i: int, tq: int, key: bytes, body: bytes) -> None:
        meta = self.META.pack(i, tq, len(key)) + key
        size = len(meta) + len(body)
        write = self.file.write
        write(self.HEADER.pack(size, zlib.crc32(body, zlib.crc32(meta))))
        write(meta)
        write(body)
        pos = self.pos
        self.by_id.append(pos)
        self.by_queue[tq].append(pos)
        self.by_key[key] = pos
        self.pos = pos + 8 + size

    def commit(self) -> None:
        """The end of a batch: the buffered bytes written to the file (readable), and with ``durable`` on disk."""
        self.file.flush()
        if self.durable:
            os.fdatasync(self.file.fileno())

    def open_reader(self) -> None:
        self.file.flush()
        with open(self.path, "rb") as f:
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    def body_at(self, pos: int) -> bytes:
        m = self.map
        size, _crc = self.HEADER.unpack_from(m, pos)
        klen = self.META.unpack_from(m, pos + 8)[2]
        return m[pos + 8 + self.META.size + klen:pos + 8 + size]

    @classmethod
    def scan(cls, path: str) -> tuple[int, int]:
        """Recovery's walk: (records whose CRC matches, offset of the first bad or missing record)."""
        with open(path, "rb") as f:
            data = f.read()
        pos = count = 0
        while pos + 8 <= len(data):
            size, crc = cls.HEADER.unpack_from(data, pos)
            payload = data[pos + 8:pos + 8 + size]
            if size < cls.META.size or len(payload) != size or zlib.crc32(payload) != crc:
                break
            count += 1
            pos += 8 + size
        return count, pos

    def close(self) -> None:
        if self.map is not None:
            self.map.close()
            self.map = None
        self.file.close()


class AppendLogCase(_Case):
    name = "appendlog"

    def __init__(self, root: str, durable: bool):
        self.log = AppendLog(os.path.join(root, "messages.log"), durable)

    @staticmethod
    def version() -> str:
        return "plain file, zlib.crc32, 1 MiB buffer"

    def write_batch(self, wl: Workload, start: int, end: int) -> None:
        append, key = self.log.append, wl.key
        for i, b in zip(range(start, end), wl.bodies(start, end)):
            append(i, i % TOPIC_QUEUES, key(i).encode(), b)
        self.log.commit()

    def after_writes(self, wl: Workload) -> None:
        self.log.open_reader()

    def scan_queue(self, tq: int):
        body_at = self.log.body_at
        count = nbytes = 0
        first = last = None
        for pos in self.log.by_queue[tq]:
            last = body_at(pos)
            if first is None:
                first = last
            nbytes += len(last)
            count += 1
        return count, nbytes, first, last

    def point_args(self, ids):
        return list(ids)

    def point(self, i):
        return self.log.body_at(self.log.by_id[i])

    def key_args(self, ids):
        return [Workload.key(i).encode() for i in ids]

    def by_key(self, key):
        return self.log.body_at(self.log.by_key[key])

    def close(self) -> None:
        self.log.close()
        self.log = None



# -- the harness -----------------------------------------------------------------------------------------------------

# name -> (module a peer needs, its case class, how to open it in a directory)
CASES = {
    "rmqcore": (None, RmqcoreCase, lambda root, durable, n, cfg: RmqcoreCase(root, durable, cfg)),
    "sqlite3": (None, Sqlite3Case, lambda root, durable, n, cfg: Sqlite3Case(root, durable)),
    "lmdb": ("lmdb", LmdbCase, lambda root, durable, n, cfg: LmdbCase(root, durable, n)),
    "rocksdict": ("rocksdict", RocksdictCase, lambda root, durable, n, cfg: RocksdictCase(root, durable)),
    "appendlog": (None, AppendLogCase, lambda root, durable, n, cfg: AppendLogCase(root, durable)),
}
LABELS = {"rmqcore": "rmqcore", "sqlite3": "sqlite3 (WAL)", "lmdb": "lmdb", "rocksdict": "rocksdict",
          "appendlog": "append log + CRC"}

# (figure, operation, unit, higher is better)
FIGURES = (
    ("write_msgs", "write, batches of 1,000", "msgs/s", True),
    ("write_mb", "write, batches of 1,000", "MB/s of bodies", True),
    ("write_rest_msgs", "write, after the first batch", "msgs/s", True),
    ("write_cpu_us", "write, CPU time of all threads", "µs/msg", False),
    ("seq_msgs", "sequential read, 16 queues", "msgs/s", True),
    ("seq_cpu_us", "sequential read, CPU time", "µs/msg", False),
    ("point_p50", "point read p50", "µs", False),
    ("point_p99", "point read p99", "µs", False),
    ("key_p50", "key read p50", "µs", False),
    ("key_p99", "key read p99", "µs", False),
)


def _check_body(store: str, what: str, body, expected: int) -> None:
    if body is None or len(body) != BODY_SIZE or body_id(body) != expected:
        got = None if body is None else (len(body), body_id(body) if len(body) >= 8 else None)
        raise RuntimeError(f"{store} {what}: expected the body of message {expected}, got (length, id) {got}")


def _latencies(store: str, what: str, op, args, ids) -> list[int]:
    """Per-call ns of ``op(arg)``; each returned body is checked (untimed) to be message ``ids[k]``'s."""
    clock = time.perf_counter_ns
    lat = []
    for a, i in zip(args, ids):
        t0 = clock()
        b = op(a)
        t1 = clock()
        lat.append(t1 - t0)
        _check_body(store, what, b, i)
    lat.sort()
    return lat


def measure(case, wl: Workload, samples: int, warmup: int, out: dict) -> None:
    """Run the workload on ``case``, filling ``out`` with the figures as they are measured (so a case that fails
    half-way keeps the figures it got)."""
    n = wl.n
    with W.gc_paused():
        clock, cpu = time.perf_counter, time.process_time
        c0 = cpu()
        t0 = clock()
        case.write_batch(wl, 0, min(n, BATCH))
        t1 = clock()
        for start in range(BATCH, n, BATCH):
            case.write_batch(wl, start, min(n, start + BATCH))
        case.writes_done()
        t2 = clock()
        c2 = cpu()
    elapsed = t2 - t0
    out["write_cpu_us"] = (c2 - c0) / n * 1e6
    out["write_s"] = elapsed
    out["write_msgs"] = n / elapsed
    out["write_mb"] = n * BODY_SIZE / 1e6 / elapsed
    out["first_batch_s"] = t1 - t0
    if n > BATCH:
        out["write_rest_msgs"] = (n - BATCH) / (t2 - t1)
    case.after_writes(wl)
    t0 = time.perf_counter()
    case.settle()
    out["settle_s"] = time.perf_counter() - t0

    with W.gc_paused():
        c0 = time.process_time()
        t0 = time.perf_counter()
        scans = [case.scan_queue(tq) for tq in range(TOPIC_QUEUES)]
        elapsed = time.perf_counter() - t0
        out["seq_cpu_us"] = (time.process_time() - c0) / n * 1e6
    for tq, (count, nbytes, first, last) in enumerate(scans):
        expected = wl.queue_length(tq)
        if count != expected or nbytes != expected * BODY_SIZE:
            raise RuntimeError(f"{case.name} sequential read of topic-queue {tq}: {count} messages / {nbytes} bytes,"
                               f" expected {expected} / {expected * BODY_SIZE}")
        _check_body(case.name, f"first message of topic-queue {tq}", first, tq)
        _check_body(case.name, f"last message of topic-queue {tq}", last, tq + (expected - 1) * TOPIC_QUEUES)
    out["seq_s"] = elapsed
    out["seq_msgs"] = n / elapsed

    for what, args_of, op, salt in (("point", case.point_args, case.point, 1), ("key", case.key_args, case.by_key, 3)):
        warm_ids, ids = wl.samples(warmup, salt), wl.samples(samples, salt + 1)
        warm_args, args = args_of(warm_ids), args_of(ids)
        with W.gc_paused():
            _latencies(case.name, f"{what} read", op, warm_args, warm_ids)
            lat = _latencies(case.name, f"{what} read", op, args, ids)
        out[f"{what}_p50"] = W.percentile(lat, 50) / 1000
        out[f"{what}_p99"] = W.percentile(lat, 99) / 1000


def _unavailable(name: str) -> str | None:
    module = CASES[name][0]
    if module is None:
        return None
    try:
        importlib.import_module(module)
    except ImportError as e:
        return f"skipped: {e} (pip install {module}, or the bench extra)"
    return None


def run_case(name: str, wl: Workload, *, samples: int, warmup: int, durable: bool, base_dir: str | None,
             rmq_config: dict | None) -> dict:
    """One store from open to delete: its figures, plus ``error`` (and the figures so far) when it failed."""
    out: dict = {}
    with W.temp_dir(base_dir, prefix=f"rmqbench-peers-{name}-") as root:
        case = None
        try:
            t0 = time.perf_counter()
            case = CASES[name][2](root, durable, wl.n, rmq_config)
            out["open_s"] = time.perf_counter() - t0
            measure(case, wl, samples, warmup, out)
        except Exception as e:
            traceback.print_exc()
            out["error"] = f"{type(e).__name__}: {e}"
        finally:
            if case is not None:
                try:
                    case.close()
                except Exception as e:
                    traceback.print_exc()
                    out.setdefault("error", f"close: {type(e).__name__}: {e}")
            del case
            gc.collect()
    return out


def build_rows(results: dict, notes: dict) -> list[dict]:
    """One dict per figure: ``values`` per store (None when skipped or failed, ``notes`` says why), the best peer,
    and ``ratio`` = rmqcore's speed over the best peer's (> 1: rmqcore is faster)."""
    rows = []
    for key, operation, unit, higher in FIGURES:
        values = {name: results.get(name, {}).get(key) for name in STORES}
        peers = {p: v for p, v in values.items() if p != "rmqcore" and v is not None}
        best_peer = best = ratio = None
        if peers:
            best_peer = (max if higher else min)(peers, key=peers.get)
            best = peers[best_peer]
            rmq = values["rmqcore"]
            if rmq is not None and rmq > 0 and best > 0:
                ratio = rmq / best if higher else best / rmq
        rows.append({"figure": key, "operation": operation, "unit": unit, "higher_is_better": higher,
                     "values": values, "best_peer": best_peer, "best": best, "ratio": ratio,
                     "notes": {s: notes[s] for s in STORES if s in notes}})
    return rows


def run(n: int = DEFAULT_N, *, samples: int = SAMPLES, warmup: int | None = None, durable: bool = False,
        only=None, base_dir: str | None = None, rmq_config: dict | None = None) -> dict:
    """Every store in turn on the workload of ``n`` messages. Returns ``rows`` (build_rows), ``results`` (the raw
    figures per store), ``notes`` (why a store has no figures), ``header`` (lines) and ``failed``."""
    names = list(STORES if not only else [s for s in STORES if s in set(only)])
    unknown = set(only or ()) - set(STORES)
    if unknown:
        raise ValueError(f"unknown store(s) {', '.join(sorted(unknown))}; known: {', '.join(STORES)}")
    warmup = max(1, samples // 10) if warmup is None else warmup
    load_start = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    wl = Workload(n)
    results: dict = {}
    notes: dict = {}
    failed = []
    for name in STORES:
        if name not in names:
            notes[name] = "not run (--only)"
            continue
        why = _unavailable(name)
        if why:
            notes[name] = why
            log(f"{name}: {why}")
            continue
        log(f"{name}: {n:,} messages{' (durable)' if durable else ''} ...")
        t = time.perf_counter()
        out = run_case(name, wl, samples=samples, warmup=warmup, durable=durable, base_dir=base_dir,
                       rmq_config=rmq_config)
        results[name] = out
        if "error" in out:
            notes[name] = f"FAILED: {out['error']}"
            failed.append(name)
        log(f"{name}: done in {time.perf_counter() - t:.1f} s (first batch {out.get('first_batch_s', 0):.3f} s, "
            f"settled in {out.get('settle_s', 0):.3f} s), "
            f"load {os.getloadavg()[0]:.2f}")
    load_end = os.getloadavg()
    header = header_lines(n, durable, samples, warmup, started, load_start, load_end, names, notes, base_dir)
    return {"rows": build_rows(results, notes), "results": results, "notes": notes, "header": header,
            "failed": failed}


def run_peers(n: int, quick: bool) -> list[dict]:
    """For ``python -m bench``: the table rows of a run on ``n`` messages (``quick``: 2,000 latency samples instead of
    10,000). Each row: figure, operation, unit, higher_is_better, values {store: figure or None}, best_peer, best,
    ratio (rmqcore's speed over the best peer's), notes {store: why it has no figures}."""
    return run(n, samples=QUICK_SAMPLES if quick else SAMPLES)["rows"]


# -- the table -------------------------------------------------------------------------------------------------------

def _version(name: str) -> str:
    try:
        return CASES[name][1].version()
    except Exception as e:     # a missing package: the row says skipped
        return f"not available ({type(e).__name__})"


def header_lines(n, durable, samples, warmup, started, load_start, load_end, names, notes, base_dir) -> list[str]:
    ran = [s for s in names if not notes.get(s, "").startswith("skipped")]
    mode = ("durable: every batch synced to disk before the next (rmqcore SYNC_FLUSH)" if durable else
            "no sync per batch: done = in the page cache and readable (rmqcore ASYNC_FLUSH, dispatched)")
    return [
        f"rmqcore vs the Python stores a user would otherwise pick ({mode})",
        f"- date: {started.isoformat(timespec='seconds')}",
        f"- cpu: {cpu_model()}, {os.cpu_count()} logical cores",
        f"- python: {platform.python_version()} ({platform.python_implementation()}), {platform.platform()}",
        "- versions: " + "; ".join(f"{LABELS[s]}: {_version(s)}" for s in ran),
        f"- workload: N = {n:,} messages, 1 KiB incompressible bodies, {len(TOPICS)} topics × {QUEUES} queues, "
        f"a unique key each, batches of {BATCH:,}; point and key reads: {samples:,} random samples after "
        f"{warmup:,} warm-up reads; each store in a temporary directory under {base_dir or tempfile.gettempdir()}",
        f"- load average (1/5/15 min) at start: {'/'.join(f'{x:.2f}' for x in load_start)}, at end: "
        f"{'/'.join(f'{x:.2f}' for x in load_end)} (a shared {os.cpu_count()}-core machine: read the ratios)",
    ]


def _fmt(value, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "msgs/s":
        return f"{value / 1e6:.2f} M" if value >= 1e6 else f"{value / 1e3:,.0f} k"
    if unit.startswith("MB/s"):
        return f"{value:,.0f}"
    if unit == "µs/msg":
        return f"{value:.2f}"
    return f"{value:.1f}"


def render(report: dict) -> str:
    rows, notes = report["rows"], report["notes"]
    cols = [s for s in STORES if not notes.get(s, "").startswith("not run")]
    head = ["operation", "unit"] + [LABELS[s] for s in cols] + ["best peer", "rmqcore ÷ best peer"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * len(cols) + "---|---:|"]
    for row in rows:
        cells = [row["operation"], row["unit"]]
        for s in cols:
            v = row["values"].get(s)
            if v is None and s in notes:
                cells.append("skipped" if notes[s].startswith("skipped") else "FAILED")
            else:
                cells.append(_fmt(v, row["unit"]))
        cells.append(LABELS[row["best_peer"]] if row["best_peer"] else "—")
        cells.append(f"{row['ratio']:.2f}×" if row["ratio"] is not None else "—")
        lines.append("| " + " | ".join(cells) + " |")
    out = "\n".join(report["header"]) + "\n\n" + "\n".join(lines)
    extra = [f"- {LABELS[s]}: {notes[s]}".replace("|", "/") for s in STORES if s in notes
             and not notes[s].startswith("not run")]
    if extra:
        out += "\n\n" + "\n".join(extra)
    out += ("\n\nrmqcore ÷ best peer: a speed ratio (throughput over throughput, or the peer's µs over rmqcore's), "
            "> 1 = rmqcore faster.")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=None, help=f"N (default {DEFAULT_N:,}; {QUICK_N:,} with --quick)")
    ap.add_argument("--quick", action="store_true", help=f"N = {QUICK_N:,} and {QUICK_SAMPLES:,} latency samples")
    ap.add_argument("--only", action="append", default=[], metavar="NAMES",
                    help=f"run only these stores (comma-separated or repeated): {', '.join(STORES)}")
    ap.add_argument("--durable", action="store_true", help="every batch synced to disk in every store")
    ap.add_argument("--samples", type=int, default=None, help="point and key read samples per store")
    ap.add_argument("--dir", default=None, help="parent directory of the temporary stores (default: system temp)")
    args = ap.parse_args(argv)
    only = [w.strip() for item in args.only for w in item.split(",") if w.strip()]
    unknown = set(only) - set(STORES)
    if unknown:
        ap.error(f"unknown store(s) {', '.join(sorted(unknown))}; known: {', '.join(STORES)}")
    n = args.messages or (QUICK_N if args.quick else DEFAULT_N)
    samples = args.samples or (QUICK_SAMPLES if args.quick else SAMPLES)
    report = run(n, samples=samples, durable=args.durable, only=only, base_dir=args.dir)
    print(render(report))
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
