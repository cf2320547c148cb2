"""IndexFile (Cython) and IndexService against RocketMQ's IndexFile/IndexService and reference.IndexFileRef."""
from __future__ import annotations

import os
import random
import struct
import tempfile
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqcore import reference as ref
from rmqcore._index_file import IndexFile, index_file_size, index_key_hash, query_files
from rmqcore.errors import StoreClosedError, StoreLayoutError
from rmqcore.index_service import IndexService, build_key

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


def read_bytes(path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def new_file(tmp_path, name="20240101000000000", slots=7, num=10, end_phy=0, end_ts=0):
    return IndexFile(str(tmp_path / name), slots, num, end_phy, end_ts)


# -- hashing -------------------------------------------------------------------------------------------------------

def test_key_hash_matches_java():
    assert index_key_hash("a") == 97
    assert index_key_hash("") == 0
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE: Math.abs overflows, indexKeyHashMethod answers 0.
    assert ref.java_hash_code("polygenelubricants") == -2**31
    assert index_key_hash("polygenelubricants") == 0
    for key in ["topic#key", "TopicTest#ORDER-1", "ключ", "键#值", "emoji#\U0001F600", "x" * 1000,
                "lone\ud800surrogate", "\udfff"]:
        assert index_key_hash(key) == ref.index_key_hash(key), key


# -- golden layout -------------------------------------------------------------------------------------------------

def test_golden_layout(tmp_path):
    # slots=7, num=10: header 40 + slots 28 at 40..67 + items of 20 at 68 (item 0 unused), file 268 bytes.
    f = new_file(tmp_path)
    path = f.file_name
    assert f.file_size == 268 == os.path.getsize(path)
    # A new file: zeros, indexCount 1 in the header, nothing else.
    data = read_bytes(path)
    assert data[:40] == bytes(36) + bytes.fromhex("00000001")
    assert data[40:] == bytes(228)

    # "a" -> 97 -> slot 6; "b" -> 98 -> slot 0; "h" -> 104 -> slot 6 (collides with "a").
    assert f.put_key("a", 100, 1_000_000)       # item 1, first: timeDiff 0, begin := (100, 1_000_000)
    assert f.put_key("b", 200, 1_005_500)       # item 2, timeDiff 5500 ms -> 5 s
    assert f.put_key("h", 300, 1_010_999)       # item 3, timeDiff 10 s, prev = item 1
    assert f.put_key("a", 400, 999_000)         # item 4, before begin: timeDiff -1 -> clamped 0, prev = item 3
    data = read_bytes(path)
    assert data[0:8] == bytes.fromhex("00000000000f4240")     # beginTimestamp 1_000_000
    assert data[8:16] == bytes.fromhex("00000000000f3e58")    # endTimestamp 999_000 (the last put's)
    assert data[16:24] == bytes.fromhex("0000000000000064")   # beginPhyOffset 100
    assert data[24:32] == bytes.fromhex("0000000000000190")   # endPhyOffset 400
    assert data[32:36] == bytes.fromhex("00000002")           # hashSlotCount: slots 0 and 6
    assert data[36:40] == bytes.fromhex("00000005")           # indexCount: next free item
    assert data[40:44] == bytes.fromhex("00000002")           # slot 0 -> item 2
    assert data[44:64] == bytes(20)                           # slots 1..5 empty
    assert data[64:68] == bytes.fromhex("00000004")           # slot 6 -> item 4
    assert data[68:88] == bytes(20)                           # item 0 never used
    assert data[88:108] == bytes.fromhex("00000061" "0000000000000064" "00000000" "00000000")
    assert data[108:128] == bytes.fromhex("00000062" "00000000000000c8" "00000005" "00000000")
    assert data[128:148] == bytes.fromhex("00000068" "000000000000012c" "0000000a" "00000001")
    assert data[148:168] == bytes.fromhex("00000061" "0000000000000190" "00000000" "00000003")
    assert data[168:] == bytes(100)
    assert f.header_bytes() == data[:40]

    assert (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset) == (1_000_000, 999_000, 100, 400)
    assert (f.hash_slot_count, f.index_count) == (2, 5)
    assert f.select_phy_offsets("a", 10, 0, LONG_MAX) == [400, 100]
    assert f.select_phy_offsets("h", 10, 0, LONG_MAX) == [300]
    assert f.select_phy_offsets("b", 10, 0, LONG_MAX) == [200]
    assert f.select_phy_offsets("o", 10, 0, LONG_MAX) == []   # 111 -> slot 6 too, no item matches
    assert f.select_phy_offsets("zz", 10, 0, LONG_MAX) == []
    # Item 4 reads back at begin + 0 s = 1_000_000: below begin 1_000_001 it is skipped and ends the walk.
    assert f.select_phy_offsets("a", 10, 1_000_001, LONG_MAX) == []
    assert f.select_phy_offsets("a", 1, 0, LONG_MAX) == [400]
    assert f.select_phy_offsets("a", 0, 0, LONG_MAX) == []

    # The same puts into the executable spec give the same bytes.
    r = ref.IndexFileRef.create(7, 10)
    for args in [("a", 100, 1_000_000), ("b", 200, 1_005_500), ("h", 300, 1_010_999), ("a", 400, 999_000)]:
        assert r.put_key(*args)
    assert bytes(r.buf) == data
    f.close()


def test_golden_carry_over(tmp_path):
    # A file that continues a full one starts with the previous end offset/time as begin and end.
    f = new_file(tmp_path, end_phy=5000, end_ts=2_000_000)
    data = read_bytes(f.file_name)
    assert data[:40] == bytes.fromhex("00000000001e8480" "00000000001e8480" "0000000000001388" "0000000000001388"
                                      "00000000" "00000001")
    # timeDiff of the first item is taken against the carried begin (3 s), then begin moves to the item's time.
    assert f.put_key("b", 6000, 2_003_000)
    data = read_bytes(f.file_name)
    assert data[:40] == bytes.fromhex("00000000001e9038" "00000000001e9038" "0000000000001770" "0000000000001770"
                                      "00000001" "00000002")
    assert data[40:44] == bytes.fromhex("00000001")             # "b" -> 98 % 7 = 0: slot 0 -> item 1
    assert data[88:108] == bytes.fromhex("00000062" "0000000000001770" "00000003" "00000000")
    # So the item reads back at 2_003_000 + 3 s, exactly as RocketMQ reads it.
    assert f.select_phy_offsets("b", 10, 2_006_000, 2_006_000) == [6000]
    assert f.select_phy_offsets("b", 10, 2_003_000, 2_005_999) == []
    f.close()


def test_golden_min_value_hash(tmp_path):
    f = new_file(tmp_path)
    assert f.put_key("polygenelubricants", 77, 1_000)        # keyHash 0 -> slot 0
    data = read_bytes(f.file_name)
    assert data[40:44] == bytes.fromhex("00000001")
    assert data[88:108] == bytes.fromhex("00000000" "000000000000004d" "00000000" "00000000")
    assert f.select_phy_offsets("polygenelubricants", 5, 0, LONG_MAX) == [77]
    # "" hashes to 0 as well: same slot, same keyHash, so RocketMQ returns it for either key.
    assert f.put_key("", 78, 2_000)
    assert f.select_phy_offsets("polygenelubricants", 5, 0, LONG_MAX) == [78, 77]
    f.close()


def test_time_diff_clamped_to_int_max(tmp_path):
    f = new_file(tmp_path)
    assert f.put_key("a", 1, 1)
    assert f.put_key("a", 2, LONG_MAX)                     # (LONG_MAX - 1) / 1000 s > INT_MAX
    data = read_bytes(f.file_name)
    assert data[108 + 12:108 + 16] == struct.pack(">i", INT_MAX)
    r = ref.IndexFileRef.create(7, 10)
    r.put_key("a", 1, 1)
    r.put_key("a", 2, LONG_MAX)
    assert bytes(r.buf) == data
    f.close()


def test_size_formula_default(tmp_path):
    assert index_file_size(5_000_000, 20_000_000) == 420_000_040 == ref.index_file_size(5_000_000, 20_000_000)
    f = IndexFile(str(tmp_path / "20240101000000000"))      # RocketMQ's defaults, sparse-ish via fallocate
    try:
        assert f.file_size == 420_000_040 == os.path.getsize(f.file_name)
        assert (f.hash_slot_num, f.index_num) == (5_000_000, 20_000_000)
    finally:
        assert f.destroy()
    assert not os.path.exists(tmp_path / "20240101000000000")


def test_bad_parameters(tmp_path):
    with pytest.raises(ValueError):
        IndexFile(str(tmp_path / "x"), 0, 10)
    with pytest.raises(ValueError):
        IndexFile(str(tmp_path / "x"), 7, 1)
    with pytest.raises(ValueError):
        IndexFile(str(tmp_path / "x"), 7, 200_000_000)          # > 2 GiB: Java ints cannot address it
    assert not os.path.exists(tmp_path / "x")


# -- RocketMQ's IndexFileTest ------------------------------------------------------------------------------------------

def test_put_key_until_full(tmp_path):
    f = new_file(tmp_path, slots=100, num=400)
    for i in range(399):
        assert f.put_key(str(i), i, 1_700_000_000_000 + i)
    assert f.is_write_full() and f.index_count == 400
    assert not f.put_key("400", 400, 1_700_000_000_400)       # over capacity
    assert f.index_count == 400
    assert f.destroy()


def test_select_phy_offset(tmp_path):
    f = new_file(tmp_path, slots=100, num=400)
    for i in range(399):
        assert f.put_key(str(i), i, 1_700_000_000_000)
    assert not f.put_key("400", 400, 1_700_000_000_000)
    assert f.select_phy_offsets("60", 10, 0, LONG_MAX) == [60]
    for i in range(399):
        assert f.select_phy_offsets(str(i), 10, 0, LONG_MAX) == [i]
    assert f.select_phy_offsets("400", 10, 0, LONG_MAX) == []
    assert f.destroy()


def test_hash_collisions_all_found(tmp_path):
    f = new_file(tmp_path, slots=1, num=200)          # one slot: every key chains through it
    expected = {}
    off = 0
    for rnd in range(3):
        for k in range(50):
            key = f"t#key-{k}"
            off += 10
            assert f.put_key(key, off, 1_000_000 + off)
            expected.setdefault(key, []).insert(0, off)
    assert f.hash_slot_count == 1
    for key, offs in expected.items():
        assert f.select_phy_offsets(key, 64, 0, LONG_MAX) == offs
    f.close()


def test_small_slots_collisions(tmp_path):
    f = new_file(tmp_path, slots=3, num=100)
    keys = [f"k{i}" for i in range(30)]
    for i, k in enumerate(keys):
        assert f.put_key(k, i, 5_000 + i * 1000)
    for i, k in enumerate(keys):
        assert f.select_phy_offsets(k, 10, 0, LONG_MAX) == [i]
    f.close()


def test_time_range_filtering(tmp_path):
    f = new_file(tmp_path, slots=5, num=50)
    base = 1_700_000_000_000
    for i in range(20):
        assert f.put_key("T#k", i, base + i * 1000)             # one per second
    assert f.select_phy_offsets("T#k", 64, 0, LONG_MAX) == list(range(19, -1, -1))
    assert f.select_phy_offsets("T#k", 64, base + 5000, base + 9000) == [9, 8, 7, 6, 5]
    assert f.select_phy_offsets("T#k", 64, base + 5500, base + 9999) == [9, 8, 7, 6]  # second resolution
    assert f.select_phy_offsets("T#k", 64, base + 30_000, LONG_MAX) == []
    assert f.select_phy_offsets("T#k", 64, 0, base - 1) == []
    # An item older than ``begin`` ends the walk even when older items of the chain would match (RocketMQ's rule).
    g = new_file(tmp_path, "20240101000000001", slots=5, num=50)
    assert g.put_key("T#q", 1, base + 10_000)               # begin := base + 10 s (timeDiff 0)
    assert g.put_key("T#q", 2, base + 30_000)               # + 20 s
    assert g.put_key("T#q", 3, base + 12_000)               # + 2 s
    assert g.select_phy_offsets("T#q", 64, base + 15_000, LONG_MAX) == []
    assert g.select_phy_offsets("T#q", 64, base + 10_000, LONG_MAX) == [3, 2, 1]
    assert g.select_phy_offsets("T#q", 64, base + 11_000, LONG_MAX) == [3, 2]
    g.close()
    assert f.is_time_matched(0, LONG_MAX)
    assert f.is_time_matched(base + 3000, base + 4000)
    assert f.is_time_matched(0, base)
    assert f.is_time_matched(base + 19_000, LONG_MAX)
    assert not f.is_time_matched(0, base - 1)
    assert not f.is_time_matched(base + 19_001, LONG_MAX)
    f.close()


def test_max_num(tmp_path):
    f = new_file(tmp_path, slots=5, num=50)
    for i in range(30):
        assert f.put_key("T#same", i, 1_000 + i)
    assert f.select_phy_offsets("T#same", 5, 0, LONG_MAX) == [29, 28, 27, 26, 25]
    assert len(f.select_phy_offsets("T#same", 1000, 0, LONG_MAX)) == 30
    assert f.select_phy_offsets("T#same", -1, 0, LONG_MAX) == []
    f.close()


def test_put_hashes_batch(tmp_path):
    keys = [f"T#{i % 13}" for i in range(40)]
    hashes = np.array([index_key_hash(k) for k in keys], np.int32)
    offs = np.arange(40, dtype=np.int64) * 100
    ts = 1_000_000 + np.arange(40, dtype=np.int64) * 700
    a = new_file(tmp_path, "20240101000000000", slots=7, num=30)
    b = new_file(tmp_path, "20240101000000001", slots=7, num=30)
    assert a.put_hashes(hashes, offs, ts) == 29                  # full after 29 items
    for k, o, t in zip(keys[:29], offs[:29], ts[:29]):
        assert b.put_key(k, int(o), int(t))
    assert read_bytes(a.file_name) == read_bytes(b.file_name)
    assert a.put_hashes(hashes[29:], offs[29:], ts[29:]) == 0
    with pytest.raises(ValueError):
        a.put_hashes(hashes[:3], offs[:2], ts[:3])
    with pytest.raises(ValueError):
        a.put_hashes(np.array([-5], np.int32), offs[:1], ts[:1])
    c = new_file(tmp_path, "20240101000000002", slots=7, num=30)
    # skip_indexed: entries below the running end offset are consumed without being put.
    assert c.put_hashes(np.array([1, 2, 3, 4], np.int32), np.array([10, 5, 10, 20], np.int64),
                        np.array([1, 2, 3, 4], np.int64), skip_indexed=True) == 4
    assert c.index_count == 4 and c.end_phy_offset == 20
    for x in (a, b, c):
        x.close()


# -- reopen, sizes, life cycle -------------------------------------------------------------------------------------

def test_reopen_keeps_everything(tmp_path):
    f = new_file(tmp_path, slots=11, num=60)
    rnd = random.Random(5)
    puts = [(f"T#{rnd.randrange(20)}", i * 37, 1_600_000_000_000 + i * rnd.randrange(3000)) for i in range(50)]
    for p in puts:
        assert f.put_key(*p)
    header = (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset, f.hash_slot_count,
              f.index_count)
    results = {k: f.select_phy_offsets(k, 64, 0, LONG_MAX) for k, _, _ in puts}
    f.flush()
    f.close()
    data = read_bytes(f.file_name)
    g = IndexFile(f.file_name, 11, 60)
    assert (g.begin_timestamp, g.end_timestamp, g.begin_phy_offset, g.end_phy_offset, g.hash_slot_count,
            g.index_count) == header
    assert {k: g.select_phy_offsets(k, 64, 0, LONG_MAX) for k in results} == results
    assert ref.parse_index_header(data) == dict(zip(
        ["begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count",
         "index_count"], header))
    # Reopened files keep appending where they were; end_* arguments are ignored for an existing file.
    g.close()
    g = IndexFile(f.file_name, 11, 60, 999_999, 999_999)
    assert g.end_phy_offset == header[3]
    assert g.put_key("T#new", 10_000, 1_700_000_000_000)
    assert g.select_phy_offsets("T#new", 5, 0, LONG_MAX) == [10_000]
    g.close()
    r = ro = IndexFile(f.file_name, 11, 60, read_only=True)
    assert ro.select_phy_offsets("T#new", 5, 0, LONG_MAX) == [10_000]
    with pytest.raises(PermissionError):
        ro.put_key("x", 1, 1)
    ro.flush()
    r.close()


def test_index_count_zero_reads_as_one(tmp_path):
    # RocketMQ's own fresh file has 0 at @36 until its first put or flush; IndexHeader.load reads it as 1.
    path = tmp_path / "20240101000000000"
    path.write_bytes(bytes(268))
    f = IndexFile(str(path), 7, 10)
    assert f.index_count == 1
    assert f.put_key("a", 1, 1000)
    assert f.index_count == 2
    assert read_bytes(path)[88:92] == bytes.fromhex("00000061")
    f.close()


def test_wrong_size_file(tmp_path):
    f = new_file(tmp_path, slots=7, num=10)
    f.close()
    with open(f.file_name, "r+b") as fh:
        fh.truncate(200)
    with pytest.raises(StoreLayoutError) as ei:
        IndexFile(f.file_name, 7, 10)
    msg = str(ei.value)
    assert f.file_name in msg and "200" in msg and "268" in msg
    with pytest.raises(StoreLayoutError):
        IndexFile(f.file_name, 7, 10, read_only=True)
    with pytest.raises(StoreLayoutError):
        IndexFile(f.file_name, 8, 10)
    assert os.path.getsize(f.file_name) == 200               # never resized
    with pytest.raises(FileNotFoundError):
        IndexFile(str(tmp_path / "missing"), 7, 10, read_only=True)


def test_closed_and_destroy(tmp_path):
    f = new_file(tmp_path)
    assert f.put_key("a", 1, 1)
    f.close()
    f.close()
    assert f.closed
    with pytest.raises(StoreClosedError):
        f.put_key("a", 2, 2)
    with pytest.raises(StoreClosedError):
        f.select_phy_offsets("a", 1, 0, LONG_MAX)
    f.flush()                                                # no-op once closed
    assert f.index_count == 2                                # header figures stay readable
    assert f.destroy()
    assert not os.path.exists(f.file_name)
    assert not f.destroy()


def test_destroy_while_selecting(tmp_path):
    # Readers in GIL-free walks and a destroy from another thread: the unmap waits for the last release.
    f = new_file(tmp_path, slots=1, num=20000)
    hashes = np.full(19999, index_key_hash("T#k"), np.int32)
    assert f.put_hashes(hashes, np.arange(19999, dtype=np.int64), np.full(19999, 1000, np.int64)) == 19999
    stop = threading.Event()
    errors = []

    def reader():
        while not stop.is_set():
            try:
                got = f.select_phy_offsets("T#k", 20000, 0, LONG_MAX)
                assert got[0] == 19998 and len(got) == 19999
            except StoreClosedError:
                return
            except Exception as e:  # pragma: no cover
                errors.append(e)
                return

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    f.destroy()
    stop.set()
    for t in threads:
        t.join()
    assert not errors


# -- hostile files -------------------------------------------------------------------------------------------------

def _hostile_bytes(rnd: random.Random, slots: int, num: int) -> bytearray:
    buf = bytearray(rnd.randbytes(ref.index_file_size(slots, num)))
    interesting = [0, 1, -1, num - 1, num, num + 1, INT_MAX, -2**31, 2, 3]
    # Random header, with small and huge indexCounts.
    struct.pack_into(">i", buf, 36, rnd.choice([rnd.randrange(-5, num + 5), INT_MAX, -2**31, num, num - 1]))
    struct.pack_into(">q", buf, 0, rnd.choice([0, 1, -1, LONG_MAX, -2**63, rnd.getrandbits(63)]))
    for s in range(slots):
        if rnd.random() < 0.7:
            struct.pack_into(">i", buf, 40 + 4 * s, rnd.choice(interesting + [rnd.randrange(num)]))
    for i in range(num):
        pos = 40 + 4 * slots + 20 * i
        if rnd.random() < 0.6:
            struct.pack_into(">i", buf, pos + 16, rnd.choice([i, i - 1, i + 1] + interesting))   # self loops etc.
        if rnd.random() < 0.8:
            struct.pack_into(">i", buf, pos + 12, rnd.choice([0, 0, 1, -1, INT_MAX, rnd.randrange(100)]))
        if rnd.random() < 0.6:
            struct.pack_into(">i", buf, pos, rnd.randrange(8))
    return buf


@pytest.mark.parametrize("seed", range(30))
def test_hostile_file(tmp_path, seed):
    rnd = random.Random(seed)
    slots, num = rnd.choice([(1, 8), (3, 16), (7, 10), (5, 64)])
    buf = _hostile_bytes(rnd, slots, num)
    path = tmp_path / "20240101000000000"
    path.write_bytes(bytes(buf))
    f = IndexFile(str(path), slots, num)
    r = ref.IndexFileRef.open(bytearray(buf), slots, num)
    for _ in range(60):
        h = rnd.choice([0, 1, 2, 3, 4, 5, 6, 7, rnd.randrange(INT_MAX)])
        max_num = rnd.choice([1, 3, 64, 10_000])
        begin, end = rnd.choice([(0, LONG_MAX), (-2**63, LONG_MAX), (rnd.getrandbits(40), LONG_MAX), (5, 3)])
        got = f.select_phy_offsets_by_hash(h, max_num, begin, end)
        assert len(got) <= max_num
        assert got == r.select_hash(h, max_num, begin, end)
    # Puts stay inside the file too, and agree with the spec.
    for i in range(20):
        key = f"k{rnd.randrange(50)}"
        ts = rnd.choice([0, 1, rnd.getrandbits(42), LONG_MAX, -2**63])
        assert f.put_key(key, i, ts) == r.put_key(key, i, ts)
    assert read_bytes(path) == bytes(r.buf)
    f.close()


def test_hostile_cycle_terminates(tmp_path):
    # items 1 <-> 2 point at each other and never match: Java would spin; the walk stops after index_count items.
    slots, num = 1, 10
    buf = bytearray(ref.index_file_size(slots, num))
    struct.pack_into(">i", buf, 36, 5)                       # indexCount 5
    struct.pack_into(">i", buf, 40, 2)                       # slot 0 -> item 2
    items = 40 + 4 * slots
    struct.pack_into(">iqii", buf, items + 20 * 1, 123, 11, 0, 2)
    struct.pack_into(">iqii", buf, items + 20 * 2, 123, 22, 0, 1)
    path = tmp_path / "20240101000000000"
    path.write_bytes(bytes(buf))
    f = IndexFile(str(path), slots, num)
    assert f.select_phy_offsets_by_hash(7, 64, 0, LONG_MAX) == []
    assert f.select_phy_offsets_by_hash(123, 64, 0, LONG_MAX) == [22, 11, 22, 11, 22]
    assert ref.IndexFileRef.open(buf, slots, num).select_hash(123, 64, 0, LONG_MAX) == [22, 11, 22, 11, 22]
    f.close()


def test_hostile_self_loop_and_out_of_range(tmp_path):
    slots, num = 3, 10
    buf = bytearray(ref.index_file_size(slots, num))
    items = 40 + 4 * slots
    struct.pack_into(">i", buf, 36, num)                     # a full file: indexCount == index_num
    struct.pack_into(">i", buf, 40, 4)                       # slot 0 -> item 4, which points at itself
    struct.pack_into(">iqii", buf, items + 20 * 4, 3, 44, 0, 4)
    struct.pack_into(">i", buf, 44, 7)                       # slot 1 -> item 7 -> item 10 (== indexCount: past the end)
    struct.pack_into(">iqii", buf, items + 20 * 7, 4, 77, 0, 10)
    struct.pack_into(">i", buf, 48, 10)                      # slot 2 -> item 10: past the file
    path = tmp_path / "20240101000000000"
    path.write_bytes(bytes(buf))
    f = IndexFile(str(path), slots, num)
    r = ref.IndexFileRef.open(buf, slots, num)
    for h in (3, 4, 5):
        assert f.select_phy_offsets_by_hash(h, 64, 0, LONG_MAX) == r.select_hash(h, 64, 0, LONG_MAX)
    assert f.select_phy_offsets_by_hash(3, 64, 0, LONG_MAX) == [44]     # the self loop ends the walk
    assert f.select_phy_offsets_by_hash(4, 64, 0, LONG_MAX) == [77]     # item 10 would be past the end: stop
    assert f.select_phy_offsets_by_hash(5, 64, 0, LONG_MAX) == []
    assert not f.put_key("x", 1, 1)                          # full
    f.close()


# -- differential: Cython vs reference ------------------------------------------------------------------------------

_keys = st.text(max_size=12) | \
    st.sampled_from(["polygenelubricants", "", "a", "h", "o", "T#\U0001F600", "T#k"])
_ts = st.integers(0, 2**45) | st.sampled_from([0, 1, -1, 999, 1000, LONG_MAX, -2**63, 2**62])
_off = st.integers(0, 2**50) | st.sampled_from([0, LONG_MAX, -1])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slots=st.integers(1, 9), num=st.integers(2, 24),
       carry=st.tuples(_off, _ts),
       puts=st.lists(st.tuples(_keys, _off, _ts), max_size=30),
       queries=st.lists(st.tuples(st.integers(1, 40), _ts, _ts), min_size=1, max_size=4),
       batch=st.booleans())
