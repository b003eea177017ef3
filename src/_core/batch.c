/* Magic 2 batch framing checks. Layout and contract: batch.h.
 *
 * Bounds discipline: every pointer `p` stays within [start, end]; a length read from the
 * bytes is compared with `end - p` (as ptrdiff_t / size_t, never after adding it to p)
 * before the bytes it covers are touched. */
#include <stdio.h>
#include "batch.h"
#include "crc32.h"

static int fail(pk_batch_error *err, const char *field, size_t offset, const char *message)
{
    if (err) {
        err->field = field;
        err->offset = offset;
        snprintf(err->message, sizeof err->message, "%s", message);
    }
    return PK_BATCH_CORRUPT;
}

/* Varint readers used by the record walk: the one-byte case (most lengths, deltas and
 * counts) is decided inline, the rest goes to the general loop. Same results as the
 * exported pk_read_varint / pk_read_varlong. */
static size_t read_varlong_slow(const uint8_t *p, const uint8_t *end, int64_t *out);
static size_t read_varint_slow(const uint8_t *p, const uint8_t *end, int32_t *out);

static inline size_t read_varint(const uint8_t *p, const uint8_t *end, int32_t *out)
{
    if (p < end && !(p[0] & 0x80)) {
        *out = (int32_t)(p[0] >> 1) ^ -(int32_t)(p[0] & 1);
        return 1;
    }
    if (end - p >= 2 && !(p[1] & 0x80)) { /* 64 .. 8191: record and value lengths */
        uint32_t raw = (uint32_t)(p[0] & 0x7F) | ((uint32_t)p[1] << 7);
        *out = (int32_t)(raw >> 1) ^ -(int32_t)(raw & 1);
        return 2;
    }
    return read_varint_slow(p, end, out);
}

static inline size_t read_varlong(const uint8_t *p, const uint8_t *end, int64_t *out)
{
    if (p < end && !(*p & 0x80)) {
        *out = (int64_t)(*p >> 1) ^ -(int64_t)(*p & 1);
        return 1;
    }
    return read_varlong_slow(p, end, out);
}

size_t pk_read_varlong(const uint8_t *p, const uint8_t *end, int64_t *out)
{
    return read_varlong(p, end, out);
}

size_t pk_read_varint(const uint8_t *p, const uint8_t *end, int32_t *out)
{
    return read_varint(p, end, out);
}

static size_t read_varlong_slow(const uint8_t *p, const uint8_t *end, int64_t *out)
{
    uint64_t raw = 0;
    for (size_t i = 0; i < 10 && p + i < end; i++) {
        raw |= (uint64_t)(p[i] & 0x7F) << (7 * i);
        if (!(p[i] & 0x80)) {
            if (i == 9 && p[i] > 1) /* the 10th byte holds only bit 63 */
                return 0;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return i + 1;
        }
    }
    return 0;
}

static size_t read_varint_slow(const uint8_t *p, const uint8_t *end, int32_t *out)
{
    uint32_t raw = 0;
    for (size_t i = 0; i < 5 && p + i < end; i++) {
        raw |= (uint32_t)(p[i] & 0x7F) << (7 * i);
        if (!(p[i] & 0x80)) {
            if (i == 4 && p[i] > 0x0F) /* the 5th byte holds only bits 28-31 */
                return 0;
            *out = (int32_t)(raw >> 1) ^ -(int32_t)(raw & 1);
            return i + 1;
        }
    }
    return 0;
}

size_t pk_write_varlong(uint8_t *out, int64_t v)
{
    uint64_t raw = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    size_t n = 0;
    while (raw >= 0x80) {
        out[n++] = (uint8_t)(raw | 0x80);
        raw >>= 7;
    }
    out[n++] = (uint8_t)raw;
    return n;
}

size_t pk_write_varint(uint8_t *out, int32_t v)
{
    return pk_write_varlong(out, v); /* same bytes: zigzag of a sign-extended int32 */
}

size_t pk_varlong_size(int64_t v)
{
    uint64_t raw = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    size_t n = 1;
    while (raw >= 0x80) {
        raw >>= 7;
        n++;
    }
    return n;
}

