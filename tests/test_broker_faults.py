"""The broker under hostile calls and files (issue 28, items 1-3): a value the broker could not read back is refused
when it is set, every accepted value survives a close/open, a message the store would drop later is refused at once
(send-back, delayed and timed delivery, transaction commit), and a config file that is a directory, a fifo or
unreadable is a ConfigFileError naming it, with the .bak used, no descriptor leaked and no abort file left."""
import os
import stat

import pytest
from hypothesis import given, settings, strategies as st

from rmqcore import Message, MessageIllegalError, MessageStore, PutStatus
from rmqcore.broker import (Broker, BrokerConfig, ConfigFileError, IllegalNameError, SubscriptionGroupConfig,
                            TopicConfig)
from rmqcore.broker.consumer_offset_manager import ConsumerOffsetManager
from rmqcore.broker.errors import InvalidConfigError
from rmqcore.broker.subscription_group_config import (CustomizedRetryPolicy, ExponentialRetryPolicy,
                                                      GroupRetryPolicy)
from rmqcore.errors import StoreLayoutError

INT_MAX = (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


def open_broker(path, small_config, **cfg):
    cfg.setdefault("broker_name", "broker-a")
    return Broker.open(str(path), BrokerConfig(**cfg), store_config=small_config)


def reopen(path, small_config, broker):
    broker.close()
    return open_broker(path, small_config)


# -- 1. every setter refuses what the reader refuses ---------------------------------------------------------------

def test_issue_reproducer_perm_beyond_int_is_refused_and_broker_reopens(tmp_path, small_config):
    b = open_broker(tmp_path, small_config)
    with pytest.raises(InvalidConfigError, match=r"perm: 1099511627776 is outside") as e:
        b.update_topic(TopicConfig("Tp", read_queue_nums=4, write_queue_nums=4, perm=2 ** 40))
    assert e.value.field.endswith(".perm")
    with pytest.raises(InvalidConfigError, match="readQueueNums: 2147483648 is outside"):
        b.create_topic("Tq", 2 ** 31)
    assert "Tp" not in b.topics() and "Tq" not in b.topics()
    b = reopen(tmp_path, small_config, b)          # the issue: this open failed on every try
    assert "Tp" not in b.topics()
    b.close()


@pytest.mark.parametrize("change, field", [
    (dict(read_queue_nums=-1), "readQueueNums"),
    (dict(write_queue_nums=True), "writeQueueNums"),
    (dict(topic_sys_flag=1.5), "topicSysFlag"),
    (dict(topic_filter_type="REGEX"), "topicFilterType"),
    (dict(order=1), "order"),
    (dict(attributes={"message.type": 7}), "attributes.message.type"),
])
def test_topic_values_the_reader_refuses_are_refused_naming_the_field(tmp_path, small_config, change, field):
    with open_broker(tmp_path, small_config) as b:
        with pytest.raises(InvalidConfigError) as e:
            b.update_topic(TopicConfig("T", **change))
        assert e.value.field.endswith(field), e.value.field
        assert "T" not in b.topics()


def test_group_values_the_reader_refuses_are_refused(tmp_path, small_config):
    with open_broker(tmp_path, small_config) as b:
        for change, field in ((dict(retry_max_times=-1), "retryMaxTimes"), (dict(retry_queue_nums=2 ** 31),
                              "retryQueueNums"), (dict(broker_id=2 ** 63), "brokerId"),
                              (dict(consume_enable="yes"), "consumeEnable")):
            with pytest.raises(InvalidConfigError) as e:
                b.update_group(SubscriptionGroupConfig("G", **change))
            assert e.value.field.endswith(field)
        with pytest.raises(InvalidConfigError, match="max_delivery_attempts"):
            b.create_group("G", max_delivery_attempts=0)
        with pytest.raises(InvalidConfigError, match="consumeMessageOrderly"):
            b.create_group("G", fifo="yes")
        assert "G" not in b.groups()


def test_offsets_outside_the_readers_limits_are_refused(tmp_path):
    com = ConsumerOffsetManager(str(tmp_path))
    from rmqcore.broker import OffsetIllegalError, QueueIdIllegalError
    with pytest.raises(QueueIdIllegalError, match="queue_id"):
        com.commit_offset("g", "t", 2 ** 31, 0)
    with pytest.raises(QueueIdIllegalError, match="queue_id"):
        com.commit_offset("g", "t", -1, 0)
    with pytest.raises(OffsetIllegalError, match="offset"):
        com.commit_offset("g", "t", 0, 2 ** 63)
    with pytest.raises(OffsetIllegalError, match="offset"):
        com.commit_offset("g", "t", 0, True)
    assert com.offset_table == {}


def test_broker_config_setters_check_every_field():
    c = BrokerConfig(broker_name="b")
    for name, bad in (("broker_permission", 16), ("broker_name", ""), ("broker_cluster_name", 5),
                      ("default_topic_queue_nums", 2 ** 31), ("auto_create_topic_enable", 1),
                      ("flush_consumer_offset_interval", 0), ("transaction_check_max", 0)):
        with pytest.raises(ValueError, match=name):
            setattr(c, name, bad)
        with pytest.raises(ValueError, match=name):
            BrokerConfig(**{name: bad})
    assert c.broker_permission == 6 and c.broker_name == "b"


names = st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=20)
java_ints = st.one_of(st.integers(-5, 40), st.integers(-(2 ** 65), 2 ** 65), st.sampled_from(
    [INT_MAX, INT_MAX + 1, -(1 << 31), LONG_MAX, LONG_MAX + 1]))
