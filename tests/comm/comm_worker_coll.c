/* comm_worker's collectives mode: every collective, dtype and op on one
 * communicator against the serial reference, under each algorithm setting
 * in turn; its checks are shared with the small and order modes. */
#include "comm_worker.h"

/* ---- the collectives ---- */

void cw_check_allreduce(tc_t *t, msr_dtype_t dt, msr_op_t op, uint64_t count, int inplace)
{
    size_t es = msr_dtype_size(dt);
    unsigned char *in = xmalloc(count * es), *out = xmalloc(count * es), *ref = xmalloc(count * es);
    for (uint64_t i = 0; i < count; i++) {
        int64_t v = cw_input(op, dt, t->me, i);
        cw_put(dt, in, i, v, (double)v);
        cw_reference(op, dt, t->n, i, ref, i);
    }
    memset(out, 0xee, count * es);
    if (inplace) {
        memcpy(out, in, count * es);
        OK(msr_comm_allreduce(t->comm, MSR_IN_PLACE, out, count, dt, op));
    } else {
        OK(msr_comm_allreduce(t->comm, in, out, count, dt, op));
    }
    cw_check_bytes(out, ref, count, es, "allreduce");
    free(in);
    free(out);
    free(ref);
}

void cw_check_reduce_scatter(tc_t *t, msr_dtype_t dt, msr_op_t op, uint64_t rc, int inplace)
{
    size_t es = msr_dtype_size(dt), total = rc * (size_t)t->n;
    unsigned char *in = xmalloc(total * es), *out = xmalloc(total * es), *ref = xmalloc(rc * es);
    for (uint64_t i = 0; i < total; i++) {
        int64_t v = cw_input(op, dt, t->me, i);
        cw_put(dt, in, i, v, (double)v);
    }
    for (uint64_t j = 0; j < rc; j++)
        cw_reference(op, dt, t->n, (uint64_t)t->me * rc + j, ref, j);
    memset(out, 0xee, total * es);
    unsigned char *mine;
    if (inplace == 1) { /* MSR_IN_PLACE: recvbuf is the whole input */
        memcpy(out, in, total * es);
        OK(msr_comm_reduce_scatter(t->comm, MSR_IN_PLACE, out, rc, dt, op));
        mine = out + (size_t)t->me * rc * es;
    } else if (inplace == 2) { /* NCCL style: recvbuf inside sendbuf */
        memcpy(out, in, total * es);
        mine = out + (size_t)t->me * rc * es;
        OK(msr_comm_reduce_scatter(t->comm, out, mine, rc, dt, op));
    } else {
        OK(msr_comm_reduce_scatter(t->comm, in, out, rc, dt, op));
        mine = out;
    }
    cw_check_bytes(mine, ref, rc, es, "reduce_scatter");
    free(in);
    free(out);
    free(ref);
}

void cw_check_reduce(tc_t *t, msr_dtype_t dt, msr_op_t op, uint64_t count, int root, int inplace)
{
    size_t es = msr_dtype_size(dt);
    unsigned char *in = xmalloc(count * es), *out = xmalloc(count * es), *ref = xmalloc(count * es);
    for (uint64_t i = 0; i < count; i++) {
        int64_t v = cw_input(op, dt, t->me, i);
        cw_put(dt, in, i, v, (double)v);
        cw_reference(op, dt, t->n, i, ref, i);
    }
    memset(out, 0xee, count * es);
    if (inplace && t->me == root) {
        memcpy(out, in, count * es);
        OK(msr_comm_reduce(t->comm, MSR_IN_PLACE, out, count, dt, op, root));
    } else {
        OK(msr_comm_reduce(t->comm, in, t->me == root ? out : NULL, count, dt, op, root));
    }
    if (t->me == root)
        cw_check_bytes(out, ref, count, es, "reduce");
    free(in);
    free(out);
    free(ref);
}

