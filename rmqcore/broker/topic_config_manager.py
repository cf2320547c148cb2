"""TopicConfigManager: the broker's topics (``config/topics.json``), RocketMQ's system topics, and the creation of
topics on first send (from TBW102) and on send-back (retry and DLQ topics)."""
from __future__ import annotations

import logging
import threading

from .. import fastjson
from ..config_manager import ConfigManager
from .data_version import DataVersion
from .errors import InvalidConfigError
from ..fastjson import FieldError, check_map
from .mix_all import REPLY_TOPIC_POSTFIX
from .topic_config import TopicConfig
from .topic_validator import (AUTO_CREATE_TOPIC_KEY_TOPIC, PERM_INHERIT, PERM_READ, PERM_WRITE,
                              RMQ_SYS_BENCHMARK_TOPIC, RMQ_SYS_OFFSET_MOVED_EVENT, RMQ_SYS_SCHEDULE_TOPIC,
                              RMQ_SYS_SELF_TEST_TOPIC, is_inherited)

log = logging.getLogger(__name__)

SCHEDULE_TOPIC_QUEUE_NUM = 18


class TopicConfigManager(ConfigManager):
    FILE_NAME = "topics.json"

    def __init__(self, root_dir: str, broker_config):
        super().__init__(root_dir)
        self.broker_config = broker_config
        self.topic_config_table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self.extra: dict = {}                 # top-level fields of a newer file, written back unchanged
        self._lock = threading.RLock()
        self.system_topics: set[str] = set()
        # Bumped by every change of the table (under the lock), which then calls each change listener: the broker
        # empties the send checks it caches per topic.
        self.version = 0
        self._change_listeners: list = []
        # Each topic's entry as last written (name -> (its TopicConfig, the entry's sort key and text)): a write
        # renders only the entries of topics changed since (another object in the table, or named by _changed), so
        # rewriting topics.json costs a sort and a join, not fastjson's writer over every field of every topic
        # (173 ms at 3,000 topics on the development VM). The table's configs are replaced, never changed in
        # place, as the broker's send cache already requires; a change in place calls _changed() (all rendered).
        self._fragments: dict[str, tuple] = {}
        # A topic created on a send or send-back (auto-creation) is in the table at once and written by the
        # background writer (ConfigManager.persist_later); with wait_created the creating call waits until it is on
        # disk (as RocketMQ's persist inside the creation), sharing the write with concurrent creations. A caller
        # that waits elsewhere (the gRPC server, in its event loop: last_created) turns it off.
        self.wait_created = True
        self.last_created = 0                 # the ticket of the last auto-creation's write
        self._add_system_topics()

    def _add_system_topics(self) -> None:
        """The topics RocketMQ's TopicConfigManager puts in its table before reading the file (the file's
        entries override them)."""
        cfg = self.broker_config

        def add(name, queues=None, perm=PERM_READ | PERM_WRITE):
            tc = TopicConfig(name, perm=perm)
            if queues is not None:
                tc.read_queue_nums = tc.write_queue_nums = queues
            self.topic_config_table[name] = tc
            self.system_topics.add(name)

        add(RMQ_SYS_SELF_TEST_TOPIC, 1)
        if cfg.auto_create_topic_enable:
            add(AUTO_CREATE_TOPIC_KEY_TOPIC, cfg.default_topic_queue_nums, PERM_INHERIT | PERM_READ | PERM_WRITE)
        add(RMQ_SYS_BENCHMARK_TOPIC, 1024)
        add(cfg.broker_cluster_name, None,
            PERM_INHERIT | (PERM_READ | PERM_WRITE if cfg.cluster_topic_enable else 0))
        add(cfg.broker_name, 1, PERM_INHERIT | (PERM_READ | PERM_WRITE if cfg.broker_topic_enable else 0))
        add(RMQ_SYS_OFFSET_MOVED_EVENT, 1)
        add(RMQ_SYS_SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUE_NUM)
        if cfg.trace_topic_enable:
            add(cfg.msg_trace_topic_name, 1)
        add(f"{cfg.broker_cluster_name}_{REPLY_TOPIC_POSTFIX}", 1)

    # -- file -------------------------------------------------------------------------------------------------

    def encode(self, pretty: bool = False) -> str:
        with self._lock:
            doc = dict(self.extra)
            doc["dataVersion"] = self.data_version.to_json()
            if not pretty:
                doc["topicConfigTable"] = {name: tc.to_json() for name, tc in self.topic_config_table.items()}
                return fastjson.dumps(doc, False)
            # The pretty text (what the writer thread writes) is rendered outside the lock, from the table as it
            # is now: with thousands of topics the walk takes ms, and a creation on the event loop must not wait
            # for it. A config changed in place meanwhile replaces ``_fragments`` (_changed), so what this walk
            # keeps goes into the old dict and is never reused; the change's own write renders it again.
            items = list(self.topic_config_table.items())
            fragments = self._fragments
        entries = []
        for name, tc in items:
            kept = fragments.get(name)
            if kept is None or kept[0] is not tc:
                kept = fragments[name] = (tc, fastjson.map_entry(name, fastjson.dumps(tc.to_json(), True, 2),
                                                                 True, 1))
            entries.append(kept[1])
        if len(fragments) > len(entries):
            names = {name for name, _tc in items}
            for name in [n for n in fragments if n not in names]:
                fragments.pop(name, None)
        doc["topicConfigTable"] = fastjson.dumps_map(entries, True, 1)
        return fastjson.dumps(doc, True)

    def decode(self, text: str):
        doc = check_map(fastjson.loads(text), "(document)")
        table = {}
        raw_table = doc.get("topicConfigTable")
        if raw_table is not None:
            for name, raw in check_map(raw_table, "topicConfigTable").items():
                if not isinstance(name, str):
                    raise FieldError(f"topicConfigTable.{name}", "a topic name must be a string")
                table[name] = decode_topic_config(raw, f"topicConfigTable.{name}")
        version = None
        if doc.get("dataVersion") is not None:
            version = DataVersion.from_json(doc["dataVersion"], "dataVersion")
        extra = {k: v for k, v in doc.items() if k not in ("topicConfigTable", "dataVersion")}
        return table, version, extra

    def apply(self, state) -> None:
        table, version, extra = state
        with self._lock:
            self.topic_config_table.update(table)           # Java: putAll over the system topics
            self._changed()
            if version is not None:
                self.data_version.assign_new_one(version)
            self.extra = extra

    # -- queries and changes ----------------------------------------------------------------------------------

    def add_change_listener(self, listener) -> None:
        """Call ``listener(topic)`` after every change of the topic table (under the manager's lock, so it must not
        wait for another thread holding it): ``topic`` names the one topic changed, None any of them."""
        self._change_listeners.append(listener)

    def _changed(self, topic: str | None = None) -> None:
        # Callers hold self._lock. ``topic``: the one topic whose config object was put in or taken out of the
        # table; None: any config may have changed in place (every entry is rendered again at the next write).
        if topic is None:
            self._fragments = {}         # a new dict: an encode walking outside the lock keeps into the old one
        self.version += 1
        for listener in self._change_listeners:
            listener(topic)

    def select_topic_config(self, topic: str) -> TopicConfig | None:
        return self.topic_config_table.get(topic)

    def contains_topic(self, topic: str) -> bool:
        return topic in self.topic_config_table

    def is_order_topic(self, topic: str) -> bool:
        tc = self.topic_config_table.get(topic)
        return tc is not None and tc.order

    def update_topic_config(self, topic_config: TopicConfig) -> None:
        """Create or replace a topic, persisted at once. A config the file could not read back (a value outside
        the reader's limits) raises InvalidConfigError naming the field, and nothing changes."""
        if not isinstance(topic_config.topic_name, str) or not topic_config.topic_name:
            raise InvalidConfigError("topicName", f"missing or empty ({topic_config.topic_name!r})")
        check_readable(topic_config, decode_topic_config, f"topicConfigTable.{topic_config.topic_name}")
        with self._lock:
            old = self.topic_config_table.get(topic_config.topic_name)
            self.topic_config_table[topic_config.topic_name] = topic_config
            self._changed(topic_config.topic_name)
            self.data_version.next_version()
            log.info("%s topic config %s", "update" if old else "create new", topic_config)
        self.persist()

    def delete_topic_config(self, topic: str) -> bool:
        with self._lock:
            old = self.topic_config_table.pop(topic, None)
            if old is None:
                return False
            self._changed(topic)
            self.data_version.next_version()
        self.persist()
        return True

    def replace_from_master(self, table: dict[str, TopicConfig], version: DataVersion) -> bool:
        """A slave's copy of its master's table (SlaveSynchronize.syncTopicConfig): when ``version`` differs from
        this table's, the table becomes the master's (cleared, then every entry; the master's holds the system
        topics too) with its data version, and is persisted. True when it changed."""
        with self._lock:
            if (self.data_version.timestamp, self.data_version.counter) == (version.timestamp, version.counter):
                return False
            self.data_version.assign_new_one(version)
            self.topic_config_table.clear()
            self.topic_config_table.update(table)
            self._changed()
        self.persist()
        return True

    def create_topic_in_send_message_method(self, topic: str, default_topic: str,
                                            client_default_topic_queue_nums: int,
                                            topic_sys_flag: int = 0) -> TopicConfig | None:
        """A topic created from the default topic (TBW102) on its first send, when the default topic's permission
        carries PERM_INHERIT; None when it does not exist or is not inheritable."""
        with self._lock:
            tc = self.topic_config_table.get(topic)
            if tc is not None:
                return tc
            default = self.topic_config_table.get(default_topic)
            if default is None:
                log.warning("create new topic failed, because the default topic[%s] not exist", default_topic)
                return None
            if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self.broker_config.auto_create_topic_enable:
                default.perm = PERM_READ | PERM_WRITE
                self._changed()
            if not is_inherited(default.perm):
                log.warning("create new topic failed, because the default topic[%s] has no perm [%d]",
                            default_topic, default.perm)
                return None
            queue_nums = max(0, min(client_default_topic_queue_nums, default.write_queue_nums))
            tc = TopicConfig(topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums,
                             perm=default.perm & ~PERM_INHERIT, topic_sys_flag=topic_sys_flag,
                             topic_filter_type=default.topic_filter_type)
            log.info("create new topic by default topic:[%s] config:[%s]", default_topic, tc)
            self.topic_config_table[topic] = tc
            self._changed(topic)
            self.data_version.next_version()
        self._persist_created()
        return tc

    def create_topic_in_send_message_back_method(self, topic: str, client_default_topic_queue_nums: int, perm: int,
                                                 topic_sys_flag: int = 0) -> TopicConfig:
        """A retry or DLQ topic, created on the first send-back to it."""
        tc = self.topic_config_table.get(topic)
        if tc is not None:
            return tc
        with self._lock:
            tc = self.topic_config_table.get(topic)
            if tc is not None:
                return tc
            tc = TopicConfig(topic, read_queue_nums=client_default_topic_queue_nums,
                             write_queue_nums=client_default_topic_queue_nums, perm=perm,
                             topic_sys_flag=topic_sys_flag)
            log.info("create new topic %s", tc)
            self.topic_config_table[topic] = tc
            self._changed(topic)
            self.data_version.next_version()
        self._persist_created()
        return tc

    def _persist_created(self) -> None:
        """An auto-created topic: written by the background writer, waited for here under wait_created."""
        self.last_created = ticket = self.persist_later()
        if self.wait_created:
            self.wait_persisted(ticket)


