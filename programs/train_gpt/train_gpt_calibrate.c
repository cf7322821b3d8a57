/* train_gpt --calibrate: measures this machine for the planner's time
 * model (planner/plan.h's cluster, docs/plan.md "Calibrate") through
 * train_gpt's own kernels and communicator, a few seconds in all:
 *
 *   peak_tflops     the matmuls' FLOPs of a forward and backward pass over
 *                   the time train_gpt's kernels take for them at the
 *                   model's shapes on one micro-batch: msr_matmul_forward/
 *                   backward for a block's qkv, attproj, fc, fcproj (L
 *                   times) and the head, counted as the time model counts
 *                   them; every rank at once, as in training
 *   attn_tflops     the same for msr_attention_forward/backward
 *   ring_tflops     the same for msr_attention_ring_forward/backward on a
 *                   pair of chunks of T / 4 positions (cp 2's)
 *   ring_chunk      those T / 4 positions
 *   ring_chunk_half h of the ring's rate R S / (S + h) on chunks of S
 *                   positions, from its rates on T / 4 and T / 8 (0 where
 *                   shorter chunks are not slower)
 *   mem_gbs         the element-wise kernels (layernorm, residual) at the
 *                   model's activation shapes: bytes read and written per
 *                   second
 *   act_gbs         the same for GELU (tanh)
 *   kernel_us       one call of the smallest matmul (1 x 1 x 1)
 *   mm_rows         the rows of one micro-batch, which peak_tflops is at
 *   mm_rows_half    h of the matmuls' rate R N / (N + h) on N rows: a
 *                   least-squares line of 1 / rate against 1 / N through
 *                   their rates on half, once and twice mm_rows (where
 *                   twice fits CALIB_MAX_ROWS); 0 where fewer rows are not
 *                   slower
 *   latency_us      half a one-element round trip between two ranks, or
 *                   half a one-element allreduce among all of a node's
 *                   ranks at once, the larger
 *   intra_gbs       an allreduce among the ranks of each node: 2 (n-1)/n
 *                   bytes over its time less the latencies the time model
 *                   charges it (the shared-memory algorithm's 2)
 *   inter_gbs       the same among one rank of each node (several nodes;
 *                   the ring's 2 (n-1) latencies)
 *   ranks_per_node  the launcher's local world size
 *   mem_gib         the node's physical memory over its ranks
 *   cores_per_node  the cores the ranks may run on (the union of their
 *                   affinity masks): fewer than the ranks, and a rank
 *                   computes faster while the others wait
 *   idle_lend       how much faster: a block's MLP product timed with
 *                   every rank computing, then with cores_per_node of each
 *                   node's ranks computing while the others wait in a
 *                   barrier, five times with other ranks computing; the
 *                   mean speed-up as a share of the ideal one (ranks over
 *                   cores)
 *   ring_step_us    what a step of context parallel's ring costs beyond its
 *                   attention and its transfer: a block's MLP product on
 *                   cp 2's rows, then two ring steps (each passing a K/V
 *                   block round a ring of the node's ranks while computing
 *                   two chunk pairs a sequence), against the same work
 *                   without the ring, every rank at once both times
 *
 * Rates are the slowest rank's and costs the largest (calib_agree),
 * agreed by allgather, so every rank ends with the same cluster. */
#include <cblas.h>
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
#include "programs/train_gpt/train_gpt.h"

/* Each measurement repeats its call, doubling the count, until one round
 * lasts this long: long enough to hide the clock and a stray scheduling
 * hiccup, short enough that the whole calibration takes seconds. */
#define CALIB_ROUND_NS       (20 * 1000 * 1000ull)
#define CALIB_COMM_ROUND_NS  (60 * 1000 * 1000ull)
/* The activation buffers are sized for one micro-batch but at most this
 * many rows: the rate no longer depends on the rows long before. */
#define CALIB_MAX_ROWS       4096
/* The allreduce that measures bandwidth moves the model's gradients, held
 * within these bounds (a tiny model's would measure latency only). */
#define CALIB_MIN_COMM_BYTES ((size_t)256 << 10)
#define CALIB_MAX_COMM_BYTES ((size_t)16 << 20)

/* The buffers the kernels run on. */
typedef struct calib_bufs {
    int N, C, V, NH, T, B;
    int N_max; /* the rows the buffers hold: N, or 2 N where that fits */
    float *inp, *weight, *bias, *out, *dout, *dinp, *dweight, *dbias;
    float *mean, *rstd, *att, *scratch;
    /* ring attention (cp): one pair of chunks of S = T / 4 positions (cp
     * 2's) or fewer, every key before every query; the running max and
     * sum, lse and delta (S, NH) each, in ring_stat at fixed places
     * whatever the chunk (a shorter chunk's backward must not read its
     * lse from the sums the forwards grew: its exp() would underflow, and
     * run slowly, where the runtime's never does); the key and value
     * gradients (S, 2C) */
    int S;
    int *ring_pos; /* keys' positions, then the queries' */
    float *ring_stat, *ring_dkv;
    float *ring_mx, *ring_sum, *ring_lse, *ring_delta; /* in ring_stat */
} calib_bufs_t;

/* One kernel call to time: which, and its matmul sizes. */
typedef enum calib_kind {
    K_MM_FWD,
    K_MM_BWD,
    K_ATTN_FWD,
    K_ATTN_BWD,
    K_LN_FWD,
    K_LN_BWD,
    K_GELU_FWD,
    K_GELU_BWD,
    K_RESIDUAL,
    K_RING_FWD,
    K_RING_BWD,
} calib_kind_t;

typedef struct calib_call {
    calib_kind_t kind;
    int N, IC, OC; /* matmuls: rows, in and out channels */
} calib_call_t;

