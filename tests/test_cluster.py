"""rmqcore in a cluster without a JVM: `rmqcore serve --remoting --namesrv-addr` registering with another rmqcore's
embedded name server (BrokerOuterAPI → RouteInfoManager), routes over both, a broker leaving at SIGTERM
(UNREGISTER_BROKER), at a kill (its registering connection closes) and after 120 s without a registration, a name
server restart (registration resumes), REGISTER_BROKER's checks, and the write-permission commands. The mixed
cluster with Java's name server and broker is tests/test_cluster_java.py."""
from __future__ import annotations

import json
import signal
import socket
import time
import zlib

import pytest

from rmqcore.remoting import register_broker_body as body
from rmqcore.remoting.namesrv import RouteInfoManager
from remoting_util import Client, RemotingProcess, send_v2

CLUSTER = "C"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _route(namesrv: str, topic: str):
    c = Client(namesrv)
    try:
        a = c.call(105, {"topic": topic})
        return json.loads(a.body) if a.code == 0 else None
    finally:
        c.close()


def _brokers(route) -> dict[str, str]:
    return {} if route is None else {d["brokerName"]: d["brokerAddrs"]["0"] for d in route["brokerDatas"]}


def _wait(what, predicate, deadline_s: float = 30):
    """Wait for a state another process reaches in its own time (a registration, a closed connection)."""
    end = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < end, f"still not {what}"
        time.sleep(0.1)


def _create_topic(address: str, topic: str, queues: int) -> None:
    c = Client(address)
    a = c.call(17, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
                    "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
                    "topicSysFlag": "0", "order": "false"})
    c.close()
    assert a.code == 0, a.remark


def _broker(tmp_path, name: str, namesrv: str | None = None, conf=None, ns_port: int | None = None, args=()):
    args = (["--namesrv-addr", namesrv] if namesrv else []) + list(args)
    if ns_port is not None:
        args += ["--namesrv", f"127.0.0.1:{ns_port}"]
    return RemotingProcess(str(tmp_path / name), {"brokerName": name, "brokerClusterName": CLUSTER, **(conf or {})},
                           args, namesrv=False)


@pytest.mark.parametrize("compressed", [False, True])
def test_two_rmqcore_brokers_form_a_cluster_and_one_leaves_at_sigterm(tmp_path, compressed):
    with RemotingProcess(str(tmp_path / "broker-a"), {"brokerName": "broker-a", "brokerClusterName": CLUSTER}) as a:
        conf = {"compressedRegister": "true"} if compressed else {}
        with _broker(tmp_path, "broker-b", a.namesrv, conf) as b:
            _create_topic(a.address, "both", 3)
            _create_topic(b.address, "both", 2)      # a topic change: broker-b registers again at once
            route = _wait("routed to both", lambda: (r := _route(a.namesrv, "both")) and len(_brokers(r)) == 2 and r)
            assert _brokers(route) == {"broker-a": a.address, "broker-b": b.address}
            assert {q["brokerName"]: q["writeQueueNums"] for q in route["queueDatas"]} == {"broker-a": 3,
                                                                                          "broker-b": 2}
            c = Client(a.namesrv)
            info = json.loads(c.call(106).body)
            assert info["clusterAddrTable"] == {CLUSTER: ["broker-a", "broker-b"]}
            assert info["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": b.address}
            topics = json.loads(c.call(206).body)["topicList"]
            assert {"both", "broker-a", "broker-b"} <= set(topics)
            # a client follows the route to broker-b and sends there
            cb = Client(_brokers(route)["broker-b"])
            assert send_v2(cb, "both", b"to b", 1).code == 0
            cb.close()
            assert b.terminate() == 0
            # UNREGISTER_BROKER was answered before broker-b exited: gone at once, its own topic with it
            assert _brokers(_route(a.namesrv, "both")) == {"broker-a": a.address}
            assert _route(a.namesrv, "broker-b") is None
            info = json.loads(c.call(106).body)
            assert info["clusterAddrTable"] == {CLUSTER: ["broker-a"]}
            c.close()


