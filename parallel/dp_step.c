/* Data parallel's step (see dp.h): a micro-batch's begin and end, model
 * parallel's reduction after the pipeline flush, and the step's end: the
 * global gradient norm, AdamW on this rank's shard and the parameter
 * allgather; the gathered parameters and the memory counts. */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "model/err_call.h"
#include "parallel/dp_impl.h"

/* ---- the step ---- */

msr_status_t msr_dp_micro_begin(msr_dp_t *dp, int first, int last)
{
    dp->first_micro = first;
    dp->last_micro = last;
    dp->gsq_now += first != 0;
    dp->reduce_now = dp->cfg.zero >= 2 || last;
    dp->next_start = 0;
    dp->vi = 0;
    for (int b = 0; b < dp->num_buckets; b++)
        dp->buckets[b].started = dp->buckets[b].finished = 0;
    if (first && dp->cfg.zero <= 1)
        msr_gpt_zero_grad(dp->model);
    if (first && dp->grads_off != NULL) /* the micro-batch's puts set the whole shard */
        msr_grads_fresh(dp->grads_off);
    return MSR_OK;
}

msr_status_t msr_dp_micro_end(msr_dp_t *dp)
{
    msr_status_t st = MSR_OK;
    if (dp->reduce_now) {
        uint64_t t0 = msr_now_ns();
        while (st == MSR_OK && dp->next_start < dp->num_buckets) {
            st = msr_dp_bucket_start(dp, dp->next_start);
            dp->next_start++;
        }
        for (int b = 0; b < dp->num_buckets && st == MSR_OK; b++) {
            msr_dp_bucket_t *B = &dp->buckets[b];
            for (int k = 0; k < 2 && st == MSR_OK; k++) {
                if (B->req[k] == NULL)
                    continue;
                st = msr_comm_wait(B->req[k]);
                B->req[k] = NULL;
                if (st != MSR_OK)
                    msr_dp_comm_failed("reduction of bucket", b, st);
            }
            if (st == MSR_OK && !B->finished)
                st = msr_dp_bucket_finish(dp, b);
        }
        uint64_t waited = msr_now_ns() - t0;
        dp->stats.wait_ns += waited;
        /* the last rank to finish backward waits only for what its
         * communication still had to do: the exposed part */
        double w[1] = {(double)waited};
        if (st == MSR_OK && dp->cfg.measure && dp->comm != NULL) {
            st = msr_comm_allreduce(dp->comm, MSR_IN_PLACE, w, 1, MSR_DTYPE_F64, MSR_OP_MIN);
            if (st != MSR_OK)
                msr_dp_comm_failed("allreduce of the wait times, rank", dp->rank, st);
        }
        dp->stats.exposed_ns += (uint64_t)w[0];
    }
    /* ZeRO-3 frees every segment as its last visit ends; this catches a
     * pass cut short */
    msr_status_t dst = msr_dp_drain(dp);
    if (st == MSR_OK && dst != MSR_OK)
        return msr_dp_comm_failed("wait for the requests in flight, rank", dp->rank, dst);
    return st;
}

/* Gathers the sharded units of arr (a flat-indexed array: the parameters,
 * or stage 0's moments) from their owners, bucket by bucket, two in flight. */
msr_status_t msr_dp_allgather_flat(msr_dp_t *dp, float *arr)
{
    if (dp->comm == NULL || dp->size == 1)
        return MSR_OK;
    size_t size = (size_t)dp->size;
    msr_status_t st = MSR_OK;
    int prev = -1;
    for (int b = 0; b <= dp->num_buckets; b++) {
        if (b < dp->num_buckets && st == MSR_OK && dp->buckets[b].blk > 0) {
            msr_dp_bucket_t *B = &dp->buckets[b];
            if ((B->packed = msr_dp_tmp_alloc(dp, size * B->blk, 0)) == NULL) {
                st = MSR_ERR_NO_MEMORY;
            } else {
                for (int k = B->u0; k < B->u1 && st == MSR_OK; k++) {
                    const msr_dp_unit_t *u = &dp->units[k];
                    if (u->replicated)
                        continue;
                    float *dst = B->packed + (size_t)dp->rank * B->blk + u->bpack;
                    if ((st = msr_dp_copy(dp, dst, arr + u->own_lo, u->own_n)) == MSR_OK)
                        st = msr_dp_zero(dp, dst + u->own_n, u->blk - u->own_n);
                }
                if (st == MSR_OK && (st = msr_dp_sync(dp)) == MSR_OK) {
                    st = msr_comm_iallgather(dp->comm, MSR_IN_PLACE, B->packed, B->blk,
                                             MSR_DTYPE_F32, &B->req[0]);
                    if (st != MSR_OK)
                        msr_dp_comm_failed("start of the parameter allgather of bucket", b, st);
                }
            }
            if (st != MSR_OK)
                msr_dp_tmp_free(dp, &B->packed, size * B->blk);
        }
        if (prev >= 0) { /* finish the one before */
            msr_dp_bucket_t *B = &dp->buckets[prev];
            msr_status_t wst = msr_comm_wait(B->req[0]);
            B->req[0] = NULL;
            if (wst != MSR_OK && st == MSR_OK)
                st = msr_dp_comm_failed("parameter allgather of bucket", prev, wst);
            for (int k = B->u0; k < B->u1 && st == MSR_OK; k++) {
                const msr_dp_unit_t *u = &dp->units[k];
                if (u->replicated)
                    continue;
                for (int j = 0; j < dp->size && st == MSR_OK; j++) {
                    size_t a, e;
                    msr_dp_block_of(u, j, &a, &e);
                    if (j != dp->rank)
                        st = msr_dp_copy(dp, arr + u->lo + a,
                                         B->packed + (size_t)j * B->blk + u->bpack, e - a);
                }
            }
            msr_status_t sst = msr_dp_sync(dp); /* before the buffer is kept for reuse */
            if (st == MSR_OK)
                st = sst;
            msr_dp_tmp_free(dp, &B->packed, size * B->blk);
            prev = -1;
        }
        if (b < dp->num_buckets && dp->buckets[b].req[0] != NULL)
            prev = b;
    }
    return st;
}

