/* train_gpt's planner front ends (docs/plan.md "train_gpt --plan / --auto"):
 *
 *   --calibrate FILE   measure this machine, rank 0 writes the cluster file
 *   --plan, --plan-all the ranked layouts of the model for the job's ranks
 *   --explain N        plan N broken down
 *   --auto             train with plan 1
 *
 * The cluster is --cluster FILE (read by rank 0 and broadcast) or measured
 * now by every rank together, so that every rank plans alike. Layout
 * options given on the command line (--dp, --tp, --pp, --cp, --ep, --sp, --zero,
 * --recompute, --micro-batch, --schedule, --virtual-stages, --pp-layers)
 * fix the search: "--auto --tp 2" searches the layouts with tp 2, and a fix that
 * leaves no layout is bad input. Bad input: one line (from every rank
 * that meets it), exit status 2. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "layout/layout.h"
#include "model/data.h"
#include "model/gpt.h"
#include "parallel/mp.h"
#include "planner/plan.h"
#include "planner/plan_print.h"
#include "programs/train_gpt/train_gpt.h"
#include "programs/train_gpt/train_gpt_calib.h"

/* The planner counts the offloads' buffers as parallel/ allocates them. */
_Static_assert(MSR_PLAN_OFFLOAD_SLOTS == MSR_OFFLOAD_SLOTS &&
                   MSR_PLAN_OFFLOAD_ALIGN == MSR_OFFLOAD_ALIGN &&
                   MSR_PLAN_OFFLOAD_CHUNK_DEFAULT == MSR_OFFLOAD_CHUNK_DEFAULT &&
                   MSR_PLAN_OFFLOAD_CHUNK_MAX == MSR_OFFLOAD_CHUNK_MAX &&
                   MSR_PLAN_ACTS_BUFS == MSR_ACTS_BUFS,
               "planner/plan.h's offload sizes are parallel/'s");

/* A cluster file is a few lines; anything longer is not one. */
/* --plan's table without --plan-all. */
#define PLAN_TOP  10
/* The fastest plans --auto chooses among (those within the noise). */
#define AUTO_KEEP 4096

/* Prints one line "train_gpt: ..." and returns EXIT_BAD_INPUT. Every rank
 * meets the same bad input and says so, as train_gpt's other refusals: the
 * first rank to exit ends the job, so a line from rank 0 alone could be
 * lost. */
