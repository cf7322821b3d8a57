/* A relay's batch (RelayRequest) checked as a whole, by the coordinator and
 * by a relay of a higher level alike (relay.h). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/map.h"
#include "rendezvous/relay.h"
#include "rendezvous/store_core.h"

int msr_relay_method_relayed(msr_rpc_method_t m)
{
    return m == MSR_RPC_JOIN || m == MSR_RPC_HEARTBEAT || m == MSR_RPC_REPORT ||
           m == MSR_RPC_LEAVE || m == MSR_RPC_PROGRESS;
}

int msr_relay_method_forwarded(msr_rpc_method_t m)
{
    return msr_store_core_method(m);
}

void msr_relay_call_key(msr_rpc_method_t m, const ProtobufCMessage *req, char *key, size_t len)
{
    const char *id = NULL;
    if (m == MSR_RPC_JOIN) {
        const Msr__JoinRequest *j = (const Msr__JoinRequest *)req;
        if (j->node_id == NULL || *j->node_id == '\0') {
            snprintf(key, len, "hp:%.200s %d", j->host ? j->host : "", j->pid);
            return;
        }
        id = j->node_id;
    } else if (m == MSR_RPC_HEARTBEAT) {
        id = ((const Msr__HeartbeatRequest *)req)->node_id;
    } else if (m == MSR_RPC_REPORT) {
        id = ((const Msr__ReportRequest *)req)->node_id;
    } else if (m == MSR_RPC_PROGRESS) {
        id = ((const Msr__ProgressRequest *)req)->node_id;
    } else {
        id = ((const Msr__LeaveRequest *)req)->node_id;
    }
    snprintf(key, len, "id:%.200s", id ? id : "");
}

/* The batch's bounds, before its calls are unpacked: 0, or -1 with why. */
static int check_bounds(const Msr__RelayRequest *req, uint32_t subtree_max, uint32_t levels_above,
                        char *why, size_t wlen)
{
    const char *rid = req->relay_id ? req->relay_id : "";
    if (*rid == '\0' || strlen(rid) > MSR_RELAY_ID_MAX) {
        snprintf(why, wlen, "a relay's id must have 1 to %d bytes", MSR_RELAY_ID_MAX);
        return -1;
    }
    if (req->n_calls == 0 || req->n_calls > MSR_RELAY_BATCH_MAX) {
        snprintf(why, wlen, "relay %s: a batch of %zu calls; a batch has 1 to %d", rid,
                 req->n_calls, MSR_RELAY_BATCH_MAX);
        return -1;
    }
    if (req->subtree > subtree_max || req->n_calls > req->subtree) {
        snprintf(why, wlen,
                 "relay %s: %zu calls for a subtree of %u nodes (at most one call a node, and "
                 "at most %u nodes in a subtree)",
                 rid, req->n_calls, req->subtree, subtree_max);
        return -1;
    }
    if ((uint64_t)req->depth + 1 + levels_above > MSR_RELAY_LEVELS_MAX) {
        snprintf(why, wlen,
                 "relay %s: its calls came through %u levels of relays below it, and would "
                 "cross %llu relays in all; a call crosses at most %d (a loop of relays?)",
                 rid, req->depth, (unsigned long long)req->depth + 1 + levels_above,
                 MSR_RELAY_LEVELS_MAX);
        return -1;
    }
    return 0;
}

int msr_relay_batch_check(const Msr__RelayRequest *req, uint32_t subtree_max, uint32_t levels_above,
                          ProtobufCMessage **reqs, char *why, size_t wlen)
{
    if (check_bounds(req, subtree_max, levels_above, why, wlen) != 0)
        return -1;
    const char *rid = req->relay_id;
    msr_map_t seen;
    memset(&seen, 0, sizeof seen);
    int rc = 0;
    int progress = req->calls[0]->method == MSR_RPC_PROGRESS;
    for (size_t k = 0; rc == 0 && k < req->n_calls; k++) {
        const Msr__RelayCall *e = req->calls[k];
        msr_rpc_method_t m = (msr_rpc_method_t)e->method;
        if (e->method >= MSR_RPC_METHOD_COUNT || !msr_relay_method_relayed(m)) {
            snprintf(why, wlen,
                     "relay %s: call %zu has method %u; a relay carries Join, Heartbeat, Report, "
                     "Leave and Progress only",
                     rid, k, e->method);
            rc = -1;
            break;
        }
        if ((m == MSR_RPC_PROGRESS) != progress) {
            snprintf(why, wlen,
                     "relay %s: calls 0 and %zu are %s and %s; Progress calls go in batches of "
                     "their own (answered at once, they would end the others' long polls)",
                     rid, k, msr_rpc_methods[req->calls[0]->method].name, msr_rpc_methods[m].name);
            rc = -1;
            break;
        }
        const char *nul = NULL;
        reqs[k] = msr_rpc_request_unpack_checked(m, e->request.data, e->request.len, &nul);
        if (reqs[k] == NULL) {
            snprintf(why, wlen, "relay %s: call %zu (%s) %s%s", rid, k, msr_rpc_methods[m].name,
                     nul ? "has a NUL byte in " : "does not unpack", nul ? nul : "");
            rc = -1;
            break;
        }
        char key[256];
        msr_relay_call_key(m, reqs[k], key, sizeof key);
        void *old = msr_map_get(&seen, key);
        if (old != NULL) {
            snprintf(why, wlen, "relay %s: calls %zu and %zu are for the same node (%.200s)", rid,
                     (size_t)((uintptr_t)old - 1), k, key + 3);
            rc = -1;
        } else if (msr_map_put(&seen, key, (void *)(uintptr_t)(k + 1), NULL) != MSR_OK) {
            snprintf(why, wlen, "%s", MSR_RELAY_NO_MEMORY);
            rc = -1;
        }
    }
    msr_map_cleanup(&seen, NULL);
    return rc;
}

