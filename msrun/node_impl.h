/* What msrun/node.c and node_end.c share of the node's state machine:
 * private to the launcher, not part of node.h's interface. */
#ifndef MSR_LAUNCHER_NODE_IMPL_H
#define MSR_LAUNCHER_NODE_IMPL_H

#include <stdint.h>

#include "launcher/node.h"

#define NS_PER_MS 1000000ull

/* Queues an action of kind for the agent; returns it to fill in. */
msr_node_action_t *msr_node_push(msr_node_t *n, msr_node_act_kind_t kind);
/* Sends sig to local worker local (negative: every running one). */
msr_node_action_t *msr_node_signal_workers(msr_node_t *n, int local, int sig);
/* Stops the running workers with sig, escalating after the grace. */
void msr_node_stop_workers(msr_node_t *n, uint64_t now, int sig);
/* The node cannot go on with the job (the coordinator lost, or forgot this
 * node): logs n->message, stops the workers and exits 1. */
void msr_node_give_up(msr_node_t *n, uint64_t now);
/* Ends the node with exit code and error (NULL: none). */
void msr_node_finish(msr_node_t *n, int code, const char *error);

#endif
