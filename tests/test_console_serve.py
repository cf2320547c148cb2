"""The console and /metrics on `rmqcore serve --http`, judged against what RocketMQ's official Python client did
(issue 30): the in-flight, lag and DLQ figures a group shows equal what its SimpleConsumer received, acked and let
expire, in the JSON API and in the Prometheus metrics alike."""
from __future__ import annotations

import http.client
import json
import re
import time
import urllib.request

import pytest

pytest.importorskip("rocketmq")
pytest.importorskip("grpc")
pytest.importorskip("aiohttp")
from rocketmq import FilterExpression, Producer, SimpleConsumer  # noqa: E402
from serve_util import FAST_CONF, ServerProcess, config, message, prepare, receive_all  # noqa: E402


def get(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        body = r.read().decode()
    return json.loads(body) if "/api/" in url else body


def metric(text: str, name: str, **labels) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if m and all(f'{k}="{v}"' in m.group(1) for k, v in labels.items()):
            total += float(m.group(2))
    return total


def wait_for(fn, timeout=20.0):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > end:
            return v
        time.sleep(0.2)


def test_group_figures_equal_what_the_official_client_did(tmp_path):
    store = str(tmp_path / "store")
    prepare(store, {"watch_t": ("NORMAL", 2)}, {"watch_g": {"retry_max_times": 1}})   # 2 delivery attempts
    with ServerProcess(store, FAST_CONF, args=["--http", "127.0.0.1:0"]) as srv:
        try:
            api = srv.console_url + "/api/v1"
            p = Producer(config(srv.endpoint), ("watch_t",))
            p.startup()
            try:
                for i in range(10):
                    p.send(message("watch_t", f"w{i}".encode(), keys=f"key-{i}"))
            finally:
                p.shutdown()
            c = SimpleConsumer(config(srv.endpoint), "watch_g", {"watch_t": FilterExpression("*")}, 1)
            c.startup()
            try:
                got = receive_all(c, 10, invisible=30, ack=False, deadline_s=20)
                assert len(got) == 10
                for m in got[:6]:
                    c.ack(m)
                # 4 received and not acked: in flight, as the consumer left them.
                g = wait_for(lambda: (lambda g: g if g["inflight"] == 4 else None)(get(api + "/groups/watch_g")))
                assert g is not None and g["inflight"] == 4, get(api + "/groups/watch_g")
                text = get(srv.console_url + "/metrics")
                assert metric(text, "rocketmq_consumer_inflight_messages", consumer_group="watch_g") == 4
                assert metric(text, "rocketmq_messages_in_total", topic="watch_t") == 10
                assert metric(text, "rocketmq_messages_out_total", topic="watch_t", consumer_group="watch_g") == 10
                for m in got[6:9]:
                    c.ack(m)
                # The last one is never acked: its invisible time runs out, it comes back once (attempt 2), and
                # is not acked again: after the group's 2 attempts the next receive moves it to %DLQ%watch_g, as
                # the proxy does, instead of delivering it a third time.
                again = receive_all(c, 1, invisible=1, ack=False, deadline_s=40)
                assert [m.body for m in again] == [got[9].body]

                def moved():
                    assert c.receive(32, 1) == []
                    g = get(api + "/groups/watch_g")
                    return g if g["dlq_messages"] == 1 and g["inflight"] == 0 else None
                g = wait_for(moved, timeout=40)
                assert g is not None, get(api + "/groups/watch_g")
                assert g["lag"] == 0 and g["sent_to_dlq"] == 1
                text = get(srv.console_url + "/metrics")
                assert metric(text, "rocketmq_send_to_dlq_messages_total", consumer_group="watch_g") == 1
                assert metric(text, "rocketmq_consumer_inflight_messages", consumer_group="watch_g") == 0
                # The message search finds a key the producer set, where the store holds it.
                found = get(api + "/messages?topic=watch_t&key=key-3")
                assert [m["body_preview"] if "body_preview" in m else m for m in found["items"]]
                assert json.dumps(found["items"]).count("key-3") >= 1
            finally:
                c.shutdown()
        finally:
            assert srv.terminate() == 0


def test_sync_flush_puts_per_flush_counts_the_servers_sends(tmp_path):
    # The server's sends ask for their flush without a thread waiting in put (group commit's when_flushed): the
    # flush-request counter and the console's puts per flush must count them (they read 0 while only blocking
    # waits were counted).
    store = str(tmp_path / "store")
    prepare(store, {"sync_t": ("NORMAL", 2)})
    with ServerProcess(store, dict(FAST_CONF, flushDiskType="SYNC_FLUSH"), args=["--http", "127.0.0.1:0"]) as srv:
        p = Producer(config(srv.endpoint), ("sync_t",))
        p.startup()
        try:
            for i in range(20):
                p.send(message("sync_t", f"s{i}".encode()))
        finally:
            p.shutdown()
        text = get(srv.console_url + "/metrics")
        requests = flushes = None
        for line in text.splitlines():
            if re.match(r"rmqcore_flush_requests(_total)?(\{.*\})? ", line):
                requests = float(line.rsplit(" ", 1)[1])
            elif re.match(r"rmqcore_flushes(_total)?(\{.*\})? ", line):
                flushes = float(line.rsplit(" ", 1)[1])
        assert requests is not None and flushes is not None, "flush counters missing from /metrics"
        assert requests >= 20 and 1 <= flushes <= requests
        flush = get(srv.console_url + "/api/v1/overview")["flush"]
        assert flush["type"] == "SYNC_FLUSH" and flush["flush_requests"] >= 20
        assert flush["puts_per_flush"] is not None and flush["puts_per_flush"] >= 1.0


CLIENT_CHILD = """
import sys, time
sys.path.insert(0, {tests!r})
from rocketmq import FilterExpression, Producer, SimpleConsumer
from serve_util import config
p = Producer(config({endpoint!r}), ("orders",)); p.startup()
c = SimpleConsumer(config({endpoint!r}), "billing", {{"orders": FilterExpression("*")}}, 1); c.startup()
print("ready", flush=True)
time.sleep(600)
"""


def test_a_client_whose_channel_closed_is_gone_everywhere_at_once(tmp_path):
    """One definition of a connected client in the console's overview, its group page and /metrics; a client that
    dies without saying goodbye (kill -9: its Telemetry stream and channel close) is gone from all three at once,
    not after the 120 s heartbeat expiry."""
    import os
    import subprocess
    import sys
    store = str(tmp_path / "store")
    prepare(store, {"orders": ("NORMAL", 2)}, {"billing": {}})
    with ServerProcess(store, FAST_CONF, args=["--http", "127.0.0.1:0"]) as server:
        api = server.console_url
        tests = os.path.dirname(os.path.abspath(__file__))
        child = subprocess.Popen([sys.executable, "-c", CLIENT_CHILD.format(tests=tests, endpoint=server.endpoint)],
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "ready"

            def seen():
                text = get(api + "/metrics")
                return (get(api + "/api/v1/overview")["counts"]["clients"],
                        get(api + "/api/v1/groups/billing")["clients"],
                        metric(text, "rocketmq_producer_connections") + metric(text, "rocketmq_consumer_connections"))
            assert wait_for(lambda: seen() == (2, 1, 2.0)), seen()
        finally:
            child.kill()
            child.wait(30)
            child.stdout.close()
        # gone at once: well inside the heartbeat expiry (120 s), whatever the machine's load
        assert wait_for(lambda: seen() == (0, 0, 0.0), timeout=30), seen()
        assert server.terminate() == 0


def test_console_is_served_over_tls_with_the_grpc_certificate(tmp_path):
    # issue 36: with --tls-cert the console is HTTPS too (Basic auth carried the secret key in clear).
    import base64
    import shutil
    import ssl
    import subprocess
    import urllib.error
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       capture_output=True)
    if r.returncode:
        pytest.skip(f"openssl cannot make a certificate here: {r.stderr[-200:]!r}")
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps({"accounts": [{"accessKey": "root", "secretKey": "root-secret", "admin": True}]}))
    store = str(tmp_path / "store")
    with ServerProcess(store, FAST_CONF, args=["--http", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key,
                                               "--acl", str(acl)]) as srv:
        try:
            assert srv.console_url.startswith("https://127.0.0.1:")
            trusted = ssl.create_default_context(cafile=cert)
            auth = {"Authorization": "Basic " + base64.b64encode(b"root:root-secret").decode()}

            def call(method, path, body=None, headers=None, context=trusted, url=srv.console_url):
                data = json.dumps(body).encode() if body is not None else None
                h = dict(auth, **(headers or {}))
                if data is not None:
                    h["Content-Type"] = "application/json"
                req = urllib.request.Request(url + path, data=data, method=method, headers=h)
                with urllib.request.urlopen(req, timeout=10, context=context) as resp:
                    return json.loads(resp.read())
            session = call("GET", "/api/v1/session")
            assert session["tls"] is True and session["user"] == "root" and session["changes_allowed"] is True
            origin = srv.console_url                 # a browser on the https page sends this Origin
            created = call("POST", "/api/v1/topics", {"topic": "over_tls"},
                           {"X-RMQ-CSRF-Token": session["csrf_token"], "Origin": origin})
            assert created["created"]
            # the http Origin of the same host is another origin
            with pytest.raises(urllib.error.HTTPError) as refused:
                call("POST", "/api/v1/topics", {"topic": "x"},
                     {"X-RMQ-CSRF-Token": session["csrf_token"], "Origin": origin.replace("https:", "http:")})
            assert refused.value.code == 403
            # plain HTTP gets no answer from the TLS port
            with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
                urllib.request.urlopen(srv.console_url.replace("https:", "http:") + "/api/v1/overview", timeout=10)
        finally:
            assert srv.terminate() == 0
