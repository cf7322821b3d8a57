/* The worker of the small-broadcast tests (the shared-memory slots' ring),
 * started by the real msrun (tests/comm/run_bcast.sh). `bcast_worker MODE`:
 *   ahead   (broadcasts forced through the slots) on a fresh
 *           communicator the root runs exactly the ring's depth (up to
 *           448 bytes the lined broadcasts' 128 entries; above, 2n x the
 *           cache-line strides of the vector a slot holds) while the
 *           others have not started any: all
 *           complete; one past it must wait for the readers (it is still in
 *           progress however often it is driven); then the readers read
 *           every one in order, none overwritten. At the inline size, one
 *           past it, a line's data (56 bytes) and one past it (two lines),
 *           the most the lined broadcasts carry (8 lines, 448 bytes) and
 *           one past it (the slots' ring), and a slot's size.
 *   stress  many broadcasts from one root and from rotating ones, of sizes
 *           around the inline bound, a line's data and the lined
 *           broadcasts' bound and up to a slot (lined broadcasts of one
 *           line and of several, then the slots' ring), between allreduces
 *           (at the inline bound and past it), allgathers, reduce-scatters,
 *           barriers, and blocking calls beside a non-blocking allreduce
 *           followed by a reduce of UCX messages, with readers that stall
 *           now and then: every rank checks every value; first a member
 *           that stays away 100 ms before it folds an allreduce whose
 *           slots the root's next broadcasts share.
 *   late    the readers wait on a late member: rotating roots that
 *           stay away 2 ms before broadcasts of 1 byte to one past a
 *           slot's size (each bound of the lined ring and the slots'
 *           ring, and one past), and barriers that a rotating member enters 2 ms late.
 *           Every reader checks every byte and the root it came from;
 *           run_bcast.sh then checks in the engines' debug lines that
 *           their waits, run without a spin phase, never held the core
 *           in an idle round (docs/comm.md, "Progress and waiting").
 * A failed check prints the case and exits 1; rank 0 prints "ok MODE". */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "msrun/msrun.h"
#include "tests/worker_fail.h"

WORKER_FAIL("bcast_worker", exit)

/* The slots' size (MSR_COMM_SHM_MAX, docs/comm.md), inline bytes, a
 * line's data bytes, the most a lined broadcast carries (SHM_BCAST_WIDTH
 * lines) and its rings' entries (comm/ucx/shm_impl.h). */
enum {
    SLOT_BYTES = 16384,
    INLINE_BYTES = 16,
    LINE_DATA = 56,
    BCAST_LINED = 8 * LINE_DATA,
    BCAST_LINES = 128
};

/* Byte i of broadcast k from root: differs between broadcasts, positions
 * and roots, never 0. */
static unsigned char pattern(uint64_t k, int root, size_t i)
{
    return (unsigned char)(1 + (k * 131 + (uint64_t)root * 17 + i * 7) % 251);
}

static void fill(unsigned char *buf, size_t bytes, uint64_t k, int root)
{
    for (size_t i = 0; i < bytes; i++)
        buf[i] = pattern(k, root, i);
}

static void check(const unsigned char *buf, size_t bytes, uint64_t k, int root)
{
    for (size_t i = 0; i < bytes; i++)
        if (buf[i] != pattern(k, root, i))
            fail("broadcast %llu of %zu bytes from %d: byte %zu is %u, expected %u",
                 (unsigned long long)k, bytes, root, i, buf[i], pattern(k, root, i));
}

/* One round of mode ahead on a fresh dup of world: the root's depth
 * broadcasts, then one more that must wait, while the readers wait for a
 * message before they start any. */
