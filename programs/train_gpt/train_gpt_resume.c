/* train_gpt's resume (train_gpt.h): finds the step to resume from, reads
 * the saved ranks' payloads for the trainer's restore, and falls back to an
 * older intact step when a load fails part way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "model/err_call.h"
#include "parallel/ckpt.h"
#include "programs/train_gpt/train_gpt.h"

/* Where msr_trainer_restore reads the saved ranks' payloads from. */
typedef struct fetch_arg {
    msr_ctx_t *ctx;
    const char *dir;
    const char *meta; /* the settings resumed (restore_step's, while it runs): the
                       * tensors a message about a file cut short names */
    int64_t step;
    int own_complete;          /* msr_ckpt_latest found this step complete for this world */
    uint64_t read;             /* bytes of payloads this rank read ... */
    uint64_t seen;             /* ... of the payloads it looked at (whole or in part) */
    msr_ckpt_reader_t *reader; /* the payload read in part last, held open */
    int reader_rank;
    uint64_t reader_total;
    int reader_whole; /* the reader checks the file's CRC */
    /* that check failed at the file's end, the bytes read again: why (the
     * piece's own CRC names a damaged tensor; else this fails the load) */
    char file_bad[MSR_ERR_TEXT_MAX];
    uint64_t disk; /* bytes read from the files: the readers' (whole blocks, reads ahead) */
} fetch_arg_t;

static msr_status_t fetch_payload(void *arg, int rank, void **buf_p, size_t *len_p)
{
    fetch_arg_t *f = arg;
    msr_status_t st = f->own_complete && rank == msr_rank(f->ctx)
                          ? msr_ckpt_load(f->ctx, f->dir, f->step, buf_p, len_p)
                          : msr_ckpt_load_rank(f->ctx, f->dir, f->step, rank, buf_p, len_p);
    if (st != MSR_OK)
        return msr_err_call(train_gpt_cut_err(st, f->dir, f->step, rank, f->meta),
                            "reading rank %d's shard of step %lld under %s: %s", rank,
                            (long long)f->step, f->dir, msr_status_str(st));
    f->read += *len_p;
    f->seen += *len_p;
    f->disk += *len_p;
    /* the shard's own step must be the one its file is filed under (the
     * trainer then checks that every rank's shard agrees) */
    msr_tckpt_header_t h;
    msr_tckpt_range_t *ranges = NULL;
    uint32_t n;
    char what[80];
    snprintf(what, sizeof what, "rank %d's shard of step %lld", rank, (long long)f->step);
    st = msr_tckpt_decode(*buf_p, *len_p, what, &h, &ranges, &n);
    msr_free(ranges);
    if (st == MSR_OK && h.step != (uint64_t)f->step) {
        st = msr_err(MSR_ERR_CORRUPT,
                     "rank %d's shard of step %lld under %s says it is of step %llu: refusing it",
                     rank, (long long)f->step, f->dir, (unsigned long long)h.step);
    }
    if (st != MSR_OK) {
        free(*buf_p);
        *buf_p = NULL;
    }
    return st;
}

/* Reads bytes [offset, offset + len) of rank's payload of the step (as
 * msr_trainer_read_t): only what a resume in another layout needs. */
