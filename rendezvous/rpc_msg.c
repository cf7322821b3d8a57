/* The methods and their protobuf-c messages, without gRPC: what both the
 * gRPC glue (rpc.c) and the worker channel (wchan.c) use, so that a worker
 * that speaks only the worker channel does not load gRPC. */
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "rendezvous/rpc.h"

/* ---- methods and messages ---- */

#define METHOD(service, name, msg)                                           \
    {                                                                        \
        "/msr." service "/" #name, #name, &msr__##msg##_request__descriptor, \
            &msr__##msg##_response__descriptor                               \
    }

const msr_rpc_method_info_t msr_rpc_methods[MSR_RPC_METHOD_COUNT] = {
    [MSR_RPC_JOIN] = METHOD("Coordinator", Join, join),
    [MSR_RPC_HEARTBEAT] = METHOD("Coordinator", Heartbeat, heartbeat),
    [MSR_RPC_REPORT] = METHOD("Coordinator", Report, report),
    [MSR_RPC_LEAVE] = METHOD("Coordinator", Leave, leave),
    [MSR_RPC_STATUS] = METHOD("Coordinator", Status, status),
    [MSR_RPC_SET] = METHOD("Store", Set, set),
    [MSR_RPC_GET] = METHOD("Store", Get, get),
    [MSR_RPC_ADD] = METHOD("Store", Add, add),
    [MSR_RPC_COMPARE_SET] = METHOD("Store", CompareSet, compare_set),
    [MSR_RPC_DELETE] = METHOD("Store", Delete, delete),
    [MSR_RPC_BARRIER] = METHOD("Store", Barrier, barrier),
    [MSR_RPC_ALLGATHER] = METHOD("Store", Allgather, allgather),
    [MSR_RPC_BEAT] = METHOD("Agent", Beat, beat),
    [MSR_RPC_AUTH] = METHOD("Coordinator", Auth, auth),
    [MSR_RPC_PROGRESS] = METHOD("Coordinator", Progress, progress),
    [MSR_RPC_PUBLISH] = METHOD("Store", Publish, publish),
    [MSR_RPC_FETCH] = METHOD("Store", Fetch, fetch),
    [MSR_RPC_RELAY] = METHOD("Coordinator", Relay, relay),
    [MSR_RPC_NUM_KEYS] = METHOD("Store", NumKeys, num_keys),
};

static void *pb_alloc(void *data, size_t size)
{
    (void)data;
    return msr_malloc(size);
}

static void pb_free(void *data, void *ptr)
{
    (void)data;
    msr_free(ptr);
}

ProtobufCAllocator msr_rpc_pb_allocator = {pb_alloc, pb_free, NULL};

void msr_rpc_message_free(ProtobufCMessage *msg)
{
    if (msg)
        protobuf_c_message_free_unpacked(msg, &msr_rpc_pb_allocator);
}

ProtobufCMessage *msr_rpc_request_unpack(msr_rpc_method_t method, const uint8_t *data, size_t len)
{
    if ((unsigned)method >= MSR_RPC_METHOD_COUNT)
        return NULL;
    return protobuf_c_message_unpack(msr_rpc_methods[method].request, &msr_rpc_pb_allocator, len,
                                     data);
}

int msr_rpc_key_valid(const char *key)
{
    if (key == NULL || *key == '\0')
        return 0;
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++, n++)
        if (*p < 0x20 || *p == 0x7f || n >= MSR_KEY_MAX)
            return 0;
    return 1;
}

msr_status_t msr_rpc_status_from_grpc(int code)
{
    switch ((msr_rpc_code_t)code) {
    case MSR_RPC_OK:
        return MSR_OK;
    case MSR_RPC_CANCELLED:
        return MSR_ERR_CANCELED;
    case MSR_RPC_INVALID_ARGUMENT:
        return MSR_ERR_INVALID_ARG;
    case MSR_RPC_DEADLINE_EXCEEDED:
        return MSR_ERR_TIMEOUT;
    case MSR_RPC_NOT_FOUND:
        return MSR_ERR_NOT_FOUND;
    case MSR_RPC_ALREADY_EXISTS:
        return MSR_ERR_EXISTS;
    case MSR_RPC_PERMISSION_DENIED:
    case MSR_RPC_UNAUTHENTICATED:
        return MSR_ERR_PERMISSION;
    case MSR_RPC_RESOURCE_EXHAUSTED:
        return MSR_ERR_REFUSED;
    case MSR_RPC_FAILED_PRECONDITION:
        return MSR_ERR_CONFLICT;
    case MSR_RPC_ABORTED:
        return MSR_ERR_STALE;
    case MSR_RPC_OUT_OF_RANGE:
        return MSR_ERR_OVERFLOW;
    case MSR_RPC_UNIMPLEMENTED:
        return MSR_ERR_UNSUPPORTED;
    case MSR_RPC_UNAVAILABLE:
        return MSR_ERR_UNREACHABLE;
    default:
        return MSR_ERR_INTERNAL;
    }
}

