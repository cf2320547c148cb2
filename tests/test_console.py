"""The console and /metrics (rmqcore.console) against a real broker in a child process (tests/console_host.py):
the figures on the pages, in the JSON API and in /metrics equal what the host's producer and consumers did."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

import rmqcore

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from console_client import HostProcess, q  # noqa: E402


@pytest.fixture
def host(tmp_path):
    h = HostProcess(str(tmp_path / "store"), anonymous_changes=True)
    yield h
    assert h.stop() == 0


def metric_values(text: str) -> dict:
    """{(sample name, frozenset(labels)): value} from a /metrics answer, parsed by prometheus_client."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(values: dict, name: str, **labels) -> float:
    hits = [v for (n, ls), v in values.items() if n == name and set(labels.items()) <= ls]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_lag_inflight_and_dlq_equal_what_the_consumers_saw(host):
    sent = host.cmd("send", topic="orders", n=40, key_prefix="order")
    consumed = host.cmd("consume", group="billing", topic="orders", max_count=10, ack=True)
    held = host.cmd("consume", group="billing", topic="orders", max_count=6, ack=False)
    dead = host.cmd("dlq", group="audit", topic="orders", n=3)
    assert len(consumed) == 10 and len(held) == 6 and len(dead) == 3

    g = host.get("/api/v1/groups/billing")
    assert g["lag"] == 40 - 10                    # committed: the 10 acked; the 6 held are still lag
    assert g["inflight"] == 6
    assert sum(r["ready"] for r in g["queues"]) == 40 - 10 - 6
    for r in g["queues"]:
        assert r["lag"] == r["broker_offset"] - r["consumer_offset"]
    a = host.get("/api/v1/groups/audit")
    assert a["dlq_messages"] == 3 and a["sent_to_dlq"] == 3
    dlq = host.get("/api/v1/groups/audit/dlq")
    assert sorted(m["keys"][0] for m in dlq["items"]) == sorted(d["key"] for d in dead)
    assert all(m["retry_topic"] == "orders" for m in dlq["items"])

    values = metric_values(host.get("/metrics"))
    assert sample(values, "rocketmq_messages_in_total", topic="orders") == 40
    assert sample(values, "rocketmq_consumer_lag_messages", topic="orders", consumer_group="billing") == 30
    assert sample(values, "rocketmq_consumer_inflight_messages", topic="orders", consumer_group="billing") == 6
    assert sample(values, "rocketmq_consumer_ready_messages", topic="orders", consumer_group="billing") == 24
    assert sample(values, "rocketmq_send_to_dlq_messages_total", consumer_group="audit", topic="orders") == 3
    assert sample(values, "rocketmq_messages_out_total", topic="orders", consumer_group="billing") == 16
    assert sample(values, "rocketmq_message_size_count") == 40
    assert sample(values, "rocketmq_throughput_in_total", topic="orders") == sum(
        len(f'{{"topic": "orders", "i": {i}, "key": "order-{i}"}}') for i in range(40))
    assert sample(values, "rmqcore_commitlog_max_offset_bytes") >= sent[-1]["commitlog_offset"]
    # The oldest unconsumed message of billing is the first of the 30 not acked: its age is >= 0 and small.
    assert 0 <= sample(values, "rocketmq_consumer_lag_latency", topic="orders", consumer_group="billing") < 120_000


def test_rpc_latency_and_connections_in_metrics(host):
    host.cmd("rpc", method="SendMessage", status="OK", seconds=0.003)
    host.cmd("rpc", method="SendMessage", status="OK", seconds=0.2)
    host.cmd("client", client_id="c1", kind="SIMPLE_CONSUMER", group="billing", language="JAVA", version="5.0.7")
    host.cmd("client", client_id="p1", kind="PRODUCER", language="PYTHON", version="5.0.4")
    values = metric_values(host.get("/metrics"))
    assert sample(values, "rocketmq_rpc_latency_count", request_code="SendMessage", response_code="OK") == 2
    assert sample(values, "rocketmq_rpc_latency_bucket", request_code="SendMessage", le="5.0") == 1
    assert sample(values, "rocketmq_rpc_latency_bucket", request_code="SendMessage", le="200.0") == 2
    assert sample(values, "rocketmq_rpc_latency_sum", request_code="SendMessage") == pytest.approx(203.0)
    assert sample(values, "rocketmq_consumer_connections", consumer_group="billing", consume_mode="pop") == 1
    assert sample(values, "rocketmq_producer_connections", language="PYTHON") == 1
    g = host.get("/api/v1/groups/billing")
    assert [c["client_id"] for c in g["clients_detail"]] == ["c1"]


