/* CRC-32 (IEEE 802.3) and CRC-32C (Castagnoli). See crc32.h for the contract.
 *
 * Implementations, picked once per process from the CPU's features (under pthread_once):
 *   - slicing-by-8 tables: portable C, any CPU, and always behind the *_portable names;
 *   - CRC-32C on x86-64 with SSE4.2: the crc32 instruction over six interleaved streams,
 *     joined with PCLMULQDQ (a single stream when the CPU has SSE4.2 but no PCLMULQDQ);
 *   - CRC-32 on x86-64 with PCLMULQDQ: 4 x 128-bit folding, then Barrett reduction, as in
 *     Intel's white paper "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ";
 *     the same folding on 4 x 512-bit registers when VPCLMULQDQ and AVX-512 are there.
 * SIMD code is enabled per function with __attribute__((target)), so the file builds
 * without -m flags and runs on any x86-64.
 *
 * Notation: a CRC "state" is the running remainder without the initial/final inversion.
 * A reflected 32-bit value holds x^k at bit 31-k; a reflected 64-bit lane holds x^k at
 * bit 63-k; a 128-bit register holds x^k at bit 127-k (the first message bit is the
 * highest power). Every constant below is x^n mod P in one of these forms; the exponents
 * are given next to them, and pykfk/_reference/crc.py derives them (tests re-check).
 */
#include "crc32.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PK_CRC_X86_64 1
#include <immintrin.h>
#endif

/* Reflected generator polynomials (x^32 implied). */
#define CRC32_POLY 0xEDB88320u
#define CRC32C_POLY 0x82F63B78u

/* ------------------------------------------------------------------------------------ */
/* Portable path: slicing-by-8.                                                         */

/* slices[k][b] = state after byte b followed by k zero bytes, starting from state 0. */
static uint32_t crc32_slices[8][256];
static uint32_t crc32c_slices[8][256];

static void build_slices(uint32_t slices[8][256], uint32_t poly)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t state = b;
        for (int bit = 0; bit < 8; bit++)
            state = (state & 1) ? (state >> 1) ^ poly : state >> 1;
        slices[0][b] = state;
    }
    for (int k = 1; k < 8; k++)
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t prev = slices[k - 1][b];
            slices[k][b] = (prev >> 8) ^ slices[0][prev & 0xFF];
        }
}

