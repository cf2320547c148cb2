"""Recorded remoting frames: what the real RocketMQ 4.9.7 Java client and mqadmin exchanged with the real Java broker
and name server, kept as request/response pairs in tests/data/remoting_frames/*.json and replayed against rmqcore by
tests/test_remoting_frames.py.

Regenerate them (needs a JDK and the java-broker harness, as tests/test_remoting_java.py does)::

    python tests/remoting_frames.py [NAME...]   # writes tests/data/remoting_frames/NN_<scenario>.json (all, or NAMEs)

How: the Java name server and broker (../shared/java-broker's run.sh, a fresh store, cluster BenchCluster, broker-a)
listen on 127.0.0.2; the broker advertises ``brokerIP1=127.0.0.1`` and registers with 127.0.0.1, where a capture
proxy (``CaptureProxy`` below) listens on the same two ports and forwards every byte to 127.0.0.2, recording each
frame. So every client request, routed by the name server to the advertised address, passes the proxy. The clients:
tests/java/RemotingScenario.java (produce, lite pull, push), mqadmin (MQAdminStartup) and, where no Java client
would, raw requests of this script's own (an unknown code; a heartbeat held open while mqadmin lists connections,
its language PYTHON); the broker's own
REGISTER_BROKER to the name server is left out of the files (another helper's subject).

The Java broker runs requests in executors (sends, pulls, heartbeats each in their own), so a recording can catch its
own races: an async send overtaking the sync one behind it (the queue offsets swap), a pull run before the heartbeat
that preceded it (SUBSCRIPTION_NOT_LATEST), a route asked before the retry topic's heartbeat made it. The replay is
strictly in order and reports those as differences: record again (the committed recordings have none).

A file is a list of exchanges in the order the requests reached the proxy:
``{"target": "namesrv"|"broker", "conn": n, "request": FRAME, "response": FRAME|null}`` (null for a oneway
request; ``"compare": false`` on the exchanges of a send the loaded Java broker refused, replayed for the state they
made and not compared), a FRAME being ``{"serializeType", "header": the header object as sent, "body": ...}`` with the body as
``{"json": ...}`` (standard JSON), ``{"text": ...}`` (fastjson's object or bare-int keys) or ``{"hex": ...}``.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "remoting_frames")
REGISTER_BROKER = 103


def body_repr(body: bytes):
    if not body:
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": body.hex()}
    try:
        return {"json": json.loads(text)}
    except ValueError:
        pass
    if text.isprintable() or all(c.isprintable() or c in "\n\t\r" for c in text):
        return {"text": text}
    return {"hex": body.hex()}


def body_bytes(rep) -> bytes:
    if rep is None:
        return b""
    if "hex" in rep:
        return bytes.fromhex(rep["hex"])
    if "text" in rep:
        return rep["text"].encode("utf-8")
    return json.dumps(rep["json"], separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def split_frames(buf: bytes) -> tuple[list[dict], int]:
    """Whole frames at the start of ``buf`` as FRAME dicts (raw header object kept), and the bytes they used."""
    out, pos = [], 0
    while len(buf) - pos >= 4:
        (length,) = struct.unpack_from(">i", buf, pos)
        if len(buf) - pos - 4 < length:
            break
        (mark,) = struct.unpack_from(">i", buf, pos + 4)
        stype, hlen = (mark >> 24) & 0xFF, mark & 0xFFFFFF
        header = buf[pos + 8:pos + 8 + hlen]
        body = buf[pos + 8 + hlen:pos + 4 + length]
        if stype == 0:
            h = json.loads(header)
        else:
            from rmqcore.remoting.remoting_command import LANGUAGES, decode_binary_header
            code, lang, version, opaque, flag, remark, ext = decode_binary_header(header)
            h = {"code": code, "language": lang if isinstance(lang, str) else LANGUAGES[lang], "version": version,
                 "opaque": opaque, "flag": flag, "extFields": ext}
            if remark is not None:
                h["remark"] = remark
        out.append({"serializeType": stype, "header": h, "body": body_repr(bytes(body))})
        pos += 4 + length
    return out, pos


class CaptureProxy:
    """Listens on 127.0.0.1:port for each (name, port), forwards to 127.0.0.2:port and records frames."""

    def __init__(self, ports: dict[str, int]):
        self.ports = ports
        self.exchanges: list[dict] = []
        self.kept: list[dict] = []              # a failed attempt's exchanges, handed out by the next take
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._conn = 0
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self._ready.wait(10)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        for name, port in self.ports.items():
            self.loop.run_until_complete(asyncio.start_server(
                lambda r, w, name=name, port=port: self._pipe(name, port, r, w), "127.0.0.1", port,
                reuse_address=True))
        self._ready.set()
        self.loop.run_forever()

    async def _pipe(self, name, port, cr, cw):
        self._conn += 1
        conn = self._conn
        sr, sw = await asyncio.open_connection("127.0.0.2", port)
        pending: dict[int, dict] = {}

        async def copy(src, dst, from_client):
            buf = b""
            try:
                while True:
                    data = await src.read(1 << 16)
                    if not data:
                        break
                    dst.write(data)
                    buf += data
                    frames, used = split_frames(buf)
                    buf = buf[used:]
                    for f in frames:
                        self._record(name, conn, f, from_client, pending)
            finally:
                dst.close()

        await asyncio.gather(copy(cr, sw, True), copy(sr, cw, False), return_exceptions=True)

    def _record(self, name, conn, frame, from_client, pending):
        h = frame["header"]
        is_response = h.get("flag", 0) & 1
        with self.lock:
            if from_client and not is_response:
                if h.get("code") == REGISTER_BROKER:
                    return
                ex = {"target": name, "conn": conn, "request": frame, "response": None}
                if not h.get("flag", 0) & 2:
                    pending[h.get("opaque")] = ex
                self.exchanges.append(ex)
            elif not from_client and is_response:
                ex = pending.pop(h.get("opaque"), None)
                if ex is not None:
                    ex["response"] = frame

    def take(self) -> list[dict]:
        """The exchanges since the last take (those ``kept`` first)."""
        time.sleep(0.5)
        with self.lock:
            out, self.exchanges = self.kept + self.exchanges, []
            self.kept = []
        return out

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def call(sock, code: int, ext: dict, body: bytes, opaque: int, language: str = "PYTHON") -> dict:
    """One request of ours on a raw connection (JSON header, as the clients write it), and its answer."""
    header = json.dumps({"code": code, "extFields": ext, "flag": 0, "language": language, "opaque": opaque,
                         "serializeTypeCurrentRPC": "JSON", "version": 407}, separators=(",", ":")).encode()
    sock.sendall(struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body)
    buf = b""
    while True:
        frames, _ = split_frames(buf)
        if frames:
            return frames[0]
        buf += sock.recv(65536)


def free_port_pair() -> tuple[int, int]:
    """Two ports free on both 127.0.0.1 and 127.0.0.2 (the broker also takes port-2 and port+1)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if 20000 < p < 60000:
            return p, p + 10