def test_a_killed_broker_leaves_the_routes_when_its_connection_closes(tmp_path):
    with RemotingProcess(str(tmp_path / "broker-a"), {"brokerName": "broker-a", "brokerClusterName": CLUSTER}) as a:
        with _broker(tmp_path, "broker-b", a.namesrv) as b:
            _wait("registered", lambda: _route(a.namesrv, "broker-b"))
            b.kill()                                       # no UNREGISTER_BROKER: only the closed connection says
            _wait("dropped", lambda: _route(a.namesrv, "broker-b") is None)
        assert _brokers(_route(a.namesrv, "TBW102")) == {"broker-a": a.address}


def test_registration_resumes_after_the_name_server_restarts_and_the_broker_serves_on(tmp_path):
    port = _free_port()
    ns = f"127.0.0.1:{port}"
    conf_a = {"brokerName": "broker-a", "brokerClusterName": CLUSTER}
    a = _broker(tmp_path, "broker-a", ns_port=port)
    try:
        with _broker(tmp_path, "broker-b", ns) as b:
            _wait("registered", lambda: _route(ns, "broker-b"))
            a.kill()
            # the name server is gone: broker-b goes on serving
            cb = Client(b.address)
            for i in range(3):
                assert send_v2(cb, "t-b", f"m{i}".encode()).code == 0
            time.sleep(2)                                   # a few reconnection attempts fail meanwhile
            a = RemotingProcess(str(tmp_path / "broker-a"), conf_a, ["--namesrv", ns], namesrv=False)
            route = _wait("registered again", lambda: _route(ns, "t-b"))
            assert _brokers(route) == {"broker-b": b.address}
            assert send_v2(cb, "t-b", b"after").code == 0
            cb.close()
            b.proc.send_signal(signal.SIGTERM)
            assert b.proc.wait(30) == 0
            err = b.proc.stderr.read()
    finally:
        if a.alive():
            a.kill()
    # one line when the name server went, one when registration resumed, none per failed attempt
    assert err.count("registering with name server") == 1, err
    assert err.count("registered with name server") == 1, err


