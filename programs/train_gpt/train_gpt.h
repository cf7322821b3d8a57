/* train_gpt's own parts (programs/train_gpt/train_gpt.c: options, devices, main;
 * train_gpt_run.c: the step loop, checkpoints, resume, reports): what they
 * share. Not a library: one program's private header. */
#ifndef MSR_PROGRAMS_TRAIN_GPT_H
#define MSR_PROGRAMS_TRAIN_GPT_H

#include <stdint.h>
#include <stdio.h>

#include "msrun/msrun.h"
#include "planner/plan.h"
#include "parallel/train.h"

#define EXIT_BAD_INPUT 2

typedef struct options {
    int64_t layers, channels, heads, seq;
    int64_t micro_batch, grad_accum, global_batch, dp, tp, pp, cp, zero;
    int64_t experts, top_k, moe_every, ep; /* Mixture-of-Experts, expert parallel */
    double capacity_factor, aux_loss;
    int sp, tp_overlap;
    int64_t head_chunk; /* --head-chunk: the head's vocabulary rows a chunk (0: whole) */
    const char *schedule, *recompute, *trace;
    int64_t virtual_stages;
    const char *pp_layers; /* --pp-layers' text */
    /* the layers of each virtual stage when split unevenly: parsed from
     * pp_layers, or filled in by a planner (pp_layers NULL), then checked by
     * train_gpt_split_check; split_n 0: the even split */
    int split[MSR_GPT_MAX_STAGES];
    int split_n;
    double bucket_mb;
    int64_t zero_min_bytes, overlap;
    int64_t steps, warmup, seed;
    double lr, weight_decay, grad_clip;
    const char *data;
    int64_t corpus_bytes;
    const char *ckpt_dir;
    int64_t ckpt_every, ckpt_keep;
    int resume;
    int ckpt_async; /* --ckpt-async: checkpoints written by a thread */
    int64_t threads;
    const char *loss_log;
    const char *device;
    /* mixed precision: --precision, --grad-reduce-dtype ("fp32" or "bf16") */
    const char *precision, *grad_reduce_dtype;
    int report;
    /* the planner (train_gpt_calibrate.c, train_gpt_plan.c) */
    const char *calibrate, *cluster;
    int64_t calibrate_runs;
    int plan, plan_all, auto_plan;
    int recalibrate; /* measure again, not reusing the calibration cache */
    int64_t explain;
    /* safetensors (train_gpt_st.c, train_gpt_st_export.c): --export-safetensors, --init-from,
     * --dump-logits */
    const char *export_st, *init_from, *dump_logits;
    /* token data, validation and epochs (train_gpt_data.c) */
    int64_t vocab;          /* --vocab, 0: the data's */
    int epochs;             /* --epochs: the sampler's epoch order */
    const char *val_data;   /* --val-data */
    int64_t val_every;      /* --val-every, 0: only at the end */
    int64_t val_batches;    /* --val-batches */
    msr_dataset_t *val_set; /* --val-data loaded (not an option) */
    /* generation (train_gpt_gen.c, docs/model.md "Generation") */
    int64_t generate;          /* --generate N: tokens to sample (given: generate, no training) */
    const char *prompt;        /* --prompt: bytes, for a byte-level model */
    const char *prompt_tokens; /* --prompt-tokens: "1,2,3" */
    double temperature;        /* --temperature, 0: greedy */
    int64_t sample_top_k;      /* --sample-top-k, 0: every token */
    int64_t sample_seed;       /* --sample-seed, not given: --seed */
    /* the architecture (train_gpt_arch.c, docs/model.md "Llama") */
    const char *arch;       /* --arch: "gpt" or "llama" */
    int64_t ffn, kv_heads;  /* --ffn, --kv-heads (llama; not given: their defaults) */
    double rope_theta;      /* --rope-theta (llama) */
    const char *dump_grads; /* --dump-grads: the --dump-logits batch's gradients */
    /* the optimizer's moments offloaded (train_gpt_offload.c) */
    const char *offload;     /* --offload: optimizer=host|disk:DIR, activations=disk:DIR */
    int64_t offload_chunk;   /* --offload-chunk bytes */
    const char *offload_io;  /* --offload-io: threads or uring */
    int offload_keep;        /* --offload-keep */
    const char *offload_dir; /* --offload-dir: where --auto may offload (train_gpt_plan.c) */
    unsigned char *seen;     /* msr_opts_parse's, an entry per option of the table: 1 given */
} options_t;

