/* comm_worker's modes about fold order: determinism (the same bits on every
 * rank and run) and hier (the two levels over several nodes against their
 * documented fold order). */
#include "comm_worker.h"

/* ---- determinism ---- */

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The paths that promise to fold in rank order (direct, the small
 * shared-memory slots, inline or not, and the tiled path) give the bits of
 * the serial sum x0 + x1 + ... + x(n-1), on values of very different
 * magnitudes where any other order rounds differently. */
static float order_value(int r, uint64_t i)
{
    static const int exps[] = {24, 0, -3, 13, -8, 20, 2, 17, -1, 9, 26, -5, 6};
    int e = exps[((uint64_t)r * 7 + i * 3) % 13];
    float v = ldexpf(1.0f + (float)((i * 5 + (uint64_t)r) % 8) / 8.0f, e);
    return (r + i) % 3 == 1 ? -v : v;
}

static void check_fold_order(msr_comm_t *world)
{
    int n = msr_comm_size(world);
    if (n < 3)
        return; /* a sum of two is the same whichever adds */
    enum { COUNT = 1001 };
    float *in = xmalloc(COUNT * 4), *out = xmalloc(COUNT * 4), *ref = xmalloc(COUNT * 4);
    int differs = 0;
    for (uint64_t i = 0; i < COUNT; i++) {
        in[i] = order_value(msr_comm_rank(world), i);
        float fwd = order_value(0, i), rev = order_value(n - 1, i);
        for (int r = 1; r < n; r++) {
            fwd += order_value(r, i);
            rev += order_value(n - 1 - r, i);
        }
        ref[i] = fwd;
        differs += memcmp(&fwd, &rev, 4) != 0;
    }
    if (differs == 0)
        fail("fold order: the test values do not depend on the order");
    static const char *const algos[][4] = {
        /* label, MSR_COMM_ALGO_ALLREDUCE, MSR_COMM_SHM_MAX, MSR_COMM_SHM_TILE */
        {"direct", "direct", NULL, NULL},
        {"shm slots", "shm", NULL, NULL},
        {"shm tiles", "shm", "0", "4096"},
    };
    static const size_t counts[] = {3, 64, COUNT};
    for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
        setenv("MSR_COMM_ALGO_ALLREDUCE", algos[a][1], 1);
        if (algos[a][2]) {
            setenv("MSR_COMM_SHM_MAX", algos[a][2], 1);
            setenv("MSR_COMM_SHM_TILE", algos[a][3], 1);
        }
        msr_comm_t *c = NULL;
        OK(msr_comm_dup(world, 0, &c));
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            snprintf(g_case, sizeof g_case, "fold order %s count %zu", algos[a][0], counts[k]);
            memset(out, 0, COUNT * 4);
            OK(msr_comm_allreduce(c, in, out, counts[k], MSR_DTYPE_F32, MSR_OP_SUM));
            for (size_t i = 0; i < counts[k]; i++)
                if (memcmp(&out[i], &ref[i], 4) != 0)
                    fail("%s: element %zu is %a, the rank-order sum is %a", g_case, i,
                         (double)out[i], (double)ref[i]);
            memcpy(out, in, COUNT * 4);
            OK(msr_comm_allreduce(c, MSR_IN_PLACE, out, counts[k], MSR_DTYPE_F32, MSR_OP_SUM));
            if (memcmp(out, ref, counts[k] * 4) != 0)
                fail("%s in place: not the rank-order sum", g_case);
        }
        msr_comm_destroy(c);
        unsetenv("MSR_COMM_SHM_MAX");
        unsetenv("MSR_COMM_SHM_TILE");
    }
    unsetenv("MSR_COMM_ALGO_ALLREDUCE");
    free(in);
    free(out);
    free(ref);
}

