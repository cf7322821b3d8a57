/* plan_gpt: the layouts of a model on a world of N ranks, ranked by
 * predicted step time (planner/plan.h): every valid one within the
 * cluster's memory per rank, best first, with its memory and time.
 *
 *   plan_gpt --model NAME | --model list  (a published shape: gpt2-124m,
 *            llama3-8b, ...; the shape options below override its fields)
 *   plan_gpt --layers 4 --channels 32 --heads 4 --seq 16 --vocab 256
 *            --global-batch 8 --world 4 [--arch gpt|llama --ffn F
 *            --kv-heads K] [--precision fp32|bf16|bf16-runtime] [--cluster FILE]
 *            [--fix dp=2,tp=2,cp=2,...] [--search exhaustive|fast] [--top N]
 *            [--all] [--explain N] [--even-split] [--format table|kv]
 *            [--ranks] [--pp-layers 3,5,5,3] [--experts E --top-k K
 *            --moe-every N --capacity-factor F] [--offload
 *            optimizer,activations,params,grads|auto --offload-chunk BYTES]
 *            [--head-chunk ROWS|auto]
 *
 * --experts plans a Mixture-of-Experts model (train_gpt's options, the
 * same defaults: top-k 2, every block, capacity factor 1.25), and the
 * layouts then include expert parallel (ep, a divisor of dp).
 *
 * --offload plans with train_gpt's offloads (its list; a directory given
 * is not used): the optimizer's moments, full recompute's block inputs
 * (only layouts of full recompute then), the blocks' parameters or ZeRO
 * 2-3's gradient shard (beside the moments, data parallel alone) on disk,
 * counting what stays resident; --offload-chunk the optimizer's chunk
 * bytes. --offload auto turns to them, in that order, only when nothing
 * fits without, and says which (the bytes saved, the bytes moved a step).
 *
 * --head-chunk plans with train_gpt's chunked head: the head's logits
 * ROWS vocabulary rows at a time (0, the default: the whole head), on the
 * model-parallel runtime, which it puts every layout on. --head-chunk auto
 * turns to chunks of 1,024 rows as train_gpt --auto does: only when
 * layouts are over the budget, before any offload of --offload auto, and
 * says why (the bytes saved, the flops added a step).
 *
 * --pp-layers plans only the layouts whose pp x virtual stages has that
 * many stages, with that split of the layers (train_gpt's option).
 *
 * --ranks prints, for the one layout --fix leaves, every rank's counts as
 * train_gpt --report names them (with the runtime's even split, or
 * --pp-layers'). Exit status: 0, 2 bad input (one line). The options are
 * base/optparse's: --name=VALUE as well as --name VALUE. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/optparse.h"
#include "base/status.h"
#include "base/util.h"
#include "layout/layout.h"
#include "model/gpt.h"
#include "planner/plan.h"
#include "planner/plan_print.h"

typedef struct args {
    msr_plan_model_t m;
    int64_t global_batch, world;
    msr_plan_precision_t prec;
    const char *arch, *precision, *search_name; /* as given, checked by check_args */
    int64_t ffn, kv_heads;                      /* --arch llama's; 0: not given */
    const char *fix, *format, *cluster;
    int ranks, all, even_split, search;
    int64_t top, explain;
    double bucket_mb;
    int64_t zero_min_bytes;
    const char *pp_layers;
    const char *offload; /* --offload's list, read into offload_bits */
    int64_t offload_chunk;
    const char *head_chunk_text; /* --head-chunk ROWS|auto */
    int head_chunk;              /* ROWS: train_gpt's, every layout's */
    int head_auto;               /* --head-chunk auto */
    int offload_bits;
    int offload_auto;              /* --offload auto */
    const char *model;             /* --model: a preset's name, or "list" */
    int split[MSR_GPT_MAX_STAGES]; /* --pp-layers parsed: split_n entries */
    int split_n;
} args_t;

