/* The collective algorithms of the UCX backend, each a step function that
 * posts tagged messages, returns MSR_IN_PROGRESS while they fly and resumes
 * where it stopped.
 *
 *   allreduce       direct (small, small groups), recursive doubling, ring
 *   reduce_scatter  direct, ring
 *   allgather       direct, ring
 *   broadcast       binomial tree, pipelined chain
 *   reduce          binomial tree, pipelined chain
 *   alltoall(v)     pairwise exchange, a window of steps in flight
 *   barrier         dissemination
 *
 * The algorithms live in coll_rounds.c, coll_ring.c and coll_rooted.c,
 * their messages and scratch in coll_ops.c; this file chooses and starts
 * them. The state that lives from one step to the next is the algorithm's
 * struct in the request (ucx_impl.h). The pipelined ones (ring, chains, alltoall)
 * do all they can at each step from their counters; the others keep where
 * they resume in their struct's phase, jump there first and set it before
 * each wait:
 *
 *     switch (x->phase) { case X_START: break; case X_WAIT: goto wait; }
 *     ... post ...
 *     x->phase = X_WAIT;
 * wait:
 *     st = ucx_ops_wait(r);
 *     if (st != MSR_OK)
 *         return st;  (MSR_IN_PROGRESS, or the failure)
 *     ... use what arrived ...
 *
 * Every reduction combines operands in an order fixed by the ranks alone
 * (never by arrival), so results are bitwise reproducible. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/shm_defaults.h"
#include "base/util.h"
#include "comm/ucx/coll_impl.h"
#include "comm/ucx/shm_impl.h"

/* ---- choosing ---- */

static const char *const algo_names[] = {"auto",  "direct",   "rd",  "ring", "binomial",
                                         "chain", "pairwise", "shm", "hier"};

static ucx_algo_t parse_algo(const char *var)
{
    const char *v = getenv(var);
    if (v == NULL || *v == '\0')
        return UCX_ALGO_AUTO;
    for (size_t i = 0; i < sizeof algo_names / sizeof algo_names[0]; i++)
        if (strcmp(v, algo_names[i]) == 0)
            return (ucx_algo_t)i;
    MSR_WARN("comm: %s=%s is not an algorithm (auto, direct, rd, ring, binomial, chain, "
             "pairwise, shm, hier): using auto",
             var, v);
    return UCX_ALGO_AUTO;
}

/* never (0), always (1) or auto (2, by measurement: shm_tiles.c) */
static int parse_nt(const char *var)
{
    const char *v = getenv(var);
    if (v == NULL || *v == '\0' || strcmp(v, "auto") == 0)
        return 2;
    if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)
        return *v - '0';
    MSR_WARN("comm: %s=%s is not 0, 1 or auto: using auto", var, v);
    return 2;
}

static size_t env_bytes(const char *name, size_t def)
{
    return (size_t)msr_env_i64(name, (int64_t)def, 0, INT64_MAX);
}

