/* The planner's price of the offloads' disk I/O (planner/plan.h): the
 * cluster file's disk rates at their bounds; the bytes a step moves
 * against what a real store moves (parallel/offload.h); the disk's time,
 * both halves; and the step's I/O term, hidden behind the update or the
 * passes' compute up to exactly the equality and exposed past it. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parallel/offload.h"
#include "parallel/offload_grads.h"
#include "parallel/offload_params.h"
#include "planner/plan.h"
#include "tests/runner.h"
#include "tests/parallel/plan_offload_lib.h"

static void test_disk_keys(void)
{
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    MSR_CHECK(c.disk_read_gbs == 3 && c.disk_write_gbs == 1.5);
    char why[512] = "", text[2048];
    MSR_CHECK(msr_plan_cluster_parse("disk_read_gbs = 1e12\ndisk_write_gbs = 1e-9\n", &c, why,
                                     sizeof why) == 0);
    MSR_CHECK(c.disk_read_gbs == 1e12 && c.disk_write_gbs == 1e-9);
    /* written and read back */
    MSR_CHECK(msr_plan_cluster_format(&c, text, sizeof text) < (int)sizeof text);
    MSR_CHECK(strstr(text, "disk_read_gbs = 1e+12\ndisk_write_gbs = 1e-09\n") != NULL);
    msr_plan_cluster_t d;
    msr_plan_cluster_default(&d);
    MSR_CHECK(msr_plan_cluster_parse(text, &d, why, sizeof why) == 0);
    MSR_CHECK(d.disk_read_gbs == 1e12 && d.disk_write_gbs == 1e-9);
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"disk_read_gbs = 0\n", "line 1: disk_read_gbs: must be more than 0"},
        {"disk_write_gbs = 0\n", "line 1: disk_write_gbs: must be more than 0"},
        {"disk_write_gbs = -1.5\n", "line 1: disk_write_gbs: must be more than 0"},
        {"disk_read_gbs = 1.000001e12\n", "line 1: disk_read_gbs: must be more than 0 (and at "
                                          "most 1e12)"},
        {"disk_read_gbs = fast\n", "line 1: 'fast' is not a number"},
        {"disk_write_gbs = inf\n", "line 1: 'inf' is not a number"},
        {"disk_read_gbs = 2\ndisk_read_gbs = 2\n", "line 2: 'disk_read_gbs' given twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msr_plan_cluster_t e = c;
        MSR_CHECK(msr_plan_cluster_parse(bad[i].text, &e, why, sizeof why) == -1);
        MSR_CHECK_MSG(strstr(why, bad[i].want) != NULL, "%s: %s", bad[i].want, why);
        MSR_CHECK(e.disk_read_gbs == c.disk_read_gbs && e.disk_write_gbs == c.disk_write_gbs);
    }
}

/* What the planner says a step moves is what a real store moves: every
 * chunk the step hands the update, whole. */
static msr_status_t count_chunk(void *arg, size_t off, size_t n, float *m, float *v)
{
    (void)off, (void)n, (void)m, (void)v;
    (*(size_t *)arg)++;
    return MSR_OK;
}

static void test_optim_bytes_real(void)
{
    static const size_t counts[] = {1, 511, 512, 2048, 2049, 12288, 70001};
    static const size_t chunks[] = {0, 4096, 8192, 12288};
    const char *t = getenv("TMPDIR");
    char dir[512], bad[256] = "";
    snprintf(dir, sizeof dir, "%s/plan_offload_io.XXXXXX", t != NULL && t[0] != '\0' ? t : "/tmp");
    MSR_CHECK(mkdtemp(dir) != NULL);
    for (size_t k = 0; k < 28 && !bad[0]; k++) {
        size_t n = counts[k / 4], chunk = chunks[k % 4], calls = 0, moved = 0;
        msr_offload_config_t cfg = {MSR_OFFLOAD_DISK, dir, chunk, MSR_OFFLOAD_IO_THREADS, 0, 0};
        msr_offload_t *off = NULL;
        msr_status_t st = msr_offload_create(&cfg, n, &off);
        if (st == MSR_OK && (st = msr_offload_step(off, count_chunk, &calls)) == MSR_OK)
            moved = calls * msr_offload_chunk_bytes(off);
        msr_offload_destroy(off);
        uint64_t plan = msr_plan_offload_optim_io(n, chunk);
        if (st != MSR_OK || plan != moved)
            snprintf(bad, sizeof bad, "%zu moments in chunks of %zu: planned %llu, moved %zu", n,
                     chunk, (unsigned long long)plan, moved);
    }
    int gone = rmdir(dir);
    MSR_CHECK_MSG(bad[0] == '\0', "%s", bad);
    MSR_CHECK_EQ(gone, 0);
    MSR_CHECK_EQ(msr_plan_offload_optim_io(0, 0), 0);
}

