"""rmqcore._segment (the columnar segment decoder behind rmqcore.spark) against rmqcore.reference.

Differential: segments of records made by reference.encode_message (v1 and v2 magic, IPv4/IPv6 hosts, empty and
large bodies, 5.x __CRC32# property, any sysFlag, blank tail) decode to exactly the fields
reference.decode_message gives; corrupted and truncated segments give the reference's verdict and never crash.
"""
import struct
import zlib

import numpy as np
import pytest
from hypothesis import example, given, strategies as st

from rmqcore import _codec as C
from rmqcore import _segment as S
from rmqcore import reference as R
from rmqcore.errors import CorruptRecordError
from strategies import hosts, int32, int64, property_text, topics

text = property_text(12)
names = text.filter(lambda s: len(s) > 0)
key_text = st.text(alphabet="ab é😀", max_size=12)


@st.composite
def records(draw):
    props = draw(st.dictionaries(names, text, max_size=4))
    if draw(st.booleans()):
        props["TAGS"] = draw(names)
    if draw(st.booleans()):
        props["KEYS"] = draw(key_text)
    if draw(st.booleans()):
        props["UNIQ_KEY"] = draw(st.text(alphabet="0123456789ABCDEF", min_size=1, max_size=32))
    return dict(
        topic=draw(topics),
        body=draw(st.one_of(st.just(b""), st.binary(max_size=200), st.binary(min_size=3000, max_size=5000))),
        queue_id=draw(st.integers(0, (1 << 31) - 1)), flag=draw(int32), queue_offset=draw(int64),
        physical_offset=draw(int64),
        sys_flag=draw(st.integers(0, 0x7FF)),
        born_timestamp=draw(st.integers(-(1 << 40), 1 << 45)), store_timestamp=draw(st.integers(0, 1 << 45)),
        born_host=draw(hosts), store_host=draw(hosts), reconsume_times=draw(int32),
        prepared_transaction_offset=draw(int64), properties=props,
        version=draw(st.sampled_from([1, 2])), append_crc_property=draw(st.booleans()),
    )


def segment(recs, blank=True, size=None):
    buf = b"".join(R.encode_message(**r) for r in recs)
    if blank:
        buf += R.blank_record(64)
        buf += b"\0" * 56
    if size is not None:
        buf += b"\0" * (size - len(buf))
    return buf


def rows(buf, **kw):
    """Every row of ``buf`` as dicts (through pyarrow-free numpy buffers), following batches."""
    out = []
    nxt = 0
    while True:
        r = S.decode_segment(buf, nxt, **kw)
        out += to_dicts(r)
        if r["code"] != S.BATCH_FULL:
            return out, r
        nxt = r["next"]


def _strings(a, name, n):
    off = a[name + ".offsets"]
    data = a[name + ".data"].tobytes()
    valid = a.get(name + ".validity")
    res = []
    for i in range(n):
        if valid is not None and not (valid[i >> 3] >> (i & 7)) & 1:
            res.append(None)
        else:
            res.append(data[off[i]:off[i + 1]])
    return res


def to_dicts(r):
    n, a = r["n"], r["arrays"]
    if n == 0:
        return []
    cols = {}
    for name in ("queue_id", "queue_offset", "commitlog_offset", "store_size", "store_timestamp", "born_timestamp",
                 "sys_flag", "flag", "reconsume_times", "prepared_transaction_offset", "body_crc", "position"):
        if name in a:
            cols[name] = [int(x) for x in a[name]]
    for name in ("topic", "born_host", "store_host", "tags", "uniq_key", "body"):
        if name + ".offsets" in a:
            vals = _strings(a, name, n)
            cols[name] = [v if name == "body" or v is None else v.decode("utf-8") for v in vals]
    if "crc_ok.values" in a:
        v, ok = a["crc_ok.values"], a["crc_ok.validity"]
        cols["crc_ok"] = [bool((v[i >> 3] >> (i & 7)) & 1) if (ok[i >> 3] >> (i & 7)) & 1 else None
                          for i in range(n)]
    if "keys.offsets" in a:
        items = _strings(a, "keys.item", len(a["keys.item.offsets"]) - 1)
        lo = a["keys.offsets"]
        cols["keys"] = [[x.decode() for x in items[lo[i]:lo[i + 1]]] for i in range(n)]
    if "properties.offsets" in a:
        m = len(a["properties.key.offsets"]) - 1
        ks, vs = _strings(a, "properties.key", m), _strings(a, "properties.value", m)
        po = a["properties.offsets"]
        cols["properties"] = [{ks[j].decode(): vs[j].decode() for j in range(po[i], po[i + 1])} for i in range(n)]
        for i in range(n):
            assert po[i + 1] - po[i] == len(cols["properties"][i]), "map keys must be unique"
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]


