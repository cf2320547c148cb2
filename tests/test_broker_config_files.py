"""The broker's config files: RocketMQ's text read as it is and written back byte for byte, crash-safe writes with
the .bak fallback, and corrupt or hostile files refused with the file and field named.

Where the goldens come from (apache/rocketmq, tags rocketmq-all-4.9.7 and rocketmq-all-5.3.3):

* every file is ``RemotingSerializable.toJson(obj, prettyFormat)`` = fastjson ``JSON.toJSONString``; ConfigManager
  .persist writes ``encode(true)`` (pretty). fastjson's default SortField sorts map keys (TreeMap) and bean getters
  by name; MapSerializer's pretty layout writes "\\n" plus one tab per level before each String key and before the
  closing brace of a non-empty map, but nothing before an Integer key, which is written bare;
* ``consumerOffset.json``: ConsumerOffsetManager, getter getOffsetTable (ConcurrentMap<String, ConcurrentMap<Integer,
  Long>>, keys "topic@group"); 5.3.3 adds getDataVersion and getGroupTopicMap (each group's topics as a HashSet,
  which fastjson's CollectionCodec writes as a plain array in HashSet iteration order, no layout inside);
* ``topics.json``: TopicConfigManager.encode -> TopicConfigSerializeWrapper (getDataVersion, getTopicConfigTable);
  TopicConfig getters order/perm/readQueueNums/topicFilterType (enum by name)/topicName/topicSysFlag/writeQueueNums;
  5.3.3 adds getAttributes (getTopicMessageType is @JSONField(serialize=false)); DataVersion counter/timestamp, 5.3.3
  adds stateVersion;
* ``subscriptionGroup.json``: SubscriptionGroupManager getters getDataVersion/getSubscriptionGroupTable (5.3.3 adds
  getForbiddenTable); SubscriptionGroupConfig 4.9.7 getters brokerId ... whichBrokerWhenConsumeSlowly; 5.3.3 adds
  attributes, consumeMessageOrderly, consumeTimeoutMinute, groupRetryPolicy ({"type":"CUSTOMIZED"}), groupSysFlag;
* ``delayOffset.json``: ScheduleMessageService -> DelayOffsetSerializeWrapper.getOffsetTable (Integer level keys);
  5.3.3 adds getDataVersion;
* ``consumerFilter.json``: ConsumerFilterManager.getFilterDataByTopic (getBloomFilter's field is transient, skipped);
* the system topics and groups in the goldens are the ones TopicConfigManager's and SubscriptionGroupManager's
  constructors create in 4.9.7 (brokerName "broker-a", cluster "DefaultCluster", autoCreateTopicEnable on).

tests/golden/broker/java_4_9_7/ holds 4.9.7's text; java_5_3_3/ the same tables in 5.3.3's field shape.
"""
import logging
import os
import shutil
from pathlib import Path

import pytest

from rmqcore import Message, MessageStore
from rmqcore.broker import (Broker, BrokerConfig, ConfigFileError, ConsumerOffsetManager, SubscriptionGroupManager,
                            TopicConfigManager)
from rmqcore import fastjson
from rmqcore.config_manager import string2file

GOLDEN = Path(__file__).with_name("golden") / "broker"
FILES = ("topics.json", "subscriptionGroup.json", "consumerOffset.json", "delayOffset.json", "consumerFilter.json")


def golden(version, name):
    return (GOLDEN / version / name).read_text(encoding="utf-8")


def java_broker_config():
    return BrokerConfig(broker_name="broker-a")


def managers(root):
    cfg = java_broker_config()
    return (TopicConfigManager(root, cfg), SubscriptionGroupManager(root, cfg), ConsumerOffsetManager(root))


def lay_out(root, version):
    os.makedirs(os.path.join(root, "config"), exist_ok=True)
    for name in FILES:
        shutil.copy(GOLDEN / version / name, os.path.join(root, "config", name))


# -- fastjson text ---------------------------------------------------------------------------------------------

