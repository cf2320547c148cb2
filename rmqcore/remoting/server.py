"""RemotingServer: RocketMQ's classic TCP protocol (the 4.x clients) over one Broker, on an asyncio loop.

    server = RemotingServer(broker, host="127.0.0.1", port=0, address="127.0.0.1:10911")
    await server.start()          # server.port: where it listens; server.namesrv_port with namesrv=(host, port)
    ...
    await server.stop()           # long polls answered, connections closed; closing the Broker is the owner's

What each request code does follows the 4.9.7 broker's processors (``broker/.../processor/``: SendMessageProcessor,
PullMessageProcessor, ClientManageProcessor, ConsumerManageProcessor, AdminBrokerProcessor,
EndTransactionProcessor, QueryMessageProcessor) and the name server's DefaultRequestProcessor (namesrv.py), which
this port also answers, so one address serves as both ``namesrvAddr`` and broker. Frames are read and answers'
headers written by the compiled codec (_remoting_codec.pyx); a pull's body is the store's records as they are on
disk, handed to the transport as views of the mapped files.

The loop runs everything: sends and offset commits are quick store calls made inline (under SYNC_FLUSH a send
waits for its flush in a small thread pool, so the loop never blocks on a disk flush); a pull that finds nothing is
parked until a dispatch pass the loop runs after a send wakes its topic, or its suspend time ends (looked at again
every 100 ms for deliveries no send here wakes: delay levels, the gRPC front's sends).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor

from ..broker.errors import (IllegalNameError, MessageNotFoundError, NoPermissionError, OffsetIllegalError,
                             PutFailedError, QueueIdIllegalError, SubscriptionGroupNotExistError,
                             TopicNotExistError)
from ..broker.mix_all import PROPERTY_TRANSACTION_PREPARED, PROPERTY_WAIT_STORE_MSG_OK, RETRY_GROUP_TOPIC_PREFIX
from ..broker.topic_config import TopicConfig
from ..broker.topic_validator import PERM_READ, PERM_WRITE, validate_group
from .._message import Message, record_views
from ..errors import BrokerRoleError, MessageIllegalError, RmqStoreError
from ..serve.events import ServerEvents
from ..serve.filter import FilterError, compile_filter
from ..status import GetStatus, PutStatus
from . import admin, namesrv as _ns
from . import transaction as _tx
from .acl import RemotingAclValidator
from .pending_sends import PendingSends
from .client_housekeeping import ClientHousekeepingService
from . import slave_synchronize as _slave_sync
from ._remoting_codec import FrameDecoder, encode_header
from ._pull_message import PullMessage
from ._send_message import SendMessage
from .codes import (SEND_MESSAGE, PULL_MESSAGE, QUERY_MESSAGE, QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET,
                    UPDATE_AND_CREATE_TOPIC, GET_BROKER_RUNTIME_INFO, GET_TOPIC_STATS_INFO,
                    GET_CONSUME_STATS, SEARCH_OFFSET_BY_TIMESTAMP, GET_MAX_OFFSET, GET_MIN_OFFSET,
                    GET_EARLIEST_MSG_STORETIME, VIEW_MESSAGE_BY_ID, HEART_BEAT, UNREGISTER_CLIENT,
                    CONSUMER_SEND_MSG_BACK, END_TRANSACTION, GET_CONSUMER_LIST_BY_GROUP, NOTIFY_CONSUMER_IDS_CHANGED,
                    LOCK_BATCH_MQ, UNLOCK_BATCH_MQ, CHECK_CLIENT_CONFIG, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE,
                    LITE_PULL_MESSAGE, GET_BROKER_CONFIG, GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST,
                    QUERY_TOPIC_CONSUME_BY_WHO, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP,
                    SUCCESS, SYSTEM_ERROR, REQUEST_CODE_NOT_SUPPORTED,
                    FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT, MESSAGE_ILLEGAL,
                    SERVICE_NOT_AVAILABLE, NO_PERMISSION, TOPIC_NOT_EXIST, PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY,
                    PULL_OFFSET_MOVED, QUERY_NOT_FOUND, SUBSCRIPTION_PARSE_FAILED, SUBSCRIPTION_GROUP_NOT_EXIST)
from .remoting_command import MAX_FRAME, ONEWAY_FLAG, RESPONSE_FLAG, FrameError, Refusal
from .remoting_command import header_int as _int, need as _need

log = logging.getLogger(__name__)

# SendMessageRequestHeaderV2's one-letter names → SendMessageRequestHeader's (SendMessageRequestHeaderV2.
# createSendMessageRequestHeaderV1)
V2_NAMES = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
            "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
            "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch"}
PUT_CODES = {PutStatus.FLUSH_DISK_TIMEOUT: FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT: FLUSH_SLAVE_TIMEOUT,
             PutStatus.SLAVE_NOT_AVAILABLE: SLAVE_NOT_AVAILABLE,
             PutStatus.SERVICE_NOT_AVAILABLE: SERVICE_NOT_AVAILABLE, PutStatus.MESSAGE_ILLEGAL: MESSAGE_ILLEGAL,
             PutStatus.PROPERTIES_SIZE_EXCEEDED: MESSAGE_ILLEGAL}
# PullSysFlag
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
# MessageDecoder's property separators
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
# RebalanceLockManager.REBALANCE_LOCK_MAX_LIVE_TIME (-Drocketmq.broker.rebalance.lockMaxLiveTime)
LOCK_MAX_LIVE_S = 60.0
# A parked pull looks again this often for deliveries no send here wakes (delay levels, the other front's sends)
POLL_INTERVAL_S = 0.1
# the longest suspend a pull may ask (the clients' own timeouts are 30 s)
MAX_SUSPEND_MS = 30_000
PEER_WRITE_HIGH = 4 * 1024 * 1024        # a reader this far behind stops this connection's reads (flow control)
DISPATCH_PACE = 0.001                   # ReputMessageService's sleep between passes
BATCH_BYTES = 256 * 1024                # answers gathered past this are written before the next request
# what a put raises for a message it refuses before writing anything, and the answer's code (_put; the first
# class that matches: RmqStoreError last, it is the others' base). BrokerRoleError (a SLAVE's store) is answered
# SERVICE_NOT_AVAILABLE with SendMessageProcessor.handlePutMessageResult's remark.
SEND_REFUSAL_CODES = ((TopicNotExistError, TOPIC_NOT_EXIST), (NoPermissionError, NO_PERMISSION),
                      (SubscriptionGroupNotExistError, SUBSCRIPTION_GROUP_NOT_EXIST),
                      (MessageIllegalError, MESSAGE_ILLEGAL), (IllegalNameError, MESSAGE_ILLEGAL),
                      (BrokerRoleError, SERVICE_NOT_AVAILABLE), (QueueIdIllegalError, SYSTEM_ERROR),
                      (RmqStoreError, SYSTEM_ERROR))
SEND_REFUSALS = tuple(cls for cls, _code in SEND_REFUSAL_CODES)
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024    # buffers one writev takes


def _disk_used_ratio(path: str) -> float:
    """UtilAll.getDiskPartitionSpaceUsedPercent: the used fraction (0..1) of the partition holding ``path``, -1 when
    it does not exist."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    return (total - st.f_bfree * st.f_frsize) / total if total > 0 else -1.0


