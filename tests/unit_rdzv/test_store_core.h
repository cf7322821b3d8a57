/* What the pieces of the store core's unit test share (test_store_core.c
 * defines it): the fake ops' context, a core made with them, and the
 * calls' helpers. Every helper fails the test (MSR_CHECK) where its step
 * fails. */
#ifndef MSR_TESTS_TEST_STORE_CORE_H
#define MSR_TESTS_TEST_STORE_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "rendezvous/store_core.h"
#include "tests/runner.h"
#include "tests/pieces.h"
#include "tests/unit_rdzv/fake_call.h"

/* Each piece's tests (test_store_core_<theme>.c). */
extern const msr_test_piece_t sc_ops_tests, sc_limits_tests, sc_relay_tests;

/* The fake ops' context: what their callbacks answer and count. */
typedef struct tctx {
    int generation;
    uint32_t participants;
    int keys_changed;
    int writes_remembered;
    int seen; /* request_seen answers 1 */
} tctx_t;

msr_store_ops_t sc_ops_for(tctx_t *t);
msr_store_core_t *sc_core_new(tctx_t *t, const msr_store_limits_t *limits);
void sc_call_init(tcall_t *c, msr_rpc_method_t m);
void sc_done(tcall_t *c);
void sc_do_set(msr_store_core_t *core, tcall_t *c, const char *key, const char *value);
void sc_do_get(msr_store_core_t *core, tcall_t *c, const char *key, uint32_t wait_ms);
void sc_do_add(msr_store_core_t *core, tcall_t *c, const char *key, int64_t delta);
void sc_do_barrier(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t count,
                   uint32_t weight, uint32_t wait_ms);
void sc_do_gather(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t count,
                  uint32_t index, const char *data, size_t len, uint32_t wait_ms);
void sc_check_value(tcall_t *c, const char *want);
void sc_do_publish(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t index,
                   const char *value);
void sc_do_fetch(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t *indices, size_t n,
                 uint32_t wait_ms);

#endif
