/* Trains a tiny GPT for a few steps with the real trainer and dumps what
 * PyTorch needs to repeat it (torch_check.py): the shape and
 * hyperparameters, the initial parameters, every step's batch, loss and
 * gradient norm, the first step's gradients and the final parameters.
 *
 * usage: gpt_torch_dump OUT [moe]
 *
 * OUT (native byte order): "MSRGPTD1", then i32 V maxT L NH C micro accum
 * steps, u64 P, f64 lr wd beta1 beta2 eps clip, f32 params0[P]; per step
 * i32 inputs[G*T], i32 targets[G*T], f64 loss, f64 grad_norm; then f32
 * grads1[P], f32 params_end[P].
 *
 * With "moe", a Mixture-of-Experts model (every block, model/moe.h):
 * "MSRGPTM1", the same header, then i32 E K every, f64 capacity_factor
 * aux_loss, u64 PE (the experts' floats, in the whole model's expert
 * numbering), and each of params0, grads1 and params_end is followed by
 * the experts' PE floats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/moe.h"
#include "model/rng.h"
#include "parallel/train.h"

enum { STEPS = 5 };

static int put(FILE *f, const void *p, size_t size, size_t n)
{
    if (n == 0) /* nothing (a dense model's experts): p may be NULL */
        return 0;
    return fwrite(p, size, n, f) == n ? 0 : -1;
}

int main(int argc, char **argv)
{
    int moe = argc == 3 && strcmp(argv[2], "moe") == 0;
    if (argc != 2 && !moe) {
        fprintf(stderr, "usage: gpt_torch_dump OUT [moe]\n");
        return 2;
    }
    msr_train_config_t c = {
        .model = {MSR_GPT_VOCAB, 16, 2, 4, 32},
        .micro_batch = 2,
        .grad_accum = 2, /* torch takes the 4 sequences at once */
        .dp = 1,
        .dp_rank = 0,
        .seed = 11,
        .lr = 1e-2f,
        .warmup = 0,
        .grad_clip = 1.0f,
        .adamw = {0.9, 0.95, 1e-8, 0.1},
    };
    msr_train_config_defaults(&c);
    if (moe) /* capacity 1.0 drops choices; a strong aux loss shows its gradient */
        c.model.moe = (msr_gpt_moe_t){4, 2, 1, 1.0, 0.1};
    msr_dataset_t *ds = NULL;
    msr_trainer_t *tr = NULL;
    if (msr_dataset_generate(11, 1 << 16, &ds) != MSR_OK ||
        msr_trainer_create(&c, ds, NULL, &tr) != 0)
        return 1;
    /* move off GPT-2's init (zero biases, unit norms) so every tensor's
     * gradient is exercised */
    msr_gpt_t *m = tr->model;
    for (size_t i = 0; i < m->num_params; i++)
        m->params[i] += 0.05f * (float)msr_rng_normal(12, 0, i);
    size_t P = m->num_params, PE = moe ? msr_moe_count(m->moe) : 0;
    float *ep = moe ? msr_moe_params(m->moe) : NULL, *eg = moe ? msr_moe_grads(m->moe) : NULL;
    for (size_t i = 0; i < PE; i++)
        ep[i] += 0.05f * (float)msr_rng_normal(12, 1, i);
    int G = c.micro_batch * c.grad_accum, T = c.model.max_seq;
    FILE *f = fopen(argv[1], "wb");
    if (f == NULL) {
        perror(argv[1]);
        return 1;
    }
    int32_t head[8] = {c.model.vocab,    c.model.max_seq, c.model.layers, c.model.heads,
                       c.model.channels, c.micro_batch,   c.grad_accum,   STEPS};
    uint64_t np = P;
    double hyper[6] = {c.lr,          c.adamw.weight_decay, c.adamw.beta1,
                       c.adamw.beta2, c.adamw.eps,          c.grad_clip};
    int bad = put(f, moe ? "MSRGPTM1" : "MSRGPTD1", 1, 8) | put(f, head, sizeof head[0], 8) |
              put(f, &np, 8, 1) | put(f, hyper, 8, 6);
    if (moe) {
        const msr_gpt_moe_t *mc = &c.model.moe;
        int32_t mh[3] = {mc->experts, mc->top_k, mc->every};
        double md[2] = {mc->capacity_factor, mc->aux_loss};
        uint64_t npe = PE;
        bad |= put(f, mh, sizeof mh[0], 3) | put(f, md, 8, 2) | put(f, &npe, 8, 1);
    }
    bad |= put(f, m->params, sizeof(float), P) | put(f, ep, sizeof(float), PE);
    float *grads1 = malloc((P + PE) * sizeof(float));
    int *inp = malloc((size_t)G * T * sizeof(int)), *tgt = malloc((size_t)G * T * sizeof(int));
    for (int s = 0; s < STEPS && !bad; s++) {
        msr_sampler_fill(&tr->sampler, ds, T, 0, G, inp, tgt); /* the rows the step will read */
        double loss;
        if (msr_trainer_step(tr, &loss) != MSR_OK)
            return 1;
        if (s == 0) {
            memcpy(grads1, m->grads, P * sizeof(float));
            if (PE > 0)
                memcpy(grads1 + P, eg, PE * sizeof(float));
        }
        bad |= put(f, inp, sizeof(int), (size_t)G * T) | put(f, tgt, sizeof(int), (size_t)G * T) |
               put(f, &loss, 8, 1) | put(f, &tr->last_grad_norm, 8, 1);
    }
    bad |= put(f, grads1, sizeof(float), P) | put(f, grads1 + P, sizeof(float), PE) |
           put(f, m->params, sizeof(float), P) | put(f, ep, sizeof(float), PE);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "gpt_torch_dump: cannot write %s\n", argv[1]);
        return 1;
    }
    free(grads1);
    free(inp);
    free(tgt);
    msr_trainer_destroy(tr);
    msr_dataset_destroy(ds);
    return 0;
}
