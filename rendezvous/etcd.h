/* A small etcd v3 client over gRPC (etcd's own method paths, messages from
 * rendezvous/etcd.proto): the reads, writes, transactions and leases that a
 * job's coordinator state and its election need. Every call is blocking,
 * bounded by its deadline, and goes to the endpoints in turn until one
 * answers. Thread-compatible (one thread at a time per client). */
#ifndef MSR_RENDEZVOUS_ETCD_H
#define MSR_RENDEZVOUS_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"

typedef struct msr_etcd msr_etcd_t;

/* A client for endpoints "host:port[,host:port...]" (an "http://" prefix is
 * accepted). MSR_ERR_INVALID_ARG (with msr_err_msg()) when the list is bad.
 * Connects lazily. */
msr_status_t msr_etcd_create(const char *endpoints, msr_etcd_t **etcd_p);
void msr_etcd_destroy(msr_etcd_t *etcd);

/* The endpoint that answered last (for messages). */
const char *msr_etcd_endpoint(const msr_etcd_t *etcd);

/* One key read back: value (msr_malloc'ed, NUL-terminated, NULL if absent). */
typedef struct msr_etcd_kv {
    int found;
    uint8_t *value;
    size_t len;
    int64_t lease, create_revision, mod_revision;
} msr_etcd_kv_t;

void msr_etcd_kv_free(msr_etcd_kv_t *kv);

msr_status_t msr_etcd_get(msr_etcd_t *etcd, const char *key, uint64_t deadline, msr_etcd_kv_t *kv);

/* Calls fn for every key under prefix, in key order; stops at fn's first
 * non-MSR_OK and returns it. */
typedef msr_status_t (*msr_etcd_each_fn)(const char *key, const uint8_t *value, size_t len,
                                         void *arg);
msr_status_t msr_etcd_get_prefix(msr_etcd_t *etcd, const char *prefix, uint64_t deadline,
                                 msr_etcd_each_fn fn, void *arg);

/* One write of a transaction: a put (value, lease 0: none), or with
 * value NULL a delete of key or, with prefix set, of every key under it. */
typedef struct msr_etcd_op {
    const char *key;
    const uint8_t *value;
    size_t len;
    int64_t lease;
    int prefix;
} msr_etcd_op_t;

/* Applies ops atomically. With guard_key, only when that key exists and is
 * held by lease guard_lease (guard_lease 0: only when the key is absent);
 * *applied says whether they were (may be NULL without a guard). */
msr_status_t msr_etcd_txn(msr_etcd_t *etcd, const char *guard_key, int64_t guard_lease,
                          const msr_etcd_op_t *ops, size_t nops, uint64_t deadline, int *applied);

/* Leases: grant one of ttl seconds (*ttl_p gets what etcd granted, which may
 * be longer); keep it alive (*ttl_p <= 0: it has expired); revoke it. */
msr_status_t msr_etcd_lease_grant(msr_etcd_t *etcd, int64_t ttl, uint64_t deadline, int64_t *id_p,
                                  int64_t *ttl_p);
msr_status_t msr_etcd_lease_keepalive(msr_etcd_t *etcd, int64_t id, uint64_t deadline,
                                      int64_t *ttl_p);
msr_status_t msr_etcd_lease_revoke(msr_etcd_t *etcd, int64_t id, uint64_t deadline);

#endif