static void calib_run(const calib_bufs_t *b, const calib_call_t *k)
{
    size_t nc = (size_t)b->N * (size_t)b->C;
    switch (k->kind) {
    case K_MM_FWD:
        msr_matmul_forward(b->out, b->inp, b->weight, b->bias, k->N, k->IC, k->OC);
        break;
    case K_MM_BWD:
        msr_matmul_backward(b->dinp, b->dweight, b->dbias, b->dout, b->inp, b->weight, k->N, k->IC,
                            k->OC);
        break;
    case K_ATTN_FWD:
        msr_attention_forward(b->out, b->att, b->inp, b->B, b->T, b->C, b->NH);
        break;
    case K_ATTN_BWD:
        msr_attention_backward(b->dinp, b->scratch, b->dout, b->inp, b->att, b->B, b->T, b->C,
                               b->NH);
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
            msr_attention_ring_forward(b->out, b->ring_mx, b->ring_sum, q, 3 * C, qpos, S, kk, v,
                                       3 * C, kpos, S, C, NH, b->scratch);
        else
            msr_attention_ring_backward(b->dinp, 3 * C, b->ring_dkv, b->ring_dkv + C, 2 * C,
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
 * caches, rounds of doubling length until one lasts CALIB_ROUND_NS, then
 * two more of that length; the median of the three, so that one round
 * another process disturbed does not decide. */
static double calib_rounds(void (*run)(const void *), const void *arg)
{
    run(arg);
    double t[3];
    uint64_t reps = 1;
    for (int n = 0; n < 3;) {
        uint64_t t0 = msr_now_ns();
        for (uint64_t i = 0; i < reps; i++)
            run(arg);
        uint64_t dt = msr_now_ns() - t0;
        if (n == 0 && dt < CALIB_ROUND_NS && reps < ((uint64_t)1 << 40)) {
            reps *= 2;
            continue;
        }
        t[n++] = (double)dt * 1e-9 / (double)reps;
    }
    double lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
    return t[2] < lo ? lo : t[2] > hi ? hi : t[2];
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
static double calib_time(const calib_bufs_t *b, const calib_call_t *k)
{
    calib_one_t x = {b, k};
    return calib_rounds(calib_run_one, &x);
}

/* Small, varied values, never denormal; seed varies them between buffers. */
static void calib_fill(float *p, size_t n, size_t seed)
{
    for (size_t j = 0; j < n; j++)
        p[j] = (float)((int)((j * 2654435761u + seed) % 1999u) - 999) * 1e-4f;
}

static void calib_bufs_free(calib_bufs_t *b)
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
static int calib_bufs_init(calib_bufs_t *b, const options_t *o)
{
    memset(b, 0, sizeof *b);
    b->C = (int)o->channels;
    b->NH = (int)o->heads;
    b->V = MSR_GPT_VOCAB;
    b->T = (int)o->seq;
    int64_t B = o->micro_batch;
    while (B > 1 && B * o->seq > CALIB_MAX_ROWS)
        B--;
    b->B = (int)B;
    b->N = (int)(B * o->seq);
    /* room for twice the rows, to see the rate change with them */
    b->N_max = 2 * b->N <= CALIB_MAX_ROWS ? 2 * b->N : b->N;
    size_t C = (size_t)b->C, N = (size_t)b->N_max;
    size_t wide = 4 * C > (size_t)b->V ? 4 * C : (size_t)b->V; /* the widest output */
    size_t acts = N * (wide > 3 * C ? wide : 3 * C);           /* qkv (N,3C), fc (N,4C) */
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

/* This rank's compute figures. */
typedef struct calib_compute {
    double flops_s;        /* the matmuls' and attention's FLOPs of a pass, per second */
    double matmul_flops_s; /* the matmuls' alone */
    double attn_flops_s;   /* attention's (its own loops), FLOP/s */
    double ring_flops_s;   /* ring attention's, a pair of chunks of T / 4 positions */
    double mem_bytes_s;    /* the element-wise kernels' bytes moved per second */
    double act_bytes_s;    /* of GELU's */
    double kernel_s;       /* one smallest call, seconds */
    double rows_half;      /* the matmuls' rate on N rows is N / (N + this) of their
                            * rate on many (0: no slower on fewer) */
    double ring_half;      /* the same for the ring's chunks of S positions */
} calib_compute_t;

/* The FLOP/s of a block's matmuls (L times) and the head's, forward and
 * backward, on rows rows; their FLOPs and seconds in *flops_p, *secs_p
 * where not NULL. */
static double calib_mm_rate(const calib_bufs_t *b, int rows, double L, double *flops_p,
                            double *secs_p)
{
    /* a block's matmuls, then the head (tied to wte, no bias) */
    const calib_call_t mm[5] = {{K_MM_FWD, rows, b->C, 3 * b->C},
                                {K_MM_FWD, rows, b->C, b->C},
                                {K_MM_FWD, rows, b->C, 4 * b->C},
                                {K_MM_FWD, rows, 4 * b->C, b->C},
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

static int calib_compute(const options_t *o, calib_compute_t *r)
{
    calib_bufs_t b;
    if (calib_bufs_init(&b, o) != 0) {
        fprintf(stderr, "train_gpt: --calibrate: out of memory for the kernels' buffers\n");
        return -1;
    }
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
    /* the ring: a pair of chunks, 4 S^2 C forward, 2.5 times that backward;
     * again on chunks of S / 2 (cp 4's), slower per FLOP, for h of the
     * rate R S / (S + h) as for the matmuls' rows (a line of 1 / rate
     * against 1 / S through the two) */
    calib_call_t rf = {K_RING_FWD, 0, 0, 0}, rb = {K_RING_BWD, 0, 0, 0};
    r->ring_flops_s =
        3.5 * 4.0 * b.S * (double)b.S * C / (calib_time(&b, &rf) + calib_time(&b, &rb));
    r->ring_half = 0;
    if (b.S >= 4) {
        int h = b.S / 2;
        calib_call_t hf = {K_RING_FWD, h, 0, 0}, hb = {K_RING_BWD, h, 0, 0};
        double rate_h = 3.5 * 4.0 * h * (double)h * C / (calib_time(&b, &hf) + calib_time(&b, &hb));
        double slope = (1.0 / rate_h - 1.0 / r->ring_flops_s) / (1.0 / h - 1.0 / b.S);
        double icpt = 1.0 / r->ring_flops_s - slope / b.S;
        r->ring_half = slope > 0 && icpt > 0 ? slope / icpt : 0;
    }
    /* element-wise: bytes each call reads and writes (fp32) */
    double nc = N * C;
    const struct {
        calib_kind_t kind;
        double bytes;
    } ew[] = {
        {K_LN_FWD, 4.0 * (2 * nc + 2 * N + 2 * C)}, /* inp; out, mean, rstd */
        {K_LN_BWD, 4.0 * (4 * nc + 2 * N + 5 * C)}, /* dout, inp, dinp r/w */
        {K_GELU_FWD, 4.0 * (2 * 4 * nc)},           /* inp; out */
        {K_GELU_BWD, 4.0 * (4 * 4 * nc)},           /* inp, dout, dinp r/w */
        {K_RESIDUAL, 4.0 * (3 * nc)},               /* a, b; out */
    };
    /* GELU's tanh makes it several times slower per byte than the norms
     * and adds: its own rate (act_gbs) */
    double bytes = 0, act_bytes = 0, act_secs = 0;
    secs = 0;
    for (size_t i = 0; i < sizeof ew / sizeof ew[0]; i++) {
        calib_call_t k = {ew[i].kind, 0, 0, 0};
        int act = ew[i].kind == K_GELU_FWD || ew[i].kind == K_GELU_BWD;
        *(act ? &act_bytes : &bytes) += ew[i].bytes;
        *(act ? &act_secs : &secs) += calib_time(&b, &k);
    }
    r->mem_bytes_s = bytes / secs;
    r->act_bytes_s = act_bytes / act_secs;
    calib_call_t tiny = {K_MM_FWD, 1, 1, 1};
    r->kernel_s = calib_time(&b, &tiny);
    calib_bufs_free(&b);
    return 0;
}

static int dbl_cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* The median of v[0..n) (sorts it); n >= 1. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, dbl_cmp);
    return (v[(n - 1) / 2] + v[n / 2]) / 2;
}

/* ---- frames gone cold ---- */

/* The node's frames the cold measurement reaches (all ranks together),
 * and the most one rank allocates for it. */
#define CALIB_COLD_NODE_BYTES ((double)(768u << 20))
#define CALIB_COLD_RANK_BYTES ((size_t)192 << 20)
#define CALIB_COLD_MAX_FRAMES 256

/* One micro-batch's kept activations as the runtime's backward reads them:
 * attention's input (q, k, v), probabilities and output, and an MLP
 * product's input and output. */
typedef struct calib_frame {
    float *qkv, *att, *y, *x, *h;
} calib_frame_t;

static size_t calib_frame_floats(const calib_bufs_t *b)
{
    size_t N = (size_t)b->N, C = (size_t)b->C;
    return 3 * N * C + (size_t)b->B * b->NH * (size_t)b->T * b->T + N * C + N * C + 4 * N * C;
}

static void calib_frame_fwd(const calib_bufs_t *b, const calib_frame_t *f)
{
    msr_attention_forward(f->y, f->att, f->qkv, b->B, b->T, b->C, b->NH);
    msr_matmul_forward(f->h, f->x, b->weight, b->bias, b->N, b->C, 4 * b->C);
}

static void calib_frame_bwd(const calib_bufs_t *b, const calib_frame_t *f)
{
    msr_matmul_backward(b->dinp, b->dweight, b->dbias, b->dout, f->x, b->weight, b->N, b->C,
                        4 * b->C);
    msr_attention_backward(b->dinp, b->scratch, b->dout, f->qkv, f->att, b->B, b->T, b->C, b->NH);
}

typedef struct calib_frames {
    const calib_bufs_t *b;
    const calib_frame_t *fr;
    int k;
} calib_frames_t;

/* k frames written in turn and read back in turn, as GPipe's m
 * micro-batches are. */
static void calib_frames_run(const void *arg)
{
    const calib_frames_t *x = arg;
    for (int i = 0; i < x->k; i++)
        calib_frame_fwd(x->b, &x->fr[i]);
    for (int i = 0; i < x->k; i++)
        calib_frame_bwd(x->b, &x->fr[i]);
}

/* Seconds per micro-batch (a frame's forward and backward) with k frames
 * in turn (calib_rounds: its first call faults them in). */
static double calib_frames_time(const calib_bufs_t *b, const calib_frame_t *fr, int k)
{
    calib_frames_t x = {b, fr, k};
    return calib_rounds(calib_frames_run, &x) / k;
}

/* What calib_cold found: the extra seconds per frame byte of a
 * micro-batch whose frames went cold, and the node's frame bytes where
 * that starts and where it is whole; the curve for the header. */
typedef struct calib_cold {
    double s_per_byte, from_bytes, full_bytes;
    int n;
    double frames_bytes[CALIB_COLD_COUNTS], ms[CALIB_COLD_COUNTS]; /* the node's frames, ms a
                                                                    * micro-batch */
} calib_cold_t;

/* k frames of F floats each in one block (mem), filled. */
static calib_frame_t *cold_frames(const calib_bufs_t *b, float *mem, size_t F, int k)
{
    calib_frame_t *fr = msr_calloc((size_t)k, sizeof *fr);
    size_t N = (size_t)b->N, C = (size_t)b->C;
    for (int i = 0; fr != NULL && i < k; i++) {
        float *f = mem + (size_t)i * F;
        fr[i].qkv = f;
        fr[i].att = f + 3 * N * C;
        fr[i].y = fr[i].att + (size_t)b->B * b->NH * (size_t)b->T * b->T;
        fr[i].x = fr[i].y + N * C;
        fr[i].h = fr[i].x + N * C;
        calib_fill(fr[i].qkv, 3 * N * C, (size_t)i);
        calib_fill(fr[i].x, N * C, (size_t)i + 7);
    }
    return fr;
}

/* This rank's seconds a micro-batch with ks[i] frames in turn, into
 * all[me * CALIB_COLD_COUNTS + i] (0 where it could not measure), every
 * rank at once; out->frames_bytes and *counts_p, *fb_p (a frame's bytes)
 * set. -1 when a barrier failed (said on stderr). */
static int cold_measure(const options_t *o, msr_comm_t *comm, int rpn, double *all,
                        calib_cold_t *out, int *counts_p, double *fb_p)
{
    calib_bufs_t b;
    int ok = calib_bufs_init(&b, o) == 0 && all != NULL;
    size_t F = calib_frame_floats(&b); /* the shapes are set even when it failed */
    double fb = *fb_p = (double)F * sizeof(float);
    int kmax = (int)(CALIB_COLD_RANK_BYTES / (F * sizeof(float)));
    int want = (int)ceil(CALIB_COLD_NODE_BYTES / (rpn * fb));
    if (kmax > want)
        kmax = want;
    if (kmax > CALIB_COLD_MAX_FRAMES)
        kmax = CALIB_COLD_MAX_FRAMES;
    float *mem = NULL;
    calib_frame_t *fr = NULL;
    if (ok && kmax >= 2) {
        mem = msr_malloc((size_t)kmax * F * sizeof(float));
        fr = mem != NULL ? cold_frames(&b, mem, F, kmax) : NULL;
        ok = fr != NULL;
    }
    /* the frame counts: 1, 2, 4, ... and kmax last (the same on every
     * rank: they follow from the shapes) */
    int ks[CALIB_COLD_COUNTS], counts = 0;
    for (int k = 1; kmax >= 2 && counts < CALIB_COLD_COUNTS; k *= 2) {
        ks[counts++] = k < kmax ? k : kmax;
        if (k >= kmax)
            break;
    }
    *counts_p = counts;
    int me = comm != NULL ? msr_comm_rank(comm) : 0, rc = 0;
    for (int i = 0; i < counts; i++) {
        msr_status_t st;
        if (comm != NULL && (st = msr_comm_barrier(comm)) != MSR_OK) {
            fprintf(stderr, "train_gpt: --calibrate: %s: %s\n", msr_status_str(st),
                    msr_last_error());
            rc = -1;
            break;
        }
        if (ok)
            all[(size_t)me * CALIB_COLD_COUNTS + i] = calib_frames_time(&b, fr, ks[i]);
        out->frames_bytes[i] = rpn * ks[i] * fb;
    }
    msr_free(fr);
    msr_free(mem);
    calib_bufs_free(&b);
    return rc;
}

/* The cold cost from the median rank's curve (out->ms): more frames never
 * make a micro-batch faster, so the curve is made monotone (pooling
 * neighbours out of order: pool adjacent violators) and one disturbed
 * count decides nothing; within the noise of one frame's time there are
 * no cold frames to price. */
static void cold_fit(calib_cold_t *out, int counts, double fb)
{
    double iso[CALIB_COLD_COUNTS], w[CALIB_COLD_COUNTS];
    int blocks = 0;
    for (int i = 0; i < counts; i++) {
        iso[blocks] = out->ms[i];
        w[blocks++] = 1;
        while (blocks > 1 && iso[blocks - 2] > iso[blocks - 1]) {
            double ww = w[blocks - 2] + w[blocks - 1];
            iso[blocks - 2] =
                (iso[blocks - 2] * w[blocks - 2] + iso[blocks - 1] * w[blocks - 1]) / ww;
            w[blocks - 2] = ww;
            blocks--;
        }
    }
    double fit[CALIB_COLD_COUNTS];
    for (int k = 0, i = 0; k < blocks; k++)
        for (int j = 0; j < (int)w[k]; j++)
            fit[i++] = iso[k];
    double extra = fit[counts - 1] - fit[0];
    if (extra <= 0.03 * fit[0])
        return;
    out->s_per_byte = extra * 1e-3 / fb;
    out->from_bytes = out->frames_bytes[0];
    /* the ramp: from the last count within 15% of the cold level's extra
     * time to the first past 75% of it */
    int full = counts - 1;
    for (int i = counts - 1; i > 0; i--)
        if ((fit[i] - fit[0]) / extra >= 0.75)
            full = i;
    out->full_bytes = out->frames_bytes[full];
    for (int i = 1; i < full; i++)
        if ((fit[i] - fit[0]) / extra <= 0.15)
            out->from_bytes = out->frames_bytes[i];
    if (out->full_bytes <= out->from_bytes)
        out->full_bytes = out->from_bytes * 2;
}

/* Times a micro-batch's forward and backward with 1, 2, 4, ... frames in
 * turn, every rank at once on its own frames (the node's cache is
 * shared), until the node's frames reach CALIB_COLD_NODE_BYTES: the
 * median rank's time at each count, against one frame's. Collective. */
static int calib_cold(const options_t *o, msr_comm_t *comm, int rpn, calib_cold_t *out)
{
    memset(out, 0, sizeof *out);
    int n = comm != NULL ? msr_comm_size(comm) : 1, counts = 0;
    double fb = 0;
    double *all = msr_calloc((size_t)n * CALIB_COLD_COUNTS, sizeof *all);
    if (cold_measure(o, comm, rpn, all, out, &counts, &fb) != 0) {
        msr_free(all);
        return -1;
    }
    msr_status_t st;
    if (all != NULL && comm != NULL &&
        (st = msr_comm_allgather(comm, MSR_IN_PLACE, all, CALIB_COLD_COUNTS, MSR_DTYPE_F64)) !=
            MSR_OK) {
        fprintf(stderr, "train_gpt: --calibrate: %s: %s\n", msr_status_str(st), msr_last_error());
        msr_free(all);
        return -1;
    }
    if (all == NULL || counts < 2) {
        msr_free(all);
        return 0; /* nothing measured: no cold frames priced */
    }
    double *c = msr_calloc((size_t)n, sizeof *c);
    if (c == NULL) {
        msr_free(all);
        return 0;
    }
    int failed = 0;
    for (int i = 0; i < counts; i++) {
        for (int r = 0; r < n; r++)
            c[r] = all[(size_t)r * CALIB_COLD_COUNTS + i];
        out->ms[i] = median(c, n) * 1e3; /* sorted: c[0] the least */
        failed |= c[0] <= 0;
    }
    msr_free(c);
    msr_free(all);
    out->n = failed ? 0 : counts;
    if (!failed)
        cold_fit(out, counts, fb);
    return 0;
}

/* ---- the cores of ranks that wait ---- */

/* A block's MLP product forward and backward: the work calib_lend times,
 * this many times each way, with other ranks computing alone each time. */
#define CALIB_LEND_TRIES 5

static void calib_lend_run(const void *arg)
{
    const calib_bufs_t *b = arg;
    const calib_call_t fwd = {K_MM_FWD, b->N, b->C, 4 * b->C},
                       bwd = {K_MM_BWD, b->N, b->C, 4 * b->C};
    calib_run(b, &fwd);
    calib_run(b, &bwd);
}

/* Where a node's ranks share fewer cores than they are, how much of the
 * waiting ranks' cores the computing ones get: the product above timed
 * with every rank computing, then with only `cores` of each node's ranks
 * computing while the others wait in a barrier, as a pipeline's idle
 * stages wait for their input. The computing ranks' mean speed-up, as a
 * share of the ideal one's (ranks over cores): 1 when waiting ranks hand
 * their cores over whole, 0 when they hand over nothing. *lend < 0 where not measured (no rank
 * waits for a core). Collective; -1 on the communicator's error. */
static int calib_lend(const options_t *o, msr_comm_t *comm, int local, int rpn, int cores,
                      double *lend, double *speedup)
{
    *lend = -1;
    *speedup = 0;
    if (comm == NULL || cores <= 0 || rpn <= cores)
        return 0;
    calib_bufs_t b;
    int ok = calib_bufs_init(&b, o) == 0;
    /* CALIB_LEND_TRIES pairs of timings, each with other ranks computing
     * alone: the scheduler may leave two of them on one core for a while
     * and the others idle, more with some ranks than others, and the mean
     * over the tries prices that as often as it happens */
    double up[2] = {0, 0}; /* the speed-ups measured, summed and counted */
    msr_status_t st = MSR_OK;
    for (int i = 0; i < CALIB_LEND_TRIES; i++) {
        int computes = (local + i) % rpn < cores;
        double all_s = 0, alone_s = 0;
        if (st == MSR_OK && (st = msr_comm_barrier(comm)) == MSR_OK && ok)
            all_s = calib_rounds(calib_lend_run, &b);
        if (st == MSR_OK && (st = msr_comm_barrier(comm)) == MSR_OK && ok && computes)
            alone_s = calib_rounds(calib_lend_run, &b);
        if (all_s > 0 && alone_s > 0) {
            up[0] += all_s / alone_s;
            up[1] += 1;
        }
    }
    if (ok)
        calib_bufs_free(&b);
    if (st == MSR_OK &&
        (st = msr_comm_allreduce(comm, MSR_IN_PLACE, up, 2, MSR_DTYPE_F64, MSR_OP_SUM)) == MSR_OK &&
        up[1] > 0) {
        *speedup = up[0] / up[1];
        double ideal = (double)rpn / cores, share = (*speedup - 1) / (ideal - 1);
        *lend = share < 0 ? 0 : share > 1 ? 1 : share;
    }
    if (st != MSR_OK) {
        fprintf(stderr, "train_gpt: --calibrate: %s: %s\n", msr_status_str(st), msr_last_error());
        return -1;
    }
    return 0;
}

/* ---- the communicator ---- */

typedef struct calib_pingpong {
    msr_comm_t *comm;
    int a, b; /* the two ranks; the others wait */
    float *buf;
    uint64_t count;
} calib_pingpong_t;

static msr_status_t calib_pingpong_op(void *arg)
{
    calib_pingpong_t *p = arg;
    int me = msr_comm_rank(p->comm);
    msr_status_t st = MSR_OK;
    if (me == p->a) {
        if ((st = msr_comm_send(p->comm, p->buf, p->count, MSR_DTYPE_F32, p->b, 0)) == MSR_OK)
            st = msr_comm_recv(p->comm, p->buf, p->count, MSR_DTYPE_F32, p->b, 0);
    } else if (me == p->b) {
        if ((st = msr_comm_recv(p->comm, p->buf, p->count, MSR_DTYPE_F32, p->a, 0)) == MSR_OK)
            st = msr_comm_send(p->comm, p->buf, p->count, MSR_DTYPE_F32, p->a, 0);
    }
    return st;
}

typedef struct calib_allreduce {
    msr_comm_t *comm; /* NULL: this rank takes no part */
    float *buf;
    uint64_t count;
} calib_allreduce_t;

static msr_status_t calib_allreduce_op(void *arg)
{
    calib_allreduce_t *r = arg;
    if (r->comm == NULL)
        return MSR_OK;
    return msr_comm_allreduce(r->comm, MSR_IN_PLACE, r->buf, r->count, MSR_DTYPE_F32, MSR_OP_SUM);
}

/* Seconds per op on the slowest rank: every rank of world runs op in
 * rounds of doubling length (op may involve a sub-group or a pair; the
 * rest pass) until the slowest spent CALIB_COMM_ROUND_NS in one, agreed by
 * an allreduce so all stop together. Returns 0, or -1 with the failure
 * printed. */
static int calib_time_comm(msr_comm_t *world, msr_status_t (*op)(void *), void *arg,
                           const char *what, double *secs_p)
{
    msr_status_t st;
    if ((st = op(arg)) != MSR_OK) /* warm up: connections, buffers */
        goto fail;
    for (uint64_t reps = 1;; reps *= 2) {
        if ((st = msr_comm_barrier(world)) != MSR_OK)
            goto fail;
        uint64_t t0 = msr_now_ns();
        for (uint64_t i = 0; i < reps; i++)
            if ((st = op(arg)) != MSR_OK)
                goto fail;
        double dt = (double)(msr_now_ns() - t0) * 1e-9;
        if ((st = msr_comm_allreduce(world, MSR_IN_PLACE, &dt, 1, MSR_DTYPE_F64, MSR_OP_MAX)) !=
            MSR_OK)
            goto fail;
        if (dt * 1e9 >= (double)CALIB_COMM_ROUND_NS || reps >= ((uint64_t)1 << 30)) {
            *secs_p = dt / (double)reps;
            return 0;
        }
    }
fail:
    fprintf(stderr, "train_gpt: --calibrate: %s: %s: %s\n", what, msr_status_str(st),
            msr_last_error());
    return -1;
}

/* The per-rank bandwidth, bytes/s, the time model's allreduce of bytes
 * over n ranks implies when it takes secs with msgs latencies lat: 2
 * (n-1)/n bytes cross each rank's link (planner/plan_time.c). */
static double allreduce_bandwidth(double bytes, int n, double secs, double msgs, double lat)
{
    double wire = secs - msgs * lat;
    if (wire < 0.25 * secs) /* latency measured above the whole: keep the plain rate */
        wire = secs;
    return 2.0 * (n - 1) / n * bytes / wire;
}

/* The first rank of world on another node than rank 0, or on the same
 * one (same != 0); -1 if none. node[]: every rank's node. */
static int calib_peer(const int *node, int n, int same)
{
    for (int r = 1; r < n; r++)
        if ((node[r] == node[0]) == (same != 0))
            return r;
    return -1;
}

/* ---- context parallel's ring ---- */

#define CALIB_RING_STEPS 2

typedef struct calib_ring {
    const calib_bufs_t *b;
    msr_comm_t *comm; /* the node's ranks, a ring; NULL: the attention alone */
    float *out, *in;  /* the K/V block passed on, the one taken */
    uint64_t count;
} calib_ring_t;

/* A block's worth of the ring as parallel/mp_cp.c runs it at cp 2: the
 * block's MLP product on its rows (each rank on its own, as the matmuls
 * between two attentions), then CALIB_RING_STEPS steps, each posting the
 * hand-off (the block to the next rank, the previous rank's in), computing
 * a micro-batch's chunk pairs (two a sequence) and waiting for both
 * transfers. */
static msr_status_t calib_ring_op(void *arg)
{
    calib_ring_t *r = arg;
    const calib_bufs_t *b = r->b;
    /* the block's other work first, each rank on its own */
    int rows = b->N / 2 > 0 ? b->N / 2 : 1;
    const calib_call_t mf = {K_MM_FWD, rows, b->C, 4 * b->C}, mb = {K_MM_BWD, rows, b->C, 4 * b->C};
    calib_run(b, &mf);
    calib_run(b, &mb);
    for (int step = 0; step < CALIB_RING_STEPS; step++) {
        msr_comm_req_t *req[2] = {NULL, NULL};
        msr_status_t st = MSR_OK;
        if (r->comm != NULL) {
            int n = msr_comm_size(r->comm), me = msr_comm_rank(r->comm);
            st = msr_comm_irecv(r->comm, r->in, r->count, MSR_DTYPE_F32, (me + n - 1) % n, 0,
                                &req[0]);
            if (st == MSR_OK)
                st = msr_comm_isend(r->comm, r->out, r->count, MSR_DTYPE_F32, (me + 1) % n, 0,
                                    &req[1]);
        }
        const calib_call_t f = {K_RING_FWD, 0, 0, 0};
        for (int i = 0; i < 2 * b->B; i++)
            calib_run(b, &f);
        if (r->comm != NULL) {
            msr_status_t wst = msr_comm_wait_all(req, 2);
            if (st != MSR_OK || wst != MSR_OK)
                return st != MSR_OK ? st : wst;
        }
    }
    return MSR_OK;
}

/* What a ring step's hand-off costs beyond its attention and its transfer
 * (the time model's latency and intra-node bandwidth, in c), seconds, into
 * *secs_p: every rank of each node in a ring of the node's ranks (local,
 * at most maxn on any node), against the same attention without the ring,
 * every rank at once both times. Ranks that share cores meet at each
 * hand-off, and one that finished its work waits for the peer the
 * scheduler has not run yet. *secs_p < 0 where no node has two ranks.
 * Collective over world; -1 on failure (printed). */
static int calib_ring_step(const options_t *o, msr_comm_t *world, msr_comm_t *local, int maxn,
                           const msr_plan_cluster_t *c, double *secs_p)
{
    *secs_p = -1;
    int fail = 0, rc = -1;
    msr_status_t st;
    if (maxn < 2)
        return 0;
    calib_bufs_t b;
    /* cp 2's K/V block: half the micro-batch's positions, keys and values */
    uint64_t count = (uint64_t)o->micro_batch * (uint64_t)o->seq * (uint64_t)o->channels;
    float *blk = msr_calloc(2 * count, sizeof *blk);
    int ok = blk != NULL && calib_bufs_init(&b, o) == 0;
    if (!ok)
        fail = 1;
    /* a rank that failed still takes part in the agreement, not the ring */
    if ((st = msr_comm_allreduce(world, MSR_IN_PLACE, &fail, 1, MSR_DTYPE_I32, MSR_OP_MAX)) !=
            MSR_OK ||
        fail) {
        if (st != MSR_OK)
            fprintf(stderr, "train_gpt: --calibrate: %s: %s\n", msr_status_str(st),
                    msr_last_error());
        else
            fprintf(stderr, "train_gpt: --calibrate: out of memory for the ring's buffers\n");
        if (ok)
            calib_bufs_free(&b);
        msr_free(blk);
        return -1;
    }
    calib_ring_t alone = {&b, NULL, blk, blk + count, count};
    calib_ring_t ring = {&b, msr_comm_size(local) > 1 ? local : NULL, blk, blk + count, count};
    double t_alone, t_ring;
    if (calib_time_comm(world, calib_ring_op, &alone, "the ring's attention", &t_alone) == 0 &&
        calib_time_comm(world, calib_ring_op, &ring, "the ring's hand-offs", &t_ring) == 0) {
        double xfer = c->latency_us * 1e-6 + (double)count * sizeof(float) / (c->intra_gbs * 1e9);
        double hand = (t_ring - t_alone) / CALIB_RING_STEPS - xfer;
        *secs_p = hand > 0 ? hand : 0;
        rc = 0;
    }
    calib_bufs_free(&b);
    msr_free(blk);
    return rc;
}

/* Latency and bandwidth inside a node and between nodes, and the ring's
 * hand-offs (calib_ring_step), into c; measured gets the CALIB_* bits of
 * what was. */
static int calib_comm(const options_t *o, msr_comm_t *world, const job_t *job, size_t bytes,
                      msr_plan_cluster_t *c, unsigned *measured)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world), rc = -1;
    int *node = msr_calloc((size_t)n, sizeof *node);
    uint64_t count = bytes / sizeof(float);
    float *buf = msr_calloc(count, sizeof *buf);
    msr_comm_t *local = NULL, *across = NULL;
    msr_status_t st;
    if (node == NULL || buf == NULL) {
        fprintf(stderr, "train_gpt: --calibrate: out of memory for the communicator's buffers\n");
        goto out;
    }
    int mine = msr_node_rank(job->ctx), lrank = msr_local_rank(job->ctx);
    if ((st = msr_comm_allgather(world, &mine, node, 1, MSR_DTYPE_I32)) != MSR_OK) {
        fprintf(stderr, "train_gpt: --calibrate: sharing the nodes: %s: %s\n", msr_status_str(st),
                msr_last_error());
        goto out;
    }
    /* the ranks of each node; one rank (the same local rank) of each node */
    if ((st = msr_comm_split(world, mine, me, &local)) != MSR_OK ||
        (st = msr_comm_split(world, lrank, me, &across)) != MSR_OK) {
        fprintf(stderr, "train_gpt: --calibrate: grouping by node: %s: %s\n", msr_status_str(st),
                msr_last_error());
        goto out;
    }
    double lat = 0;
    for (int same = 1; same >= 0; same--) {
        int peer = calib_peer(node, n, same);
        if (peer < 0)
            continue;
        calib_pingpong_t pp = {world, 0, peer, buf, 1};
        double s;
        if (calib_time_comm(world, calib_pingpong_op, &pp, "a round trip", &s) != 0)
            goto out;
        if (s / 2 > lat) /* the slower kind of link decides */
            lat = s / 2;
        *measured |= 1u << CALIB_LATENCY;
    }
    /* a message's fixed cost as training pays it: every rank of the node
     * in a one-element allreduce at once (the shared-memory algorithm's 2
     * latencies), where ranks sharing few cores wait to be scheduled; the
     * larger of this and the quiet round trip's */
    if (msr_comm_size(local) > 1) {
        calib_allreduce_t ar = {local, buf, 1};
        double s;
        if (calib_time_comm(world, calib_allreduce_op, &ar, "a small allreduce", &s) != 0)
            goto out;
        if (s / 2 > lat)
            lat = s / 2;
        *measured |= 1u << CALIB_LATENCY;
    }
    if (*measured & (1u << CALIB_LATENCY))
        c->latency_us = lat * 1e6;
    int node_max = 1; /* the most ranks any node has */
    for (int inside = 1; inside >= 0; inside--) {
        msr_comm_t *g = inside ? local : across;
        int gn = msr_comm_size(g);
        /* every node's group (or every local rank's) runs at once, as
         * training's groups do; measured where the group has two ranks */
        int maxn = gn;
        if ((st = msr_comm_allreduce(world, MSR_IN_PLACE, &maxn, 1, MSR_DTYPE_I32, MSR_OP_MAX)) !=
            MSR_OK) {
            fprintf(stderr, "train_gpt: --calibrate: %s\n", msr_status_str(st));
            goto out;
        }
        if (inside)
            node_max = maxn;
        if (maxn < 2)
            continue;
        calib_allreduce_t ar = {gn > 1 ? g : NULL, buf, count};
        double s;
        if (calib_time_comm(world, calib_allreduce_op, &ar,
                            inside ? "an allreduce inside the node" : "an allreduce across nodes",
                            &s) != 0)
            goto out;
        double msgs = inside ? 2.0 : 2.0 * (maxn - 1);
        double bw = allreduce_bandwidth((double)count * sizeof(float), maxn, s, msgs, lat) * 1e-9;
        if (inside) {
            c->intra_gbs = bw;
            *measured |= 1u << CALIB_INTRA;
        } else {
            c->inter_gbs = bw;
            *measured |= 1u << CALIB_INTER;
        }
    }
    double hand;
    if (calib_ring_step(o, world, local, node_max, c, &hand) != 0)
        goto out;
    if (hand >= 0) {
        c->ring_step_us = hand * 1e6;
        *measured |= 1u << CALIB_RING_STEP;
    }
    rc = 0;
out:
    msr_comm_destroy(across);
    msr_comm_destroy(local);
    msr_free(buf);
    msr_free(node);
    return rc;
}

/* The machine's memory per rank, GiB; 0 when unknown. */
/* The cores this rank may run on, as a 0/1 vector of CALIB_CPUS. */
#define CALIB_CPUS 1024
static void calib_cpus(int32_t *on)
{
    memset(on, 0, CALIB_CPUS * sizeof *on);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        for (long i = 0; i < n && i < CALIB_CPUS; i++)
            on[i] = 1;
        return;
    }
    for (int i = 0; i < CALIB_CPUS && i < CPU_SETSIZE; i++)
        on[i] = CPU_ISSET(i, &set) ? 1 : 0;
}

static double calib_mem_gib(int ranks_per_node)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0 || ranks_per_node < 1)
        return 0;
    return (double)pages * (double)page / ranks_per_node / (1024.0 * 1024.0 * 1024.0);
}

