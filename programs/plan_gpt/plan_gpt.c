/* plan_gpt: the layouts of a model on a world of N ranks, ranked by
 * predicted step time (planner/plan.h): every valid one within the
 * cluster's memory per rank, best first, with its memory and time.
 *
 *   plan_gpt --layers 4 --channels 32 --heads 4 --seq 16 --vocab 256
 *            --global-batch 8 --world 4 [--arch gpt|llama --ffn F
 *            --kv-heads K] [--precision fp32|bf16] [--cluster FILE]
 *            [--fix dp=2,tp=2,cp=2,...] [--search exhaustive|fast] [--top N]
 *            [--all] [--explain N] [--even-split] [--format table|kv]
 *            [--ranks] [--pp-layers 3,5,5,3] [--experts E --top-k K
 *            --moe-every N --capacity-factor F]
 *
 * --experts plans a Mixture-of-Experts model (train_gpt's options, the
 * same defaults: top-k 2, every block, capacity factor 1.25), and the
 * layouts then include expert parallel (ep, a divisor of dp).
 *
 * --pp-layers plans only the layouts whose pp x virtual stages has that
 * many stages, with that split of the layers (train_gpt's option).
 *
 * --ranks prints, for the one layout --fix leaves, every rank's counts as
 * train_gpt --report names them (with the runtime's even split, or
 * --pp-layers'). Exit status: 0, 2 bad input (one line). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "layout/layout.h"
#include "model/gpt.h"
#include "planner/plan.h"
#include "planner/plan_print.h"

typedef struct args {
    msr_plan_model_t m;
    int64_t global_batch, world;
    msr_plan_precision_t prec;
    const char *fix, *format, *cluster;
    int ranks, all, even_split, search;
    int64_t top, explain;
    double bucket_mb;
    int64_t zero_min_bytes;
    const char *pp_layers;
    int split[MSR_GPT_MAX_STAGES]; /* --pp-layers parsed: split_n entries */
    int split_n;
} args_t;

static void die(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "plan_gpt: error: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    exit(2);
}

static int64_t parse_int(const char *name, const char *v, int64_t lo, int64_t hi)
{
    char *end = NULL;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || x < lo || x > hi)
        die("--%s %s: not an integer in range", name, v);
    return x;
}

static int name_index(const char *const *names, int n, const char *v)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], v) == 0)
            return i;
    return -1;
}

static void parse_fix(const char *s, int *fx)
{
    char buf[512];
    if (strlen(s) >= sizeof buf)
        die("--fix %s%s: too long", s, "");
    strcpy(buf, s);
    for (char *kv = buf, *next; kv != NULL; kv = next) {
        next = strchr(kv, ',');
        if (next != NULL)
            *next++ = '\0';
        char *eq = strchr(kv, '=');
        if (eq == NULL)
            die("--fix: '%s' is not key=value%s", kv, "");
        *eq = '\0';
        const char *v = eq + 1;
        int k = name_index(msr_plan_fix_names, MSR_PLAN_FIX_N, kv);
        if (k < 0)
            die("--fix: unknown key '%s'%s (dp, tp, pp, sp, zero, recompute, micro_batch, "
                "schedule, virtual_stages, cp, ep)",
                kv, "");
        if (k == MSR_PLAN_FIX_SCHEDULE)
            fx[k] = name_index(msr_plan_schedule_names, 3, v);
        else if (k == MSR_PLAN_FIX_RECOMPUTE)
            fx[k] = name_index(msr_plan_recompute_names, 3, v);
        else
            fx[k] = (int)parse_int(kv, v, 0, 1 << 24);
        if (fx[k] < 0)
            die("--fix: %s=%s is not a valid value", kv, v);
    }
}

