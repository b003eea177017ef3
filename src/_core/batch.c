/* Magic 2 batch framing checks. Layout and contract: batch.h. */
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

size_t pk_read_varlong(const uint8_t *p, const uint8_t *end, int64_t *out)
{
    uint64_t raw = 0;
    for (size_t i = 0; i < 10 && p + i < end; i++) {
        raw |= (uint64_t)(p[i] & 0x7F) << (7 * i);
        if (!(p[i] & 0x80)) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return i + 1;
        }
    }
    return 0;
}

size_t pk_read_varint(const uint8_t *p, const uint8_t *end, int32_t *out)
{
    uint32_t raw = 0;
    for (size_t i = 0; i < 5 && p + i < end; i++) {
        raw |= (uint32_t)(p[i] & 0x7F) << (7 * i);
        if (!(p[i] & 0x80)) {
            *out = (int32_t)(raw >> 1) ^ -(int32_t)(raw & 1);
            return i + 1;
        }
    }
    return 0;
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
    if (h->magic != 2)
        return fail(err, "magic", PK_BATCH_MAGIC, "unsupported magic byte (expected 2)");
    if (h->batch_length < PK_BATCH_HEADER_SIZE - PK_BATCH_LOG_OVERHEAD)
        return fail(err, "batch_length", PK_BATCH_LENGTH, "batch_length smaller than a batch header");
    return PK_BATCH_OK;
}

int pk_records_check(const uint8_t *p, size_t len, int32_t count, int32_t last_delta,
                     pk_batch_error *err)
{
    const uint8_t *start = p, *end = p + len;
    int64_t prev_delta = -1;
    for (int32_t i = 0; i < count; i++) {
        int32_t rec_len, offset_delta, klen, vlen, nheaders;
        int64_t ts_delta;
        size_t n = pk_read_varint(p, end, &rec_len);
        if (!n || rec_len < 1 || (size_t)rec_len > (size_t)(end - p - n))
            return fail(err, "record.length", (size_t)(p - start), "record length out of bounds");
        p += n;
        const uint8_t *rec_end = p + rec_len;
        p += 1; /* record attributes (unused) */
        if (!(n = pk_read_varlong(p, rec_end, &ts_delta)))
            return fail(err, "record.timestamp_delta", (size_t)(p - start), "bad timestamp_delta varint");
        p += n;
        if (!(n = pk_read_varint(p, rec_end, &offset_delta)))
            return fail(err, "record.offset_delta", (size_t)(p - start), "bad offset_delta varint");
        if (offset_delta <= prev_delta || offset_delta > last_delta)
            return fail(err, "record.offset_delta", (size_t)(p - start),
                        "offset_delta not increasing or beyond last_offset_delta");
        prev_delta = offset_delta;
        p += n;
        if (!(n = pk_read_varint(p, rec_end, &klen)) || klen < -1 || (klen > 0 && klen > rec_end - p - (ptrdiff_t)n))
            return fail(err, "record.key", (size_t)(p - start), "key length out of bounds");
        p += n + (klen > 0 ? klen : 0);
        if (!(n = pk_read_varint(p, rec_end, &vlen)) || vlen < -1 || (vlen > 0 && vlen > rec_end - p - (ptrdiff_t)n))
            return fail(err, "record.value", (size_t)(p - start), "value length out of bounds");
        p += n + (vlen > 0 ? vlen : 0);
        if (!(n = pk_read_varint(p, rec_end, &nheaders)) || nheaders < 0)
            return fail(err, "record.headers", (size_t)(p - start), "bad header count");
        p += n;
        for (int32_t k = 0; k < nheaders; k++) {
            int32_t hk, hv;
            if (!(n = pk_read_varint(p, rec_end, &hk)) || hk < 0 || hk > rec_end - p - (ptrdiff_t)n)
                return fail(err, "record.header.key", (size_t)(p - start), "header key length out of bounds");
            p += n + hk;
            if (!(n = pk_read_varint(p, rec_end, &hv)) || hv < -1 || (hv > 0 && hv > rec_end - p - (ptrdiff_t)n))
                return fail(err, "record.header.value", (size_t)(p - start), "header value length out of bounds");
            p += n + (hv > 0 ? hv : 0);
        }
        if (p != rec_end)
            return fail(err, "record.length", (size_t)(p - start), "record length does not match its fields");
    }
    if (p != end)
        return fail(err, "records_count", (size_t)(p - start), "bytes left after records_count records");
    return PK_BATCH_OK;
}

int pk_batch_validate(const uint8_t *buf, size_t avail, size_t max_batch_size, int check_records,
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
    if (h->records_count < 0)
        return fail(err, "records_count", PK_BATCH_RECORDS_COUNT, "negative records_count");
    if (h->last_offset_delta < 0)
        return fail(err, "last_offset_delta", PK_BATCH_LAST_OFFSET_DELTA, "negative last_offset_delta");
    uint32_t crc = pk_crc32c(0, buf + PK_BATCH_ATTRIBUTES, total - PK_BATCH_ATTRIBUTES);
    if (crc != h->crc)
        return fail(err, "crc", PK_BATCH_CRC, "CRC-32C mismatch");
    if (check_records && (h->attributes & PK_ATTR_CODEC_MASK) == 0) {
        /* Each record takes at least 7 bytes, which bounds a lying records_count. */
        rc = pk_records_check(buf + PK_BATCH_HEADER_SIZE, total - PK_BATCH_HEADER_SIZE,
                              h->records_count, h->last_offset_delta, err);
        if (rc != PK_BATCH_OK) {
            if (err)
                err->offset += PK_BATCH_HEADER_SIZE;
            return rc;
        }
    }
    return PK_BATCH_OK;
}
