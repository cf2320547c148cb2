"""Pop consumption's state (rmqcore/server/pop.py) over a real Broker, without the network: invisible time,
redelivery with the attempt counted, the DLQ at max attempts, FIFO holding a queue, filters, receipt handles, and
the journal replayed after a restart (a torn last line included). Also the SQL92 selector (filter.py)."""
from __future__ import annotations

import os

import pytest

from rmqcore import Message
from rmqcore.broker import Broker, TopicConfig
from rmqcore.serve.filter import FilterError, compile_filter
from rmqcore.server.pop import JOURNAL, PopService, ReceiptHandle


class Clock:
    def __init__(self):
        self.now = 1_000_000

    def __call__(self):
        return self.now


def _open(path, clock, queues=2, n=0, topic="t"):
    b = Broker.open(path)
    if b.topic_config_manager.select_topic_config(topic) is None:
        b.update_topic(TopicConfig(topic, read_queue_nums=queues, write_queue_nums=queues))
    for i in range(n):
        b.send(Message(topic, f"m{i}".encode(), i % queues, tags=("A", "B")[i % 2], properties={"n": str(i)}))
    b.store.wait_dispatched()
    pop = PopService(b, clock=clock)
    pop.load()
    return b, pop


def _bodies(popped):
    return sorted(bytes(p.message.body) for p in popped)


def test_invisible_then_redelivered_with_attempt_then_dlq(tmp_path):
    clock = Clock()
    b, pop = _open(str(tmp_path / "s"), clock, n=4)
    try:
        first = pop.pop("g", "t", [0, 1], 32, 10_000, fifo=False, max_attempts=2)
        assert _bodies(first) == [b"m0", b"m1", b"m2", b"m3"] and {p.attempt for p in first} == {1}
        assert pop.pop("g", "t", [0, 1], 32, 10_000, fifo=False, max_attempts=2) == []     # invisible
        assert pop.inflight("g") == {("t", 0): 2, ("t", 1): 2}
        assert pop.ack("g", "t", first[0].handle) is None
        clock.now += 10_000
        # the expired handle can no longer ack (INVALID_RECEIPT_HANDLE), the rest come back as attempt 2
        assert pop.ack("g", "t", first[1].handle) == "receipt handle has expired"
        second = pop.pop("g", "t", [0, 1], 32, 10_000, fifo=False, max_attempts=2)
        assert len(second) == 3 and {p.attempt for p in second} == {2}
        assert pop.ack("g", "t", second[0].handle) is None
        clock.now += 10_000
        # max attempts reached: the two left go to %DLQ%g instead of a third delivery
        assert pop.pop("g", "t", [0, 1], 32, 10_000, fifo=False, max_attempts=2) == []
        b.store.wait_dispatched()
        dlq = b.store.get_messages("x", "%DLQ%g", 0, 0, 32)
        assert sorted(bytes(m.body) for m in dlq.messages) == sorted(_bodies(second[1:]))
        assert pop.inflight("g") == {}
        # everything is done: the group's offsets sit at the queues' ends
        assert [b.query_offset("g", "t", q) for q in (0, 1)] == [2, 2]
    finally:
        pop.close()
        b.close()


def test_change_invisible_gives_a_new_handle(tmp_path):
    clock = Clock()
    b, pop = _open(str(tmp_path / "s"), clock, n=1)
    try:
        (p,) = pop.pop("g", "t", [0, 1], 1, 10_000, fifo=False, max_attempts=17)
        new, err = pop.change_invisible("g", "t", p.handle, 60_000)
        assert err is None and new.encode(pop.handle_key, "g", "t") != p.handle.encode(pop.handle_key, "g", "t")
        clock.now += 30_000
        assert pop.pop("g", "t", [0, 1], 1, 10_000, fifo=False, max_attempts=17) == []
        # the old handle is stale now; the new one acks
        assert pop.change_invisible("g", "t", p.handle, 1000)[1] is not None
        assert pop.ack("g", "t", new) is None
        clock.now += 60_000
        assert pop.pop("g", "t", [0, 1], 1, 10_000, fifo=False, max_attempts=17) == []
    finally:
        pop.close()
        b.close()


