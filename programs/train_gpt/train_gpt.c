/* train_gpt: trains the reference GPT (model/gpt.h) on the bytes of a
 * file, or on the generated corpus when no --data is given, over every rank
 * of the msrun job cut into the mesh dp x pp x cp x tp (data parallel with
 * ZeRO, pipeline, context and tensor/sequence parallel, parallel/mp.h), and
 * prints one
 * line per step on rank 0:
 *
 *   step 12 loss 3.141593 tok/s 5120
 *
 * Runs alone (dp 1, no checkpoints) or under msrun (msrun --worker_num=4
 * --local_worker_num=4 build/bin/train_gpt ...: dp 4; ... --tp 2 --pp 2:
 * dp 1). Exit status: 0 done,
 * 2 bad options or an invalid combination (refused before training), 1 a
 * failure while training. See docs/model.md. */
#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu_features.h"
#include "base/err.h"
#include "base/log.h"
#include "base/optparse.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "msrun/msrun.h"
#include "layout/layout.h"
#include "model/data.h"
#include "model/gemm_bf16.h"
#include "model/moe.h"
#include "parallel/train.h"
#include "programs/train_gpt/train_gpt.h"

#define D(field) MSR_OPT_DEST(options_t, field)
#define OPT_INT(n, field, lo, hi, h)                                                      \
    {                                                                                     \
        .name = n, .kind = MSR_OPT_INT, .min = lo, .max = hi, .dest = D(field), .help = h \
    }
#define OPT_REAL(n, field, lo, hi, h)                                                      \
    {                                                                                      \
        .name = n, .kind = MSR_OPT_REAL, .real_min = lo, .real_max = hi, .dest = D(field), \
        .help = h                                                                          \
    }
#define OPT_TEXT(n, field, h)                                        \
    {                                                                \
        .name = n, .kind = MSR_OPT_TEXT, .dest = D(field), .help = h \
    }
/* a flag takes no value: "--sp=1" is refused, as the next word never is one */
#define OPT_FLAG(n, field, h)                                                                   \
    {                                                                                           \
        .name = n, .kind = MSR_OPT_BOOL, .flags = MSR_OPT_NO_VALUE, .dest = D(field), .help = h \
    }

