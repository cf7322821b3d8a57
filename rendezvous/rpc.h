/* gRPC C core and protobuf-c glue: a completion-queue loop and the methods'
 * messages (rpc.c), a server whose calls are answered whenever the owner
 * likes, long polls holding no thread (rpc_server.c), and synchronous and
 * asynchronous unary client calls (rpc_client.c). Private to msrun. */
#ifndef MSR_RENDEZVOUS_RPC_H
#define MSR_RENDEZVOUS_RPC_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "msrun/base.h"
#include "rendezvous/msrun.pb-c.h"

/* Raised whenever a change to msrun.proto would be misread by an older peer,
 * or asks it for a method it lacks (gRPC leaves a call of a method the
 * server does not know unanswered until its deadline): a coordinator
 * refuses to join a node of another version. 2: Store.NumKeys. */
#define MSR_PROTOCOL_VERSION 2

/* gRPC metadata key that carries the job token on every call (but Auth). */
#define MSR_TOKEN_METADATA "msr-token"

/* Most bytes one store key may have (keys may not contain NUL or be empty). */
#define MSR_KEY_MAX 1024

/* The default limit on one message a server receives: a store value of
 * 64 MiB plus room for its key and framing. */
#define MSR_RPC_MAX_MESSAGE_DEFAULT ((size_t)64 * 1024 * 1024 + 64 * 1024)

/* The most bytes a request of a method that carries no store value (Join,
 * Heartbeat, Report, Leave, Status, Get, Add, Delete, Barrier, Beat) may
 * have. */
#define MSR_RPC_SMALL_REQUEST_MAX ((size_t)64 * 1024)

/* gRPC's status codes (fixed by the gRPC specification), for the modules
 * that answer calls without including gRPC's headers. */
typedef enum msr_rpc_code {
    MSR_RPC_OK = 0,
    MSR_RPC_CANCELLED = 1,
    MSR_RPC_INVALID_ARGUMENT = 3,
    MSR_RPC_DEADLINE_EXCEEDED = 4,
    MSR_RPC_NOT_FOUND = 5,
    MSR_RPC_ALREADY_EXISTS = 6,
    MSR_RPC_PERMISSION_DENIED = 7,
    MSR_RPC_RESOURCE_EXHAUSTED = 8,
    MSR_RPC_FAILED_PRECONDITION = 9,
    MSR_RPC_ABORTED = 10,
    MSR_RPC_OUT_OF_RANGE = 11,
    MSR_RPC_UNIMPLEMENTED = 12,
    MSR_RPC_INTERNAL = 13,
    MSR_RPC_UNAVAILABLE = 14,
    MSR_RPC_UNAUTHENTICATED = 16,
} msr_rpc_code_t;

typedef enum msr_rpc_method {
    MSR_RPC_JOIN,
    MSR_RPC_HEARTBEAT,
    MSR_RPC_REPORT,
    MSR_RPC_LEAVE,
    MSR_RPC_STATUS,
    MSR_RPC_SET,
    MSR_RPC_GET,
    MSR_RPC_ADD,
    MSR_RPC_COMPARE_SET,
    MSR_RPC_DELETE,
    MSR_RPC_BARRIER,
    MSR_RPC_ALLGATHER,
    MSR_RPC_BEAT,     /* served by a node's msrun, never by the coordinator */
    MSR_RPC_AUTH,     /* a munge credential for the job token: served without the token */
    MSR_RPC_PROGRESS, /* progress reports: a worker's to its node, a node's to the coordinator */
    MSR_RPC_PUBLISH,  /* values published under (name, index) ... */
    MSR_RPC_FETCH,    /* ... and fetched by index when first needed */
    MSR_RPC_RELAY,    /* a relay's batch of its subtree's membership calls */
    MSR_RPC_NUM_KEYS, /* the store's key count (protocol version 2) */
    MSR_RPC_METHOD_COUNT
} msr_rpc_method_t;

