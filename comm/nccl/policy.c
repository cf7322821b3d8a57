/* The device communicators' policy: which GPU a rank uses, whether ranks
 * share one, and which backend a group of members gets. Pure functions of
 * their arguments, unit-tested without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/alloc.h"
#include "comm/nccl/gpu_impl.h"

static const char *const mode_names[] = {"auto", "nccl", "staged"};

msr_status_t gpu_mode_parse(const char *text, gpu_mode_t *mode_p)
{
    if (text == NULL || *text == '\0') {
        *mode_p = GPU_MODE_AUTO;
        return MSR_OK;
    }
    for (int i = 0; i < 3; i++)
        if (strcasecmp(text, mode_names[i]) == 0) {
            *mode_p = (gpu_mode_t)i;
            return MSR_OK;
        }
    return MSR_ERR_INVALID_ARG;
}

const char *gpu_mode_name(gpu_mode_t mode)
{
    return (unsigned)mode < 3 ? mode_names[mode] : "?";
}

int gpu_pick_device(int local_rank, int device_count)
{
    if (device_count < 1 || local_rank < 0)
        return -1;
    return local_rank % device_count;
}

int gpu_node_shared(int local_size, int device_count)
{
    return device_count >= 1 && local_size > device_count;
}

static int uuid_known(const gpu_member_t *m)
{
    for (int i = 0; i < MSR_GPU_UUID_BYTES; i++)
        if (m->uuid[i])
            return 1;
    return 0;
}

/* Whether two members use one GPU. */
static int same_gpu(const gpu_member_t *a, const gpu_member_t *b)
{
    if (a->host != b->host)
        return 0;
    if (uuid_known(a) && uuid_known(b))
        return memcmp(a->uuid, b->uuid, MSR_GPU_UUID_BYTES) == 0;
    return a->device == b->device;
}

typedef struct order {
    const gpu_member_t *m;
    int rank;
} order_t;

/* By machine, then device identity, then rank: members on one GPU become
 * neighbours (a UUID-less member sorts by its ordinal among those). */
static int order_cmp(const void *x, const void *y)
{
    const order_t *a = x, *b = y;
    if (a->m->host != b->m->host)
        return a->m->host < b->m->host ? -1 : 1;
    int ka = uuid_known(a->m), kb = uuid_known(b->m);
    if (ka != kb)
        return ka - kb;
    int c = ka ? memcmp(a->m->uuid, b->m->uuid, MSR_GPU_UUID_BYTES)
               : (a->m->device > b->m->device) - (a->m->device < b->m->device);
    if (c != 0)
        return c;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

int gpu_find_shared(const gpu_member_t *m, int n, int *a_p, int *b_p)
{
    int found = 0, a = -1, b = -1;
    order_t *o = msr_calloc((size_t)(n > 0 ? n : 1), sizeof *o);
    if (o == NULL) {
        /* no memory to sort: compare every pair */
        for (int i = 0; i < n && !found; i++)
            for (int j = i + 1; j < n && !found; j++)
                if (same_gpu(&m[i], &m[j])) {
                    found = 1;
                    a = i;
                    b = j;
                }
    } else {
        for (int i = 0; i < n; i++)
            o[i] = (order_t){&m[i], i};
        qsort(o, (size_t)n, sizeof *o, order_cmp);
        /* Members without a UUID sort apart from those with one on the same
         * machine, but may still share their ordinal: compare those across
         * the two runs too (rare: the real table always has UUIDs). */
        for (int i = 0; i + 1 < n; i++)
            for (int j = i + 1; j < n && o[j].m->host == o[i].m->host; j++) {
                if (same_gpu(o[i].m, o[j].m)) {
                    int lo = o[i].rank < o[j].rank ? o[i].rank : o[j].rank;
                    int hi = o[i].rank < o[j].rank ? o[j].rank : o[i].rank;
                    if (!found || lo < a || (lo == a && hi < b)) {
                        a = lo;
                        b = hi;
                    }
                    found = 1;
                }
                if (uuid_known(o[i].m) && uuid_known(o[j].m))
                    break; /* sorted: later ones differ too */
            }
        msr_free(o);
    }
    if (found) {
        *a_p = a;
        *b_p = b;
    }
    return found;
}

msr_status_t gpu_decide(const gpu_member_t *m, int n, gpu_kind_t *kind_p, char *why, size_t len)
{
    for (int i = 1; i < n; i++) {
        if (m[i].mode != m[0].mode) {
            snprintf(why, len,
                     "MSR_COMM_GPU differs between members: member 0 has %s, member %d has %s",
                     gpu_mode_name((gpu_mode_t)m[0].mode), i, gpu_mode_name((gpu_mode_t)m[i].mode));
            return MSR_ERR_INVALID_ARG;
        }
        if (m[i].flags != m[0].flags) {
            snprintf(why, len,
                     "msr_comm_device flags differ between members: member 0 passed 0x%x, "
                     "member %d 0x%x",
                     m[0].flags, i, m[i].flags);
            return MSR_ERR_INVALID_ARG;
        }
    }
    if (n > 0 && (m[0].flags & MSR_COMM_STAGED)) {
        snprintf(why, len, "staged: asked for by the flag MSR_COMM_STAGED");
        *kind_p = GPU_KIND_STAGED;
        return MSR_OK;
    }
    if (n > 0 && m[0].mode == GPU_MODE_STAGED) {
        snprintf(why, len, "staged: asked for by MSR_COMM_GPU=staged");
        *kind_p = GPU_KIND_STAGED;
        return MSR_OK;
    }
    int a, b;
    if (gpu_find_shared(m, n, &a, &b)) {
        char node[96] = "";
        if (gpu_node_shared(m[a].local_size, m[a].device_count))
            snprintf(node, sizeof node, "; member %d's node runs %d ranks on %d GPUs", a,
                     m[a].local_size, m[a].device_count);
        if (n > 0 && m[0].mode == GPU_MODE_NCCL) {
            snprintf(why, len,
                     "MSR_COMM_GPU=nccl, but members %d and %d share GPU %d of one machine "
                     "(NCCL refuses two ranks on one GPU%s)",
                     a, b, m[a].device, node);
            return MSR_ERR_UNSUPPORTED;
        }
        snprintf(why, len,
                 "staged through host memory: members %d and %d share GPU %d of one machine%s", a,
                 b, m[a].device, node);
        *kind_p = GPU_KIND_STAGED;
        return MSR_OK;
    }
    snprintf(why, len, "nccl: each of the %d members has a GPU of its own (MSR_COMM_GPU=%s)", n,
             gpu_mode_name(n > 0 ? (gpu_mode_t)m[0].mode : GPU_MODE_AUTO));
    *kind_p = GPU_KIND_NCCL;
    return MSR_OK;
}
