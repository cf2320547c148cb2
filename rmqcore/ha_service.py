"""HAService: master/slave replication of the commitlog, RocketMQ 4.9.7's classic protocol (store/ha/HAService.java,
HAConnection.java; unchanged as 5.x DefaultHAService), so an rmqcore master serves a Java slave and an rmqcore slave
follows a Java master.

The wire: plain TCP on the master's haListenPort. The slave writes 8-byte big-endian max physical offsets (at
connect, after each append, every haSendHeartbeatInterval); the master reads the last whole 8 bytes, the first value
being where to start (0: the start of the master's last commitlog file). The master writes frames
``[phyOffset 8][size 4][size bytes]``: at most haTransferBatchSize bytes of its commitlog, never across a file end,
not aligned to records; ``size`` 0 is a heartbeat, sent when idle for haSendHeartbeatInterval. Either side closes a
connection silent for haHousekeepingInterval.

Threads, as RocketMQ's: the master's ``AcceptSocketService`` (accepts), per slave an ``HAConnection`` with a
``ReadSocketService`` (offset reports) and a ``WriteSocketService`` (frames, zero-copy slices of the mapped files
written with sendmsg: no per-record work), and ``GroupTransferService`` (SYNC_MASTER puts waiting for a slave);
the slave's ``HAClient`` (connect, report, append through MessageStore.append_to_commit_log, reconnect).

Beyond RocketMQ, so that a replica never silently diverges: a master refuses a slave that reports an offset past
its own end or a negative one (its log was truncated behind the slave, or the slave holds another log), telling it
with a heartbeat frame at the master's own end, its writer's last frame, before it closes (a Java slave then logs
"master pushed offset not equal" and closes too). 4.9.7's ReadSocketService closes only on a later report past
getMaxPhyOffset; a first one it takes as the place to start, waits there and, once its log has grown past it, sends
its own bytes from that offset, which the slave appends as if they continued its log. And an rmqcore slave
refuses, and stops replicating, when a frame does not continue its log or the first bytes after its restart are not
a record of its own log at that offset.
"""
from __future__ import annotations

import logging
import select
import socket
import struct
import threading
import time
from concurrent.futures import Future

from .errors import ReplicaError
from .status import PutStatus

log = logging.getLogger(__name__)

HEADER = struct.Struct(">qi")           # masterPhyOffset, bodySize
REPORT = struct.Struct(">q")            # the slave's max offset
REFUSAL_SEND_S = 2.0                    # how long a refused slave's last frame may take before the socket closes
_MAGIC_V1, _MAGIC_V2, _BLANK = 0xDAA320A7, 0xDAA320A8, 0xCBD43194 - (1 << 32)


def _ms() -> int:
    return int(time.monotonic() * 1000)


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"HA address {text!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


# -- master ------------------------------------------------------------------------------------------------------------

