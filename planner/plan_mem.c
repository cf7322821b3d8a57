/* The planner's memory model, one rank at a time (see plan.h and
 * docs/plan.md): a rank's parameters, gradients and optimizer state,
 * activations, experts, pipeline buffers and transients, the
 * communicator's shared-memory areas it touches, and the peak over the
 * ranks. Its pieces: the part and dp's layout (plan_part.c), dp's
 * temporaries (plan_replay.c), activations and work space (plan_acts.c),
 * the paper accounting (plan_paper.c) and the checks (plan_check.c). */
#include <string.h>

#include "base/shm_defaults.h"
#include "layout/layout.h"
#include "planner/plan.h"
#include "planner/plan_mem_impl.h"

/* The resident part of comm/ucx/shm.c's tiled area, as one member of a
 * group of n ranks on one node maps it, with the library's default tuning
 * (comm/ucx/coll.c: MSR_COMM_SHM_TILE 256 KiB, MSR_COMM_SHM_TILES 4,
 * MSR_COMM_SHM_SEGMENT 16 MiB): n stages and a result of 4 slots of a
 * tile each, tiles halved until the area fits. Collectives over
 * MSR_COMM_SHM_MAX (16 KiB) go through it a tile at a time, slot after
 * slot; a member maps the pages it writes and reads, and a read fault maps
 * the 64 KiB window around it (Linux's fault-around, aligned in the
 * address space, not the file): a part of x bytes read from another
 * member's slot maps about x + 1.5 windows. Per slot a vector of msg bytes
 * (t = min(msg, tile) of it there) maps, for an allreduce (rs_ag 0), the
 * member's stage t, the result t and its n-th of each other stage; for a
 * reduce-scatter with the allgather after it (ZeRO >= 1, sp), its stage,
 * its slice of each other stage, and each other member's block (msg / n)
 * up to a tile. The slots turn with every tile, so over a few steps each
 * collective meets every slot, unless the step's tiles are a multiple of
 * the slots: then each keeps its own (a reduce-scatter and an allgather of
 * few tiles). rs_per_step: the reduce-scatters of the one vector a step
 * (the allgather after them); 0: many collectives. Measured (the pages of
 * the segment each member maps, on 4 and 8 ranks): within about 1.5 MiB
 * of the most any member maps. */
static uint64_t shm_tiled(uint64_t n, uint64_t msg, int rs_ag, uint64_t rs_per_step)
{
    const uint64_t line = 64, depth = MSR_SHM_TILES, segment = MSR_SHM_SEGMENT_BYTES;
    const uint64_t fa = 64u << 10; /* the kernel's fault-around */
    uint64_t tile = MSR_SHM_TILE_BYTES;
    while (tile && (n + 1) * depth * tile > segment)
        tile = tile / 2 / line * line;
    if (tile < n * line || msg == 0)
        return 0;
    uint64_t t = msr_plan_min_u64(msg, tile);
#define SHM_READ(x) msr_plan_min_u64(t, (x) + 3 * fa / 2)
    if (!rs_ag)
        return depth * (2 * t + (n - 1) * SHM_READ(t / n));
    uint64_t block = msr_plan_max_u64(msg / n, 1), slice = tile / n / line * line;
    uint64_t part = msr_plan_min_u64(block, slice), ag = msr_plan_min_u64(block, tile);
    uint64_t rs_slot = msr_plan_min_u64(t, n * part) + (n - 1) * SHM_READ(part);
    uint64_t ag_slot = ag + (n - 1) * SHM_READ(ag);
    uint64_t rs_tiles = msr_plan_ceil_div(block, part) * rs_per_step,
             ag_tiles = msr_plan_ceil_div(block, tile);
    uint64_t used = depth * (rs_slot + ag_slot);
    if (rs_per_step > 0 && (rs_tiles + ag_tiles) % depth == 0)
        used = msr_plan_min_u64(depth, rs_tiles) * rs_slot +
               msr_plan_min_u64(depth, ag_tiles) * ag_slot;
#undef SHM_READ
    return msr_plan_min_u64(used, depth * n * t);
}

