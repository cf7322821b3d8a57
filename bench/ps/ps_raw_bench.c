/* The parameter server's pull and push beside the floor they are built on.
 * Started under msrun --ps_servers S; worker 0 alone calls (the other
 * workers wait), and for each payload size and round prints
 *   op=pull np=4 servers=2 bytes=4096 rows=16 width=64 lat_us=212.5 calls=300
 * for the ops
 *   pull, push       msr_ps_pull / msr_ps_push of `rows` distinct keys of a
 *                    table of `width` floats (rows x width x 4 = bytes),
 *                    asynchronous (no staleness wait), spread over the
 *                    servers as the parameter server spreads them
 *   raw_pull         the same keys (8 bytes each) sent to every server that
 *                    holds some, its rows' bytes answered, as one message
 *                    each way and server, every server's in flight at once
 *                    (msr_comm_isend / irecv on the same communicator)
 *   raw_push         the keys and gradients as one message to each server,
 *                    an 8-byte answer back
 *   store_get        msr_store_get of a value of `bytes` bytes (the copy
 *                    returned freed each time)
 *   store_set        msr_store_set of `bytes` bytes
 * lat_us is the mean time of one call over `calls` calls (after one call
 * not timed). Each round makes the raw exchanges first, then a parameter
 * server with one table per size, then the store's calls, so the rounds
 * see the same load alike; bench/ps/raw_bench.sh takes the best and the
 * median over the rounds.
 * Usage: ps_raw_bench [--sizes LIST] [--rounds N] [--optim sgd|adagrad|adam]
 *                     [--bytes_per_run B] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_PROG  "ps_raw_bench"
#define BENCH_USAGE "[--sizes LIST] [--rounds N] [--optim sgd|adagrad|adam] [--bytes_per_run B]"
#include "ps_bench.h"

enum { MAX_SIZES = 32, TABLE_ROWS = 1 << 16, RAW_TAG_REQ = 11, RAW_TAG_REP = 12 };

typedef struct opts {
    uint64_t sizes[MAX_SIZES];
    int nsizes;
    int rounds;
    msr_ps_optim_t optim;
    uint64_t bytes_per_run; /* the calls of one size move about this much */
} opts_t;

typedef struct shape {
    uint64_t rows; /* keys per call */
    uint32_t width;
} shape_t;

static double now_s(void)
{
    return bench_now_s(CLOCK_MONOTONIC);
}

/* A whole number in [lo, hi] or usage(). */
static uint64_t parse_num(const char *s, uint64_t lo, uint64_t hi, const char *what)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || *end != '\0' || v < lo || v > hi)
        usage(what);
    return v;
}

/* Sizes: 8 to 64 bytes in steps of 8 (one row), or multiples of 256 bytes
 * up to 16 MiB (rows of 64 floats, at most TABLE_ROWS distinct keys). */
static void parse_sizes(const char *list, opts_t *o)
{
    char buf[512];
    if (strlen(list) >= sizeof buf)
        usage("--sizes: list too long");
    strcpy(buf, list);
    o->nsizes = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (o->nsizes == MAX_SIZES)
            usage("--sizes: more than 32 sizes");
        uint64_t b = parse_num(tok, 8, 16u << 20, "--sizes: each 8 .. 16777216");
        if (b % 8 || (b > 64 && b % 256))
            usage("--sizes: each 8 .. 64 in steps of 8, or a multiple of 256");
        o->sizes[o->nsizes++] = b;
    }
    if (o->nsizes == 0)
        usage("--sizes: empty");
}

static void parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.rounds = 5, .optim = MSR_PS_SGD, .bytes_per_run = 8u << 20};
    parse_sizes("8,64,1024,16384,262144,4194304", o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            usage("an option without its value");
        const char *v = argv[++i];
        if (strcmp(a, "--sizes") == 0)
            parse_sizes(v, o);
        else if (strcmp(a, "--rounds") == 0)
            o->rounds = (int)parse_num(v, 1, 1000, "--rounds: 1 .. 1000");
        else if (strcmp(a, "--bytes_per_run") == 0)
            o->bytes_per_run = parse_num(v, 8, 1ull << 34, "--bytes_per_run: 8 .. 2^34");
        else if (strcmp(a, "--optim") == 0) {
            if (strcmp(v, "sgd") == 0)
                o->optim = MSR_PS_SGD;
            else if (strcmp(v, "adagrad") == 0)
                o->optim = MSR_PS_ADAGRAD;
            else if (strcmp(v, "adam") == 0)
                o->optim = MSR_PS_ADAM;
            else
                usage("--optim: sgd, adagrad or adam");
        } else
            usage("unknown option");
    }
}

/* rows x width floats of `bytes` (parse_sizes allows only these): one row
 * of up to 16 floats, else rows of 64 floats (256 bytes). */
static shape_t shape_of(uint64_t bytes)
{
    uint64_t floats = bytes / 4;
    if (floats <= 16)
        return (shape_t){1, (uint32_t)floats};
    return (shape_t){floats / 64, 64};
}

