/* A killed worker's way back into an asynchronous parameter server, timed
 * (bench/ps/join_bench.py kills it and reads these lines). Started under
 * msrun --ps_servers S --ps_staleness K --max_restarts >= 1; the last
 * worker is the victim. Every worker trains (pull, then push of --keys
 * random rows of a table of --rows x --width); the victim, once it made
 * --warmup steps, prints
 *   jb ready pid=P t=T
 * and goes on until it is killed. Its replacement (MSR_INCARNATION > 0,
 * started by msrun alone) prints
 *   jb replaced inc=I start=T0 init=T1 joined=T2 pushed=T3
 * T0 its main's start, T1 msr_init done, T2 msr_ps_join done (paired with
 * every server), T3 its first push acknowledged; then it sets the store's
 * jb/stop and the others stop at their next look (every 8 steps). Times
 * are CLOCK_REALTIME seconds, the clock the driver stamps its kill with.
 * Every rank's first process also prints its start-up,
 *   jb made rank=R role=worker|server secs=S
 * S the seconds of msr_ps_join or, with --make create, of msr_ps_create on
 * the world (made before). With --make (join_bench.py --startup) nobody is
 * a victim: the workers train --warmup steps (to the next multiple of 8)
 * and end.
 * Usage: ps_join_bench [--rows N] [--width W] [--keys N] [--warmup N]
 *                      [--make join|create] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_PROG  "ps_join_bench"
#define BENCH_USAGE "[--rows N] [--width W] [--keys N] [--warmup N] [--make join|create]"
#include "ps_bench.h"

typedef struct opts {
    long rows, width, keys, warmup;
    int make; /* --make: 0 none (the replacement's bench); 1 join, 2 create: start-up only */
} opts_t;

static double now_s(void)
{
    return bench_now_s(CLOCK_REALTIME);
}

static long parse_num(const char *s, long lo, long hi, const char *what)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        char why[128];
        snprintf(why, sizeof why, "%s '%s': a whole number from %ld to %ld", what, s, lo, hi);
        usage(why);
    }
    return v;
}

static void parse(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.rows = 1 << 16, .width = 16, .keys = 64, .warmup = 50};
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc)
            usage("an option without its value");
        if (strcmp(argv[i], "--make") == 0) {
            if (strcmp(argv[i + 1], "join") != 0 && strcmp(argv[i + 1], "create") != 0)
                usage("--make: join or create");
            o->make = strcmp(argv[i + 1], "create") == 0 ? 2 : 1;
            continue;
        }
        long *field = strcmp(argv[i], "--rows") == 0     ? &o->rows
                      : strcmp(argv[i], "--width") == 0  ? &o->width
                      : strcmp(argv[i], "--keys") == 0   ? &o->keys
                      : strcmp(argv[i], "--warmup") == 0 ? &o->warmup
                                                         : NULL;
        if (field == NULL)
            usage("unknown option");
        *field = parse_num(argv[i + 1], field == &o->warmup ? 0 : 1,
                           field == &o->width ? MSR_PS_WIDTH_MAX : 1L << 30, argv[i]);
    }
    if (o->keys > o->rows)
        usage("--keys above --rows");
}

/* One step: pull --keys random rows, push a gradient of them. */
static void step(msr_ps_t *ps, int t, const opts_t *o, int64_t *keys, float *rows, unsigned *seed)
{
    for (long i = 0; i < o->keys; i++)
        keys[i] = (int64_t)(rand_r(seed) % (unsigned)o->rows);
    CHECK(msr_ps_pull(ps, t, keys, (uint64_t)o->keys, rows, (uint32_t)o->width));
    for (long i = 0; i < o->keys * o->width; i++)
        rows[i] = 1e-3f;
    CHECK(msr_ps_push(ps, t, keys, (uint64_t)o->keys, rows, (uint32_t)o->width));
}

static int stopped(msr_ctx_t *ctx)
{
    void *v;
    size_t len;
    msr_status_t st = msr_store_get(ctx, "jb/stop", 0, &v, &len);
    if (st == MSR_OK)
        free(v);
    else if (st != MSR_ERR_NOT_FOUND)
        die("msr_store_get jb/stop", st);
    return st == MSR_OK;
}

static void work(msr_ctx_t *ctx, msr_ps_t *ps, int t, const opts_t *o, int inc, double *tm)
{
    int me = msr_ps_role_rank(ps), victim = me == msr_ps_workers(ps) - 1 && !o->make;
    int64_t *keys = malloc((size_t)o->keys * sizeof *keys);
    float *rows = malloc((size_t)(o->keys * o->width) * sizeof *rows);
    if (keys == NULL || rows == NULL)
        die("malloc", MSR_ERR_NO_MEMORY);
    unsigned seed = (unsigned)(me * 7919 + inc);
    if (victim && inc > 0) {
        step(ps, t, o, keys, rows, &seed);
        tm[3] = now_s();
        printf("jb replaced inc=%d start=%.6f init=%.6f joined=%.6f pushed=%.6f\n", inc, tm[0],
               tm[1], tm[2], tm[3]);
        CHECK(msr_store_set(ctx, "jb/stop", "1", 1));
    } else {
        for (long i = 0;; i++) {
            if (victim && i == o->warmup)
                printf("jb ready pid=%d t=%.6f\n", (int)getpid(), now_s());
            if (!victim && i % 8 == 0 && (o->make ? i >= o->warmup : stopped(ctx)))
                break;
            step(ps, t, o, keys, rows, &seed);
        }
    }
    free(keys);
    free(rows);
}

int main(int argc, char **argv)
{
    double tm[4] = {now_s()};
    opts_t o;
    parse(argc, argv, &o);
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *v = getenv("MSR_INCARNATION");
    int inc = v ? atoi(v) : 0;
    msr_ctx_t *ctx;
    CHECK(msr_init(&ctx));
    tm[1] = now_s();
    msr_ps_t *ps;
    if (o.make == 2) {
        msr_comm_t *world;
        CHECK(msr_comm_world(ctx, &world));
        tm[1] = now_s(); /* the parameter server's own start-up only */
        CHECK(msr_ps_create(world, 0, MSR_PS_STALENESS_ENV, &ps));
        msr_comm_destroy(world);
    } else {
        CHECK(msr_ps_join(ctx, 0, MSR_PS_STALENESS_ENV, &ps));
    }
    tm[2] = now_s();
    if (inc == 0)
        printf("jb made rank=%d role=%s secs=%.6f\n", msr_rank(ctx),
               msr_ps_my_role(ps) == MSR_PS_SERVER ? "server" : "worker", tm[2] - tm[1]);
    msr_ps_table_config_t c = {
        .rows = (uint64_t)o.rows, .width = (uint32_t)o.width, .optim = MSR_PS_SGD, .lr = 0.01f};
    int t;
    CHECK(msr_ps_table_create(ps, &c, &t));
    if (msr_ps_my_role(ps) == MSR_PS_SERVER)
        CHECK(msr_ps_serve(ps));
    else
        work(ctx, ps, t, &o, inc, tm);
    msr_ps_destroy(ps);
    msr_finalize(ctx);
    return 0;
}
