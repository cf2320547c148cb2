"""The name server's part of the remoting protocol (RocketMQ's namesrv ``DefaultRequestProcessor`` and
``RouteInfoManager``, tag rocketmq-all-4.9.7), embedded in ``rmqcore serve --remoting``.

The route table holds this broker (its own entry, brought up to date from its topic table whenever the table
changed: it needs no registration and never expires) and every broker that registers here (REGISTER_BROKER 103),
so several rmqcore processes form a cluster with no JVM. As in RouteInfoManager: a brokerName's addresses map
brokerId → address (an address registered under another id is removed first); topic queue data is taken from
brokerId 0 only, and only on a first registration or a changed dataVersion; a broker is dropped at
UNREGISTER_BROKER, when the connection it registered on closes, or 120 s after its last registration or
unchanged QUERY_DATA_VERSION (BROKER_CHANNEL_EXPIRED_TIME; checked whenever the table is read or written, where Java
scans every 10 s); when a
brokerName has no address left its queue data goes and a topic no broker holds goes with it. WIPE/ADD_WRITE_PERM
change the queue data's permission only (the broker is not told), until the broker's next changed dataVersion.

JSON is written compact with quoted ids (the Go client splits brokerAddrs as text).
"""
from __future__ import annotations

import json
import logging
import threading
import time

from ..broker.data_version import same_version
from ..broker.topic_validator import PERM_READ, PERM_WRITE
from . import register_broker_body as _body
from .codes import (ADD_WRITE_PERM_OF_BROKER, GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_BROKER_CLUSTER_INFO,
                    GET_ROUTEINFO_BY_TOPIC, QUERY_DATA_VERSION, REGISTER_BROKER, SUCCESS, SYSTEM_ERROR,
                    UNREGISTER_BROKER, WIPE_WRITE_PERM_OF_BROKER)

log = logging.getLogger(__name__)

CODES = (GET_ROUTEINFO_BY_TOPIC, GET_BROKER_CLUSTER_INFO, GET_ALL_TOPIC_LIST_FROM_NAMESERVER, REGISTER_BROKER,
         UNREGISTER_BROKER, QUERY_DATA_VERSION, WIPE_WRITE_PERM_OF_BROKER, ADD_WRITE_PERM_OF_BROKER)
# FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL), appended to the name server's TOPIC_NOT_EXIST remark
APPLY_TOPIC_URL = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
BROKER_CHANNEL_EXPIRED_TIME = 120.0          # RouteInfoManager: seconds without a registration before a broker goes
MASTER_ID = 0


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class _Live:
    """BrokerLiveInfo: when the broker at an address last registered, its dataVersion, the connection it
    registered on (None: this process's own broker) and its HA address."""
    __slots__ = ("last", "version", "channel", "ha_addr")

    def __init__(self, last, version, channel, ha_addr):
        self.last, self.version, self.channel, self.ha_addr = last, version, channel, ha_addr


