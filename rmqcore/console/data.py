"""ConsoleData: what the console's pages, its JSON API and its metrics read from a running server, and the admin
actions they may take. Every answer is a plain JSON-able dict, so a page and ``/api/v1/...`` show the same figures.

Nothing here walks the whole store: a list is a page of names (topics and groups live in memory), a queue's figures
are its min/max offsets, a search goes through the index (by key), a record's header (by message id) or a binary
search of store times over each queue's units (by time), and at most ``limit`` messages are decoded per answer. So
an answer costs the same on a store of ten messages and one of ten million.

The server object is the contract with ``rmqcore serve``: ``broker`` (rmqcore.broker.Broker), ``events``
(rmqcore.serve.events.ServerEvents), ``inflight(group) -> {(topic, queue_id): n}``, ``host``/``port`` and ``acl``.
"""
from __future__ import annotations

import base64
import binascii
import datetime
import heapq
import json
import os
import random
import shutil
import threading
import time
from collections import deque

from ..admin import parse_time_ms
from .._codec import decode_offset_msg_id
from .._message import Message
from ..broker.errors import PutFailedError
from ..compression import COMPRESSED_FLAG, COMPRESSION_TYPE_COMPARATOR, DecompressionError, compression_name, \
    decompress, producer_body
from ..broker.mix_all import (DLQ_GROUP_TOPIC_PREFIX, PROPERTY_DELAY_TIME_LEVEL, PROPERTY_RETRY_TOPIC,
                              RETRY_GROUP_TOPIC_PREFIX, get_dlq_topic, get_retry_topic)
from ..broker.subscription_group_config import SubscriptionGroupConfig
from ..broker.topic_config import TopicConfig
from ..broker.transaction import unresolved_halves
from ..broker.topic_validator import (PERM_READ, PERM_WRITE, is_system_topic, perm_to_string, validate_group,
                                      validate_topic)
from ..admin_views import group_view, not_found, record_crc_view, topic_view
from ..status import PutStatus

# Page sizes: what a person reads on one screen; the API accepts up to MAX_LIMIT.
DEFAULT_LIMIT = 50
UNRESOLVED_CONSOLE_READ = 200       # unresolved halves an overview reads to name their producer groups
MAX_LIMIT = 200
# A body is shown up to these sizes (the full body is never sent to the page; the API says it was cut).
TEXT_PREVIEW_BYTES = 64 * 1024
HEX_PREVIEW_BYTES = 4 * 1024
JSON_PREVIEW_BYTES = 1024 * 1024
# Queue numbers a topic or group may be given from the console (RocketMQ's tools refuse none, but a queue is a
# directory and a few files: a typo of 100000 would make that many).
MAX_QUEUE_NUMS = 1024
MAX_RETRY_TIMES = 1000
# RocketMQ 5's message types, as the topic attribute ``message.type`` names them.
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")
# Seconds of history kept for the overview's charts (one sample a second).
HISTORY_SECONDS = 600
# Topic rates are the change over this many seconds.
RATE_WINDOW = 10


class ConsoleError(Exception):
    """A request the console refuses: ``status`` is the HTTP status to answer, the message says why."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class NotFound(ConsoleError):
    def __init__(self, message: str):
        super().__init__(message, 404)


def fmt_ms(ms: int | None) -> str | None:
    """Milliseconds since the epoch as UTC ISO 8601 with milliseconds, None for none."""
    if ms is None or ms <= 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def parse_time(value, field: str) -> int | None:
    """Milliseconds since the epoch from an int, a digit string, or an ISO 8601 time (UTC when it has no zone;
    what a datetime-local input sends). None/"" is None."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ConsoleError(f"{field}: expected milliseconds or an ISO 8601 time, got {value!r}")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    try:
        return parse_time_ms(text)
    except ValueError:
        raise ConsoleError(f"{field}: {text[:60]!r} is neither milliseconds nor an ISO 8601 time") from None


def int_arg(value, field: str, lo: int, hi: int, default: int | None = None) -> int:
    """An int in [lo, hi] from a JSON number or a query string; ConsoleError naming the field and the range."""
    if value is None or value == "":
        if default is None:
            raise ConsoleError(f"{field}: required (an integer in [{lo}, {hi}])")
        return default
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str)
                                                                   and value.strip().lstrip("-").isdigit())):
        raise ConsoleError(f"{field}: expected an integer in [{lo}, {hi}], got {str(value)[:40]!r}")
    n = int(value)
    if not lo <= n <= hi:
        raise ConsoleError(f"{field}: {n} is outside [{lo}, {hi}]")
    return n


def bool_arg(value, field: str, default: bool) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "on", "1", "yes"):
        return True
    if text in ("false", "off", "0", "no"):
        return False
    raise ConsoleError(f"{field}: expected true or false, got {str(value)[:40]!r}")


def topic_message_type(tc: TopicConfig) -> str:
    """RocketMQ 5's ``message.type`` topic attribute (TopicConfig.message_type); NORMAL when unset, FIFO for an
    order topic without one."""
    if tc.attributes and tc.message_type in MESSAGE_TYPES:
        return tc.message_type
    return "FIFO" if tc.order else "NORMAL"


def topic_kind(topic: str, system_topics=()) -> str:
    """USER, RETRY, DLQ or SYSTEM (RocketMQ's system topics, and the ones the broker's topic table adds itself:
    ``system_topics``, e.g. the cluster's and the broker's own names)."""
    if topic in system_topics:
        return "SYSTEM"
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "RETRY"
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "DLQ"
    if is_system_topic(topic):
        return "SYSTEM"
    return "USER"


def _tree_bytes(path: str) -> tuple[int, int]:
    """(bytes allocated on disk, apparent bytes) of the regular files under ``path`` (0, 0 when it is missing)."""
    used = apparent = 0
    stack = [path]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for e in entries:
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.is_file(follow_symlinks=False):
                        st = e.stat(follow_symlinks=False)
                        used += st.st_blocks * 512
                        apparent += st.st_size
                except OSError:         # removed meanwhile (a cleaned file): not the store's any more
                    continue
    return used, apparent


def hex_dump(data: bytes) -> str:
    """16 bytes a line: offset, hex, printable ASCII (what ``xxd`` shows)."""
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i:i + 16]
        hexpart = " ".join(chunk[j:j + 8].hex(" ") for j in range(0, len(chunk), 8))
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{i:08x}  {hexpart:<48}  {text}")
    return "\n".join(lines)


