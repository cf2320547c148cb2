"""The reput scan: commitlog records → consume-queue units and index key hashes, in bulk."""

from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from rmqcore._commit_log import DispatchRing
from rmqcore._index_file import IndexFile

SCHEDULE_TOPIC: str

class DispatchBatch:
    """One scan's records as parallel arrays (numpy) plus the index keys found."""
    @property
    def n(self) -> int: ...
    @property
    def nkeys(self) -> int: ...
    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def code(self) -> int: ...
    @property
    def last_store_ts(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def skipped_offsets(self) -> list[int]: ...
    @property
    def phys(self) -> npt.NDArray[np.int64]: ...
    @property
    def size(self) -> npt.NDArray[np.int32]: ...
    @property
    def tags_code(self) -> npt.NDArray[np.int64]: ...
    @property
    def store_ts(self) -> npt.NDArray[np.int64]: ...
    @property
    def queue_offset(self) -> npt.NDArray[np.int64]: ...
    @property
    def queue_id(self) -> npt.NDArray[np.int32]: ...
    @property
    def sys_flag(self) -> npt.NDArray[np.int32]: ...
    @property
    def topic_idx(self) -> npt.NDArray[np.int32]: ...
    @property
    def key_hash(self) -> npt.NDArray[np.int32]: ...
    @property
    def key_phys(self) -> npt.NDArray[np.int64]: ...
    @property
    def key_ts(self) -> npt.NDArray[np.int64]: ...
    @property
    def key_record(self) -> npt.NDArray[np.int32]: ...
    @property
    def topics(self) -> list[str]: ...

class ScanBuffers:
    """The arrays one scan fills, reused by the dispatcher from pass to pass."""
    def __init__(self, max_records: int, max_keys: int) -> None: ...
    @property
    def max_records(self) -> int: ...
    @property
    def max_keys(self) -> int: ...

def scan_for_dispatch(data: Buffer, base_offset: int, start: int = 0, end: int = -1, max_records: int = 8192,
                      max_keys: int = 32768, check_crc: bool = False, topic_ids: dict[str, int] | None = None,
                      topics: list[str] | None = None, delay_level_ms: Sequence[int] | None = None,
                      buffers: ScanBuffers | None = None) -> DispatchBatch:
    """Scan ``data`` (byte 0 is global ``base_offset``) from ``start`` into a DispatchBatch."""
def drain_dispatch_ring(ring: DispatchRing, from_offset: int, readable_end: int, max_records: int = 8192,
                        max_keys: int = 32768, topic_ids: dict[str, int] | None = None,
                        topics: list[str] | None = None, delay_level_ms: Sequence[int] | None = None,
                        buffers: ScanBuffers | None = None) -> DispatchBatch:
    """What scan_for_dispatch would find from ``from_offset``, taken from the writer's dispatch ring; ``n`` 0: the
    ring has no readable entry there (scan the commitlog)."""
def ring_next_offset(ring: DispatchRing, from_offset: int) -> int:
    """The commitlog offset of the ring's first entry at or after ``from_offset`` (-1: none); older ones dropped."""
def queue_runs(b: DispatchBatch, unit_dtype: np.dtype[Any],
               find_queue: Callable[[str, int], Any] | None = None,
               queues: dict[str, dict[int, Any]] | None = None) -> list[
        tuple[str, int, npt.NDArray[np.void], npt.NDArray[np.int64], npt.NDArray[np.int64], bool, int]]:
    """The batch's consumable records per (topic, queue id): (topic, queue_id, units, queue_offsets, ends,
    contiguous, last_store_ts); with ``find_queue``, the runs that continue their queue's last file are appended
    there and left out."""
def index_batch(b: DispatchBatch, f: IndexFile, start: int = 0) -> int:
    """IndexFile.put_hashes(skip_indexed=True) of the batch's keys from ``start`` on, read in place; how many were
    consumed (all unless ``f`` filled up)."""