/* What each rank measured, in calib_agree's order. */
#define CALIB_KEYS 12

/* The ranks' measurements into one cluster, alike on every rank: the
 * slowest rank's rates (a node whose ranks are all busy, as in training),
 * the least memory, the largest costs and ranks per node. mins: the 7
 * rates and memory, 0 where a rank failed; maxs: the kernel cost, ranks
 * per node, mm_rows_half, ring_chunk_half. */
static int calib_agree(msr_comm_t *comm, const double *mine, double *mins, double *maxs)
{
    int n = comm != NULL ? msr_comm_size(comm) : 1, me = comm != NULL ? msr_comm_rank(comm) : 0;
    double *all = msr_calloc((size_t)n * 2 * CALIB_KEYS, sizeof *all);
    if (all == NULL) {
        fprintf(stderr, "train_gpt: --calibrate: out of memory\n");
        return -1;
    }
    double *col = all + (size_t)n * CALIB_KEYS;
    memcpy(all + (size_t)me * CALIB_KEYS, mine, CALIB_KEYS * sizeof *all);
    msr_status_t st;
    if (comm != NULL &&
        (st = msr_comm_allgather(comm, MSR_IN_PLACE, all, CALIB_KEYS, MSR_DTYPE_F64)) != MSR_OK) {
        fprintf(stderr, "train_gpt: --calibrate: %s: %s\n", msr_status_str(st), msr_last_error());
        msr_free(all);
        return -1;
    }
    double v[CALIB_KEYS];
    int failed = 0;
    for (int k = 0; k < CALIB_KEYS; k++) {
        for (int r = 0; r < n; r++)
            col[r] = all[(size_t)r * CALIB_KEYS + k];
        qsort(col, (size_t)n, sizeof *col, dbl_cmp);
        /* rates and memory: the least; costs and ranks per node: the most */
        v[k] = k < 7 ? col[0] : col[n - 1];
        if (k == CALIB_KEYS - 1)
            failed = col[0] == 0;
    }
    msr_free(all);
    for (int k = 0; k < 7; k++)
        mins[k] = failed ? 0 : v[k];
    for (int k = 0; k < 4; k++)
        maxs[k] = v[7 + k];
    return 0;
}