class RateHistory:
    """A sample a second of the totals the charts and rates need: messages in and out (ServerEvents) and records
    stored (the store's dispatcher, which also counts what no RPC sent: retries, DLQ, resends). Kept for
    HISTORY_SECONDS; per-topic totals only for the last RATE_WINDOW seconds."""

    def __init__(self, data: "ConsoleData"):
        self.data = data
        self.samples: deque = deque(maxlen=HISTORY_SECONDS + 1)     # (t, in, out, stored)
        self.topic_samples: deque = deque(maxlen=RATE_WINDOW + 1)   # (t, {topic: messages in})
        self._lock = threading.Lock()

    def sample(self) -> None:
        snap = self.data.server.events.snapshot()
        per_topic: dict[str, int] = {}
        for (topic, _type), n in snap["messages_in"].items():
            per_topic[topic] = per_topic.get(topic, 0) + n
        out = sum(snap["messages_out"].values())
        reput = self.data.store.reput
        stored = reput.dispatched if reput is not None else 0
        now = time.time()
        with self._lock:
            self.samples.append((now, sum(per_topic.values()), out, stored))
            self.topic_samples.append((now, per_topic))

    def series(self, seconds: int = 300) -> dict:
        """Per-second rates of the last ``seconds``: t (ms), in, out, stored."""
        with self._lock:
            samples = list(self.samples)[-(seconds + 1):]
        t, rin, rout, rstored = [], [], [], []
        for a, b in zip(samples, samples[1:]):
            dt = max(b[0] - a[0], 1e-3)
            t.append(int(b[0] * 1000))
            rin.append(round((b[1] - a[1]) / dt, 1))
            rout.append(round((b[2] - a[2]) / dt, 1))
            rstored.append(round(max(b[3] - a[3], 0) / dt, 1))
        return {"t": t, "in": rin, "out": rout, "stored": rstored}

    def topic_rates(self) -> dict[str, float]:
        """Messages in per second per topic over the last RATE_WINDOW seconds."""
        with self._lock:
            if len(self.topic_samples) < 2:
                return {}
            (t0, first), (t1, last) = self.topic_samples[0], self.topic_samples[-1]
        dt = max(t1 - t0, 1e-3)
        return {topic: round((n - first.get(topic, 0)) / dt, 1) for topic, n in last.items()}


