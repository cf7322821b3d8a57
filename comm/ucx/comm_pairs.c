/* msr_comm_pairs on the UCX backend, and the engine of a dup with
 * MSR_COMM_OWN_WORKER, whose addresses travel the same way.
 *
 * msr_comm_pairs: a communicator of two, each on an
 * engine of its own, with every listed member, made in one call: every
 * engine opened first, their addresses handed over in one alltoallv of
 * the communicator they are made over (no store traffic), no shared-memory
 * segment. Agreements (one allreduce each) after the engines are open,
 * after the address buffers are allocated and at the end: a member that
 * fails at any step (a bad list, out of memory, UCX refusing an engine)
 * still takes part in them, so that all fail at once and alike, the
 * others naming it. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "comm/ucx/ucx_impl.h"

/* What one call holds until its pairs are made or undone. */
typedef struct pairs {
    msr_comm_t *comm; /* made over */
    int n;            /* pairs asked for */
    const int *peers; /* their ranks in comm */
    msr_comm_t **pairs_p;
    ucx_engine_t **eng;
    unsigned char **rec; /* this member's record per pair */
    size_t *rec_len;
    msr_comm_t **made;
    /* per member of comm: bytes to it and from it (0: no pair), their
     * alltoallv counts and displacements */
    int64_t *out, *in;
    uint64_t *scount, *sdisp, *rcount, *rdisp;
    unsigned char *sbuf, *rbuf;
} pairs_t;

static void pairs_free(pairs_t *p)
{
    for (int k = 0; k < p->n; k++) {
        if (p->rec)
            msr_free(p->rec[k]);
        if (p->eng)
            ucx_engine_discard(p->eng[k]);
    }
    msr_free(p->eng);
    msr_free(p->rec);
    msr_free(p->rec_len);
    msr_free(p->out);
    msr_free(p->in);
    msr_free(p->scount);
    msr_free(p->sdisp);
    msr_free(p->rcount);
    msr_free(p->rdisp);
    msr_free(p->sbuf);
    msr_free(p->rbuf);
}

/* Each peer a member of comm other than this one, listed once. */
static msr_status_t check_peers(const pairs_t *p)
{
    int size = p->comm->size, me = p->comm->rank;
    if (p->n < 0 || p->n > size - 1 || (p->n > 0 && (p->peers == NULL || p->pairs_p == NULL))) {
        msr_err_set("msr_comm_pairs: %d peers in a communicator of %d (0 to %d, with peers and "
                    "pairs_p)",
                    p->n, size, size - 1);
        return MSR_ERR_INVALID_ARG;
    }
    for (int k = 0; k < p->n; k++) {
        int j = p->peers[k];
        if (j < 0 || j >= size || j == me) {
            msr_err_set("msr_comm_pairs: peer %d is not another rank of the %d", j, size);
            return MSR_ERR_INVALID_ARG;
        }
        for (int i = 0; i < k; i++)
            if (p->peers[i] == j) {
                msr_err_set("msr_comm_pairs: peer %d listed twice", j);
                return MSR_ERR_INVALID_ARG;
            }
    }
    return MSR_OK;
}

/* The arrays, then an engine and its record per pair, one after the
 * other with nothing in between to wait for. */
static msr_status_t open_engines(pairs_t *p)
{
    size_t size = (size_t)p->comm->size, n = (size_t)p->n;
    p->out = msr_calloc(size, sizeof *p->out);
    p->in = msr_calloc(size, sizeof *p->in);
    p->scount = msr_calloc(size, sizeof *p->scount);
    p->sdisp = msr_calloc(size, sizeof *p->sdisp);
    p->rcount = msr_calloc(size, sizeof *p->rcount);
    p->rdisp = msr_calloc(size, sizeof *p->rdisp);
    if (!p->out || !p->in || !p->scount || !p->sdisp || !p->rcount || !p->rdisp)
        return msr_err(MSR_ERR_NO_MEMORY, "msr_comm_pairs: out of memory for %zu members", size);
    msr_status_t st = check_peers(p);
    if (st != MSR_OK)
        return st;
    p->eng = msr_calloc(n ? n : 1, sizeof *p->eng);
    p->rec = msr_calloc(n ? n : 1, sizeof *p->rec);
    p->rec_len = msr_calloc(n ? n : 1, sizeof *p->rec_len);
    p->made = msr_calloc(n ? n : 1, sizeof *p->made);
    if (!p->eng || !p->rec || !p->rec_len || !p->made)
        return msr_err(MSR_ERR_NO_MEMORY, "msr_comm_pairs: out of memory for %zu pairs", n);
    ucx_comm_t *uc = p->comm->be;
    for (int k = 0; k < p->n && st == MSR_OK; k++) {
        char uid[256];
        snprintf(uid, sizeof uid, "%.200s.p%d-%d", uc->engine->uid,
                 p->comm->world_ranks[p->comm->rank], p->comm->world_ranks[p->peers[k]]);
        ucx_engine_t *parent = uc->engine;
        int node_only = parent->peers[p->comm->world_ranks[p->peers[k]]].node == parent->my_node;
        st = ucx_engine_open(p->comm->ctx, uid, 2, node_only, &p->eng[k]);
        if (st == MSR_OK)
            st = ucx_engine_record(p->eng[k], &p->rec[k], &p->rec_len[k]);
        if (st == MSR_OK)
            p->out[p->peers[k]] = (int64_t)p->rec_len[k];
    }
    return st;
}

