/* The planner's cluster description and time model (planner/plan.h,
 * docs/plan.md "Time model"). Pure arithmetic: no I/O, no allocation.
 *
 * A micro-batch's work on one rank is counted in three currencies and
 * priced by the cluster: matrix-product FLOPs at peak_tflops, element-wise
 * bytes at mem_gbs, kernel calls at kernel_us. Collectives are priced by the
 * algorithm the communicator picks for their size and group (comm/ucx/
 * coll.c: shared memory inside a node; recursive doubling for small and
 * the ring for large vectors across nodes), with latency_us per message and
 * intra_gbs or inter_gbs by where the group's ranks sit. The pipeline is
 * priced stage by stage, so an uneven split and the heavier end stages
 * count; data parallel's reduction is hidden behind the backward that
 * overlaps it, as parallel/dp.c's buckets are. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout.h"
#include "planner/plan.h"
#include "planner/plan_sim.h"

/* ---- the cluster ---- */

void msr_plan_cluster_default(msr_plan_cluster_t *c)
{
    /* Narayanan et al. (2021): DGX A100 80 GB nodes, 8 GPUs joined by
     * NVLink/NVSwitch (300 GB/s per GPU each way), 8 HDR InfiniBand
     * adapters per node (25 GB/s per GPU), 312 TFLOP/s bf16 peak per GPU,
     * HBM2e at about 2 TB/s. */
    c->ranks_per_node = 8;
    c->mem_gib = 80;
    c->peak_tflops = 312;
    c->intra_gbs = 300;
    c->inter_gbs = 25;
    c->latency_us = 5;
    c->mem_gbs = 2000;
    c->kernel_us = 5;
    c->cores_per_node = 0;
    c->act_gbs = 0;
    c->mm_rows = 0;
    c->mm_rows_half = 0;
    c->attn_tflops = 0;
    c->ring_tflops = 0;
    c->ring_chunk = 0;
    c->ring_chunk_half = 0;
    c->cold_ms_per_mib = 0;
    c->cold_from_mib = 0;
    c->cold_full_mib = 0;
    c->idle_lend = 1;
    c->ring_step_us = 0;
}

/* The cluster file's keys, in the order it is written: where each sits in
 * msr_plan_cluster_t, an int (a count) or a double; whether it may be 0
 * (its term off, or one rank per core) where the model never divides by
 * it; a double's largest value. */
#define REAL_MAX 1e12

typedef struct cluster_key {
    const char *name;
    size_t off;
    int is_int;
    int zero_ok;
    double max;
} cluster_key_t;

#define REAL(f, z)                                          \
    {                                                       \
#f, offsetof(msr_plan_cluster_t, f), 0, z, REAL_MAX \
    }
#define COUNT(f, z)                                        \
    {                                                      \
#f, offsetof(msr_plan_cluster_t, f), 1, z, 1 << 20 \
    }
static const cluster_key_t cluster_keys[] = {
    COUNT(ranks_per_node, 0),
    REAL(mem_gib, 0),
    REAL(peak_tflops, 0),
    REAL(intra_gbs, 0),
    REAL(inter_gbs, 0),
    REAL(latency_us, 1),
    REAL(mem_gbs, 1),
    REAL(kernel_us, 1),
    COUNT(cores_per_node, 1),
    REAL(act_gbs, 1),
    REAL(mm_rows, 1),
    REAL(mm_rows_half, 1),
    REAL(attn_tflops, 1),
    REAL(ring_tflops, 1),
    REAL(ring_chunk, 1),
    REAL(ring_chunk_half, 1),
    REAL(cold_ms_per_mib, 1),
    REAL(cold_from_mib, 1),
    REAL(cold_full_mib, 1),
    {"idle_lend", offsetof(msr_plan_cluster_t, idle_lend), 0, 1, 1}, /* a share */
    REAL(ring_step_us, 1),
};
#undef REAL
#undef COUNT
#define N_KEYS (sizeof cluster_keys / sizeof cluster_keys[0])

int msr_plan_cluster_real_key(size_t i, const char **name, size_t *offset)
{
    for (size_t k = 0; k < N_KEYS; k++) {
        if (cluster_keys[k].is_int)
            continue;
        if (i-- == 0) {
            *name = cluster_keys[k].name;
            *offset = cluster_keys[k].off;
            return 1;
        }
    }
    return 0;
}

__attribute__((format(printf, 4, 5))) static void set_why(char *why, size_t len, int line,
                                                          const char *fmt, ...)
{
    if (why == NULL || len == 0)
        return;
    int n = snprintf(why, len, "line %d: ", line);
    if (n >= 0 && (size_t)n < len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why + n, len - (size_t)n, fmt, ap);
        va_end(ap);
    }
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* "unknown key 'KEY' (every key, comma-separated)" after "line N: " */
static void unknown_key(char *why, size_t len, int line, const char *key)
{
    char list[512];
    size_t at = 0;
    list[0] = '\0';
    for (size_t k = 0; k < N_KEYS && at < sizeof list; k++) {
        int n = snprintf(list + at, sizeof list - at, "%s%s", k ? ", " : "", cluster_keys[k].name);
        if (n < 0)
            break;
        at += (size_t)n;
    }
    set_why(why, len, line, "unknown key '%s' (%s)", key, list);
}