CHAIN = ("01_produce", "02_litepull", "03_push", "04_topic_admin", "05_broker_admin", "06_consumer_admin",
         "07_subgroup", "08_query")
ALL = CHAIN + ("09_unknown_code", "10_connections", "11_produce_rocketmq")


def main(argv):
    """Record the files named in ``argv`` (all when none): the ones after CHAIN stand alone;
    naming any of CHAIN records the whole chain."""
    wanted = set(argv) or set(ALL)
    unknown = wanted - set(ALL)
    if unknown:
        raise SystemExit(f"no such recording: {sorted(unknown)}; known: {', '.join(ALL)}")
    if wanted & set(CHAIN):
        wanted |= set(CHAIN)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    sys.path.insert(0, ROOT)
    from java_util import harness, ensure_build, java_client
    build = ensure_build()
    java = java_client(tempfile.mkdtemp(prefix="frames-java-"))
    run_dir = tempfile.mkdtemp(prefix="frames-jbroker-")
    ns_port, broker_port = free_port_pair()
    env = {**os.environ, "BUILD": build, "RUN_DIR": run_dir, "NS_PORT": str(ns_port),
           "BROKER_PORT": str(broker_port), "BIND_ADDR": "127.0.0.2", "SERVER_HEAP": "256m"}
    run_sh = os.path.join(harness(), "run.sh")
    proxy = CaptureProxy({"namesrv": ns_port, "broker": broker_port})
    ns = f"127.0.0.1:{ns_port}"
    addr = f"127.0.0.1:{broker_port}"
    os.makedirs(DATA, exist_ok=True)
    files = {}
    try:
        subprocess.run(["bash", run_sh, "start"], env=env, check=True, timeout=180)
        time.sleep(2)
        proxy.take()                                         # the broker's start (registration) left out

        def scenario(*args, flags=()):
            r = subprocess.run([*java, *flags, "RemotingScenario", ns, *args], capture_output=True, text=True,
                               timeout=180)
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
            return r.stdout.splitlines()

        def produce(base, n, flags=()):
            """RemotingScenario produce to a fresh topic: the Java broker answers a send that waited past 200 ms
            in its queue with SYSTEM_BUSY (a loaded machine, a cold JVM); a failed attempt's frames are dropped
            and the next one goes to a new topic, so the recording starts from an empty topic."""
            for attempt in range(5):
                topic = base if attempt == 0 else f"{base}-{attempt}"
                try:
                    return scenario("produce", topic, str(n), flags=flags), topic
                except AssertionError as e:
                    print(f"produce to {topic} failed, again: {str(e)[-300:]}", file=sys.stderr)
                    # kept for the replay (the topic it made is listed later), not compared
                    for ex in proxy.take():
                        ex["compare"] = False
                        proxy.kept.append(ex)
            raise RuntimeError("the Java broker refused sends five times")

        def admin(*args):
            r = subprocess.run([*java, "org.apache.rocketmq.tools.command.MQAdminStartup", *args],
                               capture_output=True, text=True, timeout=120)
            print("mqadmin", *args, "->", r.returncode, file=sys.stderr)
            return r.stdout

        produce("warm-up", 3)                    # a cold JVM's first sends
        warm_up = proxy.take()
        if wanted & set(CHAIN):                  # one store's story: each step reads what the ones before left
            files["00_warm_up"] = warm_up        # the chain's topic lists name its topic
            lines, topic = produce("frames", 3)
            files["01_produce"] = proxy.take()
            msg_id = next(ln.split()[1] for ln in lines if ln.startswith("MSGID "))
            scenario("litepull", topic, "7")
            files["02_litepull"] = proxy.take()
            scenario("push", topic, "7")
            files["03_push"] = proxy.take()
            group = next(json.loads(body_bytes(e["request"]["body"]))["consumerDataSet"][0]["groupName"]
                         for e in files["03_push"] if e["request"]["header"]["code"] == 34
                         and json.loads(body_bytes(e["request"]["body"])).get("consumerDataSet"))
            admin("topicRoute", "-n", ns, "-t", topic)
            admin("topicList", "-n", ns)
            admin("topicStatus", "-n", ns, "-t", topic)
            files["04_topic_admin"] = proxy.take()
            admin("clusterList", "-n", ns)
            admin("brokerStatus", "-n", ns, "-b", addr)
            files["05_broker_admin"] = proxy.take()
            admin("consumerProgress", "-n", ns, "-g", group)
            admin("consumerProgress", "-n", ns)
            admin("consumerConnection", "-n", ns, "-g", group)
            admin("producerConnection", "-n", ns, "-g", "no-such-producer", "-t", topic)
            files["06_consumer_admin"] = proxy.take()
            admin("updateSubGroup", "-n", ns, "-b", addr, "-g", "frames-group", "-r", "3", "-q", "2")
            admin("deleteSubGroup", "-n", ns, "-b", addr, "-g", "frames-group")
            files["07_subgroup"] = proxy.take()
            admin("queryMsgByKey", "-n", ns, "-t", topic, "-k", "k2")
            admin("queryMsgById", "-n", ns, "-i", msg_id)
            files["08_query"] = proxy.take()
        # a code no processor has (RemotingScenario and mqadmin never send one): the broker's exact refusal
        if "09_unknown_code" in wanted:
            with socket.create_connection(("127.0.0.1", broker_port)) as s:
                call(s, 9999, {}, b"", 1)
            files["09_unknown_code"] = proxy.take()
        # a live consumer and producer (one raw heartbeat, the connection held open) as mqadmin lists them; of
        # TBW102, which every broker has, so that this one needs none of the steps before
        if "10_connections" in wanted:
            with socket.create_connection(("127.0.0.1", broker_port)) as s:
                hb = {"clientID": "192.0.2.7@frames#1", "producerDataSet": [{"groupName": "frames-pg"}],
                      "consumerDataSet": [{
                          "groupName": "frames-live", "consumeType": "CONSUME_PASSIVELY",
                          "messageModel": "BROADCASTING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                          "unitMode": False,
                          "subscriptionDataSet": [{"classFilterMode": False, "codeSet": [], "expressionType": "TAG",
                                                   "subString": "TagA", "subVersion": 1, "tagsSet": ["TagA"],
                                                   "topic": "TBW102"}]}]}
                call(s, 34, {}, json.dumps(hb, separators=(",", ":")).encode(), 1)
                admin("consumerConnection", "-n", ns, "-g", "frames-live")
                admin("producerConnection", "-n", ns, "-g", "frames-pg", "-t", "TBW102")
                call(s, 35, {"clientID": hb["clientID"], "consumerGroup": "frames-live",
                             "producerGroup": "frames-pg"}, b"", 2)
            files["10_connections"] = proxy.take()
        # the client's ROCKETMQ (binary) headers: the broker answers in the request's own type
        if "11_produce_rocketmq" in wanted:
            produce("frames-bin", 3, flags=("-Drocketmq.serialize.type=ROCKETMQ",))
            files["11_produce_rocketmq"] = proxy.take()
    finally:
        subprocess.run(["bash", run_sh, "stop"], env=env, timeout=120)
        proxy.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    for name, exchanges in files.items():
        with open(os.path.join(DATA, f"{name}.json"), "w") as f:
            json.dump(exchanges, f, indent=1, ensure_ascii=False, sort_keys=True)
            f.write("\n")
        print(name, len(exchanges), "exchanges")


if __name__ == "__main__":
    main(sys.argv[1:])
