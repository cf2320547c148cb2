"""The peers workload (bench/peers.py) on 2,000 messages: every store writes, reads back and is checked, the table
renders, a missing peer is skipped with a note, and a store that returns the wrong message fails its row.

Small rmqcore files (64 MiB commitlog, a 40,000-item index) keep the smoke run to seconds; the full run uses the
default StoreConfig. No test asserts on time.
"""
import os
import sys

import pytest

from bench import peers as P
from bench import workloads as W

N = 2_000
SMALL_RMQ = {"mapped_file_size_commit_log": 64 * W.MiB, "max_hash_slot_num": 10_007, "max_index_num": 40_000}


def _available():
    return [s for s in P.STORES if P._unavailable(s) is None]


def _smoke(bench_dir, **kw):
    return P.run(N, samples=200, warmup=20, base_dir=bench_dir, rmq_config=SMALL_RMQ, **kw)


def _check_report(report, stores, base_dir):
    assert report["failed"] == [], report["notes"]
    for row in report["rows"]:
        for s in stores:
            assert row["values"][s] is not None and row["values"][s] > 0, (row["figure"], s)
        peers = [s for s in stores if s != "rmqcore"]
        if "rmqcore" in stores and peers:
            assert row["best_peer"] in peers
            assert row["ratio"] is not None and row["ratio"] > 0
    table = P.render(report)
    for s in stores:
        assert P.LABELS[s] in table
    assert f"N = {N:,}" in table and "load average" in table
    # every store's directory is gone
    assert not [d for d in os.listdir(base_dir) if d.startswith("rmqbench-peers-")]


@pytest.mark.benchmark(group="peers")
def test_peers_workload(benchmark, bench_dir):
    report = benchmark.pedantic(_smoke, args=(bench_dir,), rounds=1, iterations=1)
    _check_report(report, _available(), bench_dir)
    benchmark.extra_info["rows"] = [{k: r[k] for k in ("figure", "values", "best_peer", "ratio")}
                                    for r in report["rows"]]


def test_peers_workload_durable(bench_dir):
    report = _smoke(bench_dir, durable=True)
    _check_report(report, _available(), bench_dir)
    assert "every batch synced" in report["header"][0]


def test_missing_peer_is_skipped(bench_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "lmdb", None)      # import lmdb now raises ImportError
    report = P.run(N, samples=50, warmup=5, base_dir=bench_dir, only=["lmdb", "appendlog"])
    assert report["failed"] == []
    assert report["notes"]["lmdb"].startswith("skipped")
    assert "lmdb" not in report["results"]
    assert all(r["values"]["lmdb"] is None and r["values"]["appendlog"] > 0 for r in report["rows"])
    table = P.render(report)
    assert "| skipped |" in table and "lmdb: skipped" in table


def test_wrong_message_fails_the_store(bench_dir, monkeypatch):
    # A store whose point read returns its neighbour's body must fail, not produce a latency.
    real = P.AppendLogCase.point
    monkeypatch.setattr(P.AppendLogCase, "point", lambda self, i: real(self, (i + 1) % N))
    report = P.run(N, samples=50, warmup=5, base_dir=bench_dir, only=["appendlog", "sqlite3"])
    assert report["failed"] == ["appendlog"]
    assert "expected the body of message" in report["notes"]["appendlog"]
    rows = {r["figure"]: r for r in report["rows"]}
    assert rows["write_msgs"]["values"]["appendlog"] > 0          # measured before the failure: kept
    assert rows["point_p50"]["values"]["appendlog"] is None
    assert rows["point_p50"]["best_peer"] == "sqlite3"
    assert "FAILED" in P.render(report)
    assert P.main(["--messages", "64", "--samples", "10", "--only", "appendlog", "--dir", bench_dir]) == 1


def test_append_log_records_carry_a_crc(tmp_path):
    path = str(tmp_path / "log")
    log = P.AppendLog(path, durable=False)
    wl = P.Workload(16)
    for i, b in enumerate(wl.bodies(0, 16)):
        log.append(i, i % P.TOPIC_QUEUES, wl.key(i).encode(), b)
    log.commit()
    last = log.by_id[15]
    log.open_reader()
    assert P.body_id(log.body_at(last)) == 15
    log.close()
    assert P.AppendLog.scan(path) == (16, os.path.getsize(path))
    with open(path, "r+b") as f:       # one flipped bit in the last body
        f.seek(os.path.getsize(path) - 1)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 1]))
    assert P.AppendLog.scan(path) == (15, last)
