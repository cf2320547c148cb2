"""The admin command line: every command on small stores, its output (human and --json), its exit status and its
one-line errors. Most tests call ``rmqcore.cli.main(argv)`` in-process; a few run ``python -m rmqcore`` in a
subprocess, as a user does."""
import base64
import json
import os
import re
import subprocess
import sys

import pytest

from rmqcore import Message, MessageStore, StoreConfig
from rmqcore.cli import main

import rmqcore

# The directory holding the rmqcore that is imported here (a source tree or site-packages): the subprocesses
# import the same one.
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))
TOPICS = ("orders", "payments")
N = 120          # messages per store: over several 64 KiB commitlog files and 50-unit consume-queue files


def small_config(**kw):
    # index geometry in RocketMQ's proportion (items = 4 x slots), as every RocketMQ store has it
    base = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 50,
                max_message_size=16 * 1024, max_hash_slot_num=101, max_index_num=404, warm_mapped_file_enable=False)
    base.update(kw)
    return StoreConfig(**base)


def make_store(path, n=N):
    results = []
    with MessageStore.open(str(path), small_config()) as store:
        for i in range(n):
            m = Message(TOPICS[i % 2], f"body-{i}".encode() * 40, queue_id=i % 3, tags=f"T{i % 4}",
                        keys=[f"k-{i}"])
            results.append(store.put(m))
        assert store.wait_dispatched(10)
    assert all(r.ok for r in results)
    return results


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "store"
    results = make_store(path)
    return str(path), results


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def flip_body_byte(path, result):
    """Flip one body byte of the record ``result`` points at (its body CRC no longer matches)."""
    size = 64 * 1024
    name = os.path.join(path, "commitlog", f"{result.commitlog_offset // size * size:020d}")
    pos = result.commitlog_offset % size + 88 + 5     # body starts at 88 (IPv4 hosts, v1), after bodyLength
    with open(name, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0xFF]))


# -- inspect ---------------------------------------------------------------------------------------------------------

