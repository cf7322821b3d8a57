/* --bind-to's placement of workers on a described machine (see cpus.h). */
#include "launcher/cpus.h"

#include "base/alloc.h"

/* The usable cores grouped by NUMA node: node n's are
 * order[start[n] .. start[n] + count[n]), in the order t lists them. */
typedef struct usable {
    int *order, *start, *count;
    int total;
} usable_t;

/* Whether core c has an allowed hardware thread (and a NUMA node in range). */
static int core_usable(const msr_topo_t *t, int c)
{
    cpu_set_t p;
    CPU_AND(&p, &t->cores[c].pus, &t->allowed);
    return CPU_COUNT(&p) > 0 && t->cores[c].numa >= 0 && t->cores[c].numa < t->nnuma;
}

static int usable_init(usable_t *u, const msr_topo_t *t)
{
    u->order = msr_calloc((size_t)t->ncores, sizeof *u->order);
    u->start = msr_calloc((size_t)t->nnuma, sizeof *u->start);
    u->count = msr_calloc((size_t)t->nnuma, sizeof *u->count);
    u->total = 0;
    if (u->order == NULL || u->start == NULL || u->count == NULL)
        return -1;
    for (int n = 0; n < t->nnuma; n++) {
        u->start[n] = u->total;
        for (int c = 0; c < t->ncores; c++)
            if (t->cores[c].numa == n && core_usable(t, c))
                u->order[u->total++] = c;
        u->count[n] = u->total - u->start[n];
    }
    return 0;
}

static void usable_cleanup(usable_t *u)
{
    msr_free(u->order);
    msr_free(u->start);
    msr_free(u->count);
}

/* Adds core c's allowed hardware threads to place p. */
static void give_core(const msr_topo_t *t, int c, msr_cpu_place_t *p)
{
    cpu_set_t threads;
    CPU_AND(&threads, &t->cores[c].pus, &t->allowed);
    CPU_OR(&p->cpus, &p->cpus, &threads);
    p->cores++;
    p->numa = t->cores[c].numa;
}

/* How many shares of k cores the nodes hold without one straddling two. */
static int capacity(const msr_topo_t *t, const usable_t *u, int k)
{
    int cap = 0;
    for (int n = 0; n < t->nnuma; n++)
        cap += u->count[n] / k;
    return cap;
}

static int near_node(const msr_topo_t *t, const int *near, int r)
{
    return near && near[r] >= 0 && near[r] < t->nnuma ? near[r] : -1;
}

static int place_cores(const msr_topo_t *t, const usable_t *u, int nranks, const int *near,
                       msr_cpu_place_t *places)
{
    int k = u->total / nranks;
    while (k > 1 && capacity(t, u, k) < nranks)
        k--;
    int *used = msr_calloc((size_t)t->nnuma, sizeof *used);
    int *node_of = msr_calloc((size_t)nranks, sizeof *node_of);
    if (used == NULL || node_of == NULL) {
        msr_free(used);
        msr_free(node_of);
        return -1;
    }
    /* workers with a GPU first take room on their GPU's node... */
    for (int r = 0; r < nranks; r++) {
        int n = near_node(t, near, r);
        node_of[r] = -1;
        if (n >= 0 && used[n] < u->count[n] / k) {
            node_of[r] = n;
            used[n]++;
        }
    }
    /* ...the others fill the nodes in order */
    int n = 0;
    for (int r = 0; r < nranks; r++) {
        if (node_of[r] >= 0)
            continue;
        while (used[n] >= u->count[n] / k)
            n++; /* capacity(k) >= nranks: room remains on a later node */
        node_of[r] = n;
        used[n]++;
    }
    /* each node's shares are its next k cores, in rank order */
    for (int i = 0; i < t->nnuma; i++)
        used[i] = 0;
    for (int r = 0; r < nranks; r++) {
        int node = node_of[r];
        for (int i = 0; i < k; i++)
            give_core(t, u->order[u->start[node] + used[node]++], &places[r]);
    }
    msr_free(used);
    msr_free(node_of);
    return 0;
}

static int place_numa(const msr_topo_t *t, const usable_t *u, int nranks, const int *near,
                      msr_cpu_place_t *places)
{
    int *nodes = msr_calloc((size_t)t->nnuma, sizeof *nodes); /* the nodes with usable cores */
    int *sharing = msr_calloc((size_t)t->nnuma, sizeof *sharing);
    if (nodes == NULL || sharing == NULL) {
        msr_free(nodes);
        msr_free(sharing);
        return -1;
    }
    int m = 0;
    for (int n = 0; n < t->nnuma; n++)
        if (u->count[n] > 0)
            nodes[m++] = n;
    for (int r = 0; r < nranks; r++) {
        int n = near_node(t, near, r);
        if (n < 0 || u->count[n] == 0)
            n = nodes[r % m];
        for (int i = 0; i < u->count[n]; i++)
            give_core(t, u->order[u->start[n] + i], &places[r]);
        sharing[n]++;
    }
    for (int r = 0; r < nranks; r++) {
        int share = u->count[places[r].numa] / sharing[places[r].numa];
        places[r].cores = share > 0 ? share : 1;
    }
    msr_free(nodes);
    msr_free(sharing);
    return 0;
}

int msr_cpu_place(const msr_topo_t *t, msr_bind_t how, int nranks, const int *near,
                  msr_cpu_place_t *places, int *oversubscribed_p)
{
    if (nranks < 1 || t->nnuma < 1 || t->ncores < 1 ||
        (how != MSR_BIND_CORE && how != MSR_BIND_NUMA))
        return -1;
    usable_t u;
    int rc = -1;
    if (usable_init(&u, t) != 0 || u.total == 0)
        goto out;
    msr_cpu_place_t *p = msr_calloc((size_t)nranks, sizeof *p);
    if (p == NULL)
        goto out;
    int over = nranks > u.total;
    if (how == MSR_BIND_NUMA)
        rc = place_numa(t, &u, nranks, near, p);
    else if (over) {
        for (int r = 0; r < nranks; r++)
            give_core(t, u.order[r % u.total], &p[r]);
        rc = 0;
    } else {
        rc = place_cores(t, &u, nranks, near, p);
    }
    if (rc == 0) {
        for (int r = 0; r < nranks; r++)
            places[r] = p[r];
        *oversubscribed_p = over;
    }
    msr_free(p);
out:
    usable_cleanup(&u);
    return rc;
}
