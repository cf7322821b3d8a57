/* The planner's offloads for a MoE model: the experts' moments, their
 * parameters' and gradients' files in the memory model and the time
 * model, and --offload auto choosing them, against a real store where
 * the bytes kept can be counted. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parallel/offload.h"
#include "parallel/offload_params.h"
#include "planner/plan.h"
#include "tests/runner.h"
#include "tests/parallel/plan_offload_lib.h"

/* A MoE model under the optimizer's offload: the experts' moments in a
 * store of their own, its buffers what stays (those of a real store of as
 * many elements, to the byte), every chunk of both files moved a step; the
 * update priced on the same elements as without the offload; --offload
 * auto offloads the moments of a MoE model that fits only so; the
 * parameters' offload moves the experts' (whole blocks over replicas
 * too), the gradients' where no replica sums them. */
static void test_experts(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 4, 128, 4, 4, 512, 256, 64, 8, 2, 2, 1.25};
    msr_plan_layout_t l = layout(2, 1, 1, MSR_PLAN_RC_NONE, 2, 1);
    l.offload_chunk = 4096;
    char why[256] = "";
    msr_plan_rank_t base, r;
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 1, &base);
    MSR_CHECK(base.expert_shard > 0 && base.expert_optim == 8 * base.expert_shard);
    MSR_CHECK(base.offload_optim_io == 0);
    l.offload = MSR_PLAN_OFFLOAD_OPTIM;
    MSR_CHECK_MSG(msr_plan_check(&m, &l, why, sizeof why) == 0, "%s", why);
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 1, &r);
    MSR_CHECK_EQ(r.expert_shard, base.expert_shard);
    MSR_CHECK_EQ(r.expert_optim, msr_plan_offload_optim_bytes(r.expert_shard, 4096));
    MSR_CHECK(r.expert_optim < base.expert_optim);
    MSR_CHECK_EQ(r.offload_optim_io, msr_plan_offload_optim_io(r.shard_elems, 4096) +
                                         msr_plan_offload_optim_io(r.expert_shard, 4096));
    /* a real store of the experts' elements keeps what the plan counts */
    const char *t = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/plan_offload_io.XXXXXX", t != NULL && t[0] != '\0' ? t : "/tmp");
    MSR_CHECK(mkdtemp(dir) != NULL);
    msr_offload_config_t cfg = {MSR_OFFLOAD_DISK, dir, 4096, MSR_OFFLOAD_IO_THREADS, 0, 0};
    msr_offload_t *off = NULL;
    MSR_CHECK_EQ(msr_offload_create_as(&cfg, "experts", r.expert_shard, &off), MSR_OK);
    if (off != NULL) {
        MSR_CHECK_EQ((uint64_t)msr_offload_resident(off), r.expert_optim);
        MSR_CHECK(strstr(msr_offload_path(off), "/msrun-experts-rank0-") != NULL);
    }
    msr_offload_destroy(off);
    MSR_CHECK_EQ(rmdir(dir), 0);
    /* the update: the same elements, offloaded or not (a disk fast enough
     * to hide the I/O) */
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    c.disk_read_gbs = c.disk_write_gbs = 1e9;
    msr_plan_time_t tb, to;
    l.offload = 0;
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &tb);
    l.offload = MSR_PLAN_OFFLOAD_OPTIM;
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &to);
    MSR_CHECK_MSG(to.optim_ms == tb.optim_ms, "%g ms against %g", to.optim_ms, tb.optim_ms);
    /* the parameters' offload is taken (the blocks' in a store of the
     * larger block, a MoE one here; the experts' in a store of their own,
     * a MoE block's 8 experts, over the replicas too), the gradients'
     * stays refused with experts */
    l.offload = MSR_PLAN_OFFLOAD_OPTIM | MSR_PLAN_OFFLOAD_PARAMS;
    MSR_CHECK_MSG(msr_plan_check(&m, &l, why, sizeof why) == 0, "%s", why);
    msr_plan_rank_t p;
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 1, &p);
    MSR_CHECK_EQ(p.expert_params,
                 (uint64_t)msr_params_resident_of(8 * (8 * 128 * 128 + 5 * 128), 2));
    MSR_CHECK_EQ(p.expert_grads, base.expert_grads);
    uint64_t slot, blocks;
    msr_plan_offload_params_io(&m, &l, 1, &slot, &blocks);
    MSR_CHECK_EQ(blocks, 4);
    /* one MoE block of 2 and one dense one (gpt.c's tensor table): 4C^2 +
     * 8C + E C (the router: E = 8 experts) and 12C^2 + 13C floats; the
     * slot holds the larger, in 4 KiB pages */
    uint64_t C = 128, moe = 4 * C * C + 8 * C + 8 * C, dense = 12 * C * C + 13 * C;
    uint64_t big = dense > moe ? dense : moe;
    MSR_CHECK_EQ(slot, (big * 4 + 4095) / 4096 * 4096);
    MSR_CHECK_EQ(p.params,
                 base.params - 2 * (moe + dense) * 4 + (uint64_t)msr_params_resident_of(big, 4));
    /* the gradients' offload is taken too: without the parameters' the
     * experts' gradients stay resident; with it, at ep 1 of dp 2 (2
     * replicas summing them) both go to a store of the whole MoE blocks'
     * experts (8 here, 2 MoE blocks), the gradients read and written
     * around each backward, each block read by the step's reduce of the
     * owned parts, which writes back the one block rank 1 owns a part of
     * (its half of the 16 experts is the second block), the only one its
     * update reads; at ep 2 of dp 2 (no replica) the parameters and the
     * gradients each go to a store of a MoE block's experts (4 of 8
     * here), each block read for both passes of each micro-batch and by
     * the update, the gradients read and written around each backward
     * and read by the norm too */
    l.offload = MSR_PLAN_OFFLOAD_OPTIM | MSR_PLAN_OFFLOAD_GRADS;
    l.zero = 2;
    MSR_CHECK_MSG(msr_plan_check(&m, &l, why, sizeof why) == 0, "%s", why);
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 1, &p);
    MSR_CHECK_EQ(p.expert_grads, base.expert_grads);
    MSR_CHECK(p.offload_eparam_r == 0 && p.offload_eparam_w == 0);
    l.offload |= MSR_PLAN_OFFLOAD_PARAMS;
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 1, &p);
    uint64_t whole = 8 * (8 * C * C + 5 * C), wslot = (whole * 4 + 4095) / 4096 * 4096;
    MSR_CHECK_EQ(p.expert_params, (uint64_t)msr_params_resident_of(whole, 2));
    MSR_CHECK_EQ(p.expert_grads, p.expert_params);
    MSR_CHECK_EQ(p.offload_eparam_r, 2 * wslot * (2 * 1 + 1) + wslot * (2 * (1 + 1) + 1));
    MSR_CHECK_EQ(p.offload_eparam_w, 2 * wslot + wslot * (2 * 1 + 1));
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 0, &p); /* rank 0: the first block */
    MSR_CHECK_EQ(p.offload_eparam_w, 2 * wslot + wslot * (2 * 1 + 1));
    l.ep = 2;
    MSR_CHECK_MSG(msr_plan_check(&m, &l, why, sizeof why) == 0, "%s", why);
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 1, &p);
    uint64_t per = 4 * (8 * C * C + 5 * C), eslot = (per * 4 + 4095) / 4096 * 4096;
    MSR_CHECK_EQ(p.expert_params, (uint64_t)msr_params_resident_of(per, 2));
    MSR_CHECK_EQ(p.expert_grads, p.expert_params);
    MSR_CHECK_EQ(p.offload_eparam_r, 2 * eslot * ((2 * 1 + 1) + (1 + 2))); /* 1 micro-batch */
    MSR_CHECK_EQ(p.offload_eparam_w, 2 * eslot * (1 + 1));
    /* the time model moves them at the disk's rates: more with the
     * gradients' store than without it */
    msr_plan_cluster_default(&c);
    c.disk_read_gbs = 2, c.disk_write_gbs = 0.5;
    msr_plan_time_t te, tn;
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &te);
    l.offload &= ~MSR_PLAN_OFFLOAD_GRADS;
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &tn);
    MSR_CHECK_MSG(te.offload_io_ms > tn.offload_io_ms, "%g ms against %g", te.offload_io_ms,
                  tn.offload_io_ms);
    l.ep = 1;
    l.zero = 1;
    /* --offload auto: a budget that only the moments' offload meets
     * (under full recompute, the lowest activations; ep 1: at ep 2 the
     * experts would be fewer a rank) */
    l.offload = MSR_PLAN_OFFLOAD_OPTIM;
    l.recompute = MSR_PLAN_RC_FULL;
    msr_plan_cluster_default(&c);
    c.mem_gib = (double)msr_plan_peak(&m, &l, MSR_PLAN_FP32, NULL) / (1024.0 * 1024.0 * 1024.0);
    msr_plan_query_t q = auto_query(2, 4, 2, 1);
    q.fix[MSR_PLAN_FIX_EP] = 1;
    auto_first_t f;
    if (auto_first(&m, &c, &q, &f) != 0)
        return;
    MSR_CHECK_MSG(f.off == MSR_PLAN_OFFLOAD_OPTIM, "offload %d", f.off);
}

