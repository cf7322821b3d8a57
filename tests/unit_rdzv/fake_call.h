/* A fake call for the unit tests of held calls and the store core
 * (test_held, test_held_budget, test_store_core): a plain struct standing
 * for a gRPC call, and the io callbacks held.h and store_core.h ask of
 * their user (its slot, deadline, peer and failure) written once. The
 * coordinator's tests use it through fixtures.h. */
#ifndef MSR_TESTS_FAKE_CALL_H
#define MSR_TESTS_FAKE_CALL_H

#include <stdint.h>

#include "rendezvous/rpc.h"

typedef struct tcall {
    msr_rpc_method_t method;
    const char *peer; /* as gRPC names it */
    uint64_t deadline;
    void *data;
    int answered;
    int code; /* msr_rpc_code_t; 0 = OK */
    char message[600];
    ProtobufCMessage *resp;
} tcall_t;

/* c zeroed, with no deadline of its own (MSR_DEADLINE_NEVER). */
void msr_tcall_init(tcall_t *c);
/* Marks c answered; a second answer fails the test ("a call answered
 * twice"). */
void msr_tcall_answer(tcall_t *c);

/* The io callbacks (ctx unused): the slot, the deadline and the peer are
 * the call's fields. */
void msr_tcall_set_data(void *ctx, void *call, void *data);
void *msr_tcall_get_data(void *ctx, void *call);
uint64_t msr_tcall_deadline(void *ctx, void *call);
const char *msr_tcall_peer(void *ctx, void *call);
/* A failure answers the call once (msr_tcall_answer) and keeps its code
 * and message. */
void msr_tcall_fail(void *ctx, void *call, msr_rpc_code_t code, const char *message);

#endif
