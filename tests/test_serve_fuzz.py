"""`rmqcore serve` under a hostile client (issue 36, "Aims"): thousands of malformed and mutated gRPC requests
against the server in a child process, then a real client's send and receive.

Requests are RocketMQ 5's messages (rmqcore.server.messaging_pb2, the same wire format as the official client's
stubs) built valid and then mutated through protobuf reflection: fields set to values of their type that are out
of range (boundary integers, undefined enum numbers, huge and hostile strings, huge repeated fields), cleared, or
the serialized request's bytes flipped and cut; signed with the account's key or with random credentials; some
streams (ReceiveMessage long polls, Telemetry) abandoned mid-way, some channels dropped with calls open; receipt
handles forged. Asserted:

* no crash: the child is alive at the end and answers the official rocketmq-python-client's send and receive;
* no hang: every RPC answers within its deadline (DEADLINE_EXCEEDED is a failure);
* no INTERNAL_ERROR (nor gRPC UNKNOWN/INTERNAL from an unhandled exception) for malformed input — except the
  kinds other work on issue 36 is fixing (system topics, timestamp overflow and SQL92
  recursion, receipt handle MACs): requests touching those are tagged and only counted (the table is printed);
* file descriptors back to the baseline once the clients are gone; peak RSS within RSS_BOUND of the idle RSS.

The default run sends DEFAULT_COUNT requests (about 20-40 s here; it stops sending after MAX_SECONDS); ``RMQCORE_FUZZ=long`` sends
``RMQCORE_FUZZ_GRPC_COUNT`` (default 100,000); ``RMQCORE_FUZZ_SEED`` picks the seed. A failure names the request's
number, RPC, tags and mutation, so the run can be replayed with its seed.
"""
from __future__ import annotations

import collections
import concurrent.futures
import hmac
import json
import os
import random
import threading
import time
from hashlib import sha1

import pytest

pytest.importorskip("rocketmq")
grpc = pytest.importorskip("grpc")

from google.protobuf import descriptor as _desc  # noqa: E402
from rocketmq import FilterExpression, Producer, SimpleConsumer  # noqa: E402

from rmqcore.server import messaging_pb2 as pb  # noqa: E402
from serve_util import FAST_CONF, ServerProcess, config, message, prepare, receive_all  # noqa: E402

SERVICE = "/apache.rocketmq.v2.MessagingService/"
LONG = os.environ.get("RMQCORE_FUZZ") == "long"
DEFAULT_COUNT = 8000
COUNT = int(os.environ.get("RMQCORE_FUZZ_GRPC_COUNT", "100000")) if LONG else DEFAULT_COUNT
SEED = int(os.environ.get("RMQCORE_FUZZ_SEED", "20261128"))
DEADLINE = 15.0                 # s per RPC: the longest long poll allowed (FAST_CONF: 3 s) plus a loaded machine
WORKERS = 6
MAX_SECONDS = 40.0              # the default run stops sending after this long, whatever COUNT says
RSS_BOUND = 256 << 20           # peak RSS over the idle RSS (the request limit is 1 MiB, 6 in flight)
AK, SK = "fuzz", "fuzz-secret"

# Tags of the kinds other work on issue 36 fixes: counted, never asserted on here.
KNOWN = {"system_topic", "timestamp", "sql", "receipt_handle"}
SYSTEM_TOPICS = ["RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_wheel_timer", "TBW102", "RMQ_SYS_TRACE_TOPIC",
                 "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "%RETRY%fuzz_g",
                 "%DLQ%fuzz_g", "rmq_sys_REVIVE_LOG_DefaultCluster", "DefaultCluster", "OFFSET_MOVED_EVENT"]
HOSTILE_STRINGS = ["", " ", "a b", "../../etc/passwd", "fuzz_t\x00x", "ü" * 40, "x" * 128, "y" * 256, "z" * 70000,
                   "%", "%RETRY%", "%DLQ%", "|", "*", "||", "a|b", "\ud7ff", "\n", "fuzz_t", "fuzz_g", "other_t",
                   "0", "-1", "9" * 40, "r1:0:0:1:0:0", "{}", "' OR 1=1", "\x7f", "TOPIC " * 100]
