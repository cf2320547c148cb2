"""TopicValidator and PermName: legal topic and group names, RocketMQ's system topics, permission bits."""
from __future__ import annotations

import re

from .errors import IllegalNameError
from .mix_all import is_sys_consumer_group

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
RMQ_SYS_SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_SCHEDULE_TOPIC_V2 = "SCHEDULE_TOPIC_XXXX_V2"
RMQ_SYS_BENCHMARK_TOPIC = "BenchmarkTest"
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
RMQ_SYS_SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
RMQ_SYS_OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"

TOPIC_MAX_LENGTH = 127
# The client's Validators.CHARACTER_MAX_LENGTH, the longest group name.
GROUP_MAX_LENGTH = 255

SYSTEM_TOPICS = frozenset({
    AUTO_CREATE_TOPIC_KEY_TOPIC, RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_BENCHMARK_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRACE_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, RMQ_SYS_SELF_TEST_TOPIC,
    RMQ_SYS_OFFSET_MOVED_EVENT, RMQ_SYS_SCHEDULE_TOPIC_V2,
})
# Producers may not send to these; the broker writes them itself.
NOT_ALLOWED_SEND_TOPICS = frozenset({
    RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC,
    RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, RMQ_SYS_SELF_TEST_TOPIC, RMQ_SYS_OFFSET_MOVED_EVENT, RMQ_SYS_SCHEDULE_TOPIC_V2,
})

_VALID = re.compile(r"[%|a-zA-Z0-9_-]+")


def is_topic_or_group_illegal(name: str) -> bool:
    """RocketMQ's isTopicOrGroupIllegal: anything outside ^[%|a-zA-Z0-9_-]+$."""
    return _VALID.fullmatch(name) is None


def _validate_name(kind: str, name, max_length: int) -> str:
    # TopicValidator.validateTopic / validateGroup: blank, then the characters, then the length.
    if not isinstance(name, str) or not name.strip():
        raise IllegalNameError(f"{kind}: the specified {kind} is blank ({name!r})")
    if is_topic_or_group_illegal(name):
        raise IllegalNameError(f"{kind} {name[:140]!r}: contains illegal characters, allowing only "
                               "^[%|a-zA-Z0-9_-]+$")
    if len(name) > max_length:
        raise IllegalNameError(f"{kind} {name[:40]!r}...: {len(name)} characters, longer than the {kind} max "
                               f"length {max_length}")
    return name


def validate_topic(topic) -> str:
    """The topic, or IllegalNameError saying which rule it broke (as TopicValidator.validateTopic)."""
    return _validate_name("topic", topic, TOPIC_MAX_LENGTH)


def validate_group(group) -> str:
    """The group, or IllegalNameError saying which rule it broke."""
    return _validate_name("group", group, GROUP_MAX_LENGTH)


def is_system_topic(topic: str) -> bool:
    """TopicValidator.isSystemTopic: SYSTEM_TOPIC_SET or the ``rmq_sys_`` prefix (the timer wheel's
    ``rmq_sys_wheel_timer``, the revive and trace topics of 5.x). ``%RETRY%``/``%DLQ%`` topics are not system
    topics: RocketMQ lets clients reach them under the group's permission."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def validate_client_topic(topic) -> str:
    """A topic a client names over the network (gRPC, the console's reads): ``validate_topic``'s rules, then
    no system topic, as RocketMQ 5's proxy (GrpcValidator.validateTopic: ILLEGAL_TOPIC "cannot access system
    topic") answers on every client RPC. Raises IllegalNameError."""
    validate_topic(topic)
    if is_system_topic(topic):
        raise IllegalNameError(f"topic {topic!r}: cannot access system topic")
    return topic


def validate_client_group(group) -> str:
    """A consumer group a client names: ``validate_group``'s rules, then none of the broker's own
    (GrpcValidator.validateConsumerGroup: MixAll.isSysConsumerGroup, "cannot use system consumer group")."""
    validate_group(group)
    if is_sys_consumer_group(group):
        raise IllegalNameError(f"group {group!r}: cannot use system consumer group")
    return group


def is_not_allowed_send_topic(topic: str) -> bool:
    return topic in NOT_ALLOWED_SEND_TOPICS


# PermName
PERM_PRIORITY = 0x1 << 3
PERM_READ = 0x1 << 2
PERM_WRITE = 0x1 << 1
PERM_INHERIT = 0x1


def is_readable(perm: int) -> bool:
    return (perm & PERM_READ) == PERM_READ


def is_writeable(perm: int) -> bool:
    return (perm & PERM_WRITE) == PERM_WRITE


def is_inherited(perm: int) -> bool:
    return (perm & PERM_INHERIT) == PERM_INHERIT


def perm_to_string(perm: int) -> str:
    return ("R" if is_readable(perm) else "-") + ("W" if is_writeable(perm) else "-") + \
        ("X" if is_inherited(perm) else "-")
