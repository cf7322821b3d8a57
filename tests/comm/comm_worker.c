/* The worker of the multi-rank communicator tests, started by the real msrun
 * (tests/comm/run.sh). `comm_worker MODE`:
 *   collectives  every collective, dtype and op against a serial reference;
 *                counts 0, 1, a prime and a large odd one; in place and not;
 *                on the world and on split sub-groups of sizes 1 to 8; with
 *                each algorithm forced in turn
 *   inflight     several non-blocking operations on two communicators at
 *                once, finished in different orders on different ranks
 *   p2p          send/recv, isend/irecv, tags, receives of the wrong length
 *                (the error names the sender and both sizes), dup with its
 *                own worker
 *   anysrc       receives from any source: every member hears from every
 *                member once (blocking and not, with tags), beside receives
 *                that name their peer, on a sub-group ranked backwards (the
 *                sender is the group's rank), bad arguments, the wrong length
 *   killanysrc   the last rank dies while every other waits in a receive
 *                from any source: each must fail with MSR_ERR_PEER_LOST
 *   threads      three threads at once: on the world, on a dup with its own
 *                worker, and on a dup sharing the world's engine
 *   determinism  random floats: the same bits on every rank and twice in a
 *                row; rank 0 prints a hash for run-to-run comparison
 *   kill         the last rank SIGKILLs itself in the middle of allreduces:
 *                the others must fail with MSR_ERR_PEER_LOST in time
 *                (1 MiB: the tiled shared-memory path on one node, the UCX
 *                ring across nodes)
 *   killring     the same with the UCX ring forced
 *   killsmall    the same with 8-byte allreduces (the shared-memory slots)
 *   killsmallbc  the same with 8-byte broadcasts from rank 0, killsmallag
 *   killsmallrs  with small allgathers and reduce-scatters: all through the
 *                slots (their messages name "(shm)")
 *   killsmallbcauto  killsmallbc without forcing: the slots, also where
 *                the members' CPUs are fewer than the ranks
 *   killlined    the same with 2 KiB allreduces: lined in a group of two,
 *                the reader waiting on one of the dead peer's lines
 *   stoplined    the same with a peer that stops answering
 *   small        every collective of the slots at the slot's size and one
 *                past, at the inline size and one past, every dtype and op;
 *                on the world, a dup with other slots and halves, then all
 *                three at once
 *   killhier     the same with the two-level allreduce forced (several nodes)
 *   killhierrs   the same with the two-level reduce-scatter (blocks routed
 *                through one member per node)
 *   killhierag   the same with the two-level allgather
 *   killhierbc   the same with two-level broadcasts from rank 0 (the
 *                chain of nodes; the victim is on its last node)
 *   killhierred  the same with two-level reduces to rank 0
 *                (the killhier modes check that the failure is that
 *                algorithm's: its message names it)
 *   leave        rank 0 destroys the world after a barrier and exits; the
 *                others, still holding it, go on among themselves on it
 *                (point to point): a member that left cleanly is not lost
 *   exitafterbarrier  rank 0 arrives last at a barrier and exits at once:
 *                the others' barrier ends, it does not fail (PEER_LOST)
 *   giveup       rank 1's receive passes its deadline; rank 0's next
 *                barrier fails with the abort notice's exact message
 *   stop         rank 1 stops answering (it sleeps): the others must fail
 *                with MSR_ERR_TIMEOUT (or PEER_LOST from the aborts) in time
 *   stopsmall    the same with 8-byte allreduces (the shared-memory slots)
 * Every rank checks its own results; a failed check prints the case and
 * exits 1. Rank 0 prints "ok MODE" at the end. */
#include "comm_worker.h"

int g_rank = -1;
char g_case[256];
long g_checks; /* results compared, for the final line */
int g_nodes;   /* msrun nodes in the job */

void fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "comm_worker rank %d: FAIL [%s]: %s (last error: %s)\n", g_rank, g_case, msg,
            msr_last_error());
    fflush(stderr);
    _exit(1);
}

double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- element values, written independently of comm/reduce.c ---- */

static uint16_t to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

