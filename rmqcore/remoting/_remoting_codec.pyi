"""RemotingCommand frames, compiled (remoting_command.py holds the Python reference of each)."""

from typing import Any, final

from typing_extensions import Buffer

@final
class RemotingCommand:
    """One decoded request (or response): remoting_command.RemotingCommand's fields."""
    code: int
    language: str
    version: int
    opaque: int
    flag: int
    remark: Any
    ext_fields: dict[Any, Any]
    serialize_type: int
    body: bytes
    def astuple(self) -> tuple[Any, ...]: ...

def decode_frames(buf: Buffer, max_frame: int = ...) -> tuple[list[RemotingCommand], int]:
    """remoting_command.decode_frames: (the whole commands at the start of ``buf``, bytes they took)."""

@final
class FrameDecoder:
    """One connection's incoming bytes: ``feed(data)`` returns the commands completed so far, in order."""
    @property
    def max_frame(self) -> int: ...
    def __init__(self, max_frame: int = ...) -> None: ...
    @property
    def pending(self) -> int:
        """Bytes of a partial frame kept for the next feed."""
    def feed(self, data: Buffer) -> list[RemotingCommand]: ...

def encode_header(serialize_type: int, code: int, opaque: int, flag: int, remark: str | None,
                  ext_fields: dict[Any, Any] | None, body_length: int) -> bytes:
    """remoting_command.encode_header: length, type and header of an answer whose body follows."""
