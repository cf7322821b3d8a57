/* The planner's time model (planner/plan.h, docs/plan.md "Time model"):
 * the stages, the pipeline, data parallel and the step, priced from one
 * micro-batch's pieces (plan_cost.c) on the cluster a file describes
 * (plan_cluster.c). Pure arithmetic: no I/O, no allocation.
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
#include <stddef.h>
#include <string.h>

#include "layout/layout.h"
#include "planner/plan.h"
#include "planner/plan_mem_impl.h"
#include "planner/plan_time_impl.h"
#include "planner/plan_sim.h"

#define F32_BYTES 4.0 /* Adam's moments are fp32 at any precision */

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

/* One block's exposed tp collectives in ms, forward (x 1) or backward
 * (x 2: its compute is twice forward's). With tp overlap (parallel/mp.h)
 * the block runs as two copies of half the rows, each with two allreduces
 * (under sp reduce-scatters) of half the rows (a each); the copies' four
 * parts (attention, MLP) take about a quarter of the pass's compute each
 * (q). Each but the last copy's last runs behind the other copy's next
 * part, hidden up to q; the last is waited for whole. Under sp forward
 * alternates the copies at each collective (model/block.c's order): of a
 * copy's two gathers and two reduce-scatters (a each), A's first gather
 * and B's last reduce-scatter are waited for whole, B's first gather and
 * A's last reduce-scatter run behind a whole part of the other copy (up
 * to q), the other four behind half a part (its first or last products:
 * up to q/2). Backward's gathers, of the norm outputs forward kept, each
 * start one ahead (parallel/mp_tp_copy.c), so each of its four parts has
 * a gather in flight and the last three a reduction too: both hidden up
 * to q. */
static double block_tp_ms(const msr_plan_pieces_t *p, const msr_plan_layout_t *l,
                          const msr_plan_cluster_t *c, double x)
{
    if (!l->tp_overlap)
        return p->layer_tp_ms;
    double a = p->layer_tp_half_ms, q = x * msr_plan_price(c, p->layer_f) / 4;
    if (!l->sp)
        return a + 3 * fmax(0.0, a - q);
    if (x < 2)
        return 2 * a + 2 * fmax(0.0, a - q) + 4 * fmax(0.0, a - q / 2);
    return a + fmax(0.0, a - q) + 3 * fmax(0.0, 2 * a - q);
}

static stage_cost_t stage_cost(const msr_plan_pieces_t *p, const msr_plan_layout_t *l,
                               const msr_plan_cluster_t *c, int layers, int first, int last,
                               int with, double cold)
{
    msr_plan_work_t f = msr_plan_work_scale(p->layer_f, layers);
    msr_plan_work_t bw =
        msr_plan_work_scale(p->layer_f, 2 * layers); /* backward: both operands' gradients */
    bw = msr_plan_work_add(bw, msr_plan_work_scale(p->attn_b_more, layers));
    double tpf = layers * block_tp_ms(p, l, c, 1), tpb = layers * block_tp_ms(p, l, c, 2);
    double ringf = (with & WITH_CP) ? layers * p->ring_f_ms : 0;
    double ringb = (with & WITH_CP) ? layers * p->ring_b_ms : 0;
    if (with & WITH_EP) { /* never hidden: the experts wait for their rows */
        ringf += layers * (p->layer_ep_ms + p->layer_moe_cp_ms);
        ringb += layers * p->layer_ep_ms;
    }
    f = msr_plan_work_add(f, msr_plan_work_scale(p->layer_sp, layers));
    bw = msr_plan_work_add(bw, msr_plan_work_scale(p->layer_sp, layers));
    if (with & WITH_RC) {
        if (l->recompute == MSR_PLAN_RC_SELECTIVE)
            bw = msr_plan_work_add(bw, msr_plan_work_scale(p->sel_f, layers));
        else if (l->recompute == MSR_PLAN_RC_FULL) {
            bw = msr_plan_work_add(bw, f);
            tpb += layers * block_tp_ms(p, l, c, 1); /* the forward again */
            ringb += ringf; /* the ring (and the experts' exchanges) run again */
        }
    }
    if (first) {
        f = msr_plan_work_add(f, p->embed_f);
        bw = msr_plan_work_add(bw, p->embed_b);
        tpf += p->embed_tp_ms;
    }
    if (last) {
        f = msr_plan_work_add(f, p->head_f);
        bw = msr_plan_work_add(bw, p->head_b);
        if (with & WITH_RC) /* the chunked head's logits again */
            bw = msr_plan_work_add(bw, p->head_rc);
        tpf += p->head_tp_f_ms;
        tpb += p->head_tp_b_ms;
    }
    /* frames gone cold: the forward writes them, the backward reads them
     * back, each about half of it (docs/plan.md "Cold frames") */
    if (!(with & WITH_COLD))
        cold = 0;
    stage_cost_t sc = {msr_plan_price(c, f) + cold / 2, msr_plan_price(c, bw) + cold / 2, ringf,
                       ringb};
    if (with & WITH_TP) {
        sc.tp_fwd += tpf;
        sc.tp_bwd += tpb;
    }
    return sc;
}