int msr_plan_cluster_parse(const char *text, msr_plan_cluster_t *c, char *why, size_t why_len)
{
    msr_plan_cluster_t out = *c;
    int seen[N_KEYS] = {0};
    int line = 0;
    const char *p = text;
    while (*p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);
        line++;
        char buf[512];
        if (n >= sizeof buf) {
            set_why(why, why_len, line, "longer than 511 bytes");
            return -1;
        }
        memcpy(buf, p, n);
        buf[n] = '\0';
        p += n + (nl != NULL ? 1 : 0);
        char *hash = strchr(buf, '#');
        if (hash != NULL)
            *hash = '\0';
        char *s = trim(buf);
        if (*s == '\0')
            continue;
        char *eq = strchr(s, '=');
        if (eq == NULL) {
            set_why(why, why_len, line, "'%s' is not key = value", s);
            return -1;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        size_t k = 0;
        while (k < N_KEYS && strcmp(cluster_keys[k].name, key) != 0)
            k++;
        if (k == N_KEYS) {
            unknown_key(why, why_len, line, key);
            return -1;
        }
        const cluster_key_t *ck = &cluster_keys[k];
        if (seen[k]) {
            set_why(why, why_len, line, "'%s' given twice", key);
            return -1;
        }
        seen[k] = 1;
        char *end = NULL;
        double v = strtod(val, &end);
        if (end == val || *end != '\0' || !isfinite(v)) {
            set_why(why, why_len, line, "'%s' is not a number", val);
            return -1;
        }
        char *field = (char *)&out + ck->off;
        if (ck->is_int) {
            int lo = !ck->zero_ok;
            if (v < lo || v > ck->max || v != floor(v)) {
                set_why(why, why_len, line, "%s %s: not an integer in [%d, %.0f]", key, val, lo,
                        ck->max);
                return -1;
            }
            *(int *)field = (int)v;
            continue;
        }
        if (ck->max < REAL_MAX && v > ck->max) {
            set_why(why, why_len, line, "%s %s: a share, from 0 to %g", key, val, ck->max);
            return -1;
        }
        if (v < 0 || (v == 0 && !ck->zero_ok) || v > REAL_MAX) {
            set_why(why, why_len, line, "%s: must be %s (and at most 1e12)", key,
                    ck->zero_ok ? "0 or more" : "more than 0");
            return -1;
        }
        *(double *)field = v;
    }
    *c = out;
    return 0;
}

int msr_plan_cluster_format(const msr_plan_cluster_t *c, char *buf, size_t len)
{
    size_t at = 0;
    int total = 0;
    for (size_t k = 0; k < N_KEYS; k++) {
        const cluster_key_t *ck = &cluster_keys[k];
        const char *field = (const char *)c + ck->off;
        char *dst = at < len ? buf + at : NULL;
        size_t room = at < len ? len - at : 0;
        int n = ck->is_int ? snprintf(dst, room, "%s = %d\n", ck->name, *(const int *)field)
                           : snprintf(dst, room, "%s = %.6g\n", ck->name, *(const double *)field);
        if (n < 0)
            return n;
        total += n;
        at += (size_t)n;
    }
    return total;
}

/* ---- collectives ---- */

/* The communicator's size thresholds (comm/ucx/coll.c's defaults). */
#define RING_MIN   16384.0
#define RING_MIN_2 1048576.0

typedef struct net {
    double lat_ms; /* per message */
    double ms_per_byte;
    int shm; /* one node: the shared-memory algorithms */
} net_t;

static net_t net_of(const msr_plan_cluster_t *c, int intra)
{
    net_t n;
    n.lat_ms = c->latency_us / 1e3;
    n.ms_per_byte = 1.0 / ((intra ? c->intra_gbs : c->inter_gbs) * 1e6);
    n.shm = intra;
    return n;
}

/* allreduce of bytes over n ranks */
static double t_allreduce(const net_t *x, double bytes, int n)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    if (x->shm) /* each rank reduces its slice, then all copy the result out */
        return 2 * x->lat_ms + 2.0 * (n - 1) / n * bytes * x->ms_per_byte;
    double ring_min = n == 2 ? RING_MIN_2 : RING_MIN;
    double ring = 2.0 * (n - 1) * (x->lat_ms + bytes / n * x->ms_per_byte);
    if (bytes >= ring_min)
        return ring;
    return ceil(log2((double)n)) * (x->lat_ms + bytes * x->ms_per_byte);
}

/* reduce-scatter or allgather whose whole vector is bytes */
static double t_scatter(const net_t *x, double bytes, int n)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    if (x->shm)
        return x->lat_ms + (double)(n - 1) / n * bytes * x->ms_per_byte;
    return (n - 1) * (x->lat_ms + bytes / n * x->ms_per_byte);
}

/* alltoall of bytes per rank (each peer gets bytes / n): one send and
 * receive to each peer in turn (comm/ucx), or through shared memory */
static double t_alltoall(const net_t *x, double bytes, int n)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    if (x->shm)
        return x->lat_ms + 2.0 * (n - 1) / n * bytes * x->ms_per_byte;
    return (n - 1) * (x->lat_ms + bytes / n * x->ms_per_byte);
}

static double t_p2p(const net_t *x, double bytes)
{
    return bytes > 0 ? x->lat_ms + bytes * x->ms_per_byte : 0;
}

#define F32_BYTES 4.0 /* Adam's moments are fp32 at any precision */

/* ---- work ---- */

/* Work in the three currencies, priced by the cluster. */
typedef struct work {
    double flops, bytes, act, kernels; /* act: bytes of exp/tanh kernels */
    double aflops;                     /* attention's FLOPs (its own kernels) */
    double rflops;                     /* ring attention's (cp: block pairs) */
} work_t;

/* The rates of attention's FLOPs: the cluster's own, or the matrix
 * products' where it gives none. */
static double attn_rate(const msr_plan_cluster_t *c)
{
    return c->attn_tflops > 0 ? c->attn_tflops : c->peak_tflops;
}

static double ring_rate(const msr_plan_cluster_t *c)
{
    return c->ring_tflops > 0 ? c->ring_tflops : attn_rate(c);
}

static double price(const msr_plan_cluster_t *c, work_t w)
{
    double ms = w.flops / (c->peak_tflops * 1e9);
    ms += w.aflops / (attn_rate(c) * 1e9) + w.rflops / (ring_rate(c) * 1e9);
    if (c->mem_gbs > 0)
        ms += w.bytes / (c->mem_gbs * 1e6);
    double act = c->act_gbs > 0 ? c->act_gbs : c->mem_gbs;
    if (act > 0)
        ms += w.act / (act * 1e6);
    ms += w.kernels * c->kernel_us / 1e3;
    return ms;
}