MAP_KEYS = ["UNIQ_KEY", "KEYS", "TAGS", "DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
            "__STARTDELIVERTIME", "MAX_OFFSET", "MIN_OFFSET", "TRAN_MSG", "PGROUP", "REAL_TOPIC", "RETRY_TOPIC",
            "WAIT", "x" * 300, "a\x00b", "\u0001", "\u0002"]
INTS32 = [0, 1, -1, 2, 3, 31, 32, 33, 1024, 65535, 2 ** 31 - 1, -2 ** 31, 1 << 20]
INTS64 = INTS32 + [2 ** 63 - 1, -2 ** 63, 2 ** 40, 1 << 53]
UINTS = [0, 1, 2 ** 32 - 1, 2 ** 64 - 1]


def _sign(md: list, ak: str, sk: str, date: str) -> None:
    md.append(("x-mq-date-time", date))
    sig = hmac.new(sk.encode(), date.encode(), sha1).hexdigest()
    md.append(("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}"))


def metadata(rng: random.Random, tags: set) -> tuple:
    md = [("x-mq-client-id", rng.choice(["fuzz-client", f"fuzz-{rng.randrange(50)}", "", "x" * 300])),
          ("x-mq-language", rng.choice(["PYTHON", "JAVA", "??"])), ("x-mq-protocol", "v2")]
    now = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    roll = rng.random()
    if roll < 0.6:
        _sign(md, AK, SK, now)
    else:
        tags.add("credentials")
        kind = rng.randrange(6)
        if kind == 0:
            pass                                                        # none at all
        elif kind == 1:
            _sign(md, AK, "wrong", now)
        elif kind == 2:
            _sign(md, rng.choice(["", "nobody", "x" * 500, "fuzz/2026"]), SK, now)
        elif kind == 3:
            md.append(("x-mq-date-time", now))
            md.append(("authorization", rng.choice(
                ["", "MQv2-HMAC-SHA1", "MQv2-HMAC-SHA1 ,,,", "MQv2-HMAC-SHA1 Credential=fuzz", "Basic Zm9vOmJhcg==",
                 "MQv2-HMAC-SHA1 Credential=fuzz, Signature=" + "0" * 40, "MQv2-HMAC-SHA1 " + "a=" * 500])))
        elif kind == 4:
            _sign(md, AK, SK, rng.choice(["", "garbage", "20000101T000000Z", "20991231T235959Z"]))
        else:
            md.append(("authorization", "MQv2-HMAC-SHA1 Credential=fuzz, SignedHeaders=x-mq-date-time"))
    return tuple(md)


# ------------------------------------------------------------------------------------------- valid seeds
def _mq(topic="fuzz_t", qid=0):
    q = pb.MessageQueue(id=qid)
    q.topic.name = topic
    return q


def _msg(rng, topic="fuzz_t"):
    m = pb.Message()
    m.topic.name = topic
    m.body = rng.randbytes(rng.choice([1, 16, 200]))
    sp = m.system_properties
    sp.message_id = "01" + rng.randbytes(12).hex().upper()
    sp.message_type = pb.NORMAL
    sp.body_encoding = pb.IDENTITY
    sp.born_host = "127.0.0.1"
    sp.born_timestamp.FromMilliseconds(int(time.time() * 1000))
    if rng.random() < 0.3:
        sp.tag = rng.choice(["A", "B"])
    if rng.random() < 0.3:
        sp.keys.append(f"k{rng.randrange(100)}")
    return m


