"""SYNC_FLUSH and SYNC_MASTER sends answered when the store's put completes, not from a thread that waits for it.

RocketMQ's SendMessageProcessor answers a send from the CompletableFuture of DefaultMessageStore.asyncPutMessage
(4.9.7 asyncSendMessage, handlePutMessageResultFuture): no broker thread waits for the flush or the slave. Here the
loop runs Broker.send_async (the checks, then MessageStore.put_async: the append, done at once) and the answer goes
out once the Future completes — in the group commit's completer thread (SYNC_FLUSH, rmqcore._flush.FlushedFutures)
or the GroupTransferService's (SYNC_MASTER, rmqcore.ha_service). Those threads only queue the completion here; the
loop is woken once for all the completions queued before it runs (one flush or one slave acknowledgement covers
many sends), and answers them in one pass.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time

from .codes import SYSTEM_ERROR

log = logging.getLogger(__name__)


class PendingSends:
    """The sends of one RemotingServer whose put has not completed yet."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.count = 0                      # sends added, not answered yet (read and written in the loop only)
        self._done: collections.deque = collections.deque()    # (conn, cmd, msg, future), from any thread
        self._woken = False                 # a call of _answer is due in the loop

    def add(self, conn, cmd, msg, fut) -> None:
        """Answer ``cmd`` on ``conn`` (conn._answer_send) once ``fut`` (a concurrent Future[PutResult]) completes.
        In the loop."""
        self.count += 1
        fut.add_done_callback(functools.partial(self._completed, conn, cmd, msg))

    def _completed(self, conn, cmd, msg, fut) -> None:
        # In the thread that completed the put (or in the loop, when it completed before add_done_callback).
        self._done.append((conn, cmd, msg, fut))
        if not self._woken:
            # Set before the call: a completion queued after _answer cleared it, and before its pass ended, is
            # answered by that pass or by the next call (an extra wake-up at worst, never a lost answer).
            self._woken = True
            try:
                self.loop.call_soon_threadsafe(self._answer)
            except RuntimeError:            # the loop is closed: nobody is left to answer
                log.warning("remoting: %d send answers dropped: the event loop is closed", len(self._done))

    def _answer(self) -> None:
        self._woken = False
        done = self._done
        while done:
            conn, cmd, msg, fut = done.popleft()
            self.count -= 1
            try:
                exc = fut.exception()
                if exc is None:
                    # a closed connection's answer is dropped by reply (conn._closed), never raised
                    conn._answer_send(cmd, fut.result(), msg)
                else:
                    log.error("remoting: send from %s failed", conn.peer, exc_info=exc)
                    conn.reply(cmd, SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
            except Exception:                   # one answer's failure must not leave the others unanswered
                log.exception("remoting: answering a send from %s failed", conn.peer)

    async def drain(self, timeout: float) -> None:
        """Wait until every pending send is answered, at most ``timeout`` s: each put completes by its own deadline
        (sync_flush_timeout: FLUSH_DISK_TIMEOUT or FLUSH_SLAVE_TIMEOUT), so the store may close after this."""
        deadline = time.monotonic() + timeout
        while self.count > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        if self.count > 0:
            log.warning("remoting: %d sends still unanswered after %.1f s at stop", self.count, timeout)
