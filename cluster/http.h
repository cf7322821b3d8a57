/* The coordinator's dashboard server (docs/observe.md): libevent's HTTP
 * server on a thread of its own, serving /metrics (Prometheus' text
 * format), /api/job (JSON), /api/output?rank=N (a rank's last output
 * lines) and the job's page (cluster/page.h), each request with the job
 * token (Authorization: Bearer) or a session cookie got once from
 * /login?code=CODE. The coordinator's core stays on its own thread: the
 * server only serves snapshots the core's thread renders and publishes
 * when a request asks for fresh ones (msr_http_wanted / msr_http_publish). */
#ifndef MSR_CLUSTER_HTTP_H
#define MSR_CLUSTER_HTTP_H

#include "base/buf.h"
#include "msrun/base.h"

typedef struct msr_http msr_http_t;

typedef struct msr_http_config {
    const char *addr;       /* the address to listen on ("127.0.0.1") */
    int port;               /* 0: any free port */
    const char *token;      /* the job token: required (MSR_ERR_INVALID_ARG if empty) */
    const char *login_code; /* one-time code for /login; NULL or "": none */
} msr_http_config_t;

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

/* Stops the thread (at once, or when the request it serves is done) and
 * frees. NULL does nothing. */
void msr_http_stop(msr_http_t *http);

#endif