def test_inspect_reads_geometry_from_the_files_and_lists_every_queue(store, capsys):
    path, results = store
    code, out, err = run(capsys, "inspect", path, "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["geometry"]["mapped_file_size_commit_log"] == 64 * 1024        # not the 1 GiB default
    assert info["geometry"]["mapped_file_size_consume_queue"] == 1000
    assert info["geometry"]["max_hash_slot_num"] == 101
    assert info["state"] == "closed cleanly"
    assert info["commitlog"]["max_offset"] == results[-1].commitlog_offset + results[-1].wrote_bytes
    assert info["dispatch"]["behind_bytes"] == 0
    from rmqcore.cli import _fmt_ts
    assert info["commitlog"]["first_store_time"] == _fmt_ts(results[0].store_timestamp)
    assert info["commitlog"]["last_store_time"] == _fmt_ts(results[-1].store_timestamp)
    counts = {(q["topic"], q["queue_id"]): q["messages"] for q in info["queues"]}
    expected = {}
    for i in range(N):
        expected[(TOPICS[i % 2], i % 3)] = expected.get((TOPICS[i % 2], i % 3), 0) + 1
    assert counts == expected
    code, out, _ = run(capsys, "inspect", path)
    assert code == 0 and "closed cleanly" in out and "orders" in out and "64.0 KiB" in out


def test_inspect_of_an_open_store_says_so_and_changes_nothing(tmp_path, capsys):
    path = str(tmp_path / "s")
    with MessageStore.open(path, small_config()) as s:
        s.put(Message("orders", b"x", 0))
        assert s.wait_dispatched(10)
        before = sorted(os.listdir(path))
        code, out, _ = run(capsys, "inspect", path, "--json")
        assert code == 0
        assert json.loads(out)["state"].startswith("open")
        assert sorted(os.listdir(path)) == before
        s.put(Message("orders", b"y", 0))       # the store is still usable: the probe released the lock


# -- verify ----------------------------------------------------------------------------------------------------------

def test_verify_exit_status_follows_what_it_finds(store, capsys):
    path, results = store
    code, out, _ = run(capsys, "verify", path)
    assert code == 0 and out.startswith("OK")
    flip_body_byte(path, results[57])
    code, out, _ = run(capsys, "verify", path, "--json")
    assert code == 1
    rep = json.loads(out)
    assert rep["ok"] is False
    assert [e["offset"] for e in rep["commitlog_errors"]] == [results[57].commitlog_offset]
    assert rep["commitlog_errors"][0]["field"] == "bodyCRC"
    code, out, _ = run(capsys, "verify", path, "--no-crc", "--commitlog-only")
    assert code == 0


# -- get / query -----------------------------------------------------------------------------------------------------

def test_get_by_queue_offset_commitlog_offset_and_msg_id(store, capsys):
    path, results = store
    # queue ("payments", 1) holds messages i = 1, 7, 13, ... (odd i with i % 3 == 1)
    code, out, _ = run(capsys, "get", path, "--topic", "payments", "--queue", 1, "--offset", 2, "--count", 2,
                       "--json", "--body", "text")
    assert code == 0
    got = json.loads(out)
    assert [m["keys"] for m in got] == [["k-13"], ["k-19"]]
    assert got[0]["body"] == "body-13" * 40
    r = results[13]
    code, out, _ = run(capsys, "get", path, "--commitlog-offset", r.commitlog_offset, "--json")
    assert code == 0
    m = json.loads(out)[0]
    assert base64.b64decode(m["body"]) == b"body-13" * 40 and m["queue_offset"] == r.queue_offset
    code, out, _ = run(capsys, "get", path, "--msg-id", r.msg_id, "--json")
    assert code == 0 and json.loads(out)[0]["commitlog_offset"] == r.commitlog_offset
    code, out, _ = run(capsys, "get", path, "--msg-id", m["uniq_key"], "--json")
    assert code == 0 and json.loads(out)[0]["commitlog_offset"] == r.commitlog_offset
    code, out, err = run(capsys, "get", path, "--msg-id", "00" * 16)
    assert code == 1 and out == "" and "no message found" in err


@pytest.mark.parametrize("argv, words", [
    (["--commitlog-offset", "-5"], "offset must be >= 0"),
    (["--commitlog-offset", "3"], "inside the record at 0"),
    (["--commitlog-offset", "99999999"], "outside the commitlog"),
    (["--topic", "orders", "--queue", "9", "--offset", "0"], "no consume queue orders/9"),
    (["--topic", "orders", "--queue", "0", "--offset", "500"], "outside queue orders/0's [0, 20)"),
    (["--count", "0", "--commitlog-offset", "0"], "--count must be > 0"),
])
def test_get_refuses_bad_arguments_in_one_line(store, capsys, argv, words):
    path, _ = store
    code, out, err = run(capsys, "get", path, *argv)
    assert code == 2 and out == ""
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_query_by_key_and_by_time(store, capsys):
    path, results = store
    code, out, _ = run(capsys, "query", path, "--topic", "orders", "--key", "k-42", "--json")
    assert code == 0 and [m["commitlog_offset"] for m in json.loads(out)] == [results[42].commitlog_offset]
    code, out, _ = run(capsys, "query", path, "--topic", "payments", "--key", "k-42")   # k-42 is an orders key
    assert code == 1
    ts = [r.store_timestamp for r in results]
    begin, end = ts[30], ts[60]
    code, out, _ = run(capsys, "query", path, "--topic", "orders", "--begin", begin, "--end", end, "--max", 1000,
                       "--json")
    assert code == 0
    got = sorted(m["commitlog_offset"] for m in json.loads(out))
    want = sorted(r.commitlog_offset for i, r in enumerate(results) if i % 2 == 0 and begin <= ts[i] <= end)
    assert got == want
    code, _, err = run(capsys, "query", path, "--topic", "nope", "--key", "k-1")
    assert code == 2 and "no topic 'nope'" in err


# -- dump ------------------------------------------------------------------------------------------------------------

def test_dump_reads_geometry_from_the_files(store, capsys):
    path, results = store
    code, out, _ = run(capsys, "dump", path, "--count", N, "--json")      # no --file-size: 64 KiB from the files
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["commitlog_offset"] for r in rows] == [r.commitlog_offset for r in results]
    code, out, _ = run(capsys, "dump", path, "--offset", results[50].commitlog_offset, "--count", 3)
    assert code == 0 and len(out.splitlines()) == 3 and "k-50" in out.splitlines()[0]


