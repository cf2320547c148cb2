"""rmqcore: the admin command line for RocketMQ store directories (also python -m rmqcore).

Commands: demo, inspect, verify, get, query, dump, repair, stats, export, topic, group, dlq; serve
(rmqcore/serve/cli.py). Every command but demo, repair, serve and the admin commands (topic, group, dlq) only
reads (files mapped read-only, no lock taken). The admin commands work on a store no server holds (STORE) or on a
running server (--server URL, through its console's JSON API) alike. Human output by default, --json for scripts.

Exit status: 0 success; 1 the command ran and found a problem (verify: bad records; get/query: nothing found;
topic/group/dlq: the topic, group or message named does not exist);
2 a usage error or a path/argument the command cannot work with (message on stderr, one line).
"""
from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from .admin_views import EXIT_ERROR, EXIT_OK, EXIT_PROBLEM, table
from .admin_views import emit_json as _emit_json
from .compression import COMPRESSED_FLAG, DEFAULT_LIMIT as DEFAULT_BODY_LIMIT, producer_body


class CliError(Exception):
    """An error the user can fix: printed as one line, exit status 2."""


# -- output helpers --------------------------------------------------------------------------------------------------

def _fmt_rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s" if seconds > 0 and n else "n/a"


def _fmt_ts(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


class ProgressBar:
    """A one-line progress bar on stderr, drawn only on a terminal (never into pipes, logs or --json output).

    ``total`` is the work in ``unit`` ("B": bytes actually to be processed, e.g. a store's data rather than its
    files' apparent sizes; else a count such as "queues"); redrawn at most every ``INTERVAL`` seconds."""

    INTERVAL = 0.1

    def __init__(self, total: int, label: str, enabled: bool, stream: TextIO | None = None, unit: str = "B",
                 interval: float | None = None):
        self.stream = stream or sys.stderr
        self.total = max(total, 1)
        self.label = label
        self.unit = unit
        self.interval = self.INTERVAL if interval is None else interval
        self.done = 0
        self.enabled = enabled and self.stream.isatty()
        self.t0 = time.monotonic()
        self._last = 0.0
        self._width = 0
        self.update(0)

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if n and now - self._last < self.interval and self.done < self.total:
            return
        self._last = now
        frac = min(1.0, self.done / self.total)
        width = 30
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        secs = now - self.t0
        if self.unit == "B":
            figures = (f"{_fmt_bytes(self.done)} of {_fmt_bytes(self.total)}"
                       f"{f', {self.done / secs / 1e6:,.0f} MB/s' if secs > 0 and self.done else ''}")
        else:
            figures = f"{self.done:,} of {self.total:,} {self.unit}"
        line = f"\r{self.label} [{bar}] {frac:6.1%} {figures} "
        self._width = max(self._width, len(line))
        self.stream.write(line.ljust(self._width))
        self.stream.flush()

    def set(self, done: int, total: int) -> None:
        """For a callback that tells where it is (done of total) rather than how much it just did."""
        self.total = max(total, 1)
        self.update(done - self.done)

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * max(self._width, 100) + "\r")
            self.stream.flush()


def _body(m: Any, limit: int) -> tuple[bytes, str | None]:
    """The body the producer sent (a compressed record's inflated, no further than ``limit``) and what to say of
    its compression: None, "ZLIB" (or LZ4, ZSTD), or "ZLIB, not inflated: why" with the stored bytes."""
    raw, name, error = producer_body(m.body, m.sys_flag, limit)
    return raw, (f"{name}, not inflated: {error}" if error else name)


def message_dict(m: Any, body: str = "base64", limit: int = DEFAULT_BODY_LIMIT) -> dict:
    """A MessageExt as JSON-able fields (body base64, or UTF-8 text with ``body="text"``, bad bytes replaced): the
    body the producer sent, ``compression`` saying how it is stored (None: as it is; see _body)."""
    d = m.as_dict()
    del d["body"]
    raw, d["compression"] = _body(m, limit)
    d["body"] = (base64.b64encode(raw).decode("ascii") if body == "base64"
                 else raw.decode("utf-8", "replace"))
    d.update(topic=m.topic, tags=m.tags, keys=list(m.keys), msg_id=m.msg_id, uniq_key=m.uniq_key)
    return d


def _message_line(m: Any, limit: int = DEFAULT_BODY_LIMIT) -> str:
    raw, compression = _body(m, limit) if m.sys_flag & COMPRESSED_FLAG else (bytes(m.body[:40]), None)
    body = raw[:40]
    more = "..." if len(raw) > 40 or m.body.nbytes > 40 else ""
    return (f"{m.commitlog_offset:>14}  {m.topic}/{m.queue_id}@{m.queue_offset}  {m.store_size} B  "
            f"{_fmt_ts(m.store_timestamp)}  tags={m.tags or '-'}  keys={' '.join(m.keys) or '-'}  "
            f"id={m.msg_id}  body={body!r}{more}" + (f"  compressed={compression}" if compression else ""))


def _reader(args: argparse.Namespace):
    from .admin import StoreReader
    return StoreReader(args.store)


def _print_messages(msgs: list, args: argparse.Namespace, out: TextIO, limit: int) -> int:
    if args.json:
        _emit_json([message_dict(m, args.body, limit) for m in msgs], out)
    else:
        for m in msgs:
            print(_message_line(m, limit), file=out)
        if not msgs:
            print("no message found", file=sys.stderr)
    return EXIT_OK if msgs else EXIT_PROBLEM


