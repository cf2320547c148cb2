"""The Broker facade: sends (topic checks, auto-creation, permissions, queue ids), pulls, consumer offsets and their
persistence, lag, and send-back to the retry topic and the DLQ as RocketMQ's consumerSendMsgBack does (apache/rocketmq
rocketmq-all-4.9.7 SendMessageProcessor, AbstractSendMessageProcessor.msgCheck, PullMessageProcessor,
TopicConfigManager.createTopicInSendMessageMethod / createTopicInSendMessageBackMethod, MixAll.getRetryTopic /
getDLQTopic)."""
import os
import time

import pytest

from rmqcore import GetStatus, Message, PutStatus
from rmqcore.broker import (Broker, BrokerConfig, IllegalNameError, MessageNotFoundError, NoPermissionError,
                            OffsetIllegalError, QueueIdIllegalError, SubscriptionGroupConfig,
                            SubscriptionGroupNotExistError, TopicConfig, TopicNotExistError)
from rmqcore import fastjson


@pytest.fixture
def open_broker(tmp_path, small_config):
    opened = []

    def make(**cfg):
        cfg.setdefault("broker_name", "broker-a")
        b = Broker.open(str(tmp_path), BrokerConfig(**cfg), store_config=small_config)
        opened.append(b)
        return b
    yield make
    for b in opened:
        b.close()


def fill(broker, topic, n, queue_id=0, **kw):
    results = [broker.send(Message(topic, b"body-%d" % i, queue_id=queue_id, **kw)) for i in range(n)]
    assert all(r.status is PutStatus.PUT_OK for r in results)
    broker.store.wait_dispatched()
    return results


# -- send -------------------------------------------------------------------------------------------------------

def test_first_send_auto_creates_topic_with_four_queues(open_broker):
    b = open_broker()
    r = b.send(Message("orders", b"x", queue_id=3))
    assert r.status is PutStatus.PUT_OK
    tc = b.topics()["orders"]
    # min(the producer's default 4, TBW102's 8 write queues); TBW102's perm without PERM_INHERIT.
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (4, 4, 6)
    assert "orders" in fastjson.loads(open(b.topic_config_manager.config_file_path()).read())["topicConfigTable"]
    b.store.wait_dispatched()
    m = b.store.get_messages("g", "orders", 3, 0).messages[0]
    assert m.properties["CLUSTER"] == "DefaultCluster"


def test_send_refused_when_auto_create_off(open_broker):
    b = open_broker(auto_create_topic_enable=False)
    assert "TBW102" not in b.topics()
    with pytest.raises(TopicNotExistError, match="orders"):
        b.send(Message("orders", b"x"))
    assert b.store.max_offset("orders", 0) == 0
    b.create_topic("orders", queue_nums=2)
    assert b.send(Message("orders", b"x", queue_id=1)).status is PutStatus.PUT_OK


def test_send_checks_names_permissions_and_queue_ids(open_broker):
    b = open_broker()
    with pytest.raises(IllegalNameError, match="illegal characters"):
        b.send(Message("bad topic", b"x"))
    with pytest.raises(IllegalNameError, match="longer than"):
        b.send(Message("t" * 128, b"x"))
    with pytest.raises(NoPermissionError, match="SCHEDULE_TOPIC_XXXX"):
        b.send(Message("SCHEDULE_TOPIC_XXXX", b"x"))
    b.create_topic("ro", queue_nums=2, perm=4)
    with pytest.raises(NoPermissionError, match="ro"):
        b.send(Message("ro", b"x"))
    b.create_topic("two", queue_nums=2)
    with pytest.raises(QueueIdIllegalError, match=r"queueId\[2\]"):
        b.send(Message("two", b"x", queue_id=2))
    # A negative queue id picks one of the write queues, as the Java broker does.
    for _ in range(40):
        msg = Message("two", b"x", queue_id=-1)
        b.send(msg)
        assert msg.queue_id in (0, 1)
    b.store.wait_dispatched()
    assert b.store.max_offset("two", 0) + b.store.max_offset("two", 1) == 40
    assert b.store.max_offset("two", 0) > 0 and b.store.max_offset("two", 1) > 0
    assert b.store.max_offset("ro", 0) == 0


