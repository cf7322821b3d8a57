/* The etcd v3 client: unary gRPC calls to etcd's KV and Lease services.
 * LeaseKeepAlive is a stream in etcd's API; one request and one answer per
 * call is a valid use of it (the server answers each request it reads and
 * ends the stream when the client closes its side). */
#include "rendezvous/etcd.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "rendezvous/etcd.pb-c.h"
#include "rendezvous/rpc.h"

#define ENDPOINTS_MAX 8
/* One endpoint's share of a call's time before the next is tried. */
#define ATTEMPT_MS    1000

struct msr_etcd {
    msr_rpc_channel_t *ch[ENDPOINTS_MAX];
    char *target[ENDPOINTS_MAX];
    int n, cur;
};

msr_status_t msr_etcd_create(const char *endpoints, msr_etcd_t **etcd_p)
{
    msr_etcd_t *e = msr_calloc(1, sizeof *e);
    if (e == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    const char *p = endpoints ? endpoints : "";
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= 7 && strncmp(p, "http://", 7) == 0) {
            p += 7;
            len -= 7;
        }
        char t[300];
        const char *colon = len < sizeof t ? memchr(p, ':', len) : NULL;
        if (len == 0 || len >= sizeof t || colon == NULL || colon == p || colon + 1 == p + len ||
            e->n == ENDPOINTS_MAX) {
            msr_etcd_destroy(e);
            return msr_err(MSR_ERR_INVALID_ARG,
                           "bad etcd endpoint list '%s': want host:port[,host:port...] (at most "
                           "%d)",
                           endpoints ? endpoints : "", ENDPOINTS_MAX);
        }
        memcpy(t, p, len);
        t[len] = '\0';
        e->target[e->n] = msr_strdup(t);
        if (e->target[e->n] == NULL || msr_rpc_channel_create(t, NULL, &e->ch[e->n]) != MSR_OK) {
            msr_free(e->target[e->n]);
            e->target[e->n] = NULL;
            msr_etcd_destroy(e);
            return msr_err(MSR_ERR_NO_MEMORY, "cannot make a channel to etcd at %s", t);
        }
        e->n++;
        p += len;
        if (*p == ',')
            p++;
    }
    if (e->n == 0) {
        msr_etcd_destroy(e);
        return msr_err(MSR_ERR_INVALID_ARG, "no etcd endpoint given");
    }
    *etcd_p = e;
    return MSR_OK;
}

void msr_etcd_destroy(msr_etcd_t *e)
{
    if (e == NULL)
        return;
    for (int i = 0; i < e->n; i++) {
        msr_rpc_channel_destroy(e->ch[i]);
        msr_free(e->target[i]);
    }
    msr_free(e);
}

const char *msr_etcd_endpoint(const msr_etcd_t *e)
{
    return e->target[e->cur];
}

void msr_etcd_kv_free(msr_etcd_kv_t *kv)
{
    msr_free(kv->value);
    memset(kv, 0, sizeof *kv);
}

/* One call, to the endpoints in turn until one answers or the deadline
 * passes. Answers that are etcd's word (a refused request) end it. */
static msr_status_t call(msr_etcd_t *e, const char *path, const ProtobufCMessage *req,
                         const ProtobufCMessageDescriptor *desc, uint64_t deadline,
                         ProtobufCMessage **resp_p)
{
    char last[400] = "no answer";
    for (int tries = 0;; tries++) {
        uint64_t now = msr_now_ns();
        if (now >= deadline && tries > 0)
            break;
        uint64_t d = deadline;
        if (e->n > 1 && d > now + (uint64_t)ATTEMPT_MS * 1000000u)
            d = now + (uint64_t)ATTEMPT_MS * 1000000u;
        msr_status_t st = msr_rpc_call_path(e->ch[e->cur], path, req, desc, d, 0, resp_p);
        if (st == MSR_OK)
            return MSR_OK;
        snprintf(last, sizeof last, "%s", msr_err_msg());
        if (st != MSR_ERR_UNREACHABLE && st != MSR_ERR_TIMEOUT && st != MSR_ERR_INTERNAL)
            return msr_err(st, "etcd at %s refused %s: %s", e->target[e->cur], path, last);
        e->cur = (e->cur + 1) % e->n;
        if (e->cur == 0 && msr_now_ns() + 50000000u < deadline) /* all failed: not a busy loop */
            msr_rpc_channel_wait(e->ch[0], msr_now_ns() + 50000000u);
    }
    return msr_err(MSR_ERR_UNREACHABLE, "etcd unreachable at %s: %s", e->target[e->cur], last);
}

#define BYTES(s) ((ProtobufCBinaryData){strlen(s), (uint8_t *)(s)})

