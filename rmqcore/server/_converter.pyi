"""SendMessage's per-message work, compiled (converter.py holds the Python reference of each)."""

from collections.abc import Iterable, Sequence
from typing import Any

from rmqcore._message import Message

def to_store_message(m: Any, max_body: int = ...) -> tuple[Message, int]:
    """converter.to_store_message: a protocol Message → (store Message with queue_id -1, MessageType). Raises
    InvalidMessage."""
def to_store_messages(messages: Iterable[Any], max_body: int) -> list[tuple[Message, int]]:
    """converter.to_store_messages: a SendMessage request's messages → [(store Message, MessageType)], every body
    checked first (empty, or longer than ``max_body``). Raises InvalidMessage."""
def fill_send_entries(resp: Any, messages: Iterable[Any], converted: Sequence[tuple[Message, int]],
                      results: Sequence[Any]) -> tuple[list[int], int, str]:
    """converter.fill_send_entries: one SendResultEntry per message appended to ``resp.entries`` (all in one
    ``resp.MergeFromString``); returns (the body sizes of the messages stored, the code and text for the
    response's status: OK, or those of the last entry that failed)."""

class CommonSend:
    """SendMessage's common request (one NORMAL message to a topic the broker's send cache holds) converted,
    stored, answered and counted in one call; None, nothing changed, for any other request."""
    def __init__(self, entries: dict, topics_ok: set, other_types: Iterable[str], put: Any, rr: Any,
                 max_body: int, on_sent: Any, wake: Any, response_type: Any, seen: dict, producer_info: Any,
                 client: Any, on_rpc: Any, code_names: dict, internal_error: Any,
                 refusals: tuple[type[BaseException], ...]) -> None: ...
    def answer(self, req: Any, context: Any) -> Any: ...
