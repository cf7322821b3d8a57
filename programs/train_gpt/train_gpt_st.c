/* train_gpt's safetensors side (train_gpt.h): --init-from loads the
 * whole model's weights into any layout, --dump-logits writes a fixed
 * batch's logits for the PyTorch check, and the names both sides share
 * (train_gpt_st.h); --export-safetensors and --dump-grads are
 * train_gpt_st_export.c's. The names and layouts are docs/checkpoint.md's
 * "safetensors names": the model's tensor table (model/gpt.h).
 *
 * Load: every rank checks the whole header, then preads the runs of its
 * own slices (under ZeRO-3, of the flat pieces it owns). The file must be
 * on a filesystem every rank sees (one node, or a shared one). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "model/moe.h"
#include "model/safetensors.h"
#include "programs/train_gpt/train_gpt.h"
#include "programs/train_gpt/train_gpt_st.h"

int train_gpt_st_check(const options_t *o)
{
    const char *opt = o->export_st != NULL    ? "--export-safetensors"
                      : o->init_from != NULL  ? "--init-from"
                      : o->dump_grads != NULL ? "--dump-grads"
                                              : "--dump-logits";
    if (o->export_st == NULL && o->init_from == NULL && o->dump_logits == NULL &&
        o->dump_grads == NULL)
        return 0;
    if (strcmp(o->device, "cpu") != 0) {
        fprintf(stderr, "train_gpt: %s is for --device cpu only\n", opt);
        return -1;
    }
    if (o->dump_logits != NULL &&
        (o->tp > 1 || o->pp > 1 || o->cp > 1 || o->ep > 1 || o->zero == 3)) {
        fprintf(stderr, "train_gpt: --dump-logits runs the whole model on rank 0: not with "
                        "--tp, --pp, --cp or --ep > 1 or --zero 3\n");
        return -1;
    }
    if (o->dump_grads != NULL &&
        (o->tp > 1 || o->pp > 1 || o->cp > 1 || o->ep > 1 || o->zero >= 2 || o->experts > 0)) {
        fprintf(stderr, "train_gpt: --dump-grads runs the whole model on rank 0 into its flat "
                        "gradients: not with --tp, --pp, --cp or --ep > 1, --zero 2 or 3, or "
                        "--experts\n");
        return -1;
    }
    return 0;
}

/* The name in the file of the model's tensor `name` (model/gpt.h's
 * table): the same for a GPT; a Llama's under Hugging Face Llama's names
 * (docs/checkpoint.md "safetensors names"), so that transformers'
 * LlamaForCausalLM reads the file as it is (its rotary convention is the
 * model's, rotate_half). */
void train_gpt_st_file_name(const msr_gpt_config_t *cfg, const char *name, char *out, size_t len)
{
    static const struct {
        const char *ours, *hf;
    } block[] = {
        {"ln1w", "input_layernorm.weight"}, {"wq", "self_attn.q_proj.weight"},
        {"wk", "self_attn.k_proj.weight"},  {"wv", "self_attn.v_proj.weight"},
        {"wo", "self_attn.o_proj.weight"},  {"ln2w", "post_attention_layernorm.weight"},
        {"w1", "mlp.gate_proj.weight"},     {"w3", "mlp.up_proj.weight"},
        {"w2", "mlp.down_proj.weight"},
    };
    snprintf(out, len, "%s", name);
    if (cfg->arch != MSR_GPT_ARCH_LLAMA)
        return;
    if (strcmp(name, "wte") == 0)
        snprintf(out, len, "model.embed_tokens.weight");
    else if (strcmp(name, "lnfw") == 0)
        snprintf(out, len, "model.norm.weight");
    else if (strcmp(name, "lm_head") == 0)
        snprintf(out, len, "lm_head.weight");
    int l, at = 0;
    if (sscanf(name, "h%d.%n", &l, &at) != 1 || at == 0)
        return;
    for (size_t k = 0; k < sizeof block / sizeof block[0]; k++)
        if (strcmp(name + at, block[k].ours) == 0)
            snprintf(out, len, "model.layers.%d.%s", l, block[k].hf);
}

/* The file's tensors: the whole model's table (model/gpt.h), in its
 * flat-buffer order, then a MoE model's experts in the whole model's
 * expert numbering (model/moe.h): "h<l>.e<e>.fcw" (4C, C), ".fcb" (4C),
 * ".fcprojw" (C, 4C), ".fcprojb" (C). */
