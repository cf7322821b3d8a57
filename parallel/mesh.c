/* The 3-D mesh of ranks and its group communicators (see mesh.h). */
#include "parallel/mesh.h"

#include "base/alloc.h"
#include "base/log.h"
#include "base/status.h"

int msr_mesh_rank_of(const msr_mesh_t *mesh, int d, int p, int t)
{
    return (d * mesh->pp + p) * mesh->tp + t;
}

/* Splits world into the groups whose members share color (NULL for a group
 * of one: every rank then passes no color, so all agree). */
static msr_status_t split(msr_comm_t *world, int degree, int color, int key, const char *what,
                          msr_comm_t **comm_p)
{
    *comm_p = NULL;
    if (world == NULL)
        return MSR_OK;
    msr_status_t st = msr_comm_split(world, degree > 1 ? color : MSR_COMM_NO_COLOR, key, comm_p);
    if (st != MSR_OK)
        MSR_ERROR("mesh: making the %s groups: %s: %s", what, msr_status_str(st), msr_last_error());
    return st;
}

msr_status_t msr_mesh_create(msr_comm_t *world, int dp, int pp, int tp, msr_mesh_t **mesh_p)
{
    int size = world != NULL ? msr_comm_size(world) : 1;
    if (dp < 1 || pp < 1 || tp < 1 || (int64_t)dp * pp * tp != size) {
        MSR_ERROR("mesh: dp %d x pp %d x tp %d is not the world's %d ranks", dp, pp, tp, size);
        return MSR_ERR_CONFIG;
    }
    msr_mesh_t *m = msr_calloc(1, sizeof *m);
    if (m == NULL) {
        MSR_ERROR("mesh: out of memory");
        return MSR_ERR_NO_MEMORY;
    }
    m->dp = dp;
    m->pp = pp;
    m->tp = tp;
    m->world = world;
    m->rank = world != NULL ? msr_comm_rank(world) : 0;
    m->tp_rank = m->rank % tp;
    m->pp_rank = m->rank / tp % pp;
    m->dp_rank = m->rank / (tp * pp);
    m->owns_dp = 1;
    /* every rank makes the three splits in this order */
    msr_status_t st =
        split(world, tp, m->dp_rank * pp + m->pp_rank, m->tp_rank, "tensor-parallel", &m->tp_comm);
    if (st == MSR_OK)
        st = split(world, pp, m->dp_rank * tp + m->tp_rank, m->pp_rank, "pipeline", &m->pp_comm);
    if (st == MSR_OK)
        st = split(world, dp, m->pp_rank * tp + m->tp_rank, m->dp_rank, "data-parallel",
                   &m->dp_comm);
    if (st != MSR_OK) {
        msr_mesh_destroy(m);
        return st;
    }
    *mesh_p = m;
    return MSR_OK;
}

msr_status_t msr_mesh_create_dp(msr_comm_t *comm, msr_mesh_t **mesh_p)
{
    msr_mesh_t *m = msr_calloc(1, sizeof *m);
    if (m == NULL) {
        MSR_ERROR("mesh: out of memory");
        return MSR_ERR_NO_MEMORY;
    }
    m->dp = comm != NULL ? msr_comm_size(comm) : 1;
    m->pp = m->tp = 1;
    m->rank = m->dp_rank = comm != NULL ? msr_comm_rank(comm) : 0;
    m->world = comm;
    m->dp_comm = m->dp > 1 ? comm : NULL;
    m->owns_dp = 0;
    *mesh_p = m;
    return MSR_OK;
}

void msr_mesh_destroy(msr_mesh_t *mesh)
{
    if (mesh == NULL)
        return;
    msr_comm_destroy(mesh->tp_comm);
    msr_comm_destroy(mesh->pp_comm);
    if (mesh->owns_dp)
        msr_comm_destroy(mesh->dp_comm);
    msr_free(mesh);
}
