/* Unit tests of relays' batches in the coordinator core (cluster/relay.c),
 * driven through a responder that records answers: a job joined through
 * relays forms as a direct one does, a batch's bounds and refusals, a relay
 * that ends mid-join, and a node behind a relay that dies. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/time.h"
#include "cluster/coord.h"
#include "rendezvous/rpc.h"
#include "tests/runner.h"
#include "tests/unit_rdzv/fixtures.h"

static msr_coord_t *make_coord(int nodes, int64_t node_timeout_ms)
{
    msr_coord_config_t cfg = {
        .token = "t",
        .job_id = "job",
        .worker_num = 2 * nodes,
        .local_worker_num = 2,
        .max_restarts = 0,
        .node_timeout_ms = node_timeout_ms,
        .join_timeout_ms = 60000,
    };
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    return co;
}

/* ---- requests ---- */

#define NMAX 1100

typedef struct sim {
    int nodes;
    char ids[NMAX][32];
    char hosts[NMAX][32];
} sim_t;

static Msr__JoinRequest join_req(sim_t *s, int n, int wanted_rank)
{
    Msr__JoinRequest r = MSR__JOIN_REQUEST__INIT;
    r.protocol_version = MSR_PROTOCOL_VERSION;
    r.job_id = "job";
    snprintf(s->hosts[n], sizeof s->hosts[n], "10.0.%d.%d", n / 256, n % 256);
    r.host = s->hosts[n];
    r.pid = 1000 + n;
    r.worker_num = 2 * s->nodes;
    r.local_worker_num = 2;
    r.node_rank = wanted_rank;
    r.free_port = 5000 + n;
    r.node_id = s->ids[n]; /* "" the first time */
    return r;
}

static Msr__HeartbeatRequest beat_req(sim_t *s, int n, uint32_t wait_ms)
{
    Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
    r.node_id = s->ids[n];
    r.generation = 0;
    r.known_state = MSR__JOB_STATE__JOB_WAITING;
    r.ready_generation = 0;
    r.wait_ms = wait_ms;
    return r;
}

/* Node n's progress: its ranks 2n and 2n + 1 at step step, in generation 0. */
typedef struct progress_msg {
    Msr__StepReport reps[2], *repp[2];
    Msr__ProgressRequest req;
} progress_msg_t;

static void progress_req(sim_t *s, int n, int64_t step, progress_msg_t *p)
{
    msr__progress_request__init(&p->req);
    for (int i = 0; i < 2; i++) {
        msr__step_report__init(&p->reps[i]);
        p->reps[i].rank = 2 * n + i;
        p->reps[i].step = step;
        p->reps[i].step_time = 0.1;
        p->reps[i].steps = 1;
        p->repp[i] = &p->reps[i];
    }
    p->req.node_id = s->ids[n];
    p->req.generation = 0;
    p->req.n_steps = 2;
    p->req.steps = p->repp;
}

/* The batch of relay rid for nodes[0..n): call k of method ms[k], a join,
 * a heartbeat (wait_ms) or progress (at step 100 + the node); bufs holds
 * the packed requests. */
static void relay_calls(msr_coord_t *co, tcall_t *c, sim_t *s, const char *rid, uint32_t subtree,
                        const msr_rpc_method_t *ms, const int *nodes, int n, uint32_t wait_ms)
{
    static uint8_t bufs[NMAX][256];
    static Msr__RelayCall calls[NMAX];
    static Msr__RelayCall *callp[NMAX];
    MSR_CHECK(n <= NMAX);
    for (int k = 0; k < n; k++) {
        Msr__JoinRequest j = join_req(s, nodes[k], -1);
        Msr__HeartbeatRequest h = beat_req(s, nodes[k], wait_ms);
        progress_msg_t p;
        progress_req(s, nodes[k], 100 + nodes[k], &p);
        const ProtobufCMessage *req = ms[k] == MSR_RPC_JOIN        ? &j.base
                                      : ms[k] == MSR_RPC_HEARTBEAT ? &h.base
                                                                   : &p.req.base;
        size_t len = protobuf_c_message_get_packed_size(req);
        MSR_CHECK(len <= sizeof bufs[0]);
        protobuf_c_message_pack(req, bufs[k]);
        msr__relay_call__init(&calls[k]);
        calls[k].method = (uint32_t)ms[k];
        calls[k].request.data = bufs[k];
        calls[k].request.len = len;
        callp[k] = &calls[k];
    }
    Msr__RelayRequest r = MSR__RELAY_REQUEST__INIT;
    r.relay_id = (char *)rid;
    r.subtree = subtree;
    r.n_calls = (size_t)n;
    r.calls = callp;
    msr_tcall_call(co, c, MSR_RPC_RELAY, &r.base);
}

