# The commitlog record layout and codec: RocketMQ's MessageDecoder / checkMessageAndReturnSize.
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memcpy

from rmqcore._c cimport rmq_find_byte


cdef enum:
    MESSAGE_MAGIC_CODE = -626843481      # 0xDAA320A7, v1: 1-byte topic length
    MESSAGE_MAGIC_CODE_V2 = -626843477   # 0xDAA320AB, 5.x: 2-byte topic length
    BLANK_MAGIC_CODE = -875286124        # 0xCBD43194, fills the end of a commitlog file
    END_FILE_MIN_BLANK_LENGTH = 8
    QUEUE_OFFSET_POSITION = 20
    PHY_POS_POSITION = 28
    SYSFLAG_POSITION = 36
    BORN_HOST_POSITION = 48
    CRC32_RESERVED_LEN = 20              # "__CRC32#" + \x01 + 10 digits + \x02 (5.x)

    FLAG_COMPRESSED = 0x1
    FLAG_MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    FLAG_BORNHOST_V6 = 0x10
    FLAG_STOREHOSTADDRESS_V6 = 0x20

    # parse_record results: > 0 is never returned; these say what was found at the position.
    RECORD_OK = 1
    RECORD_BLANK = 2          # BLANK_MAGIC_CODE: the rest of the file is padding
    RECORD_END = 3            # totalSize 0: no data past here
    ERR_TRUNCATED = -1        # fewer bytes than the header or than totalSize
    ERR_MAGIC = -2
    ERR_TOTAL_SIZE = -3
    ERR_BODY_LENGTH = -4
    ERR_TOPIC_LENGTH = -5
    ERR_PROPERTIES_LENGTH = -6
    ERR_LENGTH_MISMATCH = -7  # totalSize differs from the sum of the parts
    ERR_BODY_CRC = -8
    ERR_RECORD_CRC = -9       # 5.x __CRC32# property
    ERR_TOPIC = -10           # topic length past what Java reads (v1 > 127, v2 > 32767)
    ERR_PHYSICAL_OFFSET = -11 # scan_records with a base offset: physicalOffset is not the record's position


# A record's fields, parsed in place; *_pos are offsets from the record start.
cdef struct RecordView:
    int32_t total_size
    int32_t magic
    int32_t body_crc
    int32_t queue_id
    int32_t flag
    int64_t queue_offset
    int64_t physical_offset
    int32_t sys_flag
    int64_t born_timestamp
    int32_t born_host_pos
    int32_t born_host_len
    int64_t store_timestamp
    int32_t store_host_pos
    int32_t store_host_len
    int32_t reconsume_times
    int64_t prepared_transaction_offset
    int32_t body_pos
    int32_t body_len
    int32_t topic_pos
    int32_t topic_len
    int32_t props_pos
    int32_t props_len


# The properties dispatch reads (value positions from the properties' start; pos -1: absent), found in one walk.
cdef struct DispatchProps:
    int32_t tags_pos
    int32_t tags_len
    int32_t keys_pos
    int32_t keys_len
    int32_t uniq_pos
    int32_t uniq_len
    int32_t delay_pos
    int32_t delay_len


cdef int parse_record(const unsigned char *p, int64_t avail, RecordView *rv, bint check_crc) noexcept nogil
cdef int topic_dispatchable(const unsigned char *t, int32_t n) noexcept nogil
cdef int record_dispatchable(const unsigned char *rec, const RecordView *rv) noexcept nogil
cdef void dispatch_properties(const unsigned char *props, int32_t props_len, DispatchProps *out) noexcept nogil
cdef int64_t tags_code_of(const unsigned char *props, int32_t props_len) noexcept nogil
cdef bint find_property(const unsigned char *props, int32_t props_len, const char *name, int32_t name_len,
                        int32_t *value_pos, int32_t *value_len) noexcept nogil


cdef class _Buffer:
    cdef Py_buffer view
    cdef bint held
    cdef int acquire(self, obj) except -1
    cdef void release(self)


# Shared with the modules above this one (the message types, the encoder): not part of the Python API.
cdef dict _parse_properties(const unsigned char *props, int32_t props_len)
cdef str _host_str(const unsigned char *p, int32_t n)
cdef void _hex_into(char *o, const unsigned char *p, Py_ssize_t n) noexcept nogil
cdef str _hex_upper(const unsigned char *p, Py_ssize_t n)
cdef str _offset_msg_id(bytes store_host, int64_t offset)


# -- small helpers every encoder of records shares (inline: _codec, _schedule) ------------------------------------

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk_id, timespec *tp)
    int CLOCK_REALTIME


cdef inline int64_t now_ms() noexcept nogil:
    # System.currentTimeMillis()
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef inline int32_t next_pair(const unsigned char *props, int32_t props_len, int32_t index, int32_t *name_len,
                              int32_t *value_pos, int32_t *value_len) noexcept nogil:
    # One step of MessageDecoder.string2messageProperties over the pair starting at ``index``: split at \x02, then
    # at the first \x01; the pair counts (name_len > 0) only with a non-empty name and value. Returns where the
    # next pair starts.
    cdef int32_t nxt = rmq_find_byte(props, index, props_len, 2)
    cdef int32_t kv
    if nxt < 0:
        nxt = props_len
    kv = rmq_find_byte(props, index, nxt, 1)
    if kv > index and kv < nxt - 1:
        name_len[0] = kv - index
        value_pos[0] = kv + 1
        value_len[0] = nxt - kv - 1
    else:
        name_len[0] = 0
    return nxt + 1


cdef inline unsigned char *put_pair(unsigned char *q, const unsigned char *k, Py_ssize_t kn,
                                    const unsigned char *v, Py_ssize_t vn) noexcept nogil:
    # name \x01 value \x02 (MessageDecoder.messageProperties2String)
    memcpy(q, k, <size_t>kn)
    q[kn] = 1
    if vn:
        memcpy(q + kn + 1, v, <size_t>vn)
    q[kn + 1 + vn] = 2
    return q + kn + vn + 2


cdef inline unsigned char *put_crc_placeholder(unsigned char *q) noexcept nogil:
    # "__CRC32#" \x01 + 10 digits + \x02 (CRC32_RESERVED_LEN): the digits are set once the per-put fields are.
    memcpy(q, "__CRC32#\x010000000000\x02", CRC32_RESERVED_LEN)
    return q + CRC32_RESERVED_LEN


cdef inline int32_t cal_msg_length_c(int version, int32_t sys_flag, int32_t body_len, int32_t topic_len,
                                     int32_t props_len) noexcept nogil:
    # MessageExtEncoder.calMsgLength
    cdef int32_t born = 8 if (sys_flag & FLAG_BORNHOST_V6) == 0 else 20
    cdef int32_t store = 8 if (sys_flag & FLAG_STOREHOSTADDRESS_V6) == 0 else 20
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8
            + 4 + body_len + (1 if version == 1 else 2) + topic_len + 2 + props_len)