/* Whether option name ("dp", without dashes) was on the command line. */
int train_gpt_given(const options_t *o, const char *name);

/* The job this process belongs to: msrun's when it started us, else a
 * world of one. */
typedef struct job {
    msr_ctx_t *ctx; /* NULL when alone */
    int rank, world;
} job_t;

/* A trainer as the step loop, checkpoints and resume see it: the CPU
 * trainer (parallel/train.h) or the GPU's (parallel/cuda/train_cuda.h,
 * called through the module). */
typedef struct trainer_ops {
    msr_status_t (*step)(void *tr, double *loss_p);
    msr_status_t (*snapshot)(void *tr, const char *meta, void **buf_p, size_t *len_p);
    msr_status_t (*restore)(void *tr, const char *meta, int world, msr_trainer_fetch_t fetch,
                            void *arg);
    uint64_t (*steps)(const void *tr);   /* optimizer steps done */
    double (*grad_norm)(const void *tr); /* the last step's global gradient norm */
} trainer_ops_t;

typedef struct trainer {
    const trainer_ops_t *ops;
    void *tr;
    msr_trainer_t *cpu; /* tr when it is the CPU trainer (mesh, trace), else NULL */
} trainer_t;

/* The CPU trainer (msr_trainer_t) behind trainer_ops_t. */
extern const trainer_ops_t train_gpt_cpu_ops;

/* Parses --pp-layers (o->pp_layers, when given) into o->split and
 * o->split_n, and checks that split against --layers, --pp and
 * --virtual-stages: split_n becomes 0 when it is the even split, which then
 * runs and resumes as if not given. Returns 0, or -1 with the reason
 * printed. */
int train_gpt_split_check(options_t *o);

/* The combinations this build can run; prints why not and returns -1.
 * Fills in dp when it was left to the world size (in_job: under msrun). */
int train_gpt_check_combination(options_t *o, int world, int in_job);

/* --offload and its settings into *opt (the moments) and *acts (the
 * activations; rank names the files), checked
 * against the rest of the options. Returns 0, or -1 with the reason
 * printed. */
int train_gpt_offload_config(const options_t *o, int rank, msr_offload_config_t *opt,
                             msr_offload_config_t *acts, msr_offload_config_t *params,
                             msr_offload_config_t *grads);

/* The whole model's parameters, whatever the layout (the experts too). */
size_t train_gpt_model_params(const msr_train_config_t *cfg);

#ifdef MSR_HAVE_CUDA_TRAIN
/* Trains on the GPU (train_gpt_cuda.c); the process's exit status. */
int train_gpt_run_cuda(const options_t *o, const msr_train_config_t *cfg, const msr_dataset_t *data,
                       const job_t *job, FILE *loss_log);
/* --arch and its options (train_gpt_arch.c): a known architecture, the
 * Llama's options only with --arch llama, and the layouts and tools a
 * Llama has (data parallel and ZeRO, checkpoints, safetensors); fills in
 * --ffn and --kv-heads' defaults. Called before the planner. Returns 0, or
 * -1 with the reason printed. */
int train_gpt_arch_check(options_t *o);
/* The model's architecture fields of cfg from checked options. */
void train_gpt_arch_config(const options_t *o, msr_gpt_config_t *cfg);
/* --dump-grads (train_gpt_st_export.c): rank 0 writes the gradient of the mean
 * loss of the --dump-logits batch (targets: each token's next in the
 * data) at the model's current weights, as safetensors under the export's
 * names, with the loss as the 1-element tensor "loss". Returns 0, else
 * the exit status with the reason printed. */
