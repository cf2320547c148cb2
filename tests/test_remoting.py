"""`rmqcore serve --remoting`: the classic protocol's frames, name server answers, send, pull with long polling,
offsets and bad input, driven by a small client of raw frames against a server in a child process (the real clients'
scenarios are in test_remoting_java.py and test_remoting_cpp.py)."""
import json
import os
import struct

import pytest

from rmqcore import fastjson
from rmqcore._message import decode_message
from rmqcore.remoting import remoting_command as rc
from remoting_util import Client, RemotingProcess, pull, send_v2


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("remoting") / "store")
    conf = {"brokerName": "broker-x", "brokerClusterName": "ClusterX", "brokerIP1": "127.0.0.1"}
    with RemotingProcess(store, conf) as s:
        yield s


def test_unknown_codes_answered_as_the_java_broker_in_the_requests_own_type(server):
    for stype in (rc.JSON, rc.ROCKETMQ):
        c = Client(server.address, stype)
        a = c.call(9999)
        assert (a.code, a.remark, a.serialize_type, a.flag & rc.RESPONSE_FLAG) == \
            (3, " request type 9999 not supported", stype, 1)
        c.close()


def test_routes_name_the_broker_conf_and_the_advertised_address(server):
    # broker.conf gave brokerIP1 and no listenPort: the Java broker's default port 10911 is the advertised one
    for address in (server.namesrv, server.address):
        c = Client(address)
        a = c.call(105, {"topic": "TBW102"})
        assert a.code == 0
        route = json.loads(a.body)
        assert route["brokerDatas"] == [{"brokerAddrs": {"0": "127.0.0.1:10911"}, "brokerName": "broker-x",
                                         "cluster": "ClusterX"}]
        assert route["queueDatas"][0]["perm"] == 7
        assert b'"0":"127.0.0.1:10911"' in a.body           # compact, quoted ids (the Go client splits text)
        a = c.call(105, {"topic": "no-such-topic"})
        assert a.code == 17 and a.remark.startswith("No topic route info in name server for the topic: no-such")
        info = json.loads(c.call(106).body)
        assert info["clusterAddrTable"] == {"ClusterX": ["broker-x"]}
        assert "TBW102" in json.loads(c.call(206).body)["topicList"]
        c.close()


def test_the_namesrv_port_answers_only_name_server_codes(server):
    c = Client(server.namesrv)
    a = send_v2(c, "t-ns", b"x")
    assert a.code == 3
    # a send to a topic the broker's port has served, and a pull that would find it, are not the name server's
    # either (the compiled send and pull serve the broker's port only)
    b = Client(server.address)
    for body in (b"y", b"y"):           # the first creates the topic, the second finds its checks cached
        assert send_v2(b, "t-ns", body, queue_id=0).code == 0
    assert send_v2(c, "t-ns", b"z", queue_id=0).code == 3
    assert b.answer(pull(b, "g-ns", "t-ns", 0, 0)).code == 0        # the group exists now
    assert c.answer(pull(c, "g-ns", "t-ns", 0, 0)).code == 3
    p = b.answer(pull(b, "g-ns", "t-ns", 0, 0))
    assert p.code == 0 and p.ext_fields["maxOffset"] == "2"
    b.close()
    c.close()


def test_send_then_pull_returns_the_records_as_stored(server):
    c = Client(server.address, rc.ROCKETMQ)
    a = send_v2(c, "t-send", b"hello", queue_id=1, properties={"TAGS": "tg", "KEYS": "k1"})
    assert a.code == 0 and a.serialize_type == rc.ROCKETMQ
    assert a.ext_fields["queueId"] == "1" and a.ext_fields["queueOffset"] == "0"
    assert a.ext_fields["msgId"].startswith("7F0000010000" + "%04X" % 10911)
    p = c.answer(pull(c, "g1", "t-send", 1, 0, suspend_ms=5000))
    assert p.code == 0
    assert {k: p.ext_fields[k] for k in ("nextBeginOffset", "minOffset", "maxOffset", "suggestWhichBrokerId")} == \
        {"nextBeginOffset": "1", "minOffset": "0", "maxOffset": "1", "suggestWhichBrokerId": "0"}
    m = decode_message(p.body)
    assert (bytes(m.body), m.tags, m.keys, m.store_size) == (b"hello", "tg", ["k1"], len(p.body))
    assert m.msg_id == a.ext_fields["msgId"]
    c.close()


def test_a_parked_pull_is_answered_by_a_later_send(server):
    consumer, producer = Client(server.address), Client(server.address)
    opaque = pull(consumer, "g2", "t-park", 0, 0, suspend_ms=20000)
    # the topic is made by this send (TBW102): the pull before it found no topic and waits all the same
    assert send_v2(producer, "t-park", b"late", queue_id=0).code == 0
    p = consumer.answer(opaque)
    if p.code == 17:          # the pull came before the topic existed: the Java broker refuses it too
        p = consumer.answer(pull(consumer, "g2", "t-park", 0, 0, suspend_ms=20000))
    assert p.code == 0 and bytes(decode_message(p.body).body) == b"late"
    opaque = pull(consumer, "g2", "t-park", 0, 1, suspend_ms=20000)
    assert send_v2(producer, "t-park", b"later", queue_id=0).code == 0
    p = consumer.answer(opaque)
    assert p.code == 0 and bytes(decode_message(p.body).body) == b"later"


