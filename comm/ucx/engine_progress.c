/* The UCX engine's progress and waiting: one round of UCX progress, news
 * of failures and every running request, and the wait that polls, yields
 * and then sleeps on the worker's event fd and the peers' pidfds. */

#include <poll.h>
#include <sched.h>
#include <string.h>

#include "base/log.h"
#include "base/time.h"
#include "comm/ucx/engine_impl.h"

/* ---- progress ---- */

/* Steps every running request once; returns how many ended. A request
 * that ends leaves the list, and one that fails may take others of its
 * communicator with it: start over after each. */
static int step_active(ucx_engine_t *e)
{
    int ended = 0;
    msr_list_t *pos;
restart:
    for (pos = e->active.next; pos != &e->active; pos = pos->next) {
        ucx_req_t *r = MSR_CONTAINER_OF(pos, ucx_req_t, link);
        msr_status_t st = r->step(r);
        if (st == MSR_IN_PROGRESS)
            continue;
        ended++;
        if (st == MSR_OK) {
            r->pub.status = MSR_OK;
            ucx_req_done(r);
        } else {
            ucx_req_fail_step(r, st);
        }
        goto restart;
    }
    return ended;
}

/* One round: UCX's progress, news of failures, then every running request.
 * Returns nonzero when anything happened. Called with the lock held. */
static int progress_all(ucx_engine_t *e)
{
    /* One call: as soon as something moved, the steps look at it (the wait
     * loop comes back for more). */
    int events = (int)ucp_worker_progress(e->worker);
    /* UCX requests only finish inside ucp_worker_progress (or inside the
     * step that posts them, which then carries on by itself): with nothing
     * progressed, the steps have nothing new to see. */
    if (events == 0 && !e->dead_pending && !e->abort_pending && !e->shm_active)
        return 0;
    /* Operations a member did its part of before it died or gave up (it
     * passed the barrier we still wait in, its words are in shared memory)
     * end first: its death breaks only what is left. Then the notices
     * before the deaths: a member that said it left and then exited is
     * not lost. */
    if (e->abort_pending || e->dead_pending) {
        events += step_active(e);
        if (e->abort_pending)
            ucx_engine_handle_aborts(e);
        if (e->dead_pending)
            ucx_engine_handle_deaths(e);
    }
    events += step_active(e);
    if (e->n_orphans)
        ucx_engine_reap_orphans(e);
    /* tiled shared-memory operations that moved are busy, not idle */
    events += e->shm_moved;
    e->shm_moved = 0;
    return events;
}

void ucx_engine_progress(ucx_engine_t *e)
{
    progress_all(e);
    uint64_t now = msr_now_ns();
    if (now >= e->next_liveness_ns) {
        e->next_liveness_ns = now + 50000000ull;
        ucx_engine_check_liveness(e);
        ucx_engine_check_liveness_slow(e);
        if (e->dead_pending)
            progress_all(e);
    }
}

/* Sleeps on the worker's event fd and the local members' pidfds, at most
 * until deadline. Called with the lock held; drops it while asleep. */
