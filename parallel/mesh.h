/* The 3-D mesh of a job's ranks: world = dp x pp x tp, tp varying fastest
 * (a tensor-parallel group is tp consecutive ranks, so it stays inside a
 * node), then pp, then dp:
 *
 *   rank = (dp_rank * pp + pp_rank) * tp + tp_rank
 *
 * and the communicators of its groups, each made by msr_comm_split of the
 * world: the tensor-parallel group (same dp and pp index), the pipeline
 * group (same dp and tp index: the stages of one pipeline, ranked by stage)
 * and the data-parallel group (same pp and tp index: the replicas of one
 * part of the model). A group of one rank has no communicator (NULL), so
 * code that is alone in a dimension does no communication in it.
 *
 * Not thread-safe: one thread makes and uses a mesh. */
#ifndef MSR_PARALLEL_MESH_H
#define MSR_PARALLEL_MESH_H

#include "msrun/base.h"
#include "msrun/comm.h"

typedef struct msr_mesh {
    int dp, pp, tp;                /* the degrees; their product is the world size */
    int rank;                      /* in the world */
    int dp_rank, pp_rank, tp_rank; /* this rank's coordinates */
    msr_comm_t *world;             /* borrowed; NULL for a world of one */
    msr_comm_t *dp_comm;           /* NULL when dp == 1 */
    msr_comm_t *pp_comm;           /* NULL when pp == 1; rank in it = pp_rank */
    msr_comm_t *tp_comm;           /* NULL when tp == 1; rank in it = tp_rank */
    int owns_dp;                   /* dp_comm was made here (else borrowed) */
} msr_mesh_t;

/* The world rank of coordinates (d, p, t). */
int msr_mesh_rank_of(const msr_mesh_t *mesh, int d, int p, int t);

/* Cuts world (NULL: a world of one) into the mesh dp x pp x tp. Collective
 * over world: every rank calls it with the same degrees. world must outlive
 * the mesh. Errors: MSR_ERR_CONFIG (a degree < 1 or a product that is not
 * the world size; logged), MSR_ERR_NO_MEMORY, the splits' errors. */
msr_status_t msr_mesh_create(msr_comm_t *world, int dp, int pp, int tp, msr_mesh_t **mesh_p);

/* A data-parallel-only mesh (pp = tp = 1) over comm (NULL: alone), which it
 * borrows as both the world and the dp group: no communication. */
msr_status_t msr_mesh_create_dp(msr_comm_t *comm, msr_mesh_t **mesh_p);

/* Frees the mesh and the communicators it made (local). NULL does nothing. */
void msr_mesh_destroy(msr_mesh_t *mesh);

#endif
