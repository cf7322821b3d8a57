/* A snapshot copied by another thread (msr_trainer_snap_take and _copy,
 * train_gpt --ckpt-async): the trainer calls its state_gate before it
 * writes the state, so a copy made only when the gate is reached (the
 * slowest a writer thread can be) is, once sealed, the payload
 * msr_trainer_snapshot gave when the snapshot was taken, bitwise: its
 * header of that step, its parameters and moments before the next step's
 * update (ZeRO 0 and 3, a MoE model's experts). The gate comes once a
 * step; a restore calls it before it writes an element; the snapshot
 * declines (NULL) when the moments or the parameters live in a file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "parallel/ckpt.h"
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

/* Moments or parameters in a file: no snapshot to copy later (the
 * update streams the file), and nothing held. */
static void test_offloaded_declines(void)
{
    msr_test_dir_make("ckpt_snap");
    for (int params = 0; params < 2; params++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/off-%d", msr_test_dir, params);
        MSR_CHECK(mkdir(dir, 0700) == 0);
        msr_offload_config_t disk = {MSR_OFFLOAD_DISK, dir, 0, MSR_OFFLOAD_IO_THREADS, 0, 0};
        msr_train_config_t c = ckpt_test_config(2, 32, 2);
        if (params)
            c.par.params_offload = disk;
        else
            c.par.offload = disk;
        msr_dataset_t *ds;
        msr_trainer_t *tr = ckpt_test_trainer(&c, 1, &ds);
        msr_trainer_snap_t *snap = (msr_trainer_snap_t *)&snap;
        MSR_CHECK_OK(msr_trainer_snap_take(tr, META, &snap));
        MSR_CHECK_MSG(snap == NULL, "a snapshot with the %s in a file",
                      params ? "parameters" : "moments");
        msr_trainer_snap_free(snap);
        msr_trainer_destroy(tr);
        msr_dataset_destroy(ds);
    }
}

static const msr_test_t tests[] = {
    {"copy_at_gate_zero0", test_copy_at_gate_zero0, 30},
    {"copy_at_gate_zero3", test_copy_at_gate_zero3, 30},
    {"copy_at_gate_moe", test_copy_at_gate_moe, 30},
    {"restore_gate", test_restore_gate, 30},
    {"offloaded_declines", test_offloaded_declines, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
