/* Held calls alone (rendezvous/held.h): the slot, the one heap of
 * deadlines, each kind's end handed to its own handler, and failing. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/time.h"
#include "rendezvous/held.h"
#include "tests/runner.h"
#include "tests/unit_rdzv/fake_call.h"

typedef struct tctx {
    msr_held_calls_t *hc;
    tcall_t *order[8]; /* the calls whose end a handler saw, in order */
    int ends[8];       /* 'e' expired or 'c' cancelled, per entry of order */
    msr_held_kind_t kinds[8];
    int n;
} tctx_t;

/* Failing is checked here call by call (test_fail fails one call twice):
 * the fake call's fields, without msr_tcall_fail's answered-once check. */
static void t_fail(void *ctx, void *call, msr_rpc_code_t code, const char *message)
{
    (void)ctx;
    tcall_t *c = call;
    c->code = code;
    snprintf(c->message, sizeof c->message, "%s", message);
}

static void note(tctx_t *t, msr_held_t *h, int end)
{
    MSR_CHECK(t->n < 8);
    t->order[t->n] = h->call;
    t->ends[t->n] = end;
    t->kinds[t->n] = h->kind;
    t->n++;
    msr_held_free(t->hc, h);
}

static void t_expired(void *ctx, msr_held_t *h)
{
    note(ctx, h, 'e');
}

static void t_cancelled(void *ctx, msr_held_t *h)
{
    note(ctx, h, 'c');
}

static void setup(msr_held_calls_t *hc, tctx_t *t)
{
    memset(t, 0, sizeof *t);
    t->hc = hc;
    msr_held_io_t io = {t,   msr_tcall_set_data, msr_tcall_get_data, msr_tcall_deadline, t_fail,
                        NULL};
    msr_held_calls_init(hc, &io);
    msr_held_handler_t h = {t, t_expired, t_cancelled};
    msr_held_calls_handle(hc, MSR_HELD_GET, &h);
    msr_held_calls_handle(hc, MSR_HELD_HEARTBEAT, &h);
    msr_held_calls_handle(hc, MSR_HELD_ANSWER, &h);
}

/* code -1: not failed */
static void call_init(tcall_t *c)
{
    msr_tcall_init(c);
    c->code = -1;
}

/* Calls of different kinds in one table end earliest first at a tick, each
 * through its kind's handler, and leave their slots empty. */
static void test_tick_in_deadline_order(void)
{
    msr_held_calls_t hc;
    tctx_t t;
    setup(&hc, &t);
    tcall_t a, b, n;
    call_init(&a);
    call_init(&b);
    call_init(&n);
    msr_list_t list;
    msr_list_init(&list);
    msr_held_t *ha = msr_held_wait(&hc, sizeof(msr_held_t), 0, MSR_HELD_GET, &a, NULL, &list, 2000);
    msr_held_t *hb =
        msr_held_wait(&hc, sizeof(msr_held_t), 0, MSR_HELD_HEARTBEAT, &b, &t, NULL, 1000);
    msr_held_t *hn = msr_held_wait(&hc, sizeof(msr_held_t), 0, MSR_HELD_GET, &n, NULL, &list, -1);
    MSR_CHECK(ha && hb && hn);
    MSR_CHECK(a.data == ha && b.data == hb && n.data == hn);
    MSR_CHECK(msr_held_of(&hc, &a) == ha);
    MSR_CHECK(hb->owner == &t);
    MSR_CHECK_EQ(ha->wait_ms, 2000);
    MSR_CHECK(!msr_list_empty(&list));
    uint64_t first = msr_held_next_deadline(&hc);
    MSR_CHECK(first != MSR_DEADLINE_NEVER && first == hb->timer.deadline);
    msr_held_tick(&hc, first - 1);
    MSR_CHECK_EQ(t.n, 0);
    msr_held_tick(&hc, msr_now_ns() + 10ull * 1000000000ull);
    MSR_CHECK_EQ(t.n, 2); /* the call with no deadline stays */
    MSR_CHECK(t.order[0] == &b && t.ends[0] == 'e' && t.kinds[0] == MSR_HELD_HEARTBEAT);
    MSR_CHECK(t.order[1] == &a && t.ends[1] == 'e' && t.kinds[1] == MSR_HELD_GET);
    MSR_CHECK(a.data == NULL && b.data == NULL);
    MSR_CHECK_EQ(msr_held_next_deadline(&hc), MSR_DEADLINE_NEVER);
    MSR_CHECK_EQ(msr_held_cancel(&hc, &n), 1);
    MSR_CHECK(t.order[2] == &n && t.ends[2] == 'c');
    MSR_CHECK(msr_list_empty(&list));
    MSR_CHECK_EQ(msr_held_cancel(&hc, &n), 0); /* no longer held */
    msr_held_calls_cleanup(&hc);
}

/* A call's own deadline bounds its wait when it comes first; a call held
 * with msr_held_new has no timer at all. */
static void test_deadlines(void)
{
    msr_held_calls_t hc;
    tctx_t t;
    setup(&hc, &t);
    tcall_t a, h;
    call_init(&a);
    call_init(&h);
    a.deadline = msr_now_ns() + 1000000ull; /* 1 ms, before the 60 s wait */
    msr_held_t *ha = msr_held_wait(&hc, sizeof(msr_held_t), 0, MSR_HELD_GET, &a, NULL, NULL, 60000);
    MSR_CHECK(ha != NULL);
    MSR_CHECK_EQ(msr_held_next_deadline(&hc), a.deadline);
    h.deadline = msr_now_ns(); /* ignored: an answer waits for a save */
    msr_held_t *hh = msr_held_new(&hc, sizeof(msr_held_t) + 32, 0, MSR_HELD_ANSWER, &h, NULL, NULL);
    MSR_CHECK(hh != NULL && h.data == hh && !msr_timer_armed(&hh->timer));
    msr_held_tick(&hc, a.deadline);
    MSR_CHECK_EQ(t.n, 1);
    MSR_CHECK(t.order[0] == &a);
    /* take leaves the record the caller's */
    msr_held_take(&hc, hh);
    MSR_CHECK(h.data == NULL);
    MSR_CHECK_EQ(msr_held_cancel(&hc, &h), 0);
    msr_free(hh);
    msr_held_calls_cleanup(&hc);
}

/* Failing formats once and goes to the io's fail, cut at 511 bytes. */
static void test_fail(void)
{
    msr_held_calls_t hc;
    tctx_t t;
    setup(&hc, &t);
    tcall_t c;
    call_init(&c);
    msr_held_fail(&hc, &c, MSR_RPC_NOT_FOUND, "key '%s' not found (%d)", "k", 7);
    MSR_CHECK_EQ(c.code, MSR_RPC_NOT_FOUND);
    MSR_CHECK_STR(c.message, "key 'k' not found (7)");
    char longer[700];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    msr_held_fail(&hc, &c, MSR_RPC_ABORTED, "%s", longer);
    MSR_CHECK_EQ(c.code, MSR_RPC_ABORTED);
    MSR_CHECK_EQ(strlen(c.message), 511);
    msr_held_calls_cleanup(&hc);
}

static const msr_test_t tests[] = {
    {"tick_in_deadline_order", test_tick_in_deadline_order, 10},
    {"deadlines", test_deadlines, 10},
    {"fail", test_fail, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
