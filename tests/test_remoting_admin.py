"""`rmqcore serve --remoting`: the query and admin answers (rmqcore/remoting/admin.py) driven by raw frames where
mqadmin cannot reach (bad bodies, races between clients); mqadmin itself runs in test_remoting_admin_java.py and the
answers are held to the Java broker's recorded ones in test_remoting_frames.py."""
import json
import os

import pytest

from remoting_util import Client, RemotingProcess, pull, send_v2


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("radmin") / "store")
    with RemotingProcess(store, {"brokerName": "broker-r", "brokerClusterName": "ClusterR"}) as s:
        s.store = store
        yield s


def test_max_offset_counts_another_clients_oneway_send_at_once(server):
    # a oneway send is handled before the next request of its connection is answered; a GET_MAX_OFFSET of another
    # client right after must count it (its dispatch used to run on a later loop pass: a lite pull consumer's seek
    # to the end then missed it)
    producer, reader = Client(server.address), Client(server.address)
    ext = {"a": "pg", "b": "t-oneway", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0", "i": "",
           "j": "0", "k": "false", "m": "false"}
    assert send_v2(producer, "t-oneway", b"first").code == 0
    for i in range(2, 202):
        producer.request(310, ext, b"x" * 100, flag=2)
        assert producer.call(106).code == 0                  # the oneway send before it is handled
        a = reader.call(30, {"topic": "t-oneway", "queueId": "0"})
        assert a.ext_fields["offset"] == str(i)
    producer.close()
    reader.close()


def test_a_found_pull_names_its_status_in_the_remark(server):
    c = Client(server.address)
    assert send_v2(c, "t-remark", b"body").code == 0
    a = c.answer(pull(c, "g-remark", "t-remark", 0, 0))
    assert (a.code, a.remark) == (0, "FOUND")                # PullMessageProcessor: GetMessageStatus.name()
    a = c.answer(pull(c, "g-remark", "t-remark", 0, 1))
    assert (a.code, a.remark) == (19, "OFFSET_OVERFLOW_ONE")
    c.close()


def test_wait_true_is_not_stored_and_wait_false_is(server):
    from rmqcore.reference import decode_message
    c = Client(server.address)
    assert send_v2(c, "t-wait", b"a", properties={"WAIT": "true", "KEYS": "k"}).code == 0
    assert send_v2(c, "t-wait", b"b", properties={"WAIT": "false"}).code == 0
    a = c.answer(pull(c, "g-wait", "t-wait", 0, 0))
    body, pos, props = a.body, 0, []
    while pos < len(body):
        m = decode_message(body, pos)
        props.append(m["properties"])
        pos += m["store_size"]
    assert "WAIT" not in props[0] and props[0]["KEYS"] == "k"
    assert props[1]["WAIT"] == "false"
    c.close()


def test_subscription_group_bodies_that_cannot_be_read_are_refused_naming_the_field(server):
    c = Client(server.address)
    a = c.call(200, body=b"{not json")
    assert a.code == 1 and "not JSON" in a.remark
    a = c.call(200, body=json.dumps({"groupName": "g-bad", "retryMaxTimes": "many"}).encode())
    assert a.code == 1 and "retryMaxTimes" in a.remark
    a = c.call(207, {})
    assert a.code == 1 and "groupName" in a.remark
    # the broker goes on: a good one is stored and persisted
    good = {"groupName": "g-good", "retryMaxTimes": 2, "retryQueueNums": 1, "consumeEnable": True}
    assert c.call(200, body=json.dumps(good).encode()).code == 0
    with open(os.path.join(server.store, "config", "subscriptionGroup.json")) as f:
        table = json.load(f)["subscriptionGroupTable"]
    assert "g-bad" not in table and table["g-good"]["retryMaxTimes"] == 2
    c.close()


def test_connections_and_who_consumes_a_topic(server):
    c = Client(server.address)
    hb = {"clientID": "192.0.2.1@r#1", "producerDataSet": [{"groupName": "pg-r"}], "consumerDataSet": [
        {"groupName": "cg-r", "consumeType": "CONSUME_ACTIVELY", "messageModel": "CLUSTERING",
         "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
         "subscriptionDataSet": [{"classFilterMode": False, "codeSet": [], "expressionType": "TAG",
                                  "subString": "*", "subVersion": 7, "tagsSet": [], "topic": "t-who"}]}]}
    assert c.call(34, body=json.dumps(hb).encode()).code == 0
    other = Client(server.address)
    cc = json.loads(other.call(203, {"consumerGroup": "cg-r"}).body)
    assert [(x["clientId"], x["language"], x["version"]) for x in cc["connectionSet"]] == \
        [("192.0.2.1@r#1", "PYTHON", 407)]
    assert cc["subscriptionTable"]["t-who"]["subVersion"] == 7
    assert (cc["consumeType"], cc["messageModel"]) == ("CONSUME_ACTIVELY", "CLUSTERING")
    pc = json.loads(other.call(204, {"producerGroup": "pg-r"}).body)
    assert [x["clientId"] for x in pc["connectionSet"]] == ["192.0.2.1@r#1"]
    assert json.loads(other.call(300, {"topic": "t-who"}).body) == {"groupList": ["cg-r"]}
    c.close()
    # the connection closed: the group is offline (CONSUMER_NOT_ONLINE), as the Java broker answers
    for _ in range(100):
        a = other.call(203, {"consumerGroup": "cg-r"})
        if a.code != 0:
            break
    assert (a.code, a.remark) == (206, "the consumer group[cg-r] not online")
    other.close()


def test_a_slave_refuses_subscription_group_changes_as_the_java_broker(tmp_path):
    store = str(tmp_path / "slave")
    with RemotingProcess(store, {"brokerRole": "SLAVE", "brokerId": "1", "haMasterAddress": "127.0.0.1:1"}) as s:
        c = Client(s.address)
        for code, ext, body in ((200, {}, json.dumps({"groupName": "g-slave"}).encode()),
                                (207, {"groupName": "g-slave"}, b"")):
            a = c.call(code, ext, body)
            assert (a.code, a.remark) == (1, "Can't modify topic or subscription group from slave broker, please "
                                             "execute it from master broker.")
        c.close()
        path = os.path.join(store, "config", "subscriptionGroup.json")
        assert not os.path.exists(path) or "g-slave" not in open(path).read()