def test_differential_against_reference(slots, num, carry, puts, queries, batch):
    with tempfile.TemporaryDirectory() as d:
        f = IndexFile(os.path.join(d, "20240101000000000"), slots, num, carry[0], carry[1])
        r = ref.IndexFileRef.create(slots, num, carry[0], carry[1])
        if batch:
            hashes = np.array([ref.index_key_hash(k) for k, _, _ in puts], np.int32)
            n = f.put_hashes(hashes, np.array([o for _, o, _ in puts], np.int64),
                             np.array([t for _, _, t in puts], np.int64))
            expected = 0
            for k, o, t in puts:
                if not r.put_key(k, o, t):
                    break
                expected += 1
            assert n == expected
        else:
            for k, o, t in puts:
                assert f.put_key(k, o, t) == r.put_key(k, o, t)
        assert read_bytes(f.file_name) == bytes(r.buf)
        assert (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset, f.hash_slot_count,
                f.index_count) == (r.begin_timestamp, r.end_timestamp, r.begin_phy_offset, r.end_phy_offset,
                                   r.hash_slot_count, r.index_count)
        assert f.is_write_full() == r.is_write_full()
        for key in {k for k, _, _ in puts} | {"missing"}:
            for max_num, begin, end in queries:
                got = f.select_phy_offsets(key, max_num, begin, end)
                assert got == r.select_phy_offsets(key, max_num, begin, end)
                assert f.is_time_matched(begin, end) == r.is_time_matched(begin, end)
            assert f.select_phy_offsets(key, 64, 0, LONG_MAX) == r.select_phy_offsets(key, 64, 0, LONG_MAX)
        f.close()