int train_gpt_st_dump_grads(msr_trainer_t *tr, const job_t *job, const msr_dataset_t *data,
                            const char *path);

#endif

/* The text a resume must match: the settings that decide the numbers
 * (whatever the device, so CPU and GPU runs resume each other). G: the
 * global batch in sequences. */
void train_gpt_meta(char *meta, size_t len, const msr_train_config_t *cfg, uint64_t G,
                    const msr_dataset_t *data);

/* The run, whatever the device: resumes when asked (o->resume), steps to
 * o->steps printing each step's loss on rank 0, saves the checkpoints that
 * are due, traces the last step (--trace, CPU), and says the speed after
 * the first step. comm: the world (the trace), NULL alone; tokens: a
 * step's global tokens. Returns the exit status. */
int train_gpt_run(const trainer_t *t, const job_t *job, const options_t *o, const char *meta,
                  msr_comm_t *comm, uint64_t tokens, FILE *loss_log);

/* --report with a MoE model, after each step: rank 0 prints each MoE
 * block's routing over the step's global batch (tokens, dropped choices,
 * each expert's load). Collective over the data-parallel group. */
msr_status_t train_gpt_moe_report(msr_trainer_t *tr, const job_t *job, uint64_t step);

/* --report: one line per rank, bytes held and where the time went. */
void train_gpt_report(const msr_trainer_t *tr, const job_t *job);

/* ---- generation (programs/train_gpt/train_gpt_gen.c, docs/model.md "Generation") ---- */

/* --generate: samples o->generate tokens after the prompt from the model
 * of the newest checkpoint under --ckpt-dir (any layout's, loaded into one
 * process), else of --init-from, else the seed's initial weights, and
 * prints them to stdout (bytes, or token ids). One process only. Returns
 * the exit status: 0, EXIT_BAD_INPUT (a value refused, its reason
 * printed), 1. */
int train_gpt_generate(const options_t *o, const msr_train_config_t *cfg, const msr_dataset_t *data,
                       const job_t *job);

/* ---- safetensors (programs/train_gpt/train_gpt_st.c, train_gpt_st_export.c,
 * docs/checkpoint.md) ---- */

/* Refuses what --export-safetensors, --init-from and --dump-logits cannot
 * do in this run (a part of the model for --dump-logits, --device cuda). Returns 0, or -1 with the
 * reason printed. */
int train_gpt_st_check(const options_t *o);

/* --init-from: every rank reads its slices of o->init_from into the
 * trainer's parameters, shapes and dtypes checked against the whole model
 * first. Collective over the world (comm, NULL alone). Returns the exit
 * status: 0, EXIT_BAD_INPUT (the file or a tensor refused, named), 1. */
int train_gpt_st_init(msr_trainer_t *tr, const job_t *job, msr_comm_t *comm, const char *path);

/* --export-safetensors: rank 0 lays the file out, every rank that owns a
 * slice (dp and cp rank 0; tp rank 0 for tp-replicated tensors; a MoE
 * model's experts from replica-group rank 0) pwrites it, rank 0 commits. Collective over the world.
 * Returns the exit status. */
int train_gpt_st_export(msr_trainer_t *tr, const job_t *job, msr_comm_t *comm, const char *path);

/* --dump-logits: rank 0 runs the whole model on a fixed batch (the first
 * micro-batch x seq bytes of the data) and writes i32 B, T, V, i32
 * tokens[B*T], f32 logits[B*T*V], little-endian. Returns the exit status. */
int train_gpt_st_dump_logits(msr_trainer_t *tr, const job_t *job, const msr_dataset_t *data,
                             const char *path);

/* ---- token data, validation, epochs (programs/train_gpt/train_gpt_data.c) ---- */

/* Loads --data (else generates the corpus) into *data_p with --vocab and
 * --epochs applied, and --val-data into o->val_set with the same V.
 * Returns 0, or -1 with the reason printed. */
