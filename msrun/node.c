/* The node's state machine (node.h): decisions only; the agent performs
 * them. Logs what it decides, like the coordinator's core. */
#include "launcher/node.h"
#include "launcher/node_impl.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"

#define BACKOFF_MIN  50   /* ms: the first retry of a join or heartbeat */
#define BACKOFF_MAX  1000 /* ms: retries back off to this */
#define STUCK_MS     5000 /* after SIGKILL, how long before giving up on a worker */
#define SLOW_FORM_MS 1000 /* forming takes longer than this: say who is awaited */

/* ---- the queue ---- */

msr_node_action_t *msr_node_push(msr_node_t *n, msr_node_act_kind_t kind)
{
    static msr_node_action_t dropped;
    if (n->acts_len == n->acts_cap) {
        /* cannot happen: the queue holds two actions per worker and more
         * than one event queues at once; the fuzzer checks it */
        MSR_ERROR("node: action queue full, dropping action %d", (int)kind);
        memset(&dropped, 0, sizeof dropped);
        return &dropped;
    }
    msr_node_action_t *a = &n->acts[(n->acts_head + n->acts_len) % n->acts_cap];
    n->acts_len++;
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->local = -1;
    return a;
}

int msr_node_next_action(msr_node_t *n, msr_node_action_t *act_p)
{
    if (n->acts_len == 0)
        return 0;
    *act_p = n->acts[n->acts_head];
    n->acts_head = (n->acts_head + 1) % n->acts_cap;
    n->acts_len--;
    return 1;
}

msr_status_t msr_node_init(msr_node_t *n, const msr_node_config_t *cfg)
{
    memset(n, 0, sizeof *n);
    n->cfg = *cfg;
    n->node_rank = -1;
    n->worker_generation = -1;
    n->ready_generation = -1;
    n->backoff_ms = BACKOFF_MIN;
    n->state = MSR_JOB_UNKNOWN;
    n->rng = cfg->seed ? cfg->seed : 0x9e3779b97f4a7c15ull;
    n->acts_cap = 2 * (size_t)(cfg->nworkers > 0 ? cfg->nworkers : 0) + 32;
    n->workers = msr_calloc(cfg->nworkers > 0 ? (size_t)cfg->nworkers : 1, sizeof *n->workers);
    n->acts = msr_calloc(n->acts_cap, sizeof *n->acts);
    if (n->workers == NULL || n->acts == NULL) {
        msr_node_cleanup(n);
        return msr_err(MSR_ERR_NO_MEMORY, "node: no memory for %d workers", cfg->nworkers);
    }
    return MSR_OK;
}

void msr_node_cleanup(msr_node_t *n)
{
    msr_failure_clear(&n->cause);
    msr_free(n->workers);
    msr_free(n->acts);
    n->workers = NULL;
    n->acts = NULL;
    n->acts_cap = n->acts_len = 0;
}

static uint64_t min_armed(uint64_t a, uint64_t b)
{
    return a == 0 ? b : b == 0 ? a : a < b ? a : b;
}

uint64_t msr_node_next_deadline(const msr_node_t *n)
{
    if (n->finished)
        return 0;
    uint64_t d = min_armed(n->retry_at, n->kill_at);
    return min_armed(min_armed(min_armed(d, n->stuck_at), n->hang_at), n->spawn_at);
}

/* ---- the coordinator ---- */

/* A retry between backoff/2 and backoff from now, so that many nodes
 * retrying at once spread; the backoff doubles up to BACKOFF_MAX. */
static void schedule_retry(msr_node_t *n, uint64_t now)
{
    n->rng ^= n->rng << 13;
    n->rng ^= n->rng >> 7;
    n->rng ^= n->rng << 17;
    int64_t ms = n->backoff_ms;
    int64_t d = ms / 2 + (int64_t)(n->rng % (uint64_t)(ms / 2 + 1));
    n->retry_at = now + (uint64_t)d * NS_PER_MS;
    n->backoff_ms = n->backoff_ms * 2 > BACKOFF_MAX ? BACKOFF_MAX : n->backoff_ms * 2;
}

