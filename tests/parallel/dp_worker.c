/* Data parallel and ZeRO under the real msrun (dp_check.sh starts it on 1, 2
 * or 4 workers): the rule that proves it, checked on every rank.
 *
 *   dp_worker CKPT_DIR
 *
 * For ZeRO stage 0..3, gradient accumulation 1 and 4, and a bucket small
 * enough to cut through layers and one larger than the model: 10 steps on
 * the job's ranks give the losses of one process training the same global
 * batch (micro-batch x accumulation x dp sequences) within 1e-5 relative,
 * and the same parameters within 1e-5 (relative norm). Bitwise where the
 * order of the additions is fixed: with dp <= 2 (a sum of two is the same
 * whichever rank adds) every stage equals stage 0 when the micro-batches
 * are added the same way (stages 0 and 1 always, 2 and 3 with one
 * micro-batch); with dp = 1 they also equal the process alone. Every rank
 * ends with the same parameters, bitwise. The bytes each rank holds match
 * dp.h's table, and the shards cover every element exactly once.
 *
 * Checkpoints through libmsrun: saved at step 5 and restored, the run
 * continues bitwise as if never stopped; restored into another stage and
 * bucket layout (each rank picks its pieces out of every rank's shard), it
 * continues within 1e-5.
 *
 * Exits 0 when every check passed; prints what failed, with the rank. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msrun/checkpoint.h"
#include "base/err.h"
#include "msrun/comm.h"
#include "msrun/msrun.h"
#include "parallel/train.h"
#include "tests/parallel/worker_config.h"

enum { STEPS = 10, CKPT_STEP = 5 };

static int g_rank = -1;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dp_worker rank %d: FAIL: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

#define CHECK(cond, ...)       \
    do {                       \
        if (!(cond))           \
            fail(__VA_ARGS__); \
    } while (0)
#define CHECK_OK(expr)                                                         \
    do {                                                                       \
        msr_err_clear();                                                       \
        msr_status_t st_ = (expr);                                             \
        /* model/ and parallel/ set this program's error text, libmsrun its    \
         * own (msr_last_error) */                                             \
        if (st_ != MSR_OK)                                                     \
            fail("%s: %s: %s", #expr, msr_status_str(st_),                     \
                 msr_err_msg()[0] != '\0' ? msr_err_msg() : msr_last_error()); \
    } while (0)

static msr_train_config_t config(int dp, int rank, int accum, int zero, size_t bucket)
{
    msr_train_config_t c = worker_config(4, 32, accum, dp, rank);
    c.par.zero = zero;
    c.par.bucket_bytes = bucket;
    c.par.zero_min_bytes = 1024; /* the final norm (256 bytes) stays replicated */
    return c;
}

/* A finished run: its losses and its parameters. */
typedef struct run {
    double loss[STEPS];
    double norm[STEPS];
    float *params;
} run_t;

static void train(msr_trainer_t *tr, int from, int to, run_t *r)
{
    for (int i = from; i < to; i++) {
        CHECK_OK(msr_trainer_step(tr, &r->loss[i]));
        r->norm[i] = tr->last_grad_norm;
    }
}

static void finish(msr_trainer_t *tr, run_t *r)
{
    r->params = malloc(tr->model->num_params * sizeof(float));
    CHECK(r->params != NULL, "out of memory");
    CHECK_OK(msr_trainer_params(tr, r->params));
}

static double rel_diff(const float *a, const float *b, size_t n)
{
    double diff = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        diff += d * d;
        norm += (double)b[i] * b[i];
    }
    return sqrt(diff / norm);
}

/* The gradient norms of run r against want's, step by step: within 1e-5
 * relative (the sum over dp ranks of gradients each divided by the global
 * batch is the one process's gradient; a missing 1/dp shows here even
 * where clipping and AdamW hide it from the losses). */
