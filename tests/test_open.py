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