static void heartbeat(msr_node_t *n)
{
    if (n->finished || !n->joined)
        return;
    msr_node_action_t *a = msr_node_push(n, MSR_NODE_ACT_HEARTBEAT);
    a->generation = n->generation;
    n->hb_inflight++;
}

void msr_node_on_start(msr_node_t *n, uint64_t now)
{
    if (n->cfg.worker_timeout_ms > 0) {
        int64_t every = n->cfg.worker_timeout_ms / 4 < 50 ? 50 : n->cfg.worker_timeout_ms / 4;
        n->hang_at = now + (uint64_t)(every > 1000 ? 1000 : every) * NS_PER_MS;
    }
    /* cluster_time_out counts from here, not from the first failed call */
    n->coord_lost_since = now;
    msr_node_push(n, MSR_NODE_ACT_JOIN);
}

void msr_node_on_send_failed(msr_node_t *n, uint64_t now, const char *why)
{
    if (n->finished)
        return;
    if (!n->joined) {
        MSR_ERROR("cannot send the join request: %s", why);
        msr_node_finish(n, 1, NULL);
        return;
    }
    n->hb_inflight--;
    schedule_retry(n, now);
}

void msr_node_on_joined(msr_node_t *n, uint64_t now, int generation, int max_restarts)
{
    (void)now;
    if (n->finished || n->joined)
        return;
    n->generation = generation;
    n->max_restarts = max_restarts;
    n->joined = 1;
    n->coord_lost_since = 0;
    n->backoff_ms = BACKOFF_MIN;
    n->ready_generation = generation;
    heartbeat(n);
}

void msr_node_on_join_failed(msr_node_t *n, uint64_t now, msr_node_join_error_t e, const char *why)
{
    if (n->finished || n->joined)
        return;
    if (e == MSR_NODE_JOIN_REFUSED) {
        /* a wrong token is the common cause: say where the token comes from */
        int token = why != NULL && strstr(why, "wrong job token") != NULL;
        snprintf(n->error, sizeof n->error, "the coordinator at %s refused this node: %s%s",
                 n->cfg.coord_target, why,
                 token ? ": check --token_file, MSRUN_TOKEN_FILE, --token or MSRUN_TOKEN (every "
                         "node of a job must give the same)"
                       : "");
        msr_node_finish(n, 2, n->error);
        return;
    }
    /* away, or full (a lost node may not be reaped yet) */
    if (n->coord_lost_since == 0)
        n->coord_lost_since = now;
    if (now - n->coord_lost_since >= (uint64_t)n->cfg.cluster_time_out_ms * NS_PER_MS) {
        snprintf(n->error, sizeof n->error, "no coordinator answered at %s within %g s",
                 n->cfg.coord_target, (double)n->cfg.cluster_time_out_ms / 1000.0);
        msr_node_finish(n, MSR_EXIT_NOT_FORMED, n->error);
        return;
    }
    if (now - n->last_progress > 5000 * NS_PER_MS) {
        if (e == MSR_NODE_JOIN_FULL)
            MSR_INFO("the job at %s is full (%s); waiting for a free place", n->cfg.coord_target,
                     why);
        else
            MSR_INFO("waiting for the coordinator at %s", n->cfg.coord_target);
        n->last_progress = now;
    }
    schedule_retry(n, now);
    /* the last try ends at the deadline, not a backoff after it */
    uint64_t end = n->coord_lost_since + (uint64_t)n->cfg.cluster_time_out_ms * NS_PER_MS;
    if (n->retry_at > end)
        n->retry_at = end;
}

int64_t msr_node_join_left_ms(const msr_node_t *n, uint64_t now)
{
    uint64_t end = n->coord_lost_since + (uint64_t)n->cfg.cluster_time_out_ms * NS_PER_MS;
    if (n->joined || n->coord_lost_since == 0)
        return n->cfg.cluster_time_out_ms;
    int64_t left = now >= end ? 0 : (int64_t)((end - now) / NS_PER_MS);
    return left < 1 ? 1 : left;
}

