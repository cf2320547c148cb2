# cython: language_level=3
"""The per-message part of Broker.send and Broker.send_batch, in C (issue 14: the facade adds < 10 % per message
over MessageStore.put).

A send to a topic already checked (its entry is in the broker's send cache), with a queue id in the topic's range,
no retry topic and no MULTI_TAG filter, costs one dict lookup, two compares and the CLUSTER property here (in a
batch, not even that: the store encodes CLUSTER once per batch, MessageStore.put_batch(properties=...)); a Python
version of the same steps cost 0.15-0.25 us per message, 10-30 % of a 256-byte put (and more of a put_batch's
share). Everything else — the first send to a topic, a queue id to pick or refuse, a retry topic, a MULTI_TAG topic,
any refusal — goes to the broker's ``check`` callable, which holds every rule (rmqcore/broker/broker.py); this
module holds none of them, only the test of whether a message may skip them. The cache is the broker's: it is
emptied whenever the topic table or the broker's permission changes, so an entry here is always current.
"""
from cpython.dict cimport PyDict_GetItemWithError, PyDict_Next
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_Check, PyUnicode_GET_LENGTH

from rmqcore._message cimport Message

from concurrent.futures import Future as _Future

from rmqcore.broker import mix_all
from rmqcore.broker.errors import NoPermissionError

# Typed module constants, so that the dict operations below compile to direct C-API calls.
cdef str PROPERTY_CLUSTER = mix_all.PROPERTY_CLUSTER
cdef str PROPERTY_TRANSACTION_PREPARED = mix_all.PROPERTY_TRANSACTION_PREPARED


_NONE = object()      # no topic yet


cdef class SendEntry:
    """The checks of a send that depend on its topic alone, done once per topic until the topic table or the
    broker's permission changes: the TopicConfig they passed, the queue id limit (msgCheck's max of read and write
    queue numbers), the write queue count (for a queue id to pick), and whether every send to it needs the broker's
    slow path (a retry topic: DLQ diversion; a MULTI_TAG topic: the sys flag)."""
    cdef readonly object topic_config
    cdef readonly int queue_id_limit
    cdef readonly int write_queue_nums
    cdef readonly bint slow

    def __init__(self, topic_config, int queue_id_limit, int write_queue_nums, bint slow):
        self.topic_config = topic_config
        self.queue_id_limit = queue_id_limit
        self.write_queue_nums = write_queue_nums
        self.slow = slow

    def __repr__(self):
        return (f"SendEntry({self.topic_config!s}, queue_id_limit={self.queue_id_limit}, "
                f"write_queue_nums={self.write_queue_nums}, slow={self.slow})")


cdef inline bint _prepared(dict props):
    """Whether ``props`` says TRAN_MSG=true. A walk over the names, comparing only those of its length: a
    message's few properties cost less so than a dict lookup that misses (about half, by callgrind), and a batch
    pays it per message."""
    cdef Py_ssize_t pos = 0
    cdef PyObject *k
    cdef PyObject *v
    while PyDict_Next(props, &pos, &k, &v):
        if (PyUnicode_Check(<object>k) and PyUnicode_GET_LENGTH(<object>k) == 8
                and <object>k == PROPERTY_TRANSACTION_PREPARED):
            return <object>v == "true"
    return False


cdef inline bint _clears(SendEntry entry, Message msg):
    """Whether the topic's cached checks clear ``msg`` of every other rule: a cached topic that needs no per-message
    handling, and a queue id in its range."""
    return entry is not None and not entry.slow and 0 <= msg._queue_id < entry.queue_id_limit


cdef class Sender:
    """Broker.send / send_batch over one store. ``cache`` maps topic -> SendEntry (filled and emptied by the broker);
    ``check(msg)`` runs every rule for a message the cache does not clear (raising the refusal, or adjusting the
    message: queue id, DLQ topic, sys flag); ``put_transaction(msg)`` takes a message carrying TRAN_MSG;
    ``put_async(msg)`` (MessageStore.put_async) is send_async's put."""
    cdef dict cache
    cdef str cluster
    cdef object put
    cdef object put_async
    cdef object put_batch
    cdef object check
    cdef object put_transaction
    cdef dict batch_properties      # {CLUSTER: cluster}: put_batch encodes it once per batch, not per message

    def __init__(self, dict cache not None, str cluster not None, put, put_batch, check, put_transaction,
                 put_async=None):
        self.cache = cache
        self.cluster = cluster
        self.batch_properties = {PROPERTY_CLUSTER: cluster}
        self.put = put
        self.put_batch = put_batch
        self.check = check
        self.put_transaction = put_transaction
        self.put_async = put_async

    cdef inline SendEntry _entry(self, object topic):
        cdef PyObject *found = PyDict_GetItemWithError(self.cache, topic)   # borrowed; NULL: not cached
        return None if found is NULL else <SendEntry>found

    cdef inline dict _properties(self, Message msg):
        if msg.properties is None:
            msg.properties = {}
        return msg.properties

    cdef inline bint _checked(self, Message msg) except -1:
        """send's and send_async's checks and stamp (the one place they are): raises the refusal; True for a
        message carrying TRAN_MSG (put_transaction's)."""
        if not _clears(self._entry(msg.topic), msg):
            self.check(msg)
        cdef dict props = self._properties(msg)
        props[PROPERTY_CLUSTER] = self.cluster
        return PROPERTY_TRANSACTION_PREPARED in props

    def send(self, Message msg not None):
        """Broker.send (see its docstring)."""
        if self._checked(msg):
            return self.put_transaction(msg)
        return self.put(msg)

    def send_async(self, Message msg not None):
        """Broker.send_async (see its docstring): send's checks, raised here, then the store's put_async."""
        if self._checked(msg):
            out = _Future()
            out.set_result(self.put_transaction(msg))      # a half message's put waits: the caller's choice
            return out
        return self.put_async(msg)

    def send_batch(self, messages):
        """Broker.send_batch (see its docstring). The broker's CLUSTER goes to the store as a batch property
        (sendBatchMessage puts it on the MessageExtBatch, whose encoder appends it to every inner record): the
        same records as setting it in every message's dict, whose value it replaces, without touching the dicts."""
        cdef list batch = list(messages)
        cdef Message msg
        cdef dict props
        cdef object topic = _NONE
        cdef SendEntry entry = None
        for obj in batch:
            if type(obj) is not Message and not isinstance(obj, Message):
                raise TypeError(f"send_batch needs Message objects, got {type(obj).__name__}")
            msg = <Message>obj
            if msg.topic is not topic:          # a batch is mostly one topic (one str): one lookup for its run
                topic = msg.topic
                entry = self._entry(topic)
            if not _clears(entry, msg):
                self.check(msg)
                topic = _NONE                   # Python ran (and may have cached or changed it): look up again
            props = msg.properties
            if props is not None and _prepared(props):
                raise NoPermissionError(f"topic[{msg.topic}]: a batch may not carry prepared transaction messages")
        return self.put_batch(batch, properties=self.batch_properties)