static void parse_args(int argc, char **argv, args_t *a, int *fx)
{
    const char *arch = "gpt", *prec = "fp32";
    int64_t ffn = 0, kv = 0;
    a->m = (msr_plan_model_t){MSR_PLAN_GPT, 0, 0, 0, 0, 0, 256, 0};
    a->global_batch = a->world = 0;
    const char *search = "exhaustive";
    a->fix = a->cluster = NULL;
    a->format = "table";
    a->ranks = a->all = a->even_split = 0;
    a->top = 10;
    a->explain = 0;
    a->bucket_mb = MSR_DP_BUCKET_BYTES / 1048576.0;
    a->zero_min_bytes = MSR_DP_ZERO_MIN_BYTES;
    a->pp_layers = NULL;
    a->split_n = 0;
    a->m.top_k = 2;
    a->m.moe_every = 1;
    a->m.capacity_factor = 1.25;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--ranks") == 0 || strcmp(o, "--all") == 0 ||
            strcmp(o, "--even-split") == 0) {
            *(o[2] == 'r' ? &a->ranks : o[2] == 'a' ? &a->all : &a->even_split) = 1;
            continue;
        }
        if (strcmp(o, "--help") == 0) {
            printf("usage: plan_gpt --layers L --channels C --heads H --seq T --vocab V "
                   "--global-batch B --world N [--arch gpt|llama --ffn F --kv-heads K] "
                   "[--precision fp32|bf16] [--cluster FILE] [--fix dp=..,tp=..,pp=..,sp=..,"
                   "zero=..,recompute=..,micro_batch=..,schedule=..,virtual_stages=..,cp=..,ep=..] "
                   "[--search exhaustive|fast] [--top N] [--all] [--explain N] [--even-split] "
                   "[--format table|kv] [--ranks] [--bucket-mb X] [--zero-min-bytes N] "
                   "[--pp-layers A,B,..] [--experts E --top-k K --moe-every N "
                   "--capacity-factor F]\n");
            exit(0);
        }
        if (strncmp(o, "--", 2) != 0 || i + 1 >= argc)
            die("'%s'%s: an option with a value expected (see --help)", o, "");
        const char *n = o + 2, *v = argv[++i];
        if (strcmp(n, "layers") == 0)
            a->m.layers = (int)parse_int(n, v, 1, 1 << 16);
        else if (strcmp(n, "channels") == 0)
            a->m.channels = (int)parse_int(n, v, 1, 1 << 20);
        else if (strcmp(n, "heads") == 0)
            a->m.heads = (int)parse_int(n, v, 1, 1 << 16);
        else if (strcmp(n, "seq") == 0)
            a->m.seq = (int)parse_int(n, v, 1, 1 << 24);
        else if (strcmp(n, "vocab") == 0)
            a->m.vocab = (int)parse_int(n, v, 1, 1 << 24);
        else if (strcmp(n, "global-batch") == 0)
            a->global_batch = parse_int(n, v, 1, 1 << 24);
        else if (strcmp(n, "world") == 0)
            a->world = parse_int(n, v, 1, 1 << 20);
        else if (strcmp(n, "ffn") == 0)
            ffn = parse_int(n, v, 1, 1 << 24);
        else if (strcmp(n, "kv-heads") == 0)
            kv = parse_int(n, v, 1, 1 << 16);
        else if (strcmp(n, "experts") == 0)
            a->m.experts = (int)parse_int(n, v, 0, 1 << 16);
        else if (strcmp(n, "top-k") == 0)
            a->m.top_k = (int)parse_int(n, v, 1, 1 << 16);
        else if (strcmp(n, "moe-every") == 0)
            a->m.moe_every = (int)parse_int(n, v, 1, 1 << 16);
        else if (strcmp(n, "capacity-factor") == 0) {
            char *end = NULL;
            a->m.capacity_factor = strtod(v, &end);
            if (end == v || *end != '\0' || !(a->m.capacity_factor > 0) ||
                a->m.capacity_factor > 1e6)
                die("--capacity-factor %s%s: not a number in (0, 1e6]", v, "");
        } else if (strcmp(n, "zero-min-bytes") == 0)
            a->zero_min_bytes = parse_int(n, v, 0, (int64_t)1 << 50);
        else if (strcmp(n, "bucket-mb") == 0) {
            char *end = NULL;
            a->bucket_mb = strtod(v, &end);
            if (end == v || *end != '\0' || !(a->bucket_mb >= 1e-6 && a->bucket_mb <= 1e6))
                die("--bucket-mb %s%s: not a number in [1e-6, 1e6]", v, "");
        } else if (strcmp(n, "arch") == 0)
            arch = v;
        else if (strcmp(n, "precision") == 0)
            prec = v;
        else if (strcmp(n, "fix") == 0)
            a->fix = v;
        else if (strcmp(n, "cluster") == 0)
            a->cluster = v;
        else if (strcmp(n, "search") == 0)
            search = v;
        else if (strcmp(n, "top") == 0)
            a->top = parse_int(n, v, 1, (int64_t)1 << 40);
        else if (strcmp(n, "explain") == 0)
            a->explain = parse_int(n, v, 1, (int64_t)1 << 40);
        else if (strcmp(n, "format") == 0)
            a->format = v;
        else if (strcmp(n, "pp-layers") == 0)
            a->pp_layers = v;
        else
            die("unknown option '%s'%s (see --help)", o, "");
    }
    if (a->m.layers == 0 || a->m.channels == 0 || a->m.heads == 0 || a->m.seq == 0 ||
        a->global_batch == 0 || a->world == 0)
        die("--layers, --channels, --heads, --seq, --global-batch and --world are needed%s%s", "",
            "");
    if (strcmp(arch, "gpt") == 0) {
        if (ffn != 0 || kv != 0)
            die("--ffn and --kv-heads are for --arch llama%s%s", "", "");
        a->m.arch = MSR_PLAN_GPT;
        a->m.kv_heads = a->m.heads;
        a->m.ffn = 4 * a->m.channels;
    } else if (strcmp(arch, "llama") == 0) {
        a->m.arch = MSR_PLAN_LLAMA;
        a->m.kv_heads = kv != 0 ? (int)kv : a->m.heads;
        a->m.ffn = ffn != 0 ? (int)ffn : 4 * a->m.channels;
    } else {
        die("--arch %s%s: not gpt or llama", arch, "");
    }
    if (strcmp(prec, "fp32") == 0)
        a->prec = MSR_PLAN_FP32;
    else if (strcmp(prec, "bf16") == 0)
        a->prec = MSR_PLAN_BF16;
    else
        die("--precision %s%s: not fp32 or bf16", prec, "");
    if (strcmp(a->format, "table") != 0 && strcmp(a->format, "kv") != 0)
        die("--format %s%s: not table or kv", a->format, "");
    if (strcmp(search, "exhaustive") == 0)
        a->search = MSR_PLAN_SEARCH_EXHAUSTIVE;
    else if (strcmp(search, "fast") == 0)
        a->search = MSR_PLAN_SEARCH_FAST;
    else
        die("--search %s%s: not exhaustive or fast", search, "");
    for (int k = 0; k < MSR_PLAN_FIX_N; k++)
        fx[k] = -1;
    if (a->fix != NULL)
        parse_fix(a->fix, fx);
    if (a->pp_layers != NULL) {
        /* the count is checked against each layout's pp x virtual stages */
        int n = 0;
        if (msr_layout_split_parse(a->pp_layers, a->split, MSR_GPT_MAX_STAGES, &n) != MSR_OK ||
            msr_layout_split_check(a->m.layers, n, a->split, n) != MSR_OK)
            die("--pp-layers %s: %s", a->pp_layers, msr_err_msg());
        a->split_n = n;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    args_t a;
    msr_plan_query_t q;
    parse_args(argc, argv, &a, q.fix);
    char why[1024] = "";
    if (msr_plan_check_model(&a.m, why, sizeof why) != 0) {
        fprintf(stderr, "plan_gpt: error: %s\n", why);
        return 2;
    }
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    if (a.cluster != NULL)
        if (msr_plan_cluster_read(a.cluster, &c, why, sizeof why) != 0) {
            fprintf(stderr, "plan_gpt: error: %s\n", why);
            return 2;
        }
    q.world = a.world;
    q.global_batch = a.global_batch;
    q.search = a.search;
    q.bucket_bytes = (size_t)(a.bucket_mb * 1048576.0);
    q.zero_min_bytes = (size_t)a.zero_min_bytes;
    /* --ranks compares with train_gpt --report, which splits evenly
     * unless told otherwise */
    q.even_split = a.even_split || a.ranks;
    q.split = a.split_n > 0 ? a.split : NULL;
    q.split_n = a.split_n;
    /* enough plans for the table and the one to explain */
    int64_t keep = a.all || a.ranks ? 0 : (a.explain > a.top ? a.explain : a.top);
    msr_plan_t *plans = NULL;
    msr_plan_pruned_t pr;
    double t0 = now_s();
    int64_t n = msr_plan_search(&a.m, a.prec, &c, &q, keep, &plans, &pr, why, sizeof why);
    double took = now_s() - t0;
    if (n < 0) {
        fprintf(stderr, "plan_gpt: error: %s\n", why);
        return 2;
    }
    if (n == 0) {
        if (pr.over_memory > 0)
            fprintf(stderr,
                    "plan_gpt: error: no layout of %" PRId64 " ranks fits in %g GiB per rank "
                    "(%" PRIu64 " over it); the first: %s\n",
                    a.world, c.mem_gib, pr.over_memory, pr.first_over);
        else
            fprintf(stderr, "plan_gpt: error: no valid layout of %" PRId64 " ranks%s%s\n", a.world,
                    pr.invalid > 0 ? "; the first refused: " : " (none matches --fix)",
                    pr.first_invalid);
        free(plans);
        return 2;
    }
    if (a.ranks && n != 1) {
        fprintf(stderr,
                "plan_gpt: error: --ranks needs --fix to leave one layout, not %" PRId64 "\n", n);
        free(plans);
        return 2;
    }
    if (a.explain > n) {
        fprintf(stderr, "plan_gpt: error: --explain %" PRId64 ": only %" PRId64 " plans found\n",
                a.explain, n);
        free(plans);
        return 2;
    }
    int kv = strcmp(a.format, "kv") == 0;
    int64_t shown = a.all || a.ranks || a.top > n ? n : a.top;
    printf(kv ? "model params=%" PRIu64 "\n" : "model: %" PRIu64 " parameters\n",
           msr_plan_num_params(&a.m));
    if (kv)
        msr_plan_print_kv(stdout, plans, shown);
    else
        msr_plan_print_table(stdout, plans, shown);
    msr_plan_print_summary(stdout, &q, &c, &pr, shown, kv);
    if (!kv)
        printf("searched in %.3f s\n", took);
    if (a.explain > 0) {
        printf("\n");
        msr_plan_print_explain(stdout, &a.m, a.prec, &c, plans, n, a.explain);
    }
    if (a.ranks) {
        for (int r = 0; r < (int)a.world; r++) {
            msr_plan_rank_t o;
            msr_plan_rank(&a.m, &plans[0].l, a.prec, r, &o);
            printf("rank %d params %" PRIu64 " grads %" PRIu64 " optim %" PRIu64 " shard %" PRIu64
                   " replicated %" PRIu64 " buckets %" PRIu64 " work %" PRIu64 " acts_peak %" PRIu64
                   " frame %" PRIu64 " frame_head %" PRIu64 " transient_bound %" PRIu64,
                   r, o.params, o.grads, o.optim, o.shard_elems, o.replicated_elems, o.buckets,
                   o.work, o.activations, o.frame_bytes[0], o.frame_bytes[1], o.buckets_bound);
            if (a.m.experts > 0)
                printf(" experts %d expert_params %" PRIu64 " expert_grads %" PRIu64
                       " expert_optim %" PRIu64 " moe_work %" PRIu64,
                       o.experts_held, o.expert_params, o.expert_grads, o.expert_optim, o.moe_work);
            printf("\n");
        }
    }
    free(plans);
    return 0;
}