void msr_node_give_up(msr_node_t *n, uint64_t now)
{
    MSR_ERROR("%s", n->message);
    n->interrupted = -1;
    n->exit_code = 1;
    if (n->nrunning)
        msr_node_stop_workers(n, now, SIGTERM);
    else
        msr_node_finish(n, 1, NULL);
}

void msr_node_on_heartbeat_failed(msr_node_t *n, uint64_t now, int gone, const char *why)
{
    n->hb_inflight--;
    if (n->finished)
        return;
    if (gone) {
        snprintf(n->message, sizeof n->message, "the coordinator no longer knows this node: %s",
                 why);
        msr_node_give_up(n, now);
        return;
    }
    if (n->coord_lost_since == 0) {
        n->coord_lost_since = now;
        MSR_WARN("no answer from the coordinator at %s: %s; retrying", n->cfg.coord_target, why);
    } else if (now - n->coord_lost_since > (uint64_t)n->cfg.coordinator_timeout_ms * NS_PER_MS) {
        snprintf(n->message, sizeof n->message,
                 "lost the coordinator at %s: no answer for %.1f s (%.200s)", n->cfg.coord_target,
                 (double)n->cfg.coordinator_timeout_ms / 1000.0, why);
        msr_node_give_up(n, now);
        return;
    }
    if (n->hb_inflight == 0)
        schedule_retry(n, now);
}

void msr_node_on_heartbeat_rerouted(msr_node_t *n, uint64_t now)
{
    n->hb_inflight--;
    if (!n->finished && n->hb_inflight == 0)
        schedule_retry(n, now);
}

void msr_node_on_coord_moved(msr_node_t *n, uint64_t now)
{
    if (n->finished)
        return;
    n->backoff_ms = BACKOFF_MIN;
    if (n->retry_at)
        n->retry_at = now; /* the retry waiting for the old one goes to the new one now */
}

/* "waiting for nodes: 1 of 2 joined (awaiting: node 1 not yet joined);
 * 590 s left of --cluster_time_out 600 s": quiet when forming is quick,
 * then at each change, and otherwise every 10 s in the first minute, every
 * 30 s to the fifth and every 60 s after (a long wait needs no line every
 * 10 s). */
static void print_progress(msr_node_t *n, uint64_t now, const msr_node_update_t *u)
{
    if (n->forming_since == 0)
        n->forming_since = now;
    int changed = u->joined_nodes != n->last_joined;
    uint64_t waited_ms = (now - n->forming_since) / NS_PER_MS;
    if (waited_ms < SLOW_FORM_MS && u->joined_nodes < u->expected_nodes)
        return;
    uint64_t every_ms = waited_ms < 60000 ? 10000 : waited_ms < 300000 ? 30000 : 60000;
    if (!changed && now - n->last_progress < every_ms * NS_PER_MS)
        return;
    n->last_joined = u->joined_nodes;
    n->last_progress = now;
    int some = u->missing && u->missing[0];
    char left[96] = "";
    if (u->form_left_ms > 0 && u->form_timeout_ms > 0)
        snprintf(left, sizeof left, "; %.0f s left of --cluster_time_out %.0f s",
                 (double)u->form_left_ms / 1000.0, (double)u->form_timeout_ms / 1000.0);
    MSR_INFO("waiting for nodes: %d of %d joined%s%s%s%s", u->joined_nodes, u->expected_nodes,
             some ? " (awaiting: " : "", some ? u->missing : "", some ? ")" : "", left);
}

