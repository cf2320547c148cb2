"""The record encoder: MessageEncoder, EncodeBuffer, BatchProperties, UniqKeyGenerator (compiled).

Stubs for the compiled module: keep each name in the order of rmqcore/_encoder.pyx; tests/test_typing.py checks
them against the module with mypy's stubtest.
"""

from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12
from collections.abc import Callable, Iterable
from typing import Any

from rmqcore._message import Message
from rmqcore.errors import MessageIllegalError as MessageIllegalError
from rmqcore.status import PutStatus as PutStatus
from rmqcore._codec import PROPERTIES_MAX_LENGTH as PROPERTIES_MAX_LENGTH
from rmqcore._codec import PROPERTY_UNIQ_KEY as PROPERTY_UNIQ_KEY
from rmqcore._codec import TOPIC_MAX_LENGTH as TOPIC_MAX_LENGTH

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
    reroute: Callable[..., object] | None
    append_prop_crc: bool
    """Called before a message with a delay or timer property is encoded (the schedule/timer topics): reroute(msg),
    or reroute(msg, False) for a delivery encoded with broker_topic_rule False."""
    def __init__(self, store_host: str = "127.0.0.1:10911", max_message_size: int = 4194304,
                 check_topic_chars: bool = True) -> None: ...
    def encode_into(self, msg: Message, out: EncodeBuffer, batch: BatchProperties | None = None,
                    broker_topic_rule: bool = True) -> int: ...
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