def test_register_broker_checks_the_body_crc_and_reads_the_compressed_layout(tmp_path):
    with RemotingProcess(str(tmp_path / "a"), {"brokerName": "broker-a", "brokerClusterName": CLUSTER}) as a:
        c = Client(a.namesrv)
        version = {"counter": 3, "timestamp": 1700000000000}
        table = {"t-x": {"topicName": "t-x", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                         "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}}
        head = {"brokerName": "broker-x", "brokerAddr": "127.0.0.1:1", "clusterName": CLUSTER,
                "haServerAddr": "127.0.0.1:2", "brokerId": "0", "compressed": "false"}
        plain = body.encode(version, table)
        ans = c.call(103, {**head, "bodyCrc32": str(body.body_crc32(plain) ^ 1)}, plain)
        assert (ans.code, ans.remark) == (1, "crc32 not match")
        assert _route(a.namesrv, "t-x") is None
        ans = c.call(103, {**head, "brokerName": "broker-y", "brokerAddr": "127.0.0.1:3"}, b"{not json")
        assert ans.code == 1 and "RegisterBrokerBody" in ans.remark
        packed = body.encode(version, table, compressed=True)
        assert zlib.decompress(packed)[:4] == len(json.dumps(version, separators=(",", ":"))).to_bytes(4, "big")
        ans = c.call(103, {**head, "compressed": "true", "bodyCrc32": str(body.body_crc32(packed))}, packed)
        assert ans.code == 0
        route = _route(a.namesrv, "t-x")
        assert _brokers(route) == {"broker-x": "127.0.0.1:1"}
        assert route["queueDatas"] == [{"brokerName": "broker-x", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                                        "writeQueueNums": 4}]
        # a slave of broker-x is told its master's address and HA address; its topics are not taken
        slave_table = {"t-slave": {**table["t-x"], "topicName": "t-slave"}}
        ans = c.call(103, {**head, "brokerId": "1", "brokerAddr": "127.0.0.1:5", "haServerAddr": "127.0.0.1:6",
                           "bodyCrc32": "0"}, body.encode(version, slave_table))
        assert ans.code == 0 and ans.ext_fields["masterAddr"] == "127.0.0.1:1"
        assert ans.ext_fields["haServerAddr"] == "127.0.0.1:2"
        assert _route(a.namesrv, "t-slave") is None
        assert _route(a.namesrv, "t-x")["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:1", "1": "127.0.0.1:5"}
        ans = c.call(103, {"brokerName": "broker-z"})
        assert ans.code == 1 and "<brokerAddr> is null" in ans.remark
        bad = body.encode(version, {"t-bad": {**table["t-x"], "topicName": "t-bad", "perm": "rw"}})
        ans = c.call(103, {**head, "brokerName": "broker-w", "brokerAddr": "127.0.0.1:7", "bodyCrc32": "0"}, bad)
        assert ans.code == 1 and "topicConfigTable.t-bad.perm is not a Java int" in ans.remark
        assert _route(a.namesrv, "t-bad") is None and "broker-w" not in json.loads(c.call(106).body)["brokerAddrTable"]
        c.close()                    # the connection broker-x registered on: gone with it
        _wait("dropped", lambda: _route(a.namesrv, "t-x") is None)


def test_wipe_and_add_write_perm_on_the_embedded_name_server(tmp_path):
    with RemotingProcess(str(tmp_path / "broker-a"), {"brokerName": "broker-a", "brokerClusterName": CLUSTER}) as a:
        with _broker(tmp_path, "broker-b", a.namesrv) as b:
            for x in (a, b):
                _create_topic(x.address, "both", 2)
            _wait("routed to both", lambda: len(_brokers(_route(a.namesrv, "both"))) == 2)
            c = Client(a.namesrv)
            for name in ("broker-b", "broker-a"):        # a registered broker, and the name server's own
                ans = c.call(205, {"brokerName": name})
                assert ans.code == 0 and int(ans.ext_fields["wipeTopicCount"]) >= 1
                perms = {q["brokerName"]: q["perm"] for q in _route(a.namesrv, "both")["queueDatas"]}
                assert perms[name] == 4                   # readable, not writeable: producers drain it
            # broker-b's periodic or change-driven registrations keep the wipe while its dataVersion is unchanged
            _create_topic(b.address, "other", 1)          # ... a changed one takes its table again
            _wait("re-admitted by a new dataVersion",
                  lambda: {q["brokerName"]: q["perm"] for q in _route(a.namesrv, "both")["queueDatas"]}["broker-b"]
                  == 6)
            ans = c.call(327, {"brokerName": "broker-a"})
            assert ans.code == 0 and int(ans.ext_fields["addTopicCount"]) >= 1
            perms = {q["brokerName"]: q["perm"] for q in _route(a.namesrv, "both")["queueDatas"]}
            assert perms == {"broker-a": 6, "broker-b": 6}
            c.close()


def test_a_broker_not_registered_for_120_s_expires():
    routes = RouteInfoManager()
    table = {"t": {"topicName": "t", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}}
    conn = object()
    routes.register_broker(CLUSTER, "h:1", "b1", 0, "h:2", {"counter": 1, "timestamp": 1}, table, conn, now=1000.0)
    routes.register_broker(CLUSTER, "h:3", "b2", 0, "h:4", {"counter": 1, "timestamp": 1}, table, object(),
                           now=1100.0)
    assert routes.scan_not_active_broker(now=1119.0) == []
    assert routes.scan_not_active_broker(now=1120.5) == ["h:1"]
    assert [d["brokerName"] for d in routes.pickup_topic_route_data("t")["brokerDatas"]] == ["b2"]
    # a registration refreshes; the same dataVersion leaves queue data (a wipe) alone
    routes.register_broker(CLUSTER, "h:3", "b2", 0, "h:4", {"counter": 1, "timestamp": 1}, table, None, now=1200.0)
    assert routes.operate_write_perm("b2", add=False) == 1
    routes.register_broker(CLUSTER, "h:3", "b2", 0, "h:4", {"counter": 1, "timestamp": 1}, table, None, now=1201.0)
    assert routes.pickup_topic_route_data("t")["queueDatas"][0]["perm"] == 4
    routes.register_broker(CLUSTER, "h:3", "b2", 0, "h:4", {"counter": 2, "timestamp": 2}, table, None, now=1202.0)
    assert routes.pickup_topic_route_data("t")["queueDatas"][0]["perm"] == 6


def test_a_slave_learns_its_master_from_the_name_server_and_replicates(tmp_path):
    from remoting_util import pull
    from rmqcore._message import decode_message
    geometry = {"mappedFileSizeCommitLog": str(1024 * 1024)}
    with RemotingProcess(str(tmp_path / "master"), {"brokerName": "broker-a", "brokerClusterName": CLUSTER,
                                                      **geometry}, ["--ha-listen", "127.0.0.1:0"]) as a:
        # no haMasterAddress: the slave replicates from the address its registration is answered with
        with _broker(tmp_path, "slave", a.namesrv, {"brokerName": "broker-a", "brokerRole": "SLAVE",
                                                    "brokerId": "1", **geometry}) as b:
            route = _wait("slave registered", lambda: (r := _route(a.namesrv, "TBW102"))
                          and len(r["brokerDatas"][0]["brokerAddrs"]) == 2 and r)
            assert route["brokerDatas"][0]["brokerAddrs"] == {"0": a.address, "1": b.address}
            assert len(route["queueDatas"]) == 1          # queue data from the master (id 0) only
            for x in (a, b):       # the slave's own topic table (its metadata pulls are not what this test is about)
                _create_topic(x.address, "t-rep", 1)
            ca = Client(a.address)
            assert send_v2(ca, "t-rep", b"replicated", 0).code == 0
            ca.close()
            cb = Client(b.address)

            def pulled():
                ans = cb.answer(pull(cb, "g", "t-rep", 0, 0))
                return ans.code == 0 and ans
            ans = _wait("replicated to the slave", pulled)
            assert decode_message(ans.body).body == b"replicated"
            cb.close()


@pytest.mark.parametrize("args, says", [
    (["--remoting", "127.0.0.1:0", "--namesrv-addr", "nowhere"], "--namesrv-addr: 'nowhere' is not HOST:PORT"),
    (["--remoting", "127.0.0.1:0", "--namesrv-addr", "127.0.0.1:9876;x:99999"], "'x:99999' is not HOST:PORT"),
    (["--listen", "127.0.0.1:0", "--namesrv-addr", "127.0.0.1:9876"], "--namesrv-addr goes with --remoting"),
])
def test_a_bad_name_server_address_is_one_line_and_no_store(tmp_path, args, says):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "rmqcore", "serve", str(tmp_path / "s"), *args], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "s").exists()


