/* The parameter server's roles, its making and the workers' calls: pull and
 * push batched into one request per server (docs/ps.md). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "ps/ps_impl.h"

/* MSR_PS_SERVERS: -1 when set but not a count. */
static int env_servers(void)
{
    const char *v = getenv("MSR_PS_SERVERS");
    if (v == NULL || *v == '\0')
        return 0;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end != '\0' || n < 0 || n > INT_MAX)
        return -1;
    return (int)n;
}

msr_status_t msr_ps_role(const msr_ctx_t *ctx, msr_ps_role_t *role_p, int *role_rank_p,
                         int *role_size_p)
{
    if (ctx == NULL)
        return msr_err(MSR_ERR_INVALID_ARG, "msr_ps_role: ctx is NULL");
    int rank = msr_rank(ctx), world = msr_world_size(ctx);
    int servers = env_servers();
    if (servers < 0 || (servers > 0 && servers >= world))
        return msr_err(MSR_ERR_INVALID_ARG,
                       "MSR_PS_SERVERS=%s: not a number of servers below the world size %d",
                       getenv("MSR_PS_SERVERS"), world);
    int server = rank >= world - servers;
    const char *named = getenv("MSR_ROLE");
    if (named && *named) {
        if (strcmp(named, "server") != 0 && strcmp(named, "worker") != 0)
            return msr_err(MSR_ERR_INVALID_ARG, "MSR_ROLE=%s: neither server nor worker", named);
        if ((strcmp(named, "server") == 0) != server)
            return msr_err(MSR_ERR_INVALID_ARG,
                           "MSR_ROLE=%s disagrees with rank %d of %d and MSR_PS_SERVERS=%d "
                           "(the last %d ranks are servers)",
                           named, rank, world, servers, servers);
    }
    if (role_p)
        *role_p = server ? MSR_PS_SERVER : MSR_PS_WORKER;
    if (role_rank_p)
        *role_rank_p = server ? rank - (world - servers) : rank;
    if (role_size_p)
        *role_size_p = server ? servers : world - servers;
    return MSR_OK;
}

static void free_links(msr_ps_t *ps)
{
    for (int i = 0; i < ps->nlinks; i++)
        msr_comm_destroy(ps->links[i]);
    msr_free(ps->links);
    ps->links = NULL;
    ps->nlinks = 0;
}

/* Asynchronous mode: a communicator of two for each worker and server, so
 * that a lost worker breaks only its own and the servers go on with the
 * others (docs/ps.md, Failures), each on an engine of its own: on one
 * machine UCX gives an engine one receive queue that all its senders write
 * into, and a worker killed inside a send would stall every other worker's
 * messages to that server behind its slot (docs/ps.md, The hang). All made
 * in one msr_comm_pairs over comm: a worker pairs with every server, a
 * server with every worker. */
static msr_status_t make_links(msr_ps_t *ps, msr_comm_t *comm, const int *peers)
{
    msr_status_t st = msr_comm_pairs(comm, ps->nlinks, peers, ps->links);
    if (st != MSR_OK)
        return msr_err_prefix(st, "msr_ps_create: the pairwise communicators");
    return MSR_OK;
}

/* The ranks in comm a member pairs with: a worker every server, a server
 * every worker. NULL when out of memory. */
static int *link_peers(const msr_ps_t *ps)
{
    int worker = ps->role == MSR_PS_WORKER;
    int *peers = msr_calloc((size_t)ps->nlinks, sizeof *peers);
    for (int o = 0; peers && o < ps->nlinks; o++)
        peers[o] = worker ? ps->workers + o : o;
    return peers;
}

msr_ps_t *ps_new(int rank, int size, int servers, int staleness)
{
    msr_ps_t *ps = msr_calloc(1, sizeof *ps);
    if (ps == NULL)
        return NULL;
    ps->rank = rank;
    ps->size = size;
    ps->servers = servers;
    ps->workers = size - servers;
    ps->staleness = staleness;
    ps->role = rank >= ps->workers ? MSR_PS_SERVER : MSR_PS_WORKER;
    ps->role_rank = ps->role == MSR_PS_SERVER ? rank - ps->workers : rank;
    if (staleness == MSR_PS_SYNC)
        return ps;
    ps->nlinks = ps->role == MSR_PS_WORKER ? servers : ps->workers;
    ps->links = msr_calloc((size_t)ps->nlinks, sizeof *ps->links);
    if (ps->links == NULL) {
        msr_free(ps);
        return NULL;
    }
    return ps;
}