/* Byte-order independent; compilers turn it into one load on little-endian CPUs. */
static inline uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t slices_update(uint32_t t[8][256], uint32_t state, const uint8_t *p,
                              size_t len)
{
    while (len >= 8) {
        uint32_t first = load_le32(p) ^ state, second = load_le32(p + 4);
        state = t[7][first & 0xFF] ^ t[6][(first >> 8) & 0xFF] ^ t[5][(first >> 16) & 0xFF]
                ^ t[4][first >> 24] ^ t[3][second & 0xFF] ^ t[2][(second >> 8) & 0xFF]
                ^ t[1][(second >> 16) & 0xFF] ^ t[0][second >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        state = t[0][(state ^ *p++) & 0xFF] ^ (state >> 8);
    return state;
}

static uint32_t crc32_update_slices(uint32_t state, const uint8_t *p, size_t len)
{
    return slices_update(crc32_slices, state, p, len);
}

static uint32_t crc32c_update_slices(uint32_t state, const uint8_t *p, size_t len)
{
    return slices_update(crc32c_slices, state, p, len);
}

/* ------------------------------------------------------------------------------------ */
/* x86-64 paths.                                                                        */
#ifdef PK_CRC_X86_64

#define PK_TARGET_SSE42 __attribute__((target("sse4.2")))
#define PK_TARGET_SSE42_PCLMUL __attribute__((target("sse4.2,pclmul")))
#define PK_TARGET_PCLMUL __attribute__((target("pclmul")))
#define PK_INLINE static inline __attribute__((always_inline))

static inline uint64_t load_u64(const uint8_t *p)
{
    uint64_t v; /* x86 is little-endian; memcpy makes the unaligned load legal C */
    memcpy(&v, p, sizeof v);
    return v;
}

/* --- CRC-32C with the crc32 instruction ---------------------------------------------- */

PK_INLINE PK_TARGET_SSE42 uint32_t crc32c_serial(uint32_t state, const uint8_t *p, size_t len)
{
    uint64_t s = state;
    for (; len >= 8; p += 8, len -= 8)
        s = _mm_crc32_u64(s, load_u64(p));
    uint32_t s32 = (uint32_t)s;
    if (len & 4) {
        s32 = _mm_crc32_u32(s32, load_le32(p));
        p += 4;
    }
    if (len & 2) {
        s32 = _mm_crc32_u16(s32, (uint16_t)(p[0] | p[1] << 8));
        p += 2;
    }
    if (len & 1)
        s32 = _mm_crc32_u8(s32, *p);
    return s32;
}

/* One stream only: for CPUs with SSE4.2 but no PCLMULQDQ to join streams. */
static PK_TARGET_SSE42 uint32_t crc32c_update_sse42(uint32_t state, const uint8_t *p,
                                                    size_t len)
{
    return crc32c_serial(state, p, len);
}

/* The crc32 instruction has a 3-cycle latency and issues once per cycle on most cores and
 * twice on recent AMD ones: three streams fill the former, six the latter (measured on an
 * AMD EPYC with AVX-512: 11 GB/s for one stream, 33 for three, 60 for six). */
#define C_STREAMS 6

/* state * x^(8n) mod P for a shift of n bytes, given k = x^(8n-33) mod P (reflected):
 * the carry-less product of two reflected 32-bit values is s*k*x^33 once the crc32
 * instruction (which multiplies by x^32 and reduces) is applied to its low 64 bits.
 * The result is returned unreduced so that several products share one reduction. */
PK_INLINE PK_TARGET_SSE42_PCLMUL uint64_t shift_unreduced(uint32_t state, uint32_t k)
{
    __m128i product = _mm_clmulepi64_si128(_mm_cvtsi32_si128((int)state),
                                           _mm_cvtsi32_si128((int)k), 0x00);
    return (uint64_t)_mm_cvtsi128_si64(product);
}

/* Joining constants: c_shifts_<block>[m-1] = x^(8*m*block - 33) mod P, reflected, for
 * m = 1..C_STREAMS (re-derived by tests/core/test_crc.py::test_folding_constants). */
static const uint32_t c_shifts_4096[C_STREAMS] = {
    0x82f89c77, 0x54a86326, 0xc1f19ee1, 0x1dc403cc, 0x68bfa742, 0x6a173fa1};
static const uint32_t c_shifts_512[C_STREAMS] = {
    0xdd7e3b0c, 0x170076fa, 0x9ef68d35, 0xa51b6135, 0x22c3799f, 0x359674f7};
static const uint32_t c_shifts_64[C_STREAMS] = {
    0x9e4addf8, 0x0d3b6092, 0xab7aff2a, 0xb9e02b86, 0xbac2fd7b, 0xd270f1a2};
static const uint32_t c_shifts_16[C_STREAMS] = {
    0x493c7d27, 0xba4fc28e, 0xddc0152b, 0x9e4addf8, 0x39d3b296, 0x0715ce53};

/* Consumes whole groups of C_STREAMS blocks: stream i covers block i of the group from
 * state 0, and the running state and streams 0..4 are shifted over the bytes after them
 * and summed (CRC is linear in state and data). All streams start at 0, so the next
 * group does not wait for the joining multiplications. */
PK_INLINE PK_TARGET_SSE42_PCLMUL uint32_t crc32c_groups(uint32_t state, const uint8_t **pp,
                                                        size_t *plen, const size_t block,
                                                        const uint32_t shifts[C_STREAMS])
{
    const uint8_t *p = *pp;
    size_t len = *plen;
    while (len >= C_STREAMS * block) {
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0;
        for (size_t i = 0; i < block; i += 8) {
            s0 = _mm_crc32_u64(s0, load_u64(p + i));
            s1 = _mm_crc32_u64(s1, load_u64(p + block + i));
            s2 = _mm_crc32_u64(s2, load_u64(p + 2 * block + i));
            s3 = _mm_crc32_u64(s3, load_u64(p + 3 * block + i));
            s4 = _mm_crc32_u64(s4, load_u64(p + 4 * block + i));
            s5 = _mm_crc32_u64(s5, load_u64(p + 5 * block + i));
        }
        uint64_t joined = shift_unreduced(state, shifts[5])
                          ^ shift_unreduced((uint32_t)s0, shifts[4])
                          ^ shift_unreduced((uint32_t)s1, shifts[3])
                          ^ shift_unreduced((uint32_t)s2, shifts[2])
                          ^ shift_unreduced((uint32_t)s3, shifts[1])
                          ^ shift_unreduced((uint32_t)s4, shifts[0]);
        state = (uint32_t)_mm_crc32_u64(0, joined) ^ (uint32_t)s5;
        p += C_STREAMS * block;
        len -= C_STREAMS * block;
    }
    *pp = p;
    *plen = len;
    return state;
}

static PK_TARGET_SSE42_PCLMUL uint32_t crc32c_update_streams(uint32_t state, const uint8_t *p,
                                                             size_t len)
{
    if (len >= C_STREAMS * 16) {
        /* Streams read 8 bytes at a time: align them once (a split load costs more). */
        size_t misalign = (size_t)(-(uintptr_t)p & 7);
        state = crc32c_serial(state, p, misalign);
        p += misalign;
        len -= misalign;
        /* Larger blocks join less often; smaller ones leave a shorter serial tail. */
        state = crc32c_groups(state, &p, &len, 4096, c_shifts_4096);
        state = crc32c_groups(state, &p, &len, 512, c_shifts_512);
        state = crc32c_groups(state, &p, &len, 64, c_shifts_64);
        state = crc32c_groups(state, &p, &len, 16, c_shifts_16);
    }
    return crc32c_serial(state, p, len);
}

/* --- CRC-32 with PCLMULQDQ folding ------------------------------------------------------ */

/* Folding a 128-bit register x forward over F bits of later data: with L and H its low
 * and high 64-bit lanes (L holds the higher powers), x*x^F = L*x^(64+F) + H*x^F. PCLMULQDQ
 * of two reflected lanes yields a*b*x, so the lane multipliers are x^(64+F-1) and x^(F-1)
 * mod P (reflected 64-bit; of degree < 32, hence the zero low halves). The product has
 * degree < 128 and stays congruent, which is all the final reduction needs. */
#define FOLD_CONSTANTS(x_64_f_1, x_f_1) _mm_set_epi64x((long long)(x_f_1), (long long)(x_64_f_1))

PK_INLINE PK_TARGET_PCLMUL __m128i fold(__m128i x, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

static inline __m128i load_m128(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)p); }

/* x*x^32 mod P for the 128-bit register x, i.e. the state after the 16 bytes it holds:
 * 128 -> 96 bits: L*x^96 + H*x^32,       L*x^96 by the multiplier x^95;
 *  96 -> 64 bits: top32*x^64 + rest,      top32*x^64 by the multiplier x^63;
 *  64 -> 32 bits: Barrett, q = floor(top32 * mu / x^32) with mu = floor(x^64 / P), and
 *  the remainder is the low 32 bits of value + q*P. */
PK_INLINE PK_TARGET_PCLMUL uint32_t crc32_reduce(__m128i x)
{
    const __m128i x95 = _mm_set_epi64x(0, (long long)0xccaa009e00000000ull);
    const __m128i x63 = _mm_set_epi64x(0, (long long)0xb8bc676500000000ull);
    /* mu (33 bits, reflected 64-bit >> 31) and P (same form), so that the products below
     * land on whole 32-bit lanes. */
    const __m128i mu = _mm_set_epi64x(0, 0x1f7011641ll);
    const __m128i poly = _mm_set_epi64x(0, 0x1db710641ll);
    const __m128i keep_upper96 = _mm_set_epi32(-1, -1, -1, 0);
    const __m128i keep_upper64 = _mm_set_epi32(-1, -1, 0, 0);

    __m128i a = _mm_xor_si128(_mm_clmulepi64_si128(x, x95, 0x00),
                              _mm_and_si128(_mm_srli_si128(x, 4), keep_upper96));
    __m128i b = _mm_xor_si128(_mm_clmulepi64_si128(a, x63, 0x00), _mm_and_si128(a, keep_upper64));
    __m128i top = _mm_slli_epi64(_mm_srli_si128(b, 8), 32);
    __m128i q = _mm_clmulepi64_si128(top, mu, 0x00);
    __m128i qp = _mm_clmulepi64_si128(q, poly, 0x00);
    return (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(b, 12))
           ^ (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(qp, 8));
}

/* Folds the remaining 16-byte blocks into x, reduces, and finishes the last < 16 bytes
 * with the tables. */
PK_INLINE PK_TARGET_PCLMUL uint32_t crc32_finish(__m128i x, const uint8_t *p, size_t len)
{
    const __m128i k128 = FOLD_CONSTANTS(0x65673b4600000000ull, 0x9ba54c6f00000000ull);
    for (; len >= 16; p += 16, len -= 16)
        x = _mm_xor_si128(fold(x, k128), load_m128(p));
    return crc32_update_slices(crc32_reduce(x), p, len);
}

/* Below 64 bytes the tables win: the fold chain plus the reduction cost about as much
 * as 64 table steps (crc32 vs crc32 portable in bench/bench_crc32.py::test_crc_sizes). */
#define CRC32_FOLD_MIN 64

static PK_TARGET_PCLMUL uint32_t crc32_update_pclmul(uint32_t state, const uint8_t *p,
                                                     size_t len)
{
    if (len < CRC32_FOLD_MIN)
        return crc32_update_slices(state, p, len);

    const __m128i k512 = FOLD_CONSTANTS(0x653d982200000000ull, 0xcad38e8f00000000ull);
    const __m128i k128 = FOLD_CONSTANTS(0x65673b4600000000ull, 0x9ba54c6f00000000ull);
    /* The state is the remainder of everything before p: it adds to the first 32 bits. */
    __m128i x0 = _mm_xor_si128(load_m128(p), _mm_cvtsi32_si128((int)state));
    __m128i x1 = load_m128(p + 16), x2 = load_m128(p + 32), x3 = load_m128(p + 48);
    p += 64;
    len -= 64;
    for (; len >= 64; p += 64, len -= 64) {
        x0 = _mm_xor_si128(fold(x0, k512), load_m128(p));
        x1 = _mm_xor_si128(fold(x1, k512), load_m128(p + 16));
        x2 = _mm_xor_si128(fold(x2, k512), load_m128(p + 32));
        x3 = _mm_xor_si128(fold(x3, k512), load_m128(p + 48));
    }
    __m128i x = _mm_xor_si128(fold(x0, k128), x1);
    x = _mm_xor_si128(fold(x, k128), x2);
    x = _mm_xor_si128(fold(x, k128), x3);
    return crc32_finish(x, p, len);
}

/* The same folding on 512-bit registers (four 128-bit lanes per instruction), for CPUs
 * with VPCLMULQDQ and AVX-512: the 128-bit loop is bound by the multiplier's issue rate
 * (16 GB/s on the AMD EPYC above), the wide one reaches memory speed (60 GB/s). */
#define PK_TARGET_VPCLMUL512 __attribute__((target("avx512f,vpclmulqdq,pclmul")))

PK_INLINE PK_TARGET_VPCLMUL512 __m512i fold512(__m512i x, __m512i k, __m512i data)
{
    /* 0x96 = three-way XOR */
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11), data, 0x96);
}