class RouteInfoManager:
    """The name server's tables. Thread-safe (one lock); ``now`` is time.monotonic() unless a caller passes it."""

    def __init__(self):
        self.lock = threading.RLock()
        self.topic_queue_table: dict[str, dict[str, dict]] = {}       # topic -> brokerName -> QueueData
        self.broker_addr_table: dict[str, dict] = {}                  # brokerName -> BrokerData
        self.cluster_addr_table: dict[str, set[str]] = {}              # cluster -> brokerNames
        self.broker_live_table: dict[str, _Live] = {}                  # brokerAddr -> _Live

    def register_broker(self, cluster: str, addr: str, name: str, broker_id: int, ha_addr: str | None,
                        version: dict, table: dict[str, dict] | None, channel=None, now: float | None = None,
                        any_id: bool = False) -> tuple[str | None, str | None]:
        """RouteInfoManager.registerBroker → (masterAddr, haServerAddr) for a slave whose master is registered,
        else (None, None). ``any_id``: take the queue data whatever the id (this process's own broker)."""
        now = time.monotonic() if now is None else now
        with self.lock:
            self.cluster_addr_table.setdefault(cluster, set()).add(name)
            data = self.broker_addr_table.get(name)
            first = data is None
            if first:
                data = self.broker_addr_table[name] = {"brokerAddrs": {}, "brokerName": name, "cluster": cluster}
            addrs = data["brokerAddrs"]
            for bid in [b for b, a in addrs.items() if a == addr and b != broker_id]:
                del addrs[bid]          # a slave turned master: the same address under one id only
            old = addrs.get(broker_id)
            addrs[broker_id] = addr
            first = first or old is None
            prev = self.broker_live_table.get(addr)
            if table is not None and (broker_id == MASTER_ID or any_id):
                if first or prev is None or not same_version(prev.version, version):
                    for tc in table.values():
                        self._create_and_update_queue_data(name, tc)
            self.broker_live_table[addr] = _Live(now, version, channel, ha_addr)
            if prev is None and channel is not None:
                log.info("name server: new broker registered, %s (%s/%s id %d) HAServer: %s", addr, cluster, name,
                         broker_id, ha_addr)
            if broker_id != MASTER_ID:
                master = addrs.get(MASTER_ID)
                live = self.broker_live_table.get(master) if master is not None else None
                if live is not None:
                    return master, live.ha_addr
        return None, None

    def query_broker_topic_config(self, addr: str) -> dict | None:
        """RouteInfoManager.queryBrokerTopicConfig: the dataVersion the broker at ``addr`` last registered."""
        with self.lock:
            live = self.broker_live_table.get(addr)
            return None if live is None else live.version

    def is_broker_topic_config_changed(self, addr: str, version: dict) -> bool:
        """RouteInfoManager.isBrokerTopicConfigChanged: not registered, or registered with another version."""
        prev = self.query_broker_topic_config(addr)
        return prev is None or not same_version(prev, version)

    def update_broker_info_update_timestamp(self, addr: str, now: float | None = None) -> None:
        """RouteInfoManager.updateBrokerInfoUpdateTimestamp: a registered broker is alive as of ``now``."""
        with self.lock:
            live = self.broker_live_table.get(addr)
            if live is not None:
                live.last = time.monotonic() if now is None else now

    def query_data_version(self, addr: str, version: dict, now: float | None = None) -> tuple[bool, dict | None]:
        """DefaultRequestProcessor.queryBrokerTopicConfig (QUERY_DATA_VERSION) → (changed, the version held):
        an unchanged version counts as a heartbeat (the broker's 120 s expiry starts again); a changed one does
        not, the broker registers in full next."""
        with self.lock:
            changed = self.is_broker_topic_config_changed(addr, version)
            if not changed:
                self.update_broker_info_update_timestamp(addr, now)
            return changed, self.query_broker_topic_config(addr)

    def _create_and_update_queue_data(self, name: str, tc: dict) -> None:
        topic = tc.get("topicName")
        if not isinstance(topic, str):
            return
        self.topic_queue_table.setdefault(topic, {})[name] = {
            "brokerName": name, "perm": int(tc.get("perm", PERM_READ | PERM_WRITE)),
            "readQueueNums": int(tc.get("readQueueNums", 16)), "topicSysFlag": int(tc.get("topicSysFlag", 0)),
            "writeQueueNums": int(tc.get("writeQueueNums", 16))}

    def set_queue_data(self, name: str, table: dict[str, dict], gone=()) -> None:
        """This process's own broker: the queue data of the topics in ``table`` as they are now, and none for the
        topics in ``gone`` (deleted from its table)."""
        with self.lock:
            for tc in table.values():
                self._create_and_update_queue_data(name, tc)
            for topic in gone:
                qd = self.topic_queue_table.get(topic)
                if qd is not None and qd.pop(name, None) is not None and not qd:
                    del self.topic_queue_table[topic]

    def unregister_broker(self, cluster: str, addr: str, name: str, broker_id: int) -> None:
        """RouteInfoManager.unregisterBroker."""
        with self.lock:
            self.broker_live_table.pop(addr, None)
            data = self.broker_addr_table.get(name)
            if data is not None:
                data["brokerAddrs"].pop(broker_id, None)
                if not data["brokerAddrs"]:
                    del self.broker_addr_table[name]
                    names = self.cluster_addr_table.get(cluster)
                    if names is not None:
                        names.discard(name)
                        if not names:
                            del self.cluster_addr_table[cluster]
                    self._remove_topics_of(name)
        log.info("name server: broker %s (%s/%s id %d) unregistered", addr, cluster, name, broker_id)

    def _remove_topics_of(self, name: str) -> None:
        for topic in list(self.topic_queue_table):
            qd = self.topic_queue_table[topic]
            qd.pop(name, None)
            if not qd:
                del self.topic_queue_table[topic]

    def _remove_address(self, addr: str) -> None:
        """onChannelDestroy's clean-up of one broker address: out of its brokerName, which goes (with its queue
        data) when no address is left."""
        self.broker_live_table.pop(addr, None)
        for name, data in list(self.broker_addr_table.items()):
            addrs = data["brokerAddrs"]
            ids = [b for b, a in addrs.items() if a == addr]
            if not ids:
                continue
            for b in ids:
                del addrs[b]
            if not addrs:
                del self.broker_addr_table[name]
                for cluster, names in list(self.cluster_addr_table.items()):
                    names.discard(name)
                    if not names:
                        del self.cluster_addr_table[cluster]
                self._remove_topics_of(name)
            break

    def on_channel_destroy(self, channel) -> list[str]:
        """The connection ``channel`` closed: every broker that registered on it is dropped at once. Returns their
        addresses."""
        with self.lock:
            gone = [addr for addr, live in self.broker_live_table.items() if live.channel is channel]
            for addr in gone:
                self._remove_address(addr)
        for addr in gone:
            log.info("name server: the channel of broker %s closed, its routes are dropped", addr)
        return gone

    def scan_not_active_broker(self, now: float | None = None) -> list[str]:
        """RouteInfoManager.scanNotActiveBroker: drop brokers whose last registration is older than 120 s (never
        this process's own)."""
        now = time.monotonic() if now is None else now
        with self.lock:
            gone = [addr for addr, live in self.broker_live_table.items()
                    if live.channel is not None and live.last + BROKER_CHANNEL_EXPIRED_TIME < now]
            for addr in gone:
                self._remove_address(addr)
        for addr in gone:
            log.warning("name server: the broker channel expired, %s %dms", addr, BROKER_CHANNEL_EXPIRED_TIME * 1000)
        return gone

    def operate_write_perm(self, name: str, add: bool) -> int:
        """operateWritePermOfBroker: WIPE clears PERM_WRITE of ``name``'s queue data of every topic, ADD sets it
        to READ|WRITE; returns the number of topics changed."""
        count = 0
        with self.lock:
            for qd in self.topic_queue_table.values():
                q = qd.get(name)
                if q is not None:
                    q["perm"] = PERM_READ | PERM_WRITE if add else q["perm"] & ~PERM_WRITE
                    count += 1
        return count

    def pickup_topic_route_data(self, topic: str) -> dict | None:
        """TopicRouteData of ``topic``, None when no broker holds it."""
        with self.lock:
            qd = self.topic_queue_table.get(topic)
            if not qd:
                return None
            brokers = []
            for name in sorted(qd):
                data = self.broker_addr_table.get(name)
                if data is not None:
                    brokers.append({"brokerAddrs": {str(b): a for b, a in sorted(data["brokerAddrs"].items())},
                                    "brokerName": name, "cluster": data["cluster"]})
            if not brokers:
                return None
            return {"brokerDatas": brokers, "filterServerTable": {},
                    "queueDatas": [dict(qd[name]) for name in sorted(qd)]}

    def cluster_info(self) -> dict:
        """ClusterInfo: {"brokerAddrTable": {name: BrokerData}, "clusterAddrTable": {cluster: [names]}}."""
        with self.lock:
            return {"brokerAddrTable": {n: {"brokerAddrs": {str(b): a for b, a in sorted(d["brokerAddrs"].items())},
                                            "brokerName": n, "cluster": d["cluster"]}
                                        for n, d in sorted(self.broker_addr_table.items())},
                    "clusterAddrTable": {c: sorted(ns) for c, ns in sorted(self.cluster_addr_table.items())}}

    def topic_list(self) -> list[str]:
        with self.lock:
            return sorted(self.topic_queue_table)


