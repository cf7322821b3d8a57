/* rdzv_scale's simulated nodes and their calls to the coordinator: one
 * call started on a client's connection and its answer checked as it
 * arrives (op_done), the loop driven until every call in flight is
 * answered, the Join and Heartbeat a node sends, and the two exchanges of
 * addresses after the join (fetched on first use, or one allgather of
 * all), as rdzv_scale.c's header describes them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/time.h"
#include "rendezvous/store_core.h"
#include "rdzv_scale_impl.h"
#include "rendezvous/relay.h"

typedef struct op {
    msr_rpc_async_t a;
    sim_t *sim;
    int client, node;
} op_t;

static void op_done(msr_rpc_async_t *a)
{
    op_t *o = (op_t *)a;
    sim_t *s = o->sim;
    s->pending--;
    if (a->status != MSR_OK) {
        if (!s->failed)
            snprintf(s->err, sizeof s->err, "%s of client %d: %s", msr_rpc_methods[a->method].name,
                     o->client, a->err);
        s->failed = 1;
    } else if (a->method == MSR_RPC_JOIN) {
        snprintf(s->ids[o->node], sizeof s->ids[0], "%s", ((Msr__JoinResponse *)a->resp)->node_id);
    } else if (a->method == MSR_RPC_HEARTBEAT) {
        const Msr__HeartbeatResponse *r = (const Msr__HeartbeatResponse *)a->resp;
        if (r->state != MSR__JOB_STATE__JOB_RUNNING || r->assignment == NULL) {
            if (!s->failed)
                snprintf(s->err, sizeof s->err, "node %d: not running after the heartbeat",
                         o->client);
            s->failed = 1;
        } else if (r->assignment->machine_ranks != rdzv_machine_ranks(s)) {
            if (!s->failed)
                snprintf(s->err, sizeof s->err, "node %d: told %d ranks on its machine, not %d",
                         o->client, r->assignment->machine_ranks, rdzv_machine_ranks(s));
            s->failed = 1;
        }
    } else if (a->method == MSR_RPC_FETCH) {
        /* each entry is an address published as (index, payload) */
        const Msr__FetchResponse *r = (const Msr__FetchResponse *)a->resp;
        int bad = r == NULL || r->data.len != r->n_lengths * (size_t)s->bytes;
        for (size_t i = 0; !bad && i < r->n_lengths; i++)
            bad = r->lengths[i] != (uint32_t)s->bytes;
        if (bad) {
            if (!s->failed)
                snprintf(s->err, sizeof s->err, "client %d: wrong fetch result", o->client);
            s->failed = 1;
        }
    } else if (a->method == MSR_RPC_ALLGATHER) {
        /* Answers arrive as bytes, as a node's proxy receives them to pass
         * on; every answer must be complete, and every 64th is unpacked and
         * checked entry by entry. */
        int bad = msr_rpc_async_raw_len(a) < s->want_bytes;
        if (!bad && o->client % 64 == 0) {
            Msr__AllgatherResponse *r = (Msr__AllgatherResponse *)msr_rpc_async_raw_unpack(a);
            bad = r == NULL || r->data.len != s->want_bytes ||
                  r->n_lengths != (size_t)s->nodes * s->ranks;
            for (size_t i = 0; !bad && i < r->n_lengths; i++) {
                uint32_t idx;
                memcpy(&idx, r->data.data + i * (size_t)s->bytes, sizeof idx);
                bad = idx != i || r->lengths[i] != (uint32_t)s->bytes;
            }
            if (r)
                msr_rpc_message_free(&r->base);
        }
        if (bad) {
            if (!s->failed)
                snprintf(s->err, sizeof s->err, "client %d: wrong allgather result", o->client);
            s->failed = 1;
        }
    }
    msr_rpc_async_cleanup(a);
    free(o);
}

/* Starts a call of client (a channel); node is the simulated node it is for. */
int rdzv_start_op(sim_t *s, int client, int node, msr_rpc_method_t m, const ProtobufCMessage *req)
{
    op_t *o = calloc(1, sizeof *o);
    if (o == NULL)
        return -1;
    o->sim = s;
    o->client = client;
    o->node = node;
    o->a.method = m;
    o->a.deadline = msr_deadline_in_ms(120000);
    o->a.wait_for_ready = 1;
    o->a.done = op_done;
    o->a.raw = m == MSR_RPC_ALLGATHER;
    if (msr_rpc_call_start(s->ch[client % s->nch], s->loop, &o->a, req) != MSR_OK) {
        free(o);
        return -1;
    }
    s->pending++;
    return 0;
}