def test_broker_without_write_permission_refuses_sends(open_broker):
    b = open_broker(broker_permission=4)
    with pytest.raises(NoPermissionError, match="broker"):
        b.send(Message("orders", b"x"))
    b.update_broker_permission(6)
    assert b.send(Message("orders", b"x")).status is PutStatus.PUT_OK
    b.update_broker_permission(4)                      # a cached topic does not bypass the broker's permission
    with pytest.raises(NoPermissionError, match="broker"):
        b.send(Message("orders", b"x"))


def test_topic_change_reaches_the_send_path_at_once(open_broker):
    b = open_broker()
    b.create_topic("t", queue_nums=2)
    b.send(Message("t", b"x", queue_id=1))
    b.create_topic("t", queue_nums=1)
    with pytest.raises(QueueIdIllegalError):
        b.send(Message("t", b"x", queue_id=1))
    b.create_topic("t", queue_nums=1, perm=4)
    with pytest.raises(NoPermissionError):
        b.send(Message("t", b"x", queue_id=0))
    b.delete_topic("t")
    b.config.auto_create_topic_enable = False
    b.topic_config_manager.delete_topic_config("TBW102")
    with pytest.raises(TopicNotExistError):
        b.send(Message("t", b"x", queue_id=0))


def test_permission_changed_after_cached_sends_applies_to_the_next_send_and_batch(open_broker):
    # The topic's checks are cached after its first send: every change of the topic table must reach the very
    # next send, whichever way it is made (update_topic, the manager itself, a reload of topics.json).
    b = open_broker()
    b.create_topic("t", queue_nums=2)
    fill(b, "t", 3)
    b.update_topic(TopicConfig("t", read_queue_nums=2, write_queue_nums=2, perm=4))
    with pytest.raises(NoPermissionError, match=r"topic\[t\]"):
        b.send(Message("t", b"x", queue_id=0))
    with pytest.raises(NoPermissionError, match=r"topic\[t\]"):
        b.send_batch([Message("t", b"x", queue_id=0)])
    b.update_topic(TopicConfig("t", read_queue_nums=2, write_queue_nums=2, perm=6))
    assert b.send(Message("t", b"x", queue_id=1)).status is PutStatus.PUT_OK
    b.topic_config_manager.update_topic_config(TopicConfig("t", read_queue_nums=2, write_queue_nums=2, perm=2))
    with pytest.raises(NoPermissionError, match="pulling"):
        b.pull("g", "t", 0, 0)
    assert b.send(Message("t", b"x", queue_id=1)).status is PutStatus.PUT_OK     # write-only still takes sends
    # topics.json edited on disk and loaded again: the reload replaces the cached topic too.
    path = b.topic_config_manager.config_file_path()
    doc = fastjson.loads(open(path).read())
    doc["topicConfigTable"]["t"]["perm"] = 4
    with open(path, "w") as f:
        f.write(fastjson.dumps(doc, True))
    b.topic_config_manager.load()
    with pytest.raises(NoPermissionError, match=r"topic\[t\]"):
        b.send(Message("t", b"x", queue_id=0))
    b.store.wait_dispatched()
    assert b.store.max_offset("t", 0) == 3 and b.store.max_offset("t", 1) == 2


