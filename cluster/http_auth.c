/* The dashboard's access (cluster/http.h): the job token as a bearer
 * header, one-time login codes and the session cookie they give. */
#include "cluster/http_impl.h"

#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>

#include "base/time.h"
#include "base/util.h"

/* Compares without leaking where the first difference is. */
static int secret_equal(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    unsigned char diff = alen != blen;
    for (size_t i = 0; i < alen && i < blen; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0 && blen > 0;
}

/* Whether the request carries the token (Bearer). */
int msr_http_bearer_ok(msr_http_t *h, struct evhttp_request *req)
{
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *auth = evhttp_find_header(in, "Authorization");
    return auth && strncmp(auth, "Bearer ", 7) == 0 &&
           secret_equal(auth + 7, strlen(auth + 7), h->token);
}

/* Whether the request carries the token (Bearer) or the session cookie. */
int msr_http_authorized(msr_http_t *h, struct evhttp_request *req)
{
    if (msr_http_bearer_ok(h, req))
        return 1;
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *cookie = evhttp_find_header(in, "Cookie");
    while (cookie && *cookie) {
        while (*cookie == ' ' || *cookie == ';')
            cookie++;
        const char *end = strchr(cookie, ';');
        size_t len = end ? (size_t)(end - cookie) : strlen(cookie);
        size_t nlen = strlen(h->cookie_name);
        if (len > nlen && memcmp(cookie, h->cookie_name, nlen) == 0 && cookie[nlen] == '=' &&
            secret_equal(cookie + nlen + 1, len - nlen - 1, h->session))
            return 1;
        cookie = end;
    }
    return 0;
}

void msr_http_code_new(char code[MSR_HTTP_CODE_LEN])
{
    unsigned char rnd[MSR_HTTP_CODE_BYTES];
    msr_random_bytes(rnd, sizeof rnd);
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(code + 2 * i, 3, "%02x", rnd[i]);
    memset(rnd, 0, sizeof rnd);
}

/* Takes code (a login) if it is one of h's: 1 valid (it is used up now),
 * -1 known but expired, 0 unknown. Every slot is compared, in constant
 * time. Under h->lock. */
static int code_take(msr_http_t *h, const char *code, uint64_t now)
{
    int found = -1;
    for (int i = 0; i < MSR_HTTP_CODES; i++)
        if (h->codes[i].code[0] && secret_equal(code, strlen(code), h->codes[i].code))
            found = i;
    if (found < 0)
        return 0;
    login_code_t *c = &h->codes[found];
    int valid = now < c->expires_ns;
    if (valid)
        memset(c, 0, sizeof *c); /* once */
    return valid ? 1 : -1;
}

void msr_http_code_add(msr_http_t *h, const char *code, uint64_t now)
{
    login_code_t *slot = &h->codes[0];
    for (int i = 0; i < MSR_HTTP_CODES; i++) {
        login_code_t *c = &h->codes[i];
        if (c->code[0] == '\0' || c->expires_ns <= now) {
            slot = c;
            break;
        }
        if (c->expires_ns < slot->expires_ns)
            slot = c;
    }
    snprintf(slot->code, sizeof slot->code, "%s", code);
    slot->expires_ns = now + h->login_ttl_ns;
}

/* /login?code=CODE: a code msrun printed, unused and unexpired, gives a
 * session cookie. */
void msr_http_serve_login(msr_http_t *h, struct evhttp_request *req, const char *query)
{
    struct evkeyvalq params;
    memset(&params, 0, sizeof params);
    int ok = 0;
    if (query && evhttp_parse_query_str(query, &params) == 0) {
        const char *code = evhttp_find_header(&params, "code");
        pthread_mutex_lock(&h->lock);
        if (code)
            ok = code_take(h, code, msr_now_ns());
        pthread_mutex_unlock(&h->lock);
    }
    evhttp_clear_headers(&params);
    if (ok != 1) {
        atomic_fetch_add(&h->refused, 1);
        msr_http_send_text(req, 401, "Unauthorized",
                           ok < 0
                               ? "this login code has expired: run 'msrun dashboard' for a new one"
                               : "unknown or already used login code");
        return;
    }
    char cookie[160];
    snprintf(cookie, sizeof cookie, "%s=%s; HttpOnly; SameSite=Strict; Path=/", h->cookie_name,
             h->session);
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    evhttp_add_header(out, "Set-Cookie", cookie);
    evhttp_add_header(out, "Location", "/");
    msr_http_send_text(req, 303, "See Other", "logged in");
}

/* POST /api/login (with the token): a new login code, for `msrun
 * dashboard`. */
void msr_http_serve_mint(msr_http_t *h, struct evhttp_request *req)
{
    char code[MSR_HTTP_CODE_LEN];
    msr_http_code_new(code);
    pthread_mutex_lock(&h->lock);
    msr_http_code_add(h, code, msr_now_ns());
    pthread_mutex_unlock(&h->lock);
    msr_http_common_headers(req, "application/json");
    struct evbuffer *body = evbuffer_new();
    if (body)
        evbuffer_add_printf(body, "{\"code\":\"%s\",\"ttl\":%llu,\"cookie\":\"%s\"}\n", code,
                            (unsigned long long)(h->login_ttl_ns / 1000000000ull), h->cookie_name);
    evhttp_send_reply(req, 200, "OK", body);
    if (body)
        evbuffer_free(body);
    memset(code, 0, sizeof code);
}
