/* The worker channel's frames and its blocking client (wchan.h). */
#include "rendezvous/wchan.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/time.h"

/* ---- frames ---- */

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void msr_wchan_header_pack(const msr_wchan_header_t *h, uint8_t out[MSR_WCHAN_HEADER])
{
    put_u32(out, h->len);
    out[4] = h->type;
    out[5] = h->code;
    out[6] = out[7] = 0;
    put_u32(out + 8, h->arg);
}

msr_status_t msr_wchan_header_unpack(const uint8_t in[MSR_WCHAN_HEADER], msr_wchan_header_t *h_p)
{
    if (in[6] != 0 || in[7] != 0)
        return MSR_ERR_PROTOCOL;
    h_p->len = get_u32(in);
    h_p->type = in[4];
    h_p->code = in[5];
    h_p->arg = get_u32(in + 8);
    return MSR_OK;
}

size_t msr_wchan_call_limit(uint8_t method)
{
    switch (method) {
    case MSR_RPC_SET:
    case MSR_RPC_COMPARE_SET:
    case MSR_RPC_ALLGATHER:
    case MSR_RPC_PUBLISH:
        return MSR_WCHAN_CALL_MAX;
    default:
        return method < MSR_RPC_METHOD_COUNT ? MSR_RPC_SMALL_REQUEST_MAX : 0;
    }
}

msr_status_t msr_wchan_write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return MSR_ERR_IO;
        p += n;
        len -= (size_t)n;
    }
    return MSR_OK;
}

msr_status_t msr_wchan_read_all(int fd, void *buf, size_t len, uint64_t deadline)
{
    uint8_t *p = buf;
    while (len > 0) {
        int64_t left = msr_deadline_left_ms(deadline);
        if (left == 0)
            return MSR_ERR_TIMEOUT;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, left > 60000 ? 60000 : (int)left);
        if (r < 0 && errno != EINTR)
            return MSR_ERR_IO;
        if (r <= 0)
            continue;
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0)
            return MSR_ERR_IO;
        if (n == 0)
            return MSR_ERR_TRUNCATED;
        p += n;
        len -= (size_t)n;
    }
    return MSR_OK;
}

/* ---- the client ---- */

#define IDLE_MAX 8

struct msr_wchan {
    char path[108];
    char *token;
    pthread_mutex_t lock;
    int idle[IDLE_MAX]; /* connections that said WELCOME, free for a call */
    int nidle;
};

msr_status_t msr_wchan_create(const char *path, const char *token, msr_wchan_t **wchan_p)
{
    if (path == NULL || strlen(path) >= sizeof((msr_wchan_t *)0)->path)
        return msr_err(MSR_ERR_INVALID_ARG, "worker channel: socket path %s is too long",
                       path ? path : "(null)");
    if (token != NULL && strlen(token) > MSR_WCHAN_TOKEN_MAX)
        return msr_err(MSR_ERR_INVALID_ARG, "worker channel: the token has over %d bytes",
                       MSR_WCHAN_TOKEN_MAX);
    msr_wchan_t *w = msr_calloc(1, sizeof *w);
    if (w == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "worker channel: out of memory");
    snprintf(w->path, sizeof w->path, "%s", path);
    w->token = msr_strdup(token ? token : "");
    if (w->token == NULL) {
        msr_free(w);
        return msr_err(MSR_ERR_NO_MEMORY, "worker channel: out of memory");
    }
    pthread_mutex_init(&w->lock, NULL);
    *wchan_p = w;
    return MSR_OK;
}

void msr_wchan_destroy(msr_wchan_t *w)
{
    if (w == NULL)
        return;
    for (int i = 0; i < w->nidle; i++)
        close(w->idle[i]);
    pthread_mutex_destroy(&w->lock);
    msr_free(w->token);
    msr_free(w);
}

/* Reads a frame of type (header and body, the body NUL-terminated, at most
 * max bytes) before deadline; the body is msr_malloc'd. */
static msr_status_t read_frame(int fd, uint8_t type, size_t max, uint64_t deadline,
                               msr_wchan_header_t *h_p, uint8_t **body_p)
{
    uint8_t hb[MSR_WCHAN_HEADER];
    msr_status_t st = msr_wchan_read_all(fd, hb, sizeof hb, deadline);
    if (st != MSR_OK)
        return st;
    if (msr_wchan_header_unpack(hb, h_p) != MSR_OK || h_p->type != type || h_p->len > max)
        return MSR_ERR_PROTOCOL;
    uint8_t *body = msr_malloc((size_t)h_p->len + 1);
    if (body == NULL)
        return MSR_ERR_NO_MEMORY;
    st = msr_wchan_read_all(fd, body, h_p->len, deadline);
    if (st != MSR_OK) {
        msr_free(body);
        return st;
    }
    body[h_p->len] = '\0';
    *body_p = body;
    return MSR_OK;
}

static msr_status_t send_frame(int fd, uint8_t type, uint8_t code, uint32_t arg, const void *body,
                               size_t len)
{
    uint8_t hb[MSR_WCHAN_HEADER];
    msr_wchan_header_t h = {(uint32_t)len, type, code, arg};
    msr_wchan_header_pack(&h, hb);
    msr_status_t st = msr_wchan_write_all(fd, hb, sizeof hb);
    return st == MSR_OK && len > 0 ? msr_wchan_write_all(fd, body, len) : st;
}