void ucx_tuning_read(ucx_tuning_t *t, int local_size)
{
    (void)local_size;
    memset(t, 0, sizeof *t);
    t->force[MSR_COLL_ALLREDUCE] = parse_algo("MSR_COMM_ALGO_ALLREDUCE");
    t->force[MSR_COLL_REDUCE_SCATTER] = parse_algo("MSR_COMM_ALGO_REDUCE_SCATTER");
    t->force[MSR_COLL_ALLGATHER] = parse_algo("MSR_COMM_ALGO_ALLGATHER");
    t->force[MSR_COLL_BROADCAST] = parse_algo("MSR_COMM_ALGO_BROADCAST");
    t->force[MSR_COLL_REDUCE] = parse_algo("MSR_COMM_ALGO_REDUCE");
    /* Measured on the 2-core development machine (docs/comm.md). */
    t->allreduce_direct_max = env_bytes("MSR_COMM_ALLREDUCE_DIRECT_MAX", 2048);
    t->allreduce_ring_min = env_bytes("MSR_COMM_ALLREDUCE_RING_MIN", 16384);
    t->allreduce_ring_min_2 = env_bytes("MSR_COMM_ALLREDUCE_RING_MIN_2", 1 << 20);
    t->direct_max_ranks = (int)msr_env_i64("MSR_COMM_DIRECT_MAX_RANKS", 8, 2, 1 << 20);
    t->reduce_scatter_ring_min = env_bytes("MSR_COMM_REDUCE_SCATTER_RING_MIN", 4 << 20);
    t->allgather_ring_min = env_bytes("MSR_COMM_ALLGATHER_RING_MIN", 32 << 20);
    t->bcast_chain_min = env_bytes("MSR_COMM_BCAST_CHAIN_MIN", 8 << 20);
    t->reduce_chain_min = env_bytes("MSR_COMM_REDUCE_CHAIN_MIN", 1024);
    t->segment = env_bytes("MSR_COMM_SEGMENT", 1 << 20);
    if (t->segment < 4096)
        t->segment = 4096;
    t->window = (int)msr_env_i64("MSR_COMM_WINDOW", 2, 1, 256);
    t->alltoall_window = (int)msr_env_i64("MSR_COMM_ALLTOALL_WINDOW", 16, 1, 4096);
    t->shm_max = env_bytes("MSR_COMM_SHM_MAX", MSR_SHM_MAX_BYTES);
    t->shm_tile = env_bytes("MSR_COMM_SHM_TILE", MSR_SHM_TILE_BYTES);
    t->shm_depth = (int)msr_env_i64("MSR_COMM_SHM_TILES", MSR_SHM_TILES, 2, 64);
    t->shm_nt = parse_nt("MSR_COMM_SHM_NT");
    t->shm_nt_min = env_bytes("MSR_COMM_SHM_NT_MIN", 64 << 10);
    t->shm_segment = env_bytes("MSR_COMM_SHM_SEGMENT", MSR_SHM_SEGMENT_BYTES);
    t->shm_spin = (int)msr_env_i64("MSR_COMM_SHM_SPIN", 256, 0, 1 << 20);
    t->shm_lined_pair = (size_t)msr_env_i64("MSR_COMM_SHM_LINED_PAIR", SHM_LINED_PAIR,
                                            SHM_LINED_MAX, SHM_LINED_PAIR);
    if (t->shm_max > ((size_t)64 << 20))
        t->shm_max = (size_t)64 << 20;
    /* Groups over several nodes (not all on this machine): the two levels
     * from these sizes (bytes of the whole vector; over rate-limited links
     * between network namespaces they won from 16-64 KiB on, docs/comm.md).
     * Broadcast: on 4 nodes 1.9-2x the binomial tree that auto took below
     * the chain's threshold, from 64 KiB; on 2 nodes even. Reduce: as fast
     * as the flat chain auto takes (0.9-1.05x), which it keeps: only when
     * forced or given a size. */
    t->hier = (int)msr_env_i64("MSR_COMM_HIER", 1, 0, 1);
    t->hier_min[MSR_COLL_ALLREDUCE] = env_bytes("MSR_COMM_HIER_ALLREDUCE_MIN", 64 << 10);
    t->hier_min[MSR_COLL_REDUCE_SCATTER] = env_bytes("MSR_COMM_HIER_REDUCE_SCATTER_MIN", 64 << 10);
    t->hier_min[MSR_COLL_ALLGATHER] = env_bytes("MSR_COMM_HIER_ALLGATHER_MIN", 64 << 10);
    t->hier_min[MSR_COLL_REDUCE] = env_bytes("MSR_COMM_HIER_REDUCE_MIN", (size_t)INT64_MAX);
    /* On 2 and 4 nodes of those links the allreduce was 1.03-1.5x the ring
     * at every size from 64 KiB, the allgather 1.07-1.5x (measured no
     * further); the reduce-scatter lost on 4 nodes (0.36-0.82x: the folds
     * in the node on that host's 2 cores). */
    t->hier_max_nodes = (int)msr_env_i64("MSR_COMM_HIER_MAX_NODES", 4, 2, 1 << 20);
    t->hier_rs_max_nodes =
        (int)msr_env_i64("MSR_COMM_HIER_REDUCE_SCATTER_MAX_NODES", 2, 2, 1 << 20);
    /* the exchange between nodes in pipelined units: a message per node of
     * about this size, this many units in flight */
    t->hier_chunk = env_bytes("MSR_COMM_HIER_CHUNK", 256 << 10);
    if (t->hier_chunk < 4096)
        t->hier_chunk = 4096;
    t->hier_window = (int)msr_env_i64("MSR_COMM_HIER_WINDOW", 8, 1, 64);
    t->hier_min[MSR_COLL_BROADCAST] = env_bytes("MSR_COMM_HIER_BROADCAST_MIN", 64 << 10);
}

