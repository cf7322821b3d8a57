/* The communicators' private structures and the table of operations every
 * backend (ucx/, nccl/) provides. */
#ifndef MSR_COMM_IMPL_H
#define MSR_COMM_IMPL_H

#include <stdatomic.h>
#include <stdint.h>

#include "msrun/comm.h"

typedef enum msr_coll {
    MSR_COLL_ALLREDUCE,
    MSR_COLL_REDUCE_SCATTER,
    MSR_COLL_ALLGATHER,
    MSR_COLL_BROADCAST,
    MSR_COLL_REDUCE,
    MSR_COLL_ALLTOALL,
    MSR_COLL_ALLTOALLV,
    MSR_COLL_BARRIER,
    MSR_COLL_SEND,
    MSR_COLL_RECV,
} msr_coll_t;

/* One operation, with MSR_IN_PLACE already resolved by comm_calls.c:
 * sendbuf then points where the collective's in-place convention puts this
 * rank's input (inside recvbuf), and in_place is set. */
typedef struct msr_coll_args {
    msr_coll_t coll;
    const void *sendbuf;
    void *recvbuf;
    uint64_t count; /* allreduce, reduce, broadcast, send, recv: elements;
                     * reduce_scatter, allgather, alltoall: per rank */
    msr_dtype_t dtype;
    msr_op_t op;
    int root; /* broadcast and reduce: the root; send and recv: the peer
               * (recv: MSR_COMM_PEER_ANY for any member) */
    int tag;
    int any;  /* recv from any member (root MSR_COMM_PEER_ANY) */
    int *src; /* ... gets the sender's rank there (or NULL) */
    int in_place;
    /* alltoallv: sendcounts, sdispls, recvcounts, rdispls, size each, owned
     * by the request (one allocation) */
    uint64_t *v;
    /* device backends: the stream to order the operation on; NULL for host
     * memory */
    void *stream;
} msr_coll_args_t;

/* args.root of a receive from any member (msr_comm_recv_any) */
#define MSR_COMM_PEER_ANY (-1)

/* What comm.c sees of a request; a backend embeds it first in its own. */
struct msr_comm_req {
    msr_comm_t *comm;
    msr_coll_args_t args;
    uint64_t deadline;
    msr_status_t status; /* MSR_IN_PROGRESS until finished */
    int local;           /* finished by comm.c without the backend */
    char error[160];     /* why it failed, for msr_last_error() */
};

#define MSR_DEADLINE_LAZY 0

typedef struct msr_comm_backend_ops {
    const char *name;
    /* Starts req (comm, args and deadline are filled in). MSR_OK: req is
     * running or already finished (req->status says); an error: nothing was
     * started, req is still the caller's. */
    msr_status_t (*post)(msr_comm_t *comm, msr_comm_req_t **req_p, const msr_coll_args_t *args,
                         uint64_t deadline);
    /* A blocking operation from start to end (no request for the caller):
     * returns its status, with msr_last_error() set on failure. deadline
     * MSR_DEADLINE_LAZY: the communicator's timeout from the first time the
     * wait reads the clock (a call that finishes at once never does). */
    msr_status_t (*run)(msr_comm_t *comm, const msr_coll_args_t *args, uint64_t deadline);
    /* Drives req to its end or deadline; returns req->status. */
    msr_status_t (*wait)(msr_comm_req_t *req);
    /* Drives progress once; returns req->status. */
    msr_status_t (*test)(msr_comm_req_t *req);
    /* Frees a finished req. */
    void (*req_free)(msr_comm_req_t *req);
    /* As msr_comm_split / msr_comm_dup, after comm.c checked the arguments. */
    msr_status_t (*split)(msr_comm_t *comm, int color, int key, unsigned flags,
                          msr_comm_t **newcomm_p);
    /* msr_comm_destroy: cancels comm's requests in flight (they finish with
     * MSR_ERR_CANCELED and no longer touch the network or user buffers). */
    void (*close)(msr_comm_t *comm);
    /* Frees the backend's part of comm once nothing refers to it (after
     * close and after the last request was freed). */
    void (*release)(msr_comm_t *comm);
    /* Device backends (NULL for host ones): msr_comm_wait_stream. */
    msr_status_t (*wait_stream)(msr_comm_req_t *req, void *stream);
    /* This member cannot take part in an operation it was called for (out
     * of memory for its arguments before the backend saw it): breaks comm
     * with st and tells the other members at once, their operations
     * failing with st and naming this rank. NULL: the others see their
     * deadline. */
    void (*give_up)(msr_comm_t *comm, msr_status_t st, const char *why);
} msr_comm_backend_ops_t;

