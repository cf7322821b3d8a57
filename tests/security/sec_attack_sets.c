/* Huge Set requests on a real coordinator: without the token they must be
 * refused before their bodies are read, so its memory stays flat and
 * valid calls stay fast; a valid client that cancels them while their
 * bodies are on the way is logged as having cancelled them, not as sending
 * malformed requests (sec_attack.h). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>

#include "base/status.h"
#include "base/time.h"
#include "tests/security/sec_attack.h"

/* ---- the attacker: huge Sets without the token ---- */

#define ATTACK_SLOTS 6

/* The most the coordinator's peak memory may grow under the attack (it
 * grew by 1.5 GB when bodies were read before the token was checked).
 * AddressSanitizer keeps freed memory in a quarantine of 256 MiB. */
#if defined(__SANITIZE_ADDRESS__)
#define GROWTH_LIMIT_KB ((64 + 448) * 1024)
#else
#define GROWTH_LIMIT_KB (64 * 1024)
#endif

/* The attack's gRPC channels, one per slot (no limit on what they send),
 * and the completion queue of their calls. */
typedef struct attack {
    grpc_completion_queue *cq;
    grpc_channel *chans[ATTACK_SLOTS];
    attack_call_t calls[ATTACK_SLOTS];
    int started, done, denied;
    double seconds;
} attack_t;

static void attack_open(attack_t *at, const char *target)
{
    memset(at, 0, sizeof *at);
    at->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_arg args[] = {
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = -1}},
        {GRPC_ARG_INTEGER, GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, {.integer = 1}},
    };
    grpc_channel_args cargs = {MSR_ARRAY_SIZE(args), args};
    char gtarget[80];
    snprintf(gtarget, sizeof gtarget, "ipv4:%s", target);
    for (int i = 0; i < ATTACK_SLOTS; i++) {
        grpc_channel_credentials *creds = grpc_insecure_credentials_create();
        at->chans[i] = grpc_channel_create(gtarget, creds, &cargs);
        grpc_channel_credentials_release(creds);
    }
}