static ucx_algo_t choose(const ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    const ucx_tuning_t *t = &r->uc->tune;
    ucx_algo_t f = t->force[a->coll];
    size_t bytes = r->bytes, total = r->bytes * (size_t)r->n;
    int small_group = r->n <= t->direct_max_ranks;
    /* a group over several nodes: two levels (hier.c), forced or from the
     * op's threshold; a group on one node never has them (forced, it gets
     * what auto gives it) */
    int hier = r->uc->hier && ucx_hier_fits(r);
    if (hier &&
        (f == UCX_ALGO_HIER ||
         (f == UCX_ALGO_AUTO && !r->uc->one_host &&
          ucx_hier_nodes(r->uc) <=
              (a->coll == MSR_COLL_REDUCE_SCATTER ? t->hier_rs_max_nodes : t->hier_max_nodes) &&
          (a->coll == MSR_COLL_REDUCE_SCATTER || a->coll == MSR_COLL_ALLGATHER ? total : bytes) >=
              t->hier_min[a->coll])))
        return UCX_ALGO_HIER;
    if (f == UCX_ALGO_HIER)
        f = UCX_ALGO_AUTO;
    switch (a->coll) {
    case MSR_COLL_ALLREDUCE:
        if (r->uc->shm && (f == UCX_ALGO_AUTO || f == UCX_ALGO_SHM) &&
            (bytes <= r->uc->shm_slot || r->uc->shm_tile))
            return UCX_ALGO_SHM;
        if (f == UCX_ALGO_DIRECT || f == UCX_ALGO_RD || f == UCX_ALGO_RING)
            return f;
        if (r->n == 2) /* direct and recursive doubling are the same exchange */
            return bytes >= t->allreduce_ring_min_2 ? UCX_ALGO_RING : UCX_ALGO_DIRECT;
        if (bytes <= t->allreduce_direct_max && small_group)
            return UCX_ALGO_DIRECT;
        /* the ring needs an element per rank to be worth its 2(n-1) steps */
        return bytes >= t->allreduce_ring_min && a->count >= (uint64_t)r->n ? UCX_ALGO_RING
                                                                            : UCX_ALGO_RD;
    case MSR_COLL_REDUCE_SCATTER:
        if (r->uc->shm && (f == UCX_ALGO_AUTO || f == UCX_ALGO_SHM) &&
            (total <= r->uc->shm_slot || r->uc->shm_tile))
            return UCX_ALGO_SHM;
        if (f == UCX_ALGO_DIRECT || f == UCX_ALGO_RING)
            return f;
        return total < t->reduce_scatter_ring_min && small_group ? UCX_ALGO_DIRECT : UCX_ALGO_RING;
    case MSR_COLL_ALLGATHER:
        if (r->uc->shm && (f == UCX_ALGO_AUTO || f == UCX_ALGO_SHM) &&
            (bytes <= r->uc->shm_slot || r->uc->shm_tile))
            return UCX_ALGO_SHM;
        if (f == UCX_ALGO_DIRECT || f == UCX_ALGO_RING)
            return f;
        return total < t->allgather_ring_min && small_group ? UCX_ALGO_DIRECT : UCX_ALGO_RING;
    case MSR_COLL_BROADCAST:
    case MSR_COLL_REDUCE: {
        /* small vectors: a broadcast through the slots, also on a crowded
         * machine (its root writes once and runs ahead of the readers, each
         * reader waits for the root alone: one wake-up deep, where the
         * tree is log n); a reduce through the tree's messages, which beat
         * the tiles' hand-offs */
        if (r->uc->shm && a->coll == MSR_COLL_BROADCAST && bytes <= r->uc->shm_slot &&
            (f == UCX_ALGO_SHM || f == UCX_ALGO_AUTO))
            return UCX_ALGO_SHM;
        if (r->uc->shm_tile && (f == UCX_ALGO_SHM || (f == UCX_ALGO_AUTO && bytes > t->shm_max)))
            return UCX_ALGO_SHM;
        if (f == UCX_ALGO_BINOMIAL || f == UCX_ALGO_CHAIN)
            return f;
        /* A chain is n-1 hops deep: in large groups only for large vectors. */
        size_t min = a->coll == MSR_COLL_BROADCAST ? t->bcast_chain_min : t->reduce_chain_min;
        if (!small_group && min < ((size_t)1 << 20))
            min = (size_t)1 << 20;
        return bytes >= min ? UCX_ALGO_CHAIN : UCX_ALGO_BINOMIAL;
    }
    default:
        return UCX_ALGO_PAIRWISE;
    }
}

