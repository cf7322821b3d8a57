/* train_gpt's safetensors writes (train_gpt.h): --export-safetensors and
 * --dump-grads. Each rank pwrites its own rows into the one file whose
 * header rank 0 wrote first; under ZeRO-3 the flat parameters are
 * gathered a segment at a time and a MoE model's experts' shards with
 * replicas a block at a time, each written before the next is gathered,
 * so no rank holds the whole model. Names and layouts: train_gpt_st.h. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "model/moe.h"
#include "model/safetensors.h"
#include "programs/train_gpt/train_gpt.h"
#include "programs/train_gpt/train_gpt_st.h"

/* ---- --export-safetensors ---- */

/* Where an export reads a rank's parameters: the flat ones at params
 * and the experts' at experts, in place (gathered, or resident); or,
 * where params (experts) is NULL, through the trainer a span at a time
 * out of the blocks in their file (blk, eblk: a block each). */
typedef struct export_src {
    msr_trainer_t *tr;
    const float *params, *experts;
    msr_dp_blk_t blk, eblk;
} export_src_t;

typedef struct save_arg {
    msr_st_writer_t *w;
    int k; /* the tensor's index in the file */
    const float *src;
    export_src_t *from; /* src NULL: through it, at offset */
    int experts;
    size_t offset;
    uint64_t at; /* the next span's first element in the file's tensor */
} save_arg_t;

static msr_status_t save_span(void *arg, const float *p, size_t n)
{
    save_arg_t *a = arg;
    msr_status_t st = msr_st_write_f32(a->w, a->k, a->at, n, p);
    a->at += n;
    return st;
}

static msr_status_t save_run(void *arg, size_t lo, uint64_t first, uint64_t n)
{
    save_arg_t *a = arg;
    if (a->src != NULL)
        return msr_st_write_f32(a->w, a->k, first, n, a->src + lo);
    export_src_t *f = a->from;
    a->at = first;
    return a->experts
               ? msr_trainer_experts_spans(f->tr, a->offset + lo, (size_t)n, &f->eblk, save_span, a)
               : msr_dp_params_spans(f->tr->dp, f->tr->model->params + a->offset + lo, (size_t)n,
                                     &f->blk, save_span, a);
}

/* Writes the tensors of t[0..n) whose first element is in [lo, hi) into
 * w where nm places them: their elements at base, or (base NULL) read
 * from f (the experts' if experts, else the flat ones). */
static msr_status_t write_tensors(const msr_gpt_config_t *cfg, const msr_gpt_tensor_t *t, int n,
                                  size_t lo, size_t hi, const float *base, export_src_t *f,
                                  int experts, const names_t *nm, msr_st_writer_t *w, int tp_rank)
{
    for (int i = 0; i < n; i++) {
        if (t[i].offset < lo || t[i].offset >= hi)
            continue;
        if (t[i].tp_replicated ? tp_rank != 0 : !t[i].tp_first)
            continue; /* held by several tp ranks: written by the first */
        char name[MSR_ST_NAME_MAX + 1];
        train_gpt_st_file_name(cfg, t[i].name, name, sizeof name);
        save_arg_t a = {w,
                        train_gpt_st_names_find(nm, name),
                        base != NULL ? base + t[i].offset : NULL,
                        f,
                        experts,
                        t[i].offset,
                        0};
        msr_status_t st = train_gpt_st_for_runs(&t[i], save_run, &a);
        if (st != MSR_OK)
            return st;
    }
    return MSR_OK;
}

/* Whether this rank writes the flat tensors: data- and context-parallel
 * rank 0 (tp-replicated ones from tp rank 0 only, a Llama's replicated kv
 * heads from the first rank of each head's). */
static int writes_flat(const msr_trainer_t *tr)
{
    const msr_mesh_t *mesh = tr->mesh;
    return mesh == NULL || (mesh->cp_rank == 0 && mesh->dp_rank == 0);
}

static int tp_rank_of(const msr_trainer_t *tr)
{
    return tr->mesh != NULL ? tr->mesh->tp_rank : 0;
}

/* Whether this rank writes a MoE model's experts: the first rank of each
 * replica group that holds them (context-parallel rank 0). */
static int writes_experts(const msr_trainer_t *tr)
{
    const msr_mesh_t *mesh = tr->mesh;
    return tr->model->moe != NULL && (mesh == NULL || mesh->cp_rank == 0) && tr->rep_rank == 0;
}

/* This rank's slices into w from f: the flat tensors where writes_flat
 * says (flat 0: written already), the experts' where writes_experts says
 * (experts 0: written already). */
