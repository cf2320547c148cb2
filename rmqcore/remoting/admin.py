"""The broker's query and admin answers over remoting: what mqadmin (``DefaultMQAdminExt``) and a client's message
queries ask a broker, following the 4.9.7 broker's AdminBrokerProcessor and QueryMessageProcessor (tag
rocketmq-all-4.9.7, ``broker/.../processor/``); the bodies are ``common/.../protocol/body/*`` as fastjson writes them.

Each handler is ``handler(conn, cmd)`` for a RemotingConnection ``conn`` (server.py registers them in its table)
and answers through ``conn.reply``; a Refusal it raises becomes the answer's code and remark.

``tests/test_remoting_frames.py`` holds these answers to the Java broker's, field by field, from recorded frames.
"""
from __future__ import annotations

import json
import os
import time

from ..broker.errors import IllegalNameError, InvalidConfigError
from ..broker.broker_conf import KEYS as BROKER_CONF_KEYS
from ..broker.subscription_group_config import SubscriptionGroupConfig
from ..fastjson import FieldError
from .codes import CONSUMER_NOT_ONLINE, QUERY_NOT_FOUND, SUCCESS, SYSTEM_ERROR, TOPIC_NOT_EXIST
from .remoting_command import BROKER_VERSION, Refusal, header_int, need

BROKER_VERSION_DESC = "V4_9_7"          # MQVersion.getVersionDesc(BROKER_VERSION): the broker this one answers as
# BrokerConfig's queue capacities of the Java broker's executors, reported as its runtime info reports them; this
# broker runs requests on the event loop, so nothing waits in a queue (the sizes and head waits are 0)
THREAD_POOL_CAPACITIES = {"sendThreadPoolQueueCapacity": 10000, "pullThreadPoolQueueCapacity": 100000,
                          "queryThreadPoolQueueCapacity": 20000, "EndTransactionThreadPoolQueueCapacity": 100000}
