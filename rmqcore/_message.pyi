"""The message types: Message, MessageExt, PutResult, and the decoders that make MessageExts (compiled).

Stubs for the compiled module: keep each name in the order of rmqcore/_message.pyx; tests/test_typing.py checks
them against the module with mypy's stubtest.
"""

from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, final

from rmqcore._codec import tags_code
from rmqcore.errors import CorruptRecordError as CorruptRecordError
from rmqcore.errors import MessageIllegalError as MessageIllegalError
from rmqcore.status import PutStatus as PutStatus
from rmqcore._codec import KEY_SEPARATOR as KEY_SEPARATOR
from rmqcore._codec import PROPERTY_KEYS as PROPERTY_KEYS
from rmqcore._codec import PROPERTY_TAGS as PROPERTY_TAGS
from rmqcore._codec import PROPERTY_UNIQ_KEY as PROPERTY_UNIQ_KEY

class Message:
    """A message to put: topic, body, queue id and RocketMQ's properties (TAGS, KEYS, UNIQ_KEY, ...)."""
    topic: str
    body: Buffer
    queue_id: int
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: str | None
    reconsume_times: int
    prepared_transaction_offset: int
    properties: dict[str, str]
    def __init__(self, topic: str, body: Buffer = b"", queue_id: int = 0, tags: str | None = None,
                 keys: str | Iterable[str] | None = None, properties: Mapping[str, str] | None = None, *,
                 flag: int = 0, sys_flag: int = 0, born_timestamp: int = 0, born_host: str | None = None,
                 reconsume_times: int = 0, prepared_transaction_offset: int = 0) -> None: ...
    @property
    def tags(self) -> str | None:
        """The TAGS property."""
    @tags.setter
    def tags(self, value: str | None) -> None: ...
    @property
    def keys(self) -> list[str]:
        """The KEYS property split at spaces."""
    @keys.setter
    def keys(self, value: str | Iterable[str] | None) -> None: ...
    @property
    def uniq_key(self) -> str | None:
        """The UNIQ_KEY property (set by the store at put when absent)."""

class MessageExt:
    """A stored message decoded zero-copy from its record: every record field. ``body`` is a memoryview into the
    mapped file, valid while this object (or the view) is held."""
    @property
    def topic(self) -> str: ...
    @property
    def store_size(self) -> int: ...
    @property
    def magic_code(self) -> int: ...
    @property
    def version(self) -> int: ...
    @property
    def body_crc(self) -> int: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def flag(self) -> int: ...
    @property
    def queue_offset(self) -> int: ...
    @property
    def commitlog_offset(self) -> int: ...
    @property
    def sys_flag(self) -> int: ...
    @property
    def born_timestamp(self) -> int: ...
    @property
    def store_timestamp(self) -> int: ...
    @property
    def reconsume_times(self) -> int: ...
    @property
    def prepared_transaction_offset(self) -> int: ...
    @property
    def body(self) -> memoryview: ...
    @property
    def born_host(self) -> str: ...
    @property
    def store_host(self) -> str: ...
    @property
    def msg_id(self) -> str:
        """The offset msg id: store host + this record's physical offset."""
    @property
    def properties(self) -> dict[str, str]: ...
    @property
    def tags(self) -> str | None: ...
    @property
    def tags_code(self) -> int: ...
    @property
    def keys(self) -> list[str]: ...
    @property
    def uniq_key(self) -> str | None: ...
    @property
    def transaction_type(self) -> int:
        """sysFlag's transaction bits: 0 not a transaction, 0x4 prepared, 0x8 commit, 0xC rollback."""
    def record(self) -> memoryview:
        """Zero-copy view of the whole record."""
    def as_dict(self) -> dict[str, Any]:
        """Every field, the body as bytes."""

def record_views(messages: list[MessageExt]) -> list[memoryview]:
    """[m.record() for m in messages] in one call: a pull's body, each record a zero-copy view of its file."""

def decode_message(data: Buffer, offset: int = 0, check_crc: bool = False, base_offset: int = 0) -> MessageExt:
    """Decode the record at ``offset`` of ``data``; CorruptRecordError naming the field when it is not one."""

@final
class RecordIterator:
    """Iterate the messages of ``data`` from ``start`` to the end of data or a blank record."""
    @property
    def position(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def hit_blank(self) -> bool: ...
    def __init__(self, data: Buffer, start: int = 0, end: int = -1, check_crc: bool = False,
                 base_offset: int = 0) -> None: ...
    def __iter__(self) -> Iterator[MessageExt]: ...
    def __next__(self) -> MessageExt: ...

class PutResult:
    """RocketMQ's PutMessageResult + AppendMessageResult: status, where the record went, when."""
    @property
    def status(self) -> PutStatus: ...
    @property
    def commitlog_offset(self) -> int: ...
    @property
    def queue_offset(self) -> int: ...
    @property
    def wrote_bytes(self) -> int: ...
    @property
    def store_timestamp(self) -> int: ...
    @property
    def uniq_key(self) -> str | None: ...
    def __init__(self, status: PutStatus, commitlog_offset: int = -1, queue_offset: int = -1, wrote_bytes: int = 0,
                 store_timestamp: int = 0, uniq_key: str | None = None, store_host: bytes | None = None) -> None: ...
    @property
    def ok(self) -> bool:
        """True for PUT_OK."""
    @property
    def msg_id(self) -> str | None:
        """The offset msg id (store host + commitlog offset); None when nothing was written."""
    def replace_status(self, status: PutStatus) -> PutResult:
        """A copy with another status (e.g. FLUSH_DISK_TIMEOUT)."""
