/* comm_worker's small mode: the shared-memory slots of every small
 * collective at their bounds and one past, on several communicators. */
#include "comm_worker.h"

#include <sched.h>

/* What shm.c sends lined at most (SHM_LINED_MAX; in a group of two,
 * SHM_LINED_PAIR), and a line's data bytes: the sizes of a whole number of
 * lines and one element past are where a reader awaiting one line too few
 * or too many goes wrong. */
#define LINED_MAX  128
#define LINED_PAIR 4096
#define LINE_DATA  56

/* The ranks on this machine (every rank of the job: one node). */
static int g_node_ranks;

/* What comm/ucx/shm.c's machine_crowded says: more ranks on this machine
 * than CPUs they may run on (every rank has this one's). */
static int machine_crowded(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        fail("sched_getaffinity: %s", strerror(errno));
    return g_node_ranks > CPU_COUNT(&set);
}

/* The most a communicator of n whose slots are slot bytes sends lined: a
 * group of two on an uncrowded machine MSR_COMM_SHM_LINED_PAIR (LINED_MAX
 * to LINED_PAIR; by default, or out of range, LINED_PAIR). */
static size_t lined_most(size_t slot, int n)
{
    size_t most = LINED_MAX;
    if (n == 2 && !machine_crowded()) {
        const char *v = getenv("MSR_COMM_SHM_LINED_PAIR");
        char *end = NULL;
        unsigned long long want = v ? strtoull(v, &end, 10) : 0;
        most = v && *v && *end == '\0' && want >= LINED_MAX && want <= LINED_PAIR ? (size_t)want
                                                                                  : LINED_PAIR;
    }
    return slot < most ? slot : most;
}

/* ---- the shared-memory slots at their bounds ---- */

/* The slots' size for a communicator of n made now: what shm.c's shape
 * gives for MSR_COMM_SHM_MAX and MSR_COMM_SHM_SEGMENT (their defaults
 * unless set), in whole cache lines. */
static size_t slot_size(int n)
{
    const char *mx = getenv("MSR_COMM_SHM_MAX"), *seg = getenv("MSR_COMM_SHM_SEGMENT");
    size_t slot = mx ? strtoull(mx, NULL, 10) : 16 << 10;
    size_t cap = (seg ? strtoull(seg, NULL, 10) : 16 << 20) / (2 * (size_t)n);
    return (slot < cap ? slot : cap) / 64 * 64;
}

/* Every collective of the slots on t at exactly the slot's size and one
 * element past it (the tiles or messages then), at the 16 bytes that travel
 * in a member's counter line and one past, at the most that travels lined
 * (lined_most) and one past, at a line's data bytes and one
 * past, past two lines, at the most lines the lined limit fills whole and
 * one element past, and at counts that are multiples of nothing: every
 * dtype and op, in place and not. */
static void check_small(tc_t *t, size_t slot)
{
    size_t lined = lined_most(slot, t->n), full = lined / LINE_DATA * LINE_DATA;
    for (int d = 0; d < MSR_DTYPE_COUNT; d++) {
        msr_dtype_t dt = (msr_dtype_t)d;
        size_t es = msr_dtype_size(dt), n = (size_t)t->n;
        /* whole vectors (allreduce, broadcast, an allgather's block) and a
         * reduce-scatter's block, whose input is n of them */
        const uint64_t whole[] = {slot / es,
                                  slot / es + 1,
                                  16 / es,
                                  16 / es + 1,
                                  lined / es,
                                  lined / es + 1,
                                  LINE_DATA / es,
                                  LINE_DATA / es + 1,
                                  2 * LINE_DATA / es + 1,
                                  full / es,
                                  full / es + 1,
                                  3,
                                  1};
        const uint64_t block[] = {slot / (n * es),
                                  slot / (n * es) + 1,
                                  16 / (n * es),
                                  16 / (n * es) + 1,
                                  lined / (n * es),
                                  lined / (n * es) + 1,
                                  LINE_DATA / (n * es),
                                  LINE_DATA / (n * es) + 1,
                                  2 * LINE_DATA / (n * es) + 1,
                                  full / (n * es),
                                  full / (n * es) + 1,
                                  3,
                                  1};
        for (size_t c = 0; c < sizeof whole / sizeof whole[0]; c++) {
            for (int o = 0; o < MSR_OP_COUNT; o++) {
                msr_op_t op = (msr_op_t)o;
                for (int ip = 0; ip < 3; ip++) {
                    snprintf(g_case, sizeof g_case, "small %s n=%d %s %s count=%llu/%llu ip=%d",
                             t->label, t->n, msr_dtype_name(dt), msr_op_name(op),
                             (unsigned long long)whole[c], (unsigned long long)block[c], ip);
                    if (ip < 2)
                        cw_check_allreduce(t, dt, op, whole[c], ip);
                    cw_check_reduce_scatter(t, dt, op, block[c], ip);
                }
            }
            snprintf(g_case, sizeof g_case, "small %s n=%d %s count=%llu", t->label, t->n,
                     msr_dtype_name(dt), (unsigned long long)whole[c]);
            cw_check_allgather(t, dt, whole[c], (int)(c % 2));
            cw_check_allgather(t, dt, whole[c], (int)(c % 2 == 0));
            cw_check_broadcast(t, dt, whole[c], (int)(c % n));
        }
    }
}

