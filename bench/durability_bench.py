"""Durability figures, printed as rows of the bench table: group commit, recovery scan, reopen after a crash.

    python bench/durability_bench.py [--quick]

- SYNC_FLUSH put with 1, 4 and 16 producer threads (1 KiB bodies), beside one fdatasync per message measured in
  the same run on the same filesystem (a 4 KiB pwrite + fdatasync loop): the ratio is what group commit buys.
- Recovery scan: scan_records with CRC over a commitlog of ~1 GiB (256 MiB in --quick), GB/s; then the full
  abnormal reopen (abort file present: CRC scan from the checkpoint's file + dispatch catch-up), seconds.
- Reopen after a crash: a child process puts with SYNC_FLUSH and is killed with SIGKILL; the parent times
  MessageStore.open and reports what recovery found.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rmqcore import Message, MessageStore, StoreConfig  # noqa: E402
from rmqcore._codec import scan_records  # noqa: E402

MiB = 1 << 20
BODY = os.urandom(1024)


def fsync_per_message(directory: str, seconds: float) -> float:
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    page = os.urandom(4096)
    n, t0 = 0, time.perf_counter()
    try:
        while time.perf_counter() - t0 < seconds:
            os.pwrite(fd, page, (n % 256) * 4096)
            os.fdatasync(fd)
            n += 1
    finally:
        os.close(fd)
        os.unlink(path)
    return n / (time.perf_counter() - t0)


def sync_put_rate(directory: str, producers: int, seconds: float):
    path = tempfile.mkdtemp(dir=directory)
    cfg = StoreConfig(flush_disk_type="SYNC_FLUSH", mapped_file_size_commit_log=256 * MiB,
                      max_hash_slot_num=100_003, max_index_num=400_000)
    store = MessageStore.open(path, cfg)
    try:
        store.put(Message("Sync", BODY))
        for pending in list(store.commit_log.mapped_file_queue._pending.values()):
            pending.result()        # the next file is pre-written in the background: not part of the timing
        stop = time.perf_counter() + seconds
        counts = [0] * producers

        def produce(k):
            while time.perf_counter() < stop:
                assert store.put(Message("Sync", BODY, k % 4)).ok
                counts[k] += 1

        flushes0 = store.group_commit.flushes
        threads = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        total = sum(counts)
        return total / elapsed, total / max(1, store.group_commit.flushes - flushes0)
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)


def recovery(directory: str, target_bytes: int):
    path = tempfile.mkdtemp(dir=directory)
    cfg = StoreConfig(mapped_file_size_commit_log=256 * MiB, max_hash_slot_num=500_009, max_index_num=2_000_000)
    try:
        with MessageStore.open(path, cfg) as store:
            per = 1000
            while store.commit_log.max_offset < target_bytes:
                store.put_batch([Message("Rec", BODY, i % 8, keys=[f"k{i}"]) for i in range(per)])
            size = store.commit_log.max_offset
        files = [os.path.join(path, "commitlog", f) for f in sorted(os.listdir(os.path.join(path, "commitlog")))]
        records = 0
        scan_s = 0.0
        for f in files:
            with open(f, "rb") as fh:
                data = fh.read()
            s0 = time.perf_counter()            # the read above is not timed: only the scan is
            records += scan_records(data, 0, -1, True)[1]
            scan_s += time.perf_counter() - s0
        open(os.path.join(path, "abort"), "w").close()          # as if the process had died
        t0 = time.perf_counter()
        with MessageStore.open(path, cfg) as store:
            reopen_s = time.perf_counter() - t0
            info = store.runtime_info()["recovery"]
        return size, records, size / scan_s / 1e9, reopen_s, info
    finally:
        shutil.rmtree(path, ignore_errors=True)


CHILD = r"""
import sys, os
sys.path.insert(0, sys.argv[2])
from rmqcore import Message, MessageStore, StoreConfig
cfg = StoreConfig(flush_disk_type="SYNC_FLUSH", mapped_file_size_commit_log=64 << 20,
                  max_hash_slot_num=100_003, max_index_num=400_000)
s = MessageStore.open(sys.argv[1], cfg)
body = os.urandom(1024)
i = 0
while True:
    s.put_batch([Message("Crash", body, j % 4, keys=[f"c{i}-{j}"]) for j in range(64)])
    i += 1
    if i == 20:
        print("ready", flush=True)
"""


def crash_reopen(directory: str, run_s: float):
    path = tempfile.mkdtemp(dir=directory)
    try:
        p = subprocess.Popen([sys.executable, "-c", CHILD, path, ROOT], stdout=subprocess.PIPE, text=True)
        p.stdout.readline()
        time.sleep(run_s)
        p.send_signal(signal.SIGKILL)
        p.wait()
        cfg = StoreConfig(flush_disk_type="SYNC_FLUSH", mapped_file_size_commit_log=64 << 20,
                          max_hash_slot_num=100_003, max_index_num=400_000)
        t0 = time.perf_counter()
        with MessageStore.open(path, cfg) as store:
            seconds = time.perf_counter() - t0
            info = store.runtime_info()["recovery"]
            ok = store.verify()["ok"]
        return seconds, info, ok
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dir", default=None, help="where the stores go (default: the system temp dir)")
    args = ap.parse_args(argv)
    directory = args.dir or tempfile.gettempdir()
    secs = 1.0 if args.quick else 3.0
    print(f"rmqcore durability bench ({'quick' if args.quick else 'full'}), {time.strftime('%Y-%m-%dT%H:%M:%S%z')}, "
          f"load {os.getloadavg()[0]:.2f}")
    print("\n| operation | result | unit | vs peer/limit (same run) |\n|---|---:|---|---|")
    base = fsync_per_message(directory, secs)
    print(f"| one fdatasync per message (4 KiB pwrite + fdatasync) | {base:,.0f} | msgs/s | baseline |")
    for producers in (1, 4, 16):
        rate, per_flush = sync_put_rate(directory, producers, secs)
        print(f"| SYNC_FLUSH put, {producers} producer(s), 1 KiB | {rate:,.0f} | msgs/s | "
              f"{rate / base:.1f}× one fsync per message; {per_flush:.1f} puts per flush |")
    size, records, gbps, reopen_s, info = recovery(directory, (256 if args.quick else 1024) * MiB)
    print(f"| recovery scan with CRC ({size / MiB:,.0f} MiB commitlog, {records:,} records) | {gbps:.2f} | GB/s | "
          f"scan_records over every file |")
    print(f"| abnormal reopen of that store (CRC scan from checkpoint + dispatch catch-up) | {reopen_s:.2f} | s | "
          f"{info.get('records', 0):,} records scanned, {info.get('rebuilt_units', 0):,} units rebuilt |")
    seconds, info, ok = crash_reopen(directory, 0.5 if args.quick else 2.0)
    print(f"| reopen after SIGKILL of a SYNC_FLUSH producer | {seconds:.2f} | s | "
          f"{info.get('records', 0):,} records scanned, {info.get('truncated_bytes', 0):,} bytes cut, "
          f"{info.get('rebuilt_units', 0):,} units / {info.get('rebuilt_keys', 0):,} keys rebuilt, "
          f"verify {'clean' if ok else 'FAILED'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
