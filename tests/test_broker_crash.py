"""Consumer offsets survive SIGKILL (a real child process, tests/broker_crash_child.py), as RocketMQ promises: every
offset committed and persisted before the kill is there after reopen, a commit older than the persist interval (plus
slack for a loaded machine) was persisted by the timer, and nothing is invented — a kill in the middle of a persist
leaves the previous file or its .bak, never a torn table."""
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import rmqcore
from rmqcore import StoreConfig
from rmqcore.broker import Broker, BrokerConfig

CHILD = Path(__file__).with_name("broker_crash_child.py")
SRC = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))
INTERVAL_MS = 200
SLACK_S = 2.0          # the timer's thread may be starved on a shared 2-core machine


def run_child(root, seed, kill_after, explicit):
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [sys.executable, str(CHILD), root, str(seed), str(INTERVAL_MS), "1" if explicit else "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines = []                      # (receive time, line)
    ready = threading.Event()

    def read():
        for line in proc.stdout:
            lines.append((time.monotonic(), line.split()))
            if line.startswith("READY"):
                ready.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not ready.wait(60):
        proc.kill()
        raise AssertionError(f"child did not start: {proc.stderr.read()}")
    time.sleep(kill_after)
    killed_at = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    reader.join(10)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    return lines, killed_at


def reopen_offsets(root):
    store_config = StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=20 * 4000,
                               max_hash_slot_num=1000, max_index_num=4000, warm_mapped_file_enable=False,
                               message_index_enable=False)
    with Broker.open(root, BrokerConfig(broker_name="crash-broker"), store_config=store_config) as b:
        return [b.query_offset("g", "orders", q) for q in range(4)]


@pytest.mark.parametrize("seed,explicit", [(1, True), (2, False), (3, True)])
def test_committed_and_persisted_offsets_survive_sigkill(tmp_path, seed, explicit):
    """explicit: the child persists every 25 commits itself as well as on the timer; otherwise the timer alone
    must have written every commit older than the interval (plus slack)."""
    root = str(tmp_path / "store")
    rng = random.Random(seed)
    previous = [-1] * 4
    for round_ in range(2):                     # the second child starts from the first one's persisted offsets
        kill_after = rng.uniform(0.4, 1.6) + (0 if explicit else SLACK_S)
        lines, killed_at = run_child(root, seed * 10 + round_, kill_after, explicit)
        start = [int(x) for x in lines[0][1][1:]]
        assert start == [max(p, 0) for p in previous]
        committed = {q: set() for q in range(4)}
        persisted = list(start)
        timer_floor = list(start)
        for at, parts in lines[1:]:
            if parts[0] == "C":
                q, off = int(parts[1]), int(parts[2])
                committed[q].add(off)
                if at < killed_at - INTERVAL_MS / 1000 - SLACK_S:
                    timer_floor[q] = max(timer_floor[q], off)
            elif parts[0] == "P":
                persisted = [max(a, int(b)) for a, b in zip(persisted, parts[1:])]
        assert any(committed.values()), "the child committed nothing before the kill"
        after = reopen_offsets(root)
        for q in range(4):
            # Persisted before the kill: there. Older than interval + slack: persisted by the timer.
            assert after[q] >= persisted[q], (q, after, persisted)
            assert after[q] >= timer_floor[q], (q, after, timer_floor)
            # Nothing invented: a value the child committed (or where it started).
            assert after[q] in committed[q] or after[q] == start[q] or (after[q] == -1 and start[q] == 0)
        previous = after
    # The file the last kill left is readable by a plain reopen (main or .bak) and Java-shaped.
    text = (Path(root) / "config" / "consumerOffset.json").read_text()
    assert text.startswith('{\n\t"offsetTable":{\n\t\t"orders@g":{0:')