/* ---- a rank ---- */

uint64_t msr_plan_frame_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                              msr_plan_precision_t prec, int layers, int head)
{
    if (msr_plan_is_runtime(m, prec))
        return msr_plan_frame_elems(m, l, layers, head) * MSR_PLAN_F32;
    return msr_plan_frame_paper_bytes(m, l, prec, layers);
}

static msr_plan_layout_t with_defaults(const msr_plan_layout_t *l)
{
    msr_plan_layout_t d = *l;
    msr_layout_bucket_defaults(&d.bucket_bytes, &d.first_bucket_bytes);
    return d;
}

/* What the optimizer's offload keeps resident for moments of count
 * elements (parallel/offload.c store_alloc, msr_offload_resident): 4
 * chunk buffers and a CRC per chunk and one more. A store of fewer than 4
 * chunks uses chunks of a quarter of its moments' bytes, rounded up to
 * 4096 (and at least 4096); a step reads and writes every chunk whole
 * (msr_offload_step). */
static uint64_t optim_chunk(uint64_t count, size_t chunk)
{
    const uint64_t align = MSR_PLAN_OFFLOAD_ALIGN, slots = MSR_PLAN_OFFLOAD_SLOTS;
    uint64_t want = chunk != 0 ? chunk : MSR_PLAN_OFFLOAD_CHUNK_DEFAULT;
    uint64_t quarter = msr_plan_ceil_div(2 * count * MSR_PLAN_F32, slots);
    return msr_plan_max_u64(msr_plan_min_u64(want, msr_plan_ceil_div(quarter, align) * align),
                            align);
}

uint64_t msr_plan_offload_optim_bytes(uint64_t count, size_t chunk)
{
    uint64_t c = optim_chunk(count, chunk);
    uint64_t chunks = msr_plan_ceil_div(count, c / (2 * MSR_PLAN_F32));
    return MSR_PLAN_OFFLOAD_SLOTS * c + (chunks + 1) * sizeof(uint32_t);
}

uint64_t msr_plan_offload_optim_io(uint64_t count, size_t chunk)
{
    uint64_t c = optim_chunk(count, chunk);
    return msr_plan_ceil_div(count, c / (2 * MSR_PLAN_F32)) * c;
}

/* What the activations' offload keeps resident (parallel/offload_acts.c
 * msr_acts_resident): 6 buffers of one block input of x bytes rounded up
 * to 4096, and a CRC and a flag per input of the file (frames x
 * max_layers of them) and one more. */
uint64_t msr_plan_offload_acts_bytes(uint64_t x, uint64_t inputs)
{
    uint64_t slot = msr_plan_ceil_div(x, MSR_PLAN_OFFLOAD_ALIGN) * MSR_PLAN_OFFLOAD_ALIGN;
    return MSR_PLAN_ACTS_BUFS * slot + (inputs + 1) * (sizeof(uint32_t) + 1);
}

/* What the parameters' offload keeps resident (parallel/offload_params.c
 * msr_params_resident_of): 3 buffers of one block of b bytes rounded up to
 * 4096, and a CRC and a flag per block and one more. */
uint64_t msr_plan_offload_params_bytes(uint64_t b, uint64_t blocks)
{
    uint64_t slot = msr_plan_ceil_div(b, MSR_PLAN_OFFLOAD_ALIGN) * MSR_PLAN_OFFLOAD_ALIGN;
    return MSR_PLAN_PARAMS_BUFS * slot + (blocks + 1) * (sizeof(uint32_t) + 1);
}

/* The gradients' chunk for a shard of count elements (parallel/offload_grads.c
 * msr_grads_chunk_of, asked for the moments' chunk: dp_offload.c): at most
 * the shard's bytes rounded up to 4096, at least 4096. */
static uint64_t grads_chunk(uint64_t count, size_t chunk)
{
    const uint64_t align = MSR_PLAN_OFFLOAD_ALIGN;
    uint64_t need = msr_plan_ceil_div(count * MSR_PLAN_F32, align) * align;
    return msr_plan_max_u64(msr_plan_min_u64(optim_chunk(count, chunk), need), align);
}

