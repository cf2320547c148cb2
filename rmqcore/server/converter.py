"""Between the protocol's Message and the store's records (the proxy's GrpcConverter and SendMessageActivity's
message building): which protocol fields become which RocketMQ properties, and back."""
from __future__ import annotations

import time
import zlib

from ..message import Message
from . import messaging_pb2 as pb

# MessageConst property names the protocol carries in system properties.
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"            # MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_BORN_HOST_NAME = "__BORNHOST"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"

# MessageConst.STRING_HASH_SET: names a user property may not take, and that never come back as user properties.
SYSTEM_PROPERTIES = frozenset({
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
    "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
    "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME",
    "TRAN_PREPARED_QUEUE_OFFSET", "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER",
    "MSG_TYPE", "TIMER_DELAY_LEVEL", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS",
    "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "__STARTDELIVERTIME",
    PROPERTY_UNIQ_KEY, PROPERTY_SHARDING_KEY, "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "SHARDING_KEY",
    "__BORNHOST", "__RMQ.TRANSIENT.TRACE_CONTEXT", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "TRACE_CONTEXT",
    "__CRC32#", "INNER_NUM", "INNER_BASE", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET",
})

# Limits the proxy checks before a message reaches the broker (ProxyConfig defaults).
MAX_USER_PROPERTY_SIZE = 16 * 1024        # maxUserPropertySize
MAX_MESSAGE_GROUP_SIZE = 64               # maxMessageGroupSize
MAX_TAG_LENGTH = 1024


class InvalidMessage(ValueError):
    """A message the proxy refuses before storing it: ``code`` is the protocol's Code for it."""

    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code


def _check_text(value: str, code: int, what: str) -> None:
    if any(c in value for c in "\x00\x01\x02\n\r") or not value.strip():
        raise InvalidMessage(code, f"{what} {value[:64]!r} is blank or holds a control character")


def to_store_message(m: "pb.Message", topic_type_check=None) -> tuple[Message, int]:
    """A protocol Message → (store Message with queue_id -1, MessageType). Raises InvalidMessage."""
    sp = m.system_properties
    props: dict[str, str] = {}
    size = 0
    for k, v in m.user_properties.items():
        if k in SYSTEM_PROPERTIES:
            raise InvalidMessage(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {k!r} is reserved by the system")
        if not k or "\x01" in k or "\x02" in k or "\x01" in v or "\x02" in v:
            raise InvalidMessage(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {k[:64]!r} holds a separator character")
        size += len(k) + len(v)
        props[k] = v
    if size > MAX_USER_PROPERTY_SIZE:
        raise InvalidMessage(pb.MESSAGE_PROPERTIES_TOO_LARGE,
                             f"user properties are {size} bytes, more than {MAX_USER_PROPERTY_SIZE}")
    if sp.HasField("tag"):
        tag = sp.tag
        _check_text(tag, pb.ILLEGAL_MESSAGE_TAG, "tag")
        if "|" in tag or len(tag) > MAX_TAG_LENGTH:
            raise InvalidMessage(pb.ILLEGAL_MESSAGE_TAG, f"tag {tag[:64]!r} holds '|' or is too long")
        props[PROPERTY_TAGS] = tag
    if sp.keys:
        for k in sp.keys:
            _check_text(k, pb.ILLEGAL_MESSAGE_KEY, "key")
        props[PROPERTY_KEYS] = " ".join(sp.keys)
    if not sp.message_id:
        raise InvalidMessage(pb.ILLEGAL_MESSAGE_ID, "message_id is empty")
    if len(sp.message_id) > 128 or not sp.message_id.isprintable():
        raise InvalidMessage(pb.ILLEGAL_MESSAGE_ID, f"message_id {sp.message_id[:64]!r} is not a message id")
    props[PROPERTY_UNIQ_KEY] = sp.message_id
    mtype = sp.message_type
    if sp.HasField("message_group"):
        group = sp.message_group
        _check_text(group, pb.ILLEGAL_MESSAGE_GROUP, "message group")
        if len(group) > MAX_MESSAGE_GROUP_SIZE:
            raise InvalidMessage(pb.ILLEGAL_MESSAGE_GROUP, f"message group is {len(group)} characters, more than "
                                 f"{MAX_MESSAGE_GROUP_SIZE}")
        props[PROPERTY_SHARDING_KEY] = group
    if sp.HasField("delivery_timestamp"):
        ms = sp.delivery_timestamp.seconds * 1000 + sp.delivery_timestamp.nanos // 1_000_000
        if ms <= 0:
            raise InvalidMessage(pb.ILLEGAL_DELIVERY_TIME, f"delivery timestamp {ms} is not a time")
        props[PROPERTY_TIMER_DELIVER_MS] = str(ms)
    if mtype == pb.TRANSACTION:
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        # A gRPC producer's group is its topic: the proxy registers producers under the topics they publish to,
        # and the orphan check goes to a producer of that topic.
        props[PROPERTY_PRODUCER_GROUP] = m.topic.name
        if sp.HasField("orphaned_transaction_recovery_duration"):
            props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(sp.orphaned_transaction_recovery_duration.seconds)
    if sp.HasField("trace_context"):
        props[PROPERTY_TRACE_CONTEXT] = sp.trace_context
    body = m.body
    if sp.body_encoding == pb.GZIP:
        import gzip
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError) as e:
            raise InvalidMessage(pb.MESSAGE_CORRUPTED, f"gzip body does not decompress: {e}") from None
    born = sp.born_timestamp.seconds * 1000 + sp.born_timestamp.nanos // 1_000_000 if sp.HasField(
        "born_timestamp") else time.time_ns() // 1_000_000
    msg = Message(m.topic.name, body, -1, properties=props, born_timestamp=born,
                  born_host=_born_host(sp.born_host))
    return msg, mtype


