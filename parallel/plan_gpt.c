/* plan_gpt: the memory per rank of every valid layout of a model on a
 * world of N ranks (parallel/plan.h), least peak memory first. The time
 * model and the search ranking by step time are not built yet: the order
 * is by memory only, and no step time is printed.
 *
 *   plan_gpt --layers 4 --channels 32 --heads 4 --seq 16 --vocab 256
 *            --global-batch 8 --world 4 [--arch gpt|llama --ffn F
 *            --kv-heads K] [--precision fp32|bf16] [--fix dp=2,tp=2,...]
 *            [--format table|kv] [--ranks]
 *
 * --ranks prints, for the one layout --fix leaves, every rank's counts as
 * train_gpt --report names them. Exit status: 0, 2 bad input (one line). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/plan.h"

typedef struct args {
    msr_plan_model_t m;
    int64_t global_batch, world;
    msr_plan_precision_t prec;
    const char *fix, *format;
    int ranks;
    double bucket_mb;
    int64_t zero_min_bytes;
} args_t;

/* --fix: a value per key, -1 where free. */
enum { FX_DP, FX_TP, FX_PP, FX_SP, FX_ZERO, FX_RC, FX_MB, FX_SCHED, FX_VS, FX_N };
static const char *const fix_names[FX_N] = {
    "dp", "tp", "pp", "sp", "zero", "recompute", "micro_batch", "schedule", "virtual_stages"};
static const char *const sched_names[] = {"gpipe", "1f1b", "interleaved"};
static const char *const rc_names[] = {"none", "selective", "full"};

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
        int k = name_index(fix_names, FX_N, kv);
        if (k < 0)
            die("--fix: unknown key '%s'%s (dp, tp, pp, sp, zero, recompute, micro_batch, "
                "schedule, virtual_stages)",
                kv, "");
        if (k == FX_SCHED)
            fx[k] = name_index(sched_names, 3, v);
        else if (k == FX_RC)
            fx[k] = name_index(rc_names, 3, v);
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
    a->fix = NULL;
    a->format = "table";
    a->ranks = 0;
    a->bucket_mb = 25.0;
    a->zero_min_bytes = 65536;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--ranks") == 0) {
            a->ranks = 1;
            continue;
        }
        if (strcmp(o, "--help") == 0) {
            printf("usage: plan_gpt --layers L --channels C --heads H --seq T --vocab V "
                   "--global-batch B --world N [--arch gpt|llama --ffn F --kv-heads K] "
                   "[--precision fp32|bf16] [--fix dp=..,tp=..,pp=..,sp=..,zero=..,recompute=..,"
                   "micro_batch=..,schedule=..,virtual_stages=..] [--format table|kv] [--ranks] "
                   "[--bucket-mb X] [--zero-min-bytes N]\n");
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
        else if (strcmp(n, "zero-min-bytes") == 0)
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
        else if (strcmp(n, "format") == 0)
            a->format = v;
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
    for (int k = 0; k < FX_N; k++)
        fx[k] = -1;
    if (a->fix != NULL)
        parse_fix(a->fix, fx);
}

typedef struct plan {
    msr_plan_layout_t l;
    uint64_t peak;
    msr_plan_rank_t at; /* the rank that holds the most */
} plan_t;

static int by_peak(const void *x, const void *y)
{
    const plan_t *a = x, *b = y;
    return a->peak < b->peak ? -1 : a->peak > b->peak;
}

static int ok(int fx, int v)
{
    return fx < 0 || fx == v;
}

