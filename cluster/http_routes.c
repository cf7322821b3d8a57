/* The dashboard's paths (cluster/http.h): /metrics, /api/job,
 * /api/output, the page, and the login's two. */
#include "cluster/http_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "base/time.h"
#include "cluster/page.h"

void msr_http_common_headers(struct evhttp_request *req, const char *type)
{
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    evhttp_add_header(out, "Content-Type", type);
    evhttp_add_header(out, "Cache-Control", "no-store");
    evhttp_add_header(out, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(out, "X-Frame-Options", "DENY");
}

void msr_http_send_text(struct evhttp_request *req, int code, const char *reason, const char *text)
{
    msr_http_common_headers(req, "text/plain; charset=utf-8");
    struct evbuffer *body = evbuffer_new();
    if (body)
        evbuffer_add_printf(body, "%s\n", text);
    evhttp_send_reply(req, code, reason, body);
    if (body)
        evbuffer_free(body);
}

/* The snapshot, fresh: asks the core's thread for one unless the last is
 * young, and waits a bounded time for it. */
static void serve_snapshot(msr_http_t *h, struct evhttp_request *req, int json)
{
    pthread_mutex_lock(&h->lock);
    if (msr_now_ns() - h->snap_ns > FRESH_MS * 1000000ull || h->snap_seq == 0) {
        uint64_t seq = h->snap_seq;
        atomic_store(&h->want, 1);
        struct timespec ts = msr_realtime_in_ms(WAIT_MS);
        while (h->snap_seq == seq && !atomic_load(&h->stop))
            if (pthread_cond_timedwait(&h->cond, &h->lock, &ts) != 0)
                break;
    }
    msr_buf_t *b = json ? &h->job : &h->metrics;
    if (b->len == 0) {
        pthread_mutex_unlock(&h->lock);
        msr_http_send_text(req, 503, "Service Unavailable", "the coordinator has not answered yet");
        return;
    }
    struct evbuffer *body = evbuffer_new();
    if (body)
        evbuffer_add(body, b->data, b->len);
    pthread_mutex_unlock(&h->lock);
    msr_http_common_headers(req,
                            json ? "application/json" : "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, 200, "OK", body);
    if (body)
        evbuffer_free(body);
}

/* /api/output?rank=N: the core's answer for the rank (its last output
 * lines, or 202 while they are on their way), waited for a bounded time. */
static void serve_output(msr_http_t *h, struct evhttp_request *req, const char *query)
{
    struct evkeyvalq params;
    memset(&params, 0, sizeof params);
    long rank = -1;
    if (query && evhttp_parse_query_str(query, &params) == 0) {
        const char *v = evhttp_find_header(&params, "rank");
        size_t len = v ? strlen(v) : 0;
        if (len > 0 && len <= 9 && strspn(v, "0123456789") == len)
            rank = strtol(v, NULL, 10);
    }
    evhttp_clear_headers(&params);
    if (rank < 0) {
        msr_http_common_headers(req, "application/json");
        struct evbuffer *body = evbuffer_new();
        if (body)
            evbuffer_add_printf(body, "{\"error\":\"rank=N expected (a rank: 0 to 999999999)\"}\n");
        evhttp_send_reply(req, 400, "Bad Request", body);
        if (body)
            evbuffer_free(body);
        return;
    }
    pthread_mutex_lock(&h->lock);
    uint64_t seq = ++h->out_seq;
    h->out_rank = (int)rank;
    atomic_store(&h->out_want, 1);
    struct timespec ts = msr_realtime_in_ms(WAIT_MS);
    while (h->out_done != seq && !atomic_load(&h->stop))
        if (pthread_cond_timedwait(&h->cond, &h->lock, &ts) != 0)
            break;
    if (h->out_done != seq) {
        atomic_store(&h->out_want, 0);
        pthread_mutex_unlock(&h->lock);
        msr_http_send_text(req, 503, "Service Unavailable", "the coordinator has not answered yet");
        return;
    }
    int code = h->out_code;
    struct evbuffer *body = evbuffer_new();
    if (body)
        evbuffer_add(body, h->out_body.data, h->out_body.len);
    pthread_mutex_unlock(&h->lock);
    msr_http_common_headers(req, "application/json");
    evhttp_send_reply(req, code,
                      code == 200   ? "OK"
                      : code == 202 ? "Accepted"
                      : code == 404 ? "Not Found"
                                    : "Service Unavailable",
                      body);
    if (body)
        evbuffer_free(body);
}

/* The token is missing: 401. */
static void refuse(msr_http_t *h, struct evhttp_request *req)
{
    atomic_fetch_add(&h->refused, 1);
    evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
                      "Bearer realm=\"msrun\"");
    msr_http_send_text(
        req, 401, "Unauthorized",
        "the job token is needed: Authorization: Bearer TOKEN, or a login URL of msrun's");
}

static void serve_page(struct evhttp_request *req)
{
    /* the job's page (cluster/page.h): its own script and style inline,
     * nothing loaded from elsewhere */
    msr_http_common_headers(req, "text/html; charset=utf-8");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Security-Policy",
                      "default-src 'none'; script-src 'unsafe-inline'; "
                      "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:");
    struct evbuffer *body = evbuffer_new();
    if (body)
        evbuffer_add(body, msr_page_index, msr_page_index_len);
    evhttp_send_reply(req, 200, "OK", body);
    if (body)
        evbuffer_free(body);
}

void msr_http_route(msr_http_t *h, struct evhttp_request *req)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (path == NULL || path[0] == '\0')
        path = "/";
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (strcmp(path, "/api/login") == 0) {
        if (cmd != EVHTTP_REQ_POST)
            msr_http_send_text(req, 405, "Method Not Allowed", "POST with the job token");
        else if (!msr_http_bearer_ok(h, req))
            refuse(h, req);
        else
            msr_http_serve_mint(h, req);
        return;
    }
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        msr_http_send_text(req, 405, "Method Not Allowed", "GET only");
        return;
    }
    if (strcmp(path, "/login") == 0) {
        msr_http_serve_login(h, req, evhttp_uri_get_query(uri));
        return;
    }
    if (!msr_http_authorized(h, req)) {
        refuse(h, req);
        return;
    }
    if (strcmp(path, "/metrics") == 0)
        serve_snapshot(h, req, 0);
    else if (strcmp(path, "/api/job") == 0)
        serve_snapshot(h, req, 1);
    else if (strcmp(path, "/api/output") == 0)
        serve_output(h, req, evhttp_uri_get_query(uri));
    else if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0)
        serve_page(req);
    else
        msr_http_send_text(req, 404, "Not Found", "no such page");
}
