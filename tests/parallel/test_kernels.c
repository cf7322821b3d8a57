/* The model's kernels through their table (model/kernels.h): every kernel
 * a block's forward and backward runs, and those of the model's ends (the
 * embeddings, the final norm, the head and the loss), is a call of the
 * model's table, for the GPT (fp32 and bf16 products) and the Llama: the
 * whole model's passes (a MoE block's router and experts too), a tensor-parallel slice's block (its
 * biases added after the reduction) and a trainer's steps (the data-parallel path, and the
 * model-parallel runtime without recompute, with selective recompute's kernels brought back and
 * with full recompute's forward). A table that counts its calls and runs the CPU's kernels gives
 * the CPU's losses, outputs and gradients bitwise, and its counts are exactly the kernels the model
 * runs: a kernel called past the table leaves its count short and fails the test. */
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
#include "tests/parallel/mp_small.h"
#include "tests/runner.h"

/* ---- a table that counts its calls ---- */

enum {
    K_LNF,
    K_LNB,
    K_RMSF,
    K_RMSB,
    K_MMF,
    K_MMB,
    K_OPER,
    K_ATTF,
    K_ATTB,
    K_GQAF,
    K_GQAB,
    K_ROPE,
    K_GELUF,
    K_GELUB,
    K_GELUBA,
    K_SWIF,
    K_SWIB,
    K_RES,
    K_BIAS,
    K_COLSUM,
    K_ZERO,
    K_MMBA,
    K_ENCF,
    K_ENCB,
    K_EMBF,
    K_EMBB,
    K_XENTF,
    K_XENTB,
    K_N
};
static const char *const knames[K_N] = {
    "layernorm_forward",
    "layernorm_backward",
    "rmsnorm_forward",
    "rmsnorm_backward",
    "matmul_forward",
    "matmul_backward_set",
    "operand",
    "attention_forward",
    "attention_backward_set",
    "attention_gqa_forward",
    "attention_gqa_backward",
    "rope",
    "gelu_forward",
    "gelu_backward_set",
    "gelu_backward",
    "swiglu_forward",
    "swiglu_backward",
    "residual",
    "add_bias",
    "add_colsum",
    "zero",
    "matmul_backward",
    "encoder_forward",
    "encoder_backward",
    "embedding_forward",
    "embedding_backward",
    "crossentropy_forward",
    "crossentropy_backward",
};
static long counts[K_N];

#define CPU msr_kernels_cpu()