/* The union of the ranks' cores (nodes alike: the world's union), or -1
 * (said on stderr). Collective. */
static int calib_cores(msr_comm_t *comm)
{
    int32_t *cpus = msr_calloc(CALIB_CPUS, sizeof *cpus);
    if (cpus == NULL) {
        fprintf(stderr, "train_gpt: --calibrate: out of memory\n");
        return -1;
    }
    calib_cpus(cpus);
    msr_status_t st;
    if (comm != NULL && (st = msr_comm_allreduce(comm, MSR_IN_PLACE, cpus, CALIB_CPUS,
                                                 MSR_DTYPE_I32, MSR_OP_MAX)) != MSR_OK) {
        fprintf(stderr, "train_gpt: --calibrate: %s: %s\n", msr_status_str(st), msr_last_error());
        msr_free(cpus);
        return -1;
    }
    int cores = 0;
    for (int i = 0; i < CALIB_CPUS; i++)
        cores += cpus[i] != 0;
    msr_free(cpus);
    return cores;
}

/* The cold frames' cost and curve into the cluster file's keys. */
static void calib_put_cold(const calib_cold_t *cold, calib_t *k)
{
    if (cold->n < 2)
        return;
    k->measured |= 1u << CALIB_COLD;
    k->c.cold_ms_per_mib = cold->s_per_byte * 1e3 * 1048576.0;
    k->c.cold_from_mib = cold->from_bytes / 1048576.0;
    k->c.cold_full_mib = cold->full_bytes / 1048576.0;
    k->cold_n = cold->n;
    for (int i = 0; i < cold->n; i++) {
        k->cold_mib[i] = cold->frames_bytes[i] / 1048576.0;
        k->cold_ms[i] = cold->ms[i];
    }
}

