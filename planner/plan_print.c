/* The planner's reports, printed (plan_print.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/util.h"
#include "planner/plan_print.h"

void msr_plan_format_bytes(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024 && u < 5) {
        bytes /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%.0f B", bytes);
    else
        snprintf(buf, len, bytes < 10 ? "%.2f %s" : "%.1f %s", bytes, units[u]);
}

/* A time or a rate with four significant digits and no exponent in the
 * range plans have. */
static void format_num(double x, char *buf, size_t len)
{
    double a = fabs(x);
    if (a >= 1e4 || a == 0)
        snprintf(buf, len, "%.0f", x);
    else if (a >= 1e-3)
        snprintf(buf, len, "%.*f", a >= 1000 ? 0 : a >= 100 ? 1 : a >= 10 ? 2 : a >= 1 ? 3 : 4, x);
    else
        snprintf(buf, len, "%.3g", x);
}

static void schedule_name(const msr_plan_layout_t *l, char *buf, size_t len)
{
    if (l->schedule == MSR_PLAN_INTERLEAVED)
        snprintf(buf, len, "%s/%d", msr_plan_schedule_names[l->schedule], l->chunks);
    else
        snprintf(buf, len, "%s", msr_plan_schedule_names[l->schedule]);
}

static int stages_of(const msr_plan_layout_t *l)
{
    return l->pp * (l->schedule == MSR_PLAN_INTERLEAVED ? l->chunks : 1);
}

/* "a,b,c" of the plan's split; truncated with "..." past len. */
static void split_list(const msr_plan_t *p, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    int n = stages_of(&p->l);
    for (int j = 0; j < n; j++) {
        int w = snprintf(buf + at, len - at, j ? ",%d" : "%d", p->split[j]);
        if (w < 0 || (size_t)w >= len - at) {
            if (len >= 4)
                memcpy(buf + len - 4, "...", 4);
            return;
        }
        at += (size_t)w;
    }
}

/* The FLOP rate each rank achieves over the step, in TFLOP/s (recompute's
 * forwards counted, as the literature reports it). */
static double tflops_per_rank(const msr_plan_t *p)
{
    double world = (double)p->l.dp * p->l.tp * p->l.pp * msr_plan_cp(&p->l);
    return p->t.step_ms > 0 ? p->t.flops / (p->t.step_ms / 1e3) / world / 1e12 : 0;
}

static uint64_t state_bytes(const msr_plan_rank_t *r)
{
    return r->params + r->grads + r->optim + r->master + r->expert_params + r->expert_grads +
           r->expert_optim;
}

void msr_plan_print_table(FILE *f, const msr_plan_t *plans, int64_t n)
{
    fprintf(f, "%4s %5s %4s %4s %4s %4s %2s %4s %-9s %5s %5s %-14s %11s %10s %11s %6s %10s  %s\n",
            "#", "dp", "tp", "pp", "cp", "ep", "sp", "zero", "recompute", "micro", "accum",
            "schedule", "peak/rank", "step_ms", "tokens/s", "bubble", "exposed_ms", "layers");
    for (int64_t i = 0; i < n; i++) {
        const msr_plan_t *p = &plans[i];
        const msr_plan_layout_t *l = &p->l;
        char sched[32], peak[32], step[32], tok[32], exp[32], layers[40];
        schedule_name(l, sched, sizeof sched);
        msr_plan_format_bytes((double)p->peak, peak, sizeof peak);
        format_num(p->t.step_ms, step, sizeof step);
        format_num(p->t.tokens_per_s, tok, sizeof tok);
        format_num(p->t.exposed_comm_ms, exp, sizeof exp);
        if (l->stage_layers != NULL)
            split_list(p, layers, 32);
        else
            snprintf(layers, sizeof layers, "even");
        double bubble = p->t.step_ms > 0 ? 100 * p->t.bubble_ms / p->t.step_ms : 0;
        fprintf(f,
                "%4" PRId64
                " %5d %4d %4d %4d %4d %2d %4d %-9s %5d %5d %-14s %11s %10s %11s %5.1f%% %10s  %s\n",
                i + 1, l->dp, l->tp, l->pp, msr_plan_cp(l), msr_plan_ep(l), l->sp, l->zero,
                msr_plan_recompute_names[l->recompute], l->micro_batch, l->micros, sched, peak,
                step, tok, bubble, exp, layers);
    }
}