static msr_status_t read_payload(void *arg, int rank, uint64_t offset, void *buf, size_t len,
                                 uint64_t *total_p, uint32_t *crc_p)
{
    fetch_arg_t *f = arg;
    msr_status_t st = MSR_OK;
    if (f->reader == NULL || f->reader_rank != rank) { /* one open per payload, not per piece */
        /* its own payload of a step this world saved is read whole, in
         * order: checked by the file's CRC too, as msr_ckpt_load would */
        int whole = f->own_complete && rank == msr_rank(f->ctx);
        if (f->reader != NULL) /* the next payload through the same buffers */
            st = msr_ckpt_reader_reopen(f->reader, f->dir, f->step, rank, whole, &f->reader_total);
        else
            st = msr_ckpt_reader_open(f->ctx, f->dir, f->step, rank, whole, &f->reader,
                                      &f->reader_total);
        if (st != MSR_OK) { /* no payload read until one opens */
            msr_ckpt_reader_close(f->reader);
            f->reader = NULL;
        }
        st = train_gpt_cut_err(st, f->dir, f->step, rank, f->meta);
        f->reader_rank = rank;
        f->reader_whole = whole;
    }
    if (st == MSR_OK)
        st = msr_ckpt_reader_read_crc(f->reader, offset, buf, len, crc_p); /* CRC'd once */
    if (st == MSR_ERR_CORRUPT && f->reader_whole && f->file_bad[0] == '\0') {
        /* the read that reached the file's end found its CRC wrong: read
         * again (the file's check is done), the bytes go to the piece's
         * own check, which names the tensor when the damage is in it */
        snprintf(f->file_bad, sizeof f->file_bad, "%s", msr_err_msg_or(st));
        st = msr_ckpt_reader_read_crc(f->reader, offset, buf, len, crc_p);
        if (st != MSR_OK)
            st = msr_err(MSR_ERR_CORRUPT, "%s", f->file_bad);
    }
    if (st != MSR_OK)
        return msr_err_call(st, "reading rank %d's shard of step %lld under %s: %s", rank,
                            (long long)f->step, f->dir, msr_status_str(st));
    uint64_t step = (uint64_t)f->step; /* the payload's own step (its bytes 16..23) ... */
    if (offset == 0 && len >= 24)
        memcpy(&step, (const char *)buf + 16, sizeof step);
    if (step != (uint64_t)f->step) /* ... is the one its file is filed under */
        return msr_err(MSR_ERR_CORRUPT,
                       "rank %d's shard of step %lld under %s says it is of step %llu: refusing it",
                       rank, (long long)f->step, f->dir, (unsigned long long)step);
    if (total_p != NULL)
        *total_p = f->reader_total;
    f->read += len;
    f->seen += total_p != NULL ? *total_p : 0; /* asked once per payload, with its header */
    return MSR_OK;
}

/* The newest step this world completed under o->ckpt_dir (*same_p) and the
 * newest any world size completed (*any_p, saved by *world_p ranks); -1
 * when none. When this world saved the newest and msr_ckpt_latest fell
 * back past it to an older step complete and intact everywhere, *any_p is
 * that step. Logs and returns the store's error. */
static msr_status_t find_latest(const job_t *job, const options_t *o, const char *meta, int check,
                                int64_t *same_p, int64_t *any_p, int *world_p)
{
    msr_status_t st = check ? train_gpt_latest_checked(job->ctx, o->ckpt_dir, meta, same_p)
                            : msr_ckpt_latest_unchecked(job->ctx, o->ckpt_dir, same_p);
    if (st == MSR_OK)
        st = msr_ckpt_latest_any(job->ctx, o->ckpt_dir, any_p, world_p);
    if (st != MSR_OK) {
        fprintf(stderr, "train_gpt: looking for checkpoints under %s: %s: %s\n", o->ckpt_dir,
                msr_status_str(st), msr_last_error());
        return st;
    }
    if (*any_p >= 0 && *world_p == job->world && *same_p >= 0 && *same_p < *any_p) {
        /* this world saved the newest, but not every rank has it complete
         * and intact (msr_ckpt_latest fell back past it and said why):
         * resume from the newest step that every rank has */
        if (job->rank == 0)
            fprintf(stderr,
                    "train_gpt: step %lld under %s is not complete and intact on every rank: "
                    "resuming from step %lld\n",
                    (long long)*any_p, o->ckpt_dir, (long long)*same_p);
        *any_p = *same_p;
    }
    return MSR_OK;
}

