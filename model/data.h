/* Data: any file is a data set (its bytes are the tokens), a generated
 * default corpus, and the sampler that decides which window of bytes is
 * sample i of a step.
 *
 * The sampler is counter-based: global sample k (counting every sample of
 * every step from the start of training) is the window of T+1 bytes starting
 * at hash(seed, k) mod (size - T). So sample i of a step is fixed by (seed,
 * position + i), whoever reads it: a step's global batch is the same set of
 * windows whether one process reads it all or dp ranks x micro-batches each
 * read a slice, and the sampler's whole state is (seed, position), two
 * numbers a checkpoint keeps for an exact resume. Windows are drawn with
 * replacement, as nanoGPT's get_batch does. */
#ifndef MSR_MODEL_DATA_H
#define MSR_MODEL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"

typedef struct msr_dataset {
    const uint8_t *bytes; /* (size) the tokens */
    size_t size;
    char origin[256]; /* the file's path, or what generated it */
    void *owned;      /* malloc'd bytes, or NULL when mapped */
    size_t mapped;    /* bytes mapped from the file, 0 when owned */
} msr_dataset_t;

/* Maps the file at path read-only. Errors: MSR_ERR_NOT_FOUND,
 * MSR_ERR_PERMISSION, MSR_ERR_INVALID_ARG (not a regular file, or shorter
 * than 2 bytes), MSR_ERR_IO; the error text names the path. */
msr_status_t msr_dataset_load(const char *path, msr_dataset_t **ds_p);

/* The default corpus: size bytes of simple English sentences and small
 * sums ("the old man carries a red ball near the river. 17 plus 25 is
 * 42."), the same for the same seed on every machine. size >= 2. */
msr_status_t msr_dataset_generate(uint64_t seed, size_t size, msr_dataset_t **ds_p);

void msr_dataset_destroy(msr_dataset_t *ds);

typedef struct msr_sampler {
    uint64_t seed;     /* which windows */
    uint64_t position; /* samples drawn by the steps before the current one */
} msr_sampler_t;

/* Writes global sample position + first + r, for r in [0, n), as a row of
 * inputs (n,T) (bytes [o, o+T) of its window) and targets (n,T) (bytes [o+1,
 * o+T+1)). Needs ds->size > T. */
void msr_sampler_fill(const msr_sampler_t *s, const msr_dataset_t *ds, int T, uint64_t first, int n,
                      int *inputs, int *targets);

/* Where window k starts: in [0, ds_size - T). */
size_t msr_sampler_offset(const msr_sampler_t *s, size_t ds_size, int T, uint64_t k);

#endif