#define D(field) MSR_OPT_DEST(args_t, field)
/* clang-format off */
#define INT(n, field, lo, hi, mv, fl) \
    {.name = n, .kind = MSR_OPT_INT, .min = lo, .max = hi, .dest = D(field), .metavar = mv, \
     .flags = fl}
#define TEXT(n, field, mv) {.name = n, .kind = MSR_OPT_TEXT, .dest = D(field), .metavar = mv}
#define FLAG(n, field) \
    {.name = n, .kind = MSR_OPT_BOOL, .flags = MSR_OPT_NO_VALUE, .dest = D(field)}

/* The options, in the usage line's order: the model's and the world's bare,
 * options used together in one pair of brackets (MSR_OPT_USAGE_JOIN). */
static const msr_opt_t opts[] = {
    TEXT("model", model, "NAME|list"),
    INT("layers", m.layers, 1, 1 << 16, "L", MSR_OPT_USAGE_BARE),
    INT("channels", m.channels, 1, 1 << 20, "C", MSR_OPT_USAGE_BARE),
    INT("heads", m.heads, 1, 1 << 16, "H", MSR_OPT_USAGE_BARE),
    INT("seq", m.seq, 1, 1 << 24, "T", MSR_OPT_USAGE_BARE),
    INT("vocab", m.vocab, 1, 1 << 24, "V", MSR_OPT_USAGE_BARE),
    INT("global-batch", global_batch, 1, 1 << 24, "B", MSR_OPT_USAGE_BARE),
    INT("world", world, 1, 1 << 20, "N", MSR_OPT_USAGE_BARE),
    TEXT("arch", arch, "gpt|llama"),
    INT("ffn", ffn, 1, 1 << 24, "F", MSR_OPT_USAGE_JOIN),
    INT("kv-heads", kv_heads, 1, 1 << 16, "K", MSR_OPT_USAGE_JOIN),
    TEXT("precision", precision, "fp32|bf16|bf16-runtime"),
    TEXT("cluster", cluster, "FILE"),
    TEXT("fix", fix, "dp=..,tp=..,pp=..,sp=..,zero=..,recompute=..,micro_batch=..,schedule=..,"
                     "virtual_stages=..,cp=..,ep=.."),
    TEXT("search", search_name, "exhaustive|fast"),
    INT("top", top, 1, (int64_t)1 << 40, "N", 0),
    FLAG("all", all),
    INT("explain", explain, 1, (int64_t)1 << 40, "N", 0),
    FLAG("even-split", even_split),
    TEXT("format", format, "table|kv"),
    FLAG("ranks", ranks),
    {.name = "bucket-mb", .kind = MSR_OPT_REAL, .real_min = 1e-6, .real_max = 1e6,
     .dest = D(bucket_mb), .metavar = "X"},
    INT("zero-min-bytes", zero_min_bytes, 0, (int64_t)1 << 50, "N", 0),
    TEXT("pp-layers", pp_layers, "A,B,.."),
    TEXT("offload", offload, "optimizer,activations,params,grads|auto"),
    INT("offload-chunk", offload_chunk, MSR_PLAN_OFFLOAD_ALIGN, MSR_PLAN_OFFLOAD_CHUNK_MAX, "BYTES", 0),
    TEXT("head-chunk", head_chunk_text, "ROWS|auto"),
    INT("experts", m.experts, 0, 1 << 16, "E", 0),
    INT("top-k", m.top_k, 1, 1 << 16, "K", MSR_OPT_USAGE_JOIN),
    INT("moe-every", m.moe_every, 1, 1 << 16, "N", MSR_OPT_USAGE_JOIN),
    {.name = "capacity-factor", .kind = MSR_OPT_REAL, .real_min = 0, .real_max = 1e6,
     .flags = MSR_OPT_MIN_OPEN | MSR_OPT_USAGE_JOIN, .dest = D(m.capacity_factor), .metavar = "F"},
};
/* clang-format on */

