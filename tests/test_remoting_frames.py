"""rmqcore's remoting answers, field by field, against what the real Java 4.9.7 broker and name server answered.

tests/data/remoting_frames/*.json hold request/response pairs the real Java client and mqadmin exchanged with the
real Java name server and broker on loopback (a send, sync/async/oneway and batch; lite pull and push consumers with
their heartbeats, offset queries and commits, pulls; mqadmin topicRoute, topicList, topicStatus, clusterList,
brokerStatus, consumerProgress with and without a group, consumerConnection, producerConnection, updateSubGroup,
deleteSubGroup, queryMsgByKey, queryMsgById; consumerConnection and producerConnection of live clients; an
unknown code; a producer speaking ROCKETMQ (binary) headers, answered in kind). How they were made, and how to make them again:
tests/remoting_frames.py (``python tests/remoting_frames.py``, needs a JDK and ../shared/java-broker). This test needs
no Java: it replays every recorded request, in the recorded order and on as many connections as were recorded, to
``rmqcore serve --remoting --namesrv`` (a child process named as the Java broker was: cluster BenchCluster,
broker-a), and compares each answer with the Java one:

* the response code and serialize type, the header's fields (names, JSON types; flag, language and version equal), and the remark
  where the Java broker set one;
* the response header's extFields: the same names, each a string, and equal values except ``msgId`` (an offset
  message id: the broker's address and the commitlog offset, which differs by the bytes of each store's records)
  and ``indexLastUpdateTimestamp``/``indexLastUpdatePhyoffset`` (the index file's clock and a commitlog offset);
* a JSON body (fastjson's object and bare-int keys read too): the same keys and value types throughout, and equal
  values except where a value is a time, an address, a rate or a disk figure (EXCLUDED_KEYS; every
  ``brokerAddrs`` address), and for GET_BROKER_RUNTIME_INFO only that every key mqadmin may read from the Java
  broker's table is there (each a string; its values are this process's figures);
* a body of records (pull, query, view by id): the same messages in the same order, field by field, except the
  store and born hosts, the store time and the commitlog offset/size (rmqcore's records carry a CRC property
  4.9.7's do not, so every later physical offset differs).

Replay differs from the recording in one way: a pull's suspend flag is cleared (a recorded long poll that the Java
broker answered after its wait, or left unanswered when the consumer shut down, is answered at once here; the
answers left unanswered are replayed for their offset commits and not compared); and a VIEW_MESSAGE_BY_ID asks
rmqcore's commitlog offset of the message the Java one named (learnt from the records both answered before).
"""
from __future__ import annotations

import glob
import json
import os
import re
import socket
import struct

import pytest

from remoting_frames import DATA, body_bytes, split_frames
from remoting_util import RemotingProcess
from rmqcore.reference import decode_message
from rmqcore.remoting import remoting_command as rc

FILES = sorted(glob.glob(os.path.join(DATA, "*.json")))
PULL_CODES = (11, 361)
SUSPEND = 0x2
# extFields whose values are not deterministic (see the docstring)
EXCLUDED_EXT = {"msgId", "indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"}
# body keys whose values are times, addresses, rates or disk figures of the one process that answered
EXCLUDED_KEYS = {"lastTimestamp", "lastUpdateTimestamp", "consumeTps", "bootTimestamp", "timestamp",
                 "dataVersion", "clientAddr", "brokerAddrs", "subVersion"}
RECORD_EXCLUDED = {"store_size", "commitlog_offset", "born_host", "store_host", "store_timestamp"}
GET_BROKER_RUNTIME_INFO = 28
VIEW_MESSAGE_BY_ID = 33


# -- fastjson's text: object keys ({..}:..) and bare int keys, as Python values -----------------------------------