def service_not_available_remark(store_path: str) -> str:
    """SendMessageProcessor's remark for a put the store refused with SERVICE_NOT_AVAILABLE (a slave's, a closed
    store's), with its diskUtil() figures."""
    disk = (f"CL: {_disk_used_ratio(os.path.join(store_path, 'commitlog')):5.2f} "
            f"CQ: {_disk_used_ratio(os.path.join(store_path, 'consumequeue')):5.2f} "
            f"INDEX: {_disk_used_ratio(os.path.join(store_path, 'index')):5.2f}")
    return ("service not available now. It may be caused by one of the following reasons: the broker's disk is "
            f"full [{disk}], messages are put to the slave, message store has been shut down, etc.")


def string_to_properties(text: str | None) -> dict[str, str]:
    """MessageDecoder.string2messageProperties: ``name\\x01value\\x02...``."""
    out: dict[str, str] = {}
    if text:
        for item in text.split(PROPERTY_SEPARATOR):
            name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
            if sep:
                out[name] = value
    return out


def _no_property_filter(expression_type: str) -> str:
    """The remark of 4.9.7's ClientManageProcessor.checkClientConfig and PullMessageProcessor for a filter type
    this broker does not filter by (enablePropertyFilter off, or a type other than TAG and SQL92)."""
    return f"The broker does not support consumer to filter message by {expression_type}"


