/* A relay's side of a Relay call (docs/architecture.md, "Relays"): the
 * membership calls of a relay's nodes queued, sent to the coordinator as
 * one batch, and each node's answer handed back to it. The relay agent
 * wraps this with its server (its nodes call it as they would call the
 * coordinator); rdzv_scale drives it in-process to simulate a million
 * ranks within one machine's descriptors.
 *
 * Every function must be called from the thread that polls loop, where the
 * done callbacks run too. Private to msrun. */
#ifndef MSR_RENDEZVOUS_RELAY_H
#define MSR_RENDEZVOUS_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "base/map.h"
#include "msrun/base.h"
#include "rendezvous/rpc.h"

typedef struct msr_relay msr_relay_t;

/* A node's call answered: code 0 and its response's bytes (resp, len, valid
 * during the callback only), or a gRPC status code and why. */
typedef void (*msr_relay_done_t)(void *arg, int code, const char *message, const uint8_t *resp,
                                 size_t len);

/* A relay named relay_id (1..MSR_RELAY_ID_MAX bytes) serving subtree nodes
 * (1..MSR_RELAY_SUBTREE_MAX), whose batches go over up (a channel to the
 * coordinator, still the caller's) on loop. MSR_ERR_INVALID_ARG,
 * MSR_ERR_NO_MEMORY. */
msr_status_t msr_relay_create(msr_rpc_loop_t *loop, msr_rpc_channel_t *up, const char *relay_id,
                              uint32_t subtree, msr_relay_t **relay_p);

/* Queues a node's call (Join, Heartbeat, Report, Leave or Progress; req
 * packed now,
 * still the caller's). done(arg, ...) runs once: with the node's answer, or
 * with the batch's failure (UNAVAILABLE when the coordinator cannot be
 * reached: the node then calls the coordinator itself). MSR_ERR_INVALID_ARG
 * for another method, MSR_ERR_NO_MEMORY; done never runs then. */
msr_status_t msr_relay_submit(msr_relay_t *relay, msr_rpc_method_t method,
                              const ProtobufCMessage *req, msr_relay_done_t done, void *arg);

/* Sends what is queued, as batches of at most MSR_RELAY_BATCH_MAX calls
 * (Progress calls in batches of their own). A call whose batch cannot be started is answered at
 * once with UNAVAILABLE. */
void msr_relay_flush(msr_relay_t *relay);

/* The relay's id. */
const char *msr_relay_id(const msr_relay_t *relay);

/* Calls relayed and batches sent so far. */
void msr_relay_counts(const msr_relay_t *relay, uint64_t *calls_p, uint64_t *batches_p);

/* What the relay sent so far, for its last words: "N calls in M batches
 * (Join a, Heartbeat b, Report c, Leave d, Progress e)", into out (len
 * bytes, cut short to fit). */
void msr_relay_describe(const msr_relay_t *relay, char *out, size_t len);

/* Batches sent and not yet answered. */
size_t msr_relay_in_flight(const msr_relay_t *relay);

/* Answers what is queued CANCELLED and cancels the batches in flight
 * (their calls answered CANCELLED as they come back, on the loop). */
void msr_relay_cancel(msr_relay_t *relay);

/* Drops what is queued (its calls answered CANCELLED) and cancels the
 * batches in flight (their calls answered CANCELLED as they come back).
 * The relay is freed now when none is in flight, else when the last comes
 * back: keep polling the loop until then, as for any async call. NULL
 * does nothing. */
void msr_relay_destroy(msr_relay_t *relay);

/* As msr_relay_submit, for a call that came through levels relays below
 * this one (a relay of a lower level's batch: levels is its depth + 1);
 * the relay's batches carry the deepest of their calls' levels as their
 * depth. */
msr_status_t msr_relay_submit_from(msr_relay_t *relay, msr_rpc_method_t method,
                                   const ProtobufCMessage *req, uint32_t levels,
                                   msr_relay_done_t done, void *arg);

