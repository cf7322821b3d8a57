/* The time model's prices (docs/plan.md "Time model"): collectives by the
 * algorithm the communicator picks for their size and group, work in its
 * three currencies at the cluster's rates, and one micro-batch's forward
 * on one rank counted in the pieces the pipeline's phases price (a block,
 * its attention core, what recompute runs again, the ring, the embedding
 * and the head). plan_time.c prices the stages and the step from them. */
#include <math.h>
#include <string.h>

#include "layout/layout.h"
#include "planner/plan.h"
#include "planner/plan_time_impl.h"

/* ---- collectives ---- */

/* The communicator's size thresholds (comm/ucx/coll.c's defaults). */
#define RING_MIN   16384.0
#define RING_MIN_2 1048576.0

msr_plan_net_t msr_plan_net_of(const msr_plan_cluster_t *c, int intra)
{
    msr_plan_net_t n;
    n.lat_ms = c->latency_us / 1e3;
    n.ms_per_byte = 1.0 / ((intra ? c->intra_gbs : c->inter_gbs) * 1e6);
    n.shm = intra;
    return n;
}

/* allreduce of bytes over n ranks */
double msr_plan_t_allreduce(const msr_plan_net_t *x, double bytes, int n)
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
double msr_plan_t_scatter(const msr_plan_net_t *x, double bytes, int n)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    if (x->shm)
        return x->lat_ms + (double)(n - 1) / n * bytes * x->ms_per_byte;
    return (n - 1) * (x->lat_ms + bytes / n * x->ms_per_byte);
}

/* alltoall of bytes per rank (each peer gets bytes / n): one send and
 * receive to each peer in turn (comm/ucx), or through shared memory */
static double t_alltoall(const msr_plan_net_t *x, double bytes, int n)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    if (x->shm)
        return x->lat_ms + 2.0 * (n - 1) / n * bytes * x->ms_per_byte;
    return (n - 1) * (x->lat_ms + bytes / n * x->ms_per_byte);
}

double msr_plan_t_p2p(const msr_plan_net_t *x, double bytes)
{
    return bytes > 0 ? x->lat_ms + bytes * x->ms_per_byte : 0;
}

/* ---- work ---- */

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

double msr_plan_price(const msr_plan_cluster_t *c, msr_plan_work_t w)
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

msr_plan_work_t msr_plan_work_scale(msr_plan_work_t w, double k)
{
    w.flops *= k;
    w.aflops *= k;
    w.rflops *= k;
    w.bytes *= k;
    w.act *= k;
    w.kernels *= k;
    return w;
}

msr_plan_work_t msr_plan_work_add(msr_plan_work_t a, msr_plan_work_t b)
{
    a.flops += b.flops;
    a.aflops += b.aflops;
    a.rflops += b.rflops;
    a.bytes += b.bytes;
    a.act += b.act;
    a.kernels += b.kernels;
    return a;
}

/* The sizes a micro-batch's work is counted in, and its matrix products'
 * FLOPs (2 a multiply-add), each computed once. */