/* This process's bytes read and written through system calls so far
 * (/proc/self/io's rchar and wchar), or -1 each where it has none. */
static void proc_io(long long *r_p, long long *w_p)
{
    *r_p = *w_p = -1;
    FILE *f = fopen("/proc/self/io", "r");
    if (f == NULL)
        return;
    char key[32];
    long long v;
    while (fscanf(f, "%31[^:]: %lld\n", key, &v) == 2) {
        if (strcmp(key, "rchar") == 0)
            *r_p = v;
        else if (strcmp(key, "wchar") == 0)
            *w_p = v;
    }
    fclose(f);
}

/* A step of a real gradient store as the runtime drives it: each
 * micro-batch's puts in pieces of `piece` floats in shard order (set by
 * the first, added by the next; the last one's sum of squares taken as
 * it puts, for the norm), the flush, then the update's reads in pieces
 * of a moments' chunk of e floats. */
static msr_status_t grads_step(msr_grads_t *g, size_t n, size_t piece, size_t e, int micros,
                               float *buf)
{
    msr_status_t st = MSR_OK;
    double lanes[MSR_SUMSQ_LANES] = {0};
    for (int mb = 0; mb < micros; mb++) { /* the last one's puts give the norm */
        if (mb == 0)                      /* the first sets every element */
            msr_grads_fresh(g);
        for (size_t at = 0; at < n && st == MSR_OK; at += piece) {
            /* each put told the next call, as data parallel tells it */
            if (at + piece < n)
                msr_grads_next(g, at + piece, piece, mb > 0);
            else
                msr_grads_next(g, 0, mb + 1 < micros ? piece : e, 1);
            st = msr_grads_put_sumsq(g, at, n - at < piece ? n - at : piece, buf, mb > 0,
                                     mb == micros - 1 ? lanes : NULL);
        }
    }
    if (st == MSR_OK)
        st = msr_grads_flush(g);
    for (size_t at = 0; at < n && st == MSR_OK; at += e) { /* the update */
        msr_grads_next(g, at + e, e, 1);
        st = msr_grads_get(g, at, n - at < e ? n - at : e, buf);
    }
    return st;
}

/* The gradients' offload: a real store's resident bytes (its chunk, sized
 * from the moments' as the runtime asks, a CRC and a flag per chunk, and
 * a moments' chunk of floats) are the planner's to the byte, on both
 * sides of the one-chunk bound; a steady step (each put told the next
 * call, as data parallel tells it) writes what the planner says and reads
 * at most that, by at most three chunks a pass that reads (the one in
 * use and two found in buffers as written, not read). */