/* The options, in --help's order; the defaults are main's. */
static const msr_opt_t specs[] = {
    OPT_INT("layers", layers, 1, 1024, "transformer blocks (4)"),
    OPT_INT("channels", channels, 1, 16384, "width of the residual stream (128)"),
    OPT_INT("heads", heads, 1, 16384, "attention heads; must divide channels (4)"),
    OPT_INT("seq", seq, 1, 16384, "tokens per sequence (64)"),
    OPT_INT("micro-batch", micro_batch, 1, 65536, "sequences per forward/backward (8)"),
    OPT_INT("grad-accum", grad_accum, 1, 65536, "micro-batches per step and dp rank (1)"),
    OPT_INT("global-batch", global_batch, 0, TRAIN_GPT_GLOBAL_BATCH_MAX,
            "sequences per step; sets --grad-accum to it / (micro-batch x dp), so any world "
            "size trains (and resumes) the same numbers; 0 = micro-batch x grad-accum x dp (0)"),
    OPT_INT("dp", dp, 0, 1 << 20, "data-parallel degree, 0 = world size / (tp x pp x cp) (0)"),
    OPT_INT("tp", tp, 1, 1 << 20, "tensor-parallel degree (1)"),
    OPT_INT("pp", pp, 1, 1 << 20, "pipeline-parallel degree (1)"),
    OPT_INT("cp", cp, 1, 1 << 20,
            "context-parallel degree: the sequence in 2 x cp chunks, ring attention (1)"),
    OPT_INT("experts", experts, 0, MSR_GPT_MAX_EXPERTS,
            "Mixture-of-Experts: experts in each MoE block's MLP, 0 = a dense model (0)"),
    OPT_INT("top-k", top_k, 1, MSR_GPT_MAX_EXPERTS, "experts each token goes to (2)"),
    OPT_INT("moe-every", moe_every, 1, 1024, "every N-th block is a MoE block (1)"),
    OPT_REAL("capacity-factor", capacity_factor, 1e-6, 1e3,
             "an expert takes ceil(F x tokens x top-k / experts) of a micro-batch's tokens (1.25)"),
    OPT_REAL("aux-loss", aux_loss, 0, 1e3, "weight of the load-balancing loss (0.01)"),
    OPT_INT("ep", ep, 1, 1 << 20,
            "expert-parallel degree: the experts are shared out over ep ranks of the data-parallel "
            "group, and over tp within each (1)"),
    OPT_FLAG("sp", sp,
             "sequence parallel: layernorms and residuals on T/tp positions (needs --tp > 1)"),
    OPT_FLAG("tp-overlap", tp_overlap,
             "tensor-parallel overlap: each micro-batch's sequences run as two copies, one "
             "copy's tp allreduces (with --sp its reduce-scatters and allgathers, forward and "
             "backward) in flight while the other computes (needs --tp > 1 and an even "
             "--micro-batch)"),
    OPT_INT("head-chunk", head_chunk, 0, 1 << 30,
            "compute the head's logits this many vocabulary rows at a time (of each tp rank's "
            "V/tp), keeping each position's maximum, sum and target logit instead of the (N, "
            "V) logits, probabilities and their gradient; the backward computes them again; "
            "0 = the whole head (0)"),
    OPT_TEXT("schedule", schedule,
             "pipeline schedule: gpipe, 1f1b or interleaved (1f1b); its micro-batches are "
             "--grad-accum"),
    OPT_INT("virtual-stages", virtual_stages, 1, 64,
            "model chunks per pipeline rank, for --schedule interleaved (1)"),
    OPT_TEXT("pp-layers", pp_layers,
             "layers of each virtual stage, e.g. 3,5,5,3: pp x virtual-stages counts, each >= 1, "
             "summing to --layers; stage j = chunk x pp + pipeline rank (even split)"),
    OPT_TEXT("recompute", recompute,
             "activation recompute: none, selective (attention probabilities and GELU) or full "
             "(each block's forward) (none)"),
    OPT_INT("zero", zero, 0, 3, "ZeRO stage 0, 1, 2 or 3 (0)"),
    OPT_REAL("bucket-mb", bucket_mb, 1e-6, 1e6,
             "gradient bucket size in MiB; the first (last layers) is at most 1 MiB (25)"),
    OPT_INT("zero-min-bytes", zero_min_bytes, 0, (int64_t)1e15,
            "ZeRO: segments (layers) smaller than this stay replicated (65536)"),
    OPT_INT("overlap", overlap, 0, 1,
            "1: reduce each bucket as soon as ready, overlapping backward; 0: after (1); "
            "--schedule interleaved reduces after the pipeline flush"),
    /* the optimizer's moments offloaded (docs/model.md "Offload";
     * train_gpt_offload.c) */
    OPT_TEXT("offload", offload,
             "optimizer=disk:DIR: AdamW's moments in a file per rank under DIR (0600, removed at "
             "the end; a MoE model's experts' in a second one), streamed in chunks each step; "
             "optimizer=host: with --device cuda, the moments "
             "and the master parameters in host memory and the update on the host, the "
             "gradients and parameters moved in chunks (on CPU ranks: as without the option); "
             "activations=disk:DIR (with --recompute full): each block's "
             "input in a file per rank under DIR, written after its forward, read back ahead of "
             "its backward; params=disk:DIR (CPU ranks): each block's parameters (under --zero 3 "
             "the rank's share; a MoE model's experts' in a second file, under --zero 3 with "
             "replicas the rank's shares of them) in a file per rank under DIR, "
             "read ahead of the block's forward and "
             "backward and dropped after, updated a block at a time; params=host (with "
             "--device cuda and optimizer=host): the blocks' parameters and gradients in host "
             "memory, two blocks on the GPU, each copied in ahead of its forward and backward "
             "and its gradients out after; grads=disk:DIR (with "
             "optimizer=disk, --zero 2 or 3, data parallel alone): the rank's gradient shard in a "
             "file per rank under DIR, written as each bucket is reduced, read back in chunks by "
             "the update (a MoE model's experts' beside their parameters' file, under --zero 3 "
             "with replicas the rank's shares); several: comma-separated (none)"),
    OPT_INT("offload-chunk", offload_chunk, MSR_OFFLOAD_CHUNK_MIN, MSR_OFFLOAD_CHUNK_MAX,
            "--offload optimizer=disk: bytes per chunk (m and v of chunk/8 elements); "
            "optimizer=host on --device cuda: bytes of gradients a chunk moves; a multiple "
            "of 4096 (4194304)"),
    OPT_TEXT(
        "offload-io", offload_io,
        "--offload disk modes: the I/O engine, threads (pread/pwrite on a pool) or uring "
        "(io_uring, where built with liburing) (uring where built and the kernel allows it, else "
        "threads)"),
    OPT_FLAG("offload-keep", offload_keep, "--offload disk modes: keep the files at the end"),
    OPT_TEXT("offload-dir", offload_dir,
             "--auto: when no layout fits the memory without offload, offload the optimizer's "
             "moments, else the block inputs (full recompute), else both, else the blocks' "
             "parameters beside the moments, else ZeRO 2-3's gradient shard beside those, to "
             "files under DIR "
             "(none: --auto does not offload); --calibrate and --auto's calibration: measure "
             "DIR's read and write rates (disk_read_gbs, disk_write_gbs)"),
    /* mixed precision (docs/model.md "bf16 training") */
    OPT_TEXT("precision", precision,
             "the matrix products' operands: fp32, or bf16 (fp32 sums, fp32 master weights and "
             "AdamW moments; layernorm, softmax, GELU and the loss in fp32) (fp32)"),
    OPT_TEXT("grad-reduce-dtype", grad_reduce_dtype,
             "the dtype data-parallel gradients are summed in: fp32, or bf16 (rounded to bf16, "
             "each combining step in fp32 rounded to bf16; needs --zero 0; --device cpu "
             "only) (fp32)"),
    OPT_INT("steps", steps, 0, (int64_t)1e15, "optimizer steps to reach (20)"),
    OPT_REAL("lr", lr, 1e-12, 1e3, "peak learning rate (1e-3)"),
    OPT_INT("warmup", warmup, 0, (int64_t)1e9, "steps of linear learning-rate warm-up (0)"),
    OPT_REAL("weight-decay", weight_decay, 0, 1e3, "AdamW weight decay on matrices (0.1)"),
    OPT_REAL("grad-clip", grad_clip, 0, 1e30, "global gradient-norm limit, 0 = off (1)"),
    OPT_INT("seed", seed, 0, (int64_t)9.2e18, "initialisation and sampling seed (1337)"),
    OPT_TEXT("data", data,
             "the data: a token file (llm.c's .bin: magic 20240520, version 1 uint16 or 2 "
             "uint32 tokens), else a file whose bytes are the tokens (generated corpus)"),
    OPT_INT("corpus-bytes", corpus_bytes, 2, 1 << 30, "size of the generated corpus (1 MiB)"),
    OPT_TEXT("ckpt-dir", ckpt_dir, "directory of checkpoints (none)"),
    OPT_INT("ckpt-every", ckpt_every, 0, (int64_t)1e15,
            "steps between checkpoints, 0 = only at the end (0)"),
    OPT_INT("ckpt-keep", ckpt_keep, 0, (int64_t)1e9, "checkpoints kept, 0 = all (0)"),
    OPT_FLAG("resume", resume,
             "continue from the latest complete checkpoint, saved by any layout and world size "
             "of the same model and global batch (without --global-batch: the checkpoint's)"),
    OPT_FLAG("ckpt-async", ckpt_async,
             "a thread copies the state to save while the next step computes (its update waits "
             "for the copy; with the moments or the parameters offloaded, for the thread's "
             "reads of them from their files) and "
             "writes it (the next save waits for it)"),
    /* safetensors (train_gpt_st.c, docs/checkpoint.md "safetensors names") */
    OPT_TEXT("export-safetensors", export_st,
             "at the end of the run (--steps 0: of the initial or resumed weights) write the "
             "whole model's weights, F32, to this safetensors file, whatever the layout; every "
             "writing rank must see the path (none)"),
    OPT_TEXT("init-from", init_from,
             "start from the weights of this safetensors file (F32 or BF16, shapes checked; any "
             "layout, each rank reads its slices) instead of the seed's; a checkpoint found by "
             "--resume still wins (none)"),
    OPT_TEXT("dump-logits", dump_logits,
             "at the end, rank 0 writes the logits of a fixed batch (the data's first "
             "micro-batch x seq bytes) here: i32 B T V, i32 tokens, f32 logits, little-endian; "
             "tp = pp = cp = ep = 1, ZeRO 0-2 (none)"),
    /* token data, validation and epochs (train_gpt_data.c, docs/model.md "Token data") */
    OPT_INT("vocab", vocab, 0, 65536,
            "vocabulary V, every token below it; 0 = 256 for bytes, for a token file its "
            "largest token + 1 rounded up to a multiple of 128 (0)"),
    OPT_FLAG("epochs", epochs,
             "sample in epochs: every window of seq + 1 tokens (starting at multiples of seq) "
             "once per epoch, in an order shuffled by the seed and the epoch (default: windows "
             "drawn with replacement)"),
    OPT_TEXT("val-data", val_data,
             "validation data (a token or byte file, same V): its loss over --val-batches "
             "fixed batches, printed every --val-every steps and at the end (none)"),
    OPT_INT("val-every", val_every, 0, (int64_t)1e15,
            "steps between validation losses, 0 = only at the end (0)"),
    OPT_INT("val-batches", val_batches, 1, 1 << 20,
            "validation batches of global-batch sequences: the first windows of --val-data "
            "in order (4)"),
    /* generation (train_gpt_gen.c, docs/model.md "Generation") */
    OPT_INT("generate", generate, 0, 1 << 20,
            "no training: sample N tokens after the prompt from the newest checkpoint under "
            "--ckpt-dir (any layout's, loaded into one process), else --init-from's weights, "
            "else the seed's; prompt + N <= --seq; prints the bytes, or token ids, to stdout"),
    OPT_TEXT("prompt", prompt, "--generate's prompt as bytes (a byte-level model, V = 256)"),
    OPT_TEXT("prompt-tokens", prompt_tokens,
             "--generate's prompt as token ids, e.g. 1,2,3 (each below V)"),
    OPT_REAL("temperature", temperature, 0, 1e6,
             "--generate: softmax(logits / temperature), 0 = greedy (the argmax) (1)"),
    OPT_INT("sample-top-k", sample_top_k, 0, 65536,
            "--generate: draw among the k most likely tokens only (k <= V), 0 = all (0)"),
    OPT_INT("sample-seed", sample_seed, 0, (int64_t)9.2e18,
            "--generate: the seed of the draws (--seed, which a checkpoint's run fixes)"),
    OPT_INT("threads", threads, 0, 1024, "OpenBLAS threads, 0 = OpenBLAS's choice (0)"),
    OPT_TEXT("loss-log", loss_log,
             "rank 0 also appends 'step N loss L norm G' with exact (%a) values here"),
    OPT_TEXT("device", device,
             "cpu, or cuda: the model on the GPU of local rank % visible GPUs (builds with "
             "CUDA only; plain data parallel, no --zero; the trainer is loaded from "
             "../lib/libmsrun_train_cuda.so beside the executable, or $MSRUN_CUDA_TRAINER) (cpu)"),
    OPT_TEXT("trace", trace,
             "rank 0 writes a Chrome-trace JSON of the last step here: every rank's compute and "
             "communication spans (runs through the model-parallel runtime even with tp = pp = 1)"),
    OPT_FLAG("report", report,
             "every rank prints its memory and time breakdown at the end (and the exposed "
             "communication: one more allreduce per step; with the model-parallel runtime its "
             "stage, bubble and activation peak)"),
    OPT_TEXT("calibrate", calibrate,
             "measure this machine for the planner (kernels at the model's shapes, the job's "
             "collectives; seconds) and write the cluster file here (rank 0); no training"),
    OPT_INT("calibrate-runs", calibrate_runs, 1, CALIB_MAX_RUNS,
            "measure that many times, each key the median of the runs' (1)"),
    OPT_FLAG(
        "plan", plan,
        "print the planner's 10 best layouts for the job's ranks and the global batch, and exit"),
    OPT_FLAG("plan-all", plan_all, "as --plan, every valid layout"),
    OPT_INT("explain", explain, 1, (int64_t)1e9, "print plan N broken down, and exit"),
    OPT_TEXT("cluster", cluster,
             "the cluster file for --plan, --explain and --auto (else the calibration cached for "
             "this machine and model shape, or measured now, as --calibrate, and cached)"),
    OPT_FLAG("auto", auto_plan,
             "train with the simplest of the layouts predicted within the calibration's noise of "
             "the fastest (rank 0 prints it, the runner-up and the layout without --auto); "
             "layout options given fix the search; where every layout is over the memory "
             "budget, a chunked head of 1024 rows (unless --head-chunk is given), then with "
             "--offload-dir the offloads (see docs/plan.md)"),
    OPT_FLAG("recalibrate", recalibrate,
             "measure the cluster for --plan, --explain and --auto again instead of reusing the "
             "calibration cached for this machine and model shape ($XDG_CACHE_HOME/msrun or "
             "~/.cache/msrun), and cache the new one"),
    /* the architecture (train_gpt_arch.c, docs/model.md "Llama") */
    OPT_TEXT("arch", arch,
             "gpt (GPT-2: LayerNorm, GELU MLP, learned positions, tied head) or llama (RMSNorm, "
             "SwiGLU MLP, rotary positions, grouped-query attention, untied head, no biases; "
             "dp, ZeRO, pp, tp, sp, cp and Mixtral-style experts) (gpt)"),
    OPT_INT("ffn", ffn, 1, 65536,
            "llama: width of the SwiGLU MLP (8 x channels / 3, rounded up to a multiple of 8)"),
    OPT_INT("kv-heads", kv_heads, 1, 16384,
            "llama: key/value heads, dividing --heads (grouped-query attention); split among "
            "--tp ranks, or with fewer than --tp (a divisor of it) each replicated on tp / "
            "kv-heads ranks (--heads)"),
    OPT_REAL("rope-theta", rope_theta, 1, 1e12,
             "llama: base of the rotary positions' frequencies, above 1 (10000)"),
    OPT_TEXT("dump-grads", dump_grads,
             "at the end, rank 0 writes the gradient of the mean loss of --dump-logits' batch "
             "(targets: each token's next in the data) as safetensors under the export's names, "
             "with the loss as tensor 'loss'; as --dump-logits, and ZeRO 0-1 (none)"),
    {.name = "help", .kind = MSR_OPT_HELP, .help = "this text"},
};

