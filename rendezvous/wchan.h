/* The worker channel: a worker's calls to its node's msrun over a unix
 * socket as length-prefixed protobuf-c messages, without gRPC, so that a
 * worker does not load gRPC and its libraries (docs/architecture.md, "The
 * worker channel"). Frames, the blocking client (wchan.c) and the server
 * (wchan_server.c). Private to msrun.
 *
 * A frame is a 12-byte header, little-endian, then len bytes of body:
 *   u32 len | u8 type | u8 method or code | u16 zero | u32 arg
 * The client opens with HELLO (arg: MSR_WCHAN_VERSION, body: the job token)
 * and the server answers WELCOME (code 0, or an error code and its message,
 * then it closes). Then, one at a time on a connection, CALL (method, arg:
 * the milliseconds the caller will wait, MSR_WCHAN_NO_DEADLINE for none,
 * body: the packed request) is answered by REPLY (code 0 and the packed
 * response, or a gRPC status code and its message). A frame that is
 * truncated, too long or of a type out of turn is answered by a REPLY with
 * an error, and the connection is closed. */
#ifndef MSR_RENDEZVOUS_WCHAN_H
#define MSR_RENDEZVOUS_WCHAN_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "rendezvous/rpc.h"

/* Raised whenever a frame changes meaning. */
#define MSR_WCHAN_VERSION 1

#define MSR_WCHAN_HEADER 12

enum msr_wchan_type {
    MSR_WCHAN_HELLO = 1,
    MSR_WCHAN_WELCOME = 2,
    MSR_WCHAN_CALL = 3,
    MSR_WCHAN_REPLY = 4,
};

/* The most body bytes: of a HELLO (the token), of a CALL (as the gRPC
 * server's default limit; the small methods are held to
 * MSR_RPC_SMALL_REQUEST_MAX), of a REPLY (an allgather's answer may be
 * larger than any request) and of an error's message. */
#define MSR_WCHAN_TOKEN_MAX   1024
#define MSR_WCHAN_CALL_MAX    MSR_RPC_MAX_MESSAGE_DEFAULT
#define MSR_WCHAN_REPLY_MAX   ((size_t)1 << 30)
#define MSR_WCHAN_MESSAGE_MAX 1024

#define MSR_WCHAN_NO_DEADLINE UINT32_MAX

/* The worker channel's socket is the gRPC socket's path with this suffix. */
#define MSR_WCHAN_SUFFIX ".w"

typedef struct msr_wchan_header {
    uint32_t len;
    uint8_t type;
    uint8_t code; /* the method of a CALL, the status code of a WELCOME or REPLY */
    uint32_t arg;
} msr_wchan_header_t;

void msr_wchan_header_pack(const msr_wchan_header_t *h, uint8_t out[MSR_WCHAN_HEADER]);

/* Reads a header; MSR_ERR_PROTOCOL when its zero field is not zero. */
msr_status_t msr_wchan_header_unpack(const uint8_t in[MSR_WCHAN_HEADER], msr_wchan_header_t *h_p);

/* The most body bytes a CALL of method may have (0 for a method out of
 * range). */
size_t msr_wchan_call_limit(uint8_t method);

/* Writes all of buf to fd, restarting after signals; MSR_ERR_IO on error. */
msr_status_t msr_wchan_write_all(int fd, const void *buf, size_t len);

/* Reads exactly len bytes from fd before deadline (msr_now_ns units):
 * MSR_ERR_TRUNCATED at the end of the stream, MSR_ERR_TIMEOUT, MSR_ERR_IO. */
msr_status_t msr_wchan_read_all(int fd, void *buf, size_t len, uint64_t deadline);

/* ---- the client ---- */

typedef struct msr_wchan msr_wchan_t;

/* A client of the worker channel at path with token (NULL: none). Connects
 * lazily, one connection per call in flight (a barrier does not hold up
 * the beats). Thread-safe. */
msr_status_t msr_wchan_create(const char *path, const char *token, msr_wchan_t **wchan_p);
void msr_wchan_destroy(msr_wchan_t *wchan);

/* A blocking call, as msr_rpc_call: *resp_p (free with msr_rpc_message_free)
 * on MSR_OK; on failure msr_err_msg() has the server's message and the
 * status is the gRPC code's (MSR_ERR_UNREACHABLE when msrun cannot be
 * reached, MSR_ERR_TIMEOUT when the deadline passes). Thread-safe. */
msr_status_t msr_wchan_call(msr_wchan_t *wchan, msr_rpc_method_t method,
                            const ProtobufCMessage *req, uint64_t deadline,
                            ProtobufCMessage **resp_p);

/* ---- the server ---- */

typedef struct msr_wchan_server msr_wchan_server_t;
typedef struct msr_wchan_conn msr_wchan_conn_t;

/* Serves one call on the connection's thread: method and its packed request
 * (req, len; checked against the method's limit), the caller's deadline.
 * Answers by filling *code_p (0: *resp_p, packed with msr_malloc, is sent
 * and freed; else msg, at most MSR_WCHAN_MESSAGE_MAX bytes, is sent). May
 * block; msr_wchan_conn_gone tells whether the caller still waits. */
typedef void (*msr_wchan_handler_fn)(void *arg, msr_wchan_conn_t *conn, msr_rpc_method_t method,
                                     const uint8_t *req, size_t len, uint64_t deadline, int *code_p,
                                     uint8_t **resp_p, size_t *resp_len_p, char *msg,
                                     size_t msglen);

/* Whether the connection's client has gone (closed, or sent out of turn). */
int msr_wchan_conn_gone(msr_wchan_conn_t *conn);

/* Listens on path (which must not exist; mode 0600) and serves each
 * connection on a thread of its own, at most max_conns at once (more are
 * closed at once). A HELLO whose token differs from token (compared in
 * constant time; NULL or "" accepts any) is answered PERMISSION_DENIED.
 * MSR_ERR_ADDR_IN_USE or MSR_ERR_SYSTEM (logged) when it cannot listen. */
msr_status_t msr_wchan_server_create(const char *path, const char *token, int max_conns,
                                     msr_wchan_handler_fn handler, void *arg,
                                     msr_wchan_server_t **server_p);

/* Stops accepting, shuts every connection down, waits for their threads
 * (a handler must return once msr_wchan_conn_gone says so), removes the
 * socket and frees. NULL does nothing. */
void msr_wchan_server_destroy(msr_wchan_server_t *server);

#endif