typedef struct msr_rpc_method_info {
    const char *path; /* "/msr.Store/Get" */
    const char *name; /* "Get" */
    const ProtobufCMessageDescriptor *request;
    const ProtobufCMessageDescriptor *response;
} msr_rpc_method_info_t;

extern const msr_rpc_method_info_t msr_rpc_methods[MSR_RPC_METHOD_COUNT];

/* protobuf-c allocations go through msr_malloc (failure injection works). */
extern ProtobufCAllocator msr_rpc_pb_allocator;

/* Frees a message unpacked by this layer; NULL does nothing. */
void msr_rpc_message_free(ProtobufCMessage *msg);

/* Unpacks bytes as a request of method; NULL when malformed or out of memory. */
ProtobufCMessage *msr_rpc_request_unpack(msr_rpc_method_t method, const uint8_t *data, size_t len);

/* Unpacks bytes as a response of method (a relay's answer to one of its
 * entries); NULL when malformed or out of memory. */
ProtobufCMessage *msr_rpc_response_unpack(msr_rpc_method_t method, const uint8_t *data, size_t len);

/* As msr_rpc_request_unpack, for bytes a peer sent: NULL with
 * *nul_field_p the field's name when a string field holds a NUL byte (C
 * would read it cut short), NULL with *nul_field_p NULL when malformed or
 * out of memory. */
ProtobufCMessage *msr_rpc_request_unpack_checked(msr_rpc_method_t method, const uint8_t *data,
                                                 size_t len, const char **nul_field_p);

/* A relay's batch (RelayRequest): at most this many calls, and a subtree
 * of at most this many nodes (docs/architecture.md, "Relays"). */
#define MSR_RELAY_BATCH_MAX   1024
#define MSR_RELAY_SUBTREE_MAX 1048576
/* The most bytes of a relay's id (RelayRequest.relay_id). */
#define MSR_RELAY_ID_MAX      64
/* The most relays a node's call crosses on its way to the coordinator (a
 * tree of relays of this depth; RelayRequest.depth is below it). */
#define MSR_RELAY_LEVELS_MAX  4

/* Whether key is a valid store key (1..MSR_KEY_MAX bytes, no control chars). */
int msr_rpc_key_valid(const char *key);

/* The name of the first string field of a message of type desc in the
 * wire bytes p (len), nested messages too (depth levels deep at most), whose
 * bytes hold a NUL; NULL when none does or the bytes are malformed. */
const char *msr_rpc_pb_nul_field(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                                 size_t len, int depth);

/* Maps a gRPC status code (grpc_status_code) to msrun's status. */
msr_status_t msr_rpc_status_from_grpc(int code);

/* Reference-counted gRPC library initialisation; every create below takes one
 * reference and its destroy drops it. Thread-safe. */
/* The first ref also starts a thread of this name that measures the
 * CPU's frequency for abseil, once, so that gRPC's shutdown does not
 * (rpc.c); it ends when done. */
#define MSR_RPC_FREQ_THREAD "msr-cpufreq"
void msr_rpc_library_ref(void);
void msr_rpc_library_unref(void);

/* ---- the completion-queue loop ---- */

/* Every tag queued on a loop is an operation whose done() runs on the thread
 * that polls the loop, with ok as gRPC reported it. */
typedef struct msr_rpc_op {
    void (*done)(struct msr_rpc_op *op, int ok);
} msr_rpc_op_t;

typedef struct msr_rpc_loop msr_rpc_loop_t;

msr_status_t msr_rpc_loop_create(msr_rpc_loop_t **loop_p);

/* Waits until one completion arrives or the deadline (msr_now_ns units)
 * passes, and dispatches it; deadline 0 does not wait at all. Returns 1 when an event was handled,
 * 0 on timeout, -1 once the loop has shut down. Call from one thread at a time. */
int msr_rpc_loop_poll(msr_rpc_loop_t *loop, uint64_t deadline);

/* Shuts the queue down from any thread: msr_rpc_loop_poll returns -1 once
 * what is queued has been dispatched. No new work may be added after. */
void msr_rpc_loop_shutdown(msr_rpc_loop_t *loop);

