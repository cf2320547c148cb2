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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rmq(*args) -> tuple[int, str, str]:
    r = subprocess.run([sys.executable, "-m", "rmqcore", *args], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    return r.returncode, r.stdout, r.stderr


@pytest.fixture
def host(tmp_path):
    h = HostProcess(str(tmp_path / "store"), acl="root:s3cret:admin")
    yield h
    assert h.stop() == 0


def test_admin_commands_against_a_running_server(host):
    srv = ["--server", host.url, "--user", "root:s3cret"]
    code, out, err = rmq("topic", "create", "payments", "--queues", "3", "--type", "FIFO", *srv)
    assert code == 0, err
    assert json.loads(out)["topic"]["message_type"] == "FIFO"
    code, out, _ = rmq("topic", "list", "--json", *srv)
    assert [t["topic"] for t in json.loads(out)["items"]] == ["orders", "payments"]
    code, out, _ = rmq("topic", "list", *srv)
    assert code == 0 and "payments" in out and "FIFO" in out

    host.cmd("send", topic="orders", n=12, key_prefix="order")
    host.cmd("consume", group="billing", topic="orders", max_count=12, ack=True)
    dead = host.cmd("dlq", group="audit", topic="orders", n=1)
    code, out, err = rmq("group", "reset-offset", "billing", "--time", "0", *srv)
    assert code == 0, err
    assert {q["new_offset"] for q in json.loads(out)["queues"]} == {0}
    code, out, _ = rmq("group", "show", "billing", *srv)
    assert json.loads(out)["lag"] == 12
    code, out, err = rmq("dlq", "resend", str(dead[0]["dlq_commitlog_offset"]), *srv)
    assert code == 0 and json.loads(out)["topic"] == "%RETRY%audit", err
    assert [m["key"] for m in host.cmd("consume", group="audit", topic="%RETRY%audit", max_count=5)] == \
        [dead[0]["key"]]

    code, _out, err = rmq("topic", "create", "bad name", *srv)
    assert code == 2 and "illegal characters" in err
    code, _out, err = rmq("topic", "list", "--server", host.url, "--user", "root:nope")
    assert code == 2 and "401" in err
    code, out, _ = rmq("topic", "delete", "payments", *srv)
    assert code == 0 and json.loads(out) == {"deleted": "payments"}


def test_admin_commands_on_a_store_directory_answer_as_the_server_does(tmp_path, host):
    from rmqcore.broker import Broker
    store = str(tmp_path / "offline")
    Broker.open(store).close()
    code, out, err = rmq("topic", "create", "payments", "--queues", "3", "--store", store)
    assert code == 0, err
    offline = json.loads(out)
    code, out, _ = rmq("topic", "create", "payments", "--queues", "3", "--server", host.url, "--user",
                       "root:s3cret")
    online = json.loads(out)
    assert offline.keys() == online.keys() and offline["topic"].keys() == online["topic"].keys()
    assert offline["topic"]["read_queue_nums"] == online["topic"]["read_queue_nums"] == 3
    code, out, _ = rmq("group", "create", "reports", "--retry-max-times", "4", "--store", store)
    assert code == 0 and json.loads(out)["group"]["retry_max_times"] == 4
    code, out, _ = rmq("group", "list", "--json", "--store", store)
    assert [g["group"] for g in json.loads(out)["items"]] == ["reports"]
    code, _out, err = rmq("topic", "list", "--store", str(tmp_path / "missing"))
    assert code == 2 and "no such directory" in err
