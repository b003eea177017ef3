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
 * (varints are zigzag-encoded signed protobuf varints). A varint field holds at most 5
 * bytes (32 bits), a varlong at most 10 (64 bits); longer or overflowing encodings are
 * rejected rather than truncated, so no two encodings of a field decode alike.
 *
 * Every check below reads only inside [buf, buf + avail): lengths taken from the bytes
 * are compared with the bytes left before they are used, so a lying length, a negative
 * length or a huge records_count ends in PK_BATCH_CORRUPT, never in a read past the end
 * or an allocation (nothing here allocates).
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
    /* highest codec id defined by Kafka (zstd); 5-7 are invalid */
    PK_CODEC_MAX = 4,
    /* smallest encoded record: length, attributes, timestamp_delta, offset_delta,
     * key_length, value_length, headers_count, one byte each */
    PK_RECORD_MIN_SIZE = 7,
    /* flag bits of pk_batch_validate's `checks` (1 keeps the old check_records=1 meaning) */
    PK_CHECK_RECORDS = 1,   /* walk the record framing of uncompressed batches */
    PK_CHECK_CLIENT = 2,    /* rules for batches straight from a producer (Kafka's
                               LogValidator): records_count >= 1, offset deltas exactly
                               0 .. records_count-1, last_offset_delta = records_count-1 */
};

/* One record of an uncompressed records area, as spans relative to the area start. */
typedef struct {
    size_t size;              /* bytes of the whole record, length varint included */
    int8_t attributes;
    int64_t timestamp_delta;
    int32_t offset_delta;
    int32_t key_length;       /* -1 = null key */
    size_t key_pos;
    int32_t value_length;     /* -1 = null value */
    size_t value_pos;
    int32_t headers_count;
    size_t headers_pos;       /* first header; headers end at the record end */
} pk_record;

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
static inline void pk_store_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v;
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
 * codec id (0-4), records_count and last_offset_delta not negative and consistent,
 * CRC-32C, and when `checks` has PK_CHECK_RECORDS (any odd value, so the historic
 * check_records=1 still means this) and the batch is uncompressed, the record framing
 * (record count, varint lengths, offset deltas, every byte accounted for).
 * PK_CHECK_CLIENT adds the producer rules described at its definition.
 * The record walk may read bytes after the batch, up to avail, to test two-byte varints
 * without a bounds check each; their values never change the verdict.
 * Returns PK_BATCH_OK, PK_BATCH_INCOMPLETE (buffer ends inside the batch; also when
 * fewer than 61 bytes are there) or PK_BATCH_CORRUPT with err filled in; a batch larger
 * than max_batch_size is CORRUPT with field "batch_length" even when incomplete. */
int pk_batch_validate(const uint8_t *buf, size_t avail, size_t max_batch_size, int checks,
                      pk_batch_header *h, pk_batch_error *err);

/* Walks the uncompressed records area [p, p+len) of a batch that claims `count` records
 * with last_offset_delta `last_delta`: offset deltas strictly increasing and at most
 * last_delta, every byte accounted for. Offsets in err are relative to p. */
int pk_records_check(const uint8_t *p, size_t len, int32_t count, int32_t last_delta,
                     pk_batch_error *err);

/* pk_records_check with PK_CHECK_CLIENT rules when `checks` has that bit. */
int pk_records_check_ex(const uint8_t *p, size_t len, int32_t count, int32_t last_delta,
                        int checks, pk_batch_error *err);

/* Parses the record at `p` (inside an area starting at `area` and ending at `end`) into r;
 * spans and error offsets are relative to `area`. Returns PK_BATCH_OK or PK_BATCH_CORRUPT. */
int pk_record_parse(const uint8_t *area, const uint8_t *p, const uint8_t *end, pk_record *r,
                    pk_batch_error *err);

/* Encodes v zigzag into out (room for 5 / 10 bytes); returns the byte count. */
size_t pk_write_varint(uint8_t *out, int32_t v);
size_t pk_write_varlong(uint8_t *out, int64_t v);
/* Encoded size of v as a zigzag varint / varlong. */
size_t pk_varint_size(int32_t v);
size_t pk_varlong_size(int64_t v);

/* Reads a zigzag varint (up to 32 bits) / varlong at p, not past end. Returns the
 * number of bytes consumed, 0 when the varint is truncated, longer than 5 / 10 bytes or
 * carries bits beyond 32 / 64. */
size_t pk_read_varint(const uint8_t *p, const uint8_t *end, int32_t *out);
size_t pk_read_varlong(const uint8_t *p, const uint8_t *end, int64_t *out);

#endif