int train_gpt_data_open(options_t *o, msr_dataset_t **data_p);

/* --val-data: the validation loss after step `step` when it is due (every
 * --val-every steps; `last`: the run's end), printed by rank 0 as "val
 * step N loss L" (and appended to the loss log as "val step N loss %a").
 * Collective over the world. Returns 0, or 1 with the reason printed. */
int train_gpt_validate(const trainer_t *t, const job_t *job, const options_t *o, uint64_t step,
                       int last, FILE *loss_log);

/* ---- elastic jobs (programs/train_gpt/train_gpt_elastic.c) ---- */

/* --resume without --global-batch in a job: when a checkpoint exists under
 * o->ckpt_dir (saved by any world size), sets o->global_batch to the one
 * it was trained with, so that a job re-formed on another number of ranks
 * (msrun --nnodes=MIN:MAX) resumes the same curve (--grad-accum follows;
 * --auto plans for it); rank 0 says so. Nothing saved yet: o unchanged.
 * Collective over the job (msr_ckpt_latest_any). Returns the exit status:
 * 0, EXIT_BAD_INPUT (the checkpoint's header refused, named), 1. */
int train_gpt_keep_global_batch(options_t *o, const job_t *job);

/* The largest global batch a checkpoint's settings may name (and
 * --global-batch may ask for). */
#define TRAIN_GPT_GLOBAL_BATCH_MAX (1 << 30)

/* The global batch written in a checkpoint's settings text (train_gpt_meta's
 * "; global batch G;"): 1 to TRAIN_GPT_GLOBAL_BATCH_MAX, else 0 (none, not
 * a number, or out of range). */
int64_t train_gpt_meta_global_batch(const char *meta);

/* The settings text meta (train_gpt_meta's) as checkpoints saved before it
 * counted the data in tokens wrote it: "data ORIGIN (N bytes)" for "(N
 * tokens)" (the same N: a byte-level data set's tokens are its bytes, a
 * token file's size was its tokens), into older (len bytes). Returns 1, or
 * 0 when meta names no data in tokens or older is too short. */
int train_gpt_meta_older(const char *meta, char *older, size_t len);

/* The settings text a resume from step under dir compares: meta, or the
 * older wording of it (in older, len bytes) when rank 0's shard of that
 * step was saved with that (train_gpt_meta_older). Every rank reads the
 * same file, so every rank picks the same. A header that cannot be read
 * picks meta (the restore then names the fault). */
const char *train_gpt_meta_to_resume(const job_t *job, const char *dir, int64_t step,
                                     const char *meta, char *older, size_t len);

/* Restores the latest complete checkpoint under o->ckpt_dir, if any
 * (train_gpt_resume.c): *resumed_p tells whether one was. A load that
 * fails part way is followed by an older intact step loaded whole, or
 * ends the resume: bad input (msr_tckpt_exit_status: exit 2), or the
 * machine's error (exit 1, no older step tried). Collective over the job. */
msr_status_t train_gpt_resume(const trainer_t *t, const job_t *job, const options_t *o,
                              const char *meta, int *resumed_p);
/* The CPU trainer's restore (trainer_ops_t) for train_gpt_resume: arg is
 * its reader of the saved payloads, which it reads a piece at a time. */
msr_status_t train_gpt_cpu_restore(void *tr, const char *meta, int world, msr_trainer_fetch_t fetch,
                                   void *arg);

/* The newest step under dir at or before `from`, saved by any world size
 * (*world_p ranks), that is whole: every shard's index reads and is of that
 * step, rank and world, every piece matches its CRC and every file its
 * own, and together they hold every element of the whole model (meta, this
 * run's settings, names its tensors). A damaged step is refused, its fault
 * said naming the file and the tensor, and the search goes on to the next
 * older; *step_p is -1 when none is whole. Collective over the job (every
 * rank must call it; all get the same answer). Errors, on every rank at
 * once: the store's, and the machine's on any rank (out of memory, an I/O
 * error: never taken for damage; the other ranks' text names that rank). */
