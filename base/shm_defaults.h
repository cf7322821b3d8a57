/* The shared-memory data plane's defaults, named once: comm/ucx tunes its
 * collectives with them (each overridable by the MSR_COMM_SHM_* variable
 * docs/comm.md lists) and the planner counts the pages of a rank's segment
 * with them (planner/plan_mem.c), so the two cannot drift apart. */
#ifndef MSR_BASE_SHM_DEFAULTS_H
#define MSR_BASE_SHM_DEFAULTS_H

#define MSR_SHM_MAX_BYTES     (16u << 10)  /* a slot: messages up to this go through the slots */
#define MSR_SHM_TILE_BYTES    (256u << 10) /* the tiled path's tile */
#define MSR_SHM_TILES         4            /* tiles in flight per member (the pipeline's depth) */
#define MSR_SHM_SEGMENT_BYTES (16u << 20)  /* the segment every member maps */

#endif