static const msr_optset_t opt_set = {"plan_gpt", opts, MSR_ARRAY_SIZE(opts), 0,
                                     MSR_OPTS_USAGE_LINE};

static int name_index(const char *const *names, int n, const char *v)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], v) == 0)
            return i;
    return -1;
}

/* --fix's "key=value,...": fx[key] = value. */
static msr_status_t parse_fix(const char *s, int *fx)
{
    char buf[512];
    if (strlen(s) >= sizeof buf)
        return msr_err(MSR_ERR_INVALID_ARG, "--fix %s: too long", s);
    strcpy(buf, s);
    for (char *kv = buf, *next; kv != NULL; kv = next) {
        next = strchr(kv, ',');
        if (next != NULL)
            *next++ = '\0';
        char *eq = strchr(kv, '=');
        if (eq == NULL)
            return msr_err(MSR_ERR_INVALID_ARG, "--fix: '%s' is not key=value", kv);
        *eq = '\0';
        const char *v = eq + 1;
        int k = name_index(msr_plan_fix_names, MSR_PLAN_FIX_N, kv);
        if (k < 0)
            return msr_err(MSR_ERR_INVALID_ARG,
                           "--fix: unknown key '%s' (dp, tp, pp, sp, zero, recompute, "
                           "micro_batch, schedule, virtual_stages, cp, ep)",
                           kv);
        int64_t x = -1;
        if (k == MSR_PLAN_FIX_SCHEDULE)
            x = name_index(msr_plan_schedule_names, 3, v);
        else if (k == MSR_PLAN_FIX_RECOMPUTE)
            x = name_index(msr_plan_recompute_names, 3, v);
        else if (msr_parse_i64(v, 0, 1 << 24, &x) != MSR_OK)
            return msr_err(MSR_ERR_INVALID_ARG, "--%s %s: not an integer in range", kv, v);
        if (x < 0)
            return msr_err(MSR_ERR_INVALID_ARG, "--fix: %s=%s is not a valid value", kv, v);
        fx[k] = (int)x;
    }
    return MSR_OK;
}

/* Whether option name (without dashes) was given, by msr_opts_parse's seen. */
static int given(const unsigned char *seen, const char *name)
{
    for (size_t i = 0; i < MSR_ARRAY_SIZE(opts); i++)
        if (strcmp(opts[i].name, name) == 0)
            return seen[i];
    return 0;
}

/* --model list: every preset's shape and parameter count. */
static void print_presets(void)
{
    const char *name;
    for (size_t i = 0; (name = msr_plan_preset_name(i)) != NULL; i++) {
        msr_plan_model_t m;
        uint64_t params = 0;
        msr_plan_preset(name, &m, &params);
        printf("%-11s %-5s layers %-3d channels %-5d heads %-3d kv-heads %-3d ffn %-6d vocab "
               "%-6d seq %-5d %" PRIu64 " parameters\n",
               name, m.arch == MSR_PLAN_LLAMA ? "llama" : "gpt", m.layers, m.channels, m.heads,
               m.kv_heads, m.ffn, m.vocab, m.seq, params);
    }
}

/* --model NAME: the preset's shape where no shape option was given. */
static msr_status_t apply_preset(args_t *a, const unsigned char *seen)
{
    msr_plan_model_t p;
    if (msr_plan_preset(a->model, &p, NULL) != 0) {
        char list[256] = "";
        const char *name;
        for (size_t i = 0, at = 0; (name = msr_plan_preset_name(i)) != NULL; i++)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", name);
        return msr_err(MSR_ERR_INVALID_ARG,
                       "--model %s: not a preset (%s; --model list shows them)", a->model, list);
    }
    const char *arch = p.arch == MSR_PLAN_LLAMA ? "llama" : "gpt";
    if (given(seen, "arch") && strcmp(a->arch, arch) != 0)
        return msr_err(MSR_ERR_INVALID_ARG, "--arch %s: --model %s is --arch %s", a->arch, a->model,
                       arch);
    a->arch = arch;
    if (!given(seen, "layers"))
        a->m.layers = p.layers;
    if (!given(seen, "channels"))
        a->m.channels = p.channels;
    if (!given(seen, "heads"))
        a->m.heads = p.heads;
    if (!given(seen, "seq"))
        a->m.seq = p.seq;
    if (!given(seen, "vocab"))
        a->m.vocab = p.vocab;
    if (p.arch == MSR_PLAN_LLAMA && !given(seen, "ffn"))
        a->ffn = p.ffn;
    if (p.arch == MSR_PLAN_LLAMA && !given(seen, "kv-heads"))
        a->kv_heads = p.kv_heads;
    return MSR_OK;
}

