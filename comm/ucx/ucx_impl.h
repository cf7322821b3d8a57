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
 * communicators, operations, senders and phases never match each other; a
 * receive from any source masks the sender's bits out and learns the sender
 * from the tag of the message that matched (ucx_tag_src). */
#define UCX_TAG_COLL      0ull
#define UCX_TAG_P2P       1ull
#define UCX_TAG_CTRL      2ull
#define UCX_TAG_ID_BITS   16
#define UCX_TAG_SRC_BITS  20
#define UCX_TAG_SEQ_BITS  20
#define UCX_TAG_SRC_SHIFT 26
#define UCX_TAG_PHASES    64
#define UCX_MAX_RANKS     (1 << UCX_TAG_SRC_BITS)
#define UCX_MAX_COMM_ID   0xffff

static inline uint64_t ucx_tag(uint64_t cls, unsigned id, int src, uint64_t low)
{
    return (cls << 62) | ((uint64_t)id << 46) | ((uint64_t)(unsigned)src << UCX_TAG_SRC_SHIFT) |
           (low & ((1ull << UCX_TAG_SRC_SHIFT) - 1));
}

/* The sender's rank in the group, from a message's tag. */
static inline int ucx_tag_src(uint64_t tag)
{
    return (int)((tag >> UCX_TAG_SRC_SHIFT) & ((1ull << UCX_TAG_SRC_BITS) - 1));
}

#define UCX_TAG_MASK_FULL    (~0ull)
/* the class alone: what the drain of notices at close matches */
#define UCX_TAG_MASK_CLASS   (3ull << 62)
/* class and communicator: what the abort receive matches */
#define UCX_TAG_MASK_CTRL    (~0ull << 46)
/* everything but the sender: what a receive from any source matches */
#define UCX_TAG_MASK_ANY_SRC (~(((1ull << UCX_TAG_SRC_BITS) - 1) << UCX_TAG_SRC_SHIFT))

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
    UCX_ALGO_HIER,     /* two levels: the nodes' segments, then UCX between nodes (hier.c) */
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
    size_t shm_max;        /* allreduce through the slots up to here (0: never) */
    size_t shm_tile;       /* the tiled path's tile (0: none) */
    int shm_depth;         /* its tiles in flight */
    int shm_nt;            /* tiled stores past the cache: 0 never, 1 always, 2 auto */
    size_t shm_nt_min;     /* ... for operations from this size */
    size_t shm_segment;    /* bytes of slots, and of the tiled area, in a segment at most */
    int shm_spin;          /* the slots: polls of the awaited words before the engine's loop */
    size_t shm_lined_pair; /* a group of two on an uncrowded machine: lined up to here */
    int hier;              /* groups over several nodes get node-local sub-groups (0: never) */
    size_t hier_min[MSR_COLL_RECV + 1]; /* auto: the two levels from this many bytes */
    int hier_max_nodes;                 /* ... and over at most this many nodes */
    int hier_rs_max_nodes;              /* ... (reduce-scatter's) */
    size_t hier_chunk;                  /* bytes of a message between nodes */
    int hier_window;                    /* units of the exchange in flight */
} ucx_tuning_t;

/* CPUs a member's record names: up to 1024, as glibc's cpu_set_t. */
#define UCX_CPU_WORDS 16

typedef struct ucx_engine ucx_engine_t;

/* A communicator that broke on a lost peer: its id and members. */
typedef struct ucx_lost_comm {
    unsigned id;
    int size;
    int *world_ranks;
} ucx_lost_comm_t;