def _born_host(host: str) -> str | None:
    # The client gives an IP without a port; the store's bornHost is IP:port.
    if not host:
        return None
    if ":" in host and host.count(":") == 1:
        return host
    parts = host.split(".")
    if len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts):
        return f"{host}:0"
    return None


def message_type_of(props: dict) -> int:
    if props.get(PROPERTY_TRANSACTION_PREPARED) == "true" or PROPERTY_TRANSACTION_CHECK_TIMES in props:
        return pb.TRANSACTION
    if PROPERTY_SHARDING_KEY in props:
        return pb.FIFO
    if PROPERTY_TIMER_OUT_MS in props or PROPERTY_TIMER_DELIVER_MS in props or "DELAY" in props:
        return pb.DELAY
    return pb.NORMAL


def _ts(ts, ms: int) -> None:
    ts.seconds = ms // 1000
    ts.nanos = (ms % 1000) * 1_000_000


def to_proto_message(ext, *, topic: str | None = None, receipt_handle: str | None = None,
                     invisible_ms: int | None = None, attempt: int | None = None,
                     message_id: str | None = None) -> "pb.Message":
    """A stored message (MessageExt) → the protocol's Message, as the proxy builds it for a consumer."""
    props = ext.properties
    body = bytes(ext.body)
    m = pb.Message()
    m.topic.name = topic or ext.topic
    m.body = body
    for k, v in props.items():
        if k not in SYSTEM_PROPERTIES:
            m.user_properties[k] = v
    sp = m.system_properties
    tag = props.get(PROPERTY_TAGS)
    if tag is not None:
        sp.tag = tag
    keys = props.get(PROPERTY_KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(" ") if k)
    sp.message_id = message_id or props.get(PROPERTY_UNIQ_KEY) or ext.msg_id
    sp.body_digest.type = pb.CRC32
    sp.body_digest.checksum = format(zlib.crc32(body) & 0xFFFFFFFF, "08X")
    sp.body_encoding = pb.IDENTITY
    sp.message_type = message_type_of(props)
    _ts(sp.born_timestamp, ext.born_timestamp)
    sp.born_host = ext.born_host.rsplit(":", 1)[0] if ext.born_host else ""
    _ts(sp.store_timestamp, ext.store_timestamp)
    sp.store_host = ext.store_host
    deliver = props.get(PROPERTY_TIMER_OUT_MS) or props.get(PROPERTY_TIMER_DELIVER_MS)
    if deliver and deliver.isdigit():
        _ts(sp.delivery_timestamp, int(deliver))
    sp.queue_id = ext.queue_id
    sp.queue_offset = ext.queue_offset
    group = props.get(PROPERTY_SHARDING_KEY)
    if group:
        sp.message_group = group
    trace = props.get(PROPERTY_TRACE_CONTEXT)
    if trace:
        sp.trace_context = trace
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    if invisible_ms is not None:
        sp.invisible_duration.seconds = invisible_ms // 1000
        sp.invisible_duration.nanos = (invisible_ms % 1000) * 1_000_000
    if attempt is not None:
        sp.delivery_attempt = attempt
    return m
