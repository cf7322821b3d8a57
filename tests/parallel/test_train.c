/* The training step in one process: the same global batch trains to the
 * same losses however it is split into micro-batches; every ZeRO stage
 * (dp = 1, no communicator) trains as stage 0 does, bitwise where the
 * order of additions is the same; a restored run continues bitwise, also
 * into another stage and layout; the loss falls; bad configurations and
 * bad checkpoints are refused; every allocation may fail. (dp > 1 runs
 * under msrun: dp_worker.c.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/alloc.h"
#include "model/moe.h"
#include "parallel/train.h"
#include "tests/parallel/worker_config.h"
#include "tests/runner.h"

static msr_train_config_t small_config(int micro_batch, int grad_accum)
{
    msr_train_config_t c = worker_config(4, 32, grad_accum, 1, 0);
    c.micro_batch = micro_batch;
    c.seed = 5;
    c.par.zero_min_bytes = 1024; /* the final norm (256 bytes) stays replicated */
    return c;
}

static msr_trainer_t *make(const msr_train_config_t *c, const msr_dataset_t *ds)
{
    msr_trainer_t *tr = NULL;
    MSR_CHECK_OK(msr_trainer_create(c, ds, NULL, &tr));
    return tr;
}

static float *params_of(msr_trainer_t *tr)
{
    float *p = malloc(tr->model->num_params * sizeof(float));
    MSR_CHECK(p != NULL);
    MSR_CHECK_OK(msr_trainer_params(tr, p));
    return p;
}

/* sqrt(sum (a-b)^2 / sum b^2) */
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

static msr_dataset_t *corpus(void)
{
    msr_dataset_t *ds = NULL;
    MSR_CHECK_OK(msr_dataset_generate(5, 1 << 16, &ds));
    return ds;
}

static void train(msr_trainer_t *tr, int steps, double *losses)
{
    for (int i = 0; i < steps; i++)
        MSR_CHECK_OK(msr_trainer_step(tr, &losses[i]));
}

/* The equivalence rule for gradient accumulation: global batch 8 as 8 x 1,
 * 4 x 2, 2 x 4 and 1 x 8 trains to the same losses within 1e-5 relative. */
static void test_accum_equivalence(void)
{
    msr_dataset_t *ds = corpus();
    enum { STEPS = 6 };
    static const int splits[][2] = {{8, 1}, {4, 2}, {2, 4}, {1, 8}};
    double ref[STEPS] = {0}; /* set by the first split; the compiler cannot see that */
    msr_trainer_t *first = NULL;
    for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
        msr_train_config_t c = small_config(splits[k][0], splits[k][1]);
        msr_trainer_t *tr = make(&c, ds);
        double losses[STEPS];
        train(tr, STEPS, losses);
        MSR_CHECK_EQ(tr->step, STEPS);
        MSR_CHECK_EQ(tr->sampler.position, STEPS * 8);
        if (k == 0) {
            memcpy(ref, losses, sizeof ref);
            first = tr;
            continue;
        }
        for (int i = 0; i < STEPS; i++)
            MSR_CHECK_MSG(fabs(losses[i] - ref[i]) <= 1e-5 * ref[i],
                          "micro %d x accum %d, step %d: loss %.9f, one micro-batch %.9f",
                          splits[k][0], splits[k][1], i + 1, losses[i], ref[i]);
        /* Adam divides by sqrt(v), so an element whose gradient is ~0 moves by
         * rounding noise; the parameters as a whole agree to fp32 accuracy */
        double diff = 0, norm = 0;
        for (size_t i = 0; i < tr->model->num_params; i++) {
            double d = (double)tr->model->params[i] - first->model->params[i];
            diff += d * d;
            norm += (double)first->model->params[i] * first->model->params[i];
        }
        MSR_CHECK_MSG(sqrt(diff / norm) < 1e-5, "parameters differ by %g (relative) after %d steps",
                      sqrt(diff / norm), STEPS);
        msr_trainer_destroy(tr);
    }
    msr_trainer_destroy(first);
    msr_dataset_destroy(ds);
}

