"""``/metrics``: RocketMQ 5's metrics in Prometheus' text format, through prometheus_client.

Names and labels are RocketMQ 5.3's (broker/.../metrics/BrokerMetricsConstant, the proxy's rocketmq_rpc_latency,
store/.../metrics/DefaultStoreMetricsConstant); every series carries the broker's ``cluster``, ``node_type`` and
``node_id``. What RocketMQ has no name for (the store's own figures: commitlog offsets, dispatch lag, flushes,
what recovery found) is exported under ``rmqcore_``.

One custom collector builds every family at scrape time from ServerEvents' snapshot (one copy of its counters
under its lock), the broker's runtime_info and the consumer offset table: no instrument is updated on the send or
pull path, and nothing is kept between scrapes. A scrape costs a few hundred microseconds on a small broker and
grows with the number of (group, topic, queue) offsets and labelled series; tests/test_console.py measures it.
"""
from __future__ import annotations

import shutil
import struct
import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from ..broker.mix_all import RETRY_GROUP_TOPIC_PREFIX
from ..broker.topic_validator import is_system_topic
from ..broker.transaction import CHECK_MAX_TIME_TOPIC
from ..serve.events import MESSAGE_SIZE_BUCKETS, RPC_LATENCY_BUCKETS

NODE_TYPE = "broker"
# A consume-queue unit: commitlog offset, size, tags code (big-endian, 20 bytes).
_UNIT = struct.Struct(">qiq")


def _bool(v: bool) -> str:
    return "true" if v else "false"


def _cumulative(counts: list[int], bounds, scale: float = 1.0) -> list[tuple[str, float]]:
    """ServerEvents' per-bucket counts (the last one past every bound) as Prometheus' cumulative buckets."""
    out, acc = [], 0
    for bound, n in zip(bounds, counts):
        acc += n
        out.append((repr(float(bound * scale)), acc))
    out.append(("+Inf", acc + (counts[len(bounds)] if len(counts) > len(bounds) else 0)))
    return out


