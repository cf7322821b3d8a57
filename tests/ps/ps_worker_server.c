/* The servers' modes of the parameter server tests' program (ps_worker.c
 * has main and the list of modes): bad (a server's refusals), durable DIR
 * (a server killed under load loses no acknowledged push), order (keys in
 * server order or not land on their rows), fsync DIR N P C (the log
 * synced every N records), reshard DIR E S (a durable state carried
 * into another layout) and elastic DIR (the same through an elastic
 * job's re-form). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "msrun/msrun.h"
#include "tests/ps/ps_maps.h"
#include "tests/ps/ps_worker.h"
#include "tests/worker_fail.h"

WORKER_FAIL("ps_worker", _exit)

/* ---- bad requests ---- */

static void expect_refused(msr_status_t st, const char *what, const char *needle)
{
    if (st != MSR_ERR_INVALID_ARG)
        fail("%s: %s, want MSR_ERR_INVALID_ARG", what, msr_status_name(st));
    if (strstr(msr_last_error(), needle) == NULL)
        fail("%s: the reason '%s' does not say '%s'", what, msr_last_error(), needle);
    printf("refused %s: %s\n", what, msr_last_error());
}

static void bad_worker(msr_ps_t *ps, int t)
{
    float row[4], g[6] = {1, 1, 1, 1, 1, 1}; /* row: the widest pull below */
    int64_t last = 9, past = 10, neg = -1, two[2] = {9, 10};
    OK(msr_ps_pull(ps, t, &last, 1, row, 3));
    float before = row[0];
    expect_refused(msr_ps_pull(ps, t, &past, 1, row, 3), "pull of key rows", "out of range");
    expect_refused(msr_ps_pull(ps, t, &neg, 1, row, 3), "pull of key -1", "out of range");
    expect_refused(msr_ps_pull(ps, t, &last, 1, row, 2), "pull of width 2", "width 3");
    expect_refused(msr_ps_pull(ps, t, &last, 1, row, 4), "pull of width 4", "width 3");
    expect_refused(msr_ps_pull(ps, t + 2, &last, 1, row, 3), "pull of table 2", "unknown table");
    expect_refused(msr_ps_pull(ps, -1, &last, 1, row, 3), "pull of table -1", "unknown table");
    expect_refused(msr_ps_push(ps, t, two, 2, g, 3), "push of keys 9 and 10", "out of range");
    expect_refused(msr_ps_push(ps, t, &last, 1, g, 2), "push of width 2", "width 3");
    expect_refused(msr_ps_push(ps, t + 7, &last, 1, g, 3), "push of table 7", "unknown table");
    OK(msr_ps_pull(ps, t, &last, 1, row, 3));
    if (row[0] != before)
        fail("a refused push changed row 9: %g, was %g", row[0], before);
    OK(msr_ps_push(ps, t, &last, 1, g, 3));
    OK(msr_ps_pull(ps, t, &last, 1, row, 3));
    if (fabsf(row[0] - (before - 1.0f)) > 1e-6f)
        fail("after a good push row 9 is %g, want %g", row[0], before - 1.0f);
    if (msr_ps_serve(ps) != MSR_ERR_STATE)
        fail("msr_ps_serve on a worker did not fail with MSR_ERR_STATE");
    /* the widest table, MSR_PS_WIDTH_MAX, pulled and pushed whole */
    float *wide = calloc(MSR_PS_WIDTH_MAX, sizeof *wide);
    if (wide == NULL)
        fail("out of memory");
    OK(msr_ps_push_dense(ps, t + 1, wide));
    OK(msr_ps_pull_dense(ps, t + 1, wide));
    /* one float past a call's bound (2^30 - 1) is refused before anything
     * is read or sent (at the bound a call would need 4 GiB) */
    uint64_t past_keys = (1ull << 30) / MSR_PS_WIDTH_MAX; /* x 65536 = 2^30 */
    if (msr_ps_pull(ps, t + 1, two, past_keys, wide, MSR_PS_WIDTH_MAX) != MSR_ERR_INVALID_ARG)
        fail("a pull of 2^30 floats was not refused");
    free(wide);
}

