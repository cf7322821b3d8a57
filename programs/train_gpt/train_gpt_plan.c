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
#include "model/gpt.h"
#include "parallel/mp.h"
#include "planner/plan.h"
#include "planner/plan_print.h"
#include "programs/train_gpt/train_gpt.h"

/* A cluster file is a few lines; anything longer is not one. */
/* --plan's table without --plan-all. */
#define PLAN_TOP 10

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

/* The cluster every rank plans with: rank 0's file, broadcast, or measured
 * by all. Returns 0, EXIT_BAD_INPUT (the file; rank 0 said why) or 1. */
static int cluster_get(const options_t *o, const job_t *job, msr_plan_cluster_t *c,
                       const char **origin_p)
{
    msr_comm_t *comm = NULL;
    msr_status_t st;
    int rc = 1;
    if (job->world > 1 && (st = msr_comm_world(job->ctx, &comm)) != MSR_OK) {
        fprintf(stderr, "train_gpt: cannot make the communicator: %s: %s\n", msr_status_str(st),
                msr_last_error());
        return 1;
    }
    if (o->cluster != NULL) {
        /* rank 0's file: the others need not see it. The struct goes as
         * bytes (every rank runs this build), with whether rank 0 read it */
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
        if (comm != NULL &&
            (st = msr_comm_broadcast(comm, &shared, sizeof shared, MSR_DTYPE_U8, 0)) != MSR_OK) {
            fprintf(stderr, "train_gpt: sharing the cluster: %s: %s\n", msr_status_str(st),
                    msr_last_error());
            goto out;
        }
        if (!shared.ok) {
            rc = EXIT_BAD_INPUT;
            goto out;
        }
        *c = shared.c;
        *origin_p = o->cluster;
    } else {
        calib_t k;
        if (train_gpt_calibrate_runs(o, job, comm, &k) != 0)
            goto out;
        *c = k.c;
        *origin_p = "measured now";
        if (job->rank == 0) {
            char line[512];
            train_gpt_calibrate_summary(&k, line, sizeof line);
            fprintf(stderr, "train_gpt: %s (--calibrate FILE keeps them for --cluster)\n", line);
        }
    }
    rc = 0;
out:
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
    if (o->cluster != NULL && !prints && !o->auto_plan)
        return refuse(job, "--cluster is for --plan, --plan-all, --explain and --auto");
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

/* --auto: plan 1's layout (p) into o, for the usual checks; rank 0 says
 * which it took. */
static void auto_apply(options_t *o, const job_t *job, const msr_plan_model_t *m,
                       int64_t global_batch, const msr_plan_t *p, uint64_t found,
                       const char *origin)
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
    char split_text[8 * MSR_PLAN_MAX_STAGES] = "";
    o->pp_layers = NULL;
    o->split_n = 0;
    if (p->l.stage_layers != NULL) {
        o->split_n = p->l.pp * p->l.chunks;
        memcpy(o->split, p->l.stage_layers, (size_t)o->split_n * sizeof o->split[0]);
        snprintf(split_text, sizeof split_text, " pp-layers ");
        msr_layout_split_format(o->split, o->split_n, split_text + strlen(split_text),
                                sizeof split_text - strlen(split_text));
    }
    char ep_text[32] = "";
    if (m->experts > 0)
        snprintf(ep_text, sizeof ep_text, " ep %d", msr_plan_ep(&p->l));
    if (job->rank == 0) {
        char peak[32];
        msr_plan_format_bytes((double)p->peak, peak, sizeof peak);
        fprintf(stderr,
                "train_gpt: --auto: plan 1 of %" PRIu64
                ": dp %d tp %d pp %d cp %d%s%s zero %d recompute %s micro-batch %d grad-accum %d "
                "schedule %s virtual-stages %d%s; predicted %.4g ms per step, %.0f tokens/s, %s "
                "per rank at most (cluster: %s)\n",
                found, p->l.dp, p->l.tp, p->l.pp, msr_plan_cp(&p->l), ep_text, p->l.sp ? " sp" : "",
                p->l.zero, o->recompute, p->l.micro_batch, p->l.micros, o->schedule, p->l.chunks,
                split_text, p->t.step_ms, p->t.tokens_per_s, peak, origin);
    }
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
    msr_plan_model_t m = {MSR_PLAN_GPT,  (int)o->layers,       (int)o->channels, (int)o->heads,
                          (int)o->heads, 4 * (int)o->channels, MSR_GPT_VOCAB,    (int)o->seq};
    m.experts = (int)o->experts; /* a MoE model (0: dense) */
    m.top_k = (int)o->top_k;
    m.moe_every = (int)o->moe_every;
    m.capacity_factor = o->capacity_factor;
    char why[512];
    if (msr_plan_check_model(&m, why, sizeof why) != 0)
        return refuse(job, "%s", why);
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

    msr_plan_cluster_t c;
    const char *origin = NULL;
    if ((rc = cluster_get(o, job, &c, &origin)) != 0)
        return rc;
    int64_t keep = o->plan_all ? 0 : o->auto_plan ? 1 : PLAN_TOP;
    if (o->explain > keep && keep != 0)
        keep = o->explain;
    msr_plan_t *plans = NULL;
    msr_plan_pruned_t pruned;
    int64_t n = msr_plan_search(&m, MSR_PLAN_FP32, &c, &q, keep, &plans, &pruned, why, sizeof why);
    if (n < 0)
        return refuse(job, "the planner: %s", why);
    if (n == 0) {
        rc = refuse(
            job,
            "no layout of %d ranks and global batch %" PRId64 " with the options given: %" PRIu64
            " refused by the runtime's rules%s%s%s, %" PRIu64 " over %.4g GiB per rank%s%s%s",
            job->world, q.global_batch, pruned.invalid, pruned.invalid ? " (the first " : "",
            pruned.invalid ? pruned.first_invalid : "", pruned.invalid ? ")" : "",
            pruned.over_memory, c.mem_gib, pruned.over_memory ? " (the first " : "",
            pruned.over_memory ? pruned.first_over : "", pruned.over_memory ? ")" : "");
        goto out;
    }
    if (o->explain > n) {
        rc = refuse(job, "--explain %" PRId64 ": there are %" PRId64 " plans", o->explain, n);
        goto out;
    }
    if (!o->auto_plan) {
        if (job->rank == 0) {
            printf("cluster: %s\n", origin);
            if (o->explain > 0) {
                msr_plan_print_explain(stdout, &m, MSR_PLAN_FP32, &c, plans, n, o->explain);
            } else {
                msr_plan_print_table(stdout, plans, n);
                msr_plan_print_summary(stdout, &q, &c, &pruned, n, 0);
            }
        }
        goto out;
    }
    /* --auto: plan 1's layout, then the usual checks */
    auto_apply(o, job, &m, q.global_batch, &plans[0], pruned.found, origin);
out:
    free(plans);
    return rc;
}
