/* A rank's flat elements in the whole model's numbering (see ckpt_map.h). */
#include "parallel/ckpt_map.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"

int msr_ckpt_overlap(size_t a, size_t an, size_t b, size_t bn, size_t *lo_p, size_t *n_p)
{
    size_t lo = a > b ? a : b, ae = a + an, be = b + bn, hi = ae < be ? ae : be;
    if (lo >= hi)
        return 0;
    *lo_p = lo;
    *n_p = hi - lo;
    return 1;
}

/* Appends local [lo, lo + n) = global [glo, ...), merged with the last run
 * when it continues it in both numberings. */
static void run_add(msr_ckpt_map_t *map, size_t lo, size_t glo, size_t n)
{
    msr_ckpt_run_t *last = map->nruns > 0 ? &map->by_local[map->nruns - 1] : NULL;
    if (last != NULL && last->lo + last->n == lo && last->glo + last->n == glo) {
        last->n += n;
        return;
    }
    map->by_local[map->nruns++] = (msr_ckpt_run_t){lo, glo, n};
}

static int by_glo(const void *a, const void *b)
{
    const msr_ckpt_run_t *x = a, *y = b;
    return x->glo < y->glo ? -1 : x->glo > y->glo;
}

/* Whether this rank holds t but another tp rank saves it (a Llama's kv
 * head replicated over tp: the first of its ranks saves it). */
static int saved_elsewhere(const msr_gpt_tensor_t *t)
{
    return !t->tp_replicated && t->tp_copies > 1 && !t->tp_first;
}

static msr_status_t map_build(const msr_gpt_t *model, int saved, msr_ckpt_map_t *map)
{
    size_t rows = 0;
    memset(map, 0, sizeof *map);
    for (int k = 0; k < model->num_tensors; k++)
        rows += (size_t)model->tensors[k].shape[0];
    map->by_local = msr_calloc(rows + 1, sizeof *map->by_local);
    map->by_global = msr_calloc(rows + 1, sizeof *map->by_global);
    if (map->by_local == NULL || map->by_global == NULL) {
        msr_ckpt_map_free(map);
        return msr_err(MSR_ERR_NO_MEMORY, "ckpt: out of memory for a map of %zu rows", rows);
    }
    for (int k = 0; k < model->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &model->tensors[k];
        size_t cols = (size_t)t->shape[1];
        if (saved && saved_elsewhere(t))
            continue;
        for (size_t r = 0; r < (size_t)t->shape[0]; r++) /* a row is contiguous in both */
            run_add(map, t->offset + r * cols, msr_gpt_tensor_full_index(t, r * cols), cols);
    }
    memcpy(map->by_global, map->by_local, map->nruns * sizeof *map->by_local);
    qsort(map->by_global, map->nruns, sizeof *map->by_global, by_glo);
    return MSR_OK;
}

msr_status_t msr_ckpt_map_build(const msr_gpt_t *model, msr_ckpt_map_t *map)
{
    return map_build(model, 0, map);
}

msr_status_t msr_ckpt_map_build_saved(const msr_gpt_t *model, msr_ckpt_map_t *map)
{
    return map_build(model, 1, map);
}

void msr_ckpt_map_free(msr_ckpt_map_t *map)
{
    msr_free(map->by_local);
    msr_free(map->by_global);
    memset(map, 0, sizeof *map);
}

/* The first run (of runs sorted by the field `global` names) that may overlap
 * [x, ...): the last one starting at or before x, or the first. */
static size_t first_run(const msr_ckpt_run_t *runs, size_t nruns, size_t x, int global)
{
    size_t lo = 0, hi = nruns;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2, at = global ? runs[mid].glo : runs[mid].lo;
        if (at <= x)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static int map_walk(const msr_ckpt_run_t *runs, size_t nruns, size_t x, size_t n, int global,
                    msr_ckpt_map_fn fn, void *arg)
{
    for (size_t k = nruns > 0 ? first_run(runs, nruns, x, global) : 0; k < nruns; k++) {
        const msr_ckpt_run_t *r = &runs[k];
        size_t start = global ? r->glo : r->lo, lo, cnt;
        if (start >= x + n)
            break;
        if (!msr_ckpt_overlap(start, r->n, x, n, &lo, &cnt))
            continue;
        size_t local = r->lo + (lo - start), glob = r->glo + (lo - start);
        int rc = fn(arg, local, glob, cnt);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int msr_ckpt_map_to_global(const msr_ckpt_map_t *map, size_t lo, size_t n, msr_ckpt_map_fn fn,
                           void *arg)
{
    return map_walk(map->by_local, map->nruns, lo, n, 0, fn, arg);
}

int msr_ckpt_map_to_local(const msr_ckpt_map_t *map, size_t glo, size_t n, msr_ckpt_map_fn fn,
                          void *arg)
{
    return map_walk(map->by_global, map->nruns, glo, n, 1, fn, arg);
}