uint64_t msr_plan_offload_grads_bytes(uint64_t count, size_t chunk)
{
    uint64_t g = grads_chunk(count, chunk);
    uint64_t chunks = msr_plan_ceil_div(count, g / MSR_PLAN_F32);
    return 3 * g + (chunks + 1) * (sizeof(uint32_t) + 1) +
           optim_chunk(count, chunk) / (2 * MSR_PLAN_F32) * MSR_PLAN_F32;
}

void msr_plan_offload_grads_io(uint64_t count, size_t chunk, int micros, uint64_t *write_p,
                               uint64_t *read_p)
{
    uint64_t g = grads_chunk(count, chunk), chunks = msr_plan_ceil_div(count, g / MSR_PLAN_F32);
    uint64_t m = micros > 0 ? (uint64_t)micros : 1;
    *write_p = chunks <= 1 ? g : m * chunks * g;
    *read_p = chunks <= 1 ? 0 : m * chunks * g;
}

/* The gradients' offload (ZeRO 2-3: a shard of S elements): its store's
 * bytes in place of the shard, and what it moves. */
static void rank_grads_offload(const msr_plan_layout_t *l, uint64_t S, msr_plan_rank_t *o)
{
    if (!(l->offload & MSR_PLAN_OFFLOAD_GRADS) || l->zero < 2)
        return;
    o->grads = msr_plan_offload_grads_bytes(S, l->offload_chunk);
    msr_plan_offload_grads_io(S, l->offload_chunk, l->micros, &o->offload_grads_w,
                              &o->offload_grads_r);
}

/* A rank's parameters, gradients and optimizer state: the runtime's
 * (parallel/dp.c msr_dp_memory) or the papers' accounting. */
static void rank_state(const msr_plan_layout_t *l, msr_plan_precision_t prec, int runtime,
                       const msr_plan_part_t *p, uint64_t S, msr_plan_rank_t *o)
{
    uint64_t P = p->total;
    if (runtime) {
        o->params = (l->zero >= 3 ? S : P) * MSR_PLAN_F32;
        if (l->offload & MSR_PLAN_OFFLOAD_PARAMS) /* the blocks' in the file */
            o->params += msr_plan_offload_params_bytes(msr_plan_part_block_max(p) * MSR_PLAN_F32,
                                                       (uint64_t)p->blocks) -
                         msr_plan_part_blocks(p) * MSR_PLAN_F32;
        o->grads = (l->zero >= 2 ? S : P) * MSR_PLAN_F32;
        o->optim = 2 * (l->zero >= 1 ? S : P) * MSR_PLAN_F32;
        if (l->offload & MSR_PLAN_OFFLOAD_OPTIM) {
            o->optim = msr_plan_offload_optim_bytes(l->zero >= 1 ? S : P, l->offload_chunk);
            o->offload_optim_io = msr_plan_offload_optim_io(l->zero >= 1 ? S : P, l->offload_chunk);
        }
        rank_grads_offload(l, S, o);
        return;
    }
    /* paper: 16-bit parameters and gradients with fp32 master weights, or
     * fp32 without; Adam's two fp32 moments; ZeRO partitions them */
    uint64_t w = prec == MSR_PLAN_BF16 ? 2 : 4;
    uint64_t sh = msr_plan_ceil_div(P, (uint64_t)msr_plan_replicas(l));
    o->params = (l->zero >= 3 ? sh : P) * w;
    o->grads = (l->zero >= 2 ? sh : P) * w;
    o->optim = 2 * (l->zero >= 1 ? sh : P) * MSR_PLAN_F32;
    if (l->offload & MSR_PLAN_OFFLOAD_OPTIM) {
        o->optim = msr_plan_offload_optim_bytes(l->zero >= 1 ? sh : P, l->offload_chunk);
        o->offload_optim_io = msr_plan_offload_optim_io(l->zero >= 1 ? sh : P, l->offload_chunk);
    }
    rank_grads_offload(l, sh, o);
    o->master = prec == MSR_PLAN_BF16 ? (l->zero >= 1 ? sh : P) * MSR_PLAN_F32 : 0;
}

