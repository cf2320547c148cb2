# cython: language_level=3, boundscheck=False, wraparound=False
"""The remoting front's common send answered in one compiled call (issue 37's send aims): SEND_MESSAGE (10) or
SEND_MESSAGE_V2 (310) of one message, not a batch, to a topic whose checks the broker has cached (its send cache,
emptied on every change of the topic table or of the broker's permission, so an entry found is current), on a
server whose puts do not wait (ASYNC_FLUSH, no SYNC_MASTER). The header's fields are read from the decoded
extFields, the Message built, Broker.send called (the same Sender and store put the Python path calls: every rule
of a send, delay levels and timers included, is theirs, not this module's), and the answer's frame written from a
template; the topic's dispatch is asked for, and the message counted for ServerEvents as
RemotingConnection._answer_send counts it (gathered, and passed on once a read by ``SendMessage.count``).

Holds none of SendMessageProcessor's rules, only the test of whether a request may skip the Python around them:
``SendMessage.send`` returns False, having changed nothing, for anything else (a batch, a V2 header carrying a long
name, a field that is missing or not a plain decimal in range, a prepared transaction, a retry topic or any topic
the cache does not clear, a put that refuses the message: the broker raises before writing anything), and the
connection's Python path (RemotingConnection._send) takes the request whole, so its answer is the one it always
gave. A put whose status is not PUT_OK is answered by RemotingConnection._answer_send itself. Differentially tested
against that path (tests/test_remoting_send_fast.py: equal answers, equal records).
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItemWithError, PyDict_Next
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_GET_LENGTH
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.string cimport memcpy, strlen

from rmqcore._message cimport Message, PutResult
from rmqcore.remoting._remoting_codec cimport RemotingCommand, decimal_field as _decimal, dict_get as _get

from rmqcore.broker.mix_all import PROPERTY_TRANSACTION_PREPARED as _TRAN, PROPERTY_WAIT_STORE_MSG_OK as _WAIT
from rmqcore.remoting.remoting_command import BROKER_VERSION as _BROKER_VERSION
from rmqcore.remoting.remoting_command import ONEWAY_FLAG as _ONEWAY, RESPONSE_FLAG as _RESPONSE
from rmqcore.remoting._remoting_codec import encode_header as _encode_header
from rmqcore.status import PutStatus


cdef extern from "Python.h":
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    void* PyUnicode_1BYTE_DATA(object o)
    Py_ssize_t PyUnicode_FindChar(object s, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end, int direction) except -2
    object PyUnicode_Substring(object s, Py_ssize_t start, Py_ssize_t end)

cdef int SEND_MESSAGE = 10
cdef int SEND_MESSAGE_V2 = 310
cdef int SUCCESS = 0
cdef int ONEWAY_FLAG = _ONEWAY
cdef int RESPONSE_FLAG = _RESPONSE
cdef int BROKER_VERSION = _BROKER_VERSION
cdef str TRAN = _TRAN
cdef str WAIT = _WAIT
cdef object PUT_OK = PutStatus.PUT_OK
cdef object encode_header = _encode_header
cdef long long INT_MIN = -(1 << 31)
cdef long long INT_MAX = (1 << 31) - 1


cdef dict _properties(str text):
    """server.string_to_properties (MessageDecoder.string2messageProperties) in C: ``name\\x01value\\x02...``."""
    cdef dict out = {}
    if not text:
        return out
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), start = 0, end, sep
    while True:
        end = PyUnicode_FindChar(text, 0x02, start, n, 1)
        if end < 0:
            end = n
        sep = PyUnicode_FindChar(text, 0x01, start, end, 1)
        if sep >= 0:
            out[PyUnicode_Substring(text, start, sep)] = PyUnicode_Substring(text, sep + 1, end)
        if end >= n:
            return out
        start = end + 1


cdef bytes _hex_ascii(object s):
    """``s`` as ASCII bytes when it is upper-case hex (an offset msg id), else None (the answer then goes through
    encode_header)."""
    if type(s) is not str or not PyUnicode_IS_COMPACT_ASCII(s):
        return None
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(s), i
    cdef const uint8_t *p = <const uint8_t *>PyUnicode_1BYTE_DATA(s)
    if n > 64:
        return None
    for i in range(n):
        if not (0x30 <= p[i] <= 0x39 or 0x41 <= p[i] <= 0x46):
            return None
    return PyBytes_FromStringAndSize(<const char *>p, n)


cdef inline char *_put(char *q, const char *text) noexcept:
    cdef size_t n = strlen(text)
    memcpy(q, text, n)
    return q + n


cdef inline char *_put_int(char *q, long long v) noexcept:
    """``v`` in decimal at ``q`` (as %lld writes it): the end."""
    cdef char digits[24]
    cdef int k = 0
    cdef unsigned long long u
    if v < 0:
        q[0] = 0x2D
        q += 1
        u = <unsigned long long>(-(v + 1)) + 1
    else:
        u = <unsigned long long>v
    while True:
        digits[k] = <char>(0x30 + u % 10)
        k += 1
        u //= 10
        if u == 0:
            break
    while k > 0:
        k -= 1
        q[0] = digits[k]
        q += 1
    return q


def send_response(int serialize_type, int opaque, str msg_id, int queue_id, long long queue_offset):
    """The SUCCESS answer to a send, as RemotingConnection._answer_send's reply writes it (encode_header of its
    extFields): a JSON header from a template, a ROCKETMQ binary one through encode_header."""
    cdef bytes mid = _hex_ascii(msg_id) if serialize_type == 0 else None
    if mid is None:
        return encode_header(serialize_type, SUCCESS, opaque, RESPONSE_FLAG, None,
                             {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset),
                              "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}, 0)
    # the template's pieces copied and the numbers written here (snprintf's format parsing cost more than the rest
    # of the answer)
    cdef char buf[512]
    cdef char *q = buf + 8
    q = _put(q, b'{"code":')
    q = _put_int(q, SUCCESS)
    q = _put(q, b',"extFields":{"msgId":"')
    memcpy(q, <char *>mid, len(mid))
    q += len(mid)
    q = _put(q, b'","queueId":"')
    q = _put_int(q, queue_id)
    q = _put(q, b'","queueOffset":"')
    q = _put_int(q, queue_offset)
    q = _put(q, b'","MSG_REGION":"DefaultRegion","TRACE_ON":"true"},"flag":')
    q = _put_int(q, RESPONSE_FLAG)
    q = _put(q, b',"language":"JAVA","opaque":')
    q = _put_int(q, opaque)
    q = _put(q, b',"serializeTypeCurrentRPC":"JSON","version":')
    q = _put_int(q, BROKER_VERSION)
    q = _put(q, b'}')
    cdef int n = q - (buf + 8)
    cdef uint32_t length = 4 + n, hlen = n
    buf[0] = (length >> 24) & 0xFF
    buf[1] = (length >> 16) & 0xFF
    buf[2] = (length >> 8) & 0xFF
    buf[3] = length & 0xFF
    buf[4] = 0
    buf[5] = (hlen >> 16) & 0xFF
    buf[6] = (hlen >> 8) & 0xFF
    buf[7] = hlen & 0xFF
    return PyBytes_FromStringAndSize(buf, 8 + n)


@cython.final
cdef class SendMessage:
    """One RemotingServer's common send (see the module's docstring). ``entries``: Broker.send_entries; ``send``:
    Broker.send; ``refusals``: what the put raises for a message it refuses before writing anything (the Python
    path answers those); ``server``: the RemotingServer (its wake after a put); ``on_messages_in(topic, sizes)``:
    ServerEvents', called by count(); ``answer_send(conn, cmd, result, msg)``: RemotingConnection._answer_send,
    for a status other than PUT_OK."""
    cdef dict entries
    cdef object put
    cdef tuple refusals
    cdef object server
    cdef object on_messages_in
    cdef object answer_send
    cdef dict stored                # topic -> [record sizes] stored since the last count()

    def __init__(self, dict entries not None, send, tuple refusals not None, server, on_messages_in, answer_send):
        self.entries = entries
        self.put = send
        self.refusals = refusals
        self.server = server
        self.on_messages_in = on_messages_in
        self.answer_send = answer_send
        self.stored = {}

    def count(self):
        """Pass what was stored since the last call to ``on_messages_in``, one call a topic: the server calls it
        after each read's requests (ServerEvents takes a lock a call: one a read, not one a message)."""
        if self.stored:
            stored, self.stored = self.stored, {}
            for topic, sizes in stored.items():
                self.on_messages_in(topic, sizes)

    def send(self, conn, cmd):
        """Store and answer ``cmd`` (on ``conn``, a RemotingConnection) if it is the common send: True; else False,
        nothing changed."""
        if type(cmd) is not RemotingCommand:
            return False            # a command the codec did not read (the reference's, a test's): the Python path
        cdef RemotingCommand c = <RemotingCommand>cmd
        cdef int code = c.code
        cdef dict ext = c.ext_fields
        cdef Py_ssize_t pos = 0
        cdef PyObject *k
        cdef PyObject *v
        if code == SEND_MESSAGE_V2:
            # SendMessageRequestHeaderV2's one-letter names; a long name too would make the Python path's renaming
            # order matter: that path takes it
            while PyDict_Next(ext, &pos, &k, &v):
                if PyUnicode_GET_LENGTH(<object>k) != 1:
                    return False
            topic = _get(ext, "b")
            queue_s, sys_s, born_s, flag_s = _get(ext, "e"), _get(ext, "f"), _get(ext, "g"), _get(ext, "h")
            group, props_s, recon_s, batch = _get(ext, "a"), _get(ext, "i"), _get(ext, "j"), _get(ext, "m")
        elif code == SEND_MESSAGE:
            topic = _get(ext, "topic")
            queue_s, sys_s, born_s, flag_s = (_get(ext, "queueId"), _get(ext, "sysFlag"), _get(ext, "bornTimestamp"),
                                              _get(ext, "flag"))
            group, props_s, recon_s, batch = (_get(ext, "producerGroup"), _get(ext, "properties"),
                                              _get(ext, "reconsumeTimes"), _get(ext, "batch"))
        else:
            return False
        # (the codec gives strings only; a command built otherwise takes the Python path)
        if (type(topic) is not str or group is None or (batch is not None and batch != "false")
                or (props_s is not None and type(props_s) is not str)):
            return False
        entry = _get(self.entries, topic)
        if entry is None or entry.slow:
            return False
        cdef long long queue_id, sys_flag, born, flag, reconsume = 0
        if not (_decimal(queue_s, INT_MIN, INT_MAX, &queue_id) and _decimal(sys_s, INT_MIN, INT_MAX, &sys_flag)
                and _decimal(born_s, -999999999999999999, 999999999999999999, &born)
                and _decimal(flag_s, INT_MIN, INT_MAX, &flag)):
            return False
        if recon_s is not None and not _decimal(recon_s, INT_MIN, INT_MAX, &reconsume):
            return False
        cdef dict props = _properties(props_s) if props_s is not None else {}
        if TRAN in props:
            return False
        if _get(props, WAIT) == "true":
            del props[WAIT]         # as _send: the store waits for a message without it as for one with it
        cdef Message msg = Message.__new__(Message)
        msg.topic = topic
        msg.body = c.body
        msg._queue_id = <int>queue_id
        msg._flag = <int>flag
        msg._sys_flag = <int>sys_flag
        msg._born_timestamp = <int64_t>born
        msg.born_host = conn.peer
        msg._reconsume_times = <int>reconsume
        msg.properties = props
        try:
            result = self.put(msg)
        except self.refusals:
            return False
        cdef PutResult r = <PutResult>result
        if r.status is not PUT_OK:
            self.answer_send(conn, cmd, r, msg)
            return True
        server = self.server
        if not server._dispatch_pending or topic in server._arrivals:
            server.wake(topic)      # else a pass is already asked for and no pull waits on the topic: nothing to do
        if not (c.flag & ONEWAY_FLAG) and not conn._closed:
            frame = send_response(c.serialize_type, c.opaque, r.msg_id, msg._queue_id, r.queue_offset)
            batch = conn._batch
            if batch is None:
                conn._write(frame)
            else:                   # RemotingConnection._write's common case: the answers of one read, gathered
                (<list>batch).append(frame)
                conn._batch_bytes += len(frame)
        sizes = _get(self.stored, topic)
        if sizes is None:
            self.stored[topic] = [r.wrote_bytes]
        else:
            (<list>sizes).append(r.wrote_bytes)
        return True
