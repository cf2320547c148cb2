"""rmqcore: Apache RocketMQ's message store, byte for byte, with a Cython core.

Import direction is one way: store → services → commit_log / consume_queue / index_service → mapped_file_queue →
_mapped_file / _codec / _crc.
"""
from ._codec import Message, MessageExt, PutResult
from .config import StoreConfig
from .errors import (CorruptRecordError, MessageIllegalError, RmqStoreError, StoreClosedError, StoreLayoutError,
                     StoreLockedError)
from .message import GetResult
from .status import GetStatus, PutStatus

__version__ = "0.1.0"

__all__ = [
    "MessageStore", "CommitLog", "Message", "MessageExt", "PutResult", "GetResult", "PutStatus", "GetStatus",
    "StoreConfig",
    "RmqStoreError", "MessageIllegalError", "CorruptRecordError", "StoreLayoutError", "StoreClosedError",
    "StoreLockedError",
]


def __getattr__(name):
    # The store facade pulls in every service; load it on first use so the codec alone stays light to import.
    if name == "MessageStore":
        from .store import MessageStore
        return MessageStore
    if name == "CommitLog":
        from .commit_log import CommitLog
        return CommitLog
    raise AttributeError(f"module 'rmqcore' has no attribute {name!r}")