/* The outcome of a step of call on this member: its own error when it
 * failed (why, kept from before the agreement), else the failed member
 * named; MSR_OK when every member succeeded. min_io (may be NULL): a value
 * whose least over the members comes back in the same agreement. */
static msr_status_t outcome_of(const char *call, msr_comm_t *comm, msr_status_t mine,
                               int64_t *min_io, const char *why, const char *step)
{
    msr_status_t worst = MSR_OK;
    int who = 0;
    msr_status_t xst = ucx_comm_agree_min(comm, mine, min_io, &worst, &who);
    if (mine != MSR_OK) {
        msr_err_set("%s", why);
        return mine;
    }
    if (xst != MSR_OK)
        return msr_err_prefix(xst, "%s: the agreement after %s", call, step);
    if (worst != MSR_OK)
        return msr_err(worst, "%s: rank %d of the communicator (job rank %d) failed %s (%s)", call,
                       who, comm->world_ranks[who], step, msr_status_str(worst));
    return MSR_OK;
}

static msr_status_t outcome(msr_comm_t *comm, msr_status_t mine, const char *why, const char *step)
{
    return outcome_of("msr_comm_pairs", comm, mine, NULL, why, step);
}

/* The records, over comm: their sizes (every member sends every other
 * one), then the records themselves, once every member has its buffers. */
static msr_status_t exchange(pairs_t *p)
{
    int size = p->comm->size;
    msr_status_t st = msr_comm_alltoall(p->comm, p->out, p->in, 1, MSR_DTYPE_I64);
    if (st != MSR_OK)
        return msr_err_prefix(st, "msr_comm_pairs: the exchange of address sizes");
    uint64_t so = 0, ro = 0;
    for (int j = 0; j < size; j++) {
        p->scount[j] = p->out[j] > 0 ? (uint64_t)p->out[j] : 0;
        p->rcount[j] = p->in[j] > 0 ? (uint64_t)p->in[j] : 0;
        p->sdisp[j] = so;
        p->rdisp[j] = ro;
        so += p->scount[j];
        ro += p->rcount[j];
    }
    p->sbuf = msr_malloc(so ? so : 1);
    p->rbuf = msr_malloc(ro ? ro : 1);
    char why[256] = "";
    if (p->sbuf == NULL || p->rbuf == NULL) {
        st = MSR_ERR_NO_MEMORY;
        snprintf(why, sizeof why, "msr_comm_pairs: out of memory for %llu bytes of addresses",
                 (unsigned long long)(so + ro));
    }
    st = outcome(p->comm, st, why, "to allocate its addresses");
    if (st != MSR_OK)
        return st;
    for (int k = 0; k < p->n; k++)
        memcpy(p->sbuf + p->sdisp[p->peers[k]], p->rec[k], p->rec_len[k]);
    st = msr_comm_alltoallv(p->comm, p->sbuf, p->scount, p->sdisp, p->rbuf, p->rcount, p->rdisp,
                            MSR_DTYPE_U8);
    if (st != MSR_OK)
        return msr_err_prefix(st, "msr_comm_pairs: the exchange of addresses");
    return MSR_OK;
}

/* Each pair's engine told its peer, and its communicator made. */
static msr_status_t make_pairs(pairs_t *p)
{
    msr_comm_t *c = p->comm;
    int me = c->rank;
    ucx_engine_t *parent = ((ucx_comm_t *)c->be)->engine;
    for (int k = 0; k < p->n; k++) {
        int j = p->peers[k];
        if (p->in[j] <= 0) {
            msr_err_set("msr_comm_pairs: rank %d lists rank %d as a peer, which does not list "
                        "it back",
                        me, j);
            return MSR_ERR_INVALID_ARG;
        }
    }
    for (int j = 0; j < c->size; j++)
        if (p->in[j] > 0 && p->out[j] <= 0) {
            msr_err_set("msr_comm_pairs: rank %d lists rank %d as a peer, which does not list "
                        "it back",
                        j, me);
            return MSR_ERR_INVALID_ARG;
        }
    for (int k = 0; k < p->n; k++) {
        int j = p->peers[k], index = me > j;
        int wr[2] = {c->world_ranks[index ? j : me], c->world_ranks[index ? me : j]};
        ucx_engine_t *e = p->eng[k];
        msr_status_t st = ucx_engine_take_pair(e, wr, index, p->rbuf + p->rdisp[j],
                                               (size_t)p->rcount[j], parent->host_ranks);
        if (st != MSR_OK)
            return st;
        ucx_engine_ready(e, 2);
        /* both engines are new: the first id is the same on both sides */
        st = ucx_comm_make(c->ctx, e, e->next_comm_id++, index, 2, wr, atomic_load(&c->timeout_ms),
                           &p->made[k]);
        if (st != MSR_OK)
            return st;
        p->eng[k] = NULL; /* the communicator's */
    }
    return MSR_OK;
}

