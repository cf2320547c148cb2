"""rmqcore: Apache RocketMQ's message store, byte for byte, with a Cython core.

Import direction is one way: store → services → commit_log / consume_queue / index_service → mapped_file_queue →
the compiled core (_commit_log, _pull → _encoder → _message → _codec; _mapped_file, _index_file, _crc).
"""
from typing import TYPE_CHECKING

from ._message import Message, MessageExt, PutResult
from .config import StoreConfig
from .errors import (CorruptRecordError, MessageIllegalError, RmqStoreError, StoreClosedError, StoreLayoutError,
                     StoreLockedError)
from .message import GetResult
from .status import GetStatus, PutStatus

__version__ = "0.3.0.dev0"

__all__ = [
    "MessageStore", "CommitLog", "Message", "MessageExt", "PutResult", "GetResult", "PutStatus", "GetStatus",
    "StoreConfig",
    "RmqStoreError", "MessageIllegalError", "CorruptRecordError", "StoreLayoutError", "StoreClosedError",
    "StoreLockedError", "get_include",
]



def get_include() -> str:
    """The directory of the C headers rmqcore's .pxd files extern: add it to ``include_dirs`` to cimport
    rmqcore's modules from your own Cython code (an installed package ships them in rmqcore/include/, a
    source checkout keeps them in include/)."""
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    shipped = os.path.join(here, "include")
    return shipped if os.path.isdir(shipped) else os.path.join(os.path.dirname(here), "include")


if TYPE_CHECKING:
    # What type checkers and IDEs see: the real classes. At run time the two are imported on first use (below),
    # because the store pulls in numpy and asyncio, which would double ``import rmqcore``'s time for the codec.
    from .commit_log import CommitLog as CommitLog
    from .store import MessageStore as MessageStore
else:
    def __getattr__(name: str) -> type:
        if name == "MessageStore":
            from .store import MessageStore
            return MessageStore
        if name == "CommitLog":
            from .commit_log import CommitLog
            return CommitLog
        raise AttributeError(f"module 'rmqcore' has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(globals()) | {"MessageStore", "CommitLog"})