/* ZeRO 1, 2, 3 alone train as stage 0: bitwise when the additions happen
 * in the same order (stage 1 always: it accumulates micro-batches in the
 * full gradient as stage 0 does; stages 2 and 3 with one micro-batch),
 * within 1e-5 otherwise (stages 2 and 3 add micro-batches' reduced
 * gradients into the shard). Buckets small enough to cut through layers,
 * and every segment replicated, change nothing. */
static void test_zero_alone(void)
{
    msr_dataset_t *ds = corpus();
    enum { STEPS = 5 };
    static const int accums[] = {1, 4};
    static const size_t buckets[] = {2000, MSR_DP_BUCKET_BYTES};
    for (size_t a = 0; a < 2; a++) {
        msr_train_config_t c = small_config(2, accums[a]);
        msr_trainer_t *ref = make(&c, ds);
        double want[STEPS];
        train(ref, STEPS, want);
        float *pw = params_of(ref);
        for (int zero = 1; zero <= 3; zero++) {
            for (size_t b = 0; b < 3; b++) {
                c.par.zero = zero;
                c.par.bucket_bytes = buckets[b % 2];
                c.par.zero_min_bytes = b == 2 ? (size_t)1 << 30 : 1024; /* b 2: all replicated */
                msr_trainer_t *tr = make(&c, ds);
                if (b == 0)
                    MSR_CHECK(tr->dp->num_units > tr->dp->num_segs + 2); /* layers are cut */
                double got[STEPS];
                train(tr, STEPS, got);
                int bitwise = zero == 1 || accums[a] == 1;
                float *pg = params_of(tr);
                for (int i = 0; i < STEPS; i++)
                    MSR_CHECK_MSG(bitwise ? got[i] == want[i]
                                          : fabs(got[i] - want[i]) <= 1e-5 * want[i],
                                  "zero %d accum %d bucket %zu step %d: %.9f, stage 0 %.9f", zero,
                                  accums[a], buckets[b % 2], i + 1, got[i], want[i]);
                if (bitwise)
                    MSR_CHECK(memcmp(pg, pw, tr->model->num_params * sizeof(float)) == 0);
                else
                    MSR_CHECK(rel_diff(pg, pw, tr->model->num_params) < 1e-5);
                /* the norm's partial sums follow the units, so the same cuts give the same norm */
                if (bitwise && buckets[b % 2] == MSR_DP_BUCKET_BYTES)
                    MSR_CHECK(tr->last_grad_norm == ref->last_grad_norm);
                free(pg);
                msr_trainer_destroy(tr);
            }
        }
        free(pw);
        msr_trainer_destroy(ref);
    }
    msr_dataset_destroy(ds);
}

/* The bytes a rank holds, by stage, as dp.h's table says (dp = 1: S = P). */
/* c's model as a Llama of the same size (RMSNorm, SwiGLU of width 40,
 * 2 kv heads, rotary positions). */
static void small_llama(msr_train_config_t *c)
{
    c->model.arch = MSR_GPT_ARCH_LLAMA;
    c->model.ffn = 40;
    c->model.kv_heads = 2;
    c->model.rope_theta = 10000;
}

/* ZeRO-3 gathers each segment once per run of visits (layout/'s table):
 * a GPT's micro-batch 2L + 5 times (its tied head visits the embedding
 * after the final norm, and backward starts there), a Llama's, whose head
 * is untied, 2L + 3; every segment sharded, 2 micro-batches a step, 3
 * steps. Both train as ZeRO-0 does (1e-5). */
