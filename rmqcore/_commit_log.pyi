"""The commitlog append path: AppendMessageCallback, CommitLogWriter, DispatchRing (compiled).

Stubs for the compiled module: keep each name in the order of rmqcore/_commit_log.pyx; tests/test_typing.py checks
them against the module with mypy's stubtest.
"""

from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rmqcore._encoder import EncodeBuffer, MessageEncoder
from rmqcore._mapped_file import MappedFile, WakeEvent
from rmqcore._message import Message, PutResult
from rmqcore.errors import MessageIllegalError as MessageIllegalError
from rmqcore.status import PutStatus as PutStatus

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
    def put_batch(self, messages: Iterable[Message], properties: dict[str, str] | None = None,
                  broker_topic_rule: bool = True) -> list[PutResult]: ...
    def check_record_length(self, length: int, row: int) -> None:
        """MessageIllegalError (field ``body[row]``) when a record of ``length`` bytes cannot fit a file."""
    def put_arrow_rows(self, b: EncodeBuffer, result: Buffer, first_row: int = 0) -> Any:
        """Append records encoded by MessageEncoder.encode_arrow; per row (store time, commitlog offset, queue
        offset, size) into ``result``."""
