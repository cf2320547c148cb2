"""RocketMQ's MixAll constants the broker needs: retry and dead-letter topic names, system groups, message
properties set by the broker."""
from __future__ import annotations

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
MASTER_ID = 0
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"

DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
FILTERSRV_CONSUMER_GROUP = "FILTERSRV_CONSUMER"
SELF_TEST_CONSUMER_GROUP = "SELF_TEST_C_GROUP"
ONS_HTTP_PROXY_GROUP = "CID_ONS-HTTP-PROXY"
CID_ONSAPI_PERMISSION_GROUP = "CID_ONSAPI_PERMISSION"
CID_ONSAPI_OWNER_GROUP = "CID_ONSAPI_OWNER"
CID_ONSAPI_PULL_GROUP = "CID_ONSAPI_PULL"
CID_RMQ_SYS_PREFIX = "CID_RMQ_SYS_"

# MessageConst property names the broker writes.
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"


def get_retry_topic(consumer_group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + consumer_group


def get_dlq_topic(consumer_group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + consumer_group


def is_sys_consumer_group(consumer_group: str) -> bool:
    return consumer_group.startswith(CID_RMQ_SYS_PREFIX)
