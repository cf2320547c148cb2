"""``rmqcore serve STORE``: the command around MessagingServer (the rest of the command line is rmqcore/cli.py).

Prints ``listening on HOST:PORT`` once RPCs are accepted. SIGTERM / SIGINT: stop accepting, finish running RPCs,
write the pop state, close the broker (its config files, the store) cleanly, exit 0.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import re
import signal
import sys

from ..console.access import add_console_access_args, console_ssl_context

log = logging.getLogger(__name__)


def add_parser(sub) -> None:
    s = sub.add_parser("serve", help="serve RocketMQ 5's gRPC protocol (the official clients) over a store",
                       description="Open STORE as a broker and serve RocketMQ 5's gRPC MessagingService on "
                                   "--listen, for RocketMQ's own clients (producers, simple and push consumers, "
                                   "transactions). Prints 'listening on HOST:PORT' once ready; SIGTERM/SIGINT "
                                   "stop it cleanly.")
    s.add_argument("store", help="store directory (created if missing)")
    s.add_argument("--listen", default="127.0.0.1:8081", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:8081, the proxy's port; port 0 picks a free one)")
    s.add_argument("--config", metavar="FILE",
                   help="a RocketMQ broker.conf (Java properties: camelCase keys of BrokerConfig, "
                        "MessageStoreConfig and the proxy's settings)")
    s.add_argument("--acl", metavar="FILE", help="accounts and permissions (plain_acl.yml shape, or .json): "
                                                 "turns on AccessKey/SecretKey authentication")
    s.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate chain (with --tls-key)")
    s.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    s.add_argument("--advertise", metavar="HOST", help="host clients should connect to, when --listen is 0.0.0.0")
    s.add_argument("--http", metavar="HOST:PORT", help="also serve the console (rmqcore.console) here, over TLS with "
                                                       "--tls-cert")
    add_console_access_args(s)
    s.add_argument("--max-connections", type=int, metavar="N",
                   help="connections accepted in all (default: the open-file limit, raised to its hard limit at "
                        "start, less 256); past it a new connection is closed at once")
    s.add_argument("--max-connections-per-peer", type=int, metavar="N",
                   help="connections from one host (default 256; 0: no cap); its newest past the cap are closed")
    s.add_argument("--idle-timeout", type=float, metavar="S",
                   help="close a connection that made no RPC for S seconds (default 120)")
    s.set_defaults(func=run)


def _host_port(text: str, what: str) -> tuple[str, int]:
    m = re.fullmatch(r"\[?([^\[\]]*?)\]?:(\d+)", text.strip())
    if not m or not 0 <= int(m.group(2)) <= 65535:
        raise ValueError(f"{what} {text!r} is not HOST:PORT")
    return m.group(1) or "0.0.0.0", int(m.group(2))


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def load_config(path: str):
    """broker.conf → (BrokerConfig, StoreConfig, ServerConfig, keys none of them uses): the broker's and store's keys
    as rmqcore.broker.broker_conf reads them (Java properties syntax, errors naming key and line), then the
    proxy's settings ServerConfig has (camelCase of its snake_case fields) from the keys left over."""
    from ..broker.broker_conf import load_broker_conf, parse_properties
    from ..config_manager import file2string
    from ..errors import ConfigFileError
    from .server import ServerConfig
    bc, sc, unknown = load_broker_conf(path)
    props = parse_properties(file2string(path) or "", path)
    srv = ServerConfig()
    fields = {f.name: f for f in dataclasses.fields(srv)}
    rest = []
    for key in unknown:
        name = _snake(key)
        if name not in fields:
            rest.append(key)
            continue
        raw, line = props[key]
        cur = getattr(srv, name)
        try:
            if isinstance(cur, bool):
                if raw.strip().lower() not in ("true", "false"):
                    raise ValueError
                value = raw.strip().lower() == "true"
            else:
                value = type(cur)(raw.strip())
        except ValueError:
            raise ConfigFileError(path, key, f"line {line}: {raw!r} is not a {type(cur).__name__}") from None
        setattr(srv, name, value)
    srv.__post_init__()
    return bc, sc, srv, rest


def run(args: argparse.Namespace) -> int:
    try:
        import grpc  # noqa: F401
    except ImportError:
        print("rmqcore serve: error: needs grpcio and protobuf, the server extra: pip install -e '.[server]' in a clone", file=sys.stderr)
        return 1
    from ..broker import Broker, BrokerConfig
    from ..config import StoreConfig
    from .server import ServerConfig
    host, port = _host_port(args.listen, "--listen")
    bc, sc, srv = BrokerConfig(), StoreConfig(), ServerConfig()
    if args.config:
        bc, sc, srv, unknown = load_config(args.config)
        if unknown:
            log.warning("%s: keys not used by rmqcore: %s", args.config, ", ".join(sorted(unknown)))
    for flag, name in (("max_connections", "max_connections"), ("max_connections_per_peer",
                                                                  "max_connections_per_peer"),
                       ("idle_timeout", "connection_idle_s")):
        value = getattr(args, flag, None)
        if value is not None:
            if value < 0:
                raise ValueError(f"--{flag.replace('_', '-')} must be >= 0, got {value}")
            setattr(srv, name, value)
    from .connections import raise_descriptor_limit
    before, after = raise_descriptor_limit()
    if after > before:
        log.info("open-file limit raised from %d to %d (the hard limit)", before, after)
    acl = None
    if args.acl:
        from .auth import Acl
        acl = Acl.load(args.acl)
    tls_cert = tls_key = None
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    if args.tls_cert:
        with open(args.tls_cert, "rb") as f:
            tls_cert = f.read()
        with open(args.tls_key, "rb") as f:
            tls_key = f.read()
    http = _host_port(args.http, "--http") if args.http else None
    console = {"allowed_hosts": tuple(args.console_allowed_host),
               "allow_anonymous_changes": args.console_allow_anonymous_changes,
               "ssl_context": console_ssl_context(args.tls_cert, args.tls_key) if http and args.tls_cert else None}
    if http is not None:
        try:
            from ..console import serve_console  # noqa: F401
        except ImportError as e:
            print(f"rmqcore serve: error: --http needs rmqcore.console ({e})", file=sys.stderr)
            return 1
    broker = Broker.open(args.store, bc, store_config=sc)
    try:
        return asyncio.run(_serve(broker, host, port, srv, acl, tls_cert, tls_key, args.advertise, http,
                                  console))
    finally:
        broker.close()


async def _serve(broker, host, port, config, acl, tls_cert, tls_key, advertise, http, console) -> int:
    from .server import MessagingServer
    server = MessagingServer(broker, host=host, port=port, config=config, acl=acl, tls_cert=tls_cert,
                             tls_key=tls_key, advertised_host=advertise)
    await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = None
    try:
        if http is not None:
            from ..console import serve_console
            runner = await serve_console(server, http[0], http[1], **console)
            print(f"console on {runner.url}", flush=True)
        shown = f"[{host}]" if ":" in host else host
        print(f"listening on {shown}:{server.port}", flush=True)
        await stop.wait()
    finally:
        if runner is not None:
            await runner.close()
        await server.stop()
    return 0
