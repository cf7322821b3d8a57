/* The validation loss (see eval.h). */
#include "parallel/eval.h"

#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "model/err_call.h"
#include "model/moe.h"
#include "parallel/ckpt_full.h"
#include "parallel/train_impl.h"

void msr_eval_fill(const msr_dataset_t *val, int T, uint64_t first, int n, int *inputs,
                   int *targets)
{
    uint64_t W = msr_sampler_windows(val->size, T);
    for (int r = 0; r < n; r++) {
        size_t o = (size_t)(((first + (uint64_t)r) % W) * (uint64_t)T);
        int *in = inputs + (size_t)r * T, *tg = targets + (size_t)r * T;
        for (int t = 0; t < T; t++) {
            in[t] = msr_dataset_token(val, o + (size_t)t);
            tg[t] = msr_dataset_token(val, o + (size_t)t + 1);
        }
    }
}

/* The world the trainer's ranks form, and this rank's place in it. */
static msr_comm_t *world_of(const msr_trainer_t *tr)
{
    if (tr->mesh != NULL)
        return tr->mesh->world;
    return tr->dp->comm;
}

/* Whether any rank of world failed (failed: this rank's), so that all
 * go on or all stop together and none waits in a collective for a rank
 * that left. */
static msr_status_t any_failed(msr_comm_t *world, int failed, int *any_p)
{
    int64_t f = failed;
    msr_status_t st = MSR_OK;
    if (world != NULL)
        st = msr_comm_allreduce(world, MSR_IN_PLACE, &f, 1, MSR_DTYPE_I64, MSR_OP_MAX);
    if (st != MSR_OK)
        return msr_err_call(st, "eval: agreeing on the ranks' state");
    *any_p = f != 0;
    return MSR_OK;
}

/* The world's payloads, sent one at a time from their rank as
 * msr_ckpt_gather asks for them (every rank asks for the same ones in the
 * same order: rank order, each once, stopping where the same bytes fail to
 * decode), so that a rank holds one payload beside its own. */
typedef struct payloads {
    msr_comm_t *world;
    int rank;
    void *mine;
    size_t len;
} payloads_t;

static msr_status_t fetch_payload(void *arg, int r, void **buf_p, size_t *len_p)
{
    const payloads_t *p = arg;
    int64_t len = r == p->rank ? (int64_t)p->len : 0;
    msr_status_t st;
    if (p->world != NULL &&
        (st = msr_comm_broadcast(p->world, &len, 1, MSR_DTYPE_I64, r)) != MSR_OK)
        return msr_err_call(st, "eval: the length of rank %d's payload", r);
    void *buf = msr_malloc(len > 0 ? (size_t)len : 1); /* decode wants 8-byte alignment */
    int any = 0;
    if ((st = any_failed(p->world, buf == NULL, &any)) != MSR_OK || any) {
        msr_free(buf);
        if (st != MSR_OK)
            return st;
        return buf == NULL ? msr_err(MSR_ERR_NO_MEMORY,
                                     "eval: out of memory for rank %d's payload (%lld bytes)", r,
                                     (long long)len)
                           : msr_err(MSR_ERR_STATE, "eval: another rank ran out of memory");
    }
    if (r == p->rank)
        memcpy(buf, p->mine, (size_t)len);
    if (p->world != NULL &&
        (st = msr_comm_broadcast(p->world, buf, (uint64_t)len, MSR_DTYPE_U8, r)) != MSR_OK) {
        msr_free(buf);
        return msr_err_call(st, "eval: rank %d's payload", r);
    }
    *buf_p = buf;
    *len_p = (size_t)len;
    return MSR_OK;
}

/* This rank's payload of the trainer's state in p, sealed (decode checks
 * the CRCs), when every rank's snapshot succeeded. */
static msr_status_t snapshot(msr_trainer_t *tr, payloads_t *p)
{
    int unsealed = tr->unsealed_snapshots;
    tr->unsealed_snapshots = 0;
    msr_status_t st = msr_trainer_snapshot(tr, "eval", &p->mine, &p->len);
    tr->unsealed_snapshots = unsealed;
    int any = 0;
    msr_status_t cs = any_failed(p->world, st != MSR_OK, &any);
    if (st == MSR_OK && (cs != MSR_OK || any)) {
        msr_free(p->mine);
        p->mine = NULL;
        st = cs != MSR_OK ? cs : msr_err(MSR_ERR_STATE, "eval: another rank's snapshot failed");
    }
    return st;
}

/* The whole model with the parameters the world's payloads hold: the
 * flat parameters, then a MoE model's experts in the whole model's expert
 * numbering (the payload's, parallel/train.h), into a store that holds
 * them all. */