size_t pk_varint_size(int32_t v)
{
    return pk_varlong_size(v);
}

int pk_batch_parse_header(const uint8_t *buf, size_t avail, pk_batch_header *h, pk_batch_error *err)
{
    if (avail < PK_BATCH_HEADER_SIZE) {
        /* Enough to judge length and magic early? Reject what can never be a batch. */
        if (avail > PK_BATCH_MAGIC && buf[PK_BATCH_MAGIC] != 2)
            return fail(err, "magic", PK_BATCH_MAGIC, "unsupported magic byte (expected 2)");
        if (avail >= PK_BATCH_LEADER_EPOCH &&
            (int32_t)pk_load_u32(buf + PK_BATCH_LENGTH) < PK_BATCH_HEADER_SIZE - PK_BATCH_LOG_OVERHEAD)
            return fail(err, "batch_length", PK_BATCH_LENGTH, "batch_length smaller than a batch header");
        return PK_BATCH_INCOMPLETE;
    }
    h->base_offset = (int64_t)pk_load_u64(buf + PK_BATCH_BASE_OFFSET);
    h->batch_length = (int32_t)pk_load_u32(buf + PK_BATCH_LENGTH);
    h->partition_leader_epoch = (int32_t)pk_load_u32(buf + PK_BATCH_LEADER_EPOCH);
    h->magic = (int8_t)buf[PK_BATCH_MAGIC];
    h->crc = pk_load_u32(buf + PK_BATCH_CRC);
    h->attributes = (int16_t)pk_load_u16(buf + PK_BATCH_ATTRIBUTES);
    h->last_offset_delta = (int32_t)pk_load_u32(buf + PK_BATCH_LAST_OFFSET_DELTA);
    h->base_timestamp = (int64_t)pk_load_u64(buf + PK_BATCH_BASE_TIMESTAMP);
    h->max_timestamp = (int64_t)pk_load_u64(buf + PK_BATCH_MAX_TIMESTAMP);
    h->producer_id = (int64_t)pk_load_u64(buf + PK_BATCH_PRODUCER_ID);
    h->producer_epoch = (int16_t)pk_load_u16(buf + PK_BATCH_PRODUCER_EPOCH);
    h->base_sequence = (int32_t)pk_load_u32(buf + PK_BATCH_BASE_SEQUENCE);
    h->records_count = (int32_t)pk_load_u32(buf + PK_BATCH_RECORDS_COUNT);
    /* magic first (a legacy message set is named as such), the same order as above */
    if (h->magic != 2)
        return fail(err, "magic", PK_BATCH_MAGIC, "unsupported magic byte (expected 2)");
    if (h->batch_length < PK_BATCH_HEADER_SIZE - PK_BATCH_LOG_OVERHEAD)
        return fail(err, "batch_length", PK_BATCH_LENGTH, "batch_length smaller than a batch header");
    return PK_BATCH_OK;
}

/* Reads a length-prefixed field (key, value, header key/value) at *pp: the varint length,
 * then skips that many bytes. min_length is -1 where null is allowed, 0 where not. */
static inline int read_span(const uint8_t *area, const uint8_t **pp, const uint8_t *end, int32_t min_length,
                     int32_t *length, size_t *pos, const char *field, pk_batch_error *err)
{
    const uint8_t *p = *pp;
    size_t n = read_varint(p, end, length);
    if (!n)
        return fail(err, field, (size_t)(p - area), "bad length varint");
    if (*length < min_length)
        return fail(err, field, (size_t)(p - area), "negative length");
    if (*length > 0 && (size_t)*length > (size_t)(end - p) - n)
        return fail(err, field, (size_t)(p - area), "length runs past the end of the record");
    *pos = (size_t)(p + n - area);
    *pp = p + n + (*length > 0 ? *length : 0);
    return PK_BATCH_OK;
}

static inline int record_parse(const uint8_t *area, const uint8_t *p, const uint8_t *end,
                               pk_record *r, pk_batch_error *err);

