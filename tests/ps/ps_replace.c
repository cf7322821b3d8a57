/* A worker killed and replaced alone (tests/ps/test_ps_replace.sh), under
 * the real msrun with 3 workers, 2 servers and --ps_staleness=1
 * (K). `ps_replace MODE`:
 *   replace  worker 2 pushes P0 steps and kills itself with SIGKILL; the
 *            others push N steps more while it is dead (past its clock
 *            + K: the servers took it as lost); then its replacement
 *            (MSR_INCARNATION=1, started by msrun alone) joins with
 *            msr_ps_join, pulls the current rows, and the staleness
 *            bound holds the others again: they get K + 1 steps past its
 *            join and no further until it pushes; it pushes R steps, the
 *            others M; every row counts exactly the acknowledged pushes
 *            (each push moves each row it names by -1)
 *   die      worker 2 kills itself in every incarnation once it joined
 *            and both servers answered a pull (before any push: the
 *            others do none): msrun replaces it up to --max_restarts,
 *            then reports the failure
 * Every process checks after msr_ps_join that it maps no shared-memory
 * segment of msrun's communicators (/dev/shm/msr-*): the asynchronous
 * parameter server is its pairs alone, no world and no splits.
 * Every check that fails prints "FAIL" and exits 1; worker 0 prints
 * "ok replace" at the end. The store keys say the states waited for. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "msrun/msrun.h"
#include "tests/ps/ps_maps.h"
#include "tests/worker_fail.h"

WORKER_FAIL("ps_replace", _exit)

enum { K = 1, P0 = 5, N = 10, M = K + 3, R = 6, SHARED = 3, VICTIM = 2 };

static msr_ctx_t *ctx;

static msr_status_t step(msr_ps_t *ps, int t, int w)
{
    int64_t keys[2] = {w, SHARED};
    float rows[2], g[2] = {1.0f, 1.0f};
    msr_status_t st = msr_ps_pull(ps, t, keys, 2, rows, 1);
    return st == MSR_OK ? msr_ps_push(ps, t, keys, 2, g, 1) : st;
}

static void wait_key(const char *key)
{
    void *v;
    size_t len;
    OK(msr_store_get(ctx, key, 30000, &v, &len));
    free(v);
}

static int64_t counter(const char *key)
{
    int64_t v = 0;
    OK(msr_store_add(ctx, key, 0, &v));
    return v;
}

/* Adds one to key; the one that makes it `of` sets all. */
static void arrive(const char *key, int64_t of, const char *all)
{
    int64_t v = 0;
    OK(msr_store_add(ctx, key, 1, &v));
    if (v == of)
        OK(msr_store_set(ctx, all, "1", 1));
}

static void expect_row(msr_ps_t *ps, int t, int64_t key, long want)
{
    float v;
    OK(msr_ps_pull(ps, t, &key, 1, &v, 1));
    if (v != (float)-want)
        fail("row %lld is %g: %ld pushes applied, want %ld", (long long)key, v, -(long)v, want);
}

static void check_rows(msr_ps_t *ps, int t)
{
    for (int k = 0; k < VICTIM; k++)
        expect_row(ps, t, k, P0 + N + M);
    expect_row(ps, t, VICTIM, P0 + R);
    expect_row(ps, t, SHARED, 3L * P0 + 2L * (N + M) + R);
}

/* A survivor: P0 steps, N while the victim is dead, M after its
 * replacement joined (each counted in the store), then the rows. */
static void survivor(msr_ps_t *ps, int t, int w)
{
    char key[32];
    snprintf(key, sizeof key, "rep/steps/%d", w);
    for (int i = 0; i < P0 + N + M; i++) {
        if (i == P0)
            wait_key("rep/dead");
        if (i == P0 + N) {
            arrive("rep/advanced", 2, "rep/advanced_all");
            wait_key("rep/joined");
        }
        OK(step(ps, t, w));
        OK(msr_store_add(ctx, key, 1, NULL));
    }
    printf("worker %d: %d steps, %d while worker %d was dead, %d after its replacement\n", w,
           P0 + N + M, N, VICTIM, M);
    arrive("rep/done", 3, "rep/all");
    wait_key("rep/all");
    check_rows(ps, t);
    if (w == 0)
        printf("ok replace\n");
}

/* The replacement: joins once the others went on without it, sees the
 * current rows, holds the others at its clock + K, then pushes R steps. */