def decode_batch(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """MessageDecoder.decodeMessages of a batch body: (flag, body, properties) per message."""
    out = []
    pos, n = 0, len(body)
    while pos < n:
        if pos + 20 > n:
            raise Refusal(MESSAGE_ILLEGAL, f"batch body: a message header at {pos} is cut short")
        total, _magic, _crc, flag, body_len = struct.unpack_from(">iiiii", body, pos)
        if total < 22 or pos + total > n or 20 + body_len + 2 > total:
            raise Refusal(MESSAGE_ILLEGAL, f"batch body: message at {pos} has total size {total}, body length "
                                           f"{body_len}, past the {n} bytes sent")
        b = body[pos + 20:pos + 20 + body_len]
        (plen,) = struct.unpack_from(">h", body, pos + 20 + body_len)
        pstart = pos + 22 + body_len
        if plen < 0 or pstart + plen > pos + total:
            raise Refusal(MESSAGE_ILLEGAL, f"batch body: message at {pos} has properties past its size")
        props = string_to_properties(body[pstart:pstart + plen].decode("utf-8", "replace"))
        out.append((flag, b, props))
        pos += total
    return out


class _Client:
    """One client connection's registrations (ClientChannelInfo + its groups)."""
    __slots__ = ("client_id", "language", "version", "producer_groups", "consumer_groups", "conn", "last_seen",
                 "consumer_data")

    def __init__(self, conn):
        self.conn = conn
        self.client_id = ""
        self.language = ""
        self.version = 0
        self.producer_groups: set[str] = set()
        self.consumer_groups: set[str] = set()
        self.last_seen = time.time()
        # group -> the heartbeat's ConsumerData as sent (consumeType, messageModel, consumeFromWhere,
        # subscriptionDataSet): what the admin answers (consumer connections) report
        self.consumer_data: dict[str, dict] = {}


class RemotingServer:
    def __init__(self, broker, *, host: str = "127.0.0.1", port: int = 10911, address: str | None = None,
                 namesrv: tuple[str, int] | None = None, sock: socket.socket | None = None,
                 events: ServerEvents | None = None, max_frame: int = MAX_FRAME, acl=None, vip: bool = False,
                 max_connections: int = 0, max_connections_per_peer: int = 0, idle_timeout: float = 0.0):
        """``max_connections`` (0: the open-file limit less serve.connections.DESCRIPTOR_RESERVE),
        ``max_connections_per_peer`` (0: no cap) and ``idle_timeout`` (s without a byte read, 0: never) are
        `rmqcore serve`'s --max-connections, --max-connections-per-peer and --idle-timeout: a connection past a
        cap is closed as it is accepted, an idle one closed (NettyServerConfig's serverChannelMaxIdleTimeSeconds,
        120 s, closes a channel idle that long)."""
        self.broker = broker
        from ..serve.connections import default_max_connections
        self.max_connections = max_connections or default_max_connections()
        self.max_connections_per_peer = max_connections_per_peer
        self.idle_timeout = idle_timeout
        self._per_host: dict[str, int] = {}
        self._refused_said = 0.0
        self._idle_task: asyncio.Task | None = None
        self.host = host
        self.port = port
        self.sock = sock
        self.address = address or f"{host}:{port}"
        self.namesrv_addr = namesrv
        self.namesrv_port: int | None = None
        self.vip = vip                  # also serve on port - 2 (the broker's VIP channel), when it is free
        self.vip_port: int | None = None
        self.events = events or ServerEvents()
        self.max_frame = max_frame
        self.names = _ns.NameServer(broker, self.address)
        # the accounts (serve --acl; the console reads them too) and RocketMQ 4.x's request check (remoting/acl.py)
        self.acl = acl
        self.validator = None if acl is None else RemotingAclValidator(acl)
        self.stopping = False
        self._servers: list = []
        self._conns: set[RemotingConnection] = set()
        # consumer group -> {connection: subscriptions {topic: (expression type, expression, sub version)}}
        self.consumers: dict[str, dict[RemotingConnection, dict[str, tuple[str, str, int]]]] = {}
        self.producers: dict[str, set[RemotingConnection]] = {}
        # (group, topic, broker name, queue id) -> (client id, expiry on the loop's clock)
        self.locks: dict[tuple[str, str, str, int], tuple[str, float]] = {}
        self._arrivals: dict[str, asyncio.Event] = {}
        self._woken: set[str] = set()
        self._dispatch_pending = False
        self._last_dispatch = 0.0
        self._dispatch_handle: asyncio.Handle | None = None
        # SYNC_FLUSH / SYNC_MASTER: a send is answered when its put_async completes (pending_sends.py); a batch or a
        # transaction half message (whose puts wait) runs in the send executor, not the loop
        self._sync = (broker.store_config.flush_disk_type == "SYNC_FLUSH"
                      or broker.store_config.broker_role == "SYNC_MASTER")
        # the common send in one compiled call (_send_message.pyx); None: every send takes _send's Python
        self.send_message = None if self._sync else SendMessage(
            broker.send_entries, broker.send, SEND_REFUSALS, self, self.events.on_messages_in,
            RemotingConnection._answer_send)
        self.is_slave = broker.store_config.is_slave
        self.slave_read_enable = broker.config.slave_read_enable
        self.offset_check_in_slave = broker.store_config.offset_check_in_slave
        # the common pull in one compiled call (_pull_message.pyx); None: every pull takes _pull's Python (a slave
        # keeps no offset a pull carries and may move none; slaveReadEnable suggests a broker per pull)
        self.pull_message = None if self.is_slave or self.slave_read_enable else PullMessage(
            self, broker, validate_group, self.events.on_messages_out)
        self.executor: ThreadPoolExecutor | None = None
        self.pending_sends: PendingSends | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.transaction_check = _tx.TransactionCheck(self)
        self.housekeeping = ClientHousekeepingService(self, broker.config.channel_expired_timeout)
        self._closed = asyncio.Event()

    # -- lifecycle --------------------------------------------------------------------------------------------

    async def start(self) -> "RemotingServer":
        self.loop = loop = asyncio.get_running_loop()
        if self._sync:
            self.executor = ThreadPoolExecutor(8, thread_name_prefix="rmqcore-remoting-send")
            self.pending_sends = PendingSends(loop)
        if self.sock is not None:
            srv = await loop.create_server(lambda: RemotingConnection(self), sock=self.sock)
        else:
            srv = await loop.create_server(lambda: RemotingConnection(self), self.host, self.port, reuse_address=True)
        self.port = srv.sockets[0].getsockname()[1]
        self._servers.append(srv)
        if self.vip and self.port > 2:
            # BrokerController's fastRemotingServer (listenPort - 2): the same processors. Bound only if free: a
            # master whose VIP port is taken still serves everything else (a Java slave's topic sync then fails,
            # and says so in its log).
            try:
                vip = await loop.create_server(lambda: RemotingConnection(self), self.host, self.port - 2,
                                               reuse_address=True)
            except OSError as e:
                log.warning("remoting: VIP port %d (listenPort - 2) not served: %s", self.port - 2, e)
            else:
                self.vip_port = self.port - 2
                self._servers.append(vip)
        if self.broker.store.reput is not None:
            # the loop runs the dispatch passes after its sends (wake)
            self.broker.store.reput.drive_externally(True)
        if self.idle_timeout > 0:
            self._idle_task = asyncio.ensure_future(self._close_idle())
        if self.namesrv_addr is not None:
            ns = await loop.create_server(lambda: RemotingConnection(self, namesrv_only=True), self.namesrv_addr[0],
                                          self.namesrv_addr[1], reuse_address=True)
            self.namesrv_port = ns.sockets[0].getsockname()[1]
            self._servers.append(ns)
        self.transaction_check.install()
        self.housekeeping.start()
        return self

    async def stop(self) -> None:
        """Stop accepting, answer parked pulls (PULL_NOT_FOUND), close every connection."""
        if self.stopping:
            await self._closed.wait()
            return
        self.stopping = True
        try:
            await self.transaction_check.uninstall()
            if self._idle_task is not None:
                self._idle_task.cancel()
            self.housekeeping.stop()
            for srv in self._servers:
                srv.close()
            for ev in self._arrivals.values():
                ev.set()
            await asyncio.sleep(0)
            for _ in range(50):                 # parked pulls answer at their next look
                if not any(c.pulls for c in self._conns):
                    break
                await asyncio.sleep(0.01)
            if self.pending_sends is not None:
                # sends whose flush or slave is awaited are answered before the connections close (and the store
                # after them): each completes by its sync_flush_timeout
                await self.pending_sends.drain(self.broker.store_config.sync_flush_timeout / 1000 + 1)
            for c in list(self._conns):
                c.transport.close()
            for srv in self._servers:
                await srv.wait_closed()
            if self.executor is not None:
                self.executor.shutdown(wait=True)
            if self.broker.store.reput is not None:
                self.broker.store.reput.drive_externally(False)
        finally:
            self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    # -- connection limits ------------------------------------------------------------------------------------

    def admit(self, conn: "RemotingConnection", host: str) -> bool:
        """Whether a new connection from ``host`` is within the caps (counted if so)."""
        n = self._per_host.get(host, 0)
        if len(self._conns) >= self.max_connections:
            why = f"{len(self._conns)} connections open, the cap is {self.max_connections} (--max-connections)"
        elif self.max_connections_per_peer and n >= self.max_connections_per_peer:
            why = f"{n} connections open from {host}, the cap is {self.max_connections_per_peer} " \
                  f"(--max-connections-per-peer)"
        else:
            self._per_host[host] = n + 1
            self._conns.add(conn)
            return True
        now = time.monotonic()
        if now - self._refused_said > 60:           # once a minute, not once per connection
            self._refused_said = now
            log.warning("remoting: closing new connections: %s", why)
        return False

    def release(self, host: str) -> None:
        n = self._per_host.get(host, 0) - 1
        if n > 0:
            self._per_host[host] = n
        else:
            self._per_host.pop(host, None)

    async def _close_idle(self) -> None:
        """Close connections that read nothing for idle_timeout s and have no parked pull."""
        every = min(max(self.idle_timeout / 4, 0.05), 10.0)
        while not self.stopping:
            await asyncio.sleep(every)
            limit = self.loop.time() - self.idle_timeout
            for c in list(self._conns):
                if c.last_read < limit and not c.pulls:
                    log.info("remoting: closing %s, idle for %g s (--idle-timeout)", c.peer, self.idle_timeout)
                    c.transport.close()

    # -- dispatch and long polling ----------------------------------------------------------------------------

    def wake(self, topic: str) -> None:
        """After a put to ``topic``: a dispatch pass in the loop, then the topic's parked pulls look again. The
        store's dispatcher thread only sweeps behind the loop (drive_externally: its wake-up per put and the GIL
        taken from the loop cost more than the pass). A pass runs at once after a quiet millisecond, else a
        millisecond after the last one (ReputMessageService's 1 ms pace): under load one pass takes the sends of a
        millisecond, as the gRPC front's MessagingService._wake does."""
        if topic in self._arrivals:
            self._woken.add(topic)
        if not self._dispatch_pending:
            self._dispatch_pending = True
            loop = self.loop
            wait = self._last_dispatch + DISPATCH_PACE - loop.time()
            if wait > 0:
                self._dispatch_handle = loop.call_later(wait, self._dispatch)
            else:
                self._dispatch_handle = loop.call_soon(self._dispatch)

    def dispatch_now(self) -> None:
        """The pass wake() scheduled, now: a pull or query must see the sends answered before it (a client's own
        send, then its pull) even inside the pace."""
        if self._dispatch_pending:
            self._dispatch_handle.cancel()
            self._dispatch()

    def _dispatch(self) -> None:
        self._dispatch_pending = False
        self._last_dispatch = self.loop.time()
        reput = self.broker.store.reput
        n = reput.try_reput() if reput is not None else 0
        if n < 0:                      # the dispatcher thread's pass holds the lock: look again in a moment
            self._dispatch_pending = True
            self._dispatch_handle = self.loop.call_later(0.001, self._dispatch)
            return
        woken, self._woken = self._woken, set()
        for topic in woken:
            ev = self._arrivals.get(topic)
            if ev is not None:
                ev.set()

    def arrivals(self, topic: str) -> asyncio.Event:
        ev = self._arrivals.get(topic)
        if ev is None:
            ev = self._arrivals[topic] = asyncio.Event()
        return ev

    # -- clients ----------------------------------------------------------------------------------------------

    def consumer_ids(self, group: str) -> list[str]:
        return sorted({c.client.client_id for c in self.consumers.get(group, {})})

    def notify_group_changed(self, group: str) -> None:
        """Broker2Client.notifyConsumerIdsChanged: every member of ``group`` rebalances now (oneway 40)."""
        for conn in list(self.consumers.get(group, {})):
            conn.send_request(NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})

    def forget(self, conn: "RemotingConnection") -> None:
        """A connection closed: its client leaves its groups (ClientHousekeepingService.doChannelCloseEvent)."""
        self._conns.discard(conn)
        self.names.routes.on_channel_destroy(conn)      # brokers that registered on it leave the routes at once
        for group in list(conn.client.consumer_groups):
            members = self.consumers.get(group)
            if members is not None and members.pop(conn, None) is not None:
                if not members:
                    del self.consumers[group]
                elif not self.stopping:
                    self.notify_group_changed(group)
        for group in conn.client.producer_groups:
            p = self.producers.get(group)
            if p is not None:
                p.discard(conn)
        if conn.client.client_id:
            self.events.on_client_gone(conn.client.client_id)