int train_gpt_calibrate(const options_t *o, const job_t *job, msr_comm_t *comm, calib_t *out)
{
    calib_t k;
    memset(&k, 0, sizeof k);
    msr_plan_cluster_default(&k.c);
    calib_compute_t cc;
    msr_status_t st;
    uint64_t t0 = msr_now_ns();
    if (o->threads > 0) /* the kernels run as training will run them */
        openblas_set_num_threads((int)o->threads);
    /* every rank computes at once, as in training: they share the node */
    if (comm != NULL && (st = msr_comm_barrier(comm)) != MSR_OK) {
        fprintf(stderr, "train_gpt: --calibrate: %s: %s\n", msr_status_str(st), msr_last_error());
        return -1;
    }
    int ok = calib_compute(o, &cc) == 0;
    int rpn = job->ctx != NULL ? msr_local_world_size(job->ctx) : 1;
    double mem = calib_mem_gib(rpn);
    /* what this rank measured, for calib_agree; a failed rank sends 0 */
    double mine[CALIB_KEYS] = {ok ? cc.flops_s : 0,
                               ok ? cc.matmul_flops_s : 0,
                               ok ? cc.attn_flops_s : 0,
                               ok ? cc.mem_bytes_s : 0,
                               mem,
                               ok ? cc.act_bytes_s : 0,
                               ok ? cc.ring_flops_s : 0,
                               ok ? cc.kernel_s : 0,
                               (double)rpn,
                               ok ? cc.rows_half : 0,
                               ok ? cc.ring_half : 0,
                               ok};
    double mins[7], maxs[4];
    if (calib_agree(comm, mine, mins, maxs) != 0)
        return -1;
    if (!(mins[0] > 0 && mins[1] > 0 && mins[2] > 0 && mins[3] > 0 && mins[5] > 0 && mins[6] > 0))
        return -1; /* a rank ran out of memory and said so */
    calib_cold_t cold;
    if (calib_cold(o, comm, rpn, &cold) != 0)
        return -1;
    int cores = calib_cores(comm);
    if (cores < 0)
        return -1;
    k.c.cores_per_node = cores;
    double lend;
    int local = job->ctx != NULL ? msr_local_rank(job->ctx) : 0;
    if (calib_lend(o, comm, local, rpn, cores, &lend, &k.lend_speedup) != 0)
        return -1;
    k.c.idle_lend = lend >= 0 ? lend : k.c.idle_lend;
    /* the products at their own rate, attention and its ring at theirs */
    k.c.peak_tflops = mins[1] * 1e-12;
    k.c.attn_tflops = mins[2] * 1e-12;
    k.c.ring_tflops = mins[6] * 1e-12;
    k.blend_tflops = mins[0] * 1e-12;
    k.c.mem_gbs = mins[3] * 1e-9;
    k.c.act_gbs = mins[5] * 1e-9;
    k.c.kernel_us = maxs[0] * 1e6;
    k.c.ranks_per_node = (int)maxs[1];
    k.c.mm_rows_half = maxs[2];
    k.c.ring_chunk = o->seq / 4 > 0 ? o->seq / 4 : 1; /* calib_bufs_init's S */
    k.c.ring_chunk_half = maxs[3];
    k.measured = 1u << CALIB_COMPUTE | 1u << CALIB_RANKS | (lend >= 0 ? 1u << CALIB_LEND : 0);
    calib_put_cold(&cold, &k);
    if (mins[4] > 0) {
        k.c.mem_gib = mins[4];
        k.measured |= 1u << CALIB_MEM;
    }
    if (comm != NULL && msr_comm_size(comm) > 1) {
        size_t bytes = ((size_t)o->layers * 12 * (size_t)o->channels * (size_t)o->channels +
                        (size_t)MSR_GPT_VOCAB * (size_t)o->channels) *
                       sizeof(float);
        if (bytes < CALIB_MIN_COMM_BYTES)
            bytes = CALIB_MIN_COMM_BYTES;
        if (bytes > CALIB_MAX_COMM_BYTES)
            bytes = CALIB_MAX_COMM_BYTES;
        k.comm_bytes = bytes;
        if (calib_comm(o, comm, job, bytes, &k.c, &k.measured) != 0)
            return -1;
    }
    k.rows = o->micro_batch * o->seq;
    if (k.rows > CALIB_MAX_ROWS)
        k.rows = (CALIB_MAX_ROWS / o->seq) * o->seq;
    if (k.rows < o->seq)
        k.rows = o->seq;
    k.c.mm_rows = (double)k.rows; /* the rows calib_compute measured at */
    k.ranks = comm != NULL ? msr_comm_size(comm) : 1;
    k.seconds = (double)(msr_now_ns() - t0) * 1e-9;
    *out = k;
    return 0;
}

