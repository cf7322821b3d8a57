/* train_gpt's checked search among the steps any world size saved
 * (train_gpt.h): a resharded or elastic resume whose newest step fails to
 * load falls back to the newest older step that is whole, as a resume in
 * the same layout does with msr_ckpt_latest. A step is whole when every
 * shard's index (header and range table) reads and says it is of that
 * step and of its rank of that world, every piece matches its CRC and
 * every file its own, and the pieces together hold every element of the
 * whole model. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "base/err.h"
#include "base/status.h"
#include "base/util.h"
#include "model/err_call.h"
#include "model/gpt.h"
#include "model/moe.h"
#include "parallel/ckpt.h"
#include "programs/train_gpt/train_gpt.h"

static msr_gpt_t *whole_model(const char *meta);

/* train_gpt_cut_err with the whole model's tensor table m. */
static msr_status_t cut_err(msr_status_t st, const char *dir, int64_t step, int rank,
                            const msr_gpt_t *m)
{
    char path[4200], what[64], why[MSR_ERR_TEXT_MAX], was[MSR_ERR_TEXT_MAX];
    struct stat sb;
    if (st != MSR_ERR_CORRUPT)
        return st;
    snprintf(was, sizeof was, "%s", msr_err_msg_or(st)); /* the looking sets texts of its own */
    snprintf(path, sizeof path, "%s/step-%lld/rank-%d.bin", dir, (long long)step, rank);
    snprintf(what, sizeof what, "step-%lld/rank-%d.bin", (long long)step, rank);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), cut = 0;
    if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode))
        cut = msr_tckpt_explain_cut((void *)m, fd, (uint64_t)sb.st_size, what, why, sizeof why);
    if (fd >= 0)
        close(fd);
    return cut ? msr_err(st, "%s: %s", was, why) : msr_err(st, "%s", was);
}

msr_status_t train_gpt_latest_checked(msr_ctx_t *ctx, const char *dir, const char *meta,
                                      int64_t *step_p)
{
    msr_gpt_t *m = whole_model(meta); /* NULL: the cut's piece named by its elements */
    msr_status_t st = msr_ckpt_latest_explain(ctx, dir, msr_tckpt_explain_cut, m, step_p);
    msr_gpt_destroy(m);
    return st;
}

msr_status_t train_gpt_cut_err(msr_status_t st, const char *dir, int64_t step, int rank,
                               const char *meta)
{
    if (st != MSR_ERR_CORRUPT)
        return st;
    msr_gpt_t *m = whole_model(meta);
    st = cut_err(st, dir, step, rank, m);
    msr_gpt_destroy(m);
    return st;
}

/* One shard's index: header and range table (head holds them). */
typedef struct shard {
    void *head;
    msr_tckpt_header_t h;
    msr_tckpt_range_t *r;
    uint32_t n;
    uint64_t total; /* the state's bytes */
} shard_t;

static void shard_free(shard_t *s)
{
    msr_free(s->r);
    msr_free(s->head);
    memset(s, 0, sizeof *s);
}

/* Reads and decodes the index of rank's shard of step (saved by world
 * ranks), checking that it says so. Errors name the file. */
static msr_status_t shard_read(const char *dir, int64_t step, int rank, int world,
                               const msr_gpt_t *m, shard_t *s)
{
    unsigned char fixed[MSR_TCKPT_PREFIX_LEN];
    size_t hl = 0;
    char what[64];
    memset(s, 0, sizeof *s);
    snprintf(what, sizeof what, "step-%lld/rank-%d.bin", (long long)step, rank);
    msr_status_t st = msr_ckpt_read_rank(NULL, dir, step, rank, 0, fixed, sizeof fixed, &s->total);
    st = cut_err(st, dir, step, rank, m);
    if (st == MSR_OK && (st = msr_tckpt_head_len(fixed, sizeof fixed, &hl)) == MSR_OK &&
        (hl < sizeof fixed || hl > s->total))
        st = msr_err(MSR_ERR_CORRUPT, "%s has a header of %zu bytes in %llu", what, hl,
                     (unsigned long long)s->total);
    if (st == MSR_OK && (s->head = msr_malloc(hl)) == NULL)
        st = msr_err(MSR_ERR_NO_MEMORY, "out of memory for a header of %zu bytes", hl);
    if (st == MSR_OK)
        st = msr_ckpt_read_rank(NULL, dir, step, rank, 0, s->head, hl, NULL);
    if (st == MSR_OK)
        st = msr_tckpt_decode_head(s->head, hl, (size_t)s->total, what, &s->h, &s->r, &s->n);
    if (st == MSR_OK && (s->h.step != (uint64_t)step || s->h.rank != (uint32_t)rank ||
                         s->h.world != (uint32_t)world))
        st = msr_err(MSR_ERR_CORRUPT, "%s says it is rank %u's of %u of step %llu", what, s->h.rank,
                     s->h.world, (unsigned long long)s->h.step);
    if (st != MSR_OK)
        shard_free(s);
    return st;
}

