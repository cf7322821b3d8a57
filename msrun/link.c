/* The agent's link to the coordinator: a completion thread hands finished
 * gRPC calls to the event loop through an eventfd. */
#include "launcher/link.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/list.h"
#include "base/log.h"
#include "base/time.h"

typedef struct link_call {
    msr_rpc_async_t async;
    msr_link_t *link;
    msr_link_cb_t cb;
    void *arg;
    int finished;    /* set by the completion thread */
    int moved;       /* cancelled by a retarget (the event loop's) */
    msr_list_t node; /* in link->calls */
} link_call_t;

struct msr_link {
    struct event_base *base;
    struct event *ev;
    int efd;
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *channel;
    msr_rpc_channel_t **old; /* replaced channels: calls in flight still use them */
    int nold;
    char *token;
    msr_rpc_tls_t tls; /* strings owned by the caller's options */
    pthread_t thread;
    atomic_int stop;
    pthread_mutex_t lock;
    msr_list_t calls; /* every call started and not yet delivered */
    int pending;
};

static void *completion_thread(void *arg)
{
    msr_link_t *l = arg;
    while (!atomic_load(&l->stop))
        if (msr_rpc_loop_poll(l->loop, msr_deadline_in_ms(100)) < 0)
            break;
    return NULL;
}

/* On the completion thread: mark finished and wake the event loop. */
static void call_done(msr_rpc_async_t *a)
{
    link_call_t *lc = MSR_CONTAINER_OF(a, link_call_t, async);
    msr_link_t *l = lc->link;
    pthread_mutex_lock(&l->lock);
    lc->finished = 1;
    pthread_mutex_unlock(&l->lock);
    uint64_t one = 1;
    ssize_t w = write(l->efd, &one, sizeof one);
    (void)w; /* the counter cannot overflow in practice; a failed write only delays */
}

/* On the event-loop thread: deliver every finished call. */
static void on_wakeup(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    msr_link_t *l = arg;
    uint64_t n;
    ssize_t r = read((int)fd, &n, sizeof n);
    (void)r;
    for (;;) {
        link_call_t *lc = NULL;
        pthread_mutex_lock(&l->lock);
        msr_list_t *pos, *tmp;
        msr_list_for_each_safe(pos, tmp, &l->calls)
        {
            link_call_t *c = MSR_CONTAINER_OF(pos, link_call_t, node);
            if (c->finished) {
                msr_list_remove(&c->node);
                l->pending--;
                lc = c;
                break;
            }
        }
        pthread_mutex_unlock(&l->lock);
        if (lc == NULL)
            break;
        if (lc->moved && lc->async.status == MSR_ERR_CANCELED) {
            /* to its caller, as a call to a coordinator that died */
            lc->async.status = MSR_ERR_UNREACHABLE;
            snprintf(lc->async.err, sizeof lc->async.err,
                     "the coordinator moved; the call to the old one was given up");
        }
        if (lc->cb)
            lc->cb(&lc->async, lc->arg);
        msr_rpc_async_cleanup(&lc->async);
        msr_free(lc);
    }
}

msr_status_t msr_link_create(struct event_base *base, const char *target, const char *token,
                             const msr_rpc_tls_t *tls, msr_link_t **link_p)
{
    msr_status_t st;
    msr_link_t *l = msr_calloc(1, sizeof *l);
    if (l == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "no memory for the link");
    l->base = base;
    msr_list_init(&l->calls);
    pthread_mutex_init(&l->lock, NULL);
    l->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->efd < 0) {
        st = msr_err(MSR_ERR_SYSTEM, "eventfd: %s", strerror(errno));
        goto err_free;
    }
    l->ev = event_new(base, l->efd, EV_READ | EV_PERSIST, on_wakeup, l);
    if (l->ev == NULL || event_add(l->ev, NULL) != 0) {
        st = msr_err(MSR_ERR_NO_MEMORY, "cannot watch the link's eventfd");
        goto err_fd;
    }
    msr_err_clear(); /* what the rpc layer says, if anything, follows the context */
    st = msr_rpc_loop_create(&l->loop);
    if (st != MSR_OK) {
        st = msr_err_prefix(st, "the link's completion queue");
        goto err_ev;
    }
    st = msr_rpc_channel_create_tls(target, token, tls, &l->channel);
    if (st != MSR_OK) {
        st = msr_err_prefix(st, "the channel to %s", target);
        goto err_loop;
    }
    l->token = msr_strdup(token ? token : "");
    l->tls = tls ? *tls : (msr_rpc_tls_t){0};
    int rc = pthread_create(&l->thread, NULL, completion_thread, l);
    if (rc != 0) {
        st = msr_err(MSR_ERR_SYSTEM, "the link's completion thread: %s", strerror(rc));
        goto err_channel;
    }
    *link_p = l;
    return MSR_OK;

err_channel:
    msr_rpc_channel_destroy(l->channel);
err_loop:
    msr_rpc_loop_destroy(l->loop);
err_ev:
    if (l->ev)
        event_free(l->ev);