/* Activations: each chunk's frame, held per the schedule. Under the
 * activations' offload a frame keeps neither the chunk's input nor its
 * blocks' outputs but the last (parallel/mp_run.c frame_open): a block
 * input of x bytes less per block, and the store's buffers besides. */
static void rank_activations(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                             msr_plan_precision_t prec, int runtime, msr_plan_rank_t *o)
{
    int n = l->pp * l->chunks, max_layers = 0, last_layers = 0;
    int off = (l->offload & MSR_PLAN_OFFLOAD_ACTS) != 0;
    uint64_t w = runtime ? MSR_PLAN_F32 : (prec == MSR_PLAN_BF16 ? 2 : 4);
    uint64_t Tc = (uint64_t)(m->seq / msr_plan_cp(l)), Tl = l->sp ? Tc / (uint64_t)l->tp : Tc;
    uint64_t x = (uint64_t)l->micro_batch * Tl * (uint64_t)m->channels * w;
    uint64_t chunk_bytes[64], blocks = 0;
    for (int c = 0; c < l->chunks && c < 64; c++) {
        int lo, hi, j = c * l->pp + o->pp_rank;
        msr_plan_stage_layers(l, m->layers, n, j, &lo, &hi);
        blocks += (uint64_t)(hi - lo);
        max_layers = hi - lo > max_layers ? hi - lo : max_layers;
        if (c == l->chunks - 1)
            last_layers = hi - lo;
        chunk_bytes[c] = msr_plan_frame_bytes(m, l, prec, hi - lo, j == n - 1);
        if (off)
            chunk_bytes[c] -= msr_plan_min_u64(chunk_bytes[c], (uint64_t)(hi - lo) * x);
    }
    o->frame_bytes[0] = msr_plan_frame_bytes(m, l, prec, max_layers, 0);
    o->frame_bytes[1] = msr_plan_frame_bytes(m, l, prec, last_layers, 1);
    o->activations = msr_plan_schedule_peak(l, o->pp_rank, chunk_bytes, &o->frames_held);
    if (off) { /* the store, from the runtime's start (parallel/mp.c acts_start) */
        o->activations += msr_plan_offload_acts_bytes(x, (uint64_t)l->micros * (uint64_t)l->chunks *
                                                             (uint64_t)max_layers);
        /* each block input of each micro-batch spilled and read back once,
         * its slot whole (parallel/offload_acts.c) */
        o->offload_acts_n = (uint64_t)l->micros * blocks;
        o->offload_acts_io = o->offload_acts_n * msr_plan_ceil_div(x, MSR_PLAN_OFFLOAD_ALIGN) *
                             MSR_PLAN_OFFLOAD_ALIGN;
    }
    if (runtime && msr_plan_whole_path(l)) {
        /* the whole model keeps one micro-batch's activations in its own
         * table (model/gpt.c msr_gpt_carve_acts), reused by the next */
        o->activations = msr_plan_whole_acts_elems(m, l) * MSR_PLAN_F32;
        o->frames_held = 1;
    }
}

/* The experts (parallel/train.c experts_create): E / (ep tp) of each MoE
 * block of the part, their moments whole or, under ZeRO with replicas,
 * this rank's block among the dp / ep x cp ranks holding the same experts
 * (rank dp_rank / ep x cp + cp_rank of them), with a gather buffer of all
 * the blocks; under ZeRO-3 with replicas (train_experts.c) this rank's
 * shard of each block's experts is all it keeps of their parameters,
 * gradients and moments, with two blocks' parameters (the one in use
 * and the next one's prefetch, MSR_TRAIN_EZ_SLOTS) and one block's
 * gradients gathered in the work space. Under the optimizer's offload
 * the moments of this rank's block go to a file of their own
 * (train_experts.c msr_train_experts_offload): its store's buffers stay,
 * and each step reads and writes every chunk of it. */
