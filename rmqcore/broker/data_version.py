"""DataVersion: the (timestamp, counter) pair topics.json and subscriptionGroup.json carry, bumped on every change
so that name servers and slaves can tell a newer table from an older one."""
from __future__ import annotations

import time

from ..fastjson import JAVA_LONG, Bean


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class DataVersion(Bean):
    # 5.x adds stateVersion; it is kept in ``extra`` when read and written back unchanged.
    FIELDS = (
        ("counter", "counter", "long", 0),
        ("timestamp", "timestamp", "long", None),
    )

    def __init__(self, **values):
        super().__init__(**values)
        if self.timestamp is None:
            self.timestamp = _now_ms()      # Java: System.currentTimeMillis() at construction

    def next_version(self) -> None:
        self.timestamp = _now_ms()
        self.counter = min(self.counter + 1, JAVA_LONG[1])

    def assign_new_one(self, other: "DataVersion") -> None:
        self.timestamp = other.timestamp
        self.counter = other.counter
        self.extra = dict(other.extra)


def same_version(a: dict | None, b: dict | None) -> bool:
    """DataVersion.equals over two DataVersion JSON objects (as a name server and a broker exchange them): the same
    timestamp and counter; 5.x's stateVersion is not compared, as 4.9.7 does not know it."""
    if a is None or b is None:
        return a is b
    return a.get("timestamp") == b.get("timestamp") and a.get("counter") == b.get("counter")