static inline PK_TARGET_VPCLMUL512 __m512i load_m512(const uint8_t *p)
{
    return _mm512_loadu_si512((const void *)p);
}

/* One load of all four registers; shorter inputs take the 128-bit path. */
#define CRC32_WIDE_MIN 256

static PK_TARGET_VPCLMUL512 uint32_t crc32_update_vpclmul512(uint32_t state, const uint8_t *p,
                                                             size_t len)
{
    if (len < CRC32_WIDE_MIN)
        return crc32_update_pclmul(state, p, len);

    const __m512i k2048 = _mm512_broadcast_i32x4(
        FOLD_CONSTANTS(0x7cc8e1e700000000ull, 0x03f9f86300000000ull));
    const __m512i k512 = _mm512_broadcast_i32x4(
        FOLD_CONSTANTS(0x653d982200000000ull, 0xcad38e8f00000000ull));
    __m512i x0 = _mm512_xor_si512(load_m512(p), _mm512_maskz_set1_epi32(1, (int)state));
    __m512i x1 = load_m512(p + 64), x2 = load_m512(p + 128), x3 = load_m512(p + 192);
    p += 256;
    len -= 256;
    for (; len >= 256; p += 256, len -= 256) {
        x0 = fold512(x0, k2048, load_m512(p));
        x1 = fold512(x1, k2048, load_m512(p + 64));
        x2 = fold512(x2, k2048, load_m512(p + 128));
        x3 = fold512(x3, k2048, load_m512(p + 192));
    }
    __m512i x = fold512(fold512(fold512(x0, k512, x1), k512, x2), k512, x3);
    for (; len >= 64; p += 64, len -= 64)
        x = fold512(x, k512, load_m512(p));
    /* Four lanes to one: lane i moves forward over the 48 - 16 i bytes after it. */
    const __m128i k384 = FOLD_CONSTANTS(0x69ccfc0d00000000ull, 0x2a28386200000000ull);
    const __m128i k256 = FOLD_CONSTANTS(0x9570d49500000000ull, 0x01b5fd1d00000000ull);
    const __m128i k128 = FOLD_CONSTANTS(0x65673b4600000000ull, 0x9ba54c6f00000000ull);
    __m128i lanes = _mm_xor_si128(
        _mm_xor_si128(fold(_mm512_extracti32x4_epi32(x, 0), k384),
                      fold(_mm512_extracti32x4_epi32(x, 1), k256)),
        _mm_xor_si128(fold(_mm512_extracti32x4_epi32(x, 2), k128),
                      _mm512_extracti32x4_epi32(x, 3)));
    return crc32_finish(lanes, p, len);
}