static const msr_optset_t opt_set = {"train_gpt", specs, MSR_ARRAY_SIZE(specs), 0,
                                     MSR_OPTS_USAGE_COLUMNS};

int train_gpt_given(const options_t *o, const char *name)
{
    int k = msr_opts_find(&opt_set, name);
    return k >= 0 && o->seen[k] == 1;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: train_gpt [--option value | --option=value]...\n\n"
                 "Trains a GPT on bytes and prints 'step N loss L tok/s R' per step; the\n"
                 "loss is the mean cross-entropy of the next byte, in nats per byte (of the\n"
                 "next token, in nats per token, when --data is a token file).\n\n");
    msr_opts_usage(&opt_set, out);
}

static msr_status_t job_join(job_t *job)
{
    job->ctx = NULL;
    job->rank = 0;
    job->world = 1;
    if (getenv("MSR_WORLD_SIZE") == NULL)
        return MSR_OK;
    msr_status_t st = msr_init(&job->ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "train_gpt: cannot join the msrun job: %s: %s\n", msr_status_str(st),
                msr_last_error());
        return st;
    }
    job->rank = msr_rank(job->ctx);
    job->world = msr_world_size(job->ctx);
    return MSR_OK;
}

/* Trains on the CPU (parallel/train.h): data parallel over the job, or
 * the mesh of model parallel. Returns the exit status. */
