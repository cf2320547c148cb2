"""`rmqcore serve --remoting --acl FILE`: RocketMQ 4.x's AccessKey/Signature on the classic protocol (rmqcore/remoting/
acl.py), driven by a small client of raw frames against a server in a child process, plus the signature against a
vector the Java client's AclClientRPCHook computed (test_remoting_acl_java.py runs the Java client itself)."""
import json
import time

import pytest

from rmqcore.remoting import remoting_command as rc
from rmqcore.remoting.acl import RemotingAclValidator, request_content, resources, sign
from rmqcore.serve.auth import PUB, SUB, Acl, AddressPattern
from remoting_util import Client, RemotingProcess, props

NO_PERMISSION = 16
ACCOUNTS = {
    "accounts": [
        {"accessKey": "RocketMQ", "secretKey": "12345678", "defaultTopicPerm": "DENY", "defaultGroupPerm": "SUB",
         "topicPerms": ["acl-t=PUB|SUB", "acl-sub=SUB"], "groupPerms": ["denied-g=DENY"]},
        {"accessKey": "rocketmq2", "secretKey": "87654321", "admin": True},
        {"accessKey": "from-here", "secretKey": "whatever1", "whiteRemoteAddress": "127.0.0.*",
         "defaultTopicPerm": "DENY"},
    ],
    # another network's addresses: loopback is not let through by it
    "globalWhiteRemoteAddresses": ["10.10.103.*", "192.168.0.{1,2}"],
}
USER, ADMIN = ("RocketMQ", "12345678"), ("rocketmq2", "87654321")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("remoting-acl")
    path = d / "plain_acl.json"
    path.write_text(json.dumps(ACCOUNTS))
    with RemotingProcess(str(d / "store"), args=["--acl", str(path)]) as s:
        c = Client(s.address)
        for topic in ("acl-t", "acl-sub", "other"):
            a = signed_call(c, ADMIN, 17, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4",
                                           "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG",
                                           "topicSysFlag": "0", "order": "false"})
            assert a.code == 0, a.remark
        c.close()
        yield s


def signed_call(c: Client, who, code: int, ext: dict, body: bytes = b""):
    return c.call(code, sign(ext, body, *who) if who else ext, body)


def send_ext(topic: str, group: str = "pg") -> dict:
    return {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": str(int(time.time() * 1000)),
            "h": "0", "i": props({}), "j": "0", "k": "false", "m": "false"}


def pull_ext(topic: str, group: str) -> dict:
    return {"consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
            "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"}


def test_signature_is_the_java_clients():
    # tests/java/AclScenario.java's "vector": AclClientRPCHook(new SessionCredentials("RocketMQ", "12345678")) over
    # these fields and body printed this (run again against the JDK in test_remoting_acl_java.py)
    ext = {"b": "TopicTest", "a": "pg-\u00e9t\u00e9", "e": "3", "i": "KEYS\x01k1\x02TAGS\x01tagA\x02",
           "_UNIQUE_KEY_QUERY": "false"}
    signed = sign(ext, b"hello, acl", "RocketMQ", "12345678")
    assert signed["Signature"] == "upZxgWHG23vex+bTfk9hIvcTkNw="
    assert signed["AccessKey"] == "RocketMQ" and {k: signed[k] for k in ext} == ext
    # the content: the values in key order (AccessKey, _UNIQUE_KEY_QUERY, a, b, e, i; not Signature), then the body
    assert request_content(signed, b"xy") == ("RocketMQ" "false" "pg-\u00e9t\u00e9" "TopicTest" "3"
                                              "KEYS\x01k1\x02TAGS\x01tagA\x02").encode() + b"xy"
    # Java's TreeMap orders keys by UTF-16 code units: U+FF01 after U+1F600 (a surrogate pair, D83D DE00), the
    # other way round from code points
    assert request_content({"\uff01": "A", "\U0001f600": "B"}, None) == b"BA"


