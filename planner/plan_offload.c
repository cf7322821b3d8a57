/* The offloads as the planner takes them (plan.h): train_gpt's --offload
 * list read into MSR_PLAN_OFFLOAD_* bits, the search that turns to them
 * when nothing fits, what a plan's offload saves and moves, and the disk's
 * prices of what it moves. The bytes each keeps resident and moves are
 * plan_mem.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/plan.h"
#include "planner/plan_mem_impl.h"

#define BAD(...)                             \
    do {                                     \
        snprintf(why, why_len, __VA_ARGS__); \
        return -1;                           \
    } while (0)

/* name k's bit is 1 << k (MSR_PLAN_OFFLOAD_*) */
static const char *const names[4] = {"optimizer", "activations", "params", "grads"};

/* The name at p (0 to 3), or -1; *len_p its length. A name ends the item
 * or is followed by '=' or ','. */
static int name_at(const char *p, size_t *len_p)
{
    for (int k = 0; k < 4; k++) {
        size_t n = strlen(names[k]);
        if (strncmp(p, names[k], n) == 0 && (p[n] == '\0' || p[n] == '=' || p[n] == ',')) {
            *len_p = n;
            return k;
        }
    }
    return -1;
}

/* Where the item at p ends: at a comma that starts the next name (so a
 * directory may hold commas), or at the end. */
static const char *item_end(const char *p)
{
    size_t n;
    for (const char *c = strchr(p, ','); c != NULL; c = strchr(c + 1, ','))
        if (name_at(c + 1, &n) >= 0)
            return c;
    return p + strlen(p);
}

int msr_plan_offload_parse(const char *s, int *offload_p, char *why, size_t why_len)
{
    int bits = 0, seen = 0;
    for (const char *p = s;;) {
        size_t n;
        int k = name_at(p, &n);
        const char *end = item_end(p);
        int len = (int)(end - p);
        if (k < 0)
            BAD("--offload '%s': '%.*s' is not optimizer, activations, params or grads", s, len, p);
        if (seen & (1 << k))
            BAD("--offload '%s': %s named twice", s, names[k]);
        seen |= 1 << k;
        const char *mode = p + n;
        int rest = (int)(end - mode);
        if (rest == 0 || (rest == 5 && strncmp(mode, "=disk", 5) == 0) ||
            (rest > 6 && strncmp(mode, "=disk:", 6) == 0))
            bits |= 1 << k;
        else if (k == 0 && rest == 5 && strncmp(mode, "=host", 5) == 0)
            ; /* a CPU rank's moments stay in memory: nothing moves */
        else
            BAD("--offload '%s': '%.*s' is not %s, %s=disk or %s=disk:DIR%s", s, len, p, names[k],
                names[k], names[k], k == 0 ? " (or optimizer=host)" : "");
        if (*end == '\0')
            break;
        p = end + 1;
    }
    /* the gradients' chunks are read by the moments' (parallel/dp_offload.c) */
    if ((bits & MSR_PLAN_OFFLOAD_GRADS) && !(bits & MSR_PLAN_OFFLOAD_OPTIM))
        BAD("--offload '%s': grads=disk needs optimizer=disk beside it (the update reads the "
            "gradient shard back a moments' chunk at a time)",
            s);
    *offload_p = bits;
    return 0;
}

const char *msr_plan_offload_name(int offload, char *buf, size_t len)
{
    size_t used = 0;
    snprintf(buf, len, "none");
    for (int k = 0; k < 4 && used < len; k++)
        if (offload & (1 << k))
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used > 0 ? "," : "", names[k]);
    return buf;
}

/* The search with offload bits `offload` and head chunk `head` (q's
 * otherwise), into *plans_p when it finds a plan faster than best_ms (0:
 * any plan), *pruned with it. Returns its count, or -1 with a reason in
 * why. */
static int64_t try_fit(const msr_plan_model_t *m, msr_plan_precision_t prec,
                       const msr_plan_cluster_t *c, const msr_plan_query_t *q, int offload,
                       int head, int64_t keep, double best_ms, msr_plan_t **plans_p,
                       msr_plan_pruned_t *pruned, char *why, size_t why_len)
{
    msr_plan_query_t qo = *q;
    msr_plan_pruned_t pr;
    msr_plan_t *plans = NULL;
    qo.offload = offload;
    qo.head_chunk = head;
    int64_t n = msr_plan_search(m, prec, c, &qo, keep, &plans, &pr, why, why_len);
    if (n > 0 && (best_ms == 0 || plans[0].t.step_ms < best_ms)) {
        pr.plain_ms = pruned->plain_ms;
        free(*plans_p);
        *plans_p = plans;
        *pruned = pr;
        return n;
    }
    free(plans);
    return n < 0 ? -1 : 0;
}