/* Destroys what was made, without telling the peers it left (their
 * side goes too). */
static void undo_made(pairs_t *p, msr_status_t st)
{
    for (int k = 0; p->made && k < p->n; k++) {
        if (p->made[k] == NULL)
            continue;
        msr_comm_break(p->made[k], st);
        msr_comm_destroy(p->made[k]);
        p->made[k] = NULL;
    }
    msr_free(p->made);
    p->made = NULL;
}

msr_status_t msr_ucx_comm_pairs(msr_comm_t *comm, int n, const int *peers, msr_comm_t **pairs_p)
{
    pairs_t p = {.comm = comm, .n = n, .peers = peers, .pairs_p = pairs_p};
    char why[256] = "";
    msr_status_t st = open_engines(&p);
    if (st != MSR_OK)
        snprintf(why, sizeof why, "%s", msr_last_error());
    st = outcome(comm, st, why, "to open its engines");
    if (st == MSR_OK)
        st = exchange(&p);
    if (st == MSR_OK) {
        st = make_pairs(&p);
        if (st != MSR_OK)
            snprintf(why, sizeof why, "%s", msr_last_error());
        /* everyone learns the worst status: all made, or all undone */
        st = outcome(comm, st, why, "to make its pairs");
    }
    if (st == MSR_OK) {
        for (int k = 0; k < n; k++)
            pairs_p[k] = p.made[k];
        msr_free(p.made);
        p.made = NULL;
        pairs_free(&p);
        return MSR_OK;
    }
    char kept[256];
    snprintf(kept, sizeof kept, "%s", msr_last_error());
    undo_made(&p, st);
    pairs_free(&p);
    msr_err_set("%s", kept);
    return st;
}

/* ---- the engine of a dup with MSR_COMM_OWN_WORKER ---- */

/* Every member's record in one allgather over comm, each in a block of
 * the longest's size (its length first); *all_p allocated. */
static msr_status_t gather_records(msr_comm_t *comm, const unsigned char *rec, size_t len,
                                   size_t stride, unsigned char **all_p)
{
    unsigned char *mine = msr_calloc(1, stride);
    unsigned char *all = msr_malloc((size_t)comm->size * stride);
    msr_status_t st = MSR_OK;
    char why[256] = "";
    if (mine == NULL || all == NULL) {
        st = MSR_ERR_NO_MEMORY;
        snprintf(why, sizeof why, "msr_comm_dup: out of memory for %d addresses of %zu bytes",
                 comm->size, stride);
    }
    st = outcome_of("msr_comm_dup", comm, st, NULL, why, "to allocate its addresses");
    if (st == MSR_OK) {
        uint64_t l = len;
        memcpy(mine, &l, sizeof l);
        memcpy(mine + sizeof l, rec, len);
        st = msr_comm_allgather(comm, mine, all, stride, MSR_DTYPE_U8);
        if (st != MSR_OK)
            st = msr_err_prefix(st, "msr_comm_dup: the exchange of addresses");
    }
    msr_free(mine);
    if (st != MSR_OK) {
        msr_free(all);
        return st;
    }
    *all_p = all;
    return MSR_OK;
}

/* The engine of a dup of comm with MSR_COMM_OWN_WORKER (every member of
 * comm a member, at its rank): opened on each member, its address handed
 * over in an allgather of comm rather than through the store, where a
 * member that failed before publishing left the others waiting until
 * their deadline. Every member takes part in each step whatever its own
 * outcome (an agreement after opening, which also finds the longest
 * record, and one after allocating the exchange's buffers), so that all
 * fail at once and alike, the others naming the member that failed; a
 * failure after the exchange is the caller's to agree on (the split's
 * last agreement). */
msr_status_t ucx_engine_create_over(msr_comm_t *comm, const char *uid, ucx_engine_t **engine_p)
{
    int n = comm->size;
    ucx_engine_t *e = NULL;
    unsigned char *rec = NULL, *all = NULL;
    size_t len = 0;
    char why[256] = "";
    msr_status_t st = ucx_engine_open(comm->ctx, uid, n, 0, &e);
    if (st == MSR_OK)
        st = ucx_engine_record(e, &rec, &len);
    if (st != MSR_OK)
        snprintf(why, sizeof why, "%s", msr_last_error());
    int64_t least = -(int64_t)len; /* the longest record, negated */
    st = outcome_of("msr_comm_dup", comm, st, &least, why, "to open its engine");
    if (st == MSR_OK)
        st = gather_records(comm, rec, len, sizeof(uint64_t) + (size_t)-least, &all);
    if (st == MSR_OK)
        st = ucx_engine_take_all(e, n, comm->world_ranks, comm->rank, all,
                                 sizeof(uint64_t) + (size_t)-least);
    msr_free(rec);
    msr_free(all);
    if (st != MSR_OK) {
        ucx_engine_discard(e);
        return st;
    }
    ucx_engine_ready(e, n);
    *engine_p = e;
    return MSR_OK;
}
