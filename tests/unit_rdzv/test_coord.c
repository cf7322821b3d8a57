/* Unit tests of the coordinator core, driven through a responder that
 * records answers in memory: membership, generations, failures, and the
 * store's semantics, deadlines and generation scoping. */
#include <errno.h>
#include <fcntl.h>
#include <grpc/status.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/crc32.h"
#include "base/log.h"
#include "base/time.h"
#include "base/status.h"
#include "base/util.h"
#include "cluster/coord.h"
#include "cluster/coord_internal.h"
#include "cluster/straggler.h"
#include "rendezvous/rpc.h"
#include "tests/runner.h"
#include "tests/unit_rdzv/fixtures.h"

/* Whether call() saves after each call, as the server's loop does after
 * each batch (with a state file, answers wait for the save). */
static int hold_answers;

static void call(msr_coord_t *co, tcall_t *c, msr_rpc_method_t m, const ProtobufCMessage *req)
{
    if (hold_answers)
        msr_tcall_send(co, c, m, req);
    else
        msr_tcall_call(co, c, m, req);
}

/* ---- helpers for the job ---- */

static int job_max_restarts;
static msr_store_limits_t job_limits; /* zeros: the defaults */
/* The node timeout of make_coord's jobs. Ten minutes by default: longer
 * than any test here may run (their timeouts are at most 120 s), so a
 * node can never be lost because this process was slow between its calls
 * and a tick at the real time. The tests of a lost node set it short and
 * keep the other nodes beating with beat_until_changed(). */
#define LONG_NODE_TIMEOUT_MS 600000
static int64_t job_node_timeout_ms = LONG_NODE_TIMEOUT_MS;

static msr_coord_t *make_coord(int worker_num, int local, int max_restarts)
{
    job_max_restarts = max_restarts;
    msr_coord_config_t cfg = {
        .token = "t",
        .job_id = "job",
        .worker_num = worker_num,
        .local_worker_num = local,
        .max_restarts = max_restarts,
        .node_timeout_ms = job_node_timeout_ms,
        .join_timeout_ms = 60000,
        .store_limits = job_limits,
    };
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    return co;
}

static Msr__JoinRequest join_req(int worker_num, int local, int node_rank, int max_restarts)
{
    Msr__JoinRequest r = MSR__JOIN_REQUEST__INIT;
    r.protocol_version = MSR_PROTOCOL_VERSION;
    r.job_id = "job";
    r.host = "127.0.0.1";
    r.pid = 100;
    r.worker_num = worker_num;
    r.local_worker_num = local;
    r.node_rank = node_rank;
    r.max_restarts = max_restarts;
    r.free_port = 5000;
    return r;
}

/* Joins a node; returns its id (static storage per slot). */
static const char *join(msr_coord_t *co, int slot, int worker_num, int local, int node_rank)
{
    static char ids[16][64];
    tcall_t c = {0};
    Msr__JoinRequest r = join_req(worker_num, local, node_rank, job_max_restarts);
    r.pid = 100 + slot;
    call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_MSG(c.answered && c.code == 0, "join failed: %d %s", c.code, c.message);
    snprintf(ids[slot], sizeof ids[slot], "%s", ((Msr__JoinResponse *)c.resp)->node_id);
    msr_tcall_reset(&c);
    return ids[slot];
}

/* A heartbeat that answers at once (wait 0); returns the response. */
static Msr__HeartbeatResponse *beat(msr_coord_t *co, tcall_t *c, const char *id, int gen, int ready)
{
    Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
    r.node_id = (char *)id;
    r.generation = gen;
    r.ready_generation = ready;
    r.wait_ms = 0;
    call(co, c, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK_MSG(c->answered && c->code == 0, "heartbeat: %d %s", c->code, c->message);
    return (Msr__HeartbeatResponse *)c->resp;
}

/* Beats each of the nw nodes in live (generation gen, ready for it) about
 * every 50 ms and ticks, until the job's state is no longer `from` (another
 * node was lost), limit_ms at the most; returns the time the tick that
 * changed it was given. Each tick is given the time read before that
 * round's beats, so the live nodes' last calls are never older than it:
 * however slowly this process runs, only a silent node can be lost. */
static uint64_t beat_until_changed(msr_coord_t *co, const char *const *live, int nw, int gen,
                                   Msr__JobState from, int64_t limit_ms)
{
    uint64_t limit = msr_deadline_in_ms(limit_ms);
    tcall_t c = {0};
    for (;;) {
        msr_sleep_ms(50); /* paces the rounds; the deadline bounds them */
        uint64_t t = msr_now_ns();
        for (int i = 0; i < nw; i++)
            beat(co, &c, live[i], gen, gen);
        msr_coord_tick(co, t);
        Msr__JobState now = beat(co, &c, live[0], gen, gen)->state;
        msr_tcall_reset(&c);
        if (now != from)
            return t;
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "the job is still in state %d after %lld ms",
                      (int)from, (long long)limit_ms);
    }
}

static void report_lost(msr_coord_t *co, const char *id, int gen, int rank, int code, int sig,
                        int after_peer_lost)
{
    Msr__Failure f = MSR__FAILURE__INIT;
    f.after_peer_lost = after_peer_lost;
    char *tail[] = {"boom"};
    f.rank = rank;
    f.exit_code = code;
    f.signal = sig;
    f.n_stderr_tail = 1;
    f.stderr_tail = tail;
    f.reason = "exited";
    Msr__ReportRequest r = MSR__REPORT_REQUEST__INIT;
    r.node_id = (char *)id;
    r.generation = gen;
    r.exit = &f;
    tcall_t c = {0};
    call(co, &c, MSR_RPC_REPORT, &r.base);
    MSR_CHECK(c.answered && c.code == 0);
    msr_tcall_reset(&c);
}

static void report(msr_coord_t *co, const char *id, int gen, int rank, int code, int sig)
{
    report_lost(co, id, gen, rank, code, sig, 0);
}

/* ---- membership ---- */

