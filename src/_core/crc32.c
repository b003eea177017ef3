/* Table-driven CRC-32 / CRC-32C. See crc32.h for the contract. */
#include "crc32.h"

static uint32_t crc32_table[256];
static uint32_t crc32c_table[256];
static int tables_ready;

static void build_tables(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t a = n, b = n;
        for (int k = 0; k < 8; k++) {
            a = (a & 1) ? (a >> 1) ^ 0xEDB88320u : a >> 1;
            b = (b & 1) ? (b >> 1) ^ 0x82F63B78u : b >> 1;
        }
        crc32_table[n] = a;
        crc32c_table[n] = b;
    }
    tables_ready = 1;
}

static uint32_t table_crc(const uint32_t *table, uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = (const uint8_t *)buf;
    if (!tables_ready)
        build_tables();
    crc = ~crc;
    while (len--)
        crc = table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

uint32_t pk_crc32_portable(uint32_t crc, const void *buf, size_t len)
{
    return table_crc(crc32_table, crc, buf, len);
}

uint32_t pk_crc32c_portable(uint32_t crc, const void *buf, size_t len)
{
    return table_crc(crc32c_table, crc, buf, len);
}

uint32_t pk_crc32(uint32_t crc, const void *buf, size_t len)
{
    return pk_crc32_portable(crc, buf, len);
}

uint32_t pk_crc32c(uint32_t crc, const void *buf, size_t len)
{
    return pk_crc32c_portable(crc, buf, len);
}

int pk_crc_hw_features(void) { return 0; }
