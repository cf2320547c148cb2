"""Runs in its own venv with PyPI rocketmq==0.4.4 (rocketmq-client-cpp bundled): tests/test_remoting_cpp.py.

    python remoting_cpp_client.py NAMESRV SCENARIO TOPIC N
produce   N sends: sync, oneway, orderly (by i) in turn, then one more sync; prints "SENT <n>" and "MSGID <id>"
pull      a pull consumer reads every queue from offset 0: "GOT <body>" each
push      a push consumer reads N: "GOT <body>" each; a 5th argument names the message model (CLUSTERING,
          BROADCASTING), a 6th the group (default: a new one). Bodies starting "warm" are printed, not counted.
send      N sync sends of "<5th argument>-i"
load      sync sends (no limit when N is 0) with key "<5th argument>-i" and body "<key>." padded to 200 bytes;
          prints "ACK <msg id> <key> <body>" for each answered SEND_OK, stops at the first failure (the server went
          away: tests/test_remoting_crash.py kills it)
orderly   an orderly push consumer (new group; it locks its queues first) reads N: "QUEUE <queue id> <bodies in
          the order they came>". (Not failing any: the package signals a failure only by an exception out of its
          ctypes callback, whose return value is then undefined.)
Ends with "OK", exit 0.
"""
import sys
import threading
import time

from rocketmq.client import Message, Producer, PullConsumer, PushConsumer
from rocketmq.ffi import MessageModel


def produce(ns, topic, n):
    p = Producer("cpp-pg")
    p.set_namesrv_addr(ns)
    p.start()
    sent = 0
    for i in range(n):
        m = Message(topic)
        m.set_tags("T%d" % (i % 3))
        m.set_keys("k%d" % i)
        m.set_body("body-%d" % i)
        if i % 3 == 0:
            r = p.send_sync(m)
            assert int(r.status) == 0, r
            print("MSGID", r.msg_id)
        elif i % 3 == 1:
            p.send_oneway(m)
        else:
            r = p.send_orderly(m, i)          # the package's hashing selector: queue arg % queues
            assert int(r.status) == 0, r
        sent += 1
    # (no batch: this client sends it as code 10 with batch "1", which the Java broker reads as false and stores
    # as one message, as rmqcore does)
    # a last sync send: the oneway ones before it have arrived when it is answered (one connection, in order)
    m = Message(topic)
    m.set_body("last")
    assert int(p.send_sync(m).status) == 0
    print("SENT", sent + 1)
    p.shutdown()


def pull(ns, topic, n):
    c = PullConsumer("cpp-pull-%d" % time.time_ns())
    c.set_namesrv_addr(ns)
    c.start()
    got = set()
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        for m in c.pull(topic):
            b = m.body.decode()
            if b not in got:
                got.add(b)
                print("GOT", b)
    c.shutdown()
    assert len(got) >= n, (len(got), n)


def push(ns, topic, n, model="CLUSTERING", group=None):
    c = PushConsumer(group or "cpp-push-%d" % time.time_ns(), message_model=getattr(MessageModel, model))
    c.set_namesrv_addr(ns)
    got = set()
    lock = threading.Lock()
    done = threading.Event()

    def on_message(m):
        with lock:
            b = m.body.decode()
            if b.startswith("warm"):
                print("GOT", b, flush=True)
            elif b not in got:
                got.add(b)
                print("GOT", b, flush=True)
            if len(got) >= n:
                done.set()
    c.subscribe(topic, on_message)
    c.start()
    done.wait(60)
    c.shutdown()
    assert len(got) >= n, (len(got), n)


def orderly(ns, topic, n):
    c = PushConsumer("cpp-orderly-%d" % time.time_ns(), orderly=True)
    c.set_namesrv_addr(ns)
    queues = {}
    lock = threading.Lock()
    done = threading.Event()

    def on_message(m):
        b = m.body.decode()
        with lock:
            queues.setdefault(m.queue_id, []).append(b)
            if sum(len(v) for v in queues.values()) >= n:
                done.set()
    c.subscribe(topic, on_message)
    c.start()
    done.wait(90)
    c.shutdown()
    for q, bodies in sorted(queues.items()):
        print("QUEUE", q, *bodies)
    assert done.is_set(), queues


def send(ns, topic, n, prefix):
    p = Producer("cpp-send")
    p.set_namesrv_addr(ns)
    p.start()
    for i in range(n):
        m = Message(topic)
        m.set_body("%s-%d" % (prefix, i))
        assert int(p.send_sync(m).status) == 0
    p.shutdown()


def load(ns, topic, n, prefix):
    import itertools
    p = Producer("soak-pg-cpp")
    p.set_namesrv_addr(ns)
    p.start()
    for i in (range(n) if n else itertools.count()):
        key = "%s-%d" % (prefix, i)
        body = (key + ".").ljust(200, "x")
        m = Message(topic)
        m.set_tags("soak")
        m.set_keys(key)
        m.set_body(body)
        try:
            r = p.send_sync(m)
        except Exception as e:
            print("FAILED", type(e).__name__, flush=True)
            break
        if int(r.status) == 0:
            print("ACK", r.msg_id, key, body, flush=True)
    p.shutdown()


if __name__ == "__main__":
    ns, scenario, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if scenario == "push":
        push(ns, topic, n, *sys.argv[5:])
    elif scenario == "send":
        send(ns, topic, n, sys.argv[5])
    elif scenario == "load":
        load(ns, topic, n, sys.argv[5])
    else:
        {"produce": produce, "pull": pull, "orderly": orderly}[scenario](ns, topic, n)
    print("OK", flush=True)
