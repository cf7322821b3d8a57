/* An attack client for the store's limits, against a real coordinator:
 *
 *   store_flood ADDR TOKEN COORD_PID VALUE_MAX BYTES_MAX
 *
 * 1. small writes (16 bytes) alone: their latency;
 * 2. a flood of 1 GiB of attempted writes on a connection of its own (values
 *    of VALUE_MAX bytes, every fourth one byte more, each under a new key)
 *    while small writes go on beside it: the over-size writes must get
 *    RESOURCE_EXHAUSTED naming --store_value_max, the writes past the total
 *    RESOURCE_EXHAUSTED naming --store_bytes_max, the small writes must all
 *    succeed, and the coordinator's peak memory (VmHWM) must stay within
 *    BYTES_MAX plus a margin over where it started;
 * 3. ~30-byte allgather and barrier requests with huge counts: refused with
 *    INVALID_ARGUMENT, the coordinator's memory unchanged;
 * 4. waits that expire (get, barrier, allgather under names never used
 *    again) leave nothing behind: afterwards the store still admits keys up
 *    to its key limit (run with --store_keys_max 1000).
 * Prints what it measured; exits 1 on the first broken promise. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/status.h>

#include "base/err.h"
#include "base/time.h"
#include "rendezvous/rpc.h"
#include "tests/integration/flood_util.h"

#define FLOOD_TOTAL (1ull << 30)
#define KEYS_MAX    1000 /* the coordinator runs with --store_keys_max 1000 */

/* AddressSanitizer (in a sanitizer build the coordinator has it too) keeps
 * freed memory in a quarantine of 256 MiB, with redzones around every
 * block: the refused values' buffers stay counted for a while. */
#if defined(__SANITIZE_ADDRESS__)
#define ASAN_MARGIN_KIB (448l * 1024)
#else
#define ASAN_MARGIN_KIB 0l
#endif

static const char *addr, *token;
static long coord_pid;
static unsigned long long value_max, bytes_max;
/* STORE_FLOOD_MEASURE_ONLY=1: the flood's outcomes are counted, not checked,
 * and it stops after the flood (to measure a coordinator without limits) */
static int measure_only;

/* One call; returns the gRPC code (0 = OK) and the server's message. */
static int call(msr_rpc_channel_t *ch, msr_rpc_method_t m, const ProtobufCMessage *req, char *err,
                size_t errlen)
{
    ProtobufCMessage *resp = NULL;
    err[0] = '\0';
    msr_status_t st = msr_rpc_call(ch, m, req, msr_deadline_in_ms(30000), 1, &resp);
    msr_rpc_message_free(resp);
    if (st == MSR_OK)
        return 0;
    snprintf(err, errlen, "%s", msr_err_msg());
    switch (st) {
    case MSR_ERR_REFUSED:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case MSR_ERR_INVALID_ARG:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case MSR_ERR_TIMEOUT:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    default:
        return GRPC_STATUS_UNKNOWN;
    }
}

static int set(msr_rpc_channel_t *ch, const char *key, const void *data, size_t len, char *err,
               size_t errlen)
{
    Msr__SetRequest r = MSR__SET_REQUEST__INIT;
    r.key = (char *)key;
    r.value.data = (uint8_t *)data;
    r.value.len = len;
    return call(ch, MSR_RPC_SET, &r.base, err, errlen);
}

/* Latencies of small writes, in microseconds. */
typedef struct lat {
    double us[200000];
    size_t n;
} lat_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void lat_print(const char *what, lat_t *l)
{
    qsort(l->us, l->n, sizeof l->us[0], cmp_double);
    printf("small writes %s: %zu, median %.0f us, p99 %.0f us, max %.0f us\n", what, l->n,
           l->us[l->n / 2], l->us[l->n * 99 / 100], l->us[l->n - 1]);
}

static void small_write(msr_rpc_channel_t *ch, lat_t *l)
{
    char err[512];
    uint64_t t0 = msr_now_ns();
    int code = set(ch, "small", "0123456789abcdef", 16, err, sizeof err);
    CHECK(code == 0, "a small write failed beside the flood: %s", err);
    if (l->n < sizeof l->us / sizeof l->us[0])
        l->us[l->n++] = (double)(msr_now_ns() - t0) / 1e3;
}

typedef struct flood {
    unsigned long long attempted, accepted;
    int accepted_n, refused_value, refused_total, oversize;
    _Atomic int done;
} flood_t;

