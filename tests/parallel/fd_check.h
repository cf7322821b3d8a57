/* Central finite differences, as the model tests use them (test_layers.c,
 * test_gpt.c, test_llama.c): a kernel's backward against differences of
 * its forward in double, and a whole model's gradient against differences
 * of an independent double-precision loss; and the moments of a model's
 * initialised tensor. */
#ifndef MSRUN_TESTS_PARALLEL_FD_CHECK_H
#define MSRUN_TESTS_PARALLEL_FD_CHECK_H

#include <stddef.h>

#include "model/gpt.h"

/* A kernel's step and tolerance: in double, differences of h = 1e-5 are
 * exact to ~1e-10. */
#define FD_H   1e-5
#define FD_TOL 1e-7 /* absolute + relative */

double fd_dot(const double *a, const double *b, size_t n);

/* The objective of a kernel check: sum(w * out) for a fixed w, whose
 * gradient with respect to out is w (backward with dout = w gives its
 * exact gradient). */
typedef double (*fd_objective_fn)(void *ctx);

/* Compares analytic (n) with central differences (FD_H) of f in every
 * element of x (n), within FD_TOL, restoring x afterwards. */
void fd_check_grad(const char *what, fd_objective_fn f, void *ctx, double *x,
                   const double *analytic, size_t n);

/* A routed layer against its double reference (the MoE tests): analytic
 * (float, n) against central differences (h = 1e-6) of f in every element
 * of x, the worst within 1e-4 of (1 + the largest difference), which must
 * not be 0 (something flows). Each run of f leaves its routing in choice
 * and pos (nroute ints each): no step may change it, or the difference
 * crosses a kink. */
void fd_check_routed(const char *what, fd_objective_fn f, void *ctx, const int *choice,
                     const int *pos, size_t nroute, double *x, const float *analytic, size_t n);

/* The mean cross-entropy of logits (N, V) against the targets tgt (N), in
 * double: a reference loss's last step. */
double fd_mean_crossentropy(const double *logits, const int *tgt, int N, int V);

/* A model's loss at the parameters p (in double, the model's layout). */
typedef double (*fd_loss_fn)(void *ctx, const double *p);

/* m's forward and backward on inputs inp and targets tgt (B x T), its
 * loss within 1e-5 (relative) of loss(ctx, p) at its parameters p in
 * double, and its gradient against central differences (h = 1e-5) of
 * that: in every tensor, which must have a gradient, its largest element
 * and 11 others, each within 1e-4 of the largest plus 1e-4 relative. what
 * starts each failure's message. */
void fd_check_model_grad(const char *what, msr_gpt_t *m, const int *inp, const int *tgt, int B,
                         int T, fd_loss_fn loss, void *ctx);

/* The standard deviation of the elements of m's tensor k (in double),
 * their sum in *sum_p. */
double fd_tensor_sd(const msr_gpt_t *m, int k, double *sum_p);

#endif
