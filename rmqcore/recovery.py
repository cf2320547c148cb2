"""Recovery and verification: bring commitlog, consume queues and index to one consistent state, and prove it.

Normal recovery (no abort file) scans the last three commitlog files; abnormal recovery (abort file present: the
last run crashed) scans from the last file whose first message is older than the checkpoint (consume-queue and
index times both count), checking magic, sizes and CRCs (``check_crc_on_recover``, 5.x's ``__CRC32#`` too), and
what no CRC covers in a v1 record: the physicalOffset field (it must be the record's position). A topic or queue
id is no evidence of damage (RocketMQ's store writes any topic of 1..127 bytes): a record whose topic cannot name a
directory is kept, readable by offset, and passed over by dispatch (reported as ``undispatchable``). Everything after the last good record is cut: commitlog, consume queues
(units pointing past it) and index files newer than the checkpoint. Consume-queue units are also checked against
the records they point at: a queue is cut at the first unit that does not point at its own record. Dispatch then runs from the scan's start before the store is handed out, so units and
keys missing on disk are rebuilt while those already built are skipped by their repeat checks.
"""
from __future__ import annotations

import logging
import os
import struct
import time
from typing import Any, NamedTuple

import numpy as np

from ._codec import record_error, scan_records, RESULT_BLANK, RESULT_END
from ._dispatch import scan_for_dispatch

log = logging.getLogger(__name__)


def recover(store, last_exit_ok: bool) -> dict:
    t0 = time.monotonic()
    cl = store.commit_log
    files = cl.mapped_file_queue.mapped_files
    check_crc = store.config.check_crc_on_recover
    start_index = max(0, len(files) - 3) if last_exit_ok else abnormal_start_index(store, files)
    start_offset = files[start_index].file_from_offset if files else 0
    process_offset = cl.recover(check_crc=check_crc, from_file_index=start_index, clean=last_exit_ok)
    max_cq_phys = -1
    for cq in store._all_consume_queues():
        cq.recover()
        max_cq_phys = max(max_cq_phys, cq.max_physic_offset)
    if max_cq_phys > process_offset:
        for cq in store._all_consume_queues():
            cq.truncate_dirty_logic_files(process_offset)
    # Units are trusted no more than records: a unit that does not point at its own record (a damaged queue file,
    # or records cut above) is cut with everything after it, and dispatch rebuilds from the last unit kept (the
    # end of a record it matched, so a record boundary). Dispatch skips what the other queues already hold.
    rebuild_from = None
    kept = cl.mapped_file_queue.mapped_files       # after the cut: the files recovery kept
    for cq in store._all_consume_queues():
        cut = cq.cut_units_not_matching(kept, store.config.mapped_file_size_commit_log, cl.min_offset)
        if cut is not None or cq.damaged:
            end = cq.max_physic_offset if cq.max_physic_offset >= cl.min_offset else cl.min_offset
            rebuild_from = end if rebuild_from is None else min(rebuild_from, end)
    reput_from = cl.min_offset
    for cq in store._all_consume_queues():
        reput_from = max(reput_from, cq.max_physic_offset)
    if not last_exit_ok:
        reput_from = min(reput_from, start_offset)
    if rebuild_from is not None:
        reput_from = min(reput_from, rebuild_from)
    info = dict(cl.last_recovery, last_exit_ok=last_exit_ok, reput_from=reput_from,
                scan_from=start_offset)
    info["seconds"] = round(time.monotonic() - t0, 3)
    return info


def abnormal_start_index(store, files) -> int:
    """RocketMQ's recoverAbnormally start: the last file whose first message was stored no later than the
    checkpoint's min timestamp. The index time counts too (RocketMQ's messageIndexSafe), because index files
    newer than the checkpoint were deleted on load and their keys must be rebuilt."""
    cp = store.checkpoint
    min_ts = cp.min_timestamp_index if store.config.message_index_enable else cp.min_timestamp
    for i in range(len(files) - 1, -1, -1):
        first = store.commit_log.look_message(files[i].file_from_offset)
        if first is not None and first.store_timestamp <= min_ts:
            return i
    return 0


