/* The relay's side of a batch (rendezvous/relay.h) against a coordinator
 * served over a real socket: nodes joined through two relays form the job;
 * a batch the coordinator refuses answers each of its calls with why; a
 * relay that goes away mid-join leaves its nodes free to join directly;
 * nodes calling a relay agent's server over sockets, and that relay dying
 * mid-join; progress sent in batches of its own. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/time.h"
#include "cluster/server.h"
#include "rendezvous/relay.h"
#include "rendezvous/rpc.h"
#include "tests/runner.h"
#include "tests/unit_rdzv/fixtures.h"

/* ---- simulated nodes ---- */

typedef struct node {
    msr_rpc_method_t expect; /* the method of the call in flight */
    int index, answered, code, rank, state;
    char id[32], host[32], message[400];
} node_t;

static void answered(void *arg, int code, const char *message, const uint8_t *resp, size_t len)
{
    node_t *n = arg;
    MSR_CHECK_MSG(!n->answered, "node %d answered twice", n->index);
    n->answered = 1;
    n->code = code;
    snprintf(n->message, sizeof n->message, "%s", message ? message : "");
    if (code != 0)
        return;
    if (n->expect == MSR_RPC_JOIN) {
        ProtobufCMessage *m = msr_rpc_response_unpack(MSR_RPC_JOIN, resp, len);
        MSR_CHECK(m != NULL);
        snprintf(n->id, sizeof n->id, "%s", ((Msr__JoinResponse *)m)->node_id);
        msr_rpc_message_free(m);
        return;
    }
    if (n->expect == MSR_RPC_PROGRESS) {
        ProtobufCMessage *m = msr_rpc_response_unpack(MSR_RPC_PROGRESS, resp, len);
        MSR_CHECK(m != NULL);
        msr_rpc_message_free(m);
        return;
    }
    Msr__HeartbeatResponse *h =
        (Msr__HeartbeatResponse *)msr_rpc_response_unpack(MSR_RPC_HEARTBEAT, resp, len);
    MSR_CHECK(h != NULL);
    n->state = h->state;
    n->rank = h->assignment ? h->assignment->node_rank : -1;
    msr_rpc_message_free(&h->base);
}

static Msr__JoinRequest join_req(node_t *n, int nodes)
{
    Msr__JoinRequest j = MSR__JOIN_REQUEST__INIT;
    j.protocol_version = MSR_PROTOCOL_VERSION;
    j.job_id = "j";
    snprintf(n->host, sizeof n->host, "10.0.0.%d", n->index);
    j.host = n->host;
    j.pid = 100 + n->index;
    j.worker_num = nodes;
    j.local_worker_num = 1;
    j.node_rank = -1;
    j.node_id = n->id;
    return j;
}

static Msr__HeartbeatRequest beat_req(node_t *n)
{
    Msr__HeartbeatRequest h = MSR__HEARTBEAT_REQUEST__INIT;
    h.node_id = n->id;
    h.known_state = MSR__JOB_STATE__JOB_WAITING;
    h.ready_generation = 0;
    h.wait_ms = 30000;
    return h;
}

/* Polls loop until every node of nodes[0..n) is answered (20 s at most). */
static void wait_answered(msr_rpc_loop_t *loop, node_t *nodes, int n)
{
    uint64_t limit = msr_deadline_in_ms(20000);
    for (int k = 0; k < n; k++)
        while (!nodes[k].answered) {
            MSR_CHECK_MSG(!msr_deadline_passed(limit), "node %d not answered in 20 s", k);
            msr_rpc_loop_poll(loop, msr_deadline_in_ms(100));
        }
}

static void submit_join(msr_relay_t *r, node_t *n, int nodes)
{
    Msr__JoinRequest j = join_req(n, nodes);
    n->answered = 0;
    n->expect = MSR_RPC_JOIN;
    MSR_CHECK_OK(msr_relay_submit(r, MSR_RPC_JOIN, &j.base, answered, n));
}

static void submit_beat(msr_relay_t *r, node_t *n)
{
    Msr__HeartbeatRequest h = beat_req(n);
    n->answered = 0;
    n->expect = MSR_RPC_HEARTBEAT;
    MSR_CHECK_OK(msr_relay_submit(r, MSR_RPC_HEARTBEAT, &h.base, answered, n));
}

