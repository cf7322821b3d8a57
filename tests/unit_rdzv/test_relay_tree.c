/* Relays of relays (rendezvous/relay.h, docs/architecture.md "Relays"):
 * nodes joined through a tree of depth 2 of relay agents' servers over
 * loopback form the job, the coordinator recording the top relay; a middle
 * relay killed mid-join (its subtree joins directly); a chain of
 * MSR_RELAY_LEVELS_MAX relays served and one more refused; a lower relay's
 * subtree at its parent's bound and one past; the lower relays' subtrees
 * together at their parent's bound and one past; one node's two calls queued
 * on a relay sent in two batches; a lower relay holding its parent's whole
 * subtree killed and replaced under another id, one more refused beside
 * either (under a middle relay and under the coordinator); a middle relay's
 * own nodes counted beside its lower relay, at its bound and one past; a
 * relay killed between two batches counted until its nodes fall back (at
 * the coordinator) or it stays idle (at a middle relay), then replaced. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/time.h"
#include "cluster/server.h"
#include "rendezvous/relay.h"
#include "rendezvous/rpc.h"
#include "tests/runner.h"
#include "tests/unit_rdzv/fixtures.h"

static void join_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, msr_tnode_call_t *c, int index,
                       int nodes)
{
    Msr__JoinRequest j = MSR__JOIN_REQUEST__INIT;
    char host[32];
    j.protocol_version = MSR_PROTOCOL_VERSION;
    j.job_id = "j";
    snprintf(host, sizeof host, "10.0.0.%d", index);
    j.host = host;
    j.pid = 100 + index;
    j.worker_num = nodes;
    j.local_worker_num = 1;
    j.node_rank = -1;
    j.node_id = c->id;
    msr_tnode_call_start(ch, loop, c, MSR_RPC_JOIN, &j.base);
}

static void beat_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, msr_tnode_call_t *c)
{
    Msr__HeartbeatRequest h = MSR__HEARTBEAT_REQUEST__INIT;
    h.node_id = c->id;
    h.known_state = MSR__JOB_STATE__JOB_WAITING;
    h.wait_ms = 30000;
    msr_tnode_call_start(ch, loop, c, MSR_RPC_HEARTBEAT, &h.base);
}

/* A call's answer through an msr_relay_t. */
typedef struct answer {
    int done, code;
    char message[400];
} answer_t;

static void answered(void *arg, int code, const char *message, const uint8_t *resp, size_t len)
{
    answer_t *an = arg;
    (void)resp;
    (void)len;
    MSR_CHECK_MSG(!an->done, "a call answered twice");
    an->done = 1;
    an->code = code;
    snprintf(an->message, sizeof an->message, "%s", message ? message : "");
}

static void answer_wait(msr_rpc_loop_t *loop, answer_t *an)
{
    uint64_t limit = msr_deadline_in_ms(20000);
    while (!an->done) {
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "no answer in 20 s");
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(100));
    }
}

/* Heartbeats of n nodes over chs[k] until the job runs: distinct ranks. */
static void expect_running(msr_rpc_loop_t *loop, msr_rpc_channel_t **chs, msr_tnode_call_t *c,
                           int n)
{
    for (int k = 0; k < n; k++)
        beat_start(chs[k], loop, &c[k]);
    msr_tnode_calls_wait(loop, c, n);
    int seen = 0;
    for (int k = 0; k < n; k++) {
        MSR_CHECK_MSG(c[k].code == 0, "beat %d: %d %s", k, c[k].code, c[k].message);
        MSR_CHECK_EQ(c[k].state, MSR__JOB_STATE__JOB_RUNNING);
        MSR_CHECK(c[k].rank >= 0 && c[k].rank < n && !(seen & (1 << c[k].rank)));
        seen |= 1 << c[k].rank;
    }
}

/* A tree of depth 2: leaves a (2 nodes) and b (1 node) under mid, which
 * also serves a node of its own; the job of 4 forms. The coordinator
 * records the top relay (mid): a heartbeat through another relay is
 * refused as for a node it does not serve. */
