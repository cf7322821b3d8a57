/* The worker of the device communicators' tests that run without a GPU,
 * started by the real msrun (tests/comm/run_gpu.sh), with the fake GPU table
 * of gpu_fake.c. `gpu_fake_worker MODE`:
 *   staged       members share one (fake) GPU: the staged backend; every
 *                collective, in place and not, blocking and not, p2p, split
 *                and dup, checked bit for bit against the host world on the
 *                same inputs; streams; nothing left allocated at the end
 *   nccl         a GPU each: the NCCL backend's control flow: the unique id
 *                through the store (NCCL's own where it can make one, else a
 *                fake), non-blocking init, split, dup, refused arguments,
 *                tags, orderly close (finalize, destroy, no abort)
 *   lengths      NCCL sends and receives of lengths that differ: both
 *                sides fail at once, the communicator stays usable
 *   one          one rank: NCCL and staged moving data (alltoall in place,
 *                alltoallv as a group)
 *   choice       the backend decision and its failures on every member
 *                alike: no device, MSR_COMM_GPU and flags that disagree,
 *                nccl forced on a shared GPU, staged forced, id failure
 *   timeout      operations that never finish: MSR_ERR_TIMEOUT at the
 *                deadline, one abort, the communicator broken
 *   notify       rank 0 gives up early: rank 1 (long deadline) hears of it
 *   asyncerr     NCCL reports an asynchronous error: MSR_ERR_PEER_LOST,
 *                aborted, long before the deadline
 *   inittimeout  NCCL's init never finishes: creation fails at the deadline
 *   kill         (nccl) the last rank SIGKILLs itself: the others fail with
 *                MSR_ERR_PEER_LOST, not at their deadline
 *   killstaged   the same on the staged backend, during transfers
 *   oom          a member out of memory inside a collective (nccl and
 *                staged): every member fails at once, naming it
 * Rank 0 prints "ok MODE" at the end; a failed check prints the case and
 * exits 1. */
#include "gpu_fake_worker.h"

int g_rank = -1;
char g_case[256];
long g_checks;

void fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "gpu_fake_worker rank %d: FAIL [%s]: %s (last error: %s)\n", g_rank, g_case,
            msg, msr_last_error());
    fflush(stderr);
    _exit(1);
}

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        fail("out of memory for %zu bytes", n);
    return p;
}

void setcase(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_case, sizeof g_case, fmt, ap);
    va_end(ap);
}

/* ---- inputs: small integers (every type holds them), or random floats ---- */

void gfw_fill(msr_dtype_t dt, void *p, size_t n, int rank, int salt, msr_op_t op)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1) + (uint64_t)salt * 7919u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int v = op == MSR_OP_PROD ? (int)(x % 3) - 1 + ((x >> 8) % 2 ? 2 : 0) : (int)(x % 11) - 5;
        if (v == 0 && op == MSR_OP_PROD)
            v = 1;
        double f = salt % 5 == 4 ? (double)(int64_t)(x >> 11) / 9007199254740992.0 - 0.5 : v;
        switch (dt) {
        case MSR_DTYPE_F32:
            ((float *)p)[i] = (float)f;
            break;
        case MSR_DTYPE_F64:
            ((double *)p)[i] = f;
            break;
        case MSR_DTYPE_F16: {
            _Float16 h = (_Float16)(float)v;
            memcpy((uint16_t *)p + i, &h, 2);
            break;
        }
        case MSR_DTYPE_BF16: {
            float g = (float)v;
            uint32_t u;
            memcpy(&u, &g, 4);
            ((uint16_t *)p)[i] = (uint16_t)(u >> 16); /* small integers: exact */
            break;
        }
        case MSR_DTYPE_I32:
            ((int32_t *)p)[i] = v;
            break;
        case MSR_DTYPE_I64:
            ((int64_t *)p)[i] = v;
            break;
        case MSR_DTYPE_U8:
            ((uint8_t *)p)[i] = (uint8_t)(v + 5);
            break;
        }
    }
}

void gfw_same(const void *got, const void *want, size_t bytes, const char *what)
{
    g_checks++;
    if (bytes && memcmp(got, want, bytes) != 0) {
        const unsigned char *g = got, *w = want;
        size_t i = 0;
        while (g[i] == w[i])
            i++;
        fail("%s: byte %zu of %zu is 0x%02x, the host communicator gave 0x%02x", what, i, bytes,
             g[i], w[i]);
    }
}

msr_comm_t *gfw_make(msr_comm_t *world, gpu_fake_t *f, unsigned flags)
{
    msr_comm_t *d = NULL;
    OK(msr_gpu_comm_create(world, flags, &f->api, &d));
    CHECK(d != NULL);
    CHECK(msr_comm_size(d) == msr_comm_size(world));
    CHECK(msr_comm_rank(d) == msr_comm_rank(world));
    for (int i = 0; i < msr_comm_size(d); i++)
        CHECK(msr_comm_world_rank(d, i) == msr_comm_world_rank(world, i));
    return d;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_fake_worker "
                        "staged|nccl|one|choice|timeout|notify|asyncerr|inittimeout|kill|"
                        "killstaged|oom|lengths\n");
        return 2;
    }
    const char *mode = argv[1];
    msr_ctx_t *ctx = NULL;
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "msr_init: %s: %s\n", msr_status_str(st), msr_last_error());
        return 1;
    }
    g_rank = msr_rank(ctx);
    msr_comm_t *world = NULL;
    setcase("world");
    OK(msr_comm_world(ctx, &world));
    double t0 = now_s();
    if (strcmp(mode, "staged") == 0)
        gfw_mode_staged(ctx, world);
    else if (strcmp(mode, "nccl") == 0)
        gfw_mode_nccl(ctx, world);
    else if (strcmp(mode, "one") == 0)
        gfw_mode_one(ctx, world);
    else if (strcmp(mode, "choice") == 0)
        gfw_mode_choice(ctx, world);
    else if (strcmp(mode, "timeout") == 0)
        gfw_mode_timeout(ctx, world);
    else if (strcmp(mode, "notify") == 0)
        gfw_mode_notify(ctx, world);
    else if (strcmp(mode, "asyncerr") == 0)
        gfw_mode_asyncerr(ctx, world);
    else if (strcmp(mode, "inittimeout") == 0)
        gfw_mode_inittimeout(ctx, world);
    else if (strcmp(mode, "kill") == 0)
        gfw_mode_kill(ctx, world, 0);
    else if (strcmp(mode, "killstaged") == 0)
        gfw_mode_kill(ctx, world, 1);
    else if (strcmp(mode, "oom") == 0)
        gfw_mode_oom(ctx, world);
    else if (strcmp(mode, "lengths") == 0)
        gfw_mode_lengths(ctx, world);
    else
        fail("unknown mode %s", mode);
    setcase("final barrier");
    OK(msr_comm_barrier(world));
    msr_comm_destroy(world);
    if (g_rank == 0)
        printf("ok %s (%ld checks on rank 0, %.1f s)\n", mode, g_checks, now_s() - t0);
    msr_finalize(ctx);
    return 0;
}