static msr_status_t write_slices(const msr_trainer_t *tr, const names_t *nm, msr_st_writer_t *w,
                                 export_src_t *f, int flat, int experts)
{
    msr_status_t st = MSR_OK;
    if (flat && writes_flat(tr))
        st = write_tensors(&tr->cfg.model, tr->model->tensors, tr->model->num_tensors, 0, SIZE_MAX,
                           f->params, f, 0, nm, w, tp_rank_of(tr));
    if (st == MSR_OK && experts && writes_experts(tr)) {
        int n;
        const msr_gpt_tensor_t *t = msr_moe_tensors(tr->model->moe, &n);
        st = write_tensors(&tr->cfg.model, t, n, 0, SIZE_MAX, f->experts, f, 1, nm, w, 0);
    }
    return st;
}

/* ZeRO-3's walks (msr_trainer_params_each, msr_trainer_experts_each):
 * each gathered segment's (block's) tensors written as it comes, by the
 * ranks that write them; a failed write is kept and the walk goes on,
 * since every rank of the group takes part in every gather. */
typedef struct seg_writer {
    const msr_trainer_t *tr;
    const names_t *nm;
    msr_st_writer_t *w;
    int experts;
    msr_status_t st;
} seg_writer_t;

static msr_status_t write_seg(void *arg, size_t offset, const float *p, size_t n)
{
    seg_writer_t *s = arg;
    const msr_trainer_t *tr = s->tr;
    if (s->st != MSR_OK || !(s->experts ? writes_experts(tr) : writes_flat(tr)))
        return MSR_OK;
    int nt = tr->model->num_tensors;
    const msr_gpt_tensor_t *t =
        s->experts ? msr_moe_tensors(tr->model->moe, &nt) : tr->model->tensors;
    s->st = write_tensors(&tr->cfg.model, t, nt, offset, offset + n, p - offset, NULL, s->experts,
                          s->nm, s->w, s->experts ? 0 : tp_rank_of(tr));
    return MSR_OK;
}

/* A ZeRO-3 walk of the flat parameters (experts 0) or of the experts'
 * shards (experts 1) into w. */
static msr_status_t write_walk(msr_trainer_t *tr, const names_t *nm, msr_st_writer_t *w,
                               int experts)
{
    seg_writer_t sw = {tr, nm, w, experts, MSR_OK};
    msr_status_t st = experts ? msr_trainer_experts_each(tr, write_seg, &sw)
                              : msr_trainer_params_each(tr, write_seg, &sw);
    return st != MSR_OK ? st : sw.st;
}