/* A new connection that said WELCOME, in *fd_p. */
static msr_status_t wchan_connect(msr_wchan_t *w, uint64_t deadline, int *fd_p)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return msr_err(MSR_ERR_SYSTEM, "worker channel: socket: %s", strerror(errno));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", w->path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        return msr_err(MSR_ERR_UNREACHABLE, "worker channel: cannot connect to msrun at %s: %s",
                       w->path, strerror(e));
    }
    msr_wchan_header_t h;
    uint8_t *msg = NULL;
    msr_status_t st =
        send_frame(fd, MSR_WCHAN_HELLO, 0, MSR_WCHAN_VERSION, w->token, strlen(w->token));
    if (st == MSR_OK)
        st = read_frame(fd, MSR_WCHAN_WELCOME, MSR_WCHAN_MESSAGE_MAX, deadline, &h, &msg);
    if (st == MSR_OK && h.code != 0)
        st = msr_err(msr_rpc_status_from_grpc(h.code), "%s", (char *)msg);
    else if (st == MSR_ERR_TIMEOUT)
        st = msr_err(st, "worker channel: msrun at %s did not answer before the deadline", w->path);
    else if (st != MSR_OK)
        st = msr_err(MSR_ERR_UNREACHABLE, "worker channel: msrun at %s closed the connection (%s)",
                     w->path, msr_status_str(st));
    msr_free(msg);
    if (st != MSR_OK) {
        close(fd);
        return st;
    }
    *fd_p = fd;
    return MSR_OK;
}

static int take_idle(msr_wchan_t *w)
{
    pthread_mutex_lock(&w->lock);
    int fd = w->nidle > 0 ? w->idle[--w->nidle] : -1;
    pthread_mutex_unlock(&w->lock);
    return fd;
}

static void give_idle(msr_wchan_t *w, int fd)
{
    pthread_mutex_lock(&w->lock);
    if (w->nidle < IDLE_MAX) {
        w->idle[w->nidle++] = fd;
        fd = -1;
    }
    pthread_mutex_unlock(&w->lock);
    if (fd >= 0)
        close(fd);
}

/* One CALL and its REPLY on fd: MSR_ERR_IO when the CALL could not be
 * sent; *in_step_p once a whole REPLY was read (fd may serve another). */
static msr_status_t call_on(msr_wchan_t *w, int fd, msr_rpc_method_t method, const uint8_t *req,
                            size_t len, uint64_t deadline, int *in_step_p,
                            ProtobufCMessage **resp_p)
{
    const char *name = msr_rpc_methods[method].name;
    int64_t left = msr_deadline_left_ms(deadline);
    uint32_t arg = deadline == MSR_DEADLINE_NEVER           ? MSR_WCHAN_NO_DEADLINE
                   : left >= (int64_t)MSR_WCHAN_NO_DEADLINE ? MSR_WCHAN_NO_DEADLINE - 1
                                                            : (uint32_t)left;
    if (send_frame(fd, MSR_WCHAN_CALL, (uint8_t)method, arg, req, len) != MSR_OK)
        return MSR_ERR_IO;
    msr_wchan_header_t h;
    uint8_t *body = NULL;
    msr_status_t st = read_frame(fd, MSR_WCHAN_REPLY, MSR_WCHAN_REPLY_MAX, deadline, &h, &body);
    if (st == MSR_ERR_TIMEOUT)
        return msr_err(st, "%s call to msrun at %s: deadline passed", name, w->path);
    if (st == MSR_ERR_TRUNCATED || st == MSR_ERR_IO)
        return msr_err(MSR_ERR_UNREACHABLE, "%s call to msrun at %s: the connection closed", name,
                       w->path);
    if (st != MSR_OK)
        return msr_err(st, "%s call to msrun at %s: %s", name, w->path,
                       st == MSR_ERR_PROTOCOL ? "malformed reply" : msr_status_str(st));
    *in_step_p = 1;
    if (h.code != 0) {
        st = msr_rpc_status_from_grpc(h.code);
        msr_err_set("%s", body[0] ? (char *)body : msr_status_str(st));
    } else if ((*resp_p = msr_rpc_response_unpack(method, body, h.len)) == NULL) {
        st = msr_err(MSR_ERR_PROTOCOL, "malformed %s response from msrun at %s", name, w->path);
    }
    msr_free(body);
    return st;
}

msr_status_t msr_wchan_call(msr_wchan_t *w, msr_rpc_method_t method, const ProtobufCMessage *req,
                            uint64_t deadline, ProtobufCMessage **resp_p)
{
    if ((unsigned)method >= MSR_RPC_METHOD_COUNT)
        return msr_err(MSR_ERR_INVALID_ARG, "worker channel: no method %d", (int)method);
    size_t len = protobuf_c_message_get_packed_size(req);
    if (len > msr_wchan_call_limit((uint8_t)method))
        return msr_err(MSR_ERR_OVERFLOW, "%s call: the request has %zu bytes, over %zu",
                       msr_rpc_methods[method].name, len, msr_wchan_call_limit((uint8_t)method));
    uint8_t *buf = msr_malloc(len ? len : 1);
    if (buf == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "%s call: out of memory", msr_rpc_methods[method].name);
    protobuf_c_message_pack(req, buf);
    msr_status_t st = MSR_ERR_IO;
    for (int fresh = 0; fresh < 2 && st == MSR_ERR_IO; fresh++) {
        int fd = fresh ? -1 : take_idle(w);
        if (fd < 0) {
            fresh = 1;
            st = wchan_connect(w, deadline, &fd);
            if (st != MSR_OK)
                break;
        }
        int in_step = 0;
        st = call_on(w, fd, method, buf, len, deadline, &in_step, resp_p);
        if (in_step)
            give_idle(w, fd);
        else
            close(fd);
        if (st == MSR_ERR_IO && fresh)
            st = msr_err(MSR_ERR_UNREACHABLE, "%s call to msrun at %s: cannot send",
                         msr_rpc_methods[method].name, w->path);
    }
    msr_free(buf);
    return st;
}
