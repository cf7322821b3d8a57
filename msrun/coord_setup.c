/* Where the job's coordinator is, decided before the agent's loop runs:
 * on loopback for a standalone job, elected through etcd, or at
 * master_addr, started on this node when the address is its own (or it is
 * told to host it), and joined when another msrun of this host started it
 * first. The job's token is decided here too when none was given: made up
 * by the node that starts the coordinator, fetched with munge by others. */
#include "launcher/coord_child.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "cluster/munge_auth.h"
#include "launcher/net.h"
#include "launcher/node.h"
#include "launcher/token.h"

/* Whether an msrun coordinator of this job answers at target. With
 * wait_for_ready, waits up to 2 s for it to come up; without, a refused
 * connection answers at once. */
static msr_status_t probe_coordinator(msr_coord_t *c, const char *target, int wait_for_ready)
{
    msr_rpc_channel_t *ch = NULL;
    c->fork_ok = 0; /* gRPC's state and threads are this process's from here */
    msr_status_t st = msr_rpc_channel_create_tls(target, c->job->token, &c->job->tls, &ch);
    if (st != MSR_OK)
        return st;
    Msr__StatusRequest req = MSR__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    st = msr_rpc_call(ch, MSR_RPC_STATUS, &req.base, msr_deadline_in_ms(2000), wait_for_ready,
                      &resp);
    msr_rpc_message_free(resp);
    msr_rpc_channel_destroy(ch);
    return st;
}

/* Standalone: the coordinator on loopback, on --master_port or a free port. */
static int setup_standalone(msr_coord_t *c)
{
    snprintf(c->ip, sizeof c->ip, "127.0.0.1");
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    /* --master_port given: the embedded coordinator listens there */
    char bind[32];
    snprintf(bind, sizeof bind, "127.0.0.1:%d", c->o->given_master_port ? c->o->master_port : 0);
    int port = msr_coord_child_start(c, bind);
    if (port < 0) {
        fprintf(stderr, "msrun: error: cannot start the coordinator on %s: %s\n", bind,
                msr_err_msg());
        return 2;
    }
    c->port = port;
    snprintf(c->bind, sizeof c->bind, "127.0.0.1:%d", port);
    return 0;
}

/* One Auth call with cred: MSR_OK with the token in c->job->token, else the
 * call's status. */
static msr_status_t auth_munge_once(msr_coord_t *c, msr_rpc_channel_t *ch, char *cred,
                                    uint64_t deadline)
{
    Msr__AuthRequest req = MSR__AUTH_REQUEST__INIT;
    req.job_id = c->job->id;
    req.credential = cred;
    ProtobufCMessage *resp = NULL;
    uint64_t call_deadline = msr_deadline_in_ms(5000);
    msr_status_t st = msr_rpc_call(ch, MSR_RPC_AUTH, &req.base,
                                   call_deadline < deadline ? call_deadline : deadline, 1, &resp);
    if (st != MSR_OK)
        return st;
    const char *token = ((Msr__AuthResponse *)resp)->token;
    if (token == NULL || !msr_token_valid(token)) {
        msr_rpc_message_free(resp);
        return msr_err(MSR_ERR_PROTOCOL, "the coordinator answered Auth without a valid token");
    }
    snprintf(c->job->token, sizeof c->job->token, "%s", token);
    memset(((Msr__AuthResponse *)resp)->token, 0, strlen(token));
    msr_rpc_message_free(resp);
    return MSR_OK;
}

/* --auth=munge, a node without the token: it proves to the coordinator
 * with a munge credential that it runs as the job's user and receives the
 * token. The coordinator may not be up yet: tries again until
 * cluster_time_out (from msrun's start) is spent, then exits 124 as a job
 * that never formed. A refusal is final (exit 2). */
