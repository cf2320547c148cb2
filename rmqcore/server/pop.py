"""Pop consumption (RocketMQ 5's PopMessageProcessor, AckMessageProcessor, ChangeInvisibleTimeProcessor,
PopReviveService and ConsumerOrderInfoManager) over a Broker, with its state in a journal.

A consumer group pops messages from every queue of a topic; each popped message is invisible to the group for its
invisible time and comes back (its delivery attempt counted) unless acked before that. Past the group's max
delivery attempts (retryMaxTimes + 1, 17 by default) an expired message goes to ``%DLQ%group`` instead. For a FIFO
group a queue with unacked messages gives nothing else until they are acked or expire (then the same messages come
back first, in order), as ConsumerOrderInfoManager blocks the queue of the last orderly batch.

Where the state lives, and why not RocketMQ's revive topic: RocketMQ writes a CK record per popped batch and an ACK
record per ack into the commitlog (rmq_sys_REVIVE_LOG), and PopReviveService re-reads them to find what expired.
That costs two commitlog records per message for the life of the commitlog, and a restart must re-scan the revive
queue from its last checkpoint. Here each (group, topic, queue) keeps a cursor (``next``: never popped below is
nothing), a watermark (``start``: everything below is done) and the in-flight and done offsets between them; every
change is appended to ``config/popJournal.log`` with one write(2) per RPC (in the page cache, so it survives a
SIGKILL of the server as the commitlog's pages do), and the file is rewritten as a snapshot of the live state
(temp file, fsync, rename) once it grows past ``COMPACT_BYTES``. A restart replays the snapshot and what followed:
an unacked message comes back after its invisible time as it would have; an ack journaled before a kill stays
acked. The watermark is also committed as the group's consumer offset (consumerOffset.json), so tools see progress.

consumerOffset.json is also the state another broker keeps: after a swap to a Java broker and back, its offsets
are newer than the journal, and the journal must yield to them (issue 36). Its own texts of that file are older
than the journal instead (they are persisted every 5 s; the journal at every RPC), and then the journal wins. To
tell the two apart the journal records, in ``G`` lines, the generation (a digest of the text,
``consumer_offset_manager.generation_of``) of every text of consumerOffset.json this server wrote or started
from, before that text is written (the last KEEP_GENERATIONS of them). At start, a file whose generation the journal does not know was written by
someone else since: for each queue the file covers with an offset other than the journal's watermark, the file
wins (past the watermark: what lies below is done, acks above it kept; below: a reset, delivered again from
there). A journal without any ``G`` line (written before this rule) yields only to an offset past its watermark,
which no text of its own can hold.
"""
from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from hashlib import sha256

log = logging.getLogger(__name__)

