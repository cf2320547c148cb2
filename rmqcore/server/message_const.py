"""What a protocol message may carry into the store, without protobuf: MessageConst's property names the protocol
maps, its STRING_HASH_SET (names a user property may not take), the proxy's limits on a message (ProxyConfig
defaults), and ``InvalidMessage``, the refusal of a message that breaks them. Shared by the Python converter
(converter.py, which needs protobuf) and the compiled one (_converter.pyx, which must import without it: grpcio
and protobuf are only in the ``server`` extra)."""
from __future__ import annotations

import zlib

from ..compression import COMPRESSED_FLAG, DEFAULT_LIMIT, is_zlib_header

# MessageConst property names the protocol carries in system properties.
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"            # MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
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
MAX_MESSAGE_ID_LENGTH = 128


# A GZIP body's limits, without a size the converters are given (StoreConfig.max_message_size's default).
DEFAULT_MAX_BODY = DEFAULT_LIMIT
# The protocol's codes for a body refused (messaging.proto Code; this module imports no protobuf).
MESSAGE_CORRUPTED = 40016
MESSAGE_BODY_TOO_LARGE = 41301
GZIP_MAGIC = b"\x1f\x8b"
GZIP_PROBE = 64 * 1024          # what gunzip_limited inflates of a body whose trailer says it is too large


def gunzip_limited(body: bytes, limit: int) -> bytes | None:
    """A gzip body decompressed (every member of it, as gzip reads it), or None when it would expand past
    ``limit`` bytes: it is inflated only that far, so a small request cannot take the memory of a huge one. Each
    member is one zlib call, which lets go of the GIL while it inflates. Raises zlib.error for a body that does not
    decompress, EOFError for a cut one, OSError for bytes after its last member."""
    # A gzip file ends with ISIZE, the size of its last member inflated (mod 2**32, RFC 1952). Past ``limit`` the
    # body as a whole is too (every member adds to it), if the trailer tells the truth: then only the first
    # GZIP_PROBE bytes are inflated, which shows a body that is no deflate stream (corrupted), one that ends early
    # (small after all: read in full, below) or one that goes on (refused without inflating the rest). A bomb
    # costs 64 KiB of inflating, not max_message_size; a body whose trailer lies is still held to ``limit``.
    probe = len(body) >= 18 and int.from_bytes(body[-4:], "little") > limit
    out = []
    left = limit
    data = body
    while True:
        d = zlib.decompressobj(wbits=31)            # 16 + 15: a gzip header and trailer around a deflate stream
        if probe:
            probe = False
            most = min(GZIP_PROBE, left + 1)
            part = d.decompress(data, most)
            if not d.eof and len(part) >= most:
                return None
        else:
            part = d.decompress(data, left + 1)
        if len(part) > left:
            return None
        if not d.eof:
            raise EOFError("the gzip stream is cut short")
        out.append(part)
        left -= len(part)
        data = d.unused_data
        if not data:
            return b"".join(out) if len(out) > 1 else part
        if data[:2] != GZIP_MAGIC:
            raise OSError("bytes after the end of the gzip stream")


def gzip_encoded_body(body: bytes, max_body: int, budget: int) -> tuple[bytes, int]:
    """What is stored of a body whose encoding is GZIP: (the body, the sysFlag bits it is stored with), for both
    converters. Raises InvalidMessage.

    RocketMQ 5's clients write a zlib stream under GZIP (the Java client's Utilities.compressBytesGzip is a
    DeflaterOutputStream; its consumers read GZIP with an InflaterInputStream), and the proxy stores such a body
    as it came, flagged COMPRESSED (SendMessageActivity.buildSysFlag), the form a 4.x producer's compressed body
    has: a 4.x consumer inflates it, ReceiveMessage inflates it for a 5.x one. Stored so here, with nothing
    inflated on the way in. A gzip file (``1f 8b``, which no 4.x consumer reads) is inflated instead, no further
    than ``budget``: what is left of ``max_body`` (max_message_size) for the request's gzip bodies together, a
    request as a whole being held to what RocketMQ holds a batch to (one message of at most maxMessageSize).
    Anything else under GZIP is corrupted."""
    if body[:2] == GZIP_MAGIC:
        try:
            out = gunzip_limited(body, budget)
        # zlib.error: a gzip header over a deflate stream that is not one (BadGzipFile is an OSError, a cut
        # stream an EOFError).
        except (OSError, EOFError, zlib.error) as e:
            raise InvalidMessage(MESSAGE_CORRUPTED, f"gzip body does not decompress: {e}") from None
        if out is None:
            raise InvalidMessage(MESSAGE_BODY_TOO_LARGE, f"gzip body expands past {max_body} bytes "
                                 "(max_message_size)" if budget >= max_body else
                                 f"gzip bodies of the request expand past {max_body} bytes together "
                                 "(max_message_size, for a request as a whole)")
        return out, 0
    if is_zlib_header(body):
        return body, COMPRESSED_FLAG
    raise InvalidMessage(MESSAGE_CORRUPTED, "a GZIP body is neither a zlib stream (what RocketMQ's clients write) "
                         "nor a gzip file")


class InvalidMessage(ValueError):
    """A message the proxy refuses before storing it: ``code`` is the protocol's Code for it."""

    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code


CODE_BAD_REQUEST = 40000                  # apache.rocketmq.v2.Code.BAD_REQUEST
JAVA_LONG_MIN, JAVA_LONG_MAX = -(1 << 63), (1 << 63) - 1


def born_timestamp_refused(ms: int) -> InvalidMessage:
    """A born_timestamp whose milliseconds do not fit the record's Java long: the request is malformed (BAD_REQUEST,
    as the proxy answers a request it cannot read), not an error of the server."""
    return InvalidMessage(CODE_BAD_REQUEST, f"born_timestamp is {ms} ms, outside a Java long "
                                            f"[{JAVA_LONG_MIN}, {JAVA_LONG_MAX}]")