/* Shuts the queue down, drains it and frees the loop. Servers created on it
 * must be destroyed and async calls finished first. */
void msr_rpc_loop_destroy(msr_rpc_loop_t *loop);

/* ---- the server ---- */

typedef struct msr_rpc_server msr_rpc_server_t;
typedef struct msr_rpc_call msr_rpc_call_t;

/* TLS for gRPC connections: paths of PEM files. A server encrypts when cert
 * and key are given, and with ca also asks every client for a certificate
 * signed by it (mutual TLS). A client encrypts when ca or cert is given:
 * it verifies the server's certificate against ca (the system's roots when
 * NULL) and the name server_name (the host part of the target when NULL),
 * and shows cert and key when the server asks for them. The strings are
 * read at create time only. */
typedef struct msr_rpc_tls {
    const char *cert;
    const char *key;
    const char *ca;
    const char *server_name;
} msr_rpc_tls_t;

/* Whether tls asks for TLS at all (any of cert, key, ca given). */
int msr_rpc_tls_enabled(const msr_rpc_tls_t *tls);

/* Called on the polling thread for every call whose token matched (or whose
 * method is one of the config's tokenless_methods) and whose request parsed. The handler owns the
 * call until it answers it (msr_rpc_call_reply / msr_rpc_call_fail), which it may do at once or
 * later from the polling thread. req belongs to the call and lives until then. */
typedef void (*msr_rpc_handler_fn)(void *arg, msr_rpc_call_t *call, msr_rpc_method_t method,
                                   ProtobufCMessage *req);

/* Called on the polling thread when a call still owned by the handler ends
 * without an answer (the client cancelled, disconnected or its deadline
 * passed). The handler must forget the call: it is freed after this returns. */
typedef void (*msr_rpc_cancel_fn)(void *arg, msr_rpc_call_t *call);

typedef struct msr_rpc_server_config {
    const char *address; /* "127.0.0.1:0", "0.0.0.0:8118", "unix:/path" */
    const char *token;   /* required on every call; NULL or "" accepts any */
    msr_rpc_handler_fn handler;
    msr_rpc_cancel_fn cancel; /* may be NULL if the handler never holds calls */
    void *arg;
    const char *log_name; /* what refusals are logged as, e.g. "coordinator" */
    /* The most bytes one request may have (0: MSR_RPC_MAX_MESSAGE_DEFAULT);
     * requests of the small methods are held to MSR_RPC_SMALL_REQUEST_MAX. */
    size_t max_message;
    const msr_rpc_tls_t *tls; /* TLS when msr_rpc_tls_enabled (needs cert and key) */
    /* Connection bounds for a plaintext TCP server (0: none, gRPC's own
     * listener): the server accepts connections itself and keeps at most
     * max_connections at once, at most max_unauth_per_host per peer address
     * that have not yet made a call with the token, and closes those after
     * unauth_grace_ms (0: 5 s). Each connection costs two descriptors. With
     * TLS gRPC 1.51 must do the accepting, and only the handshake timeout
     * and the idle limit of msr_rpc_server_create apply. */
    int max_connections;
    int max_unauth_per_host;
    int unauth_grace_ms;
    /* Methods served without the token, as bits (1u << method): their
     * request must carry a proof of its own (Auth's munge credential). Their
     * body is read (held to MSR_RPC_SMALL_REQUEST_MAX), and a call of one
     * does not count as a call with the token for the connection bounds. */
    uint32_t tokenless_methods;
} msr_rpc_server_config_t;

/* Binds and starts a server on loop. *port_p gets the bound TCP port (0 for
 * unix sockets). MSR_ERR_ADDR_IN_USE when the address cannot be bound,
 * MSR_ERR_INVALID_ARG (logged) when a TLS file cannot be read.
 *
 * What an unauthenticated peer can cost the server: a call's token is
 * checked from its metadata before its body is read, so a refused call
 * costs at most the HTTP/2 flow-control window; connections that do not
 * finish their handshake within 10 s, and connections without calls for
 * 60 s, are closed; the connection bounds of the config apply on top. */
