/* A worker lost without a goodbye (tests/ps/test_ps_lost.sh), under the
 * real msrun with 3 workers and 2 servers. `ps_lost MODE`:
 *   async   staleness 1 (msrun --ps_staleness=1): every worker pushes
 *           P0 steps; then the last worker vanishes (_exit without
 *           msr_ps_destroy: to the servers its process is gone, as a
 *           killed one's is) and the others push N steps more, past
 *           its clock + K, which the servers let through only once they
 *           took it as lost; then every row counts exactly the
 *           acknowledged pushes (each push moves its rows by -1)
 *   sync    the same in synchronous mode: the servers cannot go on
 *           without its push, msr_ps_serve fails with the lost peer and
 *           the program exits 3 on every rank that sees it (msrun then
 *           restarts the job, or ends it)
 *   killsend  asynchronous as async, but the victim dies inside a send
 *           while the others push: after P0 steps (each with a push of
 *           two wide rows, one per server) it starts the next wide push
 *           and a thread of its own ends the process (_exit) the moment
 *           the push began, leaving the servers part of a request; the
 *           other two push N steps more (past its clock + K) on the same
 *           servers, and every row counts exactly the acknowledged
 *           pushes (a wide row the victim's last push reached whole, or
 *           not at all, never in part). It prints whether the push was
 *           still running when the process ended ("inside the push").
 * Every check that fails prints "FAIL" and exits 1; worker 0 prints
 * "ok lost" at the end of the asynchronous mode. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "msrun/msrun.h"
#include "tests/worker_fail.h"

WORKER_FAIL("ps_lost", _exit)

enum { P0 = 5, N = 30, SHARED = 3 };

/* killsend's wide table: the widest rows, so that a push of them all (16
 * MiB, half to each server) is long in the sending. */
enum { WIDE = 65536, WIDE_ROWS = 64 };

/* Pulls and pushes the worker's own row and the shared one (gradient 1:
 * with lr = workers, each push moves each row by exactly -1). */
static msr_status_t step(msr_ps_t *ps, int t, int w)
{
    int64_t keys[2] = {w, SHARED};
    float rows[2], g[2] = {1.0f, 1.0f};
    msr_status_t st = msr_ps_pull(ps, t, keys, 2, rows, 1);
    return st == MSR_OK ? msr_ps_push(ps, t, keys, 2, g, 1) : st;
}

static void wait_key(msr_ctx_t *ctx, const char *key)
{
    void *v;
    size_t len;
    OK(msr_store_get(ctx, key, 30000, &v, &len));
    free(v);
}

static void expect_row(msr_ps_t *ps, int t, int64_t key, long want)
{
    float v;
    OK(msr_ps_pull(ps, t, &key, 1, &v, 1));
    if (v != (float)-want)
        fail("row %lld is %g: %ld pushes applied, want %ld", (long long)key, v, lroundf(-v), want);
}

/* A survivor's step i; synchronous, the lost peer ends the program with
 * 3 (already in the last of the first P0 steps: its answer may come after
 * the server saw the victim go). */
static void survivor_step(msr_ps_t *ps, int t, int w, int sync, int i)
{
    msr_status_t st = step(ps, t, w);
    if (sync && st == MSR_ERR_PEER_LOST) {
        printf("sync: worker %d: step %d failed: %s\n", w, i + 1, msr_status_name(st));
        _exit(3);
    }
    OK(st);
}

/* The survivors: P0 steps, N more once the victim is gone, then (every
 * survivor done) the rows. */
static void survivor(msr_ctx_t *ctx, msr_ps_t *ps, int t, int w, int sync)
{
    int W = msr_ps_workers(ps);
    for (int i = 0; i < P0; i++)
        survivor_step(ps, t, w, sync, i);
    wait_key(ctx, "lost/victim");
    for (int i = P0; i < P0 + N; i++)
        survivor_step(ps, t, w, sync, i);
    if (sync)
        fail("synchronous steps went on without the lost worker's pushes");
    printf("worker %d: %d steps, %d after worker %d was lost\n", w, P0 + N, N, W - 1);
    int64_t done = 0;
    OK(msr_store_add(ctx, "lost/done", 1, &done));
    if (done == W - 1)
        OK(msr_store_set(ctx, "lost/all", "1", 1));
    wait_key(ctx, "lost/all");
    for (int k = 0; k < W; k++)
        expect_row(ps, t, k, k == W - 1 ? P0 : P0 + N);
    expect_row(ps, t, SHARED, (long)W * P0 + (long)(W - 1) * N);
}

/* ---- killsend: the victim dies inside a push ---- */

static _Atomic int pushing; /* 0 before, 1 inside the last push, 2 after it */
static _Atomic int killer_ready;

/* The victim's second thread: ends the process the moment its main thread
 * is inside the push, and says where the push was. */
static void *killer(void *arg)
{
    (void)arg;
    atomic_store(&killer_ready, 1);
    while (atomic_load(&pushing) == 0)
        ;
    int where = atomic_load(&pushing);
    const char *msg =
        where == 1 ? "worker 2: ended inside the push\n" : "worker 2: ended after the push\n";
    _exit(write(1, msg, strlen(msg)) < 0 ? 1 : 0); /* no goodbye, no flush */
}

