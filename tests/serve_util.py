"""Helpers for the `rmqcore serve` tests: the server in a child process on 127.0.0.1 port 0, stores prepared offline
with topics of a message type and groups, and the official client's objects built against it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import rmqcore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Child processes start where the rmqcore this test imported lives (an unpacked sdist's sources are never on
# their path: they would shadow the installed build).
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))

# Short times so tests run in seconds (the proxy's defaults are 10 s invisible time and 5-20 s long polls).
FAST_CONF = {
    "minInvisibleMs": "1000",
    "minLongPollingMs": "500",
    "maxLongPollingMs": "3000",
    "pollIntervalMs": "50",
    "transactionCheckInterval": "500",
    "transactionTimeout": "500",
    "maxBackoffS": "1",
}


class ServerProcess:
    def __init__(self, store: str, conf: dict | None = None, args=(), env=None, preexec_fn=None):
        self.store = store
        self.conf_path = None
        cmd = [sys.executable, "-m", "rmqcore", "serve", store, "--listen", "127.0.0.1:0", *args]
        if conf:
            os.makedirs(os.path.dirname(store) or ".", exist_ok=True)
            self.conf_path = store.rstrip("/") + ".broker.conf"
            with open(self.conf_path, "w") as f:
                f.write("".join(f"{k}={v}\n" for k, v in conf.items()))
            cmd += ["--config", self.conf_path]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=PKG_PARENT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})}, preexec_fn=preexec_fn)
        line = self.proc.stdout.readline()
        self.console_url = None
        if line.startswith("console on "):     # --http: the console's address comes first
            self.console_url = line.split()[-1]
            line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r} {self.proc.stderr.read()}")
        self.ready_after = time.monotonic() - self.started
        self.endpoint = line.split()[-1]
        self.port = int(self.endpoint.rsplit(":", 1)[1])

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self._close_pipes()

    def kill(self) -> int:
        self.proc.kill()
        rc = self.proc.wait(30)
        self._close_pipes()
        return rc

    def _close_pipes(self):
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()

    def stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.stderr and not self.proc.stderr.closed else ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.kill()


def prepare(store: str, topics: dict | None = None, groups: dict | None = None) -> None:
    """Create topics ({name: (message_type, queues)}) and groups ({name: dict of SubscriptionGroupConfig values,
    ``fifo`` for consumeMessageOrderly}) on a store no server holds."""
    from rmqcore.broker import Broker, SubscriptionGroupConfig
    with Broker.open(store) as b:
        for name, (mtype, queues) in (topics or {}).items():
            b.create_topic(name, queues, message_type=mtype)
        for name, values in (groups or {}).items():
            values = dict(values)
            fifo = values.pop("fifo", False)
            b.update_group(SubscriptionGroupConfig(name, consume_message_orderly=fifo, **values))


def config(endpoint: str, ak: str = "", sk: str = "", namespace: str = ""):
    from rocketmq import ClientConfiguration, Credentials
    return ClientConfiguration(endpoint, Credentials(ak, sk), namespace=namespace, request_timeout=5)


def message(topic: str, body: bytes, tag: str | None = None, keys=None, props=None, group=None, deliver_at=None):
    from rocketmq import Message
    m = Message()
    m.topic = topic
    m.body = body
    if tag:
        m.tag = tag
    if keys:
        m.keys = keys
    for k, v in (props or {}).items():
        m.add_property(k, v)
    if group:
        m.message_group = group
    if deliver_at is not None:
        # The client's send puts this value in delivery_timestamp.seconds (its docstring says ms): seconds here.
        m.delivery_timestamp = deliver_at
    return m


def receive_all(consumer, want: int, invisible: int = 5, deadline_s: float = 30, ack: bool = True):
    """Receive until ``want`` messages came (acking each unless ``ack`` is False) or the deadline passed."""
    out = []
    end = time.monotonic() + deadline_s
    while len(out) < want and time.monotonic() < end:
        for m in consumer.receive(32, invisible):
            out.append(m)
            if ack:
                consumer.ack(m)
    return out