static void attack_close(attack_t *at)
{
    for (int i = 0; i < ATTACK_SLOTS; i++)
        grpc_channel_destroy(at->chans[i]);
    grpc_completion_queue_shutdown(at->cq);
    while (grpc_completion_queue_next(at->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(at->cq);
}

/* Sends body as Set calls, one in flight per slot, back to back: at
 * least min_calls and for at least 3 s, but no new call after 20 s;
 * counts the calls done and those refused with PERMISSION_DENIED. */
static void attack_run(attack_t *at, grpc_slice body, int min_calls)
{
    uint64_t t0 = msr_now_ns(), stop_starting = msr_deadline_in_ms(20000);
    uint64_t min_end = msr_deadline_in_ms(3000);
    int in_flight = 0;
    for (int i = 0; i < ATTACK_SLOTS; i++) {
        sa_attack_start(at->chans[i], at->cq, &at->calls[i], body, i);
        at->started++;
        in_flight++;
    }
    while (in_flight > 0) {
        grpc_event ev = grpc_completion_queue_next(
            at->cq,
            gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(90, GPR_TIMESPAN)),
            NULL);
        MSR_CHECK_MSG(ev.type == GRPC_OP_COMPLETE, "attack calls did not finish in 90 s");
        attack_call_t *ac = ev.tag;
        int slot = (int)(ac - at->calls);
        if (--ac->pending > 0)
            continue;
        if (ac->code == GRPC_STATUS_PERMISSION_DENIED)
            at->denied++;
        else
            fprintf(stderr, "attack call %d ended with status %d\n", at->done, (int)ac->code);
        sa_attack_finish(ac);
        at->done++;
        in_flight--;
        uint64_t now = msr_now_ns();
        if ((at->started < min_calls || now < min_end) && now < stop_starting) {
            sa_attack_start(at->chans[slot], at->cq, ac, body, at->started);
            at->started++;
            in_flight++;
        }
    }
    at->seconds = (double)(msr_now_ns() - t0) / 1e9;
}

static void test_big_unauthenticated_sets(void)
{
    coord_proc_t cp;
    sa_coord_start(&cp, 2, 0);
    msr_rpc_library_ref();
    prober_t pr;
    memset(&pr, 0, sizeof pr);
    MSR_CHECK_OK(msr_rpc_channel_create(cp.target, TOKEN, &pr.ch));
    latency_t *before = calloc(1, sizeof *before);
    for (int i = 0; i < 300; i++)
        sa_small_set(pr.ch, before);
    MSR_CHECK_EQ(before->failed, 0);
    long hwm0 = sa_proc_kb(cp.pid, "VmHWM"), rss0 = sa_proc_kb(cp.pid, "VmRSS");

    /* Six attackers, each on a connection of its own, send 256 MiB Sets
     * back to back: at least 24 calls (6 GiB) and for at least 3 s, but no
     * new call after 20 s. */
    const size_t value_len = (size_t)256 << 20;
    grpc_slice body = sa_set_body(value_len);
    static attack_t at;
    attack_open(&at, cp.target);
    pthread_t th;
    MSR_CHECK(pthread_create(&th, NULL, sa_probe_loop, &pr) == 0);
    attack_run(&at, body, 24);
    atomic_store(&pr.stop, 1);
    pthread_join(th, NULL);
    long hwm1 = sa_proc_kb(cp.pid, "VmHWM"), rss1 = sa_proc_kb(cp.pid, "VmRSS");

    printf("attack: %d unauthenticated Set calls of %zu MiB (%d at a time) in %.1f s, "
           "%d refused with PERMISSION_DENIED\n",
           at.done, value_len >> 20, ATTACK_SLOTS, at.seconds, at.denied);
    printf("coordinator memory: VmHWM %ld -> %ld kB (+%ld), VmRSS %ld -> %ld kB\n", hwm0, hwm1,
           hwm1 - hwm0, rss0, rss1);
    printf("valid 100-byte Set latency (ms):\n%-14s %6s %8s %8s %8s %6s\n", "phase", "sets", "p50",
           "p99", "max", "failed");
    sa_latency_row("idle", before);
    sa_latency_row("under attack", &pr.lat);

    attack_close(&at);
    grpc_slice_unref(body);
    msr_rpc_channel_destroy(pr.ch);
    free(before);
    sa_coord_end(&cp);

    int refusal_lines = sa_log_lines(&cp, "missing or wrong job token");
    printf("refusals logged in %d lines\n", refusal_lines);
    unlink(cp.log);
    MSR_CHECK_EQ(at.denied, at.done);
    MSR_CHECK_EQ(pr.lat.failed, 0);
    /* one line for the first refusal of a host, then one every 5 s */
    MSR_CHECK_MSG(refusal_lines >= 1 && refusal_lines <= 2 + (int)(at.seconds / 5),
                  "%d log lines for %d refused calls in %.1f s", refusal_lines, at.done,
                  at.seconds);
    MSR_CHECK_MSG(hwm1 - hwm0 < GROWTH_LIMIT_KB,
                  "the coordinator's peak memory grew by %ld kB under the attack", hwm1 - hwm0);
    msr_rpc_library_unref();
}

/* ---- a valid client that cancels its calls mid-send ---- */

/* The next event of cq, waiting 30 s at most. */
static grpc_event next_event(grpc_completion_queue *cq)
{
    return grpc_completion_queue_next(
        cq, gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(30, GPR_TIMESPAN)),
        NULL);
}

