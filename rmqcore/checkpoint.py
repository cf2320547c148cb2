"""StoreCheckpoint: the 4 KiB ``checkpoint`` file, RocketMQ's exact layout.

physicMsgTimestamp@0, logicsMsgTimestamp@8, indexMsgTimestamp@16 (ms, big-endian); 5.x adds
masterFlushedOffset@24 and confirmPhyOffset@32, read when present (a 4.x file holds zeros there).
"""
from __future__ import annotations

import mmap
import os
import struct

OS_PAGE_SIZE = 4096
_FIELDS = struct.Struct(">qqqqq")


class StoreCheckpoint:
    def __init__(self, path: str, *, read_only: bool = False):
        self.path = path
        self.read_only = read_only
        exists = os.path.exists(path)
        if read_only and not exists:
            raise FileNotFoundError(path)
        self._fd = os.open(path, os.O_RDONLY if read_only else (os.O_RDWR | os.O_CREAT), 0o644)
        size = os.fstat(self._fd).st_size
        if not read_only and size < OS_PAGE_SIZE:
            os.ftruncate(self._fd, OS_PAGE_SIZE)
            size = OS_PAGE_SIZE
        if size < 24:
            os.close(self._fd)
            raise ValueError(f"{path}: a checkpoint holds at least 24 bytes, this one has {size}")
        self._map = mmap.mmap(self._fd, min(size, OS_PAGE_SIZE),
                              access=mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE)
        raw = bytes(self._map[:40]).ljust(40, b"\0")
        (self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
         self.master_flushed_offset, self.confirm_phy_offset) = _FIELDS.unpack(raw)
        self._flushed = raw if size >= 40 else None     # what the file holds on disk

    @property
    def min_timestamp(self) -> int:
        """StoreCheckpoint.getMinTimestamp: min(physic, logics) less 3 s of margin, never negative."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    @property
    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp, self.index_msg_timestamp)

    def flush(self) -> None:
        if self.read_only:
            return
        data = _FIELDS.pack(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
                            self.master_flushed_offset, self.confirm_phy_offset)
        if data == self._flushed:
            return          # unchanged since the last msync: a close of an idle store pays no sync for it
        self._map[:40] = data
        self._map.flush()
        self._flushed = data

    def shutdown(self) -> None:
        if self._map is None:
            return
        self.flush()
        self._map.close()
        os.close(self._fd)
        self._map = None

    def as_dict(self) -> dict:
        return {"physic_msg_timestamp": self.physic_msg_timestamp,
                "logics_msg_timestamp": self.logics_msg_timestamp,
                "index_msg_timestamp": self.index_msg_timestamp,
                "master_flushed_offset": self.master_flushed_offset, "confirm_phy_offset": self.confirm_phy_offset}
