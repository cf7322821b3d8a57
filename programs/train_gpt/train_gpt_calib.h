/* train_gpt --calibrate's parts (train_gpt_calibrate.c: the whole and the
 * cluster file; train_gpt_calib_kernels.c: timing train_gpt's kernels;
 * train_gpt_calib_node.c: cold frames, idle cores, memory, agreeing;
 * train_gpt_calib_comm.c: the communicator): what they share. One
 * program's private header. */
#ifndef MSR_PROGRAMS_TRAIN_GPT_CALIB_H
#define MSR_PROGRAMS_TRAIN_GPT_CALIB_H

#include <stddef.h>

#include "programs/train_gpt/train_gpt.h"

/* Each measurement repeats its call, doubling the count, until one round
 * lasts this long: long enough to hide the clock and a stray scheduling
 * hiccup, short enough that the whole calibration takes seconds. */
#define CALIB_ROUND_NS       (20 * 1000 * 1000ull)
#define CALIB_COMM_ROUND_NS  (60 * 1000 * 1000ull)
/* A job of fewer steps than this that measures for --plan or --auto (not
 * --calibrate FILE) times rounds a quarter as long and skips the cold
 * frames' curve (its keys keep their defaults: no cost): its calibration
 * takes a fraction of the time, its timings' noise (measured, and heeded
 * by --auto's choice) grows instead. */
#define CALIB_SHORT_STEPS    100
#define CALIB_SHORT_DIVISOR  4
/* The activation buffers are sized for one micro-batch but at most this
 * many rows: the rate no longer depends on the rows long before. */
#define CALIB_MAX_ROWS       4096
/* The allreduce that measures bandwidth moves the model's gradients, held
 * within these bounds (a tiny model's would measure latency only). */
#define CALIB_MIN_COMM_BYTES ((size_t)256 << 10)
#define CALIB_MAX_COMM_BYTES ((size_t)16 << 20)

/* How much repeated timings of the same calls disagree: over every
 * calib_rounds call that counts, the spread of its rounds (their median
 * less the fastest, seconds per call) and their median, summed. */
typedef struct calib_noise {
    double spread_s, time_s;
} calib_noise_t;

/* The buffers the kernels run on. */
typedef struct calib_bufs {
    int N, C, V, NH, T, B;
    /* a Llama's (--arch llama): RMSNorm, SwiGLU of width F, rotary
     * positions (theta), grouped-query attention of KVH key/value heads,
     * no biases; a GPT's: llama 0, KVH = NH, F = 4C */
    int llama, KVH, F;
    double theta;
    int N_max; /* the rows the buffers hold: N, or 2 N where that fits */
    float *inp, *weight, *bias, *out, *dout, *dinp, *dweight, *dbias;
    float *mean, *rstd, *att, *scratch;
    /* ring attention (cp): one pair of chunks of S = T / 4 positions (cp
     * 2's) or fewer, every key before every query; the running max and
     * sum, lse and delta (S, NH) each, in ring_stat at fixed places
     * whatever the chunk (a shorter chunk's backward must not read its
     * lse from the sums the forwards grew: its exp() would underflow, and
     * run slowly, where the runtime's never does); the key and value
     * gradients (S, 2C) */
    int S;
    int *ring_pos; /* keys' positions, then the queries' */
    float *ring_stat, *ring_dkv;
    float *ring_mx, *ring_sum, *ring_lse, *ring_delta; /* in ring_stat */
    calib_noise_t *noise; /* where calib_time adds its spread (NULL: nowhere) */
    uint64_t round_ns;    /* calib_rounds' round (calib_round_ns) */
} calib_bufs_t;

/* One kernel call to time: which, and its matmul sizes. */
typedef enum calib_kind {
    K_MM_FWD,
    K_MM_BWD,
    K_ATTN_FWD,
    K_ATTN_BWD,
    K_LN_FWD,
    K_LN_BWD,
    K_GELU_FWD,
    K_GELU_BWD,
    K_RESIDUAL,
    K_RING_FWD,
    K_RING_BWD,
    /* a Llama's element-wise kernels */
    K_RMS_FWD,
    K_RMS_BWD,
    K_SWIGLU_FWD,
    K_SWIGLU_BWD,
    K_ROPE, /* q's heads, then k's, as the block turns them */
} calib_kind_t;

typedef struct calib_call {
    calib_kind_t kind;
    int N, IC, OC; /* matmuls: rows, in and out channels */
} calib_call_t;

