/* train_gpt --calibrate: the communicator's latency and bandwidths and
 * the ring step's cost (train_gpt_calibrate.c says how). */
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
 * rest pass) until the slowest spent round_ns in one, agreed by
 * an allreduce so all stop together. Returns 0, or -1 with the failure
 * printed. */
static int calib_time_comm(msr_comm_t *world, uint64_t round_ns, msr_status_t (*op)(void *),
                           void *arg, const char *what, double *secs_p)
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
        if (dt * 1e9 >= (double)round_ns || reps >= ((uint64_t)1 << 30)) {
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
 * (n-1)/n bytes cross each rank's link (planner/plan_cost.c). */
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
    const uint64_t comm_round = calib_round_ns(o, CALIB_COMM_ROUND_NS);
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
    if (calib_time_comm(world, comm_round, calib_ring_op, &alone, "the ring's attention",
                        &t_alone) == 0 &&
        calib_time_comm(world, comm_round, calib_ring_op, &ring, "the ring's hand-offs", &t_ring) ==
            0) {
        double xfer = c->latency_us * 1e-6 + (double)count * sizeof(float) / (c->intra_gbs * 1e9);
        double hand = (t_ring - t_alone) / CALIB_RING_STEPS - xfer;
        *secs_p = hand > 0 ? hand : 0;
        rc = 0;
    }
    calib_bufs_free(&b);
    msr_free(blk);
    return rc;
}

/* A message's fixed cost, seconds, into *lat_p: half a quiet round trip
 * to a rank of this node and of another, and half a one-element allreduce
 * of every rank of the node at once, the largest. Collective; 0, or -1
 * with the failure printed. */
static int calib_latency(msr_comm_t *world, msr_comm_t *local, const int *node, float *buf,
                         uint64_t comm_round, double *lat_p, unsigned *measured)
{
    int n = msr_comm_size(world);
    double lat = 0;
    for (int same = 1; same >= 0; same--) {
        int peer = calib_peer(node, n, same);
        if (peer < 0)
            continue;
        calib_pingpong_t pp = {world, 0, peer, buf, 1};
        double s;
        if (calib_time_comm(world, comm_round, calib_pingpong_op, &pp, "a round trip", &s) != 0)
            return -1;
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
        if (calib_time_comm(world, comm_round, calib_allreduce_op, &ar, "a small allreduce", &s) !=
            0)
            return -1;
        if (s / 2 > lat)
            lat = s / 2;
        *measured |= 1u << CALIB_LATENCY;
    }
    *lat_p = lat;
    return 0;
}

/* Latency and bandwidth inside a node and between nodes, and the ring's
 * hand-offs (calib_ring_step), into c; measured gets the CALIB_* bits of
 * what was. */
int calib_comm(const options_t *o, msr_comm_t *world, const job_t *job, size_t bytes,
               msr_plan_cluster_t *c, unsigned *measured)
{
    const uint64_t comm_round = calib_round_ns(o, CALIB_COMM_ROUND_NS);
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
    if (calib_latency(world, local, node, buf, comm_round, &lat, measured) != 0)
        goto out;
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
        if (calib_time_comm(world, comm_round, calib_allreduce_op, &ar,
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