void msr_plan_print_kv(FILE *f, const msr_plan_t *plans, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const msr_plan_t *p = &plans[i];
        const msr_plan_layout_t *l = &p->l;
        fprintf(f,
                "plan dp=%d tp=%d pp=%d cp=%d ep=%d sp=%d zero=%d recompute=%s micro_batch=%d "
                "grad_accum=%d schedule=%s virtual_stages=%d params=%" PRIu64
                " state_bytes=%" PRIu64 " activation_bytes=%" PRIu64 " peak_bytes=%" PRIu64
                " step_ms=%.6g tokens_per_s=%.6g tflops_per_rank=%.4g",
                l->dp, l->tp, l->pp, msr_plan_cp(l), msr_plan_ep(l), l->sp, l->zero,
                msr_plan_recompute_names[l->recompute], l->micro_batch, l->micros,
                msr_plan_schedule_names[l->schedule], l->chunks, p->at.part_params,
                state_bytes(&p->at), p->at.activations, p->peak, p->t.step_ms, p->t.tokens_per_s,
                tflops_per_rank(p));
        if (l->head_chunk > 0)
            fprintf(f, " head_chunk=%d", l->head_chunk);
        if (l->stage_layers != NULL) {
            fprintf(f, " pp_layers=");
            for (int j = 0; j < stages_of(l); j++)
                fprintf(f, j ? ",%d" : "%d", l->stage_layers[j]);
        }
        fputc('\n', f);
    }
}

void msr_plan_print_summary(FILE *f, const msr_plan_query_t *q, const msr_plan_cluster_t *c,
                            const msr_plan_pruned_t *pr, int64_t shown, int kv)
{
    const char *mode = q->search == MSR_PLAN_SEARCH_FAST ? "fast" : "exhaustive";
    if (kv) {
        fprintf(f,
                "search mode=%s world=%" PRId64 " global_batch=%" PRId64 " found=%" PRIu64
                " shown=%" PRId64 " invalid=%" PRIu64 " over_memory=%" PRIu64 " tried=%" PRIu64
                "\n",
                mode, q->world, q->global_batch, pr->found, shown, pr->invalid, pr->over_memory,
                pr->found + pr->invalid + pr->over_memory);
        return;
    }
    fprintf(f,
            "%" PRId64 " of %" PRIu64 " plans shown (%s search, %" PRId64
            " ranks, global batch %" PRId64 ", %.4g GiB per rank)\n",
            shown, pr->found, mode, q->world, q->global_batch, c->mem_gib);
    /* every layout tried is shown, ranked below those shown, refused or
     * over the budget: the four add up to the layouts tried */
    fprintf(f,
            "layouts tried: %" PRIu64 " = %" PRId64 " shown + %" PRIu64
            " fitting, not shown + %" PRIu64 " refused by the runtime's rules + %" PRIu64
            " over the memory budget\n",
            pr->found + pr->invalid + pr->over_memory, shown, pr->found - (uint64_t)shown,
            pr->invalid, pr->over_memory);
    if (pr->invalid > 0)
        fprintf(f, "left out: %" PRIu64 " refused by the runtime's rules, the first %s\n",
                pr->invalid, pr->first_invalid);
    if (pr->over_memory > 0)
        fprintf(f, "left out: %" PRIu64 " over the memory budget, the first %s\n", pr->over_memory,
                pr->first_over);
}