/* ---- a batch checked (the coordinator's and a higher relay's rules) ---- */

/* The reason msr_relay_batch_check gives when memory ran out. */
#define MSR_RELAY_NO_MEMORY "out of memory"

/* Whether a relay carries calls of method m (Join, Heartbeat, Report,
 * Leave and Progress). */
int msr_relay_method_relayed(msr_rpc_method_t m);

/* Whether a relay agent's server forwards calls of method m upstream one
 * by one, unbatched: the store's calls (Set, Get, Add, CompareSet,
 * Delete, Barrier, Allgather, Publish, Fetch, NumKeys), which may wait
 * long and are answered each on its own. */
int msr_relay_method_forwarded(msr_rpc_method_t m);

/* The node a relayed call is for, as a key: "id:<node id>", or for a first
 * Join "hp:<host> <pid>". */
void msr_relay_call_key(msr_rpc_method_t m, const ProtobufCMessage *req, char *key, size_t len);

/* Checks a batch as a whole: its relay id, 1..MSR_RELAY_BATCH_MAX calls,
 * no more calls than its subtree, a subtree of at most subtree_max nodes,
 * its calls crossing at most MSR_RELAY_LEVELS_MAX relays (its depth + 1,
 * plus levels_above: the relays still above the checker), relayed methods
 * only, Progress calls alone or none (a Progress call is answered at once,
 * which would end the long polls of heartbeats beside it), each call
 * unpacking (no NUL byte in a string) and one call per
 * node. Unpacks call k into reqs[k] (n_calls slots, NULL first; what was
 * unpacked is the caller's to free, whatever the result). 0, or -1 with
 * why filled (MSR_RELAY_NO_MEMORY when memory ran out). */
int msr_relay_batch_check(const Msr__RelayRequest *req, uint32_t subtree_max, uint32_t levels_above,
                          ProtobufCMessage **reqs, char *why, size_t wlen);

/* What a relay's (or the coordinator's) subtree holds: the relays under
 * it, each with the subtree it declared, laid end to end in the order they
 * first sent a batch, and the nodes it serves itself, one each: together
 * they must fit in its subtree (a relay's subtree counts the nodes below
 * its lower relays and its own). A lower relay counts from its first batch
 * until one of its Relay calls breaks (it died, or its link up did: a
 * replacement, under any id, then takes its place; a relay still alive
 * counts again with its next batch), or until its user drops it for want
 * of batches (the coordinator: no batch in flight and no alive node
 * through it; a relay's server: no batch in flight for 3 s); a node from its first call until
 * one of its calls fails or ends unanswered (it then calls elsewhere or is
 * gone). Used by one thread. */
typedef struct msr_relay_cover {
    msr_map_t lower;  /* "r:<relay id>" -> its subtree, "n:<node key>" -> 1, as uintptr_t */
    uint64_t covered; /* the sum of both */
    uint64_t nodes;   /* the nodes served directly, among covered */
} msr_relay_cover_t;

/* An empty cover. */
void msr_relay_cover_init(msr_relay_cover_t *cover);

/* Frees the cover's memory; it is empty again. */
void msr_relay_cover_cleanup(msr_relay_cover_t *cover);

/* Checks req (checked already by msr_relay_batch_check) against what
 * parent ("relay <id>" or "the coordinator", for messages) covers, whose
 * subtree has subtree nodes: req's relay, seen before or not, with its
 * subtree now, and the rest as recorded must cover at most subtree nodes
 * (a relay covering exactly parent's last node is accepted, one past is
 * not). Records req's relay's subtree on success. 0, or -1 with why filled
 * (naming both relays and the first node past parent's subtree;
 * MSR_RELAY_NO_MEMORY when memory ran out), the cover unchanged. */
int msr_relay_cover_check(msr_relay_cover_t *cover, const char *parent, uint32_t subtree,
                          const Msr__RelayRequest *req, char *why, size_t wlen);

