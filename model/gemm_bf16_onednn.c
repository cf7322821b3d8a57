/* The bf16 products on oneDNN's matmul primitive, with a small cache of
 * primitives keyed by shape (creating one costs far more than a small
 * product). oneDNN is loaded with dlopen when the path is first asked
 * for, not linked: a 40 MB C++ library (with the OpenCL loader and
 * libgomp behind it) that every process linking the model mapped and
 * relocated at start, about 7 ms a process, though only a bf16 run on the
 * onednn path calls it. */
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "base/log.h"
#include "model/gemm_bf16_impl.h"

/* ---- oneDNN, loaded on first use ---- */

/* The calls this file makes, each through the table dn (dn.dnnl_...). */
#define ONEDNN_FUNCS(X)                      \
    X(dnnl_engine_create)                    \
    X(dnnl_engine_destroy)                   \
    X(dnnl_matmul_desc_init)                 \
    X(dnnl_memory_create)                    \
    X(dnnl_memory_desc_init_by_strides)      \
    X(dnnl_memory_destroy)                   \
    X(dnnl_memory_set_data_handle)           \
    X(dnnl_post_ops_append_sum)              \
    X(dnnl_post_ops_create)                  \
    X(dnnl_post_ops_destroy)                 \
    X(dnnl_primitive_attr_create)            \
    X(dnnl_primitive_attr_destroy)           \
    X(dnnl_primitive_attr_set_output_scales) \
    X(dnnl_primitive_attr_set_post_ops)      \
    X(dnnl_primitive_create)                 \
    X(dnnl_primitive_desc_create)            \
    X(dnnl_primitive_desc_destroy)           \
    X(dnnl_primitive_desc_query)             \
    X(dnnl_primitive_destroy)                \
    X(dnnl_primitive_execute)                \
    X(dnnl_set_max_cpu_isa)                  \
    X(dnnl_stream_create)                    \
    X(dnnl_stream_destroy)                   \
    X(dnnl_stream_wait)

#define ONEDNN_FIELD(name) __typeof__(name) *name;
static struct {
    ONEDNN_FUNCS(ONEDNN_FIELD)
} dn;
#define ONEDNN_SYM(name) {#name, offsetof(__typeof__(dn), name)},
static const struct {
    const char *name;
    size_t offset; /* of the pointer in dn */
} onednn_syms[] = {ONEDNN_FUNCS(ONEDNN_SYM)};

/* the library the headers are of: its major version is its soname's */
#define ONEDNN_SONAME_(v) "libdnnl.so." #v
#define ONEDNN_SONAME(v)  ONEDNN_SONAME_(v)
#ifndef MSR_ONEDNN_DIR
#define MSR_ONEDNN_DIR "" /* where CMake found it, for a library off the loader's path */
#endif

static pthread_once_t onednn_once = PTHREAD_ONCE_INIT;
static char onednn_why[512]; /* why it is not loaded; "" once it is */

/* MSR_ONEDNN_LIBRARY when set (a name or a path), else the soname from the
 * loader's path, else from the directory CMake found it in; every call of
 * the table resolved, or the library closed again and the reason kept. */
static void onednn_load(void)
{
    const char *want = getenv("MSR_ONEDNN_LIBRARY");
    const char *soname = ONEDNN_SONAME(DNNL_VERSION_MAJOR);
    void *h = NULL;
    if (want != NULL && want[0] != '\0') {
        if ((h = dlopen(want, RTLD_NOW | RTLD_LOCAL)) == NULL) {
            snprintf(onednn_why, sizeof onednn_why, "%s (from MSR_ONEDNN_LIBRARY)", dlerror());
            return;
        }
    } else if ((h = dlopen(soname, RTLD_NOW | RTLD_LOCAL)) == NULL) {
        snprintf(onednn_why, sizeof onednn_why, "%s", dlerror());
        if (MSR_ONEDNN_DIR[0] != '\0') {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", MSR_ONEDNN_DIR, soname);
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        }
        if (h == NULL)
            return;
    }
    for (size_t i = 0; i < sizeof onednn_syms / sizeof onednn_syms[0]; i++) {
        dlerror();
        void *fn = dlsym(h, onednn_syms[i].name);
        if (fn == NULL) {
            const char *e = dlerror();
            if (e != NULL)
                snprintf(onednn_why, sizeof onednn_why, "%s", e);
            else /* (the symbol is there, and NULL) */
                snprintf(onednn_why, sizeof onednn_why, "%s: %s is NULL", soname,
                         onednn_syms[i].name);
            memset(&dn, 0, sizeof dn);
            dlclose(h);
            return;
        }
        /* POSIX lets dlsym's void * become a function pointer */
        memcpy((char *)&dn + onednn_syms[i].offset, &fn, sizeof fn);
    }
    onednn_why[0] = '\0'; /* h stays open for the life of the process */
}

