/* The coordinator's durability: a state file's save and resume, the
 * failure history it keeps, answers held until their write is saved, a
 * failed save failing its writes and cut back, and request ids that make
 * a retried write happen once. */
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
    tc_job_max_restarts = 3;
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    char a[64], b[64];
    tc_join_machine = 42; /* both on one machine */
    snprintf(a, sizeof a, "%s", tc_join(co, 0, 2, 1, -1));
    snprintf(b, sizeof b, "%s", tc_join(co, 1, 2, 1, -1));
    tc_join_machine = 0;
    tcall_t c = {0};
    tc_beat(co, &c, a, 0, 0);
    tc_report(co, a, 0, 0, 1, 0); /* not running yet: ignored */
    tc_beat(co, &c, b, 0, 0);
    tc_report(co, a, 0, 0, 1, 0); /* a failure: restart 1 of 3, generation 1 */
    tc_beat(co, &c, a, 1, 1);
    MSR_CHECK_EQ(tc_beat(co, &c, b, 1, 1)->state, MSR__JOB_STATE__JOB_RUNNING);
    Msr__SetRequest sr = MSR__SET_REQUEST__INIT;
    sr.generation = 1;
    sr.key = "kept";
    sr.value.data = (uint8_t *)"value";
    sr.value.len = 5;
    tc_call(co, &c, MSR_RPC_SET, &sr.base);
    MSR_CHECK_EQ(c.code, 0);
    tc_report(co, a, 1, 0, 0, 0); /* rank 0 done */
    msr_coord_tick(co, msr_now_ns() + 1000000000ull);
    msr_tcall_reset(&c);
    msr_coord_destroy(co); /* the coordinator dies */

    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    Msr__HeartbeatResponse *r = tc_beat(co, &c, b, 1, 1);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(r->generation, 1);
    MSR_CHECK_EQ(r->restart_count, 1);
    MSR_CHECK(r->assignment != NULL);
    /* its machine's count, as the generation's workers were told */
    MSR_CHECK_EQ(r->assignment->machine_ranks, 2);
    int rank_b = r->assignment->node_rank;
    MSR_CHECK(r->failure != NULL && r->failure->exit_code == 1);
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.generation = 1;
    g.key = "kept";
    tc_call(co, &c, MSR_RPC_GET, &g.base);
    MSR_CHECK_EQ(c.code, 0);
    MSR_CHECK(((Msr__GetResponse *)c.resp)->value.len == 5);
    tc_report(co, b, 1, rank_b, 0, 0); /* the other rank: the job is done */
    MSR_CHECK_EQ(tc_beat(co, &c, a, 1, 1)->state, MSR__JOB_STATE__JOB_DONE);
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

/* The failure history holds each failed generation's root cause, the last
 * 16, oldest first, and a coordinator restarted on the state file (as
 * after a kill -9, or elected after a failover) has it all. */