static void ahead_round(msr_comm_t *world, size_t bytes)
{
    msr_comm_t *c = NULL;
    OK(msr_comm_dup(world, 0, &c));
    msr_comm_set_timeout(c, 20000);
    int n = msr_comm_size(c), me = msr_comm_rank(c);
    /* the ring: up to BCAST_LINED bytes, the lined broadcasts' entries
     * (of 1 to 8 lines); above, per parity, every member's slot in entries
     * of whole lines */
    size_t stride = bytes <= 64 ? 64 : (bytes + 63) / 64 * 64;
    int depth = bytes <= BCAST_LINED ? BCAST_LINES : 2 * n * (int)(SLOT_BYTES / stride);
    unsigned char *buf = malloc((size_t)(depth + 1) * bytes);
    if (buf == NULL)
        fail("out of memory");
    int go = 1;
    if (me == 0) {
        for (int k = 0; k < depth; k++) { /* at the bound: none waits */
            fill(buf + (size_t)k * bytes, bytes, (uint64_t)k, 0);
            OK(msr_comm_broadcast(c, buf + (size_t)k * bytes, bytes, MSR_DTYPE_U8, 0));
        }
        /* one past: its entry is broadcast 0's, which no reader has read */
        unsigned char *last = buf + (size_t)depth * bytes;
        fill(last, bytes, (uint64_t)depth, 0);
        msr_comm_req_t *req = NULL;
        OK(msr_comm_ibroadcast(c, last, bytes, MSR_DTYPE_U8, 0, &req));
        for (int i = 0; i < 1000; i++)
            if (msr_comm_test(&req) != MSR_IN_PROGRESS)
                fail("broadcast %d finished before any reader read broadcast 0", depth);
        for (int j = 1; j < n; j++)
            OK(msr_comm_send(c, &go, 1, MSR_DTYPE_I32, j, 7));
        OK(msr_comm_wait(req));
    } else {
        OK(msr_comm_recv(c, &go, 1, MSR_DTYPE_I32, 0, 7));
        for (int k = 0; k <= depth; k++) {
            memset(buf, 0, bytes);
            OK(msr_comm_broadcast(c, buf, bytes, MSR_DTYPE_U8, 0));
            check(buf, bytes, (uint64_t)k, 0);
        }
    }
    OK(msr_comm_barrier(c));
    free(buf);
    msr_comm_destroy(c);
}

static void mode_ahead(msr_comm_t *world)
{
    static const size_t sizes[] = {INLINE_BYTES, INLINE_BYTES + 1, LINE_DATA, LINE_DATA + 1,
                                   BCAST_LINED,  BCAST_LINED + 1,  1024,      SLOT_BYTES};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        snprintf(g_case, sizeof g_case, "ahead %zu bytes", sizes[i]);
        ahead_round(world, sizes[i]);
    }
}

/* A reader that stalls now and then (which and when from k alone): the
 * root runs ahead of it to the ring's end and must wait there. */
static void maybe_stall(uint64_t k, int me, int n)
{
    if (me != 0 && (k % 97) == (uint64_t)(me * 13 % 97) && (int)(k / 97 % (uint64_t)n) == me) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}

/* An allreduce of k, blocking or not (ranks may differ: both take the
 * same numbers), then, when behind, a reduce by UCX messages, whose tags
 * carry the communicator's count of collectives: a blocking call through
 * the slots must count too. */
static void stress_mixed(msr_comm_t *c, uint64_t k, unsigned char *buf)
{
    int n = msr_comm_size(c), me = msr_comm_rank(c);
    int32_t v = (int32_t)(k % 1000) + me, sum = 0, red = 0;
    msr_comm_req_t *req = NULL;
    if ((k / 19 + (uint64_t)me) % 2 == 0) {
        /* a broadcast behind it: the blocking call waits its turn */
        OK(msr_comm_iallreduce(c, &v, &sum, 1, MSR_DTYPE_I32, MSR_OP_SUM, &req));
        if (me == 0)
            fill(buf, 8, k, 0);
        OK(msr_comm_broadcast(c, buf, 8, MSR_DTYPE_U8, 0));
        OK(msr_comm_wait(req));
        check(buf, 8, k, 0);
    } else {
        OK(msr_comm_allreduce(c, &v, &sum, 1, MSR_DTYPE_I32, MSR_OP_SUM));
        if (me == 0)
            fill(buf, 8, k, 0);
        OK(msr_comm_broadcast(c, buf, 8, MSR_DTYPE_U8, 0));
        check(buf, 8, k, 0);
    }
    if (sum != n * (int32_t)(k % 1000) + n * (n - 1) / 2)
        fail("mixed allreduce %llu: %d", (unsigned long long)k, sum);
    OK(msr_comm_reduce(c, &v, me == 0 ? &red : NULL, 1, MSR_DTYPE_I32, MSR_OP_SUM, 0));
    if (me == 0 && red != sum)
        fail("reduce %llu: %d, expected %d", (unsigned long long)k, red, sum);
}

/* A reduce-scatter of k through the slots: block j of rank r's input is
 * k + r + j, per rank 1 or 5 floats (inline or not at 2 ranks). */