/* The end of the range of keys that start with prefix (prefix + 1). */
static char *prefix_end(const char *prefix)
{
    char *end = msr_strdup(prefix);
    if (end == NULL)
        return NULL;
    size_t n = strlen(end);
    while (n > 0 && (unsigned char)end[n - 1] == 0xff)
        end[--n] = '\0';
    if (n > 0)
        end[n - 1]++;
    return end;
}

msr_status_t msr_etcd_get(msr_etcd_t *e, const char *key, uint64_t deadline, msr_etcd_kv_t *kv)
{
    memset(kv, 0, sizeof *kv);
    Msretcd__RangeRequest req = MSRETCD__RANGE_REQUEST__INIT;
    req.key = BYTES(key);
    ProtobufCMessage *m = NULL;
    msr_status_t st = call(e, "/etcdserverpb.KV/Range", &req.base,
                           &msretcd__range_response__descriptor, deadline, &m);
    if (st != MSR_OK)
        return st;
    Msretcd__RangeResponse *r = (Msretcd__RangeResponse *)m;
    if (r->n_kvs > 0) {
        Msretcd__KeyValue *k = r->kvs[0];
        kv->value = msr_malloc(k->value.len + 1);
        if (kv->value == NULL) {
            msr_rpc_message_free(m);
            return msr_err(MSR_ERR_NO_MEMORY, "out of memory");
        }
        if (k->value.len)
            memcpy(kv->value, k->value.data, k->value.len);
        kv->value[k->value.len] = '\0';
        kv->len = k->value.len;
        kv->found = 1;
        kv->lease = k->lease;
        kv->create_revision = k->create_revision;
        kv->mod_revision = k->mod_revision;
    }
    msr_rpc_message_free(m);
    return MSR_OK;
}

msr_status_t msr_etcd_get_prefix(msr_etcd_t *e, const char *prefix, uint64_t deadline,
                                 msr_etcd_each_fn fn, void *arg)
{
    char *end = prefix_end(prefix);
    if (end == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    Msretcd__RangeRequest req = MSRETCD__RANGE_REQUEST__INIT;
    req.key = BYTES(prefix);
    req.range_end = BYTES(end);
    req.sort_order = MSRETCD__RANGE_REQUEST__SORT_ORDER__ASCEND;
    req.sort_target = MSRETCD__RANGE_REQUEST__SORT_TARGET__KEY;
    ProtobufCMessage *m = NULL;
    msr_status_t st = call(e, "/etcdserverpb.KV/Range", &req.base,
                           &msretcd__range_response__descriptor, deadline, &m);
    msr_free(end);
    if (st != MSR_OK)
        return st;
    Msretcd__RangeResponse *r = (Msretcd__RangeResponse *)m;
    for (size_t i = 0; st == MSR_OK && i < r->n_kvs; i++) {
        Msretcd__KeyValue *k = r->kvs[i];
        char *key = msr_malloc(k->key.len + 1);
        if (key == NULL) {
            st = msr_err(MSR_ERR_NO_MEMORY, "out of memory");
            break;
        }
        memcpy(key, k->key.data, k->key.len);
        key[k->key.len] = '\0';
        st = fn(key, k->value.data, k->value.len, arg);
        msr_free(key);
    }
    msr_rpc_message_free(m);
    return st;
}

msr_status_t msr_etcd_txn(msr_etcd_t *e, const char *guard_key, int64_t guard_lease,
                          const msr_etcd_op_t *ops, size_t nops, uint64_t deadline, int *applied)
{
    Msretcd__TxnRequest req = MSRETCD__TXN_REQUEST__INIT;
    Msretcd__Compare cmp = MSRETCD__COMPARE__INIT;
    Msretcd__Compare *cmps[1] = {&cmp};
    if (guard_key) {
        cmp.key = BYTES(guard_key);
        cmp.result = MSRETCD__COMPARE__COMPARE_RESULT__EQUAL;
        if (guard_lease) {
            cmp.target = MSRETCD__COMPARE__COMPARE_TARGET__LEASE;
            cmp.target_union_case = MSRETCD__COMPARE__TARGET_UNION_LEASE;
            cmp.lease = guard_lease;
        } else { /* absent: created at revision 0 */
            cmp.target = MSRETCD__COMPARE__COMPARE_TARGET__CREATE;
            cmp.target_union_case = MSRETCD__COMPARE__TARGET_UNION_CREATE_REVISION;
            cmp.create_revision = 0;
        }
        req.n_compare = 1;
        req.compare = cmps;
    }
    Msretcd__RequestOp *rops = msr_calloc(nops ? nops : 1, sizeof *rops);
    Msretcd__RequestOp **rptrs = msr_calloc(nops ? nops : 1, sizeof *rptrs);
    Msretcd__PutRequest *puts = msr_calloc(nops ? nops : 1, sizeof *puts);
    Msretcd__DeleteRangeRequest *dels = msr_calloc(nops ? nops : 1, sizeof *dels);
    char **ends = msr_calloc(nops ? nops : 1, sizeof *ends);
    msr_status_t st = MSR_OK;
    if (rops == NULL || rptrs == NULL || puts == NULL || dels == NULL || ends == NULL)
        st = msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; st == MSR_OK && i < nops; i++) {
        msretcd__request_op__init(&rops[i]);
        rptrs[i] = &rops[i];
        if (ops[i].value) {
            msretcd__put_request__init(&puts[i]);
            puts[i].key = BYTES(ops[i].key);
            puts[i].value = (ProtobufCBinaryData){ops[i].len, (uint8_t *)ops[i].value};
            puts[i].lease = ops[i].lease;
            rops[i].request_case = MSRETCD__REQUEST_OP__REQUEST_REQUEST_PUT;
            rops[i].request_put = &puts[i];
        } else {
            msretcd__delete_range_request__init(&dels[i]);
            dels[i].key = BYTES(ops[i].key);
            if (ops[i].prefix) {
                ends[i] = prefix_end(ops[i].key);
                if (ends[i] == NULL) {
                    st = msr_err(MSR_ERR_NO_MEMORY, "out of memory");
                    break;
                }
                dels[i].range_end = BYTES(ends[i]);
            }
            rops[i].request_case = MSRETCD__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
            rops[i].request_delete_range = &dels[i];
        }
    }
    req.n_success = nops;
    req.success = rptrs;
    ProtobufCMessage *m = NULL;
    if (st == MSR_OK)
        st = call(e, "/etcdserverpb.KV/Txn", &req.base, &msretcd__txn_response__descriptor,
                  deadline, &m);
    if (st == MSR_OK && applied)
        *applied = ((Msretcd__TxnResponse *)m)->succeeded;
    msr_rpc_message_free(m);
    for (size_t i = 0; ends && i < nops; i++)
        msr_free(ends[i]);
    msr_free(ends);
    msr_free(dels);
    msr_free(puts);
    msr_free(rptrs);
    msr_free(rops);
    return st;
}