void msr_plan_print_cluster(FILE *f, const msr_plan_cluster_t *c, int64_t world, const char *origin,
                            int kv)
{
    int64_t rpn = c->ranks_per_node > 0 ? c->ranks_per_node : 1;
    int64_t nodes = (world + rpn - 1) / rpn;
    if (kv) {
        fprintf(f,
                "cluster origin=%s nodes=%" PRId64 " ranks_per_node=%" PRId64 " mem_gib=%g "
                "peak_tflops=%g intra_gbs=%g inter_gbs=%g latency_us=%g\n",
                origin, nodes, rpn, c->mem_gib, c->peak_tflops, c->intra_gbs, c->inter_gbs,
                c->latency_us);
        return;
    }
    fprintf(f,
            "cluster (%s): %" PRId64 " node%s of %" PRId64 " ranks for %" PRId64
            " ranks; per rank %.4g GiB, %.4g TFLOP/s, %.4g GB/s inside a node, %.4g GB/s "
            "between nodes, %.4g us a message\n",
            origin, nodes, nodes == 1 ? "" : "s", rpn, world, c->mem_gib, c->peak_tflops,
            c->intra_gbs, c->inter_gbs, c->latency_us);
}

/* ---- --explain ---- */

static void row_bytes(FILE *f, const char *what, uint64_t b, uint64_t total, const char *note)
{
    char s[32];
    msr_plan_format_bytes((double)b, s, sizeof s);
    fprintf(f, "    %-24s %12s %5.1f%%%s%s\n", what, s,
            total ? 100.0 * (double)b / (double)total : 0, note[0] ? "  " : "", note);
}

static void row_ms(FILE *f, int indent, const char *what, double ms, double step, const char *note)
{
    char s[32];
    format_num(ms, s, sizeof s);
    fprintf(f, "%*s%-*s %12s ms %5.1f%%  %s\n", indent, "", 28 - indent, what, s,
            step > 0 ? 100 * ms / step : 0, note);
}

/* Time of the pipeline part of a step: all but what follows it. */
static double pipeline_part(const msr_plan_time_t *t)
{
    return t->step_ms - t->dp_exposed_ms - t->zero3_ms - t->optim_ms - t->offload_ms;
}

static void explain_split(FILE *f, const msr_plan_t *p)
{
    const msr_plan_layout_t *l = &p->l;
    int n = stages_of(l);
    if (n > MSR_PLAN_MAX_STAGES) {
        fprintf(f, "  layers: the runtime's even split over %d virtual stages\n", n);
        return;
    }
    fprintf(f, "  layers of each virtual stage: ");
    for (int j = 0; j < n; j++)
        fprintf(f, j ? ",%d" : "%d", p->split[j]);
    fprintf(f, "%s\n",
            n == 1 ? " (one stage)"
            : l->stage_layers != NULL
                ? " (balanced: the end stages carry the embedding and the head)"
                : " (the runtime's even split; a balanced one is no faster)");
    char a[32], b[32], c[32];
    format_num(p->t.layer_ms, a, sizeof a);
    format_num(p->t.first_ms, b, sizeof b);
    format_num(p->t.last_ms, c, sizeof c);
    fprintf(f,
            "  one micro-batch, forward and backward: a block %s ms, the embedding %s ms, "
            "the head %s ms\n",
            a, b, c);
    if (n == 1)
        return;
    fprintf(f, "    %5s %5s %6s %12s\n", "stage", "rank", "layers", "ms/micro");
    for (int j = 0; j < n; j++) {
        double ms = p->split[j] * p->t.layer_ms + (j == 0 ? p->t.first_ms : 0) +
                    (j == n - 1 ? p->t.last_ms : 0);
        format_num(ms, a, sizeof a);
        fprintf(f, "    %5d %5d %6d %12s\n", j, j % l->pp, p->split[j], a);
        if (n > 24 && j == 9 && n - 10 > j + 1) {
            fprintf(f, "    %5s (stages %d to %d alike in form)\n", "...", j + 1, n - 11);
            j = n - 11;
        }
    }
}

