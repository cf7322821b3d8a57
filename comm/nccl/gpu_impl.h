/* The device communicators' private structures: the part every device
 * communicator has (its GPU table, device, stream, host communicator, lock,
 * requests in flight), the two backends' hooks (NCCL in nccl.c, staged
 * through host memory in staged.c) and the policy functions (policy.c). */
#ifndef MSR_COMM_NCCL_GPU_IMPL_H
#define MSR_COMM_NCCL_GPU_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "base/list.h"
#include "comm/comm_impl.h"
#include "comm/nccl/gpu_api.h"

/* ---- policy (policy.c): pure functions, unit-tested without a GPU ---- */

/* MSR_COMM_GPU: which backend a device communicator uses. */
typedef enum gpu_mode {
    GPU_MODE_AUTO = 0,   /* nccl unless members share a GPU, then staged */
    GPU_MODE_NCCL = 1,   /* nccl, or fail where members share a GPU */
    GPU_MODE_STAGED = 2, /* staged always */
} gpu_mode_t;

typedef enum gpu_kind {
    GPU_KIND_NCCL = 0,
    GPU_KIND_STAGED = 1,
} gpu_kind_t;

/* "auto", "nccl", "staged" (any case; NULL or "" is auto). */
msr_status_t gpu_mode_parse(const char *text, gpu_mode_t *mode_p);
const char *gpu_mode_name(gpu_mode_t mode);

/* The device a local rank uses: local_rank % device_count (-1 when
 * device_count < 1 or local_rank < 0). */
int gpu_pick_device(int local_rank, int device_count);

/* Whether the local ranks of one node outnumber its devices (so some share
 * one). */
int gpu_node_shared(int local_size, int device_count);

#define GPU_MEMBER_MAGIC 0x6d736770u /* "msgp" */

/* What each member of a new device communicator tells the others (one
 * allgather over the host communicator); fixed layout, no pointers. */
typedef struct gpu_member {
    uint32_t magic;
    int32_t status; /* MSR_OK, or why this member cannot take part */
    int32_t mode;   /* gpu_mode_t from its MSR_COMM_GPU */
    uint32_t flags; /* its msr_comm_device flags */
    int32_t device; /* CUDA ordinal */
    int32_t pid;    /* for messages */
    int32_t local_size, device_count;
    uint64_t host; /* msr_host_id() */
    int64_t key;   /* member 0: the number naming the NCCL id's store key */
    unsigned char uuid[MSR_GPU_UUID_BYTES]; /* all zero when unknown */
} gpu_member_t;

/* Two members on one GPU: the first pair (in rank order of the lower one) on
 * the same machine with the same device UUID (or, where a UUID is unknown,
 * the same ordinal). Returns 1 and writes *a_p < *b_p when found. */
int gpu_find_shared(const gpu_member_t *m, int n, int *a_p, int *b_p);

/* The backend for members m[0..n-1] (what every member decides alike from
 * the same allgather): the modes and flags must agree (MSR_ERR_INVALID_ARG);
 * MSR_COMM_STAGED or mode staged gives staged; a shared GPU gives staged in
 * mode auto and MSR_ERR_UNSUPPORTED in mode nccl; else nccl. why gets a
 * sentence for the log (or the error). */
msr_status_t gpu_decide(const gpu_member_t *m, int n, gpu_kind_t *kind_p, char *why, size_t len);

/* ---- the device communicator ---- */

/* p2p tags the device backends use on their own host communicator (the
 * user's tags never reach it) */
#define GPU_TAG_WATCH    1
#define GPU_TAG_BREAK    2
#define GPU_TAG_LEN_SEND 3 /* nccl: a send's length, to its receiver */
#define GPU_TAG_LEN_RECV 4 /* nccl: a receive's length, to its sender */

typedef struct gpu_comm gpu_comm_t;
typedef struct gpu_req gpu_req_t;

/* Memory a copy or a transfer may still touch after its request failed:
 * freed at release once its event is done (else left, with a log line). */
typedef struct gpu_grave {
    void *pinned; /* host_free */
    void *dev;    /* device_free */
    void *event;  /* done when the copies are */
} gpu_grave_t;

