"""rmqcore in a mixed RocketMQ 4.9.7 cluster: the real Java name server and a Java broker `broker-a` (the harness's
run.sh), and `rmqcore serve --remoting` as `broker-b` registered with that name server (namesrvAddr in its
broker.conf). One topic on both (mqadmin updateTopic -c CLUSTER); the Java producer's sends spread over both
brokers, a push-consumer group consumes every message from both with its offsets kept on each, mqadmin's
clusterList / topicRoute / topicStatus / consumerProgress name rmqcore as a broker of the cluster,
wipeWritePerm/addWritePerm drain and re-admit it, and at SIGTERM it unregisters. Then mqadmin's
wipeWritePerm/addWritePerm against rmqcore's embedded name server.

Needs a JDK and the Java harness (tests/java_util.py); skipped, saying which is missing, otherwise."""
from __future__ import annotations

import os
import socket
import subprocess
from collections import Counter

import pytest

from rmqcore import fastjson
from java_util import build_dir, harness, java_client
from remoting_util import Client, RemotingProcess

CLUSTER = "BenchCluster"              # the harness's broker.conf (run.sh): BenchCluster / broker-a
TOPIC = "mixed"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    return java_client(str(tmp_path_factory.mktemp("cluster-java")))


def mqadmin(java, *args, tolerate_traces: bool = False) -> str:
    r = subprocess.run([*java, "org.apache.rocketmq.tools.command.MQAdminStartup", *args], capture_output=True,
                       text=True, timeout=120)
    out = "\n".join(ln for ln in r.stdout.splitlines() if " INFO " not in ln)
    assert r.returncode == 0, out + r.stderr[-2000:]
    if not tolerate_traces:
        assert "Exception" not in out + r.stderr, out + r.stderr[-2000:]
    return out


def scenario(java, ns, *args) -> list[str]:
    r = subprocess.run([*java, "ClusterScenario", ns, *args], capture_output=True, text=True, timeout=180)
    lines = [ln for ln in r.stdout.splitlines() if " INFO " not in ln and " WARN " not in ln]
    assert r.returncode == 0 and "OK" in lines, r.stdout[-3000:] + r.stderr[-2000:]
    return lines


def _call(addr: str, code: int, ext=None):
    c = Client(addr)
    try:
        return c.call(code, ext or {})
    finally:
        c.close()


def _json(body: bytes):
    return fastjson.loads(body.decode())         # the Java name server writes brokerAddrs' ids bare: {0:"..."}


def _route(ns: str, topic: str):
    a = _call(ns, 105, {"topic": topic})
    return _json(a.body) if a.code == 0 else None


def _perms(ns: str, topic: str) -> dict[str, int]:
    route = _route(ns, topic)
    return {} if route is None else {q["brokerName"]: q["perm"] for q in route["queueDatas"]}


def _wait(what, predicate, deadline_s: float = 60):
    import time
    end = time.monotonic() + deadline_s
    while not (value := predicate()):
        assert time.monotonic() < end, f"still not {what}"
        time.sleep(0.2)
    return value


def _sends(lines) -> dict[str, str]:
    return {ln.split()[1]: ln.split()[2] for ln in lines if ln.startswith("SENT ")}