def test_address_patterns_as_rocketmq_reads_them():
    cases = {"*": ("1.2.3.4", "::1"), "192.168.0.*": ("192.168.0.7",), "192.168.1-3.*": ("192.168.2.200",),
             "10.0.0.{1,5}": ("10.0.0.5",), "10.0.0.1,10.0.0.9": ("10.0.0.9",), "::1": ("::1",),
             "127.0.0.1": ("127.0.0.1", "::ffff:127.0.0.1")}
    misses = {"": ("127.0.0.1",), "192.168.0.*": ("192.168.1.7", "::1"), "192.168.1-3.*": ("192.168.4.1",),
              "10.0.0.{1,5}": ("10.0.0.2",), "127.0.0.1": ("127.0.0.2", "garbage")}
    for text, ips in cases.items():
        assert all(AddressPattern(text, "t").matches(ip) for ip in ips), text
    for text, ips in misses.items():
        assert not any(AddressPattern(text, "t").matches(ip) for ip in ips), text
    for bad in ("192.168.*", "192.168.0.300-400", "10.0.0.{1,x}", "not-an-address", "1.2.3.4,nope"):
        with pytest.raises(ValueError, match="not an address pattern"):
            AddressPattern(bad, "accounts[0].whiteRemoteAddress")


def test_resources_each_request_code_needs():
    assert resources(310, {"a": "pg", "b": "t"}, None) == [("t", PUB)]
    assert resources(310, {"a": "g", "b": "%RETRY%g"}, None) == [("%RETRY%g", SUB)]
    assert resources(320, {"a": "pg", "b": "t"}, None) == [("t", PUB)]
    assert resources(11, {"topic": "t", "consumerGroup": "g"}, None) == [("t", SUB), ("%RETRY%g", SUB)]
    assert resources(15, {"topic": "t", "consumerGroup": "g"}, None) == [("t", SUB), ("%RETRY%g", SUB)]
    assert resources(36, {"group": "g"}, None) == [("%RETRY%g", SUB)]
    assert resources(35, {"clientID": "c", "producerGroup": "p"}, None) == []
    hb = {"clientID": "c", "producerDataSet": [{"groupName": "p"}],
          "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": "t"}, {"topic": "%RETRY%g"}]}]}
    assert resources(34, {}, json.dumps(hb).encode()) == [("%RETRY%g", SUB), ("t", SUB), ("%RETRY%g", SUB)]
    assert resources(28, {}, None) == []


def test_validator_without_a_server():
    v = RemotingAclValidator(Acl([], []))
    assert v.refusal(105, {}, None, "127.0.0.1:1") is None               # a name server request
    assert v.refusal(10, {}, None, "127.0.0.1:1") == "No accessKey is configured"


def test_name_server_requests_need_no_account(server):
    for address in (server.namesrv, server.address):
        c = Client(address)
        a = c.call(105, {"topic": "acl-t"})
        assert a.code == 0 and json.loads(a.body)["queueDatas"], a.remark
        assert c.call(106).code == 0
        c.close()


@pytest.mark.parametrize("stype", [rc.JSON, rc.ROCKETMQ])
def test_signed_send_and_pull_pass_in_either_header_type(server, stype):
    c = Client(server.address, stype)
    a = signed_call(c, USER, 310, send_ext("acl-t"), b"signed body")
    assert a.code == 0, a.remark
    a = signed_call(c, USER, 11, pull_ext("acl-t", "cg"))
    assert a.code == 0 and b"signed body" in a.body, a.remark
    c.close()


