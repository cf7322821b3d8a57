/* msrun base: the status type, its names and strings, and the export macro. */
#ifndef MSRUN_BASE_H
#define MSRUN_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MSR_API __attribute__((visibility("default")))
#else
#define MSR_API
#endif

#define MSR_VERSION_MAJOR  0
#define MSR_VERSION_MINOR  1
#define MSR_VERSION_PATCH  0
#define MSR_VERSION_STRING "0.1.0"

/* Every status msrun returns, in groups. 0 is success, 1 means "not done yet",
 * errors are negative. A code is never renumbered or reused once released:
 * add new ones at the end of their group. */
#define MSR_STATUS_LIST(X)                                      \
    X(MSR_OK, 0, "success")                                     \
    X(MSR_IN_PROGRESS, 1, "operation in progress")              \
    /* general: -1 .. -19 */                                    \
    X(MSR_ERR_NO_MEMORY, -1, "out of memory")                   \
    X(MSR_ERR_INVALID_ARG, -2, "invalid argument")              \
    X(MSR_ERR_STATE, -3, "call not valid in the current state") \
    X(MSR_ERR_UNSUPPORTED, -4, "not supported")                 \
    X(MSR_ERR_OVERFLOW, -5, "value or size out of range")       \
    X(MSR_ERR_INTERNAL, -6, "internal error")                   \
    X(MSR_ERR_TIMEOUT, -7, "deadline passed")                   \
    X(MSR_ERR_CANCELED, -8, "operation canceled")               \
    X(MSR_ERR_NOT_FOUND, -9, "not found")                       \
    X(MSR_ERR_EXISTS, -10, "already exists")                    \
    X(MSR_ERR_BUSY, -11, "resource busy")                       \
    /* system: -20 .. -39 */                                    \
    X(MSR_ERR_IO, -20, "input/output error")                    \
    X(MSR_ERR_SYSTEM, -21, "system call failed")                \
    X(MSR_ERR_PERMISSION, -22, "permission denied")             \
    X(MSR_ERR_ADDR_IN_USE, -23, "address already in use")       \
    /* rendezvous and cluster: -40 .. -59 */                    \
    X(MSR_ERR_UNREACHABLE, -40, "coordinator unreachable")      \
    X(MSR_ERR_PROTOCOL, -41, "malformed or unexpected message") \
    X(MSR_ERR_STALE, -42, "stale generation")                   \
    X(MSR_ERR_CONFLICT, -43, "options disagree with the job's") \
    X(MSR_ERR_REFUSED, -44, "refused by the coordinator")       \
    X(MSR_ERR_JOB_ENDED, -45, "the job has ended")              \
    X(MSR_ERR_BAD_KEY, -46, "bad key")                          \
    /* communication: -60 .. -79 */                             \
    X(MSR_ERR_PEER_LOST, -60, "peer lost")                      \
    X(MSR_ERR_BACKEND, -61, "communication backend error")      \
    X(MSR_ERR_TRUNCATED, -62, "message truncated")              \
    /* parallel runtime: -80 .. -99 */                          \
    X(MSR_ERR_CONFIG, -80, "invalid parallel configuration")    \
    X(MSR_ERR_CORRUPT, -81, "corrupt or incomplete data")

typedef enum msr_status {
#define MSR_STATUS_ENUM_(name, value, text) name = value,
    MSR_STATUS_LIST(MSR_STATUS_ENUM_)
#undef MSR_STATUS_ENUM_
} msr_status_t;

/* A short lowercase sentence for a status ("deadline passed"); never NULL,
 * "unknown status" for values not in the list. Thread-safe. */
MSR_API const char *msr_status_str(msr_status_t status);

/* The enumerator's name ("MSR_ERR_TIMEOUT"); never NULL. Thread-safe. */
MSR_API const char *msr_status_name(msr_status_t status);

/* A sentence about the last failed call made by this thread in any part of
 * libmsrun (which key, which address, which deadline, which peer); "" when
 * none failed. Valid until this thread's next call. Thread-safe. */
MSR_API const char *msr_last_error(void);

/* libmsrun's version, "MAJOR.MINOR.PATCH" (MSR_VERSION_STRING of the library
 * loaded, which may differ from the header's); never NULL. Thread-safe. */
MSR_API const char *msr_version(void);

/* ---- logging ----
 * libmsrun writes its own messages to stderr, one line each, starting with
 * "libmsrun[node N rank R]". msr_log_set_level is the one public logging
 * call: the rest of logging is internal to libmsrun. */

/* Log levels, lowest is most severe. */
typedef enum msr_log_level {
    MSR_LOG_ERROR = 0,
    MSR_LOG_WARN = 1,
    MSR_LOG_INFO = 2,
    MSR_LOG_DEBUG = 3,
    MSR_LOG_TRACE = 4,
} msr_log_level_t;

/* Sets the level of libmsrun's messages: those less severe are dropped
 * (levels outside the list are clamped to it). The default is warn, or
 * MSR_LOG_LEVEL (error, warn, info, debug, trace) when set; msr_init reads
 * MSR_LOG_LEVEL again, so a program that wants its own level over the
 * variable's calls this after msr_init. Process-wide; call it before
 * starting threads that use libmsrun. */
MSR_API void msr_log_set_level(msr_log_level_t level);

#ifdef __cplusplus
}
#endif

#endif
