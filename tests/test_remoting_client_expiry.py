"""Silent remoting clients expire (rmqcore/remoting/client_housekeeping.py, RocketMQ 4.9.7's
ClientHousekeepingService): a client whose last heartbeat is older than channelExpiredTimeout (120 s; 3 s here,
broker.conf's RocketMQ 5 key) is dropped from its producer and consumer groups and its connection closed, while
the real Java 4.9.7 consumer, which keeps heartbeating, stays registered."""
import json
import subprocess
import time

from java_util import java_client
from remoting_util import Client, RemotingProcess, wait_for

TIMEOUT_MS = 3000


def heartbeat(cid: str, group: str, topic: str) -> bytes:
    return json.dumps({"clientID": cid, "producerDataSet": [{"groupName": "hk_pg"}], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False, "subscriptionDataSet": [
            {"topic": topic, "subString": "*", "expressionType": "TAG", "subVersion": 1}]}]}).encode()


def consumer_ids(address: str, group: str) -> list[str]:
    c = Client(address)
    try:
        a = c.call(38, {"consumerGroup": group})
        return json.loads(a.body)["consumerIdList"] if a.code == 0 else []
    finally:
        c.close()


def producer_ids(address: str, group: str) -> list[str]:
    c = Client(address)
    try:
        a = c.call(204, {"producerGroup": group})
        return [m["clientId"] for m in json.loads(a.body)["connectionSet"]] if a.code == 0 else []
    finally:
        c.close()


def test_a_silent_client_expires_and_a_heartbeating_one_stays(tmp_path):
    java = java_client(str(tmp_path / "java"))
    with RemotingProcess(str(tmp_path / "store"), conf={"channelExpiredTimeout": TIMEOUT_MS}) as s:
        # the real consumer, heartbeating every 500 ms
        out = open(tmp_path / "consumer.out", "w")
        java_proc = subprocess.Popen([*java, "SoakClient", s.namesrv, "consume", "hk_t", "hk_g", "500"],
                                     stdout=out, stderr=subprocess.STDOUT)
        try:
            java_ids = wait_for(lambda: consumer_ids(s.address, "hk_g"), "the Java consumer's heartbeat", 60)
            # a raw client in the same group (and a producer group) that heartbeats once, then says nothing
            silent = Client(s.address)
            assert silent.call(34, body=heartbeat("silent@1", "hk_g", "hk_t")).code == 0
            assert consumer_ids(s.address, "hk_g") == sorted(java_ids + ["silent@1"])
            assert producer_ids(s.address, "hk_pg") == ["silent@1"]
            started = time.monotonic()
            # the silent one: dropped from both groups and its connection closed by the server
            assert silent.closed_by_server(timeout=TIMEOUT_MS / 1000 * 5)
            assert consumer_ids(s.address, "hk_g") == java_ids
            assert producer_ids(s.address, "hk_pg") == []
            # the heartbeating one is still there well past the timeout
            time.sleep(max(0.0, 2 * TIMEOUT_MS / 1000 - (time.monotonic() - started)))
            assert consumer_ids(s.address, "hk_g") == java_ids
            assert java_proc.poll() is None
        finally:
            java_proc.kill()
            java_proc.wait(30)
            out.close()
        assert s.terminate() == 0