/* What a matrix product of N rows costs per FLOP against the rate
 * peak_tflops was measured at (mm_rows rows): the rate on N rows is
 * N / (N + h) of the rate on many (h = mm_rows_half), as --calibrate fits
 * it; 1 where either key is 0. */
static double rows_cost(const msr_plan_cluster_t *c, double N)
{
    double h = c->mm_rows_half, N0 = c->mm_rows;
    if (h <= 0 || N0 <= 0 || N <= 0)
        return 1;
    return (N + h) / N * (N0 / (N0 + h));
}

/* The same for the ring's chunks of S positions against the ring_chunk
 * positions ring_tflops was measured at (h = ring_chunk_half). */
static double chunk_cost(const msr_plan_cluster_t *c, double S)
{
    double h = c->ring_chunk_half, S0 = c->ring_chunk;
    if (h <= 0 || S0 <= 0 || S <= 0)
        return 1;
    return (S + h) / S * (S0 / (S0 + h));
}

static work_t scale(work_t w, double k)
{
    w.flops *= k;
    w.aflops *= k;
    w.rflops *= k;
    w.bytes *= k;
    w.act *= k;
    w.kernels *= k;
    return w;
}

static work_t add(work_t a, work_t b)
{
    a.flops += b.flops;
    a.aflops += b.aflops;
    a.rflops += b.rflops;
    a.bytes += b.bytes;
    a.act += b.act;
    a.kernels += b.kernels;
    return a;
}

/* One micro-batch's forward on one rank, in parts the phases price. */
typedef struct pieces {
    work_t layer_f;     /* one block's forward */
    work_t attn_f;      /* of it, the attention core (what selective recomputes) */
    double layer_tp_ms; /* one block's tp collectives, forward (backward: the same) */
    double layer_ep_ms; /* one block's expert-parallel alltoalls, forward (backward: the same),
                         * averaged over the blocks as layer_f is */
    work_t attn_b_more; /* under cp: what the ring's backward computes beyond twice attn_f */
    work_t sel_f;       /* what selective recompute runs again, a block (averaged as
                         * layer_f is) */
    double ring_f_ms;   /* under cp: one block's exposed ring transfers, forward */
    double ring_b_ms;   /* and backward */
    work_t layer_sp;    /* under sp, its copies between sequence and rank order (each pass) */
    work_t embed_f, embed_b;
    double embed_tp_ms; /* forward; its backward has none */
    work_t head_f, head_b;
    double head_tp_f_ms, head_tp_b_ms;
    double model_flops_f; /* the whole model's forward FLOPs for one micro-batch (all ranks) */
    double act_bytes;     /* a stage boundary's activation (or its gradient), per micro-batch */
    double ring_cost;     /* under cp: the ring's FLOPs priced this many times (chunk_cost) */
    const double *cold;   /* per virtual stage j (chunk j / pp of pipeline rank j % pp),
                           * its frame's cold reads, ms a micro-batch; NULL: none */
} pieces_t;

/* The sizes a micro-batch's work is counted in, and its matrix products'
 * FLOPs (2 a multiply-add), each computed once. */
typedef struct shape {
    double eb; /* bytes an element */
    int cp;
    double t, b, T, C, NH, V, N, Nl, llama, F, KV;
    double qkv;       /* output width of the q, k, v projections */
    double mlp, mm;   /* a dense block's MLP, and all of a block's products */
    double E, K, cap; /* MoE: experts, top-k, an expert's capacity (0 without) */
    double rows;      /* MoE: the rows the experts take, N K if none drops */
    double moe_share; /* MoE: the share of the blocks that are MoE */
    double router, moe_mlp;
    double S, pairs, att; /* attention (under cp: the ring's chunks and pairs) */
} shape_t;

static void shape_of(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                     msr_plan_precision_t prec, shape_t *s)
{
    memset(s, 0, sizeof *s);
    s->eb = prec == MSR_PLAN_BF16 ? 2 : 4;
    /* under cp a rank works on its T/cp positions: everything but
     * attention scales with them */
    int cp = s->cp = msr_plan_cp(l);
    s->t = l->tp, s->b = l->micro_batch, s->T = m->seq / cp, s->C = m->channels, s->NH = m->heads;
    s->V = m->vocab, s->N = s->b * s->T, s->Nl = l->sp ? s->N / s->t : s->N;
    s->llama = m->arch == MSR_PLAN_LLAMA;
    s->F = s->llama ? m->ffn : 4 * s->C;
    s->KV = s->llama ? m->kv_heads : s->NH;
    s->qkv = s->C + 2 * s->C * s->KV / s->NH;
    double N = s->N, C = s->C;

    /* matrix products: q/k/v, the output projection, the MLP (SwiGLU: gate
     * and up, then down) */
    s->mlp = 2 * N * (s->llama ? 3 : 2) * C * s->F;
    s->mm = 2 * N * (C * s->qkv + C * C) + s->mlp;
    /* MoE (model/moe.h): in a MoE block the MLP becomes the router (N x
     * C x E) and the experts on the rows they take, N K if none drops, at
     * most E x capacity; with ep a rank computes its E / ep experts on the
     * rows every ep rank sends it, the same count on average; with tp each
     * tp rank routes the whole micro-batch alike (the router's work is not
     * split) and computes E / (ep tp) of the experts. A block's work is
     * averaged over the blocks (the layers a stage gets are priced alike) */
    if (m->experts > 0) {
        s->E = m->experts, s->K = m->top_k;
        s->cap = ceil(m->capacity_factor * N * s->K / s->E);
        s->rows = N * s->K < s->E * s->cap ? N * s->K : s->E * s->cap;
        s->moe_share = (double)(m->layers / m->moe_every) / m->layers;
        s->router = 2 * N * C * s->E;
        s->moe_mlp = s->mlp / N * s->rows;
        s->mm += s->moe_share * (s->moe_mlp - s->mlp);
    }
    /* attention: Q K^T and A V over the full T x T, per head (the
     * runtime's kernels skip nothing under the causal mask); under cp
     * the ring computes each (query chunk, key chunk) pair of S = T/(2 cp)
     * positions not above the diagonal in full: a rank's two chunks i and
     * 2 cp - 1 - i see 2 cp + 1 of them, and its backward runs five
     * products a pair where the forward runs two */
    s->S = m->seq / (2.0 * cp), s->pairs = 2.0 * cp + 1;
    s->att = cp > 1 ? 4 * s->b * s->pairs * s->S * s->S * C : 4 * s->b * s->T * s->T * C;
}