int pk_record_parse(const uint8_t *area, const uint8_t *p, const uint8_t *end, pk_record *r,
                    pk_batch_error *err)
{
    return record_parse(area, p, end, r, err);
}

static inline int record_parse(const uint8_t *area, const uint8_t *p, const uint8_t *end,
                               pk_record *r, pk_batch_error *err)
{
    const uint8_t *start = p;
    int32_t rec_len;
    size_t n = read_varint(p, end, &rec_len);
    if (!n)
        return fail(err, "record.length", (size_t)(p - area), "bad record length varint");
    if (rec_len < 1 || (size_t)rec_len > (size_t)(end - p) - n)
        return fail(err, "record.length", (size_t)(p - area), "record length out of bounds");
    p += n;
    const uint8_t *rec_end = p + rec_len;
    r->attributes = (int8_t)*p++;
    if (!(n = read_varlong(p, rec_end, &r->timestamp_delta)))
        return fail(err, "record.timestamp_delta", (size_t)(p - area), "bad timestamp_delta varint");
    p += n;
    if (!(n = read_varint(p, rec_end, &r->offset_delta)))
        return fail(err, "record.offset_delta", (size_t)(p - area), "bad offset_delta varint");
    p += n;
    if (read_span(area, &p, rec_end, -1, &r->key_length, &r->key_pos, "record.key", err))
        return PK_BATCH_CORRUPT;
    if (read_span(area, &p, rec_end, -1, &r->value_length, &r->value_pos, "record.value", err))
        return PK_BATCH_CORRUPT;
    if (!(n = read_varint(p, rec_end, &r->headers_count)) || r->headers_count < 0)
        return fail(err, "record.headers", (size_t)(p - area), "bad header count");
    p += n;
    r->headers_pos = (size_t)(p - area);
    /* Each header takes at least two bytes, and every read below is bounded by rec_end,
     * so a huge headers_count fails after at most rec_len / 2 rounds. */
    for (int32_t k = 0; k < r->headers_count; k++) {
        int32_t length;
        size_t pos;
        if (read_span(area, &p, rec_end, 0, &length, &pos, "record.header.key", err))
            return PK_BATCH_CORRUPT;
        if (read_span(area, &p, rec_end, -1, &length, &pos, "record.header.value", err))
            return PK_BATCH_CORRUPT;
    }
    if (p != rec_end)
        return fail(err, "record.length", (size_t)(start - area), "record length does not match its fields");
    r->size = (size_t)(rec_end - start);
    return PK_BATCH_OK;
}

/* The record walk's fast path: one record whose varints are all 1 or 2 bytes long, checked
 * with as few dependent steps as the format allows (the bytes of a varint are read
 * together, branches follow the common lengths, one bounds test per span). It only ever
 * accepts: anything else (a longer varint, a negative length, a null header key, a span
 * past the record, a record too near the readable end for the two-byte reads) returns
 * NULL and the record goes through record_parse, which gives the verdict and the precise
 * error.
 *
 * Reads may run a few bytes past rec_end (never past `limit`, the end of readable
 * memory): a record is taken only when limit - rec_end >= PK_WALK_SLACK, and no read
 * reaches rec_end + 6 (at worst the timestamp, offset_delta and key length varints, two
 * bytes each, follow the attributes byte before the first bounds test). A byte past rec_end
 * can only be used by a varint that ends past rec_end, which leaves p > rec_end; p never
 * moves back, so such a record fails the span tests or the final p == rec_end. */
enum { PK_WALK_SLACK = 8 };

/* Raw (still zigzag-encoded) varint of 1 or 2 bytes at p into *raw; returns the byte
 * count, 0 for a longer varint. */
static inline __attribute__((always_inline)) size_t raw_varint2(const uint8_t *p, uint32_t *raw)
{
    if (__builtin_expect(!(p[0] & 0x80), 1)) {
        *raw = p[0];
        return 1;
    }
    if (__builtin_expect(!(p[1] & 0x80), 1)) {
        *raw = (uint32_t)(p[0] & 0x7F) | ((uint32_t)p[1] << 7);
        return 2;
    }
    return 0;
}