# -- IndexService ----------------------------------------------------------------------------------------------------

class FakeCheckpoint:
    def __init__(self):
        self.index_msg_timestamp = 0
        self.flushes = 0

    def flush(self):
        self.flushes += 1


def service(tmp_path, slots=4, num=5, **kw):
    return IndexService(str(tmp_path / "index"), slots, num, retry_interval=0.0, **kw)


def test_service_roll_over_and_query(tmp_path):
    cp = FakeCheckpoint()
    s = service(tmp_path, checkpoint=cp)                      # 4 items per file
    base = 1_700_000_000_000
    for i in range(10):
        assert s.build_index("T", i * 100, base + i * 1000, f"UNIQ{i}", f"K{i} shared", 0)
    # 30 keys, 4 per file -> 8 files.
    assert len(s.index_file_list) == 8
    names = [os.path.basename(f.file_name) for f in s.index_file_list]
    assert names == sorted(names) and len(set(names)) == 8 and all(len(n) == 17 and n.isdigit() for n in names)
    # Each new file starts where the full one ended.
    for prev, nxt in zip(s.index_file_list, s.index_file_list[1:]):
        assert prev.is_write_full()
        assert nxt.begin_phy_offset >= prev.end_phy_offset
    assert s.query_offset("T", "shared", 64, 0, LONG_MAX)[0] == [i * 100 for i in range(9, -1, -1)]
    offs, last_ts, last_phy = s.query_offset("T", "K3", 64, 0, LONG_MAX)
    assert offs == [300] and last_ts == base + 9000 and last_phy == 900
    assert s.query_offset("T", "UNIQ7", 64, 0, LONG_MAX)[0] == [700]
    assert s.query_offset("T", "shared", 3, 0, LONG_MAX)[0] == [900, 800, 700]
    assert s.query_offset("T", "shared", 64, base + 4000, base + 6000)[0] == [600, 500, 400]
    assert s.query_offset("Other", "shared", 64, 0, LONG_MAX)[0] == []
    assert s.get_last_index_timestamp() == base + 9000
    s._join_flushers()
    # Full files were flushed in the background and their end time went to the checkpoint.
    assert cp.index_msg_timestamp == s.index_file_list[-2].end_timestamp and cp.flushes >= 1
    # flush() answers indexMsgTimestamp: the newest full file's end time (the last file is not full).
    assert s.flush() == s.index_file_list[-2].end_timestamp == s.index_msg_timestamp
    assert s.index_files == s.index_file_list and s.index_files is not s.index_file_list
    assert s.get_total_size() == 8 * index_file_size(4, 5)
    s.shutdown()


