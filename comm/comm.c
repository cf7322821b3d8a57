/* The communicator API: argument checks, MSR_IN_PLACE, the one-rank paths,
 * requests and their references, then the backend through its ops table. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/lprof.h"
#include "base/time.h"
#include "comm/comm_impl.h"
#include "comm/reduce.h"
#include "msrun/store.h"
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

/* ---- communicators ---- */

msr_status_t msr_comm_world(msr_ctx_t *ctx, msr_comm_t **comm_p)
{
    if (ctx == NULL || comm_p == NULL) {
        msr_err_set("msr_comm_world: ctx or comm_p is NULL");
        return MSR_ERR_INVALID_ARG;
    }
    return msr_ucx_comm_world(ctx, comm_p);
}

static msr_status_t check_usable(const msr_comm_t *comm, const char *what)
{
    if (comm == NULL) {
        msr_err_set("%s: comm is NULL", what);
        return MSR_ERR_INVALID_ARG;
    }
    msr_status_t st = (msr_status_t)atomic_load(&comm->broken);
    if (st != MSR_OK) {
        msr_err_set("%s: the communicator is broken (%s)", what, msr_status_str(st));
        return st;
    }
    return MSR_OK;
}

msr_status_t msr_comm_split(msr_comm_t *comm, int color, int key, msr_comm_t **newcomm_p)
{
    msr_status_t st = check_usable(comm, "msr_comm_split");
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
    msr_status_t st = check_usable(comm, "msr_comm_dup");
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

/* ---- argument checks ---- */

/* n * a * b bytes fit in size_t (and in the signed range UCX lengths use).
 * No divisions: this runs on every call. */
static int bytes_fit(uint64_t n, uint64_t a, uint64_t b, size_t *bytes_p)
{
    uint64_t x, y;
    if (__builtin_mul_overflow(n, a, &x) || __builtin_mul_overflow(x, b, &y) ||
        y > (uint64_t)INT64_MAX || y > (uint64_t)SIZE_MAX)
        return 0;
    *bytes_p = (size_t)y;
    return 1;
}

static msr_status_t bad(const char *what, const char *why)
{
    msr_err_set("%s: %s", what, why);
    return MSR_ERR_INVALID_ARG;
}

/* Checks and resolves args in place; total_p gets the bytes the largest
 * buffer spans. */
static msr_status_t check_args(msr_comm_t *comm, msr_coll_args_t *a, const char *what)
{
    msr_status_t st = check_usable(comm, what);
    if (st != MSR_OK)
        return st;
    size_t es = msr_dtype_size(a->dtype);
    if (es == 0)
        return bad(what, "unknown dtype");
    if ((a->coll == MSR_COLL_ALLREDUCE || a->coll == MSR_COLL_REDUCE_SCATTER ||
         a->coll == MSR_COLL_REDUCE) &&
        (unsigned)a->op >= MSR_OP_COUNT)
        return bad(what, "unknown op");
    int n = comm->size, r = comm->rank;
    size_t bytes = 0, block = 0;
    uint64_t per = (a->coll == MSR_COLL_REDUCE_SCATTER || a->coll == MSR_COLL_ALLGATHER ||
                    a->coll == MSR_COLL_ALLTOALL)
                       ? (uint64_t)n
                       : 1;
    if (!bytes_fit(a->count, es, per, &bytes)) {
        msr_err_set("%s: %llu elements of %zu bytes (times %llu) do not fit in memory", what,
                    (unsigned long long)a->count, es, (unsigned long long)per);
        return MSR_ERR_OVERFLOW;
    }
    block = (size_t)a->count * es;
    if ((a->coll == MSR_COLL_BROADCAST || a->coll == MSR_COLL_REDUCE) &&
        (a->root < 0 || a->root >= n))
        return bad(what, "root is not a member's rank");
    if ((a->coll == MSR_COLL_SEND || a->coll == MSR_COLL_RECV) &&
        (a->root < 0 || a->root >= n || a->tag < 0 || a->tag > MSR_COMM_TAG_MAX))
        return bad(what, "peer is not a member's rank or tag is out of range");
    char *rb = a->recvbuf;
    const void *in_place = MSR_IN_PLACE;
    switch (a->coll) {
    case MSR_COLL_ALLREDUCE:
    case MSR_COLL_ALLTOALL:
        if (bytes && rb == NULL)
            return bad(what, "recvbuf is NULL");
        if (a->sendbuf == in_place || a->sendbuf == rb) {
            a->in_place = 1;
            a->sendbuf = rb;
        } else if (bytes && a->sendbuf == NULL) {
            return bad(what, "sendbuf is NULL");
        }
        break;
    case MSR_COLL_REDUCE_SCATTER:
        if (block && rb == NULL)
            return bad(what, "recvbuf is NULL");
        if (a->sendbuf == in_place) {
            a->in_place = 1;
            a->sendbuf = rb;
            a->recvbuf = rb + (size_t)r * block;
        } else if (block && a->sendbuf == rb - (size_t)r * block) {
            a->in_place = 1;
        } else if (block && a->sendbuf == NULL) {
            return bad(what, "sendbuf is NULL");
        }
        break;
    case MSR_COLL_ALLGATHER:
        if (block && rb == NULL)
            return bad(what, "recvbuf is NULL");
        if (a->sendbuf == in_place || (block && a->sendbuf == rb + (size_t)r * block)) {
            a->in_place = 1;
            a->sendbuf = rb + (size_t)r * block;
        } else if (block && a->sendbuf == NULL) {
            return bad(what, "sendbuf is NULL");
        }
        break;
    case MSR_COLL_REDUCE:
        if (r == a->root) {
            if (bytes && rb == NULL)
                return bad(what, "recvbuf is NULL on the root");
            if (a->sendbuf == in_place || a->sendbuf == rb) {
                a->in_place = 1;
                a->sendbuf = rb;
            }
        } else if (a->sendbuf == in_place) {
            return bad(what, "MSR_IN_PLACE is for the root only");
        }
        if (bytes && a->sendbuf == NULL)
            return bad(what, "sendbuf is NULL");
        break;
    case MSR_COLL_BROADCAST:
    case MSR_COLL_SEND:
    case MSR_COLL_RECV:
        if (bytes && rb == NULL)
            return bad(what, "buf is NULL");
        break;
    case MSR_COLL_ALLTOALLV:
    case MSR_COLL_BARRIER:
        break;
    }
    a->stream = atomic_load(&comm->stream); /* NULL on host communicators */
    return MSR_OK;
}

/* ---- requests ---- */

/* The one-rank collectives: copies, no backend. */
static msr_status_t run_local(msr_comm_t *comm, const msr_coll_args_t *a)
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
static int is_local(const msr_comm_t *comm, const msr_coll_args_t *a)
{
    return comm->size == 1 && comm->gpu < 0 && a->coll != MSR_COLL_SEND && a->coll != MSR_COLL_RECV;
}

/* Starts a checked operation; on success *req_p is running or finished. */
static msr_status_t start(msr_comm_t *comm, const msr_coll_args_t *a, msr_comm_req_t **req_p)
{
    int64_t ms = atomic_load(&comm->timeout_ms);
    uint64_t deadline = msr_deadline_in_ms(ms);
    if (is_local(comm, a)) {
        msr_comm_req_t *req = msr_calloc(1, sizeof *req);
        if (req == NULL) {
            msr_err_set("out of memory for a request");
            return MSR_ERR_NO_MEMORY;
        }
        req->comm = comm;
        req->args = *a;
        req->local = 1;
        req->status = run_local(comm, a);
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

/* The blocking and non-blocking entry points share this. */
static msr_status_t run(msr_comm_t *comm, msr_coll_args_t *a, const char *what,
                        msr_comm_req_t **req_p)
{
    msr_status_t st = check_args(comm, a, what);
    if (st != MSR_OK)
        return st;
    if (req_p == NULL) {
        if (is_local(comm, a))
            return run_local(comm, a);
        return comm->ops->run(comm, a, MSR_DEADLINE_LAZY);
    }
    return start(comm, a, req_p);
}

#define ARGS(...) ((msr_coll_args_t){__VA_ARGS__})

static msr_status_t need_req(msr_comm_req_t **req_p, const char *what)
{
    if (req_p == NULL) {
        msr_err_set("%s: req_p is NULL", what);
        return MSR_ERR_INVALID_ARG;
    }
    return MSR_OK;
}

msr_status_t msr_comm_allreduce(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                uint64_t count, msr_dtype_t dtype, msr_op_t op)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_ALLREDUCE, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = op);
    return run(comm, &a, "allreduce", NULL);
}

msr_status_t msr_comm_iallreduce(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 uint64_t count, msr_dtype_t dtype, msr_op_t op,
                                 msr_comm_req_t **req_p)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_ALLREDUCE, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = op);
    msr_status_t st = need_req(req_p, "iallreduce");
    return st != MSR_OK ? st : run(comm, &a, "iallreduce", req_p);
}