static int cpu_features(void)
{
    __builtin_cpu_init();
    int bits = 0;
    if (__builtin_cpu_supports("sse4.2"))
        bits |= PK_CRC_HW_SSE42;
    if (__builtin_cpu_supports("pclmul"))
        bits |= PK_CRC_HW_PCLMUL;
    /* libgcc also checks that the OS saves the AVX-512 registers (XCR0). */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq"))
        bits |= PK_CRC_HW_VPCLMUL512;
    return bits;
}
#endif /* PK_CRC_X86_64 */

/* ------------------------------------------------------------------------------------ */
/* Dispatch. Set once under pthread_once, which also publishes the tables to every thread. */

typedef uint32_t (*crc_update_fn)(uint32_t state, const uint8_t *p, size_t len);

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static crc_update_fn crc32_update = crc32_update_slices;
static crc_update_fn crc32c_update = crc32c_update_slices;

static int cpu_has;          /* PK_CRC_HW_* bits the CPU supports */
static int features_in_use;  /* the subset the dispatch below uses */

/* The fastest implementation that uses only the accelerations in `features`. */
static crc_update_fn choose_crc32(int features)
{
#ifdef PK_CRC_X86_64
    if ((features & PK_CRC_HW_PCLMUL) && (features & PK_CRC_HW_VPCLMUL512))
        return crc32_update_vpclmul512;
    if (features & PK_CRC_HW_PCLMUL)
        return crc32_update_pclmul;
#endif
    (void)features;
    return crc32_update_slices;
}

