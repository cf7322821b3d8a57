/* CRC-32 (IEEE 802.3, the zlib one: the same values as base/crc32.h's
 * msr_crc32) eight bytes a step, for checksums of large buffers
 * (checkpoint pieces), where a byte at a time is slower than the disk. */
#ifndef MSR_BASE_CRC32_FAST_H
#define MSR_BASE_CRC32_FAST_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc over len bytes; start with crc = 0. Equal to
 * msr_crc32(crc, data, len) for every input. Thread-safe: its tables are
 * built once (pthread_once), then only read. */
uint32_t msr_crc32_fast(uint32_t crc, const void *data, size_t len);

#endif
