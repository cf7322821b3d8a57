/* The tied embedding across a pipeline (see mp.h): the first stage's wte
 * sent to the last stage's head copy after each update, gathered over dp
 * first under ZeRO-3, and the head's gradient added back to the first
 * stage's. */
#include <stdint.h>

#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "parallel/mp_impl.h"

/* The pipeline keeps a copy of the tied wte on its last stage: pp > 1 and
 * a GPT (a Llama's lm_head is its own, on the last stage). */
int msr_mp_tied(const msr_mp_t *mp)
{
    return mp->pp > 1 && mp->model->cfg.arch != MSR_GPT_ARCH_LLAMA;
}

void msr_mp_set_dp(msr_mp_t *mp, msr_dp_t *dp)
{
    mp->dp = dp;
}

msr_status_t msr_mp_tied_reserve(msr_mp_t *mp)
{
    if (!msr_mp_tied(mp) || mp->pr != 0 || mp->cfg.zero < 3 || mp->dp == NULL)
        return MSR_OK;
    return msr_dp_gather_reserve(mp->dp, mp->model->seg_embed);
}

/* The first stage's send of its wte; under ZeRO-3 the embedding segment is
 * gathered over dp around it (each dp rank sends its own last-stage peer
 * the whole wte), as a forward's use gathers it. */
static msr_status_t send_tied(msr_mp_t *mp, size_t n)
{
    msr_gpt_t *m = mp->model;
    int z3 = mp->cfg.zero >= 3;
    if (z3 && mp->dp == NULL)
        return msr_err(MSR_ERR_STATE, "mp: ZeRO-3's tied embedding synced before dp was set");
    msr_status_t st = z3 ? msr_mp_fwd_hook(mp, m->seg_embed, 1) : MSR_OK;
    if (st != MSR_OK)
        return st;
    st = msr_comm_send(mp->mesh->pp_comm, m->segments[m->seg_embed].params, n, MSR_DTYPE_F32,
                       mp->pp - 1, MSR_COMM_TAG_MAX);
    if (st != MSR_OK)
        st = msr_mp_failed("sending the tied embedding to the last stage", st);
    msr_status_t rst = z3 ? msr_mp_fwd_hook(mp, m->seg_embed, 0) : MSR_OK;
    return st != MSR_OK ? st : rst;
}

msr_status_t msr_mp_sync_tied(msr_mp_t *mp)
{
    if (!msr_mp_tied(mp))
        return MSR_OK;
    size_t n = (size_t)mp->d.Vl * (size_t)mp->d.C;
    if (mp->pr == 0)
        return send_tied(mp, n);
    if (mp->pr != mp->pp - 1)
        return MSR_OK;
    msr_status_t st =
        msr_comm_recv(mp->mesh->pp_comm, mp->head_wte, n, MSR_DTYPE_F32, 0, MSR_COMM_TAG_MAX);
    return st != MSR_OK ? msr_mp_failed("sending the tied embedding to the last stage", st)
                        : MSR_OK;
}

/* The first stage adds the head's wte gradient (sent by the last stage)
 * to its own; the segment must be acquired. */
msr_status_t msr_mp_tied_add(msr_mp_t *mp)
{
    msr_gpt_t *m = mp->model;
    size_t n = (size_t)mp->d.Vl * (size_t)mp->d.C;
    float *tmp = mp->w.dln; /* (N, C) is free here; used if it is large enough */
    float *buf = tmp;
    if (n > mp->d.N * (size_t)mp->d.C && msr_mp_buf_alloc(mp, n, 0, &buf) != MSR_OK)
        return MSR_ERR_NO_MEMORY;
    uint64_t a = msr_now_ns();
    msr_status_t st =
        msr_comm_recv(mp->mesh->pp_comm, buf, n, MSR_DTYPE_F32, mp->pp - 1, MSR_COMM_TAG_MAX - 1);
    if (st == MSR_OK) {
        float *g = m->segments[m->seg_embed].grads;
        for (size_t i = 0; i < n; i++)
            g[i] += buf[i];
    }
    msr_mp_span_add(mp, 1, a, msr_now_ns(), "tied wte grad");
    if (buf != tmp)
        msr_mp_buf_free(mp, buf);
    return st != MSR_OK ? msr_mp_failed("receiving the tied embedding's gradient", st) : MSR_OK;
}