/* Skips a length-prefixed span at *pp (key, value, header key/value). A zigzag raw
 * length of 1 is -1 (null, allowed where allow_null) and skips nothing, as raw >> 1 = 0;
 * other odd raws are negative and left to the slow path. */
static inline __attribute__((always_inline)) int skip_span2(const uint8_t **pp, const uint8_t *rec_end,
                                                            int allow_null)
{
    uint32_t raw;
    size_t n = raw_varint2(*pp, &raw);
    if (!n || ((raw & 1) && !(allow_null && raw == 1)))
        return 0;
    const uint8_t *p = *pp + n;
    if ((ptrdiff_t)(raw >> 1) > rec_end - p)
        return 0;
    *pp = p + (raw >> 1);
    return 1;
}

/* Returns the record's end, or NULL when the fast path cannot decide. *raw_delta gets
 * the offset_delta varint still zigzag-encoded. Needs p < fast_end, where fast_end =
 * min(end, limit - PK_WALK_SLACK). */
static inline __attribute__((always_inline)) const uint8_t *record_fast(const uint8_t *p, const uint8_t *fast_end,
                                                                        uint32_t *raw_delta)
{
    uint32_t raw;
    size_t n;
    if (!(n = raw_varint2(p, &raw)) || (raw & 1) || raw == 0)
        return NULL;
    p += n;
    size_t rec_len = raw >> 1;
    if ((ptrdiff_t)rec_len > fast_end - p)
        return NULL;
    const uint8_t *rec_end = p + rec_len;
    p++; /* attributes: any value */
    if (!(n = raw_varint2(p, &raw))) /* timestamp_delta: any value of 1-2 bytes */
        return NULL;
    p += n;
    if (!(n = raw_varint2(p, raw_delta)))
        return NULL;
    p += n;
    if (!skip_span2(&p, rec_end, 1) || !skip_span2(&p, rec_end, 1))
        return NULL;
    if (!(n = raw_varint2(p, &raw)) || (raw & 1))
        return NULL;
    p += n;
    /* each header takes at least two bytes and p stays <= rec_end after each: bounded */
    for (uint32_t k = raw >> 1; k; k--) {
        if (!skip_span2(&p, rec_end, 0) || !skip_span2(&p, rec_end, 1))
            return NULL;
    }
    return p == rec_end ? rec_end : NULL;
}

/* pk_records_check_ex over [p, end) where bytes up to `limit` (>= end) may be read. */
static int records_walk(const uint8_t *p, const uint8_t *end, const uint8_t *limit, int32_t count,
                        int32_t last_delta, int checks, pk_batch_error *err)
{
    const uint8_t *start = p;
    /* records must end by fast_end = min(end, limit - PK_WALK_SLACK) to take the fast path */
    const uint8_t *fast_end = (size_t)(limit - end) >= PK_WALK_SLACK ? end
                              : (size_t)(limit - p) > PK_WALK_SLACK ? limit - PK_WALK_SLACK : p;
    int64_t prev_delta = -1;
    int client = (checks & PK_CHECK_CLIENT) != 0;
    pk_record r;
    /* count comes from the bytes: the loop ends at the first record that does not fit,
     * so 2^31-1 costs no more than the bytes actually present. */
    for (int32_t i = 0; i < count; i++) {
        if (__builtin_expect(p < fast_end, 1)) {
            uint32_t raw_delta;
            const uint8_t *next = record_fast(p, fast_end, &raw_delta);
            if (__builtin_expect(next != NULL, 1)) {
                int32_t delta = (int32_t)(raw_delta >> 1) ^ -(int32_t)(raw_delta & 1);
                if ((client ? raw_delta == 2 * (uint32_t)i : delta > prev_delta) &&
                    delta <= last_delta) {
                    prev_delta = delta;
                    p = next;
                    continue;
                }
            }
        }
        if (p == end)
            return fail(err, "records_count", (size_t)(p - start), "fewer records than records_count");
        if (record_parse(start, p, end, &r, err) != PK_BATCH_OK)
            return PK_BATCH_CORRUPT;
        /* r.size >= 2, and offset_delta sits after the length varint and attributes */
        size_t delta_at = (size_t)(p - start) + 1;
        if (client && r.offset_delta != i)
            return fail(err, "record.offset_delta", delta_at,
                        "offset_delta is not the record's index in the batch");
        if (r.offset_delta <= prev_delta || r.offset_delta > last_delta)
            return fail(err, "record.offset_delta", delta_at,
                        "offset_delta not increasing or beyond last_offset_delta");
        prev_delta = r.offset_delta;
        p += r.size;
    }
    if (p != end)
        return fail(err, "records_count", (size_t)(p - start), "bytes left after records_count records");
    return PK_BATCH_OK;
}