err_fd:
    close(l->efd);
err_free:
    pthread_mutex_destroy(&l->lock);
    msr_free(l);
    return st;
}

void msr_link_destroy(msr_link_t *l)
{
    if (l == NULL)
        return;
    /* Cancel what is in flight and wait (bounded) for the completions. */
    pthread_mutex_lock(&l->lock);
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &l->calls)
    {
        link_call_t *c = MSR_CONTAINER_OF(pos, link_call_t, node);
        c->cb = NULL;
        if (!c->finished)
            msr_rpc_async_cancel(&c->async);
    }
    pthread_mutex_unlock(&l->lock);
    uint64_t deadline = msr_deadline_in_ms(5000);
    for (;;) {
        int unfinished = 0;
        pthread_mutex_lock(&l->lock);
        msr_list_for_each_safe(pos, tmp, &l->calls)
        {
            link_call_t *c = MSR_CONTAINER_OF(pos, link_call_t, node);
            unfinished += !c->finished;
        }
        pthread_mutex_unlock(&l->lock);
        if (unfinished == 0 || msr_deadline_passed(deadline))
            break;
        msr_sleep_ms(5);
    }
    atomic_store(&l->stop, 1);
    msr_rpc_loop_shutdown(l->loop); /* wakes the completion thread at once */
    pthread_join(l->thread, NULL);
    msr_list_for_each_safe(pos, tmp, &l->calls)
    {
        link_call_t *c = MSR_CONTAINER_OF(pos, link_call_t, node);
        msr_list_remove(&c->node);
        if (c->finished) {
            msr_rpc_async_cleanup(&c->async);
            msr_free(c);
        }
        /* an unfinished call still belongs to gRPC: leak it rather than
         * free memory gRPC will write to */
    }
    msr_rpc_channel_destroy(l->channel);
    for (int i = 0; i < l->nold; i++)
        msr_rpc_channel_destroy(l->old[i]);
    msr_free(l->old);
    if (l->token) {
        memset(l->token, 0, strlen(l->token));
        msr_free(l->token);
    }
    msr_rpc_loop_destroy(l->loop);
    event_free(l->ev);
    close(l->efd);
    pthread_mutex_destroy(&l->lock);
    msr_free(l);
}

msr_status_t msr_link_call(msr_link_t *l, msr_rpc_method_t method, const ProtobufCMessage *req,
                           int64_t timeout_ms, int wait_for_ready, msr_link_cb_t cb, void *arg)
{
    link_call_t *lc = msr_calloc(1, sizeof *lc);
    if (lc == NULL)
        return MSR_ERR_NO_MEMORY;
    lc->link = l;
    lc->cb = cb;
    lc->arg = arg;
    lc->async.method = method;
    lc->async.deadline = msr_deadline_in_ms(timeout_ms);
    lc->async.wait_for_ready = wait_for_ready;
    lc->async.done = call_done;
    pthread_mutex_lock(&l->lock);
    msr_list_push_back(&l->calls, &lc->node);
    l->pending++;
    msr_status_t st = msr_rpc_call_start(l->channel, l->loop, &lc->async, req);
    if (st != MSR_OK) {
        msr_list_remove(&lc->node);
        l->pending--;
    }
    pthread_mutex_unlock(&l->lock);
    if (st != MSR_OK)
        msr_free(lc);
    return st;
}

msr_status_t msr_link_call_sync(msr_link_t *l, msr_rpc_method_t method, const ProtobufCMessage *req,
                                int64_t timeout_ms, int wait_for_ready, ProtobufCMessage **resp_p)
{
    /* msr_rpc_call leaves its message in the error channel */
    return msr_rpc_call(l->channel, method, req, msr_deadline_in_ms(timeout_ms), wait_for_ready,
                        resp_p);
}

msr_status_t msr_link_retarget(msr_link_t *l, const char *target)
{
    msr_rpc_channel_t *ch = NULL, **old = msr_realloc(l->old, (size_t)(l->nold + 1) * sizeof *old);
    if (old == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    l->old = old;
    msr_status_t st = msr_rpc_channel_create_tls(target, l->token, &l->tls, &ch);
    if (st != MSR_OK)
        return msr_err_prefix(st, "the channel to %s", target);
    pthread_mutex_lock(&l->lock);
    l->old[l->nold++] = l->channel;
    l->channel = ch;
    /* An old coordinator cut off the network answers nothing: its calls
     * would wait out their deadlines (a heartbeat's is seconds), and the new
     * one would count this node lost meanwhile. */
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &l->calls)
    {
        link_call_t *c = MSR_CONTAINER_OF(pos, link_call_t, node);
        if (!c->finished && !c->moved) {
            c->moved = 1;
            msr_rpc_async_cancel(&c->async);
        }
    }
    pthread_mutex_unlock(&l->lock);
    return MSR_OK;
}

const char *msr_link_target(const msr_link_t *l)
{
    return msr_rpc_channel_target(l->channel);
}

int msr_link_pending(const msr_link_t *l)
{
    return l->pending;
}
