/* The 4-D mesh of a job's ranks: world = dp x pp x cp x tp, tp varying
 * fastest (a tensor-parallel group is tp consecutive ranks, so it stays
 * inside a node), then cp (context parallel: the ring of ranks that share
 * a sequence), then pp, then dp:
 *
 *   rank = ((dp_rank * pp + pp_rank) * cp + cp_rank) * tp + tp_rank
 *
 * and the communicators of its groups, each made by msr_comm_split of the
 * world: the tensor-parallel group (same dp, pp and cp index), the
 * context-parallel group (same dp, pp and tp index, ranked by cp index:
 * the ring), the pipeline group (same dp, cp and tp index: the stages of
 * one pipeline, ranked by stage), the data-parallel group (same pp, cp and
 * tp index) and the replica group dp x cp (same pp and tp index, ranked
 * dp_rank * cp + cp_rank: the ranks that hold the same part of the model,
 * whose gradients are summed and whose optimizer state ZeRO shards). A
 * group of one rank has no communicator (NULL), so code that is alone in a
 * dimension does no communication in it.
 *
 * Not thread-safe: one thread makes and uses a mesh. */
#ifndef MSR_PARALLEL_MESH_H
#define MSR_PARALLEL_MESH_H

#include "msrun/base.h"
#include "msrun/comm.h"

typedef struct msr_mesh {
    int dp, pp, cp, tp;                     /* the degrees; their product is the world size */
    int rank;                               /* in the world */
    int dp_rank, pp_rank, cp_rank, tp_rank; /* this rank's coordinates */
    msr_comm_t *world;                      /* borrowed; NULL for a world of one */
    msr_comm_t *dp_comm;                    /* NULL when dp == 1 */
    msr_comm_t *pp_comm;                    /* NULL when pp == 1; rank in it = pp_rank */
    msr_comm_t *cp_comm;                    /* NULL when cp == 1; rank in it = cp_rank */
    msr_comm_t *tp_comm;                    /* NULL when tp == 1; rank in it = tp_rank */
    /* dp x cp: dp_comm when cp == 1, cp_comm when dp == 1, NULL when both
     * are 1; rank in it = dp_rank * cp + cp_rank */
    msr_comm_t *dcp_comm;
    int owns_dp;  /* dp_comm was made here (else borrowed) */
    int owns_dcp; /* dcp_comm was made here (else one of the above) */
} msr_mesh_t;

/* The world rank of coordinates (d, p, c, t). */
int msr_mesh_rank_of(const msr_mesh_t *mesh, int d, int p, int c, int t);

/* Cuts world (NULL: a world of one) into the mesh dp x pp x cp x tp. Collective
 * over world: every rank calls it with the same degrees. world must outlive
 * the mesh. Errors: MSR_ERR_CONFIG (a degree < 1 or a product that is not
 * the world size; in the error text), MSR_ERR_NO_MEMORY, the splits' errors. */
msr_status_t msr_mesh_create(msr_comm_t *world, int dp, int pp, int cp, int tp,
                             msr_mesh_t **mesh_p);

/* A data-parallel-only mesh (pp = cp = tp = 1) over comm (NULL: alone), which it
 * borrows as both the world and the dp group: no communication. */
msr_status_t msr_mesh_create_dp(msr_comm_t *comm, msr_mesh_t **mesh_p);

/* Frees the mesh and the communicators it made (local). NULL does nothing. */
void msr_mesh_destroy(msr_mesh_t *mesh);

#endif
