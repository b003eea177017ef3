/* CRC-32 (IEEE 802.3, reflected poly 0xEDB88320) for legacy magic 0/1 messages and
 * CRC-32C (Castagnoli, reflected poly 0x82F63B78) for magic 2 record batches.
 *
 * Plain C, no Python.h: safe to call without the GIL. Every function takes the running
 * CRC value (0 to start) and returns the updated one, so a buffer may be fed in pieces:
 *   pk_crc32c(pk_crc32c(0, a, n), b, m) == pk_crc32c(0, a||b, n+m).
 * The accelerated path (SSE4.2 crc32 for CRC-32C, PCLMULQDQ folding for CRC-32) is chosen
 * once at run time; the *_portable functions always use the table path (tests compare both).
 */
#ifndef PYKFK_CRC32_H
#define PYKFK_CRC32_H

#include <stddef.h>
#include <stdint.h>

uint32_t pk_crc32(uint32_t crc, const void *buf, size_t len);
uint32_t pk_crc32c(uint32_t crc, const void *buf, size_t len);

uint32_t pk_crc32_portable(uint32_t crc, const void *buf, size_t len);
uint32_t pk_crc32c_portable(uint32_t crc, const void *buf, size_t len);

/* Bit set of the accelerations in use: PK_CRC_HW_SSE42, PK_CRC_HW_PCLMUL. */
#define PK_CRC_HW_SSE42 1
#define PK_CRC_HW_PCLMUL 2
int pk_crc_hw_features(void);

#endif