msr_status_t msr_dp_reduce_all(msr_dp_t *dp)
{
    dp->reduce_now = 1;
    dp->first_micro = dp->last_micro = 1;
    dp->gsq_now++;
    dp->next_start = 0;
    for (int b = 0; b < dp->num_buckets; b++)
        dp->buckets[b].started = dp->buckets[b].finished = 0;
    msr_status_t st = MSR_OK;
    for (int s = dp->num_segs - 1; s >= 0 && st == MSR_OK; s--) {
        /* a segment backward never touched has a zero gradient */
        if (dp->cfg.zero >= 2 && dp->segs[s].grads == NULL) {
            if ((dp->segs[s].grads = msr_dp_tmp_alloc(dp, msr_dp_seg_count(dp, s), 1)) == NULL) {
                st = MSR_ERR_NO_MEMORY;
                break;
            }
            dp->model->segments[s].grads = dp->segs[s].grads;
        }
        st = msr_dp_hook_grads_ready(dp, dp->model, s);
    }
    if (st != MSR_OK) {
        /* buckets whose packing failed must not be finished: only wait for
         * what is in flight and free the temporaries */
        (void)msr_dp_drain(dp);
        return st;
    }
    return msr_dp_micro_end(dp);
}

void msr_dp_set_model_parallel(msr_dp_t *dp, msr_comm_t *tp_comm, int tp_rank, msr_comm_t *pp_comm)
{
    dp->mp_comm[0] = tp_comm;
    dp->mp_comm[1] = pp_comm;
    dp->tp_rank = tp_rank;
    dp->any_order = 1;
}

void msr_dp_set_extra(msr_dp_t *dp, const msr_dp_extra_t *x)
{
    dp->extra = *x;
}

/* The squared norm of a unit's owned gradient; on tensor-parallel ranks
 * other than 0 only the tensors they hold first (rank 0 counts the
 * tp-replicated ones, the first of a kv head's ranks its replicated rows). */
static double unit_sumsq(const msr_dp_t *dp, const msr_dp_unit_t *u)
{
    const float *g = msr_dp_grad_at(dp, u);
    if (dp->tp_rank == 0)
        return msr_sumsq(g, u->own_n);
    double sum = 0.0;
    const msr_gpt_t *m = dp->model;
    size_t lo = u->own_lo, hi = u->own_lo + u->own_n;
    for (int k = 0; k < m->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &m->tensors[k];
        size_t a = MSR_MAX(lo, t->offset), b = MSR_MIN(hi, t->offset + t->count);
        if (a < b && t->tp_first)
            sum += msr_sumsq(g + (a - lo), b - a);
    }
    return sum;
}

