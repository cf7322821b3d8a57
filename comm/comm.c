/* The communicator API: argument checks, MSR_IN_PLACE, the one-rank paths,
 * requests and their references, then the backend through its ops table.
 * This file holds the communicators and the requests; the operations'
 * entry points and their argument checks are in comm_calls.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/time.h"
#include "comm/comm_impl.h"
#include "base/err.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[MSR_DTYPE_COUNT] = {
    [MSR_DTYPE_F32] = {"f32", 4},   [MSR_DTYPE_F64] = {"f64", 8}, [MSR_DTYPE_F16] = {"f16", 2},
    [MSR_DTYPE_BF16] = {"bf16", 2}, [MSR_DTYPE_I32] = {"i32", 4}, [MSR_DTYPE_I64] = {"i64", 8},
    [MSR_DTYPE_U8] = {"u8", 1},
};

static const char *const op_names[MSR_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};

size_t msr_dtype_size(msr_dtype_t dtype)
{
    return (unsigned)dtype < MSR_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

const char *msr_dtype_name(msr_dtype_t dtype)
{
    return (unsigned)dtype < MSR_DTYPE_COUNT ? dtypes[dtype].name : "?";
}

const char *msr_op_name(msr_op_t op)
{
    return (unsigned)op < MSR_OP_COUNT ? op_names[op] : "?";
}

/* ---- the common part of a communicator ---- */

msr_status_t msr_comm_alloc(msr_ctx_t *ctx, const msr_comm_backend_ops_t *ops, int rank, int size,
                            const int *world_ranks, int64_t timeout_ms, msr_comm_t **comm_p)
{
    msr_comm_t *comm = msr_calloc(1, sizeof *comm);
    if (comm == NULL)
        return MSR_ERR_NO_MEMORY;
    comm->world_ranks = msr_calloc((size_t)size, sizeof(int));
    if (comm->world_ranks == NULL) {
        msr_free(comm);
        return MSR_ERR_NO_MEMORY;
    }
    memcpy(comm->world_ranks, world_ranks, (size_t)size * sizeof(int));
    comm->ops = ops;
    comm->ctx = ctx;
    comm->rank = rank;
    comm->size = size;
    atomic_init(&comm->timeout_ms, timeout_ms);
    atomic_init(&comm->broken, MSR_OK);
    atomic_init(&comm->refs, 1);
    comm->gpu = -1;
    atomic_init(&comm->stream, NULL);
    *comm_p = comm;
    return MSR_OK;
}

void msr_comm_free(msr_comm_t *comm)
{
    if (comm == NULL)
        return;
    msr_free(comm->world_ranks);
    msr_free(comm);
}

void msr_comm_unref(msr_comm_t *comm)
{
    if (atomic_fetch_sub(&comm->refs, 1) == 1) {
        comm->ops->release(comm);
        msr_comm_free(comm);
    }
}

int msr_comm_break(msr_comm_t *comm, msr_status_t st)
{
    int expected = MSR_OK;
    if (st == MSR_OK || !atomic_compare_exchange_strong(&comm->broken, &expected, (int)st))
        return 0;
    if (st == MSR_ERR_PEER_LOST)
        msr_note_peer_lost(comm->ctx);
    return 1;
}

void msr_comm_broken_why(msr_comm_t *comm, const char *why)
{
    if (atomic_load(&comm->broken_told))
        return;
    snprintf(comm->broken_why, sizeof comm->broken_why, "%s", why);
    atomic_store(&comm->broken_told, 1);
}

void msr_comm_give_up(msr_comm_t *comm, msr_status_t st, const char *why)
{
    if (comm->size > 1 && comm->ops->give_up != NULL)
        comm->ops->give_up(comm, st, why);
}

/* ---- communicators ---- */