static void *flood_thread(void *arg)
{
    flood_t *f = arg;
    msr_rpc_channel_t *ch = NULL;
    CHECK(msr_rpc_channel_create_own(addr, token, &ch) == MSR_OK, "channel");
    uint8_t *buf = malloc(value_max + 1);
    CHECK(buf != NULL, "out of memory");
    memset(buf, 'x', value_max + 1);
    char err[512], key[64];
    for (int i = 0; f->attempted < FLOOD_TOTAL; i++) {
        int over = i % 4 == 3;
        size_t len = over ? value_max + 1 : value_max;
        snprintf(key, sizeof key, "flood/%d", i);
        int code = set(ch, key, buf, len, err, sizeof err);
        f->attempted += len;
        f->oversize += over;
        if (measure_only) {
            f->accepted += code == 0 ? len : 0;
            f->accepted_n += code == 0;
        } else if (code == 0) {
            CHECK(!over, "a value of %zu bytes was accepted (limit %llu)", len, value_max);
            f->accepted += len;
            f->accepted_n++;
        } else if (code == GRPC_STATUS_RESOURCE_EXHAUSTED && over) {
            CHECK(strstr(err, "--store_value_max") != NULL, "over-size refusal says: %s", err);
            f->refused_value++;
        } else if (code == GRPC_STATUS_RESOURCE_EXHAUSTED) {
            CHECK(strstr(err, "--store_bytes_max") != NULL, "over-total refusal says: %s", err);
            f->refused_total++;
        } else {
            CHECK(0, "write %d of %zu bytes: code %d: %s", i, len, code, err);
        }
    }
    free(buf);
    msr_rpc_channel_destroy(ch);
    f->done = 1;
    return NULL;
}

/* 1. small writes alone; returns the coordinator's peak memory (KiB). */
static long part_alone(msr_rpc_channel_t *ch, lat_t *before)
{
    for (int i = 0; i < 500; i++)
        small_write(ch, before);
    long rss0 = msr_flood_proc_kib(coord_pid, "VmRSS"),
         hwm0 = msr_flood_proc_kib(coord_pid, "VmHWM");
    printf("coordinator before the flood: VmRSS %ld KiB, VmHWM %ld KiB\n", rss0, hwm0);
    return hwm0;
}

/* 2. the flood, small writes beside it; returns the coordinator's peak
 * memory (KiB) after it. */
static long part_flood(msr_rpc_channel_t *ch, flood_t *f, lat_t *during)
{
    pthread_t t;
    uint64_t t0 = msr_now_ns();
    CHECK(pthread_create(&t, NULL, flood_thread, f) == 0, "thread");
    while (!f->done)
        small_write(ch, during);
    pthread_join(t, NULL);
    double secs = (double)(msr_now_ns() - t0) / 1e9;
    long rss1 = msr_flood_proc_kib(coord_pid, "VmRSS"),
         hwm1 = msr_flood_proc_kib(coord_pid, "VmHWM");
    printf("flood: %llu MiB attempted in %.1f s: %d values (%llu MiB) accepted, %d refused over "
           "--store_value_max, %d refused over --store_bytes_max\n",
           f->attempted >> 20, secs, f->accepted_n, f->accepted >> 20, f->refused_value,
           f->refused_total);
    printf("coordinator after the flood: VmRSS %ld KiB, VmHWM %ld KiB (limit %llu KiB)\n", rss1,
           hwm1, bytes_max >> 10);
    return hwm1;
}

/* 2's promises: every over-size write refused, the total held, and the
 * coordinator's peak memory within it (hwm0 before, hwm1 after). */
static void flood_check(const flood_t *f, long hwm0, long hwm1)
{
    CHECK(f->refused_value == f->oversize, "%d over-size writes, %d refused", f->oversize,
          f->refused_value);
    CHECK(f->refused_total > 0, "no write was refused over the total");
    CHECK(f->accepted <= bytes_max, "%llu bytes accepted over a limit of %llu", f->accepted,
          bytes_max);
    /* margin: the messages in flight (a received value is held by gRPC,
     * unpacked and copied: about 3 x VALUE_MAX, several at once) and
     * allocator slack */
    long margin_kib = (long)(6 * value_max >> 10) + 32 * 1024 + ASAN_MARGIN_KIB;
    CHECK(hwm1 <= hwm0 + (long)(bytes_max >> 10) + margin_kib,
          "the coordinator's peak grew from %ld to %ld KiB (limit %llu KiB + margin %ld KiB)", hwm0,
          hwm1, bytes_max >> 10, margin_kib);
}

/* The tiny allgather and barrier requests of 3, used again (renamed and
 * recounted) by 4. ep[0] points to e: the struct must not move. */
typedef struct tiny {
    Msr__Contribution e;
    Msr__Contribution *ep[1];
    Msr__AllgatherRequest ag;
    Msr__BarrierRequest br;
} tiny_t;