/* Connects ch: one call without the token, refused. */
static void warm_up(grpc_channel *ch, grpc_completion_queue *cq)
{
    attack_call_t warm;
    grpc_slice tiny = sa_set_body(8);
    sa_attack_start(ch, cq, &warm, tiny, 0);
    while (warm.pending > 0) {
        grpc_event ev = next_event(cq);
        MSR_CHECK(ev.type == GRPC_OP_COMPLETE);
        warm.pending--;
    }
    MSR_CHECK_EQ(warm.code, GRPC_STATUS_PERMISSION_DENIED);
    sa_attack_finish(&warm);
    grpc_slice_unref(tiny);
}

/* A Set call with the token, its parts and what it ends with. */
typedef struct set_call {
    grpc_call *call;
    grpc_metadata token;
    grpc_byte_buffer *body, *resp;
    grpc_metadata_array md, trail;
    grpc_status_code code;
    grpc_slice details;
} set_call_t;

static void set_call_create(set_call_t *c, grpc_channel *ch, grpc_completion_queue *cq,
                            grpc_slice *body)
{
    memset(c, 0, sizeof *c);
    c->call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                       grpc_slice_from_static_string("/msr.Store/Set"), NULL,
                                       gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    c->body = grpc_raw_byte_buffer_create(body, 1);
    c->token = (grpc_metadata){grpc_slice_from_static_string(MSR_TOKEN_METADATA),
                               grpc_slice_from_static_string(TOKEN),
                               {{NULL, NULL, NULL, NULL}}};
    grpc_metadata_array_init(&c->md);
    grpc_metadata_array_init(&c->trail);
    c->code = GRPC_STATUS_OK;
    c->details = grpc_empty_slice();
}

static void set_call_destroy(set_call_t *c)
{
    grpc_call_unref(c->call);
    grpc_byte_buffer_destroy(c->body);
    if (c->resp)
        grpc_byte_buffer_destroy(c->resp);
    grpc_metadata_array_destroy(&c->md);
    grpc_metadata_array_destroy(&c->trail);
    grpc_slice_unref(c->details);
}

/* The big call's headers (tag 1), sent and waited for, its status asked
 * for (tag 2), then its body on the way (tag 4). */
static void big_start(set_call_t *c, grpc_completion_queue *cq, int k)
{
    grpc_op ops[1];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &c->token;
    MSR_CHECK(grpc_call_start_batch(c->call, ops, 1, (void *)1, NULL) == GRPC_CALL_OK);
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &c->md;
    ops[0].data.recv_status_on_client.status = &c->code;
    ops[0].data.recv_status_on_client.status_details = &c->details;
    MSR_CHECK(grpc_call_start_batch(c->call, ops, 1, (void *)2, NULL) == GRPC_CALL_OK);
    grpc_event ev = next_event(cq);
    MSR_CHECK_MSG(ev.type == GRPC_OP_COMPLETE && ev.tag == (void *)1 && ev.success,
                  "call %d: its headers were not sent", k);
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_MESSAGE;
    ops[0].data.send_message.send_message = c->body;
    MSR_CHECK(grpc_call_start_batch(c->call, ops, 1, (void *)4, NULL) == GRPC_CALL_OK);
}

/* The small Set whole, in one batch (tag 3). */
static void probe_start(set_call_t *c)
{
    c->code = GRPC_STATUS_UNKNOWN;
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &c->token;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = c->body;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &c->resp;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &c->trail;
    ops[5].data.recv_status_on_client.status = &c->code;
    ops[5].data.recv_status_on_client.status_details = &c->details;
    MSR_CHECK(grpc_call_start_batch(c->call, ops, 6, (void *)3, NULL) == GRPC_CALL_OK);
}

/* Call k: a big Set cancelled once the coordinator has it and is reading
 * its body (see test_cancelled_mid_send); 1 when it ended cancelled, 0
 * when it ended before its cancel. */