def _parse_time(value: str | None, name: str) -> int | None:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC when no zone is given)."""
    from .admin import parse_time_ms
    if value is None:
        return None
    try:
        return parse_time_ms(value)
    except ValueError:
        raise CliError(f"{name}: {value!r} is neither milliseconds nor an ISO 8601 time") from None


# -- demo ------------------------------------------------------------------------------------------------------------

def _demo_timed_sends(path: str):
    """The start of the demo's delayed and transactional sends, through a Broker (rmqcore.broker) on its own small
    store at ``path``: a send with delay level 1 (1 s) is stored in SCHEDULE_TOPIC_XXXX and is not in its topic
    yet; a prepared send is invisible until end_transaction commits it. Returns the open broker and the delayed
    send's result for ``_demo_delayed_delivered``, which runs once the rest of the demo has given the second."""
    from . import Message, StoreConfig
    from .broker import Broker

    store_config = StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=1000 * 20,
                               max_hash_slot_num=1000, max_index_num=4000)
    broker = Broker.open(path, store_config=store_config)
    try:
        sent = broker.send(Message("DemoReminders", b"remind me in a second", 0, properties={"DELAY": "1"}))
        now = broker.pull("demo-group", "DemoReminders", 0, 0)
        stored = broker.store.look_message(sent.commitlog_offset)
        print(f"  delayed      send with DELAY 1 (level 1 = 1 s) to DemoReminders/0: stored in {stored.topic} "
              f"queue {stored.queue_id}; DemoReminders at once: {now.status.name}")
        del stored
        half = broker.send(Message("DemoPayments", b"pay order 7", 0,
                                   properties={"TRAN_MSG": "true", "PGROUP": "demo-producers"}))
        half_topic = broker.store.look_message(half.commitlog_offset).topic
        broker.store.wait_dispatched(10)
        before = broker.pull("demo-group", "DemoPayments", 0, 0)
        broker.end_transaction(half.commitlog_offset, "demo-producers", commit=True)
        after = broker.pull("demo-group", "DemoPayments", 0, 0, wait=5.0)
        print(f"  transaction  prepared send stored in {half_topic}; DemoPayments before commit: "
              f"{before.status.name}, after end_transaction(commit): {after.status.name} "
              f"({len(after.messages)} message, {bytes(after.messages[0].body)!r})" if after.messages else
              f"  transaction  the committed message did not arrive: {after.status.name}")
        if not after.messages:
            raise CliError("the committed transactional message is not readable")
        del after
    except BaseException:
        broker.close()
        raise
    return broker, sent


def _demo_delayed_delivered(broker, sent) -> None:
    """The end of ``_demo_timed_sends``: the delayed message arrives in its topic (long polling for it), as the
    store's ScheduleMessageService delivers it once its level's second has passed."""
    g = broker.pull("demo-group", "DemoReminders", 0, 0, wait=5.0)
    if not g.messages:
        raise CliError(f"the delayed message was not delivered: {g.status.name}")
    m = g.messages[0]
    print(f"  delayed      DemoReminders/0 now: {g.status.name}, {bytes(m.body)!r}, stored "
          f"{m.store_timestamp - sent.store_timestamp} ms after its send (ScheduleMessageService)")


def _demo_dir(path: str, force: bool) -> str:
    """``--path`` for a demo: a missing or empty directory. A demo puts thousands of messages and then counts what
    it reads back, so a directory holding a store (someone's data, or an earlier demo's) is refused unless
    ``--force`` says to add to it; any other non-empty directory is refused outright (it is no store to add to)."""
    from .geometry import is_store_dir
    path = os.path.abspath(path)
    if not os.path.exists(path):
        return path
    if not os.path.isdir(path):
        raise CliError(f"--path {path} is a file, not a directory")
    if is_store_dir(path):
        if not force:
            raise CliError(f"--path {path} holds a message store: the demo would add its messages to it (give "
                           "--force to do so, or a missing or empty directory)")
        from .admin import lock_held
        if lock_held(path):
            # asked before anything runs: the demo's first half would otherwise run and then fail on the lock
            raise CliError(f"--path {path} is open in another process (its lock is held, e.g. by rmqcore serve): "
                           "stop it, or give another --path")
    elif os.listdir(path):
        raise CliError(f"--path {path} is not empty and holds no message store: give a missing or empty directory")
    return path