static void test_depth_two(void)
{
    msr_tserved_t s;
    msr_tserved_start_nodes(&s, 4);
    msr_trelay_t mid, la, lb;
    msr_trelay_start(&mid, s.target, "tok", "mid", 4);
    msr_trelay_start(&la, mid.target, "tok", "leaf-a", 2);
    msr_trelay_start(&lb, mid.target, "tok", "leaf-b", 1);
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *cha, *chb, *chm, *direct;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(la.target, "tok", &cha));
    MSR_CHECK_OK(msr_rpc_channel_create_own(lb.target, "tok", &chb));
    MSR_CHECK_OK(msr_rpc_channel_create_own(mid.target, "tok", &chm));
    MSR_CHECK_OK(msr_rpc_channel_create_own(s.target, "tok", &direct));
    msr_rpc_channel_t *chs[4] = {cha, cha, chb, chm};
    msr_tnode_call_t c[4];
    memset(c, 0, sizeof c);
    for (int k = 0; k < 4; k++)
        join_start(chs[k], loop, &c[k], k, 4);
    msr_tnode_calls_wait(loop, c, 4);
    for (int k = 0; k < 4; k++)
        MSR_CHECK_MSG(c[k].code == 0 && c[k].id[0], "join %d: %d %s", k, c[k].code, c[k].message);
    expect_running(loop, chs, c, 4);

    msr_relay_t *other;
    MSR_CHECK_OK(msr_relay_create(loop, direct, "other", 1, &other));
    Msr__HeartbeatRequest h = MSR__HEARTBEAT_REQUEST__INIT;
    h.node_id = c[0].id;
    h.known_state = MSR__JOB_STATE__JOB_RUNNING;
    answer_t an = {0};
    MSR_CHECK_OK(msr_relay_submit(other, MSR_RPC_HEARTBEAT, &h.base, answered, &an));
    msr_relay_flush(other);
    answer_wait(loop, &an);
    MSR_CHECK_EQ(an.code, MSR_RPC_FAILED_PRECONDITION);
    MSR_CHECK_MSG(strstr(an.message, "joined through relay mid"), "%s", an.message);
    msr_relay_destroy(other);
    msr_rpc_channel_destroy(cha);
    msr_rpc_channel_destroy(chb);
    msr_rpc_channel_destroy(chm);
    msr_rpc_channel_destroy(direct);
    msr_rpc_loop_destroy(loop);
    msr_trelay_stop(&la);
    msr_trelay_stop(&lb);
    msr_trelay_stop(&mid);
    msr_tserved_stop(&s);
}

/* The middle relay of a depth-2 tree dies while its subtree's ready
 * heartbeats are held: the leaf's batch fails, its nodes' calls end with
 * an error, they join again directly (ids kept), a third node joins, and
 * the job forms with all three. */
static void test_middle_killed(void)
{
    msr_tserved_t s;
    msr_tserved_start_nodes(&s, 3);
    msr_trelay_t mid, leaf;
    msr_trelay_start(&mid, s.target, "tok", "mid", 3);
    msr_trelay_start(&leaf, mid.target, "tok", "leaf", 2);
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *via, *direct;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(leaf.target, "tok", &via));
    MSR_CHECK_OK(msr_rpc_channel_create_own(s.target, "tok", &direct));
    msr_tnode_call_t c[3];
    memset(c, 0, sizeof c);
    for (int k = 0; k < 2; k++)
        join_start(via, loop, &c[k], k, 3);
    msr_tnode_calls_wait(loop, c, 2);
    for (int k = 0; k < 2; k++) {
        MSR_CHECK_MSG(c[k].code == 0, "join %d through the tree: %d %s", k, c[k].code,
                      c[k].message);
        beat_start(via, loop, &c[k]);
    }
    for (int k = 0; k < 10; k++) /* held: the job needs a third node */
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(20));
    MSR_CHECK(!c[0].done && !c[1].done);
    msr_trelay_kill(&mid);
    msr_tnode_calls_wait(loop, c, 2);
    MSR_CHECK_MSG(c[0].code != 0 && c[1].code != 0, "calls through a dead middle relay succeeded");
    for (int k = 0; k < 3; k++) {
        char was[32];
        snprintf(was, sizeof was, "%s", c[k].id);
        join_start(direct, loop, &c[k], k, 3);
        msr_tnode_calls_wait(loop, &c[k], 1);
        MSR_CHECK_MSG(c[k].code == 0, "direct join %d: %d %s", k, c[k].code, c[k].message);
        if (k < 2)
            MSR_CHECK_STR(c[k].id, was);
    }
    msr_rpc_channel_t *chs[3] = {direct, direct, direct};
    expect_running(loop, chs, c, 3);
    msr_rpc_channel_destroy(via);
    msr_rpc_channel_destroy(direct);
    msr_rpc_loop_destroy(loop);
    msr_trelay_stop(&leaf);
    msr_trelay_stop(&mid);
    msr_tserved_stop(&s);
}

