/* The program of the parameter server tests, started by the real msrun with
 * --ps_servers (tests/ps/run.sh). This file holds main, roles and the
 * training modes (sync, stale, leave); ps_worker_server.c the servers'
 * (bad, durable, fsync, order, reshard, elastic). `ps_worker MODE [ARG]`:
 *   roles       prints "ROLE <rank> <role> <role rank> <role size>" from
 *               msr_ps_role, then checks msr_ps_role's refusals of a bad
 *               MSR_PS_SERVERS and MSR_ROLE
 *   sync        2+ workers train a small embedding + linear model for 20
 *               steps through the servers in synchronous mode, and the same
 *               model by data-parallel allreduce among the workers, for
 *               SGD, Adagrad and Adam: the tables must agree to 1e-5
 *   stale K     asynchronous with staleness K, two workers and one server:
 *               worker 1 pushes S times and pauses; worker 0's pulls up to
 *               S+K pushes must return, at S+K+1 must wait for worker 1's
 *               next push (not return within 0.5 s without it, and see it);
 *               then worker 1 leaves and worker 0 goes on past K
 *   leave       synchronous, worker 1 stops after 3 steps of worker 0's 6:
 *               worker 0's later steps go on without it
 *   bad         a server's refusals (unknown table, key at and past the
 *               rows, negative key, wrong width) and that the server goes on
 *   durable DIR [sync]  asynchronous (or synchronous), the server durable
 *               in DIR: generation 0's workers push until the server is
 *               killed (by the test), generation 1's check that the
 *               restored row holds every acknowledged push (step)
 *   fsync DIR N P C  asynchronous, one worker: the server durable in DIR
 *               (a checkpoint every C pushes; C 0: not durable, the
 *               bench's baseline), its log synced every N records; the
 *               worker pushes P times and prints its pushes/s (the test
 *               counts the syncs under strace; bench/ps/ prints the
 *               rates); msr_ps_durable_fsync refused before msr_ps_durable
 *   order       one worker, 2+ servers, the launcher's mode: pulls and
 *               pushes of keys in server order, mixed, repeated and none
 *               land on the right rows
 *   reshard DIR E S  the launcher's mode, the servers durable in DIR: every
 *               worker finds every row at E, then pushes each S times
 *               (tests/ps/test_ps_reshard.sh runs it in layout after
 *               layout on one DIR)
 *   elastic DIR asynchronous, the servers durable in DIR, through an
 *               elastic job's re-form (tests/ps/test_ps_elastic.sh): each
 *               generation's worker 0 finds every acknowledged push of
 *               the ones before in the row
 * Every check that fails prints "FAIL" and exits 1; the first worker prints
 * "ok MODE" at the end. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "msrun/msrun.h"
#include "tests/ps/ps_worker.h"
#include "tests/worker_fail.h"

WORKER_FAIL("ps_worker", _exit)

/* ---- roles ---- */

