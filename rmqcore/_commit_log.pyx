# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The commitlog's append path, as RocketMQ's CommitLog.putMessage and DefaultAppendMessageCallback.

``CommitLogWriter`` takes a message, a batch or encoded Arrow rows from the caller to the file: the encoder
(``_encoder``) outside the put lock, then under it the queue offsets from the topic-queue table
(``AppendMessageCallback``), the store time, the record CRC, the copy, the blank record that ends a full file, and
each record handed to the dispatcher without its body (``DispatchRing``).
"""

import os

from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc

from rmqcore._c cimport (rmq_atomic_load_i64, rmq_atomic_store_i64, rmq_dring_publish, rmq_dring_push,
                         rmq_event_poke, rmq_store_be32, rmq_store_be64)
from rmqcore._codec cimport (BLANK_MAGIC_CODE, END_FILE_MIN_BLANK_LENGTH, PHY_POS_POSITION, QUEUE_OFFSET_POSITION,
                             RECORD_OK, RecordView, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, now_ms,
                             parse_record)
from rmqcore._encoder cimport (BatchProperties, EncodeBuffer, EncodedRecord, MessageEncoder, _fill_record_crc,
                               fill_body_crcs)
from rmqcore._mapped_file cimport MappedFile, WakeEvent
from rmqcore._message cimport Message, PutResult

from rmqcore.errors import MessageIllegalError
from rmqcore.status import PutStatus

cdef PUT_OK = PutStatus.PUT_OK


cdef class AppendMessageCallback:
    """RocketMQ's DefaultAppendMessageCallback: runs under the put lock, owns the topic-queue table
    ((topic, queue_id) → next queue offset)."""

    def __init__(self, bytes store_host_bytes not None):
        self._table = {}
        self.store_host_bytes = store_host_bytes

    @property
    def topic_queue_table(self):
        """{(topic, queue_id): next queue offset} (a copy)."""
        return {(t, q): o for t, queues in self._table.items() for q, o in queues.items()}

    @topic_queue_table.setter
    def topic_queue_table(self, table):
        inner = {}
        for (t, q), o in table.items():
            inner.setdefault(t, {})[q] = o
        self._table = inner
        self._last_topic = None
        self._last_queues = None

    cdef int write_blank(self, MappedFile mf) except -1:
        # The record does not fit: a blank record fills the rest of the file (END_OF_FILE), the caller goes on in
        # the next file.
        cdef int64_t wrote = rmq_atomic_load_i64(&mf._wrote)
        cdef int64_t max_blank = mf.file_size - wrote
        cdef unsigned char blank[8]
        cdef int err
        if max_blank >= END_FILE_MIN_BLANK_LENGTH:
            rmq_store_be32(blank, <uint32_t>max_blank)
            rmq_store_be32(blank + 4, <uint32_t>BLANK_MAGIC_CODE)
            err = mf.write_c(wrote, blank, 8, True)
            if err != 0:
                raise OSError(err, f"end-of-file blank: {os.strerror(err)}", mf.file_name)
        mf.advance(max_blank, 0)
        return 0

    cdef PutResult assign(self, MappedFile mf, EncodeBuffer eb, Py_ssize_t i, int64_t store_timestamp,
                          int64_t wrote):
        # Record i goes to ``wrote`` in ``mf``: take its queue offset from the table and set the per-put fields in
        # the encoded bytes (queue offset, physical offset, store time); the caller writes it. Returns its result.
        cdef int64_t queue_offset = self.assign_raw(mf, eb, i, store_timestamp, wrote)
        cdef PutResult r = PutResult.__new__(PutResult)
        r.status = PUT_OK
        r.commitlog_offset = mf.file_from_offset + wrote
        r.queue_offset = queue_offset
        r.wrote_bytes = eb.rec[i].length
        r.store_timestamp = store_timestamp
        r.uniq_key = eb.uniq_keys[i]
        r._store_host = self.store_host_bytes
        return r

    cdef int64_t assign_raw(self, MappedFile mf, EncodeBuffer eb, Py_ssize_t i, int64_t store_timestamp,
                            int64_t wrote) except -1:
        # assign() without the result object: returns the queue offset (0 for prepared/rolled-back records).
        cdef EncodedRecord *rec = &eb.rec[i]
        cdef int64_t queue_offset
        cdef unsigned char *src
        cdef PyObject *cur
        cdef object topic = eb.topics[i]
        cdef object queues
        cdef bint consumable = rec.tran_type != TRANSACTION_PREPARED_TYPE and rec.tran_type != TRANSACTION_ROLLBACK_TYPE
        if topic is self._last_topic:         # runs of one topic (batches, Arrow rows) skip the outer lookup
            cur = <PyObject *>self._last_queues
        else:
            cur = PyDict_GetItem(self._table, topic)
        if cur == NULL:
            queues = {}
            PyDict_SetItem(self._table, topic, queues)
        else:
            queues = <object>cur
        self._last_topic = topic
        self._last_queues = queues
        qid = rec.queue_id
        cur = PyDict_GetItem(queues, qid)
        queue_offset = 0 if cur == NULL else <int64_t>(<object>cur)
        src = eb.data + rec.pos
        rmq_store_be64(src + QUEUE_OFFSET_POSITION, <uint64_t>(queue_offset if consumable else 0))
        rmq_store_be64(src + PHY_POS_POSITION, <uint64_t>(mf.file_from_offset + wrote))
        rmq_store_be64(src + rec.store_ts_pos, <uint64_t>store_timestamp)
        if consumable:
            PyDict_SetItem(queues, qid, queue_offset + 1)
            return queue_offset
        return 0

    cdef unassign(self, EncodeBuffer eb, Py_ssize_t i):
        # Give back the queue offset assign() took for record i (its write failed); newest first.
        cdef EncodedRecord *rec = &eb.rec[i]
        if rec.tran_type != TRANSACTION_PREPARED_TYPE and rec.tran_type != TRANSACTION_ROLLBACK_TYPE:
            queues = self._table[eb.topics[i]]
            queues[rec.queue_id] = queues[rec.queue_id] - 1

    cdef PutResult do_append(self, MappedFile mf, EncodeBuffer eb, Py_ssize_t i, int64_t store_timestamp):
        # Returns None when the file cannot take the record: a blank record then fills the rest of the file
        # (END_OF_FILE) and the caller retries on the next file.
        cdef EncodedRecord *rec = &eb.rec[i]
        cdef int32_t n = rec.length
        cdef int64_t wrote = rmq_atomic_load_i64(&mf._wrote)
        cdef PutResult r
        cdef int err
        if n + END_FILE_MIN_BLANK_LENGTH > mf.file_size - wrote:
            self.write_blank(mf)
            return None
        r = self.assign(mf, eb, i, store_timestamp, wrote)
        if rec.record_crc:
            _fill_record_crc(eb.data + rec.pos, n)
        err = mf.write_c(wrote, eb.data + rec.pos, n, True)
        if err != 0:
            self.unassign(eb, i)
            raise OSError(err, f"append: {os.strerror(err)}", mf.file_name)
        mf.advance(n, store_timestamp)
        return r

    def append(self, MappedFile mf not None, EncodeBuffer eb not None, Py_ssize_t i=0, int64_t store_timestamp=0):
        """Append encoded record ``i``; returns its PutResult, or None when the file was full (blank written)."""
        if i < 0 or i >= eb.count:
            raise IndexError(i)
        return self.do_append(mf, eb, i, store_timestamp if store_timestamp else now_ms())

    def append_batch(self, MappedFile mf not None, EncodeBuffer eb not None, Py_ssize_t start, list results not None,
                     int64_t store_timestamp=0):
        """Append records start.. until the file fills; results are appended to ``results``. Returns the index of
        the first record not appended (len(eb) when all went in)."""
        cdef Py_ssize_t i
        cdef PutResult r
        if store_timestamp == 0:
            store_timestamp = now_ms()
        for i in range(start, eb.count):
            r = self.do_append(mf, eb, i, store_timestamp)
            if r is None:
                return i
            results.append(r)
        return eb.count


# ---------------------------------------------------------------------------------------------------------------
# The put path in one call

cdef class DispatchRing:
    """What the writer hands the dispatcher: every record it appends, without its body (rmq_dispatch_ring.h), so
    that dispatch reads no commitlog bytes for them (``_dispatch.drain_dispatch_ring``). A hint: the dispatcher
    scans the commitlog for any record the ring lacks. ``size``: bytes (rounded down to 8), allocated at once but
    touched only as entries come (~150 bytes a record with a tag and a key)."""

    def __cinit__(self, int64_t size=4 * 1024 * 1024):
        size &= ~7
        if size < 4096:
            raise ValueError(f"dispatch ring size {size} is below 4096 bytes")
        self.r.buf = <unsigned char *>malloc(<size_t>size)
        if self.r.buf == NULL:
            raise MemoryError()
        self.r.size = size
        self.r.head = self.r.tail = self.r.pending = self.r.dropped = 0

    def __dealloc__(self):
        free(self.r.buf)
        self.r.buf = NULL

    @property
    def size(self):
        return self.r.size

    @property
    def dropped(self):
        """Records the writer could not hand over (the ring was full): the dispatcher scanned them."""
        return self.r.dropped

    @property
    def pending_bytes(self):
        """Bytes of entries handed over and not yet taken."""
        return rmq_atomic_load_i64(&self.r.head) - rmq_atomic_load_i64(&self.r.tail)


cdef void _push_slim(rmq_dring *r, const unsigned char *data, const EncodedRecord *rec, Py_ssize_t start,
                     Py_ssize_t end, int64_t phys) noexcept nogil:
    # Records start..end of an encode buffer, appended back to back from commitlog offset ``phys`` (their offsets,
    # queue offsets and store times already in place), into the ring, then published.
    cdef Py_ssize_t k
    cdef RecordView rv
    cdef const unsigned char *p
    cdef int32_t after_body
    for k in range(start, end):
        p = data + rec[k].pos
        if parse_record(p, rec[k].length, &rv, False) == RECORD_OK:
            after_body = rv.body_pos + rv.body_len
            rmq_dring_push(r, phys + (rec[k].pos - rec[start].pos), rv.total_size, p, rv.body_pos - 4,
                           p + after_body, rv.total_size - after_body)
        else:
            r.dropped += 1
    rmq_dring_publish(r)


cdef class CommitLogWriter:
    """CommitLog's put path without Python frames between the API and the copy: encode + CRC outside the put lock
    into a reusable buffer, then under the lock take queue offsets and append, rolling to the next file (through
    the MappedFileQueue) when a record does not fit. Raises MessageIllegalError before anything is written."""
    cdef MessageEncoder encoder
    cdef readonly AppendMessageCallback callback
    cdef object lock
    cdef object mapped_file_queue
    cdef MappedFile current
    cdef int32_t max_record
    cdef int64_t file_size
    cdef list _free
    cdef object _failed
    cdef readonly int64_t put_messages  # messages every put path took (stats' put_calls)
    cdef WakeEvent _arrivals            # the dispatcher's, poked after an append while it idles
    cdef int64_t _dispatcher_idle
    cdef DispatchRing _dring            # the dispatcher's: every appended record goes in, body left out

    def __init__(self, MessageEncoder encoder not None, AppendMessageCallback callback not None, lock,
                 mapped_file_queue, int32_t max_record, int64_t file_size, failed_result):
        self.encoder = encoder
        self.callback = callback
        self.lock = lock
        self.mapped_file_queue = mapped_file_queue
        self.max_record = max_record
        self.file_size = file_size
        self._free = []
        self._failed = failed_result

    cdef EncodeBuffer _take(self):
        cdef EncodeBuffer b
        if self._free:
            b = <EncodeBuffer>self._free.pop()
            b.size = 0
            b.count = 0
            b.topics = []
            b.uniq_keys = []
            b.defer_body_crc = False
            return b
        return EncodeBuffer()

    cdef _give(self, EncodeBuffer b):
        if len(self._free) < 16 and b.capacity <= 8 * 1024 * 1024:
            self._free.append(b)

    cdef int _check(self, EncodeBuffer b, bint rows=False, Py_ssize_t first_row=0) except -1:
        cdef Py_ssize_t i
        for i in range(b.count):
            if b.rec[i].length > self.max_record:
                raise MessageIllegalError(
                    f"body[{first_row + i}]" if rows else "body",
                    f"record of {b.rec[i].length} bytes does not fit a commitlog file of "
                    f"{self.file_size} bytes with its end-of-file blank", self.max_record)
        return 0

    cdef MappedFile _file(self):
        # The file to append to: the cached one unless full; else the queue's last or a new one (None: failed).
        cdef MappedFile mf = self.current
        if mf is not None and not mf._closed and rmq_atomic_load_i64(&mf._wrote) < mf.file_size:
            return mf
        if mf is not None and mf._ring != NULL and not mf._closed:
            # The full file's last records may still wait in the write ring, where the next file's go on: into
            # the file with them before they can be overwritten.
            mf.commit()
        mf = self.mapped_file_queue.get_last_mapped_file()
        self.current = mf
        return mf

    def reset(self):
        """Forget the cached file (after truncation or deletion by recovery and cleaning)."""
        self.current = None

    def set_dispatcher(self, WakeEvent arrivals):
        """The dispatcher's event: poked after appends while it idles (``dispatcher_idle``). In C, so that a put
        costs no Python call for it (a threading.Event.set was ~1 us a put when the dispatcher slept)."""
        self._arrivals = arrivals

    def set_dispatch_ring(self, DispatchRing ring):
        """The dispatcher's ring (None: none): each record appended from now on is handed over in it."""
        with self.lock:
            self._dring = ring

    def dispatcher_idle(self, bint idle):
        """The dispatcher says it sleeps long (appends poke it) or runs again (they do not)."""
        rmq_atomic_store_i64(&self._dispatcher_idle, idle)

    cdef inline void _arrived(self, Py_ssize_t n) noexcept:
        self.put_messages += n
        if rmq_atomic_load_i64(&self._dispatcher_idle) and self._arrivals is not None:
            rmq_event_poke(&self._arrivals.ev)

    cpdef object put(self, Message msg):
        cdef EncodeBuffer b = self._take()
        cdef MappedFile mf
        cdef PutResult r
        cdef int64_t ts
        self.encoder.encode_into(msg, b)
        self._check(b)
        with self.lock:
            mf = self._file()
            if mf is None:
                return self._failed()
            ts = now_ms()
            r = self.callback.do_append(mf, b, 0, ts)
            if r is None:
                mf = self._file()
                if mf is None:
                    return self._failed()
                r = self.callback.do_append(mf, b, 0, ts)
            if self._dring is not None and r.commitlog_offset >= 0:
                _push_slim(&self._dring.r, b.data, b.rec, 0, 1, r.commitlog_offset)
        self._give(b)
        self._arrived(1)
        return r

    cpdef list put_batch(self, messages, dict properties=None, bint broker_topic_rule=True):
        # ``properties``: common to every message, encoded once (MessageEncoder.batch_properties), before the
        # buffer is taken so a refusal leaves nothing to give back. ``broker_topic_rule`` False: the store's topic
        # rule only (MessageEncoder.encode_into), for the deliveries of the schedule and timer services.
        cdef BatchProperties batch = self.encoder.batch_properties(properties) if properties else None
        cdef EncodeBuffer b = self._take()
        cdef list out = []
        b.defer_body_crc = True
        for m in messages:
            self.encoder.encode_into(<Message?>m, b, batch, broker_topic_rule)
        b.defer_body_crc = False
        self._check(b, True)
        with nogil:
            fill_body_crcs(b)
        self._append_all(b, out, None)
        self._give(b)
        self._arrived(len(out))
        return out

    def check_record_length(self, int64_t length, Py_ssize_t row):
        """MessageIllegalError (field ``body[row]``) when a record of ``length`` bytes cannot fit a file."""
        if length > self.max_record:
            raise MessageIllegalError(
                f"body[{row}]", f"record of {length} bytes does not fit a commitlog file of {self.file_size} bytes "
                "with its end-of-file blank", self.max_record)

    def put_arrow_rows(self, EncodeBuffer b not None, int64_t[:, ::1] result not None, Py_ssize_t first_row=0):
        """Append the records Arrow rows were encoded into (MessageEncoder.encode_arrow): row i's store time,
        commitlog offset, queue offset and size go to result[i, 0..3] (commitlog offset -1: no file could be made,
        CREATE_MAPPED_FILE_FAILED). No Python object per row."""
        if result.shape[0] < b.count or result.shape[1] < 4:
            raise ValueError(f"result must be at least ({b.count}, 4)")
        self._check(b, True, first_row)
        self._append_all(b, None, result)
        self._arrived(b.count)

    cdef _append_all(self, EncodeBuffer b, list out, int64_t[:, ::1] raw):
        # The put lock's part of put_batch / put_arrow: the records that fit the current file take their offsets
        # with the GIL; then they are copied as one range (they lie back to back in the buffer) with the GIL
        # released, so the dispatcher and other producers run meanwhile, and published with one advance. The first
        # size goes last, so a copy cut by a kill reads as the end of data. Results go to ``out`` (PutResults) or
        # ``raw`` rows (store time, commitlog offset, queue offset, size).
        cdef MappedFile mf
        cdef int64_t ts, wrote, pos, total
        cdef Py_ssize_t i = 0, j, k
        cdef const unsigned char *src
        cdef int err
        cdef rmq_dring *dring = NULL
        with self.lock:
            if self._dring is not None:
                dring = &self._dring.r
            ts = now_ms()
            while i < b.count:
                mf = self._file()
                if mf is None:
                    while i < b.count:
                        if out is not None:
                            out.append(self._failed())
                        else:
                            raw[i, 0] = ts
                            raw[i, 1] = -1
                            raw[i, 2] = -1
                            raw[i, 3] = 0
                        i += 1
                    break
                wrote = rmq_atomic_load_i64(&mf._wrote)
                pos = wrote
                j = i
                while j < b.count and pos + b.rec[j].length + END_FILE_MIN_BLANK_LENGTH <= mf.file_size:
                    if out is not None:
                        out.append(self.callback.assign(mf, b, j, ts, pos))
                    else:
                        raw[j, 0] = ts
                        raw[j, 1] = mf.file_from_offset + pos
                        raw[j, 2] = self.callback.assign_raw(mf, b, j, ts, pos)
                        raw[j, 3] = b.rec[j].length
                    pos += b.rec[j].length
                    j += 1
                if j > i:
                    total = pos - wrote
                    src = b.data + b.rec[i].pos
                    with nogil:
                        for k in range(i, j):
                            if b.rec[k].record_crc:
                                _fill_record_crc(b.data + b.rec[k].pos, b.rec[k].length)
                        err = mf.write_c(wrote, src, total, True)
                        if err == 0 and dring != NULL:
                            _push_slim(dring, b.data, b.rec, i, j, mf.file_from_offset + wrote)
                    if err != 0:
                        for k in range(j - 1, i - 1, -1):
                            self.callback.unassign(b, k)
                        if out is not None:
                            del out[len(out) - (j - i):]
                        raise OSError(err, f"append: {os.strerror(err)}", mf.file_name)
                    mf.advance(total, ts)
                    i = j
                if i < b.count:
                    self.callback.write_blank(mf)
