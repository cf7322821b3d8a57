/* The MoE layer's forward and backward (see moe.h): the router and its
 * top-k choice, capacity, the dispatch and combine alltoalls over expert
 * parallel, the experts' MLPs on the filled rows, and the gradients of
 * all of these. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "model/err_call.h"
#include "model/kernels.h"
#include "model/layers.h"
#include "model/moe_impl.h"

/* Expert e's tensors inside an experts base: a GPT-2 MLP's, or a Llama's
 * SwiGLU MLP's, fcw = w1 | w3 (2H, C) and fcprojw = w2 (C, H), no biases
 * (NULL). */
typedef struct expert {
    float *fcw, *fcb, *fcprojw, *fcprojb;
} expert_t;

static expert_t expert_point(const msr_moe_t *moe, float *base, int e)
{
    size_t C = (size_t)moe->C, H = (size_t)moe->H, HF = (size_t)moe->HF, glu = moe->glu != 0;
    float *x = base + (size_t)e * (HF * C + C * H + (glu ? 0 : H + C));
    expert_t x_p = {NULL, NULL, NULL, NULL};
    x_p.fcw = x, x += HF * C;
    if (!glu)
        x_p.fcb = x, x += H;
    x_p.fcprojw = x, x += C * H;
    if (!glu)
        x_p.fcprojb = x;
    return x_p;
}

/* Block l's slot of the selected frame: l is the (i+1)-th MoE block when
 * l + 1 = (i + 1) * every (block 0's for all under a shared layout). */
static moe_slot_t *slot_of(msr_moe_t *moe, int l)
{
    int i = moe->shared ? 0 : (l + 1) / moe->every - 1;
    return &moe->slots[i * moe->frames + moe->frame];
}

/* The row block of expert e in the dispatch buffer, -1 when another tp
 * rank computes it: the blocks go ep rank by ep rank, each with the El
 * experts this tp rank computes there, so that one alltoall of El * cap
 * rows per peer carries them (at tp 1: e itself). */
static int row_block(const msr_moe_t *moe, int e)
{
    int per = moe->E / moe->ep, p = e / per, le = e % per - moe->tp_rank * moe->El;
    return le >= 0 && le < moe->El ? p * moe->El + le : -1;
}

/* The blocks of the dispatch buffer: ep * El. */
static int row_blocks(const msr_moe_t *moe)
{
    return moe->ep * moe->El;
}

static void span(msr_moe_t *moe, const char *what, uint64_t a)
{
    if (moe->span != NULL)
        moe->span(moe->span_arg, what, a, msr_now_ns());
}

/* The device's status of a copy or memset queued (or of its sync), with
 * what it was for in the text; MSR_OK unchanged. */
static msr_status_t dev_check(const msr_moe_t *moe, msr_status_t st, const char *what)
{
    if (st != MSR_OK)
        return msr_err_call(st, "moe: device %s: %s", msr_device_name(moe->dev), what);
    return MSR_OK;
}

/* Zeroes n floats of the state's device memory at p and syncs, so that
 * the host (the experts' kernels) may write there next. */
static msr_status_t dev_zero(const msr_moe_t *moe, float *p, size_t n, const char *what)
{
    msr_status_t st = msr_device_memset(moe->dev, p, 0, n * sizeof(float), NULL);
    if (st == MSR_OK)
        st = msr_device_stream_sync(moe->dev, NULL);
    return dev_check(moe, st, what);
}

/* Sends each rank its block of rows (El experts x cap rows x C) of src
 * and receives the blocks the ranks send here into dst: the dispatch and
 * the combine, both ways. At ep 1 a copy. */
static msr_status_t exchange(msr_moe_t *moe, const float *src, float *dst, int cap, int C,
                             const char *what)
{
    size_t n = (size_t)row_blocks(moe) * (size_t)cap * (size_t)C;
    if (moe->ep_comm == NULL) { /* synced: the host reads it next */
        msr_status_t st =
            msr_device_copy(moe->dev, dst, src, n * sizeof(float), MSR_DEVICE_D2D, NULL);
        if (st == MSR_OK)
            st = msr_device_stream_sync(moe->dev, NULL);
        return dev_check(moe, st, what);
    }
    uint64_t a = msr_now_ns();
    msr_status_t st = msr_comm_alltoall(moe->ep_comm, src, dst, n / (size_t)moe->ep, MSR_DTYPE_F32);
    span(moe, what, a);
    if (st != MSR_OK)
        return msr_err_call(st, "moe: the alltoall of %zu floats over ep %d (%s)", n, moe->ep,
                            what);
    return MSR_OK;
}

