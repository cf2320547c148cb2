"""MessagingServer: RocketMQ 5's gRPC endpoint around one Broker, asyncio-native.

    async with MessagingServer(broker, host="127.0.0.1", port=0) as server:
        print(server.port)                    # the port it listens on
        await server.wait_closed()            # until server.stop() (or leave the block to stop)

The server owns its pop state (config/popJournal.log, see pop.py) and the broker's transaction check (the
orphan check goes to producers over their Telemetry streams). ``stop()`` stops accepting, lets in-flight RPCs
finish (``grace`` s), writes the pop state and returns; closing the Broker is its owner's (the ``rmqcore serve``
command closes it after).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc

from ..serve.events import ServerEvents
from .pop import PopService

log = logging.getLogger(__name__)

DEFAULT_PORT = 8081          # the proxy's gRPC port


@dataclass
class ServerConfig:
    """The proxy's settings the server acts on (ProxyConfig names in snake_case, its defaults)."""
    # Receive: invisible time of a popped message (minInvisibleTimeMillsForRecv .. maxInvisibleTimeMills)
    min_invisible_ms: int = 10_000
    max_invisible_ms: int = 12 * 3600 * 1000
    default_invisible_ms: int = 30_000
    # Long polling (grpcClientConsumerMinLongPollingTimeoutMillis .. Max...)
    min_long_polling_ms: int = 5_000
    max_long_polling_ms: int = 20_000
    # rmqcore: a waiting receive looks again this often for deliveries no send wakes (timer, delay, expiry) ...
    poll_interval_ms: int = 100
    # ... and answers this long before the client's deadline
    poll_margin_ms: int = 500
    # a push consumer's backoff between attempts is capped here (s)
    max_backoff_s: int = 7200
    # enableTopicMessageTypeCheck: refuse a message whose type is not its topic's
    enable_topic_message_type_check: bool = True
    # largest request the transport accepts (bytes); bigger ones are refused before they are read whole
    max_request_bytes: int = 130 * 1024 * 1024
    # threads for store calls that wait for a SYNC_FLUSH flush in the caller (ending a transaction)
    send_threads: int = 8
    grace_s: float = 5.0
    # a client not heard from for this long is gone (the proxy's channel expiry), unless its Telemetry is open
    client_expiry_s: float = 120.0
    # with accounts: a signature's x-mq-date-time must be this near the server's clock (s), else UNAUTHORIZED
    # (rmqcore: the proxy takes any date, so a captured signature replays forever; see serve/auth.py)
    auth_clock_skew_s: int = 300
    # topics one client host may auto-create (QueryRoute, SendMessage): this many at once, then this many a second
    # (0 a second: no limit); past it TOO_MANY_REQUESTS (serve/flow_control.TopicCreationLimiter)
    topic_create_burst: int = 100
    topic_create_per_second: float = 10.0
    # refused requests of one client host: this many at once, then this many a second are answered at once; past
    # that each refusal's answer waits refusal_delay_ms, doubled while the host keeps asking up to
    # refusal_max_delay_ms (0 a second or 0 ms: never), so a client that asks again as soon as it is refused
    # cannot keep the loop busy (serve/flow_control.RefusalThrottle)
    refusal_burst: int = 100
    refusal_per_second: float = 10.0
    refusal_delay_ms: int = 200
    refusal_max_delay_ms: int = 1600
    # connections (connections.py): in all (0: the open-file limit less connections.DESCRIPTOR_RESERVE), per peer
    # host (0: no cap), and the time a connection without an RPC is kept (s; a client's Telemetry stream is an RPC)
    max_connections: int = 0
    max_connections_per_peer: int = 256
    connection_idle_s: float = 120.0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type in ("int", "float") and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
                raise ValueError(f"{f.name} must be a number >= 0, got {v!r}")
        if self.min_invisible_ms > self.max_invisible_ms:
            raise ValueError(f"min_invisible_ms {self.min_invisible_ms} > max_invisible_ms {self.max_invisible_ms}")
        if self.min_long_polling_ms > self.max_long_polling_ms:
            raise ValueError(f"min_long_polling_ms {self.min_long_polling_ms} > max_long_polling_ms "
                             f"{self.max_long_polling_ms}")
        if self.poll_interval_ms <= 0 or self.send_threads <= 0:
            raise ValueError("poll_interval_ms and send_threads must be > 0")


def check_listen(host: str, port: int) -> None:
    """OSError naming the address and why, when ``host:port`` cannot be listened on (a name that does not resolve, a
    port taken, an address not this machine's). gRPC's core only logs its reason and raises a bare RuntimeError
    ("Failed to bind"): asked first, the socket layer's own answer makes the one line the command prints. Like
    gRPC, any one of the addresses the host resolves to is enough."""
    if port == 0:
        return              # the system picks a free port
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise OSError(f"cannot listen on {shown}: {host!r} is not an address of this machine ({e.strerror})") from None
    reason = None
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as s:
                # as gRPC's listener sets it: a port in TIME_WAIT is free, one another socket listens on is not
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(sockaddr)
            return
        except OSError as e:
            reason = reason or e.strerror
    raise OSError(f"cannot listen on {shown}: {reason}")


