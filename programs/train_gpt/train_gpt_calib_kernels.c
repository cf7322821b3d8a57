/* train_gpt --calibrate: timing train_gpt's own kernels at the model's
 * shapes, a GPT's or a Llama's (peak_tflops, attn_tflops, ring_tflops,
 * mem_gbs, act_gbs, kernel_us, mm_rows_half, ring_chunk_half;
 * train_gpt_calibrate.c says how). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/time.h"
#include "model/gpt.h"
#include "model/layers.h"
#include "programs/train_gpt/train_gpt_calib.h"

/* A Llama's element-wise kernels (calib_run's). */
static void calib_run_llama(const calib_bufs_t *b, const calib_call_t *k)
{
    int HS = b->C / b->NH, qkv = b->C + 2 * b->KVH * HS;
    switch (k->kind) {
    case K_RMS_FWD:
        msr_rmsnorm_forward(b->out, b->rstd, b->inp, b->weight, b->N, b->C);
        break;
    case K_RMS_BWD:
        msr_rmsnorm_backward(b->dinp, b->dweight, b->dout, b->inp, b->weight, b->rstd, b->N, b->C);
        break;
    case K_SWIGLU_FWD:
        msr_swiglu_forward(b->out, b->inp, b->N, b->F);
        break;
    case K_SWIGLU_BWD:
        msr_swiglu_backward(b->dinp, b->inp, b->dout, b->N, b->F);
        break;
    default: /* K_ROPE: in place on qkv (N, C + 2 KVC); a turn keeps the values' sizes */
        msr_rope_forward(b->inp, qkv, b->B, b->T, 0, b->NH, HS, b->theta, 1);
        msr_rope_forward(b->inp + b->C, qkv, b->B, b->T, 0, b->KVH, HS, b->theta, 1);
        break;
    }
}

void calib_run(const calib_bufs_t *b, const calib_call_t *k)
{
    size_t nc = (size_t)b->N * (size_t)b->C;
    const float *bias = b->llama ? NULL : b->bias; /* a Llama's products have none */
    switch (k->kind) {
    case K_MM_FWD:
        msr_matmul_forward(NULL, b->out, b->inp, b->weight, bias, k->N, k->IC, k->OC);
        break;
    case K_MM_BWD:
        msr_matmul_backward(NULL, b->dinp, b->dweight, b->llama ? NULL : b->dbias, b->dout, b->inp,
                            b->weight, k->N, k->IC, k->OC);
        break;
    case K_ATTN_FWD:
        if (b->llama)
            msr_attention_gqa_forward(NULL, b->out, b->att, b->inp, b->B, b->T, b->C, b->NH,
                                      b->KVH);
        else
            msr_attention_forward(NULL, b->out, b->att, b->inp, b->B, b->T, b->C, b->NH);
        break;
    case K_ATTN_BWD:
        if (b->llama)
            msr_attention_gqa_backward(NULL, b->dinp, b->scratch, b->dout, b->inp, b->att, b->B,
                                       b->T, b->C, b->NH, b->KVH);
        else
            msr_attention_backward(NULL, b->dinp, b->scratch, b->dout, b->inp, b->att, b->B, b->T,
                                   b->C, b->NH);
        break;
    case K_RMS_FWD:
    case K_RMS_BWD:
    case K_SWIGLU_FWD:
    case K_SWIGLU_BWD:
    case K_ROPE:
        calib_run_llama(b, k);
        break;
    case K_LN_FWD:
        msr_layernorm_forward(b->out, b->mean, b->rstd, b->inp, b->weight, b->bias, b->N, b->C);
        break;
    case K_LN_BWD:
        msr_layernorm_backward(b->dinp, b->dweight, b->dbias, b->dout, b->inp, b->weight, b->mean,
                               b->rstd, b->N, b->C);
        break;
    case K_GELU_FWD:
        msr_gelu_forward(b->out, b->inp, 4 * nc);
        break;
    case K_RING_FWD:
    case K_RING_BWD: {
        /* q from the input's q columns, k and v from its k and v columns
         * (the ring sends them packed: stride 2C, here 3C) */
        int S = k->N > 0 ? k->N : b->S, C = b->C, NH = b->NH;
        const float *q = b->inp, *kk = b->inp + C, *v = b->inp + 2 * C;
        const int *kpos = b->ring_pos, *qpos = b->ring_pos + S;
        if (k->kind == K_RING_FWD)
            msr_attention_ring_forward(NULL, b->out, b->ring_mx, b->ring_sum, q, 3 * C, qpos, S, kk,
                                       v, 3 * C, kpos, S, C, NH, b->scratch);
        else
            msr_attention_ring_backward(NULL, b->dinp, 3 * C, b->ring_dkv, b->ring_dkv + C, 2 * C,
                                        b->dout, q, kk, v, b->ring_lse, b->ring_delta, qpos, S,
                                        kpos, S, C, NH, b->scratch);
        break;
    }
    case K_GELU_BWD:
        msr_gelu_backward(b->dinp, b->inp, b->dout, 4 * nc);
        break;
    case K_RESIDUAL:
        msr_residual_forward(b->out, b->inp, b->dout, nc);
        break;
    }
}

