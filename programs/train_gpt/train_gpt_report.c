/* train_gpt's --report (train_gpt.h): one line per rank with the bytes it
 * holds and where its time went, and the MoE blocks' routing. */
#include <stdio.h>

#include "base/alloc.h"
#include "base/status.h"
#include "base/util.h"
#include "model/moe.h"
#include "programs/train_gpt/train_gpt.h"

/* This process's peak resident memory in KiB (VmHWM), 0 if unknown. */
static long peak_rss_kib(void)
{
    return msr_proc_status_kib("VmHWM");
}

/* The work space the rank's runtime allocated besides parameters, state
 * and kept activations: the whole model's (msr_gpt_carve_work, with its
 * own inputs and targets) or the model-parallel runtime's (point_work),
 * and the trainer's inputs and targets (every micro-batch of a step under
 * the model-parallel runtime, one otherwise). */
static size_t work_bytes(const msr_trainer_t *tr)
{
    size_t N = (size_t)tr->cfg.micro_batch * (size_t)tr->cfg.model.max_seq;
    if (tr->mp != NULL)
        return msr_mp_stats(tr->mp)->work_bytes + 2 * N * (size_t)tr->cfg.grad_accum * sizeof(int);
    size_t model = tr->model->work_count * sizeof(float) +
                   (tr->model->inputs != NULL ? 2 * N * sizeof(int) : 0);
    return model + 2 * N * sizeof(int);
}

msr_status_t train_gpt_moe_report(msr_trainer_t *tr, const job_t *job, uint64_t step)
{
    int E = tr->cfg.model.moe.experts, n = msr_moe_blocks(tr->model->moe);
    int64_t *s = msr_calloc((size_t)n * (size_t)(E + 2), sizeof *s);
    if (s == NULL)
        return MSR_ERR_NO_MEMORY;
    msr_status_t st = msr_trainer_moe_stats(tr, s);
    for (int i = 0; i < n && st == MSR_OK && job->rank == 0; i++) {
        const int64_t *b = s + (size_t)i * (size_t)(E + 2);
        char load[4096];
        size_t used = 0;
        load[0] = '\0';
        for (int e = 0; e < E && used < sizeof load; e++)
            used += (size_t)snprintf(load + used, sizeof load - used, "%s%lld", e > 0 ? " " : "",
                                     (long long)b[2 + e]);
        fprintf(stderr,
                "train_gpt: moe step %llu block %d (layer %d): %lld tokens, %lld of %lld "
                "choices dropped; load %s\n",
                (unsigned long long)step, i, (i + 1) * tr->cfg.model.moe.every - 1, (long long)b[0],
                (long long)b[1], (long long)b[0] * tr->cfg.model.moe.top_k, load);
    }
    msr_free(s);
    return st;
}

/* A parameter store's counters and what it keeps, on one line. */
static void store_line(int rank, const char *what, const msr_params_t *p)
{
    const msr_params_stats_t *ps = msr_params_stats(p);
    fprintf(stderr,
            "train_gpt: rank %d %s: %llu written, %llu read back, %llu not read ahead, %llu reads "
            "ahead given up; %zu bytes resident (%s, %s)\n",
            rank, what, (unsigned long long)ps->writes, (unsigned long long)ps->reads,
            (unsigned long long)ps->misses, (unsigned long long)ps->dropped, msr_params_resident(p),
            msr_params_path(p), msr_params_engine(p));
}

