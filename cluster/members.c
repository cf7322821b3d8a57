/* The coordinator's nodes: joins (checked against the job's settings),
 * heartbeats held as long polls until the job changes, leaves, and nodes
 * declared lost when they fall silent. */
#include <inttypes.h>
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

node_t *msr_coord_node_add(msr_coord_t *c, const char *host)
{
    if (c->nnodes == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        node_t **nodes = msr_realloc_array(c->nodes, cap, sizeof *nodes);
        if (nodes == NULL)
            return NULL;
        c->nodes = nodes;
        c->cap = cap;
    }
    node_t *n = msr_calloc(1, sizeof *n);
    if (n == NULL || (n->host = msr_strdup(host)) == NULL) {
        msr_free(n);
        return NULL;
    }
    n->wanted_rank = -1;
    n->rank = -1;
    n->ready_generation = -1;
    c->nodes[c->nnodes++] = n;
    return n;
}

node_t *msr_coord_node_find(msr_coord_t *c, const char *id)
{
    if (id == NULL || *id == '\0')
        return NULL;
    return msr_map_get(&c->node_ids, id);
}

msr_status_t msr_coord_node_index(msr_coord_t *c, node_t *n)
{
    return msr_map_put(&c->node_ids, n->id, n, NULL);
}

void msr_coord_recount(msr_coord_t *c)
{
    c->nalive = c->nready = 0;
    for (size_t i = 0; i < c->nnodes; i++) {
        c->nalive += c->nodes[i]->alive != 0;
        c->nready += ready_for(c, c->nodes[i]);
    }
}

/* Holds node n's heartbeat call for up to wait_ms; NULL when out of
 * memory. */
static msr_held_t *heartbeat_hold(msr_coord_t *c, void *call, node_t *n, int64_t wait_ms)
{
    return msr_held_wait(&c->held, sizeof(msr_held_t), 0, MSR_HELD_HEARTBEAT, call, n, NULL,
                         wait_ms);
}

static void heartbeat_reply(msr_coord_t *c, void *call, node_t *n);

/* A held heartbeat is answered at its deadline with the job as it is. */
static void heartbeat_expired(void *ctx, msr_held_t *w)
{
    msr_coord_t *c = ctx;
    void *call = w->call;
    node_t *n = w->owner;
    n->hb = NULL;
    n->last_seen = msr_now_ns();
    msr_held_free(&c->held, w);
    heartbeat_reply(c, call, n);
}

/* The node's long poll ended without an answer: its connection broke (the
 * agent died, or the network). A live agent calls again within a second; a
 * dead one is declared lost after a short grace instead of the whole node
 * timeout. */
static void heartbeat_cancelled(void *ctx, msr_held_t *w)
{
    msr_coord_t *c = ctx;
    node_t *n = w->owner;
    uint64_t now = msr_now_ns();
    int64_t grace = c->config.node_timeout_ms < 1500 ? c->config.node_timeout_ms : 1500;
    n->hb = NULL;
    n->last_seen = now;
    n->suspect_until = now + (uint64_t)grace * 1000000ull;
    msr_held_free(&c->held, w);
}

/* Answers every held heartbeat: the job's state or generation changed. */
void msr_coord_wake_heartbeats(msr_coord_t *c)
{
    for (size_t i = 0; i < c->nnodes; i++) {
        node_t *n = c->nodes[i];
        if (n->hb == NULL)
            continue;
        msr_held_t *w = n->hb;
        void *call = w->call;
        n->hb = NULL;
        msr_held_free(&c->held, w);
        heartbeat_reply(c, call, n);
    }
}

