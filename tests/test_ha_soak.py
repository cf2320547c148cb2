"""The replication kill loop (RMQCORE_SOAK=1; RMQCORE_HA_SOAK_ROUNDS, default 20): an rmqcore SYNC_MASTER and an
rmqcore SLAVE under a producer's load (sends over remoting, each acknowledged only once the slave has it), and
SIGKILL of the master or the slave at random moments, each restarted on its store. At the end: no acknowledged
send missing from either side, and once the slave caught up the two commitlogs are byte-identical.

Without a JDK (both sides rmqcore); test_ha_java.py and test_ha_cluster_java.py hold the Java sides."""
from __future__ import annotations

import os
import random
import threading
import time

import pytest

from remoting_util import Client, RemotingProcess, send_v2
from test_ha_slave_sync import broker_ports

pytestmark = pytest.mark.skipif(os.environ.get("RMQCORE_SOAK") != "1", reason="soak run: set RMQCORE_SOAK=1")

FILE = 256 * 1024           # small files: replication crosses file ends (blank records) every few hundred sends
TOPIC = "soak_t"


def _files(store):
    d = os.path.join(store, "commitlog")
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


class Producer(threading.Thread):
    """Sends ``soak-<i>`` bodies one at a time to the master's fixed address, reconnecting after a kill; keeps the
    bodies answered SUCCESS (acknowledged by the slave)."""

    def __init__(self, addr):
        super().__init__(daemon=True)
        self.addr = addr
        self.acked: list[str] = []
        self.refused = 0
        self.stop = threading.Event()
        self.i = 0

    def run(self):
        c = None
        while not self.stop.is_set():
            try:
                if c is None:
                    c = Client(self.addr)
                    c.sock.settimeout(10)
                body = f"soak-{self.i}"
                self.i += 1
                a = send_v2(c, TOPIC, body.encode() + b"." * 300, queue_id=self.i % 2)
                if a.code == 0:
                    self.acked.append(body)
                else:
                    self.refused += 1
                    time.sleep(0.05)
            except (OSError, AssertionError):
                if c is not None:
                    c.close()
                c = None
                time.sleep(0.1)
        if c is not None:
            c.close()


def test_kill_loop_loses_no_acknowledged_send(tmp_path):
    rounds = int(os.environ.get("RMQCORE_HA_SOAK_ROUNDS", "20"))
    rnd = random.Random(int(os.environ.get("RMQCORE_SOAK_SEED", "38")))
    mstore, sstore = str(tmp_path / "m"), str(tmp_path / "s")
    from rmqcore.broker import Broker
    with Broker.open(mstore) as b:
        b.create_topic(TOPIC, 2)
    mport, sport = broker_ports(), broker_ports()
    mconf = {"brokerRole": "SYNC_MASTER", "brokerIP1": "127.0.0.1", "listenPort": str(mport),
             "mappedFileSizeCommitLog": str(FILE), "syncFlushTimeout": "3000", "haSendHeartbeatInterval": "500"}
    sconf = {"brokerRole": "SLAVE", "brokerId": "1", "brokerIP1": "127.0.0.1", "listenPort": str(sport),
             "haMasterAddress": f"127.0.0.1:{mport + 1}", "mappedFileSizeCommitLog": str(FILE),
             "haSendHeartbeatInterval": "500"}

    def master():
        return RemotingProcess(mstore, mconf, args=("--remoting", f"127.0.0.1:{mport}"), namesrv=False)

    def slave():
        return RemotingProcess(sstore, sconf, args=("--remoting", f"127.0.0.1:{sport}"), namesrv=False)

    m, s = master(), slave()
    prod = Producer(m.address)
    prod.start()
    kills = {"master": 0, "slave": 0}
    try:
        for _ in range(rounds):
            before = len(prod.acked)
            deadline = time.monotonic() + 60
            while len(prod.acked) < before + 20:          # load flows (the slave acknowledges) before each kill
                assert time.monotonic() < deadline, f"no acknowledged send in 60 s (refused {prod.refused})"
                time.sleep(0.05)
            time.sleep(rnd.uniform(0, 0.5))
            if rnd.random() < 0.5:
                m.kill()
                kills["master"] += 1
                m = master()
            else:
                s.kill()
                kills["slave"] += 1
                s = slave()
        time.sleep(1.0)
    finally:
        prod.stop.set()
        prod.join(30)
    try:
        # the slave catches up with everything the master stored (refused sends included)
        mc, sc = Client(m.address), Client(s.address)
        want = {q: mc.call(30, {"topic": TOPIC, "queueId": str(q)}).ext_fields["offset"] for q in (0, 1)}
        deadline = time.monotonic() + 60
        while {q: sc.call(30, {"topic": TOPIC, "queueId": str(q)}).ext_fields["offset"] for q in (0, 1)} != want:
            assert time.monotonic() < deadline, "the slave did not catch up"
            time.sleep(0.5)
        mc.close()
        sc.close()
        assert m.terminate() == 0
        time.sleep(1.0)
        assert s.terminate() == 0
    finally:
        for p in (m, s):
            if p.alive():
                p.kill()
    m_files, s_files = _files(mstore), _files(sstore)
    assert m_files.keys() == s_files.keys()
    for name in m_files:
        assert m_files[name] == s_files[name], f"commitlog/{name} differs"
    from rmqcore import MessageStore, StoreConfig
    from store_util import queue_messages
    cfg = StoreConfig(mapped_file_size_commit_log=FILE)
    for store, role in ((mstore, "SYNC_MASTER"), (sstore, "SLAVE")):
        with MessageStore.open(store, cfg.replace(broker_role=role)) as st:
            bodies = {bytes(x.body).split(b".")[0].decode() for q in (0, 1) for x in queue_messages(st, TOPIC, q)}
        missing = [b for b in prod.acked if b not in bodies]
        assert not missing, f"{role}: {len(missing)} acknowledged sends missing, e.g. {missing[:5]} (kills {kills})"
    assert kills["master"] and kills["slave"] and len(prod.acked) >= rounds * 20
