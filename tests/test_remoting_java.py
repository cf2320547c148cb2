"""The real RocketMQ 4.9.7 Java client (DefaultMQProducer, DefaultLitePullConsumer, DefaultMQPushConsumer) against
`rmqcore serve --remoting --namesrv` in a child process: tests/java/RemotingScenario.java, compiled here against
the java-broker harness's classpath (../shared/java-broker, set up by its prebuilt.sh: Debian jars only).

Where the harness and its build are: tests/java_util.py. Without a JDK, the harness or its jars, every test here
skips and says which is missing.
"""
import subprocess

import pytest

from java_util import java_client
from remoting_util import RemotingProcess


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    """(java command prefix) with the client classpath and the scenarios compiled."""
    return java_client(str(tmp_path_factory.mktemp("java")))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with RemotingProcess(str(tmp_path_factory.mktemp("jremoting") / "store")) as s:
        yield s


def mqadmin(java, *args):
    r = subprocess.run([*java, "org.apache.rocketmq.tools.command.MQAdminStartup", *args], capture_output=True,
                       text=True, timeout=120)
    out = "\n".join(ln for ln in (r.stdout + r.stderr).splitlines() if " INFO " not in ln)
    assert r.returncode == 0 and "Exception" not in out, out + r.stderr[-2000:]
    return out


def run(java, server, scenario, topic, n, *flags):
    r = subprocess.run([*java, *flags, "RemotingScenario", server.namesrv, scenario, topic, str(n)],
                       capture_output=True, text=True, timeout=180)
    # the client's own INFO logging shares stdout: the scenario's lines are the rest
    lines = [ln for ln in r.stdout.splitlines() if " INFO " not in ln and " WARN " not in ln]
    assert r.returncode == 0 and "OK" in lines, r.stdout[-3000:] + r.stderr[-2000:]
    return lines


@pytest.mark.parametrize("serialize", ["JSON", "ROCKETMQ"])
def test_sync_async_oneway_and_batch_sends_then_lite_pull_and_push(java, server, serialize):
    topic = f"jt-{serialize}"
    flags = [f"-Drocketmq.serialize.type={serialize}"]
    lines = run(java, server, "produce", topic, 30, *flags)
    assert "SENT 34" in lines
    # offset msg ids name this broker's advertised address (the store host of every record)
    host, port = server.address.rsplit(":", 1)
    ids = [ln.split()[1] for ln in lines if ln.startswith("MSGID ")]
    assert len(ids) == 10 and all(i.startswith("7F000001%08X" % int(port)) for i in ids)
    want = {f"body-{i}" for i in range(30)} | {f"batch-{i}" for i in range(4)}
    got = {ln[4:] for ln in run(java, server, "litepull", topic, 34, *flags) if ln.startswith("GOT ")}
    assert got == want
    got = {ln[4:] for ln in run(java, server, "push", topic, 34, *flags) if ln.startswith("GOT ")}
    assert got == want


def test_push_consumer_filters_by_tag(java, server):
    got = [ln for ln in run(java, server, "tags", "jt-tags", 10) if ln.startswith("GOT ")]
    assert sorted(got) == sorted(f"GOT b-{i} B" for i in range(10))


def test_push_consumer_gets_messages_sent_after_it_parked(java, server):
    run(java, server, "live", "jt-live", 10)


def test_failed_consumption_comes_back_through_the_retry_topic(java, server):
    run(java, server, "retry", "jt-retry", 5)


def test_orderly_consumer_locks_queues_and_keeps_order(java, server):
    lines = run(java, server, "orderly", "jt-orderly", 40)
    assert "QUEUES [0, 1, 2, 3]" in lines


def test_delay_level_delivers_after_its_time(java, server):
    run(java, server, "delay", "jt-delay", 5)


def test_mqadmin_topic_and_broker_commands(java, server):
    ns = server.namesrv
    out = mqadmin(java, "updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", "jt-adm", "-r", "3", "-w", "3")
    assert f"create topic to {server.address} success." in out
    assert "jt-adm" in mqadmin(java, "topicList", "-n", ns).split()
    route = mqadmin(java, "topicRoute", "-n", ns, "-t", "jt-adm")
    assert '"readQueueNums":3' in route and server.address in route, route
    run(java, server, "produce", "jt-adm", 6)
    status = [ln.split() for ln in mqadmin(java, "topicStatus", "-n", ns, "-t", "jt-adm").splitlines()[1:]]
    assert sorted(int(row[1]) for row in status) == [0, 1, 2]
    assert sum(int(row[3]) for row in status) == 10            # max offsets: 6 sends and a batch of 4
    broker = mqadmin(java, "brokerStatus", "-n", ns, "-b", server.address)
    assert "brokerVersionDesc               : V4_9_7" in broker