int64_t msr_plan_search_fit(const msr_plan_model_t *m, msr_plan_precision_t prec,
                            const msr_plan_cluster_t *c, const msr_plan_query_t *q, int fit,
                            int64_t keep, msr_plan_t **plans_p, msr_plan_pruned_t *pruned,
                            char *why, size_t why_len)
{
    /* the chunked head first: it moves nothing, its price a second pass
     * of the head's product. Then the optimizer's offload: it keeps the
     * layout's recompute; then full recompute's block inputs, then both;
     * then the blocks' parameters beside the optimizer's, then beside both
     * (the most bytes moved); last the gradient shard beside those two and
     * then all three: it is at most the parameters' bytes (4S against 4P
     * at ZeRO 2, a share each at ZeRO 3), only ZeRO 2-3 under data
     * parallel alone have it, and its I/O is priced whole in the step
     * (behind and ahead of the trainer, not credited). The offloads beside
     * the chunked head only when neither finds a plan alone. */
    enum { O = MSR_PLAN_OFFLOAD_OPTIM, A = MSR_PLAN_OFFLOAD_ACTS, P = MSR_PLAN_OFFLOAD_PARAMS };
    static const int modes[7] = {O,
                                 A,
                                 O | A,
                                 O | P,
                                 O | A | P,
                                 O | P | MSR_PLAN_OFFLOAD_GRADS,
                                 O | A | P | MSR_PLAN_OFFLOAD_GRADS};
    int64_t n = msr_plan_search(m, prec, c, q, keep, plans_p, pruned, why, why_len);
    if (n < 0)
        return n;
    pruned->plain_ms = n > 0 ? (*plans_p)[0].t.step_ms : 0;
    int head = (fit & MSR_PLAN_FIT_HEAD) && q->head_chunk == 0 ? MSR_PLAN_FIT_HEAD_ROWS : 0;
    int offload = (fit & MSR_PLAN_FIT_OFFLOAD) && q->offload == 0;
    if (pruned->over_memory == 0)
        return n;
    int64_t found = n;
    /* rung 0 the head; 1-7 the offloads; 8-14 the offloads beside the head */
    for (int k = 0; k < 15; k++) {
        if (k == 0 ? head == 0 : k < 8 ? !offload : head == 0 || !offload || found > 0)
            continue;
        int bits = k == 0 ? q->offload : modes[(k - 1) % 7];
        double best = found > 0 ? (*plans_p)[0].t.step_ms : 0;
        int64_t got = try_fit(m, prec, c, q, bits, k == 0 || k >= 8 ? head : q->head_chunk, keep,
                              best, plans_p, pruned, why, why_len);
        if (got < 0)
            return -1;
        if (got > 0)
            found = got;
        if (n == 0 && found > 0)
            break; /* nothing fit without: the first rung that fits */
    }
    return found;
}

int64_t msr_plan_search_offload(const msr_plan_model_t *m, msr_plan_precision_t prec,
                                const msr_plan_cluster_t *c, const msr_plan_query_t *q,
                                int64_t keep, msr_plan_t **plans_p, msr_plan_pruned_t *pruned,
                                char *why, size_t why_len)
{
    return msr_plan_search_fit(m, prec, c, q, MSR_PLAN_FIT_OFFLOAD, keep, plans_p, pruned, why,
                               why_len);
}

void msr_plan_fit_why(const msr_plan_t *p, const msr_plan_pruned_t *pr, const msr_plan_cluster_t *c,
                      int what, char *buf, size_t len)
{
    int head = what == MSR_PLAN_FIT_HEAD;
    int used = head ? p->l.head_chunk != 0 : p->l.offload != 0;
    if (used && pr->plain_ms <= 0)
        snprintf(buf, len, "no layout fits in %g GiB per rank without it", c->mem_gib);
    else if (used)
        snprintf(buf, len,
                 "faster than the plans that fit in %g GiB per rank without it (%.4g ms a step "
                 "against %.4g)",
                 c->mem_gib, p->t.step_ms, pr->plain_ms);
    else if (pr->plain_ms <= 0) /* the other let plans fit, and this one alone did not */
        snprintf(buf, len, "%s lets plans fit in %g GiB per rank without it",
                 head ? "the offload" : "the chunked head", c->mem_gib);
    else if (pr->over_memory == 0)
        snprintf(buf, len,
                 "plans fit in %g GiB per rank without it and none is over it (%s saves nothing "
                 "then and only adds %s to the step)",
                 c->mem_gib, head ? "a chunked head" : "an offload",
                 head ? "a second pass of the head's product" : "its disk I/O");
    else
        snprintf(buf, len, "plans fit in %g GiB per rank without it and none with %s is faster",
                 c->mem_gib, head ? "a chunked head" : "an offload");
}

/* Plan p's fullest rank (its index in the mesh), that rank's bytes into
 * *with, and the bytes it saves against layout `without` (p's with what
 * was added taken off). */
static int saved_on_fullest(const msr_plan_model_t *m, msr_plan_precision_t prec,
                            const msr_plan_t *p, const msr_plan_layout_t *without,
                            msr_plan_rank_t *with, uint64_t *saved_p)
{
    const msr_plan_layout_t *l = &p->l;
    int rank = ((p->at.dp_rank * l->pp + p->at.pp_rank) * msr_plan_cp(l) + p->at.cp_rank) * l->tp +
               p->at.tp_rank;
    msr_plan_rank_t wo;
    msr_plan_rank(m, l, prec, rank, with);
    msr_plan_rank(m, without, prec, rank, &wo);
    *saved_p = wo.total > with->total ? wo.total - with->total : 0;
    return rank;
}

