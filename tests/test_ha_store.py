"""A slave's raw append (MessageStore.append_to_commit_log): a master's commitlog bytes copied in arbitrary pieces
end byte-identical, dispatched into the same consume queues, with the checks that keep a replica from diverging."""
from __future__ import annotations

import os
import random

import pytest

from rmqcore import Message, MessageStore
from rmqcore.errors import BrokerRoleError, ReplicaError

from store_util import queue_messages


def _fill(path, config, n=600, seed=1):
    rnd = random.Random(seed)
    with MessageStore.open(path, config) as m:
        for i in range(n):
            m.put(Message("ha-topic", os.urandom(rnd.randrange(1, 900)), i % 3, tags=f"t{i % 4}", keys=[f"k{i}"]))
        m.wait_dispatched()
        return m.commit_log.min_offset, m.commit_log.max_offset


def _master_bytes(path, start, end):
    """The master's commitlog bytes [start, end) as the files lie (blank padding included)."""
    out = bytearray()
    size = None
    for name in sorted(os.listdir(os.path.join(path, "commitlog"))):
        with open(os.path.join(path, "commitlog", name), "rb") as f:
            data = f.read()
        size = len(data)
        base = int(name)
        lo, hi = max(start, base), min(end, base + size)
        if lo < hi:
            out += data[lo - base:hi - base]
    return bytes(out), size


def _pieces(start, data, file_size, rnd):
    """(offset, bytes) pieces as a master sends them: never across a file end, cut anywhere else."""
    pos = 0
    while pos < len(data):
        off = start + pos
        room = file_size - off % file_size
        n = min(rnd.randrange(1, 3000), room, len(data) - pos)
        yield off, data[pos:pos + n]
        pos += n


def test_raw_append_pieces_end_identical_and_dispatched(tmp_path, small_config):
    master = str(tmp_path / "m")
    lo, hi = _fill(master, small_config)
    data, file_size = _master_bytes(master, lo, hi)
    slave_cfg = small_config.replace(broker_role="SLAVE")
    rnd = random.Random(7)
    with MessageStore.open(str(tmp_path / "s"), slave_cfg) as s:
        for off, piece in _pieces(lo, data, file_size, rnd):
            assert s.append_to_commit_log(off, piece) == off + len(piece)
        s.wait_dispatched()
        assert s.runtime_info()["dispatch_error"] is None
        got = {q: [m.body for m in queue_messages(s, "ha-topic", q)] for q in range(3)}
    with MessageStore.open(master, small_config) as m:
        want = {q: [x.body for x in queue_messages(m, "ha-topic", q)] for q in range(3)}
    assert got == want and sum(map(len, want.values())) == 600
    for name in sorted(os.listdir(os.path.join(master, "commitlog"))):
        a = open(os.path.join(master, "commitlog", name), "rb").read()
        b = open(os.path.join(tmp_path / "s", "commitlog", name), "rb").read()
        assert a == b, name


def test_partial_record_is_not_yet_then_dispatched(tmp_path, small_config):
    master = str(tmp_path / "m")
    lo, hi = _fill(master, small_config, n=3)
    data, _ = _master_bytes(master, lo, hi)
    with MessageStore.open(str(tmp_path / "s"), small_config.replace(broker_role="SLAVE")) as s:
        cut = len(data) - 10
        s.append_to_commit_log(0, data[:cut])
        s.reput.do_reput()
        info = s.runtime_info()
        assert info["dispatch_error"] is None
        assert info["dispatch_behind_bytes"] > 0              # the last record waits for its tail
        assert len(queue_messages(s, "ha-topic", 2)) == 0
        s.append_to_commit_log(cut, data[cut:])
        s.wait_dispatched()
        assert s.runtime_info()["dispatch_error"] is None
        assert len(queue_messages(s, "ha-topic", 2)) == 1


