/* The one hash (64-bit FNV-1a) and the one machine identity. */
#ifndef MSR_BASE_HASH_H
#define MSR_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define MSR_FNV1A_INIT 14695981039346656037ull /* the offset basis */

/* Continues a 64-bit FNV-1a hash h (start with MSR_FNV1A_INIT) over len
 * bytes, or over a NUL-terminated string. Not for secrets: it is fast and
 * spreads keys, nothing more. */
uint64_t msr_fnv1a(uint64_t h, const void *data, size_t len);
uint64_t msr_fnv1a_str(uint64_t h, const char *s);

/* Which machine this is: the FNV-1a hash of the host name followed by the
 * kernel's boot id, so two containers with one host name on different
 * machines (or one machine rebooted) differ. Equal for every process of
 * one machine; compared across processes to find peers that share memory. */
uint64_t msr_host_id(void);

#endif
