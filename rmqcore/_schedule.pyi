"""Delayed delivery in bulk: due SCHEDULE_TOPIC_XXXX records rebuilt as messageTimeup does, into an EncodeBuffer."""

from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

import numpy as np
import numpy.typing as npt

from rmqcore._encoder import EncodeBuffer, UniqKeyGenerator
from rmqcore._mapped_file import MappedFile

MAX_PAIRS: int

def time_up_into(out: EncodeBuffer, units: Buffer, start: int, files: list[MappedFile], file_size: int,
                 store_host: bytes, max_message_size: int, append_prop_crc: bool, reroute: bool,
                 uniq_keys: UniqKeyGenerator, unit_of: npt.NDArray[np.int64], topics: dict[str, str],
                 max_bytes: int = ..., timer: bool = ...) -> tuple[int, bool]:
    """Rebuild the records of the due units ``units[start:]`` into ``out``: ``(next, per_message)``."""

NO_RECORD: int

def timer_out_times(units: Buffer, files: list[MappedFile], file_size: int, out: npt.NDArray[np.int64]) -> None:
    """The TIMER_OUT_MS of the records of the timer-topic ``units`` into ``out`` (0: none readable, NO_RECORD: no
    record)."""

PROVENANCE_DELAYED: int
PROVENANCE_TIMED: int
PROVENANCE_COMMITTED: int
FACT_PHYS: int
FACT_SIZE: int
FACT_BORN_TS: int
FACT_BODY_CRC: int
FACT_BODY_LEN: int
FACT_FLAG: int
FACT_STORE_TS: int
FACT_PREPARED: int
FACT_COLUMNS: int

def scan_provenance(data: Buffer, base_offset: int, start: int, mode: int, out: npt.NDArray[np.int64],
                    end: int = ...) -> tuple[int, int, int]:
    """Rows of facts for the records ``mode`` asks for, from ``start``: ``(rows, next position, code)``."""

def record_keys(units: Buffer, files: list[MappedFile], file_size: int, out: npt.NDArray[np.int64]) -> None:
    """The facts of the records of ``units`` into ``out`` (FACT_SIZE -1: no record)."""