/* Reads bytes [at, at + len) of the state through r in chunks into buf
 * (MSR_TCKPT_READ_CHUNK bytes), continuing *crc over them. The read that
 * reaches the state's end checks the file's CRC; when that alone fails
 * (the bytes themselves read again), *file_bad_p is set and the CRC goes
 * on, so the piece's own CRC can name the tensor. */
static msr_status_t read_on(msr_ckpt_reader_t *r, uint64_t at, uint64_t len, void *buf,
                            uint32_t *crc, int *file_bad_p, char *why, size_t why_len)
{
    for (uint64_t done = 0; done < len;) {
        size_t n = (size_t)MSR_MIN(len - done, (uint64_t)MSR_TCKPT_READ_CHUNK);
        uint32_t c = 0;
        msr_status_t st = msr_ckpt_reader_read_crc(r, at + done, buf, n, &c);
        if (st == MSR_ERR_CORRUPT && !*file_bad_p) {
            snprintf(why, why_len, "%s", msr_err_msg_or(st));
            st = msr_ckpt_reader_read_crc(r, at + done, buf, n, &c);
            if (st != MSR_OK)
                return msr_err(MSR_ERR_CORRUPT, "%s", why);
            *file_bad_p = 1;
        }
        if (st != MSR_OK)
            return st;
        *crc = msr_crc32_combine(*crc, c, n);
        done += n;
    }
    return MSR_OK;
}

/* Reads rank's shard s of step whole, in order: every piece checked by its
 * CRC (a damaged one named by its tensor), then the file by its own. */
static msr_status_t shard_check(const char *dir, int64_t step, int rank, const shard_t *s,
                                const msr_gpt_t *m, void *buf)
{
    msr_ckpt_reader_t *r = NULL;
    int file_bad = 0;
    char why[MSR_ERR_TEXT_MAX] = "";
    uint32_t crc = 0;
    msr_status_t st = msr_ckpt_reader_open(NULL, dir, step, rank, 1, &r, NULL);
    uint64_t at = s->n > 0 ? s->r[0].offset : s->total; /* the index, then the pieces */
    if (st == MSR_OK)
        st = read_on(r, 0, at, buf, &crc, &file_bad, why, sizeof why);
    for (uint32_t k = 0; k < s->n && st == MSR_OK; k++) {
        const msr_tckpt_range_t *p = &s->r[k];
        crc = msr_tckpt_piece_crc_start(&s->h, p);
        st = read_on(r, p->offset, 12 * p->n, buf, &crc, &file_bad, why, sizeof why);
        at = p->offset + 12 * p->n;
        if (st == MSR_OK && s->h.version >= 3 && crc != p->crc)
            st = msr_err(MSR_ERR_CORRUPT,
                         "step-%lld/rank-%d.bin: the piece of tensor %s (elements [%llu, %llu) "
                         "of the whole model) does not match its CRC",
                         (long long)step, rank, msr_tckpt_tensor_name(m, p->lo),
                         (unsigned long long)p->lo, (unsigned long long)(p->lo + p->n));
    }
    if (st == MSR_OK) /* bytes after the last piece: the file's CRC covers them */
        st = read_on(r, at, s->total - at, buf, &crc, &file_bad, why, sizeof why);
    if (st == MSR_OK && (file_bad || !msr_ckpt_reader_checked(r)))
        st = msr_err(MSR_ERR_CORRUPT, "%s",
                     file_bad ? why : "a shard was not read whole: its CRC is not checked");
    msr_ckpt_reader_close(r);
    return st;
}

