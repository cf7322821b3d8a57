/* The coordinator's dashboard over libevent's HTTP server, on its own
 * thread, serving snapshots that the core's thread publishes. */
#include "cluster/http_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "base/util.h"

/* The connection whose bufferevent is bev, or NULL (a linear search: at
 * most max_conns of them, once a request). */
static http_conn_t *conn_of(msr_http_t *h, struct bufferevent *bev)
{
    for (http_conn_t *c = h->conns; c; c = c->next)
        if (c->bev == bev)
            return c;
    return NULL;
}

/* A request was read whole: served, and the connection's deadline starts
 * again for the next one (the answer's writing included). */
static void on_request(struct evhttp_request *req, void *arg)
{
    msr_http_t *h = arg;
    atomic_fetch_add(&h->served, 1);
    msr_http_route(h, req);
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    http_conn_t *c = evcon ? conn_of(h, evhttp_connection_get_bufferevent(evcon)) : NULL;
    if (c && c->evcon)
        event_add(c->timer, &h->deadline);
}

/* Forgets c (its connection lives on, or is being freed by libevent). */
static void conn_forget(http_conn_t *c)
{
    msr_http_t *h = c->h;
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    h->nconns--;
    event_free(c->timer);
    msr_free(c);
}

/* libevent frees c's connection (its end, an error, the server's stop). */
static void on_conn_closed(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    conn_forget(arg);
}

/* Closes c's connection now: over the cap, or past its deadline. */
static void conn_close(http_conn_t *c)
{
    struct evhttp_connection *evcon = c->evcon;
    atomic_fetch_add(&c->h->shed, 1);
    evhttp_connection_set_closecb(evcon, NULL, NULL);
    conn_forget(c);
    evhttp_connection_free(evcon);
}

/* c's timer: first, just after the accept, it finds the connection
 * libevent made around c's bufferevent (the bufferevent's callback
 * argument), closes it if it was past the cap, else starts the request's
 * deadline; afterwards the deadline passed. */
static void on_conn_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_conn_t *c = arg;
    msr_http_t *h = c->h;
    if (c->evcon) {
        conn_close(c);
        return;
    }
    void *cbarg = NULL;
    bufferevent_getcb(c->bev, NULL, NULL, NULL, &cbarg);
    if (cbarg == NULL) { /* never made: nothing to watch */
        conn_forget(c);
        return;
    }
    c->evcon = cbarg;
    evhttp_connection_set_closecb(c->evcon, on_conn_closed, c);
    if (c->over)
        conn_close(c);
    else
        event_add(c->timer, &h->deadline);
}

/* An accept succeeded (evhttp_set_bevcb): the connection's bufferevent,
 * watched by a new http_conn_t whose timer runs as soon as libevent has
 * made the connection around it. Out of memory: an unwatched one. */
static struct bufferevent *on_accept(struct event_base *base, void *arg)
{
    msr_http_t *h = arg;
    if (h->backoff_ms > 0) {
        MSR_INFO("the dashboard accepts connections again (%d open)", h->nconns);
        h->backoff_ms = 0;
    }
    /* as libevent makes its own: the connection closes the descriptor
     * itself, after its shutdown (CLOSE_ON_FREE would close it first) */
    struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
    http_conn_t *c = bev ? msr_calloc(1, sizeof *c) : NULL;
    if (c == NULL)
        return bev;
    c->h = h;
    c->bev = bev;
    if ((c->timer = evtimer_new(base, on_conn_timer, c)) == NULL) {
        msr_free(c);
        return bev;
    }
    c->next = h->conns;
    if (h->conns)
        h->conns->prev = c;
    h->conns = c;
    c->over = ++h->nconns > h->max_conns; /* counted now: accepts come in bursts */
    event_active(c->timer, EV_TIMEOUT, 1);
    return bev;
}

/* libevent's listener hands its error callback the evhttp, not h: the
 * server's thread keeps h here (set once by that thread, read by it). */
static _Thread_local msr_http_t *http_current;

