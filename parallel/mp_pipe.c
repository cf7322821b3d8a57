/* Model parallel's plan (see mp.h): the names and checks of its settings,
 * this rank's sizes and kept activations, the pipeline schedule. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "model/layers.h"
#include "parallel/mp_impl.h"

/* ---- names and checks ---- */

static const char *const schedule_names[] = {"gpipe", "1f1b", "interleaved"};
static const char *const recompute_names[] = {"none", "selective", "full"};

int msr_mp_schedule_parse(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, schedule_names[i]) == 0)
            return i;
    return -1;
}

int msr_mp_recompute_parse(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, recompute_names[i]) == 0)
            return i;
    return -1;
}

const char *msr_mp_schedule_name(msr_mp_schedule_t s)
{
    return (unsigned)s < 3 ? schedule_names[s] : "?";
}

const char *msr_mp_recompute_name(msr_mp_recompute_t r)
{
    return (unsigned)r < 3 ? recompute_names[r] : "?";
}

/* Tensor-parallel overlap's layouts: two copies of a micro-batch's
 * sequences, each reduced by an allreduce (a reduce-scatter under sp) of
 * its own. */
static msr_status_t check_tp_overlap(const msr_mp_config_t *cfg, int tp)
{
    if (!cfg->tp_overlap)
        return MSR_OK;
    if (tp < 2)
        return msr_err(MSR_ERR_CONFIG, "--tp-overlap overlaps tp's allreduces: it needs tp > 1");
    if (cfg->micro_batch % 2 != 0) {
        /* a sequence's halves are not independent (causal attention) */
        return msr_err(MSR_ERR_CONFIG,
                       "--tp-overlap splits a micro-batch's sequences in two copies: it needs an "
                       "even micro-batch, not %d",
                       cfg->micro_batch);
    }
    return MSR_OK;
}

msr_status_t msr_mp_check(const msr_gpt_config_t *model, const msr_mp_config_t *cfg, int pp, int tp)
{
    msr_gpt_part_t part = {tp, 0, pp, 0, cfg->chunks, cfg->stage_layers};
    if (msr_gpt_part_check(model, &part) != MSR_OK)
        return MSR_ERR_CONFIG;
    if ((unsigned)cfg->schedule > MSR_MP_INTERLEAVED ||
        (unsigned)cfg->recompute > MSR_MP_RECOMPUTE_FULL || cfg->micro_batch < 1 ||
        cfg->micros < 1) {
        return msr_err(MSR_ERR_CONFIG,
                       "schedule %d, recompute %d, micro-batch %d or %d micro-batches "
                       "out of range",
                       (int)cfg->schedule, (int)cfg->recompute, cfg->micro_batch, cfg->micros);
    }
    int cp = cfg->cp > 1 ? cfg->cp : 1;
    if (cp > 1 && model->max_seq % (2 * cp) != 0) {
        return msr_err(MSR_ERR_CONFIG,
                       "context parallel: the sequence of %d does not divide into 2 x cp %d chunks",
                       model->max_seq, cp);
    }
    if (cfg->sp && tp < 2) {
        return msr_err(MSR_ERR_CONFIG,
                       "sequence parallel splits the sequence over tp ranks: it needs tp > 1");
    }
    if (cfg->sp && model->max_seq / cp % tp != 0) {
        return msr_err(MSR_ERR_CONFIG,
                       "sequence parallel: the sequence of %d does not divide among tp %d ranks%s",
                       model->max_seq / cp, tp, cp > 1 ? " (the positions of one cp rank)" : "");
    }
    if (cfg->chunks > 1 && cfg->schedule != MSR_MP_INTERLEAVED) {
        return msr_err(MSR_ERR_CONFIG, "%d virtual stages need the interleaved schedule",
                       cfg->chunks);
    }
    if (cfg->schedule == MSR_MP_1F1B && cfg->micros < pp) {
        return msr_err(MSR_ERR_CONFIG,
                       "1F1B needs at least as many micro-batches as stages: %d micro-batches "
                       "(--grad-accum) for %d stages",
                       cfg->micros, pp);
    }
    if (cfg->schedule == MSR_MP_INTERLEAVED && (pp < 2 || cfg->micros % pp != 0)) {
        return msr_err(MSR_ERR_CONFIG,
                       "interleaved 1F1B needs pp > 1 and micro-batches a multiple of the stages: "
                       "%d micro-batches (--grad-accum) for %d stages",
                       cfg->micros, pp);
    }
    if (cfg->zero < 0 || cfg->zero > 3) {
        return msr_err(MSR_ERR_CONFIG, "ZeRO stage %d is not in 0..3", cfg->zero);
    }
    if (cfg->head_chunk < 0) {
        return msr_err(MSR_ERR_CONFIG,
                       "the head's chunk of %d vocabulary rows: give 1 or more (0: the whole head)",
                       cfg->head_chunk);
    }
    if (cfg->acts.mode == MSR_OFFLOAD_HOST) {
        return msr_err(MSR_ERR_CONFIG, "activation offload to host memory: a CPU rank's "
                                       "activations are in host memory already");
    }
    if (cfg->acts.mode == MSR_OFFLOAD_DISK && cfg->recompute != MSR_MP_RECOMPUTE_FULL) {
        return msr_err(MSR_ERR_CONFIG,
                       "activation offload spills the block inputs that full recompute keeps: it "
                       "needs recompute full, not %s",
                       msr_mp_recompute_name(cfg->recompute));
    }
    if (check_tp_overlap(cfg, tp) != MSR_OK)
        return MSR_ERR_CONFIG;
    if ((int64_t)2 * cfg->micros * pp * cfg->chunks > MSR_COMM_TAG_MAX) {
        return msr_err(MSR_ERR_CONFIG,
                       "%d micro-batches x %d virtual stages are too many for the message tags",
                       cfg->micros, pp * cfg->chunks);
    }
    return MSR_OK;
}

