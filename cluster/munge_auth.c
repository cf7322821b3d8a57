/* Munge credentials for the Auth call: encoded by a node, verified by the
 * coordinator (uid, payload, freshness, replay). */
#include "cluster/munge_auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <munge.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"

uid_t msr_munge_job_uid(void)
{
    const char *s = getenv("SLURM_JOB_UID");
    if (s && *s) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(s, &end, 10);
        if (errno == 0 && *end == '\0' && s[0] != '-' && v < (unsigned long)(uid_t)-1)
            return (uid_t)v;
    }
    return getuid();
}

/* A munge error: refusals of the credential are MSR_ERR_PERMISSION, the
 * rest (munged not running, out of memory) MSR_ERR_SYSTEM. */
static msr_status_t munge_failure(munge_ctx_t ctx, munge_err_t e, const char *what)
{
    const char *why = ctx ? munge_ctx_strerror(ctx) : NULL;
    if (why == NULL)
        why = munge_strerror(e);
    if (e == EMUNGE_SOCKET || e == EMUNGE_NO_MEMORY || e == EMUNGE_SNAFU)
        return msr_err(MSR_ERR_SYSTEM, "%s: %s", what, why);
    return msr_err(MSR_ERR_PERMISSION, "%s: %s", what, why);
}

/* A context talking to socket, or NULL (msr_err_msg() says why). */
static munge_ctx_t context_create(const char *socket)
{
    munge_ctx_t ctx = munge_ctx_create();
    if (ctx == NULL) {
        msr_err_set("cannot create a munge context: out of memory");
        return NULL;
    }
    if (socket && munge_ctx_set(ctx, MUNGE_OPT_SOCKET, socket) != EMUNGE_SUCCESS) {
        msr_err_set("munge socket %s: %s", socket, munge_ctx_strerror(ctx));
        munge_ctx_destroy(ctx);
        return NULL;
    }
    return ctx;
}

msr_status_t msr_munge_encode(const char *socket, const char *job_id, const char *target,
                              uid_t job_uid, char **cred_p)
{
    char payload[1024];
    int n = snprintf(payload, sizeof payload, MSR_MUNGE_PAYLOAD_PREFIX "%s coordinator=%s", job_id,
                     target);
    if (n < 0 || (size_t)n >= sizeof payload)
        return msr_err(MSR_ERR_INVALID_ARG, "job id and coordinator address too long for munge");
    munge_ctx_t ctx = context_create(socket);
    if (ctx == NULL)
        return MSR_ERR_SYSTEM;
    msr_status_t st = MSR_OK;
    char *cred = NULL;
    munge_err_t e = munge_ctx_set(ctx, MUNGE_OPT_TTL, MSR_MUNGE_TTL_S);
    if (e == EMUNGE_SUCCESS)
        e = munge_ctx_set(ctx, MUNGE_OPT_UID_RESTRICTION, job_uid);
    if (e == EMUNGE_SUCCESS)
        e = munge_encode(&cred, ctx, payload, n);
    if (e != EMUNGE_SUCCESS) {
        st = munge_failure(ctx, e, "cannot encode a munge credential");
    } else {
        *cred_p = msr_strdup(cred);
        if (*cred_p == NULL)
            st = msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    }
    free(cred);
    munge_ctx_destroy(ctx);
    return st;
}

/* Splits "host:port", "[v6]:port" or "v6:port" (port after the last ':'):
 * the host without brackets in host, 0 on success. */
static int split_address(const char *addr, size_t len, char *host, size_t hostlen, long *port_p)
{
    const char *colon = NULL;
    for (size_t i = 0; i < len; i++)
        if (addr[i] == ':')
            colon = addr + i;
    if (colon == NULL || colon + 1 == addr + len)
        return -1;
    char digits[8];
    size_t dn = (size_t)(addr + len - colon - 1);
    if (dn >= sizeof digits)
        return -1;
    memcpy(digits, colon + 1, dn);
    digits[dn] = '\0';
    char *end;
    long port = strtol(digits, &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535)
        return -1;
    const char *h = addr;
    size_t hn = (size_t)(colon - addr);
    if (hn >= 2 && h[0] == '[' && h[hn - 1] == ']') {
        h++;
        hn -= 2;
    }
    if (hn >= hostlen)
        return -1;
    memcpy(host, h, hn);
    host[hn] = '\0';
    *port_p = port;
    return 0;
}

