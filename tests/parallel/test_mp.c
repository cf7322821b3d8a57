/* The model-parallel runtime in one process: the mesh's coordinates and
 * refusals; every configuration that cannot work refused with its reason;
 * the activation count of each recompute mode; the runtime alone (tp = pp
 * = 1) trains bitwise as the plain trainer in every recompute mode; every
 * allocation may fail. (Several ranks run under msrun: mp_worker.c.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "parallel/train.h"
#include "tests/parallel/mp_small.h"
#include "tests/runner.h"

static void test_mesh(void)
{
    msr_mesh_t *m = NULL;
    MSR_CHECK_OK(msr_mesh_create(NULL, 1, 1, 1, 1, &m));
    MSR_CHECK(m->tp_comm == NULL && m->pp_comm == NULL && m->dp_comm == NULL &&
              m->cp_comm == NULL && m->dcp_comm == NULL);
    MSR_CHECK_EQ(m->rank, 0);
    msr_mesh_destroy(m);
    m = NULL;
    MSR_CHECK_STATUS(msr_mesh_create(NULL, 2, 1, 1, 1, &m), MSR_ERR_CONFIG);
    MSR_CHECK_STATUS(msr_mesh_create(NULL, 1, 0, 1, 1, &m), MSR_ERR_CONFIG);
    MSR_CHECK_STATUS(msr_mesh_create(NULL, 1, 1, 2, 1, &m), MSR_ERR_CONFIG);
    MSR_CHECK(m == NULL);
    msr_mesh_destroy(NULL);
    /* tp varies fastest, then cp, then pp, then dp */
    msr_mesh_t g = {.dp = 2, .pp = 3, .cp = 1, .tp = 4};
    MSR_CHECK_EQ(msr_mesh_rank_of(&g, 0, 0, 0, 1), 1);
    MSR_CHECK_EQ(msr_mesh_rank_of(&g, 0, 1, 0, 0), 4);
    MSR_CHECK_EQ(msr_mesh_rank_of(&g, 1, 0, 0, 0), 12);
    MSR_CHECK_EQ(msr_mesh_rank_of(&g, 1, 2, 0, 3), 23);
    msr_mesh_t h = {.dp = 2, .pp = 3, .cp = 2, .tp = 4};
    MSR_CHECK_EQ(msr_mesh_rank_of(&h, 0, 0, 1, 0), 4);
    MSR_CHECK_EQ(msr_mesh_rank_of(&h, 0, 1, 0, 0), 8);
    MSR_CHECK_EQ(msr_mesh_rank_of(&h, 1, 0, 0, 0), 24);
    MSR_CHECK_EQ(msr_mesh_rank_of(&h, 1, 2, 1, 3), 47);
}

