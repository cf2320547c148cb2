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
    # Not a BrokerConfig field: what a Java producer sends as defaultTopicQueueNums in its send header
    # (DefaultMQProducer.defaultTopicQueueNums, 4); an auto-created topic gets min(this, TBW102's write queues).
    client_default_topic_queue_nums: int = 4

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        for name in ("default_topic_queue_nums", "client_default_topic_queue_nums"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}")
        if not isinstance(self.flush_consumer_offset_interval, int) or self.flush_consumer_offset_interval <= 0:
            raise ValueError(f"flush_consumer_offset_interval must be > 0 ms, got "
                             f"{self.flush_consumer_offset_interval!r}")
        if not 0 <= self.broker_permission <= 0xF:
            raise ValueError(f"broker_permission must be PermName bits (0..15), got {self.broker_permission}")

    def replace(self, **changes) -> "BrokerConfig":
        return dataclasses.replace(self, **changes)