static void compare_norms(const char *what, const run_t *r, const run_t *want)
{
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(r->norm[i] - want->norm[i]) / want->norm[i];
        CHECK(want->norm[i] > 0 && rel <= 1e-5, "%s: step %d gradient norm %.9g, want %.9g", what,
              i + 1, r->norm[i], want->norm[i]);
    }
}

/* Compares run r against want: losses within 1e-5 relative (bitwise if
 * asked), parameters within 1e-5 (bitwise if asked). Returns the largest
 * relative loss difference. */
static double compare(const char *what, const run_t *r, const run_t *want, size_t P, int bitwise)
{
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(r->loss[i] - want->loss[i]) / want->loss[i];
        worst = rel > worst ? rel : worst;
        CHECK(rel <= 1e-5, "%s: step %d loss %.9f, want %.9f", what, i + 1, r->loss[i],
              want->loss[i]);
        CHECK(!bitwise || r->loss[i] == want->loss[i], "%s: step %d loss %a, want %a bitwise", what,
              i + 1, r->loss[i], want->loss[i]);
    }
    double pd = rel_diff(r->params, want->params, P);
    CHECK(pd < 1e-5, "%s: parameters differ by %g (relative norm)", what, pd);
    CHECK(!bitwise || memcmp(r->params, want->params, P * sizeof(float)) == 0,
          "%s: parameters differ (%g), want bitwise", what, pd);
    return worst;
}

