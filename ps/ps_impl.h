/* The parameter server's state and wire format, shared by the workers'
 * calls (ps.c) and the server's loop (ps_server.c). */
#ifndef MSR_PS_PS_IMPL_H
#define MSR_PS_PS_IMPL_H

#include <stdint.h>

#include "msrun/ps.h"

/* Messages on the parameter server's communicators (synchronous: a dup of
 * the caller's; asynchronous: the worker's and the server's pair). A
 * request is a ps_req_t on PS_TAG_REQ, then, when nkeys > 0, the keys
 * (i64) on PS_TAG_KEYS and for a push the gradients (f32, nkeys * width)
 * on PS_TAG_VALS. The answer is a ps_rep_t on PS_TAG_REP, then for a pull
 * with nkeys > 0 the rows (f32, nkeys * width) on PS_TAG_ROWS, sent also
 * when the request was refused (zeros) so that the worker can post every
 * receive before it sends. Messages of one peer and tag keep their order,
 * and a worker has one request per server in flight at a time. */
enum {
    PS_TAG_REQ = 1,
    PS_TAG_KEYS = 2,
    PS_TAG_VALS = 3,
    PS_TAG_REP = 4,
    PS_TAG_ROWS = 5,
};

typedef enum ps_op {
    PS_OP_PULL = 1,
    PS_OP_PUSH = 2,
    PS_OP_FIN = 3, /* the worker is done: the server answers and forgets it */
} ps_op_t;

typedef struct ps_req {
    int64_t op;    /* ps_op_t */
    int64_t table; /* the table's id */
    int64_t nkeys;
    int64_t width; /* the width the worker believes the table has */
    int64_t clock; /* the worker's pushes of this table before this request */
} ps_req_t;

#define PS_MSG_MAX        200
#define PS_NO_SLOT        UINT32_MAX
/* The most floats (keys x width) of one call: a server takes a request of
 * more for a broken peer, so a worker refuses it first. */
#define PS_CALL_ELEMS_MAX ((int64_t)(UINT32_MAX / 4))
typedef struct ps_rep {
    int64_t status;       /* msr_status_t */
    char msg[PS_MSG_MAX]; /* why, when status is an error */
} ps_rep_t;

/* One table: its configuration; on a server its shard and optimizer state
 * (local row i is row i * servers + server rank). */
typedef struct ps_table {
    msr_ps_table_config_t cfg;
    uint64_t local_rows; /* rows this server holds; 0 on workers */
    float *w;            /* (local_rows, width) the values */
    float *s1, *s2;      /* (local_rows, width) Adagrad's h in s1; Adam's m, v */
    uint32_t *steps;     /* (local_rows) Adam's per-row step count */
    uint64_t pushes;     /* workers: this worker's pushes of the table */
    /* servers */
    int64_t *clock; /* (workers) each worker's pushes received */
    int64_t *base;  /* (workers) a replacement's clock when it joined; 0 */
    /* the gradients summed this step, only for the rows pushed: a table of
     * many rows of which a step touches few keeps 4 bytes a row for it */
    uint32_t *slot;  /* (local_rows) a pushed row's slot in acc; PS_NO_SLOT: none */
    double *acc;     /* (cap, width) the summed gradients, a slot each */
    uint64_t *order; /* (cap) the local row of each slot, in the order first pushed */
    uint64_t ntouched, cap;
    int round_pushes; /* synchronous: pushes of the current step */
} ps_table_t;

/* A request a server holds: a synchronous push until its step is applied,
 * a pull until the staleness bound lets it through. */
typedef struct ps_held {
    int worker;
    ps_req_t req;
    int64_t *keys;       /* a pull's keys (owned) */
    msr_status_t status; /* a push's answer */
    char msg[PS_MSG_MAX];
} ps_held_t;

/* A server's loop state: a header receive per worker, held requests. */
typedef struct ps_loop {
    ps_req_t *hdr;         /* (workers) */
    msr_comm_req_t **recv; /* (workers) NULL: none posted */
    int *done;             /* (workers) said goodbye, or lost (asynchronous) */
    int ndone;
    ps_held_t *held;
    size_t nheld, cap;
} ps_loop_t;