static void replacement(msr_ps_t *ps, int t, int inc)
{
    float rows[2];
    int64_t keys[2] = {VICTIM, SHARED};
    OK(msr_ps_pull(ps, t, keys, 2, rows, 1));
    if (rows[0] != (float)-P0 || rows[1] != (float)-(3 * P0 + 2 * N))
        fail("the replacement pulled %g and %g, want %d and %d", rows[0], rows[1], -P0,
             -(3 * P0 + 2 * N));
    printf("worker %d: incarnation %d joined, pulled the current rows\n", VICTIM, inc);
    OK(msr_store_set(ctx, "rep/joined", "1", 1));
    /* the others' steps at clocks P0+N .. P0+N+K need no push of it: they
     * reach P0+N+K+1 steps; the next waits for its first push */
    for (int w = 0; w < VICTIM; w++) {
        char key[32];
        snprintf(key, sizeof key, "rep/steps/%d", w);
        int64_t left = 30000;
        while (counter(key) < P0 + N + K + 1 && left-- > 0)
            usleep(1000);
        int64_t v = counter(key);
        if (v != P0 + N + K + 1)
            fail("worker %d made %lld steps before the replacement pushed, want %d", w,
                 (long long)v, P0 + N + K + 1);
    }
    for (int i = 0; i < R; i++)
        OK(step(ps, t, VICTIM));
    printf("worker %d: incarnation %d pushed %d steps\n", VICTIM, inc, R);
    arrive("rep/done", 3, "rep/all");
    wait_key("rep/all");
    check_rows(ps, t);
}

/* msr_comm_pair's refusals (name empty, past MSR_COMM_PAIR_NAME_MAX, a
 * character outside [A-Za-z0-9._-]; peer itself, -1, the world size), and
 * msr_comm_world's in a replacement. */
static void refusals(int inc)
{
    char longest[MSR_COMM_PAIR_NAME_MAX + 2];
    memset(longest, 'a', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    const char *names[] = {"", longest, "a/b", "a b"};
    int world = msr_world_size(ctx);
    msr_comm_t *c = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (msr_comm_pair(ctx, names[i], (g_rank + 1) % world, &c) != MSR_ERR_INVALID_ARG)
            fail("msr_comm_pair took the name '%s'", names[i]);
    int peers[] = {g_rank, -1, world};
    for (size_t i = 0; i < sizeof peers / sizeof *peers; i++)
        if (msr_comm_pair(ctx, "x", peers[i], &c) != MSR_ERR_INVALID_ARG)
            fail("msr_comm_pair took peer %d of %d", peers[i], world);
    if (inc > 0 && msr_comm_world(ctx, &c) != MSR_ERR_UNSUPPORTED)
        fail("msr_comm_world did not refuse incarnation %d", inc);
}

/* msrun's communicator segments this process maps (ps_maps.h). */
static int msr_segments(void)
{
    int n = maps_msr_segments();
    if (n < 0)
        fail("cannot read /proc/self/maps");
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "replace") != 0 && strcmp(argv[1], "die") != 0)) {
        fprintf(stderr, "usage: ps_replace replace|die\n");
        return 2;
    }
    int die = strcmp(argv[1], "die") == 0;
    OK(msr_init(&ctx));
    g_rank = msr_rank(ctx);
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *v = getenv("MSR_INCARNATION");
    int inc = v ? atoi(v) : -1;
    if (inc < 0)
        fail("no MSR_INCARNATION");
    int victim = g_rank == VICTIM;
    if (victim)
        refusals(inc);
    if (victim && inc > 0 && !die)
        wait_key("rep/advanced_all"); /* the others went on while it was dead */
    msr_ps_t *ps;
    OK(msr_ps_join(ctx, 0, MSR_PS_STALENESS_ENV, &ps));
    int segments = msr_segments();
    if (segments != 0)
        fail("rank %d (incarnation %d) maps %d communicator segments after msr_ps_join, want 0",
             g_rank, inc, segments);
    if (msr_ps_workers(ps) != 3 || msr_ps_servers(ps) != 2)
        fail("needs 3 workers and 2 servers");
    msr_ps_table_config_t c = {.rows = 4, .width = 1, .optim = MSR_PS_SGD, .lr = 3.0f};
    int t;
    OK(msr_ps_table_create(ps, &c, &t));
    if (msr_ps_my_role(ps) == MSR_PS_SERVER) {
        msr_status_t st = msr_ps_serve(ps);
        if (die && st == MSR_ERR_STALE) /* its look for joins saw the generation end */
            _exit(0);
        OK(st);
    } else if (victim && die) {
        /* A pull both servers answer: each took this incarnation before it
         * dies (a join returns once its pairs are made, which a server's
         * log of the join can trail past the generation's end). */
        int64_t keys[2] = {VICTIM, SHARED}; /* row r on server r % 2 */
        float rows[2];
        OK(msr_ps_pull(ps, t, keys, 2, rows, 1));
        printf("worker %d: incarnation %d joined, killing itself\n", VICTIM, inc);
        raise(SIGKILL);
    } else if (victim && inc == 0) {
        for (int i = 0; i < P0; i++)
            OK(step(ps, t, VICTIM));
        OK(msr_store_set(ctx, "rep/dead", "1", 1));
        printf("worker %d: %d steps, killing itself\n", VICTIM, P0);
        raise(SIGKILL);
    } else if (victim) {
        replacement(ps, t, inc);
    } else if (die) { /* the generation ends first (the store says so) */
        void *none;
        size_t len;
        msr_status_t st = msr_store_get(ctx, "rep/never", 120000, &none, &len);
        if (st != MSR_ERR_STALE)
            fail("waiting for the generation's end: %s", msr_status_name(st));
        _exit(0);
    } else {
        survivor(ps, t, g_rank);
    }
    msr_ps_destroy(ps);
    msr_finalize(ctx);
    return 0;
}