/* The outcome of a load that ended with load_st: when a rank's file failed
 * its CRC where no piece did (f->file_bad: a byte only the file's CRC
 * covers), a load that succeeded fails on every rank (MSR_ERR_CORRUPT, the
 * rank that read it naming the file); a failed one keeps its own error.
 * Every rank calls it after every load, whatever the load's outcome; when
 * the ranks cannot agree (one is out of memory), every rank fails with
 * that error, and none goes on to load an older step alone. */
static msr_status_t load_outcome(const job_t *job, const fetch_arg_t *f, msr_status_t load_st)
{
    int bad = f->file_bad[0] != '\0', first = -1;
    char why[MSR_ERR_TEXT_MAX] = "";
    if (load_st != MSR_OK)
        snprintf(why, sizeof why, "%s", msr_err_msg_or(load_st));
    /* every rank takes part, even one out of memory: none waits */
    msr_status_t st = msr_tckpt_agree_first(job->ctx, bad, &first);
    if (st != MSR_OK && load_st != MSR_OK)
        fprintf(stderr, "train_gpt: rank %d: the load failed too: %s: %s\n", job->rank,
                msr_status_str(load_st), why);
    if (st != MSR_OK)
        return st;
    if (load_st != MSR_OK)
        return load_st;
    if (first >= 0 && !bad)
        return msr_err(MSR_ERR_CORRUPT,
                       "rank %d's shard of step %lld under %s does not match its CRC (its "
                       "log names it)",
                       first, (long long)f->step, f->dir);
    if (bad)
        return msr_err(MSR_ERR_CORRUPT, "%s", f->file_bad);
    return MSR_OK;
}

/* Restores step `step` (saved by `world` ranks; own: this world saved it
 * and msr_ckpt_latest found it complete) into the trainer, reading it
 * through *f. Logs and returns the restore's error. */
static msr_status_t restore_step(const trainer_t *t, const job_t *job, const options_t *o,
                                 const char *meta, int64_t step, int world, int own, fetch_arg_t *f)
{
    /* rank r of the saving world wrote payload r, whatever its layout */
    char older[MSR_TCKPT_META_MAX]; /* the settings as checkpoints saved before said */
    const char *m = train_gpt_meta_to_resume(job, o->ckpt_dir, step, meta, older, sizeof older);
    *f = (fetch_arg_t){job->ctx, o->ckpt_dir, m, step, own, 0, 0, NULL, -1, 0, 0, "", 0};
    msr_err_clear();
    msr_status_t st = t->ops->restore(t->tr, m, world, fetch_payload, f);
    f->disk += msr_ckpt_reader_bytes_read(f->reader);
    msr_ckpt_reader_close(f->reader);
    f->reader = NULL;
    st = load_outcome(job, f, st);
    if (st != MSR_OK)
        fprintf(stderr, "train_gpt: resuming from step %lld under %s: %s: %s\n", (long long)step,
                o->ckpt_dir, msr_status_str(st), msr_err_msg_or(st));
    return st;
}

/* Says why a resume from step `failed` ends (exit 2): its files check out
 * but it does not load (intact: its content, not its bytes), or it is
 * damaged and no older step is whole. Every rank calls it, and leaves only
 * once rank 0 has said it: msrun stops the job's other workers at the
 * first one's exit, which could cut rank 0 off before its line. */
static void refuse(const job_t *job, const options_t *o, int64_t failed, int intact)
{
    if (job->rank == 0 && intact)
        fprintf(stderr, "train_gpt: not resuming: step %lld under %s does not load (above)\n",
                (long long)failed, o->ckpt_dir);
    else if (job->rank == 0)
        fprintf(stderr,
                "train_gpt: not resuming: step %lld under %s is damaged (above) and no older "
                "step is intact; to start over from step 0, move %s away or leave out "
                "--resume\n",
                (long long)failed, o->ckpt_dir, o->ckpt_dir);
    if (job->ctx != NULL)
        (void)msr_barrier(job->ctx); /* a rank gone fails it: the exit is the same */
}

