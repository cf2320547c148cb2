"""CRC32 (IEEE, zlib-compatible) over include/'s hardware and table paths; RocketMQ's masked body CRC."""

from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

__all__ = ["crc32", "crc32_table", "crc32_with", "body_crc", "implementation", "implementations"]

def crc32(data: Buffer, value: int = 0) -> int:
    """zlib.crc32-compatible CRC32 of ``data``, continuing from ``value``, with the fastest implementation."""
def crc32_with(data: Buffer, value: int = 0, implementation: str = "table") -> int:
    """CRC32 with one named implementation (see ``implementations()``); for tests and benches."""
def crc32_table(data: Buffer, value: int = 0) -> int:
    """CRC32 by the portable slicing-by-8 table path."""
def implementations() -> list[str]:
    """The implementations this CPU can run ("table", "pclmul", "vpclmul", "armv8-crc")."""
def body_crc(data: Buffer) -> int:
    """RocketMQ's UtilAll.crc32 of a body: CRC32 ``& 0x7FFFFFFF``."""
def implementation() -> str:
    """The implementation ``crc32`` uses on this CPU."""
