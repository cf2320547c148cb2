"""How long the console takes to answer on a big store: fills a temporary store with N messages (one topic of 16
queues, a key each, one group a little behind), serves the console on 127.0.0.1 and times each page and API call
(its Server-Timing and the wall time seen by the client), three times each: the first visit, then warm.

    python bench/console_pages.py 10000000      # about 40 s to fill and 2.6 GB of disk at 10 M
"""
from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rmqcore import Message, StoreConfig  # noqa: E402
from rmqcore.broker import Broker, BrokerConfig, SubscriptionGroupConfig  # noqa: E402
from rmqcore.console import serve_console  # noqa: E402
from rmqcore.console.standalone import BrokerHost  # noqa: E402


def main(n: int) -> None:
    path = tempfile.mkdtemp(prefix="rmqcore-console-bench-")
    try:
        broker = Broker.open(path, BrokerConfig(), store_config=StoreConfig(mapped_file_size_commit_log=256 << 20))
        broker.create_topic("orders", 16)
        broker.update_group(SubscriptionGroupConfig("billing"))
        t0 = time.time()
        for start in range(0, n, 2000):
            broker.send_batch([Message("orders", b'{"n": %d}' % i, i % 16, keys=f"k{i}")
                               for i in range(start, min(n, start + 2000))])
        broker.store.wait_dispatched(600)
        print(f"{n:,} messages stored in {time.time() - t0:.1f} s")
        for q in range(16):
            broker.commit_offset("billing", "orders", q, min(1000, broker.store.max_offset("orders", q)))
        asyncio.run(_time_pages(BrokerHost(broker), n))
        broker.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def _time_pages(host, n: int) -> None:
    runner = await serve_console(host, "127.0.0.1", 0)
    recent = int(time.time() * 1000) - 5000
    paths = ["/", "/topics", "/topics/orders", "/groups", "/groups/billing", f"/messages?topic=orders&key=k{n // 2}",
             "/messages?topic=orders", f"/api/v1/messages?topic=orders&begin={recent}&limit=200", "/metrics"]
    loop = asyncio.get_running_loop()
    print(f"{'path':<60} {'server ms (3 visits)':<24} wall ms")
    for p in paths:
        def get():
            t = time.perf_counter()
            with urllib.request.urlopen(runner.url + p) as r:
                r.read()
                server = float(r.headers["Server-Timing"].split("dur=")[1])
            return server, (time.perf_counter() - t) * 1000
        runs = [await loop.run_in_executor(None, get) for _ in range(3)]
        print(f"{p[:60]:<60} {' '.join(f'{s:6.1f}' for s, _ in runs):<24} "
              f"{' '.join(f'{w:6.1f}' for _, w in runs)}")
    await runner.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
