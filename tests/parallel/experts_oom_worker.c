/* The experts under ZeRO-3 out of memory (train_gpt_experts_oom.sh starts
 * it under the real msrun on 2 and 4 ranks):
 *
 *   experts_oom_worker WHO EP
 *
 * A MoE trainer (every block MoE) over the world, dp = the world's size
 * with ep EP, ZeRO-3: the experts sharded over replica groups of dp / EP
 * ranks (parallel/train_experts.c). Round i makes a trainer, takes a
 * step, then makes rank WHO's i-th allocation from the experts' set-up
 * on fail (msr_alloc_fail_at, as the curl and SQLite tests do): the
 * set-up made again (parallel/train_impl.h), then two steps of 2
 * micro-batches (the experts' gathers, their prefetch and reduce-scatters
 * included), until a round where none failed. Each round is over a communicator
 * split from the world and destroyed after it. In each round every rank
 * ends alike: all trained (an allocation that has a way around it), or
 * all failed with MSR_ERR_NO_MEMORY, never at the communicators' deadline
 * (MSR_TIMEOUT is short in the script: a rank left waiting would fail
 * with MSR_ERR_TIMEOUT), WHO's error saying out of memory and every
 * other's naming rank WHO. Each round prints "round I: rank R: ok" or
 * "round I: rank R: STATUS: TEXT"; rank 0 prints "experts oom: each of
 * rank WHO's N allocations failed in turn, every rank alike" and "ok
 * experts oom" at the end. Every check that fails prints "FAIL" and exits
 * 1. Linked to the static modules so that the allocation hook reaches
 * them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "model/data.h"
#include "msrun/msrun.h"
#include "model/adamw.h"
#include "parallel/train_impl.h"
#include "tests/worker_fail.h"

WORKER_FAIL("experts_oom_worker", exit)

#include "tests/parallel/oom_rounds.h"

enum { MAX_ROUNDS = 20000, STEPS = 2 };

static msr_train_config_t config(int dp, int rank, int ep)
{
    msr_train_config_t c = oom_config(dp, rank);
    c.model.moe = (msr_gpt_moe_t){4, 2, 1, 1.0, 0.01};
    c.ep = ep;
    c.par.zero = 3;
    return c;
}

/* One round over c: a trainer made and one step taken (dp's and the
 * model's buffers made, kept for reuse), then with rank who's k-th
 * allocation failing the experts' set-up again (train_impl.h: their
 * buffers and optimizer made anew) and STEPS steps. The status, its text
 * in err; *fired_p: whether the hook failed an allocation. */
static msr_status_t round_run(const msr_train_config_t *cfg, const msr_dataset_t *ds, msr_comm_t *c,
                              int who, long k, char *err, size_t n, int *fired_p)
{
    msr_trainer_t *tr = NULL;
    double loss;
    OK(msr_trainer_create(cfg, ds, c, &tr));
    if (!tr->ez)
        fail("the experts are not sharded under ZeRO-3");
    OK(msr_trainer_step(tr, &loss));
    msr_train_experts_free(tr);
    msr_adamw_destroy(tr->eopt);
    tr->eopt = NULL;
    oom_hook_set(msr_comm_rank(c), who, k);
    msr_status_t st = msr_train_experts_shard(tr, c);
    for (int i = 0; i < STEPS && st == MSR_OK; i++)
        st = msr_trainer_step(tr, &loss);
    oom_hook_clear(fired_p);
    snprintf(err, n, "%s", st == MSR_OK ? "" : msr_last_error());
    msr_trainer_destroy(tr);
    return st;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        fail("usage: experts_oom_worker WHO EP");
    int who = atoi(argv[1]), ep = atoi(argv[2]);
    msr_ctx_t *ctx;
    msr_comm_t *world = worker_world(&ctx, 0);
    int me = msr_comm_rank(world), np = msr_comm_size(world);
    if (who < 0 || who >= np || ep < 1 || np % ep != 0 || np / ep < 2)
        fail("WHO %d, EP %d: want a rank of the %d and replica groups of 2 or more", who, ep, np);
    msr_dataset_t *ds = NULL;
    OK(msr_dataset_generate(5, 1 << 14, &ds));
    msr_train_config_t cfg = config(np, me, ep);
    long k;
    for (k = 0; k < MAX_ROUNDS; k++) {
        char what[64], err[512];
        oom_round_name(what, sizeof what, k, who);
        msr_comm_t *c;
        OK(msr_comm_split(world, 0, me, &c));
        int hit = 0;
        msr_status_t st = round_run(&cfg, ds, c, who, k, err, sizeof err, &hit);
        int64_t fired = hit;
        msr_comm_destroy(c);
        oom_round_end(world, what, k, who, st, err, "");
        OK(msr_comm_allreduce(world, MSR_IN_PLACE, &fired, 1, MSR_DTYPE_I64, MSR_OP_MAX));
        if (!fired)
            break;
    }
    g_case[0] = '\0';
    if (k == MAX_ROUNDS)
        fail("rank %d still had an allocation to fail after %ld", who, k);
    OK(msr_comm_barrier(world));
    if (me == 0)
        printf("experts oom: each of rank %d's %ld allocations failed in turn, every rank alike\n",
               who, k);
    msr_dataset_destroy(ds);
    msr_comm_destroy(world);
    if (me == 0)
        printf("ok experts oom\n");
    msr_finalize(ctx);
    return 0;
}