/* A chain of ranks relative to root: slots, whether it receives into
 * slots in scratch (and keeps its partial sums after them). */
static msr_status_t chain_setup(ucx_req_t *r, int slots)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_chain_t *c = &r->chain;
    ucx_pipe_t *p = &c->pipe;
    uint64_t nseg = ucx_nsegments(a->count, r->es, r->uc->tune.segment);
    c->vr = ucx_mod(r->me - a->root, r->n);
    p->nseg = nseg;
    p->slot_bytes = ((a->count + nseg - 1) / nseg) * r->es;
    msr_status_t st = ucx_pipe_setup(r, p);
    if (st != MSR_OK || !slots)
        return st;
    return ucx_scratch_get(r, (size_t)(p->window * p->slot_bytes) + (c->vr == 0 ? 0 : r->bytes));
}

/* The shared-memory paths: the operation's number, counted on every member
 * alike (the choice depends only on arguments all ranks share). */
static uint64_t shm_number(ucx_req_t *r, const char *algo)
{
    r->algo = algo;
    r->shm = 1;
    r->uc->engine->shm_active++;
    return ucx_shm_number(r->uc);
}

uint64_t ucx_shm_number(ucx_comm_t *uc)
{
    return ++uc->shm_seq;
}

/* The slots, for vectors up to a slot (a reduce-scatter's whole input),
 * and the barrier. */
static msr_status_t shm_start(ucx_req_t *r, const char *algo)
{
    r->step = ucx_shm_step;
    r->slots.seq = shm_number(r, algo);
    return MSR_OK;
}

/* The tiled path, for vectors larger than the slots. */
static msr_status_t shm_tiled_start(ucx_req_t *r, const char *algo)
{
    size_t scratch = ucx_shm_tiled_scratch(r);
    if (scratch) {
        msr_status_t st = ucx_scratch_get(r, scratch); /* before the operation is numbered */
        if (st != MSR_OK)
            return st;
    }
    r->step = ucx_shm_tiled_step;
    r->tiles.seq = shm_number(r, algo);
    ucx_shm_tiled_init(r);
    return MSR_OK;
}

/* The peer-to-peer calls, the barrier and alltoall(v): no algorithm to
 * choose. */
