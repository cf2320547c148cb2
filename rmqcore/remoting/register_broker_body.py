"""RegisterBrokerBody: what a broker tells a name server in REGISTER_BROKER (103), both ways (rocketmq-all-4.9.7
``common/protocol/body/RegisterBrokerBody.java``, ``TopicConfigSerializeWrapper``; the broker's side in
``BrokerController.registerBrokerAll``).

Plain (``compressed`` false, the default): fastjson's text of ``{"filterServerList":[...],
"topicConfigSerializeWrapper":{"dataVersion":{...},"topicConfigTable":{name: TopicConfig}}}``. Compressed
(``compressedRegister=true``): a deflate stream (zlib, level 9) of ``[int len][DataVersion JSON]``, ``[int count]``,
per topic ``[int len][TopicConfig.encode()]`` (``name read write perm filterType``: no sysFlag, no order), then
``[int len][filterServerList JSON]``. The header's bodyCrc32 is UtilAll.crc32 of the bytes sent."""
from __future__ import annotations

import json
import struct
import zlib

from .. import fastjson
from ..broker.topic_validator import is_readable, is_writeable

__all__ = ["registered_broker_id", "topic_config_wrapper", "encode", "decode", "body_crc32", "RegisterBodyError"]


class RegisterBodyError(ValueError):
    """A REGISTER_BROKER body that cannot be read (names what is wrong)."""


def body_crc32(body: bytes) -> int:
    """UtilAll.crc32: CRC-32 of the bytes, its sign bit cleared (so it is a non-negative Java int)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def registered_broker_id(broker) -> int:
    """The brokerId a broker registers under: BrokerStartup makes every master 0 whatever broker.conf says; a slave
    keeps its brokerId (> 0)."""
    return broker.config.broker_id if broker.store_config.is_slave else 0


def topic_config_wrapper(broker) -> tuple[dict, dict[str, dict]]:
    """(dataVersion, {topic: TopicConfig JSON}) of ``broker``'s table as BrokerController.registerBrokerAll sends
    it: a broker that is not both readable and writeable registers every topic with the broker's permission."""
    tcm = broker.topic_config_manager
    perm = broker.config.broker_permission
    with tcm._lock:
        version = tcm.data_version.to_json()
        table = {name: tc.to_json() for name, tc in tcm.topic_config_table.items()}
    if not (is_writeable(perm) and is_readable(perm)):
        for tc in table.values():
            tc["perm"] = perm
    return version, table


def encode(data_version: dict, table: dict[str, dict], filter_servers=(), compressed: bool = False) -> bytes:
    """The body a 4.9.7 broker sends (RegisterBrokerBody.encode(compressed))."""
    if not compressed:
        doc = {"filterServerList": list(filter_servers),
               "topicConfigSerializeWrapper": {"dataVersion": data_version, "topicConfigTable": table}}
        return fastjson.dumps(doc).encode("utf-8")
    parts = []

    def chunk(data: bytes) -> None:
        parts.append(struct.pack(">i", len(data)))
        parts.append(data)
    chunk(fastjson.dumps(data_version).encode("utf-8"))
    parts.append(struct.pack(">i", len(table)))
    for tc in table.values():
        chunk(f"{tc.get('topicName')} {tc.get('readQueueNums', 16)} {tc.get('writeQueueNums', 16)} "
              f"{tc.get('perm', 6)} {tc.get('topicFilterType', 'SINGLE_TAG')}".encode("utf-8"))
    chunk(json.dumps(list(filter_servers), separators=(",", ":")).encode("utf-8"))
    return zlib.compress(b"".join(parts), 9)


def _map(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise RegisterBodyError(f"{where} is not a JSON object")
    return value


_INT_FIELDS = ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")


def _check_topic(tc: dict, where: str) -> None:
    """What the route table reads of a TopicConfig: its name a string, its counts and flags Java ints."""
    if not isinstance(tc.get("topicName"), str):
        raise RegisterBodyError(f"{where}.topicName is not a string")
    for field in _INT_FIELDS:
        v = tc.get(field)
        if v is not None and (type(v) is not int or not -(1 << 31) <= v < 1 << 31):
            raise RegisterBodyError(f"{where}.{field} is not a Java int: {v!r}")


def decode(body: bytes | None, compressed: bool) -> tuple[dict, dict[str, dict], list[str]]:
    """(dataVersion, {topic: TopicConfig JSON}, filterServerList) of a REGISTER_BROKER body; no body: version
    counter 0 timestamp 0 and no topics, as DefaultRequestProcessor reads it. RegisterBodyError otherwise."""
    if not body:
        return {"counter": 0, "timestamp": 0}, {}, []
    if not compressed:
        try:
            doc = fastjson.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise RegisterBodyError(f"RegisterBrokerBody is not JSON: {e}") from None
        doc = _map(doc, "RegisterBrokerBody")
        wrapper = _map(doc.get("topicConfigSerializeWrapper") or {}, "topicConfigSerializeWrapper")
        version = _map(wrapper.get("dataVersion") or {"counter": 0, "timestamp": 0}, "dataVersion")
        table = _map(wrapper.get("topicConfigTable") or {}, "topicConfigTable")
        for name, tc in table.items():
            _check_topic(_map(tc, f"topicConfigTable.{name}"), f"topicConfigTable.{name}")
        servers = doc.get("filterServerList") or []
        if not isinstance(servers, list):
            raise RegisterBodyError("filterServerList is not a JSON array")
        return version, table, [str(s) for s in servers]
    try:
        data = zlib.decompress(body)
    except zlib.error as e:
        raise RegisterBodyError(f"compressed RegisterBrokerBody does not inflate: {e}") from None
    pos = 0

    def take(n: int, what: str) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(data):
            raise RegisterBodyError(f"compressed RegisterBrokerBody: {what} runs past its {len(data)} bytes")
        out = data[pos:pos + n]
        pos += n
        return out

    def read_int(what: str) -> int:
        return struct.unpack(">i", take(4, what))[0]
    try:
        version = _map(json.loads(take(read_int("dataVersion length"), "dataVersion")), "dataVersion")
        table = {}
        for i in range(read_int("topic count")):
            fields = take(read_int(f"topic {i} length"), f"topic {i}").decode("utf-8").split(" ")
            if len(fields) != 5:       # TopicConfig.decode reads nothing from another shape
                raise RegisterBodyError(f"compressed RegisterBrokerBody: topic {i} has {len(fields)} fields, not 5")
            name, r, w, perm, ftype = fields
            table[name] = {"topicName": name, "readQueueNums": int(r), "writeQueueNums": int(w), "perm": int(perm),
                           "topicFilterType": ftype, "topicSysFlag": 0, "order": False}
            _check_topic(table[name], f"topic {i}")
        servers = json.loads(take(read_int("filterServerList length"), "filterServerList"))
    except (UnicodeDecodeError, ValueError) as e:
        raise RegisterBodyError(f"compressed RegisterBrokerBody: {e}") from None
    if not isinstance(servers, list):
        raise RegisterBodyError("filterServerList is not a JSON array")
    return version, table, [str(s) for s in servers]
