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
    s.add_argument("--http", metavar="HOST:PORT", help="also serve the console (rmqcore.console) here")
    s.set_defaults(func=run)


def _host_port(text: str, what: str) -> tuple[str, int]:
    m = re.fullmatch(r"\[?([^\[\]]*?)\]?:(\d+)", text.strip())
    if not m or not 0 <= int(m.group(2)) <= 65535:
        raise ValueError(f"{what} {text!r} is not HOST:PORT")
    return m.group(1) or "0.0.0.0", int(m.group(2))


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def read_properties(path: str) -> dict[str, str]:
    """Java properties as broker.conf uses them: key=value or key: value lines, # and ! comments."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line[0] in "#!":
                continue
            m = re.match(r"([^=:\s]+)\s*[=:]?\s*(.*)", line)
            if not m:
                raise ValueError(f"{path}:{n}: not a key=value line: {line[:80]!r}")
            out[m.group(1)] = m.group(2)
    return out


def apply_config(path: str, targets: list) -> list[str]:
    """Set each broker.conf key on the first dataclass in ``targets`` with the field (camelCase → snake_case),
    converted to the field's type; returns the keys none of them has."""
    props = read_properties(path)
    unknown = []
    for key, raw in props.items():
        name = _snake(key)
        for t in targets:
            fields = {f.name: f for f in dataclasses.fields(t)}
            if name not in fields:
                continue
            cur = getattr(t, name)
            try:
                if isinstance(cur, bool):
                    if raw.lower() not in ("true", "false"):
                        raise ValueError
                    value = raw.lower() == "true"
                elif isinstance(cur, int):
                    value = int(raw)
                elif isinstance(cur, float):
                    value = float(raw)
                else:
                    value = raw
            except ValueError:
                raise ValueError(f"{path}: {key}={raw!r} is not a {type(cur).__name__}") from None
            setattr(t, name, value)
            break
        else:
            unknown.append(key)
    return unknown


def run(args: argparse.Namespace) -> int:
    try:
        import grpc  # noqa: F401
    except ImportError:
        print("rmqcore serve: error: needs grpcio and protobuf: pip install 'rmqcore[server]'", file=sys.stderr)
        return 1
    from ..broker import Broker, BrokerConfig
    from ..config import StoreConfig
    from .server import ServerConfig
    host, port = _host_port(args.listen, "--listen")
    bc, sc, srv = BrokerConfig(), StoreConfig(), ServerConfig()
    if args.config:
        unknown = apply_config(args.config, [bc, sc, srv])
        if unknown:
            log.warning("%s: keys not used by rmqcore: %s", args.config, ", ".join(sorted(unknown)))
        bc.validate()
        sc = sc.replace()
        srv.__post_init__()
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
    if http is not None:
        try:
            from ..console import serve_console  # noqa: F401
        except ImportError as e:
            print(f"rmqcore serve: error: --http needs rmqcore.console ({e})", file=sys.stderr)
            return 1
    broker = Broker.open(args.store, bc, store_config=sc)
    try:
        return asyncio.run(_serve(broker, host, port, srv, acl, tls_cert, tls_key, args.advertise, http))
    finally:
        broker.close()


async def _serve(broker, host, port, config, acl, tls_cert, tls_key, advertise, http) -> int:
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
            runner = await serve_console(server, http[0], http[1])
            print(f"console on http://{http[0]}:{runner.port}", flush=True)
        shown = f"[{host}]" if ":" in host else host
        print(f"listening on {shown}:{server.port}", flush=True)
        await stop.wait()
    finally:
        if runner is not None:
            await runner.close()
        await server.stop()
    return 0