/* The lower relay relay_id no longer counts (one of its Relay calls broke).
 * Nothing when it is not recorded. */
void msr_relay_cover_drop_relay(msr_relay_cover_t *cover, const char *relay_id);

/* Counts a node that parent serves itself, by its msr_relay_call_key: once
 * only, whatever its calls. 0 (recorded now or before), or -1 with why
 * filled when it would be one node past parent's subtree
 * (MSR_RELAY_NO_MEMORY when memory ran out), the cover unchanged. */
int msr_relay_cover_node(msr_relay_cover_t *cover, const char *parent, uint32_t subtree,
                         const char *node_key, char *why, size_t wlen);

/* The node of node_key no longer counts. Nothing when it is not recorded. */
void msr_relay_cover_drop_node(msr_relay_cover_t *cover, const char *node_key);

/* ---- the relay agent's server ---- */

/* A relay agent's server: its nodes call it as they would call the
 * coordinator (Join, Heartbeat, Report, Leave and Progress, with the job
 * token); each
 * call is queued on a relay (above) and answered with the coordinator's
 * answer to it. Relays of a lower level call it too (Relay): their batch
 * is checked as the coordinator would (msr_relay_batch_check, its subtree
 * at most this relay's), its calls queued with this relay's own, and it is
 * answered entry by entry once all its calls are. The nodes it serves
 * itself count against its subtree with its lower relays
 * (msr_relay_cover_node): a node past it is refused alone with
 * FAILED_PRECONDITION (it calls the coordinator). The store's calls
 * (msr_relay_method_forwarded) are sent upstream one by one over up, with
 * the node's deadline, and answered with the coordinator's answer
 * unchanged (its bytes, or its code and message), so the coordinator sees
 * the relay's one connection and not one per node; a node giving up
 * cancels its call upstream, and the server's stop answers those in
 * flight UNAVAILABLE (the node calls the coordinator); one past the
 * relay's bound on calls forwarded at once (msr_relay_server_limit) is
 * refused RESOURCE_EXHAUSTED. Barrier calls of the same generation, name,
 * count and wait that arrive within one poll (before a flush) go upstream
 * as one arrival of their weights together (relay_merge.c), each caller's
 * ids and weight as its part; a merged caller that gives up is taken back
 * upstream (BarrierRequest.withdraw); an arrival the coordinator answers
 * resend (a part released before) goes again one caller at a time, one
 * it answers over (past the count) goes again with the parts that fit,
 * the rest refused.
 * Other methods are refused with UNIMPLEMENTED. */
typedef struct msr_relay_server msr_relay_server_t;

/* Serves on address ("127.0.0.1:0"; *port_p gets the port) on loop, with
 * token, relaying to up (the caller's) as relay_id for subtree nodes.
 * MSR_ERR_ADDR_IN_USE, MSR_ERR_INVALID_ARG, MSR_ERR_NO_MEMORY. */
msr_status_t msr_relay_server_create(msr_rpc_loop_t *loop, const char *address, const char *token,
                                     msr_rpc_channel_t *up, const char *relay_id, uint32_t subtree,
                                     int *port_p, msr_relay_server_t **server_p);

/* The same over TLS when msr_rpc_tls_enabled(tls) (tls's cert and key
 * are the server's; with its ca, the nodes must show a certificate it
 * signed, as to the coordinator). tls NULL: plaintext. */
msr_status_t msr_relay_server_create_tls(msr_rpc_loop_t *loop, const char *address,
                                         const char *token, const msr_rpc_tls_t *tls,
                                         msr_rpc_channel_t *up, const char *relay_id,
                                         uint32_t subtree, int *port_p,
                                         msr_relay_server_t **server_p);

/* Sends the calls that arrived since the last flush as one batch: call it
 * after each poll of the loop (what arrives within one poll is batched). */
void msr_relay_server_flush(msr_relay_server_t *server);