void train_gpt_st_name_add(names_t *nm, const char *name, int rows, int cols)
{
    msr_st_tensor_t *t = &nm->t[nm->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = cols > 0 ? 2 : 1;
    t->shape[0] = (uint64_t)rows;
    t->shape[1] = cols > 0 ? (uint64_t)cols : 0;
}

msr_status_t train_gpt_st_model_names(const msr_gpt_config_t *cfg, names_t *nm)
{
    msr_gpt_part_t all = {1, 0, 1, 0, 1, NULL};
    msr_gpt_t *whole = NULL;
    msr_status_t st = msr_gpt_create_part(cfg, &all, MSR_GPT_NO_PARAMS | MSR_GPT_NO_GRADS, &whole);
    if (st != MSR_OK)
        return st;
    int E = cfg->moe.experts, C = cfg->channels, blocks = 0;
    for (int l = 0; l < cfg->layers; l++)
        blocks += msr_gpt_layer_is_moe(cfg, l);
    nm->n = 0;
    nm->t =
        msr_calloc((size_t)whole->num_tensors + (size_t)blocks * (size_t)E * 4 + 2, sizeof *nm->t);
    for (int i = 0; nm->t != NULL && i < whole->num_tensors; i++) {
        const msr_gpt_tensor_t *w = &whole->tensors[i];
        char name[MSR_ST_NAME_MAX + 1];
        train_gpt_st_file_name(cfg, w->name, name, sizeof name);
        train_gpt_st_name_add(nm, name, w->shape[0], w->ndim == 2 ? w->shape[1] : 0);
    }
    static const char *const mlp[4] = {"fcw", "fcb", "fcprojw", "fcprojb"};
    for (int l = 0; nm->t != NULL && l < cfg->layers; l++) {
        for (int e = 0; msr_gpt_layer_is_moe(cfg, l) && e < E; e++) {
            for (int k = 0; k < 4; k++) {
                char name[MSR_ST_NAME_MAX + 1];
                snprintf(name, sizeof name, "h%d.e%d.%s", l, e, mlp[k]);
                train_gpt_st_name_add(nm, name, k == 0 || k == 1 ? 4 * C : C,
                                      k == 0   ? C
                                      : k == 2 ? 4 * C
                                               : 0);
            }
        }
    }
    msr_gpt_destroy(whole);
    return nm->t != NULL ? MSR_OK : MSR_ERR_NO_MEMORY;
}

/* The index of name in nm, or -1. */
int train_gpt_st_names_find(const names_t *nm, const char *name)
{
    for (int i = 0; i < nm->n; i++)
        if (strcmp(nm->t[i].name, name) == 0)
            return i;
    return -1;
}

/* Whether any rank of comm failed (failed: this rank's), agreed by all. */
int train_gpt_st_any_failed(msr_comm_t *comm, int failed)
{
    int32_t f = failed ? 1 : 0, all = f;
    if (comm != NULL && msr_comm_allreduce(comm, &f, &all, 1, MSR_DTYPE_I32, MSR_OP_MAX) != MSR_OK)
        return 1;
    return all != 0;
}

/* Calls fn for each run of local tensor t whose elements are consecutive
 * in the whole tensor (a row, or several rows, or all of it). */
msr_status_t train_gpt_st_for_runs(const msr_gpt_tensor_t *t, train_gpt_st_run_fn fn, void *arg)
{
    size_t cols = (size_t)t->shape[1], rows = (size_t)t->shape[0];
    size_t run_lo = 0;
    uint64_t run_first = 0, run_n = 0;
    for (size_t i = 0; i < rows; i++) {
        uint64_t first = msr_gpt_tensor_full_index(t, i * cols) - t->full_offset;
        if (run_n > 0 && first == run_first + run_n) {
            run_n += cols;
            continue;
        }
        msr_status_t st = run_n > 0 ? fn(arg, run_lo, run_first, run_n) : MSR_OK;
        if (st != MSR_OK)
            return st;
        run_lo = i * cols;
        run_first = first;
        run_n = cols;
    }
    return run_n > 0 ? fn(arg, run_lo, run_first, run_n) : MSR_OK;
}

/* ---- --init-from ---- */

typedef struct load_arg {
    const msr_st_file_t *f;
    const msr_st_tensor_t *st;
    float *dst; /* the local tensor's first element, or NULL: through tr */
    msr_trainer_t *tr;
    int experts;   /* an expert's tensor (msr_trainer_fill's experts) */
    size_t offset; /* the local tensor's first element's, for the fill */
    float *buf;    /* LOAD_PIECE floats, for the fill */
} load_arg_t;

/* What a load through the trainer reads from the file at once. */
#define LOAD_PIECE ((size_t)1 << 18)

static msr_status_t load_run(void *arg, size_t lo, uint64_t first, uint64_t n)
{
    load_arg_t *a = arg;
    if (a->dst != NULL)
        return msr_st_read_f32(a->f, a->st, first, n, a->dst + lo);
    msr_status_t st = MSR_OK;
    for (uint64_t at = 0; at < n && st == MSR_OK; at += LOAD_PIECE) {
        size_t c = (size_t)MSR_MIN(n - at, (uint64_t)LOAD_PIECE);
        st = msr_st_read_f32(a->f, a->st, first + at, c, a->buf);
        if (st == MSR_OK)
            st = msr_trainer_fill(a->tr, a->experts, a->offset + lo + (size_t)at, c, a->buf);
    }
    return st;
}

/* Every tensor of the whole model is in f with its shape and a dtype we
 * read, and f holds nothing else. Returns 0, or -1 with the reason printed. */
static int check_file(const msr_st_file_t *f, const names_t *nm, const char *path)
{
    for (int i = 0; i < nm->n; i++) {
        const msr_st_tensor_t *w = &nm->t[i];
        const msr_st_tensor_t *t = msr_st_find(f, w->name);
        if (t == NULL) {
            fprintf(stderr,
                    "train_gpt: --init-from %s: no tensor '%s' (the model's tensors are "
                    "docs/checkpoint.md's \"safetensors names\")\n",
                    path, w->name);
            return -1;
        }
        int ok = t->ndim == w->ndim && t->shape[0] == w->shape[0] &&
                 (w->ndim == 1 || t->shape[1] == w->shape[1]);
        if (!ok) {
            char got[128] = "";
            for (int d = 0, used = 0; d < t->ndim && used < (int)sizeof got; d++)
                used += snprintf(got + used, sizeof got - (size_t)used, "%s%llu", d ? ", " : "",
                                 (unsigned long long)t->shape[d]);
            fprintf(stderr,
                    "train_gpt: --init-from %s: tensor '%s' has shape (%s); the model's "
                    "is (%llu%s%.0llu)\n",
                    path, w->name, got, (unsigned long long)w->shape[0], w->ndim == 2 ? ", " : "",
                    (unsigned long long)(w->ndim == 2 ? w->shape[1] : 0));
            return -1;
        }
        if (t->dtype != MSR_ST_F32 && t->dtype != MSR_ST_BF16) {
            fprintf(stderr,
                    "train_gpt: --init-from %s: tensor '%s' is %s: only F32 and BF16 "
                    "are read\n",
                    path, w->name, msr_st_dtype_name(t->dtype));
            return -1;
        }
    }
    int n;
    const msr_st_tensor_t *all = msr_st_tensors(f, &n);
    for (int i = 0; i < n; i++) {
        if (train_gpt_st_names_find(nm, all[i].name) < 0) {
            fprintf(stderr,
                    "train_gpt: --init-from %s: tensor '%s' is not one of this model's "
                    "(another model's weights?)\n",
                    path, all[i].name);
            return -1;
        }
    }
    return 0;
}

/* Under ZeRO-3 with expert replicas (parallel/train.h ez): the parts of
 * expert tensor t (named name in f) in this rank's shards of the blocks,
 * in place or, with the shards in their file (msr_trainer_fill_through),
 * through buf (LOAD_PIECE floats) a piece at a time. */
static msr_status_t load_expert_shards(msr_trainer_t *tr, const msr_gpt_tensor_t *t,
                                       const msr_st_file_t *f, const msr_st_tensor_t *ft,
                                       float *buf)
{
    msr_status_t st = MSR_OK;
    int through = msr_trainer_fill_through(tr, 1);
    for (int k = 0; k < msr_moe_held(tr->model->moe) && st == MSR_OK; k++) {
        size_t lo = (size_t)k * tr->ez_per + tr->ez_lo, hi = lo + tr->ez_n;
        size_t a = lo > t->offset ? lo : t->offset;
        size_t b = hi < t->offset + t->count ? hi : t->offset + t->count;
        size_t at = (size_t)k * tr->ez_n + (a - lo); /* in the shard space */
        if (a < b && !through)
            st = msr_st_read_f32(f, ft, a - t->offset, b - a, tr->ez_params + at);
        for (size_t c; through && a < b && st == MSR_OK; a += c, at += c) {
            c = b - a < LOAD_PIECE ? b - a : LOAD_PIECE;
            st = msr_st_read_f32(f, ft, a - t->offset, c, buf);
            if (st == MSR_OK)
                st = msr_trainer_fill(tr, 1, at, c, buf);
        }
    }
    return st;
}

/* This rank's slices of every tensor it holds, out of f: in place, or
 * where the offloads keep them (msr_trainer_fill, a piece at a time),
 * between msr_trainer_fill_begin and _end. */
static int load_slices(msr_trainer_t *tr, const msr_st_file_t *f, const char *path)
{
    const msr_gpt_t *m = tr->model;
    int n_flat = m->num_tensors, n_exp = 0;
    const msr_gpt_tensor_t *experts = m->moe != NULL ? msr_moe_tensors(m->moe, &n_exp) : NULL;
    float *buf = NULL;
    if (msr_trainer_fill_through(tr, 0) || msr_trainer_fill_through(tr, 1)) {
        if ((buf = msr_malloc(LOAD_PIECE * sizeof *buf)) == NULL) {
            fprintf(stderr, "train_gpt: --init-from %s: out of memory\n", path);
            return -1;
        }
    }
    for (int i = m->params != NULL ? 0 : n_flat; i < n_flat + n_exp; i++) {
        int ex = i >= n_flat;
        const msr_gpt_tensor_t *t = ex ? &experts[i - n_flat] : &m->tensors[i];
        float *base = ex ? msr_moe_params(m->moe) : m->params;
        char name[MSR_ST_NAME_MAX + 1];
        train_gpt_st_file_name(&m->cfg, t->name, name, sizeof name);
        int through = msr_trainer_fill_through(tr, ex);
        load_arg_t a = {
            f, msr_st_find(f, name), through ? NULL : base + t->offset, tr, ex, t->offset, buf};
        msr_err_clear();
        msr_status_t st = ex && tr->ez ? load_expert_shards(tr, t, f, a.st, buf)
                                       : train_gpt_st_for_runs(t, load_run, &a);
        if (st != MSR_OK) {
            fprintf(stderr, "train_gpt: --init-from %s: %s\n", path, msr_err_msg_or(st));
            msr_free(buf);
            return -1;
        }
    }
    msr_free(buf);
    return 0;
}

/* Whole-model flat elements [lo, lo + n) out of f into dst (a
 * data-parallel-only model: its tensor table is the whole model's). */
static msr_status_t read_flat(const msr_gpt_t *m, const msr_st_file_t *f, size_t lo, size_t n,
                              float *dst)
{
    msr_status_t st = MSR_OK;
    for (int i = 0; i < m->num_tensors && st == MSR_OK; i++) {
        const msr_gpt_tensor_t *t = &m->tensors[i];
        size_t a = lo > t->offset ? lo : t->offset;
        size_t b = lo + n < t->offset + t->count ? lo + n : t->offset + t->count;
        char name[MSR_ST_NAME_MAX + 1];
        train_gpt_st_file_name(&m->cfg, t->name, name, sizeof name);
        if (a < b)
            st = msr_st_read_f32(f, msr_st_find(f, name), a - t->offset, b - a, dst + (a - lo));
    }
    return st;
}

/* ZeRO-3 holds no whole flat buffer: each rank loads the flat pieces it
 * owns (msr_dp_owned) as a checkpoint's, with zero moments (a fresh
 * optimizer's). Collective over the data-parallel group: every rank calls
 * it, failed or not, and all agree. Returns 0, or -1 with the reason
 * printed. */
static int load_owned(msr_trainer_t *tr, const msr_st_file_t *f, const char *path, int failed)
{
    msr_err_clear();
    msr_status_t st = msr_dp_load_begin(tr->dp), read_st = failed ? MSR_ERR_CORRUPT : st;
    for (int k = 0; read_st == MSR_OK && k < msr_dp_num_owned(tr->dp); k++) {
        msr_dp_piece_t own;
        msr_dp_owned(tr->dp, k, &own);
        float *buf = msr_calloc(3 * own.n + 1, sizeof *buf);
        read_st = buf == NULL ? MSR_ERR_NO_MEMORY : read_flat(tr->model, f, own.lo, own.n, buf);
        msr_dp_piece_t piece = {own.lo, own.n, buf, buf + own.n, buf + 2 * own.n};
        if (read_st == MSR_OK)
            msr_dp_load_piece(tr->dp, &piece);
        msr_free(buf);
    }
    if (read_st != MSR_OK && !failed)
        fprintf(stderr, "train_gpt: --init-from %s: %s\n", path, msr_err_msg_or(read_st));
    st = msr_dp_load_end(tr->dp, 1, read_st != MSR_OK);
    if (st != MSR_OK && read_st == MSR_OK)
        fprintf(stderr, "train_gpt: --init-from %s: loading the shards: %s: %s\n", path,
                msr_status_str(st), msr_err_msg_or(st));
    return st == MSR_OK ? 0 : -1;
}

int train_gpt_st_init(msr_trainer_t *tr, const job_t *job, msr_comm_t *comm, const char *path)
{
    names_t nm = {NULL, 0};
    msr_st_file_t *f = NULL;
    msr_err_clear();
    msr_status_t st = train_gpt_st_model_names(&tr->cfg.model, &nm);
    if (st == MSR_OK && (st = msr_st_open(path, &f)) != MSR_OK)
        fprintf(stderr, "train_gpt: --init-from %s: %s\n", path, msr_err_msg_or(st));
    else if (st != MSR_OK)
        fprintf(stderr, "train_gpt: --init-from: %s\n", msr_err_msg_or(st));
    int bad = st != MSR_OK || check_file(f, &nm, path) != 0;
    /* the blocks in their files filled a block at a time, as a restore
     * fills them (never held whole) */
    msr_status_t hst = bad ? MSR_OK : msr_trainer_fill_begin(tr);
    if (hst != MSR_OK)
        fprintf(stderr, "train_gpt: --init-from %s: %s\n", path, msr_err_msg_or(hst));
    int failed = bad || hst != MSR_OK || load_slices(tr, f, path) != 0;
    if (tr->model->params == NULL && load_owned(tr, f, path, failed) != 0)
        failed = 1;
    if ((hst = msr_trainer_fill_end(tr, !failed)) != MSR_OK && !failed) {
        fprintf(stderr, "train_gpt: --init-from %s: %s\n", path, msr_err_msg_or(hst));
        failed = 1;
    }
    msr_st_close(f);
    msr_free(nm.t);
    if (train_gpt_st_any_failed(comm, failed))
        return bad || failed ? EXIT_BAD_INPUT : 1;
    /* the last stage's copy of wte for the head follows the first's */
    if (tr->mp != NULL && (st = msr_mp_sync_tied(tr->mp)) != MSR_OK) {
        fprintf(stderr, "train_gpt: --init-from %s: sending wte to the last stage: %s: %s\n", path,
                msr_status_str(st), msr_last_error());
        return 1;
    }
    if (job->rank == 0)
        fprintf(stderr, "train_gpt: initialised from %s (%d tensors)\n", path, nm.n);
    return 0;
}

/* ---- --dump-logits ---- */

static int put_le32(FILE *f, const void *v, size_t n)
{
    const unsigned char *b = v;
    for (size_t i = 0; i < n; i++, b += 4) { /* little-endian whatever the host */
        uint32_t u;
        memcpy(&u, b, 4);
        unsigned char le[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                               (unsigned char)(u >> 24)};
        if (fwrite(le, 1, 4, f) != 4)
            return -1;
    }
    return 0;
}

int train_gpt_st_dump_logits(msr_trainer_t *tr, const job_t *job, const msr_dataset_t *data,
                             const char *path)
{
    if (job->rank != 0)
        return 0;
    int B = tr->cfg.micro_batch, T = tr->cfg.model.max_seq, V = tr->cfg.model.vocab;
    size_t N = (size_t)B * (size_t)T;
    int *tokens = msr_malloc(N * sizeof *tokens);
    if (tokens == NULL)
        return 1;
    for (size_t i = 0; i < N; i++)
        tokens[i] = msr_dataset_token(data, i % data->size);
    double unused = 0.0;
    msr_err_clear();
    msr_status_t st = msr_gpt_forward(tr->model, tokens, NULL, B, T, NULL, &unused);
    int rc = 1;
    if (st != MSR_OK) {
        fprintf(stderr, "train_gpt: --dump-logits: the forward pass: %s: %s\n", msr_status_str(st),
                msr_err_msg_or(st));
    } else {
        FILE *f = fopen(path, "wb");
        int32_t dims[3] = {B, T, V};
        int bad = f == NULL || put_le32(f, dims, 3) != 0 || put_le32(f, tokens, N) != 0 ||
                  put_le32(f, tr->model->acts.logits, N * (size_t)V) != 0;
        if (f != NULL && fclose(f) != 0)
            bad = 1;
        if (bad)
            fprintf(stderr, "train_gpt: --dump-logits %s: %s\n", path, strerror(errno));
        rc = bad ? EXIT_BAD_INPUT : 0;
    }
    msr_free(tokens);
    return rc;
}
