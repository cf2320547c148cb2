"""Reads: the pull loop, look by offset, query by key, offsets by time, the consume-queue check (compiled).

Stubs for the compiled module: keep each name in the order of rmqcore/_pull.pyx; tests/test_typing.py checks
them against the module with mypy's stubtest.
"""

from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12
from collections.abc import Collection

from rmqcore._index_file import IndexFile
from rmqcore._mapped_file import MappedFile
from rmqcore._message import MessageExt


def check_units(units: Buffer, first_index: int, files: list[MappedFile], file_size: int, topic: bytes, queue_id: int,
                min_phy_offset: int) -> int:
    """How many consume-queue units are whole before the first that does not point at its own record."""

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

def offset_in_queue_by_time(units: Buffer, low: int, files: list[MappedFile], file_size: int, timestamp: int,
                            min_physic_offset: int) -> int:
    """getOffsetInQueueByTime's search in one consume-queue file: a byte offset, or -1."""

def pickup_store_timestamp(files: list[MappedFile], file_size: int, offset: int, size: int) -> int:
    """The store time of the record of ``size`` bytes at ``offset``, or -1."""