/* --offload auto for a MoE model that fits only with everything on disk
 * (ep = dp: no replica shares the experts, so their parameters and
 * gradients go to their files too): the gradients' mode is chosen, and
 * with its I/O priced, the experts' blocks among what it moves. */
static void test_auto_experts_grads(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 8, 128, 4, 4, 512, 256, 64, 8, 1, 2, 1.25};
    msr_plan_layout_t l = layout(2, 1, 2, MSR_PLAN_RC_FULL, 2, 1);
    l.ep = 2;
    l.offload_chunk = 4096;
    l.offload = MSR_PLAN_OFFLOAD_OPTIM | MSR_PLAN_OFFLOAD_ACTS | MSR_PLAN_OFFLOAD_PARAMS;
    char why[256] = "";
    MSR_CHECK_MSG(msr_plan_check(&m, &l, why, sizeof why) == 0, "%s", why);
    uint64_t p_three = msr_plan_peak(&m, &l, MSR_PLAN_FP32, NULL);
    l.offload |= MSR_PLAN_OFFLOAD_GRADS;
    MSR_CHECK_MSG(msr_plan_check(&m, &l, why, sizeof why) == 0, "%s", why);
    uint64_t p_all = msr_plan_peak(&m, &l, MSR_PLAN_FP32, NULL);
    msr_plan_rank_t r;
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 0, &r);
    /* the experts' gradients are a store's buffers, not 4 bytes each of
     * the 4 experts a rank holds in each of the 4 MoE blocks */
    MSR_CHECK(r.expert_grads > 0 && r.expert_grads == r.expert_params);
    MSR_CHECK(r.expert_grads < 4 * 4 * 4 * (8 * 128 * 128 + 5 * 128)); /* 8C^2 + 5C an expert */
    MSR_CHECK_MSG(p_all < p_three, "%" PRIu64 " against %" PRIu64, p_all, p_three);
    msr_plan_cluster_t c;
    msr_plan_query_t q = auto_query(2, 4, 2, 2);
    q.fix[MSR_PLAN_FIX_EP] = 2;
    auto_first_t f;
    if (auto_at(&m, p_all, &c, &q, &f) != 0)
        return;
    MSR_CHECK_MSG(f.off & MSR_PLAN_OFFLOAD_GRADS, "offload %d", f.off);
    /* what it moves counts the experts' two files */
    msr_plan_t *plans = NULL;
    if (search_all(&m, &c, &q, &plans) <= 0 || plans == NULL) {
        MSR_CHECK(plans != NULL);
        return;
    }
    msr_plan_rank_t a;
    msr_plan_layout_t pl = plans[0].l;
    msr_plan_rank(&m, &pl, MSR_PLAN_FP32, 0, &a);
    MSR_CHECK(a.offload_eparam_r > 0 && a.offload_eparam_w > 0);
    MSR_CHECK(f.moved > a.offload_eparam_r + a.offload_eparam_w);
    free(plans);
}

