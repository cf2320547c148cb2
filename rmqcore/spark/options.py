"""Option values as the Spark data sources read them (batch and stream alike): booleans, sizes with units, lists.
Below both sources, so neither imports the other for them."""
from __future__ import annotations

# Default splitSize (both sources cut tasks by it). Every task costs Spark ~65 ms of CPU whatever it reads (measured
# on PySpark 4.3, 2 vCPUs: ~40 ms in the JVM, ~25 ms in the Python worker; see bench/README, issue 13), about what
# rmqcore's decoder spends on 64 MiB of full rows or 300 MiB of narrow ones. 128 MiB halves that overhead against
# 64 MiB and still gives a 1 GiB segment eight tasks.
DEFAULT_SPLIT_SIZE = 128 << 20

def _bool(v, default: bool) -> bool:
    if v is None:
        return default
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {v!r}")


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_size(v, option: str) -> int:
    s = str(v).strip().lower()
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz ")
    unit = s[len(num):].strip()
    try:
        n = int(num) * _SIZE_UNITS[unit]
    except (ValueError, KeyError):
        raise ValueError(f"option {option}: {v!r} is not a size (bytes, or a number with k/m/g)") from None
    if n < 0:
        raise ValueError(f"option {option} must be >= 0, got {v!r}")
    return n


def _ints(v, option: str) -> list[int] | None:
    items = _csv(v)
    if items is None:
        return None
    try:
        return [int(x) for x in items]
    except ValueError:
        raise ValueError(f"option {option}: {v!r} is not a comma-separated list of integers") from None


def _csv(v) -> list[str] | None:
    if v is None or str(v).strip() == "":
        return None
    return [x.strip() for x in str(v).split(",") if x.strip()]
