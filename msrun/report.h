/* Workers' exits reported to the coordinator, each kept until it is
 * acknowledged: a coordinator that restarts meanwhile still hears of it.
 * Retries are due times that the agent's one timer serves
 * (msr_reports_cron). Event-loop thread only. */
#ifndef MSR_MSRUN_REPORT_H
#define MSR_MSRUN_REPORT_H

#include <stdint.h>

#include "base/list.h"
#include "launcher/link.h"
#include "launcher/node.h"
#include "launcher/workers.h"

typedef struct msr_reports {
    msr_list_t pending; /* not yet acknowledged */
    /* the agent's, borrowed (msr_reports_init) */
    const msr_node_t *node; /* this node's rank, and whether it finished */
    const char *node_id, *host;
    msr_link_t *link; /* where the reports go; set once it exists */
    /* the node's relay (--relay, --relays): the reports go there while
     * *relay_failed is 0; a report through it that fails sets it and goes
     * to link at once. NULL: none */
    msr_link_t *relay;
    int *relay_failed;
    /* a retry was armed: the agent's timer must serve it */
    void (*retry_armed)(void *arg);
    void *arg;
} msr_reports_t;

void msr_reports_init(msr_reports_t *rs, const msr_node_t *node, const char *node_id,
                      const char *host, void (*retry_armed)(void *arg), void *arg);

/* Reports worker w's exit (act: MSR_NODE_ACT_REPORT) and keeps it until the
 * coordinator takes it; after_peer_lost: the worker had seen a peer lost
 * (its communicator said so) before it failed. */
void msr_report_exit(msr_reports_t *rs, const msr_worker_t *w, const msr_node_action_t *act,
                     int after_peer_lost);
/* Sends the reports whose retry is due; returns the earliest retry still
 * armed (monotonic ns), 0 if none. */
uint64_t msr_reports_cron(msr_reports_t *rs, uint64_t now);
/* Frees every report (their calls were cancelled with the link). */
void msr_reports_free(msr_reports_t *rs);

#endif
