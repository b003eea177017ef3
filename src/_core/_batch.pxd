# Declarations only (no runtime import): magic 2 batch framing from batch.h.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "batch.h" nogil:
    enum:
        PK_BATCH_BASE_OFFSET
        PK_BATCH_LENGTH
        PK_BATCH_LEADER_EPOCH
        PK_BATCH_MAGIC
        PK_BATCH_CRC
        PK_BATCH_ATTRIBUTES
        PK_BATCH_LAST_OFFSET_DELTA
        PK_BATCH_BASE_TIMESTAMP
        PK_BATCH_MAX_TIMESTAMP
        PK_BATCH_PRODUCER_ID
        PK_BATCH_PRODUCER_EPOCH
        PK_BATCH_BASE_SEQUENCE
        PK_BATCH_RECORDS_COUNT
        PK_BATCH_HEADER_SIZE
        PK_BATCH_LOG_OVERHEAD
        PK_ATTR_CODEC_MASK
        PK_ATTR_TIMESTAMP_TYPE
        PK_ATTR_TRANSACTIONAL
        PK_ATTR_CONTROL
        PK_CODEC_MAX
        PK_RECORD_MIN_SIZE
        PK_CHECK_RECORDS
        PK_CHECK_CLIENT
        PK_BATCH_OK
        PK_BATCH_INCOMPLETE
        PK_BATCH_CORRUPT

    ctypedef struct pk_batch_header:
        int64_t base_offset
        int32_t batch_length
        int32_t partition_leader_epoch
        int8_t magic
        uint32_t crc
        int16_t attributes
        int32_t last_offset_delta
        int64_t base_timestamp
        int64_t max_timestamp
        int64_t producer_id
        int16_t producer_epoch
        int32_t base_sequence
        int32_t records_count

    ctypedef struct pk_record:
        size_t size
        int8_t attributes
        int64_t timestamp_delta
        int32_t offset_delta
        int32_t key_length
        size_t key_pos
        int32_t value_length
        size_t value_pos
        int32_t headers_count
        size_t headers_pos

    ctypedef struct pk_batch_error:
        const char *field
        size_t offset
        char message[160]

    uint16_t pk_load_u16(const uint8_t *p)
    uint32_t pk_load_u32(const uint8_t *p)
    uint64_t pk_load_u64(const uint8_t *p)
    void pk_store_u16(uint8_t *p, uint16_t v)
    void pk_store_u32(uint8_t *p, uint32_t v)
    void pk_store_u64(uint8_t *p, uint64_t v)
    int pk_batch_parse_header(const uint8_t *buf, size_t avail, pk_batch_header *h,
                              pk_batch_error *err)
    # checks: PK_CHECK_RECORDS | PK_CHECK_CLIENT bits (1 = the historic check_records)
    int pk_batch_validate(const uint8_t *buf, size_t avail, size_t max_batch_size,
                          int checks, pk_batch_header *h, pk_batch_error *err)
    int pk_records_check(const uint8_t *p, size_t length, int32_t count, int32_t last_delta,
                         pk_batch_error *err)
    size_t pk_read_varint(const uint8_t *p, const uint8_t *end, int32_t *out)
    size_t pk_read_varlong(const uint8_t *p, const uint8_t *end, int64_t *out)
    int pk_records_check_ex(const uint8_t *p, size_t length, int32_t count, int32_t last_delta,
                            int checks, pk_batch_error *err)
    int pk_record_parse(const uint8_t *area, const uint8_t *p, const uint8_t *end,
                        pk_record *r, pk_batch_error *err)
    size_t pk_write_varint(uint8_t *out, int32_t v)
    size_t pk_write_varlong(uint8_t *out, int64_t v)
    size_t pk_varint_size(int32_t v)
    size_t pk_varlong_size(int64_t v)