/* NULL once oneDNN is loaded (loading it on the first call), else why not */
static const char *onednn_missing(void)
{
    pthread_once(&onednn_once, onednn_load);
    return onednn_why[0] != '\0' ? onednn_why : NULL;
}

/* The model's products take 22 shapes a step (the default GPT: five
 * linear layers' forward and two backward products each, attention's six),
 * more under tp, cp or with experts; with fewer slots than shapes the
 * round robin evicts every primitive before its next use and each product
 * builds its primitive again. A lookup is a linear scan of the keys, far
 * cheaper than the smallest product. */
#define CACHE_SLOTS 64

typedef struct prim_key {
    int trans_a, trans_b, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    int bias; /* a bias (N) added to every row */
} prim_key_t;

typedef struct prim_slot {
    prim_key_t key;
    dnnl_primitive_t prim;       /* NULL: empty */
    dnnl_memory_t a, b, c, bias; /* handles set per call; bias NULL without */
    char impl[64];
} prim_slot_t;

typedef struct onednn_state {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    prim_slot_t slots[CACHE_SLOTS];
    unsigned next; /* the slot replaced next (round robin) */
    const char *last_impl;
} onednn_state_t;

/* The highest ISA oneDNN may use under the features left after
 * MSRUN_CPU_DISABLE. oneDNN takes it once per process, before its first
 * primitive; a later, different cap is refused and only logged. */
static void cap_isa(unsigned f)
{
    dnnl_cpu_isa_t isa = dnnl_cpu_isa_all;
    if (!(f & MSR_CPU_AVX2) || !(f & MSR_CPU_FMA))
        isa = dnnl_cpu_isa_avx;
    else if (!(f & MSR_CPU_AVX512F))
        isa = dnnl_cpu_isa_avx2;
    else if (!(f & MSR_CPU_AVX512_BF16))
        isa = dnnl_cpu_isa_avx512_core;
    else if (!(f & MSR_CPU_AMX_BF16))
        isa = dnnl_cpu_isa_avx512_core_bf16;
    if (isa != dnnl_cpu_isa_all && dn.dnnl_set_max_cpu_isa(isa) != dnnl_success)
        MSR_DEBUG("bf16 gemm: oneDNN's instruction set was already fixed");
}

static void slot_clear(prim_slot_t *s)
{
    if (s->prim != NULL)
        dn.dnnl_primitive_destroy(s->prim);
    dn.dnnl_memory_destroy(s->a);
    dn.dnnl_memory_destroy(s->b);
    dn.dnnl_memory_destroy(s->c);
    dn.dnnl_memory_destroy(s->bias);
    memset(s, 0, sizeof *s);
}

static void onednn_destroy(void *state)
{
    onednn_state_t *s = state;
    if (s == NULL)
        return;
    for (int i = 0; i < CACHE_SLOTS; i++)
        slot_clear(&s->slots[i]);
    if (s->stream != NULL)
        dn.dnnl_stream_destroy(s->stream);
    if (s->engine != NULL)
        dn.dnnl_engine_destroy(s->engine);
    free(s);
}

/* The descriptors of op(A) (M, K), op(B) (K, N) in bf16, C (M, N) and the
 * bias (1, N) in fp32, a transposed operand as strides over its storage. */
