"""Child process for the reopen-after-crash benchmark (``workloads.crashed_store``); not a benchmark itself.

    python bench/crash_child.py STORE_DIR N

Opens a SYNC_FLUSH store (``workloads.crash_config()``) and puts 1 KiB-body messages (a key ``crash-%d`` each,
queues 0-3) with ``put_batch`` in batches of 100 until it is killed; once N puts have been acknowledged (every
batch returns only after an msync covers it) it prints ``acked N`` and carries on putting.
"""
import os
import sys


def main() -> int:
    path, n = sys.argv[1], int(sys.argv[2])
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from rmqcore import Message, MessageStore
    from bench import workloads as W

    store = MessageStore.open(path, W.crash_config())
    body = W.body()
    i = 0
    told = False
    while True:
        batch = [Message(W.TOPIC, body, (i + j) % W.SYNC_QUEUES, None, f"crash-{i + j}") for j in range(100)]
        for r in store.put_batch(batch):
            if not r.ok:
                print(f"error {r.status}", flush=True)
                return 1
        i += len(batch)
        if not told and i >= n:
            print(f"acked {i}", flush=True)
            told = True


if __name__ == "__main__":
    sys.exit(main())