/* Seconds per call of run(arg) on this rank: after one call to warm the
 * caches, rounds of doubling length until one lasts round_ns, then
 * two more of that length; the median of the three, so that one round
 * another process disturbed does not decide. The three's spread (the
 * median less the fastest) and the median are added to *noise (NULL:
 * not). */
int calib_short(const options_t *o)
{
    return o->calibrate == NULL && o->steps < CALIB_SHORT_STEPS;
}

uint64_t calib_round_ns(const options_t *o, uint64_t base)
{
    return calib_short(o) ? base / CALIB_SHORT_DIVISOR : base;
}

double calib_rounds(void (*run)(const void *), const void *arg, uint64_t round_ns,
                    calib_noise_t *noise)
{
    run(arg);
    double t[3];
    uint64_t reps = 1;
    for (int n = 0; n < 3;) {
        uint64_t t0 = msr_now_ns();
        for (uint64_t i = 0; i < reps; i++)
            run(arg);
        uint64_t dt = msr_now_ns() - t0;
        if (n == 0 && dt < round_ns && reps < ((uint64_t)1 << 40)) {
            reps *= 2;
            continue;
        }
        t[n++] = (double)dt * 1e-9 / (double)reps;
    }
    double lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
    double med = t[2] < lo ? lo : t[2] > hi ? hi : t[2];
    if (noise != NULL) {
        /* the median less the fastest: one round another process
         * disturbed moves neither */
        noise->spread_s += med - (t[2] < lo ? t[2] : lo);
        noise->time_s += med;
    }
    return med;
}

typedef struct calib_one {
    const calib_bufs_t *b;
    const calib_call_t *k;
} calib_one_t;

static void calib_run_one(const void *arg)
{
    const calib_one_t *x = arg;
    calib_run(x->b, x->k);
}

/* Seconds per call of k on this rank (calib_rounds). */
double calib_time(const calib_bufs_t *b, const calib_call_t *k)
{
    calib_one_t x = {b, k};
    return calib_rounds(calib_run_one, &x, b->round_ns, b->noise);
}

/* Small, varied values, never denormal; seed varies them between buffers. */
void calib_fill(float *p, size_t n, size_t seed)
{
    for (size_t j = 0; j < n; j++)
        p[j] = (float)((int)((j * 2654435761u + seed) % 1999u) - 999) * 1e-4f;
}

void calib_bufs_free(calib_bufs_t *b)
{
    float **all[] = {&b->inp,  &b->weight,  &b->bias,      &b->out,     &b->dout,
                     &b->dinp, &b->dweight, &b->dbias,     &b->mean,    &b->rstd,
                     &b->att,  &b->scratch, &b->ring_stat, &b->ring_dkv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        msr_free(*all[i]);
        *all[i] = NULL;
    }
    msr_free(b->ring_pos);
    b->ring_pos = NULL;
}

/* Buffers for the model's shapes: N rows of one micro-batch (at most
 * CALIB_MAX_ROWS, whole sequences), the widest weight, filled with small
 * values so no kernel meets a denormal or an overflow. Returns 0 or -1 (out
 * of memory). */