typedef struct shape {
    double eb; /* bytes an element */
    int cp;
    double t, b, T, C, NH, V, N, Nl, llama, F, KV;
    double qkv;       /* output width of the q, k, v projections */
    double kvl;       /* a rank's k (and v) width: its kv heads' (C/t for a GPT) */
    double kv_rep;    /* a rank's FLOPs beyond its share: replicated kv heads' k and v */
    double mlp, mm;   /* a dense block's MLP, and all of a block's products */
    double E, K, cap; /* MoE: experts, top-k, an expert's block in the exchanges: its
                       * capacity, under cp at most the rank's N (0 without) */
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
    /* fewer kv heads than tp (model/gpt.h): every rank projects one kv
     * head's k and v, a head's width where its share is K/t of one */
    s->kvl = msr_plan_kv_heads_local(m, l->tp) * (C / s->NH);
    if (s->llama && m->kv_heads < l->tp)
        s->kv_rep = 2 * N * C * 2 * (s->kvl - C * s->KV / s->NH / s->t);

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
        /* the runtime's dims (layout/layout.h): under cp the capacity is
         * the micro-batch's cp N tokens', counted as one process counts
         * it, and an expert's block in the exchanges min(cap, N) rows; a
         * rank keeps its share, cap / cp an expert on average */
        msr_layout_moe_dims_t d = msr_layout_moe_dims_cp(
            (uint64_t)N, (uint64_t)cp, (uint64_t)m->experts, (uint64_t)m->top_k, m->capacity_factor,
            (uint64_t)C, (uint64_t)s->F);
        s->cap = (double)d.stride;
        double kept = s->E * fmin((double)d.cap / cp, s->cap);
        s->rows = N * s->K < kept ? N * s->K : kept;
        s->moe_share = (double)(m->layers / m->moe_every) / m->layers;
        s->router = 2 * N * C * s->E;
        s->moe_mlp = s->mlp / N * s->rows;
        s->mm += s->moe_share * (s->moe_mlp - s->mlp);
    }
    /* attention: Q K^T and A V over the full T x T, per head (a bound:
     * the runtime's kernels skip the masked triangle's blocks of 64 rows,
     * model/layers_impl.h); under cp
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
                            const shape_t *s, msr_plan_pieces_t *p)
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
     * (plan_acts.c, plan_paper.c): in train_gpt's runtime (fp32; parallel/mp.c
     * recompute) the attention kernel without cp (its probabilities) and
     * the GELU of the dense blocks (a Llama's silu(gate) * up); in the
     * papers' accounting (Korthikanti et al. 2022) the attention core
     * alone, and under cp nothing (the ring keeps no scores) */
    int runtime = msr_plan_is_runtime(m, prec);
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
        /* the ring (parallel/mp_cp.c): forward, cp - 1 K/V blocks (N, 2C/t;
         * a Llama's (N, 2 kvl), its kv heads) each sent while a ring
         * step's attention computes, exposed only past it; backward, the
         * same for the K/V blocks, and cp gradient blocks of the same
         * size, each sent after its step computes */
        msr_plan_net_t cpn = msr_plan_net_of(c, (int64_t)l->tp * cp <= c->ranks_per_node &&
                                                    c->ranks_per_node % (l->tp * cp) == 0);
        double kv = msr_plan_t_p2p(&cpn, s->N * 2 * s->kvl * s->eb);
        /* with fewer kv heads than query heads a rank repeats a pair's key
         * chunk's heads into (S, 2C/t) forward (read 2 kvl, write 2C/t
         * a row); backward repeats them again, clears their gradients
         * and sums those back: 2 kvl + 2C/t a row beyond twice forward */
        if (s->llama && s->kvl < s->C / s->t) {
            double rows = s->b * s->pairs * s->S, w = 2 * s->kvl + 2 * s->C / s->t;
            p->attn_f.bytes += s->eb * rows * w;
            p->attn_b_more.bytes += s->eb * rows * w;
        }
        double step_f = msr_plan_price(c, p->attn_f) / cp;
        double step_b = msr_plan_price(c, msr_plan_work_add(msr_plan_work_scale(p->attn_f, 2),
                                                            p->attn_b_more)) /
                        cp;
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
                        msr_plan_pieces_t *p)
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
    p->layer_f.flops +=
        rc * ((s->mm - s->moe_share * s->moe_mlp) / t + s->moe_share * s->router + s->kv_rep) +
        rc_e * s->moe_share * s->moe_mlp / t;
    /* element-wise: two norms (read, write), two residual adds (two reads
     * and a write), the activation (GELU: read, write; SwiGLU: two reads
     * and a write), bias adds folded into the products */
    p->layer_f.bytes += eb * (2 * 2 * Nl * C + 2 * 3 * Nl * C);
    p->layer_f.act += eb * (s->llama ? 3 : 2) * N * F / t;
    /* a Llama turns its q and k heads by their positions in place (a read
     * and a write), at the activations' rate: its angles' sines and
     * cosines, as --calibrate times it */
    if (s->llama)
        p->layer_f.act += eb * 2 * N * (C / t + s->kvl);
    p->layer_f.kernels += 2 + 4 + (s->llama ? 3 : 1) + 2;
    msr_plan_net_t tpn =
        msr_plan_net_of(c, l->tp <= c->ranks_per_node && c->ranks_per_node % l->tp == 0);
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
        msr_plan_net_t epn =
            msr_plan_net_of(c, (int64_t)ep * l->tp * s->cp * l->pp <= c->ranks_per_node);
        p->layer_ep_ms = share * 2 * t_alltoall(&epn, E * cap * C * eb / t, ep);
        p->layer_ep_ms += share * 0.5 * msr_plan_t_allreduce(&tpn, N * K * eb, l->tp);
        /* under cp each rank routes its own tokens, then gathers the
         * group's choices (N K int32 a rank) to count the capacity as one
         * process, and sums the router's means (E doubles) for the
         * load-balancing loss, forward only (model/moe.h) */
        if (s->cp > 1) {
            msr_plan_net_t cpn = msr_plan_net_of(c, (int64_t)l->tp * s->cp <= c->ranks_per_node &&
                                                        c->ranks_per_node % (l->tp * s->cp) == 0);
            p->layer_moe_cp_ms = share * (msr_plan_t_scatter(&cpn, s->cp * N * K * 4.0, s->cp) +
                                          msr_plan_t_allreduce(&cpn, 8.0 * E, s->cp));
        }
    }

    double act = N * C * eb;
    if (l->sp) { /* two allgathers in, two reduce-scatters out */
        p->layer_tp_ms =
            2 * msr_plan_t_scatter(&tpn, act, l->tp) + 2 * msr_plan_t_scatter(&tpn, act, l->tp);
        p->layer_tp_half_ms = msr_plan_t_scatter(&tpn, act / 2, l->tp);
        /* each reorders the whole (b, T, C) between the runtime's sequence
         * order and the collective's rank-major blocks (parallel/mp_tp.c):
         * a read and a write of it */
        if (l->tp > 1) {
            p->layer_sp.bytes = 4 * 2 * act;
            p->layer_sp.kernels = 4;
        }
    } else {
        p->layer_tp_ms = 2 * msr_plan_t_allreduce(&tpn, act, l->tp);
        p->layer_tp_half_ms = msr_plan_t_allreduce(&tpn, act / 2, l->tp);
    }
}

