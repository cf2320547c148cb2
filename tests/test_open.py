"""MessageStore.open: which directories it creates, which it refuses, and the file geometry it adopts."""
import os

import pytest

from rmqcore import Message, MessageStore, StoreConfig, StoreLayoutError


def small(**kw):
    base = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 50,
                max_message_size=16 * 1024, max_hash_slot_num=101, max_index_num=404, warm_mapped_file_enable=False)
    base.update(kw)
    return StoreConfig(**base)


def test_creates_a_missing_directory_whose_parent_exists(tmp_path):
    with MessageStore.open(tmp_path / "new", small()) as s:
        assert s.put(Message("t", b"x", 0)).ok
    assert os.path.isdir(tmp_path / "new" / "commitlog")


def test_creates_in_an_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    with MessageStore.open(str(tmp_path / "empty"), small()):
        pass
    assert os.path.exists(tmp_path / "empty" / "checkpoint")


def test_refuses_a_missing_parent_and_creates_nothing(tmp_path):
    target = tmp_path / "no" / "such" / "store"
    with pytest.raises(FileNotFoundError, match="parent directory .* does not exist"):
        MessageStore.open(str(target), small())
    assert not os.path.exists(tmp_path / "no")


def test_refuses_a_non_empty_directory_that_is_not_a_store(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(StoreLayoutError, match="not a message store .*notes.txt"):
        MessageStore.open(str(tmp_path), small())
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]       # no checkpoint, lock or abort dropped in


def test_refuses_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(StoreLayoutError, match="not a directory"):
        MessageStore.open(str(f), small())


def test_create_false_opens_only_existing_stores(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such message store"):
        MessageStore.open(str(tmp_path / "s"), small(), create=False)
    (tmp_path / "e").mkdir()
    with pytest.raises(StoreLayoutError, match="empty directory"):
        MessageStore.open(str(tmp_path / "e"), small(), create=False)
    with MessageStore.open(str(tmp_path / "s"), small()):
        pass
    with MessageStore.open(str(tmp_path / "s"), small(), create=False) as s:
        assert s.runtime_info()["geometry_adopted"] == {}


def test_reopens_with_the_geometry_the_store_was_written_with(tmp_path):
    path = str(tmp_path / "s")
    with MessageStore.open(path, small()) as s:
        rs = [s.put(Message("orders", f"m{i}".encode() * 300, i % 2, keys=[f"k{i}"])) for i in range(200)]
    assert len(os.listdir(os.path.join(path, "commitlog"))) > 2       # several 64 KiB files
    with MessageStore.open(path) as s:                                # StoreConfig(): 1 GiB files by default
        info = s.runtime_info()
        assert info["geometry_adopted"] == {
            "mapped_file_size_commit_log": (1024 ** 3, 64 * 1024),
            "mapped_file_size_consume_queue": (300000 * 20, 1000),
            "max_hash_slot_num": (5_000_000, 101),
            "max_index_num": (20_000_000, 404),
        }
        assert s.config.mapped_file_size_commit_log == 64 * 1024
        assert s.max_offset("orders", 0) == 100
        assert s.look_message(rs[150].commitlog_offset).body.tobytes() == b"m150" * 300
        assert [m.commitlog_offset for m in s.query_message("orders", "k77")] == [rs[77].commitlog_offset]
        r = s.put(Message("orders", b"after", 0))                     # new files get the store's size too
        assert r.ok and r.queue_offset == 100
    sizes = {os.path.getsize(os.path.join(path, "commitlog", n)) for n in os.listdir(os.path.join(path, "commitlog"))}
    assert sizes == {64 * 1024}


def test_mixed_file_sizes_are_refused_with_the_sizes_named(tmp_path):
    path = str(tmp_path / "s")
    with MessageStore.open(path, small()) as s:
        for i in range(200):
            s.put(Message("orders", b"x" * 600, 0))
    names = sorted(os.listdir(os.path.join(path, "commitlog")))
    with open(os.path.join(path, "commitlog", names[0]), "ab") as f:
        f.write(b"\0" * 4096)
    with pytest.raises(StoreLayoutError, match="different sizes"):
        MessageStore.open(path, small())


def test_new_files_are_made_under_a_temporary_name_and_leftovers_are_removed_at_open(tmp_path):
    # A kill between creating a file and sizing it must never leave a short file where RocketMQ's load lists
    # files (it refuses the whole store: "length not matched"): files are made in rmqcore-tmp/ and renamed.
    path = tmp_path / "s"
    cfg = StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 50,
                      max_hash_slot_num=11, max_index_num=40, warm_mapped_file_enable=False)
    with MessageStore.open(str(path), cfg) as s:
        for i in range(400):
            s.put(Message("T", b"x" * 500, i % 2, keys=[f"k{i}"]))
        s.wait_dispatched()
        assert os.listdir(path / "rmqcore-tmp") == []
    assert len(os.listdir(path / "commitlog")) > 2 and len(os.listdir(path / "index")) > 2
    assert {os.path.getsize(path / "commitlog" / n) for n in os.listdir(path / "commitlog")} == {64 * 1024}
    assert {os.path.getsize(path / "consumequeue" / "T" / "0" / n)
            for n in os.listdir(path / "consumequeue" / "T" / "0")} == {20 * 50}
    (path / "rmqcore-tmp" / "00000000000000655360.1234.0.tmp").write_bytes(b"\0" * 100)   # a killed creation
    with MessageStore.open(str(path), cfg) as s:
        assert os.listdir(path / "rmqcore-tmp") == []
        assert s.verify()["ok"]


