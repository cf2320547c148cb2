"""Record encode/decode, Message/MessageExt/PutResult, the append callback and the pull loop (compiled).

Stubs for the compiled module: keep each name in the order of rmqcore/_codec.pyx; tests/test_typing.py checks
them against the module with mypy's stubtest.
"""

from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, final

from rmqcore._index_file import IndexFile
from rmqcore._mapped_file import MappedFile, WakeEvent
from rmqcore.errors import CorruptRecordError as CorruptRecordError
from rmqcore.errors import MessageIllegalError as MessageIllegalError
from rmqcore.status import PutStatus as PutStatus

PY_MESSAGE_MAGIC_CODE: int
PY_MESSAGE_MAGIC_CODE_V2: int
PY_BLANK_MAGIC_CODE: int
TOPIC_MAX_LENGTH: int
PROPERTIES_MAX_LENGTH: int
PROPERTY_KEYS: str
PROPERTY_TAGS: str
PROPERTY_UNIQ_KEY: str
PROPERTY_CRC32: str
KEY_SEPARATOR: str

def current_millis() -> int:
    """Milliseconds since the epoch (the store's clock)."""
def java_hash_code(s: str) -> int:
    """Java's String.hashCode of ``s`` (UTF-16 code units, 32-bit signed)."""
def tags_code(tags: str | None) -> int:
    """RocketMQ's tagsString2tagsCode: the Java hash of the tags, 0 when there are none."""
def string_to_properties(data: Buffer | str) -> dict[str, str]:
    """Parse RocketMQ's ``name\\x01value\\x02`` properties string."""
def properties_to_string(properties: Mapping[str, str]) -> str:
    """Format properties as RocketMQ's ``name\\x01value\\x02`` string."""
def host_to_bytes(host: str | tuple[str, int] | bytes) -> bytes:
    """"ip:port" → 8 bytes (IPv4) or 20 bytes (IPv6), as a record stores a host."""
def bytes_to_host(data: Buffer) -> str:
    """8 or 20 record host bytes → "ip:port"."""
def offset_msg_id(store_host: str | bytes, offset: int) -> str:
    """MessageDecoder.createMessageId: hex of the store host bytes + the 8-byte commitlog offset."""
def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """MessageDecoder.decodeMessageId: (store host "ip:port", commitlog offset)."""
def cal_msg_length(sys_flag: int, body_len: int, topic_len: int, props_len: int, version: int = 1) -> int:
    """The record size of a message with these lengths (RocketMQ's calMsgLength)."""
def record_error(code: int, offset: int, path: str | None = None) -> CorruptRecordError:
    """The CorruptRecordError for a negative parse code of the record at ``offset``."""

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

class UniqKeyGenerator:
    """Producer-side UNIQ_KEY generator (MessageClientIDSetter): ip + pid + class-loader hash + time + counter."""
    def __init__(self, ip: bytes) -> None: ...
    def next_key(self) -> str: ...

class EncodeBuffer:
    """Encoded records of a batch, back to back."""
    def clear(self) -> None: ...
    def __len__(self) -> int: ...
    def record(self, i: int) -> memoryview: ...
    def length(self, i: int) -> int: ...
    @property
    def max_length(self) -> int: ...

class BatchProperties:
    """Properties common to a put_batch's messages, validated and encoded once (MessageEncoder.batch_properties):
    each record is the one for ``msg.properties[name] = value`` for each of them in order (the batch's value
    wins); the messages' dicts are not changed."""
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Refused (TypeError): made by MessageEncoder.batch_properties only."""
    @property
    def properties(self) -> dict[str, str]: ...
    @property
    def encoded(self) -> bytes: ...

class MessageEncoder:
    """Validates and encodes Messages into records (outside the put lock)."""
    @property
    def max_message_size(self) -> int: ...
    @property
    def store_host_bytes(self) -> bytes: ...
    @property
    def uniq_keys(self) -> UniqKeyGenerator: ...
    reroute: Callable[[Message], object] | None
    append_prop_crc: bool
    """Called before a message with a delay or timer property is encoded (the schedule/timer topics)."""
    def __init__(self, store_host: str = "127.0.0.1:10911", max_message_size: int = 4194304,
                 check_topic_chars: bool = True) -> None: ...
    def encode_into(self, msg: Message, out: EncodeBuffer, batch: BatchProperties | None = None) -> int: ...
    def encode(self, msg: Message) -> bytes: ...
    def encode_batch(self, messages: Iterable[Message], out: EncodeBuffer | None = None,
                     properties: dict[str, str] | None = None) -> EncodeBuffer: ...
    def batch_properties(self, properties: dict[str, str]) -> BatchProperties:
        """Validate and encode properties common to a batch, once."""
    def encode_arrow(self, out: EncodeBuffer, nrows: int, topic_off: Buffer, topic_data: Buffer, queue_id: Buffer,
                     body_off: Buffer, body_data: Buffer, tags_valid: Buffer, tags_off: Buffer, tags_data: Buffer,
                     keys_valid: Buffer, keys_list: Buffer, key_valid: Buffer, key_off: Buffer, key_data: Buffer,
                     props_valid: Buffer, props_list: Buffer, pname_off: Buffer, pname_data: Buffer,
                     pvalue_valid: Buffer, pvalue_off: Buffer, pvalue_data: Buffer, born_ms: Buffer, flag: Buffer,
                     uniq_out: Buffer, uniq_off: Buffer, first_row: int = 0, check_only: bool = False,
                     uniq_valid: Buffer | None = None, uniq_in_off: Buffer | None = None,
                     uniq_in_data: Buffer | None = None, born_host_idx: Buffer | None = None,
                     host_table: Buffer | None = None, host_len: Buffer | None = None,
                     reconsume: Buffer | None = None) -> Any:
        """Encode ``nrows`` Arrow rows from the columns' raw buffers (no Python object per row)."""

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