def test_fifo_holds_the_queue_until_the_batch_is_acked(tmp_path):
    clock = Clock()
    b, pop = _open(str(tmp_path / "s"), clock, queues=1, n=6)
    try:
        batch = pop.pop("g", "t", [0], 3, 10_000, fifo=True, max_attempts=17)
        assert [bytes(p.message.body) for p in batch] == [b"m0", b"m1", b"m2"]
        assert pop.pop("g", "t", [0], 3, 10_000, fifo=True, max_attempts=17) == []
        pop.ack("g", "t", batch[0].handle)
        pop.ack("g", "t", batch[1].handle)
        assert pop.pop("g", "t", [0], 3, 10_000, fifo=True, max_attempts=17) == []    # m2 still out
        clock.now += 10_000
        again = pop.pop("g", "t", [0], 3, 10_000, fifo=True, max_attempts=17)
        # the expired one first, alone: the queue's order is kept
        assert [(bytes(p.message.body), p.attempt) for p in again] == [(b"m2", 2)]
        pop.ack("g", "t", again[0].handle)
        nxt = pop.pop("g", "t", [0], 3, 10_000, fifo=True, max_attempts=17)
        assert [bytes(p.message.body) for p in nxt] == [b"m3", b"m4", b"m5"]
    finally:
        pop.close()
        b.close()


def test_filters_mark_skipped_messages_done(tmp_path):
    clock = Clock()
    b, pop = _open(str(tmp_path / "s"), clock, queues=1, n=10)
    try:
        got = pop.pop("g", "t", [0], 32, 10_000, fifo=False, max_attempts=17, tags="A")
        assert _bodies(got) == sorted(f"m{i}".encode() for i in range(0, 10, 2))
        for p in got:
            pop.ack("g", "t", p.handle)
        assert b.query_offset("g", "t", 0) == 10
        sql = compile_filter("n > 6")
        got = pop.pop("h", "t", [0], 32, 10_000, fifo=False, max_attempts=17, matcher=sql)
        assert _bodies(got) == [b"m7", b"m8", b"m9"]
    finally:
        pop.close()
        b.close()


def test_journal_survives_a_restart_and_a_torn_line(tmp_path):
    path = str(tmp_path / "s")
    clock = Clock()
    b, pop = _open(path, clock, queues=1, n=5)
    got = pop.pop("g", "t", [0], 5, 10_000, fifo=False, max_attempts=17)
    pop.ack("g", "t", got[0].handle)
    pop.ack("g", "t", got[3].handle)
    # a kill: no compaction, no close of the pop state; then half a line at the end
    pop.journal.close()
    b.close()
    with open(os.path.join(path, "config", JOURNAL), "ab") as f:
        f.write(b"A\tg\tt\t0\t")
    b, pop = _open(path, clock, queues=1)
    try:
        assert pop.inflight("g") == {("t", 0): 3}
        assert pop.pop("g", "t", [0], 5, 10_000, fifo=False, max_attempts=17) == []     # still invisible
        clock.now += 10_000
        again = pop.pop("g", "t", [0], 5, 10_000, fifo=False, max_attempts=17)
        assert [(bytes(p.message.body), p.attempt) for p in again] == [(b"m1", 2), (b"m2", 2), (b"m4", 2)]
        # handles issued before the restart do not collide with new ones
        assert len({p.handle.nonce for p in again} | {p.handle.nonce for p in got}) == 8
    finally:
        pop.close()
        b.close()
    # after a clean close the journal is a snapshot of the live state
    with open(os.path.join(path, "config", JOURNAL)) as f:
        lines = [ln for ln in f.read().splitlines() if not ln.startswith("G\t")]   # G: consumerOffset.json's
    assert lines[0].startswith("S\tg\tt\t0\t1\t5") and sum(1 for ln in lines if ln.startswith("P")) == 3


