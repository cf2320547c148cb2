"""A console over a Broker without the gRPC side: ``python -m rmqcore.console STORE --http HOST:PORT``.

BrokerHost is the server object the console reads (the same attributes ``rmqcore serve`` gives it): nothing sends
over the network here, so its ServerEvents only count what the console itself does and the store's own figures
(records stored, offsets, lag) carry the pages.
"""
from __future__ import annotations

import argparse
import asyncio
import hmac
import os
import signal
import sys
import threading

from ..broker import Broker, BrokerConfig
from ..serve.events import ServerEvents
from .access import add_console_access_args, console_ssl_context


class StaticAcl:
    """One admin account given on the command line (``--admin AK:SK``): the console's Basic auth checks it."""

    def __init__(self, accounts: dict[str, tuple[str, bool]]):
        self._accounts = dict(accounts)

    def secret_key(self, access_key: str) -> str | None:
        entry = self._accounts.get(access_key)
        return entry[0] if entry else None

    def is_admin(self, access_key: str) -> bool:
        entry = self._accounts.get(access_key)
        return bool(entry and entry[1])

    def check(self, access_key: str, secret: str) -> bool:
        s = self.secret_key(access_key)
        return s is not None and hmac.compare_digest(s, secret)

    def may_read(self, access_key: str, topic: str) -> bool:
        """An admin reads every user topic; an account without a permission table none (RocketMQ's
        defaultTopicPerm is DENY)."""
        return self.is_admin(access_key)


class BrokerHost:
    """What the console needs of a server: a broker, its events, where it listens, in-flight counts, the ACL."""

    def __init__(self, broker: Broker, host: str = "127.0.0.1", port: int = 0, acl=None,
                 events: ServerEvents | None = None):
        self.broker = broker
        self.events = events or ServerEvents()
        self.host = host
        self.port = port
        self.acl = acl
        # (group) -> {(topic, queue_id): messages delivered and not yet committed}; a gRPC server keeps these.
        self._inflight: dict[str, dict[tuple[str, int], int]] = {}
        self._lock = threading.Lock()

    def inflight(self, group: str) -> dict[tuple[str, int], int]:
        with self._lock:
            return dict(self._inflight.get(group, {}))

    def set_inflight(self, group: str, topic: str, queue_id: int, n: int) -> None:
        """Messages of the queue delivered to ``group`` and not yet committed (0 forgets the queue)."""
        with self._lock:
            queues = self._inflight.setdefault(group, {})
            if n > 0:
                queues[(topic, queue_id)] = n
            else:
                queues.pop((topic, queue_id), None)


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets) -> (host, port); ValueError naming what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--http: expected HOST:PORT with a port in [0, 65535], got {text!r}")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


async def run(store: str, host: str, port: int, acl=None, ready=None, **console) -> None:
    """``console``: serve_console's access keywords (allowed_hosts, allow_anonymous_changes, ssl_context)."""
    from . import serve_console
    broker = Broker.open(store, BrokerConfig())
    try:
        server = BrokerHost(broker, host, port, acl)
        try:
            runner = await serve_console(server, host, port, **console)
        except OSError as e:
            raise OSError(f"--http: cannot listen on {host}:{port}: {os.strerror(e.errno) if e.errno else e}") from None
        server.port = runner.port
        print(f"rmqcore console on {runner.url}/ (metrics at {runner.url}/metrics)", flush=True)
        if ready is not None:
            ready(server, runner)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await runner.close()
    finally:
        broker.close()


PROG = "python -m rmqcore.console"


def main(argv=None) -> int:
    """The command's exit statuses are the command line's (admin_views): 0 after SIGINT/SIGTERM, 2 with one line on
    stderr for what the user can fix (a held or unusable store path, a port, a missing extra)."""
    from ..admin import NewStoreDir
    from ..admin_views import EXIT_ERROR, EXIT_OK, missing_extra
    from ..errors import RmqStoreError
    p = argparse.ArgumentParser(prog=PROG, description="the rmqcore web console and /metrics over a store, without gRPC")
    p.add_argument("store", help="store directory (opened as a Broker: it takes the store's lock)")
    p.add_argument("--http", default="127.0.0.1:8080", metavar="HOST:PORT",
                   help="where to listen (default 127.0.0.1:8080; port 0 picks one)")
    p.add_argument("--admin", metavar="AK:SK", help="require HTTP Basic with this admin account")
    p.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate chain (with --tls-key)")
    p.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    add_console_access_args(p)
    args = p.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        p.error("--tls-cert and --tls-key go together")
    try:
        host, port = parse_listen(args.http)
    except ValueError as e:
        p.error(str(e))
    acl = None
    if args.admin:
        ak, sep, sk = args.admin.partition(":")
        if not sep or not ak or not sk:
            p.error("--admin: expected ACCESS_KEY:SECRET_KEY")
        acl = StaticAcl({ak: (sk, True)})
    import logging
    logging.basicConfig(level=logging.WARNING, format="rmqcore: %(message)s")
    console = {"allowed_hosts": tuple(args.console_allowed_host),
               "allow_anonymous_changes": args.console_allow_anonymous_changes,
               "ssl_context": console_ssl_context(args.tls_cert, args.tls_key) if args.tls_cert else None}
    try:
        from . import app  # noqa: F401  (aiohttp, Jinja2, prometheus_client: before the store is opened)
    except ImportError as e:
        print(f"{PROG}: error: {missing_extra('the console', 'console', e)}", file=sys.stderr)
        return EXIT_ERROR
    try:
        with NewStoreDir(args.store) as made:
            asyncio.run(run(args.store, host, port, acl, ready=lambda server, runner: setattr(made, "served", True),
                            **console))
    except KeyboardInterrupt:
        pass
    except (RmqStoreError, OSError) as e:
        # StoreLockedError (a server holds it), StoreLayoutError (a file, not a directory), FileNotFoundError (no
        # parent directory), a port taken: the same one line as the rmqcore command line's
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