class RemotingConnection(asyncio.Protocol):
    """One TCP connection: frames in, answers out, in the order each request completes."""

    def __init__(self, server: RemotingServer, namesrv_only: bool = False):
        self.server = server
        self.broker = server.broker
        self.namesrv_only = namesrv_only
        self.validator = None if namesrv_only else server.validator   # the name server's port has no ACL
        self.decoder = FrameDecoder(server.max_frame)
        self.transport = None
        self.peer = ""
        self.client = _Client(self)
        self.pulls: set[asyncio.Task] = set()
        self._opaque = 0
        self._closed = False
        self._batch: list | None = None       # answers gathered while data_received handles a read
        self._batch_bytes = 0
        self._paused = False                   # the transport's buffer is past PEER_WRITE_HIGH
        self._held: list | None = None         # requests read and not yet handled while paused
        self._admitted = False                 # within the connection caps (RemotingServer.admit)
        self._host = ""
        self.last_read = 0.0                   # the loop's time of the last read (idle timeout)
        self._fd = -1                          # the socket's descriptor, for writev

    # -- transport events -------------------------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else ""
        self._host = peer[0] if peer else ""
        self.last_read = self.server.loop.time()
        if not self.server.admit(self, self._host):
            self._closed = True
            transport.abort()
            return
        self._admitted = True
        transport.set_write_buffer_limits(high=PEER_WRITE_HIGH)
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None and hasattr(os, "writev") else -1

    def connection_lost(self, exc) -> None:
        self._closed = True
        if not self._admitted:
            return
        self.server.release(self._host)
        for t in list(self.pulls):
            t.cancel()
        self.server.forget(self)

    def pause_writing(self) -> None:
        # a reader that does not keep up: stop reading its requests until its answers drain (flow control)
        self._paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if self._closed:
            return
        held, self._held = self._held, None
        if held:
            self._run(held)             # may pause again and hold the rest
        if not self._paused and not self._closed:
            self.transport.resume_reading()

    def data_received(self, data) -> None:
        self.last_read = self.server.loop.time()
        try:
            commands = self.decoder.feed(data)
        except FrameError as e:
            # NettyDecoder closes a connection whose frame it cannot decode
            log.warning("remoting: closing %s: %s", self.peer, e)
            self.transport.close()
            return
        if self._held is not None:
            # reads are paused while requests are held; what the transport had already read joins them
            self._held.extend(commands)
            return
        self._run(commands)

    def _run(self, commands) -> None:
        """Handle ``commands`` in order. The answers to the requests of one read leave in one write (one syscall
        for a read's worth of sends, not one per request): they are gathered in _batch and written after the
        last request, or as soon as they pass BATCH_BYTES. When a write leaves the transport's buffer past
        PEER_WRITE_HIGH (a reader that does not keep up), the remaining requests are held, not answered, until it
        drains (resume_writing): the server's memory per connection stays bounded however many requests one read
        brought."""
        self._batch = batch = []
        self._batch_bytes = 0
        # the common send and pull straight to their compiled calls (with an ACL validator, handle checks first and
        # _send or _pull runs; the name server's port serves neither)
        srv = self.server
        send = pull = None
        if self.validator is None and not self.namesrv_only:
            send, pull = srv.send_message, srv.pull_message
        try:
            for i, cmd in enumerate(commands):
                if self._closed:
                    return
                if self._paused:
                    self._held = commands[i:]
                    return
                if cmd.flag & RESPONSE_FLAG:
                    continue            # an answer to the broker's own oneway requests: nothing waits for one
                try:
                    if not ((send is not None and send.send(self, cmd))
                            or (pull is not None and pull.pull(self, cmd))):
                        self.handle(cmd)
                except Refusal as r:
                    self.reply(cmd, r.code, remark=r.remark)
                except Exception as e:       # never let one request end the connection or the server
                    log.exception("remoting: request %d from %s failed", cmd.code, self.peer)
                    self.reply(cmd, SYSTEM_ERROR, remark=f"{type(e).__name__}: {e}")
                if self._batch_bytes > BATCH_BYTES and not self._closed:
                    self._write_buffers(batch)          # may pause_writing: the next request is then held
                    self._batch = batch = []
                    self._batch_bytes = 0
        finally:
            self._batch = None
            if batch and not self._closed:
                self._write_buffers(batch)
            if srv.send_message is not None:
                srv.send_message.count()    # the read's stored messages into ServerEvents, under one lock

    # -- writing ----------------------------------------------------------------------------------------------

    def reply(self, cmd, code: int, ext: dict | None = None, remark: str | None = None, body=None,
              size: int = -1) -> None:
        """The answer to ``cmd`` in its own serialize type; nothing for a oneway request. ``body``: bytes, or a
        list of buffers (a pull's records, views of the mapped files) written after the header as they are, whose
        total length is ``size`` when the caller knows it."""
        if cmd.flag & ONEWAY_FLAG or self._closed:
            return
        if body is None:
            self._write(encode_header(cmd.serialize_type, code, cmd.opaque, RESPONSE_FLAG, remark, ext, 0))
        elif isinstance(body, list):
            if size < 0:
                size = 0
                for b in body:
                    size += len(b)
            header = encode_header(cmd.serialize_type, code, cmd.opaque, RESPONSE_FLAG, remark, ext, size)
            if self._batch is not None:
                self._batch.append(header)
                self._batch.extend(body)
                self._batch_bytes += size
            else:
                self._write_buffers([header, *body])
        else:
            self._write(encode_header(cmd.serialize_type, code, cmd.opaque, RESPONSE_FLAG, remark, ext,
                                      len(body)))
            self._write(body)

    def send_request(self, code: int, ext: dict, body: bytes = b"") -> None:
        """A oneway request of the broker's to this client, in JSON (every client reads JSON)."""
        if self._closed:
            return
        self._opaque += 1
        self._write(encode_header(0, code, self._opaque, ONEWAY_FLAG, None, ext, len(body)))
        if body:
            self._write(body)

    def _write(self, data) -> None:
        if self._batch is not None:
            self._batch.append(data)
            self._batch_bytes += len(data)
        else:
            self._write_buffers([data])

    def _write_buffers(self, bufs: list) -> None:
        """Write ``bufs`` in order. With nothing queued in the transport they go to the kernel in one writev from
        where they are (a pull's records straight from the mapped files: asyncio 3.11's writelines would join them
        into one bytes object first); only what the socket did not take is handed to the transport (asyncio's
        copies it; uvloop's keeps the views, and a view holds its mapped file open until it is sent). Behind queued
        data (both loops count what they hold in get_write_buffer_size), everything goes to the transport."""
        t = self.transport
        if self._fd < 0 or t.get_write_buffer_size() or t.is_closing():
            t.writelines(bufs)
            return
        done = 0
        try:
            for i in range(0, len(bufs), IOV_MAX):
                chunk = bufs if len(bufs) <= IOV_MAX else bufs[i:i + IOV_MAX]
                n = os.writev(self._fd, chunk)
                done += n
                if i + IOV_MAX < len(bufs) and n < sum(len(b) for b in chunk):
                    break           # the socket is full: the rest goes to the transport
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            # the connection failed: the transport finds out on its own write and closes (connection_lost)
            t.writelines(bufs)
            return
        if done == 0:
            t.writelines(bufs)
            return
        rest = []
        for b in bufs:
            n = len(b)
            if done >= n:
                done -= n
                continue
            rest.append(memoryview(b)[done:] if done else b)
            done = 0
        if rest:
            t.writelines(rest)

    # -- requests ---------------------------------------------------------------------------------------------

    def handle(self, cmd) -> None:
        code = cmd.code
        if self.validator is not None:
            # the broker's ACL hook runs before any processor (RemotingConnection.validator: None without --acl)
            why = self.validator.refusal(code, cmd.ext_fields, cmd.body, self.peer)
            if why is not None:
                self.reply(cmd, NO_PERMISSION, remark=why)
                return
        fn = NAMESRV_HANDLERS.get(code) if self.namesrv_only else HANDLERS.get(code)
        if fn is None:
            # NettyRemotingAbstract.processRequestCommand's answer to a code without a processor
            self.reply(cmd, REQUEST_CODE_NOT_SUPPORTED, remark=f" request type {code} not supported")
            return
        fn(self, cmd)

    # name server

    def _route(self, cmd) -> None:
        topic = _need(cmd.ext_fields, "topic")
        body = self.server.names.route(topic)
        if body is None:
            self.reply(cmd, TOPIC_NOT_EXIST, remark=f"No topic route info in name server for the topic: {topic}"
                                                    f"{_ns.APPLY_TOPIC_URL}")
        else:
            self.reply(cmd, SUCCESS, body=body)

    def _cluster_info(self, cmd) -> None:
        self.reply(cmd, SUCCESS, body=self.server.names.cluster_info())

    def _topic_list(self, cmd) -> None:
        self.reply(cmd, SUCCESS, body=self.server.names.topic_list())

    # send

    def _send(self, cmd) -> None:
        fast = self.server.send_message
        if fast is not None and self.validator is not None and fast.send(self, cmd):
            return                  # (without a validator _run has tried it)
        ext = cmd.ext_fields
        if cmd.code != SEND_MESSAGE:
            ext = {V2_NAMES.get(k, k): v for k, v in ext.items()}
        topic = _need(ext, "topic")
        queue_id = _int(ext, "queueId")
        sys_flag = _int(ext, "sysFlag")
        born = _int(ext, "bornTimestamp")
        flag = _int(ext, "flag")
        _need(ext, "producerGroup")
        reconsume = _int(ext, "reconsumeTimes", 0)
        props = string_to_properties(ext.get("properties"))
        if props.get(PROPERTY_WAIT_STORE_MSG_OK) == "true":
            # SendMessageProcessor.sendMessage stores no "WAIT=true" (9 bytes a message); the store waits for a
            # message without it as for one with it. WAIT=false stays: the store reads it (no flush wait).
            del props[PROPERTY_WAIT_STORE_MSG_OK]
        # SendMessageProcessor: code 320, or a header whose batch is Boolean.parseBoolean-true ("true" only:
        # rocketmq-client-cpp 1.x writes "1", which the Java broker, and so this one, reads as false)
        batch = cmd.code == SEND_BATCH_MESSAGE or ext.get("batch", "").lower() == "true"
        if batch:
            msgs = [Message(topic, b, queue_id, properties=p, flag=f, sys_flag=sys_flag, born_timestamp=born,
                            born_host=self.peer, reconsume_times=reconsume)
                    for f, b, p in decode_batch(cmd.body)]
            if not msgs:
                raise Refusal(MESSAGE_ILLEGAL, "batch body holds no message")
            put, arg = self.broker.send_batch, msgs
        else:
            msg = Message(topic, cmd.body, queue_id, properties=props, flag=flag, sys_flag=sys_flag,
                          born_timestamp=born, born_host=self.peer, reconsume_times=reconsume)
            put, arg = self.broker.send, msg
        if self.server._sync:
            if not batch and PROPERTY_TRANSACTION_PREPARED not in props:
                self._send_async(cmd, msg)
                return
            task = asyncio.ensure_future(self._send_in_pool(cmd, put, arg, topic))
            self.pulls.add(task)
            task.add_done_callback(self.pulls.discard)
            return
        self._answer_send(cmd, self._put(put, arg), arg)

    async def _send_in_pool(self, cmd, put, arg, topic) -> None:
        try:
            result = await self.server.loop.run_in_executor(self.server.executor, self._put, put, arg)
        except Refusal as r:
            self.reply(cmd, r.code, remark=r.remark)
            return
        self._answer_send(cmd, result, arg)

    def _send_async(self, cmd, msg) -> None:
        """A SYNC_FLUSH / SYNC_MASTER send: checked and appended now, in the loop (the append waits for nothing but
        the put lock, as an ASYNC_FLUSH send's does), answered when the flush or the slave completes it."""
        fut = self._put(self.broker.send_async, msg)
        if fut.done():          # SLAVE_NOT_AVAILABLE, WAIT=false, a failed put: no flush or slave to wait for
            self._answer_send(cmd, fut.result(), msg)
        else:
            self.server.pending_sends.add(self, cmd, msg, fut)

    def _put(self, put, arg):
        try:
            return put(arg)
        except SEND_REFUSALS as e:
            code = next(c for cls, c in SEND_REFUSAL_CODES if isinstance(e, cls))
            if code == SERVICE_NOT_AVAILABLE:
                raise Refusal(code, service_not_available_remark(self.broker.store.path)) from None
            raise Refusal(code, str(e)) from None

    def _answer_send(self, cmd, result, arg) -> None:
        results = result if isinstance(result, list) else [result]
        first = results[0]
        if first.status is not PutStatus.PUT_OK and first.status not in (PutStatus.FLUSH_DISK_TIMEOUT,
                                                                          PutStatus.FLUSH_SLAVE_TIMEOUT,
                                                                          PutStatus.SLAVE_NOT_AVAILABLE):
            code = PUT_CODES.get(first.status, SYSTEM_ERROR)
            self.reply(cmd, code, remark=f"put message to store failed: {first.status.name}")
            return
        code = PUT_CODES.get(first.status, SUCCESS)
        # the broker's send puts the queue it stored to into the message (it picks one for a negative queueId)
        msg = arg[0] if isinstance(arg, list) else arg
        topic = msg.topic
        if isinstance(result, list):
            msg_id = ",".join(r.msg_id or "" for r in results)
        else:
            msg_id = first.msg_id
        self.server.wake(topic)
        ext = {"msgId": msg_id, "queueId": str(msg.queue_id),
               "queueOffset": str(first.queue_offset), "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        self.reply(cmd, code, ext)
        self.server.events.on_messages_in(topic, [r.wrote_bytes for r in results])

    def _create_topic(self, cmd) -> None:
        ext = cmd.ext_fields
        topic = _need(ext, "topic")
        _need(ext, "defaultTopic")
        tc = TopicConfig(topic, read_queue_nums=_int(ext, "readQueueNums"),
                         write_queue_nums=_int(ext, "writeQueueNums"), perm=_int(ext, "perm"),
                         topic_filter_type=_need(ext, "topicFilterType"), topic_sys_flag=_int(ext, "topicSysFlag", 0),
                         order=_need(ext, "order") == "true")
        if topic == self.broker.config.broker_cluster_name:
            # AdminBrokerProcessor.updateAndCreateTopic: a topic named as the cluster is refused
            raise Refusal(SYSTEM_ERROR, f"the topic[{topic}] is conflict with system reserved words.")
        try:
            self.broker.update_topic(tc)
        except (IllegalNameError, ValueError) as e:
            raise Refusal(SYSTEM_ERROR, str(e)) from None
        self.reply(cmd, SUCCESS)

    # clients

    def _heartbeat(self, cmd) -> None:
        try:
            data = json.loads(cmd.body or b"{}")
        except ValueError as e:
            raise Refusal(SYSTEM_ERROR, f"heartbeat body is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise Refusal(SYSTEM_ERROR, "heartbeat body is not a JSON object")
        srv = self.server
        c = self.client
        c.client_id = str(data.get("clientID") or "")
        c.language, c.version, c.last_seen = cmd.language, cmd.version, time.time()
        for p in data.get("producerDataSet") or ():
            group = p.get("groupName") if isinstance(p, dict) else None
            if isinstance(group, str):
                c.producer_groups.add(group)
                srv.producers.setdefault(group, set()).add(self)
                srv.events.on_client(c.client_id, kind="PRODUCER", group="", address=self.peer,
                                     version=str(cmd.version), language=cmd.language)
        for cd in data.get("consumerDataSet") or ():
            if not isinstance(cd, dict) or not isinstance(cd.get("groupName"), str):
                continue
            group = cd["groupName"]
            gc = self.broker.subscription_group_manager.find_subscription_group_config(group)
            if gc is None:
                raise Refusal(SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
            # ClientManageProcessor.heartBeat: the group's retry topic, made (and routed) on its first heartbeat
            self.broker.topic_config_manager.create_topic_in_send_message_back_method(
                f"{RETRY_GROUP_TOPIC_PREFIX}{group}", gc.retry_queue_nums, PERM_READ | PERM_WRITE)
            subs = {}
            for s in cd.get("subscriptionDataSet") or ():
                if isinstance(s, dict) and isinstance(s.get("topic"), str):
                    subs[s["topic"]] = (str(s.get("expressionType") or "TAG"), str(s.get("subString") or "*"),
                                        int(s.get("subVersion") or 0))
            members = srv.consumers.setdefault(group, {})
            changed = members.get(self) is None or members[self] != subs
            members[self] = subs
            c.consumer_groups.add(group)
            c.consumer_data[group] = cd
            srv.events.on_client(c.client_id, kind="PUSH_CONSUMER", group=group, address=self.peer,
                                 version=str(cmd.version), language=cmd.language)
            if changed:
                srv.notify_group_changed(group)
        self.reply(cmd, SUCCESS)

    def _unregister(self, cmd) -> None:
        ext = cmd.ext_fields
        _need(ext, "clientID")
        srv = self.server
        group = ext.get("consumerGroup")
        if group:
            members = srv.consumers.get(group)
            if members is not None and members.pop(self, None) is not None:
                self.client.consumer_groups.discard(group)
                self.client.consumer_data.pop(group, None)
                if members:
                    srv.notify_group_changed(group)
                else:
                    del srv.consumers[group]
        group = ext.get("producerGroup")
        if group:
            self.client.producer_groups.discard(group)
            srv.producers.get(group, set()).discard(self)
        self.reply(cmd, SUCCESS)

    def _consumer_list(self, cmd) -> None:
        group = _need(cmd.ext_fields, "consumerGroup")
        ids = self.server.consumer_ids(group)
        if not ids:
            self.reply(cmd, SYSTEM_ERROR, remark=f"no consumer for this group, {group}")
            return
        self.reply(cmd, SUCCESS, body=json.dumps({"consumerIdList": ids}, separators=(",", ":")).encode())

    # offsets

    def _queue_args(self, cmd) -> tuple[str, int]:
        return _need(cmd.ext_fields, "topic"), _int(cmd.ext_fields, "queueId")

    def _query_offset(self, cmd) -> None:
        group = _need(cmd.ext_fields, "consumerGroup")
        topic, queue_id = self._queue_args(cmd)
        offset = self.broker.query_offset(group, topic, queue_id)
        if offset >= 0:
            self.reply(cmd, SUCCESS, {"offset": str(offset)})
            return
        # ConsumerManageProcessor.queryConsumerOffset: no commit, and the queue still starts at 0 → 0
        store = self.broker.store
        if store.min_offset(topic, queue_id) <= 0:
            self.reply(cmd, SUCCESS, {"offset": "0"})
        else:
            self.reply(cmd, QUERY_NOT_FOUND, remark="Not found, V3_0_6_SNAPSHOT maybe this group consumer boot "
                                                    "first")

    def _update_offset(self, cmd) -> None:
        group = _need(cmd.ext_fields, "consumerGroup")
        topic, queue_id = self._queue_args(cmd)
        offset = _int(cmd.ext_fields, "commitOffset")
        self._commit(group, topic, queue_id, offset)
        self.reply(cmd, SUCCESS)

    def _commit(self, group, topic, queue_id, offset) -> None:
        try:
            try:
                self.broker.commit_offset(group, topic, queue_id, offset)
            except OffsetIllegalError:
                # past the queue's max offset: the messages may be written and not dispatched yet (the client
                # commits right after it consumed what it pulled, a send earlier): dispatch what is written, then
                # look again
                self._dispatch_written()
                self.broker.commit_offset(group, topic, queue_id, offset)
        except (OffsetIllegalError, TopicNotExistError, QueueIdIllegalError, SubscriptionGroupNotExistError,
                IllegalNameError) as e:
            log.info("remoting: offset commit of %s for %s/%d refused: %s", group, topic, queue_id, e)

    def _max_offset(self, cmd) -> None:
        topic, queue_id = self._queue_args(cmd)
        # the consume queue's end counts every answered send, a oneway one of another client's too (its loop pass
        # may still be pending): a lite pull consumer seeks to it
        self._dispatch_written()
        self.reply(cmd, SUCCESS, {"offset": str(self.broker.store.max_offset(topic, queue_id))})

    def _min_offset(self, cmd) -> None:
        topic, queue_id = self._queue_args(cmd)
        self.reply(cmd, SUCCESS, {"offset": str(max(0, self.broker.store.min_offset(topic, queue_id)))})

    def _search_offset(self, cmd) -> None:
        topic, queue_id = self._queue_args(cmd)
        ts = _int(cmd.ext_fields, "timestamp")
        self.reply(cmd, SUCCESS, {"offset": str(self.broker.store.offset_by_time(topic, queue_id, ts))})

    def _earliest_time(self, cmd) -> None:
        topic, queue_id = self._queue_args(cmd)
        store = self.broker.store
        low = store.min_offset(topic, queue_id)
        ts = -1
        if low >= 0:
            r = store.get_messages("", topic, queue_id, low, 1)
            if r.messages:
                ts = r.messages[0].store_timestamp
        self.reply(cmd, SUCCESS, {"timestamp": str(ts)})

    # pull

    def _pull(self, cmd) -> None:
        fast = self.server.pull_message
        if fast is not None and self.validator is not None and fast.pull(self, cmd):
            return                  # (without a validator _run has tried it)
        ext = cmd.ext_fields
        group = _need(ext, "consumerGroup")
        topic = _need(ext, "topic")
        queue_id = _int(ext, "queueId")
        offset = _int(ext, "queueOffset")
        max_nums = _int(ext, "maxMsgNums")
        sys_flag = _int(ext, "sysFlag")
        commit_offset = _int(ext, "commitOffset")
        suspend_ms = _int(ext, "suspendTimeoutMillis")
        _int(ext, "subVersion")
        if sys_flag & FLAG_SUBSCRIPTION:
            etype, expression = ext.get("expressionType") or "TAG", ext.get("subscription") or "*"
        else:
            # the push consumer sends no subscription: the one its heartbeat registered
            etype, expression = "TAG", "*"
            for subs in (self.server.consumers.get(group, {}).get(self), *self.server.consumers.get(group, {}).values()):
                if subs and topic in subs:
                    etype, expression = subs[topic][0], subs[topic][1]
                    break
        if etype not in ("", "TAG") and not self.broker.config.enable_property_filter:
            raise Refusal(SYSTEM_ERROR, _no_property_filter(etype))      # PullMessageProcessor, as 4.9.7
        tags = matcher = None
        try:
            if etype == "SQL92":
                matcher = compile_filter(expression)
            elif expression.strip() not in ("", "*"):
                tags = expression
        except FilterError as e:
            raise Refusal(SUBSCRIPTION_PARSE_FAILED, f"parse the consumer's subscription failed: {e}") from None
        # PullMessageProcessor's storeOffsetEnable: a slave keeps no offset a pull carries (its offsets are the
        # master's, copied by SlaveSynchronize)
        if sys_flag & FLAG_COMMIT_OFFSET and commit_offset >= 0 and not self.server.is_slave:
            self._commit(group, topic, queue_id, commit_offset)
        wait_ms = min(suspend_ms, MAX_SUSPEND_MS) if sys_flag & FLAG_SUSPEND else 0
        args = (group, topic, queue_id, offset, max(1, min(max_nums, 32 * 1024)), tags)
        self.server.dispatch_now()
        r = self._get(*args)
        if r is not None and r.status is not GetStatus.FOUND:
            # Nothing at ``offset`` may mean written and not yet dispatched (the client's own answered send): an
            # answer from the undispatched queue would move the consumer's offset (PULL_OFFSET_MOVED), so what is
            # written is dispatched first.
            self._dispatch_written()
            r = self._get(*args)
        if r is not None and (r.status is GetStatus.FOUND or wait_ms <= 0 or not self._waitable(r, offset)):
            self._answer_pull(cmd, r, offset, matcher, group, topic)
            return
        task = asyncio.ensure_future(self._park(cmd, args, wait_ms, matcher))
        self.pulls.add(task)
        task.add_done_callback(self.pulls.discard)

    def _dispatch_written(self) -> None:
        """Dispatch what is written now (the loop's pass after a send may still be pending), waiting for the
        dispatcher thread if its pass holds the lock."""
        self.server.dispatch_now()
        store = self.broker.store
        if store.reput is None or store.reput.try_reput() < 0:
            store.wait_dispatched(1.0)

    def _get(self, group, topic, queue_id, offset, max_nums, tags):
        try:
            return self.broker.pull(group, topic, queue_id, offset, max_nums, tags)
        except TopicNotExistError as e:
            raise Refusal(TOPIC_NOT_EXIST, str(e)) from None
        except NoPermissionError as e:
            raise Refusal(NO_PERMISSION, str(e)) from None
        except SubscriptionGroupNotExistError as e:
            raise Refusal(SUBSCRIPTION_GROUP_NOT_EXIST, str(e)) from None
        except (QueueIdIllegalError, IllegalNameError, ValueError) as e:
            raise Refusal(SYSTEM_ERROR, str(e)) from None

    @staticmethod
    def _waitable(r, offset: int) -> bool:
        s = r.status
        return s in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.OFFSET_FOUND_NULL) or \
            (s in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE) and offset == 0)

    async def _park(self, cmd, args, wait_ms: int, matcher) -> None:
        """PullRequestHoldService: the pull waits for its topic's next dispatch, or answers PULL_NOT_FOUND at its
        suspend timeout."""
        srv = self.server
        topic = args[1]
        deadline = time.monotonic() + wait_ms / 1000
        ev = srv.arrivals(topic)
        try:
            while True:
                ev.clear()
                r = self._get(*args)
                if r.status is GetStatus.FOUND or not self._waitable(r, args[3]):
                    break
                left = deadline - time.monotonic()
                if left <= 0 or srv.stopping or self._closed:
                    break
                try:
                    await asyncio.wait_for(ev.wait(), timeout=min(left, POLL_INTERVAL_S))
                except asyncio.TimeoutError:
                    pass
            self._answer_pull(cmd, r, args[3], matcher, args[0], topic)
        except Refusal as e:
            self.reply(cmd, e.code, remark=e.remark)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("remoting: pull from %s failed", self.peer)
            self.reply(cmd, SYSTEM_ERROR, remark=f"{type(e).__name__}: {e}")

    def _answer_pull(self, cmd, r, offset: int, matcher, group: str, topic: str) -> None:
        """PullMessageProcessor's answer: the status's code, the four header fields on every status, and for
        FOUND the records as stored."""
        s = r.status
        nxt = r.next_begin_offset
        if s is GetStatus.FOUND:
            msgs = r.messages
            if matcher is not None:
                msgs = [m for m in msgs if matcher(m)]
            code = SUCCESS if msgs else PULL_RETRY_IMMEDIATELY
        elif s in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING):
            code, msgs = PULL_RETRY_IMMEDIATELY, []
        elif s in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
            code, msgs = (PULL_OFFSET_MOVED if offset != 0 else PULL_NOT_FOUND), []
        elif s in (GetStatus.OFFSET_FOUND_NULL, GetStatus.OFFSET_OVERFLOW_ONE):
            code, msgs = PULL_NOT_FOUND, []
            nxt = offset if s is GetStatus.OFFSET_OVERFLOW_ONE else nxt
        else:                                   # OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL
            code, msgs = PULL_OFFSET_MOVED, []
        # PullMessageProcessor: with slaveReadEnable a consumer reading far behind the log's end (from disk) is
        # sent to the group's whichBrokerWhenConsumeSlowly (a slave), any other to the group's brokerId; without
        # it, to the master. A slave does not move a consumer's offset (offsetCheckInSlave off): it may only be
        # behind its master, so it asks for a retry.
        suggest = 0
        srv = self.server
        if srv.slave_read_enable or (code == PULL_OFFSET_MOVED and srv.is_slave):
            gc = self.broker.subscription_group_manager.subscription_group_table.get(group)
            if gc is not None:
                if code == PULL_OFFSET_MOVED and srv.is_slave and not srv.offset_check_in_slave:
                    code = PULL_RETRY_IMMEDIATELY
                    suggest = gc.broker_id
                elif srv.slave_read_enable:
                    suggest = gc.which_broker_when_consume_slowly if r.suggest_pulling_from_slave else gc.broker_id
        ext = {"suggestWhichBrokerId": str(suggest), "nextBeginOffset": str(nxt), "minOffset": str(r.min_offset),
               "maxOffset": str(r.max_offset)}
        if code == SUCCESS:
            records = record_views(msgs)
            # the store summed the sizes of the records it found (GetMessageResult.bufferTotalSize)
            size = r.buffer_total_size if matcher is None else sum(m.store_size for m in msgs)
            # PullMessageProcessor: the remark is the store's GetMessageStatus name on every status, FOUND too
            self.reply(cmd, SUCCESS, ext, remark=s.name, body=records, size=size)
            self.server.events.on_messages_out(topic, group, len(records), size)
        else:
            self.reply(cmd, code, ext, remark=s.name)

    # retry, locks, transactions, queries

    def _send_back(self, cmd) -> None:
        ext = cmd.ext_fields
        offset = _int(ext, "offset")
        group = _need(ext, "group")
        level = _int(ext, "delayLevel")
        max_times = ext.get("maxReconsumeTimes")

        class _At:
            commitlog_offset = offset
            msg_id = ext.get("originMsgId") or str(offset)
        try:
            self.broker.send_back(_At, group, level, int(max_times) if max_times not in (None, "") else None)
        except MessageNotFoundError as e:
            raise Refusal(SYSTEM_ERROR, str(e)) from None
        except SubscriptionGroupNotExistError as e:
            raise Refusal(SUBSCRIPTION_GROUP_NOT_EXIST, str(e)) from None
        except NoPermissionError as e:
            raise Refusal(NO_PERMISSION, str(e)) from None
        except (PutFailedError, MessageIllegalError, IllegalNameError) as e:
            raise Refusal(SYSTEM_ERROR, str(e)) from None
        self.server.wake(f"{RETRY_GROUP_TOPIC_PREFIX}{group}")
        self.reply(cmd, SUCCESS)

    def _lock_body(self, cmd) -> tuple[str, str, list[dict]]:
        try:
            data = json.loads(cmd.body)
            group, client_id, mqs = data["consumerGroup"], data["clientId"], list(data["mqSet"])
        except (ValueError, KeyError, TypeError) as e:
            raise Refusal(SYSTEM_ERROR, f"lock body: {e}") from None
        return group, client_id, mqs

    def _lock(self, cmd) -> None:
        """RebalanceLockManager.tryLockBatch: a queue goes to the first client that asks, held until it unlocks
        or its lock is 60 s old without renewal."""
        group, client_id, mqs = self._lock_body(cmd)
        locks = self.server.locks
        now = time.monotonic()
        ok = []
        for mq in mqs:
            try:
                key = (group, mq["topic"], mq["brokerName"], int(mq["queueId"]))
            except (KeyError, TypeError, ValueError):
                continue
            held = locks.get(key)
            if held is None or held[0] == client_id or held[1] < now:
                locks[key] = (client_id, now + LOCK_MAX_LIVE_S)
                ok.append({"brokerName": key[2], "queueId": key[3], "topic": key[1]})
        self.reply(cmd, SUCCESS, body=json.dumps({"lockOKMQSet": ok}, separators=(",", ":")).encode())

    def _unlock(self, cmd) -> None:
        group, client_id, mqs = self._lock_body(cmd)
        locks = self.server.locks
        for mq in mqs:
            try:
                key = (group, mq["topic"], mq["brokerName"], int(mq["queueId"]))
            except (KeyError, TypeError, ValueError):
                continue
            held = locks.get(key)
            if held is not None and held[0] == client_id:
                del locks[key]
        self.reply(cmd, SUCCESS)


    def _check_client_config(self, cmd) -> None:
        """ClientManageProcessor.checkClientConfig: a consumer that subscribes with an expression other than a tag
        asks before it starts; one this broker cannot filter by, or that does not compile, fails its start."""
        try:
            data = json.loads(cmd.body) if cmd.body else {}
        except ValueError as e:
            raise Refusal(SYSTEM_ERROR, f"check client config body is not JSON: {e}") from None
        sub = data.get("subscriptionData") if isinstance(data, dict) else None
        if isinstance(sub, dict):
            etype = sub.get("expressionType") or "TAG"
            if etype != "TAG":
                if not self.broker.config.enable_property_filter:
                    raise Refusal(SYSTEM_ERROR, _no_property_filter(etype))
                if etype != "SQL92":
                    raise Refusal(SYSTEM_ERROR, _no_property_filter(etype))
                try:
                    compile_filter(sub.get("subString") or "")
                except FilterError as e:
                    raise Refusal(SUBSCRIPTION_PARSE_FAILED, str(e)) from None
        self.reply(cmd, SUCCESS)