static void test_grads_real(void)
{
    static const size_t counts[] = {1, 1023, 1024, 1025, 2049, 30720, 30721, 70001};
    static const size_t chunks[] = {0, 4096, 8192};
    const char *t = getenv("TMPDIR");
    char dir[512], bad[256] = "";
    snprintf(dir, sizeof dir, "%s/plan_offload_io.XXXXXX", t != NULL && t[0] != '\0' ? t : "/tmp");
    MSR_CHECK(mkdtemp(dir) != NULL);
    float *buf = calloc(70001, sizeof(float));
    MSR_CHECK(buf != NULL);
    for (size_t k = 0; k < 24 && !bad[0] && buf != NULL; k++) {
        size_t n = counts[k / 3], chunk = chunks[k % 3], oc = 0, res = 0;
        long long r0, w0, r1, w1;
        msr_offload_config_t cfg = {MSR_OFFLOAD_DISK, dir, chunk, MSR_OFFLOAD_IO_THREADS, 0, 0};
        msr_offload_t *off = NULL;
        msr_grads_t *g = NULL;
        int micros = 1 + (int)(k % 3);
        msr_status_t st = msr_offload_create(&cfg, n, &off);
        if (st == MSR_OK) {
            oc = msr_offload_chunk_bytes(off);
            cfg.chunk_bytes = oc;
            st = msr_grads_create(&cfg, n, &g);
        }
        if (st == MSR_OK) {
            res = msr_grads_resident(g) + oc / 8 * sizeof(float);
            st = grads_step(g, n, 700, oc / 8, micros, buf); /* the first step */
        }
        proc_io(&r0, &w0);
        if (st == MSR_OK)
            st = grads_step(g, n, 700, oc / 8, micros, buf);
        proc_io(&r1, &w1);
        uint64_t pw, pr, gc = st == MSR_OK ? msr_grads_chunk_bytes(g) : 0;
        msr_plan_offload_grads_io(n, chunk, micros, &pw, &pr);
        /* the store moves whole chunks of 4096 bytes and more; reading
         * /proc/self/io itself counts its few bytes */
        long long rd = (r1 - r0) / 4096 * 4096, wr = w1 - w0;
        msr_grads_destroy(g);
        msr_offload_destroy(off);
        if (st != MSR_OK || msr_plan_offload_grads_bytes(n, chunk) != res)
            snprintf(bad, sizeof bad, "%zu gradients, chunk %zu: planned %llu bytes, held %zu (%s)",
                     n, chunk, (unsigned long long)msr_plan_offload_grads_bytes(n, chunk), res,
                     msr_status_str(st));
        else if (r0 >= 0 && (wr != (long long)pw || rd > (long long)pr ||
                             (long long)pr - rd > 3 * micros * (long long)gc))
            snprintf(bad, sizeof bad,
                     "%zu gradients, chunk %zu, %d micro-batches: planned %llu written %llu read, "
                     "moved %lld and %lld",
                     n, chunk, micros, (unsigned long long)pw, (unsigned long long)pr, wr, rd);
    }
    free(buf);
    int gone = rmdir(dir);
    MSR_CHECK_MSG(bad[0] == '\0', "%s", bad);
    MSR_CHECK_EQ(gone, 0);
}

/* The rank's counts: the moments of its shard (never the master weights:
 * they stay resident), and each of its block inputs' aligned slot once a
 * micro-batch; what msr_plan_offload_cost reports, both ways. */
static void test_rank_bytes(void)
{
    /* a block input of 3 x 32 x 48 x 4 bytes: 4.5 blocks of 4096 */
    msr_plan_model_t m = {MSR_PLAN_GPT, 5, 48, 4, 4, 192, 128, 32};
    static const int stage_layers[2] = {2, 3};
    msr_plan_layout_t l = layout(2, 2, 1, MSR_PLAN_RC_FULL, 3, 4);
    l.stage_layers = stage_layers;
    l.offload = MSR_PLAN_OFFLOAD_OPTIM | MSR_PLAN_OFFLOAD_ACTS;
    char why[256];
    MSR_CHECK_MSG(msr_plan_check(&m, &l, why, sizeof why) == 0, "%s", why);
    static const msr_plan_precision_t precs[3] = {MSR_PLAN_FP32, MSR_PLAN_BF16,
                                                  MSR_PLAN_BF16_RUNTIME};
    for (int k = 0; k < 3; k++) {
        uint64_t w = precs[k] == MSR_PLAN_BF16 ? 2 : 4,
                 slot = (3 * 32 * 48 * w + 4095) / 4096 * 4096;
        for (int pp = 0; pp < 2; pp++) {
            msr_plan_rank_t r;
            msr_plan_rank(&m, &l, precs[k], pp, &r);
            uint64_t count = precs[k] == MSR_PLAN_BF16 ? (r.params / 2 + 1) / 2 : r.shard_elems;
            MSR_CHECK_EQ(r.offload_optim_io, msr_plan_offload_optim_io(count, 0));
            MSR_CHECK_EQ(r.offload_acts_n, 4u * (uint64_t)stage_layers[pp]);
            MSR_CHECK_EQ(r.offload_acts_io, r.offload_acts_n * slot);
            msr_plan_t p;
            memset(&p, 0, sizeof p);
            p.l = l;
            p.at = r;
            uint64_t saved, io;
            msr_plan_offload_cost(&m, precs[k], &p, &saved, &io);
            MSR_CHECK_EQ(io, 2 * (r.offload_optim_io + r.offload_acts_io));
        }
    }
    /* nothing offloaded: nothing moves */
    l.offload = 0;
    msr_plan_rank_t r;
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 0, &r);
    MSR_CHECK(r.offload_optim_io == 0 && r.offload_acts_io == 0 && r.offload_acts_n == 0);
}