JOURNAL = "popJournal.log"
COMPACT_BYTES = 8 * 1024 * 1024
HANDLE_VERSION = "r2"
# The key of the receipt handles' MACs, beside the journal: handles outlive a restart as the pop state does.
HANDLE_KEY = "popHandleKey"
HANDLE_KEY_BYTES = 32
MAC_HEX = 32                # 128 bits of HMAC-SHA256, in hex
# consumerOffset.json generations the journal keeps: the last 64 texts (5 min of 5 s persists; its .bak among them)
KEEP_GENERATIONS = 64


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ReceiptHandle:
    """What the server needs back from an ack or a change of invisible time: the queue and offset of the
    message, the delivery's nonce (a later delivery of the same message has another), when it was popped and for
    how long. Text form: ``r2:{queue_id}:{offset}:{nonce}:{pop_time}:{invisible_ms}:{mac}``, the MAC an
    HMAC-SHA256 under the server's key (PopService.handle_key) of those fields with the group and topic it was
    issued to. The fields are readable (as RocketMQ's ExtraInfo is) but not forgeable: only a handle this server
    issued, to that group for that topic and unchanged, acks a message or changes its invisible time (a guessed
    nonce, or an expired handle given a later pop time, is refused)."""

    __slots__ = ("queue_id", "offset", "nonce", "pop_time", "invisible_ms")

    def __init__(self, queue_id: int, offset: int, nonce: int, pop_time: int, invisible_ms: int):
        self.queue_id = queue_id
        self.offset = offset
        self.nonce = nonce
        self.pop_time = pop_time
        self.invisible_ms = invisible_ms

    def _fields(self) -> str:
        return f"{HANDLE_VERSION}:{self.queue_id}:{self.offset}:{self.nonce}:{self.pop_time}:{self.invisible_ms}"

    @staticmethod
    def _mac(key: bytes, group: str, topic: str, fields: str) -> str:
        return hmac.new(key, f"{group}\n{topic}\n{fields}".encode(), sha256).hexdigest()[:MAC_HEX]

    def encode(self, key: bytes, group: str, topic: str) -> str:
        fields = self._fields()
        return f"{fields}:{self._mac(key, group, topic, fields)}"

    @classmethod
    def decode(cls, text: str, key: bytes, group: str, topic: str) -> "ReceiptHandle":
        """The handle ``text`` is, if this server (``key``) issued it to ``group`` for ``topic``; else ValueError."""
        parts = text.split(":") if isinstance(text, str) else []
        if len(parts) != 7 or parts[0] != HANDLE_VERSION:
            raise ValueError(f"receipt handle {str(text)[:64]!r} is not one this server issued")
        fields, _, mac = text.rpartition(":")
        if not hmac.compare_digest(mac.encode("utf-8", "replace"),
                                   cls._mac(key, group, topic, fields).encode()):
            raise ValueError(f"receipt handle {text[:64]!r} is not one this server issued to group {group!r} "
                             f"for topic {topic!r} (its MAC does not match)")
        try:
            q, off, nonce, pop_time, inv = (int(p) for p in parts[1:6])
        except ValueError:
            raise ValueError(f"receipt handle {text[:64]!r} has a non-numeric field") from None
        if q < 0 or off < 0 or inv < 0 or pop_time < 0:
            raise ValueError(f"receipt handle {text[:64]!r} has a negative field")
        return cls(q, off, nonce, pop_time, inv)

    @property
    def expired_at(self) -> int:
        return self.pop_time + self.invisible_ms


class QueueState:
    """One group's pop state in one queue."""

    __slots__ = ("start", "next", "inflight", "done")

    def __init__(self, start: int):
        self.start = start                       # every offset below is done
        self.next = start                        # no offset at or past this was ever popped
        self.inflight: dict[int, list] = {}      # offset -> [deadline_ms, attempt, nonce]
        self.done: set[int] = set()              # acked (or filtered out) offsets in [start, next)

    def mark_done(self, offset: int) -> bool:
        """Returns True when the watermark moved."""
        self.inflight.pop(offset, None)
        if offset < self.start:
            return False
        if offset >= self.next:
            # filtered out beyond the cursor: everything up to it was looked at
            self.next = offset + 1
        self.done.add(offset)
        moved = False
        while self.start in self.done:
            self.done.discard(self.start)
            self.start += 1
            moved = True
        if moved and self.start > self.next:
            self.next = self.start
        return moved