typedef struct ucx_peer {
    ucx_engine_t *engine;
    int world_rank;
    int node;            /* node index (job ranks are contiguous per node) */
    int pid;             /* on this node only */
    int pidfd;           /* pidfd of a peer on this node, -1 otherwise */
    int member;          /* a member of this engine's group */
    int dead;            /* lost: set by the error callback or the liveness check */
    int dead_noted;      /* the communicators were told */
    int broke;           /* an operation with it failed in UCX's transport (not canceled) */
    int peer_mode;       /* its endpoint uses UCP_ERR_HANDLING_MODE_PEER */
    int same_host;       /* on this machine and PID namespace (maybe another node) */
    ucp_ep_h ep;         /* made on first use */
    uint32_t index;      /* in the engine's group: its address's entry */
    unsigned char *addr; /* its worker address: fetched on first use (this
                          * node's members: at the engine's start) */
    size_t addr_len;
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
    uint64_t my_host, my_pidns; /* msr_host_id(), the PID namespace */
    int host_shm;               /* other nodes' members on this machine through shared memory */
    int host_ranks;             /* members on this machine (several "nodes" may share it) */
    uint64_t node_cpus[UCX_CPU_WORDS]; /* the CPUs this node's members may run on (union) */
    ucx_peer_t *peers;                 /* world_size entries, by job rank */
    char addr_key[256];                /* the name its members publish their addresses under */
    unsigned next_comm_id;
    msr_list_t active; /* requests running */
    msr_list_t comms;  /* communicators alive */
    /* UCX requests of failed operations, freed as they finish; memory they
     * may still touch is kept until the engine goes */
    void **orphans;
    size_t n_orphans, cap_orphans;
    void **graveyard;
    size_t n_graveyard, cap_graveyard;
    int dead_pending; /* a peer died: tell the communicators */
    int saw_failure;  /* a communicator broke: close endpoints by force */
    /* The communicators that broke on a lost peer, with their members' job
     * ranks: the drain at close leaves the lost members' messages alone.
     * saw_loss: one could not be recorded (out of memory), so the drain
     * leaves every message that may be a rendezvous. */
    struct ucx_lost_comm *lost_comms;
    size_t n_lost_comms;
    int saw_loss;
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
    /* for the debug line at the end; held: idle rounds of a wait that kept
     * the core (the spin phase), yields: those that handed it over */
    uint64_t stat_waits, stat_sleeps, stat_sleep_timeouts, stat_slept_ns;
    uint64_t stat_held, stat_yields;
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
    /* a notice: status, job rank (status MSR_OK: that member left), and
     * the rank in the group whose failure it was (passed on unchanged by
     * the members that relay it) */
    int64_t abort_in[3];
    int abort_arrived;
    /* once broken: the rank in the group whose failure broke it (as told;
     * -1: this member's own) */
    int broke_from;
    unsigned char *left; /* by rank: the member destroyed its communicator cleanly */
    int closed;
    /* one cached scratch block, reused by the next operation */
    void *cache;
    size_t cache_len;
    int cache_busy;
    /* the shared-memory segment of a group on one node (shm.c), or NULL */
    struct ucx_shm *shm;
    size_t shm_slot;    /* its slots: the most a member puts in for one operation */
    int shm_own_cpus;   /* this machine has a CPU per rank: the slots' waits poll
                         * before the engine's loop (shm.c) */
    size_t shm_tile;    /* its tiles (0: no tiled path) */
    uint64_t shm_tiles; /* tiles of the tiled operations started */
    uint64_t shm_seq;   /* shared-memory operations started */
    uint64_t shm_done;  /* the last one this rank finished reading */
    /* a group over several nodes: its node-local sub-groups (hier.c), or NULL */
    struct ucx_hier *hier;
    /* ... all on this machine, reached through shared memory (shm.c tells;
     * auto then keeps the flat algorithms where the segment failed) */
    int one_host;
} ucx_comm_t;

typedef struct ucx_op {
    void *h;             /* UCX request, NULL when done */
    size_t len;          /* receives: the length expected */
    uint64_t sender_tag; /* receives: the tag of the message that matched */
    int peer;            /* the rank it goes to or comes from (-1: any source) */
    int recv;
} ucx_op_t;

#define UCX_INLINE_OPS     8
#define UCX_INLINE_SCRATCH 512

