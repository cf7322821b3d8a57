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
 * replacement, as nanoGPT's get_batch does, unless the data set is read in
 * epochs (ds->epochs): then global sample k is window perm_e(k mod W) of
 * epoch e = k / W, where the W = (size - 1) / T windows start at multiples
 * of T (each token is an input once per epoch) and perm_e is a keyed
 * permutation of [0, W) that depends only on (seed, e) (msr_sampler_perm).
 * The state is still (seed, position): a step's rows are global sample
 * indices, so dp ranks read disjoint windows that together cover the
 * step's, and a resume on any world size reads what a run never stopped
 * would have.
 *
 * Token files (model/data_tokens.c, docs/model.md "Token data"): llm.c's
 * .bin layout, 256 little-endian int32 (magic 20240520, version 1: uint16
 * tokens, 2: uint32 tokens, header[2] the token count), then the tokens,
 * little-endian. Any other file is bytes (V = 256). */
#ifndef MSR_MODEL_DATA_H
#define MSR_MODEL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"

typedef struct msr_dataset {
    const uint8_t *bytes; /* (size * width) the tokens, little-endian */
    size_t size;          /* tokens */
    int width;            /* bytes per token: 1 (bytes), 2 or 4 (a token file) */
    int vocab;            /* V: 256 for bytes; a token file's (msr_dataset_vocab) */
    int epochs;           /* 0: windows drawn with replacement; 1: in epochs */
    char origin[256];     /* the file's path, or what generated it */
    void *owned;          /* malloc'd bytes, or NULL when mapped */
    size_t mapped;        /* bytes mapped from the file, 0 when owned */
    void *map;            /* the mapping's start (the header's, for a token file) */
} msr_dataset_t;

/* The token file's header: 256 int32, and its fields. */
#define MSR_TOKENS_HEADER_BYTES 1024
#define MSR_TOKENS_MAGIC        20240520
#define MSR_TOKENS_VERSION_U16  1 /* llm.c's */
#define MSR_TOKENS_VERSION_U32  2
/* A token file's default V is its largest token + 1 rounded up to this
 * (as llm.c pads GPT-2's 50257 to 50304), so tp degrees dividing it can
 * split the vocabulary. */
#define MSR_TOKENS_VOCAB_ROUND  128

/* Maps the file at path read-only (no copy): a token file when its first
 * four bytes are the magic number, else bytes. A token file's V is its
 * largest token + 1 rounded up to MSR_TOKENS_VOCAB_ROUND. Errors:
 * MSR_ERR_NOT_FOUND, MSR_ERR_PERMISSION, MSR_ERR_INVALID_ARG (not a regular
 * file, shorter than 2 bytes; a token file whose header is short, whose
 * version is not 1 or 2, whose count is 0 or not the tokens the file
 * holds), MSR_ERR_IO; the error text names the path. */
msr_status_t msr_dataset_load(const char *path, msr_dataset_t **ds_p);

/* Sets ds->vocab to V after checking every token is below it. Errors:
 * MSR_ERR_INVALID_ARG (V not in [1, 65536], or a token >= V: the text
 * names the first such token, its index and its byte offset in the file).
 * On failure ds is unchanged. */
msr_status_t msr_dataset_vocab(msr_dataset_t *ds, int V);

/* Token i of ds, i < ds->size. */
static inline int msr_dataset_token(const msr_dataset_t *ds, size_t i)
{
    const uint8_t *b = ds->bytes + i * (size_t)ds->width;
    switch (ds->width) {
    case 1:
        return b[0];
    case 2:
        return (int)(b[0] | (unsigned)b[1] << 8);
    default:
        return (int)(b[0] | (unsigned)b[1] << 8 | (unsigned)b[2] << 16 | (uint32_t)b[3] << 24);
    }
}

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

/* Where window k starts when drawn with replacement: in [0, ds_size - T). */
size_t msr_sampler_offset(const msr_sampler_t *s, size_t ds_size, int T, uint64_t k);

/* The windows of T + 1 tokens an epoch reads: (ds_size - 1) / T, starting
 * at multiples of T (the last ds_size - 1 - W*T tokens are never inputs).
 * ds_size > T. */
uint64_t msr_sampler_windows(size_t ds_size, int T);

/* Position i of epoch `epoch`'s order of n windows: a bijection of [0, n)
 * that depends only on (seed, epoch) (a 6-round Feistel network over the
 * smallest even number of bits holding n, cycle-walking back into [0, n):
 * no table). n >= 1, i < n. */
uint64_t msr_sampler_perm(uint64_t seed, uint64_t epoch, uint64_t n, uint64_t i);

/* Where global sample k starts in ds, in either order. ds->size > T. */
size_t msr_sampler_start(const msr_sampler_t *s, const msr_dataset_t *ds, int T, uint64_t k);

#endif
