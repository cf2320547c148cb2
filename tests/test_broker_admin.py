"""What a 5.x client needs before it starts, set up offline (issue 27): topics with 5.x's message type and groups
with FIFO consumption and max delivery attempts, on Broker and as ``rmqcore topic|group create|list|delete``, written
as RocketMQ 5.3.3 writes them (TopicConfig.attributes {"message.type": ...}; SubscriptionGroupConfig
consumeMessageOrderly, groupRetryPolicy, retryMaxTimes = attempts - 1 as GrpcClientSettingsManager gives clients
retryMaxTimes + 1); and broker.conf read as BrokerStartup reads it."""
import json
import os
from pathlib import Path

import pytest

from rmqcore import Message, PutStatus
from rmqcore import fastjson
from rmqcore.broker import Broker, BrokerConfig, ConfigFileError, TopicConfig
from rmqcore.broker.broker_conf import load_broker_conf, parse_properties
from rmqcore.broker.subscription_group_config import GroupRetryPolicy, SubscriptionGroupConfig
from rmqcore.cli import main
from rmqcore.config import StoreConfig

GOLDEN = Path(__file__).with_name("golden") / "broker"


def open_broker(path, small_config, **cfg):
    cfg.setdefault("broker_name", "broker-a")
    return Broker.open(str(path), BrokerConfig(**cfg), store_config=small_config)


def topics_json(path):
    return fastjson.loads((Path(path) / "config" / "topics.json").read_text())["topicConfigTable"]