msr_status_t msr_comm_reduce_scatter(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     uint64_t recvcount, msr_dtype_t dtype, msr_op_t op)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_REDUCE_SCATTER, .sendbuf = sendbuf,
                             .recvbuf = recvbuf, .count = recvcount, .dtype = dtype, .op = op);
    return run(comm, &a, "reduce_scatter", NULL);
}

msr_status_t msr_comm_ireduce_scatter(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      uint64_t recvcount, msr_dtype_t dtype, msr_op_t op,
                                      msr_comm_req_t **req_p)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_REDUCE_SCATTER, .sendbuf = sendbuf,
                             .recvbuf = recvbuf, .count = recvcount, .dtype = dtype, .op = op);
    msr_status_t st = need_req(req_p, "ireduce_scatter");
    return st != MSR_OK ? st : run(comm, &a, "ireduce_scatter", req_p);
}

msr_status_t msr_comm_allgather(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                uint64_t sendcount, msr_dtype_t dtype)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_ALLGATHER, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = sendcount, .dtype = dtype);
    return run(comm, &a, "allgather", NULL);
}

msr_status_t msr_comm_iallgather(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 uint64_t sendcount, msr_dtype_t dtype, msr_comm_req_t **req_p)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_ALLGATHER, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = sendcount, .dtype = dtype);
    msr_status_t st = need_req(req_p, "iallgather");
    return st != MSR_OK ? st : run(comm, &a, "iallgather", req_p);
}