static void node_lost(msr_coord_t *c, node_t *n, const char *why)
{
    node_set_alive(c, n, 0);
    if (n->hb) {
        msr_held_t *w = n->hb;
        void *call = w->call;
        n->hb = NULL;
        msr_held_free(&c->held, w);
        msr_held_fail(&c->held, call, MSR_RPC_UNAVAILABLE, "node %s: %s", n->id, why);
    }
    /* A loss that fails the generation is the job's outcome (a node that
     * left because its worker could not be started, say): as loud as the
     * outcome, so the msrun that embeds this coordinator reports it once. */
    int fails = c->state == MSR_JOB_RUNNING && n->rank >= 0;
    char rank[16] = "?"; /* no rank yet: "node ?", never "node -1" */
    if (n->rank >= 0)
        snprintf(rank, sizeof rank, "%d", n->rank);
    MSR_LOG(fails ? outcome_level(c) : MSR_LOG_WARN, "job %s: node %s (%s, pid %d) %s", c->job_id,
            rank, n->host, n->pid, why);
    if (fails) {
        msr_failure_t f;
        memset(&f, 0, sizeof f);
        f.set = 1;
        f.node_rank = n->rank;
        snprintf(f.host, sizeof f.host, "%s", n->host);
        f.rank = -1;
        f.pid = n->pid;
        f.exit_code = -1;
        f.time = msr_wall_time();
        f.generation = c->generation;
        snprintf(f.reason, sizeof f.reason, "%s", why);
        msr_coord_generation_failed(c, &f);
    } else {
        MARK_DIRTY(c, 2);
        /* the others may all be ready now: without this, an elastic
         * re-form waited for the last call's end (or the join timeout) */
        msr_coord_try_form(c);
    }
}

static void fill_assignment(const msr_coord_t *c, const node_t *n, Msr__Assignment *a)
{
    msr__assignment__init(a);
    a->node_rank = n->rank;
    a->node_count = c->node_count;
    a->world_size = world_size(c);
    a->rank_offset = n->rank * c->local_worker_num;
    a->local_world_size = c->local_worker_num;
    a->master_addr = (char *)c->master_addr;
    a->master_port = c->master_port;
    a->machine_ranks = n->machine_ranks;
}

void msr_coord_missing_describe(const msr_coord_t *c, char *buf, size_t len)
{
    int absent = c->node_count - alive_nodes(c), by_rank = !elastic(c);
    buf[0] = '\0';
    if (absent <= 0 || len == 0)
        return;
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i]->alive && c->nodes[i]->wanted_rank < 0)
            by_rank = 0;
    if (!by_rank) {
        snprintf(buf, len, "%d node%s", absent, absent == 1 ? "" : "s");
        return;
    }
    msr_buf_t b = MSR_BUF_INIT;
    msr_buf_printf(&b, "node%s ", absent == 1 ? "" : "s");
    for (int r = 0, shown = 0; r < c->node_count; r++) {
        int taken = 0;
        for (size_t i = 0; i < c->nnodes && !taken; i++)
            taken = c->nodes[i]->alive && c->nodes[i]->wanted_rank == r;
        if (!taken)
            msr_buf_printf(&b, "%s%d", shown++ ? ", " : "", r);
    }
    if (b.data != NULL && b.len < len)
        snprintf(buf, len, "%s", b.data);
    else /* too many to name, or no memory: how many */
        snprintf(buf, len, "%d node%s", absent, absent == 1 ? "" : "s");
    msr_buf_cleanup(&b);
}

