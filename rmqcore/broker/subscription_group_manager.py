"""SubscriptionGroupManager: the broker's consumer groups (``config/subscriptionGroup.json``), RocketMQ's system
groups, and the creation of a group on first use when ``auto_create_subscription_group`` is on."""
from __future__ import annotations

import logging
import threading

from .. import fastjson
from ..config_manager import ConfigManager
from .data_version import DataVersion
from .errors import InvalidConfigError
from .topic_config_manager import check_readable
from ..fastjson import FieldError, check_map
from .mix_all import (CID_ONSAPI_OWNER_GROUP, CID_ONSAPI_PERMISSION_GROUP, CID_ONSAPI_PULL_GROUP,
                      FILTERSRV_CONSUMER_GROUP, ONS_HTTP_PROXY_GROUP, SELF_TEST_CONSUMER_GROUP,
                      TOOLS_CONSUMER_GROUP, is_sys_consumer_group)
from .subscription_group_config import SubscriptionGroupConfig

log = logging.getLogger(__name__)


class SubscriptionGroupManager(ConfigManager):
    FILE_NAME = "subscriptionGroup.json"

    def __init__(self, root_dir: str, broker_config):
        super().__init__(root_dir)
        self.broker_config = broker_config
        self.subscription_group_table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()
        self.extra: dict = {}                 # 5.x's forbiddenTable and the like, written back unchanged
        self._lock = threading.RLock()
        self._dirty = False
        for name in (TOOLS_CONSUMER_GROUP, FILTERSRV_CONSUMER_GROUP, SELF_TEST_CONSUMER_GROUP):
            self.subscription_group_table[name] = SubscriptionGroupConfig(name)
        for name in (ONS_HTTP_PROXY_GROUP, CID_ONSAPI_PULL_GROUP, CID_ONSAPI_PERMISSION_GROUP,
                     CID_ONSAPI_OWNER_GROUP):
            self.subscription_group_table[name] = SubscriptionGroupConfig(name, consume_broadcast_enable=True)

    # -- file -------------------------------------------------------------------------------------------------

    def encode(self, pretty: bool = False) -> str:
        with self._lock:
            doc = dict(self.extra)
            doc["dataVersion"] = self.data_version.to_json()
            doc["subscriptionGroupTable"] = {n: g.to_json() for n, g in self.subscription_group_table.items()}
            self._dirty = False
        return fastjson.dumps(doc, pretty)

    def decode(self, text: str):
        doc = check_map(fastjson.loads(text), "(document)")
        table = {}
        raw_table = doc.get("subscriptionGroupTable")
        if raw_table is not None:
            for name, raw in check_map(raw_table, "subscriptionGroupTable").items():
                where = f"subscriptionGroupTable.{name}"
                if not isinstance(name, str):
                    raise FieldError(where, "a group name must be a string")
                table[name] = decode_group_config(raw, where)
        version = None
        if doc.get("dataVersion") is not None:
            version = DataVersion.from_json(doc["dataVersion"], "dataVersion")
        extra = {k: v for k, v in doc.items() if k not in ("subscriptionGroupTable", "dataVersion")}
        return table, version, extra

    def apply(self, state) -> None:
        table, version, extra = state
        with self._lock:
            self.subscription_group_table.update(table)
            if version is not None:
                self.data_version.assign_new_one(version)
            self.extra = extra

    @property
    def dirty(self) -> bool:
        """Changed since the last persist without being persisted (disable_consume: RocketMQ does not persist it
        at all; the broker's timer does here)."""
        return self._dirty

    # -- queries and changes ----------------------------------------------------------------------------------

    def contains_subscription_group(self, group: str) -> bool:
        return group in self.subscription_group_table

    def find_subscription_group_config(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with the defaults when ``auto_create_subscription_group`` is on or the group
        is a system group, else None."""
        g = self.subscription_group_table.get(group)
        if g is not None:
            return g
        if not (self.broker_config.auto_create_subscription_group or is_sys_consumer_group(group)):
            return None
        with self._lock:
            g = self.subscription_group_table.get(group)
            if g is not None:
                return g
            g = SubscriptionGroupConfig(group)
            self.subscription_group_table[group] = g
            log.info("auto create a subscription group, %s", g)
            self.data_version.next_version()
        self.persist()                  # at once, as RocketMQ does
        return g

    def update_subscription_group_config(self, config: SubscriptionGroupConfig) -> None:
        """Create or replace a group, persisted at once. A config the file could not read back raises
        InvalidConfigError naming the field, and nothing changes."""
        if not isinstance(config.group_name, str) or not config.group_name:
            raise InvalidConfigError("groupName", f"missing or empty ({config.group_name!r})")
        check_readable(config, decode_group_config, f"subscriptionGroupTable.{config.group_name}")
        with self._lock:
            old = self.subscription_group_table.get(config.group_name)
            self.subscription_group_table[config.group_name] = config
            self.data_version.next_version()
            log.info("%s subscription group %s", "update" if old else "create new", config)
        self.persist()

    def replace_from_master(self, table: dict[str, SubscriptionGroupConfig], version: DataVersion) -> bool:
        """A slave's copy of its master's groups (SlaveSynchronize.syncSubscriptionGroupConfig): replaced, with
        the master's data version, and persisted when ``version`` differs from this table's. True when it did."""
        with self._lock:
            if (self.data_version.timestamp, self.data_version.counter) == (version.timestamp, version.counter):
                return False
            self.data_version.assign_new_one(version)
            self.subscription_group_table.clear()
            self.subscription_group_table.update(table)
        self.persist()
        return True

    def disable_consume(self, group: str) -> None:
        with self._lock:
            g = self.subscription_group_table.get(group)
            if g is not None:
                g.consume_enable = False
                self.data_version.next_version()
                self._dirty = True

    def delete_subscription_group_config(self, group: str) -> bool:
        with self._lock:
            old = self.subscription_group_table.pop(group, None)
            if old is None:
                return False
            self.data_version.next_version()
        self.persist()
        return True


def decode_group_config(obj, where: str) -> SubscriptionGroupConfig:
    """One subscriptionGroupTable entry as the reader takes it."""
    g = SubscriptionGroupConfig.from_json(obj, where)
    if not g.group_name:
        raise FieldError(f"{where}.groupName", "missing or empty")
    for attr, jname in (("retry_queue_nums", "retryQueueNums"), ("retry_max_times", "retryMaxTimes")):
        if getattr(g, attr) < 0:
            raise FieldError(f"{where}.{jname}", f"{getattr(g, attr)} is negative")
    return g
