"""Recovery and verification: bring commitlog, consume queues and index to one consistent state, and prove it.

Normal recovery (no abort file) scans the last three commitlog files; abnormal recovery (abort file present: the
last run crashed) scans from the last file whose first message is older than the checkpoint (consume-queue and
index times both count), checking magic, sizes and CRCs (``check_crc_on_recover``, 5.x's ``__CRC32#`` too).
Everything after the last good record is cut: commitlog, consume queues (units pointing past it) and index files
newer than the checkpoint. Dispatch then runs from the scan's start before the store is handed out, so units and
keys missing on disk are rebuilt while those already built are skipped by their repeat checks.
"""
from __future__ import annotations

import logging
import time

from ._codec import RecordIterator, record_error, scan_records, RESULT_BLANK, RESULT_END

log = logging.getLogger(__name__)

LONG_MAX = (1 << 63) - 1


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
        if cq.cut_units_not_matching(kept, store.config.mapped_file_size_commit_log, cl.min_offset) is not None:
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


# -- verification --------------------------------------------------------------------------------------------------

def verify_parts(commit_log, consume_queues, index_service) -> dict:
    """Check a store end to end: every record's structure and CRC, every consume-queue unit against its record
    (and every consumable record present in its queue), every key findable through the index."""
    report = {"ok": True, "records": 0, "bytes": 0, "commitlog_errors": [], "cq_units": 0, "cq_errors": [],
              "keys": 0, "index_missing": []}
    records = {}
    files = commit_log.mapped_file_queue.mapped_files
    for n, mf in enumerate(files):
        view = mf.select(0, mf.read_position)
        if view is None:
            continue
        try:
            pos, count, code = scan_records(view, 0, -1, True)
            if code not in (RESULT_END, RESULT_BLANK):
                err = record_error(code, mf.file_from_offset + pos, mf.file_name)
                report["commitlog_errors"].append({"file": mf.file_name, "offset": err.offset, "field": err.field,
                                                   "message": str(err)})
            elif code == RESULT_END and n < len(files) - 1 and pos < mf.read_position:
                report["commitlog_errors"].append({
                    "file": mf.file_name, "offset": mf.file_from_offset + pos, "field": "totalSize",
                    "message": "data ends before the file does, without the end-of-file blank record"})
            for m in RecordIterator(view, 0, pos, False, mf.file_from_offset):
                records[m.commitlog_offset] = (m.topic, m.queue_id, m.queue_offset, m.store_size,
                                               m.transaction_type, m.keys, m.uniq_key, m.store_timestamp)
            report["records"] += count
            report["bytes"] += pos
        finally:
            view.release()
    queues = {(cq.topic, cq.queue_id): cq for cq in consume_queues}
    seen_units = set()
    for (topic, qid), cq in sorted(queues.items()):
        for qo in range(cq.min_offset_in_queue, cq.max_offset_in_queue):
            unit = cq.get_unit(qo)
            report["cq_units"] += 1
            if unit is None:
                report["cq_errors"].append(f"{topic}/{qid}@{qo}: unit missing")
                continue
            off, size, _tags = unit
            rec = records.get(off)
            if rec is None or rec[3] != size:
                report["cq_errors"].append(f"{topic}/{qid}@{qo}: points at {off}/{size}, which is not a record")
                continue
            if rec[:3] != (topic, qid, qo):
                report["cq_errors"].append(f"{topic}/{qid}@{qo}: points at a record of {rec[0]}/{rec[1]}@{rec[2]}")
            seen_units.add(off)
    min_phy = commit_log.min_offset
    for off, rec in records.items():
        topic, qid, qo, size, tran, keys, uniq, ts = rec
        if tran in (0x0, 0x8) and off >= min_phy and off not in seen_units:
            cq = queues.get((topic, qid))
            if cq is None or qo >= cq.min_offset_in_queue:
                report["cq_errors"].append(f"record at {off} ({topic}/{qid}@{qo}) has no consume-queue unit")
    if index_service is not None:
        with index_service.lock:
            index_files = list(index_service.index_file_list)
        limit = max(64, len(records) + 1)
        for off, rec in records.items():
            topic, qid, qo, size, tran, keys, uniq, ts = rec
            if tran == 0xC:
                continue
            for key in ([uniq] if uniq else []) + keys:
                report["keys"] += 1
                full = f"{topic}#{key}"
                if not any(off in f.select_phy_offsets(full, limit, 0, LONG_MAX) for f in index_files):
                    report["index_missing"].append((topic, key, off))
    report["ok"] = not (report["commitlog_errors"] or report["cq_errors"] or report["index_missing"])
    return report


def verify_store(path: str, config=None) -> dict:
    """Verify a closed store without changing a byte of it (every file is mapped read-only)."""
    import os

    from .checkpoint import StoreCheckpoint  # noqa: F401  (layout check only)
    from .commit_log import CommitLog
    from .config import StoreConfig
    from .consume_queue import ConsumeQueue, queue_dirs
    from .index_service import IndexService

    config = config or StoreConfig()
    cl = CommitLog(os.path.join(path, "commitlog"), config, read_only=True)
    cl.load()     # every file mapped whole: verify_parts scans each to its end of data
    cqs = []
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
    try:
        return verify_parts(cl, cqs, index)
    finally:
        for cq in cqs:
            cq.close()
        index.shutdown()
        cl.mapped_file_queue.shutdown()