def test_service_max_num_capped(tmp_path):
    s = service(tmp_path, slots=5, num=200)
    for i in range(100):
        s.build_index("T", i, 1000 + i, None, "k", 0)
    offs, _, _ = s.query_offset("T", "k", 1000, 0, LONG_MAX)
    assert offs == list(range(99, 35, -1)) and len(offs) == 64
    s.shutdown()


def test_service_transaction_types_and_already_indexed(tmp_path):
    s = service(tmp_path, slots=5, num=50)
    assert s.build_index("T", 100, 1000, None, "rolled", 0xC)      # ROLLBACK: not indexed
    assert s.build_index("T", 200, 1000, None, "prepared", 0x4)    # PREPARED: indexed, as RocketMQ does
    assert s.build_index("T", 300, 1000, None, "committed", 0x8)
    assert s.build_index("T", 400, 1000, None, "plain", 0x0 | 0x10)
    assert s.query_offset("T", "rolled", 64, 0, LONG_MAX)[0] == []
    assert s.query_offset("T", "prepared", 64, 0, LONG_MAX)[0] == [200]
    assert s.query_offset("T", "committed", 64, 0, LONG_MAX)[0] == [300]
    assert s.query_offset("T", "plain", 64, 0, LONG_MAX)[0] == [400]
    # Below the last end offset: already indexed, skipped (replay after recovery).
    assert s.build_index("T", 399, 1000, None, "late", 0)
    assert s.query_offset("T", "late", 64, 0, LONG_MAX)[0] == []
    # Empty keys and double spaces are skipped, a list of keys works too.
    before = s.index_file_list[-1].index_count
    assert s.build_index("T", 500, 1000, None, " a  b ", 0)
    assert s.build_index("T", 600, 1000, "", ["c", ""], 0)
    assert s.index_file_list[-1].index_count == before + 4          # a, b, T# (empty uniq key is not None), c
    assert s.query_offset("T", "b", 64, 0, LONG_MAX)[0] == [500]
    assert s.query_offset("T", "c", 64, 0, LONG_MAX)[0] == [600]
    s.shutdown()


