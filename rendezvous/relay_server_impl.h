/* The relay agent's server inside (relay_server.c, relay_merge.c,
 * relay_add.c, relay_group.c): private to those. */
#ifndef MSR_RENDEZVOUS_RELAY_SERVER_IMPL_H
#define MSR_RENDEZVOUS_RELAY_SERVER_IMPL_H

#include <stdatomic.h>

#include "base/list.h"
#include "base/map.h"
#include "rendezvous/relay.h"

struct msr_relay_server {
    msr_rpc_loop_t *loop;
    msr_rpc_server_t *rpc;
    msr_relay_t *relay;
    msr_rpc_channel_t *up;        /* the relay's one connection upstream (the caller's) */
    msr_list_t forwards;          /* store calls forwarded and not yet answered */
    atomic_size_t nforwards;      /* how many: read by any thread */
    _Atomic uint64_t forward_max; /* the most forwarded at once (set by any thread) */
    uint64_t forwarded;           /* store calls forwarded so far (the loop's thread) */
    uint32_t subtree;
    msr_relay_cover_t cover;            /* the relays under this one and the nodes it serves */
    msr_map_t lower_use;                /* lower relay id -> lower_use_t (relay_server.c) */
    msr_list_t merges;                  /* merged barriers: open (not sent yet) or in flight */
    msr_map_t open;                     /* the open ones by merge_key */
    msr_list_t withdraws;               /* withdrawals of merged callers in flight */
    msr_list_t adds;                    /* merged adds: open (not sent yet) or in flight */
    msr_map_t open_adds;                /* the open ones by generation and key */
    _Atomic uint64_t add_counts[2];     /* adds merged, merged calls sent (any thread) */
    msr_list_t publishes;               /* merged publishes: open (not sent yet) or in flight */
    msr_map_t open_publishes;           /* the open ones by generation and name */
    _Atomic uint64_t publish_counts[2]; /* publishes merged, merged calls sent (any thread) */
    _Atomic uint64_t merge_counts[3];   /* msr_relay_server_merges' counts (any thread) */
    msr_map_t fetch_cache;              /* relay_fetch.c: "gen/name/index" -> its entry */
    int32_t fetch_generation;           /* the generation whose entries are kept */
    int fetch_generation_set;           /* one was seen */
    _Atomic uint64_t fetch_bytes;       /* what the kept entries cost (keys and values) */
    _Atomic uint64_t fetch_max;         /* the most they may cost (set by any thread) */
    _Atomic uint64_t fetch_answered;    /* fetches answered here */
    int stopping;                       /* destroy began: calls still dispatched are refused */
    char me[MSR_RELAY_ID_MAX + 8];      /* "relay <id>", for messages */
};

/* A node's call being relayed; call is NULL once the node gave up. The
 * first member of every call's data (on_cancel clears it). */
typedef struct node_call {
    msr_rpc_call_t *call;
    msr_relay_server_t *server; /* NULL in a lower relay's batch (head) */
    msr_rpc_method_t method;
    int merged;    /* 1: a Barrier in a merge (merged_t); 2: an Add in one; 3: a Publish */
    char key[256]; /* the node's msr_relay_call_key */
} node_call_t;

/* ---- a group of nodes' calls merged into one upstream (relay_group.c) ---- */

/* What a merged Barrier (relay_merge.c) and a merged Add (relay_add.c)
 * share: the first member of each. Its members' data begin with their
 * node_call_t. */
typedef struct msr_relay_group {
    msr_list_t link; /* in its server's list of merges */
    msr_relay_server_t *server;
    msr_map_t *open;       /* the server's map of the open ones */
    msr_rpc_async_t async; /* the merged call upstream, once sent */
    int sent;
    int32_t generation;
    uint64_t deadline; /* its callers' latest */
    size_t n, live, cap;
    node_call_t **members;
    char okey[320]; /* in *open while open ("": closed) */
} msr_relay_group_t;

/* Fills a zeroed group and opens it under okey in open, at the end of
 * list; not MSR_OK when the map cannot take it. */
msr_status_t msr_relay_group_init(msr_relay_group_t *g, msr_relay_server_t *s, msr_map_t *open,
                                  msr_list_t *list, int32_t generation, const char *okey);
/* Closed: no more callers join it. */
void msr_relay_group_close(msr_relay_group_t *g);
/* Off its list and freed with its members (g is the start of the block). */
void msr_relay_group_free(msr_relay_group_t *g);
/* Room for one more member: 1, or 0 out of memory. */
int msr_relay_group_grow(msr_relay_group_t *g);
/* A node's call joins it (after msr_relay_group_grow). */
void msr_relay_group_push(msr_relay_group_t *g, node_call_t *nc);
/* A member's answer is due: its call to answer, or NULL when its node gave
 * up or it was answered here (the server stopping). */
msr_rpc_call_t *msr_relay_group_answer(msr_relay_group_t *g, node_call_t *nc,
                                       const msr_rpc_async_t *a);
