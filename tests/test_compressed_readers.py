"""What the store's readers show of a compressed record (a 4.x producer's: sysFlag COMPRESSED, the type in bits
8-10): `rmqcore get`, `dump` and `export` and the console give the body the producer sent and say it was
compressed; a body that does not inflate is shown as stored, saying why."""
from __future__ import annotations

import base64
import json
import zlib

import pytest

from rmqcore.broker import Broker
from rmqcore.cli import main
from rmqcore.message import Message
from rmqcore.mqadmin import local_admin

SENT = b"".join(b"line %d of a body a 4.x producer compressed\n" % i for i in range(200))       # ~9 KiB


@pytest.fixture
def store(tmp_path):
    path = str(tmp_path / "store")
    with Broker.open(path) as b:
        offsets = []
        for key, body, flag in (("zlib", zlib.compress(SENT, 5), 0x301), ("plain", b"plain body", 0),
                                ("broken", zlib.compress(SENT, 5)[:-10], 0x301)):
            r = b.send(Message("zip_t", body, 0, properties={"UNIQ_KEY": key}, sys_flag=flag))
            assert r.ok
            offsets.append(r.commitlog_offset)
        assert b.store.wait_dispatched(10)
    return path, offsets


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_get_shows_the_body_the_producer_sent_and_says_it_was_compressed(store, capsys):
    path, _offsets = store
    code, out, _ = run(capsys, "get", path, "--topic", "zip_t", "--queue", 0, "--offset", 0, "--count", 3, "--json")
    assert code == 0
    got = {m["uniq_key"]: m for m in json.loads(out)}
    assert base64.b64decode(got["zlib"]["body"]) == SENT and got["zlib"]["compression"] == "ZLIB"
    assert base64.b64decode(got["plain"]["body"]) == b"plain body" and got["plain"]["compression"] is None
    assert base64.b64decode(got["broken"]["body"]) == zlib.compress(SENT, 5)[:-10]       # as stored
    assert got["broken"]["compression"] == "ZLIB, not inflated: ZLIB body is cut short (the stream does not end)"
    code, out, _ = run(capsys, "get", path, "--topic", "zip_t", "--queue", 0, "--offset", 0, "--count", 3)
    lines = out.splitlines()
    assert repr(SENT[:40]) in lines[0] and lines[0].endswith("compressed=ZLIB")
    assert "compressed=" not in lines[1]
    assert "compressed=ZLIB, not inflated" in lines[2]
    code, out, _ = run(capsys, "dump", path, "--json")
    assert [json.loads(line)["compression"] for line in out.splitlines()][:2] == ["ZLIB", None]


def test_export_writes_the_body_sent_with_its_compression(store, capsys, tmp_path):
    path, _offsets = store
    out_path = tmp_path / "all.jsonl"
    assert main(["export", path, str(out_path), "--topic", "zip_t"]) == 0
    rows = [json.loads(line) for line in out_path.read_text().splitlines()]
    assert [(r["uniq_key"], r["compression"]) for r in rows] == [
        ("zlib", "ZLIB"), ("plain", None),
        ("broken", "ZLIB, not inflated: ZLIB body is cut short (the stream does not end)")]
    assert base64.b64decode(rows[0]["body"]) == SENT
    pq = pytest.importorskip("pyarrow.parquet")
    assert main(["export", path, str(tmp_path / "all.parquet"), "--topic", "zip_t"]) == 0
    table = pq.read_table(str(tmp_path / "all.parquet")).to_pylist()
    assert [(r["body"], r["compression"]) for r in table][:2] == [(SENT, "ZLIB"), (b"plain body", None)]


def test_the_console_shows_the_body_sent_and_says_it_was_compressed(store):
    path, offsets = store
    with local_admin(path) as data:
        m = data.message(offsets[0])
        assert m["compression"] == "ZLIB" and m["compression_error"] is None
        assert m["text"] == SENT.decode() and m["sent_body_size"] == len(SENT)
        assert m["body_head"] == SENT[:80].decode() + "…"
        assert m["body_size"] == len(zlib.compress(SENT, 5))             # what is stored
        broken = data.message(offsets[2])
        assert broken["compression"] == "ZLIB" and "cut short" in broken["compression_error"]
        assert broken["sent_body_size"] is None
        plain = data.message(offsets[1])
        assert plain["compression"] is None and plain["text"] == "plain body"
