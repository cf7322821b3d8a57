/* A durable parameter server started with other numbers of servers or
 * workers reshards its state (ps/ps_durable.c, docs/ps.md "Resharding"):
 * servers made in this process (no communicator: the updates applied and
 * logged as msr_ps_serve applies and logs them), the state of each layout
 * compared bitwise, row by row, with one reference server that took every
 * update; a reshard killed before every new server wrote its rows, bad
 * layouts and missing or changed old files. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "msrun/msrun.h"
#include "ps/ps_impl.h"
#include "tests/runner.h"
#include "tests/tmp_dir.h"

enum { NTABLES = 3, MAX_SERVERS = 4 };

/* Three tables, one of each optimizer, of row counts that no number of
 * servers here divides. */
static const msr_ps_table_config_t TABLES[NTABLES] = {
    {.rows = 23, .width = 3, .optim = MSR_PS_ADAM, .lr = 0.01f, .init_scale = 0.5f, .seed = 3},
    {.rows = 7, .width = 2, .optim = MSR_PS_SGD, .lr = 0.5f, .init_scale = 1, .seed = 4},
    {.rows = 5, .width = 1, .optim = MSR_PS_ADAGRAD, .lr = 0.1f, .seed = 5},
};

/* A server k of `servers` with `workers` workers (asynchronous), its
 * tables made; not durable yet. */
static msr_ps_t *server_new(int k, int servers, int workers)
{
    msr_ps_t *ps = ps_new(workers + k, workers + servers, servers, 4);
    MSR_CHECK(ps != NULL && ps->role == MSR_PS_SERVER && ps->role_rank == k);
    for (int i = 0; i < NTABLES; i++) {
        int t;
        MSR_CHECK(msr_ps_table_create(ps, &TABLES[i], &t) == MSR_OK && t == i);
    }
    return ps;
}

typedef struct opener {
    msr_ps_t *ps;
    const char *dir;
    msr_status_t st;
    char err[512];
} opener_t;

static void *open_thread(void *arg)
{
    opener_t *o = arg;
    o->st = msr_ps_durable(o->ps, o->dir, 5, NULL);
    snprintf(o->err, sizeof o->err, "%s", o->st == MSR_OK ? "" : msr_last_error());
    return NULL;
}

/* Every server of a layout made durable in dir at once (each waits for
 * the others' rows when it reshards); each status into st (NULL: all
 * must succeed). */
static void layout_open(msr_ps_t **ps, int servers, int workers, const char *dir, msr_status_t *st,
                        char (*err)[512])
{
    opener_t o[MAX_SERVERS];
    pthread_t th[MAX_SERVERS];
    for (int k = 0; k < servers; k++) {
        ps[k] = server_new(k, servers, workers);
        o[k] = (opener_t){ps[k], dir, MSR_OK, ""};
        MSR_CHECK(pthread_create(&th[k], NULL, open_thread, &o[k]) == 0);
    }
    for (int k = 0; k < servers; k++) {
        MSR_CHECK(pthread_join(th[k], NULL) == 0);
        if (st != NULL) {
            st[k] = o[k].st;
            snprintf(err[k], sizeof err[k], "%s", o[k].err);
        } else {
            MSR_CHECK_MSG(o[k].st == MSR_OK, "server %d of %d: %s", k, servers, o[k].err);
        }
    }
}

static void layout_close(msr_ps_t **ps, int servers)
{
    for (int k = 0; k < servers; k++)
        msr_ps_destroy(ps[k]);
}

/* The reference: one server of every row, never durable, taking every
 * update with the workers of the layout of the time. */
static msr_ps_t *ref_new(int workers, msr_ps_t *old)
{
    msr_ps_t *ref = server_new(0, 1, workers);
    for (int i = 0; old != NULL && i < NTABLES; i++) {
        ps_table_t *t = &ref->tables[i], *o = &old->tables[i];
        size_t cells = t->local_rows * t->cfg.width * sizeof(float);
        memcpy(t->w, o->w, cells);
        if (t->s1)
            memcpy(t->s1, o->s1, cells);
        if (t->s2)
            memcpy(t->s2, o->s2, cells);
        if (t->steps)
            memcpy(t->steps, o->steps, t->local_rows * sizeof *t->steps);
    }
    if (old != NULL)
        msr_ps_destroy(old);
    return ref;
}

