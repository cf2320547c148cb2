from libc.stdint cimport uint32_t

# RocketMQ's UtilAll.crc32 over raw bytes: CRC-32 (IEEE) masked to a non-negative Java int.
cdef uint32_t body_crc_ptr(const unsigned char *p, size_t n) noexcept nogil