/* relay_calls with every call of method m. */
static void relay_call(msr_coord_t *co, tcall_t *c, sim_t *s, const char *rid, uint32_t subtree,
                       msr_rpc_method_t m, const int *nodes, int n, uint32_t wait_ms)
{
    static msr_rpc_method_t ms[NMAX];
    MSR_CHECK(n <= NMAX);
    for (int k = 0; k < n; k++)
        ms[k] = m;
    relay_calls(co, c, s, rid, subtree, ms, nodes, n, wait_ms);
}

/* Entry k of an answered batch, unpacked as a response of m (or NULL when
 * the entry was refused: *code_p and *msg_p say why). */
static ProtobufCMessage *entry(const tcall_t *c, size_t k, msr_rpc_method_t m, int *code_p,
                               const char **msg_p)
{
    MSR_CHECK_MSG(c->answered && c->code == 0, "the batch failed: %d %s", c->code, c->message);
    const Msr__RelayResponse *r = (const Msr__RelayResponse *)c->resp;
    MSR_CHECK(k < r->n_answers);
    *code_p = r->answers[k]->code;
    *msg_p = r->answers[k]->message;
    if (*code_p != 0)
        return NULL;
    ProtobufCMessage *msg =
        msr_rpc_response_unpack(m, r->answers[k]->response.data, r->answers[k]->response.len);
    MSR_CHECK(msg != NULL);
    return msg;
}

/* Nodes first..first+n joined through relay rid, each recording its id. */
static void relay_join(msr_coord_t *co, sim_t *s, const char *rid, int first, int n)
{
    int nodes[NMAX];
    for (int k = 0; k < n; k++)
        nodes[k] = first + k;
    tcall_t c = {0};
    relay_call(co, &c, s, rid, (uint32_t)n, MSR_RPC_JOIN, nodes, n, 0);
    for (int k = 0; k < n; k++) {
        int code;
        const char *msg;
        Msr__JoinResponse *j = (Msr__JoinResponse *)entry(&c, (size_t)k, MSR_RPC_JOIN, &code, &msg);
        MSR_CHECK_MSG(j != NULL, "join %d through %s: %d %s", k, rid, code, msg);
        snprintf(s->ids[first + k], sizeof s->ids[0], "%s", j->node_id);
        msr_rpc_message_free(&j->base);
    }
    msr_tcall_reset(&c);
}

/* Node n's direct heartbeat (wait 0): its response's state, and its
 * node rank through *rank_p (-1 without an assignment). */
static int direct_beat(msr_coord_t *co, sim_t *s, int n, int *rank_p)
{
    tcall_t c = {0};
    Msr__HeartbeatRequest h = beat_req(s, n, 0);
    msr_tcall_call(co, &c, MSR_RPC_HEARTBEAT, &h.base);
    MSR_CHECK_MSG(c.answered && c.code == 0, "heartbeat of %d: %d %s", n, c.code, c.message);
    const Msr__HeartbeatResponse *r = (const Msr__HeartbeatResponse *)c.resp;
    int state = r->state;
    if (rank_p)
        *rank_p = r->assignment ? r->assignment->node_rank : -1;
    msr_tcall_reset(&c);
    return state;
}

