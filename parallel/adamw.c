/* AdamW over a slice of the flat parameter buffer (see adamw.h). */
#include "parallel/adamw.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/status.h"

msr_status_t msr_adamw_create(const msr_adamw_config_t *cfg, const msr_gpt_tensor_t *tensors, int n,
                              size_t lo, size_t hi, msr_adamw_t **opt_p)
{
    size_t end = n > 0 ? tensors[n - 1].offset + tensors[n - 1].count : 0;
    if (lo >= hi || hi > end) {
        MSR_ERROR("adamw: slice [%zu, %zu) is empty or outside the %zu parameters", lo, hi, end);
        return MSR_ERR_INVALID_ARG;
    }
    if (!(cfg->beta1 >= 0.0 && cfg->beta1 < 1.0) || !(cfg->beta2 >= 0.0 && cfg->beta2 < 1.0) ||
        !(cfg->eps > 0.0) || !(cfg->weight_decay >= 0.0)) {
        MSR_ERROR("adamw: bad hyperparameters beta1 %g beta2 %g eps %g weight decay %g", cfg->beta1,
                  cfg->beta2, cfg->eps, cfg->weight_decay);
        return MSR_ERR_INVALID_ARG;
    }
    msr_adamw_t *opt = msr_calloc(1, sizeof *opt);
    if (opt == NULL)
        goto err_no_memory;
    opt->cfg = *cfg;
    opt->lo = lo;
    opt->hi = hi;
    opt->m = msr_calloc(hi - lo, sizeof(float));
    opt->v = msr_calloc(hi - lo, sizeof(float));
    opt->spans = msr_calloc((size_t)n, sizeof *opt->spans);
    if (opt->m == NULL || opt->v == NULL || opt->spans == NULL)
        goto err_free;
    /* the tensors' parts inside [lo, hi), neighbours with the same flag merged */
    for (int k = 0; k < n; k++) {
        size_t a = MSR_MAX(lo, tensors[k].offset);
        size_t b = MSR_MIN(hi, tensors[k].offset + tensors[k].count);
        if (a >= b)
            continue;
        msr_adamw_span_t *last = opt->num_spans > 0 ? &opt->spans[opt->num_spans - 1] : NULL;
        if (last != NULL && last->decay == tensors[k].decay && last->end == a - lo)
            last->end = b - lo;
        else
            opt->spans[opt->num_spans++] = (msr_adamw_span_t){a - lo, b - lo, tensors[k].decay};
    }
    *opt_p = opt;
    return MSR_OK;

err_free:
    msr_adamw_destroy(opt);
err_no_memory:
    MSR_ERROR("adamw: out of memory for %zu moments", 2 * (hi - lo));
    return MSR_ERR_NO_MEMORY;
}

void msr_adamw_destroy(msr_adamw_t *opt)
{
    if (opt == NULL)
        return;
    msr_free(opt->spans);
    msr_free(opt->v);
    msr_free(opt->m);
    msr_free(opt);
}

void msr_adamw_update(msr_adamw_t *opt, float *params, const float *grads, float lr,
                      float grad_scale)
{
    const msr_adamw_config_t *c = &opt->cfg;
    opt->t++;
    double bc1 = 1.0 - pow(c->beta1, (double)opt->t);
    double bc2 = 1.0 - pow(c->beta2, (double)opt->t);
    float step_size = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
    float one_b1 = (float)(1.0 - c->beta1), one_b2 = (float)(1.0 - c->beta2);
    float decay_keep = (float)(1.0 - (double)lr * c->weight_decay);
    float *m = opt->m, *v = opt->v;
    for (int s = 0; s < opt->num_spans; s++) {
        const msr_adamw_span_t *sp = &opt->spans[s];
        float keep = sp->decay ? decay_keep : 1.0f;
        for (size_t i = sp->begin; i < sp->end; i++) {
            float g = grads[i] * grad_scale;
            m[i] = m[i] * b1 + one_b1 * g;
            v[i] = v[i] * b2 + one_b2 * g * g;
            float denom = sqrtf(v[i]) / bc2_sqrt + eps;
            params[i] = params[i] * keep - step_size * m[i] / denom;
        }
    }
}

double msr_sumsq(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return s;
}

float msr_clip_scale(double norm, float max_norm)
{
    if (!(max_norm > 0.0f))
        return 1.0f;
    double coef = (double)max_norm / (norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}