/* The disk's time: each half at its own rate. */
static void test_disk_ms(void)
{
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    c.disk_read_gbs = 2, c.disk_write_gbs = 0.5;
    MSR_CHECK(msr_plan_disk_ms(&c, 4e6, 0) == 2);
    MSR_CHECK(msr_plan_disk_ms(&c, 0, 4e6) == 8);
    MSR_CHECK(msr_plan_disk_ms(&c, 4e6, 4e6) == 10);
    MSR_CHECK(msr_plan_disk_ms(&c, 0, 0) == 0);
    c.disk_read_gbs = 0; /* refused by the parser; a cluster built in code gets no free I/O */
    MSR_CHECK(isinf(msr_plan_disk_ms(&c, 1, 0)) && msr_plan_disk_ms(&c, 0, 1) == 2e-6);
    /* the overlap at its crossover: hidden up to the equality, exposed past it */
    MSR_CHECK(msr_plan_io_exposed_ms(5, 4) == 0);
    MSR_CHECK(msr_plan_io_exposed_ms(5, 5) == 0);
    MSR_CHECK(msr_plan_io_exposed_ms(5, 5.5) == 0.5);
    MSR_CHECK(msr_plan_io_exposed_ms(0, 3) == 3);
}

/* The optimizer's offload in the step: hidden behind AdamW while the I/O
 * takes no longer, the step then as without it; past the crossover the
 * step grows by the I/O less the update. */
static void test_optim_crossover(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 4, 128, 4, 4, 512, 256, 64};
    msr_plan_layout_t l = layout(1, 1, 0, MSR_PLAN_RC_NONE, 2, 2);
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    msr_plan_time_t base, t;
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &base);
    MSR_CHECK(base.offload_io_ms == 0 && base.offload_ms == 0);
    l.offload = MSR_PLAN_OFFLOAD_OPTIM;
    msr_plan_rank_t r;
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 0, &r);
    double B = (double)r.offload_optim_io, U = base.optim_ms;
    MSR_CHECK(B > 0 && U > 0);
    /* the rate at which reading and writing B bytes takes U exactly */
    double eq = 2 * B / (U * 1e6);
    static const double k[] = {4, 1 + 1e-6, 1, 1 - 1e-6, 0.5, 0.25};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        c.disk_read_gbs = c.disk_write_gbs = eq * k[i];
        msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &t);
        double io = B / (c.disk_read_gbs * 1e6) + B / (c.disk_write_gbs * 1e6);
        MSR_CHECK(fabs(t.offload_io_ms - io) <= 1e-12 * io);
        MSR_CHECK(t.optim_ms == U);
        if (k[i] >= 1) { /* compute-bound: the I/O hidden */
            MSR_CHECK_MSG(t.offload_ms <= 1e-12 * U, "rate x %g: %g ms exposed", k[i],
                          t.offload_ms);
            MSR_CHECK(fabs(t.step_ms - base.step_ms) <= 1e-9 * base.step_ms);
        } else { /* I/O-bound: the step pays the I/O, not the update */
            MSR_CHECK(t.offload_ms > 0);
            MSR_CHECK(fabs(t.offload_ms - (io - U)) <= 1e-9 * io);
            MSR_CHECK(fabs(t.step_ms - (base.step_ms + io - U)) <= 1e-9 * t.step_ms);
        }
    }
    /* the write half counts at its own rate: a slower write alone costs */
    c.disk_read_gbs = 1e12, c.disk_write_gbs = B / (4 * U * 1e6);
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &t);
    MSR_CHECK(fabs(t.offload_ms - 3 * U) <= 1e-6 * U);
}

/* The activations' offload: spills hidden behind the forwards, reads
 * behind the backwards; once I/O-bound, each more ms of a half's I/O is a
 * ms more of the step. */
