"""Command line: ``rmqcore demo`` (or ``python -m rmqcore demo``) and ``rmqcore dump``.

demo: create a temporary store, put messages across topics and queues, read them back by commitlog offset, by
queue and by key, and print throughput and the files it made.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from .errors import CorruptRecordError


def _fmt_rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s" if seconds > 0 else "n/a"


def demo(args) -> int:
    from . import Message, MessageStore, StoreConfig
    from .status import GetStatus

    root = args.path or tempfile.mkdtemp(prefix="rmqcore-demo-")
    cfg = StoreConfig(mapped_file_size_commit_log=args.file_size, mapped_file_size_consume_queue=300000 * 20,
                      max_hash_slot_num=500_000, max_index_num=2_000_000)
    topics = [f"DemoTopic{i}" for i in range(args.topics)]
    body = os.urandom(args.body_size)
    n = args.messages
    print(f"rmqcore demo: {n:,} messages of {args.body_size} B over {len(topics)} topics x {args.queues} queues "
          f"into {root}")
    try:
        with MessageStore.open(root, cfg) as store:
            msgs = [Message(topics[i % len(topics)], body, (i // len(topics)) % args.queues, tags=f"Tag{i % 5}",
                            keys=[f"order-{i}"]) for i in range(n)]
            t0 = time.perf_counter()
            results = []
            step = 1000
            for i in range(0, n, step):
                results.extend(store.put_batch(msgs[i:i + step]))
            t_put = time.perf_counter() - t0
            assert all(r.ok for r in results), "a put failed"
            mb = sum(r.wrote_bytes for r in results) / 1e6
            print(f"  put_batch   {_fmt_rate(n, t_put):>14}  {mb / t_put:8.1f} MB/s  ({mb:.1f} MB of records)")

            t0 = time.perf_counter()
            for r in results[:min(n, 50_000)]:
                store.put(Message(topics[0], body, 0))
            k = min(n, 50_000)
            t_put1 = time.perf_counter() - t0
            print(f"  put         {_fmt_rate(k, t_put1):>14}  (one call per message)")

            t0 = time.perf_counter()
            ok = store.wait_dispatched(60)
            print(f"  dispatch    caught up in {time.perf_counter() - t0:.3f} s after the last put "
                  f"({'ok' if ok else 'TIMEOUT'})")

            t0 = time.perf_counter()
            for r, m in zip(results, msgs):
                got = store.look_message(r.commitlog_offset)
                if got is None or got.queue_offset != r.queue_offset or got.topic != m.topic:
                    raise SystemExit(f"read back mismatch at {r.commitlog_offset}")
            t_read = time.perf_counter() - t0
            print(f"  look_message {_fmt_rate(n, t_read):>13}  (every message read back by commitlog offset)")

            t0 = time.perf_counter()
            got_total = 0
            for t in topics:
                for q in range(args.queues):
                    off = 0
                    while True:
                        g = store.get_messages("demo-group", t, q, off, 32)
                        if g.status is not GetStatus.FOUND:
                            break
                        got_total += len(g.messages)
                        off = g.next_begin_offset
            t_get = time.perf_counter() - t0
            print(f"  get_messages {_fmt_rate(got_total, t_get):>13}  ({got_total:,} messages pulled by queue)")

            t0 = time.perf_counter()
            probes = min(n, 2000)
            found = 0
            for i in range(0, n, max(1, n // probes)):
                hits = store.query_message(topics[i % len(topics)], f"order-{i}", 4)
                found += any(h.keys == [f"order-{i}"] for h in hits)
            t_q = time.perf_counter() - t0
            print(f"  query_message {t_q / probes * 1e6:10.1f} us/key  ({found}/{probes} keys found)")
            if found != probes:
                raise SystemExit("some keys were not found by the index")
            info = store.runtime_info()
        print("  files:")
        for dirpath, _, files in sorted(os.walk(root)):
            rel = os.path.relpath(dirpath, root)
            if files and rel.count(os.sep) < 3:
                shown = sorted(files)
                print(f"    {rel:<32} {len(shown):4d} file(s): {', '.join(shown[:3])}{' ...' if len(shown) > 3 else ''}")
        print(f"  commitlog max offset {info['commitlog_max_offset']:,}, {info['consume_queues']} consume queues, "
              f"{info['index_files']} index file(s)")
    finally:
        if not args.keep and not args.path:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def dump(args) -> int:
    from .commit_log import CommitLog
    from .config import StoreConfig
    cfg = StoreConfig(mapped_file_size_commit_log=args.file_size)
    cl = CommitLog(os.path.join(args.path, "commitlog"), cfg, read_only=True)
    cl.load()
    try:
        cl.recover(check_crc=True)
        for i, m in enumerate(cl.iterate(args.offset, check_crc=True)):
            if i >= args.count:
                break
            print(f"{m.commitlog_offset:>14} {m.topic}/{m.queue_id}@{m.queue_offset} size={m.store_size} "
                  f"tags={m.tags!r} keys={m.keys} uniq={m.uniq_key} body={bytes(m.body[:32])!r}")
    except CorruptRecordError as e:
        # Recovery scans only the last files of a cleanly closed store: damage before them shows here.
        print(f"rmqcore dump: stopped at a corrupt record: {e}", file=sys.stderr)
        return 1
    finally:
        cl.close()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="rmqcore", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="put and read back messages on a temporary store, print throughput")
    d.add_argument("--messages", type=int, default=200_000)
    d.add_argument("--body-size", type=int, default=1024)
    d.add_argument("--topics", type=int, default=4)
    d.add_argument("--queues", type=int, default=4)
    d.add_argument("--file-size", type=int, default=64 * 1024 * 1024, help="commitlog file size (bytes)")
    d.add_argument("--path", help="store directory (default: a temporary one, deleted afterwards)")
    d.add_argument("--keep", action="store_true", help="keep the temporary store")
    d.set_defaults(func=demo)
    du = sub.add_parser("dump", help="print the messages of a store's commitlog")
    du.add_argument("path")
    du.add_argument("--offset", type=int, default=0)
    du.add_argument("--count", type=int, default=20)
    du.add_argument("--file-size", type=int, default=1024 * 1024 * 1024)
    du.set_defaults(func=dump)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
