/* The model's kernels through their table (model/kernels.h): every kernel
 * a block's forward and backward runs, and those of the model's ends (the
 * embeddings, the final norm, the head and the loss), is a call of the
 * model's table, for the GPT (fp32 and bf16 products) and the Llama: the
 * whole model's passes (a MoE block's router and experts too), a tensor-parallel slice's block (its
 * biases added after the reduction) and a trainer's steps (the data-parallel path, and the
 * model-parallel runtime without recompute, with selective recompute's kernels brought back and
 * with full recompute's forward). A table that count_kernel_calls its calls and runs the CPU's
 * kernels gives the CPU's losses, outputs and gradients bitwise, and its count_kernel_calls are
 * exactly the kernels the model runs: a kernel called past the table leaves its count short and
 * fails the test. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "base/err.h"
#include "model/block.h"
#include "model/gpt.h"
#include "model/kernels.h"
#include "model/moe.h"
#include "model/rng.h"
#include "parallel/mesh.h"
#include "parallel/mp_impl.h"
#include "parallel/train.h"
#include "tests/parallel/count_kernels.h"
#include "tests/parallel/mp_small.h"
#include "tests/runner.h"

/* count_kernel_calls == want (K_N entries), each entry named. */
static void check_counts(const char *what, const long *want)
{
    for (int k = 0; k < K_N; k++)
        MSR_CHECK_MSG(count_kernel_calls[k] == want[k], "%s: %s called %ld times, want %ld", what,
                      count_kernel_names[k], count_kernel_calls[k], want[k]);
}

/* The kernels of one block's forward and backward, a GPT's (at tp 1 or
 * more) or a Llama's, with the dense MLP and no context parallel. */
static void block_counts(int llama, int tp, long *fwd, long *bwd)
{
    memset(fwd, 0, K_N * sizeof *fwd);
    memset(bwd, 0, K_N * sizeof *bwd);
    fwd[K_MMF] = 4;
    fwd[K_RES] = 2;
    bwd[K_MMB] = 4;
    if (llama) {
        fwd[K_RMSF] = 2, fwd[K_ROPE] = 2, fwd[K_GQAF] = 1, fwd[K_SWIF] = 1;
        /* dfch and dqkv zeroed: the SwiGLU and the GQA backward add */
        bwd[K_RMSB] = 2, bwd[K_ROPE] = 2, bwd[K_GQAB] = 1, bwd[K_SWIB] = 1, bwd[K_ZERO] = 2;
        return;
    }
    fwd[K_LNF] = 2, fwd[K_ATTF] = 1, fwd[K_GELUF] = 1;
    fwd[K_OPER] = 3; /* ln1's, ln2's, gelu's bf16 operands */
    bwd[K_LNB] = 2, bwd[K_ATTB] = 1, bwd[K_GELUB] = 1;
    bwd[K_OPER] = 1; /* gelu's backward's */
    if (tp > 1) {    /* the row-parallel layers' biases after the reduction */
        fwd[K_BIAS] = 2;
        bwd[K_COLSUM] = 2;
    }
}

/* The kernels of the model's ends once a micro-batch, added to fwd and
 * bwd: the embeddings, the final norm, the head and the loss; zeros: the
 * buffers the whole model's backward zeroes first through the table (the
 * model-parallel runtime zeroes them through its device). */
static void ends_counts(int llama, int zeros, long *fwd, long *bwd)
{
    fwd[llama ? K_EMBF : K_ENCF]++;
    fwd[llama ? K_RMSF : K_LNF]++;
    fwd[K_MMF]++;
    fwd[K_XENTF]++;
    if (!llama)
        fwd[K_OPER]++; /* the final layernorm's bf16 operand, for the head */
    bwd[K_XENTB]++;
    bwd[K_MMBA]++;
    bwd[llama ? K_RMSB : K_LNB]++;
    bwd[llama ? K_EMBB : K_ENCB]++;
    bwd[K_ZERO] += zeros;
}

/* ---- the table ---- */