/* ---- algorithm state ----
 * One struct per algorithm (coll_*.c, shm_*.c), in a union in the request: the
 * state that lives from one step to the next. A request starts with it
 * cleared, so every phase below starts at its first value (0). A step
 * function that posts messages and waits for them keeps the point where it
 * resumes in its phase. */

/* send, receive and the direct algorithms (allreduce, reduce-scatter,
 * allgather): every message posted at once, then waited for */
typedef enum ucx_direct_phase { UCX_DIRECT_POST, UCX_DIRECT_WAIT } ucx_direct_phase_t;
typedef struct ucx_direct {
    ucx_direct_phase_t phase;
} ucx_direct_t;

/* barrier: dissemination; in each round a rank signals rank me + dist and
 * hears from rank me - dist */
typedef enum ucx_barrier_phase { UCX_BARRIER_START, UCX_BARRIER_ROUND } ucx_barrier_phase_t;
typedef struct ucx_barrier {
    ucx_barrier_phase_t phase;
    int dist;       /* 1, 2, 4, ... below n */
    unsigned round; /* log2(dist): the tag's phase */
} ucx_barrier_t;

/* allreduce by recursive doubling: ranks 0 .. 2 rem - 1 fold pairwise into
 * rem (fold in), p2 ranks exchange log2(p2) times, the folded ones get the
 * result back (fold out) */
typedef enum ucx_rd_phase {
    UCX_RD_START,
    UCX_RD_FOLD_IN,
    UCX_RD_EXCHANGE,
    UCX_RD_FOLD_OUT,
} ucx_rd_phase_t;
typedef struct ucx_rd {
    ucx_rd_phase_t phase;
    int p2;         /* the largest power of two up to n */
    int rem;        /* n - p2 */
    int newrank;    /* rank among the p2 that exchange; -1 for one folded in */
    int mask;       /* this exchange's partner: newrank ^ mask */
    unsigned round; /* this exchange's tag phase: 1 .. log2(p2) */
} ucx_rd_t;

/* A pipeline of segments (the ring, the chains): two ordered streams, of
 * receives (each into a slot of slot_bytes in scratch, where it has one)
 * and of sends. The counters only grow: receive x is in ops[x % window],
 * send x in ops[window + x % send_window]. */
typedef struct ucx_pipe {
    uint64_t nseg;                     /* segments of a chunk (ring) or of the vector (chain) */
    uint64_t window;                   /* receives in flight at most */
    uint64_t send_window;              /* sends in flight at most */
    uint64_t slot_bytes;               /* a receive slot: the largest segment */
    uint64_t recvs_posted, recvs_done; /* done: finished (and folded in) */
    uint64_t sends_posted, sends_done;
} ucx_pipe_t;

/* the pipelined ring (reduce-scatter, then for an allreduce allgather): a
 * unit is one segment of one step; see coll.c */
typedef struct ucx_ring {
    ucx_pipe_t pipe;
    uint64_t units; /* receive units: (n - 1) nseg, twice for an allreduce */
    uint64_t sends; /* sends in all: as many as units */
} ucx_ring_t;

/* allgather by a ring, unpipelined: step s receives block me - s - 1 and
 * sends block me - s once it is there */
typedef enum ucx_ag_ring_phase {
    UCX_AG_RING_START,
    UCX_AG_RING_SEND, /* waiting for the block step sends */
    UCX_AG_RING_WAIT, /* every send posted */
} ucx_ag_ring_phase_t;
typedef struct ucx_ag_ring {
    ucx_ag_ring_phase_t phase;
    int step; /* 0 .. n - 2 */
} ucx_ag_ring_t;

/* broadcast and reduce by a binomial tree over ranks relative to the root */
typedef enum ucx_tree_phase {
    UCX_TREE_START,
    UCX_TREE_FROM_PARENT, /* broadcast: the vector is coming */
    UCX_TREE_TO_CHILDREN, /* broadcast: sent to every child */
    UCX_TREE_FROM_CHILD,  /* reduce: a child's partial sum is coming */
    UCX_TREE_TO_PARENT,   /* reduce: ours is going */
} ucx_tree_phase_t;
typedef struct ucx_tree {
    ucx_tree_phase_t phase;
    int vr;   /* this rank relative to the root (the root is 0) */
    int mask; /* the bit of vr this level of the tree is about */
} ucx_tree_t;

