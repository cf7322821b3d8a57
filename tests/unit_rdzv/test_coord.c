/* Unit tests of the coordinator core, driven through a responder that
 * records answers in memory (fixtures.h). This file holds what the pieces
 * share (test_coord.h): the job's helpers (a coordinator, joins,
 * heartbeats, reports), the store's and the state file's, and the one
 * table of every piece's tests that the runner runs; the tests live in
 * test_coord_<theme>.c. */
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

#include "base/time.h"
#include "tests/unit_rdzv/test_coord.h"

/* Whether tc_call() saves after each call, as the server's loop does after
 * each batch (with a state file, answers wait for the save). */
int tc_hold_answers;

void tc_call(msr_coord_t *co, tcall_t *c, msr_rpc_method_t m, const ProtobufCMessage *req)
{
    if (tc_hold_answers)
        msr_tcall_send(co, c, m, req);
    else
        msr_tcall_call(co, c, m, req);
}

/* ---- helpers for the job ---- */

int tc_job_max_restarts;
uint64_t tc_join_machine;
msr_store_limits_t tc_job_limits; /* zeros: the defaults */
int64_t tc_job_node_timeout_ms = LONG_NODE_TIMEOUT_MS;

msr_coord_t *tc_make_coord(int worker_num, int local, int max_restarts)
{
    tc_job_max_restarts = max_restarts;
    msr_coord_config_t cfg = {
        .token = "t",
        .job_id = "job",
        .worker_num = worker_num,
        .local_worker_num = local,
        .max_restarts = max_restarts,
        .node_timeout_ms = tc_job_node_timeout_ms,
        .join_timeout_ms = 60000,
        .store_limits = tc_job_limits,
    };
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    return co;
}

Msr__JoinRequest tc_join_req(int worker_num, int local, int node_rank, int max_restarts)
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
const char *tc_join(msr_coord_t *co, int slot, int worker_num, int local, int node_rank)
{
    static char ids[16][64];
    tcall_t c = {0};
    Msr__JoinRequest r = tc_join_req(worker_num, local, node_rank, tc_job_max_restarts);
    r.pid = 100 + slot;
    r.machine = tc_join_machine;
    tc_call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_MSG(c.answered && c.code == 0, "join failed: %d %s", c.code, c.message);
    snprintf(ids[slot], sizeof ids[slot], "%s", ((Msr__JoinResponse *)c.resp)->node_id);
    msr_tcall_reset(&c);
    return ids[slot];
}

/* A heartbeat that answers at once (wait 0); returns the response. */
Msr__HeartbeatResponse *tc_beat(msr_coord_t *co, tcall_t *c, const char *id, int gen, int ready)
{
    Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
    r.node_id = (char *)id;
    r.generation = gen;
    r.ready_generation = ready;
    r.wait_ms = 0;
    tc_call(co, c, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK_MSG(c->answered && c->code == 0, "heartbeat: %d %s", c->code, c->message);
    return (Msr__HeartbeatResponse *)c->resp;
}

/* Ticks, then beats node id (generation gen, ready for it), about every
 * 10 ms until the answer says the job is in state want, limit_ms at the
 * most: what a step after a last call waits for (an elastic job forms, a
 * late node is taken in) without guessing how long the machine takes.
 * Returns that answer (held in c). */
Msr__HeartbeatResponse *tc_beat_until_state(msr_coord_t *co, tcall_t *c, const char *id, int gen,
                                            Msr__JobState want, int64_t limit_ms)
{
    uint64_t limit = msr_deadline_in_ms(limit_ms);
    for (;;) {
        msr_coord_tick(co, msr_now_ns());
        Msr__HeartbeatResponse *r = tc_beat(co, c, id, gen, gen);
        if (r->state == want)
            return r;
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "the job is in state %d, not %d, after %lld ms",
                      (int)r->state, (int)want, (long long)limit_ms);
        msr_sleep_ms(10);
    }
}

/* Beats each of the nw nodes in live (generation gen, ready for it) about
 * every 50 ms and ticks, until the job's state is no longer `from` (another
 * node was lost), limit_ms at the most; returns the time the tick that
 * changed it was given. Each tick is given the time read before that
 * round's beats, so the live nodes' last calls are never older than it:
 * however slowly this process runs, only a silent node can be lost. */