static void take_update(msr_node_t *n, const msr_node_update_t *u)
{
    n->generation = u->generation;
    n->state = u->state;
    n->restart_count = u->restart_count;
    n->max_restarts = u->max_restarts;
    snprintf(n->message, sizeof n->message, "%s", u->message ? u->message : "");
    if (u->failure) {
        if (n->cause.set && n->cause.after_peer_lost && !u->failure->after_peer_lost &&
            u->failure->generation == n->cause.generation &&
            (u->failure->rank != n->cause.rank || u->failure->node_rank != n->cause.node_rank)) {
            /* the failure the peer loss followed came in after it */
            char was[512], what[512];
            msr_failure_describe(&n->cause, was, sizeof was);
            msr_failure_describe(u->failure, what, sizeof what);
            MSR_WARN("generation %d's root cause: %s (then %s)", u->failure->generation, what, was);
        }
        msr_failure_clear(&n->cause);
        n->cause = *u->failure; /* the tail strings now belong to the node */
        memset(u->failure, 0, sizeof *u->failure);
    }
    if (u->has_assignment && u->state == MSR_JOB_RUNNING) {
        if (n->node_rank != u->node_rank)
            msr_node_push(n, MSR_NODE_ACT_LOG_RANK)->code = u->node_rank;
        n->node_rank = u->node_rank;
        n->node_count = u->node_count;
        n->world_size = u->world_size;
        n->rank_offset = u->rank_offset;
        snprintf(n->master_addr, sizeof n->master_addr, "%s", u->master_addr ? u->master_addr : "");
        n->master_port = u->master_port;
        /* A coordinator restarted within the generation on a state that
         * lacks the count (saved by an msrun before it) answers 0: keep
         * the one the generation's workers were started with, so that a
         * replacement worker counts as they did and does not wait alone
         * in the store's count. The generation's own, not the last one's:
         * n->generation moves on while the job restarts, before the new
         * assignment comes. */
        if (u->machine_ranks > 0 || u->generation != n->machine_generation)
            n->machine_ranks = u->machine_ranks;
        n->machine_generation = u->generation;
    }
}

static void spawn(msr_node_t *n, uint64_t now)
{
    n->worker_generation = n->generation;
    n->spawned = 1;
    n->spawned_at = now;
    for (int i = 0; i < n->cfg.nworkers; i++) {
        n->workers[i].beaten = 0;
        n->workers[i].sent_sigs = 0;
        /* a new generation's workers are first processes (MSR_INCARNATION
         * 0), also where every worker ended on its own and no stop of
         * msrun's cleared the slots */
        n->workers[i].incarnation = 0;
    }
    n->spawn_at = 0;
    msr_node_action_t *a = msr_node_push(n, MSR_NODE_ACT_SPAWN);
    a->generation = n->generation;
    a->local = 0;
}

int msr_node_spawn_turn_over(const msr_node_t *n, uint64_t began, uint64_t now)
{
    (void)n;
    return now >= began && now - began >= MSR_NODE_SPAWN_SLICE_MS * NS_PER_MS;
}

void msr_node_on_spawn_paused(msr_node_t *n, uint64_t now, int next)
{
    if (n->finished || n->stopping || next <= 0 || next >= n->cfg.nworkers)
        return;
    n->spawn_next = next;
    n->spawn_at = now ? now : 1; /* the next tick, after the loop's turn */
}

/* The tick after a paused spawn: the rest, unless the workers were told to
 * stop (or moved to another generation) meanwhile. */
static void spawn_resume(msr_node_t *n)
{
    n->spawn_at = 0;
    if (n->stopping || n->worker_generation != n->generation || n->spawn_next <= 0)
        return;
    msr_node_action_t *a = msr_node_push(n, MSR_NODE_ACT_SPAWN);
    a->generation = n->generation;
    a->local = n->spawn_next;
}

/* The exit status of a failed job: the root cause's, or MSR_EXIT_NOT_FORMED
 * when the job failed before any worker of this node ran and without a
 * worker's failure (it did not form in time). */
static int failed_code(const msr_node_t *n)
{
    if (!n->cause.set && !n->spawned)
        return MSR_EXIT_NOT_FORMED;
    return msr_failure_exit_code(&n->cause);
}