void cw_check_allgather(tc_t *t, msr_dtype_t dt, uint64_t sc, int inplace)
{
    size_t es = msr_dtype_size(dt), total = sc * (size_t)t->n;
    unsigned char *in = xmalloc(sc * es), *out = xmalloc(total * es), *ref = xmalloc(total * es);
    for (uint64_t k = 0; k < sc; k++)
        cw_put_id(dt, in, k, t->me, 0, k);
    for (int r = 0; r < t->n; r++)
        for (uint64_t k = 0; k < sc; k++)
            cw_put_id(dt, ref, (size_t)r * sc + k, r, 0, k);
    memset(out, 0xee, total * es);
    if (inplace) {
        memcpy(out + (size_t)t->me * sc * es, in, sc * es);
        OK(msr_comm_allgather(t->comm, MSR_IN_PLACE, out, sc, dt));
    } else {
        OK(msr_comm_allgather(t->comm, in, out, sc, dt));
    }
    cw_check_bytes(out, ref, total, es, "allgather");
    free(in);
    free(out);
    free(ref);
}

void cw_check_broadcast(tc_t *t, msr_dtype_t dt, uint64_t count, int root)
{
    size_t es = msr_dtype_size(dt);
    unsigned char *buf = xmalloc(count * es), *ref = xmalloc(count * es);
    for (uint64_t k = 0; k < count; k++)
        cw_put_id(dt, ref, k, root, 1, k);
    if (t->me == root)
        memcpy(buf, ref, count * es);
    else
        memset(buf, 0xee, count * es);
    OK(msr_comm_broadcast(t->comm, buf, count, dt, root));
    cw_check_bytes(buf, ref, count, es, "broadcast");
    free(buf);
    free(ref);
}

static void check_alltoall(tc_t *t, msr_dtype_t dt, uint64_t count, int inplace)
{
    size_t es = msr_dtype_size(dt), total = count * (size_t)t->n;
    unsigned char *in = xmalloc(total * es), *out = xmalloc(total * es), *ref = xmalloc(total * es);
    for (int j = 0; j < t->n; j++)
        for (uint64_t k = 0; k < count; k++) {
            cw_put_id(dt, in, (size_t)j * count + k, t->me, j, k);  /* to rank j */
            cw_put_id(dt, ref, (size_t)j * count + k, j, t->me, k); /* from rank j */
        }
    memset(out, 0xee, total * es);
    if (inplace) {
        memcpy(out, in, total * es);
        OK(msr_comm_alltoall(t->comm, MSR_IN_PLACE, out, count, dt));
    } else {
        OK(msr_comm_alltoall(t->comm, in, out, count, dt));
    }
    cw_check_bytes(out, ref, total, es, "alltoall");
    free(in);
    free(out);
    free(ref);
}

static void check_alltoallv(tc_t *t, msr_dtype_t dt, uint64_t scale)
{
    size_t es = msr_dtype_size(dt);
    int n = t->n;
    uint64_t *sc = xmalloc(n * sizeof *sc), *sd = xmalloc(n * sizeof *sd);
    uint64_t *rc = xmalloc(n * sizeof *rc), *rd = xmalloc(n * sizeof *rd);
    uint64_t stot = 0, rtot = 0;
    /* rank a sends (a + b) % 3 * scale elements to rank b, with gaps */
    for (int j = 0; j < n; j++) {
        sc[j] = (uint64_t)((t->me + j) % 3) * scale;
        rc[j] = (uint64_t)((j + t->me) % 3) * scale;
        sd[j] = stot + 1;
        stot += sc[j] + 1;
        rd[j] = rtot + 2;
        rtot += rc[j] + 2;
    }
    unsigned char *in = xmalloc(stot * es), *out = xmalloc(rtot * es), *ref = xmalloc(rtot * es);
    memset(in, 0, stot * es);
    memset(out, 0xee, rtot * es);
    memset(ref, 0xee, rtot * es);
    for (int j = 0; j < n; j++) {
        for (uint64_t k = 0; k < sc[j]; k++)
            cw_put_id(dt, in, sd[j] + k, t->me, j, k);
        for (uint64_t k = 0; k < rc[j]; k++)
            cw_put_id(dt, ref, rd[j] + k, j, t->me, k);
    }
    OK(msr_comm_alltoallv(t->comm, in, sc, sd, out, rc, rd, dt));
    cw_check_bytes(out, ref, rtot, es, "alltoallv");
    free(in);
    free(out);
    free(ref);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
}

/* Everything on one communicator. large: a count that is prime and not a
 * multiple of any group size here, big enough for several segments. */