static void test_join_validation(void)
{
    msr_coord_t *co = make_coord(4, 2, 0);
    tcall_t c = {0};
    Msr__JoinRequest r = join_req(4, 2, -1, 0);
    r.protocol_version = 99;
    call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_FAILED_PRECONDITION);
    MSR_CHECK(strstr(c.message, "protocol version 99") != NULL);

    r = join_req(8, 2, -1, 0);
    call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_FAILED_PRECONDITION);
    MSR_CHECK_MSG(strstr(c.message, "worker_num is 8 but the job's is 4") != NULL, "%s", c.message);

    r = join_req(4, 2, -1, 0);
    r.job_id = "other";
    call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_FAILED_PRECONDITION);
    MSR_CHECK(strstr(c.message, "'other'") != NULL);

    r = join_req(4, 2, 2, 0);
    call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT); /* node rank out of range */

    /* -1 alone is "assign by arrival" (joined below); any other negative
     * rank is refused, not taken for it */
    static const int negative[] = {-2, -5, INT_MIN};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(negative); i++) {
        r = join_req(4, 2, negative[i], 0);
        call(co, &c, MSR_RPC_JOIN, &r.base);
        MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
        MSR_CHECK_MSG(strstr(c.message, "is not a node rank") != NULL, "%s", c.message);
    }

    join(co, 0, 4, 2, 1);
    r = join_req(4, 2, 1, 0);
    call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_FAILED_PRECONDITION);
    MSR_CHECK(strstr(c.message, "node rank 1 is already taken") != NULL);

    join(co, 1, 4, 2, -1);
    r = join_req(4, 2, -1, 0);
    call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_RESOURCE_EXHAUSTED); /* full */
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static void test_formation_and_ranks(void)
{
    msr_coord_t *co = make_coord(6, 2, 0);
    const char *a = join(co, 0, 6, 2, -1);
    const char *b = join(co, 1, 6, 2, 0); /* wants rank 0 */
    tcall_t c = {0};
    Msr__HeartbeatResponse *r = beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_WAITING);
    MSR_CHECK_EQ(r->joined_nodes, 1);
    MSR_CHECK_EQ(r->expected_nodes, 3);
    MSR_CHECK(r->n_missing >= 1);
    r = beat(co, &c, b, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_WAITING);
    const char *d = join(co, 2, 6, 2, -1);
    r = beat(co, &c, d, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK(r->assignment != NULL);
    /* arrival order fills the ranks the explicit node did not take */
    MSR_CHECK_EQ(r->assignment->node_rank, 2);
    MSR_CHECK_EQ(r->assignment->rank_offset, 4);
    MSR_CHECK_EQ(r->assignment->world_size, 6);
    r = beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(r->assignment->node_rank, 1);
    r = beat(co, &c, b, 0, 0);
    MSR_CHECK_EQ(r->assignment->node_rank, 0);
    MSR_CHECK_EQ(r->assignment->rank_offset, 0);
    MSR_CHECK_STR(r->assignment->master_addr, "127.0.0.1");
    MSR_CHECK_EQ(r->assignment->master_port, 5000);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static void test_heartbeat_long_poll(void)
{
    msr_coord_t *co = make_coord(2, 1, 0);
    const char *a = join(co, 0, 2, 1, -1);
    const char *b = join(co, 1, 2, 1, -1);
    tcall_t held = {0}, c = {0};
    Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
    r.node_id = (char *)a;
    r.generation = 0;
    r.known_state = MSR__JOB_STATE__JOB_WAITING;
    r.ready_generation = 0;
    r.wait_ms = 5000;
    call(co, &held, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK(!held.answered); /* nothing changed: held */
    beat(co, &c, b, 0, 0);     /* the job forms: the held beat is answered */
    MSR_CHECK(held.answered);
    MSR_CHECK_EQ(((Msr__HeartbeatResponse *)held.resp)->state, MSR__JOB_STATE__JOB_RUNNING);
    /* a held beat times out into a normal answer */
    r.known_state = MSR__JOB_STATE__JOB_RUNNING;
    r.wait_ms = 50;
    call(co, &held, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK(!held.answered);
    msr_sleep_ms(60);
    msr_coord_tick(co, msr_now_ns());
    MSR_CHECK(held.answered && held.code == 0);
    /* a cancelled beat is forgotten */
    call(co, &held, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK_MSG(!held.answered, "answered at once: %d %s", held.code, held.message);
    msr_coord_cancel(co, &held);
    msr_coord_tick(co, msr_now_ns() + 100000000ull);
    MSR_CHECK(!held.answered);
    msr_tcall_reset(&held);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static void test_failure_restart_and_done(void)
{
    msr_coord_t *co = make_coord(2, 1, 1);
    const char *a = join(co, 0, 2, 1, -1);
    const char *b = join(co, 1, 2, 1, -1);
    tcall_t c = {0};
    beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(beat(co, &c, b, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    report(co, a, 0, 0, 3, 0); /* rank 0 fails: one restart left */
    Msr__HeartbeatResponse *r = beat(co, &c, b, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RESTARTING);
    MSR_CHECK_EQ(r->generation, 1);
    MSR_CHECK_EQ(r->restart_count, 1);
    MSR_CHECK(r->failure != NULL && r->failure->exit_code == 3 && r->failure->rank == 0);
    MSR_CHECK(r->failure->n_stderr_tail == 1);
    MSR_CHECK_STR(r->failure->stderr_tail[0], "boom");
    /* a late report from the old generation changes nothing */
    report(co, b, 0, 1, 9, 0);
    MSR_CHECK_EQ(beat(co, &c, b, 0, 0)->generation, 1);
    /* both stop their workers and are ready for generation 1 */
    beat(co, &c, a, 1, 1);
    MSR_CHECK_EQ(beat(co, &c, b, 1, 1)->state, MSR__JOB_STATE__JOB_RUNNING);
    report(co, a, 1, 0, 0, 0);
    MSR_CHECK_EQ(beat(co, &c, a, 1, 1)->state, MSR__JOB_STATE__JOB_RUNNING);
    report(co, b, 1, 1, 0, 0);
    MSR_CHECK_EQ(beat(co, &c, a, 1, 1)->state, MSR__JOB_STATE__JOB_DONE);
    MSR_CHECK(!msr_coord_finished(co));
    Msr__LeaveRequest lv = MSR__LEAVE_REQUEST__INIT;
    lv.node_id = (char *)a;
    call(co, &c, MSR_RPC_LEAVE, &lv.base);
    lv.node_id = (char *)b;
    call(co, &c, MSR_RPC_LEAVE, &lv.base);
    MSR_CHECK(msr_coord_finished(co));
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static Msr__StatusResponse *status(msr_coord_t *co, tcall_t *c);

/* A failure that followed a lost peer ends the generation, and the failure
 * the peer loss followed, reported after it, becomes the root cause; a later
 * one of either kind changes nothing, nor does one after a real cause. */
static void test_root_cause_after_peer_lost(void)
{
    msr_coord_t *co = make_coord(2, 1, 2);
    const char *a = join(co, 0, 2, 1, -1);
    const char *b = join(co, 1, 2, 1, -1);
    tcall_t c = {0};
    beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(beat(co, &c, b, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    report_lost(co, a, 0, 0, 1, 0, 1); /* rank 0 saw rank 1 lost, exited 1 */
    Msr__HeartbeatResponse *r = beat(co, &c, b, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RESTARTING);
    MSR_CHECK(r->failure && r->failure->rank == 0 && r->failure->after_peer_lost);
    MSR_CHECK(strstr(r->message, "after losing a communication peer") != NULL);
    report(co, b, 0, 1, 0, 9); /* rank 1's SIGKILL, reported later */
    r = beat(co, &c, b, 0, 0);
    MSR_CHECK_EQ(r->generation, 1);
    MSR_CHECK_EQ(r->restart_count, 1);
    MSR_CHECK(r->failure && r->failure->rank == 1 && r->failure->signal == 9 &&
              !r->failure->after_peer_lost);
    MSR_CHECK(strstr(r->message, "restart 1 of 2 after rank 1") != NULL);
    report_lost(co, a, 0, 0, 1, 0, 1); /* neither kind changes it now */
    report(co, b, 0, 1, 5, 0);
    Msr__StatusResponse *s = status(co, &c);
    MSR_CHECK_EQ(s->n_failures, 1);
    MSR_CHECK(s->failures[0]->rank == 1 && s->failures[0]->signal == 9);
    /* generation 1: a real cause first, a peer's exit after it */
    beat(co, &c, a, 1, 1);
    MSR_CHECK_EQ(beat(co, &c, b, 1, 1)->state, MSR__JOB_STATE__JOB_RUNNING);
    report(co, a, 1, 0, 3, 0);
    report_lost(co, b, 1, 1, 1, 0, 1);
    report(co, b, 1, 1, 4, 0);
    s = status(co, &c);
    MSR_CHECK_EQ(s->n_failures, 2);
    MSR_CHECK(s->failures[1]->rank == 0 && s->failures[1]->exit_code == 3);
    /* generation 2, no restarts left: the job fails, and its message names
     * the root cause that comes in late */
    beat(co, &c, a, 2, 2);
    MSR_CHECK_EQ(beat(co, &c, b, 2, 2)->state, MSR__JOB_STATE__JOB_RUNNING);
    report_lost(co, b, 2, 1, 1, 0, 1);
    MSR_CHECK_EQ(beat(co, &c, a, 2, 2)->state, MSR__JOB_STATE__JOB_FAILED);
    report(co, a, 2, 0, 7, 0);
    r = beat(co, &c, a, 2, 2);
    MSR_CHECK(r->failure && r->failure->rank == 0 && r->failure->exit_code == 7);
    MSR_CHECK(strstr(r->message, "rank 0 on node 0") && strstr(r->message, "no restarts left"));
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static void test_restarts_exhausted(void)
{
    msr_coord_t *co = make_coord(1, 1, 0);
    const char *a = join(co, 0, 1, 1, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    report(co, a, 0, 0, 0, 9); /* killed by SIGKILL */
    Msr__HeartbeatResponse *r = beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_FAILED);
    MSR_CHECK_EQ(r->failure->signal, 9);
    MSR_CHECK(strstr(r->message, "SIGKILL") != NULL);
    /* no new node joins an ended job */
    Msr__JoinRequest j = join_req(1, 1, -1, 0);
    call(co, &c, MSR_RPC_JOIN, &j.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_FAILED_PRECONDITION);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static void test_node_lost(void)
{
    job_node_timeout_ms = 300;
    msr_coord_t *co = make_coord(2, 1, 0);
    job_node_timeout_ms = LONG_NODE_TIMEOUT_MS;
    const char *a = join(co, 0, 2, 1, -1);
    const char *b = join(co, 1, 2, 1, -1);
    tcall_t c = {0};
    beat(co, &c, a, 0, 0);
    uint64_t silent = msr_now_ns(); /* b's last call is after this */
    beat(co, &c, b, 0, 0);
    /* b goes silent; a keeps beating until b is lost, not before the node
     * timeout (300 ms) and within 5 s (the timeout is checked every 75 ms) */
    const char *live[] = {a};
    uint64_t lost = beat_until_changed(co, live, 1, 0, MSR__JOB_STATE__JOB_RUNNING, 5000);
    MSR_CHECK_MSG(lost - silent >= 300 * 1000000ull, "b was lost after %.0f ms of silence",
                  (double)(lost - silent) / 1e6);
    Msr__HeartbeatResponse *r = beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_FAILED);
    MSR_CHECK(r->failure && r->failure->rank == -1);
    MSR_CHECK(strstr(r->message, "lost") != NULL);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* ---- the store ---- */

/* A running job of one node with 8 workers (barriers and allgathers may
 * have up to 8 participants). */
static msr_coord_t *running_coord(void)
{
    msr_coord_t *co = make_coord(8, 8, 0);
    const char *a = join(co, 0, 8, 8, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    msr_tcall_reset(&c);
    return co;
}

static void set_kv(msr_coord_t *co, const char *k, const char *v)
{
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = (char *)k;
    s.value.data = (uint8_t *)v;
    s.value.len = strlen(v);
    tcall_t c = {0};
    call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK(c.answered && c.code == 0);
    msr_tcall_reset(&c);
}

static void test_store_get_wait(void)
{
    msr_coord_t *co = running_coord();
    tcall_t c = {0}, w1 = {0}, w2 = {0};
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "k";
    call(co, &c, MSR_RPC_GET, &g.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_NOT_FOUND);
    g.wait_ms = 10000;
    call(co, &w1, MSR_RPC_GET, &g.base);
    call(co, &w2, MSR_RPC_GET, &g.base);
    MSR_CHECK(!w1.answered && !w2.answered);
    set_kv(co, "k", "hello");
    MSR_CHECK(w1.answered && w2.answered && w1.code == 0);
    Msr__GetResponse *r = (Msr__GetResponse *)w1.resp;
    MSR_CHECK_EQ(r->value.len, 5);
    MSR_CHECK(memcmp(r->value.data, "hello", 5) == 0);
    /* a wait that runs out answers DEADLINE_EXCEEDED with the key's name */
    g.key = "never";
    g.wait_ms = 30;
    call(co, &w1, MSR_RPC_GET, &g.base);
    msr_sleep_ms(40);
    msr_coord_tick(co, msr_now_ns());
    MSR_CHECK_EQ(w1.code, GRPC_STATUS_DEADLINE_EXCEEDED);
    MSR_CHECK(strstr(w1.message, "'never'") != NULL);
    /* the client's own deadline bounds the wait even with a long wait_ms */
    msr_tcall_reset(&w2);
    w2.method = MSR_RPC_GET;
    w2.deadline = msr_now_ns() + 250 * 1000000ull;
    g.wait_ms = 100000;
    msr_coord_call(co, &w2, MSR_RPC_GET, &g.base);
    MSR_CHECK(!w2.answered);
    msr_coord_tick(co, msr_now_ns() + 60 * 1000000ull);
    MSR_CHECK(w2.answered && w2.code == GRPC_STATUS_DEADLINE_EXCEEDED);
    msr_tcall_reset(&c);
    msr_tcall_reset(&w1);
    msr_tcall_reset(&w2);
    msr_coord_destroy(co);
}

static void test_store_add_cas_delete(void)
{
    msr_coord_t *co = running_coord();
    tcall_t c = {0};
    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    a.key = "ctr";
    for (int i = 1; i <= 100; i++) {
        a.delta = 2;
        call(co, &c, MSR_RPC_ADD, &a.base);
        MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, 2 * i);
    }
    a.delta = -250;
    call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, -50);
    set_kv(co, "text", "abc");
    a.key = "text";
    a.delta = 1;
    call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    set_kv(co, "big", "9223372036854775807");
    a.key = "big";
    call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_OUT_OF_RANGE);

    Msr__CompareSetRequest cs = MSR__COMPARE_SET_REQUEST__INIT;
    cs.key = "lock";
    cs.expect_absent = 1;
    cs.desired.data = (uint8_t *)"owner1";
    cs.desired.len = 6;
    call(co, &c, MSR_RPC_COMPARE_SET, &cs.base);
    MSR_CHECK(((Msr__CompareSetResponse *)c.resp)->swapped);
    cs.desired.data = (uint8_t *)"owner2";
    call(co, &c, MSR_RPC_COMPARE_SET, &cs.base);
    Msr__CompareSetResponse *r = (Msr__CompareSetResponse *)c.resp;
    MSR_CHECK(!r->swapped && r->present);
    MSR_CHECK(r->current.len == 6 && memcmp(r->current.data, "owner1", 6) == 0);
    cs.expect_absent = 0;
    cs.expected.data = (uint8_t *)"owner1";
    cs.expected.len = 6;
    call(co, &c, MSR_RPC_COMPARE_SET, &cs.base);
    MSR_CHECK(((Msr__CompareSetResponse *)c.resp)->swapped);
    cs.expected.data = (uint8_t *)"owner1"; /* stale expectation */
    call(co, &c, MSR_RPC_COMPARE_SET, &cs.base);
    MSR_CHECK(!((Msr__CompareSetResponse *)c.resp)->swapped);

    Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
    d.key = "lock";
    call(co, &c, MSR_RPC_DELETE, &d.base);
    MSR_CHECK(((Msr__DeleteResponse *)c.resp)->existed);
    call(co, &c, MSR_RPC_DELETE, &d.base);
    MSR_CHECK(!((Msr__DeleteResponse *)c.resp)->existed);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static void test_store_bad_keys_and_generation(void)
{
    msr_coord_t *co = running_coord();
    tcall_t c = {0};
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = "";
    call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    s.key = "a\nb";
    call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    char longkey[MSR_KEY_MAX + 2];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    s.key = longkey;
    call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    s.key = "ok";
    s.generation = 3; /* not the job's generation */
    call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_ABORTED);
    MSR_CHECK(strstr(c.message, "stale generation 3") != NULL);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static void test_store_reset_on_restart(void)
{
    msr_coord_t *co = make_coord(1, 1, 1);
    const char *a = join(co, 0, 1, 1, -1);
    tcall_t c = {0}, w = {0};
    beat(co, &c, a, 0, 0);
    set_kv(co, "x", "1");
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "y";
    g.wait_ms = 10000;
    call(co, &w, MSR_RPC_GET, &g.base);
    MSR_CHECK(!w.answered);
    report(co, a, 0, 0, 1, 0); /* restart: generation 1 */
    MSR_CHECK_EQ(w.code, GRPC_STATUS_ABORTED);
    beat(co, &c, a, 1, 1);
    g.generation = 1;
    g.key = "x";
    g.wait_ms = 0;
    call(co, &c, MSR_RPC_GET, &g.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_NOT_FOUND); /* the old keys are gone */
    msr_tcall_reset(&c);
    msr_tcall_reset(&w);
    msr_coord_destroy(co);
}

static void test_barrier(void)
{
    msr_coord_t *co = running_coord();
    tcall_t c[4] = {{0}};
    Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
    b.name = "b";
    b.count = 5;
    b.wait_ms = 10000;
    b.weight = 2; /* a proxy's call for two participants */
    call(co, &c[0], MSR_RPC_BARRIER, &b.base);
    b.weight = 1;
    call(co, &c[1], MSR_RPC_BARRIER, &b.base);
    b.count = 6; /* disagrees */
    call(co, &c[2], MSR_RPC_BARRIER, &b.base);
    MSR_CHECK_EQ(c[2].code, GRPC_STATUS_INVALID_ARGUMENT);
    b.count = 5;
    b.weight = 3; /* too many */
    call(co, &c[2], MSR_RPC_BARRIER, &b.base);
    MSR_CHECK_EQ(c[2].code, GRPC_STATUS_INVALID_ARGUMENT);
    MSR_CHECK(!c[0].answered && !c[1].answered);
    b.weight = 2;
    call(co, &c[3], MSR_RPC_BARRIER, &b.base);
    for (int i = 0; i < 4; i++)
        MSR_CHECK(i == 2 || (c[i].answered && c[i].code == 0));
    /* the same name starts a new barrier afterwards */
    b.count = 2;
    b.weight = 1;
    b.wait_ms = 20;
    call(co, &c[0], MSR_RPC_BARRIER, &b.base);
    msr_sleep_ms(30);
    msr_coord_tick(co, msr_now_ns());
    MSR_CHECK_EQ(c[0].code, GRPC_STATUS_DEADLINE_EXCEEDED);
    MSR_CHECK_MSG(strstr(c[0].message, "1 of 2 participants") != NULL, "%s", c[0].message);
    for (int i = 0; i < 4; i++)
        msr_tcall_reset(&c[i]);
    msr_coord_destroy(co);
}

static void test_allgather(void)
{
    msr_coord_t *co = running_coord();
    enum { N = 5 };
    tcall_t c[N] = {{0}};
    /* contributions arrive out of order and with different lengths */
    int order[N] = {3, 0, 4, 1, 2};
    for (int k = 0; k < N; k++) {
        int i = order[k];
        char data[16];
        memset(data, 'a' + i, (size_t)i + 1);
        Msr__Contribution e = MSR__CONTRIBUTION__INIT;
        Msr__Contribution *ep[1] = {&e};
        e.index = (uint32_t)i;
        e.data.data = (uint8_t *)data;
        e.data.len = (size_t)i + 1;
        Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
        r.name = "g";
        r.count = N;
        r.n_entries = 1;
        r.entries = ep;
        r.wait_ms = 10000;
        call(co, &c[k], MSR_RPC_ALLGATHER, &r.base);
        if (k < N - 1)
            MSR_CHECK(!c[k].answered);
    }
    for (int k = 0; k < N; k++) {
        MSR_CHECK(c[k].answered && c[k].code == 0);
        Msr__AllgatherResponse *r = (Msr__AllgatherResponse *)c[k].resp;
        MSR_CHECK_EQ(r->n_lengths, N);
        size_t off = 0;
        for (int i = 0; i < N; i++) {
            MSR_CHECK_EQ(r->lengths[i], i + 1);
            for (int j = 0; j <= i; j++)
                MSR_CHECK_EQ(r->data.data[off + (size_t)j], 'a' + i);
            off += (size_t)i + 1;
        }
        msr_tcall_reset(&c[k]);
    }
    /* duplicates and out-of-range indexes are refused, leaving no trace */
    Msr__Contribution e1 = MSR__CONTRIBUTION__INIT, e2 = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep[2] = {&e1, &e2};
    e1.index = 0;
    e2.index = 0;
    Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
    r.name = "h";
    r.count = 2;
    r.n_entries = 2;
    r.entries = ep;
    call(co, &c[0], MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_EQ(c[0].code, GRPC_STATUS_INVALID_ARGUMENT);
    e2.index = 7;
    call(co, &c[0], MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_EQ(c[0].code, GRPC_STATUS_INVALID_ARGUMENT);
    /* a proxy's call with both entries completes at once */
    e2.index = 1;
    call(co, &c[0], MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK(c[0].answered && c[0].code == 0);
    MSR_CHECK_EQ(((Msr__AllgatherResponse *)c[0].resp)->n_lengths, 2);
    msr_tcall_reset(&c[0]);
    msr_coord_destroy(co);
}

/* ---- the store's guards, each on its own (mutation tests, scripts/mutate.sh) ---- */

/* A job of one node that runs generation 1, after one restart. */
static msr_coord_t *restarted_coord(void)
{
    msr_coord_t *co = make_coord(1, 1, 1);
    const char *a = join(co, 0, 1, 1, -1);
    tcall_t c = {0};
    beat(co, &c, a, 0, 0);
    report(co, a, 0, 0, 1, 0);
    MSR_CHECK_EQ(beat(co, &c, a, 1, 1)->state, MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(((Msr__HeartbeatResponse *)c.resp)->generation, 1);
    msr_tcall_reset(&c);
    return co;
}

static void check_stale(const tcall_t *c, const char *what)
{
    MSR_CHECK_MSG(c->answered && c->code == GRPC_STATUS_ABORTED,
                  "%s of generation 0 at generation 1: answered %d, code %d", what, c->answered,
                  c->code);
    MSR_CHECK_MSG(strstr(c->message, "stale generation 0") != NULL, "%s: %s", what, c->message);
}

/* The value of key in generation 1, "" if absent. */
static void get1(msr_coord_t *co, const char *key, char *out, size_t len)
{
    tcall_t c = {0};
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = (char *)key;
    g.generation = 1;
    call(co, &c, MSR_RPC_GET, &g.base);
    out[0] = '\0';
    if (c.code == 0) {
        Msr__GetResponse *r = (Msr__GetResponse *)c.resp;
        MSR_CHECK(r->value.len < len);
        memcpy(out, r->value.data, r->value.len);
        out[r->value.len] = '\0';
    } else {
        MSR_CHECK_EQ(c.code, GRPC_STATUS_NOT_FOUND);
    }
    msr_tcall_reset(&c);
}

/* Every store call of a past generation (older than the job's, the usual
 * case: a process left over from before a restart) is refused and changes
 * nothing; not only set. */
static void test_store_stale_generation_every_call(void)
{
    msr_coord_t *co = restarted_coord();
    tcall_t c = {0};
    char got[64];
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = "k";
    s.value.data = (uint8_t *)"v1";
    s.value.len = 2;
    s.generation = 1;
    call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK(c.answered && c.code == 0);
    s.generation = 0;
    s.value.data = (uint8_t *)"v0";
    call(co, &c, MSR_RPC_SET, &s.base);
    check_stale(&c, "set");

    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "k";
    call(co, &c, MSR_RPC_GET, &g.base);
    check_stale(&c, "get");
    g.key = "absent";
    g.wait_ms = 10000; /* would wait, not be refused, without the check */
    call(co, &c, MSR_RPC_GET, &g.base);
    check_stale(&c, "waiting get");

    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    a.key = "ctr";
    a.delta = 5;
    call(co, &c, MSR_RPC_ADD, &a.base);
    check_stale(&c, "add");
    a.generation = 1;
    a.delta = 1;
    call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK(c.answered && c.code == 0);
    MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, 1); /* the stale add left no trace */

    Msr__CompareSetRequest cs = MSR__COMPARE_SET_REQUEST__INIT;
    cs.key = "k";
    cs.expected.data = (uint8_t *)"v1";
    cs.expected.len = 2;
    cs.desired.data = (uint8_t *)"v0";
    cs.desired.len = 2;
    call(co, &c, MSR_RPC_COMPARE_SET, &cs.base);
    check_stale(&c, "compare-set");

    Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
    d.key = "k";
    call(co, &c, MSR_RPC_DELETE, &d.base);
    check_stale(&c, "delete");
    get1(co, "k", got, sizeof got);
    MSR_CHECK_STR(got, "v1"); /* neither the set, compare-set nor delete applied */

    Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
    b.name = "b";
    b.count = 1;
    call(co, &c, MSR_RPC_BARRIER, &b.base);
    check_stale(&c, "barrier");

    uint8_t byte = 'x';
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep[1] = {&e};
    e.data.data = &byte;
    e.data.len = 1;
    Msr__AllgatherRequest ag = MSR__ALLGATHER_REQUEST__INIT;
    ag.name = "g";
    ag.count = 1;
    ag.n_entries = 1;
    ag.entries = ep;
    call(co, &c, MSR_RPC_ALLGATHER, &ag.base);
    check_stale(&c, "allgather");
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static int cas(msr_coord_t *co, const char *key, const char *expected, const char *desired,
               char *current, size_t len)
{
    tcall_t c = {0};
    Msr__CompareSetRequest cs = MSR__COMPARE_SET_REQUEST__INIT;
    cs.key = (char *)key;
    cs.expected.data = (uint8_t *)expected;
    cs.expected.len = strlen(expected);
    cs.desired.data = (uint8_t *)desired;
    cs.desired.len = strlen(desired);
    call(co, &c, MSR_RPC_COMPARE_SET, &cs.base);
    MSR_CHECK(c.answered && c.code == 0);
    Msr__CompareSetResponse *r = (Msr__CompareSetResponse *)c.resp;
    current[0] = '\0';
    if (r->present) {
        MSR_CHECK(r->current.len < len);
        if (r->current.len) /* an empty value may come as NULL */
            memcpy(current, r->current.data, r->current.len);
        current[r->current.len] = '\0';
    }
    int swapped = r->swapped ? 1 : r->present ? 0 : -1; /* -1: absent */
    msr_tcall_reset(&c);
    return swapped;
}

/* compare-set swaps only on an exact match: not a prefix, not a longer
 * value, and an empty expectation matches an empty value, not an absent
 * key. */
static void test_store_compare_set_exact(void)
{
    msr_coord_t *co = running_coord();
    char cur[64];
    set_kv(co, "k", "owner1");
    MSR_CHECK_EQ(cas(co, "k", "owner", "x", cur, sizeof cur), 0);
    MSR_CHECK_STR(cur, "owner1");
    MSR_CHECK_EQ(cas(co, "k", "o", "x", cur, sizeof cur), 0);
    MSR_CHECK_EQ(cas(co, "k", "", "x", cur, sizeof cur), 0);
    MSR_CHECK_EQ(cas(co, "k", "owner12", "x", cur, sizeof cur), 0);
    MSR_CHECK_EQ(cas(co, "k", "owner2", "x", cur, sizeof cur), 0);
    MSR_CHECK_STR(cur, "owner1");
    MSR_CHECK_EQ(cas(co, "k", "owner1", "owner2", cur, sizeof cur), 1);
    MSR_CHECK_STR(cur, "owner2");
    /* an empty expectation is not "absent" */
    MSR_CHECK_EQ(cas(co, "none", "", "x", cur, sizeof cur), -1);
    tcall_t c = {0};
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "none";
    call(co, &c, MSR_RPC_GET, &g.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_NOT_FOUND);
    /* an empty value matches an empty expectation only */
    set_kv(co, "e", "");
    MSR_CHECK_EQ(cas(co, "e", "x", "y", cur, sizeof cur), 0);
    MSR_CHECK_STR(cur, "");
    MSR_CHECK_EQ(cas(co, "e", "", "y", cur, sizeof cur), 1);
    MSR_CHECK_STR(cur, "y");
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* add reaches the counter's limits exactly and refuses one step past them,
 * leaving the counter as it was. */
static void test_store_add_limits(void)
{
    msr_coord_t *co = running_coord();
    tcall_t c = {0};
    char got[64];
    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    set_kv(co, "hi", "9223372036854775806");
    a.key = "hi";
    a.delta = 1;
    call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK(c.answered && c.code == 0);
    MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, INT64_MAX);
    call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_OUT_OF_RANGE);
    set_kv(co, "lo", "-9223372036854775807");
    a.key = "lo";
    a.delta = -1;
    call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK(c.answered && c.code == 0);
    MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, INT64_MIN);
    call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_OUT_OF_RANGE);
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "lo";
    call(co, &c, MSR_RPC_GET, &g.base);
    MSR_CHECK(c.code == 0);
    Msr__GetResponse *r = (Msr__GetResponse *)c.resp;
    snprintf(got, sizeof got, "%.*s", (int)r->value.len, (const char *)r->value.data);
    MSR_CHECK_STR(got, "-9223372036854775808");
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* A barrier and an allgather half-reached when a generation ends are
 * forgotten: the next generation's of the same name start from nothing and
 * are not released early by the old arrivals. */
static void test_barrier_allgather_reset_on_restart(void)
{
    /* two ranks on one node, so that counts of 2 are the job's own */
    msr_coord_t *co = make_coord(2, 2, 1);
    const char *a = join(co, 0, 2, 2, -1);
    tcall_t c = {0}, b0 = {0}, g0 = {0}, b1 = {0}, g1 = {0};
    beat(co, &c, a, 0, 0);
    Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
    b.name = "b";
    b.count = 2;
    b.wait_ms = 10000;
    call(co, &b0, MSR_RPC_BARRIER, &b.base);
    uint8_t old = 'o', neu[2] = {'n', 'm'};
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep[1] = {&e};
    e.index = 0;
    e.data.data = &old;
    e.data.len = 1;
    Msr__AllgatherRequest ag = MSR__ALLGATHER_REQUEST__INIT;
    ag.name = "g";
    ag.count = 2;
    ag.n_entries = 1;
    ag.entries = ep;
    ag.wait_ms = 10000;
    call(co, &g0, MSR_RPC_ALLGATHER, &ag.base);
    MSR_CHECK(!b0.answered && !g0.answered);
    report(co, a, 0, 0, 1, 0); /* restart: generation 1 */
    MSR_CHECK_EQ(b0.code, GRPC_STATUS_ABORTED);
    MSR_CHECK_EQ(g0.code, GRPC_STATUS_ABORTED);
    beat(co, &c, a, 1, 1);
    b.generation = 1;
    call(co, &b1, MSR_RPC_BARRIER, &b.base);
    MSR_CHECK_MSG(!b1.answered, "the next generation's barrier was released by an old arrival");
    ag.generation = 1;
    e.index = 1;
    e.data.data = &neu[1];
    call(co, &g1, MSR_RPC_ALLGATHER, &ag.base);
    MSR_CHECK_MSG(!g1.answered, "the next generation's allgather completed with an old entry");
    /* the second participants complete both, with this generation's data */
    call(co, &c, MSR_RPC_BARRIER, &b.base);
    MSR_CHECK(c.answered && c.code == 0 && b1.answered && b1.code == 0);
    e.index = 0;
    e.data.data = &neu[0];
    call(co, &c, MSR_RPC_ALLGATHER, &ag.base);
    MSR_CHECK(c.answered && c.code == 0 && g1.answered && g1.code == 0);
    Msr__AllgatherResponse *r = (Msr__AllgatherResponse *)g1.resp;
    MSR_CHECK(r->data.len == 2 && memcmp(r->data.data, "nm", 2) == 0);
    msr_tcall_reset(&c);
    msr_tcall_reset(&b0);
    msr_tcall_reset(&g0);
    msr_tcall_reset(&b1);
    msr_tcall_reset(&g1);
    msr_coord_destroy(co);
}

static void test_persist_and_resume(void)
{
    char dir[] = "/tmp/msrun-coord-test-XXXXXX";
    MSR_CHECK(mkdtemp(dir) != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/state", dir);
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = "job",
                              .worker_num = 2,
                              .local_worker_num = 1,
                              .max_restarts = 3,
                              .node_timeout_ms = 5000,
                              .join_timeout_ms = 60000,
                              .state_file = path};
    job_max_restarts = 3;
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    char a[64], b[64];
    snprintf(a, sizeof a, "%s", join(co, 0, 2, 1, -1));
    snprintf(b, sizeof b, "%s", join(co, 1, 2, 1, -1));
    tcall_t c = {0};
    beat(co, &c, a, 0, 0);
    report(co, a, 0, 0, 1, 0); /* not running yet: ignored */
    beat(co, &c, b, 0, 0);
    report(co, a, 0, 0, 1, 0); /* a failure: restart 1 of 3, generation 1 */
    beat(co, &c, a, 1, 1);
    MSR_CHECK_EQ(beat(co, &c, b, 1, 1)->state, MSR__JOB_STATE__JOB_RUNNING);
    Msr__SetRequest sr = MSR__SET_REQUEST__INIT;
    sr.generation = 1;
    sr.key = "kept";
    sr.value.data = (uint8_t *)"value";
    sr.value.len = 5;
    call(co, &c, MSR_RPC_SET, &sr.base);
    MSR_CHECK_EQ(c.code, 0);
    report(co, a, 1, 0, 0, 0); /* rank 0 done */
    msr_coord_tick(co, msr_now_ns() + 1000000000ull);
    msr_tcall_reset(&c);
    msr_coord_destroy(co); /* the coordinator dies */

    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    Msr__HeartbeatResponse *r = beat(co, &c, b, 1, 1);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(r->generation, 1);
    MSR_CHECK_EQ(r->restart_count, 1);
    MSR_CHECK(r->assignment != NULL);
    int rank_b = r->assignment->node_rank;
    MSR_CHECK(r->failure != NULL && r->failure->exit_code == 1);
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.generation = 1;
    g.key = "kept";
    call(co, &c, MSR_RPC_GET, &g.base);
    MSR_CHECK_EQ(c.code, 0);
    MSR_CHECK(((Msr__GetResponse *)c.resp)->value.len == 5);
    report(co, b, 1, rank_b, 0, 0); /* the other rank: the job is done */
    MSR_CHECK_EQ(beat(co, &c, a, 1, 1)->state, MSR__JOB_STATE__JOB_DONE);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);

    /* a corrupt state file is refused, not half-read */
    FILE *f = fopen(path, "wb");
    MSR_CHECK(f != NULL);
    fputs("not a state file", f);
    fclose(f);
    MSR_CHECK_STATUS(msr_coord_create(&cfg, &msr_tcall_responder, &co), MSR_ERR_CORRUPT);
    unlink(path);
    rmdir(dir);
}

/* ---- durability: the state file's log, held answers, request ids ---- */

typedef struct tmpstate {
    char dir[64];
    char path[128];
} tmpstate_t;

static void tmpstate_make(tmpstate_t *t)
{
    snprintf(t->dir, sizeof t->dir, "/tmp/msrun-coord-test-XXXXXX");
    MSR_CHECK(mkdtemp(t->dir) != NULL);
    snprintf(t->path, sizeof t->path, "%s/state", t->dir);
}

static void tmpstate_remove(tmpstate_t *t)
{
    char p[200];
    unlink(t->path);
    snprintf(p, sizeof p, "%s.tmp", t->path);
    unlink(p);
    rmdir(t->dir);
}

static msr_coord_t *durable_coord(const char *path)
{
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = "job",
                              .worker_num = 1,
                              .local_worker_num = 1,
                              .max_restarts = 0,
                              .node_timeout_ms = 60000,
                              .join_timeout_ms = 60000,
                              .state_file = path};
    job_max_restarts = 0;
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    return co;
}

static int set_key(msr_coord_t *co, tcall_t *c, const char *key, const char *value)
{
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = (char *)key;
    s.value.data = (uint8_t *)value;
    s.value.len = strlen(value);
    call(co, c, MSR_RPC_SET, &s.base);
    return c->code;
}

/* The value of key ("" when absent). */
static const char *get_key(msr_coord_t *co, const char *key)
{
    static char out[256];
    tcall_t c = {0};
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = (char *)key;
    call(co, &c, MSR_RPC_GET, &g.base);
    MSR_CHECK(c.answered);
    out[0] = '\0';
    if (c.code == 0) {
        Msr__GetResponse *r = (Msr__GetResponse *)c.resp;
        snprintf(out, sizeof out, "%.*s", (int)r->value.len, (const char *)r->value.data);
    }
    msr_tcall_reset(&c);
    return out;
}

/* Bytes this process has written with write(2) and its kin so far. */
static long long bytes_written(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    char line[128];
    long long n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "wchar: %lld", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* The job's Status (the call's answer stays in c). */
static Msr__StatusResponse *status(msr_coord_t *co, tcall_t *c)
{
    Msr__StatusRequest r = MSR__STATUS_REQUEST__INIT;
    call(co, c, MSR_RPC_STATUS, &r.base);
    MSR_CHECK_MSG(c->answered && c->code == 0, "status: %d %s", c->code, c->message);
    return (Msr__StatusResponse *)c->resp;
}

/* The failure history holds each failed generation's root cause, the last
 * 16, oldest first, and a coordinator restarted on the state file (as
 * after a kill -9, or elected after a failover) has it all. */
static void test_failure_history(void)
{
    tmpstate_t t;
    tmpstate_make(&t);
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = "job",
                              .worker_num = 1,
                              .local_worker_num = 1,
                              .max_restarts = 30,
                              .node_timeout_ms = 60000,
                              .join_timeout_ms = 60000,
                              .state_file = t.path};
    job_max_restarts = 30;
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    char a[64];
    snprintf(a, sizeof a, "%s", join(co, 0, 1, 1, -1));
    tcall_t c = {0};
    const int fails = 18;
    for (int g = 0; g < fails; g++) {
        MSR_CHECK_EQ(beat(co, &c, a, g, g)->state, MSR__JOB_STATE__JOB_RUNNING);
        report(co, a, g, 0, 10 + g, 0);
        if (g == 0)
            report(co, a, 0, 0, 99, 0); /* a second failure of generation 0: not kept */
        msr_coord_tick(co, msr_now_ns());
    }
    Msr__StatusResponse *r = status(co, &c);
    MSR_CHECK_EQ(r->generation, fails);
    MSR_CHECK_EQ(r->n_failures, 16);
    for (size_t i = 0; i < r->n_failures; i++) {
        int g = fails - 16 + (int)i;
        MSR_CHECK_EQ(r->failures[i]->generation, g);
        MSR_CHECK_EQ(r->failures[i]->exit_code, 10 + g);
        MSR_CHECK_EQ(r->failures[i]->rank, 0);
        MSR_CHECK_EQ(r->failures[i]->n_stderr_tail, 0);
    }
    MSR_CHECK(r->failure != NULL && r->failure->n_stderr_tail == 1); /* the last keeps its tail */
    /* another coordinator on the same file, with no goodbye from this one */
    msr_coord_t *again = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &again));
    r = status(again, &c);
    MSR_CHECK_EQ(r->generation, fails);
    MSR_CHECK_EQ(r->restart_count, fails);
    MSR_CHECK_EQ(r->n_failures, 16);
    for (size_t i = 0; i < r->n_failures; i++) {
        MSR_CHECK_EQ(r->failures[i]->generation, fails - 16 + (int)i);
        MSR_CHECK_EQ(r->failures[i]->exit_code, 10 + fails - 16 + (int)i);
        MSR_CHECK_STR(r->failures[i]->reason, "exited");
    }
    /* one more failure, then a restart from the fresh snapshot and its log */
    MSR_CHECK_EQ(beat(again, &c, a, fails, fails)->state, MSR__JOB_STATE__JOB_RUNNING);
    report(again, a, fails, 0, 77, 0);
    msr_coord_tick(again, msr_now_ns());
    msr_tcall_reset(&c);
    msr_coord_destroy(again);
    msr_coord_destroy(co);
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    r = status(co, &c);
    MSR_CHECK_EQ(r->n_failures, 16);
    MSR_CHECK_EQ(r->failures[0]->generation, fails - 15);
    MSR_CHECK_EQ(r->failures[15]->generation, fails);
    MSR_CHECK_EQ(r->failures[15]->exit_code, 77);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    tmpstate_remove(&t);
}

/* A write is answered only once it is saved; writes that arrive together
 * share one save and are answered together. */
static void test_write_held_until_saved(void)
{
    tmpstate_t t;
    tmpstate_make(&t);
    msr_coord_t *co = durable_coord(t.path);
    hold_answers = 1;
    tcall_t c[3] = {{0}};
    set_key(co, &c[0], "a", "1");
    set_key(co, &c[1], "b", "2");
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "a";
    call(co, &c[2], MSR_RPC_GET, &g.base); /* it reads an unsaved write */
    MSR_CHECK(!c[0].answered && !c[1].answered && !c[2].answered);
    MSR_CHECK(msr_coord_next_deadline(co) <= msr_now_ns()); /* the loop saves at once */
    msr_coord_tick(co, msr_now_ns());
    for (int i = 0; i < 3; i++)
        MSR_CHECK_MSG(c[i].answered && c[i].code == 0, "call %d: %d %s", i, c[i].code,
                      c[i].message);
    struct stat sb;
    MSR_CHECK(stat(t.path, &sb) == 0);
    MSR_CHECK_EQ(sb.st_mode & 0777, 0600);
    /* a call cancelled while its answer waits is forgotten, its write kept */
    set_key(co, &c[0], "c", "3");
    MSR_CHECK(!c[0].answered);
    msr_coord_cancel(co, &c[0]);
    msr_coord_flush(co);
    MSR_CHECK(!c[0].answered);
    hold_answers = 0;
    for (int i = 0; i < 3; i++)
        msr_tcall_reset(&c[i]);
    /* a kill -9 now (no destroy, no flush) loses nothing answered */
    long before = file_size(t.path);
    MSR_CHECK(before > 0);
    msr_coord_t *again = durable_coord(t.path);
    MSR_CHECK(strcmp(get_key(again, "a"), "1") == 0);
    MSR_CHECK(strcmp(get_key(again, "b"), "2") == 0);
    MSR_CHECK(strcmp(get_key(again, "c"), "3") == 0);
    msr_coord_destroy(again);
    msr_coord_destroy(co);
    tmpstate_remove(&t);
}

/* A save that fails fails the writes it carried, with the reason; the next
 * save writes everything. */
static void test_save_failure_fails_writes(void)
{
    tmpstate_t t;
    tmpstate_make(&t);
    msr_coord_t *co = durable_coord(t.path);
    tcall_t c = {0};
    MSR_CHECK_EQ(set_key(co, &c, "small", "x"), 0);
    /* the file may not grow any more: the append fails with EFBIG */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    MSR_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = (rlim_t)file_size(t.path);
    MSR_CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    char big[200];
    memset(big, 'v', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    MSR_CHECK_EQ(set_key(co, &c, "big", big), GRPC_STATUS_INTERNAL);
    MSR_CHECK_MSG(strstr(c.message, "state file") && strstr(c.message, strerror(EFBIG)),
                  "message: %s", c.message);
    /* until a save succeeds, every answer says so (it could tell of an
     * unsaved write) */
    MSR_CHECK_EQ(set_key(co, &c, "other", "y"), GRPC_STATUS_INTERNAL);
    MSR_CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    msr_sleep_ms(120); /* the next attempt comes after a pause */
    msr_coord_tick(co, msr_now_ns());
    MSR_CHECK_EQ(set_key(co, &c, "after", "z"), 0);
    msr_tcall_reset(&c);
    msr_coord_t *again = durable_coord(t.path);
    MSR_CHECK(strcmp(get_key(again, "small"), "x") == 0);
    MSR_CHECK(strcmp(get_key(again, "after"), "z") == 0);
    /* the save after a failure rewrites the whole state (a snapshot), so
     * the file holds what the coordinator holds, the failed writes too */
    const char *keys[] = {"big", "other"};
    for (int i = 0; i < 2; i++) {
        char held[256];
        snprintf(held, sizeof held, "%s", get_key(co, keys[i]));
        MSR_CHECK_MSG(strcmp(get_key(again, keys[i]), held) == 0,
                      "'%s': '%s' in the file, '%s' held", keys[i], get_key(again, keys[i]), held);
    }
    msr_coord_destroy(again);
    msr_coord_destroy(co);
    tmpstate_remove(&t);
}

static int64_t add_req(msr_coord_t *co, const char *key, int64_t delta, uint64_t client,
                       uint64_t id)
{
    tcall_t c = {0};
    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    a.key = (char *)key;
    a.delta = delta;
    a.client_id = client;
    a.request_id = id;
    call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_MSG(c.answered && c.code == 0, "add: %d %s", c.code, c.message);
    int64_t v = ((Msr__AddResponse *)c.resp)->value;
    msr_tcall_reset(&c);
    return v;
}

/* A retried Add (same client and request id) is applied once, also after a
 * restart of the coordinator; without ids every Add counts. */
/* An append cut short (the file may grow by 10 bytes only) is cut back off
 * the file at once: no torn record is left for the next start to find. */
static void test_save_failure_cut_back(void)
{
    tmpstate_t t;
    tmpstate_make(&t);
    msr_coord_t *co = durable_coord(t.path);
    tcall_t c = {0};
    MSR_CHECK_EQ(set_key(co, &c, "small", "x"), 0);
    MSR_CHECK_EQ(set_key(co, &c, "log", "y"), 0); /* appended: the log is open */
    long before = file_size(t.path);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    MSR_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = (rlim_t)before + 10;
    MSR_CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    char big[200];
    memset(big, 'v', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    int code = set_key(co, &c, "big", big);
    long after = file_size(t.path);
    MSR_CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    MSR_CHECK_EQ(code, GRPC_STATUS_INTERNAL);
    MSR_CHECK_MSG(after == before, "%ld bytes after the failed save, %ld before", after, before);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    tmpstate_remove(&t);
}

static void test_request_ids(void)
{
    tmpstate_t t;
    tmpstate_make(&t);
    msr_coord_t *co = durable_coord(t.path);
    MSR_CHECK_EQ(add_req(co, "n", 5, 7, 1), 5);
    MSR_CHECK_EQ(add_req(co, "n", 5, 7, 1), 5); /* the retry: the first answer */
    MSR_CHECK_EQ(add_req(co, "n", 5, 7, 2), 10);
    MSR_CHECK_EQ(add_req(co, "n", 5, 8, 1), 15); /* another client's id 1 */
    MSR_CHECK_EQ(add_req(co, "n", 1, 0, 0), 16);
    MSR_CHECK_EQ(add_req(co, "n", 1, 0, 0), 17);
    /* an id used by another method is refused, not answered wrongly */
    tcall_t c = {0};
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = "n";
    s.client_id = 7;
    s.request_id = 2;
    call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    msr_tcall_reset(&c);
    /* the coordinator dies without a word and comes back */
    msr_coord_t *again = durable_coord(t.path);
    MSR_CHECK_EQ(add_req(again, "n", 5, 7, 2), 10);
    MSR_CHECK_EQ(add_req(again, "n", 5, 8, 1), 15);
    MSR_CHECK(strcmp(get_key(again, "n"), "17") == 0);
    MSR_CHECK_EQ(add_req(again, "n", 5, 7, 3), 22);
    msr_coord_destroy(again);
    msr_coord_destroy(co);
    tmpstate_remove(&t);
}

/* ---- the records persist.c hands etcd ---- */

/* A coordinator without a state file, for records applied by hand. */
static msr_coord_t *plain_coord(const char *job_id)
{
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = job_id,
                              .worker_num = 1,
                              .local_worker_num = 1,
                              .max_restarts = 0,
                              .node_timeout_ms = 60000,
                              .join_timeout_ms = 60000};
    job_max_restarts = 0;
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    return co;
}

/* ps packed in etcd's frame (length, CRC of the payload), as persist.c
 * frames it; malloc'd. */
static uint8_t *etcd_frame(const ProtobufCMessage *msg, size_t *len_p)
{
    size_t plen = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(8 + plen);
    MSR_CHECK(buf != NULL);
    protobuf_c_message_pack(msg, buf + 8);
    uint32_t crc = msr_crc32(0, buf + 8, plen);
    for (int i = 0; i < 4; i++) {
        buf[i] = (uint8_t)(plen >> (8 * i));
        buf[4 + i] = (uint8_t)(crc >> (8 * i));
    }
    *len_p = 8 + plen;
    return buf;
}

/* The records of etcd's store: the snapshot and the change that a
 * coordinator writes read back whole into another, with the answers it
 * remembers (a retry is answered from them), and a change of another job
 * refused. */
static void test_persist_records(void)
{
    msr_coord_t *a = plain_coord("job");
    join(a, 0, 1, 1, 0);
    MSR_CHECK_EQ(add_req(a, "n", 5, 7, 1), 5);
    size_t len = 0;
    uint8_t *rec = msr_coord_persist_snapshot_record(a, &len);
    MSR_CHECK(rec != NULL);
    msr_coord_t *b = plain_coord("job");
    MSR_CHECK_EQ(msr_coord_persist_apply(b, rec, len, 1), MSR_OK);
    MSR_CHECK(strcmp(get_key(b, "n"), "5") == 0);
    MSR_CHECK_EQ(add_req(b, "n", 5, 7, 1), 5); /* the retry: the saved answer */
    MSR_CHECK(strcmp(get_key(b, "n"), "5") == 0);
    /* a request of each method is taken; one past the last is not */
    Msr__PersistedState *ps = msr__persisted_state__unpack(NULL, len - 8, rec + 8);
    MSR_CHECK(ps != NULL && ps->n_requests == 1);
    for (uint32_t m = MSR_RPC_METHOD_COUNT - 1; ps != NULL && m <= MSR_RPC_METHOD_COUNT; m++) {
        ps->requests[0]->method = m;
        size_t flen = 0;
        uint8_t *f = etcd_frame(&ps->base, &flen);
        msr_coord_t *d = plain_coord("job");
        msr_status_t st = msr_coord_persist_apply(d, f, flen, 1);
        MSR_CHECK_MSG(m < MSR_RPC_METHOD_COUNT ? st == MSR_OK : st == MSR_ERR_CORRUPT,
                      "a saved request of method %u: %s", m, msr_status_str(st));
        msr_coord_destroy(d);
        free(f);
    }
    msr__persisted_state__free_unpacked(ps, NULL);
    msr_free(rec);
    /* another job's change is refused whole */
    msr_coord_t *other = plain_coord("other");
    tcall_t c = {0};
    Msr__JoinRequest j = join_req(1, 1, 0, 0);
    j.job_id = "other";
    call(other, &c, MSR_RPC_JOIN, &j.base);
    MSR_CHECK_MSG(c.answered && c.code == 0, "join: %d %s", c.code, c.message);
    msr_tcall_reset(&c);
    rec = msr_coord_persist_change_record(other, &len);
    MSR_CHECK(rec != NULL);
    MSR_CHECK_EQ(msr_coord_persist_apply(b, rec, len, 0), MSR_ERR_CORRUPT);
    msr_free(rec);
    msr_coord_destroy(other);
    msr_coord_destroy(b);
    msr_coord_destroy(a);
}

/* Saving appends what changed; the log is compacted into a new snapshot as
 * it grows; reading it back replays it. */
static void test_log_and_compaction(void)
{
    tmpstate_t t;
    tmpstate_make(&t);
    msr_coord_t *co = durable_coord(t.path);
    tcall_t c = {0};
    char big[4000];
    memset(big, 'b', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    for (int i = 0; i < 200; i++) {
        char k[32];
        snprintf(k, sizeof k, "big%d", i);
        MSR_CHECK_EQ(set_key(co, &c, k, big), 0);
    }
    long with_big = file_size(t.path);
    /* one small change costs a small record, not the 800 KB stored */
    long long w0 = bytes_written();
    MSR_CHECK_EQ(set_key(co, &c, "small", "1"), 0);
    long long wrote = bytes_written() - w0;
    long grew = file_size(t.path) - with_big;
    MSR_CHECK_MSG(grew > 0 && grew < 200, "one small Set appended %ld bytes", grew);
    MSR_CHECK_MSG(w0 < 0 || wrote < 1000, "one small Set wrote %lld bytes", wrote);
    /* 8 MB of changes to one key: the log is compacted into a new snapshot
     * once it passes 4 times the snapshot, so the file stays near 5 times
     * the state (without compaction it would reach 10 times) */
    for (int i = 0; i < 2000; i++) {
        snprintf(big, sizeof big, "%d", i);
        big[strlen(big)] = '-';
        MSR_CHECK_EQ(set_key(co, &c, "big0", big), 0);
    }
    long sz = file_size(t.path);
    MSR_CHECK_MSG(sz < 5 * with_big + with_big / 2, "state file of %ld bytes for %ld of state", sz,
                  with_big);
    MSR_CHECK_EQ(set_key(co, &c, "small", "19999"), 0);
    Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
    d.key = "big7";
    call(co, &c, MSR_RPC_DELETE, &d.base);
    MSR_CHECK_EQ(c.code, 0);
    msr_tcall_reset(&c);
    msr_coord_t *again = durable_coord(t.path);
    MSR_CHECK(strcmp(get_key(again, "small"), "19999") == 0);
    MSR_CHECK(strcmp(get_key(again, "big7"), "") == 0);
    MSR_CHECK_EQ(strlen(get_key(again, "big8")), 255);
    msr_coord_destroy(again);
    msr_coord_destroy(co);
    tmpstate_remove(&t);
}

/* The log is compacted into a new snapshot at the save after it reaches
 * MSR_LOG_COMPACT_MIN bytes (the bound for a small state), exactly. */
static void test_log_compaction_bound(void)
{
    tmpstate_t t;
    tmpstate_make(&t);
    msr_coord_t *co = durable_coord(t.path);
    tcall_t c = {0};
    MSR_CHECK_EQ(set_key(co, &c, "a", "1"), 0);
    long snap = file_size(t.path); /* the first save: a snapshot alone */
    enum { CHUNK = 40000 };
    static char value[3 * CHUNK];
    memset(value, 'v', sizeof value);
    value[CHUNK] = '\0';
    long before = file_size(t.path);
    MSR_CHECK_EQ(set_key(co, &c, "x", value), 0);
    long grow = file_size(t.path) - before; /* a Set of CHUNK bytes */
    long rest = (long)MSR_LOG_COMPACT_MIN - (file_size(t.path) - snap);
    while (rest > 2 * CHUNK) {
        MSR_CHECK_EQ(set_key(co, &c, "x", value), 0);
        rest = (long)MSR_LOG_COMPACT_MIN - (file_size(t.path) - snap);
    }
    /* the last Set's length brings the log to the bound exactly (the
     * lengths' varints are as long as for CHUNK) */
    value[CHUNK] = 'v';
    value[CHUNK + rest - grow] = '\0';
    MSR_CHECK_EQ(set_key(co, &c, "x", value), 0);
    MSR_CHECK_EQ(file_size(t.path) - snap, (long)MSR_LOG_COMPACT_MIN);
    MSR_CHECK_EQ(set_key(co, &c, "y", "1"), 0);
    MSR_CHECK_MSG(file_size(t.path) < 4 * CHUNK, "the log of %ld bytes is not compacted",
                  file_size(t.path));
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    msr_coord_t *again = durable_coord(t.path);
    MSR_CHECK_EQ(strlen(get_key(again, "y")), 1);
    msr_coord_destroy(again);
    tmpstate_remove(&t);
}

/* With stdin closed the state file may get descriptor 0: it is still the
 * open log, appended to (the same file), not rewritten at each save. */
static void test_state_file_fd_zero(void)
{
    tmpstate_t t;
    tmpstate_make(&t);
    int saved = dup(0);
    MSR_CHECK(saved >= 0);
    close(0);
    msr_coord_t *co = durable_coord(t.path);
    tcall_t c = {0};
    MSR_CHECK_EQ(set_key(co, &c, "a", "1"), 0); /* the first save: a snapshot */
    struct stat first, next;
    MSR_CHECK(stat(t.path, &first) == 0);
    int zero = fcntl(0, F_GETFD) != -1; /* the state file's */
    MSR_CHECK_EQ(set_key(co, &c, "b", "2"), 0);
    MSR_CHECK(stat(t.path, &next) == 0);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    MSR_CHECK(dup2(saved, 0) == 0);
    close(saved);
    MSR_CHECK(zero);
    MSR_CHECK_MSG(next.st_ino == first.st_ino && next.st_size > first.st_size,
                  "the save rewrote the file (inode %lu to %lu)", (unsigned long)first.st_ino,
                  (unsigned long)next.st_ino);
    tmpstate_remove(&t);
}

/* A save cut short (the tail of the file torn or damaged) is cut off at
 * recovery: what came before is kept. */
static void test_torn_tail(void)
{
    tmpstate_t t;
    tmpstate_make(&t);
    msr_coord_t *co = durable_coord(t.path);
    tcall_t c = {0};
    MSR_CHECK_EQ(set_key(co, &c, "one", "1"), 0);
    long good = file_size(t.path);
    MSR_CHECK_EQ(set_key(co, &c, "two", "2"), 0);
    long full = file_size(t.path);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    /* the last record torn in the middle */
    MSR_CHECK(truncate(t.path, full - 3) == 0);
    co = durable_coord(t.path);
    MSR_CHECK(strcmp(get_key(co, "one"), "1") == 0);
    MSR_CHECK(strcmp(get_key(co, "two"), "") == 0);
    MSR_CHECK_EQ(set_key(co, &c, "three", "3"), 0);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    /* a damaged byte in the last record, and garbage after it */
    long len = file_size(t.path);
    int fd = open(t.path, O_RDWR);
    MSR_CHECK(fd >= 0);
    char x;
    MSR_CHECK(pread(fd, &x, 1, len - 1) == 1);
    x ^= 0x40;
    MSR_CHECK(pwrite(fd, &x, 1, len - 1) == 1);
    MSR_CHECK(pwrite(fd, "\xff\xff\xff\x7f garbage", 12, len) == 12);
    close(fd);
    co = durable_coord(t.path);
    MSR_CHECK(strcmp(get_key(co, "one"), "1") == 0);
    MSR_CHECK(strcmp(get_key(co, "three"), "") == 0);
    msr_coord_destroy(co);
    (void)good;
    tmpstate_remove(&t);
}

/* The lines logged while a sink is set (log_lines_on), NUL-terminated. */
static char log_lines[8192];
static size_t log_used;

static void log_sink(void *arg, const char *line, size_t len)
{
    (void)arg;
    if (len > sizeof log_lines - 1 - log_used)
        len = sizeof log_lines - 1 - log_used;
    memcpy(log_lines + log_used, line, len);
    log_used += len;
    log_lines[log_used] = '\0';
}

/* A file of the format before sequence numbers ("MSRSTAT2": length and CRC
 * frames) whose last record is torn in its payload (its frame says 5
 * bytes, 2 follow): the changes before it are replayed, its 10 bytes cut
 * off (not taken for a record), and the cut not reported as failed. */
static void test_state_v2_torn_frame(void)
{
    tmpstate_t t;
    tmpstate_make(&t);
    msr_coord_t *a = plain_coord("job");
    join(a, 0, 1, 1, 0);
    size_t slen = 0, clen = 0;
    uint8_t *snap = msr_coord_persist_snapshot_record(a, &slen);
    MSR_CHECK(snap != NULL);
    Msr__PersistedKey k = MSR__PERSISTED_KEY__INIT, *kp = &k;
    k.key = "k";
    k.value.data = (uint8_t *)"v2";
    k.value.len = 2;
    Msr__PersistedChange ch = MSR__PERSISTED_CHANGE__INIT;
    ch.n_set = 1;
    ch.set = &kp;
    uint8_t *change = etcd_frame(&ch.base, &clen);
    FILE *f = fopen(t.path, "wb");
    MSR_CHECK(f != NULL);
    MSR_CHECK(fwrite("MSRSTAT2", 1, 8, f) == 8 && fwrite(snap, 1, slen, f) == slen &&
              fwrite(change, 1, clen, f) == clen &&
              fwrite("\x05\x00\x00\x00\x01\x02\x03\x04"
                     "ab",
                     1, 10, f) == 10);
    fclose(f);
    log_used = 0;
    log_lines[0] = '\0';
    msr_log_set_sink(log_sink, NULL);
    msr_coord_t *co = durable_coord(t.path);
    msr_log_set_sink(NULL, NULL);
    MSR_CHECK(strcmp(get_key(co, "k"), "v2") == 0);
    MSR_CHECK_MSG(strstr(log_lines, "cutting off its last 10 bytes") != NULL &&
                      strstr(log_lines, "cannot cut") == NULL,
                  "%s", log_lines);
    msr_coord_destroy(co);
    free(change);
    msr_free(snap);
    msr_coord_destroy(a);
    tmpstate_remove(&t);
}

/* Counts read from the state file are checked against the job: a file that
 * says the running generation has 1000 nodes of a 2-worker job is refused
 * (it used to be taken, and a report of rank 500 then wrote out of bounds). */
static void test_state_file_counts(void)
{
    tmpstate_t t;
    tmpstate_make(&t);
    const struct {
        int node_count, node_rank, generation;
        const char *what;
    } bad[] = {{1000, 0, 1, "node_count"}, {2, 7, 1, "node rank"}, {2, 0, -5, "generation"}};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(bad); i++) {
        Msr__PersistedNode n = MSR__PERSISTED_NODE__INIT;
        Msr__PersistedNode *np[1] = {&n};
        n.node_id = "aaaa";
        n.host = "127.0.0.1";
        n.local_worker_num = 1;
        n.wanted_rank = -1;
        n.rank = bad[i].node_rank;
        n.ready_generation = 1;
        n.alive = 1;
        Msr__PersistedState ps = MSR__PERSISTED_STATE__INIT;
        ps.version = 1;
        ps.job_id = "job";
        ps.worker_num = 2;
        ps.local_worker_num = 1;
        ps.max_restarts = 3;
        ps.state = MSR__JOB_STATE__JOB_RUNNING;
        ps.generation = bad[i].generation;
        ps.node_count = bad[i].node_count;
        ps.n_nodes = 1;
        ps.nodes = np;
        size_t len = protobuf_c_message_get_packed_size(&ps.base);
        uint8_t *buf = malloc(len);
        protobuf_c_message_pack(&ps.base, buf);
        FILE *f = fopen(t.path, "wb");
        MSR_CHECK(f != NULL && fwrite(buf, 1, len, f) == len);
        fclose(f);
        free(buf);
        msr_coord_config_t cfg = {.token = "t",
                                  .max_restarts = -1,
                                  .node_timeout_ms = 60000,
                                  .join_timeout_ms = 60000,
                                  .state_file = t.path};
        msr_coord_t *co = NULL;
        msr_status_t st = msr_coord_create(&cfg, &msr_tcall_responder, &co);
        if (st == MSR_OK) { /* what a report then does with it */
            report(co, "aaaa", 1, 500, 0, 0);
            msr_coord_destroy(co);
        }
        MSR_CHECK_MSG(st == MSR_ERR_CORRUPT, "a state file with a bad %s was taken: %s",
                      bad[i].what, msr_status_str(st));
    }
    tmpstate_remove(&t);
}

/* The state file is the coordinator's own: a symlink planted at its
 * temporary name is replaced, not followed; one planted at its name is
 * refused. */
static void test_state_file_symlinks(void)
{
    tmpstate_t t;
    tmpstate_make(&t);
    char tmp[200], victim[200];
    snprintf(tmp, sizeof tmp, "%s.tmp", t.path);
    snprintf(victim, sizeof victim, "%s/victim", t.dir);
    FILE *f = fopen(victim, "w");
    MSR_CHECK(f != NULL);
    fputs("keep", f);
    fclose(f);
    MSR_CHECK(symlink(victim, tmp) == 0);
    msr_coord_t *co = durable_coord(t.path);
    tcall_t c = {0};
    MSR_CHECK_EQ(set_key(co, &c, "k", "v"), 0);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    MSR_CHECK_EQ(file_size(victim), 4);
    struct stat sb;
    MSR_CHECK(lstat(t.path, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == 0600);
    MSR_CHECK(unlink(t.path) == 0);
    MSR_CHECK(symlink(victim, t.path) == 0);
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = "job",
                              .worker_num = 1,
                              .local_worker_num = 1,
                              .max_restarts = 0,
                              .state_file = t.path};
    MSR_CHECK(msr_coord_create(&cfg, &msr_tcall_responder, &co) != MSR_OK);
    MSR_CHECK_EQ(file_size(victim), 4);
    unlink(victim);
    tmpstate_remove(&t);
}

static void test_elastic(void)
{
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = "job",
                              .worker_num = 4,
                              .local_worker_num = 1,
                              .max_restarts = 2,
                              .min_nodes = 2,
                              .max_nodes = 4,
                              .last_call_ms = 50,
                              /* msrun's default: a live node is lost
                               * only if this process stalls that long
                               * between its calls and a tick (the loop
                               * below ticks at times read before the live
                               * nodes' beats); it also sets how often
                               * the coordinator looks (a quarter of it) */
                              .node_timeout_ms = 5000,
                              .join_timeout_ms = 60000};
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    tcall_t c = {0};
    char ids[4][64];
    for (int i = 0; i < 3; i++) {
        Msr__JoinRequest j = join_req(4, 1, -1, 2);
        j.min_nodes = 2;
        j.max_nodes = 4;
        j.pid = 200 + i;
        call(co, &c, MSR_RPC_JOIN, &j.base);
        MSR_CHECK_MSG(c.code == 0, "join: %s", c.message);
        snprintf(ids[i], sizeof ids[i], "%s", ((Msr__JoinResponse *)c.resp)->node_id);
        if (i == 1) {
            /* two nodes (MIN) ready: the job forms after the last call */
            beat(co, &c, ids[0], 0, 0);
            MSR_CHECK_EQ(beat(co, &c, ids[1], 0, 0)->state, MSR__JOB_STATE__JOB_WAITING);
            msr_sleep_ms(60);
            msr_coord_tick(co, msr_now_ns());
            Msr__HeartbeatResponse *r = beat(co, &c, ids[0], 0, 0);
            MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RUNNING);
            MSR_CHECK_EQ(r->assignment->world_size, 2);
            MSR_CHECK_EQ(r->assignment->node_count, 2);
        }
    }
    /* a fixed node rank is refused in an elastic job */
    Msr__JoinRequest j = join_req(4, 1, 1, 2);
    j.min_nodes = 2;
    j.max_nodes = 4;
    call(co, &c, MSR_RPC_JOIN, &j.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    /* the third node is taken in at the next generation, without a restart */
    msr_sleep_ms(60);
    msr_coord_tick(co, msr_now_ns());
    Msr__HeartbeatResponse *r = beat(co, &c, ids[0], 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RESTARTING);
    MSR_CHECK_EQ(r->generation, 1);
    MSR_CHECK_EQ(r->restart_count, 0);
    for (int i = 0; i < 3; i++)
        r = beat(co, &c, ids[i], 1, 1);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(r->assignment->world_size, 3);
    int ranks_seen = 0;
    for (int i = 0; i < 3; i++)
        ranks_seen |= 1 << beat(co, &c, ids[i], 1, 1)->assignment->node_rank;
    MSR_CHECK_EQ(ranks_seen, 7);
    /* node 1's connection breaks: lost after the short grace (1.5 s, the
     * coordinator's for a broken long poll), the job re-forms on the two
     * left, renumbered, one restart counted */
    const uint64_t grace_ns = 1500 * 1000000ull;
    tcall_t held = {0};
    Msr__HeartbeatRequest h = MSR__HEARTBEAT_REQUEST__INIT;
    h.node_id = ids[1];
    h.generation = 1;
    h.known_state = MSR__JOB_STATE__JOB_RUNNING;
    h.ready_generation = 1;
    h.wait_ms = 10000;
    call(co, &held, MSR_RPC_HEARTBEAT, &h.base);
    MSR_CHECK(!held.answered);
    uint64_t broke = msr_now_ns();
    msr_coord_cancel(co, &held);
    /* the others keep beating until it is lost: after the grace and the
     * coordinator's next look (1.25 s later at the most), 10 s at most */
    const char *live[] = {ids[0], ids[2]};
    uint64_t lost = beat_until_changed(co, live, 2, 1, MSR__JOB_STATE__JOB_RUNNING, 10000);
    MSR_CHECK_MSG(lost - broke >= grace_ns, "lost %.0f ms after its connection broke",
                  (double)(lost - broke) / 1e6);
    r = beat(co, &c, ids[0], 1, 1);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RESTARTING);
    MSR_CHECK_EQ(r->restart_count, 1);
    beat(co, &c, ids[0], 2, 2);
    r = beat(co, &c, ids[2], 2, 2);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(r->assignment->world_size, 2);
    int a0 = beat(co, &c, ids[0], 2, 2)->assignment->node_rank;
    int a2 = beat(co, &c, ids[2], 2, 2)->assignment->node_rank;
    MSR_CHECK((a0 == 0 && a2 == 1) || (a0 == 1 && a2 == 0));
    msr_tcall_reset(&c);
    msr_tcall_reset(&held);
    msr_coord_destroy(co);
}

/* ---- the store's limits and what waits leave behind ---- */

static int set_code(msr_coord_t *co, const char *k, size_t len, char *msg, size_t msglen)
{
    static uint8_t buf[4096];
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = (char *)k;
    s.value.data = buf;
    s.value.len = len;
    tcall_t c = {0};
    call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK(c.answered);
    snprintf(msg, msglen, "%s", c.message);
    int code = c.code;
    msr_tcall_reset(&c);
    return code;
}

static void test_store_limits(void)
{
    job_limits = (msr_store_limits_t){.value_max = 1000, .keys_max = 4, .bytes_max = 3000};
    msr_coord_t *co = running_coord();
    job_limits = (msr_store_limits_t){0, 0, 0};
    char msg[sizeof((tcall_t *)0)->message];
    /* one byte over the value size */
    MSR_CHECK_EQ(set_code(co, "a", 1001, msg, sizeof msg), GRPC_STATUS_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(msg, "--store_value_max") && strstr(msg, "1000"), "%s", msg);
    MSR_CHECK_EQ(set_code(co, "a", 1000, msg, sizeof msg), 0);
    MSR_CHECK_EQ(set_code(co, "b", 1000, msg, sizeof msg), 0);
    /* a third 1000-byte value passes the total (each key counts 64 more) */
    MSR_CHECK_EQ(set_code(co, "c", 1000, msg, sizeof msg), GRPC_STATUS_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(msg, "--store_bytes_max") != NULL, "%s", msg);
    /* a refused write changed nothing: a smaller one fits */
    MSR_CHECK_EQ(set_code(co, "c", 10, msg, sizeof msg), 0);
    /* overwriting with a value of the same size fits although the store is full */
    MSR_CHECK_EQ(set_code(co, "a", 1000, msg, sizeof msg), 0);
    MSR_CHECK_EQ(set_code(co, "d", 1, msg, sizeof msg), 0);
    MSR_CHECK_EQ(set_code(co, "e", 1, msg, sizeof msg), GRPC_STATUS_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(msg, "--store_keys_max") != NULL, "%s", msg);
    /* add counts like set */
    tcall_t c = {0};
    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    a.key = "e";
    a.delta = 1;
    call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    /* a delete makes room */
    Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
    d.key = "b";
    call(co, &c, MSR_RPC_DELETE, &d.base);
    MSR_CHECK(c.code == 0 && ((Msr__DeleteResponse *)c.resp)->existed);
    call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(c.code, 0);
    /* a waited-on name counts as a key while it is waited on */
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "f";
    g.wait_ms = 10000;
    call(co, &c, MSR_RPC_GET, &g.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    /* an allgather contribution over the value size */
    uint8_t big[1001] = {0};
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep[1] = {&e};
    e.data.data = big;
    e.data.len = sizeof big;
    Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
    r.name = "g";
    r.count = 1;
    r.n_entries = 1;
    r.entries = ep;
    call(co, &c, MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(c.message, "--store_value_max") != NULL, "%s", c.message);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* Counts beyond the job's ranks are refused before anything is reserved
 * (a 16M-entry allgather used to reserve 400 MB for an 18-byte request). */
static void test_store_counts_bounded(void)
{
    msr_coord_t *co = running_coord(); /* 8 ranks */
    tcall_t c = {0};
    Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
    b.name = "b";
    b.count = 9;
    b.wait_ms = 10000;
    call(co, &c, MSR_RPC_BARRIER, &b.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    MSR_CHECK_MSG(strstr(c.message, "count 9 is not in 1..8") != NULL, "%s", c.message);
    b.count = 100000000;
    call(co, &c, MSR_RPC_BARRIER, &b.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep[1] = {&e};
    Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
    r.name = "g";
    r.count = 1u << 24;
    r.n_entries = 1;
    r.entries = ep;
    call(co, &c, MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    MSR_CHECK_MSG(strstr(c.message, "the job's ranks") != NULL, "%s", c.message);
    r.count = 9;
    call(co, &c, MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    /* workers that reach a coordinator no node joined (another launcher
     * started them): the job's size is unknown, and an allgather's entry
     * table counts against the byte limit instead */
    job_limits = (msr_store_limits_t){.bytes_max = 1 << 20};
    co = make_coord(0, 0, -1);
    job_limits = (msr_store_limits_t){0, 0, 0};
    r.count = 1u << 24;
    call(co, &c, MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(c.message, "--store_bytes_max") != NULL, "%s", c.message);
    r.count = 2;
    r.wait_ms = 10000;
    call(co, &c, MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK(!c.answered);
    msr_coord_cancel(co, &c);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* A wait that expires or is cancelled takes back what it brought: its
 * barrier arrival, its allgather contributions, its get-wait record. A
 * participant that gives up and comes again counts once; before, its first
 * arrival stayed and the barrier released early, and its retried
 * contribution was refused as given twice. */
static void test_store_expired_waits_withdraw(void)
{
    job_limits = (msr_store_limits_t){.keys_max = 2};
    msr_coord_t *co = running_coord();
    job_limits = (msr_store_limits_t){0, 0, 0};
    tcall_t c[3] = {{0}};
    /* barrier of 2: the first arrival expires, comes again; not released
     * until the second participant is there */
    Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
    b.name = "b";
    b.count = 2;
    b.wait_ms = 20;
    call(co, &c[0], MSR_RPC_BARRIER, &b.base);
    msr_sleep_ms(30);
    msr_coord_tick(co, msr_now_ns());
    MSR_CHECK_EQ(c[0].code, GRPC_STATUS_DEADLINE_EXCEEDED);
    b.wait_ms = 10000;
    call(co, &c[0], MSR_RPC_BARRIER, &b.base);
    MSR_CHECK_MSG(!c[0].answered, "released with 1 of 2 participants: %d %s", c[0].code,
                  c[0].message);
    call(co, &c[1], MSR_RPC_BARRIER, &b.base);
    MSR_CHECK(c[0].answered && c[0].code == 0 && c[1].answered && c[1].code == 0);
    /* allgather of 2: index 0 expires and is given again */
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep[1] = {&e};
    e.data.data = (uint8_t *)"x";
    e.data.len = 1;
    Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
    r.name = "g";
    r.count = 2;
    r.n_entries = 1;
    r.entries = ep;
    r.wait_ms = 20;
    call(co, &c[0], MSR_RPC_ALLGATHER, &r.base);
    msr_sleep_ms(30);
    msr_coord_tick(co, msr_now_ns());
    MSR_CHECK_EQ(c[0].code, GRPC_STATUS_DEADLINE_EXCEEDED);
    r.wait_ms = 10000;
    call(co, &c[0], MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_MSG(!c[0].answered, "index 0 again: %d %s", c[0].code, c[0].message);
    /* a cancelled participant's contribution goes too */
    msr_coord_cancel(co, &c[0]);
    msr_tcall_reset(&c[0]);
    call(co, &c[0], MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_MSG(!c[0].answered, "index 0 after a cancel: %d %s", c[0].code, c[0].message);
    e.index = 1;
    e.data.data = (uint8_t *)"y";
    call(co, &c[1], MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK(c[0].answered && c[0].code == 0 && c[1].answered && c[1].code == 0);
    MSR_CHECK_EQ(((Msr__AllgatherResponse *)c[0].resp)->data.len, 2);
    MSR_CHECK(memcmp(((Msr__AllgatherResponse *)c[0].resp)->data.data, "xy", 2) == 0);
    /* expired and cancelled get-waits on many names: with a key limit of 2,
     * keys still fit afterwards */
    for (int i = 0; i < 10; i++) {
        char key[32];
        snprintf(key, sizeof key, "w%d", i);
        Msr__GetRequest g = MSR__GET_REQUEST__INIT;
        g.key = key;
        g.wait_ms = i % 2 ? 10000 : 5;
        call(co, &c[2], MSR_RPC_GET, &g.base);
        MSR_CHECK_MSG(!c[2].answered, "get-wait %d: %d %s", i, c[2].code, c[2].message);
        if (i % 2) {
            msr_coord_cancel(co, &c[2]);
        } else {
            msr_sleep_ms(10);
            msr_coord_tick(co, msr_now_ns());
            MSR_CHECK_EQ(c[2].code, GRPC_STATUS_DEADLINE_EXCEEDED);
        }
        msr_tcall_reset(&c[2]);
    }
    set_kv(co, "k1", "v");
    set_kv(co, "k2", "v");
    for (int i = 0; i < 3; i++)
        msr_tcall_reset(&c[i]);
    msr_coord_destroy(co);
}

/* Fail each allocation of a store workload in turn: every call is answered
 * (with an error or not) and the core stays usable. */
static void test_alloc_failures(void)
{
    for (long k = 0; k < 400; k++) {
        msr_coord_t *co = running_coord();
        msr_alloc_fail_at(k);
        tcall_t c[3] = {{0}};
        Msr__SetRequest s = MSR__SET_REQUEST__INIT;
        s.key = "k";
        s.value.data = (uint8_t *)"v";
        s.value.len = 1;
        call(co, &c[0], MSR_RPC_SET, &s.base);
        Msr__Contribution e = MSR__CONTRIBUTION__INIT;
        Msr__Contribution *ep[1] = {&e};
        Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
        r.name = "g";
        r.count = 1;
        r.n_entries = 1;
        r.entries = ep;
        call(co, &c[1], MSR_RPC_ALLGATHER, &r.base);
        Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
        b.name = "b";
        b.count = 1;
        call(co, &c[2], MSR_RPC_BARRIER, &b.base);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        for (int i = 0; i < 3; i++) {
            MSR_CHECK_MSG(c[i].answered, "call %d unanswered with allocation %ld failing", i, k);
            msr_tcall_reset(&c[i]);
        }
        msr_coord_destroy(co);
        if (!failed)
            return;
    }
    MSR_CHECK_MSG(0, "the workload never ran without a failed allocation");
}

/* The same with a state file: answers wait for saves, and a save (or a
 * held answer) that cannot get memory still answers every call; what was
 * saved reads back. */
static void test_alloc_failures_durable(void)
{
    tmpstate_t t;
    tmpstate_make(&t);
    for (long k = 0; k < 2000; k++) {
        unlink(t.path);
        msr_coord_t *co = durable_coord(t.path);
        hold_answers = 1;
        msr_alloc_fail_at(k);
        tcall_t c[3] = {{0}};
        set_key(co, &c[0], "k", "v");
        Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
        a.key = "n";
        a.delta = 1;
        a.client_id = 1;
        a.request_id = 1;
        call(co, &c[1], MSR_RPC_ADD, &a.base);
        call(co, &c[2], MSR_RPC_ADD, &a.base);
        msr_coord_flush(co);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        hold_answers = 0;
        for (int i = 0; i < 3; i++) {
            MSR_CHECK_MSG(c[i].answered, "call %d unanswered with allocation %ld failing", i, k);
            msr_tcall_reset(&c[i]);
        }
        msr_coord_destroy(co);
        co = durable_coord(t.path); /* whatever was saved reads back */
        msr_coord_destroy(co);
        if (!failed) {
            tmpstate_remove(&t);
            return;
        }
    }
    MSR_CHECK_MSG(0, "the workload never ran without a failed allocation");
}

/* Progress: the ranks' reports, the straggler named once, stale
 * generations ignored, and what /metrics and /api/job render of it. */
static void progress_send(msr_coord_t *co, tcall_t *c, const char *id, int gen, int slow_rank,
                          int64_t step)
{
    Msr__StepReport reps[8], *repp[8];
    Msr__Scalar loss[8], *lossp[8];
    double times[8][MSR_STRAGGLER_WINDOW];
    for (int r = 0; r < 8; r++) {
        msr__step_report__init(&reps[r]);
        msr__scalar__init(&loss[r]);
        loss[r].name = "loss";
        loss[r].value = 2.5 + r;
        lossp[r] = &loss[r];
        for (int k = 0; k < MSR_STRAGGLER_WINDOW; k++)
            times[r][k] = r == slow_rank ? 0.2 : 0.1 + 0.001 * r;
        reps[r].rank = r;
        reps[r].step = step;
        reps[r].step_time = times[r][0];
        reps[r].steps = MSR_STRAGGLER_WINDOW;
        reps[r].n_step_times = MSR_STRAGGLER_WINDOW;
        reps[r].step_times = times[r];
        reps[r].n_scalars = 1;
        reps[r].scalars = &lossp[r];
        repp[r] = &reps[r];
    }
    Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
    req.node_id = (char *)id;
    req.generation = gen;
    req.n_steps = 8;
    req.steps = repp;
    call(co, c, MSR_RPC_PROGRESS, &req.base);
    MSR_CHECK_MSG(c->answered && c->code == 0, "progress: %d %s", c->code, c->message);
}

static void test_progress_and_stragglers(void)
{
    msr_coord_t *co = make_coord(8, 8, 0);
    const char *a = join(co, 0, 8, 8, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    msr_tcall_reset(&c);
    /* balanced: nobody named */
    progress_send(co, &c, a, 0, -1, 19);
    MSR_CHECK_EQ(((Msr__ProgressResponse *)c.resp)->n_stragglers, 0);
    msr_tcall_reset(&c);
    /* rank 5 twice as slow over a whole window: suspected, not yet named
     * (one window may be a moment of the machine) */
    progress_send(co, &c, a, 0, 5, 39);
    MSR_CHECK_EQ(((Msr__ProgressResponse *)c.resp)->n_stragglers, 0);
    msr_tcall_reset(&c);
    /* and over the next window too: named, with its node */
    progress_send(co, &c, a, 0, 5, 59);
    Msr__ProgressResponse *r = (Msr__ProgressResponse *)c.resp;
    MSR_CHECK_EQ(r->n_stragglers, 1);
    MSR_CHECK(r->n_stragglers == 1 && r->stragglers[0]->rank == 5);
    MSR_CHECK(r->n_stragglers == 1 && r->stragglers[0]->node_rank == 0);
    MSR_CHECK(r->n_stragglers == 1 && r->stragglers[0]->window == MSR_STRAGGLER_WINDOW);
    MSR_CHECK(r->n_stragglers == 1 && r->stragglers[0]->ratio > 1.9 &&
              r->stragglers[0]->ratio < 2.0);
    msr_tcall_reset(&c);
    /* still slow: the same one straggler, named once */
    progress_send(co, &c, a, 0, 5, 79);
    MSR_CHECK_EQ(((Msr__ProgressResponse *)c.resp)->n_stragglers, 1);
    msr_tcall_reset(&c);
    /* another generation's reports are ignored */
    progress_send(co, &c, a, 7, 5, 1000);
    msr_tcall_reset(&c);
    msr_buf_t m = MSR_BUF_INIT, j = MSR_BUF_INIT;
    MSR_CHECK_OK(msr_coord_render_metrics(co, &m));
    MSR_CHECK_OK(msr_coord_render_job(co, &j));
    static const char *const want[] = {
        "msrun_rank_step{rank=\"5\",node=\"0\"} 79\n",
        "msrun_rank_straggler{rank=\"5\",node=\"0\"} 1\n",
        "msrun_rank_straggler{rank=\"4\",node=\"0\"} 0\n",
        "msrun_rank_scalar{rank=\"7\",node=\"0\",name=\"loss\"} 9.5\n",
        "msrun_stragglers_total 1\n",
        "msrun_progress_messages_total 5\n",
        "msrun_progress_steps_total 640\n",
        "msrun_coordinator_calls_total{method=\"Progress\"} 5\n",
        "msrun_job_state{state=\"running\"} 1\n",
        "msrun_ranks{state=\"running\"} 8\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        MSR_CHECK_MSG(strstr(m.data, want[i]) != NULL, "/metrics lacks %s", want[i]);
    MSR_CHECK(strstr(j.data, "\"stragglers\":[{\"rank\":5,\"node\":0,") != NULL);
    MSR_CHECK(strstr(j.data, "\"scalars\":{\"loss\":2.5}") != NULL);
    MSR_CHECK(strstr(j.data, "{\"job\":{\"id\":\"job\",\"state\":\"running\"") != NULL);
    msr_buf_cleanup(&m);
    msr_buf_cleanup(&j);
    msr_coord_destroy(co);
}

/* Ranks lo..hi report a window of steps ending at `step`, each taking t. */
static void progress_window(msr_coord_t *co, tcall_t *c, const char *id, int lo, int hi,
                            int64_t step, double t)
{
    Msr__StepReport reps[8], *repp[8];
    double times[MSR_STRAGGLER_WINDOW];
    for (int k = 0; k < MSR_STRAGGLER_WINDOW; k++)
        times[k] = t;
    int n = 0;
    for (int r = lo; r <= hi; r++, n++) {
        msr__step_report__init(&reps[n]);
        reps[n].rank = r;
        reps[n].step = step;
        reps[n].step_time = t;
        reps[n].steps = MSR_STRAGGLER_WINDOW;
        reps[n].n_step_times = MSR_STRAGGLER_WINDOW;
        reps[n].step_times = times;
        repp[n] = &reps[n];
    }
    Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
    req.node_id = (char *)id;
    req.n_steps = (size_t)n;
    req.steps = repp;
    call(co, c, MSR_RPC_PROGRESS, &req.base);
    MSR_CHECK_MSG(c->answered && c->code == 0, "progress: %d %s", c->code, c->message);
}

/* Nodes report at different moments: ranks whose latest window is of a
 * slow moment of the machine are compared with the others over the same
 * steps, not with the others' later, faster steps; a rank slow over the
 * same steps is named. */
static void test_stragglers_same_steps(void)
{
    msr_coord_t *co = make_coord(8, 8, 0);
    const char *a = join(co, 0, 8, 8, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    msr_tcall_reset(&c);
    /* every rank: steps 20..39 slow (the machine busy) */
    progress_window(co, &c, a, 0, 7, 39, 0.2);
    msr_tcall_reset(&c);
    /* ranks 4..7 went on: steps 40..59 fast; ranks 0..3 have not said yet */
    progress_window(co, &c, a, 4, 7, 59, 0.1);
    MSR_CHECK_EQ(((Msr__ProgressResponse *)c.resp)->n_stragglers, 0);
    msr_tcall_reset(&c);
    /* ranks 0..3 report 40..59 fast too, but rank 2 slow over them: named */
    progress_window(co, &c, a, 0, 1, 59, 0.1);
    msr_tcall_reset(&c);
    progress_window(co, &c, a, 3, 3, 59, 0.1);
    msr_tcall_reset(&c);
    progress_window(co, &c, a, 2, 2, 59, 0.3);
    MSR_CHECK_EQ(((Msr__ProgressResponse *)c.resp)->n_stragglers, 0); /* suspected */
    msr_tcall_reset(&c);
    progress_window(co, &c, a, 0, 1, 79, 0.1);
    msr_tcall_reset(&c);
    progress_window(co, &c, a, 3, 7, 79, 0.1);
    msr_tcall_reset(&c);
    progress_window(co, &c, a, 2, 2, 79, 0.3);
    Msr__ProgressResponse *r = (Msr__ProgressResponse *)c.resp;
    MSR_CHECK_EQ(r->n_stragglers, 1);
    MSR_CHECK(r->n_stragglers == 1 && r->stragglers[0]->rank == 2);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* Each rank's curve for the page: a point per report, a resumed earlier
 * step replacing the points from it on, and a long run thinned to at most
 * MSR_OBS_HISTORY points spread over all of it. */
/* A step time that is not positive is no time: the rank's step_ms is 0,
 * and a window holding one is not full. */
static void test_progress_nonpositive_times(void)
{
    msr_coord_t *co = make_coord(1, 1, 0);
    const char *a = join(co, 0, 1, 1, 0);
    tcall_t c = {0};
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    double times[MSR_STRAGGLER_WINDOW];
    for (int k = 0; k < MSR_STRAGGLER_WINDOW; k++)
        times[k] = k == 0 ? 0 : 0.1; /* the oldest step's time is 0 */
    Msr__StepReport rep = MSR__STEP_REPORT__INIT, *repp = &rep;
    rep.rank = 0;
    rep.step = 30;
    rep.step_time = -0.5;
    rep.steps = MSR_STRAGGLER_WINDOW;
    rep.n_step_times = MSR_STRAGGLER_WINDOW;
    rep.step_times = times;
    Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
    req.node_id = (char *)a;
    req.n_steps = 1;
    req.steps = &repp;
    call(co, &c, MSR_RPC_PROGRESS, &req.base);
    MSR_CHECK_MSG(c.answered && c.code == 0, "progress: %d %s", c.code, c.message);
    msr_tcall_reset(&c);
    msr_buf_t j = MSR_BUF_INIT;
    MSR_CHECK_OK(msr_coord_render_job(co, &j));
    MSR_CHECK_MSG(strstr(j.data, "\"step\":30,\"step_ms\":0,\"step_ms_mean\":0,") != NULL, "%s",
                  j.data);
    msr_buf_cleanup(&j);
    msr_coord_destroy(co);
}

/* Once a curve is thinned to every other step (stride 2), a step off the
 * stride is kept when it lies a whole stride after the last point. */
static void test_progress_history_stride(void)
{
    msr_coord_t *co = make_coord(1, 1, 0);
    const char *a = join(co, 0, 1, 1, 0);
    tcall_t c = {0};
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    const int64_t after[] = {MSR_OBS_HISTORY + 3, MSR_OBS_HISTORY + 5};
    for (int64_t k = 0; k <= MSR_OBS_HISTORY + 2; k++) {
        int64_t step = k <= MSR_OBS_HISTORY ? k : after[k - MSR_OBS_HISTORY - 1];
        Msr__StepReport rep = MSR__STEP_REPORT__INIT, *repp = &rep;
        rep.rank = 0;
        rep.step = step;
        rep.step_time = 0.1;
        Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
        req.node_id = (char *)a;
        req.n_steps = 1;
        req.steps = &repp;
        call(co, &c, MSR_RPC_PROGRESS, &req.base);
        MSR_CHECK_MSG(c.answered && c.code == 0, "progress: %d %s", c.code, c.message);
        msr_tcall_reset(&c);
    }
    msr_buf_t j = MSR_BUF_INIT;
    MSR_CHECK_OK(msr_coord_render_job(co, &j));
    char want[64];
    snprintf(want, sizeof want, "[%d,100,null],[%d,100,null]]", MSR_OBS_HISTORY + 3,
             MSR_OBS_HISTORY + 5);
    MSR_CHECK_MSG(strstr(j.data, want) != NULL, "%s", j.data);
    msr_buf_cleanup(&j);
    msr_coord_destroy(co);
}

static void test_progress_history(void)
{
    msr_coord_t *co = make_coord(8, 8, 0);
    const char *a = join(co, 0, 8, 8, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    msr_tcall_reset(&c);
    for (int64_t step = 10; step <= 40; step += 10) {
        progress_send(co, &c, a, 0, -1, step);
        msr_tcall_reset(&c);
    }
    progress_send(co, &c, a, 0, -1, 20); /* resumed from step 20 */
    msr_tcall_reset(&c);
    msr_buf_t j = MSR_BUF_INIT;
    MSR_CHECK_OK(msr_coord_render_job(co, &j));
    MSR_CHECK_MSG(strstr(j.data, "\"history\":[[10,100,2.5],[20,100,2.5]]}") != NULL, "%s", j.data);
    MSR_CHECK(strstr(j.data, "\"history\":[[10,101,3.5],[20,101,3.5]]}") != NULL);
    msr_buf_cleanup(&j);
    for (int64_t step = 21; step <= 1000; step++) {
        progress_send(co, &c, a, 0, -1, step);
        msr_tcall_reset(&c);
    }
    MSR_CHECK_OK(msr_coord_render_job(co, &j));
    const char *h = strstr(j.data, "\"history\":[[10,100,2.5],");
    MSR_CHECK(h != NULL);
    if (h == NULL)
        h = "";
    int points = 0;
    for (const char *q = h; q != NULL && *q && *q != '}'; q++)
        points += *q == '[';
    MSR_CHECK_MSG(points - 1 <= MSR_OBS_HISTORY && points - 1 >= MSR_OBS_HISTORY / 2, "%d points",
                  points - 1);
    const char *end = strstr(h, "]]");
    const char *last = end;
    while (last != NULL && last > h && *last != '[')
        last--;
    long at = last != NULL ? strtol(last + 1, NULL, 10) : 0;
    MSR_CHECK_MSG(at > 900 && at <= 1000, "the last point is step %ld", at);
    /* spread over the run: the middle point near its middle */
    const char *mid = h;
    for (int k = 0; k <= points / 2 && mid != NULL; k++)
        mid = strchr(mid + 1, '[');
    long mstep = mid != NULL ? strtol(mid + 1, NULL, 10) : 0;
    MSR_CHECK_MSG(mstep > 300 && mstep < 700, "the middle point is step %ld", mstep);
    msr_buf_cleanup(&j);
    msr_coord_destroy(co);
}

/* A slow rank is named once slow over two windows that share no step: the
 * second ending one step short of that (sharing the first's last step)
 * is not enough. */
static void test_stragglers_disjoint_windows(void)
{
    msr_coord_t *co = make_coord(8, 8, 0);
    const char *a = join(co, 0, 8, 8, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    msr_tcall_reset(&c);
    const struct {
        int64_t step;
        size_t named;
    } rounds[] = {
        {19, 0}, {39, 0}, {39 + MSR_STRAGGLER_WINDOW - 1, 0}, {39 + MSR_STRAGGLER_WINDOW, 1}};
    for (size_t k = 0; k < MSR_ARRAY_SIZE(rounds); k++) {
        progress_send(co, &c, a, 0, k ? 5 : -1, rounds[k].step);
        MSR_CHECK_MSG(((Msr__ProgressResponse *)c.resp)->n_stragglers == rounds[k].named,
                      "at step %lld: %zu named", (long long)rounds[k].step,
                      ((Msr__ProgressResponse *)c.resp)->n_stragglers);
        msr_tcall_reset(&c);
    }
    msr_coord_destroy(co);
}

/* A rank far ahead of the others (its window holds none of their last
 * steps) is compared by its own last window: slow over two of them, it
 * is named. */
static void test_stragglers_far_ahead(void)
{
    msr_coord_t *co = make_coord(8, 8, 0);
    const char *a = join(co, 0, 8, 8, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    msr_tcall_reset(&c);
    double times[8][MSR_STRAGGLER_WINDOW];
    Msr__StepReport reps[8], *repp[8];
    for (int round = 0; round < 3; round++) {
        int64_t step = 19 + MSR_STRAGGLER_WINDOW * round;
        for (int r = 0; r < 8; r++) {
            msr__step_report__init(&reps[r]);
            for (int k = 0; k < MSR_STRAGGLER_WINDOW; k++)
                times[r][k] = r == 5 ? 0.2 : 0.1;
            reps[r].rank = r;
            reps[r].step = r == 5 ? step + 1000 : step;
            reps[r].step_time = times[r][0];
            reps[r].steps = MSR_STRAGGLER_WINDOW;
            reps[r].n_step_times = MSR_STRAGGLER_WINDOW;
            reps[r].step_times = times[r];
            repp[r] = &reps[r];
        }
        Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
        req.node_id = (char *)a;
        req.n_steps = 8;
        req.steps = repp;
        call(co, &c, MSR_RPC_PROGRESS, &req.base);
        MSR_CHECK_MSG(c.answered && c.code == 0, "progress: %d %s", c.code, c.message);
        msr_tcall_reset(&c);
    }
    msr_buf_t j = MSR_BUF_INIT;
    MSR_CHECK_OK(msr_coord_render_job(co, &j));
    MSR_CHECK_MSG(strstr(j.data, "\"stragglers\":[{\"rank\":5,") != NULL, "%s", j.data);
    msr_buf_cleanup(&j);
    msr_coord_destroy(co);
}

/* ---- /api/output: a rank's last lines through its node's heartbeat ---- */

/* The JSON of /api/output for rank (into out) and its HTTP status. */
static int output(msr_coord_t *co, int rank, char *out, size_t len)
{
    msr_buf_t b = MSR_BUF_INIT;
    int code = msr_coord_render_output(co, rank, msr_now_ns(), &b);
    snprintf(out, len, "%.*s", (int)b.len, b.data ? b.data : "");
    msr_buf_cleanup(&b);
    return code;
}

static void test_output_tail(void)
{
    job_node_timeout_ms = 300;
    msr_coord_t *co = make_coord(4, 2, 1);
    job_node_timeout_ms = LONG_NODE_TIMEOUT_MS;
    const char *a = join(co, 0, 4, 2, 0);
    const char *b = join(co, 1, 4, 2, 1);
    tcall_t held = {0}, c = {0};
    beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(beat(co, &c, b, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    char js[4096];
    MSR_CHECK_EQ(output(co, 4, js, sizeof js), 404);
    MSR_CHECK_MSG(strstr(js, "world size 4"), "%s", js);
    MSR_CHECK_EQ(output(co, -1, js, sizeof js), 404);
    /* nobody asks: a heartbeat is held as before and carries no ranks */
    Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
    r.node_id = (char *)b;
    r.known_state = MSR__JOB_STATE__JOB_RUNNING;
    r.wait_ms = 5000;
    call(co, &held, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK(!held.answered);
    /* an ask for rank 3 (node 1) answers node 1's held heartbeat at once */
    MSR_CHECK_EQ(output(co, 3, js, sizeof js), 202);
    MSR_CHECK_MSG(strstr(js, "\"pending\":true"), "%s", js);
    MSR_CHECK(held.answered && held.code == 0);
    Msr__HeartbeatResponse *hr = (Msr__HeartbeatResponse *)held.resp;
    MSR_CHECK_EQ(hr->n_output_ranks, 1);
    MSR_CHECK_EQ(hr->output_ranks[0], 3);
    MSR_CHECK_EQ(output(co, 3, js, sizeof js), 202); /* still on its way; asked once */
    /* node 0's own heartbeats are not disturbed */
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->n_output_ranks, 0);
    /* node 1's next heartbeat brings the lines: binary bytes, quotes,
     * valid UTF-8, a line past the bound */
    char long_line[1000];
    memset(long_line, 'x', sizeof long_line);
    ProtobufCBinaryData lines[] = {
        {5, (uint8_t *)"first"},
        {8, (uint8_t *)"a\x01\xff\"b\\\n\x7f"},
        {5, (uint8_t *)"\xc3\xa9t\xc3\xa9"},
        {4, (uint8_t *)"\xe2\x82\xac\xc0"}, /* a euro sign, then a lone lead byte */
        {sizeof long_line, (uint8_t *)long_line},
    };
    Msr__RankOutput o = MSR__RANK_OUTPUT__INIT, *op = &o;
    o.rank = 3;
    o.time = 1795700000.5;
    o.total_lines = 77;
    o.n_lines = MSR_ARRAY_SIZE(lines);
    o.lines = lines;
    Msr__RankOutput other = MSR__RANK_OUTPUT__INIT, *ops[] = {op, &other};
    other.rank = 1; /* node 0's rank, not asked of node 1: ignored */
    MSR_CHECK_EQ(output(co, 1, js, sizeof js), 202); /* asked of node 0 */
    r.n_outputs = 2;
    r.outputs = ops;
    call(co, &held, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK(!held.answered); /* nothing more to ask: held again */
    MSR_CHECK_EQ(output(co, 3, js, sizeof js), 200);
    char want[1200];
    snprintf(want, sizeof want,
             "\"lines\":[\"first\",\"a\\u0001\\ufffd\\\"b\\\\\\u000a\\u007f\","
             "\"\xc3\xa9t\xc3\xa9\",\"\xe2\x82\xac\\ufffd\",\"%.*s\"]",
             MSR_OUTPUT_LINE_MAX, long_line);
    MSR_CHECK_MSG(strstr(js, want), "%s", js);
    MSR_CHECK_MSG(strstr(js, "\"rank\":3,\"node\":1,") && strstr(js, "\"time\":1795700000.500") &&
                      strstr(js, "\"total_lines\":77") && !strstr(js, "stale"),
                  "%s", js);
    MSR_CHECK_EQ(output(co, 1, js, sizeof js), 202); /* node 1 cannot answer for node 0 */
    /* asked again: a new ask, answered only by lines sent after it */
    MSR_CHECK_EQ(output(co, 3, js, sizeof js), 202);
    MSR_CHECK(held.answered && ((Msr__HeartbeatResponse *)held.resp)->n_output_ranks == 1);
    /* node 1 is lost (a keeps beating): the last lines known, and why they
     * are old */
    const char *live[] = {a};
    beat_until_changed(co, live, 1, 0, MSR__JOB_STATE__JOB_RUNNING, 5000);
    MSR_CHECK_EQ(output(co, 3, js, sizeof js), 200);
    MSR_CHECK_MSG(strstr(js, "\"stale\":\"node 1 of rank 3 is gone\"") && strstr(js, "\"first\""),
                  "%s", js);
    MSR_CHECK_EQ(output(co, 2, js, sizeof js), 200); /* never fetched: no lines */
    MSR_CHECK_MSG(strstr(js, "\"lines\":[]") && strstr(js, "\"time\":null"), "%s", js);
    msr_tcall_reset(&held);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* Asks are bounded, and an ask its node never answers ends after
 * MSR_OUTPUT_WAIT_MS with the lines known. */
static void test_output_bounds(void)
{
    msr_coord_t *co = make_coord(128, 128, 0);
    const char *a = join(co, 0, 128, 128, 0);
    tcall_t c = {0};
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    char js[512];
    for (int rank = 0; rank < MSR_OUTPUT_ASKS_MAX; rank++)
        MSR_CHECK_EQ(output(co, rank, js, sizeof js), 202);
    MSR_CHECK_EQ(output(co, MSR_OUTPUT_ASKS_MAX, js, sizeof js), 503);
    MSR_CHECK_MSG(strstr(js, "too many"), "%s", js);
    /* the node's next heartbeat, a long poll, is answered at once with
     * every ask */
    Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
    r.node_id = (char *)a;
    r.known_state = MSR__JOB_STATE__JOB_RUNNING;
    r.wait_ms = 5000;
    call(co, &c, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK(c.answered && c.code == 0);
    MSR_CHECK_EQ(((Msr__HeartbeatResponse *)c.resp)->n_output_ranks, MSR_OUTPUT_ASKS_MAX);
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->n_output_ranks, 0);
    msr_buf_t b = MSR_BUF_INIT;
    uint64_t late = msr_now_ns() + (MSR_OUTPUT_WAIT_MS + 100) * 1000000ull;
    MSR_CHECK_EQ(msr_coord_render_output(co, 5, late, &b), 200);
    MSR_CHECK_MSG(strstr(b.data, "did not send the lines within 5 s"), "%.*s", (int)b.len, b.data);
    msr_buf_cleanup(&b);
    MSR_CHECK_EQ(output(co, MSR_OUTPUT_ASKS_MAX, js, sizeof js), 202); /* room again */
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* /api/output keeps at most MSR_OUTPUT_BYTES of a rank's lines in total
 * (each line cut to MSR_OUTPUT_LINE_MAX first): lines that sum to exactly
 * the bound are all kept, one byte more drops the line that crosses it. */
static void test_output_bytes_total(void)
{
    msr_coord_t *co = make_coord(2, 2, 0);
    const char *a = join(co, 0, 2, 2, 0);
    tcall_t c = {0};
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    enum { FULL = MSR_OUTPUT_BYTES / MSR_OUTPUT_LINE_MAX }; /* 20 whole lines, A to T */
    static uint8_t text[FULL + 1][MSR_OUTPUT_LINE_MAX + 10];
    ProtobufCBinaryData lines[FULL + 1];
    for (int k = 0; k <= FULL; k++) { /* the last, U, crosses the bound */
        memset(text[k], 'A' + k, sizeof text[k]);
        lines[k].data = text[k];
        lines[k].len = sizeof text[k]; /* cut to MSR_OUTPUT_LINE_MAX */
    }
    size_t rest = MSR_OUTPUT_BYTES - FULL * MSR_OUTPUT_LINE_MAX; /* 192 */
    char js[64], last[MSR_OUTPUT_LINE_MAX + 8];
    for (int rank = 0; rank < 2; rank++) { /* rank 0: exactly the bound; 1: one past */
        lines[FULL].len = rest + (size_t)rank;
        MSR_CHECK_EQ(output(co, rank, js, sizeof js), 202);
        MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->n_output_ranks, 1);
        Msr__RankOutput o = MSR__RANK_OUTPUT__INIT, *op = &o;
        o.rank = rank;
        o.total_lines = FULL + 1;
        o.n_lines = FULL + 1;
        o.lines = lines;
        Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
        r.node_id = (char *)a;
        r.n_outputs = 1;
        r.outputs = &op;
        call(co, &c, MSR_RPC_HEARTBEAT, &r.base);
        MSR_CHECK(c.answered && c.code == 0);
        msr_buf_t b = MSR_BUF_INIT;
        MSR_CHECK_EQ(msr_coord_render_output(co, rank, msr_now_ns(), &b), 200);
        MSR_CHECK(msr_buf_append(&b, "", 1) == MSR_OK);
        /* the last whole line is there either way, cut to the line bound */
        snprintf(last, sizeof last, ",\"%.*s\"", MSR_OUTPUT_LINE_MAX, (const char *)text[FULL - 1]);
        MSR_CHECK_MSG(strstr(b.data, last) != NULL, "rank %d: %.300s", rank, b.data);
        snprintf(last, sizeof last, ",\"%.*s\"]", (int)lines[FULL].len, (const char *)text[FULL]);
        if (rank == 0)
            MSR_CHECK_MSG(strstr(b.data, last) != NULL, "the line at the bound is missing");
        else
            MSR_CHECK_MSG(strstr(b.data, "UUUU") == NULL, "the line past the bound is kept");
        msr_buf_cleanup(&b);
    }
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* Lines for a rank nobody asked, in a heartbeat, are ignored (the rank has
 * a slot, and no record); an ask made at the clock's time 0 is still an
 * ask. */
static void test_output_unasked_and_time_zero(void)
{
    msr_coord_t *co = make_coord(2, 2, 0);
    const char *a = join(co, 0, 2, 2, 0);
    tcall_t c = {0};
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    char js[512];
    MSR_CHECK_EQ(output(co, 0, js, sizeof js), 202);
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->n_output_ranks, 1);
    ProtobufCBinaryData line = {4, (uint8_t *)"line"};
    Msr__RankOutput o = MSR__RANK_OUTPUT__INIT, *op = &o;
    o.rank = 1; /* not asked: no record */
    o.n_lines = 1;
    o.lines = &line;
    Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
    r.node_id = (char *)a;
    r.n_outputs = 1;
    r.outputs = &op;
    call(co, &c, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK(c.answered && c.code == 0);
    msr_buf_t b = MSR_BUF_INIT;
    MSR_CHECK_EQ(msr_coord_render_output(co, 1, 0, &b), 202);
    msr_buf_cleanup(&b);
    Msr__HeartbeatResponse *hr = beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(hr->n_output_ranks, 1);
    MSR_CHECK_EQ(hr->n_output_ranks ? hr->output_ranks[0] : -1, 1);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* With MSR_OUTPUT_KEPT_MAX ranks' lines kept, a new rank's record takes the
 * place of the one kept longest. */
static void test_output_evicts_oldest(void)
{
    enum { N = MSR_OUTPUT_KEPT_MAX + 1 };
    msr_coord_t *co = make_coord(N, N, 0);
    const char *a = join(co, 0, N, N, 0);
    tcall_t c = {0};
    MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    char js[512];
    ProtobufCBinaryData line = {4, (uint8_t *)"kept"};
    for (int rank = 0; rank < MSR_OUTPUT_KEPT_MAX; rank++) { /* rank 0 the oldest */
        MSR_CHECK_EQ(output(co, rank, js, sizeof js), 202);
        MSR_CHECK_EQ(beat(co, &c, a, 0, 0)->n_output_ranks, 1);
        Msr__RankOutput o = MSR__RANK_OUTPUT__INIT, *op = &o;
        o.rank = rank;
        o.n_lines = 1;
        o.lines = &line;
        Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
        r.node_id = (char *)a;
        r.n_outputs = 1;
        r.outputs = &op;
        call(co, &c, MSR_RPC_HEARTBEAT, &r.base);
        MSR_CHECK(c.answered && c.code == 0);
        MSR_CHECK_EQ(output(co, rank, js, sizeof js), 200);
    }
    MSR_CHECK_EQ(output(co, N - 1, js, sizeof js), 202); /* a new record */
    uint64_t late = msr_now_ns() + (MSR_OUTPUT_WAIT_MS + 100) * 1000000ull;
    const int ranks[] = {N - 2, 0};
    const char *want[] = {"\"lines\":[\"kept\"]", "\"lines\":[]"};
    for (int k = 0; k < 2; k++) { /* the newest kept; the oldest gone */
        MSR_CHECK_EQ(output(co, ranks[k], js, sizeof js), 202);
        msr_buf_t b = MSR_BUF_INIT;
        MSR_CHECK_EQ(msr_coord_render_output(co, ranks[k], late, &b), 200);
        MSR_CHECK_MSG(b.len && memmem(b.data, b.len, want[k], strlen(want[k])), "rank %d: %.*s",
                      ranks[k], (int)b.len, b.data);
        msr_buf_cleanup(&b);
    }
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static const msr_test_t tests[] = {
    {"progress_and_stragglers", test_progress_and_stragglers, 10},
    {"progress_history", test_progress_history, 10},
    {"progress_history_stride", test_progress_history_stride, 10},
    {"progress_nonpositive_times", test_progress_nonpositive_times, 10},
    {"output_tail", test_output_tail, 10},
    {"output_bounds", test_output_bounds, 10},
    {"output_bytes_total", test_output_bytes_total, 10},
    {"output_unasked_and_time_zero", test_output_unasked_and_time_zero, 10},
    {"output_evicts_oldest", test_output_evicts_oldest, 30},
    {"stragglers_same_steps", test_stragglers_same_steps, 10},
    {"stragglers_disjoint_windows", test_stragglers_disjoint_windows, 10},
    {"stragglers_far_ahead", test_stragglers_far_ahead, 10},
    {"join_validation", test_join_validation, 10},
    {"formation_and_ranks", test_formation_and_ranks, 10},
    {"heartbeat_long_poll", test_heartbeat_long_poll, 10},
    {"failure_restart_and_done", test_failure_restart_and_done, 10},
    {"root_cause_after_peer_lost", test_root_cause_after_peer_lost, 10},
    {"restarts_exhausted", test_restarts_exhausted, 10},
    {"node_lost", test_node_lost, 10},
    {"store_get_wait", test_store_get_wait, 10},
    {"store_add_cas_delete", test_store_add_cas_delete, 10},
    {"store_bad_keys_and_generation", test_store_bad_keys_and_generation, 10},
    {"store_reset_on_restart", test_store_reset_on_restart, 10},
    {"barrier", test_barrier, 10},
    {"allgather", test_allgather, 10},
    {"store_limits", test_store_limits, 10},
    {"store_counts_bounded", test_store_counts_bounded, 10},
    {"store_expired_waits_withdraw", test_store_expired_waits_withdraw, 10},
    {"store_stale_generation_every_call", test_store_stale_generation_every_call, 10},
    {"store_compare_set_exact", test_store_compare_set_exact, 10},
    {"store_add_limits", test_store_add_limits, 10},
    {"barrier_allgather_reset_on_restart", test_barrier_allgather_reset_on_restart, 10},
    {"persist_and_resume", test_persist_and_resume, 10},
    {"failure_history", test_failure_history, 10},
    {"write_held_until_saved", test_write_held_until_saved, 10},
    {"save_failure_fails_writes", test_save_failure_fails_writes, 10},
    {"save_failure_cut_back", test_save_failure_cut_back, 10},
    {"request_ids", test_request_ids, 10},
    {"persist_records", test_persist_records, 10},
    {"log_and_compaction", test_log_and_compaction, 30},
    {"log_compaction_bound", test_log_compaction_bound, 30},
    {"state_file_fd_zero", test_state_file_fd_zero, 10},
    {"torn_tail", test_torn_tail, 10},
    {"state_v2_torn_frame", test_state_v2_torn_frame, 10},
    {"state_file_counts", test_state_file_counts, 10},
    {"state_file_symlinks", test_state_file_symlinks, 10},
    {"elastic", test_elastic, 20},
    {"alloc_failures", test_alloc_failures, 60},
    {"alloc_failures_durable", test_alloc_failures_durable, 120},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
