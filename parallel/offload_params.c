/* Parameter offload: blocks' parameters in a file, read ahead in a pass's
 * direction and written back behind (see offload_params.h), on the
 * activation store's buffers and engines (offload_acts.c). */
#include "parallel/offload_params.h"

#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "parallel/offload_impl.h"

struct msr_params {
    msr_acts_t *a;
    size_t n, count, slot; /* floats of a block, blocks, a block's bytes in the file */
    float *held[MSR_PARAMS_BUFS];
    size_t held_k[MSR_PARAMS_BUFS]; /* the block a held buffer holds */
    msr_params_stats_t stats;
};

static size_t slot_of(size_t n)
{
    size_t bytes = n * sizeof(float);
    return (bytes + MSR_OFFLOAD_ALIGN - 1) / MSR_OFFLOAD_ALIGN * MSR_OFFLOAD_ALIGN;
}

size_t msr_params_resident_of(size_t n, size_t count)
{
    /* offload_acts.c's msr_acts_resident for MSR_PARAMS_BUFS buffers */
    return MSR_PARAMS_BUFS * slot_of(n) + (count + 1) * (sizeof(uint32_t) + 1);
}

msr_status_t msr_params_create(const msr_offload_config_t *cfg, size_t n, size_t count,
                               msr_params_t **p_p)
{
    return msr_params_create_as(cfg, "params", n, count, p_p);
}

msr_status_t msr_params_create_as(const msr_offload_config_t *cfg, const char *kind, size_t n,
                                  size_t count, msr_params_t **p_p)
{
    if (n == 0 || n > (SIZE_MAX - MSR_OFFLOAD_ALIGN) / sizeof(float))
        return msr_err(MSR_ERR_INVALID_ARG, "offload: blocks of %zu parameters", n);
    msr_params_t *p = msr_calloc(1, sizeof *p);
    if (p == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory");
    p->n = n;
    p->count = count;
    p->slot = slot_of(n);
    msr_status_t st =
        msr_acts_create_as(cfg, kind, "block", MSR_PARAMS_BUFS, n * sizeof(float), count, &p->a);
    if (st != MSR_OK) {
        msr_free(p);
        return st;
    }
    *p_p = p;
    return MSR_OK;
}

void msr_params_destroy(msr_params_t *p)
{
    if (p == NULL)
        return;
    msr_acts_destroy(p->a);
    msr_free(p);
}

static msr_status_t out_of_range(const msr_params_t *p, size_t k)
{
    return msr_err(MSR_ERR_STATE, "offload: block %zu of %s, which holds %zu", k,
                   msr_acts_path(p->a), p->count);
}

static void count_stats(msr_params_t *p)
{
    const msr_acts_stats_t *s = msr_acts_stats(p->a);
    p->stats.writes = s->spills;
    p->stats.reads = s->fetches;
    p->stats.misses = s->misses;
    p->stats.dropped = s->reads_dropped;
}

msr_status_t msr_params_put(msr_params_t *p, size_t k, const float *src)
{
    if (k >= p->count)
        return out_of_range(p, k);
    float *buf;
    msr_status_t st = msr_acts_get(p->a, &buf);
    if (st != MSR_OK)
        return st;
    memcpy(buf, src, p->n * sizeof(float));
    memset((char *)buf + p->n * sizeof(float), 0, p->slot - p->n * sizeof(float));
    st = msr_acts_spill(p->a, buf, k);
    count_stats(p);
    return st;
}

msr_status_t msr_params_prefetch(msr_params_t *p, size_t k)
{
    if (k >= p->count)
        return out_of_range(p, k);
    msr_status_t st = msr_acts_prefetch(p->a, k);
    count_stats(p);
    return st;
}

msr_status_t msr_params_get(msr_params_t *p, size_t k, float *dst)
{
    float *buf;
    msr_status_t st = msr_params_prefetch(p, k);
    if (st == MSR_OK)
        st = msr_acts_fetch(p->a, k, &buf);
    count_stats(p);
    if (st != MSR_OK)
        return st;
    memcpy(dst, buf, p->n * sizeof(float));
    msr_acts_put(p->a, buf);
    return MSR_OK;
}

msr_status_t msr_params_acquire(msr_params_t *p, size_t k, int dir, float **buf_p)
{
    if (dir < -1 || dir > 1)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "offload: a pass goes +1 or -1 (0: no read ahead), not %d", dir);
    if (k >= p->count)
        return out_of_range(p, k);
    int h = 0;
    while (h < MSR_PARAMS_BUFS && p->held[h] != NULL)
        h++;
    if (h == MSR_PARAMS_BUFS)
        return msr_err(MSR_ERR_STATE, "offload: every block buffer of %s is held",
                       msr_acts_path(p->a));
    float *buf;
    msr_status_t st = msr_acts_fetch(p->a, k, &buf);
    size_t next = k + (size_t)(ptrdiff_t)dir; /* wraps past 0 to SIZE_MAX: out of range */
    if (st == MSR_OK && dir != 0 && next < p->count &&
        (st = msr_acts_prefetch(p->a, next)) != MSR_OK)
        msr_acts_put(p->a, buf);
    count_stats(p);
    if (st != MSR_OK)
        return st;
    p->held[h] = buf;
    p->held_k[h] = k;
    *buf_p = buf;
    return MSR_OK;
}

msr_status_t msr_params_release(msr_params_t *p, size_t k, float *buf, int dirty)
{
    int h = 0;
    while (h < MSR_PARAMS_BUFS && !(p->held[h] == buf && buf != NULL && p->held_k[h] == k))
        h++;
    if (h == MSR_PARAMS_BUFS)
        return msr_err(MSR_ERR_STATE, "offload: block %zu of %s released but not held", k,
                       msr_acts_path(p->a));
    p->held[h] = NULL;
    msr_status_t st = MSR_OK;
    if (dirty)
        st = msr_acts_spill(p->a, buf, k);
    else
        msr_acts_put(p->a, buf);
    count_stats(p);
    return st;
}

msr_status_t msr_params_flush(msr_params_t *p)
{
    return msr_acts_flush(p->a);
}

msr_status_t msr_params_read_shared(const msr_params_t *p, size_t k, float *buf)
{
    if (k >= p->count)
        return out_of_range(p, k);
    return msr_acts_read_shared(p->a, k, buf);
}

size_t msr_params_slot_bytes(const msr_params_t *p)
{
    return p->slot;
}

const char *msr_params_path(const msr_params_t *p)
{
    return msr_acts_path(p->a);
}

const char *msr_params_engine(const msr_params_t *p)
{
    return msr_acts_engine(p->a);
}

size_t msr_params_resident(const msr_params_t *p)
{
    return msr_acts_resident(p->a);
}

const msr_params_stats_t *msr_params_stats(const msr_params_t *p)
{
    return &p->stats;
}

void msr_params_count_restore(msr_params_t *p, size_t bytes)
{
    if (bytes > p->stats.restore_peak)
        p->stats.restore_peak = bytes;
}