static void stress_rs(msr_comm_t *c, uint64_t k)
{
    int n = msr_comm_size(c), me = msr_comm_rank(c);
    size_t per = k % 2 ? 5 : 1;
    float in[64 * 5], out[5];
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < per; i++)
            in[(size_t)j * per + i] = (float)((int)(k % 100) + me + j + (int)i);
    OK(msr_comm_reduce_scatter(c, in, out, per, MSR_DTYPE_F32, MSR_OP_SUM));
    for (size_t i = 0; i < per; i++) {
        float want = (float)(n * ((int)(k % 100) + me + (int)i) + n * (n - 1) / 2);
        if (out[i] != want)
            fail("reduce_scatter %llu: element %zu is %g, expected %g", (unsigned long long)k, i,
                 (double)out[i], (double)want);
    }
}

/* Operation k of mode stress: mostly broadcasts of a size from the list,
 * from rank 0 (a root far ahead) or rotating; every 11th an allreduce
 * (whose members write their own slots, which the ring shares) of 4 or 5
 * floats (the inline size and past it), every 13th an allgather, every
 * 17th a reduce-scatter, every 19th a non-blocking allreduce beside
 * blocking calls (stress_mixed), every 50th a barrier. */
static void stress_op(msr_comm_t *c, uint64_t k, unsigned char *buf, float *f)
{
    static const size_t sizes[] = {
        1,   8,           INLINE_BYTES, INLINE_BYTES + 1, LINE_DATA, LINE_DATA + 1, 64,
        200, BCAST_LINED, 1000,         SLOT_BYTES};
    int n = msr_comm_size(c), me = msr_comm_rank(c);
    if (k % 50 == 49) {
        OK(msr_comm_barrier(c));
    } else if (k % 19 == 18) {
        stress_mixed(c, k, buf);
    } else if (k % 17 == 16) {
        stress_rs(c, k);
    } else if (k % 11 == 10) {
        int count = 4 + (int)(k / 11 % 2);
        for (int i = 0; i < count; i++)
            f[i] = (float)(me + (int)(k % 100) + i);
        OK(msr_comm_allreduce(c, MSR_IN_PLACE, f, (uint64_t)count, MSR_DTYPE_F32, MSR_OP_SUM));
        for (int i = 0; i < count; i++) {
            float want = (float)(n * (n - 1) / 2 + n * ((int)(k % 100) + i));
            if (f[i] != want)
                fail("allreduce %llu: element %d is %g, expected %g", (unsigned long long)k, i,
                     (double)f[i], (double)want);
        }
    } else if (k % 13 == 12) {
        int v = (int)(k % 1000) * 100 + me, all[64];
        OK(msr_comm_allgather(c, &v, all, 1, MSR_DTYPE_I32));
        for (int j = 0; j < n; j++)
            if (all[j] != (int)(k % 1000) * 100 + j)
                fail("allgather %llu: block %d is %d", (unsigned long long)k, j, all[j]);
    } else {
        size_t bytes = sizes[k % (sizeof sizes / sizeof sizes[0])];
        int root = k < 4000 ? 0 : (int)(k % (uint64_t)n);
        if (me == root)
            fill(buf, bytes, k, root);
        else
            memset(buf, 0, bytes);
        OK(msr_comm_broadcast(c, buf, bytes, MSR_DTYPE_U8, root));
        check(buf, bytes, k, root);
    }
    maybe_stall(k, me, n);
}

/* The last rank publishes a 4 KiB allreduce (in its slot, which the ring
 * shares) and stays away 100 ms before it folds; the root, done with the
 * allreduce, broadcasts on: a broadcast of the allreduce's parity must
 * wait for that fold rather than overwrite the slots it reads. */
