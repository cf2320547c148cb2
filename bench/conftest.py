"""Fixtures for the pytest-benchmark cases: warmed commit logs, record buffers and filled stores, all in temporary
directories that are deleted at the end. Run with ``python -m pytest bench --benchmark-only`` from the repo root.

Sizes can be lowered for a smoke run with RMQ_BENCH_KEYS (keys indexed for the query cases, default 1,000,000).
No test asserts on time; they check only that the work was done.
"""
import os
import shutil
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench import workloads as W  # noqa: E402

QUERY_KEYS = int(os.environ.get("RMQ_BENCH_KEYS", "1000000"))


@pytest.fixture(scope="session")
def bench_dir():
    d = tempfile.mkdtemp(prefix="rmqbench-pytest-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def warm_log(bench_dir):
    """A CommitLog on 256 MiB pre-faulted files (the current one and the next, allocated in the background)."""
    w = W.WarmCommitLog(256 * W.MiB, bench_dir)
    yield w
    w.close()


@pytest.fixture(scope="module")
def record_buf(bench_dir):
    n = 20_000
    return n, W.record_buffer(n, base_dir=bench_dir)


@pytest.fixture(scope="module")
def filled_store(bench_dir):
    """A store with 50,000 1 KiB-body messages in one queue, dispatched."""
    n = 50_000
    with W.temp_dir(bench_dir) as root:
        store = W.open_store(root, W.bench_config(256 * W.MiB))
        try:
            W.fill_store(store, n)
            yield store, n
        finally:
            store.close()


@pytest.fixture(scope="module")
def keyed_store(bench_dir):
    """QUERY_KEYS messages (128-byte bodies, one key each, 8 queues) written as a commitlog, then opened as a
    store whose dispatcher indexes them (88 MB index file: 2,000,003 slots, 4,000,000 items)."""
    n = QUERY_KEYS
    with W.temp_dir(bench_dir) as root:
        cfg = W.bench_config(256 * W.MiB)
        W.write_keyed_commitlog(root, cfg, n, queues=8, body_size=128)
        store = W.open_store(root, cfg)
        try:
            assert store.wait_dispatched(1800)
            yield store, n
        finally:
            store.close()