def test_queue_count_and_filter_type_changed_after_cached_sends(open_broker):
    b = open_broker()
    b.create_topic("t", queue_nums=1)
    fill(b, "t", 2)
    with pytest.raises(QueueIdIllegalError):
        b.send(Message("t", b"x", queue_id=2))
    b.create_topic("t", queue_nums=4)                   # more queues: the id refused before is taken now
    assert b.send(Message("t", b"x", queue_id=2)).status is PutStatus.PUT_OK
    assert b.send_batch([Message("t", b"x", queue_id=3)])[0].status is PutStatus.PUT_OK
    b.update_topic(TopicConfig("t", read_queue_nums=4, write_queue_nums=4, topic_filter_type="MULTI_TAG"))
    msg = Message("t", b"x", queue_id=0)
    b.send(msg)
    assert msg.sys_flag & 0x2                            # the MULTI_TAG flag of a topic cached without it
    batch = [Message("t", b"x", queue_id=1)]
    b.send_batch(batch)
    assert batch[0].sys_flag & 0x2
    b.update_topic(TopicConfig("t", read_queue_nums=4, write_queue_nums=4))
    msg = Message("t", b"x", queue_id=0)
    b.send(msg)
    assert not msg.sys_flag & 0x2


def test_a_topic_change_during_the_first_checks_is_not_cached_over(open_broker, monkeypatch):
    # The checks of a topic's first send read its config, then another thread changes it before the entry is
    # stored: the stale entry must not be kept (it would let every later send bypass the change).
    b = open_broker()
    b.create_topic("t", queue_nums=2)
    checks = b._topic_for_send

    def checks_then_a_concurrent_change(topic):
        tc = checks(topic)
        b.create_topic("t", queue_nums=2, perm=4)       # what another thread does meanwhile
        return tc
    monkeypatch.setattr(b, "_topic_for_send", checks_then_a_concurrent_change)
    assert b.send(Message("t", b"x", queue_id=0)).status is PutStatus.PUT_OK     # raced: checked before the change
    monkeypatch.undo()
    with pytest.raises(NoPermissionError, match=r"topic\[t\]"):
        b.send(Message("t", b"x", queue_id=0))


def test_retry_topic_sends_see_group_changes_at_once(open_broker):
    # A retry topic's entry is cached like any other, but its sends always read the group's retry_max_times.
    b = open_broker()
    b.update_group(SubscriptionGroupConfig("g", retry_max_times=16))
    msg = Message("%RETRY%g", b"x", reconsume_times=3)
    b.send(msg)
    assert msg.topic == "%RETRY%g"
    b.update_group(SubscriptionGroupConfig("g", retry_max_times=3))
    msg = Message("%RETRY%g", b"x", reconsume_times=3)
    b.send(msg)
    assert msg.topic == "%DLQ%g"


def test_send_batch_of_mixed_topics_checks_each_message(open_broker):
    # Runs of one topic share a lookup in send_batch; a message needing the full checks in the middle of a run
    # (a queue id to pick, a first send, a MULTI_TAG topic) must still get them, and so must the ones after it.
    b = open_broker()
    b.update_topic(TopicConfig("mt", read_queue_nums=2, write_queue_nums=2, topic_filter_type="MULTI_TAG"))
    batch = [Message("fresh", b"0", queue_id=0), Message("fresh", b"1", queue_id=-1),
             Message("mt", b"2", queue_id=1), Message("fresh", b"3", queue_id=3), Message("mt", b"4", queue_id=0),
             Message("fresh", b"5", queue_id=2)]
    results = b.send_batch(batch)
    assert [r.status for r in results] == [PutStatus.PUT_OK] * 6
    assert 0 <= batch[1].queue_id < 4
    assert [bool(m.sys_flag & 0x2) for m in batch] == [False, False, True, False, True, False]
    assert b.topics()["fresh"].write_queue_nums == 4                 # auto-created by the batch's first message
    with pytest.raises(QueueIdIllegalError, match=r"queueId\[4\]"):
        b.send_batch([Message("fresh", b"6", queue_id=0), Message("mt", b"7", queue_id=0),
                      Message("fresh", b"8", queue_id=1), Message("fresh", b"9", queue_id=4)])
    b.store.wait_dispatched()
    assert sum(b.store.max_offset("fresh", q) for q in range(4)) == 4
    assert sum(b.store.max_offset("mt", q) for q in range(2)) == 2


