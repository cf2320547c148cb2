"""`rmqcore serve` under abuse that costs the server, not the data (issue 36, items 6 and 7): topic creation that
no longer stalls every client nor creates what an account may not touch, and is limited per client; connections
capped per peer and in all, idle ones closed, the descriptor limit raised."""
from __future__ import annotations

import json
import os
import socket
import threading

import pytest

pytest.importorskip("rocketmq")
grpc = pytest.importorskip("grpc")

from rocketmq import Producer  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as d  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as s  # noqa: E402

from serve_util import FAST_CONF, ServerProcess, config, message, prepare  # noqa: E402

SERVICE = "/apache.rocketmq.v2.MessagingService/"
MD = (("x-mq-client-id", "limits-client"),)


def _route(endpoint, topic, md=MD, timeout=10):
    with grpc.insecure_channel(endpoint) as ch:
        call = ch.unary_unary(SERVICE + "QueryRoute", request_serializer=s.QueryRouteRequest.SerializeToString,
                              response_deserializer=s.QueryRouteResponse.FromString)
        return call(s.QueryRouteRequest(topic=d.Resource(name=topic)), metadata=md, timeout=timeout)


def _topics(store) -> set:
    with open(os.path.join(store, "config", "topics.json")) as f:
        from rmqcore import fastjson
        return set(fastjson.loads(f.read())["topicConfigTable"])


def test_query_route_checks_permission_before_creating(tmp_path):
    """An account denied every topic gets FORBIDDEN from QueryRoute, and no topic is created (before, the route
    query created the topic, then nothing else checked)."""
    acl = str(tmp_path / "acl.json")
    with open(acl, "w") as f:
        json.dump({"accounts": [{"accessKey": "deny", "secretKey": "deny-secret", "defaultTopicPerm": "DENY",
                                 "defaultGroupPerm": "DENY"},
                                {"accessKey": "sub", "secretKey": "sub-secret", "defaultTopicPerm": "DENY",
                                 "topicPerms": ["sub_t=SUB"]}]}, f)
    store = str(tmp_path / "store")
    with ServerProcess(store, FAST_CONF, args=["--acl", acl]) as srv:
        from rocketmq.v5.util.signature import Signature
        r = _route(srv.endpoint, "denied_t", Signature.metadata(config(srv.endpoint, "deny", "deny-secret"), "c1"))
        assert r.status.code == d.FORBIDDEN, r.status
        assert "neither PUB nor SUB" in r.status.message
        # SUB alone is enough to route (RocketMQ's ACL: Permission.ANY for a QueryRoute)
        r = _route(srv.endpoint, "sub_t", Signature.metadata(config(srv.endpoint, "sub", "sub-secret"), "c2"))
        assert r.status.code == d.OK, r.status
        assert srv.terminate() == 0
    topics = _topics(store)
    assert "denied_t" not in topics and "sub_t" in topics


def test_topic_creation_is_limited_per_client(tmp_path):
    """Past its burst a client's creations are refused with TOO_MANY_REQUESTS naming the setting; topics that exist
    still route, and what was refused was not created."""
    store = str(tmp_path / "store")
    prepare(store, topics={"old_t": ("NORMAL", 4)})
    conf = dict(FAST_CONF, topicCreateBurst="3", topicCreatePerSecond="0.0001")
    with ServerProcess(store, conf) as srv:
        codes = [_route(srv.endpoint, f"new_{i}").status for i in range(5)]
        assert [c.code for c in codes] == [d.OK] * 3 + [d.TOO_MANY_REQUESTS] * 2, codes
        assert "topicCreateBurst" in codes[3].message and "new_3" in codes[3].message
        assert _route(srv.endpoint, "old_t").status.code == d.OK
        assert _route(srv.endpoint, "new_0").status.code == d.OK           # created already: no budget needed
        assert srv.terminate() == 0
    topics = _topics(store)
    assert {"new_0", "new_1", "new_2"} <= topics and not {"new_3", "new_4"} & topics


def test_creating_a_topic_does_not_stall_other_clients(tmp_path):
    """While topics.json cannot be written (its new text goes to a FIFO nobody reads), a QueryRoute creating a
    topic waits for the file, but another client's send to an existing topic is answered: the file is written by
    the topic manager's thread, not the event loop (before, the loop blocked in the write and the send timed
    out). Once the write goes through, the route is answered and the topic is in the file."""
    store = str(tmp_path / "store")
    prepare(store, topics={"live_t": ("NORMAL", 4)})
    with ServerProcess(store, FAST_CONF) as srv:
        fifo = os.path.join(store, "config", "topics.json.tmp")
        os.mkfifo(fifo)
        ch = grpc.insecure_channel(srv.endpoint)
        call = ch.unary_unary(SERVICE + "QueryRoute", request_serializer=s.QueryRouteRequest.SerializeToString,
                              response_deserializer=s.QueryRouteResponse.FromString)
        pending = call.future(s.QueryRouteRequest(topic=d.Resource(name="created_t")), metadata=MD, timeout=60)
        released = threading.Event()
        try:
            p = Producer(config(srv.endpoint), ("live_t",))
            p.startup()
            try:
                receipt = p.send(message("live_t", b"while the topic file is stuck"))
                assert receipt.message_id
            finally:
                p.shutdown()
            assert not pending.done()                  # the creating route waits for the file
        finally:
            def release():
                fd = os.open(fifo, os.O_RDONLY)
                os.unlink(fifo)
                while os.read(fd, 1 << 16):
                    pass
                os.close(fd)
                released.set()
            threading.Thread(target=release, daemon=True).start()
        assert released.wait(30)
        assert pending.result().status.code == d.OK
        ch.close()
        assert srv.terminate() == 0
    assert "created_t" in _topics(store)
