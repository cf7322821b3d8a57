/* The UCX backend's ops table: the world communicator, split and dup,
 * requests (post, wait, test, free) and destruction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/lprof.h"
#include "base/time.h"
#include "comm/ucx/ucx_impl.h"
#include "base/err.h"

#define MAX_FREE_REQS 8

static const msr_comm_backend_ops_t ucx_ops;

/* ---- the abort receive ---- */

static void abort_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                     void *user_data)
{
    ucx_comm_t *uc = user_data;
    (void)request;
    (void)info;
    if (status == UCS_OK) {
        uc->abort_arrived = 1;
        uc->engine->abort_pending = 1;
    }
}

/* Posts the receive for other members' abort notices. Lock held. */
msr_status_t ucx_post_abort_recv(ucx_comm_t *uc)
{
    ucp_request_param_t prm = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        .cb.recv = abort_cb,
        .user_data = uc,
    };
    void *h = ucp_tag_recv_nbx(uc->engine->worker, uc->abort_in, sizeof uc->abort_in,
                               ucx_tag(UCX_TAG_CTRL, uc->id, 0, 0), UCX_TAG_MASK_CTRL, &prm);
    if (UCS_PTR_IS_ERR(h)) {
        msr_err_set("comm: cannot post the abort receive: %s",
                    ucs_status_string(UCS_PTR_STATUS(h)));
        return MSR_ERR_BACKEND;
    }
    uc->abort_req = h;
    return MSR_OK;
}

/* Cancels the abort receive and waits (briefly) until UCX lets go of it.
 * Lock held. */
static void drop_abort_recv(ucx_comm_t *uc)
{
    ucx_engine_t *e = uc->engine;
    if (uc->abort_req == NULL)
        return;
    ucp_request_cancel(e->worker, uc->abort_req);
    uint64_t deadline = msr_deadline_in_ms(1000);
    while (ucp_request_check_status(uc->abort_req) == UCS_INPROGRESS &&
           !msr_deadline_passed(deadline))
        ucp_worker_progress(e->worker);
    if (ucp_request_check_status(uc->abort_req) == UCS_INPROGRESS) {
        /* Still held by UCX: keep the buffer it may write to. */
        ucx_engine_orphan(e, uc->abort_req);
    } else {
        ucp_request_free(uc->abort_req);
    }
    uc->abort_req = NULL;
}

/* ---- communicators ---- */

/* Makes a communicator on engine e (whose reference it takes over on
 * success). */
msr_status_t ucx_comm_make(msr_ctx_t *ctx, ucx_engine_t *e, unsigned id, int rank, int size,
                           const int *world_ranks, int64_t timeout_ms, msr_comm_t **comm_p)
{
    msr_comm_t *comm = NULL;
    msr_status_t st = msr_comm_alloc(ctx, &ucx_ops, rank, size, world_ranks, timeout_ms, &comm);
    if (st != MSR_OK)
        return st;
    ucx_comm_t *uc = msr_calloc(1, sizeof *uc);
    if (uc == NULL)
        goto err_comm;
    uc->peer = msr_calloc((size_t)size, sizeof *uc->peer);
    uc->left = msr_calloc((size_t)size, 1);
    if (uc->peer == NULL || uc->left == NULL)
        goto err_uc;
    uc->engine = e;
    uc->comm = comm;
    uc->id = id;
    uc->broke_from = -1;
    for (int i = 0; i < size; i++)
        uc->peer[i] = &e->peers[world_ranks[i]];
    ucx_tuning_read(&uc->tune, e->local_size);
    ucx_engine_lock(e);
    st = ucx_post_abort_recv(uc);
    if (st == MSR_OK)
        msr_list_push_back(&e->comms, &uc->link);
    ucx_engine_unlock(e);
    if (st != MSR_OK)
        goto err_peer;
    comm->be = uc;
    *comm_p = comm;
    return MSR_OK;

err_peer:
err_uc:
    msr_free(uc->peer);
    msr_free(uc->left);
    msr_free(uc);
err_comm:
    msr_comm_free(comm);
    if (st == MSR_OK)
        st = msr_err(MSR_ERR_NO_MEMORY, "comm: out of memory for a communicator of %d", size);
    return st;
}

static msr_status_t ucx_split(msr_comm_t *comm, int color, int key, unsigned flags,
                              msr_comm_t **newcomm_p);