/* Makes the workers follow the job's state. */
static void follow(msr_node_t *n, uint64_t now, const msr_node_update_t *u, int new_generation)
{
    switch (u->state) {
    case MSR_JOB_FAILED:
    case MSR_JOB_DONE:
        if (n->nrunning > 0 || n->stopping)
            msr_node_stop_workers(n, now, SIGTERM);
        else
            msr_node_finish(n, u->state == MSR_JOB_DONE ? 0 : failed_code(n), NULL);
        break;
    case MSR_JOB_RUNNING:
        n->forming_since = 0;
        if (n->nrunning > 0 && n->worker_generation != n->generation)
            msr_node_stop_workers(n, now, SIGTERM); /* workers of an older generation */
        else if (!n->stopping && u->has_assignment && n->worker_generation != n->generation &&
                 n->ready_generation >= n->generation)
            spawn(n, now);
        break;
    case MSR_JOB_WAITING:
    case MSR_JOB_RESTARTING:
        if (new_generation && n->generation > 0 && n->message[0])
            MSR_WARN("%s", n->message);
        if (n->nrunning > 0 || n->stopping) {
            msr_node_stop_workers(n, now, SIGTERM);
        } else if (n->ready_generation < n->generation) {
            n->ready_generation = n->generation;
            heartbeat(n); /* tell the coordinator at once */
        }
        print_progress(n, now, u);
        break;
    default:
        break;
    }
}

void msr_node_on_update(msr_node_t *n, uint64_t now, const msr_node_update_t *u)
{
    n->hb_inflight--;
    if (n->finished)
        return;
    if (n->coord_lost_since)
        MSR_INFO("the coordinator at %s answers again", n->cfg.coord_target);
    n->coord_lost_since = 0;
    n->coord_ended = 0;
    n->backoff_ms = BACKOFF_MIN;
    int new_generation = u->generation != n->generation;
    take_update(n, u);
    if (!n->interrupted) /* else already on the way out */
        follow(n, now, u, new_generation);
    if (!n->finished && n->hb_inflight == 0)
        heartbeat(n);
}

/* ---- workers ---- */

void msr_node_on_spawned(msr_node_t *n, int local, int pid)
{
    if (local < 0 || local >= n->cfg.nworkers || n->workers[local].running)
        return;
    msr_node_worker_t *w = &n->workers[local];
    int incarnation = w->incarnation; /* a replacement's; 0 in a new generation */
    memset(w, 0, sizeof *w);
    w->incarnation = incarnation;
    w->running = 1;
    w->pid = pid;
    w->rank = n->rank_offset + local;
    n->nrunning++;
}

void msr_node_on_spawn_failed(msr_node_t *n, uint64_t now, const char *why)
{
    if (n->finished)
        return;
    snprintf(n->message, sizeof n->message, "%s", why);
    n->exit_code = 2;
    n->interrupted = -1; /* finish with exit_code once stopped */
    msr_node_stop_workers(n, now, SIGKILL);
}

/* Sends sig to every running worker (local -1) or to one, and remembers it:
 * a death by another signal was not msrun's doing. */
msr_node_action_t *msr_node_signal_workers(msr_node_t *n, int local, int sig)
{
    for (int i = 0; i < n->cfg.nworkers; i++)
        if ((local < 0 || i == local) && n->workers[i].running && sig > 0 && sig < 32)
            n->workers[i].sent_sigs |= 1u << sig;
    msr_node_action_t *a = msr_node_push(n, MSR_NODE_ACT_SIGNAL);
    a->local = local;
    a->sig = sig;
    return a;
}

/* Every worker is gone: the next generation, or the end. */
static void stopping_done(msr_node_t *n)
{
    if (!n->stopping || n->nrunning > 0)
        return;
    n->stopping = 0;
    n->kill_at = n->stuck_at = 0;
    msr_node_push(n, MSR_NODE_ACT_RELEASE);
    for (int i = 0; i < n->cfg.nworkers; i++)
        memset(&n->workers[i], 0, sizeof n->workers[i]);
    n->worker_generation = -1;
    if (n->interrupted) {
        msr_node_finish(n, n->interrupted > 0 ? 128 + n->interrupted : n->exit_code, NULL);
    } else if (n->state == MSR_JOB_FAILED) {
        msr_node_finish(n, failed_code(n), NULL);
    } else if (n->state == MSR_JOB_DONE) {
        msr_node_finish(n, 0, NULL);
    } else if (n->ready_generation < n->generation) {
        n->ready_generation = n->generation; /* ready for the next generation */
        heartbeat(n);
    }
}