def test_every_page_renders_with_the_stores_figures(host):
    host.cmd("send", topic="orders", n=12, key_prefix="order")
    host.cmd("consume", group="billing", topic="orders", max_count=5, ack=True)
    dead = host.cmd("dlq", group="audit", topic="orders", n=1)
    overview = host.get("/")
    assert "Overview" in overview and "Messages per second" in overview
    topics = host.get("/topics")
    assert re.search(r'href="/topics/orders">orders</a>', topics)
    topic = host.get("/topics/orders")
    assert 'href="/groups/billing"' in topic
    assert host.get("/groups").count('href="/groups/') >= 2
    group = host.get("/groups/billing")
    assert 'id="group-lag">7<' in group
    dlq_page = host.get("/groups/audit")
    assert dead[0]["key"] in dlq_page
    assert host.get(f"/messages/{dead[0]['dlq_commitlog_offset']}").count("Resend to audit") == 1
    for path in ("/messages", "/messages?topic=orders", "/messages?topic=orders&key=order-3"):
        assert "<table" in host.get(path) or path == "/messages"
    status, _h, page = host.request("GET", "/topics/nope")
    assert status == 404 and "does not exist" in page
    status, _h, body = host.request("GET", "/api/v1/messages/999999999")
    assert status == 404 and "no message starts at commitlog offset 999999999" in body["error"]
    for path in ("/", "/topics", "/groups/billing", "/messages?topic=orders"):
        _s, h, _p = host.request("GET", path)
        assert float(h["Server-Timing"].split("dur=")[1]) < 200


def test_search_by_key_id_and_time_pages_without_gaps(host):
    sent = host.cmd("send", topic="orders", n=30, key_prefix="order")
    by_key = host.get("/api/v1/messages?topic=orders&key=order-17")
    assert [m["keys"] for m in by_key["items"]] == [["order-17"]]
    m = host.get(f"/api/v1/messages/{by_key['items'][0]['commitlog_offset']}")
    s = sent[17]
    assert (m["queue_id"], m["queue_offset"], m["commitlog_offset"]) == (s["queue_id"], s["queue_offset"],
                                                                      s["commitlog_offset"])
    assert m["properties"]["KEYS"] == "order-17" and '"key": "order-17"' in m["json"]
    assert m["hex"].startswith("00000000  7b 22")          # '{"'
    assert host.get(f"/api/v1/messages?msg_id={s['msg_id']}")["items"][0]["commitlog_offset"] == \
        s["commitlog_offset"]
    assert host.get(f"/api/v1/messages?msg_id={s['uniq_key']}")["items"][0]["commitlog_offset"] == \
        s["commitlog_offset"]
    # Paging by store time: walk the cursor 7 at a time; every message once, in store order.
    begin, end = sent[0]["store_timestamp"], sent[-1]["store_timestamp"]
    seen, after = [], ""
    for _ in range(20):
        page = host.get(f"/api/v1/messages?topic=orders&begin={begin}&end={end}&limit=7&after={q(after)}")
        seen += [r["commitlog_offset"] for r in page["items"]]
        if not page["next"]:
            break
        after = page["next"]
    assert seen == [x["commitlog_offset"] for x in sent]
    status, _h, body = host.request("GET", "/api/v1/messages?key=x")
    assert status == 400 and body["error"].startswith("topic: required")
    status, _h, body = host.request("GET", "/api/v1/messages?topic=orders&begin=yesterday")
    assert status == 400 and "begin" in body["error"]


