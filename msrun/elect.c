/* The coordinator's election through etcd: a lease per node, a
 * transaction that creates <prefix>/leader under it when it is absent, and
 * a thread that keeps the lease alive and watches the key. */
#include "launcher/elect.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/time.h"
#include "rendezvous/etcd.h"

#define EVENTS_MAX 16

struct msr_elect {
    msr_etcd_t *etcd;
    char prefix[300];
    char key[320]; /* <prefix>/leader */
    int lease_s;
    _Atomic int64_t lease;
    int efd;
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* under lock */
    int stop, quiet, leader;
    char publish[300]; /* an address for the thread to publish, "" none */
    char seen[300];    /* the leader's address last told to the agent */
    msr_elect_event_t events[EVENTS_MAX];
    int nevents;
    /* the thread's */
    int away;     /* etcd did not answer the last round */
    int key_seen; /* the leader key was there at the last look */
};

static int64_t period_ms(const msr_elect_t *e)
{
    int64_t ms = (int64_t)e->lease_s * 1000 / 3;
    return ms < 100 ? 100 : ms;
}

static msr_status_t grant(msr_elect_t *e, uint64_t deadline)
{
    int64_t id = 0, ttl = 0;
    msr_status_t st = msr_etcd_lease_grant(e->etcd, e->lease_s, deadline, &id, &ttl);
    if (st == MSR_OK)
        atomic_store(&e->lease, id);
    return st;
}

msr_status_t msr_elect_create(const char *endpoints, const char *prefix, int lease_s,
                              uint64_t deadline, msr_elect_t **elect_p)
{
    msr_elect_t *e = msr_calloc(1, sizeof *e);
    if (e == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    e->efd = -1;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    snprintf(e->prefix, sizeof e->prefix, "%s", prefix);
    snprintf(e->key, sizeof e->key, "%s/leader", prefix);
    e->lease_s = lease_s;
    msr_status_t st = msr_etcd_create(endpoints, &e->etcd);
    if (st != MSR_OK)
        goto err;
    e->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (e->efd < 0) {
        st = msr_err(MSR_ERR_SYSTEM, "eventfd: %s", strerror(errno));
        goto err;
    }
    /* etcd may come up a little after msrun: try again until the deadline */
    for (;;) {
        uint64_t now = msr_now_ns();
        uint64_t d = now + UINT64_C(1000000000) < deadline ? now + UINT64_C(1000000000) : deadline;
        st = grant(e, d);
        if (st == MSR_OK)
            break;
        if (msr_deadline_passed(deadline)) {
            st = msr_err(MSR_ERR_UNREACHABLE, "etcd unreachable at %s: %s", endpoints,
                         msr_err_msg());
            goto err;
        }
        msr_sleep_ms(100);
    }
    *elect_p = e;
    return MSR_OK;
err:
    msr_elect_destroy(e, 0);
    return st;
}

/* Creates the leader key under this node's lease if it is absent. */
static msr_status_t campaign(msr_elect_t *e, uint64_t deadline, int *won)
{
    msr_etcd_op_t op = {
        .key = e->key, .value = (const uint8_t *)"", .len = 0, .lease = atomic_load(&e->lease)};
    return msr_etcd_txn(e->etcd, e->key, 0, &op, 1, deadline, won);
}

msr_status_t msr_elect_campaign(msr_elect_t *e, uint64_t deadline, int *leader, char *addr,
                                size_t len)
{
    *leader = 0;
    while (!msr_deadline_passed(deadline)) {
        msr_etcd_kv_t kv = {0};
        msr_status_t st = msr_etcd_get(e->etcd, e->key, deadline, &kv);
        if (st == MSR_OK && !kv.found) {
            int won = 0;
            st = campaign(e, deadline, &won);
            if (st == MSR_OK && won) {
                pthread_mutex_lock(&e->lock);
                e->leader = 1;
                pthread_mutex_unlock(&e->lock);
                *leader = 1;
                return MSR_OK;
            }
        } else if (st == MSR_OK && kv.len > 0) {
            snprintf(addr, len, "%.*s", (int)kv.len, (const char *)kv.value);
            pthread_mutex_lock(&e->lock);
            snprintf(e->seen, sizeof e->seen, "%s", addr);
            pthread_mutex_unlock(&e->lock);
            msr_etcd_kv_free(&kv);
            return MSR_OK;
        }
        msr_etcd_kv_free(&kv); /* the leader is starting its coordinator */
        msr_sleep_ms(st == MSR_OK ? 20 : 100);
    }
    return msr_err(MSR_ERR_TIMEOUT, "no leader published its address under %s", e->key);
}

int64_t msr_elect_lease(const msr_elect_t *e)
{
    return atomic_load(&((msr_elect_t *)e)->lease);
}

/* Puts addr into the leader key, only while this node's lease holds it. */
static msr_status_t publish(msr_elect_t *e, const char *addr, uint64_t deadline, int *applied)
{
    int64_t lease = atomic_load(&e->lease);
    msr_etcd_op_t op = {
        .key = e->key, .value = (const uint8_t *)addr, .len = strlen(addr), .lease = lease};
    return msr_etcd_txn(e->etcd, e->key, lease, &op, 1, deadline, applied);
}

msr_status_t msr_elect_publish_sync(msr_elect_t *e, const char *addr, uint64_t deadline)
{
    int applied = 0;
    msr_status_t st = publish(e, addr, deadline, &applied);
    if (st == MSR_OK && !applied)
        return msr_err(MSR_ERR_REFUSED, "this node no longer holds %s", e->key);
    if (st == MSR_OK) {
        pthread_mutex_lock(&e->lock);
        snprintf(e->seen, sizeof e->seen, "%s", addr);
        pthread_mutex_unlock(&e->lock);
    }
    return st;
}

void msr_elect_publish(msr_elect_t *e, const char *addr)
{
    pthread_mutex_lock(&e->lock);
    snprintf(e->publish, sizeof e->publish, "%s", addr);
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->lock);
}