int calib_bufs_init(calib_bufs_t *b, const options_t *o)
{
    memset(b, 0, sizeof *b);
    b->round_ns = calib_round_ns(o, CALIB_ROUND_NS);
    b->C = (int)o->channels;
    b->NH = (int)o->heads;
    b->V = MSR_GPT_VOCAB;
    b->llama = strcmp(o->arch, "llama") == 0;
    b->KVH = b->llama ? (int)o->kv_heads : b->NH;
    b->F = b->llama ? (int)o->ffn : 4 * b->C;
    b->theta = o->rope_theta;
    b->T = (int)o->seq;
    int64_t B = o->micro_batch;
    while (B > 1 && B * o->seq > CALIB_MAX_ROWS)
        B--;
    b->B = (int)B;
    b->N = (int)(B * o->seq);
    /* room for twice the rows, to see the rate change with them */
    b->N_max = 2 * b->N <= CALIB_MAX_ROWS ? 2 * b->N : b->N;
    size_t C = (size_t)b->C, N = (size_t)b->N_max;
    /* the widest output: fc (N,4C), a Llama's gate and up (N,2F), the head's */
    size_t wide = 4 * C > (size_t)b->V ? 4 * C : (size_t)b->V;
    if (2 * (size_t)b->F > wide)
        wide = 2 * (size_t)b->F;
    size_t acts = N * (wide > 3 * C ? wide : 3 * C); /* and qkv (N,3C) at most */
    size_t w = C * wide;
    size_t att = (size_t)b->B * (size_t)b->NH * (size_t)b->T * (size_t)b->T;
    b->S = b->T / 4 > 0 ? b->T / 4 : 1; /* its scratch, 2 S^2, fits T^2 */
    size_t S = (size_t)b->S, sn = S * (size_t)b->NH;
    float **bufs[] = {&b->inp,     &b->out,     &b->dout,      &b->dinp,    &b->weight,
                      &b->dweight, &b->bias,    &b->dbias,     &b->mean,    &b->rstd,
                      &b->att,     &b->scratch, &b->ring_stat, &b->ring_dkv};
    size_t sizes[] = {acts,   acts,     acts, acts, w,   w,
                      wide,   wide,     N,    N,    att, (size_t)b->T * b->T,
                      4 * sn, 2 * S * C};
    if ((b->ring_pos = msr_malloc(2 * S * sizeof *b->ring_pos)) == NULL)
        return -1;
    for (size_t i = 0; i < S; i++) {
        b->ring_pos[i] = (int)i;           /* the keys */
        b->ring_pos[S + i] = (int)(S + i); /* the queries, after them */
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if ((*bufs[i] = msr_malloc(sizes[i] * sizeof(float))) == NULL) {
            calib_bufs_free(b);
            return -1;
        }
        calib_fill(*bufs[i], sizes[i], i);
    }
    for (size_t j = 0; j < N; j++)
        b->rstd[j] = 1.0f;
    b->ring_mx = b->ring_stat;
    b->ring_sum = b->ring_stat + sn;
    b->ring_lse = b->ring_stat + 2 * sn; /* small values: probabilities near 1 */
    b->ring_delta = b->ring_stat + 3 * sn;
    for (size_t i = 0; i < sn; i++) { /* max, sum: nothing folded yet */
        b->ring_mx[i] = -INFINITY;
        b->ring_sum[i] = 0.0f;
    }
    /* the attention probabilities: each row a distribution */
    memset(b->att, 0, att * sizeof(float));
    for (size_t r = 0; r < att / (size_t)b->T; r++) {
        size_t t = r % (size_t)b->T;
        for (size_t u = 0; u <= t; u++)
            b->att[r * (size_t)b->T + u] = 1.0f / (float)(t + 1);
    }
    return 0;
}

/* The FLOP/s of a block's matmuls (L times) and the head's, forward and
 * backward, on rows rows; their FLOPs and seconds in *flops_p, *secs_p
 * where not NULL. */