/* accept failed (EMFILE, ENFILE, ENOBUFS...): sheds the connection that
 * waits with the spare descriptor, and pauses the listener, 100 ms
 * doubling to 1 s while it fails, with one warning an episode: no spin. */
static void on_accept_error(struct evconnlistener *lev, void *arg)
{
    (void)arg;
    int err = EVUTIL_SOCKET_ERROR();
    msr_http_t *h = http_current;
    if (h == NULL)
        return;
    if (h->spare_fd >= 0) {
        close(h->spare_fd);
        int fd = accept(evconnlistener_get_fd(lev), NULL, NULL);
        if (fd >= 0)
            close(fd);
        h->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    evconnlistener_disable(lev);
    if (h->backoff_ms == 0) {
        MSR_WARN("the dashboard cannot accept connections: %s (%d open); it pauses its accepts "
                 "(%d ms, doubling to %d ms) until one succeeds",
                 strerror(err), h->nconns, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
        h->backoff_ms = BACKOFF_MIN_MS;
    } else if ((h->backoff_ms *= 2) > BACKOFF_MAX_MS) {
        h->backoff_ms = BACKOFF_MAX_MS;
    }
    atomic_fetch_add(&h->shed, 1);
    struct timeval tv = {h->backoff_ms / 1000, (h->backoff_ms % 1000) * 1000};
    event_add(h->backoff, &tv);
}

static void on_backoff(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    msr_http_t *h = arg;
    evconnlistener_enable(h->listener);
}

/* msr_http_stop wrote to the eventfd: the loop ends. */
static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    msr_http_t *h = arg;
    event_base_loopbreak(h->base);
}

static void *http_main(void *arg)
{
    msr_http_t *h = arg;
    http_current = h;
    event_base_dispatch(h->base);
    return NULL;
}

msr_status_t msr_http_start(const msr_http_config_t *config, int *port_p, msr_http_t **http_p)
{
    if (config->token == NULL || config->token[0] == '\0') {
        MSR_ERROR("the dashboard needs the job token");
        return MSR_ERR_INVALID_ARG;
    }
    msr_status_t st = MSR_ERR_NO_MEMORY;
    msr_http_t *h = msr_calloc(1, sizeof *h);
    if (h == NULL)
        return MSR_ERR_NO_MEMORY;
    h->wake_fd = h->spare_fd = -1;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    if ((h->token = msr_strdup(config->token)) == NULL)
        goto err_free;
    h->login_ttl_ns =
        1000000ull *
        (uint64_t)(config->login_ttl_ms > 0 ? config->login_ttl_ms : MSR_HTTP_LOGIN_TTL_S * 1000);
    if (config->login_code && config->login_code[0])
        msr_http_code_add(h, config->login_code, msr_now_ns());
    h->max_conns = config->max_connections > 0 ? config->max_connections : MSR_HTTP_CONNECTIONS_MAX;
    int64_t dl =
        config->request_deadline_ms > 0 ? config->request_deadline_ms : MSR_HTTP_DEADLINE_S * 1000;
    h->deadline.tv_sec = (time_t)(dl / 1000);
    h->deadline.tv_usec = (suseconds_t)(dl % 1000) * 1000;
    msr_http_code_new(h->session);
    if ((h->base = event_base_new()) == NULL)
        goto err_free;
    if ((h->http = evhttp_new(h->base)) == NULL)
        goto err_base;
    evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST);
    evhttp_set_max_headers_size(h->http, 16384);
    evhttp_set_max_body_size(h->http, 4096);
    evhttp_set_timeout(h->http, 10);
    evhttp_set_gencb(h->http, on_request, h);
    evhttp_set_bevcb(h->http, on_accept, h);
    struct evhttp_bound_socket *sock =
        evhttp_bind_socket_with_handle(h->http, config->addr, (ev_uint16_t)config->port);
    if (sock == NULL) {
        MSR_ERROR("cannot serve the dashboard on %s port %d: %s", config->addr, config->port,
                  strerror(errno));
        st = MSR_ERR_ADDR_IN_USE;
        goto err_http;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int port = config->port;
    if (getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl) == 0)
        port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port);
    snprintf(h->cookie_name, sizeof h->cookie_name, COOKIE "%d", port);
    h->listener = evhttp_bound_socket_get_listener(sock);
    evconnlistener_set_error_cb(h->listener, on_accept_error);
    if ((h->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0 ||
        (h->backoff = evtimer_new(h->base, on_backoff, h)) == NULL) {
        st = MSR_ERR_SYSTEM;
        goto err_tick;
    }
    if ((h->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
        (h->wake = event_new(h->base, h->wake_fd, EV_READ, on_wake, h)) == NULL ||
        event_add(h->wake, NULL) != 0) {
        st = MSR_ERR_SYSTEM;
        goto err_tick;
    }
    if (pthread_create(&h->thread, NULL, http_main, h) != 0) {
        st = MSR_ERR_SYSTEM;
        goto err_tick;
    }
    *port_p = port;
    *http_p = h;
    return MSR_OK;

err_tick:
    if (h->wake)
        event_free(h->wake);
    if (h->wake_fd >= 0)
        close(h->wake_fd);
    if (h->backoff)
        event_free(h->backoff);
    if (h->spare_fd >= 0)
        close(h->spare_fd);
err_http:
    evhttp_free(h->http);
err_base:
    event_base_free(h->base);
err_free:
    msr_free(h->token);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
    msr_free(h);
    return st;
}

int msr_http_wanted(msr_http_t *h)
{
    return atomic_load(&h->want);
}

void msr_http_publish(msr_http_t *h, msr_buf_t *metrics, msr_buf_t *job)
{
    pthread_mutex_lock(&h->lock);
    msr_buf_t old_m = h->metrics, old_j = h->job;
    h->metrics = *metrics;
    h->job = *job;
    *metrics = old_m;
    *job = old_j;
    h->snap_ns = msr_now_ns();
    h->snap_seq++;
    atomic_store(&h->want, 0);
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    msr_buf_clear(metrics);
    msr_buf_clear(job);
}

int msr_http_output_wanted(msr_http_t *h, int *rank_p, uint64_t *seq_p)
{
    if (!atomic_load(&h->out_want))
        return 0;
    pthread_mutex_lock(&h->lock);
    int wanted = atomic_exchange(&h->out_want, 0);
    *rank_p = h->out_rank;
    *seq_p = h->out_seq;
    pthread_mutex_unlock(&h->lock);
    return wanted;
}

void msr_http_output_answer(msr_http_t *h, uint64_t seq, int code, msr_buf_t *body)
{
    pthread_mutex_lock(&h->lock);
    msr_buf_t old = h->out_body;
    h->out_body = *body;
    *body = old;
    h->out_code = code;
    h->out_done = seq;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    msr_buf_clear(body);
}

unsigned long msr_http_served(msr_http_t *h)
{
    return atomic_load(&h->served);
}

unsigned long msr_http_refused(msr_http_t *h)
{
    return atomic_load(&h->refused);
}

unsigned long msr_http_shed(msr_http_t *h)
{
    return atomic_load(&h->shed);
}

void msr_http_stop(msr_http_t *h)
{
    if (h == NULL)
        return;
    pthread_mutex_lock(&h->lock);
    atomic_store(&h->stop, 1);
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    uint64_t one = 1;
    if (write(h->wake_fd, &one, sizeof one) != (ssize_t)sizeof one)
        MSR_WARN("cannot wake the dashboard's thread: %s", strerror(errno));
    pthread_join(h->thread, NULL);
    event_free(h->wake);
    close(h->wake_fd);
    evhttp_free(h->http); /* its connections' close callbacks forget theirs */
    while (h->conns)      /* those not yet attached */
        conn_forget(h->conns);
    event_free(h->backoff);
    close(h->spare_fd);
    event_base_free(h->base);
    memset(h->codes, 0, sizeof h->codes);
    memset(h->token, 0, strlen(h->token));
    msr_free(h->token);
    msr_buf_cleanup(&h->metrics);
    msr_buf_cleanup(&h->job);
    msr_buf_cleanup(&h->out_body);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
    msr_free(h);
}