any_value = st.one_of(java_ints, st.booleans(), st.text(max_size=5), st.none(), st.floats(allow_nan=True))


@settings(max_examples=40)
@given(name=names, read=any_value, write=java_ints, perm=java_ints, sys_flag=java_ints, order=any_value,
       filter_type=st.sampled_from(["SINGLE_TAG", "MULTI_TAG", "BAD", 3]),
       message_type=st.one_of(st.none(), st.sampled_from(["NORMAL", "FIFO", "DELAY", "TRANSACTION"])),
       attrs=st.one_of(st.none(), st.dictionaries(st.text(max_size=8), st.one_of(st.text(max_size=8), java_ints),
                                                  max_size=3)))
def test_every_accepted_topic_reads_back_after_close_and_open(tmp_path_factory, small_config, name, read, write,
                                                              perm, sys_flag, order, filter_type, message_type,
                                                              attrs):
    path = tmp_path_factory.mktemp("topic")
    b = open_broker(path, small_config)
    tc = TopicConfig(name, read_queue_nums=read, write_queue_nums=write, perm=perm, topic_sys_flag=sys_flag,
                     order=order, topic_filter_type=filter_type, attributes=attrs)
    if message_type is not None:
        tc.message_type = message_type
    try:
        b.update_topic(tc)
    except (InvalidConfigError, IllegalNameError):
        accepted = False
    else:
        accepted = True
    b = reopen(path, small_config, b)            # opens whatever was tried
    try:
        if accepted:
            assert b.topics()[name] == tc
            assert b.topics()[name].message_type == (message_type or (attrs or {}).get("message.type", "NORMAL"))
        else:
            assert name not in b.topics()
        # What the reader's limits allow is never refused: in range, right types, every field.
        if (all(type(v) is int and 0 <= v <= INT_MAX for v in (read, write, perm, sys_flag))
                and type(order) is bool and filter_type in ("SINGLE_TAG", "MULTI_TAG")
                and all(type(v) is str for v in (attrs or {}).values())):
            assert accepted
    finally:
        b.close()


retry_policies = st.one_of(
    st.none(),
    st.builds(GroupRetryPolicy, st.sampled_from(["CUSTOMIZED", "EXPONENTIAL"]),
              st.one_of(st.none(), st.builds(ExponentialRetryPolicy, java_ints, java_ints, java_ints)),
              st.one_of(st.none(), st.builds(CustomizedRetryPolicy, st.lists(java_ints, max_size=4)))))


@settings(max_examples=40)
@given(name=names, retry_max=java_ints, retry_queues=java_ints, broker_id=java_ints, enable=any_value,
       orderly=st.one_of(st.none(), st.booleans()), policy=retry_policies)
