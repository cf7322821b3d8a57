/* The store of a singleton job (a libmsrun program started without msrun or
 * a coordinator): the same requests and answers as the coordinator's store,
 * served in this process. Threads of the program may wait on each other
 * (a get of a key another thread sets, a barrier of two threads). */
#include "rendezvous/local_store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/map.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "rendezvous/store_limits.h"

typedef struct lvalue {
    size_t len;
    uint8_t data[];
} lvalue_t;

/* A barrier or allgather of count participants (threads of this process).
 * Once complete it leaves the map; the threads still waiting on it read its
 * result and the last one to leave frees it. A thread that gives up
 * (deadline) takes its arrival and contributions back; the group leaves the
 * map when nobody has arrived. While in the map it counts in the store's
 * usage for `charge` bytes (its name, entry tables and contributions). */
typedef struct lgroup {
    uint32_t count, arrived;
    uint64_t charge;
    int done;
    int waiting;       /* threads blocked on it */
    uint8_t **entries; /* allgather: count contributions */
    size_t *lens;
    uint8_t *result; /* allgather: the packed answer */
    size_t result_len;
} lgroup_t;

struct msr_local_store {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    msr_map_t kv, groups;
    msr_store_limits_t limits; /* the defaults of store_limits.h */
    msr_store_usage_t usage;
};

static void value_free(void *v)
{
    msr_free(v);
}

static void group_free(void *v)
{
    lgroup_t *g = v;
    if (g == NULL)
        return;
    for (uint32_t i = 0; g->entries && i < g->count; i++)
        msr_free(g->entries[i]);
    msr_free(g->entries);
    msr_free(g->lens);
    msr_free(g->result);
    msr_free(g);
}

msr_status_t msr_local_store_create(msr_local_store_t **ls_p)
{
    msr_local_store_t *ls = msr_calloc(1, sizeof *ls);
    if (ls == NULL)
        return MSR_ERR_NO_MEMORY;
    pthread_mutex_init(&ls->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ls->changed, &ca);
    pthread_condattr_destroy(&ca);
    ls->limits = msr_store_limits_resolve(NULL);
    *ls_p = ls;
    return MSR_OK;
}

void msr_local_store_destroy(msr_local_store_t *ls)
{
    if (ls == NULL)
        return;
    msr_map_cleanup(&ls->kv, value_free);
    msr_map_cleanup(&ls->groups, group_free);
    pthread_cond_destroy(&ls->changed);
    pthread_mutex_destroy(&ls->lock);
    msr_free(ls);
}

/* Waits for a change until deadline (lock held); 0 once it passed. */
static int wait_change(msr_local_store_t *ls, uint64_t deadline)
{
    if (deadline == MSR_DEADLINE_NEVER) {
        pthread_cond_wait(&ls->changed, &ls->lock);
        return 1;
    }
    if (msr_deadline_passed(deadline))
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t left = (uint64_t)msr_deadline_left_ms(deadline) * 1000000ull;
    uint64_t ns = (uint64_t)ts.tv_nsec + left % 1000000000ull;
    ts.tv_sec += (time_t)(left / 1000000000ull + ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    pthread_cond_timedwait(&ls->changed, &ls->lock, &ts);
    return 1;
}

/* The answer as a message of its own, as the rpc layer would give it. */
static ProtobufCMessage *copy_message(const ProtobufCMessage *m)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = msr_malloc(len ? len : 1);
    if (buf == NULL)
        return NULL;
    protobuf_c_message_pack(m, buf);
    ProtobufCMessage *out =
        protobuf_c_message_unpack(m->descriptor, &msr_rpc_pb_allocator, len, buf);
    msr_free(buf);
    return out;
}

