/* The gRPC glue shared by the server (rpc_server.c) and the client
 * (rpc_client.c): the methods and their messages, the library's
 * initialisation, deadlines, byte buffers, the completion-queue loop and the
 * TLS files. */
#include "rendezvous/rpc.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "rendezvous/rpc_internal.h"

/* ---- library init ---- */

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static int lib_refs;

/* gRPC's own messages are mostly about peers that went away, which msrun
 * reports itself in its own words: keep them at debug level. */
static void grpc_log_to_msr(gpr_log_func_args *args)
{
    MSR_DEBUG("grpc: %s (%s:%d)", args->message, args->file, args->line);
}

/* Debian's abseil (under gRPC) is built with absl::Mutex deadlock detection
 * on: every lock records edges in one global graph, so gRPC's cost grows
 * with the number of mutexes alive -- about one set per connection. With
 * 1024 connections that made connecting 2.5x slower. The switch is a C++
 * function (absl::SetMutexDeadlockDetectionMode(kIgnore = 0)); call it when
 * the library exports it (the msrun executable, which links abseil's
 * static archive, exports it on purpose: cmake/MsrunHelpers.cmake keeps
 * the same candidate names). */
static void absl_deadlock_detection_off(void)
{
    static const char *const names[] = {
        "_ZN4absl7debian329SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
        "_ZN4absl7debian229SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
        "_ZN4absl7debian429SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
        "_ZN4absl29SetMutexDeadlockDetectionModeENS_15OnDeadlockCycleE",
    };
    for (size_t i = 0; i < MSR_ARRAY_SIZE(names); i++) {
        void *sym = dlsym(RTLD_DEFAULT, names[i]);
        if (sym) {
            void (*set_mode)(int);
            memcpy(&set_mode, &sym, sizeof set_mode);
            set_mode(0);
            return;
        }
    }
}

static void *absl_frequency_probe(void *arg)
{
    void (*probe)(void);
    memcpy(&probe, &arg, sizeof probe);
    probe();
    return NULL;
}

/* abseil measures the CPU's frequency the first time one of its mutexes
 * blocks (absl::base_internal::NominalCPUFrequency(), once per process):
 * by sleeping 1 ms, 2 ms, ... until two measurements agree. That first
 * time is gRPC's shutdown, the end of every process (a worker's finalize,
 * msrun's leave, the coordinator's exit), each 3 ms or more longer. Made
 * here, once, in a thread of its own, the measurement overlaps the
 * process's work; the later call finds it done. Nothing when the library
 * does not export it or no thread can be made. */
static void absl_frequency_early(void)
{
    static const char *const names[] = {
        "_ZN4absl7debian313base_internal19NominalCPUFrequencyEv",
        "_ZN4absl7debian213base_internal19NominalCPUFrequencyEv",
        "_ZN4absl7debian413base_internal19NominalCPUFrequencyEv",
        "_ZN4absl13base_internal19NominalCPUFrequencyEv",
    };
    static int done;
    if (done++)
        return;
    for (size_t i = 0; i < MSR_ARRAY_SIZE(names); i++) {
        void *sym = dlsym(RTLD_DEFAULT, names[i]);
        if (sym == NULL)
            continue;
        pthread_attr_t attr;
        pthread_t t;
        if (pthread_attr_init(&attr) != 0)
            return;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        if (pthread_create(&t, &attr, absl_frequency_probe, sym) == 0)
            pthread_setname_np(t, MSR_RPC_FREQ_THREAD); /* gone once done */
        pthread_attr_destroy(&attr);
        return;
    }
}

void msr_rpc_library_ref(void)
{
    pthread_mutex_lock(&lib_lock);
    if (lib_refs++ == 0) {
        absl_frequency_early();
        absl_deadlock_detection_off();
        gpr_set_log_function(grpc_log_to_msr);
        grpc_init();
    }
    pthread_mutex_unlock(&lib_lock);
}

void msr_rpc_library_unref(void)
{
    pthread_mutex_lock(&lib_lock);
    if (--lib_refs == 0)
        grpc_shutdown();
    pthread_mutex_unlock(&lib_lock);
}

/* ---- time ---- */

