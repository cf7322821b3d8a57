/* A snapshot copied by another thread (msr_trainer_snap_take and _copy,
 * train_gpt --ckpt-async): the trainer calls its state_gate before it
 * writes the state, so a copy made only when the gate is reached (the
 * slowest a writer thread can be) is, once sealed, the payload
 * msr_trainer_snapshot gave when the snapshot was taken, bitwise: its
 * header of that step, its parameters and moments before the next step's
 * update (ZeRO 0 and 3, a MoE model's experts). The gate comes once a
 * step; a restore calls it before it writes an element. With the moments
 * in a file the snapshot is streamed: saved by msr_trainer_snap_save from
 * the trainer and the file, in the gate or by a thread while the next
 * step computes, bitwise msr_trainer_save's, read_done once, also when
 * the save fails; so with the parameters in a file, their blocks read
 * from it while the steps read them through their store. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "msrun/msrun.h"
#include "parallel/ckpt.h"
#include "parallel/offload_params.h"
#include "parallel/train.h"
#include "tests/parallel/ckpt_support.h"
#include "tests/runner.h"
#include "tests/tmp_dir.h"

static const char *const META = "a snapshot copied later";

/* The gate of a writer thread that copies only when the trainer is about
 * to write: snap copied and sealed at the first call; calls counted; the
 * CRC of the parameters as the gate saw them, when asked. */
typedef struct gate {
    msr_trainer_t *tr;
    msr_trainer_snap_t *snap;
    void *buf;
    size_t len;
    int calls;
    int crc; /* take params_crc (the whole parameters held: not ZeRO 3) */
    uint32_t params_crc;
} gate_t;

static uint32_t params_crc(const msr_trainer_t *tr)
{
    return msr_crc32(0, tr->model->params, tr->model->num_params * sizeof(float));
}

static void gate_copy(void *arg)
{
    gate_t *g = arg;
    g->calls++;
    if (g->crc)
        g->params_crc = params_crc(g->tr);
    if (g->snap == NULL)
        return;
    MSR_CHECK_OK(msr_trainer_snap_copy(g->snap, &g->buf, &g->len));
    MSR_CHECK_OK(msr_tckpt_seal(g->buf, g->len));
    msr_trainer_snap_free(g->snap);
    g->snap = NULL;
}

/* msr_trainer_fetch_t over one payload held in memory (arg: its buffer
 * and length), copied out. */
typedef struct held {
    void *buf;
    size_t len;
} held_t;

static msr_status_t fetch(void *arg, int rank, void **buf_p, size_t *len_p)
{
    const held_t *h = arg;
    if (rank != 0)
        return MSR_ERR_NOT_FOUND;
    *buf_p = msr_malloc(h->len);
    MSR_CHECK(*buf_p != NULL);
    memcpy(*buf_p, h->buf, h->len);
    *len_p = h->len;
    return MSR_OK;
}

static void check_same(const void *a, size_t na, const void *b, size_t nb, const char *what)
{
    size_t at = 0;
    const unsigned char *x = a, *y = b;
    while (at < na && at < nb && x[at] == y[at])
        at++;
    MSR_CHECK_MSG(na == nb && at == na, "%s: %zu and %zu bytes, first difference at byte %zu", what,
                  na, nb, at);
}

/* c trained 3 steps; a snapshot taken, copied at the next step's gate,
 * is the payload of step 3; the step after it changed the state (so the
 * copy could not have been made after the update). */
static void copy_at_gate(msr_train_config_t c, const char *what)
{
    msr_dataset_t *ds;
    msr_trainer_t *tr = ckpt_test_trainer(&c, 3, &ds);
    void *ref, *after;
    size_t ref_len, after_len;
    MSR_CHECK_OK(msr_trainer_snapshot(tr, META, &ref, &ref_len));
    gate_t g = {.tr = tr};
    MSR_CHECK_OK(msr_trainer_snap_take(tr, META, &g.snap));
    MSR_CHECK_MSG(g.snap != NULL, "%s: no snapshot taken", what);
    tr->state_gate = gate_copy;
    tr->state_gate_arg = &g;
    double loss;
    MSR_CHECK_OK(msr_trainer_step(tr, &loss));
    MSR_CHECK_MSG(g.calls == 1, "%s: the gate came %d times in a step", what, g.calls);
    MSR_CHECK_MSG(g.buf != NULL, "%s: not copied", what);
    check_same(g.buf, g.len, ref, ref_len, what);
    MSR_CHECK_OK(msr_trainer_snapshot(tr, META, &after, &after_len));
    MSR_CHECK_MSG(after_len != ref_len || memcmp(after, ref, ref_len) != 0,
                  "%s: the step changed nothing", what);
    MSR_CHECK_OK(msr_trainer_step(tr, &loss));
    MSR_CHECK_MSG(g.calls == 2, "%s: the gate came %d times in two steps", what, g.calls);
    msr_free(after);
    msr_free(ref);
    msr_free(g.buf);
    msr_trainer_destroy(tr);
    msr_dataset_destroy(ds);
}

