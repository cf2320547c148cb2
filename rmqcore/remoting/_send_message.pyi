"""The remoting front's common send answered in one compiled call (RemotingConnection._send takes the rest)."""

from typing import Any, final

def send_response(serialize_type: int, opaque: int, msg_id: str, queue_id: int, queue_offset: int) -> bytes:
    """The SUCCESS answer to a send, as RemotingConnection._answer_send's reply writes it."""

@final
class SendMessage:
    """One RemotingServer's common send: ``send(conn, cmd)`` stores and answers it (True), or changes nothing
    (False) for the Python path to take."""
    def __init__(self, entries: dict[Any, Any], send: Any, refusals: tuple[Any, ...], server: Any,
                 on_messages_in: Any, answer_send: Any) -> None: ...
    def send(self, conn: Any, cmd: Any) -> bool: ...
    def count(self) -> None: ...
