"""The embedding API: MessagingServer around a Broker in this process, driven by the official client in the same
process (its apache.rocketmq.v2 protobuf files and the server's own descriptors side by side), with the
accessors the console reads."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

pytest.importorskip("rocketmq")
pytest.importorskip("grpc")

from rocketmq import FilterExpression, Producer, SimpleConsumer  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2  # noqa: E402,F401  (the client's registration first)

from rmqcore.broker import Broker  # noqa: E402
from rmqcore.server import messaging_pb2  # noqa: E402,F401
from rmqcore.server.server import MessagingServer, ServerConfig  # noqa: E402

from serve_util import config, message  # noqa: E402


def test_embedded_server_with_the_client_in_one_process(tmp_path):
    broker = Broker.open(str(tmp_path / "store"))
    ready = threading.Event()
    box = {}

    async def main():
        cfg = ServerConfig(min_invisible_ms=1000, min_long_polling_ms=500, max_long_polling_ms=2000)
        async with MessagingServer(broker, host="127.0.0.1", port=0, config=cfg) as server:
            box["server"] = server
            box["loop"] = asyncio.get_running_loop()
            box["stop"] = asyncio.Event()
            ready.set()
            await box["stop"].wait()

    t = threading.Thread(target=asyncio.run, args=(main(),))
    t.start()
    try:
        assert ready.wait(10)
        server = box["server"]
        assert server.port > 0 and server.broker is broker and server.host == "127.0.0.1"
        endpoint = f"127.0.0.1:{server.port}"
        p = Producer(config(endpoint), ("api_t",))
        p.startup()
        for i in range(5):
            p.send(message("api_t", f"e{i}".encode()))
        c = SimpleConsumer(config(endpoint), "api_g", {"api_t": FilterExpression("*")}, 1)
        c.startup()
        got = []
        end = time.monotonic() + 10
        while len(got) < 5 and time.monotonic() < end:
            got += c.receive(32, 10)
        assert sorted(m.body for m in got) == [f"e{i}".encode() for i in range(5)]
        # unacked: the console sees them in flight
        assert sum(server.inflight("api_g").values()) == 5
        for m in got:
            c.ack(m)
        assert server.inflight("api_g") == {}
        snap = server.events.snapshot()
        assert snap["messages_in"][("api_t", "NORMAL")] == 5
        assert snap["messages_out"][("api_t", "api_g")] == 5
        assert snap["rpc_count"][("SendMessage", "OK")] == 5
        assert any(ci.kind == "SIMPLE_CONSUMER" and ci.group == "api_g" for ci in server.events.clients())
        c.shutdown()
        p.shutdown()
    finally:
        if "loop" in box:
            box["loop"].call_soon_threadsafe(box["stop"].set)
        t.join(30)
        broker.close()
    # the pop state is written at stop: a new server over the same store knows the group acked everything
    with Broker.open(str(tmp_path / "store")) as b:
        assert sum(b.query_offset("api_g", "api_t", q) for q in range(4) if b.query_offset("api_g", "api_t", q) > 0) == 5


def test_http_flag_needs_the_console(tmp_path):
    import importlib.util
    import subprocess
    import sys
    if importlib.util.find_spec("rmqcore.console") is not None:
        pytest.skip("rmqcore.console is installed here: --http serves it")
    r = subprocess.run([sys.executable, "-m", "rmqcore", "serve", str(tmp_path / "s"), "--listen", "127.0.0.1:0",
                        "--http", "127.0.0.1:0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "rmqcore.console" in r.stderr and "console extra" in r.stderr
    assert not (tmp_path / "s").exists()          # refused before the store was opened


def test_bad_config_keys_are_named_once(tmp_path):
    import subprocess
    import sys
    conf = tmp_path / "broker.conf"
    conf.write_text("# a broker.conf\nbrokerName=b1\nflushDiskType=SYNC_FLUSH\nnoSuchKey=1\nnamesrvAddr=x:9876\n")
    p = subprocess.Popen([sys.executable, "-m", "rmqcore", "serve", str(tmp_path / "s"), "--listen", "127.0.0.1:0",
                          "--config", str(conf)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().startswith("listening on ")
    finally:
        p.terminate()
        assert p.wait(30) == 0
    err = p.stderr.read()
    p.stdout.close()
    p.stderr.close()
    warnings = [ln for ln in err.splitlines() if "not used" in ln]
    assert len(warnings) == 1 and "noSuchKey" in warnings[0] and "namesrvAddr" in warnings[0]
    assert "brokerName" not in warnings[0]
    conf.write_text("flushDiskType=SOMETIMES\n")
    r = subprocess.run([sys.executable, "-m", "rmqcore", "serve", str(tmp_path / "s2"), "--listen", "127.0.0.1:0",
                        "--config", str(conf)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "flush_disk_type" in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize("listener", ["--listen", "--http"])
@pytest.mark.parametrize("problem", ["port taken", "no such address"])
def test_a_listener_that_cannot_listen_is_one_line_exit_2_and_no_store_left(tmp_path, listener, problem):
    import socket
    import subprocess
    import sys
    if listener == "--http":
        pytest.importorskip("aiohttp")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}" if problem == "port taken" else "999.1.1.1:80"
        listen = address if listener == "--listen" else "127.0.0.1:0"
        cmd = [sys.executable, "-m", "rmqcore", "serve", str(tmp_path / "s"), "--listen", listen]
        if listener == "--http":
            cmd += ["--http", address]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr                      # no gRPC log line, no traceback
    assert r.stderr.startswith(f"rmqcore serve: error: {listener}: cannot listen on {address}")
    assert ("in use" in r.stderr.lower()) if problem == "port taken" else "999.1.1.1" in r.stderr
    assert not (tmp_path / "s").exists()                             # the directory it made is gone
    existing = tmp_path / "kept"
    existing.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = subprocess.run([sys.executable, "-m", "rmqcore", "serve", str(existing), "--listen",
                            f"127.0.0.1:{taken.getsockname()[1]}"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and existing.is_dir()                  # a directory it did not make stays
