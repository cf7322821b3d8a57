/* The fault suite's job: ITERS iterations of allreduce-based updates of a
 * state vector, checkpointed every EVERY iterations, resuming from the latest
 * complete checkpoint after a restart. The arithmetic is integer (wrapping
 * 64-bit) and the work is split into a fixed number of logical shards, so the
 * result is bitwise the same for any world size, any restart pattern and any
 * reduction order: a run with faults must end with exactly the digest of a
 * run without.
 *
 *   fault_job DIR ITERS EVERY SLEEP_MS OUT
 *
 * Rank 0 writes "iters N digest HEX" to OUT at the end. Every rank prints
 * "start gen G rank R of W at T" (T: wall seconds) once it is running.
 *
 * With FAULT_GATE=DIR in the environment the job is gated, so that a test's
 * fault can never come after the job's end: each rank first writes its pid
 * to DIR/g<G>.r<R>.pid (before its start line), and the ranks hold before
 * their last iteration until DIR/release exists. While they hold, they
 * agree on the release with an allreduce every few milliseconds and beat to
 * their msrun, so a held job looks alive and a lost peer still shows up in a
 * collective. The held collectives leave the state alone: the digest is the
 * same, gated or not. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "msrun/msrun.h"

#define DIM    64
#define SHARDS 12

typedef struct state {
    int64_t iter; /* iterations done */
    uint64_t x[DIM];
} state_t;

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Publishes this process's pid as DIR/g<gen>.r<rank>.pid (written whole:
 * a temporary file renamed into place). */
static bool write_pid(const char *dir, int gen, int rank)
{
    char path[4200], tmp[4210];
    snprintf(path, sizeof path, "%s/g%d.r%d.pid", dir, gen, rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return false;
    bool ok = fprintf(f, "%ld\n", (long)getpid()) > 0;
    ok = fclose(f) == 0 && ok;
    return ok && rename(tmp, path) == 0;
}

#define DIE(what)                                                                     \
    do {                                                                              \
        fprintf(stderr, "fault_job rank %d: %s: %s\n", rank, what, msr_last_error()); \
        msr_comm_destroy(comm);                                                       \
        msr_finalize(ctx);                                                            \
        return 1;                                                                     \
    } while (0)

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 6) {
        fprintf(stderr, "usage: fault_job DIR ITERS EVERY SLEEP_MS OUT\n");
        return 2;
    }
    const char *dir = argv[1], *out = argv[5];
    int64_t iters = atoll(argv[2]), every = atoll(argv[3]);
    int sleep_ms = atoi(argv[4]);
    int rank = -1;
    msr_ctx_t *ctx = NULL;
    msr_comm_t *comm = NULL;
    if (msr_init(&ctx) != MSR_OK)
        DIE("msr_init");
    rank = msr_rank(ctx);
    int world = msr_world_size(ctx);
    if (msr_comm_world(ctx, &comm) != MSR_OK)
        DIE("msr_comm_world");

    const char *gate = getenv("FAULT_GATE");
    if (gate != NULL && gate[0] == '\0')
        gate = NULL;
    if (gate != NULL && !write_pid(gate, msr_generation(ctx), rank)) {
        fprintf(stderr, "fault_job rank %d: writing its pid under %s failed\n", rank, gate);
        msr_comm_destroy(comm);
        msr_finalize(ctx);
        return 1;
    }

    state_t st;
    memset(&st, 0, sizeof st);
    int64_t step = -1;
    int saved_world = 0;
    if (msr_ckpt_latest_any(ctx, dir, &step, &saved_world) != MSR_OK)
        DIE("msr_ckpt_latest_any");
    if (step >= 0) {
        /* the state is the same on every rank: rank 0's of any world size */
        void *data = NULL;
        size_t len = 0;
        if (msr_ckpt_load_rank(ctx, dir, step, 0, &data, &len) != MSR_OK || len != sizeof st)
            DIE("msr_ckpt_load_rank");
        memcpy(&st, data, sizeof st);
        free(data);
    }
    printf("start gen %d rank %d of %d at %.3f from iteration %" PRId64 "\n", msr_generation(ctx),
           rank, world, wall(), st.iter);

    int64_t local[DIM], sum[DIM];
    char release[4200] = "";
    if (gate != NULL)
        snprintf(release, sizeof release, "%s/release", gate);
    while (st.iter < iters) {
        int64_t it = st.iter + 1;
        /* the gate: rank 0's view of the release file, agreed by all */
        for (int32_t released = 0; it == iters && gate != NULL && !released;) {
            int32_t seen = rank == 0 && access(release, F_OK) == 0;
            if (msr_comm_allreduce(comm, &seen, &released, 1, MSR_DTYPE_I32, MSR_OP_MAX) != MSR_OK)
                DIE("allreduce at the gate");
            msr_heartbeat(ctx);
            if (!released)
                usleep(5000);
        }
        memset(local, 0, sizeof local);
        for (int s = rank; s < SHARDS; s += world)
            for (int j = 0; j < DIM; j++)
                local[j] += (int64_t)(mix((uint64_t)it * 1315423911u ^ (uint64_t)s << 20 ^
                                          (uint64_t)j << 8 ^ st.x[j]) >>
                                      24);
        if (msr_comm_allreduce(comm, local, sum, DIM, MSR_DTYPE_I64, MSR_OP_SUM) != MSR_OK)
            DIE("allreduce");
        for (int j = 0; j < DIM; j++)
            st.x[j] = st.x[j] * 6364136223846793005ull + (uint64_t)sum[j];
        st.iter = it;
        msr_heartbeat(ctx);
        if (it % every == 0 || it == iters)
            if (msr_ckpt_save(ctx, dir, it, &st, sizeof st, 3) != MSR_OK)
                DIE("msr_ckpt_save");
        if (sleep_ms > 0)
            usleep((useconds_t)sleep_ms * 1000);
    }
    if (rank == 0) {
        uint64_t digest = 1469598103934665603ull;
        for (int j = 0; j < DIM; j++)
            digest = (digest ^ st.x[j]) * 1099511628211ull;
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp", out);
        FILE *f = fopen(tmp, "w");
        if (f == NULL ||
            fprintf(f, "iters %" PRId64 " digest %016" PRIx64 "\n", st.iter, digest) < 0 ||
            fclose(f) != 0 || rename(tmp, out) != 0)
            DIE("writing the result");
        printf("done: iters %" PRId64 " digest %016" PRIx64 "\n", st.iter, digest);
    }
    msr_comm_destroy(comm);
    msr_finalize(ctx);
    return 0;
}
