"""What a user of mqadmin and rocketmq-dashboard does from rmqcore's CLI and console (issue 40): send a test message
and consume one (sendMessage / consumeMessage, the dashboard's "Send Message"), read the broker's settings and change
the ones that take effect at run time (getBrokerConfig / updateBrokerConfig), and list who is connected per group and
per topic (consumerConnection / producerConnection). On a store no server holds and against a running server, with
RocketMQ's official client as the peer."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from serve_util import PKG_PARENT, prepare


def rmq(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "rmqcore", *args], cwd=PKG_PARENT, capture_output=True, text=True,
                       timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"rmqcore {' '.join(args)} -> {p.returncode}: {p.stdout}{p.stderr}")
    return p


def test_send_and_consume_on_a_store(tmp_path):
    store = str(tmp_path / "store")
    prepare(store, {"orders": ("NORMAL", 2)}, {"billing": {}})
    sent = json.loads(rmq("send", store, "orders", "hello", "--tags", "created", "--keys", "k1", "k2",
                          "--queue", "1", "--json").stdout)
    assert sent["status"] == "PUT_OK" and sent["queue_id"] == 1 and sent["queue_offset"] == 0
    rmq("send", store, "orders", "second", "--queue", "1")
    rmq("send", store, "orders", "third", "--queue", "0")

    # A look changes nothing: the same messages come again, from queue 0 then queue 1.
    look = json.loads(rmq("consume", store, "billing", "orders", "--count", "5", "--json").stdout)
    assert [(m["queue_id"], m["text"]) for m in look["items"]] == [(0, "third"), (1, "hello"), (1, "second")]
    assert look["items"][1]["tags"] == "created" and look["items"][1]["keys"] == ["k1", "k2"]
    assert look["items"][1]["msg_id"] == sent["msg_id"]
    again = json.loads(rmq("consume", store, "billing", "orders", "--count", "5", "--json").stdout)
    assert [m["text"] for m in again["items"]] == ["third", "hello", "second"]

    # --commit moves the group's offsets past what was read, as a consumer's commit does.
    took = json.loads(rmq("consume", store, "billing", "orders", "--count", "2", "--commit", "--json").stdout)
    assert [m["text"] for m in took["items"]] == ["third", "hello"]
    rest = json.loads(rmq("consume", store, "billing", "orders", "--count", "5", "--json").stdout)
    assert [m["text"] for m in rest["items"]] == ["second"]
    from rmqcore.broker import Broker
    with Broker.open(store) as b:
        assert b.query_offset("billing", "orders", 0) == 1 and b.query_offset("billing", "orders", 1) == 1

    # Refusals are one line and exit 2; nothing is stored.
    # A refusal exits 2, a group or topic that does not exist 1 (the admin commands' "not found").
    for args, words, code in ((("send", store, "TBW102", "x"), "system topic", 2),
                              (("send", store, "bad topic!", "x"), "topic", 2),
                              (("send", store, "orders", ""), "body", 2),
                              (("consume", store, "nosuch", "orders"), "nosuch", 1),
                              (("consume", store, "billing", "orders", "--count", "33"), "count", 2),
                              (("consume", store, "billing", "nosuch_topic"), "nosuch_topic", 1)):
        p = rmq(*args, check=False)
        assert p.returncode == code, (args, p.stdout, p.stderr)
        assert words in p.stderr and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
    with Broker.open(store) as b:
        assert b.store.max_offset("orders", 0) == 1 and b.store.max_offset("orders", 1) == 2
        assert "TBW102" not in b.store.topics()


def test_broker_config_on_a_store_reads_and_refuses_changes(tmp_path):
    store = str(tmp_path / "store")
    prepare(store, {"orders": ("NORMAL", 1)})
    cfg = json.loads(rmq("broker", "config", store, "--json").stdout)
    assert cfg["config"]["autoCreateTopicEnable"] is True
    assert cfg["config"]["mappedFileSizeCommitLog"] == 1 << 30 and cfg["config"]["brokerPermission"] == 6
    assert "autoCreateTopicEnable" in cfg["changeable"] and "brokerName" not in cfg["changeable"]
    p = rmq("broker", "config", store, "--set", "autoCreateTopicEnable=false", check=False)
    assert p.returncode == 2 and "--server" in p.stderr


def test_minute_history_rates_lag_and_restart(tmp_path):
    """A topic's stored rate and a group's consumed rate and lag, a point a minute, read from offsets, so a
    restart (a new history over the file) continues the same series, and the window drops old points."""
    from rmqcore import Message
    from rmqcore.broker import Broker
    from rmqcore.console.history import MinuteHistory
    store = str(tmp_path / "store")
    prepare(store, {"orders": ("NORMAL", 2)}, {"billing": {}})
    t0 = 1_800_000_000 // 60 * 60
    with Broker.open(store) as b:
        h = MinuteHistory(b, window_s=10 * 60)
        for i in range(30):
            b.send(Message("orders", b"x", i % 2))
        b.store.wait_dispatched()
        b.commit_offset("billing", "orders", 0, 0)
        h.sample(t0)
        for i in range(120):
            b.send(Message("orders", b"y", i % 2))
        b.store.wait_dispatched()
        b.commit_offset("billing", "orders", 0, 60)        # 60 consumed of queue 0's 75
        h.sample(t0 + 60)
        h.sample(t0 + 61)                                   # the same minute: replaces, adds no point
        h.save()
    with Broker.open(store) as b:                           # a restart, three minutes later
        h = MinuteHistory(b, window_s=10 * 60)
        for i in range(90):
            b.send(Message("orders", b"z", i % 2))
        b.store.wait_dispatched()
        b.commit_offset("billing", "orders", 1, 60)
        h.sample(t0 + 240)
        topic = h.topic("orders")
        assert topic["t"] == [(t0 + 60) * 1000, (t0 + 240) * 1000]
        assert topic["in"] == [2.0, 0.5]                   # 120 in 60 s, then 90 in 180 s
        group = h.group("billing")
        assert group["consumed"] == [1.0, round(60 / 180, 3)]
        assert group["lag"] == [150 - 60, 240 - 120]
        h.sample(t0 + 900)                                  # past the 10-minute window: the old points go
        assert h.topic("orders")["t"] == [(t0 + 900) * 1000] or h.topic("orders")["t"] == []
        assert len(h.series["topic:orders:stored"]) == 1
        assert h.topic("nosuch") == {"topic": "nosuch", "step_s": 60, "t": [], "in": []}
    # A damaged file is set aside, not fatal.
    import glob
    path = os.path.join(store, "config", "consoleHistory.json")
    with open(path, "w") as f:
        f.write("{not json")
    with Broker.open(store) as b:
        h = MinuteHistory(b)
        assert h.series == {}
    assert glob.glob(path + ".bad-*")


pytest.importorskip("aiohttp")


def test_running_server_send_consume_config_and_connections(tmp_path):
    pytest.importorskip("rocketmq")
    pytest.importorskip("grpc")
    from rocketmq import FilterExpression, Producer, SimpleConsumer
    from serve_util import FAST_CONF, ServerProcess, config, message, receive_all
    store = str(tmp_path / "store")
    prepare(store, {"orders": ("NORMAL", 2)}, {"billing": {}})
    # no accounts here: the console takes changes only when told to (issue 36)
    with ServerProcess(store, FAST_CONF, args=["--http", "127.0.0.1:0", "--console-allow-anonymous-changes"]) as srv:
        try:
            url = srv.console_url
            sent = json.loads(rmq("send", "--server", url, "orders", "from the console", "--keys", "ck",
                                  "--json").stdout)
            assert sent["status"] == "PUT_OK"
            # The official client receives the message the console sent.
            c = SimpleConsumer(config(srv.endpoint), "billing", {"orders": FilterExpression("*")}, 1)
            c.startup()
            p = Producer(config(srv.endpoint), ("orders",))
            p.startup()
            try:
                got = receive_all(c, 1, invisible=30, deadline_s=20)
                assert [m.body for m in got] == [b"from the console"]
                p.send(message("orders", b"from the client"))
                # Who is connected: the consumer under its group, the producer under the topic it declared.
                deadline = time.monotonic() + 20
                while True:
                    cons = json.loads(rmq("connections", "--server", url, "--group", "billing", "--json").stdout)
                    prods = json.loads(rmq("connections", "--server", url, "--topic", "orders", "--json").stdout)
                    if (cons["items"] and prods["items"]) or time.monotonic() > deadline:
                        break
                    time.sleep(0.3)
                assert [x["kind"] for x in cons["items"]] == ["SIMPLE_CONSUMER"], cons
                assert cons["items"][0]["topics"] == ["orders"] and cons["items"][0]["group"] == "billing"
                assert [x["kind"] for x in prods["items"]] == ["PRODUCER"], prods
                assert prods["items"][0]["topics"] == ["orders"]
                assert prods["items"][0]["client_id"] != cons["items"][0]["client_id"]
                table = rmq("connections", "--server", url, "--group", "billing").stdout
                assert cons["items"][0]["client_id"] in table
            finally:
                p.shutdown()
                c.shutdown()

            # consume through the server: the client acked the console's message (committed offset moved)
            # so the group's next one is the client's.
            nxt = json.loads(rmq("consume", "--server", url, "billing", "orders", "--count", "5", "--json").stdout)
            assert [m["text"] for m in nxt["items"]] == ["from the client"]

            # Runtime settings: auto-creation off refuses a send to a new topic at once, on admits it again.
            before = json.loads(rmq("broker", "config", "--server", url, "--json").stdout)
            assert before["config"]["autoCreateTopicEnable"] is True
            changed = json.loads(rmq("broker", "config", "--server", url, "--set", "autoCreateTopicEnable=false",
                                     "--json").stdout)
            assert changed["changed"] == {"autoCreateTopicEnable": {"old": True, "new": False}}
            p1 = rmq("send", "--server", url, "brand_new", "x", check=False)
            assert p1.returncode == 2 and "brand_new" in p1.stderr, p1.stderr
            rmq("broker", "config", "--server", url, "--set", "autoCreateTopicEnable=true")
            assert json.loads(rmq("send", "--server", url, "brand_new", "x", "--json").stdout)["status"] == "PUT_OK"
            for bad in ("brokerName=x", "autoCreateTopicEnable=maybe", "brokerPermission=99", "nokey"):
                pb = rmq("broker", "config", "--server", url, "--set", bad, check=False)
                assert pb.returncode == 2 and len(pb.stderr.strip().splitlines()) == 1, (bad, pb.stderr)
            # brokerPermission read-only (4): sends refused, reads still served.
            rmq("broker", "config", "--server", url, "--set", "brokerPermission=4")
            p2 = rmq("send", "--server", url, "orders", "y", check=False)
            assert p2.returncode == 2 and "forbidden" in p2.stderr, p2.stderr
            rmq("broker", "config", "--server", url, "--set", "brokerPermission=6")
            assert json.loads(rmq("send", "--server", url, "orders", "y", "--json").stdout)["status"] == "PUT_OK"
            # The pages: the topic's send form and producers, the group's consume form and trend, the broker's
            # settings; the search results name each message's id; the trend answers from the first minute.
            import urllib.request

            def page(path):
                with urllib.request.urlopen(url + path, timeout=10) as r:
                    return r.read().decode()
            html = page("/topics/orders")
            assert 'id="send-form"' in html and 'id="producers"' in html and 'data-history=' in html
            html = page("/groups/billing")
            assert 'id="consume-form"' in html and 'name="fifo"' in html and 'name="max_delivery_attempts"' in html
            assert 'name="fifo"' in page("/groups")
            html = page("/broker")
            assert "autoCreateTopicEnable" in html and 'id="broker-form"' in html
            html = page("/messages?topic=orders&key=ck")
            assert "Message id" in html and sent["msg_id"] in html
            hist = json.loads(page("/api/v1/topics/orders/history"))
            assert hist["step_s"] == 60 and isinstance(hist["t"], list)
            assert isinstance(json.loads(page("/api/v1/groups/billing/history"))["lag"], list)
        finally:
            assert srv.terminate() == 0
    assert os.path.isdir(store)
    # The server's last point was written at its stop.
    with open(os.path.join(store, "config", "consoleHistory.json")) as f:
        assert "topic:orders:stored" in json.load(f)["series"]
