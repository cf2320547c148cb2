"""ServerEvents: what a running server tells whoever watches it (metrics, the console).

The gRPC server calls the ``on_*`` methods as RPCs end and messages go in and out; readers take ``snapshot()``
(cheap: a copy of the counters under one lock) and ``clients()``. The counters are totals since the server
started, keyed as RocketMQ 5's metrics label them (topic, consumer group, RPC method and status), so a Prometheus
exporter turns each into one labelled series without keeping state of its own.
"""
from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field

# RPC latency buckets, in seconds (RocketMQ's proxy: rocketmq_rpc_latency, 1 ms .. 3 s).
RPC_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 3.0)
# Message size buckets, in bytes (RocketMQ 5: rocketmq_message_size, 1 KiB .. 4 MiB).
MESSAGE_SIZE_BUCKETS = (1024, 4096, 16384, 65536, 262144, 1048576, 4194304)


@dataclass
class ClientInfo:
    """One client the server has heard from (a Heartbeat, a Telemetry stream or any RPC with x-mq-client-id)."""
    client_id: str
    kind: str = "UNKNOWN"          # PRODUCER, PUSH_CONSUMER, SIMPLE_CONSUMER (the protocol's ClientType)
    group: str = ""                # consumer group, or "" for a producer
    address: str = ""              # peer address as gRPC gives it
    version: str = ""              # x-mq-client-version
    language: str = ""
    first_seen: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.time)
    telemetry: bool = False        # a Telemetry stream is open
    topics: tuple = ()             # a producer's declared topics, a consumer's subscribed ones (its settings)


class ServerEvents:
    """Totals since start, updated by the server, read by exporters. All methods are thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = time.time()
        self.rpc_count: dict[tuple[str, str], int] = defaultdict(int)            # (method, status) -> calls
        self.rpc_latency: dict[tuple[str, str], list[int]] = {}                  # (method, status) -> bucket counts
        self.rpc_latency_sum: dict[tuple[str, str], float] = defaultdict(float)
        self.messages_in: dict[tuple[str, str], int] = defaultdict(int)          # (topic, message_type) -> messages
        self.bytes_in: dict[str, int] = defaultdict(int)                         # topic -> body bytes
        self.message_size: list[int] = [0] * (len(MESSAGE_SIZE_BUCKETS) + 1)    # histogram of body sizes
        self.message_size_sum = 0
        self.messages_out: dict[tuple[str, str], int] = defaultdict(int)         # (topic, group) -> messages
        self.bytes_out: dict[tuple[str, str], int] = defaultdict(int)
        self.dlq: dict[tuple[str, str], int] = defaultdict(int)                  # (group, topic) -> messages
        self.commits: dict[str, int] = defaultdict(int)                          # topic -> transactions committed
        self.rollbacks: dict[str, int] = defaultdict(int)
        self._clients: dict[str, ClientInfo] = {}

    # ------------------------------------------------------------------ written by the server
    def on_rpc(self, method: str, status: str, seconds: float) -> None:
        """An RPC ended: ``method`` as the protocol names it (``SendMessage``), ``status`` a Code name (``OK``)."""
        with self._lock:
            self._rpc(method, status, seconds)

    def on_messages_in(self, topic: str, sizes: list[int], message_type: str = "NORMAL") -> None:
        """Messages stored for ``topic`` (one entry per message: its body size); type NORMAL/FIFO/DELAY/TRANSACTION."""
        with self._lock:
            self._messages_in(topic, sizes, message_type)

    def on_sent(self, topic: str, sizes: list[int], message_type: str, status: str, seconds: float) -> None:
        """A SendMessage ended having stored ``sizes``: on_messages_in and on_rpc under one lock (the common send
        makes thousands a second)."""
        with self._lock:
            self._messages_in(topic, sizes, message_type)
            self._rpc("SendMessage", status, seconds)

    def _rpc(self, method: str, status: str, seconds: float) -> None:
        key = (method, status)
        self.rpc_count[key] += 1
        buckets = self.rpc_latency.get(key)
        if buckets is None:
            buckets = self.rpc_latency[key] = [0] * (len(RPC_LATENCY_BUCKETS) + 1)
        buckets[bisect_left(RPC_LATENCY_BUCKETS, seconds)] += 1     # the first bucket whose bound is >= seconds
        self.rpc_latency_sum[key] += seconds

    def _messages_in(self, topic: str, sizes: list[int], message_type: str) -> None:
        self.messages_in[(topic, message_type)] += len(sizes)
        total = sum(sizes)
        self.bytes_in[topic] += total
        self.message_size_sum += total
        hist = self.message_size
        for n in sizes:
            hist[bisect_left(MESSAGE_SIZE_BUCKETS, n)] += 1

    def on_messages_out(self, topic: str, group: str, count: int, nbytes: int) -> None:
        """Messages handed to a consumer of ``group`` (each delivery counts, redeliveries included)."""
        with self._lock:
            self.messages_out[(topic, group)] += count
            self.bytes_out[(topic, group)] += nbytes

    def on_dlq(self, group: str, topic: str, count: int = 1) -> None:
        """Messages of ``topic`` moved to ``%DLQ%group`` (max delivery attempts reached, or forwarded by a client)."""
        with self._lock:
            self.dlq[(group, topic)] += count

    def on_transaction_end(self, topic: str, commit: bool) -> None:
        with self._lock:
            (self.commits if commit else self.rollbacks)[topic] += 1

    def on_client(self, client_id: str, **info) -> None:
        """A client was heard from; ``info`` updates ClientInfo's fields (kind, group, address, version, ...)."""
        now = time.time()
        with self._lock:
            c = self._clients.get(client_id)
            if c is None:
                c = self._clients[client_id] = ClientInfo(client_id)
            for k, v in info.items():
                if v is not None:
                    setattr(c, k, v)
            c.last_seen = now

    def on_client_gone(self, client_id: str) -> None:
        """NotifyClientTermination, or a client not heard from within the server's heartbeat expiry."""
        with self._lock:
            self._clients.pop(client_id, None)

    # ------------------------------------------------------------------ read by exporters
    def clients(self) -> list[ClientInfo]:
        """The connected clients: the one definition the console's overview, its group pages, the JSON API and
        /metrics count from. A client is connected from its first RPC until NotifyClientTermination, the end of
        its Telemetry stream (a closed channel ends it) or, for a client without one, the heartbeat expiry."""
        with self._lock:
            return [ClientInfo(**vars(c)) for c in self._clients.values()]

    def snapshot(self) -> dict:
        """A consistent copy of every counter (plain dicts and lists, safe to read without the lock)."""
        with self._lock:
            return {
                "started": self.started,
                "rpc_count": dict(self.rpc_count),
                "rpc_latency": {k: list(v) for k, v in self.rpc_latency.items()},
                "rpc_latency_sum": dict(self.rpc_latency_sum),
                "messages_in": dict(self.messages_in),
                "bytes_in": dict(self.bytes_in),
                "message_size": list(self.message_size),
                "message_size_sum": self.message_size_sum,
                "messages_out": dict(self.messages_out),
                "bytes_out": dict(self.bytes_out),
                "dlq": dict(self.dlq),
                "commits": dict(self.commits),
                "rollbacks": dict(self.rollbacks),
            }