/* The whole model's parameters, whatever the layout: a rank of tp or pp
 * holds only its part (tr->model->num_params). The experts of a MoE model
 * are counted too. */
size_t train_gpt_model_params(const msr_train_config_t *cfg)
{
    return msr_gpt_num_params(&cfg->model) + msr_moe_num_params(&cfg->model);
}

/* Rank 0's lines on the job: the model, the batch, the CPU, the layout. */
static void print_job(const msr_train_config_t *cfg, const msr_trainer_t *tr,
                      const msr_dataset_t *data, uint64_t G, int use_mp)
{
    fprintf(stderr,
            "train_gpt: model of %zu parameters (layers %d channels %d heads %d seq %d); "
            "batch %llu = micro %d x accum %d x dp %d; zero %d, %d buckets; data: %s; "
            "loss in nats per %s\n",
            train_gpt_model_params(cfg), cfg->model.layers, cfg->model.channels, cfg->model.heads,
            cfg->model.max_seq, (unsigned long long)G, cfg->micro_batch, cfg->grad_accum, cfg->dp,
            cfg->par.zero, tr->dp->num_buckets, data->origin, data->width == 1 ? "byte" : "token");
    char cpu[200]; /* the kernels' paths follow from it */
    msr_cpu_features_describe(cpu, sizeof cpu);
    fprintf(stderr, "train_gpt: %s\n", cpu);
    unsigned features = 0;
    msr_gemm_bf16_path_t path = MSR_GEMM_BF16_BLAS;
    const char *why = NULL;
    if (cfg->precision == MSR_PRECISION_BF16 && msr_cpu_features_get(&features) == MSR_OK &&
        msr_gemm_bf16_auto(features, &path, &why) == MSR_OK)
        fprintf(stderr, "train_gpt: bf16 products on the %s path: %s\n",
                msr_gemm_bf16_path_name(path), why);
    if (cfg->model.arch == MSR_GPT_ARCH_LLAMA)
        fprintf(stderr, "train_gpt: llama: ffn %d, %d kv heads, rope theta %g\n", cfg->model.ffn,
                cfg->model.kv_heads, cfg->model.rope_theta);
    if (tr->model->moe != NULL)
        fprintf(stderr,
                "train_gpt: MoE: %d experts (top-%d, capacity factor %g, aux loss %g) in %d "
                "blocks, %zu expert parameters, %zu on rank 0; ep %d\n",
                cfg->model.moe.experts, cfg->model.moe.top_k, cfg->model.moe.capacity_factor,
                cfg->model.moe.aux_loss, msr_moe_blocks(tr->model->moe),
                msr_moe_num_params(&cfg->model), msr_moe_count(tr->model->moe),
                cfg->ep > 1 ? cfg->ep : 1);
    if (use_mp)
        fprintf(
            stderr,
            "train_gpt: mesh dp %d x pp %d x cp %d x tp %d%s; schedule %s, %d virtual stages "
            "per rank, %d micro-batches per step; recompute %s; rank 0 holds %zu of the model's "
            "parameters\n",
            cfg->dp, cfg->pp, cfg->cp, cfg->tp, cfg->mp.sp ? " with sequence parallel" : "",
            msr_mp_schedule_name(cfg->mp.schedule), cfg->mp.chunks, cfg->grad_accum,
            msr_mp_recompute_name(cfg->mp.recompute), tr->model->num_params);
    if (tr->cfg.mp.stage_layers != NULL) {
        char split[8 * MSR_GPT_MAX_STAGES];
        msr_layout_split_format(tr->cfg.mp.stage_layers, cfg->pp * cfg->mp.chunks, split,
                                sizeof split);
        fprintf(stderr, "train_gpt: layers per virtual stage %s (uneven split)\n", split);
    }
}