def test_topic_and_group_actions(host):
    status, _h, body = host.post("/api/v1/topics", {"topic": "payments", "queue_nums": 3, "message_type": "FIFO"})
    assert status == 200 and body["created"] and body["topic"]["message_type"] == "FIFO"
    listed = host.get("/api/v1/topics?q=pay")
    assert [t["topic"] for t in listed["items"]] == ["payments"]
    assert listed["items"][0]["read_queue_nums"] == 3
    status, _h, body = host.post("/api/v1/topics", {"topic": "payments", "write_queue_nums": 2, "perm": 4})
    assert status == 200 and not body["created"]
    t = host.get("/api/v1/topics/payments")
    assert (t["read_queue_nums"], t["write_queue_nums"], t["perm"]) == (3, 2, "R--")
    for bad, field in (({"topic": "a b"}, "illegal characters"), ({"topic": "x", "queue_nums": 0}, "read_queue_nums"),
                       ({"topic": "x", "perm": 9}, "perm"), ({"topic": "x", "message_type": "BIG"}, "message_type")):
        status, _h, body = host.post("/api/v1/topics", bad)
        assert status == 400 and field in body["error"], (bad, body)
    status, _h, body = host.post("/api/v1/topics", {"topic": "TBW102"})
    assert status == 403
    status, _h, _b = host.request("DELETE", "/api/v1/topics/payments")
    assert status == 200
    assert host.get("/api/v1/topics?q=pay")["total"] == 0
    assert host.request("DELETE", "/api/v1/topics/payments")[0] == 404

    status, _h, body = host.post("/api/v1/groups", {"group": "reports", "retry_max_times": 5,
                                                    "consume_enable": False})
    assert status == 200 and body["created"]
    g = host.get("/api/v1/groups/reports")
    assert (g["retry_max_times"], g["consume_enable"]) == (5, False)
    assert host.request("DELETE", "/api/v1/groups/reports")[0] == 200
    assert host.request("GET", "/api/v1/groups/reports")[0] == 404


def test_reset_offset_by_time_moves_the_lag(host):
    sent = host.cmd("send", topic="orders", n=20, key_prefix="order")
    host.cmd("consume", group="billing", topic="orders", max_count=20, ack=True)
    assert host.get("/api/v1/groups/billing")["lag"] == 0
    status, _h, body = host.post("/api/v1/groups/billing/reset-offset", {"timestamp": 0})
    assert status == 200 and all(r["new_offset"] == 0 for r in body["queues"])
    assert host.get("/api/v1/groups/billing")["lag"] == 20
    # To the store time of message 12: every queue goes to its first message stored at or after it.
    t = sent[12]["store_timestamp"]
    status, _h, body = host.post("/api/v1/groups/billing/reset-offset", {"timestamp": t, "topic": "orders"})
    assert status == 200
    expected = sum(1 for s in sent if s["store_timestamp"] >= t)
    assert host.get("/api/v1/groups/billing")["lag"] == expected
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 3600))
    host.post("/api/v1/groups/billing/reset-offset", {"timestamp": iso})
    assert host.get("/api/v1/groups/billing")["lag"] == 0
    status, _h, body = host.post("/api/v1/groups/billing/reset-offset", {})
    assert status == 400 and body["error"].startswith("timestamp: required")


def test_resend_from_dlq_reaches_the_group_again(host):
    host.cmd("send", topic="orders", n=8, key_prefix="order")
    dead = host.cmd("dlq", group="audit", topic="orders", n=2)
    status, _h, body = host.post(f"/api/v1/messages/{dead[0]['dlq_commitlog_offset']}/resend", {})
    assert status == 200 and body["topic"] == "%RETRY%audit"
    got = host.cmd("consume", group="audit", topic="%RETRY%audit", max_count=10, ack=True)
    assert [(m["key"], m["retry_topic"]) for m in got] == [(dead[0]["key"], "orders")]
    # Only a dead letter can be resent.
    plain = host.get("/api/v1/messages?topic=orders&key=order-1")["items"][0]["commitlog_offset"]
    status, _h, body = host.post(f"/api/v1/messages/{plain}/resend", {})
    assert status == 400 and "not in a DLQ topic" in body["error"]


