/* train_gpt --offload: where AdamW's moments and the activations live
 * (docs/model.md "Offload", parallel/offload.h, parallel/offload_acts.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "programs/train_gpt/train_gpt.h"

/* The options that only mean something with a disk mode, and whose. */
static const char *const disk_only[] = {"offload-io", "offload-keep", "offload-chunk"};

/* What --offload names: each at most once, "NAME=host" or "NAME=disk:DIR";
 * an item ends at a comma that starts the next NAME= (a DIR may hold
 * commas). */
static const char *const targets[] = {"optimizer=", "activations=", "params=", "grads="};
enum { T_OPT, T_ACTS, T_PARAMS, T_GRADS, T_COUNT };

static int target_at(const char *p)
{
    for (int k = 0; k < T_COUNT; k++)
        if (strncmp(p, targets[k], strlen(targets[k])) == 0)
            return k;
    return -1;
}

/* The directories given (kept for the run: the configurations borrow them). */
static char *dirs[T_COUNT];

static int bad(const char *t)
{
    fprintf(stderr,
            "train_gpt: --offload '%s' is not a comma-separated list of optimizer=host, "
            "optimizer=disk:DIR, activations=disk:DIR, params=disk:DIR, grads=disk:DIR, each named "
            "once\n",
            t);
    return -1;
}

/* Parses t into cfg[T_OPT], cfg[T_ACTS], cfg[T_PARAMS] and cfg[T_GRADS]'
 * modes and directories. */