class NameServer:
    """The embedded name server: a RouteInfoManager holding this broker, at its advertised address, and whatever
    brokers register here."""

    def __init__(self, broker, address: str):
        self.broker = broker
        self.address = address
        self.routes = RouteInfoManager()
        # Topics of the own broker changed since its entry was last brought up to date (None: every topic). The
        # topic table's change listener only records the name (it runs under the table's lock, in any thread);
        # the next read of the routes applies it.
        self._dirty: set[str] | None = None
        self._own_perm = None
        self._own_names: set[str] = set()
        self.ha_server_addr: str | None = None        # this broker's, once replication listens (set_ha_server_addr)
        broker.topic_config_manager.add_change_listener(self._topic_changed)

    def set_ha_server_addr(self, addr: str) -> None:
        """This broker's HA address (brokerIP2:haListenPort), which a slave registering here is answered with."""
        self.ha_server_addr = addr
        self._dirty = None

    def _topic_changed(self, topic: str | None) -> None:
        if topic is None:
            self._dirty = None
        elif self._dirty is not None:
            self._dirty.add(topic)

    def _sync_own(self) -> None:
        """Bring this broker's entry up to date: what changed in its topic table since the last read."""
        cfg = self.broker.config
        if self._dirty is not None and not self._dirty and cfg.broker_permission == self._own_perm:
            return
        with self.broker.topic_config_manager._lock:        # no change can slip between the names and the table
            dirty, self._dirty = self._dirty, set()
            if cfg.broker_permission != self._own_perm:
                dirty, self._own_perm = None, cfg.broker_permission
            version, table = _body.topic_config_wrapper(self.broker)
        name = cfg.broker_name
        if dirty is None:
            self.routes.register_broker(cfg.broker_cluster_name, self.address, name,
                                        _body.registered_broker_id(self.broker), self.ha_server_addr, version, None,
                                        any_id=True)
            gone = self._own_names - table.keys()
            self.routes.set_queue_data(name, table, gone)
            self._own_names = set(table)
        else:
            changed = {t: table[t] for t in dirty if t in table}
            gone = {t for t in dirty if t not in table}
            self.routes.set_queue_data(name, changed, gone)
            self._own_names = (self._own_names | changed.keys()) - gone

    def _read(self) -> None:
        self.routes.scan_not_active_broker()
        data = self.routes.broker_addr_table.get(self.broker.config.broker_name)
        if (self.address not in self.routes.broker_live_table or data is None
                or data["brokerAddrs"].get(_body.registered_broker_id(self.broker)) != self.address):
            self._dirty = None          # its entry was taken out (an UNREGISTER_BROKER naming its id): put it back
        self._sync_own()

    def route(self, topic: str) -> bytes | None:
        """TopicRouteData JSON of ``topic``, None when no broker has it."""
        self._read()
        data = self.routes.pickup_topic_route_data(topic)
        return None if data is None else _dumps(data)

    def cluster_info(self) -> bytes:
        self._read()
        return _dumps(self.routes.cluster_info())

    def topic_list(self) -> bytes:
        """TopicList JSON of every topic of every broker (system topics too, as the Java name server lists them)."""
        self._read()
        return _dumps({"topicList": self.routes.topic_list()})


