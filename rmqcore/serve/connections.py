"""Connection limits of ``rmqcore serve``: the descriptor limit raised, connections capped in all and per peer, idle
ones closed (issue 36: ~1,000 idle connections from one peer used up a 1,024-descriptor limit, and every new
client then timed out while gRPC logged "File descriptor limit reached. Retrying." once per accept).

gRPC's C core owns the listening socket and accepts on its own threads; grpcio exposes no accept hook, no way to
hand it a socket we accepted, and no per-peer limit. What it does expose is used as it is:

* ``grpc.max_allowed_incoming_connections``: the total cap; a connection past it is closed as it is accepted,
  so its descriptor is given back at once;
* ``grpc.max_connection_idle_ms``: a connection without an RPC for that long gets GOAWAY and is closed (a client
  with an open Telemetry stream, as every RocketMQ 5 client has, is never idle);
* ``grpc.server_handshake_timeout_ms``: a connection that never completes the HTTP/2 (or TLS) handshake is closed.

The cap per peer is done here, by ``ConnectionGuard``: a thread that every ``interval`` s lists this process's
sockets on the server's port (``/proc/self/fd`` and ``/proc/net/tcp{,6}``), counts them per remote host, and shuts
down (``shutdown(2)`` on a duplicate of the descriptor, checked to be the same socket) the newest of a host's
connections past its cap. gRPC then sees the connection end as if the peer had closed it and releases it itself;
the descriptor is never closed under gRPC's feet. A server interceptor could refuse RPCs from such a peer, but not
free the descriptors of connections that send none, which is the attack. Linux only (elsewhere the guard is off
and says so once); the total cap and the idle timeouts hold everywhere.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading
import time

log = logging.getLogger(__name__)

# Descriptors kept aside from the default total cap: the store's files (commitlog, consume queues, index), the
# config files, the console, the loop's own.
DESCRIPTOR_RESERVE = 256
HANDSHAKE_TIMEOUT_MS = 10_000      # a real client completes the HTTP/2 (or TLS) handshake in milliseconds


def raise_descriptor_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as far as the kernel's nr_open allows). Returns (before,
    after) soft limits; (n, n) where nothing could be raised."""
    try:
        import resource
    except ImportError:                 # not POSIX
        return 0, 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard
    if want == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                want = int(f.read())
        except (OSError, ValueError):
            want = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            return soft, want
        except (OSError, ValueError) as e:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, want, e)
    return soft, soft


def descriptor_limit() -> int:
    try:
        import resource
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except ImportError:
        return 1024


def default_max_connections() -> int:
    """The total cap when none is given: the descriptor limit less DESCRIPTOR_RESERVE (at least 16)."""
    return max(16, descriptor_limit() - DESCRIPTOR_RESERVE)


def _addr(hexaddr: str) -> str:
    """An address of /proc/net/tcp{,6} ("0100007F", or 32 hex digits in four host-order words) as text."""
    raw = bytes.fromhex(hexaddr)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    ip = ipaddress.IPv6Address(words)
    return str(ip.ipv4_mapped or ip)


def socket_inodes() -> dict[int, int]:
    """inode -> descriptor of every socket this process holds."""
    inodes: dict[int, int] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes[int(target[8:-1])] = int(name)
    return inodes


def peer_sockets(port: int, inodes: dict[int, int] | None = None) -> list[tuple[int, int, str]]:
    """(descriptor, inode, remote host) of every connected socket of this process whose local port is ``port``."""
    if inodes is None:
        inodes = socket_inodes()
    out = []
    want = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # fields: sl local rem st queues timer retrnsmt uid timeout inode ...; st 0A is LISTEN
            if len(fields) < 10 or not fields[1].endswith(want) or fields[3] == "0A":
                continue
            ino = int(fields[9])
            fd = inodes.get(ino)
            if fd is not None:
                out.append((fd, ino, _addr(fields[2].split(":")[0])))
    return out


def shut_down(fd: int, inode: int) -> bool:
    """shutdown(2) the socket at ``fd`` if it still is socket ``inode``: its owner (gRPC) sees the connection end
    and closes the descriptor itself."""
    try:
        dup = os.dup(fd)
    except OSError:
        return False
    try:
        if os.fstat(dup).st_ino != inode:
            return False                 # gRPC closed it and the number was reused meanwhile
        sock = socket.socket(fileno=dup)
        dup = -1                         # the socket object owns the duplicate now
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.close()                 # the duplicate only
        return True
    finally:
        if dup >= 0:
            os.close(dup)


class ConnectionGuard:
    """The per-peer cap (see the module's docstring): ``ConnectionGuard(port, max_per_peer).start()``."""

    def __init__(self, port: int, max_per_peer: int, interval: float = 0.5):
        self.port = port
        self.max_per_peer = max_per_peer
        self.interval = interval
        self.closed_total = 0
        self._said: dict[str, float] = {}       # host -> when its excess was last logged
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def supported() -> bool:
        return os.path.isdir("/proc/self/fd") and os.path.exists("/proc/net/tcp")

    def start(self) -> "ConnectionGuard":
        if self.max_per_peer <= 0:
            return self
        if not self.supported():
            log.warning("connections per peer are not capped here (needs Linux's /proc); the total cap and the "
                        "idle timeouts still hold")
            return self
        self._thread = threading.Thread(target=self._run, name="ConnectionGuard", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.trim()
            except Exception:
                log.exception("connection guard pass failed")

    def trim(self) -> int:
        """One pass: shut down each host's newest connections past the cap. Returns how many."""
        inodes = socket_inodes()
        if len(inodes) <= self.max_per_peer:
            return 0             # no host can be over its cap: the system-wide socket tables are not read
        by_host: dict[str, list[tuple[int, int]]] = {}
        for fd, ino, host in peer_sockets(self.port, inodes):
            by_host.setdefault(host, []).append((ino, fd))
        closed = 0
        now = time.monotonic()
        for host, socks in by_host.items():
            over = len(socks) - self.max_per_peer
            if over <= 0:
                continue
            socks.sort()                 # inode numbers grow as sockets are made: the newest last
            n = sum(shut_down(fd, ino) for ino, fd in socks[-over:])
            closed += n
            if n and now - self._said.get(host, -1e9) > 60:
                # once a minute per host, not once per connection
                self._said[host] = now
                log.warning("closing %d connections from %s: it had %d, over its cap of %d "
                            "(--max-connections-per-peer)", n, host, len(socks), self.max_per_peer)
        self.closed_total += closed
        return closed
