/* train_gpt --calibrate: measures this machine for the planner's time
 * model (planner/plan.h's cluster, docs/plan.md "Calibrate") through
 * train_gpt's own kernels and communicator, a few seconds in all; a
 * Llama's (--arch llama) are its own kernels at its shapes: RMSNorm for
 * layernorm, SwiGLU and the rotary positions for GELU, grouped-query
 * attention, its products without bias (gate and up, down; its own head):
 *
 *   peak_tflops     the matmuls' FLOPs of a forward and backward pass over
 *                   the time train_gpt's kernels take for them at the
 *                   model's shapes on one micro-batch: msr_matmul_forward/
 *                   backward for a block's qkv, attproj, fc, fcproj (L
 *                   times) and the head, counted as the time model counts
 *                   them; every rank at once, as in training
 *   attn_tflops     the same for msr_attention_forward/backward
 *   ring_tflops     the same for msr_attention_ring_forward/backward on a
 *                   pair of chunks of T / 4 positions (cp 2's)
 *   ring_chunk      those T / 4 positions
 *   ring_chunk_half h of the ring's rate R S / (S + h) on chunks of S
 *                   positions, from its rates on T / 4 and T / 8 (0 where
 *                   shorter chunks are not slower)
 *   mem_gbs         the element-wise kernels (layernorm, residual) at the
 *                   model's activation shapes: bytes read and written per
 *                   second
 *   act_gbs         the same for GELU (tanh)
 *   kernel_us       one call of the smallest matmul (1 x 1 x 1)
 *   mm_rows         the rows of one micro-batch, which peak_tflops is at
 *   mm_rows_half    h of the matmuls' rate R N / (N + h) on N rows: a
 *                   least-squares line of 1 / rate against 1 / N through
 *                   their rates on half, once and twice mm_rows (where
 *                   twice fits CALIB_MAX_ROWS); 0 where fewer rows are not
 *                   slower
 *   latency_us      half a one-element round trip between two ranks, or
 *                   half a one-element allreduce among all of a node's
 *                   ranks at once, the larger
 *   intra_gbs       an allreduce among the ranks of each node: 2 (n-1)/n
 *                   bytes over its time less the latencies the time model
 *                   charges it (the shared-memory algorithm's 2)
 *   inter_gbs       the same among one rank of each node (several nodes;
 *                   the ring's 2 (n-1) latencies)
 *   ranks_per_node  the launcher's local world size
 *   mem_gib         the node's physical memory over its ranks
 *   cores_per_node  the cores the ranks may run on (the union of their
 *                   affinity masks): fewer than the ranks, and a rank
 *                   computes faster while the others wait
 *   idle_lend       how much faster: a block's MLP product timed with
 *                   every rank computing, then with cores_per_node of each
 *                   node's ranks computing while the others wait in a
 *                   barrier, five times with other ranks computing; the
 *                   mean speed-up as a share of the ideal one (ranks over
 *                   cores)
 *   ring_step_us    what a step of context parallel's ring costs beyond its
 *                   attention and its transfer: a block's MLP product on
 *                   cp 2's rows, then two ring steps (each passing a K/V
 *                   block round a ring of the node's ranks while computing
 *                   two chunk pairs a sequence), against the same work
 *                   without the ring, every rank at once both times
 *   disk_read_gbs   with --offload-dir DIR: a file of 64 MiB (a short
 *   disk_write_gbs  job's 16) of each rank's in DIR, written in the
 *                   offloads' 4 MiB chunks and synced, then read back, as
 *                   the offloads open theirs (0600, O_EXCL, O_DIRECT where
 *                   taken), and removed; every rank at once
 *
 * Rates are the slowest rank's and costs the largest (calib_agree),
 * agreed by allgather, so every rank ends with the same cluster. */
#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/time.h"
#include "model/gpt.h"
#include "model/layers.h"
#include "programs/train_gpt/train_gpt_calib.h"

static void calib_put_cold(const calib_cold_t *cold, calib_t *k)
{
    if (cold->n < 2)
        return;
    k->measured |= 1u << CALIB_COLD;
    k->c.cold_ms_per_mib = cold->s_per_byte * 1e3 * 1048576.0;
    k->c.cold_from_mib = cold->from_bytes / 1048576.0;
    k->c.cold_full_mib = cold->full_bytes / 1048576.0;
    k->cold_n = cold->n;
    for (int i = 0; i < cold->n; i++) {
        k->cold_mib[i] = cold->frames_bytes[i] / 1048576.0;
        k->cold_ms[i] = cold->ms[i];
    }
}

