"""mqadmin (the real RocketMQ 4.9.7 tools, MQAdminStartup) against `rmqcore serve --remoting --namesrv` in a child
process: the query and admin commands answer as they answer with the Java broker and name server (clusterList,
consumerProgress with and without a group, consumerConnection, producerConnection, updateSubGroup, deleteSubGroup,
queryMsgById, queryMsgByKey, getBrokerConfig). Messages come from tests/java/RemotingScenario.java (the real Java
client); a live consumer or producer from a raw heartbeat (remoting_util.Client) held open while mqadmin asks.

Where the harness and its build are: tests/java_util.py; without a JDK or the harness every test skips saying why.
The frames these commands exchange are compared field by field with the Java broker's in test_remoting_frames.py.
"""
import json
import os
import subprocess

import pytest

from java_util import java_client
from remoting_util import Client, RemotingProcess

CLUSTER, BROKER = "AdmCluster", "adm-broker"


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    return java_client(str(tmp_path_factory.mktemp("java")))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("jadmin") / "store")
    with RemotingProcess(store, {"brokerClusterName": CLUSTER, "brokerName": BROKER}) as s:
        s.store = store
        yield s


def mqadmin(java, *args):
    r = subprocess.run([*java, "org.apache.rocketmq.tools.command.MQAdminStartup", *args], capture_output=True,
                       text=True, timeout=120)
    out = "\n".join(ln for ln in (r.stdout + r.stderr).splitlines() if " INFO " not in ln)
    # clusterList and consumerProgress print an exception (an NPE on a missing runtime-info key) and go on
    assert r.returncode == 0 and "Exception" not in out, out
    return out


def scenario(java, server, *args):
    r = subprocess.run([*java, "RemotingScenario", server.namesrv, *args], capture_output=True, text=True,
                       timeout=180)
    lines = [ln for ln in r.stdout.splitlines() if " INFO " not in ln and " WARN " not in ln]
    assert r.returncode == 0 and "OK" in lines, r.stdout[-3000:] + r.stderr[-2000:]
    return lines


def heartbeat(server, client_id: str, consumer_group: str | None = None, producer_group: str | None = None,
              topic: str = "") -> Client:
    body = {"clientID": client_id, "producerDataSet": [], "consumerDataSet": []}
    if producer_group:
        body["producerDataSet"].append({"groupName": producer_group})
    if consumer_group:
        body["consumerDataSet"].append({
            "groupName": consumer_group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "BROADCASTING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
            "subscriptionDataSet": [{"classFilterMode": False, "codeSet": [], "expressionType": "TAG",
                                     "subString": "TagA", "subVersion": 1, "tagsSet": ["TagA"], "topic": topic}]})
    c = Client(server.address)
    assert c.call(34, body=json.dumps(body).encode()).code == 0
    return c


def test_cluster_list_reads_every_runtime_figure(java, server):
    out = mqadmin(java, "clusterList", "-n", server.namesrv)
    rows = [ln.split() for ln in out.splitlines() if ln.startswith(CLUSTER)]
    assert len(rows) == 1, out
    row = rows[0]
    assert row[:5] == [CLUSTER, BROKER, "0", server.address, "V4_9_7"], out
    assert 0 <= float(row[-1]) <= 1                          # #SPACE: commitLogDiskRatio parsed


def test_broker_config_lists_the_broker_conf_settings(java, server):
    out = mqadmin(java, "getBrokerConfig", "-n", server.namesrv, "-b", server.address)
    settings = {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in out.splitlines() if "=" in ln)}
    assert settings["brokerClusterName"] == CLUSTER and settings["brokerName"] == BROKER
    assert settings["autoCreateTopicEnable"] == "true"


def test_consumer_progress_with_and_without_a_group(java, server):
    scenario(java, server, "produce", "jadm-progress", "6")
    scenario(java, server, "push", "jadm-progress", "10")
    out = mqadmin(java, "consumerProgress", "-n", server.namesrv)
    groups = [ln.split() for ln in out.splitlines()[1:] if ln.startswith("p")]
    assert len(groups) == 1, out
    group = groups[0][0]
    # the push consumer has shut down: no connection (count 0, OFFLINE), TPS 0, then its diff total (what it had
    # committed when it shut down: the scenario stops as soon as its listener saw every message, which may be before
    # the last consumed offsets were committed)
    assert groups[0][1:4] == ["0", "OFFLINE", "0"], out
    diff_total = int(groups[0][4])
    out = mqadmin(java, "consumerProgress", "-n", server.namesrv, "-g", group)
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("jadm-progress")]
    assert sorted(int(r[2]) for r in rows) == [0, 1, 2, 3], out
    assert sum(int(r[3]) for r in rows) == 10, out                          # broker offsets: 6 sends, a batch of 4
    assert sum(int(r[3]) - int(r[4]) for r in rows) == diff_total == sum(int(r[5]) for r in rows), out
    assert f"Diff Total: {diff_total}" in out