static void test_zero3_gathers(void)
{
    msr_dataset_t *ds = corpus();
    enum { STEPS = 3 };
    for (int llama = 0; llama <= 1; llama++) {
        msr_train_config_t c = small_config(2, 2);
        if (llama)
            small_llama(&c);
        msr_trainer_t *ref = make(&c, ds);
        double want[STEPS], got[STEPS];
        train(ref, STEPS, want);
        msr_trainer_destroy(ref);
        c.par.zero = 3;
        c.par.zero_min_bytes = 0;
        msr_trainer_t *tr = make(&c, ds);
        for (int s = 0; s < tr->dp->num_segs; s++)
            MSR_CHECK_MSG(!tr->dp->segs[s].replicated, "segment %d replicated", s);
        train(tr, STEPS, got);
        for (int i = 0; i < STEPS; i++)
            MSR_CHECK_MSG(fabs(got[i] - want[i]) <= 1e-5 * want[i],
                          "%s step %d: ZeRO-3 %.9f, ZeRO-0 %.9f", llama ? "llama" : "gpt", i + 1,
                          got[i], want[i]);
        uint64_t L = (uint64_t)c.model.layers, per = llama ? 2 * L + 3 : 2 * L + 5;
        MSR_CHECK_MSG(tr->dp->stats.gathers == STEPS * 2 * per,
                      "%s: %llu gathers in %d steps of 2 micro-batches, not %llu per micro-batch",
                      llama ? "llama" : "gpt", (unsigned long long)tr->dp->stats.gathers, STEPS,
                      (unsigned long long)per);
        msr_trainer_destroy(tr);
    }
    msr_dataset_destroy(ds);
}

/* Creates a trainer of c (on mesh: the model-parallel runtime; NULL: the
 * data-parallel path) and runs two steps with allocation i failing, for
 * i = 0, 1, ... until none fails: each failure comes back as
 * MSR_ERR_NO_MEMORY, and the run without one trains. */
static void fail_each_alloc(const msr_train_config_t *c, const msr_dataset_t *ds, msr_mesh_t *mesh)
{
    for (long i = 0;; i++) {
        msr_trainer_t *tr = NULL;
        msr_alloc_fail_at(i);
        msr_status_t st =
            mesh ? msr_trainer_create_mesh(c, ds, mesh, &tr) : msr_trainer_create(c, ds, NULL, &tr);
        double loss;
        for (int k = 0; k < 2 && st == MSR_OK; k++)
            st = msr_trainer_step(tr, &loss);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        msr_trainer_destroy(tr);
        if (!failed) {
            MSR_CHECK_OK(st);
            MSR_CHECK(i > 20);
            break;
        }
        MSR_CHECK_STATUS(st, MSR_ERR_NO_MEMORY);
    }
}

/* ZeRO-3 through the model-parallel runtime in one process (selective
 * and full recompute, GPipe and 1F1B, 2 micro-batches): ZeRO-0's losses
 * within 1e-5, every segment gathered around each use: forward the
 * embedding, the L blocks and the head (a GPT's with the tied embedding),
 * backward the head with the embedding, the L blocks and the embedding:
 * 2L + 6 gathers per micro-batch for a GPT, 2L + 5 for a Llama. */
