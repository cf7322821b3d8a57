/* CRC-32 two ways, the same values: folded with carry-less multiplies
 * (PCLMULQDQ) where the CPU has them, and slicing-by-8 tables otherwise
 * and for what is left over.
 *
 * Slicing-by-8: eight tables, each giving a byte's contribution from 0..7
 * bytes further on, so a step folds 8 bytes with 8 lookups and no
 * dependency between them but the final XOR.
 *
 * Folding: the CRC is the remainder of the message (times x^32) divided
 * by the polynomial P, in GF(2). Four 128-bit lanes hold the message's
 * first 64 bytes; each step multiplies every lane by x^512 mod P (one
 * PCLMULQDQ per 64-bit half) and adds the next 64 bytes, which keeps the
 * remainder the same while the lanes stay 128 bits wide. The lanes then
 * fold into one (x^128 mod P), that one takes in the rest 16 bytes at a
 * time, and its 16 bytes go through the tables from a state of 0: their
 * remainder is the message's. Four independent lanes keep the multiplier
 * busy; the tables' loads were the limit (a load over a checkpoint spent
 * as long in the CRC as in the disk's read). Dispatched at run time
 * (base/cpu_features.h, "pclmul"), so the build needs no -m flag. */
#include "base/crc32.h"

#include <pthread.h>

#include "base/cpu_features.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MSR_CRC_FOLD 1
#endif

static uint32_t slice_table[8][256];
static uint32_t x2n_table[32]; /* x^(2^k) mod P, reflected: msr_crc32_combine */
/* A CRC moved over COMBINE_FAST_LEN bytes (a checkpoint's chunk CRCs are
 * of 4 KiB: parallel/ckpt.h), byte by byte: multiplying by the constant
 * x^(8 * 4096) mod P is linear, so it is the XOR of each of the CRC's
 * bytes' products, 4 lookups instead of two products bit by bit. */
#define COMBINE_FAST_LEN 4096u
static uint32_t fast_table[4][256];
static int use_fold;
static pthread_once_t slice_once = PTHREAD_ONCE_INIT;

/* a * b mod P in GF(2), both reflected (bit 31 is x^0): the product of
 * two remainders is the remainder of their product. */
static uint32_t gf2_mulmod(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (; m != 0 && a != 0; m >>= 1) {
        if (a & m) {
            p ^= b;
            a ^= m;
        }
        b = b & 1 ? 0xedb88320u ^ (b >> 1) : b >> 1;
    }
    return p;
}

static uint32_t x8n_mod(uint64_t len);

static void slice_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        slice_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (uint32_t i = 0; i < 256; i++)
            slice_table[t][i] =
                (slice_table[t - 1][i] >> 8) ^ slice_table[0][slice_table[t - 1][i] & 0xff];
    x2n_table[0] = 1u << 30; /* x^1; x^0 is 1u << 31 in the reflected order */
    for (int k = 1; k < 32; k++)
        x2n_table[k] = gf2_mulmod(x2n_table[k - 1], x2n_table[k - 1]);
    uint32_t fast = x8n_mod(COMBINE_FAST_LEN);
    for (int t = 0; t < 4; t++)
        for (uint32_t i = 0; i < 256; i++)
            fast_table[t][i] = gf2_mulmod(fast, i << (8 * t));
    /* a malformed MSRUN_CPU_DISABLE (logged there) means the tables */
    unsigned f = 0;
    use_fold = msr_cpu_features_get(&f) == MSR_OK && (f & MSR_CPU_PCLMUL);
}

/* The 4 bytes at p as a little-endian number, whatever the host's order. */
static uint32_t load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Continues the register (already inverted) over len bytes by tables. */
static uint32_t slice8(uint32_t crc, const unsigned char *p, size_t len)
{
    const uint32_t(*t)[256] = (const uint32_t(*)[256])slice_table;
    for (; len >= 8; len -= 8, p += 8) {
        uint32_t lo = load_le32(p) ^ crc, hi = load_le32(p + 4);
        crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
              t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    }
    while (len--)
        crc = t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#ifdef MSR_CRC_FOLD
/* One lane times the constants k (low half by k's low, high half by k's
 * high), plus the 16 bytes next. */
__attribute__((target("pclmul,sse4.1"))) static __m128i fold16(__m128i lane, __m128i k,
                                                               __m128i next)
{
    __m128i lo = _mm_clmulepi64_si128(lane, k, 0x00), hi = _mm_clmulepi64_si128(lane, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

/* Continues the register (already inverted) over len bytes, len >= 64 and
 * a multiple of 16. The constants are x^(d+32) and x^(d-32) mod P,
 * bit-reflected and shifted by one, for a folding distance d of 512 bits
 * (four lanes) and 128 bits (one); the test checks them against the
 * definition a bit at a time. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t fold(uint32_t crc, const unsigned char *p,
                                                              size_t len)
{
    const __m128i k512 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);
    const __m128i k128 = _mm_set_epi64x(0x0ccaa009e, 0x1751997d0);
    __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(p + 48));
    a = _mm_xor_si128(a, _mm_cvtsi32_si128((int)crc));
    for (p += 64, len -= 64; len >= 64; p += 64, len -= 64) {
        a = fold16(a, k512, _mm_loadu_si128((const __m128i *)p));
        b = fold16(b, k512, _mm_loadu_si128((const __m128i *)(p + 16)));
        c = fold16(c, k512, _mm_loadu_si128((const __m128i *)(p + 32)));
        d = fold16(d, k512, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    a = fold16(fold16(fold16(a, k128, b), k128, c), k128, d);
    for (; len >= 16; p += 16, len -= 16)
        a = fold16(a, k128, _mm_loadu_si128((const __m128i *)p));
    unsigned char rest[16];
    _mm_storeu_si128((__m128i *)rest, a);
    return slice8(0, rest, sizeof rest);
}
#endif

uint32_t msr_crc32(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    pthread_once(&slice_once, slice_init);
    crc = ~crc;
#ifdef MSR_CRC_FOLD
    if (use_fold && len >= 64) {
        size_t n = len & ~(size_t)15;
        crc = fold(crc, p, n);
        p += n;
        len -= n;
    }
#endif
    return ~slice8(crc, p, len);
}

int msr_crc32_folded(void)
{
    pthread_once(&slice_once, slice_init);
    return use_fold;
}

/* x^(8 * len) mod P: the shift a CRC's state takes over len bytes. */
static uint32_t x8n_mod(uint64_t len)
{
    uint32_t p = 1u << 31; /* x^0 */
    for (int k = 3; len != 0; len >>= 1, k++)
        if (len & 1)
            p = gf2_mulmod(x2n_table[k & 31], p);
    return p;
}

uint32_t msr_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
    pthread_once(&slice_once, slice_init);
    /* CRC-32's pre- and post-inversion cancel in the XOR of two CRCs of
     * messages of the same length, so crc(A B) is crc(A) moved over B's
     * bytes plus crc(B) from 0 */
    if (len_b == COMBINE_FAST_LEN)
        return fast_table[0][crc_a & 0xff] ^ fast_table[1][(crc_a >> 8) & 0xff] ^
               fast_table[2][(crc_a >> 16) & 0xff] ^ fast_table[3][crc_a >> 24] ^ crc_b;
    return gf2_mulmod(x8n_mod(len_b), crc_a) ^ crc_b;
}
