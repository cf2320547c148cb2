"""A whole commitlog segment → column buffers (Arrow layout), verification, first timestamps."""

from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12
from collections.abc import Collection
from typing import Any

SEGMENT_COLUMNS: tuple[str, ...]
COLUMN_BITS: dict[str, int]
ALL_COLUMNS: int
BATCH_FULL: int
SEGMENT_BLANK: int
SEGMENT_END: int
MAX_BATCH_BYTES: int
SYNC_FOUND: int
SYNC_NONE: int
SYNC_MORE: int

def utf8_repair(data: Buffer) -> bytes:
    """``bytes(data).decode("utf-8", "replace").encode()`` by the decoder's own routine (for tests)."""
def format_host(data: Buffer) -> str:
    """The decoder's host text for 8 or 20 host bytes (for tests)."""
def decode_segment(data: Buffer, start: int = 0, end: int = -1, base_offset: int = 0, columns: int = ...,
                   max_rows: int = 8192, max_bytes: int = ..., check_crc: bool = True,
                   topics: Collection[bytes] | None = None, queue_ids: Collection[int] | None = None,
                   min_timestamp: int = ..., max_timestamp: int = ..., positions: Any = None,
                   stop: int = -1) -> dict[str, Any]:
    """Decode one bounded batch of rows: ``{"n", "next", "code", "scanned", "arrays"}``."""
def first_store_timestamp(data: Buffer, start: int = 0) -> int | None:
    """storeTimestamp (ms) of the record at ``start``, or None when no valid record starts there."""
def verify_segment(data: Buffer, base_offset: int = 0, end: int = -1, check_crc: bool = True,
                   max_bad: int = 1000) -> dict[str, Any]:
    """Walk every record checking structure and CRCs: ``{"records", "bytes", "code", "bad", "bad_total",
    "stray", "first_timestamp", "last_timestamp"}``."""
def sync_record(data: Buffer, start: int, stop: int, base_offset: int, file_end: int = -1,
                more_after: bool = False) -> tuple[int, int]:
    """The first record start in [start, stop): ``(position, SYNC_FOUND | SYNC_NONE | SYNC_MORE)``."""
def data_end(data: Buffer, start: int = 0) -> int:
    """Where the record chain from ``start`` ends (after the last complete record)."""