static int parse(const char *t, msr_offload_config_t cfg[T_COUNT])
{
    const char *p = t;
    while (*p != '\0') {
        int k = target_at(p);
        if (k < 0 || cfg[k].mode != MSR_OFFLOAD_NONE)
            return bad(t);
        const char *v = p + strlen(targets[k]), *end = v + strlen(v);
        for (const char *q = strchr(v, ','); q != NULL; q = strchr(q + 1, ',')) {
            if (target_at(q + 1) >= 0) {
                end = q;
                break;
            }
        }
        size_t n = (size_t)(end - v);
        if (n == 4 && strncmp(v, "host", 4) == 0) {
            cfg[k].mode = MSR_OFFLOAD_HOST;
        } else if (n > 5 && strncmp(v, "disk:", 5) == 0) {
            cfg[k].mode = MSR_OFFLOAD_DISK;
            free(dirs[k]);
            if ((dirs[k] = strndup(v + 5, n - 5)) == NULL) {
                fprintf(stderr, "train_gpt: --offload: out of memory\n");
                return -1;
            }
            cfg[k].dir = dirs[k];
        } else {
            return bad(t);
        }
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

/* The engine, keep and chunk options into every configuration. */
static int disk_options(const options_t *o, msr_offload_config_t cfg[T_COUNT])
{
    int any = 0;
    for (int k = 0; k < T_COUNT; k++)
        any |= cfg[k].mode == MSR_OFFLOAD_DISK;
    /* a GPU rank's host optimizer moves its gradients in chunks too */
    int chunked = cfg[T_OPT].mode == MSR_OFFLOAD_DISK ||
                  (cfg[T_OPT].mode == MSR_OFFLOAD_HOST && strcmp(o->device, "cuda") == 0);
    for (size_t k = 0; k < sizeof disk_only / sizeof disk_only[0]; k++) {
        int opt_only = strcmp(disk_only[k], "offload-chunk") == 0;
        if (train_gpt_given(o, disk_only[k]) && !(opt_only ? chunked : any)) {
            fprintf(stderr, "train_gpt: --%s needs --offload %s\n", disk_only[k],
                    opt_only ? "optimizer=disk:DIR (or optimizer=host with --device cuda)"
                             : "optimizer=disk:DIR, activations=disk:DIR, params=disk:DIR or "
                               "grads=disk:DIR");
            return -1;
        }
    }
    cfg[T_OPT].chunk_bytes = train_gpt_given(o, "offload-chunk") ? (size_t)o->offload_chunk : 0;
    for (int k = 0; k < T_COUNT; k++) {
        cfg[k].keep = o->offload_keep;
        if (o->offload_io != NULL) {
            int io = msr_offload_io_parse(o->offload_io);
            if (io < 0) {
                fprintf(stderr, "train_gpt: --offload-io '%s' is not threads or uring\n",
                        o->offload_io);
                return -1;
            }
            cfg[k].io = (msr_offload_io_t)io;
        }
        if (msr_offload_config_check(&cfg[k]) != MSR_OK) {
            fprintf(stderr, "train_gpt: --offload: %s\n", msr_err_msg());
            return -1;
        }
    }
    return 0;
}

/* What params=host allows: GPU ranks with the optimizer on the host
 * (train_cuda.h). What params=disk allows: dp (ZeRO 0-3: under ZeRO-3 each rank's shard
 * of the blocks), tp (with or without sp), cp, pp (each stage the blocks
 * of its part) and ep (a MoE model's blocks without their experts, which
 * stay resident) on CPU ranks, each tp rank its own slices, each cp rank
 * its whole blocks, through the hooks the model and the model-parallel
 * runtime call (parallel/dp.h). */
static int params_combination(const options_t *o, const msr_offload_config_t cfg[T_COUNT])
{
    if (cfg[T_PARAMS].mode == MSR_OFFLOAD_HOST) {
        if (strcmp(o->device, "cuda") != 0) {
            fprintf(stderr, "train_gpt: --offload params=host: a CPU rank's parameters are in "
                            "host memory already (use params=disk:DIR)\n");
            return -1;
        }
        if (cfg[T_OPT].mode != MSR_OFFLOAD_HOST) {
            fprintf(stderr, "train_gpt: --offload params=host keeps a GPU rank's blocks where "
                            "AdamW updates them: it needs optimizer=host too\n");
            return -1;
        }
        return 0;
    }
    if (cfg[T_PARAMS].mode != MSR_OFFLOAD_DISK)
        return 0;
    if (strcmp(o->device, "cpu") != 0) {
        fprintf(stderr, "train_gpt: --offload params=disk covers data, tensor, context, pipeline "
                        "and expert parallel on CPU ranks: not --device cuda yet\n");
        return -1;
    }
    return 0;
}

/* What grads=disk allows: the gradient shard of ZeRO 2-3 under data
 * parallel alone on CPU ranks, read back by the moments' chunks. */
static int grads_combination(const options_t *o, const msr_offload_config_t cfg[T_COUNT])
{
    if (cfg[T_GRADS].mode == MSR_OFFLOAD_NONE)
        return 0;
    const char *why = cfg[T_GRADS].mode == MSR_OFFLOAD_HOST ? "grads=host (use grads=disk:DIR)"
                      : cfg[T_OPT].mode != MSR_OFFLOAD_DISK ? "without optimizer=disk:DIR"
                      : o->zero < 2                         ? "below --zero 2 (no gradient shard)"
                      : o->tp > 1 || o->pp > 1 || o->cp > 1 ? "under --tp, --pp or --cp"
                                                            : NULL;
    if (why != NULL) {
        fprintf(stderr,
                "train_gpt: --offload grads=disk puts the gradient shard of --zero 2 or 3 on "
                "disk beside optimizer=disk, under data parallel alone: not %s\n",
                why);
        return -1;
    }
    return 0;
}

/* What the rest of the options allow. */
static int combination(const options_t *o, const msr_offload_config_t cfg[T_COUNT])
{
    if (params_combination(o, cfg) != 0 || grads_combination(o, cfg) != 0)
        return -1;
    int cpu = strcmp(o->device, "cpu") == 0;
    if (cfg[T_OPT].mode == MSR_OFFLOAD_DISK && !cpu) {
        fprintf(stderr, "train_gpt: --offload optimizer=disk covers the CPU trainer's "
                        "buffers only: not --device cuda yet\n");
        return -1;
    }
    if (cfg[T_ACTS].mode == MSR_OFFLOAD_HOST) {
        fprintf(stderr, "train_gpt: --offload activations=host: a CPU rank's activations are in "
                        "host memory already, and --device cuda has no recompute to offload "
                        "from (use activations=disk:DIR)\n");
        return -1;
    }
    const char *rc = o->recompute != NULL ? o->recompute : "none";
    if (cfg[T_ACTS].mode == MSR_OFFLOAD_DISK && strcmp(rc, "full") != 0) {
        fprintf(stderr,
                "train_gpt: --offload activations=disk spills the block inputs that full "
                "recompute keeps: it needs --recompute full, not %s\n",
                rc);
        return -1;
    }
    return 0;
}

int train_gpt_offload_config(const options_t *o, int rank, msr_offload_config_t *opt,
                             msr_offload_config_t *acts, msr_offload_config_t *params,
                             msr_offload_config_t *grads)
{
    msr_offload_config_t cfg[T_COUNT];
    for (int k = 0; k < T_COUNT; k++)
        cfg[k] = (msr_offload_config_t){.mode = MSR_OFFLOAD_NONE, .rank = rank};
    if (o->offload_dir != NULL && !o->auto_plan) {
        fprintf(stderr, "train_gpt: --offload-dir is for --auto (--offload names its own)\n");
        return -1;
    }
    if ((o->offload != NULL && parse(o->offload, cfg) != 0) || disk_options(o, cfg) != 0 ||
        combination(o, cfg) != 0)
        return -1;
    *opt = cfg[T_OPT];
    *acts = cfg[T_ACTS];
    *params = cfg[T_PARAMS];
    *grads = cfg[T_GRADS];
    /* a file size limit reached is then a write failing with EFBIG, which
     * the store reports with its file and chunk, not a signal that kills */
    if (opt->mode == MSR_OFFLOAD_DISK || acts->mode == MSR_OFFLOAD_DISK ||
        params->mode == MSR_OFFLOAD_DISK || grads->mode == MSR_OFFLOAD_DISK)
        signal(SIGXFSZ, SIG_IGN);
    return 0;
}
