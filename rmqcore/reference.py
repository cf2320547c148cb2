"""The executable spec: every on-disk format of rmqcore in slow, readable Python.

Nothing here is used on a hot path. The Cython modules are tested against these functions (same bytes, same
fields, same errors), and each function follows RocketMQ's Java code field by field: MessageDecoder,
MessageExtEncoder, CommitLog.checkMessageAndReturnSize, ConsumeQueue, IndexFile, StoreCheckpoint.
"""
from __future__ import annotations

import ipaddress
import struct
import zlib

from .errors import CorruptRecordError

MESSAGE_MAGIC_CODE = -626843481
MESSAGE_MAGIC_CODE_V2 = -626843477
BLANK_MAGIC_CODE = -875286124
END_FILE_MIN_BLANK_LENGTH = 8
CRC32_RESERVED_LEN = 20
PROPERTY_CRC32 = "__CRC32#"

BORNHOST_V6 = 0x10
STOREHOSTADDRESS_V6 = 0x20
TRANSACTION_PREPARED = 0x4
TRANSACTION_ROLLBACK = 0xC

CQ_STORE_UNIT_SIZE = 20
INDEX_HEADER_SIZE = 40
INDEX_HASH_SLOT_SIZE = 4
INDEX_SIZE = 20


# -- CRC and hashes ------------------------------------------------------------------------------------------------

