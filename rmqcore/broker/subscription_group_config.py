"""SubscriptionGroupConfig: one consumer group's switches and retry policy, as subscriptionGroup.json stores it."""
from __future__ import annotations

from .fastjson import Bean
from .mix_all import MASTER_ID

DEFAULT_RETRY_MAX_TIMES = 16


class SubscriptionGroupConfig(Bean):
    """RocketMQ's SubscriptionGroupConfig (4.9.7 fields). 5.x's consumeMessageOrderly, groupSysFlag,
    consumeTimeoutMinute, groupRetryPolicy, subscriptionDataSet and attributes stay in ``extra``."""

    FIELDS = (
        ("group_name", "groupName", "str", None),
        ("consume_enable", "consumeEnable", "bool", True),
        ("consume_from_min_enable", "consumeFromMinEnable", "bool", True),
        ("consume_broadcast_enable", "consumeBroadcastEnable", "bool", True),
        ("retry_queue_nums", "retryQueueNums", "int", 1),
        ("retry_max_times", "retryMaxTimes", "int", DEFAULT_RETRY_MAX_TIMES),
        ("broker_id", "brokerId", "long", MASTER_ID),
        ("which_broker_when_consume_slowly", "whichBrokerWhenConsumeSlowly", "long", 1),
        ("notify_consumer_ids_changed_enable", "notifyConsumerIdsChangedEnable", "bool", True),
    )

    def __init__(self, group_name: str | None = None, **values):
        super().__init__(group_name=group_name, **values)

    def to_json(self) -> dict:
        out = super().to_json()
        if out["groupName"] is None:
            del out["groupName"]
        return out