const ProtobufCMessage *rdzv_make_join(sim_t *s, int n, void *space)
{
    Msr__JoinRequest *j = space;
    msr__join_request__init(j);
    j->protocol_version = MSR_PROTOCOL_VERSION;
    j->job_id = "scale";
    j->host = ""; /* set by the caller */
    j->pid = 1000 + n;
    j->local_worker_num = s->ranks;
    j->worker_num = s->nodes * s->ranks;
    j->node_rank = -1;
    j->free_port = 29500;
    /* a machine each, told unless the nodes count through the store */
    j->machine = s->store_count ? 0 : (uint64_t)n + 1;
    return &j->base;
}

int rdzv_machine_ranks(const sim_t *s)
{
    return s->store_count ? 0 : s->ranks;
}

const ProtobufCMessage *rdzv_make_heartbeat(sim_t *s, int n, void *space)
{
    Msr__HeartbeatRequest *h = space;
    msr__heartbeat_request__init(h);
    h->node_id = s->ids[n];
    h->generation = 0;
    h->known_state = MSR__JOB_STATE__JOB_WAITING;
    h->ready_generation = 0;
    h->wait_ms = 60000;
    return &h->base;
}

int rdzv_drain(sim_t *s)
{
    while (s->pending > 0) {
        if (msr_rpc_loop_poll(s->loop, msr_deadline_in_ms(1000)) < 0)
            return -1;
        if (s->after_poll)
            s->after_poll(s);
    }
    return s->failed ? -1 : 0;
}

/* The nodes under one top relay. */
static long long top_span(const sim_t *s)
{
    long long span = 1;
    for (int l = 0; l < s->levels && span <= s->nodes; l++)
        span *= s->relay;
    return span;
}

int rdzv_node_client(const sim_t *s, int n)
{
    return s->relay ? (int)(n / top_span(s)) : n;
}

/* Sends, for node n, a Fetch of the entries indices[0..k) (distinct, in the
 * job) of the addresses. */
static int fetch_op(sim_t *s, int n, const uint32_t *indices, size_t k)
{
    Msr__FetchRequest f = MSR__FETCH_REQUEST__INIT;
    f.generation = 0;
    f.name = "scale";
    f.indices = (uint32_t *)indices;
    f.n_indices = k;
    f.wait_ms = 60000;
    return rdzv_start_op(s, rdzv_node_client(s, n), n, MSR_RPC_FETCH, &f.base);
}

static void barrier_init(Msr__BarrierRequest *b, uint32_t world)
{
    msr__barrier_request__init(b);
    b->generation = 0;
    b->name = "scale-ready";
    b->count = world;
    b->wait_ms = 60000;
}

/* Every node's Barrier call alone (direct). */
static int barrier_each(sim_t *s, uint32_t world)
{
    for (int n = 0; n < s->nodes; n++) {
        Msr__BarrierRequest b;
        barrier_init(&b, world);
        b.weight = (uint32_t)s->ranks;
        if (rdzv_start_op(s, rdzv_node_client(s, n), n, MSR_RPC_BARRIER, &b.base) != 0)
            return -1;
    }
    return 0;
}

/* The nodes' Barrier calls as their top relays send them upstream: one
 * arrival of each relay's nodes, merged (rendezvous/relay_merge.c), a part
 * of each node's ids and weight. A relay's parts are at most
 * MSR_BARRIER_PARTS_MAX; past that (relays of relays) each goes alone. */
static int merged_barrier(sim_t *s, uint32_t world)
{
    long long span = top_span(s);
    if (span > MSR_BARRIER_PARTS_MAX)
        return barrier_each(s, world);
    int per = (int)span;
    Msr__BarrierPart *parts = calloc((size_t)per, sizeof *parts);
    Msr__BarrierPart **pp = calloc((size_t)per, sizeof *pp);
    int rc = parts && pp ? 0 : -1;
    for (int first = 0; first < s->nodes && rc == 0; first += per) {
        int k = first + per <= s->nodes ? per : s->nodes - first;
        for (int i = 0; i < k; i++) {
            msr__barrier_part__init(&parts[i]);
            parts[i].client_id = (uint64_t)(first + i) + 1;
            parts[i].request_id = 1;
            parts[i].weight = (uint32_t)s->ranks;
            pp[i] = &parts[i];
        }
        Msr__BarrierRequest b;
        barrier_init(&b, world);
        b.weight = (uint32_t)(k * s->ranks);
        b.merge_id = (uint64_t)rdzv_node_client(s, first) + 1;
        b.parts = pp;
        b.n_parts = (size_t)k;
        rc = rdzv_start_op(s, rdzv_node_client(s, first), first, MSR_RPC_BARRIER, &b.base);
    }
    free(parts);
    free(pp);
    return rc;
}

/* Every node's Publish of its ranks' entries alone (direct). */
static int publish_each(sim_t *s, Msr__Contribution **eptr)
{
    for (int n = 0; n < s->nodes; n++) {
        Msr__PublishRequest p = MSR__PUBLISH_REQUEST__INIT;
        p.generation = 0;
        p.name = "scale";
        p.n_entries = (size_t)s->ranks;
        p.entries = eptr + (size_t)n * s->ranks;
        if (rdzv_start_op(s, rdzv_node_client(s, n), n, MSR_RPC_PUBLISH, &p.base) != 0)
            return -1;
    }
    return 0;
}