msr_status_t msr_comm_broadcast(msr_comm_t *comm, void *buf, uint64_t count, msr_dtype_t dtype,
                                int root)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_BROADCAST, .sendbuf = buf, .recvbuf = buf,
                             .count = count, .dtype = dtype, .root = root, .in_place = 1);
    return run(comm, &a, "broadcast", NULL);
}

msr_status_t msr_comm_ibroadcast(msr_comm_t *comm, void *buf, uint64_t count, msr_dtype_t dtype,
                                 int root, msr_comm_req_t **req_p)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_BROADCAST, .sendbuf = buf, .recvbuf = buf,
                             .count = count, .dtype = dtype, .root = root, .in_place = 1);
    msr_status_t st = need_req(req_p, "ibroadcast");
    return st != MSR_OK ? st : run(comm, &a, "ibroadcast", req_p);
}

msr_status_t msr_comm_reduce(msr_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                             msr_dtype_t dtype, msr_op_t op, int root)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_REDUCE, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = op, .root = root);
    return run(comm, &a, "reduce", NULL);
}

msr_status_t msr_comm_ireduce(msr_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                              msr_dtype_t dtype, msr_op_t op, int root, msr_comm_req_t **req_p)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_REDUCE, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype, .op = op, .root = root);
    msr_status_t st = need_req(req_p, "ireduce");
    return st != MSR_OK ? st : run(comm, &a, "ireduce", req_p);
}

msr_status_t msr_comm_alltoall(msr_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                               msr_dtype_t dtype)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_ALLTOALL, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype);
    return run(comm, &a, "alltoall", NULL);
}

msr_status_t msr_comm_ialltoall(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                uint64_t count, msr_dtype_t dtype, msr_comm_req_t **req_p)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_ALLTOALL, .sendbuf = sendbuf, .recvbuf = recvbuf,
                             .count = count, .dtype = dtype);
    msr_status_t st = need_req(req_p, "ialltoall");
    return st != MSR_OK ? st : run(comm, &a, "ialltoall", req_p);
}

/* alltoallv: the four count arrays are copied into one block the request
 * owns, after checking that every range fits. */