def test_bare_integer_keys_read_and_written_as_fastjson_does():
    text = '{"offsetTable":{"TopicTest@g":{0:250,1:250,10:3}}}'
    doc = fastjson.loads(text)
    assert doc == {"offsetTable": {"TopicTest@g": {0: 250, 1: 250, 10: 3}}}
    assert fastjson.dumps(doc) == text
    # Integer keys in numeric order (TreeMap<Integer>), not string order.
    assert fastjson.dumps({10: 1, 2: 2}) == "{2:2,10:1}"
    # Quoted integer keys are read too (another writer, or WriteNonStringKeyAsString); a topic named "0" stays a str.
    assert fastjson.loads('{"t":{"0":5}, "0":{}}') == {"t": {"0": 5}, "0": {}}


def test_digits_inside_strings_are_not_taken_for_keys():
    doc = fastjson.loads('{"a":"x,1:2,{3:4","b":{5:6}}')
    assert doc == {"a": "x,1:2,{3:4", "b": {5: 6}}
    # Text with escapes takes the other scan: an escaped quote must not end the string early.
    doc = fastjson.loads('{"a\\"b":{0:1},"s":"q\\",1:2","t":{ 7 :8}}')
    assert doc == {'a"b': {0: 1}, "s": 'q",1:2', "t": {7: 8}}
    # A key that itself starts with a control character is not taken for a marked integer key.
    doc = fastjson.loads('{"\\u00005":1,"\\u00016":2,"m":{5:6}}')
    assert doc == {"\x005": 1, "\x016": 2, "m": {5: 6}}


