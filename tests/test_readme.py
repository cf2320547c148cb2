"""README.md's claims: the quick start runs, the command lines it shows parse, the durability figures are the
configuration's defaults, and the set-up commands are the ones CI runs."""
import contextlib
import io
import os
import re
import shlex

import pytest

from rmqcore import StoreConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")

pytestmark = pytest.mark.skipif(not os.path.exists(README), reason="needs README.md")


def readme() -> str:
    return open(README, encoding="utf-8").read()


def section(title: str) -> str:
    text = readme()
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_quick_start_runs(tmp_path):
    code = re.search(r"```python\n(.*?)```", section("Quick start"), re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    code = code.replace('"/tmp/rmq-store"', repr(str(tmp_path / "store")))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README quick start", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("PutStatus.PUT_OK ")
    assert "0 created ['order-1'] b'order #1 created'" in lines
    assert lines[-1] == "[0]"


def test_command_lines_shown_parse():
    from rmqcore.cli import build_parser
    parser = build_parser()
    block = re.search(r"```bash\n(.*?)```", section("Command line"), re.S).group(1)
    commands = [shlex.split(line.split(" #")[0]) for line in block.splitlines() if line.startswith("rmqcore ")]
    assert {c[1] for c in commands} == {"inspect", "verify", "get", "query", "dump", "repair", "stats", "export",
                                        "demo", "serve"}
    for words in commands:
        parser.parse_args(["/s" if w in ("STORE", "DIR") else w for w in words[1:]])     # exits on a bad one


def test_durability_figures_are_the_defaults():
    text = section("Durability: what an acknowledged put survives")
    c = StoreConfig()
    assert c.flush_disk_type == "ASYNC_FLUSH" and "**ASYNC_FLUSH** (default)" in text
    assert f"every {c.flush_interval_commit_log} ms when at least {c.flush_commit_log_least_pages} pages" in text
    assert f"at least every {c.flush_commit_log_thorough_interval // 1000} s" in text
    assert f"into the file every {c.commit_interval_commit_log} ms" in text
    assert f"`sync_flush_timeout` ({c.sync_flush_timeout // 1000} s)" in text
    assert f"`file_reserved_time` ({c.file_reserved_time} h)" in text
    assert f"`delete_when` ({c.delete_when} o'clock)" in text
    assert f"`disk_max_used_space_ratio` ({c.disk_max_used_space_ratio} %)" in text
    assert "a SIGKILL (or any process crash) can lose acknowledged messages" in text


def test_layout_figures_are_the_defaults():
    text = section("API at a glance")
    c = StoreConfig()
    assert c.mapped_file_size_commit_log == 1 << 30 and "(1 GiB files" in text
    assert f"({c.mapped_file_size_consume_queue // 20:,} units of 20 bytes" in text
    assert f"({c.max_hash_slot_num:,} slots × {c.max_index_num:,} items)" in text
    assert f"`mapped_file_runway_commit_log` {c.mapped_file_runway_commit_log >> 20} MiB" in text
    assert f"`mapped_file_runway_consume_queue` {c.mapped_file_runway_consume_queue >> 20} MiB" in text
    assert f"`index_file_runway` {c.index_file_runway >> 20} MiB" in text
    assert c.enabled_append_prop_crc and "`enabled_append_prop_crc=False` leaves it out" in text


def test_broker_snippet_runs(tmp_path):
    code = re.search(r"```python\n(.*?)```", section("The broker's services"), re.S).group(1)
    code = code.replace('"/tmp/rmq-broker"', repr(str(tmp_path / "broker")))
    exec(compile(code, "README broker", "exec"), {})
    retry = os.path.join(str(tmp_path / "broker"), "consumequeue", "SCHEDULE_TOPIC_XXXX")
    assert os.path.isdir(retry)                        # the send-back waits for its delay level there


def test_ci_runs_the_two_set_up_commands():
    block = re.search(r"```bash\n(.*?)```", section("Set up"), re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert len(commands) == 2 and "python -m rmqcore demo" in commands[0] and "pytest" in commands[1]
    ci = os.path.join(ROOT, ".ci", "run")
    if os.path.exists(ci):
        run_lines = [ln.strip() for ln in open(ci, encoding="utf-8") if ln.strip() and not ln.startswith("#")]
        assert [ln for ln in run_lines if ln.startswith("python -m pip")] == commands


def test_demo_description_matches_the_demo_defaults():
    from rmqcore.cli import build_parser
    a = build_parser().parse_args(["demo"])
    text = section("Set up")
    assert f"puts {a.messages:,}\nmessages over {a.topics} topics × {a.queues} queues" in text
    assert f"pulls all {a.messages + min(a.messages, 50_000):,} by queue" in text


def test_every_install_it_shows_works_from_a_clone():
    """rmqcore is not on a package index yet: every pip install README shows installs the clone ('.' or
    '.[extras]'), in the editable mode whose path type checkers and PySpark follow, and README sends a user to no
    file outside the repository."""
    text = readme()
    installs = re.findall(r"pip install[^`\n]*", text)
    assert installs
    for line in installs:
        words = shlex.split(line.split(" &&")[0])[2:]
        targets = [w for w in words if not w.startswith("-") and "=" not in w]
        assert targets and all(t == "." or t.startswith(".[") for t in targets), line
        if "-e" in words:
            assert "editable_mode=compat" in words, line
    assert "../" not in text