static int pb_varint(const uint8_t *p, size_t len, size_t *i, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *i < len; shift += 7) {
        uint8_t b = p[(*i)++];
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 1;
    }
    return 0;
}

/* The name of the first string field of the message of type desc in the
 * wire bytes p (len), nested messages too (depth levels deep at most), whose
 * bytes hold a NUL; NULL when none does or the bytes are malformed (unpack
 * refuses those). protobuf-c hands a string to C as NUL-terminated text, so
 * such a field would be cut at its NUL ("a\0b" read as "a"). */
const char *msr_rpc_pb_nul_field(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                                 size_t len, int depth)
{
    size_t i = 0;
    while (i < len) {
        uint64_t tag, n;
        if (!pb_varint(p, len, &i, &tag) || (tag >> 3) > UINT32_MAX)
            return NULL;
        switch (tag & 7) {
        case 0: /* varint */
            if (!pb_varint(p, len, &i, &n))
                return NULL;
            break;
        case 1: /* fixed64 */
        case 5: /* fixed32 */
            n = (tag & 7) == 1 ? 8 : 4;
            if (len - i < n)
                return NULL;
            i += n;
            break;
        case 2: { /* length-delimited */
            if (!pb_varint(p, len, &i, &n) || n > len - i)
                return NULL;
            const ProtobufCFieldDescriptor *f =
                protobuf_c_message_descriptor_get_field(desc, (unsigned)(tag >> 3));
            const char *name = NULL;
            if (f != NULL && f->type == PROTOBUF_C_TYPE_STRING && memchr(p + i, 0, n) != NULL)
                name = f->name;
            else if (f != NULL && f->type == PROTOBUF_C_TYPE_MESSAGE && depth > 0)
                name = msr_rpc_pb_nul_field(f->descriptor, p + i, n, depth - 1);
            if (name != NULL)
                return name;
            i += n;
            break;
        }
        default:
            return NULL;
        }
    }
    return NULL;
}

ProtobufCMessage *msr_rpc_response_unpack(msr_rpc_method_t method, const uint8_t *data, size_t len)
{
    if ((unsigned)method >= MSR_RPC_METHOD_COUNT)
        return NULL;
    return protobuf_c_message_unpack(msr_rpc_methods[method].response, &msr_rpc_pb_allocator, len,
                                     data);
}

ProtobufCMessage *msr_rpc_request_unpack_checked(msr_rpc_method_t method, const uint8_t *data,
                                                 size_t len, const char **nul_field_p)
{
    *nul_field_p = NULL;
    if ((unsigned)method >= MSR_RPC_METHOD_COUNT)
        return NULL;
    const ProtobufCMessageDescriptor *desc = msr_rpc_methods[method].request;
    if ((*nul_field_p = msr_rpc_pb_nul_field(desc, data, len, 16)) != NULL)
        return NULL;
    return protobuf_c_message_unpack(desc, &msr_rpc_pb_allocator, len, data);
}

void msr_rpc_peer_host(const char *peer, char *out, size_t outlen)
{
    const char *p = strchr(peer, ':');
    int unix_path = strncmp(peer, "unix:", 5) == 0;
    p = p ? p + 1 : peer;
    const char *end = unix_path ? NULL : strrchr(p, ':');
    /* an IPv6 address in brackets keeps its colons */
    int bracketed = p[0] != '[' || (end && end > p && end[-1] == ']');
    size_t n = end && end > p && bracketed ? (size_t)(end - p) : strlen(p);
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}