/* 3. huge counts in tiny requests */
static void part_huge_counts(msr_rpc_channel_t *ch, tiny_t *q)
{
    char err[512];
    long rss2 = msr_flood_proc_kib(coord_pid, "VmRSS");
    q->e = (Msr__Contribution)MSR__CONTRIBUTION__INIT;
    q->ep[0] = &q->e;
    q->e.data.data = (uint8_t *)"x";
    q->e.data.len = 1;
    q->ag = (Msr__AllgatherRequest)MSR__ALLGATHER_REQUEST__INIT;
    q->ag.name = "huge";
    q->ag.count = 1u << 24;
    q->ag.n_entries = 1;
    q->ag.entries = q->ep;
    q->ag.wait_ms = 100;
    int code = call(ch, MSR_RPC_ALLGATHER, &q->ag.base, err, sizeof err);
    printf("allgather of %zu bytes with count %u: code %d: %s\n",
           protobuf_c_message_get_packed_size(&q->ag.base), q->ag.count, code, err);
    CHECK(code == GRPC_STATUS_INVALID_ARGUMENT, "the huge allgather was not refused");
    q->br = (Msr__BarrierRequest)MSR__BARRIER_REQUEST__INIT;
    q->br.name = "huge";
    q->br.count = 100000000;
    q->br.wait_ms = 100;
    code = call(ch, MSR_RPC_BARRIER, &q->br.base, err, sizeof err);
    printf("barrier of %zu bytes with count %u: code %d: %s\n",
           protobuf_c_message_get_packed_size(&q->br.base), q->br.count, code, err);
    CHECK(code == GRPC_STATUS_INVALID_ARGUMENT, "the huge barrier was not refused");
    long rss3 = msr_flood_proc_kib(coord_pid, "VmRSS");
    printf("coordinator around the huge counts: VmRSS %ld -> %ld KiB\n", rss2, rss3);
    CHECK(rss3 - rss2 < 16 * 1024, "VmRSS grew by %ld KiB", rss3 - rss2);
}

/* 4. expired waits leave nothing: make room (the flood's accepted_n keys
 * and the small one), wait on 3 x KEYS_MAX names that are never set or
 * completed, then fill the store to its key limit */
static void part_expired_waits(msr_rpc_channel_t *ch, tiny_t *q, int accepted_n)
{
    char err[512];
    int code;
    for (int i = 0; i < accepted_n + 8; i++) {
        char key[64];
        snprintf(key, sizeof key, "flood/%d", i);
        Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
        d.key = key;
        CHECK(call(ch, MSR_RPC_DELETE, &d.base, err, sizeof err) == 0, "delete: %s", err);
    }
    Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
    d.key = "small";
    CHECK(call(ch, MSR_RPC_DELETE, &d.base, err, sizeof err) == 0, "delete: %s", err);
    for (int i = 0; i < KEYS_MAX; i++) {
        char name[64];
        snprintf(name, sizeof name, "gone/%d", i);
        Msr__GetRequest g = MSR__GET_REQUEST__INIT;
        g.key = name;
        g.wait_ms = 1;
        code = call(ch, MSR_RPC_GET, &g.base, err, sizeof err);
        CHECK(code == GRPC_STATUS_DEADLINE_EXCEEDED, "get-wait %d: code %d: %s", i, code, err);
        q->br.name = name;
        q->br.count = 2;
        q->br.wait_ms = 1;
        code = call(ch, MSR_RPC_BARRIER, &q->br.base, err, sizeof err);
        CHECK(code == GRPC_STATUS_DEADLINE_EXCEEDED, "barrier %d: code %d: %s", i, code, err);
        q->ag.name = name;
        q->ag.count = 2;
        q->ag.wait_ms = 1;
        code = call(ch, MSR_RPC_ALLGATHER, &q->ag.base, err, sizeof err);
        CHECK(code == GRPC_STATUS_DEADLINE_EXCEEDED, "allgather %d: code %d: %s", i, code, err);
    }
    for (int i = 0; i < KEYS_MAX; i++) {
        char key[64];
        snprintf(key, sizeof key, "fill/%d", i);
        code = set(ch, key, "v", 1, err, sizeof err);
        CHECK(code == 0, "after %d expired waits, key %d of %d refused: %s", 3 * KEYS_MAX, i,
              KEYS_MAX, err);
    }
    code = set(ch, "one-too-many", "v", 1, err, sizeof err);
    CHECK(code == GRPC_STATUS_RESOURCE_EXHAUSTED && strstr(err, "--store_keys_max") != NULL,
          "key %d: code %d: %s", KEYS_MAX + 1, code, err);
    printf("%d expired waits left nothing: %d keys admitted, the next refused: %s\n", 3 * KEYS_MAX,
           KEYS_MAX, err);
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: store_flood ADDR TOKEN COORD_PID VALUE_MAX BYTES_MAX\n");
        return 2;
    }
    addr = argv[1];
    token = argv[2];
    coord_pid = strtol(argv[3], NULL, 10);
    value_max = strtoull(argv[4], NULL, 10);
    bytes_max = strtoull(argv[5], NULL, 10);
    measure_only = getenv("STORE_FLOOD_MEASURE_ONLY") != NULL;
    msr_rpc_channel_t *ch = NULL;
    CHECK(msr_rpc_channel_create_own(addr, token, &ch) == MSR_OK, "channel");
    static lat_t before, during;
    static flood_t f;
    long hwm0 = part_alone(ch, &before);
    long hwm1 = part_flood(ch, &f, &during);
    lat_print("alone", &before);
    lat_print("beside the flood", &during);
    if (measure_only)
        return 0;
    flood_check(&f, hwm0, hwm1);
    static tiny_t q;
    part_huge_counts(ch, &q);
    part_expired_waits(ch, &q, f.accepted_n);
    msr_rpc_channel_destroy(ch);
    printf("ok\n");
    return 0;
}
