"""``rmqcore serve STORE``: the command around the protocol fronts over one Broker on one event loop — RocketMQ 5's
gRPC (MessagingServer, ``--listen``) and the classic remoting protocol (rmqcore.remoting.RemotingServer,
``--remoting``, with the name server's part also on ``--namesrv``). The rest of the command line is rmqcore/cli.py.
Each front is imported only when asked for, so neither needs the other's dependencies.

Prints ``listening on HOST:PORT`` (gRPC), ``remoting on HOST:PORT`` and ``namesrv on HOST:PORT`` once each accepts. SIGTERM / SIGINT: stop accepting, finish running RPCs,
write the pop state, close the broker (its config files, the store) cleanly, exit 0.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import re
import signal
import socket
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
    s.add_argument("--listen", metavar="HOST:PORT",
                   help="serve gRPC here (default 127.0.0.1:8081, the proxy's port, unless only --remoting is given; "
                        "port 0 picks a free one)")
    s.add_argument("--remoting", metavar="HOST:PORT",
                   help="also serve RocketMQ's classic remoting protocol (the 4.x clients) here, name server "
                        "requests included (the Java broker's port is 10911; port 0 picks a free one)")
    s.add_argument("--namesrv", metavar="HOST:PORT",
                   help="with --remoting: answer the name server's requests on this address too (RocketMQ's 9876)")
    s.add_argument("--namesrv-addr", metavar="HOST:PORT[;HOST:PORT...]",
                   help="with --remoting: register this broker with these name servers (broker.conf's namesrvAddr): "
                        "at start, after each topic change and every registerNameServerPeriod; unregistered at "
                        "SIGTERM")
    s.add_argument("--config", metavar="FILE",
                   help="a RocketMQ broker.conf (Java properties: camelCase keys of BrokerConfig, "
                        "MessageStoreConfig and the proxy's settings)")
    s.add_argument("--acl", metavar="FILE", help="accounts and permissions (plain_acl.yml shape, or .json): "
                                                 "turns on AccessKey/SecretKey authentication (gRPC and --remoting)")
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
    s.add_argument("--ha-listen", metavar="HOST:PORT",
                   help="a master (brokerRole ASYNC_MASTER or SYNC_MASTER): serve slaves RocketMQ's HA replication "
                        "here (port 0 picks a free one; printed as 'ha on HOST:PORT'). Default: on --listen's host "
                        "and haListenPort when the --config file sets brokerRole, haListenPort or listenPort")
    s.add_argument("--ha-master", metavar="HOST:PORT",
                   help="a slave (brokerRole=SLAVE): replicate from this master's HA port (haMasterAddress)")
    s.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default="auto",
                   help="the event loop both fronts run on: uvloop (libuv, in C; the server extra installs it) or "
                        "the standard library's asyncio loop. auto (the default): uvloop when it is installed")
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
    from ..server.server import ServerConfig
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


def _loop_factory(choice: str):
    """The event loop factory for ``--loop``: uvloop's for "uvloop" (or "auto" with it installed), else None (the
    standard library's loop). uvloop runs the loop's own work (readiness, reads, timers, callbacks) in C: per wake-up
    of a request-answer round trip that was most of the server's CPU (bench/README.md, the remoting front)."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError as e:
        if choice == "uvloop":
            from ..admin_views import missing_extra
            raise ValueError(missing_extra("--loop uvloop", "server", e)) from None
        return None
    return uvloop.new_event_loop