msr_status_t msr_etcd_lease_grant(msr_etcd_t *e, int64_t ttl, uint64_t deadline, int64_t *id_p,
                                  int64_t *ttl_p)
{
    Msretcd__LeaseGrantRequest req = MSRETCD__LEASE_GRANT_REQUEST__INIT;
    req.ttl = ttl;
    ProtobufCMessage *m = NULL;
    msr_status_t st = call(e, "/etcdserverpb.Lease/LeaseGrant", &req.base,
                           &msretcd__lease_grant_response__descriptor, deadline, &m);
    if (st != MSR_OK)
        return st;
    Msretcd__LeaseGrantResponse *r = (Msretcd__LeaseGrantResponse *)m;
    if (r->error && *r->error)
        st = msr_err(MSR_ERR_REFUSED, "etcd refused a lease: %s", r->error);
    *id_p = r->id;
    if (ttl_p)
        *ttl_p = r->ttl;
    msr_rpc_message_free(m);
    return st;
}

msr_status_t msr_etcd_lease_keepalive(msr_etcd_t *e, int64_t id, uint64_t deadline, int64_t *ttl_p)
{
    Msretcd__LeaseKeepAliveRequest req = MSRETCD__LEASE_KEEP_ALIVE_REQUEST__INIT;
    req.id = id;
    ProtobufCMessage *m = NULL;
    msr_status_t st = call(e, "/etcdserverpb.Lease/LeaseKeepAlive", &req.base,
                           &msretcd__lease_keep_alive_response__descriptor, deadline, &m);
    if (st != MSR_OK)
        return st;
    *ttl_p = ((Msretcd__LeaseKeepAliveResponse *)m)->ttl;
    msr_rpc_message_free(m);
    return MSR_OK;
}

msr_status_t msr_etcd_lease_revoke(msr_etcd_t *e, int64_t id, uint64_t deadline)
{
    Msretcd__LeaseRevokeRequest req = MSRETCD__LEASE_REVOKE_REQUEST__INIT;
    req.id = id;
    ProtobufCMessage *m = NULL;
    msr_status_t st = call(e, "/etcdserverpb.Lease/LeaseRevoke", &req.base,
                           &msretcd__lease_revoke_response__descriptor, deadline, &m);
    msr_rpc_message_free(m);
    return st;
}
