/* Checkpoints of the whole training state in slices (see ckpt_full.h). */
#include "parallel/ckpt_full.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"

void msr_ckpt_slice(int r, int world, size_t P, size_t *lo_p, size_t *hi_p)
{
    size_t w = (size_t)world, q = P / w, extra = P % w, rr = (size_t)r;
    size_t lo = rr * q + (rr < extra ? rr : extra);
    *lo_p = lo;
    *hi_p = lo + q + (rr < extra ? 1 : 0);
}

msr_status_t msr_ckpt_encode_slice(const msr_tckpt_header_t *h, const float *params, const float *m,
                                   const float *v, void **buf_p, size_t *len_p)
{
    size_t lo, hi;
    if (h->world < 1 || h->rank >= h->world) {
        return msr_err(MSR_ERR_INVALID_ARG, "ckpt: rank %u of %u", h->rank, h->world);
    }
    msr_ckpt_slice((int)h->rank, (int)h->world, (size_t)h->num_params, &lo, &hi);
    msr_tckpt_range_t r = {lo, hi - lo, params + lo, m + lo, v + lo};
    /* a slice may be empty (more ranks than elements): no range then */
    return msr_tckpt_encode(h, &r, hi > lo ? 1u : 0u, buf_p, len_p);
}

msr_status_t msr_ckpt_gather(msr_ckpt_fetch_t fetch, void *arg, int world, const char *meta,
                             size_t P, float *params, float *m, float *v, msr_tckpt_header_t *h_p)
{
    if (world < 1 || meta == NULL) {
        return msr_err(MSR_ERR_INVALID_ARG, "ckpt: a checkpoint of %d ranks", world);
    }
    unsigned char *have = msr_calloc(P > 0 ? P : 1, 1); /* which elements were read */
    if (have == NULL) {
        return msr_err(MSR_ERR_NO_MEMORY, "ckpt: out of memory for a map of %zu elements", P);
    }
    msr_tckpt_header_t first = {0};
    msr_status_t st = MSR_OK;
    for (int r = 0; r < world && st == MSR_OK; r++) {
        void *buf = NULL;
        size_t len = 0;
        msr_tckpt_range_t *ranges = NULL;
        uint32_t n = 0;
        msr_tckpt_header_t h;
        char what[48];
        if ((st = fetch(arg, r, &buf, &len)) != MSR_OK)
            break;
        snprintf(what, sizeof what, "the shard of rank %d", r);
        if ((st = msr_tckpt_decode(buf, len, what, &h, &ranges, &n)) != MSR_OK) {
            msr_free(buf);
            break;
        }
        if (strcmp(h.meta, meta) != 0 || h.num_params != P) {
            size_t at = msr_tckpt_meta_diff(h.meta, meta);
            st = msr_err(MSR_ERR_CONFIG,
                         "ckpt: the checkpoint of step %llu was written with other settings; "
                         "checkpoint: %s%.160s (%llu parameters); this run: %s%.160s (%zu "
                         "parameters)",
                         (unsigned long long)h.step, at > 0 ? "..." : "", h.meta + at,
                         (unsigned long long)h.num_params, at > 0 ? "..." : "", meta + at, P);
        } else if (h.world != (uint32_t)world || h.rank != (uint32_t)r ||
                   (r > 0 &&
                    (h.step != first.step || h.adam_t != first.adam_t ||
                     h.data_seed != first.data_seed || h.data_position != first.data_position))) {
            st = msr_err(MSR_ERR_CORRUPT,
                         "ckpt: the shard of rank %d (rank %u of %u, step %llu) does not belong "
                         "to the checkpoint of %d ranks that rank 0's (step %llu) is from",
                         r, h.rank, h.world, (unsigned long long)h.step, world,
                         (unsigned long long)first.step);
        } else {
            if (r == 0)
                first = h;
            for (uint32_t k = 0; k < n; k++) {
                const msr_tckpt_range_t *g = &ranges[k];
                /* decode checked lo + n <= num_params = P */
                memcpy(params + g->lo, g->params, g->n * sizeof(float));
                if (m != NULL)
                    memcpy(m + g->lo, g->m, g->n * sizeof(float));
                if (v != NULL)
                    memcpy(v + g->lo, g->v, g->n * sizeof(float));
                memset(have + g->lo, 1, g->n);
            }
        }
        msr_free(ranges);
        msr_free(buf);
    }
    for (size_t i = 0; i < P && st == MSR_OK; i++) {
        if (!have[i]) {
            st = msr_err(MSR_ERR_CORRUPT,
                         "ckpt: no shard of the checkpoint of step %llu holds element %zu",
                         (unsigned long long)first.step, i);
        }
    }
    msr_free(have);
    if (st == MSR_OK) {
        first.meta = NULL;
        *h_p = first;
    }
    return st;
}
