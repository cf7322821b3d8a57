/* Relays chosen at launch (relays.h): the group rule and the relay's
 * address. */
#include "launcher/relays.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher/hostlist.h"
#include "launcher/options_impl.h"
#include "launcher/sched.h"
#include "rendezvous/relay.h"

long msr_relays_port(const msr_options_t *o, int g)
{
    return o->master_port + 2L + g;
}

int msr_relays_k(int relays, int nodes)
{
    if (relays > 0)
        return relays;
    if (relays == MSR_RELAYS_AUTO && nodes > MSR_RELAYS_AUTO_K)
        return MSR_RELAYS_AUTO_K;
    return 0;
}

static int is_loopback(const char *host)
{
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "localhost") == 0 ||
           strcmp(host, "::1") == 0 || strcmp(host, "[::1]") == 0;
}

/* The host of node leader: --relays_host (a --hostfile launch gives it),
 * Slurm's node list, else the coordinator's host when it is a loopback
 * address; into host. 0, 1 when there is none (p->why says so), -1 after
 * a message. */
static int leader_host(const msr_options_t *o, msr_relays_plan_t *p, char *host, size_t len)
{
    if (o->relays_host != NULL) {
        snprintf(host, len, "%s", o->relays_host);
        return 0;
    }
    static const char *const lists[] = {"SLURM_STEP_NODELIST", "SLURM_NODELIST",
                                        "SLURM_JOB_NODELIST"};
    const char *list = NULL, *name = NULL;
    for (size_t i = 0; o->sched == MSR_SCHED_SLURM && list == NULL && i < 3; i++)
        list = getenv(name = lists[i]);
    if (list != NULL) {
        msr_hostlist_t hl = {0};
        if (msr_hostlist_expand(list, 0, &hl) != MSR_OK || hl.count <= (size_t)p->leader) {
            msr_hostlist_free(&hl);
            msr_options_error("--relays: %s does not name node %d, the relay of node %d's group",
                              name, p->leader, o->node_rank);
            return -1;
        }
        snprintf(host, len, "%s", hl.hosts[p->leader]);
        msr_hostlist_free(&hl);
        return 0;
    }
    if (is_loopback(o->master_addr)) {
        snprintf(host, len, "%s", o->master_addr);
        return 0;
    }
    p->why = "no host list (Slurm's) names the relay's node";
    return 1;
}

const char *msr_relays_job_why(const msr_options_t *o, int k)
{
    if (k == 0)
        return o->relays == MSR_RELAYS_OFF ? "--relays off" : "the job is small";
    if (o->relay != NULL)
        return "--relay names this node's relay";
    if ((o->tls_cert || o->tls_ca) && !(o->tls_cert && o->tls_key))
        return "with TLS a relay serves with --tls_cert and --tls_key, not given";
    if (o->etcd_endpoints != NULL)
        return "the coordinator may move (etcd)";
    return NULL;
}

int msr_relays_plan(const msr_options_t *o, msr_relays_plan_t *p)
{
    memset(p, 0, sizeof *p);
    int nodes = o->max_nodes ? o->max_nodes
                             : (o->local_worker_num > 0 ? o->worker_num / o->local_worker_num : 1);
    int k = msr_relays_k(o->relays, nodes);
    p->why = msr_relays_job_why(o, k);
    if (p->why == NULL && (o->master_addr == NULL || o->standalone))
        p->why = "the job has one node";
    else if (p->why == NULL && o->node_rank < 0)
        p->why = "the node has no --node_rank";
    if (p->why != NULL)
        return 0;
    p->group = o->node_rank / k;
    p->leader = p->group * k;
    p->members = nodes - p->leader < k ? nodes - p->leader : k;
    p->serve = o->node_rank == p->leader;
    snprintf(p->id, sizeof p->id, "relay-%d", p->group);
    long port = msr_relays_port(o, p->group);
    if (port > 65535) {
        msr_options_error("--relays %d: node %d's relay would listen on port %ld (master_port + 2 "
                          "+ its group %d), past 65535; give a larger --relays or a lower "
                          "--master_port",
                          k, o->node_rank, port, p->group);
        return -1;
    }
    p->port = (int)port;
    char host[MSR_HOSTLIST_NAME_MAX + 1];
    int r = leader_host(o, p, host, sizeof host);
    if (r != 0)
        return r < 0 ? -1 : 0;
    int v6 = strchr(host, ':') != NULL && host[0] != '[';
    snprintf(p->target, sizeof p->target, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", p->port);
    p->k = k;
    return 0;
}