static void test_refusals(void)
{
    static const struct {
        int layers, heads, channels, seq, pp, tp, sp, chunks, micros, zero;
        const char *schedule, *why;
        int cp;
    } cases[] = {
        {2, 4, 32, 16, 1, 3, 0, 1, 1, 0, "1f1b", "4 heads do not divide among tp 3"},
        {2, 6, 36, 16, 1, 3, 0, 1, 1, 0, "1f1b", "vocabulary of 256 does not divide among tp 3"},
        {2, 4, 32, 16, 4, 1, 0, 1, 4, 0, "1f1b", "2 layers are fewer than the 4 pipeline stages"},
        {2, 4, 32, 16, 1, 1, 1, 1, 1, 0, "1f1b", "needs tp > 1"},
        {2, 4, 32, 15, 1, 2, 1, 1, 1, 0, "1f1b", "sequence of 15 does not divide among tp 2"},
        {4, 4, 32, 16, 2, 1, 0, 1, 1, 0, "1f1b", "1 micro-batches (--grad-accum) for 2 stages"},
        {4, 4, 32, 16, 2, 1, 0, 2, 3, 0, "interleaved", "a multiple of the stages: 3"},
        {4, 4, 32, 16, 1, 1, 0, 2, 2, 0, "interleaved", "needs pp > 1"},
        {4, 4, 32, 16, 2, 1, 0, 2, 2, 0, "gpipe", "2 virtual stages need the interleaved"},
        {2, 4, 32, 16, 1, 1, 0, 1, 1, 4, "1f1b", "ZeRO stage 4 is not in 0..3"},
        {2, 4, 32, 12, 1, 1, 0, 1, 1, 0, "1f1b", "sequence of 12 does not divide into 2 x cp 4", 4},
        {2, 4, 32, 20, 1, 4, 1, 1, 1, 0, "1f1b", "sequence of 10 does not divide among tp 4", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        msr_gpt_config_t m = {MSR_GPT_VOCAB, cases[i].seq, cases[i].layers, cases[i].heads,
                              cases[i].channels};
        msr_mp_config_t c = {.cp = cases[i].cp,
                             .sp = cases[i].sp,
                             .schedule =
                                 (msr_mp_schedule_t)msr_mp_schedule_parse(cases[i].schedule),
                             .chunks = cases[i].chunks,
                             .micro_batch = 2,
                             .micros = cases[i].micros,
                             .zero = cases[i].zero};
        msr_err_clear();
        MSR_CHECK_STATUS(msr_mp_check(&m, &c, cases[i].pp, cases[i].tp), MSR_ERR_CONFIG);
        const char *why = msr_err_msg();
        MSR_CHECK_MSG(strstr(why, cases[i].why) != NULL, "case %zu: '%s' lacks '%s'", i, why,
                      cases[i].why);
    }
    /* ZeRO-3: tp, sp, cp, recompute, pp with every schedule; a MoE model
     * too */
    msr_gpt_config_t m = {MSR_GPT_VOCAB, 16, 4, 4, 32};
    msr_mp_config_t z3 = {.sp = 1, .chunks = 1, .micro_batch = 2, .micros = 2, .zero = 3};
    MSR_CHECK_STATUS(msr_mp_check(&m, &z3, 1, 2), MSR_OK);
    z3.recompute = MSR_MP_RECOMPUTE_FULL;
    MSR_CHECK_STATUS(msr_mp_check(&m, &z3, 1, 2), MSR_OK);
    z3.cp = 2;
    MSR_CHECK_STATUS(msr_mp_check(&m, &z3, 1, 2), MSR_OK);
    z3.cp = 1;
    MSR_CHECK_STATUS(msr_mp_check(&m, &z3, 2, 2), MSR_OK); /* 1F1B */
    z3.schedule = MSR_MP_GPIPE;
    z3.sp = 0;
    MSR_CHECK_STATUS(msr_mp_check(&m, &z3, 2, 1), MSR_OK);
    z3.schedule = MSR_MP_INTERLEAVED;
    z3.chunks = 2;
    MSR_CHECK_STATUS(msr_mp_check(&m, &z3, 2, 1), MSR_OK);
    z3.schedule = MSR_MP_1F1B;
    z3.chunks = 1;
    m.moe.experts = 2;
    m.moe.top_k = 1;
    m.moe.every = 1;
    m.moe.capacity_factor = 1.0;
    MSR_CHECK_STATUS(msr_mp_check(&m, &z3, 1, 2), MSR_OK);
    z3.cp = 2;
    MSR_CHECK_STATUS(msr_mp_check(&m, &z3, 2, 2), MSR_OK);
    MSR_CHECK_EQ(msr_mp_schedule_parse("zigzag"), -1);
    MSR_CHECK_EQ(msr_mp_recompute_parse("some"), -1);
    MSR_CHECK_STR(msr_mp_schedule_name(MSR_MP_INTERLEAVED), "interleaved");
    MSR_CHECK_STR(msr_mp_recompute_name(MSR_MP_RECOMPUTE_SELECTIVE), "selective");
}

/* The bytes a micro-batch's chunk keeps, counted by hand (docs/model.md). */
static void test_frame_bytes(void)
{
    msr_gpt_config_t m = {MSR_GPT_VOCAB, 16, 4, 4, 32};
    size_t B = 2, T = 16, C = 32, NH = 4, V = 256;
    for (int tp = 1; tp <= 2; tp++) {
        for (int sp = 0; sp <= (tp > 1); sp++) {
            size_t N = B * T, Nl = sp ? N / tp : N, Cl = C / tp, Hl = 4 * C / tp;
            size_t kept = 4 * Nl * C + 4 * Nl + 4 * N * Cl + N * Hl;
            size_t want[3] = {kept + B * (NH / tp) * T * T + N * Hl, kept, Nl * C};
            for (int rc = 0; rc < 3; rc++) {
                msr_mp_config_t c = {.sp = sp,
                                     .recompute = (msr_mp_recompute_t)rc,
                                     .micro_batch = (int)B,
                                     .micros = 1,
                                     .chunks = 1};
                size_t head = Nl * C + 2 * Nl + N * V / tp;
                MSR_CHECK_EQ(msr_mp_frame_bytes(&m, &c, tp, 3, 0), 4 * (Nl * C + 3 * want[rc]));
                MSR_CHECK_EQ(msr_mp_frame_bytes(&m, &c, tp, 1, 1), 4 * (Nl * C + want[rc] + head));
            }
        }
    }
    /* context parallel: a rank's T/cp positions everywhere; attention keeps
     * the logsumexp (N, NH/tp) instead of the probabilities, also under
     * selective recompute */
    for (int cp = 2; cp <= 4; cp *= 2) {
        for (int tp = 1; tp <= 2; tp++) {
            for (int sp = 0; sp <= (tp > 1); sp++) {
                size_t Tc = T / cp, N = B * Tc, Nl = sp ? N / tp : N, Cl = C / tp, Hl = 4 * C / tp;
                size_t kept = 4 * Nl * C + 4 * Nl + 4 * N * Cl + N * Hl, lse = N * (NH / tp);
                size_t want[3] = {kept + lse + N * Hl, kept + lse, Nl * C};
                size_t head = Nl * C + 2 * Nl + N * V / tp;
                for (int rc = 0; rc < 3; rc++) {
                    msr_mp_config_t c = {.sp = sp,
                                         .recompute = (msr_mp_recompute_t)rc,
                                         .micro_batch = (int)B,
                                         .micros = 1,
                                         .chunks = 1,
                                         .cp = cp};
                    MSR_CHECK_EQ(msr_mp_frame_bytes(&m, &c, tp, 3, 0), 4 * (Nl * C + 3 * want[rc]));
                    MSR_CHECK_EQ(msr_mp_frame_bytes(&m, &c, tp, 1, 1),
                                 4 * (Nl * C + want[rc] + head));
                }
            }
        }
    }
}

/* tp = pp = 1 through the runtime: bitwise the plain trainer with the same
 * ZeRO stage (0-2) in every recompute mode (GPipe and 1F1B reduce over dp
 * during backward, micro-batch by micro-batch as data parallel does). */
static void test_alone_bitwise(void)
{
    msr_dataset_t *ds = NULL;
    MSR_CHECK_OK(msr_dataset_generate(3, 1 << 15, &ds));
    for (int zero = 0; zero <= 2; zero++) {
        msr_train_config_t c = mp_small_config(3, zero);
        msr_trainer_t *ref = NULL;
        MSR_CHECK_OK(msr_trainer_create(&c, ds, NULL, &ref));
        double want[4];
        for (int i = 0; i < 4; i++)
            MSR_CHECK_OK(msr_trainer_step(ref, &want[i]));
        for (int rc = 0; rc < 3; rc++) {
            msr_mesh_t *mesh = NULL;
            MSR_CHECK_OK(msr_mesh_create(NULL, 1, 1, 1, 1, &mesh));
            msr_train_config_t m = c;
            m.mp.recompute = (msr_mp_recompute_t)rc;
            m.mp.schedule = rc == 1 ? MSR_MP_GPIPE : MSR_MP_1F1B;
            m.mp_always = 1;
            msr_trainer_t *tr = NULL;
            MSR_CHECK_OK(msr_trainer_create_mesh(&m, ds, mesh, &tr));
            MSR_CHECK(tr->mp != NULL);
            for (int i = 0; i < 4; i++) {
                double loss;
                MSR_CHECK_OK(msr_trainer_step(tr, &loss));
                MSR_CHECK_MSG(loss == want[i], "zero %d recompute %d step %d: %.17g != %.17g", zero,
                              rc, i + 1, loss, want[i]);
            }
            MSR_CHECK_EQ(memcmp(tr->model->params, ref->model->params,
                                ref->model->num_params * sizeof(float)),
                         0);
            /* one micro-batch alive at a time alone under 1F1B, all under GPipe */
            const msr_mp_stats_t *s = msr_mp_stats(tr->mp);
            MSR_CHECK_EQ(s->acts_peak, (rc == 1 ? 3 : 1) * s->frame_bytes[1]);
            msr_trainer_destroy(tr);
            msr_mesh_destroy(mesh);
        }
        msr_trainer_destroy(ref);
    }
    msr_dataset_destroy(ds);
}

/* Every allocation of creating a runtime trainer (full recompute, ZeRO-2,
 * tracing) and of two steps fails in turn: the error comes back, nothing
 * leaks (the sanitizer build checks), nothing crashes. */
static void test_alloc_failures(void)
{
    msr_dataset_t *ds = NULL;
    MSR_CHECK_OK(msr_dataset_generate(3, 1 << 15, &ds));
    msr_train_config_t c = mp_small_config(2, 2);
    c.mp.recompute = MSR_MP_RECOMPUTE_FULL;
    for (long i = 0;; i++) {
        int failed;
        msr_status_t st = mp_small_alloc_round(&c, ds, i, 1, &failed);
        if (!failed) {
            MSR_CHECK_OK(st);
            MSR_CHECK(i > 20);
            break;
        }
        /* a lost trace span is not an error */
        MSR_CHECK(st == MSR_ERR_NO_MEMORY || st == MSR_OK);
    }
    msr_dataset_destroy(ds);
}

static const msr_test_t tests[] = {
    {"mesh", test_mesh, 10},
    {"refusals", test_refusals, 10},
    {"frame_bytes", test_frame_bytes, 10},
    {"alone_bitwise", test_alone_bitwise, 60},
    {"alloc_failures", test_alloc_failures, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