static int fetch_token(msr_coord_t *c)
{
    uint64_t deadline = c->job->start_ns + (uint64_t)c->o->cluster_time_out_ms * 1000000ull;
    msr_rpc_channel_t *ch = NULL;
    c->fork_ok = 0; /* gRPC is this process's from here */
    if (msr_rpc_channel_create_tls(c->target, NULL, &c->job->tls, &ch) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot reach the coordinator at %s: %s\n", c->target,
                msr_err_msg());
        return 2;
    }
    int64_t backoff_ms = 100;
    int rc;
    for (;;) {
        /* a fresh credential for each call: one is accepted only once */
        char *cred = NULL;
        msr_status_t st =
            msr_munge_encode(c->o->munge_socket, c->job->id, c->target, msr_munge_job_uid(), &cred);
        if (st != MSR_OK) {
            fprintf(stderr, "msrun: error: --auth=munge: %s\n", msr_err_msg_or(st));
            rc = 2;
            break;
        }
        msr_err_clear();
        st = auth_munge_once(c, ch, cred, deadline);
        msr_free(cred);
        if (st == MSR_OK) {
            MSR_INFO("authenticated to the coordinator at %s with munge", c->target);
            rc = 0;
            break;
        }
        if (st == MSR_ERR_PERMISSION || st == MSR_ERR_UNSUPPORTED || st == MSR_ERR_PROTOCOL ||
            st == MSR_ERR_INVALID_ARG) {
            fprintf(stderr,
                    "msrun: error: munge authentication to the coordinator at %s failed: %s\n",
                    c->target, msr_err_msg_or(st));
            rc = 2;
            break;
        }
        if (msr_deadline_passed(deadline)) {
            fprintf(stderr,
                    "msrun: error: no coordinator at %s gave this node the job token within "
                    "cluster_time_out (%.0f s): %s\n",
                    c->target, (double)c->o->cluster_time_out_ms / 1000.0, msr_err_msg_or(st));
            rc = 124;
            break;
        }
        MSR_DEBUG("munge authentication to %s: %s; trying again", c->target, msr_err_msg_or(st));
        int64_t left = msr_deadline_left_ms(deadline);
        if (st == MSR_ERR_UNREACHABLE) /* poll the connection on while waiting */
            msr_rpc_channel_wait(ch, msr_deadline_in_ms(backoff_ms < left ? backoff_ms : left));
        else
            msr_sleep_ms(backoff_ms < left ? backoff_ms : left);
        backoff_ms = backoff_ms < 1000 ? backoff_ms * 2 : 1000;
    }
    msr_rpc_channel_destroy(ch);
    return rc;
}

/* The job's token when none was given: only the node that starts the
 * coordinator may make one up; the others cannot guess it (that is the
 * point): they are given it, or with --auth=munge fetch it (fetch_token).
 * Sets *generated when it made one. */
static int decide_token(msr_coord_t *c, int here, int *generated)
{
    *generated = 0;
    if (c->job->token[0] != '\0')
        return 0;
    if (!here && c->o->auth_munge)
        return fetch_token(c);
    if (!here) {
        fprintf(stderr, "msrun: error: no job token: every node of a multi-node job needs the "
                        "job's token; give this node the one node 0 generated (it printed where "
                        "it wrote it), or give every node the same with --token_file FILE "
                        "(mode 0600) or MSRUN_TOKEN\n");
        return 2;
    }
    if (msr_token_generate(c->job->token, sizeof c->job->token) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot generate a job token: %s\n", msr_err_msg());
        return 2;
    }
    *generated = 1;
    return 0;
}

/* How long a node that lost the race for the port keeps telling apart a
 * coordinator that is still starting from another program holding it. */
#define PORT_TAKEN_MS 10000
#define PORT_BOUND    (-1) /* port_taken: this node bound the port after all */

/* The port could not be bound: taken by this job's coordinator (another
 * msrun on this host started it), which is fine, or by something else.
 * Until PORT_TAKEN_MS has passed, a holder that does not answer yet is
 * asked again and the port tried again: the other msrun's coordinator may
 * be slow to come up on a loaded host, and a holder that goes away (a
 * connection that happened to get this port as its own end) frees it. */