NAMESRV_HANDLERS = {
    _ns.GET_ROUTEINFO_BY_TOPIC: RemotingConnection._route,
    _ns.GET_BROKER_CLUSTER_INFO: RemotingConnection._cluster_info,
    _ns.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: RemotingConnection._topic_list,
    **_ns.HANDLERS,
}
HANDLERS = dict(NAMESRV_HANDLERS)
HANDLERS.update({
    SEND_MESSAGE: RemotingConnection._send,
    SEND_MESSAGE_V2: RemotingConnection._send,
    SEND_BATCH_MESSAGE: RemotingConnection._send,
    UPDATE_AND_CREATE_TOPIC: RemotingConnection._create_topic,
    HEART_BEAT: RemotingConnection._heartbeat,
    UNREGISTER_CLIENT: RemotingConnection._unregister,
    GET_CONSUMER_LIST_BY_GROUP: RemotingConnection._consumer_list,
    QUERY_CONSUMER_OFFSET: RemotingConnection._query_offset,
    UPDATE_CONSUMER_OFFSET: RemotingConnection._update_offset,
    GET_MAX_OFFSET: RemotingConnection._max_offset,
    GET_MIN_OFFSET: RemotingConnection._min_offset,
    SEARCH_OFFSET_BY_TIMESTAMP: RemotingConnection._search_offset,
    GET_EARLIEST_MSG_STORETIME: RemotingConnection._earliest_time,
    PULL_MESSAGE: RemotingConnection._pull,
    LITE_PULL_MESSAGE: RemotingConnection._pull,
    CONSUMER_SEND_MSG_BACK: RemotingConnection._send_back,
    LOCK_BATCH_MQ: RemotingConnection._lock,
    UNLOCK_BATCH_MQ: RemotingConnection._unlock,
    END_TRANSACTION: _tx.end_transaction,
    CHECK_CLIENT_CONFIG: RemotingConnection._check_client_config,
    # query and admin (admin.py)
    VIEW_MESSAGE_BY_ID: admin.view_message_by_id,
    QUERY_MESSAGE: admin.query_message,
    GET_BROKER_RUNTIME_INFO: admin.broker_runtime_info,
    GET_BROKER_CONFIG: admin.broker_config,
    GET_TOPIC_STATS_INFO: admin.topic_stats,
    GET_CONSUME_STATS: admin.consume_stats,
    GET_CONSUMER_CONNECTION_LIST: admin.consumer_connection_list,
    GET_PRODUCER_CONNECTION_LIST: admin.producer_connection_list,
    QUERY_TOPIC_CONSUME_BY_WHO: admin.topic_consume_by_who,
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: admin.update_subscription_group,
    DELETE_SUBSCRIPTIONGROUP: admin.delete_subscription_group,
})
# a slave's metadata pulls (21, 43, 45, 201): slave_synchronize.py
HANDLERS.update(_slave_sync.HANDLERS)