# -- a nearly full disk (issue 36, item 8) -------------------------------------------------------------------------

DISK_CHILD = r"""
import json, os, sys
from rmqcore import Message, MessageStore, StoreConfig
mode, path, conf = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if mode == "fill":
    s = MessageStore.open(path, StoreConfig(**conf))
    for i in range(int(sys.argv[4])):
        assert s.put(Message("full_t", b"b" * 1000, queue_id=i % 4, keys=[f"k{i}"])).ok
    s.wait_dispatched()
    if sys.argv[5] == "kill":
        os._exit(0)                     # no close: the abort file stays, as after kill -9
    s.close()
else:
    try:
        s = MessageStore.open(path, StoreConfig(**conf))
    except Exception as e:
        print(json.dumps({"opened": False, "type": type(e).__name__, "error": str(e)}))
        sys.exit(0)
    n = sum(s.max_offset("full_t", q) for q in range(4))
    s.close()
    print(json.dumps({"opened": True, "messages": n}))
"""


@pytest.fixture
def small_fs(tmp_path):
    """A 40 MiB tmpfs of its own (needs root and mount; skipped otherwise)."""
    import shutil
    import subprocess
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    fs = tmp_path / "fs"
    fs.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(fs)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"mount is not permitted here: {r.stderr.strip()}")
    try:
        yield fs
    finally:
        subprocess.run(["umount", "-l", str(fs)], capture_output=True)


def _disk_child(*args):
    import json
    import subprocess
    import sys
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__import__("rmqcore").__file__)))
    r = subprocess.run([sys.executable, "-c", DISK_CHILD, *map(str, args)], capture_output=True, text=True,
                       cwd=pkg, timeout=120)
    # a SIGBUS (reading a hole of a mapped file on a full tmpfs) is -7 here
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    return json.loads(r.stdout.splitlines()[-1]) if args[0] == "open" else None


def _leave_free(fs, nbytes: int) -> int:
    """Fill the filesystem with a file of its own until ``nbytes`` are free; returns the bytes free then."""
    import shutil
    filler = fs / "filler"
    if filler.exists():
        filler.unlink()
    free = shutil.disk_usage(fs).free
    with open(filler, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, max(4096, free - nbytes))
    return shutil.disk_usage(fs).free


DISK_CONF = {"mapped_file_size_commit_log": 64 << 20, "mapped_file_runway_commit_log": 4 << 20,
             "max_hash_slot_num": 2_500_000, "max_index_num": 200_000, "index_file_runway": 1 << 20}


@pytest.mark.parametrize("how", ["close", "kill"])
def test_open_on_a_nearly_full_disk_opens_without_crashing(small_fs, how):
    """A store on a tmpfs with half a MiB free opens (or refuses in one line) and never dies of SIGBUS: before, the
    open read the sparse tails of the consume queues (and, after a kill, of the commitlog) through their mappings,
    which on tmpfs allocates each page read, so a full one killed the process."""
    import json
    import shutil
    store = small_fs / "store"
    conf = json.dumps(DISK_CONF)
    _disk_child("fill", store, conf, 2000, how)
    before = _leave_free(small_fs, 512 << 10)
    out = _disk_child("open", store, conf)
    if out["opened"]:
        assert out["messages"] == 2000
    else:
        assert out["type"] == "StoreSpaceError" and "\n" not in out["error"], out
    assert shutil.disk_usage(small_fs).free >= before
    (small_fs / "filler").unlink()
    assert _disk_child("open", store, conf) == {"opened": True, "messages": 2000}


def test_open_that_cannot_allocate_the_index_says_what_it_needs_and_takes_nothing(small_fs):
    """An index file left sparse (RocketMQ's are; here a sparse copy of ours) must have its hash slots allocated to
    be written: with less free than that, the open fails with one line naming the bytes needed and those free,
    and leaves the free space as it found it (before: "[Errno 28] allocate: No space left on device" naming the
    index file and nothing else); with the space, it opens."""
    import json
    import shutil
    import subprocess
    store = small_fs / "store"
    conf = json.dumps(DISK_CONF)
    _disk_child("fill", store, conf, 2000, "close")
    (index,) = (store / "index").iterdir()
    sparse = small_fs / "index.sparse"
    subprocess.run(["cp", "--sparse=always", str(index), str(sparse)], check=True)
    os.replace(sparse, index)
    before = _leave_free(small_fs, 4 << 20)
    out = _disk_child("open", store, conf)
    assert out["opened"] is False and out["type"] == "StoreSpaceError", out
    assert "\n" not in out["error"] and "needs" in out["error"] and "are free" in out["error"]
    needed = int(out["error"].split(" needs ")[1].split()[0])
    assert 4 << 20 < needed <= 2_500_000 * 4 + 40 + 200_000 * 20
    assert shutil.disk_usage(small_fs).free == before
    (small_fs / "filler").unlink()
    assert _disk_child("open", store, conf) == {"opened": True, "messages": 2000}
