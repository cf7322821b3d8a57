/* train_gpt --generate: sampling from a trained model (model/
 * gpt_generate.h) after loading it the way a run starts: the newest
 * checkpoint under --ckpt-dir (resharded from any layout into this one
 * process by the checkpoint reader), else --init-from, else the seed. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "model/gpt_generate.h"
#include "parallel/mesh.h"
#include "parallel/train.h"
#include "programs/train_gpt/train_gpt.h"

/* The prompt as tokens, into *tok_p (msr_free) and *n_p: --prompt's bytes
 * for a byte-level model, --prompt-tokens' ids. Each token below V, at
 * least one and at most seq of them. Returns 0, or the exit status with
 * the reason printed: EXIT_BAD_INPUT for a bad prompt, 1 out of memory. */
static int prompt_parse(const options_t *o, const msr_dataset_t *data, int **tok_p, int *n_p)
{
    int V = data->vocab, T = (int)o->seq;
    if ((o->prompt == NULL) == (o->prompt_tokens == NULL)) {
        fprintf(stderr, "train_gpt: --generate needs a prompt: --prompt TEXT (bytes) or "
                        "--prompt-tokens 1,2,3 (one of them)\n");
        return EXIT_BAD_INPUT;
    }
    if (o->prompt != NULL && (data->width != 1 || V != 256)) {
        fprintf(stderr,
                "train_gpt: --prompt is bytes, for a byte-level model; this model reads "
                "tokens of a token file (V %d): use --prompt-tokens\n",
                V);
        return EXIT_BAD_INPUT;
    }
    const char *text = o->prompt != NULL ? o->prompt : o->prompt_tokens;
    size_t most = strlen(text) + 1; /* a token per byte at most */
    int *tok = msr_calloc(most, sizeof(int)), n = 0;
    if (tok == NULL) {
        fprintf(stderr, "train_gpt: out of memory for a prompt of %zu bytes\n", most - 1);
        return 1; /* not the input's fault */
    }
    for (const char *p = text; o->prompt != NULL && *p != '\0'; p++)
        tok[n++] = (unsigned char)*p;
    for (const char *p = text; o->prompt_tokens != NULL && *p != '\0' && n < (int)most;) {
        char *end;
        errno = 0;
        long v = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : -1;
        if (v < 0 || errno != 0 || (*end != ',' && *end != '\0') || v >= V) {
            fprintf(stderr,
                    "train_gpt: --prompt-tokens %s: token %d is not a number in [0, V = %d)\n",
                    text, n, V);
            msr_free(tok);
            return EXIT_BAD_INPUT;
        }
        tok[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    if (n < 1 || n > T) {
        fprintf(stderr, "train_gpt: the prompt has %d tokens: it needs 1 to --seq %d\n", n, T);
        msr_free(tok);
        return EXIT_BAD_INPUT;
    }
    *tok_p = tok;
    *n_p = n;
    return 0;
}

/* What --generate refuses before loading anything. Returns 0, or -1 with
 * the reason printed. */
static int gen_check(const options_t *o, const msr_train_config_t *cfg, const msr_dataset_t *data,
                     const job_t *job, int P)
{
    if (job->world > 1 || msr_train_uses_mp(cfg) || strcmp(o->device, "cpu") != 0) {
        fprintf(stderr, "train_gpt: --generate runs in one process on the CPU (a checkpoint of "
                        "any layout loads into it): start one rank, without --tp, --pp, --cp, "
                        "--sp, --recompute, --head-chunk, --trace or --device cuda\n");
        return -1;
    }
    if (o->generate > o->seq - P) {
        fprintf(stderr,
                "train_gpt: --generate %" PRId64 " after a prompt of %d tokens is more than "
                "--seq %" PRId64 " positions (prompt + N <= seq; the window does not slide)\n",
                o->generate, P, o->seq);
        return -1;
    }
    if (o->sample_top_k > data->vocab) {
        fprintf(stderr, "train_gpt: --sample-top-k %" PRId64 " is more than V = %d\n",
                o->sample_top_k, data->vocab);
        return -1;
    }
    return 0;
}

/* The trainer's model, from the checkpoint, --init-from or the seed, into
 * *tr_p. Returns the exit status. */
static int gen_load(const options_t *o, const msr_train_config_t *cfg, const msr_dataset_t *data,
                    const job_t *job, msr_mesh_t *mesh, msr_trainer_t **tr_p)
{
    msr_train_config_t c = *cfg;
    c.par.zero = 0; /* the whole model's parameters in the flat buffer */
    msr_trainer_t *tr = NULL;
    msr_err_clear();
    msr_status_t st = msr_trainer_create_mesh(&c, data, mesh, &tr);
    if (st != MSR_OK) {
        fprintf(stderr, "train_gpt: cannot set up the model: %s: %s\n", msr_status_str(st),
                msr_err_msg_or(st));
        return st == MSR_ERR_CONFIG ? EXIT_BAD_INPUT : 1;
    }
    *tr_p = tr;
    int rc;
    if (o->init_from != NULL && (rc = train_gpt_st_init(tr, job, NULL, o->init_from)) != 0)
        return rc;
    if (o->ckpt_dir == NULL)
        return 0;
    /* the run's own resume, stepping to nowhere: --steps 0; as a resume,
     * the checkpoint's global batch unless --global-batch is given (a
     * checkpoint of dp 2 loads without it) */
    options_t r = *o;
    r.steps = 0;
    r.resume = 1;
    r.val_set = NULL;
    r.ckpt_every = 0;
    if ((rc = train_gpt_keep_global_batch(&r, job)) != 0)
        return rc;
    uint64_t G = r.global_batch > 0
                     ? (uint64_t)r.global_batch
                     : (uint64_t)o->micro_batch * (uint64_t)o->grad_accum * (uint64_t)o->dp;
    char meta[MSR_TCKPT_META_MAX];
    train_gpt_meta(meta, sizeof meta, &c, G, data);
    trainer_t t = {&train_gpt_cpu_ops, tr, tr};
    if ((rc = train_gpt_run(&t, job, &r, meta, NULL, 0, NULL)) != 0)
        return rc;
    if (tr->step == 0 && o->init_from == NULL) {
        fprintf(stderr, "train_gpt: --generate: no checkpoint under %s to generate from\n",
                o->ckpt_dir);
        return EXIT_BAD_INPUT;
    }
    return 0;
}

/* Writes the tokens: bytes for a byte-level model, else ids "1,2,3"; a
 * newline after them. */
static int gen_print(const msr_dataset_t *data, const int *out, int n)
{
    for (int i = 0; i < n; i++) {
        if (data->width == 1 && data->vocab == 256)
            putchar(out[i]);
        else
            printf(i > 0 ? ",%d" : "%d", out[i]);
    }
    putchar('\n');
    if (fflush(stdout) != 0) {
        fprintf(stderr, "train_gpt: writing the generated text: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

int train_gpt_generate(const options_t *o, const msr_train_config_t *cfg, const msr_dataset_t *data,
                       const job_t *job)
{
    int *prompt = NULL, *out = NULL, P = 0, n = (int)o->generate, rc = EXIT_BAD_INPUT;
    msr_mesh_t *mesh = NULL;
    msr_trainer_t *tr = NULL;
    msr_gpt_gen_t *gen = NULL;
    if ((rc = prompt_parse(o, data, &prompt, &P)) != 0)
        return rc;
    rc = EXIT_BAD_INPUT;
    if (gen_check(o, cfg, data, job, P) != 0)
        goto out;
    rc = 1;
    msr_status_t st = msr_mesh_create_dp(NULL, &mesh);
    if (st != MSR_OK) {
        fprintf(stderr, "train_gpt: cannot set up one process: %s: %s\n", msr_status_str(st),
                msr_last_error());
        goto out;
    }
    if ((rc = gen_load(o, cfg, data, job, mesh, &tr)) != 0)
        goto out;
    out = msr_calloc((size_t)n + 1, sizeof(int));
    uint64_t seed = (uint64_t)(train_gpt_given(o, "sample-seed") ? o->sample_seed : o->seed);
    msr_gpt_sampler_t s = {o->temperature, (int)o->sample_top_k, seed};
    msr_err_clear();
    st = out == NULL ? msr_err(MSR_ERR_NO_MEMORY, "out of memory for %d tokens", n)
                     : msr_gpt_gen_create(tr->model, &gen);
    if (st == MSR_OK)
        st = msr_gpt_generate(gen, prompt, P, n, &s, out);
    if (st != MSR_OK) {
        fprintf(stderr, "train_gpt: --generate: %s: %s\n", msr_status_str(st), msr_err_msg_or(st));
        rc = st == MSR_ERR_INVALID_ARG || st == MSR_ERR_CONFIG ? EXIT_BAD_INPUT : 1;
        goto out;
    }
    rc = gen_print(data, out, n);

out:
    msr_gpt_gen_destroy(gen);
    msr_trainer_destroy(tr);
    msr_mesh_destroy(mesh);
    msr_free(out);
    msr_free(prompt);
    return rc;
}