/* The nodes' Publish calls as their top relays send them upstream: a
 * relay's nodes' calls merged (rendezvous/relay_publish.c), each merged
 * call at most MSR_RELAY_PUBLISH_BYTES of the nodes' requests packed. */
static int merged_publish(sim_t *s, Msr__Contribution **eptr)
{
    int R = s->ranks, N = s->nodes;
    for (int first = 0; first < N;) {
        int client = rdzv_node_client(s, first), end = first;
        size_t bytes = 0;
        while (end < N && rdzv_node_client(s, end) == client) {
            Msr__PublishRequest one = MSR__PUBLISH_REQUEST__INIT;
            one.name = "scale";
            one.n_entries = (size_t)R;
            one.entries = eptr + (size_t)end * R;
            size_t len = protobuf_c_message_get_packed_size(&one.base);
            if (end > first && bytes + len > MSR_RELAY_PUBLISH_BYTES)
                break;
            bytes += len;
            end++;
        }
        Msr__PublishRequest p = MSR__PUBLISH_REQUEST__INIT;
        p.generation = 0;
        p.name = "scale";
        p.n_entries = (size_t)(end - first) * R;
        p.entries = eptr + (size_t)first * R;
        if (rdzv_start_op(s, client, first, MSR_RPC_PUBLISH, &p.base) != 0)
            return -1;
        first = end;
    }
    return 0;
}

/* The exchange of addresses fetched on first use (rdzv_scale.c's header): what
 * each node's proxy sends upstream, each step for every node at once. */
int rdzv_lazy_exchange(sim_t *s, Msr__Contribution **eptr)
{
    int R = s->ranks, N = s->nodes;
    uint32_t world = (uint32_t)N * (uint32_t)R;
    if ((s->relay ? merged_publish(s, eptr) : publish_each(s, eptr)) != 0)
        return -1;
    if (rdzv_drain(s) != 0)
        return -1;
    /* this node's own addresses are the ones it published: its proxy
     * answers their fetch. With --store_count its machine's count of ranks
     * through the store (told at the join otherwise). */
    for (int n = 0; n < N && s->store_count; n++) {
        char key[64];
        snprintf(key, sizeof key, "scale-hosts/%d", n);
        Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
        a.generation = 0;
        a.key = key;
        a.delta = R;
        if (rdzv_start_op(s, rdzv_node_client(s, n), n, MSR_RPC_ADD, &a.base) != 0)
            return -1;
    }
    if (rdzv_drain(s) != 0)
        return -1;
    if (s->store_count && (s->relay ? merged_barrier(s, world) : barrier_each(s, world)) != 0)
        return -1;
    if (rdzv_drain(s) != 0)
        return -1;
    for (int n = 0; n < N && N > 1; n++) {
        char key[64];
        snprintf(key, sizeof key, "scale-hosts/%d", n);
        Msr__GetRequest g = MSR__GET_REQUEST__INIT;
        g.generation = 0;
        g.key = key;
        if (s->store_count &&
            rdzv_start_op(s, rdzv_node_client(s, n), n, MSR_RPC_GET, &g.base) != 0)
            return -1;
        /* the ring's and the leaders' neighbours off this node */
        uint32_t prev = (uint32_t)((n + N - 1) % N), next = (uint32_t)((n + 1) % N);
        uint32_t want[3] = {prev * R + (uint32_t)R - 1, next * R, prev * R};
        size_t k = want[2] == want[0] ? 2 : 3;
        /* a relay answers a fetch of entries its own subtree published
         * through it (relay.h): only the others reach the coordinator */
        if (s->relay && rdzv_node_client(s, (int)prev) == rdzv_node_client(s, n) &&
            rdzv_node_client(s, (int)next) == rdzv_node_client(s, n))
            continue;
        if (fetch_op(s, n, want, k) != 0)
            return -1;
    }
    return rdzv_drain(s);
}

/* The allgather of every address (rdzv_scale.c's header). */
int rdzv_exchange_all(sim_t *s, Msr__Contribution **eptr)
{
    int direct = s->direct, ranks = s->ranks, world = s->nodes * s->ranks;
    for (int c = 0; c < s->clients; c++) {
        Msr__AllgatherRequest g = MSR__ALLGATHER_REQUEST__INIT;
        g.generation = 0;
        g.name = "scale";
        g.count = (uint32_t)world;
        g.wait_ms = 60000;
        g.n_entries = direct ? 1 : (size_t)ranks;
        g.entries = eptr + (direct ? c : c * ranks);
        if (rdzv_start_op(s, c, direct ? c / ranks : c, MSR_RPC_ALLGATHER, &g.base) != 0)
            return -1;
    }
    return rdzv_drain(s);
}