/* n's progress (its one rank at step 7), answered to p (n's id). */
static void submit_progress(msr_relay_t *r, const node_t *n, node_t *p)
{
    Msr__StepReport rep = MSR__STEP_REPORT__INIT, *repp = &rep;
    rep.rank = n->index;
    rep.step = 7;
    Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
    req.node_id = (char *)n->id;
    req.n_steps = 1;
    req.steps = &repp;
    p->index = n->index;
    p->answered = 0;
    p->expect = MSR_RPC_PROGRESS;
    MSR_CHECK_OK(msr_relay_submit(r, MSR_RPC_PROGRESS, &req.base, answered, p));
}

/* ---- tests ---- */

/* A coordinator for a job of nodes and one relay (id, subtree) in front of
 * it on a loop of its own. */
typedef struct one_relay {
    msr_tserved_t s;
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *ch;
    msr_relay_t *r;
} one_relay_t;

static void one_relay_start(one_relay_t *o, int nodes, const char *id, uint32_t subtree)
{
    msr_tserved_start_nodes(&o->s, nodes);
    MSR_CHECK_OK(msr_rpc_loop_create(&o->loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(o->s.target, "tok", &o->ch));
    MSR_CHECK_OK(msr_relay_create(o->loop, o->ch, id, subtree, &o->r));
}

static void one_relay_stop(one_relay_t *o)
{
    msr_relay_destroy(o->r);
    msr_rpc_channel_destroy(o->ch);
    msr_rpc_loop_destroy(o->loop);
    msr_tserved_stop(&o->s);
}

/* Progress queued between long-polled heartbeats (a job of 4 that 3 nodes
 * do not form holds them) goes up in a batch of its own: every node's
 * progress is answered while the heartbeats stay held. */
static void test_progress_own_batch(void)
{
    one_relay_t o;
    one_relay_start(&o, 4, "a", 3);
    msr_rpc_loop_t *loop = o.loop;
    msr_relay_t *r = o.r;
    node_t n[3], p[3];
    memset(n, 0, sizeof n);
    memset(p, 0, sizeof p);
    for (int k = 0; k < 3; k++) {
        n[k].index = k;
        submit_join(r, &n[k], 4);
    }
    msr_relay_flush(r);
    wait_answered(loop, n, 3);
    for (int k = 0; k < 3; k++) {
        MSR_CHECK_MSG(n[k].code == 0, "join %d: %d %s", k, n[k].code, n[k].message);
        if (k < 2)
            submit_beat(r, &n[k]);
        submit_progress(r, &n[k], &p[k]);
    }
    uint64_t calls0, batches0, calls, batches;
    msr_relay_counts(r, &calls0, &batches0);
    msr_relay_flush(r);
    msr_relay_counts(r, &calls, &batches);
    MSR_CHECK_EQ(calls - calls0, 5);
    MSR_CHECK_EQ(batches - batches0, 2);
    wait_answered(loop, p, 3);
    for (int k = 0; k < 3; k++)
        MSR_CHECK_MSG(p[k].code == 0, "progress %d: %d %s", k, p[k].code, p[k].message);
    MSR_CHECK_MSG(!n[0].answered && !n[1].answered, "the held heartbeats were answered");
    MSR_CHECK_EQ(msr_relay_in_flight(r), 1);
    msr_relay_cancel(r);
    wait_answered(loop, n, 2);
    MSR_CHECK(n[0].code == MSR_RPC_CANCELLED && n[1].code == MSR_RPC_CANCELLED);
    one_relay_stop(&o);
}

/* Four nodes through two relays of two: the job forms, every node hears
 * it from its relay with a rank of its own. */
static void test_two_relays(void)
{
    msr_tserved_t s;
    msr_tserved_start_nodes(&s, 4);
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *ca, *cb;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(s.target, "tok", &ca));
    MSR_CHECK_OK(msr_rpc_channel_create_own(s.target, "tok", &cb));
    msr_relay_t *ra, *rb;
    MSR_CHECK_OK(msr_relay_create(loop, ca, "a", 2, &ra));
    MSR_CHECK_OK(msr_relay_create(loop, cb, "b", 2, &rb));
    node_t n[4];
    memset(n, 0, sizeof n);
    for (int k = 0; k < 4; k++) {
        n[k].index = k;
        submit_join(k < 2 ? ra : rb, &n[k], 4);
    }
    msr_relay_flush(ra);
    msr_relay_flush(rb);
    wait_answered(loop, n, 4);
    for (int k = 0; k < 4; k++) {
        MSR_CHECK_MSG(n[k].code == 0 && n[k].id[0], "join %d: %d %s", k, n[k].code, n[k].message);
        submit_beat(k < 2 ? ra : rb, &n[k]);
    }
    msr_relay_flush(ra);
    msr_relay_flush(rb);
    wait_answered(loop, n, 4);
    int seen = 0;
    for (int k = 0; k < 4; k++) {
        MSR_CHECK_MSG(n[k].code == 0, "beat %d: %d %s", k, n[k].code, n[k].message);
        MSR_CHECK_EQ(n[k].state, MSR__JOB_STATE__JOB_RUNNING);
        MSR_CHECK(n[k].rank >= 0 && n[k].rank < 4 && !(seen & (1 << n[k].rank)));
        seen |= 1 << n[k].rank;
    }
    MSR_CHECK_EQ(msr_relay_in_flight(ra), 0);
    msr_relay_destroy(ra);
    msr_relay_destroy(rb);
    msr_rpc_channel_destroy(ca);
    msr_rpc_channel_destroy(cb);
    msr_rpc_loop_destroy(loop);
    msr_tserved_stop(&s);
}