def test_send_takes_only_messages_and_fills_missing_properties(open_broker):
    b = open_broker()
    b.create_topic("t", queue_nums=1)
    with pytest.raises(TypeError):
        b.send(None)
    with pytest.raises(TypeError):
        b.send_batch([Message("t", b"ok"), "not a message"])
    msg = Message("t", b"x")
    msg.properties = None
    assert b.send(msg).status is PutStatus.PUT_OK
    assert msg.properties["CLUSTER"] == "DefaultCluster"
    b.store.wait_dispatched()
    assert b.store.max_offset("t", 0) == 1              # the refused batch stored nothing


def test_send_batch_checks_every_message_before_storing_any(open_broker):
    b = open_broker()
    b.create_topic("two", queue_nums=2)
    rs = b.send_batch([Message("two", b"%d" % i, queue_id=i % 2) for i in range(10)])
    assert [r.status for r in rs] == [PutStatus.PUT_OK] * 10
    with pytest.raises(QueueIdIllegalError):
        b.send_batch([Message("two", b"ok", queue_id=0), Message("two", b"bad", queue_id=5)])
    with pytest.raises(NoPermissionError):
        b.send_batch([Message("two", b"tx", queue_id=0, properties={"TRAN_MSG": "true"})])
    b.store.wait_dispatched()
    assert b.store.max_offset("two", 0) == 5 and b.store.max_offset("two", 1) == 5
    assert b.store.get_messages("g", "two", 1, 0).messages[0].properties["CLUSTER"] == "DefaultCluster"


def test_send_batch_stores_the_broker_cluster_as_a_batch_property(open_broker):
    # sendBatchMessage puts CLUSTER on the MessageExtBatch, whose encoder appends it to every inner record: each
    # record carries the broker's cluster (replacing a producer's own), the messages' dicts are left alone.
    b = open_broker()
    b.create_topic("t", queue_nums=1)
    msgs = [Message("t", b"a"), Message("t", b"b", properties={"CLUSTER": "forged", "k": "v"})]
    msgs[0].properties = None
    rs = b.send_batch(msgs)
    assert msgs[1].properties == {"CLUSTER": "forged", "k": "v", "UNIQ_KEY": msgs[1].properties["UNIQ_KEY"]}
    assert "CLUSTER" not in msgs[0].properties
    b.store.wait_dispatched()
    got = b.store.get_messages("g", "t", 0, 0).messages
    assert [m.commitlog_offset for m in got] == [r.commitlog_offset for r in rs]
    assert [m.properties["CLUSTER"] for m in got] == ["DefaultCluster"] * 2
    assert got[1].properties["k"] == "v"


def test_multi_tag_topic_sets_the_sys_flag(open_broker):
    b = open_broker()
    b.update_topic(TopicConfig("mt", read_queue_nums=1, write_queue_nums=1, topic_filter_type="MULTI_TAG"))
    fill(b, "mt", 1)
    assert b.store.get_messages("g", "mt", 0, 0).messages[0].sys_flag & 0x2


def test_reject_transaction_message(open_broker):
    b = open_broker(reject_transaction_message=True)
    with pytest.raises(NoPermissionError, match="transaction"):
        b.send(Message("orders", b"x", properties={"TRAN_MSG": "true"}))


def test_transaction_checker_is_kept(tmp_path, small_config):
    def checker(msg):
        return "COMMIT"
    with Broker.open(str(tmp_path), BrokerConfig(broker_name="b"), store_config=small_config,
                     transaction_checker=checker) as b:
        assert b.transaction_checker is checker


# -- pull -------------------------------------------------------------------------------------------------------