void mode_bad(msr_ctx_t *ctx)
{
    g_rank = msr_rank(ctx); /* this file's copy, for fail */
    msr_comm_t *world;
    OK(msr_comm_world(ctx, &world));
    int size = msr_comm_size(world);
    msr_ps_t *ps;
    /* the servers' count: the communicator's size is one past the bound */
    if (msr_ps_create(world, size, 0, &ps) != MSR_ERR_INVALID_ARG)
        fail("msr_ps_create with %d servers of %d accepted", size, size);
    if (msr_ps_create(world, -1, 0, &ps) != MSR_ERR_INVALID_ARG)
        fail("msr_ps_create with -1 servers accepted");
    if (msr_ps_create(world, 1, -3, &ps) != MSR_ERR_INVALID_ARG)
        fail("msr_ps_create with staleness -3 accepted");
    /* the launcher's staleness: the bounds of MSR_PS_STALENESS */
    const char *keep = getenv("MSR_PS_STALENESS");
    char kept[32];
    snprintf(kept, sizeof kept, "%s", keep ? keep : "");
    const char *bad[] = {"-2", "x", "1x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("MSR_PS_STALENESS", bad[i], 1);
        if (msr_ps_create(world, 1, MSR_PS_STALENESS_ENV, &ps) != MSR_ERR_INVALID_ARG)
            fail("MSR_PS_STALENESS=%s accepted", bad[i]);
    }
    setenv("MSR_PS_STALENESS", kept, 1);
    /* ps_bad runs with --ps_staleness 0: the launcher's mode */
    const char *launched = getenv("MSR_PS_STALENESS");
    if (launched == NULL || strcmp(launched, "0") != 0)
        fail("MSR_PS_STALENESS is %s, not the launcher's 0", launched ? launched : "unset");
    OK(msr_ps_create(world, 0, MSR_PS_STALENESS_ENV, &ps));
    msr_ps_table_config_t c = {
        .rows = 10, .width = 3, .optim = MSR_PS_SGD, .lr = 1.0f, .init_scale = 1.0f, .seed = 5};
    int t;
    msr_ps_table_config_t z = c;
    z.width = MSR_PS_WIDTH_MAX + 1;
    if (msr_ps_table_create(ps, &z, &t) != MSR_ERR_INVALID_ARG)
        fail("a table of width MSR_PS_WIDTH_MAX + 1 accepted");
    z.width = 3;
    z.rows = 0;
    if (msr_ps_table_create(ps, &z, &t) != MSR_ERR_INVALID_ARG)
        fail("a table of 0 rows accepted");
    OK(msr_ps_table_create(ps, &c, &t));
    msr_ps_table_config_t wide = {.rows = 1, .width = MSR_PS_WIDTH_MAX, .optim = MSR_PS_ADAM};
    int tw;
    OK(msr_ps_table_create(ps, &wide, &tw));
    if (tw != t + 1)
        fail("the second table is %d, not %d", tw, t + 1);
    if (msr_ps_my_role(ps) == MSR_PS_SERVER) {
        OK(msr_ps_serve(ps));
        float row;
        int64_t key = 0;
        if (msr_ps_pull(ps, t, &key, 1, &row, 3) != MSR_ERR_STATE)
            fail("msr_ps_pull on a server did not fail with MSR_ERR_STATE");
    } else {
        bad_worker(ps, t);
    }
    msr_ps_destroy(ps);
    msr_comm_destroy(world);
    if (msr_rank(ctx) == 0)
        printf("ok bad\n");
}

/* ---- durable DIR: a server killed under load loses no acknowledged push ---- */

/* n into the file path, whole (a new file renamed over it). */
static void acked_write_to(const char *path, long n)
{
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fprintf(f, "%ld\n", n) < 0 || fclose(f) != 0 || rename(tmp, path) != 0)
        fail("writing %s", path);
}

/* This worker's acknowledged pushes, in DIR/acked-<worker>. */
static void acked_write(const char *dir, int me, long n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/acked-%d", dir, me);
    acked_write_to(path, n);
}

static long acked_read(const char *dir, int me)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/acked-%d", dir, me);
    FILE *f = fopen(path, "r");
    long n = -1;
    if (f == NULL || fscanf(f, "%ld", &n) != 1)
        fail("reading %s", path);
    fclose(f);
    return n;
}

/* Generation 0 pushes until the server is killed under it; the next one
 * checks that the restored row holds every acknowledged push. Both workers
 * push -2 with SGD at lr 1: asynchronous, each push adds 1 (the gradient
 * over two workers); synchronous, each step adds 2 (their mean). */