msr_status_t ps_resolve_mode(const char *what, int size, int *servers_p, int *staleness_p)
{
    int servers = *servers_p, staleness = *staleness_p;
    if (servers == 0)
        servers = env_servers();
    if (servers <= 0 || servers >= size)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "%s: %d servers in a communicator of %d (1 to %d, or MSR_PS_SERVERS)", what,
                       servers, size, size - 1);
    if (staleness == MSR_PS_STALENESS_ENV) {
        const char *v = getenv("MSR_PS_STALENESS");
        char *end = NULL;
        long k = v && *v ? strtol(v, &end, 10) : MSR_PS_SYNC;
        if ((v && *v && *end != '\0') || k < MSR_PS_SYNC || k > INT_MAX)
            return msr_err(MSR_ERR_INVALID_ARG,
                           "MSR_PS_STALENESS=%s: not -1 (synchronous) or a staleness >= 0", v);
        staleness = (int)k;
    }
    if (staleness < MSR_PS_SYNC)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "%s: staleness %d (-1 sync, >= 0, or -2 the launcher's)", what, staleness);
    *servers_p = servers;
    *staleness_p = staleness;
    return MSR_OK;
}

/* Every member's start agreed before anything is made over comm: a member
 * out of memory still takes part, so that every member fails at once,
 * naming it, not at the deadline of a collective it never joined. One
 * allreduce (MIN) of status * 2^32 + rank finds the worst status and the
 * lowest rank that had it (a member that succeeded gives its rank alone). */
static msr_status_t agree_start(msr_comm_t *comm, msr_status_t mine)
{
    int64_t key = (int64_t)mine * ((int64_t)1 << 32) + msr_comm_rank(comm);
    msr_status_t st = msr_comm_allreduce(comm, MSR_IN_PLACE, &key, 1, MSR_DTYPE_I64, MSR_OP_MIN);
    if (mine != MSR_OK)
        return msr_err(mine, "msr_ps_create: out of memory");
    if (st != MSR_OK)
        return msr_err_prefix(st, "msr_ps_create: the agreement on its start");
    if (key >= 0)
        return MSR_OK;
    int rank = (int)(key & 0xffffffff);
    msr_status_t worst = (msr_status_t)((key - rank) / ((int64_t)1 << 32));
    return msr_err(worst, "msr_ps_create: rank %d of the communicator (job rank %d) failed (%s)",
                   rank, msr_comm_world_rank(comm, rank), msr_status_str(worst));
}

msr_status_t msr_ps_create(msr_comm_t *comm, int servers, int staleness, msr_ps_t **ps_p)
{
    if (comm == NULL || ps_p == NULL)
        return msr_err(MSR_ERR_INVALID_ARG, "msr_ps_create: NULL argument");
    int size = msr_comm_size(comm);
    msr_status_t st = ps_resolve_mode("msr_ps_create", size, &servers, &staleness);
    if (st != MSR_OK)
        return st;
    msr_ps_t *ps = ps_new(msr_comm_rank(comm), size, servers, staleness);
    int *peers = ps != NULL && ps->links != NULL ? link_peers(ps) : NULL;
    int short_of = ps == NULL || (ps->links != NULL && peers == NULL);
    st = agree_start(comm, short_of ? MSR_ERR_NO_MEMORY : MSR_OK);
    /* synchronous: everything on a duplicate (a lost worker fails every
     * step, and the duplicate's break ends every server at once);
     * asynchronous: only the pairs, split from comm itself */
    if (st == MSR_OK)
        st = ps->links ? make_links(ps, comm, peers) : msr_comm_dup(comm, 0, &ps->comm);
    msr_free(peers);
    if (st != MSR_OK) {
        if (ps != NULL)
            free_links(ps);
        msr_free(ps);
        return st;
    }
    *ps_p = ps;
    return MSR_OK;
}

