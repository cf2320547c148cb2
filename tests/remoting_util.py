"""Helpers for the remoting tests: `rmqcore serve --remoting` in a child process on 127.0.0.1 port 0, and a small
blocking client speaking RemotingCommand frames (rmqcore.remoting.remoting_command's reference encoder) to poke at
the protocol where a real client never would."""
from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time

from rmqcore.remoting import remoting_command as rc
from serve_util import PKG_PARENT


class RemotingProcess:
    """``rmqcore serve STORE --remoting 127.0.0.1:0 --namesrv 127.0.0.1:0 [args]``; ``conf`` a broker.conf dict."""

    def __init__(self, store: str, conf: dict | None = None, args=(), namesrv: bool = True):
        cmd = [sys.executable, "-m", "rmqcore", "serve", store, "--remoting", "127.0.0.1:0", *args]
        if namesrv:
            cmd += ["--namesrv", "127.0.0.1:0"]
        if conf:
            os.makedirs(os.path.dirname(store.rstrip("/")) or ".", exist_ok=True)
            path = store.rstrip("/") + ".broker.conf"
            with open(path, "w") as f:
                f.write("".join(f"{k}={v}\n" for k, v in conf.items()))
            cmd += ["--config", path]
        self.proc = subprocess.Popen(cmd, cwd=PKG_PARENT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = {}
        want = ("remoting", "namesrv") if namesrv else ("remoting",)
        while not all(w in self.lines for w in want):
            line = self.proc.stdout.readline()
            if not line:
                self.proc.kill()
                raise RuntimeError(f"server did not start: {self.proc.stderr.read()}")
            word, _, addr = line.strip().partition(" on ")
            self.lines[word] = addr
        self.address = self.lines["remoting"]
        self.port = int(self.address.rsplit(":", 1)[1])
        self.namesrv = self.lines.get("namesrv")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self._close()

    def kill(self) -> int:
        self.proc.kill()
        rc_ = self.proc.wait(30)
        self._close()
        return rc_

    def _close(self):
        for f in (self.proc.stdout, self.proc.stderr):
            if f and not f.closed:
                f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.kill()


class Client:
    """One connection; ``call`` sends a request and returns the answer with the same opaque."""

    def __init__(self, address: str, serialize_type: int = rc.JSON):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.stype = serialize_type
        self.opaque = 0
        self.buf = b""
        self.pending = []           # requests the server sent us (NOTIFY_CONSUMER_IDS_CHANGED ...)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, code: int, ext: dict | None = None, body: bytes = b"", flag: int = 0) -> int:
        self.opaque += 1
        cmd = rc.RemotingCommand(code, "PYTHON", 407, self.opaque, flag, None, dict(ext or {}), self.stype, body)
        self.sock.sendall(rc.encode_request(cmd))
        return self.opaque

    def read(self) -> rc.RemotingCommand | None:
        """The next frame, None when the server closed the connection."""
        while True:
            cmds, used = rc.decode_frames(self.buf)
            if cmds:
                first = cmds[0]
                n = struct.unpack_from(">i", self.buf)[0] + 4
                self.buf = self.buf[n:]
                return first
            data = self.sock.recv(1 << 20)
            if not data:
                return None
            self.buf += data

    def answer(self, opaque: int) -> rc.RemotingCommand:
        # answers may come out of order (a broker answers a send when its put completes, as RocketMQ's does; clients
        # match them by opaque): one read while waiting for another is kept in pending, and found there
        for i, cmd in enumerate(self.pending):
            if cmd.flag & rc.RESPONSE_FLAG and cmd.opaque == opaque:
                return self.pending.pop(i)
        while True:
            cmd = self.read()
            assert cmd is not None, "the server closed the connection"
            if cmd.flag & rc.RESPONSE_FLAG and cmd.opaque == opaque:
                return cmd
            self.pending.append(cmd)

    def call(self, code: int, ext: dict | None = None, body: bytes = b"") -> rc.RemotingCommand:
        return self.answer(self.request(code, ext, body))

    def closed_by_server(self, timeout: float = 10) -> bool:
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()


def wait_for(cond, what: str, timeout: float = 30.0, interval: float = 0.3):
    """cond()'s first true value, polled until ``timeout`` (a state another process reaches in its own time)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)


def stop_process(pid: int, timeout: float = 30.0) -> None:
    """SIGSTOP ``pid`` and return once every one of its threads is stopped. kill() returns before that: the kernel
    stops one thread of a multi-threaded process, which then stops the others, and on a loaded machine that thread
    may wait milliseconds for a CPU while the others run on (a stopped slave's HA thread still acknowledging the
    next send)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while True:
        running = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]     # after "(comm)", which may hold spaces
            except (FileNotFoundError, ProcessLookupError):
                continue                                              # a thread that ended meanwhile
            if state not in "TtZX":
                running.append((tid, state))
        if not running:
            return
        assert time.monotonic() < deadline, f"threads of {pid} not stopped {timeout} s after SIGSTOP: {running}"
        time.sleep(0.001)


def props(d: dict) -> str:
    """MessageDecoder.messageProperties2String."""
    return "".join(f"{k}\x01{v}\x02" for k, v in d.items())


def send_v2(c: Client, topic: str, body: bytes, queue_id: int = 0, properties: dict | None = None,
            group: str = "pg") -> rc.RemotingCommand:
    ext = {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": props(properties or {}), "j": "0", "k": "false",
           "m": "false"}
    return c.call(310, ext, body)


def pull(c: Client, group: str, topic: str, queue_id: int, offset: int, suspend_ms: int = 0, sys_flag: int = 0,
         subscription: str | None = None) -> int:
    ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
           "maxMsgNums": "32", "sysFlag": str(sys_flag | (2 if suspend_ms else 0)), "commitOffset": "0",
           "suspendTimeoutMillis": str(suspend_ms), "subVersion": "0"}
    if subscription is not None:
        ext["subscription"] = subscription
        ext["expressionType"] = "TAG"
    return c.request(11, ext)