/* The collective steps that give a new communicator its shared-memory
 * segment where its members share a machine, or node-local sub-groups
 * where they span machines; their failure is every member's alike
 * (agreed, or the communicator broken). */
static msr_status_t shm_steps(msr_comm_t *comm)
{
    uint64_t t0 = msr_now_ns();
    msr_status_t st = ucx_shm_setup(comm->be);
    if (st == MSR_OK)
        st = ucx_hier_setup(comm->be, ucx_split);
    if (st == MSR_OK)
        msr_lprof_note(MSR_LPROF_SHM, t0);
    return st;
}

/* shm_steps, the communicator undone where they fail. */
static msr_status_t with_shm(msr_comm_t **comm_p)
{
    msr_status_t st = shm_steps(*comm_p);
    if (st != MSR_OK) {
        ucx_comm_undo(*comm_p);
        *comm_p = NULL;
    }
    return st;
}

msr_status_t msr_ucx_comm_world(msr_ctx_t *ctx, msr_comm_t **comm_p)
{
    int n = msr_world_size(ctx), me = msr_rank(ctx);
    if (n > UCX_MAX_RANKS) {
        msr_err_set("msr_comm_world: %d ranks, at most %d", n, UCX_MAX_RANKS);
        return MSR_ERR_UNSUPPORTED;
    }
    /* Each world communicator gets its own store keys: count them per rank
     * in the store (every rank makes the same number). */
    char key[64], uid[32];
    snprintf(key, sizeof key, "msr/comm/worlds/%d", me);
    int64_t k = 0;
    msr_status_t st = msr_store_add(ctx, key, 1, &k);
    if (st != MSR_OK)
        return st;
    snprintf(uid, sizeof uid, "w%lld", (long long)k);
    int *ranks = msr_calloc((size_t)n, sizeof *ranks);
    if (ranks == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "msr_comm_world: out of memory for %d ranks", n);
    for (int i = 0; i < n; i++)
        ranks[i] = i;
    ucx_engine_t *e = NULL;
    st = ucx_engine_create(ctx, uid, n, ranks, &e);
    if (st == MSR_OK) {
        unsigned id = e->next_comm_id++;
        st = ucx_comm_make(ctx, e, id, me, n, ranks, msr_timeout(ctx), comm_p);
        if (st != MSR_OK)
            ucx_engine_unref(e);
        else
            st = with_shm(comm_p);
    }
    msr_free(ranks);
    return st;
}

/* A communicator of two on its own engine, its addresses published under
 * name (comm.h, msr_comm_pair); no shared-memory segment: a pair uses
 * sends and receives only. */
msr_status_t msr_ucx_comm_pair(msr_ctx_t *ctx, const char *name, int peer, msr_comm_t **comm_p)
{
    int me = msr_rank(ctx);
    int ranks[2] = {me < peer ? me : peer, me < peer ? peer : me};
    char uid[80];
    snprintf(uid, sizeof uid, "p-%s", name);
    ucx_engine_t *e = NULL;
    msr_status_t st = ucx_engine_create(ctx, uid, 2, ranks, &e);
    if (st != MSR_OK)
        return st;
    unsigned id = e->next_comm_id++;
    st = ucx_comm_make(ctx, e, id, me == ranks[1], 2, ranks, msr_timeout(ctx), comm_p);
    if (st != MSR_OK)
        ucx_engine_unref(e);
    return st;
}

/* The worst status and the lowest rank that had it, packed so that one
 * allreduce (MIN) finds both: status * 2^32 + rank, where a member that
 * succeeded gives its rank alone (>= 0, above every failure). */
msr_status_t ucx_comm_agree(msr_comm_t *comm, msr_status_t mine, msr_status_t *worst_p, int *who_p)
{
    return ucx_comm_agree_min(comm, mine, NULL, worst_p, who_p);
}

/* The same, with a value of the step (min_io, when not NULL) whose least
 * over the members travels in the same allreduce. */
msr_status_t ucx_comm_agree_min(msr_comm_t *comm, msr_status_t mine, int64_t *min_io,
                                msr_status_t *worst_p, int *who_p)
{
    int64_t v[2] = {(int64_t)mine * ((int64_t)1 << 32) + comm->rank, min_io ? *min_io : 0};
    msr_status_t st =
        msr_comm_allreduce(comm, MSR_IN_PLACE, v, min_io ? 2 : 1, MSR_DTYPE_I64, MSR_OP_MIN);
    if (st != MSR_OK)
        return st;
    int64_t rank = v[0] & 0xffffffff;
    *worst_p = v[0] < 0 ? (msr_status_t)((v[0] - rank) / ((int64_t)1 << 32)) : MSR_OK;
    *who_p = (int)rank;
    if (min_io != NULL)
        *min_io = v[1];
    return MSR_OK;
}