/* The bytes the bandwidth's allreduce moves: the model's gradients, in
 * [CALIB_MIN_COMM_BYTES, CALIB_MAX_COMM_BYTES]. The job's vocabulary:
 * --vocab, else bytes' (a token file's own V is a guess's worth of the
 * gradients' size, clamped below). */
static size_t calib_comm_bytes(const options_t *o)
{
    size_t V = o->vocab > 0 ? (size_t)o->vocab : (size_t)MSR_GPT_VOCAB;
    size_t C = (size_t)o->channels, block = 12 * C * C, ends = V * C;
    if (strcmp(o->arch, "llama") == 0) { /* GQA's k and v, SwiGLU's three, the own head */
        size_t kvc = (size_t)o->kv_heads * (C / (size_t)o->heads);
        block = C * (C + 2 * kvc) + C * C + 3 * C * (size_t)o->ffn;
        ends = 2 * V * C;
    }
    size_t bytes = ((size_t)o->layers * block + ends) * sizeof(float);
    if (bytes < CALIB_MIN_COMM_BYTES)
        bytes = CALIB_MIN_COMM_BYTES;
    return bytes > CALIB_MAX_COMM_BYTES ? CALIB_MAX_COMM_BYTES : bytes;
}

int train_gpt_calibrate(const options_t *o, const job_t *job, msr_comm_t *comm, calib_t *out)
{
    calib_t k;
    memset(&k, 0, sizeof k);
    msr_plan_cluster_default(&k.c);
    calib_compute_t cc;
    msr_status_t st;
    uint64_t t0 = msr_now_ns();
    if (o->threads > 0) /* the kernels run as training will run them */
        openblas_set_num_threads((int)o->threads);
    /* every rank computes at once, as in training: they share the node */
    if (comm != NULL && (st = msr_comm_barrier(comm)) != MSR_OK) {
        fprintf(stderr, "train_gpt: --calibrate: %s: %s\n", msr_status_str(st), msr_last_error());
        return -1;
    }
    int ok = calib_compute(o, &cc) == 0;
    int rpn = job->ctx != NULL ? msr_local_world_size(job->ctx) : 1;
    double mem = calib_mem_gib(rpn);
    /* what this rank measured, for calib_agree; a failed rank sends 0 */
    double mine[CALIB_KEYS] = {ok ? cc.flops_s : 0,
                               ok ? cc.matmul_flops_s : 0,
                               ok ? cc.attn_flops_s : 0,
                               ok ? cc.mem_bytes_s : 0,
                               mem,
                               ok ? cc.act_bytes_s : 0,
                               ok ? cc.ring_flops_s : 0,
                               ok ? cc.kernel_s : 0,
                               (double)rpn,
                               ok ? cc.rows_half : 0,
                               ok ? cc.ring_half : 0,
                               ok ? cc.noise : 0,
                               ok};
    double mins[7], maxs[5];
    if (calib_agree(comm, mine, mins, maxs) != 0)
        return -1;
    if (!(mins[0] > 0 && mins[1] > 0 && mins[2] > 0 && mins[3] > 0 && mins[5] > 0 && mins[6] > 0))
        return -1; /* a rank ran out of memory and said so */
    /* a short job skips the cold frames' curve, the longest part (every
     * rank holds the same o, so all skip it together) */
    calib_cold_t cold;
    memset(&cold, 0, sizeof cold);
    if (!calib_short(o) && calib_cold(o, comm, rpn, &cold) != 0)
        return -1;
    int cores = calib_cores(comm);
    if (cores < 0)
        return -1;
    k.c.cores_per_node = cores;
    double lend;
    int local = job->ctx != NULL ? msr_local_rank(job->ctx) : 0;
    if (calib_lend(o, comm, local, rpn, cores, &lend, &k.lend_speedup) != 0)
        return -1;
    k.c.idle_lend = lend >= 0 ? lend : k.c.idle_lend;
    /* the products at their own rate, attention and its ring at theirs */
    k.c.peak_tflops = mins[1] * 1e-12;
    k.c.attn_tflops = mins[2] * 1e-12;
    k.c.ring_tflops = mins[6] * 1e-12;
    k.blend_tflops = mins[0] * 1e-12;
    k.c.mem_gbs = mins[3] * 1e-9;
    k.c.act_gbs = mins[5] * 1e-9;
    k.c.kernel_us = maxs[0] * 1e6;
    k.c.ranks_per_node = (int)maxs[1];
    k.c.mm_rows_half = maxs[2];
    k.c.ring_chunk = o->seq / 4 > 0 ? o->seq / 4 : 1; /* calib_bufs_init's S */
    k.c.ring_chunk_half = maxs[3];
    k.noise = maxs[4]; /* the noisiest rank's */
    k.measured = 1u << CALIB_COMPUTE | 1u << CALIB_RANKS | (lend >= 0 ? 1u << CALIB_LEND : 0);
    calib_put_cold(&cold, &k);
    if (mins[4] > 0) {
        k.c.mem_gib = mins[4];
        k.measured |= 1u << CALIB_MEM;
    }
    if (comm != NULL && msr_comm_size(comm) > 1) {
        size_t bytes = calib_comm_bytes(o);
        k.comm_bytes = bytes;
        if (calib_comm(o, comm, job, bytes, &k.c, &k.measured) != 0)
            return -1;
    }
    k.rows = o->micro_batch * o->seq;
    if (k.rows > CALIB_MAX_ROWS)
        k.rows = (CALIB_MAX_ROWS / o->seq) * o->seq;
    if (k.rows < o->seq)
        k.rows = o->seq;
    k.c.mm_rows = (double)k.rows; /* the rows calib_compute measured at */
    k.ranks = comm != NULL ? msr_comm_size(comm) : 1;
    k.round_ms = (double)calib_round_ns(o, CALIB_ROUND_NS) * 1e-6;
    k.short_job = calib_short(o);
    k.seconds = (double)(msr_now_ns() - t0) * 1e-9;
    *out = k;
    return 0;
}