/* ---- the order of the fold, bitwise ---- */

/* Rank r's element i: a float of its own magnitude, mantissa and sign, so
 * that a fold in another order, or an element from another line or rank,
 * gives other bits (the small integers of cw_input repeat every 7
 * elements: a whole 56-byte line of any dtype). */
static double order_input(int r, uint64_t i)
{
    uint64_t h = (i + 1) * 2654435761u + (uint64_t)r * 40503u;
    double m = 1.0 + (double)(h % 1000003u) / 1000003.0;
    m = ldexp(m, (int)((i * 7 + (uint64_t)r * 3) % 13) - 6);
    return (h >> 20) % 3 == 0 ? -m : m;
}

/* acc op x for both dtypes in one body: a float32 pair's sum, product,
 * minimum or maximum computed in double and rounded to float has the bits
 * of the float32 operation (double holds more than twice float's
 * precision, so the second rounding is exact). */
static double fold_one(msr_op_t op, double acc, double x)
{
    switch (op) {
    case MSR_OP_PROD:
        return acc * x;
    case MSR_OP_MIN:
        return x < acc ? x : acc;
    case MSR_OP_MAX:
        return x > acc ? x : acc;
    default:
        return acc + x;
    }
}

/* Element i folded over ranks 0..n-1 in rank order in the dtype (f32 or
 * f64), as msr_reduce's operands go: the reference, written here. */
static void order_ref(msr_op_t op, msr_dtype_t dt, int n, uint64_t i, void *ref, size_t at)
{
    if (dt == MSR_DTYPE_F32) {
        float acc = (float)order_input(0, i);
        for (int r = 1; r < n; r++)
            acc = (float)fold_one(op, acc, (float)order_input(r, i));
        ((float *)ref)[at] = op == MSR_OP_AVG ? acc / (float)n : acc;
    } else {
        double acc = order_input(0, i);
        for (int r = 1; r < n; r++)
            acc = fold_one(op, acc, order_input(r, i));
        ((double *)ref)[at] = op == MSR_OP_AVG ? acc / (double)n : acc;
    }
}

static void order_put(msr_dtype_t dt, void *p, size_t at, double v)
{
    if (dt == MSR_DTYPE_F32)
        ((float *)p)[at] = (float)v;
    else
        ((double *)p)[at] = v;
}

/* An allreduce (inplace: in place) of count elements and a reduce-scatter
 * of rc a rank against the rank-order fold, bitwise. */
