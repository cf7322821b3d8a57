/* The layer kernels, compiled from layers_impl.h in float and in double. */
#include "model/layers.h"

#include <cblas.h>
#include <tgmath.h>

#define R(x) ((real)(x))

/* float: what the model runs */
#define real        float
#define LAYER(name) msr_##name
#define GEMM        cblas_sgemm
#include "model/layers_impl.h"
#undef real
#undef LAYER
#undef GEMM

/* double: what the gradient tests check against finite differences */
#define real        double
#define LAYER(name) msr_##name##_f64
#define GEMM        cblas_dgemm
#include "model/layers_impl.h"
#undef real
#undef LAYER
#undef GEMM