def crash_redispatch_from(store, files, consume_queues) -> int:
    """Where the next open of a store that was not closed dispatches from (``recover``'s reput_from after a
    crash, before any unit is found wrong): the furthest commitlog offset a consume queue covers, lowered to the
    start of the file the abnormal recovery scans from. ``store``: anything with checkpoint, config and
    commit_log (a MessageStore, an admin.StoreReader)."""
    if not files:
        return store.commit_log.min_offset
    reput_from = store.commit_log.min_offset
    for cq in consume_queues:
        reput_from = max(reput_from, cq.max_physic_offset)
    return min(reput_from, files[abnormal_start_index(store, files)].file_from_offset)


def plan_recovery(path: str, config=None) -> dict:
    """What opening the store at ``path`` would cut from its commitlog, changing nothing (``rmqcore repair
    --dry-run``): the same start file, scan and CRC checks as ``MessageStore.open``, on files mapped read-only."""
    import os
    from types import SimpleNamespace

    from .checkpoint import StoreCheckpoint
    from .commit_log import CommitLog
    from .config import StoreConfig
    from .geometry import read_geometry

    config = config or StoreConfig()
    config = read_geometry(path, config).apply(config)
    last_exit_ok = not os.path.exists(os.path.join(path, "abort"))
    cl = CommitLog(os.path.join(path, "commitlog"), config, read_only=True)
    cp = None
    try:
        cl.load()
        files = cl.mapped_file_queue.mapped_files
        report = {"store": path, "crashed": not last_exit_ok, "scan_from": 0, "data_ends_at": 0, "records_scanned": 0,
                  "stop": "end of data", "would_cut_bytes": 0, "would_keep_aside": False, "files_removed": []}
        if not files:
            return report
        if last_exit_ok:
            start = max(0, len(files) - 3)
        else:
            cp = StoreCheckpoint(os.path.join(path, "checkpoint"), read_only=True)
            start = abnormal_start_index(SimpleNamespace(checkpoint=cp, config=config, commit_log=cl), files)
        end, records, stop = cl.find_recovery_end(config.check_crc_on_recover, start)
        extents = cl.cut_extents(end) if stop != "end of data" or not last_exit_ok else []
        cut = sum(n for _, _, n in extents)
        report.update(scan_from=files[start].file_from_offset, data_ends_at=end, records_scanned=records, stop=stop,
                      would_cut_bytes=cut,
                      would_keep_aside=bool(cut) and (last_exit_ok or not cl.is_torn_tail(end, extents)),
                      files_removed=[os.path.basename(mf.file_name) for mf in files if mf.file_from_offset > end])
        return report
    finally:
        if cp is not None:
            cp.shutdown()
        cl.mapped_file_queue.shutdown()


# -- verification --------------------------------------------------------------------------------------------------

_MAX_LISTED = 1000          # errors listed per kind; the counts go on
_MIX = np.uint64(0x9E3779B97F4A7C15)
_SCHEDULE_TOPIC = b"SCHEDULE_TOPIC_XXXX"     # schedule.SCHEDULE_TOPIC: its units' tagsCode is a delivery time
_INT32_MAX = 0x7FFFFFFF


class MissingKey(NamedTuple):
    """One key of a record that an index query cannot find: the entries of ``report["index_missing"]``, what
    ``MessageStore.verify()``, ``verify_store`` and ``rmqcore verify`` all list. ``key`` is the key's text when the
    record could be read back (its UNIQ_KEY or one of its KEYS with that hash), else ``#<keyHash>``."""
    topic: str
    key: str
    record_offset: int
    key_hash: int


def _key_mix(hashes, phys):
    # One 64-bit value per (keyHash, phyOffset) pair, for set membership with np.isin. Distinct pairs collide with
    # probability ~n^2 / 2^64: a missing key could pass unseen once in ~10^7 verifies of 10^6 keys.
    return (phys.astype(np.uint64) * _MIX) ^ hashes.astype(np.uint64)


def _read_header(f, live: bool) -> tuple:
    """(beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount) as the mapping holds
    them now. The writer of a live file rewrites the 40 bytes after each put: two reads that agree are one header."""
    raw = f.header_bytes()
    for _ in range(20 if live else 0):
        again = f.header_bytes()
        if again == raw:
            break
        raw = again
    return struct.unpack(">qqqqii", raw)