class RocketMQCollector(Collector):
    """Every family of one server, read at collect() time."""

    def __init__(self, server):
        self.server = server

    def describe(self):
        # Nothing to describe up front: the registry then does not call collect() at registration.
        return []

    def collect(self):
        server = self.server
        broker = server.broker
        store = broker.store
        cfg = broker.config
        base = ["cluster", "node_type", "node_id"]
        bv = [cfg.broker_cluster_name, NODE_TYPE, cfg.broker_name]
        snap = server.events.snapshot()
        broker_topics = broker.topic_config_manager.system_topics

        def is_system(topic: str) -> bool:
            # RocketMQ's system topics and the ones the broker's table adds itself (its cluster's and its name).
            return topic in broker_topics or is_system_topic(topic)

        # -- messages in / out ---------------------------------------------------------------------------
        m_in = CounterMetricFamily("rocketmq_messages_in", "Messages produced (stored) per topic",
                                   labels=base + ["topic", "message_type", "is_system"])
        for (topic, mtype), n in snap["messages_in"].items():
            m_in.add_metric(bv + [topic, mtype, _bool(is_system(topic))], n)
        yield m_in
        t_in = CounterMetricFamily("rocketmq_throughput_in", "Bytes of message bodies produced per topic",
                                   labels=base + ["topic", "is_system"])
        for topic, n in snap["bytes_in"].items():
            t_in.add_metric(bv + [topic, _bool(is_system(topic))], n)
        yield t_in
        out_labels = base + ["topic", "consumer_group", "is_retry", "is_system"]
        m_out = CounterMetricFamily("rocketmq_messages_out", "Messages delivered to consumers", labels=out_labels)
        for (topic, group), n in snap["messages_out"].items():
            m_out.add_metric(bv + [topic, group, _bool(topic.startswith(RETRY_GROUP_TOPIC_PREFIX)),
                                   _bool(is_system(topic))], n)
        yield m_out
        t_out = CounterMetricFamily("rocketmq_throughput_out", "Bytes of message bodies delivered",
                                    labels=out_labels)
        for (topic, group), n in snap["bytes_out"].items():
            t_out.add_metric(bv + [topic, group, _bool(topic.startswith(RETRY_GROUP_TOPIC_PREFIX)),
                                   _bool(is_system(topic))], n)
        yield t_out
        size = HistogramMetricFamily("rocketmq_message_size", "Sizes of the message bodies produced (bytes)",
                                     labels=base)
        size.add_metric(bv, _cumulative(snap["message_size"], MESSAGE_SIZE_BUCKETS), snap["message_size_sum"])
        yield size
        dlq = CounterMetricFamily("rocketmq_send_to_dlq_messages", "Messages moved to a group's DLQ",
                                  labels=base + ["consumer_group", "topic", "is_system"])
        for (group, topic), n in snap["dlq"].items():
            dlq.add_metric(bv + [group, topic, _bool(is_system(topic))], n)
        yield dlq

        # -- transactions --------------------------------------------------------------------------------
        commits = CounterMetricFamily("rocketmq_commit_messages", "Transactional messages committed",
                                      labels=base + ["topic"])
        for topic, n in snap["commits"].items():
            commits.add_metric(bv + [topic], n)
        yield commits
        rollbacks = CounterMetricFamily("rocketmq_rollback_messages", "Transactional messages rolled back",
                                        labels=base + ["topic"])
        for topic, n in snap["rollbacks"].items():
            rollbacks.add_metric(bv + [topic], n)
        yield rollbacks
        # RocketMQ's gauge counts up at prepare and down at commit/rollback, per topic: the same from the totals.
        half = GaugeMetricFamily("rocketmq_half_messages", "Prepared transactional messages not yet ended",
                                 labels=base + ["topic"])
        for (topic, mtype), n in snap["messages_in"].items():
            if mtype == "TRANSACTION":
                half.add_metric(bv + [topic], max(n - snap["commits"].get(topic, 0)
                                                  - snap["rollbacks"].get(topic, 0), 0))
        yield half
        # Halves no check could resolve (RocketMQ moves them to TRANS_CHECK_MAX_TIME_TOPIC after
        # transactionCheckMax checks and says nothing more): counted from that queue's offsets, no message read.
        unresolved = GaugeMetricFamily("rmqcore_transaction_unresolved_halves",
                                       f"Half messages moved to {CHECK_MAX_TIME_TOPIC} unresolved after "
                                       "transaction_check_max checks", labels=base)
        # (queue 0, where resolveDiscardMsg puts them: two offset lookups, not a walk of the topic table)
        unresolved.add_metric(bv, max(0, store.max_offset(CHECK_MAX_TIME_TOPIC, 0)
                                      - max(0, store.min_offset(CHECK_MAX_TIME_TOPIC, 0))))
        yield unresolved
        tx = broker.transactions
        no_producer = CounterMetricFamily("rmqcore_transaction_checks_without_producer",
                                          "Checks of open halves that found no live producer of the half's group",
                                          labels=base)
        no_producer.add_metric(bv, tx.stats["no_producer"] if tx is not None else 0)
        yield no_producer

        # -- consumers -----------------------------------------------------------------------------------
        lag_labels = base + ["topic", "consumer_group", "is_retry", "is_system"]
        lag = GaugeMetricFamily("rocketmq_consumer_lag_messages", "Messages not yet consumed (max - committed)",
                                labels=lag_labels)
        inflight = GaugeMetricFamily("rocketmq_consumer_inflight_messages",
                                     "Messages delivered and not yet committed", labels=lag_labels)
        ready = GaugeMetricFamily("rocketmq_consumer_ready_messages", "Messages ready to be delivered",
                                  labels=lag_labels)
        latency = GaugeMetricFamily("rocketmq_consumer_lag_latency",
                                    "Age of the oldest message not yet consumed (milliseconds)", labels=lag_labels)
        now_ms = int(time.time() * 1000)
        com = broker.consumer_offset_manager
        inflight_of = getattr(server, "inflight", None)
        stored = store.topics()
        table, _extra, _version = com._snapshot()          # one copy of the offset table under its lock
        queues: dict = {}                                   # (topic, queue id) -> its consume queue, once a scrape
        flights_of: dict = {}
        for key, committed in table.items():
            tg = com.split_key(key)
            if tg is None:
                continue
            topic, group = tg
            flights = flights_of.get(group)
            if flights is None:
                flights = flights_of[group] = inflight_of(group) if inflight_of is not None else {}
            total_lag = total_inflight = 0
            oldest = None
            # As Broker.lag_detail: every queue with a commit or a message, 0 for a queue not committed yet.
            for qid in set(committed) | set(stored.get(topic, ())):
                cq = queues.get((topic, qid), False)
                if cq is False:
                    cq = queues[(topic, qid)] = store.find_consume_queue(topic, qid, create=False)
                if cq is None:
                    continue
                c = max(committed.get(qid, 0), 0)
                d = max(cq.max_offset_in_queue - c, 0)
                if not d:
                    continue
                total_lag += d
                total_inflight += min(int(flights.get((topic, qid), 0)), d)
                # The store time of the first message not consumed, from its unit and its record's header.
                unit = cq.get_unit_bytes(c, 1) if c >= cq.min_offset_in_queue else None
                if unit is not None and len(unit) >= _UNIT.size:
                    phy, size, _tags = _UNIT.unpack_from(unit)
                    ts = store.pickup_store_timestamp(phy, size)
                    if ts > 0 and (oldest is None or ts < oldest):
                        oldest = ts
            lv = bv + [topic, group, _bool(topic.startswith(RETRY_GROUP_TOPIC_PREFIX)),
                       _bool(is_system(topic))]
            lag.add_metric(lv, total_lag)
            inflight.add_metric(lv, total_inflight)
            ready.add_metric(lv, total_lag - total_inflight)
            latency.add_metric(lv, max(now_ms - oldest, 0) if oldest is not None else 0)
        yield lag
        yield inflight
        yield ready
        yield latency

        # -- connections ---------------------------------------------------------------------------------
        producers = GaugeMetricFamily("rocketmq_producer_connections", "Producers connected",
                                      labels=base + ["language", "version"])
        consumers = GaugeMetricFamily("rocketmq_consumer_connections", "Consumers connected",
                                      labels=base + ["consumer_group", "language", "version", "consume_mode"])
        pc: dict = {}
        cc: dict = {}
        for c in server.events.clients():
            if c.kind == "PRODUCER":
                k = (c.language, c.version)
                pc[k] = pc.get(k, 0) + 1
            elif c.group:
                mode = "push" if c.kind == "PUSH_CONSUMER" else "pop" if c.kind == "SIMPLE_CONSUMER" else "unknown"
                k = (c.group, c.language, c.version, mode)
                cc[k] = cc.get(k, 0) + 1
        for k, n in pc.items():
            producers.add_metric(bv + list(k), n)
        for k, n in cc.items():
            consumers.add_metric(bv + list(k), n)
        yield producers
        yield consumers

        # -- RPCs (the proxy's histogram, in milliseconds as RocketMQ's) -----------------------------------
        rpc = HistogramMetricFamily("rocketmq_rpc_latency", "RPC latency (milliseconds)",
                                    labels=base + ["protocol_type", "request_code", "response_code"])
        for (method, status), buckets in snap["rpc_latency"].items():
            rpc.add_metric(bv + ["grpc", method, status], _cumulative(buckets, RPC_LATENCY_BUCKETS, 1000.0),
                           snap["rpc_latency_sum"].get((method, status), 0.0) * 1000.0)
        yield rpc

        # -- the broker and the store --------------------------------------------------------------------
        perm = GaugeMetricFamily("rocketmq_broker_permission", "The broker's permission (PermName bits)",
                                 labels=base)
        perm.add_metric(bv, cfg.broker_permission)
        yield perm
        info = broker.runtime_info()
        st_labels = base + ["storage_type", "storage_medium"]
        sv = bv + ["local", "disk"]
        try:
            du = shutil.disk_usage(store.path)
            used = du.total - du.free
        except OSError:
            used = 0
        g = GaugeMetricFamily("rocketmq_storage_size", "Bytes used on the store's file system", labels=st_labels)
        g.add_metric(sv, used)
        yield g
        g = GaugeMetricFamily("rocketmq_storage_flush_behind_bytes", "Commitlog bytes written and not yet flushed",
                              labels=st_labels)
        g.add_metric(sv, max(info["commitlog_max_offset"] - info["commitlog_flushed_offset"], 0))
        yield g
        g = GaugeMetricFamily("rocketmq_storage_dispatch_behind_bytes",
                              "Commitlog bytes not yet dispatched to consume queues and index", labels=st_labels)
        g.add_metric(sv, info["dispatch_behind_bytes"])
        yield g
        cl = store.commit_log
        if cl.max_offset > cl.min_offset:
            m = store.look_message(cl.min_offset)
            first = m.store_timestamp if m is not None else 0
            del m
            if first > 0:
                g = GaugeMetricFamily("rocketmq_storage_message_reserve_time",
                                      "Age of the oldest message in the store (milliseconds)", labels=st_labels)
                g.add_metric(sv, max(now_ms - first, 0))
                yield g

        def gauge(name, doc, value):
            f = GaugeMetricFamily(name, doc, labels=base)
            f.add_metric(bv, value)
            return f

        def counter(name, doc, value):
            f = CounterMetricFamily(name, doc, labels=base)
            f.add_metric(bv, value)
            return f

        yield gauge("rmqcore_commitlog_min_offset_bytes", "The commitlog's first offset", info["commitlog_min_offset"])
        yield gauge("rmqcore_commitlog_max_offset_bytes", "The commitlog's end offset", info["commitlog_max_offset"])
        yield gauge("rmqcore_commitlog_flushed_offset_bytes", "The commitlog's flushed offset",
                    info["commitlog_flushed_offset"])
        yield gauge("rmqcore_commitlog_files", "Commitlog files", info["commitlog_files"])
        yield gauge("rmqcore_consume_queues", "Consume queues", info["consume_queues"])
        yield gauge("rmqcore_index_files", "Index files", info["index_files"])
        yield gauge("rmqcore_dispatch_lag_milliseconds", "Store time of the last record written minus that of the "
                    "last dispatched", info["dispatch_lag_ms"])
        yield gauge("rmqcore_dispatch_error", "1 when the dispatcher's last pass failed", int(bool(
            info["dispatch_error"])))
        yield counter("rmqcore_dispatched_records", "Records dispatched to consume queues and index",
                      info["dispatched_records"])
        yield counter("rmqcore_dispatch_ring_dropped", "Records read back from the commitlog because the "
                      "dispatch ring was full", info["dispatch_ring_dropped"])
        yield counter("rmqcore_put_calls", "Put calls on the commitlog writer", info["put_calls"])
        gc = getattr(store, "group_commit", None)
        if gc is not None:
            # SYNC_FLUSH: rmqcore_put_calls / rmqcore_flushes is the puts per flush (group commit's batching).
            # Requests are every ask for a flush: a blocking put asks once, a gRPC send twice (its put, then the
            # completion the server awaits), so they are no count of puts.
            yield counter("rmqcore_flushes", "Group-commit flushes (SYNC_FLUSH)", gc.flushes)
            yield counter("rmqcore_flush_requests", "Requests for a flush made to the group commit (SYNC_FLUSH)",
                          gc.requests)
        yield gauge("rmqcore_topics", "Topics configured", info["topics"])
        yield gauge("rmqcore_subscription_groups", "Subscription groups configured", info["subscription_groups"])
        yield gauge("rmqcore_uptime_seconds", "Seconds since the store opened", info["uptime_s"])
        rec = GaugeMetricFamily("rmqcore_recovery", "What the last open's recovery found (one series a figure)",
                                labels=base + ["figure"])
        for k, v in sorted(info["recovery"].items()):
            if isinstance(v, bool):
                v = int(v)
            if isinstance(v, (int, float)):
                rec.add_metric(bv + [k], v)
        yield rec



def make_registry(server) -> CollectorRegistry:
    """A registry of its own (not prometheus_client's global one: two consoles in one process must not clash)
    with the server's collector and the process' CPU, memory and file descriptors."""
    from prometheus_client import ProcessCollector
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RocketMQCollector(server))
    ProcessCollector(registry=registry)
    return registry
