"""`rmqcore serve --remoting --namesrv` SIGKILLed at random moments while the real 4.x clients load it: the Java
4.9.7 client (tests/java/SoakClient.java: 4 threads of sync sends, and a push consumer group) and the C++ client
(PyPI rocketmq==0.4.4 in its own venv, tests/cpp/remoting_cpp_client.py ``load``), each lifetime restarted on the
same store. The issue's aim: no acknowledged send lost over 20 kills; consumers resume from committed offsets.

What is checked:
- every send a client saw acknowledged (SEND_OK) is in the store with the body and key it was sent with (found by
  its message id, the UNIQ_KEY the client set);
- the consumer group resumes from its committed offsets: the broker persists consumerOffset.json every 5 s
  (ConsumerOffsetManager, flushConsumerOffsetInterval), so a kill may lose the commits of the last interval and
  RocketMQ's at-least-once lets those messages come again; but nothing below the offset the file held when the
  server restarted is delivered again (each delivery's queue offset >= that queue's committed offset), committed
  offsets never go back, and by the end the group got every acknowledged message at least once.

Lifetimes alternate SYNC_FLUSH (the send is answered after its group commit) and ASYNC_FLUSH (answered once the
record is in the page cache, which outlives a killed process): RocketMQ acknowledges in both modes and a SIGKILL of
the process, not of the machine, must lose neither. Default: 3 kills; RMQCORE_SOAK=1: 20
(RMQCORE_REMOTING_SOAK_KILLS to choose; RMQCORE_SOAK_SEED to repeat the kill moments).
"""
from __future__ import annotations

import os
import random
import subprocess
import time

from java_util import java_client
from remoting_util import RemotingProcess, wait_for
from test_remoting_cpp import SCRIPT, venv_python  # noqa: F401  (the C++ client's venv fixture)

TOPIC = "rsoak_t"
GROUP = "rsoak_g"
QUEUES = 4


def _kills() -> int:
    default = "20" if os.environ.get("RMQCORE_SOAK") == "1" else "3"
    return int(os.environ.get("RMQCORE_REMOTING_SOAK_KILLS", default))


class Clients:
    """One server lifetime's client processes, their output in files (a pipe left unread would stall them)."""

    def __init__(self, workdir: str, life: int):
        self.workdir = workdir
        self.life = life
        self.procs: dict[str, tuple[subprocess.Popen, str]] = {}

    def start(self, name: str, cmd: list[str]) -> None:
        path = os.path.join(self.workdir, f"{self.life}-{name}.out")
        with open(path, "w") as out:
            self.procs[name] = (subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT), path)

    def lines(self, name: str, word: str) -> list[list[str]]:
        with open(self.procs[name][1], errors="replace") as f:
            # a line cut by the kill has no newline: not counted
            return [ln.split(" ", 3)[1:] for ln in f.read().split("\n")[:-1] if ln.startswith(word + " ")]

    def kill(self) -> None:
        for p, _ in self.procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(30)


