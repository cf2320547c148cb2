"""A server for the console tests, in a child process: a real Broker on a store directory, a real ServerEvents fed
by the sends and pulls this process makes, the console on 127.0.0.1 (port 0). The test drives it with one JSON
command a line on stdin and reads one JSON answer a line on stdout; the first line out is {"port": N}.

    python tests/console_host.py STORE [--acl AK:SK:admin,AK2:SK2:] [--seed N] [--console-allow-anonymous-changes]
                                 [--console-allowed-host NAME]

Commands (each answers {"ok": true, ...} or {"ok": false, "error": ...}):
  send     {topic, n, key_prefix?, queue_id?, tags?}       store n messages (keys key_prefix-i, JSON bodies)
  consume  {group, topic, max_count, ack}                      pull from each queue as a consumer does; ack commits,
                                                           else the messages stay in flight
  dlq      {group, topic, n}                               deliver n messages and dead-letter them (send back
                                                           with max reconsume times 0), as a consumer giving up
  client   {client_id, kind, group, ...}                   a client was heard from
  rpc      {method, status, seconds}                       an RPC ended
  quit
"""
from __future__ import annotations

import asyncio
import json
import sys
import threading

from rmqcore import Message, StoreConfig  # noqa: E402
from rmqcore.broker import Broker, BrokerConfig, SubscriptionGroupConfig  # noqa: E402
from rmqcore.console import serve_console  # noqa: E402
from rmqcore.console.standalone import BrokerHost, StaticAcl  # noqa: E402


class Host(BrokerHost):
    """BrokerHost plus what a gRPC server does on its RPCs: count them in ServerEvents, track pull positions."""

    def __init__(self, broker, acl):
        super().__init__(broker, "127.0.0.1", 0, acl)
        self.pull_offsets: dict[tuple[str, str, int], int] = {}     # (group, topic, queue) -> next to deliver

    def send(self, topic, n, key_prefix="k", queue_id=None, tags="TagA"):
        tc = self.broker.topic_config_manager.select_topic_config(topic)
        queues = tc.write_queue_nums if tc else 4
        out = []
        for i in range(n):
            body = json.dumps({"topic": topic, "i": i, "key": f"{key_prefix}-{i}"}).encode()
            m = Message(topic, body, queue_id if queue_id is not None else i % queues, tags=tags,
                        keys=f"{key_prefix}-{i}")
            r = self.broker.send(m)
            self.events.on_messages_in(topic, [len(body)])
            out.append({"key": f"{key_prefix}-{i}", "commitlog_offset": r.commitlog_offset,
                        "queue_id": m.queue_id, "queue_offset": r.queue_offset, "msg_id": r.msg_id,
                        "uniq_key": r.uniq_key, "store_timestamp": r.store_timestamp})
        self.broker.store.wait_dispatched()
        return out

    def _deliver(self, group, topic, max_count):
        """The messages a consumer of ``group`` receives next, queue by queue, from where the last delivery
        (or the committed offset) left off."""
        # A consumer long-polls: what was stored before this call (a resend through the console, say) is
        # delivered even when the dispatcher has not reached it yet.
        self.broker.store.wait_dispatched()
        got = []
        for qid in sorted(self.broker.store.topics().get(topic, [])):
            key = (group, topic, qid)
            start = self.pull_offsets.get(key)
            if start is None:
                start = max(self.broker.query_offset(group, topic, qid), 0)
            r = self.broker.pull(group, topic, qid, start, max(1, max_count - len(got)))
            for m in r.messages:
                got.append((qid, m))
            self.pull_offsets[key] = r.next_begin_offset if r.messages else start
            if len(got) >= max_count:
                break
        return got

    def consume(self, group, topic, max_count=32, ack=True):
        got = self._deliver(group, topic, max_count)
        out = []
        for qid, m in got:
            out.append({"key": " ".join(m.keys), "topic": m.topic, "queue_id": qid, "queue_offset": m.queue_offset,
                        "retry_topic": m.properties.get("RETRY_TOPIC"), "uniq_key": m.uniq_key})
            self.events.on_messages_out(topic, group, 1, m.body.nbytes)
        for qid in {q for q, _ in got} | {q for (g, t, q) in self.pull_offsets if g == group and t == topic}:
            pulled = self.pull_offsets.get((group, topic, qid), 0)
            committed = max(self.broker.query_offset(group, topic, qid), 0)
            if ack:
                if pulled > committed:
                    self.broker.commit_offset(group, topic, qid, pulled)
                self.set_inflight(group, topic, qid, 0)
            else:
                self.set_inflight(group, topic, qid, pulled - committed)
        del got
        return out

    def dlq(self, group, topic, n):
        got = self._deliver(group, topic, n)
        out = []
        for qid, m in got:
            self.events.on_messages_out(topic, group, 1, m.body.nbytes)
            r = self.broker.send_back(m, group, 0, max_reconsume_times=0)
            self.events.on_dlq(group, topic)
            out.append({"key": " ".join(m.keys), "dlq_commitlog_offset": r.commitlog_offset})
        for qid in {q for q, _ in got}:
            self.broker.commit_offset(group, topic, qid, self.pull_offsets[(group, topic, qid)])
        del got
        self.broker.store.wait_dispatched()
        return out


def parse_acl(text):
    accounts = {}
    for entry in filter(None, text.split(",")):
        ak, sk, role = (entry.split(":") + [""])[:3]
        accounts[ak] = (sk, role == "admin")
    return StaticAcl(accounts)


def serve_commands(host, loop, done):
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = json.loads(line)
        op = cmd.pop("op")
        try:
            if op == "quit":
                print(json.dumps({"ok": True}), flush=True)
                break
            if op == "client":
                host.events.on_client(cmd.pop("client_id"), **cmd)
                result = None
            elif op == "rpc":
                host.events.on_rpc(cmd["method"], cmd["status"], cmd["seconds"])
                result = None
            else:
                result = getattr(host, op)(**cmd)
            print(json.dumps({"ok": True, "result": result}), flush=True)
        except Exception as e:      # the test reads the refusal
            print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}), flush=True)
    loop.call_soon_threadsafe(done.set)


async def main():
    store = sys.argv[1]
    acl = None
    if "--acl" in sys.argv:
        acl = parse_acl(sys.argv[sys.argv.index("--acl") + 1])
    # Small files: a test store need not preallocate a 1 GiB commitlog, 6 MB per consume queue, a 400 MB index.
    config = StoreConfig(mapped_file_size_commit_log=4 << 20, mapped_file_size_consume_queue=20 * 10000,
                         max_hash_slot_num=4001, max_index_num=16000, warm_mapped_file_enable=False)
    broker = Broker.open(store, BrokerConfig(), store_config=config)
    try:
        host = Host(broker, acl)
        broker.create_topic("orders", 4)
        broker.update_group(SubscriptionGroupConfig("billing"))
        broker.update_group(SubscriptionGroupConfig("audit", retry_max_times=3))
        extra = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "--console-allowed-host"]
        runner = await serve_console(host, "127.0.0.1", 0, allowed_hosts=extra,
                                     allow_anonymous_changes="--console-allow-anonymous-changes" in sys.argv)
        host.port = runner.port
        print(json.dumps({"port": runner.port}), flush=True)
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(target=serve_commands, args=(host, loop, done), daemon=True).start()
        await done.wait()
        await runner.close()
    finally:
        broker.close()


if __name__ == "__main__":
    asyncio.run(main())
