/* The UCX backend's private structures: the engine (a UCP context and worker
 * shared by a family of communicators), the communicator's part and the
 * request with its algorithm state. */
#ifndef MSR_COMM_UCX_IMPL_H
#define MSR_COMM_UCX_IMPL_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#include "base/list.h"
#include "comm/comm_impl.h"

/* ---- tags ----
 * 63..62 class | 61..46 communicator id | 45..26 sender's rank in the group |
 * 25..0: collectives: sequence (20 bits) and phase (6 bits); point to point:
 * the user's tag. Receives name the sender, so messages of different
 * communicators, operations, senders and phases never match each other. */
#define UCX_TAG_COLL     0ull
#define UCX_TAG_P2P      1ull
#define UCX_TAG_CTRL     2ull
#define UCX_TAG_ID_BITS  16
#define UCX_TAG_SRC_BITS 20
#define UCX_TAG_SEQ_BITS 20
#define UCX_TAG_PHASES   64
#define UCX_MAX_RANKS    (1 << UCX_TAG_SRC_BITS)
#define UCX_MAX_COMM_ID  0xffff

static inline uint64_t ucx_tag(uint64_t cls, unsigned id, int src, uint64_t low)
{
    return (cls << 62) | ((uint64_t)id << 46) | ((uint64_t)(unsigned)src << 26) |
           (low & ((1ull << 26) - 1));
}

#define UCX_TAG_MASK_FULL (~0ull)
/* class and communicator: what the abort receive matches */
#define UCX_TAG_MASK_CTRL (~0ull << 46)

/* Which algorithm a collective runs; "auto" picks by size. */
typedef enum ucx_algo {
    UCX_ALGO_AUTO = 0,
    UCX_ALGO_DIRECT,   /* every rank exchanges with every other at once */
    UCX_ALGO_RD,       /* recursive doubling */
    UCX_ALGO_RING,     /* pipelined ring */
    UCX_ALGO_BINOMIAL, /* binomial tree */
    UCX_ALGO_CHAIN,    /* pipelined chain */
    UCX_ALGO_PAIRWISE, /* pairwise exchange */
    UCX_ALGO_SHM,      /* through the group's shared-memory segment (one node) */
} ucx_algo_t;

/* Thresholds and knobs, read from the environment when a communicator is
 * made (docs/comm.md lists them). Sizes are bytes of the whole vector. */
typedef struct ucx_tuning {
    ucx_algo_t force[MSR_COLL_RECV + 1]; /* MSR_COMM_ALGO_<COLL> */
    size_t allreduce_direct_max;         /* 3+ ranks: direct up to here (small groups) */
    size_t allreduce_ring_min;           /* 3+ ranks: ring from here, recursive doubling below */
    size_t allreduce_ring_min_2;         /* 2 ranks: ring from here, direct below */
    int direct_max_ranks;                /* direct only for groups up to this size */
    size_t reduce_scatter_ring_min;
    size_t allgather_ring_min;
    size_t bcast_chain_min;
    size_t reduce_chain_min;
    size_t segment; /* pipeline segment */
    int window;     /* segments in flight per direction */
    int alltoall_window;
    size_t shm_max;     /* allreduce through the slots up to here (0: never) */
    size_t shm_tile;    /* the tiled path's tile (0: none) */
    int shm_depth;      /* its tiles in flight */
    int shm_nt;         /* tiled stores past the cache: 0 never, 1 always, 2 auto */
    size_t shm_nt_min;  /* ... for operations from this size */
    size_t shm_segment; /* bytes of slots, and of the tiled area, in a segment at most */
} ucx_tuning_t;

typedef struct ucx_engine ucx_engine_t;

typedef struct ucx_peer {
    ucx_engine_t *engine;
    int world_rank;
    int node;       /* node index (job ranks are contiguous per node) */
    int pid;        /* on this node only */
    int pidfd;      /* pidfd of a peer on this node, -1 otherwise */
    int member;     /* has an address in this engine */
    int dead;       /* lost: set by the error callback or the liveness check */
    int dead_noted; /* the communicators were told */
    int peer_mode;  /* its endpoint uses UCP_ERR_HANDLING_MODE_PEER */
    ucp_ep_h ep;    /* made on first use */
    size_t addr_off, addr_len;
} ucx_peer_t;