# -- request handlers (RemotingConnection methods' shape: fn(connection, cmd)) -------------------------------------

def _fields(conn, cmd, *names) -> list[str] | None:
    """The header fields ``names`` (all @CFNotNull in 4.9.7's request headers), or None after answering
    SYSTEM_ERROR as decodeCommandCustomHeader's check does."""
    out = []
    for name in names:
        v = cmd.ext_fields.get(name)
        if v is None:
            conn.reply(cmd, SYSTEM_ERROR, remark=f"org.apache.rocketmq.remoting.exception.RemotingCommandException: "
                                                 f"the custom field <{name}> is null")
            return None
        out.append(v)
    return out


def _broker_id(conn, cmd, text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        conn.reply(cmd, SYSTEM_ERROR, remark=f"header field brokerId: {text!r} is not a number")
        return None


def register_broker(conn, cmd) -> None:
    """DefaultRequestProcessor.registerBrokerWithFilterServer: check bodyCrc32 (0: unchecked), read the body,
    register; the answer names the master of a slave's brokerName (masterAddr, haServerAddr)."""
    f = _fields(conn, cmd, "brokerName", "brokerAddr", "clusterName", "haServerAddr", "brokerId")
    if f is None:
        return
    name, addr, cluster, ha_addr, bid = f
    broker_id = _broker_id(conn, cmd, bid)
    if broker_id is None:
        return
    ext = cmd.ext_fields
    crc = ext.get("bodyCrc32") or "0"
    if crc != "0" and str(_body.body_crc32(cmd.body or b"")) != crc:
        log.warning("name server: REGISTER_BROKER from %s: crc32 not match", conn.peer)
        conn.reply(cmd, SYSTEM_ERROR, remark="crc32 not match")
        return
    try:
        version, table, _servers = _body.decode(cmd.body, (ext.get("compressed") or "").lower() == "true")
    except _body.RegisterBodyError as e:
        conn.reply(cmd, SYSTEM_ERROR, remark=f"Failed to decode RegisterBrokerBody: {e}")
        return
    names = conn.server.names
    names._read()           # this broker's own entry up to date first: a slave of it is answered with its address
    if addr == names.address:
        # this broker registering with its own name server (namesrvAddr naming --namesrv): its entry is kept from
        # its table, not from a connection that would take it out of the routes when it closes
        conn.reply(cmd, SUCCESS, body=b'{"table":{}}')
        return
    master, master_ha = names.routes.register_broker(cluster, addr, name, broker_id, ha_addr, version, table,
                                                     channel=conn)
    out = {}
    if master is not None:
        out = {"masterAddr": master, "haServerAddr": master_ha}
    # the body: the name server's ORDER_TOPIC_CONFIG KV list (none kept here)
    conn.reply(cmd, SUCCESS, out, body=b'{"table":{}}')


def query_data_version(conn, cmd) -> None:
    """QUERY_DATA_VERSION (322), DefaultRequestProcessor.queryBrokerTopicConfig: the header says ``changed``, the
    body is the dataVersion this name server holds for the broker (none when it does not know it)."""
    f = _fields(conn, cmd, "brokerName", "brokerAddr", "clusterName", "brokerId")
    if f is None or _broker_id(conn, cmd, f[3]) is None:
        return
    addr = f[1]
    try:
        version = json.loads(cmd.body or b"")
        if not isinstance(version, dict) or not all(type(version.get(k)) is int for k in ("counter", "timestamp")):
            raise ValueError("not an object with integer counter and timestamp")
    except ValueError as e:
        conn.reply(cmd, SYSTEM_ERROR, remark=f"QUERY_DATA_VERSION body: not a DataVersion ({e})")
        return
    names = conn.server.names
    names._read()
    if addr == names.address:
        # this broker asking its own name server: its entry follows its table (register_broker above), so the
        # version it holds is the table's own
        held = _body.topic_config_wrapper(names.broker)[0]
        changed = not same_version(held, version)
    else:
        changed, held = names.routes.query_data_version(addr, version)
    conn.reply(cmd, SUCCESS, {"changed": "true" if changed else "false"},
               body=None if held is None else _dumps(held))


def unregister_broker(conn, cmd) -> None:
    f = _fields(conn, cmd, "brokerName", "brokerAddr", "clusterName", "brokerId")
    if f is None:
        return
    name, addr, cluster, bid = f
    broker_id = _broker_id(conn, cmd, bid)
    if broker_id is None:
        return
    conn.server.names.routes.unregister_broker(cluster, addr, name, broker_id)
    conn.reply(cmd, SUCCESS)


def _write_perm(conn, cmd, add: bool) -> None:
    f = _fields(conn, cmd, "brokerName")
    if f is None:
        return
    names = conn.server.names
    names._read()
    count = names.routes.operate_write_perm(f[0], add)
    log.info("name server: %s write perm of broker[%s], client: %s, %d", "add" if add else "wipe", f[0], conn.peer,
             count)
    conn.reply(cmd, SUCCESS, {"addTopicCount" if add else "wipeTopicCount": str(count)})


def wipe_write_perm(conn, cmd) -> None:
    _write_perm(conn, cmd, False)


def add_write_perm(conn, cmd) -> None:
    _write_perm(conn, cmd, True)


HANDLERS = {
    REGISTER_BROKER: register_broker,
    UNREGISTER_BROKER: unregister_broker,
    QUERY_DATA_VERSION: query_data_version,
    WIPE_WRITE_PERM_OF_BROKER: wipe_write_perm,
    ADD_WRITE_PERM_OF_BROKER: add_write_perm,
}