def test_pretty_layout_is_fastjsons():
    # Empty maps stay {}; int-keyed maps get no newline before keys, one before the closing brace.
    assert fastjson.dumps({"a": {}, "b": {1: 2}}, pretty=True) == '{\n\t"a":{},\n\t"b":{1:2\n\t}\n}'
    # Keys in UTF-16 order (Java's String.compareTo): U+1F600 is the surrogate pair D83D DE00 and D83D < FF5E, so
    # it comes first although its code point is larger (code-point order would put U+FF5E first).
    assert fastjson.dumps({"\uff5e": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\uff5e":1}'
    assert fastjson.dumps({"s": 'q"\\\n\x01'}) == '{"s":"q\\"\\\\\\n\\u0001"}'


@pytest.mark.parametrize("version", ["java_4_9_7", "java_5_3_3"])
@pytest.mark.parametrize("name", FILES)
def test_golden_text_round_trips_byte_for_byte(version, name):
    text = golden(version, name)
    assert fastjson.dumps(fastjson.loads(text), pretty=True) == text


@pytest.mark.parametrize("version", ["java_4_9_7", "java_5_3_3"])
def test_managers_read_golden_and_write_it_back_exactly(tmp_path, version):
    lay_out(str(tmp_path), version)
    for manager in managers(str(tmp_path)):
        assert manager.load() is True
        name = manager.FILE_NAME
        assert manager.encode(pretty=True) == golden(version, name), name
        # Compact: the same document without layout (what encode() without pretty gives in Java).
        compact = manager.encode(pretty=False)
        assert "\n" not in compact and "\t" not in compact
        assert fastjson.loads(compact) == fastjson.loads(golden(version, name))


def test_compact_java_text_is_read(tmp_path):
    # ConsumerOffsetManager.encode() (prettyFormat false), e.g. from an admin tool or an old broker.
    text = '{"offsetTable":{"TopicTest@g1":{0:250,1:249},"%RETRY%g1@g1":{0:0}}}'
    os.makedirs(tmp_path / "config")
    (tmp_path / "config" / "consumerOffset.json").write_text(text)
    com = ConsumerOffsetManager(str(tmp_path))
    com.load()
    assert com.query_offset("g1", "TopicTest", 1) == 249
    assert com.query_offset("g1", "%RETRY%g1", 0) == 0
    assert com.encode(False) == '{"offsetTable":{"%RETRY%g1@g1":{0:0},"TopicTest@g1":{0:250,1:249}}}'


def test_golden_fields_read_back_field_for_field(tmp_path):
    lay_out(str(tmp_path), "java_4_9_7")
    tcm, sgm, com = managers(str(tmp_path))
    for m in (tcm, sgm, com):
        m.load()
    order = tcm.select_topic_config("OrderTopic")
    assert (order.topic_name, order.read_queue_nums, order.write_queue_nums, order.perm, order.topic_filter_type,
            order.topic_sys_flag, order.order) == ("OrderTopic", 8, 8, 6, "SINGLE_TAG", 0, True)
    ro = tcm.select_topic_config("TopicRO")
    assert (ro.read_queue_nums, ro.write_queue_nums, ro.perm) == (2, 2, 4)
    assert tcm.select_topic_config("TBW102").perm == 7
    assert (tcm.data_version.counter, tcm.data_version.timestamp) == (7, 1700000000123)
    slow = sgm.subscription_group_table["slow_group"]
    assert (slow.group_name, slow.consume_enable, slow.consume_broadcast_enable, slow.consume_from_min_enable,
            slow.retry_queue_nums, slow.retry_max_times, slow.broker_id, slow.which_broker_when_consume_slowly,
            slow.notify_consumer_ids_changed_enable) == ("slow_group", False, False, True, 2, 3, 0, 1, True)
    assert (sgm.data_version.counter, sgm.data_version.timestamp) == (2, 1700000000456)
    assert com.query_offsets("please_rename_unique_group_name_4", "TopicTest") == {0: 250, 1: 250, 2: 249, 3: 250}
    assert com.query_offsets("slow_group", "TopicTest") == {0: 3, 1: 0, 2: 7, 3: 1}
    assert com.query_offset("slow_group", "TopicTest", 9) == -1


def test_java_hash_set_order():
    from rmqcore.broker.consumer_offset_manager import java_hash_set_order
    # "i" (105) and "a" (97) share bucket 1 of a capacity-8 table: insertion order.
    assert java_hash_set_order(["i", "a"]) == ["i", "a"]
    # Seven strings grow the table to 16: "i" moves to bucket 9, after "a".."f" in buckets 1..6.
    assert java_hash_set_order(["i", "a", "b", "c", "d", "e", "f"]) == ["a", "b", "c", "d", "e", "f", "i"]


def test_5x_group_topic_map_is_rebuilt_from_the_table(tmp_path):
    lay_out(str(tmp_path), "java_5_3_3")
    com = ConsumerOffsetManager(str(tmp_path))
    com.load()
    com.commit_offset("slow_group", "OrderTopic", 0, 1)
    com.remove_offset("please_rename_unique_group_name_4")
    doc = fastjson.loads(com.encode(pretty=True))
    # "TopicTest" hashes to bucket 1, "OrderTopic" to bucket 3 (String.hashCode, spread, & 7).
    assert doc["groupTopicMap"] == {"slow_group": ["TopicTest", "OrderTopic"]}


def test_5x_fields_kept_through_a_change(tmp_path):
    lay_out(str(tmp_path), "java_5_3_3")
    tcm, sgm, com = managers(str(tmp_path))
    for m in (tcm, sgm, com):
        m.load()
    com.commit_offset("slow_group", "TopicTest", 0, 4)
    com.persist()
    doc = fastjson.loads((tmp_path / "config" / "consumerOffset.json").read_text())
    assert doc["dataVersion"] == {"counter": 12, "stateVersion": 0, "timestamp": 1700000000789}
    assert doc["offsetTable"]["TopicTest@slow_group"][0] == 4
    tc = tcm.select_topic_config("TopicTest").copy()
    tc.write_queue_nums = 8
    tcm.update_topic_config(tc)
    doc = fastjson.loads((tmp_path / "config" / "topics.json").read_text())
    assert doc["topicConfigTable"]["TopicTest"]["attributes"] == {}
    assert doc["topicConfigTable"]["TopicTest"]["writeQueueNums"] == 8
    assert doc["dataVersion"]["counter"] == 8 and doc["dataVersion"]["stateVersion"] == 0
    g = sgm.subscription_group_table["slow_group"]
    # 5.x's typed fields: read, and written back as they were.
    assert g.group_retry_policy.type == "CUSTOMIZED" and g.group_retry_policy.customized is None
    assert g.consume_message_orderly is False and g.to_json()["groupRetryPolicy"] == {"type": "CUSTOMIZED"}
    sgm.persist()
    assert '"forbiddenTable":{}' in (tmp_path / "config" / "subscriptionGroup.json").read_text()


# -- a store directory as a Java broker leaves it -----------------------------------------------------------------

@pytest.mark.parametrize("version", ["java_4_9_7", "java_5_3_3"])
def test_java_broker_store_dir_opens_and_reads_back(tmp_path, small_config, version):
    root = str(tmp_path / "store")
    # The commitlog and queues (rmqcore writes RocketMQ's layout byte for byte, see test_store): 300 messages in
    # TopicTest's four queues, 10 in the slow group's retry topic.
    with MessageStore.open(root, small_config) as store:
        for i in range(300):
            store.put(Message("TopicTest", b"m%d" % i, queue_id=i % 4))
        store.wait_dispatched()
    lay_out(root, version)
    with Broker.open(root, java_broker_config(), store_config=small_config) as broker:
        topics = broker.topics()
        assert set(topics) >= {"TopicTest", "OrderTopic", "TopicRO", "%RETRY%please_rename_unique_group_name_4"}
        assert topics["TopicTest"].read_queue_nums == 4 and topics["TopicTest"].perm == 6
        groups = broker.groups()
        assert groups["slow_group"].retry_max_times == 3 and groups["slow_group"].consume_enable is False
        assert broker.query_offset("please_rename_unique_group_name_4", "TopicTest", 2) == 249
        assert broker.query_offset("slow_group", "TopicTest", 2) == 7
        # The offsets work against the store's queues: 75 messages per queue.
        assert broker.lag("slow_group") == {"TopicTest": (75 - 3) + (75 - 0) + (75 - 7) + (75 - 1)}
        r = broker.pull("please_rename_unique_group_name_4", "TopicTest", 2,
                        broker.query_offset("please_rename_unique_group_name_4", "TopicTest", 2))
        assert r.status.name == "OFFSET_OVERFLOW_BADLY"       # 249 committed, the queue holds 75
    # Nothing changed: every file is Java's text still, byte for byte (the ones the broker rewrote included).
    for name in FILES:
        assert (Path(root) / "config" / name).read_text() == golden(version, name), name


# -- crash-safe writes and the .bak fallback ---------------------------------------------------------------------

def test_string2file_keeps_previous_version_as_bak(tmp_path):
    path = str(tmp_path / "config" / "x.json")
    string2file("one", path)
    assert not os.path.exists(path + ".bak")
    string2file("two", path)
    string2file("three", path)
    assert open(path).read() == "three"
    assert open(path + ".bak").read() == "two"
    assert not os.path.exists(path + ".tmp")


def test_load_falls_back_to_bak_when_main_is_corrupt(tmp_path, caplog):
    com = ConsumerOffsetManager(str(tmp_path))
    com.commit_offset("g", "t", 0, 5)
    com.persist()
    com.commit_offset("g", "t", 0, 9)
    com.persist()                                     # bak holds 5, main holds 9
    main = tmp_path / "config" / "consumerOffset.json"
    main.write_text(main.read_text()[:20])            # torn
    again = ConsumerOffsetManager(str(tmp_path))
    with caplog.at_level(logging.WARNING):
        assert again.load() is True
    assert again.query_offset("g", "t", 0) == 5
    assert again.loaded_from.endswith(".bak")
    assert "consumerOffset.json" in caplog.text and "backup" in caplog.text


@pytest.mark.parametrize("state", ["missing", "empty"])
def test_load_falls_back_to_bak_when_main_missing_or_empty(tmp_path, state):
    # RocketMQ's own crash window: the old file deleted, the .tmp not yet renamed in.
    com = ConsumerOffsetManager(str(tmp_path))
    com.commit_offset("g", "t", 3, 42)
    com.persist()
    com.persist()
    main = tmp_path / "config" / "consumerOffset.json"
    if state == "missing":
        main.unlink()
    else:
        main.write_text("")
    again = ConsumerOffsetManager(str(tmp_path))
    assert again.load() is True
    assert again.query_offset("g", "t", 3) == 42


def test_fresh_directory_loads_nothing(tmp_path):
    com = ConsumerOffsetManager(str(tmp_path))
    assert com.load() is False
    assert com.offset_table == {}


HOSTILE = [
    # (file text, the field the error must name, or None for a file-level error)
    ('{"offsetTable":{"t@g":{0:250,1:', None),                                  # truncated
    ('{"offsetTable":{"t@g":{0:"250"}}}', "offsetTable.t@g.0"),                 # wrong type
    ('{"offsetTable":{"t@g":{0:99999999999999999999999}}}', "offsetTable.t@g.0"),  # past Java long
    ('{"offsetTable":{"t@g":{0:1.5}}}', "offsetTable.t@g.0"),                   # not an integer
    ('{"offsetTable":{"t@g":{-1:5}}}', "offsetTable.t@g"),                      # negative queue id
    ('{"offsetTable":{"t@g":{4294967296:5}}}', "offsetTable.t@g"),              # queue id past Java int
    ('{"offsetTable":[1,2]}', "offsetTable"),                                   # wrong shape
    ('{"offsetTable":{"t@g":true}}', "offsetTable.t@g"),
    ('[]', "(document)"),
    ('{"offsetTable":{"t@g":{0:NaN}}}', None),
    ("{" * 5000 + "}" * 5000, None),                                            # nested past any sane depth
    ('\xff\xfe{}', None),                                                       # not UTF-8 (written as bytes)
]


@pytest.mark.parametrize("text,field", HOSTILE)
def test_hostile_offset_file_names_file_and_field(tmp_path, text, field):
    os.makedirs(tmp_path / "config")
    path = tmp_path / "config" / "consumerOffset.json"
    if text.startswith("\xff"):
        path.write_bytes(b"\xff\xfe{}")
    else:
        path.write_text(text)
    com = ConsumerOffsetManager(str(tmp_path))
    with pytest.raises(ConfigFileError) as e:
        com.load()
    assert e.value.path == str(path)
    assert e.value.field == field
    assert "consumerOffset.json" in str(e.value)
    assert com.offset_table == {}              # nothing half-applied


def test_hostile_file_with_good_bak_loads_bak(tmp_path):
    com = ConsumerOffsetManager(str(tmp_path))
    com.commit_offset("g", "t", 0, 7)
    com.persist()
    com.persist()
    (tmp_path / "config" / "consumerOffset.json").write_text('{"offsetTable":{"t@g":{0:"x"}}}')
    again = ConsumerOffsetManager(str(tmp_path))
    again.load()
    assert again.query_offset("g", "t", 0) == 7


@pytest.mark.parametrize("text,field", [
    ('{"topicConfigTable":{"T":{"topicName":"T","readQueueNums":"4"}}}', "topicConfigTable.T.readQueueNums"),
    ('{"topicConfigTable":{"T":{"topicName":"T","perm":-1}}}', "topicConfigTable.T.perm"),
    ('{"topicConfigTable":{"T":{"topicName":"T","topicFilterType":"EVERYTHING"}}}',
     "topicConfigTable.T.topicFilterType"),
    ('{"topicConfigTable":{"T":{"readQueueNums":4}}}', "topicConfigTable.T.topicName"),
    ('{"topicConfigTable":{"T":{"topicName":"T","order":"yes"}}}', "topicConfigTable.T.order"),
    ('{"dataVersion":{"counter":-0.5},"topicConfigTable":{}}', "dataVersion.counter"),
    ('{"topicConfigTable":{"T":{"topicName":"T","writeQueueNums":2147483648}}}',
     "topicConfigTable.T.writeQueueNums"),
])
def test_hostile_topics_file_names_field(tmp_path, text, field):
    os.makedirs(tmp_path / "config")
    (tmp_path / "config" / "topics.json").write_text(text)
    tcm = TopicConfigManager(str(tmp_path), java_broker_config())
    before = dict(tcm.topic_config_table)
    with pytest.raises(ConfigFileError) as e:
        tcm.load()
    assert e.value.field == field and "topics.json" in str(e.value)
    assert tcm.topic_config_table == before


@pytest.mark.parametrize("text,field", [
    ('{"subscriptionGroupTable":{"g":{"groupName":"g","retryMaxTimes":"16"}}}',
     "subscriptionGroupTable.g.retryMaxTimes"),
    ('{"subscriptionGroupTable":{"g":{"groupName":"g","consumeEnable":1}}}', "subscriptionGroupTable.g.consumeEnable"),
    ('{"subscriptionGroupTable":{"g":{"groupName":"g","retryQueueNums":-3}}}',
     "subscriptionGroupTable.g.retryQueueNums"),
])
def test_hostile_groups_file_names_field(tmp_path, text, field):
    os.makedirs(tmp_path / "config")
    (tmp_path / "config" / "subscriptionGroup.json").write_text(text)
    sgm = SubscriptionGroupManager(str(tmp_path), java_broker_config())
    with pytest.raises(ConfigFileError) as e:
        sgm.load()
    assert e.value.field == field


def test_unknown_fields_are_kept_not_refused(tmp_path):
    os.makedirs(tmp_path / "config")
    text = ('{"future":{"x":[1,2]},"topicConfigTable":{"T":{"topicName":"T","readQueueNums":2,'
            '"writeQueueNums":2,"newKnob":"on"}}}')
    (tmp_path / "config" / "topics.json").write_text(text)
    tcm = TopicConfigManager(str(tmp_path), java_broker_config())
    tcm.load()
    assert tcm.select_topic_config("T").extra == {"newKnob": "on"}
    doc = fastjson.loads(tcm.encode())
    assert doc["future"] == {"x": [1, 2]} and doc["topicConfigTable"]["T"]["newKnob"] == "on"


def test_broker_refuses_to_open_on_unreadable_config_and_leaves_store_usable(tmp_path, small_config):
    root = str(tmp_path)
    os.makedirs(tmp_path / "config")
    (tmp_path / "config" / "subscriptionGroup.json").write_text('{"subscriptionGroupTable":{"g":5}}')
    with pytest.raises(ConfigFileError) as e:
        Broker.open(root, java_broker_config(), store_config=small_config)
    assert e.value.field == "subscriptionGroupTable.g"
    # The broker released the store: it opens, and the bad file is still there for a human to look at.
    with MessageStore.open(root, small_config) as store:
        assert store.put(Message("t", b"x")).status.name == "PUT_OK"
    assert (tmp_path / "config" / "subscriptionGroup.json").read_text() == '{"subscriptionGroupTable":{"g":5}}'


def test_empty_file_without_bak_is_an_error_not_an_empty_table(tmp_path):
    os.makedirs(tmp_path / "config")
    (tmp_path / "config" / "consumerOffset.json").write_text("")
    with pytest.raises(ConfigFileError, match="empty"):
        ConsumerOffsetManager(str(tmp_path)).load()


def test_oversized_file_is_refused(tmp_path, monkeypatch):
    from rmqcore import config_manager
    monkeypatch.setattr(config_manager, "MAX_CONFIG_FILE_SIZE", 64)
    os.makedirs(tmp_path / "config")
    (tmp_path / "config" / "consumerOffset.json").write_text('{"offsetTable":{' + '"t@g":{0:1},' * 20 + '"x@y":{}}}')
    with pytest.raises(ConfigFileError, match="larger than the 64 bytes"):
        ConsumerOffsetManager(str(tmp_path)).load()


def test_leftover_tmp_from_a_crash_is_ignored_and_replaced(tmp_path):
    com = ConsumerOffsetManager(str(tmp_path))
    com.commit_offset("g", "t", 0, 1)
    com.persist()
    (tmp_path / "config" / "consumerOffset.json.tmp").write_text("{half a fi")
    again = ConsumerOffsetManager(str(tmp_path))
    again.load()
    assert again.query_offset("g", "t", 0) == 1
    again.commit_offset("g", "t", 0, 2)
    again.persist()
    assert not (tmp_path / "config" / "consumerOffset.json.tmp").exists()
    assert fastjson.loads((tmp_path / "config" / "consumerOffset.json").read_text())["offsetTable"] == {"t@g": {0: 2}}


def test_topic_changes_bump_the_data_version_in_the_file(tmp_path):
    tcm = TopicConfigManager(str(tmp_path), java_broker_config())
    before = tcm.data_version.counter
    tcm.create_topic_in_send_message_method("fresh", "TBW102", 4)
    doc = fastjson.loads((tmp_path / "config" / "topics.json").read_text())
    assert doc["dataVersion"]["counter"] == before + 1
    assert doc["topicConfigTable"]["fresh"] == {"order": False, "perm": 6, "readQueueNums": 4,
                                                 "topicFilterType": "SINGLE_TAG", "topicName": "fresh",
                                                 "topicSysFlag": 0, "writeQueueNums": 4}


# -- the codec against arbitrary documents -------------------------------------------------------------------------

from hypothesis import given, strategies as st  # noqa: E402

_java_long = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
_text = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["\x005", "\x01-7", "0", "{1:2", 'a\\"b'])       # keys that look like marked or bare keys
_offsets = st.dictionaries(st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1), _java_long, max_size=6)
_leaf = st.one_of(_java_long, st.booleans(), _text, st.none(), _offsets)
_docs = st.recursive(_leaf, lambda inner: st.dictionaries(_text, inner, max_size=5), max_leaves=25)