def test_slave_refuses_puts_and_master_refuses_raw_append(tmp_path, small_config):
    with MessageStore.open(str(tmp_path / "s"), small_config.replace(broker_role="SLAVE")) as s:
        with pytest.raises(BrokerRoleError, match="SLAVE"):
            s.put(Message("t", b"x"))
        with pytest.raises(BrokerRoleError, match="SLAVE"):
            s.put_batch([Message("t", b"x")])
        assert s.commit_log.max_offset == 0
    with MessageStore.open(str(tmp_path / "m"), small_config) as m:
        with pytest.raises(BrokerRoleError, match="ASYNC_MASTER"):
            m.append_to_commit_log(0, b"x")


def test_continuity_and_geometry_checks(tmp_path, small_config):
    master = str(tmp_path / "m")
    lo, hi = _fill(master, small_config, n=200)
    data, file_size = _master_bytes(master, lo, hi)
    with MessageStore.open(str(tmp_path / "s"), small_config.replace(broker_role="SLAVE")) as s:
        with pytest.raises(ReplicaError, match="file start"):
            s.append_to_commit_log(100, data[:50])          # an empty log starts at a file start
        s.append_to_commit_log(0, data[:1000])
        with pytest.raises(ReplicaError, match="ends at 1000") as e:
            s.append_to_commit_log(1200, data[1200:1300])   # a gap
        assert (e.value.offset, e.value.expected) == (1200, 1000)
        with pytest.raises(ReplicaError, match="ends at 1000"):
            s.append_to_commit_log(900, data[900:1100])     # an overlap
        with pytest.raises(ReplicaError, match="file end"):
            s.append_to_commit_log(1000, bytes(file_size))  # across this log's file end: another file size
        assert s.commit_log.max_offset == 1000               # nothing written by the refusals
        s.append_to_commit_log(1000, data[1000:file_size])
        assert s.commit_log.max_offset == file_size


def test_smaller_master_files_stop_dispatch_with_a_geometry_error(tmp_path, small_config):
    master = str(tmp_path / "m")
    lo, hi = _fill(master, small_config, n=200)
    data, file_size = _master_bytes(master, lo, hi)
    big = small_config.replace(broker_role="SLAVE", mapped_file_size_commit_log=4 * file_size)
    with MessageStore.open(str(tmp_path / "s"), big) as s:
        s.append_to_commit_log(0, data[:2 * file_size])      # the master's first two files, into one of ours
        s.reput.do_reput()
        err = s.runtime_info()["dispatch_error"]
        assert err and "another commitlog file size" in err
        assert s.reput.reput_from_offset < file_size          # nothing after the misfit blank was skipped over


def test_slave_restart_resumes_from_its_own_max_offset(tmp_path, small_config):
    master = str(tmp_path / "m")
    lo, hi = _fill(master, small_config, n=100)
    data, _ = _master_bytes(master, lo, hi)
    cfg = small_config.replace(broker_role="SLAVE")
    path = str(tmp_path / "s")
    with MessageStore.open(path, cfg) as s:
        s.append_to_commit_log(0, data[:len(data) - 7])       # the last record in pieces when the slave stops
    with MessageStore.open(path, cfg) as s:
        resume = s.commit_log.max_offset
        assert resume < len(data) - 7                          # recovery cut the partial record
        s.append_to_commit_log(resume, data[resume:])
        s.wait_dispatched()
        assert sum(len(queue_messages(s, "ha-topic", q)) for q in range(3)) == 100


