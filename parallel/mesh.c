/* The 4-D mesh of ranks and its group communicators (see mesh.h). */
#include "parallel/mesh.h"

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "model/err_call.h"

int msr_mesh_rank_of(const msr_mesh_t *mesh, int d, int p, int c, int t)
{
    return ((d * mesh->pp + p) * mesh->cp + c) * mesh->tp + t;
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
        return msr_err_call(st, "mesh: making the %s groups", what);
    return MSR_OK;
}

msr_status_t msr_mesh_create(msr_comm_t *world, int dp, int pp, int cp, int tp, msr_mesh_t **mesh_p)
{
    int size = world != NULL ? msr_comm_size(world) : 1;
    if (dp < 1 || pp < 1 || cp < 1 || tp < 1 || (int64_t)dp * pp * cp * tp != size) {
        return msr_err(MSR_ERR_CONFIG,
                       "mesh: dp %d x pp %d x cp %d x tp %d is not the world's %d ranks", dp, pp,
                       cp, tp, size);
    }
    msr_mesh_t *m = msr_calloc(1, sizeof *m);
    if (m == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "mesh: out of memory");
    m->dp = dp;
    m->pp = pp;
    m->cp = cp;
    m->tp = tp;
    m->world = world;
    m->rank = world != NULL ? msr_comm_rank(world) : 0;
    m->tp_rank = m->rank % tp;
    m->cp_rank = m->rank / tp % cp;
    m->pp_rank = m->rank / (tp * cp) % pp;
    m->dp_rank = m->rank / (tp * cp * pp);
    m->owns_dp = 1;
    int d = m->dp_rank, p = m->pp_rank, c = m->cp_rank, t = m->tp_rank;
    /* every rank makes the splits in this order */
    msr_status_t st = split(world, tp, (d * pp + p) * cp + c, t, "tensor-parallel", &m->tp_comm);
    if (st == MSR_OK)
        st = split(world, cp, (d * pp + p) * tp + t, c, "context-parallel", &m->cp_comm);
    if (st == MSR_OK)
        st = split(world, pp, (d * cp + c) * tp + t, p, "pipeline", &m->pp_comm);
    if (st == MSR_OK)
        st = split(world, dp, (p * cp + c) * tp + t, d, "data-parallel", &m->dp_comm);
    if (st == MSR_OK && dp > 1 && cp > 1) {
        m->owns_dcp = 1;
        st = split(world, dp * cp, p * tp + t, d * cp + c, "replica (dp x cp)", &m->dcp_comm);
    } else {
        m->dcp_comm = cp > 1 ? m->cp_comm : m->dp_comm;
    }
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
    if (m == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "mesh: out of memory");
    m->dp = comm != NULL ? msr_comm_size(comm) : 1;
    m->pp = m->cp = m->tp = 1;
    m->rank = m->dp_rank = comm != NULL ? msr_comm_rank(comm) : 0;
    m->world = comm;
    m->dp_comm = m->dp > 1 ? comm : NULL;
    m->dcp_comm = m->dp_comm;
    m->owns_dp = 0;
    *mesh_p = m;
    return MSR_OK;
}

void msr_mesh_destroy(msr_mesh_t *mesh)
{
    if (mesh == NULL)
        return;
    if (mesh->owns_dcp)
        msr_comm_destroy(mesh->dcp_comm);
    msr_comm_destroy(mesh->tp_comm);
    msr_comm_destroy(mesh->cp_comm);
    msr_comm_destroy(mesh->pp_comm);
    if (mesh->owns_dp)
        msr_comm_destroy(mesh->dp_comm);
    msr_free(mesh);
}
