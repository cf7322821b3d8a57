/* The worker channel's server: a listening thread and a thread per
 * connection that reads a frame, checks it and hands the call to the
 * handler (wchan.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/list.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "rendezvous/wchan.h"

/* A connection must say HELLO, and a frame's body must follow its header,
 * within this long. */
#define FRAME_GRACE_MS 10000

struct msr_wchan_conn {
    msr_wchan_server_t *server;
    int fd;
    pthread_t thread;
    int done; /* its thread has returned (joined by the listener or destroy) */
    msr_list_t link;
};

struct msr_wchan_server {
    char path[108];
    char *token;
    int max_conns, nconns;
    msr_wchan_handler_fn handler;
    void *arg;
    int lfd, wake[2];
    pthread_t thread;
    atomic_int stop;
    pthread_mutex_t lock; /* conns, nconns, each conn's done */
    msr_list_t conns;
};

static int token_ok(const msr_wchan_server_t *s, const uint8_t *tok, size_t len)
{
    size_t tlen = strlen(s->token);
    if (tlen == 0)
        return 1;
    if (len != tlen)
        return 0;
    unsigned char diff = 0; /* constant time: the token is a secret */
    for (size_t k = 0; k < tlen; k++)
        diff |= (unsigned char)(tok[k] ^ (unsigned char)s->token[k]);
    return diff == 0;
}

static void send_frame(int fd, uint8_t type, uint8_t code, const void *body, size_t len)
{
    uint8_t hb[MSR_WCHAN_HEADER];
    msr_wchan_header_t h = {(uint32_t)len, type, code, 0};
    msr_wchan_header_pack(&h, hb);
    if (msr_wchan_write_all(fd, hb, sizeof hb) == MSR_OK && len > 0)
        msr_wchan_write_all(fd, body, len);
}