uint16_t cw_to_f16(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

/* Writes element i of dtype dt: integer types take iv (wrapping), float
 * types fv. */
void cw_put(msr_dtype_t dt, void *p, size_t i, int64_t iv, double fv)
{
    switch (dt) {
    case MSR_DTYPE_F32:
        ((float *)p)[i] = (float)fv;
        break;
    case MSR_DTYPE_F64:
        ((double *)p)[i] = fv;
        break;
    case MSR_DTYPE_F16:
        ((uint16_t *)p)[i] = cw_to_f16((float)fv);
        break;
    case MSR_DTYPE_BF16:
        ((uint16_t *)p)[i] = to_bf16((float)fv);
        break;
    case MSR_DTYPE_I32:
        ((uint32_t *)p)[i] = (uint32_t)(uint64_t)iv;
        break;
    case MSR_DTYPE_I64:
        ((uint64_t *)p)[i] = (uint64_t)iv;
        break;
    case MSR_DTYPE_U8:
        ((uint8_t *)p)[i] = (uint8_t)(uint64_t)iv;
        break;
    }
}

static int is_float(msr_dtype_t dt)
{
    return dt == MSR_DTYPE_F32 || dt == MSR_DTYPE_F64 || dt == MSR_DTYPE_F16 ||
           dt == MSR_DTYPE_BF16;
}

/* The input of rank r at index i for op: small integers, so that sums and
 * products are exact in every type whatever the order. */
int64_t cw_input(msr_op_t op, msr_dtype_t dt, int r, uint64_t i)
{
    if (op == MSR_OP_PROD) {
        if ((r + i) % 4 == 1)
            return 2;
        return (r + 2 * i) % 5 == 0 ? -1 : 1;
    }
    int64_t v = (int64_t)((r * 5 + i * 3 + 1) % 7);
    return dt == MSR_DTYPE_U8 ? v : v - 3;
}

/* The reference reduction of index i over ranks 0..n-1, written to ref[i]. */
void cw_reference(msr_op_t op, msr_dtype_t dt, int n, uint64_t i, void *ref, size_t at)
{
    int64_t acc = cw_input(op, dt, 0, i);
    for (int r = 1; r < n; r++) {
        int64_t x = cw_input(op, dt, r, i);
        switch (op) {
        case MSR_OP_PROD:
            acc *= x;
            break;
        case MSR_OP_MIN:
            acc = x < acc ? x : acc;
            break;
        case MSR_OP_MAX:
            acc = x > acc ? x : acc;
            break;
        default:
            acc += x;
            break;
        }
    }
    if (op != MSR_OP_AVG) {
        cw_put(dt, ref, at, acc, (double)acc);
        return;
    }
    if (!is_float(dt)) {
        cw_put(dt, ref, at, acc / n, 0);
    } else if (dt == MSR_DTYPE_F64) {
        cw_put(dt, ref, at, 0, (double)acc / (double)n);
    } else {
        float q = (float)acc / (float)n; /* one f32 division, rounded once */
        cw_put(dt, ref, at, 0, (double)q);
    }
}

/* A value that identifies (a, b, k) in every type (for data movement). */
void cw_put_id(msr_dtype_t dt, void *p, size_t i, int a, int b, uint64_t k)
{
    int64_t v = (int64_t)((a * 37 + b * 11 + k * 7) % 251);
    cw_put(dt, p, i, v, (double)v);
}

void cw_check_bytes(const void *got, const void *want, size_t count, size_t es, const char *what)
{
    const unsigned char *g = got, *w = want;
    g_checks++;
    for (size_t i = 0; i < count; i++)
        if (memcmp(g + i * es, w + i * es, es) != 0) {
            unsigned long long gv = 0, wv = 0;
            memcpy(&gv, g + i * es, es);
            memcpy(&wv, w + i * es, es);
            fail("%s: element %zu of %zu is 0x%llx, expected 0x%llx", what, i, count, gv, wv);
        }
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        fail("out of memory for %zu bytes", n);
    return p;
}
/* The algorithms mode forces, through the communicator's environment. */
static void force_algorithms(const char *mode)
{
    if (strcmp(mode, "killring") == 0)
        setenv("MSR_COMM_ALGO_ALLREDUCE", "ring", 1);
    if (strcmp(mode, "killhier") == 0)
        setenv("MSR_COMM_ALGO_ALLREDUCE", "hier", 1);
    if (strcmp(mode, "killhierrs") == 0) /* the blocks routed through the nodes */
        setenv("MSR_COMM_ALGO_REDUCE_SCATTER", "hier", 1);
    if (strcmp(mode, "killhierag") == 0)
        setenv("MSR_COMM_ALGO_ALLGATHER", "hier", 1);
    if (strcmp(mode, "killhierbc") == 0) /* the chain of nodes */
        setenv("MSR_COMM_ALGO_BROADCAST", "hier", 1);
    if (strcmp(mode, "killhierred") == 0)
        setenv("MSR_COMM_ALGO_REDUCE", "hier", 1);
    /* auto leaves the slots' broadcast out where ranks outnumber CPUs */
    if (strcmp(mode, "small") == 0 || strcmp(mode, "killsmallbc") == 0)
        setenv("MSR_COMM_ALGO_BROADCAST", "shm", 1);
    if (strcmp(mode, "inflighthier") == 0) { /* several two-level operations in flight */
        static const char *const ops[] = {"ALLREDUCE", "REDUCE_SCATTER", "ALLGATHER", "BROADCAST",
                                          "REDUCE"};
        for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
            char var[64];
            snprintf(var, sizeof var, "MSR_COMM_ALGO_%s", ops[i]);
            setenv(var, "hier", 1);
        }
    }
}