/* Layout l's step on rank 0 (4 blocks, 3 micro-batches) priced at c: its
 * disk I/O is every byte the memory model counts, and compute-bound the
 * step pays the blocks' first reads, the gradient shard's I/O (never
 * credited) and norm_ms, the experts' gradients' norm (or reduce). */
static void check_step_io(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                          const msr_plan_cluster_t *c, double norm_ms)
{
    msr_plan_rank_t r;
    msr_plan_rank(m, l, MSR_PLAN_FP32, 0, &r);
    msr_plan_time_t t;
    msr_plan_time(m, l, MSR_PLAN_FP32, c, &t);
    uint64_t slot, blocks;
    msr_plan_offload_params_io(m, l, 0, &slot, &blocks);
    MSR_CHECK(blocks == 4 && slot > 0);
    double all = msr_plan_disk_ms(
        c,
        (double)(r.offload_optim_io + r.offload_grads_r + r.offload_eparam_r +
                 blocks * slot * (2 * 3 + 1)),
        (double)(r.offload_optim_io + r.offload_grads_w + r.offload_eparam_w + blocks * slot));
    MSR_CHECK_MSG(fabs(t.offload_io_ms - all) <= 1e-9 * all, "%g ms against %g", t.offload_io_ms,
                  all);
    double firsts = (2 * 3 + 1) * msr_plan_disk_ms(c, (double)slot, 0);
    double gio = msr_plan_disk_ms(c, (double)r.offload_grads_r, (double)r.offload_grads_w);
    double want = firsts + gio + norm_ms;
    MSR_CHECK_MSG(fabs(t.offload_ms - want) <= 1e-9 * want, "%g ms against %g", t.offload_ms, want);
}