def _record_ts(rec: dict, phy: int):
    """The store time of the record at ``phy`` among the scanned records, or None when no scanned record starts
    there (cleaned, past the judged point, or not a record)."""
    phys = rec["phys"]
    at = int(np.searchsorted(phys, phy))
    if at < len(phys) and int(phys[at]) == phy:
        return int(rec["store_ts"][at])
    return None


def _check_index_headers(index_files, headers, rec, report, judged_to) -> None:
    """What a query relies on in each file's header, checked against the items it describes and their records:
    beginPhyOffset/endPhyOffset are item 1's and the last item's phyOffset, beginTimestamp/endTimestamp those
    records' store times (a query searches a file whose [begin, end] meets its window, stops at the first file that
    began before it, and reads each item's time as beginTimestamp + timeDiff * 1000); a file with no item carries
    the end of the file before it."""
    errors = report["index_errors"]
    prev = None
    for f, h in zip(index_files, headers):
        name = os.path.basename(f.file_name)
        bt, et, bp, ep, _slots, count = h
        count = count if count > 0 else 1
        found = []
        if count > f.index_num:
            found.append(f"indexCount {count} is past the file's {f.index_num} items")
        elif count > 1:
            first, last = f.item(1), f.item(count - 1)
            for field, have, phy in (("beginPhyOffset", bp, first[1]), ("endPhyOffset", ep, last[1])):
                if have != phy:
                    found.append(f"{field} {have} but item {1 if field[0] == 'b' else count - 1} points at {phy}")
            for field, have, phy in (("beginTimestamp", bt, first[1]), ("endTimestamp", et, last[1])):
                ts = _record_ts(rec, phy) if judged_to is None or phy < judged_to else None
                if ts is not None and have != ts:
                    found.append(f"{field} {have} but the record at {phy} was stored at {ts}")
        else:
            want = (prev[1], prev[3]) if prev is not None else (max(bt, 0), max(bp, 0))
            if (bt, bp) != (et, ep) or (et, ep) != want:
                found.append(f"holds no key but its header spans timestamps [{bt}, {et}] and offsets [{bp}, {ep}] "
                             f"(expected {want[0]} and {want[1]}, the end of the file before)")
        for msg in found:
            if len(errors) < _MAX_LISTED:
                errors.append(f"index file {name}: {msg}")
        report["index_error_count"] += len(found)
        prev = h


