/* Data parallel's private functions (see dp.h), shared by its files:
 * dp.c (the layout, temporary buffers, create and destroy), dp_hooks.c
 * (the hooks that reduce buckets and gather ZeRO-3 segments while
 * forward and backward run), dp_step.c (the step's end), dp_pieces.c
 * (checkpoint pieces) and the parameters' offload (dp_params.c,
 * dp_params_update.c). */
#ifndef MSR_PARALLEL_DP_IMPL_H
#define MSR_PARALLEL_DP_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "layout/layout.h"
#include "parallel/dp.h"

/* Temporary buffers of n floats in dp's device memory, counted in
 * dp->transient and kept for reuse when freed (dp.c); tmp_alloc sets the
 * error text and returns NULL when out of memory (or the device failed);
 * zeroed: set to zero on the device's default stream; tmp_free sets *p to
 * NULL. */
float *msr_dp_tmp_alloc(msr_dp_t *dp, size_t n, int zeroed);
void msr_dp_tmp_free(msr_dp_t *dp, float **p, size_t n);

/* dp's copies and zeroing of n floats within its device (dp.c), queued on
 * the device's default stream: the buckets packed from the gradients, the
 * shards' blocks and the gathered segments. They may still run when the
 * call returns: msr_dp_sync waits for them before a communicator or the
 * host reads what they wrote (on the CPU device everything is done at
 * once). Each answers the device's failure (its text set), else MSR_OK. */
msr_status_t msr_dp_copy(msr_dp_t *dp, float *dst, const float *src, size_t n);
msr_status_t msr_dp_zero(msr_dp_t *dp, float *dst, size_t n);
msr_status_t msr_dp_sync(msr_dp_t *dp);

/* A copy of n floats between dp's device memory (the shard, the
 * allgather's buffer) and the host (the offload store's buffers, the
 * model's flat buffer), kind saying which way, on the device's default
 * stream: the host reads or reuses either side only after msr_dp_sync. */
static inline msr_status_t msr_dp_xfer(msr_dp_t *dp, float *dst, const float *src, size_t n,
                                       msr_device_copy_t kind)
{
    return msr_device_copy(dp->dev, dst, src, n * sizeof(float), kind, NULL);
}

/* The communicator's failure st, with what failed in front of its text. */
msr_status_t msr_dp_comm_failed(const char *what, int index, msr_status_t st);

/* Elements [a, e) of a sharded unit that belong to rank j's block. */
static inline void msr_dp_block_of(const msr_dp_unit_t *u, int j, size_t *a_p, size_t *e_p)
{
    uint64_t a, e;
    msr_layout_block_of(u->n, u->blk, j, &a, &e);
    *a_p = (size_t)a;
    *e_p = (size_t)e;
}

/* ZeRO-3 with the parameters offloaded: the elements of block k this rank
 * owns (they start at pz_off[k] in the shard space). */
static inline size_t msr_dp_z3_count(const msr_dp_t *dp, size_t k)
{
    return dp->pz_off[k + 1] - dp->pz_off[k];
}

/* Below ZeRO-3 with the parameters offloaded: block k's elements and
 * the block holding flat element s (pf_off[0] <= s < pf_off[pnb]). */
static inline size_t msr_dp_pf_count(const msr_dp_t *dp, size_t k)
{
    return dp->pf_off[k + 1] - dp->pf_off[k];
}

static inline size_t msr_dp_pf_block(const msr_dp_t *dp, size_t s)
{
    size_t k = 0;
    while (dp->pf_off[k + 1] <= s)
        k++;
    return k;
}

/* With the parameters offloaded: segment s's block index in the store,
 * or -1 when it is not one of the part's blocks (pfb .. pfb + pnb - 1). */
static inline int msr_dp_pf_seg(const msr_dp_t *dp, int s)
{
    return s >= dp->pfb && s < dp->pfb + dp->pnb ? s - dp->pfb : -1;
}

static inline size_t msr_dp_seg_count(const msr_dp_t *dp, int s)
{
    return dp->model->segments[s].count;
}

/* Where a unit's owned parameters and gradients are. */
static inline float *msr_dp_param_at(const msr_dp_t *dp, const msr_dp_unit_t *u)
{
    return dp->cfg.zero >= 3 ? dp->pshard + u->shard_off : dp->model->params + u->own_lo;
}

