"""A slave's copy of its master's metadata (SlaveSynchronize, rmqcore/remoting/slave_synchronize.py) between two
`rmqcore serve --remoting` processes, and what a slave and a master answer over remoting beside replication: the
four metadata answers (21, 43, 45, 201) in the JSON a Java slave reads, a slave's refusal of sends, its pulls, and
a master's suggestWhichBrokerId. No JDK needed (tests/test_ha_cluster_java.py has the Java sides)."""
from __future__ import annotations

import os
import socket
import time

import pytest

from rmqcore import fastjson
from remoting_util import Client, RemotingProcess, pull, send_v2, stop_process, wait_for

TOPIC = "sync_t"
GROUP = "sync_g"


def broker_ports() -> int:
    """A listen port P with P - 2 (VIP) and P + 1 (HA) free as well, as a Java broker binds them."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p < 1026 or p > 65000:
            continue
        ok = True
        for q in (p - 2, p + 1):
            with socket.socket() as t:
                try:
                    t.bind(("127.0.0.1", q))
                except OSError:
                    ok = False
        if ok:
            return p
    raise RuntimeError("no free port with its neighbours free")


def _prepare_master(store: str) -> None:
    from rmqcore.broker import Broker, SubscriptionGroupConfig
    with Broker.open(store) as b:
        b.create_topic(TOPIC, 2)
        b.update_group(SubscriptionGroupConfig(GROUP, retry_max_times=7, which_broker_when_consume_slowly=1))
        b.commit_offset(GROUP, TOPIC, 0, 0)
        b.commit_offset(GROUP, TOPIC, 1, 0)
    # the delay levels' progress, as a master's schedule service keeps it
    with open(os.path.join(store, "config", "delayOffset.json"), "w") as f:
        f.write('{"offsetTable":{1:3,4:17}}')


def _master(store: str, port: int, extra: dict | None = None) -> RemotingProcess:
    conf = {"brokerRole": "ASYNC_MASTER", "brokerName": "broker-s", "brokerIP1": "127.0.0.1",
            "listenPort": str(port), **(extra or {})}
    return RemotingProcess(store, conf, args=("--remoting", f"127.0.0.1:{port}"), namesrv=False)


def _slave(store: str, master_port: int) -> RemotingProcess:
    conf = {"brokerRole": "SLAVE", "brokerId": "1", "brokerName": "broker-s", "brokerIP1": "127.0.0.1",
            "haMasterAddress": f"127.0.0.1:{master_port + 1}", "haSendHeartbeatInterval": "500"}
    return RemotingProcess(store, conf, namesrv=False)


def _config(store: str, name: str):
    path = os.path.join(store, "config", name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return fastjson.loads(f.read())


_wait = wait_for


def test_master_answers_the_four_metadata_pulls_as_fastjson(tmp_path):
    mstore = str(tmp_path / "m")
    _prepare_master(mstore)
    port = broker_ports()
    with _master(mstore, port) as m:
        # the topic table on the listen port and on the VIP port (where a Java slave asks for it)
        for addr in (m.address, f"127.0.0.1:{port - 2}"):
            c = Client(addr)
            a = c.call(21)
            assert a.code == 0
            doc = fastjson.loads(a.body.decode())
            assert doc["topicConfigTable"][TOPIC]["readQueueNums"] == 2
            c.close()
        c = Client(m.address)
        a1, a2 = fastjson.loads(c.call(21).body.decode()), fastjson.loads(c.call(21).body.decode())
        # a stable data version: a slave replaces its table only when the master's changed
        assert a1["dataVersion"] == a2["dataVersion"] == _config(mstore, "topics.json")["dataVersion"]
        offsets = c.call(43)
        assert offsets.code == 0
        assert fastjson.loads(offsets.body.decode())["offsetTable"] == {f"{TOPIC}@{GROUP}": {0: 0, 1: 0}}
        delay = c.call(45)
        # compact, bare integer keys, as ScheduleMessageService.encode() writes it
        assert delay.code == 0 and delay.body == b'{"offsetTable":{1:3,4:17}}'
        groups = fastjson.loads(c.call(201).body.decode())
        assert groups["subscriptionGroupTable"][GROUP]["retryMaxTimes"] == 7
        assert "dataVersion" in groups
        c.close()


def test_rmqcore_slave_copies_its_masters_metadata_refuses_sends_and_serves_pulls(tmp_path):
    mstore, sstore = str(tmp_path / "m"), str(tmp_path / "s")
    _prepare_master(mstore)
    port = broker_ports()
    with _master(mstore, port) as m, _slave(sstore, port) as s:
        # at start: the master's topics, groups, offsets and delay offsets in the slave's config files
        _wait(lambda: (_config(sstore, "topics.json") or {}).get("topicConfigTable", {}).get(TOPIC), "topics")
        _wait(lambda: GROUP in (_config(sstore, "subscriptionGroup.json") or {}).get("subscriptionGroupTable", {}),
              "groups")
        _wait(lambda: (_config(sstore, "delayOffset.json") or {}).get("offsetTable") == {1: 3, 4: 17},
              "delay offsets")
        assert _config(sstore, "topics.json")["dataVersion"] == _config(mstore, "topics.json")["dataVersion"]
        assert _config(sstore, "subscriptionGroup.json")["subscriptionGroupTable"][GROUP]["retryMaxTimes"] == 7

        mc, sc = Client(m.address), Client(s.address)
        for i in range(5):
            assert send_v2(mc, TOPIC, f"m{i}".encode(), queue_id=0).code == 0
        # a consumer's progress on the master, then a new topic: the slave has both within its 10 s period
        assert mc.call(15, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": "3"}).code == 0
        a = mc.call(17, {"topic": "sync_new", "defaultTopic": "TBW102", "readQueueNums": "3", "writeQueueNums": "3",
                         "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})
        assert a.code == 0
        _wait(lambda: (_config(sstore, "topics.json") or {}).get("topicConfigTable", {}).get("sync_new"),
              "the new topic", 25)
        _wait(lambda: (_config(sstore, "consumerOffset.json") or {}).get("offsetTable", {})
              .get(f"{TOPIC}@{GROUP}", {}).get(0) == 3, "the committed offset", 25)

        # a slave refuses sends as RocketMQ's: SERVICE_NOT_AVAILABLE with SendMessageProcessor's remark
        a = send_v2(sc, TOPIC, b"to-slave")
        assert a.code == 14
        assert a.remark.startswith("service not available now. It may be caused by one of the following reasons: "
                                   "the broker's disk is full [CL: ") and "messages are put to the slave" in a.remark

        # ... and serves pulls of what it replicated (suggesting the master: slaveReadEnable is off)
        def pulled():
            r = sc.answer(pull(sc, GROUP, TOPIC, 0, 0))
            return r if r.code == 0 else None
        r = _wait(pulled, "the replicated messages on the slave")
        assert r.ext_fields["suggestWhichBrokerId"] == "0" and r.ext_fields["nextBeginOffset"] == "5"
        # a slave does not move a consumer's offset past what it holds (offsetCheckInSlave off): asked beyond its
        # end it answers PULL_RETRY_IMMEDIATELY and the offset asked for, where a master answers PULL_OFFSET_MOVED
        # (to the queue's min offset when that is 0, DefaultMessageStore.getMessage's OFFSET_OVERFLOW_BADLY)
        r = sc.answer(pull(sc, GROUP, TOPIC, 0, 50))
        assert r.code == 20 and r.ext_fields["nextBeginOffset"] == "50", r
        r = mc.answer(pull(mc, GROUP, TOPIC, 0, 50))
        assert r.code == 21 and r.ext_fields["nextBeginOffset"] == "0", r
        # the commit flag of a pull is not kept by a slave (PullMessageProcessor's storeOffsetEnable)
        ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "1", "queueOffset": "0", "maxMsgNums": "32",
               "sysFlag": "1", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"}
        sc.call(11, ext)
        got = sc.call(14, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "1"})
        assert got.ext_fields.get("offset") == "0"
        mc.close()
        sc.close()


def test_a_slave_copies_nothing_from_a_guessed_address_of_another_broker_group(tmp_path):
    """Without a name server the slave guesses its master's remoting port (haMasterAddress's port - 1); a broker
    there whose topic table lacks this slave's broker-name topic is another group's: nothing is copied."""
    mstore, sstore = str(tmp_path / "m"), str(tmp_path / "s")
    _prepare_master(mstore)
    port = broker_ports()
    conf = {"brokerRole": "SLAVE", "brokerId": "1", "brokerName": "broker-other", "brokerIP1": "127.0.0.1",
            "haMasterAddress": f"127.0.0.1:{port + 1}"}
    with _master(mstore, port), RemotingProcess(sstore, conf, namesrv=False) as s:
        time.sleep(3)                      # the first pass runs at start
        s.terminate()
    topics = (_config(sstore, "topics.json") or {}).get("topicConfigTable", {})
    assert TOPIC not in topics
    assert GROUP not in (_config(sstore, "subscriptionGroup.json") or {}).get("subscriptionGroupTable", {})


def test_master_suggests_the_slave_to_a_consumer_reading_from_disk(tmp_path):
    """PullMessageProcessor with slaveReadEnable: a pull whose last record lies more than
    accessMessageInMemoryMaxRatio of memory behind the log's end is told the group's whichBrokerWhenConsumeSlowly
    (1); without slaveReadEnable, always the master (0). A ratio of 0 puts every record 'on disk' (even the newest lies its size behind the end)."""
    mstore = str(tmp_path / "m")
    _prepare_master(mstore)
    for extra, want in (({"slaveReadEnable": "true", "accessMessageInMemoryMaxRatio": "0"}, ("1", "1")),
                        ({"slaveReadEnable": "true"}, ("0", "0")),
                        ({"accessMessageInMemoryMaxRatio": "0"}, ("0", "0"))):
        port = broker_ports()
        with _master(mstore, port, extra) as m:
            c = Client(m.address)
            base = int(c.call(30, {"topic": TOPIC, "queueId": "1"}).ext_fields["offset"])
            for i in range(3):
                assert send_v2(c, TOPIC, b"x" * 100, queue_id=1).code == 0
            r = c.answer(pull(c, GROUP, TOPIC, 1, base))
            assert r.code == 0
            r2 = c.answer(pull(c, GROUP, TOPIC, 1, base + 2))
            assert (r.ext_fields["suggestWhichBrokerId"], r2.ext_fields["suggestWhichBrokerId"]) == want, extra
            c.close()
            m.terminate()


def _send_until(c, code, body=b"x" * 1000, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        a = send_v2(c, TOPIC, body, queue_id=0)
        if a.code == code:
            return a
        assert time.monotonic() < deadline, f"sends answer {a.code} {a.remark}, not {code}"
        time.sleep(0.3)


def test_sync_master_answers_as_rocketmq_with_a_slow_and_a_stopped_slave(tmp_path):
    """SYNC_MASTER (CommitLog.submitReplicaRequest, GroupTransferService): a send is acknowledged once the slave
    has it; with the slave stopped (SIGSTOP) the next send waits syncFlushTimeout and answers FLUSH_SLAVE_TIMEOUT
    (12); once the master is haSlaveFallbehindMax ahead of what the slave acknowledged, SLAVE_NOT_AVAILABLE (11) at
    once, over remoting and gRPC (HA_NOT_AVAILABLE, the proxy's mapping); each stored all the same, and the slave,
    resumed, has them all."""
    import signal as _signal
    pytest.importorskip("rocketmq")
    pytest.importorskip("grpc")
    from rocketmq.v5.exception import InternalErrorException
    from serve_util import config, message
    from rocketmq import Producer
    mstore, sstore = str(tmp_path / "m"), str(tmp_path / "s")
    _prepare_master(mstore)
    port = broker_ports()
    with RemotingProcess(mstore, {"brokerRole": "SYNC_MASTER", "brokerName": "broker-s", "brokerIP1": "127.0.0.1",
                                  "listenPort": str(port), "syncFlushTimeout": "1500",
                                  "haSlaveFallbehindMax": "1500"},
                         args=("--remoting", f"127.0.0.1:{port}", "--listen", "127.0.0.1:0"), namesrv=False) as m, \
            _slave(sstore, port) as s:
        c = Client(m.address)
        _send_until(c, 0)                          # the slave connected and acknowledges
        p = Producer(config(m.lines["listening"]), (TOPIC,))
        p.startup()
        try:
            p.send(message(TOPIC, b"grpc-ok"))
            stop_process(s.proc.pid)
            try:
                t0 = time.monotonic()
                a = send_v2(c, TOPIC, b"y" * 1000, queue_id=0)
                assert a.code == 12 and time.monotonic() - t0 >= 1.4, a     # FLUSH_SLAVE_TIMEOUT
                assert int(a.ext_fields["queueOffset"]) > 0                 # stored
                a = send_v2(c, TOPIC, b"z" * 1000, queue_id=0)
                assert a.code == 11, a                                     # SLAVE_NOT_AVAILABLE
                with pytest.raises(InternalErrorException, match="no slave is available"):
                    p.send(message(TOPIC, b"grpc-behind"))
            finally:
                os.kill(s.proc.pid, _signal.SIGCONT)
            _send_until(c, 0)                      # caught up: acknowledged again
            p.send(message(TOPIC, b"grpc-again"))
        finally:
            p.shutdown()
        # everything the master stored, the slave has (its queue ends where the master's does)
        want = c.call(30, {"topic": TOPIC, "queueId": "0"}).ext_fields["offset"]
        sc = Client(s.address)
        _wait(lambda: sc.call(30, {"topic": TOPIC, "queueId": "0"}).ext_fields["offset"] == want,
              "the slave's queue", 20)
        c.close()
        sc.close()