def test_receipt_handle_round_trip_and_refusals():
    key, other = b"k" * 32, b"o" * 32
    h = ReceiptHandle(3, 42, 7, 1000, 30_000)
    text = h.encode(key, "g", "t")
    back = ReceiptHandle.decode(text, key, "g", "t")
    assert (back.queue_id, back.offset, back.nonce, back.pop_time, back.invisible_ms) == (3, 42, 7, 1000, 30_000)
    assert back.expired_at == 31_000
    fields, mac = text.rsplit(":", 1)
    for bad in ("", "garbage", "r1:1:2:3:4", "r1:1:2:3:4:5", "r2:1:2:3:4:5", "r2:1:2:3:4:5:" + mac,
                # any field changed (a later pop time, another offset or nonce) under the old MAC
                fields.replace(":1000:", ":9000:") + ":" + mac, fields.replace(":42:", ":43:") + ":" + mac,
                fields.replace(":7:", ":8:") + ":" + mac, text[:-1] + ("0" if text[-1] != "0" else "1"),
                text + ":x"):
        with pytest.raises(ValueError):
            ReceiptHandle.decode(bad, key, "g", "t")
    # another server's key, another group or topic: refused too
    for k, g, t in ((other, "g", "t"), (key, "g2", "t"), (key, "g", "t2")):
        with pytest.raises(ValueError):
            ReceiptHandle.decode(text, k, g, t)


def test_handle_key_is_made_once_and_kept(tmp_path):
    path = str(tmp_path / "s")
    b, pop = _open(path, Clock(), n=1)
    try:
        key = pop.handle_key
        assert len(key) == 32
        f = os.path.join(path, "config", "popHandleKey")
        assert os.stat(f).st_mode & 0o077 == 0            # owner-only
    finally:
        pop.close()
        b.close()
    b, pop = _open(path, Clock(), n=0)
    try:
        assert pop.handle_key == key
    finally:
        pop.close()
        b.close()


class _M:
    def __init__(self, **props):
        self.properties = props


@pytest.mark.parametrize("expr, props, want", [
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'x'", {}, False),
    ("NOT a = 'x'", {}, False),                          # unknown stays unknown
    ("a IS NULL", {}, True),
    ("a IS NOT NULL AND a <> 'y'", {"a": "x"}, True),
    ("n > 3", {"n": "4"}, True),
    ("n > 3", {"n": "abc"}, False),
    ("n BETWEEN 1 AND 3", {"n": "3"}, True),
    ("n NOT BETWEEN 1 AND 3", {"n": "4"}, True),
    ("TAGS IN ('A', 'B')", {"TAGS": "B"}, True),
    ("TAGS NOT IN ('A', 'B')", {"TAGS": "B"}, False),
    ("a = 'it''s'", {"a": "it's"}, True),
    ("(a = 'x' OR b = 'y') AND c = 1", {"b": "y", "c": "1"}, True),
    ("a = 'x' OR b = 'y'", {"b": "y"}, True),
    ("a CONTAINS 'ell'", {"a": "hello"}, True),
    ("a STARTSWITH 'he' AND a ENDSWITH 'lo'", {"a": "hello"}, True),
    ("a NOT CONTAINS 'z'", {"a": "hello"}, True),
    ("flag = TRUE", {"flag": "true"}, True),
    ("x = 1.5", {"x": "1.50"}, True),
    # three-valued AND / OR over many terms (n-ary nodes: a long chain is not a deep tree)
    pytest.param(" AND ".join(["a = 1"] * 400), {"a": "1"}, True, id="and-chain-400"),
    pytest.param(" AND ".join(["a = 1"] * 300 + ["b = 1"]), {"a": "1"}, False, id="and-chain-unknown"),
    pytest.param(" OR ".join(["b = 1"] * 300 + ["a = 1"]), {"a": "1"}, True, id="or-chain-300"),
    pytest.param("(" * 100 + "a = 1" + ")" * 100, {"a": "1"}, True, id="nested-100"),   # as deep as may nest
    ("NOT (a = 1 OR b = 1) AND NOT NOT c = 1", {"a": "2", "b": "2", "c": "1"}, True),
])
def test_sql_filter(expr, props, want):
    assert compile_filter(expr)(_M(**props)) is want


