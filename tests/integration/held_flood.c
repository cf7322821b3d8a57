/* An attack client for the bound on held calls, against a real coordinator
 * (issue 38's reproduction):
 *
 *   held_flood ADDR TOKEN COORD_PID N INDICES CLIENT_BYTES
 *
 * N concurrent Fetch calls for a name nobody publishes, each asking for
 * INDICES entries and the longest wait, from one client. The coordinator
 * holds calls until the client's held bytes reach CLIENT_BYTES (its bound)
 * and refuses the rest with RESOURCE_EXHAUSTED naming that bound; its
 * memory must grow by no more than the bound plus a margin. Then every
 * held call is cancelled, and a second round must be admitted and refused
 * alike (the cancelled calls gave their charge back). Prints the
 * coordinator's memory at each step; exits 1 on the first broken promise.
 *
 * HELD_FLOOD_MEASURE_ONLY=1: nothing is checked; it waits until the
 * coordinator's memory stops growing, to measure one without the bound.
 * HELD_FLOOD_FIT=K and HELD_FLOOD_REFUSAL=TEXT: exactly K calls fit (a
 * bound on the count rather than the bytes) and the refusal must say TEXT
 * (a node's proxy, whose words differ, as the server under test). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/time.h"
#include "rendezvous/rpc.h"
#include "tests/integration/flood_util.h"

/* What the coordinator may hold beyond the bound: for each call in
 * flight, gRPC's buffer of its packed request (under its 64 KiB
 * flow-control window) and its own state; and allocator slack. */
#define MARGIN_PER_CALL_KIB 128l
/* AddressSanitizer (in a sanitizer build the coordinator has it too) keeps
 * freed memory in a quarantine of 256 MiB, with redzones around every
 * block. */
#if defined(__SANITIZE_ADDRESS__)
#define MARGIN_KIB (16l * 1024 + 448l * 1024)
#else
#define MARGIN_KIB (16l * 1024)
#endif

static long coord_pid;

typedef struct round {
    int n, done, refused, other;
    char first_refusal[256];
    msr_rpc_async_t *calls;
} round_t;

static void on_done(msr_rpc_async_t *a)
{
    round_t *r = a->arg;
    r->done++;
    if (a->grpc_code == 8 /* RESOURCE_EXHAUSTED */) {
        if (r->refused++ == 0)
            snprintf(r->first_refusal, sizeof r->first_refusal, "%s", a->err);
    } else if (a->grpc_code != 1 /* CANCELLED */) {
        if (r->other++ == 0)
            fprintf(stderr, "held_flood: a fetch ended with code %d: %s\n", a->grpc_code, a->err);
    }
    msr_rpc_async_cleanup(a);
}

/* Polls until cond holds or deadline passes; 1 when it holds. */
static int poll_until(msr_rpc_loop_t *loop, const round_t *r, int refused_at_least,
                      uint64_t deadline)
{
    while (r->refused < refused_at_least && msr_now_ns() < deadline)
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(100));
    return r->refused >= refused_at_least;
}

/* Without a bound: polls until the coordinator's memory has not grown for
 * a second (a measurement only). */
static void poll_until_still(msr_rpc_loop_t *loop, uint64_t deadline)
{
    long last = msr_flood_proc_kib(coord_pid, "VmRSS");
    uint64_t still_since = msr_now_ns();
    while (msr_now_ns() < deadline && msr_now_ns() - still_since < 1000000000ull) {
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(100));
        long now = msr_flood_proc_kib(coord_pid, "VmRSS");
        if (now != last) {
            last = now;
            still_since = msr_now_ns();
        }
    }
}

static void round_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, round_t *r,
                        const Msr__FetchRequest *req)
{
    memset(r->calls, 0, (size_t)r->n * sizeof *r->calls);
    r->done = r->refused = r->other = 0;
    for (int i = 0; i < r->n; i++) {
        msr_rpc_async_t *a = &r->calls[i];
        a->method = MSR_RPC_FETCH;
        a->deadline = msr_deadline_in_ms(600000);
        a->wait_for_ready = 1;
        a->done = on_done;
        a->arg = r;
        CHECK(msr_rpc_call_start(ch, loop, a, &req->base) == MSR_OK, "cannot start fetch %d: %s", i,
              msr_err_msg());
    }
}

/* Cancels every call still held and waits for all to end. */
static void round_cancel(msr_rpc_loop_t *loop, round_t *r)
{
    for (int i = 0; i < r->n; i++)
        msr_rpc_async_cancel(&r->calls[i]);
    uint64_t deadline = msr_deadline_in_ms(60000);
    while (r->done < r->n && msr_now_ns() < deadline)
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(100));
    CHECK(r->done == r->n, "only %d of %d fetches ended after their cancel", r->done, r->n);
}