def test_service_build_index_hashes_matches_build_index(tmp_path):
    a = IndexService(str(tmp_path / "a"), 3, 6, retry_interval=0.0)
    b = IndexService(str(tmp_path / "b"), 3, 6, retry_interval=0.0)
    hashes, offs, tss = [], [], []
    for i in range(12):
        keys = [f"k{i % 4}", f"x{i}"]
        a.build_index("T", 1000 + i * 10, 5000 + i * 700, None, keys, 0)
        for k in keys:
            hashes.append(index_key_hash(build_key("T", k)))
            offs.append(1000 + i * 10)
            tss.append(5000 + i * 700)
    # Replayed messages below the end offset are skipped in the batch as well (RocketMQ's check is "<": the last
    # message indexed would be indexed again, as in RocketMQ).
    assert b.build_index_hashes(np.array(hashes[:8], np.int32), np.array(offs[:8]), np.array(tss[:8])) == 8
    sel = list(range(4, 6)) + list(range(8, 24))
    assert b.build_index_hashes(np.array(hashes, np.int32)[sel], np.array(offs)[sel], np.array(tss)[sel]) == 18
    assert b.build_index_hashes(np.array([], np.int32), np.array([], np.int64), np.array([], np.int64)) == 0
    assert len(a.index_file_list) == len(b.index_file_list) == 5
    for fa, fb in zip(a.index_file_list, b.index_file_list):
        assert read_bytes(fa.file_name) == read_bytes(fb.file_name)
    assert a.query_offset("T", "k1", 64, 0, LONG_MAX) == b.query_offset("T", "k1", 64, 0, LONG_MAX)
    a.shutdown()
    b.shutdown()