/* Row r of table i of the layout ps (servers of them) equals the
 * reference's, every value and state bit for bit. */
static void check_rows(msr_ps_t **ps, int servers, const msr_ps_t *ref, const char *what)
{
    for (int i = 0; i < NTABLES; i++) {
        const ps_table_t *R = &ref->tables[i];
        size_t w = R->cfg.width, row = w * sizeof(float);
        for (uint64_t r = 0; r < R->cfg.rows; r++) {
            const ps_table_t *t = &ps[r % (uint64_t)servers]->tables[i];
            uint64_t j = r / (uint64_t)servers;
            MSR_CHECK_MSG(j < t->local_rows, "%s: table %d row %llu past its server's %llu", what,
                          i, (unsigned long long)r, (unsigned long long)t->local_rows);
            MSR_CHECK_MSG(memcmp(t->w + j * w, R->w + r * w, row) == 0,
                          "%s: table %d row %llu: %g, the reference %g", what, i,
                          (unsigned long long)r, t->w[j * w], R->w[r * w]);
            MSR_CHECK_MSG(!R->s1 || memcmp(t->s1 + j * w, R->s1 + r * w, row) == 0,
                          "%s: table %d row %llu: its first state differs", what, i,
                          (unsigned long long)r);
            MSR_CHECK_MSG(!R->s2 || memcmp(t->s2 + j * w, R->s2 + r * w, row) == 0,
                          "%s: table %d row %llu: its second state differs", what, i,
                          (unsigned long long)r);
            MSR_CHECK_MSG(!R->steps || t->steps[j] == R->steps[r],
                          "%s: table %d row %llu: %u steps, the reference %u", what, i,
                          (unsigned long long)r, t->steps[j], R->steps[r]);
        }
    }
}

static uint32_t next_rand(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

/* One push of a worker as msr_ps_serve applies it: the keys each server
 * holds, applied, logged and maybe checkpointed there, and all of them on
 * the reference. */
static void push_one(msr_ps_t **ps, int servers, msr_ps_t *ref, int ti, uint32_t *x)
{
    enum { N = 6 };
    const ps_table_t *R = &ref->tables[ti];
    int64_t keys[N], sk[N];
    float g[N * 3], sg[N * 3];
    size_t w = R->cfg.width;
    for (int j = 0; j < N; j++) { /* repeats likely: a push sums them */
        keys[j] = (int64_t)(next_rand(x) % R->cfg.rows);
        for (size_t c = 0; c < w; c++)
            g[j * w + c] = (float)((int)(next_rand(x) % 2001) - 1000) / 997.0f;
    }
    MSR_CHECK(ps_apply_push(ref, &ref->tables[ti], keys, g, N) == MSR_OK);
    for (int k = 0; k < servers; k++) {
        int n = 0;
        for (int j = 0; j < N; j++)
            if (keys[j] % servers == k) {
                sk[n] = keys[j];
                memcpy(sg + n * w, g + j * w, w * sizeof(float));
                n++;
            }
        if (n == 0)
            continue;
        ps_req_t req = {PS_OP_PUSH, ti, n, (int64_t)w, 0};
        MSR_CHECK(ps_apply_push(ps[k], &ps[k]->tables[ti], sk, sg, n) == MSR_OK);
        MSR_CHECK(ps_durable_log(ps[k], &req, sk, sg) == MSR_OK);
        MSR_CHECK(ps_durable_ckpt_due(ps[k]) == MSR_OK);
    }
}

static void push_many(msr_ps_t **ps, int servers, msr_ps_t *ref, int n, uint32_t seed)
{
    uint32_t x = seed;
    for (int i = 0; i < n; i++)
        push_one(ps, servers, ref, (int)(next_rand(&x) % NTABLES), &x);
}

/* A fresh directory holding the state of servers and workers after n
 * pushes (seed), with the reference that took them in *ref_p. */
static const char *state_new(msr_ps_t **ps, int servers, int workers, int n, uint32_t seed,
                             msr_ps_t **ref_p)
{
    msr_test_dir_make("ps_reshard");
    *ref_p = ref_new(workers, NULL);
    layout_open(ps, servers, workers, msr_test_dir, NULL, NULL);
    push_many(ps, servers, *ref_p, n, seed);
    layout_close(ps, servers);
    return msr_test_dir;
}

/* dir's layout file: servers, workers, generation. */
static void check_layout(const char *dir, uint64_t servers, uint64_t workers, uint64_t gen)
{
    char path[512];
    uint64_t v[4];
    struct stat sb;
    snprintf(path, sizeof path, "%s/ps-layout", dir);
    FILE *f = fopen(path, "rb");
    MSR_CHECK_MSG(f != NULL, "no layout in %s", dir);
    MSR_CHECK(fread(v, sizeof v, 1, f) == 1);
    fclose(f);
    MSR_CHECK_MSG(v[1] == servers && v[2] == workers && v[3] == gen,
                  "layout %llu servers %llu workers generation %llu, want %llu %llu %llu",
                  (unsigned long long)v[1], (unsigned long long)v[2], (unsigned long long)v[3],
                  (unsigned long long)servers, (unsigned long long)workers,
                  (unsigned long long)gen);
    MSR_CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);
}

