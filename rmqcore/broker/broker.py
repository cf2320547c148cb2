"""Broker: RocketMQ's broker around one MessageStore, without the network — the send, pull, offset and send-back
paths of SendMessageProcessor, PullMessageProcessor and ConsumerManageProcessor, over the config managers.

    with Broker.open("/data/store", BrokerConfig(), store_config=StoreConfig()) as broker:
        broker.send(Message("orders", b"...", queue_id=0))
        r = broker.pull("billing", "orders", 0, offset=broker.query_offset("billing", "orders", 0))
        broker.commit_offset("billing", "orders", 0, r.next_begin_offset)

Open takes the store's lock first (so two brokers never share a directory), then loads ``config/topics.json``,
``subscriptionGroup.json`` and ``consumerOffset.json``; a file that cannot be read (nor its .bak) closes the store
again and raises ConfigFileError. ``delayOffset.json`` and ``consumerFilter.json`` belong to the schedule and
filter services and are left as they are. Consumer offsets are persisted every ``flush_consumer_offset_interval``
ms (when they changed) and at close; topics and groups on every change and at close (a disabled group, which RocketMQ
never persists, on the offsets' timer).
"""
from __future__ import annotations

import logging
import random
import threading
from typing import TYPE_CHECKING

from ..config import StoreConfig
from ..flush import PeriodicService
from ..status import PutStatus
from ._send import Sender, SendEntry
from .broker_config import BrokerConfig
from .consumer_offset_manager import ConsumerOffsetManager
from .errors import (IllegalNameError, InvalidConfigError, MessageNotFoundError, NoPermissionError,
                     OffsetIllegalError, PutFailedError, QueueIdIllegalError, SubscriptionGroupNotExistError,
                     TopicNotExistError)
from .mix_all import (PROPERTY_MAX_RECONSUME_TIMES, PROPERTY_TRANSACTION_PREPARED,
                      RETRY_GROUP_TOPIC_PREFIX, get_dlq_topic)
from .send_back import DLQ_NUMS_PER_GROUP, build_send_back_message
from .subscription_group_config import SubscriptionGroupConfig
from .subscription_group_manager import SubscriptionGroupManager
from .topic_config import TopicConfig
from .topic_config_manager import TopicConfigManager
from .topic_validator import (AUTO_CREATE_TOPIC_KEY_TOPIC, PERM_READ, PERM_WRITE, is_not_allowed_send_topic,
                              is_readable, is_writeable, validate_group, validate_topic)

log = logging.getLogger(__name__)

MULTI_TAGS_FLAG = 0x2

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from concurrent.futures import Future

    from .._message import Message, MessageExt, PutResult
    from ..message import GetResult
    from ..store import MessageStore

    # The transactional check-back: fn(half message) -> True commit, False roll back, None not known yet.
    TransactionChecker = Callable[[MessageExt], "bool | None"]