static void heartbeat_reply(msr_coord_t *c, void *call, node_t *n)
{
    Msr__HeartbeatResponse r = MSR__HEARTBEAT_RESPONSE__INIT;
    Msr__Assignment a;
    Msr__Failure f;
    char *missing[64];
    char names[64][32], absent_text[200];
    size_t nmissing = 0;
    r.generation = c->generation;
    r.state = (Msr__JobState)c->state;
    r.restart_count = c->restart_count;
    r.max_restarts = c->max_restarts;
    r.message = c->message;
    if (c->state == MSR_JOB_RUNNING && n->alive && n->rank >= 0) {
        fill_assignment(c, n, &a);
        r.assignment = &a;
    }
    if (state_forming(c->state)) {
        int ready = 0;
        for (size_t i = 0; i < c->nnodes; i++) {
            node_t *m = c->nodes[i];
            if (!m->alive)
                continue;
            if (m->ready_generation >= c->generation) {
                ready++;
            } else if (nmissing < MSR_ARRAY_SIZE(names)) {
                snprintf(names[nmissing], sizeof names[0], "%s (stopping)", m->host);
                missing[nmissing] = names[nmissing];
                nmissing++;
            }
        }
        r.joined_nodes = ready;
        r.expected_nodes = c->node_count;
        msr_coord_missing_describe(c, absent_text, sizeof absent_text - 16);
        if (absent_text[0] && nmissing < MSR_ARRAY_SIZE(names)) {
            strcat(absent_text, " not yet joined");
            missing[nmissing++] = absent_text;
        }
        if (c->form_deadline != MSR_DEADLINE_NEVER) {
            uint64_t now = msr_now_ns();
            r.form_left_ms =
                now < c->form_deadline ? (uint32_t)((c->form_deadline - now) / 1000000ull) : 0;
            int64_t t = c->config.join_timeout_ms;
            r.form_timeout_ms = t > 0 && t < UINT32_MAX ? (uint32_t)t : 0;
            if (r.form_left_ms == 0)
                r.form_left_ms = 1; /* 0 means unknown */
        }
        r.n_missing = nmissing;
        r.missing = missing;
    }
    if (c->failure.set) {
        msr_failure_to_msg(&c->failure, &f);
        r.failure = &f;
    }
    int32_t outs[MSR_OUTPUT_ASKS_MAX]; /* ranks whose output the dashboard wants */
    r.n_output_ranks = msr_coord_output_ranks(c, n, outs, MSR_OUTPUT_ASKS_MAX);
    r.output_ranks = outs;
    msr_coord_reply(c, call, &r.base);
}

void msr_coord_wake_node(msr_coord_t *c, node_t *n)
{
    if (n->hb == NULL)
        return; /* its heartbeat is on its way: answered at once when it comes */
    msr_held_t *w = n->hb;
    void *call = w->call;
    n->hb = NULL;
    n->last_seen = msr_now_ns(); /* it was held up to now: the node's next call counts from here */
    msr_held_free(&c->held, w);
    heartbeat_reply(c, call, n);
}

static void job_configure(msr_coord_t *c, const Msr__JoinRequest *req)
{
    if (!c->job_id || !*c->job_id) {
        msr_free(c->job_id);
        c->job_id = msr_strdup(req->job_id ? req->job_id : "");
    }
    if (c->worker_num <= 0)
        c->worker_num = req->worker_num;
    if (c->local_worker_num <= 0)
        c->local_worker_num = req->local_worker_num;
    if (c->max_restarts < 0)
        c->max_restarts = req->max_restarts;
    if (c->min_nodes <= 0 && c->max_nodes <= 0) {
        c->min_nodes = req->min_nodes;
        c->max_nodes = req->max_nodes;
    }
}

msr_status_t msr_coord_settings_valid(msr_coord_t *c)
{
    if (c->worker_num <= 0 || c->local_worker_num <= 0 || c->worker_num % c->local_worker_num)
        return MSR_ERR_INVALID_ARG;
    if (elastic(c) && c->worker_num != c->max_nodes * c->local_worker_num)
        return MSR_ERR_INVALID_ARG;
    c->node_count = c->worker_num / c->local_worker_num;
    if (c->rank_done == NULL) {
        c->rank_done = msr_calloc((size_t)c->worker_num, 1);
        if (c->rank_done == NULL)
            return MSR_ERR_NO_MEMORY;
    }
    return MSR_OK;
}

/* Whether a joining node's settings match the job's; refuses the call,
 * naming the first that differs, when one does. */
static int settings_match(msr_coord_t *c, void *call, const Msr__JoinRequest *req)
{
    const struct {
        const char *opt;
        int mine, theirs;
    } checks[] = {
        {"worker_num", c->worker_num, req->worker_num},
        {"local_worker_num", c->local_worker_num, req->local_worker_num},
        {"max_restarts", c->max_restarts, req->max_restarts},
        {"nnodes minimum", c->min_nodes, req->min_nodes},
        {"nnodes maximum", c->max_nodes, req->max_nodes},
    };
    for (size_t i = 0; i < MSR_ARRAY_SIZE(checks); i++) {
        if (checks[i].mine == checks[i].theirs)
            continue;
        MSR_WARN("job %s: refused node %s (pid %d): %s is %d there, %d in the job", c->job_id,
                 req->host, req->pid, checks[i].opt, checks[i].theirs, checks[i].mine);
        msr_held_fail(&c->held, call, MSR_RPC_FAILED_PRECONDITION,
                      "this node's %s is %d but the job's is %d", checks[i].opt, checks[i].theirs,
                      checks[i].mine);
        return 0;
    }
    return 1;
}