struct gpu_comm {
    msr_comm_t *comm; /* the public side (comm->be is this) */
    const msr_gpu_api_t *api;
    gpu_kind_t kind;
    int device;
    /* its own host communicator: the agreements, the staged transfers, and
     * news of failures both ways (a receive nobody sends to, which fails
     * when the host communicator breaks; breaking it tells the members) */
    msr_comm_t *host;
    msr_comm_req_t *watch;
    unsigned char watch_buf[8];
    uint64_t next_watch_ns;
    /* every call into the table for this communicator, and what follows */
    pthread_mutex_t lock;
    void *nc;          /* the NCCL communicator; NULL when staged or aborted */
    void *split_nc;    /* where a split's new NCCL communicator lands (the
                        * parent outlives NCCL's late store into it) */
    void *scratch;     /* nccl: a few device bytes for the barrier */
    msr_list_t active; /* requests in flight, in the order they were posted */
    int deferred;      /* nccl: requests posted but not yet queued on the device */
    void **events;     /* free events */
    int n_events, cap_events;
    void *pinned; /* staged: one cached pinned block */
    size_t pinned_len;
    int pinned_busy;
    gpu_grave_t *grave;
    int n_grave, cap_grave;
    int closed;
    uint64_t spin_ns; /* a wait polls this long before it naps */
};

/* staged: the communicator's cached pinned block grows in units of this
 * many bytes (a request that finds it busy gets a block of its own, of
 * its exact size) */
#define GPU_STAGED_UNIT ((size_t)64 << 10)

/* staged: where a request is */
typedef enum gpu_stage {
    GPU_STAGE_D2H = 0, /* copies to host memory queued, the event recorded */
    GPU_STAGE_HOST,    /* the host operation running */
    GPU_STAGE_H2D,     /* copies back queued, the event recorded */
} gpu_stage_t;

struct gpu_req {
    msr_comm_req_t pub; /* first: comm.c sees this */
    gpu_comm_t *gc;
    msr_list_t link; /* gc->active while running */
    void *stream;    /* the stream it was queued on */
    void *event;     /* done when the device part is */
    gpu_stage_t stage;
    msr_comm_req_t *host_req;
    unsigned char *pinned; /* staged: host copy of the buffers */
    size_t pinned_len;
    int pinned_cached; /* it is gc->pinned */
    uint64_t *hv;      /* staged alltoallv: the host operation's count arrays */
    void *tmp;         /* nccl: device scratch (in-place alltoall) */
    /* nccl: not queued on the device yet (a send or receive until both
     * sides' lengths agree, and every request posted after one); queued in
     * the order posted, so NCCL sees every member's calls in its order */
    int deferred;
    msr_comm_req_t *len_req; /* nccl send/recv: the peer's length arriving */
    uint64_t len_mine, len_peer;
};

/* gpu_comm.c */

/* Makes the public communicator over host (whose ownership it takes on
 * success) for backend kind on device: its stream, lock and watch. nc (the
 * NCCL communicator, may be NULL and be attached later) is taken too.
 * Local. */
msr_status_t gpu_comm_make(msr_ctx_t *ctx, const msr_gpu_api_t *api, gpu_kind_t kind, int device,
                           msr_comm_t *host, void *nc, int64_t timeout_ms, msr_comm_t **comm_p);

/* Breaks gc's communicator with st (the first failure wins): aborts the NCCL
 * communicator, fails every request in flight, and, with notify, breaks the
 * host communicator so the other members stop waiting for this one. Lock
 * held. */