class _Reader:
    _NUM = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")
    _WS = re.compile(r"\s*")

    def __init__(self, text: str):
        self.s, self.i = text, 0

    def ws(self):
        self.i = self._WS.match(self.s, self.i).end()

    def value(self):
        self.ws()
        c = self.s[self.i]
        if c == "{":
            self.i += 1
            out = {}
            self.ws()
            if self.s[self.i] == "}":
                self.i += 1
                return out
            while True:
                k = self.value()
                if isinstance(k, dict):
                    k = json.dumps(k, sort_keys=True)        # a MessageQueue key, as sorted JSON text
                elif not isinstance(k, str):
                    k = str(k)                              # a bare int key: the same key as a quoted one
                self.ws()
                assert self.s[self.i] == ":", self.s[self.i - 20:self.i + 20]
                self.i += 1
                out[k] = self.value()
                self.ws()
                c = self.s[self.i]
                self.i += 1
                if c == "}":
                    return out
                assert c == ",", self.s[self.i - 20:self.i + 20]
        if c == "[":
            self.i += 1
            out = []
            self.ws()
            if self.s[self.i] == "]":
                self.i += 1
                return out
            while True:
                out.append(self.value())
                self.ws()
                c = self.s[self.i]
                self.i += 1
                if c == "]":
                    return out
                assert c == ",", self.s[self.i - 20:self.i + 20]
        if c == '"':
            end = self.i + 1
            while self.s[end] != '"':
                end += 2 if self.s[end] == "\\" else 1
            v = json.loads(self.s[self.i:end + 1])
            self.i = end + 1
            return v
        for word, v in (("true", True), ("false", False), ("null", None)):
            if self.s.startswith(word, self.i):
                self.i += len(word)
                return v
        m = self._NUM.match(self.s, self.i)
        assert m, self.s[self.i:self.i + 40]
        self.i = m.end()
        return json.loads(m.group())


def read_body(raw: bytes):
    try:
        return _Reader(raw.decode("utf-8")).value()
    except (UnicodeDecodeError, AssertionError, IndexError, ValueError):
        return None


def records(raw: bytes) -> list[dict]:
    out, pos = [], 0
    while pos < len(raw):
        m = decode_message(raw, pos)
        out.append(m)
        pos += m["store_size"]
    return out


# -- comparison ---------------------------------------------------------------------------------------------------

def compare_values(want, got, path: str, diffs: list[str]) -> None:
    if isinstance(want, dict):
        if not isinstance(got, dict):
            diffs.append(f"{path}: Java {want!r}, rmqcore {got!r}")
            return
        if set(want) != set(got):
            diffs.append(f"{path}: keys only in Java {sorted(set(want) - set(got))}, only in rmqcore "
                         f"{sorted(set(got) - set(want))}")
        for k in set(want) & set(got):
            if k in EXCLUDED_KEYS:
                if type(want[k]) is not type(got[k]) and not {type(want[k]), type(got[k])} <= {int, float}:
                    diffs.append(f"{path}.{k}: Java a {type(want[k]).__name__}, rmqcore a {type(got[k]).__name__}")
                continue
            compare_values(want[k], got[k], f"{path}.{k}", diffs)
    elif isinstance(want, list):
        if not isinstance(got, list) or len(want) != len(got):
            diffs.append(f"{path}: Java {want!r}, rmqcore {got!r}")
            return
        try:
            want, got = sorted(want), sorted(got)           # sets (groupList, topicList) in any order
        except TypeError:
            pass
        for i, (w, g) in enumerate(zip(want, got)):
            compare_values(w, g, f"{path}[{i}]", diffs)
    elif want != got or type(want) is not type(got):
        if not (isinstance(want, float) and isinstance(got, float)):
            diffs.append(f"{path}: Java {want!r}, rmqcore {got!r}")


