/* The job's generations: its state, forming a generation from the nodes
 * ready for it (fixed size, or elastic within MIN:MAX), workers' exits
 * reported, and a failure's restart or the job's end, with its root
 * cause and history. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/list.h"
#include "base/log.h"
#include "base/map.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "cluster/coord_internal.h"
#include "msrun/store.h"

static void fail_job(msr_coord_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_state(msr_coord_t *c, msr_job_state_t s)
{
    if (c->state != s)
        MSR_INFO("job %s: generation %d %s", c->job_id ? c->job_id : "?", c->generation,
                 msr_job_state_name(s));
    c->state = s;
    if (state_forming(s))
        c->form_deadline = msr_deadline_in_ms(c->config.join_timeout_ms);
    else
        c->form_deadline = MSR_DEADLINE_NEVER;
    MARK_DIRTY(c, 2);
    msr_coord_wake_heartbeats(c);
}

static void start_generation(msr_coord_t *c, int generation, const char *why)
{
    c->generation = generation;
    msr_coord_recount(c); /* who is ready depends on the generation */
    char msg[640];
    snprintf(msg, sizeof msg, "generation %d ended: %.560s", generation - 1, why);
    msr_coord_store_reset(c, msg);
    for (size_t i = 0; i < c->nnodes; i++)
        c->nodes[i]->rank = -1;
    memset(c->rank_done, 0, (size_t)c->worker_num);
    c->ndone = 0;
    c->join_wall_ns = 0; /* a new generation takes the joiners in */
    MARK_DIRTY(c, 2);
}

void msr_coord_history_add(msr_coord_t *c, const msr_failure_t *f)
{
    if (c->nhistory == MSR_FAILURE_HISTORY) {
        memmove(&c->history[0], &c->history[1], (MSR_FAILURE_HISTORY - 1) * sizeof c->history[0]);
        c->nhistory--;
    }
    msr_failure_t *h = &c->history[c->nhistory++];
    *h = *f;
    memset(h->tail, 0, sizeof h->tail); /* the tail stays with f */
    h->ntail = 0;
}

/* Ends the running generation after a failure: a new one if restarts remain,
 * else the job fails. Takes the tail strings of f. The generation's first
 * failure is its root cause: the one kept and added to the history. */
void msr_coord_generation_failed(msr_coord_t *c, msr_failure_t *f)
{
    char what[512];
    msr_failure_describe(f, what, sizeof what);
    if (!c->failure.set || c->failure.generation != f->generation) {
        msr_coord_history_add(c, f);
        msr_failure_clear(&c->failure);
        c->failure = *f; /* the tail strings now belong to c->failure */
    } else {
        msr_failure_clear(f);
    }
    if (c->restart_count < c->max_restarts) {
        c->restart_count++;
        snprintf(c->message, sizeof c->message, "restart %d of %d after %s", c->restart_count,
                 c->max_restarts, what);
        MSR_LOG(outcome_level(c), "job %s: %s", c->job_id, c->message);
        start_generation(c, c->generation + 1, what);
        set_state(c, MSR_JOB_RESTARTING);
        return;
    }
    if (c->max_restarts > 0)
        snprintf(c->message, sizeof c->message, "%s; no restarts left (%d used)", what,
                 c->restart_count);
    else
        snprintf(c->message, sizeof c->message, "%s", what);
    MSR_LOG(outcome_level(c), "job %s failed: %s", c->job_id, c->message);
    set_state(c, MSR_JOB_FAILED);
}

/* Replaces the root cause of the generation that ended (c->failure, which
 * failed after losing a communication peer) with f, the failure that peer
 * loss followed; takes the tail strings of f. */
static void root_cause_found(msr_coord_t *c, msr_failure_t *f)
{
    char was[512], what[512];
    msr_failure_describe(&c->failure, was, sizeof was);
    msr_failure_describe(f, what, sizeof what);
    for (size_t i = c->nhistory; i-- > 0;)
        if (c->history[i].generation == f->generation) {
            c->history[i] = *f;
            memset(c->history[i].tail, 0, sizeof c->history[i].tail);
            c->history[i].ntail = 0;
            break;
        }
    msr_failure_clear(&c->failure);
    c->failure = *f;
    if (c->state == MSR_JOB_FAILED && c->max_restarts > 0)
        snprintf(c->message, sizeof c->message, "%s; no restarts left (%d used)", what,
                 c->restart_count);
    else if (c->state == MSR_JOB_FAILED)
        snprintf(c->message, sizeof c->message, "%s", what);
    else if (c->generation == f->generation + 1 && c->restart_count > 0)
        snprintf(c->message, sizeof c->message, "restart %d of %d after %s", c->restart_count,
                 c->max_restarts, what);
    MSR_LOG(outcome_level(c), "job %s: generation %d's root cause: %s (then %s)", c->job_id,
            f->generation, what, was);
    MARK_DIRTY(c, 1);
}