/* The attention core: its forward at attention's own rate, what selective
 * recompute runs again, and under cp the ring's exposed transfers. */
static void count_attention(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                            msr_plan_precision_t prec, const msr_plan_cluster_t *c,
                            const shape_t *s, pieces_t *p)
{
    int cp = s->cp;
    double heads_l = s->NH / s->t;
    /* at attention's own rate: the full kernel's, or under cp the ring's
     * block pairs' (smaller products, the online softmax's rescaling) */
    *(cp > 1 ? &p->attn_f.rflops : &p->attn_f.aflops) = s->att / s->t;
    /* shorter chunks (a larger cp) run the ring slower per FLOP: priced as
     * more FLOPs at ring_tflops, as the rows of the matmuls are */
    p->ring_cost = cp > 1 ? chunk_cost(c, s->S) : 1;
    p->attn_f.rflops *= p->ring_cost;
    /* the softmax inside the attention kernel is priced with it: the rate
     * --calibrate measures for attention is the whole kernel's */
    p->attn_f.kernels = 2 * s->b * heads_l * (cp > 1 ? s->pairs : 1) + 1; /* two products a head */
    /* selective recompute runs again what the memory model drops
     * (plan_mem.c): in train_gpt's runtime (GPT, fp32; parallel/mp.c
     * recompute) the attention kernel without cp (its probabilities) and
     * the GELU of the dense blocks; in the papers' accounting (Korthikanti
     * et al. 2022) the attention core alone, and under cp nothing (the
     * ring keeps no scores) */
    int runtime = m->arch == MSR_PLAN_GPT && prec == MSR_PLAN_FP32;
    if (cp == 1)
        p->sel_f = p->attn_f;
    if (runtime) {
        double dense = 1 - s->moe_share;
        p->sel_f.act += dense * s->eb * 2 * s->N * s->F / s->t;
        p->sel_f.kernels += dense;
    }
    if (cp > 1) {
        p->attn_b_more.rflops = 0.5 * p->attn_f.rflops;
        p->attn_b_more.kernels = s->b * heads_l * s->pairs;
        /* the ring (parallel/mp_cp.c): forward, cp - 1 K/V blocks (N, 2C/t)
         * each sent while a ring step's attention computes, exposed only
         * past it; backward, the same for the K/V blocks, and cp gradient
         * blocks of the same size, each sent after its step computes */
        net_t cpn = net_of(c, (int64_t)l->tp * cp <= c->ranks_per_node &&
                                  c->ranks_per_node % (l->tp * cp) == 0);
        double kv = t_p2p(&cpn, s->N * 2 * s->C / s->t * s->eb);
        double step_f = price(c, p->attn_f) / cp;
        double step_b = price(c, add(scale(p->attn_f, 2), p->attn_b_more)) / cp;
        /* and each step that waits (cp - 1 forward, cp backward) pays the
         * hand-off: the ranks of a node that share its cores meet there
         * (ring_step_us, --calibrate) */
        double hand = c->ring_step_us / 1e3;
        p->ring_f_ms = (cp - 1) * ((kv > step_f ? kv - step_f : 0) + hand);
        p->ring_b_ms = (cp - 1) * (kv > step_b ? kv - step_b : 0) + cp * (kv + hand);
    }
}

/* One block's forward beyond attention: its products (fewer rows than
 * --calibrate measured run slower per FLOP), the element-wise kernels,
 * MoE's routing and alltoalls, and the tp (or sp) collectives. */
static void count_layer(const msr_plan_layout_t *l, const msr_plan_cluster_t *c, const shape_t *s,
                        pieces_t *p)
{
    double eb = s->eb, t = s->t, N = s->N, Nl = s->Nl, C = s->C, F = s->F;
    /* the products of the blocks and the head have N rows (under sp too:
     * their input is gathered first), priced as more FLOPs at peak_tflops
     * (attention's products are per head and sequence: not scaled) */
    double rc = rows_cost(c, N);
    /* the experts' products run per block of one expert's rows from one
     * source rank (model/moe.c): rows / E of them on average, ep or not */
    double rc_e = s->E > 0 ? rows_cost(c, s->rows / s->E) : rc;
    p->layer_f = p->attn_f;
    p->layer_f.flops += rc * ((s->mm - s->moe_share * s->moe_mlp) / t + s->moe_share * s->router) +
                        rc_e * s->moe_share * s->moe_mlp / t;
    /* element-wise: two norms (read, write), two residual adds (two reads
     * and a write), the activation (GELU: read, write; SwiGLU: two reads
     * and a write), bias adds folded into the products */
    p->layer_f.bytes += eb * (2 * 2 * Nl * C + 2 * 3 * Nl * C);
    p->layer_f.act += eb * (s->llama ? 3 : 2) * N * F / t;
    p->layer_f.kernels += 2 + 4 + (s->llama ? 3 : 1) + 2;
    net_t tpn = net_of(c, l->tp <= c->ranks_per_node && c->ranks_per_node % l->tp == 0);
    if (s->E > 0) {
        /* a MoE block's activation runs on its rows; the router's softmax;
         * the dispatch and combine copy each row in and out (the capacity
         * buffers, E x capacity rows of C, zeroed first); the experts' two
         * products and GELU a kernel each an expert */
        double E = s->E, K = s->K, cap = s->cap, share = s->moe_share;
        int ep = msr_plan_ep(l);
        p->layer_f.act += share * eb * ((s->llama ? 3 : 2) * (s->rows - N) * F / t + 2 * N * E);
        p->layer_f.bytes += share * eb * ((4 * s->rows * C + 2 * E * cap * C) / t + N * K * C);
        p->layer_f.kernels += share * (3 * E / (ep * t) + 4);
        /* two alltoalls forward, two backward, of a tp rank's share of the
         * E x capacity rows (its experts' rows of every ep peer); under tp
         * the gates' gradients (N, K) summed over tp once in backward
         * (averaged over both passes here) */
        net_t epn = net_of(c, (int64_t)ep * l->tp * s->cp * l->pp <= c->ranks_per_node);
        p->layer_ep_ms = share * 2 * t_alltoall(&epn, E * cap * C * eb / t, ep);
        p->layer_ep_ms += share * 0.5 * t_allreduce(&tpn, N * K * eb, l->tp);
    }

    double act = N * C * eb;
    if (l->sp) { /* two allgathers in, two reduce-scatters out */
        p->layer_tp_ms = 2 * t_scatter(&tpn, act, l->tp) + 2 * t_scatter(&tpn, act, l->tp);
        /* each reorders the whole (b, T, C) between the runtime's sequence
         * order and the collective's rank-major blocks (parallel/mp_tp.c):
         * a read and a write of it */
        if (l->tp > 1) {
            p->layer_sp.bytes = 4 * 2 * act;
            p->layer_sp.kernels = 4;
        }
    } else
        p->layer_tp_ms = 2 * t_allreduce(&tpn, act, l->tp);
}