class HAService:
    """The master's side: listens on ``host:port`` (port 0: any free one; ``port`` attribute after start)."""

    def __init__(self, store, host: str = "127.0.0.1", port: int | None = None):
        self.store = store
        self.config = store.config
        self.host = host
        self.port = self.config.ha_listen_port if port is None else port
        self.connections: list[HAConnection] = []
        self._lock = threading.Lock()
        self.push2slave_max_offset = 0
        self._acked = threading.Condition()
        self._stopped = threading.Event()
        self._sock: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self.transfer = GroupTransferService(self)

    def start(self) -> "HAService":
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(16)
        sock.settimeout(0.5)
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, name="AcceptSocketService", daemon=True)
        self._acceptor.start()
        self.transfer.start()
        return self

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, addr = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                if not self._stopped.is_set():
                    log.exception("HA accept failed")
                return
            log.info("HA: slave %s connected", addr)
            c = HAConnection(self, conn, f"{addr[0]}:{addr[1]}")
            with self._lock:
                self.connections.append(c)
            c.start()

    # -- what puts ask ----------------------------------------------------------------------------------------------

    @property
    def connection_count(self) -> int:
        return len(self.connections)

    def is_slave_ok(self, master_put_where: int) -> bool:
        """HAService.isSlaveOK: a slave is connected and less than haSlaveFallbehindMax behind."""
        return (len(self.connections) > 0
                and master_put_where - self.push2slave_max_offset < self.config.ha_slave_fallbehind_max)

    def notify_transfer_some(self, offset: int) -> None:
        """A slave acknowledged ``offset``: push2SlaveMaxOffset moves up, waiting puts look."""
        with self._acked:
            if offset > self.push2slave_max_offset:
                self.push2slave_max_offset = offset
                self._acked.notify_all()
        # the put_async requests it covers are completed here, in the slave's ReadSocketService thread: one thread
        # hop less per SYNC_MASTER send than waking the GroupTransferService for them (which keeps the deadlines)
        self.transfer.complete_acked()

    def wait_transfer(self, end: int, timeout_s: float) -> bool:
        """Block until a slave acknowledged ``end`` (True) or ``timeout_s`` passed (False)."""
        deadline = time.monotonic() + timeout_s
        with self._acked:
            while self.push2slave_max_offset < end:
                left = deadline - time.monotonic()
                if left <= 0 or self._stopped.is_set():
                    return False
                self._acked.wait(left)
        return True

    def remove_connection(self, c: "HAConnection") -> None:
        with self._lock:
            if c in self.connections:
                self.connections.remove(c)

    def runtime_info(self) -> dict:
        return {"role": "master", "listen": f"{self.host}:{self.port}", "push2slave_max_offset":
                self.push2slave_max_offset, "slaves": [c.info() for c in list(self.connections)]}

    def shutdown(self) -> None:
        self._stopped.set()
        if self._sock is not None:
            self._sock.close()
        if self._acceptor is not None:
            self._acceptor.join()
        for c in list(self.connections):
            c.shutdown()
        self.transfer.shutdown()
        with self._acked:
            self._acked.notify_all()


