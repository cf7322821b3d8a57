/* What the attacks of sec_attack share (sec_attack.c defines it): the
 * coordinator in a child process, a valid client measuring small Sets,
 * and an unauthenticated Set call. Every helper fails the test
 * (MSR_CHECK) where its step fails. */
#ifndef MSR_TESTS_SEC_ATTACK_H
#define MSR_TESTS_SEC_ATTACK_H

#include <grpc/grpc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "rendezvous/rpc.h"
#include "tests/pieces.h"

#define TOKEN "sec-attack-token"

/* Each attack's tests (sec_attack_<theme>.c). */
extern const msr_test_piece_t sa_sets_tests, sa_idle_tests;

typedef struct coord_proc {
    pid_t pid;
    int port;
    char target[64];
    char log[64]; /* the coordinator's stderr */
} coord_proc_t;

typedef struct latency {
    double ms[20000];
    int n;
    int failed;
} latency_t;

typedef struct prober {
    msr_rpc_channel_t *ch;
    latency_t lat;
    atomic_int stop;
} prober_t;

typedef struct attack_call {
    grpc_call *call;
    grpc_metadata_array init_md, trail_md;
    grpc_status_code code;
    grpc_slice details;
    grpc_byte_buffer *bb;
    int pending; /* batches not yet completed */
} attack_call_t;

void sa_coord_start(coord_proc_t *cp, int nodes, rlim_t nofile);
void sa_coord_end(coord_proc_t *cp);
int sa_log_lines(const coord_proc_t *cp, const char *what);
long sa_proc_kb(pid_t pid, const char *field);
void sa_latency_row(const char *phase, latency_t *l);
void sa_small_set(msr_rpc_channel_t *ch, latency_t *l);
/* Sets of p until p->stop (a thread's body). */
void *sa_probe_loop(void *arg);
void sa_attack_start(grpc_channel *ch, grpc_completion_queue *cq, attack_call_t *ac,
                     grpc_slice body, int tag);
void sa_attack_finish(attack_call_t *ac);
grpc_slice sa_set_body(size_t len);

#endif
