"""rmqcore in a RocketMQ 4.9.7 master/slave pair beside real Java brokers, a Java name server and the Java client:

- a Java SLAVE of an rmqcore master copies rmqcore's topics, consumer offsets, delay offsets and subscription
  groups into its config files (its SlaveSynchronize asks rmqcore's remoting port, the topic table on the VIP port);
- an rmqcore SLAVE of a Java master copies the Java master's (rmqcore's SlaveSynchronize);
- a Java push consumer reads from the rmqcore slave once the Java master is killed, from the offset its group
  had committed on the master (which the slave copied);
- a Java producer's sends to an rmqcore SYNC_MASTER with a Java slave: SEND_OK once the slave has them,
  FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE while the slave is stopped.

The Java slave learns its master's remoting address only from its name server registration
(RegisterBrokerResult.masterAddr); rmqcore's own registration with name servers is not part of this file, so the
test registers the rmqcore broker itself (REGISTER_BROKER on a connection it keeps open, as a broker does).

Needs a JDK and the Java broker harness (tests/java_util.py); skipped, saying which is missing, otherwise.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest

from java_util import build_dir, ensure_build
from rmqcore import fastjson
from remoting_util import Client, RemotingProcess, send_v2, stop_process, wait_for
from test_ha_slave_sync import broker_ports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE = 1024 * 1024
JFLAGS = ["-XX:+UseG1GC", "-Dfile.encoding=UTF-8", "--add-opens", "java.base/java.nio=ALL-UNNAMED",
          "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
          "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/java.lang=ALL-UNNAMED",
          "--add-opens", "java.base/java.util=ALL-UNNAMED", "--add-exports", "java.base/sun.security.x509=ALL-UNNAMED",
          "-Drocketmq.bind.addr=127.0.0.1"]
TOPIC, GROUP = "hac_t", "hac_g"


@pytest.fixture(scope="module")
def jvm(tmp_path_factory):
    """The classpath, with HaConsumer.java compiled onto it."""
    build = ensure_build()
    cp = os.path.join(build, "classes") + ":" + open(os.path.join(build, "cp.txt")).read().strip()
    classes = str(tmp_path_factory.mktemp("ha-java-classes"))
    r = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "-d", classes, "-cp", cp,
                        os.path.join(ROOT, "tests", "java", "HaConsumer.java"),
                        os.path.join(ROOT, "tests", "java", "HaProducer.java")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return f"{classes}:{cp}"


class JavaProcess:
    """NamesrvStartup or BrokerStartup in a child process, its output in RUN_DIR/out.log."""

    def __init__(self, cp: str, run_dir: str, main: str, conf: dict, heap: str = "256m"):
        self.run_dir = run_dir
        home = os.path.join(run_dir, "home")
        os.makedirs(os.path.join(home, "conf"), exist_ok=True)
        for f in ("logback_broker.xml", "logback_namesrv.xml"):
            shutil.copy(os.path.join(build_dir(), "src", "distribution", "conf", f), os.path.join(home, "conf"))
        path = os.path.join(home, "conf", "server.conf")
        with open(path, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in conf.items()))
        self.log = os.path.join(run_dir, "out.log")
        out = open(self.log, "w")
        self.proc = subprocess.Popen(["java", f"-Xms{heap}", f"-Xmx{heap}", "-Xmn128m", "-cp", cp, *JFLAGS,
                                      f"-Duser.home={run_dir}", main, "-c", path], stdout=out,
                                     stderr=subprocess.STDOUT, env={**os.environ, "ROCKETMQ_HOME": home,
                                                                    "LC_ALL": "C.UTF-8"})
        out.close()
        deadline = time.monotonic() + 120
        while "boot success" not in open(self.log).read():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{main} did not start: " + open(self.log).read()[-3000:])
            time.sleep(0.3)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def namesrv(cp, run_dir, port) -> JavaProcess:
    return JavaProcess(cp, run_dir, "org.apache.rocketmq.namesrv.NamesrvStartup",
                       {"listenPort": port, "kvConfigPath": f"{run_dir}/kv.json",
                        "configStorePath": f"{run_dir}/namesrv.properties"})


def java_broker(cp, run_dir, ns_port, port, role, broker_id, extra=None) -> JavaProcess:
    conf = {"brokerClusterName": "HaCluster", "brokerName": "broker-a", "brokerId": broker_id, "brokerRole": role,
            "namesrvAddr": f"127.0.0.1:{ns_port}", "brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1",
            "listenPort": port, "storePathRootDir": f"{run_dir}/store",
            "storePathCommitLog": f"{run_dir}/store/commitlog", "mappedFileSizeCommitLog": FILE,
            "haSendHeartbeatInterval": 1000, "autoCreateTopicEnable": "true",
            # a shared 2-core machine: the default 200 ms in the send queue refuses sends (TIMEOUT_CLEAN_QUEUE)
            "waitTimeMillsInSendQueue": 5000, **(extra or {})}
    if ns_port is None:
        del conf["namesrvAddr"]            # no name server: haMasterAddress says where the master is
    return JavaProcess(cp, run_dir, "org.apache.rocketmq.broker.BrokerStartup", conf)


class Registration:
    """A broker's registration with a name server, made by the test for an rmqcore broker (REGISTER_BROKER, 103,
    with RegisterBrokerBody's JSON; bodyCrc32 0 skips the name server's check), renewed every 20 s on the same
    connection, which the name server ties the registration to."""

    def __init__(self, ns_addr, broker_addr, broker_id, ha_addr, topics_body: bytes):
        self.c = Client(ns_addr)
        self.args = (broker_addr, broker_id, ha_addr, topics_body)
        self.lock = threading.Lock()
        self.answer = self.register()
        self.stopped = threading.Event()
        self.t = threading.Thread(target=self._renew, daemon=True)
        self.t.start()

    def register(self):
        broker_addr, broker_id, ha_addr, topics_body = self.args
        body = b'{"filterServerList":[],"topicConfigSerializeWrapper":' + topics_body + b"}"
        ext = {"brokerName": "broker-a", "brokerAddr": broker_addr, "clusterName": "HaCluster",
               "haServerAddr": ha_addr, "brokerId": str(broker_id), "compressed": "false", "bodyCrc32": "0"}
        with self.lock:
            a = self.c.call(103, ext, body)
        assert a.code == 0, a
        return a

    def _renew(self):
        while not self.stopped.wait(20):
            try:
                self.register()
            except Exception:
                return

    def close(self):
        self.stopped.set()
        self.c.close()


def _config(path):
    if not os.path.exists(path):
        return {}
    try:
        return fastjson.loads(open(path).read()) or {}
    except Exception:
        return {}           # caught mid-write


def _wait(cond, what, timeout=60.0):
    return wait_for(cond, what, timeout, interval=0.5)


def _prepare(store):
    from rmqcore.broker import Broker, SubscriptionGroupConfig
    with Broker.open(store) as b:
        b.create_topic(TOPIC, 2)
        b.update_group(SubscriptionGroupConfig(GROUP, retry_max_times=5))
        b.commit_offset(GROUP, TOPIC, 0, 0)
    with open(os.path.join(store, "config", "delayOffset.json"), "w") as f:
        f.write('{"offsetTable":{2:9}}')


def test_java_slave_copies_an_rmqcore_masters_metadata(jvm, tmp_path):
    ns_port, mport, sport = broker_ports(), broker_ports(), broker_ports()
    ns = namesrv(jvm, str(tmp_path / "ns"), ns_port)
    mstore = str(tmp_path / "master")
    _prepare(mstore)
    master = slave = reg = None
    try:
        master = RemotingProcess(mstore, {"brokerRole": "ASYNC_MASTER", "brokerName": "broker-a",
                                          "brokerClusterName": "HaCluster", "brokerIP1": "127.0.0.1",
                                          "listenPort": str(mport), "mappedFileSizeCommitLog": str(FILE)},
                                 args=("--remoting", f"127.0.0.1:{mport}"), namesrv=False)
        c = Client(master.address)
        for i in range(20):
            assert send_v2(c, TOPIC, f"m{i}".encode(), queue_id=i % 2).code == 0
        assert c.call(15, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "1", "commitOffset": "4"}).code == 0
        reg = Registration(f"127.0.0.1:{ns_port}", master.address, 0, f"127.0.0.1:{mport + 1}", c.call(21).body)
        sdir = str(tmp_path / "jslave")
        slave = java_broker(jvm, sdir, ns_port, sport, "SLAVE", 1)
        cfg = os.path.join(sdir, "store", "config")
        # SlaveSynchronize's first pass comes 3 s after start, then every 10 s; the broker persists at once
        topics = _wait(lambda: _config(os.path.join(cfg, "topics.json")).get("topicConfigTable", {}).get(TOPIC),
                       "the Java slave's topics.json")
        assert topics["readQueueNums"] == 2 and topics["writeQueueNums"] == 2
        assert _config(os.path.join(cfg, "topics.json"))["dataVersion"] == \
            fastjson.loads(c.call(21).body.decode())["dataVersion"]
        _wait(lambda: _config(os.path.join(cfg, "consumerOffset.json")).get("offsetTable", {})
              .get(f"{TOPIC}@{GROUP}") == {0: 0, 1: 4}, "the Java slave's consumerOffset.json")
        _wait(lambda: _config(os.path.join(cfg, "delayOffset.json")).get("offsetTable") == {2: 9},
              "the Java slave's delayOffset.json")
        groups = _wait(lambda: _config(os.path.join(cfg, "subscriptionGroup.json")).get("subscriptionGroupTable", {})
                       .get(GROUP), "the Java slave's subscriptionGroup.json")
        assert groups["retryMaxTimes"] == 5
        # a change on the master reaches the Java slave at its next pass
        a = c.call(17, {"topic": "hac_new", "defaultTopic": "TBW102", "readQueueNums": "3", "writeQueueNums": "3",
                        "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})
        assert a.code == 0
        _wait(lambda: _config(os.path.join(cfg, "topics.json")).get("topicConfigTable", {}).get("hac_new"),
              "the new topic on the Java slave", 30)
        # and the commitlog it replicated is rmqcore's, byte for byte, as far as it goes
        mlog = os.path.join(mstore, "commitlog")
        name = sorted(os.listdir(mlog))[0]
        want = open(os.path.join(mlog, name), "rb").read()
        want = want[:len(want.rstrip(b"\0"))]
        _wait(lambda: open(os.path.join(sdir, "store", "commitlog", name), "rb").read()[:len(want)] == want
              if os.path.exists(os.path.join(sdir, "store", "commitlog", name)) else False, "the replicated log")
        c.close()
    finally:
        for p in (slave, ns):
            if p is not None:
                p.kill()
        if reg is not None:
            reg.close()
        if master is not None:
            master.kill()


def _wait_rmqcore_slave_topic(sstore, topic):
    return _wait(lambda: _config(os.path.join(sstore, "config", "topics.json")).get("topicConfigTable", {})
                 .get(topic), f"{topic} on the rmqcore slave")


def test_rmqcore_slave_copies_a_java_masters_metadata_and_serves_its_consumers_when_it_is_down(jvm, tmp_path):
    ns_port, mport = broker_ports(), broker_ports()
    ns = namesrv(jvm, str(tmp_path / "ns"), ns_port)
    mdir = str(tmp_path / "jmaster")
    sstore = str(tmp_path / "slave")
    master = slave = reg = None
    n = 200
    try:
        master = java_broker(jvm, mdir, ns_port, mport, "ASYNC_MASTER", 0)
        slave = RemotingProcess(sstore, {"brokerRole": "SLAVE", "brokerId": "1", "brokerName": "broker-a",
                                         "brokerClusterName": "HaCluster", "brokerIP1": "127.0.0.1",
                                         "mappedFileSizeCommitLog": str(FILE),
                                         "haMasterAddress": f"127.0.0.1:{mport + 1}",
                                         "haSendHeartbeatInterval": "1000"}, namesrv=False)
        reg = Registration(f"127.0.0.1:{ns_port}", slave.address, 1, "", b'{"topicConfigTable":{}}')
        mc = Client(f"127.0.0.1:{mport}")
        # metadata made on the Java master: a topic, a group, an offset, a delay level's progress
        assert mc.call(17, {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2",
                            "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0",
                            "order": "false"}).code == 0
        group_body = json.dumps({"groupName": GROUP, "consumeEnable": True, "consumeFromMinEnable": True,
                                 "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 6,
                                 "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
                                 "notifyConsumerIdsChangedEnable": True}).encode()
        assert mc.call(200, {}, group_body).code == 0
        assert send_v2(mc, TOPIC, b"delayed", properties={"DELAY": "1"}).code == 0
        _wait_rmqcore_slave_topic(sstore, TOPIC)
        _wait(lambda: (_config(os.path.join(sstore, "config", "subscriptionGroup.json"))
                       .get("subscriptionGroupTable", {}).get(GROUP) or {}).get("retryMaxTimes") == 6,
              "the group on the rmqcore slave")
        # the level-1 delivery (1 s) moves the master's delay progress; the slave's file follows
        _wait(lambda: (_config(os.path.join(sstore, "config", "delayOffset.json")).get("offsetTable") or {})
              .get(1) == 1, "the delay offsets on the rmqcore slave", 40)
        assert _config(os.path.join(sstore, "config", "topics.json"))["dataVersion"] == \
            fastjson.loads(Client(f"127.0.0.1:{mport}").call(21).body.decode())["dataVersion"]

        # a Java producer's messages, half consumed through the master by a push consumer group
        env_java = ["java", "-Xmx256m", "-Dfile.encoding=UTF-8", "--add-opens", "java.base/java.nio=ALL-UNNAMED",
                    f"-Duser.home={tmp_path}", f"-Drocketmq.client.logRoot={tmp_path}/clogs", "-cp", jvm]
        # (sync sends: a oneway send the busy Java broker refuses is lost without a word)
        r = subprocess.run([*env_java, "HaProducer", f"127.0.0.1:{ns_port}", TOPIC, str(n), "0", "body"],
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0 and r.stdout.count("STATUS SEND_OK") == n, r.stdout[-3000:]
        sent = {f"body-{i}" for i in range(n)} | {"delayed"}

        def consume(want, seen=()):
            seen_file = str(tmp_path / "seen.txt")
            with open(seen_file, "w") as f:
                f.write("".join(f"{b}\n" for b in seen))
            r = subprocess.run([*env_java, "HaConsumer", f"127.0.0.1:{ns_port}", TOPIC, "hac_push", str(want),
                                seen_file], capture_output=True, text=True, timeout=180)
            lines = r.stdout.splitlines()
            got = {ln[4:] for ln in lines if ln.startswith("GOT ")} | set(seen)
            assert r.returncode == 0 and "OK" in r.stdout, (sorted(sent - got), r.stdout[-1500:])
            return ({ln[4:] for ln in lines if ln.startswith("GOT ")},
                    {ln[6:] for ln in lines if ln.startswith("AGAIN ")})
        first, _ = consume(n // 2)
        assert first <= sent and len(first) < len(sent)
        # the group's offsets reach the slave (its next metadata pass), and so do all the records
        _wait(lambda: sum((_config(os.path.join(sstore, "config", "consumerOffset.json")).get("offsetTable") or {})
                          .get(f"{TOPIC}@hac_push", {}).values()) > 0, "the push group's offsets on the slave", 30)
        time.sleep(11)          # one more pass: the offsets the consumer's shutdown committed last
        master.kill()           # SIGKILL: the name server drops it with its connection; the slave stays routed
        master = None
        rest, again = consume(len(sent) - len(first), first)
        # everything is consumed across the two, from the slave the second time; of what the first took, only what
        # its last commit did not cover comes again (it started at the offsets the slave copied, not at 0)
        assert first | rest == sent, sorted(sent - (first | rest))[:10]
        assert len(again) < len(first) // 2, f"{len(again)} of the first {len(first)} consumed again"
        mc.close()
    finally:
        for p in (master, ns):
            if p is not None:
                p.kill()
        if reg is not None:
            reg.close()
        if slave is not None:
            slave.kill()


def test_java_producer_to_an_rmqcore_sync_master_of_a_java_slave(jvm, tmp_path):
    import signal as _signal
    mport, sport = broker_ports(), broker_ports()
    mstore = str(tmp_path / "master")
    _prepare(mstore)
    java_cmd = ["java", "-Xmx128m", "-Dfile.encoding=UTF-8", "--add-opens", "java.base/java.nio=ALL-UNNAMED",
                f"-Duser.home={tmp_path}", f"-Drocketmq.client.logRoot={tmp_path}/clogs", "-cp", jvm]
    master = slave = None
    try:
        master = RemotingProcess(mstore, {"brokerRole": "SYNC_MASTER", "brokerName": "broker-a",
                                          "brokerClusterName": "HaCluster", "brokerIP1": "127.0.0.1",
                                          "listenPort": str(mport), "mappedFileSizeCommitLog": str(FILE),
                                          "syncFlushTimeout": "2000", "haSlaveFallbehindMax": "1500"},
                                 args=("--remoting", f"127.0.0.1:{mport}"))
        slave = java_broker(jvm, str(tmp_path / "jslave"), None, sport, "SLAVE", 1,
                            {"haMasterAddress": f"127.0.0.1:{mport + 1}"})

        def produce(n, until_ok=False):
            r = subprocess.run([*java_cmd, "HaProducer", master.namesrv, TOPIC, str(n), "1000"],
                               capture_output=True, text=True, timeout=180)
            if until_ok and r.returncode != 0:
                return None                 # not yet (a loaded machine's first send may time out): again
            assert r.returncode == 0 and "OK" in r.stdout, r.stdout[-3000:]
            return [ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("STATUS ")]
        _wait(lambda: produce(1, True) == ["SEND_OK"], "the Java slave to acknowledge", 90)
        assert produce(5) == ["SEND_OK"] * 5
        stop_process(slave.proc.pid)
        try:
            # the first waits syncFlushTimeout for the stopped slave; then the master is more than
            # haSlaveFallbehindMax ahead of its acknowledgement: refused at once
            assert produce(2) == ["FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"]
        finally:
            os.kill(slave.proc.pid, _signal.SIGCONT)
        _wait(lambda: produce(1, True) == ["SEND_OK"], "the Java slave to catch up", 90)
    finally:
        if slave is not None:
            slave.kill()
        if master is not None:
            master.kill()