static void mode_roles(msr_ctx_t *ctx)
{
    msr_ps_role_t role;
    int rr, rs;
    OK(msr_ps_role(ctx, &role, &rr, &rs));
    printf("ROLE %d %s %d %d\n", msr_rank(ctx), role == MSR_PS_SERVER ? "server" : "worker", rr,
           rs);
    fflush(stdout);
    /* the environment's refusals, bound and one past */
    char keep[32];
    const char *env = getenv("MSR_PS_SERVERS");
    snprintf(keep, sizeof keep, "%s", env ? env : "");
    const char *role_env = getenv("MSR_ROLE");
    char keep_role[16];
    snprintf(keep_role, sizeof keep_role, "%s", role_env ? role_env : "");
    int world = msr_world_size(ctx);
    char v[32];
    snprintf(v, sizeof v, "%d", world - 1);
    setenv("MSR_PS_SERVERS", v, 1);
    unsetenv("MSR_ROLE");
    if (msr_ps_role(ctx, &role, &rr, &rs) != MSR_OK)
        fail("MSR_PS_SERVERS=%s (world %d) refused", v, world);
    snprintf(v, sizeof v, "%d", world);
    setenv("MSR_PS_SERVERS", v, 1);
    if (msr_ps_role(ctx, &role, &rr, &rs) != MSR_ERR_INVALID_ARG)
        fail("MSR_PS_SERVERS=%s (world %d) accepted", v, world);
    const char *bad[] = {"-1", "x", "1x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("MSR_PS_SERVERS", bad[i], 1);
        if (msr_ps_role(ctx, &role, &rr, &rs) != MSR_ERR_INVALID_ARG)
            fail("MSR_PS_SERVERS=%s accepted", bad[i]);
    }
    setenv("MSR_PS_SERVERS", "1", 1);
    setenv("MSR_ROLE", "boss", 1);
    if (msr_ps_role(ctx, &role, &rr, &rs) != MSR_ERR_INVALID_ARG)
        fail("MSR_ROLE=boss accepted");
    setenv("MSR_ROLE", msr_rank(ctx) == world - 1 ? "worker" : "server", 1);
    if (msr_ps_role(ctx, &role, &rr, &rs) != MSR_ERR_INVALID_ARG)
        fail("a MSR_ROLE that disagrees with the rank accepted");
    if (keep[0])
        setenv("MSR_PS_SERVERS", keep, 1);
    else
        unsetenv("MSR_PS_SERVERS");
    if (keep_role[0])
        setenv("MSR_ROLE", keep_role, 1);
    else
        unsetenv("MSR_ROLE");
    if (msr_rank(ctx) == 0)
        printf("ok roles\n");
}

/* ---- sync: the parameter server against data-parallel allreduce ---- */

enum { ROWS = 40, BATCH = 6, STEPS = 20 };

/* A worker's sample i of step t: two feature ids and a label. */
static void sample(int worker, int t, int i, int64_t *f1, int64_t *f2, float *y)
{
    uint64_t z = (uint64_t)worker * 1000003u + (uint64_t)t * 7919u + (uint64_t)i * 104729u + 17;
    z = (z ^ (z >> 31)) * 0x9E3779B97F4A7C15ull;
    z ^= z >> 29;
    *f1 = (int64_t)(z % ROWS);
    *f2 = (int64_t)((z >> 20) % ROWS);
    *y = (float)((z >> 40) & 1);
}

/* Forward and backward of the batch: rows e (BATCH*2, DIM) of keys, l
 * (DIM + 1: weights, bias); ge (BATCH*2, DIM) and gl (DIM + 1) get the
 * gradients of the batch's mean binary cross-entropy. */
static void batch_grads(int worker, int t, const float *e, const float *l, int64_t *keys, float *ge,
                        float *gl)
{
    memset(gl, 0, (DIM + 1) * sizeof *gl);
    for (int i = 0; i < BATCH; i++) {
        float y;
        sample(worker, t, i, &keys[2 * i], &keys[2 * i + 1], &y);
        float h[DIM], z = l[DIM];
        for (int k = 0; k < DIM; k++) {
            h[k] = e[2 * i * DIM + k] + e[(2 * i + 1) * DIM + k];
            z += h[k] * l[k];
        }
        float p = 1.0f / (1.0f + expf(-z));
        float dz = (p - y) / BATCH;
        for (int k = 0; k < DIM; k++) {
            gl[k] += dz * h[k];
            ge[2 * i * DIM + k] = dz * l[k];
            ge[(2 * i + 1) * DIM + k] = dz * l[k];
        }
        gl[DIM] += dz;
    }
}

/* The reference optimizer on one row (written apart from ps/ps_server.c). */
typedef struct ref_table {
    int rows, width;
    msr_ps_table_config_t cfg;
    float *w, *s1, *s2;
    int *steps;
} ref_table_t;