static void check_all(tc_t *t, uint64_t large)
{
    const uint64_t counts[] = {0, 1, 37, large};
    for (int d = 0; d < MSR_DTYPE_COUNT; d++) {
        msr_dtype_t dt = (msr_dtype_t)d;
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            uint64_t count = counts[c];
            for (int o = 0; o < MSR_OP_COUNT; o++) {
                msr_op_t op = (msr_op_t)o;
                /* The large count with every op for f32 and bf16, with sum
                 * for the others. */
                if (count == large && op != MSR_OP_SUM && dt != MSR_DTYPE_F32 &&
                    dt != MSR_DTYPE_BF16)
                    continue;
                for (int ip = 0; ip < 3; ip++) {
                    snprintf(g_case, sizeof g_case, "%s n=%d %s %s count=%llu inplace=%d", t->label,
                             t->n, msr_dtype_name(dt), msr_op_name(op), (unsigned long long)count,
                             ip);
                    if (ip < 2) {
                        cw_check_allreduce(t, dt, op, count, ip);
                        cw_check_reduce(t, dt, op, count, (int)(count % (uint64_t)t->n), ip);
                    }
                    uint64_t rc = count == large ? count / 8 + 1 : count;
                    cw_check_reduce_scatter(t, dt, op, rc, ip);
                }
            }
            for (int ip = 0; ip < 2; ip++) {
                snprintf(g_case, sizeof g_case, "%s n=%d %s count=%llu inplace=%d", t->label, t->n,
                         msr_dtype_name(dt), (unsigned long long)count, ip);
                uint64_t per = count == large ? count / 8 + 1 : count;
                cw_check_allgather(t, dt, per, ip);
                check_alltoall(t, dt, per, ip);
                cw_check_broadcast(t, dt, count, (int)((count + (uint64_t)ip) % (uint64_t)t->n));
            }
            snprintf(g_case, sizeof g_case, "%s n=%d %s alltoallv scale=%llu", t->label, t->n,
                     msr_dtype_name(dt), (unsigned long long)(count / 4 + 1));
            check_alltoallv(t, dt, count / 4 + 1);
        }
    }
    snprintf(g_case, sizeof g_case, "%s n=%d barrier", t->label, t->n);
    OK(msr_comm_barrier(t->comm));
}

/* The algorithm settings tried in turn; each makes its communicators anew
 * (settings are read when a communicator is made). */
static const char *const configs[][12] = {
    {"auto", NULL},
    {"direct", "MSR_COMM_ALGO_ALLREDUCE=direct", "MSR_COMM_ALGO_REDUCE_SCATTER=direct",
     "MSR_COMM_ALGO_ALLGATHER=direct", "MSR_COMM_ALGO_BROADCAST=binomial",
     "MSR_COMM_ALGO_REDUCE=binomial", NULL},
    {"rd+chain", "MSR_COMM_ALGO_ALLREDUCE=rd", "MSR_COMM_ALGO_BROADCAST=chain",
     "MSR_COMM_ALGO_REDUCE=chain", "MSR_COMM_SEGMENT=4096", "MSR_COMM_WINDOW=2", NULL},
    {"ring", "MSR_COMM_ALGO_ALLREDUCE=ring", "MSR_COMM_ALGO_REDUCE_SCATTER=ring",
     "MSR_COMM_ALGO_ALLGATHER=ring", "MSR_COMM_SEGMENT=4096", "MSR_COMM_WINDOW=3", NULL},
    /* the tiled shared-memory path with tiles small enough for many of
     * them (and parts of a few elements) in every case */
    {"shm tiles", "MSR_COMM_ALGO_ALLREDUCE=shm", "MSR_COMM_ALGO_REDUCE_SCATTER=shm",
     "MSR_COMM_ALGO_ALLGATHER=shm", "MSR_COMM_ALGO_BROADCAST=shm", "MSR_COMM_ALGO_REDUCE=shm",
     "MSR_COMM_SHM_MAX=0", "MSR_COMM_SHM_TILE=4096", "MSR_COMM_SHM_TILES=2", NULL},
    /* the same with every store bypassing the cache */
    {"shm tiles nt", "MSR_COMM_ALGO_ALLREDUCE=shm", "MSR_COMM_ALGO_REDUCE_SCATTER=shm",
     "MSR_COMM_ALGO_ALLGATHER=shm", "MSR_COMM_ALGO_BROADCAST=shm", "MSR_COMM_ALGO_REDUCE=shm",
     "MSR_COMM_SHM_MAX=0", "MSR_COMM_SHM_TILE=4096", "MSR_COMM_SHM_TILES=3", "MSR_COMM_SHM_NT=1",
     "MSR_COMM_SHM_NT_MIN=0", NULL},
    /* groups over several nodes: the two levels at every size, small tiles
     * inside the nodes (a group on one node runs its shared memory) */
    {"hier", "MSR_COMM_ALGO_ALLREDUCE=hier", "MSR_COMM_ALGO_REDUCE_SCATTER=hier",
     "MSR_COMM_ALGO_REDUCE=hier", "MSR_COMM_ALGO_ALLGATHER=hier", "MSR_COMM_ALGO_BROADCAST=hier",
     "MSR_COMM_SHM_MAX=0", "MSR_COMM_SHM_TILE=4096", "MSR_COMM_SHM_TILES=2", NULL},
};