/* Every server of a layout made durable in dir, the layout file naming
 * it as generation gen and every row the reference's. */
static void open_checked(msr_ps_t **ps, int servers, int workers, const char *dir, uint64_t gen,
                         const msr_ps_t *ref, const char *what)
{
    layout_open(ps, servers, workers, dir, NULL, NULL);
    check_layout(dir, (uint64_t)servers, (uint64_t)workers, gen);
    check_rows(ps, servers, ref, what);
}

/* Whether dir holds file name (and then its mode is 0600). */
static int has(const char *dir, const char *name)
{
    char path[512];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (stat(path, &sb) != 0)
        return 0;
    MSR_CHECK_MSG((sb.st_mode & 0777) == 0600, "%s has mode %o", name, sb.st_mode & 0777);
    return 1;
}

/* 2 servers and 3 workers -> 3 and 2 -> 1 and 2 (servers only) -> 1 and
 * 4 (workers only: the old log replayed with its own 2 workers), updates
 * between; each layout equal to the reference, restarted in the same
 * layout too, and the generation before the last removed. */
static void test_reshard_chain(void)
{
    msr_test_dir_make("ps_reshard");
    const char *dir = msr_test_dir;
    msr_ps_t *ps[MAX_SERVERS], *ref = ref_new(3, NULL);
    layout_open(ps, 2, 3, dir, NULL, NULL);
    check_layout(dir, 2, 3, 0);
    push_many(ps, 2, ref, 43, 11); /* 5 a checkpoint: some in the logs */
    check_rows(ps, 2, ref, "2 servers, 3 workers");
    layout_close(ps, 2);
    layout_open(ps, 2, 3, dir, NULL, NULL); /* the same layout: restored as before */
    check_rows(ps, 2, ref, "2 servers, 3 workers, restarted");
    layout_close(ps, 2);
    MSR_CHECK(has(dir, "ps-s0.ckpt") && has(dir, "ps-s1.log"));

    open_checked(ps, 3, 2, dir, 1, ref, "resharded to 3 servers, 2 workers");
    ref = ref_new(2, ref);
    push_many(ps, 3, ref, 37, 12);
    check_rows(ps, 3, ref, "3 servers, 2 workers");
    layout_close(ps, 3);
    MSR_CHECK(has(dir, "ps-g1-s2.ckpt") && has(dir, "ps-g1-s2.log"));
    MSR_CHECK(has(dir, "ps-s0.ckpt")); /* the generation before stays one more */

    open_checked(ps, 1, 2, dir, 2, ref, "resharded to 1 server, 2 workers");
    push_many(ps, 1, ref, 13, 13);
    layout_close(ps, 1);
    MSR_CHECK(!has(dir, "ps-s0.ckpt") && !has(dir, "ps-s0.log") && !has(dir, "ps-s1.log"));

    open_checked(ps, 1, 4, dir, 3, ref, "resharded to 4 workers");
    ref = ref_new(4, ref);
    push_many(ps, 1, ref, 9, 14);
    layout_close(ps, 1);
    layout_open(ps, 1, 4, dir, NULL, NULL);
    check_rows(ps, 1, ref, "1 server, 4 workers, restarted");
    layout_close(ps, 1);
    MSR_CHECK(!has(dir, "ps-g1-s0.ckpt") && !has(dir, "ps-g1-s2.log"));
    MSR_CHECK(has(dir, "ps-g2-s0.ckpt") && has(dir, "ps-g3-s0.ckpt") && has(dir, "ps-g3-s0.log"));
    msr_ps_destroy(ref);
}

