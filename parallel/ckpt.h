/* Checkpoints: the file format of a rank's shard and of the manifest that
 * completes a checkpoint.
 *
 *   <dir>/step_00000010/rank_00000.bin   one per rank, written atomically
 *   <dir>/step_00000010/MANIFEST         written last, atomically, by rank 0
 *
 * A checkpoint counts only once its MANIFEST exists and every shard it lists
 * is there with the listed size; a shard is used only if its hash matches
 * the manifest's and its own trailer. So a crash at any moment leaves either
 * a complete checkpoint or one that resume skips.
 *
 * Shard file (integers little-endian as the host writes them; the magic
 * rejects a file from a host of the other byte order):
 *
 *   "MSRCKPT1"                 8 bytes
 *   u32 version (1), u32 header bytes (from the start, meta included)
 *   u64 step, adam_t, data_seed, data_position
 *   u64 num_params, params_lo, params_hi, opt_lo, opt_hi
 *   u32 rank, world
 *   u32 meta_len, meta_len bytes of text (the trainer's settings)
 *   f32 params[params_hi - params_lo]
 *   f32 m[opt_hi - opt_lo], f32 v[opt_hi - opt_lo]
 *   u64 hash of every byte before it (msr_tckpt_hash)
 *
 * Manifest (text):
 *
 *   msrun-checkpoint 1
 *   step 10
 *   world 2
 *   shard 0 rank_00000.bin 123456 0f1e2d3c4b5a6978
 *   shard 1 rank_00001.bin 123456 8796a5b4c3d2e1f0
 *   end
 *
 * With several ranks: each writes its shard, rank 0 gathers the entries
 * (size and hash) and writes the manifest after all shards are written. */
#ifndef MSR_PARALLEL_CKPT_H
#define MSR_PARALLEL_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"

#define MSR_TCKPT_META_MAX 4096

/* What one rank saves. */
typedef struct msr_tckpt_shard {
    uint64_t step;                 /* optimizer steps done */
    uint64_t adam_t;               /* AdamW's step count */
    uint64_t data_seed;            /* the sampler's state: seed ... */
    uint64_t data_position;        /* ... and samples drawn */
    uint32_t rank, world;          /* who wrote it, of how many */
    uint64_t num_params;           /* of the whole model */
    uint64_t params_lo, params_hi; /* the flat elements of the parameters saved */
    uint64_t opt_lo, opt_hi;       /* the flat elements of m and v saved */
    const char *meta;              /* NUL-terminated, < MSR_TCKPT_META_MAX bytes */
    const float *params;           /* (params_hi - params_lo) */
    const float *m;                /* (opt_hi - opt_lo) */
    const float *v;                /* (opt_hi - opt_lo) */
} msr_tckpt_shard_t;

/* A shard as the manifest lists it. */
typedef struct msr_tckpt_entry {
    char name[32]; /* "rank_00000.bin" */
    uint64_t size; /* bytes */
    uint64_t hash; /* msr_tckpt_hash of the whole file */
} msr_tckpt_entry_t;

/* A 64-bit hash of a byte stream fed in pieces: FNV-1a over 8-byte words
 * (the tail bytes one by one), so the result depends only on the bytes, not
 * on how they were cut. Init, update any number of times, final (which
 * leaves the state usable for more updates). */
typedef struct msr_tckpt_hasher {
    uint64_t h;
    unsigned char part[8]; /* bytes of an unfinished word */
    size_t npart;
} msr_tckpt_hasher_t;

void msr_tckpt_hash_init(msr_tckpt_hasher_t *hs);
void msr_tckpt_hash_update(msr_tckpt_hasher_t *hs, const void *data, size_t len);
uint64_t msr_tckpt_hash_final(const msr_tckpt_hasher_t *hs);
/* The hash of one buffer. */
uint64_t msr_tckpt_hash(const void *data, size_t len);

/* "<dir>/step_%08llu" into out. MSR_ERR_INVALID_ARG if it does not fit. */
msr_status_t msr_tckpt_step_dir(const char *dir, uint64_t step, char *out, size_t out_len);

/* Writes shard->rank's file of checkpoint shard->step under dir (creating
 * the directories), atomically, and describes it in *entry_p for the
 * manifest. Errors: MSR_ERR_INVALID_ARG (inconsistent ranges, meta too
 * long), the file system's (logged). */
msr_status_t msr_tckpt_shard_write(const char *dir, const msr_tckpt_shard_t *shard,
                                   msr_tckpt_entry_t *entry_p);

/* Completes checkpoint `step`: writes its manifest listing world entries
 * (entries[r] is rank r's shard). Call after every shard is written. */
msr_status_t msr_tckpt_manifest_write(const char *dir, uint64_t step, uint32_t world,
                                      const msr_tckpt_entry_t *entries);

/* The latest complete checkpoint under dir: *step_p and the world it was
 * written by. MSR_ERR_NOT_FOUND when there is none (or no dir); incomplete
 * ones are skipped (logged at info). */
msr_status_t msr_tckpt_latest(const char *dir, uint64_t *step_p, uint32_t *world_p);

/* Reads rank's shard of complete checkpoint `step` and checks it against
 * the manifest and its own trailer. On success *shard_p's pointers (meta,
 * params, m, v) point into *buf_p, the caller's to msr_free. Errors:
 * MSR_ERR_NOT_FOUND (no complete checkpoint `step`, or no such rank in it),
 * MSR_ERR_CORRUPT (size, hash, magic or layout wrong; logged), I/O errors. */
msr_status_t msr_tckpt_shard_read(const char *dir, uint64_t step, uint32_t rank,
                                  msr_tckpt_shard_t *shard_p, void **buf_p);

#endif