/* The model's architecture and the precision, from their names. */
static msr_status_t check_names(args_t *a)
{
    if (strcmp(a->arch, "gpt") == 0) {
        if (a->ffn != 0 || a->kv_heads != 0)
            return msr_err(MSR_ERR_INVALID_ARG, "--ffn and --kv-heads are for --arch llama");
        a->m.arch = MSR_PLAN_GPT;
        a->m.kv_heads = a->m.heads;
        a->m.ffn = 4 * a->m.channels;
    } else if (strcmp(a->arch, "llama") == 0) {
        a->m.arch = MSR_PLAN_LLAMA;
        a->m.kv_heads = a->kv_heads != 0 ? (int)a->kv_heads : a->m.heads;
        a->m.ffn = a->ffn != 0 ? (int)a->ffn : 4 * a->m.channels;
    } else {
        return msr_err(MSR_ERR_INVALID_ARG, "--arch %s: not gpt or llama", a->arch);
    }
    if (strcmp(a->precision, "fp32") == 0)
        a->prec = MSR_PLAN_FP32;
    else if (strcmp(a->precision, "bf16") == 0)
        a->prec = MSR_PLAN_BF16;
    else if (strcmp(a->precision, "bf16-runtime") == 0)
        a->prec = MSR_PLAN_BF16_RUNTIME;
    else
        return msr_err(MSR_ERR_INVALID_ARG, "--precision %s: not fp32, bf16 or bf16-runtime",
                       a->precision);
    if (strcmp(a->format, "table") != 0 && strcmp(a->format, "kv") != 0)
        return msr_err(MSR_ERR_INVALID_ARG, "--format %s: not table or kv", a->format);
    if (strcmp(a->search_name, "exhaustive") == 0)
        a->search = MSR_PLAN_SEARCH_EXHAUSTIVE;
    else if (strcmp(a->search_name, "fast") == 0)
        a->search = MSR_PLAN_SEARCH_FAST;
    else
        return msr_err(MSR_ERR_INVALID_ARG, "--search %s: not exhaustive or fast", a->search_name);
    return MSR_OK;
}

/* --offload's list and --offload-chunk (train_gpt's rules). */
static msr_status_t check_offload(args_t *a)
{
    char why[512];
    a->offload_auto = a->offload != NULL && strcmp(a->offload, "auto") == 0;
    if (a->offload != NULL && !a->offload_auto &&
        msr_plan_offload_parse(a->offload, &a->offload_bits, why, sizeof why) != 0)
        return msr_err(MSR_ERR_INVALID_ARG, "%s", why);
    if (a->offload_chunk != 0 && !(a->offload_bits & MSR_PLAN_OFFLOAD_OPTIM) && !a->offload_auto)
        return msr_err(MSR_ERR_INVALID_ARG, "--offload-chunk needs --offload optimizer");
    if (a->offload_chunk % MSR_PLAN_OFFLOAD_ALIGN != 0)
        return msr_err(MSR_ERR_INVALID_ARG, "--offload-chunk %" PRId64 ": not a multiple of %u",
                       a->offload_chunk, MSR_PLAN_OFFLOAD_ALIGN);
    /* --head-chunk: train_gpt's bounds, or auto */
    int64_t rows = 0;
    a->head_auto = a->head_chunk_text != NULL && strcmp(a->head_chunk_text, "auto") == 0;
    if (a->head_chunk_text != NULL && !a->head_auto &&
        msr_parse_i64(a->head_chunk_text, 0, 1 << 30, &rows) != MSR_OK)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "--head-chunk %s: not an integer in [0, 1073741824] nor auto",
                       a->head_chunk_text);
    a->head_chunk = (int)rows;
    return MSR_OK;
}

