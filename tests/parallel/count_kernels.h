/* A table of the model's kernels (model/kernels.h) that counts its
 * calls, entry by entry, and runs the CPU's kernels: the same bits as the
 * CPU's table, and a record of which kernels went through the table
 * (tests/parallel/test_kernels.c, mp_worker.c). Not thread-safe: one
 * thread runs a model's passes. */
#ifndef MSRUN_TESTS_PARALLEL_COUNT_KERNELS_H
#define MSRUN_TESTS_PARALLEL_COUNT_KERNELS_H

#include "model/kernels.h"

enum {
    K_LNF,
    K_LNB,
    K_RMSF,
    K_RMSB,
    K_MMF,
    K_MMB,
    K_OPER,
    K_ATTF,
    K_ATTB,
    K_GQAF,
    K_GQAB,
    K_ROPE,
    K_GELUF,
    K_GELUB,
    K_GELUBA,
    K_SWIF,
    K_SWIB,
    K_RES,
    K_BIAS,
    K_COLSUM,
    K_ZERO,
    K_MMBA,
    K_ENCF,
    K_ENCB,
    K_EMBF,
    K_EMBB,
    K_XENTF,
    K_XENTB,
    K_RINGF,
    K_RINGFIN,
    K_RINGD,
    K_RINGB,
    K_RINGFOLD,
    K_ADDROWS,
    K_POSF,
    K_POSB,
    K_EMBBR,
    K_VMAX,
    K_VEXP,
    K_VLOSS,
    K_VFOLD,
    K_VXENTB,
    K_MROUTE,
    K_MPSUM,
    K_MDISP,
    K_MDISPB,
    K_MCOMB,
    K_MCOMBB,
    K_MROUTEB,
    K_N
};

/* the entries' names, as kernels.h's members */
extern const char *const count_kernel_names[K_N];
/* the calls of each entry since the program started or the caller zeroed
 * them */
extern long count_kernel_calls[K_N];

/* The counting table (static: it outlives any model). */
const msr_kernels_t *count_kernels(void);

#endif
