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


def topic_is_dispatchable(name) -> bool:
    """A topic read from a store that may become consumequeue/{topic} (rmqcore._codec.topic_dispatchable): 1..255
    bytes of well-formed UTF-8 (Python's strict decoder refuses overlong forms, surrogates and code points past
    U+10FFFF, as the C check does), not "." or "..", no control character (C0, DEL, C1), '/' or '\\'."""
    raw = name.encode("utf-8", "surrogatepass") if isinstance(name, str) else bytes(name)
    if not 0 < len(raw) <= 255 or raw in (b".", b".."):
        return False
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "/\\" for c in text)


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
    if topic_len > (127 if version == 1 else 32767):
        bad("topicLength", "a negative length to RocketMQ's reader")
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


# -- index file -----------------------------------------------------------------------------------------------------
# IndexFile / IndexHeader (store/index): header 40 bytes, hash_slot_num slots of 4 bytes, index_num items of 20
# bytes (keyHash 4, phyOffset 8, timeDiff 4, prevIndex 4); item 0 is never used, indexCount starts at 1.

INDEX_INVALID = 0
_INDEX_HEADER_STRUCT = struct.Struct(">qqqqii")
_INDEX_ITEM_STRUCT = struct.Struct(">iqii")
_INT32_MAX = 0x7FFFFFFF


SELECT_FOUND, SELECT_NO_MATCHED_MESSAGE, SELECT_MESSAGE_WAS_REMOVING = 0, 1, 2


def select_messages(units, files, file_size: int, max_count: int, max_transfer_bytes: int,
                    max_transfer_count: int, tag_codes=None, exact_tags=None):
    """DefaultMessageStore.getMessage's loop over consume-queue units as rmqcore runs it (the twin of
    ``_pull.select_messages`` / ``select_queue``): ``(commitlog offsets found, units consumed, status, bytes,
    max physical offset pulled)``.

    ``files``: the commitlog's files in order as ``(file_from_offset, readable bytes or None for a closed file)``.
    RocketMQ's rules: look at most max(16000, max_count * 20) / 20 units; stop before a unit once the batch is full
    (``max_count`` messages, ``max_transfer_bytes`` or ``max_transfer_count``); a unit whose tags code is not in
    ``tag_codes`` is passed over; a unit pointing outside the files (or a non-positive size) is MESSAGE_WAS_REMOVING
    while nothing was found, and the units after it that point into the same file are passed over; a unit whose
    bytes are not one whole record of exactly its size is skipped (removing while nothing was found); with
    ``exact_tags``, a record whose TAGS property is not among them is passed over.
    """
    units = bytes(units)
    nunits = len(units) // 20
    out: list[int] = []
    status, total, max_phy, consumed = SELECT_NO_MATCHED_MESSAGE, 0, 0, 0
    if not files or nunits == 0:
        return out, 0, status, 0, 0
    first_from = files[0][0]
    next_phy_file_start = -1
    max_filter = max(16000, max_count * 20) // 20
    i = 0
    while i < nunits and i < max_filter:
        offset, size, tags = struct.unpack_from(">qiq", units, i * 20)
        max_phy = offset
        i += 1
        if next_phy_file_start != -1 and offset < next_phy_file_start:
            continue
        if total and out and (len(out) >= max_count or total + size > max_transfer_bytes
                              or len(out) > max_transfer_count - 1):
            i -= 1
            break
        if tag_codes is not None and tags not in tag_codes:
            continue
        findex = (offset - first_from) // file_size if offset >= first_from else -1
        data = files[findex][1] if 0 <= findex < len(files) and size > 0 else None
        pos = offset - (first_from + findex * file_size)
        if data is None or pos + size > len(data):
            if total == 0:
                status = SELECT_MESSAGE_WAS_REMOVING
            # CommitLog.rollNextFile: offset + size - offset % size, Java's remainder (a negative offset's too)
            next_phy_file_start = offset + file_size - (abs(offset) % file_size) * (1 if offset >= 0 else -1)
            continue
        try:
            rec = decode_message(data[pos:pos + size])
        except CorruptRecordError:
            rec = None
        if rec is None or rec["store_size"] != size:
            if total == 0:
                status = SELECT_MESSAGE_WAS_REMOVING
            continue
        if exact_tags is not None and rec["properties"].get("TAGS") not in exact_tags:
            continue
        out.append(offset)
        total += size
        status = SELECT_FOUND
        next_phy_file_start = -1
    consumed = i
    return out, consumed, status, total, max_phy


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * INDEX_HASH_SLOT_SIZE + index_num * INDEX_SIZE


