/* The coordinator's election through etcd (--rdzv_backend=etcd): every
 * node holds a lease; the node whose lease holds <prefix>/leader runs the
 * coordinator and publishes its address there. Before the event loop, the
 * calls here are blocking and bounded by their deadline; then a thread of
 * the election's own keeps the lease alive, watches the key and campaigns
 * when it is gone, and tells the agent's loop what changed through an
 * eventfd (msr_elect_fd, msr_elect_next), so that a slow or lost etcd never
 * blocks the loop. */
#ifndef MSR_MSRUN_ELECT_H
#define MSR_MSRUN_ELECT_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"

typedef struct msr_elect msr_elect_t;

/* A client of etcd at endpoints for the job's keys under prefix, with a
 * lease of lease_s seconds granted before deadline (tried again until
 * then). MSR_ERR_INVALID_ARG: bad endpoints; MSR_ERR_UNREACHABLE: etcd did
 * not answer in time (msr_err_msg() says why). */
msr_status_t msr_elect_create(const char *endpoints, const char *prefix, int lease_s,
                              uint64_t deadline, msr_elect_t **elect_p);

/* Revokes the lease (the leader key goes with it), after deleting every key
 * under the prefix when job_over and this node leads; stops the thread. */
void msr_elect_destroy(msr_elect_t *elect, int job_over);

/* Campaigns until there is a leader: *leader 1 if it is this node (it must
 * start the coordinator and msr_elect_publish its address), else addr
 * holds the leader's once it has published it. MSR_ERR_TIMEOUT at the
 * deadline. */
msr_status_t msr_elect_campaign(msr_elect_t *elect, uint64_t deadline, int *leader, char *addr,
                                size_t len);

/* The lease that holds the leader key while this node leads. */
int64_t msr_elect_lease(const msr_elect_t *elect);

/* The leader publishes where its coordinator listens: blocking (before the
 * thread starts) or handed to the thread. */
msr_status_t msr_elect_publish_sync(msr_elect_t *elect, const char *addr, uint64_t deadline);
void msr_elect_publish(msr_elect_t *elect, const char *addr);

/* Starts the thread: every lease/3 a keepalive and a look at the key. */
msr_status_t msr_elect_start(msr_elect_t *elect);
/* Readable when msr_elect_next has something. */
int msr_elect_fd(const msr_elect_t *elect);

typedef enum msr_elect_event_kind {
    MSR_ELECT_NONE,
    MSR_ELECT_WON,    /* this node leads now: start a coordinator, publish */
    MSR_ELECT_LEADER, /* the coordinator is at addr */
    MSR_ELECT_LOST,   /* this node's lease expired while it led: stop its coordinator */
} msr_elect_event_kind_t;

typedef struct msr_elect_event {
    msr_elect_event_kind_t kind;
    char addr[300];
} msr_elect_event_t;

/* The next thing that changed (MSR_ELECT_NONE when nothing is left). */
msr_elect_event_kind_t msr_elect_next(msr_elect_t *elect, msr_elect_event_t *ev);

/* The job is over for this node: campaign no more. */
void msr_elect_quiet(msr_elect_t *elect);

#endif
