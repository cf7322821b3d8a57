/* A trainer's creation out of memory on one rank (train_create_oom.sh
 * starts it under the real msrun):
 *
 *   create_oom_worker WHO LAYOUT EVERY
 *
 * LAYOUT: z0 (dp over the world, ZeRO 0, a dense model), z3 (dp over the
 * world, ZeRO-3, every second block MoE: the dense segments and the
 * experts sharded), tp2pp2 (4 ranks: tp 2 x pp 2, ZeRO 1, the GPT's
 * tied embedding across the pipeline) or tp2pp2z3 (the same at ZeRO-3:
 * the first stage gathers the embedding for its first send to the last
 * stage, after the creation's agreement), dp2pp2z3 (4 ranks: dp 2 x pp
 * 2 at ZeRO-3: that gather over each stage's dp group). dpz3: no trainer but the
 * data-parallel state alone (ZeRO-3 over the world, msr_dp_create_agreed:
 * the others say "dp: rank WHO is out of memory creating its data-parallel
 * state"; a round that made it takes no step), cp2 (cp over the world,
 * ZeRO 1, dense) or ep2 (dp over the world at ZeRO-3, every block MoE,
 * the experts over ep groups of 2). A first round makes the trainer
 * with nothing failing and counts rank WHO's allocations in it (N,
 * msr_alloc_fail_at); then each sampled one fails in turn: 0, EVERY,
 * 2 EVERY, ... and N - 1 (EVERY 1: all of them), then N, N + 1, ...
 * until a round where none failed. Each round is over a communicator
 * split from the world (and a mesh on it), made before the hook is set
 * and destroyed after. In each round every rank ends alike: a trainer
 * that takes a step (an allocation that has a way around it), or
 * MSR_ERR_NO_MEMORY on every rank, never at the communicators' deadline
 * (MSR_TIMEOUT is short in the script: a rank left waiting would fail
 * with MSR_ERR_TIMEOUT), WHO's error saying out of memory and every
 * other's naming rank WHO. The round after a failed one makes a trainer
 * again on the same world: the last one trains. Each round prints
 * "round K: rank R: ok" or "round K: rank R: STATUS: TEXT"; rank 0
 * prints "create oom LAYOUT: F of rank WHO's N allocations failed in
 * turn, every rank alike" and "ok create oom" at the end. Every check
 * that fails prints "FAIL" and exits 1. Linked to the static modules so
 * that the allocation hook reaches them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "model/data.h"
#include "msrun/msrun.h"
#include "parallel/mesh.h"
#include "parallel/train.h"
#include "tests/worker_fail.h"

WORKER_FAIL("create_oom_worker", exit)

#include "tests/parallel/oom_rounds.h"

enum { MAX_PAST = 50 };

static int g_alone; /* dpz3: msr_dp_create_agreed alone, not a trainer */

static msr_train_config_t config(const char *layout, int np, int rank)
{
    msr_train_config_t c = oom_config(np, rank);
    if (strcmp(layout, "z3") == 0 || strcmp(layout, "dpz3") == 0) {
        c.par.zero = 3;
        c.model.moe = (msr_gpt_moe_t){4, 2, 2, 1.0, 0.01};
    } else if (strcmp(layout, "tp2pp2") == 0 || strcmp(layout, "tp2pp2z3") == 0) {
        if (np != 4)
            fail("%s needs 4 ranks, not %d", layout, np);
        c.par.zero = strcmp(layout, "tp2pp2") == 0 ? 1 : 3;
        c.dp = 1;
        c.dp_rank = 0;
        c.tp = c.pp = 2;
    } else if (strcmp(layout, "dp2pp2z3") == 0) {
        /* mesh rank = dp_rank pp + pp_rank: the reserved gather of the
         * tied embedding with dp > 1, its shard over the stage's dp group */
        if (np != 4)
            fail("%s needs 4 ranks, not %d", layout, np);
        c.par.zero = 3;
        c.dp = 2;
        c.dp_rank = rank / 2;
        c.pp = 2;
    } else if (strcmp(layout, "cp2") == 0) {
        c.par.zero = 1;
        c.dp = 1;
        c.dp_rank = 0;
        c.cp = np;
    } else if (strcmp(layout, "ep2") == 0) {
        c.par.zero = 3;
        c.model.moe = (msr_gpt_moe_t){4, 2, 1, 1.0, 0.01};
        c.ep = 2;
    } else if (strcmp(layout, "z0") != 0) {
        fail("layout %s: want z0, z3, dpz3, cp2, ep2, tp2pp2, tp2pp2z3 or dp2pp2z3", layout);
    }
    return c;
}

/* One round over a communicator split from world (and its mesh): the
 * trainer made with rank who's k-th allocation from the creation on
 * failing (k < 0: none), a step taken if it was made. The status, its text
 * in err; *fired_p: whether the hook failed an allocation; *count_p: the
 * allocations this rank made in the creation. */
/* dpz3: the data-parallel state alone over c (msr_dp_create_agreed, its
 * model made before the hook is set), with rank who's k-th allocation
 * failing; *fired_p and *count_p as round_run's. */