static inline float *msr_dp_grad_at(const msr_dp_t *dp, const msr_dp_unit_t *u)
{
    return dp->cfg.zero >= 2 ? dp->gshard + u->shard_off : dp->model->grads + u->own_lo;
}

/* Where a unit's owned moments start in the optimizer (flat in stage 0). */
static inline size_t msr_dp_moment_off(const msr_dp_t *dp, const msr_dp_unit_t *u)
{
    return dp->cfg.zero == 0 ? u->own_lo : u->shard_off;
}

/* Buckets and ZeRO-3 gathers (dp_hooks.c): bucket_start starts bucket b's
 * reduction (its errors prefixed as comm_failed does); bucket_finish moves a
 * reduced bucket's results into place and frees its buffer (the device's
 * failure, else MSR_OK); seg_ready
 * makes segment s's full parameters available and points the model at
 * them; seg_drop frees them (waiting for a gather in flight). */
msr_status_t msr_dp_bucket_start(msr_dp_t *dp, int b);
msr_status_t msr_dp_bucket_finish(msr_dp_t *dp, int b);
msr_status_t msr_dp_seg_ready(msr_dp_t *dp, int s);
msr_status_t msr_dp_seg_drop(msr_dp_t *dp, int s);

/* The model's hooks (dp_hooks.c; see model/gpt.h's msr_gpt_hooks_t). */
msr_status_t msr_dp_hook_acquire(void *arg, msr_gpt_t *model, int s, msr_gpt_pass_t pass);
msr_status_t msr_dp_hook_release(void *arg, msr_gpt_t *model, int s, msr_gpt_pass_t pass);
msr_status_t msr_dp_hook_grads_ready(void *arg, msr_gpt_t *model, int s);
msr_status_t msr_dp_hook_poll(void *arg, msr_gpt_t *model);

/* Waits for whatever is in flight and frees every temporary buffer (dp.c);
 * the first failure, or MSR_OK. */
msr_status_t msr_dp_drain(msr_dp_t *dp);

/* Gathers the sharded units of arr (a flat-indexed array: the parameters,
 * or stage 0's moments) from their owners (dp_step.c). */
/* The optimizer's moments moved to their file when cfg.offload asks for
 * the disk (MSR_OK and nothing done otherwise); the step's AdamW over them,
 * after msr_adamw_begin (dp_offload.c). Errors: the store's. */
msr_status_t msr_dp_offload_attach(msr_dp_t *dp);
msr_status_t msr_dp_offload_update(msr_dp_t *dp);

/* The gradient shard moved to its file when cfg.grads_offload asks for
 * the disk (after msr_dp_offload_attach; MSR_OK and nothing done
 * otherwise; MSR_ERR_CONFIG below ZeRO-2 or without the moments on disk);
 * detach closes it. grads_put puts unit u's reduced gradient src (set by
 * a step's first micro-batch, added after), a failure kept by the store
 * for grads_sumsq to report (a bucket finishes where nothing is
 * returned); grads_sumsq writes the last chunk and adds each owned unit's
 * squared norm to *sumsq_p in unit order, as msr_dp_update does from
 * memory; grads_resident the bytes the store and its buffer keep (0
 * without). */
msr_status_t msr_dp_grads_attach(msr_dp_t *dp);
void msr_dp_grads_detach(msr_dp_t *dp);
void msr_dp_grads_put(msr_dp_t *dp, const msr_dp_unit_t *u, const float *src);
msr_status_t msr_dp_grads_sumsq(msr_dp_t *dp, double *sumsq_p);
size_t msr_dp_grads_resident(const msr_dp_t *dp);

/* The blocks' parameters moved to their file when cfg.params_offload asks
 * for the disk (dp_params.c; MSR_OK and nothing done otherwise; they
 * are seeded from seed a block at a time, straight into the file, and
 * the rest of the flat buffer or shard with them); the
 * hooks' part (a block segment pointed at its buffer, read ahead in the
 * pass's direction; and given back); the step's AdamW, after
 * msr_adamw_begin, a block at a time; the whole parameters into out. */
msr_status_t msr_dp_params_attach(msr_dp_t *dp, uint64_t seed);
/* dp_seed.c: at the attach, the parameters from seed with the blocks (or,
 * under ZeRO-3, the rank's shares of them) written straight into the
 * store a block at a time, never all held. */
