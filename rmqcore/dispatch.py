"""ReputMessageService: follows the commitlog and keeps consume queues and index files up to date.

Each pass takes the records the writer appended from its dispatch ring (``_dispatch.drain_dispatch_ring``: each
record without its body, handed over on the put path) and scans committed commitlog bytes for any others
(``_dispatch.scan_for_dispatch``: records written before this process, or while the ring was full); both give
units and key hashes (GIL released for more than a few records). The units are split per queue
(``_dispatch.queue_runs``), each run appended with one copy, the key hashes handed to the index service in one call,
then readers waiting for new messages, if any, are woken (long polling).

Passes are paced as RocketMQ's (1 ms apart) while they take a few records each; a big pass (a fast producer) is
followed by the next at once, an empty one by a backoff during which a put wakes the thread. At a few thousand
single puts a second the cost is per pass, not per record: its wake-up (a timed sleep alone is 13-20 us of CPU on
a small VM) and its Python, which is why a pass touches as few objects as it can. A caller making most of the puts
on a thread of its own (the gRPC server's event loop) can run the passes there (``drive_externally``): the thread
then only sweeps behind it.
"""
from __future__ import annotations

import logging
import threading
import time

from ._dispatch import ScanBuffers, drain_dispatch_ring, ring_next_offset, scan_for_dispatch
from ._codec import RESULT_BLANK, RESULT_END, record_error
from ._commit_log import DispatchRing
from ._mapped_file import WakeEvent

log = logging.getLogger(__name__)


