/* Central finite differences for the model tests (fd_check.h). */
#include "tests/parallel/fd_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "model/rng.h"
#include "tests/runner.h"

double fd_dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

void fd_check_grad(const char *what, fd_objective_fn f, void *ctx, double *x,
                   const double *analytic, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double old = x[i];
        x[i] = old + FD_H;
        double lp = f(ctx);
        x[i] = old - FD_H;
        double lm = f(ctx);
        x[i] = old;
        double num = (lp - lm) / (2 * FD_H);
        MSR_CHECK_MSG(fabs(num - analytic[i]) <= FD_TOL * (1.0 + fabs(analytic[i])),
                      "%s[%zu]: analytic %.12g, finite difference %.12g", what, i, analytic[i],
                      num);
    }
}

void fd_check_routed(const char *what, fd_objective_fn f, void *ctx, const int *choice,
                     const int *pos, size_t nroute, double *x, const float *analytic, size_t n)
{
    const double h = 1e-6;
    double worst = 0.0, scale = 0.0;
    f(ctx);
    int *route = malloc(2 * nroute * sizeof *route);
    MSR_CHECK(route != NULL);
    memcpy(route, choice, nroute * sizeof *route);
    memcpy(route + nroute, pos, nroute * sizeof *route);
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double up = f(ctx);
        x[i] = keep - h;
        double down = f(ctx);
        x[i] = keep;
        MSR_CHECK_MSG(memcmp(route, choice, nroute * sizeof *route) == 0 &&
                          memcmp(route + nroute, pos, nroute * sizeof *route) == 0,
                      "%s[%zu]: a step of %g changes the routing", what, i, h);
        double num = (up - down) / (2 * h);
        worst = fmax(worst, fabs(num - analytic[i]));
        scale = fmax(scale, fabs(num));
    }
    free(route);
    MSR_CHECK_MSG(worst <= 1e-4 * (1.0 + scale), "%s: finite differences differ by %g (scale %g)",
                  what, worst, scale);
    MSR_CHECK_MSG(scale > 0.0, "%s: no gradient flows", what);
}

double fd_mean_crossentropy(const double *logits, const int *tgt, int N, int V)
{
    double *probs = calloc((size_t)N * V, sizeof *probs), *losses = calloc(N, sizeof *losses);
    MSR_CHECK(probs != NULL && losses != NULL);
    msr_crossentropy_forward_f64(losses, probs, logits, tgt, N, V);
    double loss = 0;
    for (int i = 0; i < N; i++)
        loss += losses[i];
    free(probs), free(losses);
    return loss / N;
}

void fd_check_model_grad(const char *what, msr_gpt_t *m, const int *inp, const int *tgt, int B,
                         int T, fd_loss_fn loss, void *ctx)
{
    double got;
    MSR_CHECK_OK(msr_gpt_forward(m, inp, tgt, B, T, NULL, &got));
    MSR_CHECK_OK(msr_gpt_backward(m, 1.0f / (float)(B * T), NULL));
    double *p = malloc(m->num_params * sizeof *p);
    MSR_CHECK(p != NULL);
    for (size_t i = 0; i < m->num_params; i++)
        p[i] = m->params[i];
    double ref = loss(ctx, p);
    MSR_CHECK_MSG(fabs(got - ref) < 1e-5 * ref, "%sfloat loss %.9g, double %.9g", what, got, ref);
    const double h = 1e-5;
    for (int k = 0; k < m->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &m->tensors[k];
        const float *g = m->grads + t->offset;
        double gmax = 0;
        size_t imax = 0;
        for (size_t i = 0; i < t->count; i++)
            if (fabs(g[i]) > gmax)
                gmax = fabs(g[i]), imax = i;
        MSR_CHECK_MSG(gmax > 1e-6, "%s%s has no gradient", what, t->name);
        for (int c = 0; c < 12; c++) {
            size_t i =
                c == 0 ? imax : (size_t)msr_rng_below(msr_rng_u64(11, (uint64_t)k, c), t->count);
            size_t at = t->offset + i;
            double old = p[at];
            p[at] = old + h;
            double lp = loss(ctx, p);
            p[at] = old - h;
            double lm = loss(ctx, p);
            p[at] = old;
            double num = (lp - lm) / (2 * h);
            MSR_CHECK_MSG(fabs(num - g[i]) <= 1e-4 * gmax + 1e-4 * fabs(num),
                          "%s%s[%zu]: analytic %.9g, finite difference %.9g (largest %.3g)", what,
                          t->name, i, (double)g[i], num, gmax);
        }
    }
    free(p);
}

double fd_tensor_sd(const msr_gpt_t *m, int k, double *sum_p)
{
    const msr_gpt_tensor_t *t = &m->tensors[k];
    const float *x = m->params + t->offset;
    double s = 0, s2 = 0;
    for (size_t i = 0; i < t->count; i++)
        s += x[i], s2 += (double)x[i] * x[i];
    double mean = s / t->count;
    *sum_p = s;
    return sqrt(s2 / t->count - mean * mean);
}
