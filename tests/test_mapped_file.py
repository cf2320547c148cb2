"""MappedFile and MappedFileQueue: names, sizes, positions, zero-copy views, flush/commit rules, layout errors."""
import os
import random
import time

import pytest

from rmqcore import StoreLayoutError, StoreClosedError
from rmqcore._mapped_file import MappedFile, _set_zero_horizon_ns, offset_to_file_name
from rmqcore.mapped_file_queue import MappedFileQueue
from rmqcore.transient_store_pool import TransientStorePool

SIZE = 64 * 1024


def test_file_name_is_20_digit_offset():
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(1073741824) == "00000000001073741824"
    with pytest.raises(ValueError):
        offset_to_file_name(-1)


def test_create_append_select_zero_copy(tmp_path):
    mf = MappedFile(str(tmp_path / offset_to_file_name(SIZE)), SIZE)
    assert mf.file_from_offset == SIZE and mf.file_size == SIZE
    assert os.path.getsize(mf.file_name) == SIZE
    assert mf.append(b"abc") and mf.wrote_position == 3
    view = mf.select(0)
    assert bytes(view) == b"abc"
    whole = mf.view()
    mf.append(b"def")
    assert bytes(whole[3:6]) == b"def"          # same memory, no copy
    assert mf.select(4, 10) is None             # not readable yet
    assert not mf.append(b"x" * SIZE)           # does not fit
    with pytest.raises(TypeError):
        memoryview(mf)[0] = 1                   # exported read-only: readers cannot corrupt the log
    del view, whole
    mf.destroy()
    assert not os.path.exists(mf.file_name)


def test_bad_names_and_sizes(tmp_path):
    with pytest.raises(StoreLayoutError, match="20 digits"):
        MappedFile(str(tmp_path / "foo"), SIZE)
    path = tmp_path / offset_to_file_name(0)
    path.write_bytes(b"x" * 100)
    with pytest.raises(StoreLayoutError, match="size 100"):
        MappedFile(str(path), SIZE)
    with pytest.raises(FileNotFoundError):
        MappedFile(str(tmp_path / offset_to_file_name(SIZE * 5)), SIZE, read_only=True)


def test_flush_least_pages_rule(tmp_path):
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE)
    mf.append(b"x" * 100)
    assert mf.flush(4) == 0                     # less than 4 dirty pages: nothing
    mf.append(b"x" * 4096 * 4)
    assert mf.flush(4) == 100 + 4096 * 4
    mf.append(b"y")
    assert mf.flush(0) == 100 + 4096 * 4 + 1    # 0: any byte
    mf.destroy()


def test_views_outlive_close(tmp_path):
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE)
    mf.append(b"hello")
    view = mf.select(0)
    mf.close()
    assert mf.closed
    assert bytes(view) == b"hello"              # the mapping stays until the last view goes
    with pytest.raises(StoreClosedError):
        mf.view()
    assert mf.select(0) is None
    del view


def test_truncate_zeroes_tail_and_resets_positions(tmp_path):
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE)
    mf.append(b"a" * 1000)
    mf.truncate_to(10)
    assert (mf.wrote_position, mf.committed_position, mf.flushed_position) == (10, 10, 10)
    assert bytes(mf.view()[10:1000]) == bytes(990)
    mf.destroy()


def test_warm_up_and_reopen_keeps_data(tmp_path):
    path = str(tmp_path / offset_to_file_name(0))
    mf = MappedFile(path, SIZE)
    mf.append(b"persist")
    mf.warm_up()                                # must not touch bytes below the wrote position
    mf.flush()
    mf.close()
    ro = MappedFile(path, SIZE, read_only=True)
    assert bytes(ro.view()[:7]) == b"persist"
    with pytest.raises(PermissionError):
        ro.append(b"x")
    ro.close()