/* The CPU's table is the layers.h kernels, every entry set. */
static void test_cpu_table(void)
{
    const msr_kernels_t *k = msr_kernels_cpu();
    MSR_CHECK(k != NULL && k == msr_kernels_cpu());
    MSR_CHECK_STR(k->name, "cpu");
    MSR_CHECK(k->layernorm_forward == msr_layernorm_forward_bf16);
    MSR_CHECK(k->matmul_forward == msr_matmul_forward);
    MSR_CHECK(k->matmul_backward_set == msr_matmul_backward_set);
    MSR_CHECK(k->attention_forward == msr_attention_forward);
    MSR_CHECK(k->attention_gqa_backward == msr_attention_gqa_backward);
    MSR_CHECK(k->rope == msr_rope_forward);
    MSR_CHECK(k->gelu_backward_set == msr_gelu_backward_set_bf16);
    MSR_CHECK(k->residual == msr_residual_forward);
    MSR_CHECK(k->layernorm_backward != NULL && k->rmsnorm_forward != NULL &&
              k->rmsnorm_backward != NULL && k->operand != NULL &&
              k->attention_backward_set != NULL && k->attention_gqa_forward != NULL &&
              k->gelu_forward != NULL && k->swiglu_forward != NULL && k->swiglu_backward != NULL &&
              k->add_bias != NULL && k->add_colsum != NULL && k->zero != NULL);
    /* the three small kernels of the block's own */
    float x[6] = {1, 2, 3, 4, 5, 6}, b[3] = {0.5f, -1, 2}, db[3] = {1, 1, 1};
    k->add_bias(x, b, 2, 3);
    const float xb[6] = {1.5f, 1, 5, 4.5f, 4, 8};
    MSR_CHECK_EQ(memcmp(x, xb, sizeof x), 0);
    k->add_colsum(db, x, 2, 3);
    const float dbs[3] = {7, 6, 14};
    MSR_CHECK_EQ(memcmp(db, dbs, sizeof db), 0);
    k->zero(x + 1, 4);
    MSR_CHECK(x[0] == 1.5f && x[1] == 0 && x[4] == 0 && x[5] == 8);
    /* the ring's two: 4 heads of 2 columns over 2 kv heads (each serving
     * heads 2k and 2k + 1), 2 rows of K then V; and rows added into a
     * wider array's last columns */
    float dx[2 * 16], dkv[2 * 8], want[2 * 8];
    for (int i = 0; i < 32; i++)
        dx[i] = (float)(i * i % 7) - 2.5f;
    for (int i = 0; i < 16; i++)
        dkv[i] = want[i] = (float)i;
    for (int n = 0; n < 2; n++)
        for (int part = 0; part < 2; part++)
            for (int h = 0; h < 4; h++)
                for (int c = 0; c < 2; c++)
                    want[n * 8 + part * 4 + h / 2 * 2 + c] += dx[n * 16 + part * 8 + h * 2 + c];
    k->ring_fold_kv(dkv, dx, 2, 8, 4, 2);
    MSR_CHECK_EQ(memcmp(dkv, want, sizeof dkv), 0);
    float rows[3 * 5] = {0}, src[3 * 4];
    for (int i = 0; i < 12; i++)
        src[i] = (float)i + 0.25f;
    k->add_rows(rows + 2, 5, src, 4, 3, 3);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 5; c++)
            MSR_CHECK(rows[r * 5 + c] == (c < 2 ? 0 : src[r * 4 + c - 2]));
}

