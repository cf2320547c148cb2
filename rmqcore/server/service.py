"""MessagingService: the RPCs of RocketMQ 5's gRPC protocol over a Broker (the proxy's GrpcMessagingApplication
and its activities: RouteActivity, SendMessageActivity, ReceiveMessageActivity, AckMessageActivity,
ChangeInvisibleDurationActivity, ClientActivity, TransactionActivity).

Every handler answers refusals in the response's Status (gRPC status OK), as the proxy does; an unexpected error
is INTERNAL_ERROR with its text, never a crash of the server. Handlers run on the server's event loop; store calls
are quick and run inline. Under SYNC_FLUSH a send appends at once (WAIT "false") and its answer waits in the loop
for the group commit that covers it, so the sends of many clients share one flush without a thread each; ending a
transaction (a re-put that waits for its flush) runs in a small thread pool.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import time

import grpc

from ..broker.errors import (BrokerError, IllegalNameError, NoPermissionError, SubscriptionGroupNotExistError,
                             TopicNotExistError)
from ..broker.mix_all import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from ..broker.topic_validator import (AUTO_CREATE_TOPIC_KEY_TOPIC, is_readable, is_writeable,
                                      validate_client_group, validate_client_topic)
from ..broker.transaction import NO_PRODUCER, PROPERTY_PRODUCER_GROUP, PROPERTY_REAL_TOPIC
from ..compression import DecompressionError
from ..errors import BrokerRoleError, MessageIllegalError
from ..reference import java_hash_code
from ..status import PutStatus
from . import messaging_pb2 as pb
from ..serve.auth import PUB, SUB, AuthError
from ._converter import CommonSend, fill_send_entries, to_store_messages
from .converter import InvalidMessage, to_proto_message
from .message_const import GZIP_MAGIC, JAVA_LONG_MAX, JAVA_LONG_MIN
from ..serve.filter import FilterError, compile_filter
from ..serve.flow_control import RefusalThrottle, TopicCreationLimiter
from .pop import ReceiptHandle

log = logging.getLogger(__name__)

SERVICE = "apache.rocketmq.v2.MessagingService"
CODE_NAMES = {v: k for k, v in pb.Code.items()}        # pb.Code.Name without its per-call Python
MESSAGE_TYPE_NAMES = {pb.NORMAL: "NORMAL", pb.FIFO: "FIFO", pb.DELAY: "DELAY", pb.TRANSACTION: "TRANSACTION"}
TOPIC_TYPES = {"NORMAL": [pb.NORMAL], "FIFO": [pb.FIFO], "DELAY": [pb.DELAY], "TRANSACTION": [pb.TRANSACTION],
               "MIXED": [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]}
# RocketMQ's retry levels after the first two (10s 30s 1m 2m ... 2h): a push consumer's backoff between attempts.
RETRY_BACKOFF_S = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
MAX_RECEIVE_BATCH = 32
DISPATCH_PACE = 0.001                   # s between the loop's dispatch passes (RocketMQ's reput sleeps 1 ms)
PRODUCER = {"kind": "PRODUCER"}         # what a send says of its client (ServerEvents' ClientInfo.kind)
# What a send's put raises for a message the broker or the store refuses, before anything is written: answered
# TOPIC_NOT_FOUND, FORBIDDEN or BAD_REQUEST (SendMessage); the common send leaves such a request to that answer.
PUT_REFUSALS = (MessageIllegalError, TopicNotExistError, NoPermissionError, IllegalNameError, ValueError,
                BrokerRoleError)


class Refusal(Exception):
    """A request answered with a non-OK Status."""

    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code


class ErrorLog:
    """Unexpected errors of RPCs, logged as one line per kind (the RPC and the exception's type) with a count: the
    first of a kind at once, with where it was raised; then at most one line per kind every ``interval`` s, saying
    how many came since (a client repeating a request that fails must not make the log 70 times its traffic, as a
    traceback a request did). The traceback itself goes to DEBUG."""

    def __init__(self, interval: float = 60.0, clock=time.monotonic):
        self.interval = interval
        self.clock = clock
        self.kinds: dict[tuple[str, str], list] = {}      # kind -> [last logged at, count since, total]

    def error(self, name: str, e: BaseException) -> None:
        kind = (name, type(e).__name__)
        now = self.clock()
        entry = self.kinds.get(kind)
        if entry is None:
            if len(self.kinds) >= 1000:                     # a bounded table, whatever the mix of errors
                self.kinds.pop(next(iter(self.kinds)))
            entry = self.kinds[kind] = [None, 0, 0]
        entry[1] += 1
        entry[2] += 1
        if entry[0] is not None and now - entry[0] < self.interval:
            log.debug("%s failed", name, exc_info=e)
            return
        tb = e.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f" at {tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}" if tb is not None else ""
        count = entry[1]
        entry[0], entry[1] = now, 0
        if count == 1:
            log.error("%s failed: %s: %.200s%s (%d so far)", name, kind[1], e, where, entry[2])
        else:
            log.error("%s failed %d times in the last %.0f s: %s: %.200s%s (%d so far)", name, count,
                      self.interval, kind[1], e, where, entry[2])
        log.debug("%s failed", name, exc_info=e)


ERRORS = ErrorLog()


def _internal_error(name: str, e: Exception, resp) -> None:
    """An unexpected error of an RPC: logged (one line per kind, ErrorLog), answered INTERNAL_ERROR with its text
    (the server goes on)."""
    ERRORS.error(name, e)
    resp.ClearField("status")
    _status(resp.status, pb.INTERNAL_ERROR, f"{type(e).__name__}: {e}")


def _status(target, code: int = pb.OK, text: str = "OK") -> None:
    target.code = code
    target.message = text


def topic_type(tc) -> str:
    """The topic's 5.x message type (TopicConfig.message_type: the ``message.type`` attribute in topics.json), NORMAL
    when it has none or one this server has no queue type for (UNSPECIFIED, MIXED)."""
    t = tc.message_type if tc is not None else "NORMAL"
    return t if t in TOPIC_TYPES else "NORMAL"


class Telemetry:
    """One client's Telemetry stream: what it told us, and the queue of commands to write to it."""

    def __init__(self, client_id: str):
        self.client_id = client_id
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.kind = pb.CLIENT_TYPE_UNSPECIFIED
        self.group = ""
        self.topics: set[str] = set()


class MessagingService:
    def __init__(self, server):
        self.server = server
        self.broker = server.broker
        self.config = server.config
        self.events = server.events
        self.pop = server.pop
        self.acl = server.acl
        self.telemetry: dict[str, Telemetry] = {}
        self._rr = itertools.count()
        self._arrivals: dict[str, asyncio.Event] = {}
        self._woken: set[str] = set()       # topics with waiting receives that the next dispatch wakes
        self._dispatch_pending = False
        self._last_dispatch = 0.0           # loop time of the last dispatch pass
        self._seen: dict[str, tuple[float, dict]] = {}      # client id -> (last told ServerEvents, what an RPC said)
        self._topics_ok: set[str] = set()
        self.creations = TopicCreationLimiter(self.config.topic_create_per_second, self.config.topic_create_burst)
        self.refusals = RefusalThrottle(self.config.refusal_per_second, self.config.refusal_burst,
                                        self.config.refusal_delay_ms / 1000, self.config.refusal_max_delay_ms / 1000)
        # SYNC_FLUSH with a group commit: a send's answer waits for the flush that covers it (see _put)
        self._sync = (self.broker.store_config.flush_disk_type == "SYNC_FLUSH"
                      and self.broker.store.group_commit is not None)
        # The common send (one NORMAL message to a topic already checked) answered in one compiled call, the
        # general path (_unary, SendMessage) taking every other request; not with accounts (each request is
        # authorized) nor under SYNC_FLUSH (the answer waits for its flush, _put).
        # SYNC_MASTER: a send's answer waits for a slave's acknowledgement (store.put, in the send executor: _put);
        # a SLAVE refuses sends (its store's puts raise BrokerRoleError, answered FORBIDDEN).
        role = self.broker.store_config.broker_role
        self._replica = role == "SYNC_MASTER"
        self._common = None if self._sync or self._replica or role == "SLAVE" or self.acl is not None else CommonSend(
            self.broker.send_entries, self._topics_ok, [t for t in TOPIC_TYPES if t != "NORMAL"], self.broker.send,
            self._rr, self.broker.store_config.max_message_size, self.events.on_sent, self._wake,
            pb.SendMessageResponse, self._seen, PRODUCER,
            lambda md, context: self._client(dict(md), context, **PRODUCER), self.events.on_rpc, CODE_NAMES,
            lambda e, resp: _internal_error("SendMessage", e, resp), PUT_REFUSALS)

    # -- plumbing ---------------------------------------------------------------------------------------------

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(name, req, resp):
            fn = getattr(self, name)

            if name == "SendMessage" and self._common is not None:
                common = self._common.answer

                async def behavior(request, context):
                    # the common send answered in one call, any other by the general path
                    return common(request, context) or await self._unary(name, fn, request, context, resp)
            else:
                async def behavior(request, context):
                    return await self._unary(name, fn, request, context, resp)
            return grpc.unary_unary_rpc_method_handler(behavior, request_deserializer=req.FromString,
                                                       response_serializer=resp.SerializeToString)

        handlers = {
            "QueryRoute": unary("QueryRoute", pb.QueryRouteRequest, pb.QueryRouteResponse),
            "Heartbeat": unary("Heartbeat", pb.HeartbeatRequest, pb.HeartbeatResponse),
            "SendMessage": unary("SendMessage", pb.SendMessageRequest, pb.SendMessageResponse),
            "QueryAssignment": unary("QueryAssignment", pb.QueryAssignmentRequest, pb.QueryAssignmentResponse),
            "AckMessage": unary("AckMessage", pb.AckMessageRequest, pb.AckMessageResponse),
            "ForwardMessageToDeadLetterQueue": unary("ForwardMessageToDeadLetterQueue",
                                                     pb.ForwardMessageToDeadLetterQueueRequest,
                                                     pb.ForwardMessageToDeadLetterQueueResponse),
            "EndTransaction": unary("EndTransaction", pb.EndTransactionRequest, pb.EndTransactionResponse),
            "NotifyClientTermination": unary("NotifyClientTermination", pb.NotifyClientTerminationRequest,
                                             pb.NotifyClientTerminationResponse),
            "ChangeInvisibleDuration": unary("ChangeInvisibleDuration", pb.ChangeInvisibleDurationRequest,
                                             pb.ChangeInvisibleDurationResponse),
            "UpdateOffset": unary("UpdateOffset", pb.UpdateOffsetRequest, pb.UpdateOffsetResponse),
            "GetOffset": unary("GetOffset", pb.GetOffsetRequest, pb.GetOffsetResponse),
            "QueryOffset": unary("QueryOffset", pb.QueryOffsetRequest, pb.QueryOffsetResponse),
            "ReceiveMessage": grpc.unary_stream_rpc_method_handler(
                self._receive_stream, request_deserializer=pb.ReceiveMessageRequest.FromString,
                response_serializer=pb.ReceiveMessageResponse.SerializeToString),
            "Telemetry": grpc.stream_stream_rpc_method_handler(
                self._telemetry_stream, request_deserializer=pb.TelemetryCommand.FromString,
                response_serializer=pb.TelemetryCommand.SerializeToString),
        }
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    @staticmethod
    def _metadata(context) -> dict:
        return dict(context.invocation_metadata() or ())

    def _client(self, md: dict, context, **info) -> str:
        cid = md.get("x-mq-client-id", "")
        if cid:
            # A client sending thousands of RPCs a second is "heard from" once a second: the console's last-seen
            # needs no more, and the event's lock and peer lookup stay off the per-message path.
            # (What an RPC says of the client, its kind or group, counts as news only when it changed.)
            now = time.monotonic()
            seen = self._seen.get(cid)
            if seen is None or now - seen[0] > 1.0 or (info and seen[1] != info):
                self._seen[cid] = (now, info or (seen[1] if seen else info))
                self.events.on_client(cid, address=context.peer(), version=md.get("x-mq-client-version"),
                                      language=md.get("x-mq-language"), **info)
        return cid

    def forget_client(self, cid: str) -> None:
        self._seen.pop(cid, None)
        self.events.on_client_gone(cid)

    def _account(self, md: dict):
        if self.acl is None:
            return None
        return self.acl.authenticate(md, max_skew_s=self.config.auth_clock_skew_s)

    def _authorize(self, account, **kw) -> None:
        if account is not None:
            self.acl.check(account, **kw)

    async def _unary(self, name, fn, request, context, resp_type):
        t0 = time.perf_counter()
        resp = resp_type()
        md = self._metadata(context)
        try:
            account = self._account(md)
            await fn(request, resp, md, context, account)
            if not resp.status.code:
                _status(resp.status)
        except Refusal as e:
            resp.ClearField("status")
            _status(resp.status, e.code, str(e))
        except AuthError as e:
            resp.ClearField("status")
            _status(resp.status, pb.FORBIDDEN if e.forbidden else pb.UNAUTHORIZED, str(e))
        except Exception as e:                       # never let a request take the server down
            _internal_error(name, e, resp)
        code = resp.status.code
        self.events.on_rpc(name, CODE_NAMES.get(code) or str(code), time.perf_counter() - t0)
        if code != pb.OK:
            await self._refused(context)        # (after the count: the RPC's time is the server's work)
        return resp

    async def _refused(self, context) -> None:
        """A request was refused: its answer waits if its host is past its refusal budget (RefusalThrottle), so
        that a client asking again at once cannot make the loop serve refusals at full speed."""
        delay = self.refusals.delay(context.peer(), context.time_remaining())
        if delay:
            try:
                await asyncio.sleep(delay)
            finally:
                self.refusals.release()

    def _endpoints(self, requested=None) -> "pb.Endpoints":
        ep = pb.Endpoints()
        if requested is not None and requested.addresses:
            ep.CopyFrom(requested)
            return ep
        host = self.server.advertised_host
        ep.scheme = pb.IPv6 if ":" in host else pb.IPv4
        a = ep.addresses.add()
        a.host = host
        a.port = self.server.port
        return ep

    # -- names ------------------------------------------------------------------------------------------------

    def _topic_name(self, resource) -> str:
        """The resource's topic as the broker names it: with its namespace, ``ns%topic`` (NamespaceUtil); a system
        topic is ILLEGAL_TOPIC on every RPC (GrpcValidator.validateTopic). ``_topics_ok`` (which the common send
        reads too) only ever holds names that passed."""
        name = wrap_namespace(resource.resource_namespace, resource.name)
        if name in self._topics_ok:
            return name
        try:
            validate_client_topic(name)
        except (IllegalNameError, ValueError) as e:
            raise Refusal(pb.ILLEGAL_TOPIC, str(e)) from None
        if len(self._topics_ok) < 100_000:
            self._topics_ok.add(name)
        return name

    @staticmethod
    def _group_name(resource) -> str:
        try:
            return validate_client_group(wrap_namespace(resource.resource_namespace, resource.name))
        except (IllegalNameError, ValueError) as e:
            raise Refusal(pb.ILLEGAL_CONSUMER_GROUP, str(e)) from None

    def _topic_config(self, topic: str, create: bool):
        tcm = self.broker.topic_config_manager
        tc = tcm.select_topic_config(topic)
        if tc is None and create and self.broker.config.auto_create_topic_enable \
                and not topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            tc = tcm.create_topic_in_send_message_method(topic, AUTO_CREATE_TOPIC_KEY_TOPIC,
                                                         self.broker.config.client_default_topic_queue_nums)
        if tc is None:
            raise Refusal(pb.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist"
                          + ("" if self.broker.config.auto_create_topic_enable else
                             " (auto_create_topic_enable is off: rmqcore topic create first)"))
        return tc

    async def _topic_config_or_create(self, topic: str, context):
        """_topic_config(create=True) for a QueryRoute or a send. A topic auto-created here is counted against the
        client's creation budget (TopicCreationLimiter) and answered once topics.json holds it, as RocketMQ
        persists a created topic before answering; the file is written by the topic config manager's writer
        thread, for every creation since its last write, so the loop never writes it."""
        tcm = self.broker.topic_config_manager
        tc = tcm.select_topic_config(topic)
        if tc is not None:
            return tc
        if self.broker.config.auto_create_topic_enable \
                and not topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            refusal = self.creations.take(context.peer())
            if refusal is not None:
                raise Refusal(pb.TOO_MANY_REQUESTS, f"topic {topic!r} not created: {refusal}")
        tc = self._topic_config(topic, create=True)
        ticket = tcm.last_created
        if not tcm.persisted(ticket):
            loop = asyncio.get_running_loop()
            written = loop.create_future()

            def done(error):
                # the writer's thread (or this one, when the write was already done); a failed write was logged by
                # the writer, which tries again: the topic exists in memory, so the answer is the same
                loop.call_soon_threadsafe(lambda: written.done() or written.set_result(error))
            tcm.when_persisted(ticket, done)
            await written
        return tc

    def _group_config(self, group: str):
        try:
            gc = self.broker.subscription_group_manager.find_subscription_group_config(group)
        except BrokerError as e:
            raise Refusal(pb.CONSUMER_GROUP_NOT_FOUND, str(e)) from None
        if gc is None:
            raise Refusal(pb.CONSUMER_GROUP_NOT_FOUND, f"consumer group {group!r} does not exist "
                          "(auto_create_subscription_group is off)")
        return gc

    @staticmethod
    def group_is_fifo(gc) -> bool:
        return gc.consume_message_orderly

    @staticmethod
    def max_attempts(gc) -> int:
        return max(1, gc.retry_max_times + 1)

    # -- route ------------------------------------------------------------------------------------------------

    def _queues(self, tc, requested_endpoints=None):
        broker = pb.Broker(name=self.broker.config.broker_name, id=0,
                           endpoints=self._endpoints(requested_endpoints))
        types = TOPIC_TYPES[topic_type(tc)]
        out = []
        for qid in range(max(tc.read_queue_nums, tc.write_queue_nums)):
            r = qid < tc.read_queue_nums and is_readable(tc.perm)
            w = qid < tc.write_queue_nums and is_writeable(tc.perm)
            perm = pb.READ_WRITE if r and w else pb.READ if r else pb.WRITE if w else pb.NONE
            mq = pb.MessageQueue(id=qid, permission=perm, broker=broker, accept_message_types=types)
            out.append(mq)
        return out

    async def QueryRoute(self, req, resp, md, context, account):
        self._client(md, context)
        topic = self._topic_name(req.topic)
        if account is not None:
            # before anything is created: a route is for publishing or subscribing, so either permission will do
            # (RocketMQ's ACL asks Permission.ANY of a QueryRoute's topic)
            try:
                self.acl.check(account, topic=topic, need=PUB)
            except AuthError:
                try:
                    self.acl.check(account, topic=topic, need=SUB)
                except AuthError:
                    raise AuthError(True, f"access key {account.access_key!r} has neither PUB nor SUB permission "
                                          f"on topic {topic!r}") from None
        tc = await self._topic_config_or_create(topic, context)
        for mq in self._queues(tc, req.endpoints):
            mq.topic.CopyFrom(req.topic)
            resp.message_queues.append(mq)

    async def QueryAssignment(self, req, resp, md, context, account):
        self._client(md, context)
        topic = self._topic_name(req.topic)
        group = self._group_name(req.group)
        self._authorize(account, topic=topic, group=group, need=SUB)
        tc = self._topic_config(topic, create=False)
        self._group_config(group)
        if not is_readable(tc.perm):
            return                              # no readable queue: no assignment (the proxy's empty answer)
        # Pop from every queue of the broker: one assignment per broker, queue id -1 (the proxy's "all queues").
        mq = pb.MessageQueue(id=-1, permission=pb.READ_WRITE, accept_message_types=TOPIC_TYPES[topic_type(tc)])
        mq.topic.CopyFrom(req.topic)
        mq.broker.name = self.broker.config.broker_name
        mq.broker.endpoints.CopyFrom(self._endpoints(req.endpoints))
        resp.assignments.add().message_queue.CopyFrom(mq)

    # -- clients ----------------------------------------------------------------------------------------------

    async def Heartbeat(self, req, resp, md, context, account):
        kind = pb.ClientType.Name(req.client_type) if req.client_type in pb.ClientType.values() else "UNKNOWN"
        group = ""
        if req.HasField("group") and req.group.name:
            group = self._group_name(req.group)
            # the proxy authorizes a consumer's heartbeat as a SUB of its group (before anything is said of it)
            self._authorize(account, group=group)
            self._group_config(group)
        if not md.get("x-mq-client-id"):
            raise Refusal(pb.CLIENT_ID_REQUIRED, "x-mq-client-id header is missing")
        self._client(md, context, kind=kind, group=group)

    async def NotifyClientTermination(self, req, resp, md, context, account):
        cid = md.get("x-mq-client-id", "")
        if not cid:
            raise Refusal(pb.CLIENT_ID_REQUIRED, "x-mq-client-id header is missing")
        if req.HasField("group") and req.group.name:
            self._authorize(account, group=self._group_name(req.group))
        self.forget_client(cid)

    def _settings_for(self, settings, tel: Telemetry, account) -> "pb.Settings":
        """The server's answer to a client's settings. What the client names is checked as its RPCs would be (the
        proxy authorizes a Telemetry settings command: PUB on each topic a producer publishes to, which also makes
        it one the transaction check asks, SUB on a consumer's group and its topics), before anything is kept."""
        out = pb.Settings()
        out.CopyFrom(settings)
        cfg = self.config
        if settings.WhichOneof("pub_sub") == "publishing" or settings.client_type == pb.PRODUCER:
            # SendMessageActivity's defaults: 3 attempts, 10 ms .. 1 s backoff; the body limit is the store's.
            out.backoff_policy.max_attempts = 3
            eb = out.backoff_policy.exponential_backoff
            eb.initial.nanos = 10_000_000
            eb.max.seconds = 1
            eb.multiplier = 2.0
            out.publishing.max_body_size = self.broker.store_config.max_message_size
            out.publishing.validate_message_type = True
            topics = {self._topic_name(t) for t in settings.publishing.topics}
            for topic in topics:
                self._authorize(account, topic=topic, need=PUB)
            tel.topics = topics
        else:
            group = self._group_name(settings.subscription.group)
            self._authorize(account, group=group)
            for entry in settings.subscription.subscriptions:
                self._authorize(account, topic=self._topic_name(entry.topic), need=SUB)
            gc = self._group_config(group)
            tel.group = group
            fifo = self.group_is_fifo(gc)
            out.subscription.fifo = fifo
            out.subscription.receive_batch_size = MAX_RECEIVE_BATCH
            lp = settings.subscription.long_polling_timeout.seconds if settings.subscription.HasField(
                "long_polling_timeout") else cfg.max_long_polling_ms // 1000
            lp = min(max(lp * 1000, cfg.min_long_polling_ms), cfg.max_long_polling_ms)
            out.subscription.long_polling_timeout.seconds = lp // 1000
            out.backoff_policy.max_attempts = self.max_attempts(gc)
            if fifo:
                eb = out.backoff_policy.exponential_backoff
                eb.initial.seconds = 1
                eb.max.seconds = 60
                eb.multiplier = 2.0
            else:
                cb = out.backoff_policy.customized_backoff
                for s in RETRY_BACKOFF_S[:max(1, min(len(RETRY_BACKOFF_S), gc.retry_max_times))]:
                    cb.next.add(seconds=min(s, cfg.max_backoff_s))
        out.metric.on = False
        return out

    async def _telemetry_stream(self, request_iterator, context):
        md = self._metadata(context)
        cid = md.get("x-mq-client-id", "")
        t0 = time.perf_counter()
        code = "OK"
        tel = Telemetry(cid)
        try:
            account = self._account(md)
        except AuthError as e:
            cmd = pb.TelemetryCommand()
            _status(cmd.status, pb.FORBIDDEN if e.forbidden else pb.UNAUTHORIZED, str(e))
            yield cmd
            self.events.on_rpc("Telemetry", pb.Code.Name(cmd.status.code), time.perf_counter() - t0)
            return
        if cid:
            self.telemetry[cid] = tel
        done = asyncio.Event()

        async def read():
            try:
                async for cmd in request_iterator:
                    which = cmd.WhichOneof("command")
                    if which == "settings":
                        reply = pb.TelemetryCommand()
                        try:
                            reply.settings.CopyFrom(self._settings_for(cmd.settings, tel, account))
                            _status(reply.status)
                            kind = pb.ClientType.Name(cmd.settings.client_type) \
                                if cmd.settings.client_type in pb.ClientType.values() else "UNKNOWN"
                            tel.kind = cmd.settings.client_type
                            if cid:
                                self.events.on_client(cid, kind=kind, group=tel.group, address=context.peer(),
                                                      version=md.get("x-mq-client-version"), telemetry=True,
                                                      topics=_settings_topics(cmd.settings))
                        except Refusal as e:
                            _status(reply.status, e.code, str(e))
                        except AuthError as e:
                            reply.ClearField("settings")
                            _status(reply.status, pb.FORBIDDEN if e.forbidden else pb.UNAUTHORIZED, str(e))
                        await tel.outbox.put(reply)
                    # thread stack traces and verify results are answers to commands this server never sends
            except (asyncio.CancelledError, grpc.RpcError):
                pass
            except Exception as e:
                ERRORS.error("Telemetry", e)        # (one line per kind, as every RPC's unexpected error)
            finally:
                done.set()
                await tel.outbox.put(None)

        reader = asyncio.ensure_future(read())
        try:
            while True:
                cmd = await tel.outbox.get()
                if cmd is None:
                    break
                yield cmd
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        finally:
            reader.cancel()
            if self.telemetry.get(cid) is tel:
                del self.telemetry[cid]
                # The stream ended (the client closed it, or its channel closed: a killed process): the client is
                # gone now, from the console, its groups and /metrics alike, not at the heartbeat expiry. A client
                # that goes on sending RPCs is heard from again at its next one.
                self.forget_client(cid)
            self.events.on_rpc("Telemetry", code, time.perf_counter() - t0)

    # -- send -------------------------------------------------------------------------------------------------

    def _queue_for(self, tc, message_group: str | None) -> int:
        n = tc.write_queue_nums
        if n <= 0:
            raise Refusal(pb.FORBIDDEN, f"topic {tc.topic_name!r} has no write queue")
        if message_group:
            # SendMessageQueueSelector: a message group always lands on the same queue (its hash)
            return abs(java_hash_code(message_group)) % n
        return next(self._rr) % n

    def _wake(self, topic: str) -> None:
        """After a put to ``topic`` (or an ack that may free a FIFO queue): one dispatch pass in the loop for
        every send until it runs, then the woken topics' waiting receives look (the store's dispatcher thread only
        sweeps behind the loop, see drive_externally). The pass runs at once after a quiet millisecond, else a
        millisecond after the last one (RocketMQ's reput pace): under load a pass takes the sends of a millisecond
        (at ~30 us a pass in the loop, one per send cost more than the sends' own work)."""
        if topic in self._arrivals:
            self._woken.add(topic)
        if not self._dispatch_pending:
            self._dispatch_pending = True
            loop = asyncio.get_running_loop()
            wait = self._last_dispatch + DISPATCH_PACE - loop.time()
            if wait > 0:
                loop.call_later(wait, self._dispatch)
            else:
                loop.call_soon(self._dispatch)

    def _dispatch(self) -> None:
        self._dispatch_pending = False
        self._last_dispatch = asyncio.get_running_loop().time()
        reput = self.broker.store.reput
        n = reput.try_reput() if reput is not None else 0      # a failed pass: reported by the store, retried
        if n < 0:                # the thread's sweep is running: look again in a moment
            self._dispatch_pending = True
            asyncio.get_running_loop().call_later(0.001, self._dispatch)
            return
        woken, self._woken = self._woken, set()
        for topic in woken:
            ev = self._arrivals.get(topic)
            if ev is not None:
                ev.set()

    async def _store(self, fn, *args):
        if self.broker.store_config.flush_disk_type == "SYNC_FLUSH":
            return await asyncio.get_running_loop().run_in_executor(self.server.executor, fn, *args)
        return fn(*args)

    async def _put(self, fn, arg):
        """broker.send / send_batch. Under SYNC_FLUSH the messages go with WAIT "false" (the append returns at
        once and asks for a flush) and the answer waits in the loop for the group commit to cover the last
        record: concurrent sends share flushes without a thread each."""
        store = self.broker.store
        if self._replica:
            # The store's put waits for the flush (SYNC_FLUSH) and then for a slave (ha_service.ReplicaPuts): in
            # the send executor, so the loop goes on meanwhile.
            return await asyncio.get_running_loop().run_in_executor(self.server.executor, fn, arg)
        if not self._sync:
            return fn(arg)
        for m in (arg if isinstance(arg, list) else (arg,)):
            m.properties["WAIT"] = "false"
        result = fn(arg)
        last = result[-1] if isinstance(result, list) else result
        if last.status is not PutStatus.PUT_OK:
            return result
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        store.group_commit.when_flushed(last.commitlog_offset + last.wrote_bytes, store._sync_timeout,
                                        lambda ok: done.done() or done.set_result(ok), loop)
        if await done:
            return result
        if isinstance(result, list):
            return [r.replace_status(PutStatus.FLUSH_DISK_TIMEOUT) if r.ok else r for r in result]
        return result.replace_status(PutStatus.FLUSH_DISK_TIMEOUT)

    async def SendMessage(self, req, resp, md, context, account):
        self._client(md, context, **PRODUCER)
        messages = req.messages
        if not messages:
            raise Refusal(pb.BAD_REQUEST, "no message in the request")
        first = messages[0]
        resource = first.topic
        topic = self._topic_name(resource)
        many = len(messages) > 1
        if many:
            name, ns = resource.name, resource.resource_namespace
            for m in messages:
                if m.topic.name != name or m.topic.resource_namespace != ns:
                    raise Refusal(pb.BAD_REQUEST, "messages of one request must have the same topic")
        if account is not None:
            self.acl.check(account, topic=topic, need=PUB)
        try:
            # the bodies' checks, then each message converted (compiled; converter.to_store_messages is the reference)
            limit = self.broker.store_config.max_message_size
            if any(m.body[:2] == GZIP_MAGIC and m.system_properties.body_encoding == pb.GZIP for m in messages):
                # a gzip file is inflated (up to max_message_size a request): in the send pool, so that the loop
                # goes on answering everyone else meanwhile (zlib lets go of the GIL while it inflates)
                converted = await asyncio.get_running_loop().run_in_executor(
                    self.server.executor, to_store_messages, messages, limit)
            else:
                converted = to_store_messages(messages, limit)
        except InvalidMessage as e:
            raise Refusal(e.code, str(e)) from None
        if resource.resource_namespace:
            for m, mtype in converted:
                m.topic = topic
                if mtype == pb.TRANSACTION:
                    m.properties["PGROUP"] = topic
        now = None
        for m, _t in converted:
            deliver = m.properties.get("TIMER_DELIVER_MS")
            if deliver is not None:
                max_delay = self.broker.store_config.timer_max_delay_sec * 1000
                now = now or time.time_ns() // 1_000_000
                if int(deliver) - now > max_delay:
                    # The protocol's delivery time is a Timestamp (seconds); the Python client fills its seconds
                    # from Message.delivery_timestamp, so milliseconds given there land ~1000x too far ahead.
                    hint = ("; the delivery time is seconds since the epoch (the Python client's "
                            "delivery_timestamp): milliseconds were given"
                            if int(deliver) // 1000 - now <= max_delay else "")
                    raise Refusal(pb.ILLEGAL_DELIVERY_TIME, f"delivery timestamp {int(deliver) // 1000} s since "
                                  f"the epoch is more than timer_max_delay_sec ({max_delay // 1000} s) ahead{hint}")
        tc = await self._topic_config_or_create(topic, context)
        if not is_writeable(tc.perm):
            raise Refusal(pb.FORBIDDEN, f"topic {topic!r} is not writeable (perm {tc.perm})")
        if self.config.enable_topic_message_type_check:
            accepted = TOPIC_TYPES[topic_type(tc)]
            for _msg, mtype in converted:
                if mtype not in accepted:
                    raise Refusal(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                  f"topic {topic!r} is {topic_type(tc)}, the message is "
                                  f"{MESSAGE_TYPE_NAMES.get(mtype, mtype)}")
        sp = first.system_properties
        queue_id = self._queue_for(tc, sp.message_group if sp.HasField("message_group") else None)
        try:
            if not many:
                msg = converted[0][0]
                msg.queue_id = queue_id
                results = [self.broker.send(msg) if not (self._sync or self._replica)
                           else await self._put(self.broker.send, msg)]
            elif all(t in (pb.NORMAL, pb.FIFO) for _m, t in converted):
                msgs = [m for m, _t in converted]
                for m in msgs:
                    m.queue_id = queue_id
                results = await self._put(self.broker.send_batch, msgs)
            else:
                results = []
                for (m, mtype), src in zip(converted, messages):
                    sp = src.system_properties
                    m.queue_id = self._queue_for(tc, sp.message_group if sp.HasField("message_group") else None)
                    results.append(await self._put(self.broker.send, m))
        except PUT_REFUSALS as e:
            raise Refusal(pb.TOPIC_NOT_FOUND if isinstance(e, TopicNotExistError) else
                          pb.FORBIDDEN if isinstance(e, (NoPermissionError, BrokerRoleError)) else pb.BAD_REQUEST,
                          str(e)) from None
        sizes, worst, text = fill_send_entries(resp, messages, converted, results)
        if sizes:
            self.events.on_messages_in(topic, sizes, MESSAGE_TYPE_NAMES.get(converted[0][1], "NORMAL"))
            self._wake(topic)
        _status(resp.status, worst, text)

    # -- transactions -----------------------------------------------------------------------------------------

    @staticmethod
    def _commitlog_offset(transaction_id: str) -> int:
        # A transaction id is the half message's offset message id: store host (8 or 32 hex) + offset (16 hex).
        tid = transaction_id.strip()
        if len(tid) not in (32, 56) or any(c not in "0123456789ABCDEFabcdef" for c in tid):
            raise Refusal(pb.INVALID_TRANSACTION_ID, f"transaction id {transaction_id[:64]!r} is not one this "
                                                     "server issued")
        return int(tid[-16:], 16)

    async def EndTransaction(self, req, resp, md, context, account):
        self._client(md, context)
        topic = self._topic_name(req.topic)
        self._authorize(account, topic=topic, need=PUB)
        offset = self._commitlog_offset(req.transaction_id)
        if req.resolution not in (pb.COMMIT, pb.ROLLBACK):
            raise Refusal(pb.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
        commit = req.resolution == pb.COMMIT
        from ..broker.transaction import TransactionError
        try:
            result = await self._store(self.broker.end_transaction, offset, topic, commit)
        except TransactionError as e:
            raise Refusal(pb.INVALID_TRANSACTION_ID, str(e)) from None
        except (IllegalNameError, ValueError) as e:
            raise Refusal(pb.INVALID_TRANSACTION_ID, str(e)) from None
        if commit and result is not None and result.status not in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT):
            raise Refusal(pb.INTERNAL_SERVER_ERROR, f"commit failed: {result.status.name}")
        self.events.on_transaction_end(topic, commit)
        if commit:
            self._wake(topic)

    def transaction_check(self, half):
        """The broker's check service (its thread) asks about an open half. As RocketMQ 5: the broker sends the
        check to a producer channel of the half's PGROUP (AbstractTransactionalMessageCheckListener.sendCheckMessage,
        ProducerManager.getAvailableChannel), and the proxy registers a 5.x producer under each topic it publishes
        to as its producer group (ClientActivity: "use topic name as producer group") and ends its transactions with
        the topic as producer group (EndTransactionActivity). So a producer is asked only when it publishes to a
        topic named as the half's PGROUP, whose EndTransaction the broker accepts; a 4.x producer's half (PGROUP its
        own group) has no gRPC producer to ask. Returns None ("unknown": the answer comes back later as
        EndTransaction with source SERVER_CHECK, the Java check being asynchronous too) or NO_PRODUCER."""
        group = half.properties.get(PROPERTY_PRODUCER_GROUP, "")
        # a copy of the loop's table (one C-level copy under the GIL); the loop looks again before it sends
        if not self._check_targets(group, tuple(self.telemetry.values())):
            return NO_PRODUCER
        topic = half.properties.get(PROPERTY_REAL_TOPIC, "")
        cmd = pb.TelemetryCommand()
        rc = cmd.recover_orphaned_transaction_command
        ns, _, bare = topic.partition("%") if "%" in topic else ("", "", topic)
        try:
            rc.message.CopyFrom(to_proto_message(half, topic=bare,
                                                 body_limit=self.broker.store_config.max_message_size))
        except DecompressionError as e:          # no producer can judge a body it is not shown: "unknown"
            log.warning("transaction check of %s not sent: %s", half.msg_id, e)
            return None
        rc.message.topic.resource_namespace = ns
        rc.message.system_properties.message_type = pb.TRANSACTION
        rc.transaction_id = half.msg_id
        self.server.loop.call_soon_threadsafe(self._send_check, group, cmd)
        return None

    @staticmethod
    def _check_targets(group: str, tels) -> list:
        """The producers registered under ``group``: those publishing to a topic of that name (see above)."""
        return [t for t in tels if t.kind == pb.PRODUCER and group in t.topics]

    def _send_check(self, group: str, cmd) -> None:
        producers = self._check_targets(group, self.telemetry.values())
        if producers:
            producers[next(self._rr) % len(producers)].outbox.put_nowait(cmd)

    # -- receive ----------------------------------------------------------------------------------------------

    async def _receive_stream(self, req, context):
        t0 = time.perf_counter()
        md = self._metadata(context)
        code = pb.OK
        try:
            account = self._account(md)
            async for r in self._receive(req, md, context, account):
                if r.HasField("status"):
                    code = r.status.code
                yield r
        except Refusal as e:
            code = e.code
            await self._refused(context)
            yield self._receive_status(e.code, str(e))
        except AuthError as e:
            code = pb.FORBIDDEN if e.forbidden else pb.UNAUTHORIZED
            await self._refused(context)
            yield self._receive_status(code, str(e))
        except asyncio.CancelledError:
            self.events.on_rpc("ReceiveMessage", "CANCELLED", time.perf_counter() - t0)
            raise
        except Exception as e:
            ERRORS.error("ReceiveMessage", e)
            code = pb.INTERNAL_ERROR
            yield self._receive_status(code, f"{type(e).__name__}: {e}")
        self.events.on_rpc("ReceiveMessage", pb.Code.Name(code), time.perf_counter() - t0)

    @staticmethod
    def _receive_status(code, text) -> "pb.ReceiveMessageResponse":
        r = pb.ReceiveMessageResponse()
        _status(r.status, code, text)
        return r

    async def _receive(self, req, md, context, account):
        cfg = self.config
        group = self._group_name(req.group)
        topic = self._topic_name(req.message_queue.topic)
        self._authorize(account, topic=topic, group=group, need=SUB)
        self._client(md, context, group=group)
        gc = self._group_config(group)
        if not gc.consume_enable:
            raise Refusal(pb.FORBIDDEN, f"consumer group {group!r} may not consume (consumeEnable false)")
        tc = self._topic_config(topic, create=False)
        if not is_readable(tc.perm) or not is_readable(self.broker.config.broker_permission):
            raise Refusal(pb.FORBIDDEN, f"topic {topic!r} is not readable")
        batch = req.batch_size
        if batch <= 0:
            raise Refusal(pb.BAD_REQUEST, f"batch_size must be > 0, got {batch}")
        batch = min(batch, MAX_RECEIVE_BATCH)
        if req.HasField("invisible_duration"):
            inv = req.invisible_duration.seconds * 1000 + req.invisible_duration.nanos // 1_000_000
        else:
            inv = cfg.default_invisible_ms
        if not cfg.min_invisible_ms <= inv <= cfg.max_invisible_ms:
            raise Refusal(pb.ILLEGAL_INVISIBLE_TIME, f"invisible duration {inv} ms is outside "
                          f"[{cfg.min_invisible_ms}, {cfg.max_invisible_ms}] ms")
        if req.HasField("long_polling_timeout"):
            lp = req.long_polling_timeout.seconds * 1000 + req.long_polling_timeout.nanos // 1_000_000
        else:
            lp = cfg.max_long_polling_ms
        lp = min(max(lp, cfg.min_long_polling_ms), cfg.max_long_polling_ms)
        remaining = context.time_remaining()
        if remaining is not None:
            # answer before the client's deadline, with room for the answer to travel
            lp = max(0, min(lp, int(remaining * 1000) - cfg.poll_margin_ms))
        fe = req.filter_expression
        tags = matcher = None
        try:
            if fe.type == pb.SQL:
                matcher = compile_filter(fe.expression)
            elif fe.expression.strip() not in ("", "*"):
                tags = fe.expression
        except FilterError as e:
            raise Refusal(pb.ILLEGAL_FILTER_EXPRESSION, str(e)) from None
        fifo = self.group_is_fifo(gc)
        max_attempts = self.max_attempts(gc)
        queue_ids = list(range(tc.read_queue_nums))
        deadline = time.monotonic() + lp / 1000
        ev = self._arrivals.setdefault(topic, asyncio.Event())
        while True:
            ev.clear()
            popped = self.pop.pop(group, topic, queue_ids, batch, inv, fifo=fifo, max_attempts=max_attempts,
                                  tags=tags, matcher=matcher)
            if popped:
                deliveries = _Deliveries(self, popped, group, topic, req.message_queue.topic.name, inv, fifo)
                item = deliveries.next()
                if item is not None:        # (none of them deliverable: look again, as for an empty pop)
                    break
            left = deadline - time.monotonic()
            if left <= 0 or context.cancelled() or self.server.stopping:
                yield self._receive_status(pb.MESSAGE_NOT_FOUND, "no new message")
                yield self._delivery_stamp()
                return
            try:
                # woken by a send to the topic; otherwise look again soon (timer and delay deliveries, expiries)
                await asyncio.wait_for(ev.wait(), timeout=min(left, cfg.poll_interval_ms / 1000))
            except asyncio.TimeoutError:
                pass
        nbytes = sent = 0
        try:
            yield self._receive_status(pb.OK, "OK")
            while item is not None:
                r = pb.ReceiveMessageResponse()
                r.message.CopyFrom(item[1])
                r.message.topic.resource_namespace = req.message_queue.topic.resource_namespace
                nbytes += len(r.message.body)
                yield r
                sent += 1
                item = None
                item = deliveries.next()
        except BaseException:
            # The client went away (or the write failed) before it had them all: what it did not get is visible
            # again at once instead of after its invisible time (the proxy nacks a message it could not write).
            self.pop.release(group, topic, ([item[0].handle] if item is not None else []) + deliveries.untaken())
            raise
        self.events.on_messages_out(topic, group, sent, nbytes)
        # The push consumer counts a receive as done at this response (ReceiveMessageResponseStreamWriter).
        yield self._delivery_stamp()

    @staticmethod
    def _delivery_stamp():
        r = pb.ReceiveMessageResponse()
        ms = time.time_ns() // 1_000_000
        r.delivery_timestamp.seconds = ms // 1000
        r.delivery_timestamp.nanos = (ms % 1000) * 1_000_000
        return r

    # -- ack, invisible time, DLQ -----------------------------------------------------------------------------

    def _consumer_call(self, req, md, context, account):
        group = self._group_name(req.group)
        topic = self._topic_name(req.topic)
        self._authorize(account, topic=topic, group=group, need=SUB)
        self._client(md, context, group=group)
        return group, topic

    def _handle(self, text: str, group: str, topic: str) -> ReceiptHandle:
        try:
            return ReceiptHandle.decode(text, self.pop.handle_key, group, topic)
        except ValueError as e:
            raise Refusal(pb.INVALID_RECEIPT_HANDLE, str(e)) from None

    async def AckMessage(self, req, resp, md, context, account):
        group, topic = self._consumer_call(req, md, context, account)
        if not req.entries:
            raise Refusal(pb.BAD_REQUEST, "no entry to ack")
        failed = acked = 0
        for entry in req.entries:
            out = resp.entries.add(message_id=entry.message_id, receipt_handle=entry.receipt_handle)
            try:
                error = self.pop.ack(group, topic, self._handle(entry.receipt_handle, group, topic))
            except Refusal as e:
                _status(out.status, e.code, str(e))
                failed += 1
                continue
            if error is None:
                _status(out.status)
                acked += 1
            else:
                _status(out.status, pb.INVALID_RECEIPT_HANDLE, error)
                failed += 1
        if acked:
            self._wake(topic)           # a FIFO queue held by this batch may be free now
        if failed == 0:
            _status(resp.status)
        elif len(req.entries) == 1:
            resp.status.CopyFrom(resp.entries[0].status)
        else:
            _status(resp.status, pb.MULTIPLE_RESULTS, f"{failed} of {len(req.entries)} entries failed")

    async def ChangeInvisibleDuration(self, req, resp, md, context, account):
        group, topic = self._consumer_call(req, md, context, account)
        handle = self._handle(req.receipt_handle, group, topic)
        inv = req.invisible_duration.seconds * 1000 + req.invisible_duration.nanos // 1_000_000
        cfg = self.config
        # the proxy lets a consumer shorten the time down to 0 (a nack); never past the max
        if not 0 <= inv <= cfg.max_invisible_ms:
            raise Refusal(pb.ILLEGAL_INVISIBLE_TIME, f"invisible duration {inv} ms is outside [0, "
                          f"{cfg.max_invisible_ms}] ms")
        new, error = self.pop.change_invisible(group, topic, handle, inv)
        if error is not None:
            raise Refusal(pb.INVALID_RECEIPT_HANDLE, error)
        resp.receipt_handle = new.encode(self.pop.handle_key, group, topic)

    async def ForwardMessageToDeadLetterQueue(self, req, resp, md, context, account):
        group, topic = self._consumer_call(req, md, context, account)
        error = self.pop.forward_to_dlq(group, topic, self._handle(req.receipt_handle, group, topic))
        if error is not None:
            raise Refusal(pb.INVALID_RECEIPT_HANDLE, error)

    # -- offsets ----------------------------------------------------------------------------------------------

    def _offset_queue(self, mq):
        topic = self._topic_name(mq.topic)
        tc = self._topic_config(topic, create=False)
        if not 0 <= mq.id < tc.read_queue_nums:
            raise Refusal(pb.BAD_REQUEST, f"queue id {mq.id} is not one of topic {topic!r}'s "
                                          f"{tc.read_queue_nums} read queues")
        return topic, mq.id

    async def UpdateOffset(self, req, resp, md, context, account):
        group = self._group_name(req.group)
        topic, qid = self._offset_queue(req.message_queue)
        self._authorize(account, topic=topic, group=group, need=SUB)
        try:
            self.broker.commit_offset(group, topic, qid, req.offset)
        except SubscriptionGroupNotExistError as e:
            raise Refusal(pb.CONSUMER_GROUP_NOT_FOUND, str(e)) from None
        except BrokerError as e:
            raise Refusal(pb.ILLEGAL_OFFSET, str(e)) from None

    async def GetOffset(self, req, resp, md, context, account):
        group = self._group_name(req.group)
        topic, qid = self._offset_queue(req.message_queue)
        self._authorize(account, topic=topic, group=group, need=SUB)
        off = self.broker.query_offset(group, topic, qid)
        if off < 0:
            raise Refusal(pb.OFFSET_NOT_FOUND, f"group {group!r} has no offset in {topic}/{qid}")
        resp.offset = off

    async def QueryOffset(self, req, resp, md, context, account):
        topic, qid = self._offset_queue(req.message_queue)
        self._authorize(account, topic=topic, need=SUB)
        store = self.broker.store
        policy = req.query_offset_policy
        if policy == pb.BEGINNING:
            resp.offset = max(0, store.min_offset(topic, qid))
        elif policy == pb.END:
            resp.offset = max(0, store.max_offset(topic, qid))
        else:
            ts = req.timestamp.seconds * 1000 + req.timestamp.nanos // 1_000_000
            if not JAVA_LONG_MIN <= ts <= JAVA_LONG_MAX:
                # a request the proxy could not read (its Timestamps.toMillis refuses it): not the server's error
                raise Refusal(pb.BAD_REQUEST, f"timestamp is {ts} ms, outside a Java long [{JAVA_LONG_MIN}, "
                                              f"{JAVA_LONG_MAX}]")
            resp.offset = max(0, store.offset_by_time(topic, qid, ts))


class _Deliveries:
    """The messages of one pop as their consumer gets them, built one at a time as the answer is written (a batch
    of 32 inflated bodies is never held at once).

    A compressed body is inflated (to_proto_message); one that does not inflate (corrupt, past max_message_size,
    or its compressor's package not installed) is never handed out as something else: it stays in flight, comes
    back after its invisible time as any message its consumer did not ack, and past the group's max attempts goes
    to the DLQ (the end RocketMQ 5's consumers give a message whose body they cannot read), where ``rmqcore get``
    shows it as stored. For a FIFO group the messages behind it in its queue are released: they wait for it."""

    def __init__(self, service: "MessagingService", popped: list, group: str, topic: str, topic_name: str,
                 inv: int, fifo: bool):
        self.service, self.popped, self.group, self.topic = service, popped, group, topic
        self.topic_name, self.inv, self.fifo = topic_name, inv, fifo
        self.limit = service.broker.store_config.max_message_size
        self.key = service.pop.handle_key
        self.i = 0
        self.held: set[int] = set()             # FIFO queues with a message left in flight
        self.behind: list = []

    def next(self):
        """(Popped, the protocol Message) of the next deliverable message; None when there is none left."""
        while self.i < len(self.popped):
            p = self.popped[self.i]
            self.i += 1
            if p.handle.queue_id in self.held:
                self.behind.append(p.handle)
                continue
            try:
                return p, to_proto_message(p.message, topic=self.topic_name,
                                           receipt_handle=p.handle.encode(self.key, self.group, self.topic),
                                           invisible_ms=self.inv, attempt=p.attempt, body_limit=self.limit)
            except DecompressionError as e:
                m = p.message
                log.warning("message %s of %s (queue %d, offset %d) not delivered to %s, attempt %d: %s",
                            m.uniq_key or m.msg_id, m.topic, m.queue_id, m.queue_offset, self.group, p.attempt, e)
                if self.fifo:
                    self.held.add(p.handle.queue_id)
        if self.behind:
            self.service.pop.release(self.group, self.topic, self.behind)
            self.behind = []
        return None

    def untaken(self) -> list:
        """The handles of the messages not looked at yet (and of FIFO ones held behind), to release."""
        return self.behind + [p.handle for p in self.popped[self.i:]]


def wrap_namespace(namespace: str, name: str) -> str:
    """NamespaceUtil.wrapNamespace: ``ns%name``; a retry or DLQ name keeps its prefix in front
    (``%RETRY%ns%group``); a name already in the namespace, or no namespace, is left as it is."""
    if not namespace or name.startswith(namespace + "%"):
        return name
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if name.startswith(prefix):
            rest = name[len(prefix):]
            return name if rest.startswith(namespace + "%") else f"{prefix}{namespace}%{rest}"
    return f"{namespace}%{name}"


def _settings_topics(settings) -> tuple:
    """The topics a client's Telemetry settings name: a producer's publishing topics, a consumer's subscriptions
    (what the console's connection lists show per topic)."""
    if settings.WhichOneof("pub_sub") == "publishing":
        entries = [t for t in settings.publishing.topics]
    else:
        entries = [s.topic for s in settings.subscription.subscriptions]
    return tuple(sorted({wrap_namespace(t.resource_namespace, t.name) for t in entries}))