/* A reshard killed after one new server wrote its rows and before the
 * other did: the layout still names the old state, which restores whole
 * (and the unfinished generation is removed); the reshard then done
 * again, whole. */
static void test_reshard_killed(void)
{
    msr_ps_t *ps[MAX_SERVERS], *ref;
    const char *dir = state_new(ps, 1, 2, 23, 21, &ref);
    pid_t pid = fork();
    MSR_CHECK(pid >= 0);
    if (pid == 0) { /* server 0 of 2: writes its rows, waits for server 1's */
        msr_ps_t *half = server_new(0, 2, 2);
        msr_ps_durable(half, dir, 5, NULL);
        _exit(3);
    }
    for (int i = 0; i < 2000 && !has(dir, "ps-g1-s0.ckpt"); i++)
        usleep(5000);
    MSR_CHECK_MSG(has(dir, "ps-g1-s0.ckpt"), "server 0 wrote no resharded checkpoint");
    kill(pid, SIGKILL);
    int status;
    MSR_CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
    check_layout(dir, 1, 2, 0);
    layout_open(ps, 1, 2, dir, NULL, NULL);
    check_rows(ps, 1, ref, "the old layout after a reshard killed");
    MSR_CHECK(!has(dir, "ps-g1-s0.ckpt") && !has(dir, "ps-g1-s0.log"));
    push_many(ps, 1, ref, 7, 22);
    layout_close(ps, 1);
    open_checked(ps, 2, 2, dir, 1, ref, "resharded after the killed one");
    layout_close(ps, 2);
    msr_ps_destroy(ref);
}

/* Writes bytes over dir/name (made 0600). */
static void put(const char *dir, const char *name, const void *b, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    MSR_CHECK(f != NULL && fwrite(b, 1, n, f) == n && fclose(f) == 0);
    MSR_CHECK(chmod(path, 0600) == 0);
}

/* The bytes of dir/name into b (at most cap); its length. */
static size_t get(const char *dir, const char *name, void *b, size_t cap)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    MSR_CHECK_MSG(f != NULL, "%s: %s", path, strerror(errno));
    size_t n = fread(b, 1, cap, f);
    fclose(f);
    return n;
}

/* One server opening dir fails with want, saying what. */
static void open_fails(int servers, int workers, const char *dir, msr_status_t want,
                       const char *what)
{
    msr_ps_t *ps[MAX_SERVERS];
    msr_status_t st[MAX_SERVERS];
    char err[MAX_SERVERS][512];
    layout_open(ps, servers, workers, dir, st, err);
    for (int k = 0; k < servers; k++) {
        MSR_CHECK_MSG(st[k] == want, "server %d: %s (%s), want %s", k, msr_status_name(st[k]),
                      err[k], msr_status_name(want));
        MSR_CHECK_MSG(strstr(err[k], what) != NULL, "server %d: '%s' does not say '%s'", k, err[k],
                      what);
    }
    layout_close(ps, servers);
}

/* 2 servers -> 4 -> 2 (each new server reads only the old servers that
 * share rows with it: those equal to it modulo 2), updates between, each
 * equal to the reference; then a checkpoint of the generation the layout
 * names removed: refused, not taken for a new shard of initial values. */
static void test_reshard_gcd(void)
{
    msr_ps_t *ps[MAX_SERVERS], *ref;
    const char *dir = state_new(ps, 2, 2, 29, 41, &ref);
    open_checked(ps, 4, 2, dir, 1, ref, "resharded to 4 servers");
    push_many(ps, 4, ref, 31, 42);
    layout_close(ps, 4);
    open_checked(ps, 2, 2, dir, 2, ref, "resharded back to 2 servers");
    layout_close(ps, 2);
    char path[512];
    snprintf(path, sizeof path, "%s/ps-g2-s1.ckpt", dir);
    MSR_CHECK(unlink(path) == 0);
    msr_status_t st[MAX_SERVERS];
    char err[MAX_SERVERS][512];
    layout_open(ps, 2, 2, dir, st, err);
    MSR_CHECK_MSG(st[0] == MSR_OK, "server 0: %s", err[0]);
    MSR_CHECK_MSG(st[1] == MSR_ERR_CORRUPT && strstr(err[1], "ps-g2-s1.ckpt is missing") != NULL,
                  "server 1: %s (%s)", msr_status_name(st[1]), err[1]);
    layout_close(ps, 2);
    msr_ps_destroy(ref);
}