static void durable_worker(msr_ctx_t *ctx, msr_ps_t *ps, int t, const char *dir, int sync)
{
    int me = msr_ps_role_rank(ps);
    if (msr_generation(ctx) == 0) {
        for (long n = 1; n <= 1000000; n++) {
            float g = -2.0f; /* SGD, lr 1, two workers: the row grows by 1 */
            int64_t key = 0;
            msr_status_t st = msr_ps_push(ps, t, &key, 1, &g, 1);
            if (st != MSR_OK) {
                printf("durable: worker %d: push %ld failed: %s\n", me, n, msr_status_name(st));
                _exit(3); /* the job restarts */
            }
            acked_write(dir, me, n);
        }
        fail("the server was not killed within 1000000 pushes");
    }
    long a0 = acked_read(dir, 0), a1 = acked_read(dir, 1);
    float v = 0;
    int64_t key = 0;
    OK(msr_ps_pull(ps, t, &key, 1, &v, 1));
    /* each worker may have had one push applied but not yet acknowledged;
     * synchronous: the steps are those of the worker furthest on, and one
     * more at most past the other's acknowledged ones */
    long lo = sync ? (a0 > a1 ? a0 : a1) : a0 + a1,
         hi = sync ? (a0 < a1 ? a0 : a1) + 1 : a0 + a1 + 2;
    if (sync)
        v /= 2;
    if (v < (float)lo || v > (float)hi)
        fail("the restored row holds %.0f %s, %ld + %ld were acknowledged", v,
             sync ? "steps" : "pushes", a0, a1);
    printf("durable: worker %d: the restored row holds %.0f %s, %ld + %ld acknowledged\n", me, v,
           sync ? "steps" : "pushes", a0, a1);
}

void mode_durable(msr_ctx_t *ctx, const char *dir, int sync)
{
    g_rank = msr_rank(ctx); /* this file's copy, for fail */
    msr_comm_t *world;
    OK(msr_comm_world(ctx, &world));
    msr_ps_t *ps;
    OK(msr_ps_create(world, 0, sync ? MSR_PS_SYNC : 1 << 20, &ps));
    msr_ps_table_config_t c = {.rows = 4, .width = 1, .optim = MSR_PS_SGD, .lr = 1.0f};
    int t;
    OK(msr_ps_table_create(ps, &c, &t));
    if (msr_ps_my_role(ps) == MSR_PS_SERVER) {
        uint64_t restored;
        /* a checkpoint every 7 pushes: kills land between them, in the log */
        OK(msr_ps_durable(ps, dir, 7, &restored));
        printf("durable: server restored %llu %s (generation %d)\n", (unsigned long long)restored,
               sync ? "steps" : "pushes", msr_generation(ctx));
        OK(msr_ps_serve(ps));
    } else {
        durable_worker(ctx, ps, t, dir, sync);
    }
    msr_ps_destroy(ps);
    msr_comm_destroy(world);
    if (msr_rank(ctx) == 0)
        printf("ok durable\n");
}

/* ---- reshard DIR E S: a durable state carried into another layout ---- */

/* The servers durable in DIR (a checkpoint every 7 updates); every worker
 * first pulls the table and finds every value E, then pushes every row S
 * times, each push adding 1 to the row in the asynchronous mode (its
 * gradient -W, which the server divides by the W workers), each step 1 in
 * the synchronous mode (each worker's -1, the step's mean). So the next
 * layout's workers find E + S (synchronous) or E + W S (asynchronous):
 * its servers hold the rows only if they were resharded whole, the old
 * logs replayed with the old number of workers. */