static msr_status_t whole_model(msr_trainer_t *tr, msr_gpt_t **model_p)
{
    msr_comm_t *world = world_of(tr);
    int size = world != NULL ? msr_comm_size(world) : 1;
    payloads_t p = {world, world != NULL ? msr_comm_rank(world) : 0, NULL, 0};
    msr_status_t st = snapshot(tr, &p);
    if (st != MSR_OK)
        return st;
    msr_gpt_t *model = NULL;
    size_t P = msr_gpt_num_params(&tr->cfg.model), E = msr_moe_num_params(&tr->cfg.model),
           n = P + E;
    float *buf = msr_malloc(n * sizeof(float) + 1); /* the parameters, not the moments */
    /* a job that chunks its head (--head-chunk) holds no (N, V) buffer
     * here either */
    int hc = tr->cfg.mp.head_chunk;
    st = buf == NULL ? msr_err(MSR_ERR_NO_MEMORY, "eval: out of memory for %zu parameters", n)
         : hc > 0
             ? msr_gpt_create_chunked(&tr->cfg.model, tr->cfg.micro_batch, hc, MSR_GPT_NO_GRADS,
                                      &model)
             : msr_gpt_create_ex(&tr->cfg.model, tr->cfg.micro_batch, MSR_GPT_NO_GRADS, &model);
    /* the validation loss in the precision the job trains in */
    if (st == MSR_OK)
        st = msr_gpt_set_kernels(model, tr->cfg.kernels);
    if (st == MSR_OK)
        st = msr_gpt_set_precision(model, tr->cfg.precision);
    if (st == MSR_OK && E > 0 && (model->moe == NULL || msr_moe_count(model->moe) != E))
        st = msr_err(MSR_ERR_STATE, "eval: the whole model's store does not hold %zu experts", E);
    /* the payloads are broadcast: every rank gathers them or none */
    int any = 0;
    msr_status_t cs = any_failed(world, st != MSR_OK, &any);
    if (st == MSR_OK && (cs != MSR_OK || any))
        st = cs != MSR_OK ? cs : msr_err(MSR_ERR_STATE, "eval: another rank's model failed");
    msr_tckpt_header_t h;
    if (st == MSR_OK)
        st = msr_ckpt_gather(fetch_payload, &p, size, "eval", n, buf, NULL, NULL, &h);
    if (st == MSR_OK) {
        memcpy(model->params, buf, P * sizeof(float));
        if (E > 0)
            memcpy(msr_moe_params(model->moe), buf + P, E * sizeof(float));
    }
    msr_free(buf);
    msr_free(p.mine);
    if (st != MSR_OK) {
        msr_gpt_destroy(model);
        return st;
    }
    *model_p = model;
    return MSR_OK;
}

/* Where the forwards run: on the trainer's own model where it is data
 * parallel alone (the whole model, its segments got through dp's hooks as
 * a step's forward gets them: ZeRO-3's gathers, the parameters' and the
 * experts' offload's reads, expert parallel's exchanges), on its own part
 * where it is model parallel (msr_mp_eval), and on a whole copy gathered
 * from the ranks' payloads for a MoE model under model parallel whose
 * micro-batches are more than one sequence (its capacity wants one
 * sequence a pass; the runtime's micro-batches are the layout's). */
typedef enum { EVAL_WHOLE_COPY, EVAL_DP, EVAL_MP } eval_where_t;

static eval_where_t where_of(const msr_trainer_t *tr)
{
    if (tr->mp == NULL)
        return EVAL_DP;
    /* a MoE model's passes are one sequence: model parallel's are when
     * its micro-batch is one and no cp rank holds a part of it */
    if (tr->cfg.model.moe.experts > 0 && (tr->cfg.micro_batch != 1 || tr->cfg.cp > 1))
        return EVAL_WHOLE_COPY;
    return EVAL_MP;
}

/* The chunks of `chunk` rows from this rank's first, every size-th: the
 * loss of each summed (its mean times its rows) into *sum_p. */
static msr_status_t forwards(msr_trainer_t *tr, msr_gpt_t *model, const msr_gpt_hooks_t *hooks,
                             const msr_dataset_t *val, uint64_t R, int chunk, int rank, int size,
                             int *in, double *sum_p)
{
    int B = tr->cfg.micro_batch, T = tr->cfg.model.max_seq;
    uint64_t chunks = (R + (uint64_t)chunk - 1) / (uint64_t)chunk;
    msr_status_t st = MSR_OK;
    for (uint64_t c = (uint64_t)rank; c < chunks && st == MSR_OK; c += (uint64_t)size) {
        double loss;
        int *tg = in + (size_t)B * (size_t)T, n = (int)MSR_MIN((uint64_t)chunk, R - c * chunk);
        msr_eval_fill(val, T, c * (uint64_t)chunk, n, in, tg);
        if (hooks != NULL && ((st = msr_dp_eval_forward(tr->dp)) != MSR_OK ||
                              (st = msr_train_experts_disk_ahead(tr)) != MSR_OK))
            break;
        st = msr_gpt_forward(model, in, tg, n, T, hooks, &loss);
        *sum_p += loss * n; /* the chunk's mean over its n x T tokens */
    }
    return st;
}