/* A relay lying about its subtree (one node, two calls): the coordinator
 * refuses the batch and each call hears why. */
static void test_refused_batch(void)
{
    one_relay_t o;
    one_relay_start(&o, 4, "liar", 1);
    msr_rpc_loop_t *loop = o.loop;
    msr_relay_t *r = o.r;
    node_t n[2];
    memset(n, 0, sizeof n);
    for (int k = 0; k < 2; k++) {
        n[k].index = k;
        submit_join(r, &n[k], 4);
    }
    msr_relay_flush(r);
    wait_answered(loop, n, 2);
    for (int k = 0; k < 2; k++) {
        MSR_CHECK_EQ(n[k].code, MSR_RPC_INVALID_ARGUMENT);
        MSR_CHECK_MSG(strstr(n[k].message, "relay liar: 2 calls for a subtree of 1 nodes"), "%s",
                      n[k].message);
    }
    /* a method a relay does not carry is refused before anything is sent */
    Msr__StatusRequest st = MSR__STATUS_REQUEST__INIT;
    MSR_CHECK_STATUS(msr_relay_submit(r, MSR_RPC_STATUS, &st.base, answered, &n[0]),
                     MSR_ERR_INVALID_ARG);
    one_relay_stop(&o);
}

/* A relay goes away while its nodes' ready heartbeats are held: they are
 * answered CANCELLED; the nodes join again directly (their ids kept), the
 * third node joins, and the job forms with all three. */
static void test_relay_gone_mid_join(void)
{
    msr_tserved_t s;
    msr_tserved_start_nodes(&s, 3);
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *ch, *direct;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(s.target, "tok", &ch));
    MSR_CHECK_OK(msr_rpc_channel_create_own(s.target, "tok", &direct));
    msr_relay_t *r;
    MSR_CHECK_OK(msr_relay_create(loop, ch, "a", 2, &r));
    node_t n[3];
    memset(n, 0, sizeof n);
    for (int k = 0; k < 3; k++)
        n[k].index = k;
    submit_join(r, &n[0], 3);
    submit_join(r, &n[1], 3);
    msr_relay_flush(r);
    wait_answered(loop, n, 2);
    submit_beat(r, &n[0]);
    submit_beat(r, &n[1]);
    msr_relay_flush(r);
    /* held: the job needs a third node */
    for (int k = 0; k < 5; k++)
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(20));
    MSR_CHECK(!n[0].answered && !n[1].answered);
    msr_relay_destroy(r); /* its batch in flight is cancelled: the server sees it end */
    wait_answered(loop, n, 2);
    /* only now: the cancelled batch's completion still reads its channel */
    msr_rpc_channel_destroy(ch);
    MSR_CHECK_MSG(n[0].code == MSR_RPC_CANCELLED, "%d %s", n[0].code, n[0].message);
    for (int k = 0; k < 3; k++) {
        char was[32];
        snprintf(was, sizeof was, "%s", n[k].id);
        Msr__JoinRequest j = join_req(&n[k], 3);
        ProtobufCMessage *resp = NULL;
        MSR_CHECK_OK(
            msr_rpc_call(direct, MSR_RPC_JOIN, &j.base, msr_deadline_in_ms(10000), 1, &resp));
        const char *id = ((Msr__JoinResponse *)resp)->node_id;
        if (k < 2)
            MSR_CHECK_STR(id, was);
        snprintf(n[k].id, sizeof n[k].id, "%s", id);
        msr_rpc_message_free(resp);
    }
    int seen = 0;
    for (int k = 2; k >= 0; k--) {
        Msr__HeartbeatRequest h = beat_req(&n[k]);
        ProtobufCMessage *resp = NULL;
        MSR_CHECK_OK(
            msr_rpc_call(direct, MSR_RPC_HEARTBEAT, &h.base, msr_deadline_in_ms(10000), 1, &resp));
        const Msr__HeartbeatResponse *hr = (const Msr__HeartbeatResponse *)resp;
        MSR_CHECK_EQ(hr->state, MSR__JOB_STATE__JOB_RUNNING);
        int rank = hr->assignment ? hr->assignment->node_rank : -1;
        MSR_CHECK(rank >= 0 && rank < 3 && !(seen & (1 << rank)));
        seen |= 1 << rank;
        msr_rpc_message_free(resp);
    }
    msr_rpc_channel_destroy(direct);
    msr_rpc_loop_destroy(loop);
    msr_tserved_stop(&s);
}