static void test_zero3_mp(void)
{
    msr_dataset_t *ds = corpus();
    enum { STEPS = 3 };
    msr_mesh_t *mesh = NULL;
    MSR_CHECK_OK(msr_mesh_create(NULL, 1, 1, 1, 1, &mesh));
    for (int llama = 0; llama <= 1; llama++) {
        msr_train_config_t c = small_config(2, 2);
        if (llama)
            small_llama(&c);
        msr_trainer_t *ref = make(&c, ds);
        double want[STEPS], got[STEPS];
        train(ref, STEPS, want);
        msr_trainer_destroy(ref);
        c.par.zero = 3;
        c.par.zero_min_bytes = 0;
        c.par.bucket_bytes = 4000;
        for (int mode = MSR_MP_RECOMPUTE_SELECTIVE; mode <= MSR_MP_RECOMPUTE_FULL; mode++) {
            c.mp.recompute = (msr_mp_recompute_t)mode;
            c.mp.schedule = mode == MSR_MP_RECOMPUTE_FULL ? MSR_MP_GPIPE : MSR_MP_1F1B;
            msr_trainer_t *tr = NULL;
            MSR_CHECK_OK(msr_trainer_create_mesh(&c, ds, mesh, &tr));
            MSR_CHECK(tr->mp != NULL);
            train(tr, STEPS, got);
            for (int i = 0; i < STEPS; i++)
                MSR_CHECK_MSG(fabs(got[i] - want[i]) <= 1e-5 * want[i],
                              "%s %s step %d: ZeRO-3 %.9f, ZeRO-0 %.9f", llama ? "llama" : "gpt",
                              msr_mp_recompute_name(c.mp.recompute), i + 1, got[i], want[i]);
            uint64_t L = (uint64_t)c.model.layers, per = llama ? 2 * L + 5 : 2 * L + 6;
            MSR_CHECK_MSG(tr->dp->stats.gathers == STEPS * 2 * per,
                          "%s: %llu gathers in %d steps of 2 micro-batches, not %llu a micro-batch",
                          llama ? "llama" : "gpt", (unsigned long long)tr->dp->stats.gathers, STEPS,
                          (unsigned long long)per);
            MSR_CHECK_EQ(tr->dp->transient, 0);
            msr_trainer_destroy(tr);
        }
    }
    /* every allocation of such a trainer and of two steps failing in turn */
    msr_train_config_t c = small_config(2, 2);
    c.par.zero = 3;
    c.par.bucket_bytes = 8000;
    c.mp.recompute = MSR_MP_RECOMPUTE_SELECTIVE;
    fail_each_alloc(&c, ds, mesh);
    msr_mesh_destroy(mesh);
    msr_dataset_destroy(ds);
}

static void test_memory_by_stage(void)
{
    msr_dataset_t *ds = corpus();
    msr_train_config_t c = small_config(2, 1);
    for (int zero = 0; zero <= 3; zero++) {
        c.par.zero = zero;
        msr_trainer_t *tr = make(&c, ds);
        double loss;
        MSR_CHECK_OK(msr_trainer_step(tr, &loss));
        msr_dp_memory_t m;
        msr_dp_memory(tr->dp, &m);
        size_t P = tr->model->num_params, f = sizeof(float);
        MSR_CHECK_EQ(m.shard_elems, P);
        MSR_CHECK_EQ(m.replicated_elems, 2 * 32); /* lnfw, lnfb */
        MSR_CHECK_EQ(m.params, P * f);
        MSR_CHECK_EQ(m.grads, P * f);
        MSR_CHECK_EQ(m.optim, 2 * P * f);
        MSR_CHECK_EQ(tr->model->params == NULL, zero == 3);
        MSR_CHECK_EQ(tr->model->grads == NULL, zero >= 2);
        MSR_CHECK_EQ(m.transient_peak == 0, zero == 0);
        MSR_CHECK_EQ(tr->dp->transient, 0); /* every temporary buffer was freed */
        msr_trainer_destroy(tr);
    }
    msr_dataset_destroy(ds);
}

/* The restore's source: payloads in memory, by saving rank. */
typedef struct mem_ckpt {
    void *buf[4];
    size_t len[4];
    int fetched;
} mem_ckpt_t;

static msr_status_t fetch_mem(void *arg, int rank, void **buf_p, size_t *len_p)
{
    mem_ckpt_t *m = arg;
    if (m->buf[rank] == NULL)
        return MSR_ERR_NOT_FOUND;
    *buf_p = msr_malloc(m->len[rank]);
    MSR_CHECK(*buf_p != NULL);
    memcpy(*buf_p, m->buf[rank], m->len[rank]);
    *len_p = m->len[rank];
    m->fetched++;
    return MSR_OK;
}

/* Stopped after step 3 and restored: steps 4..7 are bitwise those of the
 * run that never stopped, and so is everything it ends with; restored into
 * ZeRO-3 with other buckets (another layout: the pieces are picked out),
 * the same. */
