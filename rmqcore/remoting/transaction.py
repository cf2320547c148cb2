"""Transactions on the remoting front: a 4.x producer's END_TRANSACTION, and the broker's check of an open half
sent back to a live producer of its group as CHECK_TRANSACTION_STATE.

The check is the Broker's one TransactionalMessageService (its check thread, ``transactionCheckInterval``,
``transactionTimeOut``, ``transactionCheckMax``, the discard to TRANS_CHECK_MAX_TIME_TOPIC): the gRPC front asks its
producers through the same service. ``TransactionCheck`` is the checker that service calls while the remoting
server runs. As RocketMQ's AbstractTransactionalMessageCheckListener.sendCheckMessage and
Broker2Client.checkProducerTransactionState: the request goes oneway on a connection that registered the half's
producer group (PGROUP) in its HEART_BEAT's producerDataSet (ProducerManager.getAvailableChannel: round robin over
the group's live channels), its header naming the half's copy the check just put back (commitLogOffset,
tranStateTableOffset = its queue offset, msgId / transactionId = UNIQ_KEY, offsetMsgId), its body the half
re-encoded as a record with its real topic and queue (MessageDecoder.encode). The producer's checkLocalTransaction
answer comes back later as END_TRANSACTION with fromTransactionCheck=true and ends that copy; UNKNOW (type 0) leaves
it open for the next pass. A group with no remoting producer is handed to the checker that was there before (the
gRPC front's), else reported as NO_PRODUCER, which RocketMQ only logs.
"""
from __future__ import annotations

import asyncio
import logging
import struct

from ..broker.errors import MessageNotFoundError
from ..broker.transaction import (HALF_TOPIC, NO_PRODUCER, PROPERTY_PRODUCER_GROUP, PROPERTY_REAL_QUEUE_ID,
                                  PROPERTY_REAL_TOPIC, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE)
from .._codec import PY_MESSAGE_MAGIC_CODE
from ..errors import BrokerRoleError, RmqStoreError
from ..status import PutStatus
from .codes import CHECK_TRANSACTION_STATE, SLAVE_NOT_AVAILABLE, SUCCESS, SYSTEM_ERROR
from .remoting_command import Refusal, header_int, need

log = logging.getLogger(__name__)

PROPERTY_UNIQ_KEY = "UNIQ_KEY"          # MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
BORNHOST_V6_FLAG = 0x10                 # MessageSysFlag
STOREHOSTADDRESS_V6_FLAG = 0x20
MAX_V1_TOPIC = 127                      # MessageDecoder.encode writes the topic length as one (signed) byte


def check_body(half) -> bytes | None:
    """MessageDecoder.encode(msgExt, false) of the half as sendCheckMessage changes it: its record with the real
    topic (REAL_TOPIC) and queue (REAL_QID), every other field as stored (queue offset and commitlog offset the
    half's own). None when the half has no real topic a 4.x client can decode."""
    props = half.properties
    topic = props.get(PROPERTY_REAL_TOPIC)
    try:
        queue_id = int(props.get(PROPERTY_REAL_QUEUE_ID, ""))
    except ValueError:
        return None
    if not topic:
        return None
    real = topic.encode()
    if len(real) > MAX_V1_TOPIC:
        return None
    rec = bytes(half.record())
    sys_flag = half.sys_flag
    pos = 48 + (20 if sys_flag & BORNHOST_V6_FLAG else 8) + 8 + (20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8) \
        + 4 + 8                         # born host, store timestamp, store host, reconsume times, prepared offset
    (body_len,) = struct.unpack_from(">i", rec, pos)
    topic_at = pos + 4 + body_len
    if half.version == 1:
        props_at = topic_at + 1 + rec[topic_at]
    else:
        props_at = topic_at + 2 + struct.unpack_from(">h", rec, topic_at)[0]
    out = bytearray(rec[:topic_at])
    out.append(len(real))
    out += real
    out += rec[props_at:]
    # a 4.x client reads one layout only (V1: the one-byte topic length written above)
    struct.pack_into(">ii", out, 0, len(out), PY_MESSAGE_MAGIC_CODE)
    struct.pack_into(">i", out, 12, queue_id)
    return bytes(out)


def check_header(half) -> dict[str, str]:
    """CheckTransactionStateRequestHeader as sendCheckMessage fills it."""
    ext = {"tranStateTableOffset": str(half.queue_offset), "commitLogOffset": str(half.commitlog_offset),
           "offsetMsgId": half.msg_id}
    uniq = half.properties.get(PROPERTY_UNIQ_KEY)
    if uniq:
        ext["msgId"] = ext["transactionId"] = uniq
    return ext