/* What the options say together, once all are known: the options needed,
 * the names, --fix into fx and --pp-layers into a->split. */
static msr_status_t check_args(args_t *a, int *fx)
{
    if (a->m.layers == 0 || a->m.channels == 0 || a->m.heads == 0 || a->m.seq == 0 ||
        a->global_batch == 0 || a->world == 0)
        return msr_err(MSR_ERR_INVALID_ARG, "--layers, --channels, --heads, --seq (or --model "
                                            "NAME), --global-batch and --world are needed");
    msr_status_t st = check_names(a);
    for (int k = 0; k < MSR_PLAN_FIX_N; k++)
        fx[k] = -1;
    if (st == MSR_OK && a->fix != NULL)
        st = parse_fix(a->fix, fx);
    if (st == MSR_OK && (st = check_offload(a)) != MSR_OK)
        return st;
    if (st != MSR_OK || a->pp_layers == NULL)
        return st;
    /* the count is checked against each layout's pp x virtual stages */
    int n = 0;
    if (msr_layout_split_parse(a->pp_layers, a->split, MSR_GPT_MAX_STAGES, &n) != MSR_OK ||
        msr_layout_split_check(a->m.layers, n, a->split, n) != MSR_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", msr_err_msg());
        return msr_err(MSR_ERR_INVALID_ARG, "--pp-layers %s: %s", a->pp_layers, why);
    }
    a->split_n = n;
    return MSR_OK;
}

/* Parses argv into a and fx. Returns -1 to go on, else the exit status:
 * 0 after --help (the usage printed), 2 after bad input (its line printed). */
static int parse_args(int argc, char **argv, args_t *a, int *fx)
{
    *a = (args_t){
        .m = {.arch = MSR_PLAN_GPT,
              .vocab = 256,
              .top_k = 2,
              .moe_every = 1,
              .capacity_factor = 1.25},
        .arch = "gpt",
        .precision = "fp32",
        .search_name = "exhaustive",
        .format = "table",
        .top = 10,
        .bucket_mb = MSR_DP_BUCKET_BYTES / 1048576.0,
        .zero_min_bytes = MSR_DP_ZERO_MIN_BYTES,
    };
    unsigned char seen[MSR_ARRAY_SIZE(opts)];
    int next;
    switch (msr_opts_parse(&opt_set, argc - 1, argv + 1, a, seen, &next)) {
    case MSR_OPTS_OK:
        break;
    case MSR_OPTS_HELP:
        msr_opts_usage(&opt_set, stdout);
        return 0;
    case MSR_OPTS_VERSION: /* only a command with positional arguments knows --version */
    case MSR_OPTS_BAD:
        msr_opts_print_error(&opt_set);
        return 2;
    }
    if (a->model != NULL && strcmp(a->model, "list") == 0) {
        print_presets();
        return 0;
    }
    if ((a->model != NULL && apply_preset(a, seen) != MSR_OK) || check_args(a, fx) != MSR_OK) {
        fprintf(stderr, "plan_gpt: error: %s\n", msr_err_msg());
        return 2;
    }
    return -1;
}

/* What the default cluster is (planner/plan.h msr_plan_cluster_default). */
#define DEFAULT_ORIGIN                                                                      \
    "the default: DGX A100 80 GB nodes in bf16, Narayanan et al. 2021; --cluster FILE for " \
    "another"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Why the search found no layout to show, or none --ranks or --explain
 * can use. Returns 0 when n plans will do, else 2 with the reason printed. */
