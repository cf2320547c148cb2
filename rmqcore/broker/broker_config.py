"""BrokerConfig: RocketMQ's BrokerConfig field names in snake_case, with RocketMQ's defaults, for the fields the
network-free broker acts on."""
from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass

from .topic_validator import PERM_READ, PERM_WRITE, RMQ_SYS_TRACE_TOPIC


def local_host_name() -> str:
    """BrokerConfig.localHostName: the host name, "DEFAULT_BROKER" when it cannot be had."""
    try:
        return socket.gethostname() or "DEFAULT_BROKER"
    except OSError:
        return "DEFAULT_BROKER"


@dataclass
class BrokerConfig:
    broker_name: str = dataclasses.field(default_factory=local_host_name)
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    broker_permission: int = PERM_READ | PERM_WRITE
    # Queues of TBW102, the template of auto-created topics (BrokerConfig.defaultTopicQueueNums).
    default_topic_queue_nums: int = 8
    auto_create_topic_enable: bool = True
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    msg_trace_topic_name: str = RMQ_SYS_TRACE_TOPIC
    trace_topic_enable: bool = False
    flush_consumer_offset_interval: int = 1000 * 5
    reject_transaction_message: bool = False
    # Transactions (TransactionalMessageCheckService): a half message older than transaction_timeout ms is
    # checked back every transaction_check_interval ms, at most transaction_check_max times.
    transaction_timeout: int = 6000
    transaction_check_max: int = 15
    transaction_check_interval: int = 60 * 1000
    # Not a BrokerConfig field: what a Java producer sends as defaultTopicQueueNums in its send header
    # (DefaultMQProducer.defaultTopicQueueNums, 4); an auto-created topic gets min(this, TBW102's write queues).
    client_default_topic_queue_nums: int = 4
    # BrokerConfig.slaveReadEnable: a master's pull answers suggest the group's whichBrokerWhenConsumeSlowly (a
    # slave) when the consumer reads far behind the commitlog's end (GetResult.suggest_pulling_from_slave), else
    # the group's brokerId; off, they always suggest the master (0), as RocketMQ's PullMessageProcessor.
    slave_read_enable: bool = False
    # Joining a cluster (BrokerOuterAPI, run by ``rmqcore serve --remoting``): the name servers to register with
    # ("host:port;host:port"; None: none), brokerIP2 (the HA address's host; None: brokerIP1's, where Java's
    # default is the machine's first address for both), the re-registration period (clamped to 10..60 s as
    # BrokerController does), each registration's timeout, and RegisterBrokerBody's deflated layout.
    namesrv_addr: str | None = None
    broker_ip2: str | None = None
    register_name_server_period: int = 1000 * 30
    register_broker_timeout_mills: int = 6000
    compressed_register: bool = False
    # A remoting client whose last heartbeat is older than this (ms) is dropped from its groups and its connection
    # closed (rmqcore/remoting/client_housekeeping.py): RocketMQ 5's BrokerConfig.channelExpiredTimeout, 4.9.7's
    # constant CHANNEL_EXPIRED_TIMEOUT in ProducerManager and ConsumerManager.
    channel_expired_timeout: int = 1000 * 120
    # BrokerConfig.enablePropertyFilter (4.9.7 default false): off, a remoting consumer's SQL92 subscription is
    # refused at CHECK_CLIENT_CONFIG and at each pull (ClientManageProcessor, PullMessageProcessor); broker.conf's
    # ``enablePropertyFilter=true`` turns SQL92 filtering on. (The gRPC front's SQL92 is RocketMQ 5's pop path,
    # which does not look at this switch.)
    enable_property_filter: bool = False
    # BrokerConfig.forceRegister (default true): false makes the periodic registration ask each name server
    # QUERY_DATA_VERSION first and skip REGISTER_BROKER where the topic table's dataVersion is the one it holds
    # (BrokerController.registerBrokerAll → needRegister); changes still register at once.
    force_register: bool = True

    def __post_init__(self):
        self.validate()
        object.__setattr__(self, "_validated", True)

    def __setattr__(self, name, value):
        # Every setter checks (issue 28): a broker's name, cluster or TBW102 queue count becomes a system topic in
        # topics.json, so a value the file could not read back would leave a broker that cannot open.
        if getattr(self, "_validated", False):
            _check_field(name, value)
        object.__setattr__(self, name, value)

    def validate(self) -> None:
        """Check every field (ValueError naming it and the limit): the Java type's range, and what the broker
        writes from it into topics.json (non-empty names, queue counts within a Java int)."""
        for f in dataclasses.fields(self):
            _check_field(f.name, getattr(self, f.name))

    def replace(self, **changes) -> "BrokerConfig":
        return dataclasses.replace(self, **changes)


_INT_MAX = (1 << 31) - 1
_LONG_MAX = (1 << 63) - 1
# field -> (kind, low, high); kind "str" (non-empty), "str?" (None or one line), "bool", or "int" with its
# inclusive range.
_LIMITS = {
    "broker_name": ("str",), "broker_cluster_name": ("str",), "msg_trace_topic_name": ("str",),
    "namesrv_addr": ("str?",), "broker_ip2": ("str?",),
    "broker_id": ("int", -_LONG_MAX - 1, _LONG_MAX),
    "broker_permission": ("int", 0, 0xF),
    "default_topic_queue_nums": ("int", 0, _INT_MAX),
    "client_default_topic_queue_nums": ("int", 0, _INT_MAX),
    "auto_create_topic_enable": ("bool",), "cluster_topic_enable": ("bool",), "broker_topic_enable": ("bool",),
    "auto_create_subscription_group": ("bool",), "trace_topic_enable": ("bool",),
    "reject_transaction_message": ("bool",), "slave_read_enable": ("bool",),
    "compressed_register": ("bool",), "enable_property_filter": ("bool",), "force_register": ("bool",),
    "register_name_server_period": ("int", 0, _INT_MAX), "register_broker_timeout_mills": ("int", 1, _INT_MAX),
    "flush_consumer_offset_interval": ("int", 1, _INT_MAX),
    "channel_expired_timeout": ("int", 1, _LONG_MAX),
    # TransactionalMessageService refuses 0 for all three (the check service could not run): so do the setters.
    "transaction_timeout": ("int", 1, _LONG_MAX),
    "transaction_check_max": ("int", 1, _INT_MAX),
    "transaction_check_interval": ("int", 1, _LONG_MAX),
}


def _check_field(name: str, value) -> None:
    limit = _LIMITS.get(name)
    if limit is None:
        return
    kind = limit[0]
    if kind == "str?":
        if value is not None and (type(value) is not str or "\n" in value or "\r" in value):
            raise ValueError(f"{name} must be None or one line of text, got {value!r}")
    elif kind == "str":
        if type(value) is not str or not value.strip():
            raise ValueError(f"{name} must be a non-empty str, got {value!r}")
        if "\n" in value or "\r" in value:
            raise ValueError(f"{name} must be one line, got {value!r}")
    elif kind == "bool":
        if type(value) is not bool:
            raise ValueError(f"{name} must be True or False, got {value!r}")
    else:
        lo, hi = limit[1], limit[2]
        if type(value) is not int or not lo <= value <= hi:
            what = "PermName bits " if name == "broker_permission" else ""
            raise ValueError(f"{name} must be an int in {what}[{lo}, {hi}], got {value!r}")