def test_refusals_are_no_permission_with_the_java_brokers_remark(server):
    c = Client(server.address)
    body = b"x"

    def stored() -> list:
        return [signed_call(c, ADMIN, 30, {"topic": t, "queueId": "0"}).ext_fields["offset"]
                for t in ("other", "acl-t")]
    before = stored()
    cases = [
        (None, 310, send_ext("acl-t"), "No accessKey is configured"),
        (("nobody", "12345678"), 310, send_ext("acl-t"), "No acl config for nobody"),
        (("RocketMQ", "wrong-secret"), 310, send_ext("acl-t"), "Check signature failed for accessKey=RocketMQ"),
        (USER, 310, send_ext("other"), "No default permission for topic:other"),
        (USER, 310, send_ext("acl-sub"), "No default permission for topic:acl-sub"),
        (USER, 320, send_ext("other"), "No default permission for topic:other"),
        (USER, 11, pull_ext("acl-t", "denied-g"), "No default permission for group:denied-g"),
        (USER, 11, pull_ext("other", "cg"), "No default permission for topic:other"),
        (USER, 15, {**pull_ext("acl-t", "denied-g"), "commitOffset": "1"}, "No default permission for group:denied-g"),
        (USER, 17, {"topic": "made-by-user", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1",
                    "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"},
         "Need admin permission for request code=17, but accessKey=RocketMQ is not"),
    ]
    for who, code, ext, remark in cases:
        a = signed_call(c, who, code, ext, body)
        assert (a.code, a.remark) == (NO_PERMISSION, remark), (who, code)
    # a signed request changed on the way: its body, or a field
    signed = sign(send_ext("acl-t"), b"body", *USER)
    assert c.call(310, signed, b"b0dy").remark == "Check signature failed for accessKey=RocketMQ"
    assert c.call(310, {**signed, "e": "1"}, b"body").remark == "Check signature failed for accessKey=RocketMQ"
    hb = {"clientID": "c1", "consumerDataSet": [{"groupName": "denied-g", "consumeType": "CONSUME_PASSIVELY",
                                                 "messageModel": "CLUSTERING", "subscriptionDataSet": []}]}
    a = signed_call(c, USER, 34, {}, json.dumps(hb).encode())
    assert (a.code, a.remark) == (NO_PERMISSION, "No default permission for group:denied-g")
    # nothing of the refused requests reached the store
    assert stored() == before
    c.close()


def test_admin_and_white_listed_accounts(server):
    c = Client(server.address)
    a = signed_call(c, ADMIN, 310, send_ext("other"), b"admin's")
    assert a.code == 0, a.remark
    # from-here's whiteRemoteAddress is this address: its requests need no signature, nor permissions (as 4.x)
    a = c.call(310, {**send_ext("other"), "AccessKey": "from-here"}, b"white")
    assert a.code == 0, a.remark
    c.close()


def test_global_white_list_lets_unsigned_requests_through(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text("globalWhiteRemoteAddresses:\n  - 127.0.0.1\naccounts:\n  - accessKey: RocketMQ\n"
                    "    secretKey: 12345678\n")
    with RemotingProcess(str(tmp_path / "store"), args=["--acl", str(path)]) as s:
        c = Client(s.address)
        a = c.call(17, {"topic": "g-t", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1",
                        "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})
        assert a.code == 0, a.remark
        c.close()


def test_a_bad_pattern_in_the_file_stops_serve(tmp_path):
    path = tmp_path / "plain_acl.json"
    path.write_text(json.dumps({"accounts": [{"accessKey": "a", "secretKey": "b", "whiteRemoteAddress": "1.2.*"}]}))
    with pytest.raises(RuntimeError, match=r"accounts\[0\]\.whiteRemoteAddress: '1\.2\.\*' is not an address"):
        RemotingProcess(str(tmp_path / "store"), args=["--acl", str(path)])


def test_the_console_of_a_remoting_only_server_asks_for_the_same_accounts(tmp_path):
    # before, --acl reached only the gRPC front: with --remoting alone the console's reads were open
    pytest.importorskip("aiohttp")
    import base64
    import urllib.error
    import urllib.request
    path = tmp_path / "plain_acl.json"
    path.write_text(json.dumps(ACCOUNTS))
    with RemotingProcess(str(tmp_path / "store"), args=["--acl", str(path), "--http", "127.0.0.1:0"],
                         namesrv=False) as s:
        url = s.lines["console"].rstrip("/") + "/"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url, timeout=30)
        assert e.value.code == 401
        token = base64.b64encode(b"RocketMQ:12345678").decode()
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": f"Basic {token}"}),
                                    timeout=30) as r:
            assert r.status == 200
