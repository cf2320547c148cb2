"""Between the protocol's Message and the store's records (the proxy's GrpcConverter and SendMessageActivity's
message building): which protocol fields become which RocketMQ properties, and back.

``to_store_message``, ``to_store_messages`` and ``fill_send_entries`` here are the reference the compiled ones in
``_converter.pyx`` (what SendMessage runs) are tested against, result for result and error for error."""
from __future__ import annotations

import time
import zlib

from ..compression import decompress
from ..message import Message
from ..status import PutStatus
from . import messaging_pb2 as pb
# The names and limits both converters share (protobuf-free, for the compiled one), re-exported here.
from .message_const import (DEFAULT_MAX_BODY, JAVA_LONG_MAX, JAVA_LONG_MIN, MAX_MESSAGE_GROUP_SIZE, MAX_MESSAGE_ID_LENGTH, MAX_TAG_LENGTH,  # noqa: F401
                            MAX_USER_PROPERTY_SIZE, PROPERTY_BORN_HOST_NAME, PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
                            PROPERTY_DLQ_ORIGIN_MESSAGE_ID, PROPERTY_DLQ_ORIGIN_TOPIC, PROPERTY_KEYS,
                            PROPERTY_PRODUCER_GROUP, PROPERTY_SHARDING_KEY, PROPERTY_TAGS, PROPERTY_TIMER_DELIVER_MS,
                            PROPERTY_TIMER_OUT_MS, PROPERTY_TRACE_CONTEXT, PROPERTY_TRANSACTION_CHECK_TIMES,
                            PROPERTY_TRANSACTION_PREPARED, PROPERTY_UNIQ_KEY, SYSTEM_PROPERTIES, InvalidMessage,
                            born_timestamp_refused, gzip_encoded_body)


def _check_text(value: str, code: int, what: str) -> None:
    if any(c in value for c in "\x00\x01\x02\n\r") or not value.strip():
        raise InvalidMessage(code, f"{what} {value[:64]!r} is blank or holds a control character")


def to_store_message(m: "pb.Message", max_body: int = DEFAULT_MAX_BODY,
                     budget: int | None = None) -> tuple[Message, int]:
    """A protocol Message → (store Message with queue_id -1, MessageType). Raises InvalidMessage. ``budget``: how
    far a gzip body may still expand, of its request's ``max_body`` (gzip_encoded_body)."""
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
    if len(sp.message_id) > MAX_MESSAGE_ID_LENGTH or not sp.message_id.isprintable():
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
            props[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(sp.orphaned_transaction_recovery_duration.seconds)
    if sp.HasField("trace_context"):
        props[PROPERTY_TRACE_CONTEXT] = sp.trace_context
    body = m.body
    sys_flag = 0
    if sp.body_encoding == pb.GZIP:
        body, sys_flag = gzip_encoded_body(body, max_body, max_body if budget is None else budget)
    born = sp.born_timestamp.seconds * 1000 + sp.born_timestamp.nanos // 1_000_000 if sp.HasField(
        "born_timestamp") else time.time_ns() // 1_000_000
    host = _born_host(sp.born_host)
    if not JAVA_LONG_MIN <= born <= JAVA_LONG_MAX:
        raise born_timestamp_refused(born)
    msg = Message(m.topic.name, body, -1, properties=props, sys_flag=sys_flag, born_timestamp=born, born_host=host)
    return msg, mtype


def to_store_messages(messages, max_body: int) -> list[tuple[Message, int]]:
    """A SendMessage request's messages → [(store Message, MessageType)], every body checked first (empty, or
    longer than ``max_body``: the store's max_message_size) so a bad one anywhere refuses the request before any is
    converted; gzip bodies expand to no more than ``max_body`` together. Raises InvalidMessage."""
    for m in messages:
        if not m.body:
            raise InvalidMessage(pb.MESSAGE_BODY_EMPTY, "message body is empty")
        if len(m.body) > max_body:
            raise InvalidMessage(pb.MESSAGE_BODY_TOO_LARGE, f"message body is {len(m.body)} bytes, more than "
                                 f"{max_body} (max_message_size)")
    out = []
    budget = max_body
    for m in messages:
        msg, mtype = to_store_message(m, max_body, budget)
        if m.system_properties.body_encoding == pb.GZIP and not msg.sys_flag:      # a gzip body, inflated
            budget -= len(msg.body)
        out.append((msg, mtype))
    return out


def fill_send_entries(resp: "pb.SendMessageResponse", messages, converted, results) -> tuple[list[int], int, str]:
    """SendMessage's answer, one SendResultEntry per message appended to ``resp.entries``: ``messages`` the
    request's, ``converted`` what to_store_messages made of them, ``results`` their PutResults. Returns (the body
    sizes of the messages stored, for the events; the code and text for the response's status: OK, or those of the
    last entry that failed)."""
    sizes = []
    worst = pb.OK
    text = "OK"
    for (_m, mtype), src, r in zip(converted, messages, results):
        e = resp.entries.add()
        e.message_id = src.system_properties.message_id
        if r.status is PutStatus.PUT_OK:
            e.status.code = pb.OK
            e.status.message = "OK"
            e.offset = r.queue_offset
            sizes.append(len(src.body))
            if mtype == pb.TRANSACTION:
                e.transaction_id = r.msg_id or f"{r.commitlog_offset:032X}"
        elif r.status is PutStatus.FLUSH_DISK_TIMEOUT:
            worst, text = pb.MASTER_PERSISTENCE_TIMEOUT, "stored, but no flush covered it in time"
            e.status.code = worst
            e.status.message = text
        elif r.status is PutStatus.FLUSH_SLAVE_TIMEOUT:         # the proxy's SendStatus mapping (SendMessageActivity)
            worst, text = pb.SLAVE_PERSISTENCE_TIMEOUT, "stored, but no slave acknowledged it in time"
            e.status.code = worst
            e.status.message = text
        elif r.status is PutStatus.SLAVE_NOT_AVAILABLE:
            worst, text = pb.HA_NOT_AVAILABLE, "stored, but no slave is available (none connected, or too far behind)"
            e.status.code = worst
            e.status.message = text
        else:
            worst, text = pb.INTERNAL_SERVER_ERROR, f"put failed: {r.status.name}"
            e.status.code = worst
            e.status.message = text
    return sizes, worst, text


def _born_host(host: str) -> str | None:
    # The client gives an IP without a port; the store's bornHost is IP:port.
    if not host:
        return None
    if ":" in host and host.count(":") == 1:
        return host
    parts = host.split(".")
    # ASCII digits only: str.isdigit also takes "²" (which int() refuses) and "١" (no IPv4 address).
    if len(parts) == 4 and all(p.isascii() and p.isdigit() and int(p) < 256 for p in parts):
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
                     message_id: str | None = None, body_limit: int = DEFAULT_MAX_BODY) -> "pb.Message":
    """A stored message (MessageExt) → the protocol's Message, as the proxy builds it for a consumer.

    A compressed body (sysFlag COMPRESSED: a 4.x producer's, or a 5.x one's sent GZIP) goes out inflated, IDENTITY,
    its digest over what the producer sent: as the proxy answers when it reads through the broker's client
    (MessageDecoder with decompressBody, which clears the flag), and the one answer every client reads whatever
    the compressor (the protocol names no LZ4 or ZSTD encoding). Inflated no further than ``body_limit`` (the
    store's max_message_size: a producer sends no larger body); raises compression.DecompressionError for a body
    that does not inflate."""
    props = ext.properties
    body = decompress(ext.body, ext.sys_flag, body_limit)
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
