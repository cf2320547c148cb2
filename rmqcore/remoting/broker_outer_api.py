"""BrokerOuterAPI: this broker registering with the cluster's name servers (rocketmq-all-4.9.7
``broker/.../out/BrokerOuterAPI.java`` and ``BrokerController.registerBrokerAll``/``start``/``shutdown``).

    api = BrokerOuterAPI(broker, ["10.0.0.1:9876", "10.0.0.2:9876"], broker_addr="10.0.0.5:10911",
                         ha_server_addr="10.0.0.5:10912")
    await api.start()        # registered with every name server that answered
    ...
    await api.stop()         # UNREGISTER_BROKER to each, connections closed

REGISTER_BROKER (103) goes to every name server at start, after every change of the topic table or the broker's
permission (the topic config manager's change listener: a table's dataVersion changes with each), and every
``registerNameServerPeriod`` (clamped to 10..60 s, as BrokerController schedules it), over one connection per name
server kept open: a name server drops a broker whose registering connection closes. The header and body are what
4.9.7 sends (RegisterBrokerRequestHeader with ``compressed`` and ``bodyCrc32``; register_broker_body.py). A name
server that cannot be reached or closes the connection (restarted, say) is one log line; the connection is tried
again after 1, 2, 4 ... s (at most the period) and the broker registers again as soon as it is back, where the Java
broker waits for its next period. Nothing else waits on a name server: sends and pulls go on.

``forceRegister=false`` (BrokerConfig.forceRegister, default true): the periodic round asks the name server
QUERY_DATA_VERSION (322) with the topic table's dataVersion first and sends REGISTER_BROKER only when it answers
``changed`` or holds another version, or the query fails (BrokerOuterAPI.needRegister); the name server takes an
unchanged query as the broker's heartbeat (DefaultRequestProcessor.queryBrokerTopicConfig). Registrations after a
change, at start and after a lost connection are always full, as BrokerController's registerBrokerAll(.., true).
Java asks every name server and registers with all of them when any says changed; here each name server's task
decides for its own name server, which leaves every name server with the same table and timestamp.

Everything runs on the serving event loop: one task per name server, no thread.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re

from . import register_broker_body as _body
from ._remoting_codec import FrameDecoder, encode_header
from .. import fastjson
from ..broker.data_version import same_version
from .codes import QUERY_DATA_VERSION, REGISTER_BROKER, SUCCESS, UNREGISTER_BROKER
from .remoting_command import JSON, RESPONSE_FLAG

log = logging.getLogger(__name__)

UNREGISTER_TIMEOUT_S = 3.0          # BrokerOuterAPI.unregisterBroker's invokeSync timeout
FIRST_RETRY_S = 1.0
COALESCE_S = 0.05


def parse_namesrv_addr(text: str, what: str = "namesrvAddr") -> list[str]:
    """"a:9876;b:9876" → ["a:9876", "b:9876"]; ValueError naming ``what`` and the entry that is not HOST:PORT
    (BrokerStartup refuses such a value before starting)."""
    out = []
    for addr in (text or "").split(";"):
        addr = addr.strip()
        if not addr:
            continue
        m = re.fullmatch(r"\[?([^\[\]]+?)\]?:(\d+)", addr)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise ValueError(f"{what}: {addr!r} is not HOST:PORT (the Name Server Address list is "
                             f"\"127.0.0.1:9876;192.168.0.1:9876\")")
        out.append(addr)
    if not out:
        raise ValueError(f"{what}: {text!r} names no name server")
    return out


def register_period_s(period_ms: int) -> float:
    """BrokerController.start: Math.max(10000, Math.min(registerNameServerPeriod, 60000)) ms."""
    return max(10_000, min(period_ms, 60_000)) / 1000


class _Namesrv:
    """One name server: its connection (opened on demand, kept), and the requests waiting for an answer."""

    def __init__(self, addr: str):
        self.addr = addr
        host, _, port = addr.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.reading: asyncio.Task | None = None
        self.waiting: dict[int, asyncio.Future] = {}
        self.opaque = 0
        self.down = False            # said once when it went away; said again when it is back
        self.on_lost = None          # called when an open connection closes (the name server went away)

    async def connect(self, timeout: float) -> None:
        if self.writer is not None and not self.writer.is_closing():
            return
        self.reader, self.writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), timeout)
        self.reading = asyncio.ensure_future(self._read(self.reader))

    async def _read(self, reader) -> None:
        decoder = FrameDecoder()
        error: BaseException = ConnectionError(f"name server {self.addr} closed the connection")
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                for cmd in decoder.feed(data):
                    if cmd.flag & RESPONSE_FLAG:
                        fut = self.waiting.pop(cmd.opaque, None)
                        if fut is not None and not fut.done():
                            fut.set_result(cmd)
        except asyncio.CancelledError:
            raise
        except Exception as e:          # a reset, or a frame the codec refuses: the connection is done
            error = e
        finally:
            # only this connection's end: one this side closed (writer gone) or a newer connection are not a loss
            if self.reader is reader and self.writer is not None:
                self.close(error)
                if self.on_lost is not None:
                    self.on_lost()

    def close(self, error: BaseException | None = None) -> None:
        if self.writer is not None:
            self.writer.close()
        self.writer = None
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(error or ConnectionError(f"connection to name server {self.addr} closed"))
        self.waiting.clear()

    async def call(self, code: int, ext: dict, body: bytes, timeout: float):
        await self.connect(timeout)
        self.opaque += 1
        fut = asyncio.get_running_loop().create_future()
        self.waiting[self.opaque] = fut
        self.writer.write(encode_header(JSON, code, self.opaque, 0, None, ext, len(body)) + body)
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self.waiting.pop(self.opaque, None)


class BrokerOuterAPI:
    def __init__(self, broker, namesrv_addrs: list[str], broker_addr: str, ha_server_addr: str, *,
                 period_s: float | None = None, timeout_ms: int | None = None, compressed: bool | None = None,
                 on_master=None):
        cfg = broker.config
        self.broker = broker
        self.namesrvs = [_Namesrv(a) for a in namesrv_addrs]
        self.broker_addr = broker_addr
        self.ha_server_addr = ha_server_addr
        self.period_s = period_s if period_s is not None else register_period_s(cfg.register_name_server_period)
        self.timeout_s = (timeout_ms if timeout_ms is not None else cfg.register_broker_timeout_mills) / 1000
        self.compressed = cfg.compressed_register if compressed is None else compressed
        # A slave learns its master from the answer (RegisterBrokerResult's masterAddr, haServerAddr):
        # on_master(master_addr, ha_server_addr) is called when they change.
        self.on_master = on_master
        self.master = (None, None)
        self.registrations = 0            # answered registrations, over all name servers
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task] = []
        self._changed: list[asyncio.Event] = []
        self._stopping = False

    # -- identity and body ------------------------------------------------------------------------------------

    @property
    def broker_id(self) -> int:
        return _body.registered_broker_id(self.broker)

    def _header(self, body: bytes) -> dict:
        cfg = self.broker.config
        return {"brokerName": cfg.broker_name, "brokerAddr": self.broker_addr, "clusterName": cfg.broker_cluster_name,
                "haServerAddr": self.ha_server_addr, "brokerId": str(self.broker_id),
                "compressed": "true" if self.compressed else "false", "bodyCrc32": str(_body.body_crc32(body))}

    def request(self) -> tuple[dict, bytes]:
        """The REGISTER_BROKER header and body of the broker as it is now."""
        return self._request()[1:]

    def _request(self) -> tuple[dict, dict, bytes]:
        version, table = _body.topic_config_wrapper(self.broker)
        body = _body.encode(version, table, (), self.compressed)
        return version, self._header(body), body

    # -- lifecycle --------------------------------------------------------------------------------------------

    async def start(self) -> "BrokerOuterAPI":
        """Register with every name server (BrokerController.start's registerBrokerAll, which waits for the
        answers up to the timeout), then keep registering."""
        self._loop = asyncio.get_running_loop()
        # the events first: a change made while the first registrations are on their way (the loop serves
        # requests meanwhile) is registered right after them, not a period later
        for ns in self.namesrvs:
            ev = asyncio.Event()
            self._changed.append(ev)
            # a name server that closes the connection (a restart) has forgotten this broker: register again now
            ns.on_lost = ev.set
        self.broker.topic_config_manager.add_change_listener(self._topic_changed)
        header, body = self.request()
        await asyncio.gather(*(self._register(ns, header, body) for ns in self.namesrvs))
        for ns, ev in zip(self.namesrvs, self._changed):
            self._tasks.append(asyncio.ensure_future(self._keep_registered(ns, ev)))
        return self

    async def stop(self) -> None:
        """BrokerController.shutdown's unregisterBrokerAll: UNREGISTER_BROKER to each name server reached, then
        the connections close."""
        self._stopping = True
        listeners = self.broker.topic_config_manager._change_listeners
        if self._topic_changed in listeners:
            listeners.remove(self._topic_changed)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(self._unregister(ns) for ns in self.namesrvs))
        for ns in self.namesrvs:
            ns.on_lost = None
            ns.close()
            if ns.reading is not None:
                ns.reading.cancel()

    def _topic_changed(self, _topic) -> None:
        # the topic config manager's listener: under its lock, in whatever thread changed the table
        loop = self._loop
        if loop is not None and not self._stopping and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._wake)
            except RuntimeError:            # the loop closed meanwhile
                pass

    def _wake(self) -> None:
        for ev in self._changed:
            ev.set()

    async def _keep_registered(self, ns: _Namesrv, changed: asyncio.Event) -> None:
        """One name server: register every period and after each change; when it is unreachable, try again after
        1, 2, 4 ... s (at most the period)."""
        retry = FIRST_RETRY_S
        while True:
            if ns.down:
                wait = retry
                retry = min(retry * 2, self.period_s)
            else:
                wait = self.period_s
                retry = FIRST_RETRY_S
            periodic = False
            try:
                await asyncio.wait_for(changed.wait(), wait)
                # a burst of changes (topics auto-created one after another) is registered once, a moment later
                await asyncio.sleep(COALESCE_S)
            except asyncio.TimeoutError:
                periodic = True
            changed.clear()
            version, header, body = self._request()
            # a name server that is down gets the full registration (Java: a failed query counts as changed)
            # forceRegister read each round, as BrokerController's scheduled task reads brokerConfig
            query = periodic and not self.broker.config.force_register and not ns.down
            if query and not await self._need_register(ns, version):
                continue
            await self._register(ns, header, body)

    async def _need_register(self, ns: _Namesrv, version: dict) -> bool:
        """BrokerOuterAPI.needRegister for one name server: QUERY_DATA_VERSION with this dataVersion; changed when
        the answer says so or carries another version, or the query failed; an answer other than SUCCESS counts as
        unchanged, as 4.9.7 reads it (its switch adds nothing for other codes)."""
        cfg = self.broker.config
        ext = {"brokerName": cfg.broker_name, "brokerAddr": self.broker_addr, "clusterName": cfg.broker_cluster_name,
               "brokerId": str(self.broker_id)}
        try:
            answer = await ns.call(QUERY_DATA_VERSION, ext, fastjson.dumps(version).encode("utf-8"), self.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("query data version from name server %s failed (%s: %s)", ns.addr, type(e).__name__, e)
            ns.close()
            return True
        if answer.code != SUCCESS:
            return False
        changed = (answer.ext_fields or {}).get("changed", "true").lower() != "false"
        if answer.body:
            try:
                held = json.loads(answer.body)
            except ValueError:
                held = None
            if not isinstance(held, dict) or not same_version(held, version):
                changed = True
        return changed

    async def _register(self, ns: _Namesrv, header: dict, body: bytes) -> bool:
        try:
            answer = await ns.call(REGISTER_BROKER, header, body, self.timeout_s)
            if answer.code != SUCCESS:
                raise ConnectionError(f"answered code {answer.code}: {answer.remark}")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            ns.close()
            if not ns.down:
                ns.down = True
                log.warning("registering with name server %s failed (%s: %s); trying again, serving on",
                            ns.addr, type(e).__name__, e)
            return False
        if ns.down:
            ns.down = False
            log.warning("registered with name server %s again", ns.addr)
        self.registrations += 1
        ext = answer.ext_fields or {}
        master = (ext.get("masterAddr") or None, ext.get("haServerAddr") or None)
        if master != self.master and master[0] is not None:
            self.master = master
            if self.on_master is not None:
                self.on_master(*master)
        return True

    async def _unregister(self, ns: _Namesrv) -> None:
        if ns.down:
            return
        cfg = self.broker.config
        ext = {"brokerName": cfg.broker_name, "brokerAddr": self.broker_addr, "clusterName": cfg.broker_cluster_name,
               "brokerId": str(self.broker_id)}
        try:
            answer = await ns.call(UNREGISTER_BROKER, ext, b"", UNREGISTER_TIMEOUT_S)
            if answer.code != SUCCESS:
                log.warning("unregistering from name server %s: code %d %s", ns.addr, answer.code, answer.remark)
        except Exception as e:
            log.warning("unregistering from name server %s failed: %s: %s", ns.addr, type(e).__name__, e)