void gpu_comm_fail(gpu_comm_t *gc, msr_status_t st, int notify, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* One round of progress on every request of gc, news of failures and
 * deadlines. Returns nonzero when something finished. Lock held. */
int gpu_progress(gpu_comm_t *gc);

/* Polls what (an NCCL call that answered MSR_IN_PROGRESS) until nc says it
 * is done, failed, or deadline passes (MSR_ERR_TIMEOUT); a failure of a
 * member reported through the host communicator ends it too. Lock held. */
msr_status_t gpu_settle(gpu_comm_t *gc, void *nc, uint64_t deadline);

/* Every member's status agreed over host: the first failure in rank order
 * (MSR_OK when none). A failed exchange returns its own status. */
msr_status_t gpu_agree(msr_comm_t *host, msr_status_t mine);

/* Grows gc's event pool by one if it is empty and takes one. Lock held. */
msr_status_t gpu_event_get(gpu_comm_t *gc, void **event_p);

/* nccl.c */
extern const msr_comm_backend_ops_t gpu_nccl_ops;
/* Starts r: queues its operation on its stream and records r->event, or,
 * for a send or receive (and anything posted while one waits), defers it:
 * a send and its receive first tell each other their lengths over the
 * host communicator (NCCL would hang, or cut the message short, where
 * they differ). Lock held. Returns an argument error or MSR_ERR_NO_MEMORY
 * before anything was queued (r not started), or MSR_OK / another status
 * with r started (r->pub.status says). */
msr_status_t gpu_nccl_start(gpu_req_t *r);
/* Moves r on: a deferred request is queued once it may be (*may_post's
 * GPU_POST_COLL bit: no earlier request is still deferred; r clears it
 * while it stays deferred) and, for a send or receive, both lengths are
 * known and equal; lengths that differ fail r alone with
 * MSR_ERR_TRUNCATED, saying both, on both sides. Returns MSR_IN_PROGRESS,
 * MSR_OK once r's event is done, or a failure (r is then still in the
 * list: the caller fails it). Lock held. */
msr_status_t gpu_nccl_step(gpu_req_t *r, int *may_post);
/* Makes the NCCL communicator of gc (member 0's unique id through the store
 * under key) and polls its initialization. Collective over gc->host. */
msr_status_t gpu_nccl_attach(gpu_comm_t *gc, int64_t key);
/* Closes gc's NCCL communicator: finalize and destroy when healthy, within
 * MSR_COMM_CLOSE_MS, else abort. Lock held. */
void gpu_nccl_close(gpu_comm_t *gc);

/* staged.c */
extern const msr_comm_backend_ops_t gpu_staged_ops;
/* Starts r: its host block and the copies to it. Lock held; same contract as
 * gpu_nccl_start. */
msr_status_t gpu_staged_start(gpu_req_t *r);
/* Moves r on as far as it can go now: returns MSR_IN_PROGRESS, MSR_OK when
 * done, or a failure (r is then still in the list: the caller fails it).
 * *may_post (GPU_POST_* bits, both set for the first request): whether r
 * may start its host operation; r clears its kind's bit while it has not
 * started, and a collective clears GPU_POST_COLL while it runs, so that
 * members start them in one order, one collective at a time. Lock held. */
#define GPU_POST_COLL 1
#define GPU_POST_P2P  2
msr_status_t gpu_staged_step(gpu_req_t *r, int *may_post);

/* gpu_ops.c: the ops every device backend shares */
msr_status_t gpu_op_run(msr_comm_t *comm, const msr_coll_args_t *args, uint64_t deadline);
msr_status_t gpu_op_wait(msr_comm_req_t *req);
msr_status_t gpu_op_test(msr_comm_req_t *req);
void gpu_op_req_free(msr_comm_req_t *req);
void gpu_op_close(msr_comm_t *comm);
void gpu_op_release(msr_comm_t *comm);
msr_status_t gpu_op_wait_stream(msr_comm_req_t *req, void *stream);
msr_status_t gpu_op_post(msr_comm_t *comm, msr_comm_req_t **req_p, const msr_coll_args_t *args,
                         uint64_t deadline);
/* split/dup of either backend: the host communicator first, then the NCCL
 * split (nccl) or nothing more (staged), then an agreement. */
msr_status_t gpu_op_split(msr_comm_t *comm, int color, int key, unsigned flags,
                          msr_comm_t **newcomm_p);

/* Frees what a finished request holds (its event back to the pool, its
 * pinned block to the cache). Lock held. */
void gpu_req_release(gpu_req_t *r);
/* A request that ends (done or failed) leaves the list; fails one request
 * (its status and message; what its copies may still touch is kept until
 * release). Lock held. */
void gpu_req_leave(gpu_req_t *r);
void gpu_req_fail(gpu_req_t *r, msr_status_t st, const char *why);

#endif