static void order_check(tc_t *t, msr_dtype_t dt, msr_op_t op, uint64_t count, uint64_t rc,
                        int inplace)
{
    size_t es = msr_dtype_size(dt), total = rc * (size_t)t->n;
    size_t most = count > total ? count : total;
    unsigned char *in = xmalloc(most * es), *out = xmalloc(most * es), *ref = xmalloc(most * es);
    for (uint64_t i = 0; i < most; i++)
        order_put(dt, in, i, order_input(t->me, i));
    for (uint64_t i = 0; i < count; i++)
        order_ref(op, dt, t->n, i, ref, i);
    memset(out, 0xee, count * es);
    if (inplace) {
        memcpy(out, in, count * es);
        OK(msr_comm_allreduce(t->comm, MSR_IN_PLACE, out, count, dt, op));
    } else {
        OK(msr_comm_allreduce(t->comm, in, out, count, dt, op));
    }
    cw_check_bytes(out, ref, count, es, "allreduce (fold order)");
    for (uint64_t j = 0; j < rc; j++)
        order_ref(op, dt, t->n, (uint64_t)t->me * rc + j, ref, j);
    memset(out, 0xee, rc * es);
    OK(msr_comm_reduce_scatter(t->comm, in, out, rc, dt, op));
    cw_check_bytes(out, ref, rc, es, "reduce_scatter (fold order)");
    free(in);
    free(out);
    free(ref);
}

/* The folds of the slots' sizes (inline, lined at a line's bounds and
 * the lined limit's, plain past it) in rank order to the bit, every op,
 * float32 and float64. */
static void check_order(tc_t *t, size_t slot)
{
    size_t lined = lined_most(slot, t->n), n = (size_t)t->n;
    size_t full = lined / LINE_DATA * LINE_DATA;
    const msr_dtype_t dts[] = {MSR_DTYPE_F32, MSR_DTYPE_F64};
    for (size_t d = 0; d < 2; d++) {
        size_t es = msr_dtype_size(dts[d]);
        const uint64_t whole[] = {16 / es,       16 / es + 1, 56 / es,        56 / es + 1,
                                  168 / es - 1,  lined / es,  lined / es + 1, full / es,
                                  full / es + 1, 333};
        const uint64_t block[] = {1,
                                  16 / (n * es) + 1,
                                  56 / (n * es),
                                  56 / (n * es) + 1,
                                  13,
                                  lined / (n * es),
                                  lined / (n * es) + 1,
                                  full / (n * es),
                                  full / (n * es) + 1,
                                  3};
        for (size_t c = 0; c < sizeof whole / sizeof whole[0]; c++)
            for (int o = 0; o < MSR_OP_COUNT; o++) {
                msr_op_t op = (msr_op_t)o;
                snprintf(g_case, sizeof g_case, "fold order %s n=%d %s %s count=%llu/%llu",
                         t->label, t->n, msr_dtype_name(dts[d]), msr_op_name(op),
                         (unsigned long long)whole[c], (unsigned long long)block[c]);
                order_check(t, dts[d], op, whole[c], block[c] ? block[c] : 1, (int)(c % 2));
            }
    }
}

/* The same operations at their bounds on three communicators at once
 * (the world, a dup with smaller slots, halves of the world), non-blocking,
 * finished in different orders on different ranks. */
static void small_at_once(msr_comm_t *world, msr_comm_t *dup, msr_comm_t *half, size_t slot,
                          size_t dslot)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    int hn = msr_comm_size(half), hme = msr_comm_rank(half);
    size_t bc = slot / 4, ag = dslot / 4, rs = dslot / 4 / (size_t)hn;
    float *b = xmalloc(bc * 4), *gin = xmalloc(ag * 4), *gout = xmalloc(ag * 4 * (size_t)n);
    float *rin = xmalloc(rs * 4 * (size_t)hn), *rout = xmalloc(rs * 4 + 4);
    for (int round = 0; round < 20; round++) {
        snprintf(g_case, sizeof g_case, "small at once round %d", round);
        int root = round % n;
        for (size_t i = 0; i < bc; i++)
            b[i] = me == root ? (float)((i + (size_t)round) % 9) : -1.0f;
        for (size_t i = 0; i < ag; i++)
            gin[i] = (float)((size_t)me * 3 + i % 5);
        for (size_t i = 0; i < rs * (size_t)hn; i++)
            rin[i] = (float)((size_t)hme + i % 7);
        msr_comm_req_t *req[3];
        OK(msr_comm_ibroadcast(world, b, bc, MSR_DTYPE_F32, root, &req[0]));
        OK(msr_comm_iallgather(dup, gin, gout, ag, MSR_DTYPE_F32, &req[1]));
        OK(msr_comm_ireduce_scatter(half, rin, rout, rs, MSR_DTYPE_F32, MSR_OP_SUM, &req[2]));
        for (int k = 0; k < 3; k++)
            OK(msr_comm_wait(req[me % 2 ? 2 - k : k]));
        for (size_t i = 0; i < bc; i++)
            if (b[i] != (float)((i + (size_t)round) % 9))
                fail("broadcast at %zu: %g", i, (double)b[i]);
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < ag; i++)
                if (gout[(size_t)r * ag + i] != (float)((size_t)r * 3 + i % 5))
                    fail("allgather block %d at %zu", r, i);
        for (size_t i = 0; i < rs; i++) {
            float want = 0;
            for (int r = 0; r < hn; r++)
                want += (float)((size_t)r + ((size_t)hme * rs + i) % 7);
            if (rout[i] != want)
                fail("reduce_scatter at %zu: %g, expected %g", i, (double)rout[i], (double)want);
        }
        g_checks += 3;
    }
    free(b);
    free(gin);
    free(gout);
    free(rin);
    free(rout);
}