msr_ps_role_t msr_ps_my_role(const msr_ps_t *ps)
{
    return ps->role;
}
int msr_ps_role_rank(const msr_ps_t *ps)
{
    return ps->role_rank;
}
int msr_ps_workers(const msr_ps_t *ps)
{
    return ps->workers;
}
int msr_ps_servers(const msr_ps_t *ps)
{
    return ps->servers;
}

void msr_ps_traffic(const msr_ps_t *ps, uint64_t *sent_p, uint64_t *received_p)
{
    if (sent_p)
        *sent_p = ps->sent;
    if (received_p)
        *received_p = ps->received;
}

/* A worker's goodbye to every server, answered so that nothing it sent is
 * still on its way when its communicator goes. */
static void say_done(msr_ps_t *ps)
{
    ps_req_t req = {.op = PS_OP_FIN};
    for (int s = 0; s < ps->servers && ps->broken == MSR_OK; s++) {
        ps_rep_t rep;
        int peer;
        msr_comm_t *c = ps_link(ps, s, &peer);
        msr_status_t st = msr_comm_send(c, &req, sizeof req, MSR_DTYPE_U8, peer, PS_TAG_REQ);
        if (st == MSR_OK)
            st = msr_comm_recv(c, &rep, sizeof rep, MSR_DTYPE_U8, peer, PS_TAG_REP);
        if (st != MSR_OK)
            ps->broken = st;
    }
}

void msr_ps_destroy(msr_ps_t *ps)
{
    if (ps == NULL)
        return;
    if (ps->role == MSR_PS_WORKER)
        say_done(ps);
    ps_durable_free(ps);
    for (int i = 0; i < ps->ntables; i++)
        ps_table_free_shard(&ps->tables[i]);
    msr_free(ps->tables);
    free_links(ps);
    msr_comm_destroy(ps->comm);
    msr_free(ps->join_seen);
    if (ps->left) {
        for (int w = 0; w < ps->workers; w++)
            if (ps->left->recv[w])
                (void)msr_comm_wait(ps->left->recv[w]);
        ps_loop_free(ps->left);
        msr_free(ps->left);
    }
    msr_free(ps);
}

static msr_status_t check_config(const msr_ps_table_config_t *c)
{
    if (c->rows == 0 || c->width == 0 || c->width > MSR_PS_WIDTH_MAX)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "msr_ps_table_create: %llu rows of width %u (rows >= 1, width 1 to %u)",
                       (unsigned long long)c->rows, c->width, MSR_PS_WIDTH_MAX);
    if (c->optim != MSR_PS_SGD && c->optim != MSR_PS_ADAGRAD && c->optim != MSR_PS_ADAM)
        return msr_err(MSR_ERR_INVALID_ARG, "msr_ps_table_create: unknown optimizer %d",
                       (int)c->optim);
    if (!isfinite(c->lr) || !isfinite(c->init_scale))
        return msr_err(MSR_ERR_INVALID_ARG, "msr_ps_table_create: lr or init_scale not finite");
    return MSR_OK;
}

msr_status_t msr_ps_table_create(msr_ps_t *ps, const msr_ps_table_config_t *cfg, int *table_p)
{
    if (ps == NULL || cfg == NULL || table_p == NULL)
        return msr_err(MSR_ERR_INVALID_ARG, "msr_ps_table_create: NULL argument");
    msr_status_t st = check_config(cfg);
    if (st != MSR_OK)
        return st;
    if (ps->serving)
        return msr_err(MSR_ERR_STATE, "msr_ps_table_create: the server is already serving");
    if (ps->ntables == ps->cap) {
        int cap = ps->cap ? ps->cap * 2 : 4;
        ps_table_t *t = msr_realloc_array(ps->tables, (size_t)cap, sizeof *t);
        if (t == NULL)
            return msr_err(MSR_ERR_NO_MEMORY, "msr_ps_table_create: out of memory");
        ps->tables = t;
        ps->cap = cap;
    }
    ps_table_t *t = &ps->tables[ps->ntables];
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    if (t->cfg.beta1 == 0)
        t->cfg.beta1 = 0.9f;
    if (t->cfg.beta2 == 0)
        t->cfg.beta2 = 0.999f;
    if (t->cfg.eps == 0)
        t->cfg.eps = cfg->optim == MSR_PS_ADAGRAD ? 1e-10f : 1e-8f;
    if (ps->role == MSR_PS_SERVER && (st = ps_table_alloc_shard(ps, t)) != MSR_OK)
        return st;
    *table_p = ps->ntables++;
    return MSR_OK;
}

