/* What rpc.c shares with rpc_server.c and rpc_client.c; private to those
 * three files (it includes gRPC's headers). */
#ifndef MSR_RENDEZVOUS_RPC_INTERNAL_H
#define MSR_RENDEZVOUS_RPC_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "rendezvous/rpc.h"

struct msr_rpc_loop {
    grpc_completion_queue *cq;
    int shut;                   /* the queue reported GRPC_QUEUE_SHUTDOWN */
    atomic_int shutdown_called; /* grpc_completion_queue_shutdown was called */
};

/* A deadline in msr_now_ns units (MSR_DEADLINE_NEVER: none) as gRPC's, and
 * back. */
gpr_timespec msr_rpc_to_gpr_deadline(uint64_t deadline);
uint64_t msr_rpc_from_gpr_deadline(gpr_timespec ts);

/* msg packed into a new byte buffer; NULL when out of memory. */
grpc_byte_buffer *msr_rpc_pack_message(const ProtobufCMessage *msg);

/* The message of type desc in bb; NULL when bb is NULL, malformed or out of
 * memory. Frees nothing. */
ProtobufCMessage *msr_rpc_unpack_buffer(grpc_byte_buffer *bb,
                                        const ProtobufCMessageDescriptor *desc);
/* As msr_rpc_unpack_buffer, for a request: NULL with *nul_field_p the
 * field's name when a string field (nested ones too) holds a NUL byte, which
 * C would read cut short at it ("a\0b" as "a"). */
ProtobufCMessage *msr_rpc_unpack_checked(grpc_byte_buffer *bb,
                                         const ProtobufCMessageDescriptor *desc,
                                         const char **nul_field_p);

/* s as a NUL-terminated string, cut to outlen - 1 bytes. */
void msr_rpc_slice_to_cstr(grpc_slice s, char *out, size_t outlen);

/* The PEM files a TLS setting names, read into memory. */
typedef struct msr_rpc_pem {
    char *cert, *key, *ca;
} msr_rpc_pem_t;

/* Reads tls's files into p (freed with msr_rpc_pem_free); logs and returns
 * the failure of the first that cannot be read. */
msr_status_t msr_rpc_pem_read(const msr_rpc_tls_t *tls, msr_rpc_pem_t *p);
void msr_rpc_pem_free(msr_rpc_pem_t *p);

#endif