void msr_relay_cover_init(msr_relay_cover_t *c)
{
    memset(c, 0, sizeof *c);
}

void msr_relay_cover_cleanup(msr_relay_cover_t *c)
{
    msr_map_cleanup(&c->lower, NULL);
    c->covered = 0;
    c->nodes = 0;
}

/* The cover's key of a lower relay, apart from its nodes' ("n:..."). */
static void relay_key(const char *relay_id, char *key, size_t len)
{
    snprintf(key, len, "r:%s", relay_id);
}

int msr_relay_cover_check(msr_relay_cover_t *c, const char *parent, uint32_t subtree,
                          const Msr__RelayRequest *req, char *why, size_t wlen)
{
    const char *rid = req->relay_id;
    char key[MSR_RELAY_ID_MAX + 3];
    relay_key(rid, key, sizeof key);
    uint64_t old = (uint64_t)(uintptr_t)msr_map_get(&c->lower, key);
    uint64_t others = c->covered - old; /* the other lower relays' and the own nodes */
    if (others + req->subtree > subtree) {
        char own[64] = ""; /* the coordinator counts no nodes of its own */
        if (c->nodes > 0)
            snprintf(own, sizeof own, ", the nodes it serves itself %llu",
                     (unsigned long long)c->nodes);
        snprintf(why, wlen,
                 "relay %s: its subtree of %u nodes would cover nodes %llu to %llu of %s, "
                 "whose subtree has %u (the other relays under it cover %llu%s): node %llu lies "
                 "outside %s's subtree",
                 rid, req->subtree, (unsigned long long)others + 1,
                 (unsigned long long)others + req->subtree, parent, subtree,
                 (unsigned long long)(others - c->nodes), own, (unsigned long long)subtree + 1,
                 parent);
        return -1;
    }
    if (old != req->subtree &&
        msr_map_put(&c->lower, key, (void *)(uintptr_t)req->subtree, NULL) != MSR_OK) {
        snprintf(why, wlen, "%s", MSR_RELAY_NO_MEMORY);
        return -1;
    }
    c->covered = others + req->subtree;
    return 0;
}

void msr_relay_cover_drop_relay(msr_relay_cover_t *c, const char *relay_id)
{
    char key[MSR_RELAY_ID_MAX + 3];
    relay_key(relay_id, key, sizeof key);
    void *old = msr_map_remove(&c->lower, key);
    c->covered -= (uint64_t)(uintptr_t)old;
}

int msr_relay_cover_node(msr_relay_cover_t *c, const char *parent, uint32_t subtree,
                         const char *node_key, char *why, size_t wlen)
{
    char key[300];
    snprintf(key, sizeof key, "n:%s", node_key);
    if (msr_map_get(&c->lower, key) != NULL)
        return 0;
    if (c->covered + 1 > subtree) {
        int first = strncmp(node_key, "hp:", 3) == 0; /* a first Join: "hp:<host> <pid>" */
        snprintf(why, wlen,
                 "%s %s would be node %llu of %s, whose subtree has %u (the relays under it "
                 "cover %llu, the nodes it serves itself %llu); call the coordinator",
                 first ? "the node joining from" : "node", node_key + 3,
                 (unsigned long long)c->covered + 1, parent, subtree,
                 (unsigned long long)(c->covered - c->nodes), (unsigned long long)c->nodes);
        return -1;
    }
    if (msr_map_put(&c->lower, key, (void *)(uintptr_t)1, NULL) != MSR_OK) {
        snprintf(why, wlen, "%s", MSR_RELAY_NO_MEMORY);
        return -1;
    }
    c->covered++;
    c->nodes++;
    return 0;
}

void msr_relay_cover_drop_node(msr_relay_cover_t *c, const char *node_key)
{
    char key[300];
    snprintf(key, sizeof key, "n:%s", node_key);
    if (msr_map_remove(&c->lower, key) != NULL) {
        c->covered--;
        c->nodes--;
    }
}