# DefaultMessageStore.remainTransientStoreBufferNumbs with no transient store pool (rmqcore has none)
NO_TRANSIENT_POOL = 2147483647


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def human_bytes(n: int) -> str:
    """MixAll.humanReadableByteCount(bytes, si=false): "512 B", "1.5 KiB", "72.6 GiB"."""
    if n < 1024:
        return f"{n} B"
    exp = min(6, (n.bit_length() - 1) // 10)             # (int) (log(bytes) / log(1024))
    return f"{n / 1024 ** exp:.1f} {'KMGTPE'[exp - 1]}iB"


def _runtime(seconds: float) -> str:
    """BrokerController's "runtime": ``[ d days, h hours, m minutes, s seconds ]``."""
    s = int(seconds)
    return f"[ {s // 86400} days, {s // 3600 % 24} hours, {s // 60 % 60} minutes, {s % 60} seconds ]"


# -- GET_BROKER_RUNTIME_INFO (28): mqadmin brokerStatus and clusterList ------------------------------------------------

def runtime_table(conn) -> dict[str, str]:
    """AdminBrokerProcessor.prepareRuntimeInfo's table (DefaultMessageStore.getRuntimeInfo's keys first): every key
    the Java broker's has, so mqadmin's clusterList (which splits ``putTps`` and parses ``earliestMessageTimeStamp``
    and ``commitLogDiskRatio``) and brokerStatus read it as they read the Java broker's. The figures are this
    broker's; rates are the mean since start (rmqcore keeps totals, not RocketMQ's 10 s/1 min/10 min windows: the
    two longer windows are left empty, as the Java broker leaves a window it has no samples for); latencies rmqcore
    does not measure read 0."""
    broker, events = conn.broker, conn.server.events
    store = broker.store
    cl = store.commit_log
    uptime = max(time.time() - events.started, 1e-3)
    counts = events.snapshot()
    put_times = sum(counts["messages_in"].values())
    put_bytes = sum(counts["bytes_in"].values())             # body bytes (the Java figure counts whole records)
    got = sum(counts["messages_out"].values())
    disk = os.statvfs(store.path)
    total, free, usable = disk.f_blocks * disk.f_frsize, disk.f_bfree * disk.f_frsize, disk.f_bavail * disk.f_frsize
    ratio = f"{(total - free) / total:.2f}" if total else "0.0"
    earliest = -1
    if cl.max_offset > cl.min_offset:
        m = store.look_message(cl.min_offset)
        if m is not None:
            earliest = m.store_timestamp
    put_tps, get_tps = put_times / uptime, got / uptime
    reput = store.reput
    table = {
        # DefaultMessageStore.getRuntimeInfo (StoreStatsService.getRuntimeInfo and the disk ratios)
        "bootTimestamp": str(int(events.started * 1000)),
        "runtime": _runtime(uptime),
        "putMessageEntireTimeMax": "0",
        "putMessageTimesTotal": str(put_times),
        "putMessageFailedTimes": "0",
        "putMessageSizeTotal": str(put_bytes),
        "putMessageDistributeTime": "null",
        "putMessageAverageSize": str(put_bytes / put_times if put_times else 0.0),
        "dispatchMaxBuffer": "0",
        "getMessageEntireTimeMax": "0",
        "putTps": f"{put_tps:.1f}  ",
        "getFoundTps": f"{get_tps:.1f}  ",
        "getMissTps": "0.0  ",
        "getTotalTps": f"{get_tps:.1f}  ",
        "getTransferedTps": f"{get_tps:.1f}  ",
        "putLatency99": "0.00",
        "putLatency999": "0.00",
        "commitLogDiskRatio": ratio,
        "consumeQueueDiskRatio": ratio,
        "commitLogMaxOffset": str(cl.max_offset),
        "commitLogMinOffset": str(cl.min_offset),
        # AdminBrokerProcessor.prepareRuntimeInfo
        "brokerVersionDesc": BROKER_VERSION_DESC,
        "brokerVersion": str(BROKER_VERSION),
        # no daily snapshot here: as a broker booted today, the morning counts are 0
        "msgPutTotalYesterdayMorning": "0",
        "msgPutTotalTodayMorning": "0",
        "msgPutTotalTodayNow": str(put_times),
        "msgGetTotalYesterdayMorning": "0",
        "msgGetTotalTodayMorning": "0",
        "msgGetTotalTodayNow": str(got),
        "sendThreadPoolQueueSize": "0",
        "pullThreadPoolQueueSize": "0",
        "queryThreadPoolQueueSize": "0",
        "EndTransactionQueueSize": "0",
        "dispatchBehindBytes": str(reput.behind() if reput is not None else 0),
        "pageCacheLockTimeMills": "0",
        "sendThreadPoolQueueHeadWaitTimeMills": "0",
        "pullThreadPoolQueueHeadWaitTimeMills": "0",
        "queryThreadPoolQueueHeadWaitTimeMills": "0",
        "earliestMessageTimeStamp": str(earliest),
        "startAcceptSendRequestTimeStamp": "0",
        "remainTransientStoreBufferNumbs": str(NO_TRANSIENT_POOL),
        "remainHowManyDataToFlush": human_bytes(max(0, cl.max_offset - cl.flushed_where)),
        "commitLogDirCapacity": f"Total : {human_bytes(total)}, Free : {human_bytes(usable)}.",
    }
    table.update({k: str(v) for k, v in THREAD_POOL_CAPACITIES.items()})
    return table


def broker_runtime_info(conn, cmd) -> None:
    conn.reply(cmd, SUCCESS, body=_dumps({"table": runtime_table(conn)}))


# -- GET_BROKER_CONFIG (26): mqadmin getBrokerConfig ------------------------------------------------------------------

def _java_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def broker_config(conn, cmd) -> None:
    """AdminBrokerProcessor.getBrokerConfig: every broker.conf setting as ``key=value`` lines (the Properties text
    MixAll.string2Properties reads), and the configuration's data version in the header's ``version``."""
    broker = conn.broker
    configs = {"broker": broker.config, "store": broker.store_config}
    lines = []
    for key, (which, name, _kind) in sorted(BROKER_CONF_KEYS.items()):
        v = getattr(configs[which], name, None)
        if v is not None:
            lines.append(f"{key}={_java_value(v)}\n")
    version = {"counter": 0, "timestamp": int(conn.server.events.started * 1000)}
    conn.reply(cmd, SUCCESS, {"version": json.dumps(version, separators=(",", ":"))},
               body="".join(lines).encode("utf-8"))


# -- GET_TOPIC_STATS_INFO (202), GET_CONSUME_STATS (208): mqadmin topicStatus and consumerProgress ---------------------
# TopicStatsTable and ConsumeStats are HashMaps keyed by MessageQueue, which fastjson writes (and reads) with object
# keys: {{"brokerName":..,"queueId":0,"topic":..}:{...}}, not standard JSON.

def _mq_key(conn, topic: str, queue_id: int) -> str:
    return "{" + f'"brokerName":{json.dumps(conn.broker.config.broker_name)},"queueId":{queue_id},' \
                 f'"topic":{json.dumps(topic)}' + "}"


def _store_time_at(conn, topic: str, queue_id: int, offset: int) -> int:
    """DefaultMessageStore.getMessageStoreTimeStamp: the store time of the message at ``offset``, 0 when none."""
    if offset < 0:
        return 0
    r = conn.broker.store.get_messages("", topic, queue_id, offset, 1)
    return r.messages[0].store_timestamp if r.messages else 0


def topic_stats(conn, cmd) -> None:
    """AdminBrokerProcessor.getTopicStatsInfo (mqadmin topicStatus)."""
    topic = need(cmd.ext_fields, "topic")
    tc = conn.broker.topic_config_manager.select_topic_config(topic)
    if tc is None:
        raise Refusal(TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
    store = conn.broker.store
    items = []
    for q in range(tc.write_queue_nums):
        hi, lo = max(0, store.max_offset(topic, q)), max(0, store.min_offset(topic, q))
        items.append(f'{_mq_key(conn, topic, q)}:{{"lastUpdateTimestamp":{_store_time_at(conn, topic, q, hi - 1)},'
                     f'"maxOffset":{hi},"minOffset":{lo}}}')
    conn.reply(cmd, SUCCESS, body=("{\"offsetTable\":{" + ",".join(items) + "}}").encode())


def _subscriptions(conn, group: str) -> dict[str, dict]:
    """ConsumerGroupInfo.subscriptionTable: the group's subscriptions by topic as its online members sent them."""
    table: dict[str, dict] = {}
    for member in conn.server.consumers.get(group, {}):
        cd = member.client.consumer_data.get(group) or {}
        for s in cd.get("subscriptionDataSet") or ():
            if isinstance(s, dict) and isinstance(s.get("topic"), str):
                old = table.get(s["topic"])
                if old is None or (s.get("subVersion") or 0) >= (old.get("subVersion") or 0):
                    table[s["topic"]] = s
    return table


def consume_stats(conn, cmd) -> None:
    """AdminBrokerProcessor.getConsumeStats (mqadmin consumerProgress): per queue of each topic the group has
    offsets in (or the one asked), the queue's max offset and the group's committed one; a topic an online group
    no longer subscribes to is left out, as the Java broker leaves it out."""
    group = need(cmd.ext_fields, "consumerGroup")
    only = cmd.ext_fields.get("topic")
    broker = conn.broker
    topics = [only] if only and only.strip() else sorted(broker.consumer_offset_manager.which_topic_by_consumer(group))
    subs = _subscriptions(conn, group)
    store = broker.store
    items = []
    for topic in topics:
        tc = broker.topic_config_manager.select_topic_config(topic)
        if tc is None or (subs and topic not in subs):
            continue
        for q in range(tc.read_queue_nums):
            hi = max(0, store.max_offset(topic, q))
            mine = max(0, broker.query_offset(group, topic, q))
            items.append(f'{_mq_key(conn, topic, q)}:{{"brokerOffset":{hi},"consumerOffset":{mine},'
                         f'"lastTimestamp":{_store_time_at(conn, topic, q, mine - 1)}}}')
    # consumeTps: BrokerStatsManager's per-minute rate of the group's gets, which rmqcore does not keep
    conn.reply(cmd, SUCCESS, body=('{"consumeTps":0.0,"offsetTable":{' + ",".join(items) + "}}").encode())


# -- connections (203, 204) and who consumes a topic (300) -------------------------------------------------------------

def _connection(member) -> dict:
    c = member.client
    return {"clientAddr": member.peer, "clientId": c.client_id, "language": c.language or "JAVA",
            "version": c.version}


def consumer_connection_list(conn, cmd) -> None:
    """AdminBrokerProcessor.getConsumerConnectionList (mqadmin consumerConnection, consumerProgress): the group's
    live connections, its subscriptions and the consume type/model/where of its latest heartbeat."""
    group = need(cmd.ext_fields, "consumerGroup")
    members = conn.server.consumers.get(group)
    if not members:
        raise Refusal(CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
    latest = max(members, key=lambda m: m.client.last_seen)
    cd = latest.client.consumer_data.get(group) or {}
    body = {"connectionSet": [_connection(m) for m in members],
            "consumeFromWhere": cd.get("consumeFromWhere"), "consumeType": cd.get("consumeType"),
            "messageModel": cd.get("messageModel"), "subscriptionTable": _subscriptions(conn, group)}
    conn.reply(cmd, SUCCESS, body=_dumps({k: v for k, v in body.items() if v is not None}))


def producer_connection_list(conn, cmd) -> None:
    """AdminBrokerProcessor.getProducerConnectionList (mqadmin producerConnection)."""
    group = need(cmd.ext_fields, "producerGroup")
    members = conn.server.producers.get(group)
    if not members:
        raise Refusal(SYSTEM_ERROR, f"the producer group[{group}] not exist")
    conn.reply(cmd, SUCCESS, body=_dumps({"connectionSet": [_connection(m) for m in members]}))


def topic_consume_by_who(conn, cmd) -> None:
    """AdminBrokerProcessor.queryTopicConsumeByWho (mqadmin queryMsgById, topicStatus' consumers): the online groups
    subscribed to the topic and every group with offsets in it."""
    topic = need(cmd.ext_fields, "topic")
    groups = {g for g in conn.server.consumers if topic in _subscriptions(conn, g)}
    groups |= conn.broker.consumer_offset_manager.which_group_by_topic(topic)
    conn.reply(cmd, SUCCESS, body=_dumps({"groupList": sorted(groups)}))


# -- subscription groups (200, 207): mqadmin updateSubGroup / deleteSubGroup -------------------------------------

def validate_slave(conn) -> None:
    """AdminBrokerProcessor.validateSlave: a slave's groups come from its master (and so do its topics)."""
    if conn.broker.store_config.broker_role == "SLAVE":
        raise Refusal(SYSTEM_ERROR, "Can't modify topic or subscription group from slave broker, please execute it "
                                    "from master broker.")


def update_subscription_group(conn, cmd) -> None:
    """AdminBrokerProcessor.updateAndCreateSubscriptionGroup: the body is a SubscriptionGroupConfig; the group is
    created or replaced in subscriptionGroup.json (persisted at once)."""
    validate_slave(conn)
    try:
        raw = json.loads(cmd.body or b"null")
    except ValueError as e:
        raise Refusal(SYSTEM_ERROR, f"subscription group body is not JSON: {e}") from None
    if raw is None:                      # RemotingSerializable.decode of no body: nothing to change, as in Java
        conn.reply(cmd, SUCCESS)
        return
    try:
        config = SubscriptionGroupConfig.from_json(raw, "SubscriptionGroupConfig")
        conn.broker.update_group(config)
    except (FieldError, InvalidConfigError, IllegalNameError) as e:
        raise Refusal(SYSTEM_ERROR, str(e)) from None
    conn.reply(cmd, SUCCESS)


def delete_subscription_group(conn, cmd) -> None:
    """AdminBrokerProcessor.deleteSubscriptionGroup: the group's config goes; its offsets too when ``removeOffset``
    is true (mqadmin deleteSubGroup -r)."""
    validate_slave(conn)
    ext = cmd.ext_fields
    group = need(ext, "groupName")
    conn.broker.subscription_group_manager.delete_subscription_group_config(group)
    if ext.get("removeOffset", "false").lower() == "true":
        conn.broker.consumer_offset_manager.remove_offset(group)
    conn.reply(cmd, SUCCESS)


# -- QueryMessageProcessor: QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33) ------------------------------------------------

def view_message_by_id(conn, cmd) -> None:
    offset = header_int(cmd.ext_fields, "offset")
    m = conn.broker.store.look_message(offset) if offset >= 0 else None
    if m is None:
        conn.reply(cmd, SYSTEM_ERROR, remark=f"can not find message by the offset, {offset}")
        return
    conn.reply(cmd, SUCCESS, body=[m.record()])


def query_message(conn, cmd) -> None:
    ext = cmd.ext_fields
    topic, key = need(ext, "topic"), need(ext, "key")
    max_num = header_int(ext, "maxNum")
    begin, end = header_int(ext, "beginTimestamp"), header_int(ext, "endTimestamp")
    if ext.get("_UNIQUE_KEY_QUERY") == "true":
        max_num = 32     # QueryMessageProcessor: a unique-key query asks defaultQueryMaxNum
    # The index is built by dispatch: what a client sent just before (its own send, answered) must be found.
    conn._dispatch_written()
    found = conn.broker.store.query_message(topic, key, max(1, min(max_num, 64)), begin, end)
    ext_out = {"indexLastUpdateTimestamp": "0", "indexLastUpdatePhyoffset": "0"}
    if not found:
        conn.reply(cmd, QUERY_NOT_FOUND, ext_out, remark="can not find message, maybe time range not correct")
        return
    conn.reply(cmd, SUCCESS, ext_out, body=[m.record() for m in found])

