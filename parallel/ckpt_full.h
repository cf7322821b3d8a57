/* Checkpoints of a trainer that holds the whole training state in one place
 * (the CUDA trainer, parallel/cuda/train_cuda.h), in the payload format of
 * ckpt.h, so its checkpoints and the CPU trainer's restore into each other:
 *
 * - saving, data-parallel rank r of dp writes the contiguous slice
 *   msr_ckpt_slice(r, dp, P) of the flat buffers; the ranks' slices cover
 *   [0, P) once, which is all the CPU trainer's restore needs (it picks its
 *   pieces out of every rank's payload when the layout is not its own);
 * - restoring, msr_ckpt_gather reads every payload a checkpoint has (the
 *   CPU trainer's shards or these slices, any world size) into whole
 *   buffers.
 *
 * Pure host code; thread-safe (it touches only its arguments). */
#ifndef MSR_PARALLEL_CKPT_FULL_H
#define MSR_PARALLEL_CKPT_FULL_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "parallel/ckpt.h"

/* Rank r's slice [*lo_p, *hi_p) of P elements shared by world ranks: the
 * first P % world ranks get one element more. r in [0, world). */
void msr_ckpt_slice(int r, int world, size_t P, size_t *lo_p, size_t *hi_p);

/* Encodes rank h->rank's payload of a checkpoint of h->world ranks: its
 * slice (msr_ckpt_slice of h->num_params) of params, m and v, whole
 * buffers of h->num_params floats. *buf_p is the caller's (msr_free).
 * Errors: msr_tckpt_encode's. */
msr_status_t msr_ckpt_encode_slice(const msr_tckpt_header_t *h, const float *params, const float *m,
                                   const float *v, void **buf_p, size_t *len_p);

/* Gives the payload rank `rank` of the saving world wrote (as
 * msr_trainer_fetch_t). */
typedef msr_status_t (*msr_ckpt_fetch_t)(void *arg, int rank, void **buf_p, size_t *len_p);

/* Reads the payloads of ranks 0..world-1, each once and in rank order
 * (stopping at the first failure), and writes every flat element's
 * parameter and moments into params, m, v (P floats each; m and v may be
 * NULL: the parameters alone) and the
 * checkpoint's header into *h_p (meta points at nothing: NULL). Checks that
 * every payload was written with `meta` (else MSR_ERR_CONFIG, both texts
 * in the error text from their first difference) for a model of P parameters, that the payloads
 * belong to one checkpoint of `world` ranks (rank numbers, step, AdamW and sampler state), and that
 * together they cover every element (else MSR_ERR_CORRUPT, the error text says which). Other
 * errors: the fetch's, MSR_ERR_NO_MEMORY. On failure the buffers hold unspecified values. */
msr_status_t msr_ckpt_gather(msr_ckpt_fetch_t fetch, void *arg, int world, const char *meta,
                             size_t P, float *params, float *m, float *v, msr_tckpt_header_t *h_p);

#endif