static void test_acts_overlap(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 4, 128, 4, 4, 512, 256, 64};
    msr_plan_layout_t l = layout(1, 2, 0, MSR_PLAN_RC_FULL, 2, 4);
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    c.disk_read_gbs = c.disk_write_gbs = 1e12;
    msr_plan_time_t base, t, u;
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &base);
    l.offload = MSR_PLAN_OFFLOAD_ACTS;
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &t);
    MSR_CHECK(t.offload_io_ms > 0 && t.offload_ms == 0);
    MSR_CHECK(fabs(t.step_ms - base.step_ms) <= 1e-9 * base.step_ms);
    msr_plan_rank_t r;
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 0, &r);
    double A = (double)r.offload_acts_io, step = base.step_ms;
    double bound[2];
    for (int half = 0; half < 2; half++) { /* 0: the spills (writes), 1: the reads */
        double *rate = half ? &c.disk_read_gbs : &c.disk_write_gbs;
        c.disk_read_gbs = c.disk_write_gbs = 1e12;
        *rate = A / (10 * step * 1e6); /* 10 steps' worth of I/O: bound by it */
        msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &t);
        bound[half] = t.offload_ms;
        *rate /= 2;
        msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &u);
        MSR_CHECK(t.offload_ms > 9 * step && t.offload_ms < 10 * step);
        MSR_CHECK_MSG(fabs(u.offload_ms - t.offload_ms - 10 * step) <= 1e-6 * step,
                      "half %d: %g then %g ms", half, t.offload_ms, u.offload_ms);
        MSR_CHECK(fabs(u.step_ms - t.step_ms - 10 * step) <= 1e-6 * step);
    }
    /* the same I/O hides behind a backward (twice a block's forward, and
     * its recompute) more than behind a forward: a block's forward is a
     * quarter of layer_ms, so the reads hide half a layer_ms more a spill */
    double n = (double)r.offload_acts_n;
    MSR_CHECK_MSG(fabs(bound[0] - bound[1] - n * t.layer_ms / 2) <= 1e-6 * step, "%g %g %g",
                  bound[0], bound[1], n * t.layer_ms / 2);
}

/* The parameters' offload: each block's slot as the real store sizes it
 * (a ZeRO-3 share's smaller), read once per micro-batch's forward and
 * backward and once in the update, written once; the step pays each
 * pass's first read, and past the crossover every ms more of a block's
 * read costs each read's ms. */
static void test_params_overlap(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 4, 128, 4, 4, 512, 256, 64};
    msr_plan_layout_t l = layout(1, 1, 0, MSR_PLAN_RC_NONE, 2, 3);
    uint64_t slot, blocks;
    msr_plan_offload_params_io(&m, &l, 0, &slot, &blocks);
    MSR_CHECK(slot == 0 && blocks == 0); /* not offloaded: nothing moves */
    l.offload = MSR_PLAN_OFFLOAD_PARAMS;
    msr_plan_offload_params_io(&m, &l, 0, &slot, &blocks);
    size_t n = 12 * 128 * 128 + 13 * 128; /* a GPT block's parameters */
    MSR_CHECK_EQ(blocks, 4u);
    MSR_CHECK_EQ(slot, (msr_params_resident_of(n, 4) - 5 * (sizeof(uint32_t) + 1)) / 3);
    msr_plan_t p;
    memset(&p, 0, sizeof p);
    p.l = l;
    uint64_t saved, io;
    msr_plan_offload_cost(&m, MSR_PLAN_FP32, &p, &saved, &io);
    MSR_CHECK_EQ(io, 4 * slot * (2 * 3 + 2));
    MSR_CHECK(saved > 0);

    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    c.disk_read_gbs = c.disk_write_gbs = 1e3;
    msr_plan_time_t base, t, u;
    l.offload = 0;
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &base);
    l.offload = MSR_PLAN_OFFLOAD_PARAMS;
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &t);
    double R = (double)slot / 1e9; /* a block's read (and write), ms */
    MSR_CHECK(fabs(t.offload_io_ms - R * (4 * (2 * 3 + 1) + 4)) <= 1e-9 * t.offload_io_ms);
    /* compute-bound: the step pays the 2 x 3 passes' and the update's
     * first reads, no more */
    MSR_CHECK_MSG(fabs(t.offload_ms - 7 * R) <= 1e-9 * R, "%g against %g", t.offload_ms, 7 * R);
    MSR_CHECK(fabs(t.step_ms - base.step_ms - 7 * R) <= 1e-9 * t.step_ms);
    /* I/O-bound: a read of 10 steps; the read doubled costs every read
     * and each pass's first once more: 4 x 7 + 7 reads */
    c.disk_write_gbs = 1e12;
    c.disk_read_gbs = (double)slot / (10 * base.step_ms * 1e6);
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &t);
    c.disk_read_gbs /= 2;
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &u);
    double more = 10 * base.step_ms * (4 * 7 + 7);
    MSR_CHECK_MSG(fabs(u.offload_ms - t.offload_ms - more) <= 1e-6 * more, "%g then %g, %g more",
                  t.offload_ms, u.offload_ms, more);
    MSR_CHECK(fabs(u.step_ms - t.step_ms - more) <= 1e-6 * more);
    /* interleaved: two chunks, twice the passes' first reads */
    c.disk_read_gbs = c.disk_write_gbs = 1e3;
    msr_plan_layout_t v = layout(1, 2, 0, MSR_PLAN_RC_NONE, 2, 4);
    v.schedule = MSR_PLAN_INTERLEAVED, v.chunks = 2, v.offload = MSR_PLAN_OFFLOAD_PARAMS;
    char why[256];
    MSR_CHECK_MSG(msr_plan_check(&m, &v, why, sizeof why) == 0, "%s", why);
    msr_plan_time(&m, &v, MSR_PLAN_FP32, &c, &t);
    msr_plan_offload_params_io(&m, &v, 0, &slot, &blocks);
    MSR_CHECK_EQ(blocks, 2u);
    MSR_CHECK_MSG(fabs(t.offload_ms - (2 * 4 * 2 + 1) * R) <= 1e-9 * R, "%g", t.offload_ms);
    /* ZeRO-3 on dp 2: the store's blocks are a share, about half a block */
    msr_plan_layout_t z = layout(2, 1, 3, MSR_PLAN_RC_NONE, 2, 3);
    z.offload = MSR_PLAN_OFFLOAD_PARAMS, z.zero_min_bytes = 1, z.bucket_bytes = 20000;
    uint64_t zslot, zb;
    msr_plan_offload_params_io(&m, &z, 1, &zslot, &zb);
    MSR_CHECK_EQ(zb, 4u);
    MSR_CHECK_MSG(zslot < slot && zslot >= slot / 2 - 4096, "%" PRIu64 " of %" PRIu64, zslot, slot);
}

