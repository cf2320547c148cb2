"""Flow control and many connections on `rmqcore serve --remoting` (a child process): a reader that never reads
its answers stops having its requests read (the server's memory stays bounded) while other clients are served, and
thousands of idle connections leave room for a working client; the serve command's connection limits hold here too.
"""
import os
import resource
import socket
import threading
import time

import pytest

from rmqcore.remoting import remoting_command as rc
from remoting_util import Client, RemotingProcess, pull, send_v2

MiB = 1024 * 1024
N = 2000


def rss_anon(pid: int) -> int:
    """The process's anonymous resident memory (its heap: what buffered answers would grow; the commitlog's
    mapped pages are file-backed and not counted)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/PID/status")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # no cap per peer: the idle flood below comes from the same host as the client that must still send
    with RemotingProcess(str(tmp_path_factory.mktemp("rflow") / "store"),
                         args=("--max-connections-per-peer", "0")) as s:
        yield s


def _pull_request(opaque: int, offset: int) -> bytes:
    return rc.encode_request(rc.RemotingCommand(11, "JAVA", 407, opaque, 0, None, {
        "consumerGroup": "g-slow", "topic": "t-slow", "queueId": "0", "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"}))


def test_a_reader_that_never_reads_is_paused_and_others_are_served(server):
    c = Client(server.address)
    body = os.urandom(4096)
    for _ in range(64):
        assert send_v2(c, "t-slow", body).code == 0
    before = rss_anon(server.proc.pid)
    # 2,000 pulls of 32 records (~260 MiB of answers) from a socket with a small receive buffer that is not read
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    slow.connect(("127.0.0.1", server.port))
    requests = b"".join(_pull_request(i + 1, (i % 2) * 32) for i in range(N))
    slow.settimeout(0.5)
    sent = 0
    deadline = time.monotonic() + 20
    while sent < len(requests) and time.monotonic() < deadline:
        try:
            sent += slow.send(requests[sent:])
        except socket.timeout:
            pass                    # the server stopped reading: its socket buffer is full too
    time.sleep(1.0)
    grown = rss_anon(server.proc.pid) - before
    # without flow control every request a read brought is answered into the transport's buffer: ~130 KiB each
    assert grown < 12 * MiB, f"the server's heap grew by {grown / MiB:.1f} MiB behind a reader that never reads"
    # others are served meanwhile
    other = Client(server.address)
    assert send_v2(other, "t-slow", b"other").code == 0
    p = other.answer(pull(other, "g-other", "t-slow", 0, 64))
    assert p.code == 0 and b"other" in p.body
    # the slow reader reads at last: every request it sent is answered, in order
    sender = threading.Thread(target=slow.sendall, args=(requests[sent:],), daemon=True)
    sender.start()
    buf, opaques = b"", []
    slow.settimeout(30)
    while len(opaques) < N:
        data = slow.recv(1 << 20)
        assert data, f"the server closed the slow reader after {len(opaques)} answers"
        buf += data
        cmds, used = rc.decode_frames(buf)
        buf = buf[used:]
        opaques += [cmd.opaque for cmd in cmds]
    bad = [(i, o) for i, o in enumerate(opaques) if o != i + 1][:5]
    assert opaques == list(range(1, N + 1)), (len(opaques), bad)
    sender.join(10)
    slow.close()
    assert server.alive()


def test_two_thousand_idle_connections_then_a_client_still_sends(server):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2000 + 256
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"the open-file hard limit ({hard}) is below {want}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    idle = []
    try:
        for _ in range(2000):
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
        c = Client(server.address)
        r = send_v2(c, "t-many", b"after 2000 idle connections")
        assert r.code == 0, r.remark
        c.close()
        assert server.alive()
    finally:
        for s in idle:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_serve_connection_caps_and_idle_timeout_apply_to_remoting(tmp_path):
    with RemotingProcess(str(tmp_path / "store"), args=("--max-connections-per-peer", "3", "--idle-timeout", "1"),
                         namesrv=False) as srv:
        conns = [Client(srv.address) for _ in range(3)]
        extra = Client(srv.address)
        # the fourth from this host is closed as it is accepted
        assert extra.closed_by_server(10)
        # a connection that keeps talking outlives the idle timeout; the silent ones are closed
        busy = conns[0]
        for _ in range(12):
            assert send_v2(busy, "t-caps", b"busy").code == 0
            time.sleep(0.25)
        assert all(c.closed_by_server(10) for c in conns[1:])
        # their places are free again
        again = Client(srv.address)
        assert send_v2(again, "t-caps", b"again").code == 0
        assert srv.alive()
