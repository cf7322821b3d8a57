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

/* The search with offload mode k of q's, into *plans_p when it finds a
 * plan faster than best_ms (0: any plan), *pruned with it. Returns its
 * count, or -1 with a reason in why. */
static int64_t try_mode(const msr_plan_model_t *m, msr_plan_precision_t prec,
                        const msr_plan_cluster_t *c, const msr_plan_query_t *q, int mode,
                        int64_t keep, double best_ms, msr_plan_t **plans_p,
                        msr_plan_pruned_t *pruned, char *why, size_t why_len)
{
    msr_plan_query_t qo = *q;
    msr_plan_pruned_t pr;
    msr_plan_t *plans = NULL;
    qo.offload = mode;
    int64_t n = msr_plan_search(m, prec, c, &qo, keep, &plans, &pr, why, why_len);
    if (n > 0 && (best_ms == 0 || plans[0].t.step_ms < best_ms)) {
        pr.no_offload_ms = pruned->no_offload_ms;
        free(*plans_p);
        *plans_p = plans;
        *pruned = pr;
        return n;
    }
    free(plans);
    return n < 0 ? -1 : 0;
}

int64_t msr_plan_search_offload(const msr_plan_model_t *m, msr_plan_precision_t prec,
                                const msr_plan_cluster_t *c, const msr_plan_query_t *q,
                                int64_t keep, msr_plan_t **plans_p, msr_plan_pruned_t *pruned,
                                char *why, size_t why_len)
{
    /* the optimizer's first: it keeps the layout's recompute; then full
     * recompute's block inputs, then both; then the blocks' parameters
     * beside the optimizer's, then beside both (the most bytes moved);
     * last the gradient shard beside those two and then all three: it is
     * at most the parameters' bytes (4S against 4P at ZeRO 2, a share
     * each at ZeRO 3), only ZeRO 2-3 under data parallel alone have it,
     * and its I/O is priced whole in the step (behind and ahead of the
     * trainer, not credited) */
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
    pruned->no_offload_ms = n > 0 ? (*plans_p)[0].t.step_ms : 0;
    if (q->offload != 0 || pruned->over_memory == 0)
        return n;
    int64_t found = n;
    for (int k = 0; k < 7; k++) {
        double best = found > 0 ? (*plans_p)[0].t.step_ms : 0;
        int64_t got = try_mode(m, prec, c, q, modes[k], keep, best, plans_p, pruned, why, why_len);
        if (got < 0)
            return -1;
        if (got > 0)
            found = got;
        if (n == 0 && found > 0)
            break; /* nothing fit without: the first mode that fits */
    }
    return found;
}

void msr_plan_offload_why(const msr_plan_t *p, const msr_plan_pruned_t *pr,
                          const msr_plan_cluster_t *c, char *buf, size_t len)
{
    if (p->l.offload != 0 && pr->no_offload_ms <= 0)
        snprintf(buf, len, "no layout fits in %g GiB per rank without it", c->mem_gib);
    else if (p->l.offload != 0)
        snprintf(buf, len,
                 "faster than the plans that fit in %g GiB per rank without it (%.4g ms a step "
                 "against %.4g)",
                 c->mem_gib, p->t.step_ms, pr->no_offload_ms);
    else if (pr->over_memory == 0)
        snprintf(buf, len,
                 "plans fit in %g GiB per rank without it and none is over it (an offload saves "
                 "nothing then and only adds its disk I/O to the step)",
                 c->mem_gib);
    else
        snprintf(buf, len,
                 "plans fit in %g GiB per rank without it and none with an offload is faster",
                 c->mem_gib);
}

void msr_plan_offload_cost(const msr_plan_model_t *m, msr_plan_precision_t prec,
                           const msr_plan_t *p, uint64_t *saved_p, uint64_t *io_p)
{
    msr_plan_layout_t l = p->l;
    int rank = ((p->at.dp_rank * l.pp + p->at.pp_rank) * msr_plan_cp(&l) + p->at.cp_rank) * l.tp +
               p->at.tp_rank;
    msr_plan_rank_t with, without;
    msr_plan_rank(m, &l, prec, rank, &with);
    l.offload = 0;
    msr_plan_rank(m, &l, prec, rank, &without);
    *saved_p = without.total > with.total ? without.total - with.total : 0;
    /* read and written, each: the memory model's counts */
    *io_p = 2 * (with.offload_optim_io + with.offload_acts_io) + with.offload_grads_w +
            with.offload_grads_r + with.offload_eparam_r + with.offload_eparam_w;
    uint64_t slot, blocks;
    msr_plan_offload_params_io(m, &p->l, rank, &slot, &blocks);
    *io_p += blocks * slot * (2 * (uint64_t)p->l.micros + 2);
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