void msr_elect_quiet(msr_elect_t *e)
{
    pthread_mutex_lock(&e->lock);
    e->quiet = 1;
    pthread_mutex_unlock(&e->lock);
}

int msr_elect_fd(const msr_elect_t *e)
{
    return e->efd;
}

/* Under lock: queues an event for the agent and wakes its loop. */
static void tell(msr_elect_t *e, msr_elect_event_kind_t kind, const char *addr)
{
    if (e->nevents < EVENTS_MAX) {
        msr_elect_event_t *ev = &e->events[e->nevents++];
        ev->kind = kind;
        snprintf(ev->addr, sizeof ev->addr, "%s", addr ? addr : "");
    }
    uint64_t one = 1;
    ssize_t w = write(e->efd, &one, sizeof one);
    (void)w;
}

msr_elect_event_kind_t msr_elect_next(msr_elect_t *e, msr_elect_event_t *ev)
{
    uint64_t n;
    ssize_t r = read(e->efd, &n, sizeof n);
    (void)r;
    pthread_mutex_lock(&e->lock);
    ev->kind = MSR_ELECT_NONE;
    if (e->nevents > 0) {
        *ev = e->events[0];
        memmove(e->events, e->events + 1, (size_t)(e->nevents - 1) * sizeof *ev);
        e->nevents--;
    }
    pthread_mutex_unlock(&e->lock);
    return ev->kind;
}

/* One round of the thread: publish, keep the lease alive, look at the key,
 * campaign when it is gone. Each call is bounded by one period. */
