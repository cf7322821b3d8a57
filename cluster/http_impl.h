/* The dashboard server's parts (cluster/http.h), shared by its files:
 * http.c (the thread, connections and their limits), http_auth.c (the
 * token, login codes and the session cookie) and http_routes.c (what each
 * path answers). Nothing outside cluster/http*.c includes it. */
#ifndef MSR_CLUSTER_HTTP_IMPL_H
#define MSR_CLUSTER_HTTP_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/time.h>

#include <event2/http.h>

#include "cluster/http.h"

/* A request waits at most this long for a fresh snapshot, and a snapshot
 * younger than FRESH_MS is served as it is. */
#define WAIT_MS  500
#define FRESH_MS 200

/* Accepts paused for want of descriptors: this long first, doubling to
 * the most. */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 1000

#define COOKIE "msrun_session_"

/* A login code and when it expires ("" once used, or never given). */
typedef struct login_code {
    char code[MSR_HTTP_CODE_LEN];
    uint64_t expires_ns;
} login_code_t;

/* An open connection, from its accept (msr_http_t.conns). evcon is NULL
 * until conn_timer has attached it (just after the accept); timer is the
 * request's deadline. The server's thread only. */
typedef struct http_conn {
    msr_http_t *h;
    struct bufferevent *bev;
    struct evhttp_connection *evcon;
    struct event *timer;
    int over; /* one past the cap when accepted: closed once attached */
    struct http_conn *prev, *next;
} http_conn_t;

struct msr_http {
    struct event_base *base;
    struct evhttp *http;
    struct event *wake; /* on wake_fd: msr_http_stop ends the loop through it */
    int wake_fd;
    pthread_t thread;
    atomic_int stop;
    char *token;
    login_code_t codes[MSR_HTTP_CODES]; /* under lock */
    uint64_t login_ttl_ns;
    char session[33];     /* the cookie's value, hex */
    char cookie_name[40]; /* COOKIE<port> */
    /* connections (the server's thread) */
    http_conn_t *conns;
    int nconns, max_conns;
    struct timeval deadline;
    struct evconnlistener *listener;
    struct event *backoff; /* re-enables the listener */
    int backoff_ms;        /* 0: accepting */
    int spare_fd;          /* given up to shed a connection when out of descriptors */
    atomic_ulong shed;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    msr_buf_t metrics, job; /* the latest snapshots (under lock) */
    uint64_t snap_ns;       /* when they were published */
    uint64_t snap_seq;
    atomic_int want;
    atomic_ulong served, refused;
    /* /api/output's ask: the thread serves one request at a time, so there
     * is one at most (under lock, but out_want) */
    atomic_int out_want;
    int out_rank;
    uint64_t out_seq, out_done; /* the ask's number, and the last answered */
    int out_code;
    msr_buf_t out_body;
};

/* Whether the request carries the token (Bearer), and the token or the
 * session cookie. The server's thread. */
int msr_http_bearer_ok(msr_http_t *h, struct evhttp_request *req);
int msr_http_authorized(msr_http_t *h, struct evhttp_request *req);

/* Adds code, alive for h's ttl from now, in place of an unused slot, or
 * else of the one that expires first. Under h->lock (or before the
 * thread starts). */
void msr_http_code_add(msr_http_t *h, const char *code, uint64_t now);

/* /login?code=CODE (a session cookie for an unused, unexpired code) and
 * POST /api/login (a new code; the caller checked the token). */
void msr_http_serve_login(msr_http_t *h, struct evhttp_request *req, const char *query);
void msr_http_serve_mint(msr_http_t *h, struct evhttp_request *req);

/* The headers every answer carries, and a plain text answer. */
void msr_http_common_headers(struct evhttp_request *req, const char *type);
void msr_http_send_text(struct evhttp_request *req, int code, const char *reason, const char *text);

/* Answers a request read whole: the token or cookie checked, then its
 * path served. The server's thread. */
void msr_http_route(msr_http_t *h, struct evhttp_request *req);

#endif