/* The softmax of n logits in double. */
static void softmax_f64(double *p, const float *logits, int n)
{
    double mx = logits[0], sum = 0.0;
    for (int e = 1; e < n; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    for (int e = 0; e < n; e++)
        sum += p[e] = exp((double)logits[e] - mx);
    for (int e = 0; e < n; e++)
        p[e] /= sum;
}

/* The MoE kernels of the CPU's table (layers.h's msr_moe_*) against
 * their contracts on small cases: ties to the lower index, most probable
 * first, renormalised gates, every K up to E; rows without a place (-1)
 * neither read nor written; sums in order. */
static void test_moe_kernels(void)
{
    const msr_kernels_t *k = msr_kernels_cpu();
    enum { NT = 3, NE = 4 };
    const float logits[NT * NE] = {1, 3, 3, 0, 5, -1, 2, 4, 0, 0, 0, 0};
    /* the route, K = 1..E, with and without renormalisation */
    const int order[NT][NE] = {{1, 2, 0, 3}, {0, 3, 2, 1}, {0, 1, 2, 3}};
    for (int K = 1; K <= NE; K++) {
        for (int renorm = 0; renorm < 2; renorm++) {
            float probs[NT * NE], gate[NT * NE];
            int choice[NT * NE];
            memcpy(probs, logits, sizeof probs);
            k->moe_route(probs, choice, gate, NT, NE, K, renorm);
            for (int t = 0; t < NT; t++) {
                double p[NE], chosen = 0.0;
                softmax_f64(p, logits + t * NE, NE);
                for (int e = 0; e < NE; e++)
                    MSR_CHECK(fabs(probs[t * NE + e] - p[e]) <= 1e-7);
                for (int j = 0; j < K; j++)
                    chosen += p[order[t][j]];
                for (int j = 0; j < K; j++) {
                    MSR_CHECK_MSG(choice[t * K + j] == order[t][j], "K %d token %d choice %d: %d",
                                  K, t, j, choice[t * K + j]);
                    double want = p[order[t][j]] / (renorm ? chosen : 1.0);
                    MSR_CHECK(fabs(gate[t * K + j] - want) <= 1e-6);
                    if (!renorm)
                        MSR_CHECK(gate[t * K + j] == probs[t * NE + order[t][j]]);
                }
            }
            MSR_CHECK(gate[2 * K] == (renorm ? 1.0f / K : 0.25f)); /* all equal: exact */
        }
    }
    /* the probabilities' sums, in token order */
    double P[NE];
    k->moe_prob_sums(P, logits, NT, NE);
    for (int e = 0; e < NE; e++)
        MSR_CHECK(P[e] == ((double)logits[e] + logits[NE + e]) + logits[2 * NE + e]);

    /* dispatch and combine: 3 tokens, 2 choices, 2 columns, 5 rows; token
     * 2's second choice and token 0's second have no row */
    enum { K2 = 2, C2 = 2, R = 5 };
    const int row[NT * K2] = {2, -1, 0, 3, 1, -1};
    const float x[NT * C2] = {1, 2, 3, 4, 5, 6}, gate[NT * K2] = {0.5f, 9, 0.25f, 2, 4, 9};
    float send[R * C2];
    for (int i = 0; i < R * C2; i++)
        send[i] = -7;
    k->moe_dispatch(send, x, row, NT, K2, C2);
    const float want_send[R * C2] = {3, 4, 5, 6, 1, 2, 3, 4, -7, -7};
    MSR_CHECK_EQ(memcmp(send, want_send, sizeof send), 0);
    float dx[NT * C2] = {1, 1, 1, 1, 1, 1};
    k->moe_dispatch_backward(dx, want_send, row, NT, K2, C2);
    const float want_dx[NT * C2] = {2, 3, 4 + 3, 5 + 4, 6, 7};
    MSR_CHECK_EQ(memcmp(dx, want_dx, sizeof dx), 0);
    const float comb[R * C2] = {1, 2, 3, 4, 5, 6, 7, 8, 100, 100};
    float y[NT * C2] = {9, 9, 9, 9, 9, 9};
    k->moe_combine(y, comb, row, gate, NT, K2, C2);
    const float want_y[NT * C2] = {2.5f, 3, 0.25f + 14, 0.5f + 16, 12, 16};
    MSR_CHECK_EQ(memcmp(y, want_y, sizeof y), 0);
    const float dy[NT * C2] = {1, -1, 2, 0.5f, -2, 1};
    float dcomb[R * C2], dgate[NT * K2];
    for (int i = 0; i < R * C2; i++)
        dcomb[i] = -7;
    for (int i = 0; i < NT * K2; i++)
        dgate[i] = 9;
    k->moe_combine_backward(dcomb, dgate, dy, comb, row, gate, NT, K2, C2);
    const float want_dgate[NT * K2] = {-1, 0, 3, 14 + 4, -6 + 4, 0};
    const float want_dcomb[R * C2] = {0.5f, 0.125f, -8, 4, 0.5f, -0.5f, 4, 1, -7, -7};
    MSR_CHECK_EQ(memcmp(dgate, want_dgate, sizeof dgate), 0);
    MSR_CHECK_EQ(memcmp(dcomb, want_dcomb, sizeof dcomb), 0);

    /* the router's backward: softmax's backward of daux * frac plus the
     * gates' gradients at their experts (renormalised first) */
    for (int renorm = 0; renorm < 2; renorm++) {
        float probs[NT * NE], g[NT * K2], dprobs[NT * NE];
        int choice[NT * K2];
        memcpy(probs, logits, sizeof probs);
        k->moe_route(probs, choice, g, NT, NE, K2, renorm);
        const double frac[NE] = {0.5, 0.125, 0.25, 0.125}, daux = 0.75;
        float dg[NT * K2] = {1, -2, 0.5f, 3, -1, 0.25f}, dg0[NT * K2];
        memcpy(dg0, dg, sizeof dg);
        k->moe_route_backward(dprobs, dg, probs, g, choice, frac, daux, NT, NE, K2, renorm);
        for (int t = 0; t < NT; t++) {
            const float *pr = probs + t * NE;
            double S = pr[choice[t * K2]] + pr[choice[t * K2 + 1]], dot = 0.0, up[NE];
            double d[K2];
            for (int j = 0; j < K2; j++)
                d[j] = dg0[t * K2 + j];
            if (renorm) {
                double gd = d[0] * g[t * K2] + d[1] * g[t * K2 + 1];
                for (int j = 0; j < K2; j++)
                    d[j] = (d[j] - gd) / S;
            }
            for (int e = 0; e < NE; e++)
                up[e] = daux * frac[e];
            for (int j = 0; j < K2; j++)
                up[choice[t * K2 + j]] += d[j];
            for (int e = 0; e < NE; e++)
                dot += pr[e] * up[e];
            for (int e = 0; e < NE; e++)
                MSR_CHECK_MSG(fabs(dprobs[t * NE + e] - pr[e] * (up[e] - dot)) <= 1e-6,
                              "renorm %d token %d expert %d: %g", renorm, t, e, dprobs[t * NE + e]);
            for (int j = 0; j < K2; j++) /* in place under renorm only */
                MSR_CHECK(renorm ? fabs(dg[t * K2 + j] - d[j]) <= 1e-6
                                 : dg[t * K2 + j] == dg0[t * K2 + j]);
        }
    }
}

/* A table with an entry missing is refused by name, entry by entry, and
 * the model keeps the table it had; the CPU's and the counting table are
 * whole; a trainer given a table with a hole is not created. */
static void test_incomplete_table(void)
{
    size_t n = msr_kernels_entries();
    MSR_CHECK(n > 30 && msr_kernels_entry_name(n) == NULL);
    MSR_CHECK_STR(msr_kernels_entry_name(0), "layernorm_forward");
    MSR_CHECK_STR(msr_kernels_entry_name(n - 1), "vocab_crossentropy_backward");
    MSR_CHECK(msr_kernels_missing(msr_kernels_cpu()) == NULL);
    MSR_CHECK(msr_kernels_missing(count_kernels()) == NULL);
    msr_gpt_config_t c = {MSR_GPT_VOCAB, 8, 1, 2, 16};
    msr_gpt_t *m = NULL;
    MSR_CHECK_OK(msr_gpt_create(&c, 1, &m));
    MSR_CHECK_OK(msr_gpt_set_kernels(m, count_kernels()));
    for (size_t i = 0; i < n; i++) {
        msr_kernels_t holed = *count_kernels();
        const char *name = msr_kernels_entry_name(i);
        size_t off = msr_kernels_entry_offset(i);
        MSR_CHECK(off >= offsetof(msr_kernels_t, layernorm_forward) &&
                  off + sizeof(void (*)(void)) <= sizeof holed);
        memset((char *)&holed + off, 0, sizeof(void (*)(void)));
        MSR_CHECK_STR(msr_kernels_missing(&holed), name);
        msr_err_clear();
        MSR_CHECK_EQ(msr_gpt_set_kernels(m, &holed), MSR_ERR_INVALID_ARG);
        MSR_CHECK_MSG(strstr(msr_err_msg(), name) != NULL && strstr(msr_err_msg(), "counting"),
                      "entry %s: %s", name, msr_err_msg());
        MSR_CHECK(m->kernels == count_kernels());
    }
    MSR_CHECK_OK(msr_gpt_set_kernels(m, NULL)); /* the CPU's */
    MSR_CHECK(m->kernels == NULL);
    msr_gpt_destroy(m);

    msr_kernels_t holed = *count_kernels();
    holed.vocab_loss = NULL;
    msr_dataset_t *ds = NULL;
    MSR_CHECK_OK(msr_dataset_generate(3, 1 << 15, &ds));
    msr_train_config_t tc = mp_small_config(1, 0);
    tc.kernels = &holed;
    msr_mesh_t *mesh = NULL;
    msr_trainer_t *tr = NULL;
    MSR_CHECK_OK(msr_mesh_create(NULL, 1, 1, 1, 1, &mesh));
    MSR_CHECK_EQ(msr_trainer_create_mesh(&tc, ds, mesh, &tr), MSR_ERR_INVALID_ARG);
    MSR_CHECK(tr == NULL);
    msr_mesh_destroy(mesh);
    msr_dataset_destroy(ds);
}

/* ---- the whole model ---- */

enum { BB = 2, TT = 8 };

static msr_gpt_config_t shape(int llama)
{
    msr_gpt_config_t c = {MSR_GPT_VOCAB, TT, 2, 4, 16}; /* V maxT L NH C */
    if (llama) {
        c.arch = MSR_GPT_ARCH_LLAMA;
        c.ffn = 24;
        c.kv_heads = 2;
        c.rope_theta = 10000.0;
    }
    return c;
}

static msr_gpt_t *model(int llama, msr_precision_t prec)
{
    msr_gpt_config_t c = shape(llama);
    msr_gpt_t *m = NULL;
    MSR_CHECK_OK(msr_gpt_create(&c, BB, &m));
    msr_gpt_init_params(m, 11);
    MSR_CHECK_OK(msr_gpt_set_precision(m, prec));
    return m;
}

/* Two steps of forward and backward on m[0] (the CPU's table) and m[1]
 * (the counting one) from the same batches: the same losses and
 * gradients (a MoE model's experts' too), bitwise. The counts start at
 * zero. */
static void two_steps(msr_gpt_t *const *m, const char *what)
{
    int inp[BB * TT], tgt[BB * TT];
    memset(count_kernel_calls, 0, sizeof count_kernel_calls);
    for (int step = 0; step < 2; step++) {
        for (int i = 0; i < BB * TT; i++) {
            inp[i] = (int)msr_rng_below(msr_rng_u64(5, (uint64_t)step, (uint64_t)i), MSR_GPT_VOCAB);
            tgt[i] = (int)msr_rng_below(msr_rng_u64(6, (uint64_t)step, (uint64_t)i), MSR_GPT_VOCAB);
        }
        double loss[2];
        for (int i = 0; i < 2; i++) {
            MSR_CHECK_OK(msr_gpt_forward(m[i], inp, tgt, BB, TT, NULL, &loss[i]));
            MSR_CHECK_OK(msr_gpt_backward(m[i], 1.0f / (BB * TT), NULL));
        }
        MSR_CHECK_MSG(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0,
                      "%s step %d: loss %.17g != %.17g", what, step, loss[0], loss[1]);
        MSR_CHECK_EQ(memcmp(m[0]->grads, m[1]->grads, m[0]->num_params * sizeof(float)), 0);
        size_t n = msr_moe_num_params(&m[0]->cfg); /* one MoE block: block 1 */
        if (n > 0)
            MSR_CHECK_EQ(memcmp(msr_moe_block_params(m[0]->moe, 1, 1),
                                msr_moe_block_params(m[1]->moe, 1, 1), n * sizeof(float)),
                         0);
    }
}

/* Two steps of the whole model on the CPU's table (left NULL) and on the
 * counting one: bitwise alike (two_steps), and each block's kernels and
 * the ends' counted once a pass. */
static void check_whole(int llama, msr_precision_t prec)
{
    msr_gpt_t *m[2] = {model(llama, prec), model(llama, prec)};
    MSR_CHECK(m[0]->kernels == NULL);
    MSR_CHECK_OK(msr_gpt_set_kernels(m[1], count_kernels()));
    two_steps(m, llama ? "llama" : msr_precision_name(prec));
    long fwd[K_N], bwd[K_N], efwd[K_N] = {0}, ebwd[K_N] = {0}, want[K_N];
    block_counts(llama, 1, fwd, bwd);
    ends_counts(llama, 3, efwd, ebwd);
    /* two steps: L = 2 blocks and the ends each */
    for (int k = 0; k < K_N; k++)
        want[k] = 2 * (2 * (fwd[k] + bwd[k]) + efwd[k] + ebwd[k]);
    check_counts(llama ? "llama" : msr_precision_name(prec), want);
    msr_gpt_destroy(m[1]);
    msr_gpt_destroy(m[0]);
}

static void test_whole_gpt(void)
{
    check_whole(0, MSR_PRECISION_FP32);
    check_whole(0, MSR_PRECISION_BF16);
}

static void test_whole_llama(void)
{
    check_whole(1, MSR_PRECISION_FP32);
}

/* ---- a Mixture-of-Experts model ---- */

/* The kernels of a MoE block's passes but for its experts': the
 * attention half as a dense block's, ln2 and the residual around the
 * caller's MLP, the router's product, its routing, dispatch, combine and
 * the load-balancing loss's sums, each once a pass, and the backward's
 * zeroing of the MLP's input gradient (and a Llama's dqkv). */
static void moe_block_counts(int llama, long *fwd, long *bwd)
{
    memset(fwd, 0, K_N * sizeof *fwd);
    memset(bwd, 0, K_N * sizeof *bwd);
    fwd[K_MMF] = 2 + 1; /* qkv, attproj; the router */
    fwd[K_RES] = 2;
    bwd[K_MMB] = 2;
    bwd[K_MMBA] = 1; /* the router's */
    bwd[K_ZERO] = 1;
    fwd[K_MROUTE] = fwd[K_MDISP] = fwd[K_MCOMB] = fwd[K_MPSUM] = 1;
    bwd[K_MCOMBB] = bwd[K_MDISPB] = bwd[K_MROUTEB] = 1;
    if (llama) {
        fwd[K_RMSF] = 2, fwd[K_ROPE] = 2, fwd[K_GQAF] = 1;
        bwd[K_RMSB] = 2, bwd[K_ROPE] = 2, bwd[K_GQAB] = 1, bwd[K_ZERO]++;
        return;
    }
    fwd[K_LNF] = 2, fwd[K_ATTF] = 1;
    fwd[K_OPER] = 1; /* ln1's; ln2's feeds the router and the experts */
    bwd[K_LNB] = 2, bwd[K_ATTB] = 1;
}

/* Two steps of a model whose second block is a MoE block of 4 experts,
 * 2 a token (a Llama's: SwiGLU experts), on the CPU's table and on the
 * counting one: the same losses and gradients (the experts' too),
 * bitwise; the dense kernels counted as above, and each expert that got
 * tokens ran its two products and its activation forward and backward
 * through the table. */
static void check_whole_moe(int llama)
{
    msr_gpt_t *m[2];
    for (int i = 0; i < 2; i++) {
        msr_gpt_config_t c = shape(llama);
        c.moe = (msr_gpt_moe_t){4, 2, 2, 1.0, 0.01};
        MSR_CHECK_OK(msr_gpt_create(&c, BB, &m[i]));
        MSR_CHECK(m[i]->moe != NULL);
        msr_gpt_init_params(m[i], 11);
        msr_moe_init_params(m[i]->moe, 12);
    }
    MSR_CHECK_OK(msr_gpt_set_kernels(m[1], count_kernels()));
    MSR_CHECK(m[0]->kernels == NULL && m[1]->kernels == count_kernels());
    two_steps(m, llama ? "moe llama" : "moe gpt");
    long fwd[K_N], bwd[K_N], mfwd[K_N], mbwd[K_N], efwd[K_N] = {0}, ebwd[K_N] = {0}, want[K_N];
    block_counts(llama, 1, fwd, bwd);
    moe_block_counts(llama, mfwd, mbwd);
    ends_counts(llama, 3, efwd, ebwd);
    for (int k = 0; k < K_N; k++)
        want[k] = 2 * (fwd[k] + bwd[k] + mfwd[k] + mbwd[k] + efwd[k] + ebwd[k]);
    /* the experts that got tokens, over both steps: each ran its
     * activation once forward and once backward, its two products each
     * way */
    int act_f = llama ? K_SWIF : K_GELUF, act_b = llama ? K_SWIB : K_GELUBA;
    long ran = count_kernel_calls[act_f] - want[act_f];
    MSR_CHECK_MSG(ran >= 2 && ran <= 2 * 4, "moe: %ld experts ran in two steps", ran);
    want[act_f] += ran;
    want[act_b] += ran;
    want[K_MMF] += 2 * ran;
    want[K_MMBA] += 2 * ran;
    check_counts(llama ? "moe llama" : "moe gpt", want);
    msr_gpt_destroy(m[1]);
    msr_gpt_destroy(m[0]);
}

static void test_whole_moe(void)
{
    check_whole_moe(0);
    check_whole_moe(1);
}

/* ---- a tensor-parallel slice ---- */

/* Block 0 of m as a tp 2 rank's slice without communication (the
 * reductions are identities), on the model's buffers, which hold more
 * than the slice needs: forward from x, then backward from dres. */
static void tp_slice_pass(msr_gpt_t *m, const float *x, float *dres)
{
    int C = m->cfg.channels;
    size_t N = BB * TT;
    msr_block_t b = {
        .B = BB,
        .T = TT,
        .C = C,
        .tp = 2,
        .NHl = m->cfg.heads / 2,
        .Cl = C / 2,
        .Hl = 2 * C,
        .N = N,
        .Nl = N,
        .prod = m->prod,
        .k = m->kernels,
        .proj = m->acts.proj,
        .dln = m->work.dln,
        .dqkv = m->work.dqkv,
        .datty = m->work.datty,
        .dfch = m->work.dfch,
        .dfch_gelu = m->work.dfch_gelu,
        .datt = m->work.datt,
    };
    msr_gpt_block_params_t p, g;
    msr_gpt_block_point_layer(&m->cfg, 0, m->segments[1].params, &p);
    msr_gpt_block_point_layer(&m->cfg, 0, m->segments[1].grads, &g);
    MSR_CHECK_OK(msr_block_forward(&b, &p, &m->acts.blocks[0], x, NULL));
    MSR_CHECK_OK(msr_block_backward(&b, &p, &g, &m->acts.blocks[0], x, dres, NULL));
}

static void test_tp_slice(void)
{
    msr_gpt_t *a = model(0, MSR_PRECISION_FP32), *b = model(0, MSR_PRECISION_FP32);
    b->kernels = count_kernels();
    size_t n = BB * TT * 16;
    float x[BB * TT * 16], da[BB * TT * 16], db[BB * TT * 16];
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)msr_rng_normal(7, 1, i);
        da[i] = db[i] = (float)msr_rng_normal(7, 2, i) * 0.1f;
    }
    memset(count_kernel_calls, 0, sizeof count_kernel_calls);
    tp_slice_pass(a, x, da);
    tp_slice_pass(b, x, db);
    MSR_CHECK_EQ(memcmp(a->acts.blocks[0].res3, b->acts.blocks[0].res3, n * sizeof(float)), 0);
    MSR_CHECK_EQ(memcmp(da, db, sizeof da), 0);
    MSR_CHECK_EQ(memcmp(a->grads, b->grads, a->num_params * sizeof(float)), 0);
    long fwd[K_N], bwd[K_N], want[K_N];
    block_counts(0, 2, fwd, bwd);
    for (int k = 0; k < K_N; k++)
        want[k] = fwd[k] + bwd[k];
    check_counts("tp 2", want);
    msr_gpt_destroy(b);
    msr_gpt_destroy(a);
}