def compare(code: int, java: dict, ours: dict, where: str) -> list[str]:
    diffs: list[str] = []
    jh, oh = java["header"], ours["header"]
    if java["serializeType"] != ours["serializeType"]:
        diffs.append(f"{where}: serialize type Java {java['serializeType']}, rmqcore {ours['serializeType']}")
    if jh["code"] != oh["code"]:
        return [f"{where}: code Java {jh['code']} ({jh.get('remark')!r}), rmqcore {oh['code']} "
                f"({oh.get('remark')!r})"]
    # the header's own fields: the same names (extFields and remark aside: compared below) and JSON types
    top_j, top_o = set(jh) - {"extFields", "remark"}, set(oh) - {"extFields", "remark"}
    if top_j != top_o:
        diffs.append(f"{where}: header fields Java {sorted(top_j)}, rmqcore {sorted(top_o)}")
    diffs += [f"{where}: header {k} Java a {type(jh[k]).__name__}, rmqcore a {type(oh[k]).__name__}"
              for k in top_j & top_o if type(jh[k]) is not type(oh[k])]
    if (jh["flag"], jh["language"], jh["version"]) != (oh["flag"], oh["language"], oh["version"]):
        diffs.append(f"{where}: flag/language/version Java {(jh['flag'], jh['language'], jh['version'])}, "
                     f"rmqcore {(oh['flag'], oh['language'], oh['version'])}")
    if jh.get("remark") is not None and jh["remark"] != oh.get("remark"):
        diffs.append(f"{where}: remark Java {jh['remark']!r}, rmqcore {oh.get('remark')!r}")
    je, oe = jh.get("extFields") or {}, oh.get("extFields") or {}
    if set(je) != set(oe):
        diffs.append(f"{where}: extFields only in Java {sorted(set(je) - set(oe))}, only in rmqcore "
                     f"{sorted(set(oe) - set(je))}")
    for k in set(je) & set(oe):
        if not isinstance(oe[k], str):
            diffs.append(f"{where}: extFields.{k} is not a string: {oe[k]!r}")
        elif k not in EXCLUDED_EXT and je[k] != oe[k]:
            diffs.append(f"{where}: extFields.{k} Java {je[k]!r}, rmqcore {oe[k]!r}")
    jb, ob = body_bytes(java["body"]), body_bytes(ours["body"])
    if java["body"] is not None and "hex" in java["body"]:
        jr, orr = records(jb), records(ob)
        if len(jr) != len(orr):
            return diffs + [f"{where}: Java {len(jr)} records, rmqcore {len(orr)}"]
        for i, (w, g) in enumerate(zip(jr, orr)):
            for k in set(w) | set(g):
                if k in RECORD_EXCLUDED:
                    continue
                wv, gv = w.get(k), g.get(k)
                if k == "properties":
                    # rmqcore's 5.x-style CRC property is an extra property to a 4.9.7 reader
                    gv = {p: v for p, v in gv.items() if p != "__CRC32#"}
                if wv != gv:
                    diffs.append(f"{where}: record {i} {k}: Java {wv!r}, rmqcore {gv!r}")
        return diffs
    if not jb:
        if ob:
            diffs.append(f"{where}: Java no body, rmqcore {ob[:200]!r}")
        return diffs
    want, got = read_body(jb), read_body(ob)
    if want is None:
        if jb != ob:
            diffs.append(f"{where}: body Java {jb[:200]!r}, rmqcore {ob[:200]!r}")
        return diffs
    if got is None:
        return diffs + [f"{where}: body is not JSON: {ob[:200]!r}"]
    if code == GET_BROKER_RUNTIME_INFO:
        # the values are this process's figures; every key Java's table has (but the ones naming its store's path)
        wt, gt = want["table"], got.get("table", {})
        missing = sorted(k for k in wt if k not in gt and "/" not in k)
        if missing:
            diffs.append(f"{where}: runtime info lacks {missing}")
        diffs += [f"{where}: runtime info {k} is not a string" for k, v in gt.items() if not isinstance(v, str)]
        return diffs
    compare_values(want, got, f"{where}: body", diffs)
    return diffs


# -- replay -------------------------------------------------------------------------------------------------------

