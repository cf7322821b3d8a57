/* The experts' parameters in a file of their own under the parameters'
 * disk offload (train.h's epf): each held MoE block's experts are block k
 * of a parameter store (parallel/offload_params.h), read ahead of the
 * block's forward and backward through dp's hooks and dropped after, the
 * gradients kept resident; the update, a checkpoint's save and a restore
 * go over the blocks one at a time through a cursor. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "model/err_call.h"
#include "model/moe.h"
#include "parallel/train_impl.h"

/* The place in the store of the MoE block segment s runs, or -1 (a dense
 * segment, or a block held elsewhere). */
static int held_block(const msr_trainer_t *tr, int s)
{
    return msr_train_experts_held_block(tr, s);
}

/* The cursor at block k (held; k == held: none), the one it held before
 * given back (written back when changed). */
static msr_status_t cursor_to(msr_trainer_t *tr, int k)
{
    if (tr->ed_cur == k)
        return MSR_OK;
    msr_status_t st = MSR_OK;
    if (tr->ed_cur >= 0) {
        st = msr_params_release(tr->epf, (size_t)tr->ed_cur, tr->ed_cbuf, tr->ed_dirty);
        tr->ed_cur = -1;
        tr->ed_cbuf = NULL;
        tr->ed_dirty = 0;
    }
    if (st == MSR_OK && k < msr_moe_held(tr->model->moe) &&
        (st = msr_params_acquire(tr->epf, (size_t)k, 1, &tr->ed_cbuf)) == MSR_OK)
        tr->ed_cur = k;
    return st;
}

msr_status_t msr_train_experts_cursor_end(msr_trainer_t *tr)
{
    if (tr->epf == NULL)
        return MSR_OK;
    return cursor_to(tr, msr_moe_held(tr->model->moe));
}

/* Reads block k's parameters for a pass (dir +1: a forward, whose next
 * block is read ahead; -1: a backward) and points the block's experts at
 * them and at its resident gradients. */
static msr_status_t ed_acquire(void *arg, int s, msr_gpt_pass_t pass)
{
    msr_trainer_t *tr = arg;
    int k = held_block(tr, s);
    if (k < 0)
        return MSR_OK;
    if (tr->ed_at >= 0) {
        return msr_err(MSR_ERR_STATE,
                       "train: MoE block %d's experts acquired while block %d's are in use", k,
                       tr->ed_at);
    }
    msr_status_t st = cursor_to(tr, msr_moe_held(tr->model->moe)); /* a restore's, if left */
    int dir = pass == MSR_GPT_FORWARD ? 1 : -1;
    if (st == MSR_OK && (st = msr_params_acquire(tr->epf, (size_t)k, dir, &tr->ed_buf)) != MSR_OK)
        return msr_err_call(st, "train: MoE block %d's experts from their file", k);
    if (st != MSR_OK)
        return st;
    msr_moe_set_block(tr->model->moe, k, tr->ed_buf, tr->ed_grads + (size_t)k * tr->ed_per);
    tr->ed_at = k;
    return MSR_OK;
}

/* After block k's pass: its parameters dropped (a pass reads them only).
 * The block the next pass most likely starts with is read ahead: after a
 * forward's last block, that one again for the backward; after a
 * backward's first, that one for the next micro-batch's forward or the
 * update (a wrong guess costs a read, never a result). */
static msr_status_t ed_release(void *arg, int s, msr_gpt_pass_t pass)
{
    msr_trainer_t *tr = arg;
    int k = held_block(tr, s), last = msr_moe_held(tr->model->moe) - 1;
    if (k < 0 || tr->ed_at != k)
        return MSR_OK;
    msr_moe_set_block(tr->model->moe, k, NULL, NULL);
    float *buf = tr->ed_buf;
    tr->ed_at = -1;
    tr->ed_buf = NULL;
    msr_status_t st = msr_params_release(tr->epf, (size_t)k, buf, 0);
    int turn = pass == MSR_GPT_FORWARD ? k == last : k == 0;
    if (st == MSR_OK && turn)
        st = msr_params_prefetch(tr->epf, (size_t)k);
    return st;
}

