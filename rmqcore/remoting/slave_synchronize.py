"""SlaveSynchronize, both ends: the metadata a slave copies from its master over the remoting protocol, beside the
commitlog HA replicates (ha_service.py). RocketMQ 4.9.7's broker/.../slave/SlaveSynchronize.java and the four
AdminBrokerProcessor answers it asks for:

    GET_ALL_TOPIC_CONFIG (21)               TopicConfigSerializeWrapper: topicConfigTable + dataVersion
    GET_ALL_CONSUMER_OFFSET (43)            ConsumerOffsetSerializeWrapper: offsetTable {"topic@group": {0: 12}}
    GET_ALL_DELAY_OFFSET (45)               DelayOffsetSerializeWrapper: delayOffset.json's offsetTable {1: 0}
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201)  SubscriptionGroupWrapper: subscriptionGroupTable + dataVersion

Each answer is the manager's ``encode()`` (fastjson's compact text, bare integer keys), as the Java broker's.

The slave's side (``SlaveSynchronize``, a thread of `rmqcore serve` for brokerRole SLAVE): at start and every 10 s
it asks the master's remoting address for all four and applies them as SlaveSynchronize.syncAll does: the topic
table and the subscription groups replaced, with the master's data version, when that version differs from the
slave's; the consumer offsets put over the slave's (putAll) and persisted; delayOffset.json written as the master
sent it. The topic table is asked on the master's VIP channel (listenPort - 2, MixAll.brokerVIPChannel), the others
on its listen port, as BrokerOuterAPI asks them.

Where the master's remoting address comes from: RocketMQ's slave learns it from its name server registration
(RegisterBrokerResult.masterAddr) only; ``set_master_addr`` takes it from there. Until one is set it is derived
from the HA master address (haMasterAddress, listenPort + 1 of the master: the remoting port is one below), so a
slave given only haMasterAddress, with no name server, still copies its master's metadata (a Java slave does not).
A guessed address is trusted only if the broker there holds this broker's broker-name topic (every broker of a
master/slave group has the topic named as the group's brokerName): another broker's metadata is never copied.
"""
from __future__ import annotations

import logging
import os
import socket
import threading

from ..broker.data_version import DataVersion
from ..config_manager import file2string
from ..errors import RmqStoreError
from ..schedule import DELAY_OFFSET_FILE, _decode_delay_document, encode_delay_offsets, write_config_file
from ._remoting_codec import FrameDecoder
from .codes import (GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET, GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
                    GET_ALL_TOPIC_CONFIG, SUCCESS, SYSTEM_ERROR)
from .remoting_command import BROKER_VERSION, JSON, MAX_FRAME, RESPONSE_FLAG, RemotingCommand, encode_request

log = logging.getLogger(__name__)

PERIOD_S = 10.0                 # BrokerController.handleSlaveSynchronize: every 10 s
TIMEOUT_S = 3.0                 # BrokerOuterAPI's invokeSync timeout for the four


def vip_channel(addr: str) -> str:
    """MixAll.brokerVIPChannel(true, addr): the same host, port - 2."""
    host, _, port = addr.rpartition(":")
    return f"{host}:{int(port) - 2}"


# -- the master's answers (AdminBrokerProcessor) ----------------------------------------------------------------------

def _answer(conn, cmd, content: str | None, what: str) -> None:
    if not content:
        # AdminBrokerProcessor's answer when the manager encodes nothing
        conn.reply(cmd, SYSTEM_ERROR, remark=f"No {what} in this broker")
        return
    conn.reply(cmd, SUCCESS, body=content.encode("utf-8"))


def all_topic_config(conn, cmd) -> None:
    """GET_ALL_TOPIC_CONFIG: TopicConfigManager.encode() (the table and its dataVersion, compact)."""
    _answer(conn, cmd, conn.broker.topic_config_manager.encode(False), "topic")


def all_consumer_offset(conn, cmd) -> None:
    """GET_ALL_CONSUMER_OFFSET: ConsumerOffsetManager.encode()."""
    _answer(conn, cmd, conn.broker.consumer_offset_manager.encode(False), "consumer offset")