static int port_taken(msr_coord_t *c, const char *target, const char *err, int generated)
{
    uint64_t deadline = msr_deadline_in_ms(PORT_TAKEN_MS);
    msr_status_t st = probe_coordinator(c, target, 1);
    char again[600];
    while (st != MSR_OK && st != MSR_ERR_PERMISSION && strstr(err, "in use") &&
           msr_deadline_left_ms(deadline) > 0) {
        msr_sleep_ms(100);
        if (msr_coord_child_start(c, c->bind) >= 0)
            return PORT_BOUND;
        snprintf(again, sizeof again, "%s", msr_err_msg());
        err = again;
        MSR_DEBUG("port %d still held and no coordinator answers yet: %s", c->port, err);
        st = probe_coordinator(c, target, 1);
    }
    if (st == MSR_ERR_PERMISSION && generated && c->o->auth_munge) {
        /* another msrun of this host started it: get its token with munge */
        memset(c->job->token, 0, sizeof c->job->token);
        return fetch_token(c);
    }
    if (st == MSR_ERR_PERMISSION && generated) {
        fprintf(stderr,
                "msrun: error: port %d on %s is in use by a msrun coordinator and this node has "
                "no job token: if it is this job's, give this node the job's token "
                "(--token_file FILE or MSRUN_TOKEN)\n",
                c->port, c->ip);
        return 2;
    }
    if (st == MSR_ERR_PERMISSION) {
        fprintf(stderr,
                "msrun: error: the coordinator at %s refused this node's job token: check "
                "--token_file, MSRUN_TOKEN_FILE, --token or MSRUN_TOKEN (every node of a job "
                "must give the same); or port %d is in use by another msrun job\n",
                target, c->port);
        return 2;
    }
    if (st != MSR_OK) {
        if (strstr(err, "in use"))
            fprintf(stderr,
                    "msrun: error: port %d on %s is in use by another program (no msrun "
                    "coordinator answers there)\n",
                    c->port, c->ip);
        else
            fprintf(stderr, "msrun: error: cannot start the coordinator on %s: %s\n", target, err);
        return 2;
    }
    MSR_INFO("joining the coordinator another msrun started at %s", target);
    return 0;
}

/* A generated token goes where the other nodes' users can fetch it: a file
 * only this user can read, never a log line that others may read. */
static int share_token(msr_coord_t *c)
{
    /* the dashboard's line may have written it already (coord_child.c) */
    int made = c->job->token_file[0] != '\0';
    snprintf(c->job->token_file, sizeof c->job->token_file, "%s/token", c->job->dir);
    if (!made && msr_token_write_file(c->job->token_file, c->job->token) != MSR_OK) {
        c->job->token_file[0] = '\0';
        fprintf(stderr, "msrun: error: %s\n", msr_err_msg());
        return 2;
    }
    MSR_WARN("no job token given: generated one in %s (readable only by you); start the other "
             "nodes with --token_file set to a copy of that file (mode 0600), or with "
             "MSRUN_TOKEN set to its content",
             c->job->token_file);
    return 0;
}

/* --rdzv_backend=etcd: the nodes elect the one that runs the coordinator;
 * it listens on this host's address toward etcd, on a free port. */
static int setup_etcd(msr_coord_t *c)
{
    const msr_options_t *o = c->o;
    c->fork_ok = 0; /* the election's client has threads */
    snprintf(c->etcd_prefix, sizeof c->etcd_prefix, "/msrun/%s", c->job->id);
    uint64_t deadline = msr_deadline_in_ms(o->cluster_time_out_ms);
    /* the first endpoint's host says which of this host's addresses peers see */
    char first[300], ip[64];
    const char *ep = o->etcd_endpoints;
    if (strncmp(ep, "http://", 7) == 0)
        ep += 7;
    snprintf(first, sizeof first, "%.*s", (int)strcspn(ep, ","), ep);
    char *colon = strrchr(first, ':');
    int port = colon ? atoi(colon + 1) : 2379;
    if (colon)
        *colon = '\0';
    if (msr_net_resolve(first[0] == '[' ? first + 1 : first, ip, sizeof ip) != 0) {
        fprintf(stderr, "msrun: error: --rdzv_endpoint: %s\n", msr_err_msg());
        return 2;
    }
    if (msr_net_outward(ip, port, c->host, sizeof c->host) != 0)
        snprintf(c->host, sizeof c->host, "%s", ip);
    msr_status_t st =
        msr_elect_create(o->etcd_endpoints, c->etcd_prefix, o->etcd_lease, deadline, &c->elect);
    if (st == MSR_ERR_INVALID_ARG) {
        fprintf(stderr, "msrun: error: --rdzv_endpoint: %s\n", msr_err_msg());
        return 2;
    }
    if (st != MSR_OK) {
        fprintf(stderr, "msrun: error: %s (within --cluster_time_out %g s)\n", msr_err_msg(),
                (double)o->cluster_time_out_ms / 1000.0);
        return MSR_EXIT_NOT_FORMED;
    }
    int leader = 0;
    st = msr_elect_campaign(c->elect, deadline, &leader, c->target, sizeof c->target);
    if (st != MSR_OK) {
        fprintf(stderr, "msrun: error: no coordinator elected through etcd within %g s: %s\n",
                (double)o->cluster_time_out_ms / 1000.0, msr_err_msg());
        return MSR_EXIT_NOT_FORMED;
    }
    if (leader) {
        c->lease = msr_elect_lease(c->elect);
        char bind[300];
        msr_net_join(c->host, 0, bind, sizeof bind);
        int cport = msr_coord_child_start(c, bind);
        if (cport < 0) {
            fprintf(stderr, "msrun: error: cannot start the coordinator on %s: %s\n", bind,
                    msr_err_msg());
            return 2;
        }
        msr_net_join(c->host, cport, c->bind, sizeof c->bind);
        snprintf(c->target, sizeof c->target, "%s", c->bind);
        if (msr_elect_publish_sync(c->elect, c->bind, deadline) != MSR_OK) {
            fprintf(stderr, "msrun: error: cannot publish the coordinator's address in etcd: %s\n",
                    msr_err_msg());
            return MSR_EXIT_NOT_FORMED;
        }
        MSR_DEBUG("elected to run the coordinator: it listens on %s", c->bind);
    } else {
        MSR_DEBUG("the coordinator elected through etcd is at %s", c->target);
    }
    /* where peers reach this node: toward the coordinator */
    char cip[300];
    snprintf(cip, sizeof cip, "%s", c->target);
    colon = strrchr(cip, ':');
    if (colon) {
        *colon = '\0';
        if (msr_net_outward(cip, atoi(colon + 1), c->host, sizeof c->host) != 0)
            snprintf(c->host, sizeof c->host, "%s", ip);
    }
    snprintf(c->ip, sizeof c->ip, "%.63s", cip);
    c->port = colon ? atoi(colon + 1) : 0;
    return 0;
}