/* One micro-batch through virtual stage j of n, forward and backward, in ms. */
static double stage_ms(const msr_plan_pieces_t *p, const msr_plan_layout_t *l,
                       const msr_plan_cluster_t *c, int layers, int first, int last, int with,
                       double speed, double cold)
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
                          const msr_plan_cluster_t *c, const msr_plan_pieces_t *p, int with,
                          double *busy_p, double *rank_bwd_p)
{
    int pp = l->pp, v = l->schedule == MSR_PLAN_INTERLEAVED ? l->chunks : 1, n = pp * v;
    int stage = l->tp * msr_plan_cp(l); /* the ranks of a pipeline stage */
    msr_plan_net_t ppn = msr_plan_net_of(c, (int64_t)l->pp * stage <= c->ranks_per_node &&
                                                c->ranks_per_node % (l->pp * stage) == 0);
    double hop = (with & WITH_PP) ? msr_plan_t_p2p(&ppn, p->act_bytes) : 0;
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

/* A Llama's kv heads replicated over tp (fewer than tp): each rank's
 * gradient of its k and v rows is its query heads' part, summed over tp
 * once a step (every micro-batch under ZeRO-2) in one allreduce of the
 * K kv heads' slots, 2 C hs K a block (parallel/mp_run.c tp_sum), exposed.
 * ms a step on pipeline stage s; 0 for a GPT. */
static double stage_kv_sum(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                           msr_plan_precision_t prec, const msr_plan_cluster_t *c, int s)
{
    if (m->arch != MSR_PLAN_LLAMA || m->kv_heads >= l->tp)
        return 0;
    int n = l->pp * l->chunks, blocks = 0;
    for (int k = 0; k < l->chunks; k++)
        blocks += split_at(m, l, n, k * l->pp + s);
    double eb = prec == MSR_PLAN_BF16 ? 2 : 4;
    double bytes = blocks * 2.0 * m->channels * (m->channels / m->heads) * m->kv_heads * eb;
    msr_plan_net_t tpn =
        msr_plan_net_of(c, l->tp <= c->ranks_per_node && c->ranks_per_node % l->tp == 0);
    return (l->zero >= 2 ? l->micros : 1) * msr_plan_t_allreduce(&tpn, bytes, l->tp);
}

/* Under ZeRO-3 the first stage gathers its embedding segment over dp
 * (x cp, its shards' group) before it sends the tied wte to the last
 * stage after each update, and the last stage waits for both
 * (parallel/mp_tied.c msr_mp_sync_tied): one allgather of the segment
 * (wte's V/t rows and wpe), exposed, ms a step; 0 without the tie. */
static double tied_z3_gather(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                             msr_plan_precision_t prec, const msr_plan_cluster_t *c)
{
    int cp = msr_plan_cp(l), nd = l->dp * cp;
    if (l->pp < 2 || m->arch != MSR_PLAN_GPT || l->zero < 3 || nd < 2)
        return 0;
    msr_plan_part_t part;
    msr_plan_part_of(m, l, 0, &part);
    int64_t world = (int64_t)l->dp * l->tp * l->pp * cp;
    msr_plan_net_t dpn = msr_plan_net_of(c, world <= c->ranks_per_node);
    double eb = prec == MSR_PLAN_BF16 ? 2 : 4;
    return msr_plan_t_scatter(&dpn, (double)part.embed * eb, nd);
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
    msr_plan_net_t dpn = msr_plan_net_of(c, world <= c->ranks_per_node);
    int nd = l.dp * cp;
    msr_plan_rank_t r;
    msr_plan_rank(m, &l, prec, s * l.tp * cp, &r);
    double G = (double)r.part_params * eb;
    double last_bucket = G < l.bucket_bytes ? G : (double)l.bucket_bytes;
    double red = 0, red_exposed = 0, ag = 0, z3 = 0;
    if (nd > 1) {
        /* stages 2-3 reduce every micro-batch's gradients */
        double per =
            l.zero == 0 ? msr_plan_t_allreduce(&dpn, G, nd) : msr_plan_t_scatter(&dpn, G, nd);
        double tail = l.zero == 0 ? msr_plan_t_allreduce(&dpn, last_bucket, nd)
                                  : msr_plan_t_scatter(&dpn, last_bucket, nd);
        double times = l.zero >= 2 ? l.micros : 1;
        double hide = rank_bwd * (1 - (double)l.first_bucket_bytes / (G > 0 ? G : 1));
        if (hide < 0)
            hide = 0;
        double exposed = per - hide > tail ? per - hide : tail;
        red = times * per;
        red_exposed = times * exposed;
        if (l.zero == 1 || l.zero == 2)
            ag = msr_plan_t_scatter(&dpn, G, nd);
        if (l.zero == 3) {
            /* each micro-batch gathers every segment forward and again
             * backward; on the whole-model path the next segment's gather
             * is prefetched behind the current one's compute, the
             * model-parallel runtime waits for each (no prefetch) */
            double gather = 2 * msr_plan_t_scatter(&dpn, G, nd);
            double comp = rank_bwd * 1.5;
            double e = gather - comp > gather / (2.0 * (m->layers + 2))
                           ? gather - comp
                           : gather / (2.0 * (m->layers + 2));
            z3 = l.micros * (msr_plan_whole_path(&l) ? e : gather);
        }
    }
    /* ZeRO packs buckets in dp rank-major blocks and unpacks them
     * (dp 1 too): stage 1 once a step (the gradients in, the
     * parameters back), stages 2-3 each micro-batch's segment
     * gradients into buckets, then into the shard */
    if (l.zero >= 1) {
        double packs = l.zero == 1 ? 4 : 2.0 * l.micros + 2;
        msr_plan_work_t pack = {0, packs * G, 0, 0};
        double t = msr_plan_price(c, pack);
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
        double e = l.zero == 0 ? msr_plan_t_allreduce(&dpn, EG, reps)
                               : 2 * msr_plan_t_scatter(&dpn, EG, reps);
        red += e;
        red_exposed += e;
    }
    double elems = (double)(l.zero >= 1 ? r.shard_elems : r.part_params) + (double)r.expert_shard;
    /* AdamW reads the gradient, both moments and the weights (and
     * under bf16 the fp32 master), and writes all but the gradient */
    msr_plan_work_t opt = {0, elems * (prec == MSR_PLAN_BF16 ? 34 : 28), 0, 1};
    o->red = red;
    o->red_exposed = red_exposed;
    o->ag = ag;
    o->z3 = z3;
    o->optim = msr_plan_price(c, opt);
}

/* The experts' files' I/O a step, ms, by where it happens
 * (parallel/train_experts_disk.c): each micro-batch's forward reads every
 * held MoE block's parameters and its backward reads them again; with
 * their gradients in a file too, each backward reads and writes back each
 * block's gradients (the step's first reads them as well, then zeroes
 * them), the norm reads them once more, a block at a time with nothing to
 * hide behind (under ZeRO 2 with replicas that is the reduce of each
 * block's owned parts, which writes back the blocks the rank owns a part
 * of: rewrites), and the update reads the parameters and those blocks'
 * gradients (every block's without replicas) and writes the parameters
 * (the memory model's offload_eparam_r and _w, in the passes). The
 * passes' I/O hides behind the passes' compute, the update's behind
 * AdamW's, as the blocks' do. */
typedef struct experts_io {
    double fwd, bwd, norm, upd;
} experts_io_t;

static void experts_io(const msr_plan_rank_t *r, const msr_plan_cluster_t *c, int micros,
                       int rewrites, experts_io_t *o)
{
    double b = (double)r->offload_eparam_b, g = (double)r->offload_egrads_b, n = micros;
    double own = (double)r->offload_eowned_b;
    o->fwd = msr_plan_disk_ms(c, n * b, 0);
    o->bwd = msr_plan_disk_ms(c, n * (b + g), n * g);
    o->norm = msr_plan_disk_ms(c, g, rewrites ? own : 0);
    o->upd = msr_plan_disk_ms(c, b + own, b);
}

/* The offloads' disk I/O on pipeline stage s, ms a step: all of it
 * (*io_p) and what compute does not hide (*exposed_p). The optimizer's
 * chunks are read ahead and written behind while AdamW updates the one
 * between (msr_offload_step): the update and the I/O take the longer of
 * the two. Each block input is spilled while the next block runs its
 * forward, and read back ahead while a block runs its backward (its
 * recompute included): each pass hides what its compute lasts. The
 * parameters' blocks are read one ahead in each pass over a chunk's
 * blocks (the update's: and written one behind): a pass pays the first
 * block's read, then the longer of a block's compute and a block's I/O,
 * beside the other offloads' I/O in the same pass. The gradient shard's
 * chunks are priced whole in the step, written and read back in the
 * buckets' hooks and the update: the writes go behind and the reads
 * ahead of the trainer (parallel/offload_grads.h), but measured steps
 * pay about all of it (docs/plan.md "Offload I/O"), so no overlap is
 * credited. */
static void stage_offload(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                          msr_plan_precision_t prec, const msr_plan_cluster_t *c,
                          const msr_plan_pieces_t *p, int s, double optim, double *io_p,
                          double *exposed_p)
{
    msr_plan_rank_t r;
    int rank = s * l->tp * msr_plan_cp(l);
    msr_plan_rank(m, l, prec, rank, &r);
    uint64_t slot, blocks;
    msr_plan_offload_params_io(m, l, rank, &slot, &blocks);
    double oio = msr_plan_disk_ms(c, (double)r.offload_optim_io, (double)r.offload_optim_io);
    double spill = msr_plan_disk_ms(c, 0, (double)r.offload_acts_io);
    double fetch = msr_plan_disk_ms(c, (double)r.offload_acts_io, 0);
    /* a pass's blocks: each micro-batch's forward and backward read every
     * block once, the update reads and writes each once */
    double n = (double)l->micros * (double)blocks, first = msr_plan_disk_ms(c, (double)slot, 0);
    double pread = n * first, pupd = (double)blocks * msr_plan_disk_ms(c, slot, slot);
    double firsts = blocks > 0 ? (2 * (double)l->micros * l->chunks + 1) * first : 0;
    stage_cost_t sc = stage_cost(p, l, c, 1, 0, 0, WITH_RC, 0);
    /* the block passes whose compute hides the I/O: micro-batches x the
     * stage's blocks, which either offload counts (0 when neither moves) */
    double nf = (double)r.offload_acts_n > n ? (double)r.offload_acts_n : n;
    double gio = msr_plan_disk_ms(c, (double)r.offload_grads_r, (double)r.offload_grads_w);
    experts_io_t e;
    int reps = l->dp / msr_plan_ep(l) * msr_plan_cp(l);
    experts_io(&r, c, l->micros, l->zero < 3 && reps > 1, &e);
    *io_p = oio + spill + fetch + 2 * pread + pupd + gio + e.fwd + e.bwd + e.norm + e.upd;
    *exposed_p = firsts + gio + e.norm + msr_plan_io_exposed_ms(optim, oio + pupd + e.upd) +
                 msr_plan_io_exposed_ms(nf * sc.fwd, spill + pread + e.fwd) +
                 msr_plan_io_exposed_ms(nf * sc.bwd, fetch + pread + e.bwd);
}

void msr_plan_time(const msr_plan_model_t *m, const msr_plan_layout_t *lay,
                   msr_plan_precision_t prec, const msr_plan_cluster_t *c, msr_plan_time_t *out)
{
    msr_plan_layout_t l = *lay;
    if (l.schedule != MSR_PLAN_INTERLEAVED)
        l.chunks = 1;
    msr_layout_bucket_defaults(&l.bucket_bytes, &l.first_bucket_bytes);
    memset(out, 0, sizeof *out);
    msr_plan_pieces_t p;
    msr_plan_count_pieces(m, &l, prec, c, &p);
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
    if (l.head_chunk > 0) /* the chunked head's backward computes its logits again */
        rc += 2 * (double)l.micro_batch * m->seq * m->channels * m->vocab;
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
    msr_plan_net_t ppn = msr_plan_net_of(c, (int64_t)l.pp * l.tp * cp <= c->ranks_per_node &&
                                                c->ranks_per_node % (l.pp * l.tp * cp) == 0);
    if (l.pp > 1 && m->arch == MSR_PLAN_GPT)
        tied = 2 * msr_plan_t_p2p(&ppn, (double)m->vocab / l.tp * m->channels * eb);
    out->pp_comm_ms += tied;
    double tied_gather = tied_z3_gather(m, &l, prec, c);

    /* data parallel (and a Llama's replicated kv heads' sum over tp), per
     * pipeline stage: the slowest decides */
    double worst = 0, kv_sum = 0;
    for (int s = 0; s < l.pp; s++) {
        stage_dp_t d;
        stage_dp(m, &l, prec, c, s, rank_bwd, &d);
        double kv = stage_kv_sum(m, &l, prec, c, s);
        double io = 0, io_exposed = 0;
        if (l.offload != 0)
            stage_offload(m, &l, prec, c, &p, s, d.optim, &io, &io_exposed);
        double cost = d.red_exposed + d.ag + d.z3 + d.optim + kv + io_exposed;
        if (s == 0 || cost > worst) {
            out->offload_io_ms = io;
            out->offload_ms = io_exposed;
            worst = cost;
            kv_sum = kv;
            out->dp_comm_ms = d.red + d.ag;
            out->dp_exposed_ms = d.red_exposed + d.ag;
            out->zero3_ms = d.z3;
            out->optim_ms = d.optim;
        }
    }
    out->tp_comm_ms += kv_sum;
    out->zero3_ms += tied_gather;
    out->exposed_comm_ms = out->tp_comm_ms + out->cp_comm_ms + out->ep_comm_ms + out->pp_comm_ms +
                           out->dp_exposed_ms + out->zero3_ms;
    out->step_ms = pipe + tied + tied_gather + worst;
    out->tokens_per_s =
        out->step_ms > 0 ? micros_all * l.micro_batch * m->seq / (out->step_ms / 1e3) : 0;
}