/* broadcast and reduce by a pipelined chain of ranks relative to the root:
 * vr 0 -> 1 -> ... -> n - 1 (broadcast) or back (reduce) */
typedef struct ucx_chain {
    ucx_pipe_t pipe;
    int vr; /* this rank relative to the root */
} ucx_chain_t;

/* alltoall(v), pairwise: step d (1 .. n - 1) sends to me + d and receives
 * from me - d, window steps in flight, step d in ops[2 (d % window)] */
typedef struct ucx_a2a {
    int started; /* our own block is copied */
    int window;
    int posted, done; /* steps posted and finished, from 1 */
} ucx_a2a_t;

/* shm_slots.c: the shared-memory allreduce and barrier through the slots */
typedef struct ucx_shm_slots {
    uint64_t seq;      /* this operation's number (the communicator's count) */
    int published;     /* our input is in our slot and our sequence word says so */
    int first_unseen;  /* the first member not seen at the awaited number yet */
    size_t first_line; /* lined: its first line not seen yet (from the range's first) */
    /* two members, a vector of up to SHM_INLINE bytes: the peer's, copied
     * the moment its word showed the operation (shm_slots.c) */
    _Alignas(16) char peer[16];
} ucx_shm_slots_t;

/* shm_tiles.c: the tiled path; tiles are counted over the communicator's life */
typedef struct ucx_shm_tiles {
    uint64_t seq;        /* this operation's number */
    uint64_t parts;      /* reduce-scatter and allgather of hier.c: the blocks are the
                          * balanced parts (ucx_part) of this many elements, and count
                          * is the largest; 0: every block has count elements */
    int started;         /* the earlier operations finished here: running */
    int bypass;          /* stores for the others bypass the cache */
    uint64_t first_tile; /* the number of this operation's first tile */
    uint64_t ntiles;
    uint64_t tile_elems;              /* elements of a full tile */
    uint64_t staged, reduced, copied; /* tiles of this operation */
    uint64_t start_ns;                /* when it started running */
    uint64_t ready;                   /* allgather: elements of our block that may be staged (hier.c
                                       * runs it while the block is still arriving); UINT64_MAX: all */
} ucx_shm_tiles_t;

/* hier.c: two levels; the operation's own state is on the heap (hier_op) */
typedef struct ucx_hier_state {
    int rs_done, ag_done; /* the shared-memory steps (or nothing to do) */
    uint64_t started;     /* units of the exchange between nodes posted */
    uint64_t folded;      /* ... whose piece of ours is folded and on its way */
    uint64_t done;        /* ... finished (every message) */
} ucx_hier_state_t;

typedef struct ucx_req ucx_req_t;
typedef msr_status_t (*ucx_step_fn)(ucx_req_t *r);

