"""A store written by RocketMQ loses no record on open, whatever its topics (issue 26).

RocketMQ's store writes any topic of 1..127 bytes (only the broker's send path applies ^[%|a-zA-Z0-9_-]+$), so
records with unicode, long, spaced or dotted topics are records like any other: read, dispatched and served.
Records whose topic cannot name a directory (a control character, '/', ...) are kept in the commitlog, readable
by offset, and reported, never dispatched; nothing whose checksums hold is cut.

``golden/java_4_9_7_store/topics.tar.xz`` was written by RocketMQ 4.9.7's own DefaultMessageStore (the java-peer
harness beside the project, 1 MiB commitlog files), shut down cleanly, in this order: 150 messages over five
``java-<unicode>`` topics with unicode tags, keys and properties and random bodies; ``支付0``/``支付1``; five
messages to ``ctl\\x010`` (a control character: Java made that directory); a 102-character topic; ``odd
topic.v1|%-0/1``; 1,500 to ``orders-0/1``; then ten to ``bad/0`` and ``bad/1`` (after which Java's own store no
longer loads: its consume-queue directories nest). ``java-read.tsv`` is every message Java read back from its
consume queues before the ``bad/`` ones, with each unit's size and tagsCode.
"""
import json
import os
import shutil
import tarfile
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqcore import MessageStore, StoreConfig
from rmqcore import _codec as C
from rmqcore import reference as R

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "java_4_9_7_store", "topics.tar.xz")
MIB = 1 << 20


def java_config(**kw):
    # The harness's compat sizes (commitlog files are adopted from the store anyway).
    return StoreConfig(mapped_file_size_commit_log=MIB, mapped_file_size_consume_queue=20 * 1000,
                       max_hash_slot_num=1000, max_index_num=4000, warm_mapped_file_enable=False, **kw)