def _check_topic_config(tc: TopicConfig, where: str) -> None:
    """Values a Java broker never writes and rmqcore cannot act on."""
    if not isinstance(tc.topic_name, str) or not tc.topic_name:
        raise FieldError(f"{where}.topicName", "missing or empty")
    for attr, name in (("read_queue_nums", "readQueueNums"), ("write_queue_nums", "writeQueueNums"),
                       ("perm", "perm"), ("topic_sys_flag", "topicSysFlag")):
        if getattr(tc, attr) < 0:
            raise FieldError(f"{where}.{name}", f"{getattr(tc, attr)} is negative")


def check_readable(bean, decode, where: str) -> None:
    """Refuse ``bean`` unless the file it is about to be written to reads it back equal: its JSON through
    fastjson's text and ``decode(obj, where)`` (the reader's own checks, so the limits are the reader's by
    construction). Raises InvalidConfigError naming the field (issue 28: one bad call must not leave a broker that
    cannot open)."""
    try:
        back = decode(fastjson.loads(fastjson.dumps(bean.to_json())), where)
    except FieldError as e:
        raise InvalidConfigError(e.field, str(e).split(": ", 1)[1]) from None
    except (TypeError, ValueError) as e:
        raise InvalidConfigError(where, f"cannot be written as JSON ({e})") from None
    if back != bean:
        raise InvalidConfigError(where, f"does not read back as set: {bean!r} -> {back!r}")


def decode_topic_config(obj, where: str) -> TopicConfig:
    """One topicConfigTable entry as the reader takes it."""
    tc = TopicConfig.from_json(obj, where)
    _check_topic_config(tc, where)
    return tc
