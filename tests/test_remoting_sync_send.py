"""SYNC_MASTER and SYNC_FLUSH sends on the remoting front, answered when the store's put completes
(rmqcore/remoting/pending_sends.py: Broker.send_async, then MessageStore.put_async), as RocketMQ's
SendMessageProcessor answers from asyncPutMessage's future: many sends in flight on a connection at once (pipelined,
as the 4.x clients' async sends are), each answered once its flush or its slave's acknowledgement covers it."""
from __future__ import annotations

import os
import signal
import socket

from rmqcore import MessageStore, StoreConfig
from rmqcore.remoting import remoting_command as rc
from rmqcore.remoting.codes import FLUSH_SLAVE_TIMEOUT
from remoting_util import Client, RemotingProcess, props, send_v2, stop_process, wait_for
from store_util import queue_messages

FILE = 1 << 20          # small commitlog files: the sends cross file ends
TOPIC = "sync_t"
QUEUES = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(c: Client, body: bytes, queue_id: int, key: str, flag: int = 0) -> int:
    ext = {"a": "pg", "b": TOPIC, "c": "TBW102", "d": str(QUEUES), "e": str(queue_id), "f": "0", "g": "0", "h": "0",
           "i": props({"KEYS": key, "UNIQ_KEY": key}), "j": "0", "k": "false", "m": "false"}
    return c.request(310, ext, body, flag)


def _pipelined(address: str, conns: int, per_conn: int, tag: str) -> dict[str, rc.RemotingCommand]:
    """``conns`` connections each with ``per_conn`` sends written before any answer is read: key -> answer."""
    clients = [Client(address) for _ in range(conns)]
    sent = []
    for i in range(per_conn):
        for n, c in enumerate(clients):
            key = f"{tag}-{n}-{i}"
            sent.append((c, _request(c, os.urandom(200) + key.encode(), (n + i) % QUEUES, key), key))
    answers = {key: c.answer(opaque) for c, opaque, key in sent}
    for c in clients:
        c.close()
    return answers


def _stored(path: str, cfg: StoreConfig) -> dict[str, bytes]:
    with MessageStore.open(path, cfg) as s:
        assert s.verify()["ok"]
        return {m.properties["KEYS"]: m.body for q in range(QUEUES) for m in queue_messages(s, TOPIC, q)}


def test_sync_master_answers_each_send_once_the_slave_has_it(tmp_path):
    mstore, sstore = str(tmp_path / "master"), str(tmp_path / "slave")
    common = {"brokerIP1": "127.0.0.1", "mappedFileSizeCommitLog": str(FILE), "haSendHeartbeatInterval": "500",
              "syncFlushTimeout": "10000"}
    ha_port = _free_port()
    with RemotingProcess(mstore, {**common, "brokerRole": "SYNC_MASTER", "haListenPort": str(ha_port)},
                         namesrv=False) as master:
        c = Client(master.address)
        # no slave: stored, and answered SLAVE_NOT_AVAILABLE (11) at once, not after a wait for a slave
        a = c.answer(_request(c, b"alone", 0, "alone"))
        assert a.code == 11 and a.ext_fields["queueOffset"] == "0"
        with RemotingProcess(sstore, {**common, "brokerRole": "SLAVE", "brokerId": "1",
                                      "haMasterAddress": f"127.0.0.1:{ha_port}"}, namesrv=False) as slave:
            # the slave connects and catches up: then a send is answered SUCCESS (PUT_OK)
            wait_for(lambda: c.answer(_request(c, b"probe", 0, "probe")).code == 0, "the slave to connect")
            # a oneway send gets no answer (the next request's answer is the next frame), and is stored
            _request(c, b"oneway", 1, "oneway", rc.ONEWAY_FLAG)
            after = c.answer(_request(c, b"after", 1, "after"))
            assert after.code == 0
            # a connection closed with its sends in flight: their answers are dropped, the server serves on
            gone = Client(master.address)
            for i in range(50):
                _request(gone, b"gone", i % QUEUES, f"gone-{i}")
            gone.close()
            answers = _pipelined(master.address, 4, 150, "p")
            assert {k: (a.code, a.remark) for k, a in answers.items() if a.code != 0} == {}
            assert all(a.ext_fields["msgId"] and a.ext_fields["queueOffset"] for a in answers.values())
            c.close()
            assert master.terminate() == 0
            assert slave.terminate() == 0
    cfg = StoreConfig(mapped_file_size_commit_log=FILE)
    want = _stored(mstore, cfg)
    got = _stored(sstore, cfg.replace(broker_role="SLAVE"))
    # every acknowledged send is on the slave as sent; and the slave holds exactly the master's messages
    for key in answers:
        assert got[key][200:] == key.encode()
    assert "oneway" in got and "after" in got
    assert got == want


def test_sync_flush_acknowledged_sends_survive_kill_9(tmp_path):
    store = str(tmp_path / "s")
    with RemotingProcess(store, {"brokerIP1": "127.0.0.1", "flushDiskType": "SYNC_FLUSH",
                                 "mappedFileSizeCommitLog": str(FILE)}, namesrv=False) as server:
        answers = _pipelined(server.address, 4, 200, "f")
        # a prepared transaction message keeps the send executor (its put waits for the flush): answered as before
        tx = Client(server.address)
        half = send_v2(tx, TOPIC, b"half", properties={"TRAN_MSG": "true", "PGROUP": "txg"}, group="txg")
        assert half.code == 0 and half.ext_fields["msgId"]
        tx.close()
        # sends still in flight when the process is killed: those answered before are what must be stored
        late = Client(server.address)
        opaques = [(_request(late, b"late", i % QUEUES, f"late-{i}"), f"late-{i}") for i in range(100)]
        first = late.answer(opaques[0][0])
        server.kill()
    assert {k: a.code for k, a in answers.items() if a.code != 0} == {}
    got = _stored(store, StoreConfig(mapped_file_size_commit_log=FILE))
    for key, a in answers.items():
        assert got[key][200:] == key.encode()
    assert first.code == 0 and "late-0" in got


def test_sigterm_answers_the_sends_waiting_for_a_slave_before_it_closes_their_connection(tmp_path):
    """Sends in flight at SIGTERM are answered (here FLUSH_SLAVE_TIMEOUT: the slave is frozen, its connection open)
    before the server closes their connection; before, the executor's sends outlived a 0.5 s grace and their
    answers were dropped with the connection."""
    ha_port = _free_port()
    common = {"brokerIP1": "127.0.0.1", "mappedFileSizeCommitLog": str(FILE), "haSendHeartbeatInterval": "500",
              "syncFlushTimeout": "2000"}
    with RemotingProcess(str(tmp_path / "m"), {**common, "brokerRole": "SYNC_MASTER", "haListenPort": str(ha_port)},
                         namesrv=False) as master:
        with RemotingProcess(str(tmp_path / "s"), {**common, "brokerRole": "SLAVE", "brokerId": "1",
                                                   "haMasterAddress": f"127.0.0.1:{ha_port}"},
                             namesrv=False) as slave:
            c = Client(master.address)
            wait_for(lambda: c.answer(_request(c, b"probe", 0, "probe")).code == 0, "the slave to connect")
            stop_process(slave.proc.pid)
            try:
                opaques = [_request(c, b"x", i % QUEUES, f"w-{i}") for i in range(20)]
                master.proc.send_signal(signal.SIGTERM)
                codes = [c.answer(o).code for o in opaques]
                assert master.proc.wait(30) == 0
            finally:
                os.kill(slave.proc.pid, signal.SIGCONT)
            assert codes == [FLUSH_SLAVE_TIMEOUT] * 20
            c.close()
