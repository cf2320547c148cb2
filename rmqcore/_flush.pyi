"""GroupCommit: SYNC_FLUSH's leader/follower group commit in C, without the GIL.

Stubs for the compiled module: tests/test_typing.py checks them against rmqcore/_flush.pyx with mypy's stubtest.
"""
import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any

from rmqcore._message import Message, PutResult
from rmqcore._mapped_file import MappedFile

FLUSHED: int
TIMEOUT: int
FAILED: int
CLOSED: int
STOPPED: int
CALLBACK: object

class GroupCommit:
    """The flushed offset of one commitlog and the puts waiting for it: the first put needing the disk leads
    the flush, later ones wait behind it and are released together."""
    @property
    def flushed_store_timestamp(self) -> int: ...
    @property
    def last_error(self) -> str | None: ...
    def __new__(cls, flushed: int = 0, flush_all: Callable[[], tuple[int, MappedFile | None]] | None = None,
                mf: MappedFile | None = None) -> GroupCommit: ...
    def set_file(self, mf: MappedFile | None) -> None:
        """The file holding the flushed offset."""
    def sync(self, offset: int, timeout: float) -> int:
        """Lead or wait for the flush covering ``offset``: FLUSHED, TIMEOUT, FAILED or CLOSED."""
    def wait_flushed(self, offset: int, timeout: float) -> int:
        """The same as sync (its former name)."""
    def wait_only(self, offset: int, timeout: float) -> int:
        """Wait for a flush covering ``offset`` without leading one: FLUSHED, TIMEOUT, FAILED or CLOSED."""
    def request(self, offset: int) -> None: ...
    def wait_arrival(self, seen: int, timeout: float) -> int: ...
    @property
    def arrivals(self) -> int: ...
    def serve(self) -> int: ...
    def publish(self, offset: int) -> None: ...
    def fail(self) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...
    @property
    def linger_ns(self) -> int:
        """How long a leader waits at most for as many requests as its last flush covered (0: never)."""
    @linger_ns.setter
    def linger_ns(self, ns: int) -> None: ...
    @property
    def spin_ns(self) -> int:
        """How long a blocking put woken on deck spins at most for its turn (0: puts woken one at a time)."""
    @spin_ns.setter
    def spin_ns(self, ns: int) -> None: ...
    @property
    def catches(self) -> int:
        """Turns a put on deck caught while spinning."""
    @property
    def flushed_where(self) -> int: ...
    @property
    def requested(self) -> int: ...
    @property
    def flushes(self) -> int: ...
    @property
    def led_by_puts(self) -> int: ...
    @property
    def served(self) -> int: ...
    @property
    def flush_time_ns(self) -> int:
        """How long a flush takes, a moving average (ns)."""
    @property
    def stalls(self) -> int:
        """Covered puts that woke on their own timer (no put after them passed them the baton)."""
    @property
    def failures(self) -> int: ...
    @property
    def closed(self) -> bool: ...

def complete_all(calls: list[Any]) -> None:
    """Complete a flush's share of one event loop's futures, in that loop: (target, result, flushed) per entry."""

class FlushedFutures:
    """put_async / aput completions of a GroupCommit, completed by ``run`` (the completer thread) as flushes cover
    them."""
    stopped: bool
    def __new__(cls, core: GroupCommit) -> FlushedFutures: ...
    def add(self, offset: int, timeout: float, target: Any, result: Any = ...,
            loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Complete ``target`` (a future: ``result``, or FLUSH_DISK_TIMEOUT in its place; a callback: the flag)
        once a flush covers ``offset``, in ``loop`` when given."""
    def __len__(self) -> int: ...
    def run(self) -> None:
        """The completer thread's loop."""

class DurablePuts:
    timeout: float
    def __init__(self, append: Callable[[Message], PutResult], core: GroupCommit, completer: Callable[[], FlushedFutures],
                 timed_out: Callable[[PutResult], PutResult], timeout: float) -> None: ...
    def put(self, msg: Message) -> PutResult: ...
    def put_async(self, msg: Message) -> concurrent.futures.Future[PutResult]: ...
    def aput(self, msg: Message) -> asyncio.Future[PutResult]: ...
