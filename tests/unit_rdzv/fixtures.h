/* Fixtures shared by the coordinator's unit tests (test_coord, test_relay,
 * test_rpc, test_relay_rpc, test_relay_tree): the fake call of fake_call.h
 * answering as the coordinator core's responder (its answers unpacked as a
 * client would see them), a coordinator server and a relay agent's server,
 * each run on loopback by a thread of its own, and a node's calls to them.
 * Every helper fails the test (MSR_CHECK) where its step fails. */
#ifndef MSR_TESTS_FIXTURES_H
#define MSR_TESTS_FIXTURES_H

#include <pthread.h>
#include <signal.h>

#include "cluster/coord.h"
#include "cluster/server.h"
#include "msrun/msrun.h"
#include "rendezvous/relay.h"
#include "tests/unit_rdzv/fake_call.h"

/* ---- the core's responder over a fake call ---- */

/* Answers each call by filling its tcall_t: a reply is packed and unpacked
 * again into c->resp (as the real binding's wire would); a failure keeps
 * its code and message; a second answer fails the test. The peer is
 * c->peer, or the one set by msr_tcall_use_peer ("test" by default). */
extern const msr_coord_responder_t msr_tcall_responder;

/* The peer a call without one of its own names (a string that outlives
 * the test). */
void msr_tcall_use_peer(const char *peer);

/* Frees c's answer, then msr_tcall_init(c). */
void msr_tcall_reset(tcall_t *c);

/* Resets c and hands it to the core as a call of method m; the answer
 * comes with the core's next flush (held calls later). */
void msr_tcall_send(msr_coord_t *co, tcall_t *c, msr_rpc_method_t m, const ProtobufCMessage *req);

/* msr_tcall_send, then a flush: an answer due at once is in c. */
void msr_tcall_call(msr_coord_t *co, tcall_t *c, msr_rpc_method_t m, const ProtobufCMessage *req);

/* ---- a coordinator served over loopback ---- */

typedef struct msr_tserved {
    msr_coord_server_t *server;
    pthread_t thread;
    volatile sig_atomic_t stop;
    int port;
    char target[64]; /* "127.0.0.1:<port>" */
} msr_tserved_t;

/* A coordinator server for cfg on 127.0.0.1 (a port of its own), run by
 * a thread until msr_tserved_stop. */
void msr_tserved_start(msr_tserved_t *s, const msr_coord_config_t *cfg);
/* msr_tserved_start for a job "j" of one rank with token "t". */
void msr_tserved_start_one(msr_tserved_t *s);
/* msr_tserved_start for a job "j" of nodes nodes of one worker each with
 * token "tok", its nodes not lost within a test's time. */
void msr_tserved_start_nodes(msr_tserved_t *s, int nodes);
/* Stops the thread and destroys the server. */
void msr_tserved_stop(msr_tserved_t *s);

/* ---- a node's call over a socket ---- */

typedef struct msr_tnode_call {
    msr_rpc_async_t a;
    int done, code;  /* code: 0, gRPC's code, or -1 */
    int state, rank; /* a heartbeat's answer (rank -1: no assignment) */
    char id[32];     /* a join's answer: the node's id (kept until one) */
    char message[400];
} msr_tnode_call_t;

/* Starts c as a call of method m with req (packed now) on ch over loop,
 * with a deadline of 20 s; c's answer but its id is cleared. */
void msr_tnode_call_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, msr_tnode_call_t *c,
                          msr_rpc_method_t m, const ProtobufCMessage *req);
/* Polls loop until every call of c[0..n) is done (20 s at most). */
void msr_tnode_calls_wait(msr_rpc_loop_t *loop, msr_tnode_call_t *c, int n);

/* ---- a rank's environment for msr_init ---- */

/* Rank 0 of a one-rank job that talks to the coordinator at target
 * ("host:port") itself, with token: no agent. */
void msr_tenv_direct(const char *target, const char *token);
/* No job at all: msr_init makes a one-rank job with its store in the
 * process. */
void msr_tenv_singleton(void);
/* msr_init in the environment set last, check(ctx), msr_finalize. */
void msr_tenv_check(void (*check)(msr_ctx_t *ctx));

/* ---- a relay agent's server over loopback ---- */

typedef struct msr_trelay {
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *up; /* to the coordinator */
    msr_relay_server_t *server;
    pthread_t thread;
    volatile sig_atomic_t stop;
    int running;
    int port;
    char target[64]; /* "127.0.0.1:<port>" */
} msr_trelay_t;

/* A relay agent's server as relay id for nodes nodes on 127.0.0.1 (a port
 * of its own), relaying to the coordinator at coord with token, run by a
 * thread until msr_trelay_kill. */
void msr_trelay_start(msr_trelay_t *r, const char *coord, const char *token, const char *id,
                      int nodes);
/* The relay dies: its thread stops and destroys the server, so the calls
 * it held end with an error. */
void msr_trelay_kill(msr_trelay_t *r);
/* msr_trelay_kill where it still runs, then frees the rest. */
void msr_trelay_stop(msr_trelay_t *r);

#endif