def test_dump_reports_a_bad_record_and_goes_on(store, capsys):
    path, results = store
    flip_body_byte(path, results[40])
    code, out, err = run(capsys, "dump", path, "--count", N, "--json")
    assert code == 1 and "1 bad record(s) skipped" in err
    rows = [json.loads(line) for line in out.splitlines()]
    bad = [r["bad_record"] for r in rows if "bad_record" in r]
    assert [b["offset"] for b in bad] == [results[40].commitlog_offset] and bad[0]["field"] == "bodyCRC"
    good = [r["commitlog_offset"] for r in rows if "bad_record" not in r]
    assert good == [r.commitlog_offset for i, r in enumerate(results) if i != 40]
    # without CRC checks the record is whole structurally and is shown
    code, out, _ = run(capsys, "dump", path, "--count", N, "--json", "--no-crc")
    assert code == 0 and len(out.splitlines()) == N


def test_dump_skips_a_smashed_header_to_the_next_record(store, capsys):
    path, results = store
    r = results[70]
    size = 64 * 1024
    name = os.path.join(path, "commitlog", f"{r.commitlog_offset // size * size:020d}")
    with open(name, "r+b") as f:                   # magic code and CRC of record 70 overwritten
        f.seek(r.commitlog_offset % size + 4)
        f.write(b"\x11" * 8)
    code, out, _ = run(capsys, "dump", path, "--count", N, "--json")
    assert code == 1
    rows = [json.loads(line) for line in out.splitlines()]
    assert [x["bad_record"]["field"] for x in rows if "bad_record" in x] == ["magicCode"]
    good = [x["commitlog_offset"] for x in rows if "bad_record" not in x]
    assert good == [x.commitlog_offset for i, x in enumerate(results) if i != 70]


@pytest.mark.parametrize("offset, words", [("-5", "offset must be >= 0"), ("7", "inside the record at 0"),
                                           ("10000000", "outside the commitlog")])
def test_dump_bad_offsets_get_a_clear_error(store, capsys, offset, words):
    path, _ = store
    code, out, err = run(capsys, "dump", path, "--offset", offset)
    assert code == 2 and out == "" and words in err and "Traceback" not in err


# -- repair / stats / export -----------------------------------------------------------------------------------------