struct ucx_engine {
    msr_ctx_t *ctx;
    char *uid; /* names its store keys: "w" for the world's, "w.5" for a dup */
    pthread_mutex_t lock;
    _Atomic int contenders; /* threads waiting for the lock */
    int refs;               /* communicators using it (under lock) */
    ucp_context_h context;
    ucp_worker_h worker;
    int efd;
    int world_size, my_world, my_node, local_size;
    int host_ranks;    /* members on this machine (several "nodes" may share it) */
    ucx_peer_t *peers; /* world_size entries, by job rank */
    unsigned char *addrs;
    unsigned next_comm_id;
    msr_list_t active; /* requests running */
    msr_list_t comms;  /* communicators alive */
    /* UCX requests of failed operations, freed as they finish; memory they
     * may still touch is kept until the engine goes */
    void **orphans;
    size_t n_orphans, cap_orphans;
    void **graveyard;
    size_t n_graveyard, cap_graveyard;
    int dead_pending;  /* a peer died: tell the communicators */
    int saw_failure;   /* a communicator broke: close endpoints by force */
    int abort_pending; /* an abort notice arrived */
    uint64_t next_liveness_ns;
    struct pollfd *pfds; /* the worker's fd and the live local peers' pidfds */
    int *pfd_peer;
    int n_pfds;
    int waiters;           /* threads inside wait */
    int shm_active;        /* shared-memory operations running: they need polling */
    int shm_moved;         /* steps of tiled operations that moved since the last look */
    uint64_t spin_ns;      /* busy polling, then */
    uint64_t yield_ns;     /* polling with sched_yield until this, then sleeping */
    uint64_t shm_yield_ns; /* the same while shared-memory operations run */
    msr_list_t free_reqs;
    int n_free_reqs;
    /* for the debug line at the end */
    uint64_t stat_waits, stat_sleeps, stat_sleep_timeouts, stat_slept_ns;
};

typedef struct ucx_comm {
    ucx_engine_t *engine;
    msr_comm_t *comm;
    unsigned id;
    uint32_t seq;
    ucx_peer_t **peer; /* by rank in the group */
    msr_list_t link;   /* in engine->comms */
    ucx_tuning_t tune;
    void *abort_req;
    int64_t abort_in[2]; /* status, job rank (status MSR_OK: that member left) */
    int abort_arrived;
    unsigned char *left; /* by rank: the member destroyed its communicator cleanly */
    int closed;
    /* one cached scratch block, reused by the next operation */
    void *cache;
    size_t cache_len;
    int cache_busy;
    /* the shared-memory segment of a group on one node (shm.c), or NULL */
    struct ucx_shm *shm;
    size_t shm_slot;    /* its slots: the largest allreduce it takes */
    size_t shm_tile;    /* its tiles (0: no tiled path) */
    uint64_t shm_tiles; /* tiles of the tiled operations started */
    uint64_t shm_seq;   /* shared-memory operations started */
    uint64_t shm_done;  /* the last one this rank finished reading */
} ucx_comm_t;

typedef struct ucx_op {
    void *h;    /* UCX request, NULL when done */
    size_t len; /* receives: the length expected */
    int recv;
} ucx_op_t;

#define UCX_INLINE_OPS     8
#define UCX_INLINE_SCRATCH 512

typedef struct ucx_req ucx_req_t;
typedef msr_status_t (*ucx_step_fn)(ucx_req_t *r);