/* Whether a joining node may join this job (its protocol, the job's
 * state, id and settings; the first node configures a job not configured
 * here); refuses the call when not. */
static int join_admitted(msr_coord_t *c, void *call, const Msr__JoinRequest *req)
{
    const char *host = req->host && *req->host ? req->host : "unknown host";
    if (req->protocol_version != MSR_PROTOCOL_VERSION) {
        MSR_WARN("refused node %s (pid %d): protocol version %u, the coordinator speaks %d", host,
                 req->pid, req->protocol_version, MSR_PROTOCOL_VERSION);
        msr_held_fail(
            &c->held, call, MSR_RPC_FAILED_PRECONDITION,
            "this node speaks protocol version %u but the coordinator speaks %d (mixed msrun "
            "versions?)",
            req->protocol_version, MSR_PROTOCOL_VERSION);
        return 0;
    }
    if (state_terminal(c->state)) {
        msr_held_fail(&c->held, call, MSR_RPC_FAILED_PRECONDITION, "the job has already %s",
                      c->state == MSR_JOB_DONE ? "finished" : "failed");
        return 0;
    }
    if (req->node_rank < -1) { /* -1 alone means "assign by arrival" */
        msr_held_fail(&c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "node_rank %d is not a node rank: give 0 or more, or -1 to be assigned one "
                      "by arrival",
                      req->node_rank);
        return 0;
    }
    if (!c->configured) {
        job_configure(c, req);
        if (msr_coord_settings_valid(c) != MSR_OK) {
            msr_held_fail(&c->held, call, MSR_RPC_INVALID_ARGUMENT,
                          "worker_num %d is not a positive multiple of local_worker_num %d",
                          req->worker_num, req->local_worker_num);
            /* Let a correct node configure the job instead. */
            if (!c->config.worker_num)
                c->worker_num = 0;
            if (!c->config.local_worker_num)
                c->local_worker_num = 0;
            return 0;
        }
        c->configured = 1;
    }
    const char *jid = req->job_id ? req->job_id : "";
    if (strcmp(jid, c->job_id) != 0) {
        MSR_WARN("job %s: refused node %s (pid %d): its job id is '%s'", c->job_id, host, req->pid,
                 jid);
        msr_held_fail(&c->held, call, MSR_RPC_FAILED_PRECONDITION,
                      "this node's job id is '%.100s' but the coordinator runs job '%.100s'", jid,
                      c->job_id);
        return 0;
    }
    return settings_match(c, call, req);
}

/* A node that joins for the first time, added with an id of its own; NULL
 * when its rank or the job's size refuses it (the call failed). */