def test_every_accepted_group_reads_back_after_close_and_open(tmp_path_factory, small_config, name, retry_max,
                                                              retry_queues, broker_id, enable, orderly, policy):
    path = tmp_path_factory.mktemp("group")
    b = open_broker(path, small_config)
    g = SubscriptionGroupConfig(name, retry_max_times=retry_max, retry_queue_nums=retry_queues, broker_id=broker_id,
                                consume_enable=enable, consume_message_orderly=orderly, group_retry_policy=policy)
    try:
        b.update_group(g)
        accepted = True
    except (InvalidConfigError, IllegalNameError):
        accepted = False
    b = reopen(path, small_config, b)
    try:
        if accepted:
            back = b.groups()[name]
            assert back == g
            assert back.consume_message_orderly == bool(orderly)
            assert back.max_delivery_attempts == retry_max + 1
        else:
            assert name not in b.groups()
        policy_ok = policy is None or all(
            type(v) is int and LONG_MIN <= v <= LONG_MAX
            for p in (policy.exponential, policy.customized) if p is not None
            for v in (p.next if isinstance(p, CustomizedRetryPolicy) else (p.initial, p.max, p.multiplier)))
        if (0 <= retry_max <= INT_MAX and 0 <= retry_queues <= INT_MAX and LONG_MIN <= broker_id <= LONG_MAX
                and type(enable) is bool and policy_ok):
            assert accepted
    finally:
        b.close()


@settings(max_examples=40)
@given(offsets=st.lists(st.tuples(st.sampled_from(["g1", "g2"]), st.sampled_from(["t1", "t2"]), java_ints,
                                  java_ints), max_size=8))
def test_every_accepted_offset_reads_back(tmp_path_factory, offsets):
    root = str(tmp_path_factory.mktemp("offsets"))
    com = ConsumerOffsetManager(root)
    expect = {}
    for group, topic, q, off in offsets:
        try:
            com.commit_offset(group, topic, q, off)
        except ValueError:
            assert not (0 <= q <= INT_MAX and LONG_MIN <= off <= LONG_MAX)
            continue
        expect[(group, topic, q)] = off
    com.persist()
    back = ConsumerOffsetManager(root)
    back.load()
    for (group, topic, q), off in expect.items():
        assert back.query_offset(group, topic, q) == off


def _broker_field_values():
    """Any subset of BrokerConfig's fields, each mostly of its own type (edges of the Java ranges included), now
    and then of another."""
    import dataclasses
    ints = st.one_of(st.integers(1, 15), st.integers(-2, 40),
                     st.sampled_from([0, INT_MAX, INT_MAX + 1, LONG_MAX, LONG_MAX + 1]))
    by_type = {"int": ints, "bool": st.booleans(), "str": st.text(min_size=1, max_size=6)}
    by_type["str | None"] = st.one_of(st.none(), by_type["str"])
    junk = st.one_of(st.none(), st.floats(), st.text(max_size=2), st.booleans())
    fields = {f.name: st.one_of(*[by_type[str(f.type)]] * 6, junk) for f in dataclasses.fields(BrokerConfig)}
    # Up to three fields at a time, so that most examples are accepted and each field's edges are reached.
    return st.lists(st.sampled_from(sorted(fields)), max_size=3, unique=True).flatmap(
        lambda names: st.fixed_dictionaries({n: fields[n] for n in names}))


@settings(max_examples=60)
@given(values=_broker_field_values())
def test_every_accepted_broker_config_opens(tmp_path_factory, small_config, values):
    try:
        cfg = BrokerConfig(**values)
    except ValueError:
        return
    path = str(tmp_path_factory.mktemp("bc"))
    Broker.open(path, cfg, store_config=small_config).close()
    with Broker.open(path, cfg, store_config=small_config) as b:       # its topics.json reads back
        topics = b.topics()
        assert cfg.broker_name in topics and cfg.broker_cluster_name in topics
        if cfg.auto_create_topic_enable:
            assert topics["TBW102"].write_queue_nums == cfg.default_topic_queue_nums