static msr_status_t start_fixed(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    int n = r->n;
    switch (a->coll) {
    case MSR_COLL_SEND:
        r->step = ucx_step_send;
        r->algo = "send";
        return MSR_OK;
    case MSR_COLL_RECV:
        r->step = ucx_step_recv;
        r->algo = "recv";
        return MSR_OK;
    case MSR_COLL_BARRIER:
        if (r->uc->shm)
            return shm_start(r, "barrier(shm)");
        r->step = ucx_step_barrier;
        r->algo = "barrier";
        return ucx_ops_reserve(r, 2);
    default: /* alltoall(v) */
        break;
    }
    r->step = ucx_step_alltoall;
    r->algo = a->coll == MSR_COLL_ALLTOALL ? "alltoall" : "alltoallv";
    int w = r->uc->tune.alltoall_window < n ? r->uc->tune.alltoall_window : n;
    r->a2a.window = w;
    msr_status_t st = ucx_ops_reserve(r, 2 * w);
    if (st != MSR_OK)
        return st;
    r->nops = 2 * w;
    for (int i = 0; i < r->nops; i++)
        r->ops[i].h = NULL;
    if (a->coll == MSR_COLL_ALLTOALL && a->in_place)
        return ucx_scratch_get(r, r->bytes * (size_t)n);
    return MSR_OK;
}

/* The direct exchange of allreduce and reduce-scatter: every block to
 * every peer at once, n copies in scratch. */
static msr_status_t start_direct(ucx_req_t *r, ucx_step_fn step, const char *name)
{
    r->step = step;
    r->algo = name;
    msr_status_t st = ucx_ops_reserve(r, 2 * (r->n - 1));
    if (st != MSR_OK)
        return st;
    return ucx_scratch_get(r, r->bytes * (size_t)r->n);
}

static msr_status_t start_allreduce(ucx_req_t *r, ucx_algo_t algo)
{
    if (algo == UCX_ALGO_SHM)
        return r->bytes <= r->uc->shm_slot ? shm_start(r, "allreduce(shm)")
                                           : shm_tiled_start(r, "allreduce(shm tiles)");
    if (algo == UCX_ALGO_DIRECT)
        return start_direct(r, ucx_step_allreduce_direct, "allreduce(direct)");
    if (algo == UCX_ALGO_RING) {
        r->step = ucx_step_ring;
        r->algo = "allreduce(ring)";
        return ucx_ring_setup(r);
    }
    r->step = ucx_step_allreduce_rd;
    r->algo = "allreduce(rd)";
    for (r->rd.p2 = 1; r->rd.p2 * 2 <= r->n; r->rd.p2 *= 2) {
    }
    r->rd.rem = r->n - r->rd.p2;
    msr_status_t st = ucx_ops_reserve(r, 2);
    if (st != MSR_OK)
        return st;
    return ucx_scratch_get(r, r->bytes);
}

/* Broadcast and reduce: a chain of segments, or a binomial tree. */
static msr_status_t start_rooted(ucx_req_t *r, ucx_algo_t algo)
{
    const msr_coll_args_t *a = &r->pub.args;
    int reduce = a->coll == MSR_COLL_REDUCE;
    if (algo == UCX_ALGO_SHM && !reduce && r->bytes <= r->uc->shm_slot)
        return shm_start(r, "broadcast(shm)");
    if (algo == UCX_ALGO_SHM)
        return shm_tiled_start(r, reduce ? "reduce(shm tiles)" : "broadcast(shm tiles)");
    if (algo == UCX_ALGO_CHAIN) {
        r->step = reduce ? ucx_step_reduce_chain : ucx_step_bcast_chain;
        r->algo = reduce ? "reduce(chain)" : "broadcast(chain)";
        return chain_setup(r, reduce);
    }
    r->tree.vr = ucx_mod(r->me - a->root, r->n);
    if (!reduce) {
        r->step = ucx_step_bcast_binomial;
        r->algo = "broadcast(binomial)";
        return ucx_ops_reserve(r, 64);
    }
    r->step = ucx_step_reduce_binomial;
    r->algo = "reduce(binomial)";
    msr_status_t st = ucx_ops_reserve(r, 2);
    if (st != MSR_OK)
        return st;
    return ucx_scratch_get(r, r->tree.vr == 0 ? r->bytes : 2 * r->bytes);
}