def expected_rows(buf, check_crc=True):
    """The reference's view: walk from 0, stop at the first record it rejects (structure) or at blank/end."""
    out, pos = [], 0
    while pos + 8 <= len(buf):
        total, magic = struct.unpack_from(">ii", buf, pos)
        if total == 0 or magic == R.BLANK_MAGIC_CODE:
            break
        try:
            d = R.decode_message(buf, pos, check_crc=False)
        except CorruptRecordError:
            break
        try:
            R.decode_message(buf, pos, check_crc=True)
            d["crc_ok"] = True if check_crc else None
        except CorruptRecordError:
            d["crc_ok"] = False if check_crc else None
        d["position"] = pos
        out.append(d)
        pos += d["store_size"]
    return out


def us(ms):
    # Timestamps become microseconds, saturated at the int64 range (corrupt headers can hold anything).
    return max(-(1 << 63), min((1 << 63) - 1, ms * 1000))


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        props = w["properties"]
        keys = props.get("KEYS")
        assert g == {
            "queue_id": w["queue_id"], "queue_offset": w["queue_offset"], "commitlog_offset": w["commitlog_offset"],
            "store_size": w["store_size"], "store_timestamp": us(w["store_timestamp"]),
            "born_timestamp": us(w["born_timestamp"]), "sys_flag": w["sys_flag"], "flag": w["flag"],
            "reconsume_times": w["reconsume_times"], "prepared_transaction_offset": w["prepared_transaction_offset"],
            "body_crc": w["body_crc"], "position": w["position"], "topic": w["topic"],
            "born_host": C.bytes_to_host(R.host_to_bytes(w["born_host"])),
            "store_host": C.bytes_to_host(R.host_to_bytes(w["store_host"])),
            "tags": props.get("TAGS"), "uniq_key": props.get("UNIQ_KEY"), "body": w["body"],
            "crc_ok": w["crc_ok"], "keys": [k for k in keys.split(" ") if k] if keys else [], "properties": props,
        }


@given(st.lists(records(), min_size=1, max_size=6), st.integers(1, 4), st.sampled_from([64, 4096, 1 << 20]))
def test_decode_matches_reference(recs, max_rows, max_bytes):
    buf = segment(recs)
    got, last = rows(buf, max_rows=max_rows, max_bytes=max_bytes)
    assert last["code"] == S.SEGMENT_BLANK
    assert_same(got, expected_rows(buf))


@given(st.lists(records(), min_size=1, max_size=4), st.data())
def test_corrupt_and_truncated_segments_follow_the_reference_verdict(recs, data):
    buf = bytearray(segment(recs, blank=False))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(buf)))
    buf = bytes(buf[:cut])
    got, last = rows(buf, max_rows=3)
    want = expected_rows(buf)
    assert_same(got, want)
    end = want[-1]["position"] + want[-1]["store_size"] if want else 0
    if last["code"] < 0:
        assert last["next"] == end
        with pytest.raises(CorruptRecordError):
            R.decode_message(buf, end)


