/* The coordinator core's records; private to cluster/. */
#ifndef MSR_CLUSTER_COORD_INTERNAL_H
#define MSR_CLUSTER_COORD_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/heap.h"
#include "base/list.h"
#include "base/map.h"
#include "cluster/coord.h"

#define MSR_FAILURE_TAIL 32 /* stderr lines kept for the root cause */

typedef enum waiter_kind { W_GET, W_BARRIER, W_ALLGATHER, W_HEARTBEAT } waiter_kind_t;

/* A call the core holds until something happens or its deadline passes. */
typedef struct waiter {
    msr_timer_t timer; /* armed unless the wait has no deadline */
    waiter_kind_t kind;
    void *call;
    void *owner;     /* getwait_t, barrier_t, gather_t or node_t */
    msr_list_t link; /* in the owner's list (not for heartbeats) */
    int64_t wait_ms;
    uint32_t weight; /* barrier: the participants this call stands for */
    char what[240];  /* for the deadline message */
} waiter_t;

typedef struct kv {
    size_t len;
    uint8_t data[];
} kv_t;

/* Get-waits, barriers and allgathers live while a call waits on them: the
 * last waiter to leave (answered, expired or cancelled) takes the record
 * and what it contributed with it. Each is counted in the store's usage
 * under its name. */
typedef struct getwait {
    msr_list_t waiters;
    char key[]; /* as in the getwait map */
} getwait_t;

typedef struct barrier {
    uint32_t count, arrived;
    msr_list_t waiters;
    char name[];
} barrier_t;

typedef struct gather_entry {
    uint8_t *data;
    size_t len;
    int present;
    void *call; /* the call that gave it, to withdraw it when that call gives up */
} gather_entry_t;

typedef struct gather {
    uint32_t count, received;
    size_t bytes;
    gather_entry_t *entries;
    msr_list_t waiters;
    char name[];
} gather_t;

typedef struct failure {
    int set;
    int node_rank;
    char host[256];
    int rank, pid, exit_code, signal;
    double time;
    char *tail[MSR_FAILURE_TAIL];
    size_t ntail;
    int generation;
    char reason[128];
} failure_t;

typedef struct node {
    char id[32];
    char *host;
    int pid, local_worker_num, free_port;
    int wanted_rank;      /* -1: any */
    int rank;             /* node rank in the running generation, or -1 */
    int ready_generation; /* the generation it can start, -1 before any */
    int alive, left;
    uint64_t last_seen;
    uint64_t suspect_until; /* its connection broke: lost unless it calls by then */
    uint64_t joined_seq;    /* order of arrival */
    waiter_t *hb;           /* the held heartbeat, if any */
} node_t;

struct msr_coord {
    msr_coord_config_t config;
    msr_coord_responder_t responder;
    int configured;
    char *job_id;
    int worker_num, local_worker_num, node_count, max_restarts;
    int min_nodes, max_nodes; /* elastic range; 0 when the size is fixed */
    Msr__JobState state;
    int generation, restart_count;
    failure_t failure;
    char message[600];
    char master_addr[256];
    int master_port;
    node_t **nodes;
    size_t nnodes, cap;
    msr_map_t store, getwait, barriers, gathers;
    msr_store_limits_t limits; /* resolved from config.store_limits */
    msr_store_usage_t usage;   /* store, waited-on names and allgather contributions */
    msr_heap_t timers;
    uint64_t form_deadline, next_check;
    uint64_t last_call; /* elastic: form (or take in joiners) at this time */
    uint64_t join_seq;
    uint8_t *rank_done;
    int ndone;
    int dirty; /* what changed since the state file was written: 1 store or
                * liveness (written within MSR_PERSIST_DELAY_MS), 2 the job's
                * state, generation or membership (written and synced now) */
    uint64_t last_persist;
    uint64_t calls[MSR_RPC_METHOD_COUNT];
};

/* Changes of level 1 are written at most every this many milliseconds. */
#define MSR_PERSIST_DELAY_MS 10

#define MARK_DIRTY(c, level)      \
    do {                          \
        if ((c)->dirty < (level)) \
            (c)->dirty = (level); \
    } while (0)

/* Shared between coord.c and persist.c. */
void msr_coord_failure_to_msg(const failure_t *f, Msr__Failure *m);
void msr_coord_failure_from_msg(failure_t *f, const Msr__Failure *m);
msr_status_t msr_coord_settings_valid(msr_coord_t *c);
node_t *msr_coord_node_add(msr_coord_t *c, const char *host);

/* Writes the state file (fsync'ing it when sync); MSR_OK without one. */
msr_status_t msr_coord_persist_write(msr_coord_t *c, int sync);

/* Reads the state file into a freshly created core: MSR_ERR_NOT_FOUND when
 * there is none, MSR_ERR_CORRUPT when it cannot be read. */
msr_status_t msr_coord_persist_load(msr_coord_t *c);

#endif