struct msr_comm {
    const msr_comm_backend_ops_t *ops;
    msr_ctx_t *ctx;
    int rank, size;
    int *world_ranks; /* size entries: member i's job rank */
    _Atomic int64_t timeout_ms;
    _Atomic int broken; /* msr_status_t: MSR_OK while healthy */
    /* why, once the backend that broke it said (msr_comm_broken_why) */
    char broken_why[160];
    _Atomic int broken_told;
    _Atomic int refs; /* the owner's reference and one per request */
    void *be;         /* the backend's state */
    /* device communicators: the CUDA device (-1: a host communicator, whose
     * one-rank calls comm.c runs as host copies), the backend's own stream
     * and the stream the next operations go to (args.stream) */
    int gpu;
    void *own_stream;
    void *_Atomic stream;
};

/* Allocates the common part of a communicator (world_ranks copied). */
msr_status_t msr_comm_alloc(msr_ctx_t *ctx, const msr_comm_backend_ops_t *ops, int rank, int size,
                            const int *world_ranks, int64_t timeout_ms, msr_comm_t **comm_p);
/* Frees what msr_comm_alloc made. */
void msr_comm_free(msr_comm_t *comm);

/* Drops one reference; the last frees comm (through ops->release). */
void msr_comm_unref(msr_comm_t *comm);

/* Marks comm broken with st; the first status wins. Returns 1 when this
 * call broke it, 0 when it already was. */
int msr_comm_break(msr_comm_t *comm, msr_status_t st);

/* The backend that broke comm (msr_comm_break returned 1) says why, once;
 * the calls made on it afterwards repeat it. */
void msr_comm_broken_why(msr_comm_t *comm, const char *why);

/* comm.c, for comm_calls.c: ops->give_up where the backend has it and
 * comm has other members. */
void msr_comm_give_up(msr_comm_t *comm, msr_status_t st, const char *why);

/* comm.c, for comm_calls.c: whether comm may take an operation (MSR_OK, or
 * the error set with what's name); whether a's operation on comm is one
 * rank's copy (a host communicator of one rank), that copy, and the start
 * of a checked operation (on success *req_p is running or finished). */
msr_status_t msr_comm_check_usable(const msr_comm_t *comm, const char *what);
int msr_comm_is_local(const msr_comm_t *comm, const msr_coll_args_t *a);
msr_status_t msr_comm_run_local(msr_comm_t *comm, const msr_coll_args_t *a);
msr_status_t msr_comm_start(msr_comm_t *comm, const msr_coll_args_t *a, msr_comm_req_t **req_p);

/* split's flags from msr_comm_dup: the same group, in the same order */
#define MSR_COMM_SPLIT_DUP 0x100u

/* The UCX backend's entry: the world communicator. */
msr_status_t msr_ucx_comm_world(msr_ctx_t *ctx, msr_comm_t **comm_p);
msr_status_t msr_ucx_comm_pair(msr_ctx_t *ctx, const char *name, int peer, msr_comm_t **comm_p);
msr_status_t msr_ucx_comm_pairs(msr_comm_t *comm, int n, const int *peers, msr_comm_t **pairs_p);

#endif