class ConsoleData:
    """Reads and admin actions over one server (see the module's doc for the object it needs)."""

    def __init__(self, server):
        self.server = server
        self.history = RateHistory(self)

    @property
    def broker(self):
        return self.server.broker

    @property
    def store(self):
        return self.server.broker.store

    def _kind(self, topic: str) -> str:
        return topic_kind(topic, self.broker.topic_config_manager.system_topics)

    def _inflight(self, group: str) -> dict:
        fn = getattr(self.server, "inflight", None)
        return fn(group) if fn is not None else {}

    # ------------------------------------------------------------------ overview
    def disk_usage(self) -> dict:
        """Bytes the store's files take on disk by kind (``*_bytes``: allocated blocks, st_blocks * 512) beside
        their apparent sizes (``*_apparent_bytes``: RocketMQ's preallocated file sizes, which a sparse file does not
        use: a fresh 1 GiB commitlog file holds a few MiB), and the file system's total and free space."""
        store = self.store
        cfg = store.config
        out: dict = {}
        for kind in ("commitlog", "consumequeue", "index"):
            used, apparent = _tree_bytes(os.path.join(store.path, kind))
            out[f"{kind}_bytes"], out[f"{kind}_apparent_bytes"] = used, apparent
        try:
            fs = shutil.disk_usage(store.path)
            fs_total, fs_free = fs.total, fs.free
        except OSError:
            fs_total = fs_free = 0
        kinds = ("commitlog", "consumequeue", "index")
        out.update(store_bytes=sum(out[f"{k}_bytes"] for k in kinds),
                   store_apparent_bytes=sum(out[f"{k}_apparent_bytes"] for k in kinds),
                   fs_total_bytes=fs_total, fs_free_bytes=fs_free, fs_used_bytes=fs_total - fs_free,
                   disk_max_used_ratio=getattr(cfg, "disk_max_used_space_ratio", None))
        return out

    def health(self, info: dict, disk: dict) -> dict:
        """OK, or WARN/ERROR with the reasons a person should look at."""
        problems = []
        level = "OK"
        if info.get("dispatch_error"):
            problems.append(f"dispatch error: {info['dispatch_error']}")
            level = "ERROR"
        if info.get("dispatch_lag_ms", 0) > 5000:
            problems.append(f"dispatch is {info['dispatch_lag_ms']} ms behind the commitlog")
            level = "WARN" if level == "OK" else level
        if disk["fs_total_bytes"] and disk["fs_free_bytes"] / disk["fs_total_bytes"] < 0.1:
            problems.append(f"disk almost full: {disk['fs_free_bytes']} bytes free")
            level = "WARN" if level == "OK" else level
        gc = getattr(self.store, "group_commit", None)
        err = getattr(gc, "last_error", None) if gc is not None else None
        if err:
            problems.append(f"flush error: {err}")
            level = "ERROR"
        tx = info.get("unresolved_halves")
        if tx and tx["count"]:
            groups = ", ".join(f"{g or '(none)'} ({v['halves']})" for g, v in list(tx["producer_groups"].items())[:10])
            problems.append(f"{tx['count']} transactional half message(s) never resolved: no producer answered "
                            f"their checks, moved to {tx['topic']} (producer groups: {groups})")
            level = "WARN" if level == "OK" else level
        return {"status": level, "problems": problems}

    def overview(self) -> dict:
        info = self.broker.runtime_info()
        info["unresolved_halves"] = unresolved = unresolved_halves(self.store, limit=UNRESOLVED_CONSOLE_READ)
        disk = self.disk_usage()
        snap = self.server.events.snapshot()
        earliest = None
        cl = self.store.commit_log
        if cl.max_offset > cl.min_offset:
            m = self.store.look_message(cl.min_offset)
            if m is not None:
                earliest = m.store_timestamp
                del m
        clients = self.server.events.clients()
        gc = getattr(self.store, "group_commit", None)
        flushes = gc.flushes if gc is not None else None
        served = gc.requests if gc is not None else None       # every flush request, waited for or not
        return {
            "broker_name": info["broker_name"], "cluster": info["broker_cluster_name"],
            "store_path": info["store_path"], "listen": f"{self.server.host}:{self.server.port}",
            "uptime_s": round(time.time() - snap["started"], 1),
            "health": self.health(info, disk), "disk": disk,
            "commitlog": {"min_offset": info["commitlog_min_offset"], "max_offset": info["commitlog_max_offset"],
                          "flushed_offset": info["commitlog_flushed_offset"], "files": info["commitlog_files"],
                          "flush_behind_bytes": max(info["commitlog_max_offset"] - info["commitlog_flushed_offset"],
                                                    0),
                          "earliest_message": fmt_ms(earliest), "earliest_message_ms": earliest},
            "dispatch": {"behind_bytes": info["dispatch_behind_bytes"], "lag_ms": info["dispatch_lag_ms"],
                         "records": info["dispatched_records"], "error": info["dispatch_error"],
                         "ring_dropped": info["dispatch_ring_dropped"]},
            "flush": {"type": info["flush_disk_type"], "put_calls": info["put_calls"], "flushes": flushes,
                      "flush_requests": served,
                      # puts, not requests: the gRPC server's sends ask twice (the put's own request, then the
                      # completion it awaits), a blocking put once
                      "puts_per_flush": round(info["put_calls"] / flushes, 2) if flushes else None},
            "counts": {"topics": info["topics"], "groups": info["subscription_groups"],
                       "consume_queues": info["consume_queues"], "index_files": info["index_files"],
                       "clients": len(clients)},
            "totals": {"messages_in": sum(snap["messages_in"].values()),
                       "messages_out": sum(snap["messages_out"].values()),
                       "bytes_in": sum(snap["bytes_in"].values()), "dlq": sum(snap["dlq"].values()),
                       "commits": sum(snap["commits"].values()), "rollbacks": sum(snap["rollbacks"].values())},
            "recovery": info["recovery"],
            "transactions": {"unresolved_halves": unresolved,
                             "checks_without_producer": (self.broker.transactions.stats["no_producer"]
                                                         if self.broker.transactions is not None else 0)},
        }

    # ------------------------------------------------------------------ topics
    def _queue_row(self, topic: str, queue_id: int) -> dict:
        store = self.store
        cq = store.find_consume_queue(topic, queue_id, create=False)
        if cq is None:
            return {"queue_id": queue_id, "min_offset": 0, "max_offset": 0, "messages": 0, "last_store_time": None}
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
        last = None
        if hi > lo:
            unit = cq.get_unit(hi - 1)
            if unit is not None:
                ts = store.pickup_store_timestamp(unit[0], unit[1])
                last = ts if ts > 0 else None
        return {"queue_id": queue_id, "min_offset": lo, "max_offset": hi, "messages": hi - lo,
                "last_store_time": fmt_ms(last)}

    def _topic_messages(self, topic: str, queue_ids) -> int:
        n = 0
        for q in queue_ids:
            cq = self.store.find_consume_queue(topic, q, create=False)
            if cq is not None:
                n += cq.max_offset_in_queue - cq.min_offset_in_queue
        return n

    def _topic_summary(self, tc: TopicConfig, stored: dict, rates: dict) -> dict:
        name = tc.topic_name
        return {"topic": name, "kind": self._kind(name), "message_type": topic_message_type(tc),
                "read_queue_nums": tc.read_queue_nums, "write_queue_nums": tc.write_queue_nums,
                "perm": perm_to_string(tc.perm), "perm_bits": tc.perm, "order": tc.order,
                "messages": self._topic_messages(name, stored.get(name, ())),
                "rate_in": rates.get(name, 0.0),
                # what `rmqcore topic` answers offline, so --server answers the same
                "config": topic_view(tc, name in self.broker.topic_config_manager.system_topics)}

    def topics(self, q: str = "", offset: int = 0, limit: int = DEFAULT_LIMIT, system: bool = False) -> dict:
        """A page of topics by name (``q``: a part of the name), with their queues' message counts and the rate
        of messages in. System, retry and DLQ topics only with ``system``."""
        configs = self.broker.topics()
        names = sorted(n for n in configs if (system or self._kind(n) == "USER") and q.lower() in n.lower())
        page = names[offset:offset + limit]
        stored = self.store.topics()
        rates = self.history.topic_rates()
        return {"total": len(names), "offset": offset, "limit": limit, "q": q, "system": system,
                "items": [self._topic_summary(configs[n], stored, rates) for n in page]}

    def topic(self, name: str) -> dict:
        tc = self.broker.topic_config_manager.select_topic_config(name)
        stored = self.store.topics().get(name, [])
        if tc is None and not stored:
            raise NotFound(not_found("topic", name))
        queue_ids = sorted(set(range(tc.read_queue_nums if tc else 0)) | set(stored))
        rates = self.history.topic_rates()
        out = (self._topic_summary(tc, {name: stored}, rates) if tc is not None
               else {"topic": name, "kind": self._kind(name), "message_type": None, "perm": None,
                     "messages": self._topic_messages(name, stored), "rate_in": rates.get(name, 0.0),
                     "read_queue_nums": 0, "write_queue_nums": 0, "order": False, "perm_bits": 0})
        out["configured"] = tc is not None
        out["queues"] = [self._queue_row(name, qid) for qid in queue_ids]
        groups = []
        com = self.broker.consumer_offset_manager
        for g in sorted(com.which_group_by_topic(name)):
            committed = com.query_offsets(g, name)
            lag = 0
            for qid in queue_ids:
                lag += max(self.store.max_offset(name, qid) - max(committed.get(qid, 0), 0), 0)
            groups.append({"group": g, "lag": lag})
        out["groups"] = groups
        out["producers"] = [client_row(c) for c in self._clients(topic=name)]
        return out

    def update_topic(self, body: dict) -> dict:
        """Create or update a topic (RocketMQ's updateAndCreateTopic). Fields: topic, read_queue_nums,
        write_queue_nums (or queue_nums for both), perm (2 W, 4 R, 6 RW), message_type, order."""
        name = validate_topic(body.get("topic"))
        if self._kind(name) == "SYSTEM":
            raise ConsoleError(f"topic {name!r} is a system topic: the broker manages it", 403)
        existing = self.broker.topic_config_manager.select_topic_config(name)
        both = body.get("queue_nums")
        dflt_r = existing.read_queue_nums if existing else 4
        dflt_w = existing.write_queue_nums if existing else 4
        read = int_arg(body.get("read_queue_nums", both), "read_queue_nums", 1, MAX_QUEUE_NUMS, dflt_r)
        write = int_arg(body.get("write_queue_nums", both), "write_queue_nums", 1, MAX_QUEUE_NUMS, dflt_w)
        perm = int_arg(body.get("perm"), "perm", 0, PERM_READ | PERM_WRITE,
                       existing.perm if existing else PERM_READ | PERM_WRITE)
        if perm & ~(PERM_READ | PERM_WRITE):
            raise ConsoleError(f"perm: {perm} is not a combination of 2 (write) and 4 (read)")
        mtype = str(body.get("message_type") or (topic_message_type(existing) if existing else "NORMAL")).upper()
        if mtype not in MESSAGE_TYPES:
            raise ConsoleError(f"message_type: {mtype[:20]!r} is not one of {', '.join(MESSAGE_TYPES)}")
        order = bool_arg(body.get("order"), "order", mtype == "FIFO")
        tc = existing.copy() if existing else TopicConfig(name)
        tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.order = read, write, perm, order
        if body.get("message_type"):      # the message.type attribute, as a 5.x broker writes it; none asked: kept
            tc.message_type = mtype
        self.broker.update_topic(tc)
        return {"created": existing is None, "topic": self.topic(name)}

    def delete_topic(self, name: str) -> dict:
        validate_topic(name)
        if self._kind(name) == "SYSTEM":
            raise ConsoleError(f"topic {name!r} is a system topic: the broker manages it", 403)
        if not self.broker.delete_topic(name):
            raise NotFound(not_found("topic", name))
        return {"deleted": name}

    # ------------------------------------------------------------------ groups
    def _group_queues(self, group: str, with_latency: bool = False) -> list[dict]:
        """Per topic and queue the group has an offset in: broker offset, committed offset, lag, in-flight and
        ready (RocketMQ's ConsumerLagCalculator: lag = max - committed, in-flight = delivered and not yet
        committed, ready = lag - in-flight)."""
        inflight = self._inflight(group)
        rows = []
        for topic, queues in self.broker.lag_detail(group).items():
            for qid, d in queues.items():
                fl = min(int(inflight.get((topic, qid), 0)), d["diff"])
                row = {"topic": topic, "queue_id": qid, "broker_offset": d["broker_offset"],
                       "consumer_offset": d["consumer_offset"], "lag": d["diff"], "inflight": fl,
                       "ready": d["diff"] - fl, "lag_since": None}
                if with_latency and d["diff"] > 0:
                    ts = self._store_time_at(topic, qid, d["consumer_offset"])
                    row["lag_since"] = fmt_ms(ts)
                rows.append(row)
        # In-flight messages of a queue with no committed offset yet (a first delivery) count too.
        seen = {(r["topic"], r["queue_id"]) for r in rows}
        for (topic, qid), n in inflight.items():
            if (topic, qid) not in seen and n > 0:
                hi = self.store.max_offset(topic, qid)
                rows.append({"topic": topic, "queue_id": qid, "broker_offset": hi, "consumer_offset": 0,
                             "lag": hi, "inflight": min(n, hi), "ready": hi - min(n, hi), "lag_since": None})
        rows.sort(key=lambda r: (r["topic"], r["queue_id"]))
        return rows

    def _store_time_at(self, topic: str, queue_id: int, queue_offset: int) -> int | None:
        cq = self.store.find_consume_queue(topic, queue_id, create=False)
        if cq is None or not cq.min_offset_in_queue <= queue_offset < cq.max_offset_in_queue:
            return None
        unit = cq.get_unit(queue_offset)
        if unit is None:
            return None
        ts = self.store.pickup_store_timestamp(unit[0], unit[1])
        return ts if ts > 0 else None

    def _topic_total(self, topic: str) -> int:
        return self._topic_messages(topic, self.store.topics().get(topic, ()))

    def _group_summary(self, gc: SubscriptionGroupConfig, clients: list, dlq_counts: dict) -> dict:
        name = gc.group_name
        rows = self._group_queues(name)
        return {"group": name, "consume_enable": gc.consume_enable, "retry_max_times": gc.retry_max_times,
                "retry_queue_nums": gc.retry_queue_nums, "broadcast": gc.consume_broadcast_enable,
                "topics": sorted({r["topic"] for r in rows if not r["topic"].startswith(RETRY_GROUP_TOPIC_PREFIX)}),
                "lag": sum(r["lag"] for r in rows), "inflight": sum(r["inflight"] for r in rows),
                "retry_messages": self._topic_total(get_retry_topic(name)),
                "dlq_messages": self._topic_total(get_dlq_topic(name)),
                "sent_to_dlq": sum(n for (g, _t), n in dlq_counts.items() if g == name),
                "clients": sum(1 for c in clients if c.group == name),
                # what `rmqcore group` answers offline, so --server answers the same
                "config": group_view(gc, name.startswith("CID_RMQ_SYS_") or name in _SYSTEM_GROUPS)}

    def groups(self, q: str = "", offset: int = 0, limit: int = DEFAULT_LIMIT, system: bool = False) -> dict:
        configs = self.broker.groups()
        names = sorted(n for n in configs
                       if (system or not (n.startswith("CID_RMQ_SYS_") or n in _SYSTEM_GROUPS))
                       and q.lower() in n.lower())
        page = names[offset:offset + limit]
        clients = self.server.events.clients()
        dlq = self.server.events.snapshot()["dlq"]
        return {"total": len(names), "offset": offset, "limit": limit, "q": q, "system": system,
                "items": [self._group_summary(configs[n], clients, dlq) for n in page]}

    def group(self, name: str) -> dict:
        gc = self.broker.subscription_group_manager.find_subscription_group_config(name) \
            if name in self.broker.subscription_group_manager.subscription_group_table else None
        if gc is None:
            raise NotFound(not_found("consumer group", name))
        clients = self.server.events.clients()
        snap = self.server.events.snapshot()
        out = self._group_summary(gc, clients, snap["dlq"])
        out["queues"] = self._group_queues(name, with_latency=True)
        out["consume_from_min_enable"] = gc.consume_from_min_enable
        out["clients_detail"] = [client_row(c) for c in sorted(clients, key=lambda c: c.client_id)
                                 if c.group == name]
        out["messages_out"] = sum(n for (_t, g), n in snap["messages_out"].items() if g == name)
        out["retry_topic"] = get_retry_topic(name)
        out["dlq_topic"] = get_dlq_topic(name)
        return out

    def update_group(self, body: dict) -> dict:
        name = validate_group(body.get("group"))
        mgr = self.broker.subscription_group_manager
        existing = mgr.subscription_group_table.get(name)
        gc = existing.copy() if existing is not None else SubscriptionGroupConfig(name)
        gc.consume_enable = bool_arg(body.get("consume_enable"), "consume_enable", gc.consume_enable)
        gc.consume_broadcast_enable = bool_arg(body.get("consume_broadcast_enable"), "consume_broadcast_enable",
                                               gc.consume_broadcast_enable)
        gc.consume_from_min_enable = bool_arg(body.get("consume_from_min_enable"), "consume_from_min_enable",
                                              gc.consume_from_min_enable)
        gc.retry_max_times = int_arg(body.get("retry_max_times"), "retry_max_times", -1, MAX_RETRY_TIMES,
                                     gc.retry_max_times)
        gc.retry_queue_nums = int_arg(body.get("retry_queue_nums"), "retry_queue_nums", 0, MAX_QUEUE_NUMS,
                                      gc.retry_queue_nums)
        # 5.x's consumeMessageOrderly (FIFO consumption) and max delivery attempts (retryMaxTimes + 1)
        gc.consume_message_orderly = bool_arg(body.get("fifo"), "fifo", gc.consume_message_orderly)
        if body.get("max_delivery_attempts") is not None:
            gc.max_delivery_attempts = int_arg(body.get("max_delivery_attempts"), "max_delivery_attempts", 1,
                                               MAX_RETRY_TIMES + 1, gc.max_delivery_attempts)
        self.broker.update_group(gc)
        return {"created": existing is None, "group": self.group(name)}

    def delete_group(self, name: str) -> dict:
        validate_group(name)
        if not self.broker.delete_group(name):
            raise NotFound(not_found("consumer group", name))
        return {"deleted": name}

    def _first_at_or_after(self, topic: str, queue_id: int, ts: int) -> int:
        """The first queue offset whose message was stored at or after ``ts`` (the queue's max when none):
        a binary search of the units' store times, read from the records' headers."""
        cq = self.store.find_consume_queue(topic, queue_id, create=False)
        if cq is None:
            return 0
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
        while lo < hi:
            mid = (lo + hi) // 2
            unit = cq.get_unit(mid)
            t = self.store.pickup_store_timestamp(unit[0], unit[1]) if unit is not None else -1
            if t < ts:          # -1 (a record already cleaned) sorts before any time
                lo = mid + 1
            else:
                hi = mid
        return lo

    def reset_offset(self, group: str, body: dict) -> dict:
        """RocketMQ's resetOffsetByTimestamp: every queue of the group's topics (or of ``topic``) goes back (or
        forward) to the first message stored at or after ``timestamp``; a time past the last message sets the
        queue's max offset. Returns each queue's old and new offset."""
        validate_group(group)
        if group not in self.broker.subscription_group_manager.subscription_group_table:
            raise NotFound(not_found("consumer group", group))
        ts = parse_time(body.get("timestamp"), "timestamp")
        if ts is None:
            raise ConsoleError("timestamp: required (milliseconds since the epoch or an ISO 8601 time)")
        topic = body.get("topic") or None
        com = self.broker.consumer_offset_manager
        if topic is not None:
            validate_topic(topic)
            tc = self.broker.topic_config_manager.select_topic_config(topic)
            if tc is None:
                raise NotFound(not_found("topic", topic))
            targets = {topic: sorted(set(range(tc.read_queue_nums)) | set(self.store.topics().get(topic, ())))}
        else:
            targets = {t: sorted(com.query_offsets(group, t)) for t in com.which_topic_by_consumer(group)}
            if not targets:
                raise ConsoleError(f"group {group!r} has no offsets yet: name the topic to reset")
        changed = []
        for t, queue_ids in sorted(targets.items()):
            for qid in queue_ids:
                old = com.query_offset(group, t, qid)
                new = self._first_at_or_after(t, qid, ts)
                self.broker.commit_offset(group, t, qid, new)
                changed.append({"topic": t, "queue_id": qid, "old_offset": old, "new_offset": new})
        return {"group": group, "timestamp": ts, "time": fmt_ms(ts), "queues": changed}

    # ------------------------------------------------------------------ messages
    # Message reads follow the gRPC side's rules: no system topic's message for anyone (a transaction's half, a
    # delayed or timed message before its time, as the proxy's "cannot access system topic"), and with accounts
    # only topics the reader may consume (SUB; a retry topic by its group's permission). ``user`` is the console's
    # authenticated access key (None without accounts).
    def _unreadable(self, topic: str, user: str | None) -> str | None:
        """Why ``user`` may not read ``topic``'s messages, or None."""
        if is_system_topic(topic):
            return f"topic {topic!r}: cannot access system topic"
        acl = getattr(self.server, "acl", None)
        if acl is None:
            return None
        if user is None or not acl.may_read(user, topic):
            return f"accessKey {user!r} may not read topic {topic!r} (needs SUB permission)"
        return None

    def _check_read(self, topic: str, user: str | None) -> None:
        why = self._unreadable(topic, user)
        if why is not None:
            raise ConsoleError(why, 403)

    def message_summary(self, m) -> dict:
        # A compressed body's head as the producer sent it (its first 80 bytes inflated, no more), saying so.
        compression = compression_name(m.sys_flag)
        try:
            body = decompress(m.body, m.sys_flag, 80, head=True)
        except DecompressionError:
            body = bytes(m.body[:80])
        return {"compression": compression,"commitlog_offset": m.commitlog_offset, "msg_id": m.msg_id, "uniq_key": m.uniq_key,
                "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
                "tags": m.tags, "keys": list(m.keys), "store_time": fmt_ms(m.store_timestamp),
                "store_timestamp": m.store_timestamp, "size": m.store_size, "body_size": m.body.nbytes,
                "reconsume_times": m.reconsume_times, "retry_topic": m.properties.get(PROPERTY_RETRY_TOPIC),
                "body_head": body.decode("utf-8", "replace") + ("…" if m.body.nbytes > 80 else "")}

    def message(self, commitlog_offset: int, user: str | None = None) -> dict:
        m = self.store.look_message(commitlog_offset)
        if m is None:
            raise NotFound(f"no message starts at commitlog offset {commitlog_offset}")
        self._check_read(m.topic, user)
        out = self.message_summary(m)
        # The body the producer sent: a compressed one inflated (no further than max_message_size).
        raw, _name, error = producer_body(m.body, m.sys_flag, self.store.config.max_message_size)
        out.update({
            "compression_error": error, "sent_body_size": None if error else len(raw),
            "properties": dict(sorted(m.properties.items())), "born_time": fmt_ms(m.born_timestamp),
            "born_host": m.born_host, "store_host": m.store_host, "sys_flag": m.sys_flag, "flag": m.flag,
            "body_crc": m.body_crc, "prepared_transaction_offset": m.prepared_transaction_offset,
            "text": raw[:TEXT_PREVIEW_BYTES].decode("utf-8", "replace"),
            "text_truncated": len(raw) > TEXT_PREVIEW_BYTES,
            "hex": hex_dump(raw[:HEX_PREVIEW_BYTES]), "hex_truncated": len(raw) > HEX_PREVIEW_BYTES,
            "json": None, "record_crc": record_crc_view(m),
        })
        del m
        if raw[:1] in (b"{", b"[") and len(raw) <= JSON_PREVIEW_BYTES:
            try:
                out["json"] = json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
            except ValueError:
                pass
        # Which groups consumed it: their committed offset is past its queue offset (the dashboard's track).
        com = self.broker.consumer_offset_manager
        track = []
        for g in sorted(com.which_group_by_topic(out["topic"])):
            c = com.query_offset(g, out["topic"], out["queue_id"])
            track.append({"group": g, "consumer_offset": c, "consumed": c > out["queue_offset"]})
        out["track"] = track
        t = out["topic"]
        out["dlq_group"] = t[len(DLQ_GROUP_TOPIC_PREFIX):] if t.startswith(DLQ_GROUP_TOPIC_PREFIX) else None
        return out

    def search(self, topic: str = "", key: str = "", msg_id: str = "", begin=None, end=None, after: str = "",
               limit: int = DEFAULT_LIMIT, user: str | None = None) -> dict:
        """By message id (an offset id from the record's header, else a UNIQ_KEY through the index), by topic and
        key (the index), or by topic and store-time range (paged: ``after`` is the last row's
        "store_timestamp:commitlog_offset"). Only messages ``user`` may read (a search by id leaves the others
        out, any other search of a topic they may not read is refused)."""
        begin_ms = parse_time(begin, "begin")
        end_ms = parse_time(end, "end")
        out = {"mode": None, "items": [], "next": None, "limit": limit}
        if topic:
            validate_topic(topic)
            self._check_read(topic, user)
        if msg_id:
            out["mode"] = "msg_id"
            out["items"] = [self.message_summary(m) for m in self._by_msg_id(msg_id.strip(), topic, limit)
                            if self._unreadable(m.topic, user) is None]
            return out
        if not topic:
            raise ConsoleError("topic: required for a search by key or by time (or give a message id)")
        if key:
            out["mode"] = "key"
            found = self.store.query_message(topic, key, limit, begin_ms or 0, end_ms)
            items = [self.message_summary(m) for m in found]
            del found
            items.sort(key=lambda r: (r["store_timestamp"], r["commitlog_offset"]), reverse=True)
            out["items"] = items
            return out
        out["mode"] = "time"
        out.update(self._by_time(topic, begin_ms, end_ms, after, limit))
        return out

    def _by_msg_id(self, msg_id: str, topic: str, limit: int) -> list:
        try:
            _host, offset = decode_offset_msg_id(msg_id)
        except (ValueError, TypeError):
            offset = -1
        if offset >= self.store.commit_log.min_offset:
            m = self.store.look_message(offset)
            if m is not None and m.msg_id.upper() == msg_id.upper():
                return [m]
        # A UNIQ_KEY (the id a client sees): through the index, in the given topic or in every user topic.
        topics = [topic] if topic else sorted(t for t in self.store.topics()
                                              if self._kind(t) != "SYSTEM" and not is_system_topic(t))
        out = []
        for t in topics:
            out += [m for m in self.store.query_message(t, msg_id, limit) if m.uniq_key == msg_id]
            if len(out) >= limit:
                break
        return out[:limit]

    def _by_time(self, topic: str, begin: int | None, end: int | None, after: str, limit: int) -> dict:
        begin = begin if begin is not None else 0
        end = end if end is not None else (1 << 62)
        after_key = None
        if after:
            try:
                a_ts, a_off = (int(x) for x in after.split(":", 1))
            except ValueError:
                raise ConsoleError(f"after: expected 'store_timestamp:commitlog_offset', got {after[:40]!r}") \
                    from None
            after_key = (a_ts, a_off)
            begin = max(begin, a_ts)
        # A merge of the topic's queues by (store time, commitlog offset): each queue's cursor starts at its first
        # message stored at or after ``begin`` and reads only store times (from the records' headers) until a
        # message is taken, so a page decodes ``limit`` messages whatever the number of queues.
        heap: list = []

        def advance(qid, cq, qo):
            while qo < cq.max_offset_in_queue:
                unit = cq.get_unit(qo)
                if unit is None:
                    return
                ts = self.store.pickup_store_timestamp(unit[0], unit[1])
                if ts > end:
                    return
                if ts >= 0 and (after_key is None or (ts, unit[0]) > after_key):
                    heapq.heappush(heap, (ts, unit[0], qid, qo))
                    return
                qo += 1

        for qid in self.store.topics().get(topic, []):
            cq = self.store.find_consume_queue(topic, qid, create=False)
            if cq is not None:
                advance(qid, cq, self._first_at_or_after(topic, qid, begin))
        rows = []
        while heap and len(rows) < limit:
            _ts, phy, qid, qo = heapq.heappop(heap)
            m = self.store.look_message(phy)
            if m is not None:
                rows.append(self.message_summary(m))
                del m
            advance(qid, self.store.find_consume_queue(topic, qid, create=False), qo + 1)
        nxt = None
        if heap and rows:
            last = rows[-1]
            nxt = f"{last['store_timestamp']}:{last['commitlog_offset']}"
        return {"items": rows, "next": nxt}

    def queue_messages(self, topic: str, queue_id: int, offset: int | None, limit: int,
                       user: str | None = None) -> dict:
        """A page of one queue's messages from ``offset`` (default: the last page)."""
        self._check_read(topic, user)
        cq = self.store.find_consume_queue(topic, queue_id, create=False)
        if cq is None:
            return {"topic": topic, "queue_id": queue_id, "min_offset": 0, "max_offset": 0, "offset": 0,
                    "items": []}
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
        start = max(lo, hi - limit) if offset is None else max(lo, min(offset, hi))
        items = []
        for qo in range(start, min(hi, start + limit)):
            unit = cq.get_unit(qo)
            m = self.store.look_message(unit[0]) if unit is not None else None
            if m is not None:
                items.append(self.message_summary(m))
                del m
        return {"topic": topic, "queue_id": queue_id, "min_offset": lo, "max_offset": hi, "offset": start,
                "items": items}

    def dlq_messages(self, group: str, offset: int | None, limit: int, user: str | None = None) -> dict:
        """A page of the group's dead letters (its %DLQ% topic has one queue, as RocketMQ's)."""
        topic = get_dlq_topic(group)
        queues = self.store.topics().get(topic, [0])
        pages = [self.queue_messages(topic, q, offset, limit, user) for q in queues]
        if len(pages) == 1:
            return pages[0]
        items = sorted((r for p in pages for r in p["items"]), key=lambda r: r["commitlog_offset"])
        return {"topic": topic, "queue_id": None, "items": items[:limit]}

    def resend_dlq(self, commitlog_offset: int) -> dict:
        """A dead letter goes back to its group: stored again in the group's retry topic with its reconsume
        count reset and no delay, so the group's consumers (and only they) receive it at once; its original
        topic stays in RETRY_TOPIC and its UNIQ_KEY stays, so the client sees the message it lost."""
        m = self.store.look_message(commitlog_offset)
        if m is None:
            raise NotFound(f"no message starts at commitlog offset {commitlog_offset}")
        if not m.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            raise ConsoleError(f"the message at {commitlog_offset} is in {m.topic!r}, not in a DLQ topic "
                               f"({DLQ_GROUP_TOPIC_PREFIX}<group>)")
        group = m.topic[len(DLQ_GROUP_TOPIC_PREFIX):]
        gc = self.broker.subscription_group_manager.subscription_group_table.get(group)
        if gc is None:
            raise NotFound(f"consumer group {group!r} of {m.topic!r} does not exist")
        props = dict(m.properties)
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        props.setdefault(PROPERTY_RETRY_TOPIC, m.topic)
        retry_topic = get_retry_topic(group)
        msg = Message(retry_topic, bytes(m.body), random.randrange(max(gc.retry_queue_nums, 1)), properties=props,
                      flag=m.flag, born_timestamp=m.born_timestamp, born_host=m.born_host, reconsume_times=0,
                      # a compressed body goes as stored, still saying how (else its consumer gets it deflated)
                      sys_flag=m.sys_flag & (COMPRESSED_FLAG | COMPRESSION_TYPE_COMPARATOR))
        del m
        result = self.broker.send(msg)
        if result.status is not PutStatus.PUT_OK:
            raise PutFailedError(f"resend of {commitlog_offset} to {retry_topic}: {result.status.name}",
                                 result.status)
        return {"resent": commitlog_offset, "group": group, "topic": retry_topic, "queue_id": msg.queue_id,
                "commitlog_offset": result.commitlog_offset, "msg_id": result.msg_id}

    # ------------------------------------------------------------------ a test message in, one out
    def send_message(self, body: dict) -> dict:
        """mqadmin's sendMessage and the dashboard's "Send Message": one message stored through the broker's own
        send (its permission and topic checks, auto-creation, a random queue unless ``queue_id`` is given), so a
        console user can see a topic and its consumers work end to end. ``body`` (text, UTF-8) or ``body_base64``
        (bytes); ``tags``; ``keys`` (a string of space-separated keys or a list)."""
        topic = self._user_topic(body)
        payload = _body_bytes(body)
        tags = body.get("tags") or None
        if tags is not None and not isinstance(tags, str):
            raise ConsoleError("tags: expected a string")
        keys = body.get("keys") or []
        if isinstance(keys, str):
            keys = keys.split()
        if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
            raise ConsoleError("keys: expected a string of space-separated keys or a list of strings")
        queue_id = int_arg(body.get("queue_id"), "queue_id", -1, MAX_QUEUE_NUMS - 1, -1)
        msg = Message(topic, payload, queue_id, tags=tags, keys=keys)
        result = self.broker.send(msg)
        if result.status is not PutStatus.PUT_OK:
            raise PutFailedError(f"send to {topic}: {result.status.name}", result.status)
        self.server.events.on_messages_in(topic, [len(payload)])
        return {"status": result.status.name, "topic": msg.topic, "queue_id": msg.queue_id,
                "queue_offset": result.queue_offset, "commitlog_offset": result.commitlog_offset,
                "msg_id": result.msg_id, "store_time": fmt_ms(result.store_timestamp)}

    def _user_topic(self, body: dict) -> str:
        """The request's ``topic``: a legal name, not a system topic (a test message or a look goes to user topics)."""
        topic = body.get("topic")
        if not isinstance(topic, str) or not topic:
            raise ConsoleError("topic: required")
        validate_topic(topic)
        if self._kind(topic) == "SYSTEM":
            raise ConsoleError(f"topic {topic!r} is a system topic: the console sends to and reads user topics",
                               status=403)
        return topic

    def consume(self, group: str, body: dict) -> dict:
        """mqadmin's consumeMessage: up to ``count`` (1..32) messages of ``topic`` for ``group``, read from each
        queue's committed offset (the queue's min when the group has none), queue by queue, through the broker's
        pull (its group, topic and permission checks). With ``commit`` the group's offsets move past what was
        read, as a consumer's commit would; without it nothing changes (a look at what the group gets next)."""
        validate_group(group)
        if group not in self.broker.subscription_group_manager.subscription_group_table:
            raise NotFound(f"consumer group {group!r} does not exist")
        topic = self._user_topic(body)
        tc = self.broker.topic_config_manager.select_topic_config(topic)
        if tc is None:
            raise NotFound(f"topic {topic!r} does not exist")
        count = int_arg(body.get("count"), "count", 1, 32, 1)
        commit = bool_arg(body.get("commit"), "commit", False)
        com = self.broker.consumer_offset_manager
        items, queues = [], []
        for qid in range(tc.read_queue_nums):
            if len(items) >= count:
                break
            committed = com.query_offset(group, topic, qid)
            start = committed if committed >= 0 else max(self.store.min_offset(topic, qid), 0)
            r = self.broker.pull(group, topic, qid, start, count - len(items))
            got = []
            for m in r.messages:
                row = self.message_summary(m)
                raw = bytes(m.body)
                row["text"] = raw[:TEXT_PREVIEW_BYTES].decode("utf-8", "replace")
                row["text_truncated"] = len(raw) > TEXT_PREVIEW_BYTES
                got.append(row)
            del r.messages[:]
            if not got:
                continue
            items += got
            self.server.events.on_messages_out(topic, group, len(got), sum(m["body_size"] for m in got))
            nxt = got[-1]["queue_offset"] + 1
            if commit:
                self.broker.commit_offset(group, topic, qid, nxt)
            queues.append({"queue_id": qid, "from_offset": start, "next_offset": nxt, "messages": len(got),
                           "committed": commit})
        return {"group": group, "topic": topic, "committed": commit, "queues": queues, "items": items}

    # ------------------------------------------------------------------ the broker's settings
    def broker_config(self) -> dict:
        """mqadmin's getBrokerConfig: every broker.conf key the broker and the store act on, by its Java name, with
        the value in force; ``changeable`` names the keys updateBrokerConfig may change while the server runs."""
        return {"broker_name": self.broker.config.broker_name, "config": broker_settings(self.broker),
                "changeable": sorted(RUNTIME_BROKER_KEYS)}

    def update_broker_config(self, body: dict) -> dict:
        """mqadmin's updateBrokerConfig for the keys that take effect at once (RUNTIME_BROKER_KEYS); any other key
        is refused naming the ones that may change. All keys are checked before any is applied. A change lasts
        until the server stops (put it in broker.conf to keep it)."""
        if not body:
            raise ConsoleError("give at least one key to change, e.g. {\"autoCreateTopicEnable\": false}")
        changes = {}
        for key, value in body.items():
            if key not in RUNTIME_BROKER_KEYS:
                raise ConsoleError(f"{key}: not a key that may change while the server runs (those are: "
                                   f"{', '.join(sorted(RUNTIME_BROKER_KEYS))})")
            field, kind = RUNTIME_BROKER_KEYS[key]
            changes[field] = _setting_value(key, kind, value)
        cfg = self.broker.config
        trial = cfg.replace(**changes)           # BrokerConfig checks each field's range (ValueError names it)
        del trial
        old = {f: getattr(cfg, f) for f in changes}
        transactions = getattr(self.broker, "transactions", None)
        for field, value in changes.items():
            if field == "broker_permission":
                self.broker.update_broker_permission(value)
                continue
            setattr(cfg, field, value)
            if field.startswith("transaction_") and transactions is not None:
                setattr(transactions, field, value)     # the check service copied them at open; it reads its own
        if "auto_create_topic_enable" in changes:
            self.broker._invalidate_sends()      # a cached refusal of an unknown topic must not outlive the switch
        keys = {field: key for key, (field, _k) in RUNTIME_BROKER_KEYS.items()}
        return {"changed": {keys[f]: {"old": old[f], "new": changes[f]} for f in changes if old[f] != changes[f]},
                "config": broker_settings(self.broker)}

    # ------------------------------------------------------------------ who is connected
    def connections(self, group: str = "", topic: str = "") -> dict:
        """mqadmin's consumerConnection (``group``) and producerConnection (``topic``: the producers that declared
        it): the clients connected now, as the group pages count them."""
        if group:
            validate_group(group)
        if topic:
            validate_topic(topic)
        return {"group": group or None, "topic": topic or None,
                "items": [client_row(c) for c in self._clients(group, topic)]}

    def _clients(self, group: str = "", topic: str = "") -> list:
        clients = sorted(self.server.events.clients(), key=lambda c: c.client_id)
        if group:
            clients = [c for c in clients if c.group == group]
        if topic:
            clients = [c for c in clients if topic in c.topics and c.kind == "PRODUCER"]
        return clients


