/* Failures in the UCX engine: a request's or a communicator's failure
 * (with its sentence), the abort notices sent to and received from the
 * other members, members that said they left, and the liveness of the
 * peers (deaths noticed by UCX, a pidfd or kill(pid, 0)). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "comm/ucx/engine_impl.h"

/* ---- failures ---- */

/* Did the member with this job rank say it left the communicator? */
static int has_left(const ucx_comm_t *uc, int world_rank)
{
    for (int i = 0; i < uc->comm->size; i++)
        if (uc->comm->world_ranks[i] == world_rank)
            return uc->left[i];
    return 0;
}

static int is_member(const ucx_comm_t *uc, int world_rank)
{
    for (int i = 0; i < uc->comm->size; i++)
        if (uc->comm->world_ranks[i] == world_rank)
            return 1;
    return 0;
}

/* What every request does when it leaves the running list. */
static void req_leave(ucx_req_t *r)
{
    msr_list_remove(&r->link);
    if (r->shm) {
        r->shm = 0;
        r->uc->engine->shm_active--;
    }
}

void ucx_req_done(ucx_req_t *r)
{
    req_leave(r);
}

void ucx_req_fail(ucx_req_t *r, msr_status_t st, const char *fmt, ...)
{
    if (r->pub.status != MSR_IN_PROGRESS)
        return;
    /* formatted apart first: the arguments may be r->pub.error itself */
    char why[sizeof r->pub.error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    memcpy(r->pub.error, why, sizeof why);
    ucx_engine_t *e = r->uc->engine;
    /* Operations in flight may still be read or written by UCX: receives are
     * canceled, every handle is kept until UCX is done with it, and so is
     * scratch memory they may touch. */
    int orphaned = 0;
    for (int i = 0; i < r->nops; i++) {
        ucx_op_t *op = &r->ops[i];
        if (op->h == NULL)
            continue;
        if (op->recv)
            ucp_request_cancel(e->worker, op->h);
        ucx_engine_orphan(e, op->h);
        op->h = NULL;
        orphaned = 1;
    }
    r->nops = 0;
    if (orphaned && r->scratch_from == 2) {
        ucx_engine_bury(e, r->scratch);
        r->scratch = NULL;
        r->scratch_from = 0;
    } else if (orphaned && r->scratch_from == 1) {
        /* the comm's cache block: leave it to the graveyard, the comm forgets it */
        ucx_engine_bury(e, r->scratch);
        r->uc->cache = NULL;
        r->uc->cache_len = 0;
        r->uc->cache_busy = 0;
        r->scratch = NULL;
        r->scratch_from = 0;
    }
    r->pub.status = st;
    req_leave(r);
    if (st != MSR_ERR_CANCELED && st != MSR_ERR_INVALID_ARG && st != MSR_ERR_TRUNCATED)
        ucx_comm_fail(r->uc, st, -1, "%s", r->pub.error);
}

void ucx_req_fail_step(ucx_req_t *r, msr_status_t st)
{
    if (st == MSR_ERR_PEER_LOST && r->uc->comm->size > 1) {
        /* A connection that failed under this request is often the echo
         * of a failure elsewhere: a member that gave up and closed after
         * it told us why, a member of this node dead. The notices and
         * deaths already here say why (the same on every member), as
         * they would a moment later. */
        ucx_engine_t *e = r->uc->engine;
        ucx_engine_check_liveness(e);
        if (e->abort_pending)
            ucx_engine_handle_aborts(e);
        if (e->dead_pending)
            ucx_engine_handle_deaths(e);
        if (r->pub.status != MSR_IN_PROGRESS)
            return; /* failed with the communicator, for that reason */
    }
    if (r->pub.error[0])
        ucx_req_fail(r, st, "%s", r->pub.error);
    else
        ucx_req_fail(r, st, "%s: %s", r->algo, msr_status_str(st));
}

/* Tells the other members that this communicator failed, so that they stop
 * waiting for this rank. Fire and forget: the sends become orphans. */
static void send_aborts(ucx_comm_t *uc, msr_status_t st, int culprit)
{
    ucx_engine_t *e = uc->engine;
    int64_t *msg = msr_malloc(sizeof uc->abort_in);
    if (msg == NULL)
        return;
    msg[0] = st;
    msg[1] = culprit;
    msg[2] = uc->broke_from >= 0 ? uc->broke_from : uc->comm->rank;
    ucx_engine_bury(e, msg);
    for (int i = 0; i < uc->comm->size; i++) {
        ucx_peer_t *p = uc->peer[i];
        /* a member that left has no receive for it: its engine perhaps
         * gone, a connection to it fails (UCX saying so) */
        if (i == uc->comm->rank || p->dead || uc->left[i])
            continue;
        ucp_ep_h ep = ucx_engine_ep_quiet(e, p);
        if (ep == NULL)
            continue;
        ucp_request_param_t prm = {.op_attr_mask = 0};
        void *h = ucp_tag_send_nbx(ep, msg, sizeof uc->abort_in,
                                   ucx_tag(UCX_TAG_CTRL, uc->id, uc->comm->rank, 0), &prm);
        if (UCS_PTR_IS_PTR(h))
            ucx_engine_orphan(e, h);
    }
}

void ucx_comm_say_left(ucx_comm_t *uc)
{
    if (uc->comm->size > 1)
        send_aborts(uc, MSR_OK, uc->comm->rank);
}

void ucx_comm_undo(msr_comm_t *comm)
{
    if (comm == NULL)
        return;
    ucx_comm_t *uc = comm->be;
    ucx_engine_lock(uc->engine);
    memset(uc->left, 1, (size_t)comm->size);
    ucx_engine_unlock(uc->engine);
    msr_comm_destroy(comm);
}

/* Records a communicator that broke on a lost peer, for the drain at the
 * engine's close (engine.c): a lost member's rendezvous message may carry
 * the id of an endpoint UCX has let go. */
static void note_lost_comm(ucx_comm_t *uc)
{
    ucx_engine_t *e = uc->engine;
    int n = uc->comm->size;
    ucx_lost_comm_t *grown = msr_realloc(e->lost_comms, (e->n_lost_comms + 1) * sizeof *grown);
    int *ranks = msr_malloc((size_t)n * sizeof *ranks);
    if (grown)
        e->lost_comms = grown;
    if (grown == NULL || ranks == NULL) {
        msr_free(ranks);
        e->saw_loss = 1;
        return;
    }
    memcpy(ranks, uc->comm->world_ranks, (size_t)n * sizeof *ranks);
    e->lost_comms[e->n_lost_comms++] = (ucx_lost_comm_t){uc->id, n, ranks};
}

void ucx_comm_fail(ucx_comm_t *uc, msr_status_t st, int culprit, const char *fmt, ...)
{
    if (st != MSR_ERR_CANCELED)
        uc->engine->saw_failure = 1;
    if (!msr_comm_break(uc->comm, st))
        return; /* broken before: the first failure did the rest */
    if (st == MSR_ERR_PEER_LOST)
        note_lost_comm(uc);
    char why[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    msr_comm_broken_why(uc->comm, why);
    if (uc->closed)
        return;
    MSR_DEBUG("comm %u: broken: %s", uc->id, why);
    if (st != MSR_ERR_CANCELED)
        send_aborts(uc, st, culprit);
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &uc->engine->active)
    {
        ucx_req_t *r = MSR_CONTAINER_OF(pos, ucx_req_t, link);
        if (r->uc == uc) /* the message says which operation it ended */
            ucx_req_fail(r, st, "%s: %s", r->algo ? r->algo : "comm", why);
    }
}

/* A death noticed by a callback or a pidfd reaches every communicator that
 * has the peer as a member. */
void ucx_engine_handle_deaths(ucx_engine_t *e)
{
    e->dead_pending = 0;
    int changed = 0;
    for (int i = 0; i < e->world_size; i++) {
        ucx_peer_t *p = &e->peers[i];
        if (!p->dead || p->dead_noted)
            continue;
        p->dead_noted = 1;
        changed = 1;
        MSR_DEBUG("comm: job rank %d (pid %d) is lost", p->world_rank, p->pid);
        msr_list_t *pos, *tmp;
        msr_list_for_each_safe(pos, tmp, &e->comms)
        {
            ucx_comm_t *uc = MSR_CONTAINER_OF(pos, ucx_comm_t, link);
            if (is_member(uc, p->world_rank) && !has_left(uc, p->world_rank))
                ucx_comm_fail(uc, MSR_ERR_PEER_LOST, p->world_rank,
                              "peer lost: job rank %d (pid %d) died or disconnected", p->world_rank,
                              p->pid);
        }
    }
    if (changed)
        ucx_engine_rebuild_pollfds(e);
}

void ucx_engine_handle_aborts(ucx_engine_t *e)
{
    e->abort_pending = 0;
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &e->comms)
    {
        ucx_comm_t *uc = MSR_CONTAINER_OF(pos, ucx_comm_t, link);
        if (!uc->abort_arrived)
            continue;
        uc->abort_arrived = 0;
        msr_status_t st = (msr_status_t)uc->abort_in[0];
        if (st == MSR_OK) {
            /* a member destroyed the communicator cleanly: its exit is not
             * a failure here; listen for the next notice */
            int64_t who = uc->abort_in[1];
            if (who >= 0 && who < uc->comm->size)
                uc->left[who] = 1;
            ucp_request_free(uc->abort_req);
            uc->abort_req = NULL;
            if (!uc->closed && ucx_post_abort_recv(uc) != MSR_OK)
                MSR_DEBUG("comm %u: cannot post the abort receive again", uc->id);
            continue;
        }
        if (st >= 0 || st == MSR_ERR_CANCELED)
            st = MSR_ERR_PEER_LOST;
        int64_t from = uc->abort_in[2];
        if (from >= 0 && from < uc->comm->size && from != uc->comm->rank &&
            atomic_load(&uc->comm->broken) == MSR_OK)
            uc->broke_from = (int)from;
        /* the culprit is a job rank, or -1 where the member gave up on
         * its own: its deadline passed (then the status alone), a peer was
         * lost to it (its connection failed) or it failed itself (out of
         * memory, UCX refusing): then that member, named */
        char lost[48] = "";
        if (uc->abort_in[1] >= 0)
            snprintf(lost, sizeof lost, ", lost job rank %lld", (long long)uc->abort_in[1]);
        if (uc->abort_in[1] < 0 && st != MSR_ERR_TIMEOUT && st != MSR_ERR_PEER_LOST &&
            uc->broke_from >= 0)
            ucx_comm_fail(uc, st, -1, "rank %d of the communicator (job rank %d) failed (%s)",
                          uc->broke_from, uc->comm->world_ranks[uc->broke_from],
                          msr_status_str(st));
        else if (uc->abort_in[1] < 0 && st == MSR_ERR_PEER_LOST && uc->broke_from >= 0)
            /* its connection to a peer broke (UCX said so), the processes
             * perhaps alive: the member that saw it, named */
            ucx_comm_fail(uc, st, -1,
                          "rank %d of the communicator (job rank %d) lost a peer (its connection "
                          "failed)",
                          uc->broke_from, uc->comm->world_ranks[uc->broke_from]);
        else
            ucx_comm_fail(uc, st, (int)uc->abort_in[1],
                          "a member gave up on the communicator (%s%s)", msr_status_str(st), lost);
    }
}