def test_transient_store_pool_commit(tmp_path):
    pool = TransientStorePool(2, SIZE)
    pool.init()
    assert pool.available_buffer_nums() == 2
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE, pool=pool)
    assert mf.has_write_buffer and pool.available_buffer_nums() == 1
    mf.append(b"buffered")
    assert mf.read_position == 0 and mf.select(0, 8) is None   # not committed: invisible to readers
    assert mf.commit(0) == 8
    assert bytes(mf.select(0, 8)) == b"buffered"
    mf.append(b"z" * (SIZE - 8))
    assert mf.commit(4) == SIZE                 # a full file always commits
    assert pool.available_buffer_nums() == 2    # and gives its buffer back
    assert mf.flush() == SIZE
    mf.destroy()
    pool.destroy()


# -- MappedFileQueue ---------------------------------------------------------------------------------------------------

def test_queue_rolls_and_finds_by_offset(tmp_path):
    q = MappedFileQueue(str(tmp_path / "q"), SIZE)
    first = q.get_last_mapped_file()
    first.append(b"x" * SIZE)
    second = q.get_last_mapped_file()
    assert second.file_from_offset == SIZE and len(q) == 2
    assert q.find_mapped_file_by_offset(SIZE + 5) is second
    assert q.find_mapped_file_by_offset(3) is first
    assert q.find_mapped_file_by_offset(10 * SIZE) is None
    assert q.get_min_offset() == 0 and q.get_max_offset() == SIZE
    q.shutdown()