def seeds(rng, handles):
    """{rpc: (request, response type, kind)}: kind unary, stream (server streaming) or telemetry."""
    send = pb.SendMessageRequest()
    for _ in range(rng.choice([1, 1, 2, 5])):
        send.messages.append(_msg(rng))
    recv = pb.ReceiveMessageRequest(batch_size=rng.choice([1, 4, 32]), auto_renew=False)
    recv.group.name = "fuzz_g"
    recv.message_queue.CopyFrom(_mq())
    recv.filter_expression.type = pb.TAG
    recv.filter_expression.expression = "*"
    recv.invisible_duration.seconds = 5
    recv.long_polling_timeout.FromMilliseconds(rng.choice([500, 1000]))
    handle, mid = rng.choice(handles) if handles else ("r1:0:0:1:0:0", "00")
    ack = pb.AckMessageRequest()
    ack.group.name, ack.topic.name = "fuzz_g", "fuzz_t"
    ack.entries.add(message_id=mid, receipt_handle=handle)
    change = pb.ChangeInvisibleDurationRequest(receipt_handle=handle, message_id=mid)
    change.group.name, change.topic.name = "fuzz_g", "fuzz_t"
    change.invisible_duration.seconds = 5
    fwd = pb.ForwardMessageToDeadLetterQueueRequest(receipt_handle=handle, message_id=mid, delivery_attempt=1,
                                                    max_delivery_attempts=16)
    fwd.group.name, fwd.topic.name = "fuzz_g", "fuzz_t"
    route = pb.QueryRouteRequest()
    route.topic.name = "fuzz_t"
    route.endpoints.scheme = pb.IPv4
    route.endpoints.addresses.add(host="127.0.0.1", port=8081)
    assign = pb.QueryAssignmentRequest()
    assign.topic.name, assign.group.name = "fuzz_t", "fuzz_g"
    assign.endpoints.CopyFrom(route.endpoints)
    hb = pb.HeartbeatRequest(client_type=rng.choice([pb.PRODUCER, pb.SIMPLE_CONSUMER, pb.PUSH_CONSUMER]))
    hb.group.name = "fuzz_g"
    end = pb.EndTransactionRequest(message_id="00", transaction_id="0" * 32, resolution=pb.COMMIT,
                                   source=pb.SOURCE_CLIENT)
    end.topic.name = "fuzz_t"
    notify = pb.NotifyClientTerminationRequest()
    notify.group.name = "fuzz_g"
    upd = pb.UpdateOffsetRequest(message_queue=_mq(qid=rng.randrange(4)), offset=0)
    upd.group.name = "fuzz_g"
    get = pb.GetOffsetRequest(message_queue=_mq(qid=rng.randrange(4)))
    get.group.name = "fuzz_g"
    qoff = pb.QueryOffsetRequest(message_queue=_mq(qid=rng.randrange(4)), query_offset_policy=pb.END)
    tel = pb.TelemetryCommand()
    tel.settings.client_type = rng.choice([pb.PRODUCER, pb.SIMPLE_CONSUMER])
    tel.settings.access_point.CopyFrom(route.endpoints)
    tel.settings.request_timeout.seconds = 3
    tel.settings.user_agent.language = pb.PYTHON
    tel.settings.user_agent.version = "5.0.0"
    if tel.settings.client_type == pb.PRODUCER:
        tel.settings.publishing.topics.add(name="fuzz_t")
    else:
        tel.settings.subscription.group.name = "fuzz_g"
        sub = tel.settings.subscription.subscriptions.add()
        sub.topic.name = "fuzz_t"
        sub.expression.type = pb.TAG
        sub.expression.expression = "*"
    return {
        "SendMessage": (send, pb.SendMessageResponse, "unary"),
        "ReceiveMessage": (recv, pb.ReceiveMessageResponse, "stream"),
        "AckMessage": (ack, pb.AckMessageResponse, "unary"),
        "ChangeInvisibleDuration": (change, pb.ChangeInvisibleDurationResponse, "unary"),
        "ForwardMessageToDeadLetterQueue": (fwd, pb.ForwardMessageToDeadLetterQueueResponse, "unary"),
        "QueryRoute": (route, pb.QueryRouteResponse, "unary"),
        "QueryAssignment": (assign, pb.QueryAssignmentResponse, "unary"),
        "Heartbeat": (hb, pb.HeartbeatResponse, "unary"),
        "EndTransaction": (end, pb.EndTransactionResponse, "unary"),
        "NotifyClientTermination": (notify, pb.NotifyClientTerminationResponse, "unary"),
        "UpdateOffset": (upd, pb.UpdateOffsetResponse, "unary"),
        "GetOffset": (get, pb.GetOffsetResponse, "unary"),
        "QueryOffset": (qoff, pb.QueryOffsetResponse, "unary"),
        "Telemetry": (tel, pb.TelemetryCommand, "telemetry"),
    }