/* This rank's compute figures. */
typedef struct calib_compute {
    double flops_s;        /* the matmuls' and attention's FLOPs of a pass, per second */
    double matmul_flops_s; /* the matmuls' alone */
    double attn_flops_s;   /* attention's (its own loops), FLOP/s */
    double ring_flops_s;   /* ring attention's, a pair of chunks of T / 4 positions */
    double mem_bytes_s;    /* the element-wise kernels' bytes moved per second */
    double act_bytes_s;    /* of GELU's (a Llama's: SwiGLU's and the rotary positions') */
    double kernel_s;       /* one smallest call, seconds */
    double rows_half;      /* the matmuls' rate on N rows is N / (N + this) of their
                            * rate on many (0: no slower on fewer) */
    double ring_half;      /* the same for the ring's chunks of S positions */
    double noise;          /* the kernels' timings' spread over their time (calib_noise_t) */
} calib_compute_t;

/* What calib_cold found: the extra seconds per frame byte of a
 * micro-batch whose frames went cold, and the node's frame bytes where
 * that starts and where it is whole; the curve for the header. */
typedef struct calib_cold {
    double s_per_byte, from_bytes, full_bytes;
    int n;
    double frames_bytes[CALIB_COLD_COUNTS], ms[CALIB_COLD_COUNTS]; /* the node's frames, ms a
                                                                    * micro-batch */
} calib_cold_t;

/* What each rank measured, in calib_agree's order. */
#define CALIB_KEYS 13

/* ---- train_gpt_calib_kernels.c ---- */

void calib_run(const calib_bufs_t *b, const calib_call_t *k);
double calib_rounds(void (*run)(const void *), const void *arg, uint64_t round_ns,
                    calib_noise_t *noise);
/* The length of a timed round for o's job: base, or a CALIB_SHORT_DIVISOR-th
 * of it for a short job (CALIB_SHORT_STEPS). */
uint64_t calib_round_ns(const options_t *o, uint64_t base);
/* Whether o's job is short (CALIB_SHORT_STEPS). */
int calib_short(const options_t *o);
double calib_time(const calib_bufs_t *b, const calib_call_t *k);
void calib_fill(float *p, size_t n, size_t seed);
void calib_bufs_free(calib_bufs_t *b);
int calib_bufs_init(calib_bufs_t *b, const options_t *o);
int calib_compute(const options_t *o, calib_compute_t *r);
int dbl_cmp(const void *x, const void *y);
double median(double *v, int n);

/* ---- train_gpt_calib_node.c ---- */

int calib_cold(const options_t *o, msr_comm_t *comm, int rpn, calib_cold_t *out);
int calib_lend(const options_t *o, msr_comm_t *comm, int local, int rpn, int cores, double *lend,
               double *speedup);
double calib_mem_gib(int ranks_per_node);
int calib_agree(msr_comm_t *comm, const double *mine, double *mins, double *maxs);
int calib_cores(msr_comm_t *comm);

/* ---- train_gpt_calib_comm.c ---- */

int calib_comm(const options_t *o, msr_comm_t *world, const job_t *job, size_t bytes,
               msr_plan_cluster_t *c, unsigned *measured);

/* ---- train_gpt_calib_disk.c ---- */

/* The disk rates of o->offload_dir, where given, into k (GB/s, the
 * slowest rank's; CALIB_DISK measured): a file of each rank's written in
 * the offloads' chunks, synced, read back and removed. Returns 0, or -1
 * with the reason printed (every rank fails together). */
int calib_disk(const options_t *o, msr_comm_t *comm, int rank, calib_t *k);

/* ---- train_gpt_calib_cache.c: the calibration cache ---- */

typedef struct calib_cache {
    char dir[4096];  /* $XDG_CACHE_HOME/msrun, else $HOME/.cache/msrun */
    char path[4160]; /* dir/calibration-<the key's hash> */
    char key[1024];  /* the file's first line: version, CPU, cores, ranks, shape */
} calib_cache_t;

/* The cache file for a job of ranks ranks (ranks_per_node a node) and o's
 * model shape on this machine. Returns 0, or -1 where there is no cache
 * directory (neither XDG_CACHE_HOME nor HOME an absolute path). */
int calib_cache_init(calib_cache_t *cc, const options_t *o, int ranks, int ranks_per_node);

/* The cached cluster and noise into *c and *noise_p. Returns 0; 1 when
 * there is no file; -1 when the file is foreign or corrupt (a warning
 * printed, *c and *noise_p untouched). */
int calib_cache_load(const calib_cache_t *cc, msr_plan_cluster_t *c, double *noise_p);

/* Keeps k in the cache (the directory made, mode 0700; the file written
 * atomically, mode 0600). Returns 0, or -1 with a warning printed. */
int calib_cache_store(const calib_cache_t *cc, const options_t *o, const calib_t *k);

#endif