/* Answers a frame that breaks the protocol; the caller closes. */
static void refuse(msr_wchan_conn_t *c, uint8_t type, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void refuse(msr_wchan_conn_t *c, uint8_t type, int code, const char *fmt, ...)
{
    char msg[MSR_WCHAN_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    MSR_DEBUG("worker channel %s: %s", c->server->path, msg);
    send_frame(c->fd, type, (uint8_t)code, msg, strlen(msg));
}

int msr_wchan_conn_gone(msr_wchan_conn_t *c)
{
    if (atomic_load(&c->server->stop))
        return 1;
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
    return poll(&pfd, 1, 0) != 0; /* closed, or a frame out of turn */
}

/* Reads and checks the HELLO: nonzero when the client may call. */
static int conn_hello(msr_wchan_conn_t *c)
{
    uint8_t hb[MSR_WCHAN_HEADER], tok[MSR_WCHAN_TOKEN_MAX];
    msr_wchan_header_t h = {0};
    uint64_t deadline = msr_deadline_in_ms(FRAME_GRACE_MS);
    if (msr_wchan_read_all(c->fd, hb, sizeof hb, deadline) != MSR_OK)
        return 0;
    if (msr_wchan_header_unpack(hb, &h) != MSR_OK || h.type != MSR_WCHAN_HELLO) {
        refuse(c, MSR_WCHAN_WELCOME, MSR_RPC_INVALID_ARGUMENT,
               "worker channel: expected a HELLO frame, got type %u", h.type);
        return 0;
    }
    if (h.arg != MSR_WCHAN_VERSION || h.len > MSR_WCHAN_TOKEN_MAX) {
        refuse(c, MSR_WCHAN_WELCOME, MSR_RPC_INVALID_ARGUMENT,
               "worker channel: HELLO of version %u with %u bytes of token (this msrun speaks "
               "version %d, tokens of at most %d bytes)",
               h.arg, h.len, MSR_WCHAN_VERSION, MSR_WCHAN_TOKEN_MAX);
        return 0;
    }
    if (msr_wchan_read_all(c->fd, tok, h.len, deadline) != MSR_OK) {
        refuse(c, MSR_WCHAN_WELCOME, MSR_RPC_INVALID_ARGUMENT,
               "worker channel: truncated HELLO frame");
        return 0;
    }
    if (!token_ok(c->server, tok, h.len)) {
        MSR_WARN("worker channel %s: refused a connection with a wrong token", c->server->path);
        static const char denied[] = "msrun: wrong or missing job token";
        send_frame(c->fd, MSR_WCHAN_WELCOME, MSR_RPC_PERMISSION_DENIED, denied, sizeof denied - 1);
        return 0;
    }
    send_frame(c->fd, MSR_WCHAN_WELCOME, 0, NULL, 0);
    return 1;
}

/* Reads one CALL and answers it; 0 when the connection is to be closed. */
static int conn_call(msr_wchan_conn_t *c)
{
    uint8_t hb[MSR_WCHAN_HEADER];
    msr_wchan_header_t h = {0};
    if (msr_wchan_read_all(c->fd, hb, sizeof hb, MSR_DEADLINE_NEVER) != MSR_OK)
        return 0; /* closed between calls: the normal end */
    if (msr_wchan_header_unpack(hb, &h) != MSR_OK || h.type != MSR_WCHAN_CALL) {
        refuse(c, MSR_WCHAN_REPLY, MSR_RPC_INVALID_ARGUMENT,
               "worker channel: expected a CALL frame, got type %u", h.type);
        return 0;
    }
    size_t limit = msr_wchan_call_limit(h.code);
    if (limit == 0) {
        refuse(c, MSR_WCHAN_REPLY, MSR_RPC_UNIMPLEMENTED, "worker channel: no method %u", h.code);
        return 0;
    }
    if (h.len > limit) {
        refuse(c, MSR_WCHAN_REPLY, MSR_RPC_RESOURCE_EXHAUSTED,
               "%s request of %u bytes is over the limit of %zu", msr_rpc_methods[h.code].name,
               h.len, limit);
        return 0;
    }
    uint8_t *req = msr_malloc(h.len ? h.len : 1);
    if (req == NULL) {
        refuse(c, MSR_WCHAN_REPLY, MSR_RPC_RESOURCE_EXHAUSTED, "msrun is out of memory");
        return 0;
    }
    msr_status_t st = msr_wchan_read_all(c->fd, req, h.len, msr_deadline_in_ms(FRAME_GRACE_MS));
    if (st != MSR_OK) {
        refuse(c, MSR_WCHAN_REPLY, MSR_RPC_INVALID_ARGUMENT,
               "%s request truncated: %s before its %u bytes came", msr_rpc_methods[h.code].name,
               msr_status_str(st), h.len);
        msr_free(req);
        return 0;
    }
    uint64_t deadline =
        h.arg == MSR_WCHAN_NO_DEADLINE ? MSR_DEADLINE_NEVER : msr_deadline_in_ms(h.arg);
    int code = MSR_RPC_INTERNAL;
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    char msg[MSR_WCHAN_MESSAGE_MAX] = "";
    c->server->handler(c->server->arg, c, (msr_rpc_method_t)h.code, req, h.len, deadline, &code,
                       &resp, &resp_len, msg, sizeof msg);
    msr_free(req);
    if (code == 0)
        send_frame(c->fd, MSR_WCHAN_REPLY, 0, resp, resp_len);
    else
        send_frame(c->fd, MSR_WCHAN_REPLY, (uint8_t)code, msg, strnlen(msg, sizeof msg));
    msr_free(resp);
    return 1;
}

static void *conn_main(void *arg)
{
    msr_wchan_conn_t *c = arg;
    if (conn_hello(c))
        while (!atomic_load(&c->server->stop) && conn_call(c))
            ;
    shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_lock(&c->server->lock);
    c->done = 1;
    pthread_mutex_unlock(&c->server->lock);
    return NULL;
}

/* Joins and frees the connections whose threads have returned. */
static void reap(msr_wchan_server_t *s, int all)
{
    msr_list_t *pos, *tmp;
    pthread_mutex_lock(&s->lock);
    msr_list_for_each_safe(pos, tmp, &s->conns)
    {
        msr_wchan_conn_t *c = MSR_CONTAINER_OF(pos, msr_wchan_conn_t, link);
        if (!c->done && !all)
            continue;
        msr_list_remove(&c->link);
        s->nconns--;
        pthread_mutex_unlock(&s->lock);
        pthread_join(c->thread, NULL);
        close(c->fd);
        msr_free(c);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
}

static void accept_one(msr_wchan_server_t *s)
{
    int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    reap(s, 0);
    msr_wchan_conn_t *c = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->nconns < s->max_conns && (c = msr_calloc(1, sizeof *c)) != NULL) {
        c->server = s;
        c->fd = fd;
        if (pthread_create(&c->thread, NULL, conn_main, c) == 0) {
            msr_list_push_back(&s->conns, &c->link);
            s->nconns++;
        } else {
            msr_free(c);
            c = NULL;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (c == NULL) {
        MSR_WARN("worker channel %s: refused a connection (%d open, at most %d)", s->path,
                 s->nconns, s->max_conns);
        close(fd);
    }
}

static void *listen_main(void *arg)
{
    msr_wchan_server_t *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd pfd[2] = {{.fd = s->lfd, .events = POLLIN},
                                {.fd = s->wake[0], .events = POLLIN}};
        if (poll(pfd, 2, -1) < 0 && errno != EINTR)
            break;
        if (pfd[0].revents & POLLIN)
            accept_one(s);
    }
    return NULL;
}

static msr_status_t server_listen(msr_wchan_server_t *s)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", s->path);
    s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->lfd < 0) {
        MSR_ERROR("worker channel: socket: %s", strerror(errno));
        return MSR_ERR_SYSTEM;
    }
    mode_t old = umask(0177); /* the socket is the user's alone */
    int r = bind(s->lfd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    umask(old);
    if (r != 0 || listen(s->lfd, 128) != 0) {
        MSR_ERROR("worker channel: cannot listen on %s: %s", s->path, strerror(r ? e : errno));
        close(s->lfd);
        return r != 0 && e == EADDRINUSE ? MSR_ERR_ADDR_IN_USE : MSR_ERR_SYSTEM;
    }
    return MSR_OK;
}

msr_status_t msr_wchan_server_create(const char *path, const char *token, int max_conns,
                                     msr_wchan_handler_fn handler, void *arg,
                                     msr_wchan_server_t **server_p)
{
    msr_wchan_server_t *s = msr_calloc(1, sizeof *s);
    if (s == NULL)
        return MSR_ERR_NO_MEMORY;
    if (strlen(path) >= sizeof s->path) {
        MSR_ERROR("worker channel: socket path %s is too long", path);
        msr_free(s);
        return MSR_ERR_INVALID_ARG;
    }
    snprintf(s->path, sizeof s->path, "%s", path);
    s->max_conns = max_conns > 0 ? max_conns : 1;
    s->handler = handler;
    s->arg = arg;
    msr_list_init(&s->conns);
    msr_status_t st = MSR_ERR_NO_MEMORY;
    if ((s->token = msr_strdup(token ? token : "")) == NULL)
        goto err_free;
    st = MSR_ERR_SYSTEM;
    if (pipe2(s->wake, O_CLOEXEC) != 0)
        goto err_token;
    if ((st = server_listen(s)) != MSR_OK)
        goto err_pipe;
    pthread_mutex_init(&s->lock, NULL);
    if (pthread_create(&s->thread, NULL, listen_main, s) != 0) {
        st = MSR_ERR_SYSTEM;
        goto err_listen;
    }
    *server_p = s;
    return MSR_OK;

err_listen:
    pthread_mutex_destroy(&s->lock);
    close(s->lfd);
    unlink(s->path);
err_pipe:
    close(s->wake[0]);
    close(s->wake[1]);
err_token:
    msr_free(s->token);
err_free:
    msr_free(s);
    return st;
}

void msr_wchan_server_destroy(msr_wchan_server_t *s)
{
    if (s == NULL)
        return;
    atomic_store(&s->stop, 1);
    if (write(s->wake[1], "x", 1) != 1)
        MSR_DEBUG("worker channel: cannot wake the listener: %s", strerror(errno));
    pthread_join(s->thread, NULL);
    msr_list_t *pos, *tmp;
    pthread_mutex_lock(&s->lock);
    msr_list_for_each_safe(pos, tmp, &s->conns)
    {
        shutdown(MSR_CONTAINER_OF(pos, msr_wchan_conn_t, link)->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&s->lock);
    reap(s, 1);
    pthread_mutex_destroy(&s->lock);
    close(s->lfd);
    unlink(s->path);
    close(s->wake[0]);
    close(s->wake[1]);
    msr_free(s->token);
    msr_free(s);
}