/* The dispatch's counts: each rank sends the rows it filled at each
 * row block (count, ep * El) and gets, in used, those of expert-side block
 * b = (source rank, local expert), so the experts run on filled rows only. */
static msr_status_t exchange_counts(msr_moe_t *moe, const int *count, int *used)
{
    if (moe->ep_comm == NULL) {
        memcpy(used, count, (size_t)row_blocks(moe) * sizeof *used);
        return MSR_OK;
    }
    uint64_t a = msr_now_ns();
    msr_status_t st =
        msr_comm_alltoall(moe->ep_comm, count, used, (uint64_t)moe->El, MSR_DTYPE_I32);
    span(moe, "moe counts", a);
    if (st != MSR_OK)
        return msr_err_call(st, "moe: the alltoall of the dispatch's counts over ep %d", moe->ep);
    return MSR_OK;
}

/* The local expert (its index among this rank's) of expert-side block b
 * (source rank p, local expert le = b % El): rows [b * cap, (b + 1) *
 * cap). */
static int block_expert(const msr_moe_t *moe, int b)
{
    return b % moe->El;
}

/* The router: probs, each token's top K and the counts of the choices. */
static void route(msr_moe_t *moe, moe_slot_t *s, const float *routerw, const float *x, int N)
{
    const msr_kernels_t *k = msr_kernels_or_cpu(moe->kernels);
    k->matmul_forward(moe->prod, s->probs, x, routerw, NULL, N, moe->C, moe->E);
    /* Mixtral: the K gates renormalised, a softmax over the K logits */
    k->moe_route(s->probs, s->choice, s->gate, N, moe->E, moe->K, moe->glu);
}

/* Where token g of one process's order (sequence, then position) lives
 * under cp: its rank and its index there (rank r holds chunks r and
 * 2 cp - 1 - r of each sequence, moe.h). At cp 1: here, g. */
static int token_home(const msr_moe_t *moe, int g, int *r_p)
{
    int cp = moe->cp;
    if (cp == 1) {
        *r_p = 0;
        return g;
    }
    int Tc = moe->cp_seq, chunk = Tc / 2, T = cp * Tc;
    int b = g / T, c = g % T / chunk, i = g % chunk;
    *r_p = c < cp ? c : 2 * cp - 1 - c;
    return b * Tc + (c < cp ? 0 : chunk) + i;
}

/* Under cp: the group's choices, by cp rank, into moe->gchoice. */
static msr_status_t gather_choices(msr_moe_t *moe, const moe_slot_t *s, int N)
{
    size_t n = (size_t)N * (size_t)moe->K;
    memcpy(moe->gchoice + (size_t)moe->cp_rank * n, s->choice, n * sizeof(int)); /* the host's */
    uint64_t a = msr_now_ns();
    msr_status_t st =
        msr_comm_allgather(moe->cp_comm, MSR_IN_PLACE, moe->gchoice, n, MSR_DTYPE_I32);
    span(moe, "moe cp choices", a);
    if (st != MSR_OK)
        return msr_err_call(st, "moe: the allgather of the choices over cp %d", moe->cp);
    return MSR_OK;
}

/* Capacity: one process's count over the micro-batch's tokens (under cp
 * the whole group's, from moe->gchoice), choice rank first, then token
 * index; this rank's kept choices get the next row of their expert's
 * block (of `stride` rows) here: s->row, the row in the dispatch buffer,
 * -1 for its dropped ones and those of experts another tp rank computes
 * (every tp rank counts every expert alike and fills the rows of its
 * own). f_e from the same count; filled: the rows of each row block. */
