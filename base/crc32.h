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

/* 1 when msr_crc32 folds with PCLMULQDQ, 0 when it uses only its tables
 * (for tests and benchmarks that say which path they measured). */
int msr_crc32_folded(void);

#endif
