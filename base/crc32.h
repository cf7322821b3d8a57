/* CRC-32 (IEEE 802.3, the zlib one) for checking files. */
#ifndef MSR_BASE_CRC32_H
#define MSR_BASE_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc over len bytes; start with crc = 0. Thread-safe: its
 * tables are built and its path chosen once (pthread_once), then only
 * read. Folded with carry-less multiplies where the CPU has PCLMULQDQ and
 * MSRUN_CPU_DISABLE leaves "pclmul", by tables otherwise: the same value
 * either way. */
uint32_t msr_crc32(uint32_t crc, const void *data, size_t len);

/* The CRC of A then B from crc_a = msr_crc32(c, A) and crc_b =
 * msr_crc32(0, B) of len_b bytes: msr_crc32(crc_a, B), without B's bytes,
 * in O(log len_b) steps (len_b 4096, a checkpoint chunk's, by 4 table
 * lookups). With crc_b = 0 it is the state c takes over len_b
 * bytes, so msr_crc32(0, B) = msr_crc32(c, B) ^ msr_crc32_combine(c, 0,
 * len_b): a CRC continued from a seed gives the seedless one, and each
 * byte need be CRC'd once for both. Thread-safe as msr_crc32. */
uint32_t msr_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* 1 when msr_crc32 folds with PCLMULQDQ, 0 when it uses only its tables
 * (for tests and benchmarks that say which path they measured). */
int msr_crc32_folded(void);

#endif
