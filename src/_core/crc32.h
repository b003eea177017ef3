/* CRC-32 (IEEE 802.3, reflected poly 0xEDB88320) for legacy magic 0/1 messages and
 * CRC-32C (Castagnoli, reflected poly 0x82F63B78) for magic 2 record batches.
 *
 * Plain C, no Python.h: safe to call without the GIL. Every function takes the running
 * CRC value (0 to start) and returns the updated one, so a buffer may be fed in pieces:
 *   pk_crc32c(pk_crc32c(0, a, n), b, m) == pk_crc32c(0, a||b, n+m).
 * Any length, any alignment; buf may be NULL when len is 0. Thread-safe: the tables and
 * the choice of implementation are set up once, on first use, under pthread_once.
 * The accelerated path (SSE4.2 crc32 streams for CRC-32C, PCLMULQDQ folding for CRC-32,
 * VPCLMULQDQ when AVX-512 is there) is chosen at run time from the CPU's features; the
 * *_portable functions always use the slicing-by-8 tables (tests compare both).
 */
#ifndef PYKFK_CRC32_H
#define PYKFK_CRC32_H

#include <stddef.h>
#include <stdint.h>

uint32_t pk_crc32(uint32_t crc, const void *buf, size_t len);
uint32_t pk_crc32c(uint32_t crc, const void *buf, size_t len);

uint32_t pk_crc32_portable(uint32_t crc, const void *buf, size_t len);
uint32_t pk_crc32c_portable(uint32_t crc, const void *buf, size_t len);

/* Bit set of the accelerations in use (x86-64 only; 0 elsewhere):
 *   PK_CRC_HW_SSE42       crc32 instruction for CRC-32C
 *   PK_CRC_HW_PCLMUL      carry-less multiply: CRC-32 folding, joining CRC-32C streams
 *   PK_CRC_HW_VPCLMUL512  VPCLMULQDQ on AVX-512 registers: wide CRC-32 folding */
#define PK_CRC_HW_SSE42 1
#define PK_CRC_HW_PCLMUL 2
#define PK_CRC_HW_VPCLMUL512 4
int pk_crc_hw_features(void);

/* As pk_crc32/pk_crc32c, restricted to the accelerations in `features` (ANDed with
 * pk_crc_hw_features()): lets tests reach every implementation the CPU can run.
 * Visible for testing; the dispatch is chosen per call, so it is slower on short inputs. */
uint32_t pk_crc32_using(int features, uint32_t crc, const void *buf, size_t len);
uint32_t pk_crc32c_using(int features, uint32_t crc, const void *buf, size_t len);

#endif