def test_consumer_connection_of_a_live_and_of_an_offline_group(java, server):
    c = heartbeat(server, "192.0.2.9@adm#1", consumer_group="jadm-live", topic="jadm-progress")
    try:
        out = mqadmin(java, "consumerConnection", "-n", server.namesrv, "-g", "jadm-live")
    finally:
        c.close()
    assert "192.0.2.9@adm#1" in out and "PYTHON" in out and "V4_9_7" in out, out
    assert "jadm-progress" in out and "TagA" in out
    assert "ConsumeType: CONSUME_PASSIVELY" in out and "MessageModel: BROADCASTING" in out
    assert "ConsumeFromWhere: CONSUME_FROM_LAST_OFFSET" in out
    # a group whose one member unregistered: its retry topic stays routed, the broker has no connection of it
    c = heartbeat(server, "192.0.2.9@adm#3", consumer_group="jadm-gone", topic="jadm-progress")
    assert c.call(35, {"clientID": "192.0.2.9@adm#3", "consumerGroup": "jadm-gone"}).code == 0
    r = subprocess.run([*java, "org.apache.rocketmq.tools.command.MQAdminStartup", "consumerConnection", "-n",
                        server.namesrv, "-g", "jadm-gone"], capture_output=True, text=True, timeout=120)
    c.close()
    assert "CODE: 206" in r.stdout + r.stderr                  # CONSUMER_NOT_ONLINE, as the Java broker answers


def test_producer_connection_lists_the_live_producer(java, server):
    c = heartbeat(server, "192.0.2.9@adm#2", producer_group="jadm-pg")
    try:
        out = mqadmin(java, "producerConnection", "-n", server.namesrv, "-g", "jadm-pg", "-t", "TBW102")
    finally:
        c.close()
    rows = [ln.split() for ln in out.splitlines() if "192.0.2.9@adm#2" in ln]
    assert len(rows) == 1 and rows[0][0] == "0001" and rows[0][3:] == ["PYTHON", "V4_9_7"], out


def test_update_and_delete_subscription_group_persist(java, server):
    path = os.path.join(server.store, "config", "subscriptionGroup.json")
    out = mqadmin(java, "updateSubGroup", "-n", server.namesrv, "-b", server.address, "-g", "jadm-sg", "-r", "5",
                  "-q", "2")
    assert f"create subscription group to {server.address} success." in out
    with open(path) as f:
        table = json.load(f)["subscriptionGroupTable"]
    assert table["jadm-sg"]["retryMaxTimes"] == 5 and table["jadm-sg"]["retryQueueNums"] == 2
    out = mqadmin(java, "deleteSubGroup", "-n", server.namesrv, "-b", server.address, "-g", "jadm-sg")
    assert f"delete subscription group [jadm-sg] from broker [{server.address}] success." in out
    with open(path) as f:
        assert "jadm-sg" not in json.load(f)["subscriptionGroupTable"]


def test_query_message_by_key_and_by_id(java, server):
    lines = scenario(java, server, "produce", "jadm-query", "3")
    msg_id = next(ln.split()[1] for ln in lines if ln.startswith("MSGID "))       # k2's offset id
    out = mqadmin(java, "queryMsgByKey", "-n", server.namesrv, "-t", "jadm-query", "-k", "k2")
    assert len([ln for ln in out.splitlines()[1:] if ln.strip()]) == 1, out
    out = mqadmin(java, "queryMsgById", "-n", server.namesrv, "-i", msg_id)
    fields = {k: v.strip() for k, _, v in (ln.partition(" ") for ln in out.splitlines())}
    assert fields["OffsetID:"] == msg_id and fields["Topic:"] == "jadm-query" and fields["Keys:"] == "[k2]", out
    assert fields["Tags:"] == "[T2]"