/* The embedding and the head, with their tp collectives. */
static void count_ends(const msr_plan_layout_t *l, const msr_plan_cluster_t *c, const shape_t *s,
                       pieces_t *p)
{
    double eb = s->eb, t = s->t, N = s->N, Nl = s->Nl, C = s->C, V = s->V, act = N * C * eb;
    net_t tpn = net_of(c, l->tp <= c->ranks_per_node && c->ranks_per_node % l->tp == 0);
    /* the embedding: gather rows (and positions) into the stream, and
     * scatter-add their gradients back */
    p->embed_f.bytes = eb * 3 * N * C;
    p->embed_f.kernels = 1;
    p->embed_b.bytes = eb * 3 * N * C;
    p->embed_b.kernels = 1;
    /* vocabulary-parallel: the partial rows are summed over tp */
    p->embed_tp_ms = l->sp ? t_scatter(&tpn, act, l->tp) : t_allreduce(&tpn, act, l->tp);

    /* the head: final norm, the logits of the rank's V/t, cross-entropy */
    p->head_f.flops = rows_cost(c, N) * 2 * N * C * V / t;
    p->head_f.bytes = eb * 2 * Nl * C;
    p->head_f.act = eb * 3 * N * V / t; /* cross-entropy's softmax */
    p->head_f.kernels = 3;
    p->head_b.flops = 2 * p->head_f.flops;
    p->head_b.bytes = eb * 3 * Nl * C;
    p->head_b.act = eb * 2 * N * V / t;
    p->head_b.kernels = 4;
    /* the loss's max and sum over the vocabulary shards, and under sp the
     * stream gathered in; backward: the input's gradient summed over tp */
    p->head_tp_f_ms =
        2 * t_allreduce(&tpn, N * 4, l->tp) + (l->sp ? t_scatter(&tpn, act, l->tp) : 0);
    p->head_tp_b_ms = l->sp ? t_scatter(&tpn, act, l->tp) : t_allreduce(&tpn, act, l->tp);
}

static void count_pieces(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                         msr_plan_precision_t prec, const msr_plan_cluster_t *c, pieces_t *p)
{
    shape_t s;
    shape_of(m, l, prec, &s);
    memset(p, 0, sizeof *p);
    p->model_flops_f =
        s.cp * (m->layers * (s.mm + s.moe_share * s.router + s.att) + 2 * s.N * s.C * s.V);
    count_attention(m, l, prec, c, &s, p);
    count_layer(l, c, &s, p);
    count_ends(l, c, &s, p);
    p->act_bytes = s.Nl * s.C * s.eb;
}

/* Which costs a pass counts: turning one off and pricing again tells how
 * much of the step it is. */
enum { WITH_TP = 1, WITH_PP = 2, WITH_RC = 4, WITH_CP = 8, WITH_EP = 16, WITH_COLD = 32 };
#define WITH_ALL 63

/* One micro-batch through a virtual stage: its forward's and backward's
 * compute at the cluster's rates (every rank busy) and their tp
 * collectives and exposed ring transfers (cp), in ms. */
typedef struct stage_cost {
    double fwd, bwd, tp_fwd, tp_bwd;
} stage_cost_t;

static stage_cost_t stage_cost(const pieces_t *p, const msr_plan_layout_t *l,
                               const msr_plan_cluster_t *c, int layers, int first, int last,
                               int with, double cold)
{
    work_t f = scale(p->layer_f, layers);
    work_t bw = scale(p->layer_f, 2 * layers); /* backward: both operands' gradients */
    bw = add(bw, scale(p->attn_b_more, layers));
    double tpf = layers * p->layer_tp_ms, tpb = layers * p->layer_tp_ms;
    double ringf = (with & WITH_CP) ? layers * p->ring_f_ms : 0;
    double ringb = (with & WITH_CP) ? layers * p->ring_b_ms : 0;
    if (with & WITH_EP) { /* never hidden: the experts wait for their rows */
        ringf += layers * p->layer_ep_ms;
        ringb += layers * p->layer_ep_ms;
    }
    f = add(f, scale(p->layer_sp, layers));
    bw = add(bw, scale(p->layer_sp, layers));
    if (with & WITH_RC) {
        if (l->recompute == MSR_PLAN_RC_SELECTIVE)
            bw = add(bw, scale(p->sel_f, layers));
        else if (l->recompute == MSR_PLAN_RC_FULL) {
            bw = add(bw, f);
            tpb += layers * p->layer_tp_ms;
            ringb += ringf; /* the ring (and the experts' exchanges) run again */
        }
    }
    if (first) {
        f = add(f, p->embed_f);
        bw = add(bw, p->embed_b);
        tpf += p->embed_tp_ms;
    }
    if (last) {
        f = add(f, p->head_f);
        bw = add(bw, p->head_b);
        tpf += p->head_tp_f_ms;
        tpb += p->head_tp_b_ms;
    }
    /* frames gone cold: the forward writes them, the backward reads them
     * back, each about half of it (docs/plan.md "Cold frames") */
    if (!(with & WITH_COLD))
        cold = 0;
    stage_cost_t sc = {price(c, f) + cold / 2, price(c, bw) + cold / 2, ringf, ringb};
    if (with & WITH_TP) {
        sc.tp_fwd += tpf;
        sc.tp_bwd += tpb;
    }
    return sc;
}