static void test_restore_bitwise(void)
{
    msr_dataset_t *ds = corpus();
    msr_train_config_t c = small_config(2, 1);
    c.warmup = 2;
    const char *meta = "test settings";
    msr_trainer_t *a = make(&c, ds);
    double la[7], lb[7];
    train(a, 3, la);
    mem_ckpt_t ck = {{NULL}, {0}, 0};
    MSR_CHECK_OK(msr_trainer_snapshot(a, meta, &ck.buf[0], &ck.len[0]));
    train(a, 4, la + 3);
    float *pa = params_of(a);
    size_t P = a->model->num_params;

    for (int k = 0; k < 2; k++) {
        msr_train_config_t cb = c;
        if (k == 1) {
            cb.par.zero = 3;
            cb.par.bucket_bytes = 4000;
        }
        msr_trainer_t *b = make(&cb, ds);
        MSR_CHECK_OK(msr_trainer_restore(b, meta, 1, fetch_mem, &ck));
        MSR_CHECK_EQ(b->step, 3);
        MSR_CHECK_EQ(b->dp->opt->t, 3);
        MSR_CHECK_EQ(b->sampler.position, 3 * 2);
        train(b, 4, lb + 3);
        for (int i = 3; i < 7; i++)
            MSR_CHECK_MSG(la[i] == lb[i], "zero %d step %d: %.9f uninterrupted, %.9f restored",
                          cb.par.zero, i + 1, la[i], lb[i]);
        float *pb = params_of(b);
        MSR_CHECK(memcmp(pa, pb, P * sizeof(float)) == 0);
        if (k == 0) {
            MSR_CHECK(memcmp(a->dp->opt->m, b->dp->opt->m, P * sizeof(float)) == 0);
            MSR_CHECK(memcmp(a->dp->opt->v, b->dp->opt->v, P * sizeof(float)) == 0);
        }
        free(pb);
        msr_trainer_destroy(b);
    }
    free(pa);

    /* other settings and another model size are refused; so is a damaged
     * payload, and one that lacks pieces */
    msr_trainer_t *b = make(&c, ds);
    MSR_CHECK_STATUS(msr_trainer_restore(b, "other settings", 1, fetch_mem, &ck), MSR_ERR_CONFIG);
    MSR_CHECK_EQ(b->step, 0);
    /* the trainer's text is the one msr_last_error() shows: one text for
     * the modules linked in and libmsrun (base/err_store.c) */
    MSR_CHECK(strstr(msr_last_error(), "other settings") != NULL);
    msr_trainer_destroy(b);
    msr_train_config_t wide = c;
    wide.model.channels = 64;
    b = make(&wide, ds);
    MSR_CHECK_STATUS(msr_trainer_restore(b, meta, 1, fetch_mem, &ck), MSR_ERR_CONFIG);
    msr_trainer_destroy(b);
    ((unsigned char *)ck.buf[0])[3] ^= 1;
    b = make(&c, ds);
    MSR_CHECK_STATUS(msr_trainer_restore(b, meta, 1, fetch_mem, &ck), MSR_ERR_CORRUPT);
    msr_trainer_destroy(b);
    msr_free(ck.buf[0]);
    static float zeros[100];
    msr_tckpt_range_t part = {0, 100, zeros, zeros, zeros};
    msr_tckpt_header_t h = {3, 3, 5, 6, P, 0, 1, 0, meta};
    MSR_CHECK_OK(msr_tckpt_encode(&h, &part, 1, &ck.buf[0], &ck.len[0]));
    b = make(&c, ds);
    MSR_CHECK_STATUS(msr_trainer_restore(b, meta, 1, fetch_mem, &ck), MSR_ERR_CORRUPT);
    msr_trainer_destroy(b);
    msr_free(ck.buf[0]);

    msr_trainer_destroy(a);
    msr_dataset_destroy(ds);
}

/* It learns: on the generated corpus the loss falls well below ln 256. */
static void test_loss_falls(void)
{
    msr_dataset_t *ds = corpus();
    msr_train_config_t c = small_config(8, 1);
    c.lr = 1e-2f;
    msr_trainer_t *tr = make(&c, ds);
    double losses[60];
    train(tr, 60, losses);
    MSR_CHECK_MSG(fabs(losses[0] - log(256.0)) < 0.1, "first loss %f", losses[0]);
    double tail = (losses[57] + losses[58] + losses[59]) / 3;
    MSR_CHECK_MSG(tail < 3.0, "loss after 60 steps %f (from %f)", tail, losses[0]);
    msr_trainer_destroy(tr);
    msr_dataset_destroy(ds);
}