/* Calls per measurement: about bytes_per_run bytes, 3 to 100 calls. */
static int calls_for(const opts_t *o, uint64_t bytes)
{
    uint64_t n = o->bytes_per_run / bytes;
    return n < 3 ? 3 : n > 100 ? 100 : (int)n;
}

static void line(const char *op, int np, int servers, uint64_t bytes, shape_t sh, double secs,
                 int calls)
{
    printf("op=%s np=%d servers=%d bytes=%llu rows=%llu width=%u lat_us=%.2f calls=%d\n", op, np,
           servers, (unsigned long long)bytes, (unsigned long long)sh.rows, sh.width,
           secs / calls * 1e6, calls);
    fflush(stdout);
}

/* Distinct keys: an odd multiplier permutes 0 .. TABLE_ROWS-1. */
static void make_keys(int64_t *keys, uint64_t n)
{
    for (uint64_t k = 0; k < n; k++)
        keys[k] = (int64_t)((k * 2654435761u) % TABLE_ROWS);
}

/* ---- raw: the same keys and rows as one message each way per server ---- */

/* What worker 0 sends server s for n keys: keys (8 bytes each), and for a
 * push their rows' gradients; the answer: a pull's rows, a push's 8 bytes. */
typedef struct raw_msgs {
    int servers;
    uint64_t *n;           /* (servers) keys held by server s */
    uint8_t **req, **rep;  /* (servers) */
    uint64_t *qlen, *plen; /* (servers) bytes */
} raw_msgs_t;

static void raw_make(raw_msgs_t *m, int servers, shape_t sh, int push)
{
    m->servers = servers;
    m->n = calloc((size_t)servers, sizeof *m->n);
    m->req = calloc((size_t)servers, sizeof *m->req);
    m->rep = calloc((size_t)servers, sizeof *m->rep);
    m->qlen = calloc((size_t)servers, sizeof *m->qlen);
    m->plen = calloc((size_t)servers, sizeof *m->plen);
    if (!m->n || !m->req || !m->rep || !m->qlen || !m->plen) {
        fprintf(stderr, "ps_raw_bench: out of memory\n");
        exit(1);
    }
    int64_t *keys = malloc(sh.rows * sizeof *keys);
    if (!keys)
        exit(1);
    make_keys(keys, sh.rows);
    for (uint64_t k = 0; k < sh.rows; k++)
        m->n[keys[k] % servers]++;
    uint64_t row = (uint64_t)sh.width * 4;
    for (int s = 0; s < servers; s++) {
        m->qlen[s] = m->n[s] * 8 + (push ? m->n[s] * row : 0);
        m->plen[s] = push ? 8 : m->n[s] * row;
        m->req[s] = calloc(m->qlen[s] + 1, 1);
        m->rep[s] = calloc(m->plen[s] + 1, 1);
        if (!m->req[s] || !m->rep[s])
            exit(1);
    }
    free(keys);
}

static void raw_free(raw_msgs_t *m)
{
    for (int s = 0; s < m->servers; s++) {
        free(m->req[s]);
        free(m->rep[s]);
    }
    free(m->n);
    free(m->req);
    free(m->rep);
    free(m->qlen);
    free(m->plen);
}

/* One round trip with every server that holds keys, all in flight. */
static void raw_call(msr_comm_t *c, raw_msgs_t *m, int workers)
{
    msr_comm_req_t *ops[2 * 64];
    size_t nops = 0;
    for (int s = 0; s < m->servers && s < 64; s++) {
        if (m->n[s] == 0)
            continue;
        int peer = workers + s;
        CHECK(msr_comm_irecv(c, m->rep[s], m->plen[s], MSR_DTYPE_U8, peer, RAW_TAG_REP,
                             &ops[nops++]));
        CHECK(msr_comm_isend(c, m->req[s], m->qlen[s], MSR_DTYPE_U8, peer, RAW_TAG_REQ,
                             &ops[nops++]));
    }
    CHECK(msr_comm_wait_all(ops, nops));
}

/* Worker 0 times calls+1 round trips (the first not timed); server s
 * answers them; other workers do nothing. */
static void raw_run(msr_comm_t *c, const char *op, int workers, int servers, uint64_t bytes,
                    int calls)
{
    int me = msr_comm_rank(c), np = msr_comm_size(c), s = me - workers;
    shape_t sh = shape_of(bytes);
    raw_msgs_t m;
    raw_make(&m, servers, sh, strcmp(op, "raw_push") == 0);
    if (me == 0) {
        raw_call(c, &m, workers);
        double t0 = now_s();
        for (int i = 0; i < calls; i++)
            raw_call(c, &m, workers);
        line(op, np, servers, bytes, sh, now_s() - t0, calls);
    } else if (s >= 0 && m.n[s] > 0) {
        for (int i = 0; i <= calls; i++) {
            CHECK(msr_comm_recv(c, m.req[s], m.qlen[s], MSR_DTYPE_U8, 0, RAW_TAG_REQ));
            CHECK(msr_comm_send(c, m.rep[s], m.plen[s], MSR_DTYPE_U8, 0, RAW_TAG_REP));
        }
    }
    raw_free(&m);
}