def run(args: argparse.Namespace) -> int:
    from ..admin_views import EXIT_ERROR, missing_extra
    loop_factory = _loop_factory(args.loop)
    if args.listen is None and args.remoting is None:
        args.listen = "127.0.0.1:8081"
    if args.namesrv is not None and args.remoting is None:
        raise ValueError("--namesrv goes with --remoting")
    if args.listen is not None:
        try:
            import grpc  # noqa: F401
            import google.protobuf  # noqa: F401
        except ImportError as e:
            print(f"rmqcore serve: error: {missing_extra('rmqcore serve', 'server', e)}", file=sys.stderr)
            return EXIT_ERROR
    from ..broker import Broker, BrokerConfig
    from ..config import StoreConfig
    from ..server.server import ServerConfig
    host, port = _host_port(args.listen, "--listen") if args.listen is not None else (None, None)
    bc, sc, srv = BrokerConfig(), StoreConfig(), ServerConfig()
    conf_keys: set = set()
    if args.config:
        bc, sc, srv, unknown = load_config(args.config)
        from ..broker.broker_conf import parse_properties
        from ..config_manager import file2string
        conf_keys = set(parse_properties(file2string(args.config) or "", args.config))
        if args.remoting is None and "namesrvAddr" in conf_keys:
            unknown.append("namesrvAddr")       # only the remoting front registers with name servers
        if unknown:
            log.warning("%s: keys not used by rmqcore: %s", args.config, ", ".join(sorted(unknown)))
    namesrvs = None
    if args.namesrv_addr is not None and args.remoting is None:
        raise ValueError("--namesrv-addr goes with --remoting (the address name servers give clients)")
    if args.remoting is not None and (args.namesrv_addr or bc.namesrv_addr):
        from ..remoting.broker_outer_api import parse_namesrv_addr
        namesrvs = parse_namesrv_addr(args.namesrv_addr or bc.namesrv_addr,
                                      "--namesrv-addr" if args.namesrv_addr else "namesrvAddr")
        if sc.is_slave and bc.broker_id <= 0:
            raise ValueError(f"brokerId: a SLAVE's brokerId must be > 0 (BrokerStartup), got {bc.broker_id}")
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
    remoting = None
    if args.remoting is not None:
        r_host, r_port = _host_port(args.remoting, "--remoting")
        ns = _host_port(args.namesrv, "--namesrv") if args.namesrv else None
        # Bound before the store opens: the advertised address (brokerIP1:listenPort of broker.conf, else this
        # socket's) is the store host every record carries, so offset msg ids decode to this broker.
        sock = socket.create_server((r_host, r_port), family=socket.AF_INET6 if ":" in r_host else socket.AF_INET)
        bound = sock.getsockname()[1]
        if "brokerIP1" in conf_keys or "listenPort" in conf_keys:
            address = sc.store_host
        else:
            adv = args.advertise or (r_host if r_host not in ("0.0.0.0", "::", "") else "127.0.0.1")
            address = f"{adv}:{bound}"
            sc = dataclasses.replace(sc, store_host=address)
        # the VIP port (listenPort - 2) is served for a port given, never beside port 0's (nobody's to take)
        remoting = (r_host, sock, address, ns, r_port != 0, namesrvs)
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
            from ..console import app  # noqa: F401  (its dependencies, before the store is opened)
        except ImportError as e:
            print(f"rmqcore serve: error: {missing_extra('--http (rmqcore.console)', 'console', e)}", file=sys.stderr)
            return EXIT_ERROR
    from ..admin import NewStoreDir
    with NewStoreDir(args.store) as made:
        try:
            ha = _ha_settings(args, sc, host or (remoting[0] if remoting is not None else "127.0.0.1"))
            broker = Broker.open(args.store, bc, store_config=sc)
        except BaseException:
            if remoting is not None:
                remoting[1].close()
            raise
        try:
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                return runner.run(_serve(broker, host, port, srv, acl, tls_cert, tls_key, args.advertise, http,
                                         console, remoting, ha, made))
        finally:
            broker.close()


def _ha_settings(args, sc, host: str):
    """What replication to start: ("slave", master address or None), ("master", (host, port)), or None."""
    if sc.is_slave:
        if args.ha_listen:
            raise ValueError("--ha-listen is for a master; this broker's brokerRole is SLAVE")
        return ("slave", args.ha_master or sc.ha_master_address or None)
    if args.ha_master:
        raise ValueError(f"--ha-master is for a slave; this broker's brokerRole is {sc.broker_role}")
    if args.ha_listen:
        return ("master", _host_port(args.ha_listen, "--ha-listen"))
    if args.config:
        from ..broker.broker_conf import parse_properties
        from ..config_manager import file2string
        keys = parse_properties(file2string(args.config) or "", args.config)
        # A broker.conf that speaks of replication gets RocketMQ's HA listener (listenPort + 1); others bind
        # nothing more than before.
        if {"brokerRole", "haListenPort", "listenPort"} & keys.keys():
            return ("master", (host, sc.ha_listen_port))
    return None


def _ha_server_addr(broker, address: str, ha_port: int) -> str:
    """BrokerController.getHAServerAddr: brokerIP2:haListenPort (brokerIP2 unset: brokerIP1's host, the
    advertised remoting address's)."""
    return f"{broker.config.broker_ip2 or address.rsplit(':', 1)[0]}:{ha_port}"