static int cancel_mid_send(grpc_channel *ch, grpc_completion_queue *cq, grpc_slice *body,
                           grpc_slice *small, int k)
{
    set_call_t big, probe;
    set_call_create(&big, ch, cq, body);
    big_start(&big, cq, k);
    /* the small Set, after it on the same connection */
    set_call_create(&probe, ch, cq, small);
    probe_start(&probe);
    int big_left = 2, probe_left = 1, cancelled = 0;
    while (big_left > 0 || probe_left > 0) {
        if (probe_left == 0 && !cancelled) {
            MSR_CHECK_MSG(probe.code == GRPC_STATUS_OK, "the small Set: status %d",
                          (int)probe.code);
            grpc_call_cancel(big.call, NULL);
            cancelled = 1;
        }
        grpc_event ev = next_event(cq);
        MSR_CHECK_MSG(ev.type == GRPC_OP_COMPLETE, "call %d: no event in 30 s", k);
        if (ev.tag == (void *)3)
            probe_left--;
        else
            big_left--;
    }
    int ended_cancelled = big.code == GRPC_STATUS_CANCELLED;
    if (!ended_cancelled)
        printf("call %d ended with status %d before its cancel\n", k, (int)big.code);
    set_call_destroy(&probe);
    set_call_destroy(&big);
    return ended_cancelled;
}

/* A valid client that cancels its calls while their bodies are on the way
 * is logged as having cancelled them, not as sending malformed requests. */
static void test_cancelled_mid_send(void)
{
    coord_proc_t cp;
    sa_coord_start(&cp, 2, 0);
    msr_rpc_library_ref();
    grpc_slice body = sa_set_body((size_t)48 << 20);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_arg args[] = {{GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = -1}}};
    grpc_channel_args cargs = {MSR_ARRAY_SIZE(args), args};
    char gtarget[80];
    snprintf(gtarget, sizeof gtarget, "ipv4:%s", cp.target);
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(gtarget, creds, &cargs);
    grpc_channel_credentials_release(creds);
    warm_up(ch, cq); /* connect first: a refused call */
    /* Each big call is cancelled once the coordinator has it and is reading
     * its body: a small valid Set on the same connection, started once the
     * big call's headers are on their way (its stream comes after), has
     * been answered (the coordinator takes calls in the order of their
     * streams), and 48 MiB take far longer to arrive than that answer. A
     * call that ended before its cancel is not counted as cancelled. */
    grpc_slice small = sa_set_body(8);
    const int calls = 5;
    int cancelled_sent = 0;
    for (int k = 0; k < calls; k++)
        cancelled_sent += cancel_mid_send(ch, cq, &body, &small, k);
    grpc_slice_unref(small);
    /* a valid call after them: the coordinator has handled the cancels */
    msr_rpc_channel_t *good = NULL;
    MSR_CHECK_OK(msr_rpc_channel_create(cp.target, TOKEN, &good));
    latency_t *l = calloc(1, sizeof *l);
    sa_small_set(good, l);
    MSR_CHECK_EQ(l->failed, 0);
    free(l);
    msr_rpc_channel_destroy(good);
    grpc_channel_destroy(ch);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    grpc_slice_unref(body);
    sa_coord_end(&cp);
    int malformed = sa_log_lines(&cp, "malformed"), cancelled = sa_log_lines(&cp, "cancelled");
    printf("%d of %d calls cancelled mid-send: %d log lines say cancelled, %d say malformed\n",
           cancelled_sent, calls, cancelled, malformed);
    if (getenv("SEC_KEEP_LOG"))
        printf("log: %s\n", cp.log);
    else
        unlink(cp.log);
    msr_rpc_library_unref();
    MSR_CHECK_EQ(malformed, 0);
    MSR_CHECK(cancelled_sent >= 1);
    MSR_CHECK(cancelled >= 1);
}

static const msr_test_t tests[] = {
    {"big_unauthenticated_sets", test_big_unauthenticated_sets, 150},
    {"cancelled_mid_send", test_cancelled_mid_send, 60},
};

const msr_test_piece_t sa_sets_tests = MSR_TEST_PIECE(tests);