int msr_munge_payload_matches(const char *payload, size_t len, const char *job_id, const char *bind)
{
    const size_t plen = strlen(MSR_MUNGE_PAYLOAD_PREFIX);
    if (len < plen || memcmp(payload, MSR_MUNGE_PAYLOAD_PREFIX, plen) != 0 ||
        memchr(payload, '\0', len) != NULL) {
        msr_err_set("its payload is not an msrun credential");
        return 0;
    }
    const char *job = payload + plen;
    const char *sep = " coordinator=";
    const char *end = payload + len;
    const char *at = NULL;
    /* the last separator: a job id may hold spaces, the address does not */
    for (const char *p = job; p + strlen(sep) <= end; p++)
        if (memcmp(p, sep, strlen(sep)) == 0)
            at = p;
    if (at == NULL) {
        msr_err_set("its payload names no coordinator");
        return 0;
    }
    size_t jn = (size_t)(at - job);
    if (jn != strlen(job_id) || memcmp(job, job_id, jn) != 0) {
        msr_err_set("it was made for another job (%.*s, not %s)", (int)(jn < 200 ? jn : 200), job,
                    job_id);
        return 0;
    }
    const char *addr = at + strlen(sep);
    char host[256], bhost[256];
    long port, bport;
    if (split_address(addr, (size_t)(end - addr), host, sizeof host, &port) != 0 ||
        split_address(bind, strlen(bind), bhost, sizeof bhost, &bport) != 0) {
        msr_err_set("its coordinator address is malformed");
        return 0;
    }
    int wildcard = bhost[0] == '\0' || strcmp(bhost, "0.0.0.0") == 0 || strcmp(bhost, "::") == 0;
    if (port != bport || (!wildcard && strcmp(host, bhost) != 0)) {
        msr_err_set("it was made for another coordinator (%s:%ld, not %s)", host, port, bind);
        return 0;
    }
    return 1;
}

/* A credential accepted once, remembered until it expires. */
typedef struct seen_cred {
    uint64_t hash;
    time_t expires;
} seen_cred_t;

struct msr_munge_verifier {
    char *socket, *job_id, *bind;
    uid_t job_uid;
    seen_cred_t *seen;
    size_t nseen, capseen;
};

msr_status_t msr_munge_verifier_create(const msr_munge_verifier_config_t *config,
                                       msr_munge_verifier_t **verifier_p)
{
    if (config->job_id == NULL || config->job_id[0] == '\0' || config->bind == NULL)
        return msr_err(MSR_ERR_INVALID_ARG, "munge authentication needs the job's id");
    msr_munge_verifier_t *v = msr_calloc(1, sizeof *v);
    if (v == NULL)
        return MSR_ERR_NO_MEMORY;
    v->job_id = msr_strdup(config->job_id);
    v->bind = msr_strdup(config->bind);
    v->socket = config->socket ? msr_strdup(config->socket) : NULL;
    v->job_uid = config->job_uid;
    if (v->job_id == NULL || v->bind == NULL || (config->socket && v->socket == NULL)) {
        msr_munge_verifier_destroy(v);
        return MSR_ERR_NO_MEMORY;
    }
    *verifier_p = v;
    return MSR_OK;
}

void msr_munge_verifier_destroy(msr_munge_verifier_t *v)
{
    if (v == NULL)
        return;
    msr_free(v->socket);
    msr_free(v->job_id);
    msr_free(v->bind);
    msr_free(v->seen);
    msr_free(v);
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Remembers a credential until it expires: 0, or -1 when it was seen. The
 * list holds only accepted credentials (of the job's user) that have not
 * expired, so no stranger can grow it. */
static int remember(msr_munge_verifier_t *v, uint64_t hash, time_t expires)
{
    time_t now = time(NULL);
    size_t k = 0;
    int seen = 0;
    for (size_t i = 0; i < v->nseen; i++) {
        if (v->seen[i].expires < now)
            continue;
        seen |= v->seen[i].hash == hash;
        v->seen[k++] = v->seen[i];
    }
    v->nseen = k;
    if (seen)
        return -1;
    if (v->nseen == v->capseen) {
        size_t cap = v->capseen ? 2 * v->capseen : 16;
        seen_cred_t *grown = msr_realloc(v->seen, cap * sizeof *grown);
        if (grown == NULL)
            return -1; /* refused: safe, and the node retries */
        v->seen = grown;
        v->capseen = cap;
    }
    v->seen[v->nseen++] = (seen_cred_t){hash, expires};
    return 0;
}

msr_status_t msr_munge_verify(msr_munge_verifier_t *v, const char *cred)
{
    munge_ctx_t ctx = context_create(v->socket);
    if (ctx == NULL)
        return MSR_ERR_SYSTEM;
    void *payload = NULL;
    int len = 0;
    uid_t uid = (uid_t)-1;
    gid_t gid;
    msr_status_t st = MSR_OK;
    munge_err_t e = munge_decode(cred, ctx, &payload, &len, &uid, &gid);
    if (e != EMUNGE_SUCCESS) {
        st = munge_failure(ctx, e, "munge refused the credential");
        goto out;
    }
    if (uid != v->job_uid) {
        st = msr_err(MSR_ERR_PERMISSION, "the credential is of uid %u, not the job's (uid %u)",
                     (unsigned)uid, (unsigned)v->job_uid);
        goto out;
    }
    if (!msr_munge_payload_matches(payload ? payload : "", (size_t)len, v->job_id, v->bind)) {
        st = msr_err_prefix(MSR_ERR_PERMISSION, "the credential is not for this job");
        goto out;
    }
    time_t encoded = 0;
    int ttl = MSR_MUNGE_TTL_S;
    munge_ctx_get(ctx, MUNGE_OPT_ENCODE_TIME, &encoded);
    munge_ctx_get(ctx, MUNGE_OPT_TTL, &ttl);
    if (remember(v, fnv1a(cred), encoded + (ttl > 0 ? ttl : MSR_MUNGE_TTL_S) + 1) != 0)
        st = msr_err(MSR_ERR_PERMISSION, "the credential was already used (a replay)");
out:
    free(payload);
    munge_ctx_destroy(ctx);
    return st;
}