/* The median of n values (n <= CALIB_MAX_RUNS), leaving v as it was. */
static double median_of(const double *v, int n)
{
    double w[CALIB_MAX_RUNS];
    memcpy(w, v, (size_t)n * sizeof *w);
    return median(w, n);
}

/* Several calibrations into one: each key the median of the runs' (the
 * same on every rank: every run is), what was measured in every run
 * counted measured, the cold-frames curve point by point where every run
 * has the same points, the time the sum. */
static void calib_merge(const calib_t *runs, int n, calib_t *out)
{
    *out = runs[0];
    out->runs = n;
    if (n < 2)
        return;
    /* every real key of the cluster (those no run measures agree) */
    double v[CALIB_MAX_RUNS];
    const char *name;
    size_t off;
    for (size_t i = 0; msr_plan_cluster_real_key(i, &name, &off); i++) {
        for (int r = 0; r < n; r++)
            memcpy(&v[r], (const char *)&runs[r].c + off, sizeof v[r]);
        double m = median_of(v, n);
        memcpy((char *)&out->c + off, &m, sizeof m);
    }
#define MERGE(field)                  \
    do {                              \
        for (int r = 0; r < n; r++)   \
            v[r] = runs[r].field;     \
        out->field = median_of(v, n); \
    } while (0)
    MERGE(blend_tflops);
    MERGE(lend_speedup);
    int same = 1;
    out->seconds = 0;
    for (int r = 0; r < n; r++) {
        out->measured &= runs[r].measured;
        out->seconds += runs[r].seconds;
        same &= runs[r].cold_n == runs[0].cold_n;
    }
    for (int i = 0; same && i < runs[0].cold_n; i++)
        MERGE(cold_ms[i]);
#undef MERGE
}