static msr_status_t put(msr_local_store_t *ls, const char *key, const void *data, size_t len,
                        char *err, size_t errlen)
{
    const lvalue_t *cur = msr_map_get(&ls->kv, key);
    msr_status_t st = msr_store_limits_check(&ls->limits, &ls->usage, "write", key, cur != NULL,
                                             cur ? cur->len : 0, len, err, errlen);
    if (st != MSR_OK)
        return st;
    lvalue_t *v = msr_malloc(sizeof *v + len);
    if (v == NULL)
        return MSR_ERR_NO_MEMORY;
    v->len = len;
    if (len)
        memcpy(v->data, data, len);
    void *old = NULL;
    if (msr_map_put(&ls->kv, key, v, &old) != MSR_OK) {
        msr_free(v);
        return MSR_ERR_NO_MEMORY;
    }
    msr_store_usage_put(&ls->usage, key, old != NULL, old ? ((lvalue_t *)old)->len : 0, len);
    msr_free(old);
    pthread_cond_broadcast(&ls->changed);
    return MSR_OK;
}

static msr_status_t gather_result(lgroup_t *g)
{
    size_t total = 0;
    for (uint32_t i = 0; i < g->count; i++)
        total += g->lens[i];
    uint8_t *concat = msr_malloc(total ? total : 1);
    uint32_t *lengths = msr_malloc(sizeof *lengths * g->count);
    msr_status_t st = MSR_ERR_NO_MEMORY;
    if (concat && lengths) {
        size_t off = 0;
        for (uint32_t i = 0; i < g->count; i++) {
            if (g->lens[i])
                memcpy(concat + off, g->entries[i], g->lens[i]);
            off += g->lens[i];
            lengths[i] = (uint32_t)g->lens[i];
        }
        Msr__AllgatherResponse r = MSR__ALLGATHER_RESPONSE__INIT;
        r.data.data = concat;
        r.data.len = total;
        r.n_lengths = g->count;
        r.lengths = lengths;
        size_t len = protobuf_c_message_get_packed_size(&r.base);
        g->result = msr_malloc(len ? len : 1);
        if (g->result) {
            g->result_len = protobuf_c_message_pack(&r.base, g->result);
            st = MSR_OK;
        }
    }
    msr_free(concat);
    msr_free(lengths);
    return st;
}

/* The group leaves the map (complete, or nobody left in it) and the usage. */
static void group_unlist(msr_local_store_t *ls, const char *key, lgroup_t *g)
{
    msr_map_remove(&ls->groups, key);
    ls->usage.keys = ls->usage.keys ? ls->usage.keys - 1 : 0;
    ls->usage.bytes = ls->usage.bytes >= g->charge ? ls->usage.bytes - g->charge : 0;
}

/* Takes back the n contributions given by one caller (all present). */
static void group_withdraw(msr_local_store_t *ls, lgroup_t *g, Msr__Contribution **entries,
                           size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t idx = entries[i]->index;
        g->charge -= g->lens[idx];
        ls->usage.bytes = ls->usage.bytes >= g->lens[idx] ? ls->usage.bytes - g->lens[idx] : 0;
        msr_free(g->entries[idx]);
        g->entries[idx] = NULL;
        g->lens[idx] = 0;
    }
}