/* The buffers of f's reads through the trainer: a block of each file. */
static msr_status_t export_bufs(export_src_t *f)
{
    size_t bn = f->params == NULL ? msr_dp_params_block_floats(f->tr->dp) : 0;
    size_t en = f->experts == NULL ? msr_trainer_experts_block_floats(f->tr) : 0;
    if (bn > 0 && (f->blk.buf = msr_malloc(bn * sizeof(float))) == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory for a block of the parameters");
    if (en > 0 && (f->eblk.buf = msr_malloc(en * sizeof(float))) == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory for a block of the experts");
    return MSR_OK;
}

int train_gpt_st_export(msr_trainer_t *tr, const job_t *job, msr_comm_t *comm, const char *path)
{
    names_t nm = {NULL, 0};
    msr_st_writer_t *w = NULL;
    /* below ZeRO-3 the blocks in their file are read a block at a time
     * (NULL: through the trainer), as are the experts' in theirs */
    export_src_t from = {tr,
                         msr_dp_params_block_floats(tr->dp) > 0 ? NULL : tr->model->params,
                         NULL,
                         {NULL, SIZE_MAX, 0},
                         {NULL, SIZE_MAX, 0}};
    int rc = 1, held = tr->model->params == NULL;
    msr_err_clear();
    msr_status_t st = train_gpt_st_model_names(&tr->cfg.model, &nm);
    if (st == MSR_OK && held) /* ZeRO-3: the shard's blocks in, each segment gathered below */
        st = msr_trainer_blocks_hold(tr);
    if (tr->model->moe != NULL && tr->epf == NULL)
        from.experts = msr_moe_params(tr->model->moe);
    if (st == MSR_OK)
        st = export_bufs(&from);
    /* rank 0 lays the file out first; the others open what it made */
    if (st == MSR_OK && job->rank == 0)
        st = msr_st_writer_open(path, nm.t, nm.n, 1, &w);
    if (train_gpt_st_any_failed(comm, st != MSR_OK))
        goto out;
    if (job->rank != 0)
        st = msr_st_writer_open(path, nm.t, nm.n, 0, &w);
    /* ZeRO-3: a segment at a time; its experts' shards with replicas a
     * block at a time */
    if (st == MSR_OK && held)
        st = write_walk(tr, &nm, w, 0);
    if (st == MSR_OK && tr->ez)
        st = write_walk(tr, &nm, w, 1);
    if (st == MSR_OK)
        st = write_slices(tr, &nm, w, &from, !held, !tr->ez);
    if (st == MSR_OK && job->rank != 0) {
        st = msr_st_writer_close(w, 0); /* durable before rank 0 commits */
        w = NULL;
    }
    if (train_gpt_st_any_failed(comm, st != MSR_OK))
        goto out;
    if (job->rank == 0) {
        st = msr_st_writer_close(w, 1);
        w = NULL;
    }
    if (train_gpt_st_any_failed(comm, st != MSR_OK))
        goto out;
    rc = 0;
    if (job->rank == 0)
        fprintf(stderr, "train_gpt: exported %d tensors to %s\n", nm.n, path);

out:
    if (rc != 0 && st != MSR_OK)
        fprintf(stderr, "train_gpt: --export-safetensors %s: %s: %s\n", path, msr_status_str(st),
                msr_err_msg_or(st));
    else if (rc != 0 && job->rank == 0)
        fprintf(stderr, "train_gpt: --export-safetensors %s: another rank failed\n", path);
    if (w != NULL && job->rank == 0)
        msr_st_writer_abort(w); /* removes the temporary file */
    else if (w != NULL)
        msr_st_writer_close(w, 0);
    msr_free(from.blk.buf);
    msr_free(from.eblk.buf);
    msr_free(nm.t);
    if (held && msr_trainer_blocks_drop(tr, 0) != MSR_OK && rc == 0) {
        fprintf(stderr, "train_gpt: --export-safetensors %s: %s\n", path, msr_last_error());
        rc = 1;
    }
    return rc;
}

/* ---- --dump-grads ---- */

/* The model's tensors' gradients and the loss into a new file at path. */
static msr_status_t write_grads(const msr_trainer_t *tr, const char *path, double loss)
{
    names_t nm = {NULL, 0};
    msr_st_writer_t *w = NULL;
    msr_status_t st = train_gpt_st_model_names(&tr->cfg.model, &nm);
    if (st == MSR_OK)
        train_gpt_st_name_add(&nm, "loss", 1, 0); /* model_names leaves a spare entry for it */
    if (st == MSR_OK)
        st = msr_st_writer_open(path, nm.t, nm.n, 1, &w);
    if (st == MSR_OK)
        st = write_tensors(&tr->cfg.model, tr->model->tensors, tr->model->num_tensors, 0, SIZE_MAX,
                           tr->model->grads, NULL, 0, &nm, w, 0);
    float lossf = (float)loss;
    if (st == MSR_OK)
        st = msr_st_write_f32(w, nm.n - 1, 0, 1, &lossf);
    if (st == MSR_OK) {
        st = msr_st_writer_close(w, 1);
        w = NULL;
    }
    msr_st_writer_abort(w);
    msr_free(nm.t);
    return st;
}

int train_gpt_st_dump_grads(msr_trainer_t *tr, const job_t *job, const msr_dataset_t *data,
                            const char *path)
{
    if (job->rank != 0)
        return 0;
    int B = tr->cfg.micro_batch, T = tr->cfg.model.max_seq;
    size_t N = (size_t)B * (size_t)T;
    int *tokens = msr_malloc(2 * N * sizeof *tokens);
    if (tokens == NULL || tr->model->grads == NULL) {
        fprintf(stderr, "train_gpt: --dump-grads: out of memory, or no flat gradients\n");
        msr_free(tokens);
        return 1;
    }
    int *targets = tokens + N;
    for (size_t i = 0; i < N; i++) {
        tokens[i] = msr_dataset_token(data, i % data->size);
        targets[i] = msr_dataset_token(data, (i + 1) % data->size);
    }
    double loss = 0.0;
    msr_err_clear();
    msr_gpt_zero_grad(tr->model);
    msr_status_t st = msr_gpt_forward(tr->model, tokens, targets, B, T, NULL, &loss);
    if (st == MSR_OK)
        st = msr_gpt_backward(tr->model, 1.0f / (float)N, NULL);
    if (st == MSR_OK && (st = write_grads(tr, path, loss)) != MSR_OK)
        fprintf(stderr, "train_gpt: --dump-grads %s: %s: %s\n", path, msr_status_str(st),
                msr_err_msg_or(st));
    else if (st != MSR_OK)
        fprintf(stderr, "train_gpt: --dump-grads: the forward and backward passes: %s: %s\n",
                msr_status_str(st), msr_err_msg_or(st));
    msr_free(tokens);
    return st == MSR_OK ? 0 : 1;
}