static void make_descs(const prim_key_t *k, dnnl_memory_desc_t *a, dnnl_memory_desc_t *b,
                       dnnl_memory_desc_t *c, dnnl_memory_desc_t *bias)
{
    dnnl_dims_t da = {k->M, k->K}, db = {k->K, k->N}, dc = {k->M, k->N};
    dnnl_dims_t sa = {k->lda, 1}, sb = {k->ldb, 1}, sc = {k->ldc, 1};
    dnnl_dims_t dbias = {1, k->N}, sbias = {k->N, 1};
    if (k->trans_a) {
        sa[0] = 1;
        sa[1] = k->lda;
    }
    if (k->trans_b) {
        sb[0] = 1;
        sb[1] = k->ldb;
    }
    dn.dnnl_memory_desc_init_by_strides(a, 2, da, dnnl_bf16, sa);
    dn.dnnl_memory_desc_init_by_strides(b, 2, db, dnnl_bf16, sb);
    dn.dnnl_memory_desc_init_by_strides(c, 2, dc, dnnl_f32, sc);
    dn.dnnl_memory_desc_init_by_strides(bias, 2, dbias, dnnl_f32, sbias);
}

/* Builds the slot's primitive: alpha as the output scale, beta as a sum
 * post-op (none when 0, so C's old contents are never read), the bias as
 * the matmul's own (added as the sums are stored). */
static dnnl_status_t slot_build(onednn_state_t *s, prim_slot_t *slot, const prim_key_t *k)
{
    dnnl_memory_desc_t a, b, c, bias;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    make_descs(k, &a, &b, &c, &bias);
    dnnl_status_t ds = dn.dnnl_matmul_desc_init(&desc, &a, &b, k->bias ? &bias : NULL, &c);
    if (ds == dnnl_success)
        ds = dn.dnnl_primitive_attr_create(&attr);
    if (ds == dnnl_success && k->alpha != 1.0f)
        ds = dn.dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha);
    if (ds == dnnl_success && k->beta != 0.0f) {
        ds = dn.dnnl_post_ops_create(&po);
        if (ds == dnnl_success)
            ds = dn.dnnl_post_ops_append_sum(po, k->beta);
        if (ds == dnnl_success)
            ds = dn.dnnl_primitive_attr_set_post_ops(attr, po);
    }
    if (ds == dnnl_success)
        ds = dn.dnnl_primitive_desc_create(&pd, &desc, attr, s->engine, NULL);
    if (ds == dnnl_success)
        ds = dn.dnnl_primitive_create(&slot->prim, pd);
    if (ds == dnnl_success) {
        const char *impl = NULL;
        dn.dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        snprintf(slot->impl, sizeof slot->impl, "%s", impl != NULL ? impl : "?");
    }
    if (ds == dnnl_success)
        ds = dn.dnnl_memory_create(&slot->a, &a, s->engine, DNNL_MEMORY_NONE);
    if (ds == dnnl_success)
        ds = dn.dnnl_memory_create(&slot->b, &b, s->engine, DNNL_MEMORY_NONE);
    if (ds == dnnl_success)
        ds = dn.dnnl_memory_create(&slot->c, &c, s->engine, DNNL_MEMORY_NONE);
    if (ds == dnnl_success && k->bias)
        ds = dn.dnnl_memory_create(&slot->bias, &bias, s->engine, DNNL_MEMORY_NONE);
    if (pd != NULL)
        dn.dnnl_primitive_desc_destroy(pd);
    if (po != NULL)
        dn.dnnl_post_ops_destroy(po);
    if (attr != NULL)
        dn.dnnl_primitive_attr_destroy(attr);
    if (ds == dnnl_success)
        slot->key = *k;
    else
        slot_clear(slot);
    return ds;
}

/* The cached primitive for k, built into the next slot on a miss. */
static prim_slot_t *slot_get(onednn_state_t *s, const prim_key_t *k, dnnl_status_t *ds_p)
{
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (s->slots[i].prim != NULL && memcmp(&s->slots[i].key, k, sizeof *k) == 0)
            return &s->slots[i];
    prim_slot_t *slot = &s->slots[s->next];
    s->next = (s->next + 1) % CACHE_SLOTS;
    slot_clear(slot);
    *ds_p = slot_build(s, slot, k);
    return *ds_p == dnnl_success ? slot : NULL;
}

