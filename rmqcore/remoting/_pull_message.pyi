"""The remoting front's common pull answered in one compiled call (RemotingConnection._pull takes the rest)."""

from typing import Any, final

@final
class PullMessage:
    """One RemotingServer's common pull: ``pull(conn, cmd)`` answers it (True), or changes nothing (False) for the
    Python path to take."""
    def __init__(self, server: Any, broker: Any, validate_group: Any, on_messages_out: Any) -> None: ...
    def pull(self, conn: Any, cmd: Any) -> bool: ...