static int run_cpu(const options_t *o, const msr_train_config_t *cfg, const msr_dataset_t *data,
                   const job_t *job, FILE *loss_log)
{
    msr_trainer_t *tr = NULL;
    msr_comm_t *comm = NULL;
    msr_mesh_t *mesh = NULL;
    int rc = 1;
    msr_status_t st;
    if (job->world > 1 && (st = msr_comm_world(job->ctx, &comm)) != MSR_OK) {
        fprintf(stderr, "train_gpt: cannot make the communicator: %s: %s\n", msr_status_str(st),
                msr_last_error());
        goto out;
    }
    /* the data-parallel group is the whole job while tp = pp = cp = 1 */
    int use_mp = msr_train_uses_mp(cfg);
    msr_err_clear(); /* what is printed below is these calls' */
    st = use_mp ? msr_mesh_create(comm, cfg->dp, cfg->pp, cfg->cp, cfg->tp, &mesh)
                : msr_mesh_create_dp(comm, &mesh);
    if (st == MSR_OK)
        st = msr_trainer_create_mesh(cfg, data, mesh, &tr);
    if (st != MSR_OK) {
        fprintf(stderr, "train_gpt: cannot set up the training: %s: %s\n", msr_status_str(st),
                msr_err_msg_or(st));
        goto out;
    }
    uint64_t G = (uint64_t)o->micro_batch * (uint64_t)o->grad_accum * (uint64_t)o->dp;
    char meta[MSR_TCKPT_META_MAX];
    train_gpt_meta(meta, sizeof meta, cfg, G, data);
    if (job->rank == 0)
        print_job(cfg, tr, data, G, use_mp);

    trainer_t t = {&train_gpt_cpu_ops, tr, tr};
    if (o->init_from != NULL && (rc = train_gpt_st_init(tr, job, comm, o->init_from)) != 0)
        goto out;
    if ((rc = train_gpt_run(&t, job, o, meta, comm, G * (uint64_t)o->seq, loss_log)) != 0)
        goto out;
    if (o->export_st != NULL && (rc = train_gpt_st_export(tr, job, comm, o->export_st)) != 0)
        goto out;
    if (o->dump_logits != NULL &&
        (rc = train_gpt_st_dump_logits(tr, job, data, o->dump_logits)) != 0)
        goto out;
    if (o->dump_grads != NULL && (rc = train_gpt_st_dump_grads(tr, job, data, o->dump_grads)) != 0)
        goto out;
    rc = 1;
    if (o->report)
        train_gpt_report(tr, job);
    /* nobody leaves while a peer may still be receiving its last message
     * (the last step's tied embedding, the trace): a lost peer breaks the
     * communicator even for a message already sent */
    if (comm != NULL && (st = msr_comm_barrier(comm)) != MSR_OK) {
        fprintf(stderr, "train_gpt: the final barrier: %s: %s\n", msr_status_str(st),
                msr_last_error());
        goto out;
    }
    rc = 0;

out:
    /* the communicators first: requests a failed step left in flight then
     * end at once (see msr_trainer_destroy) */
    msr_mesh_destroy(mesh);
    msr_comm_destroy(comm);
    msr_trainer_destroy(tr);
    return rc;
}