@given(doc=st.dictionaries(_text, _docs, max_size=6), pretty=st.booleans())
def test_any_document_round_trips(doc, pretty):
    # Keys with digits, commas, braces, quotes and backslashes inside strings, bare integer keys (negative too),
    # both layouts: what dumps writes, loads reads back as it was.
    assert fastjson.loads(fastjson.dumps(doc, pretty)) == doc


@given(doc=st.dictionaries(_text, st.recursive(st.one_of(_java_long, st.booleans(), _text),
                                               lambda inner: st.dictionaries(_text, inner, max_size=4),
                                               max_leaves=15), max_size=6))
def test_quoted_json_reads_as_pythons_json(doc):
    import json
    text = json.dumps(doc)
    assert fastjson.loads(text) == json.loads(text)


# -- topics.json written by a background writer (issue 36, item 6) -------------------------------------------------

def test_topics_file_from_kept_entries_is_fastjsons_text(tmp_path):
    """encode renders each topic's entry once and keeps it: its text must stay exactly what fastjson writes for the
    whole table, through creations, changes in place, replacements and deletions."""
    from rmqcore.broker import TopicConfig
    m = TopicConfigManager(str(tmp_path), BrokerConfig())

    def whole():
        doc = dict(m.extra)
        doc["dataVersion"] = m.data_version.to_json()
        doc["topicConfigTable"] = {n: tc.to_json() for n, tc in m.topic_config_table.items()}
        return fastjson.dumps(doc, True)
    for name in ("b", "A", "支付", "z\u00e9", "%RETRY%g", "0", "𝔘x"):
        m.update_topic_config(TopicConfig(name, read_queue_nums=3, write_queue_nums=3))
        assert m.encode(True) == whole()
    with m._lock:
        m.topic_config_table["A"].perm = 2             # changed in place, as the default topic's perm is ...
        m._changed()                                   # ... which says so
    assert m.encode(True) == whole()
    kept = m.encode(True)
    m.topic_config_table["A"] = m.topic_config_table["A"].copy()     # another object: rendered again
    assert m.encode(True) == kept == whole()
    m.update_topic_config(TopicConfig("b", attributes={"message.type": "FIFO"}))
    assert m.encode(True) == whole()
    m.delete_topic_config("支付")
    assert m.encode(True) == whole() == (tmp_path / "config" / "topics.json").read_text()
    assert fastjson.loads(m.encode(True))["topicConfigTable"].keys() == m.topic_config_table.keys()


