/* The store's limits, one rule for both stores that answer store calls: the
 * one store core (store_core.c) that the coordinator and a singleton's
 * store (local_store.c) share.
 *
 * What counts:
 *   value_max  the bytes of one value (set, compare-set's desired value) or
 *              of one allgather contribution;
 *   keys_max   keys stored, plus the names being waited on (a get waiting
 *              for a key, a barrier or allgather not yet complete);
 *   bytes_max  every stored key and value, every pending allgather
 *              contribution and every waited-on name, each key or name
 *              counted MSR_STORE_ENTRY_OVERHEAD bytes more for the records
 *              that hold it.
 * So the memory a store holds for its clients stays near bytes_max however
 * they write. A write that would pass a limit is refused whole (nothing
 * changes) with a message naming the limit and its option. */
#ifndef MSR_RENDEZVOUS_STORE_LIMITS_H
#define MSR_RENDEZVOUS_STORE_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"

/* Defaults, sized for the largest jobs msrun is meant for: a 100K-rank job
 * keeps about one key per rank (a UCX worker address of a few hundred bytes,
 * an NCCL id of 128) plus a few per node, some 100K-300K keys and 50-200 MB;
 * the defaults leave 4-10x headroom over that, and a value can hold any id,
 * address or small object a program exchanges through the store. */
#define MSR_STORE_VALUE_MAX_DEFAULT (16ull << 20) /* 16 MiB */
#define MSR_STORE_KEYS_MAX_DEFAULT  (1ull << 20)  /* 1,048,576 */
#define MSR_STORE_BYTES_MAX_DEFAULT (1ull << 30)  /* 1 GiB */

/* A job past 256K ranks gets as much per rank: a million ranks publish a
 * million addresses, which the fixed defaults would leave no room past.
 * Only limits not given scale so; a given one is kept as it is. */
#define MSR_STORE_KEYS_PER_RANK  4
#define MSR_STORE_BYTES_PER_RANK 4096

/* What each key or waited-on name costs beyond its own bytes (the map entry,
 * the value's header, allocator overhead). */
#define MSR_STORE_ENTRY_OVERHEAD 64

typedef struct msr_store_limits {
    uint64_t value_max; /* 0: MSR_STORE_VALUE_MAX_DEFAULT */
    uint64_t keys_max;  /* 0: MSR_STORE_KEYS_MAX_DEFAULT */
    uint64_t bytes_max; /* 0: MSR_STORE_BYTES_MAX_DEFAULT */
} msr_store_limits_t;

/* What a store holds now, in the units of the limits. */
typedef struct msr_store_usage {
    uint64_t keys;
    uint64_t bytes;
} msr_store_usage_t;

/* limits with every 0 replaced by its default. */
msr_store_limits_t msr_store_limits_resolve(const msr_store_limits_t *limits);

/* limits for a job of ranks ranks (0: not known): as
 * msr_store_limits_resolve, then a keys_max or bytes_max not given is at
 * least MSR_STORE_KEYS_PER_RANK or MSR_STORE_BYTES_PER_RANK times ranks. */
msr_store_limits_t msr_store_limits_for_job(const msr_store_limits_t *limits, uint64_t ranks);

/* The bytes a key (or name) of keylen bytes holding len bytes counts for. */
uint64_t msr_store_entry_bytes(size_t keylen, size_t len);

/* Whether a write of len bytes under key keeps the store within its limits:
 * the key holds old_len bytes now when old_present, else it would be a new
 * key. what names the call in the message ("set", "add"). MSR_OK, or
 * MSR_ERR_REFUSED with the error text (base/err.h) a sentence naming the
 * limit and its option (the store answers it as RESOURCE_EXHAUSTED). */
msr_status_t msr_store_limits_check(const msr_store_limits_t *limits,
                                    const msr_store_usage_t *usage, const char *what,
                                    const char *key, int old_present, size_t old_len, size_t len);

/* The value size limit alone, for one allgather contribution (or value) of
 * len bytes under name; as msr_store_limits_check. */
msr_status_t msr_store_limits_check_value(const msr_store_limits_t *limits, const char *what,
                                          const char *name, size_t len);

/* Whether new_keys more names or keys and add_bytes more bytes fit (a
 * waited-on name: 1 and msr_store_entry_bytes(strlen(name), 0); allgather
 * contributions: 0 and their bytes); as msr_store_limits_check. */
msr_status_t msr_store_limits_check_add(const msr_store_limits_t *limits,
                                        const msr_store_usage_t *usage, const char *what,
                                        const char *name, uint64_t new_keys, uint64_t add_bytes);

/* Accounts a write that msr_store_limits_check allowed (old_present and
 * old_len as given to it), and the removal of a key holding len bytes. */
void msr_store_usage_put(msr_store_usage_t *usage, const char *key, int old_present, size_t old_len,
                         size_t len);
void msr_store_usage_remove(msr_store_usage_t *usage, const char *key, size_t len);

#endif
