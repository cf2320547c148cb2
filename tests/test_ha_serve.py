"""Master/slave replication between two `rmqcore serve` processes (RocketMQ 4.9.7's HA protocol): a SYNC_MASTER and a
SLAVE on 127.0.0.1, sends through the official RocketMQ 5 Python client, kills of either side, and the replica
checked byte for byte against the master's commitlog and through its own consume queues."""
from __future__ import annotations

import os
import socket
import time

import pytest

pytest.importorskip("rocketmq")
pytest.importorskip("grpc")

from rocketmq import Producer  # noqa: E402
from rocketmq.v5.exception import ForbiddenException, InternalErrorException  # noqa: E402

from rmqcore import MessageStore, StoreConfig  # noqa: E402
from serve_util import ServerProcess, config, message, prepare  # noqa: E402
from store_util import queue_messages  # noqa: E402

FILE = 64 * 1024        # small commitlog files, so replication crosses many file ends (and their blank records)
TOPIC = "ha_t"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _master(store, ha_port):
    conf = {"brokerRole": "SYNC_MASTER", "haListenPort": str(ha_port), "mappedFileSizeCommitLog": str(FILE),
            "syncFlushTimeout": "3000", "haSendHeartbeatInterval": "500"}
    p = ServerProcess(store, conf)
    line = p.proc.stdout.readline()
    assert line.strip() == f"ha on 127.0.0.1:{ha_port}", line
    return p


def _slave(store, ha_port):
    conf = {"brokerRole": "SLAVE", "brokerId": "1", "haMasterAddress": f"127.0.0.1:{ha_port}",
            "mappedFileSizeCommitLog": str(FILE), "haSendHeartbeatInterval": "500"}
    p = ServerProcess(store, conf)
    line = p.proc.stdout.readline()
    assert line.startswith("ha slave of 127.0.0.1:"), line
    return p


def _send(endpoint, n, tag, await_slave=False):
    """Send n messages, each answered only once acknowledged; with ``await_slave`` the first is sent again while
    the master answers HA_NOT_AVAILABLE (up to 30 s): a slave process just started connects and reports in its own
    time, and until the master has its connection RocketMQ's isSlaveOK is false too. Every later send must pass."""
    p = Producer(config(endpoint), (TOPIC,))
    p.startup()
    try:
        ids = []
        deadline = time.monotonic() + 30
        for i in range(n):
            m = message(TOPIC, os.urandom(900) + f"{tag}-{i}".encode(), keys=f"{tag}-{i}")
            while True:
                try:
                    ids.append(p.send(m).message_id)
                    break
                except InternalErrorException:
                    if not await_slave or ids or time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        return ids
    finally:
        p.shutdown()


def _files(store):
    d = os.path.join(store, "commitlog")
    return {name: open(os.path.join(d, name), "rb").read() for name in sorted(os.listdir(d))}


def test_sync_master_and_slave_processes(tmp_path):
    mstore, sstore = str(tmp_path / "master"), str(tmp_path / "slave")
    prepare(mstore, {TOPIC: ("NORMAL", 2)})
    ha_port = _free_port()
    master = _master(mstore, ha_port)
    slave = None
    try:
        # SYNC_MASTER with no slave: the message is stored, the send answered HA_NOT_AVAILABLE (SLAVE_NOT_AVAILABLE)
        with pytest.raises(InternalErrorException, match="no slave is available"):
            _send(master.endpoint, 1, "alone")
        slave = _slave(sstore, ha_port)
        acked = _send(master.endpoint, 150, "a", await_slave=True)     # each answered once the slave has it
        assert len(acked) == 150
        # a slave refuses sends as a slave
        with pytest.raises(ForbiddenException, match="SLAVE"):
            _send(slave.endpoint, 1, "to-slave")
        # the slave killed: sends are refused again until it is back, then it resumes from its own max offset
        slave.kill()
        with pytest.raises(InternalErrorException, match="no slave is available"):
            _send(master.endpoint, 1, "slave-down")
        slave = _slave(sstore, ha_port)
        acked += _send(master.endpoint, 100, "b", await_slave=True)
        # the master killed mid-stream and restarted on its store: the slave reconnects (within its 5 s retry)
        # and goes on
        master.kill()
        master = _master(mstore, ha_port)
        acked += _send(master.endpoint, 100, "c", await_slave=True)
        assert master.terminate() == 0
        master = None
        time.sleep(1.0)                                 # the slave's last reports; then stop it cleanly
        assert slave.terminate() == 0
        slave = None
    finally:
        for p in (master, slave):
            if p is not None:
                p.kill()
    m_files, s_files = _files(mstore), _files(sstore)
    assert len(m_files) > 5 and m_files.keys() == s_files.keys()
    for name in m_files:
        assert m_files[name] == s_files[name], f"commitlog/{name} differs"
    cfg = StoreConfig(mapped_file_size_commit_log=FILE)
    with MessageStore.open(mstore, cfg) as m:
        want = {q: [(x.msg_id, x.body) for x in queue_messages(m, TOPIC, q)] for q in range(2)}
    with MessageStore.open(sstore, cfg.replace(broker_role="SLAVE")) as s:
        got = {q: [(x.msg_id, x.body) for x in queue_messages(s, TOPIC, q)] for q in range(2)}
        report = s.verify()
        assert report["ok"], report
    assert got == want
    ids = {x[1][900:] for q in got.values() for x in q}
    assert len(got[0]) + len(got[1]) >= len(acked) and all(f"a-{i}".encode() in ids for i in range(150))


def test_remoting_sends_to_a_slave_and_to_a_sync_master_without_one(tmp_path):
    """The classic protocol's answers (4.9.7's SendMessageProcessor): a slave's store refuses puts,
    SERVICE_NOT_AVAILABLE (14); a SYNC_MASTER with no slave stores the message and answers SLAVE_NOT_AVAILABLE (11)."""
    from remoting_util import Client, RemotingProcess, send_v2
    with RemotingProcess(str(tmp_path / "s"), {"brokerRole": "SLAVE", "brokerId": "1", "brokerIP1": "127.0.0.1"},
                         namesrv=False) as slave:
        c = Client(slave.address)
        a = send_v2(c, "t-ha", b"x")
        assert a.code == 14 and "messages are put to the slave" in a.remark    # SendMessageProcessor's remark
        c.close()
    with RemotingProcess(str(tmp_path / "m"), {"brokerRole": "SYNC_MASTER", "haListenPort": "0",
                                               "brokerIP1": "127.0.0.1"}, namesrv=False) as master:
        c = Client(master.address)
        a = send_v2(c, "t-ha", b"x")
        assert a.code == 11 and a.ext_fields["queueOffset"] == "0"     # stored all the same
        c.close()
