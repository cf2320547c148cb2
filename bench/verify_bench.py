"""verify() rate: GB of commitlog checked per second, end to end (records with CRCs, consume queues, index).

    python bench/verify_bench.py [--mib 512] [--body 1024] [--keys 1] [--dir PATH] [--repeat 3]

Builds a store of about ``--mib`` MiB (bodies of ``--body`` bytes, ``--keys`` KEYS per message plus the
UNIQ_KEY, spread over 8 queues), then times ``MessageStore.verify()`` on the open store and ``verify_store`` on the
closed one, best of ``--repeat`` (page cache warm: this measures the checks, not the disk). The aim is >= 1 GB/s.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from rmqcore import Message, MessageStore, StoreConfig  # noqa: E402
from rmqcore.recovery import verify_store  # noqa: E402


def build(path: str, mib: int, body: int, keys: int, config: StoreConfig) -> int:
    payload = os.urandom(body)
    n = 0
    with MessageStore.open(path, config) as store:
        target = mib << 20
        batch = []
        while store.commit_log.max_offset < target:
            batch.clear()
            for _ in range(256):
                batch.append(Message(f"Verify{n % 2}", payload, n % 4, tags=f"t{n % 3}",
                                     keys=[f"k{n}-{j}" for j in range(keys)]))
                n += 1
            store.put_batch(batch)
        store.wait_dispatched(120)
    return n


def best(fn, repeat: int) -> tuple[float, dict]:
    times, report = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        report = fn()
        times.append(time.perf_counter() - t0)
    return min(times), report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--keys", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to build the store (default: a temporary directory)")
    args = ap.parse_args(argv)
    config = StoreConfig(mapped_file_size_commit_log=128 << 20, mapped_file_size_consume_queue=300000 * 20,
                         max_hash_slot_num=500_000, max_index_num=2_000_000)
    base = tempfile.mkdtemp(prefix="rmq-verify-", dir=args.dir)
    path = os.path.join(base, "store")
    try:
        t0 = time.perf_counter()
        n = build(path, args.mib, args.body, args.keys, config)
        print(f"built {n} messages ({args.body} B bodies, {args.keys} key(s) + UNIQ_KEY) in "
              f"{time.perf_counter() - t0:.1f} s")
        with MessageStore.open(path, config) as store:
            size = store.commit_log.max_offset - store.commit_log.min_offset
            secs, report = best(store.verify, args.repeat)
            assert report["ok"], {k: v for k, v in report.items() if not isinstance(v, list)}
            print(f"verify() open store:   {size / secs / 1e9:6.2f} GB/s  ({size / 1e6:.0f} MB, {report['records']} "
                  f"records, {report['cq_units']} units, {report['keys']} keys in {secs:.3f} s)")
        secs, report = best(lambda: verify_store(path, config), args.repeat)
        assert report["ok"]
        print(f"verify_store() closed: {size / secs / 1e9:6.2f} GB/s  ({secs:.3f} s)")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