/* One line per rank: bytes held and where the time went. */
void train_gpt_report(const msr_trainer_t *tr, const job_t *job)
{
    msr_dp_memory_t m;
    msr_dp_memory(tr->dp, &m);
    const msr_dp_stats_t *s = &tr->dp->stats;
    double n = s->steps > 0 ? (double)s->steps : 1.0;
    fprintf(stderr,
            "train_gpt: rank %d zero %d: params %zu grads %zu optim %zu transient-peak %zu bytes "
            "(shard %zu of %zu elements, %zu replicated); per step ms: forward %.2f backward "
            "%.2f bucket-wait %.2f exposed %.2f update %.2f gather-wait %.2f; buckets %d; work %zu "
            "bytes; peak RSS %ld KiB; gathers %llu\n",
            job->rank, tr->cfg.par.zero, m.params, m.grads, m.optim, m.transient_peak,
            m.shard_elems, tr->model->num_params, m.replicated_elems,
            1e-6 * (double)s->forward_ns / n, 1e-6 * (double)s->backward_ns / n,
            1e-6 * (double)s->wait_ns / n, 1e-6 * (double)s->exposed_ns / n,
            1e-6 * (double)s->update_ns / n, 1e-6 * (double)s->gather_ns / n, tr->dp->num_buckets,
            work_bytes(tr), peak_rss_kib(), (unsigned long long)s->gathers);
    if (tr->model->prod != NULL) {
        fprintf(stderr,
                "train_gpt: rank %d precision %s: bf16 operand scratch %zu bytes; gradients "
                "summed in %s\n",
                job->rank, msr_precision_name(msr_products_precision(tr->model->prod)),
                msr_products_scratch_bytes(tr->model->prod),
                tr->cfg.par.grad_bf16 ? "bf16" : "fp32");
    }
    const msr_params_t *po = msr_dp_params_store(tr->dp);
    if (po != NULL) {
        const msr_params_stats_t *ps = msr_params_stats(po);
        store_line(job->rank, "parameter offload", po);
        if (ps->restore_peak > 0) /* a resume's: below ZeRO-3 about two blocks */
            fprintf(stderr,
                    "train_gpt: rank %d restore: the parameters' blocks held %llu bytes at most "
                    "(blocks of %zu bytes); %llu blocks read back, %llu written\n",
                    job->rank, (unsigned long long)ps->restore_peak,
                    msr_dp_params_block_floats(tr->dp) * sizeof(float),
                    (unsigned long long)tr->dp->pload_reads,
                    (unsigned long long)tr->dp->pload_writes);
    }
    if (tr->dp->grads_off != NULL) {
        const msr_grads_stats_t *gs = msr_grads_stats(tr->dp->grads_off);
        fprintf(stderr,
                "train_gpt: rank %d gradient offload: %llu chunks written, %llu read back (%llu "
                "read ahead, %llu when wanted), %llu taken back from their write; %zu bytes "
                "resident (%s, %s)\n",
                job->rank, (unsigned long long)gs->writes, (unsigned long long)gs->reads,
                (unsigned long long)gs->ahead, (unsigned long long)gs->misses,
                (unsigned long long)gs->kept, msr_grads_resident(tr->dp->grads_off),
                msr_grads_path(tr->dp->grads_off), msr_grads_engine(tr->dp->grads_off));
    }
    if (tr->model->moe != NULL) {
        msr_train_expert_bytes_t eb = msr_trainer_expert_bytes(tr);
        fprintf(stderr,
                "train_gpt: rank %d experts: %d of %d per MoE block held here: params %zu grads "
                "%zu optim %zu bytes; work space %zu bytes\n",
                job->rank, msr_moe_local_experts(tr->model->moe), tr->cfg.model.moe.experts,
                eb.params, eb.grads, eb.optim, eb.work);
    }
    if (tr->epf != NULL)
        store_line(job->rank, "experts' parameter offload", tr->epf);
    if (tr->egf != NULL)
        store_line(job->rank, "experts' gradient offload", tr->egf);
    const msr_train_eval_stats_t *ev = &tr->eval_stats;
    if (ev->runs > 0) /* the job's counts above include these */
        fprintf(stderr,
                "train_gpt: rank %d validation: %llu runs: gathers %llu, parameter blocks read "
                "%llu, experts' blocks read %llu (counted in the lines above too)\n",
                job->rank, (unsigned long long)ev->runs, (unsigned long long)ev->gathers,
                (unsigned long long)ev->param_reads, (unsigned long long)ev->expert_reads);
    if (tr->mp != NULL) {
        const msr_mp_stats_t *ms = msr_mp_stats(tr->mp);
        double steps = ms->steps > 0 ? (double)ms->steps : 1.0;
        fprintf(stderr,
                "train_gpt: rank %d mp: stage %d of %d, cp rank %d of %d, tp rank %d of %d: "
                "step %.2f ms, busy %.2f ms, bubble %.4f, receive wait %.2f ms; activations peak "
                "%zu bytes (a chunk's micro-batch keeps %zu, with the head %zu); frames' buffers "
                "%zu bytes\n",
                job->rank, tr->mesh->pp_rank, tr->mesh->pp, tr->mesh->cp_rank, tr->mesh->cp,
                tr->mesh->tp_rank, tr->mesh->tp, 1e-6 * (double)ms->step_ns / steps,
                1e-6 * (double)ms->busy_ns / steps,
                ms->step_ns > 0 ? 1.0 - (double)ms->busy_ns / (double)ms->step_ns : 0.0,
                1e-6 * (double)ms->recv_wait_ns / steps, ms->acts_peak, ms->frame_bytes[0],
                ms->frame_bytes[1], ms->frames_held);
        const msr_acts_t *a = msr_mp_acts(tr->mp);
        if (a != NULL) {
            const msr_acts_stats_t *as = msr_acts_stats(a);
            fprintf(stderr,
                    "train_gpt: rank %d activation offload: %llu written, %llu read back, %llu "
                    "not read ahead, %llu waits for a write (%s, %s)\n",
                    job->rank, (unsigned long long)as->spills, (unsigned long long)as->fetches,
                    (unsigned long long)as->misses, (unsigned long long)as->write_wait,
                    msr_acts_path(a), msr_acts_engine(a));
        }
    }
}