def test_queue_lookups_without_the_lock_while_files_are_deleted(tmp_path):
    # find_mapped_file_by_offset and get_max_offset read the file list without the lock (pulls and dispatch ask on
    # every call): while another thread deletes files from the front, a lookup gives the file holding the offset,
    # or None once it is gone, never a wrong file or an exception.
    import random
    import threading
    q = MappedFileQueue(str(tmp_path / "q"), SIZE)
    n = 40
    for _ in range(n):
        q.get_last_mapped_file().append(b"x" * SIZE)
    end = q.get_max_offset()
    errors: list = []
    done = threading.Event()

    def look():
        rnd = random.Random(5)
        while not done.is_set():
            off = rnd.randrange(0, end)
            try:
                mf = q.find_mapped_file_by_offset(off)
                if mf is not None and not mf.file_from_offset <= off < mf.file_from_offset + SIZE:
                    errors.append((off, mf.file_from_offset))
                if q.get_max_offset() not in (end, end + SIZE):
                    errors.append(("max", q.get_max_offset()))
            except Exception as e:   # noqa: BLE001 - any exception is the failure
                errors.append(repr(e))

    readers = [threading.Thread(target=look) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for k in range(1, n):
            q.delete_files_below(k * SIZE)
            time.sleep(0.0005)
    finally:
        done.set()
        for t in readers:
            t.join()
    assert errors == []
    assert len(q) == 1 and q.find_mapped_file_by_offset(0) is None
    assert q.find_mapped_file_by_offset(0, return_first_on_not_found=True) is q.first()
    q.shutdown()


def test_queue_load_rejects_foreign_files_gaps_and_sizes(tmp_path):
    d = tmp_path / "q"
    d.mkdir()
    (d / offset_to_file_name(0)).write_bytes(bytes(SIZE))
    (d / offset_to_file_name(2 * SIZE)).write_bytes(bytes(SIZE))
    with pytest.raises(StoreLayoutError, match="gap"):
        MappedFileQueue(str(d), SIZE).load()
    (d / offset_to_file_name(SIZE)).write_bytes(bytes(SIZE - 1))
    with pytest.raises(StoreLayoutError, match="size"):
        MappedFileQueue(str(d), SIZE).load()
    (d / offset_to_file_name(SIZE)).write_bytes(bytes(SIZE))
    (d / "notes.txt").write_text("hi")
    with pytest.raises(StoreLayoutError, match="notes.txt"):
        MappedFileQueue(str(d), SIZE).load()
    (d / "notes.txt").unlink()
    q = MappedFileQueue(str(d), SIZE)
    q.load()
    assert len(q) == 3
    q.shutdown()


def test_queue_truncate_dirty_files(tmp_path):
    q = MappedFileQueue(str(tmp_path / "q"), SIZE)
    for _ in range(3):
        q.get_last_mapped_file().append(b"y" * SIZE)
    q.truncate_dirty_files(SIZE + 100)
    assert len(q) == 2 and q.get_max_offset() == SIZE + 100
    assert not os.path.exists(tmp_path / "q" / offset_to_file_name(2 * SIZE))
    q.shutdown()


def test_delete_expired_files_by_time_never_the_last(tmp_path):
    q = MappedFileQueue(str(tmp_path / "q"), SIZE)
    for _ in range(3):
        q.get_last_mapped_file().append(b"y" * SIZE)
    q.get_last_mapped_file()
    now = int(time.time() * 1000)
    assert q.delete_expired_file_by_time(72 * 3600 * 1000, now_ms=now) == 0          # all young
    assert q.delete_expired_file_by_time(72 * 3600 * 1000, now_ms=now + 73 * 3600 * 1000) == 3
    assert len(q) == 1 and q.get_min_offset() == 3 * SIZE
    q.shutdown()


def test_delete_expired_files_takes_at_most_a_batch_per_pass(tmp_path):
    q = MappedFileQueue(str(tmp_path / "q"), SIZE)
    for _ in range(5):
        q.get_last_mapped_file().append(b"y" * SIZE)
    q.get_last_mapped_file()
    old = int(time.time() * 1000) + 73 * 3600 * 1000
    assert q.delete_expired_file_by_time(72 * 3600 * 1000, now_ms=old, batch_max=2) == 2
    assert q.get_min_offset() == 2 * SIZE
    assert q.delete_expired_file_by_time(0, 0, clean_immediately=True, batch_max=2) == 2
    assert q.delete_expired_file_by_time(0, 0, clean_immediately=True, batch_max=2) == 1   # the last one stays
    assert len(q) == 1 and q.get_min_offset() == 5 * SIZE
    q.shutdown()


def test_background_allocation_precreates_next_file(tmp_path):
    q = MappedFileQueue(str(tmp_path / "q"), SIZE, allocate=True, warm=True)
    q.get_last_mapped_file()
    deadline = time.time() + 5
    while not os.path.exists(tmp_path / "q" / offset_to_file_name(SIZE)) and time.time() < deadline:
        time.sleep(0.01)
    assert os.path.exists(tmp_path / "q" / offset_to_file_name(SIZE))
    q.shutdown()


def test_runway_is_made_for_the_appends_that_came(tmp_path):
    # Appends copied into the mapping (one message a put) get the next stretch of runway written and mapped;
    # appends by pwrite (put_batch) get it left to the page cache (no zeros copied twice, no writable mappings).
    mib = 1 << 20
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), 16 * mib, runway=mib, pwrite_min=4096)
    try:
        assert mf.runway_mapped                      # a new file expects copies unless told otherwise
        while mf.wrote_position < mib // 2 + 1:
            mf.append(b"s" * 1000)                   # small: copied
        mf.prepare_runway()
        assert mf.allocated_position > mib and mf.runway_mapped
        big = os.urandom(64 * 1024)
        while mf.wrote_position < mf.allocated_position - mib // 2 + 1:
            mf.append(big)                           # large: pwrite
        mf.prepare_runway()
        assert not mf.runway_mapped
        start = mf.wrote_position
        mf.append(big)
        assert bytes(mf.select(start, len(big))) == big      # readable through the mapping all the same
    finally:
        mf.close()
    nxt = MappedFile(str(tmp_path / offset_to_file_name(16 * mib)), 16 * mib, runway=mib, pwrite_min=4096,
                     copies_expected=False)
    try:
        assert not nxt.runway_mapped
    finally:
        nxt.close()


def _mapped_rss(view) -> int:
    """Bytes of the mapping holding ``view`` that this process has page-table entries for (/proc/self/smaps)."""
    import numpy as np
    addr = np.frombuffer(view, dtype=np.uint8).ctypes.data
    rss = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "Rss:":
                rss = int(line.split()[1]) * 1024
                break
    assert rss is not None
    return rss