static void ref_apply(ref_table_t *r, int row, const float *g)
{
    const msr_ps_table_config_t *c = &r->cfg;
    float *p = r->w + row * r->width, *s1 = r->s1 + row * r->width, *s2 = r->s2 + row * r->width;
    double b1 = c->beta1 ? c->beta1 : 0.9, b2 = c->beta2 ? c->beta2 : 0.999;
    double eps = c->eps ? c->eps : (c->optim == MSR_PS_ADAGRAD ? 1e-10 : 1e-8);
    int t = ++r->steps[row];
    for (int k = 0; k < r->width; k++) {
        if (c->optim == MSR_PS_SGD) {
            p[k] -= c->lr * g[k];
        } else if (c->optim == MSR_PS_ADAGRAD) {
            s1[k] += g[k] * g[k];
            p[k] -= (float)(c->lr * g[k] / (sqrt(s1[k]) + eps));
        } else {
            s1[k] = (float)(b1 * s1[k] + (1 - b1) * g[k]);
            s2[k] = (float)(b2 * s2[k] + (1 - b2) * g[k] * g[k]);
            double mh = s1[k] / (1 - pow(b1, t)), vh = s2[k] / (1 - pow(b2, t));
            p[k] -= (float)(c->lr * mh / (sqrt(vh) + eps));
        }
    }
}

static void ref_init(ref_table_t *r, const msr_ps_table_config_t *cfg, const float *values)
{
    r->rows = (int)cfg->rows;
    r->width = (int)cfg->width;
    r->cfg = *cfg;
    size_t n = (size_t)r->rows * r->width;
    r->w = malloc(n * sizeof *r->w);
    r->s1 = calloc(n, sizeof *r->s1);
    r->s2 = calloc(n, sizeof *r->s2);
    r->steps = calloc((size_t)r->rows, sizeof *r->steps);
    if (!r->w || !r->s1 || !r->s2 || !r->steps)
        fail("out of memory");
    memcpy(r->w, values, n * sizeof *r->w);
}

static void ref_free(ref_table_t *r)
{
    free(r->w);
    free(r->s1);
    free(r->s2);
    free(r->steps);
}

/* Relative difference of the tables: |a - b| / |b| in the 2-norm, and no
 * element off by more than 1e-5 relative (1e-6 absolute near 0). */
static void compare(const char *what, const float *a, const float *b, size_t n)
{
    double d = 0, nb = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        nb += (double)b[i] * b[i];
        if (fabs((double)a[i] - b[i]) > 1e-5 * fabs(b[i]) + 1e-6)
            fail("%s: element %zu is %.9g by the servers, %.9g by allreduce", what, i, a[i], b[i]);
    }
    double rel = sqrt(d) / (sqrt(nb) > 0 ? sqrt(nb) : 1);
    if (rel > 1e-5)
        fail("%s: relative difference %.3g > 1e-5", what, rel);
    if (g_rank == 0)
        printf("%s: relative difference %.3g\n", what, rel);
}