void msr_plan_offload_cost(const msr_plan_model_t *m, msr_plan_precision_t prec,
                           const msr_plan_t *p, uint64_t *saved_p, uint64_t *io_p)
{
    msr_plan_layout_t l = p->l;
    l.offload = 0;
    msr_plan_rank_t with;
    int rank = saved_on_fullest(m, prec, p, &l, &with, saved_p);
    /* read and written, each: the memory model's counts */
    *io_p = 2 * (with.offload_optim_io + with.offload_acts_io) + with.offload_grads_w +
            with.offload_grads_r + with.offload_eparam_r + with.offload_eparam_w;
    uint64_t slot, blocks;
    msr_plan_offload_params_io(m, &p->l, rank, &slot, &blocks);
    *io_p += blocks * slot * (2 * (uint64_t)p->l.micros + 2);
}

void msr_plan_head_cost(const msr_plan_model_t *m, msr_plan_precision_t prec, const msr_plan_t *p,
                        uint64_t *saved_p, double *flops_p)
{
    msr_plan_layout_t l = p->l;
    l.head_chunk = 0;
    msr_plan_rank_t with;
    saved_on_fullest(m, prec, p, &l, &with, saved_p);
    /* a rank's tokens: its T/cp positions of each sequence */
    double N = (double)p->l.micro_batch * m->seq / msr_plan_cp(&p->l);
    *flops_p = p->l.head_chunk == 0 ? 0 : 2 * N * m->channels * m->vocab / p->l.tp * p->l.micros;
}

/* ZeRO-3 under the parameters' offload: parallel/dp_params.c's z3_layout
 * over the runtime's unit walk: each block's owned elements leave the
 * shard for the store, whose blocks are the largest share (at least 1
 * element). The shard's elements into *shard_p, the moved ones into
 * *moved_p; returns the largest share. */
static uint64_t z3_walk(const msr_plan_part_t *p, const msr_plan_layout_t *l, int replica,
                        uint64_t *shard_p, uint64_t *moved_p)
{
    msr_layout_units_t it;
    msr_layout_unit_t u;
    msr_plan_part_units(p, l, &it);
    uint64_t shard = 0, moved = 0, share = 0, most = 1;
    int lo = p->has_embed, hi = p->has_embed + p->blocks, seg = -1;
    while (msr_layout_units_next(&it, 1, &u)) {
        uint64_t a, e;
        msr_layout_unit_own(&u, replica, &a, &e);
        shard += u.repeat * (e - a);
        if (u.seg < lo || u.seg >= hi)
            continue;
        if (u.seg != seg)
            seg = u.seg, share = 0;
        share += u.repeat * (e - a);
        moved += u.repeat * (e - a);
        most = msr_plan_max_u64(most, share);
    }
    *shard_p = shard;
    *moved_p = moved;
    return most;
}

uint64_t msr_plan_offload_params_z3(const msr_plan_part_t *p, const msr_plan_layout_t *l,
                                    int replica)
{
    uint64_t shard, moved, most = z3_walk(p, l, replica, &shard, &moved);
    return (shard - moved) * MSR_PLAN_F32 +
           msr_plan_offload_params_bytes(most * MSR_PLAN_F32, (uint64_t)p->blocks);
}

void msr_plan_offload_params_io(const msr_plan_model_t *m, const msr_plan_layout_t *l, int rank,
                                uint64_t *slot_p, uint64_t *blocks_p)
{
    *slot_p = *blocks_p = 0;
    if (!(l->offload & MSR_PLAN_OFFLOAD_PARAMS))
        return;
    int cp = msr_plan_cp(l), pr = rank / (l->tp * cp) % l->pp;
    int replica = rank / (l->tp * cp * l->pp) * cp + rank / l->tp % cp;
    msr_plan_part_t p;
    msr_plan_part_of(m, l, pr, &p);
    uint64_t shard, moved, b = msr_plan_part_block_max(&p);
    if (l->zero >= 3)
        b = z3_walk(&p, l, replica, &shard, &moved);
    *slot_p = msr_plan_ceil_div(b * MSR_PLAN_F32, MSR_PLAN_OFFLOAD_ALIGN) * MSR_PLAN_OFFLOAD_ALIGN;
    *blocks_p = (uint64_t)p.blocks;
}

double msr_plan_disk_ms(const msr_plan_cluster_t *c, double read_bytes, double write_bytes)
{
    /* the parser refuses rates of 0: a cluster built in code must too */
    double r = c->disk_read_gbs > 0 ? read_bytes / (c->disk_read_gbs * 1e6) : INFINITY;
    double w = c->disk_write_gbs > 0 ? write_bytes / (c->disk_write_gbs * 1e6) : INFINITY;
    return (read_bytes > 0 ? r : 0) + (write_bytes > 0 ? w : 0);
}

double msr_plan_io_exposed_ms(double compute_ms, double io_ms)
{
    return io_ms > compute_ms ? io_ms - compute_ms : 0;
}