def test_bad_body_crc_is_a_row_with_crc_ok_false_and_the_walk_goes_on():
    recs = [dict(topic="T", body=b"x" * 50, store_timestamp=i, physical_offset=i) for i in range(3)]
    buf = bytearray(segment(recs))
    size0 = len(R.encode_message(**recs[0]))
    buf[size0 + 91 + 10] ^= 0xFF        # inside the second record's body
    got, last = rows(bytes(buf))
    assert [g["crc_ok"] for g in got] == [True, False, True]
    assert last["code"] == S.SEGMENT_BLANK
    got, _ = rows(bytes(buf), check_crc=False)
    assert [g["crc_ok"] for g in got] == [None, None, None]
    v = S.verify_segment(bytes(buf), 1000)
    assert v["records"] == 3 and v["bad"] == [(1000 + size0, -8)]  # ERR_BODY_CRC


def test_v5_record_crc_property_is_checked():
    rec = dict(topic="T", body=b"abc", properties={"a": "b"}, append_crc_property=True, version=2)
    buf = bytearray(segment([rec]))
    got, _ = rows(bytes(buf))
    assert got[0]["crc_ok"] is True and got[0]["properties"]["__CRC32#"]
    buf[20] ^= 1                       # queueOffset: covered by __CRC32#, not by the body CRC
    got, _ = rows(bytes(buf))
    assert got[0]["crc_ok"] is False
    assert S.verify_segment(bytes(buf))["bad"] == [(0, -9)]


def test_filters_columns_and_point_reads():
    recs = [dict(topic=f"T{i % 3}", body=bytes([i]) * i, queue_id=i % 2, store_timestamp=1000 + i,
                 physical_offset=i, properties={"KEYS": f"k{i} shared"}) for i in range(30)]
    buf = segment(recs)
    allrows = expected_rows(buf)
    got, _ = rows(buf, topics=[b"T1", b"T2"], queue_ids=[1], min_timestamp=1005, max_timestamp=1025)
    want = [w for w in allrows if w["topic"] in ("T1", "T2") and w["queue_id"] == 1
            and 1005 <= w["store_timestamp"] < 1025]
    assert [g["position"] for g in got] == [w["position"] for w in want] and want
    r = S.decode_segment(buf, 0, columns=S.COLUMN_BITS["topic"] | S.COLUMN_BITS["queue_offset"])
    assert set(r["arrays"]) == {"topic.offsets", "topic.data", "queue_offset"}
    picks = [allrows[7]["position"], allrows[3]["position"]]
    got, last = rows(buf, positions=np.array(picks, dtype=np.int64), max_rows=1)
    assert sorted(g["position"] for g in got) == sorted(picks)
    bad = S.decode_segment(buf, 0, positions=np.array([allrows[3]["position"] + 1], dtype=np.int64))
    assert bad["n"] == 0 and bad["code"] < 0


def test_batches_are_bounded():
    recs = [dict(topic="T", body=b"z" * 1000, physical_offset=i) for i in range(50)]
    buf = segment(recs)
    nxt, sizes = 0, []
    while True:
        r = S.decode_segment(buf, nxt, max_rows=100, max_bytes=4500)
        sizes.append(r["n"])
        assert len(r["arrays"]["body.data"]) <= 4500
        if r["code"] != S.BATCH_FULL:
            break
        nxt = r["next"]
    assert sum(sizes) == 50 and max(sizes) == 4
    one = S.decode_segment(buf, 0, max_bytes=10)      # one row always fits, whatever the budget
    assert one["n"] == 1 and one["code"] == S.BATCH_FULL


def test_duplicate_property_names_last_wins_like_java():
    raw = "a\x011\x02b\x012\x02a\x013\x02\x02x\x01\x02\x01y\x02c\x014"
    rec = R.encode_message(topic="T", body=b"")
    total = len(rec)
    # Rebuild the record with a raw properties string (encode_message goes through a dict).
    props = raw.encode()
    rec = bytearray(rec[:total - 2]) + struct.pack(">h", len(props)) + props
    struct.pack_into(">i", rec, 0, len(rec))
    got, _ = rows(bytes(rec))
    assert got[0]["properties"] == R.string_to_properties(raw) == {"a": "3", "b": "2", "c": "4"}