def crc32(data) -> int:
    """RocketMQ's UtilAll.crc32: java.util.zip.CRC32 (= zlib) masked to a non-negative int."""
    return zlib.crc32(bytes(data)) & 0x7FFFFFFF


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def java_hash_code(s: str) -> int:
    """Java's String.hashCode: h = 31*h + c over UTF-16 code units, wrapping at 32 bits."""
    h = 0
    units = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def tags_code(tags: str | None) -> int:
    return java_hash_code(tags) if tags else 0


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: abs(hashCode), 0 when abs overflows (Integer.MIN_VALUE)."""
    h = abs(java_hash_code(key))
    return 0 if h > 0x7FFFFFFF else h


# -- properties -----------------------------------------------------------------------------------------------------

def properties_to_string(properties: dict | None) -> str:
    """MessageDecoder.messageProperties2String: name \\x01 value \\x02 for every pair with a value."""
    if not properties:
        return ""
    return "".join(f"{k}\x01{v}\x02" for k, v in properties.items() if v is not None)


def string_to_properties(s: str) -> dict:
    """MessageDecoder.string2messageProperties: a pair counts with a non-empty name and value; last one wins."""
    out: dict = {}
    length = len(s)
    index = 0
    while index < length:
        new_index = s.find("\x02", index)
        if new_index < 0:
            new_index = length
        if new_index - index >= 3:
            kv = s.find("\x01", index)
            if index < kv < new_index - 1:
                out[s[index:kv]] = s[kv + 1:new_index]
        index = new_index + 1
    return out


# -- hosts and ids --------------------------------------------------------------------------------------------------

def host_to_bytes(host: str) -> bytes:
    ip, _, port = host.rpartition(":")
    ip = ip.strip("[]")
    return ipaddress.ip_address(ip).packed + struct.pack(">i", int(port))


def bytes_to_host(raw: bytes) -> str:
    if len(raw) == 8:
        return f"{ipaddress.IPv4Address(raw[:4])}:{struct.unpack('>i', raw[4:])[0]}"
    return f"[{ipaddress.IPv6Address(raw[:16])}]:{struct.unpack('>i', raw[16:])[0]}"


def offset_msg_id(store_host: str, offset: int) -> str:
    """MessageDecoder.createMessageId: upper-case hex of store host bytes + 8-byte offset."""
    return (host_to_bytes(store_host) + struct.pack(">q", offset)).hex().upper()


# -- commitlog records ----------------------------------------------------------------------------------------------

def cal_msg_length(sys_flag: int, body_len: int, topic_len: int, props_len: int, version: int = 1) -> int:
    born = 8 if sys_flag & BORNHOST_V6 == 0 else 20
    store = 8 if sys_flag & STOREHOSTADDRESS_V6 == 0 else 20
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8
            + 4 + body_len + (1 if version == 1 else 2) + topic_len + 2 + props_len)


def encode_message(*, topic: str, body: bytes, queue_id: int = 0, flag: int = 0, queue_offset: int = 0,
                   physical_offset: int = 0, sys_flag: int = 0, born_timestamp: int = 0,
                   born_host: str = "127.0.0.1:10911", store_timestamp: int = 0,
                   store_host: str = "127.0.0.1:10911", reconsume_times: int = 0,
                   prepared_transaction_offset: int = 0, properties: dict | None = None, version: int = 1,
                   append_crc_property: bool = False) -> bytes:
    """One commitlog record, field by field as DESIGN.md §2 and MessageExtEncoder write it.

    ``version=2`` writes the 5.x magic with a 2-byte topic length; ``append_crc_property`` appends 5.x's
    ``__CRC32#`` property holding the CRC of the record before it (digits least significant first).
    """
    born = host_to_bytes(born_host)
    store = host_to_bytes(store_host)
    sys_flag &= ~(BORNHOST_V6 | STOREHOSTADDRESS_V6)
    if len(born) == 20:
        sys_flag |= BORNHOST_V6
    if len(store) == 20:
        sys_flag |= STOREHOSTADDRESS_V6
    topic_b = topic.encode("utf-8")
    props_b = properties_to_string(properties).encode("utf-8")
    if append_crc_property:
        if props_b and not props_b.endswith(b"\x02"):
            props_b += b"\x02"
        props_b += b"\0" * CRC32_RESERVED_LEN
    total = cal_msg_length(sys_flag, len(body), len(topic_b), len(props_b), version)
    out = bytearray()
    out += struct.pack(">i", total)                                          # 1 TOTALSIZE
    out += struct.pack(">i", MESSAGE_MAGIC_CODE if version == 1 else MESSAGE_MAGIC_CODE_V2)  # 2 MAGICCODE
    out += struct.pack(">i", crc32(body))                                     # 3 BODYCRC
    out += struct.pack(">i", queue_id)                                        # 4 QUEUEID
    out += struct.pack(">i", flag)                                            # 5 FLAG
    out += struct.pack(">q", queue_offset)                                    # 6 QUEUEOFFSET
    out += struct.pack(">q", physical_offset)                                 # 7 PHYSICALOFFSET
    out += struct.pack(">i", sys_flag)                                        # 8 SYSFLAG
    out += struct.pack(">q", born_timestamp)                                  # 9 BORNTIMESTAMP
    out += born                                                               # 10 BORNHOST
    out += struct.pack(">q", store_timestamp)                                 # 11 STORETIMESTAMP
    out += store                                                              # 12 STOREHOSTADDRESS
    out += struct.pack(">i", reconsume_times)                                 # 13 RECONSUMETIMES
    out += struct.pack(">q", prepared_transaction_offset)                     # 14 PREPAREDTRANSACTIONOFFSET
    out += struct.pack(">i", len(body)) + bytes(body)                         # 15 BODY
    out += (struct.pack(">b", len(topic_b)) if version == 1 else struct.pack(">h", len(topic_b))) + topic_b  # 16
    out += struct.pack(">h", len(props_b)) + props_b                          # 17 PROPERTIES
    assert len(out) == total
    if append_crc_property:
        crc = crc32(out[:total - CRC32_RESERVED_LEN])
        digits = ""
        for _ in range(10):
            digits += str(crc % 10)
            crc //= 10
        out[total - CRC32_RESERVED_LEN:] = (PROPERTY_CRC32 + "\x01" + digits + "\x02").encode("ascii")
    return bytes(out)


def blank_record(size: int) -> bytes:
    """The end-of-file filler: totalSize = the rest of the file, BLANK magic; RocketMQ writes only these 8 bytes."""
    return struct.pack(">ii", size, BLANK_MAGIC_CODE)


def decode_message(buf, offset: int = 0, check_crc: bool = False) -> dict:
    """CommitLog.checkMessageAndReturnSize + MessageDecoder.decode: the record at ``offset`` as a dict of fields.

    Raises CorruptRecordError with the same field names as the Cython decoder.
    """
    b = bytes(buf)
    avail = len(b) - offset

    def bad(field, why):
        raise CorruptRecordError(offset, field, why)

    if avail < 4:
        bad("totalSize", "truncated" if avail > 0 else "0: no record here (end of data)")
    total = struct.unpack_from(">i", b, offset)[0]
    if total == 0:
        bad("totalSize", "0: no record here (end of data)")
    if avail < 8:
        bad("totalSize", "truncated")
    magic = struct.unpack_from(">i", b, offset + 4)[0]
    if magic == BLANK_MAGIC_CODE:
        if not END_FILE_MIN_BLANK_LENGTH <= total <= avail:
            bad("totalSize", "a blank record's size must cover at least its 8 bytes and stay in the file")
        bad("magicCode", "blank (end of file) record, not a message")
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        bad("magicCode", "not a RocketMQ message")
    version = 1 if magic == MESSAGE_MAGIC_CODE else 2
    if total < cal_msg_length(0, 0, 0, 0, version):
        bad("totalSize", "smaller than the fixed part")
    if total > avail:
        bad("totalSize", "truncated")
    rec = b[offset:offset + total]
    (body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
     born_ts) = struct.unpack_from(">iiiqqiq", rec, 8)
    pos = 48
    born_len = 8 if sys_flag & BORNHOST_V6 == 0 else 20
    store_len = 8 if sys_flag & STOREHOSTADDRESS_V6 == 0 else 20
    if pos + born_len + 8 + store_len + 16 > total:
        bad("totalSize", "smaller than its hosts need")
    born_host = rec[pos:pos + born_len]
    pos += born_len
    store_ts = struct.unpack_from(">q", rec, pos)[0]
    pos += 8
    store_host = rec[pos:pos + store_len]
    pos += store_len
    reconsume, prepared, body_len = struct.unpack_from(">iqi", rec, pos)
    pos += 16
    if body_len < 0 or pos + body_len > total:
        bad("bodyLength", "past the record")
    body = rec[pos:pos + body_len]
    pos += body_len
    tlen_size = 1 if version == 1 else 2
    if pos + tlen_size > total:
        bad("topicLength", "past the record")
    topic_len = rec[pos] if version == 1 else struct.unpack_from(">H", rec, pos)[0]
    pos += tlen_size
    if pos + topic_len > total:
        bad("topicLength", "past the record")
    topic = rec[pos:pos + topic_len].decode("utf-8", "replace")
    pos += topic_len
    if pos + 2 > total:
        bad("propertiesLength", "past the record")
    props_len = struct.unpack_from(">h", rec, pos)[0]
    pos += 2
    if props_len < 0 or pos + props_len > total:
        bad("propertiesLength", "past the record")
    props_raw = rec[pos:pos + props_len]
    if cal_msg_length(sys_flag, body_len, topic_len, props_len, version) != total:
        bad("totalSize", "differs from the sum of the parts")
    if check_crc:
        if body_len > 0 and crc32(body) != body_crc:
            bad("bodyCRC", "mismatch")
        tail = rec[total - CRC32_RESERVED_LEN:] if props_len >= CRC32_RESERVED_LEN else b""
        if tail.startswith(b"__CRC32#\x01") and tail.endswith(b"\x02"):
            digits = tail[9:19]
            if not digits.isdigit():
                bad("__CRC32#", "not digits")
            expected = int(digits.decode()[::-1])
            if crc32(rec[:total - CRC32_RESERVED_LEN]) != expected:
                bad("__CRC32#", "mismatch")
    return {
        "store_size": total, "magic_code": magic, "body_crc": body_crc, "queue_id": queue_id, "flag": flag,
        "queue_offset": queue_offset, "commitlog_offset": physical_offset, "sys_flag": sys_flag,
        "born_timestamp": born_ts, "born_host": bytes_to_host(born_host), "store_timestamp": store_ts,
        "store_host": bytes_to_host(store_host), "reconsume_times": reconsume,
        "prepared_transaction_offset": prepared, "body": body, "topic": topic,
        "properties": string_to_properties(props_raw.decode("utf-8", "replace")),
    }


def iterate_records(buf, start: int = 0):
    """(offset, size, magic) of each record from ``start`` until end of data or a blank record; stops (without
    raising) at the first record that does not decode."""
    b = bytes(buf)
    pos = start
    while pos + 8 <= len(b):
        total, magic = struct.unpack_from(">ii", b, pos)
        if total == 0 or magic == BLANK_MAGIC_CODE:
            return
        try:
            decode_message(b, pos)
        except CorruptRecordError:
            return
        yield pos, total, magic
        pos += total


# -- consume queue ---------------------------------------------------------------------------------------------------

def encode_cq_unit(commitlog_offset: int, size: int, tags_code: int) -> bytes:
    """ConsumeQueue.putMessagePositionInfo's 20-byte unit: offset 8, size 4, tagsCode 8."""
    return struct.pack(">qiq", commitlog_offset, size, tags_code)


def decode_cq_units(buf) -> list[tuple[int, int, int]]:
    """Every whole unit of a consume-queue file, in order (blank units are (0, 0x7fffffff, 0) fillers or zeros)."""
    b = bytes(buf)
    return [struct.unpack_from(">qiq", b, i) for i in range(0, len(b) - len(b) % CQ_STORE_UNIT_SIZE,
                                                             CQ_STORE_UNIT_SIZE)]
