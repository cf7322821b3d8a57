/* The store proxy's insides, shared by its server side (proxy.c: the
 * workers' calls, beats, the thread) and its upstream side (proxy_up.c:
 * forwarding, retries, a node's barrier and allgather groups). The proxy's
 * thread only. */
#ifndef MSR_MSRUN_PROXY_IMPL_H
#define MSR_MSRUN_PROXY_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/heap.h"
#include "base/list.h"
#include "base/map.h"
#include "launcher/history.h"
#include "launcher/proxy.h"
#include "rendezvous/held.h"
#include "rendezvous/progress.h"
#include "rendezvous/rpc.h"
#include "rendezvous/wchan.h"

/* A node's participants of one barrier or allgather, collected until all
 * local_count of them are here, then sent upstream as one call. */
typedef struct group {
    msr_proxy_t *proxy;
    char key[MSR_KEY_MAX + 48];
    msr_rpc_method_t method;
    int generation;
    uint32_t count, local_count;
    uint32_t arrived; /* participants (barrier weights, allgather entries) */
    msr_rpc_call_t **calls;
    ProtobufCMessage **reqs; /* the calls' requests, alive while held */
    uint32_t ncalls;
    msr_timer_t timer;
    int sent;
    uint64_t request_id; /* a Publish group's, for its retries */
    char name[MSR_KEY_MAX + 1];
} group_t;

/* One upstream call, answering one worker's call or a whole group. */
typedef struct fwd {
    msr_rpc_async_t async;
    msr_proxy_t *proxy;
    msr_rpc_call_t *call;  /* a single forward; NULL once its client is gone */
    ProtobufCMessage *req; /* its request (the call's, alive while held) */
    group_t *group;        /* or a group */
    uint64_t deadline;
    int via_relay;     /* its last attempt went to the node's relay */
    msr_timer_t retry; /* armed while waiting to send again */
    msr_list_t link;
} fwd_t;

typedef struct fetch_wait fetch_wait_t; /* proxy_fetch.c */

/* What the proxy knows about a held worker call (msr_rpc_call_set_data). */
typedef struct held {
    fwd_t *fwd;          /* forwarded alone */
    group_t *group;      /* or waiting in a group */
    fetch_wait_t *fetch; /* or a Fetch waiting for entries */
    msr_proxy_t *proxy;  /* charged to */
    uint64_t bytes;      /* its charge: what it keeps (msr_proxy_held_new) */
} held_t;

struct msr_proxy {
    msr_rpc_loop_t *loop;
    msr_rpc_server_t *server;
    msr_rpc_channel_t *up;   /* read through msr_proxy_up (the agent may retarget it) */
    msr_rpc_channel_t **old; /* replaced upstream channels, freed at the stop */
    int nold;
    pthread_mutex_t up_lock;
    char *token;
    msr_rpc_tls_t tls;      /* strings owned by the caller's options */
    uint32_t local_workers; /* the most participants a node's group may have */
    char socket_path[256];
    pthread_t thread;
    atomic_int stop;
    pthread_mutex_t stop_lock; /* held while another thread starts the shutdown */
    msr_map_t groups;
    msr_heap_t timers;  /* groups' deadlines */
    msr_heap_t retries; /* upstream calls to send again */
    msr_list_t fwds;    /* upstream calls in flight */
    pthread_mutex_t beats_lock;
    struct beat_entry {
        int rank, pid;
        msr_beat_info_t info;
    } * beats;
    size_t nbeats, beats_cap;
    _Atomic uint64_t calls_in, calls_up;
    /* ids for store writes that come without (the proxy thread's only):
     * retries upstream then apply them once too */
    uint64_t client_id, request_seq;
    /* Progress reports (docs/observe.md): the workers' (proxy thread) and
     * the agent's metric lines (agent thread) gathered under progress_lock,
     * sent upstream as one call per MSR_PROXY_PROGRESS_MS. */
    pthread_mutex_t progress_lock;
    msr_progress_batch_t progress;
    msr_history_t *history; /* the run's history (history.h), under progress_lock; NULL: none */
    char node_id[64];       /* "" until msr_proxy_set_member */
    int node_rank, generation;
    uint64_t progress_next; /* the next send (proxy thread) */
    uint64_t progress_last; /* the last send */
    struct progress_up {
        msr_rpc_async_t async;
        msr_proxy_t *proxy;
        int busy;      /* in flight */
        int via_relay; /* sent to the node's relay */
        uint8_t *sent; /* its request, packed, while it goes through the relay */
        size_t sent_len;
        uint8_t *again; /* a request the relay did not answer: the next send */
        size_t again_len;
    } progress_up;
    /* The node's relay (--relay, --relays): progress and the workers'
     * store calls go there until one of its calls finds it gone, then to
     * the coordinator (as joins do). relay is set under up_lock;
     * relay_failed is the proxy thread's. */
    msr_rpc_channel_t *relay;
    int relay_failed;
    struct named {
        int generation, rank;
    } named[256]; /* stragglers shown */
    size_t nnamed;
    /* Fetches (proxy_fetch.c): values fetched, by "generation/name/index"
     * (msr_store_value_t); the entries on their way upstream (the same
     * keys); the workers' fetches that wait, the upstream ones in flight. */
    msr_map_t fetch_cache, fetch_inflight;
    msr_list_t fetch_waits, fetch_ups;
    int fetch_generation;
    _Atomic uint64_t fetch_hits, fetch_up_calls;
    /* The workers' calls held here (answered later than they came) and
     * the bytes they keep, bounded as one client of the coordinator is
     * (held_limits' client_calls and client_bytes): the node's workers are
     * that client. The proxy thread's. */
    msr_held_limits_t held_limits;
    uint64_t held_calls, held_bytes;
    /* The worker channel (proxy_wchan.c): its server, and the channel on
     * which its calls are made to this proxy's own gRPC socket. */
    msr_wchan_server_t *wchan;
    msr_rpc_channel_t *self;
};

