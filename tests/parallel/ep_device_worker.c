/* Expert parallel on the device interface (ep_device.sh starts it under
 * the real msrun on 2 and 4 ranks):
 *
 *   ep_device_worker EP ZERO [mp]
 *
 * A MoE trainer (every block MoE, 4 experts, top 2) over the world: dp =
 * the world's size, ep EP, ZeRO ZERO; with "mp" on the model-parallel
 * runtime (a mesh of dp ranks, tp = pp = 1) with the device given as
 * mp's (dp's left to the CPU). It trains STEPS steps of 2 micro-batches
 * twice: on the default device (NULL: the CPU) and on a device that
 * counts its calls (ep_device.h). Checked, on every rank:
 *
 * - the losses of the two runs and their experts at the end are the
 *   same, bitwise;
 * - every buffer of the ep path is a live allocation of the counting
 *   device, of its exact size: the layout's MoE table's work space
 *   (10 per frame of each held block, the load counts of each block, 7
 *   shared), and the experts' store (parameters and gradients) or, under
 *   ZeRO-3 with replicas, its shards and gathers (3 gathered blocks, the
 *   shard's parameters and gradients, the gathered gradients); the
 *   MoE table's index tables and counts (choices, rows, shares, filled
 *   rows, loads) are of the device's host memory (host_alloc), every
 *   other buffer of its own, and each is freed by its kind's call; the
 *   model's own buffers (parameters but under ZeRO-3, gradients under
 *   ZeRO 0-1, and on the data-parallel runtime the activations and work
 *   space) are the device's own too;
 * - in the steps the device saw (its run on the counting kernels,
 *   count_kernels.h): kept choices (the load the router counted) and no
 *   host to device copy into the dispatch buffer, whose rows the table's
 *   moe_dispatch writes, and each of the table's routing and combine
 *   entries called once per block and micro-batch (forward or backward);
 *   two memsets of the dispatch buffer per block and micro-batch (the
 *   forward's and the combine's backward's), and one of the experts'
 *   output buffer; under ZeRO-3 one memset of the gathered gradients per
 *   block and micro-batch and device-to-device copies into the gathered
 *   blocks.
 *
 * It prints "rank R: ep buffers on the device: N", "rank R: dispatch
 * kept: K through the table: D, memsets: M" and rank 0 "ok ep device"; every failed
 * check prints "FAIL" and exits 1. Linked to the static modules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "layout/layout.h"
#include "model/data.h"
#include "model/moe_impl.h"
#include "msrun/msrun.h"
#include "parallel/mesh.h"
#include "parallel/train_impl.h"
#include "tests/parallel/count_kernels.h"
#include "tests/parallel/ep_device.h"
#include "tests/parallel/worker_config.h"
#include "tests/worker_fail.h"

WORKER_FAIL("ep_device_worker", exit)

enum { STEPS = 3, ACCUM = 2 };

static msr_train_config_t config(int dp, int rank, int ep, int zero, int mp,
                                 const msr_device_t *dev)
{
    msr_train_config_t c = worker_config(2, 16, ACCUM, dp, rank);
    c.model.moe = (msr_gpt_moe_t){4, 2, 1, 1.0, 0.01};
    c.ep = ep;
    c.par.zero = zero;
    c.par.zero_min_bytes = 0;
    c.par.bucket_bytes = 4000;
    c.mp_always = mp;
    if (mp)
        c.mp.device = dev;
    else
        c.par.device = dev;
    if (dev != NULL) /* and the counting kernels */
        c.kernels = count_kernels();
    return c;
}

/* Buffer p of bytes must be the counting device's, of its host memory
 * when host (the MoE layer's index tables and counts), else of its own;
 * counted in *n_p. */
static void device_made_as(const void *p, size_t bytes, int host, const char *what, int i, int *n_p)
{
    const ep_device_buf_t *b = ep_device_buf(p);
    if (b == NULL)
        fail("%s %d: not an allocation of the device", what, i);
    if (b->bytes != bytes)
        fail("%s %d: %zu bytes from the device, want %zu", what, i, b->bytes, bytes);
    if (b->host != host)
        fail("%s %d: the device's %s memory, want its %s", what, i, b->host ? "host" : "own",
             host ? "host memory" : "own");
    (*n_p)++;
}

static void device_made(const void *p, size_t bytes, const char *what, int i, int *n_p)
{
    device_made_as(p, bytes, 0, what, i, n_p);
}

/* The MoE table's buffers the host reads and writes (moe.c). */
static int host_table(int w)
{
    return w == MSR_MOE_WORK_CHOICE || w == MSR_MOE_WORK_POS || w == MSR_MOE_WORK_FRAC ||
           w == MSR_MOE_WORK_USED || w == MSR_MOE_WORK_GCHOICE || w == MSR_MOE_WORK_LOAD;
}

