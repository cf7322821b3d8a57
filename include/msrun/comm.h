/* libmsrun's communicators: groups of ranks with collectives and
 * point-to-point messages over UCX (host memory), and device communicators
 * for GPU memory over NCCL or staged through host memory. */
#ifndef MSRUN_COMM_H
#define MSRUN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "msrun/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A group of ranks that communicate: the world (every rank of the job) or a
 * sub-group made by msr_comm_split. Ranks in a communicator are numbered
 * 0 .. size-1.
 *
 * Threads: any thread may call any function below. Communicators made from
 * one another by split (and the world they come from) share one UCX worker,
 * its "engine"; calls on them are serialized by the engine's lock, and a
 * thread that waits drives the progress of every operation in flight on that
 * engine. A thread that wants its own progress domain (a communication
 * thread beside the compute thread) makes its communicator with
 * msr_comm_dup(..., MSR_COMM_OWN_WORKER, ...).
 *
 * Ordering: as in MPI, every member calls the collectives of a communicator
 * in the same order (blocking and non-blocking alike), with matching
 * arguments (the same count, dtype, op and root everywhere).
 *
 * Failures: every call has a deadline (msr_comm_set_timeout; the default is
 * the context's, MSR_TIMEOUT seconds). An operation that fails after it
 * started (MSR_ERR_PEER_LOST, MSR_ERR_TIMEOUT, MSR_ERR_BACKEND) breaks the
 * communicator: its other operations fail with the same status, later calls
 * return it at once, the other members learn of it (they fail with
 * MSR_ERR_PEER_LOST or the sender's status), and msr_comm_destroy is the
 * only useful call left. A member out of memory for an operation
 * (MSR_ERR_NO_MEMORY) breaks it too, and tells the others at once: they
 * fail with MSR_ERR_NO_MEMORY, their error naming that member. Argument
 * errors (MSR_ERR_INVALID_ARG) leave it usable. msr_last_error()
 * describes the last failure of the calling thread. */
typedef struct msr_comm msr_comm_t;

/* A non-blocking operation in flight; finished by msr_comm_wait or
 * msr_comm_test, which free it. */
typedef struct msr_comm_req msr_comm_req_t;

typedef enum msr_dtype {
    MSR_DTYPE_F32 = 0,
    MSR_DTYPE_F64 = 1,
    MSR_DTYPE_F16 = 2,  /* IEEE binary16 */
    MSR_DTYPE_BF16 = 3, /* bfloat16 */
    MSR_DTYPE_I32 = 4,
    MSR_DTYPE_I64 = 5,
    MSR_DTYPE_U8 = 6,
} msr_dtype_t;
#define MSR_DTYPE_COUNT 7

/* Reductions. f16 and bf16 are reduced in f32 and rounded (to nearest even)
 * once per combining step. Integer sum and prod wrap around (two's
 * complement); avg is the sum divided by the group size (integer division
 * truncates). min and max of floats that meet a NaN keep one of the two
 * operands, the same one on every rank. */
typedef enum msr_op {
    MSR_OP_SUM = 0,
    MSR_OP_PROD = 1,
    MSR_OP_MIN = 2,
    MSR_OP_MAX = 3,
    MSR_OP_AVG = 4,
} msr_op_t;
#define MSR_OP_COUNT 5

/* Bytes of one element of dtype; 0 for a value outside the enum. */
MSR_API size_t msr_dtype_size(msr_dtype_t dtype);
/* "f32", "bf16", ...; "sum", "avg", ...; "?" for values outside the enums. */
MSR_API const char *msr_dtype_name(msr_dtype_t dtype);
MSR_API const char *msr_op_name(msr_op_t op);

/* Passed as sendbuf: the input is taken from recvbuf and the result
 * overwrites it (see each collective for where exactly). */
#define MSR_IN_PLACE ((const void *)(uintptr_t)1)

/* color for msr_comm_split: this rank joins no sub-group. */
#define MSR_COMM_NO_COLOR (-1)

/* flags for msr_comm_dup: the new communicator gets a UCX worker of its own
 * (its own progress domain and lock), exchanged through the store. */
#define MSR_COMM_OWN_WORKER 1u

/* Largest tag of msr_comm_send/recv. */
#define MSR_COMM_TAG_MAX ((1 << 24) - 1)

/* ---- communicators ---- */

/* Makes the world communicator: every rank of ctx's job, ranked as the job
 * ranks them. Collective: every rank of the job must call it (once per
 * communicator wanted). Creates a UCX context and worker and exchanges the
 * worker addresses through the store's allgather, so it waits for every
 * rank, up to ctx's timeout (MSR_ERR_TIMEOUT).
 *
 * Fails with MSR_ERR_INVALID_ARG, MSR_ERR_NO_MEMORY, MSR_ERR_BACKEND (UCX
 * could not start: msr_last_error() has its message), or the store's errors.
 * On success *comm_p is the caller's until msr_comm_destroy; ctx must outlive
 * it. */
MSR_API msr_status_t msr_comm_world(msr_ctx_t *ctx, msr_comm_t **comm_p);

/* Longest name of msr_comm_pair. */
#define MSR_COMM_PAIR_NAME_MAX 64

/* Makes a communicator of two: this rank and job rank peer, ranked by job
 * rank, on an engine of its own whose addresses go through the store under
 * name (1 to MSR_COMM_PAIR_NAME_MAX of [A-Za-z0-9._-]). Both must call it
 * with the same name, which names one pair once: a process that replaces
 * a rank (a parameter server's worker started again) makes new pairs under
 * new names while the others run on. Waits for the peer up to ctx's
 * timeout (MSR_ERR_TIMEOUT). For sends and receives: no shared-memory
 * segment is made for its collectives.
 *
 * Fails with MSR_ERR_INVALID_ARG (a bad name, peer not another job rank),
 * MSR_ERR_NO_MEMORY, MSR_ERR_BACKEND, or the store's errors. */
MSR_API msr_status_t msr_comm_pair(msr_ctx_t *ctx, const char *name, int peer, msr_comm_t **comm_p);

/* Makes a communicator of two with each member of comm that peers[0..n)
 * names (ranks in comm), each on an engine of its own (a UCX worker: its
 * own receive queue, progress and lock), as a two-member split duplicated
 * with MSR_COMM_OWN_WORKER would be, at a fraction of the start-up: every
 * engine is opened first, one after the other with nothing to wait for in
 * between; their addresses go in one exchange over comm (an alltoallv: no
 * store traffic); and no shared-memory segment or ring is set up (the
 * pairs are for sends and receives; their collectives run over messages).
 * (*pairs_p)[k] is the pair with peers[k], ranked by rank in comm (the
 * lower one 0), and inherits comm's timeout. Collective over comm: every
 * member calls it (n 0 for one with no pairs), and j lists i exactly when
 * i lists j. The pairs stay valid after comm is destroyed.
 *
 * Fails on every member alike (nothing made) with MSR_ERR_INVALID_ARG
 * (n outside 0 .. size - 1, peers or pairs_p NULL with n > 0, a peer not
 * another member or listed twice, a pair listed by one side only),
 * MSR_ERR_NO_MEMORY, MSR_ERR_BACKEND: a member that fails on its own (out
 * of memory, UCX refusing an engine) still takes part, so every member
 * fails at once, not at its deadline, with the worst status, the others'
 * error naming the lowest rank that had it ("rank R of the communicator
 * failed to open its engines"), and every engine opened so far closed; with
 * MSR_ERR_UNSUPPORTED for a device communicator; or with the errors of a
 * collective on comm. pairs_p[0..n) is written only on success; each pair
 * is the caller's until msr_comm_destroy. */
MSR_API msr_status_t msr_comm_pairs(msr_comm_t *comm, int n, const int *peers,
                                    msr_comm_t **pairs_p);

/* Splits comm as MPI_Comm_split does: the members that pass the same color
 * (>= 0) form a new communicator, ranked by key, ties broken by their rank in
 * comm. color MSR_COMM_NO_COLOR gives *newcomm_p = NULL. Collective over
 * comm. The new communicator shares comm's engine (no store traffic) and
 * inherits its timeout; it stays valid after comm is destroyed.
 *
 * Fails with MSR_ERR_INVALID_ARG (color < -1), MSR_ERR_NO_MEMORY,
 * MSR_ERR_OVERFLOW (65535 communicators made on one engine), or the errors
 * of a collective on comm. */
MSR_API msr_status_t msr_comm_split(msr_comm_t *comm, int color, int key, msr_comm_t **newcomm_p);

/* A copy of comm's group with its own tag space; with MSR_COMM_OWN_WORKER
 * also its own UCX worker (addresses exchanged over comm; a member that
 * fails on its way fails every member at once, naming it). Collective over
 * comm. Errors as msr_comm_split, plus MSR_ERR_BACKEND. */
MSR_API msr_status_t msr_comm_dup(msr_comm_t *comm, unsigned flags, msr_comm_t **newcomm_p);

/* Frees comm. Local (not collective); NULL does nothing. Requests still in
 * flight on comm fail with MSR_ERR_CANCELED and must still be finished with
 * msr_comm_wait/msr_comm_test (the memory goes when the last one does). Safe
 * on a broken communicator. No other call on comm may run at the same time
 * or after. */
MSR_API void msr_comm_destroy(msr_comm_t *comm);

/* This process's rank in comm (0 .. size-1) and comm's size. Never fail;
 * any thread, also on a broken communicator. */
MSR_API int msr_comm_rank(const msr_comm_t *comm);
MSR_API int msr_comm_size(const msr_comm_t *comm);
/* The job rank of member rank (0 .. size-1); -1 if out of range. */
MSR_API int msr_comm_world_rank(const msr_comm_t *comm, int rank);

/* The deadline of each later call on comm, in milliseconds from the call
 * (non-blocking: from the post); ms < 0 means none. */
MSR_API void msr_comm_set_timeout(msr_comm_t *comm, int64_t ms);
MSR_API int64_t msr_comm_timeout(const msr_comm_t *comm);

/* MSR_OK, or the status that broke comm. */
MSR_API msr_status_t msr_comm_status(const msr_comm_t *comm);

/* ---- collectives ----
 * Each comes blocking (returns when this rank's part is done and its buffers
 * may be reused) and non-blocking (msr_comm_i...: returns once started; on
 * success *req_p is the caller's, to finish with msr_comm_wait or
 * msr_comm_test; the buffers, and for alltoallv the count arrays, must stay
 * valid and untouched until then). Counts are in elements of dtype. Results
 * are bitwise the same on every rank and on every run with the same group
 * size (the reduction order is fixed).
 * Errors common to all: MSR_ERR_INVALID_ARG (NULL buffers with count > 0,
 * bad dtype, op or root), MSR_ERR_NO_MEMORY, and the failures above. */

/* recvbuf = op over all ranks of sendbuf (count elements each).
 * In place: sendbuf MSR_IN_PLACE (or == recvbuf). */
MSR_API msr_status_t msr_comm_allreduce(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                        uint64_t count, msr_dtype_t dtype, msr_op_t op);
MSR_API msr_status_t msr_comm_iallreduce(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         uint64_t count, msr_dtype_t dtype, msr_op_t op,
                                         msr_comm_req_t **req_p);

/* sendbuf holds size * recvcount elements; recvbuf gets block rank of their
 * reduction (recvcount elements). In place, either sendbuf MSR_IN_PLACE and
 * recvbuf the whole input (size * recvcount elements), or, as in NCCL,
 * recvbuf == sendbuf + rank * recvcount elements: the result lands in block
 * rank of the input, where an allgather in place expects it, and the other
 * blocks are left unspecified. */
MSR_API msr_status_t msr_comm_reduce_scatter(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                             uint64_t recvcount, msr_dtype_t dtype, msr_op_t op);
MSR_API msr_status_t msr_comm_ireduce_scatter(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                              uint64_t recvcount, msr_dtype_t dtype, msr_op_t op,
                                              msr_comm_req_t **req_p);

/* recvbuf (size * sendcount elements) gets every rank's sendbuf, in rank
 * order. In place: sendbuf MSR_IN_PLACE (or == recvbuf + rank * sendcount
 * elements): this rank's block is already in recvbuf. */
MSR_API msr_status_t msr_comm_allgather(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                        uint64_t sendcount, msr_dtype_t dtype);
MSR_API msr_status_t msr_comm_iallgather(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         uint64_t sendcount, msr_dtype_t dtype,
                                         msr_comm_req_t **req_p);

/* buf of root goes to buf of every rank (in place by nature). */
MSR_API msr_status_t msr_comm_broadcast(msr_comm_t *comm, void *buf, uint64_t count,
                                        msr_dtype_t dtype, int root);
MSR_API msr_status_t msr_comm_ibroadcast(msr_comm_t *comm, void *buf, uint64_t count,
                                         msr_dtype_t dtype, int root, msr_comm_req_t **req_p);

/* recvbuf of root = op over all ranks of sendbuf; recvbuf is not used on
 * the other ranks (may be NULL). In place (root only): sendbuf MSR_IN_PLACE
 * (or == recvbuf). */
MSR_API msr_status_t msr_comm_reduce(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     uint64_t count, msr_dtype_t dtype, msr_op_t op, int root);
MSR_API msr_status_t msr_comm_ireduce(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      uint64_t count, msr_dtype_t dtype, msr_op_t op, int root,
                                      msr_comm_req_t **req_p);

/* Block j of sendbuf (count elements) goes to rank j, which stores it as its
 * block rank. Both buffers hold size * count elements. In place: sendbuf
 * MSR_IN_PLACE (or == recvbuf). */
MSR_API msr_status_t msr_comm_alltoall(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       uint64_t count, msr_dtype_t dtype);
MSR_API msr_status_t msr_comm_ialltoall(msr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                        uint64_t count, msr_dtype_t dtype, msr_comm_req_t **req_p);

/* As alltoall with per-rank counts and displacements (in elements):
 * sendcounts[j] elements from sendbuf + sdispls[j] go to rank j, which
 * stores them at its recvbuf + rdispls[rank]; recvcounts[j] must equal what
 * rank j sends here. Not in place: the buffers must not overlap. */
MSR_API msr_status_t msr_comm_alltoallv(msr_comm_t *comm, const void *sendbuf,
                                        const uint64_t *sendcounts, const uint64_t *sdispls,
                                        void *recvbuf, const uint64_t *recvcounts,
                                        const uint64_t *rdispls, msr_dtype_t dtype);
MSR_API msr_status_t msr_comm_ialltoallv(msr_comm_t *comm, const void *sendbuf,
                                         const uint64_t *sendcounts, const uint64_t *sdispls,
                                         void *recvbuf, const uint64_t *recvcounts,
                                         const uint64_t *rdispls, msr_dtype_t dtype,
                                         msr_comm_req_t **req_p);

/* Returns once every member has entered it. */
MSR_API msr_status_t msr_comm_barrier(msr_comm_t *comm);
MSR_API msr_status_t msr_comm_ibarrier(msr_comm_t *comm, msr_comm_req_t **req_p);

/* ---- point to point ----
 * A message from send(peer=B, tag=T) on rank A matches recv(peer=A, tag=T)
 * on rank B; messages with the same peer and tag match in the order they
 * were sent. The receive must give exactly the count that was sent
 * (MSR_ERR_TRUNCATED otherwise, the message consumed and the communicator
 * still usable; msr_last_error names the sender and both sizes). tag is
 * 0 .. MSR_COMM_TAG_MAX. A send may complete before the receive is posted
 * (small messages are buffered). */
MSR_API msr_status_t msr_comm_send(msr_comm_t *comm, const void *buf, uint64_t count,
                                   msr_dtype_t dtype, int peer, int tag);
MSR_API msr_status_t msr_comm_recv(msr_comm_t *comm, void *buf, uint64_t count, msr_dtype_t dtype,
                                   int peer, int tag);
MSR_API msr_status_t msr_comm_isend(msr_comm_t *comm, const void *buf, uint64_t count,
                                    msr_dtype_t dtype, int peer, int tag, msr_comm_req_t **req_p);
MSR_API msr_status_t msr_comm_irecv(msr_comm_t *comm, void *buf, uint64_t count, msr_dtype_t dtype,
                                    int peer, int tag, msr_comm_req_t **req_p);

/* A receive from any member: the next message with tag from whichever
 * member sent it (this rank too), matched with the other receives in the
 * order they were posted; a member's messages still arrive in the order it
 * sent them. *src_p (src_p may be NULL) gets the sender's rank in comm (a
 * sub-group's rank, not the job's) when the receive succeeds, and is left
 * alone otherwise; for msr_comm_irecv_any it must stay valid until the
 * request is finished. The count must be what the sender sent
 * (MSR_ERR_TRUNCATED, the message is consumed). As every operation, it fails
 * with MSR_ERR_PEER_LOST when any member is lost while it waits (there is
 * no telling it was not that member's message it waited for). Host
 * communicators only (MSR_ERR_UNSUPPORTED on device ones). */
MSR_API msr_status_t msr_comm_recv_any(msr_comm_t *comm, void *buf, uint64_t count,
                                       msr_dtype_t dtype, int tag, int *src_p);
MSR_API msr_status_t msr_comm_irecv_any(msr_comm_t *comm, void *buf, uint64_t count,
                                        msr_dtype_t dtype, int tag, int *src_p,
                                        msr_comm_req_t **req_p);

/* ---- finishing non-blocking operations ---- */

/* Waits until req finishes or its deadline passes, frees it and returns its
 * status. NULL returns MSR_ERR_INVALID_ARG. One thread per request. */
MSR_API msr_status_t msr_comm_wait(msr_comm_req_t *req);

/* Drives progress once without blocking. Returns MSR_IN_PROGRESS while
 * *req_p runs; otherwise its final status, after freeing it and setting
 * *req_p to NULL. */
MSR_API msr_status_t msr_comm_test(msr_comm_req_t **req_p);

/* Waits for every non-NULL reqs[i] (all are freed and set to NULL) and
 * returns the first failure in array order, MSR_OK if none. */
MSR_API msr_status_t msr_comm_wait_all(msr_comm_req_t **reqs, size_t n);

/* ---- device (GPU) communicators ----
 * A device communicator runs the calls above on CUDA device memory: the same
 * collectives, point-to-point calls, requests, deadlines and failure rules,
 * with buffers that are device pointers. It is made from a host
 * communicator, collectively, and has the same members and ranks. Each
 * member uses one GPU, picked as msr_gpu_select does. Its backend is chosen
 * when it is made, the same on every member:
 *
 *   "nccl"    an NCCL communicator (non-blocking, so that every wait is
 *             bounded by the call's deadline and a failure aborts it with
 *             ncclCommAbort), when no two members use the same GPU;
 *   "staged"  device buffers are copied to pinned host memory, reduced or
 *             moved by a host (UCX) communicator and copied back: slower,
 *             but it runs where members share a GPU (more ranks than GPUs
 *             on a machine), which NCCL refuses.
 *
 * The choice is automatic; the environment variable MSR_COMM_GPU (auto,
 * nccl, staged; the same on every member) or the flag MSR_COMM_STAGED
 * overrides it. MSR_LOG_LEVEL=debug logs it with its reason.
 *
 * Streams: every operation is ordered on the communicator's stream (see
 * msr_comm_set_stream): it starts after the work already queued there, and
 * work queued there after it sees its results. A blocking call returns when
 * the operation is done on the device (the host waits, bounded by the
 * deadline); a non-blocking call returns once the operation is queued, and
 * msr_comm_wait/msr_comm_test tell when it is done, or msr_comm_wait_stream
 * makes another stream wait for it without blocking the host.
 *
 * Point-to-point on device communicators: tag must be 0 (NCCL matches
 * messages by order only; MSR_ERR_UNSUPPORTED otherwise), and a receive must
 * give the count that was sent.
 *
 * Results: "nccl" reduces in NCCL's order (the same on every rank; avg of
 * floats scales each input by 1/size before summing, so its last bits may
 * differ from a host communicator's); "staged" gives exactly the host
 * communicator's bits.
 *
 * libmsrun links no CUDA library: the first of the calls below loads the
 * CUDA runtime (libcudart.so.<major>) and NCCL (libnccl.so.2) with dlopen,
 * so a program that makes no device communicator never maps them.
 * $MSR_CUDART_LIBRARY and $MSR_NCCL_LIBRARY name other files to load.
 * Without the CUDA runtime (not found, or libmsrun built with
 * -DMSRUN_CUDA=OFF or without the CUDA toolkit) the calls below fail with
 * MSR_ERR_UNSUPPORTED and msr_last_error() says why ("CUDA runtime not
 * available: libcudart.so.13: cannot open shared object file: ..."); without
 * NCCL, staged communicators work and NCCL ones fail the same way ("NCCL
 * not available: ..."). Host communicators answer msr_comm_set_stream and
 * msr_comm_wait_stream with MSR_ERR_UNSUPPORTED. */

/* flag for msr_comm_device: stage through host memory even where NCCL could
 * serve (the same on every member). */
#define MSR_COMM_STAGED 2u

/* Picks this process's GPU from its local rank, local_rank % (number of
 * visible devices), and makes it the calling thread's current device
 * (cudaSetDevice). Local: no communication. More local ranks than devices
 * means several ranks share a GPU (device communicators then stage through
 * host memory).
 *
 * Fails with MSR_ERR_INVALID_ARG (NULL arguments), MSR_ERR_UNSUPPORTED (no
 * CUDA in this build, no driver or no device: msr_last_error() has CUDA's
 * reason) or MSR_ERR_BACKEND. *device_p is written only on success. Any
 * thread; it sets that thread's current device only. */
MSR_API msr_status_t msr_gpu_select(msr_ctx_t *ctx, int *device_p);

/* Makes a device communicator with comm's members and ranks. Collective
 * over comm (every member calls it, with the same flags): picks the GPU
 * (msr_gpu_select) and sets it current on the calling thread, duplicates
 * comm for its own use (a host communicator that stays the device
 * communicator's, so comm may be destroyed first), agrees on the backend
 * with the other members (one allgather over comm), and for "nccl" lets
 * member 0 make the NCCL unique id, which the others read from the store
 * (key "msr/comm/gpu/<k>/nccl-id" of the current generation), then
 * initializes the NCCL communicator, polling it against comm's timeout. The
 * new communicator inherits comm's timeout and starts on a stream of its
 * own, a blocking one (cudaStreamDefault): it waits for the work queued on
 * the legacy default stream, where cudaMemcpy and cudaMemset put theirs.
 *
 * flags: MSR_COMM_OWN_WORKER (its host communicator gets a UCX worker of
 * its own, as msr_comm_dup), MSR_COMM_STAGED.
 *
 * Fails, on every member alike, with MSR_ERR_INVALID_ARG (unknown flags,
 * flags or MSR_COMM_GPU that differ between members or are not understood),
 * MSR_ERR_UNSUPPORTED (no CUDA, no device on some member, or MSR_COMM_GPU=
 * nccl where members share a GPU), MSR_ERR_NO_MEMORY, MSR_ERR_BACKEND (CUDA
 * or NCCL failed: msr_last_error() has their message), MSR_ERR_TIMEOUT,
 * MSR_ERR_PEER_LOST, or the errors of comm's collectives and of the store.
 * On success *dcomm_p is the caller's until msr_comm_destroy (which also
 * frees the NCCL communicator: ncclCommFinalize and ncclCommDestroy when it
 * is idle and healthy, bounded by MSR_COMM_CLOSE_MS, else ncclCommAbort).
 * Threads: as any collective on comm. */
MSR_API msr_status_t msr_comm_device(msr_comm_t *comm, unsigned flags, msr_comm_t **dcomm_p);

/* msr_comm_device over a world communicator made for it (msr_comm_world,
 * then destroyed): every rank of the job must call it. Errors as
 * msr_comm_world and msr_comm_device. */
MSR_API msr_status_t msr_comm_device_world(msr_ctx_t *ctx, unsigned flags, msr_comm_t **dcomm_p);

/* The backend of comm: "ucx" (host memory), "nccl" or "staged". Never NULL;
 * any thread. */
MSR_API const char *msr_comm_backend(const msr_comm_t *comm);

/* The CUDA device comm's buffers live on; -1 for host communicators. */
MSR_API int msr_comm_gpu(const msr_comm_t *comm);

/* Orders later operations of device communicator comm on stream (a
 * cudaStream_t of comm's device, which stays the caller's and must outlive
 * those operations); NULL goes back to the communicator's own stream.
 * Operations already queued keep their stream. Fails with
 * MSR_ERR_INVALID_ARG (comm NULL) or MSR_ERR_UNSUPPORTED (a host
 * communicator). Any thread; calls racing with it get one stream or the
 * other. */
MSR_API msr_status_t msr_comm_set_stream(msr_comm_t *comm, void *stream);

/* The stream comm's next operations go to (a cudaStream_t): the caller's
 * from msr_comm_set_stream or the communicator's own. NULL for host
 * communicators. Queue work there (or make a stream wait on an event
 * recorded there) to order it with comm's operations. */
MSR_API void *msr_comm_stream(const msr_comm_t *comm);

/* Makes stream (a cudaStream_t of the request's device) wait on the device
 * until the non-blocking device operation req is done. On "nccl" the host
 * does not block; on "staged" the host first waits for the operation's host
 * part (as msr_comm_wait, bounded by its deadline), then only the last copy
 * back is left to the stream. req stays the caller's, still to be finished with msr_comm_wait or
 * msr_comm_test, which also report a failure (work that stream runs after a
 * failed operation sees unspecified buffer contents). Fails with
 * MSR_ERR_INVALID_ARG (NULL), MSR_ERR_UNSUPPORTED (a host request),
 * MSR_ERR_BACKEND. One thread per request, as msr_comm_wait. */
MSR_API msr_status_t msr_comm_wait_stream(msr_comm_req_t *req, void *stream);

#ifdef __cplusplus
}
#endif

#endif
