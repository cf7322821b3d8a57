/* What the pieces of the UCX engine (engine*.c) share with each other.
 * Private to comm/ucx/engine*.c; the engine's interface to the rest of the
 * backend is in ucx_impl.h. */
#ifndef MSRUN_COMM_UCX_ENGINE_IMPL_H
#define MSRUN_COMM_UCX_ENGINE_IMPL_H

#include <stdint.h>

#include "comm/ucx/ucx_impl.h"

/* engine.c: the poll set (the event fd, then the live members' pidfds),
 * rebuilt after a death; frees the requests UCX handed back. Called with
 * the lock held. */
void ucx_engine_rebuild_pollfds(ucx_engine_t *e);
void ucx_engine_reap_orphans(ucx_engine_t *e);

/* engine_peers.c: this process's PID namespace (0 when unknown); the
 * exchange of the group's worker addresses through the store (index: this
 * member's place), filling in the peers' table. */
uint64_t ucx_engine_pid_namespace(void);
msr_status_t ucx_engine_exchange_addresses(ucx_engine_t *e, int n, const int *world_ranks,
                                           int index, const void *addr, size_t addr_len);

/* engine_fail.c: deaths and abort notices passed on to the communicators
 * that have the peer; the local members' liveness, by pidfd or (without
 * one) by kill(pid, 0). Called with the lock held. */
void ucx_engine_handle_deaths(ucx_engine_t *e);
void ucx_engine_handle_aborts(ucx_engine_t *e);
void ucx_engine_check_liveness(ucx_engine_t *e);
void ucx_engine_check_liveness_slow(ucx_engine_t *e);

#endif