def _stuck_write(tmp_path):
    """A FIFO where topics.json's new text goes: the writer blocks opening it until the test reads it."""
    cfg = tmp_path / "config"
    cfg.mkdir(exist_ok=True)
    fifo = cfg / "topics.json.tmp"
    os.mkfifo(fifo)

    def release():
        fd = os.open(fifo, os.O_RDONLY)        # meets the blocked writer; the file goes, so the retry writes a file
        os.unlink(fifo)
        while os.read(fd, 1 << 16):
            pass
        os.close(fd)
    return release


def test_auto_created_topic_does_not_wait_for_the_file_unless_asked(tmp_path):
    """A topic created on a send is in the table at once and written by the manager's writer thread: with
    wait_created off (the gRPC server) the creation returns while the file cannot be written; wait_persisted
    and when_persisted then say when it is on disk."""
    import threading
    m = TopicConfigManager(str(tmp_path), BrokerConfig())
    release = _stuck_write(tmp_path)
    m.wait_created = False
    done = threading.Event()

    def create():
        m.create_topic_in_send_message_method("new_t", "TBW102", 4)
        done.set()
    t = threading.Thread(target=create, daemon=True)
    t.start()
    # before: the creation wrote the file itself, so it waited on the FIFO until the test read it
    assert done.wait(30), "the creation waited for topics.json"
    assert m.select_topic_config("new_t").write_queue_nums == 4
    ticket = m.last_created
    assert not m.persisted(ticket)
    told = []
    m.when_persisted(ticket, told.append)
    release()
    # the FIFO cannot be fsynced: that write fails (its waiters are told), the next one writes the file
    with pytest.raises(OSError):
        m.wait_persisted(ticket, timeout=30)
    assert len(told) == 1 and isinstance(told[0], OSError)
    m.wait_created = True
    m.create_topic_in_send_message_method("second_t", "TBW102", 4)        # waits for its write this time
    assert m.persisted(m.last_created) and m.persisted(ticket)
    table = fastjson.loads((tmp_path / "config" / "topics.json").read_text())["topicConfigTable"]
    assert {"new_t", "second_t"} <= table.keys()
    m.close_writer()