/* Trains STEPS steps both ways with one optimizer; workers only. */
static void sync_train(msr_ps_t *ps, msr_comm_t *dp, int te, int tl,
                       const msr_ps_table_config_t *ce, const msr_ps_table_config_t *cl,
                       const char *name)
{
    int me = msr_ps_role_rank(ps), W = msr_ps_workers(ps);
    float init_e[ROWS * DIM], init_l[DIM + 1];
    OK(msr_ps_pull_dense(ps, te, init_e));
    OK(msr_ps_pull_dense(ps, tl, init_l));
    ref_table_t re, rl;
    ref_init(&re, ce, init_e);
    ref_init(&rl, cl, init_l);
    int64_t keys[2 * BATCH];
    float e[2 * BATCH * DIM], l[DIM + 1], ge[2 * BATCH * DIM], gl[DIM + 1];
    for (int t = 0; t < STEPS; t++) {
        /* the parameter server: pull the batch's rows, push their gradients */
        for (int i = 0; i < BATCH; i++) {
            float y;
            sample(me, t, i, &keys[2 * i], &keys[2 * i + 1], &y);
        }
        OK(msr_ps_pull(ps, te, keys, 2 * BATCH, e, DIM));
        OK(msr_ps_pull_dense(ps, tl, l));
        batch_grads(me, t, e, l, keys, ge, gl);
        OK(msr_ps_push(ps, te, keys, 2 * BATCH, ge, DIM));
        OK(msr_ps_push_dense(ps, tl, gl));
        /* data parallel: the whole table's gradient averaged by allreduce,
         * then the touched rows updated (lazily, as the servers do) */
        for (int i = 0; i < 2 * BATCH; i++)
            memcpy(e + i * DIM, re.w + keys[i] * DIM, DIM * sizeof *e);
        batch_grads(me, t, e, rl.w, keys, ge, gl);
        float full[ROWS * DIM], touched[ROWS];
        memset(full, 0, sizeof full);
        memset(touched, 0, sizeof touched);
        for (int i = 0; i < 2 * BATCH; i++) {
            touched[keys[i]] = 1;
            for (int k = 0; k < DIM; k++)
                full[keys[i] * DIM + k] += ge[i * DIM + k];
        }
        OK(msr_comm_allreduce(dp, MSR_IN_PLACE, full, ROWS * DIM, MSR_DTYPE_F32, MSR_OP_SUM));
        OK(msr_comm_allreduce(dp, MSR_IN_PLACE, touched, ROWS, MSR_DTYPE_F32, MSR_OP_MAX));
        OK(msr_comm_allreduce(dp, MSR_IN_PLACE, gl, DIM + 1, MSR_DTYPE_F32, MSR_OP_SUM));
        for (int r = 0; r < ROWS; r++) {
            if (!touched[r])
                continue;
            for (int k = 0; k < DIM; k++)
                full[r * DIM + k] /= W;
            ref_apply(&re, r, full + r * DIM);
        }
        for (int k = 0; k <= DIM; k++)
            gl[k] /= W;
        ref_apply(&rl, 0, gl);
    }
    float fe[ROWS * DIM], fl[DIM + 1];
    OK(msr_ps_pull_dense(ps, te, fe));
    OK(msr_ps_pull_dense(ps, tl, fl));
    char what[64];
    snprintf(what, sizeof what, "%s embedding", name);
    compare(what, fe, re.w, ROWS * DIM);
    snprintf(what, sizeof what, "%s linear", name);
    compare(what, fl, rl.w, DIM + 1);
    double moved = 0;
    for (int i = 0; i < ROWS * DIM; i++)
        moved += fabs((double)fe[i] - init_e[i]);
    if (moved < 1e-3)
        fail("%s: the embedding did not move (%g)", name, moved);
    ref_free(&re);
    ref_free(&rl);
}

static void mode_sync(msr_ctx_t *ctx)
{
    msr_comm_t *world, *dp;
    msr_ps_role_t role;
    OK(msr_ps_role(ctx, &role, NULL, NULL));
    OK(msr_comm_world(ctx, &world));
    OK(msr_comm_split(world, role == MSR_PS_WORKER ? 0 : MSR_COMM_NO_COLOR, msr_rank(ctx), &dp));
    msr_ps_t *ps;
    OK(msr_ps_create(world, 0, MSR_PS_SYNC, &ps));
    const msr_ps_optim_t optims[] = {MSR_PS_SGD, MSR_PS_ADAGRAD, MSR_PS_ADAM};
    const char *names[] = {"sgd", "adagrad", "adam"};
    const float lrs[] = {0.5f, 0.1f, 0.01f};
    int te[3], tl[3];
    msr_ps_table_config_t ce[3], cl[3];
    for (int o = 0; o < 3; o++) {
        ce[o] = (msr_ps_table_config_t){.rows = ROWS,
                                        .width = DIM,
                                        .optim = optims[o],
                                        .lr = lrs[o],
                                        .init_scale = 0.5f,
                                        .seed = 11 + o};
        cl[o] = ce[o];
        cl[o].rows = 1;
        cl[o].width = DIM + 1;
        cl[o].seed = 101 + o;
        OK(msr_ps_table_create(ps, &ce[o], &te[o]));
        OK(msr_ps_table_create(ps, &cl[o], &tl[o]));
    }
    if (role == MSR_PS_SERVER) {
        OK(msr_ps_serve(ps));
    } else {
        for (int o = 0; o < 3; o++)
            sync_train(ps, dp, te[o], tl[o], &ce[o], &cl[o], names[o]);
    }
    msr_ps_destroy(ps);
    msr_comm_destroy(dp);
    msr_comm_destroy(world);
    if (msr_rank(ctx) == 0)
        printf("ok sync\n");
}