void cw_mode_determinism(msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    const size_t count = 300007;
    float *in = xmalloc(count * 4), *out = xmalloc(count * 4);
    uint16_t *hin = xmalloc(count * 2), *hout = xmalloc(count * 2);
    uint64_t seed = 88172645463325252ull + (uint64_t)me * 7919;
    for (size_t i = 0; i < count; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        in[i] = (float)((double)(seed % 2000001) / 1000.0 - 1000.0) * 1.0001f;
        hin[i] = cw_to_f16(in[i] / 64.0f);
    }
    /* "tiles": the tiled shared-memory path (several tiles); it folds in
     * rank order like direct, so its first 1001 elements must have the
     * same bits as direct's whole result */
    static const char *const algos[] = {"direct", "shm", "rd", "ring", "tiles", "tiles-nt"};
    uint64_t all = 1469598103934665603ull, direct[2] = {0, 0};
    for (size_t a = 0; a < 6; a++) {
        setenv("MSR_COMM_ALGO_ALLREDUCE", a >= 4 ? "shm" : algos[a], 1);
        if (a >= 4) {
            setenv("MSR_COMM_SHM_MAX", "0", 1);
            setenv("MSR_COMM_SHM_TILE", "65536", 1);
            setenv("MSR_COMM_SHM_NT", a == 5 ? "1" : "0", 1);
        }
        msr_comm_t *c = NULL;
        OK(msr_comm_dup(world, 0, &c));
        for (int dt = 0; dt < 2; dt++) {
            size_t cnt = a <= 1 ? 1001 : count; /* direct, shm: small vectors */
            uint64_t h[2];
            for (int rep = 0; rep < 2; rep++) {
                snprintf(g_case, sizeof g_case, "determinism %s %s rep %d", algos[a],
                         dt ? "f16" : "f32", rep);
                if (dt == 0) {
                    OK(msr_comm_allreduce(c, in, out, cnt, MSR_DTYPE_F32, MSR_OP_SUM));
                    h[rep] = fnv(out, cnt * 4);
                } else {
                    OK(msr_comm_allreduce(c, hin, hout, cnt, MSR_DTYPE_F16, MSR_OP_SUM));
                    h[rep] = fnv(hout, cnt * 2);
                }
            }
            if (h[0] != h[1])
                fail("two identical allreduces gave different bits");
            if (a == 0)
                direct[dt] = h[0];
            if (a >= 4 && (dt ? fnv(hout, 1001 * 2) : fnv(out, 1001 * 4)) != direct[dt])
                fail("the tiled path and direct folded differently");
            uint64_t *hs = xmalloc((size_t)n * 8);
            OK(msr_comm_allgather(c, &h[0], hs, 1, MSR_DTYPE_I64));
            for (int r = 0; r < n; r++)
                if (hs[r] != h[0])
                    fail("rank %d got different bits than this rank", r);
            free(hs);
            all = (all ^ h[0]) * 1099511628211ull;
        }
        msr_comm_destroy(c);
    }
    unsetenv("MSR_COMM_SHM_MAX");
    unsetenv("MSR_COMM_SHM_TILE");
    unsetenv("MSR_COMM_SHM_NT");
    unsetenv("MSR_COMM_ALGO_ALLREDUCE");
    check_fold_order(world);
    if (me == 0)
        printf("determinism hash %016llx\n", (unsigned long long)all);
    free(in);
    free(out);
    free(hin);
    free(hout);
}

/* ---- two levels (groups over several nodes) ---- */

/* The documented fold order of the two levels: each node's members in
 * group rank order, then the nodes' partials in node order (ascending node
 * id); node_of: the node of each group rank. */
/* Node m's partial of element i: its members in group rank order; *any:
 * whether it has members. */
static float node_partial(const int *node_of, int n, int m, uint64_t i, int *any)
{
    float part = 0;
    *any = 0;
    for (int r = 0; r < n; r++) {
        if (node_of[r] != m)
            continue;
        float v = order_value(r, i);
        part = *any ? part + v : v;
        *any = 1;
    }
    return part;
}

static float hier_order_sum(const int *node_of, int n, uint64_t i)
{
    float total = 0;
    int first_node = 1;
    for (int m = 0; m < n; m++) { /* node ids: job rank / ranks per node */
        int any;
        float part = node_partial(node_of, n, m, i, &any);
        if (!any)
            continue;
        total = first_node ? part : total + part;
        first_node = 0;
    }
    return total;
}

/* The documented fold order of the two-level reduce: the nodes' partials
 * (each as above) along the chain of nodes from the root's, in ascending
 * node id, wrapping: P0 + (P1 + (... + P(N-1))). */
static float hier_chain_sum(const int *node_of, int n, int root, uint64_t i)
{
    int *nodes = xmalloc((size_t)n * sizeof *nodes), nn = 0, first = 0;
    for (int m = 0; m < n; m++) { /* the nodes present, ascending */
        int any;
        node_partial(node_of, n, m, i, &any);
        if (any)
            nodes[nn++] = m;
    }
    for (int v = 0; v < nn; v++)
        if (nodes[v] == node_of[root])
            first = v;
    float acc = 0;
    for (int v = nn - 1; v >= 0; v--) {
        int any;
        float part = node_partial(node_of, n, nodes[(first + v) % nn], i, &any);
        acc = v == nn - 1 ? part : part + acc;
    }
    free(nodes);
    return acc;
}