/* --offload auto: an offload when nothing fits without it, or when its
 * plan is faster than those that do (the layout it lets in outruns its
 * I/O); none when it is not, or when nothing is over the budget (it would
 * only add I/O). Each case says why. */
static void test_auto_faster(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 4, 128, 4, 4, 512, 256, 64};
    msr_plan_layout_t none = layout(1, 1, 0, MSR_PLAN_RC_NONE, 2, 1), full = none;
    full.recompute = MSR_PLAN_RC_FULL;
    uint64_t p_none = msr_plan_peak(&m, &none, MSR_PLAN_FP32, NULL);
    uint64_t p_full = msr_plan_peak(&m, &full, MSR_PLAN_FP32, NULL);
    none.offload = MSR_PLAN_OFFLOAD_OPTIM;
    none.offload_chunk = 4096; /* 4 buffers of 4096 bytes for 8 bytes a parameter */
    uint64_t p_off = msr_plan_peak(&m, &none, MSR_PLAN_FP32, NULL);
    MSR_CHECK(p_full < p_none && p_off < p_none);
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    c.mem_gib = (double)(p_full > p_off ? p_full : p_off) / (1024.0 * 1024.0 * 1024.0);
    msr_plan_query_t q = auto_query(1, 2, -1, 0);
    static const struct {
        double gbs, mem_gib; /* 0: the budget above */
        int offload;
        const char *why;
    } cases[] = {
        {1e12, 0, MSR_PLAN_OFFLOAD_OPTIM, "faster than the plans that fit in"},
        {1e-6, 0, 0, "without it and none with an offload is faster"},
        {1e12, 80, 0, "without it and none is over it (an offload saves nothing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        msr_plan_cluster_t ci = c;
        ci.disk_read_gbs = ci.disk_write_gbs = cases[i].gbs;
        if (cases[i].mem_gib > 0)
            ci.mem_gib = cases[i].mem_gib;
        msr_plan_t *plans = NULL;
        msr_plan_pruned_t pr;
        char why[256] = "";
        int64_t n =
            msr_plan_search_offload(&m, MSR_PLAN_FP32, &ci, &q, 0, &plans, &pr, why, sizeof why);
        MSR_CHECK_MSG(n > 0, "case %zu: %s", i, why);
        msr_plan_fit_why(&plans[0], &pr, &ci, MSR_PLAN_FIT_OFFLOAD, why, sizeof why);
        int off = plans[0].l.offload, rc = plans[0].l.recompute;
        double step = plans[0].t.step_ms, without = pr.plain_ms;
        free(plans);
        MSR_CHECK_MSG(off == cases[i].offload, "case %zu: offload %d", i, off);
        MSR_CHECK_MSG(strstr(why, cases[i].why) != NULL, "case %zu: %s", i, why);
        MSR_CHECK(without > 0);
        if (off != 0) /* no recompute, as fast as without offload, where none fit */
            MSR_CHECK(rc == MSR_PLAN_RC_NONE && step < without);
        else
            MSR_CHECK(step == without);
    }
    /* the budget a byte under the offloaded plan's: nothing fits, with or without */
    c.mem_gib = (double)(p_full < p_off ? p_full : p_off) / (1024.0 * 1024.0 * 1024.0) * 0.5;
    msr_plan_t *plans = NULL;
    msr_plan_pruned_t pr;
    char why[256] = "";
    MSR_CHECK(msr_plan_search_offload(&m, MSR_PLAN_FP32, &c, &q, 0, &plans, &pr, why, sizeof why) ==
              0);
    MSR_CHECK(plans == NULL && pr.over_memory > 0);
}