void mode_reshard(msr_ctx_t *ctx, const char *dir, double expect, int steps)
{
    enum { R = 10, W2 = 2 };
    g_rank = msr_rank(ctx); /* this file's copy, for fail */
    msr_comm_t *world;
    OK(msr_comm_world(ctx, &world));
    msr_ps_t *ps;
    OK(msr_ps_create(world, 0, MSR_PS_STALENESS_ENV, &ps));
    msr_ps_table_config_t c = {.rows = R, .width = W2, .optim = MSR_PS_SGD, .lr = 1.0f};
    int t;
    OK(msr_ps_table_create(ps, &c, &t));
    if (msr_ps_my_role(ps) == MSR_PS_SERVER) {
        uint64_t restored;
        OK(msr_ps_durable(ps, dir, 7, &restored));
        printf("reshard: server %d of %d restored %llu updates\n", msr_ps_role_rank(ps),
               msr_ps_servers(ps), (unsigned long long)restored);
        OK(msr_ps_serve(ps));
    } else {
        const char *stal = getenv("MSR_PS_STALENESS");
        int sync = stal == NULL || atoi(stal) < 0, W = msr_ps_workers(ps);
        int64_t keys[R];
        float rows[R * W2], g[R * W2];
        for (int r = 0; r < R; r++)
            keys[r] = r;
        OK(msr_ps_pull(ps, t, keys, R, rows, W2));
        for (int i = 0; i < R * W2; i++)
            if (rows[i] != (float)expect)
                fail("row %d holds %g at the start, want %g", i / W2, rows[i], expect);
        /* asynchronous, a worker's push would reach another's first pull */
        OK(msr_store_barrier(ctx, "ps-worker/reshard/pulled", (uint32_t)W, 0, -1));
        for (int i = 0; i < R * W2; i++)
            g[i] = sync ? -1.0f : (float)-W;
        for (int s = 0; s < steps; s++)
            OK(msr_ps_push(ps, t, keys, R, g, W2));
        printf("reshard: worker %d of %d found every row at %g\n", msr_ps_role_rank(ps), W, expect);
    }
    msr_ps_destroy(ps);
    msr_comm_destroy(world);
    if (msr_rank(ctx) == 0)
        printf("ok reshard\n");
}

/* ---- elastic DIR: a durable state through an elastic job's re-form ---- */

/* The acknowledged pushes of every generation's workers before this one
 * (DIR/acked-g<G>-w<W>, written after each push), summed into *sum_p and
 * counted (files) into *files_p. */
static void acked_before(const char *dir, int gen, long *sum_p, int *files_p)
{
    *sum_p = 0;
    *files_p = 0;
    for (int g = 0; g < gen; g++)
        for (int w = 0; w < 64; w++) {
            char path[4200];
            long n;
            snprintf(path, sizeof path, "%s/acked-g%d-w%d", dir, g, w);
            FILE *f = fopen(path, "r");
            if (f == NULL)
                continue;
            if (fscanf(f, "%ld", &n) != 1)
                fail("reading %s", path);
            fclose(f);
            *sum_p += n;
            ++*files_p;
        }
}

/* An asynchronous job whose servers are durable in DIR (the world of
 * every generation: W workers and the servers, the last ranks): every
 * push adds 1 to the one row (-W over W workers). Worker 0 first checks
 * that the row holds every push acknowledged in the generations before
 * (and at most one more per worker of them: applied, not acknowledged).
 * A generation of more than one worker pushes until the job re-forms (the
 * test kills a node), writing DIR/formed-more first; one of one worker
 * after such a generation pushes 20 times, checks the row grew by 20, and
 * ends the job. */
