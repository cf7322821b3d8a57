/* The counting table of the model's kernels (count_kernels.h). */
#include "tests/parallel/count_kernels.h"

const char *const count_kernel_names[K_N] = {
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
    "ring_forward",
    "ring_finish",
    "ring_delta",
    "ring_backward",
    "ring_fold_kv",
    "add_rows",
    "positions_forward",
    "positions_backward",
    "embedding_backward_rows",
    "vocab_max",
    "vocab_exp_sums",
    "vocab_loss",
    "vocab_fold",
    "vocab_crossentropy_backward",
    "moe_route",
    "moe_prob_sums",
    "moe_dispatch",
    "moe_dispatch_backward",
    "moe_combine",
    "moe_combine_backward",
    "moe_route_backward",
};
long count_kernel_calls[K_N];

#define CPU msr_kernels_cpu()

static void c_lnf(float *out, uint16_t *out16, float *mean, float *rstd, const float *inp,
                  const float *w, const float *b, int N, int C)
{
    count_kernel_calls[K_LNF]++;
    CPU->layernorm_forward(out, out16, mean, rstd, inp, w, b, N, C);
}
static void c_lnb(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                  const float *w, const float *mean, const float *rstd, int N, int C)
{
    count_kernel_calls[K_LNB]++;
    CPU->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
static void c_rmsf(float *out, float *rstd, const float *inp, const float *w, int N, int C)
{
    count_kernel_calls[K_RMSF]++;
    CPU->rmsnorm_forward(out, rstd, inp, w, N, C);
}
static void c_rmsb(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                   const float *rstd, int N, int C)
{
    count_kernel_calls[K_RMSB]++;
    CPU->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
}
static void c_mmf(msr_products_t *pr, float *out, const float *inp, const float *w, const float *b,
                  int N, int IC, int OC)
{
    count_kernel_calls[K_MMF]++;
    CPU->matmul_forward(pr, out, inp, w, b, N, IC, OC);
}
static void c_mmb(msr_products_t *pr, float *dinp, float *dw, float *db, const float *dout,
                  const float *inp, const float *w, int N, int IC, int OC)
{
    count_kernel_calls[K_MMB]++;
    CPU->matmul_backward_set(pr, dinp, dw, db, dout, inp, w, N, IC, OC);
}
static uint16_t *c_oper(msr_products_t *pr, const float *src, size_t n)
{
    count_kernel_calls[K_OPER]++;
    return CPU->operand(pr, src, n);
}
static void c_attf(msr_products_t *pr, float *out, float *att, const float *qkv, int B, int T,
                   int C, int NH)
{
    count_kernel_calls[K_ATTF]++;
    CPU->attention_forward(pr, out, att, qkv, B, T, C, NH);
}
static void c_attb(msr_products_t *pr, float *dqkv, float *scratch, const float *dout,
                   const float *qkv, const float *att, int B, int T, int C, int NH)
{
    count_kernel_calls[K_ATTB]++;
    CPU->attention_backward_set(pr, dqkv, scratch, dout, qkv, att, B, T, C, NH);
}
static void c_gqaf(msr_products_t *pr, float *out, float *att, const float *qkv, int B, int T,
                   int C, int NH, int KVH)
{
    count_kernel_calls[K_GQAF]++;
    CPU->attention_gqa_forward(pr, out, att, qkv, B, T, C, NH, KVH);
}
static void c_gqab(msr_products_t *pr, float *dqkv, float *scratch, const float *dout,
                   const float *qkv, const float *att, int B, int T, int C, int NH, int KVH)
{
    count_kernel_calls[K_GQAB]++;
    CPU->attention_gqa_backward(pr, dqkv, scratch, dout, qkv, att, B, T, C, NH, KVH);
}
static void c_rope(float *x, int ld, int B, int T, int t0, int H, int HS, double theta, int dir)
{
    count_kernel_calls[K_ROPE]++;
    CPU->rope(x, ld, B, T, t0, H, HS, theta, dir);
}
static void c_geluf(float *out, uint16_t *out16, const float *inp, size_t n)
{
    count_kernel_calls[K_GELUF]++;
    CPU->gelu_forward(out, out16, inp, n);
}
static void c_gelub(float *dinp, uint16_t *dinp16, const float *inp, const float *dout, size_t n)
{
    count_kernel_calls[K_GELUB]++;
    CPU->gelu_backward_set(dinp, dinp16, inp, dout, n);
}
static void c_geluba(float *dinp, const float *inp, const float *dout, size_t n)
{
    count_kernel_calls[K_GELUBA]++;
    CPU->gelu_backward(dinp, inp, dout, n);
}
static void c_swif(float *out, const float *inp, int N, int F)
{
    count_kernel_calls[K_SWIF]++;
    CPU->swiglu_forward(out, inp, N, F);
}
static void c_swib(float *dinp, const float *inp, const float *dout, int N, int F)
{
    count_kernel_calls[K_SWIB]++;
    CPU->swiglu_backward(dinp, inp, dout, N, F);
}
static void c_res(float *out, const float *a, const float *b, size_t n)
{
    count_kernel_calls[K_RES]++;
    CPU->residual(out, a, b, n);
}
static void c_bias(float *x, const float *bias, size_t N, int C)
{
    count_kernel_calls[K_BIAS]++;
    CPU->add_bias(x, bias, N, C);
}
static void c_colsum(float *db, const float *d, size_t N, int C)
{
    count_kernel_calls[K_COLSUM]++;
    CPU->add_colsum(db, d, N, C);
}
static void c_zero(float *x, size_t n)
{
    count_kernel_calls[K_ZERO]++;
    CPU->zero(x, n);
}

static void c_mmba(msr_products_t *pr, float *dinp, float *dw, float *db, const float *dout,
                   const float *inp, const float *w, int N, int IC, int OC)
{
    count_kernel_calls[K_MMBA]++;
    CPU->matmul_backward(pr, dinp, dw, db, dout, inp, w, N, IC, OC);
}
static void c_encf(float *out, const int *inp, const float *wte, const float *wpe, int B, int T,
                   int C)
{
    count_kernel_calls[K_ENCF]++;
    CPU->encoder_forward(out, inp, wte, wpe, B, T, C);
}
static void c_encb(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C)
{
    count_kernel_calls[K_ENCB]++;
    CPU->encoder_backward(dwte, dwpe, dout, inp, B, T, C);
}
static void c_embf(float *out, const int *inp, const float *wte, int N, int C)
{
    count_kernel_calls[K_EMBF]++;
    CPU->embedding_forward(out, inp, wte, N, C);
}
static void c_embb(float *dwte, const float *dout, const int *inp, int N, int C)
{
    count_kernel_calls[K_EMBB]++;
    CPU->embedding_backward(dwte, dout, inp, N, C);
}
static void c_xentf(float *losses, float *probs, const float *logits, const int *targets, int N,
                    int V)
{
    count_kernel_calls[K_XENTF]++;
    CPU->crossentropy_forward(losses, probs, logits, targets, N, V);
}
static void c_xentb(float *dlogits, const float *probs, const int *targets, float dloss, int N,
                    int V)
{
    count_kernel_calls[K_XENTB]++;
    CPU->crossentropy_backward(dlogits, probs, targets, dloss, N, V);
}

static void c_ringf(msr_products_t *pr, float *acc, float *mx, float *sum, const float *q, int ldq,
                    const int *qpos, int Tq, const float *k, const float *v, int ldk,
                    const int *kpos, int Tk, int C, int NH, float *scratch)
{
    count_kernel_calls[K_RINGF]++;
    CPU->ring_forward(pr, acc, mx, sum, q, ldq, qpos, Tq, k, v, ldk, kpos, Tk, C, NH, scratch);
}
static void c_ringfin(float *out, float *lse, const float *mx, const float *sum, int Tq, int C,
                      int NH)
{
    count_kernel_calls[K_RINGFIN]++;
    CPU->ring_finish(out, lse, mx, sum, Tq, C, NH);
}
static void c_ringd(float *delta, const float *dout, const float *out, int Tq, int C, int NH)
{
    count_kernel_calls[K_RINGD]++;
    CPU->ring_delta(delta, dout, out, Tq, C, NH);
}
static void c_ringb(msr_products_t *pr, float *dq, int ldq, float *dk, float *dv, int ldk,
                    const float *dout, const float *q, const float *k, const float *v,
                    const float *lse, const float *delta, const int *qpos, int Tq, const int *kpos,
                    int Tk, int C, int NH, float *scratch)
{
    count_kernel_calls[K_RINGB]++;
    CPU->ring_backward(pr, dq, ldq, dk, dv, ldk, dout, q, k, v, lse, delta, qpos, Tq, kpos, Tk, C,
                       NH, scratch);
}

static void c_ringfold(float *dkv, const float *dx, int S, int C, int NH, int KVH)
{
    count_kernel_calls[K_RINGFOLD]++;
    CPU->ring_fold_kv(dkv, dx, S, C, NH, KVH);
}
static void c_addrows(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                      size_t n)
{
    count_kernel_calls[K_ADDROWS]++;
    CPU->add_rows(dst, ld_dst, src, ld_src, rows, n);
}

static void c_posf(float *out, const float *x, const float *wpe, const int *pos, int t0, int B,
                   int T, int C)
{
    count_kernel_calls[K_POSF]++;
    CPU->positions_forward(out, x, wpe, pos, t0, B, T, C);
}
static void c_posb(float *dwpe, const float *dout, const int *pos, int t0, int B, int T, int C)
{
    count_kernel_calls[K_POSB]++;
    CPU->positions_backward(dwpe, dout, pos, t0, B, T, C);
}
static void c_embbr(float *dwte, const float *dout, const int *inp, int lo, int V, size_t N, int C)
{
    count_kernel_calls[K_EMBBR]++;
    CPU->embedding_backward_rows(dwte, dout, inp, lo, V, N, C);
}
static void c_vmax(float *rmax, const float *logits, size_t N, int V)
{
    count_kernel_calls[K_VMAX]++;
    CPU->vocab_max(rmax, logits, N, V);
}
static void c_vexp(float *probs, float *red, const float *logits, const float *rmax,
                   const int *targets, int lo, size_t N, int V)
{
    count_kernel_calls[K_VEXP]++;
    CPU->vocab_exp_sums(probs, red, logits, rmax, targets, lo, N, V);
}
static void c_vloss(float *probs, float *losses, const float *rmax, const float *red, size_t N,
                    int V)
{
    count_kernel_calls[K_VLOSS]++;
    CPU->vocab_loss(probs, losses, rmax, red, N, V);
}
static void c_vfold(float *M, float *S, float *Z, const float *m, const float *red, size_t N,
                    int first)
{
    count_kernel_calls[K_VFOLD]++;
    CPU->vocab_fold(M, S, Z, m, red, N, first);
}
static void c_vxentb(float *dlogits, const float *probs, const int *targets, int lo, float dloss,
                     size_t N, int V)
{
    count_kernel_calls[K_VXENTB]++;
    CPU->vocab_crossentropy_backward(dlogits, probs, targets, lo, dloss, N, V);
}

static void c_mroute(float *probs, int *choice, float *gate, int N, int E, int K, int renorm)
{
    count_kernel_calls[K_MROUTE]++;
    CPU->moe_route(probs, choice, gate, N, E, K, renorm);
}
static void c_mpsum(double *P, const float *probs, int N, int E)
{
    count_kernel_calls[K_MPSUM]++;
    CPU->moe_prob_sums(P, probs, N, E);
}
static void c_mdisp(float *send, const float *x, const int *row, int N, int K, int C)
{
    count_kernel_calls[K_MDISP]++;
    CPU->moe_dispatch(send, x, row, N, K, C);
}
static void c_mdispb(float *dx, const float *dsend, const int *row, int N, int K, int C)
{
    count_kernel_calls[K_MDISPB]++;
    CPU->moe_dispatch_backward(dx, dsend, row, N, K, C);
}
static void c_mcomb(float *y, const float *comb, const int *row, const float *gate, int N, int K,
                    int C)
{
    count_kernel_calls[K_MCOMB]++;
    CPU->moe_combine(y, comb, row, gate, N, K, C);
}
static void c_mcombb(float *dcomb, float *dgate, const float *dy, const float *comb, const int *row,
                     const float *gate, int N, int K, int C)
{
    count_kernel_calls[K_MCOMBB]++;
    CPU->moe_combine_backward(dcomb, dgate, dy, comb, row, gate, N, K, C);
}
static void c_mrouteb(float *dprobs, float *dgate, const float *probs, const float *gate,
                      const int *choice, const double *frac, double daux, int N, int E, int K,
                      int renorm)
{
    count_kernel_calls[K_MROUTEB]++;
    CPU->moe_route_backward(dprobs, dgate, probs, gate, choice, frac, daux, N, E, K, renorm);
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
    .ring_forward = c_ringf,
    .ring_finish = c_ringfin,
    .ring_delta = c_ringd,
    .ring_backward = c_ringb,
    .ring_fold_kv = c_ringfold,
    .add_rows = c_addrows,
    .positions_forward = c_posf,
    .positions_backward = c_posb,
    .embedding_backward_rows = c_embbr,
    .vocab_max = c_vmax,
    .vocab_exp_sums = c_vexp,
    .vocab_loss = c_vloss,
    .vocab_fold = c_vfold,
    .vocab_crossentropy_backward = c_vxentb,
    .moe_route = c_mroute,
    .moe_prob_sums = c_mpsum,
    .moe_dispatch = c_mdisp,
    .moe_dispatch_backward = c_mdispb,
    .moe_combine = c_mcomb,
    .moe_combine_backward = c_mcombb,
    .moe_route_backward = c_mrouteb,
};

const msr_kernels_t *count_kernels(void)
{
    return &counting;
}