def _find_keys(key_hash, key_phys, index_files, headers, rec, report, progress, live: bool):
    """Which (keyHash, phyOffset) pairs of the records a query can find: one pass over each index file, keeping the
    reachable items whose time (beginTimestamp + timeDiff * 1000, what a select compares with its window) is the
    one putKey gives their record: within the second below its store time (timeDiff truncates); for a record stored
    before the file began (the clock went back: timeDiff clamped at 0) the file's beginTimestamp, when that is its
    first record's time; item 1 of a file continuing another reads later than its record, as in RocketMQ.

    Pairs become sortable 64-bit values. While the records span less than 2^39 bytes (they do: verify runs over a
    commitlog, whose offsets they are) the value is (phy - base) << 24 | keyHash's low 24 bits: commitlog order is
    kept, so both sides come sorted (records in scan order, items in put order) and the search walks forwards; two
    keys of one record agreeing on 24 bits is the only blind spot. Otherwise a 64-bit mix, sorted."""
    base = int(key_phys.min())
    ordered = int(key_phys.max()) - base < (1 << 39)

    def value(hashes, phys):
        if ordered:
            return ((phys - base) << 24) | (hashes.astype(np.int64) & 0xFFFFFF)
        return _key_mix(hashes, phys)

    want = value(key_hash, key_phys)
    order = None if ordered else np.argsort(want)
    if order is not None:
        want = want[order]
    found = np.zeros(len(want), dtype=bool)
    rphys, rts = rec["phys"], rec["store_ts"]
    bad_times = 0
    for done, (f, h) in enumerate(zip(index_files, headers)):
        # A live file's slots may already point at items put after its header was read: follow them.
        hashes, phys, problems, diffs = f.reachable_items(bound=f.index_num if live else 0, with_times=True)
        report["index_problems"] += problems
        hh, p = np.frombuffer(hashes, np.int32), np.frombuffer(phys, np.int64)
        d = np.frombuffer(diffs, np.int32).astype(np.int64)
        begin = np.int64(h[0])
        # A record stored before the file began (the clock went back) reads at beginTimestamp: only when that is
        # the file's first record's time (a damaged beginTimestamp moves every item out of every query's window).
        count = h[5] if h[5] > 0 else 1
        first_phy = f.item(1)[1] if 1 < count <= f.index_num else -1
        first_ts = _record_ts(rec, first_phy) if first_phy >= 0 else None
        begin_sane = first_ts is not None and first_ts == h[0]
        # Item 1's timeDiff was taken against the begin time the file had before it: the end of the file before
        # (unknown when that one was deleted as expired), or 0 (then timeDiff 0) for a store's first file.
        prev_end = headers[done - 1][1] if done else None
        first_diff = -1
        if begin_sane and prev_end is not None:
            first_diff = 0 if prev_end <= 0 else min(max(h[0] - prev_end, 0) // 1000, _INT32_MAX)
        with np.errstate(over="ignore"):
            t = begin + d * 1000                       # Java long arithmetic: wraps
        at = np.minimum(np.searchsorted(rphys, p), max(len(rphys) - 1, 0))
        if len(rphys):
            known = rphys[at] == p
            ts = rts[at]
            good_time = known & (((ts >= begin) & (t > ts - 1000) & (t <= ts))     # timeDiff truncates
                                 | ((p == first_phy) & (ts == begin) & (t >= begin)   # item 1 of a file
                                    & ((d == first_diff) | (first_diff < 0)))          # continuing another
                                 | (begin_sane & (ts < begin) & (t == begin))
                                 | ((d == _INT32_MAX) & (t <= ts)))   # clamped: 68 years after the file began
            bad_times += int(np.count_nonzero(known & ~good_time))
            hh, p = hh[good_time], p[good_time]
        else:
            hh, p = hh[:0], p[:0]
        if ordered:
            keep = (p >= base) & (p - base < (1 << 39))
            hh, p = hh[keep], p[keep]
        have = value(hh, p)
        if len(have) and (not ordered or np.any(have[1:] < have[:-1])):
            have = np.sort(have)
        if len(have):
            # Only the wanted pairs within this file's span can be in it (all of them, when unordered).
            # (key_phys is in commitlog order, so is want in ordered mode: a slice of it by offsets.)
            lo, hi = ((int(np.searchsorted(key_phys, p.min())), int(np.searchsorted(key_phys, p.max(), side="right")))
                      if ordered else (0, len(want)))
            at = np.minimum(np.searchsorted(have, want[lo:hi]), len(have) - 1)
            found[lo:hi] |= have[at] == want[lo:hi]
        del have, hh, d, t, hashes, phys, diffs
        if progress is not None:
            progress("index", done + 1, len(index_files))
    report["index_bad_times"] = bad_times
    if order is not None:
        out = np.empty_like(found)
        out[order] = found
        found = out
    return found


def _describe_missing(commit_log, topics, rec, key_hash: int, phy: int) -> MissingKey:
    """A missing key with its topic and text, read back from its record."""
    from ._index_file import index_key_hash
    at = int(np.searchsorted(rec["phys"], phy))
    topic = topics[int(rec["topic_idx"][at])] if at < len(rec["phys"]) and rec["phys"][at] == phy else "?"
    key = f"#{key_hash}"
    try:
        m = commit_log.look_message(phy)
    except Exception:           # a record verify scanned whole: unreadable only if it changed since
        m = None
    if m is not None:
        for k in ([m.uniq_key] if m.uniq_key else []) + list(m.keys):
            if index_key_hash(f"{m.topic}#{k}") == key_hash:
                key = k
                break
        del m
    return MissingKey(topic, key, phy, key_hash)


def verify_parts(commit_log, consume_queues, index_service, progress=None, index_enabled: bool = True, *,
                 delay_level_ms=None, judged_to: int | None = None, live: bool = False,
                 redispatch_from: int | None = None) -> dict:
    """Check a store end to end in time linear in its size: every record's structure, CRCs (body and 5.x
    ``__CRC32#``) and physicalOffset; every consume-queue unit against the record it points at (offset, size, topic,
    queue, queue offset and tagsCode: what a pull and its tag filter read) and every consumable record present in
    its queue (a queue whose first files are gone is noticed); every index file's header against its items and
    their records (what picks the files a query searches and the time it reads each item at) and every key
    findable through the index at its record's time (one pass over each index file's slots and chains, not one
    walk per key).

    ``delay_level_ms`` (level -> ms, as the store's): a SCHEDULE_TOPIC_XXXX unit's tagsCode must be its delivery
    time under these levels; without them (an offline reader does not know the broker's), the delay of each schedule
    queue must be one for all its units and not negative.

    A store another process (or thread) writes is judged up to a consistent point: records at or past
    ``judged_to`` (exclusive; given by an in-process caller who knows how far dispatch got) are not judged, nor the
    units and keys pointing at them. ``live`` without ``judged_to``: the point is found from what the files show,
    the first record dispatch had not reached when the queues and index were read (the first consumable record
    whose queue ends before it, or the first keyed record at or past the newest index file's endPhyOffset).
    ``report["judged_to"]`` says where judging stopped (None: everything) and ``report["not_judged"]`` how many
    records lie past it.

    ``redispatch_from``: a store that was not closed (killed, crashed) whose next open dispatches again from this
    commitlog offset (``crash_redispatch_from``). What dispatch had not reached when it stopped is no damage there:
    the open rebuilds the units and keys of every record from that offset on. The store is then judged up to the
    later of that offset and the first record dispatch had not reached (found as for ``live``); the records past
    it are counted in ``report["not_dispatched"]`` (and ``not_judged``), as ``rmqcore inspect`` reports them, not
    as errors. A record before the offset that lacks its unit is still an error: no open would rebuild it.

    ``progress(phase, done, total)`` is called as the work goes: phase "commitlog" (bytes), "consumequeue"
    (queues), "index" (files).
    """
    report: dict[str, Any] = {
        "ok": True, "records": 0, "bytes": 0, "commitlog_errors": [], "cq_units": 0, "cq_errors": [], "keys": 0,
        "index_missing": [], "index_problems": 0, "index_errors": [], "index_error_count": 0, "live": bool(live),
        "judged_to": judged_to, "not_judged": 0, "undispatchable": 0, "undispatchable_offsets": [],
        "damaged_queues": [], "not_dispatched": 0}
    files = commit_log.mapped_file_queue.mapped_files
    total_bytes = sum(mf.read_position for mf in files)
    done_bytes = 0
    topic_ids: dict = {}
    topics: list = []
    cols: dict[str, list] = {k: [] for k in ("phys", "size", "queue_offset", "queue_id", "sys_flag", "topic_idx",
                                             "key_hash", "key_phys", "store_ts", "tags_code")}
    for n, mf in enumerate(files):
        if judged_to is not None and mf.file_from_offset >= judged_to:
            break
        view = mf.select(0, mf.read_position)
        if view is None:
            continue
        try:
            limit = -1 if judged_to is None else min(judged_to - mf.file_from_offset, mf.read_position)
            pos, count, code = scan_records(view, 0, limit, True, mf.file_from_offset)
            if code not in (RESULT_END, RESULT_BLANK) and not (judged_to is not None
                                                               and mf.file_from_offset + pos >= judged_to):
                err = record_error(code, mf.file_from_offset + pos, mf.file_name)
                report["commitlog_errors"].append({"file": mf.file_name, "offset": err.offset, "field": err.field,
                                                   "message": str(err)})
            elif (code == RESULT_END and n < len(files) - 1 and pos < mf.read_position and not live
                  and (judged_to is None or mf.file_from_offset + mf.read_position <= judged_to)):
                # (A file the judged point falls in is where the writer is: its data need not end with a blank.)
                report["commitlog_errors"].append({
                    "file": mf.file_name, "offset": mf.file_from_offset + pos, "field": "totalSize",
                    "message": "data ends before the file does, without the end-of-file blank record"})
            # The good records as dispatch reads them: the units and keys the store must hold for them.
            start = 0
            while start < pos:
                batch = scan_for_dispatch(view, mf.file_from_offset, start, pos, 65536, 262144, False, topic_ids,
                                          topics, delay_level_ms)
                for k in cols:
                    cols[k].append(getattr(batch, k))
                # Kept but not dispatched (no unit or key expected): reported, not an error.
                report["undispatchable"] += batch.skipped
                room = 16 - len(report["undispatchable_offsets"])
                report["undispatchable_offsets"].extend(batch.skipped_offsets[:max(room, 0)])
                if batch.end_offset - mf.file_from_offset <= start:
                    break
                start = batch.end_offset - mf.file_from_offset
            report["records"] += count
            report["bytes"] += pos
        finally:
            view.release()
        done_bytes += mf.read_position
        if progress is not None:
            progress("commitlog", done_bytes, total_bytes)
    rec = {k: (np.concatenate(v) if v else np.empty(0, np.int64)) for k, v in cols.items()}
    nrec = len(rec["phys"])
    min_phy = commit_log.min_offset
    queues = {(cq.topic, cq.queue_id): cq for cq in consume_queues}
    tran = rec["sys_flag"] & 0xC
    consumable = ((tran == 0x0) | (tran == 0x8)) & (rec["phys"] >= min_phy)
    # (Records dispatch passes over, whose topic or queue id names no directory, are not in ``rec`` at all: the
    # scan counted them in report["undispatchable"], and no unit or key is expected of them.)
    keyed = np.zeros(nrec, dtype=bool)
    if nrec and len(rec["key_phys"]):
        keyed[np.searchsorted(rec["phys"], rec["key_phys"])] = True

    # The index as it is now (after the queues were read: a live writer puts keys after their units).
    index_files, headers = [], []
    if index_service is not None and index_enabled:
        with index_service.lock:
            index_files = list(index_service.index_file_list)
        headers = [_read_header(f, live or judged_to is not None) for f in index_files]

    if (live or redispatch_from is not None) and judged_to is None:
        # How far dispatch had got when the queues were read: every record before the first one it had not reached
        # has its unit, and (index written after units) its keys when they lie before the index's end.
        frontier = [int(rec["phys"][-1]) + int(rec["size"][-1]) if nrec else commit_log.min_offset]
        if nrec:
            ahead = np.flatnonzero(consumable & (rec["queue_offset"] >= _queue_tails(rec, queues, topic_ids)))
            if len(ahead):
                frontier.append(int(rec["phys"][ahead[0]]))
            if index_service is not None and index_enabled:
                # endPhyOffset is the phyOffset of the last item put (IndexFile.putKey): the START of the last
                # record indexed, not its end. The records after it have no key yet; the record at it has its
                # keys once the file holds an item of it for each of them (a writer puts a record's keys one by
                # one), which is every time but in the middle of a dispatch. (Counting it unindexed always left a
                # live store's last keyed record "not judged", however long the store had been idle.)
                end_phy = headers[-1][3] if index_files else -1
                wanted = int(np.count_nonzero(rec["key_phys"] == end_phy)) if index_files else 0
                if wanted:
                    last = index_files[-1]
                    _h, items, _p, _d = last.reachable_items(bound=last.index_num, with_times=True)
                    if int(np.count_nonzero(np.frombuffer(items, np.int64) == end_phy)) >= wanted:
                        end_phy += 1
                unindexed = np.flatnonzero(keyed & (rec["phys"] >= end_phy))
                if len(unindexed):
                    frontier.append(int(rec["phys"][unindexed[0]]))
        judged_to = min(frontier)
        if redispatch_from is not None and not live:
            # A stopped dispatcher: the next open rebuilds from redispatch_from, not from where this one stopped.
            judged_to = max(judged_to, redispatch_from)
        else:
            # Past it the writer may still be writing (a record half written is no damage).
            report["commitlog_errors"] = [e for e in report["commitlog_errors"] if e["offset"] < judged_to]
        report["judged_to"] = judged_to
    if judged_to is not None:
        judged = rec["phys"] < judged_to
        report["not_judged"] = int(nrec - np.count_nonzero(judged))
        if redispatch_from is not None and not live:
            report["not_dispatched"] = report["not_judged"]
        consumable &= judged
        kj = rec["key_phys"] < judged_to
        rec["key_hash"], rec["key_phys"] = rec["key_hash"][kj], rec["key_phys"][kj]

    seen = np.zeros(nrec, dtype=bool)
    cq_errors = 0
    damaged = set()
    is_schedule = {tid for name, tid in topic_ids.items() if name == _SCHEDULE_TOPIC}
    for done, ((topic, qid), cq) in enumerate(sorted(queues.items())):
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
        parts = []
        qo = lo
        while qo < hi:
            units = cq.get_units(qo, hi - qo)
            if units is None or len(units) == 0:
                break
            parts.append(units.copy())
            qo += len(units)
            del units
        report["cq_units"] += hi - lo
        if qo < hi:
            cq_errors += 1
            damaged.add((topic, qid))
            report["cq_errors"].append(f"{topic}/{qid}@{qo}: units {qo}..{hi - 1} missing")
        if not parts:
            continue
        units = np.concatenate(parts)
        index = np.arange(lo, lo + len(units), dtype=np.int64)
        real = units["size"] != 0x7FFFFFFF
        off = units["offset"].astype(np.int64)
        size = units["size"].astype(np.int64)
        tags = units["tags_code"].astype(np.int64)
        if judged_to is not None:
            real &= off < judged_to          # units of records past the judged point: not judged
        at = np.searchsorted(rec["phys"], off)
        at_c = np.minimum(at, max(nrec - 1, 0))
        tid = topic_ids.get(topic.encode("utf-8"), -1)
        if nrec:
            ok = ((rec["phys"][at_c] == off) & (rec["size"][at_c] == size) & (rec["topic_idx"][at_c] == tid)
                  & (rec["queue_id"][at_c] == qid) & (rec["queue_offset"][at_c] == index))
        else:
            ok = np.zeros(len(units), dtype=bool)
        # tagsCode: what a pull's tag filter compares (and, in the schedule topic, when a message is delivered).
        want_tags = rec["tags_code"][at_c] if nrec else tags
        if tid in is_schedule and delay_level_ms is None and nrec:
            # The delivery time is the store time plus the level's delay, which an offline reader does not know:
            # one delay for every unit of a schedule queue (its queue is its level), and not a negative one.
            delay = tags - rec["store_ts"][at_c]
            pointing = ok & real
            usual = 0
            if np.any(pointing):
                vals, counts = np.unique(delay[pointing], return_counts=True)
                usual = max(0, int(vals[np.argmax(counts)]))
            want_tags = rec["store_ts"][at_c] + usual
        tag_ok = want_tags == tags
        if (live or judged_to is not None) and nrec:
            # A live writer may have been writing a unit while it was read: read the ones found wrong once more.
            for i in np.flatnonzero(real & ~(ok & tag_ok))[:_MAX_LISTED]:
                again = cq.get_unit(int(index[i]))
                if again is not None and (again[0], again[1]) != (int(off[i]), int(size[i])):
                    j = min(int(np.searchsorted(rec["phys"], again[0])), nrec - 1)
                    if (rec["phys"][j] == again[0] and rec["size"][j] == again[1] and rec["topic_idx"][j] == tid
                            and rec["queue_id"][j] == qid and rec["queue_offset"][j] == index[i]):
                        at_c[i], off[i], size[i], ok[i] = j, again[0], again[1], True
                if again is not None and ok[i] and again[2] != tags[i]:
                    tags[i] = again[2]
                    if tid not in is_schedule or delay_level_ms is not None:
                        tag_ok[i] = rec["tags_code"][at_c[i]] == again[2]
        bad_tags = ok & real & ~tag_ok
        seen[at_c[ok & real & tag_ok]] = True
        for i in np.flatnonzero(real & ~ok)[:_MAX_LISTED]:
            j = int(at_c[i])
            if nrec and rec["phys"][j] == off[i] and rec["size"][j] == size[i]:
                report["cq_errors"].append(
                    f"{topic}/{qid}@{int(index[i])}: points at a record of "
                    f"{topics[rec['topic_idx'][j]]}/{int(rec['queue_id'][j])}@{int(rec['queue_offset'][j])}")
            else:
                report["cq_errors"].append(f"{topic}/{qid}@{int(index[i])}: points at {int(off[i])}/{int(size[i])}, "
                                           "which is not a record")
        for i in np.flatnonzero(bad_tags)[:_MAX_LISTED]:
            report["cq_errors"].append(f"{topic}/{qid}@{int(index[i])}: tagsCode {int(tags[i])} but its record at "
                                       f"{int(off[i])} gives {int(want_tags[i])}")
        nbad = int(np.count_nonzero(real & ~ok)) + int(np.count_nonzero(bad_tags))
        if nbad:
            damaged.add((topic, qid))
        cq_errors += nbad
        if progress is not None:
            progress("consumequeue", done + 1, len(queues))
    # Consumable records (not prepared/rollback transactions) at or above the min offset need their unit. One below
    # its queue's first unit lost it with the queue's first file(s): cleaning deletes a queue file only once every
    # record it points at is gone from the commitlog.
    lost = np.flatnonzero(~seen & consumable)
    below: dict = {}
    for j in lost:
        topic, qid, qo = topics[rec["topic_idx"][j]], int(rec["queue_id"][j]), int(rec["queue_offset"][j])
        cq = queues.get((topic, qid))
        cq_errors += 1
        damaged.add((topic, qid))
        if cq is not None and qo < cq.min_offset_in_queue:
            first, last, n = below.get((topic, qid), (qo, qo, 0))
            below[(topic, qid)] = (min(first, qo), max(last, qo), n + 1)
            continue
        if len(report["cq_errors"]) < 2 * _MAX_LISTED:
            report["cq_errors"].append(f"record at {int(rec['phys'][j])} ({topic}/{qid}@{qo}) has no "
                                       "consume-queue unit")
    for (topic, qid), (first, last, n) in sorted(below.items()):
        report["cq_errors"].append(
            f"{topic}/{qid}: {n} record(s) at queue offsets {first}..{last} are still in the commitlog but the queue "
            f"starts at {queues[(topic, qid)].min_offset_in_queue}: its first consume-queue file(s) are missing")
    report["cq_error_count"] = cq_errors
    report["damaged_queues"] = sorted(damaged)
    report["keys"] = len(rec["key_hash"])
    if index_files:
        _check_index_headers(index_files, headers, rec, report, judged_to)
    if index_service is not None and index_enabled and len(rec["key_hash"]):
        found = _find_keys(rec["key_hash"], rec["key_phys"], index_files, headers, rec, report, progress,
                           live or judged_to is not None)
        missing = np.flatnonzero(~found)
        report["index_missing_count"] = len(missing)
        for i in missing[:_MAX_LISTED]:
            report["index_missing"].append(_describe_missing(commit_log, topics, rec, int(rec["key_hash"][i]),
                                                             int(rec["key_phys"][i])))
    report["ok"] = not (report["commitlog_errors"] or report["cq_errors"] or report["index_missing"]
                        or report["index_errors"])
    return report


def _queue_tails(rec: dict, queues: dict, topic_ids: dict) -> np.ndarray:
    """Each record's queue's max offset when the queue was read (-1: no such queue yet)."""
    key = (rec["topic_idx"].astype(np.int64) << 32) | (rec["queue_id"].astype(np.int64) & 0xFFFFFFFF)
    uniq, inverse = np.unique(key, return_inverse=True)
    names = {tid: name.decode("utf-8", "replace") for name, tid in topic_ids.items()}
    tails = np.array([queues[q].max_offset_in_queue if (q := (names.get(int(u) >> 32), int(u) & 0xFFFFFFFF)) in queues
                      else -1 for u in uniq.tolist()], dtype=np.int64)
    return tails[inverse.reshape(-1)]


def verify_store(path: str, config=None, progress=None) -> dict:
    """Verify a closed store without changing a byte of it (every file is mapped read-only)."""
    import os

    from .commit_log import CommitLog
    from .config import StoreConfig
    from .consume_queue import ConsumeQueue, queue_dirs
    from .index_service import IndexService

    config = config or StoreConfig()
    cl = CommitLog(os.path.join(path, "commitlog"), config, read_only=True)
    cqs = []
    index = None
    try:
        cl.load()     # every file mapped whole: verify_parts scans each to its end of data
        root = os.path.join(path, "consumequeue")
        for topic, qid in queue_dirs(root):      # the directories open() loads, skipping the same junk
            cq = ConsumeQueue(topic, qid, root, config.mapped_file_size_consume_queue, read_only=True)
            cqs.append(cq)
            cq.load()
            cq.recover()
            cq.correct_min_offset(cl.min_offset)
        index = IndexService(os.path.join(path, "index"), config.max_hash_slot_num, config.max_index_num,
                             read_only=True)
        index.load(True)
        return verify_parts(cl, cqs, index, progress, config.message_index_enable)
    finally:
        for cq in cqs:
            cq.close()
        if index is not None:
            index.shutdown()
        cl.mapped_file_queue.shutdown()