def test_flush_unmaps_whole_written_pages_and_keeps_their_bytes(tmp_path):
    # Pages copied into through the mapping are dropped from the page tables before their msync (writeback would
    # otherwise write-protect each one with a TLB shootdown of its own); the bytes stay, in views taken before too.
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), 1 << 20, pwrite_min=4096)
    try:
        data = os.urandom(768 * 1024 + 100)
        for i in range(0, len(data), 1000):
            mf.append(data[i:i + 1000])                       # small appends: copied into the mapping
        whole = mf.view()
        before = _mapped_rss(whole)
        assert before >= 768 * 1024
        assert mf.flush(0) == len(data)
        assert _mapped_rss(whole) <= before - 768 * 1024      # every whole page written: out of the page tables
        assert bytes(whole[:len(data)]) == data               # read back: the page cache kept them
        mf.append(b"tail")
        assert bytes(mf.select(len(data) - 4, 8)) == data[-4:] + b"tail"
    finally:
        del whole
        mf.close()
    with open(mf.file_name, "rb") as f:
        assert f.read(len(data) + 4) == data + b"tail"


@pytest.mark.parametrize("sync", [False, True])
def test_runway_is_made_a_step_at_a_time_for_a_writer_that_outran_it(tmp_path, sync):
    # A new file's first stretch is one step (4 MiB), not a whole runway: the first put of a store makes it and
    # waits for it. A writer past the allocated end (the allocate thread behind) makes one step past what it
    # needs; the allocate thread keeps a runway ahead of the write position (ASYNC: in steps, each published).
    mib = 1 << 20
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), 128 * mib, runway=32 * mib, sync_writes=sync,
                    pwrite_min=4096)
    try:
        assert mf.allocated_position == 4 * mib
        mf.append(b"a" * 1000)
        assert mf.allocated_position == 4 * mib        # nothing more until it is needed or asked for
        big = os.urandom(64 * 1024)
        while mf.wrote_position + len(big) <= 4 * mib:
            mf.append(big)
        mf.append(big)                                 # past the first step: the writer makes the next itself
        need = mf.wrote_position
        assert need < mf.allocated_position <= need + (32 if sync else 4) * mib
        mf.prepare_runway()                            # the allocate thread's turn (SYNC: whole runways past the end)
        assert mf.allocated_position >= mf.wrote_position + (16 if sync else 32) * mib
        assert bytes(mf.select(need - len(big), len(big))) == big
    finally:
        mf.close()
    with open(mf.file_name, "rb") as f:
        f.seek(need - len(big))
        assert f.read(len(big)) == big


@pytest.mark.parametrize("sync,small", [(False, False), (False, True), (True, False)])
def test_runway_zeros_go_only_ahead_of_a_writer_that_will_reach_them(tmp_path, sync, small):
    # Zeros ahead of the writer are dirty pages: for a writer too slow to replace them before the kernel's dirty
    # expiry they would be written to disk, so only a writer expected at the end of the stretch soon gets them
    # (here every writer is "slow" once the horizon is 1 us). SYNC_FLUSH always writes them (extent conversion).
    # Until the writer has gone far enough to be judged, the verdict of the file before stands (a store's first
    # file: no zeros). Without zeros the appends still land, copied (small) or pwritten.
    mib = 1 << 20
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), 64 * mib, runway=8 * mib, sync_writes=sync,
                    pwrite_min=4096)
    rec = os.urandom(1000 if small else 64 * 1024)
    written = []

    def fill_and_prepare():
        start = mf.wrote_position
        while mf.wrote_position < start + 2 * mib or mf.wrote_position + 4 * mib < mf.allocated_position:
            written.append((mf.wrote_position, rec))
            mf.append(rec)
        mf.prepare_runway()

    try:
        assert mf.runway_zeroed == sync                # nothing known of the writer yet
        fill_and_prepare()
        assert mf.runway_zeroed                        # a writer going fast
        _set_zero_horizon_ns(1000)
        fill_and_prepare()
        assert mf.runway_zeroed == sync
        fill_and_prepare()
        for pos, data in written[-3:]:
            assert bytes(mf.select(pos, len(data))) == data
    finally:
        _set_zero_horizon_ns(10 * 1000 * 1000 * 1000)
        mf.close()
    with open(mf.file_name, "rb") as f:
        for pos, data in written[::97]:
            f.seek(pos)
            assert f.read(len(data)) == data
    nxt = MappedFile(str(tmp_path / offset_to_file_name(64 * mib)), 64 * mib, runway=8 * mib, pwrite_min=4096,
                     zeros_expected=True)
    try:
        assert nxt.runway_zeroed                       # the file before's verdict
    finally:
        nxt.close()