def test_a_pull_with_nothing_answers_not_found_at_its_suspend_time(server):
    c = Client(server.address)
    assert send_v2(c, "t-idle", b"x").code == 0
    p = c.answer(pull(c, "g3", "t-idle", 0, 1, suspend_ms=300))
    assert p.code == 19
    assert p.ext_fields["nextBeginOffset"] == "1" and p.ext_fields["maxOffset"] == "1"


def test_tag_filter_and_offsets(server):
    c = Client(server.address)
    for i in range(4):
        assert send_v2(c, "t-tags", b"m%d" % i, properties={"TAGS": "A" if i % 2 else "B"}).code == 0
    p = c.answer(pull(c, "g4", "t-tags", 0, 0, sys_flag=4, subscription="A"))
    assert p.code == 0
    body, got = p.body, []
    while body:
        m = decode_message(body)
        got.append(bytes(m.body))
        body = body[m.store_size:]
    assert got == [b"m1", b"m3"]
    q = {"consumerGroup": "g4", "topic": "t-tags", "queueId": "0"}
    assert c.call(15, {**q, "commitOffset": "3"}).code == 0
    assert c.call(14, q).ext_fields["offset"] == "3"
    assert c.call(30, {"topic": "t-tags", "queueId": "0"}).ext_fields["offset"] == "4"
    assert c.call(31, {"topic": "t-tags", "queueId": "0"}).ext_fields["offset"] == "0"
    assert c.call(29, {"topic": "t-tags", "queueId": "0", "timestamp": "0"}).ext_fields["offset"] == "0"


def test_missing_fields_are_named(server):
    c = Client(server.address)
    a = c.call(310, {"a": "pg", "c": "TBW102"}, b"x")
    assert a.code == 1 and "the custom field <topic> is null" in a.remark
    a = c.call(14, {"topic": "t"})
    assert a.code == 1 and "<consumerGroup>" in a.remark
    assert c.call(9999).code == 3       # the connection is still good


@pytest.mark.parametrize("bad", [
    struct.pack(">i", 17 * 1024 * 1024),                               # length past the 16 MiB maximum
    struct.pack(">iI", 8, 100) + b"abcd",                               # header length past the frame
    struct.pack(">iI", 10, 6) + b"{nope}",                              # header not JSON
    struct.pack(">iI", 10, (1 << 24) | 6) + b"\0\0\0\0\0\0",            # binary header cut short
    struct.pack(">iI", 6, 2) + b"{}",                                   # no code
])
def test_bad_frames_close_the_connection_and_the_server_serves_on(server, bad):
    c = Client(server.address)
    c.send_raw(bad)
    assert c.closed_by_server()
    c2 = Client(server.address)
    assert c2.call(9999).code == 3
    c2.close()
    assert server.alive()


def test_sql92_pull_and_client_check_are_refused_without_enable_property_filter(server):
    """BrokerConfig.enablePropertyFilter is off by default (4.9.7): PullMessageProcessor and
    ClientManageProcessor.checkClientConfig answer SYSTEM_ERROR for a subscription that is not by tag; a tag one
    is served as before. (The heartbeat that registers such a subscription is not refused, as in 4.9.7.)"""
    c = Client(server.address)
    remark = "The broker does not support consumer to filter message by SQL92"
    ext = {"consumerGroup": "g-nosql", "topic": "TBW102", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
           "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0",
           "subscription": "a > 1", "expressionType": "SQL92"}
    a = c.call(11, ext)
    assert (a.code, a.remark) == (1, remark)
    a = c.call(11, {**ext, "subscription": "*", "expressionType": "TAG"})
    assert a.code != 1, a.remark
    body = json.dumps({"clientId": "c", "group": "g-nosql", "subscriptionData": {
        "topic": "TBW102", "subString": "a > 1", "expressionType": "SQL92", "subVersion": 1}}).encode()
    a = c.call(46, body=body)
    assert (a.code, a.remark) == (1, remark)
    tag = json.dumps({"clientId": "c", "group": "g-nosql", "subscriptionData": {
        "topic": "TBW102", "subString": "*", "expressionType": "TAG", "subVersion": 1}}).encode()
    assert c.call(46, body=tag).code == 0
    c.close()


def test_a_half_frame_then_a_closed_socket(server):
    c = Client(server.address)
    c.send_raw(struct.pack(">i", 1000) + b"\0" * 10)
    c.close()
    c2 = Client(server.address)
    assert c2.call(105, {"topic": "TBW102"}).code == 0