/* A chain of relays r0 (under the coordinator) to r<LEVELS_MAX>: a node
 * calling r<LEVELS_MAX - 1> crosses MSR_RELAY_LEVELS_MAX relays and joins;
 * one calling r<LEVELS_MAX> would cross one more and hears why. Each
 * relay's subtree of 2 holds the node it serves itself, or the one below. */
static void test_chain_bound(void)
{
    msr_tserved_t s;
    msr_tserved_start_nodes(&s, 2);
    msr_trelay_t r[MSR_RELAY_LEVELS_MAX + 1];
    for (int k = 0; k <= MSR_RELAY_LEVELS_MAX; k++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", k);
        msr_trelay_start(&r[k], k ? r[k - 1].target : s.target, "tok", id,
                         k == MSR_RELAY_LEVELS_MAX ? 1 : 2);
    }
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *at, *past;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(r[MSR_RELAY_LEVELS_MAX - 1].target, "tok", &at));
    MSR_CHECK_OK(msr_rpc_channel_create_own(r[MSR_RELAY_LEVELS_MAX].target, "tok", &past));
    msr_tnode_call_t c[2];
    memset(c, 0, sizeof c);
    join_start(at, loop, &c[0], 0, 2);
    join_start(past, loop, &c[1], 1, 2);
    msr_tnode_calls_wait(loop, c, 2);
    MSR_CHECK_MSG(c[0].code == 0 && c[0].id[0], "a chain of %d relays: %d %s", MSR_RELAY_LEVELS_MAX,
                  c[0].code, c[0].message);
    MSR_CHECK_EQ(c[1].code, MSR_RPC_INVALID_ARGUMENT);
    MSR_CHECK_MSG(strstr(c[1].message, "would cross 5 relays in all; a call crosses at most 4"),
                  "%s", c[1].message);
    msr_rpc_channel_destroy(at);
    msr_rpc_channel_destroy(past);
    msr_rpc_loop_destroy(loop);
    for (int k = MSR_RELAY_LEVELS_MAX; k >= 0; k--)
        msr_trelay_stop(&r[k]);
    msr_tserved_stop(&s);
}

/* A raw batch of one Join for node index, from relay id with subtree and
 * depth, to target: MSR_OK with the entry's code in *code_p, or the
 * refusal with its message in why. */
static msr_status_t raw_batch(const char *target, const char *id, uint32_t subtree, uint32_t depth,
                              int index, int *code_p, char *why, size_t wlen)
{
    Msr__JoinRequest j = MSR__JOIN_REQUEST__INIT;
    char host[32];
    snprintf(host, sizeof host, "10.0.1.%d", index);
    j.protocol_version = MSR_PROTOCOL_VERSION;
    j.job_id = "j";
    j.host = host;
    j.pid = 200 + index;
    j.worker_num = 8;
    j.local_worker_num = 1;
    j.node_rank = -1;
    uint8_t buf[512];
    size_t len = protobuf_c_message_pack(&j.base, buf);
    Msr__RelayCall call = MSR__RELAY_CALL__INIT;
    Msr__RelayCall *callp = &call;
    call.method = MSR_RPC_JOIN;
    call.request.data = buf;
    call.request.len = len;
    Msr__RelayRequest req = MSR__RELAY_REQUEST__INIT;
    req.relay_id = (char *)id;
    req.subtree = subtree;
    req.depth = depth;
    req.n_calls = 1;
    req.calls = &callp;
    msr_rpc_channel_t *ch;
    MSR_CHECK_OK(msr_rpc_channel_create_own(target, "tok", &ch));
    ProtobufCMessage *resp = NULL;
    msr_status_t st =
        msr_rpc_call(ch, MSR_RPC_RELAY, &req.base, msr_deadline_in_ms(20000), 1, &resp);
    if (st == MSR_OK) {
        const Msr__RelayResponse *r = (const Msr__RelayResponse *)resp;
        MSR_CHECK_EQ(r->n_answers, 1);
        *code_p = r->answers[0]->code;
        snprintf(why, wlen, "%s", r->answers[0]->message);
        msr_rpc_message_free(resp);
    } else {
        snprintf(why, wlen, "%s", msr_err_msg());
    }
    msr_rpc_channel_destroy(ch);
    return st;
}