/* One micro-batch through virtual stage j of n, forward and backward, in ms. */
static double stage_ms(const pieces_t *p, const msr_plan_layout_t *l, const msr_plan_cluster_t *c,
                       int layers, int first, int last, int with, double speed, double cold)
{
    stage_cost_t sc = stage_cost(p, l, c, layers, first, last, with, cold);
    return (sc.fwd + sc.bwd) / speed + sc.tp_fwd + sc.tp_bwd;
}

static int split_at(const msr_plan_model_t *m, const msr_plan_layout_t *l, int n, int j)
{
    if (l->stage_layers != NULL)
        return l->stage_layers[j];
    /* the even split: [L j / n, L (j+1) / n) */
    return (int)((int64_t)m->layers * (j + 1) / n - (int64_t)m->layers * j / n);
}

/* The pipeline's time for the step's micro-batches: the slowest rank runs
 * all of them, the others' stages once each fill and drain it. With every
 * stage alike this is (m + p - 1) t for GPipe and 1F1B and (m + (p - 1) /
 * v) t interleaved (Narayanan et al. 2021, section 2.2). */
/* How much faster one rank computes when others of its node wait: the
 * cluster's rates are those of every rank busy at once (as --calibrate
 * measures them), and ranks sharing fewer cores than they are split the
 * cores among those that run, each waiting rank handing over idle_lend
 * of its share (as --calibrate measures it). */
static double idle_speedup(const msr_plan_cluster_t *c, int64_t world)
{
    int64_t on_node = world < c->ranks_per_node ? world : c->ranks_per_node;
    if (c->cores_per_node <= 0 || c->cores_per_node >= on_node)
        return 1;
    return 1 + c->idle_lend * ((double)on_node / c->cores_per_node - 1);
}

/* The pipeline's time for the step's micro-batches: the slowest rank runs
 * all of them, the others' stages once each fill and drain it. With every
 * stage alike this is (m + p - 1) t for GPipe and 1F1B and (m + (p - 1) /
 * v) t interleaved (Narayanan et al. 2021, section 2.2). Where a node's
 * ranks share fewer cores, a rank computes faster while others wait, so
 * this path is priced at that speed, and the node's total work over its
 * cores bounds the step from below: the bubble then costs only what the
 * cores cannot fill. */
/* Virtual stages a simulated pipeline may have (more: the closed form). */
#define MAX_SIM_STAGES 256

static double pipeline_ms(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                          const msr_plan_cluster_t *c, const pieces_t *p, int with, double *busy_p,
                          double *rank_bwd_p)
{
    int pp = l->pp, v = l->schedule == MSR_PLAN_INTERLEAVED ? l->chunks : 1, n = pp * v;
    int stage = l->tp * msr_plan_cp(l); /* the ranks of a pipeline stage */
    net_t ppn = net_of(c, (int64_t)l->pp * stage <= c->ranks_per_node &&
                              c->ranks_per_node % (l->pp * stage) == 0);
    double hop = (with & WITH_PP) ? t_p2p(&ppn, p->act_bytes) : 0;
    double speed = idle_speedup(c, (int64_t)l->dp * l->pp * stage);
    double all = 0, rmax = 0, rbwd = 0, work = 0;
    msr_plan_sim_stage_t sim_stage[MAX_SIM_STAGES];
    int sim = speed > 1 && n <= MAX_SIM_STAGES;
    for (int r = 0; r < pp; r++) {
        double rank = 0, bwd = 0, busy = 0;
        for (int k = 0; k < v; k++) {
            int j = k * pp + r;
            int first = j == 0, last = j == n - 1, layers = split_at(m, l, n, j);
            double sends = (last ? 0 : hop) + (first ? 0 : hop);
            double cold = p->cold != NULL ? p->cold[j] : 0;
            /* its sends: the output forward, the input's gradient back */
            double s = stage_ms(p, l, c, layers, first, last, with, speed, cold) + sends;
            if (sim) {
                stage_cost_t sc = stage_cost(p, l, c, layers, first, last, with, cold);
                sim_stage[j] = (msr_plan_sim_stage_t){sc.fwd / speed, sc.bwd / speed,
                                                      sc.tp_fwd + (last ? 0 : hop),
                                                      sc.tp_bwd + (first ? 0 : hop)};
            }
            rank += s;
            double alone = stage_ms(p, l, c, layers, first, last, with, 1, cold) + sends;
            busy += alone;
            bwd += alone * 2 / 3;
        }
        all += rank;
        work += l->micros * busy;
        if (rank > rmax) {
            rmax = rank;
            rbwd = bwd;
        }
    }
    double path = l->micros * rmax + (all - rmax) / v;
    double node = work / pp; /* every stage's ranks share a node alike */
    if (busy_p != NULL)
        *busy_p = l->micros * rmax > node ? l->micros * rmax : node;
    if (rank_bwd_p != NULL)
        *rank_bwd_p = rbwd;
    if (sim) {
        int64_t world = (int64_t)l->dp * l->pp * stage;
        double on_node = (double)(world < c->ranks_per_node ? world : c->ranks_per_node);
        /* the cores that give the computing ranks that speed-up at most */
        msr_plan_sim_t q = {pp, v, l->micros, l->schedule, on_node, on_node / speed, sim_stage};
        double t = msr_plan_sim_pipeline(&q);
        if (t >= 0)
            return t;
    }
    return path > node ? path : node;
}

