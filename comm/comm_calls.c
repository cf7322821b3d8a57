/* The communicator's operations: every collective and point-to-point call,
 * blocking and not, checks its arguments (and resolves MSR_IN_PLACE) here,
 * then runs on one rank as a copy (comm.c) or goes to the backend. */
#include "base/alloc.h"
#include "base/lprof.h"
#include "base/time.h"
#include "comm/comm_impl.h"
#include "base/err.h"

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
    msr_status_t st = msr_comm_check_usable(comm, what);
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
    int any = a->coll == MSR_COLL_RECV && a->any;
    if ((a->coll == MSR_COLL_SEND || a->coll == MSR_COLL_RECV) &&
        ((!any && (a->root < 0 || a->root >= n)) || a->tag < 0 || a->tag > MSR_COMM_TAG_MAX))
        return bad(what, "peer is not a member's rank or tag is out of range");
    if (any && comm->gpu >= 0) {
        msr_err_set("%s: device communicators receive from a named peer only", what);
        return MSR_ERR_UNSUPPORTED;
    }
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

/* The blocking and non-blocking entry points share this. */
static msr_status_t run(msr_comm_t *comm, msr_coll_args_t *a, const char *what,
                        msr_comm_req_t **req_p)
{
    msr_status_t st = check_args(comm, a, what);
    if (st != MSR_OK)
        return st;
    if (req_p == NULL) {
        if (msr_comm_is_local(comm, a))
            return msr_comm_run_local(comm, a);
        return comm->ops->run(comm, a, MSR_DEADLINE_LAZY);
    }
    return msr_comm_start(comm, a, req_p);
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
        msr_err_set("%s: out of memory for the counts of %zu members", what, n);
        msr_comm_give_up(comm, MSR_ERR_NO_MEMORY, msr_last_error());
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
        st = msr_comm_is_local(comm, &a) ? msr_comm_run_local(comm, &a)
                                         : comm->ops->run(comm, &a, MSR_DEADLINE_LAZY);
        msr_free(a.v);
        return st;
    }
    st = msr_comm_start(comm, &a, req_p);
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
    uint64_t t0 = msr_lprof_wants(MSR_LPROF_BARRIER) ? msr_now_ns() : 0;
    msr_status_t st = run(comm, &a, "barrier", NULL);
    if (st == MSR_OK && t0 != 0) /* the launch's first barrier, timed */
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

msr_status_t msr_comm_recv_any(msr_comm_t *comm, void *buf, uint64_t count, msr_dtype_t dtype,
                               int tag, int *src_p)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_RECV, .recvbuf = buf, .count = count, .dtype = dtype,
                             .root = MSR_COMM_PEER_ANY, .tag = tag, .any = 1, .src = src_p);
    return run(comm, &a, "recv_any", NULL);
}

msr_status_t msr_comm_irecv_any(msr_comm_t *comm, void *buf, uint64_t count, msr_dtype_t dtype,
                                int tag, int *src_p, msr_comm_req_t **req_p)
{
    msr_coll_args_t a = ARGS(.coll = MSR_COLL_RECV, .recvbuf = buf, .count = count, .dtype = dtype,
                             .root = MSR_COMM_PEER_ANY, .tag = tag, .any = 1, .src = src_p);
    msr_status_t st = need_req(req_p, "irecv_any");
    return st != MSR_OK ? st : run(comm, &a, "irecv_any", req_p);
}