def _wait(cond, what, timeout=20.0):
    import time
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_in_process_master_and_slave_replicate_and_sync_master_waits(tmp_path, small_config):
    from rmqcore.status import PutStatus
    mcfg = small_config.replace(broker_role="SYNC_MASTER", sync_flush_timeout=2000)
    with MessageStore.open(str(tmp_path / "m"), mcfg) as m:
        # no slave connected: stored, answered SLAVE_NOT_AVAILABLE (RocketMQ's isSlaveOK)
        r = m.put(Message("ha-topic", b"before", 0))
        assert r.status is PutStatus.SLAVE_NOT_AVAILABLE
        ha = m.start_ha("127.0.0.1", 0)
        with MessageStore.open(str(tmp_path / "s"), small_config.replace(broker_role="SLAVE")) as s:
            s.start_ha(master_address=f"127.0.0.1:{ha.port}")
            _wait(lambda: ha.connection_count == 1 and ha.push2slave_max_offset == m.commit_log.max_offset,
                  "the slave to catch up")
            results = [m.put(Message("ha-topic", os.urandom(700), i % 3)) for i in range(300)]
            assert all(r.status is PutStatus.PUT_OK for r in results)
            assert ha.push2slave_max_offset >= results[-1].commitlog_offset + results[-1].wrote_bytes
            assert s.runtime_info()["ha"]["error"] is None
            s.wait_dispatched()
            m.wait_dispatched()
            assert [x.body for x in queue_messages(s, "ha-topic", 1)] == \
                [x.body for x in queue_messages(m, "ha-topic", 1)]
            replicated = s.commit_log.max_offset
        # the slave gone: SLAVE_NOT_AVAILABLE again once the master noticed
        _wait(lambda: ha.connection_count == 0, "the master to drop the connection")
        assert m.put(Message("ha-topic", b"after", 0)).status is PutStatus.SLAVE_NOT_AVAILABLE
    master_bytes, _ = _master_bytes(str(tmp_path / "m"), 0, replicated)
    slave_bytes, _ = _master_bytes(str(tmp_path / "s"), 0, replicated)
    assert master_bytes == slave_bytes and len(slave_bytes) == replicated > 3 * 64 * 1024


def _replicated_slave(tmp_path, small_config, n, size):
    """A slave store holding a master's log of ``n`` records of ``size`` bytes (closed); returns its max offset."""
    with MessageStore.open(str(tmp_path / "m1"), small_config) as m:
        for i in range(n):
            m.put(Message("ha-topic", bytes([i % 251]) * size, i % 3))
        ha = m.start_ha("127.0.0.1", 0)
        with MessageStore.open(str(tmp_path / "s"), small_config.replace(broker_role="SLAVE")) as s:
            s.start_ha(master_address=f"127.0.0.1:{ha.port}")
            _wait(lambda: s.commit_log.max_offset == m.commit_log.max_offset, "the slave to catch up")
            return s.commit_log.max_offset


@pytest.mark.parametrize("case", ["truncated master", "another log"])
def test_slave_refuses_a_master_that_does_not_continue_its_log(tmp_path, small_config, case):
    mine = _replicated_slave(tmp_path, small_config, 120, 500)
    # another master: a log shorter than the slave's (truncated behind it), or longer but of other records
    n, size = (40, 500) if case == "truncated master" else (400, 333)
    with MessageStore.open(str(tmp_path / "m2"), small_config) as m2:
        for i in range(n):
            m2.put(Message("ha-topic", b"x" * size, i % 3))
        assert (m2.commit_log.max_offset < mine) == (case == "truncated master")
        ha = m2.start_ha("127.0.0.1", 0)
        with MessageStore.open(str(tmp_path / "s"), small_config.replace(broker_role="SLAVE")) as s:
            assert s.commit_log.max_offset == mine
            client = s.start_ha(master_address=f"127.0.0.1:{ha.port}")
            _wait(lambda: client.error is not None, "the slave to refuse the master")
            assert ("behind this slave" if case == "truncated master" else "another log") in client.error
            _wait(lambda: not client.is_alive(), "replication to stop")
            assert s.commit_log.max_offset == mine                 # not a byte of the other log
            assert s.runtime_info()["ha"]["error"] == client.error
        assert ha.push2slave_max_offset <= m2.commit_log.max_offset