int pk_records_check_ex(const uint8_t *p, size_t len, int32_t count, int32_t last_delta,
                        int checks, pk_batch_error *err)
{
    return records_walk(p, p + len, p + len, count, last_delta, checks, err);
}

int pk_records_check(const uint8_t *p, size_t len, int32_t count, int32_t last_delta,
                     pk_batch_error *err)
{
    return pk_records_check_ex(p, len, count, last_delta, PK_CHECK_RECORDS, err);
}

int pk_batch_validate(const uint8_t *buf, size_t avail, size_t max_batch_size, int checks,
                      pk_batch_header *h, pk_batch_error *err)
{
    int rc = pk_batch_parse_header(buf, avail, h, err);
    if (rc != PK_BATCH_OK)
        return rc;
    size_t total = (size_t)h->batch_length + PK_BATCH_LOG_OVERHEAD;
    if (max_batch_size && total > max_batch_size)
        return fail(err, "batch_length", PK_BATCH_LENGTH, "batch larger than the allowed maximum");
    if (total > avail)
        return PK_BATCH_INCOMPLETE;
    uint32_t crc = pk_crc32c(0, buf + PK_BATCH_ATTRIBUTES, total - PK_BATCH_ATTRIBUTES);
    if (crc != h->crc)
        return fail(err, "crc", PK_BATCH_CRC, "CRC-32C mismatch");
    /* Field checks after the CRC: a batch with a bad CRC is reported as such (the usual
     * cause is a damaged byte, and Kafka answers CORRUPT_MESSAGE for it), while a batch
     * whose CRC matches but whose fields break the rules was written that way. */
    if ((h->attributes & PK_ATTR_CODEC_MASK) > PK_CODEC_MAX)
        return fail(err, "attributes", PK_BATCH_ATTRIBUTES, "unknown compression codec");
    if (h->records_count < 0)
        return fail(err, "records_count", PK_BATCH_RECORDS_COUNT, "negative records_count");
    if (h->last_offset_delta < 0)
        return fail(err, "last_offset_delta", PK_BATCH_LAST_OFFSET_DELTA, "negative last_offset_delta");
    /* Deltas are distinct and >= 0, so n records need last_offset_delta >= n - 1. */
    if (h->last_offset_delta < h->records_count - 1)
        return fail(err, "last_offset_delta", PK_BATCH_LAST_OFFSET_DELTA,
                    "last_offset_delta smaller than records_count - 1");
    if (checks & PK_CHECK_CLIENT) {
        if (h->records_count < 1)
            return fail(err, "records_count", PK_BATCH_RECORDS_COUNT, "batch has no records");
        if (h->last_offset_delta != h->records_count - 1)
            return fail(err, "last_offset_delta", PK_BATCH_LAST_OFFSET_DELTA,
                        "last_offset_delta is not records_count - 1");
    }
    if ((checks & PK_CHECK_RECORDS) && (h->attributes & PK_ATTR_CODEC_MASK) == 0) {
        /* bytes of the following batches (up to avail) may be read, not used: see record_fast */
        rc = records_walk(buf + PK_BATCH_HEADER_SIZE, buf + total, buf + avail,
                          h->records_count, h->last_offset_delta, checks, err);
        if (rc != PK_BATCH_OK) {
            if (err)
                err->offset += PK_BATCH_HEADER_SIZE;
            return rc;
        }
    }
    return PK_BATCH_OK;
}