def test_changes_need_json_from_this_origin(host):
    status, _h, body = host.request("POST", "/api/v1/topics", raw=b"topic=x",
                                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 415
    status, _h, body = host.post("/api/v1/topics", {"topic": "x"}, headers={"Origin": "http://evil.example"})
    assert status == 403 and "cross-origin" in body["error"]
    status, _h, body = host.post("/api/v1/topics", {"topic": "x"}, headers={"Sec-Fetch-Site": "cross-site"})
    assert status == 403 and "cross-site" in body["error"]
    assert host.get("/api/v1/topics?q=x")["total"] == 0


def test_every_change_needs_the_consoles_token(host):
    # issue 36: a same-origin token on every change. A script reads it from /api/v1/session; the pages carry it.
    session = host.get("/api/v1/session")
    assert session["csrf_header"] == "X-RMQ-CSRF-Token" and len(session["csrf_token"]) >= 32
    assert session["changes_allowed"] is True and session["user"] is None
    assert f'<meta name="rmq-csrf-token" content="{session["csrf_token"]}">' in host.get("/topics")
    host.cmd("send", topic="orders", n=4)
    host.cmd("consume", group="billing", topic="orders", max_count=4, ack=True)
    changes = [("POST", "/api/v1/topics", {"topic": "x"}), ("DELETE", "/api/v1/topics/orders", None),
               ("POST", "/api/v1/groups", {"group": "g"}), ("DELETE", "/api/v1/groups/billing", None),
               ("POST", "/api/v1/groups/billing/reset-offset", {"timestamp": 0}),
               ("POST", "/api/v1/messages/0/resend", {})]
    for token in (None, "", "wrong", session["csrf_token"][:-1]):
        for method, path, body in changes:
            headers = {} if token is None else {"X-RMQ-CSRF-Token": token}
            status, _h, answer = host.request(method, path, body=body, headers=headers, token=token is not None)
            assert status == 403 and "X-RMQ-CSRF-Token" in answer["error"], (method, path, token, answer)
    # nothing changed
    assert host.get("/api/v1/topics?q=x")["total"] == 0
    assert host.get("/api/v1/topics/orders")["topic"] == "orders"
    assert host.get("/api/v1/groups/billing")["lag"] == 0
    # with the token (and a same-origin browser's headers) the change is made
    port = host.port
    status, _h, body = host.post("/api/v1/topics", {"topic": "x"},
                                 headers={"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"})
    assert status == 200 and body["created"]


def test_a_foreign_host_is_refused_even_with_a_matching_origin(tmp_path):
    # DNS rebinding: a page of evil.example, its name rebound to 127.0.0.1, sends Host and Origin of evil.example.
    h = HostProcess(str(tmp_path / "store"), anonymous_changes=True, allowed_hosts=["console.example"])
    try:
        h.cmd("send", topic="orders", n=2)
        token = h.token()
        for name in ("evil.example", "127.0.0.1.evil.example", "[::2]"):
            host_header = f"{name}:{h.port}"
            for method, path, body in (("GET", "/api/v1/messages/0", None), ("GET", "/", None),
                                       ("GET", "/api/v1/session", None), ("GET", "/metrics", None),
                                       ("POST", "/api/v1/topics", {"topic": "rebound"}),
                                       ("DELETE", "/api/v1/topics/orders", None)):
                headers = {"Host": host_header, "Origin": f"http://{host_header}", "X-RMQ-CSRF-Token": token}
                status, _h, answer = h.request(method, path, body=body, headers=headers)
                assert status == 421 and "not a name of this console" in answer["error"], (name, path, answer)
        assert h.get("/api/v1/topics?q=rebound")["total"] == 0
        assert h.get("/api/v1/topics/orders")["topic"] == "orders"
        # names of the console: the bound address, localhost, and a name given with --console-allowed-host
        for name in ("127.0.0.1", "localhost", "LOCALHOST", "localhost.", "console.example"):
            assert h.request("GET", "/api/v1/overview", headers={"Host": f"{name}:{h.port}"})[0] == 200, name
        status, _h, _b = h.post("/api/v1/topics", {"topic": "named"},
                                headers={"Host": f"console.example:{h.port}",
                                         "Origin": f"http://console.example:{h.port}"})
        assert status == 200
    finally:
        assert h.stop() == 0


def test_without_accounts_changes_are_refused_unless_allowed_explicitly(tmp_path):
    h = HostProcess(str(tmp_path / "store"))
    try:
        h.cmd("send", topic="orders", n=3)
        assert h.get("/api/v1/topics/orders")["topic"] == "orders"          # reads stay open, as gRPC's
        assert h.get("/api/v1/session")["changes_allowed"] is False
        for method, path, body in (("POST", "/api/v1/topics", {"topic": "x"}),
                                   ("DELETE", "/api/v1/topics/orders", None),
                                   ("POST", "/api/v1/groups/billing/reset-offset", {"timestamp": 0})):
            status, _h, answer = h.request(method, path, body=body)        # with the token
            assert status == 403 and "--console-allow-anonymous-changes" in answer["error"], answer
        assert h.get("/api/v1/topics?q=x")["total"] == 0
        assert h.get("/api/v1/topics/orders")["topic"] == "orders"
    finally:
        assert h.stop() == 0


def test_access_names_and_the_exposed_bind_warning(caplog):
    import logging

    from rmqcore.console.access import ConsoleAccess, allowed_hosts, host_name, is_loopback
    from rmqcore.console.app import _warn_exposed
    assert [host_name(x) for x in ("[::1]:8080", "Example.COM.:80", "h", "::1", "[fe80::1]")] == \
        ["::1", "example.com", "h", "::1", "fe80::1"]
    assert is_loopback("127.0.0.2") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.1") and not is_loopback("example.com")
    loop = allowed_hosts("127.0.0.1", ["Proxy.Example."])
    assert {"127.0.0.1", "localhost", "proxy.example"} <= loop and "evil.example" not in loop
    wild = allowed_hosts("0.0.0.0")
    assert {"127.0.0.1", "::1", "localhost"} <= wild

    class Server:
        acl = None
    caplog.set_level(logging.WARNING, logger="rmqcore.console.app")
    _warn_exposed(Server(), "127.0.0.1", ConsoleAccess.for_bind("127.0.0.1"))
    assert not caplog.records
    _warn_exposed(Server(), "192.0.2.1", ConsoleAccess.for_bind("192.0.2.1", allow_anonymous_changes=True))
    [rec] = caplog.records
    text = rec.getMessage()
    assert "not a loopback address" in text and "no accounts" in text and "no TLS" in text
    assert "--console-allow-anonymous-changes" in text


def test_basic_auth_with_the_servers_accounts(tmp_path):
    h = HostProcess(str(tmp_path / "store"), acl="root:s3cret:admin,viewer:look:")
    try:
        assert h.request("GET", "/")[0] == 401
        assert h.request("GET", "/metrics")[0] == 401
        status, headers, _b = h.request("GET", "/api/v1/overview", auth=("root", "wrong"))
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert h.request("GET", "/api/v1/overview", auth=("viewer", "look"))[0] == 200
        status, _h, body = h.post("/api/v1/topics", {"topic": "t1"}, auth=("viewer", "look"))
        assert status == 403 and "not an admin" in body["error"]
        assert h.post("/api/v1/topics", {"topic": "t1"}, auth=("root", "s3cret"))[0] == 200
        assert h.request("GET", "/metrics", auth=("root", "s3cret"))[0] == 200
    finally:
        assert h.stop() == 0


def test_standalone_console_serves_and_stops_on_sigterm(tmp_path):
    store = str(tmp_path / "store")
    proc = subprocess.Popen([sys.executable, "-m", "rmqcore.console", store, "--http", "127.0.0.1:0",
                             "--admin", "root:pw"],
                            stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__))))
    try:
        line = proc.stdout.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+)/", line).group(1)
        import base64
        import urllib.error
        import urllib.request
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "/api/v1/overview", timeout=10)
        assert refused.value.code == 401
        req = urllib.request.Request(url + "/api/v1/overview",
                                     headers={"Authorization": "Basic " + base64.b64encode(b"root:pw").decode()})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    # The store's lock was released: another broker opens it.
    from rmqcore.broker import Broker
    Broker.open(store).close()


