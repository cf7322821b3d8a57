/* The training layout: how a model is cut into pipeline stages, how a
 * stage's parameters are cut into data parallel's buckets and ZeRO's
 * shards, and the named defaults of both. The model and the runtime cut
 * and allocate with these functions; the planner counts with the same ones
 * (and with layout/pipe_order.h, the pipeline's op order), so a change to
 * the layout is made once. This module depends on base/ alone: the model,
 * the runtime and the planner all sit above it. */
#ifndef MSR_PARALLEL_LAYOUT_H
#define MSR_PARALLEL_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "layout/pipe_order.h"

/* Data parallel: the gradient bucket size, and the first bucket's (the last
 * layers' gradients, ready first, start their reduction early). */
#define MSR_DP_BUCKET_BYTES       (25u << 20)
#define MSR_DP_FIRST_BUCKET_BYTES (1u << 20)
/* ZeRO: segments smaller than this stay replicated. */
#define MSR_DP_ZERO_MIN_BYTES     (64u << 10)
/* ZeRO >= 1: packed bucket buffers alive at once, at most; a rank that
 * would need another waits for its oldest reduction first. */
#define MSR_DP_MAX_PACKED         4

/* ---- pipeline stages ---- */

/* The blocks [*lo_p, *hi_p) of virtual stage j of n: layers * j / n to
 * layers * (j + 1) / n (rounded down). */
void msr_layout_stage_even(int layers, int n, int j, int *lo_p, int *hi_p);

/* The blocks [*lo_p, *hi_p) of virtual stage j of n under split (n
 * entries, the layers of each stage), or the even split when split is
 * NULL. */
void msr_layout_split_stage(int layers, int n, const int *split, int j, int *lo_p, int *hi_p);

/* Checks a split of `layers` layers into `stages` virtual stages: count
 * entries (count == stages), each at least 1, summing to layers. On failure
 * sets the error text (a one-line reason naming the fault: the count, the
 * first empty stage, or the sum) and returns MSR_ERR_CONFIG. */
msr_status_t msr_layout_split_check(int layers, int stages, const int *split, int count);

/* Parses "3,5,5,3" (comma-separated decimal counts, no spaces) into split
 * (room for max entries) and *count_p; the values are checked by
 * msr_layout_split_check, not here. On failure (not a number, an empty entry,
 * more than max entries, a value over 2^24) sets the error text and
 * returns MSR_ERR_CONFIG; *count_p is written only on success. */
msr_status_t msr_layout_split_parse(const char *text, int *split, int max, int *count_p);

/* Whether split (n entries) is the even split of layers (and so can be
 * left out: NULL means the same). */
int msr_layout_split_is_even(int layers, int n, const int *split);

/* Writes split as "3,5,5,3" into buf (len bytes, truncated as snprintf
 * does); returns what snprintf would. */
int msr_layout_split_format(const int *split, int n, char *buf, size_t len);

/* ---- buckets and shards (data parallel, ZeRO) ---- */

/* The elements (fp32) of a bucket and of the first bucket, from their
 * sizes in bytes: at least 1 each, the first at most a bucket. */
void msr_layout_bucket_elems(uint64_t bucket_bytes, uint64_t first_bytes, uint64_t *bb_p,
                             uint64_t *fb_p);

/* The number of buckets P elements make, cut from the end: bucket 0 is
 * [P - fb, P), then bb elements each (the last may be shorter). */
uint64_t msr_layout_num_buckets(uint64_t P, uint64_t fb, uint64_t bb);

/* Bucket b's elements [*lo_p, *hi_p). */
void msr_layout_bucket_range(uint64_t P, uint64_t fb, uint64_t bb, uint64_t b, uint64_t *lo_p,
                             uint64_t *hi_p);

/* The bucket that holds element pos (< P), and its end in *hi_p. */
uint64_t msr_layout_bucket_at(uint64_t P, uint64_t fb, uint64_t bb, uint64_t pos, uint64_t *hi_p);

/* Whether a segment of seg_elems elements stays replicated under ZeRO
 * (smaller than zero_min_bytes; 0 shards every segment). */
int msr_layout_replicated(uint64_t seg_elems, uint64_t zero_min_bytes);

/* A sharded unit of n elements over size ranks: each rank's block of
 * ceil(n / size) elements (the last ranks' blocks may be short or empty). */
uint64_t msr_layout_block(uint64_t n, int size);

/* Elements [*a_p, *e_p) of a sharded unit of n elements (blocks of blk)
 * that belong to rank j. */
void msr_layout_block_of(uint64_t n, uint64_t blk, int j, uint64_t *a_p, uint64_t *e_p);

#endif