static int by_lo(const void *a, const void *b)
{
    const msr_tckpt_range_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Whether the pieces of every shard's index hold every element of the
 * whole model of P elements. */
static msr_status_t step_covered(const char *dir, int64_t step, int world, uint64_t P,
                                 const msr_gpt_t *m)
{
    msr_tckpt_range_t *all = NULL;
    size_t n = 0;
    msr_status_t st = MSR_OK;
    for (int q = 0; q < world && st == MSR_OK; q++) {
        shard_t s;
        if ((st = shard_read(dir, step, q, world, m, &s)) != MSR_OK)
            break;
        msr_tckpt_range_t *grown = msr_realloc_array(all, n + s.n + 1, sizeof *all);
        if (grown == NULL)
            st = msr_err(MSR_ERR_NO_MEMORY, "out of memory for %zu pieces", n + s.n);
        else if (s.h.num_params != P)
            st = msr_err(MSR_ERR_CORRUPT, "step-%lld/rank-%d.bin holds a model of %llu elements",
                         (long long)step, q, (unsigned long long)s.h.num_params);
        else
            memcpy((all = grown) + n, s.r, s.n * sizeof *all), n += s.n;
        shard_free(&s);
    }
    if (st == MSR_OK && n > 0)
        qsort(all, n, sizeof *all, by_lo);
    uint64_t next = 0; /* every element before it is held */
    for (size_t k = 0; k < n && st == MSR_OK && next < P; k++) {
        if (all[k].lo > next)
            break;
        next = MSR_MAX(next, all[k].lo + all[k].n);
    }
    if (st == MSR_OK && next < P)
        st = msr_err(MSR_ERR_CORRUPT, "no shard of step %lld holds element %llu (tensor %s)",
                     (long long)step, (unsigned long long)next, msr_tckpt_tensor_name(m, next));
    msr_free(all);
    return st;
}

/* This rank's verdict on step (saved by world ranks): 1 whole, 0 damaged
 * (bad input: said here, naming the file), or the machine's error (its
 * text set, not said: the caller ends the search with it). Rank j checks
 * the shards j, j + W, ... of it, rank 0 also that they cover the model;
 * buf NULL: this rank is out of memory for its read buffer. */
static int32_t step_verdict(const job_t *job, const char *dir, int64_t step, int world,
                            const msr_gpt_t *m, void *buf)
{
    shard_t s0 = {0}; /* rank 0's: the model's size */
    msr_status_t st =
        buf == NULL      ? msr_err(MSR_ERR_NO_MEMORY,
                                   "rank %d is out of memory for a read buffer of %zu bytes to check "
                                        "step %lld under %s",
                                   job->rank, MSR_TCKPT_READ_CHUNK, (long long)step, dir)
        : job->rank == 0 ? shard_read(dir, step, 0, world, m, &s0)
                         : MSR_OK;
    for (int q = job->rank; q < world && st == MSR_OK; q += job->world) {
        shard_t s;
        if ((st = shard_read(dir, step, q, world, m, &s)) == MSR_OK)
            st = shard_check(dir, step, q, &s, m, buf);
        shard_free(&s);
    }
    if (st == MSR_OK && job->rank == 0)
        st = step_covered(dir, step, world, s0.h.num_params, m);
    shard_free(&s0);
    if (st == MSR_OK)
        return 1;
    if (msr_tckpt_exit_status(st) != EXIT_BAD_INPUT)
        return st; /* the machine's: the step may be intact */
    fprintf(stderr, "train_gpt: step %lld under %s is not usable on rank %d: %s\n", (long long)step,
            dir, job->rank, msr_err_msg_or(st));
    return 0;
}

/* Whether step (saved by world ranks) is whole (*whole_p); collective over
 * the job, every rank with the same answer: the ranks share the shards
 * out (step_verdict) and gather their verdicts. Errors, on every rank at
 * once: a rank's own (out of memory, an I/O error: the machine's, never
 * taken for damage; the others name that rank) or the gather's. */
static msr_status_t step_whole(const job_t *job, const char *dir, int64_t step, int world,
                               const msr_gpt_t *m, void *buf, int *whole_p)
{
    int32_t mine = step_verdict(job, dir, step, world, m, buf);
    char why[MSR_ERR_TEXT_MAX] = "";
    if (mine < 0)
        snprintf(why, sizeof why, "%s", msr_err_msg_or(mine));
    int32_t *all = msr_calloc((size_t)job->world, sizeof *all);
    if (all == NULL) {
        /* a gather of no bytes: the others' gathers fail (the lengths
         * differ) instead of waiting for this rank's verdict */
        int32_t none;
        (void)msr_allgather(job->ctx, &none, 0, &none);
        return msr_err(MSR_ERR_NO_MEMORY,
                       "rank %d is out of memory for %d ranks' verdicts on step %lld", job->rank,
                       job->world, (long long)step);
    }
    msr_status_t st = msr_allgather(job->ctx, &mine, sizeof mine, all);
    if (st != MSR_OK)
        st = msr_err_call(st, "rank %d: agreeing whether step %lld is whole", job->rank,
                          (long long)step);
    int whole = 1, first = -1;
    for (int q = 0; q < job->world && st == MSR_OK; q++) {
        whole = whole && all[q] == 1;
        if (first < 0 && all[q] < 0)
            first = q;
    }
    if (st == MSR_OK && first >= 0)
        st = first == job->rank
                 ? msr_err((msr_status_t)mine, "%s", why)
                 : msr_err((msr_status_t)all[first],
                           "rank %d could not check step %lld under %s (%s; its log says why)",
                           first, (long long)step, dir, msr_status_str(all[first]));
    msr_free(all);
    if (st == MSR_OK)
        *whole_p = whole;
    return st;
}

/* The whole model's tensor table from this run's settings text (its
 * shape, train_gpt_meta), without parameters; NULL when it does not say. */
static msr_gpt_t *whole_model(const char *meta)
{
    msr_gpt_config_t cfg = {0};
    msr_gpt_part_t whole = {1, 0, 1, 0, 1, NULL};
    msr_gpt_t *m = NULL;
    if (sscanf(meta, "layers %d channels %d heads %d seq %d vocab %d", &cfg.layers, &cfg.channels,
               &cfg.heads, &cfg.max_seq, &cfg.vocab) != 5)
        return NULL;
    const char *arch = strstr(meta, "; arch llama ffn ");
    if (arch != NULL && sscanf(arch, "; arch llama ffn %d kv-heads %d rope-theta %lf", &cfg.ffn,
                               &cfg.kv_heads, &cfg.rope_theta) == 3)
        cfg.arch = MSR_GPT_ARCH_LLAMA;
    const char *x = strstr(meta, "; experts ");
    msr_gpt_moe_t *e = &cfg.moe;
    if (x != NULL &&
        sscanf(x, "; experts %d top-k %d moe-every %d capacity-factor %lf aux-loss %lf",
               &e->experts, &e->top_k, &e->every, &e->capacity_factor, &e->aux_loss) != 5)
        memset(e, 0, sizeof *e);
    if (msr_gpt_create_part(&cfg, &whole, MSR_GPT_NO_PARAMS | MSR_GPT_NO_GRADS, &m) != MSR_OK)
        return NULL;
    return m;
}

msr_status_t train_gpt_latest_whole(const job_t *job, const char *dir, const char *meta,
                                    int64_t from, int64_t *step_p, int *world_p)
{
    msr_gpt_t *m = whole_model(meta);
    void *buf = msr_malloc(MSR_TCKPT_READ_CHUNK);
    int64_t step = from + 1, refused = -1;
    int world = 0, whole = 0;
    msr_status_t st = MSR_OK; /* buf NULL: every rank's step_whole fails, none waits */
    while (st == MSR_OK && !whole) {
        st = msr_ckpt_latest_any_before(job->ctx, dir, step, &step, &world);
        if (st != MSR_OK || step < 0)
            break;
        if ((st = step_whole(job, dir, step, world, m, buf, &whole)) != MSR_OK)
            break;
        if (!whole && job->rank == 0)
            fprintf(stderr,
                    "train_gpt: refusing step %lld under %s: a shard of it is damaged (above); "
                    "looking for an older one\n",
                    (long long)step, dir);
        if (!whole && refused < 0)
            refused = step;
    }
    if (st == MSR_OK && refused >= 0 && step >= 0 && job->rank == 0)
        fprintf(stderr,
                "train_gpt: falling back to step %lld under %s, the newest intact one (step %lld "
                "was refused)\n",
                (long long)step, dir, (long long)refused);
    msr_free(buf);
    msr_gpt_destroy(m);
    if (st != MSR_OK)
        return msr_err_call(st, "looking for an intact checkpoint under %s", dir);
    *step_p = step;
    *world_p = world;
    return MSR_OK;
}