class ReputMessageService(threading.Thread):
    RING_SIZE = 4 * 1024 * 1024     # ~25,000 records of 1 KiB with a tag and a key: 25 ms of a full-speed writer

    def __init__(self, store, reput_from_offset: int, max_records: int = 32768, ring_size: int | None = None):
        super().__init__(name="ReputMessageService", daemon=True)
        self.store = store
        self.reput_from_offset = reput_from_offset
        self.max_records = max_records
        self._wake = WakeEvent()        # the writer pokes it in C after appends while this thread idles
        store.commit_log.writer.set_dispatcher(self._wake)
        self._stopped = threading.Event()
        self._topic_ids: dict = {}
        self._topics: list = []
        self._lock = threading.Lock()   # one pass at a time (the thread, a driver, or a caller draining on close)
        self._external = False          # a driver runs the passes after its puts (drive_externally)
        self.dispatched = 0
        self.passes = 0                 # passes the thread ran (productive or not): what each costs is per pass
        # Records kept in the commitlog but given no unit or key: a topic that is no safe directory name, or a
        # negative queue id (records RocketMQ's store can hold; put never writes them). Counted, first ones listed.
        self.undispatchable = 0
        self.undispatchable_offsets: list[int] = []
        self.last_error: str | None = None
        self.lag_ms = 0
        self._buffers = ScanBuffers(max_records, 4 * max_records)     # one set, reused by every pass
        # Reading 1 KiB records back out of the page cache (a fault per 16 pages, a cache miss per header and
        # per properties) was most of a pass; the writer hands each record over without its body instead.
        ring_size = self.RING_SIZE if ring_size is None else ring_size      # 0: none, every record scanned
        self.ring: DispatchRing | None = DispatchRing(ring_size) if ring_size else None
        store.commit_log.writer.set_dispatch_ring(self.ring)

    # -- the loop -----------------------------------------------------------------------------------------------

    def wakeup(self) -> None:
        self._wake.poke()

    def behind(self) -> int:
        return max(0, self.store.commit_log.max_offset - self.reput_from_offset)

    MAX_IDLE = 0.05
    PACE = 0.001        # RocketMQ's reput thread sleeps 1 ms between passes
    # A pass that took more records than this follows a fast producer: the next pass starts at once, as a sleep
    # would only add lag (and per record a big pass costs little). Up to this many, the next pass waits PACE.
    SMALL_PASS = 64
    # While a driver runs the passes (drive_externally), the thread only sweeps up what it left: puts made on other
    # threads than the driver's (a delay or timer delivery, a transaction check's commit), at most this late.
    SWEEP = 0.01

    def drive_externally(self, on: bool) -> None:
        """A caller that makes most of the puts runs the passes itself, on its own thread, soon after them
        (``try_reput``): the gRPC server's event loop, after its sends. There a pass costs a few us; on this thread
        it cost ~60 us of CPU in the server (its wake-up and the GIL taken from the loop, ~900 passes a second
        under load). Meanwhile this thread is not poked by puts and sweeps every SWEEP for the puts of others."""
        self._external = on
        self._wake.poke()        # take up the new pacing now

    def try_reput(self) -> int:
        """A pass by the driver: records dispatched, or -1 when this thread's pass runs (the driver looks again
        shortly; the running pass may have started before the driver's last puts). A failed pass is reported as
        the thread reports its own (``_failed``) and counts 0: the driver's next pass retries it."""
        if not self._lock.acquire(False):
            return -1
        try:
            return self._do_reput()
        except Exception as e:
            self._failed(e)
            return 0
        finally:
            self._lock.release()

    def _failed(self, e: Exception) -> None:
        # A pass failed (a consume-queue file it could not make): logged once per error, not at every retry;
        # runtime_info reports the last one. Called in the except clause.
        if self.last_error != repr(e):
            log.exception("dispatch failed; retrying from offset %d", self.reput_from_offset)
        self.last_error = repr(e)

    def run(self) -> None:
        idle = 0.0
        writer = self.store.commit_log.writer
        max_offset = self.store.commit_log.mapped_file_queue.get_max_offset
        wait = self._wake.wait
        stopped = self._stopped.is_set
        while not stopped():
            self.passes += 1
            try:
                n = self.do_reput()
            except Exception as e:  # keep the service alive; the store reports the error in runtime_info
                self._failed(e)
                self._stopped.wait(0.5)     # the pass is retried from the same offset (repeat checks skip the done)
                n = -1
            if n > self.SMALL_PASS:
                idle = 0.0
                continue
            if self._external:
                idle = 0.0
                wait(self.SWEEP)
                continue
            if n > 0:
                # A few records: the next pass in a millisecond, with what arrives meanwhile, and no empty pass
                # first: each pass costs its wake-up and the GIL taken from whoever runs, which at a few thousand
                # single puts a second was most of this thread's time (a pass of 1-8 records cost ~30 us, and an
                # empty one followed each). Not woken by puts meanwhile: a woken pass per put moved the cost into
                # the put (a poke, and the dispatcher taking the GIL right after it: +4-6 us a put at 1,000/s).
                idle = 0.0
                wait(self.PACE)
                continue
            # Nothing (or an error): sleep until a put pokes (the writer's ``dispatcher_idle``), backing off
            # 1 ms .. 50 ms while nothing comes (records appended but not yet committed, with write buffers or
            # SYNC_FLUSH, get no poke when they become readable: the first look is 1 ms away, as RocketMQ's);
            # each wake-up takes the GIL from whoever runs (reads and queries showed it in their p99).
            idle = min(idle * 2, self.MAX_IDLE) if idle else self.PACE
            seen = max_offset() if n == 0 else None
            writer.dispatcher_idle(True)
            # A put between the pass and the flag did not poke: then look again at once. (Not behind(): a pass
            # stuck at a bad record is always behind, and must still back off.)
            if seen is None or max_offset() == seen:
                wait(idle)
            writer.dispatcher_idle(False)

    def shutdown(self) -> None:
        # Drain what was written before stopping, so a clean close leaves consume queues and index complete.
        for _ in range(1000):
            try:
                if self.behind() == 0 or self.do_reput() == 0:
                    break
            except Exception as e:   # left for recovery at the next open, which re-dispatches
                log.error("dispatch could not finish before shutdown: %r", e)
                break
        self._stopped.set()
        self._wake.stop()
        if self.is_alive():
            self.join()

    def do_reput(self) -> int:
        """One pass up to the commitlog's readable end; returns how many records were dispatched."""
        with self._lock:
            return self._do_reput()

    UNDISPATCHABLE_LISTED = 16

    def _applied(self, batch) -> int:
        """Apply a batch; how many records it covered (dispatched and undispatchable)."""
        if batch.skipped:
            if self.undispatchable == 0 or batch.skipped_offsets[0] > self.undispatchable_offsets[-1]:
                room = self.UNDISPATCHABLE_LISTED - len(self.undispatchable_offsets)
                self.undispatchable_offsets.extend(batch.skipped_offsets[:max(room, 0)])
            self.undispatchable += batch.skipped
            log.warning("%d record(s) from commitlog offset %d on kept but not dispatched: topic no safe directory "
                        "name or negative queue id", batch.skipped, batch.skipped_offsets[0])
        if batch.n:
            self.store._apply_dispatch(batch)
            self.dispatched += batch.n
            self.lag_ms = max(0, int(time.time() * 1000) - batch.last_store_ts)
        return batch.n + batch.skipped

    @staticmethod
    def _not_yet(mf, pos: int, readable: int) -> bool:
        """Whether the record at file position ``pos`` is only cut by the readable end (its bytes arrive in pieces,
        a slave's appends) rather than damaged: it claims a size that runs past what is readable but fits the
        file. A master's writer publishes whole records only, so there this never holds at a real record."""
        if readable >= mf.file_size:
            return False
        if readable - pos < 4:
            return True
        claimed = ReputMessageService._size_at(mf, pos)
        return claimed is not None and claimed > 0 and readable < pos + claimed <= mf.file_size

    @staticmethod
    def _size_at(mf, pos: int) -> int | None:
        """The record size (the first 4 bytes, big-endian) of the record at ``pos`` of ``mf``, None past its data."""
        view = mf.select(pos, 4)
        if view is None:
            return None
        try:
            return int.from_bytes(view, "big", signed=True)
        finally:
            view.release()

    @staticmethod
    def _blank_misfit(mf, pos: int) -> str | None:
        """The end-of-file blank record at ``pos`` must pad the file to its very end: one that ends elsewhere was
        written with another file size (a slave whose mapped_file_size_commit_log differs from its master's), and
        skipping to this file's end would skip records. A message naming both, or None."""
        claimed = ReputMessageService._size_at(mf, pos)
        if claimed is None or pos + claimed == mf.file_size:
            return None
        return (f"the blank record at commitlog offset {mf.file_from_offset + pos} pads {claimed} bytes, to "
                f"{mf.file_from_offset + pos + claimed}, not to its file's end {mf.file_from_offset + mf.file_size}: "
                f"the log was written with another commitlog file size than this store's {mf.file_size}")

    def _do_reput(self) -> int:
        cl = self.store.commit_log
        mfq = cl.mapped_file_queue
        ring = self.ring
        total = 0
        while True:
            # The commitlog's last file, read once: its end is the readable end (cl.max_offset), and the next
            # records are nearly always in it (a pass of a few records paid more for the properties, the min
            # offset's lock and the file lookup than for its records).
            files = mfq._files
            if not files:
                return total
            mf = files[-1]
            if self.reput_from_offset >= mf.file_from_offset + mf.read_position:
                return total
            if self.reput_from_offset < mf.file_from_offset:
                first = files[0].file_from_offset
                if self.reput_from_offset < first:
                    log.warning("reput offset %d is below the commitlog's min offset %d: the gap is skipped",
                                self.reput_from_offset, first)
                    self.reput_from_offset = first
                mf = mfq.find_mapped_file_by_offset(self.reput_from_offset)
                if mf is None:
                    return total
            readable = mf.read_position
            end = -1
            if ring is not None:
                batch = drain_dispatch_ring(ring, self.reput_from_offset, mf.file_from_offset + readable,
                                            self.max_records, 4 * self.max_records, self._topic_ids, self._topics,
                                            self.store.delay_level_ms, self._buffers)
                if batch.n or batch.skipped:
                    total += self._applied(batch)
                    self.reput_from_offset = batch.end_offset
                    continue
                # The ring has nothing at this offset: scan the commitlog up to its next entry in this file.
                nxt = ring_next_offset(ring, self.reput_from_offset)
                if self.reput_from_offset < nxt <= mf.file_from_offset + readable:
                    end = nxt - mf.file_from_offset
            view = mf.select(0, readable)
            if view is None:
                return total
            try:
                batch = scan_for_dispatch(view, mf.file_from_offset, self.reput_from_offset - mf.file_from_offset,
                                          end, self.max_records, 4 * self.max_records, False, self._topic_ids,
                                          self._topics, self.store.delay_level_ms, self._buffers)
            finally:
                view.release()
            taken = self._applied(batch)
            total += taken
            self.reput_from_offset = batch.end_offset
            if batch.code == RESULT_BLANK:
                bad = self._blank_misfit(mf, batch.end_offset - mf.file_from_offset)
                if bad:
                    if self.last_error != bad:
                        log.error("dispatch stops: %s", bad)
                    self.last_error = bad
                    return total
                self.reput_from_offset = mf.file_from_offset + mf.file_size
                continue
            if batch.code == RESULT_END:
                if taken == 0:
                    return total
                continue
            if batch.code < 0 and self._not_yet(mf, batch.end_offset - mf.file_from_offset, readable):
                # A slave's record whose first bytes came from the master and the rest not yet
                # (MessageStore.append_to_commit_log): dispatched once it is whole, never taken for damage.
                return total
            if batch.code < 0:
                err = record_error(batch.code, batch.end_offset, mf.file_name)
                if self.last_error != str(err):
                    log.error("dispatch stops at a bad record: %s", err)
                self.last_error = str(err)
                return total
            # code OK: the batch was full, go on.