/* ---- sizes ---- */

dims_t msr_mp_dims(const msr_gpt_config_t *m, const msr_mp_config_t *cfg, int tp)
{
    dims_t d = msr_layout_dims(cfg->micro_batch, m->max_seq, m->channels, m->heads, m->vocab, tp,
                               cfg->sp, cfg->cp, (int)cfg->recompute);
    if (m->arch == MSR_GPT_ARCH_LLAMA) { /* SwiGLU of width ffn; qkv fits the GPT's 3 Cl */
        d.Hl = m->ffn / tp;
        d.glu = 1;
    }
    msr_layout_head_chunk(&d, cfg->head_chunk);
    return d;
}

/* Points la into keep (what the frame keeps) and scr (the shared scratch,
 * overwritten by the next block) as the layout's table says
 * (msr_layout_block_act: the recompute mode decides). */
void msr_mp_carve_layer(const dims_t *d, msr_gpt_carve_t *keep, msr_gpt_carve_t *scr,
                        msr_gpt_block_acts_t *la)
{
    float **field[MSR_ACT_BLOCK_COUNT] = {
        [MSR_ACT_LN1] = &la->ln1,           [MSR_ACT_LN1_MEAN] = &la->ln1_mean,
        [MSR_ACT_LN1_RSTD] = &la->ln1_rstd, [MSR_ACT_QKV] = &la->qkv,
        [MSR_ACT_ATTY] = &la->atty,         [MSR_ACT_ATT] = &la->att,
        [MSR_ACT_RES2] = &la->res2,         [MSR_ACT_LN2] = &la->ln2,
        [MSR_ACT_LN2_MEAN] = &la->ln2_mean, [MSR_ACT_LN2_RSTD] = &la->ln2_rstd,
        [MSR_ACT_FCH] = &la->fch,           [MSR_ACT_FCH_GELU] = &la->fch_gelu,
        [MSR_ACT_RES3] = &la->res3,
    };
    for (int a = 0; a < MSR_ACT_BLOCK_COUNT; a++) {
        int kept;
        size_t n = msr_layout_block_act(d, a, &kept);
        *field[a] = msr_gpt_carve(kept ? keep : scr, n);
    }
}

void msr_mp_carve_frame(const dims_t *d, int layers, int head, msr_gpt_carve_t *keep,
                        msr_gpt_carve_t *scr, frame_t *f)
{
    msr_gpt_block_acts_t dummy;
    f->in = msr_gpt_carve(keep, d->Nl * (size_t)d->C);
    for (int i = 0; i < layers; i++) {
        msr_gpt_carve_t s = *scr; /* every block reuses the same scratch */
        msr_mp_carve_layer(d, keep, &s, f->layers != NULL ? &f->layers[i] : &dummy);
        if (i == layers - 1)
            scr->used = s.used;
    }
    f->lnf = f->lnf_mean = f->lnf_rstd = f->probs = NULL;
    if (head) {
        f->lnf = msr_gpt_carve(keep, msr_layout_head_act(d, MSR_ACT_LNF));
        f->lnf_mean = msr_gpt_carve(keep, msr_layout_head_act(d, MSR_ACT_LNF_MEAN));
        f->lnf_rstd = msr_gpt_carve(keep, msr_layout_head_act(d, MSR_ACT_LNF_RSTD));
        f->probs = msr_gpt_carve(keep, msr_layout_head_act(d, MSR_ACT_PROBS));
    }
}

size_t msr_mp_frame_bytes(const msr_gpt_config_t *model, const msr_mp_config_t *cfg, int tp,
                          int layers, int with_head)
{
    dims_t d = msr_mp_dims(model, cfg, tp);
    return (size_t)msr_layout_frame_elems(&d, layers, with_head) * sizeof(float);
}

/* ---- the schedule ---- */

/* This rank's order of forwards and backwards (layout/pipe_order.h). */
void msr_mp_build_schedule(msr_mp_t *mp)
{
    mp->num_ops = msr_pipe_order((int)mp->cfg.schedule, mp->cfg.micros, mp->pp, mp->pr,
                                 mp->cfg.chunks, mp->ops);
}
