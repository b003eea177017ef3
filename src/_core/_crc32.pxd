# Declarations only (no runtime import): the C CRC functions of crc32.h.
from libc.stdint cimport uint32_t

cdef extern from "crc32.h" nogil:
    uint32_t pk_crc32(uint32_t crc, const void *buf, size_t length)
    uint32_t pk_crc32c(uint32_t crc, const void *buf, size_t length)
    uint32_t pk_crc32_portable(uint32_t crc, const void *buf, size_t length)
    uint32_t pk_crc32c_portable(uint32_t crc, const void *buf, size_t length)
    int pk_crc_hw_features()
    int PK_CRC_HW_SSE42
    int PK_CRC_HW_PCLMUL