static void explain_memory(FILE *f, const msr_plan_model_t *m, const msr_plan_t *p,
                           const msr_plan_cluster_t *c)
{
    const msr_plan_rank_t *r = &p->at;
    char budget[32], total[32], note[128];
    msr_plan_format_bytes(c->mem_gib * 1073741824.0, budget, sizeof budget);
    msr_plan_format_bytes((double)r->total, total, sizeof total);
    int rank = ((r->dp_rank * p->l.pp + r->pp_rank) * msr_plan_cp(&p->l) + r->cp_rank) * p->l.tp +
               r->tp_rank;
    fprintf(f, "  memory of rank %d (pipeline stage %d), the fullest: %s of %s (%.1f%%)\n", rank,
            r->pp_rank, total, budget,
            c->mem_gib > 0 ? 100.0 * (double)r->total / (c->mem_gib * 1073741824.0) : 0);
    uint64_t T = r->total;
    snprintf(note, sizeof note, "%" PRIu64 " parameters in the rank's part, %" PRIu64 " its shard",
             r->part_params, r->shard_elems);
    row_bytes(f, "parameters", r->params, T, note);
    row_bytes(f, "gradients", r->grads, T, p->l.zero >= 2 ? "sharded (ZeRO 2-3)" : "");
    row_bytes(f, "Adam moments", r->optim, T, p->l.zero >= 1 ? "sharded (ZeRO 1-3)" : "");
    if (r->master > 0)
        row_bytes(f, "fp32 master weights", r->master, T, "");
    if (r->bf16_scratch > 0)
        row_bytes(f, "bf16 operand scratch", r->bf16_scratch, T, "the largest product's operands");
    if (m->experts > 0) {
        snprintf(note, sizeof note, "%d of the %d experts of each MoE block (ep %d)",
                 r->experts_held, m->experts, msr_plan_ep(&p->l));
        row_bytes(f, "experts' parameters", r->expert_params, T, note);
        row_bytes(f, "experts' gradients", r->expert_grads, T, "");
        row_bytes(f, "experts' Adam moments", r->expert_optim, T,
                  (p->l.offload & MSR_PLAN_OFFLOAD_OPTIM) && r->expert_shard > 0
                      ? "in a file of their own: the store's chunk buffers"
                  : p->l.zero >= 1 && p->l.dp > msr_plan_ep(&p->l)
                      ? "sharded over the ranks holding the same experts"
                      : "");
        row_bytes(f, "MoE routing and buffers", r->moe_work, T,
                  "kept routing, expert activations, exchange buffers");
    }
    char fr[32], frh[32];
    msr_plan_format_bytes((double)r->frame_bytes[0], fr, sizeof fr);
    msr_plan_format_bytes((double)r->frame_bytes[1], frh, sizeof frh);
    snprintf(note, sizeof note, "at most %d micro-batches' frames, each %s (with the head %s)",
             r->frames_held, fr, frh);
    row_bytes(f, "activations", r->activations, T, note);
    int cp = msr_plan_cp(&p->l);
    if (cp > 1)
        fprintf(f,
                "      context parallel %d: a rank keeps its %d of the %d positions, with the "
                "ring's logsumexp in place of the attention probabilities\n",
                cp, m->seq / cp, m->seq);
    row_bytes(f, "pipeline buffers", r->comm, T, "gradients sent back, the head's wte copy");
    snprintf(note, sizeof note, "a bound; gradient buckets: %" PRIu64, r->buckets);
    row_bytes(f, "dp temporaries", r->buckets_bound, T, note);
    if (r->work > 0) {
        char un[32];
        msr_plan_format_bytes((double)r->untouched, un, sizeof un);
        snprintf(note, sizeof note, "activations' gradients, scratch, %slogits%s%s%s",
                 p->l.head_chunk > 0 ? "a head chunk's " : "", r->untouched > 0 ? " (less " : "",
                 r->untouched > 0 ? un : "",
                 r->untouched > 0 ? " of scratch no block writes)" : "");
        row_bytes(f, "work space", r->work - r->untouched, T, note);
    }
    if (r->shm > 0)
        row_bytes(f, "shared memory", r->shm, T, "the pages of dp's and tp's shm areas it maps");
    uint64_t sum = msr_plan_rank_rows(r);
    if (sum > r->total) {
        char over[32];
        msr_plan_format_bytes((double)(sum - r->total), over, sizeof over);
        fprintf(f,
                "    (the rows add up to %s more: dp's temporaries peak when fewer "
                "activations are held)\n",
                over);
    }
}