static void test_copy_at_gate_zero0(void)
{
    copy_at_gate(ckpt_test_config(2, 32, 2), "ZeRO 0");
}

static void test_copy_at_gate_zero3(void)
{
    msr_train_config_t c = ckpt_test_config(2, 32, 2);
    c.par.zero = 3;
    copy_at_gate(c, "ZeRO 3");
}

/* The experts' optimizer updates after the dense one: the gate is before
 * both. */
static void test_copy_at_gate_moe(void)
{
    msr_train_config_t c = ckpt_test_config(2, 32, 2);
    c.model.moe = (msr_gpt_moe_t){4, 2, 1, 1.0, 0.01};
    copy_at_gate(c, "MoE");
}

/* A restore passes the gate before it writes: the parameters the gate
 * sees are those before the restore, which then changes them. */
static void test_restore_gate(void)
{
    msr_train_config_t c = ckpt_test_config(2, 32, 2);
    msr_dataset_t *ds;
    msr_trainer_t *tr = ckpt_test_trainer(&c, 2, &ds);
    held_t held;
    MSR_CHECK_OK(msr_trainer_snapshot(tr, META, &held.buf, &held.len));
    double loss;
    MSR_CHECK_OK(msr_trainer_step(tr, &loss));
    uint32_t before = params_crc(tr);
    gate_t g = {.tr = tr, .crc = 1};
    tr->state_gate = gate_copy;
    tr->state_gate_arg = &g;
    MSR_CHECK_OK(msr_trainer_restore(tr, META, 1, fetch, &held));
    MSR_CHECK_MSG(g.calls == 1, "the gate came %d times in a restore", g.calls);
    MSR_CHECK_MSG(g.params_crc == before, "the restore wrote before the gate");
    MSR_CHECK_MSG(params_crc(tr) != before, "the restore changed nothing");
    MSR_CHECK(tr->step == 2);
    msr_free(held.buf);
    msr_trainer_destroy(tr);
    msr_dataset_destroy(ds);
}

/* ---- moments or parameters in a file: the snapshot streamed by
 * msr_trainer_snap_save ---- */

/* A writer of a streamed snapshot: where it saves, the save's outcome and
 * how often read_done came (mu, cv: for a writer thread the gate waits
 * for); run_at_gate: the gate saves (the slowest a writer can be), and
 * read_done scribbles over the trainer's parameters, in memory and in
 * their blocks' file (kept: what they were, put back after the save), as
 * an update let through at once would: a read after read_done puts the
 * scribble in the file. */
typedef struct streamer {
    msr_trainer_snap_t *snap;
    msr_ctx_t *ctx;
    const char *dir;
    msr_status_t st;
    int saved, read_done, gate_calls, run_at_gate;
    msr_trainer_t *tr;
    float *kept, *kept_blocks;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} streamer_t;

/* The offloaded blocks (ZeRO 0-2: whole blocks of pblk_n) kept, and
 * each written over with 1e30 through the store; blocks_restore puts
 * them back. Each is read before it is written: no read ahead in flight
 * is left to hand its old bytes back. */
static void blocks_scribble(streamer_t *w)
{
    msr_dp_t *dp = w->tr->dp;
    if (dp->params_off == NULL)
        return;
    size_t n = dp->pblk_n, nb = (size_t)dp->pnb;
    w->kept_blocks = malloc(nb * n * sizeof(float));
    float *junk = malloc(n * sizeof(float));
    MSR_CHECK(w->kept_blocks != NULL && junk != NULL);
    for (size_t i = 0; i < n; i++)
        junk[i] = 1e30f;
    for (size_t k = 0; k < nb; k++)
        MSR_CHECK_OK(msr_params_get(dp->params_off, k, w->kept_blocks + k * n));
    for (size_t k = 0; k < nb; k++)
        MSR_CHECK_OK(msr_params_put(dp->params_off, k, junk));
    free(junk);
}

static void blocks_restore(streamer_t *w)
{
    msr_dp_t *dp = w->tr->dp;
    if (w->kept_blocks == NULL)
        return;
    for (size_t k = 0; k < (size_t)dp->pnb; k++)
        MSR_CHECK_OK(msr_params_put(dp->params_off, k, w->kept_blocks + k * dp->pblk_n));
    free(w->kept_blocks);
    w->kept_blocks = NULL;
}