static void c_lnf(float *out, uint16_t *out16, float *mean, float *rstd, const float *inp,
                  const float *w, const float *b, int N, int C)
{
    counts[K_LNF]++;
    CPU->layernorm_forward(out, out16, mean, rstd, inp, w, b, N, C);
}
static void c_lnb(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                  const float *w, const float *mean, const float *rstd, int N, int C)
{
    counts[K_LNB]++;
    CPU->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
static void c_rmsf(float *out, float *rstd, const float *inp, const float *w, int N, int C)
{
    counts[K_RMSF]++;
    CPU->rmsnorm_forward(out, rstd, inp, w, N, C);
}
static void c_rmsb(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                   const float *rstd, int N, int C)
{
    counts[K_RMSB]++;
    CPU->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
}
static void c_mmf(msr_products_t *pr, float *out, const float *inp, const float *w, const float *b,
                  int N, int IC, int OC)
{
    counts[K_MMF]++;
    CPU->matmul_forward(pr, out, inp, w, b, N, IC, OC);
}
static void c_mmb(msr_products_t *pr, float *dinp, float *dw, float *db, const float *dout,
                  const float *inp, const float *w, int N, int IC, int OC)
{
    counts[K_MMB]++;
    CPU->matmul_backward_set(pr, dinp, dw, db, dout, inp, w, N, IC, OC);
}
static uint16_t *c_oper(msr_products_t *pr, const float *src, size_t n)
{
    counts[K_OPER]++;
    return CPU->operand(pr, src, n);
}
static void c_attf(msr_products_t *pr, float *out, float *att, const float *qkv, int B, int T,
                   int C, int NH)
{
    counts[K_ATTF]++;
    CPU->attention_forward(pr, out, att, qkv, B, T, C, NH);
}
static void c_attb(msr_products_t *pr, float *dqkv, float *scratch, const float *dout,
                   const float *qkv, const float *att, int B, int T, int C, int NH)
{
    counts[K_ATTB]++;
    CPU->attention_backward_set(pr, dqkv, scratch, dout, qkv, att, B, T, C, NH);
}
static void c_gqaf(msr_products_t *pr, float *out, float *att, const float *qkv, int B, int T,
                   int C, int NH, int KVH)
{
    counts[K_GQAF]++;
    CPU->attention_gqa_forward(pr, out, att, qkv, B, T, C, NH, KVH);
}
static void c_gqab(msr_products_t *pr, float *dqkv, float *scratch, const float *dout,
                   const float *qkv, const float *att, int B, int T, int C, int NH, int KVH)
{
    counts[K_GQAB]++;
    CPU->attention_gqa_backward(pr, dqkv, scratch, dout, qkv, att, B, T, C, NH, KVH);
}
static void c_rope(float *x, int ld, int B, int T, int t0, int H, int HS, double theta, int dir)
{
    counts[K_ROPE]++;
    CPU->rope(x, ld, B, T, t0, H, HS, theta, dir);
}
static void c_geluf(float *out, uint16_t *out16, const float *inp, size_t n)
{
    counts[K_GELUF]++;
    CPU->gelu_forward(out, out16, inp, n);
}
static void c_gelub(float *dinp, uint16_t *dinp16, const float *inp, const float *dout, size_t n)
{
    counts[K_GELUB]++;
    CPU->gelu_backward_set(dinp, dinp16, inp, dout, n);
}
static void c_geluba(float *dinp, const float *inp, const float *dout, size_t n)
{
    counts[K_GELUBA]++;
    CPU->gelu_backward(dinp, inp, dout, n);
}
static void c_swif(float *out, const float *inp, int N, int F)
{
    counts[K_SWIF]++;
    CPU->swiglu_forward(out, inp, N, F);
}
static void c_swib(float *dinp, const float *inp, const float *dout, int N, int F)
{
    counts[K_SWIB]++;
    CPU->swiglu_backward(dinp, inp, dout, N, F);
}
static void c_res(float *out, const float *a, const float *b, size_t n)
{
    counts[K_RES]++;
    CPU->residual(out, a, b, n);
}
static void c_bias(float *x, const float *bias, size_t N, int C)
{
    counts[K_BIAS]++;
    CPU->add_bias(x, bias, N, C);
}
static void c_colsum(float *db, const float *d, size_t N, int C)
{
    counts[K_COLSUM]++;
    CPU->add_colsum(db, d, N, C);
}
static void c_zero(float *x, size_t n)
{
    counts[K_ZERO]++;
    CPU->zero(x, n);
}

static void c_mmba(msr_products_t *pr, float *dinp, float *dw, float *db, const float *dout,
                   const float *inp, const float *w, int N, int IC, int OC)
{
    counts[K_MMBA]++;
    CPU->matmul_backward(pr, dinp, dw, db, dout, inp, w, N, IC, OC);
}
static void c_encf(float *out, const int *inp, const float *wte, const float *wpe, int B, int T,
                   int C)
{
    counts[K_ENCF]++;
    CPU->encoder_forward(out, inp, wte, wpe, B, T, C);
}
static void c_encb(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C)
{
    counts[K_ENCB]++;
    CPU->encoder_backward(dwte, dwpe, dout, inp, B, T, C);
}
static void c_embf(float *out, const int *inp, const float *wte, int N, int C)
{
    counts[K_EMBF]++;
    CPU->embedding_forward(out, inp, wte, N, C);
}
static void c_embb(float *dwte, const float *dout, const int *inp, int N, int C)
{
    counts[K_EMBB]++;
    CPU->embedding_backward(dwte, dout, inp, N, C);
}
static void c_xentf(float *losses, float *probs, const float *logits, const int *targets, int N,
                    int V)
{
    counts[K_XENTF]++;
    CPU->crossentropy_forward(losses, probs, logits, targets, N, V);
}
static void c_xentb(float *dlogits, const float *probs, const int *targets, float dloss, int N,
                    int V)
{
    counts[K_XENTB]++;
    CPU->crossentropy_backward(dlogits, probs, targets, dloss, N, V);
}

static const msr_kernels_t counting = {
    .name = "counting",
    .layernorm_forward = c_lnf,
    .layernorm_backward = c_lnb,
    .rmsnorm_forward = c_rmsf,
    .rmsnorm_backward = c_rmsb,
    .matmul_forward = c_mmf,
    .matmul_backward_set = c_mmb,
    .operand = c_oper,
    .attention_forward = c_attf,
    .attention_backward_set = c_attb,
    .attention_gqa_forward = c_gqaf,
    .attention_gqa_backward = c_gqab,
    .rope = c_rope,
    .gelu_forward = c_geluf,
    .gelu_backward_set = c_gelub,
    .gelu_backward = c_geluba,
    .swiglu_forward = c_swif,
    .swiglu_backward = c_swib,
    .residual = c_res,
    .add_bias = c_bias,
    .add_colsum = c_colsum,
    .zero = c_zero,
    .matmul_backward = c_mmba,
    .encoder_forward = c_encf,
    .encoder_backward = c_encb,
    .embedding_forward = c_embf,
    .embedding_backward = c_embb,
    .crossentropy_forward = c_xentf,
    .crossentropy_backward = c_xentb,
};

/* counts == want (K_N entries), each entry named. */
static void check_counts(const char *what, const long *want)
{
    for (int k = 0; k < K_N; k++)
        MSR_CHECK_MSG(counts[k] == want[k], "%s: %s called %ld times, want %ld", what, knames[k],
                      counts[k], want[k]);
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

/* Two steps' forward and backward of the whole model, on the CPU's table
 * (left NULL) and on the counting one: the same losses and gradients,
 * bitwise, and each block's kernels counted once a pass. */
static void check_whole(int llama, msr_precision_t prec)
{
    msr_gpt_t *a = model(llama, prec), *b = model(llama, prec);
    MSR_CHECK(a->kernels == NULL);
    b->kernels = &counting;
    int inp[BB * TT], tgt[BB * TT];
    memset(counts, 0, sizeof counts);
    for (int step = 0; step < 2; step++) {
        for (int i = 0; i < BB * TT; i++) {
            inp[i] = (int)msr_rng_below(msr_rng_u64(5, (uint64_t)step, (uint64_t)i), MSR_GPT_VOCAB);
            tgt[i] = (int)msr_rng_below(msr_rng_u64(6, (uint64_t)step, (uint64_t)i), MSR_GPT_VOCAB);
        }
        double la, lb;
        MSR_CHECK_OK(msr_gpt_forward(a, inp, tgt, BB, TT, NULL, &la));
        MSR_CHECK_OK(msr_gpt_forward(b, inp, tgt, BB, TT, NULL, &lb));
        MSR_CHECK_MSG(memcmp(&la, &lb, sizeof la) == 0, "%s %s step %d: loss %.17g != %.17g",
                      llama ? "llama" : "gpt", msr_precision_name(prec), step, la, lb);
        MSR_CHECK_OK(msr_gpt_backward(a, 1.0f / (BB * TT), NULL));
        MSR_CHECK_OK(msr_gpt_backward(b, 1.0f / (BB * TT), NULL));
        MSR_CHECK_EQ(memcmp(a->grads, b->grads, a->num_params * sizeof(float)), 0);
    }
    long fwd[K_N], bwd[K_N], efwd[K_N] = {0}, ebwd[K_N] = {0}, want[K_N];
    block_counts(llama, 1, fwd, bwd);
    ends_counts(llama, 3, efwd, ebwd);
    /* two steps: L = 2 blocks and the ends each */
    for (int k = 0; k < K_N; k++)
        want[k] = 2 * (2 * (fwd[k] + bwd[k]) + efwd[k] + ebwd[k]);
    check_counts(llama ? "llama" : msr_precision_name(prec), want);
    msr_gpt_destroy(b);
    msr_gpt_destroy(a);
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
 * caller's MLP, the router's product, and the backward's zeroing of the
 * MLP's input gradient (and a Llama's dqkv). */
static void moe_block_counts(int llama, long *fwd, long *bwd)
{
    memset(fwd, 0, K_N * sizeof *fwd);
    memset(bwd, 0, K_N * sizeof *bwd);
    fwd[K_MMF] = 2 + 1; /* qkv, attproj; the router */
    fwd[K_RES] = 2;
    bwd[K_MMB] = 2;
    bwd[K_MMBA] = 1; /* the router's */
    bwd[K_ZERO] = 1;
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
    msr_gpt_set_kernels(m[1], &counting);
    MSR_CHECK(m[0]->kernels == NULL && m[1]->kernels == &counting);
    int inp[BB * TT], tgt[BB * TT];
    memset(counts, 0, sizeof counts);
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
                      "moe %s step %d: loss %.17g != %.17g", llama ? "llama" : "gpt", step, loss[0],
                      loss[1]);
        MSR_CHECK_EQ(memcmp(m[0]->grads, m[1]->grads, m[0]->num_params * sizeof(float)), 0);
        size_t n = msr_moe_num_params(&m[0]->cfg);
        MSR_CHECK_EQ(memcmp(msr_moe_block_params(m[0]->moe, 1, 1),
                            msr_moe_block_params(m[1]->moe, 1, 1), n * sizeof(float)),
                     0);
    }
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
    long ran = counts[act_f] - want[act_f];
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
    b->kernels = &counting;
    size_t n = BB * TT * 16;
    float x[BB * TT * 16], da[BB * TT * 16], db[BB * TT * 16];
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)msr_rng_normal(7, 1, i);
        da[i] = db[i] = (float)msr_rng_normal(7, 2, i) * 0.1f;
    }
    memset(counts, 0, sizeof counts);
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
        msr_trainer_t *b = trainer(mp, rc, llama, &counting, ds, &mb);
        MSR_CHECK(a->model->kernels == NULL && b->model->kernels == &counting);
        memset(counts, 0, sizeof counts);
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
    {"cpu_table", test_cpu_table, 10},     {"whole_gpt", test_whole_gpt, 30},
    {"whole_llama", test_whole_llama, 30}, {"whole_moe", test_whole_moe, 30},
    {"tp_slice", test_tp_slice, 30},       {"trainer", test_trainer, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
