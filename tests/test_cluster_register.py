"""forceRegister=false: the periodic registration asks each name server QUERY_DATA_VERSION (322) and sends
REGISTER_BROKER (103) only when the topic table's dataVersion changed (rocketmq-all-4.9.7
BrokerController.registerBrokerAll → BrokerOuterAPI.needRegister); the name server takes an unchanged query as the
broker's heartbeat (DefaultRequestProcessor.queryBrokerTopicConfig → RouteInfoManager
.updateBrokerInfoUpdateTimestamp).

The broker (``rmqcore serve``, registerNameServerPeriod 10 s, the least BrokerController allows) reaches its name
server through a relay in this process that counts the request codes it sees. Against rmqcore's embedded name server
and, where the Java harness is present, the Java 4.9.7 NamesrvStartup. Staying registered past the name server's
120 s expiry (RouteInfoManager.BROKER_CHANNEL_EXPIRED_TIME, a constant in 4.9.7: no knob shortens it) takes over two
minutes and runs with RMQCORE_SOAK=1; the expiry logic itself is checked with the embedded name server's clock
passed in."""
from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from collections import Counter

import pytest

from remoting_util import Client, RemotingProcess
from rmqcore.remoting.namesrv import BROKER_CHANNEL_EXPIRED_TIME, RouteInfoManager

CLUSTER = "RegCluster"
REGISTER_BROKER, QUERY_DATA_VERSION = 103, 322
PERIOD_S = 10                   # registerNameServerPeriod 10000: BrokerController's floor
SOAK = os.environ.get("RMQCORE_SOAK") == "1"


class CountingRelay:
    """A TCP relay to ``upstream`` counting the requests (flag bit 0 clear) of the frames the clients send:
    ``[total 4][type 1 + header length 3][JSON header][body]``."""

    def __init__(self, upstream: str):
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.codes: Counter = Counter()
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.socks = [self.sock]
        threading.Thread(target=self._accept, daemon=True).start()

    def count(self, code: int) -> int:
        with self.lock:
            return self.codes[code]

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream)
            self.socks += [down, up]
            threading.Thread(target=self._pump, args=(down, up, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, False), daemon=True).start()

    def _pump(self, src, dst, requests: bool) -> None:
        buf = b""
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                if not requests:
                    continue
                buf += data
                while len(buf) >= 8:
                    total, = struct.unpack(">i", buf[:4])
                    if len(buf) < 4 + total:
                        break
                    hlen = struct.unpack(">i", buf[4:8])[0] & 0xFFFFFF
                    header = json.loads(buf[8:8 + hlen])
                    if not header.get("flag", 0) & 1:
                        with self.lock:
                            self.codes[header["code"]] += 1
                    buf = buf[4 + total:]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        for s in self.socks:
            s.close()


def _call(addr: str, code: int, ext=None, body: bytes = b""):
    c = Client(addr)
    try:
        return c.call(code, ext or {}, body)
    finally:
        c.close()


def _broker_names(ns: str) -> set[str]:
    from rmqcore import fastjson
    return set(fastjson.loads(_call(ns, 106).body.decode())["brokerAddrTable"])


def _routed(ns: str, topic: str) -> bool:
    return _call(ns, 105, {"topic": topic}).code == 0


def _wait(what, predicate, deadline_s: float = 40):
    """Wait for what another process does in its own time (a periodic registration round)."""
    end = time.monotonic() + deadline_s
    while not (value := predicate()):
        assert time.monotonic() < end, f"still not {what}"
        time.sleep(0.2)
    return value