static void test_schedule_and_clip(void)
{
    msr_dataset_t *ds = corpus();
    msr_train_config_t c = small_config(2, 1);
    c.warmup = 4;
    c.grad_clip = 1e-3f;
    msr_trainer_t *tr = make(&c, ds);
    MSR_CHECK(msr_trainer_lr(tr, 0) == c.lr / 4);
    MSR_CHECK(msr_trainer_lr(tr, 1) == c.lr / 2);
    MSR_CHECK(msr_trainer_lr(tr, 3) == c.lr);
    MSR_CHECK(msr_trainer_lr(tr, 100) == c.lr);
    double loss;
    MSR_CHECK_OK(msr_trainer_step(tr, &loss));
    MSR_CHECK(tr->last_grad_norm > 1e-3); /* so clipping was active */
    MSR_CHECK(isfinite(loss));
    msr_trainer_destroy(tr);
    msr_dataset_destroy(ds);
}

static void test_bad_config(void)
{
    msr_dataset_t *ds = corpus(), *tiny = NULL;
    msr_trainer_t *tr = NULL;
    msr_train_config_t c = small_config(2, 1);
    c.dp = 2; /* without a communicator of 2 */
    MSR_CHECK_STATUS(msr_trainer_create(&c, ds, NULL, &tr), MSR_ERR_CONFIG);
    c = small_config(2, 1);
    c.par.zero = 4;
    MSR_CHECK_STATUS(msr_train_config_check(&c, ds), MSR_ERR_CONFIG);
    MSR_CHECK(strstr(msr_err_msg(), "ZeRO") != NULL);
    MSR_CHECK(strcmp(msr_last_error(), msr_err_msg()) == 0);
    c = small_config(2, 1);
    c.par.bucket_bytes = 3;
    MSR_CHECK_STATUS(msr_trainer_create(&c, ds, NULL, &tr), MSR_ERR_CONFIG);
    c = small_config(0, 1);
    MSR_CHECK_STATUS(msr_train_config_check(&c, ds), MSR_ERR_CONFIG);
    MSR_CHECK(strstr(msr_err_msg(), "micro-batch") != NULL);
    c = small_config(2, 1);
    c.model.heads = 5;
    MSR_CHECK_STATUS(msr_trainer_create(&c, ds, NULL, &tr), MSR_ERR_CONFIG);
    c = small_config(2, 1);
    c.dp_rank = 1;
    MSR_CHECK_STATUS(msr_trainer_create(&c, ds, NULL, &tr), MSR_ERR_CONFIG);
    MSR_CHECK_OK(msr_dataset_generate(1, 16, &tiny)); /* not longer than T = 16 */
    c = small_config(2, 1);
    MSR_CHECK_STATUS(msr_train_config_check(&c, tiny), MSR_ERR_CONFIG);
    MSR_CHECK(strstr(msr_err_msg(), "longer") != NULL);
    MSR_CHECK(tr == NULL);
    msr_dataset_destroy(tiny);
    msr_dataset_destroy(ds);
}

/* Every allocation of creating a ZeRO-3 trainer and of two steps fails in
 * turn: the error comes back, nothing leaks (the sanitizer build checks)
 * and nothing crashes. */
static void test_alloc_failures(void)
{
    msr_dataset_t *ds = corpus();
    msr_train_config_t c = small_config(2, 2);
    c.par.zero = 3;
    c.par.bucket_bytes = 8000;
    fail_each_alloc(&c, ds, NULL);
    msr_dataset_destroy(ds);
}

/* A MoE trainer in one process (every block MoE, choices dropped): ZeRO
 * 0 and 3 train alike; stopped at step 3 and restored, it goes on bitwise,
 * experts and their moments included; a checkpoint without the experts is
 * refused; expert parallel without a group to share, experts not
 * divisible by ep x tp and MoE with cp are refused, MoE with tp is not. */
