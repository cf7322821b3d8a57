/* A replaced worker joining running asynchronous servers (docs/ps.md,
 * Failures): msr_ps_join on both sides, and the servers' look at the
 * replacements waiting (ps_take_joins). Asynchronous, every link is a
 * pair of its own (msr_comm_pair) named by the worker's join, 0 for the
 * first processes. A replacement (msrun started it again alone,
 * MSR_INCARNATION > 0) makes its links so too: it counts its join under
 * its rank in the store, then the job's joins; a server that sees the
 * job's count move reads each worker's, and pairs with a worker whose
 * count passed the joins it took once it took the old one as lost. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/time.h"
#include "ps/ps_impl.h"

/* How often a server looks at the store for a replacement: its wait. */
#define PS_JOIN_POLL_MS 50

/* This generation's keys: the job's joins, one worker's. */
static void joins_key(msr_ctx_t *ctx, char *key, size_t len)
{
    snprintf(key, len, "msr/ps/g%d/joins", msr_generation(ctx));
}

static void join_key(msr_ctx_t *ctx, int worker, char *key, size_t len)
{
    snprintf(key, len, "msr/ps/g%d/join/%d", msr_generation(ctx), worker);
}

/* The pair of worker's join j with server s. */
static void pair_name(msr_ctx_t *ctx, int worker, int64_t j, int s, char *name, size_t len)
{
    snprintf(name, len, "ps-g%d-w%d-j%lld-s%d", msr_generation(ctx), worker, (long long)j, s);
}

/* MSR_INCARNATION: 0 unset; -1 not a count. */
static int env_incarnation(void)
{
    const char *v = getenv("MSR_INCARNATION");
    if (v == NULL || *v == '\0')
        return 0;
    char *end;
    long n = strtol(v, &end, 10);
    return *end != '\0' || n < 0 || n > INT_MAX ? -1 : (int)n;
}

/* The replacement's side: a worker's state without a world, its links
 * made pairwise with every server. */
static msr_status_t rejoin(msr_ctx_t *ctx, int servers, int staleness, int inc, msr_ps_t **ps_p)
{
    int world = msr_world_size(ctx), me = msr_rank(ctx);
    msr_status_t st = ps_resolve_mode("msr_ps_join", world, &servers, &staleness);
    if (st != MSR_OK)
        return st;
    if (staleness == MSR_PS_SYNC || me >= world - servers)
        return msr_err(MSR_ERR_UNSUPPORTED,
                       "msr_ps_join: MSR_INCARNATION=%d: only a worker of an asynchronous "
                       "parameter server is replaced alone, not %s (msrun restarts the job)",
                       inc, me >= world - servers ? "a server" : "a synchronous one's");
    msr_ps_t *ps = ps_new(me, world, servers, staleness);
    if (ps == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "msr_ps_join: out of memory");
    ps->ctx = ctx;
    char key[96], name[MSR_COMM_PAIR_NAME_MAX + 1];
    int64_t j = 0;
    join_key(ctx, me, key, sizeof key);
    st = msr_store_add(ctx, key, 1, &j);
    joins_key(ctx, key, sizeof key);
    if (st == MSR_OK)
        st = msr_store_add(ctx, key, 1, NULL);
    for (int s = 0; s < servers && st == MSR_OK; s++) {
        pair_name(ctx, me, j, s, name, sizeof name);
        st = msr_comm_pair(ctx, name, ps->workers + s, &ps->links[s]);
        if (st != MSR_OK)
            st = msr_err_prefix(st, "msr_ps_join: worker %d's join %lld with server %d", me,
                                (long long)j, s);
    }
    if (st != MSR_OK) {
        ps->broken = st; /* no goodbye */
        msr_ps_destroy(ps);
        return st;
    }
    MSR_INFO("parameter server worker %d: replacement (MSR_INCARNATION=%d) joined the %d "
             "servers (join %lld)",
             me, inc, servers, (long long)j);
    *ps_p = ps;
    return MSR_OK;
}

/* Asynchronous: each link a pair of its own (join 0's names), made
 * directly, without a world communicator or collective splits: every
 * worker-server pair has its own engine and receive queue, and no
 * shared-memory segment. On one machine UCX's shared-memory transports give
 * an engine one receive FIFO that all its senders write into: a worker
 * killed inside a send leaves a slot never marked written, and the server
 * would then never receive another message on that engine from anyone
 * (docs/ps.md, The hang). Workers pair with the servers in order, servers
 * with the workers in order: a pair waited on is always the least of what
 * its two sides still wait for, so none waits for ever. */
static msr_status_t pair_links(msr_ps_t *ps)
{
    int worker = ps->role == MSR_PS_WORKER, me = ps->role_rank;
    char name[MSR_COMM_PAIR_NAME_MAX + 1];
    for (int o = 0; o < ps->nlinks; o++) {
        int w = worker ? me : o, s = worker ? o : me;
        pair_name(ps->ctx, w, 0, s, name, sizeof name);
        msr_status_t st = msr_comm_pair(ps->ctx, name, worker ? ps->workers + s : w, &ps->links[o]);
        if (st != MSR_OK)
            return msr_err_prefix(st, "msr_ps_join: worker %d's link with server %d", w, s);
    }
    return MSR_OK;
}

/* A first process's parameter server: synchronous, msr_ps_create on the
 * world; asynchronous, the pairs alone. */