def test_service_delete_expired_file(tmp_path):
    s = service(tmp_path)
    for i in range(10):
        s.build_index("T", i * 100, 1000 + i, None, "a b", 0)
    files = list(s.index_file_list)
    assert len(files) == 5                      # 2 keys per message, 4 per file
    ends = [f.end_phy_offset for f in files]
    assert ends == [100, 300, 500, 700, 900]
    s.delete_expired_file(100)                  # nothing ends below 100
    assert len(s.index_file_list) == 5
    s.delete_expired_file(301)
    assert s.index_file_list == files[2:]
    assert not os.path.exists(files[0].file_name) and not os.path.exists(files[1].file_name)
    s.delete_expired_file(10_000)               # never the last file
    assert s.index_file_list == files[4:]
    assert s.query_offset("T", "a", 64, 0, LONG_MAX)[0] == [900, 800]
    s.shutdown()


def test_service_reload(tmp_path):
    s = service(tmp_path)
    for i in range(9):
        s.build_index("T", i * 100, 10_000 + i * 1000, f"U{i}", "k", 0)
    expected = s.query_offset("T", "k", 64, 0, LONG_MAX)
    names = [f.file_name for f in s.index_file_list]
    s.shutdown()
    t = service(tmp_path)
    assert t.load(True)
    assert [f.file_name for f in t.index_file_list] == names
    assert t.query_offset("T", "k", 64, 0, LONG_MAX) == expected
    # Appending continues in the last, non-full file.
    t.build_index("T", 900, 20_000, None, "k", 0)
    assert t.query_offset("T", "k", 64, 0, LONG_MAX)[0][0] == 900
    last_ts = t.index_file_list[-2].end_timestamp
    t.shutdown()
    # After a crash, files past the checkpoint's index time are dropped (recovery rebuilds them).
    u = service(tmp_path)
    assert u.load(False, last_ts)
    assert [f.file_name for f in u.index_file_list] == names[:-1]
    assert not os.path.exists(names[-1])
    u.shutdown()