static void direct_join(msr_coord_t *co, sim_t *s, int n, int wanted_rank)
{
    tcall_t c = {0};
    Msr__JoinRequest j = join_req(s, n, wanted_rank);
    msr_tcall_call(co, &c, MSR_RPC_JOIN, &j.base);
    MSR_CHECK_MSG(c.answered && c.code == 0, "join of %d: %d %s", n, c.code, c.message);
    snprintf(s->ids[n], sizeof s->ids[0], "%s", ((Msr__JoinResponse *)c.resp)->node_id);
    msr_tcall_reset(&c);
}

/* s emptied for a job of nodes nodes, and its coordinator (the node
 * timeout given). */
static msr_coord_t *sim_start(sim_t *s, int nodes, int64_t node_timeout_ms)
{
    memset(s, 0, sizeof *s);
    s->nodes = nodes;
    return make_coord(nodes, node_timeout_ms);
}

/* Nodes 0..n joined through relay "a", then their ready heartbeats sent
 * in one batch c (wait_ms: held up to that long). */
static void relay_ready(msr_coord_t *co, tcall_t *c, sim_t *s, int n, uint32_t wait_ms)
{
    int nodes[NMAX];
    for (int k = 0; k < n; k++)
        nodes[k] = k;
    relay_join(co, s, "a", 0, n);
    relay_call(co, c, s, "a", (uint32_t)n, MSR_RPC_HEARTBEAT, nodes, n, wait_ms);
}

/* ---- the tests ---- */

/* Eight nodes joined directly, and the same eight through two relays of
 * four (their joins in one batch each, their ready heartbeats in one held
 * batch each): the same members with the same node ranks, by arrival. */
static void test_same_as_direct(void)
{
    enum { N = 8 };
    static sim_t d, r;
    memset(&d, 0, sizeof d);
    memset(&r, 0, sizeof r);
    d.nodes = r.nodes = N;
    msr_coord_t *cd = make_coord(N, 600000), *cr = make_coord(N, 600000);
    for (int n = 0; n < N; n++)
        direct_join(cd, &d, n, -1);
    for (int n = 0; n < N; n++)
        direct_beat(cd, &d, n, NULL);
    relay_join(cr, &r, "a", 0, 4);
    relay_join(cr, &r, "b", 4, 4);
    tcall_t ca = {0}, cb = {0};
    int fa[] = {0, 1, 2, 3}, fb[] = {4, 5, 6, 7};
    relay_call(cr, &ca, &r, "a", 4, MSR_RPC_HEARTBEAT, fa, 4, 60000);
    MSR_CHECK_MSG(!ca.answered, "a batch of held heartbeats was answered before the job formed");
    relay_call(cr, &cb, &r, "b", 4, MSR_RPC_HEARTBEAT, fb, 4, 60000);
    MSR_CHECK(ca.answered && cb.answered);
    for (int n = 0; n < N; n++) {
        int code, want, got;
        const char *msg;
        Msr__HeartbeatResponse *h = (Msr__HeartbeatResponse *)entry(
            n < 4 ? &ca : &cb, (size_t)(n % 4), MSR_RPC_HEARTBEAT, &code, &msg);
        MSR_CHECK_MSG(h != NULL, "node %d: %d %s", n, code, msg);
        MSR_CHECK_EQ(h->state, MSR__JOB_STATE__JOB_RUNNING);
        MSR_CHECK(h->assignment != NULL);
        got = h->assignment->node_rank;
        MSR_CHECK_EQ(h->assignment->world_size, 2 * N);
        MSR_CHECK_EQ(h->assignment->rank_offset, 2 * got);
        msr_rpc_message_free(&h->base);
        MSR_CHECK_EQ(direct_beat(cd, &d, n, &want), MSR__JOB_STATE__JOB_RUNNING);
        MSR_CHECK_MSG(got == want, "node %d: rank %d through a relay, %d directly", n, got, want);
    }
    msr_tcall_reset(&ca);
    msr_tcall_reset(&cb);
    msr_coord_destroy(cd);
    msr_coord_destroy(cr);
}

