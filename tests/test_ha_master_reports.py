"""An rmqcore master's HA port (HAConnection) fed by a raw socket that reports bogus offsets: huge, negative, past
the master's end after a good first report, in-range but unaligned to records, cut into pieces. RocketMQ 4.9.7's
HAConnection.ReadSocketService reads the last whole 8-byte value; its first value is where the transfer starts
(0: the master's last file), any byte offset allowed, the frames being unaligned to records; a later report past
the master's getMaxPhyOffset closes the connection ("slave[..] request offset=.. greater than local commitLog
offset"). rmqcore closes on a first report past the end (or negative) as well, where 4.9.7 would wait at that offset
and later send its own bytes from there (a replica silently diverged): ha_service.py's module docstring.

What is checked: the master never crashes, never writes anything but whole ``[phyOffset 8][size 4][bytes]`` frames
continuing one another with the commitlog's own bytes, its last word to a refused slave is the heartbeat at its own
end, its log is untouched and it keeps serving puts and a good slave."""
from __future__ import annotations

import os
import socket
import struct
import time

import pytest

from rmqcore import Message, MessageStore

HEADER = struct.Struct(">qi")


def _wait(cond, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _commitlog(path: str) -> bytes:
    out = b""
    for name in sorted(os.listdir(os.path.join(path, "commitlog"))):
        with open(os.path.join(path, "commitlog", name), "rb") as f:
            out += f.read()
    return out


def _frames(data: bytes) -> list[tuple[int, bytes]]:
    """Every whole frame of ``data``; AssertionError when bytes are left that are not a whole frame."""
    frames, pos = [], 0
    while pos < len(data):
        assert len(data) - pos >= HEADER.size, f"{len(data) - pos} stray bytes at the end"
        off, size = HEADER.unpack_from(data, pos)
        assert 0 <= size <= len(data) - pos - HEADER.size, f"frame at stream byte {pos}: size {size}"
        frames.append((off, data[pos + HEADER.size:pos + HEADER.size + size]))
        pos += HEADER.size + size
    return frames


def _read_until_closed(sock: socket.socket, timeout: float = 20.0) -> bytes:
    sock.settimeout(timeout)
    out = bytearray()
    while data := sock.recv(1 << 20):
        out += data
    return bytes(out)


@pytest.fixture
def master(tmp_path, small_config):
    path = str(tmp_path / "m")
    with MessageStore.open(path, small_config.replace(ha_send_heartbeat_interval=200)) as m:
        for i in range(200):
            m.put(Message("ha-topic", os.urandom(1500), i % 3))
        ha = m.start_ha("127.0.0.1", 0)
        yield m, ha, path


def _connect(ha, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", ha.port))
    return s


def _still_serving(m, ha, path) -> None:
    """The log untouched by the refused slave, puts go on, and a well-behaved slave (reports 0) is served."""
    _wait(lambda: ha.connection_count == 0, "the refused connection to go")
    end = m.commit_log.max_offset
    assert m.put(Message("ha-topic", b"after", 0)).status.name == "PUT_OK"
    s = _connect(ha)
    try:
        s.sendall(struct.pack(">q", 0))
        s.settimeout(10)
        buf = b""
        while len(buf) < HEADER.size:
            buf += s.recv(65536)
        off, _size = HEADER.unpack_from(buf)
        file_size = m.commit_log.mapped_file_queue.mapped_file_size
        assert off == end - end % file_size            # 0: the start of the master's last file (WriteSocketService)
    finally:
        s.close()


@pytest.mark.parametrize("report", [1 << 62, (1 << 63) - 1, -1, -8, -(1 << 63)],
                         ids=["huge", "long-max", "minus-1", "minus-8", "long-min"])
def test_a_first_report_past_the_end_or_negative_is_refused(master, report):
    m, ha, path = master
    before, end = _commitlog(path), m.commit_log.max_offset
    s = _connect(ha)
    try:
        s.sendall(struct.pack(">q", report))
        frames = _frames(_read_until_closed(s))
    finally:
        s.close()
    # nothing but the heartbeat at the master's end: the slave's log is not this one
    assert frames == [(end, b"")]
    assert _commitlog(path)[:end] == before[:end]
    _still_serving(m, ha, path)


def test_a_later_report_past_the_end_closes_between_whole_frames(master):
    """4.9.7's ReadSocketService: after the first report, one greater than getMaxPhyOffset closes the connection.
    The slave reads nothing for a while (the master's writer blocked mid-frame on a full socket), then reports past
    the end: the refusal frame must not land inside a data frame."""
    m, ha, path = master
    log = _commitlog(path)
    end = m.commit_log.max_offset
    s = _connect(ha, rcvbuf=4096)
    try:
        s.sendall(struct.pack(">q", 8))
        time.sleep(0.5)                                   # the writer fills the socket, then blocks mid-frame
        s.sendall(struct.pack(">q", end + 1))
        time.sleep(0.3)
        frames = _frames(_read_until_closed(s))
    finally:
        s.close()
    data = [f for f in frames if f[1]]
    assert data and data[0][0] == 8
    for (off, body), (nxt, _) in zip(data, data[1:]):
        assert nxt == off + len(body)                     # each frame continues the last
        assert body == log[off:off + len(body)]           # the commitlog's own bytes
    assert frames[-1] == (end, b"")                       # the last word: the heartbeat at the master's end
    _still_serving(m, ha, path)


def test_an_unaligned_report_in_pieces_is_served_from_that_byte(master):
    """Any byte offset within the log is a place to start (the frames are not aligned to records); a report cut in
    pieces counts once whole, and trailing bytes short of 8 wait."""
    m, ha, path = master
    log = _commitlog(path)
    start = 12345
    report = struct.pack(">q", start)
    s = _connect(ha)
    try:
        for piece in (report[:3], report[3:6], report[6:] + b"\x00\x00\x00"):
            s.sendall(piece)
            time.sleep(0.05)
        s.settimeout(10)
        buf = b""
        while True:
            buf += s.recv(1 << 20)
            if len(buf) >= HEADER.size and len(buf) >= HEADER.size + HEADER.unpack_from(buf)[1]:
                break
        off, size = HEADER.unpack_from(buf)
        assert off == start and size > 0
        assert buf[HEADER.size:HEADER.size + size] == log[start:start + size]
    finally:
        s.close()
    _still_serving(m, ha, path)


def test_a_slave_that_pauses_reading_is_not_dropped(tmp_path, small_config):
    """A slave that reads nothing for a while (a GC pause, a slow disk) stays connected until haHousekeepingInterval
    (4.9.7's WriteSocketService waits on a full socket without a deadline of its own); the master's writer resumes
    where it stopped. The log is larger than the socket buffers, so the writer blocks mid-frame meanwhile."""
    path = str(tmp_path / "big")
    with MessageStore.open(path, small_config) as m:
        for i in range(3000):
            m.put(Message("ha-topic", os.urandom(1500), i % 3))
        ha = m.start_ha("127.0.0.1", 0)
        end = m.commit_log.max_offset
        assert end > 4 * 1024 * 1024                     # tcp_wmem's usual maximum: the writer must block
        log = _commitlog(path)
        s = _connect(ha, rcvbuf=4096)
        try:
            s.sendall(struct.pack(">q", 8))
            time.sleep(2.5)                              # well within haHousekeepingInterval (20 s)
            assert ha.connection_count == 1
            s.settimeout(20)
            buf, got = b"", 8
            while got < end:
                data = s.recv(1 << 20)
                assert data, f"the master closed the connection at {got} of {end}"
                buf += data
                while len(buf) >= HEADER.size and len(buf) >= HEADER.size + HEADER.unpack_from(buf)[1]:
                    off, size = HEADER.unpack_from(buf)
                    assert off == got and buf[HEADER.size:HEADER.size + size] == log[off:off + size]
                    got += size
                    buf = buf[HEADER.size + size:]
        finally:
            s.close()