msr_status_t msr_train_experts_disk(msr_trainer_t *tr)
{
    msr_moe_t *moe = tr->model->moe;
    int held = msr_moe_held(moe);
    tr->ed_at = tr->ed_cur = -1;
    if (!msr_device_is_host(msr_moe_device(moe)))
        return msr_err(MSR_ERR_UNSUPPORTED,
                       "train: the experts' parameters offload from host memory, not %s's",
                       msr_device_name(msr_moe_device(moe)));
    tr->ed_per = (size_t)msr_moe_local_experts(moe) * msr_moe_expert_count(&tr->cfg.model);
    msr_status_t st = msr_moe_store_external(moe);
    if (st != MSR_OK)
        return st;
    size_t count = (size_t)held * tr->ed_per;
    tr->ed_grads = msr_calloc(count + 1, sizeof(float));
    float *tmp = msr_malloc(tr->ed_per * sizeof(float) + 1);
    if (tr->ed_grads == NULL || tmp == NULL) {
        msr_free(tmp);
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for %zu expert elements' gradients",
                       count);
    }
    st = msr_params_create_as(&tr->cfg.par.params_offload, "experts-params", tr->ed_per,
                              (size_t)held, &tr->epf);
    /* seeded a block at a time: the same numbers as the whole store's */
    for (int k = 0; k < held && st == MSR_OK; k++) {
        msr_moe_init_range(moe, tr->cfg.seed, (size_t)k * tr->ed_per, tr->ed_per, tmp);
        st = msr_params_put(tr->epf, (size_t)k, tmp);
    }
    msr_free(tmp);
    if (st == MSR_OK) /* the first forward's first block */
        st = msr_params_prefetch(tr->epf, 0);
    if (st != MSR_OK)
        return st;
    MSR_INFO("offload: the experts' parameters of %d blocks of %zu elements in %s (%s)", held,
             tr->ed_per, msr_params_path(tr->epf), msr_params_engine(tr->epf));
    msr_dp_extra_t x = {ed_acquire, ed_release, tr};
    msr_dp_set_extra(tr->dp, &x);
    return MSR_OK;
}

void msr_train_experts_disk_free(msr_trainer_t *tr)
{
    msr_params_destroy(tr->epf); /* waits for what is in flight: the buffers go with it */
    tr->epf = NULL;
    tr->ed_buf = tr->ed_cbuf = NULL;
    tr->ed_cur = tr->ed_at = -1;
    msr_free(tr->ed_grads);
    msr_free(tr->ed_hold);
    tr->ed_grads = tr->ed_hold = NULL;
}

/* ---- the update, a block at a time ---- */

/* Shard elements [off, off + n) updated (their moments at m and v, or in
 * the optimizer's arrays when NULL) with the cursor walking the blocks
 * they fall in, each one written back when the cursor leaves it. */
static msr_status_t update_span(msr_trainer_t *tr, size_t off, size_t n, float *m, float *v)
{
    msr_adamw_t *opt = tr->eopt;
    size_t per = tr->ed_per, e = off + n;
    msr_status_t st = MSR_OK;
    while (off < e && st == MSR_OK) {
        int k = (int)(off / per);
        size_t in = off - (size_t)k * per, take = MSR_MIN(e - off, per - in);
        if ((st = cursor_to(tr, k)) != MSR_OK)
            break;
        const float *g = tr->ed_grads + off;
        if (m != NULL)
            msr_adamw_update_moments(opt, off, take, tr->ed_cbuf + in, g, m, v);
        else
            msr_adamw_update_moments(opt, off, take, tr->ed_cbuf + in, g, opt->m + off,
                                     opt->v + off);
        tr->ed_dirty = 1;
        if (m != NULL) {
            m += take;
            v += take;
        }
        off += take;
    }
    return st;
}

/* msr_offload_chunk_fn: shard elements [off, off + n), their moments m and v. */
static msr_status_t update_chunk(void *arg, size_t off, size_t n, float *m, float *v)
{
    return update_span(arg, off, n, m, v);
}