/* The median of n values (n <= CALIB_MAX_RUNS), leaving v as it was. */
static double median_of(const double *v, int n)
{
    double w[CALIB_MAX_RUNS];
    memcpy(w, v, (size_t)n * sizeof *w);
    return median(w, n);
}

/* Several calibrations into one: each key the median of the runs' (the
 * same on every rank: every run is), what was measured in every run
 * counted measured, the cold-frames curve point by point where every run
 * has the same points, the time the sum. */
static void calib_merge(const calib_t *runs, int n, calib_t *out)
{
    *out = runs[0];
    out->runs = n;
    if (n < 2)
        return;
    /* every real key of the cluster (those no run measures agree) */
    double v[CALIB_MAX_RUNS];
    const char *name;
    size_t off;
    for (size_t i = 0; msr_plan_cluster_real_key(i, &name, &off); i++) {
        for (int r = 0; r < n; r++)
            memcpy(&v[r], (const char *)&runs[r].c + off, sizeof v[r]);
        double m = median_of(v, n);
        memcpy((char *)&out->c + off, &m, sizeof m);
    }
#define MERGE(field)                  \
    do {                              \
        for (int r = 0; r < n; r++)   \
            v[r] = runs[r].field;     \
        out->field = median_of(v, n); \
    } while (0)
    MERGE(blend_tflops);
    MERGE(lend_speedup);
    MERGE(noise);
    /* the runs disagreeing is noise too: the spread of their rates */
    double lo = runs[0].blend_tflops, hi = lo;
    for (int r = 1; r < n; r++) {
        lo = runs[r].blend_tflops < lo ? runs[r].blend_tflops : lo;
        hi = runs[r].blend_tflops > hi ? runs[r].blend_tflops : hi;
    }
    if (out->blend_tflops > 0 && (hi - lo) / out->blend_tflops > out->noise)
        out->noise = (hi - lo) / out->blend_tflops;
    int same = 1;
    out->seconds = 0;
    for (int r = 0; r < n; r++) {
        out->measured &= runs[r].measured;
        out->seconds += runs[r].seconds;
        same &= runs[r].cold_n == runs[0].cold_n;
    }
    for (int i = 0; same && i < runs[0].cold_n; i++)
        MERGE(cold_ms[i]);
#undef MERGE
}

int train_gpt_calibrate_runs(const options_t *o, const job_t *job, msr_comm_t *comm, calib_t *out)
{
    int n = o->calibrate_runs < 1 ? 1 : (int)o->calibrate_runs;
    if (n > CALIB_MAX_RUNS)
        n = CALIB_MAX_RUNS;
    calib_t *runs = msr_calloc((size_t)n, sizeof *runs);
    if (runs == NULL) {
        fprintf(stderr, "train_gpt: --calibrate: out of memory\n");
        return -1;
    }
    for (int r = 0; r < n; r++) {
        if (train_gpt_calibrate(o, job, comm, &runs[r]) != 0) {
            msr_free(runs);
            return -1;
        }
    }
    calib_merge(runs, n, out);
    msr_free(runs);
    /* the disk once: the runs' spread is the kernels' */
    return calib_disk(o, comm, job->rank, out);
}