def _create_topic(address: str, topic: str) -> None:
    a = _call(address, 17, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2",
                            "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})
    assert a.code == 0, a.remark


def unchanged_rounds_only_query(ns: str, tmp_path, past_expiry: bool = False) -> None:
    relay = CountingRelay(ns)
    conf = {"brokerClusterName": CLUSTER, "brokerName": "broker-q", "namesrvAddr": relay.address,
            "forceRegister": "false", "registerNameServerPeriod": str(PERIOD_S * 1000)}
    try:
        with RemotingProcess(str(tmp_path / "broker-q"), conf, namesrv=False) as b:
            _wait("registered", lambda: "broker-q" in _broker_names(ns))
            assert relay.count(REGISTER_BROKER) == 1                  # at start: always in full
            # periodic rounds, nothing changed: a query each, no registration
            _wait("two periodic queries", lambda: relay.count(QUERY_DATA_VERSION) >= 2, 3 * PERIOD_S + 10)
            assert relay.count(REGISTER_BROKER) == 1
            if past_expiry:
                end = time.monotonic() + BROKER_CHANNEL_EXPIRED_TIME + 2 * PERIOD_S
                while time.monotonic() < end:
                    time.sleep(PERIOD_S)
                    assert "broker-q" in _broker_names(ns), "the queries did not keep the broker alive"
                assert relay.count(REGISTER_BROKER) == 1
            # a change registers in full at once; the next periodic round is a query again
            _create_topic(b.address, "reg-topic")
            _wait("routed", lambda: _routed(ns, "reg-topic"))
            assert relay.count(REGISTER_BROKER) == 2
            queries = relay.count(QUERY_DATA_VERSION)
            _wait("one more query", lambda: relay.count(QUERY_DATA_VERSION) > queries, 2 * PERIOD_S + 10)
            assert relay.count(REGISTER_BROKER) == 2
            assert b.terminate() == 0
        assert "broker-q" not in _broker_names(ns)                    # UNREGISTER_BROKER at SIGTERM
    finally:
        relay.close()


def test_periodic_rounds_query_the_embedded_name_server_and_a_change_registers(tmp_path):
    with RemotingProcess(str(tmp_path / "ns"), {"brokerName": "ns-broker", "brokerClusterName": CLUSTER}) as ns:
        unchanged_rounds_only_query(ns.namesrv, tmp_path, past_expiry=SOAK)


def test_the_default_force_register_registers_every_period(tmp_path):
    with RemotingProcess(str(tmp_path / "ns"), {"brokerName": "ns-broker", "brokerClusterName": CLUSTER}) as ns:
        relay = CountingRelay(ns.namesrv)
        conf = {"brokerClusterName": CLUSTER, "brokerName": "broker-f", "namesrvAddr": relay.address,
                "registerNameServerPeriod": str(PERIOD_S * 1000)}
        try:
            with RemotingProcess(str(tmp_path / "broker-f"), conf, namesrv=False):
                _wait("a periodic registration", lambda: relay.count(REGISTER_BROKER) >= 2, 2 * PERIOD_S + 10)
                assert relay.count(QUERY_DATA_VERSION) == 0
        finally:
            relay.close()


@pytest.fixture
def java_namesrv(tmp_path):
    from test_ha_cluster_java import namesrv
    from java_util import build_dir, ensure_build
    ensure_build()
    cp = os.path.join(build_dir(), "classes") + ":" + open(os.path.join(build_dir(), "cp.txt")).read().strip()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tmp_path / "jns"
    run.mkdir()
    ns = namesrv(cp, str(run), port)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        ns.kill()


def test_periodic_rounds_query_the_java_name_server_and_a_change_registers(java_namesrv, tmp_path):
    unchanged_rounds_only_query(java_namesrv, tmp_path, past_expiry=SOAK)


def test_an_unchanged_query_is_a_heartbeat_a_changed_one_is_not():
    routes = RouteInfoManager()
    table = {"t": {"topicName": "t", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}}
    v1, v2 = {"counter": 1, "timestamp": 5}, {"counter": 2, "timestamp": 6}
    routes.register_broker(CLUSTER, "h:1", "b1", 0, "h:2", v1, table, object(), now=1000.0)
    # QUERY_DATA_VERSION with the registered version: unchanged, and alive as of the query
    assert routes.query_data_version("h:1", dict(v1), now=1100.0) == (False, v1)
    assert routes.scan_not_active_broker(now=1000.0 + BROKER_CHANNEL_EXPIRED_TIME + 50) == []
    # another version: changed, the name server's version in the answer, and no refresh
    assert routes.query_data_version("h:1", v2, now=1200.0) == (True, v1)
    assert routes.scan_not_active_broker(now=1100.0 + BROKER_CHANNEL_EXPIRED_TIME + 1) == ["h:1"]
    # a broker the name server does not know: changed, no version
    assert routes.query_data_version("h:1", v1, now=1300.0) == (True, None)


def test_query_data_version_over_the_wire_and_its_bad_requests(tmp_path):
    with RemotingProcess(str(tmp_path / "ns"), {"brokerName": "ns-broker", "brokerClusterName": CLUSTER}) as ns:
        ext = {"brokerName": "x", "brokerAddr": "127.0.0.1:1", "clusterName": CLUSTER, "brokerId": "0"}
        a = _call(ns.namesrv, QUERY_DATA_VERSION, ext, b'{"counter":1,"timestamp":2}')
        assert a.code == 0 and a.ext_fields["changed"] == "true" and not a.body
        # the broker asking its own name server: its table's version, unchanged
        own = _call(ns.namesrv, QUERY_DATA_VERSION, {**ext, "brokerName": "ns-broker", "brokerAddr": ns.address},
                    b'{"counter":0,"timestamp":0}')
        assert own.code == 0 and own.ext_fields["changed"] == "true"
        a = _call(ns.namesrv, QUERY_DATA_VERSION, {**ext, "brokerName": "ns-broker", "brokerAddr": ns.address},
                  own.body)
        assert a.code == 0 and a.ext_fields["changed"] == "false" and a.body == own.body
        for bad_ext, body, says in [({k: v for k, v in ext.items() if k != "brokerAddr"}, b"{}", "<brokerAddr>"),
                                    ({**ext, "brokerId": "one"}, b"{}", "brokerId"),
                                    (ext, b"[1]", "not a DataVersion"), (ext, b"\xff", "not a DataVersion"),
                                    (ext, b'{"counter":"1","timestamp":2}', "not a DataVersion")]:
            a = _call(ns.namesrv, QUERY_DATA_VERSION, bad_ext, body)
            assert a.code == 1 and says in a.remark, (bad_ext, body, a.remark)
        assert _routed(ns.namesrv, "TBW102")           # still serving