static void explain_time(FILE *f, const msr_plan_t *p, const msr_plan_cluster_t *c)
{
    const msr_plan_time_t *t = &p->t;
    double S = t->step_ms;
    char a[32], b[32], note[128];
    format_num(S, a, sizeof a);
    format_num(t->tokens_per_s, b, sizeof b);
    fprintf(f, "  time of a step: %s ms, %s tokens/s\n", a, b);
    row_ms(f, 4, "pipeline", pipeline_part(t), S,
           "the slowest rank's micro-batches, fill and drain");
    row_ms(f, 6, "compute", t->compute_ms, S, "without communication or recompute");
    row_ms(f, 6, "recompute", t->recompute_ms, S, "forwards run again");
    if (c->cold_ms_per_mib > 0)
        row_ms(f, 6, "cold frames", t->cold_ms, S,
               "frames read back after the cache lost them (cold_ms_per_mib)");
    row_ms(f, 6, "tp collectives", t->tp_comm_ms, S,
           !p->l.tp_overlap ? "never hidden"
           : p->l.sp        ? "exposed: reduce-scatters and allgathers partly behind the "
                              "other copy's compute (tp overlap)"
                            : "exposed: allreduces partly behind the other copy's compute "
                              "(tp overlap)");
    if (msr_plan_cp(&p->l) > 1)
        row_ms(f, 6, "cp ring", t->cp_comm_ms, S,
               "K/V blocks past a ring step's attention, their gradients after it");
    if (msr_plan_ep(&p->l) > 1)
        row_ms(f, 6, "ep alltoalls", t->ep_comm_ms, S,
               "the experts' dispatch and combine, both ways, never hidden");
    row_ms(f, 6, "pipeline sends", t->pp_comm_ms, S, "on the critical path");
    row_ms(f, 6, "bubble", t->bubble_ms, S, "idle while the pipeline fills and drains");
    format_num(t->dp_comm_ms, a, sizeof a);
    snprintf(note, sizeof note, "what backward does not hide, of %s ms", a);
    row_ms(f, 4, "data parallel", t->dp_exposed_ms, S, note);
    row_ms(f, 4, "ZeRO-3 gathers", t->zero3_ms, S, "exposed");
    row_ms(f, 4, "optimizer", t->optim_ms, S, "AdamW on the rank's shard");
    if (p->l.offload != 0) {
        format_num(t->offload_io_ms, a, sizeof a);
        snprintf(note, sizeof note, "what compute does not hide of %s ms at %.4g/%.4g GB/s", a,
                 c->disk_read_gbs, c->disk_write_gbs);
        row_ms(f, 4, "offload I/O", t->offload_ms, S, note);
    }
    row_ms(f, 4, "exposed communication", t->exposed_comm_ms, S,
           "tp + cp ring + ep + pipeline sends + dp exposed + ZeRO-3");
    double achieved = tflops_per_rank(p);
    fprintf(f,
            "  %.4g FLOPs a step; %.4g TFLOP/s per rank achieved, %.1f%% of the %.4g it can do\n",
            t->flops, achieved, c->peak_tflops > 0 ? 100 * achieved / c->peak_tflops : 0,
            c->peak_tflops);
}

/* Where plan p's step differs from plan 1's: its layout's other choices
 * and the phases that cost more or less. */