typedef struct split_entry {
    int64_t color, key, rank;
} split_entry_t;

static int split_cmp(const void *x, const void *y)
{
    const split_entry_t *a = x, *b = y;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

/* A step of a split agreed over comm, every member taking part whatever
 * its own outcome (mine; its error already set where it failed), so that
 * all fail at once and alike: its own error where it failed, else the
 * failed member named. */
static msr_status_t split_agree(msr_comm_t *comm, msr_status_t mine, const char *step)
{
    char why[256];
    snprintf(why, sizeof why, "%s", msr_last_error());
    msr_status_t worst = MSR_OK;
    int who = 0;
    msr_status_t st = ucx_comm_agree(comm, mine, &worst, &who);
    if (mine != MSR_OK) {
        msr_err_set("%s", why);
        return mine;
    }
    if (st != MSR_OK)
        return msr_err_prefix(st, "msr_comm_split: the agreement %s", step);
    if (worst != MSR_OK)
        return msr_err(worst,
                       "msr_comm_split: rank %d of the communicator (job rank %d) failed %s (%s)",
                       who, comm->world_ranks[who], step, msr_status_str(worst));
    return MSR_OK;
}

/* This member's new communicator of m members (world ranks wr, its rank
 * newrank) with the agreed id: on comm's engine, or with
 * MSR_COMM_OWN_WORKER on one of its own. */
static msr_status_t split_make(msr_comm_t *comm, unsigned flags, int64_t id, int m, const int *wr,
                               int newrank, msr_comm_t **newcomm_p)
{
    ucx_engine_t *e = ((ucx_comm_t *)comm->be)->engine;
    int64_t timeout = atomic_load(&comm->timeout_ms);
    msr_status_t st;
    if (flags & MSR_COMM_OWN_WORKER) {
        /* A new engine: its own worker and addresses, keyed by the parent's
         * engine, the agreed id and the group's first member. */
        char uid[256];
        snprintf(uid, sizeof uid, "%.200s.%lld.%d", e->uid, (long long)id, wr[0]);
        ucx_engine_t *ne = NULL;
        if (flags & MSR_COMM_SPLIT_DUP) /* its addresses over comm, no store */
            st = ucx_engine_create_over(comm, uid, &ne);
        else
            st = ucx_engine_create(comm->ctx, uid, m, wr, &ne);
        if (st != MSR_OK)
            return st;
        unsigned nid = ne->next_comm_id++;
        st = ucx_comm_make(comm->ctx, ne, nid, newrank, m, wr, timeout, newcomm_p);
        if (st != MSR_OK)
            ucx_engine_unref(ne);
    } else {
        ucx_engine_lock(e);
        e->refs++;
        ucx_engine_unlock(e);
        st = ucx_comm_make(comm->ctx, e, (unsigned)id, newrank, m, wr, timeout, newcomm_p);
        if (st != MSR_OK)
            ucx_engine_unref(e);
    }
    return st;
}

/* Every member takes part in every collective step whatever its own
 * outcome (agreements before the exchange and after the communicators are
 * made): a member out of memory or refused makes all fail at once, naming
 * it, not at a deadline. */
static msr_status_t ucx_split(msr_comm_t *comm, int color, int key, unsigned flags,
                              msr_comm_t **newcomm_p)
{
    ucx_comm_t *uc = comm->be;
    ucx_engine_t *e = uc->engine;
    int n = comm->size;
    msr_comm_t *made = NULL;
    int64_t *all = msr_calloc((size_t)n * 3, sizeof *all);
    split_entry_t *members = msr_calloc((size_t)n, sizeof *members);
    int *wr = msr_calloc((size_t)n, sizeof *wr);
    msr_status_t st =
        all && members && wr
            ? MSR_OK
            : msr_err(MSR_ERR_NO_MEMORY, "msr_comm_split: out of memory for %d members", n);
    st = split_agree(comm, st, "before the split");
    if (st != MSR_OK)
        goto out;
    ucx_engine_lock(e);
    int64_t mine[3] = {color, key, e->next_comm_id};
    ucx_engine_unlock(e);
    /* Everyone learns every color and key, and the smallest id that is
     * free on all members (ids only grow). */
    st = msr_comm_allgather(comm, mine, all, 3, MSR_DTYPE_I64);
    if (st != MSR_OK)
        goto out;
    int64_t id = 0;
    for (int i = 0; i < n; i++)
        if (all[3 * i + 2] > id)
            id = all[3 * i + 2];
    ucx_engine_lock(e);
    if (e->next_comm_id <= id)
        e->next_comm_id = (unsigned)id + 1;
    ucx_engine_unlock(e);
    if (id > UCX_MAX_COMM_ID) { /* the same on every member */
        msr_err_set("msr_comm_split: %d communicators made on one engine already", UCX_MAX_COMM_ID);
        st = MSR_ERR_OVERFLOW;
        goto out;
    }
    if (color != MSR_COMM_NO_COLOR) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (all[3 * i] == color)
                members[m++] = (split_entry_t){color, all[3 * i + 1], i};
        qsort(members, (size_t)m, sizeof *members, split_cmp);
        int newrank = -1;
        for (int i = 0; i < m; i++) {
            wr[i] = comm->world_ranks[members[i].rank];
            if (members[i].rank == comm->rank)
                newrank = i;
        }
        st = split_make(comm, flags, id, m, wr, newrank, &made);
    }
    /* every member, also those of no color: none is left waiting in the
     * new communicator's first collective for one that could not make it */
    st = split_agree(comm, st, "making its communicator");
    if (st != MSR_OK) {
        ucx_comm_undo(made);
        made = NULL;
        goto out;
    }
    if (made != NULL && (flags & MSR_COMM_OWN_WORKER)) {
        /* Undone, a communicator of its own engine closes the engine. A
         * member that failed in the steps (its notices sent) closed it
         * while another still had to connect to it for the same step,
         * which then failed with MSR_ERR_BACKEND (a gone shared-memory
         * FIFO) where the others failed with the first one's status:
         * the members agree over comm first, when all are past them. */
        st = split_agree(comm, shm_steps(made), "setting up its shared memory");
        if (st != MSR_OK) {
            ucx_comm_undo(made);
            made = NULL;
        }
    } else if (made != NULL)
        st = with_shm(&made);
    if (st == MSR_OK)
        *newcomm_p = made;
out:
    msr_free(wr);
    msr_free(members);
    msr_free(all);
    return st;
}