class TransactionCheck:
    """The Broker's transaction checker while a RemotingServer runs (``install`` at its start, ``uninstall`` at its
    stop). Called on the check service's thread; the request is written from the server's loop."""

    def __init__(self, server):
        # server: the RemotingServer (its producers table, loop and stopping flag)
        self.server = server
        self.previous = None
        self._installed = False
        self._started = False
        self._next = 0

    def install(self) -> None:
        tx = self.server.broker.transactions
        if tx is None:
            return
        self.previous = tx.checker
        tx.checker = self
        self._installed = True
        if tx._thread is None:          # not started by the gRPC front (or a checker given to Broker.open)
            tx.start()
            self._started = True

    async def uninstall(self) -> None:
        tx = self.server.broker.transactions
        if tx is None or not self._installed:
            return
        if tx.checker is self:
            tx.checker = self.previous
        self._installed = False
        if self._started:
            self._started = False
            # shutdown waits for a pass in progress: not on the loop, which that pass may be writing through
            await asyncio.get_running_loop().run_in_executor(None, tx.shutdown)

    def __call__(self, half):
        group = half.properties.get(PROPERTY_PRODUCER_GROUP, "")
        srv = self.server
        if srv.stopping or not srv.producers.get(group):
            return self.previous(half) if self.previous is not None else NO_PRODUCER
        body = check_body(half)
        if body is None:
            log.warning("transaction check of %s not sent: no real topic and queue a 4.x producer can read",
                        half.msg_id)
            return None
        try:
            srv.loop.call_soon_threadsafe(self._send, group, check_header(half), body)
        except RuntimeError:            # the loop closed: the server is gone, the half stays open
            return None
        return None                     # the answer comes later, as END_TRANSACTION

    def _send(self, group: str, ext: dict, body: bytes) -> None:
        live = [c for c in self.server.producers.get(group, ()) if not c._closed]
        if not live:
            log.warning("transaction check failed, no live producer of group %s", group)
            return
        self._next += 1
        live[self._next % len(live)].send_request(CHECK_TRANSACTION_STATE, ext, body)


def end_transaction(conn, cmd) -> None:
    """EndTransactionProcessor: commit (8) or roll back (12) the half at commitLogOffset, whose producer group and
    queue offset must be the request's (checkPrepareMessage); type 0 (UNKNOW) leaves it open for the check. Usually
    oneway (the client's endTransactionOneway): a refusal is only answered to a request that waits."""
    ext = cmd.ext_fields
    group = need(ext, "producerGroup")
    offset = header_int(ext, "commitLogOffset")
    kind = header_int(ext, "commitOrRollback")
    table_offset = header_int(ext, "tranStateTableOffset")
    broker = conn.broker
    if broker.store_config.broker_role == "SLAVE":
        raise Refusal(SLAVE_NOT_AVAILABLE, "Can not process transaction in slave broker")
    if kind not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
        if ext.get("fromTransactionCheck") == "true":
            log.debug("transaction check of %s answered unknown by %s", ext.get("msgId"), conn.peer)
        conn.reply(cmd, SUCCESS)
        return
    half = broker.store.look_message(offset) if offset >= 0 else None
    if half is not None and half.topic == HALF_TOPIC and half.properties.get(PROPERTY_PRODUCER_GROUP) == group \
            and half.queue_offset != table_offset:
        # checkPrepareMessage, after the producer group (which end_transaction checks, as for a message that is
        # no half at all)
        raise Refusal(SYSTEM_ERROR, "The transaction state table offset wrong")
    try:
        result = broker.end_transaction(offset, group, kind == TRANSACTION_COMMIT_TYPE)
    except BrokerRoleError as e:
        raise Refusal(SLAVE_NOT_AVAILABLE, str(e)) from None
    except (MessageNotFoundError, RmqStoreError) as e:
        raise Refusal(SYSTEM_ERROR, str(e)) from None
    if result is not None and result.status not in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT):
        # sendFinalMessage failed: the half stays open for the check
        raise Refusal(SYSTEM_ERROR, f"commit failed: {result.status.name}")
    topic = half.properties.get(PROPERTY_REAL_TOPIC, "") if half is not None else ""
    conn.server.events.on_transaction_end(topic, kind == TRANSACTION_COMMIT_TYPE)
    if result is not None:
        conn.server.wake(topic or broker.store.look_message(result.commitlog_offset).topic)
    conn.reply(cmd, SUCCESS)