/* ---- the model-parallel runtime ---- */

/* A trainer of the small model (3 micro-batches a step, ZeRO 1; a
 * Llama's where llama is set) on the table k: on the model-parallel
 * runtime (tp = pp = 1) with recompute rc, or (mp 0) on the
 * data-parallel path. */
static msr_trainer_t *trainer(int mp, int rc, int llama, const msr_kernels_t *k, msr_dataset_t *ds,
                              msr_mesh_t **mesh_p)
{
    msr_train_config_t c = mp_small_config(3, 1);
    if (llama) {
        c.model.arch = MSR_GPT_ARCH_LLAMA;
        c.model.ffn = 48;
        c.model.kv_heads = 2;
        c.model.rope_theta = 10000.0;
    }
    c.mp.recompute = (msr_mp_recompute_t)rc;
    c.mp_always = mp;
    c.kernels = k;
    msr_trainer_t *tr = NULL;
    MSR_CHECK_OK(msr_mesh_create(NULL, 1, 1, 1, 1, mesh_p));
    MSR_CHECK_OK(msr_trainer_create_mesh(&c, ds, *mesh_p, &tr));
    MSR_CHECK((tr->mp != NULL) == (mp != 0));
    return tr;
}

/* The trainer on the counting table, on the data-parallel path and on
 * the model-parallel runtime without recompute, with selective and with
 * full, and a Llama's on the runtime with selective recompute: three
 * steps' losses and parameters bitwise the CPU's; each micro-batch's
 * kernels counted, under selective recompute the attention and the MLP's
 * activation once more a block (the backward brings them back), under
 * full each block's forward twice. */
