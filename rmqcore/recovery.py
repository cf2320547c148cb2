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
import time

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


def _key_mix(hashes, phys):
    # One 64-bit value per (keyHash, phyOffset) pair, for set membership with np.isin. Distinct pairs collide with
    # probability ~n^2 / 2^64: a missing key could pass unseen once in ~10^7 verifies of 10^6 keys.
    return (phys.astype(np.uint64) * _MIX) ^ hashes.astype(np.uint64)


def _find_keys(key_hash, key_phys, index_files, report, progress):
    """Which (keyHash, phyOffset) pairs of the records an index walk can find: one pass over each index file.

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
    for done, f in enumerate(index_files):
        hashes, phys, problems = f.reachable_items()
        report["index_problems"] += problems
        h, p = np.frombuffer(hashes, np.int32), np.frombuffer(phys, np.int64)
        if ordered:
            keep = (p >= base) & (p - base < (1 << 39))
            h, p = h[keep], p[keep]
        have = value(h, p)
        if len(have) and (not ordered or np.any(have[1:] < have[:-1])):
            have = np.sort(have)
        if len(have):
            at = np.minimum(np.searchsorted(have, want), len(have) - 1)
            found |= have[at] == want
        del have, h, p, hashes, phys
        if progress is not None:
            progress("index", done + 1, len(index_files))
    if order is not None:
        out = np.empty_like(found)
        out[order] = found
        found = out
    return found


def verify_parts(commit_log, consume_queues, index_service, progress=None, index_enabled: bool = True) -> dict:
    """Check a store end to end in time linear in its size: every record's structure, CRCs (body and 5.x
    ``__CRC32#``) and physicalOffset; every consume-queue unit against the record it points at (and every
    consumable record present in its queue); every key findable through the index (one pass over each index
    file's slots and chains, not one walk per key).

    ``progress(phase, done, total)`` is called as the work goes: phase "commitlog" (bytes), "consumequeue"
    (queues), "index" (files).
    """
    report = {"ok": True, "records": 0, "bytes": 0, "commitlog_errors": [], "cq_units": 0, "cq_errors": [],
              "keys": 0, "index_missing": [], "index_problems": 0, "undispatchable": 0,
              "undispatchable_offsets": []}
    files = commit_log.mapped_file_queue.mapped_files
    total_bytes = sum(mf.read_position for mf in files)
    done_bytes = 0
    topic_ids: dict = {}
    topics: list = []
    cols = {k: [] for k in ("phys", "size", "queue_offset", "queue_id", "sys_flag", "topic_idx", "key_hash",
                            "key_phys")}
    for n, mf in enumerate(files):
        view = mf.select(0, mf.read_position)
        if view is None:
            continue
        try:
            pos, count, code = scan_records(view, 0, -1, True, mf.file_from_offset)
            if code not in (RESULT_END, RESULT_BLANK):
                err = record_error(code, mf.file_from_offset + pos, mf.file_name)
                report["commitlog_errors"].append({"file": mf.file_name, "offset": err.offset, "field": err.field,
                                                   "message": str(err)})
            elif code == RESULT_END and n < len(files) - 1 and pos < mf.read_position:
                report["commitlog_errors"].append({
                    "file": mf.file_name, "offset": mf.file_from_offset + pos, "field": "totalSize",
                    "message": "data ends before the file does, without the end-of-file blank record"})
            # The good records as dispatch reads them: the units and keys the store must hold for them.
            start = 0
            while start < pos:
                batch = scan_for_dispatch(view, mf.file_from_offset, start, pos, 65536, 262144, False, topic_ids,
                                          topics)
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
    seen = np.zeros(nrec, dtype=bool)
    min_phy = commit_log.min_offset
    queues = {(cq.topic, cq.queue_id): cq for cq in consume_queues}
    cq_errors = 0
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
            report["cq_errors"].append(f"{topic}/{qid}@{qo}: units {qo}..{hi - 1} missing")
        if not parts:
            continue
        units = np.concatenate(parts)
        index = np.arange(lo, lo + len(units), dtype=np.int64)
        real = units["size"] != 0x7FFFFFFF
        off = units["offset"].astype(np.int64)
        size = units["size"].astype(np.int64)
        at = np.searchsorted(rec["phys"], off)
        at_c = np.minimum(at, max(nrec - 1, 0))
        tid = topic_ids.get(topic.encode("utf-8"), -1)
        if nrec:
            ok = ((rec["phys"][at_c] == off) & (rec["size"][at_c] == size) & (rec["topic_idx"][at_c] == tid)
                  & (rec["queue_id"][at_c] == qid) & (rec["queue_offset"][at_c] == index))
        else:
            ok = np.zeros(len(units), dtype=bool)
        seen[at_c[ok & real]] = True
        for i in np.flatnonzero(real & ~ok)[:_MAX_LISTED]:
            j = int(at_c[i])
            if nrec and rec["phys"][j] == off[i] and rec["size"][j] == size[i]:
                report["cq_errors"].append(
                    f"{topic}/{qid}@{int(index[i])}: points at a record of "
                    f"{topics[rec['topic_idx'][j]]}/{int(rec['queue_id'][j])}@{int(rec['queue_offset'][j])}")
            else:
                report["cq_errors"].append(f"{topic}/{qid}@{int(index[i])}: points at {int(off[i])}/{int(size[i])}, "
                                           "which is not a record")
        cq_errors += int(np.count_nonzero(real & ~ok))
        if progress is not None:
            progress("consumequeue", done + 1, len(queues))
    # Consumable records (not prepared/rollback transactions) at or above the min offset need their unit, unless
    # their queue starts after them (cleaned).
    tran = rec["sys_flag"] & 0xC
    lost = np.flatnonzero(~seen & ((tran == 0x0) | (tran == 0x8)) & (rec["phys"] >= min_phy))
    for j in lost:
        topic, qid, qo = topics[rec["topic_idx"][j]], int(rec["queue_id"][j]), int(rec["queue_offset"][j])
        cq = queues.get((topic, qid))
        if cq is None or qo >= cq.min_offset_in_queue:
            cq_errors += 1
            if len(report["cq_errors"]) < 2 * _MAX_LISTED:
                report["cq_errors"].append(f"record at {int(rec['phys'][j])} ({topic}/{qid}@{qo}) has no "
                                           "consume-queue unit")
    report["cq_error_count"] = cq_errors
    report["keys"] = len(rec["key_hash"])
    if index_service is not None and index_enabled and len(rec["key_hash"]):
        with index_service.lock:
            index_files = list(index_service.index_file_list)
        found = _find_keys(rec["key_hash"], rec["key_phys"], index_files, report, progress)
        missing = np.flatnonzero(~found)
        report["index_missing_count"] = len(missing)
        for i in missing[:_MAX_LISTED]:
            report["index_missing"].append((int(rec["key_hash"][i]), int(rec["key_phys"][i])))
    report["ok"] = not (report["commitlog_errors"] or report["cq_errors"] or report["index_missing"])
    return report


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
