"""Cleaning: RocketMQ's CleanCommitLogService / CleanConsumeQueueService (DefaultMessageStore 4.9.7) with an
injected clock and disk usage.

What RocketMQ does, and what these tests hold rmqcore to:
- commitlog files whose last modification is older than fileReservedTime (72 h) are deleted at deleteWhen o'clock
  ("04", or "01;04"), oldest first, stopping at the first file still young; never the file being written;
- past diskMaxUsedSpaceRatio (75 %) the same expired files go at any hour; past the forced-clean ratio (85 %) files go
  whatever their age (cleanImmediately); past 90 % the disk is marked full;
- consume-queue files whose last unit points below the commitlog's new min offset, and index files whose end offset
  is below it, follow; each queue's min offset moves to its first unit still in the commitlog, so a pull below it
  answers OFFSET_TOO_SMALL with nextBeginOffset = that min offset, and the min offset survives a reopen.
"""
import datetime
import os

import pytest

from rmqcore import GetStatus, Message, MessageStore, PutStatus, StoreConfig
from rmqcore.clean import (CleanCommitLogService, CleanConsumeQueueService, CleanFilesService,
                           disk_partition_space_used_percent, is_it_time_to_do)

HOUR = 3600 * 1000
TOPICS = [("Orders", 0), ("Orders", 1), ("Audit", 0)]


def local_ms(hour, minute=30, day=15):
    """Epoch ms of a local wall-clock time (delete_when is read in local time, as Java's Calendar)."""
    return int(datetime.datetime(2030, 1, day, hour, minute).timestamp() * 1000)


def cfg(**kw):
    base = dict(mapped_file_size_commit_log=16 * 1024, mapped_file_size_consume_queue=20 * 16,
                max_message_size=4 * 1024, max_hash_slot_num=97, max_index_num=120,
                warm_mapped_file_enable=False, flush_interval_commit_log=50, flush_interval_consume_queue=50,
                delete_commit_log_files_interval=0, delete_consume_queue_files_interval=0)
    base.update(kw)
    return StoreConfig(**base)


def fill(store, n=300):
    """n messages of ~250 bytes over three queues, each with a key; returns the PutResults in put order."""
    out = []
    for i in range(n):
        topic, qid = TOPICS[i % len(TOPICS)]
        r = store.put(Message(topic, (b"%06d-" % i) * 24, qid, keys=[f"k{i}"], tags="t%d" % (i % 3)))
        assert r.status is PutStatus.PUT_OK
        out.append(r)
    assert store.wait_dispatched()
    store.commit_log.flush(0)
    return out


def set_ages(store, ages_h, now):
    """Set the commitlog files' mtimes: file i was last modified ages_h[i] hours before ``now``."""
    files = store.commit_log.mapped_file_queue.mapped_files
    assert len(files) == len(ages_h), (len(files), ages_h)
    for mf, age in zip(files, ages_h):
        t = (now - age * HOUR) / 1000
        os.utime(mf.file_name, (t, t))


def commitlog_names(store):
    return [os.path.basename(mf.file_name) for mf in store.commit_log.mapped_file_queue.mapped_files]


def check_follows(store, results):
    """After a clean: queues, index, get and min_offset follow the commitlog's min offset."""
    cl_min = store.commit_log.min_offset
    assert cl_min > 0
    gone = [r for r in results if r.commitlog_offset < cl_min]
    kept = [r for r in results if r.commitlog_offset >= cl_min]
    assert gone and kept
    for topic, qid in TOPICS:
        cq = store.find_consume_queue(topic, qid, create=False)
        q_results = [r for i, r in enumerate(results) if TOPICS[i % len(TOPICS)] == (topic, qid)]
        first_kept = min(r.queue_offset for r in q_results if r.commitlog_offset >= cl_min)
        assert store.min_offset(topic, qid) == first_kept
        assert store.max_offset(topic, qid) >= len(q_results)
        # consume-queue files wholly below the min are gone: the first file holds the min offset's unit
        first_cq = cq.mapped_file_queue.first()
        assert first_cq.file_from_offset <= first_kept * 20 < first_cq.file_from_offset + first_cq.file_size
        g = store.get_messages("g", topic, qid, 0)
        assert g.status is GetStatus.OFFSET_TOO_SMALL
        assert g.next_begin_offset == first_kept and g.min_offset == first_kept
        g = store.get_messages("g", topic, qid, first_kept - 1)
        assert g.status is GetStatus.OFFSET_TOO_SMALL and g.next_begin_offset == first_kept
        g = store.get_messages("g", topic, qid, first_kept, 4)
        assert g.status is GetStatus.FOUND
        assert g.messages[0].queue_offset == first_kept and g.messages[0].commitlog_offset >= cl_min
    for f in store.index_service.index_files[:-1]:
        assert f.end_phy_offset >= cl_min          # index files wholly below the min are gone
    r = kept[-1]
    i = results.index(r)
    assert [m.commitlog_offset for m in store.query_message(TOPICS[i % 3][0], f"k{i}")] == [r.commitlog_offset]
    assert store.look_message(gone[0].commitlog_offset) is None
    report = store.verify()
    assert report["ok"], report
    return cl_min