@pytest.mark.parametrize("expr", ["", "a >", "a = = 1", "a IN ()", "(a = 1", "a = 'x", "a NOT 1", "a # 1",
                                  # nested past the limit, short enough for the length limit: not a RecursionError
                                  pytest.param("(" * 101 + "a = 1" + ")" * 101, id="nested-101"),
                                  pytest.param("(" * 1400 + "a = 1" + ")" * 1400, id="nested-1400"),
                                  pytest.param("NOT " * 1000 + "a = 1", id="not-1000"),
                                  pytest.param("n BETWEEN " + "(" * 1300 + "1" + ")" * 1300 + " AND 2",
                                               id="nested-value-1300")])
def test_sql_filter_refusals(expr):
    with pytest.raises(FilterError):
        compile_filter(expr)


def test_release_makes_undelivered_messages_visible_at_once(tmp_path):
    clock = Clock()
    b, pop = _open(str(tmp_path / "s"), clock, queues=1, n=3)
    try:
        got = pop.pop("g", "t", [0], 3, 60_000, fifo=False, max_attempts=17)
        assert pop.release("g", "t", [p.handle for p in got[1:]]) == 2
        again = pop.pop("g", "t", [0], 3, 60_000, fifo=False, max_attempts=17)
        assert [(bytes(p.message.body), p.attempt) for p in again] == [(b"m1", 2), (b"m2", 2)]
        assert pop.release("g", "t", [got[1].handle]) == 0           # a stale handle releases nothing
    finally:
        pop.close()
        b.close()


def test_acl_yaml_signatures_and_permissions(tmp_path):
    pytest.importorskip("yaml")
    import calendar
    import hmac
    from hashlib import sha1

    from rmqcore.serve.auth import PUB, SUB, Acl, AuthError
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts:\n"
                    "  - accessKey: rocketmq2\n"
                    "    secretKey: 12345678\n"
                    "    defaultTopicPerm: DENY\n"
                    "    defaultGroupPerm: SUB\n"
                    "    topicPerms:\n"
                    "      - topicA=DENY\n"
                    "      - topicB=PUB|SUB\n"
                    "      - topicC=SUB\n"
                    "    groupPerms:\n"
                    "      - groupA=DENY\n")
    acl = Acl.load(str(path))
    assert acl.secret_key("rocketmq2") == "12345678" and acl.secret_key("x") is None
    assert not acl.is_admin("rocketmq2")
    date = "20260101T000000Z"
    sig = hmac.new(b"12345678", date.encode(), sha1).hexdigest()
    header = f"MQv2-HMAC-SHA1 Credential=rocketmq2, SignedHeaders=x-mq-date-time, Signature={sig}"
    at = calendar.timegm((2026, 1, 1, 0, 0, 0))
    account = acl.authenticate({"authorization": header, "x-mq-date-time": date}, now=at)
    with pytest.raises(AuthError) as e:
        acl.authenticate({"authorization": header, "x-mq-date-time": "20260101T000001Z"}, now=at)
    assert not e.value.forbidden
    # the signed date must be near the server's clock: within the window either way, not outside it
    for now in (at + 299, at - 299):
        acl.authenticate({"authorization": header, "x-mq-date-time": date}, now=now, max_skew_s=300)
    for now in (at + 301, at - 301, at + 86400 * 365):
        with pytest.raises(AuthError, match="from the server's clock") as e:
            acl.authenticate({"authorization": header, "x-mq-date-time": date}, now=now, max_skew_s=300)
        assert not e.value.forbidden
    for bad in ("garbage", "", "2026-01-01T00:00:00Z", "20261301T000000Z"):
        signed = hmac.new(b"12345678", bad.encode(), sha1).hexdigest()
        h = f"MQv2-HMAC-SHA1 Credential=rocketmq2, SignedHeaders=x-mq-date-time, Signature={signed}"
        with pytest.raises(AuthError, match="is not yyyyMMdd"):
            acl.authenticate({"authorization": h, "x-mq-date-time": bad}, now=at)
    # a retry topic is its group's: SUB on the group, whatever the topic permissions say
    Acl.check(account, topic="%RETRY%groupB", need=PUB)
    with pytest.raises(AuthError, match="groupA"):
        Acl.check(account, topic="%RETRY%groupA", need=SUB)
    Acl.check(account, topic="topicB", group="groupB", need=SUB)
    Acl.check(account, topic="topicB", need=PUB)
    for topic, group, need in (("topicA", None, SUB), ("topicC", None, PUB), ("other", None, PUB),
                               ("topicB", "groupA", SUB)):
        with pytest.raises(AuthError) as e:
            Acl.check(account, topic=topic, group=group, need=need)
        assert e.value.forbidden
    bad = tmp_path / "bad.yml"
    bad.write_text("accounts:\n  - accessKey: a\n    secretKey: b\n    defaultTopicPerm: SOMETIMES\n")
    with pytest.raises(ValueError, match="defaultTopicPerm"):
        Acl.load(str(bad))


