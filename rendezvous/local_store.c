/* The store of a singleton job (a libmsrun program started without msrun or
 * a coordinator): the coordinator's store semantics (store_core.c) served in
 * this process. Threads of the program may wait on each other (a get of a
 * key another thread sets, a barrier of two threads): a held call's thread
 * sleeps on a condition variable until the core answers it. */
#include "rendezvous/local_store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/time.h"
#include "rendezvous/store_core.h"

/* A caller's call while the core has it: answered by the core's ops (on
 * this caller's thread or another's, always under the lock). */
typedef struct lcall {
    uint64_t deadline;
    void *data; /* the core's slot */
    int done;
    msr_status_t st;
    ProtobufCMessage *resp;
    char message[512];
} lcall_t;

struct msr_local_store {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* a call was answered */
    msr_store_core_t *core;
};

static ProtobufCMessage *unpack_answer(msr_rpc_method_t method, const uint8_t *data, size_t len)
{
    return protobuf_c_message_unpack(msr_rpc_methods[method].response, &msr_rpc_pb_allocator, len,
                                     data);
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

static void answered(msr_local_store_t *ls, lcall_t *lc, msr_status_t st)
{
    lc->done = 1;
    lc->st = st;
    if (st == MSR_OK && lc->resp == NULL) {
        lc->st = MSR_ERR_NO_MEMORY;
        snprintf(lc->message, sizeof lc->message, "out of memory");
    }
    pthread_cond_broadcast(&ls->changed);
}

static void l_reply(void *ctx, void *call, const ProtobufCMessage *resp)
{
    lcall_t *lc = call;
    lc->resp = copy_message(resp);
    answered(ctx, lc, MSR_OK);
}

static void l_reply_blob(void *ctx, void *call, msr_blob_t *blob)
{
    lcall_t *lc = call;
    lc->resp = unpack_answer(MSR_RPC_ALLGATHER, blob->data, blob->len);
    answered(ctx, lc, MSR_OK);
}

static void l_fail(void *ctx, void *call, msr_rpc_code_t code, const char *message)
{
    lcall_t *lc = call;
    snprintf(lc->message, sizeof lc->message, "%s", message);
    answered(ctx, lc, msr_rpc_status_from_grpc(code));
}

static uint64_t l_deadline(void *ctx, void *call)
{
    (void)ctx;
    return ((lcall_t *)call)->deadline;
}

static void l_set_data(void *ctx, void *call, void *data)
{
    (void)ctx;
    ((lcall_t *)call)->data = data;
}

static void *l_get_data(void *ctx, void *call)
{
    (void)ctx;
    return ((lcall_t *)call)->data;
}

msr_status_t msr_local_store_create(msr_local_store_t **ls_p)
{
    msr_local_store_t *ls = msr_calloc(1, sizeof *ls);
    if (ls == NULL)
        return MSR_ERR_NO_MEMORY;
    msr_store_ops_t ops = {
        .ctx = ls,
        .reply = l_reply,
        .reply_blob = l_reply_blob,
        .fail = l_fail,
        .deadline = l_deadline,
        .set_data = l_set_data,
        .get_data = l_get_data,
        .no_resends = 1, /* in this process: nothing is sent again */
    };
    if (msr_store_core_create(NULL, &ops, &ls->core) != MSR_OK) {
        msr_free(ls);
        return MSR_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&ls->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ls->changed, &ca);
    pthread_condattr_destroy(&ca);
    *ls_p = ls;
    return MSR_OK;
}

size_t msr_local_store_released_bytes(msr_local_store_t *ls)
{
    pthread_mutex_lock(&ls->lock);
    size_t n = msr_store_core_released_bytes(ls->core);
    pthread_mutex_unlock(&ls->lock);
    return n;
}

void msr_local_store_destroy(msr_local_store_t *ls)
{
    if (ls == NULL)
        return;
    msr_store_core_destroy(ls->core);
    pthread_cond_destroy(&ls->changed);
    pthread_mutex_destroy(&ls->lock);
    msr_free(ls);
}

/* Waits (lock held) until a call is answered or deadline passes. */
static void wait_change(msr_local_store_t *ls, uint64_t deadline)
{
    if (deadline == MSR_DEADLINE_NEVER) {
        pthread_cond_wait(&ls->changed, &ls->lock);
        return;
    }
    uint64_t now = msr_now_ns();
    if (deadline <= now)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t left = deadline - now;
    uint64_t ns = (uint64_t)ts.tv_nsec + left % 1000000000ull;
    ts.tv_sec += (time_t)(left / 1000000000ull + ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    pthread_cond_timedwait(&ls->changed, &ls->lock, &ts);
}

/* The calls that are not the store's own, answered here. */
static ProtobufCMessage *other_call(msr_rpc_method_t method, lcall_t *lc)
{
    if (method == MSR_RPC_BEAT) {
        Msr__BeatResponse a = MSR__BEAT_RESPONSE__INIT;
        return copy_message(&a.base);
    }
    if (method == MSR_RPC_STATUS) {
        Msr__StatusResponse a = MSR__STATUS_RESPONSE__INIT;
        a.job_id = "singleton";
        a.state = MSR__JOB_STATE__JOB_RUNNING;
        a.world_size = 1;
        a.node_count = 1;
        return copy_message(&a.base);
    }
    lc->st = MSR_ERR_UNSUPPORTED;
    snprintf(lc->message, sizeof lc->message, "%s has no meaning in a singleton job",
             msr_rpc_methods[method].name);
    return NULL;
}

msr_status_t msr_local_store_call(msr_local_store_t *ls, msr_rpc_method_t method,
                                  const ProtobufCMessage *req, uint64_t deadline,
                                  ProtobufCMessage **resp_p)
{
    lcall_t lc = {.deadline = deadline, .st = MSR_OK};
    if (msr_store_core_method(method)) {
        pthread_mutex_lock(&ls->lock);
        msr_store_core_call(ls->core, &lc, method, req);
        /* Held: whichever waiting thread wakes first runs the timers. */
        while (!lc.done) {
            wait_change(ls, msr_store_core_next_deadline(ls->core));
            msr_store_core_tick(ls->core, msr_now_ns());
        }
        pthread_mutex_unlock(&ls->lock);
    } else {
        lc.resp = other_call(method, &lc);
        if (lc.st == MSR_OK && lc.resp == NULL) {
            lc.st = MSR_ERR_NO_MEMORY;
            snprintf(lc.message, sizeof lc.message, "out of memory");
        }
    }
    if (lc.st != MSR_OK) {
        msr_rpc_message_free(lc.resp);
        return msr_err(lc.st, "%s", lc.message);
    }
    *resp_p = lc.resp;
    return MSR_OK;
}
