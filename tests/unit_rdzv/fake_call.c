/* The fake call of the held-call and store-core unit tests (fake_call.h). */
#include "tests/unit_rdzv/fake_call.h"

#include <stdio.h>
#include <string.h>

#include "base/time.h"
#include "tests/runner.h"

void msr_tcall_init(tcall_t *c)
{
    memset(c, 0, sizeof *c);
    c->deadline = MSR_DEADLINE_NEVER;
}

void msr_tcall_answer(tcall_t *c)
{
    MSR_CHECK_MSG(!c->answered, "a call answered twice");
    c->answered = 1;
}

void msr_tcall_set_data(void *ctx, void *call, void *data)
{
    (void)ctx;
    ((tcall_t *)call)->data = data;
}

void *msr_tcall_get_data(void *ctx, void *call)
{
    (void)ctx;
    return ((tcall_t *)call)->data;
}

uint64_t msr_tcall_deadline(void *ctx, void *call)
{
    (void)ctx;
    return ((tcall_t *)call)->deadline;
}

const char *msr_tcall_peer(void *ctx, void *call)
{
    (void)ctx;
    return ((tcall_t *)call)->peer;
}

void msr_tcall_fail(void *ctx, void *call, msr_rpc_code_t code, const char *message)
{
    (void)ctx;
    tcall_t *c = call;
    msr_tcall_answer(c);
    c->code = code;
    snprintf(c->message, sizeof c->message, "%s", message);
}