int main(int argc, char **argv)
{
    args_t a;
    int fx[FX_N];
    parse_args(argc, argv, &a, fx);
    char why[256] = "", first[256] = "";
    if (msr_plan_check_model(&a.m, why, sizeof why) != 0) {
        fprintf(stderr, "plan_gpt: error: %s\n", why);
        return 2;
    }
    size_t n = 0, cap = 0;
    plan_t *plans = NULL;
    int W = (int)a.world;
    for (int dp = 1; dp <= W; dp++) {
        if (W % dp != 0 || !ok(fx[FX_DP], dp) || a.global_batch % dp != 0)
            continue;
        for (int pp = 1; pp <= W / dp; pp++) {
            if ((W / dp) % pp != 0 || !ok(fx[FX_PP], pp))
                continue;
            int tp = W / dp / pp;
            if (!ok(fx[FX_TP], tp))
                continue;
            int per = (int)(a.global_batch / dp);
            for (int mb = 1; mb <= per; mb++) {
                if (per % mb != 0 || !ok(fx[FX_MB], mb))
                    continue;
                for (int sched = 0; sched < 3; sched++) {
                    if (!ok(fx[FX_SCHED], sched) || (pp == 1 && sched != MSR_PLAN_1F1B))
                        continue;
                    for (int vs = 1; vs <= (sched == MSR_PLAN_INTERLEAVED ? 8 : 1); vs *= 2) {
                        if (!ok(fx[FX_VS], vs) || (sched == MSR_PLAN_INTERLEAVED && vs < 2))
                            continue;
                        for (int sp = 0; sp <= 1; sp++)
                            for (int zero = 0; zero <= 3; zero++)
                                for (int rc = 0; rc < 3; rc++) {
                                    if (!ok(fx[FX_SP], sp) || !ok(fx[FX_ZERO], zero) ||
                                        !ok(fx[FX_RC], rc))
                                        continue;
                                    msr_plan_layout_t l = {dp,       tp,    pp, sp, zero, rc, mb,
                                                           per / mb, sched, vs, 0,  0,    0};
                                    l.bucket_bytes = (size_t)(a.bucket_mb * 1048576.0);
                                    l.zero_min_bytes = (size_t)a.zero_min_bytes;
                                    if (msr_plan_check(&a.m, &l, why, sizeof why) != 0) {
                                        if (first[0] == '\0')
                                            snprintf(first, sizeof first, "%s", why);
                                        continue;
                                    }
                                    if (n == cap) {
                                        cap = cap ? 2 * cap : 256;
                                        plan_t *p = realloc(plans, cap * sizeof *p);
                                        if (p == NULL)
                                            die("out of memory for %s%s plans", "the", "");
                                        plans = p;
                                    }
                                    plan_t *p = &plans[n++];
                                    p->l = l;
                                    int r = 0;
                                    p->peak = msr_plan_peak(&a.m, &l, a.prec, &r);
                                    msr_plan_rank(&a.m, &l, a.prec, r, &p->at);
                                }
                    }
                }
            }
        }
    }
    if (n == 0) {
        fprintf(stderr, "plan_gpt: error: no valid layout of %d ranks%s%s\n", W,
                first[0] != '\0' ? "; the first refused: " : " (none matches --fix)", first);
        free(plans);
        return 2;
    }
    if (a.ranks && n != 1) {
        fprintf(stderr, "plan_gpt: error: --ranks needs --fix to leave one layout, not %zu\n", n);
        free(plans);
        return 2;
    }
    qsort(plans, n, sizeof *plans, by_peak);
    int kv = strcmp(a.format, "kv") == 0;
    printf(kv ? "model params=%" PRIu64 "\n" : "model: %" PRIu64 " parameters\n",
           msr_plan_num_params(&a.m));
    if (!kv)
        printf("%4s %4s %4s %2s %4s %-9s %5s %5s %-11s %12s %14s %14s %14s\n", "dp", "tp", "pp",
               "sp", "zero", "recompute", "micro", "accum", "schedule", "params", "state_bytes",
               "activ_bytes", "peak_bytes");
    for (size_t i = 0; i < n; i++) {
        const plan_t *p = &plans[i];
        const msr_plan_layout_t *l = &p->l;
        uint64_t state = p->at.params + p->at.grads + p->at.optim + p->at.master;
        char sched[32];
        if (l->chunks > 1)
            snprintf(sched, sizeof sched, "%s/%d", sched_names[l->schedule], l->chunks);
        else
            snprintf(sched, sizeof sched, "%s", sched_names[l->schedule]);
        if (kv)
            printf("plan dp=%d tp=%d pp=%d sp=%d zero=%d recompute=%s micro_batch=%d "
                   "grad_accum=%d schedule=%s virtual_stages=%d params=%" PRIu64
                   " state_bytes=%" PRIu64 " activation_bytes=%" PRIu64 " peak_bytes=%" PRIu64 "\n",
                   l->dp, l->tp, l->pp, l->sp, l->zero, rc_names[l->recompute], l->micro_batch,
                   l->micros, sched_names[l->schedule], l->chunks, p->at.part_params, state,
                   p->at.activations, p->peak);
        else
            printf("%4d %4d %4d %2d %4d %-9s %5d %5d %-11s %12" PRIu64 " %14" PRIu64 " %14" PRIu64
                   " %14" PRIu64 "\n",
                   l->dp, l->tp, l->pp, l->sp, l->zero, rc_names[l->recompute], l->micro_batch,
                   l->micros, sched, p->at.part_params, state, p->at.activations, p->peak);
    }
    if (a.ranks) {
        for (int r = 0; r < W; r++) {
            msr_plan_rank_t o;
            msr_plan_rank(&a.m, &plans[0].l, a.prec, r, &o);
            printf("rank %d params %" PRIu64 " grads %" PRIu64 " optim %" PRIu64 " shard %" PRIu64
                   " replicated %" PRIu64 " buckets %" PRIu64 " work %" PRIu64 " acts_peak %" PRIu64
                   " frame %" PRIu64 " frame_head %" PRIu64 " transient_bound %" PRIu64 "\n",
                   r, o.params, o.grads, o.optim, o.shard_elems, o.replicated_elems, o.buckets,
                   o.work, o.activations, o.frame_bytes[0], o.frame_bytes[1], o.buckets_bound);
        }
    }
    free(plans);
    return 0;
}