/* A coordinator for a job of 8 nodes and a middle relay "mid" (subtree)
 * in front of it. */
typedef struct mid_relay {
    msr_tserved_t s;
    msr_trelay_t mid;
} mid_relay_t;

static void mid_start(mid_relay_t *m, int subtree)
{
    msr_tserved_start_nodes(&m->s, 8);
    msr_trelay_start(&m->mid, m->s.target, "tok", "mid", subtree);
}

static void mid_stop(mid_relay_t *m)
{
    msr_trelay_stop(&m->mid);
    msr_tserved_stop(&m->s);
}

/* raw_batch's call, which must be answered with its entry accepted (what
 * names it in the failure). */
static void batch_ok(const char *target, const char *id, uint32_t subtree, uint32_t depth,
                     int index, const char *what)
{
    char why[400];
    int code = -1;
    MSR_CHECK_OK(raw_batch(target, id, subtree, depth, index, &code, why, sizeof why));
    MSR_CHECK_MSG(code == 0, "%s: %d %s", what, code, why);
}

/* raw_batch's call, which must be refused whole: its message in why. */
static void batch_refused(const char *target, const char *id, uint32_t subtree, uint32_t depth,
                          int index, char *why, size_t wlen)
{
    int code = -1;
    MSR_CHECK(raw_batch(target, id, subtree, depth, index, &code, why, wlen) != MSR_OK);
}

/* The bounds of a lower relay's batch at a middle relay (subtree 3) and at
 * the coordinator: a subtree at the middle's and one past, a depth at the
 * bound and one past (the middle adds its own level). */
static void test_batch_bounds(void)
{
    mid_relay_t m;
    mid_start(&m, 3);
    const char *mid = m.mid.target, *top_target = m.s.target;
    char why[400];
    batch_ok(mid, "low", 3, 0, 0, "subtree 3 under a middle of 3");
    batch_refused(mid, "low", 4, 0, 1, why, sizeof why);
    MSR_CHECK_MSG(strstr(why, "1 calls for a subtree of 4 nodes") && strstr(why, "at most 3"), "%s",
                  why);
    uint32_t top = MSR_RELAY_LEVELS_MAX - 2; /* crosses low, mid and... the last level */
    batch_ok(mid, "low", 3, top, 2, "the deepest batch under a middle");
    batch_refused(mid, "low", 3, top + 1, 3, why, sizeof why);
    MSR_CHECK_MSG(strstr(why, "a call crosses at most"), "%s", why);
    /* straight to the coordinator: depth LEVELS_MAX - 1 is its bound */
    batch_ok(top_target, "low2", 1, MSR_RELAY_LEVELS_MAX - 1, 4, "the deepest at the coordinator");
    batch_refused(top_target, "low2", 1, MSR_RELAY_LEVELS_MAX, 5, why, sizeof why);
    MSR_CHECK_MSG(strstr(why, "a call crosses at most"), "%s", why);
    mid_stop(&m);
}

/* The relays under a middle relay (subtree 4) cover its subtree at most:
 * a second lower relay covering exactly its last node is accepted, a third
 * covering one past is refused naming both relays and the node, as is the
 * second growing past it; a relay's batches again are not counted twice. */
static void test_lower_cover(void)
{
    mid_relay_t m;
    mid_start(&m, 4);
    const char *mid = m.mid.target;
    char why[400];
    batch_ok(mid, "low-a", 2, 0, 0, "low-a, nodes 1-2 of 4");
    batch_ok(mid, "low-b", 2, 0, 1, "low-b, nodes 3-4 of 4");
    batch_ok(mid, "low-a", 2, 0, 2, "low-a again");
    batch_refused(mid, "low-c", 1, 0, 3, why, sizeof why);
    MSR_CHECK_MSG(strstr(why, "relay low-c: its subtree of 1 nodes would cover nodes 5 to 5 "
                              "of relay mid") &&
                      strstr(why, "node 5 lies outside relay mid's subtree"),
                  "%s", why);
    batch_refused(mid, "low-b", 3, 0, 4, why, sizeof why);
    MSR_CHECK_MSG(strstr(why, "relay low-b: its subtree of 3 nodes would cover nodes 3 to 5") &&
                      strstr(why, "node 5 lies outside relay mid's subtree"),
                  "%s", why);
    /* refused, nothing recorded: low-b still covers exactly nodes 3-4 */
    batch_ok(mid, "low-b", 2, 0, 5, "low-b back at 2");
    mid_stop(&m);
}

