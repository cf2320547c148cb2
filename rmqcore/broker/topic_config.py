"""TopicConfig: one topic's queues, permissions and flags, as topics.json stores it."""
from __future__ import annotations

from .fastjson import Bean
from .topic_validator import PERM_READ, PERM_WRITE, perm_to_string

TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
DEFAULT_READ_QUEUE_NUMS = 16
DEFAULT_WRITE_QUEUE_NUMS = 16


class TopicConfig(Bean):
    """RocketMQ's TopicConfig. JSON names are the Java getters' (fastjson); 5.x's ``attributes`` stays in
    ``extra``."""

    FIELDS = (
        ("topic_name", "topicName", "str", None),
        ("read_queue_nums", "readQueueNums", "int", DEFAULT_READ_QUEUE_NUMS),
        ("write_queue_nums", "writeQueueNums", "int", DEFAULT_WRITE_QUEUE_NUMS),
        ("perm", "perm", "int", PERM_READ | PERM_WRITE),
        ("topic_filter_type", "topicFilterType", TOPIC_FILTER_TYPES, "SINGLE_TAG"),
        ("topic_sys_flag", "topicSysFlag", "int", 0),
        ("order", "order", "bool", False),
    )

    def __init__(self, topic_name: str | None = None, **values):
        super().__init__(topic_name=topic_name, **values)

    def to_json(self) -> dict:
        out = super().to_json()
        if out["topicName"] is None:
            del out["topicName"]             # fastjson skips null fields
        return out

    @property
    def queue_id_limit(self) -> int:
        """Queue ids below this are valid (msgCheck: max of read and write queue numbers)."""
        return max(self.read_queue_nums, self.write_queue_nums)

    def __str__(self):
        return (f"TopicConfig [topicName={self.topic_name}, readQueueNums={self.read_queue_nums}, "
                f"writeQueueNums={self.write_queue_nums}, perm={perm_to_string(self.perm)}, "
                f"topicFilterType={self.topic_filter_type}, topicSysFlag={self.topic_sys_flag}, "
                f"order={str(self.order).lower()}]")
