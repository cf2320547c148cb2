"""Consumer send-back (RocketMQ's SendMessageProcessor.consumerSendMsgBack): a message a consumer failed to process
goes to its group's retry topic ``%RETRY%{group}`` with a delay level, or, once it has been retried the group's
``retryMaxTimes`` (16), or when the consumer asks with a negative delay level, to the dead-letter topic
``%DLQ%{group}``, queue 0.

The retry message keeps the original body, flag, sysFlag, born timestamp and host and every property, and adds:
``RETRY_TOPIC`` (the original topic, unless it already carries one), ``ORIGIN_MESSAGE_ID`` (the first attempt's
offset message id, kept across retries), ``WAIT`` "false" (RocketMQ does not wait for a flush of a send-back) and
``DELAY`` (the level: 3 + reconsume times unless the consumer gave one; "0" on the way to the DLQ). Its reconsume
times is the original's + 1.

Delayed delivery: the DELAY property is what RocketMQ's CommitLog turns into a SCHEDULE_TOPIC_XXXX message that
ScheduleMessageService delivers back to the retry topic when the level's time is up. rmqcore's store does that once
its ScheduleMessageService is in (issue 11); until then the store ignores DELAY and the retry message is due at
once. Nothing here changes when that lands: the property is already set as RocketMQ sets it.
"""
from __future__ import annotations

import random

from .._message import Message
from .mix_all import (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC,
                      PROPERTY_WAIT_STORE_MSG_OK, get_dlq_topic, get_retry_topic)

DLQ_NUMS_PER_GROUP = 1


def is_dead_letter(reconsume_times: int, max_reconsume_times: int, delay_level: int) -> bool:
    """RocketMQ's rule: retried as often as allowed, or the consumer asked for the DLQ (negative level)."""
    return reconsume_times >= max_reconsume_times or delay_level < 0


def retry_delay_level(reconsume_times: int, delay_level: int) -> int:
    """The level a retry is stored with: the consumer's, or 3 + reconsume times (10 s, 30 s, 1 min, ...)."""
    return delay_level if delay_level != 0 else 3 + reconsume_times


def build_send_back_message(msg_ext, group: str, retry_queue_nums: int, delay_level: int,
                            max_reconsume_times: int) -> tuple[Message, bool]:
    """The message to store for a send-back of ``msg_ext`` (as read back from the store), and whether it goes to
    the DLQ. The queue is random among the retry queues, always 0 in the DLQ (one queue per group)."""
    props = dict(msg_ext.properties)
    if PROPERTY_RETRY_TOPIC not in props:
        props[PROPERTY_RETRY_TOPIC] = msg_ext.topic
    props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
    reconsume_times = msg_ext.reconsume_times
    dead = is_dead_letter(reconsume_times, max_reconsume_times, delay_level)
    if dead:
        topic = get_dlq_topic(group)
        queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
        props[PROPERTY_DELAY_TIME_LEVEL] = "0"
    else:
        topic = get_retry_topic(group)
        queue_id = random.randrange(retry_queue_nums)
        props[PROPERTY_DELAY_TIME_LEVEL] = str(retry_delay_level(reconsume_times, delay_level))
    origin = props.get(PROPERTY_ORIGIN_MESSAGE_ID)
    if not origin or not origin.strip():
        props[PROPERTY_ORIGIN_MESSAGE_ID] = msg_ext.msg_id
    msg = Message(topic, bytes(msg_ext.body), queue_id, properties=props, flag=msg_ext.flag,
                  sys_flag=msg_ext.sys_flag, born_timestamp=msg_ext.born_timestamp, born_host=msg_ext.born_host,
                  reconsume_times=reconsume_times + 1)
    return msg, dead