float msr_ps_init_value(uint64_t seed, uint64_t row, uint32_t col, float init_scale)
{
    /* splitmix64 of the element's place: independent of the sharding */
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + row * 0xBF58476D1CE4E5B9ull + col + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    double u = (double)(z >> 11) / (double)(1ull << 53); /* [0, 1) */
    return (float)((2.0 * u - 1.0) * init_scale);
}

/* ---- the workers' calls ---- */

/* One call's requests, grouped by server: wire_keys[first[s] ..
 * first[s] + count[s]) go to server s; place[i] is where key i went. Keys
 * that come grouped already (one server, or keys in server order) are sent
 * from the caller's arrays and the rows received into the caller's: no
 * copy and no buffer of the rows' size per call. */
typedef struct ps_batch {
    int servers;
    uint64_t *count, *first, *place;
    int64_t *keys;            /* owned: the keys grouped; NULL: the caller's are */
    float *vals;              /* owned: (nkeys, width) grouped like keys; or NULL */
    const int64_t *wire_keys; /* keys or the caller's */
    const float *push_rows;   /* a push's gradients, grouped: vals or the caller's */
    float *pull_rows;         /* a pull's rows, grouped: vals or the caller's */
    ps_req_t *req;            /* (servers) */
    ps_rep_t *rep;            /* (servers) */
    msr_comm_req_t **ops;     /* (servers * 5) */
} ps_batch_t;

static void batch_free(ps_batch_t *b)
{
    msr_free(b->count);
    msr_free(b->first);
    msr_free(b->place);
    msr_free(b->keys);
    msr_free(b->vals);
    msr_free(b->req);
    msr_free(b->rep);
    msr_free(b->ops);
}

static int server_of(const msr_ps_t *ps, int64_t key)
{
    return key < 0 ? 0 : (int)(key % ps->servers);
}

/* Groups keys by server (a key out of range goes where the server refuses
 * it); out (a pull's) or in (a push's) are the caller's rows.
 * MSR_ERR_NO_MEMORY. */
static msr_status_t batch_make(msr_ps_t *ps, const int64_t *keys, uint64_t nkeys, uint32_t width,
                               float *out, const float *in, ps_batch_t *b)
{
    int S = ps->servers;
    memset(b, 0, sizeof *b);
    b->servers = S;
    b->count = msr_calloc((size_t)S, sizeof *b->count);
    b->first = msr_calloc((size_t)S, sizeof *b->first);
    b->place = msr_calloc(nkeys ? nkeys : 1, sizeof *b->place);
    b->req = msr_calloc((size_t)S, sizeof *b->req);
    b->rep = msr_calloc((size_t)S, sizeof *b->rep);
    b->ops = msr_calloc((size_t)S * 5, sizeof *b->ops);
    if (!b->count || !b->first || !b->place || !b->req || !b->rep || !b->ops)
        goto no_memory;
    int grouped = 1;
    for (uint64_t i = 0; i < nkeys; i++) {
        int s = server_of(ps, keys[i]);
        b->count[s]++;
        grouped &= i == 0 || s >= server_of(ps, keys[i - 1]);
    }
    for (int s = 1; s < S; s++)
        b->first[s] = b->first[s - 1] + b->count[s - 1];
    if (grouped) {
        for (uint64_t i = 0; i < nkeys; i++)
            b->place[i] = i;
        b->wire_keys = keys;
        b->push_rows = in;
        b->pull_rows = out;
        return MSR_OK;
    }
    b->keys = msr_calloc(nkeys, sizeof *b->keys);
    b->vals = msr_malloc(nkeys * width * sizeof *b->vals);
    uint64_t *at = msr_calloc((size_t)S, sizeof *at);
    if (!b->keys || !b->vals || !at) {
        msr_free(at);
        goto no_memory;
    }
    for (uint64_t i = 0; i < nkeys; i++) {
        int s = server_of(ps, keys[i]);
        b->place[i] = b->first[s] + at[s]++;
        b->keys[b->place[i]] = keys[i];
    }
    msr_free(at);
    b->wire_keys = b->keys;
    b->push_rows = b->vals;
    b->pull_rows = b->vals;
    return MSR_OK;
no_memory:
    batch_free(b);
    return msr_err(MSR_ERR_NO_MEMORY, "parameter server: out of memory for %llu keys",
                   (unsigned long long)nkeys);
}