def test_sync_runway_leaves_the_stretch_being_filled_writable(tmp_path):
    # Under SYNC_FLUSH the runway syncs each new stretch of zeros (extent conversion). That sync must cover the new
    # stretch only: syncing the whole file wrote back and write-protected the pages of the stretch the writer was
    # still filling, and each of them then cost a write fault on the put path.
    import resource
    mib = 1 << 20
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), 16 * mib, runway=mib, sync_writes=True,
                    pwrite_min=-1)
    rec = b"r" * 1000
    try:
        while mf.wrote_position < mib // 2 + 1:
            mf.append(rec)
        mf.prepare_runway()                          # the next stretch: zeros written, synced, mapped
        assert mf.allocated_position > mib
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        while mf.wrote_position < mib - len(rec):    # the rest of the first stretch: ~120 pages
            mf.append(rec)
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
        assert faults < 20, f"{faults} page faults appending into a runway stretch already mapped"
    finally:
        mf.close()


def _file_bytes(path, start, n):
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(n)


def test_write_ring_appends_reach_the_file_when_committed(tmp_path):
    # SYNC_FLUSH's write ring: appends wait in memory and are readable (and in the file) once committed; the ring
    # wraps, an append that would lap uncommitted bytes commits them first, and one too large for the ring goes
    # to the file directly between ring appends.
    from rmqcore._mapped_file import WriteRing
    ring = WriteRing(64 * 1024)
    path = str(tmp_path / offset_to_file_name(3 * 1024 * 1024))      # not at offset 0: the ring index is global
    mf = MappedFile(path, 1024 * 1024, runway=256 * 1024, sync_writes=True, ring=ring)
    rng = random.Random(7)
    expected = bytearray()
    try:
        for i in range(60):                       # ~3 KiB records: 180 KiB through a 64 KiB ring
            rec = bytes([i % 251 + 1]) * 4 + rng.randbytes(rng.randrange(8, 6000))
            committed = mf.read_position
            assert mf.append(rec)
            expected += rec
            assert mf.read_position == committed  # not readable before a commit
            if i % 7 == 6:
                assert mf.commit() == len(expected) == mf.read_position
                assert bytes(mf.select(0, len(expected))) == bytes(expected)
        big = b"\x05\x00\x00\x00" + rng.randbytes(40 * 1024)          # > a quarter of the ring: direct
        assert mf.append(big)
        expected += big
        tail = b"\x06\x00\x00\x00" + rng.randbytes(5000)
        assert mf.append(tail)
        expected += tail
        assert mf.flush() == len(expected)        # a flush commits first
        assert bytes(mf.select(0, len(expected))) == bytes(expected)
        assert _file_bytes(path, 0, len(expected)) == bytes(expected)
        more = b"\x07\x00\x00\x00" + rng.randbytes(3000)
        assert mf.append(more)
        expected += more
    finally:
        mf.close()                                # close commits what waits
    assert _file_bytes(path, 0, len(expected)) == bytes(expected)


def test_write_ring_size_must_be_a_power_of_two():
    from rmqcore._mapped_file import WriteRing
    with pytest.raises(ValueError, match="power of two"):
        WriteRing(100_000)
    assert WriteRing(1 << 16).size == 1 << 16
