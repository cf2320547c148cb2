"""The commitlog record layout and codec: parse, properties, hosts and ids, Java hashes, the record walk (compiled).

Stubs for the compiled module: keep each name in the order of rmqcore/_codec.pyx; tests/test_typing.py checks
them against the module with mypy's stubtest.
"""

from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12
from collections.abc import Mapping

from rmqcore.errors import CorruptRecordError as CorruptRecordError

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

def topic_is_dispatchable(name: str | bytes) -> bool:
    """Whether a topic read from a store may become consumequeue/{topic}: 1..255 bytes of well-formed UTF-8, not
    "." or "..", no control character, '/' or '\\'."""

def scan_records(data: Buffer, start: int = 0, end: int = -1, check_crc: bool = False,
                 base_offset: int = -1) -> tuple[int, int, int]:
    """Walk records without building objects: (end of the last good record, good records, stop code)."""

RESULT_OK: int
RESULT_BLANK: int
RESULT_END: int
