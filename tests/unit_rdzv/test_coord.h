/* What the pieces of the coordinator core's unit test share (test_coord.c
 * defines it): the job's, the store's and a state file's helpers, the
 * settings of the coordinators they make, and each piece's table of
 * tests. Every helper fails the test (MSR_CHECK) where its step fails. */
#ifndef MSR_TESTS_TEST_COORD_H
#define MSR_TESTS_TEST_COORD_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/coord.h"
#include "tests/runner.h"
#include "tests/pieces.h"
#include "tests/unit_rdzv/fixtures.h"

/* Each piece's tests (test_coord_<theme>.c). */
extern const msr_test_piece_t tc_members_tests, tc_store_tests, tc_durable_tests, tc_records_tests,
    tc_limits_tests, tc_progress_tests, tc_output_tests;

/* ---- the coordinators the helpers make ---- */

/* The node timeout of tc_make_coord's jobs. Ten minutes by default: longer
 * than any test here may run (their timeouts are at most 120 s), so a
 * node can never be lost because this process was slow between its calls
 * and a tick at the real time. The tests of a lost node set it short and
 * keep the other nodes beating with tc_beat_until_changed(). */
#define LONG_NODE_TIMEOUT_MS 600000

extern int tc_hold_answers;
extern int tc_job_max_restarts;
/* The machine tc_join's nodes tell (0: none, as an older msrun). */
extern uint64_t tc_join_machine;
extern msr_store_limits_t tc_job_limits;
extern int64_t tc_job_node_timeout_ms;

/* A state file in a fresh temporary directory. */
typedef struct tmpstate {
    char dir[64];
    char path[128];
} tmpstate_t;

/* ---- helpers for the job ---- */

void tc_call(msr_coord_t *co, tcall_t *c, msr_rpc_method_t m, const ProtobufCMessage *req);
msr_coord_t *tc_make_coord(int worker_num, int local, int max_restarts);
Msr__JoinRequest tc_join_req(int worker_num, int local, int node_rank, int max_restarts);
const char *tc_join(msr_coord_t *co, int slot, int worker_num, int local, int node_rank);
Msr__HeartbeatResponse *tc_beat(msr_coord_t *co, tcall_t *c, const char *id, int gen, int ready);
Msr__HeartbeatResponse *tc_beat_until_state(msr_coord_t *co, tcall_t *c, const char *id, int gen,
                                            Msr__JobState want, int64_t limit_ms);
uint64_t tc_beat_until_changed(msr_coord_t *co, const char *const *live, int nw, int gen,
                               Msr__JobState from, int64_t limit_ms);
void tc_report_lost(msr_coord_t *co, const char *id, int gen, int rank, int code, int sig,
                    int after_peer_lost);
void tc_report(msr_coord_t *co, const char *id, int gen, int rank, int code, int sig);

/* ---- helpers for the store ---- */

msr_coord_t *tc_running_coord(void);
void tc_set_kv(msr_coord_t *co, const char *k, const char *v);

/* ---- helpers for a state file ---- */

void tc_tmpstate_make(tmpstate_t *t);
void tc_tmpstate_remove(tmpstate_t *t);
msr_coord_t *tc_durable_coord(const char *path);
int tc_set_key(msr_coord_t *co, tcall_t *c, const char *key, const char *value);
const char *tc_get_key(msr_coord_t *co, const char *key);
long long tc_bytes_written(void);
long tc_file_size(const char *path);
Msr__StatusResponse *tc_status(msr_coord_t *co, tcall_t *c);
int64_t tc_add_req(msr_coord_t *co, const char *key, int64_t delta, uint64_t client, uint64_t id);

#endif