/* Model parallel: each replica (dp rank) takes its grad_accum
 * micro-batches of every global batch, as a step does; every rank of the
 * replica runs them through its part. The last stage's tp rank 0 adds
 * each micro-batch's mean (each cp rank its share; a MoE model's
 * load-balancing losses from every stage's tp rank 0) times its rows. */
static msr_status_t forwards_mp(msr_trainer_t *tr, const msr_dataset_t *val, int batches, int *in,
                                double *sum_p)
{
    const msr_train_config_t *c = &tr->cfg;
    int B = c->micro_batch, T = c->model.max_seq, A = c->grad_accum;
    uint64_t G = (uint64_t)B * (uint64_t)A * (uint64_t)c->dp;
    int *tg = in + (size_t)A * (size_t)B * (size_t)T;
    msr_status_t st = MSR_OK;
    for (int b = 0; b < batches && st == MSR_OK; b++) {
        double loss = 0.0;
        uint64_t first = (uint64_t)b * G + (uint64_t)c->dp_rank * (uint64_t)A * (uint64_t)B;
        msr_eval_fill(val, T, first, A * B, in, tg);
        st = msr_mp_eval(tr->mp, tr->dp, in, tg, A, &loss);
        *sum_p += loss * B;
    }
    return st;
}

msr_status_t msr_trainer_eval(msr_trainer_t *tr, const msr_dataset_t *val, int batches,
                              double *loss_p)
{
    if (batches < 1)
        return msr_err(MSR_ERR_CONFIG, "eval: %d validation batches", batches);
    int B = tr->cfg.micro_batch, T = tr->cfg.model.max_seq;
    /* a MoE block's capacity depends on the tokens of a forward pass: one
     * sequence a pass, whatever the layout's micro-batch */
    int chunk = tr->cfg.model.moe.experts > 0 ? 1 : B;
    msr_comm_t *world = world_of(tr);
    int size = world != NULL ? msr_comm_size(world) : 1,
        rank = world != NULL ? msr_comm_rank(world) : 0;
    eval_where_t where = where_of(tr);
    /* the model-parallel replica takes a step's micro-batches at once */
    size_t rows = where == EVAL_MP ? (size_t)B * (size_t)tr->cfg.grad_accum : (size_t)B;
    int *in = msr_malloc(2 * rows * (size_t)T * sizeof(int));
    msr_gpt_t *model = NULL;
    const msr_gpt_hooks_t *hooks = NULL;
    msr_status_t st = MSR_OK;
    if (where != EVAL_WHOLE_COPY) {
        /* the forwards gather and pass activations on: every rank makes
         * them or none */
        int any = 0;
        if ((st = any_failed(world, in == NULL, &any)) == MSR_OK && any && in != NULL)
            st = msr_err(MSR_ERR_STATE, "eval: another rank ran out of memory");
        if (st == MSR_OK && !any && where == EVAL_DP) {
            model = tr->model;
            hooks = msr_dp_eval_begin(tr->dp);
            if (model->moe != NULL)
                msr_moe_select(model->moe, 0, 0);
        }
    } else {
        st = whole_model(tr, &model);
    }
    if (st == MSR_OK && in == NULL)
        st = msr_err(MSR_ERR_NO_MEMORY, "eval: out of memory for a batch of %zu x %d", rows, T);
    /* the rows: batches global batches; chunks of `chunk` rows shared out
     * (in place: G / B chunks a batch, as many on every rank) */
    uint64_t G = (uint64_t)B * (uint64_t)tr->cfg.grad_accum * (uint64_t)tr->cfg.dp,
             R = G * (uint64_t)batches;
    double sum = 0.0;
    if (st == MSR_OK && where == EVAL_MP)
        st = forwards_mp(tr, val, batches, in, &sum);
    else if (st == MSR_OK)
        st = forwards(tr, model, hooks, val, R, chunk, rank, size, in, &sum);
    msr_free(in);
    if (hooks != NULL) {
        if (model->moe != NULL)
            msr_moe_select(model->moe, 0, 1);
        msr_status_t est = msr_dp_eval_end(tr->dp);
        st = st != MSR_OK ? st : est;
        if (st == MSR_OK)
            st = msr_train_experts_disk_ahead(tr);
    } else if (where == EVAL_WHOLE_COPY) {
        msr_gpt_destroy(model);
    }
    /* every rank joins the sum, a failed one with NaN, so none waits */
    double out[2] = {st == MSR_OK ? sum : 0.0, st == MSR_OK ? 0.0 : 1.0};
    msr_status_t cs = MSR_OK;
    if (world != NULL)
        cs = msr_comm_allreduce(world, MSR_IN_PLACE, out, 2, MSR_DTYPE_F64, MSR_OP_SUM);
    if (st != MSR_OK)
        return st;
    if (cs != MSR_OK)
        return msr_err_call(cs, "eval: summing the validation losses");
    if (out[1] > 0.0)
        return msr_err(MSR_ERR_STATE, "eval: another rank's validation failed");
    *loss_p = out[0] / (double)R;
    return MSR_OK;
}