static node_t *join_new_node(msr_coord_t *c, void *call, const Msr__JoinRequest *req,
                             const char *host)
{
    if (req->node_rank >= c->node_count) {
        msr_held_fail(&c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "node_rank %d is out of range: the job has %d nodes (0 .. %d)",
                      req->node_rank, c->node_count, c->node_count - 1);
        return NULL;
    }
    for (size_t i = 0; req->node_rank >= 0 && i < c->nnodes; i++) {
        node_t *m = c->nodes[i];
        if (m->alive && m->wanted_rank == req->node_rank) {
            MSR_WARN("job %s: refused node %s (pid %d): node rank %d is taken by %s (pid %d)",
                     c->job_id, host, req->pid, req->node_rank, m->host, m->pid);
            msr_held_fail(&c->held, call, MSR_RPC_FAILED_PRECONDITION,
                          "node rank %d is already taken by %s (pid %d)", req->node_rank, m->host,
                          m->pid);
            return NULL;
        }
    }
    int capacity = elastic(c) ? c->max_nodes : c->node_count;
    if (alive_nodes(c) >= capacity) {
        msr_held_fail(&c->held, call, MSR_RPC_RESOURCE_EXHAUSTED,
                      "the job already has all its %d nodes", capacity);
        return NULL;
    }
    node_t *n = msr_coord_node_add(c, host);
    if (n == NULL) {
        msr_held_fail(&c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return NULL;
    }
    unsigned char rnd[12];
    msr_random_bytes(rnd, sizeof rnd);
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(n->id + 2 * i, 3, "%02x", rnd[i]);
    if (msr_coord_node_index(c, n) != MSR_OK) {
        n->id[0] = '\0'; /* never found: a dead entry */
        msr_held_fail(&c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return NULL;
    }
    n->wanted_rank = req->node_rank >= 0 ? req->node_rank : -1;
    n->joined_seq = ++c->join_seq;
    if (elastic(c) && c->state == MSR_JOB_RUNNING && c->last_call == 0) {
        /* taken in at the next generation, after a last call for others */
        c->last_call = msr_now_ns() + (uint64_t)c->config.last_call_ms * 1000000ull;
        c->join_hold_until = msr_now_ns() + (uint64_t)c->config.join_hold_ms * 1000000ull;
        c->join_wall_ns = (int64_t)(msr_wall_time() * 1e9);
    }
    if (elastic(c) && c->state == MSR_JOB_RUNNING)
        msr_coord_join_notice(c, alive_nodes(c) + 1 - c->node_count);
    MSR_INFO("job %s: node %s joined from %s (pid %d, %d workers, %d of %d nodes)", c->job_id,
             n->id, host, req->pid, req->local_worker_num, alive_nodes(c) + 1, c->node_count);
    return n;
}

void msr_coord_join(msr_coord_t *c, void *call, const Msr__JoinRequest *req)
{
    const char *host = req->host && *req->host ? req->host : "unknown host";
    if (!join_admitted(c, call, req))
        return;
    node_t *n = msr_coord_node_find(c, req->node_id);
    if (n == NULL && elastic(c) && req->node_rank >= 0) {
        msr_held_fail(
            &c->held, call, MSR_RPC_INVALID_ARGUMENT,
            "an elastic job (--nnodes %d:%d) assigns node ranks itself: leave --node_rank at -1",
            c->min_nodes, c->max_nodes);
        return;
    }
    if (n == NULL && (n = join_new_node(c, call, req, host)) == NULL)
        return;
    /* the relay it joined through (relay.c), "" when directly: a relay
     * speaks only for the nodes that joined through it */
    msr_coord_node_set_relay(c, n, c->relaying);
    node_set_alive(c, n, 1);
    n->pid = req->pid;
    n->local_worker_num = req->local_worker_num;
    n->free_port = req->free_port;
    n->machine = req->machine;
    n->last_seen = msr_now_ns();
    n->suspect_until = 0;
    MARK_DIRTY(c, 1);
    Msr__JoinResponse r = MSR__JOIN_RESPONSE__INIT;
    r.node_id = n->id;
    r.worker_num = c->worker_num;
    r.local_worker_num = c->local_worker_num;
    r.node_count = c->node_count;
    r.max_restarts = c->max_restarts;
    r.generation = c->generation;
    msr_coord_reply(c, call, &r.base);
    /* Held heartbeats are not woken for progress: that would make forming a
     * job of N nodes cost N^2 answers. Agents see progress at their next
     * heartbeat; only a change of state or generation wakes them. */
}

void msr_coord_heartbeat(msr_coord_t *c, void *call, const Msr__HeartbeatRequest *req)
{
    node_t *n = msr_coord_node_find(c, req->node_id);
    if (n == NULL || !n->alive) {
        msr_held_fail(&c->held, call, MSR_RPC_NOT_FOUND,
                      n ? "this node was declared lost; join again"
                        : "unknown node (the coordinator may have restarted); join again");
        return;
    }
    n->last_seen = msr_now_ns();
    n->suspect_until = 0;
    if (n->relay[0] && c->relaying[0] == '\0') {
        /* its relay failed it: it calls directly now, and the relay no
         * longer counts for it (relay.c) */
        MSR_INFO("job %s: node %s heartbeats directly (it joined through relay %s)", c->job_id,
                 n->id, n->relay);
        msr_coord_node_set_relay(c, n, "");
    }
    if (n->hb) {
        /* A newer heartbeat replaces the held one. */
        msr_held_t *w = n->hb;
        void *old = w->call;
        n->hb = NULL;
        msr_held_free(&c->held, w);
        heartbeat_reply(c, old, n);
    }
    if (req->ready_generation > n->ready_generation) {
        node_set_ready(c, n, req->ready_generation);
        MARK_DIRTY(c, 1);
        msr_coord_try_form(c);
    }
    if (req->n_outputs)
        msr_coord_output_take(c, n, req);
    if (req->generation != c->generation || (int)req->known_state != (int)c->state ||
        req->wait_ms == 0 || msr_coord_output_unsent(c, n)) {
        heartbeat_reply(c, call, n);
        return;
    }
    int64_t wait = req->wait_ms > 60000 ? 60000 : (int64_t)req->wait_ms;
    msr_held_t *w = heartbeat_hold(c, call, n, wait);
    if (w == NULL) {
        heartbeat_reply(c, call, n);
        return;
    }
    n->hb = w;
}

void msr_coord_leave(msr_coord_t *c, void *call, const Msr__LeaveRequest *req)
{
    node_t *n = msr_coord_node_find(c, req->node_id);
    Msr__LeaveResponse r = MSR__LEAVE_RESPONSE__INIT;
    if (n && n->alive) {
        n->left = 1;
        char why[200];
        snprintf(why, sizeof why, "left the job (%.150s)",
                 req->reason && *req->reason ? req->reason : "no reason given");
        if (state_terminal(c->state)) {
            node_set_alive(c, n, 0);
            MSR_INFO("job %s: node %d (%s) left", c->job_id, n->rank, n->host);
        } else {
            node_lost(c, n, why);
        }
    }
    msr_coord_reply(c, call, &r.base);
}

char *msr_coord_node_state(const msr_coord_t *c, const node_t *n)
{
    if (n->left)
        return "left";
    if (!n->alive)
        return "lost";
    if (n->rank >= 0)
        return state_terminal(c->state) ? "finished" : "running";
    if (n->ready_generation >= c->generation)
        return "waiting";
    return n->ready_generation >= 0 ? "stopping" : "joining";
}

void msr_coord_heartbeats_init(msr_coord_t *c)
{
    msr_held_handler_t hb = {c, heartbeat_expired, heartbeat_cancelled};
    msr_held_calls_handle(&c->held, MSR_HELD_HEARTBEAT, &hb);
}

void msr_coord_deaf(msr_coord_t *c, uint64_t from, uint64_t to)
{
    if (to <= from)
        return;
    uint64_t d = to - from;
    for (size_t i = 0; i < c->nnodes; i++) {
        node_t *n = c->nodes[i];
        if (!n->alive || n->hb)
            continue; /* a held heartbeat is answered at its deadline, not judged */
        n->last_seen += d;
        if (n->suspect_until)
            n->suspect_until += d;
    }
}

void msr_coord_check_nodes(msr_coord_t *c, uint64_t now)
{
    if (now < c->next_check)
        return;
    uint64_t limit = (uint64_t)c->config.node_timeout_ms * 1000000ull;
    c->next_check = now + limit / 4;
    for (size_t i = 0; i < c->nnodes; i++) {
        node_t *n = c->nodes[i];
        if (n->alive && n->hb == NULL && n->suspect_until && !state_terminal(c->state)) {
            if (now >= n->suspect_until) {
                node_lost(c, n, "was lost: its connection broke and it did not call again");
                continue;
            }
            if (n->suspect_until < c->next_check)
                c->next_check = n->suspect_until;
        }
        if (n->alive && n->hb == NULL && now > n->last_seen && now - n->last_seen > limit &&
            !state_terminal(c->state)) {
            char why[96];
            snprintf(why, sizeof why, "was lost: no heartbeat for %lld ms",
                     (long long)c->config.node_timeout_ms);
            node_lost(c, n, why);
        }
    }
}
