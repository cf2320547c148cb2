"""The real RocketMQ 4.9.7 Java client in the scenarios of issue 37 beyond plain produce and consume, against
`rmqcore serve --remoting --namesrv` in a child process: tests/java/ClientScenario.java (what each scenario does and
prints is at its top), compiled against the java-broker harness's classpath (tests/java_util.py).

Transactions resolved through the broker's check (CHECK_TRANSACTION_STATE to the live producer, its
END_TRANSACTION back), broadcasting with client-side offsets, retry into %DLQ%group, an orderly consumer that
suspends, SQL92 selectors, lite pull seek by time, query by key and by id. Without a JDK, the harness or its jars,
every test here skips and says which is missing.
"""
import subprocess

import pytest

from java_util import java_client
from remoting_util import Client, RemotingProcess

# The check service's settings for the transaction tests (broker.conf, Java's names): a pass every second, a half
# checked once it is 3 s old (the producer has sent its first heartbeat, a second after its start, by then: a check
# due while no producer of the group is known counts as one of the half's checks, as in RocketMQ), at most 3 times.
CHECK_MAX = 3
TX_CONF = {"transactionCheckInterval": 1000, "transactionTimeOut": 3000, "transactionCheckMax": CHECK_MAX}


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    return java_client(str(tmp_path_factory.mktemp("java")))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # SQL92 selectors need BrokerConfig.enablePropertyFilter (off by default, as in RocketMQ 4.9.7)
    store = str(tmp_path_factory.mktemp("jclients") / "store")
    with RemotingProcess(store, conf={"enablePropertyFilter": "true"}) as s:
        yield s


def run(java, server, scenario, topic, n, *args, ok=True):
    r = subprocess.run([*java, "ClientScenario", server.namesrv, scenario, topic, str(n), *map(str, args)],
                       capture_output=True, text=True, timeout=240)
    # the client's own INFO logging shares stdout: the scenario's lines are the rest
    lines = [ln for ln in r.stdout.splitlines() if " INFO " not in ln and " WARN " not in ln]
    assert r.returncode == 0 and "OK" in lines, r.stdout[-3000:] + r.stderr[-2000:]
    return lines


def values(lines, word):
    return [ln[len(word) + 1:] for ln in lines if ln.startswith(word + " ")]


def test_transaction_check_commits_rolls_back_and_discards_past_check_max(java, tmp_path):
    store = str(tmp_path / "store")
    n = 3
    with RemotingProcess(store, conf=TX_CONF) as s:
        # 3 more passes after the last allowed check: each would ask again were the half not discarded
        lines = run(java, s, "transaction", "jt-tx", n, CHECK_MAX, 3000)
        assert s.terminate() == 0
    assert sorted(values(lines, "GOT")) == [f"commit-{i}" for i in range(n)], lines
    checks = {b: int(t) for b, t in (v.split() for v in values(lines, "CHECKS"))}
    # each commit and rollback is asked and its answer applied (asked again only if a pass ran before its answer
    # came back, as in RocketMQ); each unknown exactly transactionCheckMax times, then never again
    assert sorted(checks) == sorted(f"{k}-{i}" for k in ("commit", "rollback", "unknown") for i in range(n)), lines
    assert all(t >= 1 for b, t in checks.items() if not b.startswith("unknown")), checks
    assert {b: t for b, t in checks.items() if b.startswith("unknown")} == \
        {f"unknown-{i}": CHECK_MAX for i in range(n)}, checks
    # past its checks, an unknown half is moved to TRANS_CHECK_MAX_TIME_TOPIC (as RocketMQ's check listener does)
    from rmqcore.store import MessageStore
    st = MessageStore.open(store)
    try:
        st.wait_dispatched()
        r = st.get_messages("t", "TRANS_CHECK_MAX_TIME_TOPIC", 0, 0, 64)
        assert sorted(bytes(m.body).decode() for m in r.messages) == [f"unknown-{i}" for i in range(n)]
    finally:
        st.close()


