/* A plaintext gRPC server's own TCP listener: it accepts connections itself
 * and hands them to gRPC (grpc_server_add_channel_from_fd), so that it can
 * bound them, which gRPC 1.51's listener cannot: at most max_total
 * connections at once, at most max_unauth_per_host connections per peer
 * address that have not yet made a call with the right token, and those
 * closed after grace_ms. A listener that runs out of descriptors keeps
 * accepting (and closing) instead of stopping for good as gRPC's does.
 * gRPC 1.51 takes connections this way only without TLS. Private to rpc_server.c. */
#ifndef MSR_RENDEZVOUS_RPC_ACCEPT_H
#define MSR_RENDEZVOUS_RPC_ACCEPT_H

#include <stddef.h>

#include <grpc/grpc.h>

#include "msrun/base.h"

typedef struct msr_rpc_acceptor msr_rpc_acceptor_t;

typedef struct msr_rpc_acceptor_config {
    const char *address; /* "host:port", "[v6]:port"; port 0 picks one */
    int max_total;       /* connections held at once (each costs two descriptors) */
    int max_unauth_per_host;
    int grace_ms;         /* an unauthenticated connection lives this long */
    const char *log_name; /* for log lines, e.g. "coordinator" */
} msr_rpc_acceptor_config_t;

/* Binds and listens on config->address and starts the accepting thread,
 * which hands connections to server (started already). *port_p gets the
 * bound port. MSR_ERR_ADDR_IN_USE when the address cannot be bound. */
msr_status_t msr_rpc_acceptor_start(grpc_server *server, const msr_rpc_acceptor_config_t *config,
                                    int *port_p, msr_rpc_acceptor_t **acceptor_p);

/* A call on the connection gRPC names peer ("fd:N") carried the right
 * token: the connection is no longer closed after the grace period, nor
 * counted against its host. Any thread. */
void msr_rpc_acceptor_authenticated(msr_rpc_acceptor_t *acceptor, const char *peer);

/* The address of the peer gRPC names peer ("fd:N") as "ipv4:1.2.3.4:5678"
 * into out; 0 if known, -1 otherwise. Any thread. */
int msr_rpc_acceptor_peer(msr_rpc_acceptor_t *acceptor, const char *peer, char *out, size_t outlen);

/* Stops accepting: joins the thread and closes the listening socket;
 * connections already handed to gRPC stay gRPC's. The two calls above stay
 * safe until destroy. Once only, not from the accepting thread. */
void msr_rpc_acceptor_stop(msr_rpc_acceptor_t *acceptor);

/* Stops the acceptor if that was not done, and frees it. NULL does
 * nothing. */
void msr_rpc_acceptor_destroy(msr_rpc_acceptor_t *acceptor);

#endif