def _on_disk(path) -> tuple[int, int]:
    used = apparent = 0
    for d, _dirs, files in os.walk(path):
        for f in files:
            st = os.stat(os.path.join(d, f))
            used, apparent = used + st.st_blocks * 512, apparent + st.st_size
    return used, apparent


def test_disk_panel_shows_bytes_on_disk_beside_the_apparent_size(host):
    """The store's files are preallocated and sparse: the overview counts the blocks they use (du), and shows
    their apparent size beside it, not instead of it."""
    host.cmd("send", topic="orders", n=5, key_prefix="d")
    disk = host.request("GET", "/api/v1/overview")[2]["disk"]
    for kind in ("commitlog", "consumequeue", "index"):
        used, apparent = _on_disk(os.path.join(host.store, kind))
        assert disk[f"{kind}_apparent_bytes"] == apparent
        # the server may write a block or two between the API's look and this one
        assert abs(disk[f"{kind}_bytes"] - used) <= 1 << 20, (kind, disk, used)
    assert disk["store_bytes"] == disk["commitlog_bytes"] + disk["consumequeue_bytes"] + disk["index_bytes"]
    page = host.get("/")
    assert "Store files on disk" in page and "apparent size" in page


def test_disk_usage_of_sparse_preallocated_files_is_what_they_use(tmp_path):
    from rmqcore import Message, StoreConfig
    from rmqcore.broker import Broker
    from rmqcore.console.data import ConsoleData
    from rmqcore.console.standalone import BrokerHost
    with Broker.open(str(tmp_path / "s"), store_config=StoreConfig(mapped_file_size_commit_log=64 << 20)) as b:
        b.send(Message("t", b"x" * 100, 0))
        b.store.wait_dispatched(10)
        disk = ConsoleData(BrokerHost(b)).disk_usage()
        used, apparent = _on_disk(tmp_path / "s" / "commitlog")
    assert disk["commitlog_apparent_bytes"] == apparent == 64 << 20
    assert disk["commitlog_bytes"] == used < apparent            # a fresh 64 MiB file uses less: shown as it is
    assert disk["store_bytes"] < disk["store_apparent_bytes"]


def test_record_crc_property_is_shown_with_what_it_is(tmp_path):
    """``__CRC32#`` holds RocketMQ 5's record CRC with its digits reversed: the message view gives the number and
    whether the record still matches it, not only the reversed text."""
    import zlib
    from rmqcore import Message, StoreConfig
    from rmqcore.broker import Broker
    from rmqcore.console.data import ConsoleData
    from rmqcore.console.standalone import BrokerHost
    with Broker.open(str(tmp_path / "s"), store_config=StoreConfig(enabled_append_prop_crc=True)) as b:
        r = b.send(Message("t", b"crc me", 0))
        view = ConsoleData(BrokerHost(b)).message(r.commitlog_offset)
        raw = bytes(b.store.look_message(r.commitlog_offset).record())
    crc = view["record_crc"]
    assert crc["stored_text"] == view["properties"]["__CRC32#"] and crc["crc32"] == int(crc["stored_text"][::-1])
    # the number a user can compute: CRC32 of the record's bytes before the 20-byte property, masked to 31 bits
    assert crc["crc32"] == zlib.crc32(raw[:-20]) & 0x7FFFFFFF and crc["matches"] is True
    assert "reversed" in crc["what"]