static int check_found(const args_t *a, const msr_plan_cluster_t *c, const msr_plan_pruned_t *pr,
                       int64_t n)
{
    if (n == 0) {
        if (pr->over_memory > 0)
            fprintf(stderr,
                    "plan_gpt: error: no layout of %" PRId64 " ranks fits in %g GiB per rank "
                    "(%" PRIu64 " over it%s%s); the first: %s\n",
                    a->world, c->mem_gib, pr->over_memory,
                    a->head_auto ? ", nor with a chunked head" : "",
                    a->offload_auto ? ", nor with any offload" : "", pr->first_over);
        else
            fprintf(stderr, "plan_gpt: error: no valid layout of %" PRId64 " ranks%s%s\n", a->world,
                    pr->invalid > 0 ? "; the first refused: " : " (none matches --fix)",
                    pr->first_invalid);
        return 2;
    }
    if (a->ranks && n != 1) {
        fprintf(stderr,
                "plan_gpt: error: --ranks needs --fix to leave one layout, not %" PRId64 "\n", n);
        return 2;
    }
    if (a->explain > n) {
        fprintf(stderr, "plan_gpt: error: --explain %" PRId64 ": only %" PRId64 " plans found\n",
                a->explain, n);
        return 2;
    }
    return 0;
}

/* --ranks: every rank's counts of the one layout, as train_gpt --report
 * names them. */
static void print_ranks(const args_t *a, const msr_plan_t *plan)
{
    for (int r = 0; r < (int)a->world; r++) {
        msr_plan_rank_t o;
        msr_plan_rank(&a->m, &plan->l, a->prec, r, &o);
        printf("rank %d params %" PRIu64 " grads %" PRIu64 " optim %" PRIu64 " shard %" PRIu64
               " replicated %" PRIu64 " buckets %" PRIu64 " work %" PRIu64 " acts_peak %" PRIu64
               " frame %" PRIu64 " frame_head %" PRIu64 " transient_bound %" PRIu64,
               r, o.params, o.grads, o.optim, o.shard_elems, o.replicated_elems, o.buckets, o.work,
               o.activations, o.frame_bytes[0], o.frame_bytes[1], o.buckets_bound);
        if (a->m.experts > 0)
            printf(" experts %d expert_params %" PRIu64 " expert_grads %" PRIu64
                   " expert_optim %" PRIu64 " moe_work %" PRIu64,
                   o.experts_held, o.expert_params, o.expert_grads, o.expert_optim, o.moe_work);
        if (a->prec == MSR_PLAN_BF16_RUNTIME)
            printf(" bf16_scratch %" PRIu64, o.bf16_scratch);
        printf("\n");
    }
}

/* --offload auto: the mode the plans have and why. */
static void print_offload(const args_t *a, const msr_plan_cluster_t *c, const msr_plan_t *p,
                          const msr_plan_pruned_t *pr, int kv)
{
    char mode[64];
    msr_plan_offload_name(p->l.offload, mode, sizeof mode);
    uint64_t saved = 0, io = 0;
    if (p->l.offload != 0)
        msr_plan_offload_cost(&a->m, a->prec, p, &saved, &io);
    char why[256];
    msr_plan_fit_why(p, pr, c, MSR_PLAN_FIT_OFFLOAD, why, sizeof why);
    if (kv)
        printf("offload mode=%s saved_bytes=%" PRIu64 " io_bytes_per_step=%" PRIu64
               " io_ms=%.6g io_exposed_ms=%.6g\n",
               mode, saved, io, p->t.offload_io_ms, p->t.offload_ms);
    else if (p->l.offload == 0)
        printf("offload: none: %s\n", why);
    else
        printf("offload: %s: %s; plan 1 holds %" PRIu64 " bytes less on its fullest rank and moves "
               "%" PRIu64 " bytes to and from disk per step: %.4g ms at %.4g GB/s read, %.4g GB/s "
               "write, %.4g ms of it in step_ms (what compute does not hide)\n",
               mode, why, saved, io, p->t.offload_io_ms, c->disk_read_gbs, c->disk_write_gbs,
               p->t.offload_ms);
}