# ------------------------------------------------------------------------------------------- mutations
FD = _desc.FieldDescriptor


def _tags_for(field, path: str, value=None) -> set:
    """The known-defect kinds a mutated field can reach (see KNOWN)."""
    tags = set()
    name = field.name
    if field.message_type is not None and field.message_type.full_name in ("google.protobuf.Timestamp",
                                                                           "google.protobuf.Duration"):
        tags.add("timestamp")
    if "timestamp" in path or "timestamp" in name or path.endswith(("seconds", "nanos")):
        tags.add("timestamp")
    if name in ("body_encoding", "body") and "system_properties" in path or name == "body_encoding":
        tags.add("compressed")
    if "filter_expression" in path or "expression" in path or "subscription" in path:
        tags.add("sql")
    if name == "receipt_handle":
        tags.add("receipt_handle")
    if isinstance(value, str) and value in SYSTEM_TOPICS:
        tags.add("system_topic")
    return tags


def _random_value(rng, field, depth):
    t = field.type
    if t in (FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32):
        return rng.choice(INTS32)
    if t in (FD.TYPE_INT64, FD.TYPE_SINT64, FD.TYPE_SFIXED64):
        return rng.choice(INTS64)
    if t in (FD.TYPE_UINT32, FD.TYPE_FIXED32):
        return rng.choice(UINTS[:3])
    if t in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
        return rng.choice(UINTS)
    if t == FD.TYPE_BOOL:
        return rng.random() < 0.5
    if t in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE):
        return rng.choice([0.0, -1.0, 1e308 if t == FD.TYPE_DOUBLE else 3e38, float("nan"), float("inf")])
    if t == FD.TYPE_ENUM:
        numbers = [v.number for v in field.enum_type.values]
        return rng.choice(numbers + [-1, 99, 2 ** 31 - 1])
    if t == FD.TYPE_STRING:
        return rng.choice(HOSTILE_STRINGS + SYSTEM_TOPICS)
    if t == FD.TYPE_BYTES:
        return rng.choice([b"", b"\x00", rng.randbytes(rng.choice([1, 100, 5000])), b"\x1f\x8b" + rng.randbytes(30),
                           b"x" * (rng.choice([4 << 10, 300 << 10]))])
    return None


def _repeated(field) -> bool:
    # protobuf 5.x+ has is_repeated; older ones only label
    rep = getattr(field, "is_repeated", None)
    return rep if rep is not None else field.label == FD.LABEL_REPEATED


def mutate(rng, msg, tags: set, notes: list, path="", depth=0) -> None:
    """Mutate one to three fields of ``msg`` (recursing into set sub-messages)."""
    fields = list(msg.DESCRIPTOR.fields)
    for _ in range(rng.choice([1, 1, 2, 3])):
        f = rng.choice(fields)
        where = f"{path}.{f.name}" if path else f.name
        is_msg = f.type == FD.TYPE_MESSAGE
        repeated = _repeated(f)
        roll = rng.random()
        if roll < 0.12:
            msg.ClearField(f.name)
            notes.append(f"clear {where}")
            tags.update(_tags_for(f, where))
            continue
        if is_msg and f.message_type.GetOptions().map_entry:
            container = getattr(msg, f.name)
            n = rng.choice([1, 1, 3, 500])
            for j in range(n):
                key = rng.choice(MAP_KEYS + HOSTILE_STRINGS[:8] + [f"k{j}"])
                container[key] = rng.choice(HOSTILE_STRINGS + ["-1", "1", str(2 ** 63), "99999999999999999999"])
                if key in ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__STARTDELIVERTIME"):
                    tags.add("timestamp")
            notes.append(f"{where} += {n} entries")
            continue
        if is_msg:
            if repeated:
                container = getattr(msg, f.name)
                if roll < 0.25 and depth < 2:
                    n = rng.choice([0, 1, 64, 3000])
                    for _ in range(n):
                        container.add()
                    notes.append(f"{where} += {n} empty")
                    tags.update(_tags_for(f, where))
                elif len(container) and depth < 4:
                    mutate(rng, container[rng.randrange(len(container))], tags, notes, where + "[]", depth + 1)
                continue
            if depth < 4:
                mutate(rng, getattr(msg, f.name), tags, notes, where, depth + 1)
            continue
        value = _random_value(rng, f, depth)
        if value is None:
            continue
        tags.update(_tags_for(f, where, value))
        try:
            if repeated:
                container = getattr(msg, f.name)
                for _ in range(rng.choice([1, 2, 200])):
                    container.append(value)
            else:
                setattr(msg, f.name, value)
        except (ValueError, TypeError):           # a value the type cannot hold (the wire can: see flip_bytes)
            continue
        shown = value if not isinstance(value, (str, bytes)) or len(value) < 40 else f"<{len(value)}>"
        notes.append(f"{where} = {shown!r}")


