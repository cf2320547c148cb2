"""Exceptions. Every one names what was wrong (the field, the file, the offset) and the limit it broke."""
import errno

from .status import PutStatus


class RmqStoreError(Exception):
    """Base of every error rmqcore raises on purpose."""


class MessageIllegalError(RmqStoreError, ValueError):
    """A message the store refuses, as RocketMQ refuses it; nothing was written.

    ``field`` names the offending part of the message, ``limit`` the rule it broke and ``status`` the
    PutMessageStatus RocketMQ would have answered with.
    """

    def __init__(self, field: str, message: str, limit=None, status: PutStatus = PutStatus.MESSAGE_ILLEGAL):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.limit = limit
        self.status = status


class CorruptRecordError(RmqStoreError):
    """A commitlog record that fails a structural or CRC check.

    ``offset`` is the record's global commitlog offset (or the offset in the buffer when decoding a loose buffer),
    ``field`` the field that is wrong.
    """

    def __init__(self, offset: int, field: str, message: str, path: str | None = None):
        where = f"{path} " if path else ""
        super().__init__(f"{where}record at offset {offset}: {field}: {message}")
        self.offset = offset
        self.field = field
        self.path = path


class StoreLayoutError(RmqStoreError):
    """A store directory that does not hold what RocketMQ would have written there (foreign files, gaps, sizes)."""


class StoreSpaceError(RmqStoreError, OSError):
    """Not enough free space on the store's filesystem for what an open must allocate; ``needed`` and ``free``
    are bytes (errno ENOSPC, so it is an OSError too)."""

    def __init__(self, message: str, needed: int, free: int):
        super().__init__(errno.ENOSPC, message)
        self.needed = needed
        self.free = free

    def __str__(self) -> str:
        return self.strerror


class StoreClosedError(RmqStoreError):
    """The store (or the mapped file) was closed."""


class StoreLockedError(RmqStoreError):
    """Another process or another MessageStore in this process holds the store's lock file."""


class ConfigFileError(RmqStoreError):
    """A config file under ``config/`` that cannot be read: ``path`` names the file, ``field`` the dotted path of
    the bad value (None when the file as a whole is unreadable)."""

    code = "SYSTEM_ERROR"

    def __init__(self, path: str, field: str | None, message: str):
        where = f"{path}: {field}" if field else path
        super().__init__(f"{where}: {message}")
        self.path = path
        self.field = field


class ReplicaError(RmqStoreError):
    """Bytes from a master that cannot continue this store's commitlog (MessageStore.append_to_commit_log): not at
    its max offset, across one of its file ends (the master's commitlog file size differs), or into a store that
    is no slave. ``offset`` is where the bytes were to go, ``expected`` where this store's log ends."""

    def __init__(self, message: str, offset: int = -1, expected: int = -1):
        super().__init__(message)
        self.offset = offset
        self.expected = expected


class BrokerRoleError(RmqStoreError):
    """An operation the store's broker_role forbids (a put into a SLAVE's store)."""
