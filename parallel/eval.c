/* The validation loss (see eval.h). */
#include "parallel/eval.h"

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "model/err_call.h"
#include "model/moe.h"
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

/* The counters the validation's forwards add to. */
static msr_train_eval_stats_t counters(const msr_trainer_t *tr)
{
    const msr_params_t *po = msr_dp_params_store(tr->dp);
    return (msr_train_eval_stats_t){
        0,
        tr->dp->stats.gathers,
        po != NULL ? msr_params_stats(po)->reads : 0,
        tr->epf != NULL ? msr_params_stats(tr->epf)->reads : 0,
    };
}

/* Where the forwards run: on the trainer's own model where it is data
 * parallel alone (the whole model, its segments got through dp's hooks as
 * a step's forward gets them: ZeRO-3's gathers, the parameters' and the
 * experts' offload's reads, expert parallel's exchanges), and on its own
 * part where it is model parallel (msr_mp_eval, a MoE model one sequence
 * a pass there too). */
typedef enum { EVAL_DP, EVAL_MP } eval_where_t;

static eval_where_t where_of(const msr_trainer_t *tr)
{
    return tr->mp == NULL ? EVAL_DP : EVAL_MP;
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
        if (hooks != NULL && (st = msr_dp_eval_forward(tr->dp)) != MSR_OK)
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
    msr_train_eval_stats_t before = counters(tr);
    /* the model-parallel replica takes a step's micro-batches at once */
    size_t rows = where == EVAL_MP ? (size_t)B * (size_t)tr->cfg.grad_accum : (size_t)B;
    int *in = msr_malloc(2 * rows * (size_t)T * sizeof(int));
    msr_gpt_t *model = NULL;
    const msr_gpt_hooks_t *hooks = NULL;
    msr_status_t st = MSR_OK;
    /* the forwards gather and pass activations on: every rank makes them
     * or none */
    int any = 0;
    if ((st = any_failed(world, in == NULL, &any)) == MSR_OK && any && in != NULL)
        st = msr_err(MSR_ERR_STATE, "eval: another rank ran out of memory");
    if (st == MSR_OK && !any && where == EVAL_DP) {
        model = tr->model;
        hooks = msr_dp_eval_begin(tr->dp);
        if (model->moe != NULL)
            msr_moe_select(model->moe, 0, 0);
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
    }
    msr_train_eval_stats_t after = counters(tr);
    tr->eval_stats.runs++;
    tr->eval_stats.gathers += after.gathers - before.gathers;
    tr->eval_stats.param_reads += after.param_reads - before.param_reads;
    tr->eval_stats.expert_reads += after.expert_reads - before.expert_reads;
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