def test_pull_checks_group_topic_and_permissions(open_broker):
    b = open_broker(auto_create_subscription_group=False)
    fill(b, "orders", 3)
    with pytest.raises(SubscriptionGroupNotExistError):
        b.pull("g1", "orders", 0, 0)
    b.update_group(SubscriptionGroupConfig("g1"))
    r = b.pull("g1", "orders", 0, 0)
    assert r.status is GetStatus.FOUND and [bytes(m.body) for m in r.messages] == [b"body-0", b"body-1", b"body-2"]
    del r
    with pytest.raises(TopicNotExistError):
        b.pull("g1", "nope", 0, 0)
    with pytest.raises(QueueIdIllegalError):
        b.pull("g1", "orders", 4, 0)
    tc = b.topics()["orders"]
    tc.perm = 2
    b.update_topic(tc)
    with pytest.raises(NoPermissionError, match="pulling"):
        b.pull("g1", "orders", 0, 0)
    b.subscription_group_manager.disable_consume("g1")
    with pytest.raises(NoPermissionError, match="g1"):
        b.pull("g1", "orders", 0, 0)


def test_pull_long_polls_like_the_store(open_broker):
    b = open_broker()
    fill(b, "orders", 1)
    t0 = time.monotonic()
    r = b.pull("g", "orders", 0, 1, wait=0.3)
    assert r.status is GetStatus.OFFSET_OVERFLOW_ONE and time.monotonic() - t0 >= 0.25


# -- offsets ----------------------------------------------------------------------------------------------------

def test_commit_and_query_offsets(open_broker):
    b = open_broker()
    fill(b, "orders", 10, queue_id=1)
    assert b.query_offset("g", "orders", 1) == -1
    b.commit_offset("g", "orders", 1, 4)
    assert b.query_offset("g", "orders", 1) == 4
    b.commit_offset("g", "orders", 1, 10)           # == max offset: everything consumed
    assert b.query_offset("g", "orders", 1) == 10
    b.commit_offset("g", "orders", 1, 2)            # going back (a reset) is allowed, as in RocketMQ
    assert b.query_offset("g", "orders", 1) == 2
    with pytest.raises(OffsetIllegalError, match="past the queue's max offset 10"):
        b.commit_offset("g", "orders", 1, 11)
    with pytest.raises(OffsetIllegalError, match="negative"):
        b.commit_offset("g", "orders", 1, -1)
    with pytest.raises(QueueIdIllegalError):
        b.commit_offset("g", "orders", 7, 0)
    with pytest.raises(TopicNotExistError):
        b.commit_offset("g", "nope", 0, 0)
    with pytest.raises(IllegalNameError):
        b.commit_offset("g@x", "orders", 1, 0)
    assert b.query_offset("g", "orders", 1) == 2


def test_offset_below_min_is_accepted_and_corrected_by_the_next_pull(open_broker):
    # A queue whose first entries point into deleted commitlog files: the clean service moves the queue's min
    # offset (correct_min_offset, as after a delete); a commit below it is RocketMQ-legal and the next pull answers
    # OFFSET_TOO_SMALL with next_begin_offset at the min, where the consumer carries on.
    b = open_broker()
    results = fill(b, "orders", 20)
    b.store.find_consume_queue("orders", 0).correct_min_offset(results[10].commitlog_offset)
    assert b.store.min_offset("orders", 0) == 10
    b.commit_offset("g", "orders", 0, 3)
    r = b.pull("g", "orders", 0, b.query_offset("g", "orders", 0))
    assert r.status is GetStatus.OFFSET_TOO_SMALL and r.next_begin_offset == 10
    b.commit_offset("g", "orders", 0, r.next_begin_offset)
    assert b.pull("g", "orders", 0, 10).messages[0].queue_offset == 10


