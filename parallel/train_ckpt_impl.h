/* The trainer's checkpoint shard's numbering (train_ckpt.c): the whole
 * model's elements, the saving world, and the experts' ranges, small enough
 * to be inline. Private to parallel/. */
#ifndef MSR_PARALLEL_TRAIN_CKPT_IMPL_H
#define MSR_PARALLEL_TRAIN_CKPT_IMPL_H

#include <stddef.h>

#include "base/util.h"
#include "model/moe.h"
#include "parallel/train_impl.h"

/* The whole model's flat elements: where its experts start in the
 * checkpoint's numbering (ckpt_map.h), whatever part this rank holds. */
static inline size_t whole_flat(const msr_trainer_t *tr)
{
    return msr_gpt_num_params(&tr->cfg.model);
}

/* The checkpoint's element count: the whole model's flat buffer, then its
 * experts. */
static inline size_t total_params(const msr_trainer_t *tr)
{
    return whole_flat(tr) + msr_moe_num_params(&tr->cfg.model);
}

/* The saving world: this rank's place in it and its size (every rank of
 * every model-parallel group saves its own payload). */
static inline int world_rank(const msr_trainer_t *tr)
{
    return tr->mesh != NULL ? tr->mesh->rank : tr->dp->rank;
}

static inline int world_size(const msr_trainer_t *tr)
{
    const msr_mesh_t *m = tr->mesh;
    return m != NULL ? m->dp * m->pp * m->cp * m->tp : tr->dp->size;
}

/* The MoE blocks whose experts a payload holds after the flat pieces. */
static inline int expert_ranges(const msr_trainer_t *tr)
{
    return tr->model->moe != NULL ? msr_moe_held(tr->model->moe) : 0;
}

/* Range k of the experts this rank saves, in the checkpoint's numbering:
 * MoE block k's part of the optimizer's shard of the store (all of the
 * block's at ZeRO 0), with their parameters and moments; n = 0 when the
 * shard has none of block k. */
static inline msr_tckpt_range_t expert_range(msr_trainer_t *tr, int k)
{
    msr_moe_t *moe = tr->model->moe;
    size_t per = (size_t)msr_moe_local_experts(moe) * msr_moe_expert_count(&tr->cfg.model);
    size_t lo = MSR_MAX((size_t)k * per, tr->eshard_lo);
    size_t hi = MSR_MIN((size_t)(k + 1) * per, tr->eshard_hi);
    if (lo >= hi)
        return (msr_tckpt_range_t){0, 0, NULL, NULL, NULL};
    size_t s = lo - tr->eshard_lo;
    return (msr_tckpt_range_t){whole_flat(tr) + msr_moe_global_lo(moe, k) + (lo - k * per), hi - lo,
                               msr_moe_params(moe) + lo, tr->eopt->m + s, tr->eopt->v + s};
}

#endif