/* The defaults --help states. */
static options_t options_defaults(void)
{
    return (options_t){
        .layers = 4,
        .channels = 128,
        .heads = 4,
        .seq = 64,
        .micro_batch = 8,
        .grad_accum = 1,
        .dp = 0,
        .tp = 1,
        .pp = 1,
        .cp = 1,
        .virtual_stages = 1,
        .top_k = 2,
        .moe_every = 1,
        .capacity_factor = 1.25,
        .aux_loss = 0.01,
        .ep = 1,
        .zero = 0,
        .bucket_mb = MSR_DP_BUCKET_BYTES / 1048576.0,
        .zero_min_bytes = MSR_DP_ZERO_MIN_BYTES,
        .overlap = 1,
        .steps = 20,
        .warmup = 0,
        .seed = 1337,
        .lr = 1e-3,
        .weight_decay = 0.1,
        .grad_clip = 1.0,
        .corpus_bytes = 1 << 20,
        .device = "cpu",
        .precision = "fp32",
        .grad_reduce_dtype = "fp32",
        .calibrate_runs = 1,
        .val_batches = 4,
        .temperature = 1.0,
        .arch = "gpt",
        .rope_theta = 10000.0,
    };
}

/* Parses argv into o. Returns -1 to go on, else the exit status: 0 after
 * --help, EXIT_BAD_INPUT after bad input (its line printed). */