def test_delete_when_hour_and_reserved_time(tmp_path):
    store = MessageStore.open(str(tmp_path / "s"), cfg(file_reserved_time=72, delete_when="04"))
    try:
        results = fill(store)
        names = commitlog_names(store)
        assert len(names) >= 4
        at_four, at_ten = local_ms(4), local_ms(10)
        ages = [100, 80] + [1] * (len(names) - 2)          # two files past the 72 h reserve
        set_ages(store, ages, at_four)
        now = [at_ten]
        svc = CleanCommitLogService(store, clock=lambda: now[0], disk_usage=lambda path: 0.10)
        assert svc.run_once() == 0, "not delete_when o'clock and the disk has room: nothing goes"
        assert commitlog_names(store) == names
        assert svc.last_run["timeup"] is False and svc.last_run["spacefull"] is False
        now[0] = at_four
        assert svc.run_once() == 2
        assert commitlog_names(store) == names[2:]
        assert svc.run_once() == 0, "the rest is younger than the reserve"
        cq_svc = CleanConsumeQueueService(store)
        assert cq_svc.run_once() > 0
        cl_min = check_follows(store, results)
        assert cl_min == int(names[2])
        assert cq_svc.run_once() == 0 and cq_svc.last_run["deleted"] == 0      # min offset did not move
        # the store keeps working after a clean
        r = store.put(Message("Orders", b"after", 0, keys=["after"]))
        assert r.status is PutStatus.PUT_OK and r.queue_offset == 100
        store.wait_dispatched()
        assert [bytes(m.body) for m in store.query_message("Orders", "after")] == [b"after"]
    finally:
        store.close()
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        assert store.commit_log.min_offset == cl_min
        assert check_follows(store, results) == cl_min      # reopened: same min offsets, same answers
        assert store.max_offset("Orders", 0) == 101


def test_delete_when_list_and_old_files_stop_at_first_young_one(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg(delete_when="01;04", file_reserved_time=48)) as store:
        fill(store)
        names = commitlog_names(store)
        one_am = local_ms(1, 5)
        # the second file is young: RocketMQ stops there ("avoid deleting files in the middle")
        set_ages(store, [60, 2] + [60] * (len(names) - 2), one_am)
        svc = CleanCommitLogService(store, clock=lambda: one_am, disk_usage=lambda path: 0.0)
        assert svc.is_time_to_delete()
        assert svc.run_once() == 1
        assert commitlog_names(store) == names[1:]
    assert is_it_time_to_do("01;04", local_ms(4, 59)) and not is_it_time_to_do("01;04", local_ms(5, 0))
    assert is_it_time_to_do("4", local_ms(4, 0))


def test_disk_ratio_deletes_expired_files_at_any_hour(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg(disk_max_used_space_ratio=75)) as store:
        results = fill(store)
        names = commitlog_names(store)
        noon = local_ms(12)
        set_ages(store, [90, 80, 75] + [5] * (len(names) - 3), noon)
        usage = [0.70]
        seen = []

        def disk_usage(path):
            seen.append(path)
            return usage[0]

        svc = CleanCommitLogService(store, clock=lambda: noon, disk_usage=disk_usage)
        assert svc.run_once() == 0
        assert seen[0] == os.path.join(store.path, "commitlog")      # the commitlog's partition is measured
        usage[0] = 0.80                     # past 75 %: expired files go at once, whatever the hour
        assert svc.run_once() == 3
        assert svc.last_run["spacefull"] and not svc.last_run["clean_at_once"]
        assert commitlog_names(store) == names[3:]
        assert svc.run_once() == 0, "below the forced-clean ratio young files stay"
        CleanConsumeQueueService(store).run_once()
        check_follows(store, results)