/* A MoE model on one rank with its experts' parameters and gradients in
 * files: each pass reads a pass's worth of blocks, each backward reads and
 * writes the gradients' too, the norm reads them once more and the update
 * reads both and writes the parameters; the norm's read has nothing to
 * hide behind. ZeRO 2 over 2 replicas (ep 1 of dp 2): the step's reduce
 * reads every block's gradients and writes back the one block rank 0
 * owns a part of, the only one whose gradients its update reads. */
static void test_experts_time(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 4, 128, 4, 4, 512, 256, 64, 8, 2, 2, 1.25};
    msr_plan_layout_t l = layout(1, 1, 2, MSR_PLAN_RC_NONE, 2, 3);
    l.offload_chunk = 4096;
    l.offload = MSR_PLAN_OFFLOAD_OPTIM | MSR_PLAN_OFFLOAD_PARAMS | MSR_PLAN_OFFLOAD_GRADS;
    char why[256] = "";
    MSR_CHECK_MSG(msr_plan_check(&m, &l, why, sizeof why) == 0, "%s", why);
    msr_plan_rank_t r;
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 0, &r);
    /* 8 experts of 8C^2 + 5C floats in each of 2 MoE blocks, a slot of
     * whole pages each */
    uint64_t C = 128, eslot = (8 * (8 * C * C + 5 * C) * 4 + 4095) / 4096 * 4096;
    uint64_t b = r.offload_eparam_b, g = r.offload_egrads_b;
    MSR_CHECK(b == 2 * eslot && g == b && r.offload_eowned_b == g);
    MSR_CHECK_EQ(r.offload_eparam_r, b * (2 * 3 + 1) + g * (3 + 2));
    MSR_CHECK_EQ(r.offload_eparam_w, b + 3 * g);
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    c.disk_read_gbs = 1e5, c.disk_write_gbs = 2e5;
    check_step_io(&m, &l, &c, msr_plan_disk_ms(&c, (double)g, 0));
    /* their gradients resident (the optimizer's and the parameters'
     * offloads alone): no norm's read to pay */
    l.offload = MSR_PLAN_OFFLOAD_OPTIM | MSR_PLAN_OFFLOAD_PARAMS;
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 0, &r);
    MSR_CHECK(r.offload_eparam_b == b && r.offload_egrads_b == 0 && r.offload_eowned_b == 0);
    check_step_io(&m, &l, &c, 0);
    l = layout(2, 1, 2, MSR_PLAN_RC_NONE, 2, 3);
    l.offload_chunk = 4096;
    l.offload = MSR_PLAN_OFFLOAD_OPTIM | MSR_PLAN_OFFLOAD_PARAMS | MSR_PLAN_OFFLOAD_GRADS;
    MSR_CHECK_MSG(msr_plan_check(&m, &l, why, sizeof why) == 0, "%s", why);
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 0, &r);
    MSR_CHECK(r.offload_egrads_b == 2 * eslot && r.offload_eowned_b == eslot);
    check_step_io(&m, &l, &c, msr_plan_disk_ms(&c, 2.0 * (double)eslot, (double)eslot));
}

static const msr_test_t tests[] = {
    {"experts", test_experts, 30},
    {"auto_experts_grads", test_auto_experts_grads, 30},
    {"experts_time", test_experts_time, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
