/* The store's limits (see store_limits.h). */
#include "rendezvous/store_limits.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/status.h"

msr_store_limits_t msr_store_limits_resolve(const msr_store_limits_t *limits)
{
    msr_store_limits_t l = {0, 0, 0};
    if (limits != NULL)
        l = *limits;
    if (l.value_max == 0)
        l.value_max = MSR_STORE_VALUE_MAX_DEFAULT;
    if (l.keys_max == 0)
        l.keys_max = MSR_STORE_KEYS_MAX_DEFAULT;
    if (l.bytes_max == 0)
        l.bytes_max = MSR_STORE_BYTES_MAX_DEFAULT;
    return l;
}

msr_store_limits_t msr_store_limits_for_job(const msr_store_limits_t *limits, uint64_t ranks)
{
    msr_store_limits_t l = msr_store_limits_resolve(limits);
    if (limits == NULL || limits->keys_max == 0)
        l.keys_max = MSR_MAX(l.keys_max, ranks * MSR_STORE_KEYS_PER_RANK);
    if (limits == NULL || limits->bytes_max == 0)
        l.bytes_max = MSR_MAX(l.bytes_max, ranks * MSR_STORE_BYTES_PER_RANK);
    return l;
}

uint64_t msr_store_entry_bytes(size_t keylen, size_t len)
{
    return (uint64_t)keylen + (uint64_t)len + MSR_STORE_ENTRY_OVERHEAD;
}

msr_status_t msr_store_limits_check_value(const msr_store_limits_t *limits, const char *what,
                                          const char *name, size_t len)
{
    msr_store_limits_t l = msr_store_limits_resolve(limits);
    if ((uint64_t)len <= l.value_max)
        return MSR_OK;
    return msr_err(MSR_ERR_REFUSED,
                   "%s of '%.200s': the value's %zu bytes exceed the store's value size limit of "
                   "%" PRIu64 " bytes (--store_value_max)",
                   what, name, len, l.value_max);
}

msr_status_t msr_store_limits_check_add(const msr_store_limits_t *limits,
                                        const msr_store_usage_t *usage, const char *what,
                                        const char *name, uint64_t new_keys, uint64_t add_bytes)
{
    msr_store_limits_t l = msr_store_limits_resolve(limits);
    if (new_keys > 0 && usage->keys + new_keys > l.keys_max) {
        return msr_err(MSR_ERR_REFUSED,
                       "%s of '%.200s': the store holds %" PRIu64 " keys and waited-on names, its "
                       "limit (--store_keys_max)",
                       what, name, usage->keys);
    }
    if (add_bytes > 0 && usage->bytes + add_bytes > l.bytes_max) {
        return msr_err(MSR_ERR_REFUSED,
                       "%s of '%.200s': %" PRIu64 " more bytes would take the store past its total "
                       "size limit of %" PRIu64 " bytes (--store_bytes_max; %" PRIu64 " in use)",
                       what, name, add_bytes, l.bytes_max, usage->bytes);
    }
    return MSR_OK;
}

msr_status_t msr_store_limits_check(const msr_store_limits_t *limits,
                                    const msr_store_usage_t *usage, const char *what,
                                    const char *key, int old_present, size_t old_len, size_t len)
{
    msr_status_t st = msr_store_limits_check_value(limits, what, key, len);
    if (st != MSR_OK)
        return st;
    size_t keylen = strlen(key);
    uint64_t now = old_present ? msr_store_entry_bytes(keylen, old_len) : 0;
    uint64_t then = msr_store_entry_bytes(keylen, len);
    return msr_store_limits_check_add(limits, usage, what, key, old_present ? 0 : 1,
                                      then > now ? then - now : 0);
}

void msr_store_usage_put(msr_store_usage_t *usage, const char *key, int old_present, size_t old_len,
                         size_t len)
{
    if (old_present)
        msr_store_usage_remove(usage, key, old_len);
    usage->keys++;
    usage->bytes += msr_store_entry_bytes(strlen(key), len);
}

void msr_store_usage_remove(msr_store_usage_t *usage, const char *key, size_t len)
{
    uint64_t b = msr_store_entry_bytes(strlen(key), len);
    usage->keys = usage->keys ? usage->keys - 1 : 0;
    usage->bytes = usage->bytes >= b ? usage->bytes - b : 0;
}