def groups_json(path):
    return fastjson.loads((Path(path) / "config" / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]


# -- Broker API --------------------------------------------------------------------------------------------------

def test_create_topic_with_a_type_writes_5x_attributes(tmp_path, small_config):
    with open_broker(tmp_path, small_config) as b:
        tc = b.create_topic("fifo_topic", 8, message_type="FIFO")
        assert tc.message_type == "FIFO"
        b.create_topic("plain", 2)
        with pytest.raises(ValueError, match="message_type"):
            b.create_topic("bad", 2, message_type="SOMETIMES")
        assert "bad" not in b.topics()
    doc = topics_json(tmp_path)
    assert doc["fifo_topic"]["attributes"] == {"message.type": "FIFO"}
    assert doc["fifo_topic"]["readQueueNums"] == doc["fifo_topic"]["writeQueueNums"] == 8
    assert "attributes" not in doc["plain"]          # untyped: the 4.9.7 shape, read as NORMAL
    with open_broker(tmp_path, small_config) as b:
        assert b.topics()["fifo_topic"].message_type == "FIFO"
        assert b.topics()["plain"].message_type == "NORMAL"


def test_5x_topic_type_read_from_java_text(tmp_path):
    # The text a 5.3.3 broker writes for `mqadmin updateTopic -t T -a +message.type=TRANSACTION`.
    doc = fastjson.loads('{"attributes":{"message.type":"TRANSACTION"},"order":false,"perm":6,"readQueueNums":4,'
                         '"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4}')
    tc = TopicConfig.from_json(doc, "T")
    assert tc.message_type == "TRANSACTION" and tc.extra == {}
    assert fastjson.dumps(tc.to_json()) == fastjson.dumps(doc)
    assert TopicConfig.from_json({"topicName": "T", "attributes": {}}, "T").message_type == "NORMAL"


def test_normal_topics_are_still_auto_created(tmp_path, small_config):
    with open_broker(tmp_path, small_config) as b:
        assert b.send(Message("fresh", b"x", queue_id=0)).status is PutStatus.PUT_OK
        assert b.topics()["fresh"].message_type == "NORMAL"
    with open_broker(tmp_path, small_config, auto_create_topic_enable=False) as b:
        with pytest.raises(Exception, match="not exist"):
            b.send(Message("fresh2", b"x", queue_id=0))


def test_create_group_fifo_and_max_delivery_attempts_as_5x_writes_them(tmp_path, small_config):
    with open_broker(tmp_path, small_config) as b:
        g = b.create_group("orders_group", fifo=True, max_delivery_attempts=5)
        assert (g.consume_message_orderly, g.retry_max_times, g.max_delivery_attempts) == (True, 4, 5)
        b.create_group("plain_group")
    doc = groups_json(tmp_path)
    # Field for field what 5.3.3's SubscriptionGroupConfig getters give for such a group.
    assert doc["orders_group"] == {
        "attributes": {}, "brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True,
        "consumeFromMinEnable": True, "consumeMessageOrderly": True, "consumeTimeoutMinute": 15,
        "groupName": "orders_group", "groupRetryPolicy": {"type": "CUSTOMIZED"}, "groupSysFlag": 0,
        "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": 4, "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1}
    assert doc["plain_group"]["consumeMessageOrderly"] is False and doc["plain_group"]["retryMaxTimes"] == 16
    with open_broker(tmp_path, small_config) as b:
        g = b.groups()["orders_group"]
        assert g.consume_message_orderly is True and g.max_delivery_attempts == 5
        assert b.groups()["plain_group"].max_delivery_attempts == 17        # RocketMQ's default: 16 retries + 1


def test_max_delivery_attempts_drive_the_dlq(tmp_path, small_config):
    # retryMaxTimes = attempts - 1: the send-back after the last attempt goes to %DLQ%.
    with open_broker(tmp_path, small_config) as b:
        b.create_group("g", max_delivery_attempts=2)
        r = b.send(Message("t", b"x", queue_id=0))
        ext = b.store.look_message(r.commitlog_offset)
        first = b.send_back(ext, "g", delay_level=1)                      # attempt 1 failed: a retry
        assert b.store.look_message(first.commitlog_offset).properties["REAL_TOPIC"] == "%RETRY%g"
        retry_ext = b.store.look_message(first.commitlog_offset)
        second = b.send_back(retry_ext, "g", delay_level=1)               # attempt 2 failed: dead
        assert b.store.look_message(second.commitlog_offset).topic == "%DLQ%g"


def test_5x_group_with_exponential_policy_round_trips(tmp_path):
    raw = {"groupName": "g", "consumeMessageOrderly": True, "groupSysFlag": 0, "consumeTimeoutMinute": 15,
           "groupRetryPolicy": {"type": "EXPONENTIAL",
                                "exponentialRetryPolicy": {"initial": 1000, "max": 60000, "multiplier": 3}},
           "attributes": {}, "retryMaxTimes": 3}
    g = SubscriptionGroupConfig.from_json(raw, "g")
    assert g.group_retry_policy.type == "EXPONENTIAL"
    # ExponentialRetryPolicy.nextDelayDuration: min(max, initial * multiplier ** reconsumeTimes).
    assert [g.group_retry_policy.retry_policy.next_delay_duration(n) for n in (0, 1, 2, 5)] == [1000, 3000, 9000,
                                                                                                 60000]
    assert GroupRetryPolicy().retry_policy.next_delay_duration(0) == 10000      # next[2]: old level 3
    out = g.to_json()
    for k, v in raw.items():
        assert out[k] == v
    assert g.max_delivery_attempts == 4


def test_4x_groups_stay_4x_shaped(tmp_path):
    g = SubscriptionGroupConfig.from_json({"groupName": "old", "retryMaxTimes": 2}, "old")
    assert "consumeMessageOrderly" not in g.to_json() and "groupRetryPolicy" not in g.to_json()
    assert g.consume_message_orderly is False and g.group_retry_policy.type == "CUSTOMIZED"
    g.consume_message_orderly = True
    assert g.to_json()["groupRetryPolicy"] == {"type": "CUSTOMIZED"} and g.to_json()["consumeTimeoutMinute"] == 15


# -- CLI -------------------------------------------------------------------------------------------------------------

def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_topic_create_list_delete(tmp_path, capsys):
    store = tmp_path / "store"
    code, out, err = cli(capsys, "topic", "create", store, "orders", "--queues", "8", "--type", "FIFO")
    assert code == 0 and "created topic orders: 8 queues, type FIFO" in out
    code, out, _ = cli(capsys, "topic", "create", store, "orders", "--queues", "2", "--json")
    assert code == 0 and json.loads(out)["write_queue_nums"] == 2
    code, out, _ = cli(capsys, "topic", "list", store, "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    # An update without --type keeps the type, as 5.x merges a request's attributes into the current ones.
    assert set(rows) == {"orders"} and rows["orders"]["message_type"] == "FIFO"
    code, out, _ = cli(capsys, "topic", "create", store, "orders", "--type", "DELAY")
    assert code == 0 and topics_json(store)["orders"]["attributes"] == {"message.type": "DELAY"}
    code, out, _ = cli(capsys, "topic", "list", store, "--all", "--json")
    assert {"TBW102", "SCHEDULE_TOPIC_XXXX"} <= {r["name"] for r in json.loads(out) if r["system"]}
    code, out, _ = cli(capsys, "topic", "list", store)
    assert "orders" in out and "DELAY" in out
    code, out, err = cli(capsys, "topic", "delete", store, "orders")
    assert code == 0 and "deleted topic orders" in out
    code, out, err = cli(capsys, "topic", "delete", store, "orders")
    assert code == 1 and err == "rmqcore topic: topic 'orders' does not exist\n"
    assert "orders" not in topics_json(store)


def test_cli_group_create_list_delete(tmp_path, capsys):
    store = tmp_path / "store"
    code, out, _ = cli(capsys, "group", "create", store, "billing", "--fifo", "--max-delivery-attempts", "3")
    assert code == 0 and "FIFO" in out and "max delivery attempts 3" in out
    assert groups_json(store)["billing"]["retryMaxTimes"] == 2
    code, out, _ = cli(capsys, "group", "list", store, "--json")
    rows = json.loads(out)
    assert [(r["name"], r["fifo"], r["max_delivery_attempts"]) for r in rows] == [("billing", True, 3)]
    code, out, _ = cli(capsys, "group", "delete", store, "billing", "--json")
    assert code == 0 and json.loads(out) == {"deleted": "billing"}
    code, _, err = cli(capsys, "group", "delete", store, "billing")
    assert code == 1


@pytest.mark.parametrize("argv, message", [
    (("topic", "create", "{store}", "bad name"), "illegal characters"),
    (("topic", "create", "{store}", "t" * 128), "longer than the topic max length 127"),
    (("topic", "create", "{store}", "t", "--queues", "3000000000"), "readQueueNums: 3000000000 is outside"),
    (("topic", "create", "{store}", "t", "--queues", "-1"), "readQueueNums: -1 is negative"),
    (("group", "create", "{store}", "g", "--max-delivery-attempts", "0"), "max_delivery_attempts"),
    (("topic", "list", "{missing}"), "no such directory"),
])
def test_cli_admin_errors_are_one_line_exit_2(tmp_path, capsys, argv, message):
    store = tmp_path / "store"
    cli(capsys, "topic", "create", store, "keep")
    argv = [a.format(store=store, missing=tmp_path / "nope") for a in argv]
    code, out, err = cli(capsys, *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert set(topics_json(store)) >= {"keep"} and "t" not in topics_json(store)


def test_cli_admin_refuses_a_store_a_server_holds(tmp_path, small_config, capsys):
    with open_broker(tmp_path, small_config):
        code, out, err = cli(capsys, "topic", "create", tmp_path, "x")
    assert code == 2 and "already open" in err


def test_cli_admin_bad_name_creates_no_store(tmp_path, capsys):
    code, _, _ = cli(capsys, "topic", "create", tmp_path / "new", "bad name")
    assert code == 2 and not (tmp_path / "new").exists()


def test_cli_admin_with_broker_conf(tmp_path, capsys):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-z\nbrokerClusterName=ZCluster\nfetchNamesrvAddrByAddressServer=false\n"
                    "brokerRole=ASYNC_MASTER\naclEnable=false\n")
    store = tmp_path / "store"
    code, out, err = cli(capsys, "topic", "create", store, "t1", "--config", conf)
    assert code == 0
    assert err.count("warning") == 1 and "aclEnable, fetchNamesrvAddrByAddressServer" in err   # one warning, every key named
    assert {"broker-z", "ZCluster"} <= set(topics_json(store))      # the system topics of the configured broker


# -- broker.conf -----------------------------------------------------------------------------------------------------

def test_broker_conf_properties_syntax():
    text = ("# a comment\n! another\n  brokerName = broker-a  \nbrokerId:1\nfileReservedTime 48\n"
            "deleteWhen=\\\n    04\nweird\\=key=a\\u0041\\tb\nmessageDelayLevel=1s 5s\\\n 10s\n#continued=\\\n"
            "autoCreateTopicEnable=TRUE\r\nlast=")
    props = {k: v for k, (v, _line) in parse_properties(text).items()}
    assert props == {"brokerName": "broker-a  ", "brokerId": "1", "fileReservedTime": "48", "deleteWhen": "04",
                     "weird=key": "aA\tb", "messageDelayLevel": "1s 5s10s", "autoCreateTopicEnable": "TRUE",
                     "last": ""}
    assert parse_properties(text)["autoCreateTopicEnable"][1] == 12


def test_load_broker_conf_maps_keys_and_returns_unknown(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\ndeleteWhen=04\n"
                    "fileReservedTime=48\nbrokerRole=ASYNC_MASTER\nflushDiskType=SYNC_FLUSH\n"
                    "mappedFileSizeCommitLog=1073741824\nautoCreateTopicEnable=false\ntransactionTimeOut=3000\n"
                    "warmMapedFileEnable=true\ncheckCRCOnRecover=false\nbrokerIP1=10.1.2.3\nlistenPort=10921\n"
                    "storePathRootDir=/data/store\nnamesrvAddr=ns:9876\nbrokerIP2=10.1.2.4\n")
    bc, sc, unknown = load_broker_conf(str(conf))
    assert (bc.broker_name, bc.broker_cluster_name, bc.auto_create_topic_enable, bc.transaction_timeout) == \
        ("broker-a", "DefaultCluster", False, 3000)
    assert (sc.flush_disk_type, sc.mapped_file_size_commit_log, sc.file_reserved_time, sc.delete_when) == \
        ("SYNC_FLUSH", 1073741824, 48, "04")
    assert sc.warm_mapped_file_enable is True and sc.check_crc_on_recover is False
    assert sc.store_host == "10.1.2.3:10921"
    assert (sc.broker_role, sc.ha_listen_port) == ("ASYNC_MASTER", 10922)       # BrokerStartup: listenPort + 1
    assert (bc.namesrv_addr, bc.broker_ip2) == ("ns:9876", "10.1.2.4")       # what registration reads
    assert unknown == ["storePathRootDir"]
    # Defaults elsewhere: RocketMQ's.
    assert sc.max_message_size == StoreConfig().max_message_size and bc.default_topic_queue_nums == 8


@pytest.mark.parametrize("text, where, message", [
    ("fileReservedTime=abc\n", "fileReservedTime (line 1)", "not an integer"),
    ("\n\nmaxMessageSize=99999999999\n", "maxMessageSize (line 3)", "outside a Java int"),
    ("autoCreateTopicEnable=yes\n", "autoCreateTopicEnable (line 1)", "not true or false"),
    ("flushDiskType=sync\n", "flushDiskType (line 1)", "flush_disk_type must be one of"),
    ("brokerPermission=99\n", "brokerPermission (line 1)", "broker_permission"),
    ("brokerName=\n", "brokerName (line 1)", "broker_name must be a non-empty str"),
    ("listenPort=70000\n", "listenPort (line 1)", "not a TCP port"),
    ("brokerName=a\\u00zz\n", "line 1", "malformed"),
])
def test_load_broker_conf_errors_name_key_and_line(tmp_path, text, where, message):
    conf = tmp_path / "broker.conf"
    conf.write_text(text)
    with pytest.raises(ConfigFileError) as e:
        load_broker_conf(str(conf))
    assert e.value.path == str(conf) and e.value.field == where and message in str(e.value)


def test_load_broker_conf_missing_or_not_a_file(tmp_path):
    with pytest.raises(ConfigFileError, match="no such file"):
        load_broker_conf(str(tmp_path / "none.conf"))
    os.mkdir(tmp_path / "dir.conf")
    with pytest.raises(ConfigFileError, match="is a directory"):
        load_broker_conf(str(tmp_path / "dir.conf"))


def test_readme_admin_command_lines_parse():
    import re
    import shlex
    from rmqcore.cli import build_parser
    text = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Offline admin and `broker.conf`"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [shlex.split(line.split(" #")[0]) for line in block.splitlines() if line.startswith("rmqcore ")]
    assert {c[1] for c in commands} == {"topic", "group"} and len(commands) == 5
    parser = build_parser()
    for words in commands:
        parser.parse_args(["/s" if w == "STORE" else w for w in words[1:]])


def test_cli_admin_in_a_subprocess_as_a_user_would(tmp_path):
    import subprocess
    import sys
    import rmqcore
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__))))
    store = str(tmp_path / "store")

    def run(*argv):
        return subprocess.run([sys.executable, "-m", "rmqcore", *argv], capture_output=True, text=True, env=env,
                              timeout=120)
    r = run("topic", "create", store, "orders", "--type", "TRANSACTION")
    assert r.returncode == 0 and "type TRANSACTION" in r.stdout, r.stderr
    r = run("group", "create", store, "g", "--fifo")
    assert r.returncode == 0, r.stderr
    r = run("topic", "list", store, "--json")
    assert [(t["name"], t["message_type"]) for t in json.loads(r.stdout)] == [("orders", "TRANSACTION")]
    r = run("group", "create", store, "g", "--max-delivery-attempts", "x")
    assert r.returncode == 2 and "invalid int value" in r.stderr