def flip_bytes(rng, data: bytes, notes: list) -> bytes:
    data = bytearray(data)
    op = rng.randrange(4)
    if op == 0 and data:
        for _ in range(rng.choice([1, 2, 8])):
            data[rng.randrange(len(data))] = rng.randrange(256)
        notes.append("bytes flipped")
    elif op == 1 and data:
        data = data[:rng.randrange(len(data))]
        notes.append("bytes cut")
    elif op == 2:
        pos = rng.randrange(len(data) + 1)
        data[pos:pos] = rng.randbytes(rng.choice([1, 5, 64]))
        notes.append("bytes inserted")
    else:
        # a length-delimited field claiming more than is there, or a varint that never ends
        data += rng.choice([b"\x0a\xff\xff\xff\x0f", b"\x08" + b"\xff" * 11, b"\x12\x80\x80\x80\x80\x10"])
        notes.append("bad tail")
    return bytes(data)


def _forge_handle(rng, handles) -> str:
    if handles and rng.random() < 0.5:
        h = rng.choice(handles)[0]
        parts = h.split(":")
        i = rng.randrange(len(parts))
        parts[i] = str(rng.choice([0, 1, 2 ** 63, -1, int(time.time() * 1000), 99999999]))
        return ":".join(parts)
    return rng.choice([f"r1:0:0:1:{int(time.time() * 1000)}:99999999", "r1:" + ":".join(["9" * 30] * 5),
                       "r1::::::", "", "x" * 5000, "r1:-1:-1:-1:-1:-1"])


class Call:
    """One fuzz request: what it was (for the failure message) and how it is sent."""

    def __init__(self, i, rpc, kind, payload, resp_type, md, tags, notes, abandon, drop):
        self.i, self.rpc, self.kind, self.payload, self.resp_type = i, rpc, kind, payload, resp_type
        self.md, self.tags, self.notes, self.abandon, self.drop = md, tags, notes, abandon, drop
        self.received = None

    def describe(self) -> str:
        return f"#{self.i} {self.rpc} tags={sorted(self.tags)} {'; '.join(self.notes)[:300]}"