def _committed(store: str) -> dict[int, int]:
    """The group's offsets as the server's consumerOffset.json holds them (what a restart starts from)."""
    from rmqcore import fastjson
    path = os.path.join(store, "config", "consumerOffset.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        table = fastjson.loads(f.read()).get("offsetTable") or {}
    return {int(q): o for q, o in table.get(f"{TOPIC}@{GROUP}", {}).items()}


def test_kills_under_load_lose_no_acknowledged_send_and_consumers_resume(tmp_path, venv_python):  # noqa: F811
    java = java_client(str(tmp_path / "java"))
    kills = _kills()
    rnd = random.Random(int(os.environ.get("RMQCORE_SOAK_SEED", "37")))
    store = str(tmp_path / "store")
    work = str(tmp_path / "out")
    os.makedirs(work)
    from rmqcore.broker import Broker
    with Broker.open(store) as b:
        b.create_topic(TOPIC, QUEUES)

    acked: dict[str, tuple[str, str]] = {}          # msg id -> (key, body)
    consumed: set[str] = set()
    below_commit: list[tuple] = []                   # deliveries below the committed offset of their lifetime
    committed = _committed(store)
    resumed = 0                                      # lifetimes that started with committed offsets
    for life in range(kills + 1):
        last = life == kills
        mode = "SYNC_FLUSH" if life % 2 == 0 else "ASYNC_FLUSH"
        # offsets persisted every second (RocketMQ's 5 s would rarely come before a kill in a short lifetime)
        s = RemotingProcess(store, conf={"flushDiskType": mode, "flushConsumerOffsetInterval": "1000"})
        c = Clients(work, life)
        try:
            c.start("consumer", [*java, "SoakClient", s.namesrv, "consume", TOPIC, GROUP])
            if not last:
                c.start("java", [*java, "SoakClient", s.namesrv, "produce", TOPIC, f"j{life}", "4"])
                c.start("cpp", [venv_python, SCRIPT, s.namesrv, "load", TOPIC, "0", f"c{life}"])
                # under load: both producers acknowledged sends and the consumer got some, then a random moment
                wait_for(lambda: c.lines("java", "ACK") and c.lines("cpp", "ACK") and c.lines("consumer", "GOT"),
                         "both producers' first acks and the consumer's first delivery", timeout=120)
                time.sleep(rnd.uniform(0.2, 4.0))
                s.kill()
            else:
                want = set(k for k, _ in acked.values())
                wait_for(lambda: want <= consumed | {g[2].split(".", 1)[0] for g in c.lines("consumer", "GOT")},
                         "the group to get every acknowledged message", timeout=180)
        finally:
            c.kill()
            if last and s.alive():
                assert s.terminate() == 0
            elif s.alive():
                s.kill()
        for name in ("java", "cpp") if not last else ():
            for msg_id, key, body in c.lines(name, "ACK"):
                acked[msg_id] = (key, body)
        for q, off, body in c.lines("consumer", "GOT"):
            consumed.add(body.split(".", 1)[0])
            if int(off) < committed.get(int(q), 0):
                below_commit.append((life, int(q), int(off), committed.get(int(q))))
        after = _committed(store)
        resumed += bool(committed)
        assert all(after.get(q, 0) >= o for q, o in committed.items()), (life, committed, after)
        committed = after

    # every acknowledged send is in the store as sent
    from rmqcore.store import MessageStore
    found: dict[str, list[tuple[str, str]]] = {}
    st = MessageStore.open(store)
    try:
        st.wait_dispatched()
        for q in range(QUEUES):
            off = 0
            while True:
                r = st.get_messages("check", TOPIC, q, off, 256)
                if not r.messages:
                    break
                for m in r.messages:
                    found.setdefault(m.uniq_key, []).append((" ".join(m.keys), bytes(m.body).decode()))
                off = r.next_begin_offset
    finally:
        st.close()
    lost = [i for i in acked if i not in found]
    altered = [i for i in acked if i in found and any(f != acked[i] for f in found[i])]
    print(f"{kills} kills: acknowledged {len(acked)} (java {sum(k.startswith('j') for k, _ in acked.values())}, "
          f"cpp {sum(k.startswith('c') for k, _ in acked.values())}), stored {sum(map(len, found.values()))}, "
          f"lost {len(lost)}, altered {len(altered)}, consumed {len(consumed)}, "
          f"delivered below a committed offset {len(below_commit)}, lifetimes that resumed from committed offsets "
          f"{resumed}, final offsets {committed}")
    assert len(acked) > 0 and not lost and not altered, (lost[:5], altered[:5])
    assert not below_commit, below_commit[:10]
    assert resumed and sum(committed.values()) > 0, "no lifetime started from committed offsets: nothing checked"
    assert {k for k, _ in acked.values()} <= consumed