/* Posts one request to server s (answer receives first) and counts the
 * operations in *nops. */
static msr_status_t batch_post(msr_ps_t *ps, ps_batch_t *b, int s, ps_op_t op, int table,
                               uint32_t width, size_t *nops)
{
    int peer;
    msr_comm_t *c = ps_link(ps, s, &peer);
    uint64_t n = b->count[s], off = b->first[s];
    b->req[s] = (ps_req_t){
        .op = op,
        .table = table,
        .nkeys = (int64_t)n,
        .width = width,
        .clock = table >= 0 && table < ps->ntables ? (int64_t)ps->tables[table].pushes : 0};
    msr_status_t st = msr_comm_irecv(c, &b->rep[s], sizeof b->rep[s], MSR_DTYPE_U8, peer,
                                     PS_TAG_REP, &b->ops[(*nops)++]);
    if (st == MSR_OK && op == PS_OP_PULL && n > 0)
        st = msr_comm_irecv(c, b->pull_rows + off * width, n * width, MSR_DTYPE_F32, peer,
                            PS_TAG_ROWS, &b->ops[(*nops)++]);
    if (st == MSR_OK)
        st = msr_comm_isend(c, &b->req[s], sizeof b->req[s], MSR_DTYPE_U8, peer, PS_TAG_REQ,
                            &b->ops[(*nops)++]);
    if (st == MSR_OK && n > 0)
        st = msr_comm_isend(c, b->wire_keys + off, n, MSR_DTYPE_I64, peer, PS_TAG_KEYS,
                            &b->ops[(*nops)++]);
    if (st == MSR_OK && op == PS_OP_PUSH && n > 0)
        st = msr_comm_isend(c, b->push_rows + off * width, n * width, MSR_DTYPE_F32, peer,
                            PS_TAG_VALS, &b->ops[(*nops)++]);
    return st;
}

static msr_status_t check_call(msr_ps_t *ps, const int64_t *keys, uint64_t nkeys, const void *rows,
                               uint32_t width, const char *what)
{
    if (ps == NULL || (nkeys > 0 && (keys == NULL || rows == NULL)))
        return msr_err(MSR_ERR_INVALID_ARG, "%s: NULL argument", what);
    if (ps->role != MSR_PS_WORKER)
        return msr_err(MSR_ERR_STATE, "%s: called on a server", what);
    if (ps->broken != MSR_OK)
        return msr_err(ps->broken, "%s: the parameter server failed before (%s)", what,
                       msr_status_name(ps->broken));
    if (width == 0 || width > MSR_PS_WIDTH_MAX || nkeys > (uint64_t)PS_CALL_ELEMS_MAX / width)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "%s: %llu keys of width %u (width 1 to %u, keys x width at most %lld)", what,
                       (unsigned long long)nkeys, width, MSR_PS_WIDTH_MAX,
                       (long long)PS_CALL_ELEMS_MAX);
    return MSR_OK;
}

/* Adds a call's messages to msr_ps_traffic's counts. */
static void count_traffic(msr_ps_t *ps, const ps_batch_t *b, ps_op_t op, uint32_t width)
{
    for (int s = 0; s < b->servers; s++) {
        if (op == PS_OP_PULL && b->count[s] == 0)
            continue;
        uint64_t rows = b->count[s] * width * sizeof(float);
        ps->sent +=
            sizeof(ps_req_t) + b->count[s] * sizeof(int64_t) + (op == PS_OP_PUSH ? rows : 0);
        ps->received += sizeof(ps_rep_t) + (op == PS_OP_PULL ? rows : 0);
    }
}

/* One pull or push: a request to each server concerned, all in flight at
 * once; the first refusal's reason in msr_last_error(). */