static double calib_mm_rate(const calib_bufs_t *b, int rows, double L, double *flops_p,
                            double *secs_p)
{
    /* a block's matmuls, then the head (a GPT's tied to wte, no bias; a
     * Llama's its own): qkv (C + 2 KVC wide), the attention's projection,
     * the MLP's two (a GPT's fc to 4C and back; a Llama's gate and up
     * together to 2F, down from F) */
    int qkv = b->C + 2 * b->KVH * (b->C / b->NH);
    int up = b->llama ? 2 * b->F : b->F, down = b->F;
    const calib_call_t mm[5] = {{K_MM_FWD, rows, b->C, qkv},
                                {K_MM_FWD, rows, b->C, b->C},
                                {K_MM_FWD, rows, b->C, up},
                                {K_MM_FWD, rows, down, b->C},
                                {K_MM_FWD, rows, b->C, b->V}};
    double flops = 0, secs = 0;
    for (int i = 0; i < 5; i++) {
        double per = i < 4 ? L : 1.0; /* per model pass: L blocks, one head */
        double f = 2.0 * rows * mm[i].IC * mm[i].OC;
        calib_call_t bwd = mm[i];
        bwd.kind = K_MM_BWD;
        flops += per * 3.0 * f; /* forward f, backward 2f */
        secs += per * (calib_time(b, &mm[i]) + calib_time(b, &bwd));
    }
    if (flops_p != NULL)
        *flops_p = flops;
    if (secs_p != NULL)
        *secs_p = secs;
    return flops / secs;
}

/* h of rate(N) = R N / (N + h), that is 1 / rate = (1 + h / N) / R: a
 * least-squares line of 1 / rate against 1 / N through the rates at half,
 * once and (where the buffers hold them) twice the model's rows. 0 where
 * fewer rows are not slower. */
static double calib_rows_half(const calib_bufs_t *b, double rate_n, double L)
{
    double x[3], y[3];
    int n = 0;
    if (b->N >= 2) {
        x[n] = 1.0 / (b->N / 2);
        y[n++] = 1.0 / calib_mm_rate(b, b->N / 2, L, NULL, NULL);
    }
    x[n] = 1.0 / b->N;
    y[n++] = 1.0 / rate_n;
    if (b->N_max > b->N) {
        x[n] = 1.0 / b->N_max;
        y[n++] = 1.0 / calib_mm_rate(b, b->N_max, L, NULL, NULL);
    }
    if (n < 2)
        return 0;
    double mx = 0, my = 0;
    for (int i = 0; i < n; i++) {
        mx += x[i] / n;
        my += y[i] / n;
    }
    double sxy = 0, sxx = 0;
    for (int i = 0; i < n; i++) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
    }
    double slope = sxx > 0 ? sxy / sxx : 0, icpt = my - slope * mx;
    return slope > 0 && icpt > 0 ? slope / icpt : 0;
}

/* The ring: a pair of chunks, 4 S^2 C forward, 2.5 times that backward;
 * again on chunks of S / 2 (cp 4's), slower per FLOP, for h of the rate
 * R S / (S + h) as for the matmuls' rows (a line of 1 / rate against 1 / S
 * through the two), in *half (0 where shorter chunks are not slower). */
static double calib_ring(calib_bufs_t *b, double C, double *half)
{
    calib_call_t rf = {K_RING_FWD, 0, 0, 0}, rb = {K_RING_BWD, 0, 0, 0};
    double rate = 3.5 * 4.0 * b->S * (double)b->S * C / (calib_time(b, &rf) + calib_time(b, &rb));
    *half = 0;
    if (b->S >= 4) {
        int h = b->S / 2;
        calib_call_t hf = {K_RING_FWD, h, 0, 0}, hb = {K_RING_BWD, h, 0, 0};
        double rate_h = 3.5 * 4.0 * h * (double)h * C / (calib_time(b, &hf) + calib_time(b, &hb));
        double slope = (1.0 / rate_h - 1.0 / rate) / (1.0 / h - 1.0 / b->S);
        double icpt = 1.0 / rate - slope / b->S;
        *half = slope > 0 && icpt > 0 ? slope / icpt : 0;
    }
    return rate;
}