static void test_moe(void)
{
    msr_dataset_t *ds = corpus();
    msr_train_config_t c = small_config(2, 2);
    c.model.moe = (msr_gpt_moe_t){4, 2, 1, 1.0, 0.01};
    const char *meta = "moe settings";
    msr_trainer_t *a = make(&c, ds);
    MSR_CHECK(a->model->moe != NULL && a->eopt != NULL);
    double la[6], lb[6];
    train(a, 3, la);
    mem_ckpt_t ck = {{NULL}, {0}, 0};
    MSR_CHECK_OK(msr_trainer_snapshot(a, meta, &ck.buf[0], &ck.len[0]));
    train(a, 3, la + 3);

    msr_train_config_t z3 = c;
    z3.par.zero = 3;
    z3.par.bucket_bytes = 4000;
    msr_trainer_t *b = make(&z3, ds);
    train(b, 6, lb);
    for (int i = 0; i < 6; i++)
        MSR_CHECK_MSG(fabs(la[i] - lb[i]) <= 1e-5 * la[i], "step %d: zero 0 %.9f, zero 3 %.9f",
                      i + 1, la[i], lb[i]);
    msr_trainer_destroy(b);

    b = make(&c, ds);
    MSR_CHECK_OK(msr_trainer_restore(b, meta, 1, fetch_mem, &ck));
    MSR_CHECK_EQ(b->eopt->t, 3);
    train(b, 3, lb + 3);
    for (int i = 3; i < 6; i++)
        MSR_CHECK_MSG(la[i] == lb[i], "step %d: %.9f uninterrupted, %.9f restored", i + 1, la[i],
                      lb[i]);
    size_t n = msr_moe_count(a->model->moe);
    MSR_CHECK(memcmp(msr_moe_params(a->model->moe), msr_moe_params(b->model->moe),
                     n * sizeof(float)) == 0);
    MSR_CHECK(memcmp(a->eopt->m, b->eopt->m, n * sizeof(float)) == 0);
    MSR_CHECK(memcmp(a->eopt->v, b->eopt->v, n * sizeof(float)) == 0);
    msr_trainer_destroy(b);

    /* the same checkpoint without its expert ranges */
    msr_tckpt_header_t h;
    msr_tckpt_range_t *r = NULL;
    uint32_t nr;
    MSR_CHECK_OK(msr_tckpt_decode(ck.buf[0], ck.len[0], "test", &h, &r, &nr));
    uint32_t flat = 0;
    while (flat < nr && r[flat].lo < a->model->num_params)
        flat++;
    MSR_CHECK(flat > 0 && flat < nr);
    mem_ckpt_t cut = {{NULL}, {0}, 0};
    MSR_CHECK_OK(msr_tckpt_encode(&h, r, flat, &cut.buf[0], &cut.len[0]));
    b = make(&c, ds);
    MSR_CHECK_STATUS(msr_trainer_restore(b, meta, 1, fetch_mem, &cut), MSR_ERR_CORRUPT);
    msr_trainer_destroy(b);
    msr_free(r);
    msr_free(cut.buf[0]);
    msr_free(ck.buf[0]);
    msr_trainer_destroy(a);

    msr_train_config_t bad = c;
    bad.ep = 2; /* dp 1 */
    MSR_CHECK_STATUS(msr_train_config_check(&bad, ds), MSR_ERR_CONFIG);
    bad = c;
    bad.tp = 2;
    MSR_CHECK_OK(msr_train_config_check(&bad, ds));
    bad.model.moe.experts = 6; /* not divisible by ep 1 x tp 4 */
    bad.tp = 4;
    MSR_CHECK_STATUS(msr_train_config_check(&bad, ds), MSR_ERR_CONFIG);
    MSR_CHECK(strstr(msr_err_msg(), "6 experts do not divide among ep 1 x tp 4") != NULL);
    bad = c;
    bad.cp = 2; /* MoE runs under cp (tests/parallel/train_gpt_moe_cp.sh) */
    MSR_CHECK_OK(msr_train_config_check(&bad, ds));
    msr_dataset_destroy(ds);
}