static msr_status_t alltoallv(msr_comm_t *comm, const void *sendbuf, const uint64_t *sendcounts,
                              const uint64_t *sdispls, void *recvbuf, const uint64_t *recvcounts,
                              const uint64_t *rdispls, msr_dtype_t dtype, msr_comm_req_t **req_p)
{
    const char *what = req_p ? "ialltoallv" : "alltoallv";
    msr_coll_args_t a =
        ARGS(.coll = MSR_COLL_ALLTOALLV, .sendbuf = sendbuf, .recvbuf = recvbuf, .dtype = dtype);
    msr_status_t st = check_args(comm, &a, what);
    if (st != MSR_OK)
        return st;
    if (sendcounts == NULL || sdispls == NULL || recvcounts == NULL || rdispls == NULL)
        return bad(what, "a count or displacement array is NULL");
    if (sendbuf == MSR_IN_PLACE)
        return bad(what, "MSR_IN_PLACE is not supported");
    size_t n = (size_t)comm->size, es = msr_dtype_size(dtype), bytes;
    for (size_t j = 0; j < n; j++) {
        if (!bytes_fit(sendcounts[j] + sdispls[j], es, 1, &bytes) ||
            !bytes_fit(recvcounts[j] + rdispls[j], es, 1, &bytes) ||
            sendcounts[j] + sdispls[j] < sdispls[j] || recvcounts[j] + rdispls[j] < rdispls[j]) {
            msr_err_set("%s: the range for rank %zu overflows", what, j);
            return MSR_ERR_OVERFLOW;
        }
        if ((sendcounts[j] && sendbuf == NULL) || (recvcounts[j] && recvbuf == NULL))
            return bad(what, "a buffer is NULL where counts are not 0");
    }
    a.v = msr_malloc(4 * n * sizeof(uint64_t));
    if (a.v == NULL) {
        msr_err_set("%s: out of memory", what);
        return MSR_ERR_NO_MEMORY;
    }
    /* interleaved: v[4j] sendcount, v[4j+1] sdispl, v[4j+2] recvcount,
     * v[4j+3] rdispl */
    for (size_t j = 0; j < n; j++) {
        a.v[4 * j] = sendcounts[j];
        a.v[4 * j + 1] = sdispls[j];
        a.v[4 * j + 2] = recvcounts[j];
        a.v[4 * j + 3] = rdispls[j];
    }
    if (req_p == NULL) {
        st = is_local(comm, &a) ? run_local(comm, &a) : comm->ops->run(comm, &a, MSR_DEADLINE_LAZY);
        msr_free(a.v);
        return st;
    }
    st = start(comm, &a, req_p);
    if (st != MSR_OK)
        msr_free(a.v);
    return st;
}

msr_status_t msr_comm_alltoallv(msr_comm_t *comm, const void *sendbuf, const uint64_t *sendcounts,
                                const uint64_t *sdispls, void *recvbuf, const uint64_t *recvcounts,
                                const uint64_t *rdispls, msr_dtype_t dtype)
{
    return alltoallv(comm, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype, NULL);
}

msr_status_t msr_comm_ialltoallv(msr_comm_t *comm, const void *sendbuf, const uint64_t *sendcounts,
                                 const uint64_t *sdispls, void *recvbuf, const uint64_t *recvcounts,
                                 const uint64_t *rdispls, msr_dtype_t dtype, msr_comm_req_t **req_p)
{
    msr_status_t st = need_req(req_p, "ialltoallv");
    return st != MSR_OK ? st
                        : alltoallv(comm, sendbuf, sendcounts, sdispls, recvbuf, recvcounts,
                                    rdispls, dtype, req_p);
}

msr_status_t msr_comm_barrier(msr_comm_t *comm)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_BARRIER, .dtype = MSR_DTYPE_U8);
    uint64_t t0 = msr_now_ns();
    msr_status_t st = run(comm, &a, "barrier", NULL);
    if (st == MSR_OK)
        msr_lprof_note(MSR_LPROF_BARRIER, t0);
    return st;
}

msr_status_t msr_comm_ibarrier(msr_comm_t *comm, msr_comm_req_t **req_p)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_BARRIER, .dtype = MSR_DTYPE_U8);
    msr_status_t st = need_req(req_p, "ibarrier");
    return st != MSR_OK ? st : run(comm, &a, "ibarrier", req_p);
}

msr_status_t msr_comm_send(msr_comm_t *comm, const void *buf, uint64_t count, msr_dtype_t dtype,
                           int peer, int tag)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_SEND, .sendbuf = buf, .recvbuf = (void *)buf,
                             .count = count, .dtype = dtype, .root = peer, .tag = tag);
    return run(comm, &a, "send", NULL);
}

msr_status_t msr_comm_recv(msr_comm_t *comm, void *buf, uint64_t count, msr_dtype_t dtype, int peer,
                           int tag)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_RECV, .recvbuf = buf, .count = count, .dtype = dtype,
                             .root = peer, .tag = tag);
    return run(comm, &a, "recv", NULL);
}

msr_status_t msr_comm_isend(msr_comm_t *comm, const void *buf, uint64_t count, msr_dtype_t dtype,
                            int peer, int tag, msr_comm_req_t **req_p)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_SEND, .sendbuf = buf, .recvbuf = (void *)buf,
                             .count = count, .dtype = dtype, .root = peer, .tag = tag);
    msr_status_t st = need_req(req_p, "isend");
    return st != MSR_OK ? st : run(comm, &a, "isend", req_p);
}

msr_status_t msr_comm_irecv(msr_comm_t *comm, void *buf, uint64_t count, msr_dtype_t dtype,
                            int peer, int tag, msr_comm_req_t **req_p)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_RECV, .recvbuf = buf, .count = count, .dtype = dtype,
                             .root = peer, .tag = tag);
    msr_status_t st = need_req(req_p, "irecv");
    return st != MSR_OK ? st : run(comm, &a, "irecv", req_p);
}