def test_repair_recovers_a_crashed_store_and_reports_the_cut(store, capsys):
    path, results = store
    last = results[-1]
    end = last.commitlog_offset + last.wrote_bytes
    size = 64 * 1024
    name = os.path.join(path, "commitlog", f"{end // size * size:020d}")
    with open(name, "r+b") as f:          # a torn record after the data end, as a crash mid-append leaves
        f.seek(end % size)
        f.write((300).to_bytes(4, "big") + b"\xda\xa3\x20\xa7" + b"\x07" * 20)
    open(os.path.join(path, "abort"), "w").close()
    code, out, err = run(capsys, "repair", path, "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["crashed"] is True and rep["truncated_bytes"] == 28 and rep["commitlog_max_offset"] == end
    assert not os.path.exists(os.path.join(path, "abort"))
    assert run(capsys, "verify", path)[0] == 0


def test_repair_refuses_an_open_store(tmp_path, capsys):
    path = str(tmp_path / "s")
    with MessageStore.open(path, small_config()):
        code, _, err = run(capsys, "repair", path)
    assert code == 2 and "already open" in err


def test_stats_counts_every_queue(store, capsys):
    path, results = store
    code, out, _ = run(capsys, "stats", path, "--json")
    assert code == 0
    rows = {(r["topic"], r["queue_id"]): r for r in json.loads(out)}
    assert sum(r["messages"] for r in rows.values()) == N
    assert sum(r["bytes"] for r in rows.values()) == sum(r.wrote_bytes for r in results)
    assert rows[("orders", 0)]["max_queue_offset"] == rows[("orders", 0)]["messages"] - 1


def test_export_json_lines_round_trip(store, tmp_path, capsys):
    path, results = store
    out_file = tmp_path / "out.jsonl"
    code, _, err = run(capsys, "export", path, out_file, "--topic", "payments")
    assert code == 0 and "exported 60 messages" in err
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [r["commitlog_offset"] for r in rows] == [r.commitlog_offset for i, r in enumerate(results) if i % 2]
    assert base64.b64decode(rows[0]["body"]) == b"body-1" * 40 and rows[0]["keys"] == ["k-1"]
    code, _, err = run(capsys, "export", path, out_file)
    assert code == 2 and "exists" in err


def test_export_of_nothing_exits_1_and_its_help_names_only_its_options(store, tmp_path, capsys, monkeypatch):
    path, _ = store
    monkeypatch.setenv("COLUMNS", "1000")          # no option name broken across lines
    code, _, err = run(capsys, "export", path, tmp_path / "none.jsonl", "--topic", "NoSuch")
    assert code == 1 and "exported 0 messages" in err and "no message matched" in err
    assert (tmp_path / "none.jsonl").read_text() == ""
    from rmqcore.cli import build_parser
    subs = [a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction"][0]
    def options(p):      # a command's own options and, for topic/group/dlq, those of its subcommands
        own = {o for a in p._actions for o in a.option_strings}
        for a in p._actions:
            if a.__class__.__name__ == "_SubParsersAction":
                for sub in a.choices.values():
                    own |= options(sub)
        return own
    for name, p in subs.choices.items():
        own = options(p)
        mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", p.format_help()))
        assert mentioned <= own, f"rmqcore {name} --help mentions {sorted(mentioned - own)}"


def test_get_refuses_two_ways_of_selecting(store, capsys):
    path, results = store
    for extra in (["--topic", "orders", "--offset", 0], ["--msg-id", results[0].msg_id]):
        code, out, err = run(capsys, "get", path, "--commitlog-offset", results[1].commitlog_offset, *extra)
        assert code == 2 and out == "" and "select messages in different ways" in err and err.count("\n") == 1
    code, out, _ = run(capsys, "get", path, "--offset", 0, "--msg-id", results[0].msg_id)
    assert code == 2 and out == ""


def test_export_parquet(store, tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    path, results = store
    out_file = tmp_path / "out.parquet"
    code, _, err = run(capsys, "export", path, out_file)
    assert code == 0, err
    t = pq.read_table(out_file)
    assert t.num_rows == N
    assert t.column("commitlog_offset").to_pylist() == [r.commitlog_offset for r in results]
    assert t.column("body").to_pylist()[5] == b"body-5" * 40


# -- errors and the demo ---------------------------------------------------------------------------------------------

def test_paths_that_are_not_stores_get_one_line(tmp_path, capsys):
    code, _, err = run(capsys, "inspect", tmp_path / "missing")
    assert code == 2 and "no such directory" in err and err.count("\n") == 1
    (tmp_path / "notes.txt").write_text("x")
    code, _, err = run(capsys, "verify", tmp_path)
    assert code == 2 and "is not a message store" in err and err.count("\n") == 1


def test_demo_with_zero_messages_and_bad_counts(capsys):
    code, out, err = run(capsys, "demo", "--messages", 0)
    assert code == 0, err
    assert "(0 messages pulled by queue: 0 + 0)" in out
    for opt in ("--queues", "--topics"):
        code, _, err = run(capsys, "demo", opt, 0)
        assert code == 2 and f"{opt} must be >= 1" in err


def test_demo_counts_what_it_pulls(tmp_path, capsys):
    code, out, err = run(capsys, "demo", "--messages", 300, "--path", tmp_path / "d")
    assert code == 0, err
    assert "(600 messages pulled by queue: 300 + 300)" in out
    assert "(300/300 keys found)" in out
    # The delayed and the transactional send: invisible first, readable after the delay / the commit.
    assert "stored in SCHEDULE_TOPIC_XXXX queue 0; DemoReminders at once: NO_MATCHED_LOGIC_QUEUE" in out
    assert ("stored in RMQ_SYS_TRANS_HALF_TOPIC; DemoPayments before commit: NO_MATCHED_LOGIC_QUEUE, after "
            "end_transaction(commit): FOUND (1 message, b'pay order 7')") in out
    waited = re.search(r"DemoReminders/0 now: FOUND, b'remind me in a second', stored (\d+) ms after its send", out)
    assert waited and 1000 <= int(waited.group(1)) < 3000, out


def test_demo_refuses_a_directory_holding_a_store_unless_forced(store, tmp_path, capsys):
    """A demo never writes into someone's store by accident: an existing store (or any non-empty directory) at
    --path is refused with one line and left as it was; --force adds the demo's messages to a store, and the demo
    then counts only its own."""
    path, results = store
    before = sorted((d, sorted(f)) for d, _, f in os.walk(path))
    for argv in (("demo", "--messages", 10, "--path", path), ("demo", "broker", "--messages", 10, "--path", path)):
        code, out, err = run(capsys, *argv)
        assert code == 2 and "holds a message store" in err and "--force" in err and err.count("\n") == 1, err
    assert sorted((d, sorted(f)) for d, _, f in os.walk(path)) == before
    code, _, err = run(capsys, "get", path, "--topic", "orders", "--queue", 0, "--offset", 0, "--count", 1000)
    assert code == 0
    data = tmp_path / "data"
    data.mkdir()
    (data / "notes.txt").write_text("mine")
    code, _, err = run(capsys, "demo", "--messages", 10, "--path", data, "--force")
    assert code == 2 and "not empty and holds no message store" in err and os.listdir(data) == ["notes.txt"]
    code, out, err = run(capsys, "demo", "--messages", 20, "--topics", 2, "--queues", 3, "--path", path, "--force")
    assert code == 0, err
    assert "(40 messages pulled by queue: 20 + 20)" in out and "(20/20 keys found)" in out


def test_demo_broker_without_the_broker_module(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "rmqcore.broker.demo", None)      # as in a build without rmqcore.broker
    code, out, err = run(capsys, "demo", "broker")
    assert code == 2 and "broker demo is not available" in err and err.count("\n") == 1


def test_demo_broker_runs_the_broker_demo(tmp_path, capsys):
    pytest.importorskip("rmqcore.broker.demo")
    code, out, err = run(capsys, "demo", "broker", "--messages", 300, "--path", tmp_path / "b")
    assert code == 0, out + err
    assert "rmqcore demo broker: 300 messages" in out


def _python_m(*argv, check=True):
    env = dict(os.environ, PYTHONPATH=PKG_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "rmqcore", *map(str, argv)], capture_output=True, text=True,
                          env=env, timeout=120, check=check)


def test_help_everywhere_in_a_subprocess():
    top = _python_m("--help")
    commands = ["demo", "inspect", "verify", "get", "query", "dump", "repair", "stats", "export"]
    for c in commands:
        assert c in top.stdout
        h = _python_m(c, "--help")
        assert h.stdout.startswith("usage: rmqcore " + c)
    assert _python_m("demo", "broker", "--help").stdout.startswith("usage: rmqcore demo broker")


def test_every_option_has_help():
    from rmqcore.cli import build_parser
    parser = build_parser()
    subs = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"][0]
    for name, p in subs.choices.items():
        for action in p._actions:
            if action.dest in ("help", "demo_cmd"):
                continue
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"


def test_a_store_read_in_a_subprocess_as_a_user_would(store):
    path, results = store
    r = _python_m("get", path, "--topic", "orders", "--queue", 0, "--offset", 0)
    assert "k-0" in r.stdout
    r = _python_m("inspect", "/nonexistent-root/x", check=False)
    assert r.returncode == 2 and r.stderr.strip() == "rmqcore inspect: error: /nonexistent-root/x: no such directory"


# -- progress bars ---------------------------------------------------------------------------------------------------

class _Terminal:
    """A stderr that says it is a terminal and keeps what is drawn."""

    def __init__(self):
        self.text = ""

    def isatty(self):
        return True

    def write(self, s):
        self.text += s

    def flush(self):
        pass


def test_a_walk_tells_progress_in_small_steps_adding_up_to_the_data(tmp_path):
    from rmqcore.admin import StoreReader
    make_store(tmp_path / "s", n=600)                     # several 64 KiB commitlog files, the last one partly used
    with StoreReader(str(tmp_path / "s")) as r:
        files = r.commit_log.mapped_file_queue.mapped_files
        assert len(files) >= 3
        steps = []
        count = sum(1 for _ in r.walk(r.min_offset, False, steps.append, step=8192))
        assert count == 600
        assert sum(steps) == r.data_bytes() == r.max_offset - r.min_offset
        assert r.data_bytes() < sum(mf.file_size for mf in files)      # not the files' apparent sizes
        assert len(steps) > 2 * len(files) and max(steps) < 8192 + 16 * 1024
        seg = []
        r.verify_segments(False, seg.append)
        assert sum(seg) == r.data_bytes()


def test_progress_bars_count_the_data_in_every_phase(store, capsys, monkeypatch, tmp_path):
    from rmqcore import admin, cli
    path, _ = store
    monkeypatch.setattr(cli.ProgressBar, "INTERVAL", 0.0)
    monkeypatch.setattr(admin, "PROGRESS_STEP", 4096)
    with admin.StoreReader(path) as r:
        data = r.data_bytes()
        queues = len(r.consume_queues)
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert main(["export", path, str(tmp_path / "all.jsonl")]) == 0
    drawn = [ln for ln in re.split(r"\r", term.text) if ln.startswith("export [")]
    shares = [float(re.search(r"\]\s+([\d.]+)%", ln).group(1)) for ln in drawn]
    assert len(set(shares)) >= 4 and shares == sorted(shares) and shares[-1] == 100.0, drawn
    assert f"of {cli._fmt_bytes(data)}" in drawn[-1]
    term.text = ""
    assert main(["verify", path]) == 0
    shown = term.text
    assert f"verify commitlog [" in shown and f"of {cli._fmt_bytes(data)}" in shown
    assert f"{queues:,} of {queues:,} queues" in shown and "verify index [" in shown


# -- issue 40: what a first day finds ----------------------------------------------------------------------------------

def test_a_malformed_msg_id_is_a_usage_error(store, capsys):
    path, results = store
    for bad in ("zz", "not-an-id", "0x12"):
        code, out, err = run(capsys, "get", path, "--msg-id", bad)
        assert code == 2 and out == "" and err.count("\n") == 1 and "not a message id" in err, (bad, err)
    code, out, err = run(capsys, "get", path, "--msg-id", "ab" * 16)       # well formed, no such message
    assert code == 1 and "no message found" in err


def test_query_says_when_more_match_than_it_shows_and_how_to_page(store, capsys):
    path, results = store
    ts = [r.store_timestamp for r in results]
    orders = [r for i, r in enumerate(results) if i % 2 == 0]
    code, out, err = run(capsys, "query", path, "--topic", "orders", "--begin", ts[0], "--end", ts[-1], "--max", 5,
                         "--json")
    assert code == 0
    shown = json.loads(out)
    assert len(shown) == 5 and [m["commitlog_offset"] for m in shown] == [r.commitlog_offset for r in orders[:5]]
    assert "more than 5 messages match" in err and f"--begin {shown[-1]['store_timestamp']}" in err
    # the page it names goes on from the last one shown
    code, out, err = run(capsys, "query", path, "--topic", "orders", "--begin", shown[-1]["store_timestamp"],
                         "--end", ts[-1], "--max", 1000, "--json")
    assert code == 0 and "more than" not in err
    assert {m["commitlog_offset"] for m in json.loads(out)} >= {r.commitlog_offset for r in orders[5:]}
    code, out, err = run(capsys, "query", path, "--topic", "orders", "--begin", ts[0], "--end", ts[-1], "--max",
                         len(orders))
    assert code == 0 and "more than" not in err and len(out.splitlines()) == len(orders)


def test_export_csv_and_unknown_extensions(store, tmp_path, capsys):
    import csv
    path, results = store
    out_file = tmp_path / "out.csv"
    code, _, err = run(capsys, "export", path, out_file, "--topic", "payments", "--body", "text")
    assert code == 0 and "(csv)" in err, err
    with open(out_file, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["commitlog_offset"]) for r in rows] == [r.commitlog_offset for i, r in enumerate(results) if i % 2]
    assert rows[0]["body"] == "body-1" * 40 and rows[0]["keys"] == "k-1" and rows[0]["topic"] == "payments"
    for name in ("out.txt", "out"):
        code, _, err = run(capsys, "export", path, tmp_path / name)
        assert code == 2 and "--format" in err and err.count("\n") == 1 and not (tmp_path / name).exists()
    code, _, err = run(capsys, "export", path, tmp_path / "out.txt", "--format", "jsonl")
    assert code == 0 and len((tmp_path / "out.txt").read_text().splitlines()) == N


def test_an_interrupted_export_leaves_no_partial_file(store, tmp_path, capsys, monkeypatch):
    import rmqcore.cli as cli
    path, _ = store
    old = tmp_path / "old.jsonl"
    old.write_text("the previous export\n")
    real, calls = cli.message_dict, []

    def interrupted(m, *args, **kwargs):     # Ctrl-C arrives while the 10th message is written
        calls.append(1)
        if len(calls) == 10:
            raise KeyboardInterrupt
        return real(m, *args, **kwargs)
    monkeypatch.setattr(cli, "message_dict", interrupted)
    for out_file, force in ((tmp_path / "new.jsonl", ()), (tmp_path / "new.csv", ()), (old, ("--force",))):
        calls.clear()
        code, _, err = run(capsys, "export", path, out_file, *force)
        assert code == 130 and "interrupted" in err
    assert sorted(os.listdir(tmp_path)) == ["old.jsonl", "store"]      # no new file, no temporary one
    assert old.read_text() == "the previous export\n"                   # --force replaces only a complete export


def test_demo_on_a_held_store_fails_before_it_runs(store, capsys):
    path, _ = store
    before = sorted((d, sorted(f)) for d, _, f in os.walk(path))
    with MessageStore.open(path, small_config()):
        for argv in (("demo", "--messages", 10, "--path", path, "--force"),
                     ("demo", "broker", "--messages", 10, "--path", path, "--force")):
            code, out, err = run(capsys, *argv)
            assert code == 2 and out == "" and "open in another process" in err and err.count("\n") == 1, err
    after = sorted((d, sorted(f)) for d, _, f in os.walk(path))
    assert after == before