int train_gpt_calibrate_runs(const options_t *o, const job_t *job, msr_comm_t *comm, calib_t *out)
{
    int n = o->calibrate_runs < 1 ? 1 : (int)o->calibrate_runs;
    if (n > CALIB_MAX_RUNS)
        n = CALIB_MAX_RUNS;
    calib_t *runs = msr_calloc((size_t)n, sizeof *runs);
    if (runs == NULL) {
        fprintf(stderr, "train_gpt: --calibrate: out of memory\n");
        return -1;
    }
    for (int r = 0; r < n; r++) {
        if (train_gpt_calibrate(o, job, comm, &runs[r]) != 0) {
            msr_free(runs);
            return -1;
        }
    }
    calib_merge(runs, n, out);
    msr_free(runs);
    return 0;
}

/* The keys that are not measured, commented out with why: the reader's
 * defaults apply to them. */
#define COLD_WHY "two micro-batches' frames over 192 MiB, or out of memory"

static const char *unmeasured_why(const calib_t *k, const char *key)
{
    static const struct {
        const char *key;
        int bit;
        const char *why;
    } keys[] = {
        {"latency_us", CALIB_LATENCY, "one rank: no message to time"},
        {"intra_gbs", CALIB_INTRA, "no node with two ranks"},
        {"inter_gbs", CALIB_INTER, "one node"},
        {"mem_gib", CALIB_MEM, "the machine's memory is unknown"},
        {"cold_ms_per_mib", CALIB_COLD, COLD_WHY},
        {"cold_from_mib", CALIB_COLD, COLD_WHY},
        {"cold_full_mib", CALIB_COLD, COLD_WHY},
        {"idle_lend", CALIB_LEND, "no rank waits for a core: as many cores as ranks"},
        {"ring_step_us", CALIB_RING_STEP, "no node with two ranks"},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(keys[i].key, key) == 0 && !(k->measured & (1u << keys[i].bit)))
            return keys[i].why;
    return NULL;
}