static void test_failure_history(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = "job",
                              .worker_num = 1,
                              .local_worker_num = 1,
                              .max_restarts = 30,
                              .node_timeout_ms = 60000,
                              .join_timeout_ms = 60000,
                              .state_file = t.path};
    tc_job_max_restarts = 30;
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    char a[64];
    snprintf(a, sizeof a, "%s", tc_join(co, 0, 1, 1, -1));
    tcall_t c = {0};
    const int fails = 18;
    for (int g = 0; g < fails; g++) {
        MSR_CHECK_EQ(tc_beat(co, &c, a, g, g)->state, MSR__JOB_STATE__JOB_RUNNING);
        tc_report(co, a, g, 0, 10 + g, 0);
        if (g == 0)
            tc_report(co, a, 0, 0, 99, 0); /* a second failure of generation 0: not kept */
        msr_coord_tick(co, msr_now_ns());
    }
    Msr__StatusResponse *r = tc_status(co, &c);
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
    r = tc_status(again, &c);
    MSR_CHECK_EQ(r->generation, fails);
    MSR_CHECK_EQ(r->restart_count, fails);
    MSR_CHECK_EQ(r->n_failures, 16);
    for (size_t i = 0; i < r->n_failures; i++) {
        MSR_CHECK_EQ(r->failures[i]->generation, fails - 16 + (int)i);
        MSR_CHECK_EQ(r->failures[i]->exit_code, 10 + fails - 16 + (int)i);
        MSR_CHECK_STR(r->failures[i]->reason, "exited");
    }
    /* one more failure, then a restart from the fresh snapshot and its log */
    MSR_CHECK_EQ(tc_beat(again, &c, a, fails, fails)->state, MSR__JOB_STATE__JOB_RUNNING);
    tc_report(again, a, fails, 0, 77, 0);
    msr_coord_tick(again, msr_now_ns());
    msr_tcall_reset(&c);
    msr_coord_destroy(again);
    msr_coord_destroy(co);
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    r = tc_status(co, &c);
    MSR_CHECK_EQ(r->n_failures, 16);
    MSR_CHECK_EQ(r->failures[0]->generation, fails - 15);
    MSR_CHECK_EQ(r->failures[15]->generation, fails);
    MSR_CHECK_EQ(r->failures[15]->exit_code, 77);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    tc_tmpstate_remove(&t);
}

/* A write is answered only once it is saved; writes that arrive together
 * share one save and are answered together. */
static void test_write_held_until_saved(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    msr_coord_t *co = tc_durable_coord(t.path);
    tc_hold_answers = 1;
    tcall_t c[3] = {{0}};
    tc_set_key(co, &c[0], "a", "1");
    tc_set_key(co, &c[1], "b", "2");
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "a";
    tc_call(co, &c[2], MSR_RPC_GET, &g.base); /* it reads an unsaved write */
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
    tc_set_key(co, &c[0], "c", "3");
    MSR_CHECK(!c[0].answered);
    msr_coord_cancel(co, &c[0]);
    msr_coord_flush(co);
    MSR_CHECK(!c[0].answered);
    tc_hold_answers = 0;
    for (int i = 0; i < 3; i++)
        msr_tcall_reset(&c[i]);
    /* a kill -9 now (no destroy, no flush) loses nothing answered */
    long before = tc_file_size(t.path);
    MSR_CHECK(before > 0);
    msr_coord_t *again = tc_durable_coord(t.path);
    MSR_CHECK(strcmp(tc_get_key(again, "a"), "1") == 0);
    MSR_CHECK(strcmp(tc_get_key(again, "b"), "2") == 0);
    MSR_CHECK(strcmp(tc_get_key(again, "c"), "3") == 0);
    msr_coord_destroy(again);
    msr_coord_destroy(co);
    tc_tmpstate_remove(&t);
}

/* A save that fails fails the writes it carried, with the reason; the next
 * save writes everything. */
static void test_save_failure_fails_writes(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    msr_coord_t *co = tc_durable_coord(t.path);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_set_key(co, &c, "small", "x"), 0);
    /* the file may not grow any more: the append fails with EFBIG */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    MSR_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = (rlim_t)tc_file_size(t.path);
    MSR_CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    char big[200];
    memset(big, 'v', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    MSR_CHECK_EQ(tc_set_key(co, &c, "big", big), GRPC_STATUS_INTERNAL);
    MSR_CHECK_MSG(strstr(c.message, "state file") && strstr(c.message, strerror(EFBIG)),
                  "message: %s", c.message);
    /* until a save succeeds, every answer says so (it could tell of an
     * unsaved write) */
    MSR_CHECK_EQ(tc_set_key(co, &c, "other", "y"), GRPC_STATUS_INTERNAL);
    MSR_CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    msr_sleep_ms(120); /* the next attempt comes after a pause */
    msr_coord_tick(co, msr_now_ns());
    MSR_CHECK_EQ(tc_set_key(co, &c, "after", "z"), 0);
    msr_tcall_reset(&c);
    msr_coord_t *again = tc_durable_coord(t.path);
    MSR_CHECK(strcmp(tc_get_key(again, "small"), "x") == 0);
    MSR_CHECK(strcmp(tc_get_key(again, "after"), "z") == 0);
    /* the save after a failure rewrites the whole state (a snapshot), so
     * the file holds what the coordinator holds, the failed writes too */
    const char *keys[] = {"big", "other"};
    for (int i = 0; i < 2; i++) {
        char held[256];
        snprintf(held, sizeof held, "%s", tc_get_key(co, keys[i]));
        MSR_CHECK_MSG(strcmp(tc_get_key(again, keys[i]), held) == 0,
                      "'%s': '%s' in the file, '%s' held", keys[i], tc_get_key(again, keys[i]),
                      held);
    }
    msr_coord_destroy(again);
    msr_coord_destroy(co);
    tc_tmpstate_remove(&t);
}