def make_call(i, rng, handles) -> Call:
    rpc, (req, resp_type, kind) = rng.choice(list(seeds(rng, handles).items()))
    tags, notes = set(), []
    roll = rng.random()
    if roll < 0.08 and rpc in ("AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue"):
        forged = _forge_handle(rng, handles)
        if rpc == "AckMessage":
            req.entries[0].receipt_handle = forged
        else:
            req.receipt_handle = forged
        tags.add("receipt_handle")
        notes.append(f"forged handle {forged[:60]!r}")
    elif roll < 0.14:
        # topic or group named as a system one
        name = rng.choice(SYSTEM_TOPICS)
        for attr in ("topic", "group"):
            if req.DESCRIPTOR.fields_by_name.get(attr) is not None:
                getattr(req, attr).name = name
        if rpc == "SendMessage":
            req.messages[0].topic.name = name
        if rpc in ("ReceiveMessage", "UpdateOffset", "GetOffset", "QueryOffset"):
            req.message_queue.topic.name = name
        tags.add("system_topic")
        notes.append(f"system name {name}")
    elif roll < 0.18 and rpc == "ReceiveMessage":
        req.filter_expression.type = pb.SQL
        req.filter_expression.expression = rng.choice(["a = = 1", "(" * 5000 + "a=1" + ")" * 5000, "a > 1",
                                                       "NOT " * 3000 + "a", "a IN (" + ",".join(["'x'"] * 3000) + ")"])
        tags.add("sql")
        notes.append("sql filter")
    elif roll < 0.80:
        mutate(rng, req, tags, notes)
    payload = req.SerializeToString()
    if rng.random() < 0.15:
        payload = flip_bytes(rng, payload, notes)
        tags.add("bytes")
        try:
            type(req).FromString(payload)
            # flipped bytes that still parse can land anywhere: in a timestamp, a body encoding, a filter, a
            # handle, a topic name
            tags.update(KNOWN)
        except Exception:       # DecodeError: no handler runs; gRPC's own answer to an unparseable request
            tags.add("unparseable")
    abandon = kind != "unary" and rng.random() < 0.15
    drop = rng.random() < 0.03          # the client's channel closes under the open call
    return Call(i, rpc, kind, payload, resp_type, metadata(rng, tags), tags, notes, abandon, drop)


# ------------------------------------------------------------------------------------------- running
def _status_of(resp) -> int | None:
    if resp.DESCRIPTOR.fields_by_name.get("status") is not None and resp.HasField("status"):
        return resp.status.code
    return None


def send(channel, call: Call) -> list[str]:
    """The outcome codes of one call: Code names from the responses' statuses, or GRPC_<StatusCode> when the call
    failed at the gRPC level."""
    path = SERVICE + call.rpc
    out = []
    try:
        if call.kind == "unary":
            raw = channel.unary_unary(path)(call.payload, metadata=call.md, timeout=DEADLINE)
            resp = call.resp_type.FromString(raw)
            code = _status_of(resp)
            out.append(pb.Code.Name(code) if code is not None else "NO_STATUS")
        elif call.kind == "stream":
            stream = channel.unary_stream(path)(call.payload, metadata=call.md, timeout=DEADLINE)
            if call.abandon:
                stream.cancel()
                return ["ABANDONED"]
            for raw in stream:
                resp = call.resp_type.FromString(raw)
                if resp.HasField("status"):
                    out.append(pb.Code.Name(resp.status.code))
                elif resp.HasField("message") and resp.message.system_properties.receipt_handle:
                    out.append("MESSAGE")
                    sp = resp.message.system_properties
                    call.received = (sp.receipt_handle, sp.message_id)
        else:
            # A settings command is answered with the server's settings: the stream stays open for it. Any other
            # command (a client's answer to the server, or garbage) gets no answer: the client half-closes and
            # the server must end the stream.
            try:
                expects_answer = pb.TelemetryCommand.FromString(call.payload).WhichOneof("command") == "settings"
            except Exception:       # DecodeError: bytes no message parses from
                expects_answer = False
            done = threading.Event()

            def requests():
                yield call.payload
                if expects_answer:
                    done.wait(DEADLINE)     # keep the stream open until the first answer came (or it is abandoned)
            stream = channel.stream_stream(path)(requests(), metadata=call.md, timeout=DEADLINE)
            try:
                if call.abandon:
                    stream.cancel()
                    return ["ABANDONED"]
                for raw in stream:
                    resp = pb.TelemetryCommand.FromString(raw)
                    out.append(pb.Code.Name(resp.status.code) if resp.HasField("status") else "COMMAND")
                    break
            finally:
                done.set()
                stream.cancel()
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.CANCELLED and call.kind == "telemetry" and out:
            return out
        out.append(f"GRPC_{e.code().name}")
    return out or ["EMPTY"]