/* Pipelines of more virtual stages than this price no cold frames. */
#define MAX_COLD_STAGES 2048

/* The share of a micro-batch's frames that go cold while the node holds
 * mib of memory at once: none up to cold_from_mib, all from
 * cold_full_mib, between by the log of the bytes (as --calibrate's
 * doubling counts of frames measure it). */
static double cold_share(const msr_plan_cluster_t *c, double mib)
{
    double a = c->cold_from_mib, b = c->cold_full_mib;
    if (c->cold_ms_per_mib <= 0 || mib <= a)
        return 0;
    if (b <= a || mib >= b)
        return 1;
    return a > 0 ? log(mib / a) / log(b / a) : mib / b;
}

/* Each virtual stage's frames gone cold, ms a micro-batch, into cold[j]:
 * its own chunk's frame (chunks of one rank differ where the layers do not
 * split evenly). Between a frame's forward and its backward the rank
 * touches the other frames the schedule holds, its state, work space and
 * shared memory, and the node's other ranks theirs: what the cache must
 * keep is every rank's whole memory at its peak (the memory model's
 * total; its activations alone left the rest out, and priced GPipe 2-9%
 * over 1F1B where the two measured alike), the node's ranks spread over
 * the stages alike. */
static void cold_frames(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                        msr_plan_precision_t prec, const msr_plan_cluster_t *c, double *cold)
{
    int cp = msr_plan_cp(l), n = l->pp * l->chunks;
    int64_t world = (int64_t)l->dp * l->tp * l->pp * cp;
    double on_node = (double)(world < c->ranks_per_node ? world : c->ranks_per_node);
    double held = 0;
    for (int s = 0; s < l->pp; s++) {
        msr_plan_rank_t r;
        msr_plan_rank(m, l, prec, s * l->tp * cp, &r);
        held += (double)r.total;
    }
    double share = cold_share(c, held / l->pp * on_node / 1048576.0);
    for (int j = 0; j < n; j++) {
        double bytes = (double)msr_plan_frame_bytes(m, l, prec, split_at(m, l, n, j), j == n - 1);
        cold[j] = share * bytes / 1048576.0 * c->cold_ms_per_mib;
    }
}

/* Data parallel's costs on pipeline stage s, ms a step. */
typedef struct stage_dp {
    double red, red_exposed; /* the gradients' reduction (ZeRO's packing in), exposed */
    double ag;               /* the parameters' allgather after the step (ZeRO 1-2) */
    double z3;               /* ZeRO-3's exposed gathers */
    double optim;            /* AdamW */
} stage_dp_t;

/* The gradient reduction, hidden behind the backward it overlaps
 * (rank_bwd, ms) except for the last bucket, which completes with
 * backward; the parameters' allgather after the step (ZeRO 1-2); ZeRO-3's
 * gathers; AdamW. Under cp the parameters are replicated over dp x cp, and
 * so reduced. */
static void stage_dp(const msr_plan_model_t *m, const msr_plan_layout_t *lp,
                     msr_plan_precision_t prec, const msr_plan_cluster_t *c, int s, double rank_bwd,
                     stage_dp_t *o)
{
    const msr_plan_layout_t l = *lp;
    double eb = prec == MSR_PLAN_BF16 ? 2 : 4;
    int cp = msr_plan_cp(&l);
    int64_t world = (int64_t)l.dp * l.tp * l.pp * cp;
    net_t dpn = net_of(c, world <= c->ranks_per_node);
    int nd = l.dp * cp;
    msr_plan_rank_t r;
    msr_plan_rank(m, &l, prec, s * l.tp * cp, &r);
    double G = (double)r.part_params * eb;
    double last_bucket = G < l.bucket_bytes ? G : (double)l.bucket_bytes;
    double red = 0, red_exposed = 0, ag = 0, z3 = 0;
    if (nd > 1) {
        /* stages 2-3 reduce every micro-batch's gradients */
        double per = l.zero == 0 ? t_allreduce(&dpn, G, nd) : t_scatter(&dpn, G, nd);
        double tail =
            l.zero == 0 ? t_allreduce(&dpn, last_bucket, nd) : t_scatter(&dpn, last_bucket, nd);
        double times = l.zero >= 2 ? l.micros : 1;
        double hide = rank_bwd * (1 - (double)l.first_bucket_bytes / (G > 0 ? G : 1));
        if (hide < 0)
            hide = 0;
        double exposed = per - hide > tail ? per - hide : tail;
        red = times * per;
        red_exposed = times * exposed;
        if (l.zero == 1 || l.zero == 2)
            ag = t_scatter(&dpn, G, nd);
        if (l.zero == 3) {
            /* each micro-batch gathers every segment forward and again
             * backward; the next segment's gather is prefetched behind
             * the current one's compute */
            double gather = 2 * t_scatter(&dpn, G, nd);
            double comp = rank_bwd * 1.5;
            double e = gather - comp > gather / (2.0 * (m->layers + 2))
                           ? gather - comp
                           : gather / (2.0 * (m->layers + 2));
            z3 = l.micros * e;
        }
    }
    /* ZeRO packs buckets in dp rank-major blocks and unpacks them
     * (dp 1 too): stage 1 once a step (the gradients in, the
     * parameters back), stages 2-3 each micro-batch's segment
     * gradients into buckets, then into the shard */
    if (l.zero >= 1) {
        double packs = l.zero == 1 ? 4 : 2.0 * l.micros + 2;
        work_t pack = {0, packs * G, 0, 0};
        double t = price(c, pack);
        red += t;
        red_exposed += t;
    }
    /* the experts' gradients, summed after backward over the dp / ep
     * ranks holding the same experts (parallel/train.c experts_reduce:
     * an allreduce, or under ZeRO a reduce-scatter and the parameters'
     * allgather after the update), exposed */
    int reps = l.dp / msr_plan_ep(&l);
    double EG = (double)r.expert_grads; /* bytes at the precision's width */
    if (reps > 1 && EG > 0) {
        double e = l.zero == 0 ? t_allreduce(&dpn, EG, reps) : 2 * t_scatter(&dpn, EG, reps);
        red += e;
        red_exposed += e;
    }
    double elems = (double)(l.zero >= 1 ? r.shard_elems : r.part_params) +
                   (double)r.expert_optim / (2 * F32_BYTES);
    /* AdamW reads the gradient, both moments and the weights (and
     * under bf16 the fp32 master), and writes all but the gradient */
    work_t opt = {0, elems * (prec == MSR_PLAN_BF16 ? 34 : 28), 0, 1};
    o->red = red;
    o->red_exposed = red_exposed;
    o->ag = ag;
    o->z3 = z3;
    o->optim = price(c, opt);
}