static msr_status_t onednn_create(unsigned cpu_features, void **state_p)
{
    const char *why = onednn_missing();
    if (why != NULL) {
        MSR_ERROR("bf16 gemm: oneDNN cannot be loaded: %s: use the blas path", why);
        return MSR_ERR_UNSUPPORTED;
    }
    cap_isa(cpu_features);
    onednn_state_t *s = calloc(1, sizeof *s);
    if (s == NULL) {
        MSR_ERROR("bf16 gemm: out of memory for oneDNN's state");
        return MSR_ERR_NO_MEMORY;
    }
    s->last_impl = "";
    dnnl_status_t ds = dn.dnnl_engine_create(&s->engine, dnnl_cpu, 0);
    if (ds == dnnl_success)
        ds = dn.dnnl_stream_create(&s->stream, s->engine, dnnl_stream_default_flags);
    if (ds != dnnl_success) {
        MSR_ERROR("bf16 gemm: oneDNN's CPU engine did not start (dnnl status %d)", (int)ds);
        onednn_destroy(s);
        return MSR_ERR_BACKEND;
    }
    /* oneDNN 2.x has bf16 matmuls only for CPUs with avx512_core (or
     * bf16 units): a refusal now, not at the first product */
    dnnl_status_t probe = dnnl_success;
    prim_key_t k = {0, 0, 16, 16, 16, 16, 16, 16, 1.0f, 0.0f, 0};
    if (slot_get(s, &k, &probe) == NULL) {
        MSR_ERROR("bf16 gemm: oneDNN has no bf16 matmul for this CPU or instruction-set cap "
                  "(dnnl status %d; oneDNN 2.x needs avx512_core): use the blas path",
                  (int)probe);
        onednn_destroy(s);
        return probe == dnnl_unimplemented ? MSR_ERR_UNSUPPORTED : MSR_ERR_BACKEND;
    }
    *state_p = s;
    return MSR_OK;
}

static msr_status_t onednn_run(void *state, bool trans_a, bool trans_b, int M, int N, int K,
                               float alpha, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                               float beta, const float *bias, float *C, int ldc)
{
    onednn_state_t *s = state;
    /* (no padding: the key is compared with memcmp) */
    prim_key_t k = {trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta, bias != NULL};
    dnnl_status_t ds = dnnl_success;
    prim_slot_t *slot = slot_get(s, &k, &ds);
    if (slot != NULL) {
        dn.dnnl_memory_set_data_handle(slot->a, (void *)A);
        dn.dnnl_memory_set_data_handle(slot->b, (void *)B);
        dn.dnnl_memory_set_data_handle(slot->c, C);
        dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, slot->a},
                                  {DNNL_ARG_WEIGHTS, slot->b},
                                  {DNNL_ARG_DST, slot->c},
                                  {DNNL_ARG_BIAS, slot->bias}};
        if (bias != NULL)
            dn.dnnl_memory_set_data_handle(slot->bias, (void *)bias);
        ds = dn.dnnl_primitive_execute(slot->prim, s->stream, bias != NULL ? 4 : 3, args);
        if (ds == dnnl_success)
            ds = dn.dnnl_stream_wait(s->stream);
        s->last_impl = slot->impl;
    }
    if (ds != dnnl_success) {
        MSR_ERROR("bf16 gemm: oneDNN matmul M %d N %d K %d (trans %d %d) failed: dnnl status %d", M,
                  N, K, trans_a, trans_b, (int)ds);
        return MSR_ERR_BACKEND;
    }
    return MSR_OK;
}

static const char *onednn_impl(const void *state)
{
    return ((const onednn_state_t *)state)->last_impl;
}

static const msr_gemm_bf16_ops_t onednn_ops = {onednn_create, onednn_destroy, onednn_run,
                                               onednn_impl, onednn_missing};
const msr_gemm_bf16_ops_t *const msr_gemm_bf16_onednn_ops = &onednn_ops;