static void set_config(const char *const *cfg)
{
    static const char *const vars[] = {"MSR_COMM_ALGO_ALLREDUCE", "MSR_COMM_ALGO_REDUCE_SCATTER",
                                       "MSR_COMM_ALGO_ALLGATHER", "MSR_COMM_ALGO_BROADCAST",
                                       "MSR_COMM_ALGO_REDUCE",    "MSR_COMM_SEGMENT",
                                       "MSR_COMM_WINDOW",         "MSR_COMM_SHM_MAX",
                                       "MSR_COMM_SHM_TILE",       "MSR_COMM_SHM_TILES",
                                       "MSR_COMM_SHM_NT",         "MSR_COMM_SHM_NT_MIN"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    for (int i = 1; cfg[i]; i++) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", cfg[i]);
        char *eq = strchr(buf, '=');
        *eq = '\0';
        setenv(buf, eq + 1, 1);
    }
}

void cw_mode_collectives(msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    const uint64_t large = 10007;
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        if (strcmp(configs[c][0], "hier") == 0 && g_nodes < 2)
            continue; /* one node: the same as "auto" with small tiles */
        set_config(configs[c]);
        msr_comm_t *w = NULL;
        snprintf(g_case, sizeof g_case, "dup for %s", configs[c][0]);
        OK(msr_comm_dup(world, 0, &w));
        char label[64];
        snprintf(label, sizeof label, "%s world", configs[c][0]);
        tc_t t = {w, label, n, me};
        check_all(&t, large);
        /* Sub-groups: with 8 ranks, sizes 1, 2, 3 (split A), 4 (split B,
         * ranked backwards by key) and 5 (split C, the rest without one). */
        int colors[3], keys[3];
        colors[0] = me == 0 ? 0 : me <= 2 ? 1 : me <= 5 ? 2 : 3;
        keys[0] = me;
        colors[1] = me < n / 2 ? 0 : 1;
        keys[1] = -me;
        colors[2] = me < 5 ? 7 : MSR_COMM_NO_COLOR;
        keys[2] = 0;
        for (int s = 0; s < 3; s++) {
            msr_comm_t *sub = NULL;
            snprintf(g_case, sizeof g_case, "split %d for %s", s, configs[c][0]);
            OK(msr_comm_split(w, colors[s], keys[s], &sub));
            if (colors[s] == MSR_COMM_NO_COLOR) {
                if (sub != NULL)
                    fail("split with no color gave a communicator");
                continue;
            }
            if (s == 1 && n >= 2) { /* keys -rank: ranks in reverse order */
                int hi = colors[1] == 0 ? n / 2 : n;
                int want = hi - 1 - me;
                if (msr_comm_rank(sub) != want)
                    fail("split by key: rank %d, expected %d", msr_comm_rank(sub), want);
            }
            snprintf(label, sizeof label, "%s split%d", configs[c][0], s);
            tc_t st = {sub, label, msr_comm_size(sub), msr_comm_rank(sub)};
            check_all(&st, large);
            msr_comm_destroy(sub);
        }
        msr_comm_destroy(w);
    }
    /* A large allreduce with the default settings: many segments. */
    snprintf(g_case, sizeof g_case, "large allreduce");
    set_config(configs[0]);
    tc_t t = {world, "world", n, me};
    cw_check_allreduce(&t, MSR_DTYPE_F32, MSR_OP_SUM, 1000003, 0);
    cw_check_allreduce(&t, MSR_DTYPE_BF16, MSR_OP_AVG, 1000003, 1);
    cw_check_reduce_scatter(&t, MSR_DTYPE_F32, MSR_OP_SUM, 200003, 0);
}