/* This process's CPU seconds so far, all its threads (0 when the clock
 * cannot be read): the resume's CPU time beside its wall time, on a
 * machine whose other work stretches the wall. */
static double cpu_seconds(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Restores the latest complete checkpoint under o->ckpt_dir, if any: the
 * newest step any world size completed (msr_ckpt_latest_any); its shards
 * are read with msr_ckpt_load when this world completed it too, else
 * picked out of the saving world's shards. *resumed_p tells whether one was
 * found. A load that fails has written part of the state, so the run never
 * goes on from it: it loads an older intact step whole (every element the
 * rank holds, the optimizer's step and the sampler: over all the failed
 * load wrote), or fails (exit 2). */
msr_status_t train_gpt_resume(const trainer_t *t, const job_t *job, const options_t *o,
                              const char *meta, int *resumed_p)
{
    int64_t same = -1, any = -1;
    int world = 0;
    uint64_t t0 = msr_now_ns(); /* the resume's time: finding, reading, loading */
    double cpu0 = cpu_seconds();
    fetch_arg_t f = {0};
    *resumed_p = 0;
    msr_status_t st = find_latest(job, o, meta, 0, &same, &any, &world);
    if (st != MSR_OK || any < 0)
        return st; /* nothing to resume: nothing was loaded */
    st = restore_step(t, job, o, meta, any, world, same == any, &f);
    /* the load is the check: the newest step is read once; a damaged one
     * fails the load (as corrupt, or as of other settings when the damage
     * is in its settings' text), and the search that reads every rank's
     * state back refuses it (naming its file) and finds the step before */
    int bad = msr_tckpt_exit_status(st) == EXIT_BAD_INPUT; /* not the machine's fault */
    if (bad && same == any) {
        int64_t failed = any;
        msr_status_t fst = find_latest(job, o, meta, 1, &same, &any, &world);
        if (fst != MSR_OK)
            return fst;
        if (same >= 0 && same < failed)
            st = restore_step(t, job, o, meta, same, job->world, 1, &f);
        else
            refuse(job, o, failed, same == failed);
        any = same;
    } else if (bad) {
        /* another world size saved it: the same fallback, with a search
         * that checks every shard of a step and that they cover the model */
        int64_t failed = any;
        msr_status_t fst = train_gpt_latest_whole(job, o->ckpt_dir, meta, failed, &any, &world);
        if (fst != MSR_OK) { /* the machine's (damage only refuses a step): exit 1 */
            fprintf(stderr, "train_gpt: %s: %s\n", msr_status_str(fst), msr_err_msg_or(fst));
            return fst;
        }
        if (any >= 0 && any < failed)
            st = restore_step(t, job, o, meta, any, world, 0, &f);
        else
            refuse(job, o, failed, any == failed);
    }
    if (st != MSR_OK)
        return st;
    *resumed_p = 1;
    if (job->rank == 0) {
        fprintf(stderr,
                "train_gpt: resumed from step %lld under %s in %.3f s (saved by %d ranks)\n",
                (long long)any, o->ckpt_dir, (double)(msr_now_ns() - t0) * 1e-9, world);
        fprintf(stderr,
                "train_gpt: rank 0 read %llu bytes (headers and the pieces it needs) of shards "
                "of %llu bytes, %llu from the files, in %.3f s of CPU\n",
                (unsigned long long)f.read, (unsigned long long)f.seen, (unsigned long long)f.disk,
                cpu_seconds() - cpu0);
    }
    return MSR_OK;
}

msr_status_t train_gpt_cpu_restore(void *tr, const char *meta, int world, msr_trainer_fetch_t fetch,
                                   void *arg)
{
    /* arg is resume's fetch_arg_t: pieces are read in part through it */
    return msr_trainer_restore_parts(tr, meta, world, fetch, read_payload, arg);
}