static void explain_versus(FILE *f, const msr_plan_t *p, const msr_plan_t *best)
{
    const msr_plan_layout_t *x = &p->l, *y = &best->l;
    fprintf(f, "  against plan 1:");
    /* in msr_plan_fix_names' order */
    const int a[MSR_PLAN_FIX_N] = {x->dp,     x->tp,          x->pp,          x->sp,
                                   x->zero,   x->recompute,   x->micro_batch, x->schedule,
                                   x->chunks, msr_plan_cp(x), msr_plan_ep(x)};
    const int b[MSR_PLAN_FIX_N] = {y->dp,     y->tp,          y->pp,          y->sp,
                                   y->zero,   y->recompute,   y->micro_batch, y->schedule,
                                   y->chunks, msr_plan_cp(y), msr_plan_ep(y)};
    int same = 1;
    for (int k = 0; k < MSR_PLAN_FIX_N; k++) {
        if (a[k] == b[k])
            continue;
        same = 0;
        if (k == MSR_PLAN_FIX_RECOMPUTE)
            fprintf(f, " %s %s (not %s)", msr_plan_fix_names[k], msr_plan_recompute_names[a[k]],
                    msr_plan_recompute_names[b[k]]);
        else if (k == MSR_PLAN_FIX_SCHEDULE)
            fprintf(f, " %s %s (not %s)", msr_plan_fix_names[k], msr_plan_schedule_names[a[k]],
                    msr_plan_schedule_names[b[k]]);
        else
            fprintf(f, " %s %d (not %d)", msr_plan_fix_names[k], a[k], b[k]);
    }
    if (same)
        fprintf(f, " the same layout, %s split", x->stage_layers ? "a balanced" : "the even");
    fputc('\n', f);
    const msr_plan_time_t *t = &p->t, *u = &best->t;
    struct {
        const char *what;
        double d;
    } d[] = {
        {"compute", t->compute_ms - u->compute_ms},
        {"recompute", t->recompute_ms - u->recompute_ms},
        {"cold frames", t->cold_ms - u->cold_ms},
        {"tp collectives", t->tp_comm_ms - u->tp_comm_ms},
        {"cp ring", t->cp_comm_ms - u->cp_comm_ms},
        {"ep alltoalls", t->ep_comm_ms - u->ep_comm_ms},
        {"pipeline sends", t->pp_comm_ms - u->pp_comm_ms},
        {"bubble", t->bubble_ms - u->bubble_ms},
        {"dp exposed", t->dp_exposed_ms - u->dp_exposed_ms},
        {"ZeRO-3 gathers", t->zero3_ms - u->zero3_ms},
        {"optimizer", t->optim_ms - u->optim_ms},
        {"offload I/O", t->offload_ms - u->offload_ms},
    };
    char s[32];
    format_num(t->step_ms - u->step_ms, s, sizeof s);
    fprintf(f, "    %s ms a step more:", s);
    int any = 0;
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        if (fabs(d[i].d) <= 0.005 * u->step_ms)
            continue;
        format_num(d[i].d, s, sizeof s);
        fprintf(f, "%s %s %s%s ms", any ? "," : "", d[i].what, d[i].d > 0 ? "+" : "", s);
        any = 1;
    }
    if (!any)
        fprintf(f, " no phase by more than 0.5%% of plan 1's step");
    fputc('\n', f);
    char m1[32], m2[32];
    msr_plan_format_bytes((double)p->peak, m1, sizeof m1);
    msr_plan_format_bytes((double)best->peak, m2, sizeof m2);
    fprintf(f, "    memory per rank %s against %s\n", m1, m2);
}