static void rank_experts(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                         msr_plan_precision_t prec, int runtime, const msr_plan_part_t *p,
                         msr_plan_rank_t *o)
{
    int ep = msr_plan_ep(l), held = m->experts / (ep * l->tp);
    uint64_t fw = runtime ? MSR_PLAN_F32 : (prec == MSR_PLAN_BF16 ? 2 : 4);
    uint64_t per = (uint64_t)held * msr_plan_expert_params(m), blocks = (uint64_t)p->moe_blocks;
    uint64_t count = blocks * per, resident = count, gather = 0, n = per;
    uint64_t cp = (uint64_t)msr_plan_cp(l), reps = (uint64_t)(l->dp / ep) * cp, lo = 0, hi = count;
    uint64_t rrank = (uint64_t)(o->dp_rank / ep) * cp + (uint64_t)o->cp_rank, zblk = 0;
    if (l->zero >= 3 && reps > 1 && blocks > 0) { /* each block sharded */
        uint64_t blk = msr_plan_ceil_div(per, reps), a = msr_plan_min_u64(per, rrank * blk);
        n = msr_plan_min_u64(per, a + blk) - a; /* this rank's share of a block */
        hi = blocks * n;
        resident = hi;
        gather = 3 * blk * reps;
    } else if (l->zero >= 1 && reps > 1) {
        zblk = msr_plan_ceil_div(count, reps);
        lo = msr_plan_min_u64(count, rrank * zblk);
        hi = msr_plan_min_u64(count, lo + zblk);
        gather = zblk * reps;
    }
    o->experts_held = held;
    o->expert_params = resident * fw;
    o->expert_grads = resident * fw;
    /* under the parameters' offload, the experts' own file
     * (train_experts_disk.c): a store of a block per MoE block (under
     * ZeRO-3 with replicas, this rank's share of it), read for each pass
     * and the update (under ZeRO-3 a pass's blocks still in the gathers'
     * slots are not read again: an upper bound there); under ZeRO 1-2
     * with replicas the gradients reduce-scattered in place (padded to
     * the replicas' blocks) and the update's gather a block's parts at a
     * time */
    if ((l->offload & MSR_PLAN_OFFLOAD_PARAMS) && blocks > 0 && n > 0) {
        if (zblk > 0) {
            o->expert_grads = msr_plan_max_u64(count, zblk * reps) * MSR_PLAN_F32;
            gather = reps * msr_plan_min_u64(zblk, per);
        }
        uint64_t slot =
            msr_plan_ceil_div(n * MSR_PLAN_F32, MSR_PLAN_OFFLOAD_ALIGN) * MSR_PLAN_OFFLOAD_ALIGN;
        o->expert_params = msr_plan_offload_params_bytes(n * MSR_PLAN_F32, blocks);
        o->offload_eparam_b = blocks * slot;
        o->offload_eparam_r = blocks * slot * (2 * (uint64_t)l->micros + 1);
        o->offload_eparam_w = blocks * slot;
        /* and their gradients under the gradients' offload (ZeRO 2-3): a
         * store of their own, each block read and written back around
         * each backward (under ZeRO 3 its share, after its
         * reduce-scatter), read by the norm and the update; under ZeRO 2
         * with replicas the norm's read is the step's reduce of each
         * block's owned parts, which writes back the ob blocks this
         * rank owns a part of, the only ones the update reads */
        if (l->offload & MSR_PLAN_OFFLOAD_GRADS) {
            uint64_t ob = zblk == 0 ? blocks : hi > lo ? (hi - 1) / per - lo / per + 1 : 0;
            o->expert_grads = o->expert_params;
            o->offload_egrads_b = blocks * slot;
            o->offload_eowned_b = ob * slot;
            o->offload_eparam_r += slot * (blocks * ((uint64_t)l->micros + 1) + ob);
            o->offload_eparam_w += slot * (blocks * (uint64_t)l->micros + (zblk > 0 ? ob : 0));
        }
    }
    o->expert_shard = hi - lo;
    o->expert_optim = 2 * (hi - lo) * MSR_PLAN_F32;
    if ((l->offload & MSR_PLAN_OFFLOAD_OPTIM) && hi > lo) { /* a file of their own */
        o->expert_optim = msr_plan_offload_optim_bytes(hi - lo, l->offload_chunk);
        o->offload_optim_io += msr_plan_offload_optim_io(hi - lo, l->offload_chunk);
    }
    o->moe_work =
        msr_plan_moe_work_bytes(m, l, p->moe_blocks, o->tp_rank, fw) + gather * MSR_PLAN_F32;
    if (prec == MSR_PLAN_BF16)
        o->master += (hi - lo) * MSR_PLAN_F32;
}