static msr_status_t dp_alone(const msr_train_config_t *cfg, msr_comm_t *c, int me, int who, long k,
                             int *fired_p, long *count_p)
{
    msr_gpt_t *g = NULL;
    msr_dp_t *dp = NULL;
    OK(msr_gpt_create_ex(&cfg->model, cfg->micro_batch, msr_dp_model_flags(cfg->par.zero), &g));
    oom_hook_set(me, who, k);
    msr_status_t st = msr_dp_create_agreed(&cfg->par, c, g, &cfg->adamw, cfg->seed, &dp);
    *count_p = oom_hook_clear(fired_p);
    msr_dp_destroy(dp);
    msr_gpt_destroy(g);
    return st;
}

static msr_status_t round_run(const msr_train_config_t *cfg, const msr_dataset_t *ds,
                              msr_comm_t *world, int who, long k, char *err, size_t n, int *fired_p,
                              long *count_p)
{
    int me = msr_comm_rank(world);
    msr_comm_t *c;
    msr_mesh_t *mesh = NULL;
    OK(msr_comm_split(world, 0, me, &c));
    if (g_alone) {
        msr_status_t st = dp_alone(cfg, c, me, who, k, fired_p, count_p);
        snprintf(err, n, "%s", st == MSR_OK ? "" : msr_last_error());
        msr_comm_destroy(c);
        return st;
    }
    if (cfg->tp > 1 || cfg->cp > 1 || cfg->pp > 1)
        OK(msr_mesh_create(c, cfg->dp, cfg->pp, cfg->cp > 1 ? cfg->cp : 1, cfg->tp, &mesh));
    msr_trainer_t *tr = NULL;
    oom_hook_set(me, who, k);
    msr_status_t st = mesh != NULL ? msr_trainer_create_mesh(cfg, ds, mesh, &tr)
                                   : msr_trainer_create(cfg, ds, c, &tr);
    *count_p = oom_hook_clear(fired_p);
    snprintf(err, n, "%s", st == MSR_OK ? "" : msr_last_error());
    double loss;
    if (st == MSR_OK)
        OK(msr_trainer_step(tr, &loss));
    msr_trainer_destroy(tr);
    msr_mesh_destroy(mesh);
    msr_comm_destroy(c);
    return st;
}

/* Round k: run, compared over the world, printed. Returns
 * whether the hook failed an allocation on any rank; *count_p: rank
 * who's count of allocations in the creation. */
static int round_check(const msr_train_config_t *cfg, const msr_dataset_t *ds, msr_comm_t *world,
                       int who, long k, long *count_p)
{
    int me = msr_comm_rank(world), hit = 0;
    char what[64], err[512];
    oom_round_name(what, sizeof what, k, who);
    long count = 0;
    msr_status_t st = round_run(cfg, ds, world, who, k, err, sizeof err, &hit, &count);
    oom_round_end(world, what, k, who, st, err, " ");
    int64_t v[2] = {hit, me == who ? count : 0};
    OK(msr_comm_allreduce(world, MSR_IN_PLACE, v, 2, MSR_DTYPE_I64, MSR_OP_MAX));
    g_case[0] = '\0';
    *count_p = (long)v[1];
    return v[0] != 0;
}

/* The sampled index after k of n: every-th, and the last one n - 1. */
static long next_index(long k, long every, long n)
{
    return k < n - 1 && k + every > n - 1 ? n - 1 : k + every;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        fail("usage: create_oom_worker WHO LAYOUT EVERY");
    int who = atoi(argv[1]);
    long every = atol(argv[3]);
    msr_ctx_t *ctx;
    msr_comm_t *world = worker_world(&ctx, 0);
    int me = msr_comm_rank(world), np = msr_comm_size(world);
    if (who < 0 || who >= np || np < 2 || every < 1)
        fail("WHO %d, EVERY %ld: want a rank of the %d (2 or more) and EVERY >= 1", who, every, np);
    msr_dataset_t *ds = NULL;
    OK(msr_dataset_generate(5, 1 << 14, &ds));
    msr_train_config_t cfg = config(argv[2], np, me);
    g_alone = strcmp(argv[2], "dpz3") == 0;
    long n = 0, failed = 0, k;
    if (round_check(&cfg, ds, world, who, -1, &n))
        fail("an allocation failed with the hook off");
    if (n < 1)
        fail("rank %d made no allocation in the creation", who);
    for (k = 0; k < n; k = next_index(k, every, n)) {
        long c;
        if (!round_check(&cfg, ds, world, who, k, &c))
            fail("allocation %ld of %ld did not fail", k, n);
        failed++;
    }
    for (k = n; k < n + MAX_PAST; k++) { /* the count may vary by one or two */
        long c;
        if (!round_check(&cfg, ds, world, who, k, &c))
            break;
        failed++;
    }
    if (k == n + MAX_PAST)
        fail("rank %d still had an allocation to fail after %ld", who, k);
    OK(msr_comm_barrier(world));
    if (me == 0)
        printf("create oom %s: %ld of rank %d's %ld allocations failed in turn, every rank alike\n",
               argv[2], failed, who, n);
    msr_dataset_destroy(ds);
    msr_comm_destroy(world);
    if (me == 0)
        printf("ok create oom\n");
    msr_finalize(ctx);
    return 0;
}