/* --offload auto under a budget that only the blocks' parameters on disk
 * meet (beside the optimizer's moments and full recompute's inputs):
 * the plan offloads them, and says none fit without. */
static void test_auto_params(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 4, 128, 4, 4, 512, 256, 64};
    msr_plan_layout_t l = layout(1, 1, 0, MSR_PLAN_RC_FULL, 2, 1);
    l.offload_chunk = 4096;
    l.offload = MSR_PLAN_OFFLOAD_OPTIM | MSR_PLAN_OFFLOAD_ACTS;
    uint64_t p_two = msr_plan_peak(&m, &l, MSR_PLAN_FP32, NULL);
    l.offload |= MSR_PLAN_OFFLOAD_PARAMS;
    uint64_t p_all = msr_plan_peak(&m, &l, MSR_PLAN_FP32, NULL);
    MSR_CHECK_MSG(p_all < p_two, "%" PRIu64 " against %" PRIu64, p_all, p_two);
    msr_plan_cluster_t c;
    msr_plan_query_t q = auto_query(1, 2, -1, 0);
    auto_first_t f;
    if (auto_at(&m, p_all, &c, &q, &f) != 0)
        return;
    MSR_CHECK_MSG(f.off & MSR_PLAN_OFFLOAD_PARAMS, "offload %d", f.off);
    /* a budget a quarter under: not even with every offload */
    msr_plan_t *plans = NULL;
    c.mem_gib *= 0.75;
    MSR_CHECK(search_all(&m, &c, &q, &plans) == 0);
    MSR_CHECK(plans == NULL);
}

/* --offload auto on dp 2 under ZeRO 2 with a budget that only the
 * gradient shard on disk meets (beside the other three): the plan
 * offloads it, after every mode without it, and says none fit without;
 * below ZeRO 2 nothing fits. */
static void test_auto_grads(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 4, 128, 4, 4, 512, 256, 64};
    msr_plan_layout_t l = layout(2, 1, 2, MSR_PLAN_RC_FULL, 2, 1);
    l.offload_chunk = 4096;
    l.offload = MSR_PLAN_OFFLOAD_OPTIM | MSR_PLAN_OFFLOAD_ACTS | MSR_PLAN_OFFLOAD_PARAMS;
    uint64_t p_three = msr_plan_peak(&m, &l, MSR_PLAN_FP32, NULL);
    l.offload |= MSR_PLAN_OFFLOAD_GRADS;
    char why[256] = "";
    MSR_CHECK_MSG(msr_plan_check(&m, &l, why, sizeof why) == 0, "%s", why);
    uint64_t p_all = msr_plan_peak(&m, &l, MSR_PLAN_FP32, NULL);
    MSR_CHECK_MSG(p_all < p_three, "%" PRIu64 " against %" PRIu64, p_all, p_three);
    msr_plan_cluster_t c;
    msr_plan_query_t q = auto_query(2, 4, 2, 2);
    auto_first_t f;
    if (auto_at(&m, p_all, &c, &q, &f) != 0)
        return;
    int off = f.off;
    MSR_CHECK_MSG(off & MSR_PLAN_OFFLOAD_GRADS, "offload %d", off);
    MSR_CHECK(f.saved > 0 && f.moved > 0);
    msr_plan_t *plans = NULL;
    char name[64];
    /* the first mode that fits: the moments', the blocks' and the shard
     * (the block inputs' 6 buffers outweigh what they save on this model) */
    MSR_CHECK_MSG(strcmp(msr_plan_offload_name(off, name, sizeof name), "optimizer,params,grads") ==
                      0,
                  "%s", name);
    MSR_CHECK(strcmp(msr_plan_offload_name(0, name, sizeof name), "none") == 0);
    /* ZeRO 1 has no gradient shard to offload: nothing fits */
    q.fix[MSR_PLAN_FIX_ZERO] = 1;
    MSR_CHECK(search_all(&m, &c, &q, &plans) == 0);
    MSR_CHECK(plans == NULL);
}

