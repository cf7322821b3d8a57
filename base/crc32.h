/* CRC-32 (IEEE 802.3, the zlib one) for checking files. */
#ifndef MSR_BASE_CRC32_H
#define MSR_BASE_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc over len bytes; start with crc = 0. Thread-safe: its
 * tables are built once (pthread_once), then only read. */
uint32_t msr_crc32(uint32_t crc, const void *data, size_t len);

#endif