class Broker:
    """A broker over one store directory. Use ``Broker.open(path, config, store_config=...)``."""

    # The broker's store, opened by start() (Broker.open starts the broker): typed as always there, since every use
    # of a broker is after open; a Broker never started has no store attribute at all.
    store: MessageStore

    def __init__(self, path: str, config: BrokerConfig | None = None, store_config: StoreConfig | None = None,
                 transaction_checker: TransactionChecker | None = None) -> None:
        self.path = path
        self.config = config or BrokerConfig()
        self.config.validate()
        self.store_config = store_config or StoreConfig()
        # The transactional message check-back: fn(message_ext) -> True commit, False rollback, None unknown (what
        # a broker asks the producer); the check service runs when one is given.
        self.transaction_checker = transaction_checker
        self.transactions = None
        self.topic_config_manager: TopicConfigManager | None = None
        self.subscription_group_manager: SubscriptionGroupManager | None = None
        self.consumer_offset_manager: ConsumerOffsetManager | None = None
        self._services: list = []
        # topic -> SendEntry, read by the Sender (rmqcore/broker/_send.pyx) on every send; emptied by every change
        # of the topic table and of the broker's permission (_invalidate_sends), so an entry is always current.
        self._send_cache: dict[str, SendEntry] = {}
        self._send_generation = 0
        self._send_lock = threading.Lock()
        self._sender: Sender | None = None
        self._store_put = None
        self._cluster = self.config.broker_cluster_name
        self._closed = False
        self._close_lock = threading.Lock()

    @classmethod
    def open(cls, path: str, config: BrokerConfig | None = None, store_config: StoreConfig | None = None, *,
             transaction_checker: TransactionChecker | None = None) -> "Broker":
        broker = cls(path, config, store_config, transaction_checker=transaction_checker)
        broker.start()
        return broker

    def start(self) -> None:
        from ..store import MessageStore
        self.store = MessageStore.open(self.path, self.store_config)
        self._store_put = self.store.put
        try:
            root = self.store.path
            self.topic_config_manager = TopicConfigManager(root, self.config)
            self.subscription_group_manager = SubscriptionGroupManager(root, self.config)
            self.consumer_offset_manager = ConsumerOffsetManager(root)
            for manager in (self.topic_config_manager, self.subscription_group_manager,
                            self.consumer_offset_manager):
                manager.load()
            self.topic_config_manager.add_change_listener(self._invalidate_sends)
            self._sender = Sender(self._send_cache, self._cluster, self.store.put, self.store.put_batch,
                                  self._check_send, self._put_transaction_message, self.store.put_async)
            # The instance's send and send_batch are the Sender's C methods: a Python method in between would cost
            # a frame per message, a tenth of a small put (the class's methods below say what they do).
            self.send = self._sender.send
            self.send_async = self._sender.send_async
            self.send_batch = self._sender.send_batch
            from .transaction import TransactionalMessageService
            cfg = self.config
            # Check progress as RocketMQ keeps it: CID_RMQ_SYS_TRANS offsets in consumerOffset.json.
            self.transactions = TransactionalMessageService(
                self.store, checker=self.transaction_checker, transaction_timeout=cfg.transaction_timeout,
                transaction_check_max=cfg.transaction_check_max,
                transaction_check_interval=cfg.transaction_check_interval,
                offset_store=self.consumer_offset_manager)
            if self.transaction_checker is not None:
                self.transactions.start()
            self._services = [PeriodicService("ConsumerOffsetPersist", self._persist_timed,
                                              self.config.flush_consumer_offset_interval,
                                              self.config.flush_consumer_offset_interval)]
            for s in self._services:
                s.start()
        except BaseException:
            self._closed = True
            self.store.close()
            raise

    def _persist_timed(self, thorough: bool) -> None:
        self.consumer_offset_manager.persist(force=False)
        if self.subscription_group_manager.dirty:
            self.subscription_group_manager.persist()

    def persist(self) -> None:
        """Write every config file now (what close does)."""
        self.consumer_offset_manager.persist()
        self.topic_config_manager.persist()
        self.subscription_group_manager.persist()

    def close(self) -> None:
        """Stop the timer, persist the config files, close the store."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self.transactions is not None:
                self.transactions.shutdown()
            for s in self._services:
                # The service's final run persists the offsets; the rest follows.
                s.shutdown()
            # Each file on its own: one that cannot be written (a directory in its place) must not cost the
            # others their last state; the first error is raised once the store is closed.
            error = None
            for persist in (self.topic_config_manager.persist, self.subscription_group_manager.persist,
                            lambda: self.consumer_offset_manager.persist(force=False)):
                try:
                    persist()
                except Exception as e:
                    log.error("closing the broker: %s", e)
                    error = error or e
            self.topic_config_manager.close_writer()      # the persist above covered what it had left
            if error is not None:
                raise error
        finally:
            self.store.close()

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- send -------------------------------------------------------------------------------------------------

    def _check_broker_writeable(self) -> None:
        if not is_writeable(self.config.broker_permission):
            raise NoPermissionError(f"the broker[{self.config.broker_name}] sending message is forbidden "
                                    f"(broker_permission {self.config.broker_permission})")

    def _topic_for_send(self, topic: str) -> TopicConfig:
        """msgCheck: a legal, sendable topic, created from TBW102 on its first send when auto-creation is on."""
        validate_topic(topic)
        if is_not_allowed_send_topic(topic):
            raise NoPermissionError(f"sending message to topic[{topic}] is forbidden")
        tcm = self.topic_config_manager
        tc = tcm.select_topic_config(topic)
        if tc is None:
            if self.config.auto_create_topic_enable:
                tc = tcm.create_topic_in_send_message_method(topic, AUTO_CREATE_TOPIC_KEY_TOPIC,
                                                             self.config.client_default_topic_queue_nums)
            if tc is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = tcm.create_topic_in_send_message_back_method(topic, 1, PERM_WRITE | PERM_READ)
            if tc is None:
                raise TopicNotExistError(f"topic[{topic}] not exist, apply first please! (auto_create_topic_enable "
                                         f"is {self.config.auto_create_topic_enable})")
        if not is_writeable(tc.perm):
            raise NoPermissionError(f"the topic[{topic}] sending message is forbidden (perm {tc.perm})")
        return tc

    def update_broker_permission(self, perm: int) -> None:
        """Change the broker's permission (PermName bits) while it runs, as RocketMQ's updateBrokerConfig does
        with brokerPermission; sends and pulls see it at once."""
        if not 0 <= perm <= 0xF:
            raise ValueError(f"broker_permission must be PermName bits (0..15), got {perm}")
        self.config.broker_permission = perm
        self._invalidate_sends()
        # AdminBrokerProcessor.updateBrokerConfig: a new brokerPermission bumps the topic table's data version and
        # re-registers, so name servers take the topics' new permissions (the change listeners: the registration)
        tcm = self.topic_config_manager
        with tcm._lock:
            tcm.data_version.next_version()
            tcm._changed()

    def _invalidate_sends(self, topic: str | None = None) -> None:
        """Forget the send checks of ``topic``, or of every topic (None): the topic table or the broker's permission
        changed (the topic config manager calls this under its lock after each change of its table). A topic's
        checks read only its own config, so creating one topic keeps every other topic's sends on the cached path
        (a storm of creations would otherwise send every client down the full checks after each)."""
        with self._send_lock:
            self._send_generation += 1
            if topic is None:
                self._send_cache.clear()
            else:
                self._send_cache.pop(topic, None)

    def _send_entry(self, topic: str) -> SendEntry:
        """The checks of a send that depend on the topic alone (the broker's permission, the topic's name, its
        existence or creation, its permission), cached per topic until the next change of what they read."""
        generation = self._send_generation     # read first: a change while the checks run must not be cached over
        self._check_broker_writeable()
        tc = self._topic_for_send(topic)
        entry = SendEntry(tc, tc.queue_id_limit, tc.write_queue_nums,
                          topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or tc.topic_filter_type == "MULTI_TAG")
        with self._send_lock:
            if generation == self._send_generation:
                self._send_cache[topic] = entry
        return entry

    def _check_send(self, msg) -> None:
        """Every check of a send, for a message the Sender's cached entry does not clear: the topic's checks
        (cached after), then a queue id to pick or to refuse, a retry topic's DLQ diversion, a MULTI_TAG flag.
        Raises the refusal; adjusts ``msg`` in place."""
        entry = self._send_cache.get(msg.topic)
        if entry is None:
            entry = self._send_entry(msg.topic)
        queue_id = msg.queue_id
        if queue_id < 0 or queue_id >= entry.queue_id_limit or entry.slow:
            self._send_slow(msg, entry)

    @property
    def send_entries(self) -> dict:
        """topic -> SendEntry for every topic whose send checks passed and still hold (emptied on each change of
        the topic table or the broker's permission): a send to a topic found here, with a queue id in its range,
        needs none of them again. To read, never to write (the gRPC server's common send reads it)."""
        return self._send_cache

    def send(self, msg: Message) -> PutResult:
        """Store ``msg`` as a broker's send does: check the broker's and the topic's permissions, create the topic
        on first send when ``auto_create_topic_enable`` is on, pick a random write queue when ``queue_id`` < 0,
        refuse a queue id past the topic's queues, divert a %RETRY% message retried too often to the DLQ, stamp the
        CLUSTER property. ``msg`` is updated in place (queue id, topic for the DLQ, properties, sys flag), as the
        broker fills its inner message. Returns the store's PutResult; raises a BrokerError subclass naming the
        refusal, or MessageIllegalError from the store.

        The topic's checks run once per topic and are cached until the topic table or the broker's permission
        changes, so the common send costs a dict lookup and a few compares (in C: rmqcore/broker/_send.pyx) on top
        of the store's put. An open broker's ``send`` is the Sender's method itself; this one serves the class."""
        return self._sender.send(msg)

    def send_async(self, msg: Message) -> Future[PutResult]:
        """``send`` without waiting for the store's flush (SYNC_FLUSH) or a slave (SYNC_MASTER), as RocketMQ's
        SendMessageProcessor answers from DefaultMessageStore.asyncPutMessage's CompletableFuture: the same checks
        and stamp, refusals raised here, then MessageStore.put_async (the record is appended now; the Future
        completes with its PutResult once it is durable, or with FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT /
        SLAVE_NOT_AVAILABLE). A message carrying TRAN_MSG is stored by the transaction service's put, which waits:
        its Future is complete on return (a caller that must not block keeps such messages off this path)."""
        return self._sender.send_async(msg)

    def send_batch(self, messages: Sequence[Message]) -> list[PutResult]:
        """Store many messages with one store lock and one flush wait (MessageStore.put_batch), each checked as
        ``send`` checks it; every message is checked before any is stored. As RocketMQ's batch send, messages of a
        prepared transaction are refused here (NoPermissionError). The broker's CLUSTER goes on every record as a
        batch property (MessageStore.put_batch's ``properties``), replacing a message's own, as RocketMQ's batch
        encoder appends it; unlike ``send``, the messages' dicts are not given it."""
        return self._sender.send_batch(messages)

    def _send_slow(self, msg, entry: SendEntry) -> None:
        """The rarer parts of a send: a queue id to pick or to refuse, a retry topic, a MULTI_TAG topic."""
        tc, limit, write_queue_nums = entry.topic_config, entry.queue_id_limit, entry.write_queue_nums
        queue_id = msg.queue_id
        if queue_id < 0:
            queue_id = msg.queue_id = random.randrange(write_queue_nums) if write_queue_nums else 0
        if queue_id >= limit:
            raise QueueIdIllegalError(f"request queueId[{queue_id}] is illegal, {tc}")
        if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            tc = self._handle_retry_and_dlq(msg, tc)
        if tc.topic_filter_type == "MULTI_TAG":
            msg.sys_flag |= MULTI_TAGS_FLAG

    def _handle_retry_and_dlq(self, msg, tc: TopicConfig) -> TopicConfig:
        """A message a client sends to a retry topic itself: past the group's max reconsume times it goes to the
        DLQ instead (SendMessageProcessor.handleRetryAndDLQ)."""
        group = msg.topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        gc = self.subscription_group_manager.find_subscription_group_config(group)
        if gc is None:
            raise SubscriptionGroupNotExistError(f"subscription group not exist, {group}")
        max_times = gc.retry_max_times
        header = msg.properties.get(PROPERTY_MAX_RECONSUME_TIMES)
        if header is not None and header.lstrip("-").isdigit():
            max_times = int(header)
        if msg.reconsume_times >= max_times:
            msg.topic = get_dlq_topic(group)
            msg.queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
            msg.properties["DELAY"] = "0"
            return self.topic_config_manager.create_topic_in_send_message_back_method(
                msg.topic, DLQ_NUMS_PER_GROUP, PERM_WRITE | PERM_READ)
        return tc

    def _put_transaction_message(self, msg):
        """A message carrying TRAN_MSG: refused when ``reject_transaction_message`` is on, as RocketMQ does;
        a prepared one ("true") is stored as a half message (TransactionalMessageBridge), the rest as they are."""
        if msg.properties.get(PROPERTY_TRANSACTION_PREPARED) != "true":
            return self._store_put(msg)
        if self.config.reject_transaction_message:
            raise NoPermissionError(f"the broker[{self.config.broker_name}] sending transaction message is "
                                    "forbidden")
        return self.transactions.prepare(msg)

    def end_transaction(self, commit_log_offset: int, producer_group: str, commit: bool) -> PutResult | None:
        """EndTransactionProcessor: commit (the real message is stored, visible to consumers) or roll back the
        half message stored at ``commit_log_offset`` (its send's PutResult.commitlog_offset); both write the op
        record. Returns the commit's PutResult, None for a rollback."""
        return self.transactions.end_transaction(commit_log_offset, producer_group, commit)

    # -- pull -------------------------------------------------------------------------------------------------

    def _group_for_consume(self, group: str) -> SubscriptionGroupConfig:
        validate_group(group)
        gc = self.subscription_group_manager.find_subscription_group_config(group)
        if gc is None:
            raise SubscriptionGroupNotExistError(f"subscription group [{group}] does not exist "
                                                 "(auto_create_subscription_group is off)")
        return gc

    def _topic_for_consume(self, topic: str, queue_id: int) -> TopicConfig:
        tc = self.topic_config_manager.select_topic_config(topic)
        if tc is None:
            raise TopicNotExistError(f"topic[{topic}] not exist, apply first please!")
        if not 0 <= queue_id < tc.read_queue_nums:
            raise QueueIdIllegalError(f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                                      f"[{tc.read_queue_nums}]")
        return tc

    def pull(self, group: str, topic: str, queue_id: int, offset: int, max_count: int = 32,
             tags: str | Iterable[str] | None = None, wait: float = 0.0) -> GetResult:
        """Messages of one queue for ``group`` from ``offset`` (PullMessageProcessor's checks, then the store's
        get_messages with its statuses, next_begin_offset and long polling). An offset below the queue's min or
        past its max comes back as OFFSET_TOO_SMALL / OFFSET_OVERFLOW_BADLY with next_begin_offset where the
        consumer should continue (RocketMQ's PULL_OFFSET_MOVED)."""
        if not is_readable(self.config.broker_permission):
            raise NoPermissionError(f"the broker[{self.config.broker_name}] pulling message is forbidden")
        gc = self._group_for_consume(group)
        if not gc.consume_enable:
            raise NoPermissionError(f"subscription group no permission, {group}")
        tc = self._topic_for_consume(topic, queue_id)
        if not is_readable(tc.perm):
            raise NoPermissionError(f"the topic[{topic}] pulling message is forbidden (perm {tc.perm})")
        return self.store.get_messages(group, topic, queue_id, offset, max_count, tags, wait)

    # -- offsets ----------------------------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` (the next message to consume) as ``group``'s position in the queue.

        As ConsumerManageProcessor.updateConsumerOffset: the group must exist (or be auto-created), the topic must
        exist, the queue must be one of its read queues. The offset must be an int in [0, max offset]: past the
        queue's max nothing was ever there to consume and the commit is refused (OffsetIllegalError). Below the
        queue's min offset (its files were cleaned) it is accepted as RocketMQ does: the next pull answers
        OFFSET_TOO_SMALL with next_begin_offset at the min, where the consumer carries on."""
        self._group_for_consume(group)
        self._topic_for_consume(topic, queue_id)
        if type(offset) is not int:
            raise OffsetIllegalError(f"offset: expected an int, got {type(offset).__name__}")
        if offset < 0:
            raise OffsetIllegalError(f"offset {offset} of {topic}/{queue_id} for {group} is negative")
        max_offset = self.store.max_offset(topic, queue_id)
        if offset > max_offset:
            raise OffsetIllegalError(f"offset {offset} of {topic}/{queue_id} for {group} is past the queue's max "
                                     f"offset {max_offset}")
        self.consumer_offset_manager.commit_offset(group, topic, queue_id, offset)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """``group``'s committed offset in the queue, -1 when it has none (RocketMQ's queryOffset)."""
        return self.consumer_offset_manager.query_offset(group, topic, queue_id)

    def lag(self, group: str) -> dict[str, int]:
        """Messages not yet consumed by ``group``, per topic it has offsets in: the sum over the topic's queues of
        max offset minus committed offset (0 for a queue without a commit), as RocketMQ's consumer stats."""
        return {topic: sum(d["diff"] for d in queues.values()) for topic, queues in self.lag_detail(group).items()}

    def lag_detail(self, group: str) -> dict[str, dict[int, dict]]:
        """Per topic and queue: broker_offset (the queue's max), consumer_offset (committed, 0 when none) and
        diff (RocketMQ's ConsumeStats / OffsetWrapper)."""
        out = {}
        stored = self.store.topics()
        for topic in sorted(self.consumer_offset_manager.which_topic_by_consumer(group)):
            committed = self.consumer_offset_manager.query_offsets(group, topic)
            # Queues with neither a commit nor a message add nothing, so RocketMQ's walk over every read queue
            # is a walk over these.
            queue_ids = set(committed) | set(stored.get(topic, ()))
            per_queue = {}
            for q in sorted(queue_ids):
                broker_offset = self.store.max_offset(topic, q)
                consumer_offset = max(committed.get(q, 0), 0)
                per_queue[q] = {"broker_offset": broker_offset, "consumer_offset": consumer_offset,
                                "diff": max(broker_offset - consumer_offset, 0)}
            out[topic] = per_queue
        return out

    def remove_group_offsets(self, group: str) -> int:
        """Forget ``group``'s offsets in every topic. Returns how many topics it had."""
        return self.consumer_offset_manager.remove_offset(group)

    def remove_topic_offsets(self, topic: str) -> int:
        """Forget every group's offsets in ``topic``. Returns how many groups it had."""
        return self.consumer_offset_manager.clean_offset_by_topic(topic)

    # -- retry and DLQ ----------------------------------------------------------------------------------------

    def send_back(self, message_ext: MessageExt, group: str, delay_level: int = 0,
                  max_reconsume_times: int | None = None) -> PutResult | None:
        """A message ``group`` failed to consume goes back for a retry, or to the DLQ (see send_back.py). The
        message is re-read from the store at its commitlog offset, as RocketMQ does, so what is resent is what was
        stored. Returns the PutResult, or None when the group has no retry queues (RocketMQ answers success and
        stores nothing). ``max_reconsume_times`` overrides the group's retry_max_times, as the Java client's
        request header may."""
        validate_group(group)
        gc = self.subscription_group_manager.find_subscription_group_config(group)
        if gc is None:
            raise SubscriptionGroupNotExistError(f"subscription group not exist, {group}")
        self._check_broker_writeable()
        if gc.retry_queue_nums <= 0:
            return None
        tcm = self.topic_config_manager
        retry_topic = f"{RETRY_GROUP_TOPIC_PREFIX}{group}"
        try:
            # %RETRY%group and %DLQ%group are as long: a group whose retry topic the store refuses (a group name
            # past 120 characters) is refused now, not acknowledged and dropped at delivery (issue 28).
            validate_topic(retry_topic)
        except IllegalNameError as e:
            raise IllegalNameError(f"send back for group {group[:40]!r}...: its retry topic is not a legal topic: "
                                   f"{e}") from None
        retry_tc = tcm.select_topic_config(retry_topic)
        if retry_tc is not None and not is_writeable(retry_tc.perm):
            raise NoPermissionError(f"the topic[{retry_topic}] sending message is forbidden")
        offset = message_ext.commitlog_offset
        stored = self.store.look_message(offset)
        if stored is None:
            raise MessageNotFoundError(f"look message by offset failed, {offset}")
        max_times = gc.retry_max_times if max_reconsume_times is None else max_reconsume_times
        msg, dead = build_send_back_message(stored, group, gc.retry_queue_nums, delay_level, max_times)
        del stored
        # Everything the store will check, now and when the delay level delivers the retry, before any topic is
        # made: a refusal (MessageIllegalError naming the field) leaves the broker as it was.
        self.store.check_put(msg)
        if retry_tc is None:
            retry_tc = tcm.create_topic_in_send_message_back_method(retry_topic, gc.retry_queue_nums,
                                                                    PERM_WRITE | PERM_READ)
            if not is_writeable(retry_tc.perm):
                raise NoPermissionError(f"the topic[{retry_topic}] sending message is forbidden")
        if dead:
            # SendMessageProcessor.consumerSendMsgBack of 4.9.7: one queue, PERM_WRITE | PERM_READ (readable since
            # 4.9.2, "DLQ topic default perm change"; 4.9.1 and older made it PERM_WRITE only)
            tcm.create_topic_in_send_message_back_method(msg.topic, DLQ_NUMS_PER_GROUP, PERM_WRITE | PERM_READ)
        result = self._store_put(msg)           # as RocketMQ: straight to the store, no send checks
        if result.status is not PutStatus.PUT_OK:
            raise PutFailedError(f"send back of {message_ext.msg_id} to {msg.topic}: {result.status.name}",
                                 result.status)
        return result

    # -- topics and groups ------------------------------------------------------------------------------------

    def topics(self) -> dict[str, TopicConfig]:
        """Every topic config, system topics included, by name (copies: change them through update_topic)."""
        with self.topic_config_manager._lock:
            return {n: tc.copy() for n, tc in self.topic_config_manager.topic_config_table.items()}

    def groups(self) -> dict[str, SubscriptionGroupConfig]:
        """Every subscription group config by name (copies: change them through update_group)."""
        with self.subscription_group_manager._lock:
            return {n: g.copy() for n, g in self.subscription_group_manager.subscription_group_table.items()}

    def update_topic(self, topic_config: TopicConfig) -> None:
        """Create or replace a topic (RocketMQ's updateAndCreateTopic); persisted at once."""
        validate_topic(topic_config.topic_name)
        self.topic_config_manager.update_topic_config(topic_config.copy())

    def create_topic(self, topic: str, queue_nums: int = 4, perm: int = PERM_READ | PERM_WRITE,
                     order: bool = False, message_type: str | None = None) -> TopicConfig:
        """Create or replace ``topic`` with ``queue_nums`` read and write queues (RocketMQ's updateAndCreateTopic);
        persisted at once. ``message_type`` (NORMAL, FIFO, DELAY, TRANSACTION; 5.x's TopicMessageType) is kept as
        5.x keeps it, the topic's ``message.type`` attribute; None keeps the attributes an existing topic has (as
        5.x's updateTopicConfig merges a request's attributes into the current ones) and writes none for a new
        topic (the 4.9.7 shape, whose type reads as NORMAL). Raises IllegalNameError for a name TopicValidator
        refuses, InvalidConfigError naming the field for a value topics.json could not read back, ValueError for an
        unknown type."""
        current = self.topic_config_manager.select_topic_config(topic) if isinstance(topic, str) else None
        tc = TopicConfig(topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums, perm=perm, order=order,
                         attributes=current.attributes if current is not None else None, message_type=message_type)
        self.update_topic(tc)
        return tc

    def delete_topic(self, topic: str) -> bool:
        """Remove the topic's config and every group's offsets in it (its messages stay in the store)."""
        removed = self.topic_config_manager.delete_topic_config(topic)
        self.consumer_offset_manager.clean_offset_by_topic(topic)
        return removed

    def update_group(self, config: SubscriptionGroupConfig) -> None:
        """Create or replace a subscription group; persisted at once."""
        validate_group(config.group_name)
        self.subscription_group_manager.update_subscription_group_config(config.copy())

    def create_group(self, group: str, fifo: bool = False, max_delivery_attempts: int | None = None, *,
                     retry_queue_nums: int = 1) -> SubscriptionGroupConfig:
        """Create or replace a subscription group as a 5.x broker writes it (consumeMessageOrderly,
        groupRetryPolicy); persisted at once. ``fifo``: consumeMessageOrderly, the proxy's FIFO consumption.
        ``max_delivery_attempts``: deliveries before the DLQ as the 5.x proxy counts them, retryMaxTimes + 1
        (GrpcClientSettingsManager), so retryMaxTimes = attempts - 1; None keeps RocketMQ's 16 (17 attempts).
        Raises IllegalNameError / InvalidConfigError naming the field, nothing changed."""
        validate_group(group)
        if type(fifo) is not bool:
            raise InvalidConfigError("consumeMessageOrderly", f"expected True or False, got {fifo!r}")
        g = SubscriptionGroupConfig(group, consume_message_orderly=fifo, retry_queue_nums=retry_queue_nums)
        if max_delivery_attempts is not None:
            if type(max_delivery_attempts) is not int or not 1 <= max_delivery_attempts <= (1 << 31):
                raise InvalidConfigError("max_delivery_attempts", f"{max_delivery_attempts!r} is not an int in "
                                         f"[1, {1 << 31}] (retryMaxTimes + 1, a Java int)")
            g.max_delivery_attempts = max_delivery_attempts
        self.update_group(g)
        return g

    def delete_group(self, group: str) -> bool:
        """Remove the group's config and its offsets."""
        removed = self.subscription_group_manager.delete_subscription_group_config(group)
        self.consumer_offset_manager.remove_offset(group)
        return removed

    def runtime_info(self) -> dict:
        info = self.store.runtime_info()
        info.update({
            "broker_name": self.config.broker_name,
            "broker_cluster_name": self.config.broker_cluster_name,
            "topics": len(self.topic_config_manager.topic_config_table),
            "subscription_groups": len(self.subscription_group_manager.subscription_group_table),
            "consumer_offset_keys": len(self.consumer_offset_manager.offset_table),
        })
        return info