static msr_status_t join_first(msr_ctx_t *ctx, int servers, int staleness, msr_ps_t **ps_p)
{
    int world_size = msr_world_size(ctx);
    msr_status_t st = ps_resolve_mode("msr_ps_join", world_size, &servers, &staleness);
    if (st != MSR_OK)
        return st;
    if (staleness == MSR_PS_SYNC) {
        msr_comm_t *world = NULL;
        if ((st = msr_comm_world(ctx, &world)) == MSR_OK)
            st = msr_ps_create(world, servers, staleness, ps_p);
        msr_comm_destroy(world); /* the parameter server holds its own */
        if (st == MSR_OK)
            (*ps_p)->ctx = ctx;
        return st;
    }
    msr_ps_t *ps = ps_new(msr_rank(ctx), world_size, servers, staleness);
    if (ps == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "msr_ps_join: out of memory");
    ps->ctx = ctx;
    if ((st = pair_links(ps)) != MSR_OK) {
        ps->broken = st; /* no goodbye */
        msr_ps_destroy(ps);
        return st;
    }
    if (ps->role == MSR_PS_SERVER &&
        (ps->join_seen = msr_calloc((size_t)ps->workers, sizeof *ps->join_seen)) == NULL) {
        msr_ps_destroy(ps);
        return msr_err(MSR_ERR_NO_MEMORY, "msr_ps_join: out of memory");
    }
    *ps_p = ps;
    return MSR_OK;
}

msr_status_t msr_ps_join(msr_ctx_t *ctx, int servers, int staleness, msr_ps_t **ps_p)
{
    if (ctx == NULL || ps_p == NULL)
        return msr_err(MSR_ERR_INVALID_ARG, "msr_ps_join: NULL argument");
    int inc = env_incarnation();
    if (inc < 0)
        return msr_err(MSR_ERR_INVALID_ARG, "MSR_INCARNATION=%s: not a count",
                       getenv("MSR_INCARNATION"));
    return inc > 0 ? rejoin(ctx, servers, staleness, inc, ps_p)
                   : join_first(ctx, servers, staleness, ps_p);
}

/* Pairs with worker's join j, its old one taken as lost: it counts again,
 * its clock from the slowest of the others (it holds nobody back more than
 * they do). A pair that fails leaves it lost. */
static msr_status_t take_join(msr_ps_t *ps, ps_loop_t *l, int worker, int64_t j)
{
    char name[MSR_COMM_PAIR_NAME_MAX + 1];
    pair_name(ps->ctx, worker, j, ps->role_rank, name, sizeof name);
    msr_comm_t *c = NULL;
    msr_status_t st = msr_comm_pair(ps->ctx, name, worker, &c); /* its job rank */
    if (st != MSR_OK) {
        MSR_WARN("parameter server %d: worker %d's replacement (join %lld) did not pair: %s; "
                 "going on without it",
                 ps->role_rank, worker, (long long)j, msr_err_msg_or(st));
        return MSR_OK;
    }
    msr_comm_destroy(ps->links[worker]);
    ps->links[worker] = c;
    l->done[worker] = 0;
    l->ndone--;
    for (int i = 0; i < ps->ntables; i++) {
        ps_table_t *t = &ps->tables[i];
        int64_t base = INT64_MAX;
        for (int w = 0; w < ps->workers; w++)
            if (w != worker && !l->done[w] && t->clock[w] < base)
                base = t->clock[w];
        t->clock[worker] = t->base[worker] = base == INT64_MAX ? 0 : base;
    }
    MSR_WARN("parameter server %d: worker %d's replacement joined (join %lld); serving %d "
             "workers",
             ps->role_rank, worker, (long long)j, ps->workers - l->ndone);
    return MSR_OK;
}

/* The store did not answer a look: a generation that ended (MSR_ERR_STALE)
 * ends the serving, as msrun stops it; any other failure is said once and
 * the server goes on serving the workers it has. */
static msr_status_t poll_failed(msr_ps_t *ps, msr_status_t st)
{
    if (st == MSR_ERR_STALE)
        return st;
    if (!ps->join_warned)
        MSR_WARN("parameter server %d: cannot look for replaced workers (%s); serving on "
                 "(said once)",
                 ps->role_rank, msr_err_msg_or(st));
    ps->join_warned = 1;
    return MSR_OK;
}

msr_status_t ps_take_joins(msr_ps_t *ps, ps_loop_t *l)
{
    uint64_t now = msr_now_ns();
    if (ps->join_seen == NULL || now < ps->join_poll_at)
        return MSR_OK;
    ps->join_poll_at = now + PS_JOIN_POLL_MS * 1000000ull;
    char key[96];
    int64_t all = 0;
    joins_key(ps->ctx, key, sizeof key);
    msr_status_t st = msr_store_add(ps->ctx, key, 0, &all);
    if (st != MSR_OK)
        return poll_failed(ps, st);
    if (all == ps->joins_seen)
        return MSR_OK;
    int waiting = 0;
    for (int w = 0; w < ps->workers && st == MSR_OK; w++) {
        int64_t j = 0;
        join_key(ps->ctx, w, key, sizeof key);
        if ((st = msr_store_add(ps->ctx, key, 0, &j)) != MSR_OK || j <= ps->join_seen[w])
            continue;
        if (!l->done[w]) { /* its old one not yet seen gone: the next look */
            waiting = 1;
            continue;
        }
        ps->join_seen[w] = j;
        st = take_join(ps, l, w, j);
    }
    if (st == MSR_OK && !waiting)
        ps->joins_seen = all;
    return st == MSR_OK ? MSR_OK : poll_failed(ps, st);
}
