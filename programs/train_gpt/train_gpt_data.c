/* train_gpt's data options (train_gpt.h): token files and --vocab,
 * --epochs, and the validation loss of --val-data. */
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "parallel/eval.h"
#include "programs/train_gpt/train_gpt.h"

/* Loads path (what: the message's start) with V applied (0: the
 * file's own). Returns 0, or -1 with the reason printed. */
static int load(const char *what, const char *path, int V, msr_dataset_t **ds_p)
{
    msr_dataset_t *ds = NULL;
    msr_status_t st = msr_dataset_load(path, &ds);
    if (st == MSR_OK && V > 0)
        st = msr_dataset_vocab(ds, V);
    if (st != MSR_OK) {
        fprintf(stderr, "train_gpt: %s: %s\n", what, msr_err_msg_or(st));
        msr_dataset_destroy(ds);
        return -1;
    }
    *ds_p = ds;
    return 0;
}

int train_gpt_data_open(options_t *o, msr_dataset_t **data_p)
{
    int cuda = strcmp(o->device, "cpu") != 0;
    if (cuda && (o->val_data != NULL || o->vocab > 0 || o->epochs)) {
        fprintf(stderr, "train_gpt: --val-data, --vocab and --epochs are for --device cpu only\n");
        return -1;
    }
    msr_dataset_t *data = NULL;
    if (o->data != NULL) {
        if (load("no data", o->data, (int)o->vocab, &data) != 0)
            return -1;
    } else {
        msr_status_t st = msr_dataset_generate((uint64_t)o->seed, (size_t)o->corpus_bytes, &data);
        if (st == MSR_OK && o->vocab > 0)
            st = msr_dataset_vocab(data, (int)o->vocab);
        if (st != MSR_OK) {
            fprintf(stderr, "train_gpt: no data: %s\n", msr_err_msg_or(st));
            msr_dataset_destroy(data);
            return -1;
        }
    }
    if (cuda && data->width != 1) {
        fprintf(stderr, "train_gpt: --data %s: token files are for --device cpu only\n", o->data);
        msr_dataset_destroy(data);
        return -1;
    }
    data->epochs = o->epochs;
    if (o->val_data != NULL) {
        if (load("no validation data", o->val_data, data->vocab, &o->val_set) != 0) {
            msr_dataset_destroy(data);
            return -1;
        }
        if (o->val_set->size <= (size_t)o->seq) {
            fprintf(stderr,
                    "train_gpt: --val-data %s: %zu tokens, not longer than the sequence (%lld)\n",
                    o->val_data, o->val_set->size, (long long)o->seq);
            msr_dataset_destroy(o->val_set);
            o->val_set = NULL;
            msr_dataset_destroy(data);
            return -1;
        }
    }
    *data_p = data;
    return 0;
}

int train_gpt_validate(const trainer_t *t, const job_t *job, const options_t *o, uint64_t step,
                       int last, FILE *loss_log)
{
    if (o->val_set == NULL || t->cpu == NULL)
        return 0;
    if (!last && (o->val_every == 0 || step % (uint64_t)o->val_every != 0))
        return 0;
    double loss = 0.0;
    msr_err_clear();
    msr_status_t st = msr_trainer_eval(t->cpu, o->val_set, (int)o->val_batches, &loss);
    if (st != MSR_OK) {
        fprintf(stderr, "train_gpt: the validation loss after step %llu: %s: %s\n",
                (unsigned long long)step, msr_status_str(st), msr_err_msg_or(st));
        return 1;
    }
    if (job->rank != 0)
        return 0;
    printf("val step %llu loss %.6f\n", (unsigned long long)step, loss);
    fflush(stdout);
    if (loss_log != NULL) {
        fprintf(loss_log, "val step %llu loss %a\n", (unsigned long long)step, loss);
        fflush(loss_log);
    }
    return 0;
}