struct msr_ps {
    /* synchronous: a duplicate of the caller's, every message on it;
     * asynchronous: NULL (the links carry everything) */
    msr_comm_t *comm;
    /* asynchronous: a communicator of two, on an engine of its own, with
     * each peer of the other role (on a worker, (servers) with its server
     * at rank 1; on a server, (workers) with its worker at rank 0), so that
     * a lost worker breaks only its own; synchronous: NULL */
    msr_comm_t **links;
    int nlinks;
    int rank, size;
    int workers, servers;
    int staleness; /* MSR_PS_SYNC or K >= 0 */
    msr_ps_role_t role;
    int role_rank;
    int serving;         /* a server in msr_ps_serve */
    msr_status_t broken; /* MSR_OK, or the failure that ended it */
    ps_table_t *tables;
    int ntables, cap;
    /* a failed server's receives still posted, finished by msr_ps_destroy
     * after the communicator (NULL: none) */
    ps_loop_t *left;
    uint64_t sent, received; /* msr_ps_traffic's bytes */
    /* msr_ps_join's (NULL: msr_ps_create's, which takes no replacement):
     * asynchronous servers pair with a replaced worker (ps_join.c) */
    msr_ctx_t *ctx;
    int64_t joins_seen;         /* servers: PS_JOINS_KEY when last looked at */
    int64_t *join_seen;         /* servers: (workers) each one's joins taken */
    uint64_t join_poll_at;      /* servers: when to look again (msr_now_ns) */
    int join_warned;            /* servers: a failed look was said */
    struct ps_durable *durable; /* msr_ps_durable's state; NULL: none */
};

/* The communicator on which this rank talks to other (a server's index on
 * a worker, a worker's on a server), and the other's rank in it. */
static inline msr_comm_t *ps_link(const msr_ps_t *ps, int other, int *peer_p)
{
    if (ps->links) {
        *peer_p = ps->role == MSR_PS_WORKER ? 1 : 0;
        return ps->links[other];
    }
    *peer_p = ps->role == MSR_PS_WORKER ? ps->workers + other : other;
    return ps->comm;
}

/* ps_server.c: one table's shard and state for a server; MSR_ERR_NO_MEMORY. */
msr_status_t ps_table_alloc_shard(msr_ps_t *ps, ps_table_t *t);
/* Frees what ps_table_alloc_shard allocated. */
void ps_table_free_shard(ps_table_t *t);
/* Applies one asynchronous push at once (the server's path, and the
 * log's replay); MSR_ERR_NO_MEMORY. */
msr_status_t ps_apply_push(msr_ps_t *ps, ps_table_t *t, const int64_t *keys, const float *g,
                           int64_t n);
/* Applies a synchronous step's logged gradients: sums (n, width) of
 * distinct keys, divided by divisor (the log's replay); MSR_ERR_NO_MEMORY. */
msr_status_t ps_apply_sums(msr_ps_t *ps, ps_table_t *t, const int64_t *keys, const double *sums,
                           int64_t n, int divisor);
/* ps_durable.c: appends an asynchronous push to the log; MSR_ERR_IO. */
msr_status_t ps_durable_log(msr_ps_t *ps, const ps_req_t *req, const int64_t *keys, const float *g);
/* Appends table ti's synchronous step, its gradients summed over divisor
 * pushes (before apply_step clears them), to the log; MSR_ERR_IO. */
msr_status_t ps_durable_log_step(msr_ps_t *ps, int ti, int divisor);
/* Checkpoints the shard when ckpt_every updates were logged since the last
 * checkpoint (after the update is applied); MSR_ERR_IO. */
msr_status_t ps_durable_ckpt_due(msr_ps_t *ps);
/* Closes the log and frees the state. */
void ps_durable_free(msr_ps_t *ps);
/* Frees a loop's buffers and held requests (its receives finished). */
void ps_loop_free(ps_loop_t *l);
/* Asynchronous: worker gone without its goodbye is taken as left (its
 * receive, failed, freed), and the held pulls it bounded released. */
msr_status_t ps_on_lost(msr_ps_t *ps, ps_loop_t *l, int worker);
/* ps.c: servers (0: MSR_PS_SERVERS) and staleness (MSR_PS_STALENESS_ENV:
 * MSR_PS_STALENESS) resolved and checked for a job of size ranks; what
 * is the caller's name in messages. MSR_ERR_INVALID_ARG. */
msr_status_t ps_resolve_mode(const char *what, int size, int *servers_p, int *staleness_p);
/* ps.c: a member's state of a parameter server over size ranks (the last
 * servers of them the servers), asynchronous with its links array made
 * (empty); NULL: no memory. */
msr_ps_t *ps_new(int rank, int size, int servers, int staleness);
/* ps_join.c: a server's look at the replaced workers waiting to join
 * (every PS_JOIN_POLL_MS); pairs with each whose old one it took as lost. */
msr_status_t ps_take_joins(msr_ps_t *ps, ps_loop_t *l);

#endif