/* The bytes of what the runtime allocates and frees during a step, beyond
 * the frames: dp's temporaries (their bound, or the replayed peak), the
 * work space, the shared-memory staging. Sets *during_p and *after_p (the
 * transients held with the activations, and after them), *acts_after_p
 * (activations still held after the step) and o->untouched. */
static void rank_transients(const msr_plan_model_t *m, const msr_plan_layout_t *l, int runtime,
                            uint64_t w, const msr_plan_part_t *p, const msr_plan_dp_layout_t *d,
                            msr_plan_rank_t *o, uint64_t *during_p, uint64_t *after_p,
                            uint64_t *acts_after_p)
{
    /* dp's temporaries, at most (parallel/dp.c): packed buckets under ZeRO
     * >= 1 (MSR_DP_MAX_PACKED started ones, plus those of the segment being
     * packed, which cannot start before it is ready); two segments'
     * gradients under ZeRO-2/3 (the embedding's, held from the tied head's
     * backward to the end, and the current one); the current and the
     * prefetched segment, each with its gather buffer, under ZeRO-3 */
    uint64_t g = runtime ? MSR_PLAN_F32 : w;
    if (l->zero >= 1)
        o->buckets_bound += (uint64_t)(MSR_DP_MAX_PACKED + d->span_max) * d->packed_max * g;
    if (l->zero >= 2)
        o->buckets_bound += 2 * d->seg_max * g;
    if (l->zero >= 3)
        o->buckets_bound += 2 * (d->seg_max + d->gather_max) * g;
    *during_p = o->buckets_bound;
    *after_p = *acts_after_p = 0;
    o->untouched = 0;
    if (!runtime)
        return;
    /* the runtime's own order, replayed (above); the sum of maxima stays
     * for parts too large to replay */
    static _Thread_local msr_plan_replay_t r;
    uint64_t peak = msr_plan_transient_peak(l, p, msr_plan_whole_path(l), &r, during_p, after_p);
    if (peak != UINT64_MAX)
        o->buckets_bound = peak;
    else
        *during_p = o->buckets_bound, *after_p = 0;
    uint64_t scratch;
    o->work = msr_plan_work_bytes(m, l, &scratch);
    /* without recompute no block writes the shared scratch: its pages never
     * become resident */
    if (l->recompute == MSR_PLAN_RC_NONE)
        o->untouched = scratch;
    /* dp's gradients (every part has more than 16 KiB of them) and tp's
     * activations */
    const uint64_t shm_max = MSR_SHM_MAX_BYTES;
    uint64_t P = p->total, bucket = l->bucket_bytes; /* with_defaults set it */
    if (msr_plan_replicas(l) > 1 && P * MSR_PLAN_F32 > shm_max)
        o->shm += shm_tiled((uint64_t)msr_plan_replicas(l),
                            msr_plan_min_u64(P * MSR_PLAN_F32, bucket), l->zero >= 1,
                            (l->zero == 1 || l->zero == 2) && d->buckets == 1
                                ? (l->zero == 2 ? (uint64_t)l->micros : 1)
                                : 0);
    uint64_t Tc = (uint64_t)(m->seq / msr_plan_cp(l));
    uint64_t act = (uint64_t)l->micro_batch * Tc * (uint64_t)m->channels * MSR_PLAN_F32;
    if (l->tp > 1 && act > shm_max)
        o->shm += shm_tiled((uint64_t)l->tp, act, l->sp, 0);
    *acts_after_p = msr_plan_whole_path(l) ? o->activations : 0;
}

