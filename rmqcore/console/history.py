"""MinuteHistory: per-topic and per-group rates and lag, a point a minute, kept across restarts for a bounded window
in one small file of the store's config directory (``config/consoleHistory.json``), for the console's topic and
group charts (rocketmq-dashboard's per-topic and per-group trends, without a database server).

Each point is read from what the store and the offsets already say, not from counters of this process: a topic's
stored messages are the sum of its queues' max offsets, a group's consumed messages the sum of its committed
offsets, its lag RocketMQ's (max - committed, per queue). So a rate between two points is right across a restart
(the gap is one wide step) and counts messages every path stored (gRPC, remoting, delays, resends, an embedded
producer). The file is rewritten whole each minute (a temporary name, then a rename): a crash loses at most the
minute being written, never the file; a file that does not parse is set aside, never fatal.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time

from ..config_manager import config_dir

log = logging.getLogger(__name__)

FILE_NAME = "consoleHistory.json"
STEP_S = 60                 # one point a minute
WINDOW_S = 24 * 3600        # a day of points per series
MAX_SERIES = 2048           # topics + groups tracked (3 series per group, 1 per topic); more are not recorded


class MinuteHistory:
    def __init__(self, broker, step_s: int = STEP_S, window_s: int = WINDOW_S, max_series: int = MAX_SERIES):
        self.broker = broker
        self.step_s = step_s
        self.window_s = window_s
        self.max_series = max_series
        self.path = os.path.join(config_dir(broker.path), FILE_NAME)
        self._lock = threading.Lock()
        self.series: dict[str, list[list[int]]] = {}     # key -> [[t_seconds, value], ...] oldest first
        self.dropped = 0                                 # series not recorded: past max_series
        self._load()

    # ------------------------------------------------------------------ the file
    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
            series = doc["series"]
            if not isinstance(series, dict):
                raise ValueError("series: not an object")
            self.series = {str(k): [[int(t), int(v)] for t, v in pts] for k, pts in series.items()}
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as e:
            # A chart's history is never worth refusing to start: keep the bad file aside and begin again.
            aside = f"{self.path}.bad-{int(time.time())}"
            try:
                os.replace(self.path, aside)
            except OSError:
                aside = "(could not be moved)"
            log.warning("console history %s unreadable (%s): set aside as %s, starting empty", self.path, e, aside)
            self.series = {}

    def save(self) -> None:
        with self._lock:
            doc = {"version": 1, "step_s": self.step_s, "series": self.series}
            text = json.dumps(doc, separators=(",", ":"))
        # one temporary name per thread: a sampler's save still running in its thread when the console stops
        # (cancelling the task does not stop the thread) meets the stop's own save
        tmp = f"{self.path}.{threading.get_ident()}.tmp"
        # a fresh store has no config/ until the broker first persists (at close): the console may save before
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, self.path)

    # ------------------------------------------------------------------ sampling
    def sample(self, now: float | None = None) -> None:
        """One point per series at ``now`` (seconds; rounded down to the step): a second sample in the same step
        replaces the first, so a restart within a minute leaves one point."""
        t = int((time.time() if now is None else now) // self.step_s * self.step_s)
        store = self.broker.store
        values: dict[str, int] = {}
        for topic, queue_ids in store.topics().items():
            values[f"topic:{topic}:stored"] = sum(max(store.max_offset(topic, q), 0) for q in queue_ids)
        com = self.broker.consumer_offset_manager
        for group in self.broker.groups():
            detail = self.broker.lag_detail(group)
            if not detail and not com.which_topic_by_consumer(group):
                continue
            values[f"group:{group}:consumed"] = sum(d["consumer_offset"] for qs in detail.values()
                                                    for d in qs.values())
            values[f"group:{group}:lag"] = sum(d["diff"] for qs in detail.values() for d in qs.values())
        cutoff = t - self.window_s
        with self._lock:
            for key, value in values.items():
                pts = self.series.get(key)
                if pts is None:
                    if len(self.series) >= self.max_series:
                        self.dropped += 1
                        continue
                    pts = self.series[key] = []
                if pts and pts[-1][0] == t:
                    pts[-1][1] = value
                else:
                    pts.append([t, value])
            for key in list(self.series):
                pts = self.series[key]
                while pts and pts[0][0] <= cutoff:
                    pts.pop(0)
                if not pts:
                    del self.series[key]

    # ------------------------------------------------------------------ reading
    def _points(self, key: str, seconds: int) -> list[list[int]]:
        with self._lock:
            pts = [list(p) for p in self.series.get(key, ())]
        if pts:
            start = pts[-1][0] - seconds
            pts = [p for p in pts if p[0] >= start]
        return pts

    @staticmethod
    def _rates(pts) -> tuple[list[int], list[float]]:
        """Messages per second between consecutive points (a counter that went down — offsets reset, a topic
        deleted and made again — counts 0, not a negative rate)."""
        t, r = [], []
        for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
            t.append(t1 * 1000)
            r.append(round(max(v1 - v0, 0) / max(t1 - t0, 1), 3))
        return t, r

    def topic(self, topic: str, seconds: int = WINDOW_S) -> dict:
        """``t`` (ms), ``in``: messages stored per second, per step, over the last ``seconds``."""
        t, rate = self._rates(self._points(f"topic:{topic}:stored", seconds))
        return {"topic": topic, "step_s": self.step_s, "t": t, "in": rate}

    def group(self, group: str, seconds: int = WINDOW_S) -> dict:
        """``t`` (ms), ``consumed``: messages committed per second, ``lag`` at each point after the first."""
        pts = self._points(f"group:{group}:consumed", seconds)
        t, rate = self._rates(pts)
        lag = dict((a, b) for a, b in self._points(f"group:{group}:lag", seconds))
        return {"group": group, "step_s": self.step_s, "t": t, "consumed": rate,
                "lag": [lag.get(ms // 1000) for ms in t]}
