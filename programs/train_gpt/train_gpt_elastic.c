/* train_gpt in an elastic job (docs/checkpoint.md "Elastic jobs"): a
 * resume keeps the checkpoint's global batch whatever the world size, and
 * reads the settings text of checkpoints saved before it said tokens; a
 * node waiting to join is looked for between steps (msrun/store.h
 * MSR_KEY_JOIN_*). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/util.h"
#include "parallel/ckpt.h"
#include "programs/train_gpt/train_gpt.h"

int64_t train_gpt_meta_global_batch(const char *meta)
{
    const char *at = strstr(meta, "; global batch ");
    if (at == NULL)
        return 0;
    char *end;
    unsigned long long g = strtoull(at + strlen("; global batch "), &end, 10);
    return end != at && *end == ';' && g > 0 && g <= TRAIN_GPT_GLOBAL_BATCH_MAX ? (int64_t)g : 0;
}

int train_gpt_meta_older(const char *meta, char *older, size_t len)
{
    static const char now[] = " tokens)", then[] = " bytes)";
    const char *d = strstr(meta, "; data ");
    for (const char *p = d != NULL ? strstr(d, now) : NULL; p != NULL; p = strstr(p + 1, now)) {
        const char *after = p + strlen(now); /* the data's end: the text's, or a setting's */
        if (*after != '\0' && strncmp(after, "; ", 2) != 0)
            continue;
        int n = snprintf(older, len, "%.*s%s%s", (int)(p - meta), meta, then, after);
        return n > 0 && (size_t)n < len;
    }
    return 0;
}

/* Reads the settings text of rank 0's shard of step (saved by a world of
 * any size) into meta (len bytes). Returns MSR_OK or the error (the file
 * named in the error text). */
static msr_status_t saved_meta(const job_t *job, const char *dir, int64_t step, char *meta,
                               size_t len)
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
    if (st == MSR_OK)
        snprintf(meta, len, "%s", h.meta);
    msr_free(ranges);
    msr_free(head);
    return st;
}

const char *train_gpt_meta_to_resume(const job_t *job, const char *dir, int64_t step,
                                     const char *meta, char *older, size_t len)
{
    char saved[MSR_TCKPT_META_MAX];
    if (job->ctx == NULL || strstr(meta, " tokens)") == NULL ||
        !train_gpt_meta_older(meta, older, len))
        return meta;
    msr_err_clear();
    if (saved_meta(job, dir, step, saved, sizeof saved) != MSR_OK) {
        msr_err_clear(); /* the restore reads the same file and says what is wrong */
        return meta;
    }
    return strcmp(saved, older) == 0 ? older : meta;
}

/* The global batch of the settings text of rank 0's shard of step into
 * *G_p. Returns MSR_OK or the error (the file named in the error text). */
static msr_status_t saved_global_batch(const job_t *job, const char *dir, int64_t step,
                                       int64_t *G_p)
{
    char meta[MSR_TCKPT_META_MAX];
    msr_status_t st = saved_meta(job, dir, step, meta, sizeof meta);
    if (st == MSR_OK && (*G_p = train_gpt_meta_global_batch(meta)) == 0)
        st = msr_err(MSR_ERR_CORRUPT,
                     "%s/step-%lld/rank-0.bin names no global batch in its settings", dir,
                     (long long)step);
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
    int agreed = st != MSR_OK; /* msr_ckpt_latest_any fails on every rank alike */
    if (st == MSR_OK && step < 0)
        return 0; /* nothing saved yet: a fresh start, the command's batch */
    if (st == MSR_OK)
        st = saved_global_batch(job, o->ckpt_dir, step, &G);
    if (st != MSR_OK) {
        fprintf(stderr,
                "train_gpt: the global batch of the checkpoint under %s: %s: %s: not resuming\n",
                o->ckpt_dir, msr_status_str(st), msr_err_msg_or(st));
        /* msrun stops the other ranks at the first one's exit: each waits
         * for the others' lines first (rank 0's names the file); a rank
         * gone fails the barrier, and the exit is the same */
        if (agreed)
            (void)msr_barrier(job->ctx);
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

void train_gpt_join_announce(const job_t *job, const options_t *o)
{
    if (job->ctx == NULL || job->rank != 0 || o->ckpt_dir == NULL)
        return;
    msr_status_t st = msr_store_set(job->ctx, MSR_KEY_JOIN_SAVES, "1", 1);
    if (st != MSR_OK) /* the job still grows, at msrun's last call */
        fprintf(stderr, "train_gpt: cannot tell msrun that joins wait for a checkpoint: %s: %s\n",
                msr_status_str(st), msr_last_error());
}

/* How often the ranks look for a node waiting to join, in time: a look
 * is a store call through msrun and an allreduce, which cost more than a
 * small model's step. */
#define JOIN_LOOK_S 0.1

int train_gpt_join_every(const job_t *job, msr_comm_t *comm, double dt)
{
    if (job->ctx == NULL || (job->world > 1 && comm == NULL))
        return 0;
    int32_t k = dt >= JOIN_LOOK_S ? 1
                : dt > 0          ? (int32_t)MSR_MIN(ceil(JOIN_LOOK_S / dt), 1000)
                                  : 1000;
    if (comm != NULL &&
        msr_comm_allreduce(comm, MSR_IN_PLACE, &k, 1, MSR_DTYPE_I32, MSR_OP_MAX) != MSR_OK)
        return 0;
    return k;
}

int train_gpt_join_waiting(const job_t *job, msr_comm_t *comm)
{
    int32_t w = 0;
    if (job->rank == 0) {
        void *v = NULL;
        size_t len = 0;
        w = msr_store_get(job->ctx, MSR_KEY_JOIN_WAITING, 0, &v, &len) == MSR_OK;
        free(v);
    }
    if (comm != NULL &&
        msr_comm_allreduce(comm, MSR_IN_PLACE, &w, 1, MSR_DTYPE_I32, MSR_OP_MAX) != MSR_OK)
        return 0;
    return w;
}