void msr_plan_time(const msr_plan_model_t *m, const msr_plan_layout_t *lay,
                   msr_plan_precision_t prec, const msr_plan_cluster_t *c, msr_plan_time_t *out)
{
    msr_plan_layout_t l = *lay;
    if (l.schedule != MSR_PLAN_INTERLEAVED)
        l.chunks = 1;
    msr_layout_bucket_defaults(&l.bucket_bytes, &l.first_bucket_bytes);
    memset(out, 0, sizeof *out);
    pieces_t p;
    count_pieces(m, &l, prec, c, &p);
    double eb = prec == MSR_PLAN_BF16 ? 2 : 4;
    double cold[MAX_COLD_STAGES];
    if (c->cold_ms_per_mib > 0 && l.pp * l.chunks <= MAX_COLD_STAGES) {
        cold_frames(m, &l, prec, c, cold);
        p.cold = cold;
    }

    /* FLOPs of the step, recompute included (as the literature reports
     * achieved TFLOP/s: Narayanan et al. count full recompute's forward) */
    double fwd = p.model_flops_f;
    int cp = msr_plan_cp(&l);
    double rc = l.recompute == MSR_PLAN_RC_FULL
                    ? fwd - 2 * (double)l.micro_batch * m->seq * m->channels * m->vocab
                : l.recompute == MSR_PLAN_RC_SELECTIVE && cp == 1
                    ? m->layers * 4.0 * l.micro_batch * m->seq * m->seq * m->channels
                    : 0;
    double micros_all = (double)l.dp * l.micros;
    /* the ring's backward: five products a chunk pair, not four */
    double ring_b = cp * m->layers * p.attn_b_more.rflops / p.ring_cost * l.tp;
    out->flops = micros_all * (3 * fwd + rc + ring_b);

    /* the pipeline, and what each cost adds to it */
    double busy = 0, rank_bwd = 0;
    double pipe = pipeline_ms(m, &l, c, &p, WITH_ALL, &busy, &rank_bwd);
    double no_tp = pipeline_ms(m, &l, c, &p, WITH_ALL & ~WITH_TP, NULL, NULL);
    double no_pp = pipeline_ms(m, &l, c, &p, WITH_ALL & ~WITH_PP, NULL, NULL);
    double no_rc = pipeline_ms(m, &l, c, &p, WITH_ALL & ~WITH_RC, NULL, NULL);
    double no_cp = pipeline_ms(m, &l, c, &p, WITH_ALL & ~WITH_CP, NULL, NULL);
    double no_ep = pipeline_ms(m, &l, c, &p, WITH_ALL & ~WITH_EP, NULL, NULL);
    out->ep_comm_ms = pipe - no_ep;
    /* the pass without cold frames only where any are priced: the search
     * prices every plan, and most clusters have none */
    out->cold_ms =
        p.cold != NULL ? pipe - pipeline_ms(m, &l, c, &p, WITH_ALL & ~WITH_COLD, NULL, NULL) : 0;
    double bare = pipeline_ms(m, &l, c, &p, 0, NULL, NULL);
    out->cp_comm_ms = pipe - no_cp;
    out->tp_comm_ms = pipe - no_tp;
    out->pp_comm_ms = pipe - no_pp;
    out->recompute_ms = pipe - no_rc;
    out->compute_ms = bare;
    out->bubble_ms = pipe - busy;
    out->layer_ms = stage_ms(&p, &l, c, 1, 0, 0, WITH_TP | WITH_RC | WITH_CP | WITH_EP, 1, 0);
    out->first_ms = stage_ms(&p, &l, c, 0, 1, 0, WITH_TP | WITH_RC | WITH_CP | WITH_EP, 1, 0);
    out->last_ms = stage_ms(&p, &l, c, 0, 0, 1, WITH_TP | WITH_RC | WITH_CP | WITH_EP, 1, 0);

    /* the tied head's wte crosses the pipeline twice a step (the last
     * stage's copy in, its gradient back) */
    double tied = 0;
    net_t ppn = net_of(c, (int64_t)l.pp * l.tp * cp <= c->ranks_per_node &&
                              c->ranks_per_node % (l.pp * l.tp * cp) == 0);
    if (l.pp > 1 && m->arch == MSR_PLAN_GPT)
        tied = 2 * t_p2p(&ppn, (double)m->vocab / l.tp * m->channels * eb);
    out->pp_comm_ms += tied;

    /* data parallel, per pipeline stage: the slowest decides */
    double worst = 0;
    for (int s = 0; s < l.pp; s++) {
        stage_dp_t d;
        stage_dp(m, &l, prec, c, s, rank_bwd, &d);
        double cost = d.red_exposed + d.ag + d.z3 + d.optim;
        if (s == 0 || cost > worst) {
            worst = cost;
            out->dp_comm_ms = d.red + d.ag;
            out->dp_exposed_ms = d.red_exposed + d.ag;
            out->zero3_ms = d.z3;
            out->optim_ms = d.optim;
        }
    }
    out->exposed_comm_ms = out->tp_comm_ms + out->cp_comm_ms + out->ep_comm_ms + out->pp_comm_ms +
                           out->dp_exposed_ms + out->zero3_ms;
    out->step_ms = pipe + tied + worst;
    out->tokens_per_s =
        out->step_ms > 0 ? micros_all * l.micro_batch * m->seq / (out->step_ms / 1e3) : 0;
}