@pytest.fixture(scope="module")
def cluster(java, tmp_path_factory):
    """(name server address, Java broker-a's address, the rmqcore broker-b process)."""
    run_dir = str(tmp_path_factory.mktemp("jcluster"))
    ns_port, bp = _free_port(), _free_port()
    env = {**os.environ, "BUILD": build_dir(), "RUN_DIR": run_dir, "NS_PORT": str(ns_port),
           "BROKER_PORT": str(bp), "COMMITLOG_SIZE": str(16 * 1024 * 1024), "SERVER_HEAP": "256m"}
    sh = os.path.join(harness(), "run.sh")
    r = subprocess.run(["bash", sh, "start"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    ns = f"127.0.0.1:{ns_port}"
    b = None
    try:
        store = str(tmp_path_factory.mktemp("rmqcore") / "broker-b")
        b = RemotingProcess(store, {"brokerClusterName": CLUSTER, "brokerName": "broker-b", "namesrvAddr": ns},
                            namesrv=False)
        _wait("broker-b registered", lambda: "broker-b" in _json(_call(ns, 106).body)["brokerAddrTable"])
        yield ns, f"127.0.0.1:{bp}", b
    finally:
        if b is not None and b.alive():
            b.kill()
        subprocess.run(["bash", sh, "stop"], env=env, capture_output=True, text=True, timeout=300)


def test_mixed_cluster_spreads_sends_consumes_both_and_mqadmin_sees_rmqcore(java, cluster):
    ns, a_addr, b = cluster
    out = mqadmin(java, "updateTopic", "-n", ns, "-c", CLUSTER, "-t", TOPIC, "-r", "4", "-w", "4")
    assert f"create topic to {a_addr} success." in out and f"create topic to {b.address} success." in out, out
    # broker-b registers its changed table at once; the Java broker-a at its next registration (incremental)
    _wait("routed to both", lambda: _perms(ns, TOPIC).keys() == {"broker-a", "broker-b"})
    route = mqadmin(java, "topicRoute", "-n", ns, "-t", TOPIC)
    assert b.address in route and '"brokerName":"broker-b"' in route.replace(" ", ""), route
    clusters = mqadmin(java, "clusterList", "-n", ns, tolerate_traces=True)
    row = [ln.split() for ln in clusters.splitlines() if " broker-b " in f" {ln} "]
    assert row and row[0][:4] == [CLUSTER, "broker-b", "0", b.address] and row[0][4] == "V4_9_7", clusters

    sent = _sends(scenario(java, ns, "produce", TOPIC, "40"))
    assert len(sent) == 40
    per_broker = Counter(sent.values())
    assert per_broker["broker-a"] > 0 and per_broker["broker-b"] > 0, per_broker       # round robin over 8 queues

    group = "cg-mixed"
    got = {ln.split()[1]: ln.split()[2] for ln in scenario(java, ns, "push", TOPIC, "40", group)
           if ln.startswith("GOT ")}
    assert got == sent                 # every message, each from the broker it was sent to

    status = mqadmin(java, "topicStatus", "-n", ns, "-t", TOPIC)
    rows = [ln.split() for ln in status.splitlines() if ln.split()[:1] in (["broker-a"], ["broker-b"])]
    assert sum(int(r[3]) for r in rows if r[0] == "broker-b") == per_broker["broker-b"], status
    # the group's offsets are kept on each broker: consumerProgress asks each (GET_CONSUME_STATS)
    progress = mqadmin(java, "consumerProgress", "-n", ns, "-g", group)
    rows = [ln.split() for ln in progress.splitlines() if ln.startswith(TOPIC + " ")]
    for name in ("broker-a", "broker-b"):
        mine = [r for r in rows if r[1] == name]
        assert len(mine) == 4, progress
        assert sum(int(r[3]) for r in mine) == sum(int(r[4]) for r in mine) == per_broker[name], progress


def test_wipe_write_perm_drains_rmqcore_and_add_write_perm_readmits_it(java, cluster):
    ns, _a_addr, b = cluster
    _wait("routed to both", lambda: _perms(ns, TOPIC).keys() == {"broker-a", "broker-b"})
    out = mqadmin(java, "wipeWritePerm", "-n", ns, "-b", "broker-b")
    assert f"wipe write perm of broker[broker-b] in name server[{ns}] OK" in out, out
    assert _perms(ns, TOPIC) == {"broker-a": 6, "broker-b": 4}
    # a producer's route keeps only writeable queues: every send goes to broker-a; broker-b's periodic
    # registrations (an unchanged dataVersion) leave the wipe in place
    assert set(_sends(scenario(java, ns, "produce", TOPIC, "20")).values()) == {"broker-a"}
    out = mqadmin(java, "addWritePerm", "-n", ns, "-b", "broker-b")
    assert f"add write perm of broker[broker-b] in name server[{ns}] OK" in out, out
    assert _perms(ns, TOPIC)["broker-b"] == 6
    assert set(_sends(scenario(java, ns, "produce", TOPIC, "20")).values()) == {"broker-a", "broker-b"}


def test_the_java_name_server_reads_rmqcore_s_compressed_registration(cluster, tmp_path):
    ns, _a_addr, _b = cluster
    conf = {"brokerClusterName": CLUSTER, "brokerName": "broker-c", "namesrvAddr": ns, "compressedRegister": "true"}
    with RemotingProcess(str(tmp_path / "broker-c"), conf, namesrv=False) as c:
        _create_topic(c.address, "t-compressed", 3)
        # RegisterBrokerBody's deflated layout, inflated by the Java name server: the topic's queues are routed
        _wait("routed", lambda: _perms(ns, "t-compressed") == {"broker-c": 6})
        route = _route(ns, "t-compressed")
        assert route["queueDatas"][0]["writeQueueNums"] == 3
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": c.address}
        assert c.terminate() == 0
    assert _route(ns, "t-compressed") is None


def _create_topic(address: str, topic: str, queues: int) -> None:
    a = _call(address, 17, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
                            "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
                            "topicSysFlag": "0", "order": "false"})
    assert a.code == 0, a.remark


def test_rmqcore_unregisters_from_the_java_name_server_at_sigterm(cluster):
    ns, _a_addr, b = cluster
    assert "broker-b" in _json(_call(ns, 106).body)["brokerAddrTable"]
    assert b.terminate() == 0
    info = _json(_call(ns, 106).body)
    assert "broker-b" not in info["brokerAddrTable"] and info["clusterAddrTable"][CLUSTER] == ["broker-a"]
    assert _perms(ns, "broker-b") == {}


def test_mqadmin_write_perms_on_the_embedded_name_server(java, tmp_path):
    with RemotingProcess(str(tmp_path / "solo"), {"brokerName": "broker-s", "brokerClusterName": "Solo"}) as s:
        out = mqadmin(java, "updateTopic", "-n", s.namesrv, "-c", "Solo", "-t", "solo", "-r", "2", "-w", "2")
        assert f"create topic to {s.address} success." in out, out
        out = mqadmin(java, "wipeWritePerm", "-n", s.namesrv, "-b", "broker-s")
        assert f"wipe write perm of broker[broker-s] in name server[{s.namesrv}] OK" in out, out
        assert _perms(s.namesrv, "solo") == {"broker-s": 4}
        out = mqadmin(java, "addWritePerm", "-n", s.namesrv, "-b", "broker-s")
        assert f"add write perm of broker[broker-s] in name server[{s.namesrv}] OK" in out, out
        assert _perms(s.namesrv, "solo") == {"broker-s": 6}


def test_a_java_broker_registers_with_rmqcore_s_name_server(java, tmp_path):
    """The other way round: rmqcore's embedded name server for a Java broker (its REGISTER_BROKER read, its routes
    given to the Java client), beside rmqcore's own broker."""
    import signal
    from java_util import start_java_broker
    with RemotingProcess(str(tmp_path / "broker-s"), {"brokerName": "broker-s", "brokerClusterName": "Mixed"}) as s:
        port = _free_port()
        jb = start_java_broker(str(tmp_path / "java"), {
            "brokerClusterName": "Mixed", "brokerName": "broker-j", "brokerId": "0", "brokerRole": "ASYNC_MASTER",
            "namesrvAddr": s.namesrv, "brokerIP1": "127.0.0.1", "listenPort": str(port),
            "mappedFileSizeCommitLog": str(16 * 1024 * 1024)})
        try:
            _wait("broker-j registered", lambda: _route(s.namesrv, "broker-j"))
            j_addr = f"127.0.0.1:{port}"
            out = mqadmin(java, "updateTopic", "-n", s.namesrv, "-c", "Mixed", "-t", "both", "-r", "2", "-w", "2")
            assert f"create topic to {j_addr} success." in out and f"create topic to {s.address} success." in out
            _wait("routed to both", lambda: _perms(s.namesrv, "both").keys() == {"broker-s", "broker-j"})
            sent = _sends(scenario(java, s.namesrv, "produce", "both", "20"))
            assert set(sent.values()) == {"broker-s", "broker-j"}
            got = {ln.split()[1] for ln in scenario(java, s.namesrv, "push", "both", "20", "cg-both")
                   if ln.startswith("GOT ")}
            assert got == set(sent)
            jb.send_signal(signal.SIGTERM)       # its shutdown unregisters
            assert jb.wait(60) == 128 + signal.SIGTERM      # the JVM runs its shutdown hooks, then 143
            jb = None
            assert _perms(s.namesrv, "both") == {"broker-s": 6}
            assert "broker-j" not in _json(_call(s.namesrv, 106).body)["brokerAddrTable"]
        finally:
            if jb is not None:
                jb.kill()
                jb.wait(30)
