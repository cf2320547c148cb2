"""The broker's refusals. Each carries ``code``, the name of the RocketMQ ResponseCode a Java broker answers with,
so a network front can map them one to one."""
from __future__ import annotations

from ..errors import ConfigFileError, RmqStoreError  # noqa: F401  (ConfigFileError: re-exported)


class BrokerError(RmqStoreError):
    """Base of every refusal of the broker layer."""

    code = "SYSTEM_ERROR"


class TopicNotExistError(BrokerError):
    code = "TOPIC_NOT_EXIST"


class SubscriptionGroupNotExistError(BrokerError):
    code = "SUBSCRIPTION_GROUP_NOT_EXIST"


class NoPermissionError(BrokerError):
    """The broker, the topic or the group does not allow the operation (PermName / consumeEnable)."""

    code = "NO_PERMISSION"


class IllegalNameError(BrokerError, ValueError):
    """A topic or group name RocketMQ's TopicValidator refuses."""

    code = "SYSTEM_ERROR"


class QueueIdIllegalError(BrokerError, ValueError):
    """A queue id outside the topic's queues."""

    code = "SYSTEM_ERROR"


class OffsetIllegalError(BrokerError, ValueError):
    """A consumer offset below 0 or past the queue's max offset."""

    code = "INVALID_PARAMETER"


class MessageNotFoundError(BrokerError):
    """send_back of a message the store no longer holds (RocketMQ: "look message by offset failed")."""

    code = "SYSTEM_ERROR"


class PutFailedError(BrokerError):
    """The store refused or failed a put the broker made on its own (a send-back); ``status`` is the PutStatus."""

    def __init__(self, message: str, status):
        super().__init__(message)
        self.status = status


class InvalidConfigError(BrokerError, ValueError):
    """A value of persisted broker state (a topic config, a subscription group, a broker setting) the broker could
    not read back from its file, refused when it is set: ``field`` names it (the file's dotted path or the
    attribute), the message the limit it broke."""

    code = "INVALID_PARAMETER"

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