/* The slots serve a group on one node without two levels: the barrier,
 * and the collectives whose input fits a slot (a reduce-scatter's whole
 * vector) unless MSR_COMM_ALGO_<COLL> forces another algorithm; what
 * choose() and start_fixed() pick for such a group. */
const char *ucx_slots_algo(const ucx_comm_t *uc, const msr_coll_args_t *a, size_t bytes)
{
    if (uc->shm == NULL || uc->hier != NULL)
        return NULL;
    ucx_algo_t f = uc->tune.force[a->coll];
    int free_choice = f == UCX_ALGO_AUTO || f == UCX_ALGO_SHM || f == UCX_ALGO_HIER;
    switch (a->coll) {
    case MSR_COLL_BARRIER:
        return "barrier(shm)";
    case MSR_COLL_ALLREDUCE:
        return free_choice && bytes <= uc->shm_slot ? "allreduce(shm)" : NULL;
    case MSR_COLL_REDUCE_SCATTER:
        return free_choice && bytes * (size_t)uc->comm->size <= uc->shm_slot ? "reduce_scatter(shm)"
                                                                             : NULL;
    case MSR_COLL_ALLGATHER:
        return free_choice && bytes <= uc->shm_slot ? "allgather(shm)" : NULL;
    case MSR_COLL_BROADCAST:
        return free_choice && bytes <= uc->shm_slot ? "broadcast(shm)" : NULL;
    default:
        return NULL;
    }
}

msr_status_t ucx_coll_start(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    r->n = r->uc->comm->size;
    r->me = r->uc->comm->rank;
    r->es = msr_dtype_size(a->dtype);
    r->bytes = (size_t)a->count * r->es;
    const char *slots = ucx_slots_algo(r->uc, a, r->bytes);
    if (slots != NULL)
        return shm_start(r, slots);
    switch (a->coll) {
    case MSR_COLL_SEND:
    case MSR_COLL_RECV:
    case MSR_COLL_BARRIER:
    case MSR_COLL_ALLTOALL:
    case MSR_COLL_ALLTOALLV:
        return start_fixed(r);
    default:
        break;
    }
    ucx_algo_t algo = choose(r);
    if (algo == UCX_ALGO_HIER)
        return ucx_hier_start(r);
    switch (a->coll) {
    case MSR_COLL_ALLREDUCE:
        return start_allreduce(r, algo);
    case MSR_COLL_REDUCE_SCATTER:
        if (algo == UCX_ALGO_SHM)
            return r->bytes * (size_t)r->n <= r->uc->shm_slot
                       ? shm_start(r, "reduce_scatter(shm)")
                       : shm_tiled_start(r, "reduce_scatter(shm tiles)");
        if (algo == UCX_ALGO_DIRECT)
            return start_direct(r, ucx_step_reduce_scatter_direct, "reduce_scatter(direct)");
        r->step = ucx_step_ring;
        r->algo = "reduce_scatter(ring)";
        return ucx_ring_setup(r);
    case MSR_COLL_ALLGATHER:
        if (algo == UCX_ALGO_SHM)
            return r->bytes <= r->uc->shm_slot ? shm_start(r, "allgather(shm)")
                                               : shm_tiled_start(r, "allgather(shm tiles)");
        r->step = algo == UCX_ALGO_DIRECT ? ucx_step_allgather_direct : ucx_step_allgather_ring;
        r->algo = algo == UCX_ALGO_DIRECT ? "allgather(direct)" : "allgather(ring)";
        return ucx_ops_reserve(r, 2 * (r->n - 1));
    case MSR_COLL_BROADCAST:
    case MSR_COLL_REDUCE:
        return start_rooted(r, algo);
    default:
        return MSR_ERR_INTERNAL;
    }
}