msr_status_t msr_dp_update(msr_dp_t *dp, float lr, float max_norm, double loss_local,
                           double *loss_sum_p, double *norm_p)
{
    uint64_t t0 = msr_now_ns();
    double sumsq = 0.0;
    msr_status_t gst = dp->grads_off != NULL ? msr_dp_grads_sumsq(dp, &sumsq) : MSR_OK;
    if (gst != MSR_OK)
        return gst;
    for (int k = 0; k < dp->num_units && dp->grads_off == NULL; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        if (u->own_n == 0 || (u->replicated && dp->rank != 0))
            continue;
        sumsq += unit_sumsq(dp, u);
    }
    sumsq += dp->extra_sumsq;
    dp->extra_sumsq = 0.0;
    double red[2] = {loss_local, sumsq};
    if (dp->comm != NULL) {
        msr_status_t st =
            msr_comm_allreduce(dp->comm, MSR_IN_PLACE, red, 2, MSR_DTYPE_F64, MSR_OP_SUM);
        if (st != MSR_OK)
            return msr_dp_comm_failed("allreduce of the loss and gradient norm, step",
                                      (int)dp->opt->t + 1, st);
    }
    for (int i = 0; i < 2; i++) {
        if (dp->mp_comm[i] == NULL)
            continue;
        msr_status_t st =
            msr_comm_allreduce(dp->mp_comm[i], MSR_IN_PLACE, red, 2, MSR_DTYPE_F64, MSR_OP_SUM);
        if (st != MSR_OK)
            return msr_dp_comm_failed(i == 0
                                          ? "tensor-parallel allreduce of the loss and norm, step"
                                          : "pipeline allreduce of the loss and norm, step",
                                      (int)dp->opt->t + 1, st);
    }
    double norm = sqrt(red[1]);
    float scale = msr_clip_scale(norm, max_norm);
    msr_status_t st = MSR_OK;
    if (dp->offload != NULL) {
        msr_adamw_begin(dp->opt, lr, scale);
        st = msr_dp_offload_update(dp);
    } else if (dp->params_off != NULL) {
        msr_adamw_begin(dp->opt, lr, scale);
        st = msr_dp_params_update(dp);
    } else if (dp->cfg.zero == 0) {
        msr_adamw_update(dp->opt, dp->model->params, dp->model->grads, lr, scale);
    } else {
        msr_adamw_begin(dp->opt, lr, scale);
        for (int k = 0; k < dp->num_units; k++) {
            const msr_dp_unit_t *u = &dp->units[k];
            if (u->own_n > 0)
                msr_adamw_update_range(dp->opt, u->shard_off, u->own_n, msr_dp_param_at(dp, u),
                                       msr_dp_grad_at(dp, u));
        }
    }
    /* offloaded parameters are gathered a block at a time (dp_params.c) */
    if (st == MSR_OK && (dp->cfg.zero == 1 || dp->cfg.zero == 2) && dp->params_off == NULL)
        st = msr_dp_allgather_flat(dp, dp->model->params);
    dp->stats.update_ns += msr_now_ns() - t0;
    dp->stats.steps++;
    if (st != MSR_OK)
        return st;
    *loss_sum_p = red[0];
    *norm_p = norm;
    return MSR_OK;
}

/* msr_dp_seg_fn of msr_dp_gather_params: the segment into out. */
static msr_status_t copy_seg(void *arg, size_t offset, const float *p, size_t n)
{
    memcpy((float *)arg + offset, p, n * sizeof(float));
    return MSR_OK;
}

msr_status_t msr_dp_gather_params(msr_dp_t *dp, float *out)
{
    if (dp->params_off != NULL && dp->cfg.zero <= 2)
        return msr_dp_params_gather(dp, out);
    dp->pdir = 1; /* an offloaded shard's blocks read in forward's order */
    if (dp->cfg.zero <= 2) {
        memcpy(out, dp->model->params, dp->model->num_params * sizeof(float));
        return MSR_OK;
    }
    return msr_dp_gather_each(dp, copy_seg, out);
}

msr_status_t msr_dp_gather_each(msr_dp_t *dp, msr_dp_seg_fn fn, void *arg)
{
    if (dp->cfg.zero != 3)
        return msr_err(MSR_ERR_INVALID_ARG, "dp: segments are gathered under ZeRO-3 only (%d)",
                       dp->cfg.zero);
    dp->pdir = 1; /* an offloaded shard's blocks read in forward's order */
    for (int s = 0; s < dp->num_segs; s++) {
        msr_status_t st = msr_dp_seg_ready(dp, s);
        if (st == MSR_OK)
            st = fn(arg, dp->model->segments[s].offset, dp->model->segments[s].params,
                    msr_dp_seg_count(dp, s));
        msr_status_t dst = msr_dp_seg_drop(dp, s);
        if (st == MSR_OK && dst != MSR_OK)
            st = msr_dp_comm_failed("parameter gather of segment", s, dst);
        if (st != MSR_OK)
            return st;
    }
    return MSR_OK;
}

void msr_dp_memory(const msr_dp_t *dp, msr_dp_memory_t *mem)
{
    size_t P = dp->model->num_params, S = dp->shard_count, f = sizeof(float);
    mem->params = (dp->model->params != NULL ? P * f : 0) + (dp->pshard != NULL ? S * f : 0);
    if (dp->params_off != NULL) /* the blocks' are in the file */
        mem->params += msr_params_resident(dp->params_off) - msr_dp_params_moved(dp);
    mem->grads = (dp->model->grads != NULL ? P * f : 0) + (dp->gshard != NULL ? S * f : 0) +
                 msr_dp_grads_resident(dp);
    mem->optim = dp->offload != NULL ? msr_offload_resident(dp->offload) : 2 * dp->opt->count * f;
    mem->transient_peak = dp->transient_peak;
    mem->shard_elems = S;
    mem->replicated_elems = dp->rep_count;
}