static crc_update_fn choose_crc32c(int features)
{
#ifdef PK_CRC_X86_64
    if ((features & PK_CRC_HW_SSE42) && (features & PK_CRC_HW_PCLMUL))
        return crc32c_update_streams;
    if (features & PK_CRC_HW_SSE42)
        return crc32c_update_sse42;
#endif
    (void)features;
    return crc32c_update_slices;
}

static void crc_init(void)
{
    build_slices(crc32_slices, CRC32_POLY);
    build_slices(crc32c_slices, CRC32C_POLY);
#ifdef PK_CRC_X86_64
    cpu_has = cpu_features();
#endif
    crc32_update = choose_crc32(cpu_has);
    crc32c_update = choose_crc32c(cpu_has);
    /* The wide folding is only used together with the 128-bit one. */
    features_in_use = cpu_has;
    if (!(cpu_has & PK_CRC_HW_PCLMUL))
        features_in_use &= ~PK_CRC_HW_VPCLMUL512;
}

static inline void ensure_init(void) { pthread_once(&init_once, crc_init); }

uint32_t pk_crc32(uint32_t crc, const void *buf, size_t len)
{
    ensure_init();
    return ~crc32_update(~crc, (const uint8_t *)buf, len);
}

uint32_t pk_crc32c(uint32_t crc, const void *buf, size_t len)
{
    ensure_init();
    return ~crc32c_update(~crc, (const uint8_t *)buf, len);
}

uint32_t pk_crc32_using(int features, uint32_t crc, const void *buf, size_t len)
{
    ensure_init();
    return ~choose_crc32(features & features_in_use)(~crc, (const uint8_t *)buf, len);
}

uint32_t pk_crc32c_using(int features, uint32_t crc, const void *buf, size_t len)
{
    ensure_init();
    return ~choose_crc32c(features & features_in_use)(~crc, (const uint8_t *)buf, len);
}

uint32_t pk_crc32_portable(uint32_t crc, const void *buf, size_t len)
{
    ensure_init();
    return ~crc32_update_slices(~crc, (const uint8_t *)buf, len);
}

uint32_t pk_crc32c_portable(uint32_t crc, const void *buf, size_t len)
{
    ensure_init();
    return ~crc32c_update_slices(~crc, (const uint8_t *)buf, len);
}

int pk_crc_hw_features(void)
{
    ensure_init();
    return features_in_use;
}