def test_heartbeat_groups_retry_topic_and_rebalance_notice(server):
    a, b = Client(server.address), Client(server.address)
    hb = lambda cid: json.dumps({"clientID": cid, "producerDataSet": [], "consumerDataSet": [{
        "groupName": "cg", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False, "subscriptionDataSet": [
            {"topic": "t-hb", "subString": "*", "expressionType": "TAG", "subVersion": 1}]}]}).encode()
    assert a.call(34, body=hb("c1")).code == 0
    assert b.call(34, body=hb("c2")).code == 0
    ids = json.loads(a.call(38, {"consumerGroup": "cg"}).body)["consumerIdList"]
    assert ids == ["c1", "c2"]
    # the second member's arrival told the first to rebalance (oneway NOTIFY_CONSUMER_IDS_CHANGED)
    assert any(p.code == 40 and p.ext_fields == {"consumerGroup": "cg"} for p in a.pending)
    assert a.call(105, {"topic": "%RETRY%cg"}).code == 0
    b.close()
    n = a.read()
    assert n.code == 40
    assert json.loads(a.call(38, {"consumerGroup": "cg"}).body)["consumerIdList"] == ["c1"]
    assert a.call(38, {"consumerGroup": "nobody"}).code == 1


def test_locks_hold_a_queue_for_one_client(server):
    a, b = Client(server.address), Client(server.address)
    mq = [{"topic": "t-lock", "brokerName": "broker-x", "queueId": 0}]
    body = lambda cid: json.dumps({"consumerGroup": "lg", "clientId": cid, "mqSet": mq}).encode()
    assert json.loads(a.call(41, body=body("A")).body)["lockOKMQSet"] == mq
    assert json.loads(b.call(41, body=body("B")).body)["lockOKMQSet"] == []
    assert a.call(42, body=body("A")).code == 0
    assert json.loads(b.call(41, body=body("B")).body)["lockOKMQSet"] == mq


def test_offsets_survive_a_restart_in_consumer_offset_json(tmp_path):
    store = str(tmp_path / "s")
    with RemotingProcess(store, namesrv=False) as s:
        c = Client(s.address)
        for i in range(3):
            assert send_v2(c, "t-r", b"%d" % i).code == 0
        q = {"consumerGroup": "rg", "topic": "t-r", "queueId": "0"}
        assert c.call(15, {**q, "commitOffset": "2"}).code == 0
        c.close()
        assert s.terminate() == 0
    with open(os.path.join(store, "config", "consumerOffset.json")) as f:
        table = fastjson.loads(f.read())["offsetTable"]      # the Broker's file, fastjson's bare int keys
    assert {str(k): v for k, v in table["t-r@rg"].items()} == {"0": 2}
    with RemotingProcess(store, namesrv=False) as s:
        c = Client(s.address)
        assert c.call(14, {"consumerGroup": "rg", "topic": "t-r", "queueId": "0"}).ext_fields["offset"] == "2"
        p = c.answer(pull(c, "rg", "t-r", 0, 2))
        assert bytes(decode_message(p.body).body) == b"2"
        c.close()
        assert s.terminate() == 0


def test_view_by_id_and_query_by_key_send_the_stored_record(server):
    c = Client(server.address)
    a = send_v2(c, "t-q", b"findme", properties={"KEYS": "order-7"})
    offset = int(a.ext_fields["msgId"][16:], 16)             # the offset msg id: host, port, commitlog offset
    v = c.call(33, {"offset": str(offset)})
    assert v.code == 0 and bytes(decode_message(v.body).body) == b"findme"
    q = c.call(12, {"topic": "t-q", "key": "order-7", "maxNum": "32", "beginTimestamp": "0",
                    "endTimestamp": str(1 << 62)})
    assert q.code == 0 and bytes(decode_message(q.body).body) == b"findme"
    q = c.call(12, {"topic": "t-q", "key": "nothing", "maxNum": "32", "beginTimestamp": "0",
                    "endTimestamp": str(1 << 62)})
    assert q.code == 22


def test_a_half_message_is_seen_only_after_its_commit(server):
    c = Client(server.address)
    a = send_v2(c, "t-tx", b"half", properties={"TRAN_MSG": "true", "PGROUP": "txg"}, group="txg")
    assert a.code == 0
    assert c.answer(pull(c, "txc", "t-tx", 0, 0)).code in (19, 21)     # nothing to consume yet
    offset = int(a.ext_fields["msgId"][16:], 16)
    c.request(37, {"producerGroup": "txg", "tranStateTableOffset": a.ext_fields["queueOffset"],
                   "commitLogOffset": str(offset), "commitOrRollback": "8", "fromTransactionCheck": "false",
                   "msgId": "x"}, flag=rc.ONEWAY_FLAG)
    p = c.answer(pull(c, "txc", "t-tx", 0, 0, suspend_ms=10000))
    assert p.code == 0 and bytes(decode_message(p.body).body) == b"half"
