/* Where a rank's flat elements are in the layout-free checkpoint: the
 * whole model's flat numbering (model/gpt.h's tensor table in table order,
 * each tensor at its full_offset, row-major), whatever the layout that
 * holds them. A rank's part of the model (a tp slice, some pipeline
 * stages) is a set of runs: local elements [lo, lo + n) that are the whole
 * model's consecutive elements [glo, glo + n). A tp slice of a matrix is
 * one run per row (or per block of rows of qkvw's q, k and v: row_block,
 * row_stride), merged where consecutive; the whole model is one run.
 *
 *   local flat buffer    [ wte/tp | wpe | h0... (this stage) | lnf ]
 *                           |       |     |
 *   whole model (global) [ wte .......| wpe | h0 | h1 | ... | lnf ][experts]
 *
 * Saving, a rank's owned flat range (parallel/dp.h, any ZeRO stage) is
 * mapped to global ranges (msr_ckpt_map_to_global); loading, a saved
 * global range is mapped back to this rank's local runs
 * (msr_ckpt_map_to_local) and only the overlap is taken.
 *
 * Pure host code; a map is read-only once built (any thread may read it). */
#ifndef MSR_PARALLEL_CKPT_MAP_H
#define MSR_PARALLEL_CKPT_MAP_H

#include <stddef.h>

#include "msrun/base.h"
#include "model/gpt.h"

typedef struct msr_ckpt_run {
    size_t lo, glo, n; /* local [lo, lo + n) = global [glo, glo + n) */
} msr_ckpt_run_t;

typedef struct msr_ckpt_map {
    size_t nruns;
    msr_ckpt_run_t *by_local;  /* (nruns) increasing lo */
    msr_ckpt_run_t *by_global; /* (nruns) increasing glo */
} msr_ckpt_map_t;

/* The overlap of [a, a + an) and [b, b + bn): its start in *lo_p and
 * length in *n_p, returning 1; 0 (outputs untouched) when they share no
 * element (one ending exactly where the other starts shares none). */
int msr_ckpt_overlap(size_t a, size_t an, size_t b, size_t bn, size_t *lo_p, size_t *n_p);

/* Builds the runs of model's flat buffer (its part of the whole model).
 * Errors: MSR_ERR_NO_MEMORY. */
msr_status_t msr_ckpt_map_build(const msr_gpt_t *model, msr_ckpt_map_t *map);
/* The same without the tensors this rank holds but another tensor-parallel
 * rank saves (a Llama's kv head replicated over tp ranks: the first of
 * them saves it, tp_first), so the checkpoint holds each element once
 * (save with this map, load with the whole one). */
msr_status_t msr_ckpt_map_build_saved(const msr_gpt_t *model, msr_ckpt_map_t *map);
void msr_ckpt_map_free(msr_ckpt_map_t *map);

/* Calls fn for each piece of local range [lo, lo + n) (n > 0), in local
 * order, with the local start, the global start and the length; stops at
 * the first non-zero return and returns it (0: all went through). Local
 * elements no run covers are skipped. */
typedef int (*msr_ckpt_map_fn)(void *arg, size_t lo, size_t glo, size_t n);
int msr_ckpt_map_to_global(const msr_ckpt_map_t *map, size_t lo, size_t n, msr_ckpt_map_fn fn,
                           void *arg);

/* The same from global range [glo, glo + n): each part of it this rank
 * holds, in global order. */
int msr_ckpt_map_to_local(const msr_ckpt_map_t *map, size_t glo, size_t n, msr_ckpt_map_fn fn,
                          void *arg);

#endif
