/* The coordinator's dashboard server (docs/observe.md): libevent's HTTP
 * server on a thread of its own, serving /metrics (Prometheus' text
 * format), /api/job (JSON), /api/output?rank=N (a rank's last output
 * lines) and the job's page (cluster/page.h), each request with the job
 * token (Authorization: Bearer) or a session cookie (msrun_session_<port>,
 * so two dashboards of one host keep theirs) got from /login?code=CODE: a
 * code is random, works once and expires (login_ttl_ms); POST /api/login
 * with the token mints a new one (`msrun dashboard`). The server holds at
 * most max_connections connections (one past is closed at once), pauses
 * its accepts when descriptors run out (EMFILE: 100 ms doubling to 1 s,
 * one warning an episode) and cuts a connection whose request is not read
 * whole within request_deadline_ms of its accept (or of the answer before,
 * on a kept-alive one), however slowly it trickles. The coordinator's
 * core stays on its own thread: the
 * server only serves snapshots the core's thread renders and publishes
 * when a request asks for fresh ones (msr_http_wanted / msr_http_publish). */
#ifndef MSR_CLUSTER_HTTP_H
#define MSR_CLUSTER_HTTP_H

#include "base/buf.h"
#include "msrun/base.h"

typedef struct msr_http msr_http_t;

/* A login code lives this long by default (--dashboard_login_ttl). */
#define MSR_HTTP_LOGIN_TTL_S     600
/* Open connections at most by default (--dashboard_max_connections). */
#define MSR_HTTP_CONNECTIONS_MAX 256
/* A request must be read whole within this long by default
 * (--dashboard_request_timeout). */
#define MSR_HTTP_DEADLINE_S      10
/* Login codes alive at once: a new one replaces the oldest past this. */
#define MSR_HTTP_CODES           8
/* A login code: MSR_HTTP_CODE_BYTES random bytes in hex, with its NUL. */
#define MSR_HTTP_CODE_BYTES      16
#define MSR_HTTP_CODE_LEN        (2 * MSR_HTTP_CODE_BYTES + 1)

typedef struct msr_http_config {
    const char *addr;            /* the address to listen on ("127.0.0.1") */
    int port;                    /* 0: any free port */
    const char *token;           /* the job token: required (MSR_ERR_INVALID_ARG if empty) */
    const char *login_code;      /* one-time code for /login; NULL or "": none */
    int64_t login_ttl_ms;        /* a code's life; 0: MSR_HTTP_LOGIN_TTL_S */
    int max_connections;         /* 0: MSR_HTTP_CONNECTIONS_MAX */
    int64_t request_deadline_ms; /* 0: MSR_HTTP_DEADLINE_S */
} msr_http_config_t;

/* Writes a new random login code (MSR_HTTP_CODE_LEN bytes) to code. */
void msr_http_code_new(char code[MSR_HTTP_CODE_LEN]);

/* Binds and starts serving on a new thread; *port_p gets the port bound.
 * MSR_ERR_ADDR_IN_USE when the address cannot be bound (logged). The
 * config's strings are copied. */
msr_status_t msr_http_start(const msr_http_config_t *config, int *port_p, msr_http_t **http_p);

/* Whether a request waits for a fresh snapshot (any thread; cheap). */
int msr_http_wanted(msr_http_t *http);

/* Replaces the snapshots served with metrics' and job's contents (taken:
 * the buffers are left empty) and wakes the requests that wait. Any
 * thread. */
void msr_http_publish(msr_http_t *http, msr_buf_t *metrics, msr_buf_t *job);

/* Whether a request waits for /api/output's answer (any thread; cheap
 * when none): the rank asked for and the ask's number, for
 * msr_http_output_answer (which takes body's contents: it is left empty).
 * An answer to an ask the request gave up on is dropped. */
int msr_http_output_wanted(msr_http_t *http, int *rank_p, uint64_t *seq_p);
void msr_http_output_answer(msr_http_t *http, uint64_t seq, int code, msr_buf_t *body);

/* Requests served so far, and those refused for want of the token. */
unsigned long msr_http_served(msr_http_t *http);
unsigned long msr_http_refused(msr_http_t *http);
/* Connections closed over the cap or past the request deadline, and
 * accepts paused for want of descriptors (any thread). */
unsigned long msr_http_shed(msr_http_t *http);

/* Stops the thread (at once, or when the request it serves is done) and
 * frees. NULL does nothing. */
void msr_http_stop(msr_http_t *http);

#endif