static void ucx_close(msr_comm_t *comm)
{
    ucx_comm_t *uc = comm->be;
    ucx_engine_t *e = uc->engine;
    ucx_engine_lock(e);
    if (msr_comm_status(comm) == MSR_OK)
        ucx_comm_say_left(uc);
    uc->closed = 1;
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &e->active)
    {
        ucx_req_t *r = MSR_CONTAINER_OF(pos, ucx_req_t, link);
        if (r->uc == uc)
            ucx_req_fail(r, MSR_ERR_CANCELED, "the communicator was destroyed");
    }
    drop_abort_recv(uc);
    msr_list_remove(&uc->link);
    ucx_engine_unlock(e);
}

static void ucx_release(msr_comm_t *comm)
{
    ucx_comm_t *uc = comm->be;
    ucx_engine_t *e = uc->engine;
    ucx_hier_free(uc);
    ucx_shm_free(uc);
    msr_free(uc->cache);
    msr_free(uc->peer);
    msr_free(uc->left);
    msr_free(uc);
    ucx_engine_unref(e);
}

/* ---- requests ---- */

static ucx_req_t *req_get(ucx_engine_t *e)
{
    ucx_req_t *r;
    if (!msr_list_empty(&e->free_reqs)) {
        msr_list_t *node = e->free_reqs.next;
        msr_list_remove(node);
        e->n_free_reqs--;
        r = MSR_CONTAINER_OF(node, ucx_req_t, link);
    } else {
        r = msr_malloc(sizeof *r);
        if (r == NULL)
            return NULL;
    }
    /* The algorithm state starts cleared; the rest is set below and in
     * begin(). */
    memset(&r->step, 0, offsetof(ucx_req_t, ops) - offsetof(ucx_req_t, step));
    r->pub.local = 0;
    r->pub.error[0] = '\0';
    r->ops = r->inline_ops;
    r->cap_ops = UCX_INLINE_OPS;
    r->nops = 0;
    r->scratch = NULL;
    r->scratch_len = 0;
    r->scratch_from = 0;
    msr_list_init(&r->link);
    return r;
}