def test_lag_per_topic(open_broker):
    b = open_broker()
    fill(b, "orders", 10, queue_id=0)
    fill(b, "orders", 5, queue_id=1)
    fill(b, "audit", 3, queue_id=0)
    b.commit_offset("g", "orders", 0, 4)
    b.commit_offset("g", "audit", 0, 3)
    # Queue 1 has no commit: counted from 0, as RocketMQ's consumer stats do.
    assert b.lag("g") == {"orders": 6 + 5, "audit": 0}
    detail = b.lag_detail("g")["orders"]
    assert detail[0] == {"broker_offset": 10, "consumer_offset": 4, "diff": 6}
    assert b.lag("other") == {}


def test_remove_group_and_topic_offsets(open_broker):
    b = open_broker()
    fill(b, "a", 2)
    fill(b, "b", 2)
    for g in ("g1", "g2"):
        for t in ("a", "b"):
            b.commit_offset(g, t, 0, 1)
    assert b.remove_group_offsets("g1") == 2
    assert b.query_offset("g1", "a", 0) == -1 and b.query_offset("g2", "a", 0) == 1
    assert b.remove_topic_offsets("b") == 1
    assert b.query_offset("g2", "b", 0) == -1 and b.query_offset("g2", "a", 0) == 1
    assert b.delete_group("g2") is True           # auto-created by its first commit
    assert "g2" not in b.groups() and b.query_offset("g2", "a", 0) == -1


def test_offsets_persisted_at_close_and_on_the_timer(tmp_path, small_config):
    root = str(tmp_path)
    cfg = BrokerConfig(broker_name="b", flush_consumer_offset_interval=100)
    with Broker.open(root, cfg, store_config=small_config) as b:
        fill(b, "orders", 5)
        b.commit_offset("g", "orders", 0, 3)
        path = b.consumer_offset_manager.config_file_path()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if "orders@g" in open(path).read():
                    break
            except FileNotFoundError:
                pass
            time.sleep(0.02)
        assert fastjson.loads(open(path).read())["offsetTable"]["orders@g"] == {0: 3}
        b.commit_offset("g", "orders", 0, 5)
    with Broker.open(root, BrokerConfig(broker_name="b"), store_config=small_config) as b:
        assert b.query_offset("g", "orders", 0) == 5
        assert b.topics()["orders"].write_queue_nums == 4


def test_a_fresh_broker_leaves_its_config_files(tmp_path, small_config):
    with Broker.open(str(tmp_path), BrokerConfig(broker_name="b"), store_config=small_config):
        pass
    names = sorted(os.listdir(tmp_path / "config"))
    assert {"consumerOffset.json", "topics.json", "subscriptionGroup.json"} <= set(names)
    assert (tmp_path / "config" / "consumerOffset.json").read_text() == '{\n\t"offsetTable":{}\n}'


def test_two_brokers_cannot_share_a_directory(open_broker, tmp_path, small_config):
    open_broker()
    from rmqcore import StoreLockedError
    with pytest.raises(StoreLockedError):
        Broker.open(str(tmp_path), BrokerConfig(broker_name="broker-a"), store_config=small_config)


# -- retry and DLQ ----------------------------------------------------------------------------------------------

def deliver_scheduled(b):
    """Retry messages go through the delay levels (SCHEDULE_TOPIC_XXXX, 10 s for the first): deliver all of them
    now, as the schedule service will once their time comes."""
    svc = b.store.schedule_service
    b.store.wait_dispatched()
    real = svc.clock
    svc.clock = lambda: real() + 10 ** 9
    try:
        svc.deliver_due()
    finally:
        svc.clock = real
    b.store.wait_dispatched()


def pull_one(b, group, topic, queue_id=0, offset=None):
    if topic.startswith("%RETRY%"):
        deliver_scheduled(b)
    b.store.wait_dispatched()
    if offset is None:
        offset = max(b.query_offset(group, topic, queue_id), 0)
    r = b.pull(group, topic, queue_id, offset, max_count=1)
    assert r.status is GetStatus.FOUND, r.status
    b.commit_offset(group, topic, queue_id, r.next_begin_offset)
    return r.messages[0]