void mode_elastic(msr_ctx_t *ctx, const char *dir)
{
    g_rank = msr_rank(ctx); /* this file's copy, for fail */
    msr_comm_t *world;
    OK(msr_comm_world(ctx, &world));
    msr_ps_t *ps;
    OK(msr_ps_create(world, 0, 1 << 20, &ps));
    msr_ps_table_config_t c = {.rows = 1, .width = 1, .optim = MSR_PS_SGD, .lr = 1.0f};
    int t, gen = msr_generation(ctx), W = msr_ps_workers(ps), me = msr_ps_role_rank(ps);
    OK(msr_ps_table_create(ps, &c, &t));
    if (msr_ps_my_role(ps) == MSR_PS_SERVER) {
        OK(msr_ps_durable(ps, dir, 7, NULL));
        OK(msr_ps_serve(ps));
        msr_ps_destroy(ps);
        msr_comm_destroy(world);
        return;
    }
    char path[4200], formed[4200];
    snprintf(path, sizeof path, "%s/acked-g%d-w%d", dir, gen, me);
    snprintf(formed, sizeof formed, "%s/formed-more", dir);
    int64_t key = 0;
    float v = 0, g = (float)-W;
    OK(msr_ps_pull(ps, t, &key, 1, &v, 1));
    if (me == 0) {
        long acked;
        int files;
        acked_before(dir, gen, &acked, &files);
        if (v < (float)acked || v > (float)(acked + files))
            fail("generation %d: the row holds %.0f, %ld pushes of %d workers acknowledged before",
                 gen, v, acked, files);
        printf("elastic: generation %d, %d workers: the row holds %.0f, %ld acknowledged before\n",
               gen, W, v + 0.0, acked); /* + 0.0: the initial -0 as 0 */
    }
    /* the check comes before any push of this generation's */
    OK(msr_store_barrier(ctx, "ps-worker/elastic/checked", (uint32_t)W, 0, -1));
    int last = W == 1 && access(formed, F_OK) == 0;
    if (W > 1 && me == 0) {
        FILE *f = fopen(formed, "w");
        if (f == NULL || fclose(f) != 0)
            fail("writing %s", formed);
    }
    for (long n = 1; n <= (last ? 20 : 1000000); n++) {
        msr_status_t st = msr_ps_push(ps, t, &key, 1, &g, 1);
        if (st != MSR_OK) {
            printf("elastic: worker %d: push %ld failed: %s\n", me, n, msr_status_name(st));
            _exit(3); /* the job re-forms */
        }
        acked_write_to(path, n);
    }
    if (!last)
        fail("the job did not re-form within 1000000 pushes");
    float end = 0;
    OK(msr_ps_pull(ps, t, &key, 1, &end, 1));
    if (end != v + 20)
        fail("the row holds %.0f after 20 pushes from %.0f", end, v);
    printf("elastic: generation %d: the row grew from %.0f to %.0f\n", gen, v, end);
    msr_ps_destroy(ps);
    msr_comm_destroy(world);
    printf("ok elastic\n");
}

/* ---- order: keys grouped by server or not, repeated ---- */

/* Pulls keys (n) of table t and checks every row against want (a
 * table's rows x DIM values); what names the case. */
static void pull_check(msr_ps_t *ps, int t, const int64_t *keys, uint64_t n, const float *want,
                       const char *what)
{
    float got[16 * DIM];
    memset(got, 0xff, sizeof got);
    OK(msr_ps_pull(ps, t, keys, n, got, DIM));
    for (uint64_t i = 0; i < n; i++)
        for (int c = 0; c < DIM; c++)
            if (fabsf(got[i * DIM + c] - want[keys[i] * DIM + c]) > 1e-5f)
                fail("%s: key %lld col %d: %g, want %g", what, (long long)keys[i], c,
                     got[i * DIM + c], want[keys[i] * DIM + c]);
}

/* UCX's shared-memory queues this process maps (ps_maps.h). */
static int ucx_queues(void)
{
    int n = maps_ucx_queues();
    if (n < 0)
        fail("cannot read /proc/self/maps");
    return n;
}

/* One worker, synchronous (each push applied before it returns), the keys
 * of a call in server order (sent from the caller's arrays) or not (sent
 * grouped from a copy), repeated, and empty: pulls must return every row
 * where its key is, pushes move the rows they name. */