msr_status_t msr_rpc_server_create(msr_rpc_loop_t *loop, const msr_rpc_server_config_t *config,
                                   int *port_p, msr_rpc_server_t **server_p);

/* Starts the shutdown from any thread: no new calls are accepted and the
 * calls in flight are cancelled; the thread polling the loop wakes up. Call
 * msr_rpc_server_destroy on the polling thread to finish. */
void msr_rpc_server_shutdown(msr_rpc_server_t *server);

/* Stops accepting calls, cancels the calls in flight (the cancel callback runs
 * for those the handler holds), and frees the server. Polls the loop itself. */
void msr_rpc_server_destroy(msr_rpc_server_t *server);

/* Calls served so far, by method. */
uint64_t msr_rpc_server_calls(const msr_rpc_server_t *server, msr_rpc_method_t method);

/* Calls of methods the server does not know, so far: each was answered at
 * once with UNIMPLEMENTED (PERMISSION_DENIED without the job's token),
 * never handed to the handler. */
uint64_t msr_rpc_server_unknown_calls(const msr_rpc_server_t *server);

/* Answers the call with a message of the method's response type. The message
 * stays the caller's. Ownership of the call ends here, success or not. */
msr_status_t msr_rpc_call_reply(msr_rpc_call_t *call, const ProtobufCMessage *resp);

/* Answers with bytes already packed as the response (shared among many
 * calls without repacking: the slice is referenced, not copied). slice is a
 * grpc_slice passed by pointer to keep gRPC out of this header. */
msr_status_t msr_rpc_call_reply_slice(msr_rpc_call_t *call, const void *grpc_slice_p);

/* Answers with an error status (grpc_status_code) and a message. */
void msr_rpc_call_fail(msr_rpc_call_t *call, int grpc_code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The client's deadline for this call (msr_now_ns units; MSR_DEADLINE_NEVER
 * if none), and the peer's address as gRPC names it ("ipv4:127.0.0.1:5000"). */
uint64_t msr_rpc_call_deadline(const msr_rpc_call_t *call);
const char *msr_rpc_call_peer(msr_rpc_call_t *call);

/* The host of a peer as gRPC names it, its port dropped, in out (cut to
 * outlen - 1 bytes): "ipv4:10.0.0.7:41234" -> "10.0.0.7", "ipv6:[::1]:5000"
 * -> "[::1]", "unix:/run/x.sock" -> "/run/x.sock". What refusals are
 * counted by and held calls charged to (rendezvous/held.h). */
void msr_rpc_peer_host(const char *peer, char *out, size_t outlen);

/* The call's method, and when it arrived (msr_now_ns units). */
msr_rpc_method_t msr_rpc_call_method(const msr_rpc_call_t *call);
uint64_t msr_rpc_call_started(const msr_rpc_call_t *call);
/* The arg of the server config the call arrived on. */
void *msr_rpc_call_handler_arg(const msr_rpc_call_t *call);

/* A slot the owner may use to find its own state for a held call. */
void msr_rpc_call_set_data(msr_rpc_call_t *call, void *data);
void *msr_rpc_call_get_data(const msr_rpc_call_t *call);

/* ---- the client ---- */

typedef struct msr_rpc_channel msr_rpc_channel_t;

/* A channel to target ("host:port" or "unix:/path"); connects lazily.
 * Safe to use from several threads at once. */
msr_status_t msr_rpc_channel_create(const char *target, const char *token,
                                    msr_rpc_channel_t **channel_p);

/* Like msr_rpc_channel_create, but the channel gets a TCP connection of its
 * own instead of sharing one with other channels of this process to the same
 * target (for simulating many nodes in one process). */
msr_status_t msr_rpc_channel_create_own(const char *target, const char *token,
                                        msr_rpc_channel_t **channel_p);

/* Like msr_rpc_channel_create, over TLS when msr_rpc_tls_enabled(tls).
 * MSR_ERR_INVALID_ARG (logged) when a TLS file cannot be read. */
msr_status_t msr_rpc_channel_create_tls(const char *target, const char *token,
                                        const msr_rpc_tls_t *tls, msr_rpc_channel_t **channel_p);