static msr_status_t round_once(msr_elect_t *e, int64_t every)
{
    char addr[300];
    pthread_mutex_lock(&e->lock);
    snprintf(addr, sizeof addr, "%s", e->publish);
    int leader = e->leader, quiet = e->quiet;
    pthread_mutex_unlock(&e->lock);
    msr_status_t st;
    if (addr[0]) {
        int applied = 0;
        st = publish(e, addr, msr_deadline_in_ms(every), &applied);
        if (st != MSR_OK)
            return st;
        pthread_mutex_lock(&e->lock);
        if (strcmp(e->publish, addr) == 0)
            e->publish[0] = '\0';
        pthread_mutex_unlock(&e->lock);
    }
    int64_t ttl = 0;
    st = msr_etcd_lease_keepalive(e->etcd, atomic_load(&e->lease), msr_deadline_in_ms(every), &ttl);
    if (st != MSR_OK)
        return st;
    if (ttl <= 0) {
        /* expired while etcd was away: the key it held went with it */
        st = grant(e, msr_deadline_in_ms(every));
        if (st != MSR_OK)
            return st;
        pthread_mutex_lock(&e->lock);
        if (e->leader) {
            e->leader = leader = 0;
            e->seen[0] = '\0';
            tell(e, MSR_ELECT_LOST, NULL);
        }
        pthread_mutex_unlock(&e->lock);
    }
    msr_etcd_kv_t kv = {0};
    st = msr_etcd_get(e->etcd, e->key, msr_deadline_in_ms(every), &kv);
    if (st != MSR_OK)
        return st;
    if (!kv.found && !quiet) {
        /* said once per loss of the key: the failover's first step */
        if (e->key_seen)
            MSR_INFO("the coordinator's key %s is gone (its node's lease expired): campaigning",
                     e->key);
        e->key_seen = 0;
        int won = 0;
        st = campaign(e, msr_deadline_in_ms(every), &won);
        if (st == MSR_OK && won) {
            MSR_INFO("won the election for %s: starting a coordinator", e->key);
            pthread_mutex_lock(&e->lock);
            e->leader = 1;
            e->seen[0] = '\0';
            tell(e, MSR_ELECT_WON, NULL);
            pthread_mutex_unlock(&e->lock);
        }
    } else if (kv.found) {
        e->key_seen = 1;
        int64_t mine = atomic_load(&e->lease);
        pthread_mutex_lock(&e->lock);
        if (leader && kv.lease != mine) {
            e->leader = 0;
            tell(e, MSR_ELECT_LOST, NULL);
        }
        char value[300];
        snprintf(value, sizeof value, "%.*s", (int)kv.len, kv.value ? (char *)kv.value : "");
        if (value[0] && strcmp(value, e->seen) != 0) {
            snprintf(e->seen, sizeof e->seen, "%s", value);
            tell(e, MSR_ELECT_LEADER, value);
        }
        pthread_mutex_unlock(&e->lock);
    }
    msr_etcd_kv_free(&kv);
    return st;
}

static void *elect_thread(void *arg)
{
    msr_elect_t *e = arg;
    int64_t every = period_ms(e);
    pthread_mutex_lock(&e->lock);
    while (!e->stop) {
        struct timespec ts = msr_realtime_in_ms(every);
        if (!e->publish[0])
            pthread_cond_timedwait(&e->cond, &e->lock, &ts);
        if (e->stop)
            break;
        pthread_mutex_unlock(&e->lock);
        msr_err_clear();
        msr_status_t st = round_once(e, every);
        if (st != MSR_OK && !e->away)
            MSR_WARN("etcd unreachable: coordinator failover is unavailable until it returns "
                     "(%s)",
                     msr_err_msg()[0] ? msr_err_msg() : msr_status_str(st));
        else if (st == MSR_OK && e->away)
            MSR_INFO("etcd at %s answers again: coordinator failover is available",
                     msr_etcd_endpoint(e->etcd));
        e->away = st != MSR_OK;
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

msr_status_t msr_elect_start(msr_elect_t *e)
{
    int rc = pthread_create(&e->thread, NULL, elect_thread, e);
    if (rc != 0)
        return msr_err(MSR_ERR_SYSTEM, "the election's thread: %s", strerror(rc));
    e->started = 1;
    return MSR_OK;
}

void msr_elect_destroy(msr_elect_t *e, int job_over)
{
    if (e == NULL)
        return;
    if (e->started) {
        pthread_mutex_lock(&e->lock);
        e->stop = 1;
        pthread_cond_signal(&e->cond);
        pthread_mutex_unlock(&e->lock);
        pthread_join(e->thread, NULL);
    }
    int64_t lease = atomic_load(&e->lease);
    if (e->etcd && lease) {
        if (job_over && e->leader) {
            /* a rerun with the same job id starts afresh, not from this
             * job's end; only while this node still leads */
            msr_etcd_op_t op = {.key = e->prefix, .prefix = 1};
            char dir[310];
            snprintf(dir, sizeof dir, "%s/", e->prefix);
            op.key = dir;
            int applied = 0;
            if (msr_etcd_txn(e->etcd, e->key, lease, &op, 1, msr_deadline_in_ms(2000), &applied) !=
                MSR_OK)
                MSR_WARN("cannot delete the job's keys under %s in etcd: %s", dir, msr_err_msg());
        }
        if (msr_etcd_lease_revoke(e->etcd, lease, msr_deadline_in_ms(1000)) != MSR_OK)
            MSR_DEBUG("revoking the etcd lease: %s", msr_err_msg());
    }
    msr_etcd_destroy(e->etcd);
    if (e->efd >= 0)
        close(e->efd);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    msr_free(e);
}
