# Columnar decoding of commitlog segments: records → numpy arrays and Arrow-layout buffers (offsets + data +
# validity bitmaps), for rmqcore.spark. No pyarrow here: the core never imports it.
from libc.stdint cimport int32_t, int64_t, uint8_t

from rmqcore._codec cimport RecordView

cdef enum:
    # Column bits for decode_segment's ``columns`` mask (the order of SEGMENT_COLUMNS).
    COL_TOPIC = 1 << 0
    COL_QUEUE_ID = 1 << 1
    COL_QUEUE_OFFSET = 1 << 2
    COL_COMMITLOG_OFFSET = 1 << 3
    COL_STORE_SIZE = 1 << 4
    COL_STORE_TIMESTAMP = 1 << 5
    COL_BORN_TIMESTAMP = 1 << 6
    COL_BORN_HOST = 1 << 7
    COL_STORE_HOST = 1 << 8
    COL_SYS_FLAG = 1 << 9
    COL_FLAG = 1 << 10
    COL_RECONSUME_TIMES = 1 << 11
    COL_PREPARED_TRANSACTION_OFFSET = 1 << 12
    COL_BODY_CRC = 1 << 13
    COL_CRC_OK = 1 << 14
    COL_TAGS = 1 << 15
    COL_KEYS = 1 << 16
    COL_UNIQ_KEY = 1 << 17
    COL_PROPERTIES = 1 << 18
    COL_BODY = 1 << 19
    COL_POSITION = 1 << 20      # the record's global offset as found by the walk (verify, point reads)


# One accepted row of a batch: where its record is and what parse_record saw (pass 1 keeps it for pass 2).
cdef struct RowRef:
    int64_t pos                 # record start inside the scanned buffer
    RecordView rv
    uint8_t crc_state           # 0 bad, 1 good, 2 not checked