static void capacity(msr_moe_t *moe, moe_slot_t *s, int N, int cap, int stride, int *filled,
                     msr_moe_stats_t *stats)
{
    int E = moe->E, K = moe->K, G = moe->cp * N;
    const int *all = moe->cp > 1 ? moe->gchoice : s->choice;
    int count[MSR_GPT_MAX_EXPERTS], mine[MSR_GPT_MAX_EXPERTS];
    memset(count, 0, sizeof count);
    memset(mine, 0, sizeof mine);
    memset(s->frac, 0, (size_t)E * sizeof(double));
    for (int j = 0; j < K; j++) {
        for (int g = 0; g < G; g++) {
            int r, t = token_home(moe, g, &r);
            size_t tj = (size_t)t * K + j;
            int e = all[(size_t)r * N * K + tj], q = row_block(moe, e);
            s->frac[e] += 1.0;
            if (r != moe->cp_rank) { /* another rank's token takes its slot */
                count[e] += count[e] < cap;
                continue;
            }
            s->row[tj] = -1;
            if (count[e] == cap) {
                stats->dropped += moe->counting;
                continue;
            }
            count[e]++;
            int slot = mine[e]++;
            stats->load[e] += moe->counting;
            if (q < 0)
                continue;
            filled[q] = mine[e];
            s->row[tj] = q * stride + slot;
        }
    }
    for (int e = 0; e < E; e++)
        s->frac[e] /= (double)G * K;
}

/* The load-balancing loss of the micro-batch (its probabilities' means
 * over the cp group: one allreduce), this rank's 1/cp share of it. */
static msr_status_t aux_loss(msr_moe_t *moe, const moe_slot_t *s, int N, double *aux_p)
{
    int E = moe->E;
    double P[MSR_GPT_MAX_EXPERTS], aux = 0.0;
    *aux_p = 0.0;
    if (moe->A <= 0.0)
        return MSR_OK;
    msr_kernels_or_cpu(moe->kernels)->moe_prob_sums(P, s->probs, N, E);
    if (moe->cp_comm != NULL) {
        uint64_t a = msr_now_ns();
        msr_status_t st = msr_comm_allreduce(moe->cp_comm, MSR_IN_PLACE, P, (uint64_t)E,
                                             MSR_DTYPE_F64, MSR_OP_SUM);
        span(moe, "moe cp probs", a);
        if (st != MSR_OK)
            return msr_err_call(st, "moe: the allreduce of the router's means over cp %d", moe->cp);
    }
    for (int e = 0; e < E; e++)
        aux += s->frac[e] * (P[e] / ((double)moe->cp * N));
    *aux_p = aux * (moe->A * E) / moe->cp;
    return MSR_OK;
}