static uint64_t hash_floats(const float *x, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    const unsigned char *p = (const unsigned char *)x;
    for (size_t i = 0; i < n * sizeof(float); i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* Every rank has the same parameters, bitwise. */
static void check_same_everywhere(msr_comm_t *comm, const char *what, const float *p, size_t n)
{
    int64_t h[2];
    h[0] = (int64_t)(hash_floats(p, n) >> 1);
    h[1] = h[0];
    CHECK_OK(msr_comm_allreduce(comm, MSR_IN_PLACE, &h[0], 1, MSR_DTYPE_I64, MSR_OP_MIN));
    CHECK_OK(msr_comm_allreduce(comm, MSR_IN_PLACE, &h[1], 1, MSR_DTYPE_I64, MSR_OP_MAX));
    CHECK(h[0] == h[1], "%s: the ranks' parameters differ", what);
}

/* The bytes this rank holds against dp.h's table, and the shards' cover. */
static void check_memory(msr_comm_t *comm, msr_trainer_t *tr, const char *what)
{
    msr_dp_memory_t m;
    msr_dp_memory(tr->dp, &m);
    int zero = tr->cfg.par.zero, dp = msr_comm_size(comm);
    size_t P = tr->model->num_params, S = m.shard_elems, R = m.replicated_elems, f = 4;
    CHECK(m.params == (zero == 3 ? S : P) * f, "%s: params %zu bytes", what, m.params);
    CHECK(m.grads == (zero >= 2 ? S : P) * f, "%s: grads %zu bytes", what, m.grads);
    CHECK(m.optim == (zero >= 1 ? 2 * S : 2 * P) * f, "%s: optim %zu bytes", what, m.optim);
    /* S is this rank's 1/dp of the sharded elements (blocks rounded up per
     * unit) plus the replicated ones */
    size_t bound = (P - R) / (size_t)dp + (size_t)tr->dp->num_units + R;
    CHECK(S >= R && S <= bound, "%s: shard of %zu elements, more than %zu", what, S, bound);
    /* together the shards hold every element once (replicated ones dp times) */
    int64_t total = (int64_t)S;
    CHECK_OK(msr_comm_allreduce(comm, MSR_IN_PLACE, &total, 1, MSR_DTYPE_I64, MSR_OP_SUM));
    CHECK(total == (int64_t)(P + (size_t)(dp - 1) * R), "%s: shards hold %" PRId64 " of %zu", what,
          total, P);
    CHECK(tr->dp->transient == 0, "%s: %zu temporary bytes left", what, tr->dp->transient);
    CHECK(zero == 0 || m.transient_peak > 0, "%s: no temporary buffers", what);
}

/* ---- checkpoints through libmsrun ---- */

typedef struct fetch_arg {
    msr_ctx_t *ctx;
    const char *dir;
    int64_t step;
    int own;
} fetch_arg_t;

static msr_status_t fetch(void *arg, int rank, void **buf_p, size_t *len_p)
{
    fetch_arg_t *f = arg;
    if (f->own && rank == msr_rank(f->ctx))
        return msr_ckpt_load(f->ctx, f->dir, f->step, buf_p, len_p);
    return msr_ckpt_load_rank(f->ctx, f->dir, f->step, rank, buf_p, len_p);
}

static void restore(msr_ctx_t *ctx, msr_trainer_t *tr, const char *dir, const char *meta)
{
    int64_t same, any;
    int world;
    CHECK_OK(msr_ckpt_latest(ctx, dir, &same));
    CHECK_OK(msr_ckpt_latest_any(ctx, dir, &any, &world));
    CHECK(same == CKPT_STEP && any == CKPT_STEP && world == msr_world_size(ctx),
          "latest checkpoint %" PRId64 " / %" PRId64 " of %d ranks, want %d", same, any, world,
          CKPT_STEP);
    fetch_arg_t f = {ctx, dir, any, 1};
    CHECK_OK(msr_trainer_restore(tr, meta, world, fetch, &f));
    CHECK(tr->step == CKPT_STEP, "restored step %llu", (unsigned long long)tr->step);
}

static void test_checkpoints(msr_ctx_t *ctx, msr_comm_t *comm, const msr_dataset_t *ds,
                             const char *dir)
{
    int dp = msr_comm_size(comm), rank = msr_comm_rank(comm);
    const char *meta = "dp_worker";
    msr_train_config_t c = config(dp, rank, 1, 1, 2000);
    msr_trainer_t *a = NULL;
    CHECK_OK(msr_trainer_create(&c, ds, comm, &a));
    size_t P = a->model->num_params;
    run_t whole;
    train(a, 0, CKPT_STEP, &whole);
    void *buf;
    size_t len;
    CHECK_OK(msr_trainer_snapshot(a, meta, &buf, &len));
    CHECK_OK(msr_ckpt_save(ctx, dir, CKPT_STEP, buf, len, 0));
    free(buf);
    train(a, CKPT_STEP, STEPS, &whole);
    finish(a, &whole);
    msr_trainer_destroy(a);

    /* the same layout: each rank reads its own shard, bitwise */
    msr_trainer_t *b = NULL;
    CHECK_OK(msr_trainer_create(&c, ds, comm, &b));
    restore(ctx, b, dir, meta);
    run_t resumed;
    memcpy(resumed.loss, whole.loss, sizeof resumed.loss);
    train(b, CKPT_STEP, STEPS, &resumed);
    finish(b, &resumed);
    compare("restored, same layout", &resumed, &whole, P, 1);
    msr_trainer_destroy(b);
    free(resumed.params);

    /* the same cut in ZeRO-2: own shards again (the cut does not depend on
     * the stage); bitwise where stage 2 equals stage 1 (dp <= 2) */
    msr_train_config_t c2 = config(dp, rank, 1, 2, 2000);
    CHECK_OK(msr_trainer_create(&c2, ds, comm, &b));
    restore(ctx, b, dir, meta);
    memcpy(resumed.loss, whole.loss, sizeof resumed.loss);
    train(b, CKPT_STEP, STEPS, &resumed);
    finish(b, &resumed);
    compare("restored into zero 2, same cut", &resumed, &whole, P, dp <= 2);
    msr_trainer_destroy(b);
    free(resumed.params);

    /* ZeRO-3 with one bucket: pieces picked out of every rank's shard */
    msr_train_config_t c3 = config(dp, rank, 1, 3, 1 << 20);
    CHECK_OK(msr_trainer_create(&c3, ds, comm, &b));
    restore(ctx, b, dir, meta);
    memcpy(resumed.loss, whole.loss, sizeof resumed.loss);
    train(b, CKPT_STEP, STEPS, &resumed);
    finish(b, &resumed);
    double worst = compare("restored into zero 3", &resumed, &whole, P, 0);
    msr_trainer_destroy(b);
    free(resumed.params);
    free(whole.params);
    if (rank == 0)
        printf("dp %d checkpoint at step %d: restored bitwise; into zero 2 (same cut) %s; into "
               "zero 3 (other buckets) within %.1e\n",
               dp, CKPT_STEP, dp <= 2 ? "bitwise" : "within 1e-5", worst);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: dp_worker CKPT_DIR (under msrun)\n");
        return 2;
    }
    msr_ctx_t *ctx = NULL;
    msr_comm_t *comm = NULL;
    CHECK_OK(msr_init(&ctx));
    g_rank = msr_rank(ctx);
    CHECK_OK(msr_comm_world(ctx, &comm));
    int dp = msr_comm_size(comm), rank = msr_comm_rank(comm);
    msr_dataset_t *ds = NULL;
    CHECK_OK(msr_dataset_generate(7, 1 << 16, &ds));

    static const int accums[] = {1, 4};
    /* 2000 bytes: buckets of 500 floats cut through every layer of this
     * 34176-parameter model; 4 MiB: one bucket */
    static const size_t buckets[] = {2000, 4 << 20};
    for (int a = 0; a < 2; a++) {
        for (int b = 0; b < 2; b++) {
            /* one process alone: the same global batch as micro-batches */
            msr_train_config_t rc = config(1, 0, accums[a] * dp, 0, buckets[b]);
            msr_trainer_t *ref = NULL;
            CHECK_OK(msr_trainer_create(&rc, ds, NULL, &ref));
            size_t P = ref->model->num_params;
            run_t want, stage0 = {{0}, {0}, NULL};
            train(ref, 0, STEPS, &want);
            finish(ref, &want);
            msr_trainer_destroy(ref);
            for (int zero = 0; zero <= 3; zero++) {
                char what[96];
                snprintf(what, sizeof what, "dp %d zero %d accum %d bucket %zu", dp, zero,
                         accums[a], buckets[b]);
                msr_train_config_t c = config(dp, rank, accums[a], zero, buckets[b]);
                msr_trainer_t *tr = NULL;
                CHECK_OK(msr_trainer_create(&c, ds, comm, &tr));
                if (b == 0)
                    CHECK(tr->dp->num_buckets > 2 * tr->dp->num_segs, "%s: %d buckets", what,
                          tr->dp->num_buckets);
                run_t got;
                train(tr, 0, STEPS, &got);
                finish(tr, &got);
                check_same_everywhere(comm, what, got.params, P);
                check_memory(comm, tr, what);
                /* the order of additions is fixed where the micro-batches
                 * add the same way and a sum of dp <= 2 is commutative */
                int same_adds = zero <= 1 || accums[a] == 1;
                double worst = compare(what, &got, &want, P, dp == 1 && same_adds);
                compare_norms(what, &got, &want);
                if (zero == 0)
                    stage0 = got;
                else
                    compare(what, &got, &stage0, P, dp <= 2 && same_adds);
                if (rank == 0)
                    printf("%s: losses within %.1e of one process%s\n", what, worst,
                           dp == 1 && same_adds   ? " (bitwise)"
                           : dp <= 2 && same_adds ? " (bitwise = stage 0)"
                                                  : "");
                if (zero > 0)
                    free(got.params);
                msr_trainer_destroy(tr);
            }
            free(stage0.params);
            free(want.params);
        }
    }
    test_checkpoints(ctx, comm, ds, argv[1]);
    msr_dataset_destroy(ds);
    msr_comm_destroy(comm);
    msr_finalize(ctx);
    if (rank == 0)
        printf("dp_worker: dp %d: all checks passed\n", dp);
    return 0;
}