/* Barrier (entries NULL) or allgather: joins the group and waits for it. */
static msr_status_t join_group(msr_local_store_t *ls, msr_rpc_method_t m, const char *name,
                               uint32_t count, uint32_t weight, Msr__Contribution **entries,
                               size_t nentries, uint64_t deadline, ProtobufCMessage **resp_p,
                               char *err, size_t errlen)
{
    const char *what = m == MSR_RPC_BARRIER ? "barrier" : "allgather";
    char key[MSR_KEY_MAX + 16];
    snprintf(key, sizeof key, "%c/%s", m == MSR_RPC_BARRIER ? 'b' : 'a', name);
    lgroup_t *g = msr_map_get(&ls->groups, key);
    if (g != NULL && g->count != count) {
        snprintf(err, errlen, "%s '%s': count %u differs from the %u given before", what, name,
                 count, g->count);
        return MSR_ERR_INVALID_ARG;
    }
    if (m == MSR_RPC_ALLGATHER && nentries == 0) {
        snprintf(err, errlen, "allgather '%s': no contribution", name);
        return MSR_ERR_INVALID_ARG;
    }
    if (count == 0 || weight > (g ? g->count - g->arrived : count)) {
        snprintf(err, errlen, "%s '%s': more participants than its count of %u", what, name, count);
        return MSR_ERR_INVALID_ARG;
    }
    /* Every contribution checked, and the memory it takes admitted, before
     * anything changes. A new group's entry tables count too, so a count far
     * beyond what the store may hold is refused, not allocated. */
    uint64_t bytes = 0;
    for (size_t i = 0; i < nentries; i++) {
        uint32_t idx = entries[i]->index;
        int dup = idx < count && g != NULL && g->entries[idx] != NULL;
        for (size_t j = 0; j < i && !dup; j++)
            dup = entries[j]->index == idx;
        if (idx >= count || dup) {
            snprintf(err, errlen, "allgather '%s': index %u is %s", name, idx,
                     idx >= count ? "not below the count" : "given twice");
            return MSR_ERR_INVALID_ARG;
        }
        msr_status_t st = msr_store_limits_check_value(&ls->limits, what, name,
                                                       entries[i]->data.len, err, errlen);
        if (st != MSR_OK)
            return st;
        bytes += entries[i]->data.len;
    }
    uint64_t tables =
        m == MSR_RPC_ALLGATHER ? (uint64_t)count * (sizeof(uint8_t *) + sizeof(size_t)) : 0;
    uint64_t name_bytes = msr_store_entry_bytes(strlen(key), 0);
    msr_status_t st =
        msr_store_limits_check_add(&ls->limits, &ls->usage, what, name, g ? 0 : 1,
                                   bytes + (g ? 0 : name_bytes + tables), err, errlen);
    if (st != MSR_OK)
        return st;
    if (g == NULL) {
        g = msr_calloc(1, sizeof *g);
        if (g && m == MSR_RPC_ALLGATHER) {
            g->entries = msr_calloc(count, sizeof *g->entries);
            g->lens = msr_calloc(count, sizeof *g->lens);
        }
        if (g == NULL || (m == MSR_RPC_ALLGATHER && (!g->entries || !g->lens)) ||
            msr_map_put(&ls->groups, key, g, NULL) != MSR_OK) {
            group_free(g);
            return MSR_ERR_NO_MEMORY;
        }
        g->count = count;
        g->charge = name_bytes + tables;
        ls->usage.keys++;
        ls->usage.bytes += g->charge;
    }
    for (size_t i = 0; i < nentries; i++) {
        uint32_t idx = entries[i]->index;
        g->entries[idx] = msr_malloc(entries[i]->data.len ? entries[i]->data.len : 1);
        if (g->entries[idx] == NULL) {
            group_withdraw(ls, g, entries, i);
            if (g->arrived == 0) {
                group_unlist(ls, key, g);
                group_free(g);
            }
            return MSR_ERR_NO_MEMORY;
        }
        memcpy(g->entries[idx], entries[i]->data.data, entries[i]->data.len);
        g->lens[idx] = entries[i]->data.len;
        g->charge += entries[i]->data.len;
        ls->usage.bytes += entries[i]->data.len;
    }
    g->arrived += weight;
    st = MSR_OK;
    if (g->arrived == g->count) {
        group_unlist(ls, key, g);
        if (m == MSR_RPC_ALLGATHER)
            st = gather_result(g);
        g->done = 1;
        pthread_cond_broadcast(&ls->changed);
    } else {
        g->waiting++;
        while (!g->done && wait_change(ls, deadline)) {
        }
        g->waiting--;
        if (!g->done) {
            snprintf(err, errlen, "%s '%s': %u of %u participants arrived in time", what, name,
                     g->arrived, g->count);
            /* as with the coordinator: the caller's arrival and
             * contributions go, and the group once nobody is in it */
            g->arrived -= weight;
            group_withdraw(ls, g, entries, nentries);
            if (g->arrived == 0) {
                group_unlist(ls, key, g);
                group_free(g);
            }
            return MSR_ERR_TIMEOUT;
        }
        if (m == MSR_RPC_ALLGATHER && g->result == NULL)
            st = MSR_ERR_NO_MEMORY; /* the completer could not pack it */
    }
    if (st == MSR_OK && m == MSR_RPC_ALLGATHER) {
        *resp_p = protobuf_c_message_unpack(msr_rpc_methods[m].response, &msr_rpc_pb_allocator,
                                            g->result_len, g->result);
    } else if (st == MSR_OK) {
        Msr__BarrierResponse r = MSR__BARRIER_RESPONSE__INIT;
        *resp_p = copy_message(&r.base);
    }
    if (st == MSR_OK && *resp_p == NULL)
        st = MSR_ERR_NO_MEMORY;
    if (g->waiting == 0)
        group_free(g); /* the last one out */
    return st;
}

