"""Helpers shared by the store tests."""
from __future__ import annotations

from rmqcore import GetStatus


def queue_messages(store, topic: str, queue_id: int = 0, group: str = "t") -> list:
    """Every message of one consume queue, from offset 0, as get_messages pages them (MessageExt objects)."""
    out, off = [], 0
    while True:
        g = store.get_messages(group, topic, queue_id, off, 32)
        if g.status is not GetStatus.FOUND:
            return out
        out += g.messages
        off = g.next_begin_offset