static void test_trainer(void)
{
    static const struct {
        int mp, rc, llama;
        const char *name;
    } paths[] = {
        {0, MSR_MP_RECOMPUTE_NONE, 0, "dp path"},
        {1, MSR_MP_RECOMPUTE_NONE, 0, "mp runtime"},
        {1, MSR_MP_RECOMPUTE_SELECTIVE, 0, "mp runtime, selective recompute"},
        {1, MSR_MP_RECOMPUTE_FULL, 0, "mp runtime, full recompute"},
        {1, MSR_MP_RECOMPUTE_SELECTIVE, 1, "mp runtime, a Llama, selective recompute"},
    };
    msr_dataset_t *ds = NULL;
    MSR_CHECK_OK(msr_dataset_generate(3, 1 << 15, &ds));
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        int mp = paths[i].mp, rc = paths[i].rc, llama = paths[i].llama;
        msr_mesh_t *ma = NULL, *mb = NULL;
        msr_trainer_t *a = trainer(mp, rc, llama, NULL, ds, &ma);
        msr_trainer_t *b = trainer(mp, rc, llama, count_kernels(), ds, &mb);
        MSR_CHECK(a->model->kernels == NULL && b->model->kernels == count_kernels());
        memset(count_kernel_calls, 0, sizeof count_kernel_calls);
        for (int step = 0; step < 3; step++) {
            double la, lb;
            MSR_CHECK_OK(msr_trainer_step(a, &la));
            MSR_CHECK_OK(msr_trainer_step(b, &lb));
            MSR_CHECK_MSG(memcmp(&la, &lb, sizeof la) == 0, "%s step %d: %.17g != %.17g",
                          paths[i].name, step + 1, la, lb);
        }
        MSR_CHECK_EQ(
            memcmp(a->model->params, b->model->params, a->model->num_params * sizeof(float)), 0);
        long fwd[K_N], bwd[K_N], efwd[K_N] = {0}, ebwd[K_N] = {0}, want[K_N];
        block_counts(llama, 1, fwd, bwd);
        if (rc == MSR_MP_RECOMPUTE_SELECTIVE) { /* brought back in the backward */
            bwd[llama ? K_GQAF : K_ATTF]++;
            bwd[llama ? K_SWIF : K_GELUF]++;
        }
        if (rc == MSR_MP_RECOMPUTE_FULL) /* each block's forward again */
            for (int k = 0; k < K_N; k++)
                bwd[k] += fwd[k];
        /* the whole model's backward zeroes 3 buffers through the table,
         * the runtime's through its device */
        ends_counts(llama, mp ? 0 : 3, efwd, ebwd);
        if (mp && llama) /* the runtime copies a Llama's rows through its device */
            efwd[K_EMBF]--;
        /* 3 steps of 3 micro-batches: L = 2 blocks and the ends each */
        for (int k = 0; k < K_N; k++)
            want[k] = 3 * 3 * (2 * (fwd[k] + bwd[k]) + efwd[k] + ebwd[k]);
        check_counts(paths[i].name, want);
        msr_trainer_destroy(b);
        msr_trainer_destroy(a);
        msr_mesh_destroy(mb);
        msr_mesh_destroy(ma);
    }
    msr_dataset_destroy(ds);
}

static const msr_test_t tests[] = {
    {"cpu_table", test_cpu_table, 10},
    {"moe_kernels", test_moe_kernels, 10},
    {"incomplete_table", test_incomplete_table, 30},
    {"whole_gpt", test_whole_gpt, 30},
    {"whole_llama", test_whole_llama, 30},
    {"whole_moe", test_whole_moe, 30},
    {"tp_slice", test_tp_slice, 30},
    {"trainer", test_trainer, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