def test_forced_clean_ratio_deletes_young_files_but_never_the_last(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        results = fill(store)
        names = commitlog_names(store)
        noon = local_ms(12)
        set_ages(store, [1] * len(names), noon)
        svc = CleanCommitLogService(store, clock=lambda: noon, disk_usage=lambda path: 0.86)
        deleted = svc.run_once()
        assert svc.last_run["clean_at_once"] and not svc.disk_full
        assert deleted == len(names) - 1, "past the forced-clean ratio everything but the file being written goes"
        assert commitlog_names(store) == names[-1:]
        assert svc.run_once() == 0, "the last file is never deleted"
        svc.disk_usage = lambda path: 0.95
        assert svc.run_once() == 0 and svc.disk_full          # past 90 %: marked full, still never the last file
        CleanConsumeQueueService(store).run_once()
        check_follows(store, results)
        more = fill(store, 60)           # the store goes on writing into (and past) the last file
        end = results[-1].commitlog_offset + results[-1].wrote_bytes
        size = store.config.mapped_file_size_commit_log
        assert more[0].commitlog_offset in (end, (end // size + 1) * size)    # right after, or in the next file
        assert store.verify()["ok"]


def test_each_pass_deletes_at_most_delete_file_batch_max(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg(delete_file_batch_max=2)) as store:
        results = fill(store)
        names = commitlog_names(store)
        assert len(names) >= 4
        noon = local_ms(12)
        set_ages(store, [1] * len(names), noon)
        svc = CleanCommitLogService(store, clock=lambda: noon, disk_usage=lambda path: 0.86)
        passes = []
        while (n := svc.run_once()) > 0:
            passes.append(n)
        assert max(passes) == 2 and sum(passes) == len(names) - 1
        assert commitlog_names(store) == names[-1:]
        CleanConsumeQueueService(store).run_once()
        check_follows(store, results)


def test_unmeasurable_disk_counts_as_full(tmp_path):
    # UtilAll.getDiskPartitionSpaceUsedPercent answers -1 on error, and isSpaceToDelete treats that as "reclaim".
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        fill(store)
        names = commitlog_names(store)
        noon = local_ms(12)
        set_ages(store, [100] + [1] * (len(names) - 1), noon)
        svc = CleanCommitLogService(store, clock=lambda: noon, disk_usage=lambda path: -1)
        assert svc.run_once() == 1
    assert disk_partition_space_used_percent(str(tmp_path / "missing")) == -1
    ratio = disk_partition_space_used_percent(str(tmp_path))
    assert 0 < ratio <= 1


def test_manual_delete(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        fill(store)
        names = commitlog_names(store)
        noon = local_ms(12)
        set_ages(store, [100, 100] + [1] * (len(names) - 2), noon)
        svc = CleanCommitLogService(store, clock=lambda: noon, disk_usage=lambda path: 0.1)
        assert svc.run_once() == 0
        svc.execute_delete_files_manually()
        assert svc.run_once() == 2
        assert svc.manual_delete_file_several_times == 19


def test_combined_service_and_bad_delete_when(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        results = fill(store)
        names = commitlog_names(store)
        set_ages(store, [100] * len(names), local_ms(4))
        svc = CleanFilesService(store, clock=lambda: local_ms(4), disk_usage=lambda path: 0.1)
        deleted_cl, deleted_cq = svc.run_once()
        assert deleted_cl == len(names) - 1 and deleted_cq > 0
        check_follows(store, results)
        with pytest.raises(ValueError, match="delete_when"):
            CleanCommitLogService(type("S", (), {"config": cfg(delete_when="4am"), "path": store.path})())


def test_index_files_below_min_offset_are_deleted(tmp_path):
    # 120 index items per file and two keys a message (UNIQ_KEY + KEYS): index files roll every ~60 messages.
    with MessageStore.open(str(tmp_path / "s"), cfg()) as store:
        results = fill(store)
        index_before = store.index_service.index_files
        assert len(index_before) >= 4
        names = commitlog_names(store)
        set_ages(store, [100] * len(names), local_ms(4))
        CleanCommitLogService(store, clock=lambda: local_ms(4), disk_usage=lambda p: 0.1).run_once()
        cq_svc = CleanConsumeQueueService(store)
        cq_svc.run_once()
        cl_min = store.commit_log.min_offset
        expected_gone = [f.file_name for f in index_before[:-1] if f.end_phy_offset < cl_min]
        assert expected_gone
        assert cq_svc.last_run["index_deleted"] == len(expected_gone)
        for name in expected_gone:
            assert not os.path.exists(name)
        assert store.index_service.index_files[-1].file_name == index_before[-1].file_name
        check_follows(store, results)
