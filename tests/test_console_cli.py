"""rmqcore topic/group/dlq (rmqcore/mqadmin.py) against a running server (--server: the console's JSON API, the
server in a child process) and against a store directory (--store), with the same answers."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("aiohttp")
from console_client import HostProcess  # noqa: E402

import rmqcore

# where the imported rmqcore lives: an unpacked sdist's sources never shadow the installed build in the child
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))


def rmq(*args) -> tuple[int, str, str]:
    r = subprocess.run([sys.executable, "-m", "rmqcore", *args], capture_output=True, text=True, cwd=PKG_PARENT,
                       timeout=120)
    return r.returncode, r.stdout, r.stderr


@pytest.fixture
def host(tmp_path):
    h = HostProcess(str(tmp_path / "store"), acl="root:s3cret:admin")
    yield h
    assert h.stop() == 0


def test_admin_commands_against_a_running_server(host, tmp_path):
    srv = ["--server", host.url, "--user", "root:s3cret"]
    code, out, err = rmq("topic", "create", *srv, "payments", "--queues", "3", "--type", "FIFO", "--json")
    assert code == 0, err
    assert json.loads(out)["message_type"] == "FIFO" and json.loads(out)["write_queue_nums"] == 3
    code, out, _ = rmq("topic", "list", "--json", *srv)
    assert [t["name"] for t in json.loads(out)] == ["orders", "payments"]
    code, out, _ = rmq("topic", "list", *srv)
    assert code == 0 and "payments" in out and "FIFO" in out

    host.cmd("send", topic="orders", n=12, key_prefix="order")
    host.cmd("consume", group="billing", topic="orders", max_count=12, ack=True)
    dead = host.cmd("dlq", group="audit", topic="orders", n=1)
    code, out, err = rmq("group", "reset-offset", *srv, "billing", "--time", "0", "--json")
    assert code == 0, err
    assert {q["new_offset"] for q in json.loads(out)["queues"]} == {0}
    code, out, _ = rmq("group", "show", *srv, "billing", "--json")
    assert json.loads(out)["lag"] == 12
    code, out, err = rmq("dlq", "resend", *srv, str(dead[0]["dlq_commitlog_offset"]), "--json")
    assert code == 0 and json.loads(out)["topic"] == "%RETRY%audit", err
    assert [m["key"] for m in host.cmd("consume", group="audit", topic="%RETRY%audit", max_count=5)] == \
        [dead[0]["key"]]

    code, _out, err = rmq("topic", "create", *srv, "bad name")
    assert code == 2 and "illegal characters" in err
    code, _out, err = rmq("topic", "list", "--server", host.url, "--user", "root:nope")
    assert code == 2 and "401" in err
    code, out, _ = rmq("topic", "delete", *srv, "payments", "--json")
    assert code == 0 and json.loads(out) == {"deleted": "payments"}
    code, _out, err = rmq("topic", "delete", *srv, "payments")
    assert code == 1 and err == "rmqcore topic: topic 'payments' does not exist\n"
    code, _out, err = rmq("topic", "list", "--server", host.url, str(tmp_path))
    assert code == 2 and "not both" in err


def test_admin_commands_on_a_store_directory_answer_as_the_server_does(tmp_path, host):
    from rmqcore.broker import Broker
    store = str(tmp_path / "offline")
    Broker.open(store).close()
    srv = ["--server", host.url, "--user", "root:s3cret"]
    code, out, err = rmq("topic", "create", store, "payments", "--queues", "3", "--json")
    assert code == 0, err
    offline = json.loads(out)
    code, out, _ = rmq("topic", "create", *srv, "payments", "--queues", "3", "--json")
    assert json.loads(out) == offline
    for args in (["group", "create", "reports", "--fifo", "--max-delivery-attempts", "5", "--json"],
                 ["group", "list", "--json"], ["topic", "list", "--json"]):
        code, out_offline, err = rmq(args[0], args[1], store, *args[2:])
        assert code == 0, err
        code, out_online, err = rmq(args[0], args[1], *srv, *args[2:])
        assert code == 0, err
        online = json.loads(out_online)
        if args[1] == "list":      # the server has the host's own topics and groups too
            online = [r for r in online if r["name"] in {r["name"] for r in json.loads(out_offline)}]
        assert online == json.loads(out_offline), args
    code, out, _ = rmq("group", "show", store, "reports", "--json")
    assert code == 0 and json.loads(out)["config"]["max_delivery_attempts"] == 5
    code, _out, err = rmq("topic", "list", str(tmp_path / "missing"))
    assert code == 2 and "no such directory" in err


def test_not_found_is_one_wording_and_exit_1_on_a_store_and_through_a_server(tmp_path, host):
    """topic/group show, delete, reset-offset and dlq resend of what does not exist: the same line from a store and
    from a server, exit 1 (found nothing, as get and query)."""
    from rmqcore.broker import Broker
    store = str(tmp_path / "offline")
    Broker.open(store).close()
    srv = ["--server", host.url, "--user", "root:s3cret"]
    cases = [(("topic", "show"), "nosuch", "rmqcore topic: topic 'nosuch' does not exist"),
             (("topic", "delete"), "nosuch", "rmqcore topic: topic 'nosuch' does not exist"),
             (("group", "show"), "nosuch", "rmqcore group: consumer group 'nosuch' does not exist"),
             (("group", "delete"), "nosuch", "rmqcore group: consumer group 'nosuch' does not exist"),
             (("group", "reset-offset"), "nosuch", "rmqcore group: consumer group 'nosuch' does not exist"),
             (("dlq", "resend"), "123456789", "rmqcore dlq: no message starts at commitlog offset 123456789")]
    for (cmd, action), name, line in cases:
        extra = ["--time", "0"] if action == "reset-offset" else []
        for where in ([store], srv):
            for json_flag in ([], ["--json"]):
                code, out, err = rmq(cmd, action, *where, name, *extra, *json_flag)
                assert (code, out, err) == (1, "", line + "\n"), (cmd, action, where, json_flag)


def test_show_is_human_text_unless_json(tmp_path, host):
    srv = ["--server", host.url, "--user", "root:s3cret"]
    host.cmd("send", topic="orders", n=3, key_prefix="o")
    host.cmd("consume", group="billing", topic="orders", max_count=1, ack=True)
    code, out, err = rmq("topic", "show", *srv, "orders")
    assert code == 0, err
    assert out.startswith("topic orders: ") and "3 messages" in out and "billing" in out
    with pytest.raises(ValueError):
        json.loads(out)
    code, out, err = rmq("topic", "show", *srv, "orders", "--json")
    assert code == 0 and json.loads(out)["topic"] == "orders" and json.loads(out)["messages"] == 3
    code, out, err = rmq("group", "show", *srv, "billing")
    assert code == 0 and out.startswith("group billing: ") and "orders" in out, err
    with pytest.raises(ValueError):
        json.loads(out)
    code, out, err = rmq("group", "show", *srv, "billing", "--json")
    assert code == 0 and json.loads(out)["group"] == "billing"
    code, out, err = rmq("group", "reset-offset", *srv, "billing", "--time", "0")
    assert code == 0 and out.startswith("group billing: offsets reset") and "old offset" in out, err