static void fail_job(msr_coord_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->message, sizeof c->message, fmt, ap);
    va_end(ap);
    MSR_LOG(outcome_level(c), "job %s failed: %s", c->job_id ? c->job_id : "?", c->message);
    set_state(c, MSR_JOB_FAILED);
}

/* Elastic: the members of the next generation in a stable order: the ranks
 * they had, then newcomers by arrival; renumbered from 0. */
static void assign_elastic(msr_coord_t *c, int count)
{
    node_t **order = msr_calloc((size_t)c->nnodes, sizeof *order);
    int n = 0;
    for (size_t i = 0; order && i < c->nnodes; i++)
        if (ready_for(c, c->nodes[i]))
            order[n++] = c->nodes[i];
    for (int a = 1; a < n; a++) /* insertion sort: old rank, then arrival */
        for (int b = a; b > 0; b--) {
            node_t *x = order[b - 1], *y = order[b];
            int xr = x->rank >= 0 ? x->rank : INT32_MAX, yr = y->rank >= 0 ? y->rank : INT32_MAX;
            if (xr < yr || (xr == yr && x->joined_seq <= y->joined_seq))
                break;
            order[b - 1] = y;
            order[b] = x;
        }
    for (size_t i = 0; i < c->nnodes; i++)
        c->nodes[i]->rank = -1;
    for (int k = 0; k < n && k < count; k++)
        order[k]->rank = k;
    msr_free(order);
}

static int by_machine(const void *x, const void *y)
{
    uint64_t a = (*(node_t *const *)x)->machine, b = (*(node_t *const *)y)->machine;
    return a < b ? -1 : a > b;
}

/* Each member's count of the generation's ranks on its machine: the
 * members that told the same machine, times the workers of a node. All or
 * none: when a member did not tell its machine (an older msrun), or out of
 * memory, every member gets 0, and the workers of every node count for
 * themselves through the store, as they all must to meet at its barrier
 * (comm/ucx/engine_peers.c). O(members log members). */
static void count_machine_ranks(msr_coord_t *c)
{
    node_t **m = msr_calloc(c->nnodes + 1, sizeof *m);
    size_t k = 0;
    int untold = 0;
    for (size_t i = 0; i < c->nnodes; i++) {
        c->nodes[i]->machine_ranks = 0;
        if (c->nodes[i]->rank >= 0 && c->nodes[i]->machine == 0)
            untold = 1;
        if (m && c->nodes[i]->rank >= 0)
            m[k++] = c->nodes[i];
    }
    if (m == NULL || untold) {
        msr_free(m);
        return;
    }
    qsort(m, k, sizeof *m, by_machine);
    for (size_t i = 0, j; i < k; i = j) {
        for (j = i + 1; j < k && m[j]->machine == m[i]->machine; j++)
            ;
        long long ranks = (long long)(j - i) * c->local_worker_num;
        for (size_t t = i; t < j; t++)
            m[t]->machine_ranks = ranks > INT32_MAX ? INT32_MAX : (int)ranks;
    }
    msr_free(m);
}

static node_t *member_of_rank(const msr_coord_t *c, int rank)
{
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i]->alive && c->nodes[i]->rank == rank)
            return c->nodes[i];
    return NULL;
}

/* Forms the generation once enough nodes are ready for it. Fixed size: all
 * node_count. Elastic: MAX at once; at least MIN once the last call has
 * passed (first generation), or once every live node is ready (after a
 * failure, when who is left is known). */