/* ---- stale K: the bound at exactly K and one past ---- */

enum { STALE_S = 2 };

static float pull_row1(msr_ps_t *ps, int t)
{
    int64_t key = 1;
    float v;
    OK(msr_ps_pull(ps, t, &key, 1, &v, 1));
    return v;
}

static void push_row(msr_ps_t *ps, int t, int64_t key)
{
    float g = -2.0f; /* SGD, lr 1, two workers: the row grows by 1 */
    OK(msr_ps_push(ps, t, &key, 1, &g, 1));
}

static void stale_worker0(msr_ctx_t *ctx, msr_ps_t *ps, int t, int K)
{
    void *v;
    size_t len;
    OK(msr_store_get(ctx, "ps/w1paused", 30000, &v, &len));
    free(v);
    for (int c = 1; c <= STALE_S + K; c++) {
        push_row(ps, t, 0);
        float got = pull_row1(ps, t);
        if (got != STALE_S)
            fail("pull at %d pushes saw %g of worker 1's pushes, want %d", c, got, STALE_S);
    }
    printf("stale: pulls up to %d pushes (S + K) answered at once\n", STALE_S + K);
    push_row(ps, t, 0);
    OK(msr_store_set(ctx, "ps/w0blocked", "1", 1));
    float got = pull_row1(ps, t);
    OK(msr_store_set(ctx, "ps/w0pulled", "1", 1));
    if (got != STALE_S + 1)
        fail("pull at %d pushes (S + K + 1) saw %g of worker 1's pushes, the bound needs %d",
             STALE_S + K + 1, got, STALE_S + 1);
    printf("stale: the pull at %d pushes waited for worker 1's push %d\n", STALE_S + K + 1,
           STALE_S + 1);
    /* worker 1 leaves now: it bounds nobody any more, far past K */
    for (int c = 0; c < K + 5; c++) {
        push_row(ps, t, 0);
        (void)pull_row1(ps, t);
    }
    printf("stale: %d more pushes and pulls after worker 1 left\n", K + 5);
}

static void mode_stale(msr_ctx_t *ctx, int K)
{
    msr_comm_t *world;
    OK(msr_comm_world(ctx, &world));
    msr_ps_t *ps;
    OK(msr_ps_create(world, 0, K, &ps));
    if (msr_ps_workers(ps) != 2)
        fail("stale needs 2 workers, not %d", msr_ps_workers(ps));
    msr_ps_table_config_t c = {.rows = 4, .width = 1, .optim = MSR_PS_SGD, .lr = 1.0f};
    int t;
    OK(msr_ps_table_create(ps, &c, &t));
    if (msr_ps_my_role(ps) == MSR_PS_SERVER) {
        OK(msr_ps_serve(ps));
    } else if (msr_ps_role_rank(ps) == 0) {
        stale_worker0(ctx, ps, t, K);
    } else {
        for (int i = 0; i < STALE_S; i++)
            push_row(ps, t, 1);
        OK(msr_store_set(ctx, "ps/w1paused", "1", 1));
        void *v;
        size_t len;
        /* worker 0 gets here only if its pulls within the bound returned */
        OK(msr_store_get(ctx, "ps/w0blocked", 30000, &v, &len));
        free(v);
        /* worker 0's pull past the bound is on its way: it must not return
         * before this worker's next push (the wait ends with the deadline
         * when it holds, as it should; a pull let through ends it early) */
        msr_status_t st = msr_store_get(ctx, "ps/w0pulled", 500, &v, &len);
        if (st == MSR_OK)
            fail("worker 0's pull at S + K + 1 pushes returned before worker 1's push S + 1");
        if (st != MSR_ERR_TIMEOUT)
            fail("store get of ps/w0pulled: %s", msr_status_name(st));
        push_row(ps, t, 1);
    }
    msr_ps_destroy(ps);
    msr_comm_destroy(world);
    if (msr_rank(ctx) == 0)
        printf("ok stale\n");
}

