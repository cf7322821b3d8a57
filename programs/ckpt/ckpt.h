/* msrun-ckpt's parts: inspect (msrun_ckpt.c) and export (ckpt_export.c). */
#ifndef MSRUN_PROGRAMS_CKPT_H
#define MSRUN_PROGRAMS_CKPT_H

#include <stddef.h>

/* The newest step-N folder of dir with a MANIFEST (a complete save); -1
 * when none. */
long long ckpt_newest_step(const char *dir);

/* inspect's checks of step (-1: the newest) of dir without its report:
 * 0 when whole and intact, else 2 (bad input) or 1 (the machine failed:
 * msr_tckpt_exit_status) with the file (and tensor) on stderr. */
int ckpt_check(const char *dir, long long step);

/* The settings text (train_gpt's) of step of dir, from rank 0's shard: 0,
 * or 2 or 1 as ckpt_check with the file named on stderr. */
int ckpt_settings(const char *dir, long long step, char *meta, size_t len);

/* `msrun ckpt export DIR [--step N] --safetensors FILE`: 0, or 2 (bad
 * input) or 1 (the machine failed) with a message naming the file. */
int ckpt_export(const char *dir, long long step, const char *file);

#endif