gpr_timespec msr_rpc_to_gpr_deadline(uint64_t deadline)
{
    if (deadline == MSR_DEADLINE_NEVER)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    if (deadline == 0) /* do not wait (gRPC rounds "now" up to a 1 ms wait) */
        return gpr_inf_past(GPR_CLOCK_MONOTONIC);
    uint64_t now = msr_now_ns();
    int64_t left = deadline > now ? (int64_t)(deadline - now) : 0;
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_nanos(left, GPR_TIMESPAN));
}

uint64_t msr_rpc_from_gpr_deadline(gpr_timespec ts)
{
    if (gpr_time_cmp(ts, gpr_inf_future(ts.clock_type)) == 0)
        return MSR_DEADLINE_NEVER;
    gpr_timespec mono = gpr_convert_clock_type(ts, GPR_CLOCK_MONOTONIC);
    gpr_timespec left = gpr_time_sub(mono, gpr_now(GPR_CLOCK_MONOTONIC));
    int64_t ns = (int64_t)left.tv_sec * 1000000000ll + left.tv_nsec;
    uint64_t now = msr_now_ns();
    return ns <= 0 ? now : now + (uint64_t)ns;
}

/* ---- byte buffers ---- */

grpc_byte_buffer *msr_rpc_pack_message(const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    grpc_slice slice;
    if (len == 0) {
        slice = grpc_empty_slice();
    } else {
        uint8_t *data = malloc(len);
        if (data == NULL)
            return NULL;
        protobuf_c_message_pack(msg, data);
        slice = grpc_slice_new(data, len, free);
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

/* A varint at p[*i] (len bytes in all) into *v; 0 when cut short or too long. */
ProtobufCMessage *msr_rpc_unpack_checked(grpc_byte_buffer *bb,
                                         const ProtobufCMessageDescriptor *desc,
                                         const char **nul_field_p)
{
    if (bb == NULL)
        return NULL;
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return NULL;
    grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    const uint8_t *p = GRPC_SLICE_START_PTR(all);
    size_t len = GRPC_SLICE_LENGTH(all);
    ProtobufCMessage *msg = NULL;
    const char *nul = nul_field_p != NULL ? msr_rpc_pb_nul_field(desc, p, len, 16) : NULL;
    if (nul != NULL)
        *nul_field_p = nul;
    else
        msg = protobuf_c_message_unpack(desc, &msr_rpc_pb_allocator, len, p);
    grpc_slice_unref(all);
    return msg;
}

/* Unpacks a received buffer as desc; NULL when malformed (or bb is NULL). */
ProtobufCMessage *msr_rpc_unpack_buffer(grpc_byte_buffer *bb,
                                        const ProtobufCMessageDescriptor *desc)
{
    return msr_rpc_unpack_checked(bb, desc, NULL);
}

void msr_rpc_slice_to_cstr(grpc_slice s, char *out, size_t outlen)
{
    if (out == NULL || outlen == 0)
        return;
    size_t n = GRPC_SLICE_LENGTH(s);
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, GRPC_SLICE_START_PTR(s), n);
    out[n] = '\0';
}

/* ---- loop ---- */

msr_status_t msr_rpc_loop_create(msr_rpc_loop_t **loop_p)
{
    msr_rpc_loop_t *loop = msr_calloc(1, sizeof *loop);
    if (loop == NULL)
        return MSR_ERR_NO_MEMORY;
    msr_rpc_library_ref();
    loop->cq = grpc_completion_queue_create_for_next(NULL);
    if (loop->cq == NULL) {
        msr_rpc_library_unref();
        msr_free(loop);
        return MSR_ERR_INTERNAL;
    }
    *loop_p = loop;
    return MSR_OK;
}

int msr_rpc_loop_poll(msr_rpc_loop_t *loop, uint64_t deadline)
{
    if (loop->shut)
        return -1;
    grpc_event ev = grpc_completion_queue_next(loop->cq, msr_rpc_to_gpr_deadline(deadline), NULL);
    switch (ev.type) {
    case GRPC_OP_COMPLETE: {
        msr_rpc_op_t *op = ev.tag;
        op->done(op, ev.success);
        return 1;
    }
    case GRPC_QUEUE_SHUTDOWN:
        loop->shut = 1;
        return -1;
    default:
        return 0;
    }
}

void msr_rpc_loop_shutdown(msr_rpc_loop_t *loop)
{
    if (!atomic_exchange(&loop->shutdown_called, 1))
        grpc_completion_queue_shutdown(loop->cq);
}

void msr_rpc_loop_destroy(msr_rpc_loop_t *loop)
{
    if (loop == NULL)
        return;
    msr_rpc_loop_shutdown(loop);
    while (!loop->shut)
        msr_rpc_loop_poll(loop, MSR_DEADLINE_NEVER);
    grpc_completion_queue_destroy(loop->cq);
    msr_rpc_library_unref();
    msr_free(loop);
}

/* ---- TLS ---- */

int msr_rpc_tls_enabled(const msr_rpc_tls_t *tls)
{
    return tls && ((tls->cert && *tls->cert) || (tls->key && *tls->key) || (tls->ca && *tls->ca));
}

/* Reads a PEM file whole (NUL-terminated); NULL for an empty path. Logs and
 * returns MSR_ERR_INVALID_ARG when it cannot be read. */
static msr_status_t read_pem(const char *what, const char *path, char **out_p)
{
    *out_p = NULL;
    if (path == NULL || *path == '\0')
        return MSR_OK;
    FILE *f = msr_fopen_input(path, 0); /* never blocks on a FIFO */
    if (f == NULL) {
        MSR_ERROR("cannot read the TLS %s: %s", what, msr_err_msg());
        return MSR_ERR_INVALID_ARG;
    }
    size_t cap = 1 << 20, n = 0; /* PEM files are a few kilobytes */
    char *buf = msr_malloc(cap + 1);
    if (buf == NULL) {
        fclose(f);
        return MSR_ERR_NO_MEMORY;
    }
    n = fread(buf, 1, cap + 1, f);
    int bad = ferror(f) || n == 0 || n > cap;
    fclose(f);
    if (bad || strstr((buf[n < cap ? n : cap] = '\0', buf), "-----BEGIN") == NULL) {
        MSR_ERROR("the TLS %s '%s' is not a PEM file", what, path);
        msr_free(buf);
        return MSR_ERR_INVALID_ARG;
    }
    *out_p = buf;
    return MSR_OK;
}

void msr_rpc_pem_free(msr_rpc_pem_t *p)
{
    msr_free(p->cert);
    if (p->key) {
        memset(p->key, 0, strlen(p->key)); /* a private key */
        msr_free(p->key);
    }
    msr_free(p->ca);
}

/* Reads the files of tls; a cert needs its key and the other way round. */
msr_status_t msr_rpc_pem_read(const msr_rpc_tls_t *tls, msr_rpc_pem_t *p)
{
    memset(p, 0, sizeof *p);
    msr_status_t st;
    if ((st = read_pem("certificate", tls->cert, &p->cert)) != MSR_OK ||
        (st = read_pem("key", tls->key, &p->key)) != MSR_OK ||
        (st = read_pem("CA", tls->ca, &p->ca)) != MSR_OK) {
        msr_rpc_pem_free(p);
        return st;
    }
    if ((p->cert == NULL) != (p->key == NULL)) {
        MSR_ERROR("TLS needs both a certificate and its key (%s given alone)",
                  p->cert ? "the certificate" : "the key");
        msr_rpc_pem_free(p);
        return MSR_ERR_INVALID_ARG;
    }
    return MSR_OK;
}

_Static_assert((int)MSR_RPC_UNAVAILABLE == (int)GRPC_STATUS_UNAVAILABLE &&
                   (int)MSR_RPC_DEADLINE_EXCEEDED == (int)GRPC_STATUS_DEADLINE_EXCEEDED &&
                   (int)MSR_RPC_RESOURCE_EXHAUSTED == (int)GRPC_STATUS_RESOURCE_EXHAUSTED &&
                   (int)MSR_RPC_INVALID_ARGUMENT == (int)GRPC_STATUS_INVALID_ARGUMENT &&
                   (int)MSR_RPC_ABORTED == (int)GRPC_STATUS_ABORTED,
               "msr_rpc_code_t follows gRPC's status codes");