class HAConnection:
    """One slave's connection: its ReadSocketService and WriteSocketService threads."""

    def __init__(self, service: HAService, sock: socket.socket, addr: str):
        self.service = service
        self.sock = sock
        self.addr = addr
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.slave_request_offset = -1
        self.slave_ack_offset = -1
        self._stopped = threading.Event()
        self._wake = threading.Event()          # new data (a put waiting for this slave) or a report
        # The master's end, once the reader refused the slave: the writer's last frame, sent between whole frames
        # (the writer alone writes to the socket, so a refusal never lands inside a data frame).
        self._refuse_at: int | None = None
        self._reader = threading.Thread(target=self._read_loop, name="ReadSocketService", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name="WriteSocketService", daemon=True)

    def start(self) -> None:
        self._writer.start()        # first: the reader, which may end at once, joins it
        self._reader.start()

    def info(self) -> dict:
        return {"address": self.addr, "request_offset": self.slave_request_offset, "ack_offset": self.slave_ack_offset}

    def _stop(self) -> None:
        if not self._stopped.is_set():
            self._stopped.set()
            self._wake.set()
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.service.remove_connection(self)

    def shutdown(self) -> None:
        self._stop()
        for t in (self._reader, self._writer):
            if t.is_alive() and t is not threading.current_thread():
                t.join()
        self.sock.close()

    def _read_loop(self) -> None:
        cfg = self.service.config
        store = self.service.store
        # The socket's timeout is the writer's (one timeout per socket object): the reader waits with select, so a
        # slave that pauses reading is not dropped by a reader's short timeout cutting the writer's sendall.
        buf = b""
        last_read = _ms()
        try:
            while not self._stopped.is_set():
                data = self.sock.recv(65536) if select.select([self.sock], [], [], 1.0)[0] else None
                if data == b"":
                    log.info("HA: slave %s closed the connection", self.addr)
                    return
                if data:
                    last_read = _ms()
                    buf += data
                    whole = len(buf) - len(buf) % 8
                    if whole:
                        offset = REPORT.unpack_from(buf, whole - 8)[0]
                        buf = buf[whole:]
                        master_max = store.commit_log.max_offset
                        if offset > master_max or offset < 0:
                            # RocketMQ closes here too ("request offset greater than local commitLog offset"),
                            # and only after the first report; a first one past the end would have it wait at
                            # the slave's offset and later send it this log's bytes from there: a diverged replica.
                            log.error("HA: slave %s reports offset %d, past this master's commitlog end %d: its log "
                                      "is not this master's (the master's was truncated behind it, or it replicated "
                                      "another one); connection closed", self.addr, offset, master_max)
                            # the writer's last frame tells the slave where this log ends
                            self._refuse_at = master_max
                            self._wake.set()
                            self._writer.join(REFUSAL_SEND_S)
                            return
                        self.slave_ack_offset = offset
                        if self.slave_request_offset < 0:
                            self.slave_request_offset = offset
                            log.info("HA: slave %s requests offset %d", self.addr, offset)
                            self._wake.set()
                        self.service.notify_transfer_some(offset)
                if _ms() - last_read > cfg.ha_housekeeping_interval:
                    log.warning("HA housekeeping: slave %s silent for %d ms, connection closed", self.addr,
                                _ms() - last_read)
                    return
        except OSError as e:
            if not self._stopped.is_set():
                log.info("HA: slave %s: %s", self.addr, e)
        finally:
            self._stop()
            self._writer.join()         # woken by _stop; then the socket is no one's
            self.sock.close()

    def _write_loop(self) -> None:
        service = self.service
        cfg = service.config
        cl = service.store.commit_log
        file_size = cl.mapped_file_queue.mapped_file_size
        batch = cfg.ha_transfer_batch_size
        heartbeat = cfg.ha_send_heartbeat_interval
        sock = self.sock
        sock.settimeout(cfg.ha_housekeeping_interval / 1000)   # a slave that reads nothing for that long is gone
        next_from = -1
        last_write = _ms()
        try:
            while not self._stopped.is_set():
                if self._refuse_at is not None:
                    self._send(HEADER.pack(self._refuse_at, 0), None)
                    return
                if self.slave_request_offset < 0:
                    self._wake.wait(0.01)
                    self._wake.clear()
                    continue
                if next_from < 0:
                    if self.slave_request_offset == 0:
                        # A fresh slave gets the master's last file onward, not its whole history (WriteSocketService).
                        master_offset = cl.max_offset
                        next_from = max(0, master_offset - master_offset % file_size)
                    else:
                        next_from = self.slave_request_offset
                    log.info("HA: transfer to slave %s from offset %d (it asked for %d)", self.addr, next_from,
                             self.slave_request_offset)
                view = cl.get_data(next_from, -1) if next_from < cl.max_offset else None
                if view is not None and len(view):
                    size = min(len(view), batch)
                    part = view[:size]
                    self._send(HEADER.pack(next_from, size), part)
                    part.release()
                    view.release()
                    next_from += size
                    last_write = _ms()
                    continue
                if view is not None:
                    view.release()
                if _ms() - last_write > heartbeat:
                    self._send(HEADER.pack(next_from, 0), None)
                    last_write = _ms()
                # RocketMQ's writer waits 100 ms unless a SYNC_MASTER put wakes it.
                self._wake.wait(0.1)
                self._wake.clear()
        except OSError as e:
            if not self._stopped.is_set():
                log.info("HA: slave %s: %s", self.addr, e)
        finally:
            self._stop()

    def _send(self, header: bytes, body) -> None:
        if body is None:
            self.sock.sendall(header)
            return
        # One system call for header and body in the common case; the rest (a full socket buffer) with sendall.
        sent = self.sock.sendmsg([header, body])
        if sent < len(header):
            self.sock.sendall(header[sent:])
            sent = len(header)
        if sent - len(header) < len(body):
            self.sock.sendall(body[sent - len(header):])

    def wake(self) -> None:
        self._wake.set()