msr_status_t ucx_comm_take_notices(ucx_comm_t *uc)
{
    ucx_engine_t *e = uc->engine;
    ucp_worker_progress(e->worker);
    if (e->abort_pending)
        ucx_engine_handle_aborts(e);
    return msr_comm_status(uc->comm);
}

void ucx_comm_give_up(ucx_comm_t *uc, msr_status_t st, const char *why)
{
    if (uc->comm->size > 1 && st != MSR_ERR_CANCELED && st != MSR_ERR_INVALID_ARG &&
        st != MSR_ERR_TRUNCATED)
        ucx_comm_fail(uc, st, -1, "%s", why);
}

/* Polls the pidfds of the local members without blocking. */
void ucx_engine_check_liveness(ucx_engine_t *e)
{
    if (e->n_pfds <= 1)
        return;
    int n = poll(e->pfds + 1, (nfds_t)(e->n_pfds - 1), 0);
    if (n <= 0)
        return;
    for (int i = 1; i < e->n_pfds; i++)
        if (e->pfds[i].revents) {
            e->peers[e->pfd_peer[i]].dead = 1;
            e->dead_pending = 1;
        }
}

/* Peers without a pidfd (old kernels) are polled with kill(pid, 0). */
void ucx_engine_check_liveness_slow(ucx_engine_t *e)
{
    for (int i = 0; i < e->world_size; i++) {
        ucx_peer_t *p = &e->peers[i];
        if (p->member && !p->dead && p->pidfd < 0 && p->node == e->my_node && i != e->my_world &&
            kill(p->pid, 0) != 0 && errno == ESRCH) {
            p->dead = 1;
            e->dead_pending = 1;
        }
    }
}