msr_status_t msr_local_store_call(msr_local_store_t *ls, msr_rpc_method_t method,
                                  const ProtobufCMessage *req, uint64_t deadline,
                                  ProtobufCMessage **resp_p, char *err, size_t errlen)
{
    msr_status_t st = MSR_OK;
    ProtobufCMessage *resp = NULL;
    err[0] = '\0';
    pthread_mutex_lock(&ls->lock);
    switch (method) {
    case MSR_RPC_SET: {
        const Msr__SetRequest *r = (const Msr__SetRequest *)req;
        st = put(ls, r->key, r->value.data, r->value.len, err, errlen);
        if (st == MSR_OK) {
            Msr__SetResponse a = MSR__SET_RESPONSE__INIT;
            resp = copy_message(&a.base);
        }
        break;
    }
    case MSR_RPC_GET: {
        const Msr__GetRequest *r = (const Msr__GetRequest *)req;
        uint64_t until = r->wait_ms == 0            ? 0
                         : r->wait_ms == UINT32_MAX ? deadline
                                                    : msr_deadline_in_ms(r->wait_ms);
        if (until > deadline)
            until = deadline;
        lvalue_t *v;
        while ((v = msr_map_get(&ls->kv, r->key)) == NULL) {
            if (until == 0 || !wait_change(ls, until)) {
                st = until == 0 ? MSR_ERR_NOT_FOUND : MSR_ERR_TIMEOUT;
                snprintf(err, errlen, "key '%.200s' %s", r->key,
                         until == 0 ? "not found" : "was not set in time");
                break;
            }
        }
        if (v) {
            Msr__GetResponse a = MSR__GET_RESPONSE__INIT;
            a.value.data = v->data;
            a.value.len = v->len;
            resp = copy_message(&a.base);
        }
        break;
    }
    case MSR_RPC_ADD: {
        const Msr__AddRequest *r = (const Msr__AddRequest *)req;
        int64_t value = 0;
        lvalue_t *v = msr_map_get(&ls->kv, r->key);
        if (v) {
            char text[32];
            if (v->len == 0 || v->len >= sizeof text) {
                st = MSR_ERR_INVALID_ARG;
            } else {
                memcpy(text, v->data, v->len);
                text[v->len] = '\0';
                if (msr_parse_i64(text, INT64_MIN, INT64_MAX, &value) != MSR_OK)
                    st = MSR_ERR_INVALID_ARG;
            }
            if (st != MSR_OK)
                snprintf(err, errlen, "add: key '%.200s' holds a value that is not a counter",
                         r->key);
        }
        if (st == MSR_OK && ((r->delta > 0 && value > INT64_MAX - r->delta) ||
                             (r->delta < 0 && value < INT64_MIN - r->delta))) {
            st = MSR_ERR_OVERFLOW;
            snprintf(err, errlen, "add: counter '%.200s' would overflow", r->key);
        }
        if (st == MSR_OK) {
            value += r->delta;
            char text[32];
            int n = snprintf(text, sizeof text, "%" PRId64, value);
            st = put(ls, r->key, text, (size_t)n, err, errlen);
        }
        if (st == MSR_OK) {
            Msr__AddResponse a = MSR__ADD_RESPONSE__INIT;
            a.value = value;
            resp = copy_message(&a.base);
        }
        break;
    }
    case MSR_RPC_COMPARE_SET: {
        const Msr__CompareSetRequest *r = (const Msr__CompareSetRequest *)req;
        lvalue_t *v = msr_map_get(&ls->kv, r->key);
        int match = r->expect_absent
                        ? v == NULL
                        : (v != NULL && v->len == r->expected.len &&
                           (v->len == 0 || memcmp(v->data, r->expected.data, v->len) == 0));
        Msr__CompareSetResponse a = MSR__COMPARE_SET_RESPONSE__INIT;
        if (match) {
            st = put(ls, r->key, r->desired.data, r->desired.len, err, errlen);
            v = msr_map_get(&ls->kv, r->key);
            a.swapped = 1;
        }
        if (st == MSR_OK) {
            if (v) {
                a.present = 1;
                a.current.data = v->data;
                a.current.len = v->len;
            }
            resp = copy_message(&a.base);
        }
        break;
    }
    case MSR_RPC_DELETE: {
        const Msr__DeleteRequest *r = (const Msr__DeleteRequest *)req;
        lvalue_t *v = msr_map_remove(&ls->kv, r->key);
        Msr__DeleteResponse a = MSR__DELETE_RESPONSE__INIT;
        a.existed = v != NULL;
        if (v)
            msr_store_usage_remove(&ls->usage, r->key, v->len);
        msr_free(v);
        resp = copy_message(&a.base);
        break;
    }
    case MSR_RPC_BARRIER: {
        const Msr__BarrierRequest *r = (const Msr__BarrierRequest *)req;
        uint64_t until = r->wait_ms == UINT32_MAX ? deadline : msr_deadline_in_ms(r->wait_ms);
        st = join_group(ls, method, r->name, r->count, r->weight ? r->weight : 1, NULL, 0,
                        until < deadline ? until : deadline, &resp, err, errlen);
        break;
    }
    case MSR_RPC_ALLGATHER: {
        const Msr__AllgatherRequest *r = (const Msr__AllgatherRequest *)req;
        uint64_t until = r->wait_ms == UINT32_MAX ? deadline : msr_deadline_in_ms(r->wait_ms);
        st = join_group(ls, method, r->name, r->count, (uint32_t)r->n_entries, r->entries,
                        r->n_entries, until < deadline ? until : deadline, &resp, err, errlen);
        break;
    }
    case MSR_RPC_BEAT: {
        Msr__BeatResponse a = MSR__BEAT_RESPONSE__INIT;
        resp = copy_message(&a.base);
        break;
    }
    default: {
        Msr__StatusResponse a = MSR__STATUS_RESPONSE__INIT;
        if (method == MSR_RPC_STATUS) {
            a.job_id = "singleton";
            a.state = MSR__JOB_STATE__JOB_RUNNING;
            a.world_size = 1;
            a.node_count = 1;
            resp = copy_message(&a.base);
        } else {
            st = MSR_ERR_UNSUPPORTED;
            snprintf(err, errlen, "%s has no meaning in a singleton job",
                     msr_rpc_methods[method].name);
        }
    }
    }
    pthread_mutex_unlock(&ls->lock);
    if (st == MSR_OK && resp == NULL) {
        st = MSR_ERR_NO_MEMORY;
        snprintf(err, errlen, "out of memory");
    }
    if (st == MSR_OK)
        *resp_p = resp;
    else
        msr_rpc_message_free(resp);
    return st;
}
