"""The message types of the API: what you put, what you get back."""
from __future__ import annotations

from dataclasses import dataclass, field

from ._message import Message, MessageExt, PutResult  # noqa: F401  (compiled value types)
from .status import GetStatus, PutStatus  # noqa: F401

__all__ = ["Message", "MessageExt", "PutResult", "PutStatus", "GetStatus", "GetResult"]


@dataclass
class GetResult:
    """RocketMQ's GetMessageResult: status, the messages found, and where the next pull should begin."""
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False

    @property
    def message_count(self) -> int:
        """len(messages)."""
        return len(self.messages)