/* ---- the relay agent's server, nodes calling it over sockets ---- */

/* Two nodes join through a relay agent's server and wait for the job
 * (their heartbeats held at the coordinator through the relay); the relay
 * dies: their calls end with an error, they join again directly (ids
 * kept), a third node joins, and the job forms with all three. */
static void test_relay_server(void)
{
    msr_tserved_t s;
    msr_tserved_start_nodes(&s, 3);
    msr_trelay_t ra;
    msr_trelay_start(&ra, s.target, "tok", "agent", 2);

    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *via, *direct;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(ra.target, "tok", &via));
    MSR_CHECK_OK(msr_rpc_channel_create_own(s.target, "tok", &direct));
    node_t n[3];
    msr_tnode_call_t c[3];
    memset(n, 0, sizeof n);
    for (int k = 0; k < 3; k++)
        n[k].index = k;
    for (int k = 0; k < 2; k++) {
        Msr__JoinRequest j = join_req(&n[k], 3);
        msr_tnode_call_start(via, loop, &c[k], MSR_RPC_JOIN, &j.base);
    }
    msr_tnode_calls_wait(loop, c, 2);
    for (int k = 0; k < 2; k++) {
        MSR_CHECK_MSG(c[k].code == 0, "join %d through the relay: %d", k, c[k].code);
        snprintf(n[k].id, sizeof n[k].id, "%s", c[k].id);
    }
    for (int k = 0; k < 2; k++) {
        Msr__HeartbeatRequest h = beat_req(&n[k]);
        msr_tnode_call_start(via, loop, &c[k], MSR_RPC_HEARTBEAT, &h.base);
    }
    for (int k = 0; k < 10; k++) /* held: the job needs a third node */
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(20));
    MSR_CHECK(!c[0].done && !c[1].done);
    msr_trelay_kill(&ra);
    msr_tnode_calls_wait(loop, c, 2);
    MSR_CHECK_MSG(c[0].code != 0 && c[1].code != 0, "a dead relay's calls succeeded");
    for (int k = 0; k < 3; k++) {
        Msr__JoinRequest j = join_req(&n[k], 3);
        msr_tnode_call_start(direct, loop, &c[k], MSR_RPC_JOIN, &j.base);
        msr_tnode_calls_wait(loop, &c[k], 1);
        MSR_CHECK_MSG(c[k].code == 0, "direct join %d: %d", k, c[k].code);
        if (k < 2)
            MSR_CHECK_STR(c[k].id, n[k].id);
        snprintf(n[k].id, sizeof n[k].id, "%s", c[k].id);
    }
    for (int k = 0; k < 3; k++) {
        Msr__HeartbeatRequest h = beat_req(&n[k]);
        msr_tnode_call_start(direct, loop, &c[k], MSR_RPC_HEARTBEAT, &h.base);
    }
    msr_tnode_calls_wait(loop, c, 3);
    int seen = 0;
    for (int k = 0; k < 3; k++) {
        MSR_CHECK_EQ(c[k].state, MSR__JOB_STATE__JOB_RUNNING);
        MSR_CHECK(c[k].rank >= 0 && c[k].rank < 3 && !(seen & (1 << c[k].rank)));
        seen |= 1 << c[k].rank;
    }
    msr_rpc_channel_destroy(via);
    msr_rpc_channel_destroy(direct);
    msr_rpc_loop_destroy(loop);
    msr_trelay_stop(&ra);
    msr_tserved_stop(&s);
}

static const msr_test_t tests[] = {
    {"relay_server", test_relay_server, 60},
    {"progress_own_batch", test_progress_own_batch, 30},
    {"two_relays", test_two_relays, 30},
    {"refused_batch", test_refused_batch, 30},
    {"relay_gone_mid_join", test_relay_gone_mid_join, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests); /* gRPC starts in each test's process */
}