/* One round, until the bound is met. */
static void round_run(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, round_t *r,
                      const Msr__FetchRequest *req, unsigned long long client_bytes,
                      int measure_only, long base_kib)
{
    /* A held fetch keeps its indices twice (request and copy): at most
     * this many fit the bound. */
    unsigned long long per_call = 2ull * 4 * req->n_indices;
    int fit = (int)(client_bytes / per_call);
    const char *fit_env = getenv("HELD_FLOOD_FIT"), *want_env = getenv("HELD_FLOOD_REFUSAL");
    if (fit_env != NULL)
        fit = atoi(fit_env);
    round_start(ch, loop, r, req);
    if (measure_only) {
        poll_until_still(loop, msr_deadline_in_ms(120000));
    } else {
        CHECK(poll_until(loop, r, r->n - fit, msr_deadline_in_ms(60000)),
              "only %d of %d fetches refused (at most %d fit %llu bytes)", r->refused, r->n, fit,
              client_bytes);
        char want[256];
        snprintf(want, sizeof want, "held bytes of client 127.0.0.1: %llu at most", client_bytes);
        if (want_env != NULL)
            snprintf(want, sizeof want, "%s", want_env);
        CHECK(strstr(r->first_refusal, want) != NULL, "refusal '%s' does not name '%s'",
              r->first_refusal, want);
        CHECK(r->other == 0, "%d fetches ended otherwise", r->other);
    }
    long rss = msr_flood_proc_kib(coord_pid, "VmRSS"),
         peak = msr_flood_proc_kib(coord_pid, "VmHWM");
    printf("held: %d fetches of %zu indices, %d refused (%s), coordinator RSS %ld -> %ld KiB "
           "(+%ld), peak %ld KiB\n",
           r->n, req->n_indices, r->refused, r->first_refusal[0] ? r->first_refusal : "none",
           base_kib, rss, rss - base_kib, peak);
    if (!measure_only)
        CHECK(peak - base_kib <=
                  (long)(client_bytes >> 10) + r->n * MARGIN_PER_CALL_KIB + MARGIN_KIB,
              "the coordinator peaked %ld KiB over its start holding calls bounded to %llu bytes",
              peak - base_kib, client_bytes);
}

/* A connection of its own for one round: its end takes gRPC's state for
 * the round's calls with it. */
static msr_rpc_channel_t *connect_own(const char *addr, const char *token)
{
    msr_rpc_channel_t *ch = NULL;
    CHECK(msr_rpc_channel_create_own(addr, token, &ch) == MSR_OK, "channel: %s", msr_err_msg());
    CHECK(msr_rpc_channel_wait(ch, msr_deadline_in_ms(20000)), "cannot connect to %s", addr);
    return ch;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: held_flood ADDR TOKEN COORD_PID N INDICES CLIENT_BYTES\n");
        return 2;
    }
    coord_pid = atol(argv[3]);
    int n = atoi(argv[4]);
    int nidx = atoi(argv[5]);
    unsigned long long client_bytes = strtoull(argv[6], NULL, 10);
    const char *mo = getenv("HELD_FLOOD_MEASURE_ONLY");
    int measure_only = mo != NULL && strcmp(mo, "1") == 0;
    CHECK(n > 0 && nidx > 0 && client_bytes > 0, "bad arguments");

    msr_rpc_loop_t *loop = NULL;
    CHECK(msr_rpc_loop_create(&loop) == MSR_OK, "loop");

    uint32_t *indices = msr_malloc((size_t)nidx * sizeof *indices);
    CHECK(indices != NULL, "out of memory");
    for (int i = 0; i < nidx; i++)
        indices[i] = (uint32_t)(i % 100); /* one byte each: the request stays under 64 KiB */
    Msr__FetchRequest req = MSR__FETCH_REQUEST__INIT;
    req.name = "never-published";
    req.indices = indices;
    req.n_indices = (size_t)nidx;
    req.wait_ms = UINT32_MAX; /* the longest wait */

    round_t r = {.n = n};
    r.calls = msr_calloc((size_t)n, sizeof *r.calls);
    CHECK(r.calls != NULL, "out of memory");
    long base = msr_flood_proc_kib(coord_pid, "VmRSS");
    printf("coordinator RSS before: %ld KiB\n", base);
    msr_rpc_channel_t *ch = connect_own(argv[1], argv[2]);
    round_run(ch, loop, &r, &req, client_bytes, measure_only, base);
    round_cancel(loop, &r);
    msr_rpc_channel_destroy(ch);
    int held = r.n - r.refused;
    long after = msr_flood_proc_kib(coord_pid, "VmRSS");
    printf("after cancelling the %d held fetches: coordinator RSS %ld KiB (+%ld over before)\n",
           held, after, after - base);
    if (!measure_only) {
        /* The cancelled calls gave their charge back: as many are held
         * again (give or take the one or two calls still on their way when
         * the bound was seen met, cancelled before they could be refused). */
        ch = connect_own(argv[1], argv[2]);
        round_run(ch, loop, &r, &req, client_bytes, 0, base);
        round_cancel(loop, &r);
        msr_rpc_channel_destroy(ch);
        int again = r.n - r.refused;
        CHECK(held > 0 && again + 2 >= held && held + 2 >= again,
              "second round held %d fetches, the first %d", again, held);
        printf("second round held %d again; RSS after it %ld KiB\n", again,
               msr_flood_proc_kib(coord_pid, "VmRSS"));
    }
    msr_free(r.calls);
    msr_free(indices);
    msr_rpc_loop_destroy(loop);
    return 0;
}
