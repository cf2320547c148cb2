"""The name server's part of the remoting protocol, answered from this broker's own topic table (RocketMQ's
namesrv ``DefaultRequestProcessor`` + ``RouteInfoManager`` for one broker, tag rocketmq-all-4.9.7).

A Java broker registers every topic of its table with the name server (REGISTER_BROKER), and the name server's
route for a topic is the registering brokers' queue data; here the one broker is also the name server, so a route is
read straight from the topic table: this broker (``brokerAddrs`` ``{"0": advertised address}``: id 0, the master)
and its queue counts. JSON is written compact with quoted ids (the Go client splits brokerAddrs as text).
"""
from __future__ import annotations

import json

from ..broker.topic_validator import is_writeable
from .codes import GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_BROKER_CLUSTER_INFO, GET_ROUTEINFO_BY_TOPIC

CODES = (GET_ROUTEINFO_BY_TOPIC, GET_BROKER_CLUSTER_INFO, GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
# FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL), appended to the name server's TOPIC_NOT_EXIST remark
APPLY_TOPIC_URL = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class NameServer:
    """Routes of one broker, at its advertised address."""

    def __init__(self, broker, address: str):
        self.broker = broker
        self.address = address

    def _broker_data(self) -> dict:
        cfg = self.broker.config
        return {"brokerAddrs": {str(cfg.broker_id): self.address}, "brokerName": cfg.broker_name,
                "cluster": cfg.broker_cluster_name}

    def route(self, topic: str) -> bytes | None:
        """TopicRouteData JSON of ``topic``, None when the broker has no such topic."""
        tc = self.broker.topic_config_manager.select_topic_config(topic)
        if tc is None:
            return None
        perm = tc.perm
        broker_perm = self.broker.config.broker_permission
        if not is_writeable(broker_perm):
            # BrokerController.registerBrokerAll: a broker that refuses writes registers its topics without WRITE
            perm &= broker_perm
        queue = {"brokerName": self.broker.config.broker_name, "perm": perm, "readQueueNums": tc.read_queue_nums,
                 "topicSysFlag": tc.topic_sys_flag, "writeQueueNums": tc.write_queue_nums}
        return _dumps({"brokerDatas": [self._broker_data()], "filterServerTable": {}, "queueDatas": [queue]})

    def cluster_info(self) -> bytes:
        """ClusterInfo JSON: {"brokerAddrTable": {name: BrokerData}, "clusterAddrTable": {cluster: [name]}}."""
        cfg = self.broker.config
        return _dumps({"brokerAddrTable": {cfg.broker_name: self._broker_data()},
                       "clusterAddrTable": {cfg.broker_cluster_name: [cfg.broker_name]}})

    def topic_list(self) -> bytes:
        """TopicList JSON of every topic the broker has (system topics too, as the Java name server lists them)."""
        return _dumps({"topicList": sorted(self.broker.topics())})