/* The most entries a worker's Fetch may ask the proxy for. */
#define MSR_PROXY_FETCH_MAX 65536

/* How often a node sends its workers' progress upstream, and how often node
 * 0 asks for stragglers when it has nothing to send. */
#define MSR_PROXY_PROGRESS_MS      1000
#define MSR_PROXY_PROGRESS_POLL_MS 2000

/* proxy.c: the upstream channel (any thread). */
msr_rpc_channel_t *msr_proxy_up(msr_proxy_t *p);

/* proxy_up.c */
/* The channel a store call goes on: the node's relay while it answers
 * (*via_relay_p 1), else upstream. */
msr_rpc_channel_t *msr_proxy_store_channel(msr_proxy_t *p, int *via_relay_p);
/* Whether a's failure, on a call sent to the node's relay (via_relay),
 * says the relay is gone, shutting down, cut off from the coordinator or
 * does not forward the method: the relay is then given up for good (said
 * once) and 1 returned, for the call to be sent upstream again. */
int msr_proxy_relay_gave_up(msr_proxy_t *p, int via_relay, const msr_rpc_async_t *a);
void msr_proxy_stamp_request(msr_proxy_t *p, msr_rpc_method_t method, ProtobufCMessage *req);
/* A worker's call held here, charged one call and keeps bytes (what it
 * keeps beyond its record: its request, copies) plus its record and
 * MSR_HELD_CALL_OVERHEAD to the node's bound. A call of method that may
 * wait (anything but a write) is refused RESOURCE_EXHAUSTED past the
 * bound; a write is charged but never refused (it does not wait for
 * others). NULL when refused or out of memory: the call has been failed.
 * msr_proxy_held_free gives the charge back. */
held_t *msr_proxy_held_new(msr_proxy_t *p, msr_rpc_call_t *call, msr_rpc_method_t method,
                           uint64_t keeps);
/* What a worker's request keeps while its call is held: its unpacked
 * fields, at most about four times its wire size (a one-byte varint
 * unpacks to four bytes). */
uint64_t msr_proxy_request_keeps(const ProtobufCMessage *req);
void msr_proxy_held_free(msr_rpc_call_t *call);
void msr_proxy_group_free(msr_proxy_t *p, group_t *g);
int msr_proxy_fwd_wanted(const fwd_t *f);
void msr_proxy_fwd_finish(fwd_t *f);
msr_status_t msr_proxy_fwd_start(fwd_t *f);
msr_status_t msr_proxy_send_up(msr_proxy_t *p, msr_rpc_method_t method, ProtobufCMessage *req,
                               uint64_t deadline, msr_rpc_call_t *call, group_t *group);
void msr_proxy_group_add(msr_proxy_t *p, msr_rpc_call_t *call, msr_rpc_method_t method,
                         ProtobufCMessage *req, int generation, const char *name, uint32_t count,
                         uint32_t local_count, uint32_t weight, uint32_t wait_ms);
void msr_proxy_group_expired(msr_proxy_t *p, group_t *g);

/* proxy_wchan.c: the worker channel on socket_path + MSR_WCHAN_SUFFIX,
 * served once the gRPC server listens; stopped before it (the calls in
 * flight are cancelled). */
msr_status_t msr_proxy_wchan_start(msr_proxy_t *p, const char *token);
void msr_proxy_wchan_stop(msr_proxy_t *p);

/* proxy_fetch.c: a worker's Fetch, answered from the cache or held until
 * the entries it misses come from upstream; the end of a waiting one; the
 * upstream fetches cancelled at the stop; the cache freed. */
void msr_proxy_fetch(msr_proxy_t *p, msr_rpc_call_t *call, const Msr__FetchRequest *r);
/* Entries of this node's workers that the coordinator took (an answered
 * Publish): a fetch of them is answered here, as the node's own
 * addresses are what every communicator's members fetch first. */
void msr_proxy_fetch_published(msr_proxy_t *p, const Msr__PublishRequest *r);
void msr_proxy_fetch_wait_free(fetch_wait_t *w);
void msr_proxy_fetch_shutdown(msr_proxy_t *p);
void msr_proxy_fetch_cleanup(msr_proxy_t *p);

#endif