/* One node's two calls queued on a relay (it called again before the
 * first was sent): two batches of one call each, both answered, where one
 * batch would have been refused whole for naming the node twice. */
static void test_same_node_twice(void)
{
    msr_tserved_t s;
    msr_tserved_start_nodes(&s, 2);
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *ch;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(s.target, "tok", &ch));
    msr_relay_t *r;
    MSR_CHECK_OK(msr_relay_create(loop, ch, "a", 2, &r));
    Msr__JoinRequest j = MSR__JOIN_REQUEST__INIT;
    j.protocol_version = MSR_PROTOCOL_VERSION;
    j.job_id = "j";
    j.host = "10.0.0.9";
    j.pid = 9;
    j.worker_num = 2;
    j.local_worker_num = 1;
    j.node_rank = -1;
    answer_t an[2];
    memset(an, 0, sizeof an);
    for (int k = 0; k < 2; k++)
        MSR_CHECK_OK(msr_relay_submit(r, MSR_RPC_JOIN, &j.base, answered, &an[k]));
    msr_relay_flush(r);
    uint64_t calls = 0, batches = 0;
    msr_relay_counts(r, &calls, &batches);
    MSR_CHECK_EQ(calls, 2);
    MSR_CHECK_EQ(batches, 2);
    for (int k = 0; k < 2; k++) {
        answer_wait(loop, &an[k]);
        MSR_CHECK_MSG(an[k].code == 0, "call %d: %d %s", k, an[k].code, an[k].message);
    }
    msr_relay_destroy(r);
    msr_rpc_channel_destroy(ch);
    msr_rpc_loop_destroy(loop);
    msr_tserved_stop(&s);
}

/* A batch from relay id (subtree) accepted at target, waiting (20 s at
 * most) for the relay that held its place to be dropped there: the parent
 * hears of a lower relay's death on its own thread. */
static void batch_accepted(const char *target, const char *id, uint32_t subtree, int index)
{
    uint64_t limit = msr_deadline_in_ms(20000);
    char why[400];
    int code = -1;
    while (raw_batch(target, id, subtree, 0, index, &code, why, sizeof why) != MSR_OK) {
        MSR_CHECK_MSG(strstr(why, "lies outside"), "relay %s: %s", id, why);
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "relay %s still refused after 20 s: %s", id,
                      why);
        msr_sleep_ms(20);
    }
    MSR_CHECK_MSG(code == 0, "relay %s's join: %d %s", id, code, why);
}

/* An old relay with one node joined through it: "old" (subtree) under
 * parent, a loop and a channel to it ("via"), and the node's call (its join
 * answered). */
typedef struct old_relay {
    msr_trelay_t old;
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *via;
    msr_tnode_call_t c;
} old_relay_t;

static void old_start(old_relay_t *o, const char *parent, int subtree)
{
    msr_trelay_start(&o->old, parent, "tok", "old", subtree);
    MSR_CHECK_OK(msr_rpc_loop_create(&o->loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(o->old.target, "tok", &o->via));
    memset(&o->c, 0, sizeof o->c);
    join_start(o->via, o->loop, &o->c, 0, 8);
    msr_tnode_calls_wait(o->loop, &o->c, 1);
    MSR_CHECK_MSG(o->c.code == 0, "join through old: %d %s", o->c.code, o->c.message);
}

static void old_stop(old_relay_t *o)
{
    msr_rpc_channel_destroy(o->via);
    msr_rpc_loop_destroy(o->loop);
    msr_trelay_stop(&o->old);
}

/* A lower relay replaced under another id, under parent (a middle relay of
 * subtree bound, or the coordinator with MSR_RELAY_SUBTREE_MAX): while
 * "old" (subtree bound) holds a node's heartbeat, one more node is refused;
 * once old dies, "new" with the whole subtree (the bound) takes its place,
 * without the parent restarting, and one more node is refused again. */
static void replaced_under(const char *parent, const char *name, uint32_t bound)
{
    old_relay_t o;
    old_start(&o, parent, (int)bound);
    beat_start(o.via, o.loop, &o.c); /* held: the job needs 8 nodes */
    /* the heartbeat's batch sent (the join's was the first), so that the
     * parent hears old die when that call ends; a relay killed between
     * batches counts until its nodes fall back (test_dead_between_batches) */
    uint64_t calls = 0, batches = 0, limit = msr_deadline_in_ms(20000);
    for (;;) {
        msr_relay_counts(msr_relay_server_relay(o.old.server), &calls, &batches);
        if (batches >= 2)
            break;
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "old sent %llu batches, not the heartbeat's",
                      (unsigned long long)batches);
        msr_sleep_ms(5);
    }
    char why[400], past[64];
    snprintf(past, sizeof past, "node %llu lies outside %s", (unsigned long long)bound + 1, name);
    batch_refused(parent, "extra", 1, 0, 1, why, sizeof why);
    MSR_CHECK_MSG(strstr(why, past), "one past beside old: %s", why);
    msr_trelay_kill(&o.old);
    msr_tnode_calls_wait(o.loop, &o.c, 1);
    MSR_CHECK_MSG(o.c.code != 0, "a heartbeat through a dead relay succeeded");
    batch_accepted(parent, "new", bound, 2);
    batch_refused(parent, "extra", 1, 0, 3, why, sizeof why);
    MSR_CHECK_MSG(strstr(why, past), "one past beside new: %s", why);
    old_stop(&o);
}