static size_t work_bytes(const msr_moe_t *moe, int w)
{
    return msr_layout_moe_work(&moe->dims, w) * msr_layout_moe_work_size(w, sizeof(float));
}

/* Every ep buffer is the device's, and so are the model's own (those its
 * ZeRO stage keeps: msr_dp_model_flags); their number. */
static int check_buffers(const msr_trainer_t *tr)
{
    const msr_moe_t *moe = tr->model->moe;
    const msr_gpt_t *m = tr->model;
    int n = 0;
    size_t pf = m->num_params * sizeof(float);
    if (m->dev != ep_device())
        fail("the model's buffers are not the device's");
    if (m->params != NULL)
        device_made(m->params, pf, "model parameters", 0, &n);
    if (m->grads != NULL)
        device_made(m->grads, pf, "model gradients", 0, &n);
    if (m->acts_mem != NULL) /* a whole model's (the data-parallel runtime) */
        device_made(m->acts_mem, m->acts_count * sizeof(float), "model activations", 0, &n);
    if (m->work_mem != NULL)
        device_made(m->work_mem, m->work_count * sizeof(float), "model work space", 0, &n);
    if ((m->params == NULL) != (tr->cfg.par.zero == 3) || (m->acts_mem == NULL) != (tr->mp != NULL))
        fail("the model's buffers: parameters %s at ZeRO %d, activations %s",
             m->params ? "kept" : "none", tr->cfg.par.zero, m->acts_mem ? "kept" : "none");
    for (int i = 0; i < moe->nslots; i++) {
        device_made_as(moe->stats[i].load, work_bytes(moe, MSR_MOE_WORK_LOAD), 1, "load", i, &n);
        for (int f = 0; f < moe->frames && moe->store_of[i] >= 0; f++) {
            const moe_slot_t *s = &moe->slots[i * moe->frames + f];
            const void *b[] = {s->probs, s->choice, s->gate,  s->row,  s->frac,
                               s->xin,   s->fch,    s->fch_g, s->comb, s->used};
            for (int w = MSR_MOE_WORK_PROBS; w < MSR_MOE_WORK_SLOT_END; w++)
                device_made_as(b[w - MSR_MOE_WORK_PROBS], work_bytes(moe, w), host_table(w),
                               "frame buffer", w, &n);
        }
    }
    const void *shared[] = {moe->send,   moe->out,   moe->dout,  moe->dfch,
                            moe->dfch_g, moe->dgate, moe->dprobs};
    for (int w = MSR_MOE_WORK_SEND; w < MSR_MOE_WORK_GCHOICE; w++)
        device_made(shared[w - MSR_MOE_WORK_SEND], work_bytes(moe, w), "shared buffer", w, &n);
    size_t f = sizeof(float);
    if (!tr->ez) {
        size_t bytes = (moe->count > 0 ? moe->count : 1) * f;
        device_made(moe->params, bytes, "store parameters", 0, &n);
        device_made(moe->grads, bytes, "store gradients", 0, &n);
        return n;
    }
    size_t all = tr->ez_blk * (size_t)tr->rep_size, shard = (size_t)moe->nheld * tr->ez_n + 1;
    for (int i = 0; i < MSR_TRAIN_EZ_SLOTS; i++)
        device_made(tr->ez_slot[i], all * f, "gathered block", i, &n);
    device_made(tr->ez_params, shard * f, "shard parameters", 0, &n);
    device_made(tr->ez_grads, shard * f, "shard gradients", 0, &n);
    device_made(tr->ez_gfull, all * f, "gathered gradients", 0, &n);
    return n;
}

/* The kept choices the router counted so far, over the blocks. */
static long kept(const msr_moe_t *moe)
{
    long k = 0;
    for (int i = 0; i < moe->nslots; i++)
        for (int e = 0; e < moe->E; e++)
            k += (long)msr_moe_stats(moe, i)->load[e];
    return k;
}