# -- 2. no path acknowledges what the store drops later ------------------------------------------------------------

def test_issue_reproducer_send_back_with_a_long_group_is_refused(tmp_path, small_config):
    b = open_broker(tmp_path, small_config)
    r = b.send(Message("orders", b"x", queue_id=0))
    ext = b.store.look_message(r.commitlog_offset)
    group = "G" * 200                       # a legal group (<= 255), but %RETRY% + it is 207 > 127
    with pytest.raises(IllegalNameError, match="retry topic"):
        b.send_back(ext, group)
    assert f"%RETRY%{group}" not in b.topics() and f"%DLQ%{group}" not in b.topics()
    # The longest group whose retry topic fits works end to end.
    ok_group = "G" * 120
    assert b.send_back(ext, ok_group, delay_level=-1).status is PutStatus.PUT_OK      # straight to the DLQ
    b.close()


def wait_for(cond, timeout=10.0):
    import time
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_delayed_puts_near_the_size_limit_are_refused_or_delivered(tmp_path, small_config):
    # Under the schedule topic (19 bytes) a record is smaller than when its level delivers it under its real topic
    # (127 bytes here): a put that fits now but not then was acknowledged and later skipped. Across the sizes
    # around the limit, every put is now either refused at once or delivered.
    topic = "t" * 127
    limit = small_config.max_message_size
    with MessageStore.open(str(tmp_path), small_config) as store:
        accepted, refused_for_delivery = 0, 0
        for body_len in range(limit - 500, limit - 150, 5):
            try:
                r = store.put(Message(topic, b"x" * body_len, 0, properties={"DELAY": "1"}))
            except MessageIllegalError as e:
                refused_for_delivery += e.field.startswith("delivery")
                continue
            assert r.status is PutStatus.PUT_OK
            accepted += 1
        assert accepted and refused_for_delivery        # the window exists and is closed
        assert wait_for(lambda: store.max_offset(topic, 0) == accepted), (store.max_offset(topic, 0), accepted)


def test_send_back_near_the_size_limit_is_refused_or_delivered(tmp_path, small_config):
    b = open_broker(tmp_path, small_config)
    group = "g" * 100
    retry = "%RETRY%" + group
    topic = "t" * 127
    limit = small_config.max_message_size
    accepted, refused = 0, 0
    for body_len in range(limit - 700, limit - 300, 5):
        r = b.send(Message(topic, b"x" * body_len, queue_id=0))
        assert r.status is PutStatus.PUT_OK
        ext = b.store.look_message(r.commitlog_offset)
        try:
            b.send_back(ext, group, delay_level=1)
        except MessageIllegalError as e:
            assert e.field.startswith("delivery") or e.field == "body", e.field
            refused += 1
            if not accepted:
                assert retry not in b.topics()          # nothing made for a refused send-back
            continue
        accepted += 1
    assert accepted and refused
    assert wait_for(lambda: b.store.max_offset(retry, 0) == accepted), (b.store.max_offset(retry, 0), accepted)
    b.close()


def test_delayed_and_timed_puts_with_an_illegal_real_topic_are_refused_at_once(tmp_path, small_config):
    with MessageStore.open(str(tmp_path), small_config) as store:
        long_topic = "%RETRY%" + "G" * 200
        for props in ({"DELAY": "2"}, {"TIMER_DELAY_MS": "5000"}):
            msg = Message(long_topic, b"x", 0, properties=dict(props))
            with pytest.raises(MessageIllegalError, match="topic"):   # the topic it is for, checked before the move
                store.put(msg)
            assert msg.topic == long_topic and msg.properties == props       # left as it was
        assert store.max_offset("SCHEDULE_TOPIC_XXXX", 1) == 0
        # A legal delayed message still goes to the schedule topic.
        r = store.put(Message("ok", b"x", 0, properties={"DELAY": "2"}))
        assert r.status is PutStatus.PUT_OK
        store.wait_dispatched()
        assert store.max_offset("SCHEDULE_TOPIC_XXXX", 1) == 1