def demo(args: argparse.Namespace) -> int:
    from . import Message, MessageStore, StoreConfig
    from .status import GetStatus

    if args.messages < 0:
        raise CliError(f"--messages must be >= 0, got {args.messages}")
    for name in ("topics", "queues", "body_size"):
        if getattr(args, name) < (0 if name == "body_size" else 1):
            raise CliError(f"--{name.replace('_', '-')} must be >= {0 if name == 'body_size' else 1}, "
                           f"got {getattr(args, name)}")
    root = _demo_dir(args.path, args.force) if args.path else tempfile.mkdtemp(prefix="rmqcore-demo-")
    cfg = StoreConfig(mapped_file_size_commit_log=args.file_size, mapped_file_size_consume_queue=300000 * 20,
                      max_hash_slot_num=500_000, max_index_num=2_000_000)
    topics = [f"DemoTopic{i}" for i in range(args.topics)]
    body = os.urandom(args.body_size)
    n = args.messages
    single = min(n, 50_000)
    print(f"rmqcore demo: {n:,} messages of {args.body_size} B over {len(topics)} topics x {args.queues} queues "
          f"with put_batch, then {single:,} more with put, into {root}")
    timed_root = tempfile.mkdtemp(prefix="rmqcore-demo-broker-")
    timed = None
    try:
        # Started first, so that the delayed message's second passes while the store part runs.
        timed = _demo_timed_sends(timed_root)
        with MessageStore.open(root, cfg) as store:
            # Where the demo's own messages begin in each queue (a --force store holds others).
            start = {(t, q): store.max_offset(t, q) for t in topics for q in range(args.queues)}
            msgs = [Message(topics[i % len(topics)], body, (i // len(topics)) % args.queues, tags=f"Tag{i % 5}",
                            keys=[f"order-{i}"]) for i in range(n)]
            t0 = time.perf_counter()
            results = []
            step = 1000
            for i in range(0, n, step):
                results.extend(store.put_batch(msgs[i:i + step]))
            t_put = time.perf_counter() - t0
            if not all(r.ok for r in results):
                raise CliError("a put failed: " + next(str(r.status) for r in results if not r.ok))
            mb = sum(r.wrote_bytes for r in results) / 1e6
            print(f"  put_batch    {_fmt_rate(n, t_put):>13}  {mb / t_put if t_put and n else 0:8.1f} MB/s  "
                  f"({n:,} messages, {mb:.1f} MB of records, batches of {step})")

            t0 = time.perf_counter()
            for _ in range(single):
                store.put(Message(topics[0], body, 0))
            t_put1 = time.perf_counter() - t0
            print(f"  put          {_fmt_rate(single, t_put1):>13}  ({single:,} messages, one call each, to "
                  f"{topics[0]}/0)")
            print("               (one run each: put_batch goes first and pays for allocating the new files, and "
                  "both share the machine with whatever else runs; `python -m bench` compares them properly)")

            t0 = time.perf_counter()
            ok = store.wait_dispatched(60)
            print(f"  dispatch     caught up in {time.perf_counter() - t0:.3f} s after the last put "
                  f"({'ok' if ok else 'TIMEOUT'})")

            t0 = time.perf_counter()
            for r, m in zip(results, msgs):
                got = store.look_message(r.commitlog_offset)
                if got is None or got.queue_offset != r.queue_offset or got.topic != m.topic:
                    raise CliError(f"read back mismatch at commitlog offset {r.commitlog_offset}")
            t_read = time.perf_counter() - t0
            print(f"  look_message {_fmt_rate(n, t_read):>13}  ({n:,} put_batch messages read back by commitlog "
                  "offset)")

            t0 = time.perf_counter()
            got_total = 0
            for t in topics:
                for q in range(args.queues):
                    off = start[(t, q)]
                    while True:
                        g = store.get_messages("demo-group", t, q, off, 32)
                        if g.status is not GetStatus.FOUND:
                            break
                        got_total += len(g.messages)
                        off = g.next_begin_offset
            t_get = time.perf_counter() - t0
            print(f"  get_messages {_fmt_rate(got_total, t_get):>13}  ({got_total:,} messages pulled by queue: "
                  f"{n:,} + {single:,})")
            if got_total != n + single:
                raise CliError(f"pulled {got_total:,} messages, expected {n + single:,}")

            t0 = time.perf_counter()
            stride = max(1, n // 2000)
            probe_ids = range(0, n, stride)
            found = 0
            for i in probe_ids:
                # The demo's own message, by its offset: the newest come first, so an older store's messages with
                # the same key (a --force run) do not stand in for it.
                hits = store.query_message(topics[i % len(topics)], f"order-{i}", 4)
                found += any(h.commitlog_offset == results[i].commitlog_offset for h in hits)
            t_q = time.perf_counter() - t0
            probes = len(probe_ids)
            per_key = f"{t_q / probes * 1e6:10.1f} us/key" if probes else "       n/a"
            print(f"  query_message {per_key}  ({found:,}/{probes:,} keys found)")
            if found != probes:
                raise CliError("some keys were not found by the index")
            info = store.runtime_info()
        print("  files:")
        for dirpath, _, files in sorted(os.walk(root)):
            rel = os.path.relpath(dirpath, root)
            if files and rel.count(os.sep) < 3:
                shown = sorted(files)
                print(f"    {rel:<32} {len(shown):4d} file(s): {', '.join(shown[:3])}{' ...' if len(shown) > 3 else ''}")
        print(f"  commitlog max offset {info['commitlog_max_offset']:,}, {info['consume_queues']} consume queues, "
              f"{info['index_files']} index file(s)")
        _demo_delayed_delivered(*timed)
    finally:
        if timed is not None:
            timed[0].close()
        shutil.rmtree(timed_root, ignore_errors=True)
        if not args.keep and not args.path:
            shutil.rmtree(root, ignore_errors=True)
    return EXIT_OK


def demo_broker(args: argparse.Namespace) -> int:
    try:
        from rmqcore.broker.demo import run
    except ImportError as e:
        raise CliError(f"the broker demo is not available in this build (rmqcore.broker.demo: {e})") from None
    path = _demo_dir(args.path, args.force) if args.path else tempfile.mkdtemp(prefix="rmqcore-broker-demo-")
    try:
        return run(path, args.messages)
    finally:
        if not args.keep and not args.path:
            shutil.rmtree(path, ignore_errors=True)


# -- inspect ---------------------------------------------------------------------------------------------------------

def _dir_summary(path: str) -> tuple[int, int]:
    files = size = 0
    for dirpath, _, names in os.walk(path):
        for n in names:
            files += 1
            size += os.path.getsize(os.path.join(dirpath, n))
    return files, size


def inspect_cmd(args: argparse.Namespace) -> int:
    out = sys.stdout
    with _reader(args) as r:
        cfg = r.config
        first_ts, last_ts = r.first_and_last_timestamp()
        queues = []
        for (topic, qid), cq in sorted(r.consume_queues.items()):
            queues.append({"topic": topic, "queue_id": qid, "min_offset": cq.min_offset_in_queue,
                           "max_offset": cq.max_offset_in_queue,
                           "messages": cq.max_offset_in_queue - cq.min_offset_in_queue})
        index_files = []
        if r.index_service is not None:
            for f in r.index_service.index_file_list:
                index_files.append({"file": os.path.basename(f.file_name) if hasattr(f, "file_name") else "",
                                    "keys": max(0, f.index_count - 1), "begin_timestamp": f.begin_timestamp,
                                    "end_timestamp": f.end_timestamp})
        dirs = {}
        for d in ("commitlog", "consumequeue", "index", "config"):
            p = os.path.join(r.path, d)
            if os.path.isdir(p):
                dirs[d] = dict(zip(("files", "bytes"), _dir_summary(p)))
        config_files = sorted(os.listdir(os.path.join(r.path, "config"))) if "config" in dirs else []
        dispatched = r.dispatched_offset()
        from .broker.transaction import unresolved_halves
        unresolved = unresolved_halves(r)
        info = {
            "store": r.path,
            "state": ("open (lock held by a running process)" if r.locked else
                      "crashed or killed (abort file present): the next open recovers abnormally" if r.aborted
                      else "closed cleanly"),
            "geometry": {"mapped_file_size_commit_log": cfg.mapped_file_size_commit_log,
                         "mapped_file_size_consume_queue": cfg.mapped_file_size_consume_queue,
                         "max_hash_slot_num": cfg.max_hash_slot_num, "max_index_num": cfg.max_index_num},
            "geometry_source": ("read from the files" if r.geometry.mapped_file_size_commit_log is not None
                                else "defaults: the store has no commitlog file yet"),
            "directories": dirs,
            "commitlog": {"files": len(r.commit_log.mapped_file_queue), "min_offset": r.min_offset,
                          "max_offset": r.max_offset, "first_store_time": _fmt_ts(first_ts),
                          "last_store_time": _fmt_ts(last_ts)},
            "dispatch": {"dispatched_offset": dispatched,
                         "behind_bytes": max(0, r.max_offset - max(dispatched, r.min_offset))},
            "checkpoint": ({k: (_fmt_ts(v) if k.endswith("timestamp") else v)
                            for k, v in r.checkpoint.as_dict().items()} if r.checkpoint else None),
            "queues": queues,
            "index_files": index_files,
            "config_files": config_files,
            "unresolved_halves": unresolved,
        }
    if args.json:
        _emit_json(info, out)
        return EXIT_OK
    print(f"store      {info['store']}", file=out)
    print(f"state      {info['state']}", file=out)
    g = info["geometry"]
    print(f"geometry   commitlog files {_fmt_bytes(g['mapped_file_size_commit_log'])}, consume-queue files "
          f"{g['mapped_file_size_consume_queue'] // 20:,} units, index {g['max_hash_slot_num']:,} slots x "
          f"{g['max_index_num']:,} items ({info['geometry_source']})", file=out)
    for d, s in dirs.items():
        print(f"{d + '/':<11}{' ' if len(d) >= 10 else ''}{s['files']:,} file(s), {_fmt_bytes(s['bytes'])}", file=out)
    c = info["commitlog"]
    print(f"commitlog  offsets [{c['min_offset']:,}, {c['max_offset']:,}) in {c['files']} file(s); stored "
          f"{c['first_store_time']} .. {c['last_store_time']}", file=out)
    d = info["dispatch"]
    reach = f"consume queues reach {d['dispatched_offset']:,}" if d["dispatched_offset"] >= 0 else "no consume queue"
    print(f"dispatch   {reach}; {d['behind_bytes']:,} bytes not dispatched"
          + (" (built at the next open)" if d["behind_bytes"] else ""), file=out)
    if info["checkpoint"]:
        cp = info["checkpoint"]
        print(f"checkpoint physic {cp['physic_msg_timestamp']}, logics {cp['logics_msg_timestamp']}, index "
              f"{cp['index_msg_timestamp']}", file=out)
    print(f"index      {len(index_files)} file(s), {sum(f['keys'] for f in index_files):,} keys", file=out)
    print(f"config/    {', '.join(config_files) or '-'}", file=out)
    if unresolved["count"]:
        groups = ", ".join(f"{g or '(none)'} {v['halves']} ({', '.join(v['topics'])})"
                           for g, v in unresolved["producer_groups"].items())
        print(f"transactions {unresolved['count']:,} half message(s) never resolved (no producer answered their "
              f"checks; moved to {unresolved['topic']}); producer groups: {groups}", file=out)
    if queues:
        print(f"queues     {len(queues)} in {len({q['topic'] for q in queues})} topic(s):", file=out)
        table([(q["topic"], q["queue_id"], q["min_offset"], q["max_offset"], q["messages"]) for q in queues],
              ("topic", "queue", "min offset", "max offset", "messages"), out)
    else:
        print("queues     none", file=out)
    return EXIT_OK


# -- verify ----------------------------------------------------------------------------------------------------------

def verify_cmd(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise CliError(f"--limit must be >= 0, got {args.limit}")
    out = sys.stdout
    with _reader(args) as r:
        bar = ProgressBar(r.data_bytes(), "verify commitlog", not (args.json or args.quiet))
        try:
            segments = r.verify_segments(check_crc=not args.no_crc, progress=bar.update)
        finally:
            bar.close()
        bad = [b.as_dict() for s in segments for b in s.bad]
        report: dict[str, Any] = {"store": r.path, "live": r.locked, "judged_to": None, "commitlog_files": len(segments),
                                  "records": sum(s.records for s in segments),
                                  "bytes": sum(s.bytes for s in segments), "commitlog_errors": bad}
        if r.locked:
            # Another process writes: records appended after the reader looked are not judged (the newest may be
            # half written); with the queues and index checked, neither are those dispatch had not reached.
            report["judged_to"] = r.max_offset
        if not args.commitlog_only:
            bars = _PhaseBars(not (args.json or args.quiet))
            try:
                parts = r.verify_parts(progress=bars)
            finally:
                bars.close()
            report.update(cq_units=parts["cq_units"], cq_errors=parts["cq_errors"], keys=parts["keys"],
                          index_missing=[m._asdict() for m in parts["index_missing"]],
                          index_errors=parts["index_errors"], index_problems=parts["index_problems"],
                          damaged_queues=[list(q) for q in parts["damaged_queues"]],
                          undispatchable=parts["undispatchable"],
                          undispatchable_offsets=parts["undispatchable_offsets"])
            if parts["judged_to"] is not None:
                report["judged_to"] = parts["judged_to"]
                report["not_judged"] = parts["not_judged"]
            # killed without a close: the records its dispatcher had not reached get their units and keys at the
            # next open (as inspect says), which is no damage
            report["not_dispatched"] = parts["not_dispatched"]
            # verify_parts walks the commitlog too; its findings there are the segment walk's (which also knows
            # that preallocated empty files after the data need no end-of-file blank), so they are not repeated.
        if report["judged_to"] is not None and r.locked:
            # (a killed store's records are all judged: only their units and keys wait for the next open)
            report["commitlog_errors"] = [b for b in bad if b["offset"] < report["judged_to"]]
        report["ok"] = not (report["commitlog_errors"] or report.get("cq_errors") or report.get("index_missing")
                            or report.get("index_errors"))
    if args.json:
        _emit_json(report, out)
    else:
        print(f"{'OK' if report['ok'] else 'FAILED'}: {report['store']}", file=out)
        if report["live"]:
            print(f"  live store (open in another process): judged up to commitlog offset {report['judged_to']:,}, "
                  "what was written and dispatched when verify looked"
                  + (f"; {report['not_judged']:,} newer record(s) not judged" if report.get("not_judged") else ""),
                  file=out)
        if report.get("not_dispatched"):
            print(f"  killed or crashed (abort file): {report['not_dispatched']:,} record(s) from commitlog offset "
                  f"{report['judged_to']:,} not yet dispatched (built at the next open); their units and keys are "
                  "not judged", file=out)
        print(f"  commitlog  {report['records']:,} records, {_fmt_bytes(report['bytes'])} in "
              f"{report['commitlog_files']} file(s), {len(report['commitlog_errors'])} bad", file=out)
        for b in report["commitlog_errors"][:args.limit]:
            print(f"    {b['message']}", file=out)
        if report.get("undispatchable"):
            print(f"  {report['undispatchable']:,} record(s) kept but not dispatched (topic or queue id names no "
                  f"directory), first at {', '.join(map(str, report['undispatchable_offsets'][:5]))}", file=out)
        if "cq_units" in report:
            print(f"  consume queues {report['cq_units']:,} units, {len(report['cq_errors'])} wrong", file=out)
            for e in report["cq_errors"][:args.limit]:
                print(f"    {e}", file=out)
            print(f"  index      {report['keys']:,} keys, {len(report['index_missing'])} not findable, "
                  f"{len(report['index_errors'])} header error(s)", file=out)
            for e in report["index_errors"][:args.limit]:
                print(f"    {e}", file=out)
            for m in report["index_missing"][:args.limit]:
                print(f"    {m['topic']}#{m['key']} (record at {m['record_offset']})", file=out)
    return EXIT_OK if report["ok"] else EXIT_PROBLEM


class _PhaseBars:
    """recovery.verify_parts' ``progress(phase, done, total)`` as one bar per phase: the records the units and keys
    are checked against (bytes), the consume queues, the index files."""

    LABELS = {"commitlog": ("verify units and keys: records", "B"), "consumequeue": ("verify consume queues", "queues"),
              "index": ("verify index", "files")}

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.phase: str | None = None
        self.bar: ProgressBar | None = None

    def __call__(self, phase: str, done: int, total: int) -> None:
        if phase != self.phase:
            if self.bar is not None:
                self.bar.close()
            label, unit = self.LABELS.get(phase, (f"verify {phase}", ""))
            self.phase, self.bar = phase, ProgressBar(total, label, self.enabled, unit=unit)
        assert self.bar is not None
        self.bar.set(done, total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# -- get / query -----------------------------------------------------------------------------------------------------

def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdefABCDEF" for c in text)


def get_cmd(args: argparse.Namespace) -> int:
    if args.count <= 0:
        raise CliError(f"--count must be > 0, got {args.count}")
    ways = [name for name, given in (("--msg-id", args.msg_id is not None),
                                     ("--commitlog-offset", args.commitlog_offset is not None),
                                     ("--topic/--offset", args.topic is not None or args.offset is not None)) if given]
    if len(ways) > 1:
        raise CliError(f"{' and '.join(ways)} select messages in different ways: give one of them")
    if args.msg_id is not None and not _is_hex(args.msg_id):
        # Every id RocketMQ gives a message is hexadecimal (an offset msg id: store host and commitlog offset; a
        # UNIQ_KEY, MessageClientIDSetter's): anything else is a typo, not a message that is missing.
        raise CliError(f"--msg-id {args.msg_id!r} is not a message id: expected hexadecimal digits (an offset msg "
                       "id of 32 or 56, or a UNIQ_KEY as the client shows it)")
    with _reader(args) as r:
        if args.msg_id is not None:
            msgs = r.by_msg_id(args.msg_id)
        elif args.commitlog_offset is not None:
            try:
                r.locate(args.commitlog_offset)
            except ValueError as e:
                raise CliError(str(e)) from None
            m = r.look_message(args.commitlog_offset)
            msgs = [m] if m is not None else []
        else:
            if args.topic is None or args.offset is None:
                raise CliError("give --topic, --queue and --offset, or --commitlog-offset, or --msg-id")
            try:
                msgs = r.get(args.topic, args.queue, args.offset, args.count)
            except (KeyError, IndexError) as e:
                raise CliError(e.args[0]) from None
        return _print_messages(msgs, args, sys.stdout, r.config.max_message_size)


def query_cmd(args: argparse.Namespace) -> int:
    if args.max <= 0:
        raise CliError(f"--max must be > 0, got {args.max}")
    begin = _parse_time(args.begin, "--begin")
    end = _parse_time(args.end, "--end")
    with _reader(args) as r:
        if args.topic not in r.topics():
            raise CliError(f"no topic {args.topic!r} in {r.path} (topics: {', '.join(sorted(r.topics())) or 'none'})")
        # one more than --max is asked for: the only way to know there are more than it shows
        if args.key is not None:
            msgs = r.query_key(args.topic, args.key, args.max + 1, begin or 0,
                               end if end is not None else (1 << 63) - 1)
        elif begin is not None or end is not None:
            msgs = r.query_time(args.topic, begin or 0, end if end is not None else (1 << 63) - 1, args.queue,
                                args.max + 1)
        else:
            raise CliError("give --key, or a time window with --begin/--end")
        more = len(msgs) > args.max
        code = _print_messages(msgs[:args.max], args, sys.stdout, r.config.max_message_size)
        if more:
            last = msgs[args.max - 1]
            if args.key is not None:
                how = "give a larger --max, or a narrower --begin/--end"
            else:
                how = (f"the next page: --begin {last.store_timestamp} (the last shown's store time, "
                       f"{_fmt_ts(last.store_timestamp)}; messages stored in that millisecond are shown again), "
                       "or a larger --max")
            print(f"more than {args.max} messages match; showing the first {args.max}: {how}", file=sys.stderr)
        return code


# -- dump ------------------------------------------------------------------------------------------------------------

def dump_cmd(args: argparse.Namespace) -> int:
    from .admin import BadRecord
    if args.count < 0:
        raise CliError(f"--count must be >= 0, got {args.count}")
    out = sys.stdout
    bad = 0
    with _reader(args) as r:
        offset = r.min_offset if args.offset is None else args.offset
        if r.max_offset == r.min_offset and args.offset is None:
            print("the commitlog holds no record", file=sys.stderr)
            return EXIT_OK
        try:
            r.locate(offset)
        except ValueError as e:
            raise CliError(str(e)) from None
        shown = 0
        for item in r.walk(offset, check_crc=not args.no_crc):
            if isinstance(item, BadRecord):
                bad += 1
                if args.json:
                    print(json.dumps({"bad_record": item.as_dict()}), file=out)
                else:
                    print(f"{item.offset:>14}  BAD RECORD: {item.message} (skipped to the next valid record)",
                          file=out)
                continue
            if shown >= args.count:
                break
            shown += 1
            if args.json:
                print(json.dumps(message_dict(item, args.body, r.config.max_message_size), default=str), file=out)
            else:
                print(_message_line(item, r.config.max_message_size), file=out)
    if bad:
        print(f"{bad} bad record(s) skipped", file=sys.stderr)
    return EXIT_PROBLEM if bad else EXIT_OK


# -- repair ----------------------------------------------------------------------------------------------------------

def _damage_summary(v: dict) -> str:
    parts = []
    if v["commitlog_errors"]:
        parts.append(f"{len(v['commitlog_errors'])} bad record(s)")
    if v["cq_errors"]:
        parts.append(f"{v.get('cq_error_count', len(v['cq_errors'])):,} consume-queue error(s) in "
                     f"{len(v['damaged_queues'])} queue(s)")
    if v["index_errors"]:
        parts.append(f"{v['index_error_count']} index header error(s)")
    if v["index_missing"]:
        parts.append(f"{v.get('index_missing_count', len(v['index_missing'])):,} key(s) not findable")
    return ", ".join(parts) or "nothing wrong"


def repair_cmd(args: argparse.Namespace) -> int:
    from .admin import check_store_path
    path = check_store_path(args.store)
    crashed = os.path.exists(os.path.join(path, "abort"))
    if args.dry_run:
        from .recovery import plan_recovery
        plan = plan_recovery(path)
        if args.json:
            _emit_json(plan, sys.stdout)
        else:
            print(f"dry run, nothing changed: {path} ({'crashed' if crashed else 'closed cleanly'})")
            print(f"  scanned {plan['records_scanned']:,} records from offset {plan['scan_from']:,}; valid data ends "
                  f"at {plan['data_ends_at']:,} ({plan['stop']})")
            if plan["would_cut_bytes"]:
                aside = "copied aside into rmqcore-cut/ first" if plan["would_keep_aside"] else "a torn tail"
                print(f"  an open would cut {plan['would_cut_bytes']:,} bytes ({aside})"
                      + (f" and remove {', '.join(plan['files_removed'])}" if plan["files_removed"] else ""))
            else:
                print("  an open would cut nothing")
        return EXIT_OK
    from .admin import repair
    r = repair(args.store)
    rec = r["recovery"]
    report = {"store": r["store"], "crashed": r["crashed"], "records_scanned": rec.get("records", 0),
              "scan_from": rec.get("scan_from", 0), "truncated_bytes": rec.get("truncated_bytes", 0),
              "stop": rec.get("stop", "end of data"), "rebuilt_units": r["rebuilt_units"],
              "rebuilt_keys": r["rebuilt_keys"], "commitlog_max_offset": r["commitlog_max_offset"],
              "found": _damage_summary(r["found"]), "rebuilt_queues": [f"{t}/{q}" for t, q in r["rebuilt_queues"]],
              "rebuilt_index": r["rebuilt_index"], "ok": r["ok"], "remaining": _damage_summary(r["verify"]),
              "cut_kept_in": rec.get("cut_kept_in"), "undispatchable": rec.get("undispatchable", 0),
              "seconds": rec.get("seconds")}
    if args.json:
        _emit_json(report, sys.stdout)
    else:
        print(f"{'recovered after a crash' if report['crashed'] else 'was closed cleanly; checked'}: {report['store']}")
        print(f"  scanned {report['records_scanned']:,} records from offset {report['scan_from']:,}; data ends at "
              f"{report['commitlog_max_offset']:,}")
        print(f"  cut {report['truncated_bytes']:,} bytes after the last good record ({report['stop']})")
        if report["cut_kept_in"]:
            print(f"  the cut bytes are kept in {report['cut_kept_in']} (report.json says how to undo the cut)")
        if report["undispatchable"]:
            print(f"  {report['undispatchable']:,} records kept but not dispatched (their topic or queue id names no "
                  "directory)")
        print(f"  verify found: {report['found']}")
        if report["rebuilt_queues"] or report["rebuilt_index"]:
            what = report["rebuilt_queues"][:10] + (["..."] if len(report["rebuilt_queues"]) > 10 else [])
            print("  rebuilt from the commitlog: " + ", ".join(
                (["queue(s) " + " ".join(what)] if what else []) + (["every index file"] if report["rebuilt_index"]
                                                                    else [])))
        print(f"  rebuilt {report['rebuilt_units']:,} consume-queue units and {report['rebuilt_keys']:,} index keys")
        print(f"  {'OK' if report['ok'] else 'FAILED'} after repair" + ("" if report["ok"] else
                                                                         f": {report['remaining']} remain"))
    return EXIT_OK if report["ok"] else EXIT_PROBLEM


# -- stats / export --------------------------------------------------------------------------------------------------

def stats_cmd(args: argparse.Namespace) -> int:
    per: dict[tuple[str, int], dict] = {}
    with _reader(args) as r:
        bar = ProgressBar(r.data_bytes(), "stats", not args.json)
        try:
            for m in r.iterate(progress=bar.update):
                s = per.get((m.topic, m.queue_id))
                ts, qo = m.store_timestamp, m.queue_offset
                if s is None:
                    per[(m.topic, m.queue_id)] = {"messages": 1, "bytes": m.store_size, "first": ts, "last": ts,
                                                  "min_qo": qo, "max_qo": qo}
                    continue
                s["messages"] += 1
                s["bytes"] += m.store_size
                s["first"] = min(s["first"], ts)
                s["last"] = max(s["last"], ts)
                s["min_qo"] = min(s["min_qo"], qo)
                s["max_qo"] = max(s["max_qo"], qo)
        finally:
            bar.close()
    rows = [{"topic": t, "queue_id": q, "messages": s["messages"], "bytes": s["bytes"],
             "first_store_time": _fmt_ts(s["first"]), "last_store_time": _fmt_ts(s["last"]),
             "min_queue_offset": s["min_qo"], "max_queue_offset": s["max_qo"]} for (t, q), s in sorted(per.items())]
    if args.json:
        _emit_json(rows, sys.stdout)
    else:
        table([(x["topic"], x["queue_id"], x["messages"], x["bytes"], x["first_store_time"], x["last_store_time"])
               for x in rows], ("topic", "queue", "messages", "bytes", "first stored", "last stored"), sys.stdout)
        print(f"  {sum(x['messages'] for x in rows):,} messages, {_fmt_bytes(sum(x['bytes'] for x in rows))} in "
              f"{len(rows)} queue(s)")
    return EXIT_OK


_EXPORT_FIELDS = ("topic", "queue_id", "queue_offset", "commitlog_offset", "store_size", "body_crc", "flag",
                  "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
                  "prepared_transaction_offset", "tags", "keys", "msg_id", "uniq_key", "properties", "compression", "body")


def _selected(r, args: argparse.Namespace, progress: Callable[[int], None]) -> Iterable:
    begin = _parse_time(args.begin, "--begin")
    end = _parse_time(args.end, "--end")
    topics = set(args.topic) if args.topic else None
    for m in r.iterate(progress=progress):
        if topics is not None and m.topic not in topics:
            continue
        if (begin is not None and m.store_timestamp < begin) or (end is not None and m.store_timestamp > end):
            continue
        yield m


# OUT's extension -> format; another extension needs --format (a .csv once silently got JSON lines).
_EXPORT_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet"}


def _export_format(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    if args.out == "-":
        return "jsonl"
    ext = os.path.splitext(args.out)[1].lower()
    if ext not in _EXPORT_EXTENSIONS:
        raise CliError(f"{args.out}: {'no extension' if not ext else f'extension {ext!r}'} says no format: name the "
                       f"file *.jsonl, *.csv or *.parquet, or give --format")
    return _EXPORT_EXTENSIONS[ext]


def _export_row(m: Any, body: str, limit: int) -> dict:
    d = message_dict(m, body, limit)
    return {k: d[k] for k in _EXPORT_FIELDS}


def export_cmd(args: argparse.Namespace) -> int:
    fmt = _export_format(args)
    if fmt == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise CliError("Parquet export needs pyarrow (pip install pyarrow, or rmqcore[spark]); "
                           "JSON lines (--format jsonl) and CSV need nothing") from None
    if args.out == "-" and fmt != "jsonl":
        raise CliError(f"{fmt} is written to a file, not stdout: give a file name")
    if args.out != "-" and os.path.exists(args.out) and not args.force:
        raise CliError(f"{args.out} exists (use --force to overwrite)")
    count = 0
    tmp = None
    with _reader(args) as r:
        bar = ProgressBar(r.data_bytes(), "export", args.out != "-")
        try:
            if args.out != "-":
                # Written under a temporary name beside OUT and renamed at the end: an interrupted or failed export
                # leaves no partial OUT (and an OUT given with --force stays whole until the new one replaces it).
                fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(args.out)}.", suffix=".partial",
                                           dir=os.path.dirname(os.path.abspath(args.out)))
                os.close(fd)
            if fmt in ("jsonl", "csv"):
                f = sys.stdout if tmp is None else open(tmp, "w", encoding="utf-8", newline="")
                try:
                    if fmt == "jsonl":
                        for m in _selected(r, args, bar.update):
                            f.write(json.dumps(_export_row(m, args.body, r.config.max_message_size), default=str) + "\n")
                            count += 1
                    else:
                        import csv
                        w = csv.writer(f)
                        w.writerow(_EXPORT_FIELDS)
                        for m in _selected(r, args, bar.update):
                            row = _export_row(m, args.body, r.config.max_message_size)
                            # keys space-separated as RocketMQ's KEYS property holds them; properties as JSON
                            row.update(keys=" ".join(row["keys"]), properties=json.dumps(row["properties"]))
                            w.writerow([row[k] for k in _EXPORT_FIELDS])
                            count += 1
                finally:
                    if f is not sys.stdout:
                        f.close()
            else:
                schema = pa.schema([
                    ("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                    ("commitlog_offset", pa.int64()), ("store_size", pa.int32()), ("body_crc", pa.int32()),
                    ("flag", pa.int32()), ("sys_flag", pa.int32()), ("born_timestamp", pa.int64()),
                    ("born_host", pa.string()), ("store_timestamp", pa.int64()), ("store_host", pa.string()),
                    ("reconsume_times", pa.int32()), ("prepared_transaction_offset", pa.int64()),
                    ("tags", pa.string()), ("keys", pa.list_(pa.string())), ("msg_id", pa.string()),
                    ("uniq_key", pa.string()), ("properties", pa.map_(pa.string(), pa.string())),
                    ("compression", pa.string()), ("body", pa.binary())])
                with pq.ParquetWriter(tmp, schema) as w:
                    rows: list[dict] = []
                    for m in _selected(r, args, bar.update):
                        d = m.as_dict()
                        d["body"], d["compression"] = _body(m, r.config.max_message_size)
                        d.update(tags=m.tags, keys=list(m.keys), msg_id=m.msg_id, uniq_key=m.uniq_key,
                                 born_host=str(d["born_host"]), store_host=str(d["store_host"]),
                                 properties=list(d["properties"].items()))
                        rows.append({k: d[k] for k in _EXPORT_FIELDS})
                        count += 1
                        if len(rows) >= 8192:
                            w.write_table(pa.Table.from_pylist(rows, schema))
                            rows = []
                    if rows:
                        w.write_table(pa.Table.from_pylist(rows, schema))
            if tmp is not None:
                os.replace(tmp, args.out)
                tmp = None
        finally:
            bar.close()
            if tmp is not None:
                os.unlink(tmp)
    print(f"exported {count:,} messages to {'stdout' if args.out == '-' else args.out} ({fmt})"
          + ("" if count else ": no message matched the selection"), file=sys.stderr)
    return EXIT_OK if count else EXIT_PROBLEM


# -- parser ----------------------------------------------------------------------------------------------------------

def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", help="store directory (the one holding commitlog/, consumequeue/, index/)")


def _json_arg(p: argparse.ArgumentParser, what: str = "the result") -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON (for scripts)")


def _body_arg(p: argparse.ArgumentParser, where: str = "--json") -> None:
    p.add_argument("--body", choices=("base64", "text"), default="base64",
                   help=f"how {where} shows message bodies: base64 (exact) or UTF-8 text (default: base64)")


def build_parser() -> argparse.ArgumentParser:
    doc = (__doc__ or "").strip().splitlines()
    p = argparse.ArgumentParser(prog="rmqcore", description=doc[0],
                                epilog="\n".join(doc[1:]).strip(), formatter_class=argparse.RawDescriptionHelpFormatter)
    from . import __version__
    p.add_argument("--version", action="version", version=f"rmqcore {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    from .serve.cli import add_parser as _add_serve_parser
    _add_serve_parser(sub)

    d = sub.add_parser("demo", help="put and read back messages on a temporary store, print throughput",
                       description="Create a store (temporary unless --path), put messages with put_batch and put, "
                                   "read every one back by commitlog offset, by queue and by key, print rates.")
    d.add_argument("--messages", type=int, default=200_000, help="messages to put with put_batch (default 200,000)")
    d.add_argument("--body-size", type=int, default=1024, help="body bytes per message (default 1024)")
    d.add_argument("--topics", type=int, default=4, help="number of topics (default 4)")
    d.add_argument("--queues", type=int, default=4, help="queues per topic (default 4)")
    d.add_argument("--file-size", type=int, default=64 * 1024 * 1024,
                   help="commitlog file size in bytes (default 64 MiB)")
    d.add_argument("--path", help="store directory (default: a temporary one, deleted afterwards)")
    d.add_argument("--keep", action="store_true", help="keep the temporary store (its path is printed first)")
    d.add_argument("--force", action="store_true",
                   help="write into the store at --path although it exists (refused otherwise)")
    d.set_defaults(func=demo)
    dsub = d.add_subparsers(dest="demo_cmd", metavar="{broker}")
    db = dsub.add_parser("broker", help="run the broker demo (rmqcore.broker) on a store",
                         description="Run rmqcore.broker.demo.run(path, messages): the broker services around "
                                     "the store.")
    db.add_argument("--path", help="store directory (default: a temporary one, deleted afterwards)")
    db.add_argument("--messages", type=int, default=10_000, help="messages to send (default 10,000)")
    db.add_argument("--keep", action="store_true", help="keep the temporary store")
    db.add_argument("--force", action="store_true",
                    help="write into the store at --path although it exists (refused otherwise)")
    db.set_defaults(func=demo_broker)

    i = sub.add_parser("inspect", help="the store at a glance: files, geometry, queues, time range, state",
                       description="Files, geometry (read from the files), commitlog offsets and time range, "
                                   "dispatch and checkpoint state, config files, every topic x queue.")
    _store_arg(i)
    _json_arg(i)
    i.set_defaults(func=inspect_cmd)

    v = sub.add_parser("verify", help="check every record, consume-queue unit and index key; exit 1 if any is bad",
                       description="Walk every commitlog record (structure and CRC) with a progress bar, then check "
                                   "every consume-queue unit against its record (offset, size, tagsCode), every "
                                   "consumable record for its unit, every index file's header against its items and "
                                   "every key against the index at its record's time. A store open in another "
                                   "process is judged up to what its dispatcher had done when verify looked (the "
                                   "output says where). Exit status 0 when all is sound, 1 when anything is wrong.")
    _store_arg(v)
    _json_arg(v, "the whole report")
    v.add_argument("--no-crc", action="store_true", help="check structure only, not body CRCs")
    v.add_argument("--commitlog-only", action="store_true", help="skip the consume-queue and index checks")
    v.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    v.add_argument("--limit", type=int, default=20, help="errors listed per part (default 20; 0 lists none)")
    v.set_defaults(func=verify_cmd)

    g = sub.add_parser("get", help="messages by topic/queue/offset, by commitlog offset or by message id",
                       description="Print messages by (--topic, --queue, --offset [--count]), by --commitlog-offset "
                                   "or by --msg-id (an offset msg id, else a UNIQ_KEY). Exit 1 when none is found.")
    _store_arg(g)
    g.add_argument("--topic", help="topic of the queue to read")
    g.add_argument("--queue", type=int, default=0, help="queue id (default 0)")
    g.add_argument("--offset", type=int, help="logical offset in the queue")
    g.add_argument("--count", type=int, default=1, help="messages to read from --offset (default 1)")
    g.add_argument("--commitlog-offset", type=int, help="a record's global commitlog offset")
    g.add_argument("--msg-id", help="offset msg id (32/56 hex chars) or UNIQ_KEY")
    _json_arg(g, "the messages")
    _body_arg(g)
    g.set_defaults(func=get_cmd)

    q = sub.add_parser("query", help="messages of a topic by key (index) or by store time",
                       description="By --key (through the index files; matches KEYS and UNIQ_KEY exactly) or by a "
                                   "store-time window --begin/--end (ms or ISO 8601, UTC by default). "
                                   "Exit 1 when none is found.")
    _store_arg(q)
    q.add_argument("--topic", required=True, help="topic to search")
    q.add_argument("--key", help="message key or UNIQ_KEY")
    q.add_argument("--begin", help="stored at or after (ms since epoch or ISO 8601)")
    q.add_argument("--end", help="stored at or before (ms since epoch or ISO 8601)")
    q.add_argument("--queue", type=int, help="only this queue (time queries)")
    q.add_argument("--max", type=int, default=32, help="at most this many messages (default 32; when more match, "
                                                       "stderr says so and how to page)")
    _json_arg(q, "the messages")
    _body_arg(q)
    q.set_defaults(func=query_cmd)

    du = sub.add_parser("dump", help="print a store's commitlog records in order, reporting bad ones",
                        description="Print records from --offset (default: the first). File sizes come from the "
                                    "files. A damaged record is reported and skipped: the dump resumes at the next "
                                    "valid record. Exit 1 when any record was bad.")
    _store_arg(du)
    du.add_argument("--offset", type=int, help="commitlog offset of the first record (must be a record start)")
    du.add_argument("--count", type=int, default=20, help="records to print (default 20)")
    du.add_argument("--no-crc", action="store_true", help="do not check body CRCs")
    du.add_argument("--json", action="store_true", help="one JSON object per line")
    _body_arg(du)
    du.set_defaults(func=dump_cmd)

    rp = sub.add_parser("repair", help="recover a store offline, rebuild what verify finds damaged, report",
                        description="Open the store with its own file sizes (taking its lock: it must not be open "
                                    "elsewhere), run RocketMQ's recovery (cut everything after the last good record, "
                                    "rebuild consume-queue units and index keys), verify it, rebuild from the "
                                    "commitlog each consume queue and (when any is damaged) every index file verify "
                                    "reports, verify again, close it cleanly, report. Exit status 1 when damage "
                                    "remains (a bad record is never rewritten).")
    _store_arg(rp)
    rp.add_argument("--dry-run", action="store_true",
                    help="say what an open would cut (and whether it would copy it aside first) without changing "
                         "a byte")
    _json_arg(rp, "the report")
    rp.set_defaults(func=repair_cmd)

    st = sub.add_parser("stats", help="per topic/queue: messages, bytes, time range (scans the commitlog)",
                        description="Walk the commitlog and count messages, bytes, store-time range and queue "
                                    "offsets per topic and queue.")
    _store_arg(st)
    _json_arg(st, "the rows")
    st.set_defaults(func=stats_cmd)

    ex = sub.add_parser("export", help="messages to JSON lines, CSV, or Parquet when pyarrow is installed",
                        description="Write every message (or a topic/time selection) as JSON lines or CSV (body "
                                    "base64 unless --body text) or as Parquet (needs pyarrow), chosen by --format or "
                                    "OUT's extension (.jsonl, .csv, .parquet; another one is refused). OUT is written "
                                    "under a temporary name beside it and renamed when complete.")
    _store_arg(ex)
    ex.add_argument("out", help="output file, or - for stdout (JSON lines only)")
    ex.add_argument("--format", choices=("jsonl", "csv", "parquet"),
                    help="default: by OUT's extension (.jsonl/.ndjson/.json, .csv, .parquet)")
    ex.add_argument("--topic", action="append", help="only this topic (repeat for more)")
    ex.add_argument("--begin", help="stored at or after (ms or ISO 8601)")
    ex.add_argument("--end", help="stored at or before (ms or ISO 8601)")
    ex.add_argument("--force", action="store_true", help="overwrite OUT")
    _body_arg(ex, "JSON lines and CSV output")
    ex.set_defaults(func=export_cmd)

    from .mqadmin import add_commands
    add_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: sys.argv[1:]); returns the exit status."""
    from .errors import RmqStoreError
    from .mqadmin import AdminError, NotFoundError
    import logging
    parser = build_parser()
    args = parser.parse_args(argv)
    # The store logs what it adopts or repairs as warnings: show them as plain lines on stderr.
    logging.basicConfig(level=logging.WARNING, format="rmqcore: %(message)s")
    try:
        return args.func(args)
    except BrokenPipeError:
        # `rmqcore dump ... | head`: the reader went away; exit quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except NotFoundError as e:
        # what the command names does not exist: found nothing, as get and query say it (exit 1)
        print(f"rmqcore {args.cmd}: {e}", file=sys.stderr)
        return EXIT_PROBLEM
    except (CliError, AdminError, RmqStoreError, OSError, ValueError) as e:
        print(f"rmqcore {args.cmd}: error: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"rmqcore {args.cmd}: interrupted", file=sys.stderr)
        return 130
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