int msr_plan_print_explain(FILE *f, const msr_plan_model_t *m, msr_plan_precision_t prec,
                           const msr_plan_cluster_t *c, const msr_plan_t *plans, int64_t n,
                           int64_t which)
{
    if (which < 1 || which > n)
        return -1;
    const msr_plan_t *p = &plans[which - 1];
    const msr_plan_layout_t *l = &p->l;
    char sched[32];
    schedule_name(l, sched, sizeof sched);
    fprintf(f,
            "plan %" PRId64 ": dp=%d tp=%d pp=%d cp=%d ep=%d sp=%d zero=%d recompute=%s "
            "micro_batch=%d grad_accum=%d schedule=%s\n",
            which, l->dp, l->tp, l->pp, msr_plan_cp(l), msr_plan_ep(l), l->sp, l->zero,
            msr_plan_recompute_names[l->recompute], l->micro_batch, l->micros, sched);
    fprintf(f, "  model: %s, %" PRIu64 " parameters, %d layers, %s\n",
            m->arch == MSR_PLAN_GPT ? "GPT" : "Llama", msr_plan_num_params(m), m->layers,
            prec == MSR_PLAN_BF16           ? "bf16 with fp32 master weights"
            : prec == MSR_PLAN_BF16_RUNTIME ? "bf16 products, fp32 parameters and moments"
                                            : "fp32");
    if (l->head_chunk > 0) {
        int Vl = m->vocab / l->tp, hc = l->head_chunk < Vl ? l->head_chunk : Vl;
        fprintf(f,
                "  head: chunks of %d of the rank's %d vocabulary rows (%d chunks): a chunk's "
                "logits and probabilities in the work space, a position's maximum, sum and "
                "target logit in the frame; the backward computes the logits again\n",
                hc, Vl, (Vl + hc - 1) / hc);
    }
    if (m->experts > 0)
        fprintf(f,
                "  MoE: %d of the %d blocks (one in %d) have %d experts, top-%d, capacity factor "
                "%g; the experts shared out over ep %d\n",
                m->layers / m->moe_every, m->layers, m->moe_every, m->experts, m->top_k,
                m->capacity_factor, msr_plan_ep(l));
    explain_split(f, p);
    explain_memory(f, m, p, c);
    explain_time(f, p, c);
    if (which > 1)
        explain_versus(f, p, &plans[0]);
    return 0;
}

#define CLUSTER_FILE_MAX (64 << 10)

int msr_plan_cluster_read(const char *path, msr_plan_cluster_t *c, char *why, size_t why_len)
{
    FILE *f = msr_fopen_input(path, 0); /* never blocks on a FIFO */
    if (f == NULL) {
        /* there, but not a regular file: "PATH is not a regular file (a
         * FIFO)" said after the path once */
        int err = errno;
        const char *m = msr_err_msg();
        size_t pl = strlen(path);
        if (err == EINVAL && strncmp(m, path, pl) == 0 && m[pl] == ' ')
            snprintf(why, why_len, "--cluster %s: %s", path, m + pl + 1);
        else
            snprintf(why, why_len, "--cluster %s: %s", path, strerror(err));
        return -1;
    }
    char *text = msr_malloc(CLUSTER_FILE_MAX + 1);
    if (text == NULL) {
        fclose(f);
        snprintf(why, why_len, "--cluster %s: out of memory", path);
        return -1;
    }
    size_t n = fread(text, 1, CLUSTER_FILE_MAX + 1, f);
    int err = ferror(f);
    fclose(f);
    int rc = -1;
    if (err) {
        snprintf(why, why_len, "--cluster %s: cannot read it", path);
    } else if (n > CLUSTER_FILE_MAX) {
        snprintf(why, why_len, "--cluster %s: over %d bytes: not a cluster file", path,
                 CLUSTER_FILE_MAX);
    } else if (memchr(text, '\0', n) != NULL) {
        snprintf(why, why_len, "--cluster %s: not a text file", path);
    } else {
        text[n] = '\0';
        msr_plan_cluster_t cl;
        msr_plan_cluster_default(&cl);
        char reason[512]; /* an unknown key's line lists every key */
        if (msr_plan_cluster_parse(text, &cl, reason, sizeof reason) != 0) {
            snprintf(why, why_len, "--cluster %s: %s", path, reason);
        } else {
            *c = cl;
            rc = 0;
        }
    }
    msr_free(text);
    return rc;
}