/* One group over several nodes, forced through the two levels: every
 * reduction against the reference, in and out of place, sizes within a
 * tile and across many, odd counts; the documented fold order; the same
 * bits on every rank. */
static void check_hier_group(msr_comm_t *c, const char *label, int local_size)
{
    int n = msr_comm_size(c), me = msr_comm_rank(c);
    tc_t t = {c, label, n, me};
    static const uint64_t counts[] = {1, 2, 37, 1001, 10007};
    static const msr_dtype_t dts[] = {MSR_DTYPE_F32, MSR_DTYPE_BF16, MSR_DTYPE_F64, MSR_DTYPE_I32,
                                      MSR_DTYPE_U8};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
            for (int o = 0; o < MSR_OP_COUNT; o++) {
                msr_op_t op = (msr_op_t)o;
                if (dts[d] != MSR_DTYPE_F32 && op != MSR_OP_SUM && op != MSR_OP_AVG)
                    continue;
                for (int ip = 0; ip < 3; ip++) {
                    snprintf(g_case, sizeof g_case, "hier %s n=%d %s %s count=%llu inplace=%d",
                             label, n, msr_dtype_name(dts[d]), msr_op_name(op),
                             (unsigned long long)counts[k], ip);
                    if (ip < 2) {
                        cw_check_allreduce(&t, dts[d], op, counts[k], ip);
                        cw_check_reduce(&t, dts[d], op, counts[k], (int)(counts[k] % (uint64_t)n),
                                        ip);
                    }
                    cw_check_reduce_scatter(&t, dts[d], op, counts[k] / 4 + 1, ip);
                }
            }
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
            for (int ip = 0; ip < 2; ip++) {
                snprintf(g_case, sizeof g_case, "hier %s n=%d %s count=%llu inplace=%d", label, n,
                         msr_dtype_name(dts[d]), (unsigned long long)counts[k], ip);
                cw_check_allgather(&t, dts[d], counts[k] / 4 + 1, ip);
                cw_check_broadcast(&t, dts[d], counts[k],
                                   (int)((counts[k] + (uint64_t)ip) % (uint64_t)n));
            }
    /* the fold order, and the same bits everywhere */
    enum { COUNT = 4099 };
    int *node_of = xmalloc((size_t)n * sizeof *node_of);
    for (int r = 0; r < n; r++)
        node_of[r] = msr_comm_world_rank(c, r) / local_size;
    float *in = xmalloc(COUNT * 4), *out = xmalloc(COUNT * 4), *ref = xmalloc(COUNT * 4);
    for (uint64_t i = 0; i < COUNT; i++) {
        in[i] = order_value(me, i);
        ref[i] = hier_order_sum(node_of, n, i);
    }
    static const size_t sizes[] = {5, 333, COUNT};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        snprintf(g_case, sizeof g_case, "hier %s fold order count %zu", label, sizes[k]);
        memset(out, 0, COUNT * 4);
        OK(msr_comm_allreduce(c, in, out, sizes[k], MSR_DTYPE_F32, MSR_OP_SUM));
        for (size_t i = 0; i < sizes[k]; i++)
            if (memcmp(&out[i], &ref[i], 4) != 0)
                fail("%s: element %zu is %a, the two-level order gives %a", g_case, i,
                     (double)out[i], (double)ref[i]);
        int64_t h = (int64_t)fnv(out, sizes[k] * 4), *all = xmalloc((size_t)n * sizeof *all);
        OK(msr_comm_allgather(c, &h, all, 1, MSR_DTYPE_I64));
        for (int r = 0; r < n; r++)
            if (all[r] != h)
                fail("%s: rank %d got other bits than rank %d", g_case, r, me);
        free(all);
        /* reduce folds along the chain of nodes from the root's */
        for (int root = 0; root<n; root += n> 2 ? n / 2 : 1) {
            snprintf(g_case, sizeof g_case, "hier %s reduce fold order count %zu root %d", label,
                     sizes[k], root);
            memset(out, 0, COUNT * 4);
            OK(msr_comm_reduce(c, in, me == root ? out : NULL, sizes[k], MSR_DTYPE_F32, MSR_OP_SUM,
                               root));
            for (size_t i = 0; me == root && i < sizes[k]; i++) {
                float want = hier_chain_sum(node_of, n, root, i);
                if (memcmp(&out[i], &want, 4) != 0)
                    fail("%s: element %zu is %a, the chain of nodes gives %a", g_case, i,
                         (double)out[i], (double)want);
            }
        }
        /* reduce_scatter folds the same way: each block has the bits the
         * allreduce gives its elements */
        size_t rc = sizes[k] / (size_t)n;
        if (rc == 0)
            continue;
        snprintf(g_case, sizeof g_case, "hier %s reduce_scatter fold order block %zu", label, rc);
        OK(msr_comm_reduce_scatter(c, in, out, rc, MSR_DTYPE_F32, MSR_OP_SUM));
        for (size_t i = 0; i < rc; i++)
            if (memcmp(&out[i], &ref[(size_t)me * rc + i], 4) != 0)
                fail("%s: element %zu is %a, the two-level order gives %a", g_case, i,
                     (double)out[i], (double)ref[(size_t)me * rc + i]);
    }
    free(node_of);
    free(in);
    free(out);
    free(ref);
}