static void stream_read_done(void *arg)
{
    streamer_t *w = arg;
    if (w->run_at_gate && w->tr != NULL) {
        size_t n = w->tr->model->num_params;
        w->kept = malloc(n * sizeof(float));
        MSR_CHECK(w->kept != NULL);
        memcpy(w->kept, w->tr->model->params, n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            w->tr->model->params[i] = 1e30f;
        blocks_scribble(w);
    }
    pthread_mutex_lock(&w->mu);
    w->read_done++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void stream_save(streamer_t *w)
{
    w->st = msr_trainer_snap_save(w->snap, w->ctx, w->dir, 3, 0, stream_read_done, w);
    w->saved = 1;
}

static void *stream_thread(void *arg)
{
    stream_save(arg);
    return NULL;
}

/* The trainer's gate: the save run here, or waited for until its last read. */
static void stream_gate(void *arg)
{
    streamer_t *w = arg;
    w->gate_calls++;
    if (w->run_at_gate && !w->saved)
        stream_save(w);
    if (w->kept != NULL) {
        memcpy(w->tr->model->params, w->kept, w->tr->model->num_params * sizeof(float));
        free(w->kept);
        w->kept = NULL;
        blocks_restore(w);
    }
    pthread_mutex_lock(&w->mu);
    while (w->read_done == 0)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

/* w, to save tr's snapshot (taken now) under dir through ctx. */
static void streamer_take(streamer_t *w, msr_ctx_t *ctx, const char *dir, msr_trainer_t *tr)
{
    *w = (streamer_t){.ctx = ctx, .dir = dir};
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    MSR_CHECK_OK(msr_trainer_snap_take(tr, META, &w->snap));
}

/* Trainers a and b of c with their moments or parameters in files (the
 * modes c gives, io their engine), trained 3 steps; a's snapshot of step
 * 3 streamed (in its gate, or by a thread while it trains step 4) is
 * bitwise msr_trainer_save's of b; read_done came once; a's next two
 * steps are b's. */
static void streamed(msr_train_config_t c, msr_offload_io_t io, int threaded, const char *what)
{
    msr_test_dir_make("ckpt_snap");
    char dirs[4][512];
    const char *names[] = {"off-a", "off-b", "whole", "streamed"};
    for (int i = 0; i < 4; i++) {
        snprintf(dirs[i], sizeof dirs[i], "%s/%s", msr_test_dir, names[i]);
        MSR_CHECK(i >= 2 || mkdir(dirs[i], 0700) == 0);
    }
    msr_dataset_t *da, *db;
    msr_offload_config_t *offs[] = {&c.par.offload, &c.par.params_offload};
    for (int i = 0; i < 2; i++)
        if (offs[i]->mode == MSR_OFFLOAD_DISK)
            *offs[i] = (msr_offload_config_t){MSR_OFFLOAD_DISK, dirs[0], 0, io, 0, 0};
    msr_trainer_t *a = ckpt_test_trainer(&c, 3, &da);
    for (int i = 0; i < 2; i++)
        if (offs[i]->mode == MSR_OFFLOAD_DISK)
            offs[i]->dir = dirs[1];
    msr_trainer_t *b = ckpt_test_trainer(&c, 3, &db);
    msr_ctx_t *ctx = NULL;
    MSR_CHECK_OK(msr_init(&ctx));
    MSR_CHECK_OK(msr_trainer_save(b, META, ctx, dirs[2], 3, 0));
    streamer_t w;
    streamer_take(&w, ctx, dirs[3], a);
    w.run_at_gate = !threaded;
    w.tr = a;
    MSR_CHECK_MSG(msr_trainer_snap_streamed(w.snap), "%s: the snapshot is not streamed", what);
    void *buf = NULL;
    size_t len = 0;
    MSR_CHECK_STATUS(msr_trainer_snap_copy(w.snap, &buf, &len), MSR_ERR_INVALID_ARG);
    a->state_gate = stream_gate;
    a->state_gate_arg = &w;
    pthread_t th;
    if (threaded)
        MSR_CHECK(pthread_create(&th, NULL, stream_thread, &w) == 0);
    double la, lb;
    MSR_CHECK_OK(msr_trainer_step(a, &la));
    if (threaded)
        MSR_CHECK(pthread_join(th, NULL) == 0);
    MSR_CHECK_MSG(w.saved && w.read_done == 1 && w.gate_calls == 1,
                  "%s: saved %d, read_done %d times, the gate %d times", what, w.saved, w.read_done,
                  w.gate_calls);
    MSR_CHECK_OK(w.st);
    ckpt_test_same_file(dirs[2], dirs[3], 3, "rank-0.bin");
    ckpt_test_same_file(dirs[2], dirs[3], 3, "MANIFEST");
    MSR_CHECK_OK(msr_trainer_step(b, &lb));
    for (int i = 0; i < 2; i++) {
        MSR_CHECK_MSG(la == lb, "%s: step %d: loss %.9f, never streamed %.9f", what, 4 + i, la, lb);
        MSR_CHECK_OK(msr_trainer_step(a, &la));
        MSR_CHECK_OK(msr_trainer_step(b, &lb));
    }
    msr_trainer_snap_free(w.snap);
    msr_finalize(ctx);
    msr_trainer_destroy(a);
    msr_trainer_destroy(b);
    msr_dataset_destroy(da);
    msr_dataset_destroy(db);
}

static msr_train_config_t offloaded(int moments, int params, int zero)
{
    msr_train_config_t c = ckpt_test_config(2, 32, 2);
    c.par.zero = zero;
    if (moments)
        c.par.offload.mode = MSR_OFFLOAD_DISK;
    if (params)
        c.par.params_offload.mode = MSR_OFFLOAD_DISK;
    return c;
}

static void test_streamed_at_gate(void)
{
    streamed(offloaded(1, 0, 0), MSR_OFFLOAD_IO_THREADS, 0, "moments, ZeRO 0 at the gate");
    streamed(offloaded(0, 1, 0), MSR_OFFLOAD_IO_THREADS, 0, "params, ZeRO 0 at the gate");
    streamed(offloaded(1, 1, 0), MSR_OFFLOAD_IO_DEFAULT, 0,
             "moments and params, ZeRO 0 at the gate, the default engine");
}

static void test_streamed_thread(void)
{
    streamed(offloaded(1, 0, 0), MSR_OFFLOAD_IO_THREADS, 1, "moments, ZeRO 0, a thread, pread");
    streamed(offloaded(1, 0, 1), MSR_OFFLOAD_IO_DEFAULT, 1,
             "moments, ZeRO 1, a thread, the default engine");
}

/* The blocks read from their file by the save's thread while the step's
 * forward and backward read them through their store. */
static void test_params_streamed_thread(void)
{
    streamed(offloaded(0, 1, 0), MSR_OFFLOAD_IO_THREADS, 1, "params, ZeRO 0, a thread, pread");
    streamed(offloaded(0, 1, 3), MSR_OFFLOAD_IO_DEFAULT, 1,
             "params, ZeRO 3, a thread, the default engine");
    streamed(offloaded(1, 1, 1), MSR_OFFLOAD_IO_DEFAULT, 1,
             "moments and params, ZeRO 1, a thread, the default engine");
}

/* A streamed save that fails (its directory lies under a regular file)
 * still calls read_done, once; the trainer's moments are intact (its
 * next step is one never saved); a snapshot held in memory is refused
 * by snap_save, read_done called all the same. */
static void test_streamed_fails(void)
{
    msr_test_dir_make("ckpt_snap");
    char off[512], file[512], bad[600];
    snprintf(off, sizeof off, "%s/off", msr_test_dir);
    snprintf(file, sizeof file, "%s/file", msr_test_dir);
    snprintf(bad, sizeof bad, "%s/under", file);
    MSR_CHECK(mkdir(off, 0700) == 0);
    FILE *f = fopen(file, "w");
    MSR_CHECK(f != NULL && fclose(f) == 0);
    msr_train_config_t c = ckpt_test_config(2, 32, 2);
    msr_dataset_t *dp, *dm;
    msr_trainer_t *plain = ckpt_test_trainer(&c, 2, &dp);
    c.par.offload = (msr_offload_config_t){MSR_OFFLOAD_DISK, off, 0, MSR_OFFLOAD_IO_THREADS, 0, 0};
    msr_trainer_t *tr = ckpt_test_trainer(&c, 2, &dm);
    msr_ctx_t *ctx = NULL;
    MSR_CHECK_OK(msr_init(&ctx));
    streamer_t w;
    streamer_take(&w, ctx, bad, tr);
    stream_save(&w);
    MSR_CHECK_MSG(w.st != MSR_OK && w.read_done == 1, "a save under a file: %s, read_done %d",
                  msr_status_str(w.st), w.read_done);
    msr_trainer_snap_free(w.snap);
    double lo, lp;
    MSR_CHECK_OK(msr_trainer_step(tr, &lo));
    MSR_CHECK_OK(msr_trainer_step(plain, &lp));
    MSR_CHECK_MSG(lo == lp, "after a failed save: loss %.9f, without offload %.9f", lo, lp);
    streamer_take(&w, ctx, off, plain);
    MSR_CHECK(w.snap != NULL && !msr_trainer_snap_streamed(w.snap));
    stream_save(&w);
    MSR_CHECK_STATUS(w.st, MSR_ERR_INVALID_ARG);
    MSR_CHECK_EQ(w.read_done, 1);
    msr_trainer_snap_free(w.snap);
    msr_finalize(ctx);
    msr_trainer_destroy(tr);
    msr_trainer_destroy(plain);
    msr_dataset_destroy(dm);
    msr_dataset_destroy(dp);
}

/* Flips the byte at offset `at` of path (a second flip puts it back). */
static void flip_byte(const char *path, long at)
{
    FILE *f = fopen(path, "r+b");
    MSR_CHECK(f != NULL);
    MSR_CHECK(fseek(f, at, SEEK_SET) == 0);
    int c = fgetc(f);
    MSR_CHECK(c != EOF);
    MSR_CHECK(fseek(f, at, SEEK_SET) == 0);
    MSR_CHECK(fputc(c ^ 0x40, f) != EOF);
    MSR_CHECK(fclose(f) == 0);
}

/* A parameters' block changed underneath in its file while a streamed
 * save reads it: the save fails naming the file and the block, read_done
 * once; the failure is the save's alone: with the byte put back, the
 * trainer's next steps are those of one never saved. */
static void test_params_streamed_corrupt(void)
{
    msr_test_dir_make("ckpt_snap");
    char off[512], ck[512];
    snprintf(off, sizeof off, "%s/off", msr_test_dir);
    snprintf(ck, sizeof ck, "%s/ck", msr_test_dir);
    MSR_CHECK(mkdir(off, 0700) == 0);
    msr_train_config_t c = ckpt_test_config(2, 32, 2);
    msr_dataset_t *dp, *dm;
    msr_trainer_t *plain = ckpt_test_trainer(&c, 2, &dp);
    c.par.params_offload =
        (msr_offload_config_t){MSR_OFFLOAD_DISK, off, 0, MSR_OFFLOAD_IO_THREADS, 0, 0};
    msr_trainer_t *tr = ckpt_test_trainer(&c, 2, &dm);
    msr_ctx_t *ctx = NULL;
    MSR_CHECK_OK(msr_init(&ctx));
    streamer_t w;
    streamer_take(&w, ctx, ck, tr);
    MSR_CHECK(msr_trainer_snap_streamed(w.snap));
    const char *path = msr_params_path(tr->dp->params_off);
    long at = (long)msr_params_slot_bytes(tr->dp->params_off) + 8; /* in block 1 */
    flip_byte(path, at);
    stream_save(&w);
    MSR_CHECK_STATUS(w.st, MSR_ERR_CORRUPT);
    MSR_CHECK_EQ(w.read_done, 1);
    MSR_CHECK_MSG(strstr(msr_last_error(), "block 1 of") != NULL &&
                      strstr(msr_last_error(), path) != NULL,
                  "the error does not name the block and the file: %s", msr_last_error());
    msr_trainer_snap_free(w.snap);
    flip_byte(path, at);
    double lo, lp;
    for (int i = 0; i < 2; i++) {
        MSR_CHECK_OK(msr_trainer_step(tr, &lo));
        MSR_CHECK_OK(msr_trainer_step(plain, &lp));
        MSR_CHECK_MSG(lo == lp, "after a failed save: loss %.9f, without offload %.9f", lo, lp);
    }
    msr_finalize(ctx);
    msr_trainer_destroy(tr);
    msr_trainer_destroy(plain);
    msr_dataset_destroy(dm);
    msr_dataset_destroy(dp);
}

static const msr_test_t tests[] = {
    {"copy_at_gate_zero0", test_copy_at_gate_zero0, 30},
    {"copy_at_gate_zero3", test_copy_at_gate_zero3, 30},
    {"copy_at_gate_moe", test_copy_at_gate_moe, 30},
    {"restore_gate", test_restore_gate, 30},
    {"streamed_at_gate", test_streamed_at_gate, 60},
    {"streamed_thread", test_streamed_thread, 60},
    {"params_streamed_thread", test_params_streamed_thread, 60},
    {"streamed_fails", test_streamed_fails, 60},
    {"params_streamed_corrupt", test_params_streamed_corrupt, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