/* Runs mode's checks on world; 0 when mode is not one of these. */
static int run_mode(msr_ctx_t *ctx, msr_comm_t *world, const char *mode)
{
    if (strcmp(mode, "collectives") == 0)
        cw_mode_collectives(world);
    else if (strcmp(mode, "samecomm") == 0)
        cw_mode_samecomm(world);
    else if (strcmp(mode, "inflight") == 0 || strcmp(mode, "inflighthier") == 0)
        cw_mode_inflight(world);
    else if (strcmp(mode, "p2p") == 0)
        cw_mode_p2p(world);
    else if (strcmp(mode, "unreceived") == 0)
        cw_mode_unreceived(world);
    else if (strcmp(mode, "threads") == 0)
        cw_mode_threads(world);
    else if (strcmp(mode, "determinism") == 0)
        cw_mode_determinism(world);
    else if (strcmp(mode, "hier") == 0)
        cw_mode_hier(ctx, world);
    else if (strcmp(mode, "small") == 0)
        cw_mode_small(world);
    else if (strcmp(mode, "leave") == 0)
        cw_mode_leave(ctx, world);
    else if (strcmp(mode, "exitafterbarrier") == 0)
        cw_mode_exit_after_barrier(ctx, world);
    else if (strcmp(mode, "giveup") == 0)
        cw_mode_giveup(ctx, world);
    else if (strcmp(mode, "anysrc") == 0)
        cw_mode_anysrc(world);
    else if (strcmp(mode, "killanysrc") == 0)
        cw_mode_killanysrc(ctx, world);
    else
        return 0;
    return 1;
}
int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr,
                "usage: comm_worker "
                "collectives|samecomm|inflight|p2p|unreceived|threads|determinism|kill|killring|"
                "killsmall|"
                "leave|exitafterbarrier|giveup|stop|hier|killhier|killhierrs|killhierag|killhierbc|"
                "killhierred|"
                "inflighthier|small|killsmallbc|killsmallbcauto|killsmallag|killsmallrs|stopsmall|"
                "killlined|stoplined\n");
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
    g_nodes = msr_node_count(ctx);
    force_algorithms(mode);
    msr_comm_t *world = NULL;
    snprintf(g_case, sizeof g_case, "world");
    OK(msr_comm_world(ctx, &world));
    if (msr_comm_size(world) != msr_world_size(ctx) || msr_comm_rank(world) != g_rank ||
        msr_comm_world_rank(world, g_rank) != g_rank)
        fail("world: rank %d of %d", msr_comm_rank(world), msr_comm_size(world));
    double t0 = now_ms();
    if (!run_mode(ctx, world, mode) && !cw_run_failure_mode(ctx, world, mode))
        fail("unknown mode %s", mode);
    snprintf(g_case, sizeof g_case, "final barrier");
    OK(msr_comm_barrier(world));
    msr_comm_destroy(world);
    if (g_rank == 0)
        printf("ok %s (%ld results checked on rank 0, %.1f s)\n", mode, g_checks,
               (now_ms() - t0) / 1e3);
    msr_finalize(ctx);
    return 0;
}