int calib_compute(const options_t *o, calib_compute_t *r)
{
    calib_bufs_t b;
    if (calib_bufs_init(&b, o) != 0) {
        fprintf(stderr, "train_gpt: --calibrate: out of memory for the kernels' buffers\n");
        return -1;
    }
    /* the noise of the compute rates, which decide a step's prediction */
    calib_noise_t noise = {0, 0};
    b.noise = &noise;
    double N = b.N, C = b.C, L = (double)o->layers;
    double flops, secs;
    r->matmul_flops_s = calib_mm_rate(&b, b.N, L, &flops, &secs);
    r->rows_half = calib_rows_half(&b, r->matmul_flops_s, L);
    /* attention: q k^T and the weighted sum of v, 2 B NH T^2 HS each way
     * forward, twice that backward; the time model prices these FLOPs at
     * the same rate as the matmuls', so the rate is of both together */
    double attf = 4.0 * b.B * (double)b.T * b.T * C;
    calib_call_t af = {K_ATTN_FWD, 0, 0, 0}, ab = {K_ATTN_BWD, 0, 0, 0};
    double atts = calib_time(&b, &af) + calib_time(&b, &ab);
    r->attn_flops_s = 3.0 * attf / atts;
    r->flops_s = (flops + L * 3.0 * attf) / (secs + L * atts);
    r->ring_flops_s = calib_ring(&b, C, &r->ring_half);
    /* element-wise: bytes each call reads and writes (fp32); a Llama's
     * norms are RMSNorms, its activation SwiGLU (F wide), and it turns q
     * and k by their positions (C + KVC a row, read and written) */
    double nc = N * C, nf = N * b.F, qk = N * (C + (double)b.KVH * (b.C / b.NH));
    const struct {
        calib_kind_t kind;
        double bytes;
        int act; /* priced at act_gbs */
    } gpt[] =
        {
            {K_LN_FWD, 4.0 * (2 * nc + 2 * N + 2 * C), 0}, /* inp; out, mean, rstd */
            {K_LN_BWD, 4.0 * (4 * nc + 2 * N + 5 * C), 0}, /* dout, inp, dinp r/w */
            {K_GELU_FWD, 4.0 * (2 * 4 * nc), 1},           /* inp; out */
            {K_GELU_BWD, 4.0 * (4 * 4 * nc), 1},           /* inp, dout, dinp r/w */
            {K_RESIDUAL, 4.0 * (3 * nc), 0},               /* a, b; out */
        },
      llama[] = {
          {K_RMS_FWD, 4.0 * (2 * nc + N + C), 0},     /* inp; out, rstd */
          {K_RMS_BWD, 4.0 * (4 * nc + N + 3 * C), 0}, /* dout, inp, dinp r/w */
          {K_SWIGLU_FWD, 4.0 * (3 * nf), 1},          /* gate, up; out */
          {K_SWIGLU_BWD, 4.0 * (7 * nf), 1},          /* gate, up, dout, dinp r/w */
          {K_ROPE, 4.0 * (2 * qk), 1},                /* q and k r/w */
          {K_RESIDUAL, 4.0 * (3 * nc), 0},            /* a, b; out */
      };
    /* GELU's tanh (SwiGLU's exp, rotary's angles) makes it several times
     * slower per byte than the norms and adds: its own rate (act_gbs) */
    double bytes = 0, act_bytes = 0, act_secs = 0;
    secs = 0;
    size_t n_ew = b.llama ? sizeof llama / sizeof llama[0] : sizeof gpt / sizeof gpt[0];
    for (size_t i = 0; i < n_ew; i++) {
        calib_call_t k = {b.llama ? llama[i].kind : gpt[i].kind, 0, 0, 0};
        int act = b.llama ? llama[i].act : gpt[i].act;
        *(act ? &act_bytes : &bytes) += b.llama ? llama[i].bytes : gpt[i].bytes;
        *(act ? &act_secs : &secs) += calib_time(&b, &k);
    }
    r->mem_bytes_s = bytes / secs;
    r->act_bytes_s = act_bytes / act_secs;
    calib_call_t tiny = {K_MM_FWD, 1, 1, 1};
    r->kernel_s = calib_time(&b, &tiny);
    r->noise = noise.time_s > 0 ? noise.spread_s / noise.time_s : 0;
    calib_bufs_free(&b);
    return 0;
}

int dbl_cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* The median of v[0..n) (sorts it); n >= 1. */
double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, dbl_cmp);
    return (v[(n - 1) / 2] + v[n / 2]) / 2;
}

/* ---- frames gone cold ---- */