/* Stops every running worker: sig now, SIGKILL after the grace period;
 * stopping_done() follows once all are gone. */
void msr_node_stop_workers(msr_node_t *n, uint64_t now, int sig)
{
    n->spawn_at = 0; /* a paused spawn is not resumed */
    if (!n->stopping) {
        n->stopping = 1;
        n->kill_sent = 0;
        n->kill_at = now + (uint64_t)n->cfg.grace_ms * NS_PER_MS;
        if (n->kill_at == 0)
            n->kill_at = 1;
    }
    if (n->nrunning > 0)
        msr_node_signal_workers(n, -1, sig);
    else
        stopping_done(n);
}

/* An asynchronous parameter server's worker failed of its own (a code not
 * 0, a signal msrun did not send) while its generation runs: the servers
 * go on without it, so it is started again alone, the coordinator not
 * told, while this node's replacements stay within max_restarts. 1 when
 * it is; 0: reported as any failure. */
static int replace_alone(msr_node_t *n, int local, int exit_code, int sig)
{
    msr_node_worker_t *w = &n->workers[local];
    if (!n->cfg.ps_async || n->stopping || n->state != MSR_JOB_RUNNING ||
        n->worker_generation != n->generation || w->rank >= n->world_size - n->cfg.ps_servers ||
        (sig == 0 && exit_code == 0))
        return 0;
    char how[64], name[32];
    if (sig)
        snprintf(how, sizeof how, "was killed by %s", msr_signal_name(sig, name, sizeof name));
    else
        snprintf(how, sizeof how, "exited with code %d", exit_code);
    if (n->replaced >= n->max_restarts) {
        MSR_ERROR("rank %d (pid %d) %s: not replaced, this node's %d replacement%s of "
                  "--max_restarts=%d spent; reporting the failure",
                  w->rank, w->pid, how, n->replaced, n->replaced == 1 ? "" : "s", n->max_restarts);
        return 0;
    }
    n->replaced++;
    w->incarnation++;
    MSR_WARN("rank %d (pid %d) %s: asynchronous parameter server worker, started again alone "
             "(MSR_INCARNATION=%d; replacement %d of %d on this node)",
             w->rank, w->pid, how, w->incarnation, n->replaced, n->max_restarts);
    msr_node_action_t *a = msr_node_push(n, MSR_NODE_ACT_SPAWN);
    a->generation = n->generation;
    a->local = local;
    a->code = 1;
    return 1;
}

void msr_node_on_worker_exit(msr_node_t *n, int local, int exit_code, int sig)
{
    if (local < 0 || local >= n->cfg.nworkers || !n->workers[local].running)
        return;
    msr_node_worker_t *w = &n->workers[local];
    w->running = 0;
    n->nrunning--;
    /* While its workers are stopped, an exit is msrun's doing, except a
     * death by a signal msrun did not send (kill -9, the OOM killer, a
     * crash): that worker failed of its own, perhaps first (its peers' exits
     * on the lost peer may have been reported before it), so it is still
     * reported for its generation. */
    int own = sig > 0 && sig < 32 && !(w->sent_sigs & (1u << sig));
    if ((n->stopping && !own) || n->finished) {
        stopping_done(n);
        return;
    }
    if (replace_alone(n, local, sig ? -1 : exit_code, sig))
        return;
    msr_node_action_t *a = msr_node_push(n, MSR_NODE_ACT_REPORT);
    a->local = local;
    a->generation = n->worker_generation;
    a->exit_code = sig ? -1 : exit_code;
    a->sig = sig;
    snprintf(a->text, sizeof a->text, "%s", w->hung[0] ? w->hung : sig ? "signal" : "exited");
    if (n->stopping)
        stopping_done(n);
}

