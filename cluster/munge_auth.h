/* Munge authentication: a node that has no job token proves to the
 * coordinator that it runs as the job's user with a munge credential, and
 * gets the token in exchange (the Auth call; docs/security.md). Encoding is
 * the node's side, verifying the coordinator's; both talk to the local
 * munged over its unix socket. */
#ifndef MSR_CLUSTER_MUNGE_AUTH_H
#define MSR_CLUSTER_MUNGE_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "msrun/base.h"

/* A credential's time to live, in seconds: a node encodes one for each
 * Auth call it makes, so it need not outlive the call. */
#define MSR_MUNGE_TTL_S 60

/* The payload a credential carries:
 *   "msrun-auth 1 job=<job id> coordinator=<host:port>"
 * where host:port is the coordinator's address as the node dials it. */
#define MSR_MUNGE_PAYLOAD_PREFIX "msrun-auth 1 job="

/* The uid whose credentials a coordinator accepts: SLURM_JOB_UID when it is
 * set to a number (the job's user, as Slurm says), else this process'
 * real uid. */
uid_t msr_munge_job_uid(void);

/* Encodes a fresh credential of this process' uid that only job_uid (and
 * root) may decode, naming job_id and target ("host:port"), valid for
 * MSR_MUNGE_TTL_S. socket is munged's socket (NULL: libmunge's default).
 * *cred_p (free with msr_free) is written only on success; on failure
 * MSR_ERR_PERMISSION or MSR_ERR_SYSTEM, and msr_err_msg() has munge's
 * reason. Blocks for one round trip to munged. Thread-safe. */
msr_status_t msr_munge_encode(const char *socket, const char *job_id, const char *target,
                              uid_t job_uid, char **cred_p);

/* Whether a decoded payload (len bytes, not NUL-terminated) names job_id
 * and the coordinator listening on bind ("host:port"): the ports must be
 * equal, and the hosts too unless bind's is a wildcard (0.0.0.0, ::), for
 * which any host the node dialled is this coordinator. 1 if it does, 0 if
 * not (msr_err_msg() says which part differs). */
int msr_munge_payload_matches(const char *payload, size_t len, const char *job_id,
                              const char *bind);

typedef struct msr_munge_verifier msr_munge_verifier_t;

typedef struct msr_munge_verifier_config {
    const char *socket; /* munged's socket; NULL: libmunge's default */
    const char *job_id; /* required */
    uid_t job_uid;      /* the uid credentials must have */
    const char *bind;   /* the coordinator's address, "host:port" (port bound) */
} msr_munge_verifier_config_t;

/* Copies config; MSR_ERR_INVALID_ARG without a job id or address. */
msr_status_t msr_munge_verifier_create(const msr_munge_verifier_config_t *config,
                                       msr_munge_verifier_t **verifier_p);
void msr_munge_verifier_destroy(msr_munge_verifier_t *verifier);

/* Decodes cred with munged and accepts it (MSR_OK) when it is valid and
 * fresh (munge's own checks: its key, its time to live, not from the
 * future), of job_uid, its payload names this job and coordinator, and it
 * was never accepted before (a credential replayed within its time to live
 * is refused here even where munged's own replay cache would not see it).
 * Else MSR_ERR_PERMISSION (MSR_ERR_SYSTEM when munged cannot be reached)
 * and msr_err_msg() says why. Blocks for one round trip to munged. One
 * thread at a time. */
msr_status_t msr_munge_verify(msr_munge_verifier_t *verifier, const char *cred);

#endif