msr_status_t msr_dp_params_seed(msr_dp_t *dp, uint64_t seed);
void msr_dp_params_detach(msr_dp_t *dp);
msr_status_t msr_dp_params_acquire(msr_dp_t *dp, int s, msr_gpt_pass_t pass);
msr_status_t msr_dp_params_release(msr_dp_t *dp, int s);
msr_status_t msr_dp_params_update(msr_dp_t *dp);
msr_status_t msr_dp_params_gather(msr_dp_t *dp, float *out);
/* With the moments offloaded too: AdamW over flat elements [off, off + n),
 * shard elements [s, s + n), with their gradients g and moments m and v,
 * which come in increasing order (the blocks they reach acquired in
 * turn; at ZeRO 1-2 each block passed gathered from the other ranks);
 * cursor_end (dirty 1) writes the last one back and at ZeRO 1-2 gathers
 * the rest, once the chunks are done (dirty 0, after an error: the block
 * held given back unwritten). */
msr_status_t msr_dp_params_update_moments(msr_dp_t *dp, size_t s, size_t off, size_t n,
                                          const float *g, float *m, float *v);
msr_status_t msr_dp_params_cursor_end(msr_dp_t *dp, int dirty);
msr_status_t msr_dp_params_hold(msr_dp_t *dp, int read);
msr_status_t msr_dp_params_drop(msr_dp_t *dp, int write);
/* ZeRO 1-2: the other ranks' elements of flat [lo, hi) into base (element
 * lo at base[0]) from their owners (collective); gather_floats is the
 * floats of the buffer that takes (0: none). */
msr_status_t msr_dp_params_gather_range(msr_dp_t *dp, size_t lo, size_t hi, float *base);
size_t msr_dp_params_gather_floats(msr_dp_t *dp, size_t lo, size_t hi);
/* A restore under the parameters' offload (dp_offload.c), never the whole
 * flat buffer or shard: load_begin (from msr_dp_params_hold with read 0)
 * takes one block's buffer; load copies n parameters of flat element lo
 * on from src (below ZeRO-3), the resident ones into the flat buffer, a
 * block's into that buffer (the block read from its file first, written
 * back when the pieces move to another block); load_shard likewise for
 * ZeRO-3's n elements of shard offset s, a block's share into that
 * buffer, the rest into the shard; load_gather (ZeRO 1-2's
 * msr_dp_load_end) completes the resident elements and then each block in
 * turn from the other ranks (collective); load_end (from
 * msr_dp_params_drop) writes the last block back (write 1) and frees the
 * buffer. Errors: the store's (offload_params.h), MSR_ERR_NO_MEMORY, the
 * communicator's. */
msr_status_t msr_dp_params_load_begin(msr_dp_t *dp);
msr_status_t msr_dp_params_load(msr_dp_t *dp, size_t lo, size_t n, const float *src);
msr_status_t msr_dp_params_load_shard(msr_dp_t *dp, size_t s, size_t n, const float *src);
msr_status_t msr_dp_params_load_gather(msr_dp_t *dp);
msr_status_t msr_dp_params_load_end(msr_dp_t *dp, int write);
/* ZeRO-3: where a gather of segment s copies this rank's elements from:
 * unit u's at (*src_p)[u->shard_off - *off_p] (the shard buffer, or the
 * block's store buffer, read and checked, its next block read ahead);
 * shard_end gives the block back. The bytes of the shard buffer the
 * store holds instead (0 without it): for msr_dp_memory. */
msr_status_t msr_dp_params_shard_begin(msr_dp_t *dp, int s, const float **src_p, size_t *off_p);
msr_status_t msr_dp_params_shard_end(msr_dp_t *dp, int s);
/* ZeRO-3: where a replicated segment s's parameters are: the shard
 * buffer, or a block's store buffer, read and checked, held until the
 * segment is dropped (msr_dp_params_release). */
msr_status_t msr_dp_params_replicated(msr_dp_t *dp, int s, float **params_p);
size_t msr_dp_params_moved(const msr_dp_t *dp);

msr_status_t msr_dp_allgather_flat(msr_dp_t *dp, float *arr);

#endif
