/* The job as this node knows it: who it is (id, token), how the
 * coordinator is reached safely (TLS) and where the job's private files
 * are. Decided before the agent's event loop runs (the agent's start, the
 * coordinator's setup), read-only afterwards. */
#ifndef MSR_MSRUN_JOB_H
#define MSR_MSRUN_JOB_H

#include <stdint.h>

#include "launcher/jobdir.h"
#include "launcher/token.h"
#include "rendezvous/rpc.h"

/* A job id with its NUL. */
#define MSR_JOB_ID_LEN   256
/* "host:port" or "[v6]:port" with its NUL: a DNS name (255), brackets and
 * a port. */
#define MSR_HOSTPORT_LEN 300
/* An IPv4 or IPv6 address as text with its NUL (INET6_ADDRSTRLEN is 46,
 * and a v6 zone may follow). */
#define MSR_IP_LEN       64

typedef struct msr_job {
    char id[MSR_JOB_ID_LEN];
    char token[MSR_TOKEN_MAX + 1];     /* "" until decided (msr_coord_setup) */
    char token_file[MSR_JOB_FILE_LEN]; /* the token this node generated, for the others */
    msr_rpc_tls_t tls;                 /* strings owned by the options */
    char dir[MSR_JOB_DIR_LEN];         /* 0700: the proxy's socket, the coordinator's state */
    uint64_t start_ns; /* when msrun started (monotonic): the cluster timeout and --error_file */
} msr_job_t;

#endif