msr_status_t msr_train_experts_disk_update(msr_trainer_t *tr, float lr, float grad_scale)
{
    msr_adamw_begin(tr->eopt, lr, grad_scale);
    msr_status_t st = tr->eoff != NULL ? msr_offload_step(tr->eoff, update_chunk, tr)
                                       : update_span(tr, 0, tr->eopt->count, NULL, NULL);
    msr_status_t cst = msr_train_experts_cursor_end(tr);
    if (st == MSR_OK && cst == MSR_OK) /* the next forward's first block */
        cst = msr_params_prefetch(tr->epf, 0);
    return st != MSR_OK ? st : cst;
}

/* ---- checkpoints ---- */

msr_status_t msr_train_experts_spans(msr_trainer_t *tr, size_t s, size_t n, msr_dp_blk_t *blk,
                                     msr_dp_span_fn fn, void *arg)
{
    size_t per = tr->ed_per, e = s + n;
    msr_status_t st = MSR_OK;
    while (s < e && st == MSR_OK) {
        size_t k = s / per, in = s - k * per, take = MSR_MIN(e - s, per - in);
        if (blk->k != k) {
            blk->k = SIZE_MAX;
            st = blk->shared ? msr_params_read_shared(tr->epf, k, blk->buf)
                             : msr_params_get(tr->epf, k, blk->buf);
            if (st != MSR_OK)
                break;
            blk->k = k;
        }
        st = fn(arg, blk->buf + in, take);
        s += take;
    }
    return st;
}

msr_status_t msr_train_experts_disk_load(msr_trainer_t *tr, size_t s, size_t n, const float *src)
{
    size_t per = tr->ed_per, e = s + n;
    msr_status_t st = MSR_OK;
    while (s < e && st == MSR_OK) {
        int k = (int)(s / per);
        size_t in = s - (size_t)k * per, take = MSR_MIN(e - s, per - in);
        if ((st = cursor_to(tr, k)) != MSR_OK)
            break;
        memcpy(tr->ed_cbuf + in, src, take * sizeof(float));
        tr->ed_dirty = 1;
        src += take;
        s += take;
    }
    return st;
}

msr_status_t msr_train_experts_hold(msr_trainer_t *tr)
{
    if (tr->epf == NULL || tr->ed_hold != NULL)
        return MSR_OK;
    int held = msr_moe_held(tr->model->moe);
    size_t count = (size_t)held * tr->ed_per;
    msr_status_t st = msr_train_experts_cursor_end(tr);
    if (st != MSR_OK)
        return st;
    if ((tr->ed_hold = msr_malloc(count * sizeof(float) + 1)) == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for %zu expert parameters", count);
    for (int k = 0; k < held && st == MSR_OK; k++)
        st = msr_params_get(tr->epf, (size_t)k, tr->ed_hold + (size_t)k * tr->ed_per);
    if (st != MSR_OK)
        msr_train_experts_drop(tr);
    return st;
}

void msr_train_experts_drop(msr_trainer_t *tr)
{
    msr_free(tr->ed_hold);
    tr->ed_hold = NULL;
}

msr_status_t msr_trainer_experts_load_begin(msr_trainer_t *tr, float **params_p)
{
    *params_p = msr_moe_params(tr->model->moe);
    if (tr->epf == NULL)
        return MSR_OK;
    msr_status_t st = msr_train_experts_hold(tr);
    *params_p = tr->ed_hold;
    return st;
}

msr_status_t msr_trainer_experts_load_end(msr_trainer_t *tr, int write)
{
    msr_status_t st = MSR_OK;
    if (tr->epf == NULL || tr->ed_hold == NULL)
        return MSR_OK;
    for (int k = 0; write && k < msr_moe_held(tr->model->moe) && st == MSR_OK; k++)
        st = msr_params_put(tr->epf, (size_t)k, tr->ed_hold + (size_t)k * tr->ed_per);
    msr_train_experts_drop(tr);
    if (st == MSR_OK && write) /* the next forward's first block */
        st = msr_params_prefetch(tr->epf, 0);
    return st;
}