/* The embedding and the head, with their tp collectives. */
static void count_ends(const msr_plan_layout_t *l, const msr_plan_cluster_t *c, const shape_t *s,
                       msr_plan_pieces_t *p)
{
    double eb = s->eb, t = s->t, N = s->N, Nl = s->Nl, C = s->C, V = s->V, act = N * C * eb;
    msr_plan_net_t tpn =
        msr_plan_net_of(c, l->tp <= c->ranks_per_node && c->ranks_per_node % l->tp == 0);
    /* the embedding: gather rows (and positions) into the stream, and
     * scatter-add their gradients back */
    p->embed_f.bytes = eb * 3 * N * C;
    p->embed_f.kernels = 1;
    p->embed_b.bytes = eb * 3 * N * C;
    p->embed_b.kernels = 1;
    /* vocabulary-parallel: the partial rows are summed over tp */
    p->embed_tp_ms =
        l->sp ? msr_plan_t_scatter(&tpn, act, l->tp) : msr_plan_t_allreduce(&tpn, act, l->tp);

    /* the head: final norm, the logits of the rank's V/t, cross-entropy */
    p->head_f.flops = rows_cost(c, N) * 2 * N * C * V / t;
    p->head_f.bytes = eb * 2 * Nl * C;
    p->head_f.act = eb * 3 * N * V / t; /* cross-entropy's softmax */
    p->head_f.kernels = 3;
    p->head_b.flops = 2 * p->head_f.flops;
    p->head_b.bytes = eb * 3 * Nl * C;
    p->head_b.act = eb * 2 * N * V / t;
    p->head_b.kernels = 4;
    memset(&p->head_rc, 0, sizeof p->head_rc);
    if (l->head_chunk > 0) {
        /* chunked (parallel/mp_head.c): the backward computes the logits
         * again (a recompute: each chunk's product, its logits written),
         * and each chunk is its own kernels (forward: product, maximum,
         * exponentials, fold; backward: the product again, then
         * exponentials, scale, zero, gradient, product's backward) */
        double chunks = ceil(V / t / (double)l->head_chunk);
        p->head_rc.flops = p->head_f.flops;
        p->head_rc.act = eb * N * V / t;
        p->head_rc.kernels = chunks;
        p->head_b.act += eb * N * V / t;
        p->head_f.kernels = 1 + 4 * chunks + 1;
        p->head_b.kernels = 1 + 5 * chunks;
    }
    /* the loss's max and sum over the vocabulary shards, and under sp the
     * stream gathered in; backward: the input's gradient summed over tp */
    p->head_tp_f_ms = 2 * msr_plan_t_allreduce(&tpn, N * 4, l->tp) +
                      (l->sp ? msr_plan_t_scatter(&tpn, act, l->tp) : 0);
    p->head_tp_b_ms =
        l->sp ? msr_plan_t_scatter(&tpn, act, l->tp) : msr_plan_t_allreduce(&tpn, act, l->tp);
}

void msr_plan_count_pieces(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                           msr_plan_precision_t prec, const msr_plan_cluster_t *c,
                           msr_plan_pieces_t *p)
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