uint64_t tc_beat_until_changed(msr_coord_t *co, const char *const *live, int nw, int gen,
                               Msr__JobState from, int64_t limit_ms)
{
    uint64_t limit = msr_deadline_in_ms(limit_ms);
    tcall_t c = {0};
    for (;;) {
        msr_sleep_ms(50); /* paces the rounds; the deadline bounds them */
        uint64_t t = msr_now_ns();
        for (int i = 0; i < nw; i++)
            tc_beat(co, &c, live[i], gen, gen);
        msr_coord_tick(co, t);
        Msr__JobState now = tc_beat(co, &c, live[0], gen, gen)->state;
        msr_tcall_reset(&c);
        if (now != from)
            return t;
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "the job is still in state %d after %lld ms",
                      (int)from, (long long)limit_ms);
    }
}

void tc_report_lost(msr_coord_t *co, const char *id, int gen, int rank, int code, int sig,
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
    tc_call(co, &c, MSR_RPC_REPORT, &r.base);
    MSR_CHECK(c.answered && c.code == 0);
    msr_tcall_reset(&c);
}

void tc_report(msr_coord_t *co, const char *id, int gen, int rank, int code, int sig)
{
    tc_report_lost(co, id, gen, rank, code, sig, 0);
}

/* ---- helpers for the store ---- */

/* A running job of one node with 8 workers (barriers and allgathers may
 * have up to 8 participants). */
msr_coord_t *tc_running_coord(void)
{
    msr_coord_t *co = tc_make_coord(8, 8, 0);
    const char *a = tc_join(co, 0, 8, 8, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    msr_tcall_reset(&c);
    return co;
}

void tc_set_kv(msr_coord_t *co, const char *k, const char *v)
{
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = (char *)k;
    s.value.data = (uint8_t *)v;
    s.value.len = strlen(v);
    tcall_t c = {0};
    tc_call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK(c.answered && c.code == 0);
    msr_tcall_reset(&c);
}

/* ---- helpers for a state file ---- */

void tc_tmpstate_make(tmpstate_t *t)
{
    snprintf(t->dir, sizeof t->dir, "/tmp/msrun-coord-test-XXXXXX");
    MSR_CHECK(mkdtemp(t->dir) != NULL);
    snprintf(t->path, sizeof t->path, "%s/state", t->dir);
}

void tc_tmpstate_remove(tmpstate_t *t)
{
    char p[200];
    unlink(t->path);
    snprintf(p, sizeof p, "%s.tmp", t->path);
    unlink(p);
    rmdir(t->dir);
}

msr_coord_t *tc_durable_coord(const char *path)
{
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = "job",
                              .worker_num = 1,
                              .local_worker_num = 1,
                              .max_restarts = 0,
                              .node_timeout_ms = 60000,
                              .join_timeout_ms = 60000,
                              .state_file = path};
    tc_job_max_restarts = 0;
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    return co;
}

int tc_set_key(msr_coord_t *co, tcall_t *c, const char *key, const char *value)
{
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = (char *)key;
    s.value.data = (uint8_t *)value;
    s.value.len = strlen(value);
    tc_call(co, c, MSR_RPC_SET, &s.base);
    return c->code;
}

/* The value of key ("" when absent). */
const char *tc_get_key(msr_coord_t *co, const char *key)
{
    static char out[256];
    tcall_t c = {0};
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = (char *)key;
    tc_call(co, &c, MSR_RPC_GET, &g.base);
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
long long tc_bytes_written(void)
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

long tc_file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* The job's Status (the call's answer stays in c). */
Msr__StatusResponse *tc_status(msr_coord_t *co, tcall_t *c)
{
    Msr__StatusRequest r = MSR__STATUS_REQUEST__INIT;
    tc_call(co, c, MSR_RPC_STATUS, &r.base);
    MSR_CHECK_MSG(c->answered && c->code == 0, "status: %d %s", c->code, c->message);
    return (Msr__StatusResponse *)c->resp;
}

int64_t tc_add_req(msr_coord_t *co, const char *key, int64_t delta, uint64_t client, uint64_t id)
{
    tcall_t c = {0};
    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    a.key = (char *)key;
    a.delta = delta;
    a.client_id = client;
    a.request_id = id;
    tc_call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_MSG(c.answered && c.code == 0, "add: %d %s", c.code, c.message);
    int64_t v = ((Msr__AddResponse *)c.resp)->value;
    msr_tcall_reset(&c);
    return v;
}

/* Every piece's tests, run as one table. */
static const msr_test_piece_t *const pieces[] = {
    &tc_members_tests, &tc_store_tests,    &tc_durable_tests, &tc_records_tests,
    &tc_limits_tests,  &tc_progress_tests, &tc_output_tests};

int main(int argc, char **argv)
{
    return msr_test_main_pieces(argc, argv, pieces, sizeof pieces / sizeof pieces[0]);
}