struct ucx_req {
    msr_comm_req_t pub;
    ucx_comm_t *uc;
    msr_list_t link; /* engine->active while running, else free list */
    /* from here to ops: cleared for each operation */
    ucx_step_fn step;
    const char *algo;
    int shm; /* counted in engine->shm_active */
    uint32_t seq;
    int pc; /* where step resumes */
    msr_status_t err;
    /* algorithm state */
    int n, me;
    size_t es, bytes;
    int64_t i, j, k, s;
    int peer, vr, mask, newrank, rem, p2;
    uint64_t u[8];
    /* operations in flight */
    ucx_op_t *ops;
    int nops, cap_ops;
    ucx_op_t inline_ops[UCX_INLINE_OPS];
    /* scratch */
    char *scratch;
    size_t scratch_len;
    int scratch_from; /* 0 inline, 1 the comm's cache, 2 malloc */
    _Alignas(64) char inline_scratch[UCX_INLINE_SCRATCH]; /* aligned for any dtype */
};

/* Part k of n balanced parts of count elements (the first count % n parts
 * one element longer). */
static inline void ucx_part(uint64_t count, uint64_t n, uint64_t k, uint64_t *off, uint64_t *len)
{
    uint64_t base = count / n, extra = count % n;
    *off = k * base + (k < extra ? k : extra);
    *len = base + (k < extra);
}

/* The engine's lock, counting who waits for it: a thread that spins in a
 * wait lets it go for a moment when someone does. */
static inline void ucx_engine_lock(ucx_engine_t *e)
{
    atomic_fetch_add_explicit(&e->contenders, 1, memory_order_relaxed);
    pthread_mutex_lock(&e->lock);
    atomic_fetch_sub_explicit(&e->contenders, 1, memory_order_relaxed);
}

static inline void ucx_engine_unlock(ucx_engine_t *e)
{
    pthread_mutex_unlock(&e->lock);
}

/* engine.c */
msr_status_t ucx_engine_create(msr_ctx_t *ctx, const char *uid, int n, const int *world_ranks,
                               ucx_engine_t **engine_p);
void ucx_engine_unref(ucx_engine_t *e);
ucp_ep_h ucx_engine_ep(ucx_engine_t *e, ucx_peer_t *p);
void ucx_engine_progress(ucx_engine_t *e);
msr_status_t ucx_engine_wait(ucx_engine_t *e, ucx_req_t *r);
/* The same with e->lock already held. */
msr_status_t ucx_engine_wait_locked(ucx_engine_t *e, ucx_req_t *r);
void ucx_engine_orphan(ucx_engine_t *e, void *ucp_req);
void ucx_engine_bury(ucx_engine_t *e, void *mem);
void ucx_comm_fail(ucx_comm_t *uc, msr_status_t st, int culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Tells the other members of a healthy communicator that this rank is done
 * with it, so that its exit afterwards does not break it for them. */
void ucx_comm_say_left(ucx_comm_t *uc);
/* comm_ucx.c: (re)posts the receive of the members' notices. Lock held. */
msr_status_t ucx_post_abort_recv(ucx_comm_t *uc);
void ucx_req_fail(ucx_req_t *r, msr_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ucx_req_done(ucx_req_t *r);

/* shm.c: a segment for comm's members when all are on this node, made
 * collectively over comm (which must work); any failure on any member
 * leaves uc->shm NULL everywhere (the UCX algorithms then serve). */
msr_status_t ucx_shm_setup(ucx_comm_t *uc);
void ucx_shm_free(ucx_comm_t *uc);
/* The shared-memory allreduce (and barrier: count 0) as a step function. */
msr_status_t ucx_shm_step(ucx_req_t *r);
/* The tiled allreduce, reduce-scatter, allgather, broadcast and reduce:
 * scratch tells the bytes of r->scratch it needs, init counts the
 * operation's tiles (r->u[0] already numbered it), step runs it. */
size_t ucx_shm_tiled_scratch(const ucx_req_t *r);
void ucx_shm_tiled_init(ucx_req_t *r);
msr_status_t ucx_shm_tiled_step(ucx_req_t *r);

/* coll.c */
/* Chooses the algorithm of r->pub.args, fills in r's state and posts the
 * first messages. */
msr_status_t ucx_coll_start(ucx_req_t *r);
void ucx_tuning_read(ucx_tuning_t *t, int local_size);

/* ops helpers (coll.c) */
void ucx_req_drop_ops(ucx_req_t *r);
void ucx_req_release_scratch(ucx_req_t *r);

#endif