class PopJournal:
    """Append-only lines; a torn last line (a kill mid-write) is ignored on replay."""

    def __init__(self, path: str):
        self.path = path
        self.fd = -1
        self.size = 0
        # append and rewrite: the loop's RPCs, and the offsets' persisting thread recording a generation
        self.lock = threading.RLock()

    def open(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size

    def append(self, lines: list[str]) -> None:
        if not lines:
            return
        data = ("\n".join(lines) + "\n").encode()
        with self.lock:
            if self.fd < 0:
                raise OSError(f"{self.path} is closed")
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
            self.size += len(data)

    def read(self) -> list[list[str]]:
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return []
        out = []
        for line in raw.split(b"\n")[:-1] if not raw.endswith(b"\n") else raw.split(b"\n"):
            if not line:
                continue
            try:
                out.append(line.decode().split("\t"))
            except UnicodeDecodeError:
                log.warning("%s: a line that is not UTF-8 skipped", self.path)
        return out

    def rewrite(self, lines: list[str]) -> None:
        with self.lock:
            self._rewrite(lines)

    def _rewrite(self, lines: list[str]) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(("\n".join(lines) + ("\n" if lines else "")).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dfd = os.open(os.path.dirname(self.path), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        if self.fd >= 0:
            os.close(self.fd)
        self.open()

    def close(self) -> None:
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


class Popped:
    """One delivery: the stored message, its receipt handle, the attempt number (1 for the first delivery)."""
    __slots__ = ("message", "handle", "attempt")

    def __init__(self, message, handle: ReceiptHandle, attempt: int):
        self.message = message
        self.handle = handle
        self.attempt = attempt


class PopService:
    """Pop state of every group, over ``broker``. Not thread-safe: the server calls it from its event loop."""

    def __init__(self, broker, *, clock=now_ms, compact_bytes: int = COMPACT_BYTES):
        self.broker = broker
        self.clock = clock
        self.compact_bytes = compact_bytes
        self.states: dict[tuple[str, str, int], QueueState] = {}
        self.journal = PopJournal(os.path.join(broker.store.path, "config", JOURNAL))
        self._nonce = 0
        self._rotor = 0
        self.dlq_listener = None           # fn(group, topic, n): the server's events
        self.handle_key: bytes | None = None     # the receipt handles' MAC key (load)
        # generations of consumerOffset.json this state is in step with, oldest first (the G lines)
        self.generations: list[str] = []

    # -- state ----------------------------------------------------------------------------------------------

    def _load_handle_key(self) -> bytes:
        """config/popHandleKey: made once (random, owner-only), kept so that handles issued before a restart
        still ack after it, as the journal keeps their deliveries in flight."""
        path = os.path.join(os.path.dirname(self.journal.path), HANDLE_KEY)
        try:
            with open(path, "rb") as f:
                key = f.read()
            if len(key) == HANDLE_KEY_BYTES:
                return key
            log.warning("%s: %d bytes, not %d: a new key made (handles issued before it are refused)", path,
                        len(key), HANDLE_KEY_BYTES)
        except FileNotFoundError:
            pass
        key = os.urandom(HANDLE_KEY_BYTES)
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        return key

    def load(self) -> None:
        os.makedirs(os.path.dirname(self.journal.path), exist_ok=True)
        self.handle_key = self._load_handle_key()
        records = self.journal.read()
        for rec in records:
            try:
                self._replay(rec)
            except (ValueError, IndexError):
                log.warning("%s: a malformed line skipped: %r", self.journal.path, "\t".join(rec)[:200])
        self._yield_to_newer_offsets(bool(records))
        self.journal.open()
        self._clamp_to_queues()
        com = self.broker.consumer_offset_manager
        if com.generation is not None:
            self._note_generation(com.generation)
        self.compact()
        com.persist_listener = self._record_generation

    def _note_generation(self, gen: str) -> None:
        if gen in self.generations:
            self.generations.remove(gen)
        self.generations.append(gen)
        del self.generations[:-KEEP_GENERATIONS]

    def _record_generation(self, gen: str) -> None:
        """consumerOffset.json is about to be written with a text of generation ``gen`` (the persisting thread):
        journaled first, so a kill between the two leaves the file's text known to the journal."""
        with self.journal.lock:
            if self.journal.fd < 0:     # closed: the file written now is judged offset by offset at the next start
                return
            self.journal.append([f"G\t{gen}"])
            self._note_generation(gen)

    def _yield_to_newer_offsets(self, had_journal: bool) -> None:
        """The committed offsets of consumerOffset.json win over the journal's watermarks where the file was
        written by someone else since the journal last knew it (the module's docstring says why and how)."""
        com = self.broker.consumer_offset_manager
        if not had_journal or com.loaded_generation is None or com.loaded_generation in self.generations:
            return
        known = bool(self.generations)
        changed = []
        for (group, topic, qid), st in self.states.items():
            committed = com.query_offset(group, topic, qid)
            if committed < 0 or committed == st.start or (not known and committed < st.start):
                continue
            changed.append(f"{topic}/{qid}@{group} {st.start}->{committed}")
            if committed < st.start:            # a reset: everything from there is to be delivered again
                self.states[(group, topic, qid)] = QueueState(committed)
                continue
            st.inflight = {o: v for o, v in st.inflight.items() if o >= committed}
            st.done = {o for o in st.done if o >= committed}
            st.start = committed
            while st.start in st.done:
                st.done.discard(st.start)
                st.start += 1
            st.next = max(st.next, st.start)
        if changed:
            log.warning("%s was written by another broker after %s: its committed offsets win for %d queue(s): %s",
                        com.config_file_path(), self.journal.path, len(changed), ", ".join(changed[:20])
                        + (" ..." if len(changed) > 20 else ""))

    def _clamp_to_queues(self) -> None:
        """A queue that ends below a group's cursor had its tail cut by recovery (records never flushed before a
        power loss; a SIGKILL keeps them): what is stored there from now on was never delivered, so the cursor
        moves back to the queue's end."""
        store = self.broker.store
        store.wait_dispatched()
        for (group, topic, qid), st in self.states.items():
            high = max(0, store.max_offset(topic, qid))
            if st.next <= high:
                continue
            log.warning("%s/%d ends at %d, below group %s's cursor %d: popping from %d", topic, qid, high, group,
                        st.next, high)
            st.inflight = {o: v for o, v in st.inflight.items() if o < high}
            st.done = {o for o in st.done if o < high}
            st.next = high
            st.start = min(st.start, high)

    def _replay(self, rec: list[str]) -> None:
        if rec[0] == "G":
            self._note_generation(rec[1])
            return
        kind, group, topic, qid = rec[0], rec[1], rec[2], int(rec[3])
        key = (group, topic, qid)
        if kind == "S":
            st = QueueState(int(rec[4]))
            st.next = max(st.start, int(rec[5]))
            self.states[key] = st
            return
        st = self.states.get(key)
        if st is None:
            st = self.states[key] = QueueState(int(rec[4]))
        off = int(rec[4])
        if kind == "P":
            if off >= st.start and off not in st.done:
                st.inflight[off] = [int(rec[6]), int(rec[5]), int(rec[7])]
                st.next = max(st.next, off + 1)
                self._nonce = max(self._nonce, int(rec[7]))
        elif kind == "A":
            st.mark_done(off)
        else:
            raise ValueError(kind)

    def compact(self) -> None:
        with self.journal.lock:         # no generation recorded between the snapshot's G lines and its rename
            self._compact()

    def _compact(self) -> None:
        lines = [f"G\t{gen}" for gen in self.generations]
        for (group, topic, qid), st in self.states.items():
            lines.append(f"S\t{group}\t{topic}\t{qid}\t{st.start}\t{st.next}")
            for off in sorted(st.done):
                lines.append(f"A\t{group}\t{topic}\t{qid}\t{off}")
            for off, (deadline, attempt, nonce) in sorted(st.inflight.items()):
                lines.append(f"P\t{group}\t{topic}\t{qid}\t{off}\t{attempt}\t{deadline}\t{nonce}")
        self.journal.rewrite(lines)

    def close(self) -> None:
        if self.journal.fd >= 0:
            # The offsets first (their generation journaled), so the file the broker leaves is one the journal
            # knows; then nothing more is recorded: a later text of the file is judged at the next start.
            try:
                self.broker.consumer_offset_manager.persist(force=False)
            except Exception as e:
                log.error("persisting consumer offsets before the pop state: %s", e)
            self.broker.consumer_offset_manager.persist_listener = None
            self.compact()
            self.journal.close()

    def _state(self, group: str, topic: str, qid: int) -> QueueState:
        key = (group, topic, qid)
        st = self.states.get(key)
        if st is None:
            # A group new to this queue starts at its committed offset, else at the queue's first message (as
            # PopMessageProcessor's init offset for a queue whose first message is still there).
            committed = self.broker.query_offset(group, topic, qid)
            start = committed if committed >= 0 else max(0, self.broker.store.min_offset(topic, qid))
            st = self.states[key] = QueueState(start)
        else:
            low = self.broker.store.min_offset(topic, qid)
            if st.next < low:                       # files cleaned under the cursor
                for off in [o for o in st.inflight if o < low]:
                    del st.inflight[off]
                st.done = {o for o in st.done if o >= low}
                st.start = max(st.start, low)
                st.next = max(st.next, low)
        return st

    def _committed(self, group: str, topic: str, qid: int, st: QueueState) -> None:
        try:
            self.broker.consumer_offset_manager.commit_offset(group, topic, qid, st.start)
        except Exception:           # the journal is the record; the offset file is for tools
            log.debug("offset commit failed", exc_info=True)

    def _flush(self, lines: list[str]) -> None:
        self.journal.append(lines)
        if self.journal.size > self.compact_bytes:
            self.compact()

    # -- pop ------------------------------------------------------------------------------------------------

    def pop(self, group: str, topic: str, queue_ids: list[int], max_count: int, invisible_ms: int, *, fifo: bool,
            max_attempts: int, tags=None, matcher=None) -> list[Popped]:
        """Up to ``max_count`` deliveries from the queues (starting at a rotating one): expired in-flight
        messages first (or to the DLQ past ``max_attempts``), then new ones. ``tags``: the store's tag filter;
        ``matcher``: fn(message_ext) -> bool for SQL filters. Filtered-out messages are done for the group."""
        now = self.clock()
        out: list[Popped] = []
        lines: list[str] = []
        n = len(queue_ids)
        if n == 0:
            return out
        self._rotor = (self._rotor + 1) % n
        for i in range(n):
            if len(out) >= max_count:
                break
            qid = queue_ids[(self._rotor + i) % n]
            st = self._state(group, topic, qid)
            moved = False
            if st.inflight:
                expired = sorted(o for o, v in st.inflight.items() if v[0] <= now)
                if fifo and len(expired) < len(st.inflight):
                    continue                            # the queue's orderly batch is still invisible
                for off in expired:
                    if len(out) >= max_count:
                        break
                    entry = st.inflight[off]
                    msg = self._read_one(topic, qid, off)
                    if msg is None:                     # gone (cleaned): nothing to redeliver
                        moved |= st.mark_done(off)
                        lines.append(f"A\t{group}\t{topic}\t{qid}\t{off}")
                        continue
                    if entry[1] >= max_attempts:
                        self._to_dlq(group, msg)
                        moved |= st.mark_done(off)
                        lines.append(f"A\t{group}\t{topic}\t{qid}\t{off}")
                        continue
                    out.append(self._deliver(group, topic, qid, st, off, msg, entry[1] + 1, now, invisible_ms,
                                             lines))
                if fifo and st.inflight:
                    if moved:
                        self._committed(group, topic, qid, st)
                    continue
            want = max_count - len(out)
            if want > 0:
                moved |= self._pop_new(group, topic, qid, st, want, now, invisible_ms, tags, matcher, out, lines)
            if moved:
                self._committed(group, topic, qid, st)
        self._flush(lines)
        return out

    def _read_one(self, topic, qid, off):
        r = self.broker.store.get_messages("", topic, qid, off, 1)
        if r.messages and r.messages[0].queue_offset == off:
            return r.messages[0]
        return None

    def _pop_new(self, group, topic, qid, st, want, now, invisible_ms, tags, matcher, out, lines) -> bool:
        moved = False
        while want > 0:
            start = st.next
            r = self.broker.store.get_messages(group, topic, qid, start, min(want, 32), tags)
            got = {m.queue_offset: m for m in r.messages}
            end = r.next_begin_offset
            if end <= start and not got:
                break
            for off in range(start, end):
                m = got.get(off)
                if m is None or (matcher is not None and not matcher(m)):
                    moved |= st.mark_done(off)
                    lines.append(f"A\t{group}\t{topic}\t{qid}\t{off}")
                    continue
                out.append(self._deliver(group, topic, qid, st, off, m, 1, now, invisible_ms, lines))
                want -= 1
            st.next = max(st.next, end)
            if not r.messages and end > start:
                continue                                # a stretch of filtered-out messages: read on
            if len(r.messages) == 0 or want <= 0:
                break
        return moved

    def _deliver(self, group, topic, qid, st, off, msg, attempt, now, invisible_ms, lines) -> Popped:
        self._nonce += 1
        nonce = self._nonce
        deadline = now + invisible_ms
        st.inflight[off] = [deadline, attempt, nonce]
        if off >= st.next:
            st.next = off + 1
        lines.append(f"P\t{group}\t{topic}\t{qid}\t{off}\t{attempt}\t{deadline}\t{nonce}")
        return Popped(msg, ReceiptHandle(qid, off, nonce, now, invisible_ms), attempt)

    def _to_dlq(self, group: str, msg) -> None:
        """The message goes to %DLQ%group (the broker's send-back with a negative level, as PopReviveService
        does once reconsume times reach the max)."""
        self.broker.send_back(msg, group, delay_level=-1)
        if self.dlq_listener is not None:
            self.dlq_listener(group, msg.topic, 1)

    # -- ack, change invisible time, DLQ -------------------------------------------------------------------------

    def _inflight_entry(self, group, topic, handle: ReceiptHandle):
        st = self.states.get((group, topic, handle.queue_id))
        if st is None:
            return None, None
        entry = st.inflight.get(handle.offset)
        if entry is None or entry[2] != handle.nonce:
            return st, None
        return st, entry

    def ack(self, group: str, topic: str, handle: ReceiptHandle) -> str | None:
        """None when acked (or already done: an ack is idempotent); an error text when the handle has expired
        (the proxy's INVALID_RECEIPT_HANDLE)."""
        now = self.clock()
        if handle.expired_at <= now:
            return "receipt handle has expired"
        st, entry = self._inflight_entry(group, topic, handle)
        if entry is None:
            return None
        if st.mark_done(handle.offset):
            self._committed(group, topic, handle.queue_id, st)
        self._flush([f"A\t{group}\t{topic}\t{handle.queue_id}\t{handle.offset}"])
        return None

    def change_invisible(self, group: str, topic: str, handle: ReceiptHandle, invisible_ms: int):
        """→ (new handle, None) or (None, error text)."""
        now = self.clock()
        if handle.expired_at <= now:
            return None, "receipt handle has expired"
        st, entry = self._inflight_entry(group, topic, handle)
        if entry is None:
            return None, "the message of this receipt handle is not in flight (acked or delivered again)"
        self._nonce += 1
        entry[0] = now + invisible_ms
        entry[2] = self._nonce
        self._flush([f"P\t{group}\t{topic}\t{handle.queue_id}\t{handle.offset}\t{entry[1]}\t{entry[0]}\t{entry[2]}"])
        return ReceiptHandle(handle.queue_id, handle.offset, self._nonce, now, invisible_ms), None

    def release(self, group: str, topic: str, handles: list[ReceiptHandle]) -> int:
        """Make deliveries the consumer never got visible again at once (the proxy's nack when writing them to the
        stream failed). Returns how many were still in flight."""
        now = self.clock()
        lines = []
        for h in handles:
            st, entry = self._inflight_entry(group, topic, h)
            if entry is None:
                continue
            entry[0] = now
            lines.append(f"P\t{group}\t{topic}\t{h.queue_id}\t{h.offset}\t{entry[1]}\t{now}\t{entry[2]}")
        self._flush(lines)
        return len(lines)

    def forward_to_dlq(self, group: str, topic: str, handle: ReceiptHandle) -> str | None:
        st, entry = self._inflight_entry(group, topic, handle)
        if entry is None:
            return "the message of this receipt handle is not in flight (acked or delivered again)"
        msg = self._read_one(topic, handle.queue_id, handle.offset)
        if msg is not None:
            self._to_dlq(group, msg)
        if st.mark_done(handle.offset):
            self._committed(group, topic, handle.queue_id, st)
        self._flush([f"A\t{group}\t{topic}\t{handle.queue_id}\t{handle.offset}"])
        return None

    # -- reads ------------------------------------------------------------------------------------------------

    def inflight(self, group: str) -> dict[tuple[str, int], int]:
        return {(t, q): len(st.inflight) for (g, t, q), st in self.states.items() if g == group and st.inflight}

    def next_expiry(self) -> int | None:
        best = None
        for st in self.states.values():
            for deadline, _a, _n in st.inflight.values():
                if best is None or deadline < best:
                    best = deadline
        return best
