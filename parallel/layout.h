/* The training layout's named defaults: what the runtime allocates from
 * (parallel/dp.c cuts its buckets with them) and what the planner counts
 * with (planner/plan_mem.c, planner/plan_time.c). Each is named here once.
 *
 * This header and parallel/pipe_order.h (the pipeline's op order) are the
 * runtime's layout code: the msrun_layout library, the only part of the
 * runtime the planner may include or link (the build gives the planner an
 * include root that holds these two headers and nothing else of
 * parallel/). */
#ifndef MSR_PARALLEL_LAYOUT_H
#define MSR_PARALLEL_LAYOUT_H

#include "parallel/pipe_order.h"

/* Data parallel: the gradient bucket size, and the first bucket's (the last
 * layers' gradients, ready first, start their reduction early). */
#define MSR_DP_BUCKET_BYTES       (25u << 20)
#define MSR_DP_FIRST_BUCKET_BYTES (1u << 20)
/* ZeRO: segments smaller than this stay replicated. */
#define MSR_DP_ZERO_MIN_BYTES     (64u << 10)
/* ZeRO >= 1: packed bucket buffers alive at once, at most; a rank that
 * would need another waits for its oldest reduction first. */
#define MSR_DP_MAX_PACKED         4

#endif