class Conn:
    def __init__(self, address: str):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.buf = b""
        self.frames: list[dict] = []
        self.opaque = 1 << 20

    def send(self, frame: dict) -> None:
        h = frame["header"]
        body = body_bytes(frame["body"])
        if frame["serializeType"] == rc.ROCKETMQ:
            self.sock.sendall(rc.encode_request(rc.RemotingCommand(
                h["code"], h["language"], h["version"], h["opaque"], h["flag"], h.get("remark"),
                h.get("extFields") or {}, rc.ROCKETMQ, body)))
            return
        header = json.dumps(h, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self.sock.sendall(struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body)

    def answer(self, opaque: int) -> dict:
        while True:
            frames, used = split_frames(self.buf)
            self.buf = self.buf[used:]
            self.frames += frames
            while self.frames:
                f = self.frames.pop(0)
                if f["header"].get("flag", 0) & 1 and f["header"].get("opaque") == opaque:
                    return f
            data = self.sock.recv(1 << 20)
            assert data, "rmqcore closed the connection"
            self.buf += data

    def barrier(self) -> None:
        """A request answered after a oneway one on this connection: the oneway has been handled."""
        self.opaque += 1
        self.send({"serializeType": 0, "body": None, "header": {"code": 106, "flag": 0, "language": "JAVA",
                                                                "opaque": self.opaque, "version": 407}})
        self.answer(self.opaque)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """Every recorded exchange with rmqcore's answer, in the recorded order."""
    if not FILES:
        pytest.skip("no recorded frames in tests/data/remoting_frames (python tests/remoting_frames.py)")
    out = []
    store = str(tmp_path_factory.mktemp("frames") / "store")
    with RemotingProcess(store, conf={"brokerClusterName": "BenchCluster", "brokerName": "broker-a"}) as srv:
        conns: dict[tuple, Conn] = {}
        phys: dict[int, int] = {}          # a record's commitlog offset in the Java store -> in rmqcore's
        for path in FILES:
            name = os.path.basename(path)[:-5]
            with open(path) as f:
                exchanges = json.load(f)
            for i, ex in enumerate(exchanges):
                key = (name, ex["target"], ex["conn"])       # connection numbers restart in each recording
                c = conns.get(key)
                if c is None:
                    c = conns[key] = Conn(srv.namesrv if ex["target"] == "namesrv" else srv.address)
                req = json.loads(json.dumps(ex["request"]))
                h = req["header"]
                if h["code"] in PULL_CODES:
                    ext = h["extFields"]
                    ext["sysFlag"] = str(int(ext["sysFlag"]) & ~SUSPEND)
                elif h["code"] == VIEW_MESSAGE_BY_ID:
                    # a commitlog offset of the Java store: the same message's offset in rmqcore's
                    ext = h["extFields"]
                    ext["offset"] = str(phys.get(int(ext["offset"]), ext["offset"]))
                c.send(req)
                if h.get("flag", 0) & 2:
                    c.barrier()
                    continue
                ours = c.answer(h["opaque"])
                if ex["response"] is not None and ex.get("compare", True):
                    out.append((f"{name}#{i} code {h['code']}", h["code"], ex["response"], ours))
                    java_body = ex["response"]["body"]
                    if java_body is not None and "hex" in java_body and ours["body"] is not None \
                            and "hex" in ours["body"]:
                        for w, g in zip(records(body_bytes(java_body)), records(body_bytes(ours["body"]))):
                            if w["properties"].get("UNIQ_KEY") == g["properties"].get("UNIQ_KEY"):
                                phys[w["commitlog_offset"]] = g["commitlog_offset"]
        for c in conns.values():
            c.sock.close()
        assert srv.alive()
    return out


def test_the_recordings_cover_the_scenarios():
    codes = set()
    for path in FILES:
        with open(path) as f:
            codes |= {ex["request"]["header"]["code"] for ex in json.load(f)}
    # send, batch, pull, heartbeat, offsets, route, topic list, cluster, runtime info, stats, connections,
    # subscription groups, queries, an unknown code
    assert {310, 320, 11, 34, 38, 14, 15, 30, 31, 105, 106, 206, 28, 202, 208, 203, 204, 200, 207, 12, 33, 300,
            9999} <= codes


@pytest.mark.parametrize("scenario", [os.path.basename(p)[:-5] for p in FILES])
def test_rmqcore_answers_as_the_java_broker(replayed, scenario):
    diffs = []
    for where, code, java, ours in replayed:
        if where.startswith(scenario + "#"):
            diffs += compare(code, java, ours, where)
    assert not diffs, "\n".join(diffs)