msr_status_t train_gpt_latest_whole(const job_t *job, const char *dir, const char *meta,
                                    int64_t from, int64_t *step_p, int *world_p);

/* A state file's read or open that failed with st: when st is
 * MSR_ERR_CORRUPT because rank's file of step under dir is shorter than
 * its index says (libmsrun refuses it when it is opened, before any piece
 * is read), the error text goes on to say where the cut falls: the file's
 * size, the size its index gives and the first piece the missing bytes
 * cut, named by its tensor of the model meta describes (or its header and
 * index, when the cut is in them). Returns st. */
msr_status_t train_gpt_cut_err(msr_status_t st, const char *dir, int64_t step, int rank,
                               const char *meta);

/* msr_ckpt_latest under dir, a state file of this rank cut short named
 * in the log by the step, the file and the tensor of the model meta
 * describes that the cut falls in (msr_ckpt_latest_explain). */
msr_status_t train_gpt_latest_checked(msr_ctx_t *ctx, const char *dir, const char *meta,
                                      int64_t *step_p);

/* Rank 0 (with --ckpt-dir) tells the coordinator that this generation
 * saves a checkpoint when a node waits to join (MSR_KEY_JOIN_SAVES), so
 * that it holds the re-form for that save. A failure is printed: the job
 * then grows at msrun's last call. */
void train_gpt_join_announce(const job_t *job, const options_t *o);

/* Every how many steps the ranks look for a joining node: about every
 * 0.1 s from the first step's time dt (seconds), agreed by every rank (the
 * largest). 0: never (no communicator for the world here, or the
 * allreduce failed: the next step's communication then reports it).
 * Collective over comm (NULL alone). */
int train_gpt_join_every(const job_t *job, msr_comm_t *comm, double dt);

/* Whether a node waits to join the job (MSR_KEY_JOIN_WAITING), agreed by
 * every rank: rank 0 asks the store, an allreduce over comm shares its
 * answer (0 when it fails). Collective over comm (NULL alone). */
int train_gpt_join_waiting(const job_t *job, msr_comm_t *comm);

/* ---- the planner's front ends ---- */

/* What --calibrate measured (bits of calib_t.measured); the rest of the
 * cluster keeps msr_plan_cluster_default's values. */
enum {
    CALIB_COMPUTE,
    CALIB_RANKS,
    CALIB_MEM,
    CALIB_LATENCY,
    CALIB_INTRA,
    CALIB_INTER,
    CALIB_COLD,
    CALIB_LEND,
    CALIB_RING_STEP,
    CALIB_DISK
};

/* The most frame counts --calibrate's cold-frames curve has (1, 2, 4, ...). */
#define CALIB_COLD_COUNTS 16

typedef struct calib {
    msr_plan_cluster_t c;
    unsigned measured;
    double blend_tflops; /* the matmuls and attention of a pass together (for the record) */
    int64_t rows;        /* the matmuls' rows */
    size_t comm_bytes;   /* the allreduce's size */
    int ranks;
    double seconds; /* the calibration took */
    /* frames gone cold: a micro-batch's ms with the node's frames at each
     * size (MiB), the median rank's */
    int cold_n;
    double cold_mib[CALIB_COLD_COUNTS], cold_ms[CALIB_COLD_COUNTS];
    double lend_speedup; /* idle_lend's measured speed-up (its bit in measured) */
    int runs;            /* the calibrations this is the median of */
    double round_ms;     /* a timed kernel round's length (calib_round_ns) */
    int short_job;       /* calib_short: shorter rounds, no cold frames' curve */
    double noise;        /* how far repeated timings disagree, a fraction: the kernels'
                          * rounds' spread over their time on the noisiest rank (the
                          * largest of that and the runs' spread of rates, over runs) */
} calib_t;