/* ---- leave: a worker done early holds no synchronous step back ---- */

static void mode_leave(msr_ctx_t *ctx)
{
    msr_comm_t *world;
    OK(msr_comm_world(ctx, &world));
    msr_ps_t *ps;
    OK(msr_ps_create(world, 0, MSR_PS_SYNC, &ps));
    msr_ps_table_config_t c = {.rows = 1, .width = 1, .optim = MSR_PS_SGD, .lr = 1.0f};
    int t;
    OK(msr_ps_table_create(ps, &c, &t));
    if (msr_ps_my_role(ps) == MSR_PS_SERVER) {
        OK(msr_ps_serve(ps));
    } else {
        /* worker 0 trains 6 steps, worker 1 only 3; each step's mean
         * gradient is -1, whoever pushed it: the row grows by 1 a step */
        int steps = msr_ps_role_rank(ps) == 0 ? 6 : 3;
        for (int i = 0; i < steps; i++) {
            float g = -1.0f, v;
            int64_t key = 0;
            OK(msr_ps_push(ps, t, &key, 1, &g, 1));
            OK(msr_ps_pull(ps, t, &key, 1, &v, 1));
            if (v != (float)(i + 1))
                fail("after step %d the row is %g, want %d", i + 1, v, i + 1);
        }
        printf("leave: worker %d trained %d steps\n", msr_ps_role_rank(ps), steps);
    }
    msr_ps_destroy(ps);
    msr_comm_destroy(world);
    if (msr_rank(ctx) == 0)
        printf("ok leave\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: ps_worker roles|sync|stale K|bad\n");
        return 2;
    }
    msr_ctx_t *ctx;
    OK(msr_init(&ctx));
    g_rank = msr_rank(ctx);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(argv[1], "roles") == 0)
        mode_roles(ctx);
    else if (strcmp(argv[1], "sync") == 0)
        mode_sync(ctx);
    else if (strcmp(argv[1], "stale") == 0 && argc > 2)
        mode_stale(ctx, atoi(argv[2]));
    else if (strcmp(argv[1], "bad") == 0)
        mode_bad(ctx);
    else if (strcmp(argv[1], "leave") == 0)
        mode_leave(ctx);
    else if (strcmp(argv[1], "durable") == 0 && argc > 2)
        mode_durable(ctx, argv[2], argc > 3 && strcmp(argv[3], "sync") == 0);
    else if (strcmp(argv[1], "fsync") == 0 && argc > 5)
        mode_fsync(ctx, argv + 2);
    else if (strcmp(argv[1], "order") == 0)
        mode_order(ctx);
    else if (strcmp(argv[1], "reshard") == 0 && argc > 4)
        mode_reshard(ctx, argv[2], atof(argv[3]), atoi(argv[4]));
    else if (strcmp(argv[1], "elastic") == 0 && argc > 2)
        mode_elastic(ctx, argv[2]);
    else
        fail("unknown mode %s", argv[1]);
    msr_finalize(ctx);
    return 0;
}