/* The device's counts of the steps just taken (ep_device_reset before). */
static void check_counts(const msr_trainer_t *tr, long kept_before, int me)
{
    const msr_moe_t *moe = tr->model->moe;
    long per = (long)moe->nheld * ACCUM * STEPS; /* block forwards and backwards */
    const ep_device_buf_t *send = ep_device_buf(moe->send), *out = ep_device_buf(moe->out);
    long k = kept(moe) - kept_before;
    if (k <= 0 || send->copies[MSR_DEVICE_H2D] != 0)
        fail("dispatch: %ld kept choices (want some), %ld copies host to device (want none)", k,
             send->copies[MSR_DEVICE_H2D]);
    static const int once[] = {K_MROUTE, K_MDISP, K_MCOMB, K_MPSUM, K_MCOMBB, K_MDISPB, K_MROUTEB};
    for (size_t i = 0; i < sizeof once / sizeof once[0]; i++)
        if (count_kernel_calls[once[i]] != per)
            fail("%s called %ld times, want one per block pass: %ld", count_kernel_names[once[i]],
                 count_kernel_calls[once[i]], per);
    if (send->memsets != 2 * per || out->memsets != per)
        fail("memsets: dispatch %ld (want %ld), outputs %ld (want %ld)", send->memsets, 2 * per,
             out->memsets, per);
    printf("rank %d: dispatch kept: %ld through the table: %ld, memsets: %ld\n", me, k,
           count_kernel_calls[K_MDISP], send->memsets);
    if (!tr->ez)
        return;
    long d2d = 0;
    for (int i = 0; i < MSR_TRAIN_EZ_SLOTS; i++)
        d2d += ep_device_buf(tr->ez_slot[i])->copies[MSR_DEVICE_D2D];
    long gz = ep_device_buf(tr->ez_gfull)->memsets;
    if (d2d < 1 || gz != per)
        fail("ZeRO-3: %ld shard copies into the gathers (want some), %ld gradient memsets "
             "(want %ld)",
             d2d, gz, per);
    printf("rank %d: shard copies D2D: %ld, gathered gradients zeroed: %ld\n", me, d2d, gz);
}

/* STEPS steps on dev (NULL: the default) into losses; the experts at the
 * end into experts (count floats, allocated). */
static void train(const msr_dataset_t *ds, msr_comm_t *world, int ep, int zero, int mp,
                  const msr_device_t *dev, double *losses, float **experts, size_t *count)
{
    int me = msr_comm_rank(world), np = msr_comm_size(world);
    msr_train_config_t cfg = config(np, me, ep, zero, mp, dev);
    msr_trainer_t *tr = NULL;
    msr_mesh_t *mesh = NULL;
    if (mp) {
        OK(msr_mesh_create(world, np, 1, 1, 1, &mesh));
        OK(msr_trainer_create_mesh(&cfg, ds, mesh, &tr));
        if (tr->mp == NULL)
            fail("not on the model-parallel runtime");
    } else {
        OK(msr_trainer_create(&cfg, ds, world, &tr));
    }
    if (dev != NULL) {
        int n = check_buffers(tr);
        printf("rank %d: ep buffers on the device: %d\n", me, n);
        ep_device_reset();
        memset(count_kernel_calls, 0, sizeof count_kernel_calls);
    }
    long before = kept(tr->model->moe);
    for (int i = 0; i < STEPS; i++)
        OK(msr_trainer_step(tr, &losses[i]));
    if (dev != NULL)
        check_counts(tr, before, me);
    *count = msr_moe_count(tr->model->moe) + 1;
    if ((*experts = calloc(*count, sizeof(float))) == NULL)
        fail("out of memory");
    OK(msr_trainer_experts_whole(tr, *experts));
    msr_trainer_destroy(tr);
    msr_mesh_destroy(mesh);
    if (dev != NULL && ep_device_totals().mismatched != 0)
        fail("%ld buffers freed by the other kind's call (host_free for the device's, ...)",
             ep_device_totals().mismatched);
}

int main(int argc, char **argv)
{
    if (argc != 3 && (argc != 4 || strcmp(argv[3], "mp") != 0))
        fail("usage: ep_device_worker EP ZERO [mp]");
    int ep = atoi(argv[1]), zero = atoi(argv[2]), mp = argc == 4;
    msr_ctx_t *ctx;
    msr_comm_t *world = worker_world(&ctx, 0);
    int me = msr_comm_rank(world), np = msr_comm_size(world);
    if (ep < 2 || np % ep != 0 || zero < 0 || zero > 3)
        fail("EP %d, ZERO %d on %d ranks: want ep >= 2 dividing the ranks, ZeRO 0-3", ep, zero, np);
    msr_dataset_t *ds = NULL;
    OK(msr_dataset_generate(5, 1 << 14, &ds));
    double la[STEPS], lb[STEPS];
    float *ea, *eb;
    size_t na, nb;
    train(ds, world, ep, zero, mp, NULL, la, &ea, &na);
    train(ds, world, ep, zero, mp, ep_device(), lb, &eb, &nb);
    for (int i = 0; i < STEPS; i++)
        if (memcmp(&la[i], &lb[i], sizeof la[i]) != 0)
            fail("step %d: loss %.17g on the counting device, %.17g on the CPU's", i + 1, lb[i],
                 la[i]);
    if (na != nb || memcmp(ea, eb, na * sizeof(float)) != 0)
        fail("the experts differ after %d steps", STEPS);
    if (ep_device_totals().live != 0)
        fail("%ld device allocations left after the trainer went", ep_device_totals().live);
    printf("rank %d: losses %.9g %.9g %.9g alike\n", me, la[0], la[1], la[2]);
    free(ea);
    free(eb);
    msr_dataset_destroy(ds);
    OK(msr_comm_barrier(world));
    msr_comm_destroy(world);
    if (me == 0)
        printf("ok ep device\n");
    msr_finalize(ctx);
    return 0;
}