/* ---- a two-member group's turns ---- */

/* Operation k of a two-member group writes its inline vector where its
 * k - 2 lay, so it may start only once the peer finished k - 2 (published
 * k - 1); a member that saw that already (the wait of k - 1) does not look
 * again. A broadcast's root does not wait for the peer: after one, the
 * next allreduce is where a turn taken on k - 2's word would overwrite
 * the vector the peer has not copied yet. Both members on one CPU, so
 * that one runs ahead while the other is preempted between its publish
 * and its copy: every result checked, rounds of allreduce, broadcast
 * (each member the root in turn) and barrier. */
static void check_turns(tc_t *t)
{
    cpu_set_t was, one;
    if (sched_getaffinity(0, sizeof was, &was) != 0)
        fail("sched_getaffinity: %s", strerror(errno));
    int cpu = 0;
    while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &was))
        cpu++;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0)
        fail("sched_setaffinity: %s", strerror(errno));
    for (int i = 0; i < 300; i++) {
        snprintf(g_case, sizeof g_case, "turns %s n=%d round %d", t->label, t->n, i);
        float x = (float)((t->me + 1) * (i % 97 + 1)), y = 0.0f,
              b = (float)(t->me == i % 2 ? i : -1);
        OK(msr_comm_allreduce(t->comm, &x, &y, 1, MSR_DTYPE_F32, MSR_OP_SUM));
        if (y != (float)(3 * (i % 97 + 1)))
            fail("allreduce gave %g, not %g", (double)y, (double)(3 * (i % 97 + 1)));
        OK(msr_comm_broadcast(t->comm, &b, 1, MSR_DTYPE_F32, i % 2));
        if (b != (float)i)
            fail("broadcast gave %g, not %d", (double)b, i);
        if (i % 5 == 0)
            OK(msr_comm_barrier(t->comm));
        g_checks += 2;
    }
    if (sched_setaffinity(0, sizeof was, &was) != 0)
        fail("sched_setaffinity: %s", strerror(errno));
}

/* The slots of the default size on the world, of 1000 bytes (960: whole
 * lines) on a dup, on halves of the world, and all three at once. */
void cw_mode_small(msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    size_t slot = slot_size(n); /* broadcasts forced through the slots (main) */
    g_node_ranks = n;
    tc_t t = {world, "world", n, me};
    check_small(&t, slot);
    check_order(&t, slot);
    if (n == 2)
        check_turns(&t);
    setenv("MSR_COMM_SHM_MAX", "1000", 1);
    msr_comm_t *dup = NULL, *half = NULL;
    snprintf(g_case, sizeof g_case, "small dup");
    OK(msr_comm_dup(world, 0, &dup));
    size_t dslot = slot_size(n);
    OK(msr_comm_split(world, me % 2, me, &half));
    int hn = msr_comm_size(half);
    size_t hslot = slot_size(hn);
    unsetenv("MSR_COMM_SHM_MAX");
    tc_t d = {dup, "dup", n, me}, h = {half, "half", hn, msr_comm_rank(half)};
    check_small(&d, dslot);
    check_order(&d, dslot);
    check_small(&h, hslot);
    check_order(&h, hslot);
    small_at_once(world, dup, half, slot, dslot);
    msr_comm_destroy(half);
    msr_comm_destroy(dup);
}