struct ucx_req {
    msr_comm_req_t pub;
    ucx_comm_t *uc;
    msr_list_t link; /* engine->active while running, else free list */
    /* from here to ops: cleared for each operation */
    ucx_step_fn step;
    const char *algo;
    int shm;                     /* counted in engine->shm_active */
    struct ucx_hier_op *hier_op; /* hier.c's operation, freed with the request */
    uint32_t seq;
    msr_status_t err;
    /* the operation's shape, for every algorithm */
    int n, me;    /* the group's size, our rank in it */
    size_t es;    /* bytes of an element */
    size_t bytes; /* bytes of count elements: the vector, or one rank's block */
    union {       /* the state of the algorithm that step runs */
        ucx_direct_t direct;
        ucx_barrier_t barrier;
        ucx_rd_t rd;
        ucx_ring_t ring;
        ucx_ag_ring_t ag_ring;
        ucx_tree_t tree;
        ucx_chain_t chain;
        ucx_a2a_t a2a;
        ucx_shm_slots_t slots;
        ucx_shm_tiles_t tiles;
        ucx_hier_state_t hier;
    };
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
 * wait lets it go for a moment when someone does. A free lock is taken at
 * once, uncounted: only a thread that must wait counts itself, so a call
 * that finds it free pays one atomic operation instead of three (each
 * waits for the call's earlier stores to leave the core: a broadcast's
 * root stalled on the line its readers hold). */
static inline void ucx_engine_lock(ucx_engine_t *e)
{
    if (pthread_mutex_trylock(&e->lock) == 0)
        return;
    atomic_fetch_add_explicit(&e->contenders, 1, memory_order_relaxed);
    pthread_mutex_lock(&e->lock);
    atomic_fetch_sub_explicit(&e->contenders, 1, memory_order_relaxed);
}

static inline void ucx_engine_unlock(ucx_engine_t *e)
{
    pthread_mutex_unlock(&e->lock);
}

/* engine*.c (engine.c the engine, engine_peers.c its peers and endpoints,
 * engine_fail.c failures, engine_progress.c progress and waiting) */
msr_status_t ucx_engine_create(msr_ctx_t *ctx, const char *uid, int n, const int *world_ranks,
                               ucx_engine_t **engine_p);
/* An engine in three steps, for members whose addresses travel another
 * way than the store (msr_comm_pairs): open (UCX's context and worker, the
 * group of n members not known yet), this member's record to hand over
 * (ucx_engine_record), the pair's peer taken from its record
 * (ucx_engine_take_pair), then ready (its one reference, its waiting
 * tuned). Discard undoes an engine that is not ready. node_only: every
 * member is on this node, so the worker opens only shared-memory
 * transports (unless the user set UCX_TLS). */
msr_status_t ucx_engine_open(msr_ctx_t *ctx, const char *uid, int n, int node_only,
                             ucx_engine_t **engine_p);
void ucx_engine_ready(ucx_engine_t *e, int n);
void ucx_engine_discard(ucx_engine_t *e);
/* This member's record: what it says of itself (pid, node, machine, CPUs)
 * and its worker's address; *rec_p allocated (msr_free), written only on
 * success. */
msr_status_t ucx_engine_record(ucx_engine_t *e, unsigned char **rec_p, size_t *len_p);
/* Makes e's group the two members ranks[0] < ranks[1] (this one at
 * index), the other's address and pid taken from its record rec (len
 * bytes, made by ucx_engine_record); a peer of this node is watched
 * through a pidfd. host_ranks: the members on this machine, for the
 * waiting's tuning (the engine this pair was made over knows them).
 * MSR_ERR_PROTOCOL for a malformed record. */
msr_status_t ucx_engine_take_pair(ucx_engine_t *e, const int ranks[2], int index,
                                  const unsigned char *rec, size_t len, int host_ranks);
/* Makes e's group the n members world_ranks (this one at index), each
 * other's record taken from recs: n blocks of stride bytes, each a
 * uint64_t length then the record (ucx_engine_record's); the members on
 * this machine counted from them. MSR_ERR_PROTOCOL for a malformed one. */
msr_status_t ucx_engine_take_all(ucx_engine_t *e, int n, const int *world_ranks, int index,
                                 const unsigned char *recs, size_t stride);
/* comm_pairs.c: the engine of a dup of comm with MSR_COMM_OWN_WORKER, the
 * members' addresses handed over in an allgather of comm, every member
 * taking part in each step whatever its outcome (all fail alike, the
 * failing member named); ready on success. */
msr_status_t ucx_engine_create_over(msr_comm_t *comm, const char *uid, ucx_engine_t **engine_p);
void ucx_engine_unref(ucx_engine_t *e);
ucp_ep_h ucx_engine_ep(ucx_engine_t *e, ucx_peer_t *p);
/* The same for a best-effort notice: a connection that fails (the peer's
 * engine gone, its shared-memory FIFO with it) is said in debug lines
 * only, UCX's own error messages held back for this thread's call. */
ucp_ep_h ucx_engine_ep_quiet(ucx_engine_t *e, ucx_peer_t *p);
/* Which machine this process is on (host id and PID namespace, hashed to a
 * non-negative number), or with MSR_COMM_HOST_SHM=0 its node: members that
 * give the same number can share memory. */
int64_t ucx_engine_machine(const ucx_engine_t *e);
/* The CPUs this machine's members may run on (the same on every member of
 * a node): what waits and the slot algorithms count ranks against. */
int ucx_engine_cpus(const ucx_engine_t *e);

/* Fetches the addresses of peers[0..n) (members of other nodes said to be
 * on this machine; the array is reordered) where missing, in one call, and
 * watches their liveness through pidfds, as the members of this node's; 0
 * if one is not on this machine or cannot be watched. */
int ucx_engine_watch_host(ucx_engine_t *e, ucx_peer_t **peers, int n);
void ucx_engine_progress(ucx_engine_t *e);
msr_status_t ucx_engine_wait(ucx_engine_t *e, ucx_req_t *r);
/* The same with e->lock already held. */
msr_status_t ucx_engine_wait_locked(ucx_engine_t *e, ucx_req_t *r);
void ucx_engine_orphan(ucx_engine_t *e, void *ucp_req);
void ucx_engine_bury(ucx_engine_t *e, void *mem);
void ucx_comm_fail(ucx_comm_t *uc, msr_status_t st, int culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* This member cannot take part in an operation it was called for (out of
 * memory for its request, its scratch or its arguments, UCX refusing):
 * breaks the communicator with st and why, and tells the other members at
 * once, whose operations then fail with st, naming this rank (not at their
 * deadline). Nothing for statuses that stay local (canceled, invalid
 * arguments, truncated) or a group of one. Lock held. */
void ucx_comm_give_up(ucx_comm_t *uc, msr_status_t st, const char *why);
/* Progresses UCX once and takes the abort notices that came (failing
 * uc's operations where one broke it); the communicator's status after.
 * For a step that cannot reach a member: whether a notice says why.
 * Lock held. */
msr_status_t ucx_comm_take_notices(ucx_comm_t *uc);
/* Tells the other members of a healthy communicator that this rank is done
 * with it, so that its exit afterwards does not break it for them. */
void ucx_comm_say_left(ucx_comm_t *uc);
/* Destroys a communicator that every member undoes at once (their
 * agreement said so): none is told, since none waits for it, and a member
 * whose own engine is gone already would not be reached. */
void ucx_comm_undo(msr_comm_t *comm);
/* comm_ucx.c: every member's status for one step, agreed over comm without
 * any buffer (a member out of memory still takes part): *worst_p the worst
 * status (MSR_OK when none failed) and *who_p the lowest rank that had it.
 * Collective; fails with the allreduce's errors. */
msr_status_t ucx_comm_agree(msr_comm_t *comm, msr_status_t mine, msr_status_t *worst_p, int *who_p);
/* comm_ucx.c: ucx_comm_agree that also agrees on the least of the members'
 * *min_io (in the same allreduce), when min_io is not NULL. */
msr_status_t ucx_comm_agree_min(msr_comm_t *comm, msr_status_t mine, int64_t *min_io,
                                msr_status_t *worst_p, int *who_p);
/* comm_ucx.c: (re)posts the receive of the members' notices. Lock held. */
msr_status_t ucx_post_abort_recv(ucx_comm_t *uc);
/* comm_ucx.c: a communicator of size members on engine e, whose reference
 * it takes over on success (on failure e stays the caller's). */
msr_status_t ucx_comm_make(msr_ctx_t *ctx, ucx_engine_t *e, unsigned id, int rank, int size,
                           const int *world_ranks, int64_t timeout_ms, msr_comm_t **comm_p);
void ucx_req_fail(ucx_req_t *r, msr_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A step returned st: ucx_req_fail with the step's own error (which names
 * the operation already), else "algo: status". */
void ucx_req_fail_step(ucx_req_t *r, msr_status_t st);
void ucx_req_done(ucx_req_t *r);

/* shm.c: a segment for comm's members when all are on this machine (of one or
 * several nodes), made collectively over comm (which must work). A segment
 * that cannot be made or mapped on some member leaves uc->shm NULL
 * everywhere (the UCX algorithms then serve, MSR_OK); a member out of memory
 * for its state fails every member alike (MSR_ERR_NO_MEMORY, the others
 * naming it), uc->shm NULL. */
msr_status_t ucx_shm_setup(ucx_comm_t *uc);
void ucx_shm_free(ucx_comm_t *uc);
/* shm_slots.c: the shared-memory allreduce (and barrier: count 0) as a step
 * function. */
msr_status_t ucx_shm_step(ucx_req_t *r);
/* coll.c: the slots' name for this operation of bytes per rank, or NULL
 * when another path serves it */
const char *ucx_slots_algo(const ucx_comm_t *uc, const msr_coll_args_t *a, size_t bytes);
/* shm_tiles.c: the tiled allreduce, reduce-scatter, allgather, broadcast and reduce:
 * scratch tells the bytes of r->scratch it needs, init counts the
 * operation's tiles (r->tiles.seq already numbered it), step runs it. */
size_t ucx_shm_tiled_scratch(const ucx_req_t *r);
void ucx_shm_tiled_init(ucx_req_t *r);
msr_status_t ucx_shm_tiled_step(ucx_req_t *r);

/* coll.c */
/* Chooses the algorithm of r->pub.args, fills in r's state and posts the
 * first messages. */
msr_status_t ucx_coll_start(ucx_req_t *r);
void ucx_tuning_read(ucx_tuning_t *t, int local_size);

/* ops helpers (coll_ops.c) */
void ucx_req_drop_ops(ucx_req_t *r);
void ucx_req_release_scratch(ucx_req_t *r);
/* for hier.c: a collective message to or from rank peer of r's group on
 * tag phase phase, posted into op; 1 once op is finished (r->err says how);
 * room for n ops; scratch */
msr_status_t ucx_op_send(ucx_req_t *r, ucx_op_t *op, int peer, const void *buf, size_t len,
                         unsigned phase);
msr_status_t ucx_op_recv(ucx_req_t *r, ucx_op_t *op, int peer, void *buf, size_t len,
                         unsigned phase);
int ucx_op_test(ucx_req_t *r, ucx_op_t *op);
msr_status_t ucx_ops_reserve(ucx_req_t *r, int n);
msr_status_t ucx_scratch_get(ucx_req_t *r, size_t len);
/* The shared-memory operations' number, counted on every member alike. */
uint64_t ucx_shm_number(ucx_comm_t *uc);

/* hier.c: a group over several nodes (and not every node one rank) gets a
 * node-local sub-group with its shared-memory segment; made collectively
 * over uc's group (which must work); any failure on any member leaves
 * uc->hier NULL everywhere (the flat algorithms then serve). */
msr_status_t ucx_hier_setup(ucx_comm_t *uc,
                            msr_status_t (*split)(msr_comm_t *comm, int color, int key,
                                                  unsigned flags, msr_comm_t **newcomm_p));
void ucx_hier_free(ucx_comm_t *uc);
/* Whether r's collective may run in two levels (uc->hier, the op, the
 * count); start fills in r (scratch, ops, the sub-operations) and numbers
 * its shared-memory steps; the step runs it; release frees hier_op. */
int ucx_hier_fits(const ucx_req_t *r);
/* The nodes a group with two levels spans (0 without them). */
int ucx_hier_nodes(const ucx_comm_t *uc);
msr_status_t ucx_hier_start(ucx_req_t *r);
msr_status_t ucx_hier_step(ucx_req_t *r);
void ucx_hier_release(ucx_req_t *r);

#endif
