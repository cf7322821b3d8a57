/* The step folders a save leaves behind it: this rank's files of steps
 * older than the kept window (and rank 0's of whole older steps), and the
 * temporary files of a write that was killed. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "msrun/store.h"
#include "rendezvous/checkpoint_impl.h"

/* Removes this rank's files of committed steps older than the keep newest.
 * The window counts this rank's committed steps of this world and the
 * complete steps (a MANIFEST) of other worlds alike: after a restart on
 * another world size, a resume loads the newest of either
 * (msr_ckpt_latest_any), so an older step of this world behind newer ones
 * of another is outside the window, not kept in place of them. */
void msr_ckpt_prune(msr_ctx_t *ctx, const char *dir, int keep)
{
    if (keep <= 0)
        return;
    int64_t *steps;
    size_t n = msr_ckpt_list_steps(dir, &steps);
    /* newest first */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            int64_t t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    int kept = 0;
    int64_t oldest_kept = -1;
    for (size_t i = 0; i < n; i++) {
        int mine = msr_ckpt_have_step(ctx, dir, steps[i]) == 1;
        if (!mine) {
            int w = msr_ckpt_manifest_world(dir, steps[i]);
            if (w <= 0 || w == msr_world_size(ctx))
                continue; /* not complete: not in the window */
        }
        if (kept++ < keep) {
            oldest_kept = steps[i];
            continue;
        }
        if (!mine)
            continue; /* another world's: rank 0 removes it whole below */
        char sd[4096], path[4200];
        step_dir(dir, steps[i], sd, sizeof sd);
        snprintf(path, sizeof path, "%s/rank-%d.commit", sd, msr_rank(ctx));
        unlink(path);
        snprintf(path, sizeof path, "%s/rank-%d.bin", sd, msr_rank(ctx));
        unlink(path);
        if (msr_rank(ctx) == 0) {
            snprintf(path, sizeof path, "%s/MANIFEST", sd);
            unlink(path);
        }
        rmdir(sd); /* the last rank to leave removes it */
    }
    /* Steps older than the kept window that another world wrote (before a
     * restart on another world size), or that a crash left incomplete, have
     * no rank of this world to remove them: rank 0 removes them whole. */
    if (msr_rank(ctx) == 0 && kept >= keep && oldest_kept >= 0) {
        for (size_t i = 0; i < n; i++) {
            if (steps[i] >= oldest_kept)
                continue;
            char sd[4096], path[4400];
            step_dir(dir, steps[i], sd, sizeof sd);
            DIR *d = opendir(sd);
            struct dirent *e;
            while (d && (e = readdir(d)) != NULL) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                    continue;
                snprintf(path, sizeof path, "%s/%s", sd, e->d_name);
                unlink(path);
            }
            if (d)
                closedir(d);
            rmdir(sd);
        }
    }
    free(steps);
}

/* Removes the temporary files this rank's writes left in step folder sd
 * when a process was killed mid-write (rank R: rank-R.bin.tmp.PID and
 * rank-R.commit.tmp.PID; rank 0 also MANIFEST.tmp.PID). Other ranks' files
 * are theirs to remove: they may be writing them now. */
void msr_ckpt_remove_leftovers(msr_ctx_t *ctx, const char *sd)
{
    char mine[2][48];
    snprintf(mine[0], sizeof mine[0], "rank-%d.bin.tmp.", msr_rank(ctx));
    snprintf(mine[1], sizeof mine[1], "rank-%d.commit.tmp.", msr_rank(ctx));
    DIR *d = opendir(sd);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        int ours = strncmp(e->d_name, mine[0], strlen(mine[0])) == 0 ||
                   strncmp(e->d_name, mine[1], strlen(mine[1])) == 0 ||
                   (msr_rank(ctx) == 0 && strncmp(e->d_name, "MANIFEST.tmp.", 13) == 0);
        if (!ours)
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", sd, e->d_name);
        if (unlink(path) == 0)
            MSR_INFO("checkpoint: removed %s, left by a write that did not finish", path);
    }
    if (d)
        closedir(d);
}
