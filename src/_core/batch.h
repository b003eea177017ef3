/* Magic 2 record batch framing: header parse and validation, plain C over raw bytes.
 *
 * RecordBatch (apache/kafka DefaultRecordBatch), all integers big-endian:
 *
 *   offset  size  field
 *    0      8     base_offset              \ not covered by the CRC: the broker assigns
 *    8      4     batch_length              | base_offset and partition_leader_epoch in
 *   12      4     partition_leader_epoch   /  place without recomputing it
 *   16      1     magic (2)
 *   17      4     crc (CRC-32C of bytes 21 .. end of batch)
 *   21      2     attributes  bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd),
 *                             bit 3 timestamp type (1 = LogAppendTime), bit 4 transactional,
 *                             bit 5 control
 *   23      4     last_offset_delta
 *   27      8     base_timestamp
 *   35      8     max_timestamp
 *   43      8     producer_id
 *   51      2     producer_epoch
 *   53      4     base_sequence
 *   57      4     records_count
 *   61      ...   records (compressed as one block when codec != 0)
 *
 * batch_length counts the bytes after the batch_length field, so a batch occupies
 * 12 + batch_length bytes. Legacy messages (magic 0/1) put magic at the same byte 16.
 *
 * Record (inside the records area, uncompressed):
 *   length varint, attributes int8, timestamp_delta varlong, offset_delta varint,
 *   key_length varint (-1 = null), key, value_length varint (-1 = null), value,
 *   headers_count varint, then per header: key_length varint, key, value_length varint, value
 * (varints are zigzag-encoded signed protobuf varints).
 */
#ifndef PYKFK_BATCH_H
#define PYKFK_BATCH_H

#include <stddef.h>
#include <stdint.h>

enum {
    PK_BATCH_BASE_OFFSET = 0,
    PK_BATCH_LENGTH = 8,
    PK_BATCH_LEADER_EPOCH = 12,
    PK_BATCH_MAGIC = 16,
    PK_BATCH_CRC = 17,
    PK_BATCH_ATTRIBUTES = 21,
    PK_BATCH_LAST_OFFSET_DELTA = 23,
    PK_BATCH_BASE_TIMESTAMP = 27,
    PK_BATCH_MAX_TIMESTAMP = 35,
    PK_BATCH_PRODUCER_ID = 43,
    PK_BATCH_PRODUCER_EPOCH = 51,
    PK_BATCH_BASE_SEQUENCE = 53,
    PK_BATCH_RECORDS_COUNT = 57,
    PK_BATCH_HEADER_SIZE = 61,
    /* bytes before batch_length's coverage starts: base_offset + batch_length */
    PK_BATCH_LOG_OVERHEAD = 12,
    PK_ATTR_CODEC_MASK = 0x07,
    PK_ATTR_TIMESTAMP_TYPE = 0x08,
    PK_ATTR_TRANSACTIONAL = 0x10,
    PK_ATTR_CONTROL = 0x20,
};

typedef struct {
    int64_t base_offset;
    int32_t batch_length;
    int32_t partition_leader_epoch;
    int8_t magic;
    uint32_t crc;
    int16_t attributes;
    int32_t last_offset_delta;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t records_count;
} pk_batch_header;

/* Where and why a batch was rejected. `offset` is relative to the batch start. */
typedef struct {
    const char *field;
    size_t offset;
    char message[160];
} pk_batch_error;

enum {
    PK_BATCH_OK = 0,
    PK_BATCH_INCOMPLETE = 1, /* fewer bytes than the header or batch_length promise */
    PK_BATCH_CORRUPT = -1,   /* the bytes can never form a valid batch */
};

/* Big-endian loads and stores that work at any alignment. */
static inline uint16_t pk_load_u16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t pk_load_u32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t pk_load_u64(const uint8_t *p)
{
    return ((uint64_t)pk_load_u32(p) << 32) | pk_load_u32(p + 4);
}
static inline void pk_store_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline void pk_store_u64(uint8_t *p, uint64_t v)
{
    pk_store_u32(p, (uint32_t)(v >> 32));
    pk_store_u32(p + 4, (uint32_t)v);
}

/* Reads the fixed 61-byte header. Checks only that enough bytes are there, that
 * batch_length is at least the header's share and magic is 2 (CORRUPT otherwise).
 * Returns PK_BATCH_INCOMPLETE when avail < 61. */
int pk_batch_parse_header(const uint8_t *buf, size_t avail, pk_batch_header *h, pk_batch_error *err);

/* Full check of one batch at buf: header, length within max_batch_size (0 = no limit),
 * CRC-32C, and when check_records is set and the batch is uncompressed, the record
 * framing (record count, varint lengths, offset deltas, every byte accounted for).
 * Returns PK_BATCH_OK, PK_BATCH_INCOMPLETE (buffer ends inside the batch) or
 * PK_BATCH_CORRUPT with err filled in. */
int pk_batch_validate(const uint8_t *buf, size_t avail, size_t max_batch_size, int check_records,
                      pk_batch_header *h, pk_batch_error *err);

/* Walks the uncompressed records area [p, p+len) of a batch that claims `count` records
 * with last_offset_delta `last_delta`. Offsets in err are relative to p. */
int pk_records_check(const uint8_t *p, size_t len, int32_t count, int32_t last_delta,
                     pk_batch_error *err);

/* Reads a zigzag varint (up to 32 bits) / varlong at p, not past end. Returns the
 * number of bytes consumed, 0 when the varint is truncated or too long. */
size_t pk_read_varint(const uint8_t *p, const uint8_t *end, int32_t *out);
size_t pk_read_varlong(const uint8_t *p, const uint8_t *end, int64_t *out);

#endif
