/* train_gpt --calibrate: what a node does to its ranks -- frames gone
 * cold, cores lent by waiting ranks, memory, cores -- and the ranks'
 * measurements agreed into one cluster (train_gpt_calibrate.c says how). */
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

/* A Llama's frames: its grouped-query attention (its qkv fits in 3 N C),
 * its products without bias. */
static void calib_frame_fwd(const calib_bufs_t *b, const calib_frame_t *f)
{
    if (b->llama)
        msr_attention_gqa_forward(NULL, f->y, f->att, f->qkv, b->B, b->T, b->C, b->NH, b->KVH);
    else
        msr_attention_forward(NULL, f->y, f->att, f->qkv, b->B, b->T, b->C, b->NH);
    msr_matmul_forward(NULL, f->h, f->x, b->weight, b->llama ? NULL : b->bias, b->N, b->C,
                       4 * b->C);
}

static void calib_frame_bwd(const calib_bufs_t *b, const calib_frame_t *f)
{
    msr_matmul_backward(NULL, b->dinp, b->dweight, b->llama ? NULL : b->dbias, b->dout, f->x,
                        b->weight, b->N, b->C, 4 * b->C);
    if (b->llama)
        msr_attention_gqa_backward(NULL, b->dinp, b->scratch, b->dout, f->qkv, f->att, b->B, b->T,
                                   b->C, b->NH, b->KVH);
    else
        msr_attention_backward(NULL, b->dinp, b->scratch, b->dout, f->qkv, f->att, b->B, b->T, b->C,
                               b->NH);
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
    return calib_rounds(calib_frames_run, &x, b->round_ns, NULL) / k;
}

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
    double fit[CALIB_COLD_COUNTS] = {0}; /* every one below counts set by the blocks */
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
int calib_cold(const options_t *o, msr_comm_t *comm, int rpn, calib_cold_t *out)
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
int calib_lend(const options_t *o, msr_comm_t *comm, int local, int rpn, int cores, double *lend,
               double *speedup)
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
            all_s = calib_rounds(calib_lend_run, &b, b.round_ns, NULL);
        if (st == MSR_OK && (st = msr_comm_barrier(comm)) == MSR_OK && ok && computes)
            alone_s = calib_rounds(calib_lend_run, &b, b.round_ns, NULL);
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

/* The machine's memory per rank, GiB; 0 when unknown. */
double calib_mem_gib(int ranks_per_node)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0 || ranks_per_node < 1)
        return 0;
    return (double)pages * (double)page / ranks_per_node / (1024.0 * 1024.0 * 1024.0);
}

/* The ranks' measurements into one cluster, alike on every rank: the
 * slowest rank's rates (a node whose ranks are all busy, as in training),
 * the least memory, the largest costs and ranks per node. mins: the 7
 * rates and memory, 0 where a rank failed; maxs: the kernel cost, ranks
 * per node, mm_rows_half, ring_chunk_half. */
int calib_agree(msr_comm_t *comm, const double *mine, double *mins, double *maxs)
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
    for (int k = 0; k < 5; k++)
        maxs[k] = v[7 + k];
    return 0;
}

/* The union of the ranks' cores (nodes alike: the world's union), or -1
 * (said on stderr). Collective. */
int calib_cores(msr_comm_t *comm)
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