def test_broadcasting_consumers_each_get_every_message_offsets_kept_by_the_client(java, server):
    group = "bc-group"
    first = run(java, server, "broadcast", "jt-bc", 10, group, 1)
    for inst in ("b1", "b2"):
        assert {v.split()[1] for v in values(first, "GOT") if v.split()[0] == inst} == {f"b1-{i}" for i in range(10)}
    # the same instances again: they resume from their local offset files, so nothing of the first run comes again
    second = run(java, server, "broadcast", "jt-bc", 10, group, 2)
    for inst in ("b1", "b2"):
        assert {v.split()[1] for v in values(second, "GOT") if v.split()[0] == inst} == {f"b2-{i}" for i in range(10)}
    # and the broker holds no offset of the group (GET_CONSUME_STATS lists the queues it has offsets for)
    c = Client(server.address)
    a = c.call(208, {"consumerGroup": group})
    c.close()
    assert a.code == 0 and b'"offsetTable":{}' in a.body, a.body


def test_failed_messages_are_retried_then_land_in_the_dead_letter_queue(java, server):
    lines = run(java, server, "dlq", "jt-dlq", 3)
    # reconsume times one past the last delivery's (2 = maxReconsumeTimes), as SendMessageProcessor's send-back
    # writes it; the original topic kept as RETRY_TOPIC
    assert sorted(values(lines, "DLQ")) == [f"dk-{i} 3 jt-dlq" for i in range(3)]


def test_orderly_consumers_suspend_and_share_queues_without_overlap(java, server):
    lines = run(java, server, "orderlysuspend", "jt-ords", 40)
    assert "QUEUES [0, 1, 2, 3]" in lines


def test_sql92_selector_filters_by_property(java, server):
    assert sorted(values(run(java, server, "sql", "jt-sql", 10), "GOT")) == ["3", "4", "5", "6"]


def test_an_unparsable_sql92_selector_is_refused_at_start(java, server):
    lines = run(java, server, "badsql", "jt-badsql", 0)
    assert values(lines, "REFUSED"), lines


def test_sql92_selectors_are_refused_when_enable_property_filter_is_off(java, tmp_path):
    """4.9.7's default: ClientManageProcessor.checkClientConfig refuses the consumer's start (SYSTEM_ERROR)."""
    with RemotingProcess(str(tmp_path / "store")) as s:
        lines = run(java, s, "nosql", "jt-nosql", 0)
        assert s.terminate() == 0
    refused = values(lines, "REFUSED")
    assert refused and "The broker does not support consumer to filter message by SQL92" in refused[0], lines


def test_lite_pull_seeks_to_the_offset_of_a_time(java, server):
    lines = run(java, server, "seek", "jt-seek", 20)
    # the time between the two batches is nearest the first late message of each queue: its offset is the
    # number of early ones that queue got
    offsets = [v.split() for v in values(lines, "OFFSET")]
    assert len(offsets) == 4 and all(answer == early for _, answer, early in offsets), lines
    # read from there: every late message, no early one (STALE lines are the client's own seek race)
    assert sorted(values(lines, "GOT")) == sorted(f"late-{i}" for i in range(10)), lines


def test_query_by_key_and_view_by_offset_id_and_message_id(java, server):
    lines = run(java, server, "query", "jt-query", 5)
    assert values(lines, "FOUND") == [f"qk-{i}" for i in range(5)]


def test_an_orderly_consumer_sends_what_it_gave_up_on_to_the_dead_letter_queue(java, server):
    lines = run(java, server, "orderlydlq", "jt-odlq", 3)
    # its own send to %RETRY%group (ConsumeMessageOrderlyService.sendMessageBack) carried reconsume times 2 and max
    # reconsume times 2: the broker put it in the DLQ as it came (SendMessageProcessor.handleRetryAndDLQ)
    assert sorted(values(lines, "DLQ")) == [f"dk-{i} 2 jt-odlq" for i in range(3)]