void msr_coord_try_form(msr_coord_t *c)
{
    if (!state_forming(c->state) || !c->configured)
        return;
    /* kept counts: a ready heartbeat costs O(1) until the job forms */
    int ready = c->nready, alive = c->nalive;
    if (elastic(c)) {
        if (ready < c->min_nodes)
            return;
        uint64_t now = msr_now_ns();
        int all_in = ready == alive && c->state == MSR_JOB_RESTARTING;
        if (ready < c->max_nodes && !all_in) {
            if (c->last_call == 0)
                c->last_call = now + (uint64_t)c->config.last_call_ms * 1000000ull;
            if (now < c->last_call)
                return; /* more nodes may come */
        }
        c->last_call = 0;
        c->node_count = ready < c->max_nodes ? ready : c->max_nodes;
        assign_elastic(c, c->node_count);
    } else {
        if (ready < c->node_count)
            return;
        /* Wanted ranks first, then the rest by arrival: O(nodes), the
         * ranks taken marked (at most nnodes of them are below nnodes) */
        uint8_t *taken = msr_calloc(c->nnodes + 1, 1);
        if (taken == NULL) {
            MSR_WARN("job %s: out of memory forming generation %d; trying again at the next "
                     "heartbeat",
                     c->job_id, c->generation);
            return;
        }
        for (size_t i = 0; i < c->nnodes; i++) {
            node_t *n = c->nodes[i];
            n->rank = -1;
            if (ready_for(c, n) && n->wanted_rank >= 0) {
                n->rank = n->wanted_rank;
                if ((size_t)n->rank < c->nnodes)
                    taken[n->rank] = 1;
            }
        }
        int next = 0;
        for (size_t i = 0; i < c->nnodes; i++) {
            node_t *n = c->nodes[i];
            if (!ready_for(c, n) || n->rank >= 0)
                continue;
            while ((size_t)next < c->nnodes && taken[next])
                next++;
            n->rank = next++;
        }
        msr_free(taken);
    }
    count_machine_ranks(c);
    node_t *zero = member_of_rank(c, 0);
    snprintf(c->master_addr, sizeof c->master_addr, "%s", zero ? zero->host : "");
    c->master_port = zero ? zero->free_port : 0;
    c->message[0] = '\0';
    MSR_INFO("job %s: generation %d formed with %d nodes (%d workers)", c->job_id, c->generation,
             c->node_count, world_size(c));
    set_state(c, MSR_JOB_RUNNING);
}

void msr_coord_report(msr_coord_t *c, void *call, const Msr__ReportRequest *req)
{
    node_t *n = msr_coord_node_find(c, req->node_id);
    Msr__ReportResponse r = MSR__REPORT_RESPONSE__INIT;
    if (n == NULL) {
        msr_held_fail(&c->held, call, MSR_RPC_NOT_FOUND, "unknown node; join again");
        return;
    }
    n->last_seen = msr_now_ns();
    const Msr__Failure *e = req->exit;
    if (e == NULL) {
        msr_held_fail(&c->held, call, MSR_RPC_INVALID_ARGUMENT, "report without an exit");
        return;
    }
    if (req->generation == c->generation && c->state == MSR_JOB_RUNNING) {
        if (e->exit_code == 0 && e->signal == 0) {
            if (e->rank >= 0 && e->rank < world_size(c) && e->rank < c->worker_num &&
                !c->rank_done[e->rank]) {
                c->rank_done[e->rank] = 1;
                c->ndone++;
                MARK_DIRTY(c, 1);
                if (c->ndone == world_size(c)) {
                    snprintf(c->message, sizeof c->message, "all %d workers exited 0",
                             world_size(c));
                    set_state(c, MSR_JOB_DONE);
                }
            }
        } else {
            msr_failure_t f;
            memset(&f, 0, sizeof f);
            msr_failure_from_msg(&f, e);
            f.node_rank = n->rank;
            snprintf(f.host, sizeof f.host, "%s", n->host);
            f.generation = c->generation;
            msr_coord_generation_failed(c, &f);
        }
    } else if ((e->exit_code != 0 || e->signal != 0) && !e->after_peer_lost && c->failure.set &&
               c->failure.after_peer_lost && c->failure.generation == req->generation) {
        /* the failure that ended the generation followed a lost peer: this
         * one, reported after it, is what the peer lost */
        msr_failure_t f;
        memset(&f, 0, sizeof f);
        msr_failure_from_msg(&f, e);
        /* the node's rank in that generation: the coordinator's may be
         * gone with it */
        f.node_rank = e->node_rank >= 0 ? e->node_rank : n->rank;
        snprintf(f.host, sizeof f.host, "%s", n->host);
        f.generation = req->generation;
        root_cause_found(c, &f);
    }
    r.state = (Msr__JobState)c->state;
    r.generation = c->generation;
    msr_coord_reply(c, call, &r.base);
}