/* A member's node gave up: its answer will be dropped, and when the group
 * was not sent yet (unsent: the group) it is left out of it. */
void msr_relay_group_gave_up(msr_relay_server_t *s, node_call_t *nc, msr_relay_group_t *unsent);
/* Its callers still waiting failed with code, then freed. */
void msr_relay_group_fail(msr_relay_group_t *g, int code, const char *why);
/* Sends the merged call req upstream (sent counted in *nsent). */
msr_status_t msr_relay_group_start(msr_relay_group_t *g, msr_rpc_method_t method,
                                   void (*done)(msr_rpc_async_t *), _Atomic uint64_t *nsent,
                                   const ProtobufCMessage *req);
/* Each open group of list sent with send. */
void msr_relay_groups_flush(msr_list_t *list, void (*send)(msr_relay_group_t *));
/* The server stops: open groups of list answered UNAVAILABLE, those in
 * flight cancelled (their done answers their callers). */
void msr_relay_groups_stop(msr_list_t *list);

/* ---- a node's Barrier calls merged (relay_merge.c) ---- */

/* Adds a node's Barrier to the open merge of its kind (sent at the next
 * msr_relay_merges_flush): 1, or 0 when it must be forwarded alone (a
 * lower relay's merged call or withdrawal, a name too long to key, out of
 * memory). */
int msr_relay_merge_add(msr_relay_server_t *s, msr_rpc_call_t *call,
                        const Msr__BarrierRequest *req);
/* The node of a merged call (nc->merged) gave up. */
void msr_relay_merged_gave_up(msr_relay_server_t *s, node_call_t *nc);
/* Sends the open merges upstream, one arrival each. */
void msr_relay_merges_flush(msr_relay_server_t *s);
/* The server stops: open merges answered UNAVAILABLE, those in flight and
 * the withdrawals cancelled. */
void msr_relay_merges_stop(msr_relay_server_t *s);

/* ---- a node's Add calls merged (relay_add.c) ---- */

/* Adds a node's Add to the open merge of its key: 1, or 0 when it must be
 * forwarded alone (no request id, a lower relay's merged add, a key too
 * long, out of memory). */
int msr_relay_add_merge(msr_relay_server_t *s, msr_rpc_call_t *call, const Msr__AddRequest *req);
/* The node of a merged Add (nc->merged == 2) gave up. */
void msr_relay_add_gave_up(msr_relay_server_t *s, node_call_t *nc);
/* Sends the open merged adds upstream, one call per key. */
void msr_relay_adds_flush(msr_relay_server_t *s);
/* The server stops: open merged adds answered UNAVAILABLE, those in
 * flight cancelled. */
void msr_relay_adds_stop(msr_relay_server_t *s);
/* ---- a node's Publish calls merged (relay_publish.c) ---- */

/* Adds a node's Publish to the open merge of its generation and name: 1,
 * or 0 when it must be forwarded alone (a proxy's call with local_count,
 * no entries, larger than MSR_RELAY_PUBLISH_BYTES, a name too long to
 * key, out of memory). */
int msr_relay_publish_merge(msr_relay_server_t *s, msr_rpc_call_t *call,
                            const Msr__PublishRequest *req);
/* The node of a merged Publish (nc->merged == 3) gave up. */
void msr_relay_publish_gave_up(msr_relay_server_t *s, node_call_t *nc);
/* Sends the open merged publishes upstream, one call each. */
void msr_relay_publishes_flush(msr_relay_server_t *s);
/* The server stops: open merged publishes answered UNAVAILABLE, those in
 * flight cancelled. */
void msr_relay_publishes_stop(msr_relay_server_t *s);

/* ---- a node's Fetch answered from the subtree's entries (relay_fetch.c) ---- */

/* The entries of r, a Publish the coordinator answered OK, kept. */
void msr_relay_fetch_published(msr_relay_server_t *s, const Msr__PublishRequest *r);
/* r is forwarded: its entries, if kept, are dropped until it is taken (a
 * Publish refused midway may have written some). */
void msr_relay_fetch_publishing(msr_relay_server_t *s, const Msr__PublishRequest *r);
/* A write of key (Set, CompareSet, Add, Delete) passes: the entry it
 * names ("<name>/<index>"), if kept, is dropped. */
void msr_relay_fetch_written(msr_relay_server_t *s, int32_t generation, const char *key);
/* Answers r from the kept entries when every one is kept: 1, else 0 (it
 * goes upstream). */
int msr_relay_fetch_answer(msr_relay_server_t *s, msr_rpc_call_t *call, const Msr__FetchRequest *r);
/* Frees the kept entries. */
void msr_relay_fetch_cleanup(msr_relay_server_t *s);

/* A node's store call sent upstream alone (relay_server.c). */
void msr_relay_forward_alone(msr_relay_server_t *s, msr_rpc_call_t *call, msr_rpc_method_t method,
                             const ProtobufCMessage *req);

#endif