static int parse_options(int argc, char **argv, options_t *o)
{
    int next;
    switch (msr_opts_parse(&opt_set, argc - 1, argv + 1, o, o->seen, &next)) {
    case MSR_OPTS_OK:
        return -1;
    case MSR_OPTS_HELP:
        usage(stdout);
        return 0;
    case MSR_OPTS_VERSION: /* only a command with positional arguments knows --version */
    case MSR_OPTS_BAD:
        break;
    }
    msr_opts_print_error(&opt_set);
    return EXIT_BAD_INPUT;
}

/* The trainer's settings from the options (schedule and recompute parsed),
 * checked against the data. Returns 0, or -1 with the reason printed. */
static int train_config(const options_t *o, const job_t *job, int schedule, int recompute,
                        const msr_dataset_t *data, msr_train_config_t *cfg)
{
    *cfg = (msr_train_config_t){
        .model = {data->vocab, (int)o->seq, (int)o->layers, (int)o->heads, (int)o->channels},
        .micro_batch = (int)o->micro_batch,
        .grad_accum = (int)o->grad_accum,
        .dp = (int)o->dp,
        .dp_rank = job->rank / (int)(o->tp * o->pp * o->cp),
        .tp = (int)o->tp,
        .pp = (int)o->pp,
        .seed = (uint64_t)o->seed,
        .lr = (float)o->lr,
        .warmup = (int)o->warmup,
        .grad_clip = (float)o->grad_clip,
        .adamw = {0.9, 0.95, 1e-8, o->weight_decay},
    };
    msr_train_config_defaults(cfg);
    train_gpt_arch_config(o, &cfg->model);
    if (o->experts > 0)
        cfg->model.moe = (msr_gpt_moe_t){(int)o->experts, (int)o->top_k, (int)o->moe_every,
                                         o->capacity_factor, o->aux_loss};
    cfg->ep = (int)o->ep;
    cfg->par.zero = (int)o->zero;
    cfg->par.bucket_bytes = (size_t)(o->bucket_mb * 1048576.0);
    cfg->par.zero_min_bytes = (size_t)o->zero_min_bytes;
    cfg->par.overlap = (int)o->overlap;
    cfg->par.measure = o->report;
    /* a resume writes the parameters: no random ones first (set after
     * it when there is none, start_from_checkpoint; the CPU trainer's) */
    cfg->par.init_later = o->resume && o->init_from == NULL && strcmp(o->device, "cpu") == 0;
    cfg->tp = (int)o->tp;
    cfg->pp = (int)o->pp;
    cfg->cp = (int)o->cp;
    cfg->mp.sp = o->sp;
    cfg->mp.tp_overlap = o->tp_overlap;
    cfg->mp.head_chunk = (int)o->head_chunk;
    cfg->mp.schedule = (msr_mp_schedule_t)schedule;
    cfg->mp.chunks = (int)o->virtual_stages;
    cfg->mp.recompute = (msr_mp_recompute_t)recompute;
    cfg->mp.stage_layers = o->split_n > 0 ? o->split : NULL;
    cfg->mp_always = o->trace != NULL || o->tp_overlap; /* tp 1: refused there */
    /* checked by precision_check */
    (void)msr_precision_parse(o->precision, &cfg->precision);
    cfg->par.grad_bf16 = strcmp(o->grad_reduce_dtype, "bf16") == 0;
    if (train_gpt_offload_config(o, job->rank, &cfg->par.offload, &cfg->mp.acts,
                                 &cfg->par.params_offload, &cfg->par.grads_offload) != 0)
        return -1;
    if (msr_train_config_check(cfg, data) != MSR_OK) {
        fprintf(stderr, "train_gpt: %s\n", msr_err_msg());
        return -1;
    }
    return 0;
}

