/* A node's store calls started asynchronously on a loop the test polls
 * itself, and a relay whose server that loop runs, for the relay tests
 * (test_relay_add, test_relay_merge, test_relay_store): the test decides
 * which calls reach the relay within one poll. Every helper fails the test
 * (MSR_CHECK) where its step fails. */
#ifndef MSR_TESTS_RELAY_OPS_H
#define MSR_TESTS_RELAY_OPS_H

#include <stdio.h>
#include <string.h>

#include "base/time.h"
#include "rendezvous/relay.h"
#include "rendezvous/rpc.h"
#include "tests/runner.h"
#include "tests/unit_rdzv/fixtures.h"

/* ---- a call and its answer ---- */

typedef struct msr_top {
    msr_rpc_async_t a;
    int done;
} msr_top_t;

static inline void msr_top_done(msr_rpc_async_t *a)
{
    ((msr_top_t *)a)->done = 1;
}

/* Starts o as a call of m with req on ch, with a deadline in ms. */
static inline void msr_top_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, msr_top_t *o,
                                 msr_rpc_method_t m, const ProtobufCMessage *req, int64_t ms)
{
    memset(o, 0, sizeof *o);
    o->a.method = m;
    o->a.deadline = msr_deadline_in_ms(ms);
    o->a.wait_for_ready = 1;
    o->a.done = msr_top_done;
    MSR_CHECK_OK(msr_rpc_call_start(ch, loop, &o->a, req));
}

/* Whether the msr_top_t at arg is answered (a condition for
 * msr_tpoll_until). */
static inline int msr_top_is_done(void *arg)
{
    return ((msr_top_t *)arg)->done;
}

/* Polls loop until cond(arg) (20 s at most, what names it in the failure). */
static inline void msr_tpoll_until(msr_rpc_loop_t *loop, int (*cond)(void *), void *arg,
                                   const char *what)
{
    uint64_t limit = msr_deadline_in_ms(20000);
    while (!cond(arg)) {
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "%s: not within 20 s", what);
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(20));
    }
}

/* The calls named name ("Add", "Barrier") the coordinator at target
 * served, by its Status. */
static inline uint64_t msr_tcoord_served(const char *target, const char *name)
{
    msr_rpc_channel_t *ch;
    MSR_CHECK_OK(msr_rpc_channel_create_own(target, "tok", &ch));
    Msr__StatusRequest req = MSR__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    MSR_CHECK_OK(msr_rpc_call(ch, MSR_RPC_STATUS, &req.base, msr_deadline_in_ms(10000), 1, &resp));
    const Msr__StatusResponse *r = (const Msr__StatusResponse *)resp;
    uint64_t n = 0;
    for (size_t i = 0; i < r->n_call_names && i < r->n_call_counts; i++)
        if (strcmp(r->call_names[i], name) == 0)
            n = r->call_counts[i];
    msr_rpc_message_free(resp);
    msr_rpc_channel_destroy(ch);
    return n;
}

/* ---- a coordinator and one relay, run by the test's loop ---- */

/* via reaches the relay, direct the coordinator, up is the relay's own
 * channel upstream. A test that kills the relay itself sets relay and up
 * to NULL. */
typedef struct msr_trig {
    msr_tserved_t s;
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *up, *via, *direct;
    msr_relay_server_t *relay;
} msr_trig_t;

/* A coordinator for 8 nodes and relay "a" of 4 nodes under it. */
static inline void msr_trig_start(msr_trig_t *g)
{
    int port = 0;
    char target[64];
    msr_tserved_start_nodes(&g->s, 8);
    MSR_CHECK_OK(msr_rpc_loop_create(&g->loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(g->s.target, "tok", &g->up));
    MSR_CHECK_OK(
        msr_relay_server_create(g->loop, "127.0.0.1:0", "tok", g->up, "a", 4, &port, &g->relay));
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    MSR_CHECK_OK(msr_rpc_channel_create_own(target, "tok", &g->via));
    MSR_CHECK_OK(msr_rpc_channel_create_own(g->s.target, "tok", &g->direct));
}

static inline void msr_trig_stop(msr_trig_t *g)
{
    msr_rpc_channel_destroy(g->via);
    msr_rpc_channel_destroy(g->direct);
    msr_relay_server_destroy(g->relay);
    if (g->up != NULL)
        msr_rpc_channel_destroy(g->up);
    msr_rpc_loop_destroy(g->loop);
    msr_tserved_stop(&g->s);
}

#endif