/* The keys that are not measured, commented out with why: the reader's
 * defaults apply to them. */
#define COLD_WHY "two micro-batches' frames over 192 MiB, or out of memory"

_Static_assert(CALIB_SHORT_STEPS == 100, "unmeasured_why names the short job's bound");

static const char *unmeasured_why(const calib_t *k, const char *key)
{
    static const struct {
        const char *key;
        int bit;
        const char *why;
    } keys[] = {
        {"latency_us", CALIB_LATENCY, "one rank: no message to time"},
        {"intra_gbs", CALIB_INTRA, "no node with two ranks"},
        {"inter_gbs", CALIB_INTER, "one node"},
        {"mem_gib", CALIB_MEM, "the machine's memory is unknown"},
        {"cold_ms_per_mib", CALIB_COLD, COLD_WHY},
        {"cold_from_mib", CALIB_COLD, COLD_WHY},
        {"cold_full_mib", CALIB_COLD, COLD_WHY},
        {"idle_lend", CALIB_LEND, "no rank waits for a core: as many cores as ranks"},
        {"ring_step_us", CALIB_RING_STEP, "no node with two ranks"},
        {"disk_read_gbs", CALIB_DISK, "no --offload-dir to measure in"},
        {"disk_write_gbs", CALIB_DISK, "no --offload-dir to measure in"},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(keys[i].key, key) == 0 && !(k->measured & (1u << keys[i].bit)))
            return keys[i].bit == CALIB_COLD && k->short_job
                       ? "a job of fewer than 100 steps skips it"
                       : keys[i].why;
    return NULL;
}

int train_gpt_calibrate_text(const options_t *o, const calib_t *k, char *buf, size_t len)
{
    char body[2048];
    int n = msr_plan_cluster_format(&k->c, body, sizeof body);
    if (n < 0 || (size_t)n >= sizeof body)
        return -1;
    size_t at = 0;
    char runs[64] = "", arch[128] = "";
    if (strcmp(o->arch, "llama") == 0)
        snprintf(arch, sizeof arch, "arch llama ffn %" PRId64 " kv-heads %" PRId64 " ", o->ffn,
                 o->kv_heads);
    if (k->runs > 1)
        snprintf(runs, sizeof runs, "; each key the median of %d calibrations", k->runs);
    int w = snprintf(buf, len,
                     "# train_gpt --calibrate: %d rank%s, %d per node, %.1f s; kernels at %s"
                     "layers %" PRId64 " channels %" PRId64 " heads %" PRId64 " seq %" PRId64
                     ", %" PRId64 " rows; allreduce of %zu bytes%s\n"
                     "# a pass's matmuls and attention together: %.4g TFLOP/s; repeated "
                     "timings' noise %.2g%% (rounds of %g ms)\n",
                     k->ranks, k->ranks == 1 ? "" : "s", k->c.ranks_per_node, k->seconds, arch,
                     o->layers, o->channels, o->heads, o->seq, k->rows, k->comm_bytes, runs,
                     k->blend_tflops, 100 * k->noise, k->round_ms);
    if (w < 0 || (size_t)w >= len)
        return -1;
    at = (size_t)w;
    if (k->measured & (1u << CALIB_LEND)) {
        w = snprintf(buf + at, len - at,
                     "# %d of a node's ranks computing while the others wait: %.3g times as fast "
                     "as all at once (%d cores: %.3g at most)\n",
                     k->c.cores_per_node, k->lend_speedup, k->c.cores_per_node,
                     (double)k->c.ranks_per_node / k->c.cores_per_node);
        if (w < 0 || (size_t)w >= len - at)
            return -1;
        at += (size_t)w;
    }
    if (k->cold_n > 0) {
        w = snprintf(buf + at, len - at,
                     "# a micro-batch's forward and backward with the node's frames at (MiB: ms):");
        for (int i = 0; i < k->cold_n && w >= 0 && (size_t)w < len - at; i++) {
            at += (size_t)w;
            w = snprintf(buf + at, len - at, " %.4g: %.4g", k->cold_mib[i], k->cold_ms[i]);
        }
        if (w < 0 || (size_t)w >= len - at)
            return -1;
        at += (size_t)w;
        w = snprintf(buf + at, len - at, "\n");
        if (w < 0 || (size_t)w >= len - at)
            return -1;
        at += (size_t)w;
    }
    for (char *line = body, *next; *line != '\0'; line = next) {
        next = strchr(line, '\n');
        next = next != NULL ? next + 1 : line + strlen(line);
        char key[64];
        const char *why = NULL;
        if (sscanf(line, " %63[a-z_]", key) == 1)
            why = unmeasured_why(k, key);
        int ll = (int)(next - line);
        if (ll > 0 && line[ll - 1] == '\n')
            ll--;
        w = why != NULL
                ? snprintf(buf + at, len - at, "# %.*s  (not measured: %s)\n", ll, line, why)
                : snprintf(buf + at, len - at, "%.*s\n", ll, line);
        if (w < 0 || (size_t)w >= len - at)
            return -1;
        at += (size_t)w;
    }
    return (int)at;
}

