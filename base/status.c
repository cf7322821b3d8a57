/* The status table: names and strings generated from MSR_STATUS_LIST. */
#include "base/status.h"

#include <errno.h>

const char *msr_status_str(msr_status_t status)
{
    switch (status) {
#define MSR_STATUS_STR_(name, value, text) \
    case name:                             \
        return text;
        MSR_STATUS_LIST(MSR_STATUS_STR_)
#undef MSR_STATUS_STR_
    }
    return "unknown status";
}

const char *msr_status_name(msr_status_t status)
{
    switch (status) {
#define MSR_STATUS_NAME_(name, value, text) \
    case name:                              \
        return #name;
        MSR_STATUS_LIST(MSR_STATUS_NAME_)
#undef MSR_STATUS_NAME_
    }
    return "MSR_UNKNOWN";
}

msr_status_t msr_status_from_errno(int err)
{
    switch (err) {
    case 0:
        return MSR_OK;
    case ENOMEM:
        return MSR_ERR_NO_MEMORY;
    case EINVAL:
        return MSR_ERR_INVALID_ARG;
    case ETIMEDOUT:
        return MSR_ERR_TIMEOUT;
    case ENOENT:
        return MSR_ERR_NOT_FOUND;
    case EEXIST:
        return MSR_ERR_EXISTS;
    case EBUSY:
        return MSR_ERR_BUSY;
    case EACCES:
    case EPERM:
        return MSR_ERR_PERMISSION;
    case EADDRINUSE:
        return MSR_ERR_ADDR_IN_USE;
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
        return MSR_ERR_UNREACHABLE;
    case ECONNRESET:
    case EPIPE:
        return MSR_ERR_PEER_LOST;
    case EIO:
        return MSR_ERR_IO;
    case ECANCELED:
        return MSR_ERR_CANCELED;
    case ERANGE:
    case EOVERFLOW:
        return MSR_ERR_OVERFLOW;
    case ENOSYS:
    case ENOTSUP:
        return MSR_ERR_UNSUPPORTED;
    default:
        return MSR_ERR_SYSTEM;
    }
}
