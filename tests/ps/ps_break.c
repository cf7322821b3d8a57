/* A parameter server whose UCX endpoints break under its steps
 * (tests/ps/test_ps_break.sh): 2 workers on one node, 2 servers on the
 * other, the mode msrun's --ps_staleness. The workers pull and push a
 * table in a loop, saying "pushing" after their first steps, until a call
 * fails; the script then destroys the servers' TCP connections to the
 * workers' node (the processes stay alive, their endpoints break). A
 * worker prints the step and the status its call failed with and exits
 * 3; a server prints what msr_ps_serve ended with and exits 3 if it
 * failed, 0 if it ended (asynchronous mode: every worker taken as lost).
 * Each rank then waits, through the store, until all four said how they
 * ended (so the launcher ends none of them first). No call may wait past
 * the ranks' deadline (MSR_TIMEOUT): a call that meets it
 * (MSR_ERR_TIMEOUT) is reported as such and the script fails it.
 * A worker whose steps never fail prints "FAIL" and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "msrun/msrun.h"
#include "tests/worker_fail.h"

WORKER_FAIL("ps_break", exit)

enum { ROWS = 64, WIDTH = 256, KEYS = 16, FIRST_STEPS = 5, MAX_STEPS = 1000000 };

/* One step: the rows of KEYS keys spread over both servers pulled, then
 * pushed with a gradient of 1. */
static msr_status_t step(msr_ps_t *ps, int t, int w, float *rows)
{
    int64_t keys[KEYS];
    for (int k = 0; k < KEYS; k++)
        keys[k] = (w * KEYS + k) % ROWS;
    msr_status_t st = msr_ps_pull(ps, t, keys, KEYS, rows, WIDTH);
    for (int i = 0; st == MSR_OK && i < KEYS * WIDTH; i++)
        rows[i] = 1.0f;
    return st == MSR_OK ? msr_ps_push(ps, t, keys, KEYS, rows, WIDTH) : st;
}

/* Every rank, once its part ended, waits (through the store, not UCX)
 * until all four have, so that none is ended by the launcher before it
 * said how its calls ended. */
static void all_ended(msr_ctx_t *ctx)
{
    int64_t n = 0;
    OK(msr_store_add(ctx, "break/ended", 1, &n));
    if (n == 4)
        OK(msr_store_set(ctx, "break/all", "1", 1));
    void *v;
    size_t len;
    OK(msr_store_get(ctx, "break/all", 60000, &v, &len));
    free(v);
}

static int worker(msr_ps_t *ps, int t)
{
    int w = msr_ps_role_rank(ps);
    static float rows[KEYS * WIDTH];
    for (int s = 0; s < MAX_STEPS; s++) {
        msr_status_t st = step(ps, t, w, rows);
        if (st != MSR_OK) {
            printf("worker %d: step %d failed: %s (%s)\n", w, s, msr_status_name(st),
                   msr_last_error());
            return 3;
        }
        if (s + 1 == FIRST_STEPS)
            printf("worker %d: pushing\n", w);
    }
    fail("%d steps and none failed", MAX_STEPS);
}

int main(void)
{
    msr_ctx_t *ctx;
    OK(msr_init(&ctx));
    g_rank = msr_rank(ctx);
    setvbuf(stdout, NULL, _IOLBF, 0);
    msr_ps_t *ps;
    OK(msr_ps_join(ctx, 0, MSR_PS_STALENESS_ENV, &ps));
    if (msr_ps_workers(ps) != 2 || msr_ps_servers(ps) != 2)
        fail("needs 2 workers and 2 servers");
    msr_ps_table_config_t c = {.rows = ROWS, .width = WIDTH, .optim = MSR_PS_SGD, .lr = 0.001f};
    int t;
    OK(msr_ps_table_create(ps, &c, &t));
    if (msr_ps_my_role(ps) == MSR_PS_WORKER) {
        int code = worker(ps, t);
        all_ended(ctx);
        _exit(code); /* its endpoints broke: no goodbye to give */
    }
    msr_status_t st = msr_ps_serve(ps);
    printf("server %d: serve ended: %s (%s)\n", msr_ps_role_rank(ps), msr_status_name(st),
           st == MSR_OK ? "" : msr_last_error());
    all_ended(ctx);
    if (st != MSR_OK)
        _exit(3);
    msr_ps_destroy(ps);
    msr_finalize(ctx);
    return 0;
}