/* --head-chunk auto: plan 1's head, why, and what a chunked one saves
 * and adds. */
static void print_head(const args_t *a, const msr_plan_cluster_t *c, const msr_plan_t *p,
                       const msr_plan_pruned_t *pr, int kv)
{
    uint64_t saved = 0;
    double flops = 0;
    msr_plan_head_cost(&a->m, a->prec, p, &saved, &flops);
    char why[256];
    msr_plan_fit_why(p, pr, c, MSR_PLAN_FIT_HEAD, why, sizeof why);
    if (kv)
        printf("head chunk_rows=%d saved_bytes=%" PRIu64 " added_flops_per_step=%.6g\n",
               p->l.head_chunk, saved, flops);
    else if (p->l.head_chunk == 0)
        printf("head: whole: %s\n", why);
    else
        printf("head: chunks of %d vocabulary rows: %s; plan 1 holds %" PRIu64
               " bytes less on its fullest rank and computes the head's logits again in "
               "backward, %.4g GFLOP a step per rank\n",
               p->l.head_chunk, why, saved, flops / 1e9);
}

int main(int argc, char **argv)
{
    args_t a;
    msr_plan_query_t q;
    memset(&q, 0, sizeof q); /* a field plan_gpt has no option for is off */
    int rc = parse_args(argc, argv, &a, q.fix);
    if (rc >= 0)
        return rc;
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
    q.offload = a.offload_bits;
    q.offload_chunk = (size_t)a.offload_chunk;
    q.head_chunk = a.head_chunk;
    /* enough plans for the table and the one to explain */
    int64_t keep = a.all || a.ranks ? 0 : (a.explain > a.top ? a.explain : a.top);
    msr_plan_t *plans = NULL;
    msr_plan_pruned_t pr;
    double t0 = now_s();
    int fit = (a.head_auto ? MSR_PLAN_FIT_HEAD : 0) | (a.offload_auto ? MSR_PLAN_FIT_OFFLOAD : 0);
    int64_t n = msr_plan_search_fit(&a.m, a.prec, &c, &q, fit, keep, &plans, &pr, why, sizeof why);
    double took = now_s() - t0;
    if (n < 0) {
        fprintf(stderr, "plan_gpt: error: %s\n", why);
        return 2;
    }
    if ((rc = check_found(&a, &c, &pr, n)) != 0) {
        free(plans);
        return rc;
    }
    int kv = strcmp(a.format, "kv") == 0;
    int64_t shown = a.all || a.ranks || a.top > n ? n : a.top;
    /* kv's first line stays the model's (scripts read it) */
    const char *origin = a.cluster != NULL ? a.cluster : DEFAULT_ORIGIN;
    if (!kv)
        msr_plan_print_cluster(stdout, &c, a.world, origin, 0);
    printf(kv ? "model params=%" PRIu64 "\n" : "model: %" PRIu64 " parameters\n",
           msr_plan_num_params(&a.m));
    if (kv)
        msr_plan_print_cluster(stdout, &c, a.world, a.cluster != NULL ? a.cluster : "default", 1);
    if (kv)
        msr_plan_print_kv(stdout, plans, shown);
    else
        msr_plan_print_table(stdout, plans, shown);
    msr_plan_print_summary(stdout, &q, &c, &pr, shown, kv);
    if (a.head_auto)
        print_head(&a, &c, &plans[0], &pr, kv);
    if (a.offload_auto)
        print_offload(&a, &c, &plans[0], &pr, kv);
    if (!kv)
        printf("searched in %.3f s\n", took);
    if (a.explain > 0) {
        printf("\n");
        msr_plan_print_explain(stdout, &a.m, a.prec, &c, plans, n, a.explain);
    }
    if (a.ranks)
        print_ranks(&a, &plans[0]);
    free(plans);
    return 0;
}