/* Decides where the coordinator is, starting it here when this node should. */
int msr_coord_setup(msr_coord_t *c)
{
    const msr_options_t *o = c->o;
    if (o->etcd_endpoints)
        return setup_etcd(c);
    if (o->master_addr == NULL) {
        int rc = setup_standalone(c);
        if (rc == 0)
            msr_net_join(c->ip, c->port, c->target, sizeof c->target);
        return rc;
    }
    /* --coordinator_here (or node rank 0 under a scheduler): this node hosts
     * it on every address, whatever master_addr is (a Service's address is
     * never the pod's own), and reaches it over loopback */
    int forced = o->coordinator_here > 0;
    if (msr_net_resolve(o->master_addr, c->ip, sizeof c->ip) != 0) {
        if (!forced) {
            fprintf(stderr, "msrun: error: master_addr: %s\n", msr_err_msg());
            return 2;
        }
        MSR_DEBUG("master_addr %s does not resolve here (%s); this node hosts the coordinator",
                  o->master_addr, msr_err_msg());
        char name[256];
        if (gethostname(name, sizeof name) != 0 || msr_net_resolve(name, c->ip, sizeof c->ip) != 0)
            snprintf(c->ip, sizeof c->ip, "127.0.0.1");
    }
    c->port = o->master_port;
    if (msr_net_outward(c->ip, c->port, c->host, sizeof c->host) != 0)
        snprintf(c->host, sizeof c->host, "%s", c->ip);
    int v6 = strchr(c->ip, ':') != NULL;
    char target[300], bind[300];
    msr_net_join(forced ? (v6 ? "::1" : "127.0.0.1") : c->ip, c->port, target, sizeof target);
    msr_net_join(v6 ? "::" : "0.0.0.0", c->port, bind, sizeof bind);
    snprintf(c->target, sizeof c->target, "%s", target);
    int here = o->coordinator_here >= 0 ? o->coordinator_here
                                        : msr_net_is_local(c->ip) && o->node_rank <= 0;
    int generated, rc = decide_token(c, here, &generated);
    if (rc != 0 || !here)
        return rc;
    if (!generated && probe_coordinator(c, target, 0) == MSR_OK) {
        /* another msrun on this host already started it */
        MSR_DEBUG("joining the coordinator already running at %s", target);
        return 0;
    }
    snprintf(c->bind, sizeof c->bind, "%s", forced ? bind : target);
    if (msr_coord_child_start(c, c->bind) < 0) {
        char err[600];
        snprintf(err, sizeof err, "%s", msr_err_msg());
        rc = port_taken(c, target, err, generated);
        if (rc != PORT_BOUND)
            return rc;
    }
    /* With --auth=munge the other nodes get the token from the coordinator. */
    if (generated && !o->auth_munge && (o->max_nodes > 1 || o->worker_num > o->local_worker_num))
        return share_token(c);
    return 0;
}