class AppendMessageCallback:
    """Writes encoded records into a mapped file under the put lock, stamping queue offset, physical offset and
    store time; keeps the topic-queue table."""
    def __init__(self, store_host_bytes: bytes) -> None: ...
    @property
    def topic_queue_table(self) -> dict[tuple[str, int], int]: ...
    @topic_queue_table.setter
    def topic_queue_table(self, table: Mapping[tuple[str, int], int]) -> None: ...
    def append(self, mf: MappedFile, eb: EncodeBuffer, i: int = 0, store_timestamp: int = 0) -> Any: ...
    def append_batch(self, mf: MappedFile, eb: EncodeBuffer, start: int, results: list[Any],
                     store_timestamp: int = 0) -> Any: ...

def check_units(units: Buffer, first_index: int, files: list[MappedFile], file_size: int, topic: bytes, queue_id: int,
                min_phy_offset: int) -> int:
    """How many consume-queue units are whole before the first that does not point at its own record."""
def topic_is_dispatchable(name: str | bytes) -> bool:
    """Whether a topic read from a store may become consumequeue/{topic}: 1..255 bytes of well-formed UTF-8, not
    "." or "..", no control character, '/' or '\\'."""
def scan_records(data: Buffer, start: int = 0, end: int = -1, check_crc: bool = False,
                 base_offset: int = -1) -> tuple[int, int, int]:
    """Walk records without building objects: (end of the last good record, good records, stop code)."""

RESULT_OK: int
RESULT_BLANK: int
RESULT_END: int
SELECT_FOUND: int
SELECT_NO_MATCHED_MESSAGE: int
SELECT_MESSAGE_WAS_REMOVING: int

def look_record(files: list[MappedFile], file_size: int, offset: int, check_crc: bool = ...) -> MessageExt | None:
    """The zero-copy MessageExt of the record that starts at ``offset``, or None."""
def query_messages(index_files: list[IndexFile], files: list[MappedFile], file_size: int, topic: str, key: str,
                   max_num: int, begin: int, end: int | None, max_batch: int) -> list[MessageExt]:
    """DefaultMessageStore.queryMessage in one call: the messages of ``topic`` carrying ``key`` (KEYS or UNIQ_KEY)
    stored in [begin, end], newest index file first, at most ``max_num``, up to three rounds of at most
    min(max_num, max_batch) index hits."""
def select_messages(units: Buffer, files: list[MappedFile], file_size: int, max_count: int,
                    max_transfer_bytes: int, max_transfer_count: int, tag_codes: Collection[int] | None = None,
                    exact_tags: Collection[str] | None = None) -> tuple[list[MessageExt], int, int, int, int]:
    """Decode the messages consume-queue ``units`` point at: (messages, units consumed, status, bytes, max
    physical offset pulled)."""
def select_queue(queue_file: MappedFile, pos: int, files: list[MappedFile], file_size: int, max_count: int,
                 max_transfer_bytes: int, max_transfer_count: int, tag_codes: Collection[int] | None = None,
                 exact_tags: Collection[str] | None = None) -> tuple[list[MessageExt], int, int, int, int] | None:
    """select_messages over a consume-queue file's units from byte ``pos`` to its read position (None: nothing
    readable there)."""

class DispatchRing:
    """What the writer hands the dispatcher: each appended record without its body (a hint; the dispatcher scans
    the commitlog for records the ring lacks)."""
    def __new__(cls, size: int = 4194304) -> DispatchRing: ...
    @property
    def size(self) -> int: ...
    @property
    def dropped(self) -> int: ...
    @property
    def pending_bytes(self) -> int: ...

class CommitLogWriter:
    """The put path: encode, then under the put lock append (rolling files with a blank record)."""
    @property
    def callback(self) -> AppendMessageCallback: ...
    def __init__(self, encoder: MessageEncoder, callback: AppendMessageCallback, lock: threading.Lock,
                 mapped_file_queue: Any, max_record: int, file_size: int,
                 failed_result: Callable[[], PutResult]) -> None: ...
    @property
    def put_messages(self) -> int:
        """Messages every put path took (the store's put_calls)."""
    def reset(self) -> None: ...
    def set_dispatcher(self, arrivals: WakeEvent) -> None:
        """The dispatcher's event, poked after appends while it idles."""
    def set_dispatch_ring(self, ring: DispatchRing | None) -> None:
        """The dispatcher's ring: each record appended from now on is handed over in it."""
    def dispatcher_idle(self, idle: bool) -> None: ...
    def put(self, msg: Message) -> PutResult: ...
    def put_batch(self, messages: Iterable[Message], properties: dict[str, str] | None = None) -> list[PutResult]: ...
    def check_record_length(self, length: int, row: int) -> None:
        """MessageIllegalError (field ``body[row]``) when a record of ``length`` bytes cannot fit a file."""
    def put_arrow_rows(self, b: EncodeBuffer, result: Buffer, first_row: int = 0) -> Any:
        """Append records encoded by MessageEncoder.encode_arrow; per row (store time, commitlog offset, queue
        offset, size) into ``result``."""

def offset_in_queue_by_time(units: Buffer, low: int, files: list[MappedFile], file_size: int, timestamp: int,
                            min_physic_offset: int) -> int:
    """getOffsetInQueueByTime's search in one consume-queue file: a byte offset, or -1."""
def pickup_store_timestamp(files: list[MappedFile], file_size: int, offset: int, size: int) -> int:
    """The store time of the record of ``size`` bytes at ``offset``, or -1."""