void msr_coord_join_notice(msr_coord_t *c, int waiting)
{
    char text[16];
    int n = snprintf(text, sizeof text, "%d", waiting);
    /* seen by the workers' polls only: nobody waits on it; saved with the
     * job, so that the workers see it after a restart of the coordinator */
    if (msr_store_core_load_set(c->store, MSR_KEY_JOIN_WAITING, text, (size_t)n) != MSR_OK)
        MSR_WARN("job %s: cannot tell the workers that a node waits: %s", c->job_id, msr_err_msg());
    else
        msr_coord_key_changed(c, MSR_KEY_JOIN_WAITING);
}

void msr_coord_join_restore(msr_coord_t *c)
{
    if (c->join_wall_ns <= 0 || !elastic(c) || c->state != MSR_JOB_RUNNING) {
        c->join_wall_ns = 0; /* a later record of the log: no join waits now */
        c->last_call = 0;
        c->join_hold_until = 0;
        return;
    }
    int64_t since = (int64_t)(msr_wall_time() * 1e9) - c->join_wall_ns;
    uint64_t ago = since > 0 ? (uint64_t)since : 0; /* a clock set back: from now */
    uint64_t now = msr_now_ns();
    uint64_t last_call = (uint64_t)c->config.last_call_ms * 1000000ull;
    uint64_t hold = (uint64_t)c->config.join_hold_ms * 1000000ull;
    c->last_call = now + (ago < last_call ? last_call - ago : 0);
    c->join_hold_until = now + (ago < hold ? hold - ago : 0);
    MSR_INFO("job %s: a node joined %.3f s before this restart: taken in at a new generation "
             "after the last call (held at most %.3f s more while the workers save)",
             c->job_id, (double)ago / 1e9, (double)(c->join_hold_until - now) / 1e9);
}

/* Whether the workers save before the re-form that takes joiners in
 * (MSR_KEY_JOIN_SAVES without MSR_KEY_JOIN_READY) and may still. */
static int join_held(const msr_coord_t *c, uint64_t now)
{
    return now < c->join_hold_until && msr_store_core_value(c->store, MSR_KEY_JOIN_SAVES) != NULL &&
           msr_store_core_value(c->store, MSR_KEY_JOIN_READY) == NULL;
}

/* The poll of a held re-form: the workers' READY is a store write, which
 * wakes nobody here. */
#define JOIN_HOLD_POLL_NS 20000000ull

void msr_coord_check_forming(msr_coord_t *c, uint64_t now)
{
    if (elastic(c) && c->last_call && now >= c->last_call) {
        if (c->state == MSR_JOB_RUNNING && alive_nodes(c) > c->node_count && join_held(c, now)) {
            /* the workers are saving: look again soon, and at the bound */
            c->last_call = MSR_MIN(now + JOIN_HOLD_POLL_NS, c->join_hold_until);
        } else if (c->state == MSR_JOB_RUNNING && alive_nodes(c) > c->node_count) {
            /* nodes joined a running job: re-form to take them in (a change
             * of membership, not a failure: no restart is counted) */
            int joined = alive_nodes(c) - c->node_count;
            c->last_call = 0;
            snprintf(c->message, sizeof c->message, "%d node%s joined: re-forming with up to %d",
                     joined, joined == 1 ? "" : "s", alive_nodes(c));
            MSR_INFO("job %s: %s", c->job_id, c->message);
            start_generation(c, c->generation + 1, "nodes joined");
            set_state(c, MSR_JOB_RESTARTING);
        } else {
            msr_coord_try_form(c);
        }
    }
    if (state_forming(c->state) && c->form_deadline != MSR_DEADLINE_NEVER &&
        now >= c->form_deadline) {
        int ready = 0;
        for (size_t i = 0; i < c->nnodes; i++)
            ready += c->nodes[i]->alive && c->nodes[i]->ready_generation >= c->generation;
        char missing[200];
        msr_coord_missing_describe(c, missing, sizeof missing);
        fail_job(c, "generation %d did not form within %g s: %d of %d nodes ready%s%s%s",
                 c->generation, (double)c->config.join_timeout_ms / 1000.0, ready, c->node_count,
                 missing[0] ? " (" : "", missing, missing[0] ? " missing)" : "");
    }
}