def test_transactional_send_refused_when_its_check_could_not_put_the_half_back(tmp_path, small_config):
    # The check service puts a half back with TRANSACTION_CHECK_TIMES and TRAN_PREPARED_QUEUE_OFFSET added: a half
    # that fits now but not then would never be checked again. Such a send is refused at once.
    b = open_broker(tmp_path, small_config)
    limit = small_config.max_message_size
    grow = len("TRANSACTION_CHECK_TIMES") + 12 + len("TRAN_PREPARED_QUEUE_OFFSET") + 21
    accepted = refused = 0
    for body_len in range(limit - 500, limit - 100, 4):
        try:
            r = b.send(Message("tx", b"x" * body_len, 0, properties={"TRAN_MSG": "true", "PGROUP": "pg"}))
        except MessageIllegalError as e:
            refused += e.field.startswith("transaction check")
            continue
        accepted += 1
        assert b.store.look_message(r.commitlog_offset).store_size + grow <= limit
    assert accepted and refused
    r = b.send(Message("tx", b"x" * 100, 0, properties={"TRAN_MSG": "true", "PGROUP": "pg"}))
    assert b.end_transaction(r.commitlog_offset, "pg", True).status is PutStatus.PUT_OK
    b.close()


# -- 3. config files that are not files -----------------------------------------------------------------------------

def open_fds():
    return len(os.listdir("/proc/self/fd"))


def make_store(path, small_config):
    b = open_broker(path, small_config)
    b.create_topic("keep", 2)
    b.persist()
    b.create_topic("keep2", 2)                   # topics.json.bak holds "keep", the file "keep" and "keep2"
    b.close()


def test_issue_reproducer_config_file_is_a_directory(tmp_path, small_config):
    make_store(tmp_path, small_config)
    cfg = tmp_path / "config"
    os.unlink(cfg / "topics.json")
    os.unlink(cfg / "topics.json.bak")
    os.mkdir(cfg / "topics.json")
    before = open_fds()
    for _ in range(10):
        with pytest.raises(ConfigFileError) as e:
            open_broker(tmp_path, small_config)
        assert e.value.path == str(cfg / "topics.json") and "directory" in str(e.value)
    assert open_fds() == before                 # the issue: 5 -> 15 after ten tries
    assert not (tmp_path / "abort").exists()


def test_a_directory_in_place_of_the_file_falls_back_to_a_good_bak(tmp_path, small_config):
    make_store(tmp_path, small_config)
    cfg = tmp_path / "config"
    os.unlink(cfg / "topics.json")
    os.mkdir(cfg / "topics.json")
    b = open_broker(tmp_path, small_config)
    assert "keep" in b.topics()                 # from topics.json.bak
    # The directory is still in the way: writing over it is refused with the path named.
    with pytest.raises(ConfigFileError, match="topics.json: is not a regular file"):
        b.create_topic("more", 1)
    b.commit_offset("g", "keep", 0, 0)
    with pytest.raises(ConfigFileError, match="topics.json: is not a regular file"):
        b.close()
    assert not (tmp_path / "lock").exists() or MessageStore.open(str(tmp_path), small_config).close() is None
    # The close persisted the other files despite topics.json failing.
    assert "keep@g" in (cfg / "consumerOffset.json").read_text()


def test_a_fifo_in_place_of_a_config_file_is_refused_without_hanging(tmp_path, small_config):
    make_store(tmp_path, small_config)
    cfg = tmp_path / "config"
    for name in ("subscriptionGroup.json", "subscriptionGroup.json.bak"):
        if (cfg / name).exists():
            os.unlink(cfg / name)
    os.mkfifo(cfg / "subscriptionGroup.json")
    with pytest.raises(ConfigFileError, match="subscriptionGroup.json: is a fifo"):
        open_broker(tmp_path, small_config)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_config_file_is_refused_naming_it(tmp_path, small_config):
    make_store(tmp_path, small_config)
    cfg = tmp_path / "config"
    os.unlink(cfg / "consumerOffset.json.bak") if (cfg / "consumerOffset.json.bak").exists() else None
    os.chmod(cfg / "consumerOffset.json", 0)
    try:
        with pytest.raises(ConfigFileError, match="consumerOffset.json: cannot be opened"):
            open_broker(tmp_path, small_config)
    finally:
        os.chmod(cfg / "consumerOffset.json", stat.S_IRUSR | stat.S_IWUSR)