def proc_figures(pid: int) -> tuple[int, int]:
    """(open sockets, RSS bytes) of the server process. Sockets, not every descriptor: topics the fuzz created
    (auto-creation is on) rightly hold their consume queue files open."""
    fds = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:             # closed between the listing and the look
            pass
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    return fds, rss


BAD = {"INTERNAL_ERROR", "GRPC_UNKNOWN", "GRPC_DEADLINE_EXCEEDED"}


def judge(call: Call, outcome: list[str]) -> str | None:
    """Why the outcome is a failure, or None. A hang (DEADLINE_EXCEEDED) is always one; INTERNAL_ERROR and an
    unhandled exception (gRPC UNKNOWN) are, unless the request touched a kind other work fixes (KNOWN)."""
    bad = BAD.intersection(outcome)
    if not bad:
        return None
    if bad == {"GRPC_DEADLINE_EXCEEDED"} or "GRPC_DEADLINE_EXCEEDED" in bad:
        return f"no answer within {DEADLINE} s: {call.describe()}"
    if call.tags & KNOWN:
        return None
    if "unparseable" in call.tags and bad == {"GRPC_UNKNOWN"}:
        return None             # grpcio's answer when the request deserializer raises: no handler ran
    return f"{sorted(bad)}: {call.describe()}"


def _acl(path) -> str:
    with open(path, "w") as f:
        json.dump({"accounts": [{"accessKey": AK, "secretKey": SK, "admin": True}]}, f)
    return str(path)