void train_gpt_calibrate_summary(const calib_t *k, char *buf, size_t len)
{
    int n = snprintf(buf, len,
                     "calibrated %d rank%s in %.1f s: %.4g TFLOP/s, element-wise %.4g GB/s, a "
                     "kernel call %.3g us",
                     k->ranks, k->ranks == 1 ? "" : "s", k->seconds, k->c.peak_tflops, k->c.mem_gbs,
                     k->c.kernel_us);
    if (n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, ", timings' noise %.2g%%", 100 * k->noise);
    if (n >= 0 && (size_t)n < len && (k->measured & (1u << CALIB_LATENCY)))
        n += snprintf(buf + n, len - (size_t)n, ", latency %.3g us", k->c.latency_us);
    if (n >= 0 && (size_t)n < len && (k->measured & (1u << CALIB_INTRA)))
        n += snprintf(buf + n, len - (size_t)n, ", %.4g GB/s inside a node", k->c.intra_gbs);
    if (n >= 0 && (size_t)n < len && (k->measured & (1u << CALIB_INTER)))
        n += snprintf(buf + n, len - (size_t)n, ", %.4g GB/s between nodes", k->c.inter_gbs);
    if (n >= 0 && (size_t)n < len && (k->measured & (1u << CALIB_DISK)))
        snprintf(buf + n, len - (size_t)n, ", the offload directory %.4g GB/s read, %.4g write",
                 k->c.disk_read_gbs, k->c.disk_write_gbs);
}

int train_gpt_calibrate_main(const options_t *o, const job_t *job)
{
    msr_comm_t *comm = NULL;
    FILE *f = NULL;
    int rc = 1, bad = 0;
    msr_status_t st;
    if (job->world > 1 && (st = msr_comm_world(job->ctx, &comm)) != MSR_OK) {
        fprintf(stderr, "train_gpt: cannot make the communicator: %s: %s\n", msr_status_str(st),
                msr_last_error());
        goto out;
    }
    /* the file first: a path that cannot be written stops every rank
     * before the measurement */
    if (job->rank == 0 && (f = fopen(o->calibrate, "w")) == NULL) {
        fprintf(stderr, "train_gpt: --calibrate %s: %s\n", o->calibrate, strerror(errno));
        bad = 1;
    }
    if (comm != NULL && (st = msr_comm_broadcast(comm, &bad, 1, MSR_DTYPE_I32, 0)) != MSR_OK) {
        fprintf(stderr, "train_gpt: --calibrate: %s: %s\n", msr_status_str(st), msr_last_error());
        goto out;
    }
    if (bad) {
        rc = EXIT_BAD_INPUT;
        goto out;
    }
    calib_t k;
    if (train_gpt_calibrate_runs(o, job, comm, &k) != 0)
        goto out;
    if (job->rank == 0) {
        char text[4096];
        int n = train_gpt_calibrate_text(o, &k, text, sizeof text);
        int bad_write = n < 0 || fwrite(text, 1, (size_t)n, f) != (size_t)n;
        int bad_close = fclose(f) != 0;
        f = NULL;
        if (bad_write || bad_close) {
            fprintf(stderr, "train_gpt: --calibrate %s: cannot write: %s\n", o->calibrate,
                    strerror(errno));
            remove(o->calibrate);
            goto out;
        }
        char line[512];
        train_gpt_calibrate_summary(&k, line, sizeof line);
        fprintf(stderr, "train_gpt: %s; wrote %s\n", line, o->calibrate);
    }
    rc = 0;
    /* nobody leaves while a peer may still be receiving its last message */
    if (comm != NULL && (st = msr_comm_barrier(comm)) != MSR_OK) {
        fprintf(stderr, "train_gpt: --calibrate: the final barrier: %s: %s\n", msr_status_str(st),
                msr_last_error());
        rc = 1;
    }
out:
    if (f != NULL) {
        fclose(f);
        remove(o->calibrate); /* no half-written cluster file */
    }
    msr_comm_destroy(comm);
    return rc;
}
