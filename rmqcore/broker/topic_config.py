"""TopicConfig: one topic's queues, permissions and flags, as topics.json stores it.

5.x adds ``attributes`` (Map<String, String>), where the topic's message type lives as ``"message.type"``
(TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE); TopicConfig.getTopicMessageType reads it, NORMAL when absent, and is
not itself serialized (@JSONField(serialize = false)). A 4.9.7 file has no ``attributes``: ``attributes`` is then
None and nothing is written for it, so such a file is written back as it was.
"""
from __future__ import annotations

from ..fastjson import Bean, FieldError, check_map, check_str
from .topic_validator import PERM_READ, PERM_WRITE, perm_to_string

TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
DEFAULT_READ_QUEUE_NUMS = 16
DEFAULT_WRITE_QUEUE_NUMS = 16
# TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE's name and TopicMessageType's values (5.3.3).
MESSAGE_TYPE_ATTRIBUTE = "message.type"
TOPIC_MESSAGE_TYPES = ("UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")


def check_attributes(raw, where: str) -> dict[str, str]:
    """A Map<String, String> as topics.json holds it: an object of strings (FieldError naming the entry)."""
    check_map(raw, where)
    for k, v in raw.items():
        if not isinstance(k, str):
            raise FieldError(where, f"key {k!r} is not a string")
        check_str(v, f"{where}.{k}")
    return dict(raw)


class TopicConfig(Bean):
    """RocketMQ's TopicConfig. JSON names are the Java getters' (fastjson). ``attributes``: 5.x's map (None for a
    topic without one, as 4.9.7 writes it); ``message_type``: the topic's TopicMessageType."""

    FIELDS = (
        ("topic_name", "topicName", "str", None),
        ("read_queue_nums", "readQueueNums", "int", DEFAULT_READ_QUEUE_NUMS),
        ("write_queue_nums", "writeQueueNums", "int", DEFAULT_WRITE_QUEUE_NUMS),
        ("perm", "perm", "int", PERM_READ | PERM_WRITE),
        ("topic_filter_type", "topicFilterType", TOPIC_FILTER_TYPES, "SINGLE_TAG"),
        ("topic_sys_flag", "topicSysFlag", "int", 0),
        ("order", "order", "bool", False),
    )

    def __init__(self, topic_name: str | None = None, *, attributes: dict[str, str] | None = None,
                 message_type: str | None = None, **values):
        super().__init__(topic_name=topic_name, **values)
        self.attributes = dict(attributes) if attributes is not None else None
        if message_type is not None:
            self.message_type = message_type

    @classmethod
    def from_json(cls, obj, where: str):
        tc = super().from_json(obj, where)
        raw = tc.extra.pop("attributes", None)
        if raw is not None:                      # null is as good as absent (fastjson leaves the default)
            tc.attributes = check_attributes(raw, f"{where}.attributes")
        return tc

    def to_json(self) -> dict:
        out = super().to_json()
        if out["topicName"] is None:
            del out["topicName"]             # fastjson skips null fields
        if self.attributes is not None:
            out["attributes"] = dict(self.attributes)
        return out

    def copy(self):
        c = super().copy()
        c.attributes = dict(self.attributes) if self.attributes is not None else None
        return c

    @property
    def message_type(self) -> str:
        """TopicConfig.getTopicMessageType: the ``message.type`` attribute, "NORMAL" when there is none."""
        if not self.attributes:
            return "NORMAL"
        return self.attributes.get(MESSAGE_TYPE_ATTRIBUTE, "NORMAL")

    @message_type.setter
    def message_type(self, value: str) -> None:
        # setTopicMessageType: puts the attribute (the map is created for a topic read from a 4.9.7 file).
        if value not in TOPIC_MESSAGE_TYPES:
            raise ValueError(f"message_type: {value!r} is not one of {', '.join(TOPIC_MESSAGE_TYPES)}")
        attributes = dict(self.attributes or {})
        attributes[MESSAGE_TYPE_ATTRIBUTE] = value
        self.attributes = attributes

    @property
    def queue_id_limit(self) -> int:
        """Queue ids below this are valid (msgCheck: max of read and write queue numbers)."""
        return max(self.read_queue_nums, self.write_queue_nums)

    def __str__(self):
        return (f"TopicConfig [topicName={self.topic_name}, readQueueNums={self.read_queue_nums}, "
                f"writeQueueNums={self.write_queue_nums}, perm={perm_to_string(self.perm)}, "
                f"topicFilterType={self.topic_filter_type}, topicSysFlag={self.topic_sys_flag}, "
                f"order={str(self.order).lower()}" +
                (f", attributes={self.attributes}]" if self.attributes is not None else "]"))