/* Back to the free list (lock held). */
static void req_put(ucx_engine_t *e, ucx_req_t *r)
{
    ucx_hier_release(r);
    ucx_req_release_scratch(r);
    ucx_req_drop_ops(r);
    if (e->n_free_reqs < MAX_FREE_REQS) {
        msr_list_push_back(&e->free_reqs, &r->link);
        e->n_free_reqs++;
    } else {
        msr_free(r);
    }
}

/* Starts an operation: a request, the algorithm, its first messages. Lock
 * held. On success *r_p is running (in e->active) or already finished. */
static msr_status_t begin(msr_comm_t *comm, const msr_coll_args_t *a, uint64_t deadline,
                          ucx_req_t **r_p)
{
    ucx_comm_t *uc = comm->be;
    ucx_engine_t *e = uc->engine;
    msr_status_t st = msr_comm_check_usable(comm, "comm");
    if (st != MSR_OK)
        return st;
    ucx_req_t *r = req_get(e);
    if (r == NULL) {
        msr_err_set("comm: out of memory for a request");
        ucx_comm_give_up(uc, MSR_ERR_NO_MEMORY, msr_last_error());
        return MSR_ERR_NO_MEMORY;
    }
    r->pub.comm = comm;
    r->pub.args = *a;
    r->pub.deadline = deadline;
    r->pub.status = MSR_IN_PROGRESS;
    r->uc = uc;
    if (a->coll != MSR_COLL_SEND && a->coll != MSR_COLL_RECV)
        r->seq = uc->seq++ & ((1u << UCX_TAG_SEQ_BITS) - 1);
    st = ucx_coll_start(r);
    if (st != MSR_OK) {
        r->pub.args.v = NULL; /* stays the caller's */
        msr_err_set("%s: cannot start: %s", r->algo ? r->algo : "comm", msr_status_str(st));
        req_put(e, r);
        /* its sequence number is spent: the others must not wait for it */
        ucx_comm_give_up(uc, st, msr_last_error());
        return st;
    }
    msr_list_push_back(&e->active, &r->link);
    /* The first step posts the first messages; small operations may finish
     * right here. */
    st = r->step(r);
    if (st == MSR_OK) {
        r->pub.status = MSR_OK;
        ucx_req_done(r);
    } else if (st != MSR_IN_PROGRESS) {
        ucx_req_fail_step(r, st);
    }
    *r_p = r;
    return MSR_OK;
}

static msr_status_t ucx_post(msr_comm_t *comm, msr_comm_req_t **req_p, const msr_coll_args_t *a,
                             uint64_t deadline)
{
    ucx_engine_t *e = ((ucx_comm_t *)comm->be)->engine;
    ucx_req_t *r = NULL;
    ucx_engine_lock(e);
    msr_status_t st = begin(comm, a, deadline, &r);
    ucx_engine_unlock(e);
    if (st == MSR_OK)
        *req_p = &r->pub;
    return st;
}

/* A blocking call through the slots (ucx_slots_algo names it): its
 * request lives on the stack with only what the slots' step reads set, no
 * free list, no algorithm choice, no scratch; the step writes the slot and
 * polls the awaited words. Only when they are late (its polls ran out, or
 * an earlier non-blocking operation still runs) does the request join the
 * running list and the engine's wait, which watches the deadline and the
 * peers' deaths as for any request. Lock held. */