def test_send_back_goes_to_retry_topic_with_rocketmq_properties(open_broker):
    b = open_broker()
    b.send(Message("orders", b"body-0", queue_id=0, tags="created", keys=["order-1"], flag=7,
                   born_host="10.1.2.3:45678"))
    b.store.wait_dispatched()
    original = b.store.get_messages("x", "orders", 0, 0).messages[0]
    m = pull_one(b, "billing", "orders")
    r = b.send_back(m, "billing")
    assert r.status is PutStatus.PUT_OK
    b.store.wait_dispatched()
    assert b.store.max_offset("SCHEDULE_TOPIC_XXXX", 2) == 1          # delay level 3 = 3 + reconsume times 0
    tc = b.topics()["%RETRY%billing"]
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (1, 1, 6)
    retry = pull_one(b, "billing", "%RETRY%billing")
    assert retry.reconsume_times == 1
    assert bytes(retry.body) == b"body-0" and retry.tags == "created" and retry.keys == ["order-1"]
    p = retry.properties
    assert p["RETRY_TOPIC"] == "orders"
    assert p["ORIGIN_MESSAGE_ID"] == original.msg_id
    assert p["WAIT"] == "false"
    assert retry.born_timestamp == m.born_timestamp and retry.uniq_key == m.uniq_key
    assert retry.flag == 7 and retry.born_host == "10.1.2.3:45678" and retry.sys_flag == m.sys_flag
    # The second failure: reconsume times 2, level 4, the first attempt's id kept, RETRY_TOPIC still the original.
    b.send_back(retry, "billing")
    b.store.wait_dispatched()
    assert b.store.max_offset("SCHEDULE_TOPIC_XXXX", 3) == 1          # level 4
    again = pull_one(b, "billing", "%RETRY%billing")
    assert again.reconsume_times == 2
    assert again.properties["ORIGIN_MESSAGE_ID"] == original.msg_id and again.properties["RETRY_TOPIC"] == "orders"


def test_send_back_with_explicit_delay_level(open_broker):
    b = open_broker()
    fill(b, "orders", 1)
    b.send_back(pull_one(b, "g", "orders"), "g", delay_level=7)
    b.store.wait_dispatched()
    assert b.store.max_offset("SCHEDULE_TOPIC_XXXX", 6) == 1          # level 7
    assert pull_one(b, "g", "%RETRY%g").reconsume_times == 1


def test_retries_end_in_the_dlq_after_retry_max_times(open_broker):
    b = open_broker()
    b.update_group(SubscriptionGroupConfig("g", retry_max_times=3))
    fill(b, "orders", 1)
    m = pull_one(b, "g", "orders")
    for attempt in range(3):
        b.send_back(m, "g")
        m = pull_one(b, "g", "%RETRY%g")
        assert m.reconsume_times == attempt + 1
    r = b.send_back(m, "g")                           # reconsume times 3 >= retry max times 3
    assert r.status is PutStatus.PUT_OK
    dlq = b.topics()["%DLQ%g"]
    assert (dlq.read_queue_nums, dlq.write_queue_nums, dlq.perm) == (1, 1, 6)
    dead = pull_one(b, "g", "%DLQ%g")
    assert dead.queue_id == 0 and dead.reconsume_times == 4 and dead.properties["DELAY"] == "0"
    assert dead.properties["RETRY_TOPIC"] == "orders"
    assert b.store.max_offset("%RETRY%g", 0) == 3


def test_negative_delay_level_goes_straight_to_dlq(open_broker):
    b = open_broker()
    fill(b, "orders", 1)
    b.send_back(pull_one(b, "g", "orders"), "g", delay_level=-1)
    assert pull_one(b, "g", "%DLQ%g").reconsume_times == 1
    assert "%RETRY%g" in b.topics()                  # RocketMQ creates the retry topic before deciding
    assert b.store.max_offset("%RETRY%g", 0) == 0