def test_a_creation_does_not_wait_for_the_file_being_rendered(tmp_path, monkeypatch):
    """The writer renders topics.json (a walk of every topic: ms at thousands) outside the table's lock, so a
    creation on the event loop meanwhile is not held up by it (before, encode held the lock for the whole walk).
    The render is held inside one topic's to_json by a gate the test opens: what the creation meets does not
    depend on the machine's pace. The file then holds every topic."""
    import threading
    from rmqcore.broker.topic_config import TopicConfig
    m = TopicConfigManager(str(tmp_path), BrokerConfig())
    m.wait_created = False
    entered, gate = threading.Event(), threading.Event()
    real = TopicConfig.to_json

    def held(self):
        if self.topic_name == "t_slow" and not gate.is_set():
            entered.set()
            assert gate.wait(60), "the test never opened the gate"
        return real(self)
    monkeypatch.setattr(TopicConfig, "to_json", held)
    try:
        m.create_topic_in_send_message_method("t_slow", "TBW102", 4)      # the writer renders it, and is held
        assert entered.wait(30), "no write started"
        created = threading.Event()

        def create():
            m.create_topic_in_send_message_method("t_meanwhile", "TBW102", 4)
            created.set()
        threading.Thread(target=create, daemon=True).start()
        assert created.wait(30), "the creation waited for the rendering"
    finally:
        gate.set()
    m.wait_created = True
    m.create_topic_in_send_message_method("t_after", "TBW102", 4)
    table = fastjson.loads((tmp_path / "config" / "topics.json").read_text())["topicConfigTable"]
    assert {"t_slow", "t_meanwhile", "t_after"} <= table.keys()
    m.close_writer()