def test_a_broker_permission_change_is_registered_at_once(tmp_path):
    pytest.importorskip("aiohttp")
    import urllib.request

    def post_permission(console: str, perm: int) -> None:
        with urllib.request.urlopen(console.rstrip("/") + "/api/v1/session", timeout=10) as r:
            token = json.loads(r.read())["csrf_token"]
        req = urllib.request.Request(console.rstrip("/") + "/api/v1/broker/config", method="POST",
                                     data=json.dumps({"brokerPermission": perm}).encode(),
                                     headers={"Content-Type": "application/json", "X-RMQ-CSRF-Token": token})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200

    with RemotingProcess(str(tmp_path / "broker-a"), {"brokerName": "broker-a", "brokerClusterName": CLUSTER}) as a:
        with _broker(tmp_path, "broker-b", a.namesrv, args=["--http", "127.0.0.1:0",
                                                           "--console-allow-anonymous-changes"]) as b:
            _create_topic(b.address, "t-perm", 2)
            _wait("routed", lambda: (_route(a.namesrv, "t-perm") or {}).get("queueDatas"))

            def perm():
                return _route(a.namesrv, "t-perm")["queueDatas"][0]["perm"]
            assert perm() == 6
            post_permission(b.lines["console"], 4)         # updateBrokerConfig brokerPermission=4: read only
            _wait("read-only in the routes", lambda: perm() == 4)
            post_permission(b.lines["console"], 6)
            _wait("writeable again", lambda: perm() == 6)


def test_a_broker_registered_with_its_own_name_server_stays_routed(tmp_path):
    port = _free_port()
    ns = f"127.0.0.1:{port}"
    with _broker(tmp_path, "broker-a", ns, ns_port=port) as a:
        _create_topic(a.address, "t-own", 1)
        c = Client(ns)
        # another broker's UNREGISTER_BROKER naming broker-a's id takes it out; the next read puts it back
        assert c.call(104, {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:1", "clusterName": CLUSTER,
                            "brokerId": "0"}).code == 0
        assert _brokers(_route(ns, "t-own")) == {"broker-a": a.address}
        c.close()
        a.kill()      # its registering connection closes with it; nothing of its own entry hung on that connection