static void lag_round(msr_comm_t *world)
{
    enum { COUNT = 1024, BCASTS = 8 };
    msr_comm_t *c = NULL;
    OK(msr_comm_dup(world, 0, &c));
    int n = msr_comm_size(c), me = msr_comm_rank(c), slow = n - 1, go = 1;
    float *in = malloc(COUNT * sizeof *in), *out = malloc(COUNT * sizeof *out);
    unsigned char buf[8];
    if (in == NULL || out == NULL)
        fail("out of memory");
    for (int i = 0; i < COUNT; i++)
        in[i] = (float)(me + i);
    if (me == slow) {
        msr_comm_req_t *req = NULL;
        OK(msr_comm_iallreduce(c, in, out, COUNT, MSR_DTYPE_F32, MSR_OP_SUM, &req));
        if (msr_comm_test(&req) != MSR_IN_PROGRESS)
            fail("the allreduce finished before the others started it");
        for (int j = 0; j < n - 1; j++)
            OK(msr_comm_send(c, &go, 1, MSR_DTYPE_I32, j, 8));
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        OK(msr_comm_wait(req));
    } else {
        OK(msr_comm_recv(c, &go, 1, MSR_DTYPE_I32, slow, 8));
        OK(msr_comm_allreduce(c, in, out, COUNT, MSR_DTYPE_F32, MSR_OP_SUM));
    }
    for (int i = 0; i < COUNT; i++)
        if (out[i] != (float)(n * (n - 1) / 2 + n * i))
            fail("allreduce before the broadcasts: element %d is %g", i, (double)out[i]);
    for (uint64_t k = 0; k < BCASTS; k++) {
        if (me == 0)
            fill(buf, sizeof buf, k, 0);
        OK(msr_comm_broadcast(c, buf, sizeof buf, MSR_DTYPE_U8, 0));
        check(buf, sizeof buf, k, 0);
    }
    free(in);
    free(out);
    msr_comm_destroy(c);
}

static void stay_away(void)
{
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
}

static void mode_late(msr_comm_t *world)
{
    static const size_t sizes[] = {1,
                                   8,
                                   INLINE_BYTES,
                                   INLINE_BYTES + 1,
                                   LINE_DATA,
                                   LINE_DATA + 1,
                                   BCAST_LINED,
                                   BCAST_LINED + 1,
                                   SLOT_BYTES,
                                   SLOT_BYTES + 1};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    unsigned char *buf = malloc(SLOT_BYTES + 1);
    if (buf == NULL)
        fail("out of memory");
    for (uint64_t k = 0; k < 3 * NS; k++) {
        size_t bytes = sizes[k % NS];
        int root = (int)((k + k / NS) % (uint64_t)n);
        snprintf(g_case, sizeof g_case, "late root %d, %zu bytes", root, bytes);
        if (me == root) {
            stay_away();
            fill(buf, bytes, k, root);
        } else {
            memset(buf, 0, bytes);
        }
        OK(msr_comm_broadcast(world, buf, bytes, MSR_DTYPE_U8, root));
        check(buf, bytes, k, root);
        snprintf(g_case, sizeof g_case, "late barrier %llu", (unsigned long long)k);
        if (me == (int)(k % (uint64_t)n))
            stay_away();
        OK(msr_comm_barrier(world));
    }
    free(buf);
}

static void mode_stress(msr_comm_t *world)
{
    snprintf(g_case, sizeof g_case, "lagging fold");
    lag_round(world);
    unsigned char *buf = malloc(SLOT_BYTES);
    float f[5];
    if (buf == NULL)
        fail("out of memory");
    if (msr_comm_size(world) > 64)
        fail("stress: at most 64 ranks");
    snprintf(g_case, sizeof g_case, "stress");
    for (uint64_t k = 0; k < 6000; k++)
        stress_op(world, k, buf, f);
    free(buf);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bcast_worker ahead|stress|late\n");
        return 2;
    }
    const char *mode = argv[1];
    if (strcmp(mode, "ahead") == 0) /* the slots' bound, whatever auto takes */
        setenv("MSR_COMM_ALGO_BROADCAST", "shm", 1);
    msr_ctx_t *ctx = NULL;
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "msr_init: %s: %s\n", msr_status_str(st), msr_last_error());
        return 1;
    }
    g_rank = msr_rank(ctx);
    msr_comm_t *world = NULL;
    snprintf(g_case, sizeof g_case, "world");
    OK(msr_comm_world(ctx, &world));
    msr_comm_set_timeout(world, 30000);
    if (strcmp(mode, "ahead") == 0)
        mode_ahead(world);
    else if (strcmp(mode, "stress") == 0)
        mode_stress(world);
    else if (strcmp(mode, "late") == 0)
        mode_late(world);
    else
        fail("unknown mode %s", mode);
    snprintf(g_case, sizeof g_case, "final barrier");
    OK(msr_comm_barrier(world));
    msr_comm_destroy(world);
    if (g_rank == 0)
        printf("ok %s\n", mode);
    msr_finalize(ctx);
    return 0;
}