def all_subscription_group(conn, cmd) -> None:
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: SubscriptionGroupManager.encode()."""
    _answer(conn, cmd, conn.broker.subscription_group_manager.encode(False), "subscription group")


def delay_offset_content(store) -> str:
    """ScheduleMessageService.encode(): the delay levels' progress. The store's service holds it while it runs;
    with the service off (or on a slave) the delayOffset.json it would have loaded, else an empty table."""
    svc = getattr(store, "schedule_service", None)
    if svc is not None:
        while True:
            try:
                table = dict(svc.offset_table)     # the delivery thread moves it; a copy taken between its moves
                break
            except RuntimeError:
                continue
        return encode_delay_offsets(table, getattr(svc, "_document_rest", None), pretty=False)
    path = os.path.join(store.path, "config", DELAY_OFFSET_FILE)
    text = file2string(path)
    if text is None or not text.strip():
        return encode_delay_offsets({}, None, pretty=False)
    table, rest = _decode_delay_document(text, path)
    return encode_delay_offsets(table, rest, pretty=False)


def all_delay_offset(conn, cmd) -> None:
    """GET_ALL_DELAY_OFFSET."""
    try:
        content = delay_offset_content(conn.broker.store)
    except (RmqStoreError, OSError) as e:
        conn.reply(cmd, SYSTEM_ERROR, remark=f"delay offset: {e}")
        return
    _answer(conn, cmd, content, "delay offset")


HANDLERS = {
    GET_ALL_TOPIC_CONFIG: all_topic_config,
    GET_ALL_CONSUMER_OFFSET: all_consumer_offset,
    GET_ALL_DELAY_OFFSET: all_delay_offset,
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG: all_subscription_group,
}


# -- the slave's side ------------------------------------------------------------------------------------------------

class MasterCallError(Exception):
    """A request to the master failed: not answered, or answered with another code than SUCCESS."""


class _Channel:
    """One blocking remoting connection to the master: a request, its answer (BrokerOuterAPI's invokeSync)."""

    def __init__(self, addr: str, timeout: float = TIMEOUT_S):
        host, _, port = addr.rpartition(":")
        self.addr = addr
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        self.sock.settimeout(timeout)
        self.decoder = FrameDecoder(MAX_FRAME)
        self.opaque = 0

    def call(self, code: int) -> bytes:
        self.opaque += 1
        opaque = self.opaque
        self.sock.sendall(encode_request(RemotingCommand(code, "JAVA", BROKER_VERSION, opaque, 0, None, {}, JSON)))
        while True:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError(f"the master {self.addr} closed the connection")
            for c in self.decoder.feed(data):
                if c.flag & RESPONSE_FLAG and c.opaque == opaque:
                    if c.code != SUCCESS:
                        raise MasterCallError(f"request {code} to {self.addr}: answer {c.code} {c.remark}")
                    return c.body

    def close(self) -> None:
        self.sock.close()


class SlaveSynchronize(threading.Thread):
    """The slave's copy of its master's metadata, every ``period_s`` (first at start). ``last_sync`` counts the
    passes; ``errors`` holds the last pass's failures, by what failed (each is also logged)."""

    def __init__(self, broker, master_addr: str | None = None, period_s: float = PERIOD_S,
                 own_addr: str | None = None):
        super().__init__(name="SlaveSynchronize", daemon=True)
        self.broker = broker
        self.master_addr = master_addr
        self.own_addr = own_addr
        self.period_s = period_s
        self.passes = 0
        self.errors: dict[str, str] = {}
        self._stopped = threading.Event()
        self._channels: dict[str, _Channel] = {}

    def set_master_addr(self, addr: str | None) -> None:
        """The master's remoting address, as a name server registration answers it (RegisterBrokerResult)."""
        self.master_addr = addr

    def current_master_addr(self) -> str | None:
        if self.master_addr:
            return self.master_addr
        ha = getattr(self.broker.store, "ha_service", None)
        ha_addr = getattr(ha, "master_address", None) or self.broker.store_config.ha_master_address
        if not ha_addr:
            return None
        host, _, port = ha_addr.rpartition(":")
        return f"{host}:{int(port) - 1}"

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.sync_all()
            except Exception:                   # never end the thread: the next pass tries again
                log.exception("SlaveSynchronize: a pass failed")
            self._stopped.wait(self.period_s)
        for ch in self._channels.values():
            ch.close()

    def shutdown(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join()

    def _call(self, addr: str, code: int) -> bytes:
        ch = self._channels.get(addr)
        try:
            if ch is None:
                ch = self._channels[addr] = _Channel(addr)
            return ch.call(code)
        except (OSError, ValueError):
            # a broken or stale connection: closed, the next call connects again (the client's channel table)
            if ch is not None:
                ch.close()
            self._channels.pop(addr, None)
            raise

    def sync_all(self) -> None:
        """SlaveSynchronize.syncAll: topics, consumer offsets, delay offsets, subscription groups, each on its
        own (one failing does not keep the others)."""
        addr = self.current_master_addr()
        if addr is None or addr == self.own_addr:
            return
        errors = {}
        if not self.master_addr:
            # A guessed address (the HA port's neighbour) may be some other broker's: its metadata is taken only
            # if its topic table holds this broker's own broker-name topic, which every broker of the group has.
            try:
                self._check_guessed_master(addr)
            except Exception as e:
                errors["master"] = f"{type(e).__name__}: {e}"
                (log.debug if self.errors.get("master") == errors["master"] else log.error)(
                    "SlaveSynchronize: %s", errors["master"])
                self.errors = errors
                self.passes += 1
                return
        for name, step in (("topics", self.sync_topic_config), ("consumer offsets", self.sync_consumer_offset),
                           ("delay offsets", self.sync_delay_offset),
                           ("subscription groups", self.sync_subscription_group_config)):
            try:
                step(addr)
            except Exception as e:
                errors[name] = f"{type(e).__name__}: {e}"
                # said once while it lasts (a master down for an hour is not 360 errors of each kind)
                (log.debug if self.errors.get(name) == errors[name] else log.error)(
                    "SlaveSynchronize: %s from %s failed: %s", name, addr, errors[name])
        self.errors = errors
        self.passes += 1

    def _check_guessed_master(self, addr: str) -> None:
        name = self.broker.config.broker_name
        table, _version, _extra = self.broker.topic_config_manager.decode(
            self._text(self._call(vip_channel(addr), GET_ALL_TOPIC_CONFIG)))
        if name not in table:
            raise MasterCallError(f"the broker at {addr} (haMasterAddress's port - 1) has no topic {name!r}: not "
                                  f"this slave's master (brokerName {name}); its metadata is not copied (a name "
                                  "server registration gives the master's address)")

    @staticmethod
    def _text(body: bytes) -> str:
        return body.decode("utf-8")

    def sync_topic_config(self, addr: str) -> None:
        tcm = self.broker.topic_config_manager
        table, version, _extra = tcm.decode(self._text(self._call(vip_channel(addr), GET_ALL_TOPIC_CONFIG)))
        if tcm.replace_from_master(table, version if version is not None else DataVersion(timestamp=0)):
            log.info("Update slave topic config from master, %s", addr)

    def sync_consumer_offset(self, addr: str) -> None:
        com = self.broker.consumer_offset_manager
        table, _extra, _gen = com.decode(self._text(self._call(addr, GET_ALL_CONSUMER_OFFSET)))
        com.put_all(table)
        com.persist(force=False)            # written when the master's offsets moved (not every 10 s)
        log.debug("Update slave consumer offset from master, %s", addr)

    def sync_delay_offset(self, addr: str) -> None:
        store = self.broker.store
        text = self._text(self._call(addr, GET_ALL_DELAY_OFFSET))
        path = os.path.join(store.path, "config", DELAY_OFFSET_FILE)
        # a text the store could not read back is refused, not written; an unchanged one is not written again
        _decode_delay_document(text, f"{addr}'s GET_ALL_DELAY_OFFSET answer")
        if file2string(path) != text:
            write_config_file(path, text)
        log.debug("Update slave delay offset from master, %s", addr)

    def sync_subscription_group_config(self, addr: str) -> None:
        sgm = self.broker.subscription_group_manager
        table, version, _extra = sgm.decode(self._text(self._call(addr, GET_ALL_SUBSCRIPTIONGROUP_CONFIG)))
        if sgm.replace_from_master(table, version if version is not None else DataVersion(timestamp=0)):
            log.info("Update slave Subscription Group from master, %s", addr)