static void test_replaced_relay(void)
{
    mid_relay_t m;
    mid_start(&m, 3);
    replaced_under(m.mid.target, "relay mid", 3);
    mid_stop(&m);
    msr_tserved_t s;
    msr_tserved_start_nodes(&s, 8); /* a coordinator that saw no relay */
    replaced_under(s.target, "the coordinator", MSR_RELAY_SUBTREE_MAX);
    msr_tserved_stop(&s);
}

/* A relay killed between two batches (its joins answered, nothing in flight)
 * ends no call at the coordinator: it counts, with the coordinator's whole
 * subtree, while a node is recorded as joined through it, and a
 * replacement is refused; once its two nodes fell back (one joins again
 * directly, the other heartbeats directly), "new" takes its place, and one
 * more relay is refused beside it. */
static void test_dead_between_batches(void)
{
    msr_tserved_t s;
    msr_tserved_start_nodes(&s, 8);
    msr_trelay_t old;
    msr_trelay_start(&old, s.target, "tok", "old", MSR_RELAY_SUBTREE_MAX);
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *via, *direct;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(old.target, "tok", &via));
    MSR_CHECK_OK(msr_rpc_channel_create_own(s.target, "tok", &direct));
    msr_tnode_call_t c[2], beat[2];
    memset(c, 0, sizeof c);
    memset(beat, 0, sizeof beat);
    for (int k = 0; k < 2; k++)
        join_start(via, loop, &c[k], k, 8);
    msr_tnode_calls_wait(loop, c, 2);
    for (int k = 0; k < 2; k++)
        MSR_CHECK_MSG(c[k].code == 0 && c[k].id[0], "join %d through old: %d %s", k, c[k].code,
                      c[k].message);
    msr_trelay_kill(&old);
    char why[400], past[80];
    snprintf(past, sizeof past, "node %llu lies outside the coordinator",
             (unsigned long long)MSR_RELAY_SUBTREE_MAX + 1);
    batch_refused(s.target, "new", MSR_RELAY_SUBTREE_MAX, 0, 2, why, sizeof why);
    MSR_CHECK_MSG(strstr(why, past), "new beside old's two nodes: %s", why);
    join_start(direct, loop, &c[0], 0, 8); /* its id kept */
    msr_tnode_calls_wait(loop, c, 1);
    MSR_CHECK_MSG(c[0].code == 0, "node 0 joining again directly: %d %s", c[0].code, c[0].message);
    batch_refused(s.target, "new", MSR_RELAY_SUBTREE_MAX, 0, 3, why, sizeof why);
    MSR_CHECK_MSG(strstr(why, past), "new beside old's node 1: %s", why);
    snprintf(beat[0].id, sizeof beat[0].id, "%s", c[1].id);
    beat_start(direct, loop, &beat[0]); /* held: the job needs 8 nodes */
    batch_accepted(s.target, "new", MSR_RELAY_SUBTREE_MAX, 4);
    batch_refused(s.target, "extra", 1, 0, 5, why, sizeof why);
    MSR_CHECK_MSG(strstr(why, past), "one past beside new: %s", why);
    /* a newer heartbeat answers the held one */
    Msr__HeartbeatRequest h = MSR__HEARTBEAT_REQUEST__INIT;
    h.node_id = c[1].id;
    msr_tnode_call_start(direct, loop, &beat[1], MSR_RPC_HEARTBEAT, &h.base);
    msr_tnode_calls_wait(loop, beat, 2);
    MSR_CHECK_MSG(beat[0].code == 0, "node 1's direct heartbeat: %d %s", beat[0].code,
                  beat[0].message);
    msr_rpc_channel_destroy(direct);
    msr_rpc_channel_destroy(via);
    msr_rpc_loop_destroy(loop);
    msr_trelay_stop(&old);
    msr_tserved_stop(&s);
}