void mode_order(msr_ctx_t *ctx)
{
    g_rank = msr_rank(ctx); /* this file's copy, for fail */
    msr_comm_t *world;
    OK(msr_comm_world(ctx, &world));
    int q0 = ucx_queues();
    msr_ps_t *ps;
    OK(msr_ps_create(world, 0, MSR_PS_STALENESS_ENV, &ps));
    /* asynchronous: every link on an engine of its own (as many queues as
     * the world's engine again per link); synchronous: none added */
    const char *stal = getenv("MSR_PS_STALENESS");
    int links = stal && atoi(stal) >= 0 ? (msr_ps_my_role(ps) == MSR_PS_WORKER ? msr_ps_servers(ps)
                                                                               : msr_ps_workers(ps))
                                        : 0;
    int q1 = ucx_queues();
    if (q0 == 0 && msr_rank(ctx) == 0)
        printf("order: UCX maps no shared-memory queue here: engines not counted\n");
    else if (q0 > 0 && q1 != q0 * (1 + links))
        fail("%d UCX queues after msr_ps_create with %d links, the world's engine %d: want %d", q1,
             links, q0, q0 * (1 + links));
    else if (msr_rank(ctx) == 0)
        printf("order: %d links on engines of their own (UCX queues %d -> %d)\n", links, q0, q1);
    enum { R = 12 };
    msr_ps_table_config_t c = {
        .rows = R, .width = DIM, .optim = MSR_PS_SGD, .lr = 0.5f, .init_scale = 1, .seed = 7};
    int t;
    OK(msr_ps_table_create(ps, &c, &t));
    if (msr_ps_my_role(ps) == MSR_PS_SERVER) {
        OK(msr_ps_serve(ps));
    } else {
        if (msr_ps_servers(ps) < 2 || msr_ps_workers(ps) != 1)
            fail("order wants 1 worker and 2+ servers");
        float want[R * DIM];
        for (int r = 0; r < R; r++)
            for (int k = 0; k < DIM; k++)
                want[r * DIM + k] = msr_ps_init_value(c.seed, (uint64_t)r, (uint32_t)k, 1);
        int S = msr_ps_servers(ps);
        const int64_t grouped[] = {0, (int64_t)S, 1, 1 + (int64_t)S}, mixed[] = {1, 0, 11, 4, 3};
        const int64_t repeated[] = {5, 5, 2, 5}, all[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
        pull_check(ps, t, grouped, 4, want, "pull in server order");
        pull_check(ps, t, mixed, 5, want, "pull in mixed order");
        pull_check(ps, t, repeated, 4, want, "pull of a repeated key");
        pull_check(ps, t, NULL, 0, want, "pull of no key");
        const int64_t *cases[] = {grouped, mixed, repeated};
        const uint64_t ncase[] = {4, 5, 4};
        for (int k = 0; k < 3; k++) {
            float g[16 * DIM];
            for (uint64_t i = 0; i < ncase[k] * DIM; i++)
                g[i] = (float)(i % 7) - 3.0f + (float)k;
            OK(msr_ps_push(ps, t, cases[k], ncase[k], g, DIM));
            for (uint64_t i = 0; i < ncase[k]; i++)
                for (int d = 0; d < DIM; d++)
                    want[cases[k][i] * DIM + d] -= c.lr * g[i * DIM + d];
            pull_check(ps, t, all, R, want,
                       k == 0   ? "after a push in server order"
                       : k == 1 ? "after a push in mixed order"
                                : "after a push of a repeated key");
        }
    }
    msr_ps_destroy(ps);
    msr_comm_destroy(world);
    if (msr_rank(ctx) == 0)
        printf("ok order\n");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- fsync DIR N P C: the log synced every N records ---- */

void mode_fsync(msr_ctx_t *ctx, char **argv)
{
    g_rank = msr_rank(ctx); /* this file's copy, for fail */
    const char *dir = argv[0];
    long every = atol(argv[1]), pushes = atol(argv[2]), ckpt = atol(argv[3]);
    msr_comm_t *world;
    OK(msr_comm_world(ctx, &world));
    msr_ps_t *ps;
    OK(msr_ps_create(world, 0, 1 << 20, &ps));
    msr_ps_table_config_t c = {.rows = 4, .width = 1, .optim = MSR_PS_SGD, .lr = 1.0f};
    int t;
    OK(msr_ps_table_create(ps, &c, &t));
    if (msr_ps_my_role(ps) == MSR_PS_SERVER) {
        msr_status_t st = msr_ps_durable_fsync(ps, 1);
        if (st != MSR_ERR_STATE)
            fail("msr_ps_durable_fsync before msr_ps_durable: %s", msr_status_name(st));
        uint64_t restored = 0;
        if (ckpt > 0) {
            OK(msr_ps_durable(ps, dir, (uint64_t)ckpt, &restored));
            OK(msr_ps_durable_fsync(ps, (uint64_t)every));
        }
        printf("fsync: server restored %llu pushes\n", (unsigned long long)restored);
        OK(msr_ps_serve(ps));
    } else {
        float g = -1.0f;
        int64_t key = 0;
        double t0 = now_s();
        for (long n = 0; n < pushes; n++)
            OK(msr_ps_push(ps, t, &key, 1, &g, 1));
        double dt = now_s() - t0;
        printf("fsync: %ld pushes, the log synced every %ld: %.0f pushes/s, %.1f us each\n", pushes,
               every, pushes / dt, dt / pushes * 1e6);
    }
    msr_ps_destroy(ps);
    msr_comm_destroy(world);
    if (msr_rank(ctx) == 0)
        printf("ok fsync\n");
}