async def _register(broker, address: str, namesrvs: list[str], ha, slave_sync=None):
    """Start registering with the cluster's name servers (BrokerOuterAPI), as BrokerController.start does once
    the store, the remoting port and replication are up. brokerAddr is brokerIP1:listenPort (the advertised
    remoting address), haServerAddr brokerIP2:haListenPort (brokerIP2 unset: brokerIP1's host)."""
    from ..remoting.broker_outer_api import BrokerOuterAPI
    svc = broker.store.ha_service
    ha_port = svc.port if ha is not None and ha[0] == "master" else broker.store_config.ha_listen_port
    follow = ha is not None and ha[0] == "slave" and ha[1] is None

    def on_master(master_addr, ha_addr):
        # no haMasterAddress: a slave replicates from the master the name server names (BrokerController's
        # updateMasterHAServerAddrPeriodically)
        if follow and ha_addr:
            svc.update_master_address(ha_addr)
        # and pulls the master's metadata from the address the name server names (registerBrokerAll's
        # slaveSynchronize.setMasterAddr)
        if slave_sync is not None and master_addr:
            slave_sync.set_master_addr(master_addr)
    outer = BrokerOuterAPI(broker, namesrvs, address, _ha_server_addr(broker, address, ha_port), on_master=on_master)
    await outer.start()
    log.info("registering %s (%s/%s) with name servers %s", address, broker.config.broker_cluster_name,
             broker.config.broker_name, ";".join(namesrvs))
    return outer


def _shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _serve(broker, host, port, config, acl, tls_cert, tls_key, advertise, http, console,
                 remoting=None, ha=None, made=None) -> int:
    server = rserver = None
    events = None
    if host is not None:
        from ..server.server import MessagingServer
        server = MessagingServer(broker, host=host, port=port, config=config, acl=acl, tls_cert=tls_cert,
                                 tls_key=tls_key, advertised_host=advertise)
        events = server.events
        try:
            await server.start()
        except OSError as e:
            # one line naming the option (cli.main prints it, exit 2), as a taken --http port does
            raise OSError(f"--listen: {e}") from None
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = slave_sync = outer = None
    namesrvs = None
    try:
        if remoting is not None:
            from ..remoting.server import RemotingServer
            r_host, sock, address, ns, vip_ok, namesrvs = remoting
            # one set of counters for both fronts: the console and /metrics count remoting traffic too
            # a master of slaves also answers on the VIP port (listenPort - 2), where a Java slave asks for the
            # topic table (BrokerOuterAPI.getAllTopicConfig over MixAll.brokerVIPChannel); the connection limits
            # of --max-connections, --max-connections-per-peer and --idle-timeout hold here as for gRPC
            rserver = RemotingServer(broker, host=r_host, sock=sock, address=address, namesrv=ns, events=events,
                                     acl=acl, vip=vip_ok and ha is not None and ha[0] == "master",
                                     max_connections=config.max_connections,
                                     max_connections_per_peer=config.max_connections_per_peer,
                                     idle_timeout=config.connection_idle_s)
            await rserver.start()
        if http is not None:
            from ..console import serve_console
            try:
                runner = await serve_console(server or rserver, http[0], http[1], **console)
            except OSError as e:
                raise OSError(f"--http: cannot listen on {http[0]}:{http[1]}: "
                              f"{os.strerror(e.errno) if e.errno else e}") from None
            print(f"console on {runner.url}", flush=True)
        if server is not None:
            print(f"listening on {_shown(host, server.port)}", flush=True)
        if rserver is not None:
            print(f"remoting on {_shown(rserver.host, rserver.port)}", flush=True)
            if rserver.namesrv_port is not None:
                print(f"namesrv on {_shown(rserver.namesrv_addr[0], rserver.namesrv_port)}", flush=True)
        if ha is not None and ha[0] == "master":
            svc = broker.store.start_ha(ha[1][0], ha[1][1])
            print(f"ha on {_shown(svc.host, svc.port)}", flush=True)
            if rserver is not None:       # slaves registering with the embedded name server are told it
                rserver.names.set_ha_server_addr(_ha_server_addr(broker, rserver.address, svc.port))
        elif ha is not None:
            broker.store.start_ha(master_address=ha[1])
            if ha[1] is None and not namesrvs:      # with name servers: the master their answer names
                log.warning("brokerRole SLAVE without haMasterAddress (--ha-master): not replicating until one is "
                            "set")
            print(f"ha slave of {ha[1] or '(no master address)'}", flush=True)
            # the master's topics, groups and offsets, over remoting, every 10 s (SlaveSynchronize)
            from ..remoting.slave_synchronize import SlaveSynchronize
            slave_sync = SlaveSynchronize(broker, own_addr=rserver.address if rserver is not None else None)
            slave_sync.start()
        if rserver is not None and namesrvs:
            outer = await _register(broker, rserver.address, namesrvs, ha, slave_sync)
        if made is not None:
            made.served = True     # it listened: its store stays whatever ends it
        await stop.wait()
    finally:
        if outer is not None:
            await outer.stop()          # UNREGISTER_BROKER first, while the fronts still answer
        if slave_sync is not None:
            await loop.run_in_executor(None, slave_sync.shutdown)
        if runner is not None:
            await runner.close()
        if rserver is not None:
            await rserver.stop()
        if server is not None:
            await server.stop()
    return 0