def test_max_reconsume_times_from_the_consumer_overrides_the_group(open_broker):
    b = open_broker()
    fill(b, "orders", 1)
    b.send_back(pull_one(b, "g", "orders"), "g", max_reconsume_times=0)
    b.store.wait_dispatched()
    assert b.store.max_offset("%DLQ%g", 0) == 1


def test_send_back_with_no_retry_queues_stores_nothing(open_broker):
    b = open_broker()
    b.update_group(SubscriptionGroupConfig("g", retry_queue_nums=0))
    fill(b, "orders", 1)
    assert b.send_back(pull_one(b, "g", "orders"), "g") is None
    assert "%RETRY%g" not in b.topics()


def test_send_back_of_a_message_no_longer_stored(open_broker):
    b = open_broker()
    fill(b, "orders", 1)
    m = pull_one(b, "g", "orders")

    class Gone:
        commitlog_offset = b.store.commit_log.max_offset + 10_000
        msg_id = m.msg_id
    with pytest.raises(MessageNotFoundError, match="look message by offset failed"):
        b.send_back(Gone(), "g")


def test_client_sending_to_a_retry_topic_past_max_times_lands_in_dlq(open_broker):
    b = open_broker()
    b.update_group(SubscriptionGroupConfig("g", retry_max_times=2))
    msg = Message("%RETRY%g", b"x", reconsume_times=2)
    assert b.send(msg).status is PutStatus.PUT_OK
    assert msg.topic == "%DLQ%g"
    b.store.wait_dispatched()
    assert b.store.max_offset("%DLQ%g", 0) == 1


def test_groups_and_topics_listing(open_broker):
    b = open_broker()
    assert {"TOOLS_CONSUMER", "SELF_TEST_C_GROUP"} <= set(b.groups())
    assert {"TBW102", "SELF_TEST_TOPIC", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "OFFSET_MOVED_EVENT",
            "DefaultCluster", "DefaultCluster_REPLY_TOPIC", "broker-a"} <= set(b.topics())
    b.topics()["TBW102"].perm = 0                       # a copy: the broker's table is untouched
    assert b.topics()["TBW102"].perm == 7


def test_demo_runs_end_to_end(tmp_path, capsys):
    from rmqcore.broker import demo
    assert demo.run(str(tmp_path / "demo"), 2000) == 0
    out = capsys.readouterr().out
    assert "2 of 2 failing messages in %DLQ%flaky-audit" in out
    assert '"DemoOrders@billing":{0:' in out
    assert sorted(os.listdir(tmp_path / "demo" / "config"))[:1] == ["consumerOffset.json"]


def test_transactions_through_the_broker(tmp_path):
    # Broker.send with TRAN_MSG "true" stores a half message (invisible in the real topic); end_transaction commits
    # one and rolls the other back; the check service asks the checker about a half left open.
    from rmqcore import Message
    from rmqcore.broker import Broker
    asked = []

    def checker(m):
        asked.append(m.properties.get("ID"))
        return True

    with Broker.open(str(tmp_path / "b"), transaction_checker=checker) as broker:
        tx = {"TRAN_MSG": "true", "PGROUP": "pg"}
        r1 = broker.send(Message("Orders", b"one", 0, properties=dict(tx, ID="1")))
        r2 = broker.send(Message("Orders", b"two", 0, properties=dict(tx, ID="2")))
        broker.store.wait_dispatched()
        assert broker.store.max_offset("Orders", 0) == 0            # halves are not consumable
        assert broker.end_transaction(r1.commitlog_offset, "pg", True).ok
        assert broker.end_transaction(r2.commitlog_offset, "pg", False) is None
        broker.store.wait_dispatched()
        g = broker.pull("cg", "Orders", 0, 0)
        assert [bytes(m.body) for m in g.messages] == [b"one"]