int train_gpt_calibrate_text(const options_t *o, const calib_t *k, char *buf, size_t len)
{
    char body[2048];
    int n = msr_plan_cluster_format(&k->c, body, sizeof body);
    if (n < 0 || (size_t)n >= sizeof body)
        return -1;
    size_t at = 0;
    char runs[64] = "";
    if (k->runs > 1)
        snprintf(runs, sizeof runs, "; each key the median of %d calibrations", k->runs);
    int w = snprintf(buf, len,
                     "# train_gpt --calibrate: %d rank%s, %d per node, %.1f s; kernels at layers "
                     "%" PRId64 " channels %" PRId64 " heads %" PRId64 " seq %" PRId64 ", %" PRId64
                     " rows; allreduce of %zu bytes%s\n"
                     "# a pass's matmuls and attention together: %.4g TFLOP/s\n",
                     k->ranks, k->ranks == 1 ? "" : "s", k->c.ranks_per_node, k->seconds, o->layers,
                     o->channels, o->heads, o->seq, k->rows, k->comm_bytes, runs, k->blend_tflops);
    if (w < 0 || (size_t)w >= len)
        return -1;
    at = (size_t)w;
    if (k->measured & (1u << CALIB_LEND)) {
        w = snprintf(buf + at, len - at,
                     "# %d of a node's ranks computing while the others wait: %.3g times as fast "
                     "as all at once (%d cores: %.3g at most)\n",
                     k->c.cores_per_node, k->lend_speedup, k->c.cores_per_node,
                     (double)k->c.ranks_per_node / k->c.cores_per_node);
        if (w < 0 || (size_t)w >= len - at)
            return -1;
        at += (size_t)w;
    }
    if (k->cold_n > 0) {
        w = snprintf(buf + at, len - at,
                     "# a micro-batch's forward and backward with the node's frames at (MiB: ms):");
        for (int i = 0; i < k->cold_n && w >= 0 && (size_t)w < len - at; i++) {
            at += (size_t)w;
            w = snprintf(buf + at, len - at, " %.4g: %.4g", k->cold_mib[i], k->cold_ms[i]);
        }
        if (w < 0 || (size_t)w >= len - at)
            return -1;
        at += (size_t)w;
        w = snprintf(buf + at, len - at, "\n");
        if (w < 0 || (size_t)w >= len - at)
            return -1;
        at += (size_t)w;
    }
    for (char *line = body, *next; *line != '\0'; line = next) {
        next = strchr(line, '\n');
        next = next != NULL ? next + 1 : line + strlen(line);
        char key[64];
        const char *why = NULL;
        if (sscanf(line, " %63[a-z_]", key) == 1)
            why = unmeasured_why(k, key);
        int ll = (int)(next - line);
        if (ll > 0 && line[ll - 1] == '\n')
            ll--;
        w = why != NULL
                ? snprintf(buf + at, len - at, "# %.*s  (not measured: %s)\n", ll, line, why)
                : snprintf(buf + at, len - at, "%.*s\n", ll, line);
        if (w < 0 || (size_t)w >= len - at)
            return -1;
        at += (size_t)w;
    }
    return (int)at;
}

void train_gpt_calibrate_summary(const calib_t *k, char *buf, size_t len)
{
    int n = snprintf(buf, len,
                     "calibrated %d rank%s in %.1f s: %.4g TFLOP/s, element-wise %.4g GB/s, a "
                     "kernel call %.3g us",
                     k->ranks, k->ranks == 1 ? "" : "s", k->seconds, k->c.peak_tflops, k->c.mem_gbs,
                     k->c.kernel_us);
    if (n >= 0 && (size_t)n < len && (k->measured & (1u << CALIB_LATENCY)))
        n += snprintf(buf + n, len - (size_t)n, ", latency %.3g us", k->c.latency_us);
    if (n >= 0 && (size_t)n < len && (k->measured & (1u << CALIB_INTRA)))
        n += snprintf(buf + n, len - (size_t)n, ", %.4g GB/s inside a node", k->c.intra_gbs);
    if (n >= 0 && (size_t)n < len && (k->measured & (1u << CALIB_INTER)))
        snprintf(buf + n, len - (size_t)n, ", %.4g GB/s between nodes", k->c.inter_gbs);
}

int train_gpt_calibrate_main(const options_t *o, const job_t *job)
{
    msr_comm_t *comm = NULL;
    FILE *f = NULL;
    int rc = 1, bad = 0;
    msr_status_t st;
    if (job->world > 1 && (st = msr_comm_world(job->ctx, &comm)) != MSR_OK) {
        fprintf(stderr, "train_gpt: cannot make the communicator: %s: %s\n", msr_status_str(st),
                msr_last_error());
        goto out;
    }
    /* the file first: a path that cannot be written stops every rank
     * before the measurement */
    if (job->rank == 0 && (f = fopen(o->calibrate, "w")) == NULL) {
        fprintf(stderr, "train_gpt: --calibrate %s: %s\n", o->calibrate, strerror(errno));
        bad = 1;
    }
    if (comm != NULL && (st = msr_comm_broadcast(comm, &bad, 1, MSR_DTYPE_I32, 0)) != MSR_OK) {
        fprintf(stderr, "train_gpt: --calibrate: %s: %s\n", msr_status_str(st), msr_last_error());
        goto out;
    }
    if (bad) {
        rc = EXIT_BAD_INPUT;
        goto out;
    }
    calib_t k;
    if (train_gpt_calibrate_runs(o, job, comm, &k) != 0)
        goto out;
    if (job->rank == 0) {
        char text[4096];
        int n = train_gpt_calibrate_text(o, &k, text, sizeof text);
        int bad_write = n < 0 || fwrite(text, 1, (size_t)n, f) != (size_t)n;
        int bad_close = fclose(f) != 0;
        f = NULL;
        if (bad_write || bad_close) {
            fprintf(stderr, "train_gpt: --calibrate %s: cannot write: %s\n", o->calibrate,
                    strerror(errno));
            remove(o->calibrate);
            goto out;
        }
        char line[512];
        train_gpt_calibrate_summary(&k, line, sizeof line);
        fprintf(stderr, "train_gpt: %s; wrote %s\n", line, o->calibrate);
    }
    rc = 0;
    /* nobody leaves while a peer may still be receiving its last message */
    if (comm != NULL && (st = msr_comm_barrier(comm)) != MSR_OK) {
        fprintf(stderr, "train_gpt: --calibrate: the final barrier: %s: %s\n", msr_status_str(st),
                msr_last_error());
        rc = 1;
    }
out:
    if (f != NULL) {
        fclose(f);
        remove(o->calibrate); /* no half-written cluster file */
    }
    msr_comm_destroy(comm);
    return rc;
}
