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
import re
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


def socket_inodes(wanted: set[int] | None = None) -> dict[int, int]:
    """inode -> descriptor of every socket this process holds (of those in ``wanted`` only, when given: the scan
    stops once all are found)."""
    inodes: dict[int, int] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            ino = int(target[8:-1])
            if wanted is None:
                inodes[ino] = int(name)
            elif ino in wanted:
                inodes[ino] = int(name)
                if len(inodes) == len(wanted):
                    break
    return inodes


def _table_pattern(port: int) -> "re.Pattern":
    # a line of /proc/net/tcp{,6}: sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...; the local
    # port ``port``, any state but LISTEN (0A); captures the remote address and the inode
    return re.compile(rf"^\s*\d+: [0-9A-F]+:{port:04X} ([0-9A-F]+):[0-9A-F]{{4}} (?!0A)[0-9A-F]{{2}} "
                      r"(?:\S+ +){5}(\d+)", re.M)


def port_connections(port: int, pattern: "re.Pattern | None" = None) -> list[tuple[int, str]]:
    """(inode, remote host) of every connection to local port ``port`` on this machine (not only this process's:
    the caller keeps those it holds). The tables are system-wide (thousands of lines on a busy host): one regular
    expression picks the port's lines in C, so that a pass holds the GIL for little."""
    pattern = pattern or _table_pattern(port)
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                text = f.read()
        except OSError:
            continue
        # inode 0: a socket no process holds any more (TIME_WAIT, FIN_WAIT2)
        out.extend((int(ino), rem) for rem, ino in pattern.findall(text) if ino != "0")
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

    FULL_PASS_S = 10.0

    def __init__(self, port: int, max_per_peer: int, interval: float = 0.5):
        self.port = port
        self.max_per_peer = max_per_peer
        self.interval = interval
        self.closed_total = 0
        self._said: dict[str, float] = {}       # host -> when its excess was last logged
        self._pattern = _table_pattern(port)
        self._clean_fds, self._clean_at = 0, 0.0     # descriptors at the last pass that found no host over its cap
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
        """One pass: shut down each host's newest connections past the cap. Returns how many. Cheap unless a host
        is over its cap (it runs beside the event loop, every ``interval`` s): while this process holds no more
        descriptors than the cap, no host can be over it (one listdir); else the port's connections are counted
        per host from the kernel's tables, and only the sockets to shut down are looked for among the process's
        descriptors (a readlink each: with thousands open, a full scan every pass took the loop's GIL for tens
        of ms)."""
        fds = len(os.listdir("/proc/self/fd"))
        now = time.monotonic()
        if fds <= self.max_per_peer:
            return 0
        # Nothing was over the caps at the last full pass and no descriptor was added since: a host can get over
        # its cap only with new connections, so the tables (~16 ms of kernel CPU to render on a host with 4,000
        # sockets) are read again only when the count grew, or every FULL_PASS_S (connections may also have
        # changed hands between hosts at an equal count).
        if fds <= self._clean_fds and now - self._clean_at < self.FULL_PASS_S:
            return 0
        by_host: dict[str, list[int]] = {}
        names: dict[str, str] = {}                     # the tables' hex address -> the host (an IPv4-mapped
        for ino, rem in port_connections(self.port, self._pattern):      # IPv6 address is its IPv4 one)
            host = names.get(rem)
            if host is None:
                host = names[rem] = _addr(rem)
            by_host.setdefault(host, []).append(ino)
        over_hosts = {host: inos for host, inos in by_host.items() if len(inos) > self.max_per_peer}
        if not over_hosts:
            self._clean_fds, self._clean_at = fds, now
            return 0
        self._clean_fds = 0
        # the connections listed may include other processes' (a client on this machine holds the other end
        # with the server's port as its remote, never as its local port, so only a server on the same port
        # would: SO_REUSEPORT is off); only sockets this process holds are counted and shut down
        held = socket_inodes({ino for inos in over_hosts.values() for ino in inos})
        closed = 0
        for host, inos in over_hosts.items():
            socks = sorted(ino for ino in inos if ino in held)  # inode numbers grow as sockets are made
            over = len(socks) - self.max_per_peer
            if over <= 0:
                continue
            n = sum(shut_down(held[ino], ino) for ino in socks[-over:])
            closed += n
            if n and now - self._said.get(host, -1e9) > 60:
                # once a minute per host, not once per connection
                self._said[host] = now
                log.warning("closing %d connections from %s: it had %d, over its cap of %d "
                            "(--max-connections-per-peer)", n, host, len(socks), self.max_per_peer)
        self.closed_total += closed
        return closed