msr_status_t msr_moe_forward(msr_moe_t *moe, int l, const msr_gpt_block_params_t *p, const float *x,
                             int N, float *y, double *aux_p)
{
    moe_slot_t *s = slot_of(moe, l);
    int K = moe->K, C = moe->C, H = moe->H;
    if (moe->cp > 1 && N % moe->cp_seq != 0) {
        return msr_err(MSR_ERR_CONFIG, "moe: %d tokens are not whole sequences of %d positions", N,
                       moe->cp_seq);
    }
    msr_layout_moe_dims_t d =
        msr_layout_moe_dims_cp((uint64_t)N, (uint64_t)moe->cp, (uint64_t)moe->E, (uint64_t)K,
                               moe->F, (uint64_t)C, (uint64_t)moe->HF);
    int cap = (int)d.cap, stride = (int)d.stride;
    int nb = row_blocks(moe);
    size_t rows = (size_t)nb * (size_t)stride;
    msr_moe_stats_t *stats = &moe->stats[(l + 1) / moe->every - 1];
    s->N = 0;
    route(moe, s, p->routerw, x, N);
    msr_status_t st = moe->cp > 1 ? gather_choices(moe, s, N) : MSR_OK;
    if (st != MSR_OK)
        return st;
    int filled[MSR_GPT_MAX_EXPERTS];
    memset(filled, 0, sizeof filled);
    if ((st = dev_zero(moe, moe->send, rows * (size_t)C, "the dispatch zeroed")) != MSR_OK)
        return st;
    if (moe->counting)
        stats->tokens += N;
    capacity(moe, s, N, cap, stride, filled, stats);
    const msr_kernels_t *k = msr_kernels_or_cpu(moe->kernels);
    k->moe_dispatch(moe->send, x, s->row, N, K, C);
    /* the rows in place before the communicator (or the copy) reads them */
    if ((st = dev_check(moe, msr_device_stream_sync(moe->dev, NULL), "the dispatch")) != MSR_OK)
        return st;

    /* dispatch, the experts (on the filled rows of each block), combine */
    st = exchange_counts(moe, filled, s->used);
    if (st != MSR_OK ||
        (st = exchange(moe, moe->send, s->xin, stride, C, "moe dispatch")) != MSR_OK)
        return st;
    for (int b = 0; b < nb; b++) {
        expert_t w = expert_point(moe, p->experts, block_expert(moe, b));
        size_t r0 = (size_t)b * stride;
        int n = s->used[b], HF = moe->HF;
        if (n == 0)
            continue;
        k->matmul_forward(moe->prod, s->fch + r0 * HF, s->xin + r0 * C, w.fcw, w.fcb, n, C, HF);
        if (moe->glu) /* (n, 2H) gate | up -> (n, H) silu(gate) * up */
            k->swiglu_forward(s->fch_g + r0 * H, s->fch + r0 * HF, n, H);
        else
            k->gelu_forward(s->fch_g + r0 * H, NULL, s->fch + r0 * H, (size_t)n * H);
        k->matmul_forward(moe->prod, moe->out + r0 * C, s->fch_g + r0 * H, w.fcprojw, w.fcprojb, n,
                          H, C);
    }
    if ((st = exchange(moe, moe->out, s->comb, stride, C, "moe combine")) != MSR_OK)
        return st;
    k->moe_combine(y, s->comb, s->row, s->gate, N, K, C);

    if ((st = aux_loss(moe, s, N, aux_p)) != MSR_OK)
        return st;
    s->N = N;
    s->cap = cap;
    s->stride = stride;
    return MSR_OK;
}

/* Combine's backward: the gates' gradients into moe->dgate (N, K) and
 * the outputs' into moe->send (rows, C, zeroed on the device), from dy
 * (N, C). The device's failure, else MSR_OK. */
static msr_status_t combine_backward(msr_moe_t *moe, const moe_slot_t *s, const float *dy)
{
    int K = moe->K, C = moe->C, N = s->N;
    size_t rows = (size_t)row_blocks(moe) * (size_t)s->stride;
    msr_status_t st = dev_zero(moe, moe->send, rows * (size_t)C, "the combine's gradient zeroed");
    if (st != MSR_OK)
        return st;
    msr_kernels_or_cpu(moe->kernels)
        ->moe_combine_backward(moe->send, moe->dgate, dy, s->comb, s->row, s->gate, N, K, C);
    return MSR_OK;
}

/* The experts' backward where they ran, from moe->send's output gradients:
 * their weights' gradients into g, their input gradients added to dx
 * (N, C). */
static msr_status_t experts_backward(msr_moe_t *moe, const moe_slot_t *s,
                                     const msr_gpt_block_params_t *p,
                                     const msr_gpt_block_params_t *g, float *dx)
{
    int C = moe->C, H = moe->H, HF = moe->HF, N = s->N, K = moe->K, cap = s->stride;
    int nb = row_blocks(moe);
    size_t rows = (size_t)nb * (size_t)cap;
    msr_status_t st = exchange(moe, moe->send, moe->dout, cap, C, "moe dispatch grad");
    if (st != MSR_OK)
        return st;
    if ((st = dev_zero(moe, moe->dfch_g, rows * (size_t)H, "the experts' gradients zeroed")) !=
            MSR_OK ||
        (st = dev_zero(moe, moe->dfch, rows * (size_t)HF, "the experts' gradients zeroed")) !=
            MSR_OK ||
        (st = dev_zero(moe, moe->out, rows * (size_t)C, "the experts' gradients zeroed")) != MSR_OK)
        return st;
    const msr_kernels_t *k = msr_kernels_or_cpu(moe->kernels);
    for (int b = 0; b < nb; b++) {
        int e = block_expert(moe, b);
        expert_t w = expert_point(moe, p->experts, e), dw = expert_point(moe, g->experts, e);
        size_t r0 = (size_t)b * cap;
        int n = s->used[b];
        if (n == 0)
            continue;
        k->matmul_backward(moe->prod, moe->dfch_g + r0 * H, dw.fcprojw, dw.fcprojb,
                           moe->dout + r0 * C, s->fch_g + r0 * H, w.fcprojw, n, H, C);
        if (moe->glu)
            k->swiglu_backward(moe->dfch + r0 * HF, s->fch + r0 * HF, moe->dfch_g + r0 * H, n, H);
        else
            k->gelu_backward(moe->dfch + r0 * H, s->fch + r0 * H, moe->dfch_g + r0 * H,
                             (size_t)n * H);
        k->matmul_backward(moe->prod, moe->out + r0 * C, dw.fcw, dw.fcb, moe->dfch + r0 * HF,
                           s->xin + r0 * C, w.fcw, n, C, HF);
    }
    if ((st = exchange(moe, moe->out, moe->send, cap, C, "moe combine grad")) != MSR_OK)
        return st;
    k->moe_dispatch_backward(dx, moe->send, s->row, N, K, C);
    return MSR_OK;
}