@given(st.binary(max_size=64))
def test_utf8_repair_is_pythons_replace(data):
    assert S.utf8_repair(data) == data.decode("utf-8", "replace").encode("utf-8")


@given(st.one_of(st.binary(min_size=8, max_size=8), st.binary(min_size=20, max_size=20)))
@example(b"\x00\x00\x00\x00\x80\x00\x00\x00")       # ports are Java ints: a set high bit is negative
@example(b"\x00" * 16 + b"\xff\xff\xff\xff")
def test_hosts_are_formatted_like_message_ext(raw):
    assert S.format_host(raw) == C.bytes_to_host(raw) == R.bytes_to_host(raw)


@pytest.mark.parametrize("odd", [b"\xc3", b".", b"/", b"\x00", b" "])
def test_a_record_with_any_topic_byte_is_a_row(odd):
    # RocketMQ's store writes any topic of 1..127 bytes: a topic is no evidence of damage, so Spark reads the
    # record (invalid UTF-8 as U+FFFD, as Java's decoder) and walks on. Only dispatch asks whether it names a directory.
    good = R.encode_message(topic="Tx", body=b"a")
    rec = bytearray(R.encode_message(topic="Tx", body=b"b", physical_offset=len(good)))
    rec[rec.index(b"Tx") + 1] = odd[0]
    got, r = rows(good + bytes(rec))
    assert [g["topic"] for g in got] == ["Tx", (b"T" + odd).decode("utf-8", "replace")]
    assert r["next"] == len(good) + len(rec)


def test_verify_segment_reports_structure_errors_and_stray_bytes():
    recs = [dict(topic="T", body=b"q" * 20, physical_offset=i) for i in range(4)]
    buf = bytearray(segment(recs, blank=False, size=4096))
    size = len(R.encode_message(**recs[0]))
    buf[2 * size + 4] ^= 0x10            # third record's magic
    v = S.verify_segment(bytes(buf), 1 << 30)
    assert v["records"] == 2 and v["bad"] == [((1 << 30) + 2 * size, -2)] and v["code"] == -2
    buf = bytearray(segment(recs, blank=False, size=4096))
    buf[3 * size:3 * size + 4] = b"\0\0\0\0"   # a zeroed header hides the fourth record
    v = S.verify_segment(bytes(buf))
    assert v["records"] == 3 and v["bad"] == [] and v["stray"] == 3 * size + 4
    assert v["first_timestamp"] == 0 and S.first_store_timestamp(bytes(buf)) == 0


def test_arrow_batches_have_sparks_exact_schema():
    pa = pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from rmqcore.spark.arrow import build_batch
    from rmqcore.spark.schema import arrow_schema, spark_schema
    full = spark_schema()
    assert to_arrow_schema(full, timezone="UTC").equals(arrow_schema(full))
    narrow = StructType([full["topic"], full["keys"], full["properties"], full["crc_ok"], full["broker"]])
    assert to_arrow_schema(narrow, timezone="UTC").equals(arrow_schema(narrow))
    recs = [dict(topic="T", body=b"b" * i, properties={"KEYS": "a b", "TAGS": "t"} if i % 2 else {"z": "1"},
                 version=2, born_host="[::1]:9") for i in range(5)]
    buf = segment(recs)
    batch = build_batch(S.decode_segment(buf), arrow_schema(full), "broker-a", "00000000000000000000")
    batch.validate(full=True)
    assert batch.schema.equals(to_arrow_schema(full, timezone="UTC"))
    d = batch.to_pylist()
    assert [r["keys"] for r in d] == [[], ["a", "b"], [], ["a", "b"], []]
    assert [r["tags"] for r in d] == [None, "t", None, "t", None]
    assert d[1]["born_host"] == "[::1]:9" and d[0]["broker"] == "broker-a" and d[4]["body"] == b"bbbb"
    assert zlib.crc32(d[4]["body"]) & 0x7FFFFFFF == d[4]["body_crc"]