static int refuse(const job_t *job, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(const job_t *job, const char *fmt, ...)
{
    (void)job;
    /* one write: a rank the job's end kills mid-line leaves no part line */
    char line[2048];
    int n = snprintf(line, sizeof line, "train_gpt: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    fflush(stderr);
    ssize_t w = write(STDERR_FILENO, line, strlen(line));
    (void)w; /* nothing better to do when stderr is gone */
    return EXIT_BAD_INPUT;
}

/* The cluster the ranks plan with, where it came from and how far its
 * timings may be off (a fraction: plans predicted that close to the
 * fastest are not told apart). */
typedef struct cluster_src {
    msr_plan_cluster_t c;
    double noise;
    char origin[4200]; /* a path, "measured now", ... */
} cluster_src_t;

/* Rank 0's cluster file, broadcast. Returns 0, EXIT_BAD_INPUT (rank 0 said
 * why) or 1. */
static int cluster_file(const options_t *o, const job_t *job, msr_comm_t *comm, cluster_src_t *src)
{
    /* the others need not see the file. The struct goes as bytes (every
     * rank runs this build), with whether rank 0 read it */
    struct {
        int32_t ok;
        msr_plan_cluster_t c;
    } shared;
    memset(&shared, 0, sizeof shared);
    if (job->rank == 0) {
        char why[1024];
        shared.ok = msr_plan_cluster_read(o->cluster, &shared.c, why, sizeof why) == 0;
        if (!shared.ok)
            fprintf(stderr, "train_gpt: %s\n", why);
    }
    msr_status_t st;
    if (comm != NULL &&
        (st = msr_comm_broadcast(comm, &shared, sizeof shared, MSR_DTYPE_U8, 0)) != MSR_OK) {
        fprintf(stderr, "train_gpt: sharing the cluster: %s: %s\n", msr_status_str(st),
                msr_last_error());
        return 1;
    }
    if (!shared.ok)
        return EXIT_BAD_INPUT;
    src->c = shared.c;
    src->noise = 0; /* a file says nothing of its timings' spread */
    snprintf(src->origin, sizeof src->origin, "%s", o->cluster);
    return 0;
}

/* The cluster cached for this machine and model shape (rank 0 reads it,
 * unless --recalibrate), else measured now by every rank together and
 * cached by rank 0. Returns 0 or 1 (said why). */
static int cluster_measured(const options_t *o, const job_t *job, msr_comm_t *comm,
                            cluster_src_t *src)
{
    calib_cache_t cc;
    int rpn = job->ctx != NULL ? msr_local_world_size(job->ctx) : 1;
    int cached = calib_cache_init(&cc, o, job->world, rpn) == 0;
    struct {
        int32_t ok;
        double noise;
        msr_plan_cluster_t c;
    } shared;
    memset(&shared, 0, sizeof shared);
    if (job->rank == 0 && cached && !o->recalibrate)
        shared.ok = calib_cache_load(&cc, &shared.c, &shared.noise) == 0;
    msr_status_t st;
    if (comm != NULL &&
        (st = msr_comm_broadcast(comm, &shared, sizeof shared, MSR_DTYPE_U8, 0)) != MSR_OK) {
        fprintf(stderr, "train_gpt: sharing the cluster: %s: %s\n", msr_status_str(st),
                msr_last_error());
        return 1;
    }
    if (shared.ok) {
        src->c = shared.c;
        src->noise = shared.noise;
        snprintf(src->origin, sizeof src->origin, "cached in %s", cc.path);
        if (job->rank == 0)
            fprintf(stderr,
                    "train_gpt: the calibration cached in %s is reused (timings' noise %.2g%%; "
                    "--recalibrate measures again)\n",
                    cc.path, 100 * shared.noise);
        return 0;
    }
    calib_t k;
    if (train_gpt_calibrate_runs(o, job, comm, &k) != 0)
        return 1;
    src->c = k.c;
    src->noise = k.noise;
    snprintf(src->origin, sizeof src->origin, "measured now");
    if (job->rank == 0) {
        char line[512];
        train_gpt_calibrate_summary(&k, line, sizeof line);
        int kept = cached && calib_cache_store(&cc, o, &k) == 0;
        fprintf(stderr, "train_gpt: %s%s%s (--calibrate FILE keeps them for --cluster)\n", line,
                kept ? "; cached in " : "", kept ? cc.path : "");
    }
    return 0;
}

/* The cluster every rank plans with: --cluster's, or cached or measured.
 * Returns 0, EXIT_BAD_INPUT (the file; rank 0 said why) or 1. */
static int cluster_get(const options_t *o, const job_t *job, cluster_src_t *src)
{
    msr_comm_t *comm = NULL;
    msr_status_t st;
    if (job->world > 1 && (st = msr_comm_world(job->ctx, &comm)) != MSR_OK) {
        fprintf(stderr, "train_gpt: cannot make the communicator: %s: %s\n", msr_status_str(st),
                msr_last_error());
        return 1;
    }
    int rc =
        o->cluster != NULL ? cluster_file(o, job, comm, src) : cluster_measured(o, job, comm, src);
    msr_comm_destroy(comm);
    return rc;
}

/* The layout options given, as the search's fixes. Returns 0, or the exit
 * status (a name that is not a schedule or recompute mode). */
static int fixes(const options_t *o, const job_t *job, int *fix)
{
    for (int k = 0; k < MSR_PLAN_FIX_N; k++)
        fix[k] = -1;
    static const struct {
        const char *opt;
        int key;
    } ints[] = {{"dp", MSR_PLAN_FIX_DP},
                {"tp", MSR_PLAN_FIX_TP},
                {"pp", MSR_PLAN_FIX_PP},
                {"zero", MSR_PLAN_FIX_ZERO},
                {"micro-batch", MSR_PLAN_FIX_MICRO_BATCH},
                {"virtual-stages", MSR_PLAN_FIX_VIRTUAL_STAGES}};
    const int64_t vals[] = {o->dp, o->tp, o->pp, o->zero, o->micro_batch, o->virtual_stages};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(ints); i++)
        if (train_gpt_given(o, ints[i].opt))
            fix[ints[i].key] = (int)vals[i];
    if (train_gpt_given(o, "dp") && o->dp == 0)
        fix[MSR_PLAN_FIX_DP] = -1; /* --dp 0: the world's, i.e. free */
    if (o->sp)
        fix[MSR_PLAN_FIX_SP] = 1;
    if (train_gpt_given(o, "cp"))
        fix[MSR_PLAN_FIX_CP] = (int)o->cp;
    if (train_gpt_given(o, "ep"))
        fix[MSR_PLAN_FIX_EP] = (int)o->ep;
    if (o->schedule != NULL &&
        (fix[MSR_PLAN_FIX_SCHEDULE] = msr_mp_schedule_parse(o->schedule)) < 0)
        return refuse(job, "--schedule '%s' is not one of gpipe, 1f1b, interleaved", o->schedule);
    if (o->recompute != NULL &&
        (fix[MSR_PLAN_FIX_RECOMPUTE] = msr_mp_recompute_parse(o->recompute)) < 0)
        return refuse(job, "--recompute '%s' is not one of none, selective, full", o->recompute);
    return 0;
}

/* The global batch --auto and --plan keep: --global-batch, else what the
 * same command trains without them (micro-batch x grad-accum x dp, dp the
 * world's share when not given). Returns 0 or the exit status. */
static int global_batch(const options_t *o, const job_t *job, int64_t *G_p)
{
    if (o->global_batch > 0) {
        *G_p = o->global_batch;
        return 0;
    }
    int64_t dp = o->dp;
    if (dp == 0) {
        if (job->world % (o->tp * o->pp * o->cp) != 0)
            return refuse(job,
                          "the job's %d ranks do not divide into tp %" PRId64 " x pp %" PRId64
                          " x cp %" PRId64,
                          job->world, o->tp, o->pp, o->cp);
        dp = job->world / (o->tp * o->pp * o->cp);
    }
    *G_p = o->micro_batch * o->grad_accum * dp;
    return 0;
}

/* Whether the command line asks for something the planner cannot honour.
 * Returns 0 or the exit status. */
static int check_request(const options_t *o, const job_t *job)
{
    int prints = o->plan || o->plan_all || o->explain > 0;
    if (o->calibrate != NULL && (prints || o->auto_plan || o->cluster != NULL))
        return refuse(job, "--calibrate measures and exits: not with --plan, --plan-all, "
                           "--explain, --auto or --cluster");
    if (o->auto_plan && prints)
        return refuse(job, "--auto trains and --plan, --plan-all and --explain print: choose one");
    if (o->offload_dir != NULL && ((!o->auto_plan && o->calibrate == NULL) || o->offload != NULL))
        return refuse(job, "--offload-dir is for --auto without --offload (which names its own) "
                           "and --calibrate");
    if (o->offload_dir != NULL && (o->offload_dir[0] == '\0' || strlen(o->offload_dir) > 4096))
        return refuse(job, "--offload-dir: a directory of 1 to 4096 bytes");
    /* a calibration measures the disk there, and --auto may offload there */
    if (o->offload_dir != NULL && access(o->offload_dir, W_OK | X_OK) != 0)
        return refuse(job, "--offload-dir %s: %s", o->offload_dir, strerror(errno));
    if (o->cluster != NULL && !prints && !o->auto_plan)
        return refuse(job, "--cluster is for --plan, --plan-all, --explain and --auto");
    if (o->recalibrate &&
        (o->cluster != NULL || o->calibrate != NULL || (!prints && !o->auto_plan)))
        return refuse(job, "--recalibrate is for --plan, --plan-all, --explain and --auto "
                           "without --cluster");
    if (strcmp(o->device, "cpu") != 0)
        return refuse(job,
                      "--calibrate, --plan, --explain and --auto model the CPU runtime: "
                      "not with --device %s",
                      o->device);
    return 0;
}

/* The fixed degrees against the job's ranks, before anything is measured.
 * Returns 0 or the exit status. */
static int check_degrees(const job_t *job, const int *fix)
{
    int64_t fixed = 1;
    int nfixed = 0;
    char what[96] = "";
    size_t at = 0;
    static const int keys[4] = {MSR_PLAN_FIX_DP, MSR_PLAN_FIX_TP, MSR_PLAN_FIX_PP, MSR_PLAN_FIX_CP};
    static const char *const names[4] = {"dp", "tp", "pp", "cp"};
    for (int i = 0; i < 4; i++) {
        if (fix[keys[i]] < 0)
            continue;
        fixed *= fix[keys[i]];
        nfixed++;
        at += (size_t)snprintf(what + at, sizeof what - at, "%s%s %d", at ? " x " : "", names[i],
                               fix[keys[i]]);
    }
    if ((nfixed == 4 && fixed != job->world) || (nfixed == 3 && fixed > job->world))
        return refuse(job, "%s = %" PRId64 " ranks, but the job has %d", what, fixed, job->world);
    if (nfixed > 0 && job->world % fixed != 0)
        return refuse(job, "the job's %d ranks do not divide into %s", job->world, what);
    return 0;
}

/* A layout in train_gpt's options' words, into buf. */
static void layout_text(const msr_plan_layout_t *l, int moe, char *buf, size_t len)
{
    char ep[32] = "", split[8 * MSR_PLAN_MAX_STAGES] = "";
    if (moe)
        snprintf(ep, sizeof ep, " ep %d", msr_plan_ep(l));
    if (l->stage_layers != NULL) {
        snprintf(split, sizeof split, " pp-layers ");
        msr_layout_split_format(l->stage_layers, l->pp * l->chunks, split + strlen(split),
                                sizeof split - strlen(split));
    }
    char head[32] = "";
    if (l->head_chunk > 0)
        snprintf(head, sizeof head, " head-chunk %d", l->head_chunk);
    snprintf(buf, len,
             "dp %d tp %d pp %d cp %d%s%s zero %d recompute %s micro-batch %d grad-accum %d "
             "schedule %s virtual-stages %d%s%s",
             l->dp, l->tp, l->pp, msr_plan_cp(l), ep, l->sp ? " sp" : "", l->zero,
             msr_mp_recompute_name((msr_mp_recompute_t)l->recompute), l->micro_batch, l->micros,
             msr_mp_schedule_name((msr_mp_schedule_t)l->schedule), l->chunks, split, head);
}

/* "predicted T ms per step, R tokens/s, B per rank at most", into buf. */
static void predicted_text(const msr_plan_t *p, char *buf, size_t len)
{
    char peak[32];
    msr_plan_format_bytes((double)p->peak, peak, sizeof peak);
    snprintf(buf, len, "predicted %.4g ms per step, %.0f tokens/s, %s per rank at most",
             p->t.step_ms, p->t.tokens_per_s, peak);
}

/* The layout the same command trains without --auto (the options given,
 * train_gpt's defaults for the rest), as a plan in *p. Returns 0, or -1
 * with the runtime's reason in why. */
static int default_plan(const options_t *o, const job_t *job, const msr_plan_model_t *m,
                        msr_plan_precision_t prec, const msr_plan_cluster_t *c, msr_plan_t *p,
                        char *why, size_t len)
{
    memset(p, 0, sizeof *p);
    msr_plan_layout_t *l = &p->l;
    int64_t tpc = o->tp * o->pp * o->cp;
    l->dp = o->dp > 0 ? (int)o->dp : (int)(job->world / tpc);
    l->tp = (int)o->tp;
    l->pp = (int)o->pp;
    l->cp = (int)o->cp;
    l->ep = (int)o->ep;
    l->sp = o->sp;
    l->tp_overlap = o->tp_overlap;
    l->head_chunk = (int)o->head_chunk;
    l->zero = (int)o->zero;
    l->recompute = msr_mp_recompute_parse(o->recompute != NULL ? o->recompute : "none");
    l->schedule = msr_mp_schedule_parse(o->schedule != NULL ? o->schedule : "1f1b");
    l->chunks = (int)o->virtual_stages;
    l->micro_batch = (int)o->micro_batch;
    l->micros = (int)o->grad_accum;
    if (o->global_batch > 0 && l->dp > 0) {
        /* as train_gpt_check.c takes it without --auto */
        if (o->global_batch % (o->micro_batch * l->dp) != 0) {
            snprintf(why, len,
                     "global batch %" PRId64 " is not a multiple of micro-batch %" PRId64
                     " x dp %d",
                     o->global_batch, o->micro_batch, l->dp);
            return -1;
        }
        l->micros = (int)(o->global_batch / (o->micro_batch * l->dp));
    }
    l->bucket_bytes = (size_t)(o->bucket_mb * 1048576.0);
    l->zero_min_bytes = (size_t)o->zero_min_bytes;
    if (o->split_n > 0) {
        memcpy(p->split, o->split, (size_t)o->split_n * sizeof p->split[0]);
        l->stage_layers = p->split;
    }
    if (job->world % tpc != 0 || (int64_t)l->dp * tpc != job->world) {
        snprintf(why, len, "not %d ranks", job->world);
        return -1;
    }
    if (msr_plan_check(m, l, why, len) != 0)
        return -1;
    int at;
    p->peak = msr_plan_peak(m, l, prec, &at);
    msr_plan_rank(m, l, prec, at, &p->at);
    msr_plan_time(m, l, prec, c, &p->t);
    if ((double)p->peak > c->mem_gib * 1073741824.0) {
        snprintf(why, len, "over the %.4g GiB per rank", c->mem_gib);
        return -1;
    }
    return 0;
}

/* --auto on rank 0: the plan taken (index k of n), why, the runner-up and
 * the layout without --auto, each with its prediction. */
static void auto_explain(const options_t *o, const job_t *job, const msr_plan_model_t *m,
                         msr_plan_precision_t prec, const cluster_src_t *src,
                         const msr_plan_t *plans, int64_t n, int64_t k, int64_t within,
                         uint64_t found)
{
    char lay[1024], pred[256];
    layout_text(&plans[k].l, m->experts > 0, lay, sizeof lay);
    predicted_text(&plans[k], pred, sizeof pred);
    fprintf(stderr, "train_gpt: --auto: plan %" PRId64 " of %" PRIu64 ": %s; %s (cluster: %s)\n",
            k + 1, found, lay, pred, src->origin);
    if (within > 1)
        fprintf(stderr,
                "train_gpt: --auto: why: %" PRId64 " plans are predicted within the timings' noise "
                "(%.2g%%) of the fastest (%.4g ms), too close to tell apart: the simplest of them "
                "(fewest parallel dimensions, then fewest model-parallel, lowest ZeRO stage, least "
                "recompute, no sp, fewest virtual stages, the even split, the fastest)\n",
                within, 100 * src->noise, plans[0].t.step_ms);
    else
        fprintf(stderr,
                "train_gpt: --auto: why: the fastest; no other plan predicted within the "
                "timings' noise (%.2g%%)\n",
                100 * src->noise);
    if (n > 1) {
        int64_t r = k == 0 ? 1 : 0; /* the fastest of the others */
        layout_text(&plans[r].l, m->experts > 0, lay, sizeof lay);
        predicted_text(&plans[r], pred, sizeof pred);
        fprintf(stderr, "train_gpt: --auto: runner-up: plan %" PRId64 ": %s; %s\n", r + 1, lay,
                pred);
    } else {
        fprintf(stderr, "train_gpt: --auto: runner-up: none, the only plan\n");
    }
    msr_plan_t d;
    char why[512];
    int ok = default_plan(o, job, m, prec, &src->c, &d, why, sizeof why) == 0;
    layout_text(&d.l, m->experts > 0, lay, sizeof lay);
    if (ok)
        predicted_text(&d, pred, sizeof pred);
    fprintf(stderr, "train_gpt: --auto: without --auto: %s; %s%s\n", lay,
            ok ? pred : "not a plan: ", ok ? "" : why);
}

/* No plan: what was refused, what was over the budget (without what
 * --auto adds), and for --auto that the chunked head did not help, and the
 * way to an offload, or that --offload-dir's did not help either. Returns
 * the exit status. */
static int refuse_none(const options_t *o, const job_t *job, const msr_plan_query_t *q,
                       const msr_plan_cluster_t *c, const msr_plan_pruned_t *pr)
{
    int over = o->auto_plan && pr->over_memory > 0;
    char head[64] = "";
    if (pr->over_memory > 0 && o->head_chunk == 0)
        snprintf(head, sizeof head, "; nor with a chunked head (--head-chunk %d)",
                 MSR_PLAN_FIT_HEAD_ROWS);
    return refuse(
        job,
        "no layout of %d ranks and global batch %" PRId64 " with the options given: %" PRIu64
        " refused by the runtime's rules%s%s%s, %" PRIu64 " over %.4g GiB per rank%s%s%s%s%s",
        job->world, q->global_batch, pr->invalid, pr->invalid ? " (the first " : "",
        pr->invalid ? pr->first_invalid : "", pr->invalid ? ")" : "", pr->over_memory, c->mem_gib,
        pr->over_memory ? " (the first " : "", pr->over_memory ? pr->first_over : "",
        pr->over_memory ? ")" : "", head,
        !over || o->offload != NULL ? ""
        : o->offload_dir == NULL    ? "; --offload-dir DIR lets --auto offload (none given)"
                                    : "; nor with any of --offload-dir's offloads");
}

/* --auto: plan p's layout into o, for the usual checks. */
static void auto_apply(options_t *o, int64_t global_batch, const msr_plan_t *p)
{
    o->dp = p->l.dp;
    o->tp = p->l.tp;
    o->pp = p->l.pp;
    o->cp = msr_plan_cp(&p->l);
    o->ep = msr_plan_ep(&p->l);
    o->sp = p->l.sp;
    o->zero = p->l.zero;
    o->recompute = msr_mp_recompute_name((msr_mp_recompute_t)p->l.recompute);
    o->micro_batch = p->l.micro_batch;
    o->grad_accum = p->l.micros;
    o->global_batch = global_batch;
    o->schedule = msr_mp_schedule_name((msr_mp_schedule_t)p->l.schedule);
    o->virtual_stages = p->l.chunks;
    /* the split: the planner's, into o->split (train_gpt_split_check
     * checks it with the rest) */
    o->pp_layers = NULL;
    o->split_n = 0;
    if (p->l.stage_layers != NULL) {
        o->split_n = p->l.pp * p->l.chunks;
        memcpy(o->split, p->l.stage_layers, (size_t)o->split_n * sizeof o->split[0]);
    }
}

/* The vocabulary the job trains: --vocab, else the data's own (a token
 * file's, read here as training reads it; 256 for bytes and for the
 * generated corpus). Returns 0, or the exit status (the data refused). */
static int plan_vocab(const options_t *o, const job_t *job, int *V_p)
{
    if (o->vocab > 0 || o->data == NULL) {
        *V_p = o->vocab > 0 ? (int)o->vocab : MSR_GPT_VOCAB;
        return 0;
    }
    msr_dataset_t *ds = NULL;
    msr_status_t st = msr_dataset_load(o->data, &ds);
    if (st != MSR_OK)
        return refuse(job, "no data: %s", msr_err_msg_or(st));
    *V_p = ds->vocab;
    msr_dataset_destroy(ds);
    return 0;
}

/* The precision the job trains (--precision), as the planner counts it:
 * fp32, or the runtime's bf16 products (not the paper's bf16). Returns 0
 * or the exit status. */
static int plan_precision(const options_t *o, const job_t *job, msr_plan_precision_t *prec_p)
{
    if (strcmp(o->precision, "fp32") == 0)
        *prec_p = MSR_PLAN_FP32;
    else if (strcmp(o->precision, "bf16") == 0)
        *prec_p = MSR_PLAN_BF16_RUNTIME;
    else
        return refuse(job, "--precision %s: not fp32 or bf16", o->precision);
    return 0;
}

/* The model the job trains, as the planner describes it, with the job's
 * vocabulary (plan_vocab). Returns 0 or the exit status. */
static int plan_model(const options_t *o, const job_t *job, msr_plan_model_t *m)
{
    int V = 0, rc = plan_vocab(o, job, &V);
    if (rc != 0)
        return rc;
    int llama = strcmp(o->arch, "llama") == 0; /* its ffn and kv heads train_gpt_arch.c set */
    *m = (msr_plan_model_t){llama ? MSR_PLAN_LLAMA : MSR_PLAN_GPT,
                            (int)o->layers,
                            (int)o->channels,
                            (int)o->heads,
                            llama ? (int)o->kv_heads : (int)o->heads,
                            llama ? (int)o->ffn : 4 * (int)o->channels,
                            V,
                            (int)o->seq};
    m->experts = (int)o->experts; /* a MoE model (0: dense) */
    m->top_k = (int)o->top_k;
    m->moe_every = (int)o->moe_every;
    m->capacity_factor = o->capacity_factor;
    char why[512];
    if (msr_plan_check_model(m, why, sizeof why) != 0)
        return refuse(job, "%s", why);
    return 0;
}

int train_gpt_plan(options_t *o, const job_t *job, int *done_p)
{
    int rc = check_request(o, job);
    if (rc != 0)
        return rc;
    if (o->calibrate != NULL) {
        *done_p = 1;
        return train_gpt_calibrate_main(o, job);
    }
    *done_p = !o->auto_plan;
    msr_plan_precision_t prec = MSR_PLAN_FP32;
    msr_plan_model_t m;
    if ((rc = plan_precision(o, job, &prec)) != 0 || (rc = plan_model(o, job, &m)) != 0)
        return rc;
    char why[512];
    msr_plan_query_t q;
    memset(&q, 0, sizeof q);
    q.world = job->world;
    if ((rc = fixes(o, job, q.fix)) != 0 || (rc = check_degrees(job, q.fix)) != 0 ||
        (rc = global_batch(o, job, &q.global_batch)) != 0)
        return rc;
    /* the exhaustive search answers for a job's worlds in well under a
     * second; the fast one past a thousand ranks */
    q.search = q.world <= 1024 ? MSR_PLAN_SEARCH_EXHAUSTIVE : MSR_PLAN_SEARCH_FAST;
    q.bucket_bytes = (size_t)(o->bucket_mb * 1048576.0);
    q.zero_min_bytes = (size_t)o->zero_min_bytes;
    /* --offload given: every layout has it, its buffers in place of what
     * it moves (the directory is not planned) */
    if (o->offload != NULL && msr_plan_offload_parse(o->offload, &q.offload, why, sizeof why) != 0)
        return refuse(job, "%s", why);
    q.offload_chunk = train_gpt_given(o, "offload-chunk") ? (size_t)o->offload_chunk : 0;
    q.tp_overlap = o->tp_overlap; /* only the layouts it runs on */
    q.head_chunk = (int)o->head_chunk;
    /* layers split as the search finds best; --pp-layers given fixes it */
    q.even_split = 0;
    int given_split[MSR_GPT_MAX_STAGES];
    if (o->pp_layers != NULL) {
        int n = 0;
        if (msr_layout_split_parse(o->pp_layers, given_split, MSR_GPT_MAX_STAGES, &n) != MSR_OK)
            return refuse(job, "--pp-layers %s: %s", o->pp_layers, msr_err_msg());
        q.split = given_split;
        q.split_n = n;
    }

    cluster_src_t *src = msr_malloc(sizeof *src);
    if (src == NULL)
        return refuse(job, "out of memory");
    if ((rc = cluster_get(o, job, src)) != 0) {
        msr_free(src);
        return rc;
    }
    const msr_plan_cluster_t c = src->c;
    int64_t keep = o->plan_all ? 0 : o->auto_plan ? AUTO_KEEP : PLAN_TOP;
    if (o->explain > keep && keep != 0)
        keep = o->explain;
    msr_plan_t *plans = NULL;
    msr_plan_pruned_t pruned;
    /* the chunked head, and --auto --offload-dir's offloads, where layouts
     * are over the budget: --plan ranks what --auto picks from */
    int fit = o->offload_dir == NULL ? MSR_PLAN_FIT_HEAD : MSR_PLAN_FIT_HEAD | MSR_PLAN_FIT_OFFLOAD;
    int64_t n = msr_plan_search_fit(&m, prec, &c, &q, fit, keep, &plans, &pruned, why, sizeof why);
    if (n < 0) {
        rc = refuse(job, "the planner: %s", why);
        goto out;
    }
    if (n == 0) {
        rc = refuse_none(o, job, &q, &c, &pruned);
        goto out;
    }
    if (o->explain > n) {
        rc = refuse(job, "--explain %" PRId64 ": there are %" PRId64 " plans", o->explain, n);
        goto out;
    }
    if (!o->auto_plan) {
        if (job->rank == 0) {
            printf("cluster: %s\n", src->origin);
            if (o->explain > 0) {
                msr_plan_print_explain(stdout, &m, prec, &c, plans, n, o->explain);
            } else {
                msr_plan_print_table(stdout, plans, n);
                msr_plan_print_summary(stdout, &q, &c, &pruned, n, 0);
            }
            if (o->head_chunk == 0 && plans[0].l.head_chunk > 0)
                train_gpt_print_head(stdout, "", &m, prec, &c, &plans[0], &pruned);
        }
        goto out;
    }
    /* --auto: the simplest plan within the noise, then the usual checks */
    int64_t within = 1, k = msr_plan_choose(plans, n, src->noise, &within);
    if (job->rank == 0)
        auto_explain(o, job, &m, prec, src, plans, n, k, within, pruned.found);
    train_gpt_auto_head(o, job, &m, prec, &c, &plans[k], &pruned);
    train_gpt_auto_offload(o, job, &m, prec, &c, &plans[k], &pruned);
    auto_apply(o, q.global_batch, &plans[k]);
out:
    free(plans);
    msr_free(src);
    return rc;
}