/* The same under a middle relay (subtree 3), which does not see the nodes
 * fall back to the coordinator: "old" (3) killed between two batches
 * stops counting once it has sent nothing for a few seconds, "new" (3)
 * then takes its place and one more is refused beside it. */
static void test_dead_between_batches_mid(void)
{
    mid_relay_t m;
    mid_start(&m, 3);
    old_relay_t o;
    old_start(&o, m.mid.target, 3);
    msr_trelay_kill(&o.old);
    batch_accepted(m.mid.target, "new", 3, 1);
    char why[400];
    batch_refused(m.mid.target, "extra", 1, 0, 2, why, sizeof why);
    MSR_CHECK_MSG(strstr(why, "node 4 lies outside relay mid"), "one past beside new: %s", why);
    old_stop(&o);
    mid_stop(&m);
}

/* A Join for the node of index straight to a relay over ch: its answer. */
static void own_join(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, msr_tnode_call_t *c, int index)
{
    join_start(ch, loop, c, index, 8);
    msr_tnode_calls_wait(loop, c, 1);
}

/* The nodes a middle relay (subtree 3) serves itself count with its lower
 * relays: beside "low" (2), a node of its own is its last (accepted, and
 * joining again under its id counts once), a second is one past (refused
 * alone, FAILED_PRECONDITION, so it calls the coordinator), as is a lower
 * relay of 1 laid after them. */
static void test_own_nodes(void)
{
    mid_relay_t m;
    mid_start(&m, 3);
    char why[400];
    batch_ok(m.mid.target, "low", 2, 0, 0, "low, nodes 1-2 of 3");
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *ch;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(m.mid.target, "tok", &ch));
    msr_tnode_call_t c[2];
    memset(c, 0, sizeof c);
    own_join(ch, loop, &c[0], 0);
    MSR_CHECK_MSG(c[0].code == 0 && c[0].id[0], "mid's own node, node 3 of 3: %d %s", c[0].code,
                  c[0].message);
    own_join(ch, loop, &c[1], 1);
    MSR_CHECK_EQ(c[1].code, MSR_RPC_FAILED_PRECONDITION);
    MSR_CHECK_MSG(strstr(c[1].message, "would be node 4 of relay mid, whose subtree has 3 (the "
                                       "relays under it cover 2, the nodes it serves itself 1)"),
                  "%s", c[1].message);
    own_join(ch, loop, &c[0], 0); /* again, under its id now */
    MSR_CHECK_MSG(c[0].code == 0, "mid's own node joining again: %d %s", c[0].code, c[0].message);
    batch_refused(m.mid.target, "low-2", 1, 0, 2, why, sizeof why);
    MSR_CHECK_MSG(strstr(why, "would cover nodes 4 to 4 of relay mid") &&
                      strstr(why, "the nodes it serves itself 1): node 4 lies outside"),
                  "%s", why);
    msr_rpc_channel_destroy(ch);
    msr_rpc_loop_destroy(loop);
    mid_stop(&m);
}

static const msr_test_t tests[] = {
    {"depth_two", test_depth_two, 60},
    {"middle_killed", test_middle_killed, 60},
    {"chain_bound", test_chain_bound, 60},
    {"batch_bounds", test_batch_bounds, 60},
    {"lower_cover", test_lower_cover, 60},
    {"same_node_twice", test_same_node_twice, 30},
    {"replaced_relay", test_replaced_relay, 60},
    {"own_nodes", test_own_nodes, 60},
    {"dead_between_batches", test_dead_between_batches, 60},
    {"dead_between_batches_mid", test_dead_between_batches_mid, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests); /* gRPC starts in each test's process */
}