static void wide_push(msr_ps_t *ps, int tw, const float *g)
{
    int64_t keys[WIDE_ROWS]; /* half on each server */
    for (int k = 0; k < WIDE_ROWS; k++)
        keys[k] = k;
    OK(msr_ps_push(ps, tw, keys, WIDE_ROWS, g, WIDE));
}

static void killsend_victim(msr_ctx_t *ctx, msr_ps_t *ps, int t, int tw, int w)
{
    float *g = malloc((size_t)WIDE_ROWS * WIDE * sizeof *g);
    if (g == NULL)
        fail("out of memory");
    for (size_t i = 0; i < (size_t)WIDE_ROWS * WIDE; i++)
        g[i] = 1.0f;
    for (int i = 0; i < P0; i++) {
        OK(step(ps, t, w));
        wide_push(ps, tw, g);
    }
    OK(msr_store_set(ctx, "lost/victim", "1", 1));
    printf("worker %d: %d steps, dying inside a push\n", w, P0);
    pthread_t th;
    if (pthread_create(&th, NULL, killer, NULL) != 0)
        fail("pthread_create");
    time_t deadline = time(NULL) + 30;
    while (!atomic_load(&killer_ready))
        if (time(NULL) > deadline)
            fail("the killer thread did not start within 30 s");
        else
            sched_yield();
    atomic_store(&pushing, 1);
    wide_push(ps, tw, g);
    atomic_store(&pushing, 2);
    pthread_join(th, NULL); /* it ends the process */
    fail("the killer thread returned");
}

/* Each wide row: every column the same, the victim's P0 pushes and its
 * last one whole or not at all, the same on every row of a server (row k
 * on server k % 2: one request each). */
static void check_wide(msr_ps_t *ps, int tw)
{
    float *row = malloc((size_t)WIDE * sizeof *row), first[2] = {0, 0};
    if (row == NULL)
        fail("out of memory");
    for (int64_t k = 0; k < WIDE_ROWS; k++) {
        OK(msr_ps_pull(ps, tw, &k, 1, row, WIDE));
        for (int c = 1; c < WIDE; c++)
            if (row[c] != row[0])
                fail("wide row %lld: column %d is %g, column 0 %g: a push applied in part",
                     (long long)k, c, row[c], row[0]);
        if (row[0] != (float)-P0 && row[0] != (float)-(P0 + 1))
            fail("wide row %lld is %g: want %d or %d pushes", (long long)k, row[0], P0, P0 + 1);
        if (k < 2)
            first[k] = row[0];
        else if (row[0] != first[k % 2])
            fail("wide row %lld is %g, row %lld of the same server %g: a request applied in part",
                 (long long)k, row[0], (long long)(k % 2), first[k % 2]);
    }
    printf("wide rows: server 0's %ld pushes, server 1's %ld\n", lroundf(-first[0]),
           lroundf(-first[1]));
    free(row);
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "async") != 0 && strcmp(argv[1], "sync") != 0 &&
                      strcmp(argv[1], "killsend") != 0)) {
        fprintf(stderr, "usage: ps_lost async|sync|killsend\n");
        return 2;
    }
    int sync = strcmp(argv[1], "sync") == 0, killsend = strcmp(argv[1], "killsend") == 0;
    msr_ctx_t *ctx;
    msr_comm_t *world = worker_world(&ctx, 0);
    msr_ps_t *ps;
    OK(msr_ps_create(world, 0, MSR_PS_STALENESS_ENV, &ps));
    int W = msr_ps_workers(ps), w = msr_ps_role_rank(ps);
    if (W != 3 || msr_ps_servers(ps) != 2 ||
        (sync != (getenv("MSR_PS_STALENESS") == NULL || atoi(getenv("MSR_PS_STALENESS")) < 0)))
        fail("needs 3 workers, 2 servers and --ps_staleness=1 for async only");
    msr_ps_table_config_t c = {.rows = 4, .width = 1, .optim = MSR_PS_SGD, .lr = (float)W};
    int t, tw = -1;
    OK(msr_ps_table_create(ps, &c, &t));
    if (killsend) {
        msr_ps_table_config_t cw = {
            .rows = WIDE_ROWS, .width = WIDE, .optim = MSR_PS_SGD, .lr = (float)W};
        OK(msr_ps_table_create(ps, &cw, &tw));
    }
    if (msr_ps_my_role(ps) == MSR_PS_SERVER) {
        msr_status_t st = msr_ps_serve(ps);
        if (sync && st == MSR_ERR_PEER_LOST) {
            printf("sync: server %d (generation %d): serve failed: %s\n", w, msr_generation(ctx),
                   msr_status_name(st));
            _exit(3);
        }
        OK(st);
        if (sync)
            fail("the synchronous server went on without a worker");
    } else if (w == W - 1 && killsend) {
        killsend_victim(ctx, ps, t, tw, w);
    } else if (w == W - 1) {
        for (int i = 0; i < P0; i++)
            OK(step(ps, t, w));
        OK(msr_store_set(ctx, "lost/victim", "1", 1));
        printf("worker %d: %d steps, vanishing\n", w, P0);
        _exit(0); /* no goodbye: no msr_ps_destroy, no msr_finalize */
    } else {
        survivor(ctx, ps, t, w, sync);
        if (killsend && w == 0)
            check_wide(ps, tw);
    }
    msr_ps_destroy(ps);
    msr_comm_destroy(world);
    if (msr_rank(ctx) == 0)
        printf("ok lost\n");
    msr_finalize(ctx);
    return 0;
}