def _unescape(s: str):
    # JavaPeer.esc: \N is null; \\ \t \n and \uXXXX for other control characters.
    if s == "\\N":
        return None
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u":
                out.append(chr(int(s[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append({"\\": "\\", "t": "\t", "n": "\n"}[n])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


@pytest.fixture
def java_store(tmp_path):
    with tarfile.open(GOLDEN) as t:
        t.extractall(tmp_path, filter="data")
    with open(tmp_path / "java-read.tsv", encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        rows = [dict(zip(header, line.rstrip("\n").split("\t"))) for line in f]
    for r in rows:
        for k in ("topic", "tags", "keys", "uniqKey", "props"):
            r[k] = _unescape(r[k])
    return str(tmp_path / "store"), rows


def _props_string(m) -> str:
    return "\x01".join(f"{k}={v}" for k, v in sorted(m.properties.items()))


def _check_record(m, row):
    assert m is not None, row
    assert m.topic == row["topic"]
    assert (m.queue_id, m.queue_offset, m.commitlog_offset, m.store_size) == (
        int(row["queueId"]), int(row["queueOffset"]), int(row["commitLogOffset"]), int(row["storeSize"]))
    assert (m.body_crc, m.flag, m.sys_flag, m.born_timestamp, m.store_timestamp) == (
        int(row["bodyCRC"]), int(row["flag"]), int(row["sysFlag"]), int(row["bornTimestamp"]),
        int(row["storeTimestamp"]))
    assert m.born_host == row["bornHost"] and "/" + m.store_host == row["storeHost"]
    assert (m.reconsume_times, m.prepared_transaction_offset) == (int(row["reconsumeTimes"]),
                                                                  int(row["preparedTransactionOffset"]))
    assert m.tags == row["tags"]
    assert (" ".join(m.keys) if m.keys else None) == row["keys"]
    assert m.uniq_key == row["uniqKey"]
    body = bytes(m.body)
    assert len(body) == int(row["bodyLen"]) and zlib.crc32(body) == int(row["bodyCrc32"])
    assert _props_string(m) == row["props"]


UNSAFE = "ctl\x010"


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "after-abort"])
def test_every_message_java_wrote_is_read_back_whatever_its_topic(java_store, crashed):
    path, rows = java_store
    end = sum(os.path.getsize(os.path.join(path, "commitlog", f)) for f in os.listdir(os.path.join(path, "commitlog")))
    if crashed:
        open(os.path.join(path, "abort"), "w").close()
    with MessageStore.open(path, java_config()) as s:
        rec = s.runtime_info()["recovery"]
        assert rec["truncated_bytes"] == 0 and rec["stop"] == "end of data"
        assert 1 * MIB < s.commit_log.max_offset < end                  # all of the second file's data is kept
        assert len(os.listdir(os.path.join(path, "commitlog"))) == 2
        for row in rows:
            _check_record(s.look_message(int(row["commitLogOffset"])), row)
        # Served by queue, as Java served them, for every topic that names a directory.
        served = {}
        for row in rows:
            if row["topic"] != UNSAFE:
                served.setdefault((row["topic"], int(row["queueId"])), []).append(row)
        assert {t for t, _ in served} >= {"支付0", "java-主题", "java-ordres-é", "odd topic.v1|%-0", "x" * 100 + "-0"}
        assert UNSAFE not in s.topics()
        for (topic, qid), want in served.items():
            got, off = [], 0
            while True:
                r = s.get_messages("g", topic, qid, off, max_count=32)
                if not r.messages:
                    break
                got += r.messages
                off = r.next_begin_offset
            assert [m.commitlog_offset for m in got] == [int(r["commitLogOffset"]) for r in want], (topic, qid)
            cq = s.find_consume_queue(topic, qid, create=False)
            units = cq.get_units(0, len(want))
            assert [int(u) for u in units["size"]] == [int(r["cqSize"]) for r in want]
            assert [int(u) for u in units["tags_code"]] == [int(r["cqTagsCode"]) for r in want]
        # Keys through the index: unicode topics hash as Java's String.hashCode of "topic#key".
        for row in rows[::37]:
            if row["topic"] != UNSAFE and row["keys"]:
                key = row["keys"].split(" ")[0]
                found = [m.commitlog_offset for m in s.query_message(row["topic"], key, max_num=64)]
                assert int(row["commitLogOffset"]) in found, (row["topic"], key)
        # The control-character topic and the bad/ ones: kept, readable, reported, never a directory.
        report = s.verify()
        assert report["ok"], report
        assert report["undispatchable"] == 5 + 10
        unsafe_rows = [r for r in rows if r["topic"] == UNSAFE]
        assert report["undispatchable_offsets"][:5] == [int(r["commitLogOffset"]) for r in unsafe_rows]
        bad = [s.look_message(off) for off in report["undispatchable_offsets"][5:]]
        assert {m.topic for m in bad} == {"bad/0", "bad/1"}
        assert not os.path.exists(os.path.join(path, "consumequeue", "bad"))


def test_consume_queues_rebuilt_from_a_java_commitlog_equal_javas(java_store):
    # Dispatch itself (not Java's queue files) must give every topic the units Java gave it.
    path, rows = java_store
    shutil.rmtree(os.path.join(path, "consumequeue"))
    shutil.rmtree(os.path.join(path, "index"))
    open(os.path.join(path, "abort"), "w").close()
    with MessageStore.open(path, java_config()) as s:
        for row in rows:
            if row["topic"] == UNSAFE:
                continue
            cq = s.find_consume_queue(row["topic"], int(row["queueId"]), create=False)
            u = cq.get_units(int(row["queueOffset"]), 1)[0]
            assert (int(u["offset"]), int(u["size"]), int(u["tags_code"])) == (
                int(row["commitLogOffset"]), int(row["cqSize"]), int(row["cqTagsCode"]))
        assert sorted(os.listdir(os.path.join(path, "consumequeue"))) == sorted(
            {r["topic"] for r in rows if r["topic"] != UNSAFE})
        assert s.verify()["ok"]


# -- any topic a record can hold ------------------------------------------------------------------------------------

SPECIAL = [b".", b"..", b"a/b", b"/", b"\\", b"a\x00b", b"\x7f", b"\xc2\x80", b"\xff", b"\xed\xa0\x80", b" ", b"...",
           "支付".encode(), b"%RETRY%g", b"x" * 127, "é".encode() * 63]
topics = st.one_of(
    st.text(min_size=1, max_size=40).map(lambda t: t.encode("utf-8")[:127]).filter(bool),
    st.binary(min_size=1, max_size=127),
    st.sampled_from(SPECIAL))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(topics, st.integers(0, 2), st.booleans()), min_size=1, max_size=12))
def test_records_with_any_topic_are_never_cut_and_only_safe_ones_dispatched(tmp_path_factory, spec):
    # Records written through the reference encoder (the put-side topic rule bypassed), with and without 5.x's
    # __CRC32#, then recovered as after a crash: nothing before the end is cut; dispatchable topics get their
    # units and keys; the others are kept, readable by offset, and reported.
    path = str(tmp_path_factory.mktemp("s"))
    size = 64 * 1024
    data, offsets, qo = bytearray(), [], {}
    for i, (topic, qid, crc) in enumerate(spec):
        ok = C.topic_is_dispatchable(topic)
        n = qo.get((topic, qid), 0)
        if ok:
            qo[(topic, qid)] = n + 1
        props = {"KEYS": f"k{i}", "UNIQ_KEY": f"U{i:030d}"}
        rec = bytearray(R.encode_message(topic="T" * len(topic), body=b"b%d" % i, queue_id=qid,
                                         queue_offset=n if ok else 0, physical_offset=len(data),
                                         store_timestamp=1_700_000_000_000 + i, properties=props,
                                         append_crc_property=crc))
        at = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + len(b"b%d" % i)
        assert rec[at] == len(topic)
        rec[at + 1:at + 1 + len(topic)] = topic
        if crc:       # 5.x's __CRC32# over the finished record, least significant digit first
            digits = str(zlib.crc32(bytes(rec[:-20])) & 0x7FFFFFFF).rjust(10, "0")[::-1]
            rec[-20:] = b"__CRC32#\x01" + digits.encode() + b"\x02"
        offsets.append((len(data), topic, qid, ok, i))
        data += rec
    os.makedirs(os.path.join(path, "commitlog"))
    with open(os.path.join(path, "commitlog", "0" * 20), "wb") as f:
        f.write(bytes(data).ljust(size, b"\0"))
    open(os.path.join(path, "abort"), "w").close()
    cfg = StoreConfig(mapped_file_size_commit_log=size, mapped_file_size_consume_queue=20 * 100,
                      max_hash_slot_num=101, max_index_num=404, warm_mapped_file_enable=False)
    with MessageStore.open(path, cfg) as s:
        assert s.commit_log.max_offset == len(data)
        assert s.runtime_info()["recovery"]["truncated_bytes"] == 0
        undispatchable = [off for off, _, _, ok, _ in offsets if not ok]
        assert s.runtime_info()["recovery"]["undispatchable"] == len(undispatchable)
        for off, topic, qid, ok, i in offsets:
            m = s.look_message(off)
            assert m is not None and m.topic == topic.decode("utf-8", "replace") and bytes(m.body) == b"b%d" % i
            if ok:
                name = topic.decode()
                assert off in [x.commitlog_offset for x in s.get_messages("g", name, qid, 0, 64).messages]
                assert off in [x.commitlog_offset for x in s.query_message(name, f"k{i}")]
        report = s.verify()
        assert report["ok"] and report["undispatchable"] == len(undispatchable)
        assert report["undispatchable_offsets"] == undispatchable[:16]
        for t in s.topics():
            assert C.topic_is_dispatchable(t) and R.topic_is_dispatchable(t)
    for d, dirs, _ in os.walk(os.path.join(path, "consumequeue")):
        assert os.path.realpath(d).startswith(os.path.realpath(path))


@pytest.mark.parametrize("props", [{}, {"DELAY": "1"}, {"TIMER_DELAY_SEC": "5"}], ids=["plain", "delayed", "timer"])
def test_put_keeps_refusing_topics_outside_the_brokers_rule(tmp_path, props):
    # What rmqcore writes stays what a broker writes: ^[%|a-zA-Z0-9_-]+$, also for a message that goes to the
    # schedule or timer topic first (it would otherwise be acknowledged now and refused at delivery).
    from rmqcore import Message, MessageIllegalError
    with MessageStore.open(str(tmp_path / "s"), StoreConfig(timer_wheel_enable=True)) as s:
        for topic in ("支付", "no spaces", "a.b", "a/b"):
            with pytest.raises(MessageIllegalError, match="topic"):
                s.put(Message(topic, b"x", 0, properties=dict(props)))
        assert s.commit_log.max_offset == 0
        assert s.put(Message("ok-Topic_1", b"x", 0, properties=dict(props))).ok


def test_the_command_line_reads_a_java_store_whatever_its_topics(java_store, capsys):
    # The offline tools (files mapped read-only) list consume queues by the rule an open uses: Java's directory for
    # the control-character topic is skipped, never a traceback; verify reports the undispatchable records.
    from rmqcore.cli import main
    path, rows = java_store
    assert main(["verify", path, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["undispatchable"] == 15 and report["records"] == 2565
    assert main(["stats", path, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert sum(q["messages"] for q in stats) == 2565
    assert main(["query", path, "--topic", "支付0", "--key", "k0"]) == 0
    assert "支付0" in capsys.readouterr().out