class GroupTransferService(threading.Thread):
    """SYNC_MASTER puts waiting for a slave's acknowledgement without a thread of their own (put_async, aput):
    each request is completed when push2SlaveMaxOffset covers it, or with FLUSH_SLAVE_TIMEOUT at its deadline."""

    def __init__(self, service: HAService):
        super().__init__(name="GroupTransferService", daemon=True)
        self.service = service
        self._requests: list = []               # (end, deadline, callback)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()

    def put_request(self, end: int, timeout_s: float, callback) -> None:
        with self._lock:
            self._requests.append((end, time.monotonic() + timeout_s, callback))
        for c in list(self.service.connections):
            c.wake()
        self._wake.set()

    def wakeup(self) -> None:
        if self._requests:
            self._wake.set()

    def complete_acked(self) -> None:
        """Complete, in the caller's thread, the requests an acknowledgement covers (and any past its deadline)."""
        if self._requests:
            self._complete(False)

    def run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(0.01 if self._requests else 1.0)      # RocketMQ's looks every 10 ms; idle, rarely
            self._wake.clear()
            self._complete(False)
        self._complete(True)

    def _complete(self, all_: bool) -> None:
        acked = self.service.push2slave_max_offset
        now = time.monotonic()
        done = []
        with self._lock:
            keep = []
            for r in self._requests:
                if r[0] <= acked or now >= r[1] or all_:
                    done.append((r, r[0] <= acked))
                else:
                    keep.append(r)
            self._requests = keep
        for (end, _d, cb), ok in done:
            try:
                cb(ok)
            except Exception:
                log.exception("SYNC_MASTER completion failed")

    def shutdown(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self.is_alive():
            self.join()


class ReplicaPuts:
    """SYNC_MASTER's puts (CommitLog.submitReplicaRequest): each put, after its flush (``inner``: the store's
    SYNC_FLUSH DurablePuts, or its writer), answers once a slave acknowledged its record: PUT_OK, or
    FLUSH_SLAVE_TIMEOUT after sync_flush_timeout, or SLAVE_NOT_AVAILABLE at once when no slave is connected or the
    slave is haSlaveFallbehindMax or more behind. A message with WAIT "false" waits for nothing, as in RocketMQ."""

    def __init__(self, store, inner):
        self.store = store
        self.inner = inner
        self.timeout_s = store.config.sync_flush_timeout / 1000

    def _service(self):
        ha = self.store.ha_service
        return ha if isinstance(ha, HAService) else None

    def settle(self, result, wait: bool = True):
        """The status a stored put answers with, after waiting for a slave (a PutResult or a list of them)."""
        last = result[-1] if isinstance(result, list) else result
        if last is None or last.status not in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT) or not wait:
            return result
        end = last.commitlog_offset + last.wrote_bytes
        ha = self._service()
        if ha is None or not ha.is_slave_ok(end):
            status = PutStatus.SLAVE_NOT_AVAILABLE
        else:
            for c in list(ha.connections):
                c.wake()
            status = PutStatus.PUT_OK if ha.wait_transfer(end, self.timeout_s) else PutStatus.FLUSH_SLAVE_TIMEOUT
        return self._with(result, status)

    @staticmethod
    def _with(result, status):
        # CommitLog.asyncPutMessage's thenCombine: a replica status other than PUT_OK is the answer, over a flush's
        # FLUSH_DISK_TIMEOUT too (the record is stored either way)
        if status is PutStatus.PUT_OK:
            return result
        stored = (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT)
        if isinstance(result, list):
            return [r.replace_status(status) if r.status in stored else r for r in result]
        return result.replace_status(status) if result.status in stored else result

    def put(self, msg):
        return self.settle(self.inner.put(msg), msg.properties.get("WAIT") != "false" if msg.properties else True)

    def put_async(self, msg) -> Future:
        out: Future = Future()
        wait = msg.properties.get("WAIT") != "false" if msg.properties else True
        first = self.inner.put_async(msg) if hasattr(self.inner, "put_async") else None
        if first is None:
            self._then(self.inner.put(msg), wait, out.set_result)
        else:
            first.add_done_callback(lambda f: self._then(f.result(), wait, out.set_result))
        return out

    def aput(self, msg):
        import asyncio
        loop = asyncio.get_running_loop()
        out = loop.create_future()
        fut = self.put_async(msg)
        fut.add_done_callback(lambda f: loop.call_soon_threadsafe(
            lambda: out.done() or out.set_result(f.result())))
        return out

    def _then(self, result, wait: bool, done) -> None:
        """Complete ``done`` with ``result`` once a slave has it, without blocking this thread."""
        if not wait or result.status not in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT):
            done(result)
            return
        end = result.commitlog_offset + result.wrote_bytes
        ha = self._service()
        if ha is None or not ha.is_slave_ok(end):
            done(self._with(result, PutStatus.SLAVE_NOT_AVAILABLE))
            return
        ha.transfer.put_request(end, self.timeout_s, lambda ok: done(
            result if ok else self._with(result, PutStatus.FLUSH_SLAVE_TIMEOUT)))


