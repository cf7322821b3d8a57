/* --bind_core: which of this node's allowed CPU cores each worker gets. */
#ifndef MSR_MSRUN_CPUS_H
#define MSR_MSRUN_CPUS_H

#include <sched.h>

/* The cores of local_rank among local_world workers, from the allowed set:
 * with at least as many cores as workers, each gets its own n / local_world
 * of them, consecutive in the allowed set's order, no two sharing one (the
 * remainder stays unused); with fewer, worker i gets the (i mod n)-th core.
 * Returns 0, or -1 when allowed is empty or local_rank is not below
 * local_world (then *set is unchanged). */
int msr_cpu_share(const cpu_set_t *allowed, int local_rank, int local_world, cpu_set_t *set);

#endif