/* Measures this machine at the model's shapes (programs/train_gpt/train_gpt_calibrate.c,
 * docs/plan.md "Calibrate"). Collective: every rank of comm calls it (comm
 * NULL alone). On success every rank holds the same *out. Returns 0, or -1
 * with the failure printed (by the rank that met it). */
int train_gpt_calibrate(const options_t *o, const job_t *job, msr_comm_t *comm, calib_t *out);

/* The cluster file's text for k: msr_plan_cluster_format's lines under a
 * header saying what was measured, keys not measured commented out.
 * Returns the length, or -1 when len is too small. */
int train_gpt_calibrate_text(const options_t *o, const calib_t *k, char *buf, size_t len);

/* One line saying what k measured (no newline). */
void train_gpt_calibrate_summary(const calib_t *k, char *buf, size_t len);

/* The most calibrations --calibrate-runs takes. */
#define CALIB_MAX_RUNS 9

/* train_gpt_calibrate o->calibrate_runs times (1 or more), every key the
 * median of the runs' (calibrate_merge); *out as train_gpt_calibrate's. */
int train_gpt_calibrate_runs(const options_t *o, const job_t *job, msr_comm_t *comm, calib_t *out);

/* --calibrate FILE: measures; rank 0 writes FILE. Returns the exit status
 * (2: FILE cannot be written). */
int train_gpt_calibrate_main(const options_t *o, const job_t *job);

/* --plan, --plan-all, --explain N and --auto (programs/train_gpt/train_gpt_plan.c).
 * Before the usual checks: prints the plans and sets *done_p, or (--auto)
 * sets o's layout from the best plan. Collective over the job. Returns the
 * exit status so far (0: go on unless *done_p). */
int train_gpt_plan(options_t *o, const job_t *job, int *done_p);

/* What the planner's search (msr_plan_search_fit) added to plan p, *pr
 * its search's (programs/train_gpt/train_gpt_fit.c):
 *   train_gpt_print_head: the chunked head the search gave p (the options
 *     gave none), into f after prefix: its rows, why, the bytes it saves
 *     and the flops it adds;
 *   train_gpt_auto_head: that chunk into o (as --head-chunk), said on rank
 *     0 (stderr);
 *   train_gpt_auto_offload: with --offload-dir, p's offload into o (as
 *     --offload would give it) and, on rank 0, which and why. */
void train_gpt_print_head(FILE *f, const char *prefix, const msr_plan_model_t *m,
                          msr_plan_precision_t prec, const msr_plan_cluster_t *c,
                          const msr_plan_t *p, const msr_plan_pruned_t *pr);
void train_gpt_auto_head(options_t *o, const job_t *job, const msr_plan_model_t *m,
                         msr_plan_precision_t prec, const msr_plan_cluster_t *c,
                         const msr_plan_t *p, const msr_plan_pruned_t *pr);
void train_gpt_auto_offload(options_t *o, const job_t *job, const msr_plan_model_t *m,
                            msr_plan_precision_t prec, const msr_plan_cluster_t *c,
                            const msr_plan_t *p, const msr_plan_pruned_t *pr);

/* --arch and its options (train_gpt_arch.c): a known architecture, the
 * Llama's options only with --arch llama, and the layouts and tools a
 * Llama has (data parallel and ZeRO, checkpoints, safetensors); fills in
 * --ffn and --kv-heads' defaults. Called before the planner. Returns 0, or
 * -1 with the reason printed. */
int train_gpt_arch_check(options_t *o);
/* The model's architecture fields of cfg from checked options. */
void train_gpt_arch_config(const options_t *o, msr_gpt_config_t *cfg);
/* --dump-grads (train_gpt_st_export.c): rank 0 writes the gradient of the mean
 * loss of the --dump-logits batch (targets: each token's next in the
 * data) at the model's current weights, as safetensors under the export's
 * names, with the loss as the 1-element tensor "loss". Returns 0, else
 * the exit status with the reason printed. */
int train_gpt_st_dump_grads(msr_trainer_t *tr, const job_t *job, const msr_dataset_t *data,
                            const char *path);

#endif