class MessagingServer:
    def __init__(self, broker, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 config: ServerConfig | None = None, acl=None, tls_cert: bytes | None = None,
                 tls_key: bytes | None = None, advertised_host: str | None = None):
        self.broker = broker
        self.host = host
        self.port = port
        self.config = config or ServerConfig()
        self.acl = acl
        self.events = ServerEvents()
        self.pop = PopService(broker)
        self.pop.dlq_listener = self.events.on_dlq
        self._tls = (tls_key, tls_cert) if tls_cert is not None else None
        self.advertised_host = advertised_host or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        self.executor = ThreadPoolExecutor(self.config.send_threads, thread_name_prefix="rmqcore-send")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping = False
        self._grpc = None
        self._service = None
        self._closed = asyncio.Event()
        self._started_check = False
        self._expiry_task = None
        self._guard = None
        self.max_connections = 0

    # -- the console's accessors ------------------------------------------------------------------------------

    def inflight(self, group: str) -> dict[tuple[str, int], int]:
        """Unacked popped messages of ``group`` per (topic, queue id)."""
        return self.pop.inflight(group)

    # -- lifecycle --------------------------------------------------------------------------------------------

    async def start(self) -> "MessagingServer":
        from .service import MessagingService
        self.loop = asyncio.get_running_loop()
        self.pop.load()
        self._service = MessagingService(self)
        # an auto-created topic is awaited in the loop (MessagingService._topic_config_or_create), never written
        # nor waited for by a handler's thread
        self.broker.topic_config_manager.wait_created = False
        limit = self.config.max_request_bytes
        from ..serve.connections import HANDSHAKE_TIMEOUT_MS, default_max_connections
        cfg = self.config
        self.max_connections = cfg.max_connections or default_max_connections()
        idle_ms = max(1, int(cfg.connection_idle_s * 1000))
        self._grpc = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 0),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 5000),
            # connections.py: past the total a connection is closed as it is accepted (its descriptor back at
            # once); idle ones and ones that never finish the handshake are closed
            ("grpc.max_allowed_incoming_connections", self.max_connections),
            ("grpc.max_connection_idle_ms", idle_ms),
            ("grpc.server_handshake_timeout_ms", min(HANDSHAKE_TIMEOUT_MS, idle_ms)),
        ])
        self._grpc.add_generic_rpc_handlers((self._service.handler(),))
        address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        check_listen(self.host, self.port)
        try:
            if self._tls is not None:
                creds = grpc.ssl_server_credentials([self._tls])
                bound = self._grpc.add_secure_port(address, creds)
            else:
                bound = self._grpc.add_insecure_port(address)
        except RuntimeError:
            # grpcio raises RuntimeError("Failed to bind ...") where older versions returned 0 (taken since the check)
            bound = 0
        if not bound:
            raise OSError(f"cannot listen on {address}")
        self.port = bound
        await self._grpc.start()
        from ..serve.connections import ConnectionGuard
        self._guard = ConnectionGuard(bound, cfg.max_connections_per_peer).start()
        log.info("connections: at most %d in all and %s per peer host, closed after %g s without an RPC",
                 self.max_connections, cfg.max_connections_per_peer or "no cap", cfg.connection_idle_s)
        if self.broker.store.reput is not None:
            # the loop runs the dispatch passes after its sends (MessagingService._wake)
            self.broker.store.reput.drive_externally(True)
        self._expiry_task = asyncio.ensure_future(self._expire_clients())
        tx = self.broker.transactions
        if tx is not None:
            # The orphan check asks producers over Telemetry (the broker's check thread calls this).
            tx.checker = self._service.transaction_check
            if tx._thread is None:
                tx.start()
                self._started_check = True
        return self

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting RPCs, let running ones finish (long polls answer at once), persist the pop state."""
        if self._grpc is None or self.stopping:
            await self._closed.wait()
            return
        self.stopping = True
        try:
            if self._expiry_task is not None:
                self._expiry_task.cancel()
            # Telemetry streams live as long as their clients: end them now, so the grace period is spent only
            # on RPCs that finish (long polls answer at their next look, stopping being set).
            for tel in list(self._service.telemetry.values()):
                tel.outbox.put_nowait(None)
            await self._grpc.stop(self.config.grace_s if grace is None else grace)
            if self._guard is not None:
                self._guard.stop()
            if self.broker.store.reput is not None:
                self.broker.store.reput.drive_externally(False)
            if self._started_check:
                self.broker.transactions.shutdown()
            if self.broker.transactions is not None:
                self.broker.transactions.checker = None
            self.executor.shutdown(wait=True)
            self.broker.topic_config_manager.wait_created = True
            self.pop.close()
        finally:
            self._closed.set()

    async def _expire_clients(self) -> None:
        import time
        period = max(1.0, min(10.0, self.config.client_expiry_s / 4))
        while True:
            await asyncio.sleep(period)
            now = time.time()
            for c in self.events.clients():
                if not c.telemetry and now - c.last_seen > self.config.client_expiry_s:
                    self._service.forget_client(c.client_id)

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def __aenter__(self) -> "MessagingServer":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()