void msr_plan_rank(const msr_plan_model_t *m, const msr_plan_layout_t *lay,
                   msr_plan_precision_t prec, int rank, msr_plan_rank_t *o)
{
    msr_plan_layout_t l = with_defaults(lay);
    memset(o, 0, sizeof *o);
    int cp = msr_plan_cp(&l);
    o->tp_rank = rank % l.tp;
    o->cp_rank = rank / l.tp % cp;
    o->pp_rank = rank / (l.tp * cp) % l.pp;
    o->dp_rank = rank / (l.tp * cp * l.pp);
    int runtime = msr_plan_is_runtime(m, prec);
    msr_plan_part_t p;
    msr_plan_part_of(m, &l, o->pp_rank, &p);
    if (prec == MSR_PLAN_BF16_RUNTIME && runtime) {
        o->bf16_scratch = msr_plan_bf16_scratch_bytes(m, &l, p.blocks, p.moe_blocks, p.has_head);
        /* and the bf16 copy of the part's flat parameters, whose weights
         * are rounded once a step (parallel/train.c set_precision): none
         * under ZeRO-3 or the parameters' offload */
        if (l.zero < 3 && !(l.offload & MSR_PLAN_OFFLOAD_PARAMS))
            o->bf16_scratch += 2 * p.total;
    }
    msr_plan_dp_layout_t d;
    msr_plan_dp_layout(&p, &l, o->dp_rank * cp + o->cp_rank, &d); /* its rank among the replicas */
    o->part_params = p.total;
    o->shard_elems = d.shard;
    o->replicated_elems = d.replicated;
    o->buckets = d.buckets;
    rank_state(&l, prec, runtime, &p, d.shard, o);
    if (runtime && l.zero >= 3 && (l.offload & MSR_PLAN_OFFLOAD_PARAMS))
        o->params = msr_plan_offload_params_z3(&p, &l, o->dp_rank * cp + o->cp_rank);
    rank_activations(m, &l, prec, runtime, o);
    if (m->experts > 0)
        rank_experts(m, &l, prec, runtime, &p, o);

    /* pipeline buffers (parallel/mp.c msr_mp_create): the gradients sent
     * back, one per frame, and the last stage's copy of wte and its
     * gradient (GPT's tied head) */
    uint64_t w = runtime ? MSR_PLAN_F32 : (prec == MSR_PLAN_BF16 ? 2 : 4);
    uint64_t Tc = (uint64_t)(m->seq / cp), Tl = l.sp ? Tc / (uint64_t)l.tp : Tc;
    uint64_t Nl = (uint64_t)l.micro_batch * Tl, C = (uint64_t)m->channels;
    if (l.pp > 1 && (o->pp_rank > 0 || l.chunks > 1))
        o->comm += (uint64_t)l.micros * (uint64_t)l.chunks * Nl * C * w;
    if (l.pp > 1 && o->pp_rank == l.pp - 1 && m->arch == MSR_PLAN_GPT)
        o->comm += 2 * (uint64_t)(m->vocab / l.tp) * C * w;

    uint64_t during, after, acts_after;
    rank_transients(m, &l, runtime, w, &p, &d, o, &during, &after, &acts_after);
    o->total = msr_plan_rank_rows(o) - o->activations - o->buckets_bound +
               msr_plan_max_u64(o->activations + during, acts_after + after);
}

uint64_t msr_plan_peak(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                       msr_plan_precision_t prec, int *rank_p)
{
    uint64_t best = 0;
    int stage = msr_plan_cp(l) * l->tp, who = 0;
    /* the tp and cp ranks of a stage hold equal slices and positions, and
     * replica 0 owns the largest shard: the stages' first ranks suffice */
    for (int r = 0; r < stage * l->pp; r += stage) {
        msr_plan_rank_t o;
        msr_plan_rank(m, l, prec, r, &o);
        if (o.total > best) {
            best = o.total;
            who = r;
        }
    }
    if (rank_p != NULL)
        *rank_p = who;
    return best;
}