def client_row(c) -> dict:
    """One connected client as the console and ``rmqcore connections`` show it."""
    return {"client_id": c.client_id, "kind": c.kind, "group": c.group or None, "topics": sorted(c.topics),
            "address": c.address, "language": c.language, "version": c.version, "telemetry": c.telemetry,
            "first_seen": fmt_ms(int(c.first_seen * 1000)), "last_seen": fmt_ms(int(c.last_seen * 1000))}


def _body_bytes(body: dict) -> bytes:
    if body.get("body_base64") is not None:
        try:
            return base64.b64decode(body["body_base64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise ConsoleError("body_base64: not base64") from None
    text = body.get("body", "")
    if not isinstance(text, str):
        raise ConsoleError("body: expected a string (or body_base64 for bytes)")
    if not text:
        raise ConsoleError("body: required (a message body may not be empty)")
    return text.encode("utf-8")


# updateBrokerConfig's keys that take effect while the server runs, by their Java name: the send and pull checks,
# topic and group auto-creation and the transaction check read them at each use. The rest (names, ports, file
# sizes, flush mode, ...) are read once at start.
RUNTIME_BROKER_KEYS = {
    "brokerPermission": ("broker_permission", "int"),
    "autoCreateTopicEnable": ("auto_create_topic_enable", "bool"),
    "autoCreateSubscriptionGroup": ("auto_create_subscription_group", "bool"),
    "rejectTransactionMessage": ("reject_transaction_message", "bool"),
    "transactionTimeOut": ("transaction_timeout", "int"),
    "transactionCheckMax": ("transaction_check_max", "int"),
    "transactionCheckInterval": ("transaction_check_interval", "int"),
}


def _setting_value(key: str, kind: str, value):
    """A JSON value or a broker.conf string ("true", "6") as the field's type; ValueError names the key."""
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise ConsoleError(f"{key}: expected true or false, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConsoleError(f"{key}: expected an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ConsoleError(f"{key}: expected an integer, got {value!r}") from None


def broker_settings(broker) -> dict:
    """broker.conf key -> the value in force, for every key the broker and its store read (broker_conf.KEYS)."""
    from ..broker.broker_conf import KEYS
    out = {}
    for key, (which, field, _kind) in sorted(KEYS.items()):
        cfg = broker.config if which == "broker" else broker.store_config
        value = getattr(cfg, field, None)
        if isinstance(value, (bool, int, float, str)) or value is None:
            out[key] = value
        else:
            out[key] = str(value)
    return out


# MixAll's built-in groups, listed only with ``system``.
_SYSTEM_GROUPS = frozenset({"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                            "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_ONSAPI_PULL", "DEFAULT_CONSUMER"})

__all__ = ["ConsoleData", "ConsoleError", "NotFound", "RateHistory"]
