"""What recovery cuts is kept, not destroyed (issue 26): beyond a torn tail, the bytes a recovery removes from the
commitlog are copied into ``rmqcore-cut/`` first, with a report; ``repair --dry-run`` says what an open would cut
without cutting."""
import glob
import json
import os

import pytest

from rmqcore import Message, MessageStore, StoreConfig
from rmqcore.cli import main
from rmqcore.recovery import plan_recovery


def cfg(**kw):
    return StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 100,
                       max_hash_slot_num=101, max_index_num=404, warm_mapped_file_enable=False, **kw)


def commitlog(path):
    return os.path.join(path, "commitlog", "0" * 20)


def write(path, n=20):
    with MessageStore.open(path, cfg()) as s:
        return [s.put(Message("T", b"m%03d" % i + b"x" * 96, 0, keys=[f"k{i}"])) for i in range(n)]


def flip(path, offset):
    with open(commitlog(path), "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def cut_folders(path):
    return sorted(glob.glob(os.path.join(path, "rmqcore-cut", "*")))


@pytest.mark.parametrize("clean", [False, True], ids=["crashed", "closed-cleanly"])
def test_damage_with_records_after_it_is_cut_but_kept_and_the_cut_can_be_undone(tmp_path, clean):
    path = str(tmp_path / "s")
    rs = write(path)
    end = rs[-1].commitlog_offset + rs[-1].wrote_bytes
    damaged = rs[5].commitlog_offset + 60               # a body byte of the sixth record: its CRCs fail
    flip(path, damaged)
    with open(commitlog(path), "rb") as f:
        original = f.read()
    if not clean:
        open(os.path.join(path, "abort"), "w").close()
    # The dry run predicts the cut and changes no byte.
    plan = plan_recovery(path, cfg())
    assert plan["data_ends_at"] == rs[5].commitlog_offset and plan["would_cut_bytes"] == end - rs[5].commitlog_offset
    assert plan["would_keep_aside"] and ("bodyCRC" in plan["stop"] or "__CRC32#" in plan["stop"])
    with open(commitlog(path), "rb") as f:
        assert f.read() == original
    assert os.path.exists(os.path.join(path, "abort")) is not clean and cut_folders(path) == []
    # A clean store is recovered from its last files too: its bad tail is cut and reported, never silently.
    with MessageStore.open(path, cfg()) as s:
        rec = s.runtime_info()["recovery"]
        assert rec["truncated_bytes"] == end - rs[5].commitlog_offset
        assert s.commit_log.max_offset == rs[5].commitlog_offset
        kept = rec["cut_kept_in"]
    assert cut_folders(path) == [kept]
    report = json.load(open(os.path.join(kept, "report.json")))
    assert report["cut_from_commitlog_offset"] == rs[5].commitlog_offset and report["bytes"] == plan["would_cut_bytes"]
    (part,) = report["parts"]
    data = open(os.path.join(kept, part["part"]), "rb").read()
    assert data == original[part["file_offset"]:part["file_offset"] + part["length"]]
    # Undo: put the bytes back (the damaged byte repaired), and every message is there again.
    with open(commitlog(path), "r+b") as f:
        f.seek(part["file_offset"])
        f.write(data)
    flip(path, damaged)
    open(os.path.join(path, "abort"), "w").close()
    with MessageStore.open(path, cfg()) as s:
        assert s.commit_log.max_offset == end
        assert [bytes(s.look_message(r.commitlog_offset).body)[:4] for r in rs] == [b"m%03d" % i for i in range(20)]
        assert s.verify()["ok"]


def test_a_torn_tail_is_cut_without_a_copy(tmp_path):
    # The last record half written (zeros after its first half, as a kill -9 mid-append leaves it): nothing but that
    # record is lost, so nothing is kept aside.
    path = str(tmp_path / "s")
    rs = write(path)
    last = rs[-1]
    with open(commitlog(path), "r+b") as f:
        f.seek(last.commitlog_offset + last.wrote_bytes // 2)
        f.write(b"\0" * (last.wrote_bytes - last.wrote_bytes // 2))
    open(os.path.join(path, "abort"), "w").close()
    plan = plan_recovery(path, cfg())
    assert plan["would_cut_bytes"] == last.wrote_bytes // 2 and not plan["would_keep_aside"]
    with MessageStore.open(path, cfg()) as s:
        assert s.commit_log.max_offset == last.commitlog_offset
        assert s.runtime_info()["recovery"]["cut_kept_in"] is None
    assert cut_folders(path) == []


def test_repair_dry_run_reports_and_changes_nothing(tmp_path, capsys):
    path = str(tmp_path / "s")
    rs = write(path)
    flip(path, rs[3].commitlog_offset + 60)
    open(os.path.join(path, "abort"), "w").close()
    before = {p: open(p, "rb").read() for p in glob.glob(os.path.join(path, "**"), recursive=True) if os.path.isfile(p)}
    assert main(["repair", path, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run, nothing changed" in out and "copied aside" in out
    assert main(["repair", path, "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["data_ends_at"] == rs[3].commitlog_offset and plan["crashed"]
    after = {p: open(p, "rb").read() for p in glob.glob(os.path.join(path, "**"), recursive=True) if os.path.isfile(p)}
    assert after == before
    assert main(["repair", path]) == 0
    assert "kept in" in capsys.readouterr().out and len(cut_folders(path)) == 1