/* A batch refused whole, with INVALID_ARGUMENT and a message holding want. */
static void check_refused(const tcall_t *c, const char *want)
{
    MSR_CHECK_MSG(c->answered && c->code == MSR_RPC_INVALID_ARGUMENT,
                  "the batch was not refused: %d %s", c->code, c->message);
    MSR_CHECK_MSG(strstr(c->message, want) != NULL, "'%s' does not say '%s'", c->message, want);
}

/* The batch's bounds, each at exactly its limit and one past it. */
static void test_batch_bounds(void)
{
    static sim_t s;
    msr_coord_t *co = sim_start(&s, MSR_RELAY_BATCH_MAX + 1, 600000);
    int nodes[NMAX];
    for (int k = 0; k < NMAX; k++)
        nodes[k] = k;
    tcall_t c = {0};
    /* one call past the batch's limit, then exactly at it */
    relay_call(co, &c, &s, "r", MSR_RELAY_BATCH_MAX + 1, MSR_RPC_JOIN, nodes,
               MSR_RELAY_BATCH_MAX + 1, 0);
    check_refused(&c, "a batch of 1025 calls; a batch has 1 to 1024");
    relay_call(co, &c, &s, "r", MSR_RELAY_BATCH_MAX, MSR_RPC_JOIN, nodes, MSR_RELAY_BATCH_MAX, 0);
    int code;
    const char *msg;
    for (int k = 0; k < MSR_RELAY_BATCH_MAX; k++) {
        ProtobufCMessage *j = entry(&c, (size_t)k, MSR_RPC_JOIN, &code, &msg);
        MSR_CHECK_MSG(j != NULL, "entry %d: %d %s", k, code, msg);
        msr_rpc_message_free(j);
    }
    /* an empty batch */
    relay_call(co, &c, &s, "r", 4, MSR_RPC_JOIN, nodes, 0, 0);
    check_refused(&c, "a batch of 0 calls");
    /* the subtree: at its limit, one past it, and fewer nodes than calls
     * (a relay lying about its subtree) */
    int last = MSR_RELAY_BATCH_MAX;
    relay_call(co, &c, &s, "r", MSR_RELAY_SUBTREE_MAX + 1, MSR_RPC_JOIN, &last, 1, 0);
    check_refused(&c, "a subtree of 1048577 nodes");
    relay_call(co, &c, &s, "r", 2, MSR_RPC_JOIN, nodes, 3, 0);
    check_refused(&c, "relay r: 3 calls for a subtree of 2 nodes");
    /* the relay's id: 64 bytes and 65 */
    char id[MSR_RELAY_ID_MAX + 2];
    memset(id, 'x', sizeof id);
    id[MSR_RELAY_ID_MAX + 1] = '\0';
    relay_call(co, &c, &s, id, 1, MSR_RPC_JOIN, &last, 1, 0);
    check_refused(&c, "a relay's id must have 1 to 64 bytes");
    /* the relays' subtrees together: r's 1,024 nodes, then a relay covering
     * exactly the coordinator's last node, and one covering one past it */
    id[MSR_RELAY_ID_MAX] = '\0';
    relay_call(co, &c, &s, id, MSR_RELAY_SUBTREE_MAX - MSR_RELAY_BATCH_MAX, MSR_RPC_JOIN, &last, 1,
               0);
    ProtobufCMessage *j = entry(&c, 0, MSR_RPC_JOIN, &code, &msg);
    MSR_CHECK_MSG(j != NULL, "the 1025th node: %d %s", code, msg);
    msr_rpc_message_free(j);
    relay_call(co, &c, &s, "past", 1, MSR_RPC_JOIN, &last, 1, 0);
    check_refused(&c, "relay past: its subtree of 1 nodes would cover nodes 1048577 to 1048577 "
                      "of the coordinator, whose subtree has 1048576");
    check_refused(&c, "node 1048577 lies outside the coordinator's subtree");
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* A node listed twice, a method a relay does not carry, bytes that do not
 * unpack: the batch refused whole, nothing of it applied. */
static void test_bad_batches(void)
{
    static sim_t s;
    msr_coord_t *co = sim_start(&s, 4, 600000);
    tcall_t c = {0};
    int twice[] = {0, 1, 0};
    relay_call(co, &c, &s, "r", 4, MSR_RPC_JOIN, twice, 3, 0);
    check_refused(&c, "calls 0 and 2 are for the same node (10.0.0.0 1000)");
    relay_join(co, &s, "r", 0, 2);
    relay_call(co, &c, &s, "r", 4, MSR_RPC_HEARTBEAT, twice, 3, 0);
    check_refused(&c, "calls 0 and 2 are for the same node");
    /* nothing of the refused batches joined: 2 nodes, not 3 */
    Msr__StatusRequest st = MSR__STATUS_REQUEST__INIT;
    msr_tcall_call(co, &c, MSR_RPC_STATUS, &st.base);
    MSR_CHECK_EQ(((Msr__StatusResponse *)c.resp)->n_nodes, 2);
    /* a Status inside a batch, and a join that does not unpack */
    uint8_t junk[] = {0xff, 0xff, 0xff};
    Msr__RelayCall rc = MSR__RELAY_CALL__INIT, *rcp = &rc;
    Msr__RelayRequest r = MSR__RELAY_REQUEST__INIT;
    r.relay_id = "r";
    r.subtree = 4;
    r.n_calls = 1;
    r.calls = &rcp;
    rc.method = MSR_RPC_STATUS;
    msr_tcall_call(co, &c, MSR_RPC_RELAY, &r.base);
    check_refused(&c, "call 0 has method 4; a relay carries Join, Heartbeat, Report, Leave and "
                      "Progress only");
    rc.method = MSR_RPC_JOIN;
    rc.request.data = junk;
    rc.request.len = sizeof junk;
    msr_tcall_call(co, &c, MSR_RPC_RELAY, &r.base);
    check_refused(&c, "call 0 (Join) does not unpack");
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* A relay speaks only for the nodes that joined through it: another
 * relay's heartbeat for one is refused alone (the batch's other entries
 * are answered); joining again through the other relay moves the node. */
static void test_foreign_node(void)
{
    static sim_t s;
    msr_coord_t *co = sim_start(&s, 4, 600000);
    relay_join(co, &s, "a", 0, 2);
    relay_join(co, &s, "b", 2, 1);
    direct_join(co, &s, 3, -1);
    tcall_t c = {0};
    int mixed[] = {2, 0, 3};
    relay_call(co, &c, &s, "b", 3, MSR_RPC_HEARTBEAT, mixed, 3, 0);
    int code;
    const char *msg;
    ProtobufCMessage *h = entry(&c, 0, MSR_RPC_HEARTBEAT, &code, &msg);
    MSR_CHECK_MSG(h != NULL, "b's own node: %d %s", code, msg);
    msr_rpc_message_free(h);
    MSR_CHECK(entry(&c, 1, MSR_RPC_HEARTBEAT, &code, &msg) == NULL);
    MSR_CHECK_EQ(code, MSR_RPC_FAILED_PRECONDITION);
    MSR_CHECK_MSG(strstr(msg, "relay b does not serve node") && strstr(msg, "through relay a"),
                  "%s", msg);
    MSR_CHECK(entry(&c, 2, MSR_RPC_HEARTBEAT, &code, &msg) == NULL);
    MSR_CHECK_MSG(code == MSR_RPC_FAILED_PRECONDITION && strstr(msg, "joined directly"), "%d %s",
                  code, msg);
    /* node 0 joins again through b (its id kept): b now speaks for it */
    int zero = 0;
    relay_call(co, &c, &s, "b", 3, MSR_RPC_JOIN, &zero, 1, 0);
    Msr__JoinResponse *j = (Msr__JoinResponse *)entry(&c, 0, MSR_RPC_JOIN, &code, &msg);
    MSR_CHECK_MSG(j != NULL && strcmp(j->node_id, s.ids[0]) == 0, "rejoin: %d %s", code, msg);
    msr_rpc_message_free(&j->base);
    relay_call(co, &c, &s, "b", 3, MSR_RPC_HEARTBEAT, &zero, 1, 0);
    h = entry(&c, 0, MSR_RPC_HEARTBEAT, &code, &msg);
    MSR_CHECK_MSG(h != NULL, "after moving to b: %d %s", code, msg);
    msr_rpc_message_free(h);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* A relay ends mid-join (its Relay call cancelled while its nodes' ready
 * heartbeats are held): the batch is never answered, and its nodes join
 * again directly, keeping their ids; the job forms with all four. */
static void test_relay_killed_mid_join(void)
{
    static sim_t s;
    msr_coord_t *co = sim_start(&s, 4, 600000);
    tcall_t c = {0};
    relay_ready(co, &c, &s, 3, 60000);
    MSR_CHECK(!c.answered);
    msr_coord_cancel(co, &c); /* the relay died: its connection broke */
    msr_coord_tick(co, msr_now_ns());
    MSR_CHECK_MSG(!c.answered, "a cancelled batch was answered");
    /* the three go direct: join again (same ids), beat; node 3 joins */
    for (int n = 0; n < 3; n++) {
        char was[32];
        snprintf(was, sizeof was, "%s", s.ids[n]);
        direct_join(co, &s, n, -1);
        MSR_CHECK_STR(s.ids[n], was);
        MSR_CHECK_EQ(direct_beat(co, &s, n, NULL), MSR__JOB_STATE__JOB_WAITING);
    }
    direct_join(co, &s, 3, -1);
    int seen = 0;
    for (int n = 3; n >= 0; n--) {
        int rank;
        MSR_CHECK_EQ(direct_beat(co, &s, n, &rank), MSR__JOB_STATE__JOB_RUNNING);
        MSR_CHECK(rank >= 0 && rank < 4 && !(seen & (1 << rank)));
        seen |= 1 << rank;
    }
    MSR_CHECK_MSG(!c.answered, "the dead relay's batch was answered after its nodes moved");
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* A batch with a held heartbeat and an entry answered at once is answered
 * at once: the heartbeat with the job as it stands (still waiting); and
 * one whose held entry is answered later is answered then, whole. */
static void test_batch_not_held_by_one(void)
{
    static sim_t s;
    msr_coord_t *co = sim_start(&s, 4, 600000);
    relay_join(co, &s, "a", 0, 1);
    /* entry 0: node 0's ready heartbeat (held alone); entry 1: node 1's
     * join, answered at once */
    Msr__HeartbeatRequest h = beat_req(&s, 0, 60000);
    Msr__JoinRequest j = join_req(&s, 1, -1);
    uint8_t b0[256], b1[256];
    Msr__RelayCall e0 = MSR__RELAY_CALL__INIT, e1 = MSR__RELAY_CALL__INIT, *ep[] = {&e0, &e1};
    e0.method = MSR_RPC_HEARTBEAT;
    e0.request.len = protobuf_c_message_pack(&h.base, b0);
    e0.request.data = b0;
    e1.method = MSR_RPC_JOIN;
    e1.request.len = protobuf_c_message_pack(&j.base, b1);
    e1.request.data = b1;
    Msr__RelayRequest r = MSR__RELAY_REQUEST__INIT;
    r.relay_id = "a";
    r.subtree = 2;
    r.n_calls = 2;
    r.calls = ep;
    tcall_t c = {0};
    msr_tcall_call(co, &c, MSR_RPC_RELAY, &r.base);
    MSR_CHECK_MSG(c.answered, "one held heartbeat held the whole batch");
    int code;
    const char *msg;
    Msr__HeartbeatResponse *hr =
        (Msr__HeartbeatResponse *)entry(&c, 0, MSR_RPC_HEARTBEAT, &code, &msg);
    MSR_CHECK_MSG(hr != NULL && hr->state == MSR__JOB_STATE__JOB_WAITING, "%d %s", code, msg);
    msr_rpc_message_free(&hr->base);
    ProtobufCMessage *jr = entry(&c, 1, MSR_RPC_JOIN, &code, &msg);
    MSR_CHECK(jr != NULL);
    msr_rpc_message_free(jr);
    /* later: both entries held, then one answered (node 0's newer direct
     * heartbeat replaces its held one): the other is answered with it */
    int both[] = {0, 1};
    s.ids[1][0] = '\0';
    relay_join(co, &s, "a", 1, 1);
    relay_call(co, &c, &s, "a", 2, MSR_RPC_HEARTBEAT, both, 2, 60000);
    MSR_CHECK(!c.answered);
    MSR_CHECK_EQ(direct_beat(co, &s, 0, NULL), MSR__JOB_STATE__JOB_WAITING);
    MSR_CHECK_MSG(c.answered, "a held entry held the batch after another was answered");
    hr = (Msr__HeartbeatResponse *)entry(&c, 1, MSR_RPC_HEARTBEAT, &code, &msg);
    MSR_CHECK_MSG(hr != NULL && hr->state == MSR__JOB_STATE__JOB_WAITING, "%d %s", code, msg);
    msr_rpc_message_free(&hr->base);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* A node behind a relay dies: the relay's batches go on for the others
 * and leave it out; it is lost after the node timeout, as a direct node
 * is, and the job (no restarts) fails naming it. */
static void test_node_behind_relay_dies(void)
{
    static sim_t s;
    msr_coord_t *co = sim_start(&s, 3, 300);
    tcall_t c = {0};
    int all[] = {0, 1, 2};
    relay_ready(co, &c, &s, 3, 0);
    MSR_CHECK(c.answered);
    uint64_t limit = msr_deadline_in_ms(10000);
    int state = MSR__JOB_STATE__JOB_RUNNING;
    while (state == MSR__JOB_STATE__JOB_RUNNING) {
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "node 2 was not found lost within 10 s");
        msr_sleep_ms(50); /* paces the relay's rounds; the deadline bounds them */
        uint64_t t = msr_now_ns();
        relay_call(co, &c, &s, "a", 3, MSR_RPC_HEARTBEAT, all, 2, 0);
        msr_coord_tick(co, t);
        int code;
        const char *msg;
        Msr__HeartbeatResponse *h =
            (Msr__HeartbeatResponse *)entry(&c, 0, MSR_RPC_HEARTBEAT, &code, &msg);
        MSR_CHECK(h != NULL);
        state = h->state;
        msr_rpc_message_free(&h->base);
    }
    Msr__StatusRequest st = MSR__STATUS_REQUEST__INIT;
    msr_tcall_call(co, &c, MSR_RPC_STATUS, &st.base);
    const Msr__StatusResponse *sr = (const Msr__StatusResponse *)c.resp;
    MSR_CHECK_EQ(sr->state, MSR__JOB_STATE__JOB_FAILED);
    MSR_CHECK(sr->failure && strstr(sr->failure->host, "10.0.0.2"));
    MSR_CHECK(sr->n_nodes == 3 && !sr->nodes[2]->alive && sr->nodes[0]->alive);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* The step the coordinator shows for rank (its /api/job), -1 when none. */
static long long rank_step(msr_coord_t *co, int rank)
{
    msr_buf_t b = MSR_BUF_INIT;
    MSR_CHECK_OK(msr_coord_render_job(co, &b));
    char want[48];
    snprintf(want, sizeof want, "{\"rank\":%d,\"node\":", rank);
    const char *at = strstr(b.data, want);
    long long step = -1;
    if (at == NULL || sscanf(at + strlen(want), "%*d,\"step\":%lld", &step) != 1)
        step = -1;
    msr_buf_cleanup(&b);
    return step;
}

/* Progress through relays: a batch of several nodes' reports answered
 * entry by entry, each rank's step applied as a direct call's; an entry
 * for a node the relay does not serve refused alone (not applied); a
 * batch mixing Progress with heartbeats refused whole. */
static void test_progress(void)
{
    static sim_t s;
    msr_coord_t *co = sim_start(&s, 4, 600000);
    relay_join(co, &s, "a", 0, 3);
    direct_join(co, &s, 3, -1);
    tcall_t c = {0};
    int mine[] = {0, 1, 2};
    relay_call(co, &c, &s, "a", 3, MSR_RPC_HEARTBEAT, mine, 3, 0);
    MSR_CHECK_EQ(direct_beat(co, &s, 3, NULL), MSR__JOB_STATE__JOB_RUNNING);
    relay_call(co, &c, &s, "a", 3, MSR_RPC_PROGRESS, mine, 3, 0);
    int code;
    const char *msg;
    for (int k = 0; k < 3; k++) {
        ProtobufCMessage *r = entry(&c, (size_t)k, MSR_RPC_PROGRESS, &code, &msg);
        MSR_CHECK_MSG(r != NULL, "node %d's progress: %d %s", k, code, msg);
        msr_rpc_message_free(r);
    }
    for (int rank = 0; rank < 6; rank++)
        MSR_CHECK_EQ(rank_step(co, rank), 100 + rank / 2);
    /* node 3 joined directly: a's report for it is refused, node 0's kept */
    int foreign[] = {3, 0};
    relay_call(co, &c, &s, "a", 3, MSR_RPC_PROGRESS, foreign, 2, 0);
    MSR_CHECK(entry(&c, 0, MSR_RPC_PROGRESS, &code, &msg) == NULL);
    MSR_CHECK_MSG(code == MSR_RPC_FAILED_PRECONDITION &&
                      strstr(msg, "relay a does not serve node") && strstr(msg, "joined directly"),
                  "%d %s", code, msg);
    ProtobufCMessage *r = entry(&c, 1, MSR_RPC_PROGRESS, &code, &msg);
    MSR_CHECK_MSG(r != NULL, "node 0 beside a refused entry: %d %s", code, msg);
    msr_rpc_message_free(r);
    MSR_CHECK_EQ(rank_step(co, 6), -1);
    MSR_CHECK_EQ(rank_step(co, 7), -1);
    /* Progress beside a heartbeat, either first: refused whole */
    msr_rpc_method_t pb[] = {MSR_RPC_PROGRESS, MSR_RPC_HEARTBEAT};
    msr_rpc_method_t bp[] = {MSR_RPC_HEARTBEAT, MSR_RPC_PROGRESS};
    int two[] = {0, 1};
    relay_calls(co, &c, &s, "a", 3, pb, two, 2, 0);
    check_refused(&c, "calls 0 and 1 are Progress and Heartbeat; Progress calls go in batches of "
                      "their own");
    relay_calls(co, &c, &s, "a", 3, bp, two, 2, 0);
    check_refused(&c, "calls 0 and 1 are Heartbeat and Progress");
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static const msr_test_t tests[] = {
    {"progress", test_progress, 10},
    {"same_as_direct", test_same_as_direct, 10},
    {"batch_bounds", test_batch_bounds, 20},
    {"bad_batches", test_bad_batches, 10},
    {"foreign_node", test_foreign_node, 10},
    {"relay_killed_mid_join", test_relay_killed_mid_join, 10},
    {"batch_not_held_by_one", test_batch_not_held_by_one, 10},
    {"node_behind_relay_dies", test_node_behind_relay_dies, 20},
};

int main(int argc, char **argv)
{
    /* the relays' batches come from a relay's address, as a server's do */
    msr_tcall_use_peer("ipv4:127.0.0.1:4000");
    return MSR_TEST_MAIN(argc, argv, tests);
}