def test_service_load_rejects_foreign_files(tmp_path):
    d = tmp_path / "index"
    d.mkdir()
    IndexFile(str(d / "20240101000000000"), 4, 5).close()
    (d / "notes.txt").write_text("x")
    with pytest.raises(StoreLayoutError):
        service(tmp_path).load(True)
    os.unlink(d / "notes.txt")
    with open(d / "20240101000000001", "wb") as fh:
        fh.write(b"short")
    with pytest.raises(StoreLayoutError):
        service(tmp_path).load(True)
    assert service(tmp_path / "nothing").load(True)


def test_service_names_unique_within_one_ms(tmp_path):
    s = service(tmp_path, slots=1, num=2)                    # one key per file
    for i in range(20):
        s.build_index("T", i, 1000 + i, None, "k", 0)
    names = [os.path.basename(f.file_name) for f in s.index_file_list]
    assert len(names) == 20 and names == sorted(set(names))
    assert s.query_offset("T", "k", 64, 0, LONG_MAX)[0] == list(range(19, -1, -1))
    s.destroy()
    assert os.listdir(tmp_path / "index") == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slots=st.integers(1, 7), num=st.integers(2, 12),
       puts=st.lists(st.tuples(st.lists(st.sampled_from(["a", "b", "Aa", "BB", "k"]), min_size=1, max_size=3),
                               st.integers(0, 3)), min_size=1, max_size=60),
       queries=st.lists(st.tuples(st.sampled_from(["a", "b", "Aa", "BB", "k", "none"]), st.integers(-1, 40),
                                  st.integers(-2, 70), st.integers(-2, 70)), min_size=1, max_size=10))
def test_service_query_across_files_against_reference(tmp_path_factory, slots, num, puts, queries):
    # Many small files, collisions ("T#Aa" and "T#BB" share a Java hash), store times seconds apart so windows cut
    # files: query_offset (the files' walks in lockstep) answers as reference.query_offset (file after file).
    s = IndexService(str(tmp_path_factory.mktemp("ix") / "index"), slots, num, retry_interval=0.0)
    base = 1_700_000_000_000
    ts = base
    for i, (keys, gap) in enumerate(puts):
        ts += gap * 1000
        assert s.build_index("T", 100 * (i + 1), ts, None, keys, 0)
    files = s.index_files
    for key, max_num, b, e in queries:
        begin = 0 if b == -2 else base + b * 1000 - 1
        end = LONG_MAX if e == -2 else base + e * 1000
        expected = ref.query_offset(files, build_key("T", key), min(max_num, 64), begin, end)
        assert s.query_offset("T", key, max_num, begin, end)[0] == expected
        # Uncapped (no maxMsgsNumBatch): each file's room is its item count, not max_num.
        assert query_files(files, "T", key, 1 << 30, begin, end) == ref.query_offset(files, build_key("T", key),
                                                                                 1 << 30, begin, end)
    s.shutdown()