static void sleep_once(ucx_engine_t *e, uint64_t deadline)
{
    ucs_status_t us = ucp_worker_arm(e->worker);
    if (us == UCS_ERR_BUSY)
        return; /* events arrived meanwhile: progress again */
    if (us != UCS_OK) {
        MSR_DEBUG("comm: ucp_worker_arm: %s", ucs_status_string(us));
        return;
    }
    int64_t ms = msr_deadline_left_ms(deadline);
    /* With other threads in wait, one of them may take our wake-up, and
     * shared-memory operations wake nobody: nap briefly. Peers without
     * pidfds are checked every 100 ms. */
    int64_t cap = e->waiters > 1 || e->shm_active ? 1 : 100;
    if (ms > cap)
        ms = cap;
    int nfds = e->n_pfds;
    struct pollfd fds[nfds > 0 ? nfds : 1];
    int peer_of[nfds > 0 ? nfds : 1];
    memcpy(fds, e->pfds, (size_t)nfds * sizeof *fds);
    memcpy(peer_of, e->pfd_peer, (size_t)nfds * sizeof *peer_of);
    ucx_engine_unlock(e);
    uint64_t t0 = msr_now_ns();
    int n = poll(fds, (nfds_t)nfds, (int)ms);
    uint64_t slept = msr_now_ns() - t0;
    ucx_engine_lock(e);
    e->stat_sleeps++;
    e->stat_slept_ns += slept;
    if (n == 0)
        e->stat_sleep_timeouts++;
    if (n > 0)
        for (int i = 1; i < nfds; i++)
            if (fds[i].revents) {
                e->peers[peer_of[i]].dead = 1;
                e->dead_pending = 1;
            }
}

msr_status_t ucx_engine_wait(ucx_engine_t *e, ucx_req_t *r)
{
    ucx_engine_lock(e);
    msr_status_t st = ucx_engine_wait_locked(e, r);
    ucx_engine_unlock(e);
    return st;
}

msr_status_t ucx_engine_wait_locked(ucx_engine_t *e, ucx_req_t *r)
{
    e->waiters++;
    e->stat_waits++;
    uint64_t idle_since = 0; /* when the current stretch without events began */
    unsigned iter = 0;
    /* Yielding: in the second phase of the current idle stretch. Without a
     * spin phase (more ranks than cores) that is from the stretch's first
     * idle round, not from the first clock reading 16 rounds on: a peer
     * that shares the core (a broadcast's root, the last member of a
     * barrier) runs only once this rank lets the core go, and 16 rounds of
     * UCX progress before that is a spin it waits through. */
    const int no_spin = e->spin_ns == 0;
    int yielding = no_spin;
    while (r->pub.status == MSR_IN_PROGRESS) {
        int events = progress_all(e);
        if (r->pub.status != MSR_IN_PROGRESS)
            break;
        /* The clock is read every 16 rounds (a short wait never reads it). */
        if ((++iter & 15) != 0) {
            if (events) {
                idle_since = 0;
                yielding = no_spin;
            } else if (yielding) {
                e->stat_yields++;
                sched_yield();
            } else {
                e->stat_held++;
            }
            continue;
        }
        uint64_t now = msr_now_ns();
        if (r->pub.deadline == MSR_DEADLINE_LAZY)
            r->pub.deadline = msr_deadline_in_ms(atomic_load(&r->uc->comm->timeout_ms));
        if (now >= r->pub.deadline) {
            ucx_req_fail(r, MSR_ERR_TIMEOUT, "%s: deadline passed after %lld ms", r->algo,
                         (long long)atomic_load(&r->uc->comm->timeout_ms));
            break;
        }
        if (now >= e->next_liveness_ns) {
            e->next_liveness_ns = now + 50000000ull;
            ucx_engine_check_liveness(e);
            ucx_engine_check_liveness_slow(e);
        }
        if (atomic_load_explicit(&e->contenders, memory_order_relaxed) > 0) {
            /* another thread wants the engine: let it post its work */
            ucx_engine_unlock(e);
            sched_yield();
            ucx_engine_lock(e);
        }
        if (events) {
            idle_since = 0;
            yielding = no_spin;
            continue;
        }
        if (idle_since == 0)
            idle_since = now;
        uint64_t idle = now - idle_since;
        if (idle >= (e->shm_active ? e->shm_yield_ns : e->yield_ns)) {
            sleep_once(e, r->pub.deadline);
            idle_since = 0;
            yielding = no_spin;
        } else {
            yielding = idle >= e->spin_ns; /* phase two: let the core go */
            if (yielding) {
                e->stat_yields++;
                sched_yield();
            } else {
                e->stat_held++;
            }
        }
    }
    e->waiters--;
    return r->pub.status;
}