static msr_status_t ps_call(msr_ps_t *ps, ps_op_t op, int table, const int64_t *keys,
                            uint64_t nkeys, float *out, const float *in, uint32_t width)
{
    const char *what = op == PS_OP_PULL ? "msr_ps_pull" : "msr_ps_push";
    msr_status_t st =
        check_call(ps, keys, nkeys, op == PS_OP_PULL ? (const void *)out : in, width, what);
    if (st != MSR_OK)
        return st;
    ps_batch_t b;
    if ((st = batch_make(ps, keys, nkeys, width, out, in, &b)) != MSR_OK)
        return st;
    if (op == PS_OP_PUSH && b.vals)
        for (uint64_t i = 0; i < nkeys; i++)
            memcpy(b.vals + b.place[i] * width, in + i * width, width * sizeof(float));
    size_t nops = 0;
    for (int s = 0; s < ps->servers && st == MSR_OK; s++)
        if (op == PS_OP_PUSH || b.count[s] > 0)
            st = batch_post(ps, &b, s, op, table, width, &nops);
    msr_status_t wst = msr_comm_wait_all(b.ops, nops);
    count_traffic(ps, &b, op, width);
    if (st == MSR_OK)
        st = wst;
    if (st != MSR_OK) {
        ps->broken = st;
        msr_err_prefix(st, "%s: table %d", what, table);
        goto out;
    }
    for (int s = 0; s < ps->servers && st == MSR_OK; s++)
        if ((op == PS_OP_PUSH || b.count[s] > 0) && b.rep[s].status != MSR_OK) {
            b.rep[s].msg[PS_MSG_MAX - 1] = '\0';
            st = msr_err((msr_status_t)b.rep[s].status, "%s: server %d refused: %s", what, s,
                         b.rep[s].msg);
        }
    if (op == PS_OP_PUSH && table >= 0 && table < ps->ntables)
        ps->tables[table].pushes++;
    if (op == PS_OP_PULL && st == MSR_OK && b.vals)
        for (uint64_t i = 0; i < nkeys; i++)
            memcpy(out + i * width, b.vals + b.place[i] * width, width * sizeof(float));
out:
    batch_free(&b);
    return st;
}

msr_status_t msr_ps_pull(msr_ps_t *ps, int table, const int64_t *keys, uint64_t nkeys, float *rows,
                         uint32_t width)
{
    return ps_call(ps, PS_OP_PULL, table, keys, nkeys, rows, NULL, width);
}

msr_status_t msr_ps_push(msr_ps_t *ps, int table, const int64_t *keys, uint64_t nkeys,
                         const float *grads, uint32_t width)
{
    return ps_call(ps, PS_OP_PUSH, table, keys, nkeys, NULL, grads, width);
}

/* The keys 0 .. rows-1 of a known table into *keys_p. */
static msr_status_t dense_keys(msr_ps_t *ps, int table, int64_t **keys_p, uint64_t *n_p,
                               uint32_t *width_p)
{
    if (ps == NULL || table < 0 || table >= ps->ntables)
        return msr_err(MSR_ERR_INVALID_ARG, "dense pull/push: unknown table %d", table);
    const ps_table_t *t = &ps->tables[table];
    int64_t *keys = msr_calloc(t->cfg.rows, sizeof *keys);
    if (keys == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "dense pull/push: out of memory");
    for (uint64_t r = 0; r < t->cfg.rows; r++)
        keys[r] = (int64_t)r;
    *keys_p = keys;
    *n_p = t->cfg.rows;
    *width_p = t->cfg.width;
    return MSR_OK;
}

/* A whole table's pull (into values) or push (of grads). */
static msr_status_t dense_call(msr_ps_t *ps, ps_op_t op, int table, float *values,
                               const float *grads)
{
    int64_t *keys = NULL;
    uint64_t n = 0;
    uint32_t width = 0;
    msr_status_t st = dense_keys(ps, table, &keys, &n, &width);
    if (st != MSR_OK)
        return st;
    st = ps_call(ps, op, table, keys, n, values, grads, width);
    msr_free(keys);
    return st;
}

msr_status_t msr_ps_pull_dense(msr_ps_t *ps, int table, float *values)
{
    return dense_call(ps, PS_OP_PULL, table, values, NULL);
}

msr_status_t msr_ps_push_dense(msr_ps_t *ps, int table, const float *grads)
{
    return dense_call(ps, PS_OP_PUSH, table, NULL, grads);
}