/* A retried Add (same client and request id) is applied once, also after a
 * restart of the coordinator; without ids every Add counts. */
/* An append cut short (the file may grow by 10 bytes only) is cut back off
 * the file at once: no torn record is left for the next start to find. */
static void test_save_failure_cut_back(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    msr_coord_t *co = tc_durable_coord(t.path);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_set_key(co, &c, "small", "x"), 0);
    MSR_CHECK_EQ(tc_set_key(co, &c, "log", "y"), 0); /* appended: the log is open */
    long before = tc_file_size(t.path);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    MSR_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = (rlim_t)before + 10;
    MSR_CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    char big[200];
    memset(big, 'v', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    int code = tc_set_key(co, &c, "big", big);
    long after = tc_file_size(t.path);
    MSR_CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    MSR_CHECK_EQ(code, GRPC_STATUS_INTERNAL);
    MSR_CHECK_MSG(after == before, "%ld bytes after the failed save, %ld before", after, before);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    tc_tmpstate_remove(&t);
}

static void test_request_ids(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    msr_coord_t *co = tc_durable_coord(t.path);
    MSR_CHECK_EQ(tc_add_req(co, "n", 5, 7, 1), 5);
    MSR_CHECK_EQ(tc_add_req(co, "n", 5, 7, 1), 5); /* the retry: the first answer */
    MSR_CHECK_EQ(tc_add_req(co, "n", 5, 7, 2), 10);
    MSR_CHECK_EQ(tc_add_req(co, "n", 5, 8, 1), 15); /* another client's id 1 */
    MSR_CHECK_EQ(tc_add_req(co, "n", 1, 0, 0), 16);
    MSR_CHECK_EQ(tc_add_req(co, "n", 1, 0, 0), 17);
    /* an id used by another method is refused, not answered wrongly */
    tcall_t c = {0};
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = "n";
    s.client_id = 7;
    s.request_id = 2;
    tc_call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    msr_tcall_reset(&c);
    /* the coordinator dies without a word and comes back */
    msr_coord_t *again = tc_durable_coord(t.path);
    MSR_CHECK_EQ(tc_add_req(again, "n", 5, 7, 2), 10);
    MSR_CHECK_EQ(tc_add_req(again, "n", 5, 8, 1), 15);
    MSR_CHECK(strcmp(tc_get_key(again, "n"), "17") == 0);
    MSR_CHECK_EQ(tc_add_req(again, "n", 5, 7, 3), 22);
    msr_coord_destroy(again);
    msr_coord_destroy(co);
    tc_tmpstate_remove(&t);
}

static const msr_test_t tests[] = {
    {"persist_and_resume", test_persist_and_resume, 10},
    {"failure_history", test_failure_history, 10},
    {"write_held_until_saved", test_write_held_until_saved, 10},
    {"save_failure_fails_writes", test_save_failure_fails_writes, 10},
    {"save_failure_cut_back", test_save_failure_cut_back, 10},
    {"request_ids", test_request_ids, 10},
};

const msr_test_piece_t tc_durable_tests = MSR_TEST_PIECE(tests);
