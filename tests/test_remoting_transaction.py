"""The broker's transaction check on the remoting front, frame by frame (the Java TransactionMQProducer's run of it
is in test_remoting_java_clients.py): a producer that registered its group by HEART_BEAT gets
CHECK_TRANSACTION_STATE for its open half on its own connection, and its END_TRANSACTION ends the half."""
import json
import time

import pytest

from rmqcore._message import decode_message
from rmqcore.remoting import remoting_command as rc
from remoting_util import Client, RemotingProcess, props, pull

# a check pass every second over halves a second old (broker.conf, Java's names)
CONF = {"transactionCheckInterval": 1000, "transactionTimeOut": 1000, "transactionCheckMax": 5}


@pytest.fixture(scope="module", params=["remoting", "remoting+grpc"])
def server(request, tmp_path_factory):
    # with the gRPC front too, both share the Broker's one check service: a 4.x producer's half is still asked
    args = ("--listen", "127.0.0.1:0") if request.param == "remoting+grpc" else ()
    with RemotingProcess(str(tmp_path_factory.mktemp("rtx") / "store"), CONF, args, namesrv=False) as s:
        yield s
        assert s.terminate() == 0


def heartbeat(c, group, client_id="tx-client"):
    body = json.dumps({"clientID": client_id, "producerDataSet": [{"groupName": group}],
                       "consumerDataSet": []}).encode()
    assert c.call(34, body=body).code == 0


def send_half(c, group, topic, body, uniq, queue_id=1):
    # SendMessageRequestHeaderV2 as TransactionMQProducer sends it: sysFlag TRANSACTION_PREPARED, TRAN_MSG, PGROUP
    ext = {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "4",
           "g": str(int(time.time() * 1000)), "h": "0",
           "i": props({"TRAN_MSG": "true", "PGROUP": group, "UNIQ_KEY": uniq, "WAIT": "true"}), "j": "0",
           "k": "false", "m": "false"}
    a = c.call(310, ext, body)
    assert a.code == 0, a.remark
    return a


def end(c, group, commit_log_offset, table_offset, kind, oneway=True):
    ext = {"producerGroup": group, "tranStateTableOffset": str(table_offset), "commitLogOffset":
           str(commit_log_offset), "commitOrRollback": str(kind), "fromTransactionCheck": "true", "msgId": "m"}
    if oneway:
        c.request(37, ext, flag=rc.ONEWAY_FLAG)
        return None
    return c.call(37, ext)


def next_check(c):
    while True:
        cmd = c.read()
        assert cmd is not None, "the server closed the connection"
        if cmd.code == 39:
            return cmd


def test_an_unknown_half_is_checked_with_its_producer_and_its_answer_commits_it(server):
    c = Client(server.address)
    heartbeat(c, "rtx-g")
    a = send_half(c, "rtx-g", "t-rtx", b"half-1", "UNIQ-1")
    first = int(a.ext_fields["msgId"][16:], 16)
    end(c, "rtx-g", first, a.ext_fields["queueOffset"], 0)        # UNKNOW: left for the check
    check = next_check(c)
    assert check.flag & rc.ONEWAY_FLAG and not check.flag & rc.RESPONSE_FLAG
    ext = check.ext_fields
    # the copy the check put back is the one asked about (AbstractTransactionalMessageCheckListener)
    offset, table_offset = int(ext["commitLogOffset"]), int(ext["tranStateTableOffset"])
    assert offset > first and ext["msgId"] == ext["transactionId"] == "UNIQ-1"
    assert ext["offsetMsgId"][16:] == "%016X" % offset
    # the body: the half as a record with its real topic and queue (MessageDecoder.encode), readable by a client
    m = decode_message(check.body)
    assert (m.topic, m.queue_id, bytes(m.body), m.commitlog_offset, m.queue_offset) == \
        ("t-rtx", 1, b"half-1", offset, table_offset)
    assert m.store_size == len(check.body) and m.magic_code == -626843481       # V1: what a 4.x client reads
    assert m.properties["PGROUP"] == "rtx-g" and m.properties["TRANSACTION_CHECK_TIMES"] == "1"
    # an answer naming another queue offset is refused as EndTransactionProcessor refuses it, nothing ended
    bad = end(c, "rtx-g", offset, table_offset + 1, 8, oneway=False)
    assert (bad.code, bad.remark) == (1, "The transaction state table offset wrong")
    assert end(c, "rtx-g", offset, table_offset, 8, oneway=False).code == 0
    p = c.answer(pull(c, "rtx-c", "t-rtx", 1, 0, suspend_ms=10000))
    assert p.code == 0 and bytes(decode_message(p.body).body) == b"half-1"
    c.close()


def test_the_check_goes_to_a_live_producer_of_the_halfs_group(server):
    gone, live = Client(server.address), Client(server.address)
    heartbeat(gone, "rtx-h", "gone")
    send_half(gone, "rtx-h", "t-rtx2", b"half-2", "UNIQ-2", queue_id=0)
    gone.close()                    # its producer left: the check must find the group's other connection
    heartbeat(live, "rtx-h", "live")
    check = next_check(live)
    assert check.ext_fields["transactionId"] == "UNIQ-2"
    m = decode_message(check.body)
    assert end(live, "rtx-h", m.commitlog_offset, m.queue_offset, 12, oneway=False).code == 0   # rolled back
    assert live.answer(pull(live, "rtx-c", "t-rtx2", 0, 0)).code in (19, 21)
    live.close()


@pytest.mark.parametrize("born, store", [("10.0.0.1:5", "127.0.0.1:10911"), ("[::1]:7", "[fe80::2]:10911")])
def test_the_check_body_is_the_half_with_its_real_topic_and_queue(born, store):
    """MessageDecoder.encode of the half as sendCheckMessage changes it, IPv4 or IPv6 hosts (wider fields)."""
    from rmqcore import _encoder
    from rmqcore._message import Message
    from rmqcore.remoting.transaction import check_body
    half = Message("RMQ_SYS_TRANS_HALF_TOPIC", b"body", 0, born_host=born,
                   properties={"REAL_TOPIC": "orders-with-a-longer-name", "REAL_QID": "3", "PGROUP": "g",
                               "TRAN_MSG": "true", "UNIQ_KEY": "U"})
    record = _encoder.MessageEncoder(store).encode(half).record(0)
    m = decode_message(check_body(decode_message(record)))
    assert (m.topic, m.queue_id, bytes(m.body), m.born_host, m.store_host) == \
        ("orders-with-a-longer-name", 3, b"body", born, store)
    assert m.properties["REAL_TOPIC"] == "orders-with-a-longer-name" and m.properties["PGROUP"] == "g"
