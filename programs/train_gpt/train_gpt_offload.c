/* train_gpt --offload: where AdamW's moments live (docs/model.md
 * "Offload", parallel/offload.h). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "programs/train_gpt/train_gpt.h"

/* The options that only mean something with the disk mode. */
static const char *const disk_only[] = {"offload-chunk", "offload-io", "offload-keep"};

int train_gpt_offload_config(const options_t *o, int rank, msr_offload_config_t *cfg)
{
    *cfg = (msr_offload_config_t){.mode = MSR_OFFLOAD_NONE, .rank = rank};
    const char *t = o->offload;
    if (t != NULL && strcmp(t, "optimizer=host") == 0) {
        cfg->mode = MSR_OFFLOAD_HOST; /* a CPU rank's moments are in host memory already */
    } else if (t != NULL && strncmp(t, "optimizer=disk:", 15) == 0 && t[15] != '\0') {
        cfg->mode = MSR_OFFLOAD_DISK;
        cfg->dir = t + 15;
    } else if (t != NULL) {
        fprintf(stderr, "train_gpt: --offload '%s' is not optimizer=host or optimizer=disk:DIR\n",
                t);
        return -1;
    }
    for (size_t k = 0; k < sizeof disk_only / sizeof disk_only[0]; k++) {
        if (cfg->mode != MSR_OFFLOAD_DISK && train_gpt_given(o, disk_only[k])) {
            fprintf(stderr, "train_gpt: --%s needs --offload optimizer=disk:DIR\n", disk_only[k]);
            return -1;
        }
    }
    if (cfg->mode == MSR_OFFLOAD_HOST && strcmp(o->device, "cpu") != 0) {
        fprintf(stderr, "train_gpt: --offload optimizer=host with --device cuda (the update on "
                        "the host while the GPU computes) is not built yet\n");
        return -1;
    }
    if (cfg->mode != MSR_OFFLOAD_DISK)
        return 0;
    if (o->experts > 0 || strcmp(o->device, "cpu") != 0) {
        fprintf(stderr,
                "train_gpt: --offload optimizer=disk covers the CPU trainer's flat "
                "buffers only: not %s yet\n",
                o->experts > 0 ? "the experts of --experts" : "--device cuda");
        return -1;
    }
    cfg->chunk_bytes = train_gpt_given(o, "offload-chunk") ? (size_t)o->offload_chunk : 0;
    cfg->keep = o->offload_keep;
    if (o->offload_io != NULL) {
        int io = msr_offload_io_parse(o->offload_io);
        if (io < 0) {
            fprintf(stderr, "train_gpt: --offload-io '%s' is not threads or uring\n",
                    o->offload_io);
            return -1;
        }
        cfg->io = (msr_offload_io_t)io;
    }
    if (msr_offload_config_check(cfg) != MSR_OK) {
        fprintf(stderr, "train_gpt: --offload: %s\n", msr_err_msg());
        return -1;
    }
    /* a file size limit reached is then a write failing with EFBIG, which
     * the store reports with its file and chunk, not a signal that kills */
    signal(SIGXFSZ, SIG_IGN);
    return 0;
}