msr_status_t msr_comm_world(msr_ctx_t *ctx, msr_comm_t **comm_p)
{
    if (ctx == NULL || comm_p == NULL) {
        msr_err_set("msr_comm_world: ctx or comm_p is NULL");
        return MSR_ERR_INVALID_ARG;
    }
    /* the job's others made theirs without this process: it would wait for
     * them until the timeout */
    const char *inc = getenv("MSR_INCARNATION");
    if (inc && *inc && strcmp(inc, "0") != 0) {
        msr_err_set("msr_comm_world: this process replaces rank %d (MSR_INCARNATION=%.20s), "
                    "which the others' world communicators do not take back; a replaced "
                    "parameter server worker joins with msr_ps_join",
                    msr_rank(ctx), inc);
        return MSR_ERR_UNSUPPORTED;
    }
    return msr_ucx_comm_world(ctx, comm_p);
}

msr_status_t msr_comm_pair(msr_ctx_t *ctx, const char *name, int peer, msr_comm_t **comm_p)
{
    if (ctx == NULL || name == NULL || comm_p == NULL) {
        msr_err_set("msr_comm_pair: ctx, name or comm_p is NULL");
        return MSR_ERR_INVALID_ARG;
    }
    size_t len = strlen(name);
    if (len == 0 || len > MSR_COMM_PAIR_NAME_MAX ||
        strspn(name, "abcdefghijklmnopqrstuvwxyz"
                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789._-") != len) {
        msr_err_set("msr_comm_pair: name '%.80s': 1 to %d of [A-Za-z0-9._-]", name,
                    MSR_COMM_PAIR_NAME_MAX);
        return MSR_ERR_INVALID_ARG;
    }
    if (peer < 0 || peer >= msr_world_size(ctx) || peer == msr_rank(ctx)) {
        msr_err_set("msr_comm_pair: peer %d is not another rank of the %d", peer,
                    msr_world_size(ctx));
        return MSR_ERR_INVALID_ARG;
    }
    return msr_ucx_comm_pair(ctx, name, peer, comm_p);
}

msr_status_t msr_comm_pairs(msr_comm_t *comm, int n, const int *peers, msr_comm_t **pairs_p)
{
    msr_status_t st = msr_comm_check_usable(comm, "msr_comm_pairs");
    if (st != MSR_OK)
        return st;
    if (comm->gpu >= 0) {
        msr_err_set("msr_comm_pairs: a device communicator (%s): pairs are made over host "
                    "ones",
                    msr_comm_backend(comm));
        return MSR_ERR_UNSUPPORTED;
    }
    /* the rest of the arguments are checked inside, where a member with bad
     * ones still takes part, so that all fail alike */
    return msr_ucx_comm_pairs(comm, n, peers, pairs_p);
}

msr_status_t msr_comm_check_usable(const msr_comm_t *comm, const char *what)
{
    if (comm == NULL) {
        msr_err_set("%s: comm is NULL", what);
        return MSR_ERR_INVALID_ARG;
    }
    msr_status_t st = (msr_status_t)atomic_load(&comm->broken);
    if (st != MSR_OK) {
        int told = atomic_load(&comm->broken_told);
        msr_err_set("%s: the communicator is broken (%s)%s%s", what, msr_status_str(st),
                    told ? ": " : "", told ? comm->broken_why : "");
        return st;
    }
    return MSR_OK;
}

msr_status_t msr_comm_split(msr_comm_t *comm, int color, int key, msr_comm_t **newcomm_p)
{
    msr_status_t st = msr_comm_check_usable(comm, "msr_comm_split");
    if (st != MSR_OK)
        return st;
    if (newcomm_p == NULL || color < MSR_COMM_NO_COLOR) {
        msr_err_set("msr_comm_split: color %d is neither >= 0 nor MSR_COMM_NO_COLOR, or "
                    "newcomm_p is NULL",
                    color);
        return MSR_ERR_INVALID_ARG;
    }
    return comm->ops->split(comm, color, key, 0, newcomm_p);
}

msr_status_t msr_comm_dup(msr_comm_t *comm, unsigned flags, msr_comm_t **newcomm_p)
{
    msr_status_t st = msr_comm_check_usable(comm, "msr_comm_dup");
    if (st != MSR_OK)
        return st;
    if (newcomm_p == NULL || (flags & ~MSR_COMM_OWN_WORKER) != 0) {
        msr_err_set("msr_comm_dup: unknown flags 0x%x or newcomm_p is NULL", flags);
        return MSR_ERR_INVALID_ARG;
    }
    /* A dup is a split where everyone has the same color and keeps its rank. */
    return comm->ops->split(comm, 0, comm->rank, flags | MSR_COMM_SPLIT_DUP, newcomm_p);
}

void msr_comm_destroy(msr_comm_t *comm)
{
    if (comm == NULL)
        return;
    comm->ops->close(comm);
    msr_comm_unref(comm);
}

int msr_comm_rank(const msr_comm_t *comm)
{
    return comm->rank;
}

int msr_comm_size(const msr_comm_t *comm)
{
    return comm->size;
}

int msr_comm_world_rank(const msr_comm_t *comm, int rank)
{
    if (rank < 0 || rank >= comm->size)
        return -1;
    return comm->world_ranks[rank];
}

void msr_comm_set_timeout(msr_comm_t *comm, int64_t ms)
{
    atomic_store(&comm->timeout_ms, ms < 0 ? -1 : ms);
}

int64_t msr_comm_timeout(const msr_comm_t *comm)
{
    return atomic_load(&comm->timeout_ms);
}

msr_status_t msr_comm_status(const msr_comm_t *comm)
{
    return (msr_status_t)atomic_load(&comm->broken);
}

/* ---- device communicators: what comm.c keeps for them ---- */

const char *msr_comm_backend(const msr_comm_t *comm)
{
    return comm && comm->ops->name ? comm->ops->name : "?";
}

int msr_comm_gpu(const msr_comm_t *comm)
{
    return comm ? comm->gpu : -1;
}

msr_status_t msr_comm_set_stream(msr_comm_t *comm, void *stream)
{
    if (comm == NULL) {
        msr_err_set("msr_comm_set_stream: comm is NULL");
        return MSR_ERR_INVALID_ARG;
    }
    if (comm->gpu < 0) {
        msr_err_set("msr_comm_set_stream: a host communicator (%s) has no stream",
                    msr_comm_backend(comm));
        return MSR_ERR_UNSUPPORTED;
    }
    atomic_store(&comm->stream, stream ? stream : comm->own_stream);
    return MSR_OK;
}

void *msr_comm_stream(const msr_comm_t *comm)
{
    return comm && comm->gpu >= 0 ? atomic_load(&((msr_comm_t *)comm)->stream) : NULL;
}

msr_status_t msr_comm_wait_stream(msr_comm_req_t *req, void *stream)
{
    if (req == NULL || stream == NULL) {
        msr_err_set("msr_comm_wait_stream: req or stream is NULL");
        return MSR_ERR_INVALID_ARG;
    }
    if (req->comm->gpu < 0 || req->comm->ops->wait_stream == NULL) {
        msr_err_set("msr_comm_wait_stream: a request of a host communicator (%s)",
                    msr_comm_backend(req->comm));
        return MSR_ERR_UNSUPPORTED;
    }
    return req->comm->ops->wait_stream(req, stream);
}

/* ---- requests ---- */

/* The one-rank collectives: copies, no backend. */
msr_status_t msr_comm_run_local(msr_comm_t *comm, const msr_coll_args_t *a)
{
    size_t es = msr_dtype_size(a->dtype);
    size_t bytes = (size_t)a->count * es;
    (void)comm;
    switch (a->coll) {
    case MSR_COLL_ALLREDUCE:
    case MSR_COLL_REDUCE_SCATTER:
    case MSR_COLL_ALLGATHER:
    case MSR_COLL_REDUCE:
    case MSR_COLL_ALLTOALL:
        if (bytes && a->sendbuf != a->recvbuf)
            memmove(a->recvbuf, a->sendbuf, bytes);
        break;
    case MSR_COLL_ALLTOALLV: {
        const uint64_t *sc = a->v, *sd = a->v + 1, *rc = a->v + 2, *rd = a->v + 3;
        if (sc[0] != rc[0]) {
            msr_err_set("alltoallv: sends %llu elements to itself but expects %llu",
                        (unsigned long long)sc[0], (unsigned long long)rc[0]);
            return MSR_ERR_INVALID_ARG;
        }
        if (sc[0])
            memmove((char *)a->recvbuf + rd[0] * es, (const char *)a->sendbuf + sd[0] * es,
                    sc[0] * es);
        break;
    }
    default:
        break;
    }
    return MSR_OK;
}

/* One rank of a host communicator: plain copies (device buffers go to their
 * backend, which copies on the device). */
int msr_comm_is_local(const msr_comm_t *comm, const msr_coll_args_t *a)
{
    return comm->size == 1 && comm->gpu < 0 && a->coll != MSR_COLL_SEND && a->coll != MSR_COLL_RECV;
}

/* Starts a checked operation; on success *req_p is running or finished. */
msr_status_t msr_comm_start(msr_comm_t *comm, const msr_coll_args_t *a, msr_comm_req_t **req_p)
{
    int64_t ms = atomic_load(&comm->timeout_ms);
    uint64_t deadline = msr_deadline_in_ms(ms);
    if (msr_comm_is_local(comm, a)) {
        msr_comm_req_t *req = msr_calloc(1, sizeof *req);
        if (req == NULL) {
            msr_err_set("out of memory for a request");
            return MSR_ERR_NO_MEMORY;
        }
        req->comm = comm;
        req->args = *a;
        req->local = 1;
        req->status = msr_comm_run_local(comm, a);
        if (req->status != MSR_OK)
            snprintf(req->error, sizeof req->error, "%s", msr_last_error());
        atomic_fetch_add(&comm->refs, 1);
        *req_p = req;
        return MSR_OK;
    }
    atomic_fetch_add(&comm->refs, 1);
    msr_status_t st = comm->ops->post(comm, req_p, a, deadline);
    if (st != MSR_OK)
        msr_comm_unref(comm);
    return st;
}

static void req_free(msr_comm_req_t *req)
{
    msr_comm_t *comm = req->comm;
    msr_free(req->args.v);
    req->args.v = NULL;
    if (req->local)
        msr_free(req);
    else
        comm->ops->req_free(req);
    msr_comm_unref(comm);
}

/* Frees a finished request and returns its status (with its message). */
static msr_status_t finish(msr_comm_req_t *req)
{
    msr_status_t st = req->status;
    if (st != MSR_OK)
        msr_err_set("%s", req->error[0] ? req->error : msr_status_str(st));
    req_free(req);
    return st;
}

msr_status_t msr_comm_wait(msr_comm_req_t *req)
{
    if (req == NULL) {
        msr_err_set("msr_comm_wait: req is NULL");
        return MSR_ERR_INVALID_ARG;
    }
    if (!req->local && req->status == MSR_IN_PROGRESS)
        req->comm->ops->wait(req);
    return finish(req);
}

msr_status_t msr_comm_test(msr_comm_req_t **req_p)
{
    if (req_p == NULL || *req_p == NULL) {
        msr_err_set("msr_comm_test: no request");
        return MSR_ERR_INVALID_ARG;
    }
    msr_comm_req_t *req = *req_p;
    if (!req->local && req->status == MSR_IN_PROGRESS &&
        req->comm->ops->test(req) == MSR_IN_PROGRESS)
        return MSR_IN_PROGRESS;
    *req_p = NULL;
    return finish(req);
}

msr_status_t msr_comm_wait_all(msr_comm_req_t **reqs, size_t n)
{
    msr_status_t first = MSR_OK;
    char why[256] = "";
    for (size_t i = 0; i < n; i++) {
        if (reqs == NULL || reqs[i] == NULL)
            continue;
        msr_status_t st = msr_comm_wait(reqs[i]);
        reqs[i] = NULL;
        if (st != MSR_OK && first == MSR_OK) {
            first = st;
            snprintf(why, sizeof why, "%s", msr_last_error());
        }
    }
    if (first != MSR_OK)
        msr_err_set("%s", why);
    return first;
}