/* The router's backward from moe->dgate: the gates and the load-balancing
 * loss into the probabilities, softmax's backward into the logits (in
 * place), the router matmul into dx (N, C) and g->routerw. */
static msr_status_t router_backward(msr_moe_t *moe, const moe_slot_t *s,
                                    const msr_gpt_block_params_t *p,
                                    const msr_gpt_block_params_t *g, const float *x, float *dx,
                                    float aux_weight)
{
    int E = moe->E, K = moe->K, C = moe->C, N = s->N;
    double daux = moe->A > 0.0 ? (double)aux_weight * moe->A * E / N : 0.0;
    const msr_kernels_t *k = msr_kernels_or_cpu(moe->kernels);
    k->moe_route_backward(moe->dprobs, moe->dgate, s->probs, s->gate, s->choice, s->frac, daux, N,
                          E, K, moe->glu);
    /* tp: every rank computes the router alike; its input gradient joins
     * tp rank 0's dx only (the others' hold their experts' share), and its
     * weight gradient every rank's, or only rank 0's when the caller sums
     * it over tp */
    if (moe->tp_rank == 0) {
        k->matmul_backward(moe->prod, dx, g->routerw, NULL, moe->dprobs, x, p->routerw, N, C, E);
    } else if (!moe->router_once) {
        msr_status_t st =
            dev_zero(moe, moe->rdx, (size_t)N * C, "the router's input gradient zeroed");
        if (st != MSR_OK)
            return st;
        k->matmul_backward(moe->prod, moe->rdx, g->routerw, NULL, moe->dprobs, x, p->routerw, N, C,
                           E);
    }
    return MSR_OK;
}

msr_status_t msr_moe_backward(msr_moe_t *moe, int l, const msr_gpt_block_params_t *p,
                              const msr_gpt_block_params_t *g, const float *x, const float *dy,
                              float *dx, float aux_weight)
{
    moe_slot_t *s = slot_of(moe, l);
    if (s->N == 0)
        return msr_err(MSR_ERR_STATE, "moe: backward of block %d without its forward", l);
    int N = s->N, K = moe->K;
    msr_status_t st = combine_backward(moe, s, dy);
    if (st != MSR_OK || (st = experts_backward(moe, s, p, g, dx)) != MSR_OK)
        return st;
    /* tp: a gate's gradient came from the rank computing its expert (zero
     * on the others): the sum gives every rank all of them */
    if (moe->tp_comm != NULL) {
        uint64_t a = msr_now_ns();
        st = msr_comm_allreduce(moe->tp_comm, MSR_IN_PLACE, moe->dgate, (uint64_t)N * K,
                                MSR_DTYPE_F32, MSR_OP_SUM);
        span(moe, "moe gate grads", a);
        if (st != MSR_OK)
            return msr_err_call(st, "moe: the allreduce of the gates' gradients over tp %d",
                                moe->tp);
    }

    return router_backward(moe, s, p, g, x, dx, aux_weight);
}
