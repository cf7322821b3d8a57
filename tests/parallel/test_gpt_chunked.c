/* The whole model with a chunked head (msr_gpt_create_chunked: the
 * validation loss of a job that trains with --head-chunk): one chunk (V
 * rows, one past, 2^30) gives the whole head's losses bitwise, position
 * by position; chunks that do not divide V (V - 1, 5, 1 rows) within
 * 2e-6 of it; for the GPT's tied head, a Llama's lm_head and bf16
 * products, at the batch the model was sized for and under it. The
 * model holds one chunk's logits and exponentials and 6 N floats where
 * the whole head holds three (N, V) buffers; the logits (a forward
 * without targets), backward and a chunk under one row are refused. */
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "model/gpt.h"
#include "model/rng.h"
#include "tests/runner.h"

enum { V = 64, MAXT = 8, TB = 2 };

static msr_gpt_config_t config(int llama)
{
    msr_gpt_config_t cfg = {V, MAXT, 2, 2, 16}; /* V maxT L NH C */
    if (llama) {
        cfg.arch = MSR_GPT_ARCH_LLAMA;
        cfg.ffn = 24;
        cfg.kv_heads = 1;
        cfg.rope_theta = 10000.0;
    }
    return cfg;
}

static void batch(int *inp, int *tgt, int n)
{
    for (int i = 0; i < n; i++) {
        inp[i] = (int)msr_rng_below(msr_rng_u64(11, 1, (uint64_t)i), V);
        tgt[i] = (int)msr_rng_below(msr_rng_u64(11, 2, (uint64_t)i), V);
    }
}

/* The chunked model of hc rows against the whole one (its parameters,
 * precision prec) on a batch of B: the loss and each position's. */
static void check_chunks(msr_gpt_t *whole, int hc, msr_precision_t prec, int B)
{
    int inp[TB * MAXT], tgt[TB * MAXT], N = B * MAXT;
    batch(inp, tgt, N);
    msr_gpt_t *m = NULL;
    MSR_CHECK_OK(msr_gpt_create_chunked(&whole->cfg, TB, hc, MSR_GPT_NO_GRADS, &m));
    if (m == NULL)
        return;
    MSR_CHECK(m->grads == NULL && m->head_chunk == (hc < V ? hc : V));
    MSR_CHECK_OK(msr_gpt_set_precision(m, prec));
    memcpy(m->params, whole->params, whole->num_params * sizeof(float));
    double lw = 0, lc = 0;
    MSR_CHECK_OK(msr_gpt_forward(whole, inp, tgt, B, MAXT, NULL, &lw));
    MSR_CHECK_OK(msr_gpt_forward(m, inp, tgt, B, MAXT, NULL, &lc));
    if (hc >= V) { /* one chunk: the whole head's kernels in its order */
        MSR_CHECK_MSG(lc == lw, "%d rows: %.17g, whole %.17g", hc, lc, lw);
        MSR_CHECK(memcmp(m->acts.losses, whole->acts.losses, (size_t)N * sizeof(float)) == 0);
    } else {
        MSR_CHECK_MSG(fabs(lc - lw) <= 2e-6 * fabs(lw), "%d rows: %.17g, whole %.17g", hc, lc, lw);
        for (int i = 0; i < N; i++)
            MSR_CHECK_MSG(fabsf(m->acts.losses[i] - whole->acts.losses[i]) <=
                              2e-6f * fabsf(whole->acts.losses[i]),
                          "%d rows, position %d: %g, whole %g", hc, i, m->acts.losses[i],
                          whole->acts.losses[i]);
    }
    /* what it holds: one chunk's logits and exponentials, 6 N floats */
    size_t n = (size_t)TB * MAXT, c = (size_t)(hc < V ? hc : V);
    MSR_CHECK_EQ(m->acts_count + 2 * n * V, whole->acts_count + n * c + 6 * n);
    MSR_CHECK_EQ(m->work_count + n * V, whole->work_count + n * c);
    msr_gpt_destroy(m);
}

static void test_losses(void)
{
    const int bitwise[] = {V, V + 1, 1 << 30}, close[] = {V - 1, 5, 1};
    for (int llama = 0; llama <= 1; llama++) {
        for (int bf16 = 0; bf16 <= !llama; bf16++) {
            msr_precision_t prec = bf16 ? MSR_PRECISION_BF16 : MSR_PRECISION_FP32;
            msr_gpt_config_t cfg = config(llama);
            msr_gpt_t *whole = NULL;
            MSR_CHECK_OK(msr_gpt_create(&cfg, TB, &whole));
            if (whole == NULL)
                return;
            msr_gpt_init_params(whole, 7);
            MSR_CHECK_OK(msr_gpt_set_precision(whole, prec));
            for (int B = 1; B <= TB; B++)
                for (int i = 0; i < 3; i++) {
                    check_chunks(whole, bitwise[i], prec, B);
                    check_chunks(whole, close[i], prec, B);
                }
            msr_gpt_destroy(whole);
        }
    }
}

static void test_refused(void)
{
    msr_gpt_config_t cfg = config(0);
    msr_gpt_t *m = NULL;
    MSR_CHECK(msr_gpt_create_chunked(&cfg, TB, 0, 0, &m) == MSR_ERR_CONFIG && m == NULL);
    MSR_CHECK(msr_gpt_create_chunked(&cfg, TB, -1, 0, &m) == MSR_ERR_CONFIG && m == NULL);
    MSR_CHECK(msr_gpt_create_chunked(&cfg, 0, 8, 0, &m) == MSR_ERR_CONFIG && m == NULL);
    MSR_CHECK_OK(msr_gpt_create_chunked(&cfg, TB, 8, 0, &m));
    if (m == NULL)
        return;
    msr_gpt_init_params(m, 3);
    int inp[TB * MAXT], tgt[TB * MAXT];
    batch(inp, tgt, TB * MAXT);
    double loss = 0;
    MSR_CHECK(msr_gpt_forward(m, inp, NULL, TB, MAXT, NULL, &loss) == MSR_ERR_STATE);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "a chunked head computes the loss, not the logits") != NULL,
                  "%s", msr_err_msg());
    MSR_CHECK_OK(msr_gpt_forward(m, inp, tgt, TB, MAXT, NULL, &loss));
    MSR_CHECK(isfinite(loss) && loss > 0);
    MSR_CHECK(msr_gpt_backward(m, 1.0f, NULL) == MSR_ERR_STATE);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "backward of a model with a chunked head") != NULL, "%s",
                  msr_err_msg());
    msr_gpt_destroy(m);
}

static const msr_test_t tests[] = {
    {"losses", test_losses, 60},
    {"refused", test_refused, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