void msr_rpc_channel_destroy(msr_rpc_channel_t *channel);
const char *msr_rpc_channel_target(const msr_rpc_channel_t *channel);

/* Waits until the channel is connected or the deadline passes, asking it to
 * connect; 1 when connected. Use it instead of sleeping between tries of a
 * call that found the server unreachable: a sleeping client polls nothing,
 * so its connection attempts cannot finish (they time out and gRPC's backup
 * poller, every 5 s, is all that moves them). */
int msr_rpc_channel_wait(msr_rpc_channel_t *channel, uint64_t deadline);

/* A blocking unary call. With wait_for_ready the call waits for the channel
 * to connect (up to the deadline) instead of failing at once when the server
 * cannot be reached. On MSR_OK *resp_p holds the response (free it with
 * msr_rpc_message_free). On failure msr_err_msg() has the server's or
 * gRPC's message. Thread-safe. */
msr_status_t msr_rpc_call(msr_rpc_channel_t *channel, msr_rpc_method_t method,
                          const ProtobufCMessage *req, uint64_t deadline, int wait_for_ready,
                          ProtobufCMessage **resp_p);

/* A blocking unary call to another service's method at path
 * ("/etcdserverpb.KV/Range"), its response parsed as resp_desc; otherwise
 * as msr_rpc_call. The channel's token, if any, is sent along. */
msr_status_t msr_rpc_call_path(msr_rpc_channel_t *channel, const char *path,
                               const ProtobufCMessage *req,
                               const ProtobufCMessageDescriptor *resp_desc, uint64_t deadline,
                               int wait_for_ready, ProtobufCMessage **resp_p);

/* An asynchronous unary call. Fill method/deadline/wait_for_ready/done/arg,
 * start it with msr_rpc_call_start; when it completes, done() runs on the
 * thread polling loop with status, resp (owned by the async, freed by
 * msr_rpc_async_cleanup) and err set. The async must stay alive until then.
 * If start fails, done() is never called. */
typedef struct msr_rpc_async msr_rpc_async_t;
struct msr_rpc_async {
    msr_rpc_op_t op; /* private */
    msr_rpc_method_t method;
    uint64_t deadline;
    int wait_for_ready;
    void (*done)(msr_rpc_async_t *async);
    void *arg;
    int raw; /* keep the response as bytes (for msr_rpc_call_forward), resp stays NULL */
    /* results */
    msr_status_t status;
    int grpc_code; /* the call's gRPC status code */
    ProtobufCMessage *resp;
    char err[256];
    /* private */
    void *call_;
    void *priv_;
    void *gcall_; /* a reference on the grpc_call, for cancellation */
    void *raw_;   /* the response bytes (grpc_byte_buffer) in raw mode */
};

msr_status_t msr_rpc_call_start(msr_rpc_channel_t *channel, msr_rpc_loop_t *loop,
                                msr_rpc_async_t *async, const ProtobufCMessage *req);

/* Answers a server call with a finished async call's outcome: its response
 * bytes unchanged (raw mode) when it succeeded, else its status code and
 * message. A proxy forwards upstream answers this way without repacking; one
 * async may answer many calls. Ownership of call ends here. */
msr_status_t msr_rpc_call_forward(msr_rpc_call_t *call, const msr_rpc_async_t *async);

/* For a finished raw-mode async: the response's size in bytes, and the
 * response unpacked on demand (NULL if malformed; free with
 * msr_rpc_message_free). */
size_t msr_rpc_async_raw_len(const msr_rpc_async_t *async);
ProtobufCMessage *msr_rpc_async_raw_unpack(const msr_rpc_async_t *async);

/* Cancels a started async call from any thread; done() still runs (with
 * MSR_ERR_CANCELED unless it had already finished). */
void msr_rpc_async_cancel(msr_rpc_async_t *async);

/* Frees the response of a finished async and drops its call reference (safe
 * to call twice). */
void msr_rpc_async_cleanup(msr_rpc_async_t *async);

#endif