def test_hostile_grpc_requests_never_crash_hang_or_fail_internally(tmp_path):
    store = str(tmp_path / "store")
    prepare(store, {"fuzz_t": ("NORMAL", 4), "after_t": ("NORMAL", 2)}, {"fuzz_g": {}, "after_g": {}})
    # refusals answered at once: the run sends thousands, each judged by its answer (RefusalThrottle, which would
    # answer all but the first hundred 200 ms late, is test_serve_limits')
    conf = dict(FAST_CONF, maxMessageSize="65536", maxRequestBytes="1048576", refusalPerSecond="0")
    rng = random.Random(SEED)
    with ServerProcess(store, conf, args=["--acl", _acl(tmp_path / "acl.json")]) as srv:
        pid = srv.proc.pid
        # The server logs each malformed request (issue 36 item 11 makes that one line per kind): read its stderr
        # all along, or a full pipe blocks its event loop in write() and every RPC after looks like a hang.
        log_bytes = [0]
        log_tail = collections.deque(maxlen=40)

        def drain():
            try:
                for line in srv.proc.stderr:
                    log_bytes[0] += len(line)
                    log_tail.append(line)
            except (ValueError, OSError):       # closed by terminate()
                pass
        threading.Thread(target=drain, daemon=True).start()
        channels = [grpc.insecure_channel(srv.endpoint) for _ in range(4)]
        try:
            # Something to receive and real receipt handles to forge from.
            producer = Producer(config(srv.endpoint, AK, SK), ("fuzz_t",))
            producer.startup()
            try:
                for i in range(40):
                    producer.send(message("fuzz_t", f"seed-{i}".encode()))
            finally:
                producer.shutdown()
            time.sleep(0.5)
            fd0, rss0 = proc_figures(pid)
            handles: list[tuple[str, str]] = []
            stats: collections.Counter = collections.Counter()
            known_internal: collections.Counter = collections.Counter()
            failures: list[str] = []
            peak = [rss0]
            stop = threading.Event()

            def watch():
                while not stop.wait(0.2):
                    try:
                        peak[0] = max(peak[0], proc_figures(pid)[1])
                    except (OSError, StopIteration):
                        return
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            calls = (make_call(i, rng, handles) for i in range(COUNT))
            started = time.monotonic()

            def run(call: Call):
                if call.drop:
                    # a client that goes away with its call open: its own channel, closed under the call
                    ch = grpc.insecure_channel(srv.endpoint)
                    try:
                        timer = threading.Timer(0.05, ch.close)
                        timer.start()
                        try:
                            outcome = send(ch, call)
                        except ValueError:      # closed before the call began: nothing reached the server
                            outcome = []
                        timer.join()
                        return call, [o for o in outcome if o != "GRPC_CANCELLED"] or ["DROPPED"]
                    finally:
                        ch.close()
                return call, send(channels[call.i % len(channels)], call)
            with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
                pending = set()
                for call in calls:
                    pending.add(pool.submit(run, call))
                    if len(pending) >= WORKERS * 2:
                        done, pending = concurrent.futures.wait(pending, return_when="FIRST_COMPLETED")
                        for f in done:
                            c, outcome = f.result()
                            _account(c, outcome, stats, known_internal, failures, handles)
                    if srv.proc.poll() is not None or sum("no answer within" in f for f in failures) >= 3:
                        break           # dead or hung: what follows would only wait out its deadlines
                    if not LONG and time.monotonic() - started > MAX_SECONDS:
                        break           # the default run is bounded in time on a loaded machine
                for f in concurrent.futures.as_completed(pending):
                    c, outcome = f.result()
                    _account(c, outcome, stats, known_internal, failures, handles)
            elapsed = time.monotonic() - started
            stop.set()
            watcher.join()
            assert srv.proc.poll() is None, "the server died: " + "".join(log_tail)

            _report(stats, known_internal, elapsed, rss0, peak[0])
            print(f"  server log: {log_bytes[0]} bytes for {sum(stats.values())} outcomes")
            assert not failures, f"{len(failures)} failures; first ones:\n" + "\n".join(failures[:15])
            assert peak[0] - rss0 <= RSS_BOUND, (rss0, peak[0])
        finally:
            for ch in channels:
                ch.close()

        # A real client still sends and receives.
        producer = Producer(config(srv.endpoint, AK, SK), ("after_t",))
        producer.startup()
        try:
            for i in range(5):
                producer.send(message("after_t", f"after-{i}".encode()))
        finally:
            producer.shutdown()
        consumer = SimpleConsumer(config(srv.endpoint, AK, SK), "after_g", {"after_t": FilterExpression("*")}, 1)
        consumer.startup()
        try:
            got = receive_all(consumer, 5, deadline_s=30)
        finally:
            consumer.shutdown()
        assert sorted(m.body for m in got) == [f"after-{i}".encode() for i in range(5)]

        # The clients are gone: their connections and streams are closed, file descriptors back to the baseline.
        end = time.monotonic() + 30
        while proc_figures(pid)[0] > fd0 and time.monotonic() < end:
            time.sleep(0.2)
        links = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
        assert proc_figures(pid)[0] <= fd0, (fd0, sorted(links))
        assert srv.terminate() == 0


def _account(call, outcome, stats, known_internal, failures, handles) -> None:
    for o in outcome:
        stats[(call.rpc, o)] += 1
    why = judge(call, outcome)
    if why:
        failures.append(why)
    elif BAD.intersection(outcome):
        kind = "bytes" if "bytes" in call.tags else "+".join(sorted(call.tags & KNOWN))
        known_internal[(call.rpc, kind)] += 1
    if call.received and len(handles) < 200:
        handles.append(call.received)


def _report(stats, known_internal, elapsed, rss0, peak) -> None:
    total = sum(stats.values())
    print(f"\ngRPC fuzz: {total} outcomes in {elapsed:.1f} s, seed {SEED}; RSS idle {rss0 >> 20} MiB, "
          f"peak {peak >> 20} MiB")
    by_rpc: dict = collections.defaultdict(dict)
    for (rpc, code), n in sorted(stats.items()):
        by_rpc[rpc][code] = n
    for rpc, codes in sorted(by_rpc.items()):
        print(f"  {rpc}: " + ", ".join(f"{c} {n}" for c, n in sorted(codes.items(), key=lambda x: -x[1])))
    if known_internal:
        print("  INTERNAL_ERROR/UNKNOWN on kinds other work fixes, or on bytes no message parses from "
              "(counted, not asserted): "
              + ", ".join(f"{rpc}/{tag} {n}" for (rpc, tag), n in sorted(known_internal.items())))