/* Layouts that are not one (bad magic, cut short, a byte more, zero
 * servers or workers) and old files missing or of other tables: refused,
 * every old file left as it was, the old state still restoring. */
static void test_reshard_bad(void)
{
    msr_ps_t *ps[MAX_SERVERS], *ref;
    const char *dir = state_new(ps, 2, 2, 17, 31, &ref);
    uint64_t good[5];
    MSR_CHECK(get(dir, "ps-layout", good, sizeof good) == 4 * sizeof(uint64_t));
    uint64_t bad[5];
    memcpy(bad, good, sizeof good);
    bad[0] ^= 1;
    put(dir, "ps-layout", bad, 4 * sizeof *bad);
    open_fails(2, 2, dir, MSR_ERR_CORRUPT, "not a parameter server layout");
    put(dir, "ps-layout", good, 4 * sizeof *good - 1);
    open_fails(2, 2, dir, MSR_ERR_CORRUPT, "not a parameter server layout");
    memcpy(bad, good, sizeof good);
    bad[4] = 0;
    put(dir, "ps-layout", bad, 5 * sizeof *bad);
    open_fails(2, 2, dir, MSR_ERR_CORRUPT, "not a parameter server layout");
    for (int v = 1; v <= 2; v++) {
        memcpy(bad, good, sizeof good);
        bad[v] = 0;
        put(dir, "ps-layout", bad, 4 * sizeof *bad);
        open_fails(2, 2, dir, MSR_ERR_CORRUPT, "not a parameter server layout");
    }
    put(dir, "ps-layout", good, 4 * sizeof *good);

    /* an old log missing: refused, not resharded without its updates */
    static char logb[1 << 16], ckb[1 << 16], again[1 << 16];
    size_t logn = get(dir, "ps-s1.log", logb, sizeof logb);
    size_t ckn = get(dir, "ps-s1.ckpt", ckb, sizeof ckb);
    MSR_CHECK(logn > 8 && logn < sizeof logb && ckn > 8 && ckn < sizeof ckb);
    char path[512];
    snprintf(path, sizeof path, "%s/ps-s1.log", dir);
    MSR_CHECK(unlink(path) == 0);
    open_fails(3, 2, dir, MSR_ERR_CORRUPT, "ps-s1.log");
    /* the workers alone changed: server 0 needs only its own old files,
     * but a directory that lacks another's is not one every server sees,
     * and it would wait for server 1's rows there to its deadline (this
     * test's time is less) */
    open_fails(2, 3, dir, MSR_ERR_CORRUPT, "resharding needs a directory every server sees");
    put(dir, "ps-s1.log", logb, logn);
    /* a checkpoint of other tables (a width changed) */
    ckb[3 * 8 + 8] ^= 2; /* table 0's head: its width */
    put(dir, "ps-s1.ckpt", ckb, ckn);
    open_fails(3, 2, dir, MSR_ERR_CORRUPT, "table 0 differs");
    ckb[3 * 8 + 8] ^= 2;
    put(dir, "ps-s1.ckpt", ckb, ckn);
    /* nothing of the old state was changed by the refusals */
    MSR_CHECK(get(dir, "ps-s1.log", again, sizeof again) == logn && memcmp(again, logb, logn) == 0);
    check_layout(dir, 2, 2, 0);
    /* each new server stopped at the old state it could not read, before
     * writing anything of its own */
    MSR_CHECK(!has(dir, "ps-g1-s0.ckpt") && !has(dir, "ps-g1-s2.log"));
    layout_open(ps, 2, 2, dir, NULL, NULL);
    check_rows(ps, 2, ref, "the old layout after the refusals");
    layout_close(ps, 2);
    layout_open(ps, 3, 2, dir, NULL, NULL);
    check_rows(ps, 3, ref, "resharded after the refusals");
    layout_close(ps, 3);
    msr_ps_destroy(ref);
}

static const msr_test_t tests[] = {
    {"reshard_chain", test_reshard_chain, 60},
    {"reshard_killed", test_reshard_killed, 60},
    {"reshard_bad", test_reshard_bad, 60},
    {"reshard_gcd", test_reshard_gcd, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