# -- slave -------------------------------------------------------------------------------------------------------------

class HAClient(threading.Thread):
    """The slave's side: connects to the master's HA address, reports, appends, reconnects after errors. Stops for
    good (``error`` says why) when the master's bytes do not continue this store's log."""

    RECONNECT_S = 5.0           # RocketMQ's HAClient waits 5 s after a failed connect

    def __init__(self, store, master_address: str | None = None):
        super().__init__(name="HAClient", daemon=True)
        self.store = store
        self.config = store.config
        self.master_address = master_address or self.config.ha_master_address or None
        if self.master_address:
            parse_address(self.master_address)
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._sock: socket.socket | None = None
        self.error: str | None = None
        self.connected = False
        self.connects = 0
        self.reported = 0
        # After the store's open its log ends on a whole record (recovery, MessageStore._cut_unconfirmed_replica_tail;
        # the dispatcher has taken everything): the first bytes the master sends there must then be a record written
        # at that very offset (a record stores its physical offset), else the master holds another log.
        self._check_first = True

    def update_master_address(self, address: str) -> None:
        """RocketMQ's updateHaMasterAddress: connect there (now, if not connected)."""
        parse_address(address)
        if address != self.master_address:
            log.info("HA: master address %s -> %s", self.master_address, address)
            self.master_address = address
            self._close()
        self._wake.set()

    def runtime_info(self) -> dict:
        return {"role": "slave", "master": self.master_address, "connected": self.connected, "connects": self.connects,
                "reported_offset": self.reported, "max_offset": self.store.commit_log.max_offset, "error": self.error}

    def run(self) -> None:
        while not self._stopped.is_set() and self.error is None:
            addr = self.master_address
            if not addr:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            try:
                self._session(addr)
            except ReplicaError as e:
                self.error = str(e)
                log.error("HA: replication from %s stopped: %s", addr, e)
            except OSError as e:
                if not self._stopped.is_set():
                    log.info("HA: master %s: %s; reconnecting in %.0f s", addr, e, self.RECONNECT_S)
            except Exception as e:       # the store closed under it, or a bug: stop, and say why
                if not self._stopped.is_set():
                    self.error = f"{type(e).__name__}: {e}"
                    log.exception("HA: replication from %s stopped", addr)
            finally:
                self._close()
            if not self._stopped.is_set() and self.error is None:
                self._wake.wait(self.RECONNECT_S)
                self._wake.clear()

    def _close(self) -> None:
        s, self._sock = self._sock, None
        self.connected = False
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _report(self, sock, offset: int) -> None:
        sock.sendall(REPORT.pack(offset))
        self.reported = offset

    def _session(self, addr: str) -> None:
        cfg = self.config
        store = self.store
        host, port = parse_address(addr)
        sock = socket.create_connection((host, port), timeout=3)
        self._sock = sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(1.0)
        self.connected = True
        self.connects += 1
        log.info("HA: connected to master %s", addr)
        # Where to start, at once (RocketMQ's HAClient waits for its first heartbeat interval).
        self._report(sock, store.commit_log.mapped_file_queue.get_max_wrote_position())
        last_write = last_read = _ms()
        buf = bytearray(4 * 1024 * 1024)
        mv = memoryview(buf)
        have = 0
        while not self._stopped.is_set() and self._sock is sock:
            try:
                n = sock.recv_into(mv[have:])
            except socket.timeout:
                n = -1
            if n == 0:
                raise ConnectionError("the master closed the connection")
            if n > 0:
                last_read = _ms()
                have += n
                pos = 0
                while have - pos >= HEADER.size:
                    offset, size = HEADER.unpack_from(buf, pos)
                    if size < 0 or size > len(buf) - HEADER.size:
                        raise ReplicaError(f"master frame at offset {offset} claims {size} bytes: not the HA protocol")
                    mine = store.commit_log.mapped_file_queue.get_max_wrote_position()
                    if mine != 0 and offset != mine:
                        raise ReplicaError(
                            f"master sends offset {offset}, this slave's commitlog ends at {mine}: "
                            + ("the master's log ends behind this slave's (truncated, or another log); "
                               if offset < mine else "the master's bytes would leave a gap; ")
                            + "replication stopped rather than diverge", offset, mine)
                    if have - pos < HEADER.size + size:
                        break
                    body = mv[pos + HEADER.size:pos + HEADER.size + size]
                    if size:
                        if self._check_first and mine != 0 and store.reput.reput_from_offset == mine:
                            self._check_record_start(offset, body)
                        self._check_first = False
                        store.append_to_commit_log(offset, body)
                    body.release()
                    pos += HEADER.size + size
                if pos:
                    buf[:have - pos] = buf[pos:have]
                    have -= pos
                end = store.commit_log.mapped_file_queue.get_max_wrote_position()
                if end > self.reported:
                    self._report(sock, end)
                    last_write = _ms()
            now = _ms()
            if now - last_write > cfg.ha_send_heartbeat_interval:
                self._report(sock, store.commit_log.mapped_file_queue.get_max_wrote_position())
                last_write = now
            if now - last_read > cfg.ha_housekeeping_interval:
                raise ConnectionError(f"master silent for {now - last_read} ms (haHousekeepingInterval)")

    @staticmethod
    def _check_record_start(offset: int, body) -> None:
        """The first bytes at a log's end that is a record boundary must start a record written at that offset (a
        record stores its own physical offset): else the master holds another log."""
        if len(body) < 8:
            return
        size, magic = struct.unpack_from(">ii", body, 0)
        if magic == _BLANK:
            return
        if magic & 0xFFFFFFFF in (_MAGIC_V1, _MAGIC_V2) and len(body) >= 36:
            phys = struct.unpack_from(">q", body, 28)[0]
            if phys == offset:
                return
            raise ReplicaError(f"the master's record at offset {offset} says it was written at {phys}: the master "
                               "holds another log; replication stopped rather than diverge", offset, offset)
        if magic & 0xFFFFFFFF not in (_MAGIC_V1, _MAGIC_V2):
            raise ReplicaError(f"the master's bytes at offset {offset} do not start a record (magic "
                               f"{magic & 0xFFFFFFFF:#x}): the master holds another log; replication stopped rather "
                               "than diverge", offset, offset)

    def shutdown(self) -> None:
        self._stopped.set()
        self._wake.set()
        self._close()
        if self.is_alive():
            self.join()