/* A MoE model through the model-parallel runtime in one process (full and
 * selective recompute, 2 micro-batches): the losses of the data-parallel
 * trainer within 1e-5, and the router's counters alike (a recomputed
 * forward counts nothing). */
static void test_moe_mp(void)
{
    msr_dataset_t *ds = corpus();
    msr_train_config_t c = small_config(2, 2);
    c.model.moe = (msr_gpt_moe_t){4, 2, 1, 1.0, 0.01};
    int n = c.model.layers * (4 + 2);
    int64_t want[64], got[64];
    MSR_CHECK(n <= 64);
    double la[4], lb[4];
    msr_trainer_t *a = make(&c, ds);
    train(a, 4, la);
    MSR_CHECK_OK(msr_trainer_moe_stats(a, want));
    msr_trainer_destroy(a);
    msr_mesh_t *mesh = NULL;
    MSR_CHECK_OK(msr_mesh_create(NULL, 1, 1, 1, 1, &mesh));
    for (int mode = MSR_MP_RECOMPUTE_SELECTIVE; mode <= MSR_MP_RECOMPUTE_FULL; mode++) {
        msr_train_config_t m = c;
        m.mp.recompute = (msr_mp_recompute_t)mode;
        msr_trainer_t *b = NULL;
        MSR_CHECK_OK(msr_trainer_create_mesh(&m, ds, mesh, &b));
        MSR_CHECK(b->mp != NULL);
        train(b, 4, lb);
        for (int i = 0; i < 4; i++)
            MSR_CHECK_MSG(fabs(la[i] - lb[i]) <= 1e-5 * la[i], "%s step %d: %.9f, %.9f",
                          msr_mp_recompute_name(m.mp.recompute), i + 1, la[i], lb[i]);
        MSR_CHECK_OK(msr_trainer_moe_stats(b, got));
        MSR_CHECK(memcmp(want, got, (size_t)n * sizeof *got) == 0);
        msr_trainer_destroy(b);
    }
    msr_mesh_destroy(mesh);
    msr_dataset_destroy(ds);
}

/* Every allocation of a MoE trainer and of two steps fails in turn, on
 * the data-parallel path and through the model-parallel runtime. */
static void test_moe_alloc_failures(void)
{
    msr_dataset_t *ds = corpus();
    msr_train_config_t c = small_config(2, 2);
    c.model.moe = (msr_gpt_moe_t){4, 2, 2, 1.0, 0.01};
    c.par.zero = 2;
    msr_mesh_t *mesh = NULL; /* the model-parallel runtime in one process */
    MSR_CHECK_OK(msr_mesh_create(NULL, 1, 1, 1, 1, &mesh));
    msr_train_config_t m = c;
    m.mp.recompute = MSR_MP_RECOMPUTE_SELECTIVE;
    fail_each_alloc(&c, ds, NULL);
    fail_each_alloc(&m, ds, mesh);
    msr_mesh_destroy(mesh);
    msr_dataset_destroy(ds);
}

static const msr_test_t tests[] = {
    {"moe", test_moe, 60},
    {"moe_mp", test_moe_mp, 60},
    {"moe_alloc_failures", test_moe_alloc_failures, 60},
    {"accum_equivalence", test_accum_equivalence, 60},
    {"zero_alone", test_zero_alone, 60},
    {"zero3_gathers", test_zero3_gathers, 60},
    {"zero3_mp", test_zero3_mp, 60},
    {"memory_by_stage", test_memory_by_stage, 20},
    {"restore_bitwise", test_restore_bitwise, 60},
    {"alloc_failures", test_alloc_failures, 60},
    {"loss_falls", test_loss_falls, 60},
    {"schedule_and_clip", test_schedule_and_clip, 20},
    {"bad_config", test_bad_config, 20},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
