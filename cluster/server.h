/* The coordinator served over gRPC: the core of coord.h on a completion-queue
 * loop run by one thread. */
#ifndef MSR_CLUSTER_SERVER_H
#define MSR_CLUSTER_SERVER_H

#include <signal.h>

#include "cluster/coord.h"
#include "cluster/http.h"
#include "rendezvous/rpc.h"

typedef struct msr_coord_server msr_coord_server_t;

/* Binds address ("0.0.0.0:8118", "127.0.0.1:0") and starts serving; *port_p
 * gets the bound port. MSR_ERR_ADDR_IN_USE when the port is taken. */
msr_status_t msr_coord_server_create(const char *address, const msr_coord_config_t *config,
                                     int *port_p, msr_coord_server_t **server_p);

/* Like msr_coord_server_create, serving TLS when msr_rpc_tls_enabled(tls)
 * (a certificate and key; with a CA, clients must show a certificate it
 * signed). tls is read here, not kept; MSR_ERR_INVALID_ARG (logged) when
 * its files are unusable. Both raise this process's soft descriptor limit
 * to its hard limit: every connection holds one. */
msr_status_t msr_coord_server_create_tls(const char *address, const msr_coord_config_t *config,
                                         const msr_rpc_tls_t *tls, int *port_p,
                                         msr_coord_server_t **server_p);

/* Serves the dashboard (cluster/http.h: /metrics, /api/job) as config says
 * (its port 0: any free one, *port_p says which). Call before
 * msr_coord_server_run; the server's thread renders what the dashboard
 * shows when a request asks. */
msr_status_t msr_coord_server_dashboard(msr_coord_server_t *server, const msr_http_config_t *config,
                                        int *port_p);

/* Serves on the calling thread until *stop is set (by a signal handler, say)
 * or, when exit_when_finished, the job has ended and every node has left.
 * Returns the job's final state. */
msr_job_state_t msr_coord_server_run(msr_coord_server_t *server, volatile sig_atomic_t *stop,
                                     int exit_when_finished);

void msr_coord_server_destroy(msr_coord_server_t *server);

#endif