def parse_index_header(buf) -> dict:
    """The six header fields as stored (indexCount raw: IndexHeader.load reads <= 0 as 1)."""
    bt, et, bp, ep, slots, count = _INDEX_HEADER_STRUCT.unpack_from(buf, 0)
    return {"begin_timestamp": bt, "end_timestamp": et, "begin_phy_offset": bp, "end_phy_offset": ep,
            "hash_slot_count": slots, "index_count": count}


def _wrap64(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v & (1 << 63) else v


def _java_ldiv(a: int, b: int) -> int:
    """Java's long division: truncates toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


class IndexFileRef:
    """IndexFile over a writable buffer (bytearray or mmap) of exactly index_file_size(...) bytes.

    ``IndexFileRef(buf, slots, num, end_phy_offset, end_timestamp)`` formats a new file in ``buf`` (the
    constructor's carry-over of the previous file's end offset/time, then the whole header written, indexCount 1);
    ``IndexFileRef.open(buf, slots, num)`` loads an existing one (IndexHeader.load). Every put rewrites the header.
    """

    def __init__(self, buf, hash_slot_num: int, index_num: int, end_phy_offset: int = 0, end_timestamp: int = 0,
                 *, load: bool = False):
        from .errors import StoreLayoutError
        size = index_file_size(hash_slot_num, index_num)
        if len(buf) != size:
            raise StoreLayoutError(f"index file has {len(buf)} bytes, expected {size}")
        self.buf = buf
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        if load:
            h = parse_index_header(buf)
            self.begin_timestamp = h["begin_timestamp"]
            self.end_timestamp = h["end_timestamp"]
            self.begin_phy_offset = h["begin_phy_offset"]
            self.end_phy_offset = h["end_phy_offset"]
            self.hash_slot_count = h["hash_slot_count"]
            self.index_count = h["index_count"] if h["index_count"] > 0 else 1
        else:
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
            self.hash_slot_count = 0
            self.index_count = 1
            if end_phy_offset > 0:
                self.begin_phy_offset = self.end_phy_offset = end_phy_offset
            if end_timestamp > 0:
                self.begin_timestamp = self.end_timestamp = end_timestamp
            self.write_header()

    @classmethod
    def create(cls, hash_slot_num: int, index_num: int, end_phy_offset: int = 0, end_timestamp: int = 0):
        return cls(bytearray(index_file_size(hash_slot_num, index_num)), hash_slot_num, index_num,
                   end_phy_offset, end_timestamp)

    @classmethod
    def open(cls, buf, hash_slot_num: int, index_num: int):
        return cls(buf, hash_slot_num, index_num, load=True)

    def write_header(self) -> None:
        _INDEX_HEADER_STRUCT.pack_into(self.buf, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                                       self.end_phy_offset, _int32(self.hash_slot_count), _int32(self.index_count))

    def _slot_pos(self, key_hash: int) -> int:
        return INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * INDEX_HASH_SLOT_SIZE

    def _item_pos(self, index: int) -> int:
        return INDEX_HEADER_SIZE + self.hash_slot_num * INDEX_HASH_SLOT_SIZE + index * INDEX_SIZE

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def is_time_matched(self, begin: int, end: int) -> bool:
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        return self.put_hash(index_key_hash(key), phy_offset, store_timestamp)

    def put_hash(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """IndexFile.putKey with keyHash = indexKeyHashMethod(key) already computed."""
        count = self.index_count
        if count >= self.index_num:
            return False
        slot_pos = self._slot_pos(key_hash)
        (slot_value,) = struct.unpack_from(">i", self.buf, slot_pos)
        if slot_value <= INDEX_INVALID or slot_value > count:
            slot_value = INDEX_INVALID
        # timeDiff is taken against the begin time before this put (a new file's carried-over time for item 1).
        time_diff = _java_ldiv(_wrap64(store_timestamp - self.begin_timestamp), 1000)
        if self.begin_timestamp <= 0:
            time_diff = 0
        elif time_diff > _INT32_MAX:
            time_diff = _INT32_MAX
        elif time_diff < 0:
            time_diff = 0
        _INDEX_ITEM_STRUCT.pack_into(self.buf, self._item_pos(count), key_hash, phy_offset, time_diff, slot_value)
        struct.pack_into(">i", self.buf, slot_pos, count)
        if count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        if slot_value == INDEX_INVALID:
            self.hash_slot_count = _int32(self.hash_slot_count + 1)
        self.index_count = count + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        self.write_header()
        return True

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int, phy_offsets: list | None = None):
        return self.select_hash(index_key_hash(key), max_num, begin, end, phy_offsets)

    def select_hash(self, key_hash: int, max_num: int, begin: int, end: int, phy_offsets: list | None = None):
        """IndexFile.selectPhyOffset: appends to ``phy_offsets`` (shared across files, as in Java) until it holds
        max_num. Two guards Java lacks, silent on any file RocketMQ writes: an item index past the file ends the walk
        (Java's getInt would throw and the walk end the same way) and at most min(indexCount, index_num) items are
        visited (Java spins on a damaged file's multi-item cycle)."""
        out = [] if phy_offsets is None else phy_offsets
        count = self.index_count
        (slot_value,) = struct.unpack_from(">i", self.buf, self._slot_pos(key_hash))
        if slot_value <= INDEX_INVALID or slot_value > count or count <= 1:
            return out
        limit = min(count, self.index_num)
        steps = 0
        next_index = slot_value
        while True:
            if len(out) >= max_num:
                break
            if next_index >= self.index_num or steps >= limit:
                break
            steps += 1
            key_hash_read, phy_read, time_diff, prev_index = _INDEX_ITEM_STRUCT.unpack_from(
                self.buf, self._item_pos(next_index))
            if time_diff < 0:
                break
            time_read = _wrap64(self.begin_timestamp + time_diff * 1000)
            if key_hash == key_hash_read and begin <= time_read <= end:
                out.append(phy_read)
            if (prev_index <= INDEX_INVALID or prev_index > count or prev_index == next_index
                    or time_read < begin):
                break
            next_index = prev_index
        return out

    def item(self, index: int) -> tuple[int, int, int, int]:
        """Item ``index`` as stored: (keyHash, phyOffset, timeDiff, prevIndex)."""
        if not 1 <= index < self.index_num:
            raise IndexError(f"item {index} is outside [1, {self.index_num})")
        return _INDEX_ITEM_STRUCT.unpack_from(self.buf, self._item_pos(index))

    def reachable_items(self, bound: int = 0) -> tuple[list[int], list[int], int, list[int]]:
        """The twin of IndexFile.reachable_items(bound=..., with_times=True), as lists: the (keyHash, phyOffset,
        timeDiff) of every item a select for its own key can reach, in item order, and the defects met (a slot or
        link past the items written, an item reached twice, an item under another slot, a negative timeDiff)."""
        count = self.index_count if bound <= 0 else bound
        count = max(1, min(count, self.index_num))
        seen = [0] * count
        problems = 0
        for slot in range(self.hash_slot_num):
            (head,) = struct.unpack_from(">i", self.buf, INDEX_HEADER_SIZE + slot * INDEX_HASH_SLOT_SIZE)
            if head == 0:
                continue
            if head < 0 or head >= count:
                problems += 1
                continue
            idx = head
            while True:
                if seen[idx]:
                    problems += 1
                    break
                seen[idx] = 1
                h, _phy, diff, prev = _INDEX_ITEM_STRUCT.unpack_from(self.buf, self._item_pos(idx))
                if diff < 0:
                    problems += 1
                    break
                if h < 0 or h % self.hash_slot_num != slot:
                    problems += 1
                else:
                    seen[idx] = 2
                if prev == 0:
                    break
                if prev < 0 or prev >= count:
                    problems += 1
                    break
                idx = prev
        hashes, phys, diffs = [], [], []
        for idx in range(1, count):
            if seen[idx] == 2:
                h, phy, diff, _prev = _INDEX_ITEM_STRUCT.unpack_from(self.buf, self._item_pos(idx))
                hashes.append(h)
                phys.append(phy)
                diffs.append(diff)
        return hashes, phys, problems, diffs


# -- IndexService.queryOffset, DefaultMessageStore.queryMessage ----------------------------------------------------

def query_offset(index_files, key: str, max_num: int, begin: int, end: int) -> list[int]:
    """IndexService.queryOffset's walk for ``key`` (``topic#key``) over ``index_files`` (oldest first, objects with
    ``begin_timestamp``, ``is_time_matched`` and ``select_phy_offsets``): newest file first, each asked for the room
    left, until ``max_num`` offsets or a file that began before ``begin`` (the twin of ``query_files``)."""
    offsets: list[int] = []
    if max_num <= 0:
        return offsets
    for f in reversed(index_files):
        if f.is_time_matched(begin, end):
            offsets += f.select_phy_offsets(key, max_num - len(offsets), begin, end)
        if f.begin_timestamp < begin or len(offsets) >= max_num:
            break
    return offsets


def query_message(index_files, look, topic: str, key: str, max_num: int, begin: int, end: int,
                  max_batch: int = 64) -> list[int]:
    """MessageStore.query_message as rmqcore answers it (the twin of ``_pull.query_messages``): the commitlog
    offsets of the messages found, in result order.

    ``index_files``: oldest first, objects with ``begin_timestamp``, ``end_timestamp``, ``is_time_matched`` and
    ``select_phy_offsets(key, max_num, begin, end)`` (IndexFileRef, IndexFile). ``look(offset)``: the
    ``decode_message`` dict of the whole record that starts at ``offset``, or None.

    DefaultMessageStore.queryMessage: up to three rounds of IndexService.queryOffset (newest file first, at most
    min(maxNum, maxMsgsNumBatch) offsets, stopping at a file that began before ``begin``); after a round the window
    ends at the store time of the record at the round's lowest offset (Java sorts the offsets and reads the first);
    no further round once one found messages or that time is before ``begin``. rmqcore keeps the index's order
    (newest first) and only records of ``topic`` carrying ``key`` as UNIQ_KEY or among the KEYS (Java returns
    every hit, hash collisions included), each offset once, at most ``max_num``.
    """
    if max_num <= 0 or max_batch <= 0:
        return []
    batch = min(max_num, max_batch)
    full_key = topic + "#" + key
    key_utf8 = key.encode("utf-8")
    out: list[int] = []
    last_query_time = end
    for _ in range(3):
        offsets = query_offset(index_files, full_key, batch, begin, last_query_time)
        if not offsets:
            break
        lowest = min(offsets)
        for offset in offsets:
            if len(out) >= max_num:
                break
            rec = look(offset)
            if rec is None:
                continue
            if offset == lowest:
                last_query_time = rec["store_timestamp"]
            props = rec["properties"]
            keys = props["KEYS"].encode("utf-8").split(b" ") if "KEYS" in props else []
            uniq = props.get("UNIQ_KEY")
            if (offset not in out and rec["topic"] == topic
                    and ((uniq is not None and uniq.encode("utf-8") == key_utf8) or key_utf8 in keys)):
                out.append(offset)
        if out or last_query_time < begin:
            break
    return out