void msr_node_on_beat(msr_node_t *n, uint64_t now, int local, uint64_t last_beat_ns,
                      uint64_t progress, uint64_t progress_ns)
{
    if (n->stopping || n->finished || local < 0 || local >= n->cfg.nworkers)
        return;
    msr_node_worker_t *w = &n->workers[local];
    if (!w->running || w->hung[0])
        return;
    w->beaten = 1;
    uint64_t limit = (uint64_t)n->cfg.worker_timeout_ms * NS_PER_MS;
    double secs = (double)n->cfg.worker_timeout_ms / 1000.0;
    if (now > last_beat_ns && now - last_beat_ns > limit)
        snprintf(w->hung, sizeof w->hung, "hung: no libmsrun beat for %.1f s", secs);
    else if (progress > 0 && now > progress_ns && now - progress_ns > limit)
        snprintf(w->hung, sizeof w->hung, "hung: no msr_heartbeat() for %.1f s", secs);
    if (w->hung[0]) {
        MSR_WARN("rank %d (pid %d) %s: killing it", w->rank, w->pid, w->hung);
        msr_node_action_t *a = msr_node_signal_workers(n, local, SIGKILL);
        snprintf(a->text, sizeof a->text, "%s", w->hung);
    }
}

void msr_node_on_no_beat(msr_node_t *n, uint64_t now, int local)
{
    if (n->stopping || n->finished || local < 0 || local >= n->cfg.nworkers)
        return;
    msr_node_worker_t *w = &n->workers[local];
    if (!w->running || w->beaten || n->unwatched_said ||
        now - n->spawned_at <= (uint64_t)n->cfg.worker_timeout_ms * NS_PER_MS)
        return;
    n->unwatched_said = 1;
    MSR_WARN("--worker_timeout: rank %d (pid %d) has not called msr_init() after %.1f s: only "
             "workers that link libmsrun are watched for hangs (said once)",
             w->rank, w->pid, (double)(now - n->spawned_at) / 1e9);
}

/* ---- the timer ---- */

static void kill_after_grace(msr_node_t *n, uint64_t now)
{
    if (n->nrunning > 0) {
        msr_node_signal_workers(n, -1, SIGKILL);
        MSR_WARN("%d worker%s did not stop within %.1f s of SIGTERM: sent SIGKILL", n->nrunning,
                 n->nrunning == 1 ? "" : "s", (double)n->cfg.grace_ms / 1000.0);
    }
    n->kill_sent = 1;
    n->stuck_at = now + STUCK_MS * NS_PER_MS;
}

/* Workers that outlive SIGKILL are in uninterruptible sleep: say which, and
 * carry on without them. */
static void give_up_on_stuck(msr_node_t *n)
{
    char list[512] = "";
    size_t len = 0;
    for (int i = 0; i < n->cfg.nworkers; i++) {
        msr_node_worker_t *w = &n->workers[i];
        if (!w->running)
            continue;
        if (len < sizeof list)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%d (rank %d)",
                                    len ? ", " : "", w->pid, w->rank);
        w->running = 0;
    }
    MSR_ERROR("these worker processes would not die even after SIGKILL: %s", list);
    n->nrunning = 0;
    stopping_done(n);
}

void msr_node_on_tick(msr_node_t *n, uint64_t now)
{
    if (n->finished)
        return;
    if (n->retry_at && now >= n->retry_at) {
        n->retry_at = 0;
        if (n->joined)
            heartbeat(n);
        else
            msr_node_push(n, MSR_NODE_ACT_JOIN);
    }
    if (n->kill_at && now >= n->kill_at) {
        n->kill_at = 0;
        kill_after_grace(n, now);
    }
    if (n->stuck_at && now >= n->stuck_at) {
        n->stuck_at = 0;
        give_up_on_stuck(n);
    }
    if (n->spawn_at && now >= n->spawn_at)
        spawn_resume(n);
    if (n->hang_at && now >= n->hang_at) {
        int64_t every = n->cfg.worker_timeout_ms / 4 < 50 ? 50 : n->cfg.worker_timeout_ms / 4;
        n->hang_at = now + (uint64_t)(every > 1000 ? 1000 : every) * NS_PER_MS;
        if (!n->stopping && n->nrunning > 0 && !n->finished)
            msr_node_push(n, MSR_NODE_ACT_POLL_BEATS);
    }
}