/* Rank 0's output files: --trace is written after the last step, so it is
 * tried now; --loss-log is opened for appending into *loss_log_p. Returns
 * 0, or -1 with the reason printed. */
static int open_outputs(const options_t *o, const job_t *job, FILE **loss_log_p)
{
    if (o->trace != NULL && job->rank == 0) {
        FILE *f = fopen(o->trace, "w");
        if (f == NULL) {
            fprintf(stderr, "train_gpt: --trace %s: %s\n", o->trace, strerror(errno));
            return -1;
        }
        fclose(f);
    }
    if (o->loss_log != NULL && job->rank == 0 && (*loss_log_p = fopen(o->loss_log, "a")) == NULL) {
        fprintf(stderr, "train_gpt: --loss-log %s: %s\n", o->loss_log, strerror(errno));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    options_t o = options_defaults();
    unsigned char seen[MSR_ARRAY_SIZE(specs)]; /* as long as the table, whatever it holds */
    o.seen = seen;
    msr_log_init("train_gpt", -1, -1);
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    job_t job;
    if (job_join(&job) != MSR_OK)
        return 1;
    msr_log_init("train_gpt", -1, job.ctx != NULL ? job.rank : -1);
    rc = EXIT_BAD_INPUT;
    msr_dataset_t *data = NULL;
    FILE *loss_log = NULL;
    if ((rc = train_gpt_keep_global_batch(&o, &job)) != 0)
        goto out;
    rc = EXIT_BAD_INPUT;
    if (train_gpt_arch_check(&o) != 0)
        goto out;
    if (o.calibrate != NULL || o.plan || o.plan_all || o.explain > 0 || o.auto_plan ||
        o.cluster != NULL || o.recalibrate) {
        int done = 0;
        if ((rc = train_gpt_plan(&o, &job, &done)) != 0 || done)
            goto out;
        rc = EXIT_BAD_INPUT;
    }
    if (train_gpt_check_combination(&o, job.world, job.ctx != NULL) != 0)
        goto out;
    int schedule = msr_mp_schedule_parse(o.schedule != NULL ? o.schedule : "1f1b");
    int recompute = msr_mp_recompute_parse(o.recompute != NULL ? o.recompute : "none");
    if (schedule < 0 || recompute < 0) {
        fprintf(stderr, "train_gpt: %s '%s' is not one of %s\n",
                schedule < 0 ? "--schedule" : "--recompute",
                schedule < 0 ? o.schedule : o.recompute,
                schedule < 0 ? "gpipe, 1f1b, interleaved" : "none, selective, full");
        goto out;
    }

    if (train_gpt_data_open(&o, &data) != 0)
        goto out;
    msr_train_config_t cfg;
    if (train_config(&o, &job, schedule, recompute, data, &cfg) != 0)
        goto out;
    if (train_gpt_given(&o, "generate")) { /* generation, no training */
        rc = train_gpt_generate(&o, &cfg, data, &job);
        goto out;
    }
    if (open_outputs(&o, &job, &loss_log) != 0)
        goto out;
    if (o.threads > 0)
        openblas_set_num_threads((int)o.threads);
#ifdef MSR_HAVE_CUDA_TRAIN
    if (strcmp(o.device, "cuda") == 0) {
        rc = train_gpt_run_cuda(&o, &cfg, data, &job, loss_log);
        goto out;
    }
#endif

    rc = run_cpu(&o, &cfg, data, &job, loss_log);

out:
    msr_dataset_destroy(data);
    msr_dataset_destroy(o.val_set);
    if (loss_log != NULL)
        fclose(loss_log);
    msr_finalize(job.ctx);
    return rc;
}