/* The server's relay, for its counts. */
const msr_relay_t *msr_relay_server_relay(const msr_relay_server_t *server);

/* The store calls forwarded upstream and not yet answered (any thread). */
size_t msr_relay_server_forwarding(const msr_relay_server_t *server);

/* The relay's own bound on the store calls it forwards at once: past it
 * a node's store call is refused with RESOURCE_EXHAUSTED (naming the
 * bound), nothing sent upstream, as the coordinator refuses a call past
 * its bound of held calls. By default the coordinator's default bound per
 * client (MSR_HELD_CLIENT_CALLS_DEFAULT) per node of its subtree, at most
 * the coordinator's bound in total (MSR_HELD_CALLS_DEFAULT): what the
 * coordinator would hold for the relay's nodes. */
uint64_t msr_relay_forward_max_default(uint32_t subtree);

/* Sets that bound (0: the default for its subtree); any thread. Calls
 * forwarded already stay. */
void msr_relay_server_limit(msr_relay_server_t *server, uint64_t forward_max);

/* The store calls forwarded upstream so far (the loop's thread). */
uint64_t msr_relay_server_forwarded(const msr_relay_server_t *server);

/* The nodes' Barrier calls merged so far, the arrivals they went upstream
 * as, and the withdrawals of merged callers that gave up answered
 * upstream (any thread). */
/* The nodes' Add calls merged so far, and the merged calls they went
 * upstream as (relay_add.c). */
void msr_relay_server_adds(const msr_relay_server_t *server, uint64_t *calls_p, uint64_t *merged_p);
void msr_relay_server_merges(const msr_relay_server_t *server, uint64_t *calls_p,
                             uint64_t *arrivals_p, uint64_t *withdrawals_p);

/* The nodes' Publish calls of one generation and name that arrive within
 * one poll go upstream as one Publish of all their entries, at most
 * MSR_RELAY_PUBLISH_BYTES of the callers' requests packed (one larger
 * goes alone); answered OK, each caller hears OK; answered otherwise,
 * each sends its own call alone (relay_publish.c). The calls merged so
 * far, and the merged calls they went upstream as (any thread). */
#define MSR_RELAY_PUBLISH_BYTES (64u << 10)
void msr_relay_server_publishes(const msr_relay_server_t *server, uint64_t *calls_p,
                                uint64_t *merged_p);

/* Fetch answered from the subtree (relay_fetch.c): the entries of each
 * Publish this relay forwarded and the coordinator took are kept (the
 * newest generation's only); a Fetch of that generation whose every entry
 * is kept is answered here, the entries as published, and any other goes
 * upstream. A Set, CompareSet, Add or Delete of an entry's key
 * ("<name>/<index>") through this relay drops the entry. An entry written
 * by a call that does not pass through this relay (another relay's node,
 * a node calling the coordinator itself) is not seen: a name's entries
 * are taken to be written once a generation, as a communicator's
 * addresses are (a node's store proxy keeps its own entries so too). The
 * kept entries cost at most MSR_RELAY_FETCH_MAX_DEFAULT bytes (each its
 * key, "<generation>/<name>/<index>", and its value); past the bound an
 * entry is not kept. */
#define MSR_RELAY_FETCH_MAX_DEFAULT (64ull << 20)
/* Sets that bound in bytes (0: nothing is kept); any thread. Entries kept
 * already stay. */
void msr_relay_server_fetch_limit(msr_relay_server_t *server, uint64_t bytes);
/* The fetches answered here so far, and what the kept entries cost now
 * (any thread). */
void msr_relay_server_fetches(const msr_relay_server_t *server, uint64_t *answered_p,
                              uint64_t *bytes_p);

/* Stops serving: the nodes' calls still waiting are cancelled (the nodes
 * hear it and go to the coordinator), and the server freed. Polls the loop
 * itself. NULL does nothing. */
void msr_relay_server_destroy(msr_relay_server_t *server);

#endif
