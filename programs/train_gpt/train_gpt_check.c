/* train_gpt's checks of its options (train_gpt.h): the pipeline split,
 * the precisions, and the combinations this build can run. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/status.h"
#include "layout/layout.h"
#include "programs/train_gpt/train_gpt.h"

int train_gpt_split_check(options_t *o)
{
    if (o->pp_layers == NULL && o->split_n == 0)
        return 0;
    char text[8 * MSR_GPT_MAX_STAGES];
    int n = o->split_n, stages = (int)(o->pp * o->virtual_stages);
    msr_status_t st = MSR_OK;
    if (o->pp_layers != NULL) {
        snprintf(text, sizeof text, "%s", o->pp_layers);
        st = msr_layout_split_parse(o->pp_layers, o->split, MSR_GPT_MAX_STAGES, &n);
    } else {
        msr_layout_split_format(o->split, n, text, sizeof text);
    }
    if (o->pp * o->virtual_stages > MSR_GPT_MAX_STAGES) {
        fprintf(stderr,
                "train_gpt: --pp-layers %s: pp %" PRId64 " x %" PRId64
                " virtual stages are more than the %d a split can have\n",
                text, o->pp, o->virtual_stages, MSR_GPT_MAX_STAGES);
        return -1;
    }
    if (st != MSR_OK || msr_layout_split_check((int)o->layers, stages, o->split, n) != MSR_OK) {
        fprintf(stderr,
                "train_gpt: --pp-layers %s (pp %" PRId64 " x %" PRId64 " virtual stages, %" PRId64
                " layers): %s\n",
                text, o->pp, o->virtual_stages, o->layers, msr_err_msg());
        return -1;
    }
    o->split_n = msr_layout_split_is_even((int)o->layers, n, o->split) ? 0 : n;
    return 0;
}

/* --precision and --grad-reduce-dtype: known names, and what the CUDA
 * trainer runs (either precision, gradients summed in fp32). Returns 0,
 * or -1 with the reason printed. */
static int precision_check(const options_t *o)
{
    msr_precision_t p;
    if (msr_precision_parse(o->precision, &p) != MSR_OK) {
        fprintf(stderr, "train_gpt: --precision %s: not fp32 or bf16\n", o->precision);
        return -1;
    }
    if (strcmp(o->grad_reduce_dtype, "fp32") != 0 && strcmp(o->grad_reduce_dtype, "bf16") != 0) {
        fprintf(stderr, "train_gpt: --grad-reduce-dtype %s: not fp32 or bf16\n",
                o->grad_reduce_dtype);
        return -1;
    }
    if (strcmp(o->device, "cuda") == 0 && strcmp(o->grad_reduce_dtype, "fp32") != 0) {
        fprintf(stderr, "train_gpt: --device cuda sums gradients in fp32: --grad-reduce-dtype "
                        "bf16 is for --device cpu only\n");
        return -1;
    }
    return 0;
}

int train_gpt_check_combination(options_t *o, int world, int in_job)
{
    if (train_gpt_split_check(o) != 0)
        return -1;
    int64_t mp = o->tp * o->pp * o->cp; /* the ranks of one model replica */
    if (o->dp == 0) {
        if (world % mp != 0) {
            fprintf(stderr,
                    "train_gpt: the job's %d ranks do not divide into tp %" PRId64 " x pp %" PRId64
                    " x cp %" PRId64 "%s\n",
                    world, o->tp, o->pp, o->cp,
                    in_job && o->resume ? "; an elastic job (msrun --nnodes=MIN:MAX) that "
                                          "re-forms on other ranks needs --auto to re-plan"
                                        : "");
            return -1;
        }
        o->dp = world / mp;
    }
    if (o->dp * mp != world) {
        fprintf(stderr,
                "train_gpt: dp %" PRId64 " x tp %" PRId64 " x pp %" PRId64 " x cp %" PRId64
                " = %" PRId64
                " ranks, but the job has %d (start it with msrun --worker_num=%" PRId64
                " or change the degrees)\n",
                o->dp, o->tp, o->pp, o->cp, o->dp * mp, world, o->dp * mp);
        return -1;
    }
    if (o->cp > 1 && o->seq % (2 * o->cp) != 0) {
        fprintf(stderr,
                "train_gpt: --cp %" PRId64 ": the sequence of %" PRId64
                " does not divide into 2 x cp = %" PRId64 " chunks\n",
                o->cp, o->seq, 2 * o->cp);
        return -1;
    }
    if (o->global_batch > 0) {
        if (o->global_batch % (o->micro_batch * o->dp) != 0 ||
            o->global_batch / (o->micro_batch * o->dp) > 65536) {
            fprintf(stderr,
                    "train_gpt: --global-batch %" PRId64
                    " is not a multiple of micro-batch %" PRId64 " x dp %" PRId64
                    " (with at most 65536 micro-batches per rank)\n",
                    o->global_batch, o->micro_batch, o->dp);
            return -1;
        }
        o->grad_accum = o->global_batch / (o->micro_batch * o->dp);
    }
    if (o->channels % o->heads != 0) {
        fprintf(stderr,
                "train_gpt: --channels %" PRId64 " do not divide into --heads %" PRId64 "\n",
                o->channels, o->heads);
        return -1;
    }
    if ((o->ckpt_every > 0 || o->resume || o->ckpt_keep > 0 || o->ckpt_async) &&
        o->ckpt_dir == NULL) {
        fprintf(
            stderr,
            "train_gpt: --ckpt-every, --ckpt-keep, --ckpt-async and --resume need --ckpt-dir\n");
        return -1;
    }
    if (strcmp(o->device, "cpu") != 0 && strcmp(o->device, "cuda") != 0) {
        fprintf(stderr, "train_gpt: --device %s: not cpu or cuda\n", o->device);
        return -1;
    }
    if (precision_check(o) != 0)
        return -1;
    if (strcmp(o->device, "cuda") == 0 && (o->experts > 0 || o->ep > 1)) {
        fprintf(stderr, "train_gpt: --device cuda has no MoE blocks: --experts and --ep are for "
                        "--device cpu only\n");
        return -1;
    }
    if (strcmp(o->device, "cuda") == 0) {
#ifndef MSR_HAVE_CUDA_TRAIN
        fprintf(stderr, "train_gpt: --device cuda: this build has no CUDA training path "
                        "(configured without CUDA, NCCL or nvcc); use --device cpu\n");
        return -1;
#endif
        if (o->zero != 0 || o->report) {
            fprintf(stderr, "train_gpt: --device cuda runs plain data parallel: --zero and "
                            "--report are for --device cpu only\n");
            return -1;
        }
        if (o->tp > 1 || o->pp > 1 || o->cp > 1 || o->sp || o->tp_overlap || o->trace != NULL ||
            o->virtual_stages > 1 || (o->recompute != NULL && strcmp(o->recompute, "none") != 0) ||
            o->head_chunk > 0) {
            fprintf(stderr,
                    "train_gpt: --device cuda runs plain data parallel: --tp, --pp, --cp, --sp, "
                    "--tp-overlap, --virtual-stages, --recompute, --head-chunk and --trace are for "
                    "--device cpu only\n");
            return -1;
        }
    }
    if (train_gpt_st_check(o) != 0)
        return -1;
    if (o->ckpt_dir != NULL && !in_job) {
        fprintf(stderr, "train_gpt: checkpoints are libmsrun's: run under msrun for --ckpt-dir "
                        "(msrun --worker_num=1 --local_worker_num=1 train_gpt ...)\n");
        return -1;
    }
    return 0;
}