/* The gradients' offload prices all its I/O into the step (synchronous:
 * nothing hides it), at the disk's rates, each half at its own. */
static void test_grads_time(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 4, 128, 4, 4, 512, 256, 64};
    msr_plan_layout_t l = layout(2, 1, 3, MSR_PLAN_RC_NONE, 2, 3);
    l.offload_chunk = 4096;
    l.offload = MSR_PLAN_OFFLOAD_OPTIM;
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    c.disk_read_gbs = 2, c.disk_write_gbs = 0.5;
    msr_plan_time_t a, b;
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &a);
    l.offload |= MSR_PLAN_OFFLOAD_GRADS;
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &b);
    msr_plan_rank_t r;
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 0, &r);
    uint64_t w, rd;
    msr_plan_offload_grads_io(r.shard_elems, 4096, 3, &w, &rd);
    /* each micro-batch writes the shard, each but the first and the update
     * read it: as many bytes read as written */
    MSR_CHECK(r.offload_grads_w == w && r.offload_grads_r == rd && w > 0 && rd == w);
    MSR_CHECK_EQ(r.grads, msr_plan_offload_grads_bytes(r.shard_elems, 4096));
    double ms = (double)rd / 2e6 + (double)w / 0.5e6;
    MSR_CHECK_MSG(fabs(b.offload_io_ms - a.offload_io_ms - ms) <= 1e-9 * ms, "%g", b.offload_io_ms);
    MSR_CHECK_MSG(fabs(b.offload_ms - a.offload_ms - ms) <= 1e-9 * ms, "%g", b.offload_ms);
    MSR_CHECK(fabs(b.step_ms - a.step_ms - ms) <= 1e-9 * b.step_ms);
    /* refused where train_gpt refuses it */
    static const struct {
        int zero, tp, offload;
        const char *why;
    } bad[] = {
        {1, 1, MSR_PLAN_OFFLOAD_OPTIM | MSR_PLAN_OFFLOAD_GRADS, "not below ZeRO 2"},
        {2, 1, MSR_PLAN_OFFLOAD_GRADS, "not without the optimizer's offload"},
        {3, 2, MSR_PLAN_OFFLOAD_OPTIM | MSR_PLAN_OFFLOAD_GRADS, "not under tp, pp or cp"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msr_plan_layout_t v = l;
        v.zero = bad[i].zero, v.tp = bad[i].tp, v.dp = 2 / bad[i].tp, v.offload = bad[i].offload;
        char why[256] = "";
        MSR_CHECK(msr_plan_check(&m, &v, why, sizeof why) == -1);
        MSR_CHECK_MSG(strstr(why, bad[i].why) != NULL, "%s", why);
    }
}

static const msr_test_t tests[] = {
    {"disk_keys", test_disk_keys, 10},
    {"optim_bytes_real", test_optim_bytes_real, 30},
    {"rank_bytes", test_rank_bytes, 10},
    {"disk_ms", test_disk_ms, 10},
    {"optim_crossover", test_optim_crossover, 10},
    {"acts_overlap", test_acts_overlap, 10},
    {"params_overlap", test_params_overlap, 10},
    {"grads_real", test_grads_real, 30},
    {"auto_faster", test_auto_faster, 30},
    {"auto_params", test_auto_params, 30},
    {"grads_time", test_grads_time, 10},
    {"auto_grads", test_auto_grads, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