def test_a_config_file_that_cannot_be_opened_is_refused_naming_it(tmp_path, small_config):
    # A symlink loop cannot be opened even by root (ELOOP): "unreadable" for every user.
    make_store(tmp_path, small_config)
    cfg = tmp_path / "config"
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        if (cfg / name).exists():
            os.unlink(cfg / name)
    os.symlink("consumerOffset.json", cfg / "consumerOffset.json")
    before = open_fds()
    with pytest.raises(ConfigFileError, match="consumerOffset.json: cannot be opened"):
        open_broker(tmp_path, small_config)
    assert open_fds() == before and not (tmp_path / "abort").exists()


def test_issue_reproducer_failed_open_on_delay_offset_leaves_no_abort_file(tmp_path, small_config):
    make_store(tmp_path, small_config)
    cfg = tmp_path / "config"
    for name in ("delayOffset.json", "delayOffset.json.bak"):
        if (cfg / name).exists():
            os.unlink(cfg / name)
    os.mkdir(cfg / "delayOffset.json")
    before = open_fds()
    with pytest.raises(StoreLayoutError, match="delayOffset.json: is a directory"):
        open_broker(tmp_path, small_config)
    assert not (tmp_path / "abort").exists()    # the store is as it was found: closed cleanly
    assert open_fds() == before
    os.rmdir(cfg / "delayOffset.json")
    with open_broker(tmp_path, small_config) as b:
        assert b.store.runtime_info()["recovery"]["last_exit_ok"] is True
        assert "keep2" in b.topics()


def test_a_fifo_in_place_of_delay_offset_does_not_hang_the_open(tmp_path, small_config):
    make_store(tmp_path, small_config)
    cfg = tmp_path / "config"
    for name in ("delayOffset.json", "delayOffset.json.bak"):
        if (cfg / name).exists():
            os.unlink(cfg / name)
    os.mkfifo(cfg / "delayOffset.json")
    with pytest.raises(StoreLayoutError, match="is a fifo"):
        open_broker(tmp_path, small_config)


def test_a_directory_in_place_of_delay_offset_falls_back_to_its_bak(tmp_path, small_config):
    small_config = small_config.replace(schedule_message_service_enable=False)
    with MessageStore.open(str(tmp_path), small_config) as store:
        for _ in range(3):
            store.put(Message("t", b"x", 0, properties={"DELAY": "1"}))
        store.wait_dispatched()
    cfg = tmp_path / "config"
    os.makedirs(cfg, exist_ok=True)
    (cfg / "delayOffset.json.bak").write_text('{"offsetTable":{1:2}}')
    os.mkdir(cfg / "delayOffset.json")
    store = MessageStore.open(str(tmp_path), small_config.replace(schedule_message_service_enable=True))
    assert store.schedule_service.offset_table[1] == 2          # from the .bak, the directory named in the log
    # The progress cannot be written over the directory: the close says so, and still closes the store.
    with pytest.raises(ConfigFileError, match="delayOffset.json: is not a regular file"):
        store.close()
    os.rmdir(cfg / "delayOffset.json")
    with MessageStore.open(str(tmp_path), small_config) as again:     # not locked, not crashed
        assert again.runtime_info()["recovery"]["last_exit_ok"] is True


@pytest.mark.parametrize("name", ["namesrv_addr", "broker_ip2"])
def test_cluster_addresses_are_one_line_of_text_or_none(name):
    assert getattr(BrokerConfig(**{name: None}), name) is None
    assert getattr(BrokerConfig(**{name: "10.0.0.1:9876;10.0.0.2:9876"}), name) == "10.0.0.1:9876;10.0.0.2:9876"
    for bad in (1.5, 9876, "10.0.0.1:9876\nbrokerName=x"):
        with pytest.raises(ValueError, match=name):
            BrokerConfig(**{name: bad})
    cfg = BrokerConfig()
    with pytest.raises(ValueError, match=name):
        setattr(cfg, name, ["10.0.0.1:9876"])
