/* The agent: one per node. Joins the job, starts and watches this node's
 * workers, follows the coordinator through generations, and exits with the
 * job's outcome. */
#ifndef MSR_MSRUN_AGENT_H
#define MSR_MSRUN_AGENT_H

#include "launcher/options.h"

/* Runs the whole job for this node; returns msrun's exit status. */
int msr_agent_run(msr_options_t *opts);

#endif