void cw_mode_hier(msr_ctx_t *ctx, msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    int local = msr_local_world_size(ctx), nodes = n / local;
    if (nodes < 2 || local < 2)
        fail("mode hier wants several nodes of several ranks, has %d x %d", nodes, local);
    setenv("MSR_COMM_ALGO_ALLREDUCE", "hier", 1);
    setenv("MSR_COMM_ALGO_REDUCE_SCATTER", "hier", 1);
    setenv("MSR_COMM_ALGO_REDUCE", "hier", 1);
    setenv("MSR_COMM_ALGO_ALLGATHER", "hier", 1);
    setenv("MSR_COMM_ALGO_BROADCAST", "hier", 1);
    setenv("MSR_COMM_SHM_MAX", "0", 1);
    setenv("MSR_COMM_SHM_TILE", "4096", 1); /* parts of many tiles */
    setenv("MSR_COMM_SHM_TILES", "2", 1);
    /* the exchange between nodes in many small units, few in flight */
    setenv("MSR_COMM_HIER_CHUNK", "4096", 1);
    setenv("MSR_COMM_HIER_WINDOW", "2", 1);
    /* the world, even nodes; the same members ranked backwards (the nodes'
     * order is not the ranks'); uneven: the first node and one rank of
     * each other node (3+1, 2+1+1), and the first node and one rank of the
     * second (2+1 with three nodes) */
    msr_comm_t *w = NULL;
    snprintf(g_case, sizeof g_case, "hier dup");
    OK(msr_comm_dup(world, 0, &w));
    char label[64];
    snprintf(label, sizeof label, "%dx%d", nodes, local);
    check_hier_group(w, label, local);
    struct {
        const char *label;
        int color, key;
    } splits[] = {
        {"backwards", 0, -me},
        {"first node + one of each other", me < local || me % local == 0 ? 0 : MSR_COMM_NO_COLOR,
         me},
        {"first node + one", me <= local ? 0 : MSR_COMM_NO_COLOR, me},
    };
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        if (i == 2 && nodes < 3)
            continue; /* the same as the one before */
        msr_comm_t *sub = NULL;
        snprintf(g_case, sizeof g_case, "hier split %s", splits[i].label);
        OK(msr_comm_split(w, splits[i].color, splits[i].key, &sub));
        if (sub != NULL) {
            check_hier_group(sub, splits[i].label, local);
            msr_comm_destroy(sub);
        }
    }
    msr_comm_destroy(w);
    static const char *const vars[] = {"MSR_COMM_ALGO_ALLREDUCE", "MSR_COMM_ALGO_REDUCE_SCATTER",
                                       "MSR_COMM_ALGO_REDUCE",    "MSR_COMM_ALGO_ALLGATHER",
                                       "MSR_COMM_ALGO_BROADCAST", "MSR_COMM_SHM_MAX",
                                       "MSR_COMM_SHM_TILE",       "MSR_COMM_SHM_TILES",
                                       "MSR_COMM_HIER_CHUNK",     "MSR_COMM_HIER_WINDOW"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    /* the defaults: sizes on both sides of the allreduce's threshold */
    tc_t t = {world, "world auto", n, me};
    snprintf(g_case, sizeof g_case, "hier auto");
    cw_check_allreduce(&t, MSR_DTYPE_F32, MSR_OP_SUM, 1000, 0);
    cw_check_allreduce(&t, MSR_DTYPE_F32, MSR_OP_SUM, 100003, 1);
    cw_check_reduce_scatter(&t, MSR_DTYPE_F32, MSR_OP_SUM, 300007, 0);
    cw_check_broadcast(&t, MSR_DTYPE_F32, 1000, 1);
    cw_check_broadcast(&t, MSR_DTYPE_F32, 100003, n - 1);
}
