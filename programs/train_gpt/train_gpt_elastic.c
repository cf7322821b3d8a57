/* train_gpt in an elastic job (docs/checkpoint.md "Elastic jobs"): a
 * resume keeps the checkpoint's global batch whatever the world size. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "parallel/ckpt.h"
#include "programs/train_gpt/train_gpt.h"

/* The global batch written in meta (train_gpt_meta's "global batch G"),
 * 0 when it has none. */
static int64_t meta_global_batch(const char *meta)
{
    const char *at = strstr(meta, "; global batch ");
    if (at == NULL)
        return 0;
    char *end;
    unsigned long long g = strtoull(at + strlen("; global batch "), &end, 10);
    return end != at && *end == ';' && g > 0 && g <= (1ull << 30) ? (int64_t)g : 0;
}

/* Reads the settings text of rank 0's shard of step (saved by a world of
 * any size) and its global batch into *G_p. Returns MSR_OK or the error
 * (the file named in the error text). */
static msr_status_t saved_global_batch(const job_t *job, const char *dir, int64_t step,
                                       int64_t *G_p)
{
    unsigned char fixed[MSR_TCKPT_PREFIX_LEN];
    uint64_t total = 0;
    size_t hl = 0;
    void *head = NULL;
    msr_tckpt_header_t h;
    msr_tckpt_range_t *ranges = NULL;
    uint32_t n = 0;
    char what[96];
    snprintf(what, sizeof what, "%s/step-%lld/rank-0.bin", dir, (long long)step);
    msr_status_t st = msr_ckpt_read_rank(job->ctx, dir, step, 0, 0, fixed, sizeof fixed, &total);
    if (st == MSR_OK)
        st = msr_tckpt_head_len(fixed, sizeof fixed, &hl);
    if (st == MSR_OK && (hl < sizeof fixed || hl > total))
        st = msr_err(MSR_ERR_CORRUPT, "%s has a header of %zu bytes in %llu", what, hl,
                     (unsigned long long)total);
    if (st == MSR_OK && (head = msr_malloc(hl)) == NULL)
        st = msr_err(MSR_ERR_NO_MEMORY, "out of memory for a header of %zu bytes", hl);
    if (st == MSR_OK)
        st = msr_ckpt_read_rank(job->ctx, dir, step, 0, 0, head, hl, NULL);
    if (st == MSR_OK)
        st = msr_tckpt_decode_head(head, hl, (size_t)total, what, &h, &ranges, &n);
    if (st == MSR_OK && (*G_p = meta_global_batch(h.meta)) == 0)
        st = msr_err(MSR_ERR_CORRUPT, "%s names no global batch in its settings", what);
    msr_free(ranges);
    msr_free(head);
    return st;
}

int train_gpt_keep_global_batch(options_t *o, const job_t *job)
{
    if (!o->resume || o->ckpt_dir == NULL || job->ctx == NULL || o->global_batch > 0)
        return 0;
    int64_t step = -1, G = 0;
    int world = 0;
    msr_err_clear();
    msr_status_t st = msr_ckpt_latest_any(job->ctx, o->ckpt_dir, &step, &world);
    if (st == MSR_OK && step < 0)
        return 0; /* nothing saved yet: a fresh start, the command's batch */
    if (st == MSR_OK)
        st = saved_global_batch(job, o->ckpt_dir, step, &G);
    if (st != MSR_OK) {
        fprintf(stderr, "train_gpt: the global batch of the checkpoint under %s: %s: %s\n",
                o->ckpt_dir, msr_status_str(st), msr_err_msg_or(st));
        return st == MSR_ERR_CORRUPT ? EXIT_BAD_INPUT : 1;
    }
    o->global_batch = G;
    if (job->rank == 0)
        fprintf(stderr,
                "train_gpt: resuming with the checkpoint's global batch of %" PRId64
                " sequences (step %lld, saved by %d ranks; this job has %d)\n",
                G, (long long)step, world, job->world);
    return 0;
}