static msr_status_t run_slots(ucx_comm_t *uc, const msr_coll_args_t *a, uint64_t deadline,
                              const char *algo, size_t es)
{
    ucx_engine_t *e = uc->engine;
    ucx_req_t r;
    r.pub.comm = uc->comm;
    r.pub.args = *a;
    r.pub.deadline = deadline;
    r.pub.status = MSR_IN_PROGRESS;
    r.pub.local = 0;
    r.pub.error[0] = '\0';
    r.uc = uc;
    msr_list_init(&r.link);
    r.step = ucx_shm_step;
    r.algo = algo;
    r.shm = 0;
    r.hier_op = NULL;
    r.seq = uc->seq++ & ((1u << UCX_TAG_SEQ_BITS) - 1);
    r.err = MSR_OK;
    r.n = uc->comm->size;
    r.me = uc->comm->rank;
    r.es = es;
    r.bytes = (size_t)a->count * es;
    r.slots = (ucx_shm_slots_t){.seq = ucx_shm_number(uc)};
    r.ops = r.inline_ops;
    r.cap_ops = UCX_INLINE_OPS;
    r.nops = 0;
    r.scratch = NULL;
    r.scratch_len = 0;
    r.scratch_from = 0;
    msr_status_t st = ucx_shm_step(&r);
    if (st == MSR_IN_PROGRESS) {
        r.shm = 1;
        e->shm_active++;
        msr_list_push_back(&e->active, &r.link);
        st = ucx_engine_wait_locked(e, &r);
    } else if (st != MSR_OK) {
        ucx_req_fail(&r, st, "%s: %s", algo, msr_status_str(st));
        st = r.pub.status;
    }
    if (st != MSR_OK)
        msr_err_set("%s", r.pub.error[0] ? r.pub.error : msr_status_str(st));
    return st;
}

/* Blocking: begin, wait and free under one hold of the lock (the slots:
 * run_slots). */
static msr_status_t ucx_run(msr_comm_t *comm, const msr_coll_args_t *a, uint64_t deadline)
{
    ucx_comm_t *uc = comm->be;
    ucx_engine_t *e = uc->engine;
    ucx_req_t *r = NULL;
    ucx_engine_lock(e);
    size_t es = msr_dtype_size(a->dtype);
    const char *slots = ucx_slots_algo(uc, a, (size_t)a->count * es);
    msr_status_t st = (msr_status_t)atomic_load(&comm->broken);
    if (slots != NULL && st == MSR_OK) {
        st = run_slots(uc, a, deadline, slots, es);
        ucx_engine_unlock(e);
        return st;
    }
    st = begin(comm, a, deadline, &r);
    if (st == MSR_OK) {
        if (r->pub.status == MSR_IN_PROGRESS)
            ucx_engine_wait_locked(e, r);
        st = r->pub.status;
        if (st != MSR_OK)
            msr_err_set("%s", r->pub.error[0] ? r->pub.error : msr_status_str(st));
        r->pub.args.v = NULL; /* the caller's */
        req_put(e, r);
    }
    ucx_engine_unlock(e);
    return st;
}

static msr_status_t ucx_wait(msr_comm_req_t *pub)
{
    ucx_req_t *r = (ucx_req_t *)pub;
    return ucx_engine_wait(r->uc->engine, r);
}

static msr_status_t ucx_test(msr_comm_req_t *pub)
{
    ucx_req_t *r = (ucx_req_t *)pub;
    ucx_engine_t *e = r->uc->engine;
    ucx_engine_lock(e);
    if (r->pub.status == MSR_IN_PROGRESS) {
        ucx_engine_progress(e);
        if (r->pub.deadline == MSR_DEADLINE_LAZY)
            r->pub.deadline = msr_deadline_in_ms(atomic_load(&r->uc->comm->timeout_ms));
        if (r->pub.status == MSR_IN_PROGRESS && msr_deadline_passed(r->pub.deadline))
            ucx_req_fail(r, MSR_ERR_TIMEOUT, "%s: deadline passed after %lld ms", r->algo,
                         (long long)atomic_load(&r->uc->comm->timeout_ms));
    }
    msr_status_t st = r->pub.status;
    ucx_engine_unlock(e);
    return st;
}

static void ucx_req_free_(msr_comm_req_t *pub)
{
    ucx_req_t *r = (ucx_req_t *)pub;
    ucx_engine_t *e = r->uc->engine;
    ucx_engine_lock(e);
    req_put(e, r);
    ucx_engine_unlock(e);
}

static void ucx_give_up(msr_comm_t *comm, msr_status_t st, const char *why)
{
    ucx_comm_t *uc = comm->be;
    ucx_engine_lock(uc->engine);
    ucx_comm_give_up(uc, st, why);
    ucx_engine_unlock(uc->engine);
}

static const msr_comm_backend_ops_t ucx_ops = {
    .name = "ucx",
    .post = ucx_post,
    .run = ucx_run,
    .wait = ucx_wait,
    .test = ucx_test,
    .req_free = ucx_req_free_,
    .split = ucx_split,
    .close = ucx_close,
    .release = ucx_release,
    .give_up = ucx_give_up,
};