def test_a_burst_of_creations_shares_writes(tmp_path, monkeypatch):
    """Creations made while a write is under way are covered by the next write, not one write each. The first
    write is held inside string2file (a gate the test opens, no FIFO: the writer's own file is never touched) until
    the burst is made, so what the writer sees does not depend on the machine's pace."""
    import threading
    from rmqcore import config_manager
    writes = []
    entered, gate = threading.Event(), threading.Event()
    real = config_manager.string2file

    def held(text, path):
        writes.append(path)
        if len(writes) == 1:
            entered.set()
            assert gate.wait(60), "the test never opened the gate"
        real(text, path)
    monkeypatch.setattr(config_manager, "string2file", held)
    m = TopicConfigManager(str(tmp_path), BrokerConfig())
    m.wait_created = False
    try:
        m.create_topic_in_send_message_method("t_first", "TBW102", 4)    # the writer takes it, and is held
        assert entered.wait(30), "no write started for the first creation"
        burst_done = threading.Event()

        def burst():
            for i in range(200):
                m.create_topic_in_send_message_method(f"t_{i}", "TBW102", 4)
            burst_done.set()
        threading.Thread(target=burst, daemon=True).start()
        # before: each creation wrote the file itself (and here would wait at the gate)
        assert burst_done.wait(30), "the creations waited for topics.json"
        assert len(writes) == 1
    finally:
        gate.set()
    m.wait_created = True
    m.create_topic_in_send_message_method("t_last", "TBW102", 4)        # waits for its write
    # the held write, one for the 200 (and perhaps t_last with them), at most one more for t_last: 202 before
    assert 2 <= len(writes) <= 3, len(writes)
    table = fastjson.loads((tmp_path / "config" / "topics.json").read_text())["topicConfigTable"]
    assert {f"t_{i}" for i in range(200)} | {"t_first", "t_last"} <= table.keys()
    m.close_writer()