def test_sync_master_answers_flush_slave_timeout_when_the_slave_stops_acknowledging(tmp_path, small_config):
    from rmqcore.ha_service import HEADER, REPORT
    from rmqcore.status import PutStatus
    import socket
    mcfg = small_config.replace(broker_role="SYNC_MASTER", sync_flush_timeout=300)
    with MessageStore.open(str(tmp_path / "m"), mcfg) as m:
        ha = m.start_ha("127.0.0.1", 0)
        # a slave that reports once and then reads without acknowledging (a stuck Java slave, say)
        with socket.create_connection(("127.0.0.1", ha.port)) as sock:
            sock.sendall(REPORT.pack(0))
            _wait(lambda: ha.connection_count == 1 and ha.connections[0].slave_request_offset == 0, "the report")
            r = m.put(Message("ha-topic", b"y" * 100, 0))
            assert r.status is PutStatus.FLUSH_SLAVE_TIMEOUT
            # the master did send the record: a frame at offset 0 holding it
            sock.settimeout(5)
            head = b""
            while len(head) < HEADER.size:
                head += sock.recv(HEADER.size - len(head))
            offset, size = HEADER.unpack(head)
            assert offset == 0 and size == r.wrote_bytes
            # acknowledging it now answers the next put (once its own record is acknowledged too)
            sock.sendall(REPORT.pack(r.wrote_bytes))
            _wait(lambda: ha.push2slave_max_offset == r.wrote_bytes, "the ack")
        assert m.get_messages("g", "ha-topic", 0, 0, 8).messages[0].body == b"y" * 100   # stored all the same


def test_slave_killed_mid_record_keeps_only_what_it_dispatched(tmp_path, small_config):
    """A slave killed with a record's first piece on disk (its properties' tail zeros: no checksum tells in a 4.x
    record) reopens at the end of what its consume queues cover, and the master's bytes from there continue it."""
    import subprocess
    import sys
    master = str(tmp_path / "m")
    lo, hi = _fill(master, small_config, n=100)
    data, _ = _master_bytes(master, lo, hi)
    path = str(tmp_path / "s")
    cut = len(data) - 7                                   # inside the last record's __CRC32# digits
    with open(tmp_path / "piece", "wb") as f:
        f.write(data[:cut])
    child = (
        "import os, sys\n"
        "from rmqcore import MessageStore, StoreConfig\n"
        f"cfg = StoreConfig(mapped_file_size_commit_log={small_config.mapped_file_size_commit_log}, "
        f"mapped_file_size_consume_queue={small_config.mapped_file_size_consume_queue}, "
        f"max_hash_slot_num=101, max_index_num=400, broker_role='SLAVE')\n"
        f"s = MessageStore.open({path!r}, cfg)\n"
        f"s.append_to_commit_log(0, open({str(tmp_path / 'piece')!r}, 'rb').read())\n"
        "import time; time.sleep(0.5)\n"          # the dispatcher takes the whole records
        "os._exit(9)\n")
    import rmqcore                                        # the child imports the rmqcore under test, not the sources
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))
    assert subprocess.run([sys.executable, "-c", child], cwd=str(tmp_path),
                          env=dict(os.environ, PYTHONPATH=pkg_parent)).returncode == 9
    cfg = small_config.replace(broker_role="SLAVE")
    with MessageStore.open(path, cfg) as s:
        assert not s.recovery["last_exit_ok"]
        resume = s.commit_log.max_offset
        assert resume < cut and s.recovery.get("replica_cut_from", resume) == resume
        assert bytes(s.commit_log.get_data(0, resume)) == data[:resume]
        s.append_to_commit_log(resume, data[resume:])
        s.wait_dispatched()
        assert sum(len(queue_messages(s, "ha-topic", q)) for q in range(3)) == 100
        assert s.verify()["ok"]


def test_a_replica_refusal_is_the_answer_over_a_flush_timeout(tmp_path):
    """CommitLog.asyncPutMessage combines the flush's and the replica's statuses, the replica's winning when it is
    not PUT_OK: a SYNC_MASTER put that timed out on its flush and finds no slave answers SLAVE_NOT_AVAILABLE (it
    kept FLUSH_DISK_TIMEOUT before)."""
    from rmqcore import StoreConfig
    from rmqcore.ha_service import ReplicaPuts
    from rmqcore.status import PutStatus
    with MessageStore.open(str(tmp_path / "m"), StoreConfig(broker_role="SYNC_MASTER")) as m:
        r = ReplicaPuts(m, None)               # replication not started: no slave for any put
        late = m.put(Message("t", b"x", 0)).replace_status(PutStatus.FLUSH_DISK_TIMEOUT)
        assert r.settle(late).status is PutStatus.SLAVE_NOT_AVAILABLE
        assert r.settle([late, late])[1].status is PutStatus.SLAVE_NOT_AVAILABLE