/* ---- the parameter server ---- */

/* Worker 0 times pull then push of every size; servers serve. */
static void ps_round(msr_comm_t *world, const opts_t *o)
{
    msr_ps_t *ps;
    CHECK(msr_ps_create(world, 0, 1 << 30, &ps));
    int tables[MAX_SIZES];
    for (int i = 0; i < o->nsizes; i++) {
        shape_t sh = shape_of(o->sizes[i]);
        msr_ps_table_config_t c = {
            .rows = TABLE_ROWS, .width = sh.width, .optim = o->optim, .lr = 1e-3f};
        CHECK(msr_ps_table_create(ps, &c, &tables[i]));
    }
    int np = msr_comm_size(world), servers = msr_ps_servers(ps);
    if (msr_ps_my_role(ps) == MSR_PS_SERVER)
        CHECK(msr_ps_serve(ps));
    else if (msr_comm_rank(world) == 0) {
        for (int i = 0; i < o->nsizes; i++) {
            uint64_t bytes = o->sizes[i];
            shape_t sh = shape_of(bytes);
            int calls = calls_for(o, bytes);
            int64_t *keys = malloc(sh.rows * sizeof *keys);
            float *v = calloc(sh.rows * sh.width, sizeof *v);
            if (!keys || !v)
                die("buffers", MSR_ERR_NO_MEMORY);
            make_keys(keys, sh.rows);
            CHECK(msr_ps_pull(ps, tables[i], keys, sh.rows, v, sh.width));
            double t0 = now_s();
            for (int c = 0; c < calls; c++)
                CHECK(msr_ps_pull(ps, tables[i], keys, sh.rows, v, sh.width));
            line("pull", np, servers, bytes, sh, now_s() - t0, calls);
            for (uint64_t k = 0; k < sh.rows * sh.width; k++)
                v[k] = 1e-3f;
            CHECK(msr_ps_push(ps, tables[i], keys, sh.rows, v, sh.width));
            t0 = now_s();
            for (int c = 0; c < calls; c++)
                CHECK(msr_ps_push(ps, tables[i], keys, sh.rows, v, sh.width));
            line("push", np, servers, bytes, sh, now_s() - t0, calls);
            free(keys);
            free(v);
        }
    }
    msr_ps_destroy(ps);
}

/* ---- the store ---- */

static void store_round(msr_ctx_t *ctx, const opts_t *o, int np, int servers)
{
    for (int i = 0; i < o->nsizes; i++) {
        uint64_t bytes = o->sizes[i];
        shape_t sh = shape_of(bytes);
        int calls = calls_for(o, bytes);
        char *val = calloc(bytes, 1);
        if (!val)
            die("buffers", MSR_ERR_NO_MEMORY);
        const char *key = "ps_raw_bench.value";
        CHECK(msr_store_set(ctx, key, val, bytes));
        double t0 = now_s();
        for (int c = 0; c < calls; c++)
            CHECK(msr_store_set(ctx, key, val, bytes));
        line("store_set", np, servers, bytes, sh, now_s() - t0, calls);
        t0 = now_s();
        for (int c = 0; c < calls; c++) {
            void *got;
            size_t len;
            CHECK(msr_store_get(ctx, key, 0, &got, &len));
            if (len != bytes)
                die("store_get: wrong length", MSR_ERR_INTERNAL);
            free(got);
        }
        line("store_get", np, servers, bytes, sh, now_s() - t0, calls);
        CHECK(msr_store_delete(ctx, key, NULL));
        free(val);
    }
}

int main(int argc, char **argv)
{
    opts_t o;
    parse_args(argc, argv, &o);
    msr_ctx_t *ctx;
    CHECK(msr_init(&ctx));
    msr_ps_role_t role;
    int servers;
    CHECK(msr_ps_role(ctx, &role, NULL, NULL));
    msr_comm_t *world;
    CHECK(msr_comm_world(ctx, &world));
    int me = msr_comm_rank(world), np = msr_comm_size(world);
    const char *env = getenv("MSR_PS_SERVERS");
    servers = env ? atoi(env) : 0;
    if (servers < 1 || servers > 64) {
        if (me == 0)
            fprintf(stderr, "ps_raw_bench: run under msrun --ps_servers 1 .. 64\n");
        msr_comm_destroy(world);
        msr_finalize(ctx);
        return 2;
    }
    int workers = np - servers;
    for (int r = 0; r < o.rounds; r++) {
        for (int i = 0; i < o.nsizes; i++) {
            int calls = calls_for(&o, o.sizes[i]);
            raw_run(world, "raw_pull", workers, servers, o.sizes[i], calls);
            raw_run(world, "raw_push", workers, servers, o.sizes[i], calls);
        }
        ps_round(world, &o);
        if (me == 0)
            store_round(ctx, &o, np, servers);
        CHECK(msr_comm_barrier(world));
    }
    msr_comm_destroy(world);
    msr_finalize(ctx);
    return 0;
}