def test_a_queue_cut_below_the_cursor_is_popped_from_its_end(tmp_path):
    path = str(tmp_path / "s")
    clock = Clock()
    b, pop = _open(path, clock, queues=1, n=3)
    # the journal says 10 were delivered, but the queue holds 3 (as after a recovery cut its unflushed tail)
    pop.journal.append(["S\tg\tt\t0\t10\t10"])
    pop.journal.close()
    b.close()
    b, pop = _open(path, clock, queues=1)
    try:
        for i in (3, 4):
            b.send(Message("t", f"m{i}".encode(), 0))
        b.store.wait_dispatched()
        got = pop.pop("g", "t", [0], 32, 10_000, fifo=False, max_attempts=17)
        assert _bodies(got) == [b"m3", b"m4"]
    finally:
        pop.close()
        b.close()


def test_offsets_another_broker_wrote_win_both_ways_and_an_older_own_file_loses(tmp_path):
    """consumerOffset.json written by another broker after the journal (a swap and back): its offsets win, past the
    watermark (acks above kept) and below it (a reset: delivered again from there); a text of this server's own,
    older than the journal, does not (issue 36)."""
    from rmqcore.broker import ConsumerOffsetManager
    path = str(tmp_path / "s")
    clock = Clock()
    b, pop = _open(path, clock, queues=2, n=12)
    got = {(p.handle.queue_id, p.handle.offset): p for p in pop.pop("g", "t", [0, 1], 32, 10_000, fifo=False,
                                                                       max_attempts=17)}
    for key in [(0, 0), (0, 4), (1, 0), (1, 1), (1, 2)]:      # queue 0: watermark 1, 4 acked above it; queue 1: 3
        pop.ack("g", "t", got[key].handle)
    pop.close()
    b.close()
    own = open(os.path.join(path, "config", "consumerOffset.json")).read()
    # the other broker: queue 0 consumed up to 3, queue 1 reset to 1
    com = ConsumerOffsetManager(path)
    com.load()
    com.commit_offset("g", "t", 0, 3)
    com.commit_offset("g", "t", 1, 1)
    com.persist()
    clock.now += 10_000
    b, pop = _open(path, clock, queues=2)
    try:
        again = pop.pop("g", "t", [0, 1], 32, 10_000, fifo=False, max_attempts=17)
        by_queue = {q: sorted(p.handle.offset for p in again if p.handle.queue_id == q) for q in (0, 1)}
        assert by_queue == {0: [3, 5], 1: [1, 2, 3, 4, 5]}
        for p in again:
            pop.ack("g", "t", p.handle)
    finally:
        pop.close()
        b.close()
    # this server's own text from before: older than the journal, which wins
    with open(os.path.join(path, "config", "consumerOffset.json"), "w") as f:
        f.write(own)
    clock.now += 10_000
    b, pop = _open(path, clock, queues=2)
    try:
        assert pop.pop("g", "t", [0, 1], 32, 10_000, fifo=False, max_attempts=17) == []
        assert [b.query_offset("g", "t", q) for q in (0, 1)] == [1, 3]    # the file as restored, not yet moved
    finally:
        pop.close()
        b.close()